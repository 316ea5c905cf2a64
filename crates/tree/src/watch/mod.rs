//! Server-side watch bookkeeping with ZooKeeper 3.8 semantics, sans-IO.
//!
//! Like ZooKeeper's `WatchManagerOptimized`, each watched path maps to bitmaps
//! of dense watcher ids instead of sets of connections, so memory grows with
//! the number of watches (about 2 bytes each in a roaring array container), not
//! with paths × watchers object graphs. Watchers are sessions. Paths with few
//! watchers keep a short sorted entry list instead (see `path_watches`), since
//! an empty roaring bitmap's first insert alone allocates over 100 bytes.
//!
//! # Semantics (ZooKeeper 3.8 `DataTree` + `WatchManager`)
//!
//! * Two tables. `getData` and `exists` watches are one-shot entries of the
//!   *data* table (an exists watch on a missing node is a data watch);
//!   `getChildren` watches are one-shot entries of the *child* table.
//!   `addWatch` (persistent or persistent-recursive) registers the path in
//!   *both* tables, as `DataTree.addWatch` does.
//! * One mode per (session, path, table): registering again overwrites the
//!   mode, exactly like 3.8's `WatcherModeManager` (so a `getData` watch set on
//!   a path that has a persistent watch turns the data half one-shot; 3.9's
//!   ZOOKEEPER-4466 changed this, 3.8 did not).
//! * Triggers ([`WatchManager::trigger`], one call per znode event):
//!   NodeCreated and NodeDataChanged fire the data table of the path;
//!   NodeChildrenChanged fires the child table of the (parent) path; NodeDeleted
//!   fires the data table and then the child table of the path, suppressing
//!   sessions the data table already notified. At the path itself, one-shot,
//!   persistent and recursive entries fire; at each ancestor (walked like
//!   `PathParentIterator`) only recursive entries fire; recursive entries never
//!   fire for NodeChildrenChanged. Fired one-shot entries are removed, even
//!   those whose delivery was suppressed.
//! * Each session is returned at most once per trigger: ZooKeeper collects
//!   watchers into a set per table and suppresses the child table's set by the
//!   data table's, so a connection gets one notification per event.

mod path_watches;
mod watchers;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

use roaring::RoaringBitmap;

use path_watches::{Mode, PathWatches, Table};
use watchers::Watchers;

/// ZooKeeper `EventType.NodeCreated`.
pub const EVENT_NODE_CREATED: i32 = 1;
/// ZooKeeper `EventType.NodeDeleted`.
pub const EVENT_NODE_DELETED: i32 = 2;
/// ZooKeeper `EventType.NodeDataChanged`.
pub const EVENT_NODE_DATA_CHANGED: i32 = 3;
/// ZooKeeper `EventType.NodeChildrenChanged`.
pub const EVENT_NODE_CHILDREN_CHANGED: i32 = 4;

/// What a client asked to watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchKind {
    /// `getData(watch=true)`: one-shot, data table.
    Data,
    /// `exists(watch=true)`: one-shot, data table (same entry as `Data`).
    Exist,
    /// `getChildren(watch=true)`: one-shot, child table.
    Child,
    /// `addWatch(PERSISTENT)`: stays; both tables, exact path.
    Persistent,
    /// `addWatch(PERSISTENT_RECURSIVE)`: stays; both tables, path and descendants.
    PersistentRecursive,
}

impl WatchKind {
    /// The (table, mode) entries `DataTree` creates for this kind of watch.
    fn registrations(self) -> &'static [(Table, Mode)] {
        match self {
            WatchKind::Data | WatchKind::Exist => &[(Table::Data, Mode::Standard)],
            WatchKind::Child => &[(Table::Child, Mode::Standard)],
            WatchKind::Persistent => &[
                (Table::Data, Mode::Persistent),
                (Table::Child, Mode::Persistent),
            ],
            WatchKind::PersistentRecursive => &[
                (Table::Data, Mode::Recursive),
                (Table::Child, Mode::Recursive),
            ],
        }
    }
}

