//! The keyspace's threads: one per shard, each owning its shard's data
//! (no lock on it), fed through its own queue.
//!
//! Who sends what:
//! - the apply step (on the Raft driver's thread, `KvApplier`) sends each
//!   committed write to the shard that owns its keys; a write spanning
//!   shards (MSET over several slots, a transaction, FLUSHDB) borrows
//!   those shards (`Lend`: each shard thread hands its shard over and
//!   waits for it back) and runs whole on the driver's thread;
//! - a connection sends each read to its shard, or borrows the shards of
//!   a read that spans several (MGET, DBSIZE, KEYS);
//! - the snapshot writer asks every shard to encode itself.
//!
//! Every message that spans shards (an entry's batch, a borrow, a
//! snapshot) is queued to all of its shards under `order`, so in every
//! shard's queue they stand in one order: a read spanning shards sees
//! every write whole or not at all, and two borrowers never wait on each
//! other. Within an entry, writes of one shard stay in log order; the
//! shards of a batch apply in parallel.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use keel_kv::exec::{Clocks, View};
use keel_kv::keyspace;
use keel_kv::op::{Op, Watch};
use keel_kv::resp::Args;
use keel_kv::shard::{Ctx, Shard};
use keel_kv::slot::{key_slot, shard_of_slot};
use keel_kv::snapshot::{self as kv_snapshot, Image};
use keel_kv::Reply;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

