"""Differential test: the kazoo/raw scenario against Apache ZooKeeper and
against Keel (or a second ZooKeeper with KEEL_COMPAT_AGAINST=zookeeper), Keel
as one server and as a 3-node cluster (keel_topology "cluster3": clients get a
connect string listing the three nodes). The reference is one standalone
ZooKeeper, run once per module (tests/conftest.py zk_reference); what may
differ by topology is listed in tests/compat/topology.py."""

from harness.trace import Trace

from compat.scenario import ScenarioClients, run_scenario
from compat.topology import compare_traces


def run_against(server, name):
    trace = Trace(name)
    factory = ScenarioClients(server, trace)
    try:
        run_scenario(factory, trace)
    finally:
        factory.close_all()
    return trace


def dump(trace, server):
    path = server.workdir + "-trace.json"
    trace.dump(path)
    return path


def test_kazoo_scenario_matches_zookeeper(servers, candidate, keel_topology, zk_reference):
    ref, zk = zk_reference("kazoo", lambda zk: run_against(zk, "zookeeper"), name="zk-ref")
    other = servers(candidate, topology=keel_topology, name="%s-%s" % (candidate, keel_topology))
    got = run_against(other, candidate)
    p1, p2 = dump(ref, zk), dump(got, other)
    differences = compare_traces("kazoo", candidate, keel_topology, ref.normalised(), got.normalised())
    assert not differences, (
        "%d step(s) differ between ZooKeeper and %s %s (traces: %s, %s):\n%s"
        % (len(differences), candidate, keel_topology, p1, p2, "\n".join(differences)))