/// ZooKeeper's `WatcherType` of removeWatches / checkWatches requests.
///
/// 3.8 only knows codes 1..=3 (its `WatcherType.fromInt` throws on anything
/// else); 4 and 5 are the codes ZooKeeper 3.9 added (ZOOKEEPER-4472), accepted
/// here as an extension. Whether to accept them on the wire is the caller's call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatcherType {
    /// Code 1: the child-table entry, whatever its mode (3.8 removes a
    /// persistent watch's child half too).
    Children,
    /// Code 2: the data-table entry, whatever its mode.
    Data,
    /// Code 3: both tables, persistent watches included.
    Any,
    /// Code 4: persistent entries in both tables.
    Persistent,
    /// Code 5: persistent-recursive entries in both tables.
    PersistentRecursive,
}

impl WatcherType {
    pub fn from_code(code: i32) -> Option<WatcherType> {
        match code {
            1 => Some(WatcherType::Children),
            2 => Some(WatcherType::Data),
            3 => Some(WatcherType::Any),
            4 => Some(WatcherType::Persistent),
            5 => Some(WatcherType::PersistentRecursive),
            _ => None,
        }
    }

    /// Whether an entry of `table` registered under `mode` is of this type.
    fn selects(self, table: Table, mode: Mode) -> bool {
        match self {
            WatcherType::Children => table == Table::Child,
            WatcherType::Data => table == Table::Data,
            WatcherType::Any => true,
            WatcherType::Persistent => mode == Mode::Persistent,
            WatcherType::PersistentRecursive => mode == Mode::Recursive,
        }
    }
}

/// Counts for the `wchs` four-letter word, which in ZooKeeper 3.8 describes
/// the data table only (`DataTree.getWatchesSummary`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchSummary {
    pub session_count: usize,
    pub path_count: usize,
    pub watch_count: usize,
}

/// All watches of one server. See the module documentation for semantics.
#[derive(Default)]
pub struct WatchManager {
    paths: HashMap<Box<str>, PathWatches>,
    watchers: Watchers,
    /// Entries in each table's recursive bitmaps, dead ones included; when
    /// zero, triggers skip the ancestor walk (ZooKeeper's `getRecursiveQty`).
    recursive_entries: [u64; 2],
}

impl WatchManager {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a watch. Re-registering the same kind is a no-op; another kind
    /// on the same (path, table) replaces the mode, as in ZooKeeper 3.8.
    pub fn add(&mut self, path: &str, session_id: i64, kind: WatchKind) {
        assert_path(path);
        let id = self.watchers.acquire(session_id);
        let registrations = kind.registrations();
        // One hash lookup on the hot path: this runs for every watching read.
        let previous = match self.paths.get_mut(path) {
            Some(watches) => set_modes(watches, id, registrations),
            None => {
                let mut watches = PathWatches::default();
                let previous = set_modes(&mut watches, id, registrations);
                self.paths.insert(path.into(), watches);
                previous
            }
        };
        for (&(table, mode), previous) in registrations.iter().zip(previous) {
            self.count_recursive(table, previous, Some(mode));
            if previous.is_none() {
                self.watchers.entry_added(id);
            }
        }
        assert_eq!(self.watchers.session_of(id), Some(session_id));
    }

    /// Fires the watches for one znode event (`event_type` is one of the
    /// `EVENT_*` codes; anything else is a caller bug and panics).
    ///
    /// For NodeCreated and NodeDeleted of `/a/b` the caller also triggers
    /// NodeChildrenChanged on `/a`, as `DataTree.createNode`/`deleteNode` do.
    ///
    /// Returns each session to notify at most once, sorted by session id.
    /// One-shot watches that fired are removed; persistent ones stay.
    pub fn trigger(&mut self, path: &str, event_type: i32) -> Vec<i64> {
        assert_path(path);
        let tables = tables_for_event(event_type);
        if !self.may_fire(path, event_type, tables) {
            self.sweep_if_due();
            return Vec::new();
        }
        let mut fired = RoaringBitmap::new();
        for &table in tables {
            fired |= self.collect(table, path, event_type);
        }
        fired -= self.watchers.dead_ids();
        // Map ids to sessions before consuming: consuming may free an id.
        let sessions = self.sessions_of(&fired);
        for &table in tables {
            self.consume_one_shot(table, path);
        }
        self.sweep_if_due();
        sessions
    }

