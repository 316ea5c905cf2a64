//! The compact storage under the tree: node slots in a segmented arena
//! addressed by a u32 id, each child's name stored once (in its own slot,
//! beside its data), a path index keyed by (parent id, name), and ACL lists
//! interned once and referenced by id. The byte budget is in ARCHITECTURE.md
//! ("The data tree in memory").

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher as _};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use keel_jute::{Acl, Reader, Record};
use thin_vec::ThinVec;

/// A node's address in the arena.
pub type NodeId = u32;
/// "No node": the root's parent, an empty link.
pub const NIL: NodeId = u32::MAX;
/// The root is always slot 0.
pub const ROOT: NodeId = 0;
/// Slots per arena segment: an arena grows a segment at a time (no large
/// reallocation, so no stall), and a snapshot chunk is one segment.
pub const SEGMENT_SLOTS: usize = 1 << SEGMENT_SLOTS_LOG2;
pub const SEGMENT_SLOTS_LOG2: u32 = 16;
/// Most slots an arena may hold: ids stay below NIL and FREE_ACL.
pub const SLOTS_MAX: usize = (u32::MAX - 2) as usize;
/// The ACL id of a free slot.
pub const FREE_ACL: u32 = u32::MAX;
/// Path index shards: a shard resizes alone, so growing the index never
/// rehashes more than 1/INDEX_SHARDS of the nodes at once.
pub const INDEX_SHARDS: usize = 256;
/// Longest child name: a path fits 64 KiB (crate::path::PATH_BYTES_MAX).
pub const NAME_BYTES_MAX: usize = u16::MAX as usize;
/// A parent with more children than this keeps them in chunks
/// (`Chunked`): in one sorted vector, a child whose name sorts in the
/// middle moves every id after it (at a million children, ~85 µs per
/// create, on every replica's apply).
pub const CHILDREN_FLAT_MAX: usize = 4096;
/// A chunked parent goes back to one vector below this many children
/// (half of CHILDREN_FLAT_MAX: a parent hovering at the bound does not
/// convert on every create and delete).
pub const CHILDREN_CHUNKED_MIN: usize = CHILDREN_FLAT_MAX / 2;
/// A chunk of a chunked parent's children splits in two at this many ids
/// (an insert moves at most this many; CHILDREN_FLAT_MAX / CHILDREN_CHUNK_MAX
/// chunks make a converted list).
pub const CHILDREN_CHUNK_MAX: usize = 1024;
/// The one id a chunked parent's own vector holds: its children are in
/// `Arena::chunked` (NIL is never a child).
const CHUNKED_MARK: NodeId = NIL;
/// Bytes of encoded child lists the arena keeps for getChildren
/// (`ChildListCache`): a list that would pass it empties the cache first.
pub const CHILD_LIST_CACHE_BYTES_MAX: usize = 8 << 20;
/// Most child lists kept at once (past it, the cache empties too).
pub const CHILD_LIST_CACHE_LISTS_MAX: usize = 4096;
/// Longest encoded child list kept (a wider parent is encoded per read).
pub const CHILD_LIST_CACHE_ENTRY_BYTES_MAX: usize = 1 << 20;
/// Fewest children a kept list has: a leaf's or an only child's list is
/// cheaper to encode than to look up.
pub const CHILD_LIST_CACHE_CHILDREN_MIN: usize = 2;

/// The persisted Stat fields of a node, packed (data_length and
/// num_children are derived from the blob and the child list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PackedStat {
    pub czxid: i64,
    pub mzxid: i64,
    pub pzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub ephemeral_owner: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
}

/// A node's name and data in one allocation:
/// `[has_data u8][name_len u16 LE][name][data]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Blob(Box<[u8]>);

const BLOB_HEADER_BYTES: usize = 3;

impl Blob {
    pub fn new(name: &str, data: Option<&[u8]>) -> Blob {
        assert!(name.len() <= NAME_BYTES_MAX, "name of {} bytes", name.len());
        let data_len = data.map_or(0, |d| d.len());
        let mut bytes = Vec::with_capacity(BLOB_HEADER_BYTES + name.len() + data_len);
        bytes.push(data.is_some() as u8);
        bytes.extend_from_slice(&(name.len() as u16).to_le_bytes());
        bytes.extend_from_slice(name.as_bytes());
        if let Some(data) = data {
            bytes.extend_from_slice(data);
        }
        Blob(bytes.into_boxed_slice())
    }

    fn name_len(&self) -> usize {
        u16::from_le_bytes([self.0[1], self.0[2]]) as usize
    }

    pub fn name_bytes(&self) -> &[u8] {
        &self.0[BLOB_HEADER_BYTES..BLOB_HEADER_BYTES + self.name_len()]
    }

    pub fn name(&self) -> &str {
        std::str::from_utf8(self.name_bytes()).expect("names are stored from &str")
    }

    pub fn data(&self) -> Option<&[u8]> {
        if self.0[0] == 0 {
            return None;
        }
        Some(&self.0[BLOB_HEADER_BYTES + self.name_len()..])
    }

    pub fn data_len(&self) -> usize {
        self.0.len() - BLOB_HEADER_BYTES - self.name_len()
    }

    /// The same name with other data.
    pub fn with_data(&self, data: Option<&[u8]>) -> Blob {
        Blob::new(self.name(), data)
    }

