//! Membership changes in the core: requests (asked here, or forwarded to
//! the leader), the leader's checks, the steps of a change
//! (`membership.rs` documents them) and the apply of conf-change entries.
//! Sans-IO like the rest of the core: time is `tick`, the network `Io`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use protobuf::Message as _;
use raft::eraftpb::{
    ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, ConfState, Entry,
    EntryType, Message, MessageType,
};

use super::{Core, Io, Outbound, SnapshotSource};
use crate::driver::StateMachine;
use crate::membership::{
    decode_answer, decode_context, encode_answer, encode_context, roles, Change, Members,
    Membership, Pending, ReconfigError, ReconfigRequest, Role, Ticket, CAUGHT_UP_ENTRIES_MAX,
    HEARD_WITHIN_TICKS, MEMBERS_GOSSIP_TICKS, PROMOTE_WAIT_TICKS, RECONFIG_ANSWER_TICKS_MAX,
};

/// What the leader did about a change under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Proposed,
    /// For a learner to catch up, or a leadership transfer.
    Waiting,
    /// raft-rs refused the proposal.
    Refused,
}

impl From<bool> for Step {
    fn from(proposed: bool) -> Step {
        if proposed {
            Step::Proposed
        } else {
            Step::Refused
        }
    }
}

/// A reconfig asked at this node, waiting for its answer.
#[derive(Debug)]
pub(super) struct Asked {
    context: Vec<u8>,
    since_tick: u64,
}

/// Reconfigs asked here at once (more are refused as lost at once).
pub const ASKED_MAX: usize = 64;

/// The core's membership state.
pub(super) struct State {
    /// Replicated: the configuration in effect and the change under way.
    pub(super) membership: Membership,
    /// The target of the newest conf-change entry appended but not yet
    /// applied: its members must be reachable before it commits (a new
    /// leader may be one of them).
    appended_target: Option<Members>,
    /// Requests asked here, by number.
    asked: BTreeMap<u64, Asked>,
    next_request: u64,
    /// Tick at which each peer was last heard from.
    pub(super) heard: BTreeMap<u64, u64>,
    /// Tick since which the leader waits for new voters to catch up.
    promote_wait_since: Option<u64>,
    /// Tick of the last leadership transfer asked for a change.
    last_transfer_tick: Option<u64>,
    /// Tick at which each new member was last sent its first snapshot.
    snapshot_pokes: BTreeMap<u64, u64>,
    /// Addresses peers told of, for members this node's own configuration
    /// does not hold yet (it lags behind the change that added them).
    learned: BTreeMap<u64, (String, bool)>,
}

impl State {
    pub(super) fn new(membership: Membership, first_request: u64) -> State {
        State {
            membership,
            appended_target: None,
            asked: BTreeMap::new(),
            next_request: first_request.max(1),
            heard: BTreeMap::new(),
            promote_wait_since: None,
            last_transfer_tick: None,
            snapshot_pokes: BTreeMap::new(),
            learned: BTreeMap::new(),
        }
    }
}

/// The member ids of a ConfState, and whether it is joint.
struct Conf {
    voters: BTreeSet<u64>,
    outgoing: BTreeSet<u64>,
    learners: BTreeSet<u64>,
}

impl Conf {
    fn of(cs: &ConfState) -> Conf {
        Conf {
            voters: cs.voters.iter().copied().collect(),
            outgoing: cs.voters_outgoing.iter().copied().collect(),
            learners: cs
                .learners
                .iter()
                .chain(cs.learners_next.iter())
                .copied()
                .collect(),
        }
    }

    fn joint(&self) -> bool {
        !self.outgoing.is_empty()
    }

    fn ids(&self) -> BTreeSet<u64> {
        let mut ids = self.voters.clone();
        ids.extend(&self.outgoing);
        ids.extend(&self.learners);
        ids
    }

    /// Raft's configuration is the target's (roles only).
    fn reached(&self, target: &Members) -> bool {
        let (voters, observers) = roles(target);
        !self.joint() && self.voters == voters && self.learners == observers
    }
}

fn single(change_type: ConfChangeType, node_id: u64) -> ConfChangeSingle {
    let mut change = ConfChangeSingle::default();
    change.set_change_type(change_type);
    change.node_id = node_id;
    change
}

