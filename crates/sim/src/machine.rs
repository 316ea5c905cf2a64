//! The simulated node's state machine is the server's own
//! (`keel_server::node::NodeMachine`): the same apply step, reply registry,
//! local reads, session moves and expiry. This file only plugs it into the
//! simulator: connections are outlets that queue what the node sends into
//! one outbox per node (the simulator routes it over its network), the
//! clock is the simulator's, and an observer records what each apply did
//! for the checkers. The Keel KV keyspace is the server's too
//! (`KvApplier` over a `KvEngine` without threads, `start_inline`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keel_kv::shard::Shard;
use keel_server::kv::{KvApplier, KvEngine};
use keel_server::node::{ApplyObserver, Clock, Node, NodeMachine, Outbound, Outlet};
use keel_tree::{owner_kind, Applied, DataTree, Event, OwnerKind, Txn, TxnOp};
use parking_lot::Mutex;

/// One message the node sent to one client connection.
#[derive(Debug)]
pub struct Delivery {
    pub connection_id: u64,
    pub message: Outbound,
}

/// Everything a node sent since the simulator last looked, in order.
pub type Outbox = Arc<Mutex<Vec<Delivery>>>;

/// A simulated client connection, as the node's reply registry holds it.
pub struct SimOutlet {
    pub connection_id: u64,
    pub outbox: Outbox,
}

impl Outlet for SimOutlet {
    fn send(&self, message: Outbound) {
        self.outbox.lock().push(Delivery {
            connection_id: self.connection_id,
            message,
        });
    }
}

/// The simulator's logical clock.
pub struct SimClock(pub Arc<AtomicU64>);

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One applied transaction, for the simulator's global log and checkers.
#[derive(Debug, Clone)]
pub struct AppliedTxn {
    pub index: u64,
    pub zxid: i64,
    pub events: Vec<Event>,
    pub closed_session: Option<i64>,
    /// The reaper deleted a node here.
    pub reaped: Option<Reaped>,
}

/// A node the reaper deleted, as it was just before.
#[derive(Debug, Clone)]
pub struct Reaped {
    pub path: String,
    pub kind: OwnerKind,
}

/// The node a DeleteContainer is about to delete, as it is before.
struct Reaping {
    path: String,
    time_ms: i64,
    before: Option<keel_tree::Node>,
}

/// Shards of every simulated node's keyspace: two, so writes and
/// snapshots span shards as on a server with several cores.
pub const SIM_KV_SHARDS: usize = 2;

/// What the checkers need from each apply.
pub struct Recorder {
    /// The node's keyspace: its digest joins the tree's.
    kv: Arc<KvEngine>,
    /// The keyspace's digest as of the engine's `applied_index` (the
    /// keyspace changes only with it): borrowing the shards and walking
    /// every slot's table after every entry would double a batch's time.
    kv_digest: (u64, u64),
    /// The simulator's clock (ms): no deletion may be dated later.
    now_ms: Arc<AtomicU64>,
    /// (applied index, digest of the tree and the keyspace) after each
    /// entry, for the replica check.
    pub digests: Vec<(u64, u64)>,
    pub applied: Vec<AppliedTxn>,
    /// The first broken ephemeral contract seen, if any.
    pub ephemerals: Option<String>,
    /// The first deletion by the reaper of a node that was not due.
    pub reaper: Option<String>,
    reaping: Option<Reaping>,
}

impl Recorder {
    fn kv_digest(&mut self) -> u64 {
        let index = self.kv.applied_index();
        if self.kv_digest.0 != index {
            let digest = self
                .kv
                .inspect(|view| kv_digest(view.shards().map(|s| &*s)));
            self.kv_digest = (index, digest);
        }
        self.kv_digest.1
    }
}

impl ApplyObserver for Recorder {
    fn applying(&mut self, _index: u64, txn: &Txn, tree: &DataTree) {
        self.reaping = match &txn.op {
            TxnOp::DeleteContainer { path } => Some(Reaping {
                path: path.clone(),
                time_ms: txn.time_ms,
                before: tree.node(path),
            }),
            _ => None,
        };
    }

    fn applied(&mut self, index: u64, _txn: &Txn, applied: &Applied) {
        let reaping = self.reaping.take();
        let reaped = match reaping {
            Some(reaping) if applied.result.is_ok() => {
                let now_ms = self.now_ms.load(Ordering::Relaxed) as i64;
                let checked = if reaping.time_ms > now_ms {
                    Err(format!(
                        "reaped {} by a time {} ms ahead of the clock",
                        reaping.path,
                        reaping.time_ms - now_ms
                    ))
                } else {
                    reap_due(&reaping)
                };
                if let (Err(problem), None) = (&checked, &self.reaper) {
                    self.reaper = Some(format!("index {index}: {problem}"));
                }
                checked.ok()
            }
            _ => None,
        };
        self.applied.push(AppliedTxn {
            index,
            zxid: applied.zxid,
            events: applied.events.clone(),
            closed_session: applied.session_closed,
            reaped,
        });
    }

    fn settled(&mut self, tree: &DataTree) {
        let keyspace = self.kv_digest();
        self.digests
            .push((tree.applied_index(), state_digest(tree, keyspace)));
        if self.ephemerals.is_none() {
            self.ephemerals = ephemerals_consistent(tree).err();
        }
    }
}

pub type SimMachine = NodeMachine<SimOutlet, Recorder>;

