"""Differential test driven by the official Java client, in two releases:
ZooKeeper 3.8's (Debian's jars in /usr/share/java) and 3.9.5's (the client
Apache BookKeeper brings, in .deps/bookkeeper). tests/compat/java/
CompatScenario.java is compiled with javac against each into a temp dir and
run against ZooKeeper 3.8 (one standalone server, once per module and
client) and against Keel as one server and as a 3-node cluster (the client
gets a connect string listing the three nodes)."""

import os
import shutil
import subprocess

import pytest

from harness import ZK_CLIENT_CLASSPATH, make_workdir
from harness.bookkeeper import zookeeper_39_client_classpath

from compat.java_scenario import assert_scenario_matches_zookeeper

JAVA_SRC = os.path.join(os.path.dirname(__file__), "java", "CompatScenario.java")


# client release -> (suite: the traces' and compat.topology's name, classpath)
CLIENTS = {
    "3.8": ("java", lambda: ZK_CLIENT_CLASSPATH),
    "3.9": ("java-3.9", zookeeper_39_client_classpath),
}


@pytest.fixture(scope="module", params=sorted(CLIENTS))
def client(request):
    """(suite, classpath of the client and the compiled scenario)."""
    suite, classpath = CLIENTS[request.param]
    classpath = classpath()
    out = make_workdir("javac")
    subprocess.run(["javac", "-nowarn", "-d", out, "-cp", classpath, JAVA_SRC],
                   check=True, capture_output=True, timeout=180)
    yield suite, classpath + ":" + out
    shutil.rmtree(out, ignore_errors=True)


def test_java_client_scenario_matches_zookeeper(servers, candidate, keel_topology, client, zk_reference):
    suite, classpath = client
    assert_scenario_matches_zookeeper(suite, "Java-client scenario (%s)" % suite, classpath, "CompatScenario",
                                      servers, candidate, keel_topology, zk_reference)
