//! The Raft log on disk: raft-engine holding raft-rs entries, HardState and
//! ConfState for one group. The contract (etcd's WAL Save): `persist`
//! returns only when entries and state are on stable storage.

use std::path::Path;
use std::sync::Arc;

use raft::eraftpb::{ConfState, Entry, HardState};
use raft_engine::{Config, Engine, LogBatch, MessageExt, ReadableSize, RecoveryMode};

use crate::ConsensusError;

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
    engine: Arc<Engine>,
    /// Wakes the purge thread (a bound of one coalesces requests); None
    /// once dropped.
    purge: Option<crossbeam_channel::Sender<()>>,
    /// Joined on drop: the thread holds the engine, whose directory lock
    /// must be free when the store is gone (a restart in the same process).
    purger: Option<std::thread::JoinHandle<()>>,
}

impl Drop for LogStore {
    fn drop(&mut self) {
        self.purge.take();
        if let Some(purger) = self.purger.take() {
            let _ = purger.join();
        }
    }
}

impl LogStore {
    pub fn open(dir: &Path) -> Result<LogStore, ConsensusError> {
        let config = Config {
            dir: dir.to_string_lossy().into_owned(),
            // A torn last write (kill -9 mid-append) is cut off; it was
            // never acknowledged because persist had not returned.
            recovery_mode: RecoveryMode::TolerateTailCorruption,
            target_file_size: ReadableSize(LOG_FILE_BYTES),
            purge_threshold: ReadableSize(4 * LOG_FILE_BYTES),
            ..Default::default()
        };
        let engine = Engine::open(config)?;
        let engine = Arc::new(engine);
        let (purge, purger) = start_purger(engine.clone())?;
        Ok(LogStore {
            engine,
            purge: Some(purge),
            purger: Some(purger),
        })
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
        if let Some(hs) = hard_state {
            batch.put_message(GROUP_ID, KEY_HARD_STATE.to_vec(), hs)?;
        }
        if let Some(cs) = conf_state {
            batch.put_message(GROUP_ID, KEY_CONF_STATE.to_vec(), cs)?;
        }
        if batch.is_empty() {
            return Ok(false);
        }
        self.engine.write(&mut batch, true)?;
        Ok(true)
    }

    /// Writes a HardState whose term and vote are already durable, with no
    /// fsync (see `Io::persist_commit`): the next synced write carries it
    /// to the disk with everything before it.
    pub fn persist_commit(&self, hard_state: &HardState) -> Result<(), ConsensusError> {
        let mut batch = LogBatch::with_capacity(0);
        batch.put_message(GROUP_ID, KEY_HARD_STATE.to_vec(), hard_state)?;
        self.engine.write(&mut batch, false)?;
        Ok(())
    }

    /// Drops entries below `index` (a durable snapshot covers them) and
    /// lets raft-engine delete whole files that hold nothing live.
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

fn start_purger(engine: Arc<Engine>) -> Result<Purger, ConsensusError> {
    let (sender, wakeups) = crossbeam_channel::bounded::<()>(1);
    let thread = std::thread::Builder::new()
        .name("keel-log-purge".into())
        .spawn(move || {
            crate::driver::background_priority();
            for () in wakeups {
                if let Err(error) = engine.purge_expired_files() {
                    tracing::error!(%error, "raft log purge failed; retried at the next compaction");
                }
            }
        })?;
    Ok((sender, thread))
}
