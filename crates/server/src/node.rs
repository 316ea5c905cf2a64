//! The server node without IO: the data tree, the watches, the session
//! tracker and the reply registry, the apply step that changes them, and
//! the local reads, session moves and expiry that read them. The network
//! (`conn.rs`, `lib.rs`) and the simulator (`crates/sim`) drive this same
//! code; neither keeps a copy of it.
//!
//! Ownership: the apply step (`NodeMachine`, on the Raft driver's thread)
//! owns the state and changes it under `NodeState`'s write lock. Everyone
//! else holds a `Node` handle and reads through it: its methods take the
//! state's read lock, and the watch table and reply registry inside it are
//! leaf locks that no method holds while taking another. The session
//! tracker is a leaf lock of its own, so a connection touching its session
//! never waits for an apply. No lock order to remember: every method takes
//! the state lock first, then at most one leaf at a time.
//!
//! Replies are routed by a registry keyed by session id: the route of a
//! session names the connection it is bound to, and a connection answers
//! only requests it sent (it matches the reply's xid with its own queue).
//! Only the node a request arrived at answers it (`Committed::origin`).

use std::collections::BTreeMap;
use std::sync::Arc;

use keel_consensus::{
    Committed, MachineError, Members, ReconfigError, SnapshotJob, SnapshotWriter, StateMachine,
};
use keel_jute::{opcode, AuthPacket, ErrorCode, Id, JuteError, Record, Request, Response};
use keel_session::SessionTracker;
use keel_tree::watch::{WatchKind, WatchManager};
use keel_tree::{Applied, DataTree, Event, Txn, TxnOp};
use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::profile::{self, Held, Lock, Op};
use crate::ttl_clock::TtlClock;

/// xid of transactions the server makes itself (expiry, reaper): no reply.
pub const INTERNAL_XID: i32 = i32::MIN;
/// Secret mixed into session passwords; equal on every node of a cluster.
pub const SESSION_SECRET: u64 = 0x6b65_656c_2d7a_6b21;
/// Bound on a sync context's path (a ZooKeeper path is at most jute's
/// buffer, far below this; a longer context is not ours).
pub const SYNC_CONTEXT_PATH_MAX_BYTES: usize = 1 << 20;

/// Why the node closes a connection (the connection logs it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CloseReason {
    #[error("session closed")]
    SessionClosed,
    #[error("another connection resumed this session")]
    Resumed,
    #[error("session moved to another connection")]
    Moved,
    #[error("state replaced by a snapshot from the leader")]
    SnapshotInstalled,
    #[error("not the leader: proposal dropped")]
    ProposalDropped,
    #[error("too many syncs pending")]
    SyncRefused,
    #[error("no leader: the node turned read-only")]
    ReadOnly,
    #[error("a leader is back: read-only session closed")]
    ReadWrite,
    #[error("local session expired")]
    LocalSessionExpired,
    #[error("reconfig lost (leader change or timeout)")]
    ReconfigLost,
    #[error("this server was removed from the cluster's configuration")]
    Removed,
}

/// What the node sends to one connection.
#[derive(Debug, Clone)]
pub enum Outbound {
    /// The result of this session's write (or sync), in log order.
    Reply {
        xid: i32,
        zxid: i64,
        op_code: i32,
        result: Result<Response, ErrorCode>,
    },
    /// A watch fired at `zxid` (used for ordering; the wire carries -1).
    Event { zxid: i64, event: Event },
    /// The session ended or moved: close the connection after flushing.
    Close { reason: CloseReason },
}

impl Outbound {
    pub fn zxid(&self) -> i64 {
        match self {
            Outbound::Reply { zxid, .. } | Outbound::Event { zxid, .. } => *zxid,
            Outbound::Close { .. } => i64::MAX,
        }
    }
}

/// A connection's mailbox as the node sees it. `send` never waits: the
/// apply step calls it under the state's write lock.
pub trait Outlet: Send + Sync + 'static {
    fn send(&self, message: Outbound);
}

/// Where a session's connection listens.
pub struct Route<O> {
    pub connection_id: u64,
    pub outlet: O,
}

/// Milliseconds on a monotonic clock (session deadlines).
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// What the apply step owns; reached only through `Node`'s methods.
struct NodeState<O> {
    tree: DataTree,
    /// Leaf lock: reads register watches under the state's read lock.
    watches: Mutex<WatchManager>,
    /// Leaf lock: the reply registry. A BTreeMap so that every walk over
    /// it (a snapshot install closes every route) has one order.
    routes: Mutex<BTreeMap<i64, Route<O>>>,
    /// When this node applied each TTL node's last change (monotonic ms):
    /// the reaper's clock-jump-proof half of the TTL rule.
    ttl_clock: TtlClock,
}

impl<O: Outlet> NodeState<O> {
    fn watches(&self) -> Held<MutexGuard<'_, WatchManager>> {
        profile::acquire(Lock::Watches, || self.watches.lock())
    }

    fn routes(&self) -> Held<MutexGuard<'_, BTreeMap<i64, Route<O>>>> {
        profile::acquire(Lock::Routes, || self.routes.lock())
    }

    fn send(&self, session_id: i64, message: Outbound) {
        if let Some(route) = self.routes().get(&session_id) {
            route.outlet.send(message);
        }
    }
}

/// A handle to the node: cheap to clone, shared by the connections, the
/// timers and the apply step.
pub struct Node<O> {
    state: Arc<RwLock<NodeState<O>>>,
    sessions: Arc<Mutex<SessionTracker>>,
    clock: Arc<dyn Clock>,
    server_id: u64,
    tick_ms: u64,
    /// The configuration in effect does not hold this server: it serves no
    /// client (ZooKeeper's removed server stops serving too).
    removed: Arc<std::sync::atomic::AtomicBool>,
}

impl<O> Clone for Node<O> {
    fn clone(&self) -> Self {
        Node {
            state: self.state.clone(),
            sessions: self.sessions.clone(),
            clock: self.clock.clone(),
            server_id: self.server_id,
            tick_ms: self.tick_ms,
            removed: self.removed.clone(),
        }
    }
}

/// A read served from this node's tree.
#[derive(Debug)]
pub struct LocalRead {
    pub result: Result<Response, ErrorCode>,
    /// The tree's last zxid when it was read: the reply's zxid, and the
    /// events queued up to it go out before the reply.
    pub zxid: i64,
    /// Watches registered for the session, in request order.
    pub watches: Vec<(String, WatchKind)>,
    /// Events that setWatches fires at once (changes the client missed);
    /// they go out before the reply.
    pub fired: Vec<Event>,
}

