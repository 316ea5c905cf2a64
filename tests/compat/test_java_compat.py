"""Differential test driven by the official Java client (ZooKeeper 3.8 jars
from /usr/share/java): tests/compat/java/CompatScenario.java is compiled with
javac into a temp dir and run against ZooKeeper (one standalone server, once
per module) and against Keel as one server and as a 3-node cluster (the client
gets a connect string listing the three nodes)."""

import os
import shutil
import subprocess

import pytest

from conftest import beside_reference
from harness import ZK_CLIENT_CLASSPATH, make_workdir
from harness.trace import Trace

from compat.topology import compare_traces

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


def run_java(classes, server, name):
    cp = ZK_CLIENT_CLASSPATH + ":" + classes
    p = subprocess.run(["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", cp, "CompatScenario", server.address],
                       capture_output=True, text=True, timeout=240, start_new_session=True)
    trace = Trace(name)
    trace.add_printed(p.stdout)
    if p.returncode != 0:
        trace.add_entry("java exit status", {"code": p.returncode, "stderr_tail": p.stderr[-2000:]})
    return trace


def test_java_client_scenario_matches_zookeeper(servers, candidate, keel_topology, scenario_classes, zk_reference):
    other = servers(candidate, topology=keel_topology, name="%s-java-%s" % (candidate, keel_topology))
    ref, zk, got = beside_reference(zk_reference, "java", lambda zk: run_java(scenario_classes, zk, "zookeeper"),
                                    other, lambda server: run_java(scenario_classes, server, candidate),
                                    name="zk-java")
    assert ref.entries and ref.entries[-1][0] == "done", "Java scenario failed against ZooKeeper itself:\n%r" % ref.entries[-3:]
    p1 = zk.workdir + "-java-trace.json"
    p2 = other.workdir + "-java-trace.json"
    ref.dump(p1)
    got.dump(p2)
    differences = compare_traces("java", candidate, keel_topology, ref.normalised(), got.normalised())
    assert not differences, ("%d step(s) of the Java-client scenario differ (%s %s; traces %s, %s):\n%s"
                             % (len(differences), candidate, keel_topology, p1, p2, "\n".join(differences)))
