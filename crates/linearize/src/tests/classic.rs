//! Small hand-written histories, each checked both ways where it makes sense.

use super::*;
use crate::check::prepare;
use crate::partition::partition;
use crate::Outcome;

#[test]
fn stale_read_after_completed_write_is_caught() {
    let ops = with_a(vec![
        op(1, set("/a", "1", -1), 3, 4, Ret::Set { version: 1 }),
        op(2, get("/a"), 5, 6, data("0", 0)),
    ]);
    assert_not_linearizable(&ops);
}

#[test]
fn concurrent_write_and_read_may_see_either_value() {
    for seen in [data("0", 0), data("1", 1)] {
        let ops = with_a(vec![
            op(1, set("/a", "1", -1), 3, 6, Ret::Set { version: 1 }),
            op(2, get("/a"), 4, 5, seen),
        ]);
        assert_linearizable(&ops);
    }
    let wrong = with_a(vec![
        op(1, set("/a", "1", -1), 3, 6, Ret::Set { version: 1 }),
        op(2, get("/a"), 4, 5, data("1", 0)),
    ]);
    assert_not_linearizable(&wrong);
}

#[test]
fn lost_write_is_caught() {
    // Two acknowledged writes; a later read shows the first one: the second was lost.
    let ops = with_a(vec![
        op(1, set("/a", "1", -1), 3, 4, Ret::Set { version: 1 }),
        op(1, set("/a", "2", -1), 5, 6, Ret::Set { version: 2 }),
        op(2, get("/a"), 10, 11, data("1", 1)),
    ]);
    assert_not_linearizable(&ops);
}

#[test]
fn read_order_between_clients_is_checked() {
    // Client 2 sees the new value, then client 3 (strictly later) the old one.
    let ops = with_a(vec![
        op(1, set("/a", "1", -1), 3, 20, Ret::Set { version: 1 }),
        op(2, get("/a"), 4, 5, data("1", 1)),
        op(3, get("/a"), 6, 7, data("0", 0)),
    ]);
    assert_not_linearizable(&ops);
}

#[test]
fn unknown_outcome_write_may_show_up_later_or_never() {
    for seen in [data("1", 1), data("0", 0)] {
        let ops = with_a(vec![
            lost(1, set("/a", "1", -1), 3),
            op(2, get("/a"), 10, 11, seen),
        ]);
        assert_linearizable(&ops);
    }
    // It takes effect once: seen, then gone again is not possible.
    let flicker = with_a(vec![
        lost(1, set("/a", "1", -1), 3),
        op(2, get("/a"), 10, 11, data("1", 1)),
        op(2, get("/a"), 12, 13, data("0", 0)),
    ]);
    assert_not_linearizable(&flicker);
    // Not before its invocation.
    let early = with_a(vec![
        op(2, get("/a"), 3, 4, data("1", 1)),
        lost(1, set("/a", "1", -1), 5),
    ]);
    assert_not_linearizable(&early);
}

#[test]
fn unknown_outcome_create_that_never_shows_up_is_fine() {
    let ops = vec![
        lost(1, create("/a", "x"), 1),
        op(2, exists("/a"), 5, 6, Ret::Exists(None)),
    ];
    assert_linearizable(&ops);
    let appears = vec![
        lost(1, create("/a", "x"), 1),
        op(2, exists("/a"), 5, 6, Ret::Exists(None)),
        op(2, get("/a"), 7, 8, data("x", 0)),
    ];
    assert_linearizable(&appears);
}

#[test]
fn bad_version_both_ways() {
    let right = with_a(vec![op(
        1,
        set("/a", "1", 5),
        3,
        4,
        error(err::BAD_VERSION),
    )]);
    assert_linearizable(&right);
    let wrong = with_a(vec![op(
        1,
        set("/a", "1", 0),
        3,
        4,
        error(err::BAD_VERSION),
    )]);
    assert_not_linearizable(&wrong);
    let ok = with_a(vec![op(
        1,
        set("/a", "1", 0),
        3,
        4,
        Ret::Set { version: 1 },
    )]);
    assert_linearizable(&ok);
    let ignored = with_a(vec![op(
        1,
        set("/a", "1", 3),
        3,
        4,
        Ret::Set { version: 4 },
    )]);
    assert_not_linearizable(&ignored);
    let delete_wrong = with_a(vec![op(1, delete("/a", 0), 3, 4, error(err::BAD_VERSION))]);
    assert_not_linearizable(&delete_wrong);
    let delete_right = with_a(vec![op(1, delete("/a", 2), 3, 4, error(err::BAD_VERSION))]);
    assert_linearizable(&delete_right);
}

