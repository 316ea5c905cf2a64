//! cargo-fuzz target `kv_resp`: Keel KV's RESP decoder (whole and split
//! input agree, bounds hold), then every request through the session and
//! a two-shard keyspace, replies in RESP2 and RESP3, and a snapshot round
//! trip of the keyspace.
//!
//! The body is `keel_kv::fuzzing::resp_session`, shared with the stable tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| keel_kv::fuzzing::resp_session(data));