impl LocalRead {
    fn answer(result: Result<Response, ErrorCode>, zxid: i64) -> LocalRead {
        LocalRead {
            result,
            zxid,
            watches: Vec::new(),
            fired: Vec::new(),
        }
    }
}

/// A sync's ReadIndex context: who asked, and the path to echo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncContext {
    pub session_id: i64,
    pub xid: i32,
    pub path: String,
}

impl SyncContext {
    pub fn encode(&self) -> Vec<u8> {
        let mut context = Vec::with_capacity(12 + self.path.len());
        context.extend_from_slice(&self.session_id.to_be_bytes());
        context.extend_from_slice(&self.xid.to_be_bytes());
        context.extend_from_slice(self.path.as_bytes());
        context
    }

    pub fn decode(context: &[u8]) -> Option<SyncContext> {
        if context.len() < 12 || context.len() - 12 > SYNC_CONTEXT_PATH_MAX_BYTES {
            return None;
        }
        Some(SyncContext {
            session_id: i64::from_be_bytes(context[..8].try_into().ok()?),
            xid: i32::from_be_bytes(context[8..12].try_into().ok()?),
            path: String::from_utf8(context[12..].to_vec()).ok()?,
        })
    }
}

/// What addauth did to a connection's identities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthAnswer {
    /// The identities the credentials prove were added.
    Added,
    /// The provider refused the credentials: the connection closes.
    Refused { code: ErrorCode, scheme: String },
    /// The packet does not decode.
    Malformed,
}

impl AuthAnswer {
    /// The reply's zxid and result: ZooKeeper answers auth at zxid 0,
    /// echoing the xid.
    pub fn reply(&self, last_zxid: i64) -> (i64, Result<Response, ErrorCode>) {
        match self {
            AuthAnswer::Added => (0, Ok(Response::Empty)),
            AuthAnswer::Refused { code, .. } => (0, Err(*code)),
            AuthAnswer::Malformed => (last_zxid, Err(ErrorCode::MarshallingError)),
        }
    }
}

/// addauth on a connection holding `identities` (the body of an AUTH
/// request): the identities its credentials prove are added, at most
/// `AUTH_IDS_MAX` in all. The network shell and the simulator both call it.
pub fn add_auth(identities: &mut Vec<Id>, body: &[u8], super_digest: Option<&str>) -> AuthAnswer {
    let Ok(packet) = AuthPacket::from_bytes(body) else {
        return AuthAnswer::Malformed;
    };
    let authenticated = if credentials_null(body, &packet) {
        Err(ErrorCode::AuthFailed)
    } else {
        keel_tree::acl::authenticate(&packet.scheme, &packet.auth, super_digest)
    };
    match authenticated {
        Ok(ids) => {
            for id in ids {
                if !identities.contains(&id) && identities.len() < keel_tree::txn::AUTH_IDS_MAX {
                    identities.push(id);
                }
            }
            AuthAnswer::Added
        }
        Err(code) => AuthAnswer::Refused {
            code,
            scheme: packet.scheme,
        },
    }
}

/// Credentials sent as a null buffer (length -1; kazoo sends "" so), which
/// the record decodes as empty: ZooKeeper's digest provider fails on them
/// (`new String(null)` throws) and answers AuthFailed, while a real empty
/// buffer authenticates as the digest of "".
fn credentials_null(body: &[u8], packet: &AuthPacket) -> bool {
    // auth_type (i32), scheme (i32 length + bytes), then the credentials.
    let at = 8 + packet.scheme.len();
    body.get(at..at + 4) == Some(&keel_jute::codec::NULL_LENGTH.to_be_bytes()[..])
}

/// A transaction the node proposes itself: no reply goes to anyone.
pub fn internal_txn(session_id: i64, op: TxnOp, time_ms: i64) -> Txn {
    Txn {
        session_id,
        xid: INTERNAL_XID,
        time_ms,
        auth: Vec::new(),
        op,
    }
}

impl<O: Outlet> Node<O> {
    /// A node holding `tree` (loaded from a snapshot): every session in it
    /// gets a full timeout, as ZooKeeper gives a restarted server's
    /// sessions the chance to reconnect.
    pub fn new(tree: DataTree, server_id: u64, tick_ms: u64, clock: Arc<dyn Clock>) -> Node<O> {
        assert!(tick_ms > 0, "a session tracker needs a tick");
        let sessions = tracker_for(&tree, tick_ms, clock.now_ms());
        let ttl_clock = TtlClock::starting(&tree, clock.now_ms());
        Node {
            state: Arc::new(RwLock::new(NodeState {
                tree,
                watches: Mutex::new(WatchManager::new()),
                routes: Mutex::new(BTreeMap::new()),
                ttl_clock,
            })),
            sessions: Arc::new(Mutex::new(sessions)),
            clock,
            server_id,
            tick_ms,
            removed: Arc::default(),
        }
    }

    /// This server is not in the configuration in effect (it was removed).
    pub fn removed(&self) -> bool {
        self.removed.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn server_id(&self) -> u64 {
        self.server_id
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The tree, read-locked, for the four-letter words, the reaper and
    /// checkers. Hold it briefly: applies wait while it is held.
    pub fn tree(&self) -> Held<parking_lot::MappedRwLockReadGuard<'_, DataTree>> {
        profile::acquire(Lock::NodeRead, || {
            RwLockReadGuard::map(self.state.read(), |state| &state.tree)
        })
    }

    /// `f` over the tree and the TTL clock, read-locked together (the
    /// reaper): no apply falls between them. Hold it briefly.
    pub fn with_tree_and_ttl_clock<T>(&self, f: impl FnOnce(&DataTree, &TtlClock) -> T) -> T {
        let state = self.read_state();
        f(&state.tree, &state.ttl_clock)
    }

    fn read_state(&self) -> Held<RwLockReadGuard<'_, NodeState<O>>> {
        profile::acquire(Lock::NodeRead, || self.state.read())
    }

