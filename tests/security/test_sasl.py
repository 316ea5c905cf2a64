"""SASL DIGEST-MD5 on the client port, against Keel (sasl_users_file,
require_sasl) and ZooKeeper 3.8 (a JAAS Server section,
SASLAuthenticationProvider, sessionRequireClientSASLAuth) with the same
users: kazoo's sasl_options, and the Java client's and zkCli.sh's JAAS
Client section authenticate; `sasl:<user>` ACLs admit that user only; a wrong password
gets ZooKeeper's AuthFailed outcome; require_sasl closes what never
authenticates; over TLS too."""

import pytest

from harness import zkproto as P
from security.conftest import KINDS
from security.secure import (java_events, java_results, java_sasl_properties, java_tls_properties,
                             kazoo_client, new_workdir, run_java, zkcli)

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
SESSION_CLOSED_REQUIRE_SASL_AUTH = -124
AUTH_FAILED = -115


def sasl_acl(user, perms=None):
    from kazoo.security import ACL, Id, Permissions
    return [ACL(Permissions.ALL if perms is None else perms, Id("sasl", user))]


def started(client, timeout=20):
    """`client` started, and its SASL exchange (if any) over: kazoo's
    start() returns once the session is open, before the exchange, and
    sends queued requests only after it, so an answered request means the
    exchange has finished. ZooKeeper 3.8 needs this: every connection's
    DIGEST-MD5 exchange shares one SaslServerCallbackHandler whose user
    name field two concurrent exchanges can overwrite (the shared state
    ZOOKEEPER-4839 is about): the likeliest cause of one CI run where
    bob's client, started while alice's exchange was still going, was
    closed before its first request (the window is a few microseconds;
    not reproduced here in 11 runs of 8 and 40 overlapping exchanges).
    Keel keeps the state per connection (see
    test_concurrent_exchanges_each_get_their_own_identity)."""
    client.start(timeout=timeout)
    client.exists("/")
    return client


@pytest.mark.parametrize("kind", KINDS)
def test_kazoo_digest_md5_identity_guards_a_sasl_acl(kind, secure_server):
    from kazoo.exceptions import NoAuthError
    from kazoo.security import Permissions
    server = secure_server(kind, sasl_users=USERS)
    alice = started(kazoo_client(server, sasl=("alice", USERS["alice"])))
    bob = started(kazoo_client(server, sasl=("bob", USERS["bob"])))
    anonymous = started(kazoo_client(server))
    try:
        alice.create("/alice-only", b"for alice", acl=sasl_acl("alice"))
        assert alice.get("/alice-only")[0] == b"for alice"
        acl, _ = alice.get_acls("/alice-only")
        assert [(a.id.scheme, a.id.id, a.perms) for a in acl] == [("sasl", "alice", Permissions.ALL)]
        for other in (bob, anonymous):
            with pytest.raises(NoAuthError):
                other.get("/alice-only")
            with pytest.raises(NoAuthError):
                other.set("/alice-only", b"taken")
        # setACL with the sasl scheme: bob may read now, still not write.
        alice.set_acls("/alice-only", sasl_acl("alice") + sasl_acl("bob", Permissions.READ))
        assert bob.get("/alice-only")[0] == b"for alice"
        with pytest.raises(NoAuthError):
            bob.set("/alice-only", b"taken")
        # The `auth` scheme expands to the connection's sasl id.
        from kazoo.security import ACL, Id
        alice.create("/alice-auth", b"a", acl=[ACL(Permissions.ALL, Id("auth", ""))])
        acl, _ = alice.get_acls("/alice-auth")
        assert [(a.id.scheme, a.id.id) for a in acl] == [("sasl", "alice")]
        with pytest.raises(NoAuthError):
            bob.get("/alice-auth")
    finally:
        for client in (alice, bob, anonymous):
            client.stop()
            client.close()


def test_concurrent_exchanges_each_get_their_own_identity(secure_server):
    """Eight users' DIGEST-MD5 exchanges at once, each connection's
    identity its own: kazoo's start() returns before the exchange, so
    starting all eight before the first request overlaps them. Keel only:
    ZooKeeper 3.8 shares one callback handler's user name among all
    exchanges (see started()), so it is not held to this."""
    from kazoo.security import ACL, Id, Permissions
    users = {"user%d" % i: "secret-%d" % i for i in range(8)}
    server = secure_server("keel", sasl_users=users)
    clients = {user: kazoo_client(server, sasl=(user, password)) for user, password in users.items()}
    try:
        for client in clients.values():
            client.start(timeout=20)
        for user, client in clients.items():
            path = "/own-" + user
            client.create(path, user.encode(), acl=[ACL(Permissions.ALL, Id("auth", ""))])
            acl, _ = client.get_acls(path)
            assert [(a.id.scheme, a.id.id) for a in acl] == [("sasl", user)]
        for user, client in clients.items():
            assert client.get("/own-" + user)[0] == user.encode()
    finally:
        for client in clients.values():
            client.stop()
            client.close()


