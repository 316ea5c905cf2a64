//! The keyspace alone at scale: N string keys ("key:%012d", a VALUE_BYTES
//! value) written through `Keyspace::apply` as the log would apply them,
//! then bytes per key: the process RSS growth, the shards' own accounting
//! (`Shard::memory_bytes`) and the snapshot part, plus the apply rate and
//! the snapshot encode and load times.
//!
//!     cargo run --release -p keel-kv --example kv_scale -- 1000000 [value_bytes]
//!     RUSTFLAGS="--cfg keel_jemalloc" ... (measures under jemalloc, as the keel binary allocates)

use std::time::Instant;

use keel_kv::op::Op;
use keel_kv::Keyspace;

#[cfg(keel_jemalloc)]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const BATCH_KEYS: usize = 1000;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let keys: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let value_bytes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let shards = std::thread::available_parallelism().map_or(1, |n| n.get());
    let value = vec![b'x'; value_bytes];
    let mut keyspace = Keyspace::new(shards);
    let before = rss_bytes();
    let started = Instant::now();
    let mut index = 0;
    for batch in 0..keys.div_ceil(BATCH_KEYS) {
        let mut args = vec![b"MSET".to_vec()];
        for i in batch * BATCH_KEYS..((batch + 1) * BATCH_KEYS).min(keys) {
            args.push(format!("key:{i:012}").into_bytes());
            args.push(value.clone());
        }
        index += 1;
        keyspace.apply(index, 1_000, &Op::Command { seq: 0, args });
    }
    let apply_s = started.elapsed().as_secs_f64();
    let after = rss_bytes();
    assert_eq!(keyspace.key_count(), keys);
    let accounted: usize = keyspace.shards().iter().map(|s| s.memory_bytes()).sum();
    let started = Instant::now();
    let bytes = keel_kv::snapshot::encode(keyspace.shards(), keyspace.index, keyspace.clock_ms);
    let encode_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let image = keel_kv::snapshot::decode(&bytes, shards).expect("the snapshot loads");
    let load_s = started.elapsed().as_secs_f64();
    assert_eq!(
        image.shards.iter().map(|s| s.key_count()).sum::<usize>(),
        keys
    );
    let per_key = |total: f64| total / keys as f64;
    println!(
        "keys                  {keys} ({value_bytes}-byte values, 16-byte keys, {shards} shards)"
    );
    println!("apply                 {:.0} keys/s", keys as f64 / apply_s);
    println!(
        "RSS growth            {:.1} bytes/key",
        per_key(after.saturating_sub(before) as f64)
    );
    println!(
        "shards' accounting    {:.1} bytes/key",
        per_key(accounted as f64)
    );
    println!(
        "snapshot part         {:.1} bytes/key ({} bytes)",
        per_key(bytes.len() as f64),
        bytes.len()
    );
    println!("snapshot encode       {:.0} ms", encode_s * 1000.0);
    println!(
        "snapshot load         {:.0} ms (one thread)",
        load_s * 1000.0
    );
}
