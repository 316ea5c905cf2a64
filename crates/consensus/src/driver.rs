//! The raft-rs driver: one thread owns the RawNode and runs its Ready loop.
//!
//! Order of one turn (raft-rs's documented order, etcd's too):
//! 1. take inputs: proposals (drained into ONE entry: group commit), ticks;
//! 2. Ready: send messages to peers (the leader sends before its own fsync);
//! 3. apply entries committed earlier (they are already durable);
//! 4. persist new entries + HardState through raft-engine, one fdatasync;
//! 5. send persisted messages, advance, apply what became committed;
//! 6. start a background snapshot when enough entries were applied.
//!
//! Proposals that arrive while an fsync runs queue up and form the next,
//! larger batch: batches grow under load and stay small when idle.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use keel_tree::txn::{decode_batch, encode_batch, BATCH_TXNS_MAX};
use keel_tree::{DataTree, Txn};
use raft::eraftpb::{ConfState, Entry, EntryType, Snapshot};
use raft::storage::MemStorage;
use raft::{Config, RawNode, StateRole};

use crate::store::LogStore;
use crate::transport::{PeerInput, Transport};
use crate::{snapfile, ConsensusError};

/// Bytes of encoded transactions one entry may carry.
pub const BATCH_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Proposals waiting for the driver before `propose` pushes back.
pub const PROPOSAL_QUEUE_MAX: usize = 64 * 1024;
/// Entries kept in the log behind a snapshot, so a slightly lagging
/// follower catches up from the log rather than by snapshot install.
pub const LOG_KEPT_BEHIND_SNAPSHOT: u64 = 1_000;
/// How long a clean stop waits for a snapshot being written.
pub const SNAPSHOT_SHUTDOWN_WAIT_MS: u64 = 30_000;
/// Raft ticks per election timeout and per heartbeat.
pub const ELECTION_TICKS: usize = 10;
pub const HEARTBEAT_TICKS: usize = 2;

/// The replicated state machine as the driver sees it. Called on the
/// driver thread, in log order.
pub trait StateMachine: Send + 'static {
    /// Applies the transactions of the committed entry at (index, term).
    fn apply(&mut self, index: u64, term: u64, txns: Vec<Txn>);
    /// An entry with nothing to apply (a new leader's empty entry).
    fn skip(&mut self, index: u64, term: u64);
    /// An O(1) frozen copy of the state for a background snapshot.
    fn freeze(&self) -> DataTree;
    /// Proposals Raft refused (no leader): their sessions must hear so.
    fn dropped(&mut self, txns: Vec<Txn>);
    /// This node became leader (true) or stopped being leader (false).
    fn role_changed(&mut self, leader: bool);
    /// Followers saw activity from these sessions (leader only).
    fn touched(&mut self, sessions: &[i64]);
    /// A snapshot from the leader replaces the whole state.
    fn restore(&mut self, tree: DataTree);
}

#[derive(Debug, Clone)]
pub struct RaftConfig {
    pub node_id: u64,
    pub data_dir: PathBuf,
    pub tick_ms: u64,
    pub snapshot_every_entries: u64,
    /// Every member's peer address as THIS node reaches it, this node's own
    /// entry being its listen address; empty = single node.
    pub peers: Vec<(u64, std::net::SocketAddr)>,
    /// Names the cluster; with the member ids it makes the cluster id.
    pub cluster_name: String,
    /// Leader affinity: the member that should lead whenever it is healthy
    /// and caught up (elections stay plain Raft; the leader transfers).
    pub preferred_leader: Option<u64>,
    /// Members (listed in `peers`) that are observers: non-voting learners.
    pub observers: Vec<u64>,
}