    /// Heap bytes as the allocator rounds them (16-byte classes plus an
    /// 8-byte header, as glibc's malloc).
    pub fn heap_bytes(&self) -> usize {
        alloc_bytes(self.0.len())
    }
}

/// What malloc uses for a request of `len` bytes (0 = no allocation).
pub fn alloc_bytes(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (len + 8).div_ceil(16).max(2) * 16
    }
}

/// One node. A free slot has `acl == FREE_ACL` and an empty blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub stat: PackedStat,
    pub parent: NodeId,
    pub acl: u32,
    pub blob: Blob,
    /// Child ids sorted by name, or CHUNKED_MARK alone when the children
    /// are in `Arena::chunked`: read them through `Arena::children`.
    children: ThinVec<NodeId>,
}

impl Slot {
    /// A node without children.
    pub fn leaf(stat: PackedStat, parent: NodeId, acl: u32, blob: Blob) -> Slot {
        Slot {
            stat,
            parent,
            acl,
            blob,
            children: ThinVec::new(),
        }
    }

    pub fn free() -> Slot {
        Slot::leaf(PackedStat::default(), NIL, FREE_ACL, Blob(Box::new([])))
    }

    pub fn is_free(&self) -> bool {
        self.acl == FREE_ACL
    }

    /// No children (of either form: a chunked list is never empty).
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }

    fn is_chunked(&self) -> bool {
        self.children.first() == Some(&CHUNKED_MARK)
    }

    /// Heap bytes of the slot's own child vector (a chunked parent's
    /// chunks are counted by `Arena::children_heap_bytes`).
    pub fn children_heap_bytes(&self) -> usize {
        if self.children.capacity() == 0 {
            0
        } else {
            alloc_bytes(16 + 4 * self.children.capacity())
        }
    }
}

/// A wide parent's children, sorted by name, in chunks of fewer than
/// CHILDREN_CHUNK_MAX ids (never empty): an insert or removal moves ids
/// within one chunk and shifts the chunks' start offsets, never the whole
/// list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunked {
    chunks: Vec<Vec<NodeId>>,
    /// Children in the chunks before each chunk (same length as `chunks`).
    starts: Vec<u32>,
    len: usize,
    /// The chunks' heap bytes, kept as they change (`heap_bytes` is read
    /// on every create and delete under the parent).
    chunk_bytes: usize,
}

impl Chunked {
    pub(crate) fn from_sorted(ids: &[NodeId]) -> Chunked {
        assert!(!ids.is_empty(), "a chunked list is never empty");
        let chunks: Vec<Vec<NodeId>> = ids
            .chunks(CHILDREN_CHUNK_MAX / 2)
            .map(<[NodeId]>::to_vec)
            .collect();
        let chunk_bytes = chunks.iter().map(chunk_heap_bytes).sum();
        let mut chunked = Chunked {
            starts: vec![0; chunks.len()],
            chunks,
            len: ids.len(),
            chunk_bytes,
        };
        chunked.restart(0);
        chunked
    }

    /// Recomputes the start offsets of chunk `from` on.
    fn restart(&mut self, from: usize) {
        let mut start = if from == 0 {
            0
        } else {
            self.starts[from - 1] as usize + self.chunks[from - 1].len()
        };
        for (chunk, slot) in self.chunks[from..].iter().zip(&mut self.starts[from..]) {
            *slot = u32::try_from(start).expect("children fit u32");
            start += chunk.len();
        }
        assert_eq!(start, self.len, "chunk starts disagree with the length");
    }

    /// (chunk, offset) of position `index`; `index == len` is the end of
    /// the last chunk.
    fn locate(&self, index: usize) -> (usize, usize) {
        assert!(index <= self.len, "position {index} past {}", self.len);
        let chunk = self
            .starts
            .partition_point(|start| *start as usize <= index)
            - 1;
        (chunk, index - self.starts[chunk] as usize)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, index: usize) -> NodeId {
        assert!(index < self.len, "child {index} of {}", self.len);
        let (chunk, offset) = self.locate(index);
        self.chunks[chunk][offset]
    }

    fn insert(&mut self, index: usize, id: NodeId) {
        let (chunk, offset) = self.locate(index);
        self.chunk_bytes -= chunk_heap_bytes(&self.chunks[chunk]);
        self.chunks[chunk].insert(offset, id);
        self.len += 1;
        if self.chunks[chunk].len() >= CHILDREN_CHUNK_MAX {
            let tail = self.chunks[chunk].split_off(CHILDREN_CHUNK_MAX / 2);
            self.chunk_bytes += chunk_heap_bytes(&tail);
            self.chunks.insert(chunk + 1, tail);
            self.starts.insert(chunk + 1, 0);
        }
        self.chunk_bytes += chunk_heap_bytes(&self.chunks[chunk]);
        self.restart(chunk + 1);
    }

    fn remove(&mut self, index: usize) -> NodeId {
        assert!(index < self.len, "removing child {index} of {}", self.len);
        let (chunk, offset) = self.locate(index);
        self.chunk_bytes -= chunk_heap_bytes(&self.chunks[chunk]);
        let id = self.chunks[chunk].remove(offset);
        self.len -= 1;
        if self.chunks[chunk].is_empty() {
            self.chunks.remove(chunk);
            self.starts.remove(chunk);
            if chunk < self.chunks.len() {
                self.restart(chunk);
            }
        } else {
            self.chunk_bytes += chunk_heap_bytes(&self.chunks[chunk]);
            self.restart(chunk + 1);
        }
        id
    }

