//! The tree alone at scale: builds N znodes (parents × 1,000 children,
//! 100-byte values) through `apply`, then reports the tree's own memory
//! accounting beside the process RSS growth, apply rate, snapshot write
//! time, and snapshot load time with 1 and with all cores. The RSS of a
//! fresh process that loads the snapshot is the steady figure (no garbage
//! of the build); the builder's own RSS is shown before and after
//! malloc_trim (the allocator keeps freed request memory).
//!
//!     cargo run --release -p keel-tree --example tree_scale -- 1000000

use std::time::Instant;

use keel_jute::{CreateRequest, MultiOp, Request};
use keel_tree::fuzzing::{local_request, local_txn};
use keel_tree::{acl, snapshot, DataTree, Txn, TxnOp};

#[cfg(keel_jemalloc)]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const FANOUT: usize = 1_000;
const VALUE_BYTES: usize = 100;
const MULTI_OPS: usize = 200;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn multi(ops: Vec<MultiOp>) -> Txn {
    local_request(&Request::Multi(ops))
}

fn create(path: String) -> MultiOp {
    MultiOp::Create(CreateRequest {
        path,
        data: Some(vec![b'x'; VALUE_BYTES]),
        acl: acl::open_acl_unsafe(),
        flags: 0,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("load") {
        return load(&args[2]);
    }
    let znodes: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let base_rss = rss_bytes();
    let mut tree = DataTree::new();
    tree.apply(1, &local_txn(TxnOp::CreateSession { timeout_ms: 30_000 }));
    let started = Instant::now();
    let mut ops = Vec::with_capacity(MULTI_OPS);
    let mut made = 0;
    let mut txns = 0u64;
    for parent in 0.. {
        if made >= znodes {
            break;
        }
        ops.push(create(format!("/p{parent:06}")));
        made += 1;
        for child in 0..FANOUT {
            if made >= znodes {
                break;
            }
            ops.push(create(format!("/p{parent:06}/c{child:06}")));
            made += 1;
            if ops.len() == MULTI_OPS {
                let applied = tree.apply(1, &multi(std::mem::take(&mut ops)));
                assert!(applied.result.is_ok());
                txns += 1;
            }
        }
        if made % 1_000_000 < FANOUT + 1 {
            eprintln!("  {made} znodes, {:.1} s", started.elapsed().as_secs_f64());
        }
    }
    if !ops.is_empty() {
        tree.apply(1, &multi(ops));
        txns += 1;
    }
    let load_s = started.elapsed().as_secs_f64();
    let rss_before_trim = rss_bytes() - base_rss;
    // SAFETY: malloc_trim only returns free heap memory to the kernel.
    unsafe { libc::malloc_trim(0) };
    let rss = rss_bytes() - base_rss;
    println!(
        "RSS growth before malloc_trim {} MiB",
        rss_before_trim >> 20
    );
    let count = tree.node_count() as u64;
    println!(
        "znodes {count}: apply {:.0} znodes/s ({txns} multis), RSS growth {} MiB = {} B/znode, keel_tree_bytes {} MiB = {} B/znode",
        count as f64 / load_s,
        rss >> 20,
        rss / count,
        tree.memory_bytes() >> 20,
        tree.memory_bytes() / count
    );
    tree.set_applied(1, 1);
    let started = Instant::now();
    let mut bytes = Vec::new();
    snapshot::encode(&mut tree, &mut bytes);
    println!(
        "snapshot encode: {:.2} s, {} MiB",
        started.elapsed().as_secs_f64(),
        bytes.len() >> 20
    );
    let digest = tree.digest();
    drop(tree);
    let file = std::env::temp_dir().join("keel-tree-scale.snap");
    std::fs::write(&file, &bytes).expect("temp file");
    let status = std::process::Command::new(&args[0])
        .arg("load")
        .arg(&file)
        .status()
        .expect("runs itself");
    assert!(status.success());
    let _ = std::fs::remove_file(&file);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for threads in [1, threads] {
        let started = Instant::now();
        let loaded = snapshot::load(&bytes, threads).expect("loads");
        assert_eq!(loaded.digest(), digest);
        println!(
            "snapshot load with {threads} threads: {:.2} s",
            started.elapsed().as_secs_f64()
        );
    }
}

/// A fresh process loads the snapshot: RSS with no garbage of the build.
fn load(file: &str) {
    let base_rss = rss_bytes();
    let bytes = std::fs::read(file).expect("snapshot file");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = Instant::now();
    let tree = snapshot::load(&bytes, threads).expect("loads");
    let load_s = started.elapsed().as_secs_f64();
    drop(bytes);
    let rss = rss_bytes().saturating_sub(base_rss);
    let count = tree.node_count() as u64;
    println!(
        "fresh process: load {load_s:.2} s, RSS growth {} MiB = {} B/znode, keel_tree_bytes {} B/znode",
        rss >> 20,
        rss / count,
        tree.memory_bytes() / count
    );
}
