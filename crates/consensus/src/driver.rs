//! The driver shell: one thread owns the sans-IO `Core` (core.rs) and feeds
//! it: client proposals and reads from the server, peer messages from the
//! transport, ticks from the wall clock. Its `Io` is raft-engine for the
//! log, files for snapshots and the TCP transport for peers.
//!
//! One turn: take every queued input (proposals drained into ONE entry:
//! group commit), tick when due, `Core::advance` (send, persist with one
//! fdatasync, apply: see core.rs), then hand a due snapshot to a
//! background thread. Proposals that arrive while an fsync runs queue up
//! and form the next, larger batch: batches grow under load and stay small
//! when idle.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use keel_metrics::Histogram;
use raft::eraftpb::{ConfState, Entry, HardState};
use raft::storage::MemStorage;

use crate::core::{storage_from, Core, CoreConfig, Durable, Io, Outbound, SnapshotSource};
use crate::membership::{Change, Members, Membership, ReconfigError};
use crate::proposal::{Committed, Configuration, Dedup, PROPOSAL_SEQUENCE_BITS};
use crate::store::LogStore;
use crate::transport::{Handover, PeerInbox, PeerInput, Transport};
use crate::wait::{Bell, Poller};
use crate::{snapfile, ConsensusError};

/// Proposals waiting for the driver before `propose` pushes back.
pub const PROPOSAL_QUEUE_MAX: usize = 64 * 1024;
/// Inputs other than proposals (reads, touches, snapshot reports, ...)
/// one driver turn takes at most before it advances.
const CONTROL_INPUTS_PER_TURN_MAX: usize = 4096;
/// Authenticated inbound peer connections waiting for the driver to adopt
/// them (a few per member; more only while members reconnect in a storm).
const ARRIVALS_QUEUED_MAX: usize = 256;
/// How long a clean stop waits for a snapshot being written.
pub const SNAPSHOT_SHUTDOWN_WAIT_MS: u64 = 30_000;

/// An error of the state machine's own kind, passed through consensus.
pub type MachineError = Box<dyn std::error::Error + Send + Sync>;

/// The replicated state machine as the driver sees it. Called on the
/// driver thread, in log order.
pub trait StateMachine: Send + 'static {
    /// Applies the proposals of the committed entry at (index, term), in
    /// order; proposals applied before (resent) are already left out.
    /// `Err`: the entry holds something this release cannot apply (a kind
    /// a newer release wrote). The node stops there
    /// (`ConsensusError::Unapplicable`), as it refuses a file of a newer
    /// format: skipping it would leave this member's state short of what
    /// the others applied, without a word.
    fn apply(
        &mut self,
        index: u64,
        term: u64,
        proposals: &[Committed<'_>],
    ) -> Result<(), MachineError>;
    /// An entry with nothing to apply (a new leader's empty entry).
    fn skip(&mut self, index: u64, term: u64);
    /// Starts a snapshot of the state as applied now; the writer runs on
    /// its own thread while applies go on (it must not stall them).
    fn snapshot_begin(&mut self) -> SnapshotJob;
    /// The snapshot started last is written (or abandoned): whatever the
    /// state machine kept for it can go.
    fn snapshot_end(&mut self);
    /// Proposals (their payloads) Raft refused or this node gave up on:
    /// their sessions must hear so.
    fn dropped(&mut self, payloads: Vec<Vec<u8>>);
    /// This node became leader (true) or stopped being leader (false).
    fn role_changed(&mut self, leader: bool);
    /// Followers saw activity from these sessions (leader only).
    fn touched(&mut self, sessions: &[i64]);
    /// A snapshot from the leader (the state machine's part of a snapshot
    /// file, at `index`) replaces the whole state; refused bytes change
    /// nothing.
    fn restore(&mut self, index: u64, bytes: &[u8]) -> Result<(), MachineError>;
    /// A ReadIndex barrier asked with `context` passed: every entry
    /// committed before it is applied here.
    fn read_ready(&mut self, context: Vec<u8>);
    /// A ReadIndex barrier could not be queued (too many pending).
    fn read_failed(&mut self, context: Vec<u8>);
    /// A membership change completed with the conf-change entry at
    /// (index, term): `members` is the configuration now in effect, the
    /// same on every replica; `reply` is the asking client's context on
    /// the node it asked. Returns the configuration's id (the state
    /// machine's position for it: Keel's zxid).
    fn reconfigured(
        &mut self,
        index: u64,
        term: u64,
        members: &Members,
        time_ms: i64,
        reply: Option<&[u8]>,
    ) -> u64;
    /// A reconfig asked at this node was refused or lost.
    fn reconfig_failed(&mut self, context: Vec<u8>, error: ReconfigError);
}

/// Writes a snapshot's bytes, opaque to consensus, part by part.
pub trait SnapshotWriter: Send + 'static {
    /// Appends the next part of the snapshot to `out`; false once the
    /// last part is out.
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> Result<bool, MachineError>;
}

/// A snapshot to write: its position and its writer.
pub struct SnapshotJob {
    pub index: u64,
    pub term: u64,
    /// The first bytes of the state machine's part (its header), taken
    /// when the job started; consensus puts its envelope before them.
    pub head: Vec<u8>,
    pub writer: Box<dyn SnapshotWriter>,
}

/// Where the loaded snapshot left off (see `snapfile::load_newest`).
#[derive(Debug, Clone, Default)]
pub struct SnapshotPosition {
    pub index: u64,
    pub term: u64,
    /// The proposals it had applied (its envelope's dedup table).
    pub dedup: Dedup,
    /// The configuration as of its index (None before envelope version 2).
    pub configuration: Option<Configuration>,
}