    fn to_flat(&self) -> ThinVec<NodeId> {
        let mut flat = ThinVec::with_capacity(self.len);
        for chunk in &self.chunks {
            flat.extend(chunk.iter().copied());
        }
        flat
    }

    fn heap_bytes(&self) -> usize {
        self.chunk_bytes
            + alloc_bytes(24 * self.chunks.capacity())
            + alloc_bytes(4 * self.starts.capacity())
            // The map entry (key, value) and its control byte.
            + std::mem::size_of::<(NodeId, Chunked)>()
            + 1
    }
}

fn chunk_heap_bytes(chunk: &Vec<NodeId>) -> usize {
    alloc_bytes(4 * chunk.capacity())
}

/// A node's children, sorted by name: one vector, or a wide parent's
/// chunks.
#[derive(Debug, Clone, Copy)]
pub enum Children<'a> {
    Flat(&'a [NodeId]),
    Chunked(&'a Chunked),
}

impl<'a> Children<'a> {
    pub fn len(&self) -> usize {
        match self {
            Children::Flat(ids) => ids.len(),
            Children::Chunked(chunked) => chunked.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, index: usize) -> NodeId {
        match self {
            Children::Flat(ids) => ids[index],
            Children::Chunked(chunked) => chunked.get(index),
        }
    }

    pub fn last(&self) -> Option<NodeId> {
        self.len().checked_sub(1).map(|last| self.get(last))
    }

    pub fn iter(&self) -> ChildIter<'a> {
        match *self {
            Children::Flat(ids) => ChildIter::Flat(ids.iter()),
            Children::Chunked(chunked) => ChildIter::Chunked(chunked.chunks.iter().flatten()),
        }
    }

    pub fn to_vec(&self) -> Vec<NodeId> {
        self.iter().collect()
    }

    pub fn contains(&self, id: NodeId) -> bool {
        self.iter().any(|child| child == id)
    }

    /// The first position in `low..high` where `before` turns false
    /// (`before` is true, then false, over the range).
    pub fn partition_point(
        &self,
        low: usize,
        high: usize,
        before: impl Fn(NodeId) -> bool,
    ) -> usize {
        assert!(
            low <= high && high <= self.len(),
            "range {low}..{high} of {}",
            self.len()
        );
        let (mut low, mut high) = (low, high);
        while low < high {
            let middle = low + (high - low) / 2;
            if before(self.get(middle)) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }
}

/// The ids of a `Children`, in order.
pub enum ChildIter<'a> {
    Flat(std::slice::Iter<'a, NodeId>),
    Chunked(std::iter::Flatten<std::slice::Iter<'a, Vec<NodeId>>>),
}

impl Iterator for ChildIter<'_> {
    type Item = NodeId;

    fn next(&mut self) -> Option<NodeId> {
        match self {
            ChildIter::Flat(ids) => ids.next().copied(),
            ChildIter::Chunked(ids) => ids.next().copied(),
        }
    }
}

/// Slots in segments of SEGMENT_SLOTS, plus a free list.
#[derive(Debug, Clone, Default)]
pub struct Arena {
    segments: Vec<Vec<Slot>>,
    /// Slots ever handed out (the high-water mark): ids below it exist.
    len: u32,
    free: Vec<NodeId>,
    /// The children of parents with more than CHILDREN_FLAT_MAX (their
    /// own vector holds CHUNKED_MARK).
    chunked: HashMap<NodeId, Chunked>,
    /// Encoded child lists of parents listed since their children last
    /// changed: every change of a parent's children drops its list.
    lists: ChildListCache,
}

impl Arena {
    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, id: NodeId) -> &Slot {
        assert!(id < self.len, "node id {id} beyond {}", self.len);
        &self.segments[(id >> SEGMENT_SLOTS_LOG2) as usize][(id as usize) & (SEGMENT_SLOTS - 1)]
    }

    pub fn get_mut(&mut self, id: NodeId) -> &mut Slot {
        assert!(id < self.len, "node id {id} beyond {}", self.len);
        &mut self.segments[(id >> SEGMENT_SLOTS_LOG2) as usize][(id as usize) & (SEGMENT_SLOTS - 1)]
    }

    /// The children of `id`, sorted by name.
    pub fn children(&self, id: NodeId) -> Children<'_> {
        let slot = self.get(id);
        if slot.is_chunked() {
            Children::Chunked(self.chunked.get(&id).expect("a chunked parent's children"))
        } else {
            Children::Flat(&slot.children)
        }
    }

    /// Puts `child` at `position` among the children of `parent`.
    pub fn insert_child(&mut self, parent: NodeId, position: usize, child: NodeId) {
        assert!(child != CHUNKED_MARK, "NIL as a child");
        self.lists.forget(parent);
        if self.get(parent).is_chunked() {
            let chunked = self
                .chunked
                .get_mut(&parent)
                .expect("a chunked parent's children");
            chunked.insert(position, child);
            return;
        }
        let children = &mut self.get_mut(parent).children;
        assert!(
            position <= children.len(),
            "position {position} past {}",
            children.len()
        );
        if children.len() < CHILDREN_FLAT_MAX {
            children.insert(position, child);
            return;
        }
        let mut chunked = Chunked::from_sorted(children);
        chunked.insert(position, child);
        self.keep_chunked(parent, chunked);
    }

    /// `chunked` becomes the children of `parent`, whose own vector keeps
    /// only CHUNKED_MARK.
    fn keep_chunked(&mut self, parent: NodeId, chunked: Chunked) {
        self.get_mut(parent).children = ThinVec::from([CHUNKED_MARK]);
        let replaced = self.chunked.insert(parent, chunked);
        assert!(replaced.is_none(), "parent {parent} chunked twice");
    }

    /// Takes the child at `position` from the children of `parent`.
    pub fn remove_child(&mut self, parent: NodeId, position: usize) -> NodeId {
        self.lists.forget(parent);
        if !self.get(parent).is_chunked() {
            let children = &mut self.get_mut(parent).children;
            assert!(
                position < children.len(),
                "removing child {position} of {}",
                children.len()
            );
            let id = children.remove(position);
            if children.is_empty() {
                children.shrink_to_fit();
            }
            return id;
        }
        let chunked = self
            .chunked
            .get_mut(&parent)
            .expect("a chunked parent's children");
        let id = chunked.remove(position);
        if chunked.len() < CHILDREN_CHUNKED_MIN {
            let flat = chunked.to_flat();
            self.chunked.remove(&parent);
            self.get_mut(parent).children = flat;
        }
        id
    }

    /// Sets the children of a childless `parent` (snapshot load), sorted
    /// by name.
    pub fn set_children(&mut self, parent: NodeId, sorted: &[NodeId]) {
        assert!(
            self.get(parent).is_leaf(),
            "parent {parent} has children already"
        );
        assert!(!sorted.contains(&CHUNKED_MARK), "NIL as a child");
        self.lists.assert_not_kept(parent);
        if sorted.len() > CHILDREN_FLAT_MAX {
            self.keep_chunked(parent, Chunked::from_sorted(sorted));
        } else {
            self.get_mut(parent).children = sorted.iter().copied().collect();
        }
    }

    /// Asserts the form of the children of `id`: one vector of at most
    /// CHILDREN_FLAT_MAX, or chunks (never empty, none of
    /// CHILDREN_CHUNK_MAX or more, offsets right) of at least
    /// CHILDREN_CHUNKED_MIN in all.
    pub fn check_children_form(&self, id: NodeId) {
        let slot = self.get(id);
        if !slot.is_chunked() {
            assert!(
                slot.children.len() <= CHILDREN_FLAT_MAX,
                "node {id}: a flat list too long"
            );
            assert!(
                !slot.children.contains(&CHUNKED_MARK),
                "node {id}: NIL as a child"
            );
            assert!(
                !self.chunked.contains_key(&id),
                "node {id}: flat and chunked"
            );
            return;
        }
        assert_eq!(
            slot.children.len(),
            1,
            "node {id}: a chunked mark with company"
        );
        let chunked = self.chunked.get(&id).expect("a chunked parent's children");
        assert!(
            chunked.len >= CHILDREN_CHUNKED_MIN,
            "node {id}: a chunked list too short"
        );
        assert_eq!(
            chunked.chunks.len(),
            chunked.starts.len(),
            "node {id}: chunk offsets"
        );
        let mut start = 0;
        for (chunk, offset) in chunked.chunks.iter().zip(&chunked.starts) {
            assert!(
                !chunk.is_empty() && chunk.len() < CHILDREN_CHUNK_MAX,
                "node {id}: chunk size {}",
                chunk.len()
            );
            assert_eq!(*offset as usize, start, "node {id}: chunk offset");
            start += chunk.len();
        }
        assert_eq!(start, chunked.len, "node {id}: chunked length");
        let bytes: usize = chunked.chunks.iter().map(chunk_heap_bytes).sum();
        assert_eq!(bytes, chunked.chunk_bytes, "node {id}: chunk bytes");
    }

    /// Heap bytes of the children of `id` (the tree's memory accounting).
    pub fn children_heap_bytes(&self, id: NodeId) -> usize {
        self.get(id).children_heap_bytes() + self.chunked.get(&id).map_or(0, Chunked::heap_bytes)
    }

    /// A slot for `slot`: a free one unless `fresh_only` (a snapshot is
    /// being written and must not see a reused id change under it).
    pub fn alloc(&mut self, slot: Slot, fresh_only: bool) -> NodeId {
        assert!(!slot.is_free());
        if !fresh_only {
            if let Some(id) = self.free.pop() {
                self.lists.assert_not_kept(id);
                let target = self.get_mut(id);
                assert!(target.is_free(), "free list holds live slot {id}");
                *target = slot;
                return id;
            }
        }
        assert!((self.len as usize) < SLOTS_MAX, "arena full");
        let id = self.len;
        if (id as usize) & (SEGMENT_SLOTS - 1) == 0 {
            self.segments.push(Vec::with_capacity(SEGMENT_SLOTS));
        }
        self.segments.last_mut().expect("a segment").push(slot);
        self.len += 1;
        id
    }

    /// Frees a live slot and returns what it held.
    pub fn release(&mut self, id: NodeId) -> Slot {
        self.lists.assert_not_kept(id);
        let old = std::mem::replace(self.get_mut(id), Slot::free());
        assert!(!old.is_free(), "double free of {id}");
        self.free.push(id);
        old
    }

    /// Puts `slot` back into the free slot `id` (undo of a release).
    pub fn restore(&mut self, id: NodeId, slot: Slot) {
        assert!(self.get(id).is_free(), "restore into live slot {id}");
        let at = self
            .free
            .iter()
            .rposition(|free| *free == id)
            .expect("a released slot is on the free list");
        self.free.remove(at);
        self.lists.assert_not_kept(id);
        *self.get_mut(id) = slot;
    }

    pub fn segments(&self) -> &[Vec<Slot>] {
        &self.segments
    }

    /// An arena made of loaded segments (snapshot load): every segment but
    /// the last is full; free slots go on the free list.
    pub fn from_segments(segments: Vec<Vec<Slot>>) -> Arena {
        let count = segments.len();
        let mut len = 0usize;
        let mut free = Vec::new();
        for (index, segment) in segments.iter().enumerate() {
            assert!(index + 1 == count || segment.len() == SEGMENT_SLOTS);
            for (offset, slot) in segment.iter().enumerate() {
                if slot.is_free() {
                    free.push((len + offset) as NodeId);
                }
            }
            len += segment.len();
        }
        assert!(len <= SLOTS_MAX);
        free.reverse();
        Arena {
            segments,
            len: len as u32,
            free,
            chunked: HashMap::new(),
            lists: ChildListCache::default(),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &Slot)> {
        self.segments
            .iter()
            .flatten()
            .enumerate()
            .map(|(id, slot)| (id as NodeId, slot))
    }

    /// The encoded child list of `parent` kept by `keep_list`, if its
    /// children have not changed since.
    pub fn kept_list(&self, parent: NodeId) -> Option<Arc<[u8]>> {
        self.lists.get(parent)
    }

    /// Keeps `encoded`, the getChildren encoding (`vector<ustring>`) of the
    /// current children of `parent`, for the next `kept_list`.
    pub fn keep_list(&self, parent: NodeId, encoded: &[u8]) {
        assert!(encoded.len() >= 4, "an encoded list starts with its count");
        assert!(!self.get(parent).is_leaf(), "a leaf's list is not kept");
        self.lists.put(parent, encoded);
    }

    /// Bytes of the kept child lists (part of the tree's memory).
    pub fn kept_list_bytes(&self) -> usize {
        self.lists.bytes()
    }

    /// Bytes of the slots themselves and the free list.
    pub fn slot_bytes(&self) -> usize {
        let slots: usize = self.segments.iter().map(|s| s.capacity()).sum();
        slots * std::mem::size_of::<Slot>() + self.free.capacity() * 4
    }
}

/// Encoded child lists, so that listing a parent whose children did not
/// change costs a lookup and a copy instead of a pass over its children's
/// slots (about 100 instructions per child). Reads fill it while holding
/// the tree shared (hence the lock); every change of a parent's children
/// happens with the tree held exclusively and drops that parent's list, so
/// a kept list is never stale. A clone (a snapshot's copy) starts empty.
#[derive(Default)]
struct ChildListCache(Mutex<KeptLists>);

#[derive(Default)]
struct KeptLists {
    by_parent: hashbrown::HashMap<NodeId, Arc<[u8]>>,
    /// Σ length of the lists in `by_parent`.
    bytes: usize,
}

impl ChildListCache {
    fn lock(&self) -> MutexGuard<'_, KeptLists> {
        // The lock guards no invariant a panic could break halfway: an
        // entry is inserted or removed with its byte count in one step.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lists with the arena held exclusively: no locking.
    fn exclusive(&mut self) -> &mut KeptLists {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, parent: NodeId) -> Option<Arc<[u8]>> {
        self.lock().by_parent.get(&parent).cloned()
    }

    fn put(&self, parent: NodeId, encoded: &[u8]) {
        if encoded.len() > CHILD_LIST_CACHE_ENTRY_BYTES_MAX {
            return;
        }
        let list: Arc<[u8]> = Arc::from(encoded);
        let mut kept = self.lock();
        if let Some(old) = kept.by_parent.remove(&parent) {
            kept.bytes -= old.len();
        }
        let full = kept.by_parent.len() >= CHILD_LIST_CACHE_LISTS_MAX
            || kept.bytes + list.len() > CHILD_LIST_CACHE_BYTES_MAX;
        if full {
            // Start over: bounded work (at most CHILD_LIST_CACHE_LISTS_MAX
            // frees), and the parents listed often are back after a read.
            kept.by_parent.clear();
            kept.bytes = 0;
        }
        kept.bytes += list.len();
        kept.by_parent.insert(parent, list);
        assert!(kept.bytes <= CHILD_LIST_CACHE_BYTES_MAX);
        assert!(kept.by_parent.len() <= CHILD_LIST_CACHE_LISTS_MAX);
    }

    /// Drops the list of `parent`, whose children change. Called with the
    /// arena held exclusively.
    fn forget(&mut self, parent: NodeId) {
        let kept = self.exclusive();
        if kept.by_parent.is_empty() {
            return;
        }
        if let Some(old) = kept.by_parent.remove(&parent) {
            kept.bytes -= old.len();
        }
    }

    /// Asserts that `id` has no kept list: a leaf (a slot being freed,
    /// refilled or given its first children) never has one, since the
    /// removal of its last child dropped it.
    fn assert_not_kept(&mut self, id: NodeId) {
        let kept = self.exclusive();
        assert!(
            kept.by_parent.is_empty() || !kept.by_parent.contains_key(&id),
            "node {id} has a kept child list"
        );
    }

    fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

impl Clone for ChildListCache {
    fn clone(&self) -> Self {
        ChildListCache::default()
    }
}

impl std::fmt::Debug for ChildListCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.lock();
        write!(
            f,
            "ChildListCache({} lists, {} bytes)",
            kept.by_parent.len(),
            kept.bytes
        )
    }
}

