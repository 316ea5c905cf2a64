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

use std::collections::{BTreeMap, HashSet};

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
}

impl KvCall {
    /// The single key of a one-key command (`None` for the spanning ones:
    /// see `per_key`).
    pub fn key(&self) -> Option<&str> {
        match self {
            KvCall::Set { key, .. }
            | KvCall::Incr { key }
            | KvCall::Del { key }
            | KvCall::Get { key } => Some(key),
            KvCall::Mset { .. } | KvCall::Exec { .. } | KvCall::Mget => None,
        }
    }

    pub fn is_read(&self) -> bool {
        matches!(self, KvCall::Get { .. } | KvCall::Mget)
    }

    /// The command's arguments, as a client sends them (a transaction's:
    /// `commands`).
    pub fn args(&self) -> Vec<Vec<u8>> {
        let words: Vec<&[u8]> = match self {
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
    pub fn op(&self, seq: u64) -> keel_kv::Op {
        assert!(!self.is_read(), "reads are not proposed");
        match self {
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
}

impl KvRet {
    pub fn of(reply: &Reply) -> KvRet {
        match reply {
            Reply::Status(text) if text == "OK" => KvRet::Ok,
            Reply::Integer(n) => KvRet::Int(*n),
            Reply::Bulk(value) => KvRet::Value(Some(value.clone())),
            Reply::Null => KvRet::Value(None),
            Reply::Error(text) => KvRet::Error(text.to_string()),
            Reply::Array(items) => KvRet::Array(items.iter().map(KvRet::of).collect()),
            other => KvRet::Error(format!("unexpected reply {other:?}")),
        }
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
}

/// One key's value after `call`, and the reply Redis gives.
fn step(value: &Option<Vec<u8>>, call: &KvCall) -> (Option<Vec<u8>>, KvRet) {
    match call {
        KvCall::Set { value: new, .. } => (Some(new.clone()), KvRet::Ok),
        KvCall::Get { .. } => (value.clone(), KvRet::Value(value.clone())),
        KvCall::Del { .. } => (None, KvRet::Int(i64::from(value.is_some()))),
        KvCall::Incr { .. } => {
            let current = match value {
                None => Some(0),
                Some(bytes) => std::str::from_utf8(bytes)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok()),
            };
            match current.and_then(|n| n.checked_add(1)) {
                Some(n) => (Some(n.to_string().into_bytes()), KvRet::Int(n)),
                None => (
                    value.clone(),
                    KvRet::Error(keel_kv::reply::NOT_INTEGER.to_string()),
                ),
            }
        }
        KvCall::Mset { .. } | KvCall::Exec { .. } | KvCall::Mget => {
            unreachable!("per_key splits spanning calls into one-key ones")
        }
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
        match search.run(&None) {
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
        lines.push(format!(
            "    c{} {:?} at {} {ret}",
            op.client, op.call, op.invoke
        ));
    }
    lines.join("\n")
}

struct Search<'a> {
    ops: &'a [&'a KvOperation],
    done: Vec<bool>,
    seen: HashSet<(Vec<bool>, Option<Vec<u8>>)>,
    budget: usize,
}

impl Search<'_> {
    /// Whether the operations not done yet can follow from `value`;
    /// `None` when the budget ran out.
    fn run(&mut self, value: &Option<Vec<u8>>) -> Option<bool> {
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
            let (next, expected) = step(value, &op.call);
            if let Some((_, ret)) = &op.ret {
                if *ret != expected {
                    continue;
                }
            }
            self.done[i] = true;
            let fresh = self.seen.insert((self.done.clone(), next.clone()));
            let found = if fresh {
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
            match found {
                Some(false) => {}
                other => return other,
            }
        }
        Some(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(call: KvCall, invoke: u64, ret: Option<(u64, KvRet)>) -> KvOperation {
        KvOperation {
            client: 0,
            call,
            invoke,
            ret,
        }
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