#[derive(Debug, Clone)]
pub struct RaftConfig {
    pub node_id: u64,
    pub data_dir: PathBuf,
    pub tick_ms: u64,
    /// The leader serves linearizable reads from a lease (`CoreConfig::read_lease`).
    pub read_lease: bool,
    /// The log's records are written with O_DIRECT (`LogStore::open_with`).
    pub log_direct_io: bool,
    pub snapshot_every_entries: u64,
    /// ... or once this many log bytes were applied since the last one.
    pub snapshot_every_log_bytes: u64,
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
    /// Client addresses ("host:port") of members listed in `peers`, where
    /// known: shown in the configuration's text.
    pub clients: BTreeMap<u64, String>,
    /// What every peer connection must prove (shared secret, TLS).
    pub peer_auth: crate::peer_auth::PeerAuth,
    /// Start with no member (`peers` holds this node's own listen address
    /// only) and wait to be added by a membership change: the leader sends
    /// the configuration with a snapshot.
    pub join: bool,
    /// This node, as leader, carries out membership changes (ZooKeeper's
    /// reconfigEnabled).
    pub reconfig_enabled: bool,
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
        if self.join {
            return Vec::new();
        }
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
        if self.join {
            return Vec::new();
        }
        let mut ids = self.observers.clone();
        ids.sort_unstable();
        ids
    }

    /// The membership a node starts from before it loaded any (a cluster's
    /// bootstrap list; nothing for a single node or a node joining).
    fn bootstrap_membership(&self) -> Membership {
        if self.join || self.peers.len() <= 1 {
            return Membership::default();
        }
        let peers: Vec<(u64, String)> = self
            .peers
            .iter()
            .map(|(id, address)| (*id, address.to_string()))
            .collect();
        crate::core::bootstrap_membership(&peers, &self.observers, &self.clients)
    }
}

/// Microseconds on this process's monotonic clock (from its first use):
/// the driver's clock, and the one a published read lease is measured on.
pub fn monotonic_us() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// Counters other threads read (mntr, srvr, tests).
#[derive(Default, Debug)]
pub struct RaftStatus {
    /// More than one member: roles are leader/follower, not standalone.
    pub cluster: bool,
    /// This node is an observer (a non-voting learner).
    pub observer: AtomicBool,
    /// A membership change is under way (applied here).
    pub reconfig_pending: AtomicBool,
    /// The membership as applied here (the server shows it as
    /// /zookeeper/config's members and in `conf`).
    pub membership: RwLock<Membership>,
    pub is_leader: AtomicBool,
    pub term: AtomicU64,
    pub leader_id: AtomicU64,
    pub commit_index: AtomicU64,
    pub applied_index: AtomicU64,
    pub last_index: AtomicU64,
    pub snapshots_taken: AtomicU64,
    pub snapshot_index: AtomicU64,
    /// How long the newest snapshot took to write, and the longest.
    pub snapshot_last_ms: AtomicU64,
    pub snapshot_max_ms: AtomicU64,
    pub fsyncs: AtomicU64,
    pub proposals: AtomicU64,
    /// Proposals handed to the state machine (duplicates left out), since
    /// this process started: the log replay's transactions.
    pub proposals_applied: AtomicU64,
    pub batches: AtomicU64,
    /// Heartbeat round trips measured by the peer transport.
    pub heartbeat: Arc<crate::transport::HeartbeatStats>,
    // What ZooKeeper measures in its write path (the server exports these
    // under ZooKeeper's metric names). The core only counts; durations are
    // timed by the driver around it.
    /// One raft-engine write with its fdatasync, µs (`fsynctime`).
    pub fsync_us: Histogram,
    /// From losing the leader (or starting) until a leader is known, µs
    /// (`election_time`).
    pub election_us: Histogram,
    /// Times this node found itself without a leader: at start and each
    /// time it lost one (`looking_count`).
    pub elections_started: AtomicU64,
    /// Reads this leader served from its read lease, without a ReadIndex
    /// round of their own (`CoreConfig::read_lease`).
    pub lease_reads: AtomicU64,
    /// The end of this leader's read lease on `monotonic_us`'s clock (0:
    /// none), published by the Raft thread for readers on other threads
    /// (`lease_covers_read`).
    pub lease_until_us: AtomicU64,
    /// The leader's commit index, published before any message or apply
    /// can make a newer one known: a read under the lease waits until
    /// this node applied it.
    pub lease_commit: AtomicU64,
    /// Leader: an entry appended to its log until it is committed, µs
    /// (`quorum_ack_latency`).
    pub quorum_ack_us: Histogram,
    /// Proposals committed while this node led (`commit_count`).
    pub commits: AtomicU64,
    /// Snapshots this node sent to followers as leader (`snap_count`).
    pub snapshots_sent: AtomicU64,
    /// Snapshot files written, µs each (`snapshottime`).
    pub snapshot_write_us: Histogram,
    /// Bytes of the newest snapshot file written.
    pub snapshot_last_bytes: AtomicU64,
    /// Proposals per group-commit entry (leader).
    pub batch_proposals: Histogram,
    /// The Raft log cannot be written (its file system is full): the
    /// driver waits and tries again, acknowledging no write meanwhile.
    pub log_write_paused: AtomicBool,
    /// Times the log met a full file system.
    pub log_write_pauses: AtomicU64,
    /// The server is stopping: a paused log write gives up.
    pub stopping: AtomicBool,
    /// How long the leader may linger over a batch (`Core::set_linger_us`),
    /// set by the server (`RaftHandle::set_linger_us`).
    pub linger_us: AtomicU64,
}

impl RaftStatus {
    /// A linearizable read may run on this node now, without a ReadIndex
    /// round: it leads under a read lease (`Core`'s `LEASE_TICKS`) that
    /// has not ended, and it has applied every entry it may have told
    /// anyone was committed. Any thread may ask; the state it then reads
    /// is as new as every write acknowledged before this call.
    pub fn lease_covers_read(&self) -> bool {
        let until_us = self.lease_until_us.load(Ordering::Acquire);
        if until_us == 0 || monotonic_us() >= until_us {
            return false;
        }
        let commit = self.lease_commit.load(Ordering::Acquire);
        self.applied_index.load(Ordering::Acquire) >= commit
    }
}

/// Why the driver did not take a proposal or a read barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("the raft driver's queue is full ({PROPOSAL_QUEUE_MAX} waiting)")]
    QueueFull,
    #[error("the raft driver has stopped")]
    Stopped,
}

