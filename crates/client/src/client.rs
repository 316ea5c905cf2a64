//! The asynchronous ZooKeeper client.
//!
//! One TCP connection per [`Client`]. Callers encode their request, hand it
//! to a writer task through a bounded queue and wait on a oneshot channel;
//! the writer assigns the xid, records the waiter and writes (batching
//! whatever else is queued); a reader task decodes replies and completes
//! waiters in order. ZooKeeper answers requests of one session in the order
//! it received them, so the oldest outstanding waiter is always the one a
//! reply belongs to; the reader checks the xid and treats a mismatch as a
//! broken connection.
//!
//! Queues and their bounds:
//! - requests waiting for the writer: bounded mpsc, [`REQUEST_QUEUE_CAPACITY`];
//! - requests written but not yet answered: bounded by a semaphore of
//!   [`MAX_IN_FLIGHT`] permits, taken before a request is queued and
//!   released when its reply (or the connection's failure) arrives;
//! - watch events: unbounded (the API hands out an `UnboundedReceiver`);
//!   only server notifications and one final `Disconnected` event flow
//!   through it, so its growth is bounded by the watches the caller set.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

use crate::error::ClientError;
use crate::proto::*;

/// Port used when an address in the connect string has none.
pub const DEFAULT_PORT: u16 = 2181;
/// Time allowed for the TCP connect plus the session handshake, per address.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for an ordinary request (everything not listed below).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Time allowed for `sync` (zkCli's `SyncCommand.SYNC_TIMEOUT`).
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// Time allowed for the reply to an auth packet (xid -4).
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for the reply to `closeSession`.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for a ping sent through [`Client::request`].
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// Capacity of the queue between callers and the writer task.
pub const REQUEST_QUEUE_CAPACITY: usize = 1024;
/// Most requests that may await a reply at once; further callers wait.
pub const MAX_IN_FLIGHT: usize = 16 * 1024;
/// Largest reply frame accepted. ZooKeeper's client default is
/// `jute.maxbuffer` = 0xfffff; a larger limit costs nothing here and lets
/// tests read a full 1 MiB znode plus its reply header.
pub const MAX_REPLY_FRAME_BYTES: usize = 4 * 1024 * 1024;
/// The writer gathers queued requests into one write up to this many bytes.
pub const WRITE_BATCH_BYTES: usize = 64 * 1024;

const PROTOCOL_VERSION: i32 = 0;
const PASSWORD_LEN: usize = 16;

/// A watch notification (or a session state change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedEvent {
    /// What happened.
    pub event_type: EventType,
    /// The session state at the time.
    pub state: KeeperState,
    /// The znode concerned; empty for session events.
    pub path: String,
}

impl fmt::Display for WatchedEvent {
    /// The text of Java's `WatchedEvent.toString()` (as zkCli prints it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() && self.event_type == EventType::None {
            "null"
        } else {
            &self.path
        };
        write!(
            f,
            "WatchedEvent state:{} type:{} path:{}",
            self.state.name(),
            self.event_type.name(),
            path
        )
    }
}

/// A decoded reply: its header and the raw body that followed it.
struct Reply {
    header: ReplyHeader,
    body: Vec<u8>,
}

type ReplySender = oneshot::Sender<Result<Reply, ClientError>>;

/// Someone waiting for a reply (`tx` is `None` for the writer's own pings).
struct Waiter {
    xid: i32,
    tx: Option<ReplySender>,
    _permit: Option<OwnedSemaphorePermit>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Broken {
    ConnectionLoss,
    Closed,
}

impl Broken {
    fn error(self) -> ClientError {
        ClientError::ConnectionLoss
    }
}

#[derive(Default)]
struct ConnState {
    next_xid: i32,
    /// Requests with ordinary (positive) xids, oldest first.
    pending: VecDeque<Waiter>,
    /// Replies to these arrive with the fixed xids -2, -4 and -8.
    pings: VecDeque<Waiter>,
    auths: VecDeque<Waiter>,
    set_watches: VecDeque<Waiter>,
    broken: Option<Broken>,
    /// `close()` is under way: the server's hang-up is expected.
    closing: bool,
    last_zxid: i64,
}

impl ConnState {
    fn queue_for(&mut self, xid: i32) -> &mut VecDeque<Waiter> {
        match xid {
            xid::PING => &mut self.pings,
            xid::AUTH => &mut self.auths,
            xid::SET_WATCHES => &mut self.set_watches,
            _ => &mut self.pending,
        }
    }

