"""10,000 clients of a 3-node cluster (spread over its members, a session
each) through a leader change: the leader is killed (-9) and every client
must hold its own session again within the session timeout, none
expired. Keel, then an Apache ZooKeeper 3.8 ensemble in the same run,
printed side by side.

A client whose connection breaks, or whose ping goes unanswered for 2 s,
resumes its session (id and password) on the next member of its list,
as ZooKeeper clients do; the others ping every 0.5 s. Recovered: every
client answered on its own session after the kill. Then every client
keeps pinging until a full session timeout (plus the expiry timer's
slack) has passed since the new leader took over: no connection may be
closed and the new leader must still count every session (a session
that expired there would be closed everywhere). A Keel follower keeps
its clients through the election; ZooKeeper's followers drop theirs, so
there every client reconnects.

KEEL_SCALE_CONNECTIONS sets the count (default 10,000);
KEEL_SCALE_ZOOKEEPER=0 leaves the ZooKeeper run out. Only Keel's run is
asserted; a ZooKeeper run that fails its own checks is reported."""

import os
import time

import pytest

from conftest import report_summary, require_keel
from harness import mntr
from scale.fleet import ZK_SCALE_SETTINGS, Fleet, raise_file_limit

CONNECTIONS = int(os.environ.get("KEEL_SCALE_CONNECTIONS", "10000"))
WITH_ZOOKEEPER = os.environ.get("KEEL_SCALE_ZOOKEEPER", "1") != "0"
SESSION_TIMEOUT_MS = 10000  # the test settings' maximum (20 ticks of 500 ms)
PING_EVERY_S = 3.0
# A session expiring after the new leader took over would be gone this
# long after its deadline (the expiry timer's tick, the commit).
EXPIRY_SLACK_S = 3.0
FDS_SPARE = 500


def keep_alive(fleet):
    """Pings every open session when PING_EVERY_S has passed (opening
    10,000 may outlast a session timeout)."""
    last = [time.monotonic()]

    def ping():
        if time.monotonic() - last[0] >= PING_EVERY_S:
            unanswered = fleet.ping_all()
            assert not [s for s in unanswered if s.session_id], "pings unanswered while opening"
            last[0] = time.monotonic()
    return ping


def through_a_leader_change(group):
    timeout_s = SESSION_TIMEOUT_MS / 1000.0
    fleet = Fleet(CONNECTIONS, group.ports, SESSION_TIMEOUT_MS)
    try:
        opened_s = fleet.open(keepalive=keep_alive(fleet))
        assert not fleet.ping_all(), "pings unanswered before the kill"
        leader = group.leader()
        on_leader = sum(1 for s in fleet.sessions if s.port == leader.port)
        fleet.mark()
        killed = time.monotonic()
        leader.kill()
        live = [n for n in group.nodes if n is not leader]
        left = fleet.recover([n.port for n in live], deadline=killed + timeout_s)
        recovered_s = time.monotonic() - killed
        moved = sum(1 for s in fleet.sessions if s.reconnects)
        expired = sum(1 for s in fleet.sessions if s.expired)
        result = {"opened_s": opened_s, "on_leader": on_leader, "recovered_s": recovered_s, "moved": moved,
                  "expired": expired, "not_recovered": len(left), "lost_later": None, "sessions_after": None}
        if left:
            return result
        new_leader = group.leader(timeout=timeout_s)
        elected = time.monotonic()
        # Every session is kept alive past a full timeout after the new
        # leader took over: one it expired would lose its connection.
        lost = set()
        while time.monotonic() < elected + timeout_s + EXPIRY_SLACK_S:
            lost.update(s.index for s in fleet.ping_all())
            time.sleep(1.0)
        result["lost_later"] = len(lost)
        result["sessions_after"] = int(mntr(new_leader.port).get("zk_global_sessions", "-1"))
        return result
    finally:
        fleet.close()


def describe(kind, r):
    line = ("%-9s %d clients over 3 members (opened in %.1f s, %d on the leader); leader killed: every client "
            "on its own session again %.2f s later (%d resumed on another member), %d expired, %d not "
            "recovered" % (kind, CONNECTIONS, r["opened_s"], r["on_leader"], r["recovered_s"], r["moved"],
                           r["expired"], r["not_recovered"]))
    if r["lost_later"] is not None:
        line += "; a timeout later: %d connections lost, %d sessions on the new leader" % (
            r["lost_later"], r["sessions_after"])
    return line


def test_ten_thousand_clients_reconnect_after_a_leader_change(servers):
    require_keel()
    limit = raise_file_limit(CONNECTIONS + FDS_SPARE)
    if limit < CONNECTIONS + FDS_SPARE:
        pytest.skip("the file limit's hard maximum is %d, too low for %d connections (+%d spare): raise it "
                    "(ulimit -Hn) or set KEEL_SCALE_CONNECTIONS" % (limit, CONNECTIONS, FDS_SPARE))
    keel = servers("keel", topology="cluster3", name="keel-reconnect")
    result = through_a_leader_change(keel)
    keel_line = describe("keel", result)
    print(keel_line)
    keel.stop()
    report_summary("reconnect: " + keel_line)
    assert result["expired"] == 0, keel_line
    assert result["not_recovered"] == 0, keel_line
    assert result["lost_later"] == 0, keel_line
    assert result["sessions_after"] == CONNECTIONS, keel_line
    if not WITH_ZOOKEEPER:
        report_summary("reconnect: zookeeper not run (KEEL_SCALE_ZOOKEEPER=0)")
        return
    zk = servers("zookeeper", topology="cluster3", name="zk-reconnect", settings=ZK_SCALE_SETTINGS)
    try:
        zk_line = describe("zookeeper", through_a_leader_change(zk))
    except AssertionError as error:
        # ZooKeeper is the reference printed beside Keel, not what is under
        # test: a run it could not keep up with (pings unanswered while
        # 10,000 sessions open, seen once in make test) is reported.
        zk_line = "zookeeper did not finish the run: %s" % str(error).splitlines()[0]
    print(zk_line)
    report_summary("reconnect: " + zk_line)
