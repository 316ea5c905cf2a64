//! `LogStore::persist_commit` holds a commit-only HardState back: the next
//! `persist` writes it in its batch, under its fdatasync, and a clean
//! drop writes it; nothing else does (with the log written with O_DIRECT
//! a write of its own would be a device write of its own).

mod common;

use common::{entry, hard_state};
use keel_consensus::LogStore;
use raft::eraftpb::HardState;

fn commit_read_back(store: &LogStore) -> u64 {
    store.recover().unwrap().hard_state.commit
}

#[test]
fn a_commit_index_is_written_by_the_next_persist_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    let entries = [entry(1), entry(2), entry(3)];
    assert!(store.persist(&entries, Some(&hard_state(0)), None).unwrap());
    store.persist_commit(&hard_state(2)).unwrap();
    store.persist_commit(&hard_state(3)).unwrap();
    assert_eq!(commit_read_back(&store), 0, "held back, not written");
    assert!(store.persist(&[entry(4)], None, None).unwrap());
    assert_eq!(commit_read_back(&store), 3, "the next persist carries it");
    // A HardState given to persist is newer than one held back.
    store.persist_commit(&hard_state(4)).unwrap();
    let newer = HardState {
        term: 2,
        vote: 2,
        commit: 4,
        ..Default::default()
    };
    assert!(store.persist(&[], Some(&newer), None).unwrap());
    assert_eq!(store.recover().unwrap().hard_state, newer);
}

/// A store in `dir` with entries 1 and 2 durable and commit 2 held back.
fn two_entries_commit_held_back(dir: &std::path::Path) -> LogStore {
    let store = LogStore::open(dir).unwrap();
    assert!(store
        .persist(&[entry(1), entry(2)], Some(&hard_state(0)), None)
        .unwrap());
    store.persist_commit(&hard_state(2)).unwrap();
    store
}

#[test]
fn a_clean_drop_writes_the_commit_index_held_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = two_entries_commit_held_back(dir.path());
    assert_eq!(commit_read_back(&store), 0);
    drop(store);
    let reopened = LogStore::open(dir.path()).unwrap();
    assert_eq!(commit_read_back(&reopened), 2);
}

#[test]
fn a_commit_index_never_goes_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = two_entries_commit_held_back(dir.path());
    let back = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.persist_commit(&hard_state(1))
    }));
    assert!(back.is_err(), "a lower commit index was taken");
}
