"""TLS on the client port (Keel's secure_client_port, ZooKeeper's
secureClientPort with the Netty connection factory), each behaviour checked
against Keel and against ZooKeeper 3.8 with the same certificates (made by
the openssl CLI, security/secure.py): kazoo, the Java client and zkCli.sh
over TLS with verified certificates; four-letter words inside TLS; client
certificates (need, want); a plain-text client on the TLS port closed, not
left waiting; certificate reload on SIGHUP (Keel)."""

import os
import shutil
import signal
import subprocess
import socket
import ssl
import time

import pytest

from harness import four_letter_word, zkproto as P
from harness.javac import TIER1
from security.conftest import KINDS
from security.secure import (client_context, java_results, java_tls_properties, kazoo_client,
                             run_java, server_certificate, tls_four_letter_word,
                             tls_raw_connection, zkcli)

# Keel's TLS_HANDSHAKE_TIMEOUT_MS (crates/server/src/lib.rs).
KEEL_TLS_HANDSHAKE_TIMEOUT_S = 10.0


@pytest.mark.parametrize("kind", KINDS)
def test_kazoo_over_tls_verifies_both_sides_and_the_plain_port_serves_beside_it(kind, pki, secure_server):
    server = secure_server(kind, tls=pki, client_auth="need", shared=True)
    secure = kazoo_client(server, pki)
    secure.start(timeout=20)
    try:
        secure.create("/tls", b"over tls")
        assert secure.get("/tls")[0] == b"over tls"
        assert "tls" in secure.get_children("/")
    finally:
        secure.stop()
        secure.close()
    # The plain port of the same server sees the same tree.
    plain = kazoo_client(server)
    plain.start(timeout=20)
    try:
        assert plain.get("/tls")[0] == b"over tls"
    finally:
        plain.stop()
        plain.close()


@pytest.mark.parametrize("kind", KINDS)
def test_four_letter_words_answer_inside_tls_and_not_in_plain_text_on_the_tls_port(kind, pki, secure_server):
    server = secure_server(kind, tls=pki, client_auth="need", shared=True)
    context = client_context(pki, cert="client")
    assert tls_four_letter_word(server.secure_port, "ruok", context) == b"imok"
    assert tls_four_letter_word(server.secure_port, "srvr", context).startswith(b"Zookeeper version:")
    conf = tls_four_letter_word(server.secure_port, "conf", context).decode()
    assert "secureClientPort=%d" % server.secure_port in conf
    # Plain text on the TLS port: no answer, the connection ends.
    started = time.monotonic()
    answer = four_letter_word(server.secure_port, b"ruok", timeout=5.0)
    assert answer != b"imok" and time.monotonic() - started < 5.0


@pytest.mark.parametrize("kind", KINDS)
def test_a_plain_text_session_request_on_the_tls_port_is_closed_not_left_waiting(kind, pki, secure_server):
    server = secure_server(kind, tls=pki, client_auth="need", shared=True)
    with P.RawConnection(server.secure_port, timeout=5.0) as conn:
        conn.send_frame(P.connect_request())
        started = time.monotonic()
        closed, received = conn.wait_closed(timeout=5.0)
        assert closed, "a plain-text ConnectRequest on the TLS port was left open for 5 s"
        assert time.monotonic() - started < 5.0
        # No ConnectResponse (a 36- or 37-byte frame) came back.
        assert len(received) < 8 or received[:4] not in (P.i32(36), P.i32(37)), received


def test_a_silent_connection_to_the_tls_port_is_closed_after_the_handshake_timeout(pki, secure_server):
    server = secure_server("keel", tls=pki, client_auth="need")
    with socket.create_connection(("127.0.0.1", server.secure_port), timeout=5.0) as s:
        started = time.monotonic()
        s.settimeout(KEEL_TLS_HANDSHAKE_TIMEOUT_S + 5.0)
        try:
            assert s.recv(1024) == b""
        except ConnectionResetError:
            pass
        waited = time.monotonic() - started
    assert KEEL_TLS_HANDSHAKE_TIMEOUT_S - 1.0 <= waited <= KEEL_TLS_HANDSHAKE_TIMEOUT_S + 3.0, waited
    # The server drops the socket, then logs: the line may come just after
    # the client saw the close.
    deadline = time.monotonic() + 5.0
    while "TLS handshake timed out" not in server.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "TLS handshake timed out" in server.log_text()


def refused(port, context):
    """True if a TLS client with `context` gets no answer to ruok (the
    handshake fails, or, in TLS 1.3, the server's alert ends the
    connection at the first read)."""
    try:
        return tls_four_letter_word(port, "ruok", context) != b"imok"
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True


