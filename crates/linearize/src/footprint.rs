//! Which model locations an operation may read and write, to tell when two
//! operations are independent (commute: either order gives the same results
//! and the same state).
//!
//! Locations: `Exists(p)` (whether p exists, and its ephemeral owner),
//! `Data(p)` (its data and version), `Children(p)` (its set of children and
//! its sequential counter) and `Session(s)` (whether s is closed). A name
//! ending in 10 digits may be the output of a sequential create, whose exact
//! name the footprint cannot know, so touching such a node also touches its
//! parent's `Children`.
//! Footprints over-approximate: a spurious conflict only costs search time.
//!
//! The search uses this for operations with an unknown outcome: in any
//! linearization, such an operation can be moved later past every operation
//! it is independent of (it never returned, so real-time order does not pin
//! it), so it suffices to linearize it immediately before an operation it
//! conflicts with, or not at all.

use std::collections::{BTreeMap, BTreeSet};

use crate::check::Prepared;
use crate::history::Call;
use crate::model::split;
use crate::partition::ephemeral_creates;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Loc {
    Exists(String),
    Data(String),
    Children(String),
    Session(i64),
}

#[derive(Default)]
struct Sets {
    reads: BTreeSet<Loc>,
    writes: BTreeSet<Loc>,
}

/// Sorted location ids; `reads` includes `writes`.
#[derive(Debug)]
pub(crate) struct Footprint {
    reads: Vec<u32>,
    writes: Vec<u32>,
}

impl Footprint {
    /// Whether `self` and `other` may not commute.
    pub fn conflicts(&self, other: &Footprint) -> bool {
        intersect(&self.writes, &other.reads) || intersect(&other.writes, &self.reads)
    }
}

fn intersect(a: &[u32], b: &[u32]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

/// The footprints of `ops` (one partition: every ephemeral create of a
/// session that closes is in it).
pub(crate) fn footprints(ops: &[&Prepared]) -> Vec<Footprint> {
    let mut ephemerals: BTreeMap<i64, Vec<&Call>> = BTreeMap::new();
    for p in ops {
        ephemerals
            .entry(p.op.session)
            .or_default()
            .extend(ephemeral_creates(&p.op.call));
    }
    let mut ids: BTreeMap<Loc, u32> = BTreeMap::new();
    ops.iter()
        .map(|p| {
            let mut sets = Sets::default();
            add_call(&p.op.call, p.op.session, &ephemerals, &mut sets);
            sets.reads.extend(sets.writes.iter().cloned());
            Footprint {
                reads: intern(&sets.reads, &mut ids),
                writes: intern(&sets.writes, &mut ids),
            }
        })
        .collect()
}

fn intern(locs: &BTreeSet<Loc>, ids: &mut BTreeMap<Loc, u32>) -> Vec<u32> {
    let mut out: Vec<u32> = locs
        .iter()
        .map(|l| {
            let next = ids.len() as u32;
            *ids.entry(l.clone()).or_insert(next)
        })
        .collect();
    out.sort_unstable();
    out
}

/// `Exists(p)`, and `Children(parent)` if p may be a sequential name.
fn exists(p: &str, out: &mut BTreeSet<Loc>) {
    out.insert(Loc::Exists(p.to_string()));
    let digits = p.bytes().rev().take_while(u8::is_ascii_digit).count();
    if digits >= 10 {
        out.insert(Loc::Children(split(p).0.to_string()));
    }
}

/// The whole node: existence and data.
fn node(p: &str, out: &mut BTreeSet<Loc>) {
    exists(p, out);
    out.insert(Loc::Data(p.to_string()));
}

fn children(p: &str, out: &mut BTreeSet<Loc>) {
    out.insert(Loc::Children(p.to_string()));
}

fn add_call(call: &Call, session: i64, ephemerals: &BTreeMap<i64, Vec<&Call>>, sets: &mut Sets) {
    sets.reads.insert(Loc::Session(session));
    match call {
        Call::Create { .. } => add_create_writes(call, sets, true),
        Call::Delete { path, .. } => {
            children(path, &mut sets.reads);
            node(path, &mut sets.writes);
            children(path, &mut sets.writes);
            children(split(path).0, &mut sets.writes);
        }
        Call::SetData { path, .. } => {
            exists(path, &mut sets.reads);
            sets.writes.insert(Loc::Data(path.to_string()));
        }
        Call::Check { path, .. } | Call::GetData { path } | Call::Exists { path } => {
            node(path, &mut sets.reads)
        }
        Call::GetChildren { path } => {
            exists(path, &mut sets.reads);
            children(path, &mut sets.reads);
        }
        Call::Multi { ops } => ops
            .iter()
            .for_each(|op| add_call(op, session, ephemerals, sets)),
        Call::CloseSession => {
            sets.writes.insert(Loc::Session(session));
            for create in ephemerals.get(&session).into_iter().flatten() {
                add_create_writes(create, sets, false);
            }
        }
    }
}

/// A create writes the new node and its parent's children (and, with
/// `reads`, reads whether the parent exists and is ephemeral).
fn add_create_writes(create: &Call, sets: &mut Sets, reads: bool) {
    let Call::Create {
        path, sequential, ..
    } = create
    else {
        unreachable!("a create")
    };
    let parent = split(path).0;
    if reads {
        exists(parent, &mut sets.reads);
    }
    children(parent, &mut sets.writes);
    if !sequential {
        node(path, &mut sets.writes);
        children(path, &mut sets.writes);
    }
}
