//! The peer handshake: what a connection must prove before any frame it
//! carries is decoded for Raft. Peer protocol version 2 (version 1, before
//! it, was a one-way hello holding the cluster id alone).
//!
//! With `peer_tls` the TCP connection first becomes TLS 1.3 with
//! certificates on both sides (`tls_connect`, `tls_accept`; the rules are
//! in `peer_auth.rs`); the frames below then travel inside it. Frames as
//! everywhere on the peer port (`transport.rs`): u32 length | u8 kind |
//! u64 sender id | payload.
//!
//! 1. connector → acceptor, `HELLO`: u16 version | u64 cluster id | u64
//!    the member it means to reach | u8 auth methods (1 = shared secret,
//!    2 = TLS) | 32-byte nonce Nc.
//! 2. The acceptor refuses (logs the peer's address and the reason, and
//!    closes) a hello of another version (it still answers step 3's frame
//!    first, carrying its own version, so the other side can name both),
//!    cluster or target member, an unknown sender, other auth methods than
//!    its own, or, with TLS, a client certificate that does not name the
//!    sender (`keel-member-<id>`).
//! 3. acceptor → connector, `WELCOME`: u16 version | 32-byte nonce Na |
//!    32-byte acceptor proof (zeros without a secret).
//! 4. With a shared secret, the connector checks the acceptor's proof and
//!    answers `PROOF`: its own 32-byte proof, which the acceptor checks.
//!
//! proof = HMAC-SHA256(secret, label | version | cluster id | connector id
//! | acceptor id | Nc | Na), the label naming the side that proves
//! ("acceptor" or "connector"), so a proof never serves the other
//! direction; both nonces are fresh random bytes, so a recorded handshake
//! replayed on a new connection meets a new Na and fails. Comparison is
//! constant-time (`hmac`'s `verify_slice`).
//!
//! Every handshake read is bounded (`HANDSHAKE_FRAME_BYTES_MAX`) and the
//! whole handshake must finish within `HANDSHAKE_TIMEOUT_MS`; each
//! accepted connection shakes hands on its own thread and at most
//! `PEER_HANDSHAKES_MAX` do at once, so a slow or hostile peer never holds
//! up the accept loop.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConnection, ServerConnection, StreamOwned};

use crate::peer_auth::{
    certificate_names_member, describe_flags, member_name, PeerAuth, PeerTls, PROOF_BYTES,
};
use crate::transport::{encode_frame, read_frame, PeerError, KIND_HELLO, KIND_PROOF, KIND_WELCOME};

/// The peer protocol this node speaks (hello, frames, handshake).
pub const PEER_PROTOCOL_VERSION: u16 = 2;
/// The version before the handshake existed: its hello carried the
/// cluster id alone (8 bytes) and got no answer.
pub const PEER_PROTOCOL_VERSION_UNVERSIONED: u16 = 1;
/// Longest a handshake (TLS included) may take, from accept or connect.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 5_000;
/// Largest frame read before the peer is authenticated.
pub const HANDSHAKE_FRAME_BYTES_MAX: usize = 128;
/// Accepted connections shaking hands at once; more are closed at once.
pub const PEER_HANDSHAKES_MAX: usize = 64;
pub const NONCE_BYTES: usize = 32;
/// Read buffer of an accepted peer connection.
const PEER_READ_BUFFER_BYTES: usize = 256 * 1024;

const HELLO_BYTES: usize = 2 + 8 + 8 + 1 + NONCE_BYTES;
const WELCOME_BYTES: usize = 2 + NONCE_BYTES + PROOF_BYTES;
/// The hello of version 1: the cluster id.
const HELLO_V1_BYTES: usize = 8;
const LABEL_ACCEPTOR: &[u8] = b"keel peer handshake: acceptor proof";
const LABEL_CONNECTOR: &[u8] = b"keel peer handshake: connector proof";

const _: () = assert!(HELLO_BYTES + 9 <= HANDSHAKE_FRAME_BYTES_MAX);
const _: () = assert!(WELCOME_BYTES + 9 <= HANDSHAKE_FRAME_BYTES_MAX);
const _: () = assert!(HELLO_BYTES != HELLO_V1_BYTES);

// ---------------------------------------------------------------------------
// Sockets and streams

