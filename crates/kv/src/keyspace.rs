//! Applying log operations to shards, and `Keyspace`: every shard of a
//! node in one value, the single-threaded form of the state (tests, the
//! snapshot loader, tools). The server runs the same functions with each
//! shard owned by its own thread.

use crate::command::{self, Command, Kind, Spec};
use crate::exec::{self, route_shards, Clocks, View};
use crate::op::{Op, Watch};
use crate::reply::Reply;
use crate::resp::Args;
use crate::session::ReadRoute;
use crate::shard::{stamp, Ctx, Shard, PREFETCH_KEYS_MAX};
use crate::slot::{key_slot, shard_of_slot, shard_slots};

/// Prefetches (`Shard::prefetch_owned`) the lookups of the commands of `kind`
/// with one key (`command::single_key`) among the first PREFETCH_KEYS_MAX
/// of `requests` whose keys are `shard`'s, so that running them next
/// finds their memory in the cache. A hint: changes nothing. One lookup
/// alone has nothing to overlap with, so a lone request (an unpipelined
/// one, an entry of one write) is not even looked up.
pub fn prefetch_keys<'a>(shard: &Shard, kind: Kind, requests: impl IntoIterator<Item = &'a Args>) {
    let requests = requests.into_iter();
    if requests.size_hint().1.is_some_and(|most| most < 2) {
        return;
    }
    let keys = requests
        .take(PREFETCH_KEYS_MAX)
        .filter_map(|args| command::single_key(args, kind))
        .map(|key| (key_slot(key), key));
    shard.prefetch_owned(keys);
}

/// `prefetch_keys` for reads the session checked: their routes give
/// their specs and slots, so nothing is looked up or hashed again.
pub fn prefetch_reads<'a>(shard: &Shard, reads: impl IntoIterator<Item = (&'a Args, ReadRoute)>) {
    let keys = reads
        .into_iter()
        .take(PREFETCH_KEYS_MAX)
        .filter_map(|(args, route)| Some((route.slot?, route.spec.single_key(args)?)));
    shard.prefetch_owned(keys);
}

/// `prefetch_keys` for applying `ops`: their one-key commands' lookups.
pub fn prefetch_ops<'a>(shard: &Shard, ops: impl IntoIterator<Item = &'a Op>) {
    let commands = ops.into_iter().filter_map(|op| match op {
        Op::Command { args, .. } => Some(args),
        _ => None,
    });
    prefetch_keys(shard, Kind::Write, commands);
}

/// The shards (indexes among `shard_count`) applying `op` touches.
pub fn op_shards(op: &Op, shard_count: usize) -> Vec<usize> {
    match op {
        Op::Command { args, .. } => command_shards(args, shard_count),
        Op::Exec {
            watches, commands, ..
        } => {
            let mut all: Vec<usize> = watches
                .iter()
                .map(|w| shard_of_slot(key_slot(&w.key), shard_count))
                .collect();
            for args in commands {
                all.extend(command_shards(args, shard_count));
            }
            all.sort_unstable();
            all.dedup();
            if all.is_empty() {
                all.push(0);
            }
            all
        }
        Op::Expire { keys } => {
            let mut all: Vec<usize> = keys
                .iter()
                .map(|k| shard_of_slot(key_slot(k), shard_count))
                .collect();
            all.sort_unstable();
            all.dedup();
            if all.is_empty() {
                all.push(0);
            }
            all
        }
    }
}

/// How the apply step routes a committed `op`: `Ok(Some(shard))` for a
/// write with one key (its shard, found from the key's position in the
/// command table rather than the parsed command's route, with no list
/// allocated), `Ok(None)` for any other operation (routed by
/// `op_shards`). Every command is parsed all the same, for the check
/// below.
///
/// `Err` names a command this release does not know: no name, a name,
/// subcommand or arity that fails `command::lookup`, or arguments that
/// fail `Command::parse` (an option this release does not know, say).
/// Every proposer checks a command so before it logs it (a single command
/// on arrival, a transaction's at EXEC, which answers the ones that fail
/// without the log), so only a newer release's proposer puts one in the
/// log. Applied here it would answer an error and change nothing, where
/// the members that know it change their keyspace: the caller stops
/// instead.
pub fn apply_route(op: &Op, shard_count: usize) -> Result<Option<usize>, String> {
    match op {
        Op::Command { args, .. } => {
            let spec = known_to_this_release(args)?;
            let key = spec.single_key_of(Kind::Write, args);
            Ok(key.map(|key| shard_of_slot(key_slot(key), shard_count)))
        }
        Op::Exec { commands, .. } => {
            for args in commands {
                known_to_this_release(args)?;
            }
            Ok(None)
        }
        Op::Expire { .. } => Ok(None),
    }
}

fn known_to_this_release(args: &[Vec<u8>]) -> Result<&'static Spec, String> {
    if args.is_empty() {
        return Err("a KV command without a name".to_string());
    }
    let text = |refusal: Reply| match refusal {
        Reply::Error(text) => text.into_owned(),
        other => format!("{other:?}"),
    };
    let spec = command::lookup(args).map_err(text)?;
    if spec.kind != Kind::Connection {
        if let Err(refusal) = Command::parse(spec, args) {
            return Err(format!(
                "'{}' with arguments this release refuses: {}",
                spec.name,
                text(refusal)
            ));
        }
    }
    Ok(spec)
}

