//! Authenticated peers, on real sockets: two transports (or one transport
//! and a hand-made peer) with shared secrets and TLS certificates made
//! here with rcgen. What is refused must say why, and nothing a refused
//! peer sent may reach the driver's queue.

use std::collections::HashMap;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::RootCertStore;

use crate::handshake::{self, Acceptor, Ends, PeerStream};
use crate::peer_auth::{PeerAuth, PeerAuthError, PeerSecret, PeerTls};
use crate::transport::{encode_frame, read_frame, PeerInput, Transport, KIND_HELLO, KIND_RAFT};

const CLUSTER: u64 = 0x6b65_656c;
/// How long a message between two healthy transports may take.
const DELIVERY: Duration = Duration::from_secs(5);
/// How long to watch for a message that must not arrive.
const SILENCE: Duration = Duration::from_millis(1_500);

fn secret(fill: u8) -> PeerSecret {
    PeerSecret::from_bytes(&[fill; 40]).expect("40 bytes")
}

fn secret_auth(fill: u8) -> PeerAuth {
    PeerAuth {
        secret: Some(secret(fill)),
        tls: None,
    }
}

/// A CA and the member certificates it signs.
struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        static NEXT_CA: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT_CA.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("keel test CA {n}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Pki { ca }
    }

    fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        roots
    }

    /// A certificate naming `names` (DNS SANs) and its key.
    fn issue(&self, names: &[String]) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names.to_vec()).unwrap();
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let certificate = params.signed_by(&key, &self.ca).unwrap();
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (certificate.der().clone(), der)
    }

    /// TLS as member `id` (a certificate naming keel-member-<id>),
    /// trusting `trusted`'s CA.
    fn tls(&self, id: u64, trusted: &Pki) -> PeerTls {
        let (certificate, key) = self.issue(&[format!("keel-member-{id}")]);
        PeerTls::new(vec![certificate], key, trusted.roots()).unwrap()
    }

    fn tls_auth(&self, id: u64) -> PeerAuth {
        PeerAuth {
            secret: None,
            tls: Some(self.tls(id, self)),
        }
    }
}

struct Node {
    transport: Transport,
    inbox: Receiver<PeerInput>,
    address: SocketAddr,
}

/// Members 1 and 2, each with its own `auth`, connected to each other.
fn pair(auth_1: PeerAuth, auth_2: PeerAuth) -> (Node, Node) {
    let mut nodes = cluster(vec![(1, auth_1), (2, auth_2)]);
    (nodes.remove(&1).unwrap(), nodes.remove(&2).unwrap())
}

/// A transport per member, each with its own `auth`, every member
/// knowing every other.
fn cluster(members: Vec<(u64, PeerAuth)>) -> HashMap<u64, Node> {
    let listeners: Vec<TcpListener> = members.iter().map(|_| bind()).collect();
    let peers: HashMap<u64, SocketAddr> = members
        .iter()
        .zip(&listeners)
        .map(|((id, _), listener)| (*id, listener.local_addr().unwrap()))
        .collect();
    let mut nodes = HashMap::new();
    for ((id, auth), listener) in members.into_iter().zip(listeners) {
        let (sender, inbox) = crossbeam_channel::unbounded();
        let address = listener.local_addr().unwrap();
        let transport =
            Transport::start_on(listener, id, CLUSTER, &peers, auth, sender.into()).unwrap();
        nodes.insert(
            id,
            Node {
                transport,
                inbox,
                address,
            },
        );
    }
    nodes
}

fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

fn heartbeat(from: u64, to: u64, term: u64) -> Message {
    let mut message = Message::default();
    message.set_msg_type(MessageType::MsgHeartbeat);
    message.from = from;
    message.to = to;
    message.term = term;
    message
}