/// A peer's TCP socket; while the handshake runs, every read and write
/// must end before its deadline.
pub(crate) struct Socket {
    tcp: TcpStream,
    deadline: Option<Instant>,
}

impl Socket {
    /// A socket whose handshake must end within `HANDSHAKE_TIMEOUT_MS`.
    pub(crate) fn handshaking(tcp: TcpStream) -> Socket {
        Socket {
            tcp,
            deadline: Some(Instant::now() + Duration::from_millis(HANDSHAKE_TIMEOUT_MS)),
        }
    }

    /// The handshake is over: reads and writes wait as long as they need.
    pub(crate) fn end_deadline(&mut self) -> std::io::Result<()> {
        self.deadline = None;
        self.tcp.set_read_timeout(None)?;
        self.tcp.set_write_timeout(None)
    }

    /// Whether the other side has closed the connection (end of stream or
    /// an error), looked at without waiting. After the handshake the
    /// acceptor writes nothing, so the connector's socket only becomes
    /// readable when it closes; a connector that only writes would not
    /// notice that before its next write, and that write would vanish
    /// into a socket the peer no longer reads (the kernel takes it, the
    /// peer answers with a reset).
    pub(crate) fn closed_by_peer(&self) -> bool {
        if self.tcp.set_nonblocking(true).is_err() {
            return false;
        }
        let mut byte = [0u8; 1];
        let closed = match self.tcp.peek(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(error) => error.kind() != std::io::ErrorKind::WouldBlock,
        };
        // Blocking again; if that fails the next write fails and reconnects.
        let _ = self.tcp.set_nonblocking(false);
        closed
    }

    /// Reads what the socket's receive buffer holds now, without waiting
    /// (`MSG_DONTWAIT`): Ok(0) at the end of the stream, WouldBlock when
    /// nothing is there. For the driver's reads, after the handshake.
    pub(crate) fn recv_now(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        // SAFETY: initialized bytes are valid MaybeUninit bytes, and recv
        // writes only initialized bytes into them.
        self.recv_now_uninit(unsafe {
            &mut *(buf as *mut [u8] as *mut [std::mem::MaybeUninit<u8>])
        })
    }

    /// `recv_now` into memory not yet initialized (a Vec's spare room):
    /// the first Ok(n) bytes are initialized after it.
    pub(crate) fn recv_now_uninit(
        &self,
        buf: &mut [std::mem::MaybeUninit<u8>],
    ) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        assert!(
            self.deadline.is_none(),
            "a direct read during the handshake"
        );
        // SAFETY: the pointer and length come from one live slice, and the
        // descriptor belongs to `self.tcp` for the whole call.
        let got = unsafe {
            libc::recv(
                self.tcp.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if got < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let got = got as usize;
        assert!(got <= buf.len());
        Ok(got)
    }

    /// Writes what the socket's send buffer takes now, without waiting
    /// (`MSG_DONTWAIT`): the number of bytes written, 0 when the buffer is
    /// full. For the transport's direct writes, after the handshake.
    pub(crate) fn send_now(&self, bytes: &[u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        assert!(
            self.deadline.is_none(),
            "a direct write during the handshake"
        );
        // SAFETY: the pointer and length come from one live slice, and the
        // descriptor belongs to `self.tcp` for the whole call.
        let sent = unsafe {
            libc::send(
                self.tcp.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if sent >= 0 {
            let sent = sent as usize;
            assert!(sent <= bytes.len());
            return Ok(sent);
        }
        let error = std::io::Error::last_os_error();
        match error.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Ok(0),
            _ => Err(error),
        }
    }

    fn time_left(&self) -> std::io::Result<Option<Duration>> {
        let Some(deadline) = self.deadline else {
            return Ok(None);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        Ok(Some(left))
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(left) = self.time_left()? {
            self.tcp.set_read_timeout(Some(left))?;
        }
        self.tcp.read(buf)
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(left) = self.time_left()? {
            self.tcp.set_write_timeout(Some(left))?;
        }
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}

/// A peer connection, plain or TLS (blocking: the transport's threads).
pub(crate) enum PeerStream {
    Plain(Socket),
    TlsClient(Box<StreamOwned<ClientConnection, Socket>>),
    TlsServer(Box<StreamOwned<ServerConnection, Socket>>),
}

impl std::fmt::Debug for PeerStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PeerStream::Plain(_) => "PeerStream(plain)",
            PeerStream::TlsClient(_) => "PeerStream(TLS, connected)",
            PeerStream::TlsServer(_) => "PeerStream(TLS, accepted)",
        })
    }
}

impl PeerStream {
    /// See `Socket::closed_by_peer`.
    pub(crate) fn closed_by_peer(&mut self) -> bool {
        self.socket_mut().closed_by_peer()
    }

