//! keel-session: ZooKeeper session bookkeeping, sans-IO.
//!
//! - [`SessionTracker`]: session deadlines in tick buckets (ZooKeeper's
//!   `ExpiryQueue`), on a logical clock passed in as `now_ms`.
//! - [`negotiate_timeout_ms`], [`initial_session_id`]: ZooKeeper's timeout
//!   clamping and session id layout; [`initial_local_session_id`]: the
//!   disjoint id space of read-only mode's local sessions.
//! - [`session_password`], [`check_password`]: deterministic keyed passwords.
//!
//! No IO, no clock, no threads, no randomness.

mod id;
mod password;
mod tracker;

#[cfg(test)]
mod tests;

pub use id::{
    initial_local_session_id, initial_session_id, is_local_session_id, negotiate_timeout_ms,
};
pub use password::{check_password, session_password, SESSION_PASSWORD_BYTES};
pub use tracker::SessionTracker;
