//! What the network side of a node holds: the `Node` handle (tree,
//! watches, sessions, reply registry: see node.rs for who owns what), the
//! Raft handle, request counters and the connection table. Every lock here
//! is a leaf: none is held while another is taken.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::time::Instant;

use keel_consensus::RaftHandle;
use keel_metrics::Histogram;
use keel_tree::{Applied, Txn};
use parking_lot::{Mutex, MutexGuard};

use crate::node::ApplyObserver;
use crate::profile::{self, Held, Lock, Op};
use tokio::sync::mpsc;

use crate::config::ServerConfig;
use crate::node::{Clock, Node, Outbound, Outlet};
use crate::readonly::LocalSessions;

/// Messages (replies, watch events, a close) queued for one connection.
/// The apply side never waits: a connection whose queue is full is not
/// reading its socket fast enough, and is closed (its session survives;
/// the client reconnects and re-registers its watches).
pub const CONNECTION_OUTBOUND_MAX: usize = 64 * 1024;

/// A connection's side of the reply registry: its bounded queue.
pub struct ConnectionOutlet {
    pub sender: mpsc::Sender<Outbound>,
    /// Set when `sender` is full: the connection closes itself.
    pub overflow: std::sync::Arc<Overflow>,
}

impl Outlet for ConnectionOutlet {
    /// Queues `message` for the connection without waiting; a full queue
    /// closes the connection (see CONNECTION_OUTBOUND_MAX).
    fn send(&self, message: Outbound) {
        match self.sender.try_send(message) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.overflow.signal(),
        }
    }
}

/// A connection's outbound queue overflowed (a message was dropped): the
/// connection must close. A flag the connection reads once per turn (a
/// full queue wakes it anyway: its receive is ready), and a wake-up for a
/// connection blocked writing to a client that does not read.
#[derive(Default)]
pub struct Overflow {
    full: AtomicBool,
    wake: tokio::sync::Notify,
}

impl Overflow {
    /// Called by the apply side when the queue is full. `notify_one`
    /// keeps a permit when nobody waits, so a wait that starts later
    /// returns at once.
    pub fn signal(&self) {
        self.full.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    pub fn is_set(&self) -> bool {
        self.full.load(Ordering::Acquire)
    }

    /// Returns once `signal` was called (before or during the wait).
    pub async fn wait(&self) {
        if self.is_set() {
            return;
        }
        self.wake.notified().await;
    }
}

/// The server's monotonic clock (session deadlines).
pub struct MonotonicClock(Instant);

impl MonotonicClock {
    pub fn start() -> MonotonicClock {
        MonotonicClock(Instant::now())
    }
}

impl Clock for MonotonicClock {
    fn now_ms(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }
}

/// Per-connection facts for `cons`, `stat` and `dump`. The connection
/// keeps an `Arc` and bumps the counters without taking the table's lock
/// (the profiler showed two lock round trips per reply).
#[derive(Debug)]
pub struct ConnectionInfo {
    pub peer: SocketAddr,
    pub session_id: i64,
    pub timeout_ms: u32,
    /// When the connection was accepted, ms since the epoch (`cons`'s
    /// `est`: ServerCnxn.established).
    pub established_ms: i64,
    /// Packets read from the client, the ConnectRequest included
    /// (ServerCnxn.packetsReceived).
    pub received: AtomicU64,
    /// Packets written to the client: replies, the ConnectResponse and
    /// watch events (ServerCnxn.packetsSent).
    pub sent: AtomicU64,
    /// Requests of this connection read and not yet answered (ZooKeeper's
    /// outstanding requests, summed over connections).
    pub outstanding: AtomicU64,
    /// What the connection's last answered request was and how long the
    /// requests took (ServerCnxn.updateStatsForResponse).
    pub responses: ResponseStats,
}

impl ConnectionInfo {
    /// ServerCnxn.resetStats (`crst`): the packet counts and the response
    /// statistics start again. Another thread may be answering a request
    /// of this connection meanwhile: a counter it stores just after the
    /// reset keeps that one response (no lock is taken on either side).
    pub fn reset(&self) {
        self.received.store(0, Ordering::Relaxed);
        self.sent.store(0, Ordering::Relaxed);
        self.responses.reset();
    }
}

/// A request's name in `cons`'s `lop` (FinalRequestProcessor's `lastOp`
/// strings, not Request.op2String's long names). `Null` is what a
/// connection shows before its first answered request (ServerCnxn's
/// fields start null/0: a resumed session's connection prints `lop=null`);
/// `Na` is what `crst` leaves and what a request gets whose write failed
/// as a whole (FinalRequestProcessor throws the error txn's code before it
/// names the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LastOp {
    Null,
    Na,
    Sess,
    Clos,
    Crea,
    Dele,
    Exis,
    Getd,
    Setd,
    Geta,
    Seta,
    Getc,
    Sync,
    Ping,
    Chec,
    Mult,
    Reco,
    Chkw,
    Remw,
    Mltr,
    Setw,
    Stw2,
    Addw,
    Homi,
    Gete,
    Getacn,
}

