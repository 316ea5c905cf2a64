//! The checker's entry point: preparation of the history (dropping what
//! constrains nothing, normalising results, choosing the sequential counters
//! an operation may have used), partitioning, and one search per partition.

use std::collections::BTreeSet;
use std::ops::Bound;

use crate::history::{err, Call, Operation, Ret, Time};
use crate::model::{join, seq_counter, split, Seq};
use crate::{partition, report, search};

/// How much work the checker may do before answering [`Outcome::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Distinct search configurations (set of linearized ops, model state)
    /// summed over all partitions. Each costs ~100 bytes of memo memory and
    /// a few microseconds.
    pub max_states: u64,
}

impl Default for Budget {
    /// 1,000,000 configurations: at most ~100 MB and several seconds.
    fn default() -> Budget {
        Budget {
            max_states: 1_000_000,
        }
    }
}

/// The verdict on a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Linearizable,
    /// `report` names the partition, the longest linearizable prefix found
    /// and the operations that could not be linearized after it.
    NotLinearizable {
        report: String,
    },
    /// The budget ran out before a verdict. `reason` says so and, for the
    /// first undecided partition, shows the longest linearizable prefix found
    /// (the same layout as a NotLinearizable report): a hint, not a verdict.
    Unknown {
        reason: String,
    },
}

impl Outcome {
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Outcome::Linearizable)
    }

    pub fn is_not_linearizable(&self) -> bool {
        matches!(self, Outcome::NotLinearizable { .. })
    }
}

/// An operation as the search sees it.
#[derive(Debug)]
pub(crate) struct Prepared<'a> {
    /// Index in the checked slice (what reports call `op #i`).
    pub index: usize,
    pub op: &'a Operation,
    /// Normalised result; `None`: unknown outcome.
    pub ret: Option<Ret>,
    /// The alternative counter choices for the op's sequential creates; the
    /// search tries each (one for ops with a known result).
    pub alts: Vec<Vec<Seq>>,
}

impl Prepared<'_> {
    /// Return time; `None` (= +infinity) when the outcome is unknown.
    pub fn ret_time(&self) -> Option<Time> {
        self.ret.as_ref().and(self.op.ret.as_ref().map(|(t, _)| *t))
    }
}

/// Most counter combinations tried for one unknown-outcome operation.
const MAX_ALTS: usize = 64;

/// Checks that `ops` is linearizable with respect to the ZooKeeper data tree
/// model, starting from a tree holding only "/". Deterministic: the same
/// input gives the same outcome and the same report, byte for byte.
///
/// Panics if an operation returns at or before its invocation, or if a
/// multi holds something other than create/delete/setData/check.
pub fn check(ops: &[Operation], budget: Budget) -> Outcome {
    let prepared = prepare(ops);
    let parts = partition::partition(&prepared);
    let mut states_left = budget.max_states;
    let mut exhausted = None;
    for (k, part) in parts.iter().enumerate() {
        let sub: Vec<&Prepared> = part.ops.iter().map(|&i| &prepared[i]).collect();
        match search::run(&sub, &mut states_left) {
            search::Verdict::Linearizable => {}
            search::Verdict::NotLinearizable { best } => {
                let report = report::render(
                    report::Heading::Failed,
                    (k, parts.len()),
                    &part.keys,
                    &sub,
                    &best,
                );
                return Outcome::NotLinearizable { report };
            }
            search::Verdict::Exhausted { best } if exhausted.is_none() => {
                let partial = report::render(
                    report::Heading::Exhausted,
                    (k, parts.len()),
                    &part.keys,
                    &sub,
                    &best,
                );
                exhausted = Some(partial);
            }
            search::Verdict::Exhausted { .. } => {}
        }
    }
    match exhausted {
        None => Outcome::Linearizable,
        Some(partial) => Outcome::Unknown {
            reason: format!(
                "search budget of {} states exhausted\n{partial}",
                budget.max_states
            ),
        },
    }
}

/// Validates, drops operations that constrain nothing, normalises results
/// and computes counter alternatives.
pub(crate) fn prepare(ops: &[Operation]) -> Vec<Prepared<'_>> {
    let mut out = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        validate(index, op);
        let ret = match &op.ret {
            None => None,
            Some((_, Ret::Error(err::SESSION_EXPIRED | err::CONNECTION_LOSS))) => continue,
            Some((_, Ret::Error(err::OPERATION_TIMEOUT))) => None,
            Some((_, ret)) => Some(normalize(ret)),
        };
        if ret.is_none() && op.call.is_read() {
            continue;
        }
        out.push(Prepared {
            index,
            op,
            ret,
            alts: Vec::new(),
        });
    }
    let observed = observed_paths(&out);
    for p in &mut out {
        p.alts = alternatives(p, &observed);
    }
    out
}

