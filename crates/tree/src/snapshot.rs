//! Snapshots: a chunked, checksummed file written while service goes on
//! and loaded on every core.
//!
//! Writing never copies the tree. `DataTree::snapshot_begin` (apply side,
//! O(sessions + ACL lists)) fixes the snapshot's position and returns the
//! header; `DataTree::snapshot_chunk` (any thread holding a read view)
//! then encodes one arena segment at a time, advancing a cursor. Until the
//! cursor has passed it, a node about to change or go keeps its encoded
//! old version (copy-on-write per node, `SnapshotState::preserve`); nodes
//! created meanwhile take fresh ids above the snapshot's range. The apply
//! side waits at most one segment's encoding, and extra memory is bounded
//! by the nodes changed during the write.
//!
//! File (format 4): `KEELSNAP`, version, then frames `[kind u8][len u32]
//! [crc32 u32][payload]`, the CRC covering kind and payload:
//! HEADER (position, counts, sessions, ACL lists), one or more
//! NODES frames per arena segment (records carry their node ids), END
//! (frame and node counts: a truncated file is refused). Loading verifies
//! and decodes the segments in parallel, each worker building its segment
//! privately, then links children, the path index and the owner indexes
//! and checks the digest. A file that fails any check is refused whole,
//! with the offset of the bad frame.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use keel_jute::{Acl, JuteError, Reader, Record, Stat};

use crate::path;
use crate::store::{
    Arena, Blob, NodeId, PackedStat, Slot, FREE_ACL, NAME_BYTES_MAX, NIL, ROOT, SEGMENT_SLOTS,
    SEGMENT_SLOTS_LOG2,
};
use crate::tree::{
    acl_refs, combine_digest, content_digest, feed_content, fnv, legacy_content_digest, owner_kind,
    DataTree, OwnerKind, FNV_OFFSET,
};

const MAGIC: &[u8; 8] = b"KEELSNAP";
/// The format this Keel writes: format 3's frames without the proposal
/// dedup table, which consensus now keeps (in its snapshot envelope).
pub const FORMAT_VERSION: i32 = 4;
/// Format 4 whose END frame is followed by another state's part (Keel
/// KV's keyspace): a file of this version that ends at END is truncated.
/// The tree writes format 4; its owner marks the head (`mark_followed`)
/// when it will append a part.
pub const FOLLOWED_FORMAT_VERSION: i32 = 5;
/// Format 4 plus a dedup table in the header (read, the table skipped).
const DEDUP_FORMAT_VERSION: i32 = 3;
/// The previous, single-blob format: still read, never written.
const LEGACY_FORMAT_VERSION: i32 = 2;
const FILE_HEADER_BYTES: usize = 12;
const FRAME_HEADER_BYTES: usize = 9;
pub(crate) const KIND_HEADER: u8 = 1;
const KIND_NODES: u8 = 2;
const KIND_END: u8 = 3;
/// A NODES frame is closed once its payload passes this size.
pub const CHUNK_BYTES_TARGET: usize = 16 << 20;
/// Slots one `snapshot_chunk` call encodes (under the tree's read lock,
/// which an apply waits for): a few milliseconds of work.
pub const SNAPSHOT_SLOTS_PER_PART: u32 = 8192;
/// Largest record: a name, a 1 MiB value (the frame bound) and the fields.
const RECORD_BYTES_MAX: usize = NAME_BYTES_MAX + (1 << 20) + 128;
/// Largest frame payload a loader accepts.
pub const FRAME_BYTES_MAX: usize = CHUNK_BYTES_TARGET + RECORD_BYTES_MAX;
/// Largest HEADER frame (sessions, ACL lists).
const HEADER_FRAME_BYTES_MAX: usize = 1 << 30;
/// Most nodes a snapshot may declare (a corrupt count must not allocate).
pub const SNAPSHOT_NODES_MAX: usize = 1 << 31;
/// Most loader threads.
pub const LOAD_THREADS_MAX: usize = 64;
/// How far an ACL id may lie beyond the arena's slot count. Every list in
/// use is held by a node, freed ids are reused first and the arena never
/// shrinks, so ids stay below the most nodes the tree ever held, but for
/// a list interned just before its node's slot (a create that then failed).
const ACL_IDS_BEYOND_SLOTS: u64 = 1024;
/// Most distinct origins in a format 3 header's dedup table.
const ORIGINS_MAX: usize = 1 << 16;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("not a Keel snapshot (bad magic)")]
    BadMagic,
    #[error("snapshot format version {0} is not supported (this Keel reads 2 to 5)")]
    Version(i32),
    #[error("checksum mismatch in the frame at offset {offset}: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        offset: usize,
        stored: u32,
        computed: u32,
    },
    #[error("frame at offset {offset}: {reason}")]
    Frame { offset: usize, reason: String },
    #[error("snapshot is truncated or malformed: {0}")]
    Decode(#[from] JuteError),
    #[error("snapshot is inconsistent: {0}")]
    Inconsistent(String),
    /// Every record checked out, but the tree they build hashes to another
    /// digest than the header stores.
    #[error("snapshot is inconsistent: digest {computed:#x} != stored {stored:#x}")]
    Digest { computed: u64, stored: u64 },
    #[error("no snapshot is being written (the tree was replaced)")]
    NotRunning,
}

fn frame_error(offset: usize, reason: impl Into<String>) -> SnapshotError {
    SnapshotError::Frame {
        offset,
        reason: reason.into(),
    }
}