@pytest.mark.parametrize("kind", KINDS)
def test_client_auth_need_refuses_clients_without_a_certificate_of_the_ca(kind, pki, secure_server):
    server = secure_server(kind, tls=pki, client_auth="need", shared=True)
    assert not refused(server.secure_port, client_context(pki, cert="client"))
    assert refused(server.secure_port, client_context(pki, cert=None)), "no client certificate"
    assert refused(server.secure_port, client_context(pki, cert="intruder")), "a certificate of another CA"
    # kazoo without a client certificate cannot open a session.
    client = kazoo_client(server, pki, cert=None, timeout=4.0)
    with pytest.raises(Exception):
        client.start(timeout=6)
    client.stop()
    client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_client_auth_want_serves_clients_without_a_certificate_but_not_with_a_bad_one(kind, pki, secure_server):
    server = secure_server(kind, tls=pki, client_auth="want")
    assert not refused(server.secure_port, client_context(pki, cert=None))
    assert not refused(server.secure_port, client_context(pki, cert="client"))
    assert refused(server.secure_port, client_context(pki, cert="intruder"))


@pytest.mark.parametrize("kind", KINDS)
def test_client_auth_none_asks_for_no_certificate(kind, pki, secure_server):
    server = secure_server(kind, tls=pki, client_auth="none")
    assert not refused(server.secure_port, client_context(pki, cert=None))
    client = kazoo_client(server, pki, cert=None)
    client.start(timeout=20)
    client.ensure_path("/no-client-cert")
    client.stop()
    client.close()


def test_the_plain_port_can_be_off(pki, secure_server):
    server = secure_server("keel", tls=pki, client_auth="need", plain_port=False)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2.0).close()
    conf = tls_four_letter_word(server.secure_port, "conf", client_context(pki, cert="client")).decode()
    assert "clientPort=-1\n" in conf and "secureClientPort=%d\n" % server.secure_port in conf
    client = kazoo_client(server, pki)
    client.start(timeout=20)
    client.create("/tls-only", b"x")
    client.stop()
    client.close()