    fn take_xid(&mut self) -> i32 {
        let x = self.next_xid;
        self.next_xid = if x == i32::MAX { 1 } else { x + 1 };
        x
    }
}

/// State shared by the handle and both connection tasks.
struct Shared {
    state: Mutex<ConnState>,
    events: mpsc::UnboundedSender<WatchedEvent>,
    shutdown: watch::Sender<bool>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ConnState> {
        // A panic while holding this lock cannot leave the queues in a state
        // worse than "some waiter is gone", so poisoning is ignored.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the connection dead, fails every waiter and stops both tasks.
    fn fail_all(&self, why: Broken) {
        let (drained, closing) = {
            let mut st = self.lock();
            if st.broken.is_some() {
                return;
            }
            st.broken = Some(why);
            let mut all: Vec<Waiter> = st.pending.drain(..).collect();
            all.extend(st.pings.drain(..));
            all.extend(st.auths.drain(..));
            all.extend(st.set_watches.drain(..));
            (all, st.closing)
        };
        for w in drained {
            if let Some(tx) = w.tx {
                let _ = tx.send(Err(why.error()));
            }
        }
        if why == Broken::ConnectionLoss && !closing {
            let _ = self.events.send(WatchedEvent {
                event_type: EventType::None,
                state: KeeperState::Disconnected,
                path: String::new(),
            });
        }
        self.shutdown.send_replace(true);
    }

    /// Records `out`'s waiter and appends its frame (with the xid patched
    /// in) to `buf`. Called by the writer only, so xids are assigned in
    /// write order.
    fn enqueue(&self, out: Outgoing, buf: &mut Vec<u8>) {
        let Outgoing {
            fixed_xid,
            mut frame,
            tx,
            permit,
        } = out;
        let mut st = self.lock();
        if let Some(b) = st.broken {
            drop(st);
            let _ = tx.send(Err(b.error()));
            return;
        }
        let xid = match fixed_xid {
            Some(x) => x,
            None => {
                let x = st.take_xid();
                frame[4..8].copy_from_slice(&x.to_be_bytes());
                x
            }
        };
        st.queue_for(xid).push_back(Waiter {
            xid,
            tx: Some(tx),
            _permit: Some(permit),
        });
        drop(st);
        buf.extend_from_slice(&frame);
    }
}

/// A request on its way to the writer: a complete frame whose xid field
/// (bytes 4..8) the writer fills in unless `fixed_xid` is set.
struct Outgoing {
    fixed_xid: Option<i32>,
    frame: Vec<u8>,
    tx: ReplySender,
    permit: OwnedSemaphorePermit,
}

struct Inner {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Outgoing>,
    in_flight: Arc<Semaphore>,
    events_rx: Mutex<Option<mpsc::UnboundedReceiver<WatchedEvent>>>,
    session_id: i64,
    password: Vec<u8>,
    timeout_ms: u32,
    server: String,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: stop both tasks (the socket closes with
        // them; the server expires the session after its timeout).
        self.shared.shutdown.send_replace(true);
    }
}

/// A connection to a ZooKeeper (or Keel) server with one session.
///
/// Cheap to clone; clones share the connection. All methods take `&self`
/// and may be called concurrently; requests are pipelined.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.inner.server)
            .field("session_id", &format_args!("0x{:x}", self.inner.session_id))
            .field("timeout_ms", &self.inner.timeout_ms)
            .finish()
    }
}

/// Splits "host:port[,host:port...]" into socket address strings.
pub(crate) fn parse_connect_string(addrs: &str) -> Result<Vec<String>, ClientError> {
    let mut out = Vec::new();
    for part in addrs.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        if part.contains('/') {
            return Err(ClientError::InvalidAddress(format!(
                "{addrs}: a chroot suffix is not supported"
            )));
        }
        let has_port = if let Some(rest) = part.strip_prefix('[') {
            // [v6]:port
            rest.split_once(']')
                .map(|(_, tail)| tail.starts_with(':'))
                .unwrap_or(false)
        } else {
            part.matches(':').count() == 1
        };
        if has_port {
            let port = part.rsplit_once(':').map(|(_, p)| p).unwrap_or("");
            if port.parse::<u16>().is_err() {
                return Err(ClientError::InvalidAddress(format!("{part}: bad port")));
            }
            out.push(part.to_string());
        } else if part.contains(':') && !part.starts_with('[') {
            // A bare IPv6 address.
            out.push(format!("[{part}]:{DEFAULT_PORT}"));
        } else {
            out.push(format!("{part}:{DEFAULT_PORT}"));
        }
    }
    if out.is_empty() {
        return Err(ClientError::InvalidAddress(format!(
            "{addrs:?}: no address"
        )));
    }
    Ok(out)
}

/// A connection to a server: plain TCP, or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<crate::tls::SendStream>>),
}