#[test]
fn node_exists_both_ways() {
    let right = with_a(vec![op(
        1,
        create("/a", "y"),
        3,
        4,
        error(err::NODE_EXISTS),
    )]);
    assert_linearizable(&right);
    let wrong = vec![op(1, create("/a", "y"), 3, 4, error(err::NODE_EXISTS))];
    assert_not_linearizable(&wrong);
    let twice = with_a(vec![op(1, create("/a", "y"), 3, 4, created("/a"))]);
    assert_not_linearizable(&twice);
}

#[test]
fn no_node_both_ways() {
    let right = vec![
        op(1, create("/a/b", ""), 1, 2, error(NO_NODE)),
        op(1, delete("/a", -1), 3, 4, error(NO_NODE)),
        op(1, set("/a", "", -1), 5, 6, error(NO_NODE)),
        op(1, get("/a"), 7, 8, error(NO_NODE)),
        op(1, children("/a"), 9, 10, error(NO_NODE)),
    ];
    assert_linearizable(&right);
    for wrong in [
        op(1, create("/a/b", ""), 3, 4, error(NO_NODE)),
        op(1, delete("/a", -1), 3, 4, error(NO_NODE)),
        op(1, get("/a"), 3, 4, error(NO_NODE)),
        op(1, set("/a", "", -1), 3, 4, error(NO_NODE)),
    ] {
        assert_not_linearizable(&with_a(vec![wrong]));
    }
}

#[test]
fn not_empty_both_ways() {
    let child = op(1, create("/a/b", ""), 3, 4, created("/a/b"));
    let right = with_a(vec![
        child.clone(),
        op(1, delete("/a", -1), 5, 6, error(err::NOT_EMPTY)),
    ]);
    assert_linearizable(&right);
    let deleted_anyway = with_a(vec![child, op(1, delete("/a", -1), 5, 6, Ret::Done)]);
    assert_not_linearizable(&deleted_anyway);
    let wrong = with_a(vec![op(1, delete("/a", -1), 5, 6, error(err::NOT_EMPTY))]);
    assert_not_linearizable(&wrong);
}

#[test]
fn ephemeral_parents_have_no_children() {
    let eph = op(1, create_ephemeral("/e"), 1, 2, created("/e"));
    let right = vec![
        eph.clone(),
        op(
            2,
            create("/e/c", ""),
            3,
            4,
            error(err::NO_CHILDREN_FOR_EPHEMERALS),
        ),
    ];
    assert_linearizable(&right);
    let wrong = vec![eph, op(2, create("/e/c", ""), 3, 4, created("/e/c"))];
    assert_not_linearizable(&wrong);
}

#[test]
fn children_lists_are_checked_as_sets() {
    let base = with_a(vec![
        op(1, create("/a/x", ""), 3, 4, created("/a/x")),
        op(1, create("/a/y", ""), 5, 6, created("/a/y")),
        op(1, create("/a/y/z", ""), 7, 8, created("/a/y/z")),
    ]);
    let mut right = base.clone();
    right.push(op(2, children("/a"), 9, 10, names(&["y", "x"])));
    assert_linearizable(&right);
    let mut missing = base;
    missing.push(op(2, children("/a"), 9, 10, names(&["x"])));
    assert_not_linearizable(&missing);
}

#[test]
fn sequential_counters_must_grow() {
    let first = op(
        1,
        create_sequential("/a/s-"),
        3,
        4,
        created("/a/s-0000000003"),
    );
    let ok = with_a(vec![
        first.clone(),
        op(
            1,
            create_sequential("/a/s-"),
            5,
            6,
            created("/a/s-0000000007"),
        ),
    ]);
    assert_linearizable(&ok);
    let smaller = with_a(vec![
        first.clone(),
        op(
            1,
            create_sequential("/a/s-"),
            5,
            6,
            created("/a/s-0000000002"),
        ),
    ]);
    assert_not_linearizable(&smaller);
    let reused = with_a(vec![
        first.clone(),
        op(1, delete("/a/s-0000000003", -1), 5, 6, Ret::Done),
        op(
            1,
            create_sequential("/a/s-"),
            7,
            8,
            created("/a/s-0000000003"),
        ),
    ]);
    assert_not_linearizable(&reused);
    let malformed = with_a(vec![op(
        1,
        create_sequential("/a/s-"),
        3,
        4,
        created("/a/s-123"),
    )]);
    assert_not_linearizable(&malformed);
    let other_prefix = with_a(vec![op(
        1,
        create_sequential("/a/s-"),
        3,
        4,
        created("/a/t-0000000001"),
    )]);
    assert_not_linearizable(&other_prefix);
}

