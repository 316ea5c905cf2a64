//! A failed write or fdatasync of the Raft log stops the node with the
//! log's directory named; a full disk does not (the driver waits for
//! space). raft-engine's fail points make its IO fail on demand (a test
//! build only: see Cargo.toml). These tests are alone in this binary
//! because fail points are process-wide; `FailScenario` runs them one at
//! a time.

mod common;

use common::{entry, hard_state};
use keel_consensus::{ConsensusError, LogStore};

fn not_durable(error: ConsensusError, dir: &std::path::Path) -> String {
    match &error {
        ConsensusError::NotDurable { dir: named, .. } => assert_eq!(named, dir),
        other => panic!("expected NotDurable, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains(&dir.display().to_string()), "{message}");
    message
}

#[test]
fn a_failed_fdatasync_stops_the_log_with_its_directory_named_and_nothing_is_written_after_it() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    assert!(store
        .persist(&[entry(1)], Some(&hard_state(0)), None)
        .unwrap());
    assert!(store.failure().is_none());
    // raft-engine panics when an fdatasync fails; the store turns the
    // panic into the error the driver stops with.
    fail::cfg("log_fd::sync::err", "return").unwrap();
    let error = store.persist(&[entry(2)], None, None).unwrap_err();
    let message = not_durable(error, dir.path());
    assert!(message.contains("fdatasync"), "{message}");
    // Healthy again or not, the log is no longer trusted.
    fail::remove("log_fd::sync::err");
    let later = store.persist(&[entry(3)], None, None).unwrap_err();
    not_durable(later, dir.path());
    not_durable(store.failure().expect("recorded"), dir.path());
    // A failed store is never dropped (raft-engine's drop would fdatasync
    // again, and abort on its failure): it keeps its directory's lock, so
    // its files are read back from a copy, as a restart reads them.
    drop(store);
    let copy = tempfile::tempdir().unwrap();
    for file in std::fs::read_dir(dir.path()).unwrap() {
        let file = file.unwrap();
        std::fs::copy(file.path(), copy.path().join(file.file_name())).unwrap();
    }
    // What was durable before the failure is read back.
    let reopened = LogStore::open(copy.path()).unwrap();
    let recovered = reopened.recover().unwrap();
    assert!(recovered.entries.iter().any(|e| e.index == 1));
    assert!(!recovered.entries.iter().any(|e| e.index == 3));
    scenario.teardown();
}

#[test]
fn a_failed_write_stops_the_log_too() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    fail::cfg("log_file::write::err", "return").unwrap();
    let error = store
        .persist(&[entry(1)], Some(&hard_state(0)), None)
        .unwrap_err();
    not_durable(error, dir.path());
    fail::remove("log_file::write::err");
    assert!(store.failure().is_some());
    assert!(store.persist_commit(&hard_state(0)).is_err());
    scenario.teardown();
}

#[test]
fn a_full_disk_is_not_a_fault_and_the_write_goes_through_once_space_is_back() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    fail::cfg("log_fd::write::no_space_err", "return").unwrap();
    let error = store
        .persist(&[entry(1)], Some(&hard_state(0)), None)
        .unwrap_err();
    assert!(
        matches!(error, ConsensusError::Log(_)),
        "a full disk is retried by the driver, not a fault: {error:?}"
    );
    assert!(store.failure().is_none());
    fail::remove("log_fd::write::no_space_err");
    assert!(store
        .persist(&[entry(1)], Some(&hard_state(0)), None)
        .unwrap());
    scenario.teardown();
}

fn indexes(store: &LogStore) -> Vec<u64> {
    let recovered = store.recover().unwrap();
    recovered.entries.iter().map(|e| e.index).collect()
}

/// A crash can tear entries off the log's tail after a snapshot of them
/// was written, or stop a follower that installs the leader's snapshot
/// after it is saved and before the log is compacted (simulator seed
/// 7521034): the log then ends before the snapshot, and appending the
/// entry after the snapshot leaves a hole raft-engine panics on (a
/// restart failed so once in tests/storage/test_storage_faults.py).
#[test]
fn a_log_that_ends_before_its_snapshot_starts_again_after_it() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    let written = [entry(1), entry(2), entry(3)];
    assert!(store.persist(&written, Some(&hard_state(3)), None).unwrap());
    // A log that reaches the snapshot keeps its entries.
    assert!(!store.drop_covered(2).unwrap());
    assert!(!store.drop_covered(3).unwrap());
    assert_eq!(indexes(&store), vec![1, 2, 3]);
    // The snapshot is at 5, the log ends at 3.
    assert!(store.drop_covered(5).unwrap());
    assert!(store.persist(&[entry(6)], None, None).unwrap());
    assert_eq!(indexes(&store), vec![6]);
    drop(store);
    let reopened = LogStore::open(dir.path()).unwrap();
    assert_eq!(indexes(&reopened), vec![6]);
    assert!(!reopened.drop_covered(5).unwrap());
    drop(reopened);

    // Without the drop, the append after the snapshot fails the log.
    let other = tempfile::tempdir().unwrap();
    let store = LogStore::open(other.path()).unwrap();
    assert!(store.persist(&written, Some(&hard_state(3)), None).unwrap());
    not_durable(
        store.persist(&[entry(6)], None, None).unwrap_err(),
        other.path(),
    );
    // A failed store keeps its directory (see above): not dropped.
    std::mem::forget(store);
    scenario.teardown();
}

/// A file system that opens a file with O_DIRECT and then refuses the
/// direct write (EINVAL) gets buffered writes from there on: the batch
/// that met the refusal is written, nothing fails, and everything reads
/// back after a restart.
#[test]
fn a_direct_write_refused_falls_back_to_the_page_cache() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path()).unwrap();
    fail::cfg("zerofill::direct_write::einval", "return").unwrap();
    assert!(store
        .persist(&[entry(1), entry(2)], Some(&hard_state(0)), None)
        .unwrap());
    fail::remove("zerofill::direct_write::einval");
    assert!(store
        .persist(&[entry(3)], Some(&hard_state(2)), None)
        .unwrap());
    assert!(store.failure().is_none());
    assert_eq!(indexes(&store), vec![1, 2, 3]);
    drop(store);
    let reopened = LogStore::open(dir.path()).unwrap();
    assert_eq!(indexes(&reopened), vec![1, 2, 3]);
    assert_eq!(reopened.recover().unwrap().hard_state.commit, 2);
    drop(reopened);
    scenario.teardown();
}
