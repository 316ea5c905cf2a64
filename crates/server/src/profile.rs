//! The lock × operation profiler, after the one Alibaba's Pangu master used
//! to find its bottlenecks. Every lock on the server's request paths has a
//! name (`Lock`); every acquisition is charged to the operation the thread
//! is working on (`Op`, set by the connection for each request and by the
//! apply step, the timers and the four-letter words for their work). Per
//! (lock, operation) it counts acquisitions and sums the time spent waiting
//! for the lock and holding it.
//!
//! Off by default (`profile_locks = true` in the TOML or `--profile-locks`
//! turns it on); off, an acquisition costs one relaxed atomic load more.
//! The counters are process-wide, like a metrics registry: several servers
//! in one test process share them. `lcks` prints the matrix sorted by total
//! wait.

use std::cell::Cell;
use std::fmt::Write;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// The named locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// The node state (tree, watches, reply registry), shared: reads.
    NodeRead,
    /// The node state, exclusive: the apply step, snapshot begin/end.
    NodeWrite,
    /// The watch manager (inside the node state).
    Watches,
    /// The reply registry (inside the node state).
    Routes,
    /// The session tracker.
    Sessions,
    /// `cons`'s table of open connections (`shared.rs`).
    Connections,
    /// Sessions active since the last report to the leader (`shared.rs`).
    Touched,
    /// Read-only mode's local sessions (`shared.rs`, `readonly.rs`).
    LocalSessions,
}

const LOCKS: [Lock; 8] = [
    Lock::NodeRead,
    Lock::NodeWrite,
    Lock::Watches,
    Lock::Routes,
    Lock::Sessions,
    Lock::Connections,
    Lock::Touched,
    Lock::LocalSessions,
];