fn inconsistent(reason: impl Into<String>) -> SnapshotError {
    SnapshotError::Inconsistent(reason.into())
}

// ---------------------------------------------------------------------------
// Writing

/// The copy-on-write state of the snapshot being written.
#[derive(Debug)]
pub struct SnapshotState {
    /// Slots at the start: ids at or above it were created meanwhile.
    len: u32,
    /// Ids below it are written.
    cursor: AtomicU32,
    /// NODES frames written so far.
    frames: AtomicU32,
    node_count: u64,
    /// Encoded records of nodes changed before the cursor passed them.
    preimages: HashMap<NodeId, Vec<u8>>,
    preimage_bytes: usize,
    /// END written: the writer is done.
    finished: std::sync::atomic::AtomicBool,
}

impl Clone for SnapshotState {
    fn clone(&self) -> Self {
        SnapshotState {
            len: self.len,
            cursor: AtomicU32::new(self.cursor.load(Ordering::Acquire)),
            frames: AtomicU32::new(self.frames.load(Ordering::Acquire)),
            node_count: self.node_count,
            preimages: self.preimages.clone(),
            preimage_bytes: self.preimage_bytes,
            finished: std::sync::atomic::AtomicBool::new(self.finished.load(Ordering::Acquire)),
        }
    }
}

impl SnapshotState {
    /// Called before node `id` changes or goes.
    pub(crate) fn preserve(&mut self, id: NodeId, arena: &Arena) {
        if id >= self.len || id < self.cursor.load(Ordering::Acquire) {
            return;
        }
        if self.preimages.contains_key(&id) {
            return;
        }
        let mut record = Vec::with_capacity(64 + arena.get(id).blob.data_len());
        encode_record(id, arena.get(id), &mut record);
        self.preimage_bytes += record.len();
        self.preimages.insert(id, record);
    }

    /// Bytes kept for nodes changed during the write.
    pub fn preimage_bytes(&self) -> usize {
        self.preimage_bytes
    }
}

fn encode_record(id: NodeId, slot: &Slot, out: &mut Vec<u8>) {
    assert!(!slot.is_free(), "encoding free slot {id}");
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&slot.parent.to_be_bytes());
    out.extend_from_slice(&slot.acl.to_be_bytes());
    let s = &slot.stat;
    for value in [
        s.czxid,
        s.mzxid,
        s.pzxid,
        s.ctime,
        s.mtime,
        s.ephemeral_owner,
    ] {
        out.extend_from_slice(&value.to_be_bytes());
    }
    for value in [s.version, s.cversion, s.aversion] {
        out.extend_from_slice(&value.to_be_bytes());
    }
    let name = slot.blob.name_bytes();
    out.extend_from_slice(&(name.len() as u16).to_be_bytes());
    out.extend_from_slice(name);
    keel_jute::write_buffer(out, slot.blob.data());
}

/// Appends a frame: header, then the payload `fill` writes.
pub(crate) fn frame(out: &mut Vec<u8>, kind: u8, fill: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.push(kind);
    out.extend_from_slice(&[0; 8]);
    fill(out);
    let len = out.len() - start - FRAME_HEADER_BYTES;
    assert!(len <= HEADER_FRAME_BYTES_MAX, "frame of {len} bytes");
    out[start + 1..start + 5].copy_from_slice(&(len as u32).to_be_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[kind]);
    crc.update(&out[start + FRAME_HEADER_BYTES..]);
    let crc = crc.finalize();
    out[start + 5..start + 9].copy_from_slice(&crc.to_be_bytes());
}

impl DataTree {
    /// Starts a snapshot at the current position: returns the file header
    /// and HEADER frame. Nodes are then written by `snapshot_chunk`.
    pub fn snapshot_begin(&mut self) -> Vec<u8> {
        assert!(
            self.snapshot.is_none(),
            "a snapshot is already being written"
        );
        assert!(self.journal.is_none(), "snapshot inside a multi");
        let mut out = Vec::with_capacity(4096);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
        frame(&mut out, KIND_HEADER, |out| self.encode_header(out));
        self.snapshot = Some(SnapshotState {
            len: self.arena.len(),
            cursor: AtomicU32::new(0),
            frames: AtomicU32::new(0),
            node_count: self.node_count,
            preimages: HashMap::new(),
            preimage_bytes: 0,
            finished: std::sync::atomic::AtomicBool::new(false),
        });
        out
    }

    fn encode_header(&self, out: &mut Vec<u8>) {
        keel_jute::write_i64(out, self.applied_index as i64);
        keel_jute::write_i64(out, self.applied_term as i64);
        keel_jute::write_i64(out, self.last_zxid);
        keel_jute::write_i64(out, self.digest as i64);
        keel_jute::write_i64(out, self.node_count as i64);
        keel_jute::write_i64(out, self.arena.len() as i64);
        keel_jute::write_i32(out, self.sessions.len() as i32);
        for (session_id, timeout_ms) in &self.sessions {
            keel_jute::write_i64(out, *session_id);
            keel_jute::write_i32(out, *timeout_ms as i32);
        }
        let acls: Vec<(u32, &[u8])> = self.acls.live().collect();
        keel_jute::write_i32(out, acls.len() as i32);
        for (id, encoded) in acls {
            keel_jute::write_i32(out, id as i32);
            keel_jute::write_buffer(out, Some(encoded));
        }
    }

