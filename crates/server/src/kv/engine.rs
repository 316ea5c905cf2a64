//! The keyspace's threads: one per shard, each owning its shard's data
//! (no lock on it), fed through its own queue. Each thread also runs a
//! single-threaded async runtime that serves KV connections
//! (`KvEngine::spawn_connection`): a read of a connection served on the
//! thread that owns the read's shard runs there at once, without a
//! hand-off (`KvEngine::read_here`); any other goes through the queue.
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

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use keel_kv::command::Kind;
use keel_kv::exec::{Clocks, View};
use keel_kv::keyspace;
use keel_kv::op::{Op, OpError, Watch};
use keel_kv::resp::Args;
use keel_kv::session::ReadRoute;
use keel_kv::shard::{stamp, Ctx, Shard, PREFETCH_KEYS_MAX};
use keel_kv::slot::{key_slot, shard_of_slot};
use keel_kv::snapshot::{self as kv_snapshot, Image};
use keel_kv::Reply;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, Notify};

/// Messages a shard's queue may hold without waking its thread (batches
/// no connection of this node waits for).
pub const QUIET_MESSAGES_MAX: usize = 64;
/// Most items a shard's next apply batch is given room for up front: as
/// many as the last batch held, up to this (a large batch, as in a log
/// replay, leaves no large allocation behind).
pub const APPLY_BATCH_RESERVE_MAX: usize = 1_024;

/// A connection's read for a shard: its request number, the command and
/// the route its session checked.
pub type ShardRead = (u64, Args, ReadRoute);

/// What a KV connection receives from the shards and the apply step.
#[derive(Debug)]
pub enum Outbound {
    /// The reply to the request numbered `seq`.
    Reply(u64, Reply),
    /// Replies to several requests of the connection, in the order they
    /// were made (a shard's run of them: one wake-up, not one per reply).
    Replies(Vec<(u64, Reply)>),
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

/// Replies a shard thread made while handling one message, sent one
/// message per run of replies to the same connection: a connection's
/// pipelined writes of one entry, or its batch of reads, wake it once.
#[derive(Default)]
struct ReplyRun {
    outlet: Option<Outlet>,
    replies: Vec<(u64, Reply)>,
}

impl ReplyRun {
    fn push(&mut self, to: Responder, reply: Reply) {
        let same = self
            .outlet
            .as_ref()
            .is_some_and(|outlet| outlet.same_channel(&to.outlet));
        if !same {
            self.flush();
            self.outlet = Some(to.outlet);
        }
        // One reply per unanswered request of one connection.
        assert!(self.replies.len() < super::conn::PIPELINE_REQUESTS_MAX);
        self.replies.push((to.seq, reply));
    }

