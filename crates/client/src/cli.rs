//! A zkCli-compatible command line (Apache ZooKeeper 3.8 `zkCli.sh`).
//!
//! Output text, error messages and exit codes follow `ZooKeeperMain` and
//! the `org.apache.zookeeper.cli` commands of ZooKeeper 3.8.0, so scripts
//! written against zkCli read the same lines. What zkCli prints on stdout
//! goes to `out`; what it prints on stderr ("Created /a", error messages,
//! usage) goes to `err` in [`run_cli_split`], and to `out` as well in
//! [`run_cli`].
//!
//! Deliberate differences from zkCli:
//! - one-shot mode prints only the command's own output (no "Connecting
//!   to ..." banner or connection WATCHER lines) and closes the session
//!   before returning (zkCli leaves it to expire);
//! - `help` prints the usage list and succeeds (zkCli prints it and then
//!   fails with "Command not found: Command not found help", exit 127);
//! - a malformed number (`set -v abc`) is reported as an error with the
//!   NumberFormatException text instead of killing the shell;
//! - dates are printed in UTC;
//! - `setquota`, `listquota`, `delquota` and `reconfig` are not supported;
//! - there is no reconnect: once the connection is lost, commands print
//!   "Not connected" until `connect`.

mod acl;
mod args;
mod format;

use std::collections::HashMap;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::pin::Pin;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use tokio::sync::mpsc::UnboundedReceiver;

pub use acl::parse_acl;
pub use args::{parse_options, split_command_line, Opts};
pub use format::{
    id_to_string, java_date, keeper_message, perm_string, stat_text, validate_path, wrapper_message,
};

use crate::client::{Client, WatchedEvent};
use crate::error::ClientError;
use crate::proto::*;
use format::{java_list, java_sort, validate_create_path};

/// Session timeout the CLI asks for (zkCli's default `-timeout`).
pub const CLI_SESSION_TIMEOUT_MS: u32 = 30_000;
/// zkCli's default `deleteall` batch size.
const DEFAULT_DELETE_BATCH: i32 = 1000;
/// `EphemeralType.TTL`'s maximum TTL (40 bits of milliseconds).
const MAX_TTL_MS: i64 = 0xFF_FFFF_FFFF;

/// Every command zkCli 3.8.0 knows, with the option text its usage list
/// shows (sorted as Java sorts the command names).
const COMMANDS: &[(&str, &str)] = &[
    (
        "addWatch",
        "[-m mode] path # optional mode is one of [PERSISTENT, PERSISTENT_RECURSIVE] - default is PERSISTENT_RECURSIVE",
    ),
    ("addauth", "scheme auth"),
    ("close", ""),
    ("config", "[-c] [-w] [-s]"),
    ("connect", "host:port"),
    ("create", "[-s] [-e] [-c] [-t ttl] path [data] [acl]"),
    ("delete", "[-v version] path"),
    ("deleteall", "path [-b batch size]"),
    ("delquota", "[-n|-b|-N|-B] path"),
    ("get", "[-s] [-w] path"),
    ("getAcl", "[-s] path"),
    ("getAllChildrenNumber", "path"),
    ("getEphemerals", "path"),
    ("history", ""),
    ("listquota", "path"),
    ("ls", "[-s] [-w] [-R] path"),
    ("printwatches", "on|off"),
    ("quit", ""),
    (
        "reconfig",
        "[-s] [-v version] [[-file path] | [-members serverID=host:port1:port2;port3[,...]*]] | [-add serverId=host:port1:port2;port3[,...]]* [-remove serverId[,...]*]",
    ),
    ("redo", "cmdno"),
    ("removewatches", "path [-c|-d|-a] [-l]"),
    ("set", "[-s] [-v version] path data"),
    ("setAcl", "[-s] [-v version] [-R] path acl"),
    ("setquota", "-n|-b|-N|-B val path"),
    ("stat", "[-w] path"),
    ("sync", "path"),
    ("version", ""),
    ("whoami", ""),
];

/// The usage list zkCli prints (on stderr) for an unknown command.
pub fn usage_text() -> String {
    let mut s = String::from(
        "ZooKeeper -server host:port -client-configuration properties-file cmd args\n",
    );
    for (cmd, opts) in COMMANDS {
        s.push('\t');
        s.push_str(cmd);
        s.push(' ');
        s.push_str(opts);
        s.push('\n');
    }
    s
}

/// `CliCommand.getUsageStr()`: "cmd options".
fn usage_of(cmd: &str) -> String {
    let opts = COMMANDS
        .iter()
        .find(|(c, _)| *c == cmd)
        .map(|(_, o)| *o)
        .unwrap_or("");
    format!("{cmd} {opts}")
}

