//! The watches registered on one path.
//!
//! ZooKeeper's `DataTree` keeps two independent watch tables (`dataWatches` and
//! `childWatches`), and in 3.8 each table remembers exactly one `WatcherMode`
//! per (watcher, path): registering again overwrites the mode
//! (`WatcherModeManager.setWatcherMode`). So one path holds, per watcher id, at
//! most one mode per table.
//!
//! Two representations, like ZooKeeper's `BitHashSet` (a small set in front of
//! a bitmap): most paths have a handful of watchers, and a `RoaringBitmap`
//! costs over a hundred heap bytes before its first id (its container vector
//! grows to four containers at once), so small paths keep a sorted entry list
//! and switch to one bitmap per (table, mode) when they grow.

use roaring::RoaringBitmap;

/// A path keeps the entry list up to this many watcher ids (8 bytes each).
const SMALL_IDS_MAX: usize = 32;
/// A bitmap path returns to the entry list once its entries drop to this.
/// Below `SMALL_IDS_MAX` so a path hovering at the limit does not flip-flop.
const SMALL_ENTRIES_DEMOTE_MAX: u64 = 16;

/// Which of ZooKeeper's two per-tree watch tables an entry lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Table {
    /// `dataWatches`: getData and exists watches, triggered by NodeCreated,
    /// NodeDataChanged and NodeDeleted.
    Data,
    /// `childWatches`: getChildren watches, triggered by NodeChildrenChanged
    /// (on the parent) and NodeDeleted.
    Child,
}

impl Table {
    pub(super) const ALL: [Table; 2] = [Table::Data, Table::Child];

    pub(super) fn index(self) -> usize {
        match self {
            Table::Data => 0,
            Table::Child => 1,
        }
    }
}

/// ZooKeeper's `WatcherMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// One-shot: removed from its table when it fires.
    Standard,
    /// Stays after firing; exact path only.
    Persistent,
    /// Stays after firing; the path and all descendants, never NodeChildrenChanged.
    Recursive,
}

impl Mode {
    pub(super) const ALL: [Mode; 3] = [Mode::Standard, Mode::Persistent, Mode::Recursive];

    fn index(self) -> usize {
        match self {
            Mode::Standard => 0,
            Mode::Persistent => 1,
            Mode::Recursive => 2,
        }
    }
}

/// Counts of entries cleared by `PathWatches::subtract`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Cleared {
    pub(super) entries: u64,
    /// Recursive entries cleared, indexed by `Table::index`.
    pub(super) recursive: [u64; 2],
}

impl Cleared {
    fn count(&mut self, table: Table, mode: Mode, entries: u64) {
        self.entries += entries;
        if mode == Mode::Recursive {
            self.recursive[table.index()] += entries;
        }
    }
}

/// One watcher id's modes in both tables (small representation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    id: u32,
    /// Indexed by `Table::index`; at least one is `Some`.
    modes: [Option<Mode>; 2],
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.modes.iter().all(Option::is_none)
    }
}

const SLOT_COUNT: usize = Table::ALL.len() * Mode::ALL.len();

/// One bitmap per (table, mode); within a table the bitmaps are disjoint.
#[derive(Default)]
pub(super) struct Bitmaps([RoaringBitmap; SLOT_COUNT]);

impl Bitmaps {
    fn slot(table: Table, mode: Mode) -> usize {
        table.index() * Mode::ALL.len() + mode.index()
    }

    fn get(&self, table: Table, mode: Mode) -> &RoaringBitmap {
        &self.0[Self::slot(table, mode)]
    }

    fn get_mut(&mut self, table: Table, mode: Mode) -> &mut RoaringBitmap {
        &mut self.0[Self::slot(table, mode)]
    }

    fn entry_count(&self) -> u64 {
        self.0.iter().map(RoaringBitmap::len).sum()
    }
}

pub(super) enum PathWatches {
    /// Sorted by id, at most `SMALL_IDS_MAX` entries.
    Small(Vec<Entry>),
    /// Boxed so the small form, the common one, stays a 24-byte map value.
    Large(Box<Bitmaps>),
}

impl Default for PathWatches {
    fn default() -> Self {
        PathWatches::Small(Vec::new())
    }
}

