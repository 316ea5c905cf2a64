//! The command table (names, arities, key positions, documentation) and
//! the parsing of a keyspace command's arguments into a `Command`.
//!
//! Checks happen in Redis's two stages. `lookup` is what Redis checks when
//! a command arrives (it exists, its arity fits; inside MULTI only these
//! refuse a command at queue time). `Command::parse` is the argument
//! checking Redis's command functions do before they look at any key
//! (options, integers, units); it depends on neither the keyspace nor the
//! clock, so a connection can answer such an error without the log. What
//! depends on the keyspace or the time (WRONGTYPE, an expiry that
//! overflows when added to now) is decided when the command is applied.

use std::sync::OnceLock;

use smallvec::{smallvec, SmallVec};

use crate::reply::Reply;
use crate::resp::parse_i64;

/// What runs a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reads the keyspace.
    Read,
    /// Changes the keyspace: goes through the Raft log.
    Write,
    /// Served by the connection (PING, CLIENT, HELLO, MULTI, ...).
    Connection,
}

/// Where a command's keys are, as Redis's legacy key specification:
/// arguments first, first + step, ... up to last (negative: from the end);
/// first == 0: no keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    pub first: i32,
    pub last: i32,
    pub step: i32,
}

const NO_KEYS: Keys = Keys {
    first: 0,
    last: 0,
    step: 0,
};
const KEY1: Keys = Keys {
    first: 1,
    last: 1,
    step: 1,
};
const ALL_KEYS: Keys = Keys {
    first: 1,
    last: -1,
    step: 1,
};
const PAIRS: Keys = Keys {
    first: 1,
    last: -1,
    step: 2,
};

#[derive(Debug)]
pub struct Spec {
    /// Lower case; a subcommand's is `container|sub` (Redis's fullname).
    pub name: &'static str,
    /// Redis's arity: exact if positive, a minimum if negative; the
    /// command name counts.
    pub arity: i32,
    pub kind: Kind,
    pub keys: Keys,
    pub flags: &'static [&'static str],
    pub group: &'static str,
    pub since: &'static str,
    pub summary: &'static str,
    pub subcommands: &'static [Spec],
}

/// A spec is one entry of the static command table: two are the same
/// command when they are the same entry.
impl PartialEq for Spec {
    fn eq(&self, other: &Spec) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Spec {}

impl Spec {
    /// The key of `args` if this command has exactly one (GET, HGET, SET,
    /// INCR, ...); `None` otherwise. A hint for prefetching, not a check.
    pub fn single_key<'a>(&self, args: &'a [Vec<u8>]) -> Option<&'a [u8]> {
        let single = self.keys.first == 1 && self.keys.last == 1;
        (single && args.len() > 1).then(|| &args[1][..])
    }

    /// `single_key` for a command of `kind` only.
    pub fn single_key_of<'a>(&self, kind: Kind, args: &'a [Vec<u8>]) -> Option<&'a [u8]> {
        match self.kind == kind {
            true => self.single_key(args),
            false => None,
        }
    }

    /// The keys of `args` (a command of this spec that passed `lookup`).
    pub fn keys<'a>(&self, args: &'a [Vec<u8>]) -> Vec<&'a [u8]> {
        let Keys { first, last, step } = self.keys;
        if first == 0 || args.len() <= first as usize {
            return Vec::new();
        }
        let last = if last < 0 {
            args.len() as i32 + last
        } else {
            last.min(args.len() as i32 - 1)
        };
        (first..=last)
            .step_by(step as usize)
            .map(|i| &args[i as usize][..])
            .collect()
    }

    /// The name as the client sees it in errors: `client|setname`.
    pub fn full_name(&self) -> &'static str {
        self.name
    }
}

macro_rules! spec {
    ($name:expr, $arity:expr, $kind:ident, $keys:expr, $flags:expr, $group:expr, $since:expr, $summary:expr) => {
        Spec {
            name: $name,
            arity: $arity,
            kind: Kind::$kind,
            keys: $keys,
            flags: $flags,
            group: $group,
            since: $since,
            summary: $summary,
            subcommands: &[],
        }
    };
}

const W: &[&str] = &["write", "denyoom"];
const WF: &[&str] = &["write", "denyoom", "fast"];
const WD: &[&str] = &["write", "fast"];
const R: &[&str] = &["readonly"];
const RF: &[&str] = &["readonly", "fast"];
const C: &[&str] = &["fast"];
const CL: &[&str] = &["loading", "stale", "fast"];

static CLIENT_SUBCOMMANDS: [Spec; 6] = [
    spec!(
        "client|getname",
        2,
        Connection,
        NO_KEYS,
        CL,
        "connection",
        "2.6.9",
        "Returns the name of this connection."
    ),
    spec!(
        "client|help",
        2,
        Connection,
        NO_KEYS,
        CL,
        "connection",
        "5.0.0",
        "Lists the CLIENT subcommands."
    ),
    spec!(
        "client|id",
        2,
        Connection,
        NO_KEYS,
        CL,
        "connection",
        "5.0.0",
        "Returns the id of this connection."
    ),
    spec!(
        "client|info",
        2,
        Connection,
        NO_KEYS,
        CL,
        "connection",
        "6.2.0",
        "Describes this connection."
    ),
    spec!(
        "client|list",
        -2,
        Connection,
        NO_KEYS,
        CL,
        "connection",
        "2.4.0",
        "Describes the connections to this node."
    ),
    spec!(
        "client|setname",
        3,
        Connection,
        NO_KEYS,
        CL,
        "connection",
        "2.6.9",
        "Names this connection."
    ),
];

