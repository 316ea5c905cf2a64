//! A shard: the keys of a contiguous range of slots, one hash table per
//! slot (so SCAN walks slot by slot and a shard's range can be handed
//! over whole), an index of deadlines for the leader's expiry cycle, and
//! per slot what WATCH needs to tell whether a key that is gone was
//! deleted after it was watched: the last few deletions key by key
//! (`Tombstones`), and the log index of the newest one no longer
//! remembered that way. A shard is plain data: whoever owns it (one
//! thread in the server) runs commands on it; nothing in it locks.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::hash::BuildHasher;
use std::ops::Range;

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};

use crate::slot::key_slot;
use crate::value::{Bytes, Entry};

/// The position of a write: its stamp (a changed key's new version, see
/// `stamp`) and the apply clock (the log's time, decided by the leader).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ctx {
    pub stamp: u64,
    pub now_ms: i64,
}

/// Bits of a write stamp below its log index: the write's ordinal among
/// the entry's KV operations.
pub const STAMP_ORDINAL_BITS: u32 = 16;
/// Operations one entry may carry (`keel_consensus`'s
/// BATCH_PROPOSALS_MAX, 4,096, is well below).
pub const STAMP_ORDINALS_MAX: u64 = 1 << STAMP_ORDINAL_BITS;
/// Log indexes a stamp can hold.
pub const STAMP_INDEX_MAX: u64 = u64::MAX >> STAMP_ORDINAL_BITS;

/// The stamp of the `ordinal`-th KV operation of the entry at log `index`:
/// what a key's version and a WATCH token are. One entry carries many
/// connections' writes, and a shard may be observed between two of them
/// (a transaction spanning shards borrows it and gives it back before the
/// entry's next write), so a token must tell the entry's writes apart:
/// the log index alone would make a write later in the entry look as old
/// as the token, and the EXEC would miss it. Every replica applies an
/// entry's operations in the same order, so stamps are replicated state.
/// Versions written before stamps were plain indexes, below every stamp of
/// their entry: still older than any later token, as they should be.
pub fn stamp(index: u64, ordinal: u64) -> u64 {
    assert!(index <= STAMP_INDEX_MAX, "log index {index} beyond stamps");
    assert!(
        ordinal < STAMP_ORDINALS_MAX,
        "ordinal {ordinal} of one entry"
    );
    (index << STAMP_ORDINAL_BITS) | ordinal
}

/// A stamp after every operation of the entry at `index` (what a shard
/// loaded from a snapshot at `index` has applied).
pub fn entry_end_stamp(index: u64) -> u64 {
    stamp(index, STAMP_ORDINALS_MAX - 1)
}

/// Counters INFO reports (not part of the replicated state). Cells, so a
/// read, which has the shard shared, counts too.
#[derive(Debug, Clone, Default)]
pub struct ShardStats {
    pub expired_keys: Cell<u64>,
    pub keyspace_hits: Cell<u64>,
    pub keyspace_misses: Cell<u64>,
}

impl ShardStats {
    fn bump(counter: &Cell<u64>) {
        counter.set(counter.get() + 1);
    }

    /// Counts one key deleted because it expired.
    pub fn expired(&self) {
        Self::bump(&self.expired_keys);
    }
}

#[derive(Debug, Clone)]
pub struct Shard {
    slots: Range<u16>,
    tables: Vec<HashTable<Entry>>,
    hasher: DefaultHashBuilder,
    /// (deadline, key) of every key with an expiry.
    deadlines: BTreeSet<(i64, Bytes)>,
    /// Per slot of the range: the stamp of the newest deletion not
    /// remembered in `tombstones` (FLUSHDB's, or one pushed out).
    deleted_at: Vec<u64>,
    /// Per slot of the range that saw a deletion: its last few, key by key.
    tombstones: HashMap<u16, Tombstones>,
    keys: usize,
    /// The highest write stamp applied here (a WATCH token, `stamp`).
    pub applied_stamp: u64,
    pub stats: ShardStats,
}

