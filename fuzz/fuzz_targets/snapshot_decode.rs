//! cargo-fuzz target `snapshot_decode`: `snapshot::decode` on arbitrary bytes, raw and with
//! a repaired envelope (magic, version, CRC, digest).
//!
//! The body is `keel_tree::fuzzing::snapshot_decode`, shared with the stable smoke tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| keel_tree::fuzzing::snapshot_decode(data));