static COMMAND_SUBCOMMANDS: [Spec; 5] = [
    spec!(
        "command|count",
        2,
        Connection,
        NO_KEYS,
        CL,
        "server",
        "2.8.13",
        "Returns how many commands Keel KV knows."
    ),
    spec!(
        "command|docs",
        -2,
        Connection,
        NO_KEYS,
        CL,
        "server",
        "7.0.0",
        "Documents the commands, for redis-cli's help."
    ),
    spec!(
        "command|help",
        2,
        Connection,
        NO_KEYS,
        CL,
        "server",
        "5.0.0",
        "Lists the COMMAND subcommands."
    ),
    spec!(
        "command|info",
        -2,
        Connection,
        NO_KEYS,
        CL,
        "server",
        "2.8.13",
        "Describes the given commands, or all."
    ),
    spec!(
        "command|list",
        -2,
        Connection,
        NO_KEYS,
        CL,
        "server",
        "7.0.0",
        "Lists the command names."
    ),
];

/// Every command Keel KV knows, sorted by name.
pub static TABLE: &[Spec] = &[
    spec!(
        "append",
        3,
        Write,
        KEY1,
        WF,
        "string",
        "2.0.0",
        "Appends to a string, creating it if missing; returns the new length."
    ),
    Spec {
        subcommands: &CLIENT_SUBCOMMANDS,
        ..spec!(
            "client",
            -2,
            Connection,
            NO_KEYS,
            &[],
            "connection",
            "2.4.0",
            "Connection introspection and naming."
        )
    },
    Spec {
        subcommands: &COMMAND_SUBCOMMANDS,
        ..spec!(
            "command",
            -1,
            Connection,
            NO_KEYS,
            CL,
            "server",
            "2.8.13",
            "Describes the commands Keel KV knows."
        )
    },
    spec!(
        "dbsize",
        1,
        Read,
        NO_KEYS,
        RF,
        "server",
        "1.0.0",
        "Returns the number of keys."
    ),
    spec!(
        "decr",
        2,
        Write,
        KEY1,
        WF,
        "string",
        "1.0.0",
        "Subtracts one from an integer string."
    ),
    spec!(
        "decrby",
        3,
        Write,
        KEY1,
        WF,
        "string",
        "1.0.0",
        "Subtracts a number from an integer string."
    ),
    spec!(
        "del",
        -2,
        Write,
        ALL_KEYS,
        &["write"],
        "generic",
        "1.0.0",
        "Deletes keys; returns how many existed."
    ),
    spec!(
        "discard",
        1,
        Connection,
        NO_KEYS,
        CL,
        "transactions",
        "2.0.0",
        "Drops the queued transaction."
    ),
    spec!(
        "echo",
        2,
        Connection,
        NO_KEYS,
        CL,
        "connection",
        "1.0.0",
        "Returns its argument."
    ),
    spec!(
        "exec",
        1,
        Connection,
        NO_KEYS,
        &["loading", "stale"],
        "transactions",
        "1.2.0",
        "Runs the queued transaction as one log entry."
    ),
    spec!(
        "exists",
        -2,
        Read,
        ALL_KEYS,
        RF,
        "generic",
        "1.0.0",
        "Counts the given keys that exist."
    ),
    spec!(
        "expire",
        -3,
        Write,
        KEY1,
        WD,
        "generic",
        "1.0.0",
        "Sets a key's time to live in seconds."
    ),
    spec!(
        "expireat",
        -3,
        Write,
        KEY1,
        WD,
        "generic",
        "1.2.0",
        "Sets a key's expiry as a Unix time in seconds."
    ),
    spec!(
        "expiretime",
        2,
        Read,
        KEY1,
        RF,
        "generic",
        "7.0.0",
        "Returns a key's expiry as a Unix time in seconds."
    ),
    spec!(
        "flushall",
        -1,
        Write,
        NO_KEYS,
        &["write"],
        "server",
        "1.0.0",
        "Deletes every key (Keel KV has one database)."
    ),
    spec!(
        "flushdb",
        -1,
        Write,
        NO_KEYS,
        &["write"],
        "server",
        "1.0.0",
        "Deletes every key."
    ),
    spec!(
        "get",
        2,
        Read,
        KEY1,
        RF,
        "string",
        "1.0.0",
        "Returns a string's value."
    ),
    spec!(
        "getdel",
        2,
        Write,
        KEY1,
        WD,
        "string",
        "6.2.0",
        "Returns a string's value and deletes it."
    ),
    spec!(
        "getset",
        3,
        Write,
        KEY1,
        WF,
        "string",
        "1.0.0",
        "Sets a string and returns its old value."
    ),
    spec!(
        "hdel",
        -3,
        Write,
        KEY1,
        WD,
        "hash",
        "2.0.0",
        "Deletes hash fields; returns how many existed."
    ),
    spec!(
        "hello",
        -1,
        Connection,
        NO_KEYS,
        CL,
        "connection",
        "6.0.0",
        "Chooses RESP2 or RESP3 and describes the server."
    ),
    spec!(
        "hexists",
        3,
        Read,
        KEY1,
        RF,
        "hash",
        "2.0.0",
        "Whether a hash field exists."
    ),
    spec!(
        "hget",
        3,
        Read,
        KEY1,
        RF,
        "hash",
        "2.0.0",
        "Returns a hash field's value."
    ),
    spec!(
        "hgetall",
        2,
        Read,
        KEY1,
        R,
        "hash",
        "2.0.0",
        "Returns a hash's fields and values."
    ),
    spec!(
        "hincrby",
        4,
        Write,
        KEY1,
        WF,
        "hash",
        "2.0.0",
        "Adds a number to an integer hash field."
    ),
    spec!(
        "hkeys",
        2,
        Read,
        KEY1,
        R,
        "hash",
        "2.0.0",
        "Returns a hash's fields."
    ),
    spec!(
        "hlen",
        2,
        Read,
        KEY1,
        RF,
        "hash",
        "2.0.0",
        "Returns a hash's number of fields."
    ),
    spec!(
        "hmget",
        -3,
        Read,
        KEY1,
        RF,
        "hash",
        "2.0.0",
        "Returns the values of hash fields."
    ),
    spec!(
        "hmset",
        -4,
        Write,
        KEY1,
        WF,
        "hash",
        "2.0.0",
        "Sets hash fields (replies OK)."
    ),
    spec!(
        "hset",
        -4,
        Write,
        KEY1,
        WF,
        "hash",
        "2.0.0",
        "Sets hash fields; returns how many were new."
    ),
    spec!(
        "hsetnx",
        4,
        Write,
        KEY1,
        WF,
        "hash",
        "2.0.0",
        "Sets a hash field if it is missing."
    ),
    spec!(
        "hstrlen",
        3,
        Read,
        KEY1,
        RF,
        "hash",
        "3.2.0",
        "Returns the length of a hash field's value."
    ),
    spec!(
        "hvals",
        2,
        Read,
        KEY1,
        R,
        "hash",
        "2.0.0",
        "Returns a hash's values."
    ),
    spec!(
        "incr",
        2,
        Write,
        KEY1,
        WF,
        "string",
        "1.0.0",
        "Adds one to an integer string."
    ),
    spec!(
        "incrby",
        3,
        Write,
        KEY1,
        WF,
        "string",
        "1.0.0",
        "Adds a number to an integer string."
    ),
    spec!(
        "info",
        -1,
        Connection,
        NO_KEYS,
        &["loading", "stale"],
        "server",
        "1.0.0",
        "Reports the server's state by section."
    ),
    spec!(
        "keys",
        2,
        Read,
        NO_KEYS,
        R,
        "generic",
        "1.0.0",
        "Returns the keys matching a pattern."
    ),
    spec!(
        "mget",
        -2,
        Read,
        ALL_KEYS,
        RF,
        "string",
        "1.0.0",
        "Returns the values of strings."
    ),
    spec!(
        "mset",
        -3,
        Write,
        PAIRS,
        W,
        "string",
        "1.0.1",
        "Sets strings, atomically."
    ),
    spec!(
        "msetnx",
        -3,
        Write,
        PAIRS,
        W,
        "string",
        "1.0.1",
        "Sets strings if none of the keys exists."
    ),
    spec!(
        "multi",
        1,
        Connection,
        NO_KEYS,
        CL,
        "transactions",
        "1.2.0",
        "Starts queueing a transaction."
    ),
    spec!(
        "persist",
        2,
        Write,
        KEY1,
        WD,
        "generic",
        "2.2.0",
        "Removes a key's expiry."
    ),
    spec!(
        "pexpire",
        -3,
        Write,
        KEY1,
        WD,
        "generic",
        "2.6.0",
        "Sets a key's time to live in milliseconds."
    ),
    spec!(
        "pexpireat",
        -3,
        Write,
        KEY1,
        WD,
        "generic",
        "2.6.0",
        "Sets a key's expiry as a Unix time in milliseconds."
    ),
    spec!(
        "pexpiretime",
        2,
        Read,
        KEY1,
        RF,
        "generic",
        "7.0.0",
        "Returns a key's expiry as a Unix time in milliseconds."
    ),
    spec!(
        "ping",
        -1,
        Connection,
        NO_KEYS,
        C,
        "connection",
        "1.0.0",
        "Answers PONG, or its argument."
    ),
    spec!(
        "psetex",
        4,
        Write,
        KEY1,
        W,
        "string",
        "2.6.0",
        "Sets a string with a time to live in milliseconds."
    ),
    spec!(
        "pttl",
        2,
        Read,
        KEY1,
        RF,
        "generic",
        "2.6.0",
        "Returns a key's time to live in milliseconds."
    ),
    spec!(
        "quit",
        -1,
        Connection,
        NO_KEYS,
        CL,
        "connection",
        "1.0.0",
        "Closes the connection."
    ),
    spec!(
        "readonly",
        1,
        Connection,
        NO_KEYS,
        CL,
        "cluster",
        "3.0.0",
        "Lets this connection read this node's state without a ReadIndex barrier."
    ),
    spec!(
        "readwrite",
        1,
        Connection,
        NO_KEYS,
        CL,
        "cluster",
        "3.0.0",
        "Makes this connection's reads linearizable again."
    ),
    spec!(
        "reset",
        1,
        Connection,
        NO_KEYS,
        CL,
        "connection",
        "6.2.0",
        "Resets the connection's state."
    ),
    spec!(
        "sadd",
        -3,
        Write,
        KEY1,
        WF,
        "set",
        "1.0.0",
        "Adds set members; returns how many were new."
    ),
    spec!(
        "scan",
        -2,
        Read,
        NO_KEYS,
        R,
        "generic",
        "2.8.0",
        "Iterates over the keys."
    ),
    spec!(
        "scard",
        2,
        Read,
        KEY1,
        RF,
        "set",
        "1.0.0",
        "Returns a set's number of members."
    ),
    spec!(
        "select",
        2,
        Connection,
        NO_KEYS,
        CL,
        "connection",
        "1.0.0",
        "Selects the database (Keel KV has database 0 only)."
    ),
    spec!(
        "set",
        -3,
        Write,
        KEY1,
        W,
        "string",
        "1.0.0",
        "Sets a string, with options."
    ),
    spec!(
        "setex",
        4,
        Write,
        KEY1,
        W,
        "string",
        "2.0.0",
        "Sets a string with a time to live in seconds."
    ),
    spec!(
        "setnx",
        3,
        Write,
        KEY1,
        WF,
        "string",
        "1.0.0",
        "Sets a string if the key is missing."
    ),
    spec!(
        "sismember",
        3,
        Read,
        KEY1,
        RF,
        "set",
        "1.0.0",
        "Whether a value is a member of a set."
    ),
    spec!(
        "smembers",
        2,
        Read,
        KEY1,
        R,
        "set",
        "1.0.0",
        "Returns a set's members."
    ),
    spec!(
        "smismember",
        -3,
        Read,
        KEY1,
        RF,
        "set",
        "6.2.0",
        "Whether each value is a member of a set."
    ),
    spec!(
        "srem",
        -3,
        Write,
        KEY1,
        WD,
        "set",
        "1.0.0",
        "Removes set members; returns how many existed."
    ),
    spec!(
        "strlen",
        2,
        Read,
        KEY1,
        RF,
        "string",
        "2.2.0",
        "Returns a string's length."
    ),
    spec!(
        "time",
        1,
        Connection,
        NO_KEYS,
        CL,
        "server",
        "2.6.0",
        "Returns this node's clock."
    ),
    spec!(
        "ttl",
        2,
        Read,
        KEY1,
        RF,
        "generic",
        "1.0.0",
        "Returns a key's time to live in seconds."
    ),
    spec!(
        "type",
        2,
        Read,
        KEY1,
        RF,
        "generic",
        "1.0.0",
        "Returns the type of a key's value."
    ),
    spec!(
        "unlink",
        -2,
        Write,
        ALL_KEYS,
        WD,
        "generic",
        "4.0.0",
        "Deletes keys; returns how many existed."
    ),
    spec!(
        "unwatch",
        1,
        Connection,
        NO_KEYS,
        CL,
        "transactions",
        "2.2.0",
        "Forgets the watched keys."
    ),
    spec!(
        "watch",
        -2,
        Connection,
        ALL_KEYS,
        CL,
        "transactions",
        "2.2.0",
        "Makes the next EXEC fail if these keys change."
    ),
];