/// Deletions a slot remembers key by key for WATCH. A key watched while
/// absent makes EXEC fail only if it was deleted since (Redis: it was
/// touched), so another key of its slot deleted meanwhile must not: with
/// hash tags (`{user}:a`, `{user}:b`) keys share a slot on purpose. A
/// slot with more deletions since the WATCH than this is judged
/// conservatively (EXEC fails, as if the key had been deleted).
pub const TOMBSTONES_PER_SLOT: usize = 4;

/// The last deletions of one slot: (`scan_hash` of the key, log index),
/// at most TOMBSTONES_PER_SLOT. A hash shared by two keys can only make
/// an EXEC fail that would have passed, never the reverse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tombstones {
    marks: [(u64, u64); TOMBSTONES_PER_SLOT],
    len: u8,
}

impl Tombstones {
    fn marks(&self) -> &[(u64, u64)] {
        &self.marks[..self.len as usize]
    }

    /// The log index `mark`'s key was last deleted at, if remembered.
    fn deleted_at(&self, mark: u64) -> Option<u64> {
        self.marks()
            .iter()
            .find(|(m, _)| *m == mark)
            .map(|(_, i)| *i)
    }

    /// Remembers `mark` deleted at `index`; returns the deletion pushed
    /// out to make room (the oldest; on a tie the lowest mark, so every
    /// replica pushes out the same one), if any.
    fn record(&mut self, mark: u64, index: u64) -> Option<(u64, u64)> {
        assert!(
            self.marks().iter().all(|(_, i)| *i <= index),
            "deletions go forward"
        );
        let len = self.len as usize;
        if let Some(found) = self.marks[..len].iter_mut().find(|(m, _)| *m == mark) {
            found.1 = index;
            return None;
        }
        if len < TOMBSTONES_PER_SLOT {
            self.marks[len] = (mark, index);
            self.len += 1;
            return None;
        }
        let oldest = (0..len)
            .min_by_key(|&i| (self.marks[i].1, self.marks[i].0))
            .expect("full");
        Some(std::mem::replace(&mut self.marks[oldest], (mark, index)))
    }
}

/// A slot's offset in its shard's range, the key of `Shard::tombstones`.
fn slot_offset(at: usize) -> u16 {
    u16::try_from(at).expect("a slot offset")
}

/// Keys one `Shard::prefetch` call takes at most.
pub const PREFETCH_KEYS_MAX: usize = 32;

/// Asks the CPU to load `value`'s cache lines (its first and last byte's)
/// without waiting for them. Never faults, changes nothing.
#[inline(always)]
fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let first = value as *const T as *const i8;
        let last = first.wrapping_add(std::mem::size_of::<T>().max(1) - 1);
        // SAFETY: a prefetch is a hint: it reads nothing the program sees
        // and never faults, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(first);
            _mm_prefetch::<_MM_HINT_T0>(last);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Bits of a SCAN cursor below the slot: the position in the slot's
/// key order (`scan_hash`).
pub const CURSOR_HASH_BITS: u32 = 50;

/// The order SCAN walks a slot's keys in: a fixed 50-bit hash, the same on
/// every node and across restarts, so a cursor stays valid anywhere.
pub fn scan_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // splitmix64's finalizer spreads FNV's bits.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    h >> (64 - CURSOR_HASH_BITS)
}

impl Shard {
    pub fn new(slots: Range<u16>) -> Shard {
        assert!(slots.start < slots.end && slots.end as usize <= crate::slot::SLOTS);
        let width = (slots.end - slots.start) as usize;
        Shard {
            tables: (0..width).map(|_| HashTable::new()).collect(),
            deleted_at: vec![0; width],
            tombstones: HashMap::new(),
            slots,
            hasher: DefaultHashBuilder::default(),
            deadlines: BTreeSet::new(),
            keys: 0,
            applied_stamp: 0,
            stats: ShardStats::default(),
        }
    }

    pub fn slots(&self) -> Range<u16> {
        self.slots.clone()
    }

    pub fn owns(&self, slot: u16) -> bool {
        self.slots.contains(&slot)
    }

    pub fn key_count(&self) -> usize {
        self.keys
    }

    pub fn expiring_count(&self) -> usize {
        self.deadlines.len()
    }

    fn position(&self, key: &[u8]) -> (usize, u64) {
        self.position_in(key_slot(key), key)
    }

