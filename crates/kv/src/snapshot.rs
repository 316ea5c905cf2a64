//! The keyspace's part of a Keel snapshot file. It follows the data
//! tree's part (which ends with its END frame) and is absent when the
//! keyspace is empty, so a node that never served KV writes the same
//! file as before and every older snapshot loads as an empty keyspace.
//!
//! Format (version 4): `KEELKVSN`, version u32, then frames
//! `[kind u8][len u32][crc32 u32][payload]` (the CRC covers kind and
//! payload): HEADER (log index u64, log clock i64, the version again:
//! the copy a CRC covers; versions 1-3 end the HEADER at the clock), per shard DELETED
//! (`[count u32]{[slot u16][index u64]}`, then `[count u32]{[slot
//! u16][mark u64][index u64]}`: what WATCH knows of deletions, per slot
//! and key by key, `shard.rs`'s `Tombstones`; version 1 had only the
//! first list and still loads) and KEYS frames (records, each frame closed past
//! `KEYS_FRAME_BYTES_TARGET`), END (frame count u32, key count u64).
//! The layout does not depend on the shard count: a node with another
//! number of cores routes every record to its own shards by slot.
//!
//! Record: `[encoding u8][key][expire_at_ms varint][version varint]` (the
//! write stamp of its last change, `shard::stamp`; a plain log index in
//! files written before stamps) then
//! the value: a string `[bytes]`; a hash (small or table) `[count
//! varint]{[field][value]}`; an integer set `[count varint]{[zigzag
//! varint]}`; a set table `[count varint]{[member]}`. `[bytes]` is a
//! varint length and the bytes. Encodings are kept, so a small hash keeps
//! its field order across a restart, as Redis's RDB keeps a listpack.

use hashbrown::{HashMap, HashSet};

use crate::shard::Shard;
use crate::slot::{key_slot, shard_of_slot, shard_slots};
use crate::value::{Aggregate, Bytes, Entry};

pub(crate) const MAGIC: &[u8; 8] = b"KEELKVSN";
/// Version 4: the HEADER frame repeats the version, so that a CRC covers
/// it. In version 3 nothing did, and one flipped bit made a version 3
/// part read as version 2, whose layout is the same: the restart loaded a
/// damaged file without a word (simulator seed 209899). A version 4 part
/// whose version reads 1-3 has a HEADER too long for them and is refused;
/// any other version is refused as unknown.
///
/// Version 3: keys' versions and deletion marks are write stamps
/// (`shard::stamp`); version 2's were log indexes, in the same layout.
/// An older Keel refuses a newer version: it would compare stamps with
/// its own indexes (and its deletion records assert that they only grow).
pub const FORMAT_VERSION: u32 = 4;
/// The first version whose HEADER repeats the version.
const HEADER_VERSION_SINCE: u32 = 4;
const _: () = assert!(HEADER_VERSION_SINCE <= FORMAT_VERSION);
/// The oldest format this Keel reads (no remembered deletions).
const FORMAT_VERSION_MIN: u32 = 1;
pub(crate) const FILE_HEADER_BYTES: usize = 12;
pub(crate) const FRAME_HEADER_BYTES: usize = 9;
pub(crate) const KIND_HEADER: u8 = 1;
pub(crate) const KIND_DELETED: u8 = 2;
const KIND_KEYS: u8 = 3;
pub(crate) const KIND_END: u8 = 4;
/// A KEYS frame is closed once its payload passes this size.
pub const KEYS_FRAME_BYTES_TARGET: usize = 1 << 20;

const ENCODING_STRING: u8 = 0;
const ENCODING_SMALL_HASH: u8 = 1;
const ENCODING_HASH: u8 = 2;
const ENCODING_INT_SET: u8 = 3;
const ENCODING_SET: u8 = 4;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvSnapshotError {
    #[error("keyspace snapshot: bad magic")]
    BadMagic,
    #[error("keyspace snapshot format {0} is not supported (this Keel reads {FORMAT_VERSION_MIN} to {FORMAT_VERSION})")]
    Version(u32),
    #[error("keyspace snapshot: frame at offset {offset}: {reason}")]
    Frame { offset: usize, reason: String },
    #[error("keyspace snapshot: checksum mismatch in the frame at offset {0}")]
    Checksum(usize),
    /// END's counts differ from the frames and keys before it, or bytes
    /// follow it.
    #[error("keyspace snapshot: frame at offset {offset}: END declares {declared_frames} frames / {declared_keys} keys, found {frames} / {keys} ({trailing_bytes} bytes after it)")]
    EndCounts {
        offset: usize,
        declared_frames: u32,
        declared_keys: u64,
        frames: u32,
        keys: u64,
        trailing_bytes: usize,
    },
}

