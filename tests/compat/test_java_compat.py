"""Differential test driven by the official Java client (ZooKeeper 3.8 jars
from /usr/share/java): tests/compat/java/CompatScenario.java is compiled with
javac into a temp dir and run against ZooKeeper (one standalone server, once
per module) and against Keel as one server and as a 3-node cluster (the client
gets a connect string listing the three nodes)."""

import os
import shutil
import subprocess

import pytest

from harness import ZK_CLIENT_CLASSPATH, make_workdir

from compat.java_scenario import assert_scenario_matches_zookeeper

JAVA_SRC = os.path.join(os.path.dirname(__file__), "java", "CompatScenario.java")


@pytest.fixture(scope="module")
def scenario_classes():
    if not shutil.which("javac"):
        pytest.skip("javac not installed")
    out = make_workdir("javac")
    subprocess.run(["javac", "-nowarn", "-d", out, "-cp", ZK_CLIENT_CLASSPATH, JAVA_SRC],
                   check=True, capture_output=True, timeout=180)
    yield out
    shutil.rmtree(out, ignore_errors=True)


def test_java_client_scenario_matches_zookeeper(servers, candidate, keel_topology, scenario_classes, zk_reference):
    assert_scenario_matches_zookeeper("java", "Java-client scenario", ZK_CLIENT_CLASSPATH + ":" + scenario_classes,
                                      "CompatScenario", servers, candidate, keel_topology, zk_reference)
