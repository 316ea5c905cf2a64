//! Peer transport: length-framed TCP between cluster members.
//!
//! Two lanes per peer, each its own connection and queue: `Control`
//! carries heartbeats, votes and small messages, `Bulk` carries appends,
//! snapshots and forwarded proposals. A saturating write load fills the
//! bulk queue, never the control one, so heartbeats keep their latency and
//! no spurious election follows (ZNBase's lesson).
//!
//! Frame: u32 length (of what follows) | u8 kind | u64 sender id | payload.
//! Every connection starts with the handshake of `handshake.rs` (TLS
//! first with `peer_tls`; a hello naming the protocol version, the cluster
//! and the member meant; an HMAC challenge-response with a shared secret).
//! A peer that fails it is refused with a logged reason and nothing it
//! sent reaches Raft; after it, a frame from another sender or one that
//! fails to decode closes that connection with a logged reason, never the
//! process.
//!
//! A snapshot (raft-rs puts the whole encoded tree in one MsgSnapshot) and
//! any other bulk message above `CHUNKED_ABOVE_BYTES` travel as a transfer:
//! `KIND_CHUNK` frames of at most `SNAPSHOT_CHUNK_BYTES`, each carrying the
//! transfer id, the inner frame kind, the chunk number, the chunk count,
//! the total size and the CRC32 of the whole. The bulk sender thread
//! encodes and slices a snapshot as it writes, so the queue never holds the
//! chunks. The receiver reassembles one transfer per peer at a time
//! (bounded by `SNAPSHOT_BYTES_MAX`); a chunk out of order, a header that
//! disagrees, a wrong size or CRC closes that connection and drops the
//! transfer whole. A transfer cut by a lost connection is sent again whole
//! on the next connection (up to `SNAPSHOT_SEND_ATTEMPTS` times).
//!
//! Sender threads block on a mutex + condvar queue (no spinning, no
//! timeout polling): a write load used to cost them `sched_yield` loops in
//! crossbeam's receive backoff. While a sender thread waits, it lends its
//! connection to the queue: a frame queued then (up to
//! `DIRECT_WRITE_BYTES_MAX`) is written at once by the thread that queues
//! it, without waiting (`MSG_DONTWAIT`; over TLS, encrypted into the
//! connection's buffer first), instead of waking the sender thread; what
//! the socket does not take, the sender writes.
//!
//! Members come and go at runtime (`set_peers`, from the applied
//! membership): a new member gets its two sender threads, a member gone
//! has its queues closed (its threads end) and is refused by the accept
//! side, a member whose address changed is reconnected. A node joining a
//! cluster starts knowing no member and no cluster id: it accepts the
//! first connector that passes the handshake and takes its cluster id
//! (`handshake::Acceptor`), then the members of the snapshot it receives.

use std::collections::{HashMap, VecDeque};
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};

use crate::handshake::{self, Acceptor, Ends, HandshakeSlot, PeerStream};
use crate::peer_auth::{describe_flags, PeerAuth};

/// Largest frame accepted from a peer. Plain frames stay at or below
/// `CHUNKED_ABOVE_BYTES` (+ header), chunks at `SNAPSHOT_CHUNK_BYTES`.
pub const PEER_FRAME_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Frames queued per peer and lane before new ones are dropped (Raft
/// retransmits; dropping beats blocking the driver). A queued snapshot is
/// not counted: there is at most one per peer and it is never dropped for
/// lack of room.
pub const PEER_QUEUE_FRAMES_MAX: usize = 4096;
/// Bytes of a snapshot (or other large message) one chunk frame carries.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;
/// Largest transfer a receiver reassembles.
pub const SNAPSHOT_BYTES_MAX: u64 = 1024 * 1024 * 1024;
/// Bulk payloads above this size (a huge append, a huge forwarded batch)
/// are sent chunked like a snapshot instead of as one frame.
pub const CHUNKED_ABOVE_BYTES: usize = 8 * 1024 * 1024;
/// Connections a snapshot transfer may be started on before it is given up
/// (raft-rs then needs `report_snapshot`, see `take_snapshot_reports`).
pub const SNAPSHOT_SEND_ATTEMPTS: u32 = 3;
/// A heartbeat unanswered this long no longer waits for its response: the
/// next heartbeat's send time replaces it.
pub const HEARTBEAT_UNANSWERED_MS: u64 = 5_000;
/// A heartbeat round trip this long is logged (half the election timeout
/// at Keel's 100 ms tick).
pub const HEARTBEAT_SLOW_MS: u64 = 500;
const CONNECT_RETRY_MS: u64 = 100;
const CONNECT_TIMEOUT_MS: u64 = 1_000;
/// A connection that breaks sooner than this is retried after
/// `CONNECT_RETRY_MS`, not at once (a peer that accepts and closes).
const SHORT_CONNECTION_MS: u64 = 1_000;
const SNAPSHOT_REPORTS_MAX: usize = 64;

/// A connection nothing was written to for this long is checked before
/// the next write (`Socket::closed_by_peer`): the peer may have restarted
/// meanwhile, and the first write into the old connection would be lost
/// without an error. Under load batches follow each other faster and
/// nothing is checked.
const IDLE_CHECK_MS: u64 = 50;

/// Frames up to this size are written by the thread that queues them when
/// the lane's sender thread is idle and the socket takes them at once;
/// larger ones, and any that would wait, go through the sender thread.
const DIRECT_WRITE_BYTES_MAX: usize = 64 * 1024;

/// A peer whose handshake failed is connected to again after this long.
const HANDSHAKE_RETRY_MS: u64 = 1_000;

pub(crate) const KIND_HELLO: u8 = 0;
pub(crate) const KIND_RAFT: u8 = 1;
const KIND_FORWARD: u8 = 2;
const KIND_TOUCH: u8 = 3;
const KIND_CHUNK: u8 = 4;
pub(crate) const KIND_WELCOME: u8 = 5;
pub(crate) const KIND_PROOF: u8 = 6;
const KIND_RECONFIG: u8 = 7;
const KIND_RECONFIG_ANSWER: u8 = 8;
const KIND_MEMBERS: u8 = 9;
/// Member ids the transport keeps heartbeat slots for (ids are 1..=255).
const MEMBER_ID_MAX: u64 = crate::membership::MEMBERS_MAX as u64;
/// Longest reconfig request or answer frame.
const RECONFIG_FRAME_BYTES_MAX: usize = 256 * 1024;

/// transfer id u64 | inner kind u8 | chunk u32 | chunks u32 | total u64 | crc32 u32
const CHUNK_HEADER_BYTES: usize = 8 + 1 + 4 + 4 + 8 + 4;

/// What arrives from peers, for the driver.
#[derive(Debug)]
pub enum PeerInput {
    Raft(Box<Message>),
    /// A follower's proposals, encoded as one entry payload.
    Forward(Vec<u8>),
    /// Sessions a follower saw activity from.
    Touch(Vec<i64>),
    /// A client's reconfig, forwarded to the leader.
    Reconfig(Vec<u8>),
    /// The leader's refusal of a reconfig asked at this node.
    ReconfigAnswer(Vec<u8>),
    /// A peer's view of the members' addresses.
    Members(Vec<u8>),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lane {
    Control,
    Bulk,
}

fn lane_of(message: &Message) -> Lane {
    match message.get_msg_type() {
        MessageType::MsgAppend | MessageType::MsgSnapshot => Lane::Bulk,
        _ => Lane::Control,
    }
}

// ---------------------------------------------------------------------------
// Heartbeat round trips

/// Heartbeat round trips as this node (when leader) measures them:
/// MsgHeartbeat handed to the transport until the peer's
/// MsgHeartbeatResponse is read off its connection, per peer. Heartbeats
/// carry no id, so the oldest unanswered heartbeat to a peer is matched
/// with the next response from it (a lost heartbeat can only make a round
/// trip look longer, never shorter). Cumulative, lock-free.
pub struct HeartbeatStats {
    epoch: Instant,
    /// Per peer: µs since `epoch` (+1) at which the oldest unanswered
    /// heartbeat was sent; 0 = none.
    pending: HashMap<u64, AtomicU64>,
    /// Round trips in µs.
    rtt: keel_metrics::Histogram,
}

/// Round-trip summary for mntr and tests (µs; a percentile is the upper
/// edge of its histogram bucket, never more than the max).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeartbeatSummary {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl Default for HeartbeatStats {
    fn default() -> Self {
        HeartbeatStats::new([])
    }
}

impl std::fmt::Debug for HeartbeatStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeartbeatStats({:?})", self.summary())
    }
}

impl HeartbeatStats {
    pub fn new(peers: impl IntoIterator<Item = u64>) -> Self {
        HeartbeatStats {
            epoch: Instant::now(),
            pending: peers.into_iter().map(|p| (p, AtomicU64::new(0))).collect(),
            rtt: keel_metrics::Histogram::new(),
        }
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64 + 1
    }

