"""Raw-socket abuse: each probe runs against Apache ZooKeeper and against
Keel; the observable outcome (bytes answered, error codes, whether the server
closed the connection) must be the same, and the server must still serve a
fresh kazoo client afterwards.

What ZooKeeper 3.8 does (recorded by these probes):
  * frame length > jute.maxbuffer (1048575) or < 0, after the handshake or as
    the first packet: connection closed, nothing sent back;
  * garbage / HTTP / truncated first packet: connection closed, nothing sent;
  * unknown opcode after the handshake: a reply header {xid, zxid=-1,
    err=UNIMPLEMENTED(-6)} and then the connection is closed;
  * malformed request body: reply with MARSHALLINGERROR(-5) (see probe);
    so is a multi holding an op it cannot carry (exists, an unknown op
    code) or a multiRead of writes (which also carries the empty multi
    response ZooKeeper had made); the session goes on;
  * a create op whose flags are no CreateMode in a multi: the multi is
    read and that op fails (BADARGUMENTS, a zxid taken), not the whole
    multi (probe_create_flags_that_are_no_create_mode);
  * invalid paths in create: BADARGUMENTS(-8) or NONODE(-101) depending on
    whether the parent exists (parent lookup happens before validation);
  * a four-letter word not in the whitelist: "<cmd> is not executed because it
    is not in the whitelist.\\n", then close.
"""

import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kazoo.client import KazooClient

from conftest import candidate_kind, require_keel
from harness import make_server, four_letter_word, mntr
from harness import zkproto as P

MAX = 1048575  # jute.maxbuffer default


def zxid_class(z):
    return z if z in (-1, 0) else ("positive" if z > 0 else "negative")


def decode_frames(data):
    """Split bytes into frames and decode reply headers."""
    out = []
    pos = 0
    while pos + 4 <= len(data):
        n = int.from_bytes(data[pos:pos + 4], "big", signed=True)
        body = data[pos + 4:pos + 4 + n]
        if n < 16 or len(body) < n:
            out.append({"raw": data[pos:].hex()[:200]})
            return out
        r = P.Reader(body)
        out.append({"xid": r.i32(), "zxid": zxid_class(r.i64()), "err": P.error_name(r.i32()),
                    "bodyLen": n - 16})
        pos += 4 + n
    if pos < len(data):
        out.append({"trailing": data[pos:].hex()[:200]})
    return out


def still_open(conn):
    """Ping on the same session: True if answered."""
    try:
        hdr = conn.ping()
        return hdr["err"] == 0
    except (P.Closed, OSError, socket.timeout):
        return False


def serves_fresh_client(server):
    c = KazooClient(hosts=server.address, timeout=10)
    try:
        c.start(timeout=15)
        path = c.create("/badinput-check-", b"ok", ephemeral=True, sequence=True)
        data, _ = c.get(path)
        c.delete(path)
        return data == b"ok"
    finally:
        c.stop()
        c.close()


# ---------------------------------------------------------------- probes
def probe_oversize_after_handshake(port):
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_raw(P.i32(MAX + 1) + b"\0" * 64)
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_oversize_by_much_after_handshake(port):
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_raw(P.i32(0x7FFFFFFF) + b"\0" * 64)
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_negative_length_after_handshake(port):
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_raw(P.i32(-5))
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_max_length_frame_accepted(port):
    """A create whose frame is exactly jute.maxbuffer bytes long."""
    with P.RawConnection(port, timeout=15) as c:
        c.handshake()
        # Zero-padded: a path of fixed length gives a value of fixed length,
        # so the outcome (get_len) compares equal from one run to the next.
        path = "/badinput-big-%06d" % int(time.time() * 1000 % 1000000)
        overhead = len(P.i32(1) + P.i32(P.CREATE) + P.create_body(path, b""))
        data = b"x" * (MAX - overhead)
        payload = P.i32(1) + P.i32(P.CREATE) + P.create_body(path, data)
        assert len(payload) == MAX
        c.send_frame(payload)
        try:
            frame = c.read_frame(15)
            r = P.Reader(frame)
            res = {"xid": r.i32(), "zxid": zxid_class(r.i64()), "err": P.error_name(r.i32())}
        except (P.Closed, OSError) as e:
            res = {"closed": type(e).__name__}
        res["open_after"] = still_open(c)
        if res.get("err") == "OK":
            hdr, rd = c.request(P.GET_DATA, P.path_watch_body(path))
            got = rd.buf() if hdr["err"] == 0 else None
            res["get_len"] = len(got) if got is not None else None
            c.request(P.DELETE, P.delete_body(path))
        return res


