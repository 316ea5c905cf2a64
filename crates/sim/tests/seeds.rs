//! The simulator's seed batch, replay, determinism and planted-bug tests.
//!
//! - `SIM_SEEDS=<n>` sets the batch size (default 1,000), `SIM_FIRST_SEED`
//!   its start (default 0): a soak is `SIM_FIRST_SEED=100000 SIM_SEEDS=50000`.
//! - `SIM_SEED=<n>` makes `replay` run that one seed and print its trace.
//! - `SIM_JOIN=1` (batch and replay): a brand-new node joins in every run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use keel_consensus::PlantedBug;
use sim::{run_seed, Joiner, Options, Report, World};

/// How many failing seeds have a failure that `matches` accepts.
fn caught_by(failing: &[Report], matches: impl Fn(&str) -> bool) -> usize {
    failing
        .iter()
        .filter(|r| r.failures.iter().any(|f| matches(f)))
        .count()
}

/// The first failing seed and its first failure, for a test's log.
fn first_failure(failing: &[Report]) -> Option<(u64, Option<String>)> {
    failing
        .first()
        .map(|r| (r.seed, r.failures.first().cloned()))
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value} is not a number")),
        Err(_) => default,
    }
}

/// Runs `seeds` on every core; returns the reports of failing seeds and
/// the summed stats.
fn run_batch(
    seeds: Vec<u64>,
    options: impl Fn(u64) -> Options + Sync,
) -> (Vec<Report>, sim::Stats) {
    let (failing, stats, ran) = run_until(seeds.clone(), options, |_, _| false);
    assert_eq!(ran, seeds.len(), "a batch without a stop runs every seed");
    (failing, stats)
}

/// Runs `seeds` on every core until `done` (given the failing reports and
/// stats so far) holds: a planted bug's test stops at its first catch
/// instead of running all its seeds. Returns the failing reports, the
/// summed stats and how many seeds ran (seeds in flight at the stop
/// finish; none starts after it).
fn run_until(
    seeds: Vec<u64>,
    options: impl Fn(u64) -> Options + Sync,
    done: impl Fn(&[Report], &sim::Stats) -> bool + Sync,
) -> (Vec<Report>, sim::Stats, usize) {
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let state = Mutex::new((Vec::new(), sim::Stats::default(), 0usize));
    let seeds = Arc::new(seeds);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let at = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(&seed) = seeds.get(at) else { return };
                let report = World::new(options(seed)).run();
                if (at + 1).is_multiple_of(100) {
                    eprintln!("sim: {} / {} seeds", at + 1, seeds.len());
                }
                let mut guard = state.lock().unwrap();
                let (failing, totals, ran) = &mut *guard;
                add_stats(totals, &report.stats);
                *ran += 1;
                if !report.ok() {
                    failing.push(report);
                }
                if done(failing, totals) {
                    stop.store(true, Ordering::Relaxed);
                }
            });
        }
    });
    let (mut failing, stats, ran) = state.into_inner().unwrap();
    assert!(ran <= seeds.len());
    failing.sort_by_key(|r| r.seed);
    (failing, stats, ran)
}

/// A planted bug's batch: `seeds` until one fails with a failure that
/// `caught` accepts (run_until). Returns the failing reports, the summed
/// stats, how many seeds ran, and how many failing seeds `caught` accepts.
fn run_until_caught(
    seeds: Vec<u64>,
    options: impl Fn(u64) -> Options + Sync,
    caught: impl Fn(&str) -> bool + Sync,
) -> (Vec<Report>, sim::Stats, usize, usize) {
    let (failing, stats, ran) =
        run_until(seeds, options, |failing, _| caught_by(failing, &caught) > 0);
    let count = caught_by(&failing, &caught);
    (failing, stats, ran, count)
}

