"""Wall-clock jumps (libfaketime, Debian's `faketime`): a single Keel node
whose wall clock (CLOCK_REALTIME only; the monotonic clock is left alone)
jumps an hour forward, then two hours back, while sessions live and
expire. Session expiry runs on the monotonic clock: a live session
survives both jumps, an abandoned one expires neither early (forward
jump) nor late (backward jump). TTL nodes must not be reaped early by a
forward jump either: they go on time, counted on the monotonic clock.

FAKETIME_TIMESTAMP_FILE holds the offset ("+0", "+1h", "-1h"); with
FAKETIME_NO_CACHE the server reads it on every clock call, so writing the
file moves the server's clock at once."""

import os
import time

import pytest
from kazoo.client import KazooClient

from conftest import require_keel
from harness import KeelServer
from harness import zkproto as zp

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
SESSION_TIMEOUT_MS = 4000
# Expiry: the leader's timer (a tick) after the deadline, plus scheduling.
EXPIRY_SLACK_S = 3.0
TTL_MS = 6000


class FakeTimeKeel(KeelServer):
    """A Keel server whose wall clock follows `offset_file`."""

    def __init__(self, *a, offset_file, **kw):
        super().__init__(*a, **kw)
        self.offset_file = offset_file

    def _env(self):
        env = super()._env()
        env.update(LD_PRELOAD=LIBFAKETIME, FAKETIME_TIMESTAMP_FILE=self.offset_file, FAKETIME_NO_CACHE="1",
                   FAKETIME_DONT_FAKE_MONOTONIC="1", FAKETIME_DONT_RESET="1")
        return env


@pytest.fixture
def faked(tmp_path):
    require_keel()
    if not os.path.exists(LIBFAKETIME):
        pytest.skip("libfaketime missing: apt-get install faketime (scripts/install-test-deps.sh)")
    offset = str(tmp_path / "offset")
    jump(offset, "+0")
    server = FakeTimeKeel(name="keel-faketime", offset_file=offset)
    server.start()
    yield server, offset
    server.stop()
    server.cleanup()


def jump(offset_file, text):
    with open(offset_file + ".tmp", "w") as f:
        f.write(text + "\n")
    os.replace(offset_file + ".tmp", offset_file)


def abandoned_session_with_ephemeral(server, path):
    """A raw session that creates an ephemeral and drops its connection
    without closing: it must expire SESSION_TIMEOUT_MS later."""
    conn = zp.RawConnection(server.port)
    conn.handshake(timeout_ms=SESSION_TIMEOUT_MS)
    err, _ = conn.create(path, b"", flags=zp.EPHEMERAL)
    assert err == 0, zp.error_name(err)
    conn.close()
    return time.monotonic()


def server_time_ms(client, path):
    """The server's wall clock as it stamps a write (mtime)."""
    client.set(path, b"t")
    return client.exists(path).mtime


def test_session_expiry_ignores_wall_clock_jumps(faked):
    server, offset = faked
    client = KazooClient(hosts=server.address, timeout=SESSION_TIMEOUT_MS / 1000.0)
    client.start(timeout=20)
    try:
        client.create("/live", ephemeral=True)
        client.create("/clock")
        before = server_time_ms(client, "/clock")
        abandoned = abandoned_session_with_ephemeral(server, "/abandoned-forward")
        jump(offset, "+1h")
        jumped = server_time_ms(client, "/clock")
        assert jumped - before > 3_500_000, "the server's clock did not move (%d -> %d)" % (before, jumped)
        # Well inside the session timeout: nothing may have expired.
        time.sleep(max(0.0, abandoned + SESSION_TIMEOUT_MS / 2000.0 - time.monotonic()))
        assert client.exists("/abandoned-forward") is not None, "expired early after the wall clock jumped +1 h"
        assert client.exists("/live") is not None
        # ... and it expires on time.
        wait_gone(client, "/abandoned-forward", abandoned + SESSION_TIMEOUT_MS / 1000.0 + EXPIRY_SLACK_S)
        abandoned = abandoned_session_with_ephemeral(server, "/abandoned-back")
        jump(offset, "-1h")
        assert server_time_ms(client, "/clock") < before, "the server's clock did not go back"
        # Going back two hours must not keep it alive two hours more.
        wait_gone(client, "/abandoned-back", abandoned + SESSION_TIMEOUT_MS / 1000.0 + EXPIRY_SLACK_S)
        assert client.exists("/live") is not None, "a live session expired across the jumps"
    finally:
        client.stop()
        client.close()


def wait_gone(client, path, deadline):
    while client.exists(path) is not None:
        assert time.monotonic() < deadline, "%s still there %.1f s after its deadline" % (
            path, time.monotonic() - deadline)
        time.sleep(0.1)


def test_ttl_nodes_are_not_reaped_early_by_a_forward_jump(faked):
    """The reaper needs both clocks to agree a TTL node is due: the wall
    clock rule every replica checks (mtime + TTL, as ZooKeeper's) and the
    leader's monotonic clock since it applied the node's last change. A
    +1 h jump satisfies the first at once; the second still waits the TTL
    out, so the node goes on time, not early."""
    server, offset = faked
    conn = zp.RawConnection(server.port)
    conn.handshake(timeout_ms=SESSION_TIMEOUT_MS)
    try:
        hdr, _ = conn.request(zp.CREATE_TTL, zp.create_ttl_body("/ttl", b"x", ttl=TTL_MS))
        assert hdr["err"] == 0, zp.error_name(hdr["err"])
        created = time.monotonic()
    finally:
        conn.close()
    # A kazoo session (it pings) watches the node over the TTL.
    client = KazooClient(hosts=server.address, timeout=SESSION_TIMEOUT_MS / 1000.0)
    client.start(timeout=20)
    try:
        jump(offset, "+1h")
        # Many reaper passes (container_check_interval_ms is 100 in tests),
        # up to a second before the TTL is over.
        time.sleep(max(0.0, created + TTL_MS / 1000.0 - 1.0 - time.monotonic()))
        assert client.exists("/ttl") is not None, (
            "TTL node reaped %.1f s after its creation (TTL %d ms) after a +1 h jump" % (
                time.monotonic() - created, TTL_MS))
        # ... and it goes once the TTL has passed.
        wait_gone(client, "/ttl", created + TTL_MS / 1000.0 + EXPIRY_SLACK_S)
        gone_after = time.monotonic() - created
        assert gone_after > TTL_MS / 1000.0, "reaped %.2f s after creation, TTL %d ms" % (gone_after, TTL_MS)
        print("TTL node (%d ms) reaped %.2f s after its creation, the wall clock jumped +1 h" % (TTL_MS, gone_after))
    finally:
        client.stop()
        client.close()