/// Runs zkCli against `server`: one command if `command` is non-empty
/// (returning its exit code), else an interactive session (a rustyline
/// prompt on a terminal, otherwise stdin lines). Everything zkCli would
/// print, on stdout or stderr, is written to `out`. `Err` only when the
/// first connection cannot be established.
pub fn run_cli<'a>(server: &'a str, command: Vec<String>, out: &'a mut dyn Write) -> CliRun<'a> {
    Box::pin(run_with(server, command, Io { out, err: None }))
}

/// A zkCli run as one boxed future: a crate that awaits it sees only `dyn
/// Future`, so the shell and the client it drives compile once, here (an
/// unboxed async fn is compiled again in every crate that awaits it).
pub type CliRun<'a> = Pin<Box<dyn Future<Output = Result<i32, ClientError>> + 'a>>;

/// Like [`run_cli`], with zkCli's stderr output going to `err`.
pub fn run_cli_split<'a>(
    server: &'a str,
    command: Vec<String>,
    out: &'a mut dyn Write,
    err: &'a mut dyn Write,
) -> CliRun<'a> {
    Box::pin(run_with(
        server,
        command,
        Io {
            out,
            err: Some(err),
        },
    ))
}

/// Runs an interactive session that reads its command lines from `input`
/// (what zkCli does when stdin is not a terminal). `err`: as in
/// [`run_cli_split`]; `None` sends that text to `out`.
pub fn run_cli_script<'a>(
    server: &'a str,
    input: &'a mut (dyn AsyncBufRead + Unpin),
    out: &'a mut dyn Write,
    err: Option<&'a mut dyn Write>,
) -> CliRun<'a> {
    Box::pin(run_lines(server, input, Io { out, err }))
}

async fn run_with(server: &str, command: Vec<String>, io: Io<'_>) -> Result<i32, ClientError> {
    if !command.is_empty() {
        let zk = Client::connect(server, CLI_SESSION_TIMEOUT_MS).await?;
        let mut sh = Shell::new(io, server, zk, false);
        sh.process_cmd(command).await;
        sh.shutdown().await;
        return Ok(sh.exit_code);
    }
    if std::io::stdin().is_terminal() {
        run_tty(server, io).await
    } else {
        run_lines(server, tokio::io::BufReader::new(tokio::io::stdin()), io).await
    }
}

async fn start_interactive<'a>(
    server: &str,
    mut io: Io<'a>,
    jline: bool,
) -> Result<Shell<'a>, ClientError> {
    io.outln(&format!("Connecting to {server}"));
    let zk = Client::connect(server, CLI_SESSION_TIMEOUT_MS).await?;
    io.outln("Welcome to ZooKeeper!");
    io.outln(if jline {
        "JLine support is enabled"
    } else {
        "JLine support is disabled"
    });
    let mut sh = Shell::new(io, server, zk, true);
    sh.print_event(&connected_event(KeeperState::SyncConnected));
    Ok(sh)
}

async fn run_lines<R: AsyncBufRead + Unpin>(
    server: &str,
    input: R,
    io: Io<'_>,
) -> Result<i32, ClientError> {
    let mut sh = start_interactive(server, io, false).await?;
    let mut lines = input.lines();
    loop {
        sh.drain_events();
        let line = match lines.next_line().await {
            Ok(Some(l)) => l,
            _ => break,
        };
        if sh.execute_line(&line).await == Flow::Quit {
            break;
        }
    }
    sh.drain_events();
    sh.shutdown().await;
    Ok(sh.exit_code)
}

async fn run_tty(server: &str, io: Io<'_>) -> Result<i32, ClientError> {
    use rustyline::error::ReadlineError;

    let mut rl = rustyline::DefaultEditor::new()
        .map_err(|e| ClientError::Io(std::io::Error::other(e.to_string())))?;
    let mut sh = start_interactive(server, io, true).await?;
    loop {
        sh.drain_events();
        let prompt = sh.prompt();
        let mut read = tokio::task::spawn_blocking(move || {
            let r = rl.readline(&prompt);
            (r, rl)
        });
        // Watch events that arrive while the user sits at the prompt are
        // printed right away, over the prompt line, as zkCli does.
        // (rustyline's ExternalPrinter would redraw the prompt, but in
        // rustyline 14 it stalls pasted input until the next key press.)
        let joined = loop {
            tokio::select! {
                r = &mut read => break r,
                Some(ev) = next_event(&mut sh.events) => {
                    sh.print_event(&ev);
                    sh.io.flush();
                }
            }
        };
        let Ok((result, editor)) = joined else { break };
        rl = editor;
        match result {
            Ok(line) => {
                let _ = rl.add_history_entry(line.as_str());
                if sh.execute_line(&line).await == Flow::Quit {
                    break;
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(_) => break,
        }
    }
    sh.shutdown().await;
    Ok(sh.exit_code)
}

async fn next_event(rx: &mut Option<UnboundedReceiver<WatchedEvent>>) -> Option<WatchedEvent> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

fn connected_event(state: KeeperState) -> WatchedEvent {
    WatchedEvent {
        event_type: EventType::None,
        state,
        path: String::new(),
    }
}

/// zkCli's stdout and stderr.
struct Io<'a> {
    out: &'a mut dyn Write,
    err: Option<&'a mut dyn Write>,
}

impl Io<'_> {
    // Write errors are ignored, as Java's PrintStream does.
    fn out(&mut self, s: &str) {
        let _ = self.out.write_all(s.as_bytes());
    }

    fn outln(&mut self, s: &str) {
        self.out(s);
        self.out("\n");
    }

    fn err(&mut self, s: &str) {
        let w: &mut dyn Write = match self.err.as_mut() {
            Some(e) => &mut **e,
            None => &mut *self.out,
        };
        let _ = w.write_all(s.as_bytes());
    }

    fn errln(&mut self, s: &str) {
        self.err(s);
        self.err("\n");
    }

    fn flush(&mut self) {
        let _ = self.out.flush();
        if let Some(e) = self.err.as_mut() {
            let _ = e.flush();
        }
    }
}

