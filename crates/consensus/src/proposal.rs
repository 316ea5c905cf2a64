//! Proposals as consensus sees them: an id it assigns and bytes it never
//! looks into. It packs them into log entries (group commit), forwards
//! them to the leader, resends them after a leader change and, because a
//! resent proposal may already be in the log, applies each id once: the
//! dedup table lives here, next to the ids, and travels in the snapshot
//! envelope (`Envelope`) so a restarted node or a follower that installs a
//! snapshot keeps refusing what was applied before it.
//!
//! Entry payload (format `ENTRY_FORMAT`): `[format u8][count u32]` then per
//! proposal `[id u64][len u32][payload]`, big-endian.
//!
//! Snapshot envelope: `KEELRAFT`, version u32, `[len u32][crc32 u32]` and
//! the dedup table `[count u32]{[origin u64][sequence u64]}`, then (version
//! 2) the configuration as of the snapshot's index: `[len u32]` raft-rs's
//! ConfState (protobuf) and `[len u32]` the membership (membership.rs);
//! followed by the state machine's own snapshot bytes, untouched. Version
//! 1 (no configuration) is still read.

use std::collections::BTreeMap;

use protobuf::Message as _;
use raft::eraftpb::ConfState;

use crate::membership::Membership;

/// Bits of a proposal id below the origin node id.
pub const PROPOSAL_SEQUENCE_BITS: u32 = 56;
const SEQUENCE_MASK: u64 = (1 << PROPOSAL_SEQUENCE_BITS) - 1;
/// Most proposals one log entry carries (group commit batch bound).
pub const BATCH_PROPOSALS_MAX: usize = 4096;
/// Most bytes one proposal's payload may have (a 1 MiB znode value plus
/// its request and context).
pub const PROPOSAL_BYTES_MAX: usize = (1 << 20) + (64 << 10);
/// The first byte of every normal entry's payload. An entry written by a
/// Keel before the envelope starts with a zero byte (its count's high
/// byte) and is refused at startup, never misread.
pub const ENTRY_FORMAT: u8 = 0xB1;
const ENTRY_HEADER_BYTES: usize = 5;
const PROPOSAL_HEADER_BYTES: usize = 12;
/// Node ids a dedup table may hold (node ids are below 2^8 in practice).
pub const DEDUP_ORIGINS_MAX: usize = 1 << 16;
const ENVELOPE_MAGIC: &[u8; 8] = b"KEELRAFT";
/// The envelope this Keel writes.
pub const ENVELOPE_VERSION: u32 = 2;
/// The envelope before it carried the configuration (still read).
pub const ENVELOPE_VERSION_DEDUP_ONLY: u32 = 1;
/// Largest configuration part of an envelope (255 members' addresses).
const ENVELOPE_CONFIGURATION_BYTES_MAX: usize = 1 << 20;
pub(crate) const ENVELOPE_HEADER_BYTES: usize = 8 + 4 + 4 + 4;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposalError {
    #[error("entry payload is not in format {ENTRY_FORMAT:#x} (found {0:#x}): written by another Keel release or corrupt")]
    EntryFormat(u8),
    #[error("entry payload is truncated at byte {0}")]
    Truncated(usize),
    #[error("entry carries {0} proposals (1..={BATCH_PROPOSALS_MAX} allowed)")]
    Count(usize),
    #[error("proposal of {0} bytes exceeds {PROPOSAL_BYTES_MAX}")]
    TooLarge(usize),
    #[error("entry payload has {0} trailing bytes")]
    Trailing(usize),
    #[error("snapshot envelope version {0} is not supported (this Keel reads {ENVELOPE_VERSION_DEDUP_ONLY} and {ENVELOPE_VERSION})")]
    EnvelopeVersion(u32),
    #[error(
        "snapshot envelope checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
    )]
    EnvelopeChecksum { stored: u32, computed: u32 },
    #[error("snapshot envelope is malformed: {0}")]
    Envelope(&'static str),
}

/// (origin node << 56) | per-node sequence. Sequences of one origin grow
/// across restarts (see driver.rs), so "applied" is one number per origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProposalId(u64);

impl ProposalId {
    pub fn new(origin: u64, sequence: u64) -> ProposalId {
        assert!(origin > 0 && origin < (1 << (64 - PROPOSAL_SEQUENCE_BITS)));
        ProposalId((origin << PROPOSAL_SEQUENCE_BITS) | (sequence & SEQUENCE_MASK))
    }

    pub fn origin(self) -> u64 {
        self.0 >> PROPOSAL_SEQUENCE_BITS
    }

