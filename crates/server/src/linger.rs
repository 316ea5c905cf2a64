//! When the Raft leader lingers over a batch of writes
//! (`Core::set_linger_us`, Pangu's adaptive group commit).
//!
//! A round of the write path costs every node an fdatasync and about a
//! dozen thread wake-ups, whatever it carries. Under a read-mostly load
//! (RaftKeeper's mix: 9 writes in 100 requests) the writes come a few per
//! round, so rounds, not writes, are what the writes cost; holding each
//! batch up to `WRITE_LINGER_US` after the previous entry committed makes
//! the rounds fewer and larger, and the clients waiting on them are few
//! (most are reading). But a client whose write is held waits too: the
//! time lingering takes from the clients is about writes/s × linger /
//! clients (a closed loop of 10 clients at 3,000 writes/s lingering 1 ms
//! leaves each client idle a third of the time: measured, mix x10 lost
//! 7-20%; create x10 lost 40%). So this node asks for the linger that
//! costs its clients at most `CLIENT_TIME_SHARE_PERCENT` of their time,
//! capped at `WRITE_LINGER_US_MAX` and none below `WRITE_LINGER_US_MIN`,
//! and only while its clients send at least `READS_PER_WRITE_MIN` reads
//! per write and `LINGER_WRITES_PER_S_MIN` writes. Only the leader's
//! setting acts (followers forward at once); it decides from its own
//! clients, which with clients spread over the members is the cluster's
//! mix.

use std::sync::Arc;
use std::time::Duration;

use keel_jute::opcode;

use crate::fifo::is_write_op;
use crate::profile::Op;
use crate::shared::Shared;

/// How often the mix is looked at.
pub const LINGER_CHECK_MS: u64 = 100;
/// How long a lingering leader holds a batch at most.
pub const WRITE_LINGER_US_MAX: u64 = 2_000;
/// A shorter linger than this gathers too little to be worth it. 400, not
/// 250: with a 15% share, mix x10 (3-4 clients on the leader) came to
/// 250-310 µs and lost 5-7% of its throughput lingering; at 400 it does
/// not linger (3 nodes on 2 cores: 57.0k / 58.1k TPS before, 63.0k /
/// 61.0k after).
pub const WRITE_LINGER_US_MIN: u64 = 400;
/// The share of their time the clients may lose to lingering. 15, not 10
/// (nor 5): a round costs the cluster ~0.7 ms of CPU, and fewer, larger
/// rounds leave it to the reads. 3 nodes on 2 cores, mix x100: 62.5k /
/// 66.1k TPS at 5%, 74.3k / 70.6k at 10%; then, after other changes,
/// 82.3k / 84.0k at 10% and 87.6k / 87.4k at 15% (p99 4.9-5.0 ms and
/// 5.0-5.2 ms). x400 is at WRITE_LINGER_US_MAX with each.
pub const CLIENT_TIME_SHARE_PERCENT: u64 = 15;
/// Reads per write at which lingering pays.
pub const READS_PER_WRITE_MIN: u64 = 4;
/// Fewer writes than this per second have little to share a round with.
pub const LINGER_WRITES_PER_S_MIN: u64 = 500;

const _: () = assert!(WRITE_LINGER_US_MIN < WRITE_LINGER_US_MAX);
const _: () = assert!(WRITE_LINGER_US_MAX <= keel_consensus::LINGER_US_MAX);

/// Requests answered from the local tree.
fn is_read_op(op_code: i32) -> bool {
    matches!(
        op_code,
        opcode::EXISTS
            | opcode::GET_DATA
            | opcode::GET_ACL
            | opcode::GET_CHILDREN
            | opcode::GET_CHILDREN2
            | opcode::MULTI_READ
            | opcode::GET_EPHEMERALS
            | opcode::GET_ALL_CHILDREN_NUMBER
            | opcode::FILTERED_LIST
            | opcode::CHECK_NOT_EXISTS
    )
}

/// Writes through the log that a client waits on (not sync, which is no
/// log entry, nor closeSession).
fn is_counted_write(op_code: i32) -> bool {
    is_write_op(op_code) && op_code != opcode::SYNC && op_code != opcode::CLOSE_SESSION
}