impl RaftConfig {
    /// Identifies the cluster by its name and member ids (not addresses:
    /// each node may reach a peer through its own address or proxy), so a
    /// data dir or a peer from another cluster is recognised and refused.
    pub fn cluster_id(&self) -> u64 {
        let voters: Vec<String> = self.voters().iter().map(|id| id.to_string()).collect();
        let learners: Vec<String> = self.learners().iter().map(|id| id.to_string()).collect();
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in format!(
            "{}/{}/{}",
            self.cluster_name,
            voters.join(","),
            learners.join(",")
        )
        .bytes()
        {
            hash ^= byte as u64;
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        hash
    }

    fn voters(&self) -> Vec<u64> {
        if self.peers.is_empty() {
            return vec![self.node_id];
        }
        let mut ids: Vec<u64> = self
            .peers
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !self.observers.contains(id))
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Observers are raft-rs learners: they replicate and serve, never vote.
    fn learners(&self) -> Vec<u64> {
        let mut ids = self.observers.clone();
        ids.sort_unstable();
        ids
    }
}

/// Counters other threads read (mntr, srvr, tests).
#[derive(Default, Debug)]
pub struct RaftStatus {
    /// More than one member: roles are leader/follower, not standalone.
    pub cluster: bool,
    /// This node is an observer (a non-voting learner).
    pub observer: bool,
    pub is_leader: AtomicBool,
    pub term: AtomicU64,
    pub leader_id: AtomicU64,
    pub commit_index: AtomicU64,
    pub applied_index: AtomicU64,
    pub last_index: AtomicU64,
    pub snapshots_taken: AtomicU64,
    pub snapshot_index: AtomicU64,
    pub fsyncs: AtomicU64,
    pub proposals: AtomicU64,
    pub batches: AtomicU64,
    /// Heartbeat round trips measured by the peer transport.
    pub heartbeat: Arc<crate::transport::HeartbeatStats>,
}

enum Input {
    Propose(Txn),
    Touches(Vec<i64>),
    SnapshotDone {
        index: u64,
        result: Result<(), String>,
    },
    Shutdown,
}

/// The handle the server holds: cheap to clone, thread-safe.
#[derive(Clone)]
pub struct RaftHandle {
    inputs: Sender<Input>,
    pub status: Arc<RaftStatus>,
}

impl RaftHandle {
    /// Queues a transaction for the log; false if the driver is gone or
    /// the queue is full (the caller answers the client with an error).
    pub fn propose(&self, txn: Txn) -> bool {
        self.inputs.try_send(Input::Propose(txn)).is_ok()
    }

    pub fn shutdown(&self) {
        let _ = self.inputs.send(Input::Shutdown);
    }

    pub fn is_leader(&self) -> bool {
        self.status.is_leader.load(Ordering::Acquire)
    }

    /// Reports session activity seen here to the leader.
    pub fn report_touches(&self, sessions: Vec<i64>) {
        let _ = self.inputs.try_send(Input::Touches(sessions));
    }

