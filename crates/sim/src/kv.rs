//! Keel KV in the simulator: what its clients ask, what they were
//! answered, and the checks of those histories.
//!
//! Clients send SET, INCR, DEL and GET on a few keys through the server's
//! path (world.rs): writes are `Op::Command` proposals in `TxnOp::Kv`
//! transactions, as `server::kv::conn` builds them, and their replies come
//! from the node's `KvApplier` when the entry applies; reads wait for a
//! ReadIndex barrier (`kv::barrier::ReadBarrier`'s context, passed by the
//! node's `read_ready`) and then read the node's shards, as a cluster
//! node's connection does.
//!
//! Every key is its own register (Redis's commands on one key), so the
//! history is linearizable if each key's is (linearizability is local):
//! `check` searches each key's operations (Wing and Gong's search, with
//! the states seen memoized) against a model of one key.
//!
//! Keys may expire (SET PX, PEXPIRE, PERSIST). Whether a key exists is
//! decided by the log's clock, not the reader's: a key is gone once an
//! entry whose clock reaches its deadline has applied. A read knows the
//! log clock it ran at (`KvOperation::read_clock_ms`); a write ran at a
//! clock between its invocation and its reply (its transaction carries
//! the proposer's clock at the invocation, and the log's clock is the
//! newest such time applied). So the model keeps a deadline as an
//! interval, and where it cannot tell whether a key has expired it tries
//! both (`KeyState::lives`). PEXPIRETIME and PTTL read the deadline (PTTL
//! from the node's display clock, `KvOperation::display_ms`), and their
//! replies narrow the interval to what they show (`deadline_read`).
//!
//! SCAN iterations are checked apart (`check_scans`): what an iteration
//! must return and may return, over the whole history.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use keel_kv::Reply;

/// Keys SET, DEL and GET use (strings that are whole values).
pub const REGISTER_KEYS: [&str; 3] = ["ka", "kb", "kc"];
/// Keys INCR and GET use, never deleted: their final value counts the
/// INCRs applied (the lost-write check).
pub const COUNTER_KEYS: [&str; 2] = ["n0", "n1"];
/// Keys only written all together, to one value (MSET, or MULTI/EXEC of
/// SETs) and read all together (MGET): they span both of a node's shards
/// (`ma` is in shard 0, `mb` and `mc` in shard 1 of two), so every such
/// command runs with both shards borrowed, or as an MSET split by shard.
/// A read that finds them unequal saw a spanning write in part.
pub const SPAN_KEYS: [&str; 3] = ["ma", "mb", "mc"];
/// A hash key (fields HASH_FIELDS) and a set key (members SET_MEMBERS),
/// written and read with their own commands; now and then a GET, SET or
/// DEL of them (WRONGTYPE, or a change of type).
pub const HASH_KEYS: [&str; 1] = ["h0"];
pub const HASH_FIELDS: [&str; 2] = ["f0", "f1"];
pub const SET_KEYS: [&str; 1] = ["s0"];
pub const SET_MEMBERS: [&str; 3] = ["m0", "m1", "m2"];
/// Keys written by WATCH transactions (WATCH, GET, MULTI SET EXEC: a
/// compare-and-set of the value read), plain SETs and DELs.
pub const WATCH_KEYS: [&str; 1] = ["w0"];
/// States the search of one key may visit before it gives up
/// (undecided, counted in the stats).
pub const SEARCH_STATES_MAX: usize = 200_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvCall {
    Set {
        key: String,
        value: Vec<u8>,
    },
    Incr {
        key: String,
    },
    Del {
        key: String,
    },
    Get {
        key: String,
    },
    /// MSET of every SPAN_KEYS key to `value` (split by shard when applied).
    Mset {
        value: Vec<u8>,
    },
    /// MULTI, SET of every SPAN_KEYS key to `value`, EXEC (one transaction
    /// with both shards borrowed).
    Exec {
        value: Vec<u8>,
    },
    /// MGET of the SPAN_KEYS (a read spanning shards).
    Mget,
    /// SET with a deadline `px_ms` after the log clock it applies at.
    SetPx {
        key: String,
        value: Vec<u8>,
        px_ms: i64,
    },
    /// PEXPIRE: a deadline `ms` after the log clock, if the key exists.
    Pexpire {
        key: String,
        ms: i64,
    },
    /// PERSIST: the key's deadline removed.
    Persist {
        key: String,
    },
    /// The EXEC of `WATCH key`, `GET key` (answered `expect`), `MULTI`,
    /// `SET key value`: it may set `value` only while the key still
    /// holds `expect`; it may always abort (a token from a node behind
    /// the reader's state, or a write between the WATCH and the GET).
    CasSet {
        key: String,
        expect: Option<Vec<u8>>,
        value: Vec<u8>,
    },
    HSet {
        key: String,
        field: Vec<u8>,
        value: Vec<u8>,
    },
    HDel {
        key: String,
        field: Vec<u8>,
    },
    HGet {
        key: String,
        field: Vec<u8>,
    },
    HLen {
        key: String,
    },
    SAdd {
        key: String,
        member: Vec<u8>,
    },
    SRem {
        key: String,
        member: Vec<u8>,
    },
    SIsMember {
        key: String,
        member: Vec<u8>,
    },
    SCard {
        key: String,
    },
    /// HGETALL (the reply's pairs sorted by field: `KvRet::of_call`).
    HGetAll {
        key: String,
    },
    /// SMEMBERS (the reply's members sorted).
    SMembers {
        key: String,
    },
    /// PTTL: counts down on the reading node's clock
    /// (`KvOperation::display_ms`), from the deadline the log set.
    Pttl {
        key: String,
    },
    /// PEXPIRETIME: the deadline itself (log clock, ms).
    PexpireTime {
        key: String,
    },
    /// One call of a SCAN iteration (all shards borrowed): `SCAN cursor
    /// COUNT count`. Checked over the whole iteration (`check_scans`),
    /// not by the one-key model.
    Scan {
        cursor: u64,
        count: u64,
    },
    /// FLUSHDB: every key gone at one log position (all shards borrowed).
    FlushDb,
    /// FLUSHDB as seen by one key (`per_key`).
    Flushed {
        key: String,
    },
}

/// Every key the clients use (what FLUSHDB is checked on).
pub fn all_keys() -> Vec<&'static str> {
    REGISTER_KEYS
        .iter()
        .chain(&COUNTER_KEYS)
        .chain(&SPAN_KEYS)
        .chain(&WATCH_KEYS)
        .chain(&HASH_KEYS)
        .chain(&SET_KEYS)
        .copied()
        .collect()
}

impl KvCall {
    /// The single key of a one-key command (`None` for the spanning ones:
    /// see `per_key`).
    pub fn key(&self) -> Option<&str> {
        match self {
            KvCall::Set { key, .. }
            | KvCall::Incr { key }
            | KvCall::Del { key }
            | KvCall::Get { key }
            | KvCall::SetPx { key, .. }
            | KvCall::Pexpire { key, .. }
            | KvCall::Persist { key }
            | KvCall::CasSet { key, .. }
            | KvCall::HSet { key, .. }
            | KvCall::HDel { key, .. }
            | KvCall::HGet { key, .. }
            | KvCall::HLen { key }
            | KvCall::SAdd { key, .. }
            | KvCall::SRem { key, .. }
            | KvCall::SIsMember { key, .. }
            | KvCall::SCard { key }
            | KvCall::HGetAll { key }
            | KvCall::SMembers { key }
            | KvCall::Pttl { key }
            | KvCall::PexpireTime { key }
            | KvCall::Flushed { key } => Some(key),
            KvCall::Mset { .. }
            | KvCall::Exec { .. }
            | KvCall::Mget
            | KvCall::Scan { .. }
            | KvCall::FlushDb => None,
        }
    }