/// A node's machine over `tree` and `keyspace`, with the simulator's
/// clock; its keyspace engine (the server's, without threads).
pub fn new_machine(
    node_id: u64,
    tree: DataTree,
    keyspace: keel_kv::snapshot::Image,
    tick_ms: u64,
    now_ms: Arc<AtomicU64>,
) -> (SimMachine, Arc<KvEngine>) {
    let node = Node::new(tree, node_id, tick_ms, Arc::new(SimClock(now_ms.clone())));
    let started_ms = now_ms.load(Ordering::Relaxed);
    let kv = KvEngine::start_inline(
        keyspace,
        keel_server::kv::engine::first_connection_id(started_ms),
    );
    let recorder = Recorder {
        kv: kv.clone(),
        kv_digest: (0, 0),
        now_ms,
        digests: Vec::new(),
        applied: Vec::new(),
        ephemerals: None,
        reaper: None,
        reaping: None,
    };
    // One loader thread: a run must not depend on thread scheduling.
    let machine = NodeMachine::new(node, recorder, 1).with_kv(KvApplier::new(kv.clone()));
    (machine, kv)
}

/// The replicas' digest: the tree's, and the keyspace's if it holds a
/// key (so a run without KV keeps the tree's digest).
pub fn state_digest(tree: &DataTree, keyspace: u64) -> u64 {
    tree.digest() ^ keyspace.rotate_left(29)
}

/// A digest of the keys of `shards`, whatever order their tables keep:
/// each key's type, value, expiry and version (the log index of its
/// last change, which WATCH compares), summed. 0 for none.
pub fn kv_digest<'a>(shards: impl Iterator<Item = &'a Shard>) -> u64 {
    let mut sum = 0u64;
    for shard in shards {
        // What WATCH knows of deletions (per slot, and key by key) must
        // be the same on every replica too: an EXEC's outcome reads it.
        for (slot, index) in shard.deletions() {
            sum = sum.wrapping_add(mix(&[1, u64::from(slot), index]));
        }
        for (slot, mark, index) in shard.tombstones() {
            sum = sum.wrapping_add(mix(&[2, u64::from(slot), mark, index]));
        }
        for entry in shard.entries() {
            let mut hash = FNV_OFFSET;
            let mut add = |bytes: &[u8]| {
                fnv(&mut hash, &(bytes.len() as u64).to_be_bytes());
                fnv(&mut hash, bytes);
            };
            add(entry.key());
            add(entry.value_type().name().as_bytes());
            add(&entry.expire_at_ms.to_be_bytes());
            add(&entry.version.to_be_bytes());
            if let Some(value) = entry.string_value() {
                add(value);
            }
            if let Some(aggregate) = entry.aggregate_ref() {
                let mut parts: Vec<Vec<u8>> = match entry.value_type() {
                    keel_kv::value::ValueType::Hash => aggregate
                        .hash_pairs()
                        .map(|(f, v)| [f, b"=", v].concat())
                        .collect(),
                    _ => aggregate.set_members(),
                };
                parts.sort();
                for part in &parts {
                    add(part);
                }
            }
            sum = sum.wrapping_add(hash | 1);
        }
    }
    sum
}

/// FNV-1a's starting value.
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Feeds `bytes` to the FNV-1a hash `hash` (the digests and the run's
/// fingerprint).
pub(crate) fn fnv(hash: &mut u64, bytes: &[u8]) {
    for byte in bytes {
        *hash ^= u64::from(*byte);
        *hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

/// An FNV-1a hash of `words` (one term of `kv_digest`'s sum).
fn mix(words: &[u64]) -> u64 {
    let mut hash = FNV_OFFSET;
    for word in words {
        fnv(&mut hash, &word.to_be_bytes());
    }
    hash | 1
}

/// The reaper's contract, checked on the node as it was just before its
/// deletion applied: a TTL node goes only once its TTL has passed since
/// its last change (by the deletion's own time, the leader's clock when it
/// proposed it), a container only when it has no children and once had
/// one, and nothing else goes at all.
fn reap_due(reaping: &Reaping) -> Result<Reaped, String> {
    let path = &reaping.path;
    let Some(node) = &reaping.before else {
        return Err(format!("reaped {path}, which did not exist"));
    };
    if !node.children.is_empty() {
        return Err(format!(
            "reaped {path} with {} children",
            node.children.len()
        ));
    }
    let kind = owner_kind(node.stat.ephemeral_owner);
    match kind {
        OwnerKind::Container if node.stat.cversion <= 0 => {
            Err(format!("reaped container {path}, which never had a child"))
        }
        OwnerKind::Container => Ok(()),
        OwnerKind::Ttl(ttl_ms) => {
            let age_ms = reaping.time_ms - node.stat.mtime;
            if age_ms > ttl_ms {
                Ok(())
            } else {
                Err(format!(
                    "reaped TTL node {path} {age_ms} ms after its last change, its TTL is {ttl_ms} ms"
                ))
            }
        }
        other => Err(format!("reaped {path}, a {other:?} node")),
    }?;
    Ok(Reaped {
        path: path.clone(),
        kind,
    })
}

/// Every ephemeral belongs to a live session and no closed session owns
/// one: ZooKeeper's ephemeral contract, checked after each apply.
fn ephemerals_consistent(tree: &DataTree) -> Result<(), String> {
    let owned: usize = tree
        .sessions()
        .iter()
        .map(|(session, _)| tree.ephemerals_of(*session).len())
        .sum();
    let total = tree.ephemeral_count();
    if owned != total {
        return Err(format!(
            "{total} ephemerals but live sessions own {owned} (index {})",
            tree.applied_index()
        ));
    }
    Ok(())
}