    pub fn leader_id(&self) -> u64 {
        self.status.leader_id.load(Ordering::Acquire)
    }
}

/// What a node recovers from its data dir before it starts.
pub struct Recovery {
    pub tree: DataTree,
    store: LogStore,
    storage: MemStorage,
    config: RaftConfig,
}

/// Loads the newest valid snapshot and the log tail; creates the data dir
/// and a one-member group on first start.
pub fn recover(config: RaftConfig) -> Result<Recovery, ConsensusError> {
    assert!(config.node_id > 0, "raft node ids start at 1");
    let snapshot_dir = config.data_dir.join("snapshots");
    std::fs::create_dir_all(&snapshot_dir)?;
    check_identity(&config)?;
    let tree = snapfile::load_newest(&snapshot_dir)?.unwrap_or_default();
    let store = LogStore::open(&config.data_dir.join("raft"))?;
    let recovered = store.recover()?;
    let conf_state = match recovered.conf_state {
        Some(cs) => cs,
        None => {
            let cs = ConfState {
                voters: config.voters(),
                learners: config.learners(),
                ..Default::default()
            };
            store.persist(&[], None, Some(&cs))?;
            cs
        }
    };
    if !conf_state.voters.contains(&config.node_id)
        && !conf_state.learners.contains(&config.node_id)
    {
        return Err(ConsensusError::WrongNode {
            node_id: config.node_id,
            members: conf_state.voters.clone(),
        });
    }
    let storage = MemStorage::new();
    if tree.applied_index() > 0 {
        let mut snapshot = Snapshot::default();
        snapshot.mut_metadata().index = tree.applied_index();
        snapshot.mut_metadata().term = tree.applied_term();
        snapshot.mut_metadata().set_conf_state(conf_state.clone());
        storage
            .wl()
            .apply_snapshot(snapshot)
            .map_err(ConsensusError::Raft)?;
    } else {
        storage.wl().set_conf_state(conf_state);
    }
    let tail: Vec<Entry> = recovered
        .entries
        .into_iter()
        .filter(|e| e.index > tree.applied_index())
        .collect();
    if let Some(first) = tail.first() {
        if first.index != tree.applied_index() + 1 {
            return Err(ConsensusError::Gap {
                snapshot_index: tree.applied_index(),
                first_log_index: first.index,
            });
        }
    }
    storage.wl().append(&tail).map_err(ConsensusError::Raft)?;
    let mut hard_state = recovered.hard_state;
    let last = tree.applied_index().max(tail.last().map_or(0, |e| e.index));
    // A commit index beyond what survived (a torn tail) cannot be trusted.
    hard_state.commit = hard_state.commit.clamp(tree.applied_index(), last);
    storage.wl().set_hardstate(hard_state);
    tracing::info!(
        snapshot_index = tree.applied_index(),
        log_entries = tail.len(),
        last_index = last,
        "recovered"
    );
    Ok(Recovery {
        tree,
        store,
        storage,
        config,
    })
}

/// The data dir remembers which cluster and node it belongs to; starting
/// it as another node or in another cluster is refused, never repaired.
fn check_identity(config: &RaftConfig) -> Result<(), ConsensusError> {
    let path = config.data_dir.join("IDENTITY");
    let expected = format!(
        "cluster_id={:#018x}\nnode_id={}\n",
        config.cluster_id(),
        config.node_id
    );
    match std::fs::read_to_string(&path) {
        Ok(found) if found == expected => Ok(()),
        Ok(found) => Err(ConsensusError::Identity {
            path,
            found: found.trim().replace('\n', " "),
            expected: expected.trim().replace('\n', " "),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let nonempty = std::fs::read_dir(config.data_dir.join("raft"))
                .map(|mut d| d.next().is_some())
                .unwrap_or(false);
            if nonempty {
                return Err(ConsensusError::Identity {
                    path,
                    found: "no identity file but a raft log".into(),
                    expected: expected.trim().replace('\n', " "),
                });
            }
            std::fs::write(&path, expected)?;
            Ok(())
        }
        Err(error) => Err(error.into()),
    }
}

struct Driver<S: StateMachine> {
    raw: RawNode<KeelStorage>,
    store: LogStore,
    machine: S,
    inputs: Receiver<Input>,
    peer_inputs: Receiver<PeerInput>,
    transport: Option<Transport>,
    status: Arc<RaftStatus>,
    config: RaftConfig,
    pending: Vec<Txn>,
    pending_bytes: usize,
    snapshot_running: bool,
    last_snapshot_index: u64,
    leader: bool,
    leader_id: u64,
    /// This node's next proposal sequence (see Txn::proposal_id).
    next_sequence: u64,
    /// Ticks since start: paces leadership transfers.
    ticks: u64,
    last_transfer_tick: u64,
    /// This node's proposals not yet seen applied, oldest first: resent to
    /// a new leader after a leader change (the tree drops duplicates).
    unapplied: std::collections::VecDeque<Txn>,
}

/// Proposals of this node kept for resending after a leader change.
pub const UNAPPLIED_PROPOSALS_MAX: usize = 64 * 1024;
const SEQUENCE_MASK: u64 = (1 << keel_tree::PROPOSAL_SEQUENCE_BITS) - 1;

/// raft-rs storage: the in-memory log (MemStorage) for entries and state,
/// plus the newest snapshot FILE for `snapshot()`, so a follower that fell
/// behind the compacted log gets the real tree, not empty metadata.
struct KeelStorage {
    memory: MemStorage,
    snapshot_dir: PathBuf,
}

impl KeelStorage {
    fn wl(&self) -> std::sync::RwLockWriteGuard<'_, raft::storage::MemStorageCore> {
        self.memory.wl()
    }
}

impl raft::Storage for KeelStorage {
    fn initial_state(&self) -> raft::Result<raft::RaftState> {
        self.memory.initial_state()
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: raft::GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.memory.entries(low, high, max_size, context)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        self.memory.term(index)
    }

    fn first_index(&self) -> raft::Result<u64> {
        self.memory.first_index()
    }

