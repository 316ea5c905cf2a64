"""A minimal, synchronous ZooKeeper wire-protocol client for raw-socket tests.

It speaks just enough jute to do a handshake, send arbitrary requests (or
arbitrary bytes), and read replies and notifications. Nothing here is clever on
purpose: tests use it to send exactly the bytes they mean to.
"""

import socket
import struct
import time

# opcodes
NOTIFICATION = 0
CREATE = 1
DELETE = 2
EXISTS = 3
GET_DATA = 4
SET_DATA = 5
GET_ACL = 6
SET_ACL = 7
GET_CHILDREN = 8
SYNC = 9
PING = 11
GET_CHILDREN2 = 12
CHECK = 13
MULTI = 14
CREATE2 = 15
RECONFIG = 16
CHECK_WATCHES = 17
REMOVE_WATCHES = 18
CREATE_CONTAINER = 19
DELETE_CONTAINER = 20
CREATE_TTL = 21
MULTI_READ = 22
AUTH = 100
SET_WATCHES = 101
SASL = 102
GET_EPHEMERALS = 103
GET_ALL_CHILDREN_NUMBER = 104
SET_WATCHES2 = 105
ADD_WATCH = 106
WHO_AM_I = 107
CREATE_SESSION = -10
CLOSE_SESSION = -11
# ClickHouse Keeper's extensions (src/Common/ZooKeeper/ZooKeeperConstants.h)
FILTERED_LIST = 500
CHECK_NOT_EXISTS = 501
CREATE_IF_NOT_EXISTS = 502
REMOVE_RECURSIVE = 503
MULTI_ERROR = -1

LIST_ALL = 0
LIST_PERSISTENT_ONLY = 1
LIST_EPHEMERAL_ONLY = 2

XID_NOTIFICATION = -1
XID_PING = -2
XID_AUTH = -4
XID_SET_WATCHES = -8

PERSISTENT = 0
EPHEMERAL = 1
PERSISTENT_SEQUENTIAL = 2
EPHEMERAL_SEQUENTIAL = 3
CONTAINER = 4
PERSISTENT_WITH_TTL = 5
PERSISTENT_SEQUENTIAL_WITH_TTL = 6

ADD_WATCH_PERSISTENT = 0
ADD_WATCH_PERSISTENT_RECURSIVE = 1

WORLD_ALL = [(31, "world", "anyone")]

ERROR_NAMES = {
    0: "OK", -1: "SYSTEMERROR", -2: "RUNTIMEINCONSISTENCY", -3: "DATAINCONSISTENCY",
    -4: "CONNECTIONLOSS", -5: "MARSHALLINGERROR", -6: "UNIMPLEMENTED", -7: "OPERATIONTIMEOUT",
    -8: "BADARGUMENTS", -12: "UNKNOWNSESSION", -13: "NEWCONFIGNOQUORUM", -14: "RECONFIGINPROGRESS",
    -100: "APIERROR", -101: "NONODE", -102: "NOAUTH", -103: "BADVERSION",
    -108: "NOCHILDRENFOREPHEMERALS", -110: "NODEEXISTS", -111: "NOTEMPTY", -112: "SESSIONEXPIRED",
    -113: "INVALIDCALLBACK", -114: "INVALIDACL", -115: "AUTHFAILED", -118: "SESSIONMOVED",
    -119: "NOTREADONLY", -120: "EPHEMERALONLOCALSESSION", -121: "NOWATCHER",
    -122: "REQUESTTIMEOUT", -123: "RECONFIGDISABLED", -124: "SESSIONCLOSEDREQUIRESASLAUTH",
    -125: "QUOTAEXCEEDED", -127: "THROTTLEDOP",
}

STAT_FIELDS = ("czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
               "ephemeralOwner", "dataLength", "numChildren", "pzxid")


# ---------------------------------------------------------------- encoding
def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def boolean(v):
    return b"\x01" if v else b"\x00"