/// The longest command name in `TABLE`, in bytes (checked when the index
/// is built): a longer name names no command.
const NAME_BYTES_MAX: usize = 32;

/// `TABLE`'s specs by the length of their names, built once. Every request
/// looks its command up: it scans the few names of its length, first
/// bytes first, instead of the whole table.
fn specs_by_length() -> &'static [Vec<&'static Spec>] {
    static BY_LENGTH: OnceLock<Vec<Vec<&'static Spec>>> = OnceLock::new();
    BY_LENGTH.get_or_init(|| {
        let mut by_length = vec![Vec::new(); NAME_BYTES_MAX + 1];
        for spec in TABLE {
            assert!(spec.name.len() <= NAME_BYTES_MAX, "{}", spec.name);
            assert!(!spec.name.is_empty());
            assert_eq!(
                spec.name,
                spec.name.to_ascii_lowercase(),
                "names are lower case"
            );
            by_length[spec.name.len()].push(spec);
        }
        by_length
    })
}

/// The spec of a command by its name (ASCII case-insensitive), not
/// checking arity.
pub fn spec_named(name: &[u8]) -> Option<&'static Spec> {
    let first = name.first()?.to_ascii_lowercase();
    let candidates = specs_by_length().get(name.len())?;
    candidates
        .iter()
        .find(|spec| {
            let bytes = spec.name.as_bytes();
            bytes[0] == first && bytes[1..].eq_ignore_ascii_case(&name[1..])
        })
        .copied()
}

