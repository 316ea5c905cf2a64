//! Specifications of ZooKeeper 3.8 watch behaviour, plus a randomized
//! comparison against a literal model of 3.8's `WatchManager` + `DataTree`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::*;

const ALICE: i64 = 0x0100_0000_0000_0001;
const BOB: i64 = 0x0100_0000_0000_0002;
const CAROL: i64 = 0x0200_0000_0000_0003;
const DAVE: i64 = -0x0100_0000_0000_0004;

const WATCHER_CHILDREN: i32 = 1;
const WATCHER_DATA: i32 = 2;
const WATCHER_ANY: i32 = 3;
const WATCHER_PERSISTENT: i32 = 4;
const WATCHER_PERSISTENT_RECURSIVE: i32 = 5;

fn checked(manager: &WatchManager) {
    manager.assert_invariants();
}

#[test]
fn a_one_shot_data_watch_fires_once_and_is_gone() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Data);
    assert_eq!(manager.trigger("/a", EVENT_NODE_DATA_CHANGED), vec![ALICE]);
    assert!(manager.trigger("/a", EVENT_NODE_DATA_CHANGED).is_empty());
    assert_eq!(manager.watch_count(), 0);
    assert_eq!(manager.path_count(), 0);
    assert_eq!(manager.session_count(), 0);
    checked(&manager);
}

#[test]
fn an_exists_watch_on_a_missing_node_fires_when_it_is_created() {
    let mut manager = WatchManager::new();
    manager.add("/missing", ALICE, WatchKind::Exist);
    assert!(manager.contains("/missing", ALICE, WATCHER_DATA));
    assert_eq!(manager.trigger("/missing", EVENT_NODE_CREATED), vec![ALICE]);
    assert_eq!(manager.watch_count(), 0);
    checked(&manager);
}

#[test]
fn data_and_exists_watches_of_one_session_are_one_data_table_entry() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Data);
    manager.add("/a", ALICE, WatchKind::Exist);
    manager.add("/a", ALICE, WatchKind::Data);
    assert_eq!(manager.watch_count(), 1);
    assert_eq!(manager.trigger("/a", EVENT_NODE_DATA_CHANGED), vec![ALICE]);
    assert_eq!(manager.watch_count(), 0);
    checked(&manager);
}

#[test]
fn a_data_watch_ignores_children_changes_and_a_child_watch_ignores_data_changes() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Data);
    manager.add("/a", BOB, WatchKind::Child);
    assert_eq!(
        manager.trigger("/a", EVENT_NODE_CHILDREN_CHANGED),
        vec![BOB]
    );
    assert_eq!(manager.trigger("/a", EVENT_NODE_DATA_CHANGED), vec![ALICE]);
    assert!(manager.trigger("/a", EVENT_NODE_CREATED).is_empty());
    checked(&manager);
}

#[test]
fn a_session_with_data_and_child_watch_on_a_deleted_node_is_notified_once() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Data);
    manager.add("/a", ALICE, WatchKind::Child);
    assert_eq!(manager.watch_count(), 2);
    assert_eq!(manager.trigger("/a", EVENT_NODE_DELETED), vec![ALICE]);
    // Both one-shot entries fired, including the suppressed child one.
    assert_eq!(manager.watch_count(), 0);
    assert_eq!(manager.path_count(), 0);
    checked(&manager);
}

#[test]
fn deletion_notifies_data_and_child_watchers_each_once_sorted() {
    let mut manager = WatchManager::new();
    manager.add("/a", CAROL, WatchKind::Child);
    manager.add("/a", BOB, WatchKind::Exist);
    manager.add("/a", ALICE, WatchKind::Child);
    manager.add("/a", ALICE, WatchKind::Data);
    assert_eq!(
        manager.trigger("/a", EVENT_NODE_DELETED),
        vec![ALICE, BOB, CAROL]
    );
    checked(&manager);
}

#[test]
fn a_one_shot_watch_on_an_ancestor_does_not_fire_for_a_descendant() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Data);
    manager.add("/a", BOB, WatchKind::Child);
    assert!(manager.trigger("/a/b", EVENT_NODE_DATA_CHANGED).is_empty());
    assert!(manager.trigger("/a/b", EVENT_NODE_DELETED).is_empty());
    assert_eq!(manager.watch_count(), 2);
    checked(&manager);
}