    fn write_state(&self) -> Held<RwLockWriteGuard<'_, NodeState<O>>> {
        profile::acquire(Lock::NodeWrite, || self.state.write())
    }

    fn sessions(&self) -> Held<MutexGuard<'_, SessionTracker>> {
        profile::acquire(Lock::Sessions, || self.sessions.lock())
    }

    pub fn last_zxid(&self) -> i64 {
        self.read_state().tree.last_zxid()
    }

    /// `f` over the watch table (four-letter words).
    pub fn with_watches<T>(&self, f: impl FnOnce(&WatchManager) -> T) -> T {
        let state = self.read_state();
        let watches = state.watches();
        f(&watches)
    }

    /// Sessions the tracker knows (alive, not yet expired).
    pub fn session_count(&self) -> usize {
        self.sessions().len()
    }

    /// Sessions whose connection is on this node.
    pub fn connected_sessions(&self) -> Vec<i64> {
        self.read_state().routes().keys().copied().collect()
    }

    /// Activity on a session: its deadline moves. False if the tracker
    /// does not know it (expired, closed, or never created).
    pub fn touch(&self, session_id: i64) -> bool {
        let now_ms = self.clock.now_ms();
        self.sessions().touch(session_id, now_ms)
    }

    /// Binds a session being created to its connection (the reply of its
    /// CreateSession finds the connection through this).
    pub fn register(&self, session_id: i64, route: Route<O>) {
        let state = self.read_state();
        let old = state.routes().insert(session_id, route);
        assert!(old.is_none(), "session ids are unique per node");
    }

    /// Resumes a session on a new connection if it lives and the password
    /// matches. As ZooKeeper, any attempt first closes the session's
    /// current connection here; the client re-registers its watches with
    /// setWatches right after.
    pub fn resume(&self, session_id: i64, password: &[u8], route: Route<O>) -> bool {
        let state = self.read_state();
        state.send(
            session_id,
            Outbound::Close {
                reason: CloseReason::Resumed,
            },
        );
        let expected = keel_session::session_password(session_id, SESSION_SECRET);
        if password != expected || state.tree.session_timeout_ms(session_id).is_none() {
            return false;
        }
        if !self.touch(session_id) {
            return false;
        }
        state.watches().remove_session(session_id);
        let old = state.routes().insert(session_id, route);
        if let Some(old) = old {
            old.outlet.send(Outbound::Close {
                reason: CloseReason::Moved,
            });
        }
        true
    }

    /// Binds a local session (read-only mode, never in the tree) to its
    /// connection; an earlier connection of it is closed and its watches
    /// go, as `resume` does for a global session.
    pub fn bind_local(&self, session_id: i64, route: Route<O>) {
        assert!(keel_session::is_local_session_id(session_id));
        let state = self.read_state();
        state.watches().remove_session(session_id);
        let old = state.routes().insert(session_id, route);
        if let Some(old) = old {
            old.outlet.send(Outbound::Close {
                reason: CloseReason::Resumed,
            });
        }
    }

    /// Closes the connection of every session that `matches` (read-only
    /// mode's switches, a local session's expiry); each closes after what
    /// was queued for it before. Returns how many were told.
    pub fn close_sessions(&self, matches: impl Fn(i64) -> bool, reason: CloseReason) -> usize {
        let state = self.read_state();
        let routes = state.routes();
        let mut told = 0;
        for (session_id, route) in routes.iter() {
            if matches(*session_id) {
                route.outlet.send(Outbound::Close { reason });
                told += 1;
            }
        }
        told
    }

    /// The connection went away: if the session is still bound to it, the
    /// binding and the session's watches go (ZooKeeper drops a
    /// connection's watches with it; the client re-registers them).
    pub fn disconnect(&self, session_id: i64, connection_id: u64) {
        let state = self.read_state();
        let removed = {
            let mut routes = state.routes();
            let bound = routes
                .get(&session_id)
                .is_some_and(|route| route.connection_id == connection_id);
            bound && routes.remove(&session_id).is_some()
        };
        if removed {
            state.watches().remove_session(session_id);
        }
    }

    /// A read (or watch request) of `session_id` with the identities in
    /// `auth`, served from this node's tree; its watches are registered
    /// before the lock is released, so no change can slip between the read
    /// and its watch. Requests that are not reads answer Unimplemented.
    ///
    /// A global session this node's tree no longer has (its close was
    /// applied while the read waited behind the session's writes) is
    /// answered SessionExpired and registers nothing: the session's
    /// watches went with its close, and its connection's Close is queued
    /// behind the writes' replies. Answering from the tree would show the
    /// client a state past its own session's end, past changes whose
    /// watches it will never hear fire (simulator seed 331133).
    pub fn read(&self, session_id: i64, auth: &[Id], request: &Request) -> LocalRead {
        let state = self.read_state();
        let zxid = state.tree.last_zxid();
        let local = keel_session::is_local_session_id(session_id);
        if !local && state.tree.session_timeout_ms(session_id).is_none() {
            return LocalRead::answer(Err(ErrorCode::SessionExpired), zxid);
        }
        match request {
            Request::SetWatches(w) => {
                let watches = [&w.data_watches, &w.exist_watches, &w.child_watches];
                state.set_watches(session_id, w.relative_zxid, watches, &[], &[])
            }
            Request::SetWatches2(w) => {
                let watches = [&w.data_watches, &w.exist_watches, &w.child_watches];
                let persistent = (
                    &w.persistent_watches[..],
                    &w.persistent_recursive_watches[..],
                );
                state.set_watches(
                    session_id,
                    w.relative_zxid,
                    watches,
                    persistent.0,
                    persistent.1,
                )
            }
            Request::AddWatch(add) => {
                let kind = match add.mode {
                    0 => WatchKind::Persistent,
                    1 => WatchKind::PersistentRecursive,
                    _ => return LocalRead::answer(Err(ErrorCode::MarshallingError), zxid),
                };
                state.watches().add(&add.path, session_id, kind);
                LocalRead {
                    watches: vec![(add.path.clone(), kind)],
                    ..LocalRead::answer(Ok(Response::ErrorResponse(0)), zxid)
                }
            }
            Request::RemoveWatches(r) => {
                let result = state.remove_watch(session_id, &r.path, r.watcher_type, true);
                LocalRead::answer(result, zxid)
            }
            Request::CheckWatches(r) => {
                let result = state.remove_watch(session_id, &r.path, r.watcher_type, false);
                LocalRead::answer(result, zxid)
            }
            _ => match state.tree.read_for_reply(request, session_id, auth) {
                Some(outcome) => {
                    if !outcome.watches.is_empty() {
                        let mut watches = state.watches();
                        for (path, kind) in &outcome.watches {
                            watches.add(path, session_id, *kind);
                        }
                    }
                    LocalRead {
                        watches: outcome.watches,
                        ..LocalRead::answer(outcome.result, zxid)
                    }
                }
                None => LocalRead::answer(Err(ErrorCode::Unimplemented), zxid),
            },
        }
    }

    /// The leader's expiry step: sessions past their deadline, each with
    /// the CloseSession transaction to propose for it. Followers expire
    /// nothing (they report activity to the leader instead).
    pub fn expire(&self, time_ms: i64) -> Vec<(i64, Txn)> {
        let now_ms = self.clock.now_ms();
        let expired = self.sessions().expired(now_ms);
        expired
            .into_iter()
            .map(|session_id| {
                let txn = internal_txn(session_id, TxnOp::CloseSession, time_ms);
                (session_id, txn)
            })
            .collect()
    }
}

