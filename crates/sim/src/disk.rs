//! The simulated disk and the node's `Io`: what a persist returns is
//! durable; a crash loses what was in flight (a torn last write: the batch
//! being written when the node died is kept whole or lost whole, as
//! raft-engine's checksummed batches are) and any snapshot still being
//! written in the background.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use keel_consensus::core::{Io, Outbound, SnapshotSource};
use keel_consensus::snapfile::{self, SnapshotRefused};
use keel_consensus::{Configuration, ConsensusError, Dedup, SnapshotPosition};
use keel_tree::DataTree;

use crate::machine::SIM_KV_SHARDS;
use raft::eraftpb::{ConfState, Entry, HardState};

/// Snapshots a node keeps (the server keeps the same number of files).
pub const SNAPSHOTS_KEPT: usize = 2;

/// Everything of a node that survives a crash.
#[derive(Debug, Default, Clone)]
pub struct SimDisk {
    pub hard_state: HardState,
    pub conf_state: Option<ConfState>,
    pub entries: BTreeMap<u64, Entry>,
    /// (index, term, encoded tree), oldest first.
    pub snapshots: Vec<(u64, u64, Vec<u8>)>,
    pub writes: u64,
    /// A HardState written without an fsync (only its commit index was
    /// new): the next synced write carries it, a crash may lose it.
    pub unsynced_hard_state: Option<HardState>,
}

impl SimDisk {
    /// As raft-engine's append: an overwrite of a conflicting suffix is
    /// kept, a hole after the last entry and an overwrite of compacted
    /// entries are refused (raft-engine panics on both, so the server
    /// would).
    fn append(&mut self, entries: &[Entry]) {
        if let Some(first) = entries.first() {
            if let (Some(oldest), Some(last)) = (self.first_index(), self.last_index()) {
                assert!(
                    first.index <= last + 1,
                    "an append at {} after the log's last entry {last} leaves a hole",
                    first.index
                );
                assert!(
                    first.index >= oldest,
                    "an append at {} overwrites compacted entries (the log starts at {oldest})",
                    first.index
                );
            }
            self.entries.split_off(&first.index);
        }
        for entry in entries {
            self.entries.insert(entry.index, entry.clone());
        }
    }

    pub fn first_index(&self) -> Option<u64> {
        self.entries.keys().next().copied()
    }

    pub fn last_index(&self) -> Option<u64> {
        self.entries.keys().next_back().copied()
    }

    /// The node died: its unsynced HardState reached the disk before the
    /// crash or it did not.
    pub fn crash(&mut self, unsynced_reached_disk: bool) {
        if let Some(hs) = self.unsynced_hard_state.take() {
            if unsynced_reached_disk {
                self.hard_state = hs;
            }
        }
    }

    pub fn keep_snapshot(&mut self, index: u64, term: u64, bytes: Vec<u8>) {
        self.snapshots.retain(|(i, _, _)| *i != index);
        self.snapshots.push((index, term, bytes));
        self.snapshots.sort_by_key(|(i, _, _)| *i);
        while self.snapshots.len() > SNAPSHOTS_KEPT {
            self.snapshots.remove(0);
        }
    }

    /// The newest snapshot that passes the server's own restart checks
    /// (`snapfile::verify`, the tree decoded as `snapshot::load` does);
    /// as the server's `snapfile::load_newest`, a refused one is set aside
    /// (dropped here) and the previous one tried. An empty tree if none.
    /// With the snapshot's configuration.
    pub fn load_tree(&mut self) -> Loaded {
        let mut refused = Vec::new();
        while let Some((index, term, bytes)) = self.snapshots.last() {
            match verify_snapshot(*index, *term, bytes) {
                Ok(((tree, keyspace), position)) => {
                    return Loaded {
                        tree,
                        keyspace: keyspace
                            .unwrap_or_else(|| keel_kv::snapshot::empty(SIM_KV_SHARDS)),
                        dedup: position.dedup,
                        configuration: position.configuration,
                        refused,
                    }
                }
                Err(error) => {
                    refused.push((*index, error.to_string()));
                    self.snapshots.pop();
                }
            }
        }
        Loaded {
            tree: DataTree::default(),
            keyspace: keel_kv::snapshot::empty(SIM_KV_SHARDS),
            dedup: Dedup::default(),
            configuration: None,
            refused,
        }
    }

    /// Whether a restart could fall back to the snapshot before the
    /// newest: there is one, and the log reaches back to just after it
    /// (a snapshot installed from the leader drops the log before it).
    pub fn fallback_usable(&self) -> bool {
        let Some(len) = self.snapshots.len().checked_sub(2) else {
            return false;
        };
        let previous = self.snapshots[len].0;
        self.entries
            .keys()
            .next()
            .is_some_and(|first| *first <= previous + 1)
    }
}

