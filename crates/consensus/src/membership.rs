//! Who the cluster's members are, and how a change of them is carried out.
//!
//! raft-rs owns the voting rules (`ConfState`: voters, learners, a joint
//! configuration while a change is under way); this module owns what
//! raft-rs does not know: every member's addresses and role, the
//! configuration's id, and the change being carried out. All of it is
//! replicated state: it changes only when a configuration-change entry
//! (`EntryConfChangeV2`) is applied, in log order, on every replica alike,
//! and it travels in every snapshot's envelope.
//!
//! A change (`Pending`) names its target member table and who asked for it
//! (`Ticket`); each of its steps is one conf-change entry whose context
//! carries the target, so a new leader finds the change in its applied
//! state and carries it on. The steps (`next_step`, run by the leader):
//! 1. every new member joins as a raft learner, one per entry, and is sent
//!    a snapshot;
//! 2. new voters are promoted once caught up (their matched index within
//!    `CAUGHT_UP_ENTRIES_MAX` of the leader's last), or after
//!    `PROMOTE_WAIT_TICKS` if the target keeps a synced quorum without
//!    them; a leader that leaves the voters hands leadership to a caught-up
//!    voter of the target first;
//! 3. promotions, demotions and removals go in one entry: a single change
//!    as a simple change, several through a joint configuration
//!    (explicit transition) and a second entry leaving it.
//!
//! The change is complete when an applied entry leaves raft's
//! configuration (not joint) equal to the target's roles: every replica
//! then makes the target the configuration in effect, the state machine
//! gives it its id (the zxid it took) and the node that was asked answers.
//!
//! Encodings (big-endian, every length bounded): a member is `[id u64][role
//! u8][election port u16][bootstrap u8][peer len u8][peer][client len
//! u8][client]`; a table is `[count u16]` members; the conf-change context
//! `[CONTEXT_FORMAT][time_ms i64][ticket?][table]`; a stored membership
//! `[MEMBERSHIP_FORMAT][config id u64][table][pending?]`.

use std::collections::{BTreeMap, BTreeSet};

/// Most members a configuration holds (ZooKeeper's server ids are bytes in
/// Keel: 1..=255).
pub const MEMBERS_MAX: usize = 255;
/// Longest "host:port" text kept for a member's peer or client address.
pub const ADDRESS_BYTES_MAX: usize = 255;
/// Longest reply context a ticket carries (the server's session and xid).
pub const TICKET_CONTEXT_BYTES_MAX: usize = 64;
/// A learner whose matched index is this close to the leader's last index
/// is caught up: it may be promoted, and it counts as synced.
pub const CAUGHT_UP_ENTRIES_MAX: u64 = 100;
/// A new voter that has not caught up after this many ticks is promoted
/// anyway if the target keeps a synced quorum without it (ZooKeeper
/// commits a reconfig once a quorum of the new configuration is synced).
pub const PROMOTE_WAIT_TICKS: u64 = 300;
/// Every member tells every peer the addresses it knows this often (ticks):
/// a node that lags behind a change adding a member, which then leads, has
/// no address for it and refuses its connections until told (ZooKeeper's
/// election notifications carry the configuration for the same reason).
pub const MEMBERS_GOSSIP_TICKS: u64 = 2 * crate::core::ELECTION_TICKS as u64;
/// A member heard from within this many ticks counts as connected.
pub const HEARD_WITHIN_TICKS: u64 = crate::core::ELECTION_TICKS as u64;
/// A reconfig asked here and not answered after this many ticks is given
/// up (the client's connection is closed, as a lost leader would).
pub const RECONFIG_ANSWER_TICKS_MAX: u64 = 600;

const CONTEXT_FORMAT: u8 = 0xC1;
const MEMBERSHIP_FORMAT: u8 = 0xC2;
const REQUEST_FORMAT: u8 = 0xC3;
const ANSWER_FORMAT: u8 = 0xC4;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    #[error("membership record truncated at byte {0}")]
    Truncated(usize),
    #[error("membership record has format {0:#x}, expected {1:#x}")]
    Format(u8, u8),
    #[error("membership record: {0}")]
    Malformed(&'static str),
}

/// Whether a member votes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// A raft voter (ZooKeeper's participant).
    Voter,
    /// A raft learner (ZooKeeper's observer): replicates and serves reads,
    /// never votes.
    Observer,
}