    /// Appends the NODES frames of the next SNAPSHOT_SLOTS_PER_PART slots
    /// (within one segment) or, once every slot is written, the END frame
    /// to `out`. Returns false after END. Takes
    /// `&self`: the writer holds a read view while the apply side waits.
    pub fn snapshot_chunk(&self, out: &mut Vec<u8>) -> Result<bool, SnapshotError> {
        let state = self.snapshot.as_ref().ok_or(SnapshotError::NotRunning)?;
        if state.finished.load(Ordering::Acquire) {
            return Err(SnapshotError::NotRunning);
        }
        let start = state.cursor.load(Ordering::Acquire);
        if start >= state.len {
            let frames = state.frames.load(Ordering::Acquire);
            frame(out, KIND_END, |out| {
                out.extend_from_slice(&frames.to_be_bytes());
                keel_jute::write_i64(out, state.node_count as i64);
            });
            state.finished.store(true, Ordering::Release);
            return Ok(false);
        }
        let segment = start >> SEGMENT_SLOTS_LOG2;
        let end = ((segment + 1) << SEGMENT_SLOTS_LOG2)
            .min(state.len)
            .min(start + SNAPSHOT_SLOTS_PER_PART);
        let torn = crate::planted::snapshot_torn();
        let mut id = start;
        while id < end || id == start {
            frame(out, KIND_NODES, |out| {
                out.extend_from_slice(&segment.to_be_bytes());
                let payload_start = out.len();
                while id < end && out.len() - payload_start < CHUNK_BYTES_TARGET {
                    match state.preimages.get(&id).filter(|_| !torn) {
                        Some(record) => out.extend_from_slice(record),
                        None => {
                            let slot = self.arena.get(id);
                            if !slot.is_free() {
                                encode_record(id, slot, out);
                            }
                        }
                    }
                    id += 1;
                }
            });
            state.frames.fetch_add(1, Ordering::AcqRel);
            if id >= end {
                break;
            }
        }
        state.cursor.store(end, Ordering::Release);
        Ok(true)
    }

    /// Ends the snapshot being written (done or abandoned): the copies
    /// kept for it are dropped.
    pub fn snapshot_end(&mut self) {
        self.snapshot = None;
    }

    /// Bytes kept by the running snapshot for nodes changed under it.
    pub fn snapshot_preimage_bytes(&self) -> usize {
        self.snapshot.as_ref().map_or(0, |s| s.preimage_bytes())
    }

    pub fn snapshot_running(&self) -> bool {
        self.snapshot.is_some()
    }
}

/// The whole snapshot of `tree` in one buffer (tests, the simulator, and
/// callers with no concurrent writes). The tree must not be writing one.
pub fn encode(tree: &mut DataTree, out: &mut Vec<u8>) {
    out.extend_from_slice(&tree.snapshot_begin());
    let result = (|| {
        while tree.snapshot_chunk(out)? {}
        Ok::<(), SnapshotError>(())
    })();
    tree.snapshot_end();
    result.expect("a snapshot of an unchanging tree encodes");
}

/// A copy of `tree` as a snapshot would restore it.
pub fn encode_copy(tree: &DataTree) -> Vec<u8> {
    let mut copy = tree.clone();
    let mut out = Vec::new();
    encode(&mut copy, &mut out);
    out
}

// ---------------------------------------------------------------------------
// Loading

/// The length of the tree's part at the front of `bytes`: a framed
/// snapshot ends with its END frame (what follows is another state's
/// part, e.g. the Keel KV keyspace); a format 2 file is all tree. Only
/// frame headers are read here; `load` checks the part.
pub fn part_len(bytes: &[u8]) -> Result<usize, SnapshotError> {
    if bytes.len() < FILE_HEADER_BYTES || &bytes[..MAGIC.len()] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let version = i32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version == LEGACY_FORMAT_VERSION {
        return Ok(bytes.len());
    }
    let mut offset = FILE_HEADER_BYTES;
    while bytes.len() - offset >= FRAME_HEADER_BYTES {
        let kind = bytes[offset];
        let len = u32::from_be_bytes(bytes[offset + 1..offset + 5].try_into().expect("4")) as usize;
        let end = (offset + FRAME_HEADER_BYTES).saturating_add(len);
        if end > bytes.len() {
            break;
        }
        offset = end;
        if kind == KIND_END {
            return Ok(offset);
        }
    }
    Err(frame_error(
        bytes.len(),
        "no END frame: the snapshot is truncated",
    ))
}

/// Marks the head `snapshot_begin` returned: another part will follow
/// the tree's END frame (format `FOLLOWED_FORMAT_VERSION`).
pub fn mark_followed(head: &mut [u8]) {
    assert!(head.len() >= FILE_HEADER_BYTES && &head[..MAGIC.len()] == MAGIC);
    assert_eq!(
        head[8..12],
        FORMAT_VERSION.to_be_bytes(),
        "a head this Keel wrote"
    );
    head[8..12].copy_from_slice(&FOLLOWED_FORMAT_VERSION.to_be_bytes());
}

/// Whether the file says another part follows its tree's END frame.
pub fn followed(bytes: &[u8]) -> Result<bool, SnapshotError> {
    if bytes.len() < FILE_HEADER_BYTES || &bytes[..MAGIC.len()] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let version = i32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
    Ok(version == FOLLOWED_FORMAT_VERSION)
}

/// Decodes and verifies a snapshot on one thread.
pub fn decode(bytes: &[u8]) -> Result<DataTree, SnapshotError> {
    load(bytes, 1)
}