impl<S: StateMachine, I: Io, P: SnapshotSource> Core<S, I, P> {
    fn conf(&self) -> Conf {
        Conf::of(&self.raw.raft.prs().conf().to_conf_state())
    }

    /// Forgets the floors, as a restart from a snapshot taken after the
    /// entries that added the members does (tests only).
    #[cfg(test)]
    pub(crate) fn forget_floors(&mut self) {
        self.raw.mut_store().floors.clear();
    }

    /// Raft's configuration as applied here.
    pub fn conf_state(&self) -> ConfState {
        self.raw.raft.prs().conf().to_conf_state()
    }

    /// The membership as applied here.
    pub fn membership(&self) -> &Membership {
        &self.reconfig.membership
    }

    /// A client of this node asks for a membership change. `context` comes
    /// back through `StateMachine::reconfigured` (success) or
    /// `reconfig_failed`.
    pub fn reconfigure(
        &mut self,
        change: Change,
        expected_config_id: Option<u64>,
        authorized: bool,
        context: Vec<u8>,
    ) {
        if self.reconfig.asked.len() >= ASKED_MAX {
            return self.machine.reconfig_failed(context, ReconfigError::Lost);
        }
        let request = self.reconfig.next_request;
        self.reconfig.next_request += 1;
        let ticket = Ticket {
            origin: self.config.node_id,
            request,
            context: context.clone(),
        };
        self.reconfig.asked.insert(
            request,
            Asked {
                context,
                since_tick: self.ticks,
            },
        );
        let request = ReconfigRequest {
            change,
            expected_config_id,
            authorized,
            ticket,
        };
        if self.leader {
            self.leader_reconfigure(request);
        } else if self.leader_id != 0 {
            self.io.send(Outbound::Reconfig {
                to: self.leader_id,
                request: request.encode(),
            });
        } else {
            self.answer(&request.ticket, ReconfigError::Lost);
        }
    }

    /// A follower forwarded its client's request.
    pub(super) fn reconfig_from_peer(&mut self, bytes: &[u8]) {
        match ReconfigRequest::decode(bytes) {
            Ok(request) if self.leader => self.leader_reconfigure(request),
            Ok(request) => self.answer(&request.ticket, ReconfigError::Lost),
            Err(error) => tracing::warn!(%error, "forwarded reconfig does not decode; dropped"),
        }
    }

    /// The leader refused a request asked here.
    pub(super) fn reconfig_answered(&mut self, bytes: &[u8]) {
        match decode_answer(bytes) {
            Ok((ticket, error)) if ticket.origin == self.config.node_id => {
                if let Some(asked) = self.reconfig.asked.remove(&ticket.request) {
                    self.machine.reconfig_failed(asked.context, error);
                }
            }
            Ok(_) => tracing::warn!("a reconfig answer for another node; dropped"),
            Err(error) => tracing::warn!(%error, "reconfig answer does not decode; dropped"),
        }
    }

    /// Tells the asking node its request failed.
    fn answer(&mut self, ticket: &Ticket, error: ReconfigError) {
        if ticket.origin == self.config.node_id {
            if let Some(asked) = self.reconfig.asked.remove(&ticket.request) {
                self.machine.reconfig_failed(asked.context, error);
            }
        } else {
            self.io.send(Outbound::ReconfigAnswer {
                to: ticket.origin,
                answer: encode_answer(ticket, &error),
            });
        }
    }

    /// The leader checks a request in ZooKeeper's order and starts it.
    fn leader_reconfigure(&mut self, request: ReconfigRequest) {
        match self.check(&request) {
            Err(error) => {
                tracing::info!(%error, "reconfig refused");
                self.answer(&request.ticket, error);
            }
            Ok(target) => {
                let pending = Pending {
                    target,
                    ticket: Some(request.ticket.clone()),
                    time_ms: self.io.wall_clock_ms(),
                };
                tracing::info!(target = ?pending.target.keys().collect::<Vec<_>>(), "reconfig accepted");
                // The change goes into the log before anything waits for
                // it (a new leader carries on what it applied): its first
                // step changes nothing and records it; `carry_on` takes the
                // next ones, a tick apart.
                let me = self.config.node_id;
                let change = single(ConfChangeType::AddNode, me);
                let proposed =
                    self.propose_step(vec![change], ConfChangeTransition::Auto, &pending);
                if !proposed {
                    self.answer(&request.ticket, ReconfigError::Lost);
                }
            }
        }
    }