def probe_oversize_first_packet(port):
    with P.RawConnection(port) as c:
        c.send_raw(P.i32(MAX + 1) + b"\0" * 64)
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_garbage_first_packet(port):
    with P.RawConnection(port) as c:
        c.send_raw(b"\x00\x00\x00\x2c" + bytes(range(200, 244)))  # 44 bytes of junk as a "ConnectRequest"
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_random_bytes_first_packet(port):
    with P.RawConnection(port) as c:
        c.send_raw(b"\xde\xad\xbe\xef" * 16)
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_http_first_packet(port):
    with P.RawConnection(port) as c:
        c.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_connect_short_passwd_length(port):
    """ConnectRequest whose passwd length field points past the frame."""
    with P.RawConnection(port) as c:
        body = P.i32(0) + P.i64(0) + P.i32(10000) + P.i64(0) + P.i32(1000) + b"\0" * 16 + b"\0"
        c.send_frame(body)
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_connect_without_readonly_flag(port):
    """Pre-3.4 ConnectRequest (no trailing readOnly byte) must still work."""
    with P.RawConnection(port) as c:
        body = P.i32(0) + P.i64(0) + P.i32(10000) + P.i64(0) + P.buf(b"\0" * 16)
        c.send_frame(body)
        frame = c.read_frame(5)
        r = P.Reader(frame)
        res = {"protocolVersion": r.i32(), "timeOut": r.i32(), "sessionIdNonZero": r.i64() != 0,
               "passwdLen": len(r.buf() or b""), "remaining": r.remaining()}
        c.xid = 0
        res["open_after"] = still_open(c)
        return res


def probe_request_as_first_packet(port):
    """A getData request where the ConnectRequest should be."""
    with P.RawConnection(port) as c:
        c.send_frame(P.i32(1) + P.i32(P.GET_DATA) + P.path_watch_body("/"))
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_truncated_first_packet_then_close(port):
    with P.RawConnection(port) as c:
        c.send_raw(P.i32(44) + b"\0" * 10)
        c.sock.shutdown(socket.SHUT_WR)
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_truncated_frame_after_handshake_then_close(port):
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_raw(P.i32(100) + P.i32(1) + P.i32(P.GET_DATA))
        c.sock.shutdown(socket.SHUT_WR)
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_unknown_opcode(port):
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_frame(P.i32(77) + P.i32(999) + b"abc")
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_unknown_opcode_50(port):
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_frame(P.i32(3) + P.i32(50))
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_header_only_4_bytes(port):
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_frame(P.i32(5))
        closed, data = c.wait_closed(5)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_malformed_create_body(port):
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_frame(P.i32(5) + P.i32(P.CREATE) + b"\0\0")
        closed, data = c.wait_closed(3)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_create_path_length_past_frame(port):
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_frame(P.i32(6) + P.i32(P.CREATE) + P.i32(5000) + b"/abc")
        closed, data = c.wait_closed(3)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_invalid_paths_in_create(port):
    out = {}
    with P.RawConnection(port) as c:
        c.handshake()
        c.create("/badinput-parent")
        for path in ["a/b", "/a//b", "/a/", "/badinput-parent/", "/badinput-parent//x",
                     "/badinput-parent/.", "/badinput-parent/..", "", "/badinput-parent/a\x00b",
                     "/badinput-parent/\x01"]:
            hdr, _ = c.request(P.CREATE, P.create_body(path))
            out[repr(path)] = P.error_name(hdr["err"])
        out["open_after"] = still_open(c)
        c.request(P.DELETE, P.delete_body("/badinput-parent"))
    return out


def probe_pipelined_requests(port):
    with P.RawConnection(port) as c:
        c.handshake()
        frames = b"".join(P.frame(P.i32(x) + P.i32(P.EXISTS) + P.path_watch_body("/")) for x in (10, 11, 12))
        c.send_raw(frames)
        got = []
        for _ in range(3):
            r = P.Reader(c.read_frame(5))
            got.append({"xid": r.i32(), "err": P.error_name((r.i64(), r.i32())[1])})
        return {"replies": got, "open_after": still_open(c)}