/// A `CliException`: message for stderr and the exit code.
#[derive(Debug)]
struct CliErr {
    msg: String,
    code: i32,
}

impl CliErr {
    fn new(msg: impl Into<String>) -> CliErr {
        CliErr {
            msg: msg.into(),
            code: 1,
        }
    }

    fn zk(e: &ClientError, path: Option<&str>) -> CliErr {
        CliErr::new(wrapper_message(e, path))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Quit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Connected,
    Closed,
    AuthFailed,
}

/// What a subtree walk does at each znode.
enum Visit<'x> {
    Print,
    SetAcl(&'x [Acl], i32),
}

struct Shell<'a> {
    io: Io<'a>,
    host: String,
    zk: Option<Client>,
    state: State,
    events: Option<UnboundedReceiver<WatchedEvent>>,
    print_watches: bool,
    interactive: bool,
    history: HashMap<usize, String>,
    command_count: usize,
    exit_code: i32,
}

fn opts(tokens: &[String], flags: &str, with_arg: &str) -> Result<Opts, CliErr> {
    parse_options(tokens, flags, with_arg).map_err(CliErr::new)
}

fn check_path(path: &str) -> Result<(), CliErr> {
    validate_path(path).map_err(CliErr::new)
}

fn child_path(parent: &str, child: &str) -> String {
    if parent == "/" {
        format!("/{child}")
    } else {
        format!("{parent}/{child}")
    }
}

