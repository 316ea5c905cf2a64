//! One connection's protocol state, sans IO: the protocol version (HELLO),
//! its name and id (CLIENT), the transaction being queued (MULTI) and the
//! keys it watches (WATCH), and whether its reads may skip the ReadIndex
//! barrier (READONLY). The connection shell feeds it each request and
//! carries out the `Action` it returns: a reply now, a read on the
//! shards, a write or a transaction through the Raft log.

use std::borrow::Cow;

use crate::command::{self, Command, Kind, Route, Spec, TABLE};
use crate::op::Watch;
use crate::reply::{Protocol, Reply};
use crate::resp::{parse_i64, Args};
use crate::slot::key_slot;

/// The Redis version whose behaviour Keel KV follows; HELLO and INFO
/// report it, so clients enable what Redis 7.0 has.
pub const REDIS_VERSION: &str = "7.0.15";
/// Most commands one MULTI may queue (Redis has no bound; a transaction
/// is one Raft entry, so Keel bounds it).
pub const MULTI_COMMANDS_MAX: usize = 10_000;
/// Most keys one connection may watch.
pub const WATCHED_KEYS_MAX: usize = 10_000;

/// What the server tells a session (the shell implements it).
pub trait Server {
    /// INFO's text for the sections asked for (empty: the default ones).
    fn info(&self, sections: &[Vec<u8>], session: &Session) -> String;
    /// CLIENT LIST's text, asked by `session`'s connection.
    fn client_list(&self, session: &Session) -> String;
    /// CLIENT INFO's line for this connection (without the newline).
    fn client_info(&self, session: &Session) -> String;
    /// This node's clock: (seconds, microseconds).
    fn time(&self) -> (u64, u64);
    /// "master" on the Raft leader, "replica" elsewhere.
    fn role(&self) -> &'static str;
}

/// What the shell does with a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing (an empty request).
    None,
    Reply(Reply),
    /// Reply, then close the connection (QUIT).
    ReplyAndClose(Reply),
    /// A keyspace read (checked): run it on the shards; where, as far
    /// as the session saw while checking it.
    Read(Args, ReadRoute),
    /// A keyspace write (checked): through the log.
    Write(Args),
    /// WATCH: take tokens for these keys, hand them to `watched`, reply OK.
    Watch(Vec<Vec<u8>>),
    /// EXEC: one log entry. The log's reply is nil (a watched key
    /// changed) or one reply per command. The connection's own commands
    /// (CLIENT SETNAME, ...) and the keyspace commands that fail their
    /// argument checks (`local`, with their positions) are answered only
    /// once that reply shows the transaction ran, their replies put in at
    /// their positions (`Session::finish_exec`): a transaction a WATCH
    /// aborted runs none of them, as in Redis. Until then the connection handles
    /// nothing after the EXEC, which must see their effects.
    Exec {
        watches: Vec<Watch>,
        commands: Vec<Args>,
        local: Vec<(usize, Args)>,
    },
}

/// What a read is and where it runs, found while the session checked the
/// command, so the shell need not look the command up again nor hash its
/// keys again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRoute {
    /// The command's spec (`command::lookup` of its arguments).
    pub spec: &'static Spec,
    /// Every key in this slot: one shard. `None`: keys in several slots,
    /// no key, or every slot: the shell works out the shards from the
    /// command.
    pub slot: Option<u16>,
}

impl ReadRoute {
    pub fn of(spec: &'static Spec, command: &Command<'_>) -> ReadRoute {
        ReadRoute {
            spec,
            slot: Self::one_slot(command),
        }
    }

    /// A read's route from its arguments alone (tests, tools): `None`
    /// for a command that fails its checks or is not a keyspace read.
    pub fn checked(args: &[Vec<u8>]) -> Option<ReadRoute> {
        let spec = command::lookup(args).ok()?;
        let command = Command::parse(spec, args).ok()?;
        (spec.kind != Kind::Connection && !command.is_write()).then(|| Self::of(spec, &command))
    }

