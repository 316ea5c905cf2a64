//! A session's request order, without IO: which request may run now, which
//! waits, and which reply is due next. The network shell (`conn.rs`) and
//! the simulator both drive this one type.
//!
//! ZooKeeper's promise: a session's requests take effect, and are answered,
//! in the order it sent them. Keel keeps that while pipelining writes:
//! - a write (a request that goes through the log) starts at once while
//!   only writes fly ahead of it: the log keeps their order;
//! - anything else (a read, auth, a request that does not decode, whose
//!   error reply would otherwise overtake the replies in flight, and
//!   `sync`) waits until nothing of the session flies, and what arrives
//!   after it waits behind it;
//! - `sync` flies too (a ReadIndex barrier, answered outside the log's
//!   order): while it flies nothing else starts, or a write sent after it
//!   could be answered before it, and a write in flight before it could be
//!   answered after it (the simulator found the second);
//! - replies come back from the apply step in proposal order, so the
//!   oldest request in flight is always the one answered next.
//!
//! The queue is `InFlight* Waiting*`: the first `in_flight` slots fly.

use std::collections::VecDeque;

use keel_jute::{opcode, Request};
use keel_tree::Event;

use crate::node::Outbound;

/// Requests a connection may have queued or in flight before the server
/// stops reading its socket (backpressure, not an error).
pub const PENDING_REQUESTS_MAX: usize = 10_000;

/// How a request may be scheduled (`Lane::of`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// A well-formed write: may join the writes in flight.
    Pipelined,
    /// Anything else: runs only when nothing of the session flies; if it
    /// flies itself (`sync`), nothing else starts until it is answered.
    Alone,
}

impl Lane {
    /// A write may join the writes in flight if it decodes (or its error
    /// reply would overtake their replies); sync flies alone (its
    /// ReadIndex is answered outside the log's order), and so does
    /// everything else.
    pub fn of(op_code: i32, body: &[u8]) -> Lane {
        let pipelinable = is_write_op(op_code)
            && op_code != opcode::SYNC
            && Request::decode(op_code, body).is_ok();
        if pipelinable {
            Lane::Pipelined
        } else {
            Lane::Alone
        }
    }
}

/// Requests that go through the log (in session order with the rest).
pub fn is_write_op(op_code: i32) -> bool {
    matches!(
        op_code,
        opcode::CREATE
            | opcode::CREATE2
            | opcode::CREATE_CONTAINER
            | opcode::CREATE_TTL
            | opcode::DELETE
            | opcode::DELETE_CONTAINER
            | opcode::SET_DATA
            | opcode::SET_ACL
            | opcode::CHECK
            | opcode::MULTI
            | opcode::SYNC
            | opcode::CLOSE_SESSION
            | opcode::CREATE_IF_NOT_EXISTS
            | opcode::REMOVE_RECURSIVE
    )
}

/// The answer to a reply from the apply step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completed {
    /// The oldest request in flight is done; it started at `since_us`.
    /// `answer`: the reply goes to the client (ZooKeeper 3.8.0 never
    /// answers a check sent outside a multi: serializing its null Stat
    /// fails; Keel matches that). After closeSession's reply the queue is
    /// `closed`: the connection closes.
    Done { since_us: u64, answer: bool },
    /// No request with this xid flies on this connection: a request of an
    /// earlier connection of the same session. Drop the reply.
    Foreign,
}

/// A reply came back for a request in flight that is not the oldest: the
/// apply step broke the session's order. The connection must close.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("reply to xid {got} while xid {expected} is the oldest in flight")]
pub struct OutOfOrder {
    pub expected: i32,
    pub got: i32,
}

enum Slot<R> {
    InFlight { xid: i32, since_us: u64 },
    Waiting { lane: Lane, request: R },
}