/// The shard of a write with one key, found without parsing the command.
fn one_key_write_shard(args: &[Vec<u8>], shard_count: usize) -> Option<usize> {
    let key = command::single_key(args, Kind::Write)?;
    Some(shard_of_slot(key_slot(key), shard_count))
}

/// The shards a command's arguments need (shard 0 for one that fails its
/// checks: its error needs no shard, but it is answered from one).
pub fn command_shards(args: &[Vec<u8>], shard_count: usize) -> Vec<usize> {
    // Most writes have one key: its shard, without parsing the command.
    // (One that would fail its parse is answered its error on that shard
    // instead of shard 0: the same reply, and nothing changes either way.)
    if let Some(shard) = one_key_write_shard(args, shard_count) {
        return vec![shard];
    }
    parsed_shards(args, shard_count)
}

/// `command_shards` from the parsed command's route.
fn parsed_shards(args: &[Vec<u8>], shard_count: usize) -> Vec<usize> {
    let Ok(spec) = command::lookup(args) else {
        return vec![0];
    };
    if spec.kind == Kind::Connection {
        return vec![0];
    }
    match Command::parse(spec, args) {
        Ok(command) => route_shards(&command.route(), shard_count),
        Err(_) => vec![0],
    }
}

/// One keyspace command (already checked to exist, with its arity) run
/// at `clocks`.
pub fn run(view: &mut View<'_>, args: &[Vec<u8>], clocks: Clocks) -> Reply {
    match command::lookup(args) {
        Ok(spec) => run_spec(view, spec, args, clocks),
        Err(error) => error,
    }
}

/// A read the session checked (`ReadRoute`), run on `shards` as a server
/// runs it: with the route's spec, on a view that knows the route's slot
/// when it has one.
pub fn run_routed<'s>(
    shards: impl IntoIterator<Item = &'s mut Shard>,
    args: &[Vec<u8>],
    route: ReadRoute,
    clocks: Clocks,
) -> Reply {
    let mut view = match route.slot {
        Some(slot) => View::in_slot(shards, slot),
        None => View::new(shards),
    };
    run_spec(&mut view, route.spec, args, clocks)
}

/// `run` for a command whose spec the caller looked up already
/// (`command::lookup(args)`, as a `ReadRoute` carries it).
pub fn run_spec(
    view: &mut View<'_>,
    spec: &'static Spec,
    args: &[Vec<u8>],
    clocks: Clocks,
) -> Reply {
    if spec.kind == Kind::Connection {
        // The connection answers these itself; a transaction's reply
        // holds their place.
        return Reply::Null;
    }
    match Command::parse(spec, args) {
        Ok(command) => exec::execute(view, &command, clocks),
        Err(error) => error,
    }
}

/// Applies `op` at `ctx` to `view` (which holds every shard in
/// `op_shards`); the reply for the connection that asked, if any.
pub fn apply(view: &mut View<'_>, op: &Op, ctx: Ctx) -> Option<Reply> {
    let reply = match op {
        Op::Command { args, .. } => Some(run(view, args, Clocks::write(ctx))),
        Op::Exec {
            watches, commands, ..
        } => Some(transaction(view, watches, commands, ctx)),
        Op::Expire { keys } => {
            for key in keys {
                // A write lookup deletes the key if it is expired at the
                // entry's clock, and leaves it otherwise.
                view.shard(key).live(key, ctx);
            }
            None
        }
    };
    for shard in view.shards() {
        shard.applied_stamp = shard.applied_stamp.max(ctx.stamp);
    }
    reply
}

/// EXEC: nil if a watched key changed since it was watched, else every
/// command's reply, all applied at one log position.
fn transaction(view: &mut View<'_>, watches: &[Watch], commands: &[Args], ctx: Ctx) -> Reply {
    let touched = watches.iter().any(|w| {
        view.shard(&w.key)
            .changed_since(&w.key, w.token, w.watched_ms, ctx.now_ms)
    });
    if touched && !crate::planted::watch_blind() {
        return Reply::NullArray;
    }
    let planted_last = crate::planted::exec_partial().then(|| commands.len().saturating_sub(1));
    Reply::Array(
        commands
            .iter()
            .enumerate()
            .map(|(i, args)| match planted_last {
                Some(last) if i == last => Reply::ok(),
                _ => run(view, args, Clocks::write(ctx)),
            })
            .collect(),
    )
}

/// Every shard of a node, owned together.
#[derive(Debug, Clone)]
pub struct Keyspace {
    shards: Vec<Shard>,
    /// The log's clock: the largest entry time applied.
    pub clock_ms: i64,
    /// The last log index applied.
    pub index: u64,
}

impl Keyspace {
    pub fn new(shard_count: usize) -> Keyspace {
        Keyspace::from_shards(
            (0..shard_count)
                .map(|i| Shard::new(shard_slots(i, shard_count)))
                .collect(),
            0,
            0,
        )
    }