fn validate(index: usize, op: &Operation) {
    if let Some((t, _)) = &op.ret {
        assert!(
            *t > op.invoke,
            "op #{index}: return at {t} not after invoke at {}",
            op.invoke
        );
    }
    if let Call::Multi { ops } = &op.call {
        for sub in ops {
            let ok = matches!(
                sub,
                Call::Create { .. }
                    | Call::Delete { .. }
                    | Call::SetData { .. }
                    | Call::Check { .. }
            );
            assert!(ok, "op #{index}: {sub} inside a multi");
        }
    }
}

/// Children lists compare as sets: sort them.
fn normalize(ret: &Ret) -> Ret {
    match ret {
        Ret::Children(names) => {
            let mut names = names.clone();
            names.sort();
            Ret::Children(names)
        }
        other => other.clone(),
    }
}

/// The sequential creates of `call`, in execution order.
fn seq_creates(call: &Call) -> Vec<&str> {
    match call {
        Call::Create {
            path,
            sequential: true,
            ..
        } => vec![path.as_str()],
        Call::Multi { ops } => ops.iter().flat_map(seq_creates).collect(),
        _ => Vec::new(),
    }
}

fn alternatives(p: &Prepared, observed: &BTreeSet<String>) -> Vec<Vec<Seq>> {
    match &p.ret {
        Some(ret) => vec![seen_counters(&p.op.call, ret)],
        None => unknown_counters(&p.op.call, observed),
    }
}

/// The counters a known result shows (`Next` when it shows none).
fn seen_counters(call: &Call, ret: &Ret) -> Vec<Seq> {
    match (call, ret) {
        (
            Call::Create {
                path,
                sequential: true,
                ..
            },
            Ret::Created { path: got },
        ) => {
            vec![seen(path, Some(got))]
        }
        (Call::Multi { ops }, Ret::Multi(rets)) => ops
            .iter()
            .enumerate()
            .filter_map(|(i, op)| match op {
                Call::Create {
                    path,
                    sequential: true,
                    ..
                } => Some(seen(path, created_path(rets.get(i)))),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn created_path(ret: Option<&Ret>) -> Option<&str> {
    match ret {
        Some(Ret::Created { path }) => Some(path),
        _ => None,
    }
}

fn seen(prefix: &str, got: Option<&str>) -> Seq {
    match got.and_then(|g| seq_counter(prefix, g)) {
        Some(c) => Seq::Counter(c),
        None => Seq::Invalid,
    }
}

/// For an unknown outcome: each sequential create may have used the next
/// counter or produced any name of the right form that some operation
/// mentions (even one a known create returned: the parent may have been
/// deleted and recreated, restarting its counter).
fn unknown_counters(call: &Call, observed: &BTreeSet<String>) -> Vec<Vec<Seq>> {
    let mut alts: Vec<Vec<Seq>> = vec![Vec::new()];
    for prefix in seq_creates(call) {
        let mut options = vec![Seq::Next];
        options.extend(mentioned_counters(prefix, observed).map(Seq::Counter));
        alts = alts
            .iter()
            .flat_map(|a| {
                options
                    .iter()
                    .map(move |o| [a.clone(), vec![o.clone()]].concat())
            })
            .take(MAX_ALTS)
            .collect();
    }
    alts
}

fn mentioned_counters<'a>(
    prefix: &'a str,
    observed: &'a BTreeSet<String>,
) -> impl Iterator<Item = u64> + 'a {
    observed
        .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
        .take_while(move |p| p.starts_with(prefix))
        .filter_map(move |p| seq_counter(prefix, p))
}

/// Every path any operation names or any result shows, with its ancestors.
fn observed_paths(ops: &[Prepared]) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for p in ops {
        collect_call_paths(&p.op.call, &mut paths);
        if let Some(ret) = &p.ret {
            collect_ret_paths(&p.op.call, ret, &mut paths);
        }
    }
    let mut with_ancestors = BTreeSet::new();
    for path in paths {
        let mut cur = path.as_str();
        while cur != "/" && with_ancestors.insert(cur.to_string()) {
            cur = split(cur).0;
        }
    }
    with_ancestors
}

fn collect_call_paths(call: &Call, out: &mut BTreeSet<String>) {
    match call {
        Call::Multi { ops } => ops.iter().for_each(|op| collect_call_paths(op, out)),
        call => out.extend(call.path().map(str::to_string)),
    }
}

fn collect_ret_paths(call: &Call, ret: &Ret, out: &mut BTreeSet<String>) {
    match (call, ret) {
        (_, Ret::Created { path }) => {
            out.insert(path.clone());
        }
        (Call::GetChildren { path }, Ret::Children(names)) => {
            out.extend(names.iter().map(|n| join(path, n)));
        }
        (Call::Multi { ops }, Ret::Multi(rets)) => {
            ops.iter()
                .zip(rets)
                .for_each(|(op, r)| collect_ret_paths(op, r, out));
        }
        _ => {}
    }
}