impl<T> From<crossbeam_channel::TrySendError<T>> for SubmitError {
    fn from(error: crossbeam_channel::TrySendError<T>) -> SubmitError {
        match error {
            crossbeam_channel::TrySendError::Full(_) => SubmitError::QueueFull,
            crossbeam_channel::TrySendError::Disconnected(_) => SubmitError::Stopped,
        }
    }
}

enum Input {
    ReadIndex(Vec<u8>),
    /// A ReadIndex several readers wait for (`Core::read_index_batched`).
    ReadIndexBatched(Vec<u8>),
    Touches(Vec<i64>),
    SnapshotDone {
        index: u64,
        result: Result<(), MachineError>,
        ms: u64,
    },
    /// A leader about to stop hands leadership to its most caught-up voter.
    HandOff,
    /// A client's membership change.
    Reconfig {
        change: Change,
        expected_config_id: Option<u64>,
        authorized: bool,
        context: Vec<u8>,
    },
    Shutdown,
    /// Wakes a driver that is not waiting on proposals: a lingering batch
    /// reached LINGER_BATCH_ENOUGH in the queue (`RaftHandle::propose`).
    Bell,
}

/// The handle the server holds: cheap to clone, thread-safe.
#[derive(Clone)]
pub struct RaftHandle {
    inputs: InputSender,
    /// Proposals have a queue of their own: a leader holding its next
    /// batch does not wait on it (`Driver::run`).
    proposals: Sender<Vec<u8>>,
    bell: Arc<Bell>,
    pub status: Arc<RaftStatus>,
}

/// The driver's control queue: every input queued rings its bell.
#[derive(Clone)]
struct InputSender {
    sender: Sender<Input>,
    bell: Arc<Bell>,
}

impl InputSender {
    fn try_send(&self, input: Input) -> Result<(), crossbeam_channel::TrySendError<Input>> {
        self.sender.try_send(input)?;
        self.bell.ring();
        Ok(())
    }

    fn send(&self, input: Input) {
        if self.sender.send(input).is_ok() {
            self.bell.ring();
        }
    }
}

impl RaftHandle {
    /// Queues a proposal (bytes opaque to consensus) for the log; an
    /// error if the driver is gone or its queue is full (the caller
    /// answers the client with an error).
    pub fn propose(&self, payload: Vec<u8>) -> Result<(), SubmitError> {
        self.proposals.try_send(payload)?;
        if self.proposals.len() == crate::core::LINGER_BATCH_ENOUGH {
            // A lingering leader sends a batch this large at once; it is
            // not listening to this queue, so tell it (once per burst).
            let _ = self.inputs.try_send(Input::Bell);
        } else {
            self.bell.ring_proposal();
        }
        Ok(())
    }

    /// Asks for a linearizable read barrier (sync); an error if the driver
    /// is gone or its queue is full. `context` comes back through
    /// `StateMachine::read_ready`.
    pub fn read_index(&self, context: Vec<u8>) -> Result<(), SubmitError> {
        Ok(self.inputs.try_send(Input::ReadIndex(context))?)
    }

    /// The same, for a barrier several readers wait for: the driver may
    /// hold it until `core::READ_SPACING_US` passed since its last round.
    pub fn read_index_batched(&self, context: Vec<u8>) -> Result<(), SubmitError> {
        Ok(self.inputs.try_send(Input::ReadIndexBatched(context))?)
    }

    /// How long the leader may linger over a batch from now on (at most
    /// `core::LINGER_US_MAX`; 0: never). See `Core::set_linger_us`.
    pub fn set_linger_us(&self, linger_us: u64) {
        assert!(linger_us <= crate::core::LINGER_US_MAX);
        self.status.linger_us.store(linger_us, Ordering::Relaxed);
    }

    pub fn shutdown(&self) {
        self.status.stopping.store(true, Ordering::Relaxed);
        self.inputs.send(Input::Shutdown);
    }

    /// Asks a leader to hand leadership to its most caught-up voter (a
    /// planned stop); nothing happens on a follower or a single node. The
    /// caller watches `is_leader` to know when it is done.
    pub fn hand_off(&self) {
        let _ = self.inputs.try_send(Input::HandOff);
    }

    pub fn is_leader(&self) -> bool {
        self.status.is_leader.load(Ordering::Acquire)
    }

    /// Asks for a membership change (see `Core::reconfigure`); an error if
    /// the driver is gone or its queue is full.
    pub fn reconfigure(
        &self,
        change: Change,
        expected_config_id: Option<u64>,
        authorized: bool,
        context: Vec<u8>,
    ) -> Result<(), SubmitError> {
        Ok(self.inputs.try_send(Input::Reconfig {
            change,
            expected_config_id,
            authorized,
            context,
        })?)
    }