impl Lock {
    pub fn name(self) -> &'static str {
        match self {
            Lock::NodeRead => "node.read",
            Lock::NodeWrite => "node.write",
            Lock::Watches => "watches",
            Lock::Routes => "routes",
            Lock::Sessions => "sessions",
            Lock::Connections => "connections",
            Lock::Touched => "touched",
            Lock::LocalSessions => "local_sessions",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// An operation: a ZooKeeper request by opcode, or the server's own work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op(u8);

/// (opcode, name) of the requests the profiler tells apart; any other
/// opcode is charged to `other`.
const REQUESTS: [(i32, &str); 34] = [
    (1, "create"),
    (2, "delete"),
    (3, "exists"),
    (4, "getData"),
    (5, "setData"),
    (6, "getACL"),
    (7, "setACL"),
    (8, "getChildren"),
    (9, "sync"),
    (11, "ping"),
    (12, "getChildren2"),
    (13, "check"),
    (14, "multi"),
    (15, "create2"),
    (16, "reconfig"),
    (17, "checkWatches"),
    (18, "removeWatches"),
    (19, "createContainer"),
    (20, "deleteContainer"),
    (21, "createTTL"),
    (22, "multiRead"),
    (100, "auth"),
    (101, "setWatches"),
    (102, "sasl"),
    (103, "getEphemerals"),
    (104, "getAllChildrenNumber"),
    (105, "setWatches2"),
    (106, "addWatch"),
    (107, "whoAmI"),
    (-11, "closeSession"),
    (500, "filteredList"),
    (501, "checkNotExists"),
    (502, "createIfNotExists"),
    (503, "removeRecursive"),
];
/// The server's own work, after the requests.
const INTERNAL: [&str; 8] = [
    "other", "connect", "reply", "apply", "expire", "reaper", "fourlw", "snapshot",
];
/// Operations, requests and internal work together.
pub const OPS: usize = REQUESTS.len() + INTERNAL.len();

impl Op {
    pub const OTHER: Op = Op::internal(0);
    pub const CONNECT: Op = Op::internal(1);
    pub const REPLY: Op = Op::internal(2);
    pub const APPLY: Op = Op::internal(3);
    pub const EXPIRE: Op = Op::internal(4);
    pub const REAPER: Op = Op::internal(5);
    pub const FOURLW: Op = Op::internal(6);
    pub const SNAPSHOT: Op = Op::internal(7);

    const fn internal(at: usize) -> Op {
        assert!(at < INTERNAL.len());
        Op((REQUESTS.len() + at) as u8)
    }

    /// The operation of a request with this opcode.
    pub fn of_opcode(opcode: i32) -> Op {
        match REQUESTS.iter().position(|(code, _)| *code == opcode) {
            Some(at) => Op(at as u8),
            None => Op::OTHER,
        }
    }

    /// Every operation, requests first (in `REQUESTS`' order), then `other`.
    pub fn all() -> impl Iterator<Item = Op> {
        (0..OPS).map(|at| Op(at as u8))
    }

    /// Its place in per-operation tables (0..OPS).
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The opcode of a request operation; None for the server's own work
    /// and `other`.
    pub fn opcode(self) -> Option<i32> {
        REQUESTS.get(self.0 as usize).map(|(code, _)| *code)
    }

    pub fn name(self) -> &'static str {
        let at = self.0 as usize;
        if at < REQUESTS.len() {
            REQUESTS[at].1
        } else {
            INTERNAL[at - REQUESTS.len()]
        }
    }
}

/// Per (lock, op): acquisitions, wait ns, hold ns.
struct Cells {
    count: AtomicU64,
    wait_ns: AtomicU64,
    hold_ns: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Cells = Cells {
    count: AtomicU64::new(0),
    wait_ns: AtomicU64::new(0),
    hold_ns: AtomicU64::new(0),
};
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_ROW: [Cells; OPS] = [EMPTY; OPS];

static MATRIX: [[Cells; OPS]; LOCKS.len()] = [EMPTY_ROW; LOCKS.len()];
static ENABLED: AtomicBool = AtomicBool::new(false);
/// When the profiler was last turned on or reset (ns since the epoch
/// `START`), for the report's rate.
static SINCE_NS: AtomicU64 = AtomicU64::new(0);
static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

thread_local! {
    static CURRENT: Cell<Op> = const { Cell::new(Op::OTHER) };
}

fn now_ns() -> u64 {
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Turns the profiler on or off (counters are kept; `reset` clears them).
pub fn enable(on: bool) {
    if on && !ENABLED.load(Ordering::Relaxed) {
        SINCE_NS.store(now_ns(), Ordering::Relaxed);
    }
    ENABLED.store(on, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Clears every counter.
pub fn reset() {
    for row in &MATRIX {
        for cells in row {
            cells.count.store(0, Ordering::Relaxed);
            cells.wait_ns.store(0, Ordering::Relaxed);
            cells.hold_ns.store(0, Ordering::Relaxed);
        }
    }
    SINCE_NS.store(now_ns(), Ordering::Relaxed);
}

/// Charges this thread's acquisitions to `op` until the scope ends (then
/// the previous operation is current again). Never held across an await.
pub fn enter(op: Op) -> OpScope {
    OpScope(CURRENT.with(|current| current.replace(op)))
}

#[must_use = "the operation is current only while the scope lives"]
pub struct OpScope(Op);

impl Drop for OpScope {
    fn drop(&mut self) {
        CURRENT.with(|current| current.set(self.0));
    }
}

/// A lock guard that charges its hold time when dropped.
pub struct Held<G> {
    guard: G,
    lock: Lock,
    op: Op,
    /// When the lock was acquired; None when the profiler was off.
    acquired_ns: Option<u64>,
}

/// Takes a lock through `take`, charging the wait (and later the hold) to
/// (`lock`, the thread's current operation).
#[inline]
pub fn acquire<G>(lock: Lock, take: impl FnOnce() -> G) -> Held<G> {
    if !enabled() {
        return Held {
            guard: take(),
            lock,
            op: Op::OTHER,
            acquired_ns: None,
        };
    }
    let op = CURRENT.with(Cell::get);
    let asked_ns = now_ns();
    let guard = take();
    let acquired_ns = now_ns();
    let cells = &MATRIX[lock.index()][op.0 as usize];
    cells.count.fetch_add(1, Ordering::Relaxed);
    cells
        .wait_ns
        .fetch_add(acquired_ns - asked_ns, Ordering::Relaxed);
    Held {
        guard,
        lock,
        op,
        acquired_ns: Some(acquired_ns),
    }
}

impl<G> Drop for Held<G> {
    fn drop(&mut self) {
        if let Some(acquired_ns) = self.acquired_ns {
            let cells = &MATRIX[self.lock.index()][self.op.0 as usize];
            cells
                .hold_ns
                .fetch_add(now_ns().saturating_sub(acquired_ns), Ordering::Relaxed);
        }
    }
}

impl<G: Deref> Deref for Held<G> {
    type Target = G::Target;

    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: DerefMut> DerefMut for Held<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

/// One row of the matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub lock: &'static str,
    pub op: &'static str,
    pub count: u64,
    pub wait_ns: u64,
    pub hold_ns: u64,
}

/// The non-empty rows, most total wait first (then most hold).
pub fn rows() -> Vec<Row> {
    let mut rows = Vec::new();
    for lock in LOCKS {
        for (at, cells) in MATRIX[lock.index()].iter().enumerate() {
            let count = cells.count.load(Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            rows.push(Row {
                lock: lock.name(),
                op: Op(at as u8).name(),
                count,
                wait_ns: cells.wait_ns.load(Ordering::Relaxed),
                hold_ns: cells.hold_ns.load(Ordering::Relaxed),
            });
        }
    }
    rows.sort_by(|a, b| {
        (b.wait_ns, b.hold_ns, a.lock, a.op).cmp(&(a.wait_ns, a.hold_ns, b.lock, b.op))
    });
    rows
}

/// The `lcks` answer: a header line, a column line, then one line per
/// (lock, operation) sorted by total wait.
pub fn report() -> String {
    if !enabled() {
        return "lock profiler is off (profile_locks = true in the config or \
                --profile-locks turns it on)\n"
            .into();
    }
    let since_s = now_ns().saturating_sub(SINCE_NS.load(Ordering::Relaxed)) as f64 / 1e9;
    let mut out = format!("lock profiler: on for {since_s:.1} s\n");
    let _ = writeln!(
        out,
        "{:<12} {:<20} {:>12} {:>12} {:>12} {:>10} {:>10}",
        "lock", "operation", "count", "wait_ms", "hold_ms", "wait_ns/op", "hold_ns/op"
    );
    for row in rows() {
        let _ = writeln!(
            out,
            "{:<12} {:<20} {:>12} {:>12.3} {:>12.3} {:>10} {:>10}",
            row.lock,
            row.op,
            row.count,
            row.wait_ns as f64 / 1e6,
            row.hold_ns as f64 / 1e6,
            row.wait_ns / row.count,
            row.hold_ns / row.count,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    // The counters are process-wide: one test drives them all, so tests
    // running in parallel do not see each other's counts.
    #[test]
    fn charges_wait_and_hold_to_the_lock_and_the_current_operation() {
        assert_eq!(Op::of_opcode(4).name(), "getData");
        assert_eq!(Op::of_opcode(-11).name(), "closeSession");
        assert_eq!(Op::of_opcode(9999).name(), "other");
        assert_eq!(Op::APPLY.name(), "apply");
        assert_eq!(Op::SNAPSHOT.name(), "snapshot");

        let lock = Mutex::new(0u32);
        enable(false);
        {
            let _op = enter(Op::of_opcode(4));
            *acquire(Lock::Watches, || lock.lock()) += 1;
        }
        assert!(
            rows().iter().all(|r| r.lock != "watches"),
            "off: nothing counted"
        );

        enable(true);
        reset();
        {
            let _op = enter(Op::of_opcode(4));
            let mut held = acquire(Lock::Watches, || lock.lock());
            *held += 1;
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        {
            let _op = enter(Op::APPLY);
            // Another thread holds the lock for a while: this one waits.
            let guard = lock.lock();
            std::thread::scope(|scope| {
                let waiter = scope.spawn(|| {
                    let _op = enter(Op::APPLY);
                    *acquire(Lock::Sessions, || lock.lock()) += 1;
                });
                std::thread::sleep(std::time::Duration::from_millis(20));
                drop(guard);
                waiter.join().unwrap();
            });
        }
        let rows = rows();
        let watches = rows
            .iter()
            .find(|r| r.lock == "watches" && r.op == "getData")
            .expect("a getData row for watches");
        assert_eq!(watches.count, 1);
        assert!(watches.hold_ns >= 5_000_000, "{watches:?}");
        let sessions = rows
            .iter()
            .find(|r| r.lock == "sessions" && r.op == "apply")
            .expect("an apply row for sessions");
        assert!(sessions.wait_ns >= 10_000_000, "{sessions:?}");
        assert!(
            rows.windows(2)
                .all(|pair| pair[0].wait_ns >= pair[1].wait_ns),
            "sorted by total wait"
        );
        let report = report();
        assert!(report.starts_with("lock profiler: on for"), "{report}");
        assert!(report.contains("sessions     apply"), "{report}");
        assert_eq!(
            CURRENT.with(Cell::get),
            Op::OTHER,
            "scopes restore the operation"
        );
        enable(false);
        assert!(super::report().starts_with("lock profiler is off"));
    }
}