def probe_request_in_one_byte_writes(port):
    with P.RawConnection(port) as c:
        c.handshake()
        data = P.frame(P.i32(21) + P.i32(P.EXISTS) + P.path_watch_body("/zookeeper"))
        for i in range(len(data)):
            c.send_raw(data[i:i + 1])
            time.sleep(0.002)
        r = P.Reader(c.read_frame(5))
        return {"xid": r.i32(), "zxid": zxid_class(r.i64()), "err": P.error_name(r.i32()),
                "stat_numChildren": r.stat()["numChildren"]}


def probe_close_session_twice(port):
    with P.RawConnection(port) as c:
        c.handshake()
        first = P.error_name(c.close_session())
        closed, data = c.wait_closed(3)
        return {"first": first, "closed": closed, "reply": decode_frames(data)}


def probe_request_after_close_session(port):
    """closeSession and an exists pipelined behind it. ZooKeeper answers the
    close, then either drops the exists or answers it SESSIONEXPIRED (racy in
    ZooKeeper itself), then closes the connection."""
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_frame(P.i32(1) + P.i32(P.CLOSE_SESSION))
        c.send_frame(P.i32(2) + P.i32(P.EXISTS) + P.path_watch_body("/"))
        closed, data = c.wait_closed(3)
        frames = decode_frames(data)
        rest = frames[1:]
        ok_rest = all(f.get("xid") == 2 and f.get("err") == "SESSIONEXPIRED" for f in rest) and len(rest) <= 1
        return {"closed": closed, "first": frames[:1],
                "after": "nothing or SESSIONEXPIRED for xid 2" if ok_rest else rest}


def probe_connect_twice(port):
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_frame(P.connect_request())
        closed, data = c.wait_closed(3)
        return {"closed": closed, "reply": decode_frames(data)}


def probe_check_outside_multi(port):
    """opcode 13 (check) sent on its own, not inside a multi."""
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_frame(P.i32(9) + P.i32(P.CHECK) + P.ustr("/") + P.i32(-1))
        closed, data = c.wait_closed(3)
        res = {"closed": closed, "reply": decode_frames(data)}
        if not closed:
            res["open_after"] = still_open(c)
        return res


def probe_multi_read_mixed_with_write(port):
    """opcode 22 (multiRead) containing a setData op."""
    with P.RawConnection(port) as c:
        c.handshake()
        # MultiHeader(type, done, err) + op body, terminated by MultiHeader(-1, true, -1)
        ops = (P.i32(P.GET_DATA) + P.boolean(False) + P.i32(-1) + P.path_watch_body("/")
               + P.i32(P.SET_DATA) + P.boolean(False) + P.i32(-1) + P.set_data_body("/", b"x")
               + P.i32(-1) + P.boolean(True) + P.i32(-1))
        c.send_frame(P.i32(10) + P.i32(P.MULTI_READ) + ops)
        closed, data = c.wait_closed(3)
        res = {"closed": closed, "reply": decode_frames(data)}
        if not closed:
            res["open_after"] = still_open(c)
        return res


def probe_multi_with_unknown_ops(port):
    """opcode 14 (multi) holding an op a multi cannot carry (exists) and an
    op code nobody knows: the record does not deserialize."""
    res = {}
    for name, op, body in (("exists", P.EXISTS, P.path_watch_body("/")),
                           ("op999", 999, P.delete_body("/nope"))):
        with P.RawConnection(port) as c:
            c.handshake()
            c.send_frame(P.i32(11) + P.i32(P.MULTI) + P.multi_body([(op, body)]))
            closed, data = c.wait_closed(3)
            res[name] = {"closed": closed, "reply": decode_frames(data)}
            if not closed:
                res[name]["open_after"] = still_open(c)
    return res


def probe_multi_read_of_writes(port):
    """opcode 22 (multiRead) holding only a create: not mixed, so it
    deserializes, and fails as the first op is no read."""
    with P.RawConnection(port) as c:
        c.handshake()
        c.send_frame(P.i32(12) + P.i32(P.MULTI_READ) + P.multi_body([(P.CREATE, P.create_body("/mrw"))]))
        closed, data = c.wait_closed(3)
        res = {"closed": closed, "reply": decode_frames(data)}
        if not closed:
            res["open_after"] = still_open(c)
        return res