#[test]
fn a_persistent_watch_fires_for_every_change_of_its_path_and_stays() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Persistent);
    assert_eq!(
        manager.watch_count(),
        2,
        "one entry per table, as in ZooKeeper"
    );
    for event in [
        EVENT_NODE_CREATED,
        EVENT_NODE_DATA_CHANGED,
        EVENT_NODE_CHILDREN_CHANGED,
        EVENT_NODE_DELETED,
        EVENT_NODE_DATA_CHANGED,
    ] {
        assert_eq!(manager.trigger("/a", event), vec![ALICE], "event {event}");
    }
    assert_eq!(manager.watch_count(), 2);
    checked(&manager);
}

#[test]
fn a_persistent_watch_does_not_fire_for_descendants() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Persistent);
    assert!(manager.trigger("/a/b", EVENT_NODE_DATA_CHANGED).is_empty());
    assert!(manager.trigger("/a/b", EVENT_NODE_DELETED).is_empty());
    assert!(manager
        .trigger("/a/b", EVENT_NODE_CHILDREN_CHANGED)
        .is_empty());
    checked(&manager);
}

#[test]
fn a_recursive_watch_fires_for_a_grandchilds_data_change_but_not_for_children_changed() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::PersistentRecursive);
    assert_eq!(
        manager.trigger("/a/b/c", EVENT_NODE_DATA_CHANGED),
        vec![ALICE]
    );
    assert_eq!(manager.trigger("/a/b/c", EVENT_NODE_CREATED), vec![ALICE]);
    assert_eq!(manager.trigger("/a/b/c", EVENT_NODE_DELETED), vec![ALICE]);
    assert!(manager
        .trigger("/a/b", EVENT_NODE_CHILDREN_CHANGED)
        .is_empty());
    assert!(manager
        .trigger("/a", EVENT_NODE_CHILDREN_CHANGED)
        .is_empty());
    assert!(manager.trigger("/ab", EVENT_NODE_DATA_CHANGED).is_empty());
    assert!(manager.trigger("/", EVENT_NODE_DATA_CHANGED).is_empty());
    assert_eq!(manager.watch_count(), 2);
    checked(&manager);
}

#[test]
fn a_recursive_watch_fires_for_its_own_path() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::PersistentRecursive);
    assert_eq!(manager.trigger("/a", EVENT_NODE_CREATED), vec![ALICE]);
    assert_eq!(manager.trigger("/a", EVENT_NODE_DATA_CHANGED), vec![ALICE]);
    assert_eq!(manager.trigger("/a", EVENT_NODE_DELETED), vec![ALICE]);
    checked(&manager);
}

#[test]
fn a_recursive_watch_on_the_root_sees_every_node() {
    let mut manager = WatchManager::new();
    manager.add("/", ALICE, WatchKind::PersistentRecursive);
    manager.add("/x/y", BOB, WatchKind::Data);
    assert_eq!(
        manager.trigger("/x/y", EVENT_NODE_DATA_CHANGED),
        vec![ALICE, BOB]
    );
    assert_eq!(manager.trigger("/x", EVENT_NODE_DELETED), vec![ALICE]);
    assert_eq!(manager.trigger("/", EVENT_NODE_DATA_CHANGED), vec![ALICE]);
    checked(&manager);
}

#[test]
fn a_one_shot_watch_set_after_a_persistent_one_turns_that_table_one_shot() {
    // ZooKeeper 3.8 WatcherModeManager: one mode per (watcher, path, table),
    // last registration wins. Fixed only in 3.9 (ZOOKEEPER-4466).
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Persistent);
    manager.add("/a", ALICE, WatchKind::Data);
    assert_eq!(manager.watch_count(), 2);
    assert_eq!(manager.trigger("/a", EVENT_NODE_DATA_CHANGED), vec![ALICE]);
    assert!(manager.trigger("/a", EVENT_NODE_DATA_CHANGED).is_empty());
    // The child-table half is still persistent.
    assert_eq!(
        manager.trigger("/a", EVENT_NODE_CHILDREN_CHANGED),
        vec![ALICE]
    );
    assert_eq!(manager.trigger("/a", EVENT_NODE_DELETED), vec![ALICE]);
    assert_eq!(manager.watch_count(), 1);
    checked(&manager);
}