#[test]
fn sequential_counters_of_concurrent_creates_follow_the_linearization() {
    let ops = with_a(vec![
        op(
            1,
            create_sequential("/a/s-"),
            3,
            8,
            created("/a/s-0000000002"),
        ),
        op(
            2,
            create_sequential("/a/s-"),
            4,
            7,
            created("/a/s-0000000001"),
        ),
    ]);
    assert_linearizable(&ops);
    // Sequential after all: the second may not get a smaller counter.
    let ordered = with_a(vec![
        op(
            1,
            create_sequential("/a/s-"),
            3,
            4,
            created("/a/s-0000000002"),
        ),
        op(
            2,
            create_sequential("/a/s-"),
            5,
            7,
            created("/a/s-0000000001"),
        ),
    ]);
    assert_not_linearizable(&ordered);
}

#[test]
fn sequential_counter_restarts_with_a_recreated_parent() {
    let ops = vec![
        op(1, create("/p", ""), 1, 2, created("/p")),
        op(
            1,
            create_sequential("/p/s-"),
            3,
            4,
            created("/p/s-0000000005"),
        ),
        op(1, delete("/p/s-0000000005", -1), 5, 6, Ret::Done),
        op(1, delete("/p", -1), 7, 8, Ret::Done),
        op(1, create("/p", ""), 9, 10, created("/p")),
        op(
            1,
            create_sequential("/p/s-"),
            11,
            12,
            created("/p/s-0000000000"),
        ),
    ];
    assert_linearizable(&ops);
}

#[test]
fn unknown_sequential_create_seen_later_by_name() {
    let ops = with_a(vec![
        op(
            1,
            create_sequential("/a/s-"),
            3,
            4,
            created("/a/s-0000000000"),
        ),
        lost(2, create_sequential("/a/s-"), 5),
        op(
            3,
            children("/a"),
            10,
            11,
            names(&["s-0000000000", "s-0000000004"]),
        ),
        op(
            3,
            create_sequential("/a/s-"),
            12,
            13,
            created("/a/s-0000000005"),
        ),
    ]);
    assert_linearizable(&ops);
    let too_low = with_a(vec![
        op(
            1,
            create_sequential("/a/s-"),
            3,
            4,
            created("/a/s-0000000006"),
        ),
        lost(2, create_sequential("/a/s-"), 5),
        op(
            3,
            children("/a"),
            10,
            11,
            names(&["s-0000000004", "s-0000000006"]),
        ),
    ]);
    assert_not_linearizable(&too_low);
}

#[test]
fn a_plain_create_moves_the_counter_an_unseen_sequential_create_uses() {
    // The sequential create's result is lost and its name only shows up
    // in a listing: it used counter 1, because creating /a/p moved /a's
    // cversion (simulator seed 118449 once failed on exactly this).
    let ops = with_a(vec![
        op(1, create("/a/p", ""), 3, 4, created("/a/p")),
        lost(2, create_sequential("/a/s-"), 5),
        op(3, children("/a"), 10, 11, names(&["p", "s-0000000001"])),
    ]);
    assert_linearizable(&ops);
    let reused = with_a(vec![
        op(1, create("/a/p", ""), 3, 4, created("/a/p")),
        lost(2, create_sequential("/a/s-"), 5),
        op(3, children("/a"), 10, 11, names(&["p", "s-0000000000"])),
    ]);
    assert_not_linearizable(&reused);
}

#[test]
fn root_level_sequential_nodes_share_a_partition_with_their_names() {
    let ops = vec![
        op(
            1,
            create_sequential("/job-"),
            1,
            2,
            created("/job-0000000000"),
        ),
        op(2, get("/job-0000000000"), 3, 4, data("", 0)),
        op(
            2,
            create_sequential("/lock-"),
            5,
            6,
            created("/lock-0000000001"),
        ),
    ];
    assert_linearizable(&ops);
    assert_eq!(partition(&prepare(&ops)).len(), 1);
    let reused = vec![
        op(
            1,
            create_sequential("/job-"),
            1,
            2,
            created("/job-0000000003"),
        ),
        op(
            2,
            create_sequential("/lock-"),
            5,
            6,
            created("/lock-0000000002"),
        ),
    ];
    assert_not_linearizable(&reused);
}