def multi_results(r):
    """A multi reply's body: [(type, err or path)], up to the done header."""
    out = []
    while True:
        op, done, _ = r.i32(), r.boolean(), r.i32()
        if done:
            return out
        if op == P.MULTI_ERROR:
            out.append(("error", P.error_name(r.i32())))
        elif op == P.CREATE:
            out.append(("create", r.ustr()))
        elif op in (P.CREATE2, P.CREATE_CONTAINER, P.CREATE_TTL):
            out.append(("create2", r.ustr(), r.stat()["dataLength"]))
        elif op == P.DELETE or op == P.CHECK:
            out.append((op,))
        else:
            out.append(("op %d" % op, r.remaining()))
            return out


def probe_create_flags_that_are_no_create_mode(port):
    """Create ops whose flags are no CreateMode (7, -1, 100, ...) in a multi,
    in each create opcode (1, 15, 19, 21), between two other ops: ZooKeeper
    3.8 reads them (MultiOperationRecord keeps the flags) and fails that op
    at prep, BADARGUMENTS, the others answered OK before it and
    RUNTIMEINCONSISTENCY after, a zxid taken; the same flags outside a
    multi, and TTL modes with a ttl out of range, in a multi and out."""
    out = {}
    with P.RawConnection(port) as c:
        c.handshake()

        def zxid_now():
            return c.request(P.EXISTS, P.path_watch_body("/"))[0]["zxid"]

        def outcome_once(opcode, body):
            before = zxid_now()
            hdr, r = c.request(opcode, body)
            got = {"err": P.error_name(hdr["err"]), "zxids taken": hdr["zxid"] - before}
            if opcode == P.MULTI and hdr["err"] == 0:
                got["results"] = multi_results(r)
            got["left"] = r.remaining()
            return got

        def outcome(opcode, body, undo):
            # Each case runs twice, `undo` (deleting what it may have
            # created) before each run, and its zxids are the fewer of the
            # two: a transaction of another session (ZooKeeper expiring or
            # closing an earlier probe's session) may land between the two
            # requests of one run, and once did on ZooKeeper under the
            # parallel group's load. Most cases fail and change nothing; a
            # few create (op 21 with a mode that is no TTL mode).
            undo()
            first = outcome_once(opcode, body)
            undo()
            second = outcome_once(opcode, body)
            assert {k: v for k, v in first.items() if k != "zxids taken"} == \
                {k: v for k, v in second.items() if k != "zxids taken"}, (first, second)
            first["zxids taken"] = min(first["zxids taken"], second["zxids taken"])
            return first

        def create_op(opcode, path, flags, ttl=1000):
            if opcode == P.CREATE_TTL:
                return P.create_ttl_body(path, flags=flags, ttl=ttl)
            return P.create_body(path, flags=flags)

        cases = [(op, flags, 1000) for op in (P.CREATE, P.CREATE2, P.CREATE_CONTAINER, P.CREATE_TTL)
                 for flags in (7, -1, 100, -2**31)]
        cases += [(P.CREATE_TTL, flags, ttl) for flags in (P.PERSISTENT_WITH_TTL, P.PERSISTENT_SEQUENTIAL_WITH_TTL)
                  for ttl in (0, -1, 2**40, 2**63 - 1)]
        # op 21 whose flags are no TTL mode: its ttl is dropped, in range or not
        cases += [(P.CREATE_TTL, P.PERSISTENT, ttl) for ttl in (0, 2**40)]
        for n, (op, flags, ttl) in enumerate(cases):
            name = "op %d flags %d ttl %d" % (op, flags, ttl)
            path = "/badinput-flags-%d" % n
            bad = create_op(op, path, flags, ttl)

            def undo():
                for created in (path, "/badinput-flags-ok"):
                    c.request(P.DELETE, P.delete_body(created))
            out[name + " in a multi"] = outcome(P.MULTI, P.multi_body([
                (P.CREATE, P.create_body("/badinput-flags-ok")),
                (op, bad),
                (P.DELETE, P.delete_body("/badinput-flags-missing")),
            ]), undo)
            hdr, _ = c.request(P.EXISTS, P.path_watch_body("/badinput-flags-ok"))
            out[name + ": the create before it"] = P.error_name(hdr["err"])
            out[name + " alone in a multi"] = outcome(P.MULTI, P.multi_body([(op, bad)]), undo)
            out[name + " outside a multi"] = outcome(op, bad, undo)
            undo()
        out["open_after"] = still_open(c)
    return out


