//! The sequential specification: a ZooKeeper data tree, mutated in place with
//! an undo log (the search backtracks by rolling the log back) and carrying
//! an incrementally maintained 128-bit fingerprint of its whole state.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use crate::history::{err, Call, Ret};

/// How a sequential create picks its 10-digit counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seq {
    /// The smallest counter the parent allows (unknown outcome, or an error).
    Next,
    /// The counter the client saw; must exceed every earlier one of the parent.
    Counter(u64),
    /// The client saw a name that no sequential create can produce.
    Invalid,
}

#[derive(Clone, Debug)]
pub(crate) struct Node {
    data: Vec<u8>,
    version: i32,
    owner: Option<i64>,
    /// Smallest counter a sequential create under this node may use: one more
    /// than the last one used, counting plain creates too (ZooKeeper's
    /// cversion moves on every child create and only grows while the node
    /// lives; a recreated node starts again at 0).
    next_seq: u64,
    hash: [u64; 2],
}

impl Node {
    fn new(data: Vec<u8>, owner: Option<i64>) -> Node {
        Node {
            data,
            version: 0,
            owner,
            next_seq: 0,
            hash: [0; 2],
        }
    }
}

/// One entry of the undo log.
#[derive(Debug)]
pub(crate) enum Undo {
    Node { path: String, old: Option<Node> },
    Closed(i64),
}

#[derive(Debug)]
pub(crate) struct Tree {
    nodes: BTreeMap<String, Node>,
    closed: BTreeSet<i64>,
    fp: [u64; 2],
}

/// The parent path and the last name of `path` ("/a/b" -> ("/a", "b")).
pub(crate) fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) | None => ("/", path.trim_start_matches('/')),
        Some(i) => (&path[..i], &path[i + 1..]),
    }
}

/// `parent` + "/" + `name`.
pub(crate) fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// The counter of `got` if it is `prefix` followed by exactly 10 digits.
pub(crate) fn seq_counter(prefix: &str, got: &str) -> Option<u64> {
    let rest = got.strip_prefix(prefix)?;
    let digits = rest.len() == 10 && rest.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| rest.parse().expect("10 digits"))
}

fn error(code: i32) -> Option<Ret> {
    Some(Ret::Error(code))
}

impl Tree {
    /// The initial state: only "/" (empty data, version 0).
    pub fn new() -> Tree {
        let mut tree = Tree {
            nodes: BTreeMap::new(),
            closed: BTreeSet::new(),
            fp: [0; 2],
        };
        tree.put("/", Some(Node::new(Vec::new(), None)), &mut Vec::new());
        tree
    }

    pub fn fingerprint(&self) -> [u64; 2] {
        self.fp
    }

    /// Applies `call` as run by `session` and returns ZooKeeper's answer; an
    /// error leaves the state unchanged. `None`: no such transition (a seen
    /// sequential counter the state does not allow). `seq` gives the counters
    /// of the sequential creates of `call`, in order (missing: `Seq::Next`).
    pub fn apply(
        &mut self,
        call: &Call,
        session: i64,
        seq: &[Seq],
        undo: &mut Vec<Undo>,
    ) -> Option<Ret> {
        self.step(call, session, &mut seq.iter(), undo)
    }

    /// Undoes log entries back to length `mark`.
    pub fn rollback(&mut self, undo: &mut Vec<Undo>, mark: usize) {
        while undo.len() > mark {
            match undo.pop().expect("len > mark") {
                Undo::Node { path, old } => self.restore(path, old),
                Undo::Closed(session) => {
                    self.closed.remove(&session);
                    self.unhash(closed_hash(session));
                }
            }
        }
    }

    /// One line per node and per closed session, for reports.
    pub fn describe(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .nodes
            .iter()
            .map(|(p, n)| describe_node(p, n))
            .collect();
        lines.extend(self.closed.iter().map(|s| format!("session {s:#x} closed")));
        lines
    }

