//! An independent, deliberately naive implementation of ZooKeeper's
//! semantics (whole-tree scans, cloned scratch trees for multi, sequential
//! counters from a real cversion) and a generator of concurrent histories
//! that are linearizable by construction: each operation is applied to the
//! reference tree at a random moment between its invocation and its return.

use std::collections::{BTreeMap, BTreeSet};

use crate::history::{err, Call, Operation, Ret};

/// splitmix64.
pub(super) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone)]
struct RefNode {
    data: Vec<u8>,
    version: i32,
    cversion: i32,
    owner: Option<i64>,
}

#[derive(Clone)]
pub(super) struct RefTree {
    nodes: BTreeMap<String, RefNode>,
    closed: BTreeSet<i64>,
}

fn parent_of(path: &str) -> String {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/".to_string(),
        Some((parent, _)) => parent.to_string(),
    }
}

impl RefTree {
    pub fn new() -> RefTree {
        let root = RefNode {
            data: Vec::new(),
            version: 0,
            cversion: 0,
            owner: None,
        };
        RefTree {
            nodes: BTreeMap::from([("/".to_string(), root)]),
            closed: BTreeSet::new(),
        }
    }

    pub fn version(&self, path: &str) -> Option<i32> {
        self.nodes.get(path).map(|n| n.version)
    }

    /// Existing paths other than "/".
    pub fn paths(&self) -> Vec<String> {
        self.nodes.keys().filter(|p| *p != "/").cloned().collect()
    }

    fn child_names(&self, path: &str) -> Vec<String> {
        let names = self
            .nodes
            .keys()
            .filter(|p| *p != "/" && parent_of(p) == path);
        names
            .map(|p| p.rsplit('/').next().unwrap().to_string())
            .collect()
    }

    pub fn apply(&mut self, call: &Call, session: i64) -> Ret {
        if self.closed.contains(&session) && *call != Call::CloseSession {
            return Ret::Error(err::SESSION_EXPIRED);
        }
        match call {
            Call::Create {
                path,
                data,
                ephemeral,
                sequential,
            } => self.create(path, data, ephemeral.then_some(session), *sequential),
            Call::Delete { path, version } => self.delete(path, *version),
            Call::SetData {
                path,
                data,
                version,
            } => self.set_data(path, data, *version),
            Call::Check { path, version } => match self.nodes.get(path) {
                None => Ret::Error(err::NO_NODE),
                Some(n) if *version != -1 && *version != n.version => Ret::Error(err::BAD_VERSION),
                Some(_) => Ret::Done,
            },
            Call::Multi { ops } => self.multi(ops, session),
            Call::GetData { path } => match self.nodes.get(path) {
                None => Ret::Error(err::NO_NODE),
                Some(n) => Ret::Data {
                    data: n.data.clone(),
                    version: n.version,
                },
            },
            Call::Exists { path } => Ret::Exists(self.version(path)),
            Call::GetChildren { path } if self.nodes.contains_key(path) => {
                Ret::Children(self.child_names(path))
            }
            Call::GetChildren { .. } => Ret::Error(err::NO_NODE),
            Call::CloseSession => self.close(session),
        }
    }

    fn create(&mut self, path: &str, data: &[u8], owner: Option<i64>, sequential: bool) -> Ret {
        let parent = parent_of(path);
        let Some(p) = self.nodes.get(&parent).cloned() else {
            return Ret::Error(err::NO_NODE);
        };
        let name = if sequential {
            format!("{path}{:010}", p.cversion)
        } else {
            path.to_string()
        };
        if self.nodes.contains_key(&name) {
            return Ret::Error(err::NODE_EXISTS);
        }
        if p.owner.is_some() {
            return Ret::Error(err::NO_CHILDREN_FOR_EPHEMERALS);
        }
        self.nodes.get_mut(&parent).unwrap().cversion += 1;
        let node = RefNode {
            data: data.to_vec(),
            version: 0,
            cversion: 0,
            owner,
        };
        self.nodes.insert(name.clone(), node);
        Ret::Created { path: name }
    }

