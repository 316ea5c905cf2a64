//! One client connection: handshake, then the request pipeline.
//!
//! Ordering rules (ZooKeeper's session FIFO):
//! - writes go to the log at once and may be many in flight;
//! - a read waits until every earlier write of the session has been
//!   applied, and every request after a waiting read waits behind it, so a
//!   read sees exactly the session's earlier writes and none of its later;
//! - a watch event reaches the client before any reply that reflects a
//!   later state: events queued up to a read's zxid are sent before it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use keel_jute::{
    frame, opcode, xid, ConnectRequest, ConnectResponse, ErrorCode, JuteError, KeeperState, Record,
    ReplyHeader, Request, RequestHeader, Response, WatcherEvent,
};
use keel_tree::{Event, Txn, TxnOp};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::fifo::{is_write_op, Completed, Lane, RequestFifo, Stash, PENDING_REQUESTS_MAX};
use crate::node::{
    add_auth, AuthAnswer, CloseReason, Outbound, Route, SyncContext, SESSION_SECRET,
};
use crate::port::ClientPort;
use crate::profile;
use crate::readonly::{local_session_password, refused_when_read_only, LOCAL_SESSIONS_MAX};
use crate::sasl::{DigestMd5Server, DigestMd5Step, SaslUsers};
use crate::shared::{
    monotonic_us, wall_clock_ms, AliveConnection, ConnectionInfo, ConnectionOutlet, LastOp,
    Overflow, ResponseStats, Shared, Stats, CONNECTION_OUTBOUND_MAX,
};

/// How long a new connection may take to send its first packet.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// How long session creation may wait for the log.
pub const SESSION_CREATE_TIMEOUT_MS: u64 = 30_000;
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Reply bytes a connection prepares before it writes them out: requests
/// already read wait while the socket takes these (a client that does not
/// read its replies stops the server from reading its requests).
pub const OUT_BUFFER_MAX_BYTES: usize = 1 << 20;

/// Why a connection ended; logged, never sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Closed {
    #[error("closed by client")]
    ByClient,
    #[error("read error")]
    ReadError,
    #[error("write error")]
    WriteError,
    #[error("first packet length out of bounds")]
    BadFirstFrame,
    #[error("frame length out of bounds")]
    BadFrame,
    #[error("truncated request header")]
    TruncatedHeader,
    #[error("malformed ConnectRequest")]
    MalformedConnect,
    #[error("client has seen a newer zxid")]
    ClientAhead,
    #[error("no leader confirmed the state a resumed session would see (no leader or no quorum)")]
    ReconnectBarrier,
    #[error("session expired or password mismatch")]
    SessionInvalid,
    #[error("proposal queue full or raft stopped")]
    ProposeFailed,
    #[error("sync queue full or raft stopped")]
    SyncFailed,
    #[error("session creation timed out")]
    SessionCreateTimeout,
    #[error("unexpected message during session creation")]
    UnexpectedDuringCreate,
    #[error("authentication failed")]
    AuthFailed,
    #[error("SASL authentication required (require_sasl)")]
    SaslRequired,
    #[error("internal: reply out of order")]
    ReplyOutOfOrder,
    #[error("session closed by client")]
    SessionClosedByClient,
    #[error("unknown opcode")]
    UnknownOpcode,
    #[error("read-only mode: the client did not ask for a read-only session")]
    NotReadOnlyClient,
    #[error("read-only mode: a global session is not renewed")]
    GlobalSessionInReadOnly,
    #[error("read-only mode: {LOCAL_SESSIONS_MAX} local sessions alive")]
    LocalSessionsFull,
    #[error("server shutting down")]
    Shutdown,
    #[error("client not reading: {CONNECTION_OUTBOUND_MAX} messages queued")]
    OutboundFull,
    /// The server closed it (the session ended or moved, a snapshot
    /// replaced the state, ...).
    #[error("{0}")]
    Server(CloseReason),
}

/// A connection of either client port: `S` is the whole socket (a
/// TcpStream on the plain port, so that path is as before; a TLS stream
/// on the secure port).
struct Connection<S> {
    shared: Arc<Shared>,
    id: u64,
    peer: SocketAddr,
    session_id: i64,
    /// The identities ACLs see: `ip:<address>`, then digest and sasl ids as
    /// the client authenticates (`authenticate`, `authenticate_sasl`);
    /// reads use them, writes carry them in their Txn.
    auth: Vec<keel_jute::Id>,
    /// The DIGEST-MD5 users, when SASL is configured.
    sasl_users: Option<Arc<SaslUsers>>,
    /// This connection's SASL exchange, from its first `sasl` request.
    sasl: Option<DigestMd5Server>,
    /// The socket (plain TCP or TLS), read and written by this one task.
    stream: S,
    inbox: mpsc::Receiver<Outbound>,
    /// Set by the apply side when `inbox` is full.
    overflow: Arc<Overflow>,
    /// Messages taken off the inbox early (while serving a read) but newer
    /// than that read: handled next, in order.
    stash: Stash,
    /// The session's request order (`fifo.rs`): what runs, what waits.
    fifo: RequestFifo<(RequestHeader, Vec<u8>)>,
    /// The clock of `fifo`'s timestamps (latency of writes).
    opened: Instant,
    /// `opened` on `monotonic_us`'s clock (`cons`'s response times).
    opened_us: u64,
    /// When the connection was accepted, ms since the epoch (`cons`'s est).
    established_ms: i64,
    out: Vec<u8>,
    closing: Option<Closed>,
    /// This connection's row in `cons` (set once the session is open).
    info: Option<Arc<ConnectionInfo>>,
    /// The client read ClickHouse Keeper's feature flags (or API version):
    /// it is ClickHouse's, and gets failed multiRead ops in its form.
    clickhouse: bool,
    /// The session is a local one of read-only mode (`readonly.rs`):
    /// writes are answered NotReadOnly, nothing goes to the log.
    read_only: bool,
    /// Turns true when the server stops (`Shared::drain`, waited for in
    /// `run`): no further request is taken; the connection closes once
    /// those taken are answered.
    draining: bool,
    /// This connection in the server's count of open ones (srvr's
    /// `Connections:`), given back in `finish` before the socket closes.
    alive: Option<AliveConnection>,
}

