//! Wing & Gong's search with Lowe's memoization, as in Porcupine, extended
//! for operations with an unknown outcome.
//!
//! Entries (invocations and returns of the operations with a known result)
//! sit in a doubly linked list sorted by time. At each configuration the
//! candidates are the invocations before the first return in the list: the
//! operations that may take effect next. Linearizing a candidate applies it
//! to the model (its result must match), removes ("lifts") its two entries
//! and pushes a frame; reaching a return entry means that operation should
//! already have been linearized, so the search backtracks (pops the last
//! frame, rolls the model back, re-inserts the entries and tries the next
//! candidate). Configurations already explored are skipped (see `memo`).
//!
//! Operations with an unknown outcome return at +infinity: they never close
//! a window, may be linearized anywhere after their invocation, and may also
//! never take effect, so the search succeeds as soon as every operation with
//! a known result is linearized. They sit in a second list and are tried
//! after the known candidates, if invoked before the first pending return;
//! taking one with no effect (an error) is pointless and skipped.
//!
//! Partial-order reduction. Call a maximal run of consecutive
//! unknown-outcome ops `u1 .. uj` followed by a known-outcome op `k` a
//! block. Two ops commute at a state if, applied in either order from it,
//! they leave the same state and the known-outcome one gets the same
//! result (an unknown-outcome op that fails in the swapped order is just
//! dropped: it had no effect). Any linearization can be rewritten, keeping
//! it valid, until every block satisfies:
//!  (A) `uj` and `k` do not commute (from the state before `uj`); otherwise
//!      swap them (`uj` never returned, so real-time order does not pin it);
//!  (B) every `ui` may conflict (statically, see `footprint`) with a later op
//!      of the block; otherwise it commutes with all of them: move it after
//!      `k`;
//!  (C) adjacent `ui`, `ui+1` do not commute or are in index order;
//!      otherwise swap them.
//! Each rewrite drops an unknown-outcome op, moves one later, or (C) sorts
//! two, so rewriting terminates. The search only builds such blocks: it
//! tracks the ops of the current run not yet "discharged" by a later
//! conflicting op and requires `k` to discharge all of them. (An earlier
//! version only required each unknown-outcome op to be followed by an op it
//! does not commute with; that is unsound when two commuting ones are both
//! needed by `k`, and the differential tests catch it.) Without this, every
//! subset of unrelated unknown-outcome ops would multiply the search; runs
//! of related ones still can, which is what the budget is for.

use crate::check::Prepared;
use crate::footprint::footprints;
use crate::history::{Call, Ret, Time};
use crate::memo::{After, Key, Memo};
use crate::model::{zobrist, Tree, Undo};

pub(crate) enum Verdict {
    Linearizable,
    /// The longest linearizable prefix found: (op, alternative) in order.
    NotLinearizable {
        best: Vec<(usize, usize)>,
    },
    /// Out of budget; the longest linearizable prefix found so far.
    Exhausted {
        best: Vec<(usize, usize)>,
    },
}

/// Runs the search over one partition, charging new configurations to
/// `states_left`.
pub(crate) fn run(ops: &[&Prepared], states_left: &mut u64) -> Verdict {
    Search::new(ops).run(states_left)
}

const HEAD: usize = 0;
const TAIL: usize = 1;
const UNKNOWN_HEAD: usize = 2;
const UNKNOWN_TAIL: usize = 3;
const SENTINELS: usize = 4;

struct Entry {
    op: usize,
    time: Time,
    is_call: bool,
    /// In the list of unknown-outcome invocations.
    unknown: bool,
}

/// A candidate position: an entry, and for unknown-list entries the time of
/// the first pending return (the window's end).
#[derive(Clone, Copy)]
struct Pos {
    entry: usize,
    deadline: Time,
}

#[derive(Clone, Copy)]
struct Frame {
    op: usize,
    alt: usize,
    undo_mark: usize,
}

enum Step {
    Taken,
    Rejected,
    Exhausted,
}

