"""Churn leaves nothing behind (Keel only): a 3-node cluster takes ROUNDS
rounds of SESSIONS_PER_ROUND short sessions, spread over the three
members. Each session makes an ephemeral and an ephemeral sequential
node, sets a data watch, an exists watch on a node that never comes, a
child watch, a persistent and a persistent recursive watch, writes and
deletes a node of its own (one of them in a multi); a write of the shared
node fires the data watches; then half the sessions close and half just
drop their connection and expire.

Afterwards every member must be back where it started, exactly: the
znode, ephemeral, watch and session counts of mntr, and one tree digest.
And memory must not grow with the sessions: each member's RSS at the end
may exceed its RSS after WARM_ROUNDS by at most RSS_GROWTH_MAX_BYTES,
about 4 KiB per session of the later rounds (what a leaked session
record, watch or buffer would pass; measured growth was within ±2 MiB
over 12,000 sessions). Snapshots every few hundred entries keep the
in-memory Raft log, which grows between snapshots by design, out of the
measure."""

import time

import pytest

from conftest import candidate_kind, report_summary
from harness import mntr, rss_bytes
from harness import zkproto as zp

ROUNDS = 14
SESSIONS_PER_ROUND = 200
WARM_ROUNDS = 4
# A session sends no ping while the rest of its round is made (up to a
# few seconds on a loaded machine): the timeout outlasts a round. The
# test settings' longest (20 ticks of 500 ms).
SESSION_TIMEOUT_MS = 10000
RSS_GROWTH_MAX_BYTES = 8 << 20
SNAPSHOT_EVERY_ENTRIES = 300
SETTLE_TIMEOUT_S = 30.0
COUNTS = ("zk_znode_count", "zk_ephemerals_count", "zk_watch_count", "zk_global_sessions")


def ok(reply):
    hdr, _ = reply
    assert hdr["err"] == 0, zp.error_name(hdr["err"])


def one_session(port, n):
    """A session that leaves state on every table the server keeps."""
    conn = zp.RawConnection(port, timeout=15.0)
    conn.handshake(timeout_ms=SESSION_TIMEOUT_MS)
    err, _ = conn.create("/churn/e-%d" % n, b"e" * 100, flags=zp.EPHEMERAL)
    assert err == 0, zp.error_name(err)
    err, _ = conn.create("/churn/q-", b"q", flags=zp.EPHEMERAL_SEQUENTIAL)
    assert err == 0, zp.error_name(err)
    ok(conn.request(zp.GET_DATA, zp.path_watch_body("/churn/shared", True)))
    hdr, _ = conn.request(zp.EXISTS, zp.path_watch_body("/churn/never-%d" % n, True))
    assert hdr["err"] == -101, zp.error_name(hdr["err"])
    ok(conn.request(zp.GET_CHILDREN, zp.path_watch_body("/churn/own", True)))
    ok(conn.request(zp.ADD_WATCH, zp.add_watch_body("/churn/p-%d" % n, zp.ADD_WATCH_PERSISTENT)))
    ok(conn.request(zp.ADD_WATCH, zp.add_watch_body("/churn/r-%d" % n, zp.ADD_WATCH_PERSISTENT_RECURSIVE)))
    err, _ = conn.create("/churn/own/n-%d" % n, b"d" * 512)
    assert err == 0, zp.error_name(err)
    ok(conn.request(zp.MULTI, zp.multi_body([
        (zp.CREATE, zp.create_body("/churn/own/m-%d" % n, b"m")),
        (zp.DELETE, zp.delete_body("/churn/own/m-%d" % n)),
    ])))
    return conn


def counts(port):
    m = mntr(port)
    return tuple(int(m.get(k, "-1")) for k in COUNTS) + (m.get("keel_tree_digest"),)


def run_round(ports, admin, first):
    conns = [one_session(ports[i % len(ports)], first + i) for i in range(SESSIONS_PER_ROUND)]
    ok(admin.request(zp.SET_DATA, zp.set_data_body("/churn/shared", b"round %d" % first)))
    for i, conn in enumerate(conns):
        hdr, _ = conn.request(zp.DELETE, zp.delete_body("/churn/own/n-%d" % (first + i)))
        assert hdr["err"] == 0, zp.error_name(hdr["err"])
        if i % 2 == 0:
            assert conn.close_session() == 0
        conn.close()  # the odd ones expire


def wait_settled(ports, want, admin):
    """Until every member's counts are `want` and their digests equal;
    the admin session pings meanwhile (it holds no watch, so its pings
    change no count)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        assert admin.ping()["err"] == 0
        now = [counts(p) for p in ports]
        if all(c[:4] == want for c in now) and len({c[4] for c in now}) == 1:
            return now
        if time.monotonic() > deadline:
            raise AssertionError("members did not come back to %s (%s): %r" % (want, COUNTS, now))
        time.sleep(0.25)


@pytest.mark.timeout(300)
def test_session_and_watch_churn_leaves_no_state_and_no_memory_behind(keel_cluster):
    if candidate_kind() != "keel":
        pytest.skip("Keel's mntr counts and RSS")
    cluster = keel_cluster("churn", snapshot_every_entries=SNAPSHOT_EVERY_ENTRIES)
    ports = [n.port for n in cluster.nodes]
    admin = zp.RawConnection(ports[0], timeout=15.0)
    admin.handshake(timeout_ms=30000)
    for path in ("/churn", "/churn/shared", "/churn/own"):
        err, _ = admin.create(path)
        assert err == 0, zp.error_name(err)
    cluster.wait_converged()
    baseline = counts(ports[0])[:4]
    assert baseline[1:3] == (0, 0) and baseline[3] == 1, baseline

    started = time.monotonic()
    warm = None
    for r in range(ROUNDS):
        run_round(ports, admin, r * SESSIONS_PER_ROUND)
        if r + 1 == WARM_ROUNDS:
            wait_settled(ports, baseline, admin)
            warm = [rss_bytes(n.proc.pid) for n in cluster.nodes]
    took = time.monotonic() - started
    settled = wait_settled(ports, baseline, admin)
    end = [rss_bytes(n.proc.pid) for n in cluster.nodes]
    admin.close()
    growth = [e - w for e, w in zip(end, warm)]
    sessions = ROUNDS * SESSIONS_PER_ROUND
    report_summary("churn: %d sessions (half expired) in %.1f s over 3 members; counts back to %s on all; "
                   "RSS after warm-up %s MiB, at the end %s MiB"
                   % (sessions, took, dict(zip(COUNTS, settled[0][:4])),
                      [round(w / 2**20, 1) for w in warm], [round(e / 2**20, 1) for e in end]))
    for node, grew in zip(cluster.nodes, growth):
        assert grew < RSS_GROWTH_MAX_BYTES, \
            "%s grew %d bytes over %d sessions after warm-up" % (
                node.name, grew, (ROUNDS - WARM_ROUNDS) * SESSIONS_PER_ROUND)
