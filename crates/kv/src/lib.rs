//! keel-kv: Keel KV's keyspace and protocol, without IO.
//!
//! - `resp`, `reply`: RESP2/RESP3 requests (multibulk and inline, each
//!   frame checked complete and within `resp::Limits` before it is
//!   parsed) and replies.
//! - `command`: the command table (Redis 7.0's names, arities and errors)
//!   and argument checking.
//! - `slot`: Redis Cluster's 16,384 key slots (CRC16, hash tags); shards
//!   own contiguous slot ranges.
//! - `shard`, `value`: the keys of one shard, compactly stored.
//! - `exec`, `keyspace`: commands and log operations applied to shards
//!   with Redis 7.0's semantics and replies.
//! - `op`: what a write puts in the Raft log.
//! - `session`: a connection's protocol state (MULTI/EXEC/WATCH, HELLO,
//!   SELECT, CLIENT, READONLY) as a state machine the server's connection
//!   shell drives.
//! - `snapshot`: the keyspace's part of a Keel snapshot file.
//!
//! Time comes in as numbers (the log's clock, decided by the leader);
//! nothing here reads a clock, a socket or a file.

pub mod command;
pub mod exec;
#[cfg(any(test, feature = "testing"))]
pub mod fuzzing;
pub mod glob;
pub mod keyspace;
pub mod op;
pub mod planted;
pub mod reply;
pub mod resp;
pub mod session;
pub mod shard;
pub mod slot;
pub mod snapshot;
pub mod value;

pub use keyspace::Keyspace;
pub use op::{Op, Watch};
pub use reply::{Protocol, Reply};
pub use shard::{Ctx, Shard};

#[cfg(test)]
mod tests;