impl PathWatches {
    /// The mode under which `id` is registered in `table`, if any.
    pub(super) fn mode_of(&self, table: Table, id: u32) -> Option<Mode> {
        match self {
            PathWatches::Small(entries) => {
                let index = entries.binary_search_by_key(&id, |e| e.id).ok()?;
                entries[index].modes[table.index()]
            }
            PathWatches::Large(bitmaps) => {
                let mut found = None;
                for mode in Mode::ALL {
                    if bitmaps.get(table, mode).contains(id) {
                        assert!(found.is_none(), "watcher {id} has two modes in {table:?}");
                        found = Some(mode);
                    }
                }
                found
            }
        }
    }

    /// Registers `id` in `table` under `mode`, replacing any previous mode
    /// (ZooKeeper 3.8: last registration wins). Returns the previous mode.
    pub(super) fn set_mode(&mut self, table: Table, id: u32, mode: Mode) -> Option<Mode> {
        match self {
            PathWatches::Small(entries) => {
                let previous = small_set_mode(entries, table, id, mode);
                if entries.len() > SMALL_IDS_MAX {
                    self.promote();
                }
                previous
            }
            PathWatches::Large(bitmaps) => large_set_mode(bitmaps, table, id, mode),
        }
    }

    /// Removes `id` from `table` whatever its mode. Returns the mode removed.
    pub(super) fn take(&mut self, table: Table, id: u32) -> Option<Mode> {
        let taken = match self {
            PathWatches::Small(entries) => {
                let index = entries.binary_search_by_key(&id, |e| e.id).ok()?;
                let taken = entries[index].modes[table.index()].take();
                if entries[index].is_empty() {
                    entries.remove(index);
                }
                taken
            }
            PathWatches::Large(bitmaps) => {
                let mode = Mode::ALL
                    .into_iter()
                    .find(|&mode| bitmaps.get(table, mode).contains(id))?;
                assert!(bitmaps.get_mut(table, mode).remove(id));
                Some(mode)
            }
        };
        self.demote_if_small();
        taken
    }

    /// Removes and returns every one-shot entry of `table`: they are firing.
    pub(super) fn take_standard(&mut self, table: Table) -> RoaringBitmap {
        let taken = match self {
            PathWatches::Small(entries) => {
                let mut taken = RoaringBitmap::new();
                for entry in entries.iter_mut() {
                    if entry.modes[table.index()] == Some(Mode::Standard) {
                        entry.modes[table.index()] = None;
                        assert!(taken.push(entry.id), "entries are sorted by id");
                    }
                }
                entries.retain(|entry| !entry.is_empty());
                taken
            }
            PathWatches::Large(bitmaps) => std::mem::take(bitmaps.get_mut(table, Mode::Standard)),
        };
        self.demote_if_small();
        taken
    }

    /// Adds the ids registered in `table` under `mode` to `ids`.
    pub(super) fn union_into(&self, table: Table, mode: Mode, ids: &mut RoaringBitmap) {
        match self {
            PathWatches::Small(entries) => {
                for entry in entries {
                    if entry.modes[table.index()] == Some(mode) {
                        ids.insert(entry.id);
                    }
                }
            }
            PathWatches::Large(bitmaps) => *ids |= bitmaps.get(table, mode),
        }
    }

    /// Every watcher id registered in `table`, whatever the mode.
    pub(super) fn ids(&self, table: Table) -> RoaringBitmap {
        let mut ids = RoaringBitmap::new();
        for mode in Mode::ALL {
            self.union_into(table, mode, &mut ids);
        }
        ids
    }

    pub(super) fn is_empty(&self) -> bool {
        match self {
            PathWatches::Small(entries) => entries.is_empty(),
            PathWatches::Large(bitmaps) => bitmaps.0.iter().all(RoaringBitmap::is_empty),
        }
    }

    /// True if `table` holds an entry of an id outside `dead`.
    pub(super) fn has_live(&self, table: Table, dead: &RoaringBitmap) -> bool {
        match self {
            PathWatches::Small(entries) => entries
                .iter()
                .any(|e| e.modes[table.index()].is_some() && !dead.contains(e.id)),
            PathWatches::Large(bitmaps) => Mode::ALL
                .iter()
                .any(|&mode| !bitmaps.get(table, mode).is_subset(dead)),
        }
    }