/// Sends heartbeats from `from` until one arrives at `to` (the first may
/// go out before the connection is up and be dropped as stale).
fn delivers(from: &Node, from_id: u64, to: &Node, to_id: u64) -> bool {
    let deadline = Instant::now() + DELIVERY;
    while Instant::now() < deadline {
        from.transport.send_raft(&heartbeat(from_id, to_id, 7));
        if let Ok(PeerInput::Raft(message)) = to.inbox.recv_timeout(Duration::from_millis(200)) {
            assert_eq!(
                (message.from, message.to, message.term),
                (from_id, to_id, 7)
            );
            return true;
        }
    }
    false
}

/// Sends heartbeats from `from` for `SILENCE`; true if none arrived.
fn nothing_arrives(from: &Node, from_id: u64, to: &Node, to_id: u64) -> bool {
    let deadline = Instant::now() + SILENCE;
    while Instant::now() < deadline {
        from.transport.send_raft(&heartbeat(from_id, to_id, 7));
        if to.inbox.recv_timeout(Duration::from_millis(100)).is_ok() {
            return false;
        }
    }
    true
}

type Accepted = JoinHandle<Result<(u64, BufReader<PeerStream>), String>>;

/// Accepts one connection on `listener` as member `self_id` of members
/// 1..=3 and shakes hands; the outcome (an error as its log text).
fn accept_one(listener: &TcpListener, self_id: u64, auth: PeerAuth) -> Accepted {
    let listener = listener.try_clone().unwrap();
    std::thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        let known = [1, 2, 3];
        let acceptor = Acceptor {
            self_id,
            cluster_id: CLUSTER,
            known: &known,
            auth: &auth,
            adopt: None,
        };
        handshake::authenticate(tcp, &acceptor).map_err(|error| error.to_string())
    })
}

fn ends(connector: u64, acceptor: u64) -> Ends {
    Ends {
        cluster_id: CLUSTER,
        connector,
        acceptor,
    }
}

/// Connects as `connector` to `acceptor` at `address` and shakes hands.
fn open(
    address: SocketAddr,
    connector: u64,
    acceptor: u64,
    auth: &PeerAuth,
) -> Result<PeerStream, String> {
    let tcp = TcpStream::connect(address).unwrap();
    handshake::open(tcp, ends(connector, acceptor), auth).map_err(|error| error.to_string())
}

fn refusal(accepted: Accepted) -> String {
    match accepted.join().unwrap() {
        Ok((from, _)) => panic!("peer {from} was accepted"),
        Err(reason) => reason,
    }
}

// ---------------------------------------------------------------------------
// Shared secret

#[test]
fn peers_with_the_same_secret_connect_both_ways() {
    let (one, two) = pair(secret_auth(7), secret_auth(7));
    assert!(delivers(&one, 1, &two, 2));
    assert!(delivers(&two, 2, &one, 1));
}

#[test]
fn a_wrong_secret_is_refused_by_both_sides_and_nothing_arrives() {
    let (one, two) = pair(secret_auth(7), secret_auth(8));
    assert!(nothing_arrives(&one, 1, &two, 2));
    assert!(nothing_arrives(&two, 2, &one, 1));

    // Which side notices first: the connector checks the acceptor's proof
    // before it shows its own, so it refuses first and the acceptor sees
    // the connection close mid-handshake.
    let listener = bind();
    let accepted = accept_one(&listener, 1, secret_auth(7));
    let error = open(listener.local_addr().unwrap(), 2, 1, &secret_auth(8)).unwrap_err();
    assert!(
        error.contains("wrong proof of the shared secret"),
        "{error}"
    );
    let reason = refusal(accepted);
    assert!(reason.contains("closed during the handshake"), "{reason}");
}