/// One connection's requests not yet answered, in arrival order.
pub struct RequestFifo<R> {
    slots: VecDeque<Slot<R>>,
    in_flight: usize,
    /// Set by `arrive`/`next_ready` to the lane of the request they hand
    /// out; cleared by `started` or the next call (it was answered at once).
    handed_out: Option<Lane>,
    /// An `Alone` request flies (then it is the only one).
    alone_in_flight: bool,
    /// closeSession was answered: nothing more runs or arrives.
    closed: bool,
    capacity: usize,
}

impl<R> RequestFifo<R> {
    pub fn new(capacity: usize) -> RequestFifo<R> {
        assert!(capacity > 0);
        RequestFifo {
            slots: VecDeque::new(),
            in_flight: 0,
            handed_out: None,
            alone_in_flight: false,
            closed: false,
            capacity,
        }
    }

    /// False once `capacity` requests are queued or in flight (stop reading
    /// the client until replies drain some), or once the session closed.
    pub fn accepting(&self) -> bool {
        self.slots.len() < self.capacity && !self.closed
    }

    /// closeSession was answered: the connection closes (ZooKeeper closes
    /// it after the reply; nothing queued behind it runs).
    pub fn closed(&self) -> bool {
        self.closed
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// A request arrives. Returns it back if its turn is now (the caller
    /// runs it and, if it went to the log, calls `started`); otherwise it
    /// waits in the queue and `next_ready` hands it out later.
    pub fn arrive(&mut self, request: R, lane: Lane) -> Option<R> {
        assert!(
            self.accepting(),
            "arrive past capacity: check accepting() first"
        );
        self.handed_out = None;
        let waiting = self.slots.len() > self.in_flight;
        if waiting || !self.may_start(lane) {
            self.slots.push_back(Slot::Waiting { lane, request });
            return None;
        }
        self.handed_out = Some(lane);
        Some(request)
    }

    /// Whether a request of `lane` may start with what flies now.
    fn may_start(&self, lane: Lane) -> bool {
        self.in_flight == 0 || (lane == Lane::Pipelined && !self.alone_in_flight)
    }

    /// The request just handed out went to the log (a write or a sync):
    /// its reply comes back through `complete`, after those in flight
    /// before it and before any waiting one.
    pub fn started(&mut self, xid: i32, now_us: u64) {
        let Some(lane) = self.handed_out.take() else {
            panic!("started without a request handed out");
        };
        assert!(self.slots.len() < self.capacity);
        assert!(!self.alone_in_flight);
        if lane == Lane::Alone {
            assert_eq!(
                self.in_flight, 0,
                "an Alone request starts only when nothing flies"
            );
            self.alone_in_flight = true;
        }
        self.slots.insert(
            self.in_flight,
            Slot::InFlight {
                xid,
                since_us: now_us,
            },
        );
        self.in_flight += 1;
        self.check();
    }

    /// A reply for `xid` (a request of `op_code`) came from the apply step.
    pub fn complete(&mut self, xid: i32, op_code: i32) -> Result<Completed, OutOfOrder> {
        self.handed_out = None;
        let flying = self
            .slots
            .iter()
            .take(self.in_flight)
            .any(|slot| matches!(slot, Slot::InFlight { xid: x, .. } if *x == xid));
        if !flying {
            return Ok(Completed::Foreign);
        }
        match self.slots.front() {
            Some(Slot::InFlight {
                xid: expected,
                since_us,
            }) => {
                if *expected != xid {
                    return Err(OutOfOrder {
                        expected: *expected,
                        got: xid,
                    });
                }
                let since_us = *since_us;
                self.slots.pop_front();
                self.in_flight -= 1;
                if self.alone_in_flight {
                    assert_eq!(self.in_flight, 0, "an Alone request flies by itself");
                    self.alone_in_flight = false;
                }
                self.closed |= op_code == opcode::CLOSE_SESSION;
                self.check();
                Ok(Completed::Done {
                    since_us,
                    answer: op_code != opcode::CHECK,
                })
            }
            _ => unreachable!("a flying xid was found, so the front flies"),
        }
    }

    /// The next waiting request whose turn has come (call until None after
    /// every `complete` and after running a handed-out request).
    pub fn next_ready(&mut self) -> Option<R> {
        self.handed_out = None;
        if self.closed {
            return None;
        }
        let lane = match self.slots.get(self.in_flight) {
            Some(Slot::Waiting { lane, .. }) => *lane,
            Some(Slot::InFlight { .. }) => unreachable!("slots past in_flight wait"),
            None => return None,
        };
        if !self.may_start(lane) {
            return None;
        }
        match self.slots.remove(self.in_flight) {
            Some(Slot::Waiting { request, .. }) => {
                self.handed_out = Some(lane);
                Some(request)
            }
            _ => unreachable!("checked above"),
        }
    }

    /// The queue's shape: `InFlight* Waiting*`, within capacity.
    fn check(&self) {
        assert!(self.in_flight <= self.slots.len());
        assert!(self.slots.len() <= self.capacity);
        // O(len): checked in debug builds only (10,000 slots per request).
        debug_assert!(self
            .slots
            .iter()
            .enumerate()
            .all(|(at, slot)| matches!(slot, Slot::InFlight { .. }) == (at < self.in_flight)));
    }
}

/// Messages the apply side queued for a connection that were taken off
/// its queue early, while a read ran, because events at or before the
/// read's zxid must reach the client before the read's reply (ZooKeeper
/// never shows a client a state newer than a watch it has not heard
/// fire). The rest wait here, in order, and are handled next.
#[derive(Default)]
pub struct Stash {
    messages: VecDeque<Outbound>,
}

impl Stash {
    pub fn push(&mut self, message: Outbound) {
        self.messages.push_back(message);
    }