def kazoo_outcome(server, user, password):
    """What kazoo reports after a SASL exchange as `user`: kazoo's start()
    returns once the session is open (before SASL), and the failed
    exchange stops the client, so its first request raises. When the
    failure comes while start() is still returning (a matter of thread
    timing, seen with ZooKeeper and Keel alike), start() raises
    KazooTimeoutError instead: the session states kazoo went through
    (spied on) tell the two apart."""
    from kazoo.protocol.states import KeeperState
    client = kazoo_client(server, sasl=(user, password), timeout=5.0)
    states = []
    session_callback = client._session_callback

    def spy(state):
        states.append(state)
        return session_callback(state)

    client._session_callback = spy
    try:
        client.start(timeout=10)
        client.get("/")
        return "served"
    except Exception as error:  # the type is what is compared
        if KeeperState.AUTH_FAILED in states:
            return "AuthFailedError"
        return "%s (session states %s)" % (type(error).__name__, states)
    finally:
        client.stop()
        client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_wrong_password_or_an_unknown_user_is_auth_failed_for_kazoo(kind, secure_server):
    server = secure_server(kind, sasl_users=USERS)
    assert kazoo_outcome(server, "alice", "not-her-password") == "AuthFailedError"
    assert kazoo_outcome(server, "mallory", "anything") == "AuthFailedError"
    assert kazoo_outcome(server, "alice", USERS["alice"]) == "served"


def sasl_exchange_failure(port):
    """A raw session whose SASL exchange sends a wrong digest-response:
    (error code of the reply, its body bytes, closed afterwards?)."""
    with P.RawConnection(port, timeout=5.0) as conn:
        conn.handshake()
        hdr, body = conn.request(P.SASL, P.buf(b""))
        assert hdr["err"] == 0, hdr
        challenge = body.buf().decode()
        nonce = challenge.split('nonce="', 1)[1].split('"', 1)[0]
        response = ('username="alice",realm="zk-sasl-md5",nonce="%s",nc=00000001,cnonce="abc",'
                    'digest-uri="zookeeper/zk-sasl-md5",maxbuf=65536,response=%s,qop=auth'
                    % (nonce, "0" * 32))
        hdr, body = conn.request(P.SASL, P.buf(response.encode()))
        rest = body.data[body.pos:]
        closed, _ = conn.wait_closed(timeout=5.0)
        return hdr, rest, closed


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_exchange_answers_auth_failed_with_a_null_token_and_closes(kind, secure_server):
    server = secure_server(kind, sasl_users=USERS)
    hdr, rest, closed = sasl_exchange_failure(server.port)
    assert (hdr["err"], hdr["zxid"], rest, closed) == (AUTH_FAILED, 0, P.i32(-1), True)


@pytest.mark.parametrize("kind", KINDS)
def test_sasl_without_a_user_list_answers_ok_with_a_null_token(kind, secure_server):
    server = secure_server(kind)
    with P.RawConnection(server.port, timeout=5.0) as conn:
        conn.handshake()
        hdr, body = conn.request(P.SASL, P.buf(b""))
        assert (hdr["err"], hdr["zxid"], body.data[body.pos:]) == (0, 0, P.i32(-1))
        assert conn.create("/still-served", b"") == (0, "/still-served")


@pytest.mark.parametrize("kind", KINDS)
def test_java_client_with_a_jaas_client_section(kind, secure_server, java_classes):
    server = secure_server(kind, sasl_users=USERS)
    workdir = new_workdir("jaas")
    alice = java_sasl_properties(workdir, "alice", USERS["alice"])
    lines = run_java(java_classes, server.address, "SaslAuthenticated",
                     ["create:/java-alice:mine:sasl:alice", "get:/java-alice", "acl:/java-alice", "whoami"], alice)
    assert "SaslAuthenticated" in java_events(lines), lines
    results = java_results(lines)
    # whoami lists ZooKeeper's auth-info set in hash order: compare as a set.
    assert sorted(results.pop("whoami").split(",")) == ["ip:127.0.0.1", "sasl:alice"], lines
    assert results == {
        "create:/java-alice:mine:sasl:alice": "/java-alice",
        "get:/java-alice": "mine",
        "acl:/java-alice": "sasl:alice:31",
    }, lines
    bob = java_sasl_properties(workdir, "bob", USERS["bob"])
    lines = run_java(java_classes, server.address, "SaslAuthenticated", ["get:/java-alice"], bob)
    assert java_results(lines) == {"get:/java-alice": "NOAUTH"}, lines
    # A wrong password: the AuthFailed event, and the handle is dead.
    wrong = java_sasl_properties(workdir, "alice", "wrong")
    lines = run_java(java_classes, server.address, "AuthFailed", ["get:/java-alice"], wrong)
    assert "AuthFailed" in java_events(lines), lines
    assert java_results(lines) == {"get:/java-alice": "AUTHFAILED"}, lines