    /// Writes what can go now without waiting (`Socket::send_now`): how
    /// many bytes of `frame` the stream took, and whether some of them
    /// still wait in the TLS layer's buffer (a `flush` sends them; plain
    /// TCP never has any). Errors are left for the next blocking write to
    /// meet. Only on a stream whose earlier writes were flushed.
    pub(crate) fn write_now(&mut self, frame: &[u8]) -> WrittenNow {
        match self {
            PeerStream::Plain(socket) => WrittenNow {
                accepted: socket.send_now(frame).unwrap_or(0),
                pending: false,
            },
            PeerStream::TlsClient(stream) => tls_write_now(&mut stream.conn, &stream.sock, frame),
            PeerStream::TlsServer(stream) => tls_write_now(&mut stream.conn, &stream.sock, frame),
        }
    }

    /// Appends to `buf` what the connection holds now, at most about
    /// `max_bytes` (decrypted, over TLS), without waiting. Ok(false): the
    /// peer closed the connection.
    pub(crate) fn read_now(
        &mut self,
        buf: &mut Vec<u8>,
        max_bytes: usize,
    ) -> std::io::Result<bool> {
        match self {
            PeerStream::Plain(socket) => plain_read_now(socket, buf, max_bytes),
            PeerStream::TlsClient(stream) => {
                tls_read_now(&mut stream.conn, &stream.sock, buf, max_bytes)
            }
            PeerStream::TlsServer(stream) => {
                tls_read_now(&mut stream.conn, &stream.sock, buf, max_bytes)
            }
        }
    }

    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match self {
            PeerStream::Plain(socket) => socket.tcp.as_raw_fd(),
            PeerStream::TlsClient(stream) => stream.sock.tcp.as_raw_fd(),
            PeerStream::TlsServer(stream) => stream.sock.tcp.as_raw_fd(),
        }
    }

    pub(crate) fn socket_mut(&mut self) -> &mut Socket {
        match self {
            PeerStream::Plain(socket) => socket,
            PeerStream::TlsClient(stream) => &mut stream.sock,
            PeerStream::TlsServer(stream) => &mut stream.sock,
        }
    }
}

/// What `PeerStream::write_now` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WrittenNow {
    pub accepted: usize,
    pub pending: bool,
}

