//! Keel's measurements: a lock-free histogram any thread records into with
//! three relaxed atomic operations (no allocation, no lock: cheap enough
//! for every request), snapshots that readers take of it (`mntr`, the
//! Prometheus endpoint), and the sliding window over which ZooKeeper's
//! summaries report their quantiles.
//!
//! Buckets are log-linear: values below 16 have a bucket each, then every
//! power of two is cut into 16 buckets, up to 2^36 (a bucket's upper edge
//! is at most 6.25% above any value in it); larger values share the last
//! bucket, and the exact maximum is kept apart. The unit is the caller's:
//! microseconds for durations, a plain number for sizes.
//!
//! Nothing here reads a clock: durations are measured by the caller and
//! the window is told the time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const SUB_BUCKET_BITS: u32 = 4;
const SUB_BUCKETS: usize = 1 << SUB_BUCKET_BITS;
/// Values at or above 2^EXPONENT_MAX fall in the last bucket.
const EXPONENT_MAX: u32 = 36;
/// Buckets of a histogram.
pub const BUCKETS: usize = SUB_BUCKETS + (EXPONENT_MAX - SUB_BUCKET_BITS) as usize * SUB_BUCKETS;
/// The largest value with a bucket of its own range (2^36 − 1: 19 hours
/// in microseconds).
pub const VALUE_MAX: u64 = (1 << EXPONENT_MAX) - 1;

/// The bucket `value` is counted in.
pub fn bucket_of(value: u64) -> usize {
    let value = value.min(VALUE_MAX);
    if value < SUB_BUCKETS as u64 {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros(); // ≥ SUB_BUCKET_BITS
    let sub = (value >> (exponent - SUB_BUCKET_BITS)) as usize - SUB_BUCKETS;
    SUB_BUCKETS + (exponent - SUB_BUCKET_BITS) as usize * SUB_BUCKETS + sub
}

/// The largest value counted in `bucket`.
pub fn bucket_upper(bucket: usize) -> u64 {
    assert!(bucket < BUCKETS, "bucket {bucket} out of range");
    if bucket < SUB_BUCKETS {
        return bucket as u64;
    }
    let exponent = ((bucket - SUB_BUCKETS) / SUB_BUCKETS) as u32 + SUB_BUCKET_BITS;
    let sub = ((bucket - SUB_BUCKETS) % SUB_BUCKETS) as u64;
    ((SUB_BUCKETS as u64 + 1 + sub) << (exponent - SUB_BUCKET_BITS)) - 1
}

/// A cumulative histogram shared by the threads that record into it.
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
    max: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let snapshot = self.snapshot();
        write!(
            f,
            "Histogram(count {}, sum {}, max {})",
            snapshot.count(),
            snapshot.sum,
            snapshot.max
        )
    }
}

impl Histogram {
    pub fn new() -> Histogram {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }

    /// Records one value.
    #[inline]
    pub fn record(&self, value: u64) {
        self.buckets[bucket_of(value)].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
        self.max.fetch_max(value, Ordering::Relaxed);
    }

    /// Records a duration in microseconds.
    #[inline]
    pub fn record_duration(&self, duration: Duration) {
        self.record(duration.as_micros().min(u64::MAX as u128) as u64);
    }

    /// The counts as of now. Concurrent records may show in some parts and
    /// not yet in others (the sum, the maximum); each part is exact alone.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            sum: self.sum.load(Ordering::Relaxed),
            max: self.max.load(Ordering::Relaxed),
        }
    }
}

/// A histogram's counts at one moment (or the difference of two moments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    buckets: Box<[u64]>,
    /// Sum of the values recorded.
    pub sum: u64,
    /// The largest value recorded (since the histogram was made: a
    /// difference keeps the later one's).
    pub max: u64,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot::empty()
    }
}

