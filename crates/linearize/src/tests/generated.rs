//! Generated histories: correct ones must pass, mutated ones mostly fail.

use std::time::Instant;

use super::reference::{generate, Rng, Shape};
use crate::check::prepare;
use crate::history::{err, Operation, Ret};
use crate::partition::partition;
use crate::{check, Budget, Outcome};

const SMALL: Shape = Shape {
    clients: 4,
    ops: 60,
    dirs: 3,
    lost_percent: 3,
};

/// Changes the result of one operation with a known, checked result into a
/// different one; `None` if the history has no such operation.
fn mutate(ops: &mut [Operation], rng: &mut Rng) -> Option<usize> {
    let candidates: Vec<usize> = (0..ops.len())
        .filter(|&i| match &ops[i].ret {
            Some((_, Ret::Error(code))) => {
                ![err::SESSION_EXPIRED, err::CONNECTION_LOSS].contains(code)
            }
            Some(_) => true,
            None => false,
        })
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let i = candidates[rng.below(candidates.len())];
    let (_, ret) = ops[i].ret.as_mut().expect("candidate has a result");
    *ret = mutated(ret, rng);
    Some(i)
}

fn mutated(ret: &Ret, rng: &mut Rng) -> Ret {
    match ret.clone() {
        Ret::Data { data, version } if rng.chance(50) => Ret::Data {
            data,
            version: version + 1,
        },
        Ret::Data { version, .. } => Ret::Data {
            data: b"never written".to_vec(),
            version,
        },
        Ret::Exists(Some(_)) => Ret::Exists(None),
        Ret::Exists(None) => Ret::Exists(Some(0)),
        Ret::Set { version } => Ret::Set {
            version: version + 1,
        },
        Ret::Created { .. } => Ret::Error(err::NODE_EXISTS),
        Ret::Done => Ret::Error(err::NO_NODE),
        Ret::Children(mut names) if names.is_empty() || rng.chance(50) => {
            names.push("zz".into());
            Ret::Children(names)
        }
        Ret::Children(names) => Ret::Children(names[1..].to_vec()),
        Ret::Multi(_) => Ret::Error(err::BAD_VERSION),
        Ret::Error(err::NO_NODE) => Ret::Error(err::NODE_EXISTS),
        Ret::Error(_) => Ret::Error(err::NO_NODE),
    }
}

#[test]
fn generated_histories_pass_and_mutations_are_caught() {
    let (mut mutants, mut caught, mut undecided) = (0, 0, 0);
    for seed in 0..200 {
        let mut ops = generate(seed, &SMALL);
        match check(&ops, Budget::default()) {
            Outcome::Linearizable => {}
            other => panic!("seed {seed}: false alarm on a correct history: {other:?}\n{ops:#?}"),
        }
        let mut rng = Rng::new(seed ^ 0xdead_beef);
        let Some(i) = mutate(&mut ops, &mut rng) else {
            continue;
        };
        mutants += 1;
        match check(&ops, Budget::default()) {
            Outcome::NotLinearizable { .. } => caught += 1,
            Outcome::Unknown { .. } => undecided += 1,
            Outcome::Linearizable => eprintln!(
                "seed {seed}: mutation of op #{i} ({}) still linearizable",
                ops[i]
            ),
        }
    }
    eprintln!("mutations caught: {caught} of {mutants} ({undecided} undecided)");
    assert!(caught >= 1);
    assert_eq!(undecided, 0);
    assert!(
        caught * 100 >= mutants * 70,
        "only {caught} of {mutants} mutations caught"
    );
}

#[test]
fn generated_histories_are_deterministic() {
    for seed in 0..20 {
        let mut ops = generate(seed, &SMALL);
        mutate(&mut ops, &mut Rng::new(seed));
        assert_eq!(
            check(&ops, Budget::default()),
            check(&ops, Budget::default())
        );
        let mut reversed = ops.clone();
        reversed.reverse();
        let same = |o: &Outcome| std::mem::discriminant(o);
        assert_eq!(
            same(&check(&ops, Budget::default())),
            same(&check(&reversed, Budget::default()))
        );
    }
}

#[test]
fn performance_2000_ops_8_clients() {
    let shape = Shape {
        clients: 8,
        ops: 2000,
        dirs: 4,
        lost_percent: 1,
    };
    let bound_ms = if cfg!(debug_assertions) {
        20_000
    } else {
        2_000
    };
    let mut worst_ms = 0.0f64;
    for seed in 0..5 {
        let ops = generate(1000 + seed, &shape);
        let parts = partition(&prepare(&ops)).len();
        let lost = ops.iter().filter(|o| o.ret.is_none()).count();
        let start = Instant::now();
        let outcome = check(&ops, Budget::default());
        let ms = start.elapsed().as_secs_f64() * 1e3;
        eprintln!(
            "seed {seed}: {} ops, {lost} unknown outcome, {parts} partition(s): {ms:.1} ms",
            ops.len()
        );
        assert_eq!(outcome, Outcome::Linearizable);
        worst_ms = worst_ms.max(ms);
    }
    eprintln!("worst: {worst_ms:.1} ms");
    assert!(worst_ms < bound_ms as f64, "{worst_ms:.1} ms");
}

#[test]
fn performance_of_a_failing_2000_op_history() {
    let shape = Shape {
        clients: 8,
        ops: 2000,
        dirs: 4,
        lost_percent: 1,
    };
    let mut ops = generate(77, &shape);
    let last_read = (0..ops.len())
        .rev()
        .find(|&i| matches!(ops[i].ret, Some((_, Ret::Data { .. }))))
        .expect("a read");
    let (_, ret) = ops[last_read].ret.as_mut().unwrap();
    *ret = Ret::Data {
        data: b"never written".to_vec(),
        version: 0,
    };
    let start = Instant::now();
    let outcome = check(&ops, Budget::default());
    let ms = start.elapsed().as_secs_f64() * 1e3;
    eprintln!("failing history: {ms:.1} ms");
    let Outcome::NotLinearizable { report } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(report.contains(&format!("op #{last_read} ")), "{report}");
    eprintln!("{report}");
}
