//! What the network side of a node holds: the `Node` handle (tree,
//! watches, sessions, reply registry: see node.rs for who owns what), the
//! Raft handle, request counters and the connection table. Every lock here
//! is a leaf: none is held while another is taken.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

use keel_consensus::RaftHandle;
use parking_lot::{Mutex, MutexGuard};

use crate::profile::{self, Held, Lock};
use tokio::sync::mpsc;

use crate::config::ServerConfig;
use crate::node::{Clock, Node, Outbound, Outlet};

/// Messages (replies, watch events, a close) queued for one connection.
/// The apply side never waits: a connection whose queue is full is not
/// reading its socket fast enough, and is closed (its session survives;
/// the client reconnects and re-registers its watches).
pub const CONNECTION_OUTBOUND_MAX: usize = 64 * 1024;

/// A connection's side of the reply registry: its bounded queue.
pub struct ConnectionOutlet {
    pub sender: mpsc::Sender<Outbound>,
    /// Signalled when `sender` is full: the connection closes itself.
    pub overflow: std::sync::Arc<tokio::sync::Notify>,
}

impl Outlet for ConnectionOutlet {
    /// Queues `message` for the connection without waiting; a full queue
    /// closes the connection (see CONNECTION_OUTBOUND_MAX).
    fn send(&self, message: Outbound) {
        match self.sender.try_send(message) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.overflow.notify_one(),
        }
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
    pub received: AtomicU64,
    pub sent: AtomicU64,
    pub last_zxid: AtomicI64,
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
    pub node: Node<ConnectionOutlet>,
    pub raft: RaftHandle,
    pub stats: Stats,
    connections: Mutex<HashMap<u64, std::sync::Arc<ConnectionInfo>>>,
    pub next_connection_id: AtomicU64,
    pub next_session_id: AtomicI64,
    /// Sessions active here since the last report to the leader.
    touched: Mutex<std::collections::HashSet<i64>>,
}

impl Shared {
    pub fn new(config: ServerConfig, node: Node<ConnectionOutlet>, raft: RaftHandle) -> Shared {
        let first_session_id =
            keel_session::initial_session_id(config.server_id as u8, wall_clock_ms() as u64);
        Shared {
            node,
            raft,
            stats: Stats::default(),
            connections: Mutex::new(HashMap::new()),
            next_connection_id: AtomicU64::new(1),
            next_session_id: AtomicI64::new(first_session_id),
            touched: Mutex::new(std::collections::HashSet::new()),
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

    /// Milliseconds on the server's monotonic clock (session expiry).
    pub fn now_ms(&self) -> u64 {
        self.node.now_ms()
    }

    pub fn raft(&self) -> &RaftHandle {
        &self.raft
    }
}

/// Wall-clock milliseconds since the epoch: ctime/mtime of znodes.
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