#[test]
fn a_persistent_watch_set_after_a_one_shot_one_replaces_it() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Child);
    manager.add("/a", ALICE, WatchKind::PersistentRecursive);
    assert_eq!(manager.watch_count(), 2);
    assert!(manager
        .trigger("/a", EVENT_NODE_CHILDREN_CHANGED)
        .is_empty());
    assert_eq!(manager.trigger("/a/b", EVENT_NODE_CREATED), vec![ALICE]);
    checked(&manager);
}

#[test]
fn remove_data_removes_data_and_exists_watches_but_not_child_watches() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Exist);
    manager.add("/a", ALICE, WatchKind::Child);
    assert!(manager.remove("/a", ALICE, WATCHER_DATA));
    assert!(!manager.remove("/a", ALICE, WATCHER_DATA));
    assert!(manager.trigger("/a", EVENT_NODE_DATA_CHANGED).is_empty());
    assert_eq!(
        manager.trigger("/a", EVENT_NODE_CHILDREN_CHANGED),
        vec![ALICE]
    );
    checked(&manager);
}

#[test]
fn remove_children_removes_only_the_child_watch() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Data);
    manager.add("/a", ALICE, WatchKind::Child);
    assert!(manager.remove("/a", ALICE, WATCHER_CHILDREN));
    assert!(!manager.contains("/a", ALICE, WATCHER_CHILDREN));
    assert!(manager.contains("/a", ALICE, WATCHER_DATA));
    assert!(manager
        .trigger("/a", EVENT_NODE_CHILDREN_CHANGED)
        .is_empty());
    assert_eq!(manager.trigger("/a", EVENT_NODE_DATA_CHANGED), vec![ALICE]);
    checked(&manager);
}

#[test]
fn remove_any_removes_persistent_watches_too() {
    // DataTree.removeWatch(Any) calls removeWatcher on both tables, which
    // drops the watcher whatever its mode.
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Persistent);
    manager.add("/b", ALICE, WatchKind::PersistentRecursive);
    assert!(manager.remove("/a", ALICE, WATCHER_ANY));
    assert!(manager.remove("/b", ALICE, WATCHER_ANY));
    assert_eq!(manager.watch_count(), 0);
    assert!(manager.trigger("/a", EVENT_NODE_DATA_CHANGED).is_empty());
    assert!(manager.trigger("/b/c", EVENT_NODE_DATA_CHANGED).is_empty());
    checked(&manager);
}

#[test]
fn remove_data_on_a_persistent_watch_leaves_its_child_half() {
    // ZooKeeper 3.8 behaviour (changed in 3.9 by ZOOKEEPER-4471).
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Persistent);
    assert!(manager.remove("/a", ALICE, WATCHER_DATA));
    assert!(manager.trigger("/a", EVENT_NODE_DATA_CHANGED).is_empty());
    assert_eq!(
        manager.trigger("/a", EVENT_NODE_CHILDREN_CHANGED),
        vec![ALICE]
    );
    checked(&manager);
}

#[test]
fn a_recursive_watchs_child_half_still_fires_on_deletion_below_it() {
    // The child-table entry of a recursive watch fires for NodeDeleted of the
    // path and its descendants (never for NodeChildrenChanged).
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::PersistentRecursive);
    assert!(manager.remove("/a", ALICE, WATCHER_DATA));
    assert!(manager.trigger("/a/b", EVENT_NODE_DATA_CHANGED).is_empty());
    assert_eq!(manager.trigger("/a/b", EVENT_NODE_DELETED), vec![ALICE]);
    assert!(manager
        .trigger("/a", EVENT_NODE_CHILDREN_CHANGED)
        .is_empty());
    checked(&manager);
}

#[test]
fn remove_persistent_codes_remove_only_watches_of_that_mode() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Persistent);
    manager.add("/b", ALICE, WatchKind::PersistentRecursive);
    manager.add("/c", ALICE, WatchKind::Data);
    assert!(!manager.remove("/a", ALICE, WATCHER_PERSISTENT_RECURSIVE));
    assert!(!manager.remove("/b", ALICE, WATCHER_PERSISTENT));
    assert!(!manager.remove("/c", ALICE, WATCHER_PERSISTENT));
    assert!(manager.contains("/a", ALICE, WATCHER_PERSISTENT));
    assert!(manager.remove("/a", ALICE, WATCHER_PERSISTENT));
    assert!(manager.remove("/b", ALICE, WATCHER_PERSISTENT_RECURSIVE));
    assert_eq!(manager.watch_count(), 1);
    checked(&manager);
}