    /// ZooKeeper's checks (PrepRequestProcessor), in its order; the new
    /// member table if they pass.
    fn check(&self, request: &ReconfigRequest) -> Result<Members, ReconfigError> {
        if !self.config.reconfig_enabled {
            return Err(ReconfigError::Disabled);
        }
        let membership = &self.reconfig.membership;
        if membership.pending.is_some() || self.raw.raft.has_pending_conf() || self.conf().joint() {
            return Err(ReconfigError::InProgress);
        }
        if let Some(expected) = request.expected_config_id {
            if expected != membership.config_id {
                return Err(ReconfigError::BadVersion {
                    expected,
                    current: membership.config_id,
                });
            }
        }
        let target = request.change.apply_to(&membership.members);
        let (voters, _) = roles(&target);
        if voters.len() < 2 {
            return Err(ReconfigError::BadArguments(
                "Reconfig failed - new configuration must include at least 2 followers".into(),
            ));
        }
        if !self.synced_quorum(&voters) {
            return Err(ReconfigError::NoQuorum);
        }
        if !request.authorized {
            return Err(ReconfigError::NoAuth);
        }
        Ok(target)
    }

    /// `id` is connected to this leader and has (nearly) its whole log.
    fn caught_up(&self, id: u64) -> bool {
        if id == self.config.node_id {
            return true;
        }
        let last_index = self.raw.raft.raft_log.last_index();
        let heard = self
            .reconfig
            .heard
            .get(&id)
            .is_some_and(|tick| tick + HEARD_WITHIN_TICKS >= self.ticks);
        // A member added since has caught up only once it holds the
        // snapshot that holds it (before, its matched index is 0).
        let floor = self.raw.store().floors.get(&id).copied().unwrap_or(0);
        let matched =
            self.raw.raft.prs().get(id).is_some_and(|p| {
                p.matched >= floor && p.matched + CAUGHT_UP_ENTRIES_MAX >= last_index
            });
        heard && matched
    }

    /// A majority of `voters` is caught up (ZooKeeper's isQuorumSynced: a
    /// member not yet in the configuration is not).
    fn synced_quorum(&self, voters: &BTreeSet<u64>) -> bool {
        let synced = voters.iter().filter(|id| self.caught_up(**id)).count();
        synced > voters.len() / 2
    }

    /// Every tick: asked requests time out; the leader carries a change on,
    /// establishes the bootstrap configuration, and sends new members
    /// their first snapshot.
    pub(super) fn reconfig_tick(&mut self) {
        let expired: Vec<u64> = self
            .reconfig
            .asked
            .iter()
            .filter(|(_, a)| a.since_tick + RECONFIG_ANSWER_TICKS_MAX <= self.ticks)
            .map(|(request, _)| *request)
            .collect();
        for request in expired {
            let asked = self.reconfig.asked.remove(&request).expect("listed");
            tracing::warn!(request, "reconfig not answered in time; given up");
            self.machine
                .reconfig_failed(asked.context, ReconfigError::Lost);
        }
        if self.ticks.is_multiple_of(MEMBERS_GOSSIP_TICKS) {
            self.gossip_members();
        }
        if !self.leader {
            return;
        }
        self.send_first_snapshots();
        self.carry_on();
    }

    /// The addresses this node knows, to every peer (`MEMBERS_GOSSIP_TICKS`).
    fn gossip_members(&mut self) {
        let book = self.book();
        if book.len() <= 1 {
            return;
        }
        let members: Members = book
            .iter()
            .map(|(id, (peer, bootstrap))| {
                let member = crate::membership::Member {
                    id: *id,
                    role: Role::Voter,
                    peer: peer.clone(),
                    election_port: 0,
                    client: String::new(),
                    bootstrap: *bootstrap,
                };
                (*id, member)
            })
            .collect();
        let mut bytes = Vec::new();
        Membership {
            members,
            config_id: 0,
            pending: None,
        }
        .encode(&mut bytes);
        let me = self.config.node_id;
        for to in book.keys().copied().filter(|id| *id != me) {
            self.io.send(Outbound::Members {
                to,
                members: bytes.clone(),
            });
        }
    }