fn frame_error(offset: usize, reason: impl Into<String>) -> KvSnapshotError {
    KvSnapshotError::Frame {
        offset,
        reason: reason.into(),
    }
}

/// A frame's CRC: it covers the kind byte and the payload.
pub(crate) fn frame_crc(kind: u8, payload: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[kind]);
    crc.update(payload);
    crc.finalize()
}

fn frame(out: &mut Vec<u8>, kind: u8, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.push(kind);
    out.extend_from_slice(&[0; 8]);
    body(out);
    let len = out.len() - start - FRAME_HEADER_BYTES;
    let crc = frame_crc(kind, &out[start + FRAME_HEADER_BYTES..]);
    out[start + 1..start + 5]
        .copy_from_slice(&u32::try_from(len).expect("frame fits").to_be_bytes());
    out[start + 5..start + 9].copy_from_slice(&crc.to_be_bytes());
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn bytes(out: &mut Vec<u8>, data: &[u8]) {
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// The part's start: magic, version and HEADER.
pub fn encode_head(index: u64, clock_ms: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
    frame(out, KIND_HEADER, |out| {
        out.extend_from_slice(&index.to_be_bytes());
        out.extend_from_slice(&clock_ms.to_be_bytes());
        out.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
    });
}

/// One shard's frames; returns (frames, keys) for END.
pub fn encode_shard(shard: &Shard, out: &mut Vec<u8>) -> (u32, u64) {
    let deletions: Vec<(u16, u64)> = shard.deletions().collect();
    let tombstones = shard.tombstones();
    frame(out, KIND_DELETED, |out| {
        out.extend_from_slice(&(deletions.len() as u32).to_be_bytes());
        for (slot, index) in &deletions {
            out.extend_from_slice(&slot.to_be_bytes());
            out.extend_from_slice(&index.to_be_bytes());
        }
        out.extend_from_slice(&(tombstones.len() as u32).to_be_bytes());
        for (slot, mark, index) in &tombstones {
            out.extend_from_slice(&slot.to_be_bytes());
            out.extend_from_slice(&mark.to_be_bytes());
            out.extend_from_slice(&index.to_be_bytes());
        }
    });
    let mut frames = 1;
    let mut keys = 0u64;
    let mut entries = shard
        .entries()
        .filter(|_| !crate::planted::snapshot_keys_dropped())
        .peekable();
    while entries.peek().is_some() {
        frame(out, KIND_KEYS, |out| {
            let start = out.len();
            while out.len() - start < KEYS_FRAME_BYTES_TARGET {
                let Some(entry) = entries.next() else { break };
                encode_record(entry, out);
                keys += 1;
            }
        });
        frames += 1;
    }
    (frames, keys)
}

/// The part's END.
pub fn encode_end(frames: u32, keys: u64, out: &mut Vec<u8>) {
    frame(out, KIND_END, |out| {
        out.extend_from_slice(&frames.to_be_bytes());
        out.extend_from_slice(&keys.to_be_bytes());
    });
}

/// The whole part for `shards` (tests and single-threaded callers).
pub fn encode(shards: &[Shard], index: u64, clock_ms: i64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_head(index, clock_ms, &mut out);
    let (mut frames, mut keys) = (0, 0);
    for shard in shards {
        let (f, k) = encode_shard(shard, &mut out);
        frames += f;
        keys += k;
    }
    encode_end(frames, keys, &mut out);
    out
}

fn encode_record(entry: &Entry, out: &mut Vec<u8>) {
    let encoding = match entry.aggregate_ref() {
        None => ENCODING_STRING,
        Some(Aggregate::SmallHash(_)) => ENCODING_SMALL_HASH,
        Some(Aggregate::Hash(_)) => ENCODING_HASH,
        Some(Aggregate::IntSet(_)) => ENCODING_INT_SET,
        Some(Aggregate::Set(_)) => ENCODING_SET,
    };
    out.push(encoding);
    bytes(out, entry.key());
    varint(out, entry.expire_at_ms as u64);
    varint(out, entry.version);
    match entry.aggregate_ref() {
        None => bytes(out, entry.string_value().expect("a string")),
        Some(hash @ (Aggregate::SmallHash(_) | Aggregate::Hash(_))) => {
            varint(out, hash.len() as u64);
            for (field, value) in hash.hash_pairs() {
                bytes(out, field);
                bytes(out, value);
            }
        }
        Some(Aggregate::IntSet(members)) => {
            varint(out, members.len() as u64);
            for &m in members {
                varint(out, ((m << 1) ^ (m >> 63)) as u64);
            }
        }
        Some(Aggregate::Set(members)) => {
            varint(out, members.len() as u64);
            for m in members {
                bytes(out, m);
            }
        }
    }
}

/// A loaded keyspace: its shards (for `shard_count` shards), position
/// and clock.
#[derive(Debug)]
pub struct Image {
    pub shards: Vec<Shard>,
    pub index: u64,
    pub clock_ms: i64,
}

/// An empty keyspace of `shard_count` shards (no KV part in the file).
pub fn empty(shard_count: usize) -> Image {
    Image {
        shards: (0..shard_count)
            .map(|i| Shard::new(shard_slots(i, shard_count)))
            .collect(),
        index: 0,
        clock_ms: 0,
    }
}

/// Loads a KV part (`bytes` empty: an empty keyspace) into `shard_count`
/// shards; every frame is checked before it is used, and the file is
/// refused whole at its first fault.
pub fn decode(bytes: &[u8], shard_count: usize) -> Result<Image, KvSnapshotError> {
    let mut image = empty(shard_count);
    if bytes.is_empty() {
        return Ok(image);
    }
    if bytes.len() < FILE_HEADER_BYTES || &bytes[..8] != MAGIC {
        return Err(KvSnapshotError::BadMagic);
    }
    let version = u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if !(FORMAT_VERSION_MIN..=FORMAT_VERSION).contains(&version) {
        return Err(KvSnapshotError::Version(version));
    }
    let mut offset = FILE_HEADER_BYTES;
    let mut frames = 0u32;
    let mut keys = 0u64;
    let mut header_seen = false;
    loop {
        let (kind, payload, next) = read_frame(bytes, offset)?;
        let mut r = Reader {
            bytes: payload,
            at: 0,
            offset,
        };
        match kind {
            KIND_HEADER if !header_seen => {
                header_seen = true;
                image.index = r.u64()?;
                if image.index >= crate::shard::STAMP_INDEX_MAX {
                    return Err(frame_error(
                        offset,
                        format!("log index {} leaves no room for write stamps", image.index),
                    ));
                }
                image.clock_ms = r.u64()? as i64;
                if version >= HEADER_VERSION_SINCE {
                    let checked = r.u32()?;
                    if checked != u64::from(version) {
                        return Err(frame_error(
                            offset,
                            format!("the header says format {checked}, the file {version}"),
                        ));
                    }
                }
            }
            KIND_DELETED if header_seen => {
                frames += 1;
                let count = r.u32()? as usize;
                for _ in 0..count {
                    let slot = r.slot()?;
                    let index = r.u64()?;
                    image.shards[shard_of_slot(slot, shard_count)].set_deleted_at(slot, index);
                }
                let remembered = if version >= 2 { r.u32()? as usize } else { 0 };
                for _ in 0..remembered {
                    let slot = r.slot()?;
                    let mark = r.u64()?;
                    let index = r.u64()?;
                    let shard = &mut image.shards[shard_of_slot(slot, shard_count)];
                    if !shard.remember(slot, mark, index) {
                        return Err(frame_error(
                            offset,
                            format!(
                                "slot {slot}: a deletion out of order, repeated or one too many"
                            ),
                        ));
                    }
                }
            }
            KIND_KEYS if header_seen => {
                frames += 1;
                while !r.done() {
                    let entry = decode_record(&mut r)?;
                    let shard =
                        &mut image.shards[shard_of_slot(key_slot(entry.key()), shard_count)];
                    if shard.peek(entry.key()).is_some() {
                        return Err(frame_error(offset, "a key listed twice"));
                    }
                    shard.insert(entry);
                    keys += 1;
                }
            }
            KIND_END if header_seen => {
                let declared_frames = r.u32()? as u32;
                let declared_keys = r.u64()?;
                if declared_frames != frames || declared_keys != keys || next != bytes.len() {
                    return Err(KvSnapshotError::EndCounts {
                        offset,
                        declared_frames,
                        declared_keys,
                        frames,
                        keys,
                        trailing_bytes: bytes.len() - next,
                    });
                }
                r.finish()?;
                for shard in &mut image.shards {
                    shard.applied_stamp = crate::shard::entry_end_stamp(image.index);
                }
                return Ok(image);
            }
            other => {
                return Err(frame_error(
                    offset,
                    format!("unexpected frame kind {other}"),
                ))
            }
        }
        r.finish()?;
        offset = next;
    }
}

fn read_frame(bytes: &[u8], offset: usize) -> Result<(u8, &[u8], usize), KvSnapshotError> {
    if bytes.len() - offset < FRAME_HEADER_BYTES {
        return Err(frame_error(offset, "truncated: no END frame"));
    }
    let kind = bytes[offset];
    let len = u32::from_be_bytes(bytes[offset + 1..offset + 5].try_into().expect("4")) as usize;
    let stored = u32::from_be_bytes(bytes[offset + 5..offset + 9].try_into().expect("4"));
    let start = offset + FRAME_HEADER_BYTES;
    if bytes.len() - start < len {
        return Err(frame_error(
            offset,
            format!("{len} bytes declared, {} left", bytes.len() - start),
        ));
    }
    let payload = &bytes[start..start + len];
    if frame_crc(kind, payload) != stored {
        return Err(KvSnapshotError::Checksum(offset));
    }
    Ok((kind, payload, start + len))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// The frame's offset, for errors.
    offset: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, reason: &str) -> KvSnapshotError {
        frame_error(self.offset, format!("{reason} at payload byte {}", self.at))
    }

    /// A slot number, refused past the last slot.
    fn slot(&mut self) -> Result<u16, KvSnapshotError> {
        let slot = u16::from_be_bytes(self.take(2)?.try_into().expect("2"));
        if slot as usize >= crate::slot::SLOTS {
            return Err(frame_error(self.offset, format!("slot {slot}")));
        }
        Ok(slot)
    }

    fn done(&self) -> bool {
        self.at == self.bytes.len()
    }

    fn finish(&self) -> Result<(), KvSnapshotError> {
        if self.done() {
            Ok(())
        } else {
            Err(self.error("trailing bytes"))
        }
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], KvSnapshotError> {
        if self.bytes.len() - self.at < len {
            return Err(self.error("truncated"));
        }
        let taken = &self.bytes[self.at..self.at + len];
        self.at += len;
        Ok(taken)
    }

    fn u32(&mut self) -> Result<u64, KvSnapshotError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4")) as u64)
    }

    fn u64(&mut self) -> Result<u64, KvSnapshotError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }

    fn varint(&mut self) -> Result<u64, KvSnapshotError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            value |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.error("varint too long"))
    }

    /// A count of items of at least one byte each.
    fn count(&mut self) -> Result<usize, KvSnapshotError> {
        let count = self.varint()?;
        if count > (self.bytes.len() - self.at) as u64 {
            return Err(self.error("count beyond the frame"));
        }
        Ok(count as usize)
    }

    fn bytes(&mut self) -> Result<&'a [u8], KvSnapshotError> {
        let len = self.count()?;
        self.take(len)
    }

    fn boxed(&mut self) -> Result<Bytes, KvSnapshotError> {
        Ok(self.bytes()?.into())
    }
}