/// Encrypts `frame` into the connection's buffer and sends what the
/// socket takes now.
fn tls_write_now<D>(
    conn: &mut rustls::ConnectionCommon<D>,
    socket: &Socket,
    frame: &[u8],
) -> WrittenNow {
    if conn.wants_write() {
        // Earlier records wait: the sender thread flushes them first.
        return WrittenNow {
            accepted: 0,
            pending: true,
        };
    }
    let accepted = conn.writer().write(frame).unwrap_or(0);
    let mut now = DontWait(socket);
    while conn.wants_write() {
        match conn.write_tls(&mut now) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    WrittenNow {
        accepted,
        pending: conn.wants_write(),
    }
}

/// Bytes one read without waiting asks the socket for.
const READ_NOW_CHUNK_BYTES: usize = 64 * 1024;

/// Reads until the socket has nothing more now or `max_bytes` are taken.
/// A read that returns less than it asked for found the receive buffer
/// empty: the driver's epoll is level-triggered, so bytes that arrive
/// later wake it again, and asking once more (an EAGAIN recv per frame,
/// most of a small ack's reads) is left out.
fn plain_read_now(socket: &Socket, buf: &mut Vec<u8>, max_bytes: usize) -> std::io::Result<bool> {
    let mut taken = 0;
    while taken < max_bytes {
        buf.reserve(READ_NOW_CHUNK_BYTES);
        let room = buf.spare_capacity_mut();
        let asked = room.len();
        match socket.recv_now_uninit(room) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                // SAFETY: recv initialized these n bytes of the spare room.
                unsafe { buf.set_len(buf.len() + n) };
                taken += n;
                if n < asked {
                    break;
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(true)
}

/// TLS records off the socket while it has some, their plaintext into
/// `buf`; records the connection wants to send meanwhile (an alert, a
/// key update) go out if the socket takes them now.
fn tls_read_now<D>(
    conn: &mut rustls::ConnectionCommon<D>,
    socket: &Socket,
    buf: &mut Vec<u8>,
    max_bytes: usize,
) -> std::io::Result<bool> {
    // Records a blocking read left unprocessed (the handshake's last).
    conn.process_new_packets()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let mut taken = 0;
    let mut recv = RecvNow {
        socket,
        drained: false,
    };
    // Plaintext rustls holds is always taken (epoll does not see it); only
    // reading more records off the socket stops at `max_bytes`, or once a
    // read found the socket empty (as in `plain_read_now`). Taken chunk by
    // chunk, copied once, straight into `buf`.
    loop {
        let mut reader = conn.reader();
        match reader.fill_buf() {
            Ok([]) => return Ok(false),
            Ok(chunk) => {
                let n = chunk.len();
                buf.extend_from_slice(chunk);
                reader.consume(n);
                taken += n;
                continue;
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
            Err(error) => return Err(error),
        }
        if taken >= max_bytes || recv.drained {
            break;
        }
        match conn.read_tls(&mut recv) {
            Ok(0) => return Ok(false),
            Ok(_) => {
                conn.process_new_packets()
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    let mut now = DontWait(socket);
    while conn.wants_write() {
        match conn.write_tls(&mut now) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    Ok(true)
}

/// A socket's reads that never wait: an empty receive buffer is
/// WouldBlock. `drained` turns true once a read returns less than it asked
/// for: the receive buffer held no more then.
struct RecvNow<'a> {
    socket: &'a Socket,
    drained: bool,
}

impl Read for RecvNow<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let got = self.socket.recv_now(buf)?;
        if got < buf.len() {
            self.drained = true;
        }
        Ok(got)
    }
}

/// A socket's writes that never wait: a full send buffer is WouldBlock.
struct DontWait<'a>(&'a Socket);

impl Write for DontWait<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.0.send_now(buf)? {
            0 if !buf.is_empty() => Err(std::io::ErrorKind::WouldBlock.into()),
            sent => Ok(sent),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Read for PeerStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            PeerStream::Plain(socket) => socket.read(buf),
            PeerStream::TlsClient(stream) => stream.read(buf),
            PeerStream::TlsServer(stream) => stream.read(buf),
        }
    }
}

impl Write for PeerStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            PeerStream::Plain(socket) => socket.write(buf),
            PeerStream::TlsClient(stream) => stream.write(buf),
            PeerStream::TlsServer(stream) => stream.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            PeerStream::Plain(socket) => socket.flush(),
            PeerStream::TlsClient(stream) => stream.flush(),
            PeerStream::TlsServer(stream) => stream.flush(),
        }
    }
}

/// TLS as the side that connected to member `peer_id`: its certificate
/// must chain to our CAs and name `keel-member-<peer_id>`.
pub(crate) fn tls_connect(
    socket: Socket,
    tls: &PeerTls,
    peer_id: u64,
) -> Result<PeerStream, PeerError> {
    let name = ServerName::try_from(member_name(peer_id)).expect("a member name is a DNS name");
    let connection =
        ClientConnection::new(tls.client.clone(), name).map_err(PeerError::TlsSetup)?;
    let mut stream = StreamOwned::new(connection, socket);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(PeerError::Tls)?;
    }
    Ok(PeerStream::TlsClient(Box::new(stream)))
}

/// TLS as the side that accepted: returns the stream and the peer's
/// end-entity certificate (already checked against our CAs).
pub(crate) fn tls_accept(
    socket: Socket,
    tls: &PeerTls,
) -> Result<(PeerStream, CertificateDer<'static>), PeerError> {
    let connection = ServerConnection::new(tls.server.clone()).map_err(PeerError::TlsSetup)?;
    let mut stream = StreamOwned::new(connection, socket);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(PeerError::Tls)?;
    }
    let certificate = stream
        .conn
        .peer_certificates()
        .and_then(|chain| chain.first())
        .ok_or(PeerError::NoCertificate)?
        .clone()
        .into_owned();
    Ok((PeerStream::TlsServer(Box::new(stream)), certificate))
}