    pub fn sequence(self) -> u64 {
        self.0 & SEQUENCE_MASK
    }

    pub fn raw(self) -> u64 {
        self.0
    }
}

/// A proposal waiting for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub id: ProposalId,
    pub payload: Vec<u8>,
}

/// A committed proposal handed to the state machine, borrowed from its
/// entry: `origin` is the node the client asked (only it answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed<'a> {
    pub origin: u64,
    pub payload: &'a [u8],
}

/// Appends one entry's payload holding `proposals`.
pub fn encode_entry(proposals: &[Proposal], out: &mut Vec<u8>) {
    assert!(!proposals.is_empty() && proposals.len() <= BATCH_PROPOSALS_MAX);
    out.push(ENTRY_FORMAT);
    out.extend_from_slice(&(proposals.len() as u32).to_be_bytes());
    for proposal in proposals {
        assert!(proposal.payload.len() <= PROPOSAL_BYTES_MAX);
        out.extend_from_slice(&proposal.id.raw().to_be_bytes());
        out.extend_from_slice(&(proposal.payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&proposal.payload);
    }
}

/// Checks an entry's payload whole, then returns its proposals borrowed
/// from it (nothing is returned from a payload that fails a check).
pub fn decode_entry(bytes: &[u8]) -> Result<Vec<(ProposalId, &[u8])>, ProposalError> {
    check_entry_format(bytes)?;
    if bytes.len() < ENTRY_HEADER_BYTES {
        return Err(ProposalError::Truncated(bytes.len()));
    }
    let count = u32::from_be_bytes(bytes[1..5].try_into().expect("4 bytes")) as usize;
    if count == 0 || count > BATCH_PROPOSALS_MAX {
        return Err(ProposalError::Count(count));
    }
    let mut proposals = Vec::with_capacity(count);
    let mut at = ENTRY_HEADER_BYTES;
    for _ in 0..count {
        let header = bytes
            .get(at..at + PROPOSAL_HEADER_BYTES)
            .ok_or(ProposalError::Truncated(at))?;
        let id = u64::from_be_bytes(header[..8].try_into().expect("8 bytes"));
        let len = u32::from_be_bytes(header[8..].try_into().expect("4 bytes")) as usize;
        if len > PROPOSAL_BYTES_MAX {
            return Err(ProposalError::TooLarge(len));
        }
        at += PROPOSAL_HEADER_BYTES;
        let payload = bytes
            .get(at..at + len)
            .ok_or(ProposalError::Truncated(at))?;
        at += len;
        proposals.push((ProposalId(id), payload));
    }
    if at != bytes.len() {
        return Err(ProposalError::Trailing(bytes.len() - at));
    }
    Ok(proposals)
}

/// The cheap check recovery runs on every log entry it keeps.
pub fn check_entry_format(bytes: &[u8]) -> Result<(), ProposalError> {
    match bytes.first() {
        Some(&ENTRY_FORMAT) => Ok(()),
        Some(&other) => Err(ProposalError::EntryFormat(other)),
        None => Err(ProposalError::Truncated(0)),
    }
}

/// Per origin node, the highest sequence applied: a proposal at or below
/// it was applied before (resent after a leader change) and is skipped by
/// every replica alike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dedup {
    applied: BTreeMap<u64, u64>,
}

impl Dedup {
    /// True (and remembered) if `id` was not applied yet.
    pub fn admit(&mut self, id: ProposalId) -> bool {
        let applied = self.applied.entry(id.origin()).or_insert(0);
        if id.sequence() <= *applied {
            return false;
        }
        *applied = id.sequence();
        true
    }

    /// The highest sequence of `origin` applied (0 = none).
    pub fn applied(&self, origin: u64) -> u64 {
        self.applied.get(&origin).copied().unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.applied.len()
    }

    pub fn is_empty(&self) -> bool {
        self.applied.is_empty()
    }
}

/// The configuration as of a snapshot's index: raft-rs's voting rules and
/// Keel's member table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Configuration {
    pub conf_state: ConfState,
    pub membership: Membership,
}

/// What precedes the state machine's bytes in a snapshot file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Envelope {
    pub dedup: Dedup,
    /// None in a file of envelope version 1.
    pub configuration: Option<Configuration>,
}