fn decode_record(r: &mut Reader<'_>) -> Result<Entry, KvSnapshotError> {
    let encoding = r.take(1)?[0];
    let key = r.bytes()?;
    let expire_at_ms = r.varint()? as i64;
    let version = r.varint()?;
    let mut entry = match encoding {
        ENCODING_STRING => Entry::string(key, r.bytes()?, version),
        ENCODING_SMALL_HASH | ENCODING_HASH => {
            let count = r.count()?;
            let mut pairs = Vec::with_capacity(count);
            for _ in 0..count {
                pairs.push((r.boxed()?, r.boxed()?));
            }
            if pairs.is_empty() {
                return Err(r.error("an empty hash"));
            }
            // A field listed twice: a small hash would keep both (HLEN and
            // HGETALL would count it twice), a table one value of two.
            const TWICE: &str = "a hash field listed twice";
            let hash = if encoding == ENCODING_SMALL_HASH {
                let distinct = pairs
                    .iter()
                    .map(|(f, _)| &f[..])
                    .collect::<HashSet<_>>()
                    .len();
                if distinct != count {
                    return Err(r.error(TWICE));
                }
                Aggregate::SmallHash(pairs)
            } else {
                let table: HashMap<Bytes, Bytes> = pairs.into_iter().collect();
                if table.len() != count {
                    return Err(r.error(TWICE));
                }
                Aggregate::Hash(table)
            };
            Entry::aggregate(key, hash, version)
        }
        ENCODING_INT_SET => {
            let count = r.count()?;
            let mut members = Vec::with_capacity(count);
            for _ in 0..count {
                let z = r.varint()?;
                members.push(((z >> 1) as i64) ^ -((z & 1) as i64));
            }
            if members.is_empty() || !members.windows(2).all(|w| w[0] < w[1]) {
                return Err(r.error("an integer set not strictly ascending"));
            }
            Entry::aggregate(key, Aggregate::IntSet(members), version)
        }
        ENCODING_SET => {
            let count = r.count()?;
            let mut members = HashSet::with_capacity(count);
            for _ in 0..count {
                if !members.insert(r.boxed()?) {
                    return Err(r.error("a set member listed twice"));
                }
            }
            if members.is_empty() {
                return Err(r.error("an empty set"));
            }
            Entry::aggregate(key, Aggregate::Set(members), version)
        }
        other => return Err(r.error(&format!("unknown encoding {other}"))),
    };
    if expire_at_ms < 0 {
        return Err(r.error("a negative expiry"));
    }
    entry.expire_at_ms = expire_at_ms;
    Ok(entry)
}
