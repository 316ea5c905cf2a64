//! The registry of watchers: session ids mapped to dense `u32` watcher ids.
//!
//! Dense ids keep the per-path bitmaps small (ids of one session population
//! share roaring containers). Each id counts the table entries that carry it,
//! so the registry knows without any path index when an id holds no bits and
//! can be handed to another session.
//!
//! A removed session's id becomes *dead*: its session mapping is gone at once,
//! but its bits stay in the path bitmaps until a sweep clears them (like
//! ZooKeeper's `WatchManagerOptimized` + `WatcherCleaner`). A dead id is never
//! reused before its last bit is cleared, so a new session can never inherit a
//! dead session's watches.

use std::collections::HashMap;

use roaring::RoaringBitmap;

/// Sweep dead watchers once their entries reach this share of all stored
/// entries. A sweep visits every path, and every stored path holds at least one
/// entry, so a sweep costs O(entries) = O(dead entries × 100 / percent): the
/// cost is amortized against the dead entries it clears, and garbage never
/// exceeds this share of the bitmaps.
pub(super) const SWEEP_DEAD_PERCENT: u64 = 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    /// Holds no bits anywhere; in `free_ids`.
    Free,
    /// Mapped from `session_id` in `id_by_session`.
    Live,
    /// Session removed, bits not yet swept; in `dead_ids`.
    Dead,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    session_id: i64,
    /// Table entries (bits) carrying this id, over all paths and tables.
    entry_count: u32,
    state: SlotState,
}

#[derive(Default)]
pub(super) struct Watchers {
    id_by_session: HashMap<i64, u32>,
    slots: Vec<Slot>,
    /// Free ids; the lowest is reused first to keep ids dense.
    free_ids: RoaringBitmap,
    dead_ids: RoaringBitmap,
    /// Entries carrying a live id.
    live_entries: u64,
    /// Entries carrying a dead id (garbage awaiting a sweep).
    dead_entries: u64,
}

impl Watchers {
    pub(super) fn live_id(&self, session_id: i64) -> Option<u32> {
        let id = *self.id_by_session.get(&session_id)?;
        let slot = self.slot(id);
        assert_eq!(slot.state, SlotState::Live);
        assert_eq!(slot.session_id, session_id);
        Some(id)
    }

    /// The session owning `id`, or None if the id is dead or free.
    pub(super) fn session_of(&self, id: u32) -> Option<i64> {
        let slot = self.slot(id);
        (slot.state == SlotState::Live).then_some(slot.session_id)
    }

    /// The live id of `session_id`, allocating the lowest free id if needed.
    /// The caller must then add at least one entry for it.
    pub(super) fn acquire(&mut self, session_id: i64) -> u32 {
        if let Some(id) = self.live_id(session_id) {
            return id;
        }
        let id = self.allocate();
        let slot = &mut self.slots[id as usize];
        assert_eq!(slot.state, SlotState::Free);
        assert_eq!(slot.entry_count, 0);
        *slot = Slot {
            session_id,
            entry_count: 0,
            state: SlotState::Live,
        };
        self.id_by_session.insert(session_id, id);
        id
    }

    fn allocate(&mut self) -> u32 {
        if let Some(id) = self.free_ids.min() {
            self.free_ids.remove(id);
            return id;
        }
        let id = u32::try_from(self.slots.len()).expect("watcher ids exhausted");
        assert!(id < u32::MAX, "watcher ids exhausted");
        self.slots.push(Slot {
            session_id: 0,
            entry_count: 0,
            state: SlotState::Free,
        });
        id
    }

    pub(super) fn entry_added(&mut self, id: u32) {
        let slot = &mut self.slots[id as usize];
        assert_eq!(
            slot.state,
            SlotState::Live,
            "entries are only added for live ids"
        );
        slot.entry_count = slot
            .entry_count
            .checked_add(1)
            .expect("entry count overflow");
        self.live_entries += 1;
    }

