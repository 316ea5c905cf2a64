//! Planted bugs for the simulator's checkers to find (feature `testing`):
//! each switch is per thread (a simulated run is one thread) and, without
//! the feature, a constant `false`.

#[cfg(any(test, feature = "testing"))]
thread_local! {
    static RECURSIVE_BLIND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static ACL_BLIND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static REAP_EARLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static REAP_LATE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static SNAPSHOT_TORN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Recursive watches fire for their own path only, never for a
/// descendant (on this thread, until switched off).
#[cfg(any(test, feature = "testing"))]
pub fn set_recursive_blind(on: bool) {
    RECURSIVE_BLIND.with(|flag| flag.set(on));
}

/// Every ACL check passes (on this thread, until switched off).
#[cfg(any(test, feature = "testing"))]
pub fn set_acl_blind(on: bool) {
    ACL_BLIND.with(|flag| flag.set(on));
}

/// The reaper takes what is not due: a childless TTL node whatever its
/// age, a container that never had a child (in its candidates and in the
/// apply step's own check; on this thread, until switched off).
#[cfg(any(test, feature = "testing"))]
pub fn set_reap_early(on: bool) {
    REAP_EARLY.with(|flag| flag.set(on));
}

/// The reaper's candidates miss what is due: a TTL is read as seconds,
/// and no container counts as empty (on this thread, until switched off).
#[cfg(any(test, feature = "testing"))]
pub fn set_reap_late(on: bool) {
    REAP_LATE.with(|flag| flag.set(on));
}

/// A snapshot written while the tree changes records the new version of
/// a node changed under it instead of the one at its position (the
/// copy-on-write skipped; on this thread, until switched off).
#[cfg(any(test, feature = "testing"))]
pub fn set_snapshot_torn(on: bool) {
    SNAPSHOT_TORN.with(|flag| flag.set(on));
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn recursive_blind() -> bool {
    RECURSIVE_BLIND.with(|flag| flag.get())
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn acl_blind() -> bool {
    ACL_BLIND.with(|flag| flag.get())
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn reap_early() -> bool {
    REAP_EARLY.with(|flag| flag.get())
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn reap_late() -> bool {
    REAP_LATE.with(|flag| flag.get())
}

#[cfg(any(test, feature = "testing"))]
pub(crate) fn snapshot_torn() -> bool {
    SNAPSHOT_TORN.with(|flag| flag.get())
}

#[cfg(not(any(test, feature = "testing")))]
#[inline(always)]
pub(crate) fn recursive_blind() -> bool {
    false
}

#[cfg(not(any(test, feature = "testing")))]
#[inline(always)]
pub(crate) fn acl_blind() -> bool {
    false
}

#[cfg(not(any(test, feature = "testing")))]
#[inline(always)]
pub(crate) fn reap_early() -> bool {
    false
}

#[cfg(not(any(test, feature = "testing")))]
#[inline(always)]
pub(crate) fn reap_late() -> bool {
    false
}

#[cfg(not(any(test, feature = "testing")))]
#[inline(always)]
pub(crate) fn snapshot_torn() -> bool {
    false
}