/// Serves one socket of the plain client port until it closes.
pub async fn serve_plain(port: &ClientPort, stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    serve(port, stream, peer).await;
}

/// The first byte a TLS client sends: the record type of its ClientHello
/// (a handshake record). ZooKeeper's port unification tells TLS from plain
/// text by it; here anything else is closed at once, unanswered, so a
/// plain-text client on the TLS port sees its connection end instead of
/// waiting.
const TLS_HANDSHAKE_RECORD_TYPE: u8 = 0x16;

/// Serves one socket of the TLS client port: the TLS handshake (bounded by
/// TLS_HANDSHAKE_TIMEOUT_MS, with the certificates current now), then the
/// same protocol as the plain port, four-letter words included (ZooKeeper's
/// Netty secure port answers them inside TLS too).
pub async fn serve_tls(
    port: &ClientPort,
    stream: TcpStream,
    peer: SocketAddr,
    tls: &crate::tls::ReloadableServerConfig,
) {
    let _ = stream.set_nodelay(true);
    let handshake = async {
        let mut first = [0u8; 1];
        match stream.peek(&mut first).await? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ if first[0] != TLS_HANDSHAKE_RECORD_TYPE => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "first byte {:#04x} does not start a TLS handshake",
                        first[0]
                    ),
                ))
            }
            _ => {}
        }
        tokio_rustls::TlsAcceptor::from(tls.current())
            .accept(keel_client::SendStream(stream))
            .await
    };
    let timeout = Duration::from_millis(crate::TLS_HANDSHAKE_TIMEOUT_MS);
    let stream = match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => return tracing::info!(%peer, %error, "TLS handshake failed; closed"),
        Err(_) => {
            return tracing::info!(%peer, timeout_ms = crate::TLS_HANDSHAKE_TIMEOUT_MS, "TLS handshake timed out; closed")
        }
    };
    serve(port, stream, peer).await;
}

/// Serves one connection until it closes. Never panics on input.
/// While the node loads its data (`port.serving()` is None) a four-letter
/// word gets ZooKeeper's not-running answer and a session request is
/// closed unanswered, as ZooKeeper's "ZooKeeperServer not running" does.
/// One task owns the whole stream: it never reads and writes at once
/// (a write waits only for a client that does not read), so the stream
/// needs no split (a TLS stream would share its state behind a lock).
async fn serve<S>(port: &ClientPort, mut stream: S, peer: SocketAddr)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Counted from now on (ZooKeeper's addCnxn on accept): a connection
    // asking a four-letter word is one of the connections it reports.
    let alive = Stats::connection_opened(&port.stats);
    let established_ms = wall_clock_ms();
    let mut buf = Vec::with_capacity(READ_CHUNK_BYTES);
    let first = tokio::time::timeout(
        Duration::from_millis(HANDSHAKE_TIMEOUT_MS),
        read_first_frame(&mut stream, &mut buf, port.config.jute_max_buffer_bytes),
    )
    .await;
    let serving = port.serving();
    let first = match first {
        Ok(Ok(First::Frame(total))) => {
            // ZooKeeper's readPayload counts the ConnectRequest (any first
            // frame of an allowed length) before it reads it.
            port.stats.packets_received.fetch_add(1, Ordering::Relaxed);
            total
        }
        Ok(Ok(First::FourLetterWord(word))) => {
            // Counted before it runs, as ZooKeeper's checkFourLetterWord
            // does (so `srst` zeroes its own) and its answer once written.
            let counted = crate::fourlw::counted_by_zookeeper(&word);
            if counted {
                port.stats.packets_received.fetch_add(1, Ordering::Relaxed);
            }
            let answer = crate::fourlw::answer(&port.config, serving.as_deref(), &word, peer);
            if stream.write_all(answer.as_bytes()).await.is_ok() && counted {
                let packets = crate::fourlw::packets_sent_for(&answer);
                port.stats
                    .packets_sent
                    .fetch_add(packets, Ordering::Relaxed);
            }
            // Out of the count before the client sees the end.
            drop(alive);
            let _ = stream.shutdown().await;
            return;
        }
        Ok(Err(reason)) => {
            return tracing::info!(%peer, %reason, "connection closed before handshake")
        }
        Err(_) => return tracing::info!(%peer, "handshake timed out"),
    };
    let Some(shared) = serving else {
        port.stats
            .connection_rejected
            .fetch_add(1, Ordering::Relaxed);
        return tracing::info!(%peer, "session request closed: still loading the data");
    };
    if shared.node.removed() {
        port.stats
            .connection_rejected
            .fetch_add(1, Ordering::Relaxed);
        return tracing::info!(%peer, "session request closed: this server was removed from the cluster");
    }
    let (sender, inbox) = mpsc::channel(CONNECTION_OUTBOUND_MAX);
    let id = shared
        .next_connection_id
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let opened = Instant::now();
    let mut conn = Connection {
        shared: shared.clone(),
        id,
        peer,
        session_id: 0,
        auth: vec![keel_jute::Id {
            scheme: "ip".into(),
            id: peer.ip().to_string(),
        }],
        sasl_users: port.sasl_users.clone(),
        sasl: None,
        stream,
        inbox,
        overflow: Arc::new(Overflow::default()),
        stash: Stash::default(),
        fifo: RequestFifo::new(PENDING_REQUESTS_MAX),
        opened,
        opened_us: monotonic_us(opened),
        established_ms,
        out: Vec::with_capacity(READ_CHUNK_BYTES),
        closing: None,
        info: None,
        clickhouse: false,
        read_only: false,
        draining: false,
        alive: Some(alive),
    };
    let payload = buf[4..first].to_vec();
    buf.drain(..first);
    let reason = match conn.handshake(&payload, sender).await {
        Ok(()) => conn.run(buf).await,
        Err(reason) => reason,
    };
    conn.finish(reason).await;
}

enum First {
    Frame(usize),
    FourLetterWord(String),
}

