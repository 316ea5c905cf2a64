"""Differential test on random operation streams: two kazoo sessions draw
seeded random operations over a small tree (creates of every mode with
data, ACLs and sequence flags; deletes, setData and setACL with right and
wrong versions; reads of data, stats, children and ACLs; multi
transactions mixing them, checks included; one-shot, persistent and
recursive watches, their removal and their events; getEphemerals and
getAllChildrenNumber; session restarts), against Apache ZooKeeper 3.8
and against Keel (one node and a 3-node cluster), and every result is
compared after the usual normalisation (harness.trace: zxids in order of
appearance, times, session ids). The scenario of test_kazoo_compat.py
tests what we thought of; this one finds what we did not.

A session syncs before it acts after the other one did (ZooKeeper's
ensemble guarantees: scenario.py). Children are compared sorted.
checkWatches is not drawn: ZooKeeper 3.8's answers true when any session
watches the path (its WatchManager.containsWatcher looks at the path's
watchers, not the caller's), Keel's only for the caller's own watches, as
ZooKeeper 3.9 does (crates/tree/src/watch/mod.rs, `contains`); the random
streams found that difference first, scenario.py tests the caller's own.

KEEL_COMPAT_RANDOM_STEPS sets the operations per seed,
KEEL_COMPAT_RANDOM_SEEDS the seeds (comma-separated)."""

import os
import random

import pytest
from kazoo.security import OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, make_digest_acl

from compat.scenario import ScenarioClients, sorted_children, xsync
from harness.kazoo_ext import (
    ADD_WATCH_PERSISTENT, ADD_WATCH_PERSISTENT_RECURSIVE, WATCHER_ANY, WATCHER_CHILDREN, WATCHER_DATA,
    AddWatch, GetAllChildrenNumber, GetEphemerals, RemoveWatches, call_ext,
)
from compat.topology import compare_traces
from harness.trace import Trace

STEPS = int(os.environ.get("KEEL_COMPAT_RANDOM_STEPS", "600"))
SEEDS = [int(s) for s in os.environ.get("KEEL_COMPAT_RANDOM_SEEDS", "1,2").split(",")]

ROOT = "/rnd"
# Paths the operations draw from: parents and children, so that creates
# meet NoNode and NodeExists, deletes NotEmpty, and ephemerals refuse
# children.
PATHS = [ROOT, ROOT + "/a", ROOT + "/b", ROOT + "/a/x", ROOT + "/a/y", ROOT + "/b/x",
         ROOT + "/b/x/z", ROOT + "/e"]
VALUES = [b"", b"v", b"value-2", bytes(range(8)), b"x" * 300]
VERSIONS = [-1, -1, 0, 0, 1, 2, 7]
ACLS = {
    "open": OPEN_ACL_UNSAFE,
    "read-only": READ_ACL_UNSAFE,
    "digest": [make_digest_acl("alice", "secret", all=True)],
    "open+read": OPEN_ACL_UNSAFE + READ_ACL_UNSAFE,
}