    /// The membership as applied here.
    pub fn membership(&self) -> Membership {
        self.status
            .membership
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
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
    pub position: SnapshotPosition,
    store: LogStore,
    storage: MemStorage,
    config: RaftConfig,
    /// The data dir's identity (None: a joining node that has not learned
    /// its cluster yet).
    identity: Option<Identity>,
    membership: Membership,
}

/// Checks the data dir's identity (creating the data dir and a one-member
/// group on first start). Call before loading a snapshot.
pub fn prepare(config: &RaftConfig) -> Result<(), ConsensusError> {
    assert!(config.node_id > 0, "raft node ids start at 1");
    make_data_dir(config)?;
    check_identity(config).map(|_| ())
}

/// The data dir and its snapshots directory, made if missing; an error
/// names the data dir (a path that is a file, a directory without write
/// permission).
fn make_data_dir(config: &RaftConfig) -> Result<(), ConsensusError> {
    std::fs::create_dir_all(config.data_dir.join("snapshots")).map_err(|source| {
        ConsensusError::DataDir {
            path: config.data_dir.clone(),
            source,
        }
    })
}

/// Opens the log behind the snapshot the caller loaded (at `position`).
pub fn recover(config: RaftConfig, position: SnapshotPosition) -> Result<Recovery, ConsensusError> {
    assert!(config.node_id > 0, "raft node ids start at 1");
    make_data_dir(&config)?;
    let identity = check_identity(&config)?;
    let started = std::time::Instant::now();
    let store = LogStore::open_with(&config.data_dir.join("raft"), config.log_direct_io)?;
    let recovered = store.recover()?;
    let stored = match recovered.conf_state {
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
    // raft-rs starts from the configuration as of the loaded snapshot (the
    // log after it replays later changes); a snapshot of envelope version
    // 1 predates membership changes: the stored configuration is its own.
    let (conf_state, membership) = match &position.configuration {
        Some(configuration) => (
            configuration.conf_state.clone(),
            configuration.membership.clone(),
        ),
        None => (stored, config.bootstrap_membership()),
    };
    let member = conf_state
        .voters
        .iter()
        .chain(&conf_state.learners)
        .chain(&conf_state.voters_outgoing)
        .chain(&conf_state.learners_next)
        .any(|id| *id == config.node_id);
    let joining = config.join && position.index == 0;
    if !member && !joining && position.configuration.is_none() {
        return Err(ConsensusError::WrongNode {
            node_id: config.node_id,
            members: conf_state.voters.clone(),
        });
    }
    check_entries(&recovered.entries, position.index)?;
    let last_log_index = recovered.entries.last().map_or(0, |e| e.index);
    if store.drop_covered(position.index)? {
        tracing::warn!(
            snapshot_index = position.index,
            last_log_index,
            "the log ends before the snapshot (its tail was lost); its entries, all covered by the snapshot, are dropped"
        );
    }
    let log_entries = recovered.entries.len();
    let storage = storage_from(Durable {
        snapshot_index: position.index,
        snapshot_term: position.term,
        conf_state,
        hard_state: recovered.hard_state,
        entries: recovered.entries,
    })?;
    let last = position.index.max(last_log_index);
    tracing::info!(
        snapshot_index = position.index,
        log_entries,
        last_index = last,
        read_ms = started.elapsed().as_millis() as u64,
        "recovered"
    );
    Ok(Recovery {
        position,
        store,
        storage,
        config,
        identity,
        membership,
    })
}

impl Recovery {
    /// The commit index the log recorded: a restart applies the log up to
    /// here before it hears from any leader.
    pub fn commit_index(&self) -> u64 {
        self.storage.rl().hard_state().commit
    }
}

/// Every entry still to apply must be in this Keel's entry format: a log
/// written by an older format is refused whole, never misread or skipped.
fn check_entries(entries: &[Entry], applied: u64) -> Result<(), ConsensusError> {
    let to_apply = entries.iter().filter(|e| {
        e.index > applied
            && e.get_entry_type() == raft::eraftpb::EntryType::EntryNormal
            && !e.data.is_empty()
    });
    for entry in to_apply {
        crate::proposal::check_entry_format(&entry.data).map_err(|source| {
            ConsensusError::EntryFormat {
                index: entry.index,
                source,
            }
        })?;
    }
    Ok(())
}

/// IDENTITY's format version, its first line (`format=2`).
pub const IDENTITY_FORMAT: u32 = 2;
/// The version of an IDENTITY without a `format=` line (Keel 0.1.0).
pub const IDENTITY_FORMAT_UNVERSIONED: u32 = 1;
const _: () = assert!(IDENTITY_FORMAT_UNVERSIONED < IDENTITY_FORMAT);

/// What `data_dir/IDENTITY` records: the cluster's id (fixed when the
/// cluster bootstraps: a hash of its name and first member list; learned
/// from the first leader by a node that joins), this node's id, and
/// whether the membership has changed since bootstrap (then `--peers` no
/// longer describes the members and is not checked against the id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub cluster_id: u64,
    pub node_id: u64,
    pub dynamic: bool,
}

impl Identity {
    pub(crate) fn render(&self) -> String {
        let mut text = format!(
            "format={IDENTITY_FORMAT}\ncluster_id={:#018x}\nnode_id={}\n",
            self.cluster_id, self.node_id
        );
        if self.dynamic {
            text.push_str("membership=dynamic\n");
        }
        text
    }

    /// The file's format version: the `format=N` first line, or 1 for a
    /// file without it (Keel 0.1.0). None: a first line that names a
    /// version but not as a number (a damaged file).
    pub(crate) fn format_of(text: &str) -> Option<u32> {
        match text.lines().next().and_then(|l| l.strip_prefix("format=")) {
            Some(version) => version.parse().ok(),
            None => Some(IDENTITY_FORMAT_UNVERSIONED),
        }
    }

    /// A file of a version this Keel reads (`format_of` checked first).
    pub(crate) fn parse(text: &str) -> Option<Identity> {
        let mut lines = text.lines().peekable();
        if let Some(version) = lines.peek().and_then(|l| l.strip_prefix("format=")) {
            let version: u32 = version.parse().ok()?;
            if !(IDENTITY_FORMAT_UNVERSIONED..=IDENTITY_FORMAT).contains(&version) {
                return None;
            }
            lines.next();
        }
        let cluster = lines.next()?.strip_prefix("cluster_id=0x")?;
        let node = lines.next()?.strip_prefix("node_id=")?;
        let dynamic = match lines.next() {
            None => false,
            Some("membership=dynamic") => true,
            Some(_) => return None,
        };
        if lines.next().is_some() || !text.ends_with('\n') {
            return None;
        }
        Some(Identity {
            cluster_id: u64::from_str_radix(cluster, 16).ok()?,
            node_id: node.parse().ok()?,
            dynamic,
        })
    }