/// What a restart loaded from the disk.
pub struct Loaded {
    pub tree: DataTree,
    /// The Keel KV keyspace stored after the tree (empty if none).
    pub keyspace: keel_kv::snapshot::Image,
    pub dedup: Dedup,
    /// The configuration as of the snapshot (None: none loaded, or an
    /// envelope older than version 2).
    pub configuration: Option<Configuration>,
    /// Snapshots refused (index, why), newest first; set aside.
    pub refused: Vec<(u64, String)>,
}

/// A node's state as a snapshot holds it: the tree, then the keyspace
/// (`None`: the file has no keyspace part, an empty keyspace).
pub type State = (DataTree, Option<keel_kv::snapshot::Image>);

/// A snapshot checked as the server's restart checks it
/// (`node::load_snapshot`: the tree, then the keyspace's part; one loader
/// thread: a run must not depend on thread scheduling). A file with no
/// keyspace part (no KV write was ever applied) is the tree alone, as
/// `load_snapshot` reads it, without building the empty keyspace's 16,384
/// slot tables: every snapshot is checked, and that would cost a batch a
/// tenth of its time.
pub fn verify_snapshot(
    index: u64,
    term: u64,
    bytes: &[u8],
) -> Result<(State, SnapshotPosition), SnapshotRefused> {
    snapfile::verify(
        index,
        term,
        bytes,
        |state| -> Result<State, keel_consensus::MachineError> {
            if keel_tree::snapshot::part_len(state)? == state.len()
                && !keel_tree::snapshot::followed(state)?
            {
                return Ok((keel_tree::snapshot::decode(state)?, None));
            }
            let (tree, keyspace) = keel_server::node::load_snapshot(state, 1, SIM_KV_SHARDS)?;
            Ok((tree, Some(keyspace)))
        },
        |(tree, _)| tree.applied_index(),
    )
}

pub type SharedDisk = Rc<RefCell<SimDisk>>;

/// A message the node sent, with the extra delay of the fsyncs that came
/// before it in the same `advance` (ms).
pub struct Sent {
    pub message: Outbound,
    pub after_ms: u64,
}

pub struct SimIo {
    pub disk: SharedDisk,
    pub sent: Vec<Sent>,
    /// fsync latency of this node's disk (ms).
    pub fsync_ms: u64,
    /// Time spent in fsyncs during the current `advance` (ms).
    pub busy_ms: u64,
    /// Set by a fault: the next persist dies mid-write.
    pub crash_in_next_write: Option<bool>,
    /// The members this node's transport knows (`Io::set_peers`): it sends
    /// to and accepts from these only, as the server's transport does.
    pub peers: std::collections::BTreeSet<u64>,
}

/// The member a message is for.
pub fn target(message: &Outbound) -> u64 {
    match message {
        Outbound::Raft(m) => m.to,
        Outbound::Forward { to, .. }
        | Outbound::Touch { to, .. }
        | Outbound::Reconfig { to, .. }
        | Outbound::ReconfigAnswer { to, .. }
        | Outbound::Members { to, .. } => *to,
    }
}

impl Io for SimIo {
    fn set_peers(&mut self, peers: &BTreeMap<u64, (String, bool)>) {
        // As the server's driver: an empty book (a joiner that knows no
        // member yet) leaves the transport as it is.
        if peers.is_empty() {
            return;
        }
        self.peers = peers.keys().copied().collect();
    }

    fn send(&mut self, message: Outbound) {
        // The server's transport queues a message only for a member it
        // knows (a member forgotten later still gets what was queued).
        if !self.peers.contains(&target(&message)) {
            return;
        }
        self.sent.push(Sent {
            message,
            after_ms: self.busy_ms,
        });
    }

    fn persist(
        &mut self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
        conf_state: Option<&ConfState>,
    ) -> Result<(), ConsensusError> {
        let mut disk = self.disk.borrow_mut();
        if let Some(reached_disk) = self.crash_in_next_write.take() {
            // Torn write: the whole batch made it or none of it did.
            if reached_disk {
                disk.append(entries);
                if let Some(hs) = hard_state {
                    disk.hard_state = hs.clone();
                }
            }
            return Err(ConsensusError::Io(std::io::Error::other(
                "simulated crash during a log write",
            )));
        }
        // An fsync makes everything written before it durable too.
        if let Some(hs) = disk.unsynced_hard_state.take() {
            disk.hard_state = hs;
        }
        disk.append(entries);
        if let Some(hs) = hard_state {
            disk.hard_state = hs.clone();
        }
        if let Some(cs) = conf_state {
            disk.conf_state = Some(cs.clone());
        }
        disk.writes += 1;
        self.busy_ms += self.fsync_ms;
        Ok(())
    }

    fn persist_commit(&mut self, hard_state: &HardState) -> Result<(), ConsensusError> {
        let mut disk = self.disk.borrow_mut();
        assert_eq!(
            hard_state.term, disk.hard_state.term,
            "term changes are synced"
        );
        assert_eq!(hard_state.vote, disk.hard_state.vote, "votes are synced");
        disk.unsynced_hard_state = Some(hard_state.clone());
        Ok(())
    }

