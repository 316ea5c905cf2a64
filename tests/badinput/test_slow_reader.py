"""A client that pipelines 100,000 getData requests for an 8 KiB node and never
reads a reply: Keel's memory stays flat (it stops reading the socket while the
replies it already prepared, at most OUT_BUFFER_MAX_BYTES, cannot be written),
other clients are served meanwhile, and the server is healthy after the slow
client goes. Keel only (ZooKeeper has no comparable bound to check)."""

import socket
import threading
import time

from kazoo.client import KazooClient

from harness import four_letter_word, rss_bytes, run_bench
from harness import zkproto as P

REQUESTS = 100_000
VALUE_BYTES = 8 * 1024
# How long the slow client keeps pushing requests and we keep sampling.
SLOW_SECONDS = 10.0
SAMPLE_INTERVAL_S = 0.25
# Most the server's RSS may grow over its baseline while the slow client is
# connected. 100,000 replies of 8 KiB are 800 MiB: buffering them, or even
# a small fraction, would exceed this.
RSS_GROWTH_MAX_BYTES = 48 << 20
# Requests per sendall: large enough to fill the socket quickly.
REQUESTS_PER_SEND = 500


def push_requests(conn, stop, sent):
    """Sends REQUESTS getData frames, never reading; stops when the socket
    stays full past `stop` or all are sent."""
    body = P.path_watch_body("/slow", False)
    batch = b"".join(P.frame(P.i32(xid) + P.i32(P.GET_DATA) + body)
                     for xid in range(1, REQUESTS_PER_SEND + 1))
    conn.sock.settimeout(0.2)
    while sent[0] < REQUESTS and not stop.is_set():
        try:
            conn.sock.sendall(batch)
            sent[0] += REQUESTS_PER_SEND
        except socket.timeout:
            continue  # the server stopped reading: keep trying until told to stop
        except OSError:
            return


def test_a_client_that_never_reads_leaves_memory_flat(servers):
    keel = servers("keel")
    pid = keel.proc.pid
    other = KazooClient(hosts=keel.address, timeout=10)
    other.start(timeout=15)
    try:
        other.create("/slow", b"v" * VALUE_BYTES)
        time.sleep(1.0)
        baseline = rss_bytes(pid)
        slow = P.RawConnection(keel.port)
        slow.handshake()
        stop, sent = threading.Event(), [0]
        pusher = threading.Thread(target=push_requests, args=(slow, stop, sent), daemon=True)
        pusher.start()
        peak, served, started = baseline, 0, time.monotonic()
        while time.monotonic() - started < SLOW_SECONDS:
            peak = max(peak, rss_bytes(pid))
            other.set("/slow-other-%d" % (served % 3), b"x") if other.exists(
                "/slow-other-%d" % (served % 3)) else other.create("/slow-other-%d" % (served % 3), b"x")
            assert other.get("/slow")[0] == b"v" * VALUE_BYTES
            served += 1
            time.sleep(SAMPLE_INTERVAL_S)
        stop.set()
        pusher.join(timeout=5)
        growth = peak - baseline
        print("slow reader: %d requests pushed, server RSS +%.1f MiB at peak, %d requests of "
              "another client served meanwhile" % (sent[0], growth / 2**20, served))
        assert sent[0] >= REQUESTS_PER_SEND, "the slow client could not send anything"
        assert growth < RSS_GROWTH_MAX_BYTES, "server RSS grew by %d bytes" % growth
        assert served >= SLOW_SECONDS / SAMPLE_INTERVAL_S / 2
        slow.close()
        # Healthy afterwards: a fresh client and the four-letter words answer.
        assert other.get("/slow")[0] == b"v" * VALUE_BYTES
        assert four_letter_word(keel.port, "ruok") == b"imok"
    finally:
        other.stop()
        other.close()


# Watch events queued for one connection before the server closes it
# (keel-server's CONNECTION_OUTBOUND_MAX).
CONNECTION_OUTBOUND_MAX = 64 * 1024
# Eight-second create benches run while the watcher's queue fills.
WATCHER_BENCH_ROUNDS_MAX = 6
WATCHER_SESSION_TIMEOUT_MS = 120_000


def test_a_watcher_that_never_reads_is_disconnected_not_buffered(servers):
    """A session with a persistent recursive watch on / that never reads its
    socket while another client writes: its events fill the connection's
    bounded queue (CONNECTION_OUTBOUND_MAX), the server closes that
    connection with a log line instead of buffering without end, and serves
    the writer throughout. (The writer's own nodes and log grow the RSS
    here, so memory is checked by the test above.)"""
    # The watcher sends no pings: its session must outlive every round.
    keel = servers("keel", settings={"max_session_timeout_ms": WATCHER_SESSION_TIMEOUT_MS})
    pid = keel.proc.pid
    slow = P.RawConnection(keel.port)
    slow.handshake(timeout_ms=WATCHER_SESSION_TIMEOUT_MS)
    hdr, _ = slow.request(P.ADD_WATCH, P.add_watch_body("/", P.ADD_WATCH_PERSISTENT_RECURSIVE))
    assert hdr["err"] == 0
    time.sleep(0.5)
    baseline = rss_bytes(pid)
    # Creates and deletes: two events each for the watcher, many more than
    # the queue holds.
    # A loaded machine writes slower: bench again until the queue must have
    # filled (at most WATCHER_BENCH_ROUNDS_MAX rounds).
    ops = rounds = 0
    while rounds < WATCHER_BENCH_ROUNDS_MAX:
        summary = run_bench(keel.address, "create", clients=20, duration=8)
        ops += int(float(summary["ops"]))
        rounds += 1
        if ops > CONNECTION_OUTBOUND_MAX and "client not reading" in keel.log_text():
            break
    growth = rss_bytes(pid) - baseline
    log = keel.log_text()
    print("watcher that never reads: %d writes in %d bench rounds, server RSS +%.1f MiB" %
          (ops, rounds, growth / 2**20))
    assert ops > CONNECTION_OUTBOUND_MAX, "too few writes to fill the queue: %d" % ops
    assert "client not reading" in log, "the slow watcher's connection was not closed"
    closed, _ = slow.wait_closed(timeout=10)
    assert closed, "the server did not close the slow watcher's connection"
    assert four_letter_word(keel.port, "ruok") == b"imok"