    /// `position` for a caller that computed the key's slot already.
    fn position_in(&self, slot: u16, key: &[u8]) -> (usize, u64) {
        assert!(self.owns(slot), "slot {slot} is not in {:?}", self.slots);
        debug_assert_eq!(slot, key_slot(key));
        (
            (slot - self.slots.start) as usize,
            self.hasher.hash_one(key),
        )
    }

    /// Starts the memory loads of the lookups of `keys` (slot, key; every
    /// slot this shard's) before they run, so their cache misses overlap
    /// instead of following one another: the slot tables' headers are
    /// prefetched first, then each key's probe reads its table's control
    /// bytes and prefetches every entry whose tag matches (the entry itself
    /// is not read). Changes nothing; a hint only.
    pub fn prefetch(&self, keys: &[(u16, &[u8])]) {
        assert!(keys.len() <= PREFETCH_KEYS_MAX);
        let mut positions = [(0usize, 0u64); PREFETCH_KEYS_MAX];
        for (position, &(slot, key)) in positions.iter_mut().zip(keys) {
            *position = self.position_in(slot, key);
            prefetch(&self.tables[position.0]);
        }
        for &(at, hash) in &positions[..keys.len()] {
            let found = self.tables[at].find(hash, |entry| {
                prefetch(entry);
                false
            });
            assert!(found.is_none());
        }
    }

