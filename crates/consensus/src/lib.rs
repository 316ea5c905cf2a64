//! keel-consensus: Keel's write path below the server. raft-rs decides,
//! raft-engine stores the log, this crate drives them in the documented
//! order and hands committed proposals (bytes it never interprets) to the
//! state machine.

// The sans-IO core and the transport's types are public only for the
// simulator (feature `testing`); the server needs the driver's API below.
#[cfg(feature = "testing")]
pub mod core;
#[cfg(not(feature = "testing"))]
#[allow(dead_code)]
mod core;
mod driver;
mod handshake;
pub mod membership;
pub mod peer_auth;
pub mod pem;
pub mod proposal;
pub mod snapfile;
mod store;
#[cfg(feature = "testing")]
pub mod transport;
#[cfg(not(feature = "testing"))]
#[allow(dead_code)]
mod transport;
mod wait;
mod zerofill;

#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod lost_log_tests;
#[cfg(test)]
mod membership_tests;
#[cfg(test)]
mod peer_auth_tests;
#[cfg(test)]
mod tests;

#[cfg(feature = "testing")]
pub use crate::core::{Core, CoreConfig, Durable, Io, Outbound, PlantedBug, SnapshotSource};
pub use crate::core::{
    BATCH_BYTES_MAX, ELECTION_TICKS, LINGER_US_MAX, LOG_KEPT_BEHIND_SNAPSHOT,
    LOG_KEPT_BEHIND_SNAPSHOT_BYTES,
};
pub use driver::{
    monotonic_us, prepare, recover, start, MachineError, RaftConfig, RaftHandle, RaftStatus,
    Recovery, SnapshotJob, SnapshotPosition, SnapshotWriter, StateMachine, SubmitError,
    PROPOSAL_QUEUE_MAX,
};
pub use handshake::{HANDSHAKE_TIMEOUT_MS, PEER_PROTOCOL_VERSION};
pub use membership::{Change, Member, Members, Membership, ReconfigError, Role, MEMBERS_MAX};
pub use peer_auth::{PeerAuth, PeerAuthError, PeerSecret, PeerTls};
pub use proposal::{Committed, Configuration, Dedup, Envelope, ProposalError, ProposalId};
pub use store::LogStore;

#[derive(Debug, thiserror::Error)]
pub enum ConsensusError {
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("raft log (raft-engine): {0}")]
    Log(#[from] raft_engine::Error),
    #[error("snapshot writer: {0}")]
    SnapshotWriter(MachineError),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot make the data dir {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("node id {node_id} is not a member of the group stored in this data dir (members {members:?}): wrong --id or a data dir from another cluster")]
    WrongNode { node_id: u64, members: Vec<u64> },
    #[error("{path}: this data dir belongs to {found}, but this node is {expected}: wrong --id or a data dir from another cluster")]
    Identity {
        path: std::path::PathBuf,
        found: String,
        expected: String,
    },
    /// A file written by a Keel whose format this one cannot read:
    /// refused, never misread.
    #[error("{path}: format version {found}, this Keel reads versions {supported}: written by a newer Keel (or damaged)")]
    FormatVersion {
        path: std::path::PathBuf,
        found: u32,
        supported: String,
    },
    #[error("raft log entry {index}: {source}")]
    EntryFormat {
        index: u64,
        source: proposal::ProposalError,
    },
    /// raft-rs has already moved to the leader's snapshot when its state
    /// fails to load: the node cannot go on without it, so it stops (a
    /// restart loads its own snapshot and log, and asks again).
    #[error("the snapshot the leader sent for index {index} fails its checks: {reason}")]
    LeaderSnapshot { index: u64, reason: String },
    /// A write or fdatasync of the Raft log failed, for another reason
    /// than a full disk. After a failed fsync the kernel may have dropped
    /// the pages it could not write and report the next fsync clean
    /// (PostgreSQL's "fsyncgate"), so no retry can prove anything durable:
    /// the node stops.
    #[error("the Raft log in {dir} could not be made durable: {reason}. Stopping: nothing written after the last successful fsync was acknowledged. Check the disk (kernel log), then restart: the log is read back up to its last whole entry")]
    NotDurable {
        dir: std::path::PathBuf,
        reason: String,
    },
    #[error("the log starts at {first_log_index} but the snapshot ends at {snapshot_index}: entries are missing")]
    Gap {
        snapshot_index: u64,
        first_log_index: u64,
    },
    /// raft-engine never stores a hole (it panics on an append past the
    /// last entry, and its recovery keeps only the contiguous tail): a log
    /// handed to `storage_from` with one is refused, where raft-rs would
    /// index its entries out of bounds.
    #[error("the log jumps from entry {after} to entry {next}: entries are missing")]
    Hole { after: u64, next: u64 },
    /// A leader counts this member as holding entries its log no longer
    /// has: its data directory lost acknowledged writes (`core/lost_log.rs`).
    #[error("leader {leader} counts this member as holding the Raft log up to entry {held}, but its log ends at entry {last_index}: its data directory lost entries it had acknowledged (emptied, replaced, or restored from an older copy). Stopping: a member that forgot its log and its vote is not safe to run under its old id. Start it on the data directory it had, or replace it: remove it (reconfig -remove), empty its data directory and add it back with --join (README, \"Membership changes\")")]
    LostLog {
        leader: u64,
        held: u64,
        last_index: u64,
    },
    /// A committed entry this release cannot apply: the node applies
    /// nothing from it on and stops (a restart on a release that knows it
    /// replays it).
    #[error("committed entry {index} cannot be applied by this Keel: {source}. Stopping before it: start this member on the release the other members run (they wrote it); it then applies the entry from its log")]
    Unapplicable { index: u64, source: MachineError },
}
