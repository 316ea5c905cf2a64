"""Differential test: the kazoo/raw scenario against Apache ZooKeeper and
against Keel (or a second ZooKeeper with KEEL_COMPAT_AGAINST=zookeeper)."""

import json
import os

from harness.kazoo_ext import ClientFactory
from harness.trace import Trace, diff

from compat.scenario import run_scenario


def run_against(server, name):
    trace = Trace(name)
    factory = ClientFactory(server, trace)
    try:
        run_scenario(factory, trace)
    finally:
        factory.close_all()
    return trace


def dump(trace, server):
    path = server.workdir + "-trace.json"
    trace.dump(path)
    return path


def test_kazoo_scenario_matches_zookeeper(servers, candidate):
    zk = servers("zookeeper", name="zk-ref")
    ref = run_against(zk, "zookeeper")
    other = servers(candidate, name=candidate + "-cand")
    got = run_against(other, candidate)
    p1, p2 = dump(ref, zk), dump(got, other)
    differences = diff(ref.normalised(), got.normalised(), "zookeeper", candidate)
    assert not differences, (
        "%d step(s) differ between ZooKeeper and %s (traces: %s, %s):\n%s"
        % (len(differences), candidate, p1, p2, "\n".join(differences)))