impl<'a> Shell<'a> {
    fn new(io: Io<'a>, host: &str, zk: Client, interactive: bool) -> Shell<'a> {
        let events = zk.take_events();
        Shell {
            io,
            host: host.to_string(),
            zk: Some(zk),
            state: State::Connected,
            events,
            print_watches: true,
            interactive,
            history: HashMap::new(),
            command_count: 0,
            exit_code: 0,
        }
    }

    fn prompt(&self) -> String {
        let state = match self.state {
            State::Connected if self.alive() => "CONNECTED",
            State::AuthFailed => "AUTH_FAILED",
            _ => "CLOSED",
        };
        format!("[zk: {}({}) {}] ", self.host, state, self.command_count)
    }

    fn alive(&self) -> bool {
        self.state == State::Connected && self.zk.as_ref().is_some_and(|z| z.is_connected())
    }

    fn print_event(&mut self, ev: &WatchedEvent) {
        if self.interactive && self.print_watches {
            self.io.out("\nWATCHER::\n");
            self.io.out(&format!("\n{ev}\n"));
        }
    }

    fn drain_events(&mut self) {
        let mut got = Vec::new();
        if let Some(rx) = self.events.as_mut() {
            while let Ok(ev) = rx.try_recv() {
                got.push(ev);
            }
        }
        for ev in got {
            self.print_event(&ev);
        }
        self.io.flush();
    }

    async fn shutdown(&mut self) {
        if let Some(zk) = self.zk.take() {
            let _ = zk.close().await;
        }
        self.io.flush();
    }

    /// `ZooKeeperMain.executeLine`.
    async fn execute_line(&mut self, line: &str) -> Flow {
        if line.is_empty() {
            return Flow::Continue;
        }
        let words = split_command_line(line);
        if words.is_empty() {
            return Flow::Continue;
        }
        self.history.insert(self.command_count, line.to_string());
        let flow = self.process_cmd(words).await;
        self.command_count += 1;
        self.drain_events();
        flow
    }

    /// `ZooKeeperMain.processCmd`: runs one command, prints a CliException
    /// on stderr and records the exit code.
    async fn process_cmd(&mut self, args: Vec<String>) -> Flow {
        let r = self.process_zk_cmd(args).await;
        let flow = match r {
            Ok(Flow::Quit) => Flow::Quit,
            Ok(Flow::Continue) => {
                self.exit_code = 0;
                Flow::Continue
            }
            Err(e) => {
                self.exit_code = e.code;
                self.io.errln(&e.msg);
                Flow::Continue
            }
        };
        self.io.flush();
        flow
    }

    async fn process_zk_cmd(&mut self, args: Vec<String>) -> Result<Flow, CliErr> {
        let Some(cmd) = args.first().cloned() else {
            self.io.err(&usage_text());
            return Err(CliErr::new("No command entered"));
        };
        if cmd == "help" {
            self.io.err(&usage_text());
            return Ok(Flow::Continue);
        }
        if !COMMANDS.iter().any(|(c, _)| *c == cmd) {
            self.io.err(&usage_text());
            return Err(CliErr {
                msg: format!("Command not found: Command not found {cmd}"),
                code: 127,
            });
        }
        match cmd.as_str() {
            "quit" => {
                self.shutdown().await;
                return Ok(Flow::Quit);
            }
            "redo" if args.len() >= 2 => {
                let i = args::java_decode_int(&args[1]).ok_or_else(|| {
                    CliErr::new(format!(
                        "java.lang.NumberFormatException: For input string: \"{}\"",
                        args[1]
                    ))
                })?;
                if i < 0 || i as usize >= self.command_count {
                    return Err(CliErr::new("Command index out of range"));
                }
                let line = self.history.get(&(i as usize)).cloned().unwrap_or_default();
                let words = split_command_line(&line);
                if words.first().map(String::as_str) == Some("redo") {
                    return Err(CliErr::new("No redoing redos"));
                }
                self.history.insert(self.command_count, line);
                if Box::pin(self.process_cmd(words)).await == Flow::Quit {
                    return Ok(Flow::Quit);
                }
            }
            "history" => {
                let count = self.command_count as i64;
                for i in (count - 10).max(0)..=count {
                    let line = self
                        .history
                        .get(&(i as usize))
                        .cloned()
                        .unwrap_or_else(|| "null".into());
                    self.io.outln(&format!("{i} - {line}"));
                }
            }
            "printwatches" => {
                if args.len() == 1 {
                    let s = if self.print_watches { "on" } else { "off" };
                    self.io.outln(&format!("printwatches is {s}"));
                } else {
                    self.print_watches = args[1] == "on";
                }
            }
            "connect" => {
                let host = args.get(1).cloned().unwrap_or_else(|| self.host.clone());
                self.connect(&host).await;
            }
            _ => {}
        }

        if !self.alive() {
            self.io.outln("Not connected");
            return Ok(Flow::Continue);
        }
        let zk = self.zk.clone().expect("alive implies a client");
        match cmd.as_str() {
            "ls" => self.ls(&zk, args).await?,
            "get" => self.get(&zk, args).await?,
            "set" => self.set(&zk, args).await?,
            "create" => self.create(&zk, args).await?,
            "delete" => self.delete(&zk, args).await?,
            "deleteall" => self.deleteall(&zk, args).await?,
            "stat" => self.stat(&zk, args).await?,
            "getAcl" => self.get_acl(&zk, args).await?,
            "setAcl" => self.set_acl(&zk, args).await?,
            "addauth" => self.addauth(&zk, args).await?,
            "sync" => self.sync(&zk, args).await?,
            "getEphemerals" => self.get_ephemerals(&zk, args).await?,
            "getAllChildrenNumber" => self.get_all_children_number(&zk, args).await?,
            "whoami" => self.whoami(&zk).await?,
            "close" => {
                let _ = zk.close().await;
                self.state = State::Closed;
                self.print_event(&connected_event(KeeperState::Closed));
            }
            "config" => self.config(&zk, args).await?,
            "addWatch" => self.add_watch(&zk, args).await?,
            "removewatches" => self.remove_watches(&zk, args).await?,
            "version" => self.io.outln(&format!(
                "ZooKeeper CLI version: keel-client {}",
                env!("CARGO_PKG_VERSION")
            )),
            "setquota" | "listquota" | "delquota" | "reconfig" => {
                return Err(CliErr::new(format!(
                    "{cmd} is not supported by this client"
                )))
            }
            _ => {}
        }
        Ok(Flow::Continue)
    }

    async fn connect(&mut self, host: &str) {
        if let Some(zk) = self.zk.take() {
            let _ = zk.close().await;
        }
        self.host = host.to_string();
        self.events = None;
        match Client::connect(host, CLI_SESSION_TIMEOUT_MS).await {
            Ok(zk) => {
                self.events = zk.take_events();
                self.zk = Some(zk);
                self.state = State::Connected;
                self.print_event(&connected_event(KeeperState::SyncConnected));
            }
            Err(e) => {
                self.state = State::Closed;
                self.io.errln(&keeper_message(&e, None));
            }
        }
    }

    /// zkCli's `retainCompatibility` for `cmd path watch`: warns, turns the
    /// third word into `-w` (when `rewrite`) and parses again.
    fn retain_compat(
        &mut self,
        tokens: &mut [String],
        o: Opts,
        flags: &str,
        with_arg: &str,
        warning: &str,
        rewrite: bool,
    ) -> Result<Opts, CliErr> {
        if o.args.len() <= 2 {
            return Ok(o);
        }
        if rewrite {
            tokens[2] = "-w".into();
        }
        self.io.errln(warning);
        opts(tokens, flags, with_arg)
    }

    async fn ls(&mut self, zk: &Client, mut tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "?swR", "")?;
        let o = self.retain_compat(
            &mut tokens,
            o,
            "?swR",
            "",
            "'ls path [watch]' has been deprecated. Please use 'ls [-w] path' instead.",
            true,
        )?;
        if o.args.len() < 2 {
            return Err(CliErr::new(usage_of("ls")));
        }
        let path = o.args[1].clone();
        let watch = o.has('w');
        check_path(&path)?;
        if o.has('R') {
            return self.visit_subtree(zk, &path, watch, Visit::Print).await;
        }
        let (mut children, stat) = if o.has('s') {
            let (c, s) = zk
                .get_children2(&path, watch)
                .await
                .map_err(|e| CliErr::zk(&e, Some(&path)))?;
            (c, Some(s))
        } else {
            let c = zk
                .get_children(&path, watch)
                .await
                .map_err(|e| CliErr::zk(&e, Some(&path)))?;
            (c, None)
        };
        java_sort(&mut children);
        self.io.outln(&java_list(&children));
        if let Some(s) = stat {
            self.io.out(&stat_text(&s));
        }
        Ok(())
    }