fn add_stats(total: &mut sim::Stats, run: &sim::Stats) {
    total.events += run.events;
    total.operations += run.operations;
    total.acknowledged_writes += run.acknowledged_writes;
    total.unknown_outcomes += run.unknown_outcomes;
    total.crashes += run.crashes;
    total.torn_writes += run.torn_writes;
    total.partitions += run.partitions;
    total.messages += run.messages;
    total.dropped += run.dropped;
    total.duplicated += run.duplicated;
    total.max_term = total.max_term.max(run.max_term);
    total.snapshots_written += run.snapshots_written;
    total.snapshots_corrupted += run.snapshots_corrupted;
    total.watch_events += run.watch_events;
    total.sessions_expired += run.sessions_expired;
    total.pipelined_bursts += run.pipelined_bursts;
    total.persistent_watches_added += run.persistent_watches_added;
    total.acl_requests += run.acl_requests;
    total.reap_requests += run.reap_requests;
    total.reaped_containers += run.reaped_containers;
    total.reaped_ttl_nodes += run.reaped_ttl_nodes;
    total.linearizability_undecided += run.linearizability_undecided;
    total.membership_changes += run.membership_changes;
    total.joins += run.joins;
    total.joined += run.joined;
    total.kv_operations += run.kv_operations;
    total.kv_acknowledged_writes += run.kv_acknowledged_writes;
    total.kv_unknown_outcomes += run.kv_unknown_outcomes;
    total.kv_spanning_requests += run.kv_spanning_requests;
    total.kv_expiry_requests += run.kv_expiry_requests;
    total.kv_expiry_proposals += run.kv_expiry_proposals;
    total.kv_cas_requests += run.kv_cas_requests;
    total.kv_cas_committed += run.kv_cas_committed;
    total.kv_cas_aborted += run.kv_cas_aborted;
    total.kv_typed_requests += run.kv_typed_requests;
    total.kv_flushes += run.kv_flushes;
    total.kv_batched_writes += run.kv_batched_writes;
    total.kv_ghost_commands += run.kv_ghost_commands;
    total.kv_scan_calls += run.kv_scan_calls;
    total.kv_scans += run.kv_scans;
    total.lease_reads += run.lease_reads;
    total.kv_linearizability_undecided += run.kv_linearizability_undecided;
}

#[test]
fn seed_batch_finds_no_violation() {
    let first = env_u64("SIM_FIRST_SEED", 0);
    let count = env_u64("SIM_SEEDS", 1_000);
    let started = std::time::Instant::now();
    // SIM_JOIN=1: a brand-new node joins in every run, not in 15%.
    let (failing, stats) = run_batch((first..first + count).collect(), options_for_seed);
    eprintln!(
        "sim: {count} seeds in {:.1} s: {stats:?}",
        started.elapsed().as_secs_f64()
    );
    for report in &failing {
        eprintln!(
            "seed {} FAILED (replay: {}SIM_SEED={} cargo test -p sim --release replay -- --nocapture):\n  {}",
            report.seed,
            if std::env::var("SIM_JOIN").is_ok_and(|v| v == "1") { "SIM_JOIN=1 " } else { "" },
            report.seed,
            report.failures.join("\n  ")
        );
    }
    let seeds: Vec<u64> = failing.iter().map(|r| r.seed).collect();
    assert!(failing.is_empty(), "failing seeds: {seeds:?}");
}

/// The batch's options; with SIM_JOIN=1 a brand-new node joins in every
/// run, not in 15% (the batch's failures name it in their replay line).
fn options_for_seed(seed: u64) -> Options {
    let mut options = Options::for_seed(seed);
    if std::env::var("SIM_JOIN").is_ok_and(|v| v == "1") {
        options.joiner = Some(Joiner::always(seed, options.duration_ms));
    }
    options
}

