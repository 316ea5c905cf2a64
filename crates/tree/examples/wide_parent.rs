//! One parent, many children: the tree's apply rate for creates whose
//! names sort last (`seq`) or anywhere (`random`), per 100,000 children;
//! or (`queue`) a queue of that many children, oldest deleted and a new
//! one created at the end, 100,000 times.
//! Past CHILDREN_FLAT_MAX children a parent keeps them in chunks, so a
//! create whose name sorts in the middle moves one chunk, not every id
//! after it (ARCHITECTURE.md, "The data tree in memory").
//!
//!     cargo run --release -p keel-tree --example wide_parent -- 1000000 random|seq|queue
use std::time::Instant;

use keel_jute::{CreateRequest, DeleteRequest, Request};
use keel_tree::fuzzing::{local_request, local_txn};
use keel_tree::{acl, DataTree, Txn, TxnOp};

fn create(path: String) -> Txn {
    local_request(&Request::Create(CreateRequest {
        path,
        data: Some(vec![b'x'; 10]),
        acl: acl::open_acl_unsafe(),
        flags: 0,
    }))
}

fn delete(path: String) -> Txn {
    local_request(&Request::Delete(DeleteRequest { path, version: -1 }))
}

/// `count` children in order, then 100,000 times: the oldest deleted, a
/// newest created (a queue's dequeue and enqueue).
fn queue(count: u64) {
    const ROUNDS: u64 = 100_000;
    let mut tree = DataTree::new();
    tree.apply(1, &local_txn(TxnOp::CreateSession { timeout_ms: 30_000 }));
    tree.apply(1, &create("/q".into()));
    for i in 0..count {
        assert!(tree
            .apply(1, &create(format!("/q/{i:016x}")))
            .result
            .is_ok());
    }
    let started = Instant::now();
    for i in 0..ROUNDS {
        let deleted = tree.apply(1, &delete(format!("/q/{i:016x}")));
        assert!(deleted.result.is_ok(), "delete {i} failed");
        let created = tree.apply(1, &create(format!("/q/{:016x}", count + i)));
        assert!(created.result.is_ok(), "create {i} failed");
    }
    println!(
        "{count:>8} queued: {:>8.0} dequeues + enqueues/s",
        ROUNDS as f64 / started.elapsed().as_secs_f64()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let count: u64 = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let random = match args.get(2).map(String::as_str) {
        Some("random") | None => true,
        Some("seq") => false,
        Some("queue") => return queue(count),
        Some(other) => panic!("unknown order {other}: random, seq or queue"),
    };
    let mut tree = DataTree::new();
    tree.apply(1, &local_txn(TxnOp::CreateSession { timeout_ms: 30_000 }));
    tree.apply(1, &create("/p".into()));
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let mut started = Instant::now();
    for i in 0..count {
        let name = if random {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("/p/{x:016x}")
        } else {
            format!("/p/{i:016x}")
        };
        let applied = tree.apply(1, &create(name));
        assert!(applied.result.is_ok(), "create {i} failed");
        if (i + 1) % 100_000 == 0 {
            println!(
                "{:>8} children: {:>8.0} creates/s",
                i + 1,
                100_000.0 / started.elapsed().as_secs_f64()
            );
            started = Instant::now();
        }
    }
}