    pub fn is_read(&self) -> bool {
        matches!(
            self,
            KvCall::Get { .. }
                | KvCall::Mget
                | KvCall::HGet { .. }
                | KvCall::HLen { .. }
                | KvCall::SIsMember { .. }
                | KvCall::SCard { .. }
                | KvCall::HGetAll { .. }
                | KvCall::SMembers { .. }
                | KvCall::Pttl { .. }
                | KvCall::PexpireTime { .. }
                | KvCall::Scan { .. }
        )
    }

    /// The command's arguments, as a client sends them (a transaction's:
    /// `commands`).
    pub fn args(&self) -> Vec<Vec<u8>> {
        let amount = match self {
            KvCall::SetPx { px_ms: ms, .. } | KvCall::Pexpire { ms, .. } => ms.to_string(),
            KvCall::Scan { count, .. } => count.to_string(),
            _ => String::new(),
        };
        let cursor = match self {
            KvCall::Scan { cursor, .. } => cursor.to_string(),
            _ => String::new(),
        };
        let words: Vec<&[u8]> = match self {
            KvCall::SetPx { key, value, .. } => {
                vec![b"SET", key.as_bytes(), value, b"PX", amount.as_bytes()]
            }
            KvCall::Pexpire { key, .. } => vec![b"PEXPIRE", key.as_bytes(), amount.as_bytes()],
            KvCall::Persist { key } => vec![b"PERSIST", key.as_bytes()],
            KvCall::CasSet { key, value, .. } => vec![b"SET", key.as_bytes(), value],
            KvCall::HSet { key, field, value } => vec![b"HSET", key.as_bytes(), field, value],
            KvCall::HDel { key, field } => vec![b"HDEL", key.as_bytes(), field],
            KvCall::HGet { key, field } => vec![b"HGET", key.as_bytes(), field],
            KvCall::HLen { key } => vec![b"HLEN", key.as_bytes()],
            KvCall::SAdd { key, member } => vec![b"SADD", key.as_bytes(), member],
            KvCall::SRem { key, member } => vec![b"SREM", key.as_bytes(), member],
            KvCall::SIsMember { key, member } => vec![b"SISMEMBER", key.as_bytes(), member],
            KvCall::SCard { key } => vec![b"SCARD", key.as_bytes()],
            KvCall::HGetAll { key } => vec![b"HGETALL", key.as_bytes()],
            KvCall::SMembers { key } => vec![b"SMEMBERS", key.as_bytes()],
            KvCall::Pttl { key } => vec![b"PTTL", key.as_bytes()],
            KvCall::PexpireTime { key } => vec![b"PEXPIRETIME", key.as_bytes()],
            KvCall::Scan { .. } => {
                vec![b"SCAN", cursor.as_bytes(), b"COUNT", amount.as_bytes()]
            }
            KvCall::FlushDb => vec![b"FLUSHDB"],
            KvCall::Flushed { .. } => unreachable!("a part of FLUSHDB is not sent"),
            KvCall::Set { key, value } => vec![b"SET", key.as_bytes(), value],
            KvCall::Incr { key } => vec![b"INCR", key.as_bytes()],
            KvCall::Del { key } => vec![b"DEL", key.as_bytes()],
            KvCall::Get { key } => vec![b"GET", key.as_bytes()],
            KvCall::Mset { value } | KvCall::Exec { value } => std::iter::once(b"MSET".as_slice())
                .chain(
                    SPAN_KEYS
                        .iter()
                        .flat_map(|key| [key.as_bytes(), value.as_slice()]),
                )
                .collect(),
            KvCall::Mget => std::iter::once(b"MGET".as_slice())
                .chain(SPAN_KEYS.iter().map(|key| key.as_bytes()))
                .collect(),
        };
        words.into_iter().map(<[u8]>::to_vec).collect()
    }

    /// A write's log operation, as `server::kv::conn` proposes it.
    pub fn op(&self, seq: u64, watches: Vec<keel_kv::op::Watch>) -> keel_kv::Op {
        assert!(!self.is_read(), "reads are not proposed");
        assert!(
            watches.is_empty() || matches!(self, KvCall::CasSet { .. }),
            "only a CasSet watches"
        );
        match self {
            KvCall::CasSet { .. } => keel_kv::Op::Exec {
                seq,
                watches,
                commands: vec![self.args()],
            },
            KvCall::Exec { value } => keel_kv::Op::Exec {
                seq,
                watches: Vec::new(),
                commands: SPAN_KEYS
                    .iter()
                    .map(|key| vec![b"SET".to_vec(), key.as_bytes().to_vec(), value.clone()])
                    .collect(),
            },
            _ => keel_kv::Op::Command {
                seq,
                args: self.args(),
            },
        }
    }
}

/// A reply as the history keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvRet {
    Ok,
    Int(i64),
    Value(Option<Vec<u8>>),
    Error(String),
    /// MGET's values, EXEC's replies.
    Array(Vec<KvRet>),
    /// EXEC aborted: a watched key changed.
    Aborted,
}

impl KvRet {
    pub fn of(reply: &Reply) -> KvRet {
        match reply {
            Reply::Status(text) if text == "OK" => KvRet::Ok,
            Reply::Integer(n) => KvRet::Int(*n),
            Reply::Bulk(value) => KvRet::Value(Some(value.clone())),
            Reply::Null => KvRet::Value(None),
            Reply::NullArray => KvRet::Aborted,
            Reply::Error(text) => KvRet::Error(text.to_string()),
            Reply::Array(items) | Reply::Set(items) => {
                KvRet::Array(items.iter().map(KvRet::of).collect())
            }
            // As RESP2 sends a map: its keys and values in turn.
            Reply::Map(pairs) => KvRet::Array(
                pairs
                    .iter()
                    .flat_map(|(k, v)| [KvRet::of(k), KvRet::of(v)])
                    .collect(),
            ),
            other => KvRet::Error(format!("unexpected reply {other:?}")),
        }
    }

    /// `reply` to `call` as the history keeps it: HGETALL's field-value
    /// pairs and SMEMBERS' members in sorted order (the node answers in
    /// its table's order, which no model predicts).
    pub fn of_call(reply: &Reply, call: &KvCall) -> KvRet {
        let ret = KvRet::of(reply);
        match (call, ret) {
            (KvCall::HGetAll { .. }, KvRet::Array(items)) if items.len().is_multiple_of(2) => {
                let mut pairs: Vec<(KvRet, KvRet)> = items
                    .chunks_exact(2)
                    .map(|pair| (pair[0].clone(), pair[1].clone()))
                    .collect();
                pairs.sort_by(|a, b| sort_key(&a.0).cmp(sort_key(&b.0)));
                KvRet::Array(pairs.into_iter().flat_map(|(f, v)| [f, v]).collect())
            }
            (KvCall::SMembers { .. }, KvRet::Array(mut items)) => {
                items.sort_by(|a, b| sort_key(a).cmp(sort_key(b)));
                KvRet::Array(items)
            }
            (_, ret) => ret,
        }
    }
}

