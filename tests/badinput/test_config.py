"""Server settings that change observable limits, configured the same way on
ZooKeeper (zoo.cfg / system properties) and on Keel (TOML): the observable
outcome must be the same."""

import socket
import time

from conftest import candidate_kind
from harness import zkproto as P
from badinput.test_badinput import decode_frames, serves_fresh_client, still_open


def both(servers, name, settings):
    kind = candidate_kind()
    zk = servers("zookeeper", name="zk-" + name, settings=settings)
    other = servers(kind, name=kind + "-" + name, settings=settings)
    return zk, other


def test_session_timeout_bounds(servers):
    zk, other = both(servers, "timeouts", {"min_session_timeout_ms": 1500, "max_session_timeout_ms": 4000})

    def probe(port):
        out = {}
        for asked in (100, 1499, 1500, 2500, 4000, 4001, 60000):
            with P.RawConnection(port) as c:
                out[asked] = c.handshake(timeout_ms=asked)["timeOut"]
                c.close_session()
        return out

    assert probe(other.port) == probe(zk.port)


def test_jute_max_buffer(servers):
    zk, other = both(servers, "jute", {"jute_max_buffer_bytes": 4096})

    def probe(port):
        out = {}
        with P.RawConnection(port) as c:
            c.handshake()
            hdr, _ = c.request(P.CREATE, P.create_body("/small", b"x" * 3000))
            out["create 3000 bytes"] = P.error_name(hdr["err"])
            out["open after 3000"] = still_open(c)
        with P.RawConnection(port) as c:
            c.handshake()
            c.send_frame(P.i32(1) + P.i32(P.CREATE) + P.create_body("/big", b"x" * 4200))
            closed, data = c.wait_closed(5)
            out["create 4200-byte data (frame > 4096)"] = {"closed": closed, "reply": decode_frames(data)}
        with P.RawConnection(port) as c:
            c.handshake()
            c.send_raw(P.i32(4097))
            closed, data = c.wait_closed(5)
            out["frame length 4097"] = {"closed": closed, "reply": decode_frames(data)}
        with P.RawConnection(port) as c:
            c.handshake()
            payload = P.i32(1) + P.i32(P.CREATE) + P.create_body("/edge", b"")
            payload = P.i32(1) + P.i32(P.CREATE) + P.create_body("/edge", b"y" * (4096 - len(payload)))
            c.send_frame(payload)
            try:
                r = P.Reader(c.read_frame(5))
                out["frame of exactly 4096"] = [r.i32(), P.error_name((r.i64(), r.i32())[1])]
            except (P.Closed, OSError) as e:
                out["frame of exactly 4096"] = type(e).__name__
        return out

    want, got = probe(zk.port), probe(other.port)
    print("zookeeper:", want)
    assert got == want, "zookeeper: %r\n%s: %r" % (want, other.kind, got)
    assert serves_fresh_client(other)


def test_max_client_connections_per_ip(servers):
    zk, other = both(servers, "maxcnxns", {"max_client_connections_per_ip": 3})

    def probe(port):
        conns = []
        out = {}
        time.sleep(1.0)  # let the readiness-probe connections (4lw) be reaped
        try:
            for i in range(3):
                c = P.RawConnection(port)
                c.handshake()
                conns.append(c)
            try:
                extra = P.RawConnection(port)
                try:
                    extra.send_frame(P.connect_request())
                    extra.read_frame(3)
                    out["4th connection"] = "answered"
                finally:
                    extra.close()
            except socket.timeout:
                out["4th connection"] = "no answer, not closed"
            except (P.Closed, OSError):
                out["4th connection"] = "closed"
            out["first 3 still work"] = all(still_open(c) for c in conns)
            for c in conns:
                c.close_session()
                c.close()
            conns = []
            c = P.RawConnection(port)
            c.handshake()
            out["new connection after others closed"] = still_open(c)
            c.close_session()
            c.close()
        finally:
            for c in conns:
                c.close()
        return out

    want, got = probe(zk.port), probe(other.port)
    print("zookeeper:", want)
    assert got == want, "zookeeper: %r\n%s: %r" % (want, other.kind, got)
