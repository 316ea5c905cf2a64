//! Read-only mode (ZooKeeper's `readonlymode.enabled`; Keel's
//! `read_only_when_partitioned`), without IO: when the node switches, which
//! requests a read-only node refuses, and the local sessions it gives
//! read-only clients. `lib.rs` (`watch_read_only`) drives the switch on the
//! server's clock, `conn.rs` serves the connections.
//!
//! ZooKeeper's behaviour, read from its sources (QuorumPeer's LOOKING case,
//! ReadOnlyZooKeeperServer, ReadOnlyRequestProcessor,
//! ZooKeeperServer.processConnectRequest):
//! - a peer that has found no leader for max(2 s, tickTime) starts a
//!   read-only server on its own copy of the tree; the moment an election
//!   ends it shuts it down, closing every connection;
//! - a read-only server refuses clients that did not set the readOnly flag
//!   of their ConnectRequest, and refuses to renew a global session; a
//!   read-only client gets a local session (one that never reaches the
//!   log), and its ConnectResponse has readOnly set;
//! - reads are served with their ACL checks; sync, every write, reconfig
//!   and a global session's create or close are answered NotReadOnly;
//! - `isro` answers `ro`, srvr's Mode and mntr's zk_server_state
//!   `read-only`.
//!
//! Keel switches when no leader has been known for the same grace period,
//! and switches back once a leader is known AND the node has applied
//! everything committed (until then its read-only clients keep reading
//! the state they were reading; a ZooKeeper peer closes them as soon as
//! the election ends and serves nothing until it has synced).

use keel_jute::opcode;
use keel_session::SessionTracker;

/// ZooKeeper's lower bound on the wait before a leaderless peer turns
/// read-only (QuorumPeer: `Math.max(2000, tickTime)`).
pub const READ_ONLY_GRACE_MIN_MS: u64 = 2_000;
/// Local sessions alive at once on one node (they outlive their
/// connection until they expire); a handshake beyond it is closed.
pub const LOCAL_SESSIONS_MAX: usize = crate::config::CLIENT_CONNECTIONS_MAX;
/// Mixed into local sessions' passwords instead of the global sessions'
/// secret: a local session's credentials never resume a global session.
pub const LOCAL_SESSION_SECRET: u64 = crate::node::SESSION_SECRET ^ 0x726f_2d6c_6f63_616c;

/// How long a node waits without a leader before it turns read-only.
pub fn grace_ms(tick_time_ms: u32) -> u64 {
    READ_ONLY_GRACE_MIN_MS.max(u64::from(tick_time_ms))
}

/// Requests a read-only node answers NotReadOnly (-119): ZooKeeper's
/// ReadOnlyRequestProcessor list, plus ClickHouse Keeper's two writes.
/// closeSession is not here: a local session closes (a read-only
/// connection never holds a global one).
pub fn refused_when_read_only(op_code: i32) -> bool {
    matches!(
        op_code,
        opcode::SYNC
            | opcode::CREATE
            | opcode::CREATE2
            | opcode::CREATE_TTL
            | opcode::CREATE_CONTAINER
            | opcode::DELETE
            | opcode::DELETE_CONTAINER
            | opcode::SET_DATA
            | opcode::RECONFIG
            | opcode::SET_ACL
            | opcode::MULTI
            | opcode::CHECK
            | opcode::CREATE_IF_NOT_EXISTS
            | opcode::REMOVE_RECURSIVE
    )
}

/// Which clients a node serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The usual: global sessions through the log.
    ReadWrite,
    /// Cut off from a quorum: read-only clients on local sessions.
    ReadOnly,
}

/// What the node sees of its cluster at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// Raft names a leader (this node or another).
    pub leader_known: bool,
    /// A leader is known and this node applied everything committed.
    pub caught_up: bool,
    /// The node applied what its own log had committed at start (until
    /// then its tree is older than what it served before it stopped).
    pub loaded: bool,
}

/// What a step decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Stay,
    /// Close the global sessions' connections; serve read-only clients.
    EnterReadOnly,
    /// Close the read-only connections; serve global sessions again.
    LeaveReadOnly,
}

/// The switch between the two modes, on a logical clock.
#[derive(Debug)]
pub struct ModeSwitch {
    grace_ms: u64,
    mode: Mode,
    /// Since when no leader has been known (read-write mode only).
    leaderless_since_ms: Option<u64>,
}

