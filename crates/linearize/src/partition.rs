//! P-compositionality: operations on different top-level subtrees commute and
//! cannot observe each other, so each group of subtrees is checked alone.
//!
//! Every operation gets the keys of the subtrees it touches ("/a" for /a,
//! /a/b/c, ...); the keys of one operation are merged with union-find. Multi
//! ops merge their sub-ops' subtrees; CloseSession merges every subtree where
//! its session ever created an ephemeral; anything naming "/" itself (e.g.
//! getChildren /) merges everything. Sequential creates directly under "/"
//! share the root's counter and can produce any top-level name "prefix" +
//! 10 digits, so they share one key that is merged with every such name.

use std::collections::{BTreeMap, BTreeSet};

use crate::check::Prepared;
use crate::history::Call;
use crate::model::{seq_counter, split};

/// One independent sub-history.
#[derive(Debug)]
pub(crate) struct Part {
    /// Indices into the prepared operations, ascending.
    pub ops: Vec<usize>,
    /// The subtrees, for reports ("/a", ...), sorted.
    pub keys: Vec<String>,
}

const ROOT: &str = "/";
const ROOT_SEQ: &str = "/<sequential children of />";
/// Operations touching no node (closeSession without ephemerals, empty multi).
const NOTHING: &str = "<no node>";

/// Splits the operations into independent parts, smallest first (ties: by
/// first operation) so that cheap parts are decided first.
pub(crate) fn partition(ops: &[Prepared]) -> Vec<Part> {
    let ephemerals = ephemeral_keys(ops);
    let mut keys = Interner::default();
    let op_keys: Vec<Vec<usize>> = ops
        .iter()
        .map(|p| {
            op_keys(&p.op.call, p.op.session, &ephemerals)
                .iter()
                .map(|k| keys.id(k))
                .collect()
        })
        .collect();
    let mut sets = UnionFind::new(keys.names.len());
    for ks in &op_keys {
        ks.windows(2).for_each(|w| sets.union(w[0], w[1]));
    }
    merge_root(&keys, &mut sets);
    merge_root_sequentials(ops, &keys, &mut sets);
    groups(&op_keys, &keys, &mut sets)
}

fn groups(op_keys: &[Vec<usize>], keys: &Interner, sets: &mut UnionFind) -> Vec<Part> {
    let mut by_root: BTreeMap<usize, Part> = BTreeMap::new();
    for (i, ks) in op_keys.iter().enumerate() {
        let root = sets.find(ks[0]);
        by_root
            .entry(root)
            .or_insert_with(|| Part {
                ops: Vec::new(),
                keys: Vec::new(),
            })
            .ops
            .push(i);
    }
    for (id, name) in keys.names.iter().enumerate() {
        if let Some(part) = by_root.get_mut(&sets.find(id)) {
            part.keys.push(name.clone());
        }
    }
    let mut parts: Vec<Part> = by_root.into_values().collect();
    parts.iter_mut().for_each(|p| p.keys.sort());
    parts.sort_by_key(|p| (p.ops.len(), p.ops[0]));
    parts
}

/// The subtree key of a path: "/" for the root, else "/" + first component.
fn path_key(path: &str) -> String {
    match path.trim_start_matches('/').split('/').next() {
        Some(first) if !first.is_empty() => format!("/{first}"),
        _ => ROOT.to_string(),
    }
}

fn is_root_sequential(call: &Call) -> bool {
    matches!(call, Call::Create { path, sequential: true, .. } if split(path).0 == "/")
}

/// The keys `call` touches; never empty.
fn op_keys(call: &Call, session: i64, ephemerals: &BTreeMap<i64, BTreeSet<String>>) -> Vec<String> {
    let keys: Vec<String> = match call {
        Call::Multi { ops } => ops
            .iter()
            .flat_map(|op| op_keys(op, session, ephemerals))
            .collect(),
        Call::CloseSession => match ephemerals.get(&session) {
            Some(ks) => ks.iter().cloned().collect(),
            None => Vec::new(),
        },
        call if is_root_sequential(call) => vec![ROOT_SEQ.to_string()],
        call => vec![path_key(call.path().expect("single op has a path"))],
    };
    if keys.is_empty() {
        vec![NOTHING.to_string()]
    } else {
        keys
    }
}

/// For each session: the keys of every ephemeral create it issued.
fn ephemeral_keys(ops: &[Prepared]) -> BTreeMap<i64, BTreeSet<String>> {
    let mut out: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    for p in ops {
        for create in ephemeral_creates(&p.op.call) {
            let keys = op_keys(create, p.op.session, &BTreeMap::new());
            out.entry(p.op.session).or_default().extend(keys);
        }
    }
    out
}

/// The ephemeral creates a call makes, inside a multi too.
pub(crate) fn ephemeral_creates(call: &Call) -> Vec<&Call> {
    match call {
        Call::Create {
            ephemeral: true, ..
        } => vec![call],
        Call::Multi { ops } => ops.iter().flat_map(ephemeral_creates).collect(),
        _ => Vec::new(),
    }
}

/// Anything touching "/" itself touches every subtree.
fn merge_root(keys: &Interner, sets: &mut UnionFind) {
    if let Some(&root) = keys.ids.get(ROOT) {
        (0..keys.names.len()).for_each(|k| sets.union(root, k));
    }
}

/// Root-level sequential creates may produce any top-level "prefix"+digits.
fn merge_root_sequentials(ops: &[Prepared], keys: &Interner, sets: &mut UnionFind) {
    let Some(&seq_key) = keys.ids.get(ROOT_SEQ) else {
        return;
    };
    let mut prefixes = BTreeSet::new();
    for p in ops {
        collect_root_seq_prefixes(&p.op.call, &mut prefixes);
    }
    for (id, name) in keys.names.iter().enumerate() {
        let Some(top) = name.strip_prefix('/') else {
            continue;
        };
        if prefixes
            .iter()
            .any(|prefix| seq_counter(prefix, top).is_some())
        {
            sets.union(seq_key, id);
        }
    }
}

fn collect_root_seq_prefixes(call: &Call, out: &mut BTreeSet<String>) {
    match call {
        Call::Multi { ops } => ops.iter().for_each(|op| collect_root_seq_prefixes(op, out)),
        Call::Create { path, .. } if is_root_sequential(call) => {
            out.insert(split(path).1.to_string());
        }
        _ => {}
    }
}

#[derive(Default)]
struct Interner {
    ids: BTreeMap<String, usize>,
    names: Vec<String>,
}

impl Interner {
    fn id(&mut self, name: &str) -> usize {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }
}

struct UnionFind {
    parent: Vec<usize>,
}

impl UnionFind {
    fn new(n: usize) -> UnionFind {
        UnionFind {
            parent: (0..n).collect(),
        }
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    /// Merges the sets of `a` and `b`; the smaller id becomes the root.
    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        self.parent[hi] = lo;
    }
}