/// (parent id, name) → child id, in INDEX_SHARDS hash tables holding only
/// ids: the key is read from the slot itself.
#[derive(Clone)]
pub struct PathIndex {
    shards: Vec<hashbrown::HashTable<NodeId>>,
    hasher: hashbrown::DefaultHashBuilder,
}

impl Default for PathIndex {
    fn default() -> Self {
        PathIndex {
            shards: (0..INDEX_SHARDS)
                .map(|_| hashbrown::HashTable::new())
                .collect(),
            hasher: hashbrown::DefaultHashBuilder::default(),
        }
    }
}

impl std::fmt::Debug for PathIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PathIndex({} entries)", self.len())
    }
}

fn shard_of(hash: u64) -> usize {
    // Not the top bits: hashbrown keeps those as its control tag.
    (hash >> 32) as usize % INDEX_SHARDS
}

impl PathIndex {
    /// The key hash of (parent, name); equal for equal keys in this index.
    pub fn hash(&self, parent: NodeId, name: &[u8]) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        hasher.write_u32(parent);
        hasher.write(name);
        hasher.finish()
    }

    fn hash_slot(&self, arena: &Arena, id: NodeId) -> u64 {
        let slot = arena.get(id);
        self.hash(slot.parent, slot.blob.name_bytes())
    }

    pub fn find(&self, arena: &Arena, parent: NodeId, name: &[u8]) -> Option<NodeId> {
        let hash = self.hash(parent, name);
        self.shards[shard_of(hash)]
            .find(hash, |id| {
                let slot = arena.get(*id);
                slot.parent == parent && slot.blob.name_bytes() == name
            })
            .copied()
    }

    pub fn insert(&mut self, arena: &Arena, id: NodeId) {
        let hash = self.hash_slot(arena, id);
        let hasher = &self.hasher;
        let rehash = |id: &NodeId| {
            let slot = arena.get(*id);
            let mut h = hasher.build_hasher();
            h.write_u32(slot.parent);
            h.write(slot.blob.name_bytes());
            h.finish()
        };
        self.shards[shard_of(hash)].insert_unique(hash, id, rehash);
    }

    /// Builds the index of a loaded tree (the root and free slots are
    /// skipped). The shards are split among `threads` workers, each
    /// hashing every key and keeping its own shards' (hashing is cheap
    /// next to the inserts' cache misses), each shard sized before it is
    /// filled.
    pub fn build(&mut self, arena: &Arena, threads: usize) {
        assert!(self.is_empty(), "building into a non-empty index");
        let mut shards = std::mem::take(&mut self.shards);
        let hasher = &self.hasher;
        let hash = |parent: NodeId, name: &[u8]| {
            let mut h = hasher.build_hasher();
            h.write_u32(parent);
            h.write(name);
            h.finish()
        };
        let keys = || {
            arena
                .iter()
                .filter(|(id, slot)| *id != ROOT && !slot.is_free())
                .map(|(id, slot)| (id, hash(slot.parent, slot.blob.name_bytes())))
        };
        let mut counts = vec![0usize; INDEX_SHARDS];
        for (_, hash) in keys() {
            counts[shard_of(hash)] += 1;
        }
        let rehash = |id: &NodeId| {
            let slot = arena.get(*id);
            hash(slot.parent, slot.blob.name_bytes())
        };
        let fill = |first: usize, shards: &mut [hashbrown::HashTable<NodeId>]| {
            for (offset, shard) in shards.iter_mut().enumerate() {
                shard.reserve(counts[first + offset], rehash);
            }
            for (id, hash) in keys() {
                let shard = shard_of(hash);
                if shard >= first && shard < first + shards.len() {
                    shards[shard - first].insert_unique(hash, id, rehash);
                }
            }
        };
        if threads <= 1 {
            fill(0, &mut shards);
        } else {
            let per_thread = INDEX_SHARDS.div_ceil(threads);
            std::thread::scope(|scope| {
                for (part, chunk) in shards.chunks_mut(per_thread).enumerate() {
                    let fill = &fill;
                    scope.spawn(move || fill(part * per_thread, chunk));
                }
            });
        }
        self.shards = shards;
    }

    pub fn remove(&mut self, arena: &Arena, id: NodeId) {
        let hash = self.hash_slot(arena, id);
        match self.shards[shard_of(hash)].find_entry(hash, |other| *other == id) {
            Ok(entry) => {
                entry.remove();
            }
            Err(_) => panic!("node {id} missing from the path index"),
        }
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| s.is_empty())
    }

    /// Bytes of the tables (4-byte ids plus a control byte per bucket),
    /// malloc-rounded.
    pub fn heap_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| alloc_bytes(s.allocation_size()))
            .sum()
    }
}