impl LastOp {
    const ALL: [LastOp; 26] = [
        LastOp::Null,
        LastOp::Na,
        LastOp::Sess,
        LastOp::Clos,
        LastOp::Crea,
        LastOp::Dele,
        LastOp::Exis,
        LastOp::Getd,
        LastOp::Setd,
        LastOp::Geta,
        LastOp::Seta,
        LastOp::Getc,
        LastOp::Sync,
        LastOp::Ping,
        LastOp::Chec,
        LastOp::Mult,
        LastOp::Reco,
        LastOp::Chkw,
        LastOp::Remw,
        LastOp::Mltr,
        LastOp::Setw,
        LastOp::Stw2,
        LastOp::Addw,
        LastOp::Homi,
        LastOp::Gete,
        LastOp::Getacn,
    ];

    /// The request `op_code` answered; `failed_write`: it was a write (a
    /// txn in ZooKeeper: create*, delete*, setData, setACL, check, multi,
    /// reconfig, sync) and failed as a whole, so ZooKeeper logged an error
    /// txn and names it NA (a multi whose ops failed one by one is MULT).
    /// Ops ZooKeeper has no case for (ClickHouse Keeper's) are NA too.
    pub fn of(op_code: i32, failed_write: bool) -> LastOp {
        use keel_jute::opcode;
        if failed_write {
            return LastOp::Na;
        }
        match op_code {
            opcode::CREATE_SESSION => LastOp::Sess,
            opcode::CLOSE_SESSION => LastOp::Clos,
            opcode::CREATE | opcode::CREATE2 | opcode::CREATE_CONTAINER | opcode::CREATE_TTL => {
                LastOp::Crea
            }
            opcode::DELETE | opcode::DELETE_CONTAINER => LastOp::Dele,
            opcode::EXISTS => LastOp::Exis,
            opcode::GET_DATA => LastOp::Getd,
            opcode::SET_DATA => LastOp::Setd,
            opcode::GET_ACL => LastOp::Geta,
            opcode::SET_ACL => LastOp::Seta,
            opcode::GET_CHILDREN | opcode::GET_CHILDREN2 => LastOp::Getc,
            opcode::SYNC => LastOp::Sync,
            opcode::PING => LastOp::Ping,
            opcode::CHECK => LastOp::Chec,
            opcode::MULTI => LastOp::Mult,
            opcode::RECONFIG => LastOp::Reco,
            opcode::CHECK_WATCHES => LastOp::Chkw,
            opcode::REMOVE_WATCHES => LastOp::Remw,
            opcode::MULTI_READ => LastOp::Mltr,
            opcode::SET_WATCHES => LastOp::Setw,
            opcode::SET_WATCHES2 => LastOp::Stw2,
            opcode::ADD_WATCH => LastOp::Addw,
            opcode::WHO_AM_I => LastOp::Homi,
            opcode::GET_EPHEMERALS => LastOp::Gete,
            opcode::GET_ALL_CHILDREN_NUMBER => LastOp::Getacn,
            _ => LastOp::Na,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LastOp::Null => "null",
            LastOp::Na => "NA",
            LastOp::Sess => "SESS",
            LastOp::Clos => "CLOS",
            LastOp::Crea => "CREA",
            LastOp::Dele => "DELE",
            LastOp::Exis => "EXIS",
            LastOp::Getd => "GETD",
            LastOp::Setd => "SETD",
            LastOp::Geta => "GETA",
            LastOp::Seta => "SETA",
            LastOp::Getc => "GETC",
            LastOp::Sync => "SYNC",
            LastOp::Ping => "PING",
            LastOp::Chec => "CHEC",
            LastOp::Mult => "MULT",
            LastOp::Reco => "RECO",
            LastOp::Chkw => "CHKW",
            LastOp::Remw => "REMW",
            LastOp::Mltr => "MLTR",
            LastOp::Setw => "SETW",
            LastOp::Stw2 => "STW2",
            LastOp::Addw => "ADDW",
            LastOp::Homi => "HOMI",
            LastOp::Gete => "GETE",
            LastOp::Getacn => "GETACN",
        }
    }