/// A hand-made connector: a version-2 hello as member `from`, then
/// `then` (raw bytes) without waiting for anything.
fn raw_peer(address: SocketAddr, from: u64, to: u64, auth_flags: u8, then: &[u8]) -> TcpStream {
    let mut hello = Vec::new();
    hello.extend_from_slice(&handshake::PEER_PROTOCOL_VERSION.to_be_bytes());
    hello.extend_from_slice(&CLUSTER.to_be_bytes());
    hello.extend_from_slice(&to.to_be_bytes());
    hello.push(auth_flags);
    hello.extend_from_slice(&[9; handshake::NONCE_BYTES]);
    let mut tcp = TcpStream::connect(address).unwrap();
    tcp.write_all(&encode_frame(KIND_HELLO, from, &hello))
        .unwrap();
    tcp.write_all(then).unwrap();
    tcp
}

fn raft_frame(from: u64, to: u64, term: u64) -> Vec<u8> {
    let payload = heartbeat(from, to, term).write_to_bytes().unwrap();
    encode_frame(KIND_RAFT, from, &payload)
}

#[test]
fn a_peer_without_the_secret_cannot_send_raft_messages() {
    let (one, two) = pair(secret_auth(7), secret_auth(7));
    assert!(delivers(&one, 1, &two, 2));
    // A well-formed hello with the right cluster id and auth byte, then a
    // raft frame instead of the proof; then a hello and a wrong proof.
    let mut wrong_proof = encode_frame(crate::transport::KIND_PROOF, 1, &[0; 32]);
    wrong_proof.extend_from_slice(&raft_frame(1, 2, 99));
    for then in [raft_frame(1, 2, 99), wrong_proof] {
        let mut intruder = raw_peer(two.address, 1, 2, 1, &then);
        let mut rest = Vec::new();
        let _ = intruder.set_read_timeout(Some(DELIVERY));
        let _ = intruder.read_to_end(&mut rest); // the welcome, then closed
        assert!(
            two.inbox.recv_timeout(SILENCE).is_err(),
            "a frame reached raft"
        );
    }
    let listener = bind();
    let accepted = accept_one(&listener, 2, secret_auth(7));
    raw_peer(
        listener.local_addr().unwrap(),
        1,
        2,
        1,
        &raft_frame(1, 2, 99),
    );
    let reason = refusal(accepted);
    assert!(
        reason.contains("expected the proof of the shared secret"),
        "{reason}"
    );
    let accepted = accept_one(&listener, 2, secret_auth(7));
    raw_peer(
        listener.local_addr().unwrap(),
        1,
        2,
        1,
        &encode_frame(crate::transport::KIND_PROOF, 1, &[0; 32]),
    );
    let reason = refusal(accepted);
    assert!(
        reason.contains("wrong proof of the shared secret"),
        "{reason}"
    );
}

/// A socket that keeps a copy of everything written to it.
struct Recorder {
    tcp: TcpStream,
    written: Vec<u8>,
}

impl Read for Recorder {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.tcp.read(buf)
    }
}

impl Write for Recorder {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.tcp.write(buf)?;
        self.written.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}

#[test]
fn a_replayed_handshake_is_refused() {
    let auth = secret_auth(7);
    let listener = bind();
    let address = listener.local_addr().unwrap();

    // A good exchange, recorded: hello, proof, one raft frame.
    let accepted = accept_one(&listener, 2, auth.clone());
    let mut recorder = Recorder {
        tcp: TcpStream::connect(address).unwrap(),
        written: Vec::new(),
    };
    handshake::connect(&mut recorder, ends(1, 2), &auth).unwrap();
    recorder.write_all(&raft_frame(1, 2, 5)).unwrap();
    let (from, mut reader) = accepted.join().unwrap().unwrap();
    assert_eq!(from, 1);
    let (kind, sender, _) = read_frame(&mut reader, 1024).unwrap();
    assert_eq!(
        (kind, sender),
        (KIND_RAFT, 1),
        "the recorded session was good"
    );

    // The same bytes on a new connection: the acceptor's new nonce makes
    // the recorded proof wrong.
    let accepted = accept_one(&listener, 2, auth.clone());
    let mut replay = TcpStream::connect(address).unwrap();
    replay.write_all(&recorder.written).unwrap();
    let reason = refusal(accepted);
    assert!(
        reason.contains("wrong proof of the shared secret"),
        "{reason}"
    );

    // Against a running transport: nothing reaches its queue.
    let (_one, two) = pair(auth.clone(), auth);
    let mut replay = TcpStream::connect(two.address).unwrap();
    replay.write_all(&recorder.written).unwrap();
    assert!(
        two.inbox.recv_timeout(SILENCE).is_err(),
        "a replayed frame reached raft"
    );
}

