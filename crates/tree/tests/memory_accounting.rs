//! keel_tree_bytes (`DataTree::memory_bytes`) is the tree's own count of
//! its memory: it must match what the process actually grows by when a
//! tree is built, within 10%. Measured where nothing but the tree is
//! allocated: loading a snapshot of 300,000 znodes (1,000 children per
//! parent, 100-byte values) in a fresh test binary (this file holds one
//! test, so no other test thread allocates meanwhile). The snapshot is
//! built by a child process (this test binary again, told so by
//! `SNAPSHOT_OUT_ENV`): built here, the freed tree's heap stayed partly
//! resident, and the load reused it unseen (RSS grew 64 MB in 2 runs of
//! 10 and 70 MB in the others, for the same tree).

use keel_jute::{CreateRequest, MultiOp, Request};
use keel_tree::fuzzing::{local_request, local_txn};
use keel_tree::{acl, snapshot, DataTree, TxnOp};

const ZNODES: usize = 300_000;
const FANOUT: usize = 1_000;
const MULTI_OPS: usize = 500;
const TOLERANCE_PERCENT: u64 = 10;
/// Set for the child process: where it writes the snapshot it builds.
const SNAPSHOT_OUT_ENV: &str = "KEEL_MEMORY_ACCOUNTING_SNAPSHOT_OUT";
const TEST_NAME: &str = "keel_tree_bytes_is_within_ten_percent_of_rss_growth";

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

fn apply_multi(tree: &mut DataTree, ops: Vec<MultiOp>) {
    let applied = tree.apply(1, &local_request(&Request::Multi(ops)));
    assert!(applied.result.is_ok());
}

fn create(path: String) -> MultiOp {
    MultiOp::Create(CreateRequest {
        path,
        data: Some(vec![7; 100]),
        acl: acl::open_acl_unsafe(),
        flags: 0,
    })
}

fn snapshot_of_populated_tree() -> Vec<u8> {
    let mut tree = DataTree::new();
    tree.apply(1, &local_txn(TxnOp::CreateSession { timeout_ms: 30_000 }));
    let mut ops = Vec::new();
    for parent in 0..ZNODES / FANOUT {
        ops.push(create(format!("/p{parent}")));
        for child in 0..FANOUT - 1 {
            ops.push(create(format!("/p{parent}/c{child:06}")));
            if ops.len() == MULTI_OPS {
                apply_multi(&mut tree, std::mem::take(&mut ops));
            }
        }
    }
    if !ops.is_empty() {
        apply_multi(&mut tree, ops);
    }
    tree.set_applied(1, 1);
    snapshot::encode_copy(&tree)
}

/// The snapshot, built by a child process so this one's heap holds no
/// freed tree.
fn snapshot_from_child() -> Vec<u8> {
    let path = std::env::temp_dir().join(format!(
        "keel-memory-accounting-{}.snapshot",
        std::process::id()
    ));
    let exe = std::env::current_exe().expect("the test binary's path");
    let status = std::process::Command::new(exe)
        .args(["--exact", TEST_NAME, "--test-threads", "1"])
        .env(SNAPSHOT_OUT_ENV, &path)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("the child test process runs");
    assert!(
        status.success(),
        "the child building the snapshot failed: {status}"
    );
    let bytes = std::fs::read(&path).expect("the child's snapshot");
    std::fs::remove_file(&path).expect("removes the child's snapshot");
    bytes
}

#[test]
fn keel_tree_bytes_is_within_ten_percent_of_rss_growth() {
    if let Some(out) = std::env::var_os(SNAPSHOT_OUT_ENV) {
        std::fs::write(out, snapshot_of_populated_tree()).expect("writes the snapshot");
        return;
    }
    let bytes = snapshot_from_child();
    // SAFETY: malloc_trim only returns free heap memory to the kernel.
    unsafe { libc::malloc_trim(0) };
    let before = rss_bytes();
    let tree = snapshot::load(&bytes, 1).expect("loads");
    // The loader's scratch arrays are freed: what stays is the tree.
    // SAFETY: as above.
    unsafe { libc::malloc_trim(0) };
    let grown = rss_bytes().saturating_sub(before);
    let counted = tree.memory_bytes();
    assert!(tree.node_count() > ZNODES - 1);
    let diff = grown.abs_diff(counted);
    eprintln!(
        "{} znodes: RSS grew {grown} B ({} B/znode), keel_tree_bytes {counted} B ({} B/znode)",
        tree.node_count(),
        grown / tree.node_count() as u64,
        counted / tree.node_count() as u64
    );
    assert!(
        diff * 100 <= grown * TOLERANCE_PERCENT,
        "keel_tree_bytes {counted} vs RSS growth {grown}: off by more than {TOLERANCE_PERCENT}%"
    );
}
