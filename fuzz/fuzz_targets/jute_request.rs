//! cargo-fuzz target `jute_request`: frame check, `RequestHeader`, then the body decoded as every
//! request and reply op code, with decode(encode(x)) == x.
//!
//! The body is `keel_jute::fuzzing::jute_request`, shared with the stable smoke tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| keel_jute::fuzzing::jute_request(data));