impl<O: Outlet> NodeState<O> {
    fn set_watches(
        &self,
        session_id: i64,
        relative_zxid: i64,
        [data, exist, child]: [&Vec<String>; 3],
        persistent: &[String],
        recursive: &[String],
    ) -> LocalRead {
        let (fired, mut registered) = self.tree.missed_events(relative_zxid, data, exist, child);
        registered.extend(
            persistent
                .iter()
                .map(|p| (p.clone(), WatchKind::Persistent)),
        );
        registered.extend(
            recursive
                .iter()
                .map(|p| (p.clone(), WatchKind::PersistentRecursive)),
        );
        {
            let mut watches = self.watches();
            for (path, kind) in &registered {
                watches.add(path, session_id, *kind);
            }
        }
        LocalRead {
            result: Ok(Response::Empty),
            zxid: self.tree.last_zxid(),
            watches: registered,
            fired: fired
                .into_iter()
                .map(|(path, event_type)| Event { path, event_type })
                .collect(),
        }
    }

    fn remove_watch(
        &self,
        session_id: i64,
        path: &str,
        watcher_type: i32,
        remove: bool,
    ) -> Result<Response, ErrorCode> {
        if !(1..=5).contains(&watcher_type) {
            return Err(ErrorCode::BadArguments);
        }
        let mut watches = self.watches();
        let found = if remove {
            watches.remove(path, session_id, watcher_type)
        } else {
            watches.contains(path, session_id, watcher_type)
        };
        if found {
            Ok(Response::Empty)
        } else {
            Err(ErrorCode::NoWatcher)
        }
    }
}

fn tracker_for(tree: &DataTree, tick_ms: u64, now_ms: u64) -> SessionTracker {
    let mut tracker = SessionTracker::new(tick_ms);
    for (session_id, timeout_ms) in tree.sessions() {
        tracker.add(session_id, timeout_ms, now_ms);
    }
    tracker
}

/// What the simulator (or a test) watches the apply step do; the server
/// watches nothing (`()`).
pub trait ApplyObserver: Send + 'static {
    /// One transaction about to be applied at log `index` to `tree`.
    fn applying(&mut self, _index: u64, _txn: &Txn, _tree: &DataTree) {}
    /// One transaction applied at log `index`.
    fn applied(&mut self, _index: u64, _txn: &Txn, _applied: &Applied) {}
    /// The tree after an entry was applied or skipped, or a snapshot
    /// installed.
    fn settled(&mut self, _tree: &DataTree) {}
}

impl ApplyObserver for () {}

/// The node's apply step: the Raft driver's state machine.
pub struct NodeMachine<O, B = ()> {
    node: Node<O>,
    observer: B,
    /// Threads that decode a snapshot installed from the leader.
    load_threads: usize,
    /// The Keel KV keyspace's apply side (`with_kv`; the server always
    /// has one, so every node applies KV entries whether or not it serves
    /// a RESP port).
    kv: Option<crate::kv::KvApplier>,
}

impl<O: Outlet, B: ApplyObserver> NodeMachine<O, B> {
    pub fn new(node: Node<O>, observer: B, load_threads: usize) -> Self {
        assert!(load_threads > 0);
        NodeMachine {
            node,
            observer,
            load_threads,
            kv: None,
        }
    }

    /// Applies Keel KV's log entries to `kv`'s shards, snapshots and
    /// restores them with the tree.
    pub fn with_kv(mut self, kv: crate::kv::KvApplier) -> Self {
        self.kv = Some(kv);
        self
    }

    pub fn node(&self) -> &Node<O> {
        &self.node
    }

    pub fn observer_mut(&mut self) -> &mut B {
        &mut self.observer
    }

    /// A snapshot from the leader replaces the tree.
    fn replace(&mut self, tree: DataTree) {
        let mut state = self.node.write_state();
        let state = &mut *state;
        let now_ms = self.node.now_ms();
        *self.node.sessions() = tracker_for(&tree, self.node.tick_ms, now_ms);
        state.ttl_clock = TtlClock::starting(&tree, now_ms);
        state.tree = tree;
        // The changes the snapshot jumped over fired no watch. As a
        // ZooKeeper follower that resyncs from a SNAP, drop every client
        // connection: clients reconnect and setWatches fires what they
        // missed since their last zxid.
        let watches = state.watches.get_mut();
        for (session_id, route) in state.routes.get_mut().iter() {
            watches.remove_session(*session_id);
            route.outlet.send(Outbound::Close {
                reason: CloseReason::SnapshotInstalled,
            });
        }
        self.observer.settled(&state.tree);
    }
}

/// Sends each event of an applied transaction to the sessions whose
/// watches it triggers (the watches are consumed as ZooKeeper's are).
fn fire_watches<O: Outlet>(
    watches: &mut WatchManager,
    routes: &BTreeMap<i64, Route<O>>,
    applied: &Applied,
) {
    for event in &applied.events {
        for session_id in watches.trigger(&event.path, event.event_type.code()) {
            if let Some(route) = routes.get(&session_id) {
                route.outlet.send(Outbound::Event {
                    zxid: applied.zxid,
                    event: event.clone(),
                });
            }
        }
    }
}