    fn flush(&mut self) {
        let Some(outlet) = self.outlet.take() else {
            assert!(self.replies.is_empty(), "replies have a connection");
            return;
        };
        let message = match self.replies.len() {
            1 => {
                let (seq, reply) = self.replies.pop().expect("one reply");
                Outbound::Reply(seq, reply)
            }
            _ => Outbound::Replies(std::mem::take(&mut self.replies)),
        };
        assert!(self.replies.is_empty());
        // A connection that is gone has nobody to answer.
        let _ = outlet.send(message);
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
    /// Reads of one connection (request number, command, its route), in
    /// its order.
    Reads {
        reads: Vec<ShardRead>,
        clocks: Clocks,
        outlet: Outlet,
    },
    Watch {
        keys: Vec<Vec<u8>>,
        clock_ms: i64,
        to: Responder,
    },
    /// Hand the shard to a borrower until it comes back on `back`.
    Lend {
        give: oneshot::Sender<Shard>,
        back: oneshot::Receiver<Shard>,
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
    /// To the shard's own thread (the server): the message is queued,
    /// then the thread's shard task is told (`Notify` keeps one permit,
    /// so a message sent while the task is busy is not missed). The
    /// thread's runtime serves connections too (`runtime`).
    Thread {
        sender: crossbeam_channel::Sender<Message>,
        bell: Arc<Notify>,
        runtime: tokio::runtime::Handle,
    },
    /// Handled at once on the sender's thread (`KvEngine::start_inline`:
    /// the simulator, which must not depend on thread scheduling).
    Inline(Mutex<Home>),
}

/// A shard where its messages are handled, with the log clock as far as
/// it has seen it.
struct Home {
    shard: Option<Shard>,
    clock_ms: i64,
    /// A lent shard's way back. Inline, it is back before the next
    /// message is handled (its borrower runs on the thread that sends the
    /// messages); a shard thread waits for it before its next message.
    lent: Option<oneshot::Receiver<Shard>>,
}

/// Counters of the KV front end (INFO stats and clients).
#[derive(Debug, Default)]
pub struct KvStats {
    pub connections_received: AtomicU64,
    pub connected: AtomicU64,
    pub commands_processed: AtomicU64,
    /// Proposals that carried two or more of a connection's pipelined
    /// writes (`keel_kv::op`'s COMMANDS).
    pub write_batches: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub errors: AtomicU64,
}

/// The leader's expiry proposal in flight (one at a time).
#[derive(Debug, Default)]
struct ExpiryInFlight {
    /// When it was proposed, on the caller's monotonic clock (ms).
    proposed_at_ms: Option<u64>,
}

/// The keyspace's shard threads and what connections and the apply step
/// share about them.
pub struct KvEngine {
    shards: Vec<ShardHandle>,
    /// The shard thread the next connection is served on.
    next_runtime: AtomicUsize,
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
                let bell = Arc::new(Notify::new());
                let counters = Arc::new(ShardCounters::default());
                let owned = Owned {
                    home: Home::new(shard),
                    inbox: receiver,
                    counters: counters.clone(),
                    stopped: false,
                };
                let (runtime_to, runtime_from) = std::sync::mpsc::channel();
                let rung = bell.clone();
                let thread = std::thread::Builder::new()
                    .name(format!("keel-kv-{index}"))
                    .spawn(move || shard_thread(owned, rung, runtime_to))
                    .expect("a shard thread starts");
                let runtime = runtime_from
                    .recv()
                    .expect("a shard thread builds its runtime");
                ShardHandle {
                    queue: Queue::Thread {
                        sender,
                        bell,
                        runtime,
                    },
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
            next_runtime: AtomicUsize::new(0),
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
        self.queue(shard, message, true);
    }

    /// Queues `message` to `shard`; `ring`: wake its thread now. A batch
    /// nobody waits for (no reply from it on this node) may wait in the
    /// queue until the next message that rings, at most
    /// `QUIET_MESSAGES_MAX` of them: whatever observes the shard (a read,
    /// a borrow, a snapshot) is queued behind them and rings, so they are
    /// handled first. A follower's shard threads then wake once per many
    /// entries instead of once per entry.
    fn queue(&self, shard: usize, message: Message, ring: bool) {
        let handle = &self.shards[shard];
        match &handle.queue {
            // A shard thread only stops when the engine does.
            Queue::Thread { sender, bell, .. } => {
                let _ = sender.send(message);
                if ring || sender.len() >= QUIET_MESSAGES_MAX {
                    bell.notify_one();
                }
            }
            Queue::Inline(home) => {
                home.lock().handle(message, &handle.counters);
            }
        }
    }

    /// Every shard, borrowed, for `look` (on a thread outside the async
    /// runtime: the simulator's replica digests and final reads).
    pub fn inspect<R>(&self, look: impl FnOnce(&mut View<'_>) -> R) -> R {
        let all: Vec<usize> = (0..self.shards.len()).collect();
        let mut lent = self.borrow_blocking(&all);
        let mut view = lent.view();
        look(&mut view)
    }

    pub fn shard_of(&self, key: &[u8]) -> usize {
        shard_of_slot(key_slot(key), self.shards.len())
    }

    /// Serves a connection on one of the shard threads (in turn), or on
    /// the caller's runtime for an engine without threads.
    pub fn spawn_connection<F>(&self, connection: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let turn = self.next_runtime.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        self.spawn_on(turn, connection);
    }

    fn spawn_on<F>(&self, shard: usize, connection: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match &self.shards[shard].queue {
            Queue::Thread { runtime, .. } => drop(runtime.spawn(connection)),
            Queue::Inline(_) => drop(tokio::spawn(connection)),
        }
    }

    /// Runs a read on `shard` at once when the caller runs on that shard's
    /// thread, the shard is home and every message queued to it before is
    /// handled (this handles them first): the reply, as the shard thread
    /// would give it. `None`: send it with `read`.
    pub fn read_here(
        &self,
        shard: usize,
        args: &Args,
        route: ReadRoute,
        clocks: Clocks,
    ) -> Option<Reply> {
        let handle = &self.shards[shard];
        // Only a shard thread owns a shard (never so for an engine
        // without threads): the counters tell which shard it is.
        OWNED.with_borrow_mut(|owned| {
            let owned = owned.as_mut()?;
            if !Arc::ptr_eq(&owned.counters, &handle.counters) || !owned.settle() {
                return None;
            }
            let reply = owned.home.read(args, route, clocks);
            owned.publish();
            Some(reply)
        })
    }

    /// Prefetches the lookups of the single-key reads among `requests`
    /// (`keyspace::prefetch_keys`) whose keys are in the calling thread's
    /// shard, if it is home: the connection's next reads then find their
    /// memory in the cache.
    pub fn prefetch_here<'a>(&self, requests: impl IntoIterator<Item = &'a Args>) {
        OWNED.with_borrow(|owned| {
            if let Some(shard) = owned.as_ref().and_then(|owned| owned.home.shard.as_ref()) {
                keyspace::prefetch_keys(shard, Kind::Read, requests);
            }
        })
    }

    /// Runs a read on one shard; the reply goes to `to`.
    pub fn read(&self, shard: usize, args: Args, route: ReadRoute, clocks: Clocks, to: Responder) {
        self.reads(shard, vec![(to.seq, args, route)], clocks, to.outlet);
    }

    /// Runs a connection's reads (request number, command) on one shard,
    /// in order; their replies go to `outlet` together.
    pub fn reads(&self, shard: usize, reads: Vec<ShardRead>, clocks: Clocks, outlet: Outlet) {
        assert!(!reads.is_empty() && reads.len() <= super::conn::PIPELINE_REQUESTS_MAX);
        self.send(
            shard,
            Message::Reads {
                reads,
                clocks,
                outlet,
            },
        );
    }

    /// A connection's reads for other shards, and for its own thread's
    /// shard after the first of those (per shard, request number and
    /// command, in request order), queued at one cut of the shards' order
    /// (under `order`): no write batch is queued between two of the
    /// messages, so each read sees exactly the batches queued before the
    /// cut, whatever shard runs it and whichever runs first. The lock is
    /// taken for one message too: a batch being queued (`KvApplier::flush`
    /// holds `order` from its first shard to its last) is waited for, so a
    /// read that the connection ran on its own shard before (`read_here`)
    /// and that saw a batch's part there is never followed by a read that
    /// misses the part on another shard.
    pub fn reads_at_one_cut(
        &self,
        groups: Vec<(usize, Vec<ShardRead>)>,
        clocks: Clocks,
        outlet: &Outlet,
    ) {
        assert!(!groups.is_empty());
        assert!(
            groups.windows(2).all(|pair| pair[0].0 < pair[1].0),
            "one message per shard"
        );
        let _order = self.order.lock();
        for (shard, reads) in groups {
            self.reads(shard, reads, clocks, outlet.clone());
        }
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
            let (back, receiver) = oneshot::channel();
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
            lent.shards.push((Some(shard), Some(back)));
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
            lent.shards.push((Some(shard), Some(back)));
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

    /// Whether the leader may propose another expiry batch at `now_ms`
    /// (a monotonic clock: the server's since its start, the simulator's
    /// logical one): none is in flight, or the last one was proposed
    /// `resend_after_ms` ago and is taken as lost.
    pub fn expiry_may_propose(&self, now_ms: u64, resend_after_ms: u64) -> bool {
        let expiry = self.expiry.lock();
        expiry
            .proposed_at_ms
            .is_none_or(|at_ms| now_ms.saturating_sub(at_ms) >= resend_after_ms)
    }

    /// An expiry batch was proposed at `now_ms` (the clock of
    /// `expiry_may_propose`).
    pub fn expiry_proposed(&self, now_ms: u64) {
        self.expiry.lock().proposed_at_ms = Some(now_ms);
    }

    fn expiry_applied(&self) {
        self.expiry.lock().proposed_at_ms = None;
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
            if let Queue::Thread { sender, bell, .. } = &shard.queue {
                let _ = sender.send(Message::Stop);
                bell.notify_one();
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
    pending: Vec<(oneshot::Receiver<Shard>, oneshot::Sender<Shard>)>,
}

/// Borrowed shards. Dropping it gives them back (also when the borrower's
/// task is cancelled), so a shard is never lost.
pub struct Lent {
    shards: Vec<(Option<Shard>, Option<oneshot::Sender<Shard>>)>,
}

impl Lent {
    pub fn view(&mut self) -> View<'_> {
        View::new(
            self.shards
                .iter_mut()
                .map(|(shard, _)| shard.as_mut().expect("lent")),
        )
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        for (shard, back) in &mut self.shards {
            if let (Some(shard), Some(back)) = (shard.take(), back.take()) {
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

    /// MSET k0 `value` k1 `value` ... of `keys` keys, request 1.
    fn mset_of(keys: usize, value: &str) -> Op {
        let mut words = vec![b"MSET".to_vec()];
        for i in 0..keys {
            words.extend([format!("k{i}").into_bytes(), value.as_bytes().to_vec()]);
        }
        Op::Command {
            seq: 1,
            args: words,
        }
    }

    #[test]
    fn the_inline_engine_applies_reads_and_snapshots_on_the_calling_thread() {
        let engine = KvEngine::start_inline(kv_snapshot::empty(2), first_connection_id(5));
        let (id, mut replies) = engine.connect();
        assert_eq!(id, (5 << 16) | 1, "ids from the start's clock");
        let mut applier = KvApplier::new(engine.clone());
        let mset = mset_of(20, "1");
        let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
        assert!(
            keyspace::op_shards(&mset, 2).len() == 2,
            "spans both shards"
        );
        applier
            .apply(7, 1_000, id as i64, &mset.to_bytes(), true)
            .expect("applies");
        // A transaction spanning shards borrows them (the lent shards come
        // back before the next message) and runs after what is pending.
        let exec = Op::Exec {
            seq: 2,
            watches: Vec::new(),
            commands: keys.iter().map(|k| args(&["INCR", k])).collect(),
        };
        applier
            .apply(8, 1_001, id as i64, &exec.to_bytes(), true)
            .expect("applies");
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
            route(&args(&["GET", "k3"])),
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
    fn a_command_batch_applies_as_its_commands_one_after_another() {
        let engine = KvEngine::start_inline(kv_snapshot::empty(2), first_connection_id(5));
        let (id, mut replies) = engine.connect();
        let mut applier = KvApplier::new(engine.clone());
        let single = Op::Command {
            seq: 1,
            args: args(&["SET", "a", "x"]),
        };
        applier
            .apply(9, 1_000, id as i64, &single.to_bytes(), true)
            .expect("applies");
        let mut words = vec!["MSET"];
        let keys: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
        for key in &keys {
            words.extend([key.as_str(), "1"]);
        }
        let batch = vec![
            args(&["SET", "b", "1"]),
            args(&["INCR", "b"]),
            args(&["APPEND", "a", "y"]),
            args(&words),
            args(&["INCR", "a"]),
        ];
        applier
            .apply(9, 1_001, id as i64, &Op::commands_to_bytes(2, &batch), true)
            .expect("applies");
        applier.flush();
        let mut got = Vec::new();
        while let Ok(message) = replies.try_recv() {
            match message {
                Outbound::Reply(seq, reply) => got.push((seq, reply)),
                Outbound::Replies(some) => got.extend(some),
                other => panic!("expected replies, got {other:?}"),
            }
        }
        // Each shard answers its part in order; the connection puts the
        // replies in request order.
        got.sort_by_key(|(seq, _)| *seq);
        assert_eq!(
            got,
            vec![
                (1, Reply::ok()),
                (2, Reply::ok()),
                (3, Reply::Integer(2)),
                (4, Reply::Integer(2)),
                (5, Reply::ok()),
                (
                    6,
                    Reply::error("ERR value is not an integer or out of range")
                ),
            ]
        );
        // Each command took its own ordinal of entry 9: the single one 0,
        // the batch's 1 to 5 (the MSET's parts share the fourth's).
        let versions = engine.inspect(|view| {
            ["a", "b", "m0", "m7"].map(|key| {
                view.shard(key.as_bytes())
                    .peek(key.as_bytes())
                    .unwrap()
                    .version
            })
        });
        assert_eq!(
            versions,
            [stamp(9, 3), stamp(9, 2), stamp(9, 4), stamp(9, 4)]
        );
        // A batch that does not decode is skipped whole, and takes one
        // ordinal, as any operation that does not decode.
        let mut broken = Op::commands_to_bytes(7, &batch[..2]);
        broken.pop();
        applier
            .apply(9, 1_002, id as i64, &broken, true)
            .expect("applies");
        let set = Op::Command {
            seq: 7,
            args: args(&["SET", "c", "1"]),
        };
        applier
            .apply(9, 1_002, id as i64, &set.to_bytes(), true)
            .expect("applies");
        applier.flush();
        assert_eq!(reply(&mut replies), (7, Reply::ok()));
        assert!(replies.try_recv().is_err(), "nothing from the broken batch");
        let version = engine.inspect(|view| view.shard(b"c").peek(b"c").unwrap().version);
        assert_eq!(version, stamp(9, 7));
    }

    #[test]
    fn an_operation_of_a_newer_release_is_refused_and_a_damaged_one_skipped() {
        let engine = KvEngine::start_inline(kv_snapshot::empty(2), first_connection_id(5));
        let (id, mut replies) = engine.connect();
        let mut applier = KvApplier::new(engine.clone());
        let command = |words: &[&str]| Op::Command {
            seq: 1,
            args: args(words),
        };
        let mut kind = command(&["SET", "a", "1"]).to_bytes();
        kind[0] = 99;
        let unknown_in_exec = Op::Exec {
            seq: 1,
            watches: Vec::new(),
            commands: vec![args(&["SET", "a", "1"]), args(&["LPUSH", "l", "x"])],
        };
        let option_in_exec = Op::Exec {
            seq: 1,
            watches: Vec::new(),
            commands: vec![
                args(&["SET", "a", "1"]),
                args(&["SET", "a", "2", "IFEQ", "1"]),
            ],
        };
        let newer: [(Vec<u8>, &str); 8] = [
            (kind, "kind 99"),
            (
                command(&["LPUSH", "l", "x"]).to_bytes(),
                "unknown command 'LPUSH'",
            ),
            (
                command(&["SET", "a"]).to_bytes(),
                "wrong number of arguments for 'set'",
            ),
            (command(&[]).to_bytes(), "without a name"),
            (unknown_in_exec.to_bytes(), "unknown command 'LPUSH'"),
            (
                Op::commands_to_bytes(1, &[args(&["SET", "a", "1"]), args(&["GETEX", "a"])]),
                "unknown command 'GETEX'",
            ),
            (
                command(&["SET", "a", "1", "IFEQ", "0"]).to_bytes(),
                "'set' with arguments this release refuses: ERR syntax error",
            ),
            (option_in_exec.to_bytes(), "'set' with arguments"),
        ];
        for (index, (body, named)) in newer.iter().enumerate() {
            let error = applier
                .apply(index as u64 + 1, 1_000, id as i64, body, true)
                .expect_err("a newer release's operation");
            assert!(error.to_string().contains(named), "{error}");
        }
        // A damaged operation of a kind this release knows is skipped on
        // every replica alike: the node goes on.
        let mut damaged = command(&["SET", "a", "1"]).to_bytes();
        damaged.pop();
        applier
            .apply(10, 1_000, id as i64, &damaged, true)
            .expect("skipped");
        applier
            .apply(
                11,
                1_000,
                id as i64,
                &command(&["SET", "b", "2"]).to_bytes(),
                true,
            )
            .expect("applies");
        applier.flush();
        assert_eq!(reply(&mut replies), (1, Reply::ok()));
        // Only the last SET and the first command of the refused batch
        // (queued before the refusal; the node stops there) reached a shard.
        let keys = engine.inspect(|view| view.shards().map(|s| s.key_count()).sum::<usize>());
        assert_eq!(keys, 2);
    }

    /// The route a session finds for `args`, a keyspace read.
    fn route(args: &Args) -> ReadRoute {
        ReadRoute::checked(args).expect("a keyspace read")
    }

    /// Runs `look` on shard `shard`'s thread; its result.
    fn on_shard<R: Send + 'static>(
        engine: &Arc<KvEngine>,
        shard: usize,
        look: impl FnOnce(&KvEngine) -> R + Send + 'static,
    ) -> R {
        let (to, from) = std::sync::mpsc::channel();
        let there = engine.clone();
        engine.spawn_on(shard, async move {
            let _ = to.send(look(&there));
        });
        from.recv().expect("the shard thread runs it")
    }

    #[test]
    fn a_read_on_its_shards_thread_runs_there_after_what_was_queued() {
        let engine = KvEngine::start(kv_snapshot::empty(2), first_connection_id(7));
        let (id, mut replies) = engine.connect();
        let mut applier = KvApplier::new(engine.clone());
        let (key, other) = (b"k1".to_vec(), b"k3".to_vec());
        let shard = engine.shard_of(&key);
        assert_ne!(shard, engine.shard_of(&other), "the test needs both shards");
        for (index, (k, v)) in [(&key, "one"), (&other, "two"), (&key, "three")]
            .into_iter()
            .enumerate()
        {
            let set = Op::Command {
                seq: index as u64 + 1,
                args: vec![b"SET".to_vec(), k.clone(), v.as_bytes().to_vec()],
            };
            applier
                .apply(index as u64 + 1, 1_000, id as i64, &set.to_bytes(), true)
                .expect("applies");
            applier.flush();
        }
        let get = |k: &[u8]| vec![b"GET".to_vec(), k.to_vec()];
        let clocks = Clocks::read(1_000, 1_000);
        // Its shard's thread: the writes queued before are applied first.
        let (args, theirs) = (get(&key), get(&key));
        let here = on_shard(&engine, shard, move |e| {
            e.read_here(shard, &args, route(&args), clocks)
        });
        assert_eq!(here, Some(Reply::Bulk(b"three".to_vec())));
        // Another shard's thread, or no shard thread: not here.
        let there = on_shard(&engine, 1 - shard, move |e| {
            e.read_here(shard, &theirs, route(&theirs), clocks)
        });
        assert_eq!(there, None);
        let ours = get(&key);
        assert_eq!(engine.read_here(shard, &ours, route(&ours), clocks), None);
        // A lent shard is not read in place; a queued read waits for it.
        let outlet = engine.outlet_of(id).unwrap();
        engine.inspect(|_| {
            let args = get(&key);
            let lent = on_shard(&engine, shard, move |e| {
                e.read_here(shard, &args, route(&args), clocks)
            });
            assert_eq!(lent, None, "lent: not read in place");
            engine.read(
                shard,
                get(&key),
                route(&get(&key)),
                clocks,
                Responder {
                    outlet: outlet.clone(),
                    seq: 9,
                },
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        });
        let mut answered = Vec::new();
        while answered.len() < 4 {
            match replies.blocking_recv() {
                Some(Outbound::Reply(seq, reply)) => answered.push((seq, reply)),
                other => panic!("expected replies, got {other:?}"),
            }
        }
        assert!(answered.contains(&(9, Reply::Bulk(b"three".to_vec()))));
        let args = get(&key);
        let back = on_shard(&engine, shard, move |e| {
            e.read_here(shard, &args, route(&args), clocks)
        });
        assert_eq!(back, Some(Reply::Bulk(b"three".to_vec())), "home again");
        engine.stop();
    }

    #[test]
    fn batches_nobody_waits_for_are_applied_before_anything_that_observes_the_shard() {
        let engine = KvEngine::start(kv_snapshot::empty(2), first_connection_id(9));
        let (id, mut replies) = engine.connect();
        let mut applier = KvApplier::new(engine.clone());
        let key = b"quiet".to_vec();
        let shard = engine.shard_of(&key);
        // Writes asked on another node: no reply here, the thread is not
        // woken for them (more than QUIET_MESSAGES_MAX of them: it is).
        let writes = QUIET_MESSAGES_MAX as u64 + 10;
        for index in 1..=writes {
            let incr = Op::Command {
                seq: index,
                args: vec![b"INCR".to_vec(), key.clone()],
            };
            applier
                .apply(index, 1_000, 1, &incr.to_bytes(), false)
                .expect("applies");
            applier.flush();
        }
        let outlet = engine.outlet_of(id).unwrap();
        let get = vec![b"GET".to_vec(), key.clone()];
        engine.read(
            shard,
            get.clone(),
            route(&get),
            Clocks::read(1_000, 1_000),
            Responder { outlet, seq: 1 },
        );
        match replies.blocking_recv() {
            Some(Outbound::Reply(1, reply)) => {
                assert_eq!(reply, Reply::Bulk(writes.to_string().into_bytes()))
            }
            other => panic!("expected the read's reply, got {other:?}"),
        }
        // One more quiet write, then a read in place on the shard's thread.
        let incr = Op::Command {
            seq: 0,
            args: vec![b"INCR".to_vec(), key.clone()],
        };
        applier
            .apply(writes + 1, 1_000, 1, &incr.to_bytes(), false)
            .expect("applies");
        applier.flush();
        let here = on_shard(&engine, shard, move |e| {
            e.read_here(shard, &get, route(&get), Clocks::read(1_000, 1_000))
        });
        assert_eq!(
            here,
            Some(Reply::Bulk((writes + 1).to_string().into_bytes()))
        );
        engine.stop();
    }

    #[test]
    fn a_shard_answers_a_connections_run_of_writes_and_its_reads_in_one_message_each() {
        let engine = KvEngine::start(kv_snapshot::empty(2), first_connection_id(11));
        let (first, mut first_replies) = engine.connect();
        let (second, mut second_replies) = engine.connect();
        let mut applier = KvApplier::new(engine.clone());
        let key = b"counter".to_vec();
        let shard = engine.shard_of(&key);
        // One entry: three INCRs of the first connection, one of the
        // second's, one more of the first's (a run per connection).
        let askers = [first, first, first, second, first];
        for (seq, &asker) in askers.iter().enumerate() {
            let incr = Op::Command {
                seq: seq as u64 + 1,
                args: vec![b"INCR".to_vec(), key.clone()],
            };
            applier
                .apply(7, 1_000, asker as i64, &incr.to_bytes(), true)
                .expect("applies");
        }
        applier.flush();
        let int = |n: i64| Reply::Integer(n);
        match first_replies.blocking_recv() {
            Some(Outbound::Replies(run)) => {
                assert_eq!(run, vec![(1, int(1)), (2, int(2)), (3, int(3))])
            }
            other => panic!("expected the first run in one message, got {other:?}"),
        }
        assert!(matches!(
            second_replies.blocking_recv(),
            Some(Outbound::Reply(4, Reply::Integer(4)))
        ));
        assert!(matches!(
            first_replies.blocking_recv(),
            Some(Outbound::Reply(5, Reply::Integer(5)))
        ));
        // Reads of one connection on one shard: one message, in order.
        let reads = [
            (6, vec![b"GET".to_vec(), key.clone()]),
            (7, vec![b"EXISTS".to_vec(), key.clone()]),
            (8, vec![b"GET".to_vec(), key.clone()]),
        ]
        .map(|(seq, args)| (seq, args.clone(), route(&args)))
        .to_vec();
        let outlet = engine.outlet_of(first).unwrap();
        engine.reads(shard, reads, Clocks::read(1_000, 1_000), outlet);
        match first_replies.blocking_recv() {
            Some(Outbound::Replies(replies)) => assert_eq!(
                replies,
                vec![
                    (6, Reply::Bulk(b"5".to_vec())),
                    (7, int(1)),
                    (8, Reply::Bulk(b"5".to_vec())),
                ]
            ),
            other => panic!("expected the reads' replies in one message, got {other:?}"),
        }
        assert!(first_replies.try_recv().is_err() && second_replies.try_recv().is_err());
        engine.stop();
    }

    /// A Raft entry carries many connections' writes, and a shard is
    /// observable between them (a transaction spanning shards borrows it,
    /// then gives it back before the entry's next write). A WATCH token
    /// taken there must still tell the entry's later writes from its
    /// earlier ones, or an EXEC misses a change made after its WATCH.
    #[test]
    fn a_watch_between_two_writes_of_one_entry_sees_the_second() {
        let engine = KvEngine::start_inline(kv_snapshot::empty(2), first_connection_id(5));
        let (id, mut replies) = engine.connect();
        let mut applier = KvApplier::new(engine.clone());
        let (a, b) = (b"a".as_slice(), b"b".as_slice());
        assert_ne!(engine.shard_of(a), engine.shard_of(b), "keys of two shards");
        let transaction = |seq: u64, watches: Vec<Watch>, value: &str| Op::Exec {
            seq,
            watches,
            commands: vec![
                vec![b"SET".to_vec(), a.to_vec(), value.as_bytes().to_vec()],
                vec![b"SET".to_vec(), b.to_vec(), value.as_bytes().to_vec()],
            ],
        };
        // Entry 7: one transaction, then (after a WATCH of both keys in
        // between) another one.
        applier
            .apply(
                7,
                1_000,
                id as i64,
                &transaction(1, Vec::new(), "1").to_bytes(),
                true,
            )
            .expect("applies");
        let outlet = engine.outlet_of(id).unwrap();
        assert_eq!(
            engine.watch(vec![a.to_vec(), b.to_vec()], Responder { outlet, seq: 2 }),
            2
        );
        applier
            .apply(
                7,
                1_000,
                id as i64,
                &transaction(3, Vec::new(), "2").to_bytes(),
                true,
            )
            .expect("applies");
        applier.flush();
        let mut watches = Vec::new();
        let mut exec_replies = Vec::new();
        while let Ok(message) = replies.try_recv() {
            match message {
                Outbound::Watched(2, parts) => watches.extend(parts),
                Outbound::Reply(seq, reply) => exec_replies.push((seq, reply)),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(watches.len(), 2);
        assert_eq!(exec_replies.len(), 2);
        // Entry 8: the watching connection's transaction must fail: both
        // keys changed after its WATCH (by the second transaction of 7).
        applier
            .apply(
                8,
                1_001,
                id as i64,
                &transaction(4, watches, "3").to_bytes(),
                true,
            )
            .expect("applies");
        applier.flush();
        assert_eq!(reply(&mut replies), (4, Reply::NullArray));
    }

    #[test]
    fn a_split_msets_reply_rides_on_the_part_queued_last() {
        let engine = KvEngine::start_inline(kv_snapshot::empty(4), first_connection_id(5));
        let (id, _replies) = engine.connect();
        let mut applier = KvApplier::new(engine.clone());
        let mset = mset_of(12, "v");
        applier
            .apply(3, 1_000, id as i64, &mset.to_bytes(), true)
            .expect("applies");
        let shards: Vec<usize> = (0..4).filter(|&s| !applier.pending[s].is_empty()).collect();
        assert!(shards.len() > 1, "the MSET spans shards: {shards:?}");
        let answering: Vec<usize> = shards
            .iter()
            .copied()
            .filter(|&s| applier.pending[s].iter().any(|item| item.to.is_some()))
            .collect();
        assert_eq!(
            answering,
            [*shards.last().unwrap()],
            "flush queues that shard last"
        );
        applier.flush();
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

// Every KV operation of an entry takes a write stamp ordinal, and a
// proposal carries at most PIPELINE_COMMANDS_MAX of them (a COMMANDS
// batch): an entry's operations never run out of ordinals.
const _: () = assert!(
    keel_consensus::proposal::BATCH_PROPOSALS_MAX * keel_kv::op::PIPELINE_COMMANDS_MAX
        <= keel_kv::shard::STAMP_ORDINALS_MAX as usize
);

/// A committed KV operation this release cannot apply: a newer release's
/// proposer wrote it (every proposer checks its commands on arrival). The
/// node stops before it (`keel_consensus::ConsensusError::Unapplicable`)
/// rather than skip it and keep a keyspace short of what the others
/// applied.
#[derive(Debug, thiserror::Error)]
pub enum Unapplicable {
    #[error("a KV operation of kind {0}, which this release does not know")]
    Kind(u8),
    #[error("a KV command this release does not know ({0})")]
    Command(String),
}

/// The apply step's side: on the Raft driver's thread, it turns committed
/// KV transactions into shard work, an entry's worth at a time.
pub struct KvApplier {
    engine: Arc<KvEngine>,
    /// Per shard: the entry's writes not yet queued.
    pending: Vec<Vec<Item>>,
    /// The entry of the last operation applied, and its ordinal there
    /// (each operation's write stamp, `keel_kv::shard::stamp`).
    last_index: u64,
    ordinal: u64,
}

impl KvApplier {
    pub fn new(engine: Arc<KvEngine>) -> KvApplier {
        let pending = (0..engine.shard_count()).map(|_| Vec::new()).collect();
        KvApplier {
            engine,
            pending,
            last_index: 0,
            ordinal: 0,
        }
    }

    pub fn engine(&self) -> &Arc<KvEngine> {
        &self.engine
    }

    /// One committed KV proposal at `index` (an operation, or a batch of
    /// one connection's commands), stamped `time_ms` by its proposer;
    /// `connection` (the Txn's session id) is the asking connection when
    /// `asked_here`.
    ///
    /// `Err` for an operation of a newer release (`Unapplicable`): what
    /// the entry held before it may be queued, and the node stops.
    pub fn apply(
        &mut self,
        index: u64,
        time_ms: i64,
        connection: i64,
        body: &[u8],
        asked_here: bool,
    ) -> Result<(), Unapplicable> {
        if !Op::is_batch(body) {
            // One operation: no list around it (an unpipelined write's
            // path stays as short as it was).
            let op = match Op::decode(body) {
                Ok(op) => op,
                Err(error) => return self.undecodable(index, error),
            };
            let outlet = match asked_here && op.seq().is_some() {
                true => self.engine.outlet(connection as u64),
                false => None,
            };
            self.next_ordinal(index);
            return self.apply_op(index, time_ms, op, asked_here, outlet.as_ref());
        }
        let ops = match Op::decode_all(body) {
            Ok(ops) => ops,
            Err(error) => return self.undecodable(index, error),
        };
        // The connection's mailbox, looked up once for the batch (a lock
        // and a map lookup), not once per command.
        let outlet = match asked_here {
            true => self.engine.outlet(connection as u64),
            false => None,
        };
        for op in ops {
            self.next_ordinal(index);
            self.apply_op(index, time_ms, op, asked_here, outlet.as_ref())?;
        }
        Ok(())
    }

    /// A committed KV proposal that does not decode. Every replica decodes
    /// the same bytes alike: skipped everywhere, and counted as one
    /// operation everywhere. Except an operation kind this release does
    /// not know: a newer release wrote it, and the node stops.
    fn undecodable(&mut self, index: u64, error: OpError) -> Result<(), Unapplicable> {
        if let OpError::Kind(kind) = error {
            return Err(Unapplicable::Kind(kind));
        }
        self.next_ordinal(index);
        tracing::error!(index, %error, "committed KV operation does not decode; skipped");
        Ok(())
    }

    /// The next operation of the entry at `index` gets the next ordinal
    /// (the first of an entry 0): counted per operation, before decoding
    /// its arguments, so every replica numbers the same bytes alike.
    fn next_ordinal(&mut self, index: u64) {
        if index == self.last_index {
            self.ordinal += 1;
        } else {
            assert!(index > self.last_index, "entries apply in log order");
            self.last_index = index;
            self.ordinal = 0;
        }
    }

    fn apply_op(
        &mut self,
        index: u64,
        time_ms: i64,
        op: Op,
        asked_here: bool,
        outlet: Option<&Outlet>,
    ) -> Result<(), Unapplicable> {
        // Borrowed, not cloned: the engine's reference count is shared
        // with every connection and shard thread; its atomic increment
        // and decrement per operation were 2.3% of the Raft threads'
        // samples under a pipelined SET load.
        let engine = &self.engine;
        engine.applied_index.store(index, Ordering::Release);
        let clock_ms = engine.clock_ms().max(time_ms);
        engine.clock_ms.store(clock_ms, Ordering::Release);
        let ctx = Ctx {
            stamp: stamp(index, self.ordinal),
            now_ms: clock_ms,
        };
        if matches!(op, Op::Expire { .. }) && asked_here {
            engine.expiry_applied();
        }
        let to = match (outlet, op.seq()) {
            (Some(outlet), Some(seq)) => Some(Responder {
                outlet: outlet.clone(),
                seq,
            }),
            _ => None,
        };
        match keyspace::apply_route(&op, engine.shard_count()) {
            Ok(Some(shard)) => {
                self.pending[shard].push(Item { op, ctx, to });
                return Ok(());
            }
            Ok(None) => {}
            Err(unknown) => return Err(Unapplicable::Command(unknown)),
        }
        let shards = keyspace::op_shards(&op, engine.shard_count());
        if let [shard] = shards[..] {
            self.pending[shard].push(Item { op, ctx, to });
            return Ok(());
        }
        if let Some(parts) = split_mset(&op, engine.shard_count()) {
            // Its parts are queued to their shards together with the rest
            // of the entry: any later read, on any shard, queues behind
            // its part, so no reader sees half of it. The reply rides on
            // the last part: `flush` queues the shards in increasing
            // order, so when the reply comes every part is queued. On the
            // first part, the reply could reach the connection while
            // `flush` had not queued the other parts yet, and its next
            // read, run on its own thread's shard (`read_here`), missed
            // the part of that shard (the random pipelined differential
            // found it on a loaded machine).
            assert!(
                parts.windows(2).all(|pair| pair[0].0 < pair[1].0),
                "parts in increasing shard order, as flush queues them"
            );
            let last = parts.len() - 1;
            let mut to = to;
            for (at, (shard, part)) in parts.into_iter().enumerate() {
                let op = Op::Command { seq: 0, args: part };
                let to = if at == last { to.take() } else { None };
                self.pending[shard].push(Item { op, ctx, to });
            }
            return Ok(());
        }
        // Spanning shards: what came before on each shard goes first,
        // then this runs whole with the shards borrowed.
        self.flush();
        let mut lent = self.engine.borrow_blocking(&shards);
        let reply = keyspace::apply(&mut lent.view(), &op, ctx);
        drop(lent);
        if let (Some(reply), Some(to)) = (reply, to) {
            to.send(reply);
        }
        Ok(())
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
                let awaited = items.iter().any(|item| item.to.is_some());
                let room = items.len().min(APPLY_BATCH_RESERVE_MAX);
                let batch = std::mem::replace(items, Vec::with_capacity(room));
                self.engine.queue(shard, Message::Apply(batch), awaited);
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

thread_local! {
    /// The shard this thread owns (a shard thread's only).
    static OWNED: RefCell<Option<Owned>> = const { RefCell::new(None) };
}

/// A shard thread's state: its shard, its queue and what it publishes.
/// Only ever borrowed for a step that does not wait, so the thread's
/// shard task and its connections' reads (`KvEngine::read_here`) take
/// turns on it.
struct Owned {
    home: Home,
    inbox: crossbeam_channel::Receiver<Message>,
    counters: Arc<ShardCounters>,
    stopped: bool,
}

/// Where draining a shard's queue stopped.
enum Drained {
    /// Nothing left: the shard is home and up to date.
    Empty,
    /// The shard is lent; later messages wait for it.
    Lent,
    /// `Stop` (or the engine is gone).
    Stop,
}

impl Owned {
    /// Handles queued messages until the queue is empty, the shard is
    /// lent or the thread is told to stop. A message being queued by
    /// another thread while this looks is waited for, not missed
    /// (crossbeam's receiver waits for a slot a sender has taken).
    fn drain(&mut self) -> Drained {
        loop {
            if self.stopped {
                return Drained::Stop;
            }
            if self.home.lent.is_some() {
                return Drained::Lent;
            }
            match self.inbox.try_recv() {
                Ok(message) => {
                    if !self.home.handle(message, &self.counters) {
                        self.stopped = true;
                    }
                }
                Err(crossbeam_channel::TryRecvError::Empty) => return Drained::Empty,
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    self.stopped = true;
                }
            }
        }
    }

    /// Ready once a lent shard is back (at once when it is home).
    fn poll_home(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(back) = self.home.lent.as_mut() else {
            return Poll::Ready(());
        };
        match Pin::new(back).poll(cx) {
            Poll::Ready(shard) => {
                self.home.back(shard.expect("a borrowed shard comes back"));
                self.publish();
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Whether a read may run on the shard now: it is home and every
    /// message queued before is handled (this handles them).
    fn settle(&mut self) -> bool {
        self.home.take_back() && matches!(self.drain(), Drained::Empty)
    }

    fn publish(&self) {
        if let Some(shard) = self.home.shard.as_ref() {
            publish(shard, &self.counters);
        }
    }
}

/// A shard thread: a single-threaded runtime whose one standing task
/// handles the shard's queue; the connections spawned on it
/// (`KvEngine::spawn_connection`) share the thread.
fn shard_thread(
    owned: Owned,
    bell: Arc<Notify>,
    runtime_to: std::sync::mpsc::Sender<tokio::runtime::Handle>,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a shard thread's runtime builds");
    let _ = runtime_to.send(runtime.handle().clone());
    OWNED.with_borrow_mut(|slot| *slot = Some(owned));
    runtime.block_on(shard_task(bell));
    // Connections still served here end with the runtime.
    drop(runtime);
    OWNED.with_borrow_mut(|slot| *slot = None);
}

async fn shard_task(bell: Arc<Notify>) {
    loop {
        poll_fn(|cx| OWNED.with_borrow_mut(|owned| owned.as_mut().expect("owned").poll_home(cx)))
            .await;
        // Asked before draining: a message queued after the drain
        // looked leaves a permit, so it is not missed.
        let rung = bell.notified();
        match OWNED.with_borrow_mut(|owned| owned.as_mut().expect("owned").drain()) {
            Drained::Stop => return,
            Drained::Lent => continue,
            Drained::Empty => rung.await,
        }
    }
}

/// A read on `shard`, whose last applied entry's clock is `clock_ms`: it
/// runs at the later of that and the clock it was sent with.
fn read(shard: &mut Shard, clock_ms: i64, args: &Args, route: ReadRoute, clocks: Clocks) -> Reply {
    let clocks = Clocks::read(clocks.ctx.now_ms.max(clock_ms), clocks.display_ms);
    keyspace::run_routed([shard], args, route, clocks)
}

fn publish(shard: &Shard, counters: &ShardCounters) {
    counters
        .keys
        .store(shard.key_count() as u64, Ordering::Relaxed);
    counters
        .expiring
        .store(shard.expiring_count() as u64, Ordering::Relaxed);
    counters
        .expired
        .store(shard.stats.expired_keys.get(), Ordering::Relaxed);
    counters
        .hits
        .store(shard.stats.keyspace_hits.get(), Ordering::Relaxed);
    counters
        .misses
        .store(shard.stats.keyspace_misses.get(), Ordering::Relaxed);
}

impl Home {
    fn new(shard: Shard) -> Home {
        Home {
            shard: Some(shard),
            clock_ms: 0,
            lent: None,
        }
    }

    /// A lent shard is back.
    fn back(&mut self, shard: Shard) {
        self.shard = Some(shard);
        self.lent = None;
    }

    /// Takes a lent shard back if its borrower has returned it; whether
    /// the shard is home.
    fn take_back(&mut self) -> bool {
        let Some(back) = self.lent.as_mut() else {
            return true;
        };
        match back.try_recv() {
            Ok(shard) => {
                self.back(shard);
                true
            }
            Err(oneshot::error::TryRecvError::Empty) => false,
            Err(oneshot::error::TryRecvError::Closed) => {
                panic!("a borrowed shard comes back")
            }
        }
    }

    /// A read on the shard at its state and the log's clock as far as
    /// this shard has seen it.
    fn read(&mut self, args: &Args, route: ReadRoute, clocks: Clocks) -> Reply {
        let current = self.shard.as_mut().expect("the shard is home for a read");
        read(current, self.clock_ms, args, route, clocks)
    }

    /// Handles one message; false on `Stop`. After a `Lend`, the shard
    /// is out until it comes back on `lent`: a shard thread waits for it
    /// (`Owned::poll_home`) before its next message; inline, the borrower
    /// is the sender's own thread and gives it back before it sends
    /// anything else, so it is here when the next message is.
    fn handle(&mut self, message: Message, counters: &ShardCounters) -> bool {
        assert!(
            self.take_back(),
            "a borrowed shard is back before the next message"
        );
        let clock_ms = &mut self.clock_ms;
        let current = self
            .shard
            .as_mut()
            .expect("the shard is home between messages");
        match message {
            Message::Apply(mut items) => {
                let mut run = ReplyRun::default();
                for batch in items.chunks_mut(PREFETCH_KEYS_MAX) {
                    keyspace::prefetch_ops(&*current, batch.iter().map(|item| &item.op));
                    for item in batch {
                        *clock_ms = (*clock_ms).max(item.ctx.now_ms);
                        let reply =
                            keyspace::apply(&mut View::new([&mut *current]), &item.op, item.ctx);
                        if let (Some(reply), Some(to)) = (reply, item.to.take()) {
                            run.push(to, reply);
                        }
                    }
                }
                run.flush();
            }
            Message::Reads {
                reads,
                clocks,
                outlet,
            } => {
                let mut replies = Vec::with_capacity(reads.len());
                for batch in reads.chunks(PREFETCH_KEYS_MAX) {
                    keyspace::prefetch_reads(
                        &*current,
                        batch.iter().map(|(_, args, route)| (args, *route)),
                    );
                    replies.extend(batch.iter().map(|(seq, args, route)| {
                        (*seq, read(current, *clock_ms, args, *route, clocks))
                    }));
                }
                ReplyRun {
                    outlet: Some(outlet),
                    replies,
                }
                .flush();
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
                        token: current.applied_stamp,
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
        if let Some(current) = self.shard.as_ref() {
            publish(current, counters);
        } // else lent: published when it is back
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