    /// One entry carrying `id` was cleared. The id is freed with its last entry.
    pub(super) fn entry_removed(&mut self, id: u32) {
        let slot = &mut self.slots[id as usize];
        assert!(slot.entry_count > 0);
        slot.entry_count -= 1;
        match slot.state {
            SlotState::Live => self.live_entries -= 1,
            SlotState::Dead => self.dead_entries -= 1,
            SlotState::Free => unreachable!("a free id carries no entries"),
        }
        if slot.entry_count == 0 {
            self.release(id);
        }
    }

    fn release(&mut self, id: u32) {
        let slot = self.slots[id as usize];
        assert_eq!(slot.entry_count, 0);
        match slot.state {
            SlotState::Live => {
                let removed = self.id_by_session.remove(&slot.session_id);
                assert_eq!(removed, Some(id));
            }
            SlotState::Dead => assert!(self.dead_ids.remove(id)),
            SlotState::Free => unreachable!("double release of watcher {id}"),
        }
        self.slots[id as usize].state = SlotState::Free;
        assert!(self.free_ids.insert(id));
    }

    /// Marks the session's id dead. Returns false if the session holds no id.
    pub(super) fn kill(&mut self, session_id: i64) -> bool {
        let Some(id) = self.live_id(session_id) else {
            return false;
        };
        self.id_by_session.remove(&session_id);
        let slot = &mut self.slots[id as usize];
        assert!(slot.entry_count > 0, "live ids always carry entries");
        slot.state = SlotState::Dead;
        self.live_entries -= u64::from(slot.entry_count);
        self.dead_entries += u64::from(slot.entry_count);
        assert!(self.dead_ids.insert(id));
        true
    }

    pub(super) fn dead_ids(&self) -> &RoaringBitmap {
        &self.dead_ids
    }

    pub(super) fn sweep_due(&self) -> bool {
        let total = self.live_entries + self.dead_entries;
        self.dead_entries > 0 && self.dead_entries * 100 >= total * SWEEP_DEAD_PERCENT
    }

    /// A sweep cleared `cleared_entries` bits, which must be every dead entry:
    /// all dead ids become free.
    pub(super) fn release_swept(&mut self, cleared_entries: u64) {
        assert_eq!(
            cleared_entries, self.dead_entries,
            "sweep missed dead entries"
        );
        for id in std::mem::take(&mut self.dead_ids) {
            let slot = &mut self.slots[id as usize];
            assert_eq!(slot.state, SlotState::Dead);
            slot.entry_count = 0;
            slot.state = SlotState::Free;
            assert!(self.free_ids.insert(id));
        }
        self.dead_entries = 0;
    }

    pub(super) fn live_entries(&self) -> u64 {
        self.live_entries
    }

    pub(super) fn session_count(&self) -> usize {
        self.id_by_session.len()
    }

    fn slot(&self, id: u32) -> &Slot {
        &self.slots[id as usize]
    }

    /// Checks the registry against per-id entry counts recounted from the
    /// bitmaps. O(ids); for tests.
    #[cfg(test)]
    pub(super) fn assert_consistent(&self, recounted: &HashMap<u32, u32>) {
        let (mut live, mut dead) = (0u64, 0u64);
        for (index, slot) in self.slots.iter().enumerate() {
            let id = index as u32;
            let bits = recounted.get(&id).copied().unwrap_or(0);
            assert_eq!(slot.entry_count, bits, "entry count of watcher {id}");
            assert_eq!(self.free_ids.contains(id), slot.state == SlotState::Free);
            assert_eq!(self.dead_ids.contains(id), slot.state == SlotState::Dead);
            match slot.state {
                SlotState::Free => assert_eq!(bits, 0),
                SlotState::Live => {
                    assert!(bits > 0, "live watcher {id} without entries");
                    assert_eq!(self.id_by_session.get(&slot.session_id), Some(&id));
                    live += u64::from(bits);
                }
                SlotState::Dead => {
                    assert!(bits > 0, "dead watcher {id} without entries");
                    dead += u64::from(bits);
                }
            }
        }
        assert_eq!(self.live_entries, live);
        assert_eq!(self.dead_entries, dead);
        assert!(
            !self.sweep_due(),
            "garbage above SWEEP_DEAD_PERCENT after an operation"
        );
    }

    #[cfg(test)]
    pub(super) fn slot_count(&self) -> usize {
        self.slots.len()
    }
}
