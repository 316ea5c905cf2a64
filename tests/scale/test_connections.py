"""10,000 concurrent client connections, each its own session, on one
Keel node (the test raises its own file limit; the server inherits it):
every handshake answered, server memory per connection+session reported,
every session kept alive by pings for twice the session timeout (none may
expire, no connection may be closed), then all dropped at once: none may
expire before the session timeout, all must expire soon after it.
KEEL_SCALE_CONNECTIONS sets the count."""

import os
import resource
import socket
import time

from conftest import report_summary, require_keel
from harness import KeelServer, mntr
from harness import zkproto as zp

CONNECTIONS = int(os.environ.get("KEEL_SCALE_CONNECTIONS", "10000"))
BATCH = 500
SESSION_TIMEOUT_MS = 10000  # the test settings' maximum (20 ticks of 500 ms)
PING_EVERY_S = 3.0
EXPIRY_SLACK_S = 5.0
# The earliest a session may go: its timeout after the last ping, less a
# tick of bucket rounding and the time the last ping round took.
EARLY_MARGIN_S = 1.5
FDS_SPARE = 200


def raise_file_limit(needed):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, needed), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


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


def test_ten_thousand_connections(servers):
    require_keel()
    limit = raise_file_limit(CONNECTIONS + FDS_SPARE)
    assert limit >= CONNECTIONS + FDS_SPARE, "file limit %d too low for %d connections" % (limit, CONNECTIONS)
    server = servers("keel", name="keel-10k")
    rss_before = rss_bytes(server.proc.pid)
    started = time.monotonic()
    socks = open_sessions(server.port, CONNECTIONS)
    opened_s = time.monotonic() - started
    try:
        state = mntr(server.port)
        assert int(state["zk_num_alive_connections"]) >= CONNECTIONS, state["zk_num_alive_connections"]
        assert int(state["zk_global_sessions"]) >= CONNECTIONS, state["zk_global_sessions"]
        rss_after = rss_bytes(server.proc.pid)
        keep_until = time.monotonic() + 2 * SESSION_TIMEOUT_MS / 1000.0
        failed = 0
        while True:
            last_ping = time.monotonic()
            failed += ping_all(socks)
            if time.monotonic() >= keep_until:
                break
            time.sleep(PING_EVERY_S)
        pinged = time.monotonic()
        assert failed == 0, "%d pings unanswered while every session was kept alive" % failed
        assert int(mntr(server.port)["zk_global_sessions"]) >= CONNECTIONS, "sessions expired while pinged"
    finally:
        for s in socks:
            s.close()
    # A session's deadline is its last ping + the timeout (rounded up to a tick).
    timeout_s = SESSION_TIMEOUT_MS / 1000.0
    early = wait_sessions(server.port, 0, last_ping + timeout_s - EARLY_MARGIN_S)
    assert early >= CONNECTIONS, "%d of %d sessions left %.1f s after their last ping (timeout %.0f s)" % (
        early, CONNECTIONS, timeout_s - EARLY_MARGIN_S, timeout_s)
    left = wait_sessions(server.port, 0, pinged + timeout_s + EXPIRY_SLACK_S)
    expired_s = time.monotonic() - last_ping
    assert left == 0, "%d sessions left %.1f s after their last ping (timeout %.0f s)" % (left, expired_s, timeout_s)
    report_summary("10k connections: %d sessions opened in %.1f s; server RSS +%.1f KiB per connection+session; "
                   "all alive for %d s of pings; dropped, all expired %.1f s after their last ping (timeout %.0f s)"
                   % (CONNECTIONS, opened_s, (rss_after - rss_before) / CONNECTIONS / 1024.0,
                      2 * SESSION_TIMEOUT_MS // 1000, expired_s, SESSION_TIMEOUT_MS / 1000.0))
