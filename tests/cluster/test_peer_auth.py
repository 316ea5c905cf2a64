"""Authenticated peers (issue 16): a 3-node cluster whose members share a
`peer_secret_file`, and one whose peer links are mutual TLS (`peer_tls`,
certificates made here with openssl), both elect a leader and replicate.
Then intruders, Python sockets on the same machine, connect to a member's
peer port with a well-formed hello carrying the right cluster id and a
forged Raft heartbeat of a much higher term: each is refused with a log
line naming its address, and the cluster's state (tree digest, zxid, every
member's term) does not move. The same forged heartbeat against a cluster
without peer authentication does move the term: the intruder is a real
one."""

import os
import socket
import ssl
import struct
import time

from kazoo.client import KazooClient

from harness.peer_auth import make_ca, make_member_cert, peer_auth_settings
from harness.servers import mntr

# The peer protocol (crates/consensus/src/handshake.rs, transport.rs).
KIND_HELLO, KIND_RAFT, KIND_WELCOME, KIND_PROOF = 0, 1, 5, 6
PROTOCOL_VERSION = 2
AUTH_NONE, AUTH_SECRET, AUTH_TLS = 0, 1, 2
MSG_HEARTBEAT = 8
# How much higher the forged term is than the cluster's.
FORGED_TERM_STEP = 1000
# How long a refused intruder's effects are waited for.
SETTLE_S = 1.5


def frame(kind, sender, payload=b""):
    return struct.pack(">IBQ", 9 + len(payload), kind, sender) + payload


def hello(cluster_id, to, auth, version=PROTOCOL_VERSION):
    return struct.pack(">HQQB", version, cluster_id, to, auth) + os.urandom(32)


def _varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def forged_heartbeat(sender, to, term):
    """An eraftpb.Message (protobuf): MsgHeartbeat from `sender` at `term`."""
    fields = [(1, MSG_HEARTBEAT), (2, to), (3, sender), (4, term)]
    return b"".join(_varint(number << 3) + _varint(value) for number, value in fields)


def raft_frame(sender, to, term):
    return frame(KIND_RAFT, sender, forged_heartbeat(sender, to, term))


def cluster_id(node):
    """The cluster id the member's data dir records (IDENTITY)."""
    with open(os.path.join(node.data_dir, "IDENTITY")) as f:
        fields = dict(line.split("=", 1) for line in f.read().split())
    return int(fields["cluster_id"], 16)


def peer_port(cluster, node):
    member = cluster.member_id(node)
    for item in node.settings["peers"].split(","):
        member_id, address = item.split(";")[0].split("=")
        if int(member_id) == member:
            return int(address.rsplit(":", 1)[1])
    raise AssertionError("no peer port for member %d" % member)


def read_for(sock, seconds):
    """Whatever arrives within `seconds` or until the peer closes."""
    sock.settimeout(seconds)
    data = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, OSError):
        pass
    return data


def state(cluster):
    """(digest, zxid, every member's term): what an intruder must not move."""
    converged = cluster.wait_converged(timeout=15)
    terms = tuple(mntr(n.port).get("keel_raft_term") for n in cluster.nodes)
    return converged.digest, converged.zxid, terms


def write_through_every_member(cluster, prefix):
    for i, node in enumerate(cluster.nodes):
        client = KazooClient(hosts="127.0.0.1:%d" % node.port, timeout=10.0)
        client.start(timeout=15)
        try:
            client.ensure_path("/%s" % prefix)
            for j in range(20):
                client.create("/%s/n%d-%d" % (prefix, i, j), b"v%d" % j)
        finally:
            client.stop()
            client.close()
    digest, zxid, _ = state(cluster)
    client = KazooClient(hosts=cluster.address, timeout=10.0)
    client.start(timeout=15)
    try:
        assert len(client.get_children("/%s" % prefix)) == 20 * len(cluster.nodes)
    finally:
        client.stop()
        client.close()
    return digest, zxid


class Target:
    """A follower to attack, the member id the intruder claims (the other
    follower's) and the term to forge."""

    def __init__(self, cluster):
        leader = cluster.leader(timeout=15)
        followers = [n for n in cluster.nodes if n is not leader]
        self.node = followers[0]
        self.member = cluster.member_id(self.node)
        self.claimed = cluster.member_id(followers[1])
        self.port = peer_port(cluster, self.node)
        self.cluster_id = cluster_id(self.node)
        self.term = int(mntr(self.node.port)["keel_raft_term"])
        self.forged_term = self.term + FORGED_TERM_STEP

    def connect(self):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        return sock, sock.getsockname()[1]

    def hello(self, auth, version=PROTOCOL_VERSION):
        return frame(KIND_HELLO, self.claimed, hello(self.cluster_id, self.member, auth, version))

    def forged(self):
        return raft_frame(self.claimed, self.member, self.forged_term)


def refusals(node, intruder_port):
    """The member's log lines refusing the connection from `intruder_port`."""
    mark = "127.0.0.1:%d" % intruder_port
    return [line for line in node.log_text().splitlines() if "peer refused" in line and mark in line]


def wait_refusal(node, intruder_port, wanted, timeout=10.0):
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        lines = refusals(node, intruder_port)
        if lines:
            break
        time.sleep(0.05)
    assert lines, "no refusal logged for 127.0.0.1:%d" % intruder_port
    assert any(wanted in line for line in lines), lines
    return lines[0]