def test_sighup_reloads_the_certificate_for_new_connections_and_keeps_open_ones(fresh_pki, secure_server):
    pki = fresh_pki
    server = secure_server("keel", tls=pki, client_auth="need")
    context = client_context(pki, cert="client")
    assert server_certificate(server.secure_port, context) == "keel-test-server"
    states = []
    before = kazoo_client(server, pki)
    before.add_listener(states.append)
    before.start(timeout=20)
    session = before.client_id
    before.create("/before", b"1")
    # A new certificate of the same CA replaces the files; SIGHUP.
    pki.issue("server", "ca", "keel-test-server-renewed")
    os.kill(server.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 10
    while server_certificate(server.secure_port, context) != "keel-test-server-renewed":
        assert time.monotonic() < deadline, "the renewed certificate is not presented after SIGHUP"
        time.sleep(0.1)
    # The connection made before goes on, on the same session.
    before.set("/before", b"2")
    assert before.get("/before")[0] == b"2"
    assert before.client_id == session and states == ["CONNECTED"], states
    # Files that do not load: the renewed certificate stays in use.
    with open(pki.path("server", ".key"), "w") as f:
        f.write("not a key\n")
    os.kill(server.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "TLS certificates not reloaded" not in server.log_text():
        assert time.monotonic() < deadline, "no log line for the failed reload"
        time.sleep(0.1)
    assert server_certificate(server.secure_port, context) == "keel-test-server-renewed"
    after = kazoo_client(server, pki)
    after.start(timeout=20)
    assert after.get("/before")[0] == b"2"
    for client in (before, after):
        client.stop()
        client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_java_client_over_tls_with_the_netty_socket_and_pem_stores(kind, pki, secure_server, java_classes):
    server = secure_server(kind, tls=pki, client_auth="need", shared=True)
    connect = "127.0.0.1:%d" % server.secure_port
    lines = run_java(java_classes, connect, "SyncConnected", ["create:/java-tls:hello", "get:/java-tls"],
                     java_tls_properties(pki))
    assert java_results(lines) == {"create:/java-tls:hello": "/java-tls", "get:/java-tls": "hello"}, lines
    # Without a client certificate the Java client never connects: its
    # handshakes fail at once and it retries about every second, so a few
    # seconds see several refused attempts.
    properties = dict(java_tls_properties(pki, cert=None), **{"secureclient.wait.seconds": "8"})
    lines = run_java(java_classes, connect, "SyncConnected", [], properties, timeout=120)
    assert {"waited": "SyncConnected", "seen": False} in lines, lines


@pytest.mark.parametrize("kind", KINDS)
def test_zkcli_over_tls(kind, pki, secure_server):
    server = secure_server(kind, tls=pki, client_auth="need", shared=True)
    address = "127.0.0.1:%d" % server.secure_port
    props = java_tls_properties(pki)
    zkcli(address, ["create", "/zkcli-tls", "secret-data"], props)
    out = zkcli(address, ["get", "/zkcli-tls"], props)
    assert "secret-data" in out.splitlines(), out


@pytest.mark.parametrize("kind", KINDS)
def test_a_tls_session_serves_the_raw_protocol_like_the_plain_port(kind, pki, secure_server):
    server = secure_server(kind, tls=pki, client_auth="need", shared=True)
    with tls_raw_connection(server.secure_port, client_context(pki, cert="client")) as conn:
        response = conn.handshake()
        assert response["sessionId"] != 0 and response["timeOut"] > 0
        assert conn.create("/raw-tls", b"r") == (0, "/raw-tls")
        hdr, body = conn.request(P.GET_DATA, P.path_watch_body("/raw-tls"))
        assert hdr["err"] == 0 and body.buf() == b"r"
        assert conn.close_session() == 0


@pytest.mark.parametrize("kind", KINDS)
def test_keel_bench_connects_over_tls(kind, pki, secure_server):
    """Not a measurement (that is `make compare`'s): the bench's TLS flags
    work against both servers, so TLS rows can be measured."""
    from harness import KEEL_BIN, keel_available
    if not keel_available():
        pytest.skip("no keel binary for `keel bench`")
    server = secure_server(kind, tls=pki, client_auth="need", shared=True)
    command = [KEEL_BIN, "bench", "--servers", "127.0.0.1:%d" % server.secure_port, "--workload", "mix",
               "--clients", "2", "--duration", "1", "--tls-ca", pki.path("ca"),
               "--tls-cert", pki.path("client"), "--tls-key", pki.path("client", ".key")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "TPS" in done.stdout and "errors" in done.stdout, done.stdout
    # Without a client certificate the bench cannot connect, and says so.
    done = subprocess.run(command[:-4], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "127.0.0.1:%d" % server.secure_port in done.stderr, done.stderr


def test_make_compares_zookeeper_ensemble_runs_tls_on_client_ports_and_quorum_links():
    """`make compare`'s zookeeper-tls system (bench/zk_tls.py) is what it
    says: a 3-member ZooKeeper 3.8 ensemble from Debian's jars whose members
    talk TLS 1.3 to each other, whose TLS client ports listen on 127.0.0.1
    only, and which serves keel bench there with no error."""
    from harness import KEEL_BIN, keel_available, make_workdir
    if not keel_available():
        pytest.skip("no keel binary for `keel bench`")
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    import zk_tls
    root = make_workdir("zk-tls-ensemble")
    group = zk_tls.make_group(root, {"four_letter_words": ["*"],
                                    "zk_jvm_options": ["-Xmx256m", "-XX:+UseSerialGC", TIER1]})
    try:
        group.start(timeout=120)
        leader = group.leader(timeout=60)
        assert leader is not None
        command = [KEEL_BIN, "bench", "--servers", group.bench_address, "--workload", "mix",
                   "--clients", "6", "--duration", "2"] + group.bench_flags
        done = subprocess.run(command, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        summary = dict(pair for pair in (line.split(None, 1) for line in done.stdout.splitlines())
                       if len(pair) == 2)
        assert summary["errors"].strip() == "0" and float(summary["TPS"]) > 0, done.stdout
        for node in group.nodes:
            log = node.log_text()
            assert "Using TLS encrypted quorum communication" in log, node.log_tail(80)
            assert "secureClientPortAddress is 127.0.0.1:%d" % node.secure_port in log, node.log_tail(80)
            # Every member completed or accepted at least one quorum handshake in TLS 1.3.
            assert ("SSL handshake complete" in log or "Accepted TLS connection" in log) and "TLSv1.3" in log, \
                node.log_tail(80)
            assert "Blocked insecure connection" not in log, node.log_tail(80)
        # The TLS port answers in TLS 1.3 with the certificate the bench verified.
        with socket.create_connection(("127.0.0.1", group.nodes[0].secure_port), timeout=10) as raw:
            context = ssl.create_default_context(cafile=group.pki.path("ca"))
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.version() == "TLSv1.3"
    finally:
        group.stop(timeout=20)
        shutil.rmtree(root, ignore_errors=True)
