//! State shared by connection tasks, the Raft driver's apply step and the
//! timers. Lock order, everywhere: tree → watches → routes → sessions.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use keel_consensus::RaftHandle;
use keel_jute::{ErrorCode, Response, WatcherEvent};
use keel_session::SessionTracker;
use keel_tree::watch::WatchManager;
use keel_tree::DataTree;
use parking_lot::{Mutex, RwLock};
use tokio::sync::mpsc;

use crate::config::ServerConfig;

/// xid of transactions the server makes itself (expiry, reaper): no reply.
pub const INTERNAL_XID: i32 = i32::MIN;
/// Secret mixed into session passwords; equal on every node of a cluster.
pub const SESSION_SECRET: u64 = 0x6b65_656c_2d7a_6b21;

/// What the apply step (or the server) sends to one connection.
#[derive(Debug)]
pub enum Outbound {
    /// The result of this session's write, in log order.
    Reply {
        xid: i32,
        zxid: i64,
        op_code: i32,
        result: Result<Response, ErrorCode>,
    },
    /// A watch fired at `zxid` (used for ordering; the wire carries -1).
    Event { zxid: i64, event: WatcherEvent },
    /// The session ended or moved: close the connection after flushing.
    Close { reason: &'static str },
}

impl Outbound {
    pub fn zxid(&self) -> i64 {
        match self {
            Outbound::Reply { zxid, .. } | Outbound::Event { zxid, .. } => *zxid,
            Outbound::Close { .. } => i64::MAX,
        }
    }
}

/// Messages (replies, watch events, a close) queued for one connection.
/// The apply side never waits: a connection whose queue is full is not
/// reading its socket fast enough, and is closed (its session survives;
/// the client reconnects and re-registers its watches).
pub const CONNECTION_OUTBOUND_MAX: usize = 64 * 1024;

/// Where a session's connection listens.
pub struct Route {
    pub connection_id: u64,
    pub sender: mpsc::Sender<Outbound>,
    /// Signalled when `sender` is full: the connection closes itself.
    pub overflow: std::sync::Arc<tokio::sync::Notify>,
}

impl Route {
    /// Queues `message` for the connection without waiting; a full queue
    /// closes the connection (see CONNECTION_OUTBOUND_MAX).
    pub fn send(&self, message: Outbound) {
        match self.sender.try_send(message) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.overflow.notify_one(),
        }
    }
}

/// Per-connection facts for `cons`, `stat` and `dump`.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    pub peer: SocketAddr,
    pub session_id: i64,
    pub timeout_ms: u32,
    pub received: u64,
    pub sent: u64,
    pub last_zxid: i64,
}

/// Request counters and latencies for srvr/stat/mntr.
#[derive(Default)]
pub struct Stats {
    pub packets_received: AtomicU64,
    pub packets_sent: AtomicU64,
    pub latency_count: AtomicU64,
    pub latency_total_us: AtomicU64,
    pub latency_min_us: AtomicU64,
    pub latency_max_us: AtomicU64,
}

impl Stats {
    pub fn record_latency_us(&self, micros: u64) {
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_total_us.fetch_add(micros, Ordering::Relaxed);
        self.latency_max_us.fetch_max(micros, Ordering::Relaxed);
        let _ = self
            .latency_min_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |min| {
                (min == 0 || micros < min).then_some(micros.max(1))
            });
    }

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

pub struct Shared {
    pub config: ServerConfig,
    pub tree: RwLock<DataTree>,
    pub watches: Mutex<WatchManager>,
    pub routes: Mutex<HashMap<i64, Route>>,
    pub sessions: Mutex<SessionTracker>,
    pub raft: OnceLock<RaftHandle>,
    pub stats: Stats,
    pub connections: Mutex<HashMap<u64, ConnectionInfo>>,
    pub next_connection_id: AtomicU64,
    pub next_session_id: AtomicI64,
    /// Sessions active here since the last report to the leader.
    pub touched: Mutex<std::collections::HashSet<i64>>,
    started: Instant,
}

impl Shared {
    pub fn new(config: ServerConfig, tree: DataTree) -> Shared {
        let now_ms = wall_clock_ms() as u64;
        let mut tracker = SessionTracker::new(config.tick_time_ms as u64);
        for (session_id, timeout_ms) in tree.sessions() {
            // A restarted server gives every session a full timeout, as
            // ZooKeeper does: clients get the chance to reconnect.
            tracker.add(session_id, timeout_ms, 0);
        }
        let first_session_id = keel_session::initial_session_id(config.server_id as u8, now_ms);
        Shared {
            tree: RwLock::new(tree),
            watches: Mutex::new(WatchManager::new()),
            routes: Mutex::new(HashMap::new()),
            sessions: Mutex::new(tracker),
            raft: OnceLock::new(),
            stats: Stats::default(),
            connections: Mutex::new(HashMap::new()),
            next_connection_id: AtomicU64::new(1),
            next_session_id: AtomicI64::new(first_session_id),
            touched: Mutex::new(std::collections::HashSet::new()),
            started: Instant::now(),
            config,
        }
    }

    /// Milliseconds on the server's monotonic clock (session expiry).
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub fn raft(&self) -> &RaftHandle {
        self.raft.get().expect("raft started before serving")
    }

    pub fn send_to(&self, session_id: i64, message: Outbound) {
        if let Some(route) = self.routes.lock().get(&session_id) {
            route.send(message);
        }
    }
}

/// Wall-clock milliseconds since the epoch: ctime/mtime of znodes.
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
