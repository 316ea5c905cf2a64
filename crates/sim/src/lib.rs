//! sim: Keel's deterministic cluster simulator.
//!
//! A run builds N nodes from the crates the server runs — keel-tree's
//! DataTree and watch manager, keel-session's tracker, keel-consensus's
//! sans-IO Raft `Core` — and drives them from one event queue with a
//! simulated network (delay, drop, duplicate, reorder, partition, heal),
//! simulated disks (fsync latency, a crash that tears the write in flight,
//! snapshots lost if not yet synced), a simulated clock (skewed ticks,
//! session expiry) and crash/restart from the simulated disk. Clients
//! issue ZooKeeper operations and record a history.
//!
//! Checked on every run (world.rs, keel-linearize):
//! - the history of writes and sync+reads is linearizable against a model
//!   of the tree, and final reads after healing show no lost write;
//! - replicas have equal tree digests at every applied index, and all
//!   converge once healed;
//! - each session's responses never go back in zxid; its watch events
//!   arrive exactly once, in zxid order, before any response at or after
//!   the change that fired them;
//! - ephemerals exist exactly while their session lives;
//! - the reaper deletes only what is due, and leaves nothing due;
//! - every snapshot written loads with the replicas' digest, and a
//!   restart refuses the one corrupted at its crash;
//! - Keel KV (half the runs, `kv.rs`): the digests cover the keyspace,
//!   each key's history is linearizable, no acknowledged INCR is lost.
//!
//! `SIM_SEED=<n> cargo test -p sim --release replay -- --nocapture`
//! replays one seed with its trace; see crates/sim/README.md.

pub mod disk;
pub mod kv;
pub mod machine;
pub mod rng;
pub mod workload;
pub mod world;

pub use world::{run_seed, Joiner, Options, Report, Stats, World};