async fn read_first_frame(
    reader: &mut (impl AsyncRead + Unpin),
    buf: &mut Vec<u8>,
    frame_max_bytes: usize,
) -> Result<First, Closed> {
    loop {
        if buf.len() >= 4 {
            let word = &buf[..4];
            if word.iter().all(|b| b.is_ascii_lowercase())
                && crate::fourlw::COMMANDS.contains(&std::str::from_utf8(word).unwrap_or(""))
            {
                return Ok(First::FourLetterWord(
                    String::from_utf8_lossy(word).into_owned(),
                ));
            }
            match frame::check_frame(buf, frame_max_bytes) {
                Ok(Some(total)) => return Ok(First::Frame(total)),
                Ok(None) => {}
                Err(_) => return Err(Closed::BadFirstFrame),
            }
        }
        if reader.read_buf(buf).await.map_err(|_| Closed::ReadError)? == 0 {
            return Err(Closed::ByClient);
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    async fn handshake(
        &mut self,
        payload: &[u8],
        sender: mpsc::Sender<Outbound>,
    ) -> Result<(), Closed> {
        let request = ConnectRequest::from_bytes(payload).map_err(|_| Closed::MalformedConnect)?;
        let shared = self.shared.clone();
        let config = &shared.config;
        let resumes_global = request.session_id != 0
            && !keel_session::is_local_session_id(request.session_id)
            && !shared.is_read_only();
        if resumes_global && shared.raft().status.cluster {
            // Not answered from a state older than the leader's: closed
            // unanswered after READ_BARRIER_TIMEOUT_MS without a leader,
            // the client tries another server (as ZooKeeper's, which
            // serves nobody while it looks for a leader).
            if let Err(error) = shared.reconnect_barrier().await {
                tracing::info!(peer = %self.peer, session = format_args!("{:#x}", request.session_id), %error, "session not resumed");
                return Err(Closed::ReconnectBarrier);
            }
        }
        let last_zxid = shared.node.last_zxid();
        if request.last_zxid_seen > last_zxid {
            // ZooKeeper refuses a client that has seen a newer state than ours.
            tracing::info!(peer = %self.peer, seen = request.last_zxid_seen, ours = last_zxid, "client is ahead of this server");
            return Err(Closed::ClientAhead);
        }
        let timeout_ms = keel_session::negotiate_timeout_ms(
            request.time_out,
            config.min_session_timeout(),
            config.max_session_timeout(),
        );
        // The zxid of a session this handshake created: its reply counts
        // as the connection's first response (`cons`: lop=SESS, lcxid 0),
        // as ZooKeeper's createSession goes through FinalRequestProcessor;
        // a resumed session's connection has answered nothing yet.
        let mut created_zxid = None;
        let valid = if shared.is_read_only() {
            let valid = self.open_read_only(&request, timeout_ms, sender)?;
            if valid && request.session_id == 0 {
                created_zxid = Some(last_zxid);
            }
            valid
        } else if request.session_id == 0 {
            created_zxid = Some(self.create_session(timeout_ms, sender).await?);
            true
        } else {
            self.resume_session(&request, sender)
        };
        let password = match (valid, self.read_only) {
            (false, _) => [0; keel_session::SESSION_PASSWORD_BYTES],
            (true, true) => local_session_password(self.session_id),
            (true, false) => keel_session::session_password(self.session_id, SESSION_SECRET),
        };
        let response = ConnectResponse {
            protocol_version: 0,
            time_out: if valid { timeout_ms as i32 } else { 0 },
            session_id: if valid { self.session_id } else { 0 },
            passwd: password.to_vec(),
            read_only: self.read_only,
        };
        let mut body = response.to_bytes();
        if request.read_only.is_none() {
            body.pop(); // old clients neither send nor expect the readOnly byte
        }
        frame::write_frame(&mut self.out, |out| out.extend_from_slice(&body));
        // The ConnectResponse is a packet sent (ZooKeeper's
        // finishSessionInit sendBuffer), an invalid session's too.
        self.count_sent();
        if !valid {
            return Err(Closed::SessionInvalid);
        }
        let info = Arc::new(ConnectionInfo {
            peer: self.peer,
            session_id: self.session_id,
            timeout_ms,
            established_ms: self.established_ms,
            // The ConnectRequest and the ConnectResponse.
            received: AtomicU64::new(1),
            sent: AtomicU64::new(1),
            outstanding: AtomicU64::new(0),
            responses: ResponseStats::default(),
        });
        self.info = Some(info.clone());
        if let Some(zxid) = created_zxid {
            // The ConnectRequest came when the connection opened.
            let now_us = self.now_us();
            self.answered(0, zxid, LastOp::Sess, 0, now_us);
        }
        self.shared.connections().insert(self.id, info);
        self.flush().await
    }

    /// A new session through the log; its createSession txn's zxid.
    async fn create_session(
        &mut self,
        timeout_ms: u32,
        sender: mpsc::Sender<Outbound>,
    ) -> Result<i64, Closed> {
        let shared = self.shared.clone();
        self.session_id = shared
            .next_session_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let route = self.route(sender);
        shared.node.register(self.session_id, route);
        if shared.is_read_only() {
            // The node turned read-only after this handshake looked: the
            // switch may have closed the routes before this one was there.
            return Err(Closed::Server(CloseReason::ReadOnly));
        }
        let txn = Txn {
            session_id: self.session_id,
            xid: 0,
            time_ms: wall_clock_ms(),
            auth: Vec::new(),
            op: TxnOp::CreateSession { timeout_ms },
        };
        if shared.raft().propose(txn.encode()).is_err() {
            return Err(Closed::ProposeFailed);
        }
        let wait = tokio::time::timeout(
            Duration::from_millis(SESSION_CREATE_TIMEOUT_MS),
            self.inbox.recv(),
        )
        .await;
        match wait {
            Ok(Some(Outbound::Reply {
                op_code: opcode::CREATE_SESSION,
                result: Ok(_),
                zxid,
                ..
            })) => Ok(zxid),
            Ok(Some(Outbound::Close { reason })) => Err(Closed::Server(reason)),
            Ok(_) => Err(Closed::UnexpectedDuringCreate),
            Err(_) => Err(Closed::SessionCreateTimeout),
        }
    }

    /// Resumes a session on this connection if it lives and the password
    /// matches; the previous connection of the session is closed.
    fn resume_session(&mut self, request: &ConnectRequest, sender: mpsc::Sender<Outbound>) -> bool {
        let route = self.route(sender);
        let resumed = self
            .shared
            .node
            .resume(request.session_id, &request.passwd, route);
        if resumed {
            self.session_id = request.session_id;
        }
        resumed
    }

    /// A handshake while the node is read-only (ZooKeeper's
    /// ReadOnlyZooKeeperServer): a client without the readOnly flag is
    /// closed unanswered, and so is one renewing a global session (it
    /// tries another server); a new session is a local one; a local one
    /// this node issued resumes while it lives (else the answer says
    /// expired and the client starts a new one).
    fn open_read_only(
        &mut self,
        request: &ConnectRequest,
        timeout_ms: u32,
        sender: mpsc::Sender<Outbound>,
    ) -> Result<bool, Closed> {
        if request.read_only != Some(true) {
            tracing::info!(peer = %self.peer, "read-only mode: refusing a session request of a client that is not read-only");
            return Err(Closed::NotReadOnlyClient);
        }
        let shared = self.shared.clone();
        let now_ms = shared.now_ms();
        let session_id = match request.session_id {
            0 => shared
                .local_sessions()
                .open(timeout_ms, now_ms)
                .ok_or(Closed::LocalSessionsFull)?,
            id if keel_session::is_local_session_id(id) => {
                if !shared.local_sessions().resume(id, &request.passwd, now_ms) {
                    return Ok(false);
                }
                id
            }
            id => {
                tracing::info!(peer = %self.peer, session = format_args!("{id:#x}"), "read-only mode: refusing to renew a global session");
                return Err(Closed::GlobalSessionInReadOnly);
            }
        };
        self.session_id = session_id;
        self.read_only = true;
        let route = self.route(sender);
        shared.node.bind_local(session_id, route);
        if !shared.is_read_only() {
            // The node left read-only mode meanwhile; its sweep may have
            // missed this route.
            return Err(Closed::Server(CloseReason::ReadWrite));
        }
        tracing::debug!(peer = %self.peer, session = format_args!("{session_id:#x}"), "read-only session");
        Ok(true)
    }

    /// This connection's entry in the node's reply registry.
    fn route(&self, sender: mpsc::Sender<Outbound>) -> Route<ConnectionOutlet> {
        Route {
            connection_id: self.id,
            outlet: ConnectionOutlet {
                sender,
                overflow: self.overflow.clone(),
            },
        }
    }

    async fn run(&mut self, mut buf: Vec<u8>) -> Closed {
        // One wait for the drain for the connection's whole life, polled
        // last: a new `changed()` per turn registered with the drain's
        // shared notifier and unregistered again, taking its lock twice
        // per request (≈1.3% of a 3-node cluster's samples under reads).
        // `wait_for` looks at the current value first, so a drain that
        // began before this subscription is seen too.
        let mut drain = self.shared.drain_signal();
        let drained = async move {
            // The sender gone (the server stopping) counts as a drain too.
            let _ = drain.wait_for(|draining| *draining).await;
        };
        tokio::pin!(drained);
        loop {
            let more = match self.take_frames(&mut buf) {
                Ok(more) => more,
                Err(reason) => return reason,
            };
            if let Some(info) = &self.info {
                info.outstanding
                    .store(self.fifo.len() as u64, Ordering::Relaxed);
            }
            if let Err(reason) = self.flush().await {
                return reason;
            }
            if let Some(reason) = self.closing {
                return reason;
            }
            if self.draining && self.fifo.is_empty() && self.stash.is_empty() {
                // Every request taken is answered and written: the client
                // sees its replies, then the close, and moves on.
                return Closed::Shutdown;
            }
            if more && !self.draining {
                continue; // frames already read wait behind OUT_BUFFER_MAX_BYTES
            }
            if self.overflow.is_set() {
                // A full inbox is ready to receive: the turn that took
                // from it comes here next.
                return Closed::OutboundFull;
            }
            let accepting = self.fifo.accepting() && !self.draining;
            if let Some(message) = self.stash.pop() {
                self.on_outbound(message);
                continue;
            }
            // In this order: what the apply side queued (replies in
            // request order, events), then the socket, then the drain.
            tokio::select! {
                biased;
                message = self.inbox.recv() => match message {
                    Some(message) => self.on_outbound(message),
                    None => return Closed::Shutdown,
                },
                read = self.stream.read_buf(&mut buf), if accepting => match read {
                    Ok(0) => return Closed::ByClient,
                    Ok(_) => {}
                    Err(_) => return Closed::ReadError,
                },
                () = &mut drained, if !self.draining => self.draining = true,
            }
        }
    }

    /// Handles the complete frames in `buf` until OUT_BUFFER_MAX_BYTES of
    /// replies are ready; true if it stopped there (frames may be left).
    fn take_frames(&mut self, buf: &mut Vec<u8>) -> Result<bool, Closed> {
        let mut consumed = 0;
        let mut full = false;
        while self.closing.is_none() && self.fifo.accepting() && !self.draining {
            if self.out.len() >= OUT_BUFFER_MAX_BYTES {
                full = true;
                break;
            }
            let total = match frame::check_frame(
                &buf[consumed..],
                self.shared.config.jute_max_buffer_bytes,
            ) {
                Ok(Some(total)) => total,
                Ok(None) => break,
                Err(error) => {
                    tracing::warn!(peer = %self.peer, session = format_args!("{:#x}", self.session_id), %error, "closing connection: bad frame length");
                    return Err(Closed::BadFrame);
                }
            };
            let payload = &buf[consumed + 4..consumed + total];
            consumed += total;
            self.on_frame(payload)?;
        }
        buf.drain(..consumed);
        Ok(full)
    }

    fn on_frame(&mut self, payload: &[u8]) -> Result<(), Closed> {
        let header = RequestHeader::from_bytes(&payload[..payload.len().min(8)])
            .map_err(|_| Closed::TruncatedHeader)?;
        let op = profile::Op::of_opcode(header.op_type);
        let _op = profile::enter(op);
        self.shared.stats.count_received(op);
        self.shared
            .stats
            .packets_received
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(info) = &self.info {
            bump(&info.received);
        }
        if self.read_only {
            let now_ms = self.shared.now_ms();
            self.shared.local_sessions().touch(self.session_id, now_ms);
        } else {
            self.shared.node.touch(self.session_id);
            if self.shared.raft().status.cluster {
                self.shared.touched().insert(self.session_id);
            }
        }
        let body = payload[8..].to_vec();
        let lane = Lane::of(header.op_type, &body);
        if let Some((header, body)) = self.fifo.arrive((header, body), lane) {
            self.execute(header, body)?;
        }
        self.run_waiting();
        Ok(())
    }

    /// Runs a request whose turn has come: writes go to the log, the rest
    /// is answered now.
    fn execute(&mut self, header: RequestHeader, body: Vec<u8>) -> Result<(), Closed> {
        if header.op_type == opcode::AUTH {
            return self.authenticate(header.xid, &body);
        }
        if header.op_type == opcode::SASL {
            self.authenticate_sasl(header.xid, &body);
            return Ok(());
        }
        if self.shared.config.require_sasl && !self.auth.iter().any(|id| id.scheme == "sasl") {
            // AuthenticationHelper.enforceAuthentication: every request but
            // auth and sasl (pings too) of a connection without a sasl id
            // is answered SessionClosedRequireSaslAuth, and the connection
            // closes; the session lives until it expires.
            tracing::info!(peer = %self.peer, session = format_args!("{:#x}", self.session_id), op = header.op_type, "request before SASL authentication; closing (require_sasl)");
            self.reply(header.xid, 0, Err(ErrorCode::SessionClosedRequireSaslAuth));
            self.closing = Some(Closed::SaslRequired);
            return Ok(());
        }
        if header.op_type == opcode::PING {
            // The C client takes every reply's zxid as its last seen.
            let Some(zxid) = self.zxid_now() else {
                return Ok(());
            };
            self.reply(xid::PING, zxid, Ok(Response::Empty));
            self.answered_now(xid::PING, zxid, LastOp::Ping);
            return Ok(());
        }
        if self.read_only {
            if header.op_type == opcode::CLOSE_SESSION {
                self.close_local_session(header.xid);
                return Ok(());
            }
            if refused_when_read_only(header.op_type) {
                // ReadOnlyRequestProcessor: before the body is looked at.
                let Some(zxid) = self.zxid_now() else {
                    return Ok(());
                };
                self.reply(header.xid, zxid, Err(ErrorCode::NotReadOnly));
                return Ok(());
            }
        }
        let request = match Request::decode(header.op_type, &body) {
            Ok(request) => request,
            Err(JuteError::UnknownOpCode(op)) => {
                tracing::warn!(peer = %self.peer, op, "unknown opcode: answering Unimplemented and closing");
                // ZooKeeper's UnimplementedRequestProcessor answers zxid -1.
                self.reply(header.xid, -1, Err(ErrorCode::Unimplemented));
                self.closing = Some(Closed::UnknownOpcode);
                return Ok(());
            }
            Err(error) => {
                tracing::info!(peer = %self.peer, op = header.op_type, %error, "malformed request body");
                let Some(zxid) = self.zxid_now() else {
                    return Ok(());
                };
                self.reply(header.xid, zxid, Err(ErrorCode::MarshallingError));
                // A write's body fails in ZooKeeper's prep: an error txn.
                let write = is_write_op(header.op_type) || header.op_type == opcode::RECONFIG;
                self.answered_now(header.xid, zxid, LastOp::of(header.op_type, write));
                return Ok(());
            }
        };
        if let Request::Reconfig(reconfig) = &request {
            return self.reconfig(header.xid, reconfig);
        }
        if is_write_op(header.op_type) {
            return self.propose(header, body, request);
        }
        self.read(header.xid, header.op_type, request);
        Ok(())
    }

    fn propose(
        &mut self,
        header: RequestHeader,
        body: Vec<u8>,
        request: Request,
    ) -> Result<(), Closed> {
        let op = match request {
            Request::CloseSession => TxnOp::CloseSession,
            Request::Sync(sync) => return self.sync(header.xid, &sync.path),
            _ => TxnOp::Request {
                op_code: header.op_type,
                body,
            },
        };
        let txn = Txn {
            session_id: self.session_id,
            xid: header.xid,
            time_ms: wall_clock_ms(),
            auth: self.auth.clone(),
            op,
        };
        if self.shared.raft().propose(txn.encode()).is_err() {
            return Err(Closed::ProposeFailed);
        }
        self.push_in_flight(header.xid);
        Ok(())
    }

    /// closeSession of a local session: it ends here, nothing goes to the
    /// log; the reply goes out and the connection closes.
    fn close_local_session(&mut self, request_xid: i32) {
        self.shared.local_sessions().close(self.session_id);
        if let Some(zxid) = self.zxid_now() {
            self.reply(request_xid, zxid, Ok(Response::Empty));
            self.answered_now(request_xid, zxid, LastOp::Clos);
        }
        self.closing = Some(Closed::SessionClosedByClient);
    }

    /// The request now waits for the apply step, after the session's
    /// earlier in-flight requests and before its waiting ones.
    fn push_in_flight(&mut self, xid: i32) {
        let now_us = self.opened.elapsed().as_micros() as u64;
        self.fifo.started(xid, now_us);
    }

    /// sync is a ReadIndex barrier, not a log entry: the leader confirms it
    /// still leads, and the reply goes out once this node applied every
    /// entry committed by then. It holds its place in the session's FIFO.
    fn sync(&mut self, xid: i32, path: &str) -> Result<(), Closed> {
        let context = SyncContext {
            session_id: self.session_id,
            xid,
            path: path.to_owned(),
        }
        .encode();
        if self.shared.raft().read_index(context).is_err() {
            return Err(Closed::SyncFailed);
        }
        self.push_in_flight(xid);
        Ok(())
    }

    /// reconfig (ZooKeeper's PrepRequestProcessor checks, in its order):
    /// what this node can tell is answered at once (disabled, standalone,
    /// a change in progress or another config id as applied here, a bad
    /// server string); the rest goes to the leader, which checks again
    /// and last whether this client may write /zookeeper/config (the
    /// super user: its ACL is read-only). The reply holds the request's
    /// place in the session's order.
    fn reconfig(&mut self, xid: i32, request: &keel_jute::ReconfigRequest) -> Result<(), Closed> {
        // Refusals are answered at once (below).
        let Some(zxid) = self.zxid_now() else {
            return Ok(());
        };
        let raft = self.shared.raft();
        let membership = raft.membership();
        let refusal = if !self.shared.config.reconfig_enabled {
            Some(ErrorCode::ReconfigDisabled)
        } else if !raft.status.cluster {
            // ZooKeeper's standalone server has no quorum to change.
            Some(ErrorCode::Unimplemented)
        } else if membership.pending.is_some() {
            Some(ErrorCode::ReconfigInProgress)
        } else if request.cur_config_id != -1
            && request.cur_config_id as u64 != membership.config_id
        {
            Some(ErrorCode::BadVersion)
        } else {
            None
        };
        if let Some(code) = refusal {
            self.reply(xid, zxid, Err(code));
            self.answered_now(xid, zxid, LastOp::Na);
            return Ok(());
        }
        let change = match crate::reconfig::parse_request(request) {
            Ok(change) => change,
            Err(reason) => {
                tracing::info!(peer = %self.peer, %reason, "reconfig: bad arguments");
                self.reply(xid, zxid, Err(ErrorCode::BadArguments));
                self.answered_now(xid, zxid, LastOp::Na);
                return Ok(());
            }
        };
        let authorized = {
            let tree = self.shared.node.tree();
            let acl = tree
                .node(keel_tree::CONFIG_PATH)
                .map(|node| node.acl)
                .unwrap_or_default();
            keel_tree::acl::check(&acl, keel_jute::perms::WRITE, &self.auth).is_ok()
        };
        let expected = (request.cur_config_id != -1).then_some(request.cur_config_id as u64);
        let context = crate::reconfig::ReplyTo {
            session_id: self.session_id,
            xid,
        }
        .encode();
        if raft
            .reconfigure(change, expected, authorized, context)
            .is_err()
        {
            return Err(Closed::ProposeFailed);
        }
        self.push_in_flight(xid);
        Ok(())
    }

    /// A read, served from this node's tree with this connection's
    /// identities; events queued up to the zxid it read at go out first
    /// (once: every event up to that zxid was queued before the read
    /// could see it), and no reply goes out once a Close is queued.
    fn read(&mut self, request_xid: i32, op_code: i32, request: Request) {
        let started_us = self.now_us();
        let (result, zxid) = match &request {
            Request::WhoAmI => {
                let Some(zxid) = self.zxid_now() else {
                    return;
                };
                let infos = crate::fourlw::client_infos(&self.auth);
                (Ok(Response::WhoAmI(infos)), zxid)
            }
            // Answered by `authenticate_sasl` before decoding.
            Request::Sasl(_) => {
                let Some(zxid) = self.zxid_now() else {
                    return;
                };
                (Err(ErrorCode::Unimplemented), zxid)
            }
            _ => {
                let read = self.shared.node.read(self.session_id, &self.auth, &request);
                if !self.send_events_up_to(read.zxid) {
                    return; // the connection closes unanswered (`events_before_reply`)
                }
                for event in &read.fired {
                    self.event(event);
                }
                let mut result = read.result;
                if keel_tree::keeper::is_extension_probe(&request, &result) {
                    self.clickhouse = true;
                }
                if let (true, Request::MultiRead(ops), Ok(Response::Multi(results))) =
                    (self.clickhouse, &request, &mut result)
                {
                    keel_jute::clickhouse::to_clickhouse_failures(ops, results);
                }
                (result, read.zxid)
            }
        };
        match (&request, result) {
            // ZooKeeper fails a multiRead of writes after it made its (still
            // empty) MultiResponse, and sends that after the error header.
            (Request::MultiRead(ops), Err(ErrorCode::MarshallingError)) if !ops.is_empty() => {
                self.reply_with_body(request_xid, zxid, ErrorCode::MarshallingError.code(), {
                    Some(Response::Multi(Vec::new()))
                });
            }
            (_, result) => self.reply(request_xid, zxid, result),
        }
        let now_us = self.now_us();
        self.shared
            .stats
            .record_request(op_code, now_us.saturating_sub(started_us));
        // A read names itself whatever its outcome (FinalRequestProcessor
        // sets lastOp before it reads the request).
        let op = LastOp::of(op_code, false);
        self.answered(request_xid, zxid, op, started_us, now_us);
    }

    /// addauth (`node::add_auth`): a failure answers AuthFailed and closes.
    fn authenticate(&mut self, request_xid: i32, body: &[u8]) -> Result<(), Closed> {
        let super_digest = self.shared.config.super_digest.as_deref();
        let answer = add_auth(&mut self.auth, body, super_digest);
        let Some(zxid_now) = self.zxid_now() else {
            return Ok(());
        };
        let (zxid, result) = answer.reply(zxid_now);
        self.reply(request_xid, zxid, result);
        if let AuthAnswer::Refused { scheme, .. } = &answer {
            tracing::info!(peer = %self.peer, scheme, "authentication failed; closing");
            self.closing = Some(Closed::AuthFailed);
        }
        Ok(())
    }

    /// One token of a SASL exchange, as ZooKeeperServer.processSasl: the
    /// server's token goes back with error 0 and zxid 0; a completed
    /// exchange adds `sasl:<user>` to the connection's ids; a failed one
    /// answers AuthFailed (SessionClosedRequireSaslAuth under
    /// require_sasl) with a null token and closes the connection, so the
    /// Java client reports AuthFailed and kazoo raises AuthFailedError.
    /// Without `sasl_users_file` the answer is error 0 and a null token,
    /// as from a ZooKeeper without a JAAS Server section.
    fn authenticate_sasl(&mut self, request_xid: i32, body: &[u8]) {
        let Some(users) = self.sasl_users.clone() else {
            tracing::info!(peer = %self.peer, "SASL request, but no sasl_users_file is configured");
            return self.sasl_reply(request_xid, ErrorCode::Ok, None);
        };
        let request = match keel_jute::GetSaslRequest::from_bytes(body) {
            Ok(request) => request,
            Err(_) => {
                return self.reply(request_xid, 0, Err(ErrorCode::MarshallingError));
            }
        };
        let exchange = self.sasl.get_or_insert_with(DigestMd5Server::zookeeper);
        match exchange.step(&request.token, &users) {
            Ok(DigestMd5Step::Challenge(token)) => {
                self.sasl_reply(request_xid, ErrorCode::Ok, Some(&token))
            }
            Ok(DigestMd5Step::Authenticated { user, token }) => {
                tracing::info!(peer = %self.peer, session = format_args!("{:#x}", self.session_id), user, "SASL DIGEST-MD5 authenticated");
                let id = keel_jute::Id {
                    scheme: "sasl".into(),
                    id: user,
                };
                if !self.auth.contains(&id) && self.auth.len() < keel_tree::txn::AUTH_IDS_MAX {
                    self.auth.push(id);
                }
                self.sasl_reply(request_xid, ErrorCode::Ok, Some(&token));
            }
            Err(failure) => {
                tracing::warn!(peer = %self.peer, session = format_args!("{:#x}", self.session_id), %failure, "SASL authentication failed; closing");
                let code = if self.shared.config.require_sasl {
                    ErrorCode::SessionClosedRequireSaslAuth
                } else {
                    ErrorCode::AuthFailed
                };
                self.sasl_reply(request_xid, code, None);
                self.closing = Some(Closed::AuthFailed);
            }
        }
    }

    /// A SetSASLResponse frame: ZooKeeper sends its body even with an
    /// error (a null buffer), unlike other replies.
    fn sasl_reply(&mut self, reply_xid: i32, code: ErrorCode, token: Option<&[u8]>) {
        let header = ReplyHeader {
            xid: reply_xid,
            zxid: 0,
            err: code.code(),
        };
        frame::write_frame(&mut self.out, |out| {
            header.write(out);
            keel_jute::codec::write_buffer(out, token);
        });
        self.count_sent();
    }

    fn on_outbound(&mut self, message: Outbound) {
        let _op = profile::enter(profile::Op::REPLY);
        match message {
            Outbound::Event { event, .. } => self.event(&event),
            Outbound::Close { reason } => self.closing = Some(Closed::Server(reason)),
            Outbound::Reply {
                xid: reply_xid,
                zxid,
                op_code,
                result,
            } => {
                let answer = match self.fifo.complete(reply_xid, op_code) {
                    Ok(Completed::Done { since_us, answer }) => {
                        // A write's latency: proposal to applied reply.
                        let now_us = self.now_us();
                        self.shared
                            .stats
                            .record_request(op_code, now_us.saturating_sub(since_us));
                        // A write failed as a whole was an error txn: NA.
                        let op = LastOp::of(op_code, result.is_err());
                        self.answered(reply_xid, zxid, op, since_us, now_us);
                        answer
                    }
                    Ok(Completed::Foreign) => {
                        // A request of an earlier connection of this session.
                        tracing::debug!(peer = %self.peer, reply_xid, "reply for an earlier connection dropped");
                        return;
                    }
                    Err(error) => {
                        tracing::error!(peer = %self.peer, %error, "closing connection");
                        self.closing = Some(Closed::ReplyOutOfOrder);
                        return;
                    }
                };
                if answer {
                    self.reply(reply_xid, zxid, result);
                }
                if self.fifo.closed() {
                    self.closing = Some(Closed::SessionClosedByClient);
                    return;
                }
                self.run_waiting();
            }
        }
    }

    /// Starts queued requests whose turn came after a write finished:
    /// anything once nothing flies, further writes while writes fly.
    fn run_waiting(&mut self) {
        while self.closing.is_none() {
            let Some((header, body)) = self.fifo.next_ready() else {
                return;
            };
            let _op = profile::enter(profile::Op::of_opcode(header.op_type));
            if let Err(reason) = self.execute(header, body) {
                self.closing = Some(reason);
            }
        }
    }

    /// The zxid of a reply answered at once from this node's newest state,
    /// after the events queued up to it went out, as for a read: ZooKeeper
    /// never sends a reply ahead of the events of the changes its zxid
    /// covers. None if the apply side closed the connection meanwhile: the
    /// request goes unanswered (`Stash::events_before_reply`).
    fn zxid_now(&mut self) -> Option<i64> {
        let zxid = self.last_zxid();
        self.send_events_up_to(zxid).then_some(zxid)
    }

    /// Sends events already queued for this session up to `zxid`, keeping
    /// newer messages for later, in order; false if the apply side closed
    /// the connection meanwhile, when a reply at `zxid` must not go out
    /// (`Stash::events_before_reply`).
    fn send_events_up_to(&mut self, zxid: i64) -> bool {
        while let Ok(message) = self.inbox.try_recv() {
            self.stash.push(message);
        }
        let Some(events) = self.stash.events_before_reply(zxid) else {
            return false;
        };
        for (_, event) in events {
            self.event(&event);
        }
        true
    }

    fn event(&mut self, event: &Event) {
        let event = WatcherEvent {
            event_type: event.event_type.code(),
            state: KeeperState::SyncConnected.code(),
            path: event.path.clone(),
        };
        let header = ReplyHeader {
            xid: xid::NOTIFICATION,
            zxid: -1,
            err: 0,
        };
        frame::write_frame(&mut self.out, |out| {
            header.write(out);
            event.write(out);
        });
        self.count_sent();
    }

    fn reply(&mut self, reply_xid: i32, zxid: i64, result: Result<Response, ErrorCode>) {
        let (err, response) = match result {
            Ok(response) => (0, Some(response)),
            Err(code) => (code.code(), None),
        };
        self.reply_with_body(reply_xid, zxid, err, response);
    }

    /// A reply header and, if given, a body (after an error too: ZooKeeper
    /// sends whatever response it had made when the error came).
    fn reply_with_body(&mut self, reply_xid: i32, zxid: i64, err: i32, response: Option<Response>) {
        let header = ReplyHeader {
            xid: reply_xid,
            zxid,
            err,
        };
        frame::write_frame(&mut self.out, |out| {
            header.write(out);
            if let Some(response) = response {
                response.encode(out);
            }
        });
        self.count_sent();
    }

    fn count_sent(&mut self) {
        self.shared
            .stats
            .packets_sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(info) = &self.info {
            bump(&info.sent);
        }
    }

    /// µs since the connection opened (the clock of `fifo`'s timestamps).
    fn now_us(&self) -> u64 {
        self.opened.elapsed().as_micros() as u64
    }

    /// ServerCnxn.updateStatsForResponse for `cons`: request `cxid`, which
    /// came `since_us` after the connection opened, answered `now_us`
    /// after it with `zxid`.
    #[inline]
    fn answered(&self, cxid: i32, zxid: i64, op: LastOp, since_us: u64, now_us: u64) {
        if let Some(info) = &self.info {
            let request_ms = (self.opened_us + since_us) / 1000;
            let now_ms = (self.opened_us + now_us) / 1000;
            info.responses.update(cxid, zxid, op, request_ms, now_ms);
        }
    }

    /// `answered` for a request answered as soon as it is taken.
    fn answered_now(&self, cxid: i32, zxid: i64, op: LastOp) {
        let now_us = self.now_us();
        self.answered(cxid, zxid, op, now_us, now_us);
    }

    fn last_zxid(&self) -> i64 {
        self.shared.node.last_zxid()
    }

    /// Writes the prepared replies; a client that stops reading keeps this
    /// waiting until its outbound queue overflows, which ends it.
    async fn flush(&mut self) -> Result<(), Closed> {
        if self.out.is_empty() {
            return Ok(());
        }
        let (stream, out, overflow) = (&mut self.stream, &self.out, &self.overflow);
        // flush: a TLS stream may keep records of the last write buffered
        // (a no-op on a TcpStream).
        let mut write = std::pin::pin!(async move {
            stream.write_all(out).await?;
            stream.flush().await
        });
        // Most writes complete at once: only one that waits for the client
        // to read also waits for an overflow.
        let first = std::future::poll_fn(|cx| Poll::Ready(write.as_mut().poll(cx))).await;
        let result = match first {
            Poll::Ready(written) => written.map_err(|_| Closed::WriteError),
            Poll::Pending => tokio::select! {
                written = write => written.map_err(|_| Closed::WriteError),
                () = overflow.wait() => Err(Closed::OutboundFull),
            },
        };
        self.out.clear();
        result
    }

    async fn finish(mut self, reason: Closed) {
        let _ = self.flush().await;
        // Gone from the count and from `cons` before the socket closes
        // (ZooKeeper's close: removeCnxn, then closeSock), so a client that
        // saw its connection end no longer finds it in srvr or cons.
        self.alive = None;
        self.shared.connections().remove(&self.id);
        let _ = self.stream.shutdown().await;
        if reason == Closed::OutboundFull {
            tracing::warn!(peer = %self.peer, session = format_args!("{:#x}", self.session_id), %reason, "connection closed");
        } else {
            tracing::debug!(peer = %self.peer, session = format_args!("{:#x}", self.session_id), %reason, "connection closed");
        }
        let shared = self.shared.clone();
        if self.session_id == 0 {
            return;
        }
        shared.node.disconnect(self.session_id, self.id);
    }
}

/// One more on a counter only this connection's task writes (`crst` may
/// store 0 meanwhile): a relaxed load and store, no locked instruction.
#[inline]
fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::ServerConfig;

    async fn alive_becomes(stats: &Stats, count: u64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while stats.alive_connections() != count {
            assert!(
                Instant::now() < deadline,
                "{} alive, not {count}",
                stats.alive_connections()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// ZooKeeper 3.8 counts every connection it holds (getNumAliveConnections:
    /// its factories' connection sets): one that has sent nothing yet, and
    /// the one asking a four-letter word, whose srvr on an idle server says
    /// `Connections: 1` (mntr: `zk_num_alive_connections 1`). A connection
    /// leaves the count before its socket closes, as ZooKeeper's close
    /// removes it first: a client that saw the end no longer counts.
    #[tokio::test]
    async fn every_open_connection_is_counted_until_its_client_sees_it_end() {
        let stats = Arc::new(Stats::default());
        // Still loading: words are answered, sessions closed unanswered.
        let (_loaded, serving) = tokio::sync::watch::channel(None);
        let port = Arc::new(ClientPort::new(
            ServerConfig::default(),
            stats.clone(),
            serving,
            None,
        ));
        let open = |peer: &str| {
            let (client, server) = tokio::io::duplex(4096);
            let port = port.clone();
            let peer: SocketAddr = peer.parse().unwrap();
            tokio::spawn(async move { serve(&port, server, peer).await });
            client
        };
        let mut silent = open("127.0.0.1:40001");
        alive_becomes(&stats, 1).await;
        let mut asker = open("127.0.0.1:40002");
        alive_becomes(&stats, 2).await;
        asker.write_all(b"isro").await.unwrap();
        let mut answer = Vec::new();
        asker.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"null");
        assert_eq!(
            stats.alive_connections(),
            1,
            "the word's connection is gone"
        );
        // A session asked for while loading: closed, and out of the count.
        let mut session = open("127.0.0.1:40003");
        alive_becomes(&stats, 2).await;
        let mut request = Vec::new();
        frame::write_frame(&mut request, |out| {
            out.extend_from_slice(&ConnectRequest::default().to_bytes())
        });
        session.write_all(&request).await.unwrap();
        let mut answer = Vec::new();
        session.read_to_end(&mut answer).await.unwrap();
        assert!(answer.is_empty());
        assert_eq!(stats.alive_connections(), 1);
        silent.shutdown().await.unwrap();
        let mut answer = Vec::new();
        silent.read_to_end(&mut answer).await.unwrap();
        assert_eq!(stats.alive_connections(), 0);
    }
}