    /// `ZKUtil.visitSubTreeDFS`: the root, then each node's sorted children
    /// before descending into them.
    async fn visit_subtree(
        &mut self,
        zk: &Client,
        root: &str,
        watch: bool,
        visit: Visit<'_>,
    ) -> Result<(), CliErr> {
        zk.get_data(root, watch)
            .await
            .map_err(|e| CliErr::zk(&e, Some(root)))?;
        self.visit_one(zk, root, &visit).await;
        let mut stack = vec![root.to_string()];
        while let Some(p) = stack.pop() {
            let mut children = match zk.get_children(&p, watch).await {
                Ok(c) => c,
                Err(ClientError::Zk(ErrorCode::NoNode)) => continue,
                Err(e) => return Err(CliErr::zk(&e, Some(&p))),
            };
            java_sort(&mut children);
            let paths: Vec<String> = children.iter().map(|c| child_path(&p, c)).collect();
            for cp in &paths {
                self.visit_one(zk, cp, &visit).await;
            }
            stack.extend(paths.into_iter().rev());
        }
        Ok(())
    }

    async fn visit_one(&mut self, zk: &Client, path: &str, visit: &Visit<'_>) {
        match visit {
            Visit::Print => self.io.outln(path),
            Visit::SetAcl(acl, version) => {
                let r = if acl.is_empty() {
                    Err((ClientError::Zk(ErrorCode::InvalidAcl), None))
                } else {
                    zk.set_acl(path, acl, *version)
                        .await
                        .map(|_| ())
                        .map_err(|e| (e, Some(path)))
                };
                if let Err((e, p)) = r {
                    // SetAclCommand prints these without a newline.
                    self.io.out(&keeper_message(&e, p));
                }
            }
        }
    }