    fn from_u8(value: u8) -> LastOp {
        Self::ALL.get(value as usize).copied().unwrap_or(LastOp::Na)
    }
}

/// One connection's response statistics, ServerCnxn's fields of the same
/// names. Only the connection's own task writes them (`update`: relaxed
/// loads and stores, no read-modify-write, no lock: plain moves on x86);
/// `cons` reads them from another thread, and `crst` stores the reset
/// values. Times are ms of `monotonic_us`'s clock, latencies ms as
/// ZooKeeper counts them (the difference of the two ms timestamps).
#[derive(Debug)]
pub struct ResponseStats {
    last_op: AtomicU8,
    last_cxid: AtomicI64,
    last_zxid: AtomicI64,
    last_response_ms: AtomicU64,
    last_latency_ms: AtomicU64,
    /// u64::MAX: none since a reset (printed 0).
    min_latency_ms: AtomicU64,
    max_latency_ms: AtomicU64,
    count: AtomicU64,
    total_latency_ms: AtomicU64,
}

/// What `cons` prints of a `ResponseStats`, read at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseView {
    pub last_op: LastOp,
    /// Negative: none (after a reset): `cons` leaves `lcxid` out.
    pub last_cxid: i64,
    pub last_zxid: i64,
    pub last_response_ms: u64,
    pub last_latency_ms: u64,
    pub min_latency_ms: u64,
    /// The integer average, as ServerCnxn.getAvgLatency (0 without any).
    pub avg_latency_ms: u64,
    pub max_latency_ms: u64,
}

impl Default for ResponseStats {
    /// A new connection's: Java's field defaults (ServerCnxn's constructor
    /// does not reset them), so `lop=null`, `lcxid=0x0`, `lzxid=0x0`, and
    /// a minimum of 0 that stays 0 until the first `crst`.
    fn default() -> Self {
        ResponseStats {
            last_op: AtomicU8::new(LastOp::Null as u8),
            last_cxid: AtomicI64::new(0),
            last_zxid: AtomicI64::new(0),
            last_response_ms: AtomicU64::new(0),
            last_latency_ms: AtomicU64::new(0),
            min_latency_ms: AtomicU64::new(0),
            max_latency_ms: AtomicU64::new(0),
            count: AtomicU64::new(0),
            total_latency_ms: AtomicU64::new(0),
        }
    }
}

impl ResponseStats {
    /// A request (`cxid`; a negative one, ping's or setWatches', is not
    /// kept) was answered at `now_ms` with `zxid`; it arrived at
    /// `request_ms` (ServerCnxn.updateStatsForResponse).
    #[inline]
    pub fn update(&self, cxid: i32, zxid: i64, op: LastOp, request_ms: u64, now_ms: u64) {
        let relaxed = Ordering::Relaxed;
        if cxid >= 0 {
            self.last_cxid.store(cxid as i64, relaxed);
        }
        self.last_zxid.store(zxid, relaxed);
        self.last_op.store(op as u8, relaxed);
        self.last_response_ms.store(now_ms, relaxed);
        let latency = now_ms.saturating_sub(request_ms);
        self.last_latency_ms.store(latency, relaxed);
        if latency < self.min_latency_ms.load(relaxed) {
            self.min_latency_ms.store(latency, relaxed);
        }
        if latency > self.max_latency_ms.load(relaxed) {
            self.max_latency_ms.store(latency, relaxed);
        }
        self.count.store(self.count.load(relaxed) + 1, relaxed);
        let total = self.total_latency_ms.load(relaxed);
        self.total_latency_ms.store(total + latency, relaxed);
    }

    /// ServerCnxn.resetStats' values: lop NA, no cxid, zxid -1.
    pub fn reset(&self) {
        let relaxed = Ordering::Relaxed;
        self.last_op.store(LastOp::Na as u8, relaxed);
        self.last_cxid.store(-1, relaxed);
        self.last_zxid.store(-1, relaxed);
        self.last_response_ms.store(0, relaxed);
        self.last_latency_ms.store(0, relaxed);
        self.min_latency_ms.store(u64::MAX, relaxed);
        self.max_latency_ms.store(0, relaxed);
        self.count.store(0, relaxed);
        self.total_latency_ms.store(0, relaxed);
    }

