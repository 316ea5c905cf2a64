//! Running commands on shards, with Redis 7.0's semantics and replies.
//!
//! A `View` is the set of shards a command may touch (one shard for most
//! commands; all of them for FLUSHDB, KEYS and DBSIZE; those of its keys
//! for MSET or a transaction). Writes run with a `Ctx` from the log (its
//! index becomes the changed keys' version, its clock decides expiry);
//! reads run at the log clock of the state they read and change nothing.

use smallvec::SmallVec;

use crate::command::{Command, Condition, ExpiryArg, Route, TtlForm};
use crate::glob;
use crate::reply::{Reply, OVERFLOW};
use crate::resp::parse_i64;
use crate::shard::{Ctx, Shard, CURSOR_HASH_BITS, PREFETCH_KEYS_MAX};
use crate::slot::{key_slot, SLOTS};
use crate::value::{Aggregate, Entry, ValueType};

/// Redis's proto-max-bulk-len default: the longest string APPEND may make.
pub const STRING_BYTES_MAX: usize = 512 << 20;

/// The shards a command runs on.
pub struct View<'s> {
    /// Inline up to VIEW_SHARDS_INLINE: a read or an applied write on one
    /// shard (nearly all of them) allocates nothing for its view.
    shards: SmallVec<[&'s mut Shard; VIEW_SHARDS_INLINE]>,
    /// The slot of every key the one command run on this view names, when
    /// the caller knows it (`View::in_slot`): its keys are not hashed
    /// again.
    slot: Option<u16>,
}

/// Shards a `View` holds without a heap allocation.
const VIEW_SHARDS_INLINE: usize = 2;

impl<'s> View<'s> {
    pub fn new(shards: impl IntoIterator<Item = &'s mut Shard>) -> View<'s> {
        let shards: SmallVec<_> = shards.into_iter().collect();
        assert!(!shards.is_empty());
        View { shards, slot: None }
    }

    /// A view for running one command whose every key is in `slot` (a
    /// read whose `ReadRoute` has a slot). The slot must be one of the
    /// shards'.
    pub fn in_slot(shards: impl IntoIterator<Item = &'s mut Shard>, slot: u16) -> View<'s> {
        let mut view = View::new(shards);
        assert!(
            view.shards.iter().any(|s| s.owns(slot)),
            "slot {slot} is not in this view"
        );
        view.slot = Some(slot);
        view
    }

    /// The slot of `key`: the view's, if it has one.
    fn slot_of(&self, key: &[u8]) -> u16 {
        match self.slot {
            Some(slot) => {
                debug_assert_eq!(slot, key_slot(key), "a key outside the view's slot");
                slot
            }
            None => key_slot(key),
        }
    }

    fn index_of_slot(&self, slot: u16) -> usize {
        self.shards
            .iter()
            .position(|s| s.owns(slot))
            .unwrap_or_else(|| panic!("slot {slot} is not in this view"))
    }

    pub fn shard(&mut self, key: &[u8]) -> &mut Shard {
        let at = self.index_of_slot(self.slot_of(key));
        self.shards[at]
    }

    fn shard_ref(&self, key: &[u8]) -> &Shard {
        self.shards[self.index_of_slot(self.slot_of(key))]
    }

    pub fn shards(&mut self) -> impl Iterator<Item = &mut Shard> + use<'_, 's> {
        self.shards.iter_mut().map(|s| &mut **s)
    }

    /// Prefetches the lookups of `keys` (`Shard::prefetch`), each on its
    /// shard, PREFETCH_KEYS_MAX at a time: the first ones only, for a
    /// command with more (the rest would leave the cache before their turn).
    fn prefetch(&self, keys: &[&[u8]]) {
        let mut all = [(0u16, &[][..]); PREFETCH_KEYS_MAX];
        let count = keys.len().min(PREFETCH_KEYS_MAX);
        for (at, &key) in all.iter_mut().zip(keys) {
            *at = (self.slot_of(key), key);
        }
        for shard in &self.shards {
            shard.prefetch_owned(all[..count].iter().copied());
        }
    }

    /// A read's lookup: hides expired keys, counts hits and misses.
    fn read(&self, key: &[u8], now_ms: i64) -> Option<&Entry> {
        let slot = self.slot_of(key);
        let shard = &*self.shards[self.index_of_slot(slot)];
        let found = shard.get_in(slot, key, now_ms);
        let counter = match found {
            Some(_) => &shard.stats.keyspace_hits,
            None => &shard.stats.keyspace_misses,
        };
        counter.set(counter.get() + 1);
        found
    }
}

/// The clocks a command runs at: `now_ms` decides what exists (the log's
/// clock); `display_ms` is what TTL counts down from (this node's clock,
/// never before the log's; equal to it for writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clocks {
    pub ctx: Ctx,
    pub display_ms: i64,
}

impl Clocks {
    /// A write at `ctx`.
    pub fn write(ctx: Ctx) -> Clocks {
        Clocks {
            ctx,
            display_ms: ctx.now_ms,
        }
    }