    fn one_slot(command: &Command<'_>) -> Option<u16> {
        let Route::Keys(keys) = command.route() else {
            return None;
        };
        let (first, rest) = keys.split_first()?;
        let slot = key_slot(first);
        rest.iter().all(|key| key_slot(key) == slot).then_some(slot)
    }
}

#[derive(Debug, Default)]
struct Multi {
    /// Queued commands: keyspace ones (`None`) or a connection command's
    /// arguments, answered at EXEC.
    queued: Vec<(Args, Kind)>,
    /// A command was refused while queueing: EXEC aborts.
    dirty: bool,
}

#[derive(Debug)]
pub struct Session {
    id: u64,
    name: Option<Vec<u8>>,
    protocol: Protocol,
    multi: Option<Multi>,
    watches: Vec<Watch>,
    /// READONLY: reads are served from this node's state without a
    /// ReadIndex barrier (possibly stale on a follower).
    local_reads: bool,
    /// The last command's name (CLIENT LIST's cmd=).
    last_command: &'static str,
}

fn eq(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

fn bulk_str(text: &str) -> Reply {
    Reply::Bulk(text.as_bytes().to_vec())
}

impl Session {
    pub fn new(id: u64) -> Session {
        Session {
            id,
            name: None,
            protocol: Protocol::Resp2,
            multi: None,
            watches: Vec::new(),
            local_reads: false,
            last_command: "NULL",
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn name(&self) -> Option<&[u8]> {
        self.name.as_deref()
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    pub fn local_reads(&self) -> bool {
        self.local_reads
    }

    pub fn in_multi(&self) -> bool {
        self.multi.is_some()
    }

    pub fn queued(&self) -> usize {
        self.multi.as_ref().map_or(0, |m| m.queued.len())
    }

    pub fn watched(&self) -> usize {
        self.watches.len()
    }

    pub fn last_command(&self) -> &'static str {
        self.last_command
    }

    /// The next request's action.
    pub fn handle(&mut self, args: Args, server: &dyn Server) -> Action {
        if args.is_empty() {
            return Action::None;
        }
        let spec = match command::lookup(&args) {
            Ok(spec) => spec,
            Err(error) => {
                if let Some(multi) = &mut self.multi {
                    multi.dirty = true;
                }
                if eq(&args[0], "exec") && self.multi.is_some() {
                    // Redis rejects a malformed EXEC by aborting the
                    // transaction with the rejection's text.
                    self.discard();
                    return Action::Reply(exec_abort(&error));
                }
                return Action::Reply(error);
            }
        };
        self.last_command = spec.name;
        let queues = !matches!(
            spec.name,
            "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
        );
        if let Some(multi) = self.multi.as_mut().filter(|_| queues) {
            if multi.queued.len() >= MULTI_COMMANDS_MAX {
                multi.dirty = true;
                return Action::Reply(Reply::error_owned(format!(
                    "ERR a transaction holds at most {MULTI_COMMANDS_MAX} commands"
                )));
            }
            if !multi.dirty {
                multi.queued.push((args, spec.kind));
            }
            return Action::Reply(Reply::status("QUEUED"));
        }
        match spec.kind {
            Kind::Read | Kind::Write => match Command::parse(spec, &args) {
                Err(error) => Action::Reply(error),
                Ok(command) if command.is_write() => Action::Write(args),
                Ok(command) => {
                    let route = ReadRoute::of(spec, &command);
                    Action::Read(args, route)
                }
            },
            Kind::Connection => self.connection_command(spec, &args, server),
        }
    }

    fn connection_command(
        &mut self,
        spec: &'static Spec,
        args: &[Vec<u8>],
        server: &dyn Server,
    ) -> Action {
        match spec.name {
            "multi" => {
                if self.multi.is_some() {
                    return Action::Reply(Reply::error("ERR MULTI calls can not be nested"));
                }
                self.multi = Some(Multi::default());
                Action::Reply(Reply::ok())
            }
            "exec" => self.exec(server),
            "discard" => {
                if self.multi.is_none() {
                    return Action::Reply(Reply::error("ERR DISCARD without MULTI"));
                }
                self.discard();
                Action::Reply(Reply::ok())
            }
            "watch" => {
                if self.multi.is_some() {
                    return Action::Reply(Reply::error("ERR WATCH inside MULTI is not allowed"));
                }
                let mut keys: Vec<Vec<u8>> = Vec::new();
                for key in &args[1..] {
                    if !self.watches.iter().any(|w| &w.key == key) && !keys.contains(key) {
                        keys.push(key.clone());
                    }
                }
                if self.watches.len() + keys.len() > WATCHED_KEYS_MAX {
                    return Action::Reply(Reply::error_owned(format!(
                        "ERR a connection watches at most {WATCHED_KEYS_MAX} keys"
                    )));
                }
                if keys.is_empty() {
                    return Action::Reply(Reply::ok());
                }
                Action::Watch(keys)
            }
            "quit" => Action::ReplyAndClose(Reply::ok()),
            _ => Action::Reply(self.answer(spec, args, server)),
        }
    }

    /// Tokens for the keys of a WATCH (in its order); then reply OK.
    pub fn add_watches(&mut self, watches: Vec<Watch>) {
        for watch in watches {
            if !self.watches.iter().any(|w| w.key == watch.key) {
                self.watches.push(watch);
            }
        }
    }

    fn discard(&mut self) {
        self.multi = None;
        self.watches.clear();
    }

    fn exec(&mut self, server: &dyn Server) -> Action {
        let Some(multi) = self.multi.take() else {
            return Action::Reply(Reply::error("ERR EXEC without MULTI"));
        };
        let watches = std::mem::take(&mut self.watches);
        if multi.dirty {
            return Action::Reply(Reply::error(
                "EXECABORT Transaction discarded because of previous errors.",
            ));
        }
        let mut commands = Vec::new();
        let mut local = Vec::new();
        for (position, (args, kind)) in multi.queued.into_iter().enumerate() {
            match kind {
                Kind::Read | Kind::Write if passes_checks(&args) => commands.push(args),
                // A keyspace command that fails its argument checks is
                // answered its error here, in its place, as Redis's EXEC
                // answers it: it changes nothing whatever the keyspace
                // holds. Kept out of the log, it leaves every command
                // there one that parses, so a replica whose parse refuses
                // one knows a newer release wrote it (`apply_route`).
                Kind::Read | Kind::Write | Kind::Connection => local.push((position, args)),
            }
        }
        if commands.is_empty() && watches.is_empty() {
            // Nothing can abort it: it runs here and now.
            return Action::Reply(self.finish_exec(Reply::Array(Vec::new()), local, server));
        }
        Action::Exec {
            watches,
            commands,
            local,
        }
    }

    /// EXEC's reply from the log's (`Action::Exec`): if the transaction
    /// ran, the connection's own commands run now, in their order, and
    /// their replies go in at their positions. If it did not (nil: a
    /// watched key changed; or an error), none of them runs.
    pub fn finish_exec(
        &mut self,
        logged: Reply,
        local: Vec<(usize, Args)>,
        server: &dyn Server,
    ) -> Reply {
        if !matches!(logged, Reply::Array(_)) {
            return logged;
        }
        let answered = local
            .into_iter()
            .map(|(position, args)| {
                let spec = command::lookup(&args).expect("checked when queued");
                let reply = match spec.kind {
                    Kind::Connection => self.answer(spec, &args, server),
                    Kind::Read | Kind::Write => Command::parse(spec, &args)
                        .expect_err("only a keyspace command that fails its checks stays local"),
                };
                (position, reply)
            })
            .collect();
        Self::merge_exec(logged, answered)
    }

    /// The log's replies with the connection's own ones put back at their
    /// positions.
    fn merge_exec(logged: Reply, local: Vec<(usize, Reply)>) -> Reply {
        let Reply::Array(replies) = logged else {
            unreachable!("merged only into a transaction that ran");
        };
        let total = replies.len() + local.len();
        let mut logged = replies.into_iter();
        let mut local = local.into_iter().peekable();
        let merged = (0..total)
            .map(|position| match local.peek() {
                Some((at, _)) if *at == position => local.next().expect("peeked").1,
                _ => logged.next().unwrap_or(Reply::Null),
            })
            .collect();
        Reply::Array(merged)
    }

    /// A connection command answered here (also inside EXEC).
    fn answer(&mut self, spec: &'static Spec, args: &[Vec<u8>], server: &dyn Server) -> Reply {
        match spec.name {
            "ping" => match args.len() {
                1 => Reply::status("PONG"),
                2 => Reply::bulk(&args[1]),
                _ => command::arity_error("ping"),
            },
            "echo" => Reply::bulk(&args[1]),
            "select" => match parse_i64(&args[1]) {
                None => Reply::not_integer(),
                Some(db) if i32::try_from(db).is_err() => Reply::error(
                    "ERR value is out of range, value must between -2147483648 and 2147483647",
                ),
                Some(0) => Reply::ok(),
                Some(_) => Reply::error("ERR DB index is out of range"),
            },
            "readonly" => {
                self.local_reads = true;
                Reply::ok()
            }
            "readwrite" => {
                self.local_reads = false;
                Reply::ok()
            }
            "unwatch" => {
                self.watches.clear();
                Reply::ok()
            }
            "reset" => {
                self.multi = None;
                self.watches.clear();
                self.local_reads = false;
                self.protocol = Protocol::Resp2;
                self.name = None;
                Reply::status("RESET")
            }
            "time" => {
                let (seconds, micros) = server.time();
                Reply::Array(vec![
                    bulk_str(&seconds.to_string()),
                    bulk_str(&micros.to_string()),
                ])
            }
            "info" => Reply::Verbatim(server.info(&args[1..], self).into_bytes()),
            "hello" => self.hello(args, server),
            "client|id" => Reply::Integer(self.id as i64),
            "client|getname" => self.name.as_deref().map_or(Reply::Null, Reply::bulk),
            "client|setname" => match self.set_name(&args[2]) {
                Ok(()) => Reply::ok(),
                Err(error) => error,
            },
            "client|info" => {
                Reply::Verbatim(format!("{}\n", server.client_info(self)).into_bytes())
            }
            "client|list" => Reply::Verbatim(server.client_list(self).into_bytes()),
            "client|help" => help("CLIENT", CLIENT_HELP),
            "command" => Reply::Array(TABLE.iter().map(command_info).collect()),
            "command|count" => Reply::Integer(TABLE.len() as i64),
            "command|list" => {
                if args.len() > 2 {
                    return Reply::syntax();
                }
                Reply::Array(TABLE.iter().map(|s| bulk_str(s.name)).collect())
            }
            "command|info" => {
                if args.len() == 2 {
                    return Reply::Array(TABLE.iter().map(command_info).collect());
                }
                Reply::Array(
                    args[2..]
                        .iter()
                        .map(|n| find_full(n).map_or(Reply::Null, command_info))
                        .collect(),
                )
            }
            "command|docs" => {
                let specs: Vec<&Spec> = if args.len() == 2 {
                    TABLE.iter().collect()
                } else {
                    args[2..].iter().filter_map(|n| find_full(n)).collect()
                };
                Reply::Map(
                    specs
                        .into_iter()
                        .map(|s| (bulk_str(s.name), command_docs(s)))
                        .collect(),
                )
            }
            "command|help" => help("COMMAND", COMMAND_HELP),
            other => unreachable!("{other} is not a connection command"),
        }
    }

    /// Redis's clientSetName: empty clears; only '!'..='~'.
    fn set_name(&mut self, name: &[u8]) -> Result<(), Reply> {
        if name.is_empty() {
            self.name = None;
            return Ok(());
        }
        if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
            return Err(Reply::error(
                "ERR Client names cannot contain spaces, newlines or special characters.",
            ));
        }
        self.name = Some(name.to_vec());
        Ok(())
    }

    fn hello(&mut self, args: &[Vec<u8>], server: &dyn Server) -> Reply {
        let mut version = None;
        let mut next = 1;
        if args.len() >= 2 {
            match parse_i64(&args[1]) {
                None => {
                    return Reply::error("ERR Protocol version is not an integer or out of range")
                }
                Some(v) if !(2..=3).contains(&v) => {
                    return Reply::error("NOPROTO unsupported protocol version")
                }
                Some(v) => version = Some(v),
            }
            next = 2;
        }
        let mut name = None;
        let mut j = next;
        while j < args.len() {
            let more = args.len() - 1 - j;
            if eq(&args[j], "auth") && more >= 2 {
                // Keel KV has Redis's default user without a password:
                // "default" with any password authenticates.
                if !eq(&args[j + 1], "default") {
                    return Reply::error(
                        "WRONGPASS invalid username-password pair or user is disabled.",
                    );
                }
                j += 3;
            } else if eq(&args[j], "setname") && more >= 1 {
                name = Some(&args[j + 1]);
                j += 2;
            } else {
                return Reply::error_owned(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&args[j])
                ));
            }
        }
        if let Some(name) = name {
            if let Err(error) = self.set_name(name) {
                return error;
            }
        }
        if let Some(version) = version {
            self.protocol = if version == 3 {
                Protocol::Resp3
            } else {
                Protocol::Resp2
            };
        }
        Reply::Map(vec![
            (bulk_str("server"), bulk_str("redis")),
            (bulk_str("version"), bulk_str(REDIS_VERSION)),
            (bulk_str("proto"), Reply::Integer(self.protocol.version())),
            (bulk_str("id"), Reply::Integer(self.id as i64)),
            (bulk_str("mode"), bulk_str("standalone")),
            (bulk_str("role"), bulk_str(server.role())),
            (bulk_str("modules"), Reply::Array(Vec::new())),
        ])
    }
}