/// TLS (with `peer_tls`) and the handshake on a new connection to member
/// `ends.acceptor`: the stream to send frames on.
pub(crate) fn open(tcp: TcpStream, ends: Ends, auth: &PeerAuth) -> Result<PeerStream, PeerError> {
    let _ = tcp.set_nodelay(true);
    let socket = Socket::handshaking(tcp);
    let shake = || {
        let mut stream = match &auth.tls {
            None => PeerStream::Plain(socket),
            Some(tls) => tls_connect(socket, tls, ends.acceptor)?,
        };
        connect(&mut stream, ends, auth)?;
        stream.socket_mut().end_deadline()?;
        Ok(stream)
    };
    shake().map_err(explain)
}

/// TLS (with `peer_tls`) and the handshake of an accepted connection: the
/// authenticated peer's id and the reader its frames come from (nothing
/// after the handshake decoded yet).
pub(crate) fn authenticate(
    tcp: TcpStream,
    acceptor: &Acceptor<'_>,
) -> Result<(u64, BufReader<PeerStream>), PeerError> {
    let _ = tcp.set_nodelay(true);
    let socket = Socket::handshaking(tcp);
    let shake = || {
        let (stream, certificate) = match &acceptor.auth.tls {
            None => (PeerStream::Plain(socket), None),
            Some(tls) => {
                let (stream, certificate) = tls_accept(socket, tls)?;
                (stream, Some(certificate))
            }
        };
        let mut reader = BufReader::with_capacity(PEER_READ_BUFFER_BYTES, stream);
        let from = accept(&mut reader, acceptor, certificate.as_ref())?;
        reader.get_mut().socket_mut().end_deadline()?;
        Ok((from, reader))
    };
    shake().map_err(explain)
}

/// Handshake failures read better than the io errors behind them.
pub(crate) fn explain(error: PeerError) -> PeerError {
    use std::io::ErrorKind;
    let kind = match &error {
        PeerError::Read(io) | PeerError::Tls(io) => io.kind(),
        _ => return error,
    };
    match kind {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => PeerError::HandshakeTimeout,
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset => PeerError::ClosedInHandshake,
        _ => error,
    }
}

/// At most `PEER_HANDSHAKES_MAX` accepted connections shake hands at once.
pub(crate) struct HandshakeSlot(Arc<AtomicUsize>);

impl HandshakeSlot {
    pub(crate) fn take(count: &Arc<AtomicUsize>) -> Option<HandshakeSlot> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < PEER_HANDSHAKES_MAX).then_some(n + 1)
            })
            .ok()
            .map(|_| HandshakeSlot(count.clone()))
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let before = self.0.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "handshake slots underflow");
    }
}

// ---------------------------------------------------------------------------
// The exchange

/// Who shakes hands with whom.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ends {
    pub cluster_id: u64,
    pub connector: u64,
    pub acceptor: u64,
}

fn fresh_nonce() -> Result<[u8; NONCE_BYTES], PeerError> {
    let mut nonce = [0u8; NONCE_BYTES];
    getrandom::fill(&mut nonce)
        .map_err(|error| PeerError::Read(std::io::Error::other(error.to_string())))?;
    Ok(nonce)
}

/// What a proof covers, for the side `label` names.
fn transcript<'a>(
    label: &'a [u8],
    version: &'a [u8; 2],
    ends: &'a [[u8; 8]; 3],
    nonce_connector: &'a [u8],
    nonce_acceptor: &'a [u8],
) -> [&'a [u8]; 7] {
    [
        label,
        version,
        &ends[0],
        &ends[1],
        &ends[2],
        nonce_connector,
        nonce_acceptor,
    ]
}

fn ends_bytes(ends: Ends) -> [[u8; 8]; 3] {
    [
        ends.cluster_id.to_be_bytes(),
        ends.connector.to_be_bytes(),
        ends.acceptor.to_be_bytes(),
    ]
}

fn welcome(nonce: &[u8; NONCE_BYTES], proof: &[u8; PROOF_BYTES]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(WELCOME_BYTES);
    payload.extend_from_slice(&PEER_PROTOCOL_VERSION.to_be_bytes());
    payload.extend_from_slice(nonce);
    payload.extend_from_slice(proof);
    payload
}