/// A bulk reply's bytes, what HGETALL's and SMEMBERS' replies sort by
/// (anything else sorts first: it fails the check anyway).
fn sort_key(ret: &KvRet) -> &[u8] {
    match ret {
        KvRet::Value(Some(bytes)) => bytes,
        _ => &[],
    }
}

/// `op` as operations on one key each: a spanning write is a SET of each
/// SPAN_KEYS key and a spanning read a GET of each, all over the same
/// interval (linearizable as a whole only if each key's part is; that
/// it is one step, not three, is `torn_spanning_reads`' check and the
/// keys' equality at the end). A reply that is not the expected shape
/// stays an error on every key (no order fits it).
pub fn per_key(op: &KvOperation) -> Vec<KvOperation> {
    let one = |call: KvCall, ret: Option<(u64, KvRet)>| KvOperation {
        client: op.client,
        call,
        invoke: op.invoke,
        ret,
        read_clock_ms: op.read_clock_ms,
        display_ms: op.display_ms,
    };
    let part = |i: usize| -> Option<(u64, KvRet)> {
        let (at, ret) = op.ret.as_ref()?;
        let ret = match (&op.call, ret) {
            (KvCall::Mset { .. }, KvRet::Ok) => KvRet::Ok,
            (KvCall::Exec { .. }, KvRet::Array(items)) if items.len() == SPAN_KEYS.len() => {
                items[i].clone()
            }
            (KvCall::Mget, KvRet::Array(items)) if items.len() == SPAN_KEYS.len() => {
                items[i].clone()
            }
            (_, other) => KvRet::Error(format!("{other:?} as the reply to {:?}", op.call)),
        };
        Some((*at, ret))
    };
    match &op.call {
        KvCall::Mset { value } | KvCall::Exec { value } => SPAN_KEYS
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let call = KvCall::Set {
                    key: key.to_string(),
                    value: value.clone(),
                };
                one(call, part(i))
            })
            .collect(),
        KvCall::FlushDb => all_keys()
            .into_iter()
            .map(|key| {
                let ret = op.ret.as_ref().map(|(at, ret)| match ret {
                    KvRet::Ok => (*at, KvRet::Ok),
                    other => (
                        *at,
                        KvRet::Error(format!("{other:?} as the reply to FLUSHDB")),
                    ),
                });
                one(
                    KvCall::Flushed {
                        key: key.to_string(),
                    },
                    ret,
                )
            })
            .collect(),
        KvCall::Mget => SPAN_KEYS
            .iter()
            .enumerate()
            .map(|(i, key)| {
                one(
                    KvCall::Get {
                        key: key.to_string(),
                    },
                    part(i),
                )
            })
            .collect(),
        _ => vec![op.clone()],
    }
}

/// A SCAN iteration a client finished: from its first call's invocation
/// to the reply whose cursor was 0, every key its calls returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanIteration {
    pub client: u64,
    pub invoke: u64,
    pub end: u64,
    pub calls: u64,
    pub keys: BTreeSet<String>,
}

/// The reply to one SCAN call: the next cursor and the keys, or `None`
/// when the reply is not that shape.
pub fn scan_reply(ret: &KvRet) -> Option<(u64, Vec<String>)> {
    let KvRet::Array(parts) = ret else {
        return None;
    };
    let [KvRet::Value(Some(cursor)), KvRet::Array(keys)] = parts.as_slice() else {
        return None;
    };
    let cursor = std::str::from_utf8(cursor).ok()?.parse().ok()?;
    let keys = keys
        .iter()
        .map(|key| match key {
            KvRet::Value(Some(bytes)) => String::from_utf8(bytes.clone()).ok(),
            _ => None,
        })
        .collect::<Option<Vec<String>>>()?;
    Some((cursor, keys))
}

/// SCAN's promises over finished iterations (Redis's): a key present
/// from the iteration's start to its end is returned, and a key
/// returned was written by some client before the iteration ended.
/// "Present throughout" is checked on the keys no command deletes (the
/// counters and the spanning keys), once a write of them was answered
/// before the iteration began, and only if no FLUSHDB was sent before
/// it ended.
pub fn check_scans(iterations: &[ScanIteration], history: &[KvOperation]) -> Vec<String> {
    if iterations.is_empty() {
        return Vec::new();
    }
    // Per key, in one pass: the first invocation of a write that creates
    // it, and the first such write's successful reply.
    let mut firsts: BTreeMap<String, (Option<u64>, Option<u64>)> = BTreeMap::new();
    for op in history.iter().flat_map(per_key) {
        let creates = matches!(
            op.call,
            KvCall::Set { .. }
                | KvCall::SetPx { .. }
                | KvCall::Incr { .. }
                | KvCall::CasSet { .. }
                | KvCall::HSet { .. }
                | KvCall::SAdd { .. }
        );
        let Some(key) = op.call.key().filter(|_| creates) else {
            continue;
        };
        let (written, answered) = firsts.entry(key.to_string()).or_default();
        *written = Some(written.map_or(op.invoke, |at| at.min(op.invoke)));
        if let Some((at, ret)) = &op.ret {
            if !matches!(ret, KvRet::Error(_)) {
                *answered = Some(answered.map_or(*at, |first| first.min(*at)));
            }
        }
    }
    let first_write = |key: &str| firsts.get(key).and_then(|f| f.0);
    let first_answered = |key: &str| firsts.get(key).and_then(|f| f.1);
    let first_flush = history
        .iter()
        .filter(|op| op.call == KvCall::FlushDb)
        .map(|op| op.invoke)
        .min();
    let mut problems = Vec::new();
    for scan in iterations {
        for key in &scan.keys {
            if first_write(key).is_none_or(|at| at >= scan.end) {
                problems.push(format!(
                    "kv{} SCAN from {} to {} returned {key:?}, which no client wrote before",
                    scan.client, scan.invoke, scan.end
                ));
            }
        }
        if first_flush.is_some_and(|at| at < scan.end) {
            continue;
        }
        for key in COUNTER_KEYS.iter().chain(&SPAN_KEYS) {
            let present = first_answered(key).is_some_and(|at| at < scan.invoke);
            if present && !scan.keys.contains(*key) {
                problems.push(format!(
                    "kv{} SCAN from {} to {} ({} calls) missed {key:?}, present throughout: {:?}",
                    scan.client, scan.invoke, scan.end, scan.calls, scan.keys
                ));
            }
        }
    }
    problems
}

/// Spanning reads (MGET of the SPAN_KEYS) whose values differ: they saw a
/// spanning write in part (every write of those keys sets all three to
/// one value).
pub fn torn_spanning_reads(history: &[KvOperation]) -> Vec<String> {
    history
        .iter()
        .filter(|op| op.call == KvCall::Mget)
        .filter_map(|op| match &op.ret {
            Some((at, KvRet::Array(values))) if values.windows(2).any(|w| w[0] != w[1]) => {
                Some(format!(
                    "kv{} MGET at {at} read a spanning write in part: {values:?}",
                    op.client
                ))
            }
            _ => None,
        })
        .collect()
}

