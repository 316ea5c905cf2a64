//! One Keel KV connection: a thin shell around `keel_kv::session::Session`.
//! It reads RESP frames (checked whole before parsing: `keel_kv::resp`),
//! hands each request to the session, carries out its action (a reply,
//! a read on a shard, a write through the Raft log) and writes the
//! replies back in request order.
//!
//! Order within a connection, as Redis executes one client's commands in
//! sequence: writes pipeline (the log keeps their order); reads pipeline
//! too and share ReadIndex barriers; a read waits until the connection's
//! earlier writes are applied, and a write until its earlier reads are
//! answered, so each command sees exactly the connection's commands
//! before it.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use keel_kv::command::Command;
use keel_kv::exec::{route_shards, Clocks};
use keel_kv::keyspace;
use keel_kv::op::{self, Op};
use keel_kv::resp::{Args, Decoder};
use keel_kv::session::{Action, ReadRoute, Session};
use keel_kv::shard::PREFETCH_KEYS_MAX;
use keel_kv::slot::shard_of_slot;
use keel_kv::{Protocol, Reply};
use keel_tree::{Txn, TxnOp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::barrier::BarrierTimeout;
use super::engine::{Outbound, Responder, ShardRead};
use super::KvContext;
use crate::shared::wall_clock_ms;

/// Requests a connection holds read and unanswered; past it the server
/// stops reading its socket until replies go out.
pub const PIPELINE_REQUESTS_MAX: usize = 1024;
/// Reply bytes prepared before they are written out.
pub const OUT_BUFFER_MAX_BYTES: usize = 1 << 20;
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Bytes a proposal's Txn adds around the KV operation.
const TXN_OVERHEAD_BYTES: usize = 64;
/// A KV operation's bytes in one proposal at most.
const PROPOSED_KV_BYTES_MAX: usize =
    keel_consensus::proposal::PROPOSAL_BYTES_MAX - TXN_OVERHEAD_BYTES;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotKind {
    Read,
    Write,
    Other,
}

/// A request waiting for (or holding) its reply.
struct Slot {
    seq: u64,
    protocol: Protocol,
    kind: SlotKind,
    reply: Option<Reply>,
    /// EXEC: the connection's own commands, run when the log's reply
    /// comes (`Session::finish_exec`).
    exec_local: Option<Vec<(usize, Args)>>,
}

/// A read waiting for a barrier.
struct WaitingRead {
    seq: u64,
    args: Args,
    route: ReadRoute,
}

type BarrierFuture = Pin<Box<dyn Future<Output = Result<(), BarrierTimeout>> + Send>>;

struct Connection {
    ctx: Arc<KvContext>,
    id: u64,
    session: Session,
    info: Arc<super::ClientRecord>,
    decoder: Decoder,
    /// Requests read and not handed to the session yet (an empty one
    /// stands for the protocol error in `input_error`, answered in turn).
    incoming: VecDeque<Args>,
    /// Requests at the head of `incoming` whose lookups are prefetched.
    prefetched: usize,
    /// A protocol error ended the input: nothing more is read.
    input_error: Option<Reply>,
    /// The session's action for the head of `incoming`, held back by the
    /// ordering rules.
    held: Option<(u64, Action)>,
    slots: VecDeque<Slot>,
    next_seq: u64,
    reads_open: usize,
    writes_open: usize,
    /// WATCH: shard answers still to come.
    watch_parts: usize,
    /// An EXEC whose connection commands wait for the log's reply: what
    /// follows it waits too, since it must see their effects.
    exec_local_open: bool,
    watch_seq: u64,
    /// A barrier is in flight (its future lives in `run`); `covered` are
    /// the reads it serves, `next_group` those that came after it.
    barrier_in_flight: bool,
    covered: Vec<WaitingRead>,
    next_group: Vec<WaitingRead>,
    outlet: mpsc::UnboundedSender<Outbound>,
    /// Reads of this turn for other shards' threads (shard, request
    /// number, command): sent at the end of the turn, one message per
    /// shard (`forward`).
    forwarded: Vec<(usize, u64, Args, ReadRoute)>,
    closing: bool,
    /// The wall clock (ms) and the monotonic instant, read once per turn
    /// of `run` (a pipelined batch of requests), not once per command:
    /// `None` until a command of the turn needs them.
    turn_clock: Option<(i64, Instant)>,
    /// Commands handed to the session, and reads served under the
    /// leader's lease, this turn: added to the shared counters once per
    /// turn (`report_counts`), not once per command, so the shard threads
    /// do not pass the counters' cache line between cores on every read.
    commands_this_turn: u64,
    /// Batches of pipelined writes proposed this turn (INFO's
    /// keel_write_batches).
    write_batches_this_turn: u64,
    lease_reads_this_turn: u64,
    /// Whether the leader's read lease covered this turn's reads, asked
    /// once per turn at its first read (`lease_covers_turn`).
    lease_this_turn: Option<bool>,
    /// Writes of this turn not proposed yet (request numbers from
    /// `first_seq`, consecutive): proposed together as one COMMANDS batch
    /// (`flush_writes`) when the turn's dispatch ends, before anything
    /// else is proposed, or when the batch is full.
    writes: PendingWrites,
}

#[derive(Default)]
struct PendingWrites {
    first_seq: u64,
    commands: Vec<Args>,
    /// The batch's encoded size (`op::commands_bytes`).
    bytes: usize,
}

pub async fn serve(ctx: Arc<KvContext>, stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().ok();
    let (id, mut inbox) = ctx.engine.connect();
    let outlet = ctx.engine.outlet_of(id).expect("just registered");
    let info = ctx.register_client(id, peer, local);
    ctx.engine
        .stats
        .connections_received
        .fetch_add(1, Ordering::Relaxed);
    ctx.engine.stats.connected.fetch_add(1, Ordering::Relaxed);
    let mut connection = Connection {
        decoder: Decoder::new(ctx.limits),
        ctx: ctx.clone(),
        id,
        session: Session::new(id),
        info,
        incoming: VecDeque::new(),
        prefetched: 0,
        input_error: None,
        held: None,
        slots: VecDeque::new(),
        next_seq: 1,
        reads_open: 0,
        writes_open: 0,
        watch_parts: 0,
        exec_local_open: false,
        watch_seq: 0,
        barrier_in_flight: false,
        covered: Vec::new(),
        next_group: Vec::new(),
        outlet,
        forwarded: Vec::new(),
        closing: false,
        turn_clock: None,
        commands_this_turn: 0,
        write_batches_this_turn: 0,
        lease_reads_this_turn: 0,
        lease_this_turn: None,
        writes: PendingWrites::default(),
    };
    let outcome = connection.run(stream, &mut inbox).await;
    tracing::debug!(%peer, id, ?outcome, "KV connection ended");
    ctx.engine.disconnect(id);
    ctx.unregister_client(id);
    ctx.engine.stats.connected.fetch_sub(1, Ordering::Relaxed);
}

impl Connection {
    async fn run(
        &mut self,
        mut stream: TcpStream,
        inbox: &mut mpsc::UnboundedReceiver<Outbound>,
    ) -> Result<(), &'static str> {
        let (mut reader, mut writer) = stream.split();
        let mut input: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
        let mut output: Vec<u8> = Vec::new();
        let mut eof = false;
        let mut barrier: Option<BarrierFuture> = None;
        loop {
            self.new_turn();
            self.decode(&mut input);
            self.dispatch().await;
            self.forward();
            if self.barrier_in_flight && barrier.is_none() {
                barrier = Some(self.barrier_future());
            }
            self.collect(&mut output);
            if !output.is_empty() {
                writer.write_all(&output).await.map_err(|_| "write error")?;
                output.clear();
            }
            if self.closing && self.slots.is_empty() {
                return Ok(());
            }
            if eof {
                // Redis drops a closed client's pending replies; its
                // writes already in the log still apply.
                return Err("closed by client");
            }
            let room = self.slots.len() + self.incoming.len() < PIPELINE_REQUESTS_MAX;
            let can_read = room && !self.closing && self.input_error.is_none();
            tokio::select! {
                read = reader.read_buf(&mut input), if can_read => match read {
                    Ok(0) | Err(_) => eof = true,
                    Ok(_) => {}
                },
                message = inbox.recv() => match message {
                    Some(message) => {
                        if let Err(reason) = self.on_message(message) {
                            let _ = writer.write_all(&output).await;
                            return Err(reason);
                        }
                        // Take whatever else is queued without waiting.
                        while let Ok(message) = inbox.try_recv() {
                            self.on_message(message)?;
                        }
                    }
                    None => return Err("engine stopped"),
                },
                passed = poll_barrier(&mut barrier), if barrier.is_some() => {
                    self.new_turn();
                    barrier = None;
                    self.barrier_in_flight = false;
                    self.barrier_done(passed).await;
                }
            }
        }
    }

    /// Decodes the complete frames of `input`.
    fn decode(&mut self, input: &mut Vec<u8>) {
        let mut used = 0;
        while self.input_error.is_none()
            && self.incoming.len() + self.slots.len() < PIPELINE_REQUESTS_MAX
        {
            match self.decoder.decode(&input[used..]) {
                Ok(Some((args, len))) => {
                    used += len;
                    if !args.is_empty() {
                        self.incoming.push_back(args);
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    // Redis answers the requests before it, then the
                    // protocol error, then closes.
                    self.input_error = Some(error.reply());
                    self.incoming.push_back(Vec::new());
                    break;
                }
            }
        }
        input.drain(..used);
    }

    /// Prefetches the lookups of the single-key reads among the next
    /// PREFETCH_KEYS_MAX requests (`KvEngine::prefetch_here`): a pipelined
    /// batch's cache misses overlap instead of coming one per read.
    fn prefetch_ahead(&mut self) {
        let ahead = self.incoming.len().min(PREFETCH_KEYS_MAX);
        self.ctx
            .engine
            .prefetch_here(self.incoming.iter().take(ahead));
        self.prefetched = ahead;
    }

    /// A turn begins: what was read once for the last one is asked again.
    fn new_turn(&mut self) {
        self.turn_clock = None;
        self.lease_this_turn = None;
    }

    /// Whether the leader's read lease covers this turn's reads: asked at
    /// the turn's first read and kept for the rest of it (one clock read
    /// and three atomic loads per turn, not per read). Sound: every
    /// request of the turn was read from the socket before the question,
    /// so a write acknowledged after it is concurrent with them, and the
    /// state they read is at least what was applied when it was asked. A
    /// turn lasts microseconds against the lease's margin of two ticks.
    fn lease_covers_turn(&mut self) -> bool {
        let status = &self.ctx.raft.status;
        *self
            .lease_this_turn
            .get_or_insert_with(|| status.lease_covers_read())
    }

    /// This turn's clock readings (see `turn_clock`).
    fn turn_clock(&mut self) -> (i64, Instant) {
        *self
            .turn_clock
            .get_or_insert_with(|| (wall_clock_ms(), Instant::now()))
    }

    fn slot(&mut self, kind: SlotKind) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        match kind {
            SlotKind::Read => self.reads_open += 1,
            SlotKind::Write => self.writes_open += 1,
            SlotKind::Other => {}
        }
        self.slots.push_back(Slot {
            seq,
            protocol: self.session.protocol(),
            kind,
            reply: None,
            exec_local: None,
        });
        seq
    }

    fn slot_mut(&mut self, seq: u64) -> Option<&mut Slot> {
        let first = self.slots.front()?.seq;
        let at = seq.checked_sub(first)? as usize;
        self.slots.get_mut(at).filter(|s| s.seq == seq)
    }

    /// A reply for request `seq`.
    fn fill(&mut self, seq: u64, reply: Reply) {
        let Some(slot) = self.slot_mut(seq) else {
            return;
        };
        if slot.reply.is_some() {
            return;
        }
        let reply = match slot.exec_local.take() {
            Some(local) => {
                self.exec_local_open = false;
                let server = super::ServerView {
                    ctx: &self.ctx,
                    connection: self.id,
                };
                let reply = self.session.finish_exec(reply, local, &server);
                let (_, now) = self.turn_clock();
                self.info.update(&self.session, now);
                reply
            }
            None => reply,
        };
        let slot = self.slot_mut(seq).expect("found above");
        let kind = slot.kind;
        slot.reply = Some(reply);
        match kind {
            SlotKind::Read => self.reads_open -= 1,
            SlotKind::Write => self.writes_open -= 1,
            SlotKind::Other => {}
        }
    }

    /// Moves the answered head of the queue into `output`.
    fn collect(&mut self, output: &mut Vec<u8>) {
        while let Some(slot) = self.slots.front() {
            if slot.reply.is_none() || output.len() >= OUT_BUFFER_MAX_BYTES {
                break;
            }
            let slot = self.slots.pop_front().expect("a head");
            let reply = slot.reply.expect("answered");
            if reply.is_error() {
                self.ctx.engine.stats.errors.fetch_add(1, Ordering::Relaxed);
            }
            reply.encode(slot.protocol, output);
        }
    }

    fn on_message(&mut self, message: Outbound) -> Result<(), &'static str> {
        match message {
            Outbound::Reply(seq, reply) => self.fill(seq, reply),
            Outbound::Replies(replies) => {
                for (seq, reply) in replies {
                    self.fill(seq, reply);
                }
            }
            Outbound::Watched(seq, watches) => {
                if seq == self.watch_seq && self.watch_parts > 0 {
                    self.session.add_watches(watches);
                    self.watch_parts -= 1;
                    if self.watch_parts == 0 {
                        self.fill(seq, Reply::ok());
                    }
                }
            }
            Outbound::Close(reason) => return Err(reason),
        }
        Ok(())
    }

    /// Handles the decoded requests (`dispatch_requests`), then brings
    /// CLIENT LIST's record of this connection up to date: once a turn,
    /// before the turn's replies go out.
    async fn dispatch(&mut self) {
        if self.dispatch_requests().await {
            let (_, now) = self.turn_clock();
            self.info.update(&self.session, now);
        }
        self.report_counts();
    }

    /// Adds this turn's counts to the shared counters: INFO's
    /// total_commands_processed, and the lease reads that tell the Raft
    /// thread to renew the lease (it looks every tick). Before the turn's
    /// replies are written, so a client that saw a reply sees it counted.
    fn report_counts(&mut self) {
        add_count(
            &self.ctx.engine.stats.commands_processed,
            std::mem::take(&mut self.commands_this_turn),
        );
        add_count(
            &self.ctx.engine.stats.write_batches,
            std::mem::take(&mut self.write_batches_this_turn),
        );
        add_count(
            &self.ctx.raft.status.lease_reads,
            std::mem::take(&mut self.lease_reads_this_turn),
        );
    }

    /// Hands requests to the session and carries out their actions, as
    /// far as the ordering rules allow; whether it handed any. The writes
    /// among them are proposed before it returns.
    async fn dispatch_requests(&mut self) -> bool {
        let handled = self.dispatch_in_order().await;
        self.flush_writes();
        handled
    }

    async fn dispatch_in_order(&mut self) -> bool {
        let mut handled = false;
        loop {
            if self.watch_parts > 0 || self.exec_local_open || self.closing {
                return handled;
            }
            let (seq, action) = match self.held.take() {
                Some(held) => held,
                None => {
                    if self.prefetched == 0 {
                        self.prefetch_ahead();
                    }
                    let Some(args) = self.incoming.pop_front() else {
                        return handled;
                    };
                    self.prefetched -= 1;
                    if args.is_empty() {
                        let error = self
                            .input_error
                            .clone()
                            .expect("an empty request is the error");
                        (0, Action::ReplyAndClose(error))
                    } else {
                        self.commands_this_turn += 1;
                        let server = super::ServerView {
                            ctx: &self.ctx,
                            connection: self.id,
                        };
                        handled = true;
                        (0, self.session.handle(args, &server))
                    }
                }
            };
            if let Err(action) = self.act(seq, action).await {
                self.held = Some(action);
                return handled;
            }
        }
    }

    /// Carries out `action` (its slot `seq` if it already has one); gives
    /// it back when it must wait.
    async fn act(&mut self, seq: u64, action: Action) -> Result<(), (u64, Action)> {
        match action {
            Action::None => Ok(()),
            Action::Reply(reply) => {
                let seq = self.slot(SlotKind::Other);
                self.fill(seq, reply);
                Ok(())
            }
            Action::ReplyAndClose(reply) => {
                let seq = self.slot(SlotKind::Other);
                self.fill(seq, reply);
                self.closing = true;
                Ok(())
            }
            Action::Read(args, route) => {
                if self.writes_open > 0 {
                    return Err((seq, Action::Read(args, route)));
                }
                let seq = if seq == 0 {
                    self.slot(SlotKind::Read)
                } else {
                    seq
                };
                // A single node needs no barrier: every write acknowledged
                // before this read is applied on its shard, and the read
                // queues behind it there. Nor does a leader under its read
                // lease that applied its commit index (the reads of this
                // connection still waiting for a barrier go first).
                let status = &self.ctx.raft.status;
                if self.session.local_reads() || !status.cluster {
                    self.read_now(seq, args, route).await;
                } else if !self.barrier_in_flight && self.lease_covers_turn() {
                    self.lease_reads_this_turn += 1;
                    self.read_now(seq, args, route).await;
                } else {
                    self.await_barrier(seq, args, route);
                }
                Ok(())
            }
            Action::Write(args) => {
                if self.reads_open > 0 {
                    return Err((seq, Action::Write(args)));
                }
                let seq = self.slot(SlotKind::Write);
                self.queue_write(seq, args);
                Ok(())
            }
            Action::Exec {
                watches,
                commands,
                local,
            } => {
                if self.reads_open > 0 {
                    return Err((
                        seq,
                        Action::Exec {
                            watches,
                            commands,
                            local,
                        },
                    ));
                }
                // The writes before it reach the log first.
                self.flush_writes();
                let seq = self.slot(SlotKind::Write);
                if !local.is_empty() {
                    self.exec_local_open = true;
                    self.slot_mut(seq).expect("just made").exec_local = Some(local);
                }
                self.propose_op(
                    seq,
                    Op::Exec {
                        seq,
                        watches,
                        commands,
                    },
                );
                Ok(())
            }
            Action::Watch(keys) => {
                if self.writes_open > 0 {
                    return Err((seq, Action::Watch(keys)));
                }
                // The tokens come from this node's shards: a stale one can
                // only make EXEC fail, never miss a change.
                let seq = self.slot(SlotKind::Other);
                let to = Responder {
                    outlet: self.outlet.clone(),
                    seq,
                };
                self.watch_seq = seq;
                self.watch_parts = self.ctx.engine.watch(keys, to);
                Ok(())
            }
        }
    }

    /// Adds the write numbered `seq` to the turn's batch; a full batch,
    /// or one it would not follow or fit in, is proposed first.
    fn queue_write(&mut self, seq: u64, args: Args) {
        let pending = &self.writes;
        let follows = pending.first_seq + pending.commands.len() as u64 == seq;
        // A batch not empty counts its header already.
        let bytes = pending.bytes + op::args_bytes(&args);
        if !pending.commands.is_empty()
            && (!follows
                || pending.commands.len() == self.ctx.batch_writes_max
                || bytes > PROPOSED_KV_BYTES_MAX)
        {
            self.flush_writes();
        }
        let pending = &mut self.writes;
        if pending.commands.is_empty() {
            pending.first_seq = seq;
            pending.bytes = op::commands_bytes([]);
        }
        pending.bytes += op::args_bytes(&args);
        pending.commands.push(args);
        assert!(pending.commands.len() <= self.ctx.batch_writes_max);
    }

    /// Proposes the turn's pending writes: one alone as a COMMAND, more as
    /// one COMMANDS batch.
    fn flush_writes(&mut self) {
        let first_seq = self.writes.first_seq;
        let mut commands = std::mem::replace(
            &mut self.writes.commands,
            Vec::with_capacity(op::PIPELINE_COMMANDS_MAX),
        );
        self.writes.bytes = 0;
        match commands.len() {
            0 => {}
            1 => {
                let args = commands.pop().expect("one");
                let seq = first_seq;
                self.propose(seq..seq + 1, Op::Command { seq, args }.to_bytes());
            }
            count => {
                let seqs = first_seq..first_seq + count as u64;
                self.propose(seqs, Op::commands_to_bytes(first_seq, &commands));
            }
        }
    }

    /// A write through the Raft log (the requests `seqs` of this
    /// connection); each reply comes when it is applied.
    fn propose_op(&mut self, seq: u64, op: Op) {
        self.propose(seq..seq + 1, op.to_bytes());
    }

    fn propose(&mut self, seqs: std::ops::Range<u64>, body: Vec<u8>) {
        assert!(!seqs.is_empty());
        if body.len() > PROPOSED_KV_BYTES_MAX {
            let text = format!(
                "ERR the command takes {} bytes in the log; one Raft entry holds at most {PROPOSED_KV_BYTES_MAX}",
                body.len()
            );
            for seq in seqs {
                self.fill(seq, Reply::error_owned(text.clone()));
            }
            return;
        }
        let txn = Txn {
            session_id: self.id as i64,
            xid: 0,
            time_ms: wall_clock_ms(),
            auth: Vec::new(),
            op: TxnOp::Kv { body },
        };
        match self.ctx.raft.propose(txn.encode()) {
            // Counted once proposed: a batch refused here is not one.
            Ok(()) if seqs.end - seqs.start >= 2 => self.write_batches_this_turn += 1,
            Ok(()) => {}
            Err(error) => {
                let text = format!("TRYAGAIN the write was not queued: {error}");
                for seq in seqs {
                    self.fill(seq, Reply::error_owned(text.clone()));
                }
            }
        }
    }

    fn await_barrier(&mut self, seq: u64, args: Args, route: ReadRoute) {
        let read = WaitingRead { seq, args, route };
        if self.barrier_in_flight {
            self.next_group.push(read);
            return;
        }
        self.covered.push(read);
        self.barrier_in_flight = true;
    }

    /// The wait for a barrier asked now (`run` polls it).
    fn barrier_future(&self) -> BarrierFuture {
        let ctx = self.ctx.clone();
        Box::pin(async move { ctx.engine.barrier.wait_through(&ctx.raft).await })
    }

    async fn barrier_done(&mut self, passed: Result<(), BarrierTimeout>) {
        let covered = std::mem::take(&mut self.covered);
        for read in covered {
            match &passed {
                Ok(()) => self.read_now(read.seq, read.args, read.route).await,
                Err(error) => {
                    self.fill(read.seq, Reply::error_owned(format!("CLUSTERDOWN {error}")))
                }
            }
        }
        if !self.next_group.is_empty() {
            self.covered = std::mem::take(&mut self.next_group);
            self.barrier_in_flight = true;
        }
    }

    /// Runs a read on this node's shards now.
    async fn read_now(&mut self, seq: u64, args: Args, route: ReadRoute) {
        let (wall_ms, _) = self.turn_clock();
        let engine = &self.ctx.engine;
        // One shard, or the several to borrow.
        let one_or_many = match route.slot {
            Some(slot) => Ok(shard_of_slot(slot, engine.shard_count())),
            None => {
                let command = Command::parse(route.spec, &args).expect("checked by the session");
                let shards = route_shards(&command.route(), engine.shard_count());
                match shards[..] {
                    [shard] => Ok(shard),
                    _ => Err(shards),
                }
            }
        };
        let clocks = Clocks::read(engine.clock_ms(), wall_ms);
        let shards = match one_or_many {
            Ok(shard) => {
                // Served on the shard's own thread: no hand-off. Not once
                // an earlier read of the turn waits to be sent: it will
                // be queued at the turn's cut, later than now, and this
                // later request must not read an older state than it.
                if self.forwarded.is_empty() {
                    if let Some(reply) = engine.read_here(shard, &args, route, clocks) {
                        self.fill(seq, reply);
                        return;
                    }
                }
                // Another thread's shard (or after a read that was sent
                // on): sent with the turn's other reads for it.
                assert!(self.forwarded.len() < PIPELINE_REQUESTS_MAX);
                self.forwarded.push((shard, seq, args, route));
                return;
            }
            Err(shards) => shards,
        };
        // The reads before it go first (answers stay in request order
        // whatever runs first; this keeps the shards' order too).
        self.forward();
        let mut lent = self.ctx.engine.borrow(&shards).await;
        let reply = keyspace::run_spec(&mut lent.view(), route.spec, &args, clocks);
        drop(lent);
        self.fill(seq, reply);
    }

    /// Sends the turn's reads for other threads' shards (and those of this
    /// thread's after the first of them): one message per shard, each with
    /// that shard's reads in request order, all queued at one cut
    /// (`KvEngine::reads_at_one_cut`), so the turn's reads see one state
    /// whatever shards run them.
    fn forward(&mut self) {
        if self.forwarded.is_empty() {
            return;
        }
        let (wall_ms, _) = self.turn_clock();
        let engine = &self.ctx.engine;
        let clocks = Clocks::read(engine.clock_ms(), wall_ms);
        // Stable: each shard's reads stay in request order.
        self.forwarded.sort_by_key(|read| read.0);
        let mut groups: Vec<(usize, Vec<ShardRead>)> = Vec::new();
        for (shard, seq, args, route) in self.forwarded.drain(..) {
            match groups.last_mut() {
                Some((at, reads)) if *at == shard => reads.push((seq, args, route)),
                _ => groups.push((shard, vec![(seq, args, route)])),
            }
        }
        engine.reads_at_one_cut(groups, clocks, &self.outlet);
    }
}

/// Adds `count` to a counter other threads read; nothing when it is 0 (no
/// write to the counter's cache line).
fn add_count(counter: &std::sync::atomic::AtomicU64, count: u64) {
    if count > 0 {
        counter.fetch_add(count, Ordering::Relaxed);
    }
}

async fn poll_barrier(barrier: &mut Option<BarrierFuture>) -> Result<(), BarrierTimeout> {
    match barrier {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}