/// The connecting side's handshake (TLS, if any, done): after `Ok`, frames
/// may follow on `stream`.
pub(crate) fn connect(
    stream: &mut (impl Read + Write),
    ends: Ends,
    auth: &PeerAuth,
) -> Result<(), PeerError> {
    let nonce_connector = fresh_nonce()?;
    let mut hello = Vec::with_capacity(HELLO_BYTES);
    hello.extend_from_slice(&PEER_PROTOCOL_VERSION.to_be_bytes());
    hello.extend_from_slice(&ends.cluster_id.to_be_bytes());
    hello.extend_from_slice(&ends.acceptor.to_be_bytes());
    hello.push(auth.flags());
    hello.extend_from_slice(&nonce_connector);
    stream.write_all(&encode_frame(KIND_HELLO, ends.connector, &hello))?;
    stream.flush()?;

    let (kind, sender, payload) = read_frame(stream, HANDSHAKE_FRAME_BYTES_MAX)?;
    if kind != KIND_WELCOME {
        return Err(PeerError::Unexpected {
            expected: "welcome",
            kind,
        });
    }
    if sender != ends.acceptor {
        return Err(PeerError::WrongSender {
            sender,
            from: ends.acceptor,
        });
    }
    let version = version_of(&payload)?;
    if version != PEER_PROTOCOL_VERSION {
        return Err(PeerError::Version {
            theirs: version,
            ours: PEER_PROTOCOL_VERSION,
        });
    }
    if payload.len() != WELCOME_BYTES {
        return Err(PeerError::HandshakeFrame("welcome", payload.len()));
    }
    let Some(secret) = &auth.secret else {
        return Ok(());
    };
    let nonce_acceptor = &payload[2..2 + NONCE_BYTES];
    let proof_acceptor = &payload[2 + NONCE_BYTES..];
    let version = PEER_PROTOCOL_VERSION.to_be_bytes();
    let ends_bytes = ends_bytes(ends);
    let parts = |label| {
        transcript(
            label,
            &version,
            &ends_bytes,
            &nonce_connector,
            nonce_acceptor,
        )
    };
    if !secret.verify(&parts(LABEL_ACCEPTOR), proof_acceptor) {
        return Err(PeerError::BadProof);
    }
    let proof = secret.proof(&parts(LABEL_CONNECTOR));
    stream.write_all(&encode_frame(KIND_PROOF, ends.connector, &proof))?;
    stream.flush()?;
    Ok(())
}

fn version_of(payload: &[u8]) -> Result<u16, PeerError> {
    match payload {
        [high, low, ..] => Ok(u16::from_be_bytes([*high, *low])),
        _ => Err(PeerError::HandshakeFrame("handshake", payload.len())),
    }
}

/// What the accepting side checks a hello against.
pub(crate) struct Acceptor<'a> {
    pub self_id: u64,
    /// 0 while this node joins a cluster and does not know its id yet: the
    /// first connector that passes the handshake (which proves the shared
    /// secret or certificate, when configured) names the cluster, written
    /// to `adopt`.
    pub cluster_id: u64,
    /// The members that may connect; empty while joining (any may).
    pub known: &'a [u64],
    pub auth: &'a PeerAuth,
    pub adopt: Option<&'a std::sync::atomic::AtomicU64>,
}