    fn last_index(&self) -> raft::Result<u64> {
        self.memory.last_index()
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let unavailable = || raft::Error::Store(raft::StorageError::SnapshotTemporarilyUnavailable);
        let newest = snapfile::list(&self.snapshot_dir).map_err(|_| unavailable())?;
        let Some((index, term, path)) = newest.into_iter().next() else {
            return Err(unavailable());
        };
        if index < request_index {
            return Err(unavailable());
        }
        let data = std::fs::read(path).map_err(|_| unavailable())?;
        let mut snapshot = Snapshot::default();
        snapshot.set_data(data.into());
        snapshot.mut_metadata().index = index;
        snapshot.mut_metadata().term = term;
        snapshot
            .mut_metadata()
            .set_conf_state(self.memory.initial_state()?.conf_state);
        Ok(snapshot)
    }
}

/// Starts the driver thread; `machine` already holds `recovery.tree`.
pub fn start<S: StateMachine>(
    recovery: Recovery,
    machine: S,
) -> Result<
    (
        RaftHandle,
        std::thread::JoinHandle<Result<(), ConsensusError>>,
    ),
    ConsensusError,
> {
    let applied = recovery.tree.applied_index();
    // Sequences must grow across restarts: start from the clock (ms << 12)
    // or past the last applied one, whichever is higher.
    let clock_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let next_sequence = ((clock_ms << 12) & SEQUENCE_MASK)
        .max(recovery.tree.origin_applied(recovery.config.node_id) + 1);
    let raft_config = Config {
        id: recovery.config.node_id,
        election_tick: ELECTION_TICKS,
        heartbeat_tick: HEARTBEAT_TICKS,
        applied,
        pre_vote: true,
        check_quorum: true,
        max_inflight_msgs: 256,
        max_size_per_msg: 1024 * 1024,
        ..Default::default()
    };
    raft_config.validate().map_err(ConsensusError::Raft)?;
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let storage = KeelStorage {
        memory: recovery.storage,
        snapshot_dir: recovery.config.data_dir.join("snapshots"),
    };
    let mut raw = RawNode::new(&raft_config, storage, &logger).map_err(ConsensusError::Raft)?;
    let voters = raw.raft.prs().conf().voters().ids().len();
    if voters == 1 {
        raw.campaign().map_err(ConsensusError::Raft)?;
    }
    let (peer_sender, peer_inputs) = crossbeam_channel::bounded(PROPOSAL_QUEUE_MAX);
    let transport = if recovery.config.peers.len() > 1 {
        let peers: std::collections::HashMap<u64, std::net::SocketAddr> =
            recovery.config.peers.iter().copied().collect();
        let listen = *peers
            .get(&recovery.config.node_id)
            .ok_or(ConsensusError::WrongNode {
                node_id: recovery.config.node_id,
                members: recovery.config.voters(),
            })?;
        Some(Transport::start(
            recovery.config.node_id,
            recovery.config.cluster_id(),
            listen,
            &peers,
            peer_sender,
        )?)
    } else {
        None
    };
    let (sender, inputs) = crossbeam_channel::bounded(PROPOSAL_QUEUE_MAX);
    let status = Arc::new(RaftStatus {
        cluster: transport.is_some(),
        observer: recovery.config.observers.contains(&recovery.config.node_id),
        heartbeat: transport
            .as_ref()
            .map(|t| t.heartbeat_stats())
            .unwrap_or_default(),
        ..RaftStatus::default()
    });
    status.applied_index.store(applied, Ordering::Release);
    let handle = RaftHandle {
        inputs: sender.clone(),
        status: status.clone(),
    };
    let mut driver = Driver {
        raw,
        store: recovery.store,
        machine,
        inputs,
        peer_inputs,
        transport,
        status,
        config: recovery.config,
        pending: Vec::new(),
        pending_bytes: 0,
        snapshot_running: false,
        last_snapshot_index: applied,
        leader: false,
        leader_id: 0,
        next_sequence,
        ticks: 0,
        last_transfer_tick: 0,
        unapplied: std::collections::VecDeque::new(),
    };
    let thread = std::thread::Builder::new()
        .name("keel-raft".into())
        .spawn(move || driver.run(sender))?;
    Ok((handle, thread))
}

impl<S: StateMachine> Driver<S> {
    fn run(&mut self, loopback: Sender<Input>) -> Result<(), ConsensusError> {
        let tick = Duration::from_millis(self.config.tick_ms.max(1));
        let mut next_tick = Instant::now() + tick;
        loop {
            let timeout = next_tick.saturating_duration_since(Instant::now());
            crossbeam_channel::select! {
                recv(self.inputs) -> input => match input {
                    Ok(Input::Shutdown) | Err(_) => {
                        self.await_snapshot();
                        return Ok(());
                    }
                    Ok(input) => self.take(input),
                },
                recv(self.peer_inputs) -> input => {
                    if let Ok(input) = input {
                        self.take_peer(input)?;
                    }
                },
                default(timeout) => {}
            }
            while self.pending.len() < BATCH_TXNS_MAX && self.pending_bytes < BATCH_BYTES_MAX {
                match self.inputs.try_recv() {
                    Ok(Input::Shutdown) => {
                        self.await_snapshot();
                        return Ok(());
                    }
                    Ok(input) => self.take(input),
                    Err(_) => break,
                }
            }
            while let Ok(input) = self.peer_inputs.try_recv() {
                self.take_peer(input)?;
            }
            self.flush_proposals();
            if Instant::now() >= next_tick {
                self.raw.tick();
                self.ticks += 1;
                self.maybe_transfer_to_preferred();
                next_tick = Instant::now() + tick;
            }
            self.on_ready()?;
            self.maybe_snapshot(&loopback);
        }
    }