/// Opens the socket (and TLS over it when `tls` is given) and runs the
/// ConnectRequest/ConnectResponse handshake. Returns the stream, the
/// response and any bytes read past it.
async fn handshake(
    addr: &str,
    session_timeout_ms: u32,
    tls: Option<&crate::tls::ClientTls>,
) -> Result<(Stream, ConnectResponse, Vec<u8>), ClientError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    match tls {
        None => {
            let mut stream = stream;
            let (response, rest) = exchange(&mut stream, session_timeout_ms).await?;
            Ok((Stream::Plain(stream), response, rest))
        }
        Some(tls) => {
            let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
            let mut stream = tls.connect(host, stream).await?;
            let (response, rest) = exchange(&mut stream, session_timeout_ms).await?;
            Ok((Stream::Tls(Box::new(stream)), response, rest))
        }
    }
}

/// The session handshake on an open stream.
async fn exchange(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    session_timeout_ms: u32,
) -> Result<(ConnectResponse, Vec<u8>), ClientError> {
    let req = ConnectRequest {
        protocol_version: PROTOCOL_VERSION,
        last_zxid_seen: 0,
        time_out: i32::try_from(session_timeout_ms).unwrap_or(i32::MAX),
        session_id: 0,
        passwd: vec![0; PASSWORD_LEN],
        read_only: Some(false),
    };
    let mut buf = Vec::with_capacity(64);
    write_frame(&mut buf, |b| req.write(b));
    stream.write_all(&buf).await?;
    stream.flush().await?;

    let mut rbuf: Vec<u8> = Vec::with_capacity(256);
    loop {
        if let Some(n) = check_frame(&rbuf, MAX_REPLY_FRAME_BYTES)? {
            let resp = ConnectResponse::from_bytes(&rbuf[4..n])?;
            if resp.time_out <= 0 {
                return Err(ClientError::SessionExpired);
            }
            let rest = rbuf[n..].to_vec();
            return Ok((resp, rest));
        }
        if stream.read_buf(&mut rbuf).await? == 0 {
            return Err(ClientError::ConnectionLoss);
        }
    }
}

fn decode_body(op: i32, body: &[u8]) -> Result<Response, ClientError> {
    if body.is_empty() {
        return Ok(Response::Empty);
    }
    Ok(Response::decode(op, body)?)
}

fn unexpected(what: &str, resp: Response) -> ClientError {
    ClientError::Protocol(format!("unexpected response to {what}: {resp:?}"))
}

fn fixed_xid_for(req: &Request) -> Option<i32> {
    match req {
        Request::Ping => Some(xid::PING),
        Request::Auth(_) => Some(xid::AUTH),
        Request::SetWatches(_) | Request::SetWatches2(_) => Some(xid::SET_WATCHES),
        _ => None,
    }
}

fn timeout_for(req: &Request) -> Duration {
    match req {
        Request::Ping => PING_TIMEOUT,
        Request::Auth(_) => AUTH_TIMEOUT,
        Request::Sync(_) => SYNC_TIMEOUT,
        Request::CloseSession => CLOSE_TIMEOUT,
        _ => REQUEST_TIMEOUT,
    }
}

impl Client {
    /// Connects to the first server in `addrs` ("host:port[,host:port...]")
    /// that accepts a new session, trying them in order.
    pub async fn connect(addrs: &str, session_timeout_ms: u32) -> Result<Client, ClientError> {
        Client::connect_with(addrs, session_timeout_ms, None).await
    }