    /// Clears every entry of an id in `dead`.
    pub(super) fn subtract(&mut self, dead: &RoaringBitmap) -> Cleared {
        let mut cleared = Cleared::default();
        match self {
            PathWatches::Small(entries) => entries.retain(|entry| {
                if !dead.contains(entry.id) {
                    return true;
                }
                for table in Table::ALL {
                    if let Some(mode) = entry.modes[table.index()] {
                        cleared.count(table, mode, 1);
                    }
                }
                false
            }),
            PathWatches::Large(bitmaps) => {
                for table in Table::ALL {
                    for mode in Mode::ALL {
                        let bitmap = bitmaps.get_mut(table, mode);
                        let before = bitmap.len();
                        *bitmap -= dead;
                        cleared.count(table, mode, before - bitmap.len());
                    }
                }
            }
        }
        self.demote_if_small();
        cleared
    }

    /// Bytes of watcher-id payload: the entry list, or the bitmaps in roaring's
    /// portable serialization (2 bytes per id in an array container, plus
    /// container framing). Excludes allocator slack and the path key.
    pub(super) fn payload_bytes(&self) -> usize {
        match self {
            PathWatches::Small(entries) => entries.len() * std::mem::size_of::<Entry>(),
            PathWatches::Large(bitmaps) => bitmaps
                .0
                .iter()
                .filter(|bitmap| !bitmap.is_empty())
                .map(RoaringBitmap::serialized_size)
                .sum(),
        }
    }

    fn promote(&mut self) {
        let PathWatches::Small(entries) = self else {
            unreachable!("only the small form is promoted");
        };
        let mut bitmaps = Box::<Bitmaps>::default();
        for entry in entries.iter() {
            for table in Table::ALL {
                if let Some(mode) = entry.modes[table.index()] {
                    assert!(bitmaps.get_mut(table, mode).push(entry.id));
                }
            }
        }
        *self = PathWatches::Large(bitmaps);
    }

    fn demote_if_small(&mut self) {
        let PathWatches::Large(bitmaps) = self else {
            return;
        };
        if bitmaps.entry_count() > SMALL_ENTRIES_DEMOTE_MAX {
            return;
        }
        let mut ids = RoaringBitmap::new();
        for bitmap in &bitmaps.0 {
            ids |= bitmap;
        }
        let entries: Vec<Entry> = ids
            .iter()
            .map(|id| Entry {
                id,
                modes: Table::ALL.map(|table| self.mode_of(table, id)),
            })
            .collect();
        *self = PathWatches::Small(entries);
    }

    /// Checks the representation invariants. For tests.
    #[cfg(test)]
    pub(super) fn assert_valid(&self) {
        match self {
            PathWatches::Small(entries) => {
                assert!(entries.len() <= SMALL_IDS_MAX);
                assert!(entries.windows(2).all(|pair| pair[0].id < pair[1].id));
                assert!(entries.iter().all(|entry| !entry.is_empty()));
            }
            PathWatches::Large(bitmaps) => {
                assert!(bitmaps.entry_count() > SMALL_ENTRIES_DEMOTE_MAX);
                for table in Table::ALL {
                    let [standard, persistent, recursive] =
                        Mode::ALL.map(|m| bitmaps.get(table, m));
                    assert!(standard.is_disjoint(persistent));
                    assert!(standard.is_disjoint(recursive));
                    assert!(persistent.is_disjoint(recursive));
                }
            }
        }
    }

    #[cfg(test)]
    pub(super) fn is_large(&self) -> bool {
        matches!(self, PathWatches::Large(_))
    }
}

fn small_set_mode(entries: &mut Vec<Entry>, table: Table, id: u32, mode: Mode) -> Option<Mode> {
    match entries.binary_search_by_key(&id, |e| e.id) {
        Ok(index) => entries[index].modes[table.index()].replace(mode),
        Err(index) => {
            if entries.is_empty() {
                // Most watched paths have one watcher: skip Vec's minimum of 4.
                entries.reserve_exact(1);
            }
            let mut modes = [None; 2];
            modes[table.index()] = Some(mode);
            entries.insert(index, Entry { id, modes });
            None
        }
    }
}

fn large_set_mode(bitmaps: &mut Bitmaps, table: Table, id: u32, mode: Mode) -> Option<Mode> {
    if !bitmaps.get_mut(table, mode).insert(id) {
        return Some(mode); // Re-registration: nothing changes.
    }
    let mut previous = None;
    for other in Mode::ALL {
        if other != mode && bitmaps.get_mut(table, other).remove(id) {
            assert!(
                previous.is_none(),
                "watcher {id} had two modes in {table:?}"
            );
            previous = Some(other);
        }
    }
    previous
}