/// One KV request: invoked at `invoke` (µs), answered at `ret`'s time, or
/// never (its outcome unknown: it may or may not have applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvOperation {
    pub client: u64,
    pub call: KvCall,
    pub invoke: u64,
    pub ret: Option<(u64, KvRet)>,
    /// A read's log clock (ms): what decided which keys had expired.
    pub read_clock_ms: Option<i64>,
    /// A read's display clock (ms): what PTTL counted down from (the
    /// node's clock, never before the log's; `exec::Clocks::read`).
    pub display_ms: Option<i64>,
}

impl KvOperation {
    /// The log clocks (ms) the operation may have run at: a read's own;
    /// for a write, from its invocation (its transaction's time, which
    /// the clock never stays below) to its reply (no transaction applied
    /// before it was proposed later), unbounded when never answered.
    fn clock_bounds_ms(&self) -> (i64, i64) {
        if let Some(clock_ms) = self.read_clock_ms {
            return (clock_ms, clock_ms);
        }
        assert!(!self.call.is_read(), "a read records its clock: {self:?}");
        let low = (self.invoke / 1000) as i64;
        let high = self
            .ret
            .as_ref()
            .map_or(i64::MAX, |(at, _)| (at / 1000) as i64);
        assert!(low <= high, "answered before invoked: {self:?}");
        (low, high)
    }
}

/// One key in the model: its value and, if it expires, the interval its
/// deadline (log clock, ms) lies in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct KeyState {
    value: Option<Val>,
    deadline_ms: Option<(i64, i64)>,
}

/// A key's value, of one of the types the clients use.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Val {
    Str(Vec<u8>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    Set(BTreeSet<Vec<u8>>),
}

impl KeyState {
    /// A hash or set after a removal: gone once empty, as Redis drops it.
    fn holding(value: Val, deadline_ms: Option<(i64, i64)>) -> KeyState {
        let empty = match &value {
            Val::Hash(fields) => fields.is_empty(),
            Val::Set(members) => members.is_empty(),
            Val::Str(_) => false,
        };
        if empty {
            return KeyState::default();
        }
        KeyState {
            value: Some(value),
            deadline_ms,
        }
    }

    /// The key's string (`None` when absent); `Err` for another type.
    fn string(&self) -> Result<Option<&Vec<u8>>, ()> {
        match &self.value {
            None => Ok(None),
            Some(Val::Str(bytes)) => Ok(Some(bytes)),
            Some(_) => Err(()),
        }
    }

    /// The key as an operation at a log clock within `clock_ms` finds
    /// it alive: a deadline, if any, is past the earliest such clock.
    fn alive_at(&self, clock_ms: (i64, i64)) -> KeyState {
        let mut state = self.clone();
        if let Some((low, high)) = state.deadline_ms {
            let low = low.max(clock_ms.0.saturating_add(1));
            assert!(
                low <= high,
                "alive past its deadline: {self:?} at {clock_ms:?}"
            );
            state.deadline_ms = Some((low, high));
        }
        state
    }

    /// Whether the key exists for an operation at a log clock within
    /// `clock_ms`: one answer, or both when the deadline and the clock
    /// overlap.
    fn lives(&self, clock_ms: (i64, i64)) -> &'static [bool] {
        match (&self.value, self.deadline_ms) {
            (None, _) => &[false],
            (Some(_), None) => &[true],
            (Some(_), Some((low, high))) => {
                if high <= clock_ms.0 {
                    &[false]
                } else if low > clock_ms.1 {
                    &[true]
                } else {
                    &[true, false]
                }
            }
        }
    }
}

/// A deadline `ms` after a log clock within `clock_ms`.
fn deadline_after(clock_ms: (i64, i64), ms: i64) -> Option<(i64, i64)> {
    assert!(ms > 0, "the clients ask positive expiries");
    Some((clock_ms.0.saturating_add(ms), clock_ms.1.saturating_add(ms)))
}

/// The key's possible states after `op` (its call at a log clock within
/// its bounds), each with the reply Redis gives.
fn steps(state: &KeyState, op: &KvOperation) -> Vec<(KeyState, KvRet)> {
    let (call, clock_ms) = (&op.call, op.clock_bounds_ms());
    let mut out: Vec<(KeyState, KvRet)> = Vec::new();
    if matches!(call, KvCall::CasSet { .. }) {
        // An abort changes nothing and is always allowed.
        out.push((state.clone(), KvRet::Aborted));
    }
    for &live in state.lives(clock_ms) {
        let current = if live {
            state.alive_at(clock_ms)
        } else {
            KeyState::default()
        };
        let next = step(&current, op);
        if !out.contains(&next) {
            out.push(next);
        }
    }
    out
}