    /// `prefetch` for those of `keys` (slot, key; at most
    /// PREFETCH_KEYS_MAX are taken) whose slots are this shard's, when
    /// there are two or more: one lookup alone has nothing to overlap with.
    pub fn prefetch_owned<'k>(&self, keys: impl IntoIterator<Item = (u16, &'k [u8])>) {
        let mut mine = [(0u16, &[][..]); PREFETCH_KEYS_MAX];
        let mut count = 0;
        for key in keys
            .into_iter()
            .filter(|(slot, _)| self.owns(*slot))
            .take(PREFETCH_KEYS_MAX)
        {
            mine[count] = key;
            count += 1;
        }
        if count > 1 {
            self.prefetch(&mine[..count]);
        }
    }

    /// The entry of `key` whatever its expiry.
    pub fn peek(&self, key: &[u8]) -> Option<&Entry> {
        self.peek_in(key_slot(key), key)
    }

    fn peek_in(&self, slot: u16, key: &[u8]) -> Option<&Entry> {
        let (at, hash) = self.position_in(slot, key);
        self.tables[at].find(hash, |e| e.key() == key)
    }

    /// The live entry of `key` as a read sees it at `now_ms`: an expired
    /// key is absent (reads never change the keyspace).
    pub fn get(&self, key: &[u8], now_ms: i64) -> Option<&Entry> {
        self.get_in(key_slot(key), key, now_ms)
    }

    /// `get` for a caller that computed `key_slot(key)` already (a read
    /// finds its shard by the slot: one CRC16 per key, not two).
    pub fn get_in(&self, slot: u16, key: &[u8], now_ms: i64) -> Option<&Entry> {
        self.peek_in(slot, key).filter(|e| !e.expired(now_ms))
    }

    /// The live entry of `key` for a write: an expired key is deleted
    /// first, as Redis's lookupKeyWrite does. The caller sets the entry's
    /// version to `ctx.stamp` if it changes it.
    pub fn live(&mut self, key: &[u8], ctx: Ctx) -> Option<&mut Entry> {
        // The slot and hash once; the second probe finds the entry in the
        // cache (a returned `&mut` cannot outlive a branch that deletes).
        let (at, hash) = self.position(key);
        if self.tables[at]
            .find(hash, |e| e.key() == key)?
            .expired(ctx.now_ms)
        {
            self.delete(key, ctx);
            self.stats.expired();
            return None;
        }
        self.tables[at].find_mut(hash, |e| e.key() == key)
    }

    /// Adds an entry whose key is absent.
    pub fn insert(&mut self, entry: Entry) -> &mut Entry {
        let (at, hash) = self.position(entry.key());
        assert!(self.tables[at]
            .find(hash, |e| e.key() == entry.key())
            .is_none());
        if entry.expire_at_ms != 0 {
            self.deadlines
                .insert((entry.expire_at_ms, entry.key().into()));
        }
        self.keys += 1;
        let hasher = &self.hasher;
        self.tables[at]
            .insert_unique(hash, entry, |e| hasher.hash_one(e.key()))
            .into_mut()
    }

    /// Deletes `key` (expired or not); false if it is absent.
    pub fn delete(&mut self, key: &[u8], ctx: Ctx) -> bool {
        let (at, hash) = self.position(key);
        let Ok(found) = self.tables[at].find_entry(hash, |e| e.key() == key) else {
            return false;
        };
        let (entry, _) = found.remove();
        if entry.expire_at_ms != 0 {
            assert!(self
                .deadlines
                .remove(&(entry.expire_at_ms, entry.key().into())));
        }
        self.keys -= 1;
        self.remember_deletion(at, key, ctx.stamp);
        true
    }

    /// `key`, of the slot at offset `at`, was deleted at log `index`.
    fn remember_deletion(&mut self, at: usize, key: &[u8], index: u64) {
        let offset = slot_offset(at);
        let pushed_out = self
            .tombstones
            .entry(offset)
            .or_default()
            .record(scan_hash(key), index);
        if let Some((_, older)) = pushed_out {
            self.deleted_at[at] = self.deleted_at[at].max(older);
        }
    }

    /// Sets or (0) removes the expiry of a present key.
    pub fn set_expiry(&mut self, key: &[u8], at_ms: i64) {
        let (slot, hash) = self.position(key);
        let entry = self.tables[slot]
            .find_mut(hash, |e| e.key() == key)
            .expect("the key is present");
        let old = std::mem::replace(&mut entry.expire_at_ms, at_ms);
        if old != 0 {
            assert!(self.deadlines.remove(&(old, key.into())));
        }
        if at_ms != 0 {
            self.deadlines.insert((at_ms, key.into()));
        }
    }

    /// Keys whose deadline is at or before `now_ms`, soonest first, at most
    /// `max` (the leader proposes their deletion).
    pub fn due(&self, now_ms: i64, max: usize) -> Vec<Bytes> {
        self.deadlines
            .iter()
            .take_while(|(at, _)| *at <= now_ms)
            .take(max)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// Whether `key` changed after the log index `token` (taken when it was
    /// watched, at apply clock `watched_ms`) as seen at `now_ms`: changed,
    /// created, deleted since (remembered key by key, or the slot forgot
    /// deletions since: conservative), or expired since.
    pub fn changed_since(&self, key: &[u8], token: u64, watched_ms: i64, now_ms: i64) -> bool {
        match self.peek(key) {
            Some(entry) => {
                entry.version > token || (entry.expired(now_ms) && !entry.expired(watched_ms))
            }
            None => {
                let (at, _) = self.position(key);
                let offset = slot_offset(at);
                let remembered = self
                    .tombstones
                    .get(&offset)
                    .and_then(|t| t.deleted_at(scan_hash(key)));
                self.deleted_at[at] > token || remembered.is_some_and(|index| index > token)
            }
        }
    }

    /// Every key (FLUSHDB). A slot of at most TOMBSTONES_PER_SLOT keys
    /// remembers each (a key watched while absent stays untouched, as in
    /// Redis); a larger one only the flush's index.
    pub fn clear(&mut self, ctx: Ctx) {
        for at in 0..self.tables.len() {
            let table = std::mem::replace(&mut self.tables[at], HashTable::new());
            if table.len() > TOMBSTONES_PER_SLOT {
                self.deleted_at[at] = ctx.stamp;
                let offset = slot_offset(at);
                self.tombstones.remove(&offset);
                continue;
            }
            for entry in &table {
                self.remember_deletion(at, entry.key(), ctx.stamp);
            }
        }
        self.deadlines.clear();
        self.keys = 0;
    }

    /// The entries of `slot` from SCAN position `from` on, in SCAN order,
    /// with their positions.
    pub fn scan_slot(&self, slot: u16, from: u64) -> Vec<(u64, &Entry)> {
        assert!(self.owns(slot));
        let mut found: Vec<(u64, &Entry)> = self.tables[(slot - self.slots.start) as usize]
            .iter()
            .map(|e| (scan_hash(e.key()), e))
            .filter(|(h, _)| *h >= from)
            .collect();
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.key().cmp(b.1.key())));
        found
    }

    /// Every entry, slot by slot.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.tables.iter().flat_map(|t| t.iter())
    }

    /// (slot, index) of every slot whose last deletion is recorded.
    pub fn deletions(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.deleted_at
            .iter()
            .enumerate()
            .filter(|(_, at)| **at != 0)
            .map(|(i, at)| (self.slots.start + i as u16, *at))
    }

    /// Restores a slot's deletion index (snapshot load).
    pub fn set_deleted_at(&mut self, slot: u16, index: u64) {
        assert!(self.owns(slot));
        self.deleted_at[(slot - self.slots.start) as usize] = index;
    }

    /// (slot, key's `scan_hash`, index) of every deletion remembered key
    /// by key, slot by slot, oldest first within a slot (the order
    /// `remember` takes them back in).
    pub fn tombstones(&self) -> Vec<(u16, u64, u64)> {
        let mut all: Vec<(u16, u64, u64)> = self
            .tombstones
            .iter()
            .flat_map(|(offset, t)| {
                let slot = self.slots.start + offset;
                t.marks()
                    .iter()
                    .map(move |&(mark, index)| (slot, mark, index))
            })
            .collect();
        all.sort_unstable_by_key(|&(slot, mark, index)| (slot, index, mark));
        all
    }

    /// Restores a remembered deletion (snapshot load); false if the slot
    /// already remembers TOMBSTONES_PER_SLOT deletions or this mark, or
    /// the index is older than one it remembers (a file this Keel did not
    /// write).
    pub fn remember(&mut self, slot: u16, mark: u64, index: u64) -> bool {
        assert!(self.owns(slot));
        let offset = slot - self.slots.start;
        let stones = self.tombstones.entry(offset).or_default();
        let fits = (stones.len as usize) < TOMBSTONES_PER_SLOT
            && stones.deleted_at(mark).is_none()
            && stones.marks().iter().all(|(_, i)| *i <= index);
        if fits {
            assert_eq!(stones.record(mark, index), None);
        }
        fits
    }

    /// Memory held by the shard's tables and entries (an estimate:
    /// allocator rounding is not counted).
    pub fn memory_bytes(&self) -> usize {
        let slots: usize = self
            .tables
            .iter()
            .map(|t| t.allocation_size() + std::mem::size_of::<HashTable<Entry>>())
            .sum();
        let heap: usize = self.entries().map(Entry::heap_bytes).sum();
        let deadlines: usize = self.deadlines.iter().map(|(_, k)| 40 + k.len()).sum();
        let tombstones = self.tombstones.allocation_size();
        slots + heap + deadlines + tombstones + 8 * self.deleted_at.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(index: u64, now_ms: i64) -> Ctx {
        Ctx {
            stamp: index,
            now_ms,
        }
    }

    #[test]
    fn expired_keys_are_hidden_from_reads_and_deleted_by_writes() {
        let mut shard = Shard::new(0..16384);
        let mut entry = Entry::string(b"k", b"v", 1);
        entry.expire_at_ms = 100;
        shard.insert(entry);
        assert_eq!(shard.expiring_count(), 1);
        assert!(shard.get(b"k", 99).is_some());
        assert!(shard.get(b"k", 100).is_none());
        assert_eq!(shard.key_count(), 1, "a read changes nothing");
        assert_eq!(shard.due(100, 10), vec![Bytes::from(&b"k"[..])]);
        assert!(shard.live(b"k", ctx(5, 100)).is_none());
        assert_eq!(shard.key_count(), 0);
        assert_eq!(shard.expiring_count(), 0);
        assert_eq!(shard.stats.expired_keys.get(), 1);
    }

    #[test]
    fn watch_tokens_see_changes_creations_and_deletions() {
        let mut shard = Shard::new(0..16384);
        shard.insert(Entry::string(b"a", b"1", 3));
        assert!(!shard.changed_since(b"a", 3, 0, 0));
        shard.live(b"a", ctx(4, 0)).unwrap().version = 4;
        assert!(shard.changed_since(b"a", 3, 0, 0));
        assert!(!shard.changed_since(b"b", 4, 0, 0));
        shard.insert(Entry::string(b"b", b"1", 5));
        assert!(
            shard.changed_since(b"b", 4, 0, 0),
            "created after the watch"
        );
        assert!(shard.delete(b"b", ctx(6, 0)));
        assert!(
            shard.changed_since(b"b", 5, 0, 0),
            "deleted after the watch"
        );
        assert!(!shard.changed_since(b"b", 6, 0, 0));
        shard.set_expiry(b"a", 50);
        assert!(shard.changed_since(b"a", 4, 10, 60), "expired since");
        assert!(
            !shard.changed_since(b"a", 4, 55, 60),
            "already expired when watched"
        );
    }

    #[test]
    fn a_key_watched_while_absent_sees_its_own_deletion_not_its_slots() {
        let mut shard = Shard::new(0..16384);
        // `{t}a` and the others share a slot (the hash tag).
        shard.insert(Entry::string(b"{t}b", b"1", 1));
        shard.insert(Entry::string(b"{t}a", b"1", 2));
        assert!(shard.delete(b"{t}a", ctx(3, 0)));
        let token = 3; // `{t}a` watched here, absent.
        assert!(shard.delete(b"{t}b", ctx(4, 0)));
        assert!(
            !shard.changed_since(b"{t}a", token, 0, 0),
            "another key of the slot"
        );
        assert!(
            shard.changed_since(b"{t}b", 3, 0, 0),
            "deleted after the watch"
        );
        assert!(!shard.changed_since(b"{t}b", 4, 0, 0), "deleted before it");
        shard.insert(Entry::string(b"{t}a", b"2", 5));
        assert!(shard.delete(b"{t}a", ctx(6, 0)));
        assert!(
            shard.changed_since(b"{t}a", token, 0, 0),
            "created and deleted since"
        );
        // More deletions in the slot than it remembers: the oldest are
        // forgotten, and a watch older than them fails conservatively.
        for (i, key) in [&b"{t}c"[..], b"{t}d", b"{t}e", b"{t}f"].iter().enumerate() {
            shard.insert(Entry::string(key, b"1", 7 + i as u64));
            assert!(shard.delete(key, ctx(20 + i as u64, 0)));
        }
        assert!(
            shard.changed_since(b"{t}z", token, 0, 0),
            "forgotten: conservative"
        );
        assert!(
            !shard.changed_since(b"{t}z", 20, 0, 0),
            "remembered ones are not {{t}}z"
        );
        assert_eq!(shard.tombstones().len(), TOMBSTONES_PER_SLOT);
        assert!(!shard.changed_since(b"other", token, 0, 0), "another slot");
    }

    #[test]
    fn flushdb_remembers_small_slots_key_by_key_the_same_on_every_replica() {
        let keys: Vec<Vec<u8>> = (0..3).map(|i| format!("{{s}}{i}").into_bytes()).collect();
        let big: Vec<Vec<u8>> = (0..9).map(|i| format!("{{b}}{i}").into_bytes()).collect();
        let load = |order: &[usize]| {
            let mut shard = Shard::new(0..16384);
            for &i in order {
                shard.insert(Entry::string(&keys[i], b"v", 1));
            }
            for key in &big {
                shard.insert(Entry::string(key, b"v", 1));
            }
            shard.clear(ctx(10, 0));
            shard
        };
        let (one, other) = (load(&[0, 1, 2]), load(&[2, 0, 1]));
        assert_eq!(one.tombstones(), other.tombstones());
        assert_eq!(
            one.deletions().collect::<Vec<_>>(),
            other.deletions().collect::<Vec<_>>()
        );
        assert!(
            one.changed_since(&keys[1], 9, 0, 0),
            "a flushed key was touched"
        );
        assert!(
            !one.changed_since(b"{s}absent", 9, 0, 0),
            "an absent one was not"
        );
        assert!(
            one.changed_since(b"{b}absent", 9, 0, 0),
            "a large slot: conservative"
        );
        assert_eq!(one.key_count(), 0);
    }

    #[test]
    fn tombstones_keep_the_newest_and_refuse_what_no_replica_writes() {
        let mut t = Tombstones::default();
        for (mark, index) in [(5, 1), (3, 1), (9, 2), (1, 3)] {
            assert_eq!(t.record(mark, index), None);
        }
        assert_eq!(t.record(9, 4), None, "a mark seen again moves forward");
        assert_eq!(
            t.record(7, 5),
            Some((3, 1)),
            "the oldest, lowest mark first"
        );
        assert_eq!(t.deleted_at(9), Some(4));
        assert_eq!(t.deleted_at(3), None);
        let mut shard = Shard::new(0..16384);
        assert!(shard.remember(7, 1, 10));
        assert!(!shard.remember(7, 1, 11), "a mark twice");
        assert!(!shard.remember(7, 2, 9), "out of order");
        for mark in 2..=4 {
            assert!(shard.remember(7, mark, 12));
        }
        assert!(!shard.remember(7, 5, 12), "one too many");
    }

    #[test]
    fn prefetch_finds_nothing_and_changes_nothing() {
        let mut shard = Shard::new(0..16384);
        let empty: Vec<(u16, &[u8])> = vec![(key_slot(b"x"), b"x")];
        shard.prefetch(&empty); // every table still empty
        let names: Vec<String> = (0..PREFETCH_KEYS_MAX * 4)
            .map(|i| format!("key:{i}"))
            .collect();
        for (i, name) in names.iter().enumerate() {
            // Inline and out-of-line values alike.
            let value = vec![b'v'; i % 40];
            shard.insert(Entry::string(name.as_bytes(), &value, 1));
        }
        let before = shard.clone();
        let mut keys: Vec<(u16, &[u8])> = names
            .iter()
            .step_by(4)
            .map(|name| (key_slot(name.as_bytes()), name.as_bytes()))
            .collect();
        keys.truncate(PREFETCH_KEYS_MAX - 1);
        keys.push((key_slot(b"absent"), b"absent"));
        assert_eq!(keys.len(), PREFETCH_KEYS_MAX);
        shard.prefetch(&keys);
        shard.prefetch(&[]);
        assert_eq!(shard.key_count(), names.len());
        for name in &names {
            let (now, then) = (shard.peek(name.as_bytes()), before.peek(name.as_bytes()));
            assert_eq!(now.map(Entry::key), then.map(Entry::key));
        }
        assert!(shard.peek(b"absent").is_none());
        assert_eq!(shard.stats.keyspace_hits.get(), 0, "a prefetch is no read");
        assert_eq!(shard.stats.keyspace_misses.get(), 0);
    }

    #[test]
    fn prefetch_owned_takes_this_shards_keys_only() {
        let mut shard = Shard::new(0..8192);
        shard.insert(Entry::string(b"bar", b"v", 1)); // slot 5061
        let keys: Vec<(u16, &[u8])> = [&b"bar"[..], b"foo", b"bar", b"foo"]
            .into_iter()
            .cycle()
            .take(PREFETCH_KEYS_MAX * 3)
            .map(|key| (key_slot(key), key))
            .collect();
        shard.prefetch_owned(keys.iter().copied()); // "foo" is slot 12182
        shard.prefetch_owned([(key_slot(b"foo"), &b"foo"[..])]);
        assert_eq!(shard.key_count(), 1);
        assert_eq!(shard.stats.keyspace_hits.get(), 0);
    }

    #[test]
    #[should_panic(expected = "is not in")]
    fn prefetch_refuses_another_shards_key() {
        let shard = Shard::new(0..8192);
        let key: &[u8] = b"foo"; // slot 12182
        assert!(!shard.owns(key_slot(key)));
        shard.prefetch(&[(key_slot(key), key)]);
    }

    #[test]
    fn scan_order_is_stable_and_resumable() {
        let mut shard = Shard::new(0..16384);
        let slot = key_slot(b"{t}a");
        for name in ["{t}a", "{t}b", "{t}c", "{t}d"] {
            shard.insert(Entry::string(name.as_bytes(), b"", 1));
        }
        let all = shard.scan_slot(slot, 0);
        assert_eq!(all.len(), 4);
        let rest = shard.scan_slot(slot, all[2].0);
        assert_eq!(rest.len(), 2);
        assert_eq!(rest[0].1.key(), all[2].1.key());
        assert!(scan_hash(b"x") < 1 << CURSOR_HASH_BITS);
    }
}
