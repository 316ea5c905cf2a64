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

import pytest

from harness.curator import compile_curator

from compat.java_scenario import assert_scenario_matches_zookeeper


@pytest.fixture(scope="module")
def scenario_classes():
    classpath, out = compile_curator(["CompatScenario.java", "CuratorScenario.java"], "javac-curator")
    yield classpath
    shutil.rmtree(out, ignore_errors=True)


def test_curator_recipes_match_zookeeper(servers, candidate, keel_topology, scenario_classes, zk_reference):
    assert_scenario_matches_zookeeper("curator", "Curator scenario", scenario_classes, "CuratorScenario",
                                      servers, candidate, keel_topology, zk_reference)
