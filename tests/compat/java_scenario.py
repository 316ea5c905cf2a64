"""Scenario programs run by the JVM (tests/compat/java: the Java client's
CompatScenario, Curator's CuratorScenario) that print their steps as JSON
lines: one run against a server becomes a Trace, and a candidate's trace
is compared with ZooKeeper's, taken beside it."""

import subprocess

from conftest import beside_reference
from harness.trace import Trace

from compat.topology import compare_traces

# A scenario's own waits are bounded (at most 20 s each); a run takes 5-15 s.
RUN_TIMEOUT_S = 240


def run_java_scenario(classpath, main_class, server, name):
    """`java main_class ADDRESS` against `server`: its printed steps as a
    Trace; a non-zero exit adds a "java exit status" entry."""
    p = subprocess.run(["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", classpath, main_class,
                        server.address],
                       capture_output=True, text=True, timeout=RUN_TIMEOUT_S, start_new_session=True)
    trace = Trace(name)
    trace.add_printed(p.stdout)
    if p.returncode != 0:
        trace.add_entry("java exit status", {"code": p.returncode, "stderr_tail": p.stderr[-2000:]})
    return trace


def assert_scenario_matches_zookeeper(suite, what, classpath, main_class, servers, candidate, keel_topology,
                                      zk_reference):
    """Runs `main_class` against the candidate (in `keel_topology`) beside
    a standalone ZooKeeper and asserts that the normalised traces are
    equal but for what compat.topology excuses; `suite` names the traces
    and topology's tables, `what` the scenario in messages."""
    other = servers(candidate, topology=keel_topology, name="%s-%s-%s" % (candidate, suite, keel_topology))
    ref, zk, got = beside_reference(zk_reference, suite,
                                    lambda zk: run_java_scenario(classpath, main_class, zk, "zookeeper"),
                                    other, lambda server: run_java_scenario(classpath, main_class, server, candidate),
                                    name="zk-%s" % suite)
    assert ref.entries and ref.entries[-1][0] == "done", \
        "%s failed against ZooKeeper itself:\n%r" % (what, ref.entries[-3:])
    p1 = zk.workdir + "-%s-trace.json" % suite
    p2 = other.workdir + "-%s-trace.json" % suite
    ref.dump(p1)
    got.dump(p2)
    differences = compare_traces(suite, candidate, keel_topology, ref.normalised(), got.normalised())
    assert not differences, ("%d step(s) of the %s differ (%s %s; traces %s, %s):\n%s"
                             % (len(differences), what, candidate, keel_topology, p1, p2, "\n".join(differences)))