#[test]
fn remove_and_contains_answer_false_for_unknown_things() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Data);
    assert!(!manager.remove("/a", BOB, WATCHER_ANY), "unknown session");
    assert!(!manager.remove("/b", ALICE, WATCHER_ANY), "unwatched path");
    assert!(!manager.remove("/a", ALICE, 0), "invalid code");
    assert!(!manager.remove("/a", ALICE, 6), "invalid code");
    assert!(!manager.contains("/a", ALICE, 0));
    assert!(
        !manager.contains("a", ALICE, WATCHER_ANY),
        "unvalidated path"
    );
    assert!(
        !manager.contains("/a", BOB, WATCHER_DATA),
        "another session's watch"
    );
    assert!(manager.contains("/a", ALICE, WATCHER_ANY));
    assert!(!manager.contains("/a", ALICE, WATCHER_CHILDREN));
    checked(&manager);
}

#[test]
fn a_removed_session_is_never_notified_and_not_counted() {
    let mut manager = WatchManager::new();
    manager.add("/a", ALICE, WatchKind::Data);
    manager.add("/a", BOB, WatchKind::PersistentRecursive);
    manager.add("/a/b", BOB, WatchKind::Child);
    manager.remove_session(BOB);
    manager.remove_session(BOB);
    assert_eq!(manager.session_count(), 1);
    assert_eq!(manager.watch_count(), 1);
    assert_eq!(manager.path_count(), 1);
    assert!(!manager.contains("/a", BOB, WATCHER_ANY));
    assert_eq!(manager.trigger("/a", EVENT_NODE_DELETED), vec![ALICE]);
    assert!(manager.trigger("/a/b", EVENT_NODE_DELETED).is_empty());
    checked(&manager);
}

#[test]
fn a_dead_watcher_id_is_not_reused_before_its_bits_are_swept() {
    let mut manager = WatchManager::new();
    for index in 0..100 {
        manager.add(&format!("/live/{index}"), ALICE, WatchKind::Data);
    }
    manager.add("/a", BOB, WatchKind::Persistent);
    let bob_id = manager.watchers.live_id(BOB).unwrap();
    manager.remove_session(BOB);
    // 2 dead entries against 100 live ones: below the sweep threshold.
    assert!(manager.watchers.dead_ids().contains(bob_id));
    checked(&manager);

    // A new session, even with BOB's session id, gets a fresh id.
    manager.add("/a", BOB, WatchKind::Data);
    manager.add("/z", CAROL, WatchKind::Data);
    assert_ne!(manager.watchers.live_id(BOB), Some(bob_id));
    assert_ne!(manager.watchers.live_id(CAROL), Some(bob_id));
    assert_eq!(manager.trigger("/a", EVENT_NODE_CHILDREN_CHANGED), vec![]);
    assert_eq!(manager.trigger("/a", EVENT_NODE_DATA_CHANGED), vec![BOB]);
    checked(&manager);

    // Once garbage reaches the threshold, the sweep frees the id.
    for index in 0..100 {
        assert_eq!(
            manager.trigger(&format!("/live/{index}"), EVENT_NODE_DATA_CHANGED),
            vec![ALICE]
        );
    }
    assert!(manager.watchers.dead_ids().is_empty());
    assert_eq!(manager.watchers.session_of(bob_id), None);
    manager.add("/c", ALICE, WatchKind::Data);
    manager.add("/c", DAVE, WatchKind::Data);
    assert_eq!(manager.watchers.live_id(ALICE), Some(0));
    assert_eq!(
        manager.watchers.live_id(DAVE),
        Some(bob_id),
        "lowest free id"
    );
    checked(&manager);
}

#[test]
fn watcher_ids_stay_dense_as_sessions_come_and_go() {
    let mut manager = WatchManager::new();
    for round in 0..50i64 {
        for session in 0..10i64 {
            let session_id = round * 10 + session;
            manager.add("/p", session_id, WatchKind::Child);
        }
        assert_eq!(manager.trigger("/p", EVENT_NODE_CHILDREN_CHANGED).len(), 10);
        checked(&manager);
    }
    assert_eq!(manager.watchers.slot_count(), 10);
}