impl Envelope {
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(self.dedup.len() <= DEDUP_ORIGINS_MAX);
        let mut body = Vec::with_capacity(4 + 16 * self.dedup.len());
        body.extend_from_slice(&(self.dedup.len() as u32).to_be_bytes());
        for (origin, sequence) in &self.dedup.applied {
            body.extend_from_slice(&origin.to_be_bytes());
            body.extend_from_slice(&sequence.to_be_bytes());
        }
        let configuration = self.configuration.clone().unwrap_or_default();
        let conf_state = configuration
            .conf_state
            .write_to_bytes()
            .expect("a ConfState encodes");
        let mut membership = Vec::new();
        configuration.membership.encode(&mut membership);
        for part in [&conf_state, &membership] {
            assert!(part.len() <= ENVELOPE_CONFIGURATION_BYTES_MAX);
            body.extend_from_slice(&(part.len() as u32).to_be_bytes());
            body.extend_from_slice(part);
        }
        out.extend_from_slice(ENVELOPE_MAGIC);
        out.extend_from_slice(&ENVELOPE_VERSION.to_be_bytes());
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
        out.extend_from_slice(&body);
    }

    /// Splits a snapshot file into its envelope and the state machine's
    /// bytes. A file without the envelope (written before it existed) is
    /// all state machine bytes, with an empty dedup table.
    pub fn split(bytes: &[u8]) -> Result<(Envelope, &[u8]), ProposalError> {
        if !bytes.starts_with(ENVELOPE_MAGIC) {
            return Ok((Envelope::default(), bytes));
        }
        let header = bytes
            .get(..ENVELOPE_HEADER_BYTES)
            .ok_or(ProposalError::Envelope("truncated header"))?;
        let version = u32::from_be_bytes(header[8..12].try_into().expect("4 bytes"));
        if version != ENVELOPE_VERSION && version != ENVELOPE_VERSION_DEDUP_ONLY {
            return Err(ProposalError::EnvelopeVersion(version));
        }
        let len = u32::from_be_bytes(header[12..16].try_into().expect("4 bytes")) as usize;
        let stored = u32::from_be_bytes(header[16..20].try_into().expect("4 bytes"));
        if len > 4 + 16 * DEDUP_ORIGINS_MAX + 8 + 2 * ENVELOPE_CONFIGURATION_BYTES_MAX {
            return Err(ProposalError::Envelope("dedup table too large"));
        }
        let body = bytes
            .get(ENVELOPE_HEADER_BYTES..ENVELOPE_HEADER_BYTES + len)
            .ok_or(ProposalError::Envelope("truncated dedup table"))?;
        let computed = crc32fast::hash(body);
        if computed != stored {
            return Err(ProposalError::EnvelopeChecksum { stored, computed });
        }
        let (dedup, rest) = decode_dedup(body)?;
        let configuration = if version == ENVELOPE_VERSION_DEDUP_ONLY {
            if !rest.is_empty() {
                return Err(ProposalError::Envelope("dedup table length"));
            }
            None
        } else {
            Some(decode_configuration(rest)?)
        };
        let envelope = Envelope {
            dedup,
            configuration,
        };
        Ok((envelope, &bytes[ENVELOPE_HEADER_BYTES + len..]))
    }
}

