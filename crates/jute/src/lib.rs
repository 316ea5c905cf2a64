//! `keel-jute`: a byte-exact codec for Apache ZooKeeper's client protocol.
//!
//! ZooKeeper serializes everything with *Jute*: big-endian integers,
//! one-byte booleans, and `i32`-length-prefixed buffers, strings and vectors
//! (length `-1` meaning null). Packets are framed by an `i32` length. This
//! crate provides:
//!
//! - [`codec`]: the primitives ([`Reader`], `write_*`) and the [`Record`] trait;
//! - [`frame`]: framing ([`frame::check_frame`], [`frame::write_frame`]);
//! - [`consts`]: op codes, xids, permissions, error codes and enums;
//! - [`records`]: every record in `zookeeper.jute` used on the client port;
//! - [`message`]: typed [`Request`] / [`Response`] bodies keyed by op code,
//!   including the `multi` encoding;
//! - [`clickhouse`]: the request records ClickHouse Keeper adds (op codes
//!   500–503) and its form of failed multiRead results.
//!
//! Decoding never panics and checks every length against the bytes actually
//! present before allocating, so hostile input costs at most its own size.
//! The encodings are verified against frames captured from a real
//! ZooKeeper 3.8 server (see `tests/golden`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clickhouse;
pub mod codec;
pub mod consts;
pub mod error;
pub mod frame;
#[doc(hidden)]
#[cfg(any(test, feature = "testing"))]
pub mod fuzzing;
pub mod message;
pub mod records;

#[cfg(test)]
mod samples;

pub use clickhouse::{FilteredListRequest, ListRequestType, RemoveRecursiveRequest};
pub use codec::{
    write_bool, write_buffer, write_i32, write_i64, write_string, write_string_vec, Reader, Record,
};
pub use consts::{
    opcode, perms, xid, AddWatchMode, CreateMode, ErrorCode, EventType, KeeperState, WatcherType,
};
pub use error::JuteError;
pub use frame::{check_frame, write_frame, DEFAULT_MAX_FRAME_BYTES};
pub use message::{MultiOp, MultiResult, Request, Response};
pub use records::*;