/// Decodes and verifies a snapshot with up to `threads` loader threads.
pub fn load(bytes: &[u8], threads: usize) -> Result<DataTree, SnapshotError> {
    if bytes.len() < FILE_HEADER_BYTES || &bytes[..MAGIC.len()] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let version = i32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
    match version {
        FORMAT_VERSION | FOLLOWED_FORMAT_VERSION | DEDUP_FORMAT_VERSION => {
            load_framed(bytes, version, threads.clamp(1, LOAD_THREADS_MAX))
        }
        LEGACY_FORMAT_VERSION => legacy::decode(bytes),
        other => Err(SnapshotError::Version(other)),
    }
}

#[derive(Clone, Copy)]
struct FrameRef<'a> {
    offset: usize,
    kind: u8,
    payload: &'a [u8],
    crc: u32,
}

impl FrameRef<'_> {
    fn verify(&self) -> Result<(), SnapshotError> {
        let mut crc = crc32fast::Hasher::new();
        crc.update(&[self.kind]);
        crc.update(self.payload);
        let computed = crc.finalize();
        if computed != self.crc {
            return Err(SnapshotError::Checksum {
                offset: self.offset,
                stored: self.crc,
                computed,
            });
        }
        Ok(())
    }
}

/// Splits the file into frames, checking only their bounds.
fn frames(bytes: &[u8]) -> Result<Vec<FrameRef<'_>>, SnapshotError> {
    let mut offset = FILE_HEADER_BYTES;
    let mut found = Vec::new();
    while offset < bytes.len() {
        if bytes.len() - offset < FRAME_HEADER_BYTES {
            return Err(frame_error(offset, "truncated frame header"));
        }
        let kind = bytes[offset];
        let len = u32::from_be_bytes(bytes[offset + 1..offset + 5].try_into().expect("4")) as usize;
        let crc = u32::from_be_bytes(bytes[offset + 5..offset + 9].try_into().expect("4"));
        let max = if kind == KIND_HEADER {
            HEADER_FRAME_BYTES_MAX
        } else {
            FRAME_BYTES_MAX
        };
        if len > max {
            return Err(frame_error(offset, format!("length {len} exceeds {max}")));
        }
        let start = offset + FRAME_HEADER_BYTES;
        if bytes.len() - start < len {
            return Err(frame_error(
                offset,
                format!(
                    "truncated: {len} bytes declared, {} left",
                    bytes.len() - start
                ),
            ));
        }
        found.push(FrameRef {
            offset,
            kind,
            payload: &bytes[start..start + len],
            crc,
        });
        offset = start + len;
    }
    Ok(found)
}

struct Header {
    applied_index: u64,
    applied_term: u64,
    last_zxid: i64,
    digest: u64,
    node_count: u64,
    slot_len: u32,
    sessions: Vec<(i64, u32)>,
    acls: Vec<(u32, Vec<u8>)>,
}

fn read_count(r: &mut Reader<'_>, max: usize, what: &str) -> Result<usize, SnapshotError> {
    let count = r.read_i32()?;
    if count < 0 || count as usize > max {
        return Err(inconsistent(format!("{what} count {count} out of range")));
    }
    Ok(count as usize)
}

fn read_header(frame: &FrameRef<'_>, version: i32) -> Result<Header, SnapshotError> {
    frame.verify()?;
    let mut r = Reader::new(frame.payload);
    let applied_index = r.read_i64()? as u64;
    let applied_term = r.read_i64()? as u64;
    let last_zxid = r.read_i64()?;
    let digest = r.read_i64()? as u64;
    let node_count = r.read_i64()?;
    let slot_len = r.read_i64()?;
    if node_count < 1
        || node_count as usize > SNAPSHOT_NODES_MAX
        || slot_len < node_count
        || slot_len as usize > crate::store::SLOTS_MAX
    {
        return Err(frame_error(
            frame.offset,
            format!("node count {node_count} / slots {slot_len}"),
        ));
    }
    let most = r.remaining() / 12;
    let count = read_count(&mut r, most, "session")?;
    let mut sessions = Vec::with_capacity(count);
    for _ in 0..count {
        sessions.push((r.read_i64()?, r.read_i32()? as u32));
    }
    if version == DEDUP_FORMAT_VERSION {
        let count = read_count(&mut r, ORIGINS_MAX, "origin")?;
        for _ in 0..count * 2 {
            r.read_i64()?;
        }
    }
    let most = r.remaining() / 8;
    let count = read_count(&mut r, most, "ACL list")?;
    let mut acls = Vec::with_capacity(count);
    for _ in 0..count {
        let id = r.read_i32()? as u32;
        let encoded = r.read_buffer()?.unwrap_or_default();
        acls.push((id, encoded));
    }
    if r.remaining() != 0 {
        return Err(frame_error(frame.offset, "trailing bytes in the header"));
    }
    Ok(Header {
        applied_index,
        applied_term,
        last_zxid,
        digest,
        node_count: node_count as u64,
        slot_len: slot_len as u32,
        sessions,
        acls,
    })
}

/// One segment's frames, decoded by one loader thread.
struct SegmentTask<'a> {
    segment: u32,
    frames: Vec<FrameRef<'a>>,
}

