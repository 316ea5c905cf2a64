"""Differential test: digest `addauth` with credentials of any shape.

ZooKeeper's DigestAuthenticationProvider accepts any bytes: the id is the
text before the first ':' (the whole text when there is none), ':',
base64(sha1(whole text)). So `addAuth("digest", "blah")` keeps the session
(no AuthFailed) and authenticates as `blah:W/H9kn37hnlJai5s8Ay+UMHIcUU=`,
an id only the same credentials give (go-zookeeper's ACL test relies on it).
Run against ZooKeeper and Keel (one server and a 3-node cluster)."""

from kazoo.client import KazooClient
from kazoo.security import ACL, Id, Permissions

from harness import zkproto as P
from harness.trace import Trace

from compat.topology import compare_traces

# Credentials without a colon, with an empty password, with two colons.
CREDENTIALS = ("blah", "blah:", "a:b:c")


def connect(server, auth=None):
    client = KazooClient(hosts=server.address, timeout=10, auth_data=auth)
    client.states = []
    client.add_listener(lambda state: client.states.append(str(state)))
    client.start(timeout=20)
    return client


def raw_addauth(conn, credentials_field):
    """addauth digest on a raw session, the credentials field as given."""
    body = P.i32(0) + P.ustr("digest") + credentials_field
    hdr, _ = conn.request(P.AUTH, body, xid=P.XID_AUTH)
    return P.error_name(hdr["err"])


def raw_acl_of_auth(conn, path):
    """Creates `path` with the 'auth' ACL and returns the ids it holds."""
    hdr, _ = conn.request(P.CREATE, P.create_body(path, b"", [(31, "auth", "")]))
    if hdr["err"] != 0:
        return P.error_name(hdr["err"])
    hdr, r = conn.request(P.GET_ACL, P.ustr(path))
    return [[r.i32(), r.ustr(), r.ustr()] for _ in range(r.i32())]


def scenario(server, trace):
    rec, call = trace.record, trace.call
    owner = connect(server, auth=[("digest", "blah")])
    rec("session with digest 'blah' at connect is connected", owner.connected)
    auth_acl = [ACL(Permissions.ALL, Id("auth", ""))]
    call("create /digest with the 'auth' ACL", owner.create, "/digest", b"secret", acl=auth_acl)
    call("the ACL holds blah's digest id", owner.get_acls, "/digest")
    clients = [owner]
    for credentials in CREDENTIALS:
        client = connect(server)
        clients.append(client)
        call("addauth digest %r" % credentials, client.add_auth, "digest", credentials)
        call("after addauth %r: sync" % credentials, client.sync, "/digest")
        call("after addauth %r: read /digest" % credentials, client.get, "/digest")
        call("after addauth %r: create under /digest" % credentials,
             client.create, "/digest/%s" % credentials.replace(":", "_"), b"")
        rec("after addauth %r: session still connected" % credentials, client.connected)
        rec("after addauth %r: states" % credentials, client.states)
    plain = connect(server)
    clients.append(plain)
    plain.sync("/digest")
    call("without auth: read /digest", plain.get, "/digest")
    call("children of /digest (as owner)", lambda: sorted(owner.get_children("/digest")))
    # kazoo sends "" as a null buffer: ZooKeeper's provider fails on null.
    empty = KazooClient(hosts=server.address, timeout=10)
    empty.start(timeout=20)
    call("kazoo addauth digest '' (sent as a null buffer)", empty.add_auth, "digest", "")
    empty.stop()
    empty.close()
    # A real empty buffer is the digest of "": id ":" + base64(sha1("")).
    with P.RawConnection(server.port) as conn:
        conn.handshake()
        rec("raw addauth digest with an empty buffer", raw_addauth(conn, P.buf(b"")))
        rec("raw: ACL 'auth' after the empty credentials", raw_acl_of_auth(conn, "/digest-empty"))
        conn.close_session()
    with P.RawConnection(server.port) as conn:
        conn.handshake()
        rec("raw addauth digest with a null buffer", raw_addauth(conn, P.i32(-1)))
        rec("raw: connection closed after AuthFailed", conn.wait_closed(timeout=5.0)[0])
    for client in clients:
        client.stop()
        client.close()


def run(server, name):
    trace = Trace(name)
    scenario(server, trace)
    return trace


def test_digest_credentials_of_any_shape_match_zookeeper(servers, candidate, keel_topology, zk_reference):
    ref, zk = zk_reference("digest", lambda zk: run(zk, "zookeeper"), name="zk-digest")
    other = servers(candidate, topology=keel_topology, name="%s-digest-%s" % (candidate, keel_topology))
    got = run(other, candidate)
    p1, p2 = zk.workdir + "-trace.json", other.workdir + "-trace.json"
    ref.dump(p1)
    got.dump(p2)
    differences = compare_traces("digest", candidate, keel_topology, ref.normalised(), got.normalised())
    assert not differences, ("%d step(s) of the digest scenario differ (%s %s; traces %s, %s):\n%s"
                             % (len(differences), candidate, keel_topology, p1, p2, "\n".join(differences)))
