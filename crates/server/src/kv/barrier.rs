//! Linearizable reads: ReadIndex barriers shared by every KV reader of a
//! node. A read waits for a barrier asked after it arrived (the leader
//! confirms with a quorum that it still leads and names its commit index;
//! the barrier passes once this node has applied that index, so the read
//! sees every write acknowledged before it arrived). A read asks a new
//! barrier if fewer than `BARRIERS_IN_FLIGHT_MAX` are in flight, else it
//! waits for the one asked next, so a barrier serves a whole batch of
//! reads, from every connection, and a batch waits about one quorum round
//! trip. Barrier n passing means every barrier before it has too.
//!
//! The barriers' contexts are their numbers, 8 bytes (a ZooKeeper sync's
//! context is at least 12: `node.rs` tells them apart by length).

use std::time::{Duration, Instant};

use keel_consensus::RaftHandle;
use parking_lot::Mutex;
use tokio::sync::watch;

/// Queues a ReadIndex with a context; the flag says more than one reader
/// waits for it (the Raft layer may then hold it until its rounds'
/// spacing has passed, `RaftHandle::read_index_batched`). False: it could
/// not be queued.
pub type Ask<'a> = dyn Fn(Vec<u8>, bool) -> bool + Sync + 'a;

/// A read waits at most this long for its barrier (no leader, no quorum).
pub const READ_BARRIER_TIMEOUT_MS: u64 = 5_000;
/// Bytes of a KV barrier's context.
pub const CONTEXT_BYTES: usize = 8;
/// Barriers asked and not answered at once (each costs the leader a
/// heartbeat round to a quorum, and every node several thread wake-ups).
/// One: reads arriving while it is out wait for the next, which then
/// serves them all. Measured on 3 nodes (redis-benchmark GET, 50 clients,
/// no pipelining): 62-64k req/s at 23 µs of server CPU per read, against
/// 52-53k at 28.5 µs with 4; pipelined GETs the same either way.
pub const BARRIERS_IN_FLIGHT_MAX: usize = 1;

#[derive(Debug)]
struct State {
    /// The number the next barrier gets (numbers start at 1).
    next: u64,
    /// Barriers asked and not answered yet.
    in_flight: std::collections::BTreeSet<u64>,
    /// Readers waiting, by the barrier each waits for.
    waiting: std::collections::BTreeMap<u64, usize>,
}

impl State {
    /// Readers waiting for barrier `number` or one before it (all of
    /// them pass with it).
    fn readers_up_to(&self, number: u64) -> usize {
        self.waiting.range(..=number).map(|(_, n)| n).sum()
    }

    /// Takes the next number if a barrier may be asked now.
    fn take(&mut self) -> Option<u64> {
        if self.in_flight.len() >= BARRIERS_IN_FLIGHT_MAX {
            return None;
        }
        let number = self.next;
        self.next += 1;
        self.in_flight.insert(number);
        Some(number)
    }
}

#[derive(Debug)]
pub struct ReadBarrier {
    state: Mutex<State>,
    /// The highest barrier passed; its changes (and refusals, which bump
    /// `refusals`) wake the waiters.
    passed: watch::Sender<(u64, u64)>,
}

/// A barrier could not be passed in time.
#[derive(Debug, thiserror::Error)]
#[error("no ReadIndex barrier passed within {READ_BARRIER_TIMEOUT_MS} ms (no leader or no quorum)")]
pub struct BarrierTimeout;

impl ReadBarrier {
    pub fn new() -> ReadBarrier {
        ReadBarrier {
            state: Mutex::new(State {
                next: 1,
                in_flight: std::collections::BTreeSet::new(),
                waiting: std::collections::BTreeMap::new(),
            }),
            passed: watch::channel((0, 0)).0,
        }
    }

    pub fn context(number: u64) -> Vec<u8> {
        number.to_be_bytes().to_vec()
    }

    /// The barrier number of a context, if it is a KV barrier's.
    pub fn number(context: &[u8]) -> Option<u64> {
        (context.len() == CONTEXT_BYTES)
            .then(|| u64::from_be_bytes(context.try_into().expect("8 bytes")))
    }