    /// Written whole to a temp file, then renamed over the old one.
    fn write(&self, data_dir: &std::path::Path) -> std::io::Result<()> {
        let temp = data_dir.join("IDENTITY.tmp");
        std::fs::write(&temp, self.render())?;
        std::fs::File::open(&temp)?.sync_all()?;
        std::fs::rename(&temp, data_dir.join("IDENTITY"))
    }
}

/// The data dir remembers which cluster and node it belongs to; starting
/// it as another node, or (until its membership changed) with another
/// member list, is refused, never repaired. None: a node joining a
/// cluster, whose id it learns from the first leader.
fn check_identity(config: &RaftConfig) -> Result<Option<Identity>, ConsensusError> {
    let path = config.data_dir.join("IDENTITY");
    let expected = Identity {
        cluster_id: config.cluster_id(),
        node_id: config.node_id,
        dynamic: false,
    };
    // Read as bytes: a damaged file is refused with its path and what it
    // holds, like any other mismatch (not as an io error without a name).
    let read = std::fs::read(&path).map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
    let refuse = |found: String, expected: String| ConsensusError::Identity {
        path: path.clone(),
        found: found.trim().replace('\n', " "),
        expected: expected.trim().replace('\n', " "),
    };
    match read {
        Ok(found) => {
            if let Some(version) = Identity::format_of(&found) {
                if !(IDENTITY_FORMAT_UNVERSIONED..=IDENTITY_FORMAT).contains(&version) {
                    return Err(ConsensusError::FormatVersion {
                        path: path.clone(),
                        found: version,
                        supported: format!("{IDENTITY_FORMAT_UNVERSIONED} to {IDENTITY_FORMAT}"),
                    });
                }
            }
            let Some(identity) = Identity::parse(&found) else {
                return Err(refuse(found, expected.render()));
            };
            let bootstrap_list_applies = !identity.dynamic && !config.join;
            if identity.node_id != config.node_id
                || (bootstrap_list_applies && identity.cluster_id != expected.cluster_id)
            {
                let expected = if bootstrap_list_applies {
                    expected
                } else {
                    Identity {
                        node_id: config.node_id,
                        ..identity
                    }
                };
                return Err(refuse(found, expected.render()));
            }
            Ok(Some(identity))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let nonempty = std::fs::read_dir(config.data_dir.join("raft"))
                .map(|mut d| d.next().is_some())
                .unwrap_or(false);
            if nonempty && !config.join {
                return Err(refuse(
                    "no identity file but a raft log".into(),
                    expected.render(),
                ));
            }
            if config.join {
                return Ok(None);
            }
            expected.write(&config.data_dir)?;
            Ok(Some(expected))
        }
        Err(error) => Err(error.into()),
    }
}

/// The newest snapshot file, for raft-rs's `snapshot()`.
struct SnapshotDir(PathBuf);

impl SnapshotSource for SnapshotDir {
    fn newest(&self) -> Option<(u64, u64, Vec<u8>)> {
        let newest = snapfile::list(&self.0).ok()?;
        let (index, term, path) = newest.into_iter().next()?;
        let data = std::fs::read(path).ok()?;
        Some((index, term, data))
    }
}

/// How often a log write refused for want of space is tried again.
pub const LOG_FULL_RETRY_MS: u64 = 250;

/// Runs a log write until it is not refused for want of space. Raft's
/// contract stays whole: nothing after this write (acknowledgements,
/// applying, the next Ready) happens until it is durable, so a full disk
/// pauses writes (reads are served meanwhile by the server) and frees
/// them by itself once space is back. Only a stop gives up, with the error.
fn until_space<T>(
    status: &RaftStatus,
    mut write: impl FnMut() -> Result<T, ConsensusError>,
) -> Result<T, ConsensusError> {
    let mut paused: Option<Instant> = None;
    loop {
        match write() {
            Err(error) if crate::store::out_of_space(&error) => {
                if paused.is_none() {
                    tracing::error!(%error, "the Raft log's file system is full: no write is acknowledged until space is freed (retrying every {LOG_FULL_RETRY_MS} ms; reads go on)");
                    status.log_write_paused.store(true, Ordering::Relaxed);
                    status.log_write_pauses.fetch_add(1, Ordering::Relaxed);
                    paused = Some(Instant::now());
                }
                if status.stopping.load(Ordering::Relaxed) {
                    return Err(error);
                }
                std::thread::sleep(Duration::from_millis(LOG_FULL_RETRY_MS));
            }
            result => {
                if let Some(since) = paused {
                    let paused_ms = since.elapsed().as_millis() as u64;
                    tracing::warn!(paused_ms, "the Raft log is written again: writes go on");
                    status.log_write_paused.store(false, Ordering::Relaxed);
                }
                return result;
            }
        }
    }
}

/// The server's `Io`: raft-engine, snapshot files, the TCP transport.
struct ShellIo {
    store: LogStore,
    transport: Option<Transport>,
    snapshot_dir: PathBuf,
    status: Arc<RaftStatus>,
    /// This node's own `--peers` addresses: they win for bootstrap members
    /// (a node may reach a peer through its own route or proxy).
    local_peers: HashMap<u64, SocketAddr>,
}

impl Io for ShellIo {
    fn send(&mut self, message: Outbound) {
        let Some(transport) = &self.transport else {
            assert!(
                !matches!(message, Outbound::Raft(_)),
                "a one-member group sends no raft messages"
            );
            return;
        };
        match message {
            Outbound::Raft(message) => transport.send_raft(&message),
            Outbound::Forward { to, batch } => transport.forward(to, &batch),
            Outbound::Touch { to, sessions } => transport.touch(to, &sessions),
            Outbound::Reconfig { to, request } => transport.reconfig(to, &request),
            Outbound::ReconfigAnswer { to, answer } => transport.reconfig_answer(to, &answer),
            Outbound::Members { to, members } => transport.members(to, &members),
        }
    }

    fn set_peers(&mut self, peers: &BTreeMap<u64, (String, bool)>) {
        let Some(transport) = &self.transport else {
            return;
        };
        let mut book = HashMap::new();
        for (id, (address, bootstrap)) in peers {
            if let (true, Some(local)) = (*bootstrap, self.local_peers.get(id)) {
                book.insert(*id, *local);
                continue;
            }
            match std::net::ToSocketAddrs::to_socket_addrs(address.as_str())
                .ok()
                .and_then(|mut a| a.next())
            {
                Some(resolved) => {
                    book.insert(*id, resolved);
                }
                None => tracing::warn!(id, address, "member's peer address does not resolve"),
            }
        }
        if book.is_empty() {
            return; // joining: no member known yet
        }
        if let Err(error) = transport.set_peers(&book) {
            tracing::error!(%error, "cannot start a peer connection");
        }
    }