/// ACL lists interned once, referenced by id, freed when the last node
/// that uses one goes (as ZooKeeper's ReferenceCountedACLCache).
#[derive(Debug, Clone, Default)]
pub struct AclTable {
    entries: Vec<AclEntry>,
    by_encoding: HashMap<Vec<u8>, u32>,
    free: Vec<u32>,
    /// The id `intern` answered last: most creates carry the list the
    /// one before carried (OPEN_ACL_UNSAFE, mostly), which then costs a
    /// comparison instead of an encoding and a hash lookup. A hint only:
    /// used when its entry is live and holds the same list.
    last: Option<u32>,
}

#[derive(Debug, Clone, Default)]
struct AclEntry {
    list: Arc<[Acl]>,
    encoded: Vec<u8>,
    refs: u64,
}

/// Most distinct ACL lists the table holds (ids stay below FREE_ACL).
pub const ACL_LISTS_MAX: usize = 1 << 30;

pub fn encode_acl(list: &[Acl]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 * list.len() + 4);
    keel_jute::write_i32(&mut out, list.len() as i32);
    for entry in list {
        entry.write(&mut out);
    }
    out
}

impl AclTable {
    /// The id of `list`, one reference more.
    pub fn intern(&mut self, list: &[Acl]) -> u32 {
        if let Some(id) = self.last {
            let entry = &mut self.entries[id as usize];
            if entry.refs > 0 && *entry.list == *list {
                entry.refs += 1;
                return id;
            }
        }
        let id = self.intern_encoded(list);
        self.last = Some(id);
        id
    }

