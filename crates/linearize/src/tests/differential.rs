//! The optimised search (partitions, windows, memo with dominance, the
//! block rules for unknown outcomes) against a brute-force enumeration of
//! every linearization, with the same model, on many small histories.

use super::reference::{generate, Rng, Shape};
use crate::check::{prepare, Prepared};
use crate::history::{Operation, Ret};
use crate::model::{Tree, Undo};
use crate::{check, Budget, Outcome};

/// Whether some order of the ops (respecting real time, each unknown-outcome
/// op applied with an effect or not at all) yields the recorded results.
fn brute_force(ops: &[Operation]) -> bool {
    let prepared = prepare(ops);
    let mut done = vec![false; prepared.len()];
    search(&prepared, &mut done, &mut Tree::new(), &mut Vec::new())
}

fn search(ops: &[Prepared], done: &mut [bool], tree: &mut Tree, undo: &mut Vec<Undo>) -> bool {
    if (0..ops.len()).all(|i| done[i] || ops[i].ret.is_none()) {
        return true;
    }
    let deadline = (0..ops.len())
        .filter(|&i| !done[i])
        .filter_map(|i| ops[i].ret_time())
        .min()
        .expect("a known op is left");
    for i in 0..ops.len() {
        if done[i] || ops[i].op.invoke > deadline {
            continue;
        }
        for alt in &ops[i].alts {
            let mark = undo.len();
            let got = tree.apply(&ops[i].op.call, ops[i].op.session, alt, undo);
            let ok = match (&ops[i].ret, &got) {
                (_, None) => false,
                (None, Some(ret)) => !matches!(ret, Ret::Error(_)),
                (Some(want), Some(ret)) => want == ret,
            };
            if ok {
                done[i] = true;
                let found = search(ops, done, tree, undo);
                done[i] = false;
                if found {
                    return true;
                }
            }
            tree.rollback(undo, mark);
        }
    }
    false
}

/// Changes one recorded result (a small perturbation).
fn perturb(ops: &mut [Operation], rng: &mut Rng) {
    let known: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].ret.is_some()).collect();
    if known.is_empty() {
        return;
    }
    let i = known[rng.below(known.len())];
    let (_, ret) = ops[i].ret.as_mut().expect("known");
    *ret = match ret.clone() {
        Ret::Data { data, version } => Ret::Data {
            data,
            version: version + 1,
        },
        Ret::Exists(Some(v)) if rng.chance(50) => Ret::Exists(Some(v + 1)),
        Ret::Exists(_) => Ret::Exists(None),
        Ret::Set { version } => Ret::Set {
            version: version - 1,
        },
        Ret::Children(names) => Ret::Children(names.into_iter().skip(1).collect()),
        Ret::Created { .. } | Ret::Done | Ret::Multi(_) => Ret::Error(crate::err::NO_NODE),
        Ret::Error(_) => Ret::Done,
    };
}

fn compare(seed: u64, ops: &[Operation]) -> bool {
    let expected = brute_force(ops);
    let got = check(ops, Budget::default());
    assert!(
        got.is_linearizable() == expected && !matches!(got, Outcome::Unknown { .. }),
        "seed {seed}: brute force says {expected}, checker says {got:?}\n{}",
        ops.iter()
            .enumerate()
            .map(|(i, o)| format!("#{i} {o}\n"))
            .collect::<String>()
    );
    expected
}

fn agree_on(shape: &Shape, seeds: std::ops::Range<u64>) {
    let (mut linearizable, mut not) = (0, 0);
    for seed in seeds {
        let mut ops = generate(seed, shape);
        assert!(
            compare(seed, &ops),
            "seed {seed}: a generated history must be linearizable"
        );
        perturb(&mut ops, &mut Rng::new(!seed));
        if compare(seed, &ops) {
            linearizable += 1;
        } else {
            not += 1;
        }
    }
    eprintln!("perturbed histories: {linearizable} linearizable, {not} not");
    assert!(not > 100 && linearizable > 100);
}

#[test]
fn optimised_search_agrees_with_brute_force_two_subtrees() {
    agree_on(
        &Shape {
            clients: 3,
            ops: 9,
            dirs: 2,
            lost_percent: 25,
        },
        0..3000,
    );
    agree_on(
        &Shape {
            clients: 4,
            ops: 14,
            dirs: 2,
            lost_percent: 30,
        },
        0..3000,
    );
}

/// Found a real bug in an earlier, unsound version of the block rules.
#[test]
fn optimised_search_agrees_with_brute_force_one_busy_subtree() {
    agree_on(
        &Shape {
            clients: 5,
            ops: 14,
            dirs: 1,
            lost_percent: 20,
        },
        0..3000,
    );
}