    /// Asks for barrier `number` through `ask` (ReadIndex), batched when
    /// more than one reader waits for it; false if it could not be queued.
    fn ask(number: u64, readers: usize, ask: &Ask<'_>) -> bool {
        ask(Self::context(number), readers > 1)
    }

    /// Waits until a barrier asked after this call has passed. `ask` queues
    /// a ReadIndex with the given context.
    pub async fn wait(&self, ask: &Ask<'_>) -> Result<(), BarrierTimeout> {
        let deadline = Instant::now() + Duration::from_millis(READ_BARRIER_TIMEOUT_MS);
        let mut seen = self.passed.subscribe();
        // The barrier asked now, or, with too many in flight, the next one
        // (asked after this read arrived either way).
        let (target, asked, readers) = {
            let mut state = self.state.lock();
            let (target, asked) = match state.take() {
                Some(number) => (number, true),
                None => (state.next, false),
            };
            *state.waiting.entry(target).or_insert(0) += 1;
            (target, asked, state.readers_up_to(target))
        };
        let _waiting = Waiting {
            barrier: self,
            target,
        };
        if asked && !Self::ask(target, readers, ask) {
            self.refused(target);
        }
        loop {
            if seen.borrow_and_update().0 >= target {
                return Ok(());
            }
            self.ask_if_idle(target, ask);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(BarrierTimeout);
            }
            match tokio::time::timeout(left.min(Duration::from_millis(250)), seen.changed()).await {
                Ok(Ok(())) | Err(_) => {}
                Ok(Err(_)) => return Err(BarrierTimeout),
            }
        }
    }

    /// `wait`, the ReadIndex asked through `raft` (batched when more than
    /// one reader waits for it): what Keel KV's reads and a resumed
    /// ZooKeeper session's handshake (`Shared::reconnect_barrier`) do.
    pub async fn wait_through(&self, raft: &RaftHandle) -> Result<(), BarrierTimeout> {
        let ask = |context: Vec<u8>, batched: bool| {
            if batched {
                raft.read_index_batched(context).is_ok()
            } else {
                raft.read_index(context).is_ok()
            }
        };
        self.wait(&ask).await
    }

    /// Ours not passed and not asked yet (or refused), and room for a
    /// barrier: ask the next one (the waiters drive the barriers; the apply
    /// step only reports).
    fn ask_if_idle(&self, target: u64, ask: &Ask<'_>) {
        let (number, readers) = {
            let mut state = self.state.lock();
            let covered = state.in_flight.iter().any(|&n| n >= target);
            if covered || self.passed.borrow().0 >= target {
                return;
            }
            let Some(number) = state.take() else {
                return;
            };
            (number, state.readers_up_to(number))
        };
        if !Self::ask(number, readers, ask) {
            self.refused(number);
        }
    }

    /// The highest barrier passed (a reader that asked barrier n with
    /// `context(n)` itself, without `wait`, polls this: the simulator).
    pub fn passed_number(&self) -> u64 {
        self.passed.borrow().0
    }

    /// Barrier `number` passed (the apply step, on the driver's thread).
    pub fn passed(&self, number: u64) {
        {
            // Every barrier up to it is passed too.
            let mut state = self.state.lock();
            state.in_flight.retain(|&n| n > number);
        }
        self.passed
            .send_modify(|(passed, _)| *passed = (*passed).max(number));
    }

    /// Barrier `number` could not be queued: a waiter asks again.
    pub fn refused(&self, number: u64) {
        self.state.lock().in_flight.remove(&number);
        self.passed.send_modify(|(_, refusals)| *refusals += 1);
    }
}

/// A reader counted in `State::waiting` until its wait ends (also when
/// its future is dropped).
struct Waiting<'a> {
    barrier: &'a ReadBarrier,
    target: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = self.barrier.state.lock();
        let readers = state
            .waiting
            .get_mut(&self.target)
            .expect("a waiting reader is counted");
        assert!(*readers > 0);
        *readers -= 1;
        if *readers == 0 {
            state.waiting.remove(&self.target);
        }
    }
}