#[test]
fn both_sides_must_use_the_same_methods() {
    let listener = bind();
    let accepted = accept_one(&listener, 1, secret_auth(7));
    let _ = open(listener.local_addr().unwrap(), 2, 1, &PeerAuth::default());
    let reason = refusal(accepted);
    assert!(
        reason.contains("authenticates with no authentication, this node requires shared secret"),
        "{reason}"
    );
}

#[test]
fn hellos_of_other_versions_clusters_or_targets_are_refused() {
    let listener = bind();
    let address = listener.local_addr().unwrap();
    // Version 1: the cluster id alone.
    let accepted = accept_one(&listener, 1, PeerAuth::default());
    let mut old = TcpStream::connect(address).unwrap();
    old.write_all(&encode_frame(KIND_HELLO, 2, &CLUSTER.to_be_bytes()))
        .unwrap();
    let reason = refusal(accepted);
    assert!(
        reason.contains("speaks peer protocol version 1, this node speaks version 2"),
        "{reason}"
    );

    // A newer version hears ours before the connection closes.
    let accepted = accept_one(&listener, 1, PeerAuth::default());
    let mut newer = TcpStream::connect(address).unwrap();
    let mut hello = 3u16.to_be_bytes().to_vec();
    hello.extend_from_slice(&[0; 60]);
    newer
        .write_all(&encode_frame(KIND_HELLO, 2, &hello))
        .unwrap();
    let reason = refusal(accepted);
    assert!(
        reason.contains("version 3, this node speaks version 2"),
        "{reason}"
    );
    let (kind, sender, welcome) = read_frame(&mut newer, 1024).unwrap();
    assert_eq!((kind, sender), (crate::transport::KIND_WELCOME, 1));
    assert_eq!(welcome[..2], 2u16.to_be_bytes());

    // Another member meant, an unknown member.
    let accepted = accept_one(&listener, 1, PeerAuth::default());
    raw_peer(address, 2, 3, 0, &[]);
    let reason = refusal(accepted);
    assert!(
        reason.contains("meant to reach member 3, this is member 1"),
        "{reason}"
    );
    let accepted = accept_one(&listener, 1, PeerAuth::default());
    raw_peer(address, 9, 1, 0, &[]);
    assert!(refusal(accepted).contains("unknown peer id 9"));

    // An oversized first frame is refused before it is read.
    let accepted = accept_one(&listener, 1, PeerAuth::default());
    let mut big = TcpStream::connect(address).unwrap();
    big.write_all(&encode_frame(KIND_HELLO, 2, &[0; 4096]))
        .unwrap();
    assert!(refusal(accepted).contains("out of bounds"));
}

#[test]
fn a_silent_peer_times_out_without_holding_up_the_others() {
    let (one, two) = pair(secret_auth(7), secret_auth(7));
    let _silent = TcpStream::connect(two.address).unwrap();
    let _half = raw_peer(two.address, 1, 2, 1, &[]);
    assert!(delivers(&one, 1, &two, 2), "the accept loop is held up");

    let listener = bind();
    let accepted = accept_one(&listener, 2, secret_auth(7));
    let _silent = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let started = Instant::now();
    let reason = refusal(accepted);
    assert!(reason.contains("not completed within"), "{reason}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(handshake::HANDSHAKE_TIMEOUT_MS - 100)
            && waited < Duration::from_millis(handshake::HANDSHAKE_TIMEOUT_MS + 2_000),
        "{waited:?}"
    );
}

// ---------------------------------------------------------------------------
// TLS

