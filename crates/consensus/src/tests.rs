//! The dedup of resent proposals, end to end through one `Core`: a
//! proposal that reaches the log twice is applied once, and a node that
//! restarts from a snapshot keeps refusing what the snapshot had applied.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use raft::eraftpb::{ConfState, Entry, HardState};

#[cfg(feature = "testing")]
use crate::core::PlantedBug;
use crate::core::{storage_from, Core, CoreConfig, Durable, Io, Outbound, SnapshotSource};
use crate::membership::{Members, Membership, ReconfigError};
use crate::proposal::{encode_entry, Dedup, Envelope, Proposal, ProposalId};
use crate::transport::PeerInput;
use crate::{Committed, ConsensusError, RaftStatus, SnapshotJob, SnapshotWriter, StateMachine};

/// The shell's IO, doing nothing but record compactions; the oldest
/// snapshot is what a test sets.
#[derive(Default)]
struct TestIo {
    compacted_to: Rc<RefCell<Vec<u64>>>,
    oldest_snapshot: Rc<Cell<Option<u64>>>,
}

impl Io for TestIo {
    fn send(&mut self, _: Outbound) {}
    fn persist(
        &mut self,
        _: &[Entry],
        _: Option<&HardState>,
        _: Option<&ConfState>,
    ) -> Result<(), ConsensusError> {
        Ok(())
    }
    fn persist_commit(&mut self, _: &HardState) -> Result<(), ConsensusError> {
        Ok(())
    }
    fn compact_to(&mut self, index: u64) -> Result<(), ConsensusError> {
        self.compacted_to.borrow_mut().push(index);
        Ok(())
    }
    fn save_snapshot(&mut self, _: u64, _: u64, _: &[u8]) -> Result<(), ConsensusError> {
        Ok(())
    }
    fn oldest_snapshot_index(&self) -> Option<u64> {
        self.oldest_snapshot.get()
    }
}

struct NoSnapshots;

impl SnapshotSource for NoSnapshots {
    fn newest(&self) -> Option<(u64, u64, Vec<u8>)> {
        None
    }
}

/// A payload the Recorder cannot apply (as one a newer release wrote).
const NEWER: &[u8] = b"newer:";

/// Records what it applied, as (origin, payload), and the configurations
/// that came into effect (member ids, reply context).
#[derive(Default)]
struct Recorder {
    applied: Vec<(u64, Vec<u8>)>,
    index: u64,
    term: u64,
    configurations: Vec<(Vec<u64>, Option<Vec<u8>>)>,
    refused: Vec<(Vec<u8>, ReconfigError)>,
}

struct Done;

impl SnapshotWriter for Done {
    fn next_chunk(&mut self, _: &mut Vec<u8>) -> Result<bool, crate::MachineError> {
        Ok(false)
    }
}