    pub fn from_shards(shards: Vec<Shard>, index: u64, clock_ms: i64) -> Keyspace {
        assert!(!shards.is_empty());
        for (i, shard) in shards.iter().enumerate() {
            assert_eq!(shard.slots(), shard_slots(i, shards.len()));
        }
        Keyspace {
            shards,
            clock_ms,
            index,
        }
    }

    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    pub fn into_shards(self) -> Vec<Shard> {
        self.shards
    }

    pub fn key_count(&self) -> usize {
        self.shards.iter().map(Shard::key_count).sum()
    }

    pub fn view(&mut self) -> View<'_> {
        View::new(self.shards.iter_mut())
    }

    /// Applies a log operation at `index`, stamped `time_ms` by its
    /// proposer; the log's clock never goes back.
    pub fn apply(&mut self, index: u64, time_ms: i64, op: &Op) -> Option<Reply> {
        assert!(index > self.index, "index {index} after {}", self.index);
        self.index = index;
        self.clock_ms = self.clock_ms.max(time_ms);
        let ctx = Ctx {
            stamp: stamp(index, 0),
            now_ms: self.clock_ms,
        };
        let mut view = self.view();
        apply(&mut view, op, ctx)
    }

    /// A read at the current state; TTLs count down from `wall_ms`.
    pub fn read(&mut self, args: &[Vec<u8>], wall_ms: i64) -> Reply {
        let clocks = Clocks::read(self.clock_ms, wall_ms);
        let mut view = self.view();
        run(&mut view, args, clocks)
    }

    /// `read` of a read the session checked, as a server runs it: on the
    /// view of its route's slot when it has one, else on every shard.
    pub fn read_routed(&mut self, args: &[Vec<u8>], route: ReadRoute, wall_ms: i64) -> Reply {
        let clocks = Clocks::read(self.clock_ms, wall_ms);
        run_routed(self.shards.iter_mut(), args, route, clocks)
    }

    /// WATCH's token for `key`: what its shard has applied, and the clock.
    pub fn watch(&self, key: &[u8]) -> Watch {
        let shard = &self.shards[shard_of_slot(key_slot(key), self.shards.len())];
        Watch {
            key: key.to_vec(),
            token: shard.applied_stamp,
            watched_ms: self.clock_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_command_whose_arguments_this_release_refuses_is_a_newer_releases() {
        let command = |words: &[&str]| Op::Command {
            seq: 1,
            args: words.iter().map(|w| w.as_bytes().to_vec()).collect(),
        };
        let exec = |words: &[&str]| Op::Exec {
            seq: 1,
            watches: Vec::new(),
            commands: vec![
                vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()],
                words.iter().map(|w| w.as_bytes().to_vec()).collect(),
            ],
        };
        for known in [
            &["SET", "k", "v", "NX", "GET"][..],
            &["EXPIRE", "k", "5", "GT"],
            &["HSET", "h", "f", "v"],
        ] {
            assert!(apply_route(&command(known), 2).is_ok(), "{known:?}");
            assert_eq!(apply_route(&exec(known), 2), Ok(None), "{known:?}");
        }
        // Redis 7.4 and 8 options: a newer release may log them.
        for newer in [
            &["SET", "k", "v", "IFEQ", "old"][..],
            &["EXPIRE", "k", "5", "FNX"],
            &["INCRBY", "k", "1.5"],
        ] {
            let refused = apply_route(&command(newer), 2).expect_err("a newer release's option");
            assert!(
                refused.contains(&newer[0].to_ascii_lowercase()),
                "{refused}"
            );
            assert!(apply_route(&exec(newer), 2).is_err(), "{newer:?}");
        }
    }

    #[test]
    fn one_key_writes_route_without_parsing_as_parsing_routes_them() {
        let mut checked = 0;
        for spec in command::TABLE.iter().filter(|s| s.kind == Kind::Write) {
            let single = spec.keys.first == 1 && spec.keys.last == 1;
            for key in ["k", "{user1000}.following", "foo", ""] {
                let mut args = vec![spec.name.as_bytes().to_vec(), key.as_bytes().to_vec()];
                while (args.len() as i32) < spec.arity.abs() {
                    args.push(b"1".to_vec());
                }
                assert_eq!(command::single_key(&args, Kind::Write).is_some(), single);
                let Ok(command) = Command::parse(spec, &args) else {
                    continue;
                };
                for shards in [1, 2, 3, 7] {
                    let routed = route_shards(&command.route(), shards);
                    assert_eq!(command_shards(&args, shards), routed, "{}", spec.name);
                    assert_eq!(parsed_shards(&args, shards), routed, "{}", spec.name);
                    let op = Op::Command {
                        seq: 1,
                        args: args.clone(),
                    };
                    let fast = apply_route(&op, shards).expect("a command this release knows");
                    assert_eq!(fast.is_some(), single, "{}", spec.name);
                    assert!(fast.is_none_or(|shard| routed == [shard]), "{}", spec.name);
                }
                checked += single as usize;
            }
        }
        assert!(checked >= 40, "only {checked} one-key writes parsed");
    }
}