    fn delete(&mut self, path: &str, version: i32) -> Ret {
        let Some(n) = self.nodes.get(path) else {
            return Ret::Error(err::NO_NODE);
        };
        if version != -1 && version != n.version {
            return Ret::Error(err::BAD_VERSION);
        }
        if !self.child_names(path).is_empty() {
            return Ret::Error(err::NOT_EMPTY);
        }
        self.nodes.remove(path);
        self.nodes.get_mut(&parent_of(path)).unwrap().cversion += 1;
        Ret::Done
    }

    fn set_data(&mut self, path: &str, data: &[u8], version: i32) -> Ret {
        let Some(n) = self.nodes.get_mut(path) else {
            return Ret::Error(err::NO_NODE);
        };
        if version != -1 && version != n.version {
            return Ret::Error(err::BAD_VERSION);
        }
        n.version += 1;
        n.data = data.to_vec();
        Ret::Set { version: n.version }
    }

    fn multi(&mut self, ops: &[Call], session: i64) -> Ret {
        let mut scratch = self.clone();
        let mut rets = Vec::new();
        for op in ops {
            match scratch.apply(op, session) {
                Ret::Error(code) => return Ret::Error(code),
                ret => rets.push(ret),
            }
        }
        *self = scratch;
        Ret::Multi(rets)
    }

    fn close(&mut self, session: i64) -> Ret {
        if self.closed.insert(session) {
            let owned: Vec<String> = self
                .nodes
                .iter()
                .filter(|(_, n)| n.owner == Some(session))
                .map(|(p, _)| p.clone())
                .collect();
            for path in owned {
                self.nodes.remove(&path);
                self.nodes.get_mut(&parent_of(&path)).unwrap().cversion += 1;
            }
        }
        Ret::Done
    }
}

/// Shape of a generated history.
pub(super) struct Shape {
    pub clients: usize,
    pub ops: usize,
    /// Top-level directories /d0, /d1, ...; each has ~5 paths in play.
    pub dirs: usize,
    /// Percent chance, at each step of a pending op, that its outcome is lost.
    pub lost_percent: usize,
}

struct Pending {
    id: usize,
    effect: Option<Ret>,
}

struct Client {
    session: i64,
    sessions: i64,
    pending: Option<Pending>,
}

/// Generates a linearizable history of `shape` from `seed`.
pub(super) fn generate(seed: u64, shape: &Shape) -> Vec<Operation> {
    let mut g = Generator {
        rng: Rng::new(seed),
        tree: RefTree::new(),
        ops: Vec::new(),
        time: 0,
        limbo: Vec::new(),
        dirs: shape.dirs,
    };
    let mut clients: Vec<Client> = (0..shape.clients)
        .map(|c| Client {
            session: (c as i64 + 1) << 16,
            sessions: 0,
            pending: None,
        })
        .collect();
    while g.ops.len() < shape.ops || clients.iter().any(|c| c.pending.is_some()) {
        let c = g.rng.below(clients.len());
        g.step(c, &mut clients[c], shape);
        if !g.limbo.is_empty() && g.rng.chance(2) {
            g.apply_limbo();
        }
    }
    g.ops
}

struct Generator {
    rng: Rng,
    tree: RefTree,
    ops: Vec<Operation>,
    time: u64,
    /// Lost operations that have not taken effect yet (and maybe never will).
    limbo: Vec<usize>,
    dirs: usize,
}

impl Generator {
    fn tick(&mut self) -> u64 {
        self.time += 1;
        self.time
    }

