"""Data dirs written by a Keel release, checked in under tests/fixtures so
that every later Keel proves it still starts from them
(test_fixture_datadir.py). This module writes one and lists a served tree.

    PYTHONPATH=tests .venv/bin/python -m storage.fixture tests/fixtures/keel-<version>

starts a single node (server id 1, cluster name "keel", no peers: the
IDENTITY the test starts it with) on an empty data dir, runs WORKLOAD
(sessions, ephemerals, sequential, TTL and container nodes, ACLs, multi,
deletes; a snapshot after SNAPSHOT_EVERY_ENTRIES entries, a few hundred
transactions in the log after it), records the served tree (every znode's
data, Stat and ACL), the live sessions with their passwords and what the
next sequential child will be called into `<dir>.json`, then stops the
node with SIGTERM (sessions stay open: their ephemerals are in the data)
and copies its data dir to `<dir>`. Generate one per release whose formats
changed; keep the old ones.
"""

import json
import os
import shutil
import sys
import time

from kazoo.client import KazooClient
from kazoo.security import ACL, Id, make_digest_acl

from harness import KeelServer, SUPER_DIGEST, SUPER_PASSWORD, four_letter_word, srvr_zxid
from harness.kazoo_ext import CONTAINER_FLAG, TTL_FLAG, CreateContainer, CreateTTL, call_ext

# Entries (one per write here: the clients are synchronous) between
# snapshots: one snapshot part way, the rest of the workload in the log.
SNAPSHOT_EVERY_ENTRIES = 220
# ZooKeeper's largest TTL (EphemeralType: 2^40 - 1 ms, 34.8 years): the
# fixture's TTL nodes are not due before 2060.
TTL_MAX_MS = (1 << 40) - 1
SESSION_TIMEOUT_S = 30.0
# The server's settings while writing and while reading the fixture back
# (none of them is stored in the data dir; the reaper must not run while
# the listing is compared).
SETTINGS = {
    "super_digest": SUPER_DIGEST,
    "four_letter_words": ["*"],
    "container_check_interval_ms": 3_600_000,
    "max_session_timeout_ms": 60_000,
}
# System nodes the server makes itself (its config, quotas): not data.
SYSTEM_PREFIX = "/zookeeper"

OPEN = [ACL(31, Id("world", "anyone"))]
READ_ONLY = [ACL(1, Id("world", "anyone"))]


def connect(hosts, super_user=False):
    c = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT_S)
    c.start(timeout=30)
    if super_user:
        c.add_auth("digest", "super:%s" % SUPER_PASSWORD)
    return c


def workload(server):
    """Writes the fixture's data. Returns the clients whose sessions stay
    open (their ephemerals are part of the fixture)."""
    hosts = server.address
    admin = connect(hosts)
    admin.create("/app", b"application root")
    admin.create("/app/config", bytes(range(256)))
    admin.create("/app/empty", b"")
    admin.create("/app/big", b"0123456789abcdef" * 640)  # 10 KiB
    admin.create("/app/items", b"")
    for i in range(120):
        admin.create("/app/items/i%03d" % i, b"item %d" % i)
    for i in range(0, 120, 3):
        admin.set("/app/items/i%03d" % i, b"item %d v2" % i)
    for i in range(0, 120, 9):
        admin.set("/app/items/i%03d" % i, b"item %d v3" % i, version=-1)
    for i in range(5, 120, 10):
        admin.delete("/app/items/i%03d" % i)
    admin.create("/seq", b"")
    for _ in range(40):
        admin.create("/seq/n-", b"s", sequence=True)
    for i in range(0, 40, 7):
        admin.delete("/seq/n-%010d" % i)
    # ACLs: a digest user's node, world read-only, an ip ACL, a changed ACL.
    alice = make_digest_acl("alice", "alice-secret", all=True)
    admin.create("/acl", b"")
    admin.create("/acl/alice", b"alice's", acl=[alice])
    admin.create("/acl/readonly", b"look, don't touch", acl=READ_ONLY)
    admin.create("/acl/ip", b"local only", acl=[ACL(31, Id("ip", "127.0.0.1"))])
    admin.create("/acl/changed", b"", acl=OPEN)
    admin.set_acls("/acl/changed", [alice, ACL(1, Id("world", "anyone"))])
    # Containers: one with children (kept), one that never had a child
    # (kept: only a container that had one is reaped), TTL nodes of the
    # largest TTL, persistent and sequential.
    call_ext(admin, CreateContainer("/box", b"container", OPEN))
    admin.create("/box/a", b"in the box")
    admin.create("/box/b", b"")
    call_ext(admin, CreateContainer("/never-filled", b"", OPEN))
    admin.create("/ttl", b"")
    for i in range(3):
        call_ext(admin, CreateTTL("/ttl/t%d" % i, b"ttl %d" % i, OPEN, TTL_FLAG, TTL_MAX_MS))
    call_ext(admin, CreateTTL("/ttl/seq-", b"ttl seq", OPEN, 6, TTL_MAX_MS))
    assert CONTAINER_FLAG == 4
    # multi: all of it, and one that fails whole.
    tx = admin.transaction()
    tx.create("/multi", b"")
    tx.create("/multi/x", b"x")
    tx.set_data("/app/empty", b"set in a multi")
    tx.check("/app", 0)
    tx.delete("/app/items/i001")
    assert not any(isinstance(r, Exception) for r in tx.commit())
    tx = admin.transaction()
    tx.create("/multi/never", b"")
    tx.check("/app", 99)
    assert any(isinstance(r, Exception) for r in tx.commit())
    # Sessions: two stay open with ephemerals, one closes (its go).
    live = [connect(hosts), connect(hosts)]
    admin.create("/live", b"")
    for k, c in enumerate(live):
        for j in range(3):
            c.create("/live/s%d-e%d" % (k, j), b"ephemeral", ephemeral=True)
        c.create("/live/s%d-es-" % k, b"ephemeral sequential", ephemeral=True, sequence=True)
    gone = connect(hosts)
    gone.create("/live/gone", b"", ephemeral=True)
    gone.stop()
    gone.close()
    # The rest of the log: more changes after the snapshot.
    for i in range(60):
        admin.set("/app/config", bytes(range(i, 256)) + b"%d" % i)
    for i in range(80):
        admin.create("/app/tail-%02d" % i, b"after the snapshot")
    for i in range(0, 80, 4):
        admin.delete("/app/tail-%02d" % i)
    admin.stop()
    admin.close()
    return live


