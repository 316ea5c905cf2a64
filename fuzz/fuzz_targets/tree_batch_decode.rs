//! cargo-fuzz target `tree_batch_decode`: `decode_batch` on arbitrary bytes; whatever decodes
//! is re-encoded and applied to a fresh tree.
//!
//! The body is `keel_tree::fuzzing::tree_batch_decode`, shared with the stable smoke tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| keel_tree::fuzzing::tree_batch_decode(data));
