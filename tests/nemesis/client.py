"""A ZooKeeper session over the raw protocol (harness.zkproto) that behaves
like the real clients under faults: one request at a time, a request
timeout of 2/3 of the session timeout (ZooKeeper's readTimeout), and on a
lost connection a reconnect to another member with the session's id,
password and last zxid seen, until a member answers, says the session
expired, or RECONNECT_GIVE_UP_S passes.

Every request returns a Reply: `ret` as the history records it (None:
unknown outcome), the reply header's zxid and, for getData, the Stat. The
calls are the checker's (see crates/linearize/src/jsonl.rs): dicts like
{"op": "setData", "path": "/a", "data": "x", "version": 2}.
Python standard library only."""

import socket
import time

from harness import zkproto as zp

# A member that does not answer a handshake within this is skipped.
HANDSHAKE_TIMEOUT_S = 1.5
# A session that found no member for this long is given up (its end is
# then confirmed after the run: the session must have expired).
RECONNECT_GIVE_UP_S = 40.0
RECONNECT_PAUSE_S = 0.1

# Errors that mean the request had no effect and that the model knows.
DEFINITE_ERRORS = {-8, -101, -103, -108, -110, -111, -112}
SESSION_EXPIRED = -112
MULTI_ERROR_TYPE = -1
RUNTIME_INCONSISTENCY = -2

OPCODES = {"create": zp.CREATE, "delete": zp.DELETE, "setData": zp.SET_DATA, "check": zp.CHECK,
           "getData": zp.GET_DATA, "exists": zp.EXISTS, "getChildren": zp.GET_CHILDREN}


class Expired(Exception):
    """The session is gone (a member said so)."""


class GaveUp(Exception):
    """No member could be reached for RECONNECT_GIVE_UP_S."""


class Reply:
    __slots__ = ("ret", "zxid", "stat", "node")

    def __init__(self, ret, zxid=None, stat=None, node=None):
        self.ret, self.zxid, self.stat, self.node = ret, zxid, stat, node


# ---------------------------------------------------------------- encoding
def data_of(call):
    return call.get("data", "").encode()


def flags_of(call):
    return (zp.EPHEMERAL if call.get("ephemeral") else 0) | (zp.PERSISTENT_SEQUENTIAL if call.get("sequential") else 0)


def body_of(call):
    op = call["op"]
    if op == "create":
        return zp.create_body(call["path"], data_of(call), flags=flags_of(call))
    if op in ("delete", "check"):
        return zp.delete_body(call["path"], call.get("version", -1))
    if op == "setData":
        return zp.set_data_body(call["path"], data_of(call), call.get("version", -1))
    if op in ("getData", "exists", "getChildren"):
        return zp.path_watch_body(call["path"], False)
    if op == "multi":
        out = b""
        for sub in call["ops"]:
            out += zp.i32(OPCODES[sub["op"]]) + zp.boolean(False) + zp.i32(-1) + body_of(sub)
        return out + zp.i32(-1) + zp.boolean(True) + zp.i32(-1)
    raise ValueError(op)


# ---------------------------------------------------------------- decoding
def stat_summary(stat):
    return {k: stat[k] for k in ("czxid", "mzxid", "version", "ephemeralOwner")}


def decode(call, err, r):
    """(ret, stat) of a reply with error code `err` and body reader `r`."""
    op = call["op"]
    if err != 0:
        if op == "exists" and err == -101:
            return {"type": "exists", "version": None}, None
        return {"type": "error", "code": err}, None
    if op == "create":
        return {"type": "created", "path": r.ustr()}, None
    if op == "delete":
        return {"type": "done"}, None
    if op == "setData":
        return {"type": "set", "version": r.stat()["version"]}, None
    if op == "getData":
        data = r.buf() or b""
        stat = r.stat()
        return dict(data_field(data), type="data", version=stat["version"]), stat_summary(stat)
    if op == "exists":
        return {"type": "exists", "version": r.stat()["version"]}, None
    if op == "getChildren":
        return {"type": "children", "names": sorted(r.str_vec())}, None
    if op == "multi":
        return decode_multi(call, r), None
    raise ValueError(op)


def data_field(data):
    """The history's data key: text if printable ASCII, else hex."""
    if all(0x20 <= b < 0x7f for b in data):
        return {"data": data.decode()}
    return {"data_hex": data.hex()}


def decode_multi(call, r):
    results, failed = [], None
    for sub in call["ops"]:
        kind, done, err = r.i32(), r.boolean(), r.i32()
        assert not done, "multi reply ended early"
        if kind == MULTI_ERROR_TYPE:
            code = r.i32()
            if code not in (0, RUNTIME_INCONSISTENCY) and failed is None:
                failed = code
            continue
        if sub["op"] == "create":
            results.append({"type": "created", "path": r.ustr()})
        elif sub["op"] == "setData":
            results.append({"type": "set", "version": r.stat()["version"]})
        else:
            results.append({"type": "done"})
    if failed is not None:
        return {"type": "error", "code": failed}
    return {"type": "multi", "results": results}