/// One member as the configuration records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    pub role: Role,
    /// "host:port" of its peer port, as members reach it.
    pub peer: String,
    /// ZooKeeper's second peer port (election), kept only to be shown back
    /// in the configuration's text: Keel has one peer port. 0 = not given.
    pub election_port: u16,
    /// "host:port" of its client port ("" when not known).
    pub client: String,
    /// Listed at bootstrap and not changed since: a member's own `--peers`
    /// address for it is used instead of `peer` (per-node routes, proxies).
    pub bootstrap: bool,
}

/// A configuration's members by id.
pub type Members = BTreeMap<u64, Member>;

/// Who asked for a change, to be answered when it completes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The node whose client asked.
    pub origin: u64,
    /// That node's number for the request.
    pub request: u64,
    /// Opaque to consensus: the state machine's reply routing.
    pub context: Vec<u8>,
}

/// A change being carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub target: Members,
    pub ticket: Option<Ticket>,
    /// The leader's wall clock when the change began (the configuration
    /// znode's mtime).
    pub time_ms: i64,
}

/// The replicated membership: the configuration in effect and the change
/// under way, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Membership {
    pub members: Members,
    /// The configuration's id: the zxid the state machine gave its change
    /// (0 until the bootstrap configuration is established).
    pub config_id: u64,
    pub pending: Option<Pending>,
}

/// The voters and observers of a member table.
pub fn roles(members: &Members) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let voters = members
        .values()
        .filter(|m| m.role == Role::Voter)
        .map(|m| m.id)
        .collect();
    let observers = members
        .values()
        .filter(|m| m.role == Role::Observer)
        .map(|m| m.id)
        .collect();
    (voters, observers)
}

/// What a client asks for (ZooKeeper's ReconfigRequest, parsed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Add or replace `joining` (by id), remove `leaving`.
    Incremental {
        joining: Vec<Member>,
        leaving: Vec<u64>,
    },
    /// Exactly these members.
    Replace(Vec<Member>),
}

impl Change {
    /// The member table this change makes of `current`.
    pub fn apply_to(&self, current: &Members) -> Members {
        match self {
            Change::Incremental { joining, leaving } => {
                let mut next = current.clone();
                for id in leaving {
                    next.remove(id);
                }
                for member in joining {
                    next.insert(member.id, member.clone());
                }
                next
            }
            Change::Replace(members) => members.iter().map(|m| (m.id, m.clone())).collect(),
        }
    }
}

/// A reconfig request on its way to the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconfigRequest {
    pub change: Change,
    /// ZooKeeper's curConfigId: the change is refused unless it is the
    /// configuration's id (None = -1, no check).
    pub expected_config_id: Option<u64>,
    /// The asking client may write the configuration (checked where it is
    /// connected; refused last, as ZooKeeper checks the ACL last).
    pub authorized: bool,
    pub ticket: Ticket,
}

/// Why a reconfig was refused (ZooKeeper's error codes, mapped by the
/// server).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconfigError {
    #[error("reconfig is disabled on the leader")]
    Disabled,
    #[error("another reconfiguration is in progress")]
    InProgress,
    #[error("the configuration's id is {current:#x}, not {expected:#x}")]
    BadVersion { expected: u64, current: u64 },
    #[error("{0}")]
    BadArguments(String),
    #[error("no connected and synced quorum in the new configuration")]
    NoQuorum,
    #[error("not authorized to change the configuration")]
    NoAuth,
    #[error("the request was lost (leader change or timeout)")]
    Lost,
}

