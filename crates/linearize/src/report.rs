//! The text a developer reads when a seed fails.

use std::fmt::Write;

use crate::check::Prepared;
use crate::history::{Ret, Time};
use crate::model::Tree;

/// Prefix operations shown (the last ones; earlier ones are counted).
const SHOWN_PREFIX: usize = 40;

pub(crate) enum Heading {
    /// The search is complete: nothing extends the prefix.
    Failed,
    /// The search ran out of budget.
    Exhausted,
}

/// Renders the search's result on partition `part.0` (of `part.1`).
pub(crate) fn render(
    heading: Heading,
    (part, parts): (usize, usize),
    keys: &[String],
    ops: &[&Prepared],
    best: &[(usize, usize)],
) -> String {
    let mut out = String::new();
    let unknown = ops.iter().filter(|p| p.ret.is_none()).count();
    let _ = match heading {
        Heading::Failed => writeln!(out, "history is not linearizable"),
        Heading::Exhausted => writeln!(out, "undecided (search budget exhausted); partial result:"),
    };
    let _ = writeln!(
        out,
        "partition {} of {parts}: subtrees {}; {} ops ({unknown} with unknown outcome)",
        part + 1,
        keys.join(", "),
        ops.len()
    );
    prefix(&mut out, ops, best);
    let mut tree = Tree::new();
    replay(&mut tree, ops, best);
    let _ = writeln!(out, "model state after that prefix:");
    tree.describe().iter().for_each(|line| {
        let _ = writeln!(out, "    {line}");
    });
    stuck(&mut out, &mut tree, ops, best);
    out
}

fn prefix(out: &mut String, ops: &[&Prepared], best: &[(usize, usize)]) {
    let known = ops.iter().filter(|p| p.ret.is_some()).count();
    let known_done = best.iter().filter(|(op, _)| ops[*op].ret.is_some()).count();
    let _ = writeln!(
        out,
        "longest linearizable prefix: {} ops ({known_done} of the {known} with a known result)",
        best.len()
    );
    let skip = best.len().saturating_sub(SHOWN_PREFIX);
    if skip > 0 {
        let _ = writeln!(out, "    ... {skip} earlier ops");
    }
    for (i, (op, _)) in best.iter().enumerate().skip(skip) {
        let p = ops[*op];
        let note = if p.ret.is_none() {
            "  [unknown outcome, taken as applied]"
        } else {
            ""
        };
        let _ = writeln!(out, "    {:>4}. op #{} {}{note}", i + 1, p.index, p.op);
    }
}

fn replay(tree: &mut Tree, ops: &[&Prepared], best: &[(usize, usize)]) {
    let mut undo = Vec::new();
    for &(op, alt) in best {
        let p = ops[op];
        let got = tree.apply(&p.op.call, p.op.session, &p.alts[alt], &mut undo);
        assert!(
            got.is_some(),
            "replaying the prefix: op #{} has no transition",
            p.index
        );
    }
}

/// The operations that could have come next, each with the model's answer.
fn stuck(out: &mut String, tree: &mut Tree, ops: &[&Prepared], best: &[(usize, usize)]) {
    let mut done = vec![false; ops.len()];
    best.iter().for_each(|(op, _)| done[*op] = true);
    let deadline: Option<Time> = (0..ops.len())
        .filter(|&i| !done[i])
        .filter_map(|i| ops[i].ret_time())
        .min();
    let Some(deadline) = deadline else { return };
    let _ = writeln!(
        out,
        "ops that could come next (invoked before t={deadline}, the earliest pending return), with the model's answers:"
    );
    for (i, p) in ops.iter().enumerate() {
        if done[i] || p.op.invoke > deadline {
            continue;
        }
        let mut undo = Vec::new();
        let model = tree.apply(&p.op.call, p.op.session, &p.alts[0], &mut undo);
        tree.rollback(&mut undo, 0);
        let _ = writeln!(out, "    op #{} {}", p.index, p.op);
        let _ = writeln!(out, "        model answers: {}", answer(model));
        if p.ret_time() == Some(deadline) {
            let _ = writeln!(out, "        (this op returned first: it must be linearized before any other pending op returns)");
        }
    }
}

fn answer(model: Option<Ret>) -> String {
    match model {
        Some(ret) => ret.to_string(),
        None => "impossible (the sequential counter is not above the parent's previous ones)"
            .to_string(),
    }
}
