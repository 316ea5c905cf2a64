//! Session expiry on a logical clock: ZooKeeper's `SessionTrackerImpl` over
//! its `ExpiryQueue`, without threads or a clock.

use std::collections::{BTreeMap, BTreeSet, HashMap};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Tracked in the bucket `deadline_ms`.
    Open { deadline_ms: u64 },
    /// Expired or being closed: no deadline, touches fail, never expired again.
    Closing,
}

#[derive(Clone, Copy, Debug)]
struct Session {
    timeout_ms: u32,
    state: State,
}

/// Tracks session deadlines in buckets keyed by expiration tick.
///
/// Like ZooKeeper's `ExpiryQueue`, a deadline is `now + timeout` rounded up to
/// the next multiple of `tick_ms` (strictly: a deadline already on a multiple
/// moves to the next one, as `roundToNextInterval` does). All sessions due in
/// the same tick share one bucket, so `expired` costs O(buckets due + sessions
/// expired), and a touch that lands in the same bucket changes nothing. A
/// session therefore lives between `timeout` and `timeout + tick` of silence.
///
/// Time only comes in through `now_ms` arguments, on any logical clock the
/// caller keeps consistent. Should it step back, touches never move a deadline
/// earlier.
pub struct SessionTracker {
    tick_ms: u64,
    sessions: HashMap<i64, Session>,
    /// Deadline → open sessions due then. Keys are multiples of `tick_ms`;
    /// empty buckets are removed; closing sessions are in no bucket.
    buckets: BTreeMap<u64, BTreeSet<i64>>,
}

impl SessionTracker {
    pub fn new(tick_ms: u64) -> Self {
        assert!(tick_ms > 0, "expiration tick must be positive");
        SessionTracker {
            tick_ms,
            sessions: HashMap::new(),
            buckets: BTreeMap::new(),
        }
    }

    /// Starts tracking a session that is due `timeout_ms` after `now_ms`.
    /// Adding a session twice is a caller bug.
    pub fn add(&mut self, session_id: i64, timeout_ms: u32, now_ms: u64) {
        let deadline_ms = self.deadline_ms(now_ms, timeout_ms);
        let state = State::Open { deadline_ms };
        let previous = self
            .sessions
            .insert(session_id, Session { timeout_ms, state });
        assert!(previous.is_none(), "session {session_id:#x} tracked twice");
        self.bucket_insert(deadline_ms, session_id);
    }

    /// Pushes an open session's deadline to `now_ms + timeout` (rounded).
    /// Returns false for unknown and closing sessions (ZooKeeper then answers
    /// SessionExpired / SessionMoved).
    pub fn touch(&mut self, session_id: i64, now_ms: u64) -> bool {
        let Some(session) = self.sessions.get(&session_id).copied() else {
            return false;
        };
        let State::Open { deadline_ms } = session.state else {
            return false;
        };
        let touched_ms = self.deadline_ms(now_ms, session.timeout_ms);
        if touched_ms > deadline_ms {
            self.reschedule(session_id, deadline_ms, touched_ms);
        }
        true
    }

    /// Forgets a session (its close was applied). Returns false if unknown.
    pub fn remove(&mut self, session_id: i64) -> bool {
        let Some(session) = self.sessions.remove(&session_id) else {
            return false;
        };
        if let State::Open { deadline_ms } = session.state {
            self.bucket_remove(deadline_ms, session_id);
        }
        true
    }

    /// Marks a session as closing (a close was requested or is being
    /// proposed): touches fail from now on and `expired` never returns it.
    /// Unknown sessions are ignored, as in ZooKeeper.
    pub fn set_closing(&mut self, session_id: i64) {
        let Some(session) = self.sessions.get_mut(&session_id) else {
            return;
        };
        if let State::Open { deadline_ms } = session.state {
            session.state = State::Closing;
            self.bucket_remove(deadline_ms, session_id);
        }
    }

    pub fn is_closing(&self, session_id: i64) -> bool {
        self.sessions
            .get(&session_id)
            .is_some_and(|session| session.state == State::Closing)
    }