    /// Whether `event_type` on `path` can fire anything: a watch on the
    /// path itself, or a recursive watch that an ancestor may hold. Most
    /// writes touch unwatched paths; they cost one lookup, not a bitmap
    /// per table and a lookup per table for `collect` and another for
    /// `consume_one_shot`. False only where `collect` finds nothing.
    fn may_fire(&self, path: &str, event_type: i32, tables: &[Table]) -> bool {
        let ancestors = event_type != EVENT_NODE_CHILDREN_CHANGED
            && tables
                .iter()
                .any(|table| self.recursive_entries[table.index()] > 0);
        ancestors || self.paths.contains_key(path)
    }

    /// Watcher ids of `table` that `event_type` on `path` fires.
    fn collect(&self, table: Table, path: &str, event_type: i32) -> RoaringBitmap {
        let recursive_fires = event_type != EVENT_NODE_CHILDREN_CHANGED;
        let mut fired = RoaringBitmap::new();
        if let Some(watches) = self.paths.get(path) {
            watches.union_into(table, Mode::Standard, &mut fired);
            watches.union_into(table, Mode::Persistent, &mut fired);
            if recursive_fires {
                watches.union_into(table, Mode::Recursive, &mut fired);
            }
        }
        if recursive_fires
            && self.recursive_entries[table.index()] > 0
            && !crate::planted::recursive_blind()
        {
            let mut ancestor = parent(path);
            while let Some(ancestor_path) = ancestor {
                if let Some(watches) = self.paths.get(ancestor_path) {
                    watches.union_into(table, Mode::Recursive, &mut fired);
                }
                ancestor = parent(ancestor_path);
            }
        }
        fired
    }

    /// Removes the one-shot entries of `table` at `path`: they just fired.
    fn consume_one_shot(&mut self, table: Table, path: &str) {
        let Some(watches) = self.paths.get_mut(path) else {
            return;
        };
        let fired_once = watches.take_standard(table);
        if watches.is_empty() {
            self.paths.remove(path);
        }
        for id in &fired_once {
            self.watchers.entry_removed(id);
        }
    }

    fn sessions_of(&self, ids: &RoaringBitmap) -> Vec<i64> {
        let mut sessions: Vec<i64> = ids
            .iter()
            .map(|id| self.watchers.session_of(id).expect("fired ids are live"))
            .collect();
        sessions.sort_unstable();
        assert!(sessions.windows(2).all(|pair| pair[0] < pair[1]));
        sessions
    }

    /// removeWatches: removes the session's entries at exactly `path` selected
    /// by the `WatcherType` code (see [`WatcherType`]). Unknown codes remove
    /// nothing. Returns true if something was removed (ZooKeeper answers
    /// NoWatcher otherwise).
    pub fn remove(&mut self, path: &str, session_id: i64, watcher_type: i32) -> bool {
        let Some(watcher_type) = WatcherType::from_code(watcher_type) else {
            return false;
        };
        let Some(id) = self.watchers.live_id(session_id) else {
            return false;
        };
        let Some(watches) = self.paths.get_mut(path) else {
            return false;
        };
        let mut removed = Vec::with_capacity(Table::ALL.len());
        for table in Table::ALL {
            match watches.mode_of(table, id) {
                Some(mode) if watcher_type.selects(table, mode) => {
                    assert_eq!(watches.take(table, id), Some(mode));
                    removed.push((table, mode));
                }
                _ => {}
            }
        }
        if watches.is_empty() {
            self.paths.remove(path);
        }
        for &(table, mode) in &removed {
            self.count_recursive(table, Some(mode), None);
            self.watchers.entry_removed(id);
        }
        self.sweep_if_due();
        !removed.is_empty()
    }

