//! cargo-fuzz target `kv_snapshot_decode`: `keel_kv::snapshot::decode` on
//! arbitrary bytes, raw and sealed (magic, version, frame lengths, CRCs and
//! END's counts made right).
//!
//! The body is `keel_kv::fuzzing::kv_snapshot_decode`, shared with the stable
//! smoke test.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| keel_kv::fuzzing::kv_snapshot_decode(data));