/// A live (or absent) key's state after `op`, and Redis's reply.
fn step(state: &KeyState, op: &KvOperation) -> (KeyState, KvRet) {
    let (call, clock_ms) = (&op.call, op.clock_bounds_ms());
    let value = &state.value;
    let with = |value: Option<Val>, deadline_ms| KeyState { value, deadline_ms };
    let string = |bytes: &Vec<u8>| Some(Val::Str(bytes.clone()));
    let wrong_type = || {
        (
            state.clone(),
            KvRet::Error(keel_kv::reply::WRONGTYPE.to_string()),
        )
    };
    match call {
        KvCall::Set { value: new, .. } => (with(string(new), None), KvRet::Ok),
        KvCall::SetPx {
            value: new, px_ms, ..
        } => (
            with(string(new), deadline_after(clock_ms, *px_ms)),
            KvRet::Ok,
        ),
        KvCall::Pexpire { ms, .. } => match value {
            Some(_) => (
                with(value.clone(), deadline_after(clock_ms, *ms)),
                KvRet::Int(1),
            ),
            None => (KeyState::default(), KvRet::Int(0)),
        },
        KvCall::Persist { .. } => {
            let had = value.is_some() && state.deadline_ms.is_some();
            (with(value.clone(), None), KvRet::Int(i64::from(had)))
        }
        KvCall::CasSet {
            expect, value: new, ..
        } => {
            if state.string() == Ok(expect.as_ref()) {
                (with(string(new), None), KvRet::Array(vec![KvRet::Ok]))
            } else {
                (state.clone(), KvRet::Aborted)
            }
        }
        KvCall::Get { .. } => match state.string() {
            Ok(bytes) => (state.clone(), KvRet::Value(bytes.cloned())),
            Err(()) => wrong_type(),
        },
        KvCall::Del { .. } => (KeyState::default(), KvRet::Int(i64::from(value.is_some()))),
        KvCall::Incr { .. } => {
            let current = match state.string() {
                Err(()) => return wrong_type(),
                Ok(None) => Some(0),
                Ok(Some(bytes)) => std::str::from_utf8(bytes)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok()),
            };
            // INCR keeps the key's deadline, as Redis does.
            match current.and_then(|n| n.checked_add(1)) {
                Some(n) => (
                    with(
                        Some(Val::Str(n.to_string().into_bytes())),
                        state.deadline_ms,
                    ),
                    KvRet::Int(n),
                ),
                None => (
                    state.clone(),
                    KvRet::Error(keel_kv::reply::NOT_INTEGER.to_string()),
                ),
            }
        }
        KvCall::HSet {
            field, value: new, ..
        } => match value {
            None => {
                let fields = BTreeMap::from([(field.clone(), new.clone())]);
                (with(Some(Val::Hash(fields)), None), KvRet::Int(1))
            }
            Some(Val::Hash(fields)) => {
                let mut fields = fields.clone();
                let added = fields.insert(field.clone(), new.clone()).is_none();
                (
                    with(Some(Val::Hash(fields)), state.deadline_ms),
                    KvRet::Int(i64::from(added)),
                )
            }
            Some(_) => wrong_type(),
        },
        KvCall::HDel { field, .. } => match value {
            None => (KeyState::default(), KvRet::Int(0)),
            Some(Val::Hash(fields)) => {
                let mut fields = fields.clone();
                let removed = fields.remove(field).is_some();
                (
                    KeyState::holding(Val::Hash(fields), state.deadline_ms),
                    KvRet::Int(i64::from(removed)),
                )
            }
            Some(_) => wrong_type(),
        },
        KvCall::HGet { field, .. } => match value {
            None => (KeyState::default(), KvRet::Value(None)),
            Some(Val::Hash(fields)) => (state.clone(), KvRet::Value(fields.get(field).cloned())),
            Some(_) => wrong_type(),
        },
        KvCall::HLen { .. } => match value {
            None => (KeyState::default(), KvRet::Int(0)),
            Some(Val::Hash(fields)) => (state.clone(), KvRet::Int(fields.len() as i64)),
            Some(_) => wrong_type(),
        },
        KvCall::SAdd { member, .. } => match value {
            None => {
                let members = BTreeSet::from([member.clone()]);
                (with(Some(Val::Set(members)), None), KvRet::Int(1))
            }
            Some(Val::Set(members)) => {
                let mut members = members.clone();
                let added = members.insert(member.clone());
                (
                    with(Some(Val::Set(members)), state.deadline_ms),
                    KvRet::Int(i64::from(added)),
                )
            }
            Some(_) => wrong_type(),
        },
        KvCall::SRem { member, .. } => match value {
            None => (KeyState::default(), KvRet::Int(0)),
            Some(Val::Set(members)) => {
                let mut members = members.clone();
                let removed = members.remove(member);
                (
                    KeyState::holding(Val::Set(members), state.deadline_ms),
                    KvRet::Int(i64::from(removed)),
                )
            }
            Some(_) => wrong_type(),
        },
        KvCall::SIsMember { member, .. } => match value {
            None => (KeyState::default(), KvRet::Int(0)),
            Some(Val::Set(members)) => (
                state.clone(),
                KvRet::Int(i64::from(members.contains(member))),
            ),
            Some(_) => wrong_type(),
        },
        KvCall::SCard { .. } => match value {
            None => (KeyState::default(), KvRet::Int(0)),
            Some(Val::Set(members)) => (state.clone(), KvRet::Int(members.len() as i64)),
            Some(_) => wrong_type(),
        },
        KvCall::HGetAll { .. } => match value {
            None => (KeyState::default(), KvRet::Array(Vec::new())),
            Some(Val::Hash(fields)) => {
                let bulk = |bytes: &Vec<u8>| KvRet::Value(Some(bytes.clone()));
                let pairs = fields.iter().flat_map(|(f, v)| [bulk(f), bulk(v)]);
                (state.clone(), KvRet::Array(pairs.collect()))
            }
            Some(_) => wrong_type(),
        },
        KvCall::SMembers { .. } => match value {
            None => (KeyState::default(), KvRet::Array(Vec::new())),
            Some(Val::Set(members)) => {
                let members = members.iter().map(|m| KvRet::Value(Some(m.clone())));
                (state.clone(), KvRet::Array(members.collect()))
            }
            Some(_) => wrong_type(),
        },
        KvCall::Pttl { .. } | KvCall::PexpireTime { .. } => match (value, state.deadline_ms) {
            (None, _) => (KeyState::default(), KvRet::Int(-2)),
            (Some(_), None) => (state.clone(), KvRet::Int(-1)),
            (Some(_), Some(deadline_ms)) => deadline_read(state, op, deadline_ms),
        },
        KvCall::Flushed { .. } => (KeyState::default(), KvRet::Ok),
        KvCall::Mset { .. } | KvCall::Exec { .. } | KvCall::Mget | KvCall::FlushDb => {
            unreachable!("per_key splits spanning calls into one-key ones")
        }
        KvCall::Scan { .. } => unreachable!("SCAN is checked by check_scans"),
    }
}

/// PTTL or PEXPIRETIME of a live key whose deadline lies in
/// `deadline_ms`: the reply the read got, with the deadline narrowed to
/// what that reply shows, if some deadline in the interval gives it;
/// otherwise a reply it did not get.
fn deadline_read(state: &KeyState, op: &KvOperation, deadline_ms: (i64, i64)) -> (KeyState, KvRet) {
    let (low, high) = deadline_ms;
    assert!(low <= high, "an empty deadline interval: {state:?}");
    let narrowed = |low: i64, high: i64| KeyState {
        value: state.value.clone(),
        deadline_ms: Some((low, high)),
    };
    let got = match &op.ret {
        Some((_, KvRet::Int(n))) => Some(*n),
        _ => None,
    };
    if matches!(op.call, KvCall::PexpireTime { .. }) {
        return match got {
            Some(at) if (low..=high).contains(&at) => (narrowed(at, at), KvRet::Int(at)),
            _ => (state.clone(), KvRet::Int(low)),
        };
    }
    // PTTL counts from the display clock, down to 0 (not below).
    let display_ms = op.display_ms.expect("a PTTL records its display clock");
    let ttl = |deadline: i64| (deadline - display_ms).max(0);
    match got {
        Some(0) if low <= display_ms => (narrowed(low, high.min(display_ms)), KvRet::Int(0)),
        Some(n) if n > 0 && (low..=high).contains(&(display_ms + n)) => {
            let at = display_ms + n;
            (narrowed(at, at), KvRet::Int(n))
        }
        _ => (state.clone(), KvRet::Int(ttl(low))),
    }
}

/// What `check` found.
#[derive(Debug, Default)]
pub struct Checked {
    /// Keys whose history is not linearizable, with a description.
    pub violations: Vec<String>,
    /// Keys whose search ran out of `SEARCH_STATES_MAX`.
    pub undecided: Vec<String>,
}

