//! Planted bugs for the simulator's checkers to find (feature `testing`):
//! each switch is per thread (a simulated run is one thread) and, without
//! the feature, a constant `false`.

/// One switch: the thread's flag, its setter (feature `testing` only)
/// and the reader the keyspace's code asks (`false` without the feature).
macro_rules! planted {
    ($(#[$doc:meta])* $flag:ident, $set:ident, $get:ident) => {
        #[cfg(any(test, feature = "testing"))]
        thread_local! {
            static $flag: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }

        $(#[$doc])*
        #[cfg(any(test, feature = "testing"))]
        pub fn $set(on: bool) {
            $flag.with(|flag| flag.set(on));
        }

        #[cfg(any(test, feature = "testing"))]
        pub(crate) fn $get() -> bool {
            $flag.with(|flag| flag.get())
        }

        #[cfg(not(any(test, feature = "testing")))]
        pub(crate) fn $get() -> bool {
            false
        }
    };
}

planted!(
    /// A snapshot's KV part holds no keys: each shard writes its deletions
    /// frame and nothing else, so a node restarted from it, or a follower
    /// it is installed on, loses the keyspace (on this thread, until
    /// switched off).
    SNAPSHOT_KEYS_DROPPED,
    set_snapshot_keys_dropped,
    snapshot_keys_dropped
);

planted!(
    /// EXEC answers every command but does not apply the last one: a
    /// transaction applied in part (on this thread, until switched off).
    EXEC_PARTIAL,
    set_exec_partial,
    exec_partial
);

planted!(
    /// SET's EX/PX sets a deadline half as far as asked: a key disappears
    /// while its client still counts on it (on this thread, until
    /// switched off).
    EXPIRE_EARLY,
    set_expire_early,
    expire_early
);

planted!(
    /// EXEC never sees a watched key changed: a WATCH transaction commits
    /// on a value another client replaced (on this thread, until switched
    /// off).
    WATCH_BLIND,
    set_watch_blind,
    watch_blind
);

planted!(
    /// A hash or set emptied by HDEL or SREM stays as an empty key (Redis
    /// deletes it): the key's type outlives its last field (on this
    /// thread, until switched off).
    EMPTY_KEPT,
    set_empty_kept,
    empty_kept
);

planted!(
    /// TTL and PTTL count down from the log's clock, not the node's: on a
    /// node no entry has reached for a while they stand still, and show
    /// more time left than there is (on this thread, until switched off).
    TTL_FROM_LOG_CLOCK,
    set_ttl_from_log_clock,
    ttl_from_log_clock
);

planted!(
    /// SCAN resumes one position past the cursor it was given: the keys
    /// at the position the last call stopped before are never returned
    /// (on this thread, until switched off).
    SCAN_SKIPS,
    set_scan_skips,
    scan_skips
);

planted!(
    /// A COMMANDS batch numbers its commands from one past its first
    /// request number: each reply goes to the request after its own (on
    /// this thread, until switched off).
    BATCH_SEQ_SHIFTED,
    set_batch_seq_shifted,
    batch_seq_shifted
);