struct Search<'a> {
    ops: &'a [&'a Prepared<'a>],
    tree: Tree,
    undo: Vec<Undo>,
    entries: Vec<Entry>,
    next: Vec<usize>,
    prev: Vec<usize>,
    call_entry: Vec<usize>,
    /// `None` for unknown outcomes.
    ret_entry: Vec<Option<usize>>,
    zobrist: Vec<[u64; 2]>,
    /// Zobrist hash of the set of linearized known-outcome ops.
    known_set: [u64; 2],
    /// Index among the unknown-outcome ops, for those.
    unknown_index: Vec<Option<usize>>,
    /// The unknown-outcome ops, by that index.
    unknown_ops: Vec<usize>,
    /// Bitset of the linearized unknown-outcome ops.
    used: Vec<u64>,
    /// Bitset of the unknown-outcome ops of the current run that no later
    /// op of the run conflicts with yet (rule B).
    pending: Vec<u64>,
    /// `pending` before each frame, `pending.len()` words per frame.
    pending_log: Vec<u64>,
    /// For each unknown-outcome op: the ops it may conflict with (bitset).
    related: Vec<Option<Vec<u64>>>,
    memo: Memo,
    stack: Vec<Frame>,
    best: Vec<(usize, usize)>,
    known_left: usize,
}