impl ModeSwitch {
    pub fn new(grace_ms: u64) -> ModeSwitch {
        assert!(grace_ms > 0);
        ModeSwitch {
            grace_ms,
            mode: Mode::ReadWrite,
            leaderless_since_ms: None,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// One look at the cluster at `now_ms`.
    pub fn step(&mut self, now_ms: u64, observed: Observed) -> Transition {
        assert!(
            !observed.caught_up || observed.leader_known,
            "caught up means a leader is known"
        );
        match self.mode {
            Mode::ReadWrite if observed.leader_known => {
                self.leaderless_since_ms = None;
                Transition::Stay
            }
            Mode::ReadWrite => {
                let since_ms = *self.leaderless_since_ms.get_or_insert(now_ms);
                if !observed.loaded || now_ms.saturating_sub(since_ms) < self.grace_ms {
                    return Transition::Stay;
                }
                self.mode = Mode::ReadOnly;
                self.leaderless_since_ms = None;
                Transition::EnterReadOnly
            }
            Mode::ReadOnly if observed.caught_up => {
                self.mode = Mode::ReadWrite;
                Transition::LeaveReadOnly
            }
            Mode::ReadOnly => Transition::Stay,
        }
    }
}

/// A read-only node's local sessions: ids of their own space
/// (`keel_session::initial_local_session_id`, never a global one's),
/// deadlines in a tracker of their own; nothing of them reaches the log.
/// They live until they expire or close, or the node leaves read-only
/// mode; a client may resume one on this node meanwhile.
pub struct LocalSessions {
    next_id: i64,
    tick_ms: u64,
    tracker: SessionTracker,
}

impl LocalSessions {
    /// `wall_ms`: the wall clock, so a restarted node starts elsewhere in
    /// the id space.
    pub fn new(server_id: u8, tick_ms: u64, wall_ms: u64) -> LocalSessions {
        LocalSessions {
            next_id: keel_session::initial_local_session_id(server_id, wall_ms),
            tick_ms,
            tracker: SessionTracker::new(tick_ms),
        }
    }

    /// A new local session, or None with LOCAL_SESSIONS_MAX alive.
    pub fn open(&mut self, timeout_ms: u32, now_ms: u64) -> Option<i64> {
        if self.tracker.len() >= LOCAL_SESSIONS_MAX {
            return None;
        }
        let session_id = self.next_id;
        self.next_id += 1;
        assert!(keel_session::is_local_session_id(session_id));
        self.tracker.add(session_id, timeout_ms, now_ms);
        Some(session_id)
    }

    /// Resumes a local session if it lives and `password` is its own.
    pub fn resume(&mut self, session_id: i64, password: &[u8], now_ms: u64) -> bool {
        let expected = keel_session::session_password(session_id, LOCAL_SESSION_SECRET);
        password == expected && self.tracker.touch(session_id, now_ms)
    }

    /// Activity on a session: its deadline moves. False if it is gone.
    pub fn touch(&mut self, session_id: i64, now_ms: u64) -> bool {
        self.tracker.touch(session_id, now_ms)
    }

    /// The client closed it. False if it was gone.
    pub fn close(&mut self, session_id: i64) -> bool {
        self.tracker.remove(session_id)
    }

    /// Sessions past their deadline, forgotten now.
    pub fn expire(&mut self, now_ms: u64) -> Vec<i64> {
        let expired = self.tracker.expired(now_ms);
        for session_id in &expired {
            assert!(self.tracker.remove(*session_id));
        }
        expired
    }

    /// Forgets every session (the node leaves read-only mode); their ids
    /// are never issued again by this process.
    pub fn clear(&mut self) -> usize {
        let count = self.tracker.len();
        self.tracker = SessionTracker::new(self.tick_ms);
        count
    }

    pub fn len(&self) -> usize {
        self.tracker.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tracker.is_empty()
    }
}

/// A local session's password (the ConnectResponse's).
pub fn local_session_password(session_id: i64) -> [u8; keel_session::SESSION_PASSWORD_BYTES] {
    assert!(keel_session::is_local_session_id(session_id));
    keel_session::session_password(session_id, LOCAL_SESSION_SECRET)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE_MS: u64 = 2_000;

    fn seen(leader_known: bool, caught_up: bool) -> Observed {
        Observed {
            leader_known,
            caught_up,
            loaded: true,
        }
    }

    #[test]
    fn the_grace_period_is_two_seconds_or_a_tick() {
        assert_eq!(grace_ms(500), 2_000);
        assert_eq!(grace_ms(2_000), 2_000);
        assert_eq!(grace_ms(3_000), 3_000);
    }

    #[test]
    fn a_node_turns_read_only_after_the_grace_period_without_a_leader() {
        let mut switch = ModeSwitch::new(GRACE_MS);
        assert_eq!(switch.step(0, seen(true, true)), Transition::Stay);
        assert_eq!(switch.step(100, seen(false, false)), Transition::Stay);
        assert_eq!(switch.step(2_099, seen(false, false)), Transition::Stay);
        assert_eq!(
            switch.step(2_100, seen(false, false)),
            Transition::EnterReadOnly
        );
        assert_eq!(switch.mode(), Mode::ReadOnly);
        assert_eq!(switch.step(9_000, seen(false, false)), Transition::Stay);
    }

    #[test]
    fn a_leader_seen_within_the_grace_period_starts_it_again() {
        let mut switch = ModeSwitch::new(GRACE_MS);
        switch.step(0, seen(false, false));
        switch.step(1_900, seen(true, false));
        assert_eq!(switch.step(2_000, seen(false, false)), Transition::Stay);
        assert_eq!(switch.step(3_999, seen(false, false)), Transition::Stay);
        assert_eq!(
            switch.step(4_000, seen(false, false)),
            Transition::EnterReadOnly
        );
    }

    #[test]
    fn a_node_still_replaying_its_own_log_does_not_turn_read_only() {
        let mut switch = ModeSwitch::new(GRACE_MS);
        let loading = Observed {
            leader_known: false,
            caught_up: false,
            loaded: false,
        };
        switch.step(0, loading);
        assert_eq!(switch.step(10_000, loading), Transition::Stay);
        assert_eq!(
            switch.step(10_001, seen(false, false)),
            Transition::EnterReadOnly,
            "the grace period counted from the first leaderless look"
        );
    }

    #[test]
    fn read_only_ends_once_a_leader_is_known_and_the_node_caught_up() {
        let mut switch = ModeSwitch::new(GRACE_MS);
        switch.step(0, seen(false, false));
        switch.step(GRACE_MS, seen(false, false));
        assert_eq!(switch.mode(), Mode::ReadOnly);
        assert_eq!(
            switch.step(5_000, seen(true, false)),
            Transition::Stay,
            "a leader, but this node has not applied what it committed"
        );
        assert_eq!(
            switch.step(5_100, seen(true, true)),
            Transition::LeaveReadOnly
        );
        assert_eq!(switch.mode(), Mode::ReadWrite);
        // A later loss waits a whole grace period again.
        assert_eq!(switch.step(6_000, seen(false, false)), Transition::Stay);
        assert_eq!(switch.step(7_999, seen(false, false)), Transition::Stay);
        assert_eq!(
            switch.step(8_000, seen(false, false)),
            Transition::EnterReadOnly
        );
    }

    #[test]
    fn writes_sync_and_reconfig_are_refused_reads_are_not() {
        for op in [
            opcode::SYNC,
            opcode::CREATE,
            opcode::CREATE2,
            opcode::CREATE_TTL,
            opcode::CREATE_CONTAINER,
            opcode::DELETE,
            opcode::DELETE_CONTAINER,
            opcode::SET_DATA,
            opcode::RECONFIG,
            opcode::SET_ACL,
            opcode::MULTI,
            opcode::CHECK,
            opcode::CREATE_IF_NOT_EXISTS,
            opcode::REMOVE_RECURSIVE,
        ] {
            assert!(refused_when_read_only(op), "{op}");
        }
        for op in [
            opcode::EXISTS,
            opcode::GET_DATA,
            opcode::GET_ACL,
            opcode::GET_CHILDREN,
            opcode::GET_CHILDREN2,
            opcode::MULTI_READ,
            opcode::PING,
            opcode::AUTH,
            opcode::SET_WATCHES,
            opcode::SET_WATCHES2,
            opcode::ADD_WATCH,
            opcode::REMOVE_WATCHES,
            opcode::CHECK_WATCHES,
            opcode::GET_EPHEMERALS,
            opcode::GET_ALL_CHILDREN_NUMBER,
            opcode::WHO_AM_I,
            opcode::CLOSE_SESSION,
            opcode::FILTERED_LIST,
            opcode::CHECK_NOT_EXISTS,
        ] {
            assert!(!refused_when_read_only(op), "{op}");
        }
    }

    #[test]
    fn local_sessions_live_expire_resume_and_close_on_their_own() {
        let mut local = LocalSessions::new(3, 100, 1_000);
        let a = local.open(1_000, 0).expect("room");
        let b = local.open(5_000, 0).expect("room");
        assert_ne!(a, b);
        assert!(keel_session::is_local_session_id(a));
        assert_eq!((a as u64) >> 48, 3, "the server id");
        let password = local_session_password(a);
        assert!(!local.resume(a, &[0; 16], 500), "a wrong password");
        let global = keel_session::session_password(a, crate::node::SESSION_SECRET);
        assert!(
            !local.resume(a, &global, 500),
            "a global session's password"
        );
        assert!(local.resume(a, &password, 500));
        assert_eq!(local.expire(1_500), Vec::<i64>::new());
        assert_eq!(local.expire(1_600), vec![a], "1,000 ms after its resume");
        assert!(!local.resume(a, &password, 1_700), "an expired session");
        assert!(local.touch(b, 1_700));
        assert!(local.close(b));
        assert!(!local.close(b));
        assert!(local.is_empty());
        local.open(1_000, 2_000).expect("room");
        assert_eq!(local.clear(), 1);
        assert_eq!(local.len(), 0);
        let c = local.open(1_000, 2_000).expect("room");
        assert!(c > b, "ids are never reissued");
    }
}