fn plan<'a>(frames: &[FrameRef<'a>], slot_len: u32) -> Result<Vec<SegmentTask<'a>>, SnapshotError> {
    let segments = (slot_len as usize).div_ceil(SEGMENT_SLOTS);
    let mut tasks: Vec<SegmentTask<'_>> = Vec::with_capacity(segments);
    for frame in frames {
        if frame.kind != KIND_NODES {
            return Err(frame_error(
                frame.offset,
                format!("unexpected frame kind {}", frame.kind),
            ));
        }
        if frame.payload.len() < 4 {
            return Err(frame_error(frame.offset, "NODES frame without a segment"));
        }
        let segment = u32::from_be_bytes(frame.payload[..4].try_into().expect("4"));
        match tasks.last_mut() {
            Some(task) if task.segment == segment => task.frames.push(*frame),
            last => {
                let expected = last.map_or(0, |t| t.segment + 1);
                if segment != expected || segment as usize >= segments {
                    return Err(frame_error(
                        frame.offset,
                        format!("segment {segment} where {expected} was due"),
                    ));
                }
                tasks.push(SegmentTask {
                    segment,
                    frames: vec![*frame],
                });
            }
        }
    }
    if tasks.len() != segments {
        return Err(inconsistent(format!(
            "{} of {segments} segments present",
            tasks.len()
        )));
    }
    Ok(tasks)
}

/// Decodes one segment into its slots (free where no record is).
fn decode_segment(task: &SegmentTask<'_>, slot_len: u32) -> Result<Vec<Slot>, SnapshotError> {
    let first = task.segment << SEGMENT_SLOTS_LOG2;
    let end = (first as usize + SEGMENT_SLOTS).min(slot_len as usize) as u32;
    let mut slots: Vec<Slot> = (first..end).map(|_| Slot::free()).collect();
    let mut next = first;
    for frame in &task.frames {
        frame.verify()?;
        let mut r = Reader::new(&frame.payload[4..]);
        while r.remaining() > 0 {
            let (id, slot) = decode_record(&mut r)
                .map_err(|e| frame_error(frame.offset, format!("record: {e}")))?;
            if id < next || id >= end || slot.parent >= slot_len && slot.parent != NIL {
                return Err(frame_error(
                    frame.offset,
                    format!("node id {id} out of order or range"),
                ));
            }
            slots[(id - first) as usize] = slot;
            next = id + 1;
        }
    }
    Ok(slots)
}

fn decode_record(r: &mut Reader<'_>) -> Result<(NodeId, Slot), SnapshotError> {
    let head = r.read_bytes(12)?;
    let word = |i: usize| u32::from_be_bytes(head[i * 4..i * 4 + 4].try_into().expect("4"));
    let (id, parent, acl) = (word(0), word(1), word(2));
    let stat = PackedStat {
        czxid: r.read_i64()?,
        mzxid: r.read_i64()?,
        pzxid: r.read_i64()?,
        ctime: r.read_i64()?,
        mtime: r.read_i64()?,
        ephemeral_owner: r.read_i64()?,
        version: r.read_i32()?,
        cversion: r.read_i32()?,
        aversion: r.read_i32()?,
    };
    let name_len = u16::from_be_bytes(r.read_bytes(2)?.try_into().expect("2")) as usize;
    let name = std::str::from_utf8(r.read_bytes(name_len)?)
        .map_err(|_| inconsistent(format!("node {id}: name is not UTF-8")))?;
    let data = match r.read_length()? {
        None => None,
        Some(len) if len <= RECORD_BYTES_MAX => Some(r.read_bytes(len)?),
        Some(len) => return Err(inconsistent(format!("node {id}: {len} bytes of data"))),
    };
    let root = id == ROOT;
    let name_ok = if root {
        name.is_empty() && parent == NIL
    } else {
        !name.is_empty() && !name.contains('/') && parent != NIL && parent != id
    };
    if !name_ok || acl == FREE_ACL {
        return Err(inconsistent(format!("node {id}: bad name, parent or ACL")));
    }
    let slot = Slot::leaf(stat, parent, acl, Blob::new(name, data));
    Ok((id, slot))
}

fn load_framed(bytes: &[u8], version: i32, threads: usize) -> Result<DataTree, SnapshotError> {
    let frames = frames(bytes)?;
    let (Some(first), Some(last)) = (frames.first(), frames.last()) else {
        return Err(inconsistent("no frames"));
    };
    if first.kind != KIND_HEADER {
        return Err(frame_error(
            first.offset,
            "the first frame is not the header",
        ));
    }
    if last.kind != KIND_END || frames.len() < 2 {
        return Err(frame_error(
            bytes.len(),
            "no END frame: the snapshot is truncated",
        ));
    }
    let header = read_header(first, version)?;
    last.verify()?;
    let node_frames = &frames[1..frames.len() - 1];
    check_end(last, node_frames.len(), header.node_count)?;
    let tasks = plan(node_frames, header.slot_len)?;
    let mut tree = DataTree::bare();
    let segments = decode_parallel(&tasks, header.slot_len, threads)?;
    tree.arena = Arena::from_segments(segments);
    build(tree, header, version, threads)
}

fn check_end(frame: &FrameRef<'_>, frames: usize, node_count: u64) -> Result<(), SnapshotError> {
    let mut r = Reader::new(frame.payload);
    let declared = u32::from_be_bytes(r.read_bytes(4)?.try_into().expect("4")) as usize;
    let nodes = r.read_i64()? as u64;
    if declared != frames || nodes != node_count || r.remaining() != 0 {
        return Err(frame_error(
            frame.offset,
            format!(
                "END declares {declared} frames / {nodes} nodes, found {frames} / {node_count}"
            ),
        ));
    }
    Ok(())
}

/// A worker's segments: (task index, slots).
type DecodedSegments = Vec<(usize, Vec<Slot>)>;