def buf(b):
    if b is None:
        return i32(-1)
    return i32(len(b)) + b


def ustr(s):
    if s is None:
        return i32(-1)
    b = s.encode("utf-8") if isinstance(s, str) else s
    return i32(len(b)) + b


def acl_vec(acls):
    out = i32(len(acls))
    for perms, scheme, ident in acls:
        out += i32(perms) + ustr(scheme) + ustr(ident)
    return out


def frame(payload):
    return i32(len(payload)) + payload


def connect_request(timeout_ms=10000, session_id=0, passwd=b"\x00" * 16, last_zxid=0,
                    protocol_version=0, read_only=False):
    return (i32(protocol_version) + i64(last_zxid) + i32(timeout_ms) + i64(session_id)
            + buf(passwd) + boolean(read_only))


def create_body(path, data=b"", acls=WORLD_ALL, flags=PERSISTENT):
    return ustr(path) + buf(data) + acl_vec(acls) + i32(flags)


def create_ttl_body(path, data=b"", acls=WORLD_ALL, flags=PERSISTENT_WITH_TTL, ttl=1000):
    return create_body(path, data, acls, flags) + i64(ttl)


def path_watch_body(path, watch=False):
    return ustr(path) + boolean(watch)


def delete_body(path, version=-1):
    return ustr(path) + i32(version)


def set_data_body(path, data, version=-1):
    return ustr(path) + buf(data) + i32(version)


def add_watch_body(path, mode):
    return ustr(path) + i32(mode)


def remove_watches_body(path, wtype):
    return ustr(path) + i32(wtype)


def check_body(path, version=-1):
    """check (13) and ClickHouse's checkNotExists (501)."""
    return ustr(path) + i32(version)


def filtered_list_body(path, list_type=LIST_ALL, watch=False):
    """ClickHouse's filteredList (500): getChildren's body and a type byte."""
    return ustr(path) + boolean(watch) + bytes([list_type])


def remove_recursive_body(path, limit):
    """ClickHouse's removeRecursive (503): path and an unsigned 32-bit limit."""
    return ustr(path) + struct.pack(">I", limit)


def multi_header(op, done=False, err=-1):
    return i32(op) + boolean(done) + i32(err)


def multi_body(ops):
    """multi (14) / multiRead (22): (opcode, body) pairs, then the terminator."""
    return b"".join(multi_header(op) + body for op, body in ops) + multi_header(-1, True, -1)


# ---------------------------------------------------------------- decoding
class Reader:
    def __init__(self, data, pos=0):
        self.data = data
        self.pos = pos

    def i32(self):
        v = struct.unpack_from(">i", self.data, self.pos)[0]
        self.pos += 4
        return v

    def i64(self):
        v = struct.unpack_from(">q", self.data, self.pos)[0]
        self.pos += 8
        return v

    def boolean(self):
        v = self.data[self.pos] != 0
        self.pos += 1
        return v

    def buf(self):
        n = self.i32()
        if n < 0:
            return None
        v = self.data[self.pos:self.pos + n]
        if len(v) != n:
            raise ValueError("truncated buffer")
        self.pos += n
        return bytes(v)

    def ustr(self):
        b = self.buf()
        return None if b is None else b.decode("utf-8")

    def stat(self):
        return {
            "czxid": self.i64(), "mzxid": self.i64(), "ctime": self.i64(), "mtime": self.i64(),
            "version": self.i32(), "cversion": self.i32(), "aversion": self.i32(),
            "ephemeralOwner": self.i64(), "dataLength": self.i32(), "numChildren": self.i32(),
            "pzxid": self.i64(),
        }

    def str_vec(self):
        n = self.i32()
        return [self.ustr() for _ in range(max(n, 0))]

    def remaining(self):
        return len(self.data) - self.pos


class Closed(Exception):
    """The server closed the connection (or reset it)."""