    pub fn view(&self) -> ResponseView {
        let relaxed = Ordering::Relaxed;
        let count = self.count.load(relaxed);
        let min = self.min_latency_ms.load(relaxed);
        ResponseView {
            last_op: LastOp::from_u8(self.last_op.load(relaxed)),
            last_cxid: self.last_cxid.load(relaxed),
            last_zxid: self.last_zxid.load(relaxed),
            last_response_ms: self.last_response_ms.load(relaxed),
            last_latency_ms: self.last_latency_ms.load(relaxed),
            min_latency_ms: if min == u64::MAX { 0 } else { min },
            avg_latency_ms: match count {
                0 => 0,
                n => self.total_latency_ms.load(relaxed) / n,
            },
            max_latency_ms: self.max_latency_ms.load(relaxed),
        }
    }
}

/// µs since `at` on the process's monotonic clock, whose origin is fixed
/// and arbitrary (its first use), as Java's System.nanoTime's is: `cons`
/// prints its ms as `lresp` where ZooKeeper prints
/// Time.currentElapsedTime().
pub fn monotonic_us(at: Instant) -> u64 {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    at.saturating_duration_since(origin).as_micros() as u64
}

/// What the server counts and times itself (the Raft side's measurements
/// are in `RaftStatus`): `srvr`, `stat`, `mntr` and the Prometheus endpoint
/// read these same atomics. Made before the node loads (the client port
/// counts its refusals from the first moment) and shared by `Arc`.
pub struct Stats {
    started: Instant,
    pub packets_received: AtomicU64,
    pub packets_sent: AtomicU64,
    pub latency_count: AtomicU64,
    pub latency_total_us: AtomicU64,
    pub latency_min_us: AtomicU64,
    pub latency_max_us: AtomicU64,
    /// Requests received, per operation (`profile::Op`'s index).
    received: Box<[AtomicU64]>,
    /// Reads and writes answered, per operation: receipt (a write: its
    /// proposal) to reply, µs. ZooKeeper's readlatency and updatelatency
    /// are these merged.
    latency_us: Box<[Histogram]>,
    /// Client-port connections open now, counted from when they are taken
    /// (a TLS one: once its TLS handshake is done) until they close, the
    /// ones still to send their first packet and a four-letter word's
    /// included: ZooKeeper's getNumAliveConnections (its factories'
    /// connection sets), what srvr/stat's `Connections:` and mntr's
    /// `zk_num_alive_connections` print. Held by `AliveConnection`.
    alive_connections: AtomicU64,
    /// Connections refused: over the per-address limit, or a session asked
    /// for while the node loads (ZooKeeper's `connection_rejected`).
    pub connection_rejected: AtomicU64,
    /// Connection tasks that panicked and a Raft driver that died
    /// (ZooKeeper's `unrecoverable_error_count`: a critical thread's
    /// unexpected exception).
    pub unrecoverable_errors: AtomicU64,
    /// A transaction's creation (its wall time, on the node it came to)
    /// until it is applied here, µs (`propagation_latency`); not counted
    /// while the node replays its log at start.
    pub propagation_us: Histogram,
    /// The node has caught up after its start (propagation counts from then).
    pub caught_up: AtomicBool,
    /// Loading the newest snapshot at start, µs (`startup_snap_load_time`).
    pub startup_snapshot_load_us: Histogram,
    /// Reading the log behind it and applying what it had committed, µs
    /// (`startup_txns_load_time`).
    pub startup_log_replay_us: Histogram,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            started: Instant::now(),
            packets_received: AtomicU64::new(0),
            packets_sent: AtomicU64::new(0),
            latency_count: AtomicU64::new(0),
            latency_total_us: AtomicU64::new(0),
            latency_min_us: AtomicU64::new(0),
            latency_max_us: AtomicU64::new(0),
            received: (0..profile::OPS).map(|_| AtomicU64::new(0)).collect(),
            latency_us: (0..profile::OPS).map(|_| Histogram::new()).collect(),
            alive_connections: AtomicU64::new(0),
            connection_rejected: AtomicU64::new(0),
            unrecoverable_errors: AtomicU64::new(0),
            propagation_us: Histogram::new(),
            caught_up: AtomicBool::new(false),
            startup_snapshot_load_us: Histogram::new(),
            startup_log_replay_us: Histogram::new(),
        }
    }
}