    fn step<'s>(
        &mut self,
        call: &Call,
        session: i64,
        seq: &mut impl Iterator<Item = &'s Seq>,
        undo: &mut Vec<Undo>,
    ) -> Option<Ret> {
        if self.closed.contains(&session) && *call != Call::CloseSession {
            return error(err::SESSION_EXPIRED);
        }
        match call {
            Call::Create {
                path,
                data,
                ephemeral,
                sequential,
            } => {
                let pick = if *sequential {
                    seq.next().unwrap_or(&Seq::Next)
                } else {
                    &Seq::Next
                };
                let owner = ephemeral.then_some(session);
                self.create(path, data, owner, *sequential, pick, undo)
            }
            Call::Delete { path, version } => self.delete(path, *version, undo),
            Call::SetData {
                path,
                data,
                version,
            } => self.set_data(path, data, *version, undo),
            Call::Check { path, version } => self.check(path, *version),
            Call::Multi { ops } => self.multi(ops, session, seq, undo),
            Call::GetData { path } => self.get_data(path),
            Call::Exists { path } => Some(Ret::Exists(
                self.nodes.get(path.as_str()).map(|n| n.version),
            )),
            Call::GetChildren { path } => self.get_children(path),
            Call::CloseSession => Some(self.close(session, undo)),
        }
    }

    fn create(
        &mut self,
        path: &str,
        data: &[u8],
        owner: Option<i64>,
        sequential: bool,
        pick: &Seq,
        undo: &mut Vec<Undo>,
    ) -> Option<Ret> {
        if path == "/" && !sequential {
            return error(err::NODE_EXISTS);
        }
        let (parent_path, _) = split(path);
        let Some(parent) = self.nodes.get(parent_path) else {
            return error(err::NO_NODE);
        };
        let counter = match (sequential, pick) {
            (false, _) => None,
            (true, Seq::Next) => Some(parent.next_seq),
            (true, Seq::Counter(c)) if *c >= parent.next_seq => Some(*c),
            (true, _) => return None,
        };
        let full = match counter {
            Some(c) => format!("{path}{c:010}"),
            None => path.to_string(),
        };
        if self.nodes.contains_key(&full) {
            return error(err::NODE_EXISTS);
        }
        if parent.owner.is_some() {
            return error(err::NO_CHILDREN_FOR_EPHEMERALS);
        }
        // Every create moves the parent's cversion, sequential or not, so a
        // sequential create whose name nobody saw (`Seq::Next`) gets the
        // counter after a plain sibling's create too.
        let parent = Node {
            data: parent.data.clone(),
            next_seq: counter.unwrap_or(parent.next_seq) + 1,
            ..*parent
        };
        self.put(parent_path, Some(parent), undo);
        self.put(&full, Some(Node::new(data.to_vec(), owner)), undo);
        Some(Ret::Created { path: full })
    }

    fn delete(&mut self, path: &str, version: i32, undo: &mut Vec<Undo>) -> Option<Ret> {
        if path == "/" {
            return error(err::BAD_ARGUMENTS);
        }
        let Some(node) = self.nodes.get(path) else {
            return error(err::NO_NODE);
        };
        if version != -1 && version != node.version {
            return error(err::BAD_VERSION);
        }
        if self.has_children(path) {
            return error(err::NOT_EMPTY);
        }
        self.put(path, None, undo);
        Some(Ret::Done)
    }

    fn set_data(
        &mut self,
        path: &str,
        data: &[u8],
        version: i32,
        undo: &mut Vec<Undo>,
    ) -> Option<Ret> {
        let Some(node) = self.nodes.get(path) else {
            return error(err::NO_NODE);
        };
        if version != -1 && version != node.version {
            return error(err::BAD_VERSION);
        }
        let version = node.version.wrapping_add(1);
        let node = Node {
            data: data.to_vec(),
            version,
            ..*node
        };
        self.put(path, Some(node), undo);
        Some(Ret::Set { version })
    }

    fn check(&self, path: &str, version: i32) -> Option<Ret> {
        let Some(node) = self.nodes.get(path) else {
            return error(err::NO_NODE);
        };
        if version != -1 && version != node.version {
            return error(err::BAD_VERSION);
        }
        Some(Ret::Done)
    }

    /// All or nothing: the first failing op's error, with every earlier op undone.
    fn multi<'s>(
        &mut self,
        ops: &[Call],
        session: i64,
        seq: &mut impl Iterator<Item = &'s Seq>,
        undo: &mut Vec<Undo>,
    ) -> Option<Ret> {
        let mark = undo.len();
        let mut rets = Vec::with_capacity(ops.len());
        for op in ops {
            match self.step(op, session, seq, undo) {
                Some(Ret::Error(code)) => {
                    self.rollback(undo, mark);
                    return error(code);
                }
                Some(ret) => rets.push(ret),
                None => {
                    self.rollback(undo, mark);
                    return None;
                }
            }
        }
        Some(Ret::Multi(rets))
    }

    fn get_data(&self, path: &str) -> Option<Ret> {
        match self.nodes.get(path) {
            Some(n) => Some(Ret::Data {
                data: n.data.clone(),
                version: n.version,
            }),
            None => error(err::NO_NODE),
        }
    }

    fn get_children(&self, path: &str) -> Option<Ret> {
        if !self.nodes.contains_key(path) {
            return error(err::NO_NODE);
        }
        let prefix = child_prefix(path);
        let names = self
            .descendants(&prefix)
            .map(|p| &p[prefix.len()..])
            .filter(|name| !name.contains('/'))
            .map(str::to_string)
            .collect();
        Some(Ret::Children(names))
    }

    /// Deletes the session's ephemerals and marks it closed (idempotent).
    fn close(&mut self, session: i64, undo: &mut Vec<Undo>) -> Ret {
        if self.closed.contains(&session) {
            return Ret::Done;
        }
        let owned: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.owner == Some(session))
            .map(|(p, _)| p.clone())
            .collect();
        for path in owned {
            self.put(&path, None, undo);
        }
        self.closed.insert(session);
        self.rehash(closed_hash(session));
        undo.push(Undo::Closed(session));
        Ret::Done
    }

    fn has_children(&self, path: &str) -> bool {
        self.descendants(&child_prefix(path)).next().is_some()
    }

    /// Paths strictly below the node whose child prefix is `prefix`, sorted.
    fn descendants<'t>(&'t self, prefix: &'t str) -> impl Iterator<Item = &'t str> + 't {
        let after = (Bound::Excluded(prefix), Bound::Unbounded);
        self.nodes
            .range::<str, _>(after)
            .map(|(p, _)| p.as_str())
            .take_while(move |p| p.starts_with(prefix))
    }

    /// Replaces (or with `None` removes) the node at `path`, logging the old one.
    fn put(&mut self, path: &str, node: Option<Node>, undo: &mut Vec<Undo>) {
        let (path, old) = match node {
            Some(mut n) => {
                n.hash = node_hash(path, &n);
                self.rehash(n.hash);
                match self.nodes.get_mut(path) {
                    Some(slot) => (path.to_string(), Some(std::mem::replace(slot, n))),
                    None => (path.to_string(), self.nodes.insert(path.to_string(), n)),
                }
            }
            None => match self.nodes.remove_entry(path) {
                Some((key, old)) => (key, Some(old)),
                None => (path.to_string(), None),
            },
        };
        if let Some(o) = &old {
            self.unhash(o.hash);
        }
        undo.push(Undo::Node { path, old });
    }

    fn restore(&mut self, path: String, old: Option<Node>) {
        let current = match old {
            Some(n) => {
                self.rehash(n.hash);
                match self.nodes.get_mut(path.as_str()) {
                    Some(slot) => Some(std::mem::replace(slot, n)),
                    None => self.nodes.insert(path, n),
                }
            }
            None => self.nodes.remove(&path),
        };
        if let Some(c) = current {
            self.unhash(c.hash);
        }
    }

    fn rehash(&mut self, h: [u64; 2]) {
        self.fp = [self.fp[0].wrapping_add(h[0]), self.fp[1].wrapping_add(h[1])];
    }

    fn unhash(&mut self, h: [u64; 2]) {
        self.fp = [self.fp[0].wrapping_sub(h[0]), self.fp[1].wrapping_sub(h[1])];
    }
}

