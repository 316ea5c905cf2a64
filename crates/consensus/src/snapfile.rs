//! Snapshot files: written to a temp name, fsynced, renamed, directory
//! fsynced; loaded newest first, skipping any that fail their checks. A
//! file is consensus's envelope (proposal.rs) then the state machine's
//! bytes.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::proposal::Envelope;
use crate::{ConsensusError, SnapshotPosition, SnapshotWriter};

/// A snapshot being written is synced to disk at least this often.
pub const SNAPSHOT_SYNC_EVERY_BYTES: u64 = 16 << 20;
/// Most bytes per second a snapshot is written at (1.8 GB of 10M znodes
/// take ≥ 14 s; the snapshot is never on the write path).
pub const SNAPSHOT_WRITE_BYTES_PER_SEC: u64 = 128 << 20;
/// An old snapshot is truncated by this much at a time before its unlink.
pub const SNAPSHOT_DELETE_STEP_BYTES: u64 = 32 << 20;
/// Pause between two truncation steps.
pub const SNAPSHOT_DELETE_PAUSE_MS: u64 = 20;
/// Snapshots kept on disk: the newest plus one fallback.
pub const SNAPSHOTS_KEPT: usize = 2;
const PREFIX: &str = "snapshot-";
const SUFFIX: &str = ".snap";

fn file_name(index: u64, term: u64) -> String {
    format!("{PREFIX}{index:020}-{term:020}{SUFFIX}")
}

fn parse_name(name: &str) -> Option<(u64, u64)> {
    let body = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let (index, term) = body.split_once('-')?;
    Some((index.parse().ok()?, term.parse().ok()?))
}

/// (index, term, path) of every snapshot file, newest first.
pub fn list(dir: &Path) -> Result<Vec<(u64, u64, PathBuf)>, ConsensusError> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if let Some((index, term)) = entry.file_name().to_str().and_then(parse_name) {
            found.push((index, term, entry.path()));
        }
    }
    found.sort_by_key(|snapshot| std::cmp::Reverse(snapshot.0));
    Ok(found)
}

/// Writes bytes durably as the snapshot for (index, term), then prunes.
pub fn write(dir: &Path, index: u64, term: u64, bytes: &[u8]) -> Result<PathBuf, ConsensusError> {
    let target = dir.join(file_name(index, term));
    let temp = dir.join(format!("{}.tmp", file_name(index, term)));
    {
        let mut file = fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    publish(dir, &temp, &target)?;
    Ok(target)
}

/// Writes a snapshot part by part as `writer` produces it (never the
/// whole snapshot in memory), durably; returns the bytes written.
pub fn write_streaming(
    dir: &Path,
    index: u64,
    term: u64,
    head: &[u8],
    mut writer: Box<dyn SnapshotWriter>,
) -> Result<u64, ConsensusError> {
    let target = dir.join(file_name(index, term));
    let temp = dir.join(format!("{}.tmp", file_name(index, term)));
    let result = (|| {
        let mut file = fs::File::create(&temp)?;
        file.write_all(head)?;
        let mut written = head.len() as u64;
        let mut unsynced = 0u64;
        let started = std::time::Instant::now();
        let mut chunk = Vec::with_capacity(1 << 20);
        loop {
            chunk.clear();
            let more = writer
                .next_chunk(&mut chunk)
                .map_err(ConsensusError::SnapshotWriter)?;
            file.write_all(&chunk)?;
            written += chunk.len() as u64;
            unsynced += chunk.len() as u64;
            // Never let GiBs of dirty pages pile up: their writeback would
            // stall the Raft log's fsyncs behind it.
            if unsynced >= SNAPSHOT_SYNC_EVERY_BYTES {
                file.sync_data()?;
                unsynced = 0;
                pace(started, written);
            }
            if !more {
                break;
            }
        }
        file.sync_all()?;
        Ok::<u64, ConsensusError>(written)
    })();
    match result {
        Ok(written) => {
            publish(dir, &temp, &target)?;
            Ok(written)
        }
        Err(error) => {
            let _ = fs::remove_file(&temp);
            Err(error)
        }
    }
}

/// Sleeps as long as the snapshot is ahead of SNAPSHOT_WRITE_BYTES_PER_SEC:
/// a snapshot that takes the whole disk makes the Raft log's fsyncs (every
/// write's latency) wait behind it.
fn pace(started: std::time::Instant, written: u64) {
    let due =
        std::time::Duration::from_secs_f64(written as f64 / SNAPSHOT_WRITE_BYTES_PER_SEC as f64);
    if let Some(ahead) = due.checked_sub(started.elapsed()) {
        std::thread::sleep(ahead);
    }
}

/// Renames a complete temp file into place, fsyncs the directory, prunes.
fn publish(dir: &Path, temp: &Path, target: &Path) -> Result<(), ConsensusError> {
    fs::rename(temp, target)?;
    fs::File::open(dir)?.sync_all()?;
    for (_, _, old) in list(dir)?.into_iter().skip(SNAPSHOTS_KEPT) {
        remove_gradually(&old)?;
    }
    Ok(())
}

/// Deletes a (large) file a step at a time: freeing GiBs of extents in one
/// unlink makes one big filesystem journal commit, and every fsync of the
/// Raft log (every write's latency) waits for it.
fn remove_gradually(path: &Path) -> Result<(), ConsensusError> {
    let file = fs::OpenOptions::new().write(true).open(path)?;
    let mut len = file.metadata()?.len();
    while len > SNAPSHOT_DELETE_STEP_BYTES {
        len -= SNAPSHOT_DELETE_STEP_BYTES;
        file.set_len(len)?;
        std::thread::sleep(std::time::Duration::from_millis(SNAPSHOT_DELETE_PAUSE_MS));
    }
    drop(file);
    fs::remove_file(path)?;
    Ok(())
}

/// The newest snapshot whose envelope and state machine bytes (`load`)
/// pass their checks and whose position matches its name; corrupt ones
/// are logged with the file name and skipped (the previous one is tried),
/// never half-loaded. Returns the state and where it left off.
pub fn load_newest<T, E: std::fmt::Display>(
    dir: &Path,
    load: impl Fn(&[u8]) -> Result<T, E>,
    index_of: impl Fn(&T) -> u64,
) -> Result<Option<(T, SnapshotPosition)>, ConsensusError> {
    for (index, term, path) in list(dir)? {
        let file = fs::File::open(&path)?;
        // SAFETY: a snapshot file is never written again once renamed into
        // place (a new one gets a new name), so the mapping cannot change
        // under the loader. Mapped, its pages are page cache, given back
        // as soon as the load is done (no multi-GiB heap buffer).
        let bytes = match unsafe { memmap2::Mmap::map(&file) } {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::error!(path = %path.display(), %error, "snapshot cannot be mapped; trying the previous one");
                continue;
            }
        };
        let (envelope, state) = match Envelope::split(&bytes) {
            Ok(split) => split,
            Err(error) => {
                tracing::error!(path = %path.display(), %error, "corrupt snapshot envelope skipped; trying the previous one");
                continue;
            }
        };
        match load(state) {
            Ok(state) if index_of(&state) == index => {
                let position = SnapshotPosition {
                    index,
                    term,
                    dedup: envelope.dedup,
                    configuration: envelope.configuration,
                };
                return Ok(Some((state, position)));
            }
            Ok(state) => {
                tracing::warn!(path = %path.display(), inner = index_of(&state), "snapshot index does not match its name; skipped")
            }
            Err(error) => {
                tracing::error!(path = %path.display(), %error, "corrupt snapshot skipped; trying the previous one")
            }
        }
    }
    Ok(None)
}