impl Stats {
    /// Counts a client-port connection as alive until the returned guard
    /// is dropped (ZooKeeper's addCnxn / removeCnxn).
    pub fn connection_opened(self: &std::sync::Arc<Self>) -> AliveConnection {
        self.alive_connections.fetch_add(1, Ordering::Relaxed);
        AliveConnection(self.clone())
    }

    /// Client-port connections open now (`alive_connections`).
    pub fn alive_connections(&self) -> u64 {
        self.alive_connections.load(Ordering::Relaxed)
    }

    /// Milliseconds since the server started (ZooKeeper's `uptime`).
    pub fn uptime_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A request of operation `op` arrived.
    #[inline]
    pub fn count_received(&self, op: Op) {
        self.received[op.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Requests of `op` received so far.
    pub fn received(&self, op: Op) -> u64 {
        self.received[op.index()].load(Ordering::Relaxed)
    }

    /// The latencies of `op`'s answered requests (µs).
    pub fn latency_of(&self, op: Op) -> &Histogram {
        &self.latency_us[op.index()]
    }

    /// A read or write of `op_code` answered `micros` after it arrived (a
    /// write: after it was proposed).
    #[inline]
    pub fn record_request(&self, op_code: i32, micros: u64) {
        self.latency_us[Op::of_opcode(op_code).index()].record(micros);
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_total_us.fetch_add(micros, Ordering::Relaxed);
        self.latency_max_us.fetch_max(micros, Ordering::Relaxed);
        let _ = self
            .latency_min_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |min| {
                (min == 0 || micros < min).then_some(micros.max(1))
            });
    }

    /// srvr/mntr's latency since the last reset: (average ms, min ms,
    /// max ms), as ZooKeeper's ServerStats reports it.
    pub fn latency_ms(&self) -> (f64, u64, u64) {
        let count = self.latency_count.load(Ordering::Relaxed);
        let total = self.latency_total_us.load(Ordering::Relaxed);
        let avg_ms = if count == 0 {
            0.0
        } else {
            total as f64 / count as f64 / 1000.0
        };
        (
            avg_ms,
            self.latency_min_us.load(Ordering::Relaxed) / 1000,
            self.latency_max_us.load(Ordering::Relaxed) / 1000,
        )
    }

    /// `srst`: the counters srvr and mntr show start again (the
    /// Prometheus histograms are cumulative and stay). `crst` resets the
    /// connections' counters instead (`ConnectionInfo::reset`).
    pub fn reset(&self) {
        for counter in [
            &self.packets_received,
            &self.packets_sent,
            &self.latency_count,
            &self.latency_total_us,
            &self.latency_min_us,
            &self.latency_max_us,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

/// One open client-port connection, counted in `Stats::alive_connections`
/// until dropped. A connection drops it before it closes its socket (as
/// ZooKeeper's close removes the connection before closing the socket), so
/// a client that saw its connection end sees it gone from the count.
pub struct AliveConnection(std::sync::Arc<Stats>);

impl Drop for AliveConnection {
    fn drop(&mut self) {
        self.0.alive_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The server's side of the apply step: ZooKeeper's propagation latency
/// (wall clocks of two nodes, so skew shows in it; a negative one is left
/// out, as ZooKeeper does). The clock is read once per entry.
pub struct ApplyMetrics {
    stats: std::sync::Arc<Stats>,
    entry_index: u64,
    entry_time_ms: i64,
}

impl ApplyMetrics {
    pub fn new(stats: std::sync::Arc<Stats>) -> ApplyMetrics {
        ApplyMetrics {
            stats,
            entry_index: 0,
            entry_time_ms: 0,
        }
    }
}

impl ApplyObserver for ApplyMetrics {
    fn applied(&mut self, index: u64, txn: &Txn, _applied: &Applied) {
        if !self.stats.caught_up.load(Ordering::Relaxed) {
            return;
        }
        if index != self.entry_index {
            self.entry_index = index;
            self.entry_time_ms = wall_clock_ms();
        }
        if let Ok(latency_ms) = u64::try_from(self.entry_time_ms - txn.time_ms) {
            self.stats.propagation_us.record(latency_ms * 1000);
        }
    }
}

/// The values `mntr` and the Prometheus endpoint both report, read once
/// (ZooKeeper's registerMetrics gauges plus Keel's tree facts).
#[derive(Debug, Clone)]
pub struct Gauges {
    pub uptime_ms: u64,
    pub avg_latency_ms: f64,
    pub min_latency_ms: u64,
    pub max_latency_ms: u64,
    pub packets_received: u64,
    pub packets_sent: u64,
    pub num_alive_connections: u64,
    pub outstanding_requests: u64,
    /// ZooKeeper's reported node count (`reported_znode_count`), one more
    /// than the tree holds.
    pub znode_count: u64,
    pub watch_count: u64,
    pub ephemerals_count: u64,
    pub approximate_data_size: u64,
    pub global_sessions: u64,
    /// Read-only mode's local sessions alive on this node.
    pub local_sessions: u64,
    pub open_file_descriptor_count: u64,
    pub max_file_descriptor_count: u64,
    pub tree_digest: u64,
    pub last_zxid: i64,
    pub tree_bytes: u64,
    pub snapshot_preimage_bytes: u64,
}

pub struct Shared {
    pub config: ServerConfig,
    pub node: Node<ConnectionOutlet>,
    pub raft: RaftHandle,
    pub stats: std::sync::Arc<Stats>,
    connections: Mutex<HashMap<u64, std::sync::Arc<ConnectionInfo>>>,
    pub next_connection_id: AtomicU64,
    pub next_session_id: AtomicI64,
    /// Sessions active here since the last report to the leader.
    touched: Mutex<std::collections::HashSet<i64>>,
    /// Read-only mode is on (`readonly.rs`): set before the global
    /// sessions' connections are closed, cleared before the local ones'
    /// are, so a handshake racing a switch sees the flag or gets closed.
    read_only: AtomicBool,
    /// Read-only mode's local sessions (a leaf lock, profiled).
    local_sessions: Mutex<LocalSessions>,
    /// Set when the server stops: connections take no further request
    /// and close once the ones taken are answered (`lib.rs::drain`).
    drain: tokio::sync::watch::Sender<bool>,
    /// Whose ReadIndex barriers (`kv::barrier::ReadBarrier`, passed by
    /// the apply step) a resumed session's handshake waits for as Keel
    /// KV's reads do (`reconnect_barrier`).
    kv_engine: std::sync::Arc<crate::kv::KvEngine>,
}

impl Shared {
    pub fn new(
        config: ServerConfig,
        node: Node<ConnectionOutlet>,
        raft: RaftHandle,
        stats: std::sync::Arc<Stats>,
        kv_engine: std::sync::Arc<crate::kv::KvEngine>,
    ) -> Shared {
        let first_session_id =
            keel_session::initial_session_id(config.server_id as u8, wall_clock_ms() as u64);
        Shared {
            node,
            raft,
            stats,
            connections: Mutex::new(HashMap::new()),
            next_connection_id: AtomicU64::new(1),
            next_session_id: AtomicI64::new(first_session_id),
            touched: Mutex::new(std::collections::HashSet::new()),
            read_only: AtomicBool::new(false),
            drain: tokio::sync::watch::channel(false).0,
            kv_engine,
            local_sessions: Mutex::new(LocalSessions::new(
                config.server_id as u8,
                u64::from(config.tick_time_ms),
                wall_clock_ms() as u64,
            )),
            config,
        }
    }

    /// `cons`'s table of open connections (a leaf lock, profiled).
    pub fn connections(
        &self,
    ) -> Held<MutexGuard<'_, HashMap<u64, std::sync::Arc<ConnectionInfo>>>> {
        profile::acquire(Lock::Connections, || self.connections.lock())
    }

    /// Sessions active here since the last report (a leaf lock, profiled).
    pub fn touched(&self) -> Held<MutexGuard<'_, std::collections::HashSet<i64>>> {
        profile::acquire(Lock::Touched, || self.touched.lock())
    }

    /// Waits until this node has applied everything the leader had
    /// committed when the wait began (a ReadIndex barrier, shared with
    /// Keel KV's reads). A session resuming here after a leader change
    /// must see the fate of the write its old connection lost: ZooKeeper
    /// serves a client only once it has synced with the new leader, whose
    /// first commit decides every write the old one left behind. Without
    /// it a follower that has not heard of the election yet answers from
    /// before that decision (Curator's protected create then finds no
    /// node, makes a second one, and the first blocks its lock's queue).
    pub async fn reconnect_barrier(&self) -> Result<(), crate::kv::barrier::BarrierTimeout> {
        self.kv_engine.barrier.wait_through(&self.raft).await
    }

    /// What a connection watches to learn that the server stops.
    pub fn drain_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.drain.subscribe()
    }

    /// Tells every connection to finish what it took and close.
    pub fn start_drain(&self) {
        self.drain.send_replace(true);
    }

    /// The node serves read-only clients only (`readonly.rs`).
    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::SeqCst)
    }

    /// Switches read-only mode on or off (`lib.rs::watch_read_only`).
    pub fn set_read_only(&self, on: bool) {
        self.read_only.store(on, Ordering::SeqCst);
    }

    /// Read-only mode's local sessions (a leaf lock, profiled).
    pub fn local_sessions(&self) -> Held<MutexGuard<'_, LocalSessions>> {
        profile::acquire(Lock::LocalSessions, || self.local_sessions.lock())
    }