impl Snapshot {
    pub fn empty() -> Snapshot {
        Snapshot {
            buckets: vec![0; BUCKETS].into_boxed_slice(),
            sum: 0,
            max: 0,
        }
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The value at quantile `q` (0..=1): the upper edge of the bucket that
    /// holds it, never above the maximum. None if nothing was recorded.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        assert!((0.0..=1.0).contains(&q), "quantile {q} outside 0..=1");
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (bucket, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(bucket_upper(bucket).min(self.max));
            }
        }
        unreachable!("rank {rank} ≤ total {total}")
    }

    /// Values below 2^`exponent` (exact: a power of two starts a bucket).
    pub fn count_below_power_of_two(&self, exponent: u32) -> u64 {
        assert!(exponent <= EXPONENT_MAX);
        let limit = 1u64 << exponent;
        self.buckets
            .iter()
            .enumerate()
            .take_while(|(bucket, _)| bucket_upper(*bucket) < limit)
            .map(|(_, n)| n)
            .sum()
    }

    /// Adds `other`'s values (e.g. every read opcode's into one).
    pub fn merge(&mut self, other: &Snapshot) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *mine += theirs;
        }
        self.sum += other.sum;
        self.max = self.max.max(other.max);
    }

    /// What was recorded after `earlier` (a snapshot of the same histogram).
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        Snapshot {
            buckets: self
                .buckets
                .iter()
                .zip(earlier.buckets.iter())
                .map(|(now, then)| now.saturating_sub(*then))
                .collect(),
            sum: self.sum.saturating_sub(earlier.sum),
            max: self.max,
        }
    }
}

/// The recent part of a cumulative histogram, as ZooKeeper's Prometheus
/// summaries report quantiles: over the last `window_ms`, moving in steps
/// of `window_ms / age_buckets` (Prometheus's Java client: 10 minutes in 5
/// steps). The reader keeps one per histogram and shows it the histogram's
/// snapshot and the time at every read; the window advances at reads, so a
/// reader that comes back less often than every step sees a longer window.
#[derive(Debug)]
pub struct Window {
    window_ms: u64,
    step_ms: u64,
    /// (time, snapshot) at the start of each step still in the window,
    /// oldest first.
    baselines: VecDeque<(u64, Snapshot)>,
}

impl Window {
    /// A window over a histogram made (empty) at `start_ms`.
    pub fn new(window_ms: u64, age_buckets: u64, start_ms: u64) -> Window {
        assert!(window_ms > 0 && age_buckets > 0 && window_ms >= age_buckets);
        Window {
            window_ms,
            step_ms: window_ms / age_buckets,
            baselines: VecDeque::from([(start_ms, Snapshot::empty())]),
        }
    }

    /// The values recorded in the window ending at `now_ms`, given the
    /// histogram's snapshot `current` taken at `now_ms`.
    pub fn recent(&mut self, now_ms: u64, current: &Snapshot) -> Snapshot {
        let start_ms = now_ms.saturating_sub(self.window_ms);
        while self.baselines.front().is_some_and(|(at, _)| *at < start_ms) {
            self.baselines.pop_front();
        }
        let recent = match self.baselines.front() {
            Some((_, baseline)) => current.since(baseline),
            // No read within the window: everything recorded so far.
            None => current.clone(),
        };
        let due = self
            .baselines
            .back()
            .is_none_or(|(at, _)| now_ms >= at + self.step_ms);
        if due {
            self.baselines.push_back((now_ms, current.clone()));
        }
        assert!(self.baselines.len() as u64 <= self.window_ms / self.step_ms + 1);
        recent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order_without_gaps() {
        let mut previous_upper = None;
        for bucket in 0..BUCKETS {
            let upper = bucket_upper(bucket);
            assert_eq!(bucket_of(upper), bucket);
            if let Some(p) = previous_upper {
                assert_eq!(bucket_of(p + 1), bucket, "no gap before bucket {bucket}");
                assert!(upper > p);
            }
            previous_upper = Some(upper);
        }
        assert_eq!(bucket_upper(BUCKETS - 1), VALUE_MAX);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        // A bucket's upper edge is within 6.25% of every value in it.
        for value in [9u64, 16, 17, 100, 1_234, 98_765, 5_000_000, VALUE_MAX] {
            let upper = bucket_upper(bucket_of(value));
            assert!(
                upper >= value && (upper - value) * 16 <= value,
                "{value} -> {upper}"
            );
        }
    }

    #[test]
    fn quantiles_are_bucket_edges_capped_by_the_maximum() {
        let histogram = Histogram::new();
        assert_eq!(histogram.snapshot().quantile(0.5), None);
        for value in 1..=1000 {
            histogram.record(value);
        }
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count(), 1000);
        assert_eq!(snapshot.sum, 500_500);
        assert_eq!(snapshot.max, 1000);
        let p50 = snapshot.quantile(0.5).unwrap();
        assert!((500..=500 + 500 / 16).contains(&p50), "{p50}");
        let p99 = snapshot.quantile(0.99).unwrap();
        assert!((990..=1000).contains(&p99), "{p99}");
        assert_eq!(snapshot.quantile(1.0), Some(1000));
        assert_eq!(snapshot.quantile(0.0), Some(1));
        histogram.record_duration(Duration::from_millis(250));
        assert_eq!(histogram.snapshot().max, 250_000);
    }