/// A queued keyspace command passes `Command::parse` (it was looked up
/// when queued).
fn passes_checks(args: &[Vec<u8>]) -> bool {
    let spec = command::lookup(args).expect("checked when queued");
    Command::parse(spec, args).is_ok()
}

fn exec_abort(error: &Reply) -> Reply {
    let Reply::Error(text) = error else {
        unreachable!("an error")
    };
    let text = text.strip_prefix("ERR ").unwrap_or(text);
    Reply::error_owned(format!(
        "EXECABORT Transaction discarded because of: {text}"
    ))
}

/// A spec by its full name (`get`, `client|id`).
fn find_full(name: &[u8]) -> Option<&'static Spec> {
    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
    match name.split_once('|') {
        None => command::spec_named(name.as_bytes()),
        Some((base, _)) => command::spec_named(base.as_bytes())?
            .subcommands
            .iter()
            .find(|s| s.name == name),
    }
}

const CLIENT_HELP: &[&str] = &[
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "LIST",
    "    Return information about client connections to this node.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
];

const COMMAND_HELP: &[&str] = &[
    "(no subcommand)",
    "    Return details about all commands Keel KV serves.",
    "COUNT",
    "    Return the number of commands.",
    "DOCS [<command-name> ...]",
    "    Return documentation of the given commands, or of all.",
    "INFO [<command-name> ...]",
    "    Return details about the given commands, or all.",
    "LIST",
    "    Return the command names.",
];

