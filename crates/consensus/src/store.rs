//! The Raft log on disk: raft-engine holding raft-rs entries, HardState and
//! ConfState for one group. The contract (etcd's WAL Save): `persist`
//! returns only when entries and state are on stable storage.
//!
//! Errors: a full disk (raft-engine's `nospace`) is returned as it is, and
//! the driver retries the write until space is freed (`until_space`).
//! Any other failure of a write or an fdatasync, the log's own or the
//! purge thread's, is final: the store records it, refuses every later
//! write and answers `ConsensusError::NotDurable` naming its directory, and
//! the driver stops on it. raft-engine panics when an fdatasync fails (so
//! that nothing goes on as if the data were durable); that panic is caught
//! here and becomes the same error, so the node stops with the reason
//! instead of losing its Raft thread.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use raft::eraftpb::{ConfState, Entry, HardState};
use raft_engine::{Config, Engine, LogBatch, MessageExt, ReadableSize, RecoveryMode};

use crate::zerofill::ZeroFill;
use crate::ConsensusError;

/// raft-engine over `ZeroFill` (see zerofill.rs).
type LogEngine = Engine<ZeroFill>;

/// Keel runs one Raft group per process.
const GROUP_ID: u64 = 1;
const KEY_HARD_STATE: &[u8] = b"hard_state";
const KEY_CONF_STATE: &[u8] = b"conf_state";
/// raft-engine rotates log files at this size; purge works file by file.
const LOG_FILE_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Clone)]
struct EntryExt;

impl MessageExt for EntryExt {
    type Entry = Entry;

    fn index(entry: &Entry) -> u64 {
        entry.index
    }
}

/// What a restarted node finds in its log.
pub struct Recovered {
    pub hard_state: HardState,
    pub conf_state: Option<ConfState>,
    pub entries: Vec<Entry>,
}

pub struct LogStore {
    engine: Arc<LogEngine>,
    dir: PathBuf,
    /// Set once by the first write or fdatasync that failed (this thread's
    /// or the purge thread's): the log is no longer trusted.
    fault: Arc<OnceLock<String>>,
    /// Wakes the purge thread (a bound of one coalesces requests); None
    /// once dropped.
    purge: Option<crossbeam_channel::Sender<()>>,
    /// Joined on drop: the thread holds the engine, whose directory lock
    /// must be free when the store is gone (a restart in the same process).
    purger: Option<std::thread::JoinHandle<()>>,
    /// The newest HardState given to `persist_commit` and not written yet:
    /// the next `persist` writes it, in its batch and under its fdatasync.
    commit_pending: std::sync::Mutex<Option<HardState>>,
}

impl Drop for LogStore {
    fn drop(&mut self) {
        // A clean stop keeps the newest commit index held back (best
        // effort: a commit index lost is learned again from the leader);
        // a persist of nothing writes just that, or nothing at all.
        if self.fault.get().is_none() && !self.commit_pending.is_poisoned() {
            let _ = self.persist(&[], None, None);
        }
        self.purge.take();
        if let Some(purger) = self.purger.take() {
            let _ = purger.join();
        }
        if self.fault.get().is_some() {
            // raft-engine's own drop fdatasyncs its files and panics when
            // that fails, inside a destructor, which aborts the process
            // before the node can stop with its error: a failed log is
            // left to the process's exit instead (one reference leaked).
            std::mem::forget(Arc::clone(&self.engine));
        }
    }
}

impl LogStore {
    /// The log in `dir`, its records written with O_DIRECT where the file
    /// system allows it (`open_with`).
    pub fn open(dir: &Path) -> Result<LogStore, ConsensusError> {
        LogStore::open_with(dir, true)
    }

    /// `direct_io`: records written with O_DIRECT (zerofill.rs), falling
    /// back to the page cache where the file system refuses it; false:
    /// through the page cache always.
    pub fn open_with(dir: &Path, direct_io: bool) -> Result<LogStore, ConsensusError> {
        let config = Config {
            dir: dir.to_string_lossy().into_owned(),
            // A torn last write (kill -9 mid-append) is cut off; it was
            // never acknowledged because persist had not returned.
            recovery_mode: RecoveryMode::TolerateTailCorruption,
            target_file_size: ReadableSize(LOG_FILE_BYTES),
            purge_threshold: ReadableSize(4 * LOG_FILE_BYTES),
            ..Default::default()
        };
        let engine = Engine::open_with_file_system(config, Arc::new(ZeroFill { direct_io }))?;
        let engine = Arc::new(engine);
        let fault = Arc::new(OnceLock::new());
        let (purge, purger) = start_purger(engine.clone(), dir.to_path_buf(), fault.clone())?;
        Ok(LogStore {
            engine,
            dir: dir.to_path_buf(),
            fault,
            purge: Some(purge),
            purger: Some(purger),
            commit_pending: std::sync::Mutex::new(None),
        })
    }