#[test]
fn tls_with_good_certificates_connects_both_ways() {
    let pki = Pki::new();
    let (one, two) = pair(pki.tls_auth(1), pki.tls_auth(2));
    assert!(delivers(&one, 1, &two, 2));
    assert!(delivers(&two, 2, &one, 1));
}

#[test]
fn a_snapshot_crosses_a_tls_connection_in_chunks() {
    let pki = Pki::new();
    let (one, two) = pair(pki.tls_auth(1), pki.tls_auth(2));
    assert!(delivers(&one, 1, &two, 2));
    let mut snapshot = Message::default();
    snapshot.set_msg_type(MessageType::MsgSnapshot);
    snapshot.from = 1;
    snapshot.to = 2;
    snapshot.mut_snapshot().mut_metadata().index = 42;
    let data: Vec<u8> = (0..3 * crate::transport::SNAPSHOT_CHUNK_BYTES + 77)
        .map(|i| (i * 31 + i / 977) as u8)
        .collect();
    snapshot.mut_snapshot().set_data(data.into());
    one.transport.send_raft(&snapshot);
    let deadline = Instant::now() + DELIVERY;
    loop {
        match two.inbox.recv_deadline(deadline) {
            Ok(PeerInput::Raft(message)) if message.get_msg_type() == MessageType::MsgSnapshot => {
                assert!(*message == snapshot, "the snapshot arrived changed");
                break;
            }
            Ok(_) => continue, // heartbeats sent before
            Err(error) => panic!("no snapshot: {error}"),
        }
    }
    let reports = one.transport.take_snapshot_reports();
    assert_eq!(reports.len(), 1);
    assert!(reports[0].sent && reports[0].index == 42, "{reports:?}");
}

#[test]
fn tls_and_a_secret_together() {
    let pki = Pki::new();
    let both = |id| PeerAuth {
        secret: Some(secret(7)),
        tls: Some(pki.tls(id, &pki)),
    };
    let (one, two) = pair(both(1), both(2));
    assert!(delivers(&one, 1, &two, 2));
    assert!(delivers(&two, 2, &one, 1));
}

#[test]
fn a_certificate_signed_by_another_ca_is_refused() {
    let pki = Pki::new();
    let other = Pki::new();
    // Member 2's certificate comes from another CA (it trusts ours, so it
    // accepts member 1's certificate; member 1 must refuse its).
    let intruder = PeerAuth {
        secret: None,
        tls: Some(other.tls(2, &pki)),
    };
    let (one, two) = pair(pki.tls_auth(1), intruder.clone());
    assert!(nothing_arrives(&two, 2, &one, 1));

    let listener = bind();
    let accepted = accept_one(&listener, 1, pki.tls_auth(1));
    let error = open(listener.local_addr().unwrap(), 2, 1, &intruder).unwrap_err();
    let reason = refusal(accepted);
    assert!(
        reason.starts_with("TLS: invalid peer certificate: UnknownIssuer"),
        "{reason}"
    );
    assert!(
        error.contains("alert") || error.contains("closed"),
        "{error}"
    );
}

#[test]
fn a_certificate_for_member_2_presented_by_a_peer_claiming_3_is_refused() {
    let pki = Pki::new();
    let listener = bind();
    let accepted = accept_one(&listener, 1, pki.tls_auth(1));
    // A valid certificate of this CA, but for member 2.
    let _ = open(listener.local_addr().unwrap(), 3, 1, &pki.tls_auth(2));
    let reason = refusal(accepted);
    assert!(
        reason.contains("claims to be member 3 but its certificate names keel-member-2"),
        "{reason}"
    );

    // Three transports; member 3 has member 2's certificate: member 1
    // hears member 2, never member 3.
    let nodes = cluster(vec![
        (1, pki.tls_auth(1)),
        (2, pki.tls_auth(2)),
        (3, pki.tls_auth(2)),
    ]);
    assert!(delivers(&nodes[&2], 2, &nodes[&1], 1));
    assert!(nothing_arrives(&nodes[&3], 3, &nodes[&1], 1));
}

