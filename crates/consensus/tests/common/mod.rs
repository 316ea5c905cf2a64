//! What the log store's test binaries share: entries and HardStates of
//! term 1.

use raft::eraftpb::{Entry, HardState};

/// An entry of term 1 at `index`, 64 bytes of payload.
pub fn entry(index: u64) -> Entry {
    Entry {
        index,
        term: 1,
        data: vec![7; 64].into(),
        ..Default::default()
    }
}

/// Term 1, vote 1, `commit`.
pub fn hard_state(commit: u64) -> HardState {
    HardState {
        term: 1,
        vote: 1,
        commit,
        ..Default::default()
    }
}