    /// A read of the state at log clock `log_ms`, on a node whose clock
    /// reads `wall_ms`.
    pub fn read(log_ms: i64, wall_ms: i64) -> Clocks {
        Clocks {
            ctx: Ctx {
                stamp: 0,
                now_ms: log_ms,
            },
            display_ms: wall_ms.max(log_ms),
        }
    }
}

/// The slot a SCAN cursor resumes at (`None` past the last slot).
pub fn cursor_slot(cursor: u64) -> Option<u16> {
    let slot = cursor >> CURSOR_HASH_BITS;
    (slot < SLOTS as u64).then_some(slot as u16)
}

fn cursor(slot: u16, position: u64) -> u64 {
    ((slot as u64) << CURSOR_HASH_BITS) | position
}

/// Runs `command` on `view`. Writes must come from the log (their
/// `Clocks::write`).
pub fn execute(view: &mut View<'_>, command: &Command<'_>, clocks: Clocks) -> Reply {
    if let Route::Keys(keys) = command.route() {
        // MGET, MSET, DEL, ...: their lookups' cache misses overlap.
        if keys.len() > 1 {
            view.prefetch(&keys);
        }
    }
    if command.is_write() {
        write(view, command, clocks.ctx)
    } else {
        read(view, command, clocks)
    }
}

fn wrong_type() -> Reply {
    Reply::wrong_type()
}

fn read(view: &mut View<'_>, command: &Command<'_>, clocks: Clocks) -> Reply {
    let now = clocks.ctx.now_ms;
    match command {
        Command::Get(key) => match view.read(key, now) {
            None => Reply::Null,
            Some(e) => match e.string_value() {
                Some(v) => Reply::bulk(v),
                None => wrong_type(),
            },
        },
        Command::MGet(keys) => Reply::Array(
            keys.iter()
                .map(|k| match view.read(k, now).and_then(Entry::string_value) {
                    Some(v) => Reply::bulk(v),
                    None => Reply::Null,
                })
                .collect(),
        ),
        Command::Exists(keys) => Reply::Integer(
            keys.iter()
                .filter(|k| view.shard_ref(k).get(k, now).is_some())
                .count() as i64,
        ),
        Command::StrLen(key) => match view.read(key, now) {
            None => Reply::Integer(0),
            Some(e) => match e.string_value() {
                Some(v) => Reply::Integer(v.len() as i64),
                None => wrong_type(),
            },
        },
        Command::Ttl(key, form) => match view.shard_ref(key).get(key, now) {
            None => Reply::Integer(-2),
            Some(e) if e.expire_at_ms == 0 => Reply::Integer(-1),
            Some(e) => {
                let absolute = matches!(form, TtlForm::UnixSeconds | TtlForm::UnixMilliseconds);
                let display_ms = if crate::planted::ttl_from_log_clock() {
                    clocks.ctx.now_ms
                } else {
                    clocks.display_ms
                };
                let ttl = if absolute {
                    e.expire_at_ms
                } else {
                    e.expire_at_ms - display_ms
                }
                .max(0);
                Reply::Integer(match form {
                    TtlForm::Milliseconds | TtlForm::UnixMilliseconds => ttl,
                    TtlForm::Seconds | TtlForm::UnixSeconds => (ttl + 500) / 1000,
                })
            }
        },
        Command::HGet(key, field) => with_hash(view.read(key, now), Reply::Null, |h| {
            h.hash_get(field).map_or(Reply::Null, Reply::bulk)
        }),
        Command::HMGet(key, fields) => {
            let all_null = || Reply::Array(fields.iter().map(|_| Reply::Null).collect());
            with_hash(view.read(key, now), all_null(), |h| {
                Reply::Array(
                    fields
                        .iter()
                        .map(|f| h.hash_get(f).map_or(Reply::Null, Reply::bulk))
                        .collect(),
                )
            })
        }
        Command::HGetAll(key) => with_hash(view.read(key, now), Reply::Map(Vec::new()), |h| {
            Reply::Map(
                h.hash_pairs()
                    .map(|(f, v)| (Reply::bulk(f), Reply::bulk(v)))
                    .collect(),
            )
        }),
        Command::HKeys(key) => with_hash(view.read(key, now), Reply::Array(Vec::new()), |h| {
            Reply::Array(h.hash_pairs().map(|(f, _)| Reply::bulk(f)).collect())
        }),
        Command::HVals(key) => with_hash(view.read(key, now), Reply::Array(Vec::new()), |h| {
            Reply::Array(h.hash_pairs().map(|(_, v)| Reply::bulk(v)).collect())
        }),
        Command::HLen(key) => with_hash(view.read(key, now), Reply::Integer(0), |h| {
            Reply::Integer(h.len() as i64)
        }),
        Command::HExists(key, field) => with_hash(view.read(key, now), Reply::Integer(0), |h| {
            Reply::Integer(h.hash_get(field).is_some() as i64)
        }),
        Command::HStrLen(key, field) => with_hash(view.read(key, now), Reply::Integer(0), |h| {
            Reply::Integer(h.hash_get(field).map_or(0, |v| v.len()) as i64)
        }),
        Command::SMembers(key) => with_set(view.read(key, now), Reply::Set(Vec::new()), |s| {
            Reply::Set(s.set_members().into_iter().map(Reply::Bulk).collect())
        }),
        Command::SIsMember(key, member) => with_set(view.read(key, now), Reply::Integer(0), |s| {
            Reply::Integer(s.set_contains(member) as i64)
        }),
        Command::SMIsMember(key, members) => {
            let zeros = || Reply::Array(members.iter().map(|_| Reply::Integer(0)).collect());
            with_set(view.read(key, now), zeros(), |s| {
                Reply::Array(
                    members
                        .iter()
                        .map(|m| Reply::Integer(s.set_contains(m) as i64))
                        .collect(),
                )
            })
        }
        Command::SCard(key) => with_set(view.read(key, now), Reply::Integer(0), |s| {
            Reply::Integer(s.len() as i64)
        }),
        Command::Type(key) => Reply::status(
            view.shard_ref(key)
                .get(key, now)
                .map_or("none", |e| e.value_type().name()),
        ),
        Command::DbSize => Reply::Integer(view.shards().map(|s| s.key_count() as i64).sum()),
        Command::Keys(pattern) => {
            let all = *pattern == b"*";
            let mut keys = Vec::new();
            for shard in view.shards() {
                keys.extend(
                    shard
                        .entries()
                        .filter(|e| !e.expired(now) && (all || glob::matches(pattern, e.key())))
                        .map(|e| Reply::bulk(e.key())),
                );
            }
            Reply::Array(keys)
        }
        Command::Scan {
            cursor: at,
            pattern,
            count,
            kind,
        } => scan(view, *at, *pattern, *count, *kind, now),
        write_command => unreachable!("{write_command:?} is a write"),
    }
}

fn with_hash(entry: Option<&Entry>, missing: Reply, f: impl FnOnce(&Aggregate) -> Reply) -> Reply {
    match entry {
        None => missing,
        Some(e) if e.value_type() == ValueType::Hash => f(e.aggregate_ref().expect("a hash")),
        Some(_) => wrong_type(),
    }
}

fn with_set(entry: Option<&Entry>, missing: Reply, f: impl FnOnce(&Aggregate) -> Reply) -> Reply {
    match entry {
        None => missing,
        Some(e) if e.value_type() == ValueType::Set => f(e.aggregate_ref().expect("a set")),
        Some(_) => wrong_type(),
    }
}

/// SCAN: from the cursor's slot on, slot by slot in SCAN order, until
/// `count` keys were visited (a slot position shared by several keys is
/// never split) or the last slot. MATCH, TYPE and expiry filter what was
/// visited, as in Redis. The view holds every shard.
fn scan(
    view: &mut View<'_>,
    at: u64,
    pattern: Option<&[u8]>,
    count: usize,
    kind: Option<&[u8]>,
    now: i64,
) -> Reply {
    let Some(first_slot) = cursor_slot(at) else {
        return Reply::Array(vec![Reply::bulk(b"0"), Reply::Array(Vec::new())]);
    };
    let position = at & ((1 << CURSOR_HASH_BITS) - 1);
    let mut visited: Vec<&Entry> = Vec::new();
    let mut next = 0u64;
    'slots: for slot in first_slot..SLOTS as u16 {
        let shard = &*view.shards[view.index_of_slot(slot)];
        let from = if slot == first_slot {
            position + u64::from(crate::planted::scan_skips() && at != 0)
        } else {
            0
        };
        let found = shard.scan_slot(slot, from);
        let mut i = 0;
        while i < found.len() {
            if visited.len() >= count {
                next = cursor(slot, found[i].0);
                break 'slots;
            }
            let position = found[i].0;
            while i < found.len() && found[i].0 == position {
                visited.push(found[i].1);
                i += 1;
            }
        }
    }
    let keys = visited
        .into_iter()
        .filter(|e| pattern.is_none_or(|p| glob::matches(p, e.key())))
        .filter(|e| kind.is_none_or(|k| k.eq_ignore_ascii_case(e.value_type().name().as_bytes())))
        .filter(|e| !e.expired(now))
        .map(|e| Reply::bulk(e.key()))
        .collect();
    Reply::Array(vec![
        Reply::Bulk(next.to_string().into_bytes()),
        Reply::Array(keys),
    ])
}

