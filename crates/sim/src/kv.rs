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
/// States the search of one key may visit before it gives up
/// (undecided, counted in the stats).
pub const SEARCH_STATES_MAX: usize = 200_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvCall {
    Set { key: String, value: Vec<u8> },
    Incr { key: String },
    Del { key: String },
    Get { key: String },
}

impl KvCall {
    pub fn key(&self) -> &str {
        match self {
            KvCall::Set { key, .. }
            | KvCall::Incr { key }
            | KvCall::Del { key }
            | KvCall::Get { key } => key,
        }
    }

    pub fn is_read(&self) -> bool {
        matches!(self, KvCall::Get { .. })
    }

    /// The command's arguments, as a client sends them.
    pub fn args(&self) -> Vec<Vec<u8>> {
        let words: Vec<&[u8]> = match self {
            KvCall::Set { key, value } => vec![b"SET", key.as_bytes(), value],
            KvCall::Incr { key } => vec![b"INCR", key.as_bytes()],
            KvCall::Del { key } => vec![b"DEL", key.as_bytes()],
            KvCall::Get { key } => vec![b"GET", key.as_bytes()],
        };
        words.into_iter().map(<[u8]>::to_vec).collect()
    }
}

/// A reply as the history keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvRet {
    Ok,
    Int(i64),
    Value(Option<Vec<u8>>),
    Error(String),
}

impl KvRet {
    pub fn of(reply: &Reply) -> KvRet {
        match reply {
            Reply::Status(text) if text == "OK" => KvRet::Ok,
            Reply::Integer(n) => KvRet::Int(*n),
            Reply::Bulk(value) => KvRet::Value(Some(value.clone())),
            Reply::Null => KvRet::Value(None),
            Reply::Error(text) => KvRet::Error(text.to_string()),
            other => KvRet::Error(format!("unexpected reply {other:?}")),
        }
    }
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
    let mut by_key: BTreeMap<&str, Vec<&KvOperation>> = BTreeMap::new();
    for op in history {
        if op.ret.is_none() && op.call.is_read() {
            continue;
        }
        by_key.entry(op.call.key()).or_default().push(op);
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
}