    /// A peer's addresses: members this node does not know are learned (its
    /// own configuration, once it catches up, replaces them).
    pub(super) fn learn_members(&mut self, bytes: &[u8]) {
        let told = match Membership::decode(bytes) {
            Ok(told) => told,
            Err(error) => return tracing::warn!(%error, "members from a peer do not decode"),
        };
        let known = self.book();
        let mut learned = false;
        for member in told.members.into_values() {
            if known.contains_key(&member.id) || member.id == self.config.node_id {
                continue;
            }
            tracing::info!(id = member.id, peer = %member.peer, "learned a member's address from a peer");
            self.reconfig
                .learned
                .insert(member.id, (member.peer, member.bootstrap));
            learned = true;
        }
        if learned {
            self.publish_membership();
        }
    }

    /// Leader affinity yields to a change under way that does not keep
    /// `id` a voter (the change would hand leadership back and forth).
    pub(super) fn change_keeps_voter(&self, id: u64) -> bool {
        self.reconfig.membership.pending.as_ref().is_none_or(|p| {
            p.target
                .get(&id)
                .is_some_and(|member| member.role == Role::Voter)
        })
    }

    /// The leader's next step of the change under way (or the bootstrap
    /// configuration's establishment), unless one is still being applied.
    fn carry_on(&mut self) {
        if !self.leader
            || self.raw.raft.has_pending_conf()
            || self.raw.raft.lead_transferee.is_some()
        {
            return;
        }
        let membership = &self.reconfig.membership;
        let pending = match &membership.pending {
            Some(pending) => pending.clone(),
            // The bootstrap member list becomes a configuration with an id
            // once a leader commits it (ZooKeeper versions its first
            // configuration with the first leader's zxid).
            None if membership.config_id == 0 && !membership.members.is_empty() => Pending {
                target: membership.members.clone(),
                ticket: None,
                time_ms: self.io.wall_clock_ms(),
            },
            None => return,
        };
        self.next_step(&pending);
    }

    /// Proposes the next step towards `pending.target`, or waits (for a
    /// learner to catch up, for a leadership transfer).
    fn next_step(&mut self, pending: &Pending) -> Step {
        let me = self.config.node_id;
        let conf = self.conf();
        let (voters, observers) = roles(&pending.target);
        if conf.joint() {
            if !conf.voters.contains(&me) {
                return self.transfer_for_change(&conf.voters);
            }
            return self
                .propose_step(Vec::new(), ConfChangeTransition::Auto, pending)
                .into();
        }
        let in_conf = conf.ids();
        if let Some(new) = pending.target.keys().find(|id| !in_conf.contains(id)) {
            let change = single(ConfChangeType::AddLearnerNode, *new);
            return self
                .propose_step(vec![change], ConfChangeTransition::Auto, pending)
                .into();
        }
        let promoted: Vec<u64> = voters.difference(&conf.voters).copied().collect();
        let lagging = promoted.iter().any(|id| !self.caught_up(*id));
        if lagging {
            let since = *self.reconfig.promote_wait_since.get_or_insert(self.ticks);
            if self.ticks < since + PROMOTE_WAIT_TICKS || !self.synced_quorum(&voters) {
                return Step::Waiting;
            }
            tracing::warn!(?promoted, "promoting members that have not caught up");
        }
        let mut forced_joint = false;
        if !voters.contains(&me) {
            let staying: BTreeSet<u64> = voters.intersection(&conf.voters).copied().collect();
            if staying.iter().any(|id| self.caught_up(*id)) {
                return self.transfer_for_change(&staying);
            }
            // No voter that stays can lead now: the leader goes through a
            // joint configuration, in which it still votes, and hands over
            // to a new voter before leaving it.
            forced_joint = true;
        }
        let mut changes: Vec<ConfChangeSingle> = promoted
            .iter()
            .map(|id| single(ConfChangeType::AddNode, *id))
            .collect();
        changes.extend(
            conf.voters
                .intersection(&observers)
                .map(|id| single(ConfChangeType::AddLearnerNode, *id)),
        );
        changes.extend(
            in_conf
                .iter()
                .filter(|id| !pending.target.contains_key(id))
                .map(|id| single(ConfChangeType::RemoveNode, *id)),
        );
        if changes.is_empty() {
            // Roles are the target's already (an address change, or the
            // bootstrap configuration): a change that changes nothing
            // carries the step.
            changes.push(single(ConfChangeType::AddNode, me));
        }
        let transition = if changes.len() == 1 && !forced_joint {
            ConfChangeTransition::Auto
        } else {
            ConfChangeTransition::Explicit
        };
        self.propose_step(changes, transition, pending).into()
    }

