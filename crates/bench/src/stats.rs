//! Latency and outcome counting shared by the lanes.
//!
//! Lanes record into a fixed set of shards (lane `i` uses shard
//! `i % shards`), each a mutex around an HDR histogram of the successes'
//! latencies in µs plus counters. Once a second the coordinator drains
//! every shard into the run's totals, which gives both the per-second
//! throughput and the "so far" percentiles without a histogram per lane
//! (10 000 lanes × ~140 KiB would not fit).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use hdrhistogram::Histogram;
use keel_client::ClientError;

use crate::workload::OpKind;

/// Largest latency the histogram tells apart (60 s, twice the client's
/// request timeout); anything slower is recorded as this.
pub const HISTOGRAM_MAX_US: u64 = 60_000_000;
/// Significant decimal digits kept by the histogram (0.1 % resolution).
pub const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;
/// Most shards; fewer when there are fewer lanes.
pub const MAX_SHARDS: usize = 64;

pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HISTOGRAM_MAX_US, HISTOGRAM_SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

/// What was recorded since the last drain (or, for [`Totals`], in all).
#[derive(Debug, Clone)]
pub(crate) struct Counts {
    pub histogram: Histogram<u64>,
    pub successes: u64,
    pub errors: u64,
    pub ops_by_kind: [u64; 5],
    /// "op: error" → how many.
    pub error_kinds: BTreeMap<String, u64>,
}

impl Counts {
    fn new() -> Counts {
        Counts {
            histogram: new_histogram(),
            successes: 0,
            errors: 0,
            ops_by_kind: [0; 5],
            error_kinds: BTreeMap::new(),
        }
    }

    pub fn ops(&self) -> u64 {
        self.successes + self.errors
    }

    /// Adds `other` into `self` and clears `other`.
    fn absorb(&mut self, other: &mut Counts) {
        self.histogram
            .add(&other.histogram)
            .expect("histograms of equal bounds add");
        other.histogram.reset();
        self.successes += std::mem::take(&mut other.successes);
        self.errors += std::mem::take(&mut other.errors);
        for (mine, theirs) in self
            .ops_by_kind
            .iter_mut()
            .zip(other.ops_by_kind.iter_mut())
        {
            *mine += std::mem::take(theirs);
        }
        for (kind, n) in std::mem::take(&mut other.error_kinds) {
            *self.error_kinds.entry(kind).or_insert(0) += n;
        }
    }
}

pub(crate) struct Stats {
    shards: Vec<Mutex<Counts>>,
}

impl Stats {
    pub fn new(lanes: usize) -> Stats {
        let n = lanes.clamp(1, MAX_SHARDS);
        Stats {
            shards: (0..n).map(|_| Mutex::new(Counts::new())).collect(),
        }
    }

    fn shard(&self, lane: usize) -> MutexGuard<'_, Counts> {
        self.shards[lane % self.shards.len()]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    pub fn success(&self, lane: usize, kind: OpKind, micros: u64) {
        let mut s = self.shard(lane);
        s.histogram.saturating_record(micros.max(1));
        s.successes += 1;
        s.ops_by_kind[kind.index()] += 1;
    }

    pub fn error(&self, lane: usize, kind: OpKind, error: &ClientError) {
        let mut s = self.shard(lane);
        s.errors += 1;
        s.ops_by_kind[kind.index()] += 1;
        *s.error_kinds.entry(format!("{kind}: {error}")).or_insert(0) += 1;
    }

    /// Moves everything recorded since the last drain into `totals`;
    /// returns how many successes and errors that was.
    pub fn drain_into(&self, totals: &mut Counts) -> (u64, u64) {
        let before = (totals.successes, totals.errors);
        for shard in &self.shards {
            let mut s = shard.lock().unwrap_or_else(|p| p.into_inner());
            totals.absorb(&mut s);
        }
        (totals.successes - before.0, totals.errors - before.1)
    }

    pub fn empty_totals() -> Counts {
        Counts::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_move_counts_once() {
        let stats = Stats::new(3);
        stats.success(0, OpKind::Get, 100);
        stats.success(1, OpKind::Get, 300);
        stats.success(2, OpKind::Set, 0);
        stats.error(5, OpKind::Set, &ClientError::ConnectionLoss);
        let mut totals = Stats::empty_totals();
        assert_eq!(stats.drain_into(&mut totals), (3, 1));
        assert_eq!(stats.drain_into(&mut totals), (0, 0));
        assert_eq!((totals.successes, totals.errors), (3, 1));
        assert_eq!(totals.ops_by_kind[OpKind::Get.index()], 2);
        assert_eq!(totals.ops_by_kind[OpKind::Set.index()], 2);
        assert_eq!(totals.histogram.len(), 3);
        assert_eq!(totals.error_kinds["set: connection loss"], 1);
        stats.success(0, OpKind::Get, HISTOGRAM_MAX_US * 10);
        stats.drain_into(&mut totals);
        assert!(totals.histogram.max() >= HISTOGRAM_MAX_US);
    }
}