    /// Milliseconds on the server's monotonic clock (session expiry).
    pub fn now_ms(&self) -> u64 {
        self.node.now_ms()
    }

    pub fn raft(&self) -> &RaftHandle {
        &self.raft
    }

    /// The gauges of `mntr` and the metrics endpoint. The tree's read lock
    /// is held only while its own values are copied (applies wait on it).
    pub fn gauges(&self) -> Gauges {
        let (nodes, ephemerals, data_size, digest, last_zxid, tree_bytes, preimage_bytes) = {
            let tree = self.node.tree();
            (
                tree.node_count(),
                tree.ephemeral_count(),
                tree.approximate_data_size(),
                tree.digest(),
                tree.last_zxid(),
                tree.memory_bytes(),
                tree.snapshot_preimage_bytes(),
            )
        };
        let watch_count = self.node.with_watches(|w| w.watch_count());
        let outstanding_requests = self
            .connections()
            .values()
            .map(|c| c.outstanding.load(Ordering::Relaxed))
            .sum();
        let (avg_latency_ms, min_latency_ms, max_latency_ms) = self.stats.latency_ms();
        Gauges {
            uptime_ms: self.stats.uptime_ms(),
            avg_latency_ms,
            min_latency_ms,
            max_latency_ms,
            packets_received: self.stats.packets_received.load(Ordering::Relaxed),
            packets_sent: self.stats.packets_sent.load(Ordering::Relaxed),
            // Every open connection, not only the sessions' (the one
            // asking a four-letter word is one too).
            num_alive_connections: self.stats.alive_connections(),
            outstanding_requests,
            znode_count: reported_znode_count(nodes),
            watch_count: watch_count as u64,
            ephemerals_count: ephemerals as u64,
            approximate_data_size: data_size,
            global_sessions: self.node.session_count() as u64,
            local_sessions: self.local_sessions().len() as u64,
            open_file_descriptor_count: open_file_descriptors(),
            max_file_descriptor_count: max_file_descriptors(),
            tree_digest: digest,
            last_zxid,
            tree_bytes,
            snapshot_preimage_bytes: preimage_bytes as u64,
        }
    }
}

