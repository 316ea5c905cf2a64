"""Differential test driven by Apache Curator 5.5 (the framework and its
recipes: locks, read-write locks, semaphores, leader latches, atomic and
shared counters, CuratorCache over persistent recursive watches, queues,
barriers, persistent nodes, transactions) over ZooKeeper 3.8's Java client.
tests/compat/java/CuratorScenario.java is compiled with javac (beside
CompatScenario.java, whose step printer it uses) against the Curator jars
`make test-deps` puts in .deps/maven, and run against ZooKeeper (one
standalone server, once per module) and against Keel as one server and as a
3-node cluster (Curator gets a connect string listing the three nodes)."""

import shutil
import subprocess

import pytest

from conftest import beside_reference
from harness.curator import compile_curator
from harness.trace import Trace

from compat.topology import compare_traces

# The scenario's own waits are at most 20 s each; a run takes about 10 s.
RUN_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def scenario_classes():
    classpath, out = compile_curator(["CompatScenario.java", "CuratorScenario.java"], "javac-curator")
    yield classpath
    shutil.rmtree(out, ignore_errors=True)


def run_curator(classpath, server, name):
    p = subprocess.run(["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", classpath, "CuratorScenario",
                        server.address],
                       capture_output=True, text=True, timeout=RUN_TIMEOUT_S, start_new_session=True)
    trace = Trace(name)
    trace.add_printed(p.stdout)
    if p.returncode != 0:
        trace.add_entry("java exit status", {"code": p.returncode, "stderr_tail": p.stderr[-2000:]})
    return trace


def test_curator_recipes_match_zookeeper(servers, candidate, keel_topology, scenario_classes, zk_reference):
    other = servers(candidate, topology=keel_topology, name="%s-curator-%s" % (candidate, keel_topology))
    ref, zk, got = beside_reference(zk_reference, "curator",
                                    lambda zk: run_curator(scenario_classes, zk, "zookeeper"),
                                    other, lambda server: run_curator(scenario_classes, server, candidate),
                                    name="zk-curator")
    assert ref.entries and ref.entries[-1][0] == "done", \
        "Curator scenario failed against ZooKeeper itself:\n%r" % ref.entries[-3:]
    p1 = zk.workdir + "-curator-trace.json"
    p2 = other.workdir + "-curator-trace.json"
    ref.dump(p1)
    got.dump(p2)
    differences = compare_traces("curator", candidate, keel_topology, ref.normalised(), got.normalised())
    assert not differences, ("%d step(s) of the Curator scenario differ (%s %s; traces %s, %s):\n%s"
                             % (len(differences), candidate, keel_topology, p1, p2, "\n".join(differences)))