def listing(hosts):
    """The served tree as a list of {path, data (hex), stat, acl}, sorted
    by path, without the server's own /zookeeper nodes."""
    c = connect(hosts, super_user=True)
    nodes = []

    def walk(path):
        data, stat = c.get(path)
        acls, _ = c.get_acls(path)
        nodes.append({
            "path": path,
            "data": data.hex(),
            "stat": {k: getattr(stat, k) for k in (
                "czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
                "ephemeralOwner", "dataLength", "numChildren", "pzxid")},
            "acl": [[a.perms, a.id.scheme, a.id.id] for a in acls],
        })
        for child in sorted(c.get_children(path)):
            full = (path.rstrip("/") + "/" + child)
            if not full.startswith(SYSTEM_PREFIX):
                walk(full)

    walk("/")
    c.stop()
    c.close()
    return nodes


def sessions(port):
    """The global sessions `dump` lists: {hex id: timeout ms}."""
    text = four_letter_word(port, "dump").decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("0x") and "\t" in line and line.endswith("ms"):
            session, timeout = line.split("\t")
            found[session] = int(timeout[:-2])
    return found


def generate(out_dir):
    out_dir = os.path.abspath(out_dir)
    assert not os.path.exists(out_dir), "%s exists: fixtures are never rewritten" % out_dir
    server = KeelServer(name="fixture", test_defaults=False,
                        settings=dict(SETTINGS, snapshot_every_entries=SNAPSHOT_EVERY_ENTRIES))
    server.start(timeout=60)
    try:
        live = workload(server)
        deadline = time.monotonic() + 30
        while not os.listdir(os.path.join(server.data_dir, "snapshots")):
            assert time.monotonic() < deadline, "no snapshot was written"
            time.sleep(0.1)
        tree = listing(server.address)  # its own session comes and goes first
        recorded = {
            "written by": four_letter_word(server.port, "srvr").decode().splitlines()[0],
            "last zxid": srvr_zxid(server.port),
            "sessions": sessions(server.port),
            "live sessions": [{"id": "%#x" % c.client_id[0], "password": c.client_id[1].hex()} for c in live],
            "tree": tree,
        }
        # ZooKeeper names a sequential child after its parent's stored
        # cversion (its child creates); a client's Stat shows
        # 2 x cversion - numChildren (DataNode.copyStat).
        seq = next(n for n in recorded["tree"] if n["path"] == "/seq")["stat"]
        creates = (seq["cversion"] + seq["numChildren"]) // 2
        recorded["next sequential"] = {"path": "/seq/n-", "name": "/seq/n-%010d" % creates}
        assert len(recorded["sessions"]) == len(live), recorded["sessions"]
        snapshots = os.listdir(os.path.join(server.data_dir, "snapshots"))
        assert len(snapshots) == 1, "one snapshot, the rest in the log: %r" % snapshots
    finally:
        server.stop()
    for c in live:
        c.stop()  # the server is gone: their sessions stay in the data
        c.close()
    shutil.copytree(server.data_dir, out_dir)
    with open(out_dir + ".json", "w") as f:
        json.dump(recorded, f, indent=1, sort_keys=True)
        f.write("\n")
    server.cleanup()
    return recorded


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m storage.fixture OUT_DIR")
    generate(sys.argv[1])