/// What a KV connection receives from the shards and the apply step.
#[derive(Debug)]
pub enum Outbound {
    /// The reply to the request numbered `seq`.
    Reply(u64, Reply),
    /// WATCH tokens for (some of) the keys of request `seq`.
    Watched(u64, Vec<Watch>),
    /// The node gave up a write of this connection (its outcome is
    /// unknown): the connection closes, as Redis clients expect of a
    /// failed connection.
    Close(&'static str),
}

/// A connection's mailbox. Unbounded: a connection has at most
/// `conn::PIPELINE_REQUESTS_MAX` requests unanswered, so at most that many
/// messages wait here.
pub type Outlet = mpsc::UnboundedSender<Outbound>;

/// Where a command's reply goes.
#[derive(Debug, Clone)]
pub struct Responder {
    pub outlet: Outlet,
    pub seq: u64,
}

impl Responder {
    fn send(&self, reply: Reply) {
        let _ = self.outlet.send(Outbound::Reply(self.seq, reply));
    }
}

/// One committed write for one shard.
struct Item {
    op: Op,
    ctx: Ctx,
    to: Option<Responder>,
}

enum Message {
    /// Writes of one entry, in log order.
    Apply(Vec<Item>),
    Read {
        args: Args,
        clocks: Clocks,
        to: Responder,
    },
    Watch {
        keys: Vec<Vec<u8>>,
        clock_ms: i64,
        to: Responder,
    },
    /// Hand the shard to a borrower until it comes back on `back`.
    Lend {
        give: oneshot::Sender<Shard>,
        back: std::sync::mpsc::Receiver<Shard>,
    },
    /// Keys due at `now_ms` (the leader's expiry cycle).
    Due {
        now_ms: i64,
        max: usize,
        to: oneshot::Sender<Vec<Vec<u8>>>,
    },
    /// Encode the shard for a snapshot (its state after every write
    /// queued before this message).
    Snapshot {
        index: usize,
        to: std::sync::mpsc::Sender<EncodedShard>,
    },
    /// A snapshot from the leader replaces the shard.
    Replace(Box<Shard>),
    Stop,
}

/// A shard's frames of a snapshot's KV part.
pub struct EncodedShard {
    pub index: usize,
    pub bytes: Vec<u8>,
    pub frames: u32,
    pub keys: u64,
}

/// What a shard thread publishes after each message (INFO, DBSIZE-free
/// introspection). Relaxed atomics: read by the connection shells.
#[derive(Debug, Default)]
pub struct ShardCounters {
    pub keys: AtomicU64,
    pub expiring: AtomicU64,
    pub expired: AtomicU64,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

struct ShardHandle {
    queue: Queue,
    counters: Arc<ShardCounters>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Where a shard's messages go.
enum Queue {
    /// To the shard's own thread (the server).
    Thread(crossbeam_channel::Sender<Message>),
    /// Handled at once on the sender's thread (`KvEngine::start_inline`:
    /// the simulator, which must not depend on thread scheduling).
    Inline(Mutex<Home>),
}

/// A shard where its messages are handled, with the log clock as far as
/// it has seen it.
struct Home {
    shard: Option<Shard>,
    clock_ms: i64,
    /// Inline only: a lent shard, back before the next message is handled
    /// (its borrower runs on the thread that sends the messages).
    lent: Option<std::sync::mpsc::Receiver<Shard>>,
}

/// Counters of the KV front end (INFO stats and clients).
#[derive(Debug, Default)]
pub struct KvStats {
    pub connections_received: AtomicU64,
    pub connected: AtomicU64,
    pub commands_processed: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub errors: AtomicU64,
}

/// The leader's expiry proposal in flight (one at a time).
#[derive(Debug, Default)]
struct ExpiryInFlight {
    proposed_at: Option<Instant>,
}

/// The keyspace's shard threads and what connections and the apply step
/// share about them.
pub struct KvEngine {
    shards: Vec<ShardHandle>,
    /// Held while queueing a message to more than one shard.
    order: Mutex<()>,
    /// The log's clock (ms): the largest entry time applied.
    clock_ms: AtomicI64,
    /// The log index of the last KV operation applied, or of the snapshot
    /// the keyspace was loaded from.
    applied_index: AtomicU64,
    /// Connections of this node by id: where the replies of their writes go.
    outlets: Mutex<HashMap<u64, Outlet>>,
    next_connection_id: AtomicU64,
    pub barrier: super::barrier::ReadBarrier,
    pub stats: KvStats,
    expiry: Mutex<ExpiryInFlight>,
    started: Instant,
}

impl KvEngine {
    /// Starts one thread per shard of `image`; connection ids from
    /// `first_connection_id` (`first_connection_id()`).
    pub fn start(image: Image, first_connection_id: u64) -> Arc<KvEngine> {
        assert!(!image.shards.is_empty());
        let (clock_ms, index) = (image.clock_ms, image.index);
        let shards = image
            .shards
            .into_iter()
            .enumerate()
            .map(|(index, shard)| {
                let (sender, receiver) = crossbeam_channel::unbounded();
                let counters = Arc::new(ShardCounters::default());
                let published = counters.clone();
                let thread = std::thread::Builder::new()
                    .name(format!("keel-kv-{index}"))
                    .spawn(move || shard_thread(shard, receiver, published))
                    .expect("a shard thread starts");
                ShardHandle {
                    queue: Queue::Thread(sender),
                    counters,
                    thread: Mutex::new(Some(thread)),
                }
            })
            .collect();
        KvEngine::with_shards(shards, clock_ms, index, first_connection_id)
    }

    /// The same engine without threads: every message to a shard is
    /// handled at once on the thread that sends it, by the code a shard
    /// thread runs, so applies, reads and snapshots happen in the order
    /// they are asked and a run depends on nothing but its inputs (the
    /// simulator). Reads spanning shards (`borrow`) are the threaded
    /// engine's only.
    pub fn start_inline(image: Image, first_connection_id: u64) -> Arc<KvEngine> {
        assert!(!image.shards.is_empty());
        let (clock_ms, index) = (image.clock_ms, image.index);
        let shards = image
            .shards
            .into_iter()
            .map(|shard| ShardHandle {
                queue: Queue::Inline(Mutex::new(Home::new(shard))),
                counters: Arc::new(ShardCounters::default()),
                thread: Mutex::new(None),
            })
            .collect();
        KvEngine::with_shards(shards, clock_ms, index, first_connection_id)
    }