fn help(name: &str, lines: &[&'static str]) -> Reply {
    let mut replies = vec![Reply::Status(Cow::Owned(format!(
        "{name} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    )))];
    replies.extend(lines.iter().map(|l| Reply::status(l)));
    replies.push(Reply::status("HELP"));
    replies.push(Reply::status("    Prints this help."));
    Reply::Array(replies)
}

/// COMMAND INFO's 10 fields for a spec.
fn command_info(spec: &'static Spec) -> Reply {
    Reply::Array(vec![
        bulk_str(spec.name),
        Reply::Integer(spec.arity as i64),
        Reply::Set(spec.flags.iter().map(|f| Reply::status(f)).collect()),
        Reply::Integer(spec.keys.first as i64),
        Reply::Integer(spec.keys.last as i64),
        Reply::Integer(spec.keys.step as i64),
        Reply::Set(vec![Reply::Status(Cow::Owned(format!("@{}", spec.group)))]),
        Reply::Set(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(spec.subcommands.iter().map(command_info).collect()),
    ])
}

/// COMMAND DOCS's map for a spec: summary, since, group (what redis-cli
/// reads for its help), subcommands.
fn command_docs(spec: &'static Spec) -> Reply {
    let mut fields = vec![
        (bulk_str("summary"), bulk_str(spec.summary)),
        (bulk_str("since"), bulk_str(spec.since)),
        (bulk_str("group"), bulk_str(spec.group)),
    ];
    if !spec.subcommands.is_empty() {
        fields.push((
            bulk_str("subcommands"),
            Reply::Map(
                spec.subcommands
                    .iter()
                    .map(|s| (bulk_str(s.name), command_docs(s)))
                    .collect(),
            ),
        ));
    }
    Reply::Map(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;

    impl Server for Fixed {
        fn info(&self, _: &[Vec<u8>], _: &Session) -> String {
            "# Server\r\n".into()
        }
        fn client_list(&self, _: &Session) -> String {
            String::new()
        }
        fn client_info(&self, _: &Session) -> String {
            "id=7".into()
        }
        fn time(&self) -> (u64, u64) {
            (1, 2)
        }
        fn role(&self) -> &'static str {
            "master"
        }
    }

    fn args(words: &[&str]) -> Args {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    fn run(session: &mut Session, words: &[&str]) -> Action {
        session.handle(args(words), &Fixed)
    }

    fn reply(session: &mut Session, words: &[&str]) -> Reply {
        match run(session, words) {
            Action::Reply(reply) => reply,
            other => panic!("{words:?}: {other:?}"),
        }
    }

    /// Found by tests/kv/test_redis_random_diff.py (seed 537): a CLIENT
    /// SETNAME queued in a transaction that a WATCH aborted renamed the
    /// connection; in Redis nothing of an aborted transaction runs.
    #[test]
    fn a_transaction_aborted_by_watch_runs_none_of_its_connection_commands() {
        // WATCH w, MULTI, CLIENT SETNAME `name`, EXEC: the EXEC's
        // connection commands, waiting for the log's reply.
        let watched_rename = |s: &mut Session, name: &str| {
            s.add_watches(vec![Watch {
                key: b"w".to_vec(),
                token: 3,
                watched_ms: 9,
            }]);
            assert_eq!(reply(s, &["MULTI"]), Reply::ok());
            let queued = reply(s, &["CLIENT", "SETNAME", name]);
            assert_eq!(queued, Reply::status("QUEUED"));
            let Action::Exec { local, .. } = run(s, &["EXEC"]) else {
                panic!("a watched EXEC goes to the log")
            };
            local
        };
        let mut s = Session::new(7);
        assert_eq!(reply(&mut s, &["CLIENT", "SETNAME", "kept"]), Reply::ok());
        let local = watched_rename(&mut s, "lost");
        assert_eq!(reply(&mut s, &["CLIENT", "GETNAME"]), Reply::bulk(b"kept"));
        let aborted = s.finish_exec(Reply::NullArray, local, &Fixed);
        assert_eq!(aborted, Reply::NullArray);
        assert_eq!(reply(&mut s, &["CLIENT", "GETNAME"]), Reply::bulk(b"kept"));

        // The same transaction, run: the name changes when its reply comes.
        let local = watched_rename(&mut s, "new");
        let ran = s.finish_exec(Reply::Array(Vec::new()), local, &Fixed);
        assert_eq!(ran, Reply::Array(vec![Reply::ok()]));
        assert_eq!(reply(&mut s, &["CLIENT", "GETNAME"]), Reply::bulk(b"new"));
    }

    #[test]
    fn a_transaction_queues_then_goes_to_the_log_with_its_watches_and_local_replies() {
        let mut s = Session::new(7);
        assert_eq!(
            run(&mut s, &["WATCH", "w", "w"]),
            Action::Watch(vec![b"w".to_vec()])
        );
        s.add_watches(vec![Watch {
            key: b"w".to_vec(),
            token: 3,
            watched_ms: 9,
        }]);
        assert_eq!(reply(&mut s, &["MULTI"]), Reply::ok());
        assert_eq!(reply(&mut s, &["SET", "w", "1"]), Reply::status("QUEUED"));
        assert_eq!(reply(&mut s, &["PING"]), Reply::status("QUEUED"));
        assert_eq!(reply(&mut s, &["GET", "w"]), Reply::status("QUEUED"));
        let Action::Exec {
            watches,
            commands,
            local,
        } = run(&mut s, &["EXEC"])
        else {
            panic!("EXEC goes to the log")
        };
        assert_eq!(watches.len(), 1);
        assert_eq!(commands.len(), 2);
        assert_eq!(local, vec![(1, vec![b"PING".to_vec()])]);
        let logged = Reply::Array(vec![Reply::ok(), Reply::bulk(b"1")]);
        let merged = s.finish_exec(logged, local, &Fixed);
        assert_eq!(
            merged,
            Reply::Array(vec![Reply::ok(), Reply::status("PONG"), Reply::bulk(b"1")])
        );
        assert_eq!(
            s.finish_exec(Reply::NullArray, Vec::new(), &Fixed),
            Reply::NullArray
        );
        assert_eq!(s.watched(), 0, "EXEC forgets the watches");
    }

    #[test]
    fn a_queued_command_that_fails_its_checks_is_answered_in_place_and_never_logged() {
        let syntax = Reply::error("ERR syntax error");
        let mut s = Session::new(7);
        assert_eq!(reply(&mut s, &["MULTI"]), Reply::ok());
        for words in [
            &["SET", "a", "1"][..],
            &["SET", "b", "2", "NX", "XX"],
            &["INCRBY", "a", "x"],
            &["GET", "a"],
        ] {
            assert_eq!(reply(&mut s, words), Reply::status("QUEUED"), "{words:?}");
        }
        let Action::Exec {
            commands, local, ..
        } = run(&mut s, &["EXEC"])
        else {
            panic!("EXEC goes to the log")
        };
        assert_eq!(
            commands,
            vec![args(&["SET", "a", "1"]), args(&["GET", "a"])]
        );
        let positions: Vec<usize> = local.iter().map(|(at, _)| *at).collect();
        assert_eq!(positions, [1, 2]);
        let logged = Reply::Array(vec![Reply::ok(), Reply::bulk(b"1")]);
        let merged = s.finish_exec(logged, local, &Fixed);
        let expected = vec![
            Reply::ok(),
            syntax.clone(),
            Reply::not_integer(),
            Reply::bulk(b"1"),
        ];
        assert_eq!(merged, Reply::Array(expected));

        // Nothing left to log and nothing watched: answered at once.
        assert_eq!(reply(&mut s, &["MULTI"]), Reply::ok());
        assert_eq!(
            reply(&mut s, &["SET", "b", "2", "EX", "0"]),
            Reply::status("QUEUED")
        );
        let Action::Reply(Reply::Array(replies)) = run(&mut s, &["EXEC"]) else {
            panic!("an EXEC of refused commands alone needs no log")
        };
        assert_eq!(replies.len(), 1);
        assert!(replies[0].is_error(), "{replies:?}");
    }

    #[test]
    fn a_refused_command_aborts_the_transaction_and_exec_arity_names_it() {
        let mut s = Session::new(1);
        reply(&mut s, &["MULTI"]);
        assert!(reply(&mut s, &["GET"]).is_error());
        assert_eq!(reply(&mut s, &["INCR", "x"]), Reply::status("QUEUED"));
        assert_eq!(
            reply(&mut s, &["EXEC"]),
            Reply::error("EXECABORT Transaction discarded because of previous errors.")
        );
        assert!(!s.in_multi());
        reply(&mut s, &["MULTI"]);
        assert_eq!(
            reply(&mut s, &["EXEC", "x"]),
            Reply::error_owned("EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command".into())
        );
        assert_eq!(
            reply(&mut s, &["EXEC"]),
            Reply::error("ERR EXEC without MULTI")
        );
    }

    #[test]
    fn hello_switches_the_protocol_and_names_the_connection() {
        let mut s = Session::new(5);
        let Reply::Map(fields) = reply(&mut s, &["HELLO", "3", "SETNAME", "app"]) else {
            panic!("HELLO answers a map")
        };
        assert!(fields.contains(&(Reply::bulk(b"proto"), Reply::Integer(3))));
        assert!(fields.contains(&(Reply::bulk(b"id"), Reply::Integer(5))));
        assert_eq!(s.protocol(), Protocol::Resp3);
        assert_eq!(s.name(), Some(&b"app"[..]));
        assert_eq!(
            reply(&mut s, &["HELLO", "4"]),
            Reply::error("NOPROTO unsupported protocol version")
        );
        assert_eq!(s.protocol(), Protocol::Resp3);
        assert_eq!(reply(&mut s, &["RESET"]), Reply::status("RESET"));
        assert_eq!(s.protocol(), Protocol::Resp2);
        assert_eq!(reply(&mut s, &["READONLY"]), Reply::ok());
        assert!(s.local_reads());
        assert_eq!(run(&mut s, &["QUIT"]), Action::ReplyAndClose(Reply::ok()));
        assert_eq!(
            run(&mut s, &["GET", "k"]),
            Action::Read(
                vec![b"GET".to_vec(), b"k".to_vec()],
                ReadRoute {
                    spec: command::spec_named(b"get").unwrap(),
                    slot: Some(key_slot(b"k"))
                }
            )
        );
        let slots = ["a", "b", "c"].map(|k| key_slot(k.as_bytes()));
        assert!(slots[0] != slots[1] || slots[1] != slots[2]);
        assert_eq!(
            run(&mut s, &["MGET", "a", "b", "c"]),
            Action::Read(
                args(&["MGET", "a", "b", "c"]),
                ReadRoute {
                    spec: command::spec_named(b"mget").unwrap(),
                    slot: None
                }
            ),
            "keys in several slots"
        );
        assert_eq!(
            run(&mut s, &["MGET", "{t}a", "{t}b"]),
            Action::Read(
                args(&["MGET", "{t}a", "{t}b"]),
                ReadRoute {
                    spec: command::spec_named(b"mget").unwrap(),
                    slot: Some(key_slot(b"t"))
                }
            ),
            "one hash tag: one slot"
        );
        assert!(matches!(
            run(&mut s, &["DBSIZE"]),
            Action::Read(_, ReadRoute { slot: None, .. })
        ));
        assert!(matches!(run(&mut s, &["SET", "k", "v"]), Action::Write(_)));
        assert!(
            reply(&mut s, &["SET", "k", "v", "EX", "0"]).is_error(),
            "argument errors need no log"
        );
    }
}
