//! A member that lost entries it had acknowledged (its data directory
//! emptied, replaced or restored from an older copy) stops with a clear
//! error instead of rejoining under its old id.
//!
//! Such a member forgot its log and its vote: Raft's safety rests on both
//! being durable, so rejoining could elect a leader that lacks a committed
//! write (README, "Membership changes": replace it instead). raft-rs
//! itself panics when a heartbeat shows the loss ("to_commit N is out of
//! range") and not at all when an append reaches the member first, so the
//! outcome used to depend on which message came first.
//!
//! - **The follower's evidence is certain.** A leader's heartbeat carries
//!   min(the follower's acknowledged index, the commit index); committed
//!   entries are never removed from a correct log, so a heartbeat whose
//!   commit lies past this node's last index proves the loss
//!   (`lost_log_shown`).
//! - **The leader makes that evidence arrive first.** A follower that
//!   answers the leader's probe with a last index below what it
//!   acknowledged (`Progress::matched`) has lost entries, unless its log
//!   holds later entries of other terms (then it is not stopped: it only
//!   waits one heartbeat). The leader then sends it a heartbeat at once
//!   and drops that one rejection, so raft-rs sends the member nothing it
//!   could catch up with before the heartbeat (`reveal_lost_log`). Only
//!   once per member and term: a member whose heartbeat shows no loss
//!   probes again as before.
//!
//! A leader elected after the loss has no acknowledged index for the
//! member (raft-rs starts every follower at 0), so it cannot tell, and the
//! member catches up as a new one would: the stop covers a loss the
//! current leader saw acknowledged.
//!
//! An observer (a raft-rs learner) has no vote and its acknowledgements
//! commit nothing, so losing its log is harmless: it is not stopped. The
//! heartbeat's commit index is lowered to its log's end before raft-rs
//! sees it, and it catches up from the leader, as a ZooKeeper observer
//! resyncs.

use raft::eraftpb::{Message, MessageType};
use raft::ProgressState;

use super::{Core, Io, Outbound, SnapshotSource};
use crate::driver::StateMachine;
use crate::ConsensusError;

/// What proved that this node lost acknowledged entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LostLog {
    pub(crate) leader: u64,
    /// The index the leader counts this node as holding.
    pub(crate) held: u64,
    pub(crate) last_index: u64,
}

impl LostLog {
    pub(crate) fn error(self) -> ConsensusError {
        assert!(
            self.held > self.last_index,
            "a loss is an index past the log's end"
        );
        ConsensusError::LostLog {
            leader: self.leader,
            held: self.held,
            last_index: self.last_index,
        }
    }
}

impl<S: StateMachine, I: Io, P: SnapshotSource> Core<S, I, P> {
    /// The loss a heartbeat proves, if it does: one raft-rs would step
    /// (its term is not behind) and whose commit index is past this log,
    /// on a voter. On an observer the heartbeat's commit is lowered to
    /// the log's end instead (see the module doc), and None is returned.
    pub(super) fn lost_log_shown(&mut self, message: &mut Message) -> Option<LostLog> {
        let last_index = self.heartbeat_past_log(message)?;
        if !self.is_voter() {
            if !self.lost_log_observer_told {
                tracing::warn!(
                    leader = message.from,
                    acknowledged = message.commit,
                    last_index,
                    "this observer's log ends before entries it acknowledged: \
                     catching up from the leader (an observer has no vote)"
                );
                self.lost_log_observer_told = true;
            }
            message.commit = last_index;
            return None;
        }
        Some(LostLog {
            leader: message.from,
            held: message.commit,
            last_index,
        })
    }

    /// This log's last index, when `message` is a heartbeat raft-rs would
    /// step (its term is not behind) whose commit index lies past it.
    fn heartbeat_past_log(&self, message: &Message) -> Option<u64> {
        if message.get_msg_type() != MessageType::MsgHeartbeat || message.term < self.raw.raft.term
        {
            return None;
        }
        let last_index = self.raw.raft.raft_log.last_index();
        (message.commit > last_index).then_some(last_index)
    }

    /// On the leader: whether `message` is a voter's answer to the
    /// current probe naming a last index below what it acknowledged. If
    /// so, and the commit index reaches past that index, the follower gets
    /// a heartbeat at once and true says to drop the answer (once per
    /// follower and term).
    pub(super) fn reveal_lost_log(&mut self, message: &Message) -> bool {
        let term = self.raw.raft.term;
        if !self.leader
            || message.get_msg_type() != MessageType::MsgAppendResponse
            || !message.reject
            || message.term != term
        {
            return false;
        }
        let voter = self.votes(message.from);
        let Some(progress) = self.raw.raft.prs().get(message.from).filter(|_| voter) else {
            return false;
        };
        // Compared as raft-rs does (`Progress::maybe_decr_to`); the index
        // comes off the network, so no `+ 1` on it.
        let answers_probe = progress.state == ProgressState::Probe
            && progress.next_idx.checked_sub(1) == Some(message.index);
        let shown = progress.matched.min(self.raw.raft.raft_log.committed);
        if !answers_probe || message.reject_hint >= shown {
            return false;
        }
        if self.lost_log_revealed.get(&message.from) == Some(&term) {
            return false;
        }
        self.lost_log_revealed.insert(message.from, term);
        tracing::warn!(
            member = message.from,
            acknowledged = progress.matched,
            last_index = message.reject_hint,
            "a member's log ends before entries it acknowledged (its data directory lost them?): \
             telling it, it stops"
        );
        let mut beat = Message::default();
        beat.set_msg_type(MessageType::MsgHeartbeat);
        beat.to = message.from;
        beat.from = self.config.node_id;
        beat.term = term;
        beat.commit = shown;
        assert!(beat.commit > message.reject_hint && beat.context.is_empty());
        self.io.send(Outbound::Raft(beat));
        true
    }
}