/// Every worker takes the next segment, verifies and decodes it on its own.
fn decode_parallel(
    tasks: &[SegmentTask<'_>],
    slot_len: u32,
    threads: usize,
) -> Result<Vec<Vec<Slot>>, SnapshotError> {
    let next = AtomicUsize::new(0);
    let worker = || {
        let mut done = Vec::new();
        loop {
            let task_index = next.fetch_add(1, Ordering::Relaxed);
            let Some(task) = tasks.get(task_index) else {
                return Ok(done);
            };
            done.push((task_index, decode_segment(task, slot_len)?));
        }
    };
    let results: Vec<Result<DecodedSegments, SnapshotError>> = if threads <= 1 {
        vec![worker()]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads).map(|_| scope.spawn(worker)).collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a loader thread panicked"))
                .collect()
        })
    };
    let mut segments: Vec<Option<Vec<Slot>>> = (0..tasks.len()).map(|_| None).collect();
    for result in results {
        for (index, slots) in result? {
            segments[index] = Some(slots);
        }
    }
    Ok(segments
        .into_iter()
        .map(|s| s.expect("every segment decoded"))
        .collect())
}

/// Links a loaded arena into a tree and checks it against the header.
fn build(
    mut tree: DataTree,
    header: Header,
    version: i32,
    threads: usize,
) -> Result<DataTree, SnapshotError> {
    tree.applied_index = header.applied_index;
    tree.applied_term = header.applied_term;
    tree.last_zxid = header.last_zxid;
    for (session_id, timeout_ms) in header.sessions {
        if tree.sessions.insert(session_id, timeout_ms).is_some() {
            return Err(inconsistent(format!(
                "session {session_id:#x} listed twice"
            )));
        }
    }
    for (id, encoded) in &header.acls {
        // The table is indexed by id: an id far beyond what the tree can
        // have used would allocate GiBs for a corrupt (or forged) header.
        if u64::from(*id) >= u64::from(header.slot_len) + ACL_IDS_BEYOND_SLOTS {
            return Err(inconsistent(format!(
                "ACL id {id} beyond the tree's {} slots",
                header.slot_len
            )));
        }
        tree.acls.load(*id, encoded).map_err(inconsistent)?;
    }
    tree.acls
        .set_refs(&acl_refs(&tree.arena))
        .map_err(inconsistent)?;
    if tree.arena.is_empty() || tree.arena.get(ROOT).is_free() {
        return Err(inconsistent("no root"));
    }
    link_children(&mut tree, threads)?;
    tree.index.build(&tree.arena, threads);
    // Allocated last, so that freeing it leaves no hole under the tree.
    let legacy = version == DEDUP_FORMAT_VERSION;
    let contents = content_digests(&tree.arena, threads, legacy);
    walk(&mut tree, &contents)?;
    if tree.node_count != header.node_count {
        return Err(inconsistent(format!(
            "{} nodes reachable, {} declared",
            tree.node_count, header.node_count
        )));
    }
    if tree.digest != header.digest {
        return Err(SnapshotError::Digest {
            computed: tree.digest,
            stored: header.digest,
        });
    }
    if legacy {
        // Verified with format 3's content hash; kept from now on in this
        // Keel's (one pass over the nodes, for an old file only).
        tree.digest = tree.recomputed_digest();
    }
    tree.quota_root = tree.resolve(crate::quota::QUOTA_ROOT);
    Ok(tree)
}

/// Children lists from parent links: counted, filled, sorted by name;
/// the same name twice under one parent is refused.
fn link_children(tree: &mut DataTree, threads: usize) -> Result<(), SnapshotError> {
    let len = tree.arena.len() as usize;
    let mut counts = vec![0u32; len + 1];
    for (id, slot) in tree.arena.iter() {
        if slot.is_free() || id == ROOT {
            continue;
        }
        if tree.arena.get(slot.parent).is_free() {
            return Err(inconsistent(format!("node {id} has a missing parent")));
        }
        counts[slot.parent as usize + 1] += 1;
    }
    for i in 1..counts.len() {
        counts[i] += counts[i - 1];
    }
    let mut fill = counts.clone();
    let mut flat = vec![NIL; counts[len] as usize];
    for (id, slot) in tree.arena.iter() {
        if !slot.is_free() && id != ROOT {
            let at = &mut fill[slot.parent as usize];
            flat[*at as usize] = id;
            *at += 1;
        }
    }
    sort_children(&tree.arena, &counts, &mut flat, threads)?;
    for parent in 0..len {
        let children = &flat[counts[parent] as usize..counts[parent + 1] as usize];
        if !children.is_empty() {
            tree.arena.set_children(parent as NodeId, children);
        }
    }
    Ok(())
}

/// Every slot's content digest (0 for free slots), hashed on `threads`
/// workers over disjoint id ranges.
fn content_digests(arena: &Arena, threads: usize, legacy: bool) -> Vec<u64> {
    let mut contents = vec![0u64; arena.len() as usize];
    let digest = |first: usize, part: &mut [u64]| {
        for (offset, value) in part.iter_mut().enumerate() {
            let slot = arena.get((first + offset) as NodeId);
            if !slot.is_free() {
                *value = if legacy {
                    legacy_content_digest(slot)
                } else {
                    content_digest(slot)
                };
            }
        }
    };
    let per_thread = contents.len().div_ceil(threads.max(1)).max(1);
    if threads <= 1 {
        digest(0, &mut contents);
    } else {
        std::thread::scope(|scope| {
            for (part, chunk) in contents.chunks_mut(per_thread).enumerate() {
                let digest = &digest;
                scope.spawn(move || digest(part * per_thread, chunk));
            }
        });
    }
    contents
}