// ---------------------------------------------------------------------------
// Encoding

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, value: u8) {
        self.0.push(value);
    }
    fn u16(&mut self, value: u16) {
        self.0.extend_from_slice(&value.to_be_bytes());
    }
    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_be_bytes());
    }
    fn short_text(&mut self, text: &str) {
        assert!(
            text.len() <= ADDRESS_BYTES_MAX,
            "address of {} bytes",
            text.len()
        );
        self.u8(text.len() as u8);
        self.0.extend_from_slice(text.as_bytes());
    }
    fn bytes(&mut self, bytes: &[u8]) {
        self.u16(u16::try_from(bytes.len()).expect("bounded by its caller"));
        self.0.extend_from_slice(bytes);
    }
    fn member(&mut self, member: &Member) {
        self.u64(member.id);
        self.u8(match member.role {
            Role::Voter => 0,
            Role::Observer => 1,
        });
        self.u16(member.election_port);
        self.u8(u8::from(member.bootstrap));
        self.short_text(&member.peer);
        self.short_text(&member.client);
    }
    fn members(&mut self, members: &Members) {
        assert!(members.len() <= MEMBERS_MAX);
        self.u16(members.len() as u16);
        for member in members.values() {
            self.member(member);
        }
    }
    fn ticket(&mut self, ticket: &Option<Ticket>) {
        match ticket {
            None => self.u8(0),
            Some(ticket) => {
                assert!(ticket.context.len() <= TICKET_CONTEXT_BYTES_MAX);
                self.u8(1);
                self.u64(ticket.origin);
                self.u64(ticket.request);
                self.bytes(&ticket.context);
            }
        }
    }
    fn pending(&mut self, pending: &Pending) {
        self.0.extend_from_slice(&pending.time_ms.to_be_bytes());
        self.ticket(&pending.ticket);
        self.members(&pending.target);
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], MembershipError> {
        let slice = self
            .bytes
            .get(self.at..self.at + n)
            .ok_or(MembershipError::Truncated(self.at))?;
        self.at += n;
        Ok(slice)
    }
    fn u8(&mut self) -> Result<u8, MembershipError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, MembershipError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u64(&mut self) -> Result<u64, MembershipError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn text(&mut self) -> Result<String, MembershipError> {
        let len = self.u8()? as usize;
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| MembershipError::Malformed("address is not UTF-8"))
    }
    fn bytes(&mut self, max: usize) -> Result<Vec<u8>, MembershipError> {
        let len = self.u16()? as usize;
        if len > max {
            return Err(MembershipError::Malformed("context too long"));
        }
        Ok(self.take(len)?.to_vec())
    }
    fn flag(&mut self) -> Result<bool, MembershipError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(MembershipError::Malformed("flag is neither 0 nor 1")),
        }
    }
    fn member(&mut self) -> Result<Member, MembershipError> {
        let id = self.u64()?;
        let role = match self.u8()? {
            0 => Role::Voter,
            1 => Role::Observer,
            _ => return Err(MembershipError::Malformed("unknown role")),
        };
        let election_port = self.u16()?;
        let bootstrap = self.flag()?;
        let peer = self.text()?;
        let client = self.text()?;
        if id == 0 {
            return Err(MembershipError::Malformed("member id 0"));
        }
        Ok(Member {
            id,
            role,
            peer,
            election_port,
            client,
            bootstrap,
        })
    }
    fn members(&mut self) -> Result<Members, MembershipError> {
        let count = self.u16()? as usize;
        if count > MEMBERS_MAX {
            return Err(MembershipError::Malformed("too many members"));
        }
        let mut members = Members::new();
        for _ in 0..count {
            let member = self.member()?;
            if members.insert(member.id, member).is_some() {
                return Err(MembershipError::Malformed("member listed twice"));
            }
        }
        Ok(members)
    }
    fn ticket(&mut self) -> Result<Option<Ticket>, MembershipError> {
        if !self.flag()? {
            return Ok(None);
        }
        Ok(Some(Ticket {
            origin: self.u64()?,
            request: self.u64()?,
            context: self.bytes(TICKET_CONTEXT_BYTES_MAX)?,
        }))
    }
    fn pending(&mut self) -> Result<Pending, MembershipError> {
        let time_ms = self.u64()? as i64;
        let ticket = self.ticket()?;
        let target = self.members()?;
        Ok(Pending {
            target,
            ticket,
            time_ms,
        })
    }
    fn format(&mut self, expected: u8) -> Result<(), MembershipError> {
        match self.u8()? {
            found if found == expected => Ok(()),
            found => Err(MembershipError::Format(found, expected)),
        }
    }
    fn end(&self) -> Result<(), MembershipError> {
        if self.at != self.bytes.len() {
            return Err(MembershipError::Malformed("trailing bytes"));
        }
        Ok(())
    }
}

/// The context of a conf-change entry: the change it is a step of.
pub fn encode_context(pending: &Pending) -> Vec<u8> {
    let mut out = vec![CONTEXT_FORMAT];
    Writer(&mut out).pending(pending);
    out
}

/// None for an empty context (an entry raft-rs made itself).
pub fn decode_context(bytes: &[u8]) -> Result<Option<Pending>, MembershipError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let mut reader = Reader::new(bytes);
    reader.format(CONTEXT_FORMAT)?;
    let pending = reader.pending()?;
    reader.end()?;
    Ok(Some(pending))
}