    /// `connect`, over TLS when `tls` is given (a server's secure client
    /// port: every address of `addrs` must be one).
    pub async fn connect_with(
        addrs: &str,
        session_timeout_ms: u32,
        tls: Option<&crate::tls::ClientTls>,
    ) -> Result<Client, ClientError> {
        let list = parse_connect_string(addrs)?;
        let mut last = ClientError::ConnectionLoss;
        for addr in list {
            let attempt = handshake(&addr, session_timeout_ms, tls);
            match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
                Ok(Ok((stream, resp, rest))) => return Ok(Client::start(addr, stream, resp, rest)),
                Ok(Err(e)) => {
                    tracing::debug!(%addr, error = %e, "connect failed");
                    last = e;
                }
                Err(_) => {
                    tracing::debug!(%addr, "connect timed out");
                    last = ClientError::Timeout;
                }
            }
        }
        Err(last)
    }

    fn start(server: String, stream: Stream, resp: ConnectResponse, rest: Vec<u8>) -> Client {
        let timeout_ms = u32::try_from(resp.time_out).unwrap_or(1).max(1);
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (shutdown, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            state: Mutex::new(ConnState {
                next_xid: 1,
                ..ConnState::default()
            }),
            events: events_tx,
            shutdown,
        });
        let (tx, rx) = mpsc::channel(REQUEST_QUEUE_CAPACITY);
        let session = Duration::from_millis(u64::from(timeout_ms));
        let ping_every = (session / 3).max(Duration::from_millis(10));
        let read_timeout = (session * 2 / 3).max(Duration::from_millis(20));
        match stream {
            Stream::Plain(stream) => {
                let (rd, wr) = stream.into_split();
                tokio::spawn(writer_task(wr, rx, shared.clone(), ping_every));
                tokio::spawn(reader_task(rd, rest, shared.clone(), read_timeout));
            }
            Stream::Tls(stream) => {
                let (rd, wr) = tokio::io::split(*stream);
                tokio::spawn(writer_task(wr, rx, shared.clone(), ping_every));
                tokio::spawn(reader_task(rd, rest, shared.clone(), read_timeout));
            }
        }
        tracing::debug!(%server, session_id = resp.session_id, timeout_ms, "session established");
        Client {
            inner: Arc::new(Inner {
                shared,
                tx,
                in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
                events_rx: Mutex::new(Some(events_rx)),
                session_id: resp.session_id,
                password: resp.passwd,
                timeout_ms,
                server,
            }),
        }
    }

    /// The session id the server assigned.
    pub fn session_id(&self) -> i64 {
        self.inner.session_id
    }

    /// The session password the server assigned.
    pub fn session_password(&self) -> &[u8] {
        &self.inner.password
    }

    /// The session timeout the server granted, in milliseconds.
    pub fn negotiated_timeout_ms(&self) -> u32 {
        self.inner.timeout_ms
    }

    /// The address ("host:port") of the server this client is connected to.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The highest zxid seen in a reply header so far.
    pub fn last_zxid(&self) -> i64 {
        self.inner.shared.lock().last_zxid
    }

    /// Whether the connection is still up (not lost and not closed).
    pub fn is_connected(&self) -> bool {
        self.inner.shared.lock().broken.is_none()
    }

    /// The receiver of watch notifications; `Some` only on the first call
    /// (shared by all clones). A `Disconnected` event is sent if the
    /// connection is lost (not after `close()`).
    pub fn take_events(&self) -> Option<mpsc::UnboundedReceiver<WatchedEvent>> {
        self.inner
            .events_rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    async fn submit(&self, req: &Request, timeout: Duration) -> Result<Reply, ClientError> {
        let fixed = fixed_xid_for(req);
        let op = req.op_code();
        let mut frame = Vec::with_capacity(64);
        write_frame(&mut frame, |b| {
            RequestHeader {
                xid: fixed.unwrap_or(0),
                op_type: op,
            }
            .write(b);
            req.encode(b);
        });
        let inner = &self.inner;
        let fut = async {
            let permit = inner
                .in_flight
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| ClientError::ConnectionLoss)?;
            let (tx, rx) = oneshot::channel();
            inner
                .tx
                .send(Outgoing {
                    fixed_xid: fixed,
                    frame,
                    tx,
                    permit,
                })
                .await
                .map_err(|_| ClientError::ConnectionLoss)?;
            rx.await.map_err(|_| ClientError::ConnectionLoss)?
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| ClientError::Timeout)?
    }

    /// Sends any request and returns the raw reply header and decoded body.
    /// A non-zero `header.err` is *not* an error here (the response is then
    /// `Response::Empty`); only transport failures are.
    pub async fn request(&self, req: Request) -> Result<(ReplyHeader, Response), ClientError> {
        let op = req.op_code();
        let reply = self.submit(&req, timeout_for(&req)).await?;
        let resp = if reply.header.err != 0 {
            Response::Empty
        } else {
            decode_body(op, &reply.body)?
        };
        Ok((reply.header, resp))
    }

    /// Sends `req`, maps a non-zero reply error to `ClientError`.
    async fn call(&self, req: Request) -> Result<Response, ClientError> {
        let op = req.op_code();
        let reply = self.submit(&req, timeout_for(&req)).await?;
        if reply.header.err != 0 {
            return Err(ClientError::from_code(reply.header.err));
        }
        decode_body(op, &reply.body)
    }

    fn create_request(path: &str, data: &[u8], acl: &[Acl], mode: CreateMode) -> CreateRequest {
        CreateRequest {
            path: path.to_string(),
            data: Some(data.to_vec()),
            acl: acl.to_vec(),
            flags: mode.flags(),
        }
    }

    /// Creates a znode; returns its actual path (with the sequence suffix).
    /// `CreateMode::Container` uses the createContainer op; TTL modes need
    /// [`Client::create_ttl`].
    pub async fn create(
        &self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
        mode: CreateMode,
    ) -> Result<String, ClientError> {
        let cr = Self::create_request(path, data, acl, mode);
        let req = if mode.is_container() {
            Request::CreateContainer(cr)
        } else {
            Request::Create(cr)
        };
        match self.call(req).await? {
            Response::Create(p) | Response::Create2(p, _) => Ok(p),
            other => Err(unexpected("create", other)),
        }
    }

    /// Creates a znode with a time-to-live (createTTL op); `mode` should be
    /// `PersistentWithTtl` or `PersistentSequentialWithTtl`.
    pub async fn create_ttl(
        &self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
        mode: CreateMode,
        ttl_ms: i64,
    ) -> Result<String, ClientError> {
        Ok(self.create_ttl2(path, data, acl, mode, ttl_ms).await?.0)
    }

    /// Like [`Client::create_ttl`], also returning the new znode's Stat.
    pub async fn create_ttl2(
        &self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
        mode: CreateMode,
        ttl_ms: i64,
    ) -> Result<(String, Stat), ClientError> {
        let req = Request::CreateTtl(CreateTtlRequest {
            path: path.to_string(),
            data: Some(data.to_vec()),
            acl: acl.to_vec(),
            flags: mode.flags(),
            ttl: ttl_ms,
        });
        match self.call(req).await? {
            Response::Create2(p, s) => Ok((p, s)),
            other => Err(unexpected("createTTL", other)),
        }
    }

    /// Creates a znode (create2 op, or createContainer for containers) and
    /// returns its path and Stat.
    pub async fn create2(
        &self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
        mode: CreateMode,
    ) -> Result<(String, Stat), ClientError> {
        let cr = Self::create_request(path, data, acl, mode);
        let req = if mode.is_container() {
            Request::CreateContainer(cr)
        } else {
            Request::Create2(cr)
        };
        match self.call(req).await? {
            Response::Create2(p, s) => Ok((p, s)),
            other => Err(unexpected("create2", other)),
        }
    }

    /// Deletes a znode; `version` -1 matches any version.
    pub async fn delete(&self, path: &str, version: i32) -> Result<(), ClientError> {
        self.call(Request::Delete(DeleteRequest {
            path: path.to_string(),
            version,
        }))
        .await?;
        Ok(())
    }

    /// The znode's Stat, or `None` if it does not exist. With `watch`, a
    /// data watch (or, for a missing node, an exists watch) is left.
    pub async fn exists(&self, path: &str, watch: bool) -> Result<Option<Stat>, ClientError> {
        let req = Request::Exists(ExistsRequest {
            path: path.to_string(),
            watch,
        });
        match self.call(req).await {
            Ok(Response::Stat(s)) => Ok(Some(s)),
            Ok(other) => Err(unexpected("exists", other)),
            Err(ClientError::Zk(ErrorCode::NoNode)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The znode's data (`None` if it was created with null data) and Stat.
    pub async fn get_data(
        &self,
        path: &str,
        watch: bool,
    ) -> Result<(Option<Vec<u8>>, Stat), ClientError> {
        let req = Request::GetData(GetDataRequest {
            path: path.to_string(),
            watch,
        });
        match self.call(req).await? {
            Response::GetData(d, s) => Ok((d, s)),
            other => Err(unexpected("getData", other)),
        }
    }

    /// Replaces the znode's data; `version` -1 matches any version.
    pub async fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: i32,
    ) -> Result<Stat, ClientError> {
        let req = Request::SetData(SetDataRequest {
            path: path.to_string(),
            data: Some(data.to_vec()),
            version,
        });
        match self.call(req).await? {
            Response::Stat(s) => Ok(s),
            other => Err(unexpected("setData", other)),
        }
    }

    /// The znode's ACL and Stat.
    pub async fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat), ClientError> {
        let req = Request::GetAcl(GetAclRequest {
            path: path.to_string(),
        });
        match self.call(req).await? {
            Response::GetAcl(a, s) => Ok((a, s)),
            other => Err(unexpected("getACL", other)),
        }
    }

    /// Replaces the znode's ACL; `version` (the ACL version) -1 matches any.
    pub async fn set_acl(
        &self,
        path: &str,
        acl: &[Acl],
        version: i32,
    ) -> Result<Stat, ClientError> {
        let req = Request::SetAcl(SetAclRequest {
            path: path.to_string(),
            acl: acl.to_vec(),
            version,
        });
        match self.call(req).await? {
            Response::Stat(s) => Ok(s),
            other => Err(unexpected("setACL", other)),
        }
    }

    /// The znode's children names (unsorted, as the server sends them).
    pub async fn get_children(&self, path: &str, watch: bool) -> Result<Vec<String>, ClientError> {
        let req = Request::GetChildren(GetChildrenRequest {
            path: path.to_string(),
            watch,
        });
        match self.call(req).await? {
            Response::GetChildren(c) => Ok(c),
            Response::GetChildren2(c, _) => Ok(c),
            other => Err(unexpected("getChildren", other)),
        }
    }

    /// The znode's children names and its Stat.
    pub async fn get_children2(
        &self,
        path: &str,
        watch: bool,
    ) -> Result<(Vec<String>, Stat), ClientError> {
        let req = Request::GetChildren2(GetChildren2Request {
            path: path.to_string(),
            watch,
        });
        match self.call(req).await? {
            Response::GetChildren2(c, s) => Ok((c, s)),
            other => Err(unexpected("getChildren2", other)),
        }
    }

    /// The number of descendants of the znode (not counting itself).
    pub async fn get_all_children_number(&self, path: &str) -> Result<i32, ClientError> {
        let req = Request::GetAllChildrenNumber(GetAllChildrenNumberRequest {
            path: path.to_string(),
        });
        match self.call(req).await? {
            Response::GetAllChildrenNumber(n) => Ok(n),
            other => Err(unexpected("getAllChildrenNumber", other)),
        }
    }

    /// This session's ephemeral znodes whose path starts with `prefix`
    /// ("/" for all).
    pub async fn get_ephemerals(&self, prefix: &str) -> Result<Vec<String>, ClientError> {
        let req = Request::GetEphemerals(GetEphemeralsRequest {
            prefix_path: prefix.to_string(),
        });
        match self.call(req).await? {
            Response::GetEphemerals(e) => Ok(e),
            Response::Empty => Ok(Vec::new()),
            other => Err(unexpected("getEphemerals", other)),
        }
    }

    /// Waits until the server has applied every write it had committed
    /// when the sync arrived.
    pub async fn sync(&self, path: &str) -> Result<(), ClientError> {
        let req = Request::Sync(SyncRequest {
            path: path.to_string(),
        });
        self.call(req).await?;
        Ok(())
    }

    /// Runs `ops` atomically. A failed transaction is *not* an `Err`: the
    /// results then hold `MultiResult::Error` entries (see
    /// [`multi_error`]); `Err` means the reply header itself carried an
    /// error or the transport failed.
    pub async fn multi(&self, ops: Vec<MultiOp>) -> Result<Vec<MultiResult>, ClientError> {
        match self.call(Request::Multi(ops)).await? {
            Response::Multi(r) => Ok(r),
            Response::Empty => Ok(Vec::new()),
            other => Err(unexpected("multi", other)),
        }
    }

    /// Runs the read ops (`GetData`, `GetChildren`) of `ops` in one request;
    /// each result is independent (errors appear as `MultiResult::Error`).
    pub async fn multi_read(&self, ops: Vec<MultiOp>) -> Result<Vec<MultiResult>, ClientError> {
        match self.call(Request::MultiRead(ops)).await? {
            Response::Multi(r) => Ok(r),
            Response::Empty => Ok(Vec::new()),
            other => Err(unexpected("multiRead", other)),
        }
    }

    /// Adds authentication (`scheme` "digest" with `auth` "user:password",
    /// or "ip", ...). A rejected auth gives `ClientError::Zk(AuthFailed)`;
    /// ZooKeeper then closes the connection.
    pub async fn add_auth(&self, scheme: &str, auth: &[u8]) -> Result<(), ClientError> {
        let req = Request::Auth(AuthPacket {
            auth_type: 0,
            scheme: scheme.to_string(),
            auth: auth.to_vec(),
        });
        let reply = self.submit(&req, AUTH_TIMEOUT).await?;
        if reply.header.err != 0 {
            return Err(ClientError::Zk(ErrorCode::AuthFailed));
        }
        Ok(())
    }

    /// Adds a persistent (optionally recursive) watch on `path`.
    pub async fn add_watch(&self, path: &str, mode: AddWatchMode) -> Result<(), ClientError> {
        let req = Request::AddWatch(AddWatchRequest {
            path: path.to_string(),
            mode: mode.code(),
        });
        self.call(req).await?;
        Ok(())
    }

    /// Removes this session's watches of `watcher_type` on `path`
    /// (`NoWatcher` if there is none).
    pub async fn remove_watches(
        &self,
        path: &str,
        watcher_type: WatcherType,
    ) -> Result<(), ClientError> {
        let req = Request::RemoveWatches(RemoveWatchesRequest {
            path: path.to_string(),
            watcher_type: watcher_type.code(),
        });
        self.call(req).await?;
        Ok(())
    }

    /// The identities this session is authenticated as.
    pub async fn who_am_i(&self) -> Result<Vec<ClientInfo>, ClientError> {
        match self.call(Request::WhoAmI).await? {
            Response::WhoAmI(v) => Ok(v),
            other => Err(unexpected("whoAmI", other)),
        }
    }

    /// Closes the session (closeSession, xid assigned as usual), waits for
    /// the reply and shuts the connection down. Closing an already dead
    /// connection is a no-op.
    pub async fn close(&self) -> Result<(), ClientError> {
        {
            let mut st = self.inner.shared.lock();
            if st.broken.is_some() {
                return Ok(());
            }
            st.closing = true;
        }
        let result = self.call(Request::CloseSession).await;
        self.inner.shared.fail_all(Broken::Closed);
        result.map(|_| ())
    }
}