class RawConnection:
    """One TCP connection. `handshake()` makes it a session."""

    def __init__(self, port, host="127.0.0.1", timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.rbuf = b""
        self.xid = 0
        self.notifications = []
        self.session_id = None
        self.passwd = None
        self.negotiated_timeout = None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    # -- bytes level
    def send_raw(self, data):
        self.sock.sendall(data)

    def send_frame(self, payload):
        self.send_raw(frame(payload))

    def _fill(self, n, deadline):
        while len(self.rbuf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("timed out waiting for %d bytes (have %d)" % (n, len(self.rbuf)))
            self.sock.settimeout(remaining)
            try:
                b = self.sock.recv(65536)
            except ConnectionResetError as e:
                raise Closed("connection reset") from e
            if not b:
                raise Closed("connection closed by server (%d bytes pending)" % len(self.rbuf))
            self.rbuf += b

    def read_frame(self, timeout=None):
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self._fill(4, deadline)
        n = struct.unpack(">i", self.rbuf[:4])[0]
        self._fill(4 + n, deadline)
        payload = self.rbuf[4:4 + n]
        self.rbuf = self.rbuf[4 + n:]
        return payload

    def wait_closed(self, timeout=5.0):
        """Read until the server closes the connection. Returns (closed, bytes_received)."""
        got = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                b = self.sock.recv(65536)
            except socket.timeout:
                break
            except (ConnectionResetError, BrokenPipeError):
                return True, self.rbuf + got
            if not b:
                return True, self.rbuf + got
            got += b
        return False, self.rbuf + got

    # -- session level
    def handshake(self, timeout_ms=10000, session_id=0, passwd=b"\x00" * 16, last_zxid=0):
        self.send_frame(connect_request(timeout_ms, session_id, passwd, last_zxid))
        r = Reader(self.read_frame())
        resp = {"protocolVersion": r.i32(), "timeOut": r.i32(), "sessionId": r.i64(),
                "passwd": r.buf()}
        resp["readOnly"] = r.boolean() if r.remaining() > 0 else None
        self.session_id = resp["sessionId"]
        self.passwd = resp["passwd"]
        self.negotiated_timeout = resp["timeOut"]
        return resp

    def request(self, opcode, body=b"", xid=None, timeout=None):
        """Send one request and return (reply_header, Reader positioned at the body).
        Notifications arriving before the reply are stored in self.notifications."""
        if xid is None:
            self.xid += 1
            xid = self.xid
        self.send_frame(i32(xid) + i32(opcode) + body)
        while True:
            payload = self.read_frame(timeout)
            r = Reader(payload)
            hdr = {"xid": r.i32(), "zxid": r.i64(), "err": r.i32()}
            if hdr["xid"] == XID_NOTIFICATION:
                self.notifications.append({"type": r.i32(), "state": r.i32(), "path": r.ustr()})
                continue
            return hdr, r

    def ping(self):
        return self.request(PING, xid=XID_PING)[0]

    def read_notification(self, timeout=5.0):
        payload = self.read_frame(timeout)
        r = Reader(payload)
        hdr = {"xid": r.i32(), "zxid": r.i64(), "err": r.i32()}
        if hdr["xid"] != XID_NOTIFICATION:
            raise AssertionError("expected a notification, got %r" % hdr)
        ev = {"type": r.i32(), "state": r.i32(), "path": r.ustr()}
        self.notifications.append(ev)
        return ev

    def create(self, path, data=b"", flags=PERSISTENT, acls=WORLD_ALL):
        hdr, r = self.request(CREATE, create_body(path, data, acls, flags))
        return hdr["err"], (r.ustr() if hdr["err"] == 0 else None)

    def close_session(self):
        hdr, _ = self.request(CLOSE_SESSION)
        return hdr["err"]


def error_name(code):
    return ERROR_NAMES.get(code, "UNKNOWN(%d)" % code)
