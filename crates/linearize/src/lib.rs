//! Linearizability checking of ZooKeeper histories recorded by Keel's
//! deterministic cluster simulator, and by any driver that writes a history
//! file (JSON lines, [`jsonl`]) for the `keel-linearize` binary: the fault
//! campaign on real processes (tests/nemesis) does.
//!
//! # What is checked
//!
//! A history is a set of [`Operation`]s: a client's [`Call`], its invocation
//! time, and its return time and [`Ret`] when known. It is linearizable if
//! each operation can be given a point between its invocation and its return
//! such that applying the operations in point order to a ZooKeeper data tree
//! (the model, starting from only "/") yields exactly the recorded results.
//!
//! The model covers data and versions, NoNode / NodeExists / BadVersion /
//! NotEmpty / NoChildrenForEphemerals in ZooKeeper's check order, ephemerals
//! and their deletion by CloseSession (after which the session's requests
//! fail with SessionExpired), atomic multi (a failed multi reports the first
//! failing op's error and has no effect), and sequential names. Sequential
//! counters are modelled permissively but soundly: a name is accepted if it
//! is the requested path plus exactly 10 digits, does not exist, and its
//! counter exceeds every counter used before under the same parent since
//! that parent was created. ACLs, quotas, containers, TTLs and stat fields
//! other than the data version are not modelled (NoAuth is never expected).
//!
//! Results that constrain nothing: `Error(SessionExpired)` and
//! `Error(ConnectionLoss)` (no effect, allowed at any point) are dropped; so
//! are reads with an unknown outcome. `Error(OperationTimeout)` is treated
//! like an unknown outcome. An operation with an unknown outcome may take
//! effect at any single point after its invocation, or never.
//!
//! # Algorithm
//!
//! 1. Partitioning (P-compositionality, as in Porcupine and Knossos):
//!    operations on different top-level subtrees are independent, so the
//!    history is split by subtree and each part is checked alone; multi,
//!    CloseSession and operations on "/" merge subtrees (see `partition`).
//! 2. Per part, Wing & Gong's backtracking search with Lowe's memoization
//!    (see `search`): repeatedly linearize an operation whose invocation
//!    precedes every pending return, backtrack when a return is reached
//!    first, and skip configurations (set of linearized operations, model
//!    state) already explored, or dominated by one explored (`memo`). The
//!    model is mutated in place with an undo log; configurations are
//!    memoized by 256-bit fingerprints. Unknown-outcome operations are
//!    tried last and only in canonical "blocks" (a partial-order reduction
//!    based on which operations commute, `footprint` and `search`), which
//!    keeps the usual blow-up they cause in check.
//! 3. On failure, the report names the part's subtrees, the longest
//!    linearizable prefix found, the model state after it, and every
//!    operation that could have come next with the model's answer to it.
//!
//! Everything is deterministic (no hash-order dependence): the same history
//! gives the same [`Outcome`] and the same report, byte for byte. The search
//! is exponential in the worst case; [`Budget`] bounds it and yields
//! [`Outcome::Unknown`] when it runs out.
//!
//! # Limits
//!
//! - A closed session's requests are only rejected inside the partitions its
//!   CloseSession belongs to (where the session created ephemerals).
//! - Session expiry is only modelled through a recorded CloseSession (use an
//!   unknown outcome when the moment is uncertain).
//! - ZooKeeper's per-session FIFO order is not assumed: an unknown-outcome
//!   request may take effect after later requests of its own session.
//! - Cost grows with the number of unknown-outcome writes on busy nodes:
//!   on generated 2,000-op histories with 8 clients over ~20 paths in one
//!   partition, ~2% unknown outcomes check in ~15-30 ms (worst seen ~90
//!   ms), ~4% in ~50 ms median but up to ~1 s, and ~6% can exhaust the
//!   default budget.
//!
//! # Example
//!
//! ```
//! use keel_linearize::{check, Budget, Call, Operation, Ret};
//! let create = Call::Create { path: "/a".into(), data: b"x".to_vec(), ephemeral: false, sequential: false };
//! let read = Call::GetData { path: "/a".into() };
//! let ops = vec![
//!     Operation { client: 1, session: 1, call: create, invoke: 1, ret: Some((2, Ret::Created { path: "/a".into() })) },
//!     Operation { client: 2, session: 2, call: read, invoke: 3, ret: Some((4, Ret::Error(-101))) },
//! ];
//! assert!(check(&ops, Budget::default()).is_not_linearizable());
//! ```

mod check;
mod footprint;
mod history;
pub mod jsonl;
mod memo;
mod model;
mod partition;
mod report;
mod search;

pub use check::{check, Budget, Outcome};
pub use history::{err, Call, History, Operation, Ret, Time};

#[cfg(test)]
mod tests;