/// The accepting side's handshake (TLS, if any, done: `certificate` is
/// the peer's); returns the authenticated peer's id. Nothing after the
/// handshake's frames has been decoded when it returns.
pub(crate) fn accept(
    reader: &mut BufReader<impl Read + Write>,
    acceptor: &Acceptor<'_>,
    certificate: Option<&CertificateDer<'_>>,
) -> Result<u64, PeerError> {
    let (kind, from, payload) = read_frame(reader, HANDSHAKE_FRAME_BYTES_MAX)?;
    if kind != KIND_HELLO {
        return Err(PeerError::NotHello);
    }
    if payload.len() == HELLO_V1_BYTES {
        return Err(PeerError::Version {
            theirs: PEER_PROTOCOL_VERSION_UNVERSIONED,
            ours: PEER_PROTOCOL_VERSION,
        });
    }
    let version = version_of(&payload)?;
    if version != PEER_PROTOCOL_VERSION {
        // Tell the other side which version we speak, then refuse.
        let refusal = welcome(&[0; NONCE_BYTES], &[0; PROOF_BYTES]);
        let stream = reader.get_mut();
        let _ = stream.write_all(&encode_frame(KIND_WELCOME, acceptor.self_id, &refusal));
        let _ = stream.flush();
        return Err(PeerError::Version {
            theirs: version,
            ours: PEER_PROTOCOL_VERSION,
        });
    }
    if payload.len() != HELLO_BYTES {
        return Err(PeerError::HandshakeFrame("hello", payload.len()));
    }
    let u64_at = |at: usize| u64::from_be_bytes(payload[at..at + 8].try_into().expect("8 bytes"));
    let (their_cluster, target, flags) = (u64_at(2), u64_at(10), payload[18]);
    let nonce_connector = &payload[19..];
    check_hello(acceptor, from, their_cluster, target, flags)?;
    let cluster_id = if acceptor.cluster_id == 0 {
        their_cluster
    } else {
        acceptor.cluster_id
    };
    if acceptor.auth.tls.is_some() {
        let certificate = certificate.ok_or(PeerError::NoCertificate)?;
        if !certificate_names_member(certificate, from) {
            let named = acceptor
                .known
                .iter()
                .copied()
                .filter(|&id| certificate_names_member(certificate, id))
                .collect();
            return Err(PeerError::CertificateMember {
                claimed: from,
                named,
            });
        }
    }

    let nonce_acceptor = fresh_nonce()?;
    let version = PEER_PROTOCOL_VERSION.to_be_bytes();
    let ends = ends_bytes(Ends {
        cluster_id,
        connector: from,
        acceptor: acceptor.self_id,
    });
    let parts = |label| transcript(label, &version, &ends, nonce_connector, &nonce_acceptor);
    let proof = match &acceptor.auth.secret {
        Some(secret) => secret.proof(&parts(LABEL_ACCEPTOR)),
        None => [0; PROOF_BYTES],
    };
    let stream = reader.get_mut();
    stream.write_all(&encode_frame(
        KIND_WELCOME,
        acceptor.self_id,
        &welcome(&nonce_acceptor, &proof),
    ))?;
    stream.flush()?;
    let adopt = |from| {
        if let Some(adopt) = acceptor.adopt {
            let _ = adopt.compare_exchange(0, cluster_id, Ordering::AcqRel, Ordering::Acquire);
        }
        Ok(from)
    };
    let Some(secret) = &acceptor.auth.secret else {
        return adopt(from);
    };
    let (kind, sender, claimed) = read_frame(reader, HANDSHAKE_FRAME_BYTES_MAX)?;
    if kind != KIND_PROOF {
        return Err(PeerError::Unexpected {
            expected: "proof of the shared secret",
            kind,
        });
    }
    if sender != from {
        return Err(PeerError::WrongSender { sender, from });
    }
    if claimed.len() != PROOF_BYTES || !secret.verify(&parts(LABEL_CONNECTOR), &claimed) {
        return Err(PeerError::BadProof);
    }
    adopt(from)
}

fn check_hello(
    acceptor: &Acceptor<'_>,
    from: u64,
    their_cluster: u64,
    target: u64,
    flags: u8,
) -> Result<(), PeerError> {
    // A node joining a cluster knows no member yet: any sender may be the
    // leader that brings it the configuration.
    let joining = acceptor.known.is_empty();
    if acceptor.cluster_id != 0 && their_cluster != acceptor.cluster_id {
        return Err(PeerError::OtherCluster {
            from,
            theirs: their_cluster,
            ours: acceptor.cluster_id,
        });
    }
    if (!joining && !acceptor.known.contains(&from)) || from == acceptor.self_id || from == 0 {
        return Err(PeerError::UnknownPeer(from));
    }
    if target != acceptor.self_id {
        return Err(PeerError::WrongTarget {
            from,
            target,
            ours: acceptor.self_id,
        });
    }
    let ours = acceptor.auth.flags();
    if flags != ours {
        return Err(PeerError::AuthMismatch {
            theirs: describe_flags(flags),
            ours: describe_flags(ours),
        });
    }
    Ok(())
}