    /// `intern` by the list's encoding.
    fn intern_encoded(&mut self, list: &[Acl]) -> u32 {
        let encoded = encode_acl(list);
        if let Some(id) = self.by_encoding.get(&encoded) {
            self.entries[*id as usize].refs += 1;
            return *id;
        }
        let entry = AclEntry {
            list: list.into(),
            encoded: encoded.clone(),
            refs: 1,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize] = entry;
                id
            }
            None => {
                assert!(self.entries.len() < ACL_LISTS_MAX, "ACL table full");
                self.entries.push(entry);
                (self.entries.len() - 1) as u32
            }
        };
        self.by_encoding.insert(encoded, id);
        id
    }

    pub fn retain(&mut self, id: u32) {
        let entry = &mut self.entries[id as usize];
        assert!(entry.refs > 0, "retain of freed ACL {id}");
        entry.refs += 1;
    }

    pub fn release(&mut self, id: u32) {
        let entry = &mut self.entries[id as usize];
        assert!(entry.refs > 0, "release of freed ACL {id}");
        entry.refs -= 1;
        if entry.refs == 0 {
            let encoded = std::mem::take(&mut entry.encoded);
            entry.list = Arc::from(Vec::new());
            self.by_encoding.remove(&encoded);
            self.free.push(id);
        }
    }

    pub fn get(&self, id: u32) -> &Arc<[Acl]> {
        let entry = &self.entries[id as usize];
        assert!(entry.refs > 0, "ACL {id} is not in use");
        &entry.list
    }

    /// (id, encoded list) of every list in use, by id (snapshot header).
    pub fn live(&self) -> impl Iterator<Item = (u32, &[u8])> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.refs > 0)
            .map(|(id, e)| (id as u32, e.encoded.as_slice()))
    }

    /// Restores a list at its id (snapshot load); references are counted
    /// afterwards with `set_refs`.
    pub fn load(&mut self, id: u32, encoded: &[u8]) -> Result<(), String> {
        let mut reader = Reader::new(encoded);
        let count = reader.read_i32().map_err(|e| e.to_string())?;
        if count < 0 || count as usize > crate::acl::ACL_ENTRIES_MAX {
            return Err(format!("ACL {id} has {count} entries"));
        }
        let mut list = Vec::with_capacity(count as usize);
        for _ in 0..count {
            list.push(Acl::read(&mut reader).map_err(|e| e.to_string())?);
        }
        if reader.remaining() != 0 || id as usize >= ACL_LISTS_MAX {
            return Err(format!("ACL {id} is malformed"));
        }
        if (id as usize) < self.entries.len() && self.entries[id as usize].refs > 0 {
            return Err(format!("ACL {id} listed twice"));
        }
        if self.by_encoding.contains_key(encoded) {
            return Err(format!("ACL {id} duplicates another list"));
        }
        while self.entries.len() <= id as usize {
            self.entries.push(AclEntry::default());
        }
        self.entries[id as usize] = AclEntry {
            list: list.into(),
            encoded: encoded.to_vec(),
            // Placeholder until set_refs counts the nodes.
            refs: u64::MAX,
        };
        self.by_encoding.insert(encoded.to_vec(), id);
        Ok(())
    }

    /// After a load: every list's reference count from the nodes' ids; a
    /// list no node uses is dropped, an id no list has is an error.
    pub fn set_refs(&mut self, counts: &HashMap<u32, u64>) -> Result<(), String> {
        for (id, count) in counts {
            match self.entries.get_mut(*id as usize) {
                Some(entry) if entry.refs > 0 => entry.refs = *count,
                _ => return Err(format!("a node uses ACL {id}, which the snapshot lacks")),
            }
        }
        for id in 0..self.entries.len() {
            let entry = &mut self.entries[id];
            if entry.refs == u64::MAX || entry.refs == 0 {
                let encoded = std::mem::take(&mut entry.encoded);
                entry.list = Arc::from(Vec::new());
                entry.refs = 0;
                self.by_encoding.remove(&encoded);
                self.free.push(id as u32);
            }
        }
        self.free.sort_unstable_by(|a, b| b.cmp(a));
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.by_encoding.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_encoding.is_empty()
    }

    pub fn heap_bytes(&self) -> usize {
        self.entries
            .iter()
            .map(|e| 2 * e.encoded.capacity() + 64)
            .sum::<usize>()
            + self.by_encoding.capacity() * 40
    }
}