    /// A clean stop lets a running snapshot finish (bounded), so no
    /// half-written temp file or unpruned snapshot is left behind.
    fn await_snapshot(&mut self) {
        let deadline = Instant::now() + Duration::from_millis(SNAPSHOT_SHUTDOWN_WAIT_MS);
        while self.snapshot_running {
            match self.inputs.recv_deadline(deadline) {
                Ok(Input::SnapshotDone { index, result }) => self.snapshot_done(index, result),
                Ok(_) => {}
                Err(_) => return tracing::warn!("stopping with a snapshot still being written"),
            }
        }
    }

    fn take(&mut self, input: Input) {
        match input {
            Input::Propose(mut txn) => {
                assert_eq!(txn.proposal_id, 0, "local proposals get their id here");
                txn.proposal_id = (self.config.node_id << keel_tree::PROPOSAL_SEQUENCE_BITS)
                    | (self.next_sequence & SEQUENCE_MASK);
                self.next_sequence += 1;
                if self.unapplied.len() >= UNAPPLIED_PROPOSALS_MAX {
                    let oldest = self.unapplied.pop_front().expect("full");
                    self.machine.dropped(vec![oldest]);
                }
                self.unapplied.push_back(txn.clone());
                self.pending_bytes += 64 + txn_body_bytes(&txn);
                self.pending.push(txn);
            }
            Input::Touches(sessions) => match (&self.transport, self.leader) {
                (_, true) => self.machine.touched(&sessions),
                (Some(transport), false) if self.leader_id != 0 => {
                    transport.touch(self.leader_id, &sessions)
                }
                _ => {}
            },
            Input::SnapshotDone { index, result } => self.snapshot_done(index, result),
            Input::Shutdown => unreachable!("handled by the loop"),
        }
    }

    fn take_peer(&mut self, input: PeerInput) -> Result<(), ConsensusError> {
        match input {
            PeerInput::Raft(message) => {
                if let Err(error) = self.raw.step(*message) {
                    tracing::debug!(%error, "raft message refused");
                }
            }
            PeerInput::Forward(batch) => match decode_batch(&batch) {
                Ok(txns) => {
                    self.pending_bytes += batch.len();
                    self.pending.extend(txns);
                }
                Err(error) => tracing::warn!(%error, "forwarded batch does not decode; dropped"),
            },
            PeerInput::Touch(sessions) => {
                if self.leader {
                    self.machine.touched(&sessions);
                }
            }
        }
        Ok(())
    }

    /// Group commit: everything queued becomes one entry; a follower sends
    /// the batch to the leader, which proposes it in arrival order.
    fn flush_proposals(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let txns = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let mut data = Vec::with_capacity(txns.len() * 128);
        encode_batch(&txns, &mut data);
        if !self.leader {
            // No leader known: the proposals wait in `unapplied` and go to
            // the leader once one is elected.
            if let (Some(transport), true) = (&self.transport, self.leader_id != 0) {
                transport.forward(self.leader_id, &data);
            }
            return;
        }
        self.status
            .proposals
            .fetch_add(txns.len() as u64, Ordering::Relaxed);
        self.status.batches.fetch_add(1, Ordering::Relaxed);
        if let Err(error) = self.raw.propose(Vec::new(), data) {
            tracing::warn!(%error, count = txns.len(), "proposal dropped");
            self.machine.dropped(txns);
        }
    }

    fn send(&self, messages: Vec<raft::eraftpb::Message>) {
        match &self.transport {
            Some(transport) => messages.iter().for_each(|m| transport.send_raft(m)),
            None => assert!(messages.is_empty(), "a one-member group sends no messages"),
        }
    }