# ---------------------------------------------------------------- session
class Session:
    """One ZooKeeper session of a workload client. `ports` are the members'
    client ports; `first` the member it connects to first."""

    def __init__(self, ports, first, timeout_ms, clock):
        self.ports = list(ports)
        self.node = first % len(self.ports)
        self.timeout_ms = timeout_ms
        self.request_timeout_s = timeout_ms * 2 / 3000.0
        self.clock = clock
        self.conn = None
        self.session_id = 0
        self.passwd = b"\x00" * 16
        self.last_zxid = 0
        self.expired = False

    # -- connection
    def _handshake(self, node):
        conn = zp.RawConnection(self.ports[node], timeout=HANDSHAKE_TIMEOUT_S)
        try:
            resp = conn.handshake(self.timeout_ms, self.session_id, self.passwd, self.last_zxid)
        except BaseException:
            conn.close()
            raise
        return conn, resp

    def open(self, deadline_s=RECONNECT_GIVE_UP_S):
        """A new session (tries every member in turn); False if none took it."""
        assert self.session_id == 0
        return self._connect(deadline_s)

    def _connect(self, deadline_s=RECONNECT_GIVE_UP_S):
        self.close_connection()
        give_up = time.monotonic() + deadline_s
        while time.monotonic() < give_up:
            try:
                conn, resp = self._handshake(self.node)
            except (OSError, zp.Closed, ValueError):
                self.node = (self.node + 1) % len(self.ports)
                time.sleep(RECONNECT_PAUSE_S)
                continue
            if resp["timeOut"] <= 0:
                conn.close()
                self.expired = True
                raise Expired("session 0x%x expired (member %d)" % (self.session_id, self.node))
            conn.sock.settimeout(None)
            self.conn = conn
            self.session_id, self.passwd = resp["sessionId"], resp["passwd"]
            return True
        if self.session_id:
            raise GaveUp("session 0x%x found no member in %.0f s" % (self.session_id, deadline_s))
        return False

    def ensure(self):
        """Connected (reconnecting if needed): Expired / GaveUp otherwise.
        Called before a request is recorded as invoked."""
        if self.conn is None:
            self._connect()

    def close_connection(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _lost(self):
        """The connection is gone: the next request reconnects elsewhere."""
        self.close_connection()
        self.node = (self.node + 1) % len(self.ports)

    # -- requests
    def _send(self, opcode, body):
        """(header, reader) or None when the outcome is unknown (timeout,
        connection lost). Expired/GaveUp when reconnecting fails for good."""
        if self.conn is None:
            self._connect()
        try:
            hdr, r = self.conn.request(opcode, body, timeout=self.request_timeout_s)
        except (OSError, zp.Closed, ValueError, AssertionError):
            self._lost()
            return None
        if hdr["zxid"] > 0:
            self.last_zxid = max(self.last_zxid, hdr["zxid"])
        if hdr["err"] == SESSION_EXPIRED:
            self.expired = True
        return hdr, r

    def call(self, call):
        """One request; Reply(ret=None) when the outcome is unknown."""
        node = self.node
        got = self._send(zp.MULTI if call["op"] == "multi" else OPCODES[call["op"]], body_of(call))
        if got is None:
            return Reply(None, node=node)
        hdr, r = got
        try:
            ret, stat = decode(call, hdr["err"], r)
        except (ValueError, AssertionError, IndexError, UnicodeDecodeError, __import__("struct").error):
            self._lost()
            return Reply(None, node=node)
        if ret["type"] == "error" and ret["code"] not in DEFINITE_ERRORS:
            ret = None  # an error the model does not know: treat as unknown
        return Reply(ret, hdr["zxid"], stat, node)

    def sync(self, path):
        """True if the sync was answered (then a read reflects every write
        acknowledged before the sync was sent)."""
        got = self._send(zp.SYNC, zp.ustr(path))
        return got is not None and got[0]["err"] == 0

    def close(self):
        """closeSession: Reply(done) or Reply(None)."""
        node = self.node
        got = self._send(zp.CLOSE_SESSION, b"")
        self.close_connection()
        if got is None:
            return Reply(None, node=node)
        hdr, _ = got
        if hdr["err"] == 0:
            return Reply({"type": "done"}, hdr["zxid"], node=node)
        if hdr["err"] == SESSION_EXPIRED:
            return Reply({"type": "error", "code": SESSION_EXPIRED}, hdr["zxid"], node=node)
        return Reply(None, node=node)

    def abandon(self):
        """Drop the connection without closing: the session must expire."""
        self.close_connection()


def session_alive(ports, session_id, passwd, timeout_ms, last_zxid=0):
    """Ask the members whether a session still lives (a handshake resuming
    it): True (resumed: it lives, and this connection is closed at once),
    False (a member said expired), None (no member answered)."""
    for port in ports:
        try:
            conn = zp.RawConnection(port, timeout=HANDSHAKE_TIMEOUT_S)
        except OSError:
            continue
        try:
            resp = conn.handshake(timeout_ms, session_id, passwd, last_zxid)
        except (OSError, zp.Closed, ValueError, socket.timeout):
            continue
        finally:
            conn.close()
        return resp["timeOut"] > 0
    return None
