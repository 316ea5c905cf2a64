//! The leader's read lease (`Core::read_index` with `read_lease`): when a
//! read is served from it, when it must ask a ReadIndex round instead, and
//! the followers' side of the promise (no vote right after a start).

use raft::eraftpb::{Message, MessageType};

use crate::core::{Outbound, LEASE_RENEW_TICKS, LEASE_TICKS, VOTES_REFUSED_AFTER_START_TICKS};
use crate::membership_tests::{established, Net, Node};
use crate::transport::PeerInput;

const TICK_US: u64 = 100_000;

/// Every node's clock moves to `now_us`.
fn set_clock(net: &mut Net, now_us: u64) {
    for node in net.nodes.values_mut() {
        node.set_clock_us(now_us);
    }
}

fn leader(net: &mut Net) -> &mut Node {
    let id = net.leader().expect("a leader");
    net.nodes.get_mut(&id).expect("the leader")
}

/// Reads `context` on `node` and advances it alone: no message is
/// delivered. True if the read was answered in that turn.
fn read_alone(node: &mut Node, context: &[u8]) -> bool {
    node.read_index(context.to_vec());
    node.advance().expect("advance");
    node.machine().reads.last().map(Vec::as_slice) == Some(context)
}

fn lease_reads(node: &Node) -> u64 {
    node.status()
        .lease_reads
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// The lease end and commit index the node published for other threads.
fn published(node: &Node) -> (u64, u64) {
    let status = node.status();
    (
        status
            .lease_until_us
            .load(std::sync::atomic::Ordering::Acquire),
        status
            .lease_commit
            .load(std::sync::atomic::Ordering::Acquire),
    )
}

fn heartbeats_queued(net: &Net) -> usize {
    net.outbox
        .borrow()
        .iter()
        .filter(|(_, m)| {
            matches!(m, Outbound::Raft(m) if m.get_msg_type() == MessageType::MsgHeartbeat)
        })
        .count()
}

/// An established cluster whose leader holds a lease taken at `now_us`.
fn leased(now_us: u64) -> Net {
    let mut net = established();
    set_clock(&mut net, now_us);
    assert!(!read_alone(leader(&mut net), b"first"), "no lease yet");
    net.settle();
    assert_eq!(leader(&mut net).machine().reads, vec![b"first".to_vec()]);
    net
}

#[test]
fn a_leader_serves_reads_from_its_lease_until_it_ends() {
    let start_us = 10 * TICK_US;
    let mut net = leased(start_us);
    let node = leader(&mut net);
    assert_eq!(
        published(node),
        (start_us + LEASE_TICKS * TICK_US, node.commit_index()),
        "the lease and commit index are published"
    );
    let outbox_before = net.outbox.borrow().len();
    assert!(read_alone(leader(&mut net), b"leased"));
    assert_eq!(lease_reads(leader(&mut net)), 1);
    assert_eq!(
        net.outbox.borrow().len(),
        outbox_before,
        "a lease read sends nothing"
    );
    // Past the lease: the read waits for a round again.
    set_clock(&mut net, start_us + LEASE_TICKS * TICK_US);
    assert!(!read_alone(leader(&mut net), b"after"));
    assert!(heartbeats_queued(&net) > 0, "the round's heartbeats");
    net.settle();
    assert_eq!(leader(&mut net).machine().reads.last().unwrap(), b"after");
    assert_eq!(lease_reads(leader(&mut net)), 1);
}

#[test]
fn a_lease_read_near_the_end_renews_the_lease() {
    let start_us = 10 * TICK_US;
    let mut net = leased(start_us);
    let lease_end_us = start_us + LEASE_TICKS * TICK_US;
    let renew_at_us = lease_end_us - LEASE_RENEW_TICKS * TICK_US;
    set_clock(&mut net, renew_at_us - 1);
    assert!(read_alone(leader(&mut net), b"early"));
    assert_eq!(heartbeats_queued(&net), 0, "too early to renew");
    set_clock(&mut net, renew_at_us);
    assert!(read_alone(leader(&mut net), b"late"), "still served");
    assert!(heartbeats_queued(&net) > 0, "a renewal round is asked");
    net.settle();
    // The renewed lease runs from the renewal round's ask.
    set_clock(&mut net, lease_end_us + 1);
    assert!(read_alone(leader(&mut net), b"renewed"));
    assert_eq!(lease_reads(leader(&mut net)), 3);
    set_clock(&mut net, renew_at_us + LEASE_TICKS * TICK_US);
    assert!(!read_alone(leader(&mut net), b"ended"));
}

#[test]
fn a_follower_never_serves_a_read_from_a_lease() {
    let mut net = leased(10 * TICK_US);
    let leader_id = net.leader().unwrap();
    let follower = net
        .nodes
        .keys()
        .copied()
        .find(|id| *id != leader_id)
        .unwrap();
    let node = net.nodes.get_mut(&follower).unwrap();
    assert!(!read_alone(node, b"on a follower"));
    net.settle();
    let node = &net.nodes[&follower];
    assert_eq!(node.machine().reads.last().unwrap(), b"on a follower");
    assert_eq!(lease_reads(node), 0);
    assert_eq!(published(node).0, 0, "no lease published");
}

#[test]
fn a_leader_that_hands_over_serves_no_lease_read_in_that_term() {
    let mut net = leased(10 * TICK_US);
    let node = leader(&mut net);
    let term = node.term();
    assert!(published(node).0 > 0);
    assert!(node.hand_off().is_some(), "another voter is active");
    assert_eq!(published(node).0, 0, "the lease is withdrawn at once");
    assert!(!read_alone(node, b"handing over"));
    // The target's MsgTimeoutNow is late: this node still leads, and a
    // quorum answers its round, but the target may campaign any time.
    net.outbox.borrow_mut().retain(
        |(_, m)| !matches!(m, Outbound::Raft(m) if m.get_msg_type() == MessageType::MsgTimeoutNow),
    );
    net.settle();
    let node = leader(&mut net);
    assert_eq!(node.term(), term, "still leading in the same term");
    assert_eq!(node.machine().reads.last().unwrap(), b"handing over");
    assert!(
        !read_alone(node, b"answered round"),
        "no lease taken from it"
    );
    assert_eq!(lease_reads(node), 0);
    assert_eq!(published(node).0, 0);
}

fn vote_request(from: u64, to: u64, term: u64, transfer: bool) -> PeerInput {
    let mut message = Message::default();
    message.set_msg_type(MessageType::MsgRequestVote);
    (message.from, message.to, message.term) = (from, to, term);
    message.log_term = term;
    message.index = 1_000;
    if transfer {
        message.context = raft::CAMPAIGN_TRANSFER.to_vec().into();
    }
    PeerInput::Raft(Box::new(message))
}

fn vote_answers(net: &Net, from: u64) -> usize {
    net.outbox
        .borrow()
        .iter()
        .filter(|(sender, m)| {
            *sender == from
                && matches!(m, Outbound::Raft(m) if m.get_msg_type() == MessageType::MsgRequestVoteResponse)
        })
        .count()
}

#[test]
fn a_node_just_started_refuses_votes_unless_a_leader_hands_over() {
    // Node 1 alone, as just restarted: it may have answered a leader's
    // heartbeat before it stopped, and that leader may still hold a lease.
    let mut net = Net::bootstrap(3);
    net.nodes.retain(|id, _| *id == 1);
    let node = net.nodes.get_mut(&1).unwrap();
    node.peer(vote_request(2, 1, 5, false));
    node.advance().unwrap();
    assert_eq!(vote_answers(&net, 1), 0, "refused right after the start");
    let node = net.nodes.get_mut(&1).unwrap();
    node.peer(vote_request(2, 1, 5, true));
    node.advance().unwrap();
    assert_eq!(
        vote_answers(&net, 1),
        1,
        "a transfer's campaign is answered"
    );
    net.outbox.borrow_mut().clear();
    let node = net.nodes.get_mut(&1).unwrap();
    for _ in 0..VOTES_REFUSED_AFTER_START_TICKS {
        node.tick();
    }
    node.peer(vote_request(3, 1, 6, false));
    node.advance().unwrap();
    assert_eq!(vote_answers(&net, 1), 1, "answered once the refusal ended");
}

#[test]
fn a_lease_other_threads_read_under_is_renewed_by_the_tick() {
    let start_us = 10 * TICK_US;
    let mut net = leased(start_us);
    let renew_at_us = start_us + (LEASE_TICKS - LEASE_RENEW_TICKS) * TICK_US;
    set_clock(&mut net, renew_at_us);
    leader(&mut net).tick();
    assert_eq!(heartbeats_queued(&net), 0, "nobody read: no renewal");
    // A reader on another thread (a KV connection) served a read.
    let node = leader(&mut net);
    node.status()
        .lease_reads
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    node.tick();
    node.advance().unwrap();
    assert!(heartbeats_queued(&net) > 0, "the tick asks a renewal round");
    net.settle();
    let (until_us, _) = published(leader(&mut net));
    assert_eq!(until_us, renew_at_us + LEASE_TICKS * TICK_US);
}