#[test]
fn ephemerals_vanish_at_close_session() {
    let setup = vec![
        op(7, create_ephemeral("/e"), 1, 2, created("/e")),
        op(7, create("/p", ""), 3, 4, created("/p")),
        op(7, Call::CloseSession, 5, 6, Ret::Done),
    ];
    let after = |ret| [setup.clone(), vec![op(2, exists("/e"), 7, 8, ret)]].concat();
    assert_linearizable(&after(Ret::Exists(None)));
    assert_not_linearizable(&after(Ret::Exists(Some(0))));
    // Non-ephemeral nodes of the session stay.
    let kept = [
        setup.clone(),
        vec![op(2, exists("/p"), 7, 8, Ret::Exists(Some(0)))],
    ]
    .concat();
    assert_linearizable(&kept);
    // Concurrent with the close, either answer.
    for ret in [Ret::Exists(None), Ret::Exists(Some(0))] {
        let concurrent = vec![
            op(7, create_ephemeral("/e"), 1, 2, created("/e")),
            op(7, Call::CloseSession, 3, 10, Ret::Done),
            op(2, exists("/e"), 4, 5, ret),
        ];
        assert_linearizable(&concurrent);
    }
}

#[test]
fn closed_session_can_do_nothing() {
    let setup = vec![
        op(1, create("/p", ""), 1, 2, created("/p")),
        op(7, create_ephemeral("/p/e"), 3, 4, created("/p/e")),
        op(7, Call::CloseSession, 5, 6, Ret::Done),
    ];
    let after = |ret| [setup.clone(), vec![op(7, create("/p/f", ""), 7, 8, ret)]].concat();
    assert_not_linearizable(&after(created("/p/f")));
    assert_linearizable(&after(error(err::SESSION_EXPIRED)));
}

#[test]
fn session_expired_and_connection_loss_constrain_nothing() {
    let ops = with_a(vec![
        op(1, create("/a", ""), 3, 4, error(err::SESSION_EXPIRED)),
        op(1, get("/zzz"), 5, 6, error(err::CONNECTION_LOSS)),
        op(1, get("/a"), 7, 8, data("0", 0)),
    ]);
    assert_linearizable(&ops);
}

#[test]
fn operation_timeout_is_an_unknown_outcome() {
    let ops = with_a(vec![
        op(1, set("/a", "1", -1), 3, 4, error(err::OPERATION_TIMEOUT)),
        op(2, get("/a"), 10, 11, data("1", 1)),
    ]);
    assert_linearizable(&ops);
}

#[test]
fn partial_multi_is_caught() {
    let m = multi(vec![create("/a/x", ""), create("/b", "")]);
    let done = Ret::Multi(vec![created("/a/x"), created("/b")]);
    // Readers strictly after each other: /a/x visible, then /b still missing.
    let ops = with_a(vec![
        op(1, m.clone(), 3, 20, done.clone()),
        op(2, exists("/a/x"), 4, 5, Ret::Exists(Some(0))),
        op(3, exists("/b"), 6, 7, Ret::Exists(None)),
    ]);
    assert_not_linearizable(&ops);
    let whole = with_a(vec![
        op(1, m, 3, 20, done),
        op(2, exists("/a/x"), 4, 5, Ret::Exists(Some(0))),
        op(3, exists("/b"), 6, 7, Ret::Exists(Some(0))),
    ]);
    assert_linearizable(&whole);
}

#[test]
fn failed_multi_has_no_effect_and_reports_the_first_error() {
    let m = multi(vec![
        create("/a/x", ""),
        create("/a", ""),
        delete("/nope", -1),
    ]);
    let after = |ret| {
        with_a(vec![
            op(1, m.clone(), 3, 4, error(err::NODE_EXISTS)),
            op(2, exists("/a/x"), 5, 6, ret),
        ])
    };
    assert_linearizable(&after(Ret::Exists(None)));
    assert_not_linearizable(&after(Ret::Exists(Some(0))));
    let wrong_code = with_a(vec![op(1, m, 3, 4, error(NO_NODE))]);
    assert_not_linearizable(&wrong_code);
}