/// The key of a command of `kind` with exactly one key (GET, HGET, SET,
/// INCR, ...), for prefetching its lookup; `None` for anything else, a
/// command that fails its checks included (a hint, not a check).
pub fn single_key(args: &[Vec<u8>], kind: Kind) -> Option<&[u8]> {
    spec_named(args.first()?)?.single_key_of(kind, args)
}

/// Redis's checks on arrival: the command (and subcommand) exists and its
/// arity fits. The error is Redis's.
pub fn lookup(args: &[Vec<u8>]) -> Result<&'static Spec, Reply> {
    assert!(!args.is_empty(), "an empty request is not a command");
    let Some(base) = spec_named(&args[0]) else {
        return Err(unknown_command(args));
    };
    let spec = if !base.subcommands.is_empty() && args.len() >= 2 {
        let prefix = format!("{}|", base.name);
        let prefix: &str = &prefix;
        match base
            .subcommands
            .iter()
            .find(|s| s.name.as_bytes()[prefix.len()..].eq_ignore_ascii_case(&args[1]))
        {
            Some(sub) => sub,
            None => {
                return Err(Reply::error_owned(format!(
                    "ERR unknown subcommand '{}'. Try {} HELP.",
                    lossy(&args[1], 128),
                    base.name.to_ascii_uppercase()
                )))
            }
        }
    } else {
        base
    };
    let argc = args.len() as i32;
    if (spec.arity > 0 && spec.arity != argc) || argc < -spec.arity {
        return Err(arity_error(spec.name));
    }
    Ok(spec)
}

/// "wrong number of arguments for '<name>' command".
pub fn arity_error(name: &str) -> Reply {
    Reply::error_owned(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

fn lossy(bytes: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(max)]).into_owned()
}

/// Redis's unknown-command error: the name, then the arguments quoted one
/// by one while the list is under 128 bytes, each cut to what is left.
pub fn unknown_command(args: &[Vec<u8>]) -> Reply {
    let mut listed: Vec<u8> = Vec::new();
    for arg in &args[1..] {
        if listed.len() >= 128 {
            break;
        }
        let room = 128 - listed.len();
        listed.push(b'\'');
        listed.extend_from_slice(&arg[..arg.len().min(room)]);
        listed.extend_from_slice(b"' ");
    }
    Reply::error_owned(format!(
        "ERR unknown command '{}', with args beginning with: {}",
        lossy(&args[0], 128),
        String::from_utf8_lossy(&listed)
    ))
}

/// SET's condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    Always,
    /// NX: only if the key is missing.
    Missing,
    /// XX: only if the key exists.
    Present,
}

/// An expiry argument, resolved against the apply clock when applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryArg {
    None,
    /// KEEPTTL.
    Keep,
    /// EX / PX: milliseconds from now.
    In(i64),
    /// EXAT / PXAT: a Unix time in milliseconds.
    At(i64),
}

/// EXPIRE's NX/XX/GT/LT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExpireFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
}

/// What TTL-style commands report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlForm {
    Seconds,
    Milliseconds,
    UnixSeconds,
    UnixMilliseconds,
}