#[cfg(test)]
mod children_tests {
    use super::*;

    /// An arena with a parent (slot 0) and no children yet.
    fn arena() -> Arena {
        let mut arena = Arena::default();
        let parent = arena.alloc(
            Slot::leaf(PackedStat::default(), NIL, 0, Blob::new("", None)),
            false,
        );
        assert_eq!(parent, 0);
        arena
    }

    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// Inserts and removals at random positions, against a plain vector:
    /// the list grows past CHILDREN_FLAT_MAX (chunked), back under
    /// CHILDREN_CHUNKED_MIN (one vector again) and to empty, with the
    /// same ids in the same order and a well-formed list at every step.
    #[test]
    fn chunked_children_match_a_vector_through_growth_and_shrinking() {
        for seed in 1..=4u64 {
            let mut arena = arena();
            let mut model: Vec<NodeId> = Vec::new();
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut next_id: NodeId = 1;
            let mut was_chunked = false;
            let peak = CHILDREN_FLAT_MAX + 3 * CHILDREN_CHUNK_MAX;
            // Grow (inserts mostly), then shrink (removals mostly).
            for phase in [true, false] {
                loop {
                    let insert = if phase {
                        !xorshift(&mut x).is_multiple_of(8)
                    } else {
                        xorshift(&mut x).is_multiple_of(8)
                    };
                    if insert || model.is_empty() {
                        let position = (xorshift(&mut x) % (model.len() as u64 + 1)) as usize;
                        arena.insert_child(0, position, next_id);
                        model.insert(position, next_id);
                        next_id += 1;
                    } else {
                        let position = (xorshift(&mut x) % model.len() as u64) as usize;
                        assert_eq!(arena.remove_child(0, position), model.remove(position));
                    }
                    arena.check_children_form(0);
                    let children = arena.children(0);
                    assert_eq!(children.len(), model.len());
                    was_chunked |= matches!(children, Children::Chunked(_));
                    if model.len().is_multiple_of(97) {
                        assert_eq!(children.to_vec(), model, "seed {seed}");
                        for probe in [0, model.len() / 3, model.len().saturating_sub(1)] {
                            if probe < model.len() {
                                assert_eq!(children.get(probe), model[probe]);
                            }
                        }
                    }
                    if (phase && model.len() >= peak) || (!phase && model.is_empty()) {
                        break;
                    }
                }
            }
            assert!(was_chunked, "seed {seed} never chunked its children");
            assert!(arena.get(0).is_leaf());
            assert!(arena.chunked.is_empty(), "an empty parent keeps chunks");
            assert_eq!(arena.children_heap_bytes(0), 0);
        }
    }