fn decode_configuration(mut rest: &[u8]) -> Result<Configuration, ProposalError> {
    let mut part = || -> Result<&[u8], ProposalError> {
        let len = rest
            .get(..4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
            .ok_or(ProposalError::Envelope("truncated configuration"))?;
        let bytes = rest
            .get(4..4 + len)
            .ok_or(ProposalError::Envelope("truncated configuration"))?;
        rest = &rest[4 + len..];
        Ok(bytes)
    };
    let conf_state = ConfState::parse_from_bytes(part()?)
        .map_err(|_| ProposalError::Envelope("ConfState does not decode"))?;
    let membership = Membership::decode(part()?)
        .map_err(|_| ProposalError::Envelope("membership does not decode"))?;
    if !rest.is_empty() {
        return Err(ProposalError::Envelope("trailing configuration bytes"));
    }
    Ok(Configuration {
        conf_state,
        membership,
    })
}

/// The dedup table at the start of an envelope's body, and what follows.
fn decode_dedup(body: &[u8]) -> Result<(Dedup, &[u8]), ProposalError> {
    let count = body
        .get(..4)
        .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
        .ok_or(ProposalError::Envelope("no dedup count"))?;
    if count > DEDUP_ORIGINS_MAX || body.len() < 4 + 16 * count {
        return Err(ProposalError::Envelope("dedup table length"));
    }
    let (table, rest) = body.split_at(4 + 16 * count);
    let body = table;
    let mut dedup = Dedup::default();
    for row in body[4..].chunks_exact(16) {
        let origin = u64::from_be_bytes(row[..8].try_into().expect("8 bytes"));
        let sequence = u64::from_be_bytes(row[8..].try_into().expect("8 bytes"));
        if dedup.applied.insert(origin, sequence).is_some() {
            return Err(ProposalError::Envelope("origin listed twice"));
        }
    }
    Ok((dedup, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposal(origin: u64, sequence: u64, payload: &[u8]) -> Proposal {
        Proposal {
            id: ProposalId::new(origin, sequence),
            payload: payload.to_vec(),
        }
    }

    #[test]
    fn an_entry_round_trips_and_every_cut_of_it_is_refused() {
        let proposals = vec![
            proposal(1, 7, b"abc"),
            proposal(3, 1, b""),
            proposal(2, 9, &[0; 300]),
        ];
        let mut bytes = Vec::new();
        encode_entry(&proposals, &mut bytes);
        let decoded = decode_entry(&bytes).expect("decodes");
        assert_eq!(decoded.len(), 3);
        for ((id, payload), original) in decoded.iter().zip(&proposals) {
            assert_eq!(*id, original.id);
            assert_eq!(*payload, &original.payload[..]);
        }
        for cut in 0..bytes.len() {
            assert!(
                decode_entry(&bytes[..cut]).is_err(),
                "cut at {cut} accepted"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode_entry(&longer), Err(ProposalError::Trailing(1)));
    }

    #[test]
    fn an_entry_of_the_old_format_is_named_as_such() {
        // The old format began with a big-endian count of at most 4096.
        let old = [0u8, 0, 0, 1, 0, 0, 0, 0];
        assert_eq!(decode_entry(&old), Err(ProposalError::EntryFormat(0)));
        assert!(check_entry_format(&old).is_err());
    }

    #[test]
    fn dedup_admits_each_sequence_of_an_origin_once_and_in_order() {
        let mut dedup = Dedup::default();
        assert!(dedup.admit(ProposalId::new(1, 5)));
        assert!(!dedup.admit(ProposalId::new(1, 5)), "the same id twice");
        assert!(!dedup.admit(ProposalId::new(1, 4)), "an older id");
        assert!(dedup.admit(ProposalId::new(2, 1)), "another origin");
        assert!(dedup.admit(ProposalId::new(1, 6)));
        assert_eq!(dedup.applied(1), 6);
        assert_eq!(dedup.applied(9), 0);
    }

    #[test]
    fn the_envelope_round_trips_and_refuses_corruption() {
        let mut dedup = Dedup::default();
        dedup.admit(ProposalId::new(1, 10));
        dedup.admit(ProposalId::new(4, 3));
        let envelope = Envelope {
            dedup,
            configuration: Some(Configuration {
                conf_state: ConfState {
                    voters: vec![1, 2],
                    learners: vec![4],
                    ..Default::default()
                },
                membership: Membership {
                    config_id: 0x2_0000_0001,
                    ..Membership::default()
                },
            }),
        };
        let mut file = Vec::new();
        envelope.encode(&mut file);
        file.extend_from_slice(b"KEELSNAP-machine-bytes");
        let (read, rest) = Envelope::split(&file).expect("splits");
        assert_eq!(read, envelope);
        assert_eq!(rest, b"KEELSNAP-machine-bytes");
        let mut flipped = file.clone();
        flipped[ENVELOPE_HEADER_BYTES + 6] ^= 1;
        assert!(matches!(
            Envelope::split(&flipped),
            Err(ProposalError::EnvelopeChecksum { .. })
        ));
        for cut in 8..ENVELOPE_HEADER_BYTES + 4 + 32 {
            assert!(
                Envelope::split(&file[..cut]).is_err(),
                "cut at {cut} accepted"
            );
        }
        let (legacy, rest) = Envelope::split(b"KEELSNAP...").expect("no envelope");
        assert!(legacy.dedup.is_empty());
        assert_eq!(rest, b"KEELSNAP...");
        // Version 1 (before the configuration) is still read.
        let mut version_1 = Vec::new();
        let mut body = 1u32.to_be_bytes().to_vec();
        body.extend_from_slice(&7u64.to_be_bytes());
        body.extend_from_slice(&9u64.to_be_bytes());
        version_1.extend_from_slice(ENVELOPE_MAGIC);
        version_1.extend_from_slice(&ENVELOPE_VERSION_DEDUP_ONLY.to_be_bytes());
        version_1.extend_from_slice(&(body.len() as u32).to_be_bytes());
        version_1.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
        version_1.extend_from_slice(&body);
        version_1.extend_from_slice(b"tree");
        let (old, rest) = Envelope::split(&version_1).expect("version 1 reads");
        assert_eq!(
            (old.dedup.applied(7), old.configuration, rest),
            (9, None, &b"tree"[..])
        );
    }
}