    /// Why the log stopped being trusted, if a write or fdatasync failed
    /// (the driver checks it every turn: a failure of the purge thread
    /// stops the node too).
    pub fn failure(&self) -> Option<ConsensusError> {
        let reason = self.fault.get()?;
        Some(ConsensusError::NotDurable {
            dir: self.dir.clone(),
            reason: reason.clone(),
        })
    }

    /// One raft-engine write (`sync`: followed by fdatasync), its errors
    /// sorted as the module says.
    fn write(&self, batch: &mut LogBatch, sync: bool) -> Result<usize, ConsensusError> {
        if let Some(failed) = self.failure() {
            return Err(failed);
        }
        let written = std::panic::catch_unwind(AssertUnwindSafe(|| self.engine.write(batch, sync)));
        match written {
            Ok(Ok(bytes)) => Ok(bytes),
            Ok(Err(error)) => {
                let error = ConsensusError::Log(error);
                if out_of_space(&error) {
                    return Err(error);
                }
                Err(record_fault(&self.dir, &self.fault, error.to_string()))
            }
            Err(panic) => {
                let reason = format!(
                    "raft-engine gave up on a write or fdatasync: {}",
                    panic_message(panic.as_ref())
                );
                Err(record_fault(&self.dir, &self.fault, reason))
            }
        }
    }

    pub fn recover(&self) -> Result<Recovered, ConsensusError> {
        let hard_state = self.get(KEY_HARD_STATE)?.unwrap_or_default();
        let conf_state = self.get(KEY_CONF_STATE)?;
        let mut entries = Vec::new();
        if let (Some(first), Some(last)) = (
            self.engine.first_index(GROUP_ID),
            self.engine.last_index(GROUP_ID),
        ) {
            self.engine.fetch_entries_to::<EntryExt>(
                GROUP_ID,
                first,
                last + 1,
                None,
                &mut entries,
            )?;
        }
        Ok(Recovered {
            hard_state,
            conf_state,
            entries,
        })
    }

    fn get<M: protobuf::Message>(&self, key: &[u8]) -> Result<Option<M>, ConsensusError> {
        Ok(self.engine.get_message::<M>(GROUP_ID, key)?)
    }

    /// Appends entries and state in one write and one fdatasync; false if
    /// there was nothing to write (no write, no fdatasync).
    pub fn persist(
        &self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
        conf_state: Option<&ConfState>,
    ) -> Result<bool, ConsensusError> {
        let mut batch = LogBatch::with_capacity(entries.len());
        if !entries.is_empty() {
            batch.add_entries::<EntryExt>(GROUP_ID, entries)?;
        }
        let mut pending = self.commit_pending.lock().expect("not poisoned");
        if let (Some(hs), Some(older)) = (hard_state, pending.as_ref()) {
            assert!(hs.commit >= older.commit, "a commit index never goes back");
        }
        // A HardState given here is newer than the one held back.
        if let Some(hs) = hard_state.or(pending.as_ref()) {
            batch.put_message(GROUP_ID, KEY_HARD_STATE.to_vec(), hs)?;
        }
        if let Some(cs) = conf_state {
            batch.put_message(GROUP_ID, KEY_CONF_STATE.to_vec(), cs)?;
        }
        if batch.is_empty() {
            return Ok(false);
        }
        self.write(&mut batch, true)?;
        *pending = None;
        Ok(true)
    }

    /// Keeps a HardState whose term and vote are already durable, to be
    /// written by the next `persist` (see `Io::persist_commit`: only its
    /// commit index is new, and a commit index lost in a crash is learned
    /// again from the leader). It used to be written at once without an
    /// fdatasync; with the log written with O_DIRECT (zerofill.rs) such a
    /// write is a device write of its own, where held back it costs
    /// nothing: the next synced write carries it either way.
    pub fn persist_commit(&self, hard_state: &HardState) -> Result<(), ConsensusError> {
        if let Some(failed) = self.failure() {
            return Err(failed);
        }
        let mut pending = self.commit_pending.lock().expect("not poisoned");
        if let Some(older) = pending.as_ref() {
            assert!(
                hard_state.term == older.term && hard_state.vote == older.vote,
                "only the commit index changes without a persist"
            );
            assert!(
                hard_state.commit >= older.commit,
                "a commit index never goes back"
            );
        }
        *pending = Some(hard_state.clone());
        Ok(())
    }