impl StateMachine for Recorder {
    fn apply(
        &mut self,
        index: u64,
        term: u64,
        proposals: &[Committed<'_>],
    ) -> Result<(), crate::MachineError> {
        if let Some(newer) = proposals.iter().find(|p| p.payload.starts_with(NEWER)) {
            return Err(format!("{:?} is of a newer release", newer.payload).into());
        }
        self.applied
            .extend(proposals.iter().map(|p| (p.origin, p.payload.to_vec())));
        (self.index, self.term) = (index, term);
        Ok(())
    }
    fn skip(&mut self, index: u64, term: u64) {
        (self.index, self.term) = (index, term);
    }
    fn snapshot_begin(&mut self) -> SnapshotJob {
        SnapshotJob {
            index: self.index,
            term: self.term,
            head: b"machine".to_vec(),
            writer: Box::new(Done),
        }
    }
    fn snapshot_end(&mut self) {}
    fn dropped(&mut self, _: Vec<Vec<u8>>) {}
    fn role_changed(&mut self, _: bool) {}
    fn touched(&mut self, _: &[i64]) {}
    fn restore(&mut self, _: u64, _: &[u8]) -> Result<(), crate::MachineError> {
        Ok(())
    }
    fn read_ready(&mut self, _: Vec<u8>) {}
    fn read_failed(&mut self, _: Vec<u8>) {}
    fn reconfigured(
        &mut self,
        index: u64,
        term: u64,
        members: &Members,
        _: i64,
        reply: Option<&[u8]>,
    ) -> u64 {
        (self.index, self.term) = (index, term);
        self.configurations
            .push((members.keys().copied().collect(), reply.map(<[u8]>::to_vec)));
        index
    }
    fn reconfig_failed(&mut self, context: Vec<u8>, error: ReconfigError) {
        self.refused.push((context, error));
    }
}

fn single_node(dedup: Dedup) -> Core<Recorder, TestIo, NoSnapshots> {
    single_node_with(dedup, TestIo::default(), u64::MAX)
}

/// A one-voter core over `io`, keeping at most `kept_bytes` of log behind
/// a snapshot (and 10 entries).
fn single_node_with(
    dedup: Dedup,
    io: TestIo,
    kept_bytes: u64,
) -> Core<Recorder, TestIo, NoSnapshots> {
    let storage = storage_from(Durable {
        snapshot_index: 0,
        snapshot_term: 0,
        conf_state: ConfState {
            voters: vec![1],
            ..Default::default()
        },
        hard_state: HardState::default(),
        entries: Vec::new(),
    })
    .expect("empty storage");
    let config = CoreConfig {
        node_id: 1,
        snapshot_every_entries: 1,
        snapshot_every_log_bytes: u64::MAX,
        preferred_leader: None,
        applied: 0,
        first_sequence: dedup.applied(1) + 1,
        dedup,
        seed: 7,
        log_kept_behind_snapshot: 10,
        log_kept_behind_snapshot_bytes: kept_bytes,
        membership: Membership::default(),
        reconfig_enabled: true,
        tick_us: 100_000,
        read_lease: true,
        #[cfg(feature = "testing")]
        planted_bug: PlantedBug::None,
    };
    let status = Arc::new(RaftStatus::default());
    let mut core = Core::new(
        config,
        storage,
        NoSnapshots,
        io,
        Recorder::default(),
        status,
    )
    .expect("a core");
    for _ in 0..4 {
        core.advance().expect("advance");
    }
    assert!(core.is_leader(), "a single voter leads");
    core
}

/// A follower resending proposal `id` of origin 2 (as after a leader change).
fn forward(core: &mut Core<Recorder, TestIo, NoSnapshots>, sequence: u64, payload: &[u8]) {
    let mut batch = Vec::new();
    let proposal = Proposal {
        id: ProposalId::new(2, sequence),
        payload: payload.to_vec(),
    };
    encode_entry(&[proposal], &mut batch);
    core.peer(PeerInput::Forward(batch));
    core.advance().expect("advance");
}

fn applied_payloads(core: &Core<Recorder, TestIo, NoSnapshots>) -> Vec<Vec<u8>> {
    core.machine()
        .applied
        .iter()
        .map(|(_, p)| p.clone())
        .collect()
}

#[test]
fn a_proposal_resent_is_applied_once_even_after_a_restart_from_a_snapshot() {
    let mut core = single_node(Dedup::default());
    core.propose(b"local".to_vec());
    core.advance().expect("advance");
    forward(&mut core, 5, b"five");
    forward(&mut core, 5, b"five");
    forward(&mut core, 4, b"four, older than five");
    forward(&mut core, 6, b"six");
    assert_eq!(
        applied_payloads(&core),
        [b"local".to_vec(), b"five".to_vec(), b"six".to_vec()]
    );
    assert_eq!(
        core.machine().applied[0].0,
        1,
        "the local proposal's origin"
    );
    assert_eq!(core.machine().applied[1].0, 2);

    let job = core.take_snapshot_job().expect("a snapshot is due");
    let (envelope, rest) = Envelope::split(&job.head).expect("the head has an envelope");
    assert_eq!(rest, b"machine");
    assert_eq!(envelope.dedup.applied(2), 6);
    assert_eq!(envelope.dedup.applied(1), 1);

    let mut restarted = single_node(envelope.dedup);
    forward(&mut restarted, 6, b"six");
    forward(&mut restarted, 7, b"seven");
    assert_eq!(applied_payloads(&restarted), [b"seven".to_vec()]);
    restarted.propose(b"after".to_vec());
    restarted.advance().expect("advance");
    assert_eq!(restarted.machine().applied.last().unwrap().1, b"after");
}

/// Where the disk log was compacted to after 30 entries of 117 bytes
/// (a 100-byte proposal in its entry) and a snapshot of all of them, with
/// the oldest kept snapshot `behind` entries older than that one.
fn compacted_after_snapshot(kept_bytes: u64, behind: u64) -> (u64, u64) {
    let io = TestIo::default();
    let (compacted_to, oldest_snapshot) = (io.compacted_to.clone(), io.oldest_snapshot.clone());
    let mut core = single_node_with(Dedup::default(), io, kept_bytes);
    for _ in 0..30 {
        core.propose(vec![b'x'; 100]);
        core.advance().expect("advance");
    }
    let job = core.take_snapshot_job().expect("a snapshot is due");
    oldest_snapshot.set(Some(job.index - behind));
    core.snapshot_done(job.index, Ok(()), 1);
    let compacted = compacted_to.borrow();
    assert_eq!(
        compacted.len(),
        1,
        "one compaction per snapshot: {compacted:?}"
    );
    (job.index, compacted[0])
}

#[test]
fn the_log_kept_behind_the_oldest_snapshot_is_bounded_in_entries_and_in_bytes() {
    let (snapshot, start) = compacted_after_snapshot(u64::MAX, 0);
    assert_eq!(start, snapshot - 10, "10 entries kept behind the snapshot");
    let (snapshot, start) = compacted_after_snapshot(u64::MAX, 4);
    assert_eq!(
        start,
        snapshot - 4 - 10,
        "kept behind the oldest snapshot, not the newest"
    );
    // 117-byte entries: the fifth behind the snapshot (inclusive) passes
    // 500 bytes, and the log starts there.
    let (snapshot, start) = compacted_after_snapshot(500, 0);
    assert_eq!(start, snapshot - 4, "500 bytes keep 5 entries, not 10");
    let (snapshot, start) = compacted_after_snapshot(500, 4);
    assert_eq!(start, snapshot - 4 - 4);
    let (snapshot, start) = compacted_after_snapshot(117 * 10, 0);
    assert_eq!(
        start,
        snapshot - 10,
        "the entry count binds before the bytes"
    );
}

/// A one-node group that applied one proposal ("first").
fn one_applied() -> Core<Recorder, TestIo, NoSnapshots> {
    let mut core = single_node(Dedup::default());
    core.propose(b"first".to_vec());
    core.advance().expect("advance");
    core
}

fn applied_index(core: &Core<Recorder, TestIo, NoSnapshots>) -> u64 {
    core.status()
        .applied_index
        .load(std::sync::atomic::Ordering::Acquire)
}

#[test]
fn an_entry_the_machine_cannot_apply_stops_the_node_before_it() {
    let mut core = one_applied();
    let applied = applied_index(&core);
    core.propose(b"newer:kind 99".to_vec());
    let error = core.advance().expect_err("the machine refuses the entry");
    let text = error.to_string();
    assert!(
        matches!(error, ConsensusError::Unapplicable { index, .. } if index == applied + 1),
        "{text}"
    );
    assert!(
        text.contains("newer release") && text.contains("start this member on the release"),
        "{text}"
    );
    assert_eq!(applied_payloads(&core), [b"first".to_vec()]);
    assert_eq!(
        applied_index(&core),
        applied,
        "the refused entry is not counted as applied"
    );
}

#[test]
fn an_entry_of_another_format_stops_the_node_and_a_damaged_one_is_skipped() {
    for (payload, stops) in [
        (vec![0x00, 1, 2, 3], true),
        (vec![crate::proposal::ENTRY_FORMAT, 1], false),
    ] {
        let mut core = one_applied();
        let applied = applied_index(&core);
        core.append_raw_for_test(payload.clone());
        let result = core.advance();
        let now = applied_index(&core);
        match stops {
            true => {
                let error = result.expect_err("another format stops the node");
                assert!(
                    matches!(error, ConsensusError::EntryFormat { index, .. } if index == applied + 1),
                    "{error}"
                );
                assert_eq!(now, applied);
            }
            false => {
                result.expect("a damaged entry of this format is skipped on every node alike");
                assert_eq!(now, applied + 1, "{payload:?}");
            }
        }
    }
}

#[test]
fn identity_round_trips_and_damaged_text_is_refused() {
    use crate::driver::Identity;
    for dynamic in [false, true] {
        let identity = Identity {
            cluster_id: 0x881810a091a21ed4,
            node_id: 4,
            dynamic,
        };
        let text = identity.render();
        assert_eq!(Identity::parse(&text), Some(identity));
        for cut in 0..text.len() {
            // Only a cut after a whole line can read (as a shorter file).
            let read = Identity::parse(&text[..cut]);
            assert!(
                read.is_none() || text[..cut].ends_with('\n'),
                "cut at {cut}"
            );
            assert_ne!(read, Some(identity), "cut at {cut}");
        }
    }
    // What Keel wrote before membership changes reads the same.
    let old = "cluster_id=0x00000000000000ff\nnode_id=3\n";
    assert_eq!(
        Identity::parse(old),
        Some(Identity {
            cluster_id: 255,
            node_id: 3,
            dynamic: false
        })
    );
    assert_eq!(Identity::format_of(old), Some(1));
    assert_eq!(Identity::parse("cluster_id=0xzz\nnode_id=3\n"), None);
    // The version is the first line; one this Keel does not know is not
    // read (check_identity refuses it naming both versions).
    let current = Identity::parse(old).unwrap().render();
    assert!(current.starts_with("format=2\n"), "{current}");
    assert_eq!(Identity::format_of(&current), Some(2));
    let newer = current.replacen("format=2", "format=3", 1);
    assert_eq!(Identity::format_of(&newer), Some(3));
    assert_eq!(Identity::parse(&newer), None);
    assert_eq!(Identity::format_of("format=x\n"), None);
    assert_eq!(Identity::parse(&format!("format=0\n{old}")), None);
    assert_eq!(Identity::parse(&format!("{old}membership=static\n")), None);
}

fn durable_log(snapshot_index: u64, indexes: &[u64]) -> Durable {
    Durable {
        snapshot_index,
        snapshot_term: u64::from(snapshot_index > 0),
        conf_state: ConfState {
            voters: vec![1],
            ..Default::default()
        },
        hard_state: HardState {
            term: 1,
            commit: indexes.last().copied().unwrap_or(snapshot_index),
            ..Default::default()
        },
        entries: indexes
            .iter()
            .map(|index| Entry {
                index: *index,
                term: 1,
                ..Default::default()
            })
            .collect(),
    }
}

/// Simulator seed 7521034 restored a log with a hole (entries 20-77 and
/// 153-182 behind snapshot 40), which raft-rs's MemStorage indexed out of
/// bounds: a restart must refuse such a log with an error instead.
#[test]
fn a_restored_log_must_start_after_the_snapshot_and_have_no_hole() {
    use raft::Storage;

    let storage = storage_from(durable_log(40, &[20, 41, 42, 43])).expect("contiguous");
    assert_eq!(storage.first_index().unwrap(), 41);
    assert_eq!(storage.last_index().unwrap(), 43);

    let error = storage_from(durable_log(40, &[42, 43]))
        .err()
        .expect("a gap");
    assert!(matches!(
        error,
        ConsensusError::Gap {
            snapshot_index: 40,
            first_log_index: 42
        }
    ));

    let mut indexes: Vec<u64> = (20..=77).collect();
    indexes.extend(153..=182);
    let error = storage_from(durable_log(40, &indexes))
        .err()
        .expect("a hole");
    assert!(
        matches!(
            error,
            ConsensusError::Hole {
                after: 77,
                next: 153
            }
        ),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "the log jumps from entry 77 to entry 153: entries are missing"
    );
}

#[test]
fn only_a_log_that_ends_before_the_snapshot_is_covered_by_it() {
    use crate::core::log_covered;

    assert!(log_covered(Some(77), 152), "a log that ends before it");
    assert!(
        !log_covered(Some(152), 152),
        "its last entry is the snapshot's"
    );
    assert!(!log_covered(Some(153), 152), "entries after it");
    assert!(!log_covered(None, 152), "an empty log");
    assert!(!log_covered(Some(5), 0), "no snapshot");
}