/// If a multi's results report a failure, the code of the op that failed
/// (ZooKeeper marks the other ops `RuntimeInconsistency` or `Ok`).
pub fn multi_error(results: &[MultiResult]) -> Option<i32> {
    let codes = results.iter().filter_map(|r| match r {
        MultiResult::Error(e) if *e != 0 => Some(*e),
        _ => None,
    });
    let mut first = None;
    for c in codes {
        if c != ErrorCode::RuntimeInconsistency.code() {
            return Some(c);
        }
        first.get_or_insert(c);
    }
    first
}

async fn writer_task(
    mut wr: impl AsyncWrite + Unpin,
    mut rx: mpsc::Receiver<Outgoing>,
    shared: Arc<Shared>,
    ping_every: Duration,
) {
    let mut shutdown = shared.shutdown.subscribe();
    // A ping goes out when nothing was written for `ping_every`: the gap
    // between two frames we send stays below a third of the session timeout,
    // as in ZooKeeper's own client (a fixed ticker could leave two intervals).
    let mut last_write = tokio::time::Instant::now();
    let mut buf: Vec<u8> = Vec::with_capacity(WRITE_BATCH_BYTES);
    let mut ping = Vec::with_capacity(12);
    write_frame(&mut ping, |b| {
        RequestHeader {
            xid: xid::PING,
            op_type: opcode::PING,
        }
        .write(b)
    });
    enum Step {
        Stop,
        Send(Outgoing),
        Ping,
    }
    // Both live across turns: a turn neither creates a timer nor
    // subscribes to the shutdown again. The ping timer is moved only when
    // it fires early (a write came since it was set), not on every write.
    let stop = shutdown.wait_for(|s| *s);
    let ping_timer = tokio::time::sleep_until(last_write + ping_every);
    tokio::pin!(stop, ping_timer);
    loop {
        let step = tokio::select! {
            biased;
            _ = &mut stop => Step::Stop,
            msg = rx.recv() => match msg {
                Some(m) => Step::Send(m),
                None => Step::Stop,
            },
            () = &mut ping_timer => {
                if !timer_due(ping_timer.as_mut(), last_write + ping_every) {
                    continue;
                }
                Step::Ping
            }
        };
        buf.clear();
        match step {
            Step::Stop => break,
            Step::Send(first) => {
                shared.enqueue(first, &mut buf);
                while buf.len() < WRITE_BATCH_BYTES {
                    match rx.try_recv() {
                        Ok(m) => shared.enqueue(m, &mut buf),
                        Err(_) => break,
                    }
                }
            }
            Step::Ping => {
                let mut st = shared.lock();
                if st.broken.is_none() {
                    st.pings.push_back(Waiter {
                        xid: xid::PING,
                        tx: None,
                        _permit: None,
                    });
                    buf.extend_from_slice(&ping);
                }
            }
        }
        last_write = tokio::time::Instant::now();
        if ping_timer.is_elapsed() {
            ping_timer.as_mut().reset(last_write + ping_every);
        }
        if buf.is_empty() {
            continue;
        }
        // flush: TLS may hold back the records of the last write (a no-op on TCP).
        let written = async {
            wr.write_all(&buf).await?;
            wr.flush().await
        };
        if let Err(e) = written.await {
            tracing::debug!(error = %e, "write failed");
            shared.fail_all(Broken::ConnectionLoss);
            break;
        }
    }
    let _ = wr.shutdown().await;
    // Fail whatever is still queued for us.
    rx.close();
    while let Ok(m) = rx.try_recv() {
        let _ = m.tx.send(Err(ClientError::ConnectionLoss));
    }
}