impl<'a> Search<'a> {
    fn new(ops: &'a [&'a Prepared<'a>]) -> Search<'a> {
        let mut unknowns = 0;
        let unknown_index = ops
            .iter()
            .map(|p| {
                p.ret.is_none().then(|| {
                    unknowns += 1;
                    unknowns - 1
                })
            })
            .collect();
        let mut s = Search {
            ops,
            tree: Tree::new(),
            undo: Vec::new(),
            entries: Vec::with_capacity(SENTINELS + 2 * ops.len()),
            next: Vec::new(),
            prev: Vec::new(),
            call_entry: vec![0; ops.len()],
            ret_entry: vec![None; ops.len()],
            zobrist: (0..ops.len()).map(zobrist).collect(),
            known_set: [0; 2],
            unknown_ops: (0..ops.len()).filter(|&op| ops[op].ret.is_none()).collect(),
            unknown_index,
            used: vec![0; unknowns.div_ceil(64)],
            pending: vec![0; unknowns.div_ceil(64)],
            pending_log: Vec::new(),
            related: related(ops),
            memo: Memo::default(),
            stack: Vec::new(),
            best: Vec::new(),
            known_left: ops.len() - unknowns,
        };
        s.build_lists();
        s
    }

    /// Sorted by (time, invocations before returns, op): an invocation and a
    /// return at the same time count as concurrent.
    fn build_lists(&mut self) {
        for _ in 0..SENTINELS {
            self.entries.push(Entry {
                op: usize::MAX,
                time: 0,
                is_call: false,
                unknown: false,
            });
        }
        let mut known = Vec::new();
        let mut unknown = Vec::new();
        for (op, p) in self.ops.iter().enumerate() {
            let call = Entry {
                op,
                time: p.op.invoke,
                is_call: true,
                unknown: p.ret.is_none(),
            };
            match p.ret_time() {
                Some(time) => {
                    known.push(call);
                    known.push(Entry {
                        op,
                        time,
                        is_call: false,
                        unknown: false,
                    });
                }
                None => unknown.push(call),
            }
        }
        known.sort_by_key(|e| (e.time, !e.is_call, e.op));
        unknown.sort_by_key(|e| (e.time, e.op));
        self.next = vec![0; SENTINELS + known.len() + unknown.len()];
        self.prev = self.next.clone();
        self.link(HEAD, TAIL, known);
        self.link(UNKNOWN_HEAD, UNKNOWN_TAIL, unknown);
    }

    fn link(&mut self, head: usize, tail: usize, entries: Vec<Entry>) {
        let mut last = head;
        for e in entries {
            let id = self.entries.len();
            if e.is_call {
                self.call_entry[e.op] = id;
            } else {
                self.ret_entry[e.op] = Some(id);
            }
            self.entries.push(e);
            self.next[last] = id;
            self.prev[id] = last;
            last = id;
        }
        self.next[last] = tail;
        self.prev[tail] = last;
    }

    fn run(mut self, states_left: &mut u64) -> Verdict {
        if self.known_left == 0 {
            return Verdict::Linearizable;
        }
        let mut pos = self.first();
        let mut alt = 0;
        loop {
            match pos {
                Some(p) => match self.try_op(self.entries[p.entry].op, alt, states_left) {
                    Step::Taken if self.known_left == 0 => return Verdict::Linearizable,
                    Step::Taken => (pos, alt) = (self.first(), 0),
                    Step::Rejected => (pos, alt) = (self.after(p), 0),
                    Step::Exhausted => {
                        return Verdict::Exhausted {
                            best: self.longest(),
                        }
                    }
                },
                None => {
                    let Some(frame) = self.pop() else {
                        return Verdict::NotLinearizable { best: self.best };
                    };
                    (pos, alt) = (Some(self.resume(frame.op)), frame.alt + 1);
                }
            }
        }
    }

    /// The first candidate of the current configuration.
    fn first(&self) -> Option<Pos> {
        self.scan_known(self.next[HEAD])
    }

    /// Candidates from known-list entry `e` on: invocations up to the first
    /// return, then the unknown-outcome invocations of the window.
    fn scan_known(&self, e: usize) -> Option<Pos> {
        assert!(
            e != TAIL,
            "a known operation is pending, so a return entry remains"
        );
        if self.entries[e].is_call {
            return Some(Pos {
                entry: e,
                deadline: 0,
            });
        }
        self.scan_unknown(self.next[UNKNOWN_HEAD], self.entries[e].time)
    }

    fn scan_unknown(&self, e: usize, deadline: Time) -> Option<Pos> {
        let in_window = e != UNKNOWN_TAIL && self.entries[e].time <= deadline;
        in_window.then_some(Pos { entry: e, deadline })
    }

    fn after(&self, p: Pos) -> Option<Pos> {
        if self.entries[p.entry].unknown {
            self.scan_unknown(self.next[p.entry], p.deadline)
        } else {
            self.scan_known(self.next[p.entry])
        }
    }

    /// The position of `op`'s invocation, just re-inserted by a backtrack.
    fn resume(&self, op: usize) -> Pos {
        let entry = self.call_entry[op];
        let mut e = self.next[HEAD];
        while self.entries[e].is_call {
            e = self.next[e];
        }
        Pos {
            entry,
            deadline: self.entries[e].time,
        }
    }

    /// The frame of the last op if it has an unknown outcome.
    fn restriction(&self) -> Option<Frame> {
        self.stack
            .last()
            .filter(|f| self.related[f.op].is_some())
            .copied()
    }

    /// Tries to linearize `op` now, with its alternatives from `alt_from` on.
    fn try_op(&mut self, op: usize, alt_from: usize, states_left: &mut u64) -> Step {
        let top = self.restriction();
        if !self.block_allows(top, op) {
            return Step::Rejected;
        }
        let known = self.unknown_index[op].is_none();
        for alt in alt_from..self.ops[op].alts.len() {
            let before = self.tree.fingerprint();
            let applied = match top {
                // (A)
                Some(u) if known => self.apply_unless_commuting(u, op, alt),
                // (C): out of index order only if they do not commute.
                Some(u) if self.unknown_index[op] < self.unknown_index[u.op] => {
                    self.apply_unless_commuting(u, op, alt)
                }
                _ => self.apply(op, alt),
            };
            let Some(mark) = applied else { continue };
            let pending = self.pending_after(op);
            if !self.remember(op, before, &pending) {
                self.tree.rollback(&mut self.undo, mark);
                continue;
            }
            if *states_left == 0 {
                return Step::Exhausted;
            }
            *states_left -= 1;
            self.mark_linearized(op);
            self.lift(op);
            self.pending_log.extend_from_slice(&self.pending);
            self.pending = pending;
            self.stack.push(Frame {
                op,
                alt,
                undo_mark: mark,
            });
            return Step::Taken;
        }
        Step::Rejected
    }

    /// The static part of the block rules for taking `op` next, `top` being
    /// the last op if it has an unknown outcome.
    fn block_allows(&self, top: Option<Frame>, op: usize) -> bool {
        match (self.unknown_index[op], top) {
            // (A), static part, and (B): `op` ends the block.
            (None, Some(u)) => self.is_related(u.op, op) && self.discharges_all(op),
            (None, None) => true,
            // (C), static part
            (Some(i), Some(u))
                if !self.is_related(u.op, op) && Some(i) < self.unknown_index[u.op] =>
            {
                false
            }
            // (B) for `op` itself: something in the window must be able to follow.
            (Some(_), _) => self.window_has_related(op),
        }
    }

    /// Whether every pending op of the run may conflict with `k`.
    fn discharges_all(&self, k: usize) -> bool {
        self.pending_ops().all(|u| self.is_related(u, k))
    }

    /// The pending set after taking `op`: empty after a known-outcome op;
    /// else the pending ops `op` does not conflict with, plus `op`.
    fn pending_after(&self, op: usize) -> Vec<u64> {
        let mut pending = vec![0; self.pending.len()];
        let Some(i) = self.unknown_index[op] else {
            return pending;
        };
        for u in self.pending_ops().filter(|&u| !self.is_related(u, op)) {
            let j = self.unknown_index[u].expect("pending ops have unknown outcomes");
            pending[j / 64] |= 1 << (j % 64);
        }
        pending[i / 64] |= 1 << (i % 64);
        pending
    }

    /// The ops in `pending`, as op indices.
    fn pending_ops(&self) -> impl Iterator<Item = usize> + '_ {
        let unknown_ops = self.unknown_ops.as_slice();
        self.pending.iter().enumerate().flat_map(move |(w, &word)| {
            (0..64)
                .filter(move |b| word & (1 << b) != 0)
                .map(move |b| unknown_ops[w * 64 + b])
        })
    }