    /// checkWatches: whether `remove` with the same arguments would remove
    /// something. This is `WatchManagerOptimized`'s per-session check; 3.8's
    /// default `WatchManager.containsWatcher` answers true whenever *any*
    /// session watches the path, which we do not reproduce.
    pub fn contains(&self, path: &str, session_id: i64, watcher_type: i32) -> bool {
        let Some(watcher_type) = WatcherType::from_code(watcher_type) else {
            return false;
        };
        let Some(id) = self.watchers.live_id(session_id) else {
            return false;
        };
        let Some(watches) = self.paths.get(path) else {
            return false;
        };
        Table::ALL.iter().any(|&table| {
            watches
                .mode_of(table, id)
                .is_some_and(|mode| watcher_type.selects(table, mode))
        })
    }

    /// Drops every watch of a session (connection closed or session expired).
    ///
    /// O(1) now: the session's watcher id is marked dead, so it stops firing
    /// and stops being counted at once. Its bits are cleared by a sweep over
    /// all paths once dead entries reach `SWEEP_DEAD_PERCENT` of all entries,
    /// which amortizes the sweep against the entries it clears. The id is not
    /// reused before the sweep.
    pub fn remove_session(&mut self, session_id: i64) {
        if self.watchers.kill(session_id) {
            self.sweep_if_due();
        }
    }

    fn sweep_if_due(&mut self) {
        if self.watchers.sweep_due() {
            self.sweep_dead();
        }
    }

    /// Clears the bits of every dead watcher id and frees those ids.
    fn sweep_dead(&mut self) {
        let dead = self.watchers.dead_ids().clone();
        let mut cleared_entries = 0;
        let mut cleared_recursive = [0u64; 2];
        self.paths.retain(|_, watches| {
            let cleared = watches.subtract(&dead);
            cleared_entries += cleared.entries;
            cleared_recursive[0] += cleared.recursive[0];
            cleared_recursive[1] += cleared.recursive[1];
            !watches.is_empty()
        });
        for table in Table::ALL {
            let index = table.index();
            assert!(self.recursive_entries[index] >= cleared_recursive[index]);
            self.recursive_entries[index] -= cleared_recursive[index];
        }
        self.watchers.release_swept(cleared_entries);
    }

    fn count_recursive(&mut self, table: Table, from: Option<Mode>, to: Option<Mode>) {
        let counter = &mut self.recursive_entries[table.index()];
        if from == Some(Mode::Recursive) {
            assert!(*counter > 0);
            *counter -= 1;
        }
        if to == Some(Mode::Recursive) {
            *counter += 1;
        }
    }

    /// Watch entries of live sessions over both tables: ZooKeeper's
    /// `DataTree.getWatchCount` (`zk_watch_count` in mntr). A persistent watch
    /// counts twice, once per table, as in ZooKeeper.
    pub fn watch_count(&self) -> usize {
        usize::try_from(self.watchers.live_entries()).expect("fits in usize")
    }

    /// Paths with at least one live watch in either table.
    pub fn path_count(&self) -> usize {
        let dead = self.watchers.dead_ids();
        if dead.is_empty() {
            return self.paths.len();
        }
        self.paths
            .values()
            .filter(|watches| Table::ALL.iter().any(|&t| watches.has_live(t, dead)))
            .count()
    }

    /// Sessions holding at least one watch.
    pub fn session_count(&self) -> usize {
        self.watchers.session_count()
    }

    /// `wchc`: session → watched paths, both sorted. Like ZooKeeper 3.8
    /// (`DataTree.getWatches`), this reports the data table only: a session
    /// with nothing but getChildren watches is not listed.
    pub fn paths_by_session(&self) -> Vec<(i64, Vec<String>)> {
        let mut by_session: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for (path, watches) in &self.paths {
            for id in &watches.ids(Table::Data) {
                if let Some(session_id) = self.watchers.session_of(id) {
                    by_session
                        .entry(session_id)
                        .or_default()
                        .push(path.to_string());
                }
            }
        }
        by_session
            .into_iter()
            .map(|(session_id, mut paths)| {
                paths.sort_unstable();
                (session_id, paths)
            })
            .collect()
    }