/// The node count ZooKeeper 3.8 reports (srvr/stat `Node count:`, mntr's
/// `zk_znode_count`, the `znode_count` gauge) for a tree of `nodes`
/// znodes: DataTree.getNodeCount is `nodes.size()`, and DataTree keeps its
/// root under two keys, "" and "/" (`nodes.put("", root);
/// nodes.putWithoutDigest("/", root)`), so it counts the root twice: 5 on a
/// fresh server holding 4 znodes. Only what is reported: the tree's own
/// `node_count()` stays the real count.
pub fn reported_znode_count(nodes: usize) -> u64 {
    nodes as u64 + 1
}

/// File descriptors this process has open (`/proc/self/fd`; 0 where there
/// is no /proc).
pub fn open_file_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .map(|dir| dir.count() as u64)
        .unwrap_or(0)
}

/// The soft limit on open files (`/proc/self/limits`, as the JVM's
/// MaxFileDescriptorCount); 0 if it cannot be read, u64::MAX if unlimited.
pub fn max_file_descriptors() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .map_or(0, |soft| soft.parse().unwrap_or(u64::MAX))
}

/// Wall-clock milliseconds since the epoch: ctime/mtime of znodes.
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use keel_jute::opcode;

    use super::*;

    /// FinalRequestProcessor's lastOp strings, seen in ZooKeeper 3.8.0's
    /// cons after each request: a failed create or delete shows NA, a
    /// failed getData GETD, a multi with a failed op MULT, a multi failed
    /// whole (MarshallingError) NA.
    #[test]
    fn requests_are_named_as_zookeepers_final_request_processor_names_them() {
        for (op_code, name) in [
            (opcode::CREATE_SESSION, "SESS"),
            (opcode::CLOSE_SESSION, "CLOS"),
            (opcode::CREATE, "CREA"),
            (opcode::CREATE2, "CREA"),
            (opcode::CREATE_CONTAINER, "CREA"),
            (opcode::CREATE_TTL, "CREA"),
            (opcode::DELETE, "DELE"),
            (opcode::DELETE_CONTAINER, "DELE"),
            (opcode::EXISTS, "EXIS"),
            (opcode::GET_DATA, "GETD"),
            (opcode::SET_DATA, "SETD"),
            (opcode::GET_ACL, "GETA"),
            (opcode::SET_ACL, "SETA"),
            (opcode::GET_CHILDREN, "GETC"),
            (opcode::GET_CHILDREN2, "GETC"),
            (opcode::SYNC, "SYNC"),
            (opcode::PING, "PING"),
            (opcode::CHECK, "CHEC"),
            (opcode::MULTI, "MULT"),
            (opcode::RECONFIG, "RECO"),
            (opcode::CHECK_WATCHES, "CHKW"),
            (opcode::REMOVE_WATCHES, "REMW"),
            (opcode::MULTI_READ, "MLTR"),
            (opcode::SET_WATCHES, "SETW"),
            (opcode::SET_WATCHES2, "STW2"),
            (opcode::ADD_WATCH, "ADDW"),
            (opcode::WHO_AM_I, "HOMI"),
            (opcode::GET_EPHEMERALS, "GETE"),
            (opcode::GET_ALL_CHILDREN_NUMBER, "GETACN"),
            (opcode::CREATE_IF_NOT_EXISTS, "NA"),
        ] {
            assert_eq!(LastOp::of(op_code, false).name(), name, "{op_code}");
            assert_eq!(LastOp::of(op_code, true), LastOp::Na, "{op_code}");
        }
        for op in LastOp::ALL {
            assert_eq!(LastOp::from_u8(op as u8), op);
        }
    }

    /// ServerCnxn's statistics: Java's defaults on a new connection (the
    /// constructor does not reset them: lop=null, a minimum stuck at 0),
    /// resetStats' values after crst (lop=NA, lcxid -1: not printed, lzxid
    /// -1, no minimum yet), the integer average, negative cxids not kept.
    #[test]
    fn response_stats_start_update_and_reset_as_zookeepers() {
        let stats = ResponseStats::default();
        let view = stats.view();
        assert_eq!(
            (
                view.last_op,
                view.last_cxid,
                view.last_zxid,
                view.min_latency_ms
            ),
            (LastOp::Null, 0, 0, 0)
        );
        stats.update(0, 0x37, LastOp::Sess, 100, 107);
        stats.update(1, 0x38, LastOp::Crea, 200, 202);
        stats.update(-2, 0x38, LastOp::Ping, 300, 300);
        let view = stats.view();
        assert_eq!(
            view,
            ResponseView {
                last_op: LastOp::Ping,
                last_cxid: 1,
                last_zxid: 0x38,
                last_response_ms: 300,
                last_latency_ms: 0,
                min_latency_ms: 0,
                avg_latency_ms: 3,
                max_latency_ms: 7,
            }
        );
        stats.reset();
        let view = stats.view();
        assert_eq!(
            view,
            ResponseView {
                last_op: LastOp::Na,
                last_cxid: -1,
                last_zxid: -1,
                last_response_ms: 0,
                last_latency_ms: 0,
                min_latency_ms: 0,
                avg_latency_ms: 0,
                max_latency_ms: 0,
            }
        );
        stats.update(4, 0x40, LastOp::Getd, 10, 13);
        stats.update(5, 0x40, LastOp::Getd, 20, 25);
        let view = stats.view();
        assert_eq!(
            (
                view.min_latency_ms,
                view.avg_latency_ms,
                view.max_latency_ms
            ),
            (3, 4, 5),
            "after a reset the minimum is a real one"
        );
    }

    /// ZooKeeper 3.8 on a fresh standalone server (/, /zookeeper,
    /// /zookeeper/quota, /zookeeper/config) says `Node count: 5`, and stays
    /// one ahead of the real count as nodes come and go (seen live: 11 with
    /// 6 more znodes, 6 with one ephemeral).
    #[test]
    fn the_reported_node_count_counts_the_root_twice_as_zookeepers_data_tree_does() {
        assert_eq!(reported_znode_count(4), 5);
        assert_eq!(reported_znode_count(10), 11);
        assert_eq!(reported_znode_count(1), 2);
    }
}