/// Sorts every parent's run of `flat` (bounded by `counts`) by name, on
/// `threads` workers with disjoint parent ranges; a name's first 8 bytes
/// are its sort key (names hold no NUL, so zero padding orders right), the
/// full names break ties.
fn sort_children(
    arena: &Arena,
    counts: &[u32],
    flat: &mut [NodeId],
    threads: usize,
) -> Result<(), SnapshotError> {
    let parents = counts.len() - 1;
    let total = flat.len();
    let per_thread = total.div_ceil(threads.max(1)).max(1);
    // Parent ranges of about equal child counts.
    let mut bounds = vec![0usize];
    for parent in 0..parents {
        if counts[parent + 1] as usize >= bounds.len() * per_thread && bounds.len() < threads {
            bounds.push(parent + 1);
        }
    }
    bounds.push(parents);
    let mut pieces = Vec::new();
    let mut rest = flat;
    let mut consumed = 0usize;
    for range in bounds.windows(2) {
        let end = counts[range[1]] as usize;
        let (piece, tail) = rest.split_at_mut(end - consumed);
        pieces.push((range[0], range[1], piece, consumed));
        rest = tail;
        consumed = end;
    }
    let sort_piece = |first: usize, last: usize, piece: &mut [NodeId], base: usize| {
        let mut keyed: Vec<(u64, NodeId)> = Vec::new();
        for parent in first..last {
            let from = counts[parent] as usize - base;
            let to = counts[parent + 1] as usize - base;
            if to - from >= 2 {
                sort_one(arena, parent, &mut piece[from..to], &mut keyed)?;
            }
        }
        Ok::<(), SnapshotError>(())
    };
    if pieces.len() == 1 {
        let (first, last, piece, base) = pieces.pop().expect("one piece");
        return sort_piece(first, last, piece, base);
    }
    let results: Vec<Result<(), SnapshotError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = pieces
            .into_iter()
            .map(|(first, last, piece, base)| {
                let sort_piece = &sort_piece;
                scope.spawn(move || sort_piece(first, last, piece, base))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a sorting thread panicked"))
            .collect()
    });
    results.into_iter().collect()
}

fn sort_one(
    arena: &Arena,
    parent: usize,
    children: &mut [NodeId],
    keyed: &mut Vec<(u64, NodeId)>,
) -> Result<(), SnapshotError> {
    let name = |id: NodeId| arena.get(id).blob.name_bytes();
    keyed.clear();
    keyed.extend(children.iter().map(|id| {
        let mut prefix = [0u8; 8];
        let bytes = name(*id);
        let n = bytes.len().min(8);
        prefix[..n].copy_from_slice(&bytes[..n]);
        (u64::from_be_bytes(prefix), *id)
    }));
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| name(a.1).cmp(name(b.1))));
    for pair in keyed.windows(2) {
        if pair[0].0 == pair[1].0 && name(pair[0].1) == name(pair[1].1) {
            return Err(inconsistent(format!(
                "node {parent} has two children named alike"
            )));
        }
    }
    for (slot, (_, id)) in children.iter_mut().zip(keyed.iter()) {
        *slot = *id;
    }
    Ok(())
}

/// Walks the tree from the root: every live node must be reached once
/// (no cycle, no orphan); computes the digest, data size, memory, path
/// index and owner indexes on the way.
fn walk(tree: &mut DataTree, contents: &[u64]) -> Result<(), SnapshotError> {
    // (id, FNV state of its path, path length)
    let root_hash = fnv(FNV_OFFSET, b"/");
    let mut level: Vec<(NodeId, u64, u64)> = vec![(ROOT, root_hash, 1)];
    let mut count = 0u64;
    let mut ephemeral_parents = Vec::new();
    while !level.is_empty() {
        let mut next = Vec::new();
        for (id, hash, path_len) in level {
            count += 1;
            if count > tree.arena.len() as u64 {
                return Err(inconsistent("the parent links form a cycle"));
            }
            let slot = tree.arena.get(id);
            tree.digest = tree
                .digest
                .wrapping_add(combine_digest(hash, contents[id as usize]));
            tree.data_size += path_len + slot.blob.data_len() as u64;
            tree.heap_bytes += (slot.blob.heap_bytes() + tree.arena.children_heap_bytes(id)) as u64;
            let owner = slot.stat.ephemeral_owner;
            match owner_kind(owner) {
                OwnerKind::Persistent => {}
                OwnerKind::Container => {
                    tree.containers.insert(id);
                }
                OwnerKind::Ttl(_) => {
                    tree.ttls.insert(id);
                }
                OwnerKind::Ephemeral(session) => {
                    if !slot.is_leaf() {
                        ephemeral_parents.push(id);
                    }
                    tree.ephemerals.entry(session).or_default().insert(id);
                }
            }
            let prefix = if id == ROOT {
                FNV_OFFSET
            } else {
                fnv(hash, b"")
            };
            for child in tree.arena.children(id).iter() {
                let name = tree.arena.get(child).blob.name_bytes();
                let child_hash = fnv(fnv(prefix, b"/"), name);
                let child_len = if id == ROOT { 1 } else { path_len + 1 } + name.len() as u64;
                next.push((child, child_hash, child_len));
            }
        }
        level = next;
    }
    // apply never gives an ephemeral children, and relies on it: deleting a
    // child or closing the owner's session would hit an assertion.
    if let Some(id) = ephemeral_parents.first() {
        return Err(inconsistent(format!(
            "ephemeral {} has children",
            tree.path_of(*id)
        )));
    }
    let live = tree.arena.iter().filter(|(_, s)| !s.is_free()).count() as u64;
    if live != count {
        return Err(inconsistent(format!(
            "{} nodes unreachable from the root",
            live - count
        )));
    }
    tree.node_count = count;
    Ok(())
}