@pytest.mark.parametrize("kind", KINDS)
def test_zkcli_with_a_jaas_client_section(kind, secure_server):
    """zkCli.sh (Debian's, the Java client inside) authenticates with the
    JAAS Client section in CLIENT_JVMFLAGS before its command runs: alice
    creates a node only `sasl:alice` may read, bob is refused it, and a
    wrong password ends in AuthFailed, and the command fails with it."""
    server = secure_server(kind, sasl_users=USERS)
    workdir = new_workdir("zkcli-jaas")
    alice = java_sasl_properties(workdir, "alice", USERS["alice"])
    out = zkcli(server.address, ["create", "/zkcli-sasl", "alice-data", "sasl:alice:cdrwa"], alice)
    assert "WatchedEvent state:SaslAuthenticated type:None path:null" in out.splitlines(), out
    assert "Created /zkcli-sasl" in out.splitlines(), out
    out = zkcli(server.address, ["get", "/zkcli-sasl"], alice)
    assert "alice-data" in out.splitlines(), out
    out = zkcli(server.address, ["getAcl", "/zkcli-sasl"], alice)
    assert ["'sasl,'alice", ": cdrwa"] == [line for line in out.splitlines() if line.startswith(("'", ": "))], out
    bob = java_sasl_properties(workdir, "bob", USERS["bob"])
    out = zkcli(server.address, ["get", "/zkcli-sasl"], bob)
    assert "WatchedEvent state:SaslAuthenticated type:None path:null" in out.splitlines(), out
    assert "Insufficient permission : /zkcli-sasl" in out.splitlines(), out
    assert "alice-data" not in out.splitlines(), out
    wrong = java_sasl_properties(workdir, "alice", "wrong")
    out = zkcli(server.address, ["get", "/zkcli-sasl"], wrong, timeout=60)
    assert "WatchedEvent state:AuthFailed type:None path:null" in out.splitlines(), out
    assert "KeeperErrorCode = AuthFailed for /zkcli-sasl" in out.splitlines(), out


@pytest.mark.parametrize("kind", KINDS)
def test_require_sasl_closes_a_session_that_does_not_authenticate(kind, secure_server):
    server = secure_server(kind, sasl_users=USERS, require_sasl=True)
    with P.RawConnection(server.port, timeout=5.0) as conn:
        conn.handshake()
        hdr, body = conn.request(P.GET_DATA, P.path_watch_body("/"))
        assert (hdr["err"], hdr["zxid"], body.remaining()) == (SESSION_CLOSED_REQUIRE_SASL_AUTH, 0, 0)
        closed, _ = conn.wait_closed(timeout=5.0)
        assert closed
    with P.RawConnection(server.port, timeout=5.0) as conn:
        conn.handshake()
        assert conn.ping()["err"] == SESSION_CLOSED_REQUIRE_SASL_AUTH, "pings too"
    # A failed exchange under require_sasl answers SessionClosedRequireSaslAuth.
    hdr, rest, closed = sasl_exchange_failure(server.port)
    assert (hdr["err"], rest, closed) == (SESSION_CLOSED_REQUIRE_SASL_AUTH, P.i32(-1), True)
    alice = started(kazoo_client(server, sasl=("alice", USERS["alice"])))
    try:
        alice.create("/authenticated", b"ok")
        assert alice.get("/authenticated")[0] == b"ok"
    finally:
        alice.stop()
        alice.close()


@pytest.mark.parametrize("kind", KINDS)
def test_sasl_over_tls(kind, pki, secure_server, java_classes):
    server = secure_server(kind, tls=pki, client_auth="need", sasl_users=USERS, require_sasl=True)
    alice = started(kazoo_client(server, pki, sasl=("alice", USERS["alice"])))
    try:
        alice.create("/tls-sasl", b"both", acl=sasl_acl("alice"))
    finally:
        alice.stop()
        alice.close()
    props = dict(java_tls_properties(pki), **java_sasl_properties(new_workdir("jaas"), "alice", USERS["alice"]))
    lines = run_java(java_classes, "127.0.0.1:%d" % server.secure_port, "SaslAuthenticated",
                     ["get:/tls-sasl"], props)
    assert java_results(lines) == {"get:/tls-sasl": "both"}, lines
