//! Snapshot files: written to a temp name, fsynced, renamed, directory
//! fsynced; loaded newest first, skipping any that fail their checks.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use keel_tree::{snapshot, DataTree};

use crate::ConsensusError;

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
    fs::rename(&temp, &target)?;
    fs::File::open(dir)?.sync_all()?;
    for (_, _, old) in list(dir)?.into_iter().skip(SNAPSHOTS_KEPT) {
        fs::remove_file(old)?;
    }
    Ok(target)
}

/// The newest snapshot that loads and verifies; corrupt ones are logged
/// and skipped, never half-loaded.
pub fn load_newest(dir: &Path) -> Result<Option<DataTree>, ConsensusError> {
    for (index, _, path) in list(dir)? {
        let bytes = fs::read(&path)?;
        match snapshot::decode(&bytes) {
            Ok(tree) if tree.applied_index() == index => return Ok(Some(tree)),
            Ok(tree) => {
                tracing::warn!(path = %path.display(), inner = tree.applied_index(), "snapshot index does not match its name; skipped")
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "corrupt snapshot skipped")
            }
        }
    }
    Ok(None)
}