#[test]
fn replay() {
    let Ok(seed) = std::env::var("SIM_SEED") else {
        return eprintln!("set SIM_SEED=<n> to replay one seed with its trace");
    };
    let seed: u64 = seed.parse().expect("SIM_SEED is a number");
    if let Ok(filter) = std::env::var("SIM_LOG") {
        // The nodes' own logs (all nodes interleaved, in simulated order).
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let targets: tracing_subscriber::filter::Targets = filter
            .parse()
            .expect("SIM_LOG: a level or target=level directives");
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing_subscriber::filter::LevelFilter::TRACE)
            .without_time()
            .finish()
            .with(targets)
            .try_init();
    }
    let mut options = options_for_seed(seed);
    options.trace = true;
    match std::env::var("SIM_PLANTED_BUG").as_deref() {
        Ok("reads-skip-queue") => options.reads_skip_queue = true,
        Ok("recursive-watches-blind") => options.recursive_watches_blind = true,
        Ok("observers-vote") => options.observers_vote = true,
        Ok("acl-blind") => options.acl_blind = true,
        Ok("reap-early") => options.reap_early = true,
        Ok("reap-late") => options.reap_late = true,
        Ok("snapshot-torn") => options.snapshot_torn = true,
        Ok("kv-reads-skip-barrier") => options.kv_reads_skip_barrier = true,
        Ok("kv-snapshot-keys-dropped") => options.kv_snapshot_keys_dropped = true,
        Ok("kv-batch-seq-shifted") => options.kv_batch_seq_shifted = true,
        Ok("kv-exec-partial") => {
            options.kv_spans = options.kv_clients > 0;
            options.kv_exec_partial = true;
        }
        Ok("kv-expire-early") => {
            options.kv_expiry = options.kv_clients > 0;
            options.kv_expire_early = true;
        }
        Ok("kv-ttl-from-log-clock") => {
            options.kv_expiry = options.kv_clients > 0;
            options.kv_ttl_from_log_clock = true;
        }
        Ok("kv-scan-skips") => {
            options.kv_scan = options.kv_clients > 0;
            options.kv_scan_skips = true;
        }
        Ok("kv-watch-blind") => {
            options.kv_watch = options.kv_clients > 0;
            options.kv_watch_blind = true;
        }
        Ok("kv-empty-kept") => {
            options.kv_types = options.kv_clients > 0;
            options.kv_empty_kept = true;
        }
        Ok("no-leader-transfer") => options.planted_bug = PlantedBug::NoLeaderTransfer,
        Ok("lease-without-leadership") => options.planted_bug = PlantedBug::LeaseWithoutLeadership,
        Ok("no-first-snapshot") => options.planted_bug = PlantedBug::NoFirstSnapshot,
        Ok(_) => options.planted_bug = PlantedBug::ApplyBeforeCommit,
        Err(_) => {}
    }
    eprintln!("{options:?}");
    let report = World::new(options).run();
    for line in &report.trace {
        println!("{line}");
    }
    println!("stats: {:?}", report.stats);
    println!("fingerprint: {:#x}", report.fingerprint);
    for failure in &report.failures {
        println!("FAILURE: {failure}");
    }
    assert!(report.ok(), "seed {seed} fails");
}

/// Seeds that once found a bug, outside the default batch's range.
const FOUND_BUGS: [(u64, &str); 5] = [
    (
        118_449,
        "linearize model: a plain create moves the sequential counter",
    ),
    (
        218_482,
        "a leader elected with the step that removes it applies it while leading (raft-rs panicked)",
    ),
    (
        331_133,
        "a read queued behind writes ran after its own session's close was applied, past a change whose watch the close had dropped",
    ),
    (
        846_868,
        "a read queued behind writes was answered ahead of the Close a node removed from the configuration had queued, past a change whose event the close dropped",
    ),
    (
        8_300_134,
        "the convergence check sampled a session expiry proposed 100 ms before the settle's end (a late leader change re-armed the session) before one replica applied it",
    ),
];

/// The same, found with a joiner in every run (`SIM_JOIN=1`).
const FOUND_JOIN_BUGS: [(u64, &str); 5] = [
    (
        260,
        "a joiner whose first snapshot was lost stayed empty: the leader had no floor for it",
    ),
    (
        294,
        "a joiner whose first snapshot was lost stayed empty: the leader had no floor for it",
    ),
    (
        358,
        "a joiner that crashed before its first snapshot stayed empty: the leaders after the restarts had no floor for it",
    ),
    (
        848,
        "the simulated operator asked changes that changed nothing, from a removed node's view, and held back a re-add",
    ),
    (
        8_245_064,
        "the simulated network dropped a snapshot refused at the handshake (the server's transport keeps it queued): the re-added member waited out the retry timer past the settle",
    ),
];