    #[test]
    fn counts_below_a_power_of_two_are_exact() {
        let histogram = Histogram::new();
        for value in [0, 1, 15, 16, 31, 32, 63, 64, 1023, 1024, 1025] {
            histogram.record(value);
        }
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count_below_power_of_two(0), 1); // < 1
        assert_eq!(snapshot.count_below_power_of_two(1), 2); // < 2
        assert_eq!(snapshot.count_below_power_of_two(4), 3); // < 16
        assert_eq!(snapshot.count_below_power_of_two(5), 5); // < 32
        assert_eq!(snapshot.count_below_power_of_two(6), 7); // < 64
        assert_eq!(snapshot.count_below_power_of_two(10), 9); // < 1024
        assert_eq!(snapshot.count_below_power_of_two(11), 11);
    }

    #[test]
    fn merge_adds_and_since_subtracts() {
        let (a, b) = (Histogram::new(), Histogram::new());
        a.record(10);
        b.record(20);
        b.record(30);
        let mut merged = a.snapshot();
        merged.merge(&b.snapshot());
        assert_eq!((merged.count(), merged.sum, merged.max), (3, 60, 30));
        let before = a.snapshot();
        a.record(40);
        let after = a.snapshot().since(&before);
        assert_eq!((after.count(), after.sum), (1, 40));
        assert_eq!(after.quantile(0.5), Some(40));
    }

    #[test]
    fn a_window_forgets_what_is_older_than_it() {
        let histogram = Histogram::new();
        // 10 minutes in 5 steps of 2, as ZooKeeper's summaries.
        let mut window = Window::new(600_000, 5, 0);
        histogram.record(1_000);
        let recent = window.recent(1_000, &histogram.snapshot());
        assert_eq!(
            recent.count(),
            1,
            "since the start while it is in the window"
        );
        histogram.record(2_000);
        assert_eq!(window.recent(2_000, &histogram.snapshot()).count(), 2);
        for minute in 1..=9 {
            window.recent(minute * 60_000, &histogram.snapshot());
        }
        histogram.record(3_000);
        // At 10.5 minutes the start (t = 0) is out of the window: the
        // baseline is the read at 2 minutes, after both early values.
        let recent = window.recent(630_000, &histogram.snapshot());
        assert_eq!(recent.count(), 1);
        assert_eq!(recent.quantile(0.5), Some(3_000));
        assert_eq!(recent.sum, 3_000);
        // A reader gone for longer than the window sees everything again.
        let recent = window.recent(5_000_000, &histogram.snapshot());
        assert_eq!(recent.count(), 3);
        assert_eq!(window.recent(5_000_001, &histogram.snapshot()).count(), 0);
    }
}