    fn with_shards(
        shards: Vec<ShardHandle>,
        clock_ms: i64,
        index: u64,
        first_connection_id: u64,
    ) -> Arc<KvEngine> {
        assert!(first_connection_id > 0 && first_connection_id < i64::MAX as u64 / 2);
        Arc::new(KvEngine {
            shards,
            order: Mutex::new(()),
            clock_ms: AtomicI64::new(clock_ms),
            applied_index: AtomicU64::new(index),
            outlets: Mutex::new(HashMap::new()),
            next_connection_id: AtomicU64::new(first_connection_id),
            barrier: super::barrier::ReadBarrier::new(),
            stats: KvStats::default(),
            expiry: Mutex::new(ExpiryInFlight::default()),
            started: Instant::now(),
        })
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub fn uptime_s(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// The log's clock (what decides expiry).
    pub fn clock_ms(&self) -> i64 {
        self.clock_ms.load(Ordering::Acquire)
    }

    /// The log index of the last KV operation applied (queued to the
    /// shards), or of the snapshot the keyspace was loaded from: the
    /// keyspace changes only when this does.
    pub fn applied_index(&self) -> u64 {
        self.applied_index.load(Ordering::Acquire)
    }

    pub fn counters(&self) -> impl Iterator<Item = &ShardCounters> {
        self.shards.iter().map(|s| &*s.counters)
    }

    /// Registers a connection; its id (CLIENT ID) and the receiver of its
    /// replies.
    pub fn connect(&self) -> (u64, mpsc::UnboundedReceiver<Outbound>) {
        let id = self.next_connection_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = mpsc::unbounded_channel();
        self.outlets.lock().insert(id, sender);
        (id, receiver)
    }

    pub fn disconnect(&self, id: u64) {
        self.outlets.lock().remove(&id);
    }

    fn outlet(&self, id: u64) -> Option<Outlet> {
        self.outlets.lock().get(&id).cloned()
    }

    /// The mailbox of connection `id` (for requests it sends to shards).
    pub fn outlet_of(&self, id: u64) -> Option<Outlet> {
        self.outlet(id)
    }

    fn send(&self, shard: usize, message: Message) {
        let handle = &self.shards[shard];
        match &handle.queue {
            // A shard thread only stops when the engine does.
            Queue::Thread(sender) => {
                let _ = sender.send(message);
            }
            Queue::Inline(home) => {
                home.lock().handle(message, &handle.counters, false);
            }
        }
    }

    /// Every shard, borrowed, for `look` (on a thread outside the async
    /// runtime: the simulator's replica digests and final reads).
    pub fn inspect<R>(&self, look: impl FnOnce(&mut View<'_>) -> R) -> R {
        let all: Vec<usize> = (0..self.shards.len()).collect();
        let mut lent = self.borrow_blocking(&all);
        look(&mut lent.view())
    }

    pub fn shard_of(&self, key: &[u8]) -> usize {
        shard_of_slot(key_slot(key), self.shards.len())
    }

    /// Runs a read on one shard; the reply goes to `to`.
    pub fn read(&self, shard: usize, args: Args, clocks: Clocks, to: Responder) {
        self.send(shard, Message::Read { args, clocks, to });
    }

    /// WATCH tokens for `keys`, one message per shard; `to` receives one
    /// `Watched` per shard. Returns how many.
    pub fn watch(&self, keys: Vec<Vec<u8>>, to: Responder) -> usize {
        let mut by_shard: HashMap<usize, Vec<Vec<u8>>> = HashMap::new();
        for key in keys {
            by_shard.entry(self.shard_of(&key)).or_default().push(key);
        }
        let parts = by_shard.len();
        let clock_ms = self.clock_ms();
        for (shard, keys) in by_shard {
            self.send(
                shard,
                Message::Watch {
                    keys,
                    clock_ms,
                    to: to.clone(),
                },
            );
        }
        parts
    }

    /// Queues a borrow of `shards` (sorted, distinct) in the global order;
    /// the shards come through the returned `Borrow`.
    fn lend(&self, shards: &[usize]) -> Borrow {
        let mut pending = Vec::with_capacity(shards.len());
        let _order = self.order.lock();
        for &index in shards {
            let (give, taken) = oneshot::channel();
            let (back, receiver) = std::sync::mpsc::channel();
            self.send(
                index,
                Message::Lend {
                    give,
                    back: receiver,
                },
            );
            pending.push((taken, back));
        }
        Borrow { pending }
    }

    /// Borrows `shards` from an async task (a read spanning shards).
    pub async fn borrow(&self, shards: &[usize]) -> Lent {
        let mut lent = Lent { shards: Vec::new() };
        for (taken, back) in self.lend(shards).pending {
            let shard = taken.await.expect("a shard thread lends its shard");
            lent.shards.push((Some(shard), back));
        }
        lent
    }

    /// Borrows `shards` from a thread outside the async runtime (the
    /// apply step).
    fn borrow_blocking(&self, shards: &[usize]) -> Lent {
        let mut lent = Lent { shards: Vec::new() };
        for (taken, back) in self.lend(shards).pending {
            let shard = taken
                .blocking_recv()
                .expect("a shard thread lends its shard");
            lent.shards.push((Some(shard), back));
        }
        lent
    }

    /// Keys due for expiry at `now_ms`, at most `max` in all, from every
    /// shard (the leader's cycle).
    pub async fn due(&self, now_ms: i64, max: usize) -> Vec<Vec<u8>> {
        let per_shard = (max / self.shards.len()).max(1);
        let mut waiting = Vec::new();
        for index in 0..self.shards.len() {
            let (to, from) = oneshot::channel();
            self.send(
                index,
                Message::Due {
                    now_ms,
                    max: per_shard,
                    to,
                },
            );
            waiting.push(from);
        }
        let mut keys = Vec::new();
        for from in waiting {
            keys.extend(from.await.unwrap_or_default());
        }
        keys
    }

    /// Whether the leader may propose another expiry batch now.
    pub fn expiry_may_propose(&self, resend_after_ms: u64) -> bool {
        let expiry = self.expiry.lock();
        expiry
            .proposed_at
            .is_none_or(|at| at.elapsed().as_millis() as u64 >= resend_after_ms)
    }

    pub fn expiry_proposed(&self) {
        self.expiry.lock().proposed_at = Some(Instant::now());
    }

    fn expiry_applied(&self) {
        self.expiry.lock().proposed_at = None;
    }

    /// Starts the snapshot's KV part at the state applied now: every shard
    /// encodes itself after the writes queued before. `None` when no KV
    /// write was ever applied (the part is left out of the file).
    pub fn snapshot_begin(&self, index: u64) -> Option<KvSnapshotJob> {
        let clock_ms = self.clock_ms();
        if clock_ms == 0 {
            return None;
        }
        let (to, from) = std::sync::mpsc::channel();
        {
            let _order = self.order.lock();
            for shard in 0..self.shards.len() {
                self.send(
                    shard,
                    Message::Snapshot {
                        index: shard,
                        to: to.clone(),
                    },
                );
            }
        }
        Some(KvSnapshotJob {
            index,
            clock_ms,
            shards: self.shards.len(),
            from,
        })
    }

    /// A snapshot from the leader replaces the keyspace.
    pub fn replace(&self, image: Image) {
        assert_eq!(image.shards.len(), self.shards.len());
        let _order = self.order.lock();
        self.clock_ms.store(image.clock_ms, Ordering::Release);
        self.applied_index.store(image.index, Ordering::Release);
        for (index, shard) in image.shards.into_iter().enumerate() {
            self.send(index, Message::Replace(Box::new(shard)));
        }
    }

    /// Stops the shard threads (after what is queued).
    pub fn stop(&self) {
        for shard in &self.shards {
            if let Queue::Thread(sender) = &shard.queue {
                let _ = sender.send(Message::Stop);
            }
        }
        for shard in &self.shards {
            if let Some(thread) = shard.thread.lock().take() {
                let _ = thread.join();
            }
        }
    }
}

/// A borrow queued, its shards not yet handed over.
struct Borrow {
    pending: Vec<(oneshot::Receiver<Shard>, std::sync::mpsc::Sender<Shard>)>,
}

/// Borrowed shards. Dropping it gives them back (also when the borrower's
/// task is cancelled), so a shard is never lost.
pub struct Lent {
    shards: Vec<(Option<Shard>, std::sync::mpsc::Sender<Shard>)>,
}

impl Lent {
    pub fn view(&mut self) -> View<'_> {
        View::new(
            self.shards
                .iter_mut()
                .map(|(shard, _)| shard.as_mut().expect("lent"))
                .collect(),
        )
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        for (shard, back) in &mut self.shards {
            if let Some(shard) = shard.take() {
                let _ = back.send(shard);
            }
        }
    }
}

/// The KV part of a snapshot being written: the shards' encodings arrive
/// on `from` (the snapshot thread waits for them).
pub struct KvSnapshotJob {
    index: u64,
    clock_ms: i64,
    shards: usize,
    from: std::sync::mpsc::Receiver<EncodedShard>,
}

impl KvSnapshotJob {
    /// The whole part, in shard order.
    pub fn write(self, out: &mut Vec<u8>) -> Result<(), KvSnapshotStopped> {
        let mut encoded: Vec<EncodedShard> = Vec::with_capacity(self.shards);
        for _ in 0..self.shards {
            encoded.push(self.from.recv().map_err(|_| KvSnapshotStopped)?);
        }
        encoded.sort_by_key(|e| e.index);
        kv_snapshot::encode_head(self.index, self.clock_ms, out);
        let (mut frames, mut keys) = (0, 0);
        for shard in encoded {
            out.extend_from_slice(&shard.bytes);
            frames += shard.frames;
            keys += shard.keys;
        }
        kv_snapshot::encode_end(frames, keys, out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Args {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    fn reply(replies: &mut mpsc::UnboundedReceiver<Outbound>) -> (u64, Reply) {
        match replies.try_recv() {
            Ok(Outbound::Reply(seq, reply)) => (seq, reply),
            other => panic!("expected a reply at once, got {other:?}"),
        }
    }

    #[test]
    fn the_inline_engine_applies_reads_and_snapshots_on_the_calling_thread() {
        let engine = KvEngine::start_inline(kv_snapshot::empty(2), first_connection_id(5));
        let (id, mut replies) = engine.connect();
        assert_eq!(id, (5 << 16) | 1, "ids from the start's clock");
        let mut applier = KvApplier::new(engine.clone());
        let mut words = vec!["MSET"];
        let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
        for key in &keys {
            words.extend([key.as_str(), "1"]);
        }
        let mset = Op::Command {
            seq: 1,
            args: args(&words),
        };
        assert!(
            keyspace::op_shards(&mset, 2).len() == 2,
            "spans both shards"
        );
        applier.apply(7, 1_000, id as i64, &mset.to_bytes(), true);
        // A transaction spanning shards borrows them (the lent shards come
        // back before the next message) and runs after what is pending.
        let exec = Op::Exec {
            seq: 2,
            watches: Vec::new(),
            commands: keys.iter().map(|k| args(&["INCR", k])).collect(),
        };
        applier.apply(8, 1_001, id as i64, &exec.to_bytes(), true);
        applier.flush();
        assert_eq!(reply(&mut replies), (1, Reply::ok()));
        let (seq, incrs) = reply(&mut replies);
        assert_eq!(seq, 2);
        assert_eq!(incrs, Reply::Array(vec![Reply::Integer(2); keys.len()]));
        assert_eq!(engine.applied_index(), 8);
        assert_eq!(engine.clock_ms(), 1_001);
        let outlet = engine.outlet_of(id).unwrap();
        engine.read(
            engine.shard_of(b"k3"),
            args(&["GET", "k3"]),
            Clocks::read(engine.clock_ms(), 1_002),
            Responder { outlet, seq: 3 },
        );
        assert_eq!(reply(&mut replies), (3, Reply::Bulk(b"2".to_vec())));
        let mut part = Vec::new();
        engine.snapshot_begin(8).unwrap().write(&mut part).unwrap();
        let image = kv_snapshot::decode(&part, 2).unwrap();
        assert_eq!(image.index, 8);
        let saved: usize = image.shards.iter().map(Shard::key_count).sum();
        let live = engine.inspect(|view| view.shards().map(|s| s.key_count()).sum::<usize>());
        assert_eq!((saved, live), (keys.len(), keys.len()));
        engine.replace(kv_snapshot::empty(2));
        assert_eq!(engine.applied_index(), 0);
        assert_eq!(engine.inspect(|view| view.shards().count()), 2);
        assert_eq!(
            engine.inspect(|view| view.shards().map(|s| s.key_count()).sum::<usize>()),
            0
        );
    }

    #[test]
    fn an_mset_spanning_shards_splits_by_shard_keeping_pair_order() {
        let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
        let mut words = vec!["MSET"];
        for key in &keys {
            words.push(key);
            words.push("v");
        }
        words.extend(["k0", "last"]);
        let op = Op::Command {
            seq: 3,
            args: args(&words),
        };
        let parts = split_mset(&op, 4).unwrap();
        assert!(parts.len() > 1);
        let total: usize = parts.iter().map(|(_, p)| (p.len() - 1) / 2).sum();
        assert_eq!(total, 41);
        for (shard, part) in &parts {
            for key in part[1..].iter().step_by(2) {
                assert_eq!(shard_of_slot(key_slot(key), 4), *shard);
            }
        }
        let zero = &parts
            .iter()
            .find(|(s, _)| *s == shard_of_slot(key_slot(b"k0"), 4))
            .unwrap()
            .1;
        assert_eq!(
            zero.last().unwrap(),
            b"last",
            "a repeated key keeps its last value"
        );
        assert!(split_mset(
            &Op::Command {
                seq: 1,
                args: args(&["MSET", "a"])
            },
            4
        )
        .is_none());
        assert!(split_mset(
            &Op::Command {
                seq: 1,
                args: args(&["MSETNX", "a", "1", "b", "2"])
            },
            4
        )
        .is_none());
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the keyspace stopped while a snapshot was written")]
pub struct KvSnapshotStopped;

/// The apply step's side: on the Raft driver's thread, it turns committed
/// KV transactions into shard work, an entry's worth at a time.
pub struct KvApplier {
    engine: Arc<KvEngine>,
    /// Per shard: the entry's writes not yet queued.
    pending: Vec<Vec<Item>>,
}

impl KvApplier {
    pub fn new(engine: Arc<KvEngine>) -> KvApplier {
        let pending = (0..engine.shard_count()).map(|_| Vec::new()).collect();
        KvApplier { engine, pending }
    }

    pub fn engine(&self) -> &Arc<KvEngine> {
        &self.engine
    }

    /// One committed KV operation at `index`, stamped `time_ms` by its
    /// proposer; `connection` (the Txn's session id) is the asking
    /// connection when `asked_here`.
    pub fn apply(
        &mut self,
        index: u64,
        time_ms: i64,
        connection: i64,
        body: &[u8],
        asked_here: bool,
    ) {
        let op = match Op::decode(body) {
            Ok(op) => op,
            Err(error) => {
                // Every replica decodes the same bytes alike: skipped
                // everywhere.
                tracing::error!(index, %error, "committed KV operation does not decode; skipped");
                return;
            }
        };
        let engine = self.engine.clone();
        engine.applied_index.store(index, Ordering::Release);
        let clock_ms = engine.clock_ms().max(time_ms);
        engine.clock_ms.store(clock_ms, Ordering::Release);
        let ctx = Ctx {
            index,
            now_ms: clock_ms,
        };
        if matches!(op, Op::Expire { .. }) && asked_here {
            engine.expiry_applied();
        }
        let to = match (asked_here, op.seq()) {
            (true, Some(seq)) => engine
                .outlet(connection as u64)
                .map(|outlet| Responder { outlet, seq }),
            _ => None,
        };
        let shards = keyspace::op_shards(&op, engine.shard_count());
        if let [shard] = shards[..] {
            self.pending[shard].push(Item { op, ctx, to });
            return;
        }
        if let Some(parts) = split_mset(&op, engine.shard_count()) {
            // Its parts are queued to their shards together with the rest
            // of the entry: any later read, on any shard, queues behind
            // its part, so no reader sees half of it.
            let mut to = to;
            for (shard, part) in parts {
                let op = Op::Command { seq: 0, args: part };
                self.pending[shard].push(Item {
                    op,
                    ctx,
                    to: to.take(),
                });
            }
            return;
        }
        // Spanning shards: what came before on each shard goes first,
        // then this runs whole with the shards borrowed.
        self.flush();
        let mut lent = engine.borrow_blocking(&shards);
        let reply = keyspace::apply(&mut lent.view(), &op, ctx);
        drop(lent);
        if let (Some(reply), Some(to)) = (reply, to) {
            to.send(reply);
        }
    }

    /// Queues the entry's writes to their shards (together, in the global
    /// order); the shards apply them in parallel.
    pub fn flush(&mut self) {
        if self.pending.iter().all(Vec::is_empty) {
            return;
        }
        let _order = self.engine.order.lock();
        for (shard, items) in self.pending.iter_mut().enumerate() {
            if !items.is_empty() {
                self.engine
                    .send(shard, Message::Apply(std::mem::take(items)));
            }
        }
    }

    /// Proposals this node gave up: their connections close.
    pub fn dropped(&self, connection: i64) {
        if let Some(outlet) = self.engine.outlet(connection as u64) {
            let _ = outlet.send(Outbound::Close(
                "the node gave up a write of this connection",
            ));
        }
    }
}

/// An MSET spanning shards as one MSET per shard (the pairs of each in
/// their order); its reply is OK whatever the keyspace holds.
fn split_mset(op: &Op, shard_count: usize) -> Option<Vec<(usize, Args)>> {
    let Op::Command { args, .. } = op else {
        return None;
    };
    if !args[0].eq_ignore_ascii_case(b"mset") || args.len() < 3 || args.len() % 2 == 0 {
        return None;
    }
    let mut parts: Vec<(usize, Args)> = Vec::new();
    for pair in args[1..].chunks_exact(2) {
        let shard = shard_of_slot(key_slot(&pair[0]), shard_count);
        match parts.iter_mut().find(|(s, _)| *s == shard) {
            Some((_, part)) => part.extend_from_slice(pair),
            None => parts.push((
                shard,
                vec![args[0].clone(), pair[0].clone(), pair[1].clone()],
            )),
        }
    }
    parts.sort_by_key(|(shard, _)| *shard);
    Some(parts)
}

fn shard_thread(
    shard: Shard,
    inbox: crossbeam_channel::Receiver<Message>,
    counters: Arc<ShardCounters>,
) {
    let mut home = Home::new(shard);
    while let Ok(message) = inbox.recv() {
        if !home.handle(message, &counters, true) {
            break;
        }
    }
}

impl Home {
    fn new(shard: Shard) -> Home {
        Home {
            shard: Some(shard),
            clock_ms: 0,
            lent: None,
        }
    }

    /// Handles one message; false on `Stop`. A lent shard is waited for
    /// at once when `wait_lent` (a shard thread), else before the next
    /// message (inline: the borrower is the sender's own thread, and
    /// gives it back before it sends anything else).
    fn handle(&mut self, message: Message, counters: &ShardCounters, wait_lent: bool) -> bool {
        if let Some(back) = self.lent.take() {
            self.shard = Some(back.recv().expect("a borrowed shard comes back"));
        }
        let clock_ms = &mut self.clock_ms;
        let current = self
            .shard
            .as_mut()
            .expect("the shard is home between messages");
        match message {
            Message::Apply(items) => {
                for item in items {
                    *clock_ms = (*clock_ms).max(item.ctx.now_ms);
                    let reply =
                        keyspace::apply(&mut View::new(vec![&mut *current]), &item.op, item.ctx);
                    if let (Some(reply), Some(to)) = (reply, item.to) {
                        to.send(reply);
                    }
                }
            }
            Message::Read { args, clocks, to } => {
                let clocks = Clocks::read(clocks.ctx.now_ms.max(*clock_ms), clocks.display_ms);
                to.send(keyspace::run(
                    &mut View::new(vec![&mut *current]),
                    &args,
                    clocks,
                ));
            }
            Message::Watch {
                keys,
                clock_ms: watched,
                to,
            } => {
                let watches = keys
                    .into_iter()
                    .map(|key| Watch {
                        key,
                        token: current.applied_index,
                        watched_ms: watched.max(*clock_ms),
                    })
                    .collect();
                let _ = to.outlet.send(Outbound::Watched(to.seq, watches));
            }
            Message::Lend { give, back } => {
                let lent = self.shard.take().expect("home");
                match give.send(lent) {
                    // The borrower's `Lent` always sends it back, also
                    // when dropped early; losing it would lose data.
                    Ok(()) if wait_lent => {
                        self.shard = Some(back.recv().expect("a borrowed shard comes back"));
                    }
                    Ok(()) => self.lent = Some(back),
                    Err(unwanted) => self.shard = Some(unwanted),
                }
            }
            Message::Due { now_ms, max, to } => {
                let _ = to.send(
                    current
                        .due(now_ms, max)
                        .into_iter()
                        .map(|k| k.to_vec())
                        .collect(),
                );
            }
            Message::Snapshot { index, to } => {
                let mut bytes = Vec::new();
                let (frames, keys) = kv_snapshot::encode_shard(current, &mut bytes);
                let _ = to.send(EncodedShard {
                    index,
                    bytes,
                    frames,
                    keys,
                });
            }
            Message::Replace(replacement) => {
                *clock_ms = 0;
                self.shard = Some(*replacement);
            }
            Message::Stop => return false,
        }
        let Some(current) = self.shard.as_ref() else {
            return true; // lent (inline): published when it is back
        };
        counters
            .keys
            .store(current.key_count() as u64, Ordering::Relaxed);
        counters
            .expiring
            .store(current.expiring_count() as u64, Ordering::Relaxed);
        counters
            .expired
            .store(current.stats.expired_keys.get(), Ordering::Relaxed);
        counters
            .hits
            .store(current.stats.keyspace_hits.get(), Ordering::Relaxed);
        counters
            .misses
            .store(current.stats.keyspace_misses.get(), Ordering::Relaxed);
        true
    }
}

/// The keyspace of a snapshot's bytes after the tree's part.
pub fn load_part(bytes: &[u8], shards: usize) -> Result<Image, kv_snapshot::KvSnapshotError> {
    kv_snapshot::decode(bytes, shards)
}

/// The first connection id of an engine started at `now_ms` (wall clock):
/// ids never repeat across a node's restarts. The reply to a write goes to
/// the connection of this node whose id its log entry names, and entries
/// a node proposed before a crash may apply after its restart: with ids
/// from 1 again, a new connection got an old connection's reply (the
/// simulator found it). As ZooKeeper's session ids, from the clock: a
/// restart comes milliseconds later, and no run opens 65,536 connections
/// a millisecond. Fits the log's 63-bit session field.
pub fn first_connection_id(now_ms: u64) -> u64 {
    (now_ms << 16) | 1
}

/// How many shard threads: one per core.
pub fn shard_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