    /// Whether `k` may conflict with unknown-outcome op `u`.
    fn is_related(&self, u: usize, k: usize) -> bool {
        let bits = self.related[u].as_ref().expect("unknown-outcome op");
        bits[k / 64] & (1 << (k % 64)) != 0
    }

    /// Whether some other candidate could follow unknown-outcome op `u`
    /// (linearizing `u` does not change the window).
    fn window_has_related(&self, u: usize) -> bool {
        let mut pos = self.first();
        while let Some(p) = pos {
            let k = self.entries[p.entry].op;
            if k != u && self.is_related(u, k) {
                return true;
            }
            pos = self.after(p);
        }
        false
    }

    /// Applies `op` if the model's answer is acceptable; returns the undo mark.
    fn apply(&mut self, op: usize, alt: usize) -> Option<usize> {
        let p: &'a Prepared = self.ops[op];
        let mark = self.undo.len();
        let got = self
            .tree
            .apply(&p.op.call, p.op.session, &p.alts[alt], &mut self.undo);
        if accepts(p, got.as_ref()) {
            return Some(mark);
        }
        self.tree.rollback(&mut self.undo, mark);
        None
    }

    /// Like `apply` for `op` right after unknown-outcome op `u`, but only if
    /// they do not commute from the state before `u`: swapped, the state
    /// after both differs, or (if `op` has a known outcome) its result does.
    fn apply_unless_commuting(&mut self, u: Frame, op: usize, alt: usize) -> Option<usize> {
        let p: &'a Prepared = self.ops[op];
        let mark = self.undo.len();
        let ret = self
            .tree
            .apply(&p.op.call, p.op.session, &p.alts[alt], &mut self.undo);
        if !accepts(p, ret.as_ref()) {
            self.tree.rollback(&mut self.undo, mark);
            return None;
        }
        let state = self.tree.fingerprint();
        // The swapped order: `op`, then `u` (dropped if it now fails).
        self.tree.rollback(&mut self.undo, u.undo_mark);
        let swapped_ret = self
            .tree
            .apply(&p.op.call, p.op.session, &p.alts[alt], &mut self.undo);
        let _ = self.apply(u.op, u.alt);
        let swapped_state = self.tree.fingerprint();
        self.tree.rollback(&mut self.undo, u.undo_mark);
        assert_eq!(
            self.apply(u.op, u.alt),
            Some(u.undo_mark),
            "re-applying an unknown-outcome op"
        );
        let same_ret = p.ret.is_none() || ret == swapped_ret;
        if same_ret && state == swapped_state {
            return None;
        }
        let mark = self.undo.len();
        let again = self
            .tree
            .apply(&p.op.call, p.op.session, &p.alts[alt], &mut self.undo);
        assert_eq!(again, ret, "the model is deterministic");
        Some(mark)
    }