/// Events first, then the reply: ZooKeeper sends a watch notification
/// before the response of the request that fired it. Runs under the
/// state's write lock, so a read that follows sees the change and every
/// event it fired queued ahead of its reply.
fn deliver<O: Outlet>(
    state: &mut NodeState<O>,
    sessions: &Mutex<SessionTracker>,
    now_ms: u64,
    txn: &Txn,
    applied: &Applied,
    asked_here: bool,
) {
    let watches = state.watches.get_mut();
    let routes = state.routes.get_mut();
    fire_watches(watches, routes, applied);
    if let Some((session_id, timeout_ms)) = applied.session_created {
        let mut sessions = profile::acquire(Lock::Sessions, || sessions.lock());
        if !sessions.contains(session_id) {
            sessions.add(session_id, timeout_ms, now_ms);
        }
    }
    // Only the node the request arrived at answers it: after a client
    // moved its session elsewhere, a reply for its old connection's
    // request must not reach the new connection (ZooKeeper binds a reply
    // to the connection the request came on).
    if txn.xid != INTERNAL_XID && asked_here {
        if let Some(route) = routes.get(&txn.session_id) {
            route.outlet.send(Outbound::Reply {
                xid: txn.xid,
                zxid: applied.zxid,
                op_code: op_code_of(&txn.op),
                result: applied.result.clone(),
            });
        }
    }
    if let Some(session_id) = applied.session_closed {
        profile::acquire(Lock::Sessions, || sessions.lock()).remove(session_id);
        watches.remove_session(session_id);
        if let Some(route) = routes.remove(&session_id) {
            route.outlet.send(Outbound::Close {
                reason: CloseReason::SessionClosed,
            });
        }
    } else if matches!(txn.op, TxnOp::CloseSession)
        && applied.result == Err(ErrorCode::SessionExpired)
    {
        routes.remove(&txn.session_id);
    }
}