#[test]
fn a_path_keeps_every_watch_across_the_switch_between_list_and_bitmaps() {
    let mut manager = WatchManager::new();
    let kinds = [WatchKind::Data, WatchKind::Child, WatchKind::Persistent];
    for session in 0..60i64 {
        manager.add("/a", session, kinds[session as usize % kinds.len()]);
    }
    assert!(manager.paths["/a"].is_large());
    assert_eq!(manager.watch_count(), 80);
    checked(&manager);
    // Data and persistent watchers: 0, 1, 2, 3, 5, 6, 8, ...
    let data_watchers: Vec<i64> = (0..60).filter(|s| s % 3 != 1).collect();
    assert_eq!(
        manager.trigger("/a", EVENT_NODE_DATA_CHANGED),
        data_watchers
    );
    checked(&manager);
    // 20 one-shot data entries fired; 60 entries are left.
    assert!(manager.paths["/a"].is_large());
    for session in 0..60i64 {
        manager.remove("/a", session, WATCHER_CHILDREN);
    }
    // Only the 20 persistent data halves are left, then fewer.
    for session in (2..60i64).step_by(3).take(5) {
        assert!(manager.remove("/a", session, WATCHER_ANY));
    }
    assert!(!manager.paths["/a"].is_large());
    assert_eq!(manager.watch_count(), 15);
    let persistent: Vec<i64> = (2..60).step_by(3).skip(5).collect();
    assert_eq!(manager.trigger("/a", EVENT_NODE_DELETED), persistent);
    checked(&manager);
}

#[test]
fn four_letter_word_reports_cover_the_data_table() {
    let mut manager = WatchManager::new();
    manager.add("/b", BOB, WatchKind::Data);
    manager.add("/a", BOB, WatchKind::Exist);
    manager.add("/a", ALICE, WatchKind::Persistent);
    manager.add("/c", CAROL, WatchKind::Child);
    assert_eq!(
        manager.paths_by_session(),
        vec![
            (ALICE, vec!["/a".to_string()]),
            (BOB, vec!["/a".to_string(), "/b".to_string()]),
        ]
    );
    assert_eq!(
        manager.sessions_by_path(),
        vec![
            ("/a".to_string(), vec![ALICE, BOB]),
            ("/b".to_string(), vec![BOB])
        ]
    );
    assert_eq!(
        manager.data_watch_summary(),
        WatchSummary {
            session_count: 2,
            path_count: 2,
            watch_count: 3
        }
    );
    assert_eq!(manager.watch_count(), 5);
    assert_eq!(manager.path_count(), 3);
    assert_eq!(manager.session_count(), 3);
    checked(&manager);
}

#[test]
#[should_panic(expected = "not a znode change")]
fn triggering_a_non_change_event_is_a_caller_bug() {
    WatchManager::new().trigger("/a", -1);
}

#[test]
#[should_panic(expected = "not absolute")]
fn adding_a_relative_path_is_a_caller_bug() {
    WatchManager::new().add("a", ALICE, WatchKind::Data);
}

/// Upper bound on bitmap payload per watch when watcher ids are dense: one
/// `u16` per id in a roaring array container.
const MEMORY_BYTES_PER_WATCH_MAX: usize = 2;
/// Upper bound on serialized framing per single-container bitmap: cookie,
/// size, container descriptor and offset, 4 bytes each.
const MEMORY_BYTES_PER_BITMAP_MAX: usize = 16;

#[test]
fn ten_thousand_paths_watched_by_a_thousand_sessions_stay_within_the_bitmap_budget() {
    const PATH_COUNT: usize = 10_000;
    const SESSION_COUNT: i64 = 1_000;
    let paths: Vec<String> = (0..PATH_COUNT)
        .map(|i| format!("/app/node-{i:05}"))
        .collect();
    let mut manager = WatchManager::new();
    for path in &paths {
        for session in 0..SESSION_COUNT {
            manager.add(path, 0x0100_0000_0000_0000 + session, WatchKind::Data);
        }
    }
    let watches = PATH_COUNT * SESSION_COUNT as usize;
    assert_eq!(manager.watch_count(), watches);
    assert_eq!(manager.path_count(), PATH_COUNT);
    assert_eq!(manager.session_count(), SESSION_COUNT as usize);

    assert!(manager.paths.values().all(PathWatches::is_large));
    let bytes = manager.watch_payload_bytes();
    let bound = watches * MEMORY_BYTES_PER_WATCH_MAX + PATH_COUNT * MEMORY_BYTES_PER_BITMAP_MAX;
    eprintln!(
        "{watches} watches over {PATH_COUNT} paths: {bytes} bitmap bytes ({:.3} per watch), bound {bound}",
        bytes as f64 / watches as f64
    );
    assert!(bytes <= bound, "{bytes} > {bound}");

    // Every session removed: the sweep returns the bitmaps to nothing.
    for session in 0..SESSION_COUNT {
        manager.remove_session(0x0100_0000_0000_0000 + session);
    }
    assert_eq!(manager.watch_count(), 0);
    assert_eq!(manager.path_count(), 0);
    assert_eq!(manager.watch_payload_bytes(), 0);
    assert!(manager.paths.is_empty());
}