    pub fn pop(&mut self) -> Option<Outbound> {
        self.messages.pop_front()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The events to send before a read's reply at `zxid`
    /// (`events_up_to`), or None when the apply side has closed the
    /// connection meanwhile (a Close is queued): then the reply must not
    /// go out. The read saw the tree after the Close was queued; sent
    /// ahead of the Close, its zxid would pass changes whose events the
    /// close drops, and the client's setWatches, which starts from the
    /// newest zxid it saw, would never fire them (a node removed from the
    /// configuration, or one that installed a snapshot, while a read
    /// waited behind a write). The client sees the connection end with the
    /// read unanswered (ConnectionLoss), as with any close.
    pub fn events_before_reply(&mut self, zxid: i64) -> Option<Vec<(i64, Event)>> {
        let closed = self
            .messages
            .iter()
            .any(|message| matches!(message, Outbound::Close { .. }));
        if closed {
            return None;
        }
        Some(self.events_up_to(zxid))
    }

    /// Takes the events (with their zxids) at the front with zxid <=
    /// `zxid`, in order, stopping at the first message that is not one.
    pub fn events_up_to(&mut self, zxid: i64) -> Vec<(i64, Event)> {
        let mut events = Vec::new();
        while let Some(Outbound::Event {
            zxid: event_zxid, ..
        }) = self.messages.front()
        {
            if *event_zxid > zxid {
                break;
            }
            if let Some(Outbound::Event { zxid, event }) = self.messages.pop_front() {
                events.push((zxid, event));
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Kind {
        Write,
        Read,
        Malformed,
        /// Flies, but is answered outside the log's order (ReadIndex).
        Sync,
    }

    fn lane(kind: Kind) -> Lane {
        match kind {
            Kind::Write => Lane::Pipelined,
            Kind::Read | Kind::Malformed | Kind::Sync => Lane::Alone,
        }
    }

    /// A server around the FIFO: writes go to a log answered in order,
    /// everything else is answered at once. Records the answer order and,
    /// for every answer, whether an earlier request was still unanswered.
    struct Server {
        fifo: RequestFifo<(i32, Kind)>,
        log: VecDeque<i32>,
        /// Syncs in flight: answered whenever the barrier says so.
        barriers: VecDeque<i32>,
        answered: Vec<i32>,
        clock_us: u64,
    }

    impl Server {
        fn new(capacity: usize) -> Server {
            Server {
                fifo: RequestFifo::new(capacity),
                log: VecDeque::new(),
                barriers: VecDeque::new(),
                answered: Vec::new(),
                clock_us: 0,
            }
        }

        fn run(&mut self, (xid, kind): (i32, Kind)) {
            self.clock_us += 1;
            if kind == Kind::Write {
                self.fifo.started(xid, self.clock_us);
                self.log.push_back(xid);
            } else if kind == Kind::Sync {
                self.fifo.started(xid, self.clock_us);
                self.barriers.push_back(xid);
            } else {
                self.answer(xid);
            }
        }

        fn answer(&mut self, xid: i32) {
            if let Some(last) = self.answered.last() {
                assert!(*last < xid, "xid {xid} answered after {last}");
            }
            assert_eq!(xid as usize, self.answered.len() + 1, "xid {xid} overtook");
            self.answered.push(xid);
        }

        fn send(&mut self, xid: i32, kind: Kind) -> bool {
            if !self.fifo.accepting() {
                return false;
            }
            if let Some(request) = self.fifo.arrive((xid, kind), lane(kind)) {
                self.run(request);
                self.drain();
            }
            true
        }

        fn apply_one(&mut self) -> bool {
            let Some(xid) = self.log.pop_front() else {
                return false;
            };
            self.complete(xid);
            true
        }

        /// A ReadIndex answer: it may come before writes proposed earlier
        /// are applied (they may not be in the log yet).
        fn barrier_one(&mut self) -> bool {
            let Some(xid) = self.barriers.pop_front() else {
                return false;
            };
            self.complete(xid);
            true
        }

        fn complete(&mut self, xid: i32) {
            assert!(matches!(
                self.fifo.complete(xid, opcode::CREATE),
                Ok(Completed::Done { answer: true, .. })
            ));
            self.answer(xid);
            self.drain();
        }

        fn drain(&mut self) {
            while let Some(request) = self.fifo.next_ready() {
                self.run(request);
            }
        }
    }

    #[test]
    fn writes_pipeline_and_a_read_waits_for_them() {
        let mut server = Server::new(16);
        assert!(server.send(1, Kind::Write));
        assert!(server.send(2, Kind::Write));
        assert_eq!(server.fifo.in_flight(), 2, "writes fly together");
        assert!(server.send(3, Kind::Read));
        assert!(server.send(4, Kind::Write));
        assert_eq!(
            server.fifo.in_flight(),
            2,
            "the write behind a read waits too"
        );
        assert!(server.answered.is_empty());
        server.apply_one();
        assert_eq!(server.answered, [1]);
        server.apply_one();
        assert_eq!(
            server.answered,
            [1, 2, 3],
            "the read runs once its writes are done"
        );
        assert_eq!(server.fifo.in_flight(), 1, "then the write behind it flies");
        server.apply_one();
        assert_eq!(server.answered, [1, 2, 3, 4]);
        assert!(server.fifo.is_empty());
    }

    #[test]
    fn no_reply_goes_out_once_the_stash_holds_a_close() {
        use keel_jute::EventType;
        let event = |zxid: i64| Outbound::Event {
            zxid,
            event: Event {
                path: "/a".into(),
                event_type: EventType::NodeCreated,
            },
        };
        let mut stash = Stash::default();
        stash.push(event(3));
        assert_eq!(stash.events_before_reply(5).map(|e| e.len()), Some(1));
        // A node removed from the configuration: its Close, then an event
        // of an entry applied after it, then a read at that entry's zxid.
        stash.push(Outbound::Close {
            reason: crate::node::CloseReason::Removed,
        });
        stash.push(event(9));
        assert!(stash.events_before_reply(9).is_none());
        assert!(stash.events_before_reply(1).is_none(), "whatever the zxid");
        assert!(
            matches!(stash.pop(), Some(Outbound::Close { .. })),
            "the stash is left as it was: the Close goes out next"
        );
        assert_eq!(stash.events_before_reply(9).map(|e| e.len()), Some(1));
        assert!(stash.is_empty());
    }

    #[test]
    fn the_stash_gives_events_up_to_a_zxid_and_keeps_the_rest_in_order() {
        use keel_jute::EventType;
        let event = |zxid: i64, path: &str| Outbound::Event {
            zxid,
            event: Event {
                path: path.into(),
                event_type: EventType::NodeDataChanged,
            },
        };
        let mut stash = Stash::default();
        stash.push(event(5, "/a"));
        stash.push(event(7, "/b"));
        stash.push(Outbound::Reply {
            xid: 1,
            zxid: 8,
            op_code: 5,
            result: Err(keel_jute::ErrorCode::NoNode),
        });
        stash.push(event(8, "/c"));
        let paths =
            |events: Vec<(i64, Event)>| events.into_iter().map(|(_, e)| e.path).collect::<Vec<_>>();
        let first = stash.events_up_to(6);
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].0, first[0].1.path.as_str()),
            (5, "/a"),
            "with its own zxid"
        );
        assert_eq!(paths(stash.events_up_to(100)), ["/b"], "stops at the reply");
        assert!(matches!(stash.pop(), Some(Outbound::Reply { xid: 1, .. })));
        assert_eq!(paths(stash.events_up_to(8)), ["/c"]);
        assert!(stash.is_empty());
    }

    #[test]
    fn a_sync_flies_alone() {
        let mut server = Server::new(16);
        server.send(1, Kind::Write);
        server.send(2, Kind::Sync);
        server.send(3, Kind::Write);
        assert_eq!(server.fifo.in_flight(), 1, "the sync waits for the write");
        assert!(!server.barrier_one(), "so its barrier is not asked yet");
        server.apply_one();
        assert_eq!(
            server.fifo.in_flight(),
            1,
            "the sync flies, the write behind it waits"
        );
        assert!(server.barrier_one());
        assert_eq!(server.answered, [1, 2]);
        server.apply_one();
        assert_eq!(server.answered, [1, 2, 3]);
    }

    #[test]
    fn a_malformed_write_does_not_overtake_the_writes_in_flight() {
        let mut server = Server::new(16);
        server.send(1, Kind::Write);
        server.send(2, Kind::Malformed);
        assert!(server.answered.is_empty(), "its error reply waits");
        server.apply_one();
        assert_eq!(server.answered, [1, 2]);
    }

    #[test]
    fn a_reply_of_an_earlier_connection_is_foreign_and_changes_nothing() {
        let mut fifo: RequestFifo<i32> = RequestFifo::new(4);
        assert_eq!(fifo.complete(7, opcode::CREATE), Ok(Completed::Foreign));
        assert_eq!(fifo.arrive(1, Lane::Pipelined), Some(1));
        fifo.started(1, 10);
        assert_eq!(fifo.complete(9, opcode::CREATE), Ok(Completed::Foreign));
        assert_eq!(fifo.in_flight(), 1);
        let done = Completed::Done {
            since_us: 10,
            answer: true,
        };
        assert_eq!(fifo.complete(1, opcode::CREATE), Ok(done));
    }

    #[test]
    fn after_close_sessions_reply_nothing_queued_runs_and_nothing_arrives() {
        let mut fifo: RequestFifo<i32> = RequestFifo::new(4);
        for xid in [1, 2] {
            assert_eq!(fifo.arrive(xid, Lane::Pipelined), Some(xid));
            fifo.started(xid, 0);
        }
        assert_eq!(fifo.arrive(3, Lane::Alone), None);
        assert!(matches!(
            fifo.complete(1, opcode::CLOSE_SESSION),
            Ok(Completed::Done { answer: true, .. })
        ));
        assert!(fifo.closed());
        assert!(!fifo.accepting());
        assert_eq!(fifo.next_ready(), None, "the read behind it never runs");
        // A write pipelined behind closeSession still completes, and the
        // queue stays closed.
        assert!(fifo.complete(2, opcode::CREATE).is_ok());
        assert!(fifo.closed());
    }

    #[test]
    fn a_check_outside_a_multi_is_not_answered_as_zookeeper_3_8_does() {
        let mut fifo: RequestFifo<i32> = RequestFifo::new(4);
        assert_eq!(fifo.arrive(1, Lane::Pipelined), Some(1));
        fifo.started(1, 0);
        assert!(matches!(
            fifo.complete(1, opcode::CHECK),
            Ok(Completed::Done { answer: false, .. })
        ));
    }

    #[test]
    fn well_formed_writes_pipeline_and_sync_reads_and_garbage_fly_alone() {
        let mut body = Vec::new();
        Request::Delete(keel_jute::DeleteRequest {
            path: "/a".into(),
            version: -1,
        })
        .encode(&mut body);
        assert_eq!(Lane::of(opcode::DELETE, &body), Lane::Pipelined);
        assert_eq!(Lane::of(opcode::DELETE, &body[..3]), Lane::Alone);
        assert_eq!(Lane::of(opcode::SYNC, b"\0\0\0\x01/"), Lane::Alone);
        assert_eq!(Lane::of(opcode::GET_DATA, &body), Lane::Alone);
        assert_eq!(Lane::of(opcode::AUTH, &[]), Lane::Alone);
    }

    #[test]
    fn a_reply_out_of_order_is_an_error() {
        let mut fifo: RequestFifo<i32> = RequestFifo::new(4);
        for xid in [1, 2] {
            assert_eq!(fifo.arrive(xid, Lane::Pipelined), Some(xid));
            fifo.started(xid, 0);
        }
        assert_eq!(
            fifo.complete(2, opcode::CREATE),
            Err(OutOfOrder {
                expected: 1,
                got: 2
            })
        );
        assert_eq!(fifo.in_flight(), 2, "nothing changed");
    }

    #[test]
    fn capacity_counts_waiting_and_flying_requests() {
        let mut server = Server::new(3);
        assert!(server.send(1, Kind::Write));
        assert!(server.send(2, Kind::Read));
        assert!(server.send(3, Kind::Write));
        assert!(!server.fifo.accepting());
        assert!(
            !server.send(4, Kind::Write),
            "the fourth is not read off the socket"
        );
        server.apply_one();
        assert!(server.fifo.accepting());
        assert!(server.send(4, Kind::Write));
    }

    #[test]
    #[should_panic(expected = "started without a request handed out")]
    fn starting_a_request_that_was_queued_is_a_bug() {
        let mut fifo: RequestFifo<i32> = RequestFifo::new(4);
        assert_eq!(fifo.arrive(1, Lane::Pipelined), Some(1));
        fifo.started(1, 0);
        assert_eq!(fifo.arrive(2, Lane::Alone), None);
        fifo.started(2, 0);
    }

    /// Random arrivals, applies and kinds: every request is answered in
    /// arrival order and nothing is lost (`Server::answer` asserts it).
    #[test]
    fn random_schedules_answer_in_arrival_order() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..500 {
            let capacity = 1 + (next() % 8) as usize;
            let mut server = Server::new(capacity);
            let mut xid = 0;
            for _ in 0..200 {
                match next() % 6 {
                    0 | 1 => {
                        server.apply_one();
                        continue;
                    }
                    2 => {
                        server.barrier_one();
                        continue;
                    }
                    _ => {}
                }
                let kind = match next() % 5 {
                    0 => Kind::Read,
                    1 => Kind::Malformed,
                    2 => Kind::Sync,
                    _ => Kind::Write,
                };
                if server.send(xid + 1, kind) {
                    xid += 1;
                }
            }
            while server.apply_one() || server.barrier_one() {}
            assert_eq!(
                server.answered.len(),
                xid as usize,
                "every request answered"
            );
            assert!(server.fifo.is_empty());
        }
    }
}
