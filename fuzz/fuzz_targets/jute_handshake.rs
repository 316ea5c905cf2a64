//! cargo-fuzz target `jute_handshake`: `ConnectRequest` (with and without the trailing readOnly
//! byte) and `ConnectResponse`, with decode(encode(x)) == x.
//!
//! The body is `keel_jute::fuzzing::jute_handshake`, shared with the stable smoke tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| keel_jute::fuzzing::jute_handshake(data));
