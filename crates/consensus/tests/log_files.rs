//! A log that filled several of raft-engine's files reopens, after a clean
//! close and from an image taken while it was open (as kill -9 leaves it),
//! with every entry it acknowledged, byte for byte.
//!
//! raft-engine reads a file it closed to its end. With the records written
//! with O_DIRECT in whole blocks (zerofill.rs), a closed file used to keep
//! the zeros of its last block past the records when they filled the room
//! raft-engine had asked for, and the next start failed with "Log item
//! offset is smaller than log batch header length".

#[allow(dead_code)] // `entry` is the other binaries'
mod common;

use common::hard_state;
use keel_consensus::LogStore;
use raft::eraftpb::Entry;

/// More than two of raft-engine's 64 MiB files (store.rs, LOG_FILE_BYTES).
const LOG_BYTES: usize = 140 << 20;
/// Entries per persist: one write and one fdatasync each.
const ENTRIES_PER_PERSIST: usize = 16;

/// xorshift64: entry bytes that LZ4 cannot shrink, so the files fill as
/// fast as the entries go in.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n + 8);
        while out.len() < n {
            out.extend_from_slice(&self.next().to_le_bytes());
        }
        out.truncate(n);
        out
    }
}

/// Sizes from a few bytes to 3 MiB (larger than raft-engine's 2 MiB room
/// step, so it asks for room of the write's exact size), the record ends
/// landing anywhere in their blocks.
fn entry_bytes(noise: &mut Noise, index: u64) -> usize {
    match noise.next() % 100 {
        0 => 3 << 20,
        1..=9 => (noise.next() % 64) as usize,
        _ => 60_000 + (noise.next() % 100_000) as usize + index as usize % 7,
    }
}

fn write_log(store: &LogStore) -> Vec<Entry> {
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    let mut written = Vec::new();
    let mut bytes = 0;
    while bytes < LOG_BYTES {
        let mut batch = Vec::with_capacity(ENTRIES_PER_PERSIST);
        for _ in 0..ENTRIES_PER_PERSIST {
            let index = written.len() as u64 + batch.len() as u64 + 1;
            let size = entry_bytes(&mut noise, index);
            bytes += size;
            batch.push(Entry {
                index,
                term: 1,
                data: noise.bytes(size).into(),
                ..Default::default()
            });
        }
        let last = batch.last().expect("a batch").index;
        assert!(store
            .persist(&batch, Some(&hard_state(last)), None)
            .unwrap());
        written.extend(batch);
    }
    written
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for file in std::fs::read_dir(from).unwrap() {
        let file = file.unwrap();
        std::fs::copy(file.path(), to.join(file.file_name())).unwrap();
    }
}

fn assert_recovers(dir: &std::path::Path, written: &[Entry], how: &str) {
    let store = LogStore::open(dir).unwrap_or_else(|e| panic!("{how}: the log does not open: {e}"));
    let recovered = store.recover().unwrap();
    assert_eq!(
        recovered.entries.len(),
        written.len(),
        "{how}: entries read back"
    );
    for (got, want) in recovered.entries.iter().zip(written) {
        assert_eq!(got.index, want.index, "{how}");
        assert!(got.data == want.data, "{how}: entry {} differs", want.index);
    }
    assert_eq!(recovered.hard_state.commit, written.len() as u64, "{how}");
}

#[test]
fn a_log_of_several_files_reopens_whole_after_a_close_and_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("raft");
    let store = LogStore::open(&log_dir).unwrap();
    let written = write_log(&store);
    let files = std::fs::read_dir(&log_dir)
        .unwrap()
        .filter(|f| {
            let name = f.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".raftlog")
        })
        .count();
    assert!(files >= 3, "{files} log files: the test wants closed ones");

    // What kill -9 leaves: the files as they are while the store is open.
    let crashed = dir.path().join("crashed");
    std::fs::create_dir(&crashed).unwrap();
    copy_dir(&log_dir, &crashed);
    assert_recovers(&crashed, &written, "after a crash");

    drop(store);
    assert_recovers(&log_dir, &written, "after a clean close");
}