    /// Drops entries below `index` from the log's index at once; their
    /// files are deleted by the purge thread, off the driver thread (a
    /// purge unlinks files of LOG_FILE_BYTES each, whose filesystem
    /// journal commit every fsync of the log would wait for).
    pub fn compact_to(&self, index: u64) -> Result<(), ConsensusError> {
        self.engine.compact_to(GROUP_ID, index);
        if let Some(purge) = &self.purge {
            let _ = purge.try_send(());
        }
        Ok(())
    }

    /// At startup, with the loaded snapshot's index: the log can end
    /// before that snapshot (`core::log_covered`), when its tail was lost
    /// (torn or cut by the disk; tests/storage's torn-tail fault cuts it)
    /// or when the node died while installing a snapshot from the leader,
    /// after saving it and before compacting the log it covers. The next
    /// append, `snapshot_index + 1`, would leave a hole after the log's
    /// last entry, which raft-engine refuses with a panic. The snapshot
    /// covers every entry left, so they go: the log starts again after the
    /// snapshot. True if entries were dropped.
    pub fn drop_covered(&self, snapshot_index: u64) -> Result<bool, ConsensusError> {
        if !crate::core::log_covered(self.last_index(), snapshot_index) {
            return Ok(false);
        }
        self.compact_to(snapshot_index + 1)?;
        assert!(
            self.last_index().is_none(),
            "entries below the snapshot at {snapshot_index} were left in the log"
        );
        Ok(true)
    }

    pub fn first_index(&self) -> Option<u64> {
        self.engine.first_index(GROUP_ID)
    }

    pub fn last_index(&self) -> Option<u64> {
        self.engine.last_index(GROUP_ID)
    }
}

/// The thread that deletes compacted log files, at the background
/// priority of the snapshot writer; it ends when the store is dropped.
type Purger = (crossbeam_channel::Sender<()>, std::thread::JoinHandle<()>);

fn start_purger(
    engine: Arc<LogEngine>,
    dir: PathBuf,
    fault: Arc<OnceLock<String>>,
) -> Result<Purger, ConsensusError> {
    let (sender, wakeups) = crossbeam_channel::bounded::<()>(1);
    let thread = std::thread::Builder::new()
        .name("keel-log-purge".into())
        .spawn(move || {
            crate::driver::background_priority();
            for () in wakeups {
                if fault.get().is_some() {
                    return;
                }
                // A purge rewrites live entries of old files (a write and
                // an fdatasync) before it deletes those files.
                let purged =
                    std::panic::catch_unwind(AssertUnwindSafe(|| engine.purge_expired_files()));
                let reason = match purged {
                    Ok(Ok(_)) => continue,
                    Ok(Err(error)) => {
                        let error = ConsensusError::Log(error);
                        if out_of_space(&error) {
                            tracing::error!(%error, "raft log purge failed for want of space; retried at the next compaction");
                            continue;
                        }
                        format!("log purge: {error}")
                    }
                    Err(panic) => format!(
                        "log purge: raft-engine gave up on a write or fdatasync: {}",
                        panic_message(panic.as_ref())
                    ),
                };
                record_fault(&dir, &fault, reason);
                return;
            }
        })?;
    Ok((sender, thread))
}

/// raft-engine's ways of saying the file system is full: it could not
/// allocate or append (`nospace`, a `TryAgain` asking for the batch
/// again), or the OS said so; a snapshot file write too (`Io`).
pub(crate) fn out_of_space(error: &ConsensusError) -> bool {
    match error {
        ConsensusError::Log(raft_engine::Error::TryAgain(reason)) => reason.contains("nospace"),
        ConsensusError::Log(raft_engine::Error::Io(io)) | ConsensusError::Io(io) => {
            io.kind() == std::io::ErrorKind::StorageFull || io.to_string().contains("nospace")
        }
        _ => false,
    }
}

/// Records the log's first failure (later ones change nothing), logs it
/// with the directory, and returns it as the error to stop with.
fn record_fault(dir: &Path, fault: &OnceLock<String>, reason: String) -> ConsensusError {
    let reason = fault.get_or_init(|| reason).clone();
    let error = ConsensusError::NotDurable {
        dir: dir.to_path_buf(),
        reason,
    };
    tracing::error!(dir = %dir.display(), "{error}");
    error
}

/// The message of a caught panic (a `&str` or a `String`, as `panic!`
/// and `unwrap` make them).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_string()
    }
}
