//! A member restarted on a data directory that lost entries it had
//! acknowledged stops with `ConsensusError::LostLog` (`core/lost_log.rs`),
//! whichever message of the leader reaches it first; a member that never
//! acknowledged anything, and an observer that lost its log, catch up.

use std::collections::BTreeMap;

use raft::eraftpb::ConfState;

use crate::core::bootstrap_membership;
use crate::membership_tests::{settled, Net};
use crate::ConsensusError;

/// Adds member `id` of a bootstrapped cluster of voters 1-3 (and observer
/// 4 when `observer`) with an empty data directory, as `--peers` starts it.
fn start_empty_in(net: &mut Net, id: u64, observer: bool) {
    let ids = if observer { 1..=4 } else { 1..=3 };
    let peers: Vec<(u64, String)> = ids
        .map(|id| (id, format!("127.0.0.1:{}", 2887 + id)))
        .collect();
    let observers: Vec<u64> = if observer { vec![4] } else { Vec::new() };
    let conf_state = ConfState {
        voters: vec![1, 2, 3],
        learners: observers.clone(),
        ..Default::default()
    };
    let membership = bootstrap_membership(&peers, &observers, &BTreeMap::new());
    net.add(id, conf_state, membership);
}

/// Replaces member `id` of a bootstrapped 3-node `net` by a node with an
/// empty data directory.
fn start_empty(net: &mut Net, id: u64) {
    start_empty_in(net, id, false);
}

/// Proposes `count` payloads on the leader and runs the net until every
/// node applied them.
fn commit(net: &mut Net, count: usize) {
    let leader = net.leader().expect("a leader");
    let before = net.nodes[&leader].machine().applied;
    propose(net, count);
    net.run_until(100, |net| {
        net.nodes
            .values()
            .all(|n| n.machine().applied == before + count)
    });
}

fn propose(net: &mut Net, count: usize) {
    let leader = net.leader().expect("a leader");
    for i in 0..count {
        net.nodes
            .get_mut(&leader)
            .unwrap()
            .propose(format!("w{i}").into_bytes());
    }
}

/// Turns of the whole net (ticking when `tick`) until `member` stops;
/// its error, or None after `turns`. Every other node must go on.
fn until_stopped(net: &mut Net, member: u64, turns: usize, tick: bool) -> Option<ConsensusError> {
    for _ in 0..turns {
        for (id, node) in net.nodes.iter_mut() {
            if tick {
                node.tick();
            }
            match node.advance() {
                Err(error) if *id == member => return Some(error),
                result => result.expect("the other members go on"),
            }
        }
        let messages: Vec<_> = net.outbox.borrow_mut().drain(..).collect();
        for (from, message) in messages {
            net.deliver(from, message);
        }
    }
    None
}

fn a_follower(net: &Net) -> u64 {
    let leader = net.leader().expect("a leader");
    *net.nodes
        .keys()
        .find(|id| **id != leader)
        .expect("a follower")
}

fn assert_lost(error: Option<ConsensusError>, held: u64) {
    match error {
        Some(ConsensusError::LostLog {
            held: shown,
            last_index: 0,
            ..
        }) => assert_eq!(shown, held, "the index the leader saw acknowledged"),
        other => panic!("expected LostLog at {held}, got {other:?}"),
    }
}

/// An established net whose follower (returned, with the index it
/// applied and acknowledged) has just been killed after three writes.
fn a_follower_down() -> (Net, u64, u64) {
    let mut net = crate::membership_tests::established();
    commit(&mut net, 3);
    let victim = a_follower(&net);
    let held = net.nodes[&victim].applied();
    assert!(held > 0 && held == net.nodes[&victim].commit_index());
    net.nodes.remove(&victim);
    (net, victim, held)
}

#[test]
fn an_emptied_member_stops_at_the_leaders_heartbeat() {
    let (mut net, victim, held) = a_follower_down();
    start_empty(&mut net, victim);
    // Only heartbeats reach it: nothing new is written.
    let error = until_stopped(&mut net, victim, 50, true);
    assert_lost(error, held);
    // Its process has exited; the other two still make a quorum.
    net.nodes.remove(&victim);
    commit(&mut net, 1);
}

#[test]
fn an_emptied_member_answering_an_append_first_is_told_by_the_leader() {
    let (mut net, victim, held) = a_follower_down();
    // While it is down the leader's appends to it run ahead of what it
    // acknowledged, so the first thing the empty node gets is an append,
    // and the leader learns of the loss from the answer to its probe.
    commit(&mut net, 3);
    start_empty(&mut net, victim);
    propose(&mut net, 1);
    // No tick: no heartbeat goes out but the one the leader sends when
    // the probe's answer shows the loss.
    let error = until_stopped(&mut net, victim, 20, false);
    assert_lost(error, held);
}

#[test]
fn a_member_that_never_acknowledged_anything_catches_up_from_empty() {
    let mut net = Net::bootstrap(3);
    net.nodes.remove(&3);
    net.run_until(400, settled);
    commit(&mut net, 5);
    start_empty(&mut net, 3);
    let leader = net.leader().expect("a leader");
    let target = net.nodes[&leader].applied();
    assert_eq!(
        until_stopped(&mut net, 3, 100, true).map(|e| e.to_string()),
        None
    );
    let caught_up = net.nodes[&leader].applied();
    assert!(caught_up >= target);
    assert_eq!(net.nodes[&3].applied(), caught_up, "caught up");
    assert_eq!(net.nodes[&3].machine().applied, 5, "every write");
}

#[test]
fn an_emptied_observer_catches_up_instead_of_stopping() {
    let mut net = Net {
        nodes: BTreeMap::new(),
        outbox: Default::default(),
    };
    for id in 1..=4 {
        start_empty_in(&mut net, id, true);
    }
    net.run_until(400, settled);
    assert_ne!(net.leader(), Some(4), "an observer never leads");
    commit(&mut net, 3);
    let held = net.nodes[&4].applied();
    assert!(held > 0);
    net.nodes.remove(&4);
    commit(&mut net, 2);
    start_empty_in(&mut net, 4, true);
    // An observer has no vote: losing its log is harmless, so it is not
    // stopped (raft-rs would have panicked at the first heartbeat).
    assert_eq!(
        until_stopped(&mut net, 4, 100, true).map(|e| e.to_string()),
        None
    );
    assert_eq!(net.nodes[&4].machine().applied, 5, "every write, caught up");
}