/// A keyspace command with its arguments checked. Keys, fields and values
/// are borrowed from the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    Get(&'a [u8]),
    Set {
        key: &'a [u8],
        value: &'a [u8],
        condition: Condition,
        expiry: ExpiryArg,
        get: bool,
        /// SETEX/PSETEX/SET: the name its errors use.
        name: &'static str,
    },
    SetNx(&'a [u8], &'a [u8]),
    GetSet(&'a [u8], &'a [u8]),
    GetDel(&'a [u8]),
    MGet(Vec<&'a [u8]>),
    MSet(Vec<(&'a [u8], &'a [u8])>),
    MSetNx(Vec<(&'a [u8], &'a [u8])>),
    Del(Vec<&'a [u8]>),
    Exists(Vec<&'a [u8]>),
    IncrBy(&'a [u8], i64),
    Append(&'a [u8], &'a [u8]),
    StrLen(&'a [u8]),
    Expire {
        key: &'a [u8],
        /// Milliseconds (relative) or a Unix time in milliseconds.
        amount: i64,
        relative: bool,
        flags: ExpireFlags,
        name: &'static str,
    },
    Ttl(&'a [u8], TtlForm),
    Persist(&'a [u8]),
    HSet {
        key: &'a [u8],
        pairs: Vec<(&'a [u8], &'a [u8])>,
        /// HMSET replies OK, HSET the count of new fields.
        replies_ok: bool,
    },
    HSetNx(&'a [u8], &'a [u8], &'a [u8]),
    HGet(&'a [u8], &'a [u8]),
    HMGet(&'a [u8], Vec<&'a [u8]>),
    HDel(&'a [u8], Vec<&'a [u8]>),
    HGetAll(&'a [u8]),
    HKeys(&'a [u8]),
    HVals(&'a [u8]),
    HLen(&'a [u8]),
    HExists(&'a [u8], &'a [u8]),
    HStrLen(&'a [u8], &'a [u8]),
    HIncrBy(&'a [u8], &'a [u8], i64),
    SAdd(&'a [u8], Vec<&'a [u8]>),
    SRem(&'a [u8], Vec<&'a [u8]>),
    SMembers(&'a [u8]),
    SIsMember(&'a [u8], &'a [u8]),
    SMIsMember(&'a [u8], Vec<&'a [u8]>),
    SCard(&'a [u8]),
    Scan {
        cursor: u64,
        pattern: Option<&'a [u8]>,
        count: usize,
        kind: Option<&'a [u8]>,
    },
    Keys(&'a [u8]),
    DbSize,
    Type(&'a [u8]),
    FlushDb,
}

/// SCAN's default COUNT.
pub const SCAN_COUNT_DEFAULT: usize = 10;

fn eq(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

fn integer(arg: &[u8]) -> Result<i64, Reply> {
    parse_i64(arg).ok_or_else(Reply::not_integer)
}

fn expire_error(name: &str) -> Reply {
    Reply::error_owned(format!("ERR invalid expire time in '{name}' command"))
}

fn pairs(args: &[Vec<u8>]) -> Vec<(&[u8], &[u8])> {
    args.chunks_exact(2)
        .map(|p| (&p[0][..], &p[1][..]))
        .collect()
}

fn refs(args: &[Vec<u8>]) -> Vec<&[u8]> {
    args.iter().map(|a| &a[..]).collect()
}

impl<'a> Command<'a> {
    /// The argument checks of `spec`'s command (found by `lookup`) on
    /// `args`, before any key is looked at.
    pub fn parse(spec: &Spec, args: &'a [Vec<u8>]) -> Result<Command<'a>, Reply> {
        assert!(
            spec.kind != Kind::Connection,
            "{} is not a keyspace command",
            spec.name
        );
        let a = |i: usize| -> &'a [u8] { &args[i] };
        Ok(match spec.name {
            "get" => Command::Get(a(1)),
            "set" => parse_set(args)?,
            "setex" | "psetex" => {
                let amount = integer(a(2))?;
                let name = if spec.name == "setex" {
                    "setex"
                } else {
                    "psetex"
                };
                Command::Set {
                    key: a(1),
                    value: a(3),
                    condition: Condition::Always,
                    expiry: relative_expiry(amount, name == "setex", name)?,
                    get: false,
                    name,
                }
            }
            "setnx" => Command::SetNx(a(1), a(2)),
            "getset" => Command::GetSet(a(1), a(2)),
            "getdel" => Command::GetDel(a(1)),
            "mget" => Command::MGet(refs(&args[1..])),
            "mset" | "msetnx" => {
                if args.len().is_multiple_of(2) {
                    return Err(arity_error(spec.name));
                }
                if spec.name == "mset" {
                    Command::MSet(pairs(&args[1..]))
                } else {
                    Command::MSetNx(pairs(&args[1..]))
                }
            }
            "del" | "unlink" => Command::Del(refs(&args[1..])),
            "exists" => Command::Exists(refs(&args[1..])),
            "incr" => Command::IncrBy(a(1), 1),
            "decr" => Command::IncrBy(a(1), -1),
            "incrby" => Command::IncrBy(a(1), integer(a(2))?),
            "decrby" => {
                let by = integer(a(2))?;
                if by == i64::MIN {
                    return Err(Reply::error("ERR decrement would overflow"));
                }
                Command::IncrBy(a(1), -by)
            }
            "append" => Command::Append(a(1), a(2)),
            "strlen" => Command::StrLen(a(1)),
            "expire" | "pexpire" | "expireat" | "pexpireat" => parse_expire(spec.name, args)?,
            "ttl" => Command::Ttl(a(1), TtlForm::Seconds),
            "pttl" => Command::Ttl(a(1), TtlForm::Milliseconds),
            "expiretime" => Command::Ttl(a(1), TtlForm::UnixSeconds),
            "pexpiretime" => Command::Ttl(a(1), TtlForm::UnixMilliseconds),
            "persist" => Command::Persist(a(1)),
            "hset" | "hmset" => {
                if args.len() % 2 == 1 {
                    return Err(arity_error(spec.name));
                }
                Command::HSet {
                    key: a(1),
                    pairs: pairs(&args[2..]),
                    replies_ok: spec.name == "hmset",
                }
            }
            "hsetnx" => Command::HSetNx(a(1), a(2), a(3)),
            "hget" => Command::HGet(a(1), a(2)),
            "hmget" => Command::HMGet(a(1), refs(&args[2..])),
            "hdel" => Command::HDel(a(1), refs(&args[2..])),
            "hgetall" => Command::HGetAll(a(1)),
            "hkeys" => Command::HKeys(a(1)),
            "hvals" => Command::HVals(a(1)),
            "hlen" => Command::HLen(a(1)),
            "hexists" => Command::HExists(a(1), a(2)),
            "hstrlen" => Command::HStrLen(a(1), a(2)),
            "hincrby" => Command::HIncrBy(a(1), a(2), integer(a(3))?),
            "sadd" => Command::SAdd(a(1), refs(&args[2..])),
            "srem" => Command::SRem(a(1), refs(&args[2..])),
            "smembers" => Command::SMembers(a(1)),
            "sismember" => Command::SIsMember(a(1), a(2)),
            "smismember" => Command::SMIsMember(a(1), refs(&args[2..])),
            "scard" => Command::SCard(a(1)),
            "scan" => parse_scan(args)?,
            "keys" => Command::Keys(a(1)),
            "dbsize" => Command::DbSize,
            "type" => Command::Type(a(1)),
            "flushdb" | "flushall" => {
                match args.len() {
                    1 => {}
                    2 if eq(a(1), "sync") || eq(a(1), "async") => {}
                    _ => return Err(Reply::syntax()),
                }
                Command::FlushDb
            }
            other => unreachable!("keyspace command {other} has no parser"),
        })
    }

    /// Whether applying it changes the keyspace (it goes through the log).
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Command::Set { .. }
                | Command::SetNx(..)
                | Command::GetSet(..)
                | Command::GetDel(..)
                | Command::MSet(..)
                | Command::MSetNx(..)
                | Command::Del(..)
                | Command::IncrBy(..)
                | Command::Append(..)
                | Command::Expire { .. }
                | Command::Persist(..)
                | Command::HSet { .. }
                | Command::HSetNx(..)
                | Command::HDel(..)
                | Command::HIncrBy(..)
                | Command::SAdd(..)
                | Command::SRem(..)
                | Command::FlushDb
        )
    }

    /// Which part of the keyspace it needs.
    pub fn route(&self) -> Route<'a> {
        match self {
            Command::Get(k)
            | Command::Set { key: k, .. }
            | Command::SetNx(k, _)
            | Command::GetSet(k, _)
            | Command::GetDel(k)
            | Command::IncrBy(k, _)
            | Command::Append(k, _)
            | Command::StrLen(k)
            | Command::Expire { key: k, .. }
            | Command::Ttl(k, _)
            | Command::Persist(k)
            | Command::HSet { key: k, .. }
            | Command::HSetNx(k, _, _)
            | Command::HGet(k, _)
            | Command::HMGet(k, _)
            | Command::HDel(k, _)
            | Command::HGetAll(k)
            | Command::HKeys(k)
            | Command::HVals(k)
            | Command::HLen(k)
            | Command::HExists(k, _)
            | Command::HStrLen(k, _)
            | Command::HIncrBy(k, _, _)
            | Command::SAdd(k, _)
            | Command::SRem(k, _)
            | Command::SMembers(k)
            | Command::SIsMember(k, _)
            | Command::SMIsMember(k, _)
            | Command::SCard(k)
            | Command::Type(k) => Route::Keys(smallvec![*k]),
            Command::MGet(keys) | Command::Del(keys) | Command::Exists(keys) => {
                Route::Keys(SmallVec::from_slice(keys))
            }
            Command::MSet(pairs) | Command::MSetNx(pairs) => {
                Route::Keys(pairs.iter().map(|p| p.0).collect())
            }
            Command::Scan { .. } | Command::Keys(_) | Command::DbSize | Command::FlushDb => {
                Route::All
            }
        }
    }
}

/// The part of the keyspace a command touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<'a> {
    /// The slots of these keys (one, for most commands, without an
    /// allocation: a read's route is found per request).
    Keys(SmallVec<[&'a [u8]; 1]>),
    /// Every slot.
    All,
}

fn relative_expiry(amount: i64, seconds: bool, name: &str) -> Result<ExpiryArg, Reply> {
    if amount <= 0 || (seconds && amount > i64::MAX / 1000) {
        return Err(expire_error(name));
    }
    Ok(ExpiryArg::In(if seconds { amount * 1000 } else { amount }))
}

/// SET's options, in Redis's parser's order and with its exclusions.
fn parse_set(args: &[Vec<u8>]) -> Result<Command<'_>, Reply> {
    let mut condition = Condition::Always;
    let mut get = false;
    // (keyword, amount argument)
    let mut expiry: Option<(&str, &[u8])> = None;
    let mut keep = false;
    let mut j = 3;
    while j < args.len() {
        let opt = &args[j][..];
        let next = args.get(j + 1).map(|n| &n[..]);
        if eq(opt, "nx") && condition != Condition::Present {
            condition = Condition::Missing;
        } else if eq(opt, "xx") && condition != Condition::Missing {
            condition = Condition::Present;
        } else if eq(opt, "get") {
            get = true;
        } else if eq(opt, "keepttl") && expiry.is_none() {
            keep = true;
        } else if let Some(word) = ["ex", "px", "exat", "pxat"]
            .into_iter()
            .find(|w| eq(opt, w))
        {
            let other = expiry.is_some_and(|(w, _)| w != word);
            match next {
                Some(next) if !keep && !other => {
                    expiry = Some((word, next));
                    j += 1;
                }
                _ => return Err(Reply::syntax()),
            }
        } else {
            return Err(Reply::syntax());
        }
        j += 1;
    }
    let expiry = match expiry {
        None if keep => ExpiryArg::Keep,
        None => ExpiryArg::None,
        Some((word, amount)) => {
            let amount = integer(amount)?;
            match word {
                "ex" => relative_expiry(amount, true, "set")?,
                "px" => relative_expiry(amount, false, "set")?,
                _ => {
                    let seconds = word == "exat";
                    if amount <= 0 || (seconds && amount > i64::MAX / 1000) {
                        return Err(expire_error("set"));
                    }
                    ExpiryArg::At(if seconds { amount * 1000 } else { amount })
                }
            }
        }
    };
    Ok(Command::Set {
        key: &args[1],
        value: &args[2],
        condition,
        expiry,
        get,
        name: "set",
    })
}

fn parse_expire<'a>(name: &'static str, args: &'a [Vec<u8>]) -> Result<Command<'a>, Reply> {
    let mut flags = ExpireFlags::default();
    for opt in &args[3..] {
        if eq(opt, "nx") {
            flags.nx = true;
        } else if eq(opt, "xx") {
            flags.xx = true;
        } else if eq(opt, "gt") {
            flags.gt = true;
        } else if eq(opt, "lt") {
            flags.lt = true;
        } else {
            return Err(Reply::error_owned(format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    if flags.nx && (flags.xx || flags.gt || flags.lt) {
        return Err(Reply::error(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if flags.gt && flags.lt {
        return Err(Reply::error(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    let mut amount = integer(&args[2])?;
    if name == "expire" || name == "expireat" {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&amount) {
            return Err(expire_error(name));
        }
        amount *= 1000;
    }
    Ok(Command::Expire {
        key: &args[1],
        amount,
        relative: name == "expire" || name == "pexpire",
        flags,
        name,
    })
}

/// SCAN's cursor as Redis reads it (`parseScanCursorOrReply`: C's
/// `strtoul`, base 10): an optional sign, then decimal digits whose value
/// fits 64 bits; a minus sign negates it modulo 2^64 (`-1` is the largest
/// cursor). No digits at all is cursor 0 when nothing else is there (the
/// empty argument), an error after a lone sign. Whitespace anywhere is an
/// error.
fn parse_cursor(arg: &[u8]) -> Option<u64> {
    let (negative, digits) = match arg.split_first() {
        None => return Some(0),
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        Some(_) => (false, arg),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut value: u64 = 0;
    for digit in digits {
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

fn parse_scan(args: &[Vec<u8>]) -> Result<Command<'_>, Reply> {
    let cursor = parse_cursor(&args[1]).ok_or_else(|| Reply::error("ERR invalid cursor"))?;
    let mut pattern = None;
    let mut count = SCAN_COUNT_DEFAULT;
    let mut kind = None;
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - i;
        if eq(&args[i], "count") && more >= 2 {
            let value = integer(&args[i + 1])?;
            if value < 1 {
                return Err(Reply::syntax());
            }
            count = value as usize;
        } else if eq(&args[i], "match") && more >= 2 {
            pattern = (&args[i + 1][..] != b"*").then_some(&args[i + 1][..]);
        } else if eq(&args[i], "type") && more >= 2 {
            kind = Some(&args[i + 1][..]);
        } else {
            return Err(Reply::syntax());
        }
        i += 2;
    }
    Ok(Command::Scan {
        cursor,
        pattern,
        count,
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    fn parsed(words: &[&str]) -> Result<String, Reply> {
        let args = args(words);
        let spec = lookup(&args)?;
        Command::parse(spec, &args).map(|c| format!("{c:?}"))
    }

    #[test]
    fn scan_cursors_are_read_as_redis_reads_them() {
        let cases: [(&[u8], u64); 8] = [
            (b"", 0),
            (b"0", 0),
            (b"+0", 0),
            (b"-0", 0),
            (b"007", 7),
            (b"18446744073709551615", u64::MAX),
            (b"-1", u64::MAX),
            (b"-18446744073709551615", 1),
        ];
        for (arg, cursor) in cases {
            assert_eq!(
                parse_cursor(arg),
                Some(cursor),
                "{:?}",
                String::from_utf8_lossy(arg)
            );
        }
    }

    fn error(words: &[&str]) -> String {
        match parsed(words) {
            Err(Reply::Error(text)) => text.into_owned(),
            other => panic!("{words:?}: {other:?}"),
        }
    }

    #[test]
    fn single_keys_are_those_of_one_key_commands_of_the_kind_asked() {
        let key = |words: &[&str], kind| single_key(&args(words), kind).map(|k| k.to_vec());
        assert_eq!(key(&["get", "k"], Kind::Read), Some(b"k".to_vec()));
        assert_eq!(key(&["HGET", "h", "f"], Kind::Read), Some(b"h".to_vec()));
        assert_eq!(key(&["strlen", "s"], Kind::Read), Some(b"s".to_vec()));
        assert_eq!(key(&["SET", "k", "v"], Kind::Write), Some(b"k".to_vec()));
        assert_eq!(key(&["incr", "n"], Kind::Write), Some(b"n".to_vec()));
        assert_eq!(key(&["GET", "k"], Kind::Write), None, "a read");
        assert_eq!(key(&["SET", "k", "v"], Kind::Read), None, "a write");
        assert_eq!(
            key(&["GET"], Kind::Read),
            None,
            "no key: arity is the session's to refuse"
        );
        assert_eq!(key(&["MGET", "a", "b"], Kind::Read), None, "several keys");
        assert_eq!(
            key(&["MSET", "a", "1"], Kind::Write),
            None,
            "keys to the end"
        );
        assert_eq!(key(&["DBSIZE"], Kind::Read), None, "no keys");
        assert_eq!(key(&["PING", "x"], Kind::Connection), None, "no keys");
        assert_eq!(key(&["NOSUCH", "k"], Kind::Read), None);
        assert_eq!(single_key(&[], Kind::Read), None);
    }

    #[test]
    fn the_table_is_sorted_and_arities_are_redis_ones() {
        for pair in TABLE.windows(2) {
            assert!(
                pair[0].name < pair[1].name,
                "{} before {}",
                pair[0].name,
                pair[1].name
            );
        }
        assert_eq!(spec_named(b"GeT").unwrap().arity, 2);
        assert_eq!(spec_named(b"set").unwrap().arity, -3);
    }

    #[test]
    fn every_command_is_found_by_its_name_in_any_case_and_nothing_else_is() {
        for spec in TABLE {
            let upper = spec.name.to_ascii_uppercase();
            let mixed: String = spec
                .name
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    if i % 2 == 0 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    }
                })
                .collect();
            for name in [spec.name, &upper, &mixed] {
                let found = spec_named(name.as_bytes()).expect("a command in the table");
                assert!(std::ptr::eq(found, spec), "{name} found {}", found.name);
            }
            // One byte changed, added or taken away: another command or none.
            let mut longer = spec.name.as_bytes().to_vec();
            longer.push(b'x');
            let shorter = &spec.name.as_bytes()[..spec.name.len() - 1];
            for other in [&longer[..], shorter] {
                if let Some(found) = spec_named(other) {
                    assert!(found.name.as_bytes().eq_ignore_ascii_case(other));
                }
            }
        }
        // Every name of up to 12 bytes over a small alphabet, in both
        // cases: found exactly when it names a command.
        let mut names: Vec<Vec<u8>> = TABLE.iter().map(|s| s.name.as_bytes().to_vec()).collect();
        let alphabet = b"geTSlcxX\0\xff";
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 13) as usize;
            names.push(
                (0..len)
                    .map(|i| alphabet[((state >> (4 + 3 * i)) % 10) as usize])
                    .collect(),
            );
        }
        for name in &names {
            let by_scan = TABLE
                .iter()
                .find(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name));
            let found = spec_named(name);
            assert_eq!(found.map(|s| s.name), by_scan.map(|s| s.name), "{name:?}");
            let upper = name.to_ascii_uppercase();
            assert_eq!(spec_named(&upper).map(|s| s.name), by_scan.map(|s| s.name));
        }
        let too_long = vec![b'a'; NAME_BYTES_MAX + 1];
        for name in [
            &b""[..],
            b"nosuchcommand",
            b"ge",
            b"gett",
            b"g\xc3\xa9t",
            &too_long,
        ] {
            assert!(
                spec_named(name).is_none(),
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn unknown_commands_and_arity_errors_read_as_redis_7() {
        assert_eq!(
            error(&["foo", "a", "b"]),
            "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
        );
        assert_eq!(
            error(&["FOO"]),
            "ERR unknown command 'FOO', with args beginning with: "
        );
        assert_eq!(
            error(&["get"]),
            "ERR wrong number of arguments for 'get' command"
        );
        assert_eq!(
            error(&["CLIENT", "SETNAME"]),
            "ERR wrong number of arguments for 'client|setname' command"
        );
        assert_eq!(
            error(&["client", "kil"]),
            "ERR unknown subcommand 'kil'. Try CLIENT HELP."
        );
        assert_eq!(
            error(&["client"]),
            "ERR wrong number of arguments for 'client' command"
        );
        assert_eq!(
            error(&["mset", "a", "1", "b"]),
            "ERR wrong number of arguments for 'mset' command"
        );
        assert_eq!(
            error(&["hset", "h", "f", "v", "g"]),
            "ERR wrong number of arguments for 'hset' command"
        );
        let long = "x".repeat(200);
        let text = error(&["nope", &long, "y"]);
        assert_eq!(
            text.len(),
            "ERR unknown command 'nope', with args beginning with: ".len() + 131
        );
    }

    #[test]
    fn set_options_follow_redis_exclusions() {
        assert!(parsed(&["set", "k", "v", "NX", "GET", "EX", "10"]).is_ok());
        assert!(parsed(&["set", "k", "v", "EX", "10", "EX", "20"]).is_ok());
        assert_eq!(error(&["set", "k", "v", "NX", "XX"]), SYNTAX_TEXT);
        assert_eq!(
            error(&["set", "k", "v", "EX", "10", "PX", "20"]),
            SYNTAX_TEXT
        );
        assert_eq!(error(&["set", "k", "v", "KEEPTTL", "EX", "1"]), SYNTAX_TEXT);
        assert_eq!(error(&["set", "k", "v", "EX"]), SYNTAX_TEXT);
        assert_eq!(
            error(&["set", "k", "v", "EX", "x"]),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            error(&["set", "k", "v", "EX", "0"]),
            "ERR invalid expire time in 'set' command"
        );
        assert_eq!(
            error(&["setex", "k", "-1", "v"]),
            "ERR invalid expire time in 'setex' command"
        );
        assert_eq!(
            error(&["psetex", "k", "0", "v"]),
            "ERR invalid expire time in 'psetex' command"
        );
    }

    const SYNTAX_TEXT: &str = "ERR syntax error";

    #[test]
    fn expire_flags_and_scan_options() {
        assert_eq!(
            error(&["expire", "k", "1", "NX", "XX"]),
            "ERR NX and XX, GT or LT options at the same time are not compatible"
        );
        assert_eq!(
            error(&["expire", "k", "1", "GT", "LT"]),
            "ERR GT and LT options at the same time are not compatible"
        );
        assert_eq!(
            error(&["expire", "k", "1", "ZZ"]),
            "ERR Unsupported option ZZ"
        );
        assert_eq!(
            error(&["expire", "k", "x"]),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            error(&["expire", "k", "9223372036854775807"]),
            "ERR invalid expire time in 'expire' command"
        );
        assert_eq!(error(&["scan", "x"]), "ERR invalid cursor");
        for bad in [
            "-",
            "+",
            " 1",
            "1 ",
            "0x1",
            "18446744073709551616",
            "-18446744073709551616",
        ] {
            assert_eq!(error(&["scan", bad]), "ERR invalid cursor", "{bad:?}");
        }
        assert_eq!(error(&["scan", "0", "count", "0"]), SYNTAX_TEXT);
        assert_eq!(error(&["scan", "0", "match"]), SYNTAX_TEXT);
        assert_eq!(
            error(&["decrby", "k", "-9223372036854775808"]),
            "ERR decrement would overflow"
        );
        assert_eq!(error(&["flushdb", "now"]), SYNTAX_TEXT);
    }

    #[test]
    fn keys_follow_the_legacy_key_spec() {
        let mset = args(&["mset", "a", "1", "b", "2"]);
        assert_eq!(lookup(&mset).unwrap().keys(&mset), vec![&b"a"[..], b"b"]);
        let del = args(&["del", "a", "b", "c"]);
        assert_eq!(lookup(&del).unwrap().keys(&del).len(), 3);
        let get = args(&["get", "a"]);
        assert_eq!(lookup(&get).unwrap().keys(&get), vec![&b"a"[..]]);
    }
}