#[test]
fn multi_ops_see_earlier_ops_of_the_same_multi() {
    let m = multi(vec![
        create("/a/x", ""),
        create("/a/x/y", ""),
        set("/a/x", "d", 0),
        check_version("/a/x", 1),
        delete("/a/x/y", -1),
    ]);
    let ret = Ret::Multi(vec![
        created("/a/x"),
        created("/a/x/y"),
        Ret::Set { version: 1 },
        Ret::Done,
        Ret::Done,
    ]);
    let ops = with_a(vec![
        op(1, m.clone(), 3, 4, ret),
        op(2, get("/a/x"), 5, 6, data("d", 1)),
    ]);
    assert_linearizable(&ops);
    let dup = multi(vec![create("/a/x", ""), create("/a/x", "")]);
    assert_linearizable(&with_a(vec![op(
        1,
        dup.clone(),
        3,
        4,
        error(err::NODE_EXISTS),
    )]));
    let dup_ok = Ret::Multi(vec![created("/a/x"), created("/a/x")]);
    assert_not_linearizable(&with_a(vec![op(1, dup, 3, 4, dup_ok)]));
}

#[test]
fn partitions_merge_through_multi_close_and_root() {
    let ops = vec![
        op(1, create("/a", ""), 1, 2, created("/a")),
        op(1, create("/a/b", ""), 3, 4, created("/a/b")),
        op(1, create("/b", ""), 5, 6, created("/b")),
        op(1, create("/c", ""), 7, 8, created("/c")),
        op(1, create("/d", ""), 9, 10, created("/d")),
        op(5, create_ephemeral("/e"), 11, 12, created("/e")),
        op(5, create_ephemeral("/f"), 13, 14, created("/f")),
    ];
    let sizes = |ops: &[Operation]| -> Vec<usize> {
        let mut s: Vec<usize> = partition(&prepare(ops))
            .iter()
            .map(|p| p.ops.len())
            .collect();
        s.sort();
        s
    };
    assert_eq!(sizes(&ops), vec![1, 1, 1, 1, 1, 2]);
    let with_multi = [
        ops.clone(),
        vec![op(
            2,
            multi(vec![set("/b", "", -1), set("/c", "", 3)]),
            15,
            16,
            error(err::BAD_VERSION),
        )],
    ]
    .concat();
    assert_eq!(sizes(&with_multi), vec![1, 1, 1, 2, 3]);
    let with_close = [
        with_multi.clone(),
        vec![op(5, Call::CloseSession, 17, 18, Ret::Done)],
    ]
    .concat();
    assert_eq!(sizes(&with_close), vec![1, 2, 3, 3]);
    let with_root = [
        with_close,
        vec![op(3, children("/"), 19, 20, names(&["a", "b", "c", "d"]))],
    ]
    .concat();
    assert_eq!(sizes(&with_root), vec![10]);
    assert_linearizable(&with_root);
}

#[test]
fn report_names_partition_prefix_and_stuck_ops() {
    let ops = with_a(vec![
        op(1, set("/a", "1", -1), 3, 4, Ret::Set { version: 1 }),
        op(2, get("/a"), 5, 6, data("0", 0)),
        op(3, create("/b", ""), 1, 2, created("/b")),
    ]);
    let report = assert_not_linearizable(&ops);
    for needle in [
        "partition 2 of 2: subtrees /a",
        "longest linearizable prefix: 2 ops",
        "op #1 client 1 session 0x1: setData /a \"1\" v=any @[3, 4] -> set v=1",
        "op #2 client 2 session 0x2: getData /a @[5, 6] -> data \"0\" v=0",
        "model answers: data \"1\" v=1",
        "/a: data \"1\" v=1",
    ] {
        assert!(
            report.contains(needle),
            "missing {needle:?} in report:\n{report}"
        );
    }
    assert_eq!(
        report,
        assert_not_linearizable(&ops),
        "reports must be deterministic"
    );
}

#[test]
fn budget_exhaustion_gives_unknown() {
    // Nine unknown-outcome writes and a read no subset of them explains:
    // the search must try every subset and order (thousands of configurations).
    let mut ops = with_a(Vec::new());
    for c in 1..=9u64 {
        ops.push(lost(c, set("/a", &c.to_string(), -1), 2 + c));
    }
    ops.push(op(99, get("/a"), 101, 102, data("x", 9)));
    let outcome = check(&ops, Budget { max_states: 1000 });
    let Outcome::Unknown { reason } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        reason.contains("budget of 1000 states exhausted"),
        "{reason}"
    );
    assert!(reason.contains("longest linearizable prefix"), "{reason}");
    assert_not_linearizable(&ops);
}

#[test]
#[should_panic(expected = "not after invoke")]
fn return_before_invoke_panics() {
    check(&[op(1, get("/a"), 5, 5, error(NO_NODE))], Budget::default());
}

#[test]
fn empty_history_and_unknown_only_history_are_linearizable() {
    assert_linearizable(&[]);
    assert_linearizable(&[lost(1, create("/a", ""), 1), lost(2, get("/a"), 2)]);
}