impl Membership {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(MEMBERSHIP_FORMAT);
        let mut writer = Writer(out);
        writer.u64(self.config_id);
        writer.members(&self.members);
        match &self.pending {
            None => writer.u8(0),
            Some(pending) => {
                writer.u8(1);
                writer.pending(pending);
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Membership, MembershipError> {
        let mut reader = Reader::new(bytes);
        reader.format(MEMBERSHIP_FORMAT)?;
        let config_id = reader.u64()?;
        let members = reader.members()?;
        let pending = if reader.flag()? {
            Some(reader.pending()?)
        } else {
            None
        };
        reader.end()?;
        Ok(Membership {
            members,
            config_id,
            pending,
        })
    }

    /// Every member's replicated peer address, the target's included (a
    /// member being added must be reachable before it is promoted).
    pub fn addresses(&self) -> BTreeMap<u64, (String, bool)> {
        let mut book: BTreeMap<u64, (String, bool)> = self
            .members
            .values()
            .map(|m| (m.id, (m.peer.clone(), m.bootstrap)))
            .collect();
        if let Some(pending) = &self.pending {
            for member in pending.target.values() {
                book.insert(member.id, (member.peer.clone(), member.bootstrap));
            }
        }
        book
    }
}

impl ReconfigRequest {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![REQUEST_FORMAT];
        let mut writer = Writer(&mut out);
        match &self.change {
            Change::Incremental { joining, leaving } => {
                writer.u8(0);
                let joining: Members = joining.iter().map(|m| (m.id, m.clone())).collect();
                writer.members(&joining);
                writer.u16(leaving.len() as u16);
                for id in leaving {
                    writer.u64(*id);
                }
            }
            Change::Replace(members) => {
                writer.u8(1);
                let members: Members = members.iter().map(|m| (m.id, m.clone())).collect();
                writer.members(&members);
            }
        }
        match self.expected_config_id {
            None => writer.u8(0),
            Some(id) => {
                writer.u8(1);
                writer.u64(id);
            }
        }
        writer.u8(u8::from(self.authorized));
        writer.ticket(&Some(self.ticket.clone()));
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<ReconfigRequest, MembershipError> {
        let mut reader = Reader::new(bytes);
        reader.format(REQUEST_FORMAT)?;
        let change = match reader.u8()? {
            0 => {
                let joining = reader.members()?.into_values().collect();
                let count = reader.u16()? as usize;
                if count > MEMBERS_MAX {
                    return Err(MembershipError::Malformed("too many leaving"));
                }
                let leaving = (0..count).map(|_| reader.u64()).collect::<Result<_, _>>()?;
                Change::Incremental { joining, leaving }
            }
            1 => Change::Replace(reader.members()?.into_values().collect()),
            _ => return Err(MembershipError::Malformed("unknown change kind")),
        };
        let expected_config_id = if reader.flag()? {
            Some(reader.u64()?)
        } else {
            None
        };
        let authorized = reader.flag()?;
        let ticket = reader
            .ticket()?
            .ok_or(MembershipError::Malformed("request without ticket"))?;
        reader.end()?;
        Ok(ReconfigRequest {
            change,
            expected_config_id,
            authorized,
            ticket,
        })
    }
}

/// The leader's refusal of a request, back to the node that asked.
pub fn encode_answer(ticket: &Ticket, error: &ReconfigError) -> Vec<u8> {
    let mut out = vec![ANSWER_FORMAT];
    let mut writer = Writer(&mut out);
    writer.ticket(&Some(ticket.clone()));
    let (code, text, expected, current) = match error {
        ReconfigError::Disabled => (0, "", 0, 0),
        ReconfigError::InProgress => (1, "", 0, 0),
        ReconfigError::BadVersion { expected, current } => (2, "", *expected, *current),
        ReconfigError::BadArguments(text) => (3, text.as_str(), 0, 0),
        ReconfigError::NoQuorum => (4, "", 0, 0),
        ReconfigError::NoAuth => (5, "", 0, 0),
        ReconfigError::Lost => (6, "", 0, 0),
    };
    writer.u8(code);
    writer.u64(expected);
    writer.u64(current);
    let text = &text.as_bytes()[..text.len().min(1024)];
    writer.bytes(text);
    out
}

pub fn decode_answer(bytes: &[u8]) -> Result<(Ticket, ReconfigError), MembershipError> {
    let mut reader = Reader::new(bytes);
    reader.format(ANSWER_FORMAT)?;
    let ticket = reader
        .ticket()?
        .ok_or(MembershipError::Malformed("answer without ticket"))?;
    let code = reader.u8()?;
    let expected = reader.u64()?;
    let current = reader.u64()?;
    let text = String::from_utf8_lossy(&reader.bytes(1024)?).into_owned();
    reader.end()?;
    let error = match code {
        0 => ReconfigError::Disabled,
        1 => ReconfigError::InProgress,
        2 => ReconfigError::BadVersion { expected, current },
        3 => ReconfigError::BadArguments(text),
        4 => ReconfigError::NoQuorum,
        5 => ReconfigError::NoAuth,
        6 => ReconfigError::Lost,
        _ => return Err(MembershipError::Malformed("unknown answer code")),
    };
    Ok((ticket, error))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, role: Role) -> Member {
        Member {
            id,
            role,
            peer: format!("127.0.0.1:{}", 2887 + id),
            election_port: 3887 + id as u16,
            client: format!("127.0.0.1:{}", 2180 + id),
            bootstrap: id < 3,
        }
    }

    fn table(ids: &[(u64, Role)]) -> Members {
        ids.iter()
            .map(|&(id, role)| (id, member(id, role)))
            .collect()
    }

    #[test]
    fn a_membership_round_trips_and_every_cut_is_refused() {
        let membership = Membership {
            members: table(&[(1, Role::Voter), (2, Role::Voter), (3, Role::Observer)]),
            config_id: 0x1_0000_0004,
            pending: Some(Pending {
                target: table(&[(1, Role::Voter), (4, Role::Voter)]),
                ticket: Some(Ticket {
                    origin: 2,
                    request: 99,
                    context: vec![1, 2, 3],
                }),
                time_ms: 1_700_000_000_000,
            }),
        };
        let mut bytes = Vec::new();
        membership.encode(&mut bytes);
        assert_eq!(Membership::decode(&bytes), Ok(membership.clone()));
        for cut in 0..bytes.len() {
            assert!(Membership::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let context = encode_context(membership.pending.as_ref().unwrap());
        assert_eq!(decode_context(&context), Ok(membership.pending.clone()));
        assert_eq!(decode_context(&[]), Ok(None));
        assert!(decode_context(&bytes).is_err(), "another format is refused");
    }

    #[test]
    fn requests_and_answers_round_trip() {
        let request = ReconfigRequest {
            change: Change::Incremental {
                joining: vec![member(4, Role::Voter)],
                leaving: vec![2, 3],
            },
            expected_config_id: Some(7),
            authorized: true,
            ticket: Ticket {
                origin: 3,
                request: 5,
                context: b"ctx".to_vec(),
            },
        };
        assert_eq!(
            ReconfigRequest::decode(&request.encode()),
            Ok(request.clone())
        );
        let replace = ReconfigRequest {
            change: Change::Replace(vec![member(1, Role::Voter), member(5, Role::Observer)]),
            expected_config_id: None,
            authorized: false,
            ..request.clone()
        };
        assert_eq!(ReconfigRequest::decode(&replace.encode()), Ok(replace));
        for error in [
            ReconfigError::InProgress,
            ReconfigError::BadVersion {
                expected: 1,
                current: 2,
            },
            ReconfigError::BadArguments("wrong".into()),
            ReconfigError::NoQuorum,
            ReconfigError::NoAuth,
        ] {
            let answer = encode_answer(&request.ticket, &error);
            assert_eq!(decode_answer(&answer), Ok((request.ticket.clone(), error)));
        }
    }

    #[test]
    fn incremental_changes_replace_by_id_and_remove() {
        let current = table(&[(1, Role::Voter), (2, Role::Voter), (3, Role::Voter)]);
        let change = Change::Incremental {
            joining: vec![member(3, Role::Observer), member(4, Role::Voter)],
            leaving: vec![2],
        };
        let next = change.apply_to(&current);
        let (voters, observers) = roles(&next);
        assert_eq!(voters.into_iter().collect::<Vec<_>>(), [1, 4]);
        assert_eq!(observers.into_iter().collect::<Vec<_>>(), [3]);
    }
}
