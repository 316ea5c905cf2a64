//! Creates N znodes under one parent through a server (Keel or
//! ZooKeeper), with names in random order or in sorted order, from
//! `--in-flight` concurrent requests on one session, and prints the
//! creates per second of every 100,000 (ARCHITECTURE.md, "The data tree in
//! memory": a parent's children past 4,096 are kept in chunks).
//!
//!     cargo run --release -p keel-client --example wide_create -- \
//!         127.0.0.1:2181 /wide 1000000 random 64

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use keel_client::{open_acl_unsafe, Client, ClientError, CreateMode, ErrorCode};

const REPORT_EVERY: u64 = 100_000;

fn name_of(index: u64, random: bool) -> String {
    if !random {
        return format!("{index:016x}");
    }
    // A bijection on u64 (splitmix64's finalizer): distinct names in no order.
    let mut x = index.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    format!("{:016x}", x ^ (x >> 31))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), ClientError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: wide_create SERVER PARENT COUNT random|sorted IN_FLIGHT";
    let [server, parent, count, order, in_flight] = args.as_slice() else {
        panic!("{usage}");
    };
    let count: u64 = count.parse().expect(usage);
    let random = match order.as_str() {
        "random" => true,
        "sorted" => false,
        _ => panic!("{usage}"),
    };
    let in_flight: u64 = in_flight.parse().expect(usage);
    assert!(
        (1..=1024).contains(&in_flight),
        "IN_FLIGHT must be 1..=1024"
    );
    let client = Arc::new(Client::connect(server, 30_000).await?);
    let acl = open_acl_unsafe();
    match client
        .create(parent, &[], &acl, CreateMode::Persistent)
        .await
    {
        Ok(_) | Err(ClientError::Zk(ErrorCode::NodeExists)) => {}
        Err(e) => return Err(e),
    }
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    // Nanoseconds from `started` to the last report.
    let reported_ns = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..in_flight {
        let (client, next, done, acl, parent) = (
            client.clone(),
            next.clone(),
            done.clone(),
            acl.clone(),
            parent.clone(),
        );
        let reported_ns = reported_ns.clone();
        tasks.spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= count {
                    return Ok::<(), ClientError>(());
                }
                let path = format!("{parent}/{}", name_of(index, random));
                client
                    .create(&path, b"v", &acl, CreateMode::Persistent)
                    .await?;
                let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                if finished.is_multiple_of(REPORT_EVERY) {
                    let now_ns = started.elapsed().as_nanos() as u64;
                    let since_ns = now_ns - reported_ns.swap(now_ns, Ordering::Relaxed);
                    let rate = REPORT_EVERY as f64 * 1e9 / since_ns.max(1) as f64;
                    println!("{finished:>9} children: {rate:>9.0} creates/s");
                }
            }
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.expect("a create task")?;
    }
    println!(
        "{count} creates in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