// ---------------------------------------------------------------------------
// Randomized comparison with a literal model of ZooKeeper 3.8.

/// ZooKeeper 3.8's `WatchManager` (one table), transcribed naively:
/// path → set of watchers, plus the `WatcherModeManager` map.
#[derive(Default)]
struct ReferenceTable {
    watch_table: BTreeMap<String, BTreeSet<i64>>,
    modes: HashMap<(i64, String), Mode>,
}

impl ReferenceTable {
    fn add(&mut self, path: &str, session: i64, mode: Mode) {
        self.watch_table
            .entry(path.to_string())
            .or_default()
            .insert(session);
        let key = (session, path.to_string());
        if mode == Mode::Standard {
            self.modes.remove(&key);
        } else {
            self.modes.insert(key, mode);
        }
    }

    fn mode(&self, session: i64, path: &str) -> Mode {
        let key = (session, path.to_string());
        self.modes.get(&key).copied().unwrap_or(Mode::Standard)
    }

    fn trigger(&mut self, path: &str, event: i32) -> BTreeSet<i64> {
        let mut watchers = BTreeSet::new();
        let mut local = Some(path.to_string());
        let mut at_parent = false;
        while let Some(local_path) = local {
            let sessions: Vec<i64> = self
                .watch_table
                .get(&local_path)
                .map(|set| set.iter().copied().collect())
                .unwrap_or_default();
            for session in sessions {
                let mode = self.mode(session, &local_path);
                let fires = match mode {
                    Mode::Recursive => event != EVENT_NODE_CHILDREN_CHANGED,
                    Mode::Standard | Mode::Persistent => !at_parent,
                };
                if fires {
                    watchers.insert(session);
                    if mode == Mode::Standard {
                        self.remove_watcher(&local_path, session);
                    }
                }
            }
            local = parent(&local_path).map(str::to_string);
            at_parent = true;
        }
        watchers
    }

    fn remove_watcher(&mut self, path: &str, session: i64) -> bool {
        let Some(set) = self.watch_table.get_mut(path) else {
            return false;
        };
        if !set.remove(&session) {
            return false;
        }
        if set.is_empty() {
            self.watch_table.remove(path);
        }
        self.modes.remove(&(session, path.to_string()));
        true
    }

    fn has(&self, path: &str, session: i64) -> bool {
        self.watch_table
            .get(path)
            .is_some_and(|set| set.contains(&session))
    }

    fn remove_session(&mut self, session: i64) {
        let paths: Vec<String> = self.watch_table.keys().cloned().collect();
        for path in paths {
            self.remove_watcher(&path, session);
        }
    }

    fn entries(&self) -> impl Iterator<Item = (&String, i64)> {
        self.watch_table
            .iter()
            .flat_map(|(path, set)| set.iter().map(move |&session| (path, session)))
    }
}

/// ZooKeeper 3.8's `DataTree` watch plumbing over two reference tables.
#[derive(Default)]
struct Reference {
    data: ReferenceTable,
    child: ReferenceTable,
}

impl Reference {
    fn table(&mut self, table: Table) -> &mut ReferenceTable {
        match table {
            Table::Data => &mut self.data,
            Table::Child => &mut self.child,
        }
    }

    fn add(&mut self, path: &str, session: i64, kind: WatchKind) {
        for &(table, mode) in kind.registrations() {
            self.table(table).add(path, session, mode);
        }
    }

    fn trigger(&mut self, path: &str, event: i32) -> Vec<i64> {
        let notified = match event {
            EVENT_NODE_CHILDREN_CHANGED => self.child.trigger(path, event),
            EVENT_NODE_DELETED => {
                let data = self.data.trigger(path, event);
                let child = self.child.trigger(path, event);
                data.union(&child).copied().collect()
            }
            _ => self.data.trigger(path, event),
        };
        notified.into_iter().collect()
    }