    /// `wchp`: path → watching sessions, both sorted. Data table only, like
    /// ZooKeeper 3.8 (`DataTree.getWatchesByPath`).
    pub fn sessions_by_path(&self) -> Vec<(String, Vec<i64>)> {
        let mut by_path: Vec<(String, Vec<i64>)> = Vec::new();
        for (path, watches) in &self.paths {
            let mut sessions: Vec<i64> = watches
                .ids(Table::Data)
                .iter()
                .filter_map(|id| self.watchers.session_of(id))
                .collect();
            if !sessions.is_empty() {
                sessions.sort_unstable();
                by_path.push((path.to_string(), sessions));
            }
        }
        by_path.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        by_path
    }

    /// `wchs`: sessions, paths and watches of the data table, as ZooKeeper
    /// 3.8's `DataTree.getWatchesSummary` reports them.
    pub fn data_watch_summary(&self) -> WatchSummary {
        let mut summary = WatchSummary::default();
        let mut sessions = RoaringBitmap::new();
        for watches in self.paths.values() {
            let mut ids = watches.ids(Table::Data);
            ids -= self.watchers.dead_ids();
            if !ids.is_empty() {
                summary.path_count += 1;
                summary.watch_count += usize::try_from(ids.len()).expect("fits");
                sessions |= ids;
            }
        }
        summary.session_count = usize::try_from(sessions.len()).expect("fits");
        summary
    }

    /// Bytes of watcher-id payload over all paths: roaring bitmaps in their
    /// serialized form (about 2 bytes per watch when ids are dense) and 8 bytes
    /// per watcher on paths small enough to keep an entry list. A stable
    /// measure for metrics; heap use adds per-path keys and headers.
    pub fn watch_payload_bytes(&self) -> usize {
        self.paths.values().map(PathWatches::payload_bytes).sum()
    }

    /// Recounts everything from the bitmaps and checks every invariant. O(all).
    #[cfg(test)]
    fn assert_invariants(&self) {
        let mut recounted: HashMap<u32, u32> = HashMap::new();
        let mut recursive = [0u64; 2];
        for (path, watches) in &self.paths {
            assert!(!watches.is_empty(), "empty entry kept for {path}");
            watches.assert_valid();
            for table in Table::ALL {
                for id in &watches.ids(table) {
                    let mode = watches.mode_of(table, id).expect("id has a mode");
                    if mode == Mode::Recursive {
                        recursive[table.index()] += 1;
                    }
                    *recounted.entry(id).or_default() += 1;
                }
            }
        }
        assert_eq!(recursive, self.recursive_entries);
        self.watchers.assert_consistent(&recounted);
    }
}

/// Applies `registrations` (at most one per table) to one path's bitmaps and
/// returns each one's previous mode, in order.
fn set_modes(
    watches: &mut PathWatches,
    id: u32,
    registrations: &[(Table, Mode)],
) -> [Option<Mode>; Table::ALL.len()] {
    assert!(registrations.len() <= Table::ALL.len());
    let mut previous = [None; Table::ALL.len()];
    for (index, &(table, mode)) in registrations.iter().enumerate() {
        previous[index] = watches.set_mode(table, id, mode);
    }
    previous
}

/// The tables `DataTree` triggers for one event on the changed path itself.
fn tables_for_event(event_type: i32) -> &'static [Table] {
    match event_type {
        EVENT_NODE_CREATED | EVENT_NODE_DATA_CHANGED => &[Table::Data],
        EVENT_NODE_DELETED => &[Table::Data, Table::Child],
        EVENT_NODE_CHILDREN_CHANGED => &[Table::Child],
        _ => panic!("event type {event_type} is not a znode change"),
    }
}

/// Paths reach the watch manager already validated; anything not absolute is
/// a caller bug.
fn assert_path(path: &str) {
    assert!(path.starts_with('/'), "watch path {path:?} is not absolute");
}

/// The parent of an absolute path, `None` for the root: the next step of
/// ZooKeeper's `PathParentIterator`.
fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    let slash = path.rfind('/').expect("absolute path");
    Some(if slash == 0 { "/" } else { &path[..slash] })
}
