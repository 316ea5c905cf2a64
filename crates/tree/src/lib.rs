//! keel-tree: the replicated state machine of Keel, pure and deterministic.
//!
//! - [`DataTree`]: znodes with ZooKeeper's Stat semantics, sessions and
//!   their ephemerals, containers and TTL nodes; `apply` runs a committed
//!   [`Txn`], `read` serves a read request.
//! - [`watch::WatchManager`]: path → bitmap of watching sessions.
//! - [`snapshot`]: chunked, checksummed snapshots written without stopping
//!   the apply side (per-node copy-on-write) and loaded on every core.
//! - [`store`]: the compact storage (arena, path index, interned ACLs).
//! - [`keeper`]: ClickHouse Keeper's `/keeper` system nodes (virtual,
//!   read-only) and the feature flags Keel advertises there.
//!
//! No IO, no clock, no randomness: time arrives inside each transaction.

pub mod acl;
mod apply;
#[cfg(any(test, feature = "testing"))]
pub mod fuzzing;
pub mod keeper;
pub mod path;
pub mod planted;
mod quota;
mod read;
pub mod snapshot;
pub mod store;
mod tree;
pub mod txn;
pub mod watch;

pub use apply::Applied;
pub use read::{ReadOutcome, CHILDREN_PER_RESPONSE_MAX};
pub use tree::{
    owner_kind, ttl_owner, DataTree, Event, Node, OwnerKind, CONFIG_PATH, CONTAINER_OWNER,
    SYSTEM_PATHS,
};
pub use txn::{Txn, TxnOp};

#[cfg(test)]
mod clickhouse_tests;
#[cfg(test)]
mod tests;