    async fn get(&mut self, zk: &Client, mut tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "sw", "")?;
        if o.args.len() < 2 {
            return Err(CliErr::new(usage_of("get")));
        }
        let o = self.retain_compat(
            &mut tokens,
            o,
            "sw",
            "",
            "'get path [watch]' has been deprecated. Please use 'get [-s] [-w] path' instead.",
            true,
        )?;
        let path = o.args[1].clone();
        check_path(&path)?;
        let (data, stat) = zk
            .get_data(&path, o.has('w'))
            .await
            .map_err(|e| CliErr::zk(&e, Some(&path)))?;
        match data {
            Some(d) => self.io.outln(&String::from_utf8_lossy(&d)),
            None => self.io.outln("null"),
        }
        if o.has('s') {
            self.io.out(&stat_text(&stat));
        }
        Ok(())
    }

    async fn set(&mut self, zk: &Client, tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "s", "v")?;
        if o.args.len() < 3 {
            return Err(CliErr::new(usage_of("set")));
        }
        let path = o.args[1].clone();
        let version = match o.value('v') {
            Some(v) => args::parse_java_int(v).map_err(CliErr::new)?,
            None => -1,
        };
        check_path(&path)?;
        let stat = zk
            .set_data(&path, o.args[2].as_bytes(), version)
            .await
            .map_err(|e| CliErr::zk(&e, Some(&path)))?;
        if o.has('s') {
            self.io.out(&stat_text(&stat));
        }
        Ok(())
    }

    async fn create(&mut self, zk: &Client, tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "esc", "t")?;
        if o.args.len() < 2 {
            return Err(CliErr::new(usage_of("create")));
        }
        let (has_e, has_s, has_c, has_t) = (o.has('e'), o.has('s'), o.has('c'), o.has('t'));
        if has_c && (has_e || has_s) {
            return Err(CliErr::new(
                "-c cannot be combined with -s or -e. Containers cannot be ephemeral or sequential.",
            ));
        }
        let ttl = if has_t {
            o.value('t')
                .unwrap_or("")
                .parse::<i64>()
                .map_err(|_| CliErr::new("-t argument must be a long value"))?
        } else {
            0
        };
        if has_t && has_e {
            return Err(CliErr::new("TTLs cannot be used with Ephemeral znodes"));
        }
        if has_t && has_c {
            return Err(CliErr::new("TTLs cannot be used with Container znodes"));
        }
        let mode = match (has_e, has_s, has_c, has_t) {
            (true, true, _, _) => CreateMode::EphemeralSequential,
            (true, false, _, _) => CreateMode::Ephemeral,
            (false, true, _, true) => CreateMode::PersistentSequentialWithTtl,
            (false, true, _, false) => CreateMode::PersistentSequential,
            (false, false, true, _) => CreateMode::Container,
            (false, false, false, true) => CreateMode::PersistentWithTtl,
            (false, false, false, false) => CreateMode::Persistent,
        };
        if has_t && (ttl <= 0 || ttl > MAX_TTL_MS) {
            return Err(CliErr::new(format!(
                "ttl must be positive and cannot be larger than: {MAX_TTL_MS}"
            )));
        }
        let path = o.args[1].clone();
        let data = o.args.get(2).map(|d| d.as_bytes().to_vec());
        let acl = match o.args.get(3) {
            Some(a) => {
                let (acl, warnings) = parse_acl(a);
                for w in warnings {
                    self.io.errln(&w);
                }
                acl
            }
            None => crate::open_acl_unsafe(),
        };
        validate_create_path(&path, mode.is_sequential()).map_err(CliErr::new)?;
        if acl.is_empty() {
            // ZooKeeper.create validates the ACL before sending anything.
            let e = ClientError::Zk(ErrorCode::InvalidAcl);
            self.io.errln(&keeper_message(&e, None));
            return Err(CliErr::zk(&e, None));
        }
        let req = if has_t {
            Request::CreateTtl(CreateTtlRequest {
                path: path.clone(),
                data,
                acl,
                flags: mode.flags(),
                ttl,
            })
        } else {
            let cr = CreateRequest {
                path: path.clone(),
                data,
                acl,
                flags: mode.flags(),
            };
            if mode.is_container() {
                Request::CreateContainer(cr)
            } else {
                Request::Create(cr)
            }
        };
        let result = match zk.request(req).await {
            Ok((h, _)) if h.err != 0 => Err(ClientError::from_code(h.err)),
            Ok((_, Response::Create(p))) | Ok((_, Response::Create2(p, _))) => Ok(p),
            Ok((_, other)) => Err(ClientError::Protocol(format!(
                "unexpected create response {other:?}"
            ))),
            Err(e) => Err(e),
        };
        match result {
            Ok(p) => {
                self.io.errln(&format!("Created {p}"));
                Ok(())
            }
            Err(e) => {
                match e {
                    ClientError::Zk(ErrorCode::EphemeralOnLocalSession) => self
                        .io
                        .errln("Unable to create ephemeral node on a local session"),
                    ClientError::Zk(ErrorCode::InvalidAcl) => {
                        self.io.errln(&keeper_message(&e, Some(&path)))
                    }
                    _ => {}
                }
                Err(CliErr::zk(&e, Some(&path)))
            }
        }
    }

    async fn delete(&mut self, zk: &Client, mut tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "", "v")?;
        if o.args.len() < 2 {
            return Err(CliErr::new(usage_of("delete")));
        }
        let o = self.retain_compat(
            &mut tokens,
            o,
            "",
            "v",
            "'delete path [version]' has been deprecated. Please use 'delete [-v version] path' instead.",
            false,
        )?;
        let path = o.args[1].clone();
        let version = match o.value('v') {
            Some(v) => args::parse_java_int(v).map_err(CliErr::new)?,
            None => -1,
        };
        check_path(&path)?;
        zk.delete(&path, version)
            .await
            .map_err(|e| CliErr::zk(&e, Some(&path)))
    }

    async fn deleteall(&mut self, zk: &Client, tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "", "b")?;
        if o.args.len() < 2 {
            return Err(CliErr::new(usage_of("deleteall")));
        }
        let batch = match o.value('b') {
            Some(b) => args::parse_java_int(b)
                .map_err(|_| CliErr::new("-b argument must be an int value"))?,
            None => DEFAULT_DELETE_BATCH,
        };
        let path = o.args[1].clone();
        check_path(&path)?;
        // ZKUtil.listSubTreeBFS
        let mut tree = vec![path.clone()];
        let mut next = 0;
        while next < tree.len() {
            let node = tree[next].clone();
            next += 1;
            let children = zk
                .get_children(&node, false)
                .await
                .map_err(|e| CliErr::zk(&e, Some(&node)))?;
            tree.extend(children.iter().map(|c| child_path(&node, c)));
        }
        // Leaves first, root last.
        tree.reverse();
        let mut success = true;
        if batch > 0 {
            for chunk in tree.chunks(batch as usize) {
                let ops = chunk
                    .iter()
                    .map(|p| {
                        MultiOp::Delete(DeleteRequest {
                            path: p.clone(),
                            version: -1,
                        })
                    })
                    .collect();
                match zk.multi(ops).await {
                    Ok(results) if crate::client::multi_error(&results).is_none() => {}
                    _ => {
                        success = false;
                        break;
                    }
                }
            }
        } else {
            for p in &tree {
                zk.delete(p, -1)
                    .await
                    .map_err(|e| CliErr::zk(&e, Some(p)))?;
            }
        }
        if !success {
            self.io
                .errln("Failed to delete some node(s) in the subtree!");
        }
        Ok(())
    }

    async fn stat(&mut self, zk: &Client, mut tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "w", "")?;
        if o.args.len() < 2 {
            return Err(CliErr::new(usage_of("stat")));
        }
        let o = self.retain_compat(
            &mut tokens,
            o,
            "w",
            "",
            "'stat path [watch]' has been deprecated. Please use 'stat [-w] path' instead.",
            true,
        )?;
        let path = o.args[1].clone();
        check_path(&path)?;
        match zk.exists(&path, o.has('w')).await {
            Ok(Some(s)) => {
                self.io.out(&stat_text(&s));
                Ok(())
            }
            Ok(None) => Err(CliErr::zk(&ClientError::Zk(ErrorCode::NoNode), Some(&path))),
            Err(e) => Err(CliErr::zk(&e, Some(&path))),
        }
    }

    async fn get_acl(&mut self, zk: &Client, tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "s", "")?;
        if o.args.len() < 2 {
            return Err(CliErr::new(usage_of("getAcl")));
        }
        let path = o.args[1].clone();
        check_path(&path)?;
        let (acl, stat) = zk
            .get_acl(&path)
            .await
            .map_err(|e| CliErr::zk(&e, Some(&path)))?;
        for a in &acl {
            self.io.outln(&format!(
                "{}: {}",
                id_to_string(&a.id),
                perm_string(a.perms)
            ));
        }
        if o.has('s') {
            self.io.out(&stat_text(&stat));
        }
        Ok(())
    }

    async fn set_acl(&mut self, zk: &Client, tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "sR", "v")?;
        if o.args.len() < 3 {
            return Err(CliErr::new(usage_of("setAcl")));
        }
        let path = o.args[1].clone();
        let (acl, warnings) = parse_acl(&o.args[2]);
        for w in warnings {
            self.io.errln(&w);
        }
        let version = match o.value('v') {
            Some(v) => args::parse_java_int(v).map_err(CliErr::new)?,
            None => -1,
        };
        check_path(&path)?;
        if o.has('R') {
            return self
                .visit_subtree(zk, &path, false, Visit::SetAcl(&acl, version))
                .await;
        }
        if acl.is_empty() {
            return Err(CliErr::zk(&ClientError::Zk(ErrorCode::InvalidAcl), None));
        }
        let stat = zk
            .set_acl(&path, &acl, version)
            .await
            .map_err(|e| CliErr::zk(&e, Some(&path)))?;
        if o.has('s') {
            self.io.out(&stat_text(&stat));
        }
        Ok(())
    }

    async fn addauth(&mut self, zk: &Client, tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "", "")?;
        if o.args.len() < 2 {
            return Err(CliErr::new(usage_of("addauth")));
        }
        let auth = o
            .args
            .get(2)
            .map(|a| a.as_bytes().to_vec())
            .unwrap_or_default();
        // ZooKeeper.addAuthInfo reports nothing to the command; a rejected
        // auth shows up as an AuthFailed session event.
        if let Err(ClientError::Zk(ErrorCode::AuthFailed)) = zk.add_auth(&o.args[1], &auth).await {
            self.state = State::AuthFailed;
            self.print_event(&connected_event(KeeperState::AuthFailed));
        }
        Ok(())
    }

    async fn sync(&mut self, zk: &Client, tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "", "")?;
        if o.args.len() < 2 {
            return Err(CliErr::new(usage_of("sync")));
        }
        let path = o.args[1].clone();
        check_path(&path)?;
        match zk.sync(&path).await {
            Ok(()) => self.io.outln("Sync is OK"),
            Err(e) => {
                let rc = match format::error_code_of(&e) {
                    Ok(c) => c.code(),
                    Err(n) => n,
                };
                self.io.outln(&format!("Sync has failed. rc={rc}"));
            }
        }
        Ok(())
    }

    async fn get_ephemerals(&mut self, zk: &Client, tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "", "")?;
        let prefix = match o.args.get(1) {
            Some(p) => {
                check_path(p)?;
                p.clone()
            }
            None => "/".to_string(),
        };
        let list = zk
            .get_ephemerals(&prefix)
            .await
            .map_err(|e| CliErr::zk(&e, None))?;
        self.io.outln(&java_list(&list));
        Ok(())
    }

    async fn get_all_children_number(
        &mut self,
        zk: &Client,
        tokens: Vec<String>,
    ) -> Result<(), CliErr> {
        let o = opts(&tokens, "", "")?;
        if o.args.len() < 2 {
            return Err(CliErr::new(usage_of("getAllChildrenNumber")));
        }
        let path = o.args[1].clone();
        check_path(&path)?;
        let n = zk
            .get_all_children_number(&path)
            .await
            .map_err(|e| CliErr::zk(&e, Some(&path)))?;
        self.io.outln(&n.to_string());
        Ok(())
    }

    async fn whoami(&mut self, zk: &Client) -> Result<(), CliErr> {
        let infos = zk.who_am_i().await.map_err(|e| CliErr::zk(&e, None))?;
        self.io.outln("Auth scheme: User");
        for i in infos {
            self.io.outln(&format!("{}: {}", i.auth_scheme, i.user));
        }
        Ok(())
    }

    async fn config(&mut self, zk: &Client, tokens: Vec<String>) -> Result<(), CliErr> {
        const CONFIG_NODE: &str = "/zookeeper/config";
        let o = opts(&tokens, "cws", "")?;
        let (data, stat) = zk
            .get_data(CONFIG_NODE, o.has('w'))
            .await
            .map_err(|e| CliErr::zk(&e, Some(CONFIG_NODE)))?;
        self.io
            .outln(&String::from_utf8_lossy(&data.unwrap_or_default()));
        if o.has('s') {
            self.io.out(&stat_text(&stat));
        }
        Ok(())
    }

    async fn add_watch(&mut self, zk: &Client, tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "", "m")?;
        if o.args.len() != 2 {
            return Err(CliErr::new(usage_of("addWatch")));
        }
        let mode = match o.value('m').map(str::to_uppercase).as_deref() {
            None | Some("PERSISTENT_RECURSIVE") => AddWatchMode::PersistentRecursive,
            Some("PERSISTENT") => AddWatchMode::Persistent,
            Some(_) => return Err(CliErr::new(usage_of("addWatch"))),
        };
        let path = o.args[1].clone();
        check_path(&path)?;
        zk.add_watch(&path, mode)
            .await
            .map_err(|e| CliErr::zk(&e, Some(&path)))
    }

    async fn remove_watches(&mut self, zk: &Client, tokens: Vec<String>) -> Result<(), CliErr> {
        let o = opts(&tokens, "cdal", "")?;
        if o.args.len() < 2 {
            return Err(CliErr::new(usage_of("removewatches")));
        }
        let kind = if o.has('c') {
            WatcherType::Children
        } else if o.has('d') {
            WatcherType::Data
        } else {
            WatcherType::Any
        };
        let path = o.args[1].clone();
        check_path(&path)?;
        zk.remove_watches(&path, kind)
            .await
            .map_err(|e| CliErr::zk(&e, Some(&path)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_matches_zkcli_3_8_0() {
        let u = usage_text();
        assert!(u.starts_with(
            "ZooKeeper -server host:port -client-configuration properties-file cmd args\n\taddWatch [-m mode] path"
        ));
        assert!(u.contains("\n\tclose \n"));
        assert!(u.contains("\n\tget [-s] [-w] path\n"));
        assert!(u.ends_with("\n\twhoami \n"));
        assert_eq!(u.lines().count(), 1 + COMMANDS.len());
        let mut names: Vec<String> = COMMANDS.iter().map(|(c, _)| c.to_string()).collect();
        let sorted = {
            let mut s = names.clone();
            java_sort(&mut s);
            s
        };
        assert_eq!(names, sorted);
        names.dedup();
        assert_eq!(names.len(), COMMANDS.len());
        assert_eq!(usage_of("ls"), "ls [-s] [-w] [-R] path");
        assert_eq!(usage_of("whoami"), "whoami ");
    }
}