impl Default for ReadBarrier {
    fn default() -> Self {
        ReadBarrier::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A barrier whose asks are recorded as (number, batched), and
    /// readers waiting on it.
    struct Readers {
        barrier: Arc<ReadBarrier>,
        asked: Arc<Mutex<Vec<(u64, bool)>>>,
    }

    impl Readers {
        fn new() -> Readers {
            Readers {
                barrier: Arc::new(ReadBarrier::new()),
                asked: Arc::new(Mutex::new(Vec::new())),
            }
        }

        /// `count` readers, each waiting on its own task.
        fn spawn(&self, count: usize) -> Vec<tokio::task::JoinHandle<Result<(), BarrierTimeout>>> {
            (0..count)
                .map(|_| {
                    let (barrier, asked) = (self.barrier.clone(), self.asked.clone());
                    tokio::spawn(async move {
                        let ask = move |context: Vec<u8>, batched: bool| {
                            asked
                                .lock()
                                .push((ReadBarrier::number(&context).unwrap(), batched));
                            true
                        };
                        barrier.wait(&ask).await
                    })
                })
                .collect()
        }

        fn asked_numbers(&self) -> Vec<u64> {
            self.asked
                .lock()
                .iter()
                .map(|(number, _)| *number)
                .collect()
        }
    }

    #[tokio::test]
    async fn reads_share_barriers_and_wait_for_one_asked_after_them() {
        let readers = Readers::new();
        let barrier = &readers.barrier;
        let first = readers.spawn(BARRIERS_IN_FLIGHT_MAX);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            readers.asked_numbers(),
            (1..=BARRIERS_IN_FLIGHT_MAX as u64).collect::<Vec<_>>()
        );
        // Two more reads while the most barriers fly: both need the next.
        let later = readers.spawn(2);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            readers.asked_numbers().len(),
            BARRIERS_IN_FLIGHT_MAX,
            "no room for another"
        );
        barrier.passed(1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let next = BARRIERS_IN_FLIGHT_MAX as u64 + 1;
        assert_eq!(
            readers.asked_numbers().last(),
            Some(&next),
            "one barrier for both"
        );
        assert_eq!(readers.asked_numbers().len(), BARRIERS_IN_FLIGHT_MAX + 1);
        assert!(!later.iter().any(|t| t.is_finished()));
        // Passing the newest passes every one before it.
        barrier.passed(next);
        for task in first.into_iter().chain(later) {
            task.await.unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn a_barrier_several_readers_wait_for_is_asked_as_batched() {
        let readers = Readers::new();
        let barrier = &readers.barrier;
        let lone = readers.spawn(1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            *readers.asked.lock(),
            vec![(1, false)],
            "a lone reader: at once"
        );
        let crowd = readers.spawn(3);
        tokio::time::sleep(Duration::from_millis(20)).await;
        barrier.passed(1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            *readers.asked.lock(),
            vec![(1, false), (2, true)],
            "three wait: batched"
        );
        barrier.passed(2);
        for task in lone.into_iter().chain(crowd) {
            task.await.unwrap().unwrap();
        }
        assert!(
            barrier.state.lock().waiting.is_empty(),
            "every reader uncounted"
        );
    }

    #[tokio::test]
    async fn a_refused_barrier_is_asked_again() {
        let barrier = ReadBarrier::new();
        let tries = Mutex::new(0);
        let ask = |_context: Vec<u8>, _batched: bool| {
            let mut tries = tries.lock();
            *tries += 1;
            *tries > 1
        };
        let wait = barrier.wait(&ask);
        tokio::pin!(wait);
        assert!(tokio::time::timeout(Duration::from_millis(400), &mut wait)
            .await
            .is_err());
        assert_eq!(*tries.lock(), 2, "asked again after the refusal");
        barrier.passed(2);
        wait.await.unwrap();
        assert_eq!(ReadBarrier::number(&ReadBarrier::context(7)), Some(7));
        assert_eq!(ReadBarrier::number(&[0; 12]), None);
    }
}