/// Every key's history checked against one key's model, from an absent
/// key. Reads with no reply are left out (they change nothing).
pub fn check(history: &[KvOperation]) -> Checked {
    let parts: Vec<KvOperation> = history
        .iter()
        .filter(|op| op.ret.is_some() || !op.call.is_read())
        .filter(|op| !matches!(op.call, KvCall::Scan { .. }))
        .flat_map(per_key)
        .collect();
    let mut by_key: BTreeMap<&str, Vec<&KvOperation>> = BTreeMap::new();
    for op in &parts {
        let key = op.call.key().expect("per_key gives one-key operations");
        by_key.entry(key).or_default().push(op);
    }
    let mut checked = Checked::default();
    for (key, ops) in by_key {
        let mut search = Search {
            ops: &ops,
            done: vec![false; ops.len()],
            seen: HashSet::new(),
            budget: SEARCH_STATES_MAX,
        };
        match search.run(&KeyState::default()) {
            Some(true) => {}
            Some(false) => checked
                .violations
                .push(format!("key {key}: {}", describe(&ops))),
            None => checked.undecided.push(key.to_string()),
        }
    }
    checked
}

fn describe(ops: &[&KvOperation]) -> String {
    let mut lines = vec![format!(
        "{} operations, none of their orders fits:",
        ops.len()
    )];
    for op in ops {
        let ret = match &op.ret {
            Some((at, ret)) => format!("-> {ret:?} at {at}"),
            None => "-> unknown".to_string(),
        };
        let clock = op
            .read_clock_ms
            .map_or(String::new(), |ms| format!(" (log clock {ms} ms)"));
        lines.push(format!(
            "    c{} {:?} at {}{clock} {ret}",
            op.client, op.call, op.invoke
        ));
    }
    lines.join("\n")
}

struct Search<'a> {
    ops: &'a [&'a KvOperation],
    done: Vec<bool>,
    seen: HashSet<(Vec<bool>, KeyState)>,
    budget: usize,
}