#[test]
fn seeds_that_once_found_a_bug_pass() {
    for (seed, bug) in FOUND_BUGS {
        let report = World::new(Options::for_seed(seed)).run();
        assert!(report.ok(), "seed {seed} ({bug}): {:?}", report.failures);
    }
    for (seed, bug) in FOUND_JOIN_BUGS {
        let mut options = Options::for_seed(seed);
        options.joiner = Some(Joiner::always(seed, options.duration_ms));
        let report = World::new(options).run();
        assert!(
            report.ok(),
            "SIM_JOIN=1 seed {seed} ({bug}): {:?}",
            report.failures
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_run_byte_for_byte() {
    for seed in [3, 17, 4242] {
        let run = |seed| {
            let mut options = Options::for_seed(seed);
            options.trace = true;
            World::new(options).run()
        };
        let (a, b) = (run(seed), run(seed));
        assert!(a.trace.len() > 100, "seed {seed}: a trace worth comparing");
        assert_eq!(a.trace, b.trace, "seed {seed}: traces differ");
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_eq!(a.history, b.history);
        assert_ne!(a.fingerprint, run_seed(seed + 1).fingerprint);
    }
}

#[test]
fn a_planted_bug_is_caught_within_the_batch() {
    // The leader acknowledges writes before a quorum has them: a crash or
    // partition of that leader then loses acknowledged writes.
    let seeds: Vec<u64> = (0..200).collect();
    let (failing, _, ran) = run_until(
        seeds,
        |seed| Options {
            planted_bug: PlantedBug::ApplyBeforeCommit,
            ..Options::for_seed(seed)
        },
        |failing, _| !failing.is_empty(),
    );
    eprintln!(
        "planted bug caught by {} of {ran} seeds run (of 200); first: {:?}",
        failing.len(),
        first_failure(&failing)
    );
    assert!(!failing.is_empty(), "the checkers missed a planted bug");
}

#[test]
fn reads_that_skip_the_session_queue_are_caught() {
    // The node's connection shell answers a read at once instead of
    // queueing it behind the session's writes in flight (what conn.rs
    // would do without keel_server::fifo): pipelined bursts then get a
    // read's reply before an earlier write's.
    let seeds: Vec<u64> = (0..200).collect();
    let (failing, _, ran, order_broken) = run_until_caught(
        seeds,
        |seed| Options {
            reads_skip_queue: true,
            ..Options::for_seed(seed)
        },
        |f: &str| f.contains("session order broken"),
    );
    eprintln!(
        "reads skipping the queue caught by {} of {ran} seeds run ({order_broken} by the session-order check); first: {:?}",
        failing.len(),
        first_failure(&failing)
    );
    assert!(
        order_broken > 0,
        "the session-order check missed reads overtaking writes"
    );
}

#[test]
fn recursive_watches_blind_to_descendants_are_caught() {
    // The tree's watch manager fires a persistent-recursive watch for its
    // own path only: the watch checks must see events missing.
    let seeds: Vec<u64> = (0..200).collect();
    let (failing, _, ran, missed) = run_until_caught(
        seeds,
        |seed| Options {
            recursive_watches_blind: true,
            ..Options::for_seed(seed)
        },
        |f: &str| f.contains("PersistentRecursive watch"),
    );
    eprintln!(
        "blind recursive watches caught by {} of {ran} seeds run ({missed} by the watch checks); first: {:?}",
        failing.len(),
        first_failure(&failing)
    );
    assert!(
        missed > 0,
        "the watch checks missed recursive watches that do not fire"
    );
}

#[test]
fn observers_that_vote_are_caught() {
    // The member list makes the observer a voter: some run elects it.
    let seeds: Vec<u64> = (0..200).collect();
    let (failing, _, ran, led) = run_until_caught(
        seeds,
        |seed| Options {
            observers_vote: true,
            ..Options::for_seed(seed)
        },
        |f: &str| f.starts_with("observer n"),
    );
    eprintln!(
        "voting observers caught by {} of {ran} seeds run ({led} by the observer check)",
        failing.len()
    );
    assert!(led > 0, "the observer check missed an observer that leads");
}

/// A brand-new node joins in every run, a voter in even seeds and an
/// observer in odd ones, without a crash.
fn with_joiner(seed: u64) -> Options {
    let role = if seed.is_multiple_of(2) {
        keel_consensus::Role::Voter
    } else {
        keel_consensus::Role::Observer
    };
    Options {
        joiner: Some(Joiner {
            role,
            at_ms: 1_000 + seed % 4_000,
            crash: None,
            replaces: seed % 4 < 2,
        }),
        ..Options::for_seed(seed)
    }
}

#[test]
fn a_leader_that_never_sends_a_joiner_its_first_snapshot_is_caught() {
    let seeds: Vec<u64> = (0..40).collect();
    let (failing, stats) = run_batch(seeds.clone(), with_joiner);
    assert!(
        failing.is_empty(),
        "joins fail: {:?}",
        first_failure(&failing)
    );
    assert_eq!(stats.joined, 40, "every joiner caught up");
    let (failing, stats, ran, stuck) = run_until_caught(
        seeds,
        |seed| Options {
            planted_bug: PlantedBug::NoFirstSnapshot,
            ..with_joiner(seed)
        },
        |f: &str| f.starts_with("no convergence"),
    );
    eprintln!(
        "no first snapshot caught by {} of {ran} seeds run ({stuck} by the convergence check); {} joiners joined",
        failing.len(),
        stats.joined
    );
    assert!(
        stuck > 0,
        "the convergence check missed a joiner that never caught up"
    );
}

#[test]
fn a_leader_that_ignores_affinity_is_caught() {
    let seeds: Vec<u64> = (0..200).collect();
    let (failing, _, ran, ignored) = run_until_caught(
        seeds,
        |seed| Options {
            planted_bug: PlantedBug::NoLeaderTransfer,
            ..Options::for_seed(seed)
        },
        |f: &str| f.starts_with("leader affinity"),
    );
    eprintln!(
        "ignored affinity caught by {} of {ran} seeds run ({ignored} by the affinity check)",
        failing.len()
    );
    assert!(
        ignored > 0,
        "the affinity check missed a leader that never hands over"
    );
}

#[test]
fn acl_checks_that_pass_everything_are_caught() {
    // The tree's ACL check lets everyone through: clients that did not
    // authenticate read and write ACL_USER's nodes.
    let seeds: Vec<u64> = (0..200).collect();
    let (failing, _, ran, bypassed) = run_until_caught(
        seeds,
        |seed| Options {
            acl_blind: true,
            ..Options::for_seed(seed)
        },
        |f: &str| f.contains("ACL bypassed"),
    );
    eprintln!(
        "blind ACL checks caught by {} of {ran} seeds run ({bypassed} by the ACL check)",
        failing.len()
    );
    assert!(
        bypassed > 0,
        "the ACL check missed requests allowed without authentication"
    );
}

#[test]
fn a_reaper_that_deletes_what_is_not_due_is_caught() {
    // The reaper (its candidates and the apply step's own check) takes
    // childless TTL nodes whatever their age and containers that never
    // had a child.
    let seeds: Vec<u64> = (0..200).collect();
    let (failing, _, ran, early) = run_until_caught(
        seeds,
        |seed| Options {
            reap_early: true,
            ..Options::for_seed(seed)
        },
        |f: &str| f.contains(": reaped "),
    );
    eprintln!(
        "an early reaper caught by {} of {ran} seeds run ({early} by the reaper checks); first: {:?}",
        failing.len(),
        first_failure(&failing)
    );
    assert!(early > 0, "the reaper checks missed deletions not due");
}

#[test]
fn a_reaper_that_leaves_what_is_due_is_caught() {
    // The reaper reads TTLs as seconds and never finds a container empty:
    // after the settle, nodes long due are still there.
    let seeds: Vec<u64> = (0..200).collect();
    let late = |failing: &[Report], kind: &str| {
        caught_by(failing, |f| f.starts_with(&format!("reaper: /reap/{kind}")))
    };
    let (failing, _, ran) = run_until(
        seeds,
        |seed| Options {
            reap_late: true,
            ..Options::for_seed(seed)
        },
        |failing, _| late(failing, "c") > 0 && late(failing, "t") > 0,
    );
    let (containers, ttl_nodes) = (late(&failing, "c"), late(&failing, "t"));
    eprintln!(
        "a late reaper caught by {} of {ran} seeds run (containers left in {containers}, TTL nodes in {ttl_nodes})",
        failing.len(),
    );
    assert!(
        containers > 0 && ttl_nodes > 0,
        "the check after the settle missed nodes left that are due"
    );
}

#[test]
fn snapshots_that_skip_copy_on_write_are_caught() {
    // A node changed while a snapshot is written goes into it as it is
    // now, not as it was at the snapshot's position: every snapshot is
    // loaded when written, and this one is refused or differs.
    let seeds: Vec<u64> = (0..200).collect();
    let (failing, _, ran, torn) = run_until_caught(
        seeds,
        |seed| Options {
            snapshot_torn: true,
            ..Options::for_seed(seed)
        },
        |f: &str| f.contains(": snapshot ") && !f.contains("corrupted"),
    );
    eprintln!(
        "torn snapshots caught by {} of {ran} seeds run ({torn} by the snapshot check); first: {:?}",
        failing.len(),
        first_failure(&failing)
    );
    assert!(torn > 0, "the snapshot check missed torn snapshots");
}

/// The batch's seeds that run Keel KV clients, among the first `count`.
fn kv_seeds(count: u64) -> Vec<u64> {
    (0..)
        .filter(|&seed| Options::for_seed(seed).kv_clients > 0)
        .take(count as usize)
        .collect()
}

#[test]
fn kv_reads_that_skip_the_read_barrier_are_caught() {
    // A KV read answered from the node's shards at once, without a
    // ReadIndex barrier: a follower behind, or a leader deposed by a
    // partition, answers a value older than an acknowledged write.
    let seeds = kv_seeds(200);
    let (failing, _, ran, stale) = run_until_caught(
        seeds,
        |seed| Options {
            kv_reads_skip_barrier: true,
            ..Options::for_seed(seed)
        },
        |f: &str| f.contains("kv history is not linearizable"),
    );
    eprintln!(
        "KV reads skipping the barrier caught by {} of {ran} KV seeds run ({stale} by the KV linearizability check); first: {:?}",
        failing.len(),
        first_failure(&failing)
    );
    assert!(stale > 0, "the KV linearizability check missed stale reads");
}

#[test]
fn a_read_lease_taken_without_leadership_is_caught() {
    // Every node takes a read lease from the ReadIndex rounds it asks:
    // a follower then answers reads (KV reads, and reads after a
    // ZooKeeper sync) from its own state, behind writes the leader has
    // acknowledged. (A leader's lease made ten election
    // timeouts long was caught by 2 KV seeds in 2,000: a leader cut off
    // steps down within two election timeouts, so the stale window is
    // short.)
    let seeds = kv_seeds(200);
    let caught = |f: &str| f.contains("history is not linearizable");
    let (failing, stats, ran) = run_until(
        seeds,
        |seed| Options {
            planted_bug: PlantedBug::LeaseWithoutLeadership,
            ..Options::for_seed(seed)
        },
        |failing, stats| caught_by(failing, caught) > 0 && stats.lease_reads > 0,
    );
    let stale = caught_by(&failing, caught);
    eprintln!(
        "a lease without leadership caught by {} of {ran} KV seeds run ({stale} by a linearizability check); first: {:?}",
        failing.len(),
        first_failure(&failing)
    );
    assert!(stats.lease_reads > 0, "no read was served from a lease");
    assert!(
        stale > 0,
        "the linearizability checks missed a lease without leadership"
    );
}

#[test]
fn kv_snapshots_without_keys_are_caught() {
    // The keyspace's snapshot part holds no keys
    // (keel_kv::planted::set_snapshot_keys_dropped): the check of every
    // snapshot written, and a node restarted or caught up from one, must
    // show the keys missing. 50 seeds: nearly every one catches it, and
    // its histories are not linearizable, the slowest to search.
    let seeds = kv_seeds(50);
    let (failing, _, ran, snapshot) = run_until_caught(
        seeds,
        |seed| Options {
            kv_snapshot_keys_dropped: true,
            ..Options::for_seed(seed)
        },
        |f: &str| f.contains(": snapshot "),
    );
    let lost = caught_by(&failing, |f| f.starts_with("kv"));
    eprintln!(
        "KV snapshots without keys caught by {} of {ran} KV seeds run ({snapshot} by the snapshot check, {lost} by the KV history checks); first: {:?}",
        failing.len(),
        first_failure(&failing)
    );
    assert!(
        snapshot > 0,
        "the snapshot check missed a keyspace left out"
    );
}

/// A planted KV bug's test: the first `count` KV seeds with `workload`
/// (the options that give the bug something to break) pass; with
/// `planted` switched on as well, some fail with a failure `matches`
/// accepts. Prints what caught it as `what`; returns the clean batch's
/// stats for the test's own checks.
fn planted_kv_bug_is_caught(
    count: u64,
    what: &str,
    workload: impl Fn(u64) -> Options + Sync,
    planted: impl Fn(Options) -> Options + Sync,
    matches: impl Fn(&str) -> bool + Sync,
) -> sim::Stats {
    let seeds = kv_seeds(count);
    let (clean, stats) = run_batch(seeds.clone(), &workload);
    assert!(
        clean.is_empty(),
        "{what}: the seeds fail without the bug: {:?}",
        first_failure(&clean)
    );
    let (failing, _, ran, caught) =
        run_until_caught(seeds, |seed| planted(workload(seed)), matches);
    eprintln!(
        "{what} caught by {} of {ran} KV seeds run ({caught} by the expected check); first: {:?}",
        failing.len(),
        first_failure(&failing)
    );
    assert!(caught > 0, "{what}: the expected check missed it");
    stats
}

#[test]
fn batched_replies_to_the_wrong_request_are_caught() {
    // A COMMANDS batch (a connection's pipelined writes in one proposal)
    // numbers its commands one past their own request numbers
    // (keel_kv::planted::set_batch_seq_shifted): the client must see a
    // reply to a request it has not in flight, or its ghost answered
    // what the write should have been.
    let stats = planted_kv_bug_is_caught(
        20,
        "batched replies shifted by one request",
        Options::for_seed,
        |options| Options {
            kv_batch_seq_shifted: true,
            ..options
        },
        |f| f.contains("not in flight") || f.contains("ghost command"),
    );
    assert!(stats.kv_batched_writes > 0, "no write was batched");
    assert!(
        stats.kv_ghost_commands > stats.kv_batched_writes,
        "every batch held one ghost"
    );
    eprintln!(
        "batched writes: {} (ghost commands behind them: {})",
        stats.kv_batched_writes, stats.kv_ghost_commands
    );
}

#[test]
fn a_transaction_applied_in_part_is_caught() {
    // EXEC answers every SET of the spanning keys but applies only the
    // first two (keel_kv::planted::set_exec_partial): the spanning reads,
    // the keys' equality at the end and their linearizability must show
    // it.
    let stats = planted_kv_bug_is_caught(
        40,
        "a transaction applied in part",
        |seed| Options {
            kv_spans: true,
            ..Options::for_seed(seed)
        },
        |options| Options {
            kv_exec_partial: true,
            ..options
        },
        |f| f.contains("in part"),
    );
    assert!(
        stats.kv_spanning_requests > 0,
        "no spanning request was sent"
    );
}

#[test]
fn keys_that_expire_early_are_caught() {
    // SET's PX sets a deadline half as far as asked
    // (keel_kv::planted::set_expire_early): reads between the two
    // deadlines find the key gone, which the KV linearizability check
    // (deadlines on the log's clock) must refuse.
    let stats = planted_kv_bug_is_caught(
        40,
        "keys expiring early",
        |seed| Options {
            kv_expiry: true,
            ..Options::for_seed(seed)
        },
        |options| Options {
            kv_expire_early: true,
            ..options
        },
        |f| f.contains("not linearizable"),
    );
    assert!(stats.kv_expiry_requests > 0, "no request set a deadline");
    assert!(
        stats.kv_expiry_proposals > 0,
        "no leader proposed an expiry"
    );
}

#[test]
fn a_ttl_that_counts_from_the_log_clock_is_caught() {
    // PTTL counts down from the log's clock instead of the node's
    // (keel_kv::planted::set_ttl_from_log_clock): where no entry reached
    // the node for a while, it shows more time left than the deadline
    // (pinned by the log's clock, and by PEXPIRETIME) allows.
    let stats = planted_kv_bug_is_caught(
        40,
        "TTL from the log clock",
        |seed| Options {
            kv_expiry: true,
            ..Options::for_seed(seed)
        },
        |options| Options {
            kv_ttl_from_log_clock: true,
            ..options
        },
        |f| f.contains("not linearizable") && f.contains("Pttl"),
    );
    assert!(stats.kv_expiry_requests > 0, "no request set a deadline");
}

#[test]
fn watch_transactions_blind_to_changes_are_caught() {
    // EXEC never finds a watched key changed
    // (keel_kv::planted::set_watch_blind): a CAS (WATCH, GET, MULTI SET
    // EXEC) commits over another client's write, which the KV
    // linearizability check must refuse.
    let stats = planted_kv_bug_is_caught(
        40,
        "WATCH blind to changes",
        |seed| Options {
            kv_watch: true,
            ..Options::for_seed(seed)
        },
        |options| Options {
            kv_watch_blind: true,
            ..options
        },
        |f| f.contains("not linearizable"),
    );
    assert!(stats.kv_cas_committed > 0, "no WATCH transaction committed");
    eprintln!(
        "WATCH transactions: {} sent, {} committed, {} aborted",
        stats.kv_cas_requests, stats.kv_cas_committed, stats.kv_cas_aborted
    );
}

#[test]
fn emptied_hashes_and_sets_left_behind_are_caught() {
    // The KV clients also write and read a hash and a set (HSET, HDEL,
    // HGET, HLEN, SADD, SREM, SISMEMBER, SCARD; GET meeting WRONGTYPE,
    // SET and DEL changing the type) under the batch's faults, through
    // snapshots, restarts and installs. With an emptied hash or set kept
    // as an empty key (keel_kv::planted::set_empty_kept) the KV checks
    // must see its type outlive it (linearizability), or the snapshot
    // check an empty set it cannot load.
    let stats = planted_kv_bug_is_caught(
        40,
        "emptied hashes and sets kept",
        |seed| Options {
            kv_types: true,
            ..Options::for_seed(seed)
        },
        |options| Options {
            kv_empty_kept: true,
            ..options
        },
        |f| f.contains("not linearizable") || f.contains(": snapshot "),
    );
    assert!(
        stats.kv_typed_requests > 0,
        "no request used the hash or the set"
    );
    assert!(stats.kv_flushes > 0, "no FLUSHDB was sent");
}

#[test]
fn a_scan_that_skips_past_its_cursor_is_caught() {
    // The KV clients also SCAN the keyspace: iterations of SCAN calls
    // with COUNT 1 to 4, cursor to cursor, across shards, leader changes
    // and reconnects. With SCAN resuming one position past its cursor
    // (keel_kv::planted::set_scan_skips) an iteration misses a key that
    // was there throughout, which the SCAN check must see.
    let stats = planted_kv_bug_is_caught(
        40,
        "SCAN skipping past its cursor",
        |seed| Options {
            kv_scan: true,
            ..Options::for_seed(seed)
        },
        |options| Options {
            kv_scan_skips: true,
            ..options
        },
        |f| f.contains("SCAN") && f.contains("missed"),
    );
    assert!(stats.kv_scans > 0, "no SCAN iteration finished");
    eprintln!(
        "SCAN: {} iterations finished, {} calls answered",
        stats.kv_scans, stats.kv_scan_calls
    );
}