def probe_non_ascii_4lw(port):
    return {"answer": four_letter_word(port, b"\xff\xfe\xfd\xfc").decode("latin-1")}


PROBES = [
    probe_oversize_after_handshake, probe_oversize_by_much_after_handshake,
    probe_negative_length_after_handshake, probe_max_length_frame_accepted,
    probe_oversize_first_packet, probe_garbage_first_packet, probe_random_bytes_first_packet,
    probe_http_first_packet, probe_connect_short_passwd_length, probe_connect_without_readonly_flag,
    probe_request_as_first_packet, probe_truncated_first_packet_then_close,
    probe_truncated_frame_after_handshake_then_close, probe_unknown_opcode, probe_unknown_opcode_50,
    probe_header_only_4_bytes, probe_malformed_create_body, probe_create_path_length_past_frame,
    probe_invalid_paths_in_create, probe_pipelined_requests, probe_request_in_one_byte_writes,
    probe_close_session_twice, probe_request_after_close_session, probe_connect_twice,
    probe_check_outside_multi, probe_multi_read_mixed_with_write, probe_multi_with_unknown_ops,
    probe_multi_read_of_writes, probe_create_flags_that_are_no_create_mode, probe_non_ascii_4lw,
]


@pytest.fixture(scope="module")
def pair():
    kind = candidate_kind()
    if kind == "keel":
        require_keel()
    started = []
    try:
        for k, name in (("zookeeper", "zk-badinput"), (kind, kind + "-badinput")):
            s = make_server(k, name=name)
            started.append(s)
            s.start()
        yield started[0], started[1]
    finally:
        for s in started:
            s.kill()


def run_probe(probe, server):
    try:
        return probe(server.port)
    except AssertionError:
        raise  # the probe's own check failed: a bug in the test, no outcome
    except Exception as e:  # an exception is an outcome too
        return {"exception": type(e).__name__, "msg": str(e)[:200]}


@pytest.mark.parametrize("probe", PROBES, ids=[p.__name__[len("probe_"):] for p in PROBES])
def test_bad_input(pair, probe):
    zk, other = pair
    # Both servers at once: most probes wait out a timeout on each (the two
    # servers and their connections share nothing).
    with ThreadPoolExecutor(max_workers=1) as beside:
        want_later = beside.submit(run_probe, probe, zk)
        got = run_probe(probe, other)
        want = want_later.result()
        zk_ok_later = beside.submit(serves_fresh_client, zk)
        try:
            other_ok = serves_fresh_client(other)
        except Exception as e:
            other_ok = "fresh kazoo client failed: %r (server running: %s)" % (e, other.running())
        zk_ok = zk_ok_later.result()
    assert zk_ok, "ZooKeeper itself stopped serving after %s" % probe.__name__
    problems = []
    if got != want:
        problems.append("outcome differs:\n  zookeeper: %r\n  %s: %r" % (want, other.kind, got))
    if other_ok is not True:
        problems.append("%s no longer serves a fresh client: %s\n%s" % (other.kind, other_ok, other.log_tail(60)))
    assert not problems, "\n".join(problems)


def test_four_letter_word_not_in_whitelist(servers):
    kind = candidate_kind()
    settings = {"four_letter_words": ["ruok", "srvr"]}
    zk = servers("zookeeper", name="zk-4lw", settings=settings)
    other = servers(kind, name=kind + "-4lw", settings=settings)
    for word in (b"stat", b"mntr", b"envi", b"conf", b"cons", b"ruok", b"isro"):
        want = four_letter_word(zk.port, word)
        got = four_letter_word(other.port, word)
        assert got == want, "4lw %r with whitelist ruok,srvr: zookeeper %r, %s %r" % (word, want, kind, got)
    assert four_letter_word(other.port, b"srvr").startswith(b"Zookeeper version:")
    assert serves_fresh_client(other)


def connection_counts(port):
    """What srvr, stat and mntr say of the connections, asked one at a time
    (each on its own connection, which is one of those counted)."""
    def line(word):
        text = four_letter_word(port, word).decode("utf-8", "replace")
        return next((x.split(":", 1)[1].strip() for x in text.splitlines() if x.startswith("Connections:")), None)
    return {"srvr": line("srvr"), "stat": line("stat"), "mntr": mntr(port).get("zk_num_alive_connections")}