/// A timer set from an earlier activity fired: true if `due` (counted
/// from the latest activity) has come, else the timer is moved to `due`.
fn timer_due(timer: std::pin::Pin<&mut tokio::time::Sleep>, due: tokio::time::Instant) -> bool {
    if tokio::time::Instant::now() >= due {
        return true;
    }
    timer.reset(due);
    false
}

async fn reader_task(
    mut rd: impl AsyncRead + Unpin,
    mut buf: Vec<u8>,
    shared: Arc<Shared>,
    read_timeout: Duration,
) {
    let mut shutdown = shared.shutdown.subscribe();
    let mut start = 0usize;
    // As in `writer_task`: the shutdown wait and the read timer live across
    // turns; the timer moves to the last read's deadline only when it fires.
    let stop = shutdown.wait_for(|s| *s);
    let mut last_read = tokio::time::Instant::now();
    let read_timer = tokio::time::sleep_until(last_read + read_timeout);
    tokio::pin!(stop, read_timer);
    loop {
        // Handle every complete frame in the buffer.
        loop {
            match check_frame(&buf[start..], MAX_REPLY_FRAME_BYTES) {
                Ok(Some(n)) => {
                    let payload = &buf[start + 4..start + n];
                    if let Err(e) = dispatch(&shared, payload) {
                        tracing::warn!(error = %e, "bad reply; dropping connection");
                        shared.fail_all(Broken::ConnectionLoss);
                        return;
                    }
                    start += n;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "bad reply frame; dropping connection");
                    shared.fail_all(Broken::ConnectionLoss);
                    return;
                }
            }
        }
        if start > 0 {
            buf.drain(..start);
            start = 0;
        }
        buf.reserve(16 * 1024);
        let read = tokio::select! {
            _ = &mut stop => return,
            r = rd.read_buf(&mut buf) => r,
            () = &mut read_timer => {
                if !timer_due(read_timer.as_mut(), last_read + read_timeout) {
                    continue;
                }
                tracing::debug!("no reply within the read timeout");
                break;
            }
        };
        match read {
            Ok(0) => {
                tracing::debug!("server closed the connection");
                break;
            }
            Ok(_) => last_read = tokio::time::Instant::now(),
            Err(e) => {
                tracing::debug!(error = %e, "read failed");
                break;
            }
        }
    }
    let closing = shared.lock().closing;
    shared.fail_all(if closing {
        Broken::Closed
    } else {
        Broken::ConnectionLoss
    });
}