#[test]
fn the_connector_checks_the_acceptor_is_the_member_it_meant() {
    let pki = Pki::new();
    let listener = bind();
    // Whoever answers at member 1's address shows member 2's certificate.
    let _accepted = accept_one(&listener, 1, pki.tls_auth(2));
    let error = open(listener.local_addr().unwrap(), 3, 1, &pki.tls_auth(3)).unwrap_err();
    assert!(error.contains("keel-member-1"), "{error}");
}

#[test]
fn plaintext_to_a_tls_port_is_refused() {
    let pki = Pki::new();
    let listener = bind();
    let accepted = accept_one(&listener, 1, pki.tls_auth(1));
    raw_peer(
        listener.local_addr().unwrap(),
        2,
        1,
        2,
        &raft_frame(2, 1, 99),
    );
    let reason = refusal(accepted);
    assert!(reason.starts_with("TLS:"), "{reason}");
}

// ---------------------------------------------------------------------------
// Files

fn write(dir: &Path, name: &str, text: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_secret_file_must_hold_at_least_32_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let hex = write(
        dir.path(),
        "good",
        format!("{}\n", "ab".repeat(32)).as_bytes(),
    );
    let padded = write(
        dir.path(),
        "padded",
        format!("  {}\n\n", "ab".repeat(32)).as_bytes(),
    );
    let short = write(
        dir.path(),
        "short",
        format!("{}\n", "x".repeat(31)).as_bytes(),
    );
    let huge = write(dir.path(), "huge", &[b'x'; 5000]);
    let a = PeerSecret::from_file(&hex).unwrap();
    let b = PeerSecret::from_file(&padded).unwrap();
    assert_eq!(
        a.proof(&[b"x"]),
        b.proof(&[b"x"]),
        "whitespace around it is not part of it"
    );
    assert_ne!(a.proof(&[b"x"]), secret(7).proof(&[b"x"]));
    assert!(format!("{a:?}").contains("64 bytes") && !format!("{a:?}").contains("ab"));
    for (path, wanted) in [
        (&short, "31 bytes"),
        (&huge, "4097 bytes"),
        (&dir.path().join("missing"), "No such file"),
    ] {
        let error = PeerSecret::from_file(path).unwrap_err().to_string();
        assert!(
            error.contains(wanted) && error.contains(&*path.to_string_lossy()),
            "{error}"
        );
    }
}

#[test]
fn tls_files_load_and_the_own_certificate_must_name_the_member() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["keel-member-4".to_string()]).unwrap();
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let certificate = params.signed_by(&key, &pki.ca).unwrap();
    let cert_file = write(dir.path(), "4.crt", certificate.pem().as_bytes());
    let key_file = write(dir.path(), "4.key", key.serialize_pem().as_bytes());
    let ca_file = write(dir.path(), "ca.crt", pki.ca.pem().as_bytes());
    PeerTls::from_files(4, &cert_file, &key_file, &ca_file).unwrap();

    let error = PeerTls::from_files(5, &cert_file, &key_file, &ca_file).unwrap_err();
    assert!(
        matches!(error, PeerAuthError::OwnCertificate { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("keel-member-5"), "{error}");
    let garbage = write(dir.path(), "garbage", b"not a certificate\n");
    for (cert, key, ca, wanted) in [
        (&garbage, &key_file, &ca_file, "holds no CERTIFICATE"),
        (&cert_file, &garbage, &ca_file, "holds no private key"),
        (&cert_file, &key_file, &garbage, "holds no CERTIFICATE"),
        (
            &cert_file,
            &key_file,
            &dir.path().join("nope"),
            "cannot read",
        ),
    ] {
        let error = PeerTls::from_files(4, cert, key, ca)
            .unwrap_err()
            .to_string();
        assert!(error.contains(wanted), "{error}");
    }
}
