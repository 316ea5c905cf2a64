//! cargo-fuzz target `tree_apply`: a program of transactions (every create mode, delete,
//! setData, setACL, multi, sessions, deleteContainer, ...) applied to a
//! `DataTree`, with its invariants checked after every transaction.
//!
//! The body is `keel_tree::fuzzing::tree_apply`, shared with the stable smoke tests.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| keel_tree::fuzzing::tree_apply(data));
