//! The memo of explored search configurations, with dominance.
//!
//! A configuration is: the set of linearized known-outcome operations, the
//! model state, the set of unknown-outcome operations already linearized
//! ("used"), and, inside a run of unknown-outcome operations, the last one
//! (with the state before it) and the run's pending set (these restrict the
//! next steps, see `search`). The first two are hashed into the map key; for
//! one key the map keeps the other parts seen. A configuration is skipped
//! if a seen one with the same key used a subset of its unknown-outcome
//! operations and was either outside a run, or in a run with the same last
//! op and a subset of its pending set: every continuation of the new one is
//! open to the seen one, which failed (or, if it is an ancestor on the
//! stack, reaches the same states directly).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// "Reached right after unknown-outcome op `op`, applied to state `before`".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct After {
    pub op: usize,
    pub before: [u64; 2],
}

/// One seen (used, restriction) pair; `next` chains pairs of the same key.
struct Seen {
    /// Offset of the used then the pending bitset in `Memo::bits`.
    used_at: u32,
    after: Option<After>,
    next: u32,
}

const NONE: u32 = u32::MAX;

/// Memo key: 128-bit Zobrist hash of the known-op set + 128-bit state
/// fingerprint. A collision (odds ~ states^2 / 2^128) could only prune a
/// configuration never explored, i.e. cause a spurious NotLinearizable,
/// never a spurious Linearizable.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key([u64; 4]);

impl Key {
    pub fn new(set: [u64; 2], state: [u64; 2]) -> Key {
        Key([set[0], set[1], state[0], state[1]])
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.0[0] ^ self.0[2].rotate_left(29));
    }
}

/// The key words are already uniformly mixed: pass them through.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 ^= x;
    }
}

/// Arena-backed: no allocation per configuration.
#[derive(Default)]
pub(crate) struct Memo {
    heads: HashMap<Key, u32, BuildHasherDefault<KeyHasher>>,
    seen: Vec<Seen>,
    bits: Vec<u64>,
}

impl Memo {
    /// Records the configuration; `false` if it is dominated by one seen.
    pub fn insert(
        &mut self,
        key: Key,
        used: &[u64],
        pending: &[u64],
        after: Option<After>,
    ) -> bool {
        let head = *self.heads.get(&key).unwrap_or(&NONE);
        let mut i = head;
        while i != NONE {
            let s = &self.seen[i as usize];
            let at = s.used_at as usize;
            let (seen_used, seen_pending) = self.bits[at..at + 2 * used.len()].split_at(used.len());
            let run_ok = s.after.is_none() || (s.after == after && subset(seen_pending, pending));
            if run_ok && subset(seen_used, used) {
                return false;
            }
            i = s.next;
        }
        let used_at = u32::try_from(self.bits.len()).expect("memo within 4G words");
        self.bits.extend_from_slice(used);
        self.bits.extend_from_slice(pending);
        self.seen.push(Seen {
            used_at,
            after,
            next: head,
        });
        self.heads.insert(key, (self.seen.len() - 1) as u32);
        true
    }
}

fn subset(a: &[u64], b: &[u64]) -> bool {
    a.iter().zip(b).all(|(x, y)| x & !y == 0)
}