    fn remove(&mut self, path: &str, session: i64, code: i32) -> bool {
        let Some(watcher_type) = WatcherType::from_code(code) else {
            return false;
        };
        let mut removed = false;
        for table in Table::ALL {
            let reference = self.table(table);
            let mode = reference.mode(session, path);
            if reference.has(path, session) && watcher_type.selects(table, mode) {
                removed |= reference.remove_watcher(path, session);
            }
        }
        removed
    }

    fn contains(&mut self, path: &str, session: i64, code: i32) -> bool {
        let Some(watcher_type) = WatcherType::from_code(code) else {
            return false;
        };
        Table::ALL.iter().any(|&table| {
            let reference = self.table(table);
            reference.has(path, session)
                && watcher_type.selects(table, reference.mode(session, path))
        })
    }

    fn remove_session(&mut self, session: i64) {
        self.data.remove_session(session);
        self.child.remove_session(session);
    }

    fn assert_matches(&self, manager: &WatchManager) {
        let watch_count = self.data.entries().count() + self.child.entries().count();
        assert_eq!(manager.watch_count(), watch_count);
        let paths: BTreeSet<&String> = self
            .data
            .watch_table
            .keys()
            .chain(self.child.watch_table.keys())
            .collect();
        assert_eq!(manager.path_count(), paths.len());
        let sessions: BTreeSet<i64> = self
            .data
            .entries()
            .chain(self.child.entries())
            .map(|(_, session)| session)
            .collect();
        assert_eq!(manager.session_count(), sessions.len());

        let mut by_session: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for (path, session) in self.data.entries() {
            by_session.entry(session).or_default().push(path.clone());
        }
        let expected: Vec<(i64, Vec<String>)> = by_session.into_iter().collect();
        assert_eq!(manager.paths_by_session(), expected);
        let expected: Vec<(String, Vec<i64>)> = self
            .data
            .watch_table
            .iter()
            .map(|(path, set)| (path.clone(), set.iter().copied().collect()))
            .collect();
        assert_eq!(manager.sessions_by_path(), expected);
    }
}

/// SplitMix64: a tiny deterministic generator so failures reproduce.
struct TestRng(u64);

impl TestRng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

const MODEL_PATHS: [&str; 8] = ["/", "/a", "/a/b", "/a/b/c", "/a/d", "/e", "/e/f", "/ab"];
const MODEL_KINDS: [WatchKind; 5] = [
    WatchKind::Data,
    WatchKind::Exist,
    WatchKind::Child,
    WatchKind::Persistent,
    WatchKind::PersistentRecursive,
];
const MODEL_EVENTS: [i32; 4] = [
    EVENT_NODE_CREATED,
    EVENT_NODE_DELETED,
    EVENT_NODE_DATA_CHANGED,
    EVENT_NODE_CHILDREN_CHANGED,
];

const MODEL_SEED_COUNT: u64 = 12;
const MODEL_STEP_COUNT: usize = 2_000;

#[test]
fn random_operations_match_a_literal_model_of_zookeeper_3_8() {
    for seed in 0..MODEL_SEED_COUNT {
        let mut rng = TestRng(seed);
        // Few sessions collide often; many push paths past the entry-list limit.
        let session_pool = if seed % 2 == 0 { 7 } else { 80 };
        let mut manager = WatchManager::new();
        let mut reference = Reference::default();
        for step in 0..MODEL_STEP_COUNT {
            let path = *rng.pick(&MODEL_PATHS);
            let session = 1 + rng.below(session_pool) as i64;
            let context = format!("seed {seed} step {step}");
            match rng.below(100) {
                0..=44 => {
                    let kind = *rng.pick(&MODEL_KINDS);
                    manager.add(path, session, kind);
                    reference.add(path, session, kind);
                }
                45..=74 => {
                    let event = *rng.pick(&MODEL_EVENTS);
                    let expected = reference.trigger(path, event);
                    assert_eq!(manager.trigger(path, event), expected, "{context}");
                }
                75..=84 => {
                    let code = rng.below(7) as i32;
                    let expected = reference.remove(path, session, code);
                    assert_eq!(manager.remove(path, session, code), expected, "{context}");
                }
                85..=93 => {
                    let code = rng.below(7) as i32;
                    let expected = reference.contains(path, session, code);
                    assert_eq!(manager.contains(path, session, code), expected, "{context}");
                }
                _ => {
                    manager.remove_session(session);
                    reference.remove_session(session);
                }
            }
            manager.assert_invariants();
            reference.assert_matches(&manager);
        }
    }
}