/// Format 2: one CRC over one blob of (path, data, ACL, Stat) records.
mod legacy {
    use super::*;

    const CRC_BYTES: usize = 4;

    pub(super) fn decode(bytes: &[u8]) -> Result<DataTree, SnapshotError> {
        let (body, trailer) = bytes.split_at(bytes.len() - CRC_BYTES);
        let stored = u32::from_be_bytes(trailer.try_into().expect("4 bytes"));
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(SnapshotError::Checksum {
                offset: 0,
                stored,
                computed,
            });
        }
        let mut r = Reader::new(&body[FILE_HEADER_BYTES..]);
        let mut tree = DataTree::new();
        tree.applied_index = r.read_i64()? as u64;
        tree.applied_term = r.read_i64()? as u64;
        tree.last_zxid = r.read_i64()?;
        let digest = r.read_i64()? as u64;
        let most = r.remaining() / 12;
        let count = read_count(&mut r, most, "session")?;
        for _ in 0..count {
            let session_id = r.read_i64()?;
            tree.sessions.insert(session_id, r.read_i32()? as u32);
        }
        // The dedup table, kept by consensus since format 4: skipped.
        let count = read_count(&mut r, 256, "origin")?;
        for _ in 0..count * 2 {
            r.read_i64()?;
        }
        let count = r.read_i64()?;
        if count < 1 || count as usize > SNAPSHOT_NODES_MAX || count as usize > r.remaining() {
            return Err(inconsistent(format!("node count {count}")));
        }
        let mut records = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let node_path = r.read_string()?;
            let data = r.read_buffer()?;
            let acl_len = read_count(&mut r, crate::acl::ACL_ENTRIES_MAX, "ACL entry")?;
            let mut acl = Vec::with_capacity(acl_len);
            for _ in 0..acl_len {
                acl.push(Acl::read(&mut r)?);
            }
            records.push((node_path, data, acl, Stat::read(&mut r)?));
        }
        if r.remaining() != 0 {
            return Err(inconsistent(format!("{} trailing bytes", r.remaining())));
        }
        // Parents sort before their children.
        records.sort_by(|a, b| a.0.cmp(&b.0));
        let mut computed = 0u64;
        for (node_path, data, acl, stat) in records {
            computed = computed.wrapping_add(v2_digest(&node_path, data.as_deref(), &stat));
            place(&mut tree, &node_path, data, &acl, &stat)?;
        }
        if computed != digest {
            return Err(SnapshotError::Digest {
                computed,
                stored: digest,
            });
        }
        tree.verify().map_err(inconsistent)?;
        Ok(tree)
    }

    /// Format 2's node digest: FNV-1a over path, 0xff, then the content.
    fn v2_digest(node_path: &str, data: Option<&[u8]>, stat: &Stat) -> u64 {
        let hash = fnv(fnv(FNV_OFFSET, node_path.as_bytes()), &[0xff]);
        feed_content(hash, data, &packed(stat))
    }

    fn packed(stat: &Stat) -> PackedStat {
        PackedStat {
            czxid: stat.czxid,
            mzxid: stat.mzxid,
            pzxid: stat.pzxid,
            ctime: stat.ctime,
            mtime: stat.mtime,
            ephemeral_owner: stat.ephemeral_owner,
            version: stat.version,
            cversion: stat.cversion,
            aversion: stat.aversion,
        }
    }

    fn place(
        tree: &mut DataTree,
        node_path: &str,
        data: Option<Vec<u8>>,
        acl: &[Acl],
        stat: &Stat,
    ) -> Result<(), SnapshotError> {
        let packed = packed(stat);
        if let Some(id) = tree.resolve(node_path).filter(|_| !node_path.is_empty()) {
            // The system nodes exist already: take the stored version.
            if packed.ephemeral_owner != tree.slot(id).stat.ephemeral_owner {
                return Err(inconsistent(format!(
                    "system node {node_path} has an owner"
                )));
            }
            let acl_id = tree.acls.intern(acl);
            tree.update(id, |s| *s = packed, Some(data.as_deref()), Some(acl_id));
            return Ok(());
        }
        if tree.resolve(node_path).is_some() {
            return Err(inconsistent(format!("duplicate path {node_path:?}")));
        }
        let (parent, name) =
            path::split(node_path).ok_or_else(|| inconsistent(format!("bad path {node_path}")))?;
        let parent = tree
            .resolve(path::parent_key(parent))
            .ok_or_else(|| inconsistent(format!("orphan {node_path}")))?;
        if name.is_empty()
            || matches!(
                owner_kind(tree.slot(parent).stat.ephemeral_owner),
                OwnerKind::Ephemeral(_)
            )
        {
            return Err(inconsistent(format!("bad node {node_path}")));
        }
        if name.len() > NAME_BYTES_MAX || name.contains('\0') {
            return Err(inconsistent(format!("bad node {node_path}")));
        }
        let acl_id = tree.acls.intern(acl);
        tree.link(parent, name, packed, data.as_deref(), acl_id);
        Ok(())
    }
}
