"""10,000 concurrent client connections, each its own session, on one
Keel node (the test raises its own file limit; the server inherits it):
every handshake answered, server memory per connection+session reported,
every session kept alive by pings for twice the session timeout (none may
expire, no connection may be closed), then all dropped at once: none may
expire before the session timeout, all must expire soon after it. Then
the same against Apache ZooKeeper 3.8 in the same run, its numbers printed
beside Keel's (not asserted). KEEL_SCALE_CONNECTIONS sets the count;
KEEL_SCALE_ZOOKEEPER=0 leaves ZooKeeper out."""

import os
import socket
import time

import pytest

from conftest import report_summary, require_keel
from harness import mntr
from harness import zkproto as zp
from scale.fleet import ZK_SCALE_SETTINGS, abort, raise_file_limit, rss_bytes

CONNECTIONS = int(os.environ.get("KEEL_SCALE_CONNECTIONS", "10000"))
WITH_ZOOKEEPER = os.environ.get("KEEL_SCALE_ZOOKEEPER", "1") != "0"
BATCH = 500
SESSION_TIMEOUT_MS = 10000  # the test settings' maximum (20 ticks of 500 ms)
PING_EVERY_S = 3.0
EXPIRY_SLACK_S = 5.0
# The earliest a session may go: its timeout after the last ping, less a
# tick of bucket rounding and the time the last ping round took.
EARLY_MARGIN_S = 1.5
FDS_SPARE = 200


def read_frame(sock, deadline):
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            raise zp.Closed("closed by server")
        buf += chunk
    return buf[4:]


def open_sessions(port, count):
    """`count` sessions, BATCH handshakes at a time; the open ones are
    pinged meanwhile (opening all takes longer than a session timeout)."""
    socks, pinged, unanswered = [], time.monotonic(), 0
    for first in range(0, count, BATCH):
        if time.monotonic() - pinged > PING_EVERY_S:
            unanswered += ping_all(socks)
            pinged = time.monotonic()
        batch = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(min(BATCH, count - first))]
        for s in batch:
            s.sendall(zp.frame(zp.connect_request(SESSION_TIMEOUT_MS)))
        deadline = time.monotonic() + 30
        for s in batch:
            r = zp.Reader(read_frame(s, deadline))
            r.i32()
            assert r.i32() > 0, "session refused"
        socks += batch
    assert unanswered == 0, "%d pings unanswered while opening" % unanswered
    return socks


def ping_all(socks):
    """Pings every connection; returns how many did not answer."""
    ping = zp.frame(zp.i32(zp.XID_PING) + zp.i32(zp.PING))
    failed = 0
    for s in socks:
        try:
            s.sendall(ping)
        except OSError:
            failed += 1
    deadline = time.monotonic() + 30
    for s in socks:
        try:
            r = zp.Reader(read_frame(s, deadline))
            if r.i32() != zp.XID_PING:
                failed += 1
        except (OSError, zp.Closed):
            failed += 1
    return failed


def wait_sessions(port, at_most, deadline):
    while True:
        n = int(mntr(port).get("zk_global_sessions", "-1"))
        if 0 <= n <= at_most or time.monotonic() >= deadline:
            return n
        time.sleep(0.2)


def hold_and_drop(server):
    """Opens CONNECTIONS sessions on `server`, pings them for twice the
    session timeout, drops them all; what it saw."""
    rss_before = rss_bytes(server.proc.pid)
    started = time.monotonic()
    socks = open_sessions(server.port, CONNECTIONS)
    r = {"opened_s": time.monotonic() - started}
    try:
        state = mntr(server.port)
        r["alive_connections"] = int(state["zk_num_alive_connections"])
        r["sessions"] = int(state["zk_global_sessions"])
        r["bytes_per_connection"] = (rss_bytes(server.proc.pid) - rss_before) / CONNECTIONS
        keep_until = time.monotonic() + 2 * SESSION_TIMEOUT_MS / 1000.0
        r["unanswered"] = 0
        while True:
            last_ping = time.monotonic()
            r["unanswered"] += ping_all(socks)
            if time.monotonic() >= keep_until:
                break
            time.sleep(PING_EVERY_S)
        pinged = time.monotonic()
        r["sessions_pinged"] = int(mntr(server.port)["zk_global_sessions"])
    finally:
        for s in socks:
            abort(s)
    # A session's deadline is its last ping + the timeout (rounded up to a tick).
    timeout_s = SESSION_TIMEOUT_MS / 1000.0
    r["left_early"] = wait_sessions(server.port, 0, last_ping + timeout_s - EARLY_MARGIN_S)
    r["left_late"] = wait_sessions(server.port, 0, pinged + timeout_s + EXPIRY_SLACK_S)
    r["expired_s"] = time.monotonic() - last_ping
    return r


def describe(kind, r):
    return ("%-9s %d sessions opened in %.1f s; server RSS %+.1f KiB per connection+session; %d pings unanswered "
            "and %d sessions left after %d s of pings; dropped: %d left %.1f s after their last ping, %d left "
            "%.1f s after it (timeout %.0f s)" % (
                kind, CONNECTIONS, r["opened_s"], r["bytes_per_connection"] / 1024.0, r["unanswered"],
                r["sessions_pinged"], 2 * SESSION_TIMEOUT_MS // 1000, r["left_early"],
                SESSION_TIMEOUT_MS / 1000.0 - EARLY_MARGIN_S, r["left_late"], r["expired_s"],
                SESSION_TIMEOUT_MS / 1000.0))


def test_ten_thousand_connections(servers):
    require_keel()
    limit = raise_file_limit(CONNECTIONS + FDS_SPARE)
    if limit < CONNECTIONS + FDS_SPARE:
        pytest.skip("the file limit's hard maximum is %d, too low for %d connections (+%d spare): raise it "
                    "(ulimit -Hn) or set KEEL_SCALE_CONNECTIONS" % (limit, CONNECTIONS, FDS_SPARE))
    keel = servers("keel", name="keel-10k")
    r = hold_and_drop(keel)
    keel_line = describe("keel", r)
    print(keel_line)
    keel.stop()
    report_summary("10k connections: " + keel_line)
    assert r["alive_connections"] >= CONNECTIONS, keel_line
    assert r["sessions"] >= CONNECTIONS, keel_line
    assert r["unanswered"] == 0, "pings unanswered while every session was kept alive: " + keel_line
    assert r["sessions_pinged"] >= CONNECTIONS, "sessions expired while pinged: " + keel_line
    assert r["left_early"] >= CONNECTIONS, "sessions expired before their timeout: " + keel_line
    assert r["left_late"] == 0, "sessions outlived their timeout + %.0f s: %s" % (EXPIRY_SLACK_S, keel_line)
    if not WITH_ZOOKEEPER:
        report_summary("10k connections: zookeeper not run (KEEL_SCALE_ZOOKEEPER=0)")
        return
    zk = servers("zookeeper", name="zk-10k", settings=ZK_SCALE_SETTINGS)
    zk_line = describe("zookeeper", hold_and_drop(zk))
    print(zk_line)
    report_summary("10k connections: " + zk_line)