    fn on_ready(&mut self) -> Result<(), ConsensusError> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();
        if let Some(soft) = ready.ss() {
            self.role(soft.raft_state == StateRole::Leader, soft.leader_id);
        }
        // The leader sends appends before its own fsync (etcd's pipeline).
        self.send(ready.take_messages());
        if !ready.snapshot().is_empty() {
            self.install_snapshot(ready.snapshot().clone())?;
        }
        self.apply_entries(ready.take_committed_entries());
        let entries = ready.take_entries();
        let hard_state = ready.hs().cloned();
        if !entries.is_empty() || hard_state.is_some() {
            self.store.persist(&entries, hard_state.as_ref(), None)?;
            self.status.fsyncs.fetch_add(1, Ordering::Relaxed);
            let mut storage = self.raw.mut_store().wl();
            storage.append(&entries).map_err(ConsensusError::Raft)?;
            if let Some(hs) = hard_state {
                storage.set_hardstate(hs);
            }
        }
        if let Some(last) = entries.last() {
            self.status.last_index.store(last.index, Ordering::Release);
        }
        self.send(ready.take_persisted_messages());
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.raw
                .mut_store()
                .wl()
                .mut_hard_state()
                .set_commit(commit);
            self.status.commit_index.store(commit, Ordering::Release);
        }
        self.send(light.take_messages());
        self.apply_entries(light.take_committed_entries());
        self.raw.advance_apply();
        Ok(())
    }

    /// A follower behind the leader's compacted log receives the tree:
    /// verify it, keep it as our snapshot file, replace the state, drop the
    /// log it covers.
    fn install_snapshot(&mut self, snapshot: Snapshot) -> Result<(), ConsensusError> {
        let index = snapshot.get_metadata().index;
        let term = snapshot.get_metadata().term;
        let tree = match keel_tree::snapshot::decode(&snapshot.data) {
            Ok(tree) if tree.applied_index() == index => tree,
            Ok(_) | Err(_) => {
                tracing::error!(index, "snapshot from the leader fails its checks; ignored");
                return Ok(());
            }
        };
        snapfile::write(
            &self.config.data_dir.join("snapshots"),
            index,
            term,
            &snapshot.data,
        )?;
        self.store
            .persist(&[], None, Some(snapshot.get_metadata().get_conf_state()))?;
        self.store.compact_to(index + 1)?;
        self.raw
            .mut_store()
            .wl()
            .apply_snapshot(snapshot)
            .map_err(ConsensusError::Raft)?;
        self.machine.restore(tree);
        self.status.applied_index.store(index, Ordering::Release);
        self.last_snapshot_index = index;
        tracing::info!(index, term, "installed snapshot from the leader");
        Ok(())
    }

    fn role(&mut self, leader: bool, leader_id: u64) {
        let new_leader = leader_id != self.leader_id && leader_id != 0;
        self.leader_id = leader_id;
        self.status.leader_id.store(leader_id, Ordering::Release);
        self.status
            .term
            .store(self.raw.raft.term, Ordering::Release);
        if leader != self.leader {
            self.leader = leader;
            self.status.is_leader.store(leader, Ordering::Release);
            tracing::info!(leader, term = self.raw.raft.term, "raft role changed");
            self.machine.role_changed(leader);
        }
        if new_leader && !self.unapplied.is_empty() {
            // Proposals sent to the old leader may be lost: resend them all,
            // in order; the tree applies each proposal id once.
            tracing::info!(
                count = self.unapplied.len(),
                leader_id,
                "resending proposals to the new leader"
            );
            self.pending.extend(self.unapplied.iter().cloned());
        }
    }

    fn apply_entries(&mut self, entries: Vec<Entry>) {
        for entry in entries {
            let (index, term) = (entry.index, entry.term);
            match entry.get_entry_type() {
                EntryType::EntryNormal if !entry.data.is_empty() => match decode_batch(&entry.data)
                {
                    Ok(txns) => {
                        self.forget_applied(&txns);
                        self.machine.apply(index, term, txns)
                    }
                    Err(error) => {
                        // Every replica decodes the same bytes the same way, so
                        // skipping keeps them equal; it is still a bug to see.
                        tracing::error!(index, %error, "committed entry does not decode; skipped");
                        self.machine.skip(index, term);
                    }
                },
                _ => self.machine.skip(index, term),
            }
            self.status.applied_index.store(index, Ordering::Release);
        }
    }
    /// Leader affinity (ZNBase's idea, done with raft-rs's leader transfer):
    /// a leader that is not the preferred member hands leadership over once
    /// the preferred one is active and has every entry. Elections are never
    /// delayed, so a dead preferred node costs nothing.
    fn maybe_transfer_to_preferred(&mut self) {
        let Some(preferred) = self.config.preferred_leader else {
            return;
        };
        if !self.leader
            || preferred == self.config.node_id
            || self.ticks < self.last_transfer_tick + ELECTION_TICKS as u64
        {
            return;
        }
        let last_index = self.raw.raft.raft_log.last_index();
        let ready = self
            .raw
            .raft
            .prs()
            .get(preferred)
            .is_some_and(|p| p.recent_active && p.matched >= last_index);
        if ready {
            tracing::info!(preferred, "transferring leadership to the preferred member");
            self.last_transfer_tick = self.ticks;
            self.raw.transfer_leader(preferred);
        }
    }

    /// Drops this node's proposals that an applied batch carried (or that
    /// came before them: proposals of one origin apply in order).
    fn forget_applied(&mut self, txns: &[Txn]) {
        let own = txns
            .iter()
            .filter(|t| t.proposal_id >> keel_tree::PROPOSAL_SEQUENCE_BITS == self.config.node_id)
            .map(|t| t.proposal_id)
            .max();
        if let Some(newest) = own {
            while self
                .unapplied
                .front()
                .is_some_and(|t| t.proposal_id <= newest)
            {
                self.unapplied.pop_front();
            }
        }
    }

    fn maybe_snapshot(&mut self, loopback: &Sender<Input>) {
        let applied = self.status.applied_index.load(Ordering::Acquire);
        if self.snapshot_running
            || applied < self.last_snapshot_index + self.config.snapshot_every_entries
        {
            return;
        }
        let frozen = self.machine.freeze();
        assert_eq!(
            frozen.applied_index(),
            applied,
            "state machine and driver disagree on the applied index"
        );
        self.snapshot_running = true;
        let dir = self.config.data_dir.join("snapshots");
        let loopback = loopback.clone();
        let spawned = std::thread::Builder::new()
            .name("keel-snapshot".into())
            .spawn(move || {
                let started = Instant::now();
                let mut bytes = Vec::new();
                keel_tree::snapshot::encode(&frozen, &mut bytes);
                let result =
                    snapfile::write(&dir, frozen.applied_index(), frozen.applied_term(), &bytes)
                        .map(|_| ())
                        .map_err(|e| e.to_string());
                tracing::info!(
                    index = frozen.applied_index(),
                    bytes = bytes.len(),
                    ms = started.elapsed().as_millis() as u64,
                    ok = result.is_ok(),
                    "snapshot written"
                );
                let _ = loopback.send(Input::SnapshotDone {
                    index: frozen.applied_index(),
                    result,
                });
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start snapshot thread");
            self.snapshot_running = false;
        }
    }

    fn snapshot_done(&mut self, index: u64, result: Result<(), String>) {
        self.snapshot_running = false;
        if let Err(error) = result {
            tracing::error!(index, %error, "snapshot failed; log kept");
            return;
        }
        self.last_snapshot_index = index;
        self.status.snapshots_taken.fetch_add(1, Ordering::Relaxed);
        self.status.snapshot_index.store(index, Ordering::Release);
        // Keep the log from the OLDEST kept snapshot on: if the newest one
        // turns out corrupt at restart, the fallback still has its tail.
        let oldest_kept = snapfile::list(&self.config.data_dir.join("snapshots"))
            .ok()
            .and_then(|snapshots| snapshots.last().map(|(oldest, _, _)| *oldest))
            .unwrap_or(0)
            .min(index);
        let compact_index = oldest_kept.saturating_sub(LOG_KEPT_BEHIND_SNAPSHOT);
        if compact_index > 1 {
            if let Err(error) = self.store.compact_to(compact_index) {
                tracing::error!(%error, "log compaction failed");
            }
            let _ = self.raw.mut_store().wl().compact(compact_index);
        }
    }
}

fn txn_body_bytes(txn: &Txn) -> usize {
    match &txn.op {
        keel_tree::TxnOp::Request { body, .. } => body.len(),
        _ => 16,
    }
}
