"""50,000 sessions created and left to expire on one node, Keel and then
Apache ZooKeeper 3.8 in the same run, printed side by side.

Each session is a handshake on its own connection, reset as soon as it is
answered (the client vanishes; its session lives until it expires), 500
at a time. While they expire, `zk_global_sessions` (mntr) is polled and
held to both bounds at every poll: no session may be gone before its
timeout counted from its handshake (the earliest its server can have made
it), and every one must be gone within timeout + EXPIRY_SLACK_S of its
handshake's answer. Server memory per session (RSS after all are made,
less before, per session) is reported. Keel must keep both bounds; the
ZooKeeper run is the comparison (its numbers are printed, its bounds
counted, not asserted).

KEEL_SCALE_SESSIONS sets the count (default 50,000);
KEEL_SCALE_ZOOKEEPER=0 leaves the ZooKeeper run out."""

import os
import time

import pytest

from conftest import report_summary, require_keel
from harness import mntr
from scale.fleet import ZK_SCALE_SETTINGS, Fleet, rss_bytes

SESSIONS = int(os.environ.get("KEEL_SCALE_SESSIONS", "50000"))
WITH_ZOOKEEPER = os.environ.get("KEEL_SCALE_ZOOKEEPER", "1") != "0"
SESSION_TIMEOUT_MS = 10000  # the test settings' maximum (20 ticks of 500 ms)
# All gone this long after the timeout: the expiry timer's tick, plus
# committing and applying the closeSessions of a whole batch at once.
EXPIRY_SLACK_S = 5.0


def global_sessions(port):
    return int(mntr(port).get("zk_global_sessions", "-1"))


class Cohort:
    """One batch of handshakes: when the first was sent, when the last
    was answered."""

    def __init__(self, batch):
        self.count = len(batch)
        self.sent_first = min(s.sent_at for s in batch)
        self.answered_last = max(s.answered_at for s in batch)


def create_and_expire(server):
    timeout_s = SESSION_TIMEOUT_MS / 1000.0
    fleet = Fleet(SESSIONS, [server.port], SESSION_TIMEOUT_MS)
    cohorts = []
    rss_before = rss_bytes(server.proc.pid)
    try:
        created_s = fleet.create_and_abandon(on_batch=lambda batch: cohorts.append(Cohort(batch)))
    finally:
        fleet.close()
    negotiated = {s.timeout_ms for s in fleet.sessions}
    assert negotiated == {SESSION_TIMEOUT_MS}, "negotiated timeouts %s" % sorted(negotiated)
    rss_after = rss_bytes(server.proc.pid)
    first_sent = cohorts[0].sent_first
    last_answered = cohorts[-1].answered_last
    deadline = last_answered + timeout_s + EXPIRY_SLACK_S
    early = late = 0
    peak = 0
    first_gone = all_gone = None
    while True:
        before = time.monotonic()
        n = global_sessions(server.port)
        after = time.monotonic()
        assert n >= 0, "no mntr answer"
        peak = max(peak, n)
        # The server counted somewhere between `before` and `after`.
        # Not yet due: sessions whose handshake went out less than a
        # timeout before the poll's answer.
        due_none = sum(c.count for c in cohorts if after < c.sent_first + timeout_s)
        # Allowed still there: answered less than timeout + slack before
        # the poll was asked.
        allowed = sum(c.count for c in cohorts if before <= c.answered_last + timeout_s + EXPIRY_SLACK_S)
        early = max(early, due_none - n)
        late = max(late, n - allowed)
        if first_gone is None and n < SESSIONS:
            first_gone = before - first_sent
        if n == 0:
            all_gone = after - last_answered
            break
        if after > deadline + 10:
            break
        time.sleep(0.1)
    return {
        "created_s": created_s,
        "rate": SESSIONS / created_s,
        "peak": peak,
        "bytes_per_session": (rss_after - rss_before) / SESSIONS,
        "first_gone_s": first_gone,
        "all_gone_s": all_gone,
        "early": early,
        "late": late,
    }


def describe(kind, r):
    gone = ("all gone %.1f s after the last handshake" % r["all_gone_s"]) if r["all_gone_s"] is not None \
        else "NOT all gone"
    return ("%-9s %d sessions made in %.1f s (%.0f/s); RSS %+.0f B per session; first expiry %.1f s after "
            "the first handshake, %s (timeout %.0f s); early %d, late %d" % (
                kind, SESSIONS, r["created_s"], r["rate"], r["bytes_per_session"],
                r["first_gone_s"] or -1.0, gone, SESSION_TIMEOUT_MS / 1000.0, r["early"], r["late"]))


def test_fifty_thousand_sessions_created_and_expired(servers):
    require_keel()
    keel = servers("keel", name="keel-sessions")
    result = create_and_expire(keel)
    keel_line = describe("keel", result)
    print(keel_line)
    assert result["peak"] >= SESSIONS, "only %d of %d sessions were there at once" % (result["peak"], SESSIONS)
    assert result["early"] == 0, "%d sessions expired before their timeout: %s" % (result["early"], keel_line)
    assert result["late"] == 0, "%d sessions outlived timeout + %.0f s: %s" % (
        result["late"], EXPIRY_SLACK_S, keel_line)
    assert result["all_gone_s"] is not None, keel_line
    keel.stop()
    report_summary("sessions: " + keel_line)
    if not WITH_ZOOKEEPER:
        report_summary("sessions: zookeeper not run (KEEL_SCALE_ZOOKEEPER=0)")
        return
    try:
        zk = servers("zookeeper", name="zk-sessions", settings=ZK_SCALE_SETTINGS)
    except Exception as e:  # noqa: BLE001 - the comparison is optional
        pytest.skip("ZooKeeper 3.8 for the comparison did not start: %s" % e)
    zk_line = describe("zookeeper", create_and_expire(zk))
    print(zk_line)
    report_summary("sessions: " + zk_line)