    pub fn contains(&self, session_id: i64) -> bool {
        self.sessions.contains_key(&session_id)
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    pub fn timeout_ms(&self, session_id: i64) -> Option<u32> {
        self.sessions
            .get(&session_id)
            .map(|session| session.timeout_ms)
    }

    /// The deadline of an open session; None if unknown or closing.
    pub fn session_deadline_ms(&self, session_id: i64) -> Option<u64> {
        match self.sessions.get(&session_id)?.state {
            State::Open { deadline_ms } => Some(deadline_ms),
            State::Closing => None,
        }
    }

    /// Sessions whose deadline is <= `now_ms`, sorted. Each is marked closing,
    /// so it is returned once: the caller proposes its close, and `remove`s it
    /// when the close is applied.
    pub fn expired(&mut self, now_ms: u64) -> Vec<i64> {
        let mut expired = Vec::new();
        while let Some(bucket) = self.buckets.first_entry() {
            if *bucket.key() > now_ms {
                break;
            }
            let deadline_ms = *bucket.key();
            for session_id in bucket.remove() {
                let session = self.sessions.get_mut(&session_id).expect("bucketed");
                assert_eq!(session.state, State::Open { deadline_ms });
                session.state = State::Closing;
                expired.push(session_id);
            }
        }
        expired.sort_unstable();
        expired
    }

    /// After a leader change or a restart: every session, closing ones
    /// included, is open again with a full timeout from `now_ms` (rounded).
    ///
    /// ZooKeeper's new leader builds a fresh tracker from the committed
    /// sessions, so nothing stays closing across the change. That matters: a
    /// close proposed by the old leader may never commit, and a session left
    /// closing would never expire again (nor its ephemerals). If the close does
    /// commit, applying it removes the session anyway.
    pub fn renew_all(&mut self, now_ms: u64) {
        self.buckets.clear();
        let mut renewed = Vec::with_capacity(self.sessions.len());
        for (&session_id, session) in self.sessions.iter_mut() {
            let deadline_ms = deadline_ms(self.tick_ms, now_ms, session.timeout_ms);
            session.state = State::Open { deadline_ms };
            renewed.push((deadline_ms, session_id));
        }
        for (deadline_ms, session_id) in renewed {
            self.bucket_insert(deadline_ms, session_id);
        }
    }

    /// The earliest deadline of an open session: when `expired` next has work.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.buckets
            .first_key_value()
            .map(|(&deadline_ms, _)| deadline_ms)
    }

    /// Every session as (id, timeout_ms), sorted by id.
    pub fn sessions(&self) -> Vec<(i64, u32)> {
        let mut sessions: Vec<(i64, u32)> = self
            .sessions
            .iter()
            .map(|(&session_id, session)| (session_id, session.timeout_ms))
            .collect();
        sessions.sort_unstable();
        sessions
    }

    fn deadline_ms(&self, now_ms: u64, timeout_ms: u32) -> u64 {
        deadline_ms(self.tick_ms, now_ms, timeout_ms)
    }

    fn reschedule(&mut self, session_id: i64, from_ms: u64, to_ms: u64) {
        assert!(from_ms < to_ms);
        self.bucket_remove(from_ms, session_id);
        self.bucket_insert(to_ms, session_id);
        let session = self.sessions.get_mut(&session_id).expect("known session");
        assert_eq!(
            session.state,
            State::Open {
                deadline_ms: from_ms
            }
        );
        session.state = State::Open { deadline_ms: to_ms };
    }

    fn bucket_insert(&mut self, deadline_ms: u64, session_id: i64) {
        assert_eq!(deadline_ms % self.tick_ms, 0);
        let inserted = self
            .buckets
            .entry(deadline_ms)
            .or_default()
            .insert(session_id);
        assert!(inserted, "session {session_id:#x} bucketed twice");
    }

    fn bucket_remove(&mut self, deadline_ms: u64, session_id: i64) {
        let bucket = self
            .buckets
            .get_mut(&deadline_ms)
            .expect("bucket of an open session");
        assert!(
            bucket.remove(&session_id),
            "session {session_id:#x} missing from its bucket"
        );
        if bucket.is_empty() {
            self.buckets.remove(&deadline_ms);
        }
    }

    /// Checks that buckets and sessions agree. O(sessions); for tests.
    #[cfg(test)]
    pub(crate) fn assert_invariants(&self) {
        let mut bucketed = 0;
        for (&deadline_ms, bucket) in &self.buckets {
            assert_eq!(deadline_ms % self.tick_ms, 0);
            assert!(!bucket.is_empty());
            for session_id in bucket {
                let state = self.sessions[session_id].state;
                assert_eq!(state, State::Open { deadline_ms });
                bucketed += 1;
            }
        }
        let open = self
            .sessions
            .values()
            .filter(|session| session.state != State::Closing)
            .count();
        assert_eq!(bucketed, open);
    }
}

/// ZooKeeper's `ExpiryQueue.roundToNextInterval(now + timeout)`: the first
/// multiple of `tick_ms` strictly after `now_ms + timeout_ms`.
fn deadline_ms(tick_ms: u64, now_ms: u64, timeout_ms: u32) -> u64 {
    let due_ms = now_ms
        .checked_add(u64::from(timeout_ms))
        .expect("deadline overflows u64");
    (due_ms / tick_ms + 1)
        .checked_mul(tick_ms)
        .expect("deadline overflows u64")
}