    /// Records the configuration reached by linearizing `op` (from state
    /// `before`); `false` if an equivalent or better one was explored.
    fn remember(&mut self, op: usize, before: [u64; 2], pending: &[u64]) -> bool {
        let state = self.tree.fingerprint();
        match self.unknown_index[op] {
            None => {
                let key = Key::new(xor(self.known_set, self.zobrist[op]), state);
                self.memo.insert(key, &self.used, pending, None)
            }
            Some(i) => {
                self.used[i / 64] ^= 1 << (i % 64);
                let after = Some(After { op, before });
                let fresh =
                    self.memo
                        .insert(Key::new(self.known_set, state), &self.used, pending, after);
                self.used[i / 64] ^= 1 << (i % 64);
                fresh
            }
        }
    }

    fn mark_linearized(&mut self, op: usize) {
        match self.unknown_index[op] {
            None => self.known_set = xor(self.known_set, self.zobrist[op]),
            Some(i) => self.used[i / 64] ^= 1 << (i % 64),
        }
    }

    /// The longest prefix linearized so far (the current one included).
    fn longest(&mut self) -> Vec<(usize, usize)> {
        if self.stack.len() > self.best.len() {
            self.best = self.stack.iter().map(|f| (f.op, f.alt)).collect();
        }
        std::mem::take(&mut self.best)
    }

    /// Undoes the last linearization; `None` when there is none.
    fn pop(&mut self) -> Option<Frame> {
        if self.stack.len() > self.best.len() {
            self.best = self.stack.iter().map(|f| (f.op, f.alt)).collect();
        }
        let frame = self.stack.pop()?;
        let words = self.pending.len();
        self.pending
            .copy_from_slice(&self.pending_log[self.pending_log.len() - words..]);
        self.pending_log.truncate(self.pending_log.len() - words);
        self.tree.rollback(&mut self.undo, frame.undo_mark);
        self.mark_linearized(frame.op);
        self.unlift(frame.op);
        Some(frame)
    }

    fn lift(&mut self, op: usize) {
        self.unlink(self.call_entry[op]);
        if let Some(r) = self.ret_entry[op] {
            self.unlink(r);
            self.known_left -= 1;
        }
    }

    fn unlift(&mut self, op: usize) {
        if let Some(r) = self.ret_entry[op] {
            self.relink(r);
            self.known_left += 1;
        }
        self.relink(self.call_entry[op]);
    }

    fn unlink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = n;
        self.prev[n] = p;
    }

    /// Dancing links: `e` still points at its old neighbours.
    fn relink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = e;
        self.prev[n] = e;
    }
}

/// For each unknown-outcome op, the bitset of ops it may conflict with.
fn related(ops: &[&Prepared]) -> Vec<Option<Vec<u64>>> {
    let prints = footprints(ops);
    (0..ops.len())
        .map(|u| {
            ops[u].ret.is_none().then(|| {
                let mut bits = vec![0u64; ops.len().div_ceil(64)];
                for (k, print) in prints.iter().enumerate() {
                    if k != u && prints[u].conflicts(print) {
                        bits[k / 64] |= 1 << (k % 64);
                    }
                }
                bits
            })
        })
        .collect()
}

/// Whether the model's answer `got` is a possible outcome of `p`: the
/// recorded result for a known outcome, any effect for an unknown one.
fn accepts(p: &Prepared, got: Option<&Ret>) -> bool {
    match (&p.ret, got) {
        (_, None) => false,
        (None, Some(got)) => !matches!(got, Ret::Error(_)),
        (Some(want), Some(got)) => want == got || any_error_will_do(&p.op.call, want),
    }
}

/// Deleting "/" fails; ZooKeeper versions disagree on the code.
fn any_error_will_do(call: &Call, want: &Ret) -> bool {
    matches!((call, want), (Call::Delete { path, .. }, Ret::Error(_)) if path == "/")
}

fn xor(a: [u64; 2], b: [u64; 2]) -> [u64; 2] {
    [a[0] ^ b[0], a[1] ^ b[1]]
}