class Stream:
    """The random operations of one seed, as (client name, label, callable)."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def path(self):
        return self.r.choice(PATHS)

    def create_args(self):
        r = self.r
        flags = {
            "ephemeral": r.random() < 0.25,
            "sequence": r.random() < 0.2,
        }
        acl = r.choice(["open", "open", "open", "read-only", "digest"])
        return self.path(), r.choice(VALUES), acl, flags

    def transaction_ops(self):
        """1-4 operations of a multi, as (kind, args)."""
        ops = []
        for _ in range(self.r.randrange(1, 5)):
            kind = self.r.choice(["create", "delete", "set_data", "check"])
            if kind == "create":
                path, value, _acl, flags = self.create_args()
                ops.append(("create", (path, value, flags["ephemeral"], flags["sequence"])))
            elif kind == "delete":
                ops.append(("delete", (self.path(), self.r.choice(VERSIONS))))
            elif kind == "set_data":
                ops.append(("set_data", (self.path(), self.r.choice(VALUES), self.r.choice(VERSIONS))))
            else:
                ops.append(("check", (self.path(), self.r.choice(VERSIONS))))
        return ops

    def draw(self):
        """(client name, label, operation(client) -> result)."""
        r = self.r
        who = r.choice("AAB")
        kind = r.choice(["create", "create", "create", "delete", "delete", "set", "get", "exists",
                         "children", "get_acls", "set_acls", "multi", "multi", "watch", "watch",
                         "events", "restart", "addwatch", "removewatch", "ephemerals"])
        if kind == "create":
            path, value, acl, flags = self.create_args()
            label = "create %s %s acl=%s %s" % (path, value[:8], acl, sorted(k for k, v in flags.items() if v))
            return who, label, lambda c: c.create(path, value, acl=ACLS[acl], include_data=True, **flags)
        if kind == "delete":
            path, version = self.path(), r.choice(VERSIONS)
            return who, "delete %s version=%d" % (path, version), lambda c: c.delete(path, version=version)
        if kind == "set":
            path, value, version = self.path(), r.choice(VALUES), r.choice(VERSIONS)
            return who, "set %s version=%d" % (path, version), lambda c: c.set(path, value, version=version)
        if kind == "get":
            path = self.path()
            return who, "get " + path, lambda c: c.get(path)
        if kind == "exists":
            path = self.path()
            return who, "exists " + path, lambda c: c.exists(path)
        if kind == "children":
            path = self.path()
            return who, "children " + path, lambda c: sorted_children(c, path, include_data=True)
        if kind == "get_acls":
            path = self.path()
            return who, "get_acls " + path, lambda c: c.get_acls(path)
        if kind == "set_acls":
            path, acl, version = self.path(), r.choice(sorted(ACLS)), r.choice(VERSIONS)
            return (who, "set_acls %s %s version=%d" % (path, acl, version),
                    lambda c: c.set_acls(path, ACLS[acl], version=version))
        if kind == "watch":
            path, how = self.path(), r.choice(["get", "exists", "children"])
            tag = "%s %s" % (how, path)

            def watch(c):
                if how == "get":
                    return c.get(path, watch=c.watcher(tag))
                if how == "exists":
                    return c.exists(path, watch=c.watcher(tag))
                return sorted_children(c, path, watch=c.watcher(tag))
            return who, "watch " + tag, watch
        if kind == "addwatch":
            path = self.path()
            mode = r.choice([ADD_WATCH_PERSISTENT, ADD_WATCH_PERSISTENT_RECURSIVE,
                             ADD_WATCH_PERSISTENT_RECURSIVE, 7])
            return who, "addwatch %s mode=%d" % (path, mode), lambda c: call_ext(c, AddWatch(path, mode))
        if kind == "removewatch":
            path = self.path()
            kind_of = r.choice([WATCHER_DATA, WATCHER_CHILDREN, WATCHER_ANY])
            return (who, "RemoveWatches %s type=%d" % (path, kind_of),
                    lambda c: call_ext(c, RemoveWatches(path, kind_of)))
        if kind == "ephemerals":
            if r.random() < 0.5:
                prefix = r.choice(["/", ROOT, ROOT + "/a", ROOT + "/b/"])
                return who, "getEphemerals " + prefix, lambda c: sorted(call_ext(c, GetEphemerals(prefix)))
            path = self.path()
            return (who, "getAllChildrenNumber " + path,
                    lambda c: call_ext(c, GetAllChildrenNumber(path)))
        if kind == "restart" and r.random() < 0.3:
            # B's session ends (its ephemerals and watches with it) and a
            # new one takes its place.
            return "B", "restart", RESTART
        if kind in ("events", "restart"):
            return who, "events", lambda c: c.take_events()
        ops = self.transaction_ops()
        return who, "multi %r" % (ops,), lambda c: commit(c, ops)


def commit(client, ops):
    t = client.transaction()
    for kind, args in ops:
        if kind == "create":
            path, value, ephemeral, sequence = args
            t.create(path, value, ephemeral=ephemeral, sequence=sequence)
        elif kind == "delete":
            t.delete(args[0], version=args[1])
        elif kind == "set_data":
            t.set_data(args[0], args[1], version=args[2])
        else:
            t.check(args[0], args[1])
    return t.commit()


# The operation that ends B's session (run_random does it).
RESTART = object()


def authenticated(client):
    """Both sessions can act on digest-protected nodes too."""
    client.add_auth("digest", "alice:secret")
    return client


def run_random(make_client, trace, seed):
    clients = {"A": authenticated(make_client("A")), "B": authenticated(make_client("B"))}
    stream = Stream(seed)
    last = None
    sessions = 1
    for step in range(STEPS):
        who, label, operation = stream.draw()
        client = clients[who]
        if last is not None and last != who:
            xsync(client)
        last = who
        if operation is RESTART:
            client.stop()
            client.close()
            sessions += 1
            clients["B"] = authenticated(make_client("B%d" % sessions))
            trace.record("%d B: restart" % step, "new session")
            continue
        trace.call("%d %s: %s" % (step, who, label), operation, client)
    # The whole tree at the end, as A sees it.
    xsync(clients["A"])
    for path in PATHS:
        trace.call("final children " + path, sorted_children, clients["A"], path, include_data=True)


def run_against(server, name, seed):
    trace = Trace(name)
    factory = ScenarioClients(server, trace)
    try:
        run_random(factory, trace, seed)
    finally:
        factory.close_all()
    return trace


@pytest.mark.parametrize("seed", SEEDS)
def test_random_operations_match_zookeeper(servers, candidate, keel_topology, zk_reference, seed):
    ref, zk = zk_reference("random-%d" % seed, lambda zk: run_against(zk, "zookeeper", seed),
                           name="zk-ref-random-%d" % seed)
    other = servers(candidate, topology=keel_topology, name="%s-%s-random-%d" % (candidate, keel_topology, seed))
    got = run_against(other, candidate, seed)
    path_ref, path_got = zk.workdir + "-trace.json", other.workdir + "-trace.json"
    ref.dump(path_ref)
    got.dump(path_got)
    differences = compare_traces("random", candidate, keel_topology, ref.normalised(), got.normalised())
    assert not differences, (
        "%d step(s) differ between ZooKeeper and %s %s, seed %d (traces: %s, %s):\n%s"
        % (len(differences), candidate, keel_topology, seed, path_ref, path_got, "\n".join(differences)))


def test_the_stream_draws_every_kind_of_operation():
    """A stream that drew only reads would pass the test above and prove
    nothing."""
    stream = Stream(SEEDS[0])
    labels = {stream.draw()[1].split(" ")[0] for _ in range(STEPS)}
    assert labels == {"create", "delete", "set", "get", "exists", "children", "get_acls", "set_acls",
                      "multi", "watch", "events", "restart", "addwatch", "RemoveWatches",
                      "getEphemerals", "getAllChildrenNumber"}, labels