    fn wall_clock_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }

    fn persist(
        &mut self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
        conf_state: Option<&ConfState>,
    ) -> Result<(), ConsensusError> {
        let started = Instant::now();
        let store = &self.store;
        if until_space(&self.status, || {
            store.persist(entries, hard_state, conf_state)
        })? {
            self.status.fsync_us.record_duration(started.elapsed());
        }
        Ok(())
    }

    fn persist_commit(&mut self, hard_state: &HardState) -> Result<(), ConsensusError> {
        let store = &self.store;
        until_space(&self.status, || store.persist_commit(hard_state))
    }

    fn compact_to(&mut self, index: u64) -> Result<(), ConsensusError> {
        self.store.compact_to(index)
    }

    fn save_snapshot(&mut self, index: u64, term: u64, bytes: &[u8]) -> Result<(), ConsensusError> {
        let directory = &self.snapshot_dir;
        until_space(&self.status, || {
            snapfile::write(directory, index, term, bytes).map(|_| ())
        })
    }

    fn oldest_snapshot_index(&self) -> Option<u64> {
        snapfile::list(&self.snapshot_dir)
            .ok()
            .and_then(|snapshots| snapshots.last().map(|(oldest, _, _)| *oldest))
    }
}

struct Driver<S: StateMachine> {
    core: Core<S, ShellIo, SnapshotDir>,
    identity: IdentityKeeper,
    timings: Timings,
    inputs: Receiver<Input>,
    /// Local proposals (`RaftHandle::propose`).
    proposals: Receiver<Vec<u8>>,
    peer_inputs: Receiver<PeerInput>,
    /// Followers' forwarded batches (`PeerInbox::forwards`).
    forwards: Receiver<PeerInput>,
    /// Keep `peer_inputs` and `forwards` connected when no transport holds
    /// a sender (a single node): a disconnected channel is always ready in
    /// `select!`, and the loop would spin on it.
    _peer_senders: PeerInbox,
    /// The driver's one wait, and the inbound peer connections it reads
    /// itself (`wait.rs`).
    poller: Poller,
    tick: Duration,
    snapshot_dir: PathBuf,
}

/// Starts the driver thread; `machine` already holds the loaded snapshot.
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
    let config = recovery.config;
    let applied = recovery.position.index;
    let membership = recovery.membership;
    // Sequences must grow across restarts: start from the clock (ms << 12)
    // or past the last applied one, whichever is higher.
    let clock_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let sequence_mask = (1u64 << PROPOSAL_SEQUENCE_BITS) - 1;
    let own_applied = recovery.position.dedup.applied(config.node_id);
    let first_sequence = ((clock_ms << 12) & sequence_mask).max(own_applied + 1);
    let (peer_sender, peer_inputs) = crossbeam_channel::bounded(PROPOSAL_QUEUE_MAX);
    let (forward_sender, forwards) = crossbeam_channel::bounded(PROPOSAL_QUEUE_MAX);
    let bell = Bell::new()?;
    let (arrival_sender, arrivals) = crossbeam_channel::bounded(ARRIVALS_QUEUED_MAX);
    let peer_senders = PeerInbox {
        control: peer_sender,
        forwards: forward_sender,
        handover: Some(Handover {
            connections: arrival_sender,
            bell: bell.clone(),
        }),
    };
    let poller = Poller::new(bell.clone(), arrivals)?;
    let cluster_id = recovery.identity.map_or(0, |identity| identity.cluster_id);
    let transport = start_transport(&config, cluster_id, peer_senders.clone())?;
    let (sender, inputs) = crossbeam_channel::bounded(PROPOSAL_QUEUE_MAX);
    let (proposal_sender, proposals) = crossbeam_channel::bounded(PROPOSAL_QUEUE_MAX);
    let status = Arc::new(RaftStatus {
        cluster: transport.is_some(),
        observer: AtomicBool::new(config.observers.contains(&config.node_id) && !config.join),
        heartbeat: transport
            .as_ref()
            .map(|t| t.heartbeat_stats())
            .unwrap_or_default(),
        ..RaftStatus::default()
    });
    let snapshot_dir = config.data_dir.join("snapshots");
    let io = ShellIo {
        store: recovery.store,
        transport,
        snapshot_dir: snapshot_dir.clone(),
        status: status.clone(),
        local_peers: config.peers.iter().copied().collect(),
    };
    let core_config = CoreConfig {
        node_id: config.node_id,
        snapshot_every_entries: config.snapshot_every_entries,
        snapshot_every_log_bytes: config.snapshot_every_log_bytes,
        preferred_leader: config.preferred_leader,
        applied,
        first_sequence,
        dedup: recovery.position.dedup.clone(),
        seed: clock_ms ^ config.node_id,
        log_kept_behind_snapshot: crate::core::LOG_KEPT_BEHIND_SNAPSHOT,
        log_kept_behind_snapshot_bytes: crate::core::LOG_KEPT_BEHIND_SNAPSHOT_BYTES,
        membership,
        reconfig_enabled: config.reconfig_enabled,
        tick_us: config.tick_ms.max(1) * 1000,
        read_lease: config.read_lease,
        #[cfg(feature = "testing")]
        planted_bug: crate::core::PlantedBug::None,
    };
    let core = Core::new(
        core_config,
        recovery.storage,
        SnapshotDir(snapshot_dir.clone()),
        io,
        machine,
        status.clone(),
    )?;
    let timings = Timings::new(status.clone());
    let inputs_sender = InputSender {
        sender,
        bell: bell.clone(),
    };
    let handle = RaftHandle {
        inputs: inputs_sender.clone(),
        proposals: proposal_sender,
        bell,
        status,
    };
    let mut driver = Driver {
        core,
        identity: IdentityKeeper {
            identity: recovery.identity,
            data_dir: config.data_dir.clone(),
            node_id: config.node_id,
            bootstrap_ids: config.peers.iter().map(|(id, _)| *id).collect(),
            joined: config.join,
        },
        timings,
        inputs,
        proposals,
        peer_inputs,
        forwards,
        _peer_senders: peer_senders,
        poller,
        tick: Duration::from_millis(config.tick_ms.max(1)),
        snapshot_dir,
    };
    let thread = std::thread::Builder::new()
        .name("keel-raft".into())
        .spawn(move || driver.run(inputs_sender))?;
    Ok((handle, thread))
}