def settled_counts(port, expected, timeout=5.0):
    """connection_counts once all three say `expected` (a connection closed
    just before may still be on its way out), or as last seen."""
    deadline = time.monotonic() + timeout
    while True:
        counts = connection_counts(port)
        if set(counts.values()) == {str(expected)} or time.monotonic() >= deadline:
            return counts
        time.sleep(0.05)


def test_connection_counts_include_every_connection_the_asking_one_too(servers):
    """ZooKeeper 3.8's srvr/stat `Connections:` and mntr's
    zk_num_alive_connections count every connection it holds
    (ServerCnxnFactory.getNumAliveConnections), the one asking the word
    included: a bare srvr on an idle server says `Connections: 1`; a TCP
    connection that has sent nothing yet counts, and so does a session's."""
    kind = candidate_kind()
    seen = {}
    for k, name in (("zookeeper", "zk-conns"), (kind, kind + "-conns")):
        server = servers(k, name=name)
        steps = [("idle", settled_counts(server.port, 1))]
        silent = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        try:
            steps.append(("a connection that sent nothing", settled_counts(server.port, 2)))
            with P.RawConnection(server.port) as session:
                session.handshake()
                steps.append(("and a session", settled_counts(server.port, 3)))
                session.close_session()
        finally:
            silent.close()
        steps.append(("both closed", settled_counts(server.port, 1)))
        seen["zookeeper" if name.startswith("zk-") else "other"] = steps
    assert seen["other"] == seen["zookeeper"], "zookeeper: %r\n%s: %r" % (seen["zookeeper"], kind, seen["other"])


def packet_and_node_counts(port):
    """srvr's Received/Sent/Node count (srvr counts itself received, not
    yet sent) and then stat's Node count, each asked on its own connection."""
    def fields(word):
        text = four_letter_word(port, word).decode("utf-8", "replace")
        return dict(x.split(": ", 1) for x in text.splitlines() if x.startswith(("Received:", "Sent:", "Node count:")))
    srvr = fields("srvr")
    return {"received": srvr["Received"], "sent": srvr["Sent"], "nodes": srvr["Node count"],
            "stat nodes": fields("stat")["Node count"]}


def test_packet_and_node_counts_are_zookeepers(servers):
    """ZooKeeper 3.8 counts as packets received each ConnectRequest, request
    and ping, and each four-letter word it knows (checkFourLetterWord's
    packetReceived, before the word runs); as packets sent each
    ConnectResponse, reply and notification, and each 8192 chars of a
    word's answer (SendBufferWriter's sends). Its node count is its
    DataTree's nodes.size(), where the root is held under "" and "/":
    5 on a fresh server, one more than the znodes there are, as nodes come
    and go. srst zeroes the counters first (the harness's readiness polls
    have counted words already, as many as it needed)."""
    kind = candidate_kind()
    seen = {}
    for k, name in (("zookeeper", "zk-packets"), (kind, kind + "-packets")):
        server = servers(k, name=name)
        port = server.port
        assert four_letter_word(port, "srst") == b"Server stats reset.\n"
        steps = [("after srst", packet_and_node_counts(port))]
        client = KazooClient(hosts=server.address, timeout=10)
        client.start()
        client.get("/")
        client.stop()
        client.close()
        steps.append(("a session: connect, get /, close", packet_and_node_counts(port)))
        client = KazooClient(hosts=server.address, timeout=10)
        client.start()
        try:
            client.create("/a/b/c", b"x", makepath=True)
            client.create("/e", ephemeral=True)
            steps.append(("four znodes more", packet_and_node_counts(port)))
            client.delete("/a", recursive=True)
            steps.append(("/a/b/c deleted", packet_and_node_counts(port)))
        finally:
            client.stop()
            client.close()
        steps.append(("the ephemeral gone", packet_and_node_counts(port)))
        stats = mntr(port)
        steps.append(("mntr", {key: stats[key] for key in ("zk_packets_received", "zk_packets_sent", "zk_znode_count")}))
        seen["zookeeper" if name.startswith("zk-") else "other"] = steps
    assert seen["zookeeper"][0][1]["nodes"] == "5", seen["zookeeper"]
    assert seen["other"] == seen["zookeeper"], "zookeeper: %r\n%s: %r" % (seen["zookeeper"], kind, seen["other"])