def assert_unmoved(cluster, before):
    time.sleep(SETTLE_S)
    after = state(cluster)
    assert after == before, "an intruder changed the cluster: %r -> %r" % (before, after)


# ---------------------------------------------------------------------------


def test_without_peer_authentication_a_forged_heartbeat_moves_the_term(keel_cluster):
    """The control: the intruder's bytes are what a member accepts when no
    authentication is configured (what every test below must refuse)."""
    cluster = keel_cluster("pa-open")
    write_through_every_member(cluster, "open")
    target = Target(cluster)
    sock, _ = target.connect()
    sock.sendall(target.hello(AUTH_NONE))
    welcome = read_for(sock, 0.5)
    assert welcome[4] == KIND_WELCOME, welcome
    sock.sendall(target.forged())
    deadline = time.monotonic() + 10
    term = target.term
    while time.monotonic() < deadline and term < target.forged_term:
        term = int(mntr(target.node.port)["keel_raft_term"])
        time.sleep(0.05)
    sock.close()
    assert term >= target.forged_term, "the forged heartbeat did not reach raft (term %d)" % term


def test_a_cluster_with_a_shared_secret_replicates_and_refuses_intruders(keel_cluster, tmp_path):
    settings, node_settings = peer_auth_settings(str(tmp_path), 3, secret=True)
    cluster = keel_cluster("pa-secret", node_settings=node_settings, **settings)
    write_through_every_member(cluster, "secret")
    before = state(cluster)
    target = Target(cluster)

    # A well-formed hello and a forged raft frame in place of the proof.
    sock, port = target.connect()
    sock.sendall(target.hello(AUTH_SECRET) + target.forged())
    read_for(sock, 2)
    sock.close()
    wait_refusal(target.node, port, "expected the proof of the shared secret")

    # The hello, the welcome read, then a made-up proof and the frame.
    sock, port = target.connect()
    sock.sendall(target.hello(AUTH_SECRET))
    welcome = read_for(sock, 0.5)
    assert len(welcome) == 4 + 9 + 66 and welcome[4] == KIND_WELCOME, welcome
    sock.sendall(frame(KIND_PROOF, target.claimed, os.urandom(32)) + target.forged())
    read_for(sock, 2)
    sock.close()
    wait_refusal(target.node, port, "wrong proof of the shared secret")

    # Claiming no authentication at all, and the old unversioned hello.
    sock, port = target.connect()
    sock.sendall(target.hello(AUTH_NONE) + target.forged())
    read_for(sock, 2)
    sock.close()
    wait_refusal(target.node, port, "this node requires shared secret")
    sock, port = target.connect()
    sock.sendall(frame(KIND_HELLO, target.claimed, struct.pack(">Q", target.cluster_id)) + target.forged())
    read_for(sock, 2)
    sock.close()
    wait_refusal(target.node, port, "peer protocol version 1, this node speaks version 2")

    assert_unmoved(cluster, before)
    assert cluster.leader(timeout=5) is not None
    write_through_every_member(cluster, "secret-after")


def tls_intruder(target, certfile=None, keyfile=None):
    """A TLS connection to the target's peer port, presenting the given
    certificate (or none); the server's certificate is not checked (the
    intruder does not care whom it talks to)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if certfile:
        context.load_cert_chain(certfile, keyfile)
    raw, port = target.connect()
    try:
        sock = context.wrap_socket(raw, server_hostname="keel-member-%d" % target.member)
    except (ssl.SSLError, OSError):
        return port  # refused during the handshake itself
    try:
        sock.sendall(target.hello(AUTH_TLS) + target.forged())
        read_for(sock, 2)
    except (ssl.SSLError, OSError):
        pass
    finally:
        sock.close()
    return port


def test_a_cluster_with_peer_tls_replicates_and_refuses_wrong_certificates(keel_cluster, tmp_path):
    directory = str(tmp_path)
    settings, node_settings = peer_auth_settings(directory, 3, tls=True)
    cluster = keel_cluster("pa-tls", node_settings=node_settings, **settings)
    write_through_every_member(cluster, "tls")
    before = state(cluster)
    target = Target(cluster)
    log = target.node.log_text()
    assert "peer refused" not in log, log

    # Plaintext to the TLS port: a well-formed hello and a forged frame.
    sock, port = target.connect()
    sock.sendall(target.hello(AUTH_TLS) + target.forged())
    read_for(sock, 2)
    sock.close()
    wait_refusal(target.node, port, "TLS:")

    # No client certificate.
    port = tls_intruder(target)
    wait_refusal(target.node, port, "TLS:")

    # A certificate for the member it claims, from another CA.
    other_dir = os.path.join(directory, "other-ca")
    other = make_ca(other_dir, name="keel intruder CA")
    cert, key = make_member_cert(other_dir, other, target.claimed)
    port = tls_intruder(target, cert, key)
    wait_refusal(target.node, port, "invalid peer certificate")

    # A good certificate of the cluster's CA, but the target's own (not the
    # member the intruder claims to be).
    cert, key = node_settings(target.member)["tls_cert_file"], node_settings(target.member)["tls_key_file"]
    port = tls_intruder(target, cert, key)
    wait_refusal(target.node, port, "claims to be member %d but its certificate names keel-member-%d"
                 % (target.claimed, target.member))

    assert_unmoved(cluster, before)
    write_through_every_member(cluster, "tls-after")