/// Routes one reply frame to its waiter (or to the event channel).
fn dispatch(shared: &Shared, payload: &[u8]) -> Result<(), ClientError> {
    let mut r = Reader::new(payload);
    let header = ReplyHeader::read(&mut r)?;
    let body = &payload[r.position()..];
    if header.xid == xid::NOTIFICATION {
        let ev = WatcherEvent::from_bytes(body)?;
        match (
            EventType::from_i32(ev.event_type),
            KeeperState::from_i32(ev.state),
        ) {
            (Some(event_type), Some(state)) => {
                let _ = shared.events.send(WatchedEvent {
                    event_type,
                    state,
                    path: ev.path,
                });
            }
            _ => tracing::warn!(?ev, "ignoring notification of unknown type"),
        }
        return Ok(());
    }
    let waiter = {
        let mut st = shared.lock();
        if header.zxid > st.last_zxid {
            st.last_zxid = header.zxid;
        }
        match st.queue_for(header.xid).pop_front() {
            Some(w) if w.xid == header.xid => w,
            Some(w) => {
                return Err(ClientError::Protocol(format!(
                    "reply xid {} but oldest request has xid {}",
                    header.xid, w.xid
                )))
            }
            None => {
                return Err(ClientError::Protocol(format!(
                    "reply xid {} with no request outstanding",
                    header.xid
                )))
            }
        }
    };
    if let Some(tx) = waiter.tx {
        let _ = tx.send(Ok(Reply {
            header,
            body: body.to_vec(),
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_string_parsing() {
        assert_eq!(
            parse_connect_string("127.0.0.1:2181, localhost ,[::1]:99").unwrap(),
            vec!["127.0.0.1:2181", "localhost:2181", "[::1]:99"]
        );
        assert_eq!(parse_connect_string("::1").unwrap(), vec!["[::1]:2181"]);
        assert!(parse_connect_string("").is_err());
        assert!(parse_connect_string("h:1/chroot").is_err());
        assert!(parse_connect_string("h:notaport").is_err());
    }

    #[test]
    fn watched_event_display_matches_java() {
        let ev = WatchedEvent {
            event_type: EventType::NodeDataChanged,
            state: KeeperState::SyncConnected,
            path: "/a".into(),
        };
        assert_eq!(
            ev.to_string(),
            "WatchedEvent state:SyncConnected type:NodeDataChanged path:/a"
        );
        let ev = WatchedEvent {
            event_type: EventType::None,
            state: KeeperState::Closed,
            path: String::new(),
        };
        assert_eq!(
            ev.to_string(),
            "WatchedEvent state:Closed type:None path:null"
        );
    }

    #[test]
    fn multi_error_picks_the_failing_op() {
        let r = vec![
            MultiResult::Error(0),
            MultiResult::Error(ErrorCode::NodeExists.code()),
            MultiResult::Error(ErrorCode::RuntimeInconsistency.code()),
        ];
        assert_eq!(multi_error(&r), Some(-110));
        assert_eq!(multi_error(&[MultiResult::Check]), None);
    }
}