    fn step(&mut self, c: usize, client: &mut Client, shape: &Shape) {
        let Some(p) = &mut client.pending else {
            if self.ops.len() < shape.ops {
                let call = self.random_call(c);
                let invoke = self.tick();
                self.ops.push(Operation {
                    client: c as u64,
                    session: client.session,
                    call,
                    invoke,
                    ret: None,
                });
                client.pending = Some(Pending {
                    id: self.ops.len() - 1,
                    effect: None,
                });
            }
            return;
        };
        let lost = self.rng.chance(shape.lost_percent);
        match (p.effect.take(), lost) {
            (None, true) => self.limbo.push(p.id),
            (None, false) => {
                let op = &self.ops[p.id];
                p.effect = Some(self.tree.apply(&op.call, op.session));
                return;
            }
            (Some(_), true) => {}
            (Some(ret), false) => self.ops[p.id].ret = Some((self.tick(), ret)),
        }
        if self.ops[p.id].call == Call::CloseSession {
            client.sessions += 1;
            client.session = ((c as i64 + 1) << 16) + client.sessions;
        }
        client.pending = None;
    }

    fn apply_limbo(&mut self) {
        let id = self.limbo.swap_remove(self.rng.below(self.limbo.len()));
        let op = self.ops[id].clone();
        self.tree.apply(&op.call, op.session);
    }

    fn random_call(&mut self, client: usize) -> Call {
        let r = self.rng.below(100);
        match r {
            0..=13 => self.random_create(client),
            14..=23 => {
                let (path, version) = self.target();
                Call::Delete { path, version }
            }
            24..=43 => {
                let (path, version) = self.target();
                Call::SetData {
                    path,
                    data: self.value(client),
                    version,
                }
            }
            44..=63 | 94..=99 => Call::GetData {
                path: self.target().0,
            },
            64..=71 => Call::Exists {
                path: self.target().0,
            },
            72..=79 => Call::GetChildren {
                path: self.dir_or_child(),
            },
            80..=91 => self.random_multi(client),
            _ => Call::CloseSession,
        }
    }

    fn random_create(&mut self, client: usize) -> Call {
        let sequential = self.rng.chance(15);
        let path = if sequential {
            format!("{}/s-", self.dir_or_child())
        } else {
            self.random_path()
        };
        let ephemeral = self.rng.chance(25);
        Call::Create {
            path,
            data: self.value(client),
            ephemeral,
            sequential,
        }
    }

    fn random_multi(&mut self, client: usize) -> Call {
        let n = 2 + self.rng.below(2);
        let ops = (0..n)
            .map(|_| match self.rng.below(4) {
                0 => Call::Create {
                    path: self.random_path(),
                    data: self.value(client),
                    ephemeral: false,
                    sequential: false,
                },
                1 => {
                    let (path, version) = self.target();
                    Call::Delete { path, version }
                }
                2 => {
                    let (path, version) = self.target();
                    Call::SetData {
                        path,
                        data: self.value(client),
                        version,
                    }
                }
                _ => {
                    let (path, version) = self.target();
                    Call::Check { path, version }
                }
            })
            .collect();
        Call::Multi { ops }
    }

    fn value(&mut self, client: usize) -> Vec<u8> {
        format!("c{client}-{}", self.ops.len()).into_bytes()
    }

    fn dir(&mut self) -> String {
        format!("/d{}", self.rng.below(self.dirs))
    }

    fn dir_or_child(&mut self) -> String {
        let dir = self.dir();
        if self.rng.chance(50) {
            dir
        } else {
            format!("{dir}/n0")
        }
    }

    fn random_path(&mut self) -> String {
        let dir = self.dir();
        match self.rng.below(10) {
            0..=2 => dir,
            3..=7 => format!("{dir}/n{}", self.rng.below(3)),
            _ => format!("{dir}/n0/g"),
        }
    }

    /// An existing node half of the time, and a version: any, the current
    /// one, or a wrong one.
    fn target(&mut self) -> (String, i32) {
        let existing = self.tree.paths();
        let path = if !existing.is_empty() && self.rng.chance(50) {
            existing[self.rng.below(existing.len())].clone()
        } else {
            self.random_path()
        };
        let current = self.tree.version(&path).unwrap_or(0);
        let version = match self.rng.below(10) {
            0..=4 => -1,
            5..=7 => current,
            _ => current + 1,
        };
        (path, version)
    }
}