    fn compact_to(&mut self, index: u64) -> Result<(), ConsensusError> {
        let mut disk = self.disk.borrow_mut();
        let kept = disk.entries.split_off(&index);
        disk.entries = kept;
        Ok(())
    }

    fn save_snapshot(&mut self, index: u64, term: u64, bytes: &[u8]) -> Result<(), ConsensusError> {
        self.disk
            .borrow_mut()
            .keep_snapshot(index, term, bytes.to_vec());
        self.busy_ms += self.fsync_ms;
        Ok(())
    }

    fn oldest_snapshot_index(&self) -> Option<u64> {
        self.disk.borrow().snapshots.first().map(|(i, _, _)| *i)
    }
}

/// raft-rs's view of the node's snapshots, for sending one to a follower.
pub struct SimSnapshots(pub SharedDisk);

impl SnapshotSource for SimSnapshots {
    fn newest(&self) -> Option<(u64, u64, Vec<u8>)> {
        self.0.borrow().snapshots.last().cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Default::default()
        }
    }

    #[test]
    fn appends_overwrite_a_conflicting_suffix_and_compaction_drops_the_prefix() {
        let disk: SharedDisk = Rc::default();
        let mut io = SimIo {
            disk: disk.clone(),
            sent: Vec::new(),
            fsync_ms: 2,
            busy_ms: 0,
            crash_in_next_write: None,
            peers: Default::default(),
        };
        io.persist(&[entry(1, 1), entry(2, 1), entry(3, 1)], None, None)
            .unwrap();
        io.persist(&[entry(2, 2)], None, None).unwrap();
        let terms: Vec<(u64, u64)> = disk
            .borrow()
            .entries
            .values()
            .map(|e| (e.index, e.term))
            .collect();
        assert_eq!(terms, vec![(1, 1), (2, 2)]);
        assert_eq!(io.busy_ms, 4);
        io.compact_to(2).unwrap();
        assert_eq!(
            disk.borrow().entries.keys().copied().collect::<Vec<_>>(),
            vec![2]
        );
    }

    #[test]
    #[should_panic(expected = "an append at 153 after the log's last entry 77 leaves a hole")]
    fn an_append_past_the_last_entry_is_refused_as_raft_engine_refuses_it() {
        let mut disk = SimDisk::default();
        disk.append(&[entry(76, 1), entry(77, 1)]);
        disk.append(&[entry(153, 2)]);
    }

    #[test]
    #[should_panic(expected = "an append at 9 overwrites compacted entries (the log starts at 10)")]
    fn an_append_below_the_compacted_log_is_refused_as_raft_engine_refuses_it() {
        let mut disk = SimDisk::default();
        disk.append(&[entry(10, 1), entry(11, 1)]);
        disk.append(&[entry(9, 1)]);
    }

    #[test]
    fn an_empty_log_takes_an_append_at_any_index() {
        let mut disk = SimDisk::default();
        disk.append(&[entry(76, 1), entry(77, 1)]);
        disk.entries.clear();
        disk.append(&[entry(153, 2)]);
        assert_eq!(
            (disk.first_index(), disk.last_index()),
            (Some(153), Some(153))
        );
    }

    fn snapshot_at(index: u64) -> Vec<u8> {
        let mut tree = DataTree::new();
        tree.set_applied(index, 1);
        let mut bytes = Vec::new();
        keel_consensus::Envelope::default().encode(&mut bytes);
        bytes.extend_from_slice(&keel_tree::snapshot::encode_copy(&tree));
        bytes
    }

    #[test]
    fn a_restart_sets_a_corrupt_newest_snapshot_aside_and_loads_the_one_before() {
        let mut disk = SimDisk::default();
        disk.keep_snapshot(10, 1, snapshot_at(10));
        disk.keep_snapshot(20, 1, snapshot_at(20));
        assert!(!disk.fallback_usable(), "no log behind the older one");
        disk.append(&[entry(11, 1), entry(12, 1)]);
        assert!(disk.fallback_usable());
        let newest = &mut disk.snapshots.last_mut().unwrap().2;
        let middle = newest.len() / 2;
        newest[middle] ^= 0x10;
        let loaded = disk.load_tree();
        assert_eq!(loaded.tree.applied_index(), 10);
        assert_eq!(loaded.refused.len(), 1);
        assert_eq!(loaded.refused[0].0, 20);
        assert_eq!(disk.snapshots.len(), 1, "set aside, as the server does");
        assert_eq!(disk.load_tree().refused.len(), 0, "and not refused again");
    }

    #[test]
    fn a_crash_mid_write_keeps_the_batch_whole_or_not_at_all() {
        for reached in [false, true] {
            let disk: SharedDisk = Rc::default();
            let mut io = SimIo {
                disk: disk.clone(),
                sent: Vec::new(),
                fsync_ms: 1,
                busy_ms: 0,
                crash_in_next_write: Some(reached),
                peers: Default::default(),
            };
            assert!(io.persist(&[entry(1, 1), entry(2, 1)], None, None).is_err());
            assert_eq!(disk.borrow().entries.len(), if reached { 2 } else { 0 });
        }
    }
}
