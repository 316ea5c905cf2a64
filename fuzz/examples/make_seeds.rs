//! Writes the seed corpus: `cargo +nightly run --example make_seeds -- <corpus dir>`
//! (scripts/fuzz.sh does this before fuzzing).
//!
//! - `jute_request`: every client request frame in crates/jute/tests/golden
//!   (captured from a real ZooKeeper 3.8 and from kazoo);
//! - `jute_handshake`: every golden connect request;
//! - `tree_batch_decode`, `snapshot_decode`: batches and snapshot bodies of a
//!   small tree with every kind of node (`keel_tree::fuzzing::seeds`);
//! - `tree_apply`: a few pseudo-random programs;
//! - `kv_resp`: RESP requests as redis-cli and redis-benchmark send them
//!   (`keel_kv::fuzzing::seeds`);
//! - `kv_snapshot_decode`: keyspace snapshot parts, empty and with every
//!   encoding (`keel_kv::fuzzing::snapshot_seeds`).
//!
//! Seeds are named `seed-*` and rewritten on every run; files libFuzzer adds
//! to the corpus are left alone.

use std::fs;
use std::path::{Path, PathBuf};

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::create_dir_all(dir).expect("create corpus dir");
    fs::write(dir.join(format!("seed-{name}")), bytes).expect("write seed");
}

/// The frame in a golden `.hex` file and its `# kind:` header.
fn golden(path: &Path) -> Option<(String, Vec<u8>)> {
    let text = fs::read_to_string(path).ok()?;
    let mut kind = String::new();
    let mut hex = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# kind:") {
            kind = rest.trim().to_string();
        } else if !line.starts_with('#') {
            hex.extend(line.chars().filter(|c| !c.is_whitespace()));
        }
    }
    let bytes = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .ok()?;
    Some((kind, bytes))
}

fn main() {
    let corpus = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "corpus".into()));
    let golden_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/jute/tests/golden");
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(&golden_dir)
        .expect("golden frames dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .collect();
    entries.sort();
    for path in entries {
        let Some((kind, bytes)) = golden(&path) else {
            continue;
        };
        let target = match kind.as_str() {
            "request" => "jute_request",
            "connect_request" => "jute_handshake",
            _ => continue,
        };
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        write(&corpus.join(target), &name, &bytes);
        *counts.entry(target).or_default() += 1;
    }
    let (batches, snapshots) = keel_tree::fuzzing::seeds();
    for (i, batch) in batches.iter().enumerate() {
        write(&corpus.join("tree_batch_decode"), &i.to_string(), batch);
    }
    counts.insert("tree_batch_decode", batches.len());
    for (i, body) in snapshots.iter().enumerate() {
        write(&corpus.join("snapshot_decode"), &i.to_string(), body);
    }
    counts.insert("snapshot_decode", snapshots.len());
    let mut rng = keel_jute::fuzzing::XorShift(0x5eed_f00d);
    for i in 0..8 {
        let len = 64 + rng.below(448) as usize;
        write(&corpus.join("tree_apply"), &i.to_string(), &rng.bytes(len));
    }
    counts.insert("tree_apply", 8);
    let kv = keel_kv::fuzzing::seeds();
    for (i, input) in kv.iter().enumerate() {
        write(&corpus.join("kv_resp"), &i.to_string(), input);
    }
    counts.insert("kv_resp", kv.len());
    let parts = keel_kv::fuzzing::snapshot_seeds();
    for (i, part) in parts.iter().enumerate() {
        write(&corpus.join("kv_snapshot_decode"), &i.to_string(), part);
    }
    counts.insert("kv_snapshot_decode", parts.len());
    for (target, count) in counts {
        println!("{target}: {count} seeds");
    }
}