    /// Hands leadership to the most caught-up of `candidates` before a
    /// step that leaves this leader without a vote.
    fn transfer_for_change(&mut self, candidates: &BTreeSet<u64>) -> Step {
        if self
            .reconfig
            .last_transfer_tick
            .is_some_and(|tick| self.ticks < tick + super::ELECTION_TICKS as u64)
        {
            return Step::Waiting;
        }
        let target = candidates
            .iter()
            .filter(|id| **id != self.config.node_id && self.caught_up(**id))
            .filter_map(|id| Some((self.raw.raft.prs().get(*id)?.matched, *id)))
            .max()
            .map(|(_, id)| id);
        if let Some(target) = target {
            tracing::info!(
                target,
                "handing leadership over: this leader leaves the voters"
            );
            self.reconfig.last_transfer_tick = Some(self.ticks);
            self.transfer_leadership(target);
        }
        Step::Waiting
    }

    /// A leader whose vote a configuration change took away steps down at
    /// once. raft-rs keeps such a leader leading (an untested branch) and
    /// panics at its next persisted append, its own progress being gone.
    /// The leader that proposes such a step hands leadership over first
    /// (`transfer_for_change`), but a member elected afterwards with the
    /// step in its log applies it while leading (simulator seed 218482):
    /// it asks the most caught-up remaining voter to campaign now
    /// (MsgTimeoutNow, sent with the next Ready) and becomes a follower.
    fn step_down_removed(&mut self, conf_state: &ConfState) {
        let me = self.config.node_id;
        let target = self
            .raw
            .raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != me && conf_state.voters.contains(id))
            .map(|(id, progress)| (progress.matched, *id))
            .max()
            .map(|(_, id)| id);
        tracing::warn!(?target, "this leader is no longer a voter: stepping down");
        let term = self.raw.raft.term;
        // Not raft-rs's transfer_leader: a message it queued would be in
        // the Ready of a node no longer leading, which raft-rs refuses.
        self.raw.raft.become_follower(term, raft::INVALID_ID);
        assert!(self.raw.raft.state != raft::StateRole::Leader);
        self.role(false, raft::INVALID_ID);
        if let Some(target) = target {
            let mut campaign = Message::default();
            campaign.set_msg_type(MessageType::MsgTimeoutNow);
            campaign.from = me;
            campaign.to = target;
            campaign.term = term;
            self.io.send(Outbound::Raft(campaign));
        }
    }

    fn propose_step(
        &mut self,
        changes: Vec<ConfChangeSingle>,
        transition: ConfChangeTransition,
        pending: &Pending,
    ) -> bool {
        let mut change = ConfChangeV2::default();
        change.set_transition(transition);
        change.set_changes(changes.into());
        tracing::info!(change = ?change.changes, ?transition, "proposing a configuration step");
        match self
            .raw
            .propose_conf_change(encode_context(pending), change)
        {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "configuration step refused by raft");
                false
            }
        }
    }

    /// Applies a committed conf-change entry (every replica, in log order).
    pub(super) fn apply_conf_entry(&mut self, entry: &Entry) {
        let (index, term) = (entry.index, entry.term);
        // A lease taken under the old voters says nothing of the new ones.
        self.lease = None;
        let before = self.conf().ids();
        let change = match ConfChangeV2::parse_from_bytes(&entry.data) {
            Ok(change) => change,
            Err(error) => {
                tracing::error!(index, %error, "conf change does not decode; skipped");
                return self.machine.skip(index, term);
            }
        };
        let step = decode_context(&entry.context).unwrap_or_else(|error| {
            tracing::error!(index, %error, "conf change context does not decode");
            None
        });
        // A member this entry removes hears of its commit from no one once
        // the leader drops its progress: the leader sends it the entries up
        // to here itself (`farewell`), from where it had acknowledged.
        let matched_before: BTreeMap<u64, u64> = if self.leader {
            self.raw
                .raft
                .prs()
                .iter()
                .map(|(id, progress)| (*id, progress.matched))
                .collect()
        } else {
            BTreeMap::new()
        };
        let conf_state = match self.raw.apply_conf_change(&change) {
            Ok(conf_state) => conf_state,
            Err(error) => {
                tracing::error!(index, %error, "conf change refused by raft; skipped");
                return self.machine.skip(index, term);
            }
        };
        let conf = Conf::of(&conf_state);
        tracing::info!(index, ?conf_state, "configuration changed");
        let me = self.config.node_id;
        if self.leader
            && !conf_state.voters.contains(&me)
            && !conf_state.voters_outgoing.contains(&me)
        {
            self.step_down_removed(&conf_state);
        }
        if let Some(step) = step {
            if self.reconfig.membership.pending.as_ref() != Some(&step) {
                self.reconfig.promote_wait_since = None;
            }
            self.reconfig.membership.pending = Some(step);
        }
        self.reconfig.appended_target = None;
        let after = conf.ids();
        let floors = &mut self.raw.mut_store().floors;
        for added in after.difference(&before) {
            floors.insert(*added, index);
        }
        for removed in before.difference(&after) {
            floors.remove(removed);
            self.reconfig.heard.remove(removed);
            self.reconfig.snapshot_pokes.remove(removed);
            self.reconfig.learned.remove(removed);
        }
        for removed in before.difference(&after) {
            if let Some(matched) = matched_before.get(removed) {
                self.farewell(*removed, *matched, index);
            }
        }
        let completed = self
            .reconfig
            .membership
            .pending
            .as_ref()
            .is_some_and(|p| conf.reached(&p.target));
        if completed {
            self.complete(index, term);
        } else {
            self.machine.skip(index, term);
        }
        self.publish_membership();
    }

    /// Sends a member just removed (by the entry at `index`) the entries it
    /// lacks up to `index`, committed: it applies its own removal, answers
    /// a client that asked there, and stops serving. Best effort: a member
    /// that never acknowledged anything, or whose entries are compacted
    /// away, is not told (its client's request times out).
    fn farewell(&mut self, to: u64, matched: u64, index: u64) {
        if to == self.config.node_id || matched == 0 {
            return;
        }
        let log = &self.raw.raft.raft_log;
        let Ok(prev_term) = log.term(matched) else {
            return;
        };
        let entries = match log.entries(matched + 1, None, raft::GetEntriesContext::empty(false)) {
            Ok(entries) => entries.into_iter().filter(|e| e.index <= index).collect(),
            Err(_) => return,
        };
        let mut message = Message::default();
        message.set_msg_type(MessageType::MsgAppend);
        message.to = to;
        message.from = self.config.node_id;
        message.term = self.raw.raft.term;
        message.log_term = prev_term;
        message.index = matched;
        message.set_entries(entries);
        message.commit = index;
        tracing::info!(to, index, "telling a removed member of its removal");
        self.io.send(Outbound::Raft(message));
    }

    /// The change under way reached its target at (index, term).
    fn complete(&mut self, index: u64, term: u64) {
        let pending = self.reconfig.membership.pending.take().expect("a change");
        let reply = pending
            .ticket
            .as_ref()
            .filter(|t| t.origin == self.config.node_id)
            .and_then(|t| self.reconfig.asked.remove(&t.request))
            .map(|asked| asked.context);
        let config_id = self.machine.reconfigured(
            index,
            term,
            &pending.target,
            pending.time_ms,
            reply.as_deref(),
        );
        tracing::info!(
            index,
            config_id = format_args!("{config_id:#x}"),
            members = ?pending.target.keys().collect::<Vec<_>>(),
            "configuration in effect"
        );
        self.reconfig.membership.members = pending.target;
        self.reconfig.membership.config_id = config_id;
        self.reconfig.promote_wait_since = None;
        self.reconfig.last_transfer_tick = None;
    }

    /// A snapshot from the leader brought its configuration.
    pub(super) fn installed_membership(&mut self, membership: Membership) {
        self.reconfig.membership = membership;
        self.reconfig.appended_target = None;
        self.reconfig.learned.clear();
        self.publish_membership();
    }

    /// Conf-change entries just appended: their members' addresses are
    /// known before the entry commits.
    pub(super) fn learn_appended_members(&mut self, entries: &[Entry]) {
        let newest = entries
            .iter()
            .rev()
            .filter(|e| e.get_entry_type() == EntryType::EntryConfChangeV2)
            .find_map(|e| decode_context(&e.context).ok().flatten());
        if let Some(step) = newest {
            self.reconfig.appended_target = Some(step.target);
            self.publish_membership();
        }
    }

    /// Publishes the membership (status, for the server) and the peer
    /// addresses (the transport).
    pub(super) fn publish_membership(&mut self) {
        let book = self.book();
        self.io.set_peers(&book);
        let me = self.config.node_id;
        let conf = self.conf();
        self.status
            .observer
            .store(conf.learners.contains(&me), Ordering::Release);
        self.status.reconfig_pending.store(
            self.reconfig.membership.pending.is_some(),
            Ordering::Release,
        );
        *self
            .status
            .membership
            .write()
            .unwrap_or_else(|e| e.into_inner()) = self.reconfig.membership.clone();
    }

    /// Every member's address this node knows: the applied membership, the
    /// target of the change appended, and what peers told of members it
    /// does not hold yet.
    fn book(&self) -> BTreeMap<u64, (String, bool)> {
        let mut book = self.reconfig.learned.clone();
        book.extend(self.reconfig.membership.addresses());
        if let Some(target) = &self.reconfig.appended_target {
            for member in target.values() {
                book.insert(member.id, (member.peer.clone(), member.bootstrap));
            }
        }
        book
    }

    /// The leader changed: requests asked here whose change never reached
    /// the log are lost with the old leader.
    pub(super) fn leader_changed_for_reconfigs(&mut self) {
        let under_way = self
            .reconfig
            .membership
            .pending
            .as_ref()
            .and_then(|p| p.ticket.as_ref())
            .filter(|t| t.origin == self.config.node_id)
            .map(|t| t.request);
        let lost: Vec<u64> = self
            .reconfig
            .asked
            .keys()
            .copied()
            .filter(|request| Some(*request) != under_way)
            .collect();
        for request in lost {
            let asked = self.reconfig.asked.remove(&request).expect("listed");
            self.machine
                .reconfig_failed(asked.context, ReconfigError::Lost);
        }
    }

    /// The leader makes sure every member added since its last snapshot
    /// gets one that holds it: a new member's log is empty and must not be
    /// filled from index 1 (the bootstrap configuration is not in the log).
    fn send_first_snapshots(&mut self) {
        #[cfg(feature = "testing")]
        if self.config.planted_bug == super::PlantedBug::NoFirstSnapshot {
            return;
        }
        let floors: Vec<(u64, u64)> = self
            .raw
            .store()
            .floors
            .iter()
            .map(|(id, floor)| (*id, *floor))
            .collect();
        let me = self.config.node_id;
        for (id, floor) in floors {
            // Once the member answered anything it has a snapshot (it takes
            // nothing before): raft-rs goes on by itself.
            let poked_lately = self
                .reconfig
                .snapshot_pokes
                .get(&id)
                .is_some_and(|tick| tick + super::SNAPSHOT_RETRY_TICKS > self.ticks);
            if id == me || self.reconfig.heard.contains_key(&id) || poked_lately {
                continue;
            }
            let Some(progress) = self.raw.raft.mut_prs().get_mut(id) else {
                continue;
            };
            if progress.matched >= floor || progress.state == raft::ProgressState::Snapshot {
                continue;
            }
            // raft-rs sends a snapshot only to a recently active member that
            // is not paused; a new one has answered nothing yet (it takes
            // nothing but a snapshot), so nothing would resume it. Asked
            // again every tick until a snapshot holding it exists.
            progress.pending_request_snapshot = floor;
            progress.recent_active = true;
            progress.resume();
            self.raw.raft.send_append(id);
            let sent = self
                .raw
                .raft
                .prs()
                .get(id)
                .is_some_and(|p| p.state == raft::ProgressState::Snapshot);
            if sent {
                self.reconfig.snapshot_pokes.insert(id, self.ticks);
            }
        }
    }

    /// A new member acknowledged the snapshot that holds it: the leader
    /// stops asking raft-rs for one (raft-rs clears the request only on a
    /// snapshot report, and would otherwise send it again with its next
    /// append, in this very step).
    ///
    /// A leader without a floor for the member (it applied the entry that
    /// added it before the snapshot it restarted from) sent the snapshot
    /// the member asked for (`ask_first_snapshot`): any acknowledgement
    /// shows the member holds one.
    pub(super) fn settle_first_snapshot(&mut self, message: &Message) {
        if !self.leader
            || message.get_msg_type() != MessageType::MsgAppendResponse
            || message.reject
        {
            return;
        }
        let floor = self.raw.store().floors.get(&message.from).copied();
        if message.index < floor.unwrap_or(1) {
            return;
        }
        if let Some(progress) = self.raw.raft.mut_prs().get_mut(message.from) {
            progress.pending_request_snapshot = raft::INVALID_INDEX;
        }
    }

    /// A node with no configuration yet (joining) takes nothing from a
    /// leader but a snapshot: entries from index 1 would be applied on an
    /// empty configuration (the bootstrap one is not in the log).
    ///
    /// The leader learns that such a node needs a snapshot from its answer
    /// (`ask_first_snapshot`), not only from the floor it keeps for a
    /// member it added: a leader that restarted from a snapshot taken
    /// after the member was added, or was elected after such a restart,
    /// has no floor for it and would otherwise probe it with appends it
    /// never answers, for good (simulator, `SIM_JOIN=1`, seed 358).
    pub(super) fn refuse_before_first_snapshot(&self, message: &Message) -> bool {
        let empty = self.conf().ids().is_empty() && self.applied == 0;
        empty
            && matches!(
                message.get_msg_type(),
                MessageType::MsgAppend | MessageType::MsgHeartbeat
            )
    }

    /// Answers a leader's append or heartbeat refused before the first
    /// snapshot with a rejection that asks for a snapshot (raft-rs's
    /// `request_snapshot`, which resumes the member and sends it one at or
    /// after `FIRST_SNAPSHOT_ASKED_INDEX`). The leader's `floors` still
    /// decide the lowest snapshot it may send. The answer carries the
    /// leader's term, which this node has not taken (it stepped nothing):
    /// a rejection counts as no vote and no acknowledgement.
    pub(super) fn ask_first_snapshot(&mut self, message: &Message) {
        #[cfg(feature = "testing")]
        if self.config.planted_bug == super::PlantedBug::NoFirstSnapshot {
            return;
        }
        let mut ask = Message::default();
        ask.set_msg_type(MessageType::MsgAppendResponse);
        ask.to = message.from;
        ask.from = self.config.node_id;
        ask.term = message.term;
        ask.reject = true;
        ask.request_snapshot = FIRST_SNAPSHOT_ASKED_INDEX;
        assert!(ask.request_snapshot != raft::INVALID_INDEX);
        assert!(ask.index == 0 && ask.reject_hint == 0, "nothing held");
        self.io.send(Outbound::Raft(ask));
    }
}

/// The lowest index a joining node asks its first snapshot at (any
/// snapshot: the leader's floor for it raises the bar).
pub const FIRST_SNAPSHOT_ASKED_INDEX: u64 = 1;

/// The configuration with which a node starts: the bootstrap member list
/// (`peers`: id → peer address, election port 0; `observers`; `clients`:
/// id → client address, "" when not known).
pub fn bootstrap_membership(
    peers: &[(u64, String)],
    observers: &[u64],
    clients: &BTreeMap<u64, String>,
) -> Membership {
    let members = peers
        .iter()
        .map(|(id, peer)| {
            let member = crate::membership::Member {
                id: *id,
                role: if observers.contains(id) {
                    Role::Observer
                } else {
                    Role::Voter
                },
                peer: peer.clone(),
                election_port: 0,
                client: clients.get(id).cloned().unwrap_or_default(),
                bootstrap: true,
            };
            (*id, member)
        })
        .collect();
    Membership {
        members,
        config_id: 0,
        pending: None,
    }
}