    /// Appends at the end (sequential names) fill chunks and split them;
    /// removals from the front (oldest first) empty and drop them.
    #[test]
    fn appends_and_oldest_first_removals_keep_the_chunks_well_formed() {
        let mut arena = arena();
        let count = CHILDREN_FLAT_MAX * 3;
        for id in 1..=count as NodeId {
            let end = arena.children(0).len();
            arena.insert_child(0, end, id);
        }
        arena.check_children_form(0);
        assert!(matches!(arena.children(0), Children::Chunked(_)));
        let expected: Vec<NodeId> = (1..=count as NodeId).collect();
        assert_eq!(arena.children(0).to_vec(), expected);
        for id in 1..=count as NodeId {
            assert_eq!(arena.remove_child(0, 0), id);
            arena.check_children_form(0);
        }
        assert!(arena.get(0).is_leaf());
    }

    /// A snapshot load sets a wide parent's children in chunks, a narrow
    /// one's in one vector.
    #[test]
    fn set_children_picks_the_form_by_count() {
        for count in [
            1,
            CHILDREN_FLAT_MAX,
            CHILDREN_FLAT_MAX + 1,
            5 * CHILDREN_CHUNK_MAX,
        ] {
            let mut arena = arena();
            let ids: Vec<NodeId> = (1..=count as NodeId).collect();
            arena.set_children(0, &ids);
            arena.check_children_form(0);
            assert_eq!(arena.children(0).to_vec(), ids);
            assert_eq!(
                matches!(arena.children(0), Children::Chunked(_)),
                count > CHILDREN_FLAT_MAX
            );
        }
    }
}
