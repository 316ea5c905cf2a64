//! Planted bugs for the simulator's checkers to find (feature `testing`):
//! each switch is per thread (a simulated run is one thread) and, without
//! the feature, a constant `false`.

#[cfg(any(test, feature = "testing"))]
thread_local! {
    static SNAPSHOT_KEYS_DROPPED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A snapshot's KV part holds no keys: each shard writes its deletions
/// frame and nothing else, so a node restarted from it, or a follower it
/// is installed on, loses the keyspace (on this thread, until switched
/// off).
#[cfg(any(test, feature = "testing"))]
pub fn set_snapshot_keys_dropped(on: bool) {
    SNAPSHOT_KEYS_DROPPED.with(|flag| flag.set(on));
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn snapshot_keys_dropped() -> bool {
    SNAPSHOT_KEYS_DROPPED.with(|flag| flag.get())
}

#[cfg(not(any(test, feature = "testing")))]
pub(crate) fn snapshot_keys_dropped() -> bool {
    false
}

#[cfg(any(test, feature = "testing"))]
thread_local! {
    static EXEC_PARTIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// EXEC answers every command but does not apply the last one: a
/// transaction applied in part (on this thread, until switched off).
#[cfg(any(test, feature = "testing"))]
pub fn set_exec_partial(on: bool) {
    EXEC_PARTIAL.with(|flag| flag.set(on));
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn exec_partial() -> bool {
    EXEC_PARTIAL.with(|flag| flag.get())
}

#[cfg(not(any(test, feature = "testing")))]
pub(crate) fn exec_partial() -> bool {
    false
}

#[cfg(any(test, feature = "testing"))]
thread_local! {
    static EXPIRE_EARLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// SET's EX/PX sets a deadline half as far as asked: a key disappears
/// while its client still counts on it (on this thread, until switched
/// off).
#[cfg(any(test, feature = "testing"))]
pub fn set_expire_early(on: bool) {
    EXPIRE_EARLY.with(|flag| flag.set(on));
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn expire_early() -> bool {
    EXPIRE_EARLY.with(|flag| flag.get())
}

#[cfg(not(any(test, feature = "testing")))]
pub(crate) fn expire_early() -> bool {
    false
}

#[cfg(any(test, feature = "testing"))]
thread_local! {
    static WATCH_BLIND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// EXEC never sees a watched key changed: a WATCH transaction commits on
/// a value another client replaced (on this thread, until switched off).
#[cfg(any(test, feature = "testing"))]
pub fn set_watch_blind(on: bool) {
    WATCH_BLIND.with(|flag| flag.set(on));
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn watch_blind() -> bool {
    WATCH_BLIND.with(|flag| flag.get())
}

#[cfg(not(any(test, feature = "testing")))]
pub(crate) fn watch_blind() -> bool {
    false
}

#[cfg(any(test, feature = "testing"))]
thread_local! {
    static EMPTY_KEPT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A hash or set emptied by HDEL or SREM stays as an empty key (Redis
/// deletes it): the key's type outlives its last field (on this thread,
/// until switched off).
#[cfg(any(test, feature = "testing"))]
pub fn set_empty_kept(on: bool) {
    EMPTY_KEPT.with(|flag| flag.set(on));
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn empty_kept() -> bool {
    EMPTY_KEPT.with(|flag| flag.get())
}

#[cfg(not(any(test, feature = "testing")))]
pub(crate) fn empty_kept() -> bool {
    false
}
