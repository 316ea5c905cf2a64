"""Comparing the znodes a real application leaves on ZooKeeper and on the
candidate (tests/compat/test_kafka_compat.py, test_clickhouse_compat.py):
each test dumps its tree as {path: what it compares of the node}."""


def assert_same_znodes(ref_tree, tree, candidate):
    """The same paths on both, and each path's dump equal."""
    only_ref = sorted(set(ref_tree) - set(tree))
    only_here = sorted(set(tree) - set(ref_tree))
    assert not only_ref and not only_here, "znodes only on ZooKeeper: %s; only on %s: %s" % (
        only_ref, candidate, only_here)
    differ = {p: (ref_tree[p], tree[p]) for p in ref_tree if ref_tree[p] != tree[p]}
    assert not differ, "znodes that differ (ZooKeeper, %s): %r" % (candidate, differ)