fn child_prefix(path: &str) -> String {
    if path == "/" {
        "/".to_string()
    } else {
        format!("{path}/")
    }
}

fn describe_node(path: &str, n: &Node) -> String {
    let data = Ret::Data {
        data: n.data.clone(),
        version: n.version,
    };
    let mut line = format!("{path}: {data}");
    if let Some(s) = n.owner {
        line += &format!(" ephemeral(session {s:#x})");
    }
    if n.next_seq > 0 {
        line += &format!(" next-sequential>={}", n.next_seq);
    }
    line
}

// ---- hashing (deterministic, no std RandomState) ----

const SEEDS: [u64; 2] = [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344];

/// splitmix64's output function: a bijective 64-bit mixer.
pub(crate) fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn absorb(h: u64, word: u64) -> u64 {
    mix(h ^ word)
}

fn hash_bytes(mut h: u64, bytes: &[u8]) -> u64 {
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = absorb(h, u64::from_le_bytes(word));
    }
    absorb(h, bytes.len() as u64)
}

fn node_hash(path: &str, n: &Node) -> [u64; 2] {
    SEEDS.map(|seed| {
        let mut h = hash_bytes(seed, path.as_bytes());
        h = hash_bytes(h, &n.data);
        h = absorb(h, n.version as u32 as u64);
        h = absorb(h, n.owner.map_or(0, |_| 1));
        h = absorb(h, n.owner.unwrap_or(0) as u64);
        absorb(h, n.next_seq)
    })
}

fn closed_hash(session: i64) -> [u64; 2] {
    SEEDS.map(|seed| absorb(absorb(seed, 0x00c1_05ed), session as u64))
}

/// Random-looking 128-bit key of operation `i` (Zobrist hashing of op sets).
pub(crate) fn zobrist(i: usize) -> [u64; 2] {
    SEEDS.map(|seed| absorb(absorb(seed, 0x0020_6157), i as u64))
}