fn start_transport(
    config: &RaftConfig,
    cluster_id: u64,
    inbox: PeerInbox,
) -> Result<Option<Transport>, ConsensusError> {
    if config.peers.len() <= 1 && !config.join {
        return Ok(None);
    }
    let peers: std::collections::HashMap<u64, std::net::SocketAddr> =
        config.peers.iter().copied().collect();
    let listen = *peers
        .get(&config.node_id)
        .ok_or(ConsensusError::WrongNode {
            node_id: config.node_id,
            members: config.voters(),
        })?;
    // A joining node knows no member: the leader's snapshot brings them.
    let peers = if config.join { HashMap::new() } else { peers };
    Ok(Some(Transport::start(
        config.node_id,
        cluster_id,
        listen,
        &peers,
        config.peer_auth.clone(),
        inbox,
    )?))
}

impl<S: StateMachine> Driver<S> {
    fn run(&mut self, loopback: InputSender) -> Result<(), ConsensusError> {
        let mut next_tick = Instant::now() + self.tick;
        let clock_us = monotonic_us;
        loop {
            self.core.set_clock_us(clock_us());
            self.core
                .set_linger_us(self.core.io().status.linger_us.load(Ordering::Relaxed));
            // Work left from the last turn (a replay applies a bounded
            // amount per turn) must not wait for an input or the tick; a
            // lingering batch wakes the driver when its time is up.
            let timeout = if self.core.has_ready() {
                Duration::ZERO
            } else {
                let tick = next_tick.saturating_duration_since(Instant::now());
                match self.core.wake_at_us() {
                    Some(at_us) => {
                        tick.min(Duration::from_micros(at_us.saturating_sub(clock_us())))
                    }
                    None => tick,
                }
            };
            // A leader holding its next batch (entries in flight, or
            // lingering) is not woken by each proposal or forwarded batch:
            // they wait in their queues and join the batch when an ack,
            // the linger's end or any other input wakes it. Under a
            // read-mostly load that was most of the leader's wake-ups.
            // (A forwarded batch arriving on a socket the driver reads
            // wakes it like any frame, and waits in the poller's queue.)
            let holding = self.core.holding();
            let (inputs, peer_inputs) = (&self.inputs, &self.peer_inputs);
            let (proposals, forwards) = (&self.proposals, &self.forwards);
            let has_forwards = self.poller.has_forwards();
            let pending = || {
                !inputs.is_empty()
                    || !peer_inputs.is_empty()
                    || (!holding && (!proposals.is_empty() || !forwards.is_empty() || has_forwards))
            };
            let core = &mut self.core;
            self.poller
                .wait(holding, timeout, pending, &mut |input| core.peer(input));
            for _ in 0..CONTROL_INPUTS_PER_TURN_MAX {
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
                self.core.peer(input);
            }
            while self.core.batch_has_room() {
                let Some(input) = self
                    .poller
                    .take_forward()
                    .or_else(|| self.forwards.try_recv().ok())
                else {
                    break;
                };
                self.core.peer(input);
            }
            while self.core.batch_has_room() {
                let Ok(payload) = self.proposals.try_recv() else {
                    break;
                };
                self.core.propose(payload);
            }
            let reports = self
                .core
                .io()
                .transport
                .as_ref()
                .map(|t| t.take_snapshot_reports())
                .unwrap_or_default();
            for report in reports {
                self.core.snapshot_transfer_ended(report.to, report.sent);
            }
            if Instant::now() >= next_tick {
                self.core.tick();
                next_tick = Instant::now() + self.tick;
            }
            // A failed write or fdatasync of the purge thread stops the
            // node as one of this thread's would.
            if let Some(failed) = self.core.io().store.failure() {
                return Err(failed);
            }
            self.core.set_clock_us(clock_us());
            let before = self.timings.before_advance();
            self.core.advance()?;
            self.timings.after_advance(before);
            self.identity.keep(&self.core)?;
            self.maybe_snapshot(&loopback);
        }
    }

    /// A clean stop lets a running snapshot finish (bounded), so no
    /// half-written temp file or unpruned snapshot is left behind.
    fn await_snapshot(&mut self) {
        let deadline = Instant::now() + Duration::from_millis(SNAPSHOT_SHUTDOWN_WAIT_MS);
        while self.core.snapshot_running() {
            match self.inputs.recv_deadline(deadline) {
                Ok(Input::SnapshotDone { index, result, ms }) => {
                    self.core.snapshot_done(index, result, ms)
                }
                Ok(_) => {}
                Err(_) => return tracing::warn!("stopping with a snapshot still being written"),
            }
        }
    }

    fn take(&mut self, input: Input) {
        match input {
            Input::ReadIndex(context) => self.core.read_index(context),
            Input::ReadIndexBatched(context) => self.core.read_index_batched(context),
            Input::Touches(sessions) => self.core.touches(sessions),
            Input::SnapshotDone { index, result, ms } => self.core.snapshot_done(index, result, ms),
            Input::HandOff => {
                if self.core.hand_off().is_none() {
                    tracing::info!("no hand-off: not the leader, or no other active voter");
                }
            }
            Input::Reconfig {
                change,
                expected_config_id,
                authorized,
                context,
            } => self
                .core
                .reconfigure(change, expected_config_id, authorized, context),
            Input::Bell => {}
            Input::Shutdown => unreachable!("handled by the loop"),
        }
    }