impl Search<'_> {
    /// Whether the operations not done yet can follow from `state`;
    /// `None` when the budget ran out.
    fn run(&mut self, state: &KeyState) -> Option<bool> {
        // The earliest reply among those still to place: whatever goes
        // next must have been invoked before it.
        let first_ret = self
            .ops
            .iter()
            .zip(&self.done)
            .filter(|(_, done)| !**done)
            .filter_map(|(op, _)| op.ret.as_ref().map(|(at, _)| *at))
            .min();
        let Some(first_ret) = first_ret else {
            return Some(true); // only unknown outcomes left: they may never apply
        };
        for i in 0..self.ops.len() {
            let op = self.ops[i];
            if self.done[i] || op.invoke > first_ret {
                continue;
            }
            for (next, expected) in steps(state, op) {
                if op.ret.as_ref().is_some_and(|(_, ret)| *ret != expected) {
                    continue;
                }
                match self.place(i, next) {
                    Some(false) => {}
                    other => return other,
                }
            }
        }
        Some(false)
    }

    /// Operation `i` placed next, leaving the key in `next`.
    fn place(&mut self, i: usize, next: KeyState) -> Option<bool> {
        self.done[i] = true;
        let found = if self.seen.insert((self.done.clone(), next.clone())) {
            if self.budget == 0 {
                self.done[i] = false;
                return None;
            }
            self.budget -= 1;
            self.run(&next)
        } else {
            Some(false)
        };
        self.done[i] = false;
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(call: KvCall, invoke: u64, ret: Option<(u64, KvRet)>) -> KvOperation {
        KvOperation {
            client: 0,
            read_clock_ms: call.is_read().then_some((invoke / 1000) as i64),
            display_ms: call.is_read().then_some((invoke / 1000) as i64),
            call,
            invoke,
            ret,
        }
    }

    /// An operation invoked at `from_ms` and answered at `to_ms` (a
    /// read runs at log clock `from_ms`).
    fn timed(call: KvCall, from_ms: u64, to_ms: u64, ret: KvRet) -> KvOperation {
        op(call, from_ms * 1000, Some((to_ms * 1000, ret)))
    }

    fn set_px(value: &str, px_ms: i64) -> KvCall {
        KvCall::SetPx {
            key: "ka".into(),
            value: value.into(),
            px_ms,
        }
    }

    fn holds(value: &str) -> KvRet {
        KvRet::Value(Some(value.as_bytes().to_vec()))
    }

    fn linearizable(history: &[KvOperation]) -> bool {
        let checked = check(history);
        assert!(checked.undecided.is_empty());
        checked.violations.is_empty()
    }

    #[test]
    fn a_key_expires_at_its_deadline_by_the_log_clock() {
        let written = timed(set_px("a", 100), 0, 10, KvRet::Ok);
        let read = |at_ms, ret| timed(get(), at_ms, at_ms + 1, ret);
        // Deadline between 100 and 110 ms.
        assert!(linearizable(&[written.clone(), read(50, holds("a"))]));
        assert!(linearizable(&[
            written.clone(),
            read(150, KvRet::Value(None))
        ]));
        assert!(!linearizable(&[written.clone(), read(150, holds("a"))]));
        assert!(!linearizable(&[
            written.clone(),
            read(50, KvRet::Value(None))
        ]));
        // At a clock the deadline may or may not have reached: either.
        assert!(linearizable(&[written.clone(), read(100, holds("a"))]));
        assert!(linearizable(&[
            written.clone(),
            read(100, KvRet::Value(None))
        ]));
        // Gone once is gone for good.
        let back = [
            written.clone(),
            read(100, KvRet::Value(None)),
            read(105, holds("a")),
        ];
        assert!(!linearizable(&back));
        // A write after the expiry starts a new key.
        let again = [
            written,
            read(150, KvRet::Value(None)),
            timed(set("b"), 160, 170, KvRet::Ok),
            read(5_000, holds("b")),
        ];
        assert!(linearizable(&again));
    }

    #[test]
    fn a_watch_transaction_commits_only_on_the_value_it_read() {
        let cas = |expect: Option<&str>, value: &str| KvCall::CasSet {
            key: "ka".into(),
            expect: expect.map(|e| e.as_bytes().to_vec()),
            value: value.into(),
        };
        let committed = KvRet::Array(vec![KvRet::Ok]);
        let written = timed(set("a"), 0, 1, KvRet::Ok);
        // Two CASes from the same read cannot both commit.
        let both = [
            written.clone(),
            timed(cas(Some("a"), "b"), 10, 20, committed.clone()),
            timed(cas(Some("a"), "c"), 30, 40, committed.clone()),
        ];
        assert!(!linearizable(&both));
        // One commits, the other aborts: fine; an abort is always allowed.
        let one = [
            written.clone(),
            timed(cas(Some("a"), "b"), 10, 20, committed.clone()),
            timed(cas(Some("a"), "c"), 30, 40, KvRet::Aborted),
            timed(cas(Some("b"), "d"), 50, 60, KvRet::Aborted),
            timed(get(), 70, 71, holds("b")),
        ];
        assert!(linearizable(&one));
        // A CAS that commits over another client's SET lost that write.
        let over = [
            written,
            timed(set("x"), 10, 20, KvRet::Ok),
            timed(cas(Some("a"), "b"), 30, 40, committed),
        ];
        assert!(!linearizable(&over));
    }

    #[test]
    fn hashes_and_sets_go_when_emptied_and_meet_wrongtype() {
        let h = |call: &str, field: &str| {
            let (key, field) = ("h0".to_string(), field.as_bytes().to_vec());
            match call {
                "hset" => KvCall::HSet {
                    key,
                    field,
                    value: b"v".to_vec(),
                },
                "hdel" => KvCall::HDel { key, field },
                _ => KvCall::HGet { key, field },
            }
        };
        let wrong = KvRet::Error(keel_kv::reply::WRONGTYPE.to_string());
        let history = [
            timed(h("hset", "f0"), 0, 1, KvRet::Int(1)),
            timed(h("hset", "f0"), 2, 3, KvRet::Int(0)),
            timed(KvCall::Get { key: "h0".into() }, 4, 5, wrong.clone()),
            timed(KvCall::HLen { key: "h0".into() }, 6, 7, KvRet::Int(1)),
            timed(h("hdel", "f0"), 8, 9, KvRet::Int(1)),
            // Emptied: gone, so GET answers nil and SADD may make it a set.
            timed(KvCall::Get { key: "h0".into() }, 10, 11, KvRet::Value(None)),
            timed(
                KvCall::SAdd {
                    key: "h0".into(),
                    member: b"m".to_vec(),
                },
                12,
                13,
                KvRet::Int(1),
            ),
            timed(h("hget", "f0"), 14, 15, wrong.clone()),
            timed(KvCall::SCard { key: "h0".into() }, 16, 17, KvRet::Int(1)),
        ];
        assert!(linearizable(&history));
        // An emptied hash left behind: GET meets WRONGTYPE.
        let kept = [
            timed(h("hset", "f0"), 0, 1, KvRet::Int(1)),
            timed(h("hdel", "f0"), 2, 3, KvRet::Int(1)),
            timed(KvCall::Get { key: "h0".into() }, 4, 5, wrong),
        ];
        assert!(!linearizable(&kept));
    }

    #[test]
    fn pexpire_and_persist_move_the_deadline() {
        let written = timed(set("a"), 0, 1, KvRet::Ok);
        let pexpire = |ms, at_ms, ret| {
            timed(
                KvCall::Pexpire {
                    key: "ka".into(),
                    ms,
                },
                at_ms,
                at_ms + 1,
                KvRet::Int(ret),
            )
        };
        let persist = |at_ms, ret| {
            timed(
                KvCall::Persist { key: "ka".into() },
                at_ms,
                at_ms + 1,
                KvRet::Int(ret),
            )
        };
        let read = |at_ms, ret| timed(get(), at_ms, at_ms + 1, ret);
        let kept = [
            written.clone(),
            pexpire(100, 10, 1),
            persist(20, 1),
            read(1_000, holds("a")),
        ];
        assert!(linearizable(&kept));
        let expired = [
            written.clone(),
            pexpire(100, 10, 1),
            read(1_000, KvRet::Value(None)),
            persist(1_010, 0),
            pexpire(100, 1_020, 0),
        ];
        assert!(linearizable(&expired));
        // PERSIST of a key without a deadline answers 0, not 1.
        assert!(!linearizable(&[written.clone(), persist(20, 1)]));
        // A deadline PERSIST removed does not come back.
        let resurrected = [
            written,
            pexpire(100, 10, 1),
            persist(20, 1),
            read(1_000, KvRet::Value(None)),
        ];
        assert!(!linearizable(&resurrected));
    }

    #[test]
    fn pexpiretime_and_pttl_show_one_deadline() {
        // SET PX 100 answered by 10 ms: the deadline is in 100..=110.
        let written = timed(set_px("a", 100), 0, 10, KvRet::Ok);
        let ka = || "ka".to_string();
        let at = |at_ms, ret| timed(KvCall::PexpireTime { key: ka() }, at_ms, at_ms + 1, ret);
        let ttl = |at_ms, ret| timed(KvCall::Pttl { key: ka() }, at_ms, at_ms + 1, ret);
        assert!(linearizable(&[written.clone(), at(20, KvRet::Int(104))]));
        assert!(!linearizable(&[written.clone(), at(20, KvRet::Int(99))]));
        assert!(!linearizable(&[written.clone(), at(20, KvRet::Int(111))]));
        // Two reads of one deadline agree.
        let two = [
            written.clone(),
            at(20, KvRet::Int(104)),
            at(30, KvRet::Int(105)),
        ];
        assert!(!linearizable(&two));
        // PTTL at display clock 40: 60..=70 left; it pins the deadline.
        assert!(linearizable(&[written.clone(), ttl(40, KvRet::Int(65))]));
        assert!(!linearizable(&[written.clone(), ttl(40, KvRet::Int(75))]));
        let pinned = [
            written.clone(),
            ttl(40, KvRet::Int(65)),
            at(50, KvRet::Int(105)),
        ];
        assert!(linearizable(&pinned));
        let moved = [
            written.clone(),
            ttl(40, KvRet::Int(65)),
            at(50, KvRet::Int(106)),
        ];
        assert!(!linearizable(&moved));
        // Gone, no deadline.
        assert!(linearizable(&[written.clone(), ttl(500, KvRet::Int(-2))]));
        assert!(!linearizable(&[written, ttl(50, KvRet::Int(-2))]));
        let plain = timed(set("b"), 0, 1, KvRet::Ok);
        assert!(linearizable(&[plain.clone(), ttl(5, KvRet::Int(-1))]));
        assert!(!linearizable(&[plain, at(5, KvRet::Int(100))]));
    }

    #[test]
    fn a_read_that_finds_the_key_alive_bounds_its_deadline() {
        // Deadline in 100..=110. A PEXPIRETIME at log clock 101 may show
        // 103; one at 106 cannot (the key it found alive expires later),
        // nor after a GET at 105 that saw the key.
        let written = timed(set_px("a", 100), 0, 10, KvRet::Ok);
        let at = |at_ms| {
            timed(
                KvCall::PexpireTime { key: "ka".into() },
                at_ms,
                at_ms + 1,
                KvRet::Int(103),
            )
        };
        assert!(linearizable(&[written.clone(), at(101)]));
        assert!(!linearizable(&[written.clone(), at(106)]));
        // A read after the GET at a log clock behind it (a node that
        // lags): alive there, but the deadline is past 105 all the same.
        let seen = timed(get(), 105, 106, holds("a"));
        let behind = KvOperation {
            read_clock_ms: Some(101),
            display_ms: Some(101),
            ..at(107)
        };
        assert!(linearizable(&[written.clone(), behind.clone()]));
        assert!(!linearizable(&[written, seen, behind]));
    }

    #[test]
    fn hgetall_and_smembers_replies_are_compared_in_order_of_their_bytes() {
        let bulk = |b: &str| Reply::Bulk(b.as_bytes().to_vec());
        let value = |b: &str| KvRet::Value(Some(b.as_bytes().to_vec()));
        let hgetall = KvCall::HGetAll { key: "h0".into() };
        let reply = Reply::Map(vec![(bulk("f1"), bulk("y")), (bulk("f0"), bulk("x"))]);
        let sorted = KvRet::Array(vec![value("f0"), value("x"), value("f1"), value("y")]);
        assert_eq!(KvRet::of_call(&reply, &hgetall), sorted);
        let smembers = KvCall::SMembers { key: "s0".into() };
        let reply = Reply::Set(vec![bulk("m2"), bulk("m0")]);
        let sorted = KvRet::Array(vec![value("m0"), value("m2")]);
        assert_eq!(KvRet::of_call(&reply, &smembers), sorted);
        let hset = |field: &str, v: &str| KvCall::HSet {
            key: "h0".into(),
            field: field.into(),
            value: v.into(),
        };
        let history = [
            timed(hset("f1", "y"), 0, 1, KvRet::Int(1)),
            timed(hset("f0", "x"), 2, 3, KvRet::Int(1)),
            timed(
                hgetall.clone(),
                4,
                5,
                KvRet::of_call(
                    &Reply::Array(vec![bulk("f1"), bulk("y"), bulk("f0"), bulk("x")]),
                    &hgetall,
                ),
            ),
        ];
        assert!(linearizable(&history));
        // A field missing from HGETALL.
        let missing = [
            timed(hset("f1", "y"), 0, 1, KvRet::Int(1)),
            timed(hset("f0", "x"), 2, 3, KvRet::Int(1)),
            timed(hgetall, 4, 5, KvRet::Array(vec![value("f1"), value("y")])),
        ];
        assert!(!linearizable(&missing));
        let gone = timed(smembers, 0, 1, KvRet::Array(Vec::new()));
        assert!(linearizable(&[gone]));
    }

    #[test]
    fn a_scan_returns_what_was_there_throughout_and_nothing_unwritten() {
        let incr = timed(KvCall::Incr { key: "n0".into() }, 0, 10, KvRet::Int(1));
        let scan = |invoke, end, keys: &[&str]| ScanIteration {
            client: 0,
            invoke,
            end,
            calls: 2,
            keys: keys.iter().map(|k| k.to_string()).collect(),
        };
        let history = [incr.clone()];
        assert!(check_scans(&[scan(20_000, 30_000, &["n0"])], &history).is_empty());
        // n0 was there from 10 ms on: a scan from 20 ms must return it.
        let missed = check_scans(&[scan(20_000, 30_000, &[])], &history);
        assert_eq!(missed.len(), 1, "{missed:?}");
        // A scan that began before the INCR was answered may miss it.
        assert!(check_scans(&[scan(5_000, 30_000, &[])], &history).is_empty());
        // A key no client wrote before the scan ended.
        let unwritten = check_scans(&[scan(20_000, 30_000, &["n0", "ka"])], &history);
        assert_eq!(unwritten.len(), 1, "{unwritten:?}");
        // A FLUSHDB sent before the scan ended: n0 may be gone.
        let flushed = [incr, timed(KvCall::FlushDb, 15, 40, KvRet::Ok)];
        assert!(check_scans(&[scan(20_000, 30_000, &[])], &flushed).is_empty());
        // The reply's shape.
        let reply = KvRet::Array(vec![
            KvRet::Value(Some(b"42".to_vec())),
            KvRet::Array(vec![KvRet::Value(Some(b"ka".to_vec()))]),
        ]);
        assert_eq!(scan_reply(&reply), Some((42, vec!["ka".to_string()])));
        assert_eq!(scan_reply(&KvRet::Ok), None);
    }

    #[test]
    fn an_unanswered_expiring_write_may_apply_late() {
        // SET PX 100 never answered: it may apply at any later clock, so
        // a read long after may still see it, or not.
        let unknown = op(set_px("a", 100), 0, None);
        let read = |at_ms, ret| timed(get(), at_ms, at_ms + 1, ret);
        assert!(linearizable(&[unknown.clone(), read(5_000, holds("a"))]));
        assert!(linearizable(&[
            unknown.clone(),
            read(5_000, KvRet::Value(None))
        ]));
        // Once read gone after its deadline, it is gone.
        let history = [
            unknown,
            read(50, holds("a")),
            read(5_000, KvRet::Value(None)),
            read(5_010, holds("a")),
        ];
        assert!(!linearizable(&history));
    }

    fn set(value: &str) -> KvCall {
        KvCall::Set {
            key: "ka".into(),
            value: value.into(),
        }
    }

    fn get() -> KvCall {
        KvCall::Get { key: "ka".into() }
    }

    #[test]
    fn overlapping_writes_may_land_in_either_order() {
        let history = [
            op(set("a"), 0, Some((10, KvRet::Ok))),
            op(set("b"), 1, Some((9, KvRet::Ok))),
            op(get(), 11, Some((12, KvRet::Value(Some(b"a".to_vec()))))),
        ];
        assert!(check(&history).violations.is_empty());
    }

    #[test]
    fn a_stale_read_and_a_lost_write_are_not_linearizable() {
        let stale = [
            op(set("a"), 0, Some((5, KvRet::Ok))),
            op(set("b"), 6, Some((9, KvRet::Ok))),
            op(get(), 10, Some((12, KvRet::Value(Some(b"a".to_vec()))))),
        ];
        assert_eq!(check(&stale).violations.len(), 1);
        let counter = |invoke, ret| {
            op(
                KvCall::Incr { key: "n0".into() },
                invoke,
                Some((invoke + 1, KvRet::Int(ret))),
            )
        };
        let lost = [counter(0, 1), counter(2, 2), counter(4, 2)];
        assert_eq!(check(&lost).violations.len(), 1);
    }

    #[test]
    fn an_unknown_write_may_or_may_not_apply() {
        let history = [
            op(set("a"), 0, None),
            op(get(), 1, Some((2, KvRet::Value(None)))),
            op(get(), 3, Some((4, KvRet::Value(Some(b"a".to_vec()))))),
        ];
        assert!(check(&history).violations.is_empty());
        let history = [
            op(set("a"), 0, None),
            op(get(), 3, Some((4, KvRet::Value(Some(b"a".to_vec()))))),
            op(get(), 5, Some((6, KvRet::Value(None)))),
        ];
        assert_eq!(check(&history).violations.len(), 1);
    }

    #[test]
    fn spanning_requests_are_checked_key_by_key_and_whole() {
        let value = |v: &str| KvRet::Value(Some(v.as_bytes().to_vec()));
        let all = |v: &str| KvRet::Array(vec![value(v), value(v), value(v)]);
        let mset = op(
            KvCall::Mset {
                value: b"x".to_vec(),
            },
            0,
            Some((1, KvRet::Ok)),
        );
        let exec = op(
            KvCall::Exec {
                value: b"y".to_vec(),
            },
            2,
            Some((3, KvRet::Array(vec![KvRet::Ok; 3]))),
        );
        let parts = per_key(&exec);
        assert_eq!(parts.len(), SPAN_KEYS.len());
        assert!(parts.iter().all(|p| p.ret == Some((3, KvRet::Ok))));
        let history = [
            mset.clone(),
            op(KvCall::Mget, 1, Some((2, all("x")))),
            exec.clone(),
            op(KvCall::Mget, 4, Some((5, all("y")))),
        ];
        assert!(check(&history).violations.is_empty());
        assert!(torn_spanning_reads(&history).is_empty());
        // An MGET after the EXEC that reads the MSET's value on one key:
        // that key's history is not linearizable; an MGET that reads two
        // values saw a write in part.
        let torn = KvRet::Array(vec![value("y"), value("x"), value("y")]);
        let history = [mset, exec, op(KvCall::Mget, 4, Some((5, torn)))];
        assert_eq!(check(&history).violations.len(), 1);
        assert_eq!(torn_spanning_reads(&history).len(), 1);
    }
}
