//! One client connection: handshake, then the request pipeline.
//!
//! Ordering rules (ZooKeeper's session FIFO):
//! - writes go to the log at once and may be many in flight;
//! - a read waits until every earlier write of the session has been
//!   applied, and every request after a waiting read waits behind it, so a
//!   read sees exactly the session's earlier writes and none of its later;
//! - a watch event reaches the client before any reply that reflects a
//!   later state: events queued up to a read's zxid are sent before it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_jute::{
    frame, opcode, xid, AuthPacket, ConnectRequest, ConnectResponse, ErrorCode, JuteError,
    KeeperState, Record, ReplyHeader, Request, RequestHeader, Response, WatcherEvent,
};
use keel_tree::{Event, Txn, TxnOp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::fifo::{Completed, Lane, RequestFifo, Stash, PENDING_REQUESTS_MAX};
use crate::node::{CloseReason, Outbound, Route, SyncContext, SESSION_SECRET};
use crate::port::ClientPort;
use crate::profile;
use crate::shared::{
    wall_clock_ms, ConnectionInfo, ConnectionOutlet, Shared, CONNECTION_OUTBOUND_MAX,
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
    #[error("internal: reply out of order")]
    ReplyOutOfOrder,
    #[error("session closed by client")]
    SessionClosedByClient,
    #[error("unknown opcode")]
    UnknownOpcode,
    #[error("server shutting down")]
    Shutdown,
    #[error("client not reading: {CONNECTION_OUTBOUND_MAX} messages queued")]
    OutboundFull,
    /// The server closed it (the session ended or moved, a snapshot
    /// replaced the state, ...).
    #[error("{0}")]
    Server(CloseReason),
}

struct Connection {
    shared: Arc<Shared>,
    id: u64,
    peer: SocketAddr,
    session_id: i64,
    auth: Vec<keel_jute::Id>,
    writer: OwnedWriteHalf,
    inbox: mpsc::Receiver<Outbound>,
    /// Signalled by the apply side when `inbox` is full.
    overflow: Arc<tokio::sync::Notify>,
    /// Messages taken off the inbox early (while serving a read) but newer
    /// than that read: handled next, in order.
    stash: Stash,
    /// The session's request order (`fifo.rs`): what runs, what waits.
    fifo: RequestFifo<(RequestHeader, Vec<u8>)>,
    /// The clock of `fifo`'s timestamps (latency of writes).
    opened: Instant,
    out: Vec<u8>,
    closing: Option<Closed>,
    /// This connection's row in `cons` (set once the session is open).
    info: Option<Arc<ConnectionInfo>>,
}

/// Serves one accepted socket until it closes. Never panics on input.
/// While the node loads its data (`port.serving()` is None) a four-letter
/// word gets ZooKeeper's not-running answer and a session request is
/// closed unanswered, as ZooKeeper's "ZooKeeperServer not running" does.
pub async fn serve(port: &ClientPort, stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let mut buf = Vec::with_capacity(READ_CHUNK_BYTES);
    let first = tokio::time::timeout(
        Duration::from_millis(HANDSHAKE_TIMEOUT_MS),
        read_first_frame(&mut reader, &mut buf, port.config.jute_max_buffer_bytes),
    )
    .await;
    let serving = port.serving();
    let first = match first {
        Ok(Ok(First::Frame(total))) => total,
        Ok(Ok(First::FourLetterWord(word))) => {
            let answer = crate::fourlw::answer(&port.config, serving.as_deref(), &word);
            let mut writer = writer;
            let _ = writer.write_all(answer.as_bytes()).await;
            let _ = writer.shutdown().await;
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
    let mut conn = Connection {
        shared: shared.clone(),
        id,
        peer,
        session_id: 0,
        auth: vec![keel_jute::Id {
            scheme: "ip".into(),
            id: peer.ip().to_string(),
        }],
        writer,
        inbox,
        overflow: Arc::new(tokio::sync::Notify::new()),
        stash: Stash::default(),
        fifo: RequestFifo::new(PENDING_REQUESTS_MAX),
        opened: Instant::now(),
        out: Vec::with_capacity(READ_CHUNK_BYTES),
        closing: None,
        info: None,
    };
    let payload = buf[4..first].to_vec();
    buf.drain(..first);
    let reason = match conn.handshake(&payload, sender).await {
        Ok(()) => conn.run(&mut reader, buf).await,
        Err(reason) => reason,
    };
    conn.finish(reason).await;
}

enum First {
    Frame(usize),
    FourLetterWord(String),
}

async fn read_first_frame(
    reader: &mut tokio::net::tcp::OwnedReadHalf,
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

impl Connection {
    async fn handshake(
        &mut self,
        payload: &[u8],
        sender: mpsc::Sender<Outbound>,
    ) -> Result<(), Closed> {
        let request = ConnectRequest::from_bytes(payload).map_err(|_| Closed::MalformedConnect)?;
        let shared = self.shared.clone();
        let config = &shared.config;
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
        let valid = if request.session_id == 0 {
            self.create_session(timeout_ms, sender).await?
        } else {
            self.resume_session(&request, sender)
        };
        let response = ConnectResponse {
            protocol_version: 0,
            time_out: if valid { timeout_ms as i32 } else { 0 },
            session_id: if valid { self.session_id } else { 0 },
            passwd: if valid {
                keel_session::session_password(self.session_id, SESSION_SECRET).to_vec()
            } else {
                vec![0; 16]
            },
            read_only: false,
        };
        let mut body = response.to_bytes();
        if request.read_only.is_none() {
            body.pop(); // old clients neither send nor expect the readOnly byte
        }
        frame::write_frame(&mut self.out, |out| out.extend_from_slice(&body));
        if !valid {
            return Err(Closed::SessionInvalid);
        }
        let info = Arc::new(ConnectionInfo {
            peer: self.peer,
            session_id: self.session_id,
            timeout_ms,
            received: AtomicU64::new(1),
            sent: AtomicU64::new(0),
            last_zxid: AtomicI64::new(last_zxid),
            outstanding: AtomicU64::new(0),
        });
        self.shared.connections().insert(self.id, info.clone());
        self.info = Some(info);
        self.flush().await
    }

    async fn create_session(
        &mut self,
        timeout_ms: u32,
        sender: mpsc::Sender<Outbound>,
    ) -> Result<bool, Closed> {
        let shared = self.shared.clone();
        self.session_id = shared
            .next_session_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let route = self.route(sender);
        shared.node.register(self.session_id, route);
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
                ..
            })) => Ok(true),
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

    async fn run(
        &mut self,
        reader: &mut tokio::net::tcp::OwnedReadHalf,
        mut buf: Vec<u8>,
    ) -> Closed {
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
            if more {
                continue; // frames already read wait behind OUT_BUFFER_MAX_BYTES
            }
            let accepting = self.fifo.accepting();
            if let Some(message) = self.stash.pop() {
                self.on_outbound(message);
                continue;
            }
            tokio::select! {
                read = reader.read_buf(&mut buf), if accepting => match read {
                    Ok(0) => return Closed::ByClient,
                    Ok(_) => {}
                    Err(_) => return Closed::ReadError,
                },
                message = self.inbox.recv() => match message {
                    Some(message) => self.on_outbound(message),
                    None => return Closed::Shutdown,
                },
                () = self.overflow.notified() => return Closed::OutboundFull,
            }
        }
    }

    /// Handles the complete frames in `buf` until OUT_BUFFER_MAX_BYTES of
    /// replies are ready; true if it stopped there (frames may be left).
    fn take_frames(&mut self, buf: &mut Vec<u8>) -> Result<bool, Closed> {
        let mut consumed = 0;
        let mut full = false;
        while self.closing.is_none() && self.fifo.accepting() {
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
            let payload = buf[consumed + 4..consumed + total].to_vec();
            consumed += total;
            self.on_frame(payload)?;
        }
        buf.drain(..consumed);
        Ok(full)
    }

    fn on_frame(&mut self, payload: Vec<u8>) -> Result<(), Closed> {
        let header = RequestHeader::from_bytes(&payload[..payload.len().min(8)])
            .map_err(|_| Closed::TruncatedHeader)?;
        let op = profile::Op::of_opcode(header.op_type);
        let _op = profile::enter(op);
        self.shared.stats.count_received(op);
        self.shared
            .stats
            .packets_received
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.shared.node.touch(self.session_id);
        if self.shared.raft().status.cluster {
            self.shared.touched().insert(self.session_id);
        }
        let body = payload[8..].to_vec();
        let lane = if pipelinable(header.op_type, &body) {
            Lane::Pipelined
        } else {
            Lane::Alone
        };
        if let Some((header, body)) = self.fifo.arrive((header, body), lane) {
            self.execute(header, body)?;
        }
        self.run_waiting();
        Ok(())
    }

    /// Runs a request whose turn has come: writes go to the log, the rest
    /// is answered now.
    fn execute(&mut self, header: RequestHeader, body: Vec<u8>) -> Result<(), Closed> {
        if header.op_type == opcode::PING {
            let zxid = self.last_zxid();
            self.reply(xid::PING, zxid, Ok(Response::Empty));
            return Ok(());
        }
        if header.op_type == opcode::AUTH {
            return self.authenticate(header.xid, &body);
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
                self.reply(
                    header.xid,
                    self.last_zxid(),
                    Err(ErrorCode::MarshallingError),
                );
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
        let zxid = self.last_zxid();
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
            return Ok(());
        }
        let change = match crate::reconfig::parse_request(request) {
            Ok(change) => change,
            Err(reason) => {
                tracing::info!(peer = %self.peer, %reason, "reconfig: bad arguments");
                self.reply(xid, zxid, Err(ErrorCode::BadArguments));
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
    /// identities; events queued up to the zxid it read at go out first.
    fn read(&mut self, request_xid: i32, op_code: i32, request: Request) {
        let started = Instant::now();
        let (result, zxid) = match &request {
            Request::WhoAmI => (
                Ok(Response::WhoAmI(crate::fourlw::client_infos(&self.auth))),
                self.last_zxid(),
            ),
            Request::Sasl(_) => (Err(ErrorCode::Unimplemented), self.last_zxid()),
            _ => {
                let read = self.shared.node.read(self.session_id, &self.auth, &request);
                self.send_events_up_to(read.zxid);
                for event in &read.fired {
                    self.event(event);
                }
                (read.result, read.zxid)
            }
        };
        self.send_events_up_to(zxid);
        self.reply(request_xid, zxid, result);
        self.shared
            .stats
            .record_request(op_code, started.elapsed().as_micros() as u64);
    }

    /// addauth: a failure answers AuthFailed and closes, as ZooKeeper does.
    fn authenticate(&mut self, request_xid: i32, body: &[u8]) -> Result<(), Closed> {
        let zxid = self.last_zxid();
        let packet = match AuthPacket::from_bytes(body) {
            Ok(packet) => packet,
            Err(_) => {
                self.reply(request_xid, zxid, Err(ErrorCode::MarshallingError));
                return Ok(());
            }
        };
        let authenticated = if credentials_null(body, &packet) {
            Err(ErrorCode::AuthFailed)
        } else {
            keel_tree::acl::authenticate(
                &packet.scheme,
                &packet.auth,
                self.shared.config.super_digest.as_deref(),
            )
        };
        match authenticated {
            Ok(ids) => {
                for id in ids {
                    if !self.auth.contains(&id) && self.auth.len() < keel_tree::txn::AUTH_IDS_MAX {
                        self.auth.push(id);
                    }
                }
                // ZooKeeper answers auth with zxid 0, echoing the xid.
                self.reply(request_xid, 0, Ok(Response::Empty));
            }
            Err(code) => {
                tracing::info!(peer = %self.peer, scheme = packet.scheme, "authentication failed; closing");
                self.reply(request_xid, 0, Err(code));
                self.closing = Some(Closed::AuthFailed);
            }
        }
        Ok(())
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
                match self.fifo.complete(reply_xid) {
                    Ok(Completed::Done { since_us }) => {
                        // A write's latency: proposal to applied reply.
                        let now_us = self.opened.elapsed().as_micros() as u64;
                        self.shared
                            .stats
                            .record_request(op_code, now_us.saturating_sub(since_us));
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
                }
                // ZooKeeper 3.8.0 never answers a check sent outside a multi
                // (serializing its null Stat fails); Keel matches that.
                if op_code != opcode::CHECK {
                    self.reply(reply_xid, zxid, result);
                }
                if op_code == opcode::CLOSE_SESSION {
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

    /// Sends events already queued for this session up to `zxid`, keeping
    /// newer messages for later, in order.
    fn send_events_up_to(&mut self, zxid: i64) {
        while let Ok(message) = self.inbox.try_recv() {
            self.stash.push(message);
        }
        for (_, event) in self.stash.events_up_to(zxid) {
            self.event(&event);
        }
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
        if let Some(info) = &self.info {
            info.received.fetch_add(1, Ordering::Relaxed);
            info.last_zxid.store(zxid, Ordering::Relaxed);
        }
    }

    fn count_sent(&mut self) {
        self.shared
            .stats
            .packets_sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(info) = &self.info {
            info.sent.fetch_add(1, Ordering::Relaxed);
        }
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
        let overflow = self.overflow.clone();
        let result = tokio::select! {
            written = self.writer.write_all(&self.out) => written.map_err(|_| Closed::WriteError),
            () = overflow.notified() => Err(Closed::OutboundFull),
        };
        self.out.clear();
        result
    }

    async fn finish(mut self, reason: Closed) {
        let _ = self.flush().await;
        let _ = self.writer.shutdown().await;
        if reason == Closed::OutboundFull {
            tracing::warn!(peer = %self.peer, session = format_args!("{:#x}", self.session_id), %reason, "connection closed");
        } else {
            tracing::debug!(peer = %self.peer, session = format_args!("{:#x}", self.session_id), %reason, "connection closed");
        }
        let shared = self.shared.clone();
        shared.connections().remove(&self.id);
        if self.session_id == 0 {
            return;
        }
        shared.node.disconnect(self.session_id, self.id);
    }
}

/// Credentials sent as a null buffer (length -1; kazoo sends "" so), which
/// the record decodes as empty: ZooKeeper's digest provider fails on them
/// (`new String(null)` throws) and answers AuthFailed, while a real empty
/// buffer authenticates as the digest of "".
fn credentials_null(body: &[u8], packet: &AuthPacket) -> bool {
    // auth_type (i32), scheme (i32 length + bytes), then the credentials.
    let at = 8 + packet.scheme.len();
    body.get(at..at + 4) == Some(&keel_jute::codec::NULL_LENGTH.to_be_bytes()[..])
}

/// A write that may join the writes in flight: it must decode, or its
/// error reply would overtake their replies. Not sync: its ReadIndex is
/// answered outside the log's order, so it flies alone (`fifo.rs`).
fn pipelinable(op: i32, body: &[u8]) -> bool {
    is_write_op(op) && op != opcode::SYNC && Request::decode(op, body).is_ok()
}

/// Requests that go through the log (in session order with the rest).
pub(crate) fn is_write_op(op: i32) -> bool {
    matches!(
        op,
        opcode::CREATE
            | opcode::CREATE2
            | opcode::CREATE_CONTAINER
            | opcode::CREATE_TTL
            | opcode::DELETE
            | opcode::DELETE_CONTAINER
            | opcode::SET_DATA
            | opcode::SET_ACL
            | opcode::CHECK
            | opcode::MULTI
            | opcode::SYNC
            | opcode::CLOSE_SESSION
    )
}