    /// Writes a due snapshot on its own thread, part by part, while the
    /// driver keeps applying; it hears back through `loopback`.
    fn maybe_snapshot(&mut self, loopback: &InputSender) {
        let Some(job) = self.core.take_snapshot_job() else {
            return;
        };
        let dir = self.snapshot_dir.clone();
        let loopback = loopback.clone();
        let status = self.timings.status.clone();
        let index = job.index;
        let spawned = std::thread::Builder::new()
            .name("keel-snapshot".into())
            .spawn(move || {
                background_priority();
                let started = Instant::now();
                let (index, term) = (job.index, job.term);
                let result = snapfile::write_streaming(&dir, index, term, &job.head, job.writer)
                    .map_err(MachineError::from);
                let elapsed = started.elapsed();
                let ms = elapsed.as_millis() as u64;
                match &result {
                    Ok(bytes) => {
                        status.snapshot_write_us.record_duration(elapsed);
                        status.snapshot_last_bytes.store(*bytes, Ordering::Relaxed);
                        tracing::info!(index, bytes, ms, ok = true, "snapshot written")
                    }
                    Err(error) => tracing::error!(index, %error, ms, "snapshot failed"),
                }
                loopback.send(Input::SnapshotDone {
                    index,
                    result: result.map(|_| ()),
                    ms,
                });
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start snapshot thread");
            self.core.snapshot_done(index, Err(error.into()), 0);
        }
    }
}

/// Keeps IDENTITY true as the membership changes: a joining node writes it
/// once it learned its cluster (and installed the leader's snapshot); a
/// node whose members are no longer the bootstrap list marks it dynamic.
struct IdentityKeeper {
    identity: Option<Identity>,
    data_dir: PathBuf,
    node_id: u64,
    bootstrap_ids: Vec<u64>,
    joined: bool,
}

impl IdentityKeeper {
    fn keep<S: StateMachine>(
        &mut self,
        core: &Core<S, ShellIo, SnapshotDir>,
    ) -> Result<(), ConsensusError> {
        if self.identity.is_some_and(|identity| identity.dynamic) {
            return Ok(());
        }
        let Some(identity) = self.identity else {
            let cluster_id = core
                .io()
                .transport
                .as_ref()
                .map_or(0, |transport| transport.cluster_id());
            if cluster_id == 0 || core.applied() == 0 {
                return Ok(());
            }
            let identity = Identity {
                cluster_id,
                node_id: self.node_id,
                dynamic: true,
            };
            identity.write(&self.data_dir)?;
            tracing::info!(
                cluster_id = format_args!("{cluster_id:#x}"),
                "joined the cluster"
            );
            self.identity = Some(identity);
            return Ok(());
        };
        let membership = core.membership();
        let ids: Vec<u64> = membership.members.keys().copied().collect();
        if membership.config_id != 0 && (self.joined || ids != self.bootstrap_ids) {
            let identity = Identity {
                dynamic: true,
                ..identity
            };
            identity.write(&self.data_dir)?;
            self.identity = Some(identity);
        }
        Ok(())
    }
}

/// Leader entries whose commit the driver times at once (one per
/// `advance` that appended): past this, later ones go untimed until the
/// oldest commit.
pub const QUORUM_ACK_TIMED_MAX: usize = 4096;

/// The clock side of what the core only counts: how long elections take
/// and how long the leader's entries wait for a quorum. Read around each
/// `Core::advance` from the status the core keeps.
struct Timings {
    status: Arc<RaftStatus>,
    /// Since when this node knows no leader; None while it knows one.
    looking_since: Option<Instant>,
    /// Leader: (last index an `advance` appended, when it began), oldest
    /// first.
    appended: std::collections::VecDeque<(u64, Instant)>,
}

/// What `before_advance` saw: the last log index and the time.
struct BeforeAdvance {
    last_index: u64,
    began: Instant,
}

impl Timings {
    /// A node starts without a leader: its first election begins now.
    fn new(status: Arc<RaftStatus>) -> Timings {
        status.elections_started.fetch_add(1, Ordering::Relaxed);
        Timings {
            status,
            looking_since: Some(Instant::now()),
            appended: std::collections::VecDeque::new(),
        }
    }

    fn before_advance(&self) -> BeforeAdvance {
        BeforeAdvance {
            last_index: self.status.last_index.load(Ordering::Acquire),
            began: Instant::now(),
        }
    }

    fn after_advance(&mut self, before: BeforeAdvance) {
        let now = Instant::now();
        let status = &self.status;
        let leader_id = status.leader_id.load(Ordering::Acquire);
        match (leader_id, self.looking_since) {
            (0, None) => {
                self.looking_since = Some(now);
                status.elections_started.fetch_add(1, Ordering::Relaxed);
            }
            (1.., Some(since)) => {
                status.election_us.record_duration(now - since);
                self.looking_since = None;
            }
            _ => {}
        }
        if !status.is_leader.load(Ordering::Acquire) {
            self.appended.clear();
            return;
        }
        let last_index = status.last_index.load(Ordering::Acquire);
        if last_index > before.last_index && self.appended.len() < QUORUM_ACK_TIMED_MAX {
            self.appended.push_back((last_index, before.began));
        }
        let commit_index = status.commit_index.load(Ordering::Acquire);
        while let Some(&(index, began)) = self.appended.front() {
            if index > commit_index {
                break;
            }
            self.appended.pop_front();
            status.quorum_ack_us.record_duration(now - began);
        }
    }
}

/// CPU nice value of the snapshot thread: applies, fsyncs and client
/// threads go first on a busy machine.
pub const SNAPSHOT_THREAD_NICE: i32 = 10;
/// Its I/O priority: best effort, lowest level (7), so the Raft log's
/// fsyncs are not queued behind the snapshot's writes.
const SNAPSHOT_IOPRIO: libc::c_long = (2 << 13) | 7;

/// Lowers this thread's CPU and I/O priority (Linux: both apply to the
/// calling thread): the snapshot writer and the log purge. Failure only
/// costs latency, so it is logged, not fatal.
pub(crate) fn background_priority() {
    // SAFETY: plain syscalls on the calling thread (who = 0), no memory.
    let nice = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, SNAPSHOT_THREAD_NICE) };
    // IOPRIO_WHO_PROCESS = 1 (the calling thread when who = 0).
    let io = unsafe { libc::syscall(libc::SYS_ioprio_set, 1, 0, SNAPSHOT_IOPRIO) };
    if nice != 0 || io != 0 {
        tracing::warn!(nice, io, "could not lower the snapshot thread's priority");
    }
}