/// The linger to ask for after `reads` and `writes` arrived in
/// `window_ms` from the clients of `connections` connections.
pub fn linger_us(reads: u64, writes: u64, window_ms: u64, connections: u64) -> u64 {
    assert!(window_ms > 0);
    let writes_per_s = writes.saturating_mul(1_000) / window_ms;
    if writes_per_s < LINGER_WRITES_PER_S_MIN || reads < writes.saturating_mul(READS_PER_WRITE_MIN)
    {
        return 0;
    }
    // writes_per_s × linger_s ≤ share × connections
    let affordable_us =
        connections.saturating_mul(CLIENT_TIME_SHARE_PERCENT * 10_000) / writes_per_s;
    if affordable_us < WRITE_LINGER_US_MIN {
        0
    } else {
        affordable_us.min(WRITE_LINGER_US_MAX)
    }
}

/// (reads, writes) received so far by this node.
fn counts(shared: &Shared) -> (u64, u64) {
    let (mut reads, mut writes) = (0, 0);
    for op in Op::all() {
        let Some(code) = op.opcode() else { continue };
        if is_read_op(code) {
            reads += shared.stats.received(op);
        } else if is_counted_write(code) {
            writes += shared.stats.received(op);
        }
    }
    (reads, writes)
}

/// Sets the Raft driver's linger every `LINGER_CHECK_MS` from the mix of
/// the last period; runs while the node serves.
pub async fn run(shared: Arc<Shared>) {
    let mut checks = tokio::time::interval(Duration::from_millis(LINGER_CHECK_MS));
    checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = counts(&shared);
    let mut asked = 0;
    loop {
        checks.tick().await;
        let now = counts(&shared);
        let connections = shared.connections().len() as u64;
        let linger = linger_us(now.0 - last.0, now.1 - last.1, LINGER_CHECK_MS, connections);
        last = now;
        if linger != asked {
            tracing::debug!(linger_us = linger, "write linger changed");
            shared.raft.set_linger_us(linger);
            asked = linger;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_mostly_mix_of_many_clients_lingers_and_others_do_not() {
        // RaftKeeper's mix from 33 clients, 3,300 writes/s (x100 on three
        // members): 15% of 33 client-seconds over 3,300 writes = 1.5 ms.
        assert_eq!(linger_us(2_970, 330, 100, 33), 1_500);
        // 133 clients (x400): capped.
        assert_eq!(linger_us(1_200, 120, 100, 133), WRITE_LINGER_US_MAX);
        // 3 or 4 clients (x10) at 1,900 writes/s: 236 or 315 µs would be
        // affordable, too short to pay.
        assert_eq!(linger_us(1_710, 190, 100, 3), 0);
        assert_eq!(linger_us(1_710, 190, 100, 4), 0);
        // The shortest linger asked for is WRITE_LINGER_US_MIN itself:
        // 15% of 4 client-seconds over 1,500 writes = 400 µs.
        assert_eq!(linger_us(1_350, 150, 100, 4), WRITE_LINGER_US_MIN);
        assert_eq!(linger_us(1_359, 151, 100, 4), 0);
        // Creates only, or too many writes per read: every client waits.
        assert_eq!(linger_us(0, 3_000, 100, 1_000), 0);
        assert_eq!(linger_us(4 * 150 - 1, 150, 100, 1_000), 0);
        assert_eq!(linger_us(4 * 150, 150, 100, 1_000), WRITE_LINGER_US_MAX);
        // Reads with a trickle of writes: nothing to batch.
        assert_eq!(linger_us(10_000, 49, 100, 1_000), 0);
        assert_eq!(linger_us(10_000, 50, 100, 1_000), WRITE_LINGER_US_MAX);
        assert_eq!(linger_us(0, 0, 100, 0), 0);
        assert_eq!(linger_us(u64::MAX, u64::MAX / 8, 1, u64::MAX), 0);
    }

    #[test]
    fn reads_and_counted_writes_do_not_overlap() {
        for code in [
            1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 19, 20, 21, 22, 100, 101, -11, 500, 501,
            502, 503,
        ] {
            assert!(
                !(is_read_op(code) && is_counted_write(code)),
                "opcode {code}"
            );
        }
        assert!(!is_counted_write(opcode::SYNC));
        assert!(!is_read_op(opcode::SYNC));
        assert!(is_counted_write(opcode::CREATE) && is_counted_write(opcode::MULTI));
        assert!(is_read_op(opcode::GET_CHILDREN2) && is_read_op(opcode::GET_DATA));
    }
}
