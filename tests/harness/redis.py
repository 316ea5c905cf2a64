"""Redis-protocol helpers for the Keel KV tests and `make compare-kv`:
Debian's redis-server started like the other harness servers, a raw RESP
connection that returns each reply's exact bytes (and a parsed form), and
helpers to start Keel with its Redis port. Standard library only."""

import os
import shutil
import socket
import time

from .servers import BaseServer, KeelServer, free_port

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_BENCHMARK = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"


def redis_available():
    return os.access(REDIS_SERVER, os.X_OK)


class Closed(Exception):
    """The server closed the connection."""


class RespConnection:
    """One raw RESP connection. call(*args) sends a multibulk request and
    returns (raw bytes of the reply, parsed reply); send(bytes) writes raw
    bytes; reply() reads one reply. Parsed: str for +status, ("error", text),
    int, bytes for bulk, None for nil (RESP2 and 3), list, dict (RESP3 map),
    ("set", list), ("verbatim", bytes), ("double", text), ("bool", bool)."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buffer = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def encode(args):
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, int):
                a = str(a)
            if isinstance(a, str):
                a = a.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(parts)

    def send(self, data):
        self.sock.sendall(data)

    def call(self, *args):
        self.send(self.encode(args))
        return self.reply()

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise Closed()
        self.buffer += chunk

    def _line(self, at):
        while True:
            end = self.buffer.find(b"\r\n", at)
            if end >= 0:
                return self.buffer[at:end], end + 2
            self._fill()

    def _need(self, end):
        while len(self.buffer) < end:
            self._fill()

    def _parse(self, at):
        line, at = self._line(at)
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode(), at
        if kind == b"-":
            return ("error", rest.decode()), at
        if kind == b":":
            return int(rest), at
        if kind == b"_":
            return None, at
        if kind == b",":
            return ("double", rest.decode()), at
        if kind == b"#":
            return ("bool", rest == b"t"), at
        if kind in (b"$", b"="):
            n = int(rest)
            if n < 0:
                return None, at
            self._need(at + n + 2)
            data = self.buffer[at:at + n]
            return (data if kind == b"$" else ("verbatim", data)), at + n + 2
        if kind in (b"*", b"~", b">"):
            n = int(rest)
            if n < 0:
                return None, at
            items = []
            for _ in range(n):
                item, at = self._parse(at)
                items.append(item)
            return (items if kind != b"~" else ("set", items)), at
        if kind == b"%":
            n = int(rest)
            pairs = []
            for _ in range(n):
                k, at = self._parse(at)
                v, at = self._parse(at)
                pairs.append((k, v))
            return ("map", pairs), at
        raise ValueError("not RESP: %r" % line[:80])

    def reply(self):
        parsed, end = self._parse(0)
        raw = self.buffer[:end]
        self.buffer = self.buffer[end:]
        return raw, parsed

    def replies_until_closed(self):
        """The raw bytes of every reply until the server closes."""
        replies = []
        while True:
            try:
                replies.append(self.reply()[0])
            except Closed:
                return replies

    def closed(self, timeout=2.0):
        """True if the server closes the connection within `timeout` (what it
        sends before is dropped)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (socket.timeout, TimeoutError):
            return False
        except OSError:
            return True


class NodeRotation:
    """A test client's connection to one node of a cluster at a time, as a
    client that survives node failures holds it: connect() opens one to
    the current node, moving on to the next port while connecting fails;
    drop() closes it and moves on (what was in flight on it has an
    unknown outcome). The first node is `ports[start % len(ports)]`."""

    PAUSE_S = 0.05

    def __init__(self, ports, start, timeout=5.0):
        assert ports, "no node to connect to"
        self.ports = list(ports)
        self.turn = start
        self.timeout = timeout
        self.conn = None

    def connect(self, stop):
        """The open connection, or a new one; None once `stop` is set."""
        while self.conn is None and not stop.is_set():
            try:
                port = self.ports[self.turn % len(self.ports)]
                self.conn = RespConnection(port, timeout=self.timeout)
            except OSError:
                self.turn += 1
                time.sleep(self.PAUSE_S)
        return self.conn

    def drop(self):
        """Closes the connection and moves on to the next node."""
        self.close()
        self.turn += 1
        time.sleep(self.PAUSE_S)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def ping(port, timeout=1.0):
    try:
        with RespConnection(port, timeout=timeout) as c:
            return c.call("PING")[1] == "PONG"
    except (OSError, Closed, ValueError):
        return False


class RedisServer(BaseServer):
    """Debian's redis-server (7.0) on a free port of 127.0.0.1, its files in
    its work dir. Settings: redis_args (a list added to the command line),
    e.g. ["--appendonly", "yes", "--appendfsync", "always"]; without them it
    persists nothing (--save '' --appendonly no)."""

    kind = "redis"
    startup_timeout = 20.0

    def __init__(self, *a, **kw):
        kw.setdefault("test_defaults", False)
        super().__init__(*a, **kw)

    def _command(self):
        args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.data_dir, "--daemonize", "no", "--save", "", "--appendonly", "no",
                "--protected-mode", "no"]
        return args + list(self.settings.get("redis_args", []))

    def is_ready(self):
        return ping(self.port)


def keel_kv_settings(settings=None):
    """Keel settings with the Redis port on a free port."""
    s = dict(settings or {})
    s.setdefault("resp_port", free_port())
    return s


def wait_kv(port, timeout=30.0):
    """Until the KV port answers PING (the node serves)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ping(port):
            return
        time.sleep(0.05)
    raise TimeoutError("Keel KV on port %d did not answer PING within %.0fs" % (port, timeout))


class KeelKvServer(KeelServer):
    """A single Keel node with its Redis port (`resp_port`)."""

    def __init__(self, *a, settings=None, **kw):
        super().__init__(*a, settings=keel_kv_settings(settings), **kw)

    @property
    def resp_port(self):
        return int(self.settings["resp_port"])

    def is_ready(self):
        return super().is_ready() and ping(self.resp_port)
