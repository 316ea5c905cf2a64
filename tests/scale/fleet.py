"""Thousands of raw ZooKeeper sessions from one thread (epoll through
`selectors`): handshakes, pings, and reconnects that resume a session on
another member with its id and password, as ZooKeeper clients do.

Used by tests/scale; the wire format is harness.zkproto's. Nothing here
knows whether the server is Keel or ZooKeeper."""

import resource
import selectors
import socket
import struct
import time

from harness import rss_bytes  # noqa: F401 - the scale tests take it from here
from harness import zkproto as zp

PING_FRAME = zp.frame(zp.i32(zp.XID_PING) + zp.i32(zp.PING))
# How many connects (handshakes) are in flight at once.
CONNECTS_IN_FLIGHT_MAX = 500
# ZooKeeper as the comparison runs it: no per-address connection limit
# (its default is 60), Keel's listen backlog (Java's default of 50 drops
# the SYNs of a burst of connects: each costs a 1 s retransmission), a
# heap for 10,000 connections, and errors only in its log (it logs a stack
# trace at WARN for every connection a vanished client reset).
ZK_SCALE_SETTINGS = {
    "max_client_connections_per_ip": 0,
    "zk_listen_backlog": 4096,
    "zk_jvm_options": ["-Xmx1g", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"],
    "extra_system_properties": {"org.slf4j.simpleLogger.defaultLogLevel": "error"},
}


def raise_file_limit(needed):
    """The soft file limit raised towards `needed` (up to the hard limit);
    returns the soft limit now in force (servers started afterwards
    inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def abort(sock):
    """Close with a reset (SO_LINGER 0): the client vanishes, and no
    TIME_WAIT is left to exhaust local ports."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


class Session:
    """One client: its session and its current connection."""

    __slots__ = ("index", "sock", "port", "session_id", "passwd", "timeout_ms", "buf", "waiting",
                 "expired", "reconnects", "answered_at", "sent_at")

    def __init__(self, index):
        self.index = index
        self.sock = None
        self.port = None
        self.session_id = 0
        self.passwd = b"\x00" * 16
        self.timeout_ms = 0
        self.buf = b""
        self.waiting = None  # "connect" | "ping" | None
        self.expired = False
        self.reconnects = 0
        self.answered_at = None
        self.sent_at = None


class Fleet:
    """`count` sessions spread round-robin over `ports`."""

    def __init__(self, count, ports, timeout_ms):
        self.sessions = [Session(i) for i in range(count)]
        self.ports = list(ports)
        self.timeout_ms = timeout_ms
        self.selector = selectors.DefaultSelector()

    # ---------------------------------------------------------------- sockets
    def _connect(self, s, port):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        s.sock, s.port, s.buf = sock, port, b""
        self.selector.register(sock, selectors.EVENT_READ, s)

    def _drop(self, s, reset=False):
        if s.sock is None:
            return
        try:
            self.selector.unregister(s.sock)
        except (KeyError, ValueError):
            pass
        if reset:
            abort(s.sock)
        else:
            s.sock.close()
        s.sock, s.waiting = None, None

    def _send(self, s, data):
        try:
            s.sock.sendall(data)
            return True
        except OSError:
            self._drop(s)
            return False

    def _handshake(self, s, port):
        """Connect and send a ConnectRequest (a new session, or a resume of
        s's); the answer arrives in `_pump`."""
        try:
            self._connect(s, port)
        except OSError:
            return False
        s.sent_at = time.monotonic()
        s.waiting = "connect"
        return self._send(s, zp.frame(zp.connect_request(
            self.timeout_ms, session_id=s.session_id, passwd=s.passwd)))

    def _pump(self, until, deadline):
        """Reads answers until `until()` or the deadline."""
        while not until() and time.monotonic() < deadline:
            for key, _ in self.selector.select(timeout=min(0.1, max(0.0, deadline - time.monotonic()))):
                s = key.data
                try:
                    chunk = s.sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    self._drop(s)
                    continue
                s.buf += chunk
                while len(s.buf) >= 4:
                    n = int.from_bytes(s.buf[:4], "big")
                    if len(s.buf) < 4 + n:
                        break
                    payload, s.buf = s.buf[4:4 + n], s.buf[4 + n:]
                    self._answer(s, payload)

    def _answer(self, s, payload):
        r = zp.Reader(payload)
        if s.waiting == "connect":
            r.i32()
            timeout_ms, session_id, passwd = r.i32(), r.i64(), r.buf()
            if timeout_ms <= 0 or session_id == 0:
                # ZooKeeper's "session expired" answer; the server closes.
                if s.session_id:
                    s.expired = True
                self._drop(s)
                return
            if s.session_id:
                assert session_id == s.session_id, "resumed another session"
            s.session_id, s.passwd, s.timeout_ms = session_id, passwd, timeout_ms
            s.waiting, s.answered_at = None, time.monotonic()
        elif s.waiting == "ping":
            if r.i32() == zp.XID_PING:
                s.waiting, s.answered_at = None, time.monotonic()
        # Anything else (a notification) is not ours to answer.

    # ---------------------------------------------------------------- fleet
    def open(self, deadline_s=120.0, keepalive=None):
        """A new session for every client, CONNECTS_IN_FLIGHT_MAX at a
        time; `keepalive()` runs between batches (opening may outlast a
        session timeout). Returns the seconds it took."""
        started = time.monotonic()
        deadline = started + deadline_s
        for first in range(0, len(self.sessions), CONNECTS_IN_FLIGHT_MAX):
            batch = self.sessions[first:first + CONNECTS_IN_FLIGHT_MAX]
            for s in batch:
                assert self._handshake(s, self.ports[s.index % len(self.ports)]), "connect failed"
            self._pump(lambda: all(s.waiting is None for s in batch), deadline)
            refused = [s for s in batch if s.sock is None or s.waiting is not None]
            assert not refused, "%d handshakes unanswered or refused" % len(refused)
            if keepalive:
                keepalive()
        return time.monotonic() - started

    def create_and_abandon(self, deadline_s=120.0, on_batch=None):
        """A session per client, each connection reset as soon as its
        session is made (the session lives on until it expires).
        `on_batch(batch)` after each batch. Returns the seconds it took."""
        started = time.monotonic()
        deadline = started + deadline_s
        for first in range(0, len(self.sessions), CONNECTS_IN_FLIGHT_MAX):
            batch = self.sessions[first:first + CONNECTS_IN_FLIGHT_MAX]
            for s in batch:
                assert self._handshake(s, self.ports[s.index % len(self.ports)]), "connect failed"
            self._pump(lambda: all(s.waiting is None for s in batch), deadline)
            refused = [s for s in batch if s.session_id == 0 or s.waiting is not None]
            assert not refused, "%d handshakes unanswered or refused" % len(refused)
            for s in batch:
                self._drop(s, reset=True)
            if on_batch:
                on_batch(batch)
        return time.monotonic() - started

    def ping_all(self, deadline_s=30.0):
        """One ping on every connected client; returns the clients that
        did not answer (their connection is gone or silent)."""
        live = [s for s in self.sessions if s.sock is not None and s.waiting is None]
        for s in live:
            s.waiting = "ping"
            self._send(s, PING_FRAME)
        self._pump(lambda: all(s.waiting is None or s.sock is None for s in live),
                   time.monotonic() + deadline_s)
        return [s for s in self.sessions if s.sock is None or s.waiting is not None]

    def recover(self, live_ports, deadline, ping_every_s=0.5, reply_timeout_s=2.0):
        """Until every client holds its own session again (or the
        deadline): clients whose connection died or went silent resume
        their session on the next live member (as ZooKeeper clients move
        on through their connect string), the others are pinged. Returns
        the clients not recovered (expired ones included)."""
        ports = list(live_ports)
        while time.monotonic() < deadline:
            now = time.monotonic()
            for s in self.sessions:
                if s.expired:
                    continue
                silent = s.waiting is not None and now - s.sent_at > reply_timeout_s
                if s.sock is None or silent:
                    self._drop(s, reset=True)
                    s.reconnects += 1
                    # The next member in the client's list, starting after
                    # the one it was on.
                    port = ports[(s.index + s.reconnects) % len(ports)]
                    self._handshake(s, port)
                elif s.waiting is None and now - s.answered_at > ping_every_s:
                    s.waiting, s.sent_at = "ping", now
                    self._send(s, PING_FRAME)
            self._pump(lambda: False, min(deadline, time.monotonic() + 0.1))
            if all(s.expired or (s.sock is not None and s.waiting is None and s.answered_at > self.since)
                   for s in self.sessions):
                break
        return [s for s in self.sessions
                if s.expired or s.sock is None or s.waiting is not None or s.answered_at <= self.since]

    def mark(self):
        """Answers from now on count as recovered (`recover`)."""
        self.since = time.monotonic()

    def close(self):
        for s in self.sessions:
            self._drop(s, reset=True)
        self.selector.close()
