"""Server settings that change observable limits, configured the same way on
ZooKeeper (zoo.cfg / system properties) and on Keel (TOML): the observable
outcome must be the same."""

import os
import socket
import subprocess
import time

from conftest import candidate_kind, require_keel
from harness.servers import KEEL_BIN, free_port
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


def keel_refuses(args, workdir):
    """Runs `keel server ARGS` (its data in workdir unless ARGS name one):
    it must exit with status 1 within a few seconds and explain itself on
    one error line (a TOML error adds the line it points at), without a panic, a backtrace or a cause printed twice."""
    if "--data-dir" not in args:
        args = args + ["--data-dir", os.path.join(workdir, "data")]
    env = dict(os.environ, RUST_BACKTRACE="1", NO_COLOR="1")
    done = subprocess.run([KEEL_BIN, "server"] + args, cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=20)
    errors = [i for i, line in enumerate(done.stderr.splitlines()) if line.startswith("error: ")]
    assert done.returncode == 1, (args, done.returncode, done.stderr[-2000:])
    assert len(errors) == 1, (args, done.stderr[-2000:])
    for bad in ("panicked", "Caused by", "Stack backtrace", "RUST_BACKTRACE"):
        assert bad not in done.stderr, (args, done.stderr[-2000:])
    # A TOML error goes on with the line it points at: the rest of stderr
    # from the error on is the explanation.
    return "\n".join(done.stderr.splitlines()[errors[0]:])


def test_keel_refuses_a_bad_setting_with_one_error(tmp_path):
    require_keel()
    workdir = str(tmp_path)

    def config(name, text):
        path = os.path.join(workdir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    a_file = config("not-a-dir", "x")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        cases = [
            (["--config", os.path.join(workdir, "missing.toml")], ["missing.toml", "No such file"]),
            (["--config", config("typo.toml", "client_prot = 1\n")], ["typo.toml", "client_prot"]),
            (["--config", config("syntax.toml", "client_port = \n")], ["syntax.toml"]),
            (["--config", config("type.toml", "client_port = \"x\"\n")], ["type.toml", "client_port"]),
            (["--tick-time-ms", "0"], ["tick_time_ms"]),
            (["--id", "300"], ["server_id 300"]),
            (["--peers", "garbage"], ["garbage"]),
            (["--data-dir", a_file], ["data dir", "not-a-dir", "Not a directory"]),
            (["--client-port", str(busy.getsockname()[1])], [str(busy.getsockname()[1]), "in use"]),
            (["--client-port", str(free_port()), "--resp-port", str(busy.getsockname()[1])], ["Keel KV", "in use"]),
            (["--client-port", str(free_port()), "--metrics-port", str(busy.getsockname()[1])],
             ["metrics", "in use"]),
        ]
        for args, words in cases:
            line = keel_refuses(args, workdir)
            for word in words:
                assert word in line, (args, word, line)
            # The cause is said once.
            assert line.count("No such file") <= 1 and line.count("in use") <= 1, line
    finally:
        busy.close()