// ---------------------------------------------------------------------------
// Writes

fn write(view: &mut View<'_>, command: &Command<'_>, ctx: Ctx) -> Reply {
    match command {
        Command::Set {
            key,
            value,
            condition,
            expiry,
            get,
            name,
        } => set(
            view.shard(key),
            key,
            value,
            *condition,
            *expiry,
            *get,
            name,
            ctx,
        ),
        Command::SetNx(key, value) => {
            let shard = view.shard(key);
            if shard.live(key, ctx).is_some() {
                return Reply::Integer(0);
            }
            shard.insert(Entry::string(key, value, ctx.stamp));
            Reply::Integer(1)
        }
        Command::GetSet(key, value) => {
            let shard = view.shard(key);
            let old = match old_string(shard, key, ctx) {
                Ok(old) => old,
                Err(reply) => return reply,
            };
            put_string(shard, key, value, false, ctx);
            old
        }
        Command::GetDel(key) => {
            let shard = view.shard(key);
            let old = match old_string(shard, key, ctx) {
                Ok(old) => old,
                Err(reply) => return reply,
            };
            shard.delete(key, ctx);
            old
        }
        Command::MSet(pairs) => {
            for (key, value) in pairs {
                put_string(view.shard(key), key, value, false, ctx);
            }
            Reply::ok()
        }
        Command::MSetNx(pairs) => {
            if pairs
                .iter()
                .any(|(k, _)| view.shard(k).live(k, ctx).is_some())
            {
                return Reply::Integer(0);
            }
            for (key, value) in pairs {
                put_string(view.shard(key), key, value, false, ctx);
            }
            Reply::Integer(1)
        }
        Command::Del(keys) => Reply::Integer(
            keys.iter()
                .filter(|k| {
                    let shard = view.shard(k);
                    shard.live(k, ctx).is_some() && shard.delete(k, ctx)
                })
                .count() as i64,
        ),
        Command::IncrBy(key, by) => incr_by(view.shard(key), key, *by, ctx),
        Command::Append(key, tail) => {
            let shard = view.shard(key);
            match shard.live(key, ctx) {
                None => {
                    shard.insert(Entry::string(key, tail, ctx.stamp));
                    Reply::Integer(tail.len() as i64)
                }
                Some(e) if e.value_type() != ValueType::String => wrong_type(),
                Some(e) => {
                    let len = e.string_value().expect("a string").len();
                    if len + tail.len() > STRING_BYTES_MAX {
                        return Reply::error(
                            "ERR string exceeds maximum allowed size (proto-max-bulk-len)",
                        );
                    }
                    e.append(tail);
                    e.version = ctx.stamp;
                    Reply::Integer((len + tail.len()) as i64)
                }
            }
        }
        Command::Expire {
            key,
            amount,
            relative,
            flags,
            name,
        } => {
            let when = if *relative {
                match amount.checked_add(ctx.now_ms) {
                    Some(when) => when,
                    None => return expire_error(name),
                }
            } else {
                *amount
            };
            let shard = view.shard(key);
            let Some(entry) = shard.live(key, ctx) else {
                return Reply::Integer(0);
            };
            let current = entry.expire_at_ms;
            let has = current != 0;
            let refused = (flags.nx && has)
                || (flags.xx && !has)
                || (flags.gt && (!has || when <= current))
                || (flags.lt && has && when >= current);
            if refused {
                return Reply::Integer(0);
            }
            if when <= ctx.now_ms {
                shard.delete(key, ctx);
            } else {
                entry.version = ctx.stamp;
                shard.set_expiry(key, when);
            }
            Reply::Integer(1)
        }
        Command::Persist(key) => {
            let shard = view.shard(key);
            match shard.live(key, ctx) {
                Some(e) if e.expire_at_ms != 0 => {
                    e.version = ctx.stamp;
                    shard.set_expiry(key, 0);
                    Reply::Integer(1)
                }
                _ => Reply::Integer(0),
            }
        }
        Command::HSet {
            key,
            pairs,
            replies_ok,
        } => {
            let (hash, version) = match hash_for_write(view.shard(key), key, ctx) {
                Ok(hash) => hash,
                Err(reply) => return reply,
            };
            *version = ctx.stamp;
            hash.hash_prepare(pairs.iter().flat_map(|(f, v)| [*f, *v]));
            let created = pairs.iter().filter(|(f, v)| hash.hash_set(f, v)).count();
            if *replies_ok {
                Reply::ok()
            } else {
                Reply::Integer(created as i64)
            }
        }
        Command::HSetNx(key, field, value) => {
            let (hash, version) = match hash_for_write(view.shard(key), key, ctx) {
                Ok(hash) => hash,
                Err(reply) => return reply,
            };
            if hash.hash_get(field).is_some() {
                return Reply::Integer(0);
            }
            *version = ctx.stamp;
            hash.hash_prepare([*field, *value]);
            hash.hash_set(field, value);
            Reply::Integer(1)
        }
        Command::HIncrBy(key, field, by) => {
            let shard = view.shard(key);
            if let Some(e) = shard.live(key, ctx) {
                if e.value_type() != ValueType::Hash {
                    return wrong_type();
                }
            }
            let old = match shard
                .get(key, ctx.now_ms)
                .and_then(|e| e.aggregate_ref()?.hash_get(field))
            {
                None => 0,
                Some(v) => match parse_i64(v) {
                    Some(v) => v,
                    None => return Reply::error("ERR hash value is not an integer"),
                },
            };
            let Some(new) = old.checked_add(*by) else {
                return Reply::error(OVERFLOW);
            };
            let (hash, version) = hash_for_write(shard, key, ctx).expect("checked above");
            *version = ctx.stamp;
            let text = new.to_string();
            hash.hash_prepare([*field, text.as_bytes()]);
            hash.hash_set(field, text.as_bytes());
            Reply::Integer(new)
        }
        Command::HDel(key, fields) => {
            let shard = view.shard(key);
            let Some(entry) = shard.live(key, ctx) else {
                return Reply::Integer(0);
            };
            if entry.value_type() != ValueType::Hash {
                return wrong_type();
            }
            let hash = entry.aggregate_mut().expect("a hash");
            let mut deleted = 0;
            for field in fields {
                if hash.hash_delete(field) {
                    deleted += 1;
                    if hash.is_empty() {
                        break;
                    }
                }
            }
            let empty = hash.is_empty();
            if deleted > 0 {
                entry.version = ctx.stamp;
            }
            if empty && !crate::planted::empty_kept() {
                shard.delete(key, ctx);
            }
            Reply::Integer(deleted)
        }
        Command::SAdd(key, members) => {
            let shard = view.shard(key);
            let set = match shard.live(key, ctx) {
                None => shard
                    .insert(Entry::aggregate(
                        key,
                        Aggregate::new_set(members[0]),
                        ctx.stamp,
                    ))
                    .aggregate_mut()
                    .expect("a set"),
                Some(e) if e.value_type() != ValueType::Set => return wrong_type(),
                Some(e) => e.aggregate_mut().expect("a set"),
            };
            let added = members.iter().filter(|m| set.set_add(m)).count();
            if added > 0 {
                shard.live(key, ctx).expect("present").version = ctx.stamp;
            }
            Reply::Integer(added as i64)
        }
        Command::SRem(key, members) => {
            let shard = view.shard(key);
            let Some(entry) = shard.live(key, ctx) else {
                return Reply::Integer(0);
            };
            if entry.value_type() != ValueType::Set {
                return wrong_type();
            }
            let set = entry.aggregate_mut().expect("a set");
            let mut removed = 0;
            for member in members {
                if set.set_remove(member) {
                    removed += 1;
                    if set.is_empty() {
                        break;
                    }
                }
            }
            let empty = set.is_empty();
            if removed > 0 {
                entry.version = ctx.stamp;
            }
            if empty && !crate::planted::empty_kept() {
                shard.delete(key, ctx);
            }
            Reply::Integer(removed)
        }
        Command::FlushDb => {
            for shard in view.shards() {
                shard.clear(ctx);
            }
            Reply::ok()
        }
        read_command => unreachable!("{read_command:?} is a read"),
    }
}

