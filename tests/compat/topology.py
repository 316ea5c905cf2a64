"""What differs, on purpose or by a known bug, when the candidate runs as a
3-member cluster instead of one server, and the few answers Keel gives
differently from ZooKeeper 3.8 on purpose in every topology
(KEEL_DELIBERATE). Every entry names the step and why; nothing else is ever
excused.

The reference is always one standalone ZooKeeper. Against it, a Keel
cluster and a ZooKeeper ensemble (KEEL_COMPAT_AGAINST=zookeeper, `make
test-selfcheck`) both differ only where an ensemble shows its membership
(`conf`'s quorum keys, /zookeeper/config: ENSEMBLE_VS_STANDALONE; Keel shows
its members as ZooKeeper does since membership changes, see README); reconfig
stays disabled by default on both; srvr/mntr's Mode value, the one visible
role, is not compared by any scenario, only key sets are.
Known Keel bugs that show only in cluster mode: KEEL_CLUSTER_BUGS (the test is
then an xfail naming them, as long as no other step differs).
"""

_CONFIG_NODE = ("an ensemble's /zookeeper/config holds its membership (server.N=...;version=0, "
                "dataLength 186, version -1, mtime set); a standalone server's is empty")

# suite -> {step label: why an ensemble answers differently from a standalone
# server}; only for candidate zookeeper, topology cluster3 (the selfcheck)
ENSEMBLE_VS_STANDALONE = {
    "kazoo": {
        "exists /zookeeper/config": _CONFIG_NODE,
        "get /zookeeper/config": _CONFIG_NODE,
        "get_acls /zookeeper/config": _CONFIG_NODE,
        "4lw conf keys": "an ensemble member's conf also prints initLimit, syncLimit, electionAlg, electionPort, "
                         "quorumPort, peerType, membership:, server.N, version",
    },
    "java": {
        "getConfig": _CONFIG_NODE,
    },
    "java-3.9": {
        "getConfig": _CONFIG_NODE,
    },
    "cli_mt": {
        "get /zookeeper/config": _CONFIG_NODE,
    },
    "zkcli": {
        "get /zookeeper/config": _CONFIG_NODE,
    },
}

# suite -> {step label: "bug: ..."}; only for candidate keel, topology cluster3
KEEL_CLUSTER_BUGS = {
}

# suite -> {step label: why Keel answers differently from ZooKeeper 3.8 on
# purpose}; for candidate keel in every topology. The step's value is still
# recorded in the traces, only not compared.
KEEL_DELIBERATE = {
    "go": {
        # Keel's srvr/stat/mntr/envi print ZooKeeper 3.4's build date form
        # (crates/server/src/fourlw.rs BUILT_ON), which go-zookeeper's FLWSrvr
        # and kazoo parse; FLWSrvr's pattern (\d\d/\d\d/\d\d\d\d) fails on
        # ZooKeeper 3.8's "built on yyyy-MM-dd HH:mm z", so ZooKeeper's outcome
        # is a parse error and Keel's "parsed".
        "FLWSrvr": "Keel's srvr prints ZooKeeper 3.4's 'built on MM/dd/yyyy HH:mm z' on purpose (Go's FLWSrvr "
                   "and kazoo parse it; FLWSrvr cannot parse ZooKeeper 3.8's 'yyyy-MM-dd')",
    },
}


def known_differences(suite, candidate, topology):
    excused = {}
    if candidate == "keel":
        excused.update(KEEL_DELIBERATE.get(suite, {}))
    if topology != "single":
        excused.update(ENSEMBLE_VS_STANDALONE.get(suite, {}))
    return excused


def apply_known_differences(suite, candidate, topology, expected, actual):
    """Normalised traces with the values of the steps excused for this
    candidate/topology replaced, on both sides, by the reason (the labels stay,
    so the traces still have to line up step for step)."""
    excused = known_differences(suite, candidate, topology)
    if not excused:
        return expected, actual

    def mask(trace):
        return [[label, {"excused": excused[label]} if label in excused else value] for label, value in trace]

    return mask(expected), mask(actual)


def known_bugs(suite, candidate, topology):
    if candidate == "keel" and topology != "single":
        return dict(KEEL_CLUSTER_BUGS.get(suite, {}))
    return {}


def compare_traces(suite, candidate, topology, expected, actual):
    """diff() of two normalised traces (lists of [label, value]) after
    apply_known_differences. Excused steps are listed in the terminal summary.
    If every differing step is a known Keel cluster bug, the test becomes an
    xfail naming the bugs (pytest.xfail); otherwise the differences are
    returned (empty list: equal)."""
    import pytest
    from conftest import report_summary
    from harness.trace import diff

    excused = known_differences(suite, candidate, topology)
    if excused:
        report_summary("compat %s [%s %s]: %d step(s) not compared, known ensemble-vs-standalone or deliberate "
                       "differences (tests/compat/topology.py): %s" % (suite, candidate, topology, len(excused),
                                                                       "; ".join(sorted(excused))))
    expected, actual = apply_known_differences(suite, candidate, topology, expected, actual)
    differences = diff(expected, actual, "zookeeper", "%s-%s" % (candidate, topology))
    bugs = known_bugs(suite, candidate, topology)
    if differences and bugs and len(expected) == len(actual):
        differing = {e[0] for e, a in zip(expected, actual) if e != a}
        if differing <= set(bugs):
            pytest.xfail("known Keel cluster bug(s): " + " | ".join("%s: %s" % (k, bugs[k]) for k in sorted(differing)))
    return differences