impl<O: Outlet, B: ApplyObserver> StateMachine for NodeMachine<O, B> {
    fn apply(
        &mut self,
        index: u64,
        term: u64,
        proposals: &[Committed<'_>],
    ) -> Result<(), MachineError> {
        let _op = profile::enter(Op::APPLY);
        let now_ms = self.node.now_ms();
        // Keel KV's operations go to the keyspace's shards first, without
        // the tree's lock (they never touch the tree, and a spanning one
        // may wait for its shards).
        let mut txns = Vec::with_capacity(proposals.len());
        for proposal in proposals {
            // Every replica decodes the same committed bytes the same way:
            // one that does not decode is skipped everywhere alike. But a
            // kind this release does not know is a newer release's, which
            // the members that wrote it apply: the node stops there.
            let txn = match Txn::decode(proposal.payload) {
                Ok(txn) => txn,
                Err(error @ JuteError::UnknownTag { .. }) => return Err(Box::new(error)),
                Err(error) => {
                    tracing::error!(index, %error, "committed proposal does not decode; skipped");
                    continue;
                }
            };
            let asked_here = proposal.origin == self.node.server_id;
            if let TxnOp::Kv { body } = &txn.op {
                if let Some(kv) = &mut self.kv {
                    kv.apply(index, txn.time_ms, txn.session_id, body, asked_here)?;
                }
                continue;
            }
            txns.push((txn, asked_here));
        }
        if let Some(kv) = &mut self.kv {
            kv.flush();
        }
        let mut state = self.node.write_state();
        let state = &mut *state;
        for (txn, asked_here) in &txns {
            self.observer.applying(index, txn, &state.tree);
            let applied = state.tree.apply(term, txn);
            if let Some(error) = applied.unapplicable {
                return Err(Box::new(error));
            }
            state
                .ttl_clock
                .applied(&state.tree, &applied.events, now_ms);
            self.observer.applied(index, txn, &applied);
            deliver(
                state,
                &self.node.sessions,
                now_ms,
                txn,
                &applied,
                *asked_here,
            );
        }
        state.tree.set_applied(index, term);
        self.observer.settled(&state.tree);
        Ok(())
    }

    fn skip(&mut self, index: u64, term: u64) {
        let mut state = self.node.write_state();
        state.tree.set_applied(index, term);
        self.observer.settled(&state.tree);
    }

    fn snapshot_begin(&mut self) -> SnapshotJob {
        let _op = profile::enter(Op::APPLY);
        let mut state = self.node.write_state();
        let mut head = state.tree.snapshot_begin();
        let index = state.tree.applied_index();
        let kv = self
            .kv
            .as_ref()
            .and_then(|kv| kv.engine().snapshot_begin(index));
        if kv.is_some() {
            // The file says a keyspace part follows: one cut at the tree's
            // END is then refused, not read as an empty keyspace.
            keel_tree::snapshot::mark_followed(&mut head);
        }
        SnapshotJob {
            index,
            term: state.tree.applied_term(),
            head,
            writer: Box::new(TreeWriter {
                state: self.node.state.clone(),
                kv,
            }),
        }
    }

    fn snapshot_end(&mut self) {
        let _op = profile::enter(Op::APPLY);
        self.node.write_state().tree.snapshot_end();
    }

    fn dropped(&mut self, payloads: Vec<Vec<u8>>) {
        let _op = profile::enter(Op::APPLY);
        let state = self.node.read_state();
        for txn in payloads.iter().filter_map(|p| Txn::decode(p).ok()) {
            if let TxnOp::Kv { .. } = txn.op {
                if let Some(kv) = &self.kv {
                    kv.dropped(txn.session_id);
                }
            } else if txn.xid != INTERNAL_XID {
                let reason = CloseReason::ProposalDropped;
                state.send(txn.session_id, Outbound::Close { reason });
            }
        }
    }

    fn touched(&mut self, sessions: &[i64]) {
        let _op = profile::enter(Op::APPLY);
        let now_ms = self.node.now_ms();
        let mut tracker = self.node.sessions();
        for session_id in sessions {
            tracker.touch(*session_id, now_ms);
        }
    }

    fn restore(&mut self, index: u64, bytes: &[u8]) -> Result<(), MachineError> {
        let _op = profile::enter(Op::APPLY);
        let shards = self.kv.as_ref().map_or(1, |kv| kv.engine().shard_count());
        let (tree, keyspace) = load_snapshot(bytes, self.load_threads, shards)?;
        if tree.applied_index() != index {
            return Err(Box::new(IndexMismatch {
                found: tree.applied_index(),
                expected: index,
            }));
        }
        if let Some(kv) = &self.kv {
            kv.engine().replace(keyspace);
        }
        self.replace(tree);
        Ok(())
    }

    fn read_ready(&mut self, context: Vec<u8>) {
        let _op = profile::enter(Op::APPLY);
        if let (Some(kv), Some(number)) =
            (&self.kv, crate::kv::barrier::ReadBarrier::number(&context))
        {
            return kv.engine().barrier.passed(number);
        }
        let Some(sync) = SyncContext::decode(&context) else {
            return tracing::error!("sync context does not decode");
        };
        // Every entry committed before the barrier is applied: the reply
        // carries the newest zxid, as ZooKeeper's sync reply does.
        let state = self.node.read_state();
        let zxid = state.tree.last_zxid();
        let reply = Outbound::Reply {
            xid: sync.xid,
            zxid,
            op_code: opcode::SYNC,
            result: Ok(Response::Sync(sync.path)),
        };
        state.send(sync.session_id, reply);
    }

    fn read_failed(&mut self, context: Vec<u8>) {
        let _op = profile::enter(Op::APPLY);
        if let (Some(kv), Some(number)) =
            (&self.kv, crate::kv::barrier::ReadBarrier::number(&context))
        {
            return kv.engine().barrier.refused(number);
        }
        if let Some(sync) = SyncContext::decode(&context) {
            let reason = CloseReason::SyncRefused;
            let state = self.node.read_state();
            state.send(sync.session_id, Outbound::Close { reason });
        }
    }

    fn reconfigured(
        &mut self,
        index: u64,
        term: u64,
        members: &Members,
        time_ms: i64,
        reply: Option<&[u8]>,
    ) -> u64 {
        let _op = profile::enter(Op::APPLY);
        let mut state = self.node.write_state();
        let state = &mut *state;
        let applied = state.tree.set_config(term, time_ms, |zxid| {
            crate::reconfig::render(members, zxid as u64).into_bytes()
        });
        let watches = state.watches.get_mut();
        let routes = state.routes.get_mut();
        fire_watches(watches, routes, &applied);
        if let Some(to) = reply.and_then(crate::reconfig::ReplyTo::decode) {
            if let Some(route) = routes.get(&to.session_id) {
                route.outlet.send(Outbound::Reply {
                    xid: to.xid,
                    zxid: applied.zxid,
                    op_code: opcode::RECONFIG,
                    result: applied.result.clone(),
                });
            }
        }
        let removed = !members.contains_key(&self.node.server_id);
        self.node
            .removed
            .store(removed, std::sync::atomic::Ordering::Release);
        if removed {
            tracing::warn!("this server is no longer a member: its clients are closed");
            for route in routes.values() {
                route.outlet.send(Outbound::Close {
                    reason: CloseReason::Removed,
                });
            }
        }
        state.tree.set_applied(index, term);
        self.observer.settled(&state.tree);
        applied.zxid as u64
    }

    fn reconfig_failed(&mut self, context: Vec<u8>, error: ReconfigError) {
        let _op = profile::enter(Op::APPLY);
        let Some(to) = crate::reconfig::ReplyTo::decode(&context) else {
            return tracing::error!("reconfig context does not decode");
        };
        tracing::info!(session = format_args!("{:#x}", to.session_id), %error, "reconfig refused");
        let state = self.node.read_state();
        let message = match crate::reconfig::error_code(&error) {
            Some(code) => Outbound::Reply {
                xid: to.xid,
                zxid: state.tree.last_zxid(),
                op_code: opcode::RECONFIG,
                result: Err(code),
            },
            None => Outbound::Close {
                reason: CloseReason::ReconfigLost,
            },
        };
        state.send(to.session_id, message);
    }

    fn role_changed(&mut self, leader: bool) {
        let _op = profile::enter(Op::APPLY);
        if leader {
            // A new leader must not expire sessions for the election's
            // sake: every session gets a fresh deadline.
            let now_ms = self.node.now_ms();
            self.node.sessions().renew_all(now_ms);
        }
    }
}

fn op_code_of(op: &TxnOp) -> i32 {
    match op {
        TxnOp::Request { op_code, .. } => *op_code,
        TxnOp::CreateSession { .. } => opcode::CREATE_SESSION,
        TxnOp::CloseSession => opcode::CLOSE_SESSION,
        TxnOp::DeleteContainer { .. } => opcode::DELETE_CONTAINER,
        TxnOp::Sync { .. } => opcode::SYNC,
        TxnOp::Kv { .. } => 0,
    }
}

/// A snapshot from the leader that is not at the position it was sent for.
#[derive(Debug, thiserror::Error)]
#[error("snapshot holds index {found}, not {expected}")]
pub struct IndexMismatch {
    pub found: u64,
    pub expected: u64,
}

/// Writes the snapshot started by `snapshot_begin` a segment at a time,
/// each under the state's read lock: applies wait at most one segment.
/// The keyspace's part follows the tree's END frame (`load_snapshot`
/// splits them again).
struct TreeWriter<O> {
    state: Arc<RwLock<NodeState<O>>>,
    kv: Option<crate::kv::engine::KvSnapshotJob>,
}

impl<O: Outlet> SnapshotWriter for TreeWriter<O> {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> Result<bool, MachineError> {
        let _op = profile::enter(Op::SNAPSHOT);
        let more = profile::acquire(Lock::NodeRead, || self.state.read())
            .tree
            .snapshot_chunk(out)?;
        if more {
            return Ok(true);
        }
        if let Some(kv) = self.kv.take() {
            kv.write(out)?;
        }
        Ok(false)
    }
}

/// A snapshot's state: the tree's part, then the Keel KV keyspace's part
/// if there is one (a snapshot written before Keel KV, or by a node that
/// never applied a KV write, is the tree alone: an empty keyspace).
///
/// The tree's file header says whether a part follows, and the file must
/// agree both ways: that header is the one field no frame checksum
/// covers, and one flipped bit turns "followed" (format 5) into "not
/// followed" (4). (Only development builds of 2026-11-25, before format
/// 5, wrote a keyspace part behind a format 4 tree; such a file is now
/// refused.)
pub fn load_snapshot(
    bytes: &[u8],
    threads: usize,
    shards: usize,
) -> Result<(DataTree, keel_kv::snapshot::Image), MachineError> {
    let tree_len = keel_tree::snapshot::part_len(bytes)?;
    let followed = keel_tree::snapshot::followed(bytes)?;
    if tree_len == bytes.len() && followed {
        return Err(format!(
            "the snapshot ends after its tree part ({tree_len} bytes) but says a keyspace part follows: truncated"
        )
        .into());
    }
    if tree_len < bytes.len() && !followed {
        return Err(format!(
            "the snapshot's tree part ({tree_len} bytes) says nothing follows it, but {} bytes do: its header is corrupt",
            bytes.len() - tree_len
        )
        .into());
    }
    let tree = keel_tree::snapshot::load(&bytes[..tree_len], threads)?;
    let keyspace = keel_kv::snapshot::decode(&bytes[tree_len..], shards)?;
    Ok((tree, keyspace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[derive(Default)]
    struct ManualClock(AtomicU64);

    impl Clock for ManualClock {
        fn now_ms(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    /// Records what one connection was sent.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<Outbound>>>);

    impl Outlet for Recorder {
        fn send(&self, message: Outbound) {
            self.0.lock().push(message);
        }
    }

    fn node() -> (NodeMachine<Recorder>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::default());
        let node = Node::new(DataTree::new(), 1, 100, clock.clone());
        (NodeMachine::new(node, (), 1), clock)
    }

    fn commit(machine: &mut NodeMachine<Recorder>, index: u64, origin: u64, txn: &Txn) {
        let payload = txn.encode();
        let committed = [Committed {
            origin,
            payload: &payload,
        }];
        machine.apply(index, 1, &committed).expect("applies");
    }

    fn request(session_id: i64, xid: i32, request: &Request) -> Txn {
        let mut body = Vec::new();
        request.encode(&mut body);
        Txn {
            session_id,
            xid,
            time_ms: 0,
            auth: Vec::new(),
            op: TxnOp::Request {
                op_code: request.op_code(),
                body,
            },
        }
    }

    fn create(path: &str) -> Request {
        Request::Create(keel_jute::CreateRequest {
            path: path.into(),
            data: Some(Vec::new()),
            acl: vec![keel_jute::Acl {
                perms: keel_jute::perms::ALL,
                id: Id {
                    scheme: "world".into(),
                    id: "anyone".into(),
                },
            }],
            flags: 0,
        })
    }

    fn open(machine: &mut NodeMachine<Recorder>, session_id: i64, index: u64) -> Recorder {
        let outlet = Recorder::default();
        let route = Route {
            connection_id: session_id as u64,
            outlet: outlet.clone(),
        };
        machine.node().register(session_id, route);
        let txn = Txn {
            session_id,
            xid: 0,
            time_ms: 0,
            auth: Vec::new(),
            op: TxnOp::CreateSession { timeout_ms: 1_000 },
        };
        commit(machine, index, 1, &txn);
        outlet
    }

    #[test]
    fn an_event_goes_out_before_the_reply_of_the_write_that_fired_it() {
        let (mut machine, _) = node();
        let watcher = open(&mut machine, 7, 1);
        let writer = open(&mut machine, 8, 2);
        let exists = Request::Exists(keel_jute::ExistsRequest {
            path: "/a".into(),
            watch: true,
        });
        let read = machine.node().read(7, &[], &exists);
        assert_eq!(read.result, Err(ErrorCode::NoNode));
        assert_eq!(read.watches, vec![("/a".to_string(), WatchKind::Exist)]);
        commit(&mut machine, 3, 1, &request(8, 5, &create("/a")));
        let seen = watcher.0.lock();
        assert!(matches!(seen.last(), Some(Outbound::Event { event, .. }) if event.path == "/a"));
        let replies = writer.0.lock();
        assert!(matches!(
            replies.last(),
            Some(Outbound::Reply {
                xid: 5,
                result: Ok(_),
                ..
            })
        ));
    }

    #[test]
    fn a_transaction_of_a_newer_release_stops_the_apply_and_a_damaged_one_is_skipped() {
        let (mut machine, _) = node();
        let _ = open(&mut machine, 7, 1);
        commit(&mut machine, 2, 1, &request(7, 1, &create("/a")));
        let raw = |op_code: i32, body: Vec<u8>| Txn {
            session_id: 7,
            xid: 2,
            time_ms: 0,
            auth: Vec::new(),
            op: TxnOp::Request { op_code, body },
        };
        // A multi holding an op it may not hold (exists): every proposer
        // refuses such a request on arrival.
        let mut multi = Vec::new();
        multi.extend_from_slice(&opcode::EXISTS.to_be_bytes());
        multi.push(0);
        multi.extend_from_slice(&(-1i32).to_be_bytes());
        multi.extend_from_slice(&[0; 16]);
        let mut tag = raw(opcode::SET_DATA, Vec::new()).encode();
        // session id, xid, time, auth count: the kind's tag follows.
        tag[24..28].copy_from_slice(&77i32.to_be_bytes());
        let newer: [(Vec<u8>, &str); 3] = [
            (tag, "unknown txn tag 77"),
            (raw(9_999, Vec::new()).encode(), "unknown op code 9999"),
            (
                raw(opcode::MULTI, multi).encode(),
                "unknown op code 3 in multi",
            ),
        ];
        for (payload, named) in &newer {
            let committed = [Committed { origin: 1, payload }];
            let error = machine
                .apply(3, 1, &committed)
                .expect_err("a newer release's transaction");
            assert!(error.to_string().contains(named), "{error}");
            let state = machine.node().read_state();
            assert_eq!(state.tree.applied_index(), 2, "{named}: not applied");
        }
        // A body that does not decode, of an op this release knows: an
        // error transaction on every replica alike (ZooKeeper's prep).
        let before = machine.node().read_state().tree.last_zxid();
        let damaged = raw(opcode::CREATE, vec![0, 0]);
        commit(&mut machine, 3, 2, &damaged);
        let state = machine.node().read_state();
        assert_eq!(state.tree.applied_index(), 3);
        assert!(
            state.tree.last_zxid() > before,
            "the error transaction took a zxid"
        );
    }

    #[test]
    fn only_the_node_the_request_came_to_answers_it() {
        let (mut machine, _) = node();
        let outlet = open(&mut machine, 7, 1);
        let before = outlet.0.lock().len();
        commit(&mut machine, 2, 2, &request(7, 5, &create("/b")));
        assert_eq!(
            outlet.0.lock().len(),
            before,
            "a reply for another node's request"
        );
        assert!(machine.node().tree().node("/b").is_some());
    }

    #[test]
    fn a_resume_with_a_wrong_password_is_refused_and_closes_the_old_connection() {
        let (mut machine, _) = node();
        let old = open(&mut machine, 7, 1);
        let new = Recorder::default();
        let route = || Route {
            connection_id: 99,
            outlet: new.clone(),
        };
        assert!(!machine.node().resume(7, &[0; 16], route()));
        assert!(matches!(
            old.0.lock().last(),
            Some(Outbound::Close {
                reason: CloseReason::Resumed
            })
        ));
        let password = keel_session::session_password(7, SESSION_SECRET);
        assert!(machine.node().resume(7, &password, route()));
        assert!(
            !machine.node().resume(8, &password, route()),
            "no such session"
        );
        // The old connection going away does not unbind the new one.
        machine.node().disconnect(7, 7);
        assert_eq!(machine.node().connected_sessions(), vec![7]);
        machine.node().disconnect(7, 99);
        assert!(machine.node().connected_sessions().is_empty());
    }

    #[test]
    fn a_session_past_its_deadline_expires_on_the_leader_step() {
        let (mut machine, clock) = node();
        open(&mut machine, 7, 1);
        assert!(machine.node().expire(0).is_empty());
        clock.0.store(10_000, Ordering::Relaxed);
        let expired = machine.node().expire(0);
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].0, 7);
        assert_eq!(expired[0].1.xid, INTERNAL_XID);
    }

    #[test]
    fn a_read_of_a_session_whose_close_was_applied_answers_expired_and_watches_nothing() {
        let (mut machine, _) = node();
        let session = keel_session::initial_session_id(1, 0) + 1;
        let watcher = open(&mut machine, session, 1);
        let children = Request::GetChildren(keel_jute::GetChildrenRequest {
            path: "/".into(),
            watch: true,
        });
        let live = machine.node().read(session, &[], &children);
        assert!(live.result.is_ok());
        assert_eq!(live.watches.len(), 1);
        let close = Txn {
            session_id: session,
            xid: INTERNAL_XID,
            time_ms: 0,
            auth: Vec::new(),
            op: TxnOp::CloseSession,
        };
        commit(&mut machine, 2, 1, &close);
        // A read that waited behind the session's writes runs after the
        // close was applied (its connection has the Close still queued).
        let late = machine.node().read(session, &[], &children);
        assert_eq!(late.result, Err(ErrorCode::SessionExpired));
        assert!(late.watches.is_empty());
        // No watch of the dead session is left to fire.
        let before = watcher.0.lock().len();
        let other = open(&mut machine, 8, 3);
        commit(&mut machine, 4, 1, &request(8, 1, &create("/x")));
        let events = watcher.0.lock()[before..]
            .iter()
            .filter(|m| matches!(m, Outbound::Event { .. }))
            .count();
        assert_eq!(
            events, 0,
            "a watch registered after the session closed fired"
        );
        assert!(matches!(
            other.0.lock().last(),
            Some(Outbound::Reply { xid: 1, .. })
        ));
        // A local session (read-only mode) is never in the tree; its reads
        // are served.
        assert!(machine.node().read(7, &[], &children).result.is_ok());
    }

    fn auth_packet(scheme: &str, auth: &[u8]) -> Vec<u8> {
        AuthPacket {
            auth_type: 0,
            scheme: scheme.into(),
            auth: auth.to_vec(),
        }
        .to_bytes()
    }

    #[test]
    fn addauth_adds_what_the_credentials_prove_once_and_refuses_the_rest() {
        let mut ids = Vec::new();
        let digest = auth_packet("digest", b"alice:secret");
        assert_eq!(add_auth(&mut ids, &digest, None), AuthAnswer::Added);
        assert_eq!(add_auth(&mut ids, &digest, None), AuthAnswer::Added);
        assert_eq!(ids.len(), 1, "the same identity once");
        assert_eq!(ids[0].scheme, "digest");
        let refused = add_auth(&mut ids, &auth_packet("nosuch", b"x"), None);
        assert!(matches!(refused, AuthAnswer::Refused { .. }));
        assert_eq!(refused.reply(5).0, 0, "auth is answered at zxid 0");
        assert_eq!(add_auth(&mut ids, &[0, 1], None), AuthAnswer::Malformed);
        assert_eq!(
            AuthAnswer::Malformed.reply(5),
            (5, Err(ErrorCode::MarshallingError))
        );
        assert_eq!(ids.len(), 1);
    }

    #[test]
    fn a_snapshot_without_a_keyspace_part_loads_as_an_empty_keyspace() {
        let mut tree = DataTree::new();
        tree.set_applied(5, 1);
        let mut bytes = Vec::new();
        keel_tree::snapshot::encode(&mut tree, &mut bytes);
        let (loaded, keyspace) = load_snapshot(&bytes, 1, 2).expect("a tree-only snapshot loads");
        assert_eq!(loaded.applied_index(), 5);
        assert_eq!(
            keyspace.shards.iter().map(|s| s.key_count()).sum::<usize>(),
            0
        );
        // With the keyspace's part after the tree's END frame.
        let mut keys = keel_kv::Keyspace::new(3);
        let set = keel_kv::Op::Command {
            seq: 1,
            args: vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()],
        };
        keys.apply(5, 1_000, &set);
        let tree_len = bytes.len();
        keel_tree::snapshot::mark_followed(&mut bytes);
        assert!(
            load_snapshot(&bytes, 1, 2).is_err(),
            "a file cut at the tree's END that says a keyspace follows is refused"
        );
        bytes.extend_from_slice(&keel_kv::snapshot::encode(keys.shards(), 5, 1_000));
        // Format 5 with one bit flipped reads as 4, "nothing follows", in
        // the one field no checksum covers (simulator seed 7468986).
        let mut flipped = bytes.clone();
        assert_eq!(flipped[11], 5, "the version's low byte");
        flipped[11] ^= 1;
        let Err(refused) = load_snapshot(&flipped, 1, 2) else {
            panic!("a keyspace part behind a tree that says none follows is refused");
        };
        assert!(
            refused.to_string().contains("says nothing follows it"),
            "{refused}"
        );
        let (_, keyspace) = load_snapshot(&bytes, 1, 2).expect("both parts load");
        assert_eq!(
            keyspace.shards.iter().map(|s| s.key_count()).sum::<usize>(),
            1
        );
        assert_eq!(keyspace.clock_ms, 1_000);
        for cut in [tree_len, tree_len + 1, bytes.len() - 1] {
            assert!(
                load_snapshot(&bytes[..cut], 1, 2).is_err(),
                "a torn keyspace part is refused (cut at {cut})"
            );
        }
    }

    #[test]
    fn sync_contexts_round_trip_and_bad_ones_are_refused() {
        let sync = SyncContext {
            session_id: -3,
            xid: 9,
            path: "/x/y".into(),
        };
        assert_eq!(SyncContext::decode(&sync.encode()), Some(sync));
        assert_eq!(SyncContext::decode(&[0; 11]), None);
        let mut bad = vec![0; 12];
        bad.push(0xff);
        assert_eq!(SyncContext::decode(&bad), None);
    }
}