fn expire_error(name: &str) -> Reply {
    Reply::error_owned(format!("ERR invalid expire time in '{name}' command"))
}

/// A string's old value for GETSET/GETDEL/SET GET (write lookup).
fn old_string(shard: &mut Shard, key: &[u8], ctx: Ctx) -> Result<Reply, Reply> {
    match shard.live(key, ctx) {
        None => Ok(Reply::Null),
        Some(e) => match e.string_value() {
            Some(v) => Ok(Reply::bulk(v)),
            None => Err(wrong_type()),
        },
    }
}

/// Redis's setKey: the key holds `value` as a string from now on; its
/// expiry goes unless `keep_ttl`.
fn put_string(shard: &mut Shard, key: &[u8], value: &[u8], keep_ttl: bool, ctx: Ctx) {
    match shard.live(key, ctx) {
        None => {
            shard.insert(Entry::string(key, value, ctx.stamp));
        }
        Some(e) => {
            e.set_string(value);
            e.version = ctx.stamp;
            let had = e.expire_at_ms != 0;
            if had && !keep_ttl {
                shard.set_expiry(key, 0);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn set(
    shard: &mut Shard,
    key: &[u8],
    value: &[u8],
    condition: Condition,
    expiry: ExpiryArg,
    get: bool,
    name: &str,
    ctx: Ctx,
) -> Reply {
    let deadline = match expiry {
        ExpiryArg::In(ms) if crate::planted::expire_early() => {
            Some(ctx.now_ms.saturating_add(ms / 2))
        }
        ExpiryArg::In(ms) => match ms.checked_add(ctx.now_ms) {
            Some(at) if at > 0 => Some(at),
            _ => return expire_error(name),
        },
        ExpiryArg::At(at) => Some(at),
        ExpiryArg::None | ExpiryArg::Keep => None,
    };
    let old = if get {
        match old_string(shard, key, ctx) {
            Ok(old) => Some(old),
            Err(reply) => return reply,
        }
    } else {
        None
    };
    // A plain SET needs no lookup before `put_string`'s.
    let refused = match condition {
        Condition::Always => false,
        Condition::Missing => shard.live(key, ctx).is_some(),
        Condition::Present => shard.live(key, ctx).is_none(),
    };
    if refused {
        return old.unwrap_or(Reply::Null);
    }
    put_string(shard, key, value, expiry == ExpiryArg::Keep, ctx);
    if let Some(at) = deadline {
        shard.set_expiry(key, at);
    }
    old.unwrap_or_else(Reply::ok)
}

fn incr_by(shard: &mut Shard, key: &[u8], by: i64, ctx: Ctx) -> Reply {
    let old = match shard.live(key, ctx) {
        None => 0,
        Some(e) => match e.string_value() {
            None => return wrong_type(),
            Some(v) => match parse_i64(v) {
                Some(v) => v,
                None => return Reply::not_integer(),
            },
        },
    };
    let Some(new) = old.checked_add(by) else {
        return Reply::error(OVERFLOW);
    };
    // INCR keeps the key's expiry (Redis overwrites the value only).
    put_string(shard, key, new.to_string().as_bytes(), true, ctx);
    Reply::Integer(new)
}

/// The hash of `key` for a write (created if missing: a new key's
/// version is already `ctx.stamp`) and its version, which the caller
/// bumps if it changes the hash.
fn hash_for_write<'s>(
    shard: &'s mut Shard,
    key: &[u8],
    ctx: Ctx,
) -> Result<(&'s mut Aggregate, &'s mut u64), Reply> {
    if shard.live(key, ctx).is_none() {
        shard.insert(Entry::aggregate(key, Aggregate::new_hash(), ctx.stamp));
    }
    let entry = shard.live(key, ctx).expect("present");
    if entry.value_type() != ValueType::Hash {
        return Err(wrong_type());
    }
    Ok(entry.aggregate_and_version().expect("a hash"))
}

/// The slots a route covers, as shard indexes of `shards` shards.
pub fn route_shards(route: &Route<'_>, shards: usize) -> Vec<usize> {
    let mut indexes: Vec<usize> = match route {
        Route::Keys(keys) => keys
            .iter()
            .map(|k| crate::slot::shard_of_slot(key_slot(k), shards))
            .collect(),
        Route::All => (0..shards).collect(),
    };
    indexes.sort_unstable();
    indexes.dedup();
    indexes
}