    /// A heartbeat to `peer` is being sent now.
    pub fn sent(&self, peer: u64) {
        let Some(slot) = self.pending.get(&peer) else {
            return;
        };
        let now = self.now_us();
        let old = slot.load(Ordering::Acquire);
        if old == 0 || now.saturating_sub(old) > HEARTBEAT_UNANSWERED_MS * 1000 {
            let _ = slot.compare_exchange(old, now, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// A heartbeat response from `peer` arrived now; returns the round
    /// trip it completed (None if no heartbeat was waiting for it).
    pub fn answered(&self, peer: u64) -> Option<u64> {
        let slot = self.pending.get(&peer)?;
        let sent = slot.swap(0, Ordering::AcqRel);
        if sent == 0 {
            return None;
        }
        let rtt_us = self.now_us().saturating_sub(sent);
        self.record(rtt_us);
        Some(rtt_us)
    }

    /// Heartbeats to `peer` were dropped (its connection is down): none is
    /// waiting for a response any more.
    pub fn forget(&self, peer: u64) {
        if let Some(slot) = self.pending.get(&peer) {
            slot.store(0, Ordering::Release);
        }
    }

    /// Adds one round trip.
    pub fn record(&self, rtt_us: u64) {
        self.rtt.record(rtt_us);
    }

    /// Every round trip measured (µs), for the metrics endpoint.
    pub fn histogram(&self) -> &keel_metrics::Histogram {
        &self.rtt
    }

    pub fn summary(&self) -> HeartbeatSummary {
        let snapshot = self.rtt.snapshot();
        HeartbeatSummary {
            count: snapshot.count(),
            p50_us: snapshot.quantile(0.50).unwrap_or(0),
            p99_us: snapshot.quantile(0.99).unwrap_or(0),
            max_us: snapshot.max,
        }
    }
}

// ---------------------------------------------------------------------------
// Sending

/// What a sender thread writes.
enum Item {
    /// An encoded frame.
    Frame(Vec<u8>),
    /// A bulk payload too big for one frame: written as a chunked transfer.
    Large { kind: u8, payload: Vec<u8> },
    /// A MsgSnapshot: encoded and sliced into chunks by the sender thread.
    Snapshot { message: Box<Message>, attempt: u32 },
}

/// One lane's queue: bounded, woken by a condvar (no polling).
struct Queue {
    state: Mutex<QueueState>,
    wake: Condvar,
}

#[derive(Default)]
struct QueueState {
    items: VecDeque<Item>,
    /// Items other than snapshots (bounded by PEER_QUEUE_FRAMES_MAX).
    frames: usize,
    closed: bool,
    /// The lane's connection while its sender thread waits for items:
    /// `push` writes a small frame to it directly.
    parked: Option<Parked>,
}

/// A connected writer lent to `push` by a sender thread with nothing to do.
struct Parked {
    writer: BufWriter<PeerStream>,
    /// When the connection was last written to (`IDLE_CHECK_MS`).
    written: Instant,
}

/// How a direct write went.
enum Direct {
    /// The whole frame is in the socket.
    Done,
    /// Not written (too big, idle, the socket's buffer full, or earlier
    /// TLS records still waiting): the frame goes through the sender
    /// thread.
    NotTried,
    /// This many bytes are in the socket; the rest must follow before
    /// anything else.
    Partial(usize),
}

impl Parked {
    fn write(&mut self, frame: &[u8]) -> Direct {
        assert!(
            self.writer.buffer().is_empty(),
            "a parked writer holds unflushed bytes"
        );
        if frame.len() > DIRECT_WRITE_BYTES_MAX
            || self.written.elapsed() >= Duration::from_millis(IDLE_CHECK_MS)
        {
            return Direct::NotTried;
        }
        // An error is left for the sender thread's write to meet and
        // handle (reconnect); the frame goes with the queue.
        let now = self.writer.get_mut().write_now(frame);
        assert!(now.accepted <= frame.len());
        if now.accepted == 0 {
            return Direct::NotTried;
        }
        self.written = Instant::now();
        if now.accepted == frame.len() && !now.pending {
            Direct::Done
        } else {
            // The rest of the frame, or (all taken, TLS records left in
            // the connection's buffer) nothing: the sender thread's flush
            // sends what waits.
            Direct::Partial(now.accepted)
        }
    }
}

impl Queue {
    fn new() -> Queue {
        Queue {
            state: Mutex::new(QueueState::default()),
            wake: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// False if the queue is full and the item was dropped. A snapshot
    /// always goes in, replacing one still queued (one transfer per peer).
    fn push(&self, mut item: Item) -> bool {
        let mut state = self.lock();
        let was_empty = state.items.is_empty();
        if let (true, Item::Frame(frame), Some(parked)) = (was_empty, &item, state.parked.as_mut())
        {
            // The sender thread is idle: write from this thread, saving
            // its wake-up (one per message, the transport's main cost).
            match parked.write(frame) {
                Direct::Done => return true,
                Direct::NotTried => {}
                Direct::Partial(sent) => item = Item::Frame(frame[sent..].to_vec()),
            }
        }
        if matches!(item, Item::Snapshot { .. }) {
            state
                .items
                .retain(|queued| !matches!(queued, Item::Snapshot { .. }));
        } else if state.frames >= PEER_QUEUE_FRAMES_MAX {
            return false;
        } else {
            state.frames += 1;
        }
        state.items.push_back(item);
        drop(state);
        if was_empty {
            // The sender only waits on an empty queue.
            self.wake.notify_one();
        }
        true
    }

    /// Waits for items and moves them all into `batch`, lending the
    /// connection to `push` meanwhile; gives it back with the time of its
    /// last write, or None once closed (the connection is dropped).
    fn take_all(
        &self,
        batch: &mut VecDeque<Item>,
        writer: BufWriter<PeerStream>,
        written: Instant,
    ) -> Option<(BufWriter<PeerStream>, Instant)> {
        assert!(batch.is_empty());
        assert!(writer.buffer().is_empty(), "parking an unflushed writer");
        let mut state = self.lock();
        assert!(state.parked.is_none(), "one sender thread per queue");
        state.parked = Some(Parked { writer, written });
        loop {
            if !state.items.is_empty() {
                std::mem::swap(batch, &mut state.items);
                state.frames = 0;
                let parked = state.parked.take().expect("parked above");
                return Some((parked.writer, parked.written));
            }
            if state.closed {
                state.parked = None;
                return None;
            }
            state = self.wake.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Puts back, ahead of what was queued since, a batch that found its
    /// connection closed before any of it was written (a snapshot in it
    /// goes only if no newer one is queued).
    fn requeue_front(&self, unsent: VecDeque<Item>) {
        let mut state = self.lock();
        let snapshot_queued = state
            .items
            .iter()
            .any(|queued| matches!(queued, Item::Snapshot { .. }));
        for item in unsent.into_iter().rev() {
            match item {
                Item::Snapshot { .. } if snapshot_queued => continue,
                Item::Snapshot { .. } => {}
                _ => state.frames += 1,
            }
            state.items.push_front(item);
        }
    }

    /// Frames queued while disconnected are stale for Raft: dropped. A
    /// snapshot stays (raft-rs waits for it before it sends that peer
    /// anything else), and `retry` goes first unless a newer one is queued.
    fn drop_stale(&self, retry: Option<Item>) {
        let mut state = self.lock();
        state
            .items
            .retain(|queued| matches!(queued, Item::Snapshot { .. }));
        state.frames = 0;
        if let Some(item) = retry {
            if state.items.is_empty() {
                state.items.push_back(item);
            }
        }
    }

    fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
    }

    fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Sleeps up to `timeout` unless the queue gets closed; true if closed.
    fn wait_closed(&self, timeout: Duration) -> bool {
        let state = self.lock();
        let (state, _) = self
            .wake
            .wait_timeout_while(state, timeout, |s| !s.closed)
            .unwrap_or_else(|e| e.into_inner());
        state.closed
    }
}

struct Outgoing {
    control: Arc<Queue>,
    bulk: Arc<Queue>,
}

impl Drop for Outgoing {
    /// The last Transport clone is gone: the sender threads end.
    fn drop(&mut self) {
        self.control.close();
        self.bulk.close();
    }
}

/// How a snapshot transfer to a peer ended, for raft-rs's
/// `report_snapshot` (Finish when `sent`, Failure otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotReport {
    pub to: u64,
    pub index: u64,
    /// Every chunk was written to the peer's connection.
    pub sent: bool,
}

type Reports = Arc<Mutex<Vec<SnapshotReport>>>;

/// A member the transport sends to.
struct Peer {
    address: SocketAddr,
    outgoing: Outgoing,
}

/// Sends to peers; cheap to clone.
#[derive(Clone)]
pub struct Transport {
    self_id: u64,
    peers: Arc<RwLock<HashMap<u64, Peer>>>,
    heartbeat: Arc<HeartbeatStats>,
    reports: Reports,
    /// The cluster's id; 0 while a joining node has not learned it.
    cluster_id: Arc<AtomicU64>,
    /// The members the accept side lets in (empty while joining).
    known: Arc<RwLock<Vec<u64>>>,
    auth: PeerAuth,
}

impl Transport {
    /// Listens on `listen` and keeps connections to every other peer;
    /// every connection, both ways, proves what `auth` asks for.
    pub fn start(
        self_id: u64,
        cluster_id: u64,
        listen: SocketAddr,
        peers: &HashMap<u64, SocketAddr>,
        auth: PeerAuth,
        inbox: PeerInbox,
    ) -> std::io::Result<Transport> {
        let listener = TcpListener::bind(listen)?;
        Transport::start_on(listener, self_id, cluster_id, peers, auth, inbox)
    }

    /// As `start`, on a listener already bound. `cluster_id` 0 and no
    /// `peers`: a node joining a cluster (see the module doc).
    pub(crate) fn start_on(
        listener: TcpListener,
        self_id: u64,
        cluster_id: u64,
        peers: &HashMap<u64, SocketAddr>,
        auth: PeerAuth,
        inbox: PeerInbox,
    ) -> std::io::Result<Transport> {
        let heartbeat = Arc::new(HeartbeatStats::new(
            (1..=MEMBER_ID_MAX).filter(|&p| p != self_id),
        ));
        let transport = Transport {
            self_id,
            peers: Arc::default(),
            heartbeat: heartbeat.clone(),
            reports: Arc::default(),
            cluster_id: Arc::new(AtomicU64::new(cluster_id)),
            known: Arc::default(),
            auth: auth.clone(),
        };
        let reader = ReaderContext {
            self_id,
            cluster_id: transport.cluster_id.clone(),
            known: transport.known.clone(),
            auth,
            inbox,
            heartbeat,
            transfers: Arc::default(),
            handshakes: Arc::default(),
        };
        std::thread::Builder::new()
            .name("keel-peer-accept".into())
            .spawn(move || accept_loop(listener, reader))?;
        transport.set_peers(peers)?;
        Ok(transport)
    }

    /// The cluster's id (0 while a joining node has not learned it).
    pub fn cluster_id(&self) -> u64 {
        self.cluster_id.load(Ordering::Acquire)
    }

    /// Makes `peers` (this node's own entry is ignored) the members this
    /// node sends to and accepts: new ones are connected, gone ones closed
    /// (their sender threads end), moved ones reconnected.
    pub fn set_peers(&self, peers: &HashMap<u64, SocketAddr>) -> std::io::Result<()> {
        let mut current = self.peers.write().unwrap_or_else(|e| e.into_inner());
        current.retain(|id, peer| {
            let keep = peers.get(id) == Some(&peer.address);
            if !keep {
                tracing::info!(peer_id = id, address = %peer.address, "peer forgotten");
            }
            keep
        });
        for (&peer_id, &address) in peers {
            if peer_id == self.self_id || current.contains_key(&peer_id) {
                continue;
            }
            let link = Link {
                self_id: self.self_id,
                cluster_id: self.cluster_id.clone(),
                peer_id,
                address,
                auth: self.auth.clone(),
                heartbeat: self.heartbeat.clone(),
                reports: self.reports.clone(),
            };
            let control = spawn_sender(link.clone(), Lane::Control)?;
            let bulk = spawn_sender(link, Lane::Bulk)?;
            tracing::info!(peer_id, %address, "peer added");
            current.insert(
                peer_id,
                Peer {
                    address,
                    outgoing: Outgoing { control, bulk },
                },
            );
        }
        let mut known: Vec<u64> = peers.keys().copied().collect();
        known.sort_unstable();
        *self.known.write().unwrap_or_else(|e| e.into_inner()) = known;
        Ok(())
    }

    /// The heartbeat round-trip statistics this transport keeps.
    pub fn heartbeat_stats(&self) -> Arc<HeartbeatStats> {
        self.heartbeat.clone()
    }

    /// Snapshot transfers that ended since the last call (at most
    /// `SNAPSHOT_REPORTS_MAX` kept), for `RawNode::report_snapshot`:
    /// without it a leader whose snapshot was lost keeps that follower in
    /// raft-rs's Snapshot state (sends it nothing) until a leader change.
    pub fn take_snapshot_reports(&self) -> Vec<SnapshotReport> {
        std::mem::take(&mut *self.reports.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn send_raft(&self, message: &Message) {
        match message.get_msg_type() {
            MessageType::MsgSnapshot => {
                let item = Item::Snapshot {
                    message: Box::new(message.clone()), // the tree is a `Bytes`: no copy
                    attempt: 0,
                };
                return self.push(message.to, Lane::Bulk, item);
            }
            MessageType::MsgHeartbeat => self.heartbeat.sent(message.to),
            _ => {}
        }
        let payload = match message.write_to_bytes() {
            Ok(bytes) => bytes,
            Err(error) => return tracing::error!(%error, "cannot encode raft message"),
        };
        self.enqueue(message.to, lane_of(message), KIND_RAFT, payload);
    }

    pub fn forward(&self, leader_id: u64, batch: &[u8]) {
        self.enqueue(leader_id, Lane::Bulk, KIND_FORWARD, batch.to_vec());
    }

    /// A client's reconfig for the leader.
    pub fn reconfig(&self, leader_id: u64, request: &[u8]) {
        self.enqueue(leader_id, Lane::Control, KIND_RECONFIG, request.to_vec());
    }

    /// The leader's refusal, for the node whose client asked.
    pub fn reconfig_answer(&self, origin: u64, answer: &[u8]) {
        self.enqueue(origin, Lane::Control, KIND_RECONFIG_ANSWER, answer.to_vec());
    }

    /// This node's view of the members' addresses, for a peer.
    pub fn members(&self, to: u64, members: &[u8]) {
        self.enqueue(to, Lane::Control, KIND_MEMBERS, members.to_vec());
    }

    pub fn touch(&self, leader_id: u64, sessions: &[i64]) {
        let mut payload = Vec::with_capacity(sessions.len() * 8);
        for session in sessions {
            payload.extend_from_slice(&session.to_be_bytes());
        }
        self.enqueue(leader_id, Lane::Control, KIND_TOUCH, payload);
    }

    fn enqueue(&self, to: u64, lane: Lane, kind: u8, payload: Vec<u8>) {
        let item = if payload.len() <= CHUNKED_ABOVE_BYTES {
            Item::Frame(encode_frame(kind, self.self_id, &payload))
        } else if lane == Lane::Bulk {
            Item::Large { kind, payload }
        } else {
            return tracing::error!(
                to,
                bytes = payload.len(),
                "control message too large; dropped"
            );
        };
        self.push(to, lane, item);
    }

    fn push(&self, to: u64, lane: Lane, item: Item) {
        let peers = self.peers.read().unwrap_or_else(|e| e.into_inner());
        let Some(Peer { outgoing, .. }) = peers.get(&to) else {
            return tracing::debug!(to, "message for an unknown peer dropped");
        };
        let queue = match lane {
            Lane::Control => &outgoing.control,
            Lane::Bulk => &outgoing.bulk,
        };
        if !queue.push(item) {
            tracing::debug!(to, ?lane, "peer queue full; frame dropped");
        }
    }
}

pub(crate) fn encode_frame(kind: u8, from: u64, payload: &[u8]) -> Vec<u8> {
    let length = 1 + 8 + payload.len();
    assert!(
        length <= PEER_FRAME_BYTES_MAX,
        "peer frame of {length} bytes"
    );
    let mut frame = Vec::with_capacity(4 + length);
    frame.extend_from_slice(&(length as u32).to_be_bytes());
    frame.push(kind);
    frame.extend_from_slice(&from.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

fn chunk_count(total: usize) -> u32 {
    total.div_ceil(SNAPSHOT_CHUNK_BYTES).max(1) as u32
}

/// Writes `payload` as one chunked transfer; returns the number of chunks.
fn write_chunked(
    writer: &mut impl Write,
    from: u64,
    transfer: u64,
    kind: u8,
    payload: &[u8],
) -> std::io::Result<u32> {
    let chunks = chunk_count(payload.len());
    let crc = crc32fast::hash(payload);
    let mut pieces = payload.chunks(SNAPSHOT_CHUNK_BYTES);
    for chunk in 0..chunks {
        let data = pieces.next().unwrap_or(&[]);
        let length = 1 + 8 + CHUNK_HEADER_BYTES + data.len();
        let mut head = Vec::with_capacity(4 + 1 + 8 + CHUNK_HEADER_BYTES);
        head.extend_from_slice(&(length as u32).to_be_bytes());
        head.push(KIND_CHUNK);
        head.extend_from_slice(&from.to_be_bytes());
        head.extend_from_slice(&transfer.to_be_bytes());
        head.push(kind);
        head.extend_from_slice(&chunk.to_be_bytes());
        head.extend_from_slice(&chunks.to_be_bytes());
        head.extend_from_slice(&(payload.len() as u64).to_be_bytes());
        head.extend_from_slice(&crc.to_be_bytes());
        writer.write_all(&head)?;
        writer.write_all(data)?;
    }
    Ok(chunks)
}

static NEXT_TRANSFER: AtomicU64 = AtomicU64::new(1);

/// One directed link to a peer, as its sender threads see it.
#[derive(Clone)]
struct Link {
    self_id: u64,
    /// 0 until a joining node learns it (it connects only then).
    cluster_id: Arc<AtomicU64>,
    peer_id: u64,
    address: SocketAddr,
    auth: PeerAuth,
    heartbeat: Arc<HeartbeatStats>,
    reports: Reports,
}

impl Link {
    fn ends(&self) -> Ends {
        Ends {
            cluster_id: self.cluster_id.load(Ordering::Acquire),
            connector: self.self_id,
            acceptor: self.peer_id,
        }
    }

    fn report(&self, index: u64, sent: bool) {
        let mut reports = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        if reports.len() < SNAPSHOT_REPORTS_MAX {
            reports.push(SnapshotReport {
                to: self.peer_id,
                index,
                sent,
            });
        }
    }
}

fn spawn_sender(link: Link, lane: Lane) -> std::io::Result<Arc<Queue>> {
    let queue = Arc::new(Queue::new());
    let frames = queue.clone();
    let name = match lane {
        Lane::Control => "control",
        Lane::Bulk => "bulk",
    };
    std::thread::Builder::new()
        .name(format!("keel-peer-{}-{name}", link.peer_id))
        .spawn(move || send_loop(&link, lane, &frames))?;
    Ok(queue)
}

fn send_loop(link: &Link, lane: Lane, frames: &Queue) {
    while !frames.is_closed() {
        if link.cluster_id.load(Ordering::Acquire) == 0 {
            // Joining: the first leader's connection names the cluster.
            if frames.wait_closed(Duration::from_millis(CONNECT_RETRY_MS)) {
                return;
            }
            continue;
        }
        let connected = Instant::now();
        let mut refused = false;
        let retry = match TcpStream::connect_timeout(
            &link.address,
            Duration::from_millis(CONNECT_TIMEOUT_MS),
        ) {
            Ok(tcp) => match handshake::open(tcp, link.ends(), &link.auth) {
                Ok(stream) => match pump(link, stream, frames) {
                    Ok(()) => return, // closed
                    Err(Pumped::Lost(error, retry)) => {
                        tracing::debug!(peer_id = link.peer_id, ?lane, %error, "peer connection lost");
                        retry
                    }
                    Err(Pumped::ClosedWhileIdle(unsent)) => {
                        // Nothing of the batch was written: it goes on the
                        // next connection, in order (a forwarded proposal
                        // dropped here would wait for the next leader change).
                        tracing::debug!(
                            peer_id = link.peer_id,
                            ?lane,
                            "idle peer connection was closed; reconnecting"
                        );
                        frames.requeue_front(unsent);
                        continue;
                    }
                },
                Err(reason) => {
                    tracing::warn!(
                        peer_id = link.peer_id,
                        address = %link.address,
                        ?lane,
                        %reason,
                        "peer handshake failed; retrying in {HANDSHAKE_RETRY_MS} ms"
                    );
                    refused = true;
                    None
                }
            },
            Err(_) => None,
        };
        if lane == Lane::Control {
            link.heartbeat.forget(link.peer_id);
        }
        let retry = retry.and_then(|item| match item {
            Item::Snapshot { message, attempt } if attempt + 1 < SNAPSHOT_SEND_ATTEMPTS => {
                Some(Item::Snapshot {
                    message,
                    attempt: attempt + 1,
                })
            }
            Item::Snapshot { message, .. } => {
                tracing::warn!(
                    to = link.peer_id,
                    index = message.get_snapshot().get_metadata().index,
                    "snapshot transfer given up after {SNAPSHOT_SEND_ATTEMPTS} attempts"
                );
                link.report(message.get_snapshot().get_metadata().index, false);
                None
            }
            _ => None,
        });
        frames.drop_stale(retry);
        let pause_ms = if refused {
            HANDSHAKE_RETRY_MS
        } else {
            CONNECT_RETRY_MS
        };
        if (refused || connected.elapsed() < Duration::from_millis(SHORT_CONNECTION_MS))
            && frames.wait_closed(Duration::from_millis(pause_ms))
        {
            return;
        }
    }
}

/// Why `pump` left a connection.
enum Pumped {
    /// A write failed: the snapshot that was cut or not yet started comes
    /// back to be sent again, the rest is stale.
    Lost(std::io::Error, Option<Item>),
    /// The peer had closed the connection while it was idle; nothing of
    /// this batch was written.
    ClosedWhileIdle(VecDeque<Item>),
}

/// Writes queued items, one flush per batch of whatever was queued. Ok
/// once the queue is closed.
fn pump(link: &Link, stream: PeerStream, frames: &Queue) -> Result<(), Pumped> {
    let mut writer = BufWriter::with_capacity(256 * 1024, stream);
    let mut batch = VecDeque::new();
    let mut written = Instant::now();
    loop {
        let Some(lent) = frames.take_all(&mut batch, writer, written) else {
            return Ok(());
        };
        (writer, written) = lent;
        let idle = written.elapsed() >= Duration::from_millis(IDLE_CHECK_MS);
        if idle && writer.get_mut().closed_by_peer() {
            return Err(Pumped::ClosedWhileIdle(std::mem::take(&mut batch)));
        }
        while let Some(item) = batch.pop_front() {
            let result = match &item {
                Item::Frame(frame) => writer.write_all(frame),
                Item::Large { kind, payload } => {
                    let transfer = NEXT_TRANSFER.fetch_add(1, Ordering::Relaxed);
                    write_chunked(&mut writer, link.self_id, transfer, *kind, payload).map(|_| ())
                }
                Item::Snapshot { message, .. } => send_snapshot(link, &mut writer, message),
            };
            if let Err(error) = result {
                let retry = std::iter::once(item)
                    .chain(batch.drain(..))
                    .find(|i| matches!(i, Item::Snapshot { .. }));
                return Err(Pumped::Lost(error, retry));
            }
        }
        writer.flush().map_err(|e| Pumped::Lost(e, None))?;
        written = Instant::now();
    }
}

fn send_snapshot(link: &Link, writer: &mut impl Write, message: &Message) -> std::io::Result<()> {
    let started = Instant::now();
    let index = message.get_snapshot().get_metadata().index;
    let payload = match message.write_to_bytes() {
        Ok(bytes) => bytes,
        Err(error) => {
            tracing::error!(%error, "cannot encode snapshot message");
            link.report(index, false);
            return Ok(());
        }
    };
    let transfer = NEXT_TRANSFER.fetch_add(1, Ordering::Relaxed);
    let chunks = write_chunked(writer, link.self_id, transfer, KIND_RAFT, &payload)?;
    writer.flush()?;
    tracing::info!(
        to = link.peer_id,
        index,
        term = message.get_snapshot().get_metadata().term,
        bytes = payload.len(),
        chunks,
        ms = started.elapsed().as_millis() as u64,
        "snapshot sent"
    );
    link.report(index, true);
    Ok(())
}

// ---------------------------------------------------------------------------
// Receiving

/// Where what peers send goes: to the driver thread, which reads the
/// connections itself (`handover`), or to reader threads delivering into
/// the channels (the transport alone, in tests): forwarded proposals
/// on a channel of their own, everything else on `control`. A leader
/// holding its next batch (entries in flight, or lingering) takes no
/// forwarded batch into it until the batch goes out (driver.rs,
/// `Driver::run`); one read off a socket waits in the poller meanwhile.
#[derive(Clone)]
pub struct PeerInbox {
    pub control: Sender<PeerInput>,
    pub forwards: Sender<PeerInput>,
    /// Where authenticated connections go instead, when the driver thread
    /// reads them itself (`wait.rs`): no reader thread, and no thread
    /// wake-up between a frame's arrival and Raft. None: a reader thread
    /// per connection delivers into the two channels above.
    pub(crate) handover: Option<Handover>,
}

impl From<Sender<PeerInput>> for PeerInbox {
    /// One channel for everything (tests).
    fn from(sender: Sender<PeerInput>) -> PeerInbox {
        PeerInbox {
            control: sender.clone(),
            forwards: sender,
            handover: None,
        }
    }
}

/// The driver's queue of new inbound connections, and the bell that wakes
/// it for one.
#[derive(Clone)]
pub(crate) struct Handover {
    pub connections: Sender<InboundConnection>,
    pub bell: Arc<crate::wait::Bell>,
}

/// Bytes one `InboundConnection::read_now` takes off its socket at most,
/// so one busy peer cannot hold the driver's turn.
pub(crate) const READ_TURN_BYTES_MAX: usize = 1024 * 1024;
/// Read buffer an inbound connection keeps between frames; a larger
/// frame's room is given back once it is parsed.
const READ_BUFFER_KEPT_BYTES: usize = 256 * 1024;

/// An authenticated connection from peer `from`, read without waiting by
/// the driver thread (`wait.rs`): the same frames, checks and log lines as
/// a reader thread's `read_peer`.
pub(crate) struct InboundConnection {
    from: u64,
    peer: String,
    connection: u64,
    stream: PeerStream,
    /// Bytes read and not yet parsed start at `parsed`.
    buf: Vec<u8>,
    parsed: usize,
    context: ReaderContext,
}

impl InboundConnection {
    fn new(from: u64, peer: String, reader: BufReader<PeerStream>, context: ReaderContext) -> Self {
        let buf = reader.buffer().to_vec();
        InboundConnection {
            from,
            peer,
            connection: NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed),
            stream: reader.into_inner(),
            buf,
            parsed: 0,
            context,
        }
    }

    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.stream.raw_fd()
    }

    /// Parses the complete frames read so far, then reads what the socket
    /// holds now (at most `READ_TURN_BYTES_MAX`) and parses again; every
    /// input goes to `deliver` in the order sent. Ok(false): the peer
    /// closed the connection.
    pub(crate) fn read_now(
        &mut self,
        deliver: &mut dyn FnMut(PeerInput),
    ) -> Result<bool, PeerError> {
        self.parse(deliver)?;
        let open = self.stream.read_now(&mut self.buf, READ_TURN_BYTES_MAX)?;
        self.parse(deliver)?;
        Ok(open)
    }

    fn parse(&mut self, deliver: &mut dyn FnMut(PeerInput)) -> Result<(), PeerError> {
        while let Some(frame) = frame_in(&self.buf[self.parsed..], PEER_FRAME_BYTES_MAX)? {
            self.parsed += 4 + 9 + frame.payload.len();
            let (kind, sender, payload) = (frame.kind, frame.sender, frame.payload.to_vec());
            if let Some(input) = frame_input(
                &self.context,
                self.from,
                self.connection,
                kind,
                sender,
                payload,
            )? {
                deliver(input);
            }
        }
        // Keep only the unparsed tail (at most one frame's bytes), and give
        // back the room a large frame (a snapshot chunk) made.
        self.buf.drain(..self.parsed);
        self.parsed = 0;
        if self.buf.len() < READ_BUFFER_KEPT_BYTES
            && self.buf.capacity() > 2 * READ_BUFFER_KEPT_BYTES
        {
            self.buf.shrink_to(READ_BUFFER_KEPT_BYTES);
        }
        Ok(())
    }

    /// The connection ends: logged as a reader thread logs it, and a
    /// transfer it carried is dropped whole.
    pub(crate) fn finish(self, reason: Option<PeerError>) {
        match reason {
            Some(reason) => {
                tracing::warn!(peer = %self.peer, from = self.from, %reason, "peer connection closed")
            }
            None => tracing::warn!(
                peer = %self.peer,
                from = self.from,
                reason = "closed by the peer",
                "peer connection closed"
            ),
        }
        drop_transfer_of(&self.context, self.from, self.connection);
    }
}

/// One frame's parts, borrowed from the bytes it was parsed from.
struct FrameRef<'a> {
    kind: u8,
    sender: u64,
    payload: &'a [u8],
}

/// The first complete frame at the start of `bytes`, None while it is
/// incomplete; its length is checked first.
fn frame_in(bytes: &[u8], max_bytes: usize) -> Result<Option<FrameRef<'_>>, PeerError> {
    let Some(length) = bytes.get(..4) else {
        return Ok(None);
    };
    let length = u32::from_be_bytes(length.try_into().expect("4 bytes")) as usize;
    if !(9..=max_bytes).contains(&length) {
        return Err(PeerError::FrameLength(length));
    }
    let Some(frame) = bytes.get(4..4 + length) else {
        return Ok(None);
    };
    Ok(Some(FrameRef {
        kind: frame[0],
        sender: u64::from_be_bytes(frame[1..9].try_into().expect("8 bytes")),
        payload: &frame[9..],
    }))
}

/// What every reader thread shares.
#[derive(Clone)]
struct ReaderContext {
    self_id: u64,
    cluster_id: Arc<AtomicU64>,
    known: Arc<RwLock<Vec<u64>>>,
    auth: PeerAuth,
    inbox: PeerInbox,
    heartbeat: Arc<HeartbeatStats>,
    /// Transfers being reassembled, at most one per peer.
    transfers: Arc<Mutex<HashMap<u64, Reassembly>>>,
    /// Accepted connections still shaking hands (`HandshakeSlot`).
    handshakes: Arc<std::sync::atomic::AtomicUsize>,
}

/// Why a peer connection was closed (logged with the peer's address;
/// nothing it sent after the error reaches Raft).
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("read: {0}")]
    Read(#[from] std::io::Error),
    #[error("frame length {0} out of bounds")]
    FrameLength(usize),
    #[error("first frame is not a hello")]
    NotHello,
    #[error("the peer speaks peer protocol version {theirs}, this node speaks version {ours}")]
    Version { theirs: u16, ours: u16 },
    #[error("{0} frame of {1} bytes")]
    HandshakeFrame(&'static str, usize),
    #[error("expected the {expected} frame, got a frame of kind {kind}")]
    Unexpected { expected: &'static str, kind: u8 },
    #[error("peer {from} belongs to cluster {theirs:#x}, we are {ours:#x}")]
    OtherCluster { from: u64, theirs: u64, ours: u64 },
    #[error("unknown peer id {0}")]
    UnknownPeer(u64),
    #[error("peer {from} meant to reach member {target}, this is member {ours}")]
    WrongTarget { from: u64, target: u64, ours: u64 },
    #[error("the peer authenticates with {theirs}, this node requires {ours} (peer_tls and peer_secret_file must agree on every member)")]
    AuthMismatch { theirs: String, ours: String },
    #[error(
        "wrong proof of the shared secret (another peer_secret_file, or a replayed handshake)"
    )]
    BadProof,
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    #[error("TLS setup: {0}")]
    TlsSetup(rustls::Error),
    #[error("no client certificate")]
    NoCertificate,
    #[error("the peer claims to be member {claimed} but its certificate names {}", describe_members(.named))]
    CertificateMember { claimed: u64, named: Vec<u64> },
    #[error(
        "handshake not completed within {} ms",
        handshake::HANDSHAKE_TIMEOUT_MS
    )]
    HandshakeTimeout,
    #[error("the connection closed during the handshake (the other side refused it: see its log)")]
    ClosedInHandshake,
    #[error("frame from {sender} on {from}'s connection")]
    WrongSender { sender: u64, from: u64 },
    #[error("bad frame kind {0}")]
    BadKind(u8),
    #[error("raft message does not decode: {0}")]
    Decode(#[from] protobuf::ProtobufError),
    #[error("raft message claims sender {0}")]
    ClaimedSender(u64),
    #[error("chunk frame shorter than its header")]
    ShortChunk,
    #[error("chunk of {0} bytes")]
    ChunkTooLarge(usize),
    #[error("transfer {new} started while transfer {current} is in progress")]
    Interleaved { new: u64, current: u64 },
    #[error("chunk {chunk} of transfer {transfer} out of order (expected {expected})")]
    OutOfOrder {
        chunk: u32,
        transfer: u64,
        expected: u32,
    },
    #[error("chunk {chunk} of transfer {transfer} disagrees with the transfer's header")]
    HeaderMismatch { chunk: u32, transfer: u64 },
    #[error("chunk {chunk} of transfer {transfer} without its start")]
    NoStart { chunk: u32, transfer: u64 },
    #[error("chunked frame of kind {0}")]
    ChunkedKind(u8),
    #[error("transfer of {0} bytes exceeds {SNAPSHOT_BYTES_MAX}")]
    TransferTooLarge(u64),
    #[error("transfer of {total} bytes announced in {chunks} chunks")]
    ChunkCount { total: u64, chunks: u32 },
    #[error("transfer {transfer} carries more than its {total} bytes")]
    Overlong { transfer: u64, total: u64 },
    #[error("transfer {transfer} ended after {got} of {total} bytes")]
    Short { transfer: u64, got: u64, total: u64 },
    #[error("transfer {0} fails its CRC")]
    Crc(u64),
}

fn describe_members(ids: &[u64]) -> String {
    if ids.is_empty() {
        return "no member of this cluster".into();
    }
    let names: Vec<String> = ids
        .iter()
        .map(|id| crate::peer_auth::member_name(*id))
        .collect();
    names.join(", ")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ChunkHeader {
    transfer: u64,
    kind: u8,
    chunk: u32,
    chunks: u32,
    total: u64,
    crc: u32,
}

fn parse_chunk(payload: &[u8]) -> Result<(ChunkHeader, &[u8]), PeerError> {
    if payload.len() < CHUNK_HEADER_BYTES {
        return Err(PeerError::ShortChunk);
    }
    let u32_at = |at: usize| u32::from_be_bytes(payload[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_be_bytes(payload[at..at + 8].try_into().expect("8 bytes"));
    let header = ChunkHeader {
        transfer: u64_at(0),
        kind: payload[8],
        chunk: u32_at(9),
        chunks: u32_at(13),
        total: u64_at(17),
        crc: u32_at(25),
    };
    Ok((header, &payload[CHUNK_HEADER_BYTES..]))
}

/// A transfer being put together from its chunks.
struct Reassembly {
    /// The connection it arrives on.
    connection: u64,
    header: ChunkHeader,
    next: u32,
    data: Vec<u8>,
    started: Instant,
}

/// A transfer whose every chunk arrived and whose CRC matches.
#[derive(Debug)]
struct Reassembled {
    kind: u8,
    payload: Vec<u8>,
    chunks: u32,
    elapsed: Duration,
}

/// Takes one chunk from `connection` for the peer's transfer slot. An
/// error closes the connection; the transfer it was part of is dropped
/// (unless it belongs to another, newer connection of that peer).
fn accept_chunk(
    slot: &mut Option<Reassembly>,
    connection: u64,
    header: ChunkHeader,
    data: &[u8],
) -> Result<Option<Reassembled>, PeerError> {
    let result = take_chunk(slot, connection, header, data);
    if result.is_err() && slot.as_ref().is_some_and(|r| r.connection == connection) {
        *slot = None;
    }
    result
}

fn take_chunk(
    slot: &mut Option<Reassembly>,
    connection: u64,
    header: ChunkHeader,
    data: &[u8],
) -> Result<Option<Reassembled>, PeerError> {
    if data.len() > SNAPSHOT_CHUNK_BYTES {
        return Err(PeerError::ChunkTooLarge(data.len()));
    }
    match slot {
        Some(current) if current.connection == connection => {
            if header.transfer != current.header.transfer {
                return Err(PeerError::Interleaved {
                    new: header.transfer,
                    current: current.header.transfer,
                });
            }
            if header.chunk != current.next {
                return Err(PeerError::OutOfOrder {
                    chunk: header.chunk,
                    transfer: header.transfer,
                    expected: current.next,
                });
            }
            let announced = ChunkHeader {
                chunk: header.chunk,
                ..current.header
            };
            if header != announced {
                return Err(PeerError::HeaderMismatch {
                    chunk: header.chunk,
                    transfer: header.transfer,
                });
            }
        }
        // A chunk for another connection's transfer: only a new transfer
        // may start here, and it replaces that one (the old connection is
        // stale: its reader finds its transfer gone and closes).
        Some(_) | None if header.chunk != 0 => {
            return Err(PeerError::NoStart {
                chunk: header.chunk,
                transfer: header.transfer,
            });
        }
        Some(_) | None => {
            if header.kind != KIND_RAFT && header.kind != KIND_FORWARD {
                return Err(PeerError::ChunkedKind(header.kind));
            }
            if header.total > SNAPSHOT_BYTES_MAX {
                return Err(PeerError::TransferTooLarge(header.total));
            }
            if header.chunks != chunk_count(header.total as usize) {
                return Err(PeerError::ChunkCount {
                    total: header.total,
                    chunks: header.chunks,
                });
            }
            *slot = Some(Reassembly {
                connection,
                header,
                next: 0,
                data: Vec::with_capacity(header.total as usize),
                started: Instant::now(),
            });
        }
    }
    let current = slot.as_mut().expect("set above");
    if (current.data.len() + data.len()) as u64 > header.total {
        return Err(PeerError::Overlong {
            transfer: header.transfer,
            total: header.total,
        });
    }
    current.data.extend_from_slice(data);
    current.next += 1;
    if current.next < header.chunks {
        return Ok(None);
    }
    let done = slot.take().expect("current");
    if done.data.len() as u64 != header.total {
        return Err(PeerError::Short {
            transfer: header.transfer,
            got: done.data.len() as u64,
            total: header.total,
        });
    }
    if crc32fast::hash(&done.data) != header.crc {
        return Err(PeerError::Crc(header.transfer));
    }
    Ok(Some(Reassembled {
        kind: header.kind,
        payload: done.data,
        chunks: header.chunks,
        elapsed: done.started.elapsed(),
    }))
}

static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

fn accept_loop(listener: TcpListener, context: ReaderContext) {
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(stream) => stream,
            Err(error) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(%error, "cannot accept a peer connection");
                std::thread::sleep(Duration::from_millis(CONNECT_RETRY_MS));
                continue;
            }
        };
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let Some(slot) = HandshakeSlot::take(&context.handshakes) else {
            tracing::warn!(
                %peer,
                "peer refused: {} handshakes already in progress",
                handshake::PEER_HANDSHAKES_MAX
            );
            continue;
        };
        let context = context.clone();
        let _ = std::thread::Builder::new()
            .name("keel-peer-read".into())
            .spawn(move || {
                let known = context
                    .known
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                let acceptor = Acceptor {
                    self_id: context.self_id,
                    cluster_id: context.cluster_id.load(Ordering::Acquire),
                    known: &known,
                    auth: &context.auth,
                    adopt: Some(&context.cluster_id),
                };
                let (from, mut reader) = match handshake::authenticate(stream, &acceptor) {
                    Ok(authenticated) => authenticated,
                    Err(reason) => {
                        return tracing::warn!(
                            %peer,
                            %reason,
                            "peer refused; nothing it sent reaches raft"
                        )
                    }
                };
                drop(slot);
                tracing::debug!(%peer, from, auth = %describe_flags(context.auth.flags()), "peer connected");
                if let Some(handover) = context.inbox.handover.clone() {
                    let inbound = InboundConnection::new(from, peer, reader, context);
                    if handover.connections.send(inbound).is_ok() {
                        handover.bell.ring();
                    }
                    return;
                }
                if let Err(reason) = read_peer(&mut reader, from, &context) {
                    tracing::warn!(%peer, from, %reason, "peer connection closed");
                }
            });
    }
}

/// Frames of an authenticated peer into the driver's queue.
fn read_peer(
    reader: &mut BufReader<PeerStream>,
    from: u64,
    context: &ReaderContext,
) -> Result<(), PeerError> {
    let connection = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
    let result = read_frames(reader, context, from, connection);
    drop_transfer_of(context, from, connection);
    result
}

/// A transfer cut short with its connection is dropped whole.
fn drop_transfer_of(context: &ReaderContext, from: u64, connection: u64) {
    let mut transfers = context.transfers.lock().unwrap_or_else(|e| e.into_inner());
    if transfers
        .get(&from)
        .is_some_and(|r| r.connection == connection)
    {
        transfers.remove(&from);
    }
}

fn read_frames(
    reader: &mut impl Read,
    context: &ReaderContext,
    from: u64,
    connection: u64,
) -> Result<(), PeerError> {
    loop {
        let (kind, sender, payload) = read_frame(reader, PEER_FRAME_BYTES_MAX)?;
        let Some(input) = frame_input(context, from, connection, kind, sender, payload)? else {
            continue;
        };
        let inbox = match input {
            PeerInput::Forward(_) => &context.inbox.forwards,
            _ => &context.inbox.control,
        };
        if inbox.send(input).is_err() {
            return Ok(());
        }
    }
}

/// What one frame from peer `from` on `connection` brings: an input for
/// Raft, or None (a chunk of a transfer not yet whole). An error closes
/// the connection.
fn frame_input(
    context: &ReaderContext,
    from: u64,
    connection: u64,
    kind: u8,
    sender: u64,
    payload: Vec<u8>,
) -> Result<Option<PeerInput>, PeerError> {
    if sender != from {
        return Err(PeerError::WrongSender { sender, from });
    }
    if kind != KIND_CHUNK {
        return decode_input(kind, from, payload, context).map(Some);
    }
    let (header, data) = parse_chunk(&payload)?;
    let done = {
        let mut transfers = context.transfers.lock().unwrap_or_else(|e| e.into_inner());
        let mut slot = transfers.remove(&from);
        let done = accept_chunk(&mut slot, connection, header, data);
        if let Some(reassembly) = slot {
            transfers.insert(from, reassembly);
        }
        done?
    };
    let Some(done) = done else {
        return Ok(None);
    };
    let input = decode_input(done.kind, from, done.payload, context)?;
    if let PeerInput::Raft(message) = &input {
        let metadata = message.get_snapshot().get_metadata();
        tracing::info!(
            from,
            msg_type = ?message.get_msg_type(),
            index = metadata.index,
            term = metadata.term,
            bytes = header.total,
            chunks = done.chunks,
            ms = done.elapsed.as_millis() as u64,
            "{}",
            if message.get_msg_type() == MessageType::MsgSnapshot {
                "snapshot received"
            } else {
                "chunked message received"
            }
        );
    }
    Ok(Some(input))
}

fn decode_input(
    kind: u8,
    from: u64,
    payload: Vec<u8>,
    context: &ReaderContext,
) -> Result<PeerInput, PeerError> {
    Ok(match kind {
        KIND_RAFT => {
            let message = Message::parse_from_bytes(&payload)?;
            if message.from != from {
                return Err(PeerError::ClaimedSender(message.from));
            }
            if message.get_msg_type() == MessageType::MsgHeartbeatResponse {
                if let Some(rtt_us) = context.heartbeat.answered(from) {
                    if rtt_us >= HEARTBEAT_SLOW_MS * 1000 {
                        tracing::warn!(
                            peer = from,
                            rtt_ms = rtt_us / 1000,
                            "slow heartbeat round trip"
                        );
                    }
                }
            }
            PeerInput::Raft(Box::new(message))
        }
        KIND_FORWARD => PeerInput::Forward(payload),
        KIND_RECONFIG if payload.len() <= RECONFIG_FRAME_BYTES_MAX => PeerInput::Reconfig(payload),
        KIND_RECONFIG_ANSWER if payload.len() <= RECONFIG_FRAME_BYTES_MAX => {
            PeerInput::ReconfigAnswer(payload)
        }
        KIND_MEMBERS if payload.len() <= RECONFIG_FRAME_BYTES_MAX => PeerInput::Members(payload),
        KIND_TOUCH if payload.len().is_multiple_of(8) => PeerInput::Touch(
            payload
                .chunks_exact(8)
                .map(|c| i64::from_be_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        ),
        _ => return Err(PeerError::BadKind(kind)),
    })
}

/// One frame of at most `max_bytes` (its length field's value).
pub(crate) fn read_frame(
    reader: &mut impl Read,
    max_bytes: usize,
) -> Result<(u8, u64, Vec<u8>), PeerError> {
    let mut length = [0u8; 4];
    reader.read_exact(&mut length)?;
    let length = u32::from_be_bytes(length) as usize;
    if !(9..=max_bytes).contains(&length) {
        return Err(PeerError::FrameLength(length));
    }
    let mut head = [0u8; 9];
    reader.read_exact(&mut head)?;
    let mut payload = vec![0u8; length - 9];
    reader.read_exact(&mut payload)?;
    let from = u64::from_be_bytes(head[1..9].try_into().expect("8 bytes"));
    Ok((head[0], from, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_lengths_are_refused() {
        let frame = encode_frame(KIND_TOUCH, 3, &[1, 2, 3]);
        let (kind, from, payload) = read_frame(&mut &frame[..], PEER_FRAME_BYTES_MAX).unwrap();
        assert_eq!((kind, from, payload), (KIND_TOUCH, 3, vec![1, 2, 3]));
        let mut huge = frame.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(read_frame(&mut &huge[..], PEER_FRAME_BYTES_MAX).is_err());
        assert!(read_frame(&mut &frame[..6], PEER_FRAME_BYTES_MAX).is_err());
    }

    #[test]
    fn heartbeats_and_votes_take_the_control_lane() {
        let mut message = Message::default();
        for (kind, lane) in [
            (MessageType::MsgHeartbeat, Lane::Control),
            (MessageType::MsgRequestVote, Lane::Control),
            (MessageType::MsgAppend, Lane::Bulk),
            (MessageType::MsgSnapshot, Lane::Bulk),
        ] {
            message.set_msg_type(kind);
            assert_eq!(lane_of(&message), lane);
        }
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// The chunk frames of one transfer, as (header, data) pairs read back.
    fn chunked(payload: &[u8], transfer: u64) -> Vec<(ChunkHeader, Vec<u8>)> {
        let mut wire = Vec::new();
        write_chunked(&mut wire, 7, transfer, KIND_RAFT, payload).unwrap();
        let mut reader = &wire[..];
        let mut chunks = Vec::new();
        while !reader.is_empty() {
            let (kind, from, frame) = read_frame(&mut reader, PEER_FRAME_BYTES_MAX).unwrap();
            assert_eq!((kind, from), (KIND_CHUNK, 7));
            assert!(frame.len() <= SNAPSHOT_CHUNK_BYTES + CHUNK_HEADER_BYTES);
            let (header, data) = parse_chunk(&frame).unwrap();
            chunks.push((header, data.to_vec()));
        }
        chunks
    }

    fn feed(
        slot: &mut Option<Reassembly>,
        connection: u64,
        chunks: &[(ChunkHeader, Vec<u8>)],
    ) -> Result<Option<Reassembled>, String> {
        let mut last = None;
        for (header, data) in chunks {
            last = accept_chunk(slot, connection, *header, data).map_err(|e| e.to_string())?;
        }
        Ok(last)
    }

    #[test]
    fn a_large_payload_is_split_into_chunks_and_put_back_together() {
        for len in [
            0,
            1,
            SNAPSHOT_CHUNK_BYTES - 1,
            SNAPSHOT_CHUNK_BYTES,
            SNAPSHOT_CHUNK_BYTES + 1,
            5 * SNAPSHOT_CHUNK_BYTES + 12_345,
        ] {
            let payload = pattern(len);
            let chunks = chunked(&payload, 42);
            assert_eq!(chunks.len() as u32, chunk_count(len), "len {len}");
            assert!(chunks
                .iter()
                .enumerate()
                .all(|(i, (h, _))| h.chunk == i as u32 && h.total == len as u64));
            let mut slot = None;
            let done = feed(&mut slot, 1, &chunks).unwrap().expect("complete");
            assert_eq!(done.kind, KIND_RAFT);
            assert_eq!(done.chunks, chunks.len() as u32);
            assert!(done.payload == payload, "len {len}");
            assert!(slot.is_none());
        }
    }

    #[test]
    fn a_snapshot_message_survives_the_chunked_path() {
        let mut message = Message::default();
        message.set_msg_type(MessageType::MsgSnapshot);
        message.from = 7;
        message.to = 2;
        message.mut_snapshot().mut_metadata().index = 12345;
        message
            .mut_snapshot()
            .set_data(pattern(3 * SNAPSHOT_CHUNK_BYTES + 5).into());
        let chunks = chunked(&message.write_to_bytes().unwrap(), 1);
        assert_eq!(chunks.len(), 4);
        let done = feed(&mut None, 1, &chunks).unwrap().unwrap();
        let (inbox, inputs) = crossbeam_channel::unbounded();
        let context = ReaderContext {
            self_id: 2,
            cluster_id: Arc::default(),
            known: Arc::new(RwLock::new(vec![7])),
            auth: PeerAuth::default(),
            inbox: inbox.into(),
            heartbeat: Arc::default(),
            transfers: Arc::default(),
            handshakes: Arc::default(),
        };
        drop(inputs);
        match decode_input(done.kind, 7, done.payload, &context).unwrap() {
            PeerInput::Raft(back) => assert_eq!(*back, message),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn out_of_order_missing_or_corrupt_chunks_are_refused() {
        let payload = pattern(3 * SNAPSHOT_CHUNK_BYTES + 17);
        let chunks = chunked(&payload, 9);
        assert_eq!(chunks.len(), 4);

        // Out of order: 0, 2.
        let mut slot = None;
        let error = feed(&mut slot, 1, &[chunks[0].clone(), chunks[2].clone()]).unwrap_err();
        assert!(error.contains("out of order"), "{error}");
        assert!(slot.is_none(), "the transfer is dropped whole");

        // Starting in the middle.
        let error = feed(&mut None, 1, &chunks[1..]).unwrap_err();
        assert!(error.contains("without its start"), "{error}");

        // A flipped bit in the data: the CRC catches it at the end.
        let mut corrupt = chunks.clone();
        corrupt[2].1[100] ^= 1;
        let error = feed(&mut None, 1, &corrupt).unwrap_err();
        assert!(error.contains("CRC"), "{error}");

        // A header that changes its mind about the total.
        let mut lying = chunks.clone();
        lying[1].0.total += 1;
        let error = feed(&mut None, 1, &lying).unwrap_err();
        assert!(error.contains("disagrees"), "{error}");

        // A short chunk: the transfer ends before its announced size.
        let mut short = chunks.clone();
        short[3].1.pop();
        let error = feed(&mut None, 1, &short).unwrap_err();
        assert!(error.contains("ended after"), "{error}");

        // A second transfer on the same connection before the first ends.
        let other = chunked(&payload, 10);
        let mut slot = None;
        feed(&mut slot, 1, &chunks[..2]).unwrap();
        let error = feed(&mut slot, 1, &other[..1]).unwrap_err();
        assert!(error.contains("in progress"), "{error}");

        // Over the bound, or a chunk count that does not fit the size.
        let mut big = chunks[0].clone();
        big.0.total = SNAPSHOT_BYTES_MAX + 1;
        assert!(feed(&mut None, 1, &[big]).unwrap_err().contains("exceeds"));
        let mut miscounted = chunks[0].clone();
        miscounted.0.chunks = 99;
        assert!(feed(&mut None, 1, &[miscounted])
            .unwrap_err()
            .contains("announced"));
    }

    #[test]
    fn a_new_connection_takes_over_a_peers_transfer() {
        let payload = pattern(2 * SNAPSHOT_CHUNK_BYTES + 1);
        let first = chunked(&payload, 1);
        let second = chunked(&payload, 2);
        let mut slot = None;
        feed(&mut slot, 1, &first[..2]).unwrap();
        // The peer reconnected and starts again on connection 2.
        feed(&mut slot, 2, &second[..1]).unwrap();
        // The stale connection's next chunk is refused without disturbing
        // the new transfer, which completes.
        assert!(feed(&mut slot, 1, &first[2..]).is_err());
        let done = feed(&mut slot, 2, &second[1..]).unwrap().unwrap();
        assert!(done.payload == payload);
    }

    #[test]
    fn heartbeat_percentiles_come_from_the_histogram() {
        let stats = HeartbeatStats::default();
        assert_eq!(stats.summary(), HeartbeatSummary::default());
        for us in 1..=1000 {
            stats.record(us);
        }
        let summary = stats.summary();
        assert_eq!(summary.count, 1000);
        assert_eq!(summary.max_us, 1000);
        assert!(
            (500..=500 + 500 / 8).contains(&summary.p50_us),
            "{summary:?}"
        );
        assert!((990..=1000).contains(&summary.p99_us), "{summary:?}");
        stats.record(250_000);
        assert_eq!(stats.summary().max_us, 250_000);
        assert!(stats.summary().p99_us <= 1000 + 1000 / 8);
    }

    #[test]
    fn a_response_is_matched_with_the_oldest_unanswered_heartbeat() {
        let stats = HeartbeatStats::new([2, 3]);
        stats.answered(2); // nothing sent: ignored
        assert_eq!(stats.summary().count, 0);
        stats.sent(2);
        std::thread::sleep(Duration::from_millis(20));
        stats.sent(2); // the first is still unanswered: it keeps its time
        stats.answered(2);
        stats.answered(2); // the second response finds nothing pending
        let summary = stats.summary();
        assert_eq!(summary.count, 1);
        assert!(summary.max_us >= 20_000, "{summary:?}");
        stats.sent(3);
        stats.forget(3); // connection lost: no response will come
        stats.answered(3);
        stats.sent(99); // unknown peer
        stats.answered(99);
        assert_eq!(stats.summary().count, 1);
    }

    #[test]
    fn the_queue_bounds_frames_but_keeps_one_snapshot() {
        let queue = Queue::new();
        for _ in 0..PEER_QUEUE_FRAMES_MAX {
            assert!(queue.push(Item::Frame(vec![1])));
        }
        assert!(!queue.push(Item::Frame(vec![2])));
        let snapshot = |index| {
            let mut message = Message::default();
            message.mut_snapshot().mut_metadata().index = index;
            Item::Snapshot {
                message: Box::new(message),
                attempt: 0,
            }
        };
        assert!(queue.push(snapshot(1)));
        assert!(
            queue.push(snapshot(2)),
            "a newer snapshot replaces the queued one"
        );
        let mut batch = VecDeque::new();
        let (writer, _peer) = loopback_writer();
        let (writer, written) = queue.take_all(&mut batch, writer, Instant::now()).unwrap();
        assert_eq!(batch.len(), PEER_QUEUE_FRAMES_MAX + 1);
        match batch.back() {
            Some(Item::Snapshot { message, .. }) => {
                assert_eq!(message.get_snapshot().get_metadata().index, 2)
            }
            _ => panic!("the snapshot is last"),
        }
        assert!(queue.push(Item::Frame(vec![3])), "taking frees the room");
        assert!(queue.push(snapshot(3)));
        queue.drop_stale(Some(snapshot(1)));
        batch.clear();
        let (writer, written) = queue.take_all(&mut batch, writer, written).unwrap();
        assert_eq!(
            batch.len(),
            1,
            "only the newest snapshot survives a disconnect"
        );
        queue.close();
        batch.clear();
        assert!(queue.take_all(&mut batch, writer, written).is_none());
        assert!(queue.wait_closed(Duration::from_secs(5)));
    }

    /// A connected plain writer and the peer's end of it.
    fn loopback_writer() -> (BufWriter<PeerStream>, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (peer, _) = listener.accept().unwrap();
        let mut socket = handshake::Socket::handshaking(tcp);
        socket.end_deadline().unwrap();
        let stream = PeerStream::Plain(socket);
        (BufWriter::new(stream), peer)
    }

    fn wait_parked(queue: &Queue) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while queue.lock().parked.is_none() {
            assert!(Instant::now() < deadline, "the sender never parked");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_frame_queued_while_the_sender_waits_is_written_directly_and_a_large_one_wakes_it() {
        let queue = Arc::new(Queue::new());
        let (writer, mut peer) = loopback_writer();
        peer.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let sender = {
            let queue = queue.clone();
            std::thread::spawn(move || {
                let mut batch = VecDeque::new();
                let lent = queue.take_all(&mut batch, writer, Instant::now());
                (lent.map(|(_, written)| written), batch)
            })
        };
        wait_parked(&queue);
        assert!(queue.push(Item::Frame(b"direct".to_vec())));
        let mut got = [0u8; 6];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"direct");
        {
            let state = queue.lock();
            assert!(state.items.is_empty(), "written by push, not queued");
            assert!(state.parked.is_some(), "the sender thread still waits");
        }
        let large = vec![7u8; DIRECT_WRITE_BYTES_MAX + 1];
        assert!(queue.push(Item::Frame(large)));
        let (written, batch) = sender.join().unwrap();
        assert!(written.is_some());
        assert_eq!(batch.len(), 1, "the large frame went to the sender thread");
        assert!(matches!(&batch[0], Item::Frame(f) if f.len() == DIRECT_WRITE_BYTES_MAX + 1));
        assert!(
            queue.lock().parked.is_none(),
            "the sender took its writer back"
        );
    }

    #[test]
    fn a_lane_idle_past_the_check_is_not_written_directly() {
        let queue = Arc::new(Queue::new());
        let (writer, _peer) = loopback_writer();
        let long_ago = Instant::now() - Duration::from_millis(IDLE_CHECK_MS + 10);
        let sender = {
            let queue = queue.clone();
            std::thread::spawn(move || {
                let mut batch = VecDeque::new();
                let lent = queue.take_all(&mut batch, writer, long_ago);
                (lent.is_some(), batch.len())
            })
        };
        wait_parked(&queue);
        assert!(queue.push(Item::Frame(b"checked first".to_vec())));
        assert_eq!(
            sender.join().unwrap(),
            (true, 1),
            "the sender thread checks an idle connection before writing"
        );
    }

    /// Queues, from member 2 to member 1, a snapshot of `index` large
    /// enough to go in three chunks, then an append; both messages.
    fn queue_snapshot_and_append(queue: &Queue, index: u64) -> (Message, Message) {
        let mut message = Message::default();
        message.set_msg_type(MessageType::MsgSnapshot);
        message.from = 2;
        message.to = 1;
        message.mut_snapshot().mut_metadata().index = index;
        message
            .mut_snapshot()
            .set_data(pattern(5 * SNAPSHOT_CHUNK_BYTES / 2).into());
        let mut append = Message::default();
        append.set_msg_type(MessageType::MsgAppend);
        append.from = 2;
        append.to = 1;
        queue.push(Item::Snapshot {
            message: Box::new(message.clone()),
            attempt: 0,
        });
        queue.push(Item::Frame(encode_frame(
            KIND_RAFT,
            2,
            &append.write_to_bytes().unwrap(),
        )));
        (message, append)
    }

    #[test]
    fn a_snapshot_crosses_a_real_connection_in_chunks() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let (inbox, inputs) = crossbeam_channel::unbounded();
        let context = ReaderContext {
            self_id: 1,
            cluster_id: Arc::new(AtomicU64::new(77)),
            known: Arc::new(RwLock::new(vec![1, 2])),
            auth: PeerAuth::default(),
            inbox: inbox.into(),
            heartbeat: Arc::new(HeartbeatStats::new([2])),
            transfers: Arc::default(),
            handshakes: Arc::default(),
        };
        std::thread::spawn(move || accept_loop(listener, context));
        let transport = Transport {
            self_id: 2,
            peers: Arc::default(),
            heartbeat: Arc::default(),
            reports: Arc::default(),
            cluster_id: Arc::new(AtomicU64::new(77)),
            known: Arc::default(),
            auth: PeerAuth::default(),
        };
        let link = Link {
            self_id: 2,
            cluster_id: transport.cluster_id.clone(),
            peer_id: 1,
            address,
            auth: PeerAuth::default(),
            heartbeat: transport.heartbeat.clone(),
            reports: transport.reports.clone(),
        };
        let queue = spawn_sender(link, Lane::Bulk).unwrap();
        let (message, append) = queue_snapshot_and_append(&queue, 99);
        let timeout = Duration::from_secs(10);
        match inputs.recv_timeout(timeout).unwrap() {
            PeerInput::Raft(back) => assert_eq!(*back, message),
            other => panic!("{other:?}"),
        }
        match inputs.recv_timeout(timeout).unwrap() {
            PeerInput::Raft(back) => assert_eq!(*back, append),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            transport.take_snapshot_reports(),
            vec![SnapshotReport {
                to: 1,
                index: 99,
                sent: true
            }]
        );
        queue.close();
    }

    #[test]
    fn frames_are_parsed_out_of_a_buffer_once_whole() {
        let frame = encode_frame(KIND_TOUCH, 3, &[1, 2, 3]);
        for cut in 0..frame.len() {
            assert!(frame_in(&frame[..cut], PEER_FRAME_BYTES_MAX)
                .unwrap()
                .is_none());
        }
        let mut two = frame.clone();
        two.extend_from_slice(&encode_frame(KIND_FORWARD, 3, &[9]));
        let first = frame_in(&two, PEER_FRAME_BYTES_MAX).unwrap().unwrap();
        assert_eq!(
            (first.kind, first.sender, first.payload),
            (KIND_TOUCH, 3, &[1u8, 2, 3][..])
        );
        let second = frame_in(&two[frame.len()..], PEER_FRAME_BYTES_MAX)
            .unwrap()
            .unwrap();
        assert_eq!((second.kind, second.payload), (KIND_FORWARD, &[9u8][..]));
        // The length is checked before the frame is whole.
        let mut huge = frame[..4].to_vec();
        huge[..4].copy_from_slice(&(PEER_FRAME_BYTES_MAX as u32 + 1).to_be_bytes());
        assert!(frame_in(&huge, PEER_FRAME_BYTES_MAX).is_err());
        assert!(frame_in(&[0, 0, 0, 8], PEER_FRAME_BYTES_MAX).is_err());
    }

    /// The driver's path: the accept side hands the authenticated
    /// connection over, and the poller reads a chunked snapshot, an append
    /// and a forwarded batch off it, in order, forwards held apart.
    #[test]
    fn a_connection_handed_to_the_poller_delivers_its_frames_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let (inbox, _unused) = crossbeam_channel::unbounded();
        let bell = crate::wait::Bell::new().unwrap();
        let (arrivals_sender, arrivals) = crossbeam_channel::unbounded();
        let mut inbox: PeerInbox = inbox.into();
        inbox.handover = Some(Handover {
            connections: arrivals_sender,
            bell: bell.clone(),
        });
        let context = ReaderContext {
            self_id: 1,
            cluster_id: Arc::new(AtomicU64::new(77)),
            known: Arc::new(RwLock::new(vec![1, 2])),
            auth: PeerAuth::default(),
            inbox,
            heartbeat: Arc::new(HeartbeatStats::new([2])),
            transfers: Arc::default(),
            handshakes: Arc::default(),
        };
        std::thread::spawn(move || accept_loop(listener, context));
        let mut poller = crate::wait::Poller::new(bell, arrivals).unwrap();
        let link = Link {
            self_id: 2,
            cluster_id: Arc::new(AtomicU64::new(77)),
            peer_id: 1,
            address,
            auth: PeerAuth::default(),
            heartbeat: Arc::default(),
            reports: Arc::default(),
        };
        let queue = spawn_sender(link, Lane::Bulk).unwrap();
        let (message, append) = queue_snapshot_and_append(&queue, 0);
        queue.push(Item::Frame(encode_frame(KIND_FORWARD, 2, b"batch")));
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.len() < 2 || !poller.has_forwards() {
            assert!(Instant::now() < deadline, "got {} inputs", got.len());
            poller.wait(false, Duration::from_millis(50), || false, &mut |input| {
                got.push(input)
            });
        }
        match &got[..] {
            [PeerInput::Raft(first), PeerInput::Raft(second)] => {
                assert_eq!(**first, message);
                assert_eq!(**second, append);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(poller.take_forward(), Some(PeerInput::Forward(b)) if b == b"batch"));
        assert!(poller.take_forward().is_none());
        queue.close();
    }
}
