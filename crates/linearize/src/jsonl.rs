//! The history file format of `keel-linearize` (the binary): JSON lines, one
//! operation per line, so that a driver in any language (tests/nemesis, in
//! Python) can record a history of real processes and have it checked.
//!
//! ```text
//! {"process": 3, "session": 72057594037927937, "invoke": 1200, "complete": 1450,
//!  "call": {"op": "setData", "path": "/e0-g1/a", "data": "p3-17", "version": 2},
//!  "ret": {"type": "set", "version": 3}}
//! ```
//!
//! - `process` (u64): the client (one process order); `session` (i64): the
//!   ZooKeeper session, owner of the ephemerals it creates.
//! - `invoke`, `complete` (u64, any unit, e.g. µs of a monotonic clock):
//!   `complete` > `invoke`; `complete` is absent or null when `ret` is.
//! - `call.op`: `create` (`path`, `data`, `ephemeral`, `sequential`, the last
//!   two default false), `delete` (`path`, `version`), `setData` (`path`,
//!   `data`, `version`), `check` (only inside a multi), `multi` (`ops`: a
//!   list of calls), `getData` / `exists` / `getChildren` (`path`),
//!   `closeSession`. `version` defaults to -1 (any). Data is `data` (a UTF-8
//!   string) or `data_hex` (hex digits), defaulting to empty.
//! - `ret`: null or absent = unknown outcome (timeout, connection lost: the
//!   operation may have taken effect at any point after `invoke`, or never);
//!   else `{"type": ...}` with `created` (`path`), `done`, `set` (`version`),
//!   `data` (`data`/`data_hex`, `version`), `exists` (`version`: null if the
//!   node does not exist), `children` (`names`), `multi` (`results`: one ret
//!   per op), `error` (`code`, ZooKeeper's error code: the operation had no
//!   effect).
//! - `"local": true` marks a read served from the node's local state without
//!   a `sync` before it. ZooKeeper promises such reads sequential consistency
//!   per session, not linearizability, so the checker skips them (the driver
//!   checks them on its own); reads without it must have been preceded by a
//!   `sync` of the same session, and `invoke` is the sync's invocation.
//! - Any other key is ignored (drivers record zxids, node ids and the like).
//!
//! Blank lines and lines starting with `#` are skipped.

use std::fmt;
use std::io::BufRead;

use serde::Deserialize;

use crate::history::{Call, Operation, Ret, Time};

/// A history file: the operations to check and what was left out.
#[derive(Debug, Default)]
pub struct HistoryFile {
    pub ops: Vec<Operation>,
    /// Reads marked `"local": true`, not checked for linearizability.
    pub local_reads: usize,
}

/// A line that is not a valid operation.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("line {line}: {message}")]
    Invalid { line: usize, message: String },
    #[error("reading the history: {0}")]
    Io(#[from] std::io::Error),
}

#[derive(Deserialize)]
struct Record {
    process: u64,
    session: i64,
    invoke: Time,
    #[serde(default)]
    complete: Option<Time>,
    call: CallRecord,
    #[serde(default)]
    ret: Option<RetRecord>,
    #[serde(default)]
    local: bool,
}

#[derive(Deserialize)]
#[serde(tag = "op", deny_unknown_fields)]
enum CallRecord {
    #[serde(rename = "create")]
    Create {
        path: String,
        #[serde(default)]
        data: Option<String>,
        #[serde(default)]
        data_hex: Option<String>,
        #[serde(default)]
        ephemeral: bool,
        #[serde(default)]
        sequential: bool,
    },
    #[serde(rename = "delete")]
    Delete {
        path: String,
        #[serde(default = "any_version")]
        version: i32,
    },
    #[serde(rename = "setData")]
    SetData {
        path: String,
        #[serde(default)]
        data: Option<String>,
        #[serde(default)]
        data_hex: Option<String>,
        #[serde(default = "any_version")]
        version: i32,
    },
    #[serde(rename = "check")]
    Check {
        path: String,
        #[serde(default = "any_version")]
        version: i32,
    },
    #[serde(rename = "multi")]
    Multi { ops: Vec<CallRecord> },
    #[serde(rename = "getData")]
    GetData { path: String },
    #[serde(rename = "exists")]
    Exists { path: String },
    #[serde(rename = "getChildren")]
    GetChildren { path: String },
    #[serde(rename = "closeSession")]
    CloseSession,
}

#[derive(Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
enum RetRecord {
    #[serde(rename = "created")]
    Created { path: String },
    #[serde(rename = "done")]
    Done,
    #[serde(rename = "set")]
    Set { version: i32 },
    #[serde(rename = "data")]
    Data {
        #[serde(default)]
        data: Option<String>,
        #[serde(default)]
        data_hex: Option<String>,
        version: i32,
    },
    #[serde(rename = "exists")]
    Exists { version: Option<i32> },
    #[serde(rename = "children")]
    Children { names: Vec<String> },
    #[serde(rename = "multi")]
    Multi { results: Vec<RetRecord> },
    #[serde(rename = "error")]
    Error { code: i32 },
}

fn any_version() -> i32 {
    -1
}

/// `data` (UTF-8) or `data_hex`; neither is empty data.
fn bytes(data: Option<String>, data_hex: Option<String>) -> Result<Vec<u8>, String> {
    match (data, data_hex) {
        (Some(_), Some(_)) => Err("both data and data_hex".into()),
        (Some(text), None) => Ok(text.into_bytes()),
        (None, Some(hex)) => decode_hex(&hex),
        (None, None) => Ok(Vec::new()),
    }
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) {
        return Err(format!("data_hex of odd length {}", hex.len()));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&hex[i..i + 2], 16)
                .map_err(|_| format!("data_hex is not hex: {hex:?}"))
        })
        .collect()
}

impl CallRecord {
    fn into_call(self) -> Result<Call, String> {
        Ok(match self {
            CallRecord::Create {
                path,
                data,
                data_hex,
                ephemeral,
                sequential,
            } => Call::Create {
                path,
                data: bytes(data, data_hex)?,
                ephemeral,
                sequential,
            },
            CallRecord::Delete { path, version } => Call::Delete { path, version },
            CallRecord::SetData {
                path,
                data,
                data_hex,
                version,
            } => Call::SetData {
                path,
                data: bytes(data, data_hex)?,
                version,
            },
            CallRecord::Check { path, version } => Call::Check { path, version },
            CallRecord::Multi { ops } => Call::Multi {
                ops: ops
                    .into_iter()
                    .map(CallRecord::into_call)
                    .collect::<Result<_, _>>()?,
            },
            CallRecord::GetData { path } => Call::GetData { path },
            CallRecord::Exists { path } => Call::Exists { path },
            CallRecord::GetChildren { path } => Call::GetChildren { path },
            CallRecord::CloseSession => Call::CloseSession,
        })
    }
}

impl RetRecord {
    fn into_ret(self) -> Result<Ret, String> {
        Ok(match self {
            RetRecord::Created { path } => Ret::Created { path },
            RetRecord::Done => Ret::Done,
            RetRecord::Set { version } => Ret::Set { version },
            RetRecord::Data {
                data,
                data_hex,
                version,
            } => Ret::Data {
                data: bytes(data, data_hex)?,
                version,
            },
            RetRecord::Exists { version } => Ret::Exists(version),
            RetRecord::Children { names } => Ret::Children(names),
            RetRecord::Multi { results } => Ret::Multi(
                results
                    .into_iter()
                    .map(RetRecord::into_ret)
                    .collect::<Result<_, _>>()?,
            ),
            RetRecord::Error { code } => Ret::Error(code),
        })
    }
}

/// Why a well-formed JSON record is not an operation the checker takes.
fn validate(op: &Operation) -> Result<(), String> {
    if let Some((t, _)) = &op.ret {
        if *t <= op.invoke {
            return Err(format!("complete {t} is not after invoke {}", op.invoke));
        }
    }
    if let Call::Multi { ops } = &op.call {
        let bad = ops.iter().find(|sub| {
            !matches!(
                sub,
                Call::Create { .. }
                    | Call::Delete { .. }
                    | Call::SetData { .. }
                    | Call::Check { .. }
            )
        });
        if let Some(sub) = bad {
            return Err(format!("{sub} inside a multi"));
        }
    }
    if matches!(op.call, Call::Check { .. }) {
        return Err("check outside a multi".into());
    }
    match (&op.call, &op.ret) {
        (Call::Multi { ops }, Some((_, Ret::Multi(rets)))) if ops.len() != rets.len() => Err(
            format!("multi of {} ops with {} results", ops.len(), rets.len()),
        ),
        _ => Ok(()),
    }
}

fn parse_line(text: &str) -> Result<Option<Operation>, String> {
    let record: Record = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if record.local {
        if !record.call.is_read() {
            return Err("only reads may be local".into());
        }
        return Ok(None);
    }
    let ret = match (record.ret, record.complete) {
        (None, _) => None,
        (Some(ret), Some(at)) => Some((at, ret.into_ret()?)),
        (Some(_), None) => return Err("a ret without complete".into()),
    };
    let op = Operation {
        client: record.process,
        session: record.session,
        call: record.call.into_call()?,
        invoke: record.invoke,
        ret,
    };
    validate(&op)?;
    Ok(Some(op))
}

impl CallRecord {
    fn is_read(&self) -> bool {
        matches!(
            self,
            CallRecord::GetData { .. } | CallRecord::Exists { .. } | CallRecord::GetChildren { .. }
        )
    }
}

/// Reads a history in the format above; the first invalid line is an error
/// naming its line number (1-based).
pub fn read_history(input: impl BufRead) -> Result<HistoryFile, ReadError> {
    let mut file = HistoryFile::default();
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        let text = line.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        match parse_line(text) {
            Ok(Some(op)) => file.ops.push(op),
            Ok(None) => file.local_reads += 1,
            Err(message) => {
                return Err(ReadError::Invalid {
                    line: i + 1,
                    message,
                })
            }
        }
    }
    Ok(file)
}

/// Counts for the binary's summary line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub operations: usize,
    pub writes: usize,
    pub reads: usize,
    pub unknown: usize,
    pub failed: usize,
    pub sessions: usize,
}

impl Summary {
    pub fn of(ops: &[Operation]) -> Summary {
        let sessions: std::collections::BTreeSet<i64> = ops.iter().map(|o| o.session).collect();
        Summary {
            operations: ops.len(),
            writes: ops.iter().filter(|o| !o.call.is_read()).count(),
            reads: ops.iter().filter(|o| o.call.is_read()).count(),
            unknown: ops.iter().filter(|o| o.ret.is_none()).count(),
            failed: ops
                .iter()
                .filter(|o| matches!(o.ret, Some((_, Ret::Error(_)))))
                .count(),
            sessions: sessions.len(),
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} operations ({} writes, {} synced reads; {} with unknown outcome, {} failed with an error) in {} sessions",
            self.operations, self.writes, self.reads, self.unknown, self.failed, self.sessions
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check, Budget};

    fn read(text: &str) -> Result<HistoryFile, ReadError> {
        read_history(text.as_bytes())
    }

    #[test]
    fn every_call_and_ret_kind_reads_back() {
        let text = r#"
# a comment, then every kind of call
{"process": 1, "session": 7, "invoke": 1, "complete": 2, "call": {"op": "create", "path": "/a", "data": "x"}, "ret": {"type": "created", "path": "/a"}, "zxid": 4294967297}
{"process": 1, "session": 7, "invoke": 3, "complete": 4, "call": {"op": "create", "path": "/a/s-", "sequential": true, "ephemeral": true}, "ret": {"type": "created", "path": "/a/s-0000000000"}}
{"process": 1, "session": 7, "invoke": 5, "complete": 6, "call": {"op": "setData", "path": "/a", "data_hex": "00ff", "version": 0}, "ret": {"type": "set", "version": 1}}
{"process": 1, "session": 7, "invoke": 7, "complete": 8, "call": {"op": "getData", "path": "/a"}, "ret": {"type": "data", "data_hex": "00ff", "version": 1}}
{"process": 1, "session": 7, "invoke": 9, "complete": 10, "call": {"op": "exists", "path": "/b"}, "ret": {"type": "exists", "version": null}}
{"process": 1, "session": 7, "invoke": 11, "complete": 12, "call": {"op": "getChildren", "path": "/a"}, "ret": {"type": "children", "names": ["s-0000000000"]}}
{"process": 1, "session": 7, "invoke": 13, "complete": 14, "call": {"op": "multi", "ops": [{"op": "check", "path": "/a", "version": 1}, {"op": "delete", "path": "/a/s-0000000000"}]}, "ret": {"type": "multi", "results": [{"type": "done"}, {"type": "done"}]}}
{"process": 1, "session": 7, "invoke": 15, "complete": 16, "call": {"op": "delete", "path": "/a", "version": 5}, "ret": {"type": "error", "code": -103}}
{"process": 1, "session": 7, "invoke": 17, "call": {"op": "setData", "path": "/a", "data": "y"}, "ret": null}
{"process": 1, "session": 7, "invoke": 19, "complete": 20, "call": {"op": "getData", "path": "/a"}, "ret": {"type": "data", "data": "y", "version": 2}, "local": true}
{"process": 1, "session": 7, "invoke": 21, "complete": 22, "call": {"op": "closeSession"}, "ret": {"type": "done"}}
"#;
        let file = read(text).expect("valid");
        assert_eq!(file.ops.len(), 10);
        assert_eq!(file.local_reads, 1);
        assert_eq!(
            file.ops[2].call,
            Call::SetData {
                path: "/a".into(),
                data: vec![0, 0xff],
                version: 0
            }
        );
        assert_eq!(file.ops[8].ret, None);
        assert_eq!(file.ops[7].ret, Some((16, Ret::Error(-103))));
        let summary = Summary::of(&file.ops);
        assert_eq!((summary.writes, summary.reads, summary.unknown), (7, 3, 1));
        assert!(check(&file.ops, Budget::default()).is_linearizable());
    }

    #[test]
    fn a_lost_write_is_not_linearizable() {
        // Acknowledged setData, then a later synced read that misses it.
        let text = r#"
{"process": 1, "session": 1, "invoke": 1, "complete": 2, "call": {"op": "create", "path": "/k", "data": "a"}, "ret": {"type": "created", "path": "/k"}}
{"process": 1, "session": 1, "invoke": 3, "complete": 4, "call": {"op": "setData", "path": "/k", "data": "b"}, "ret": {"type": "set", "version": 1}}
{"process": 2, "session": 2, "invoke": 5, "complete": 6, "call": {"op": "getData", "path": "/k"}, "ret": {"type": "data", "data": "a", "version": 0}}
"#;
        let file = read(text).expect("valid");
        assert!(check(&file.ops, Budget::default()).is_not_linearizable());
    }

    #[test]
    fn invalid_lines_are_refused_with_their_number() {
        let cases = [
            (r#"{"process": 1}"#, "missing field"),
            (
                r#"{"process": 1, "session": 1, "invoke": 5, "complete": 5, "call": {"op": "closeSession"}, "ret": {"type": "done"}}"#,
                "not after invoke",
            ),
            (
                r#"{"process": 1, "session": 1, "invoke": 5, "call": {"op": "creat", "path": "/a"}}"#,
                "unknown variant",
            ),
            (
                r#"{"process": 1, "session": 1, "invoke": 5, "call": {"op": "create", "path": "/a", "ephemral": true}}"#,
                "unknown field",
            ),
            (
                r#"{"process": 1, "session": 1, "invoke": 5, "call": {"op": "create", "path": "/a", "data_hex": "zz"}}"#,
                "not hex",
            ),
            (
                r#"{"process": 1, "session": 1, "invoke": 5, "call": {"op": "check", "path": "/a"}}"#,
                "outside a multi",
            ),
            (
                r#"{"process": 1, "session": 1, "invoke": 5, "call": {"op": "multi", "ops": [{"op": "getData", "path": "/a"}]}}"#,
                "inside a multi",
            ),
            (
                r#"{"process": 1, "session": 1, "invoke": 5, "call": {"op": "delete", "path": "/a"}, "local": true}"#,
                "only reads",
            ),
            (
                r#"{"process": 1, "session": 1, "invoke": 5, "call": {"op": "delete", "path": "/a"}, "ret": {"type": "done"}}"#,
                "without complete",
            ),
        ];
        for (line, want) in cases {
            let text = format!("\n{line}\n");
            match read(&text) {
                Err(ReadError::Invalid { line: 2, message }) => {
                    assert!(message.contains(want), "{line}: {message}")
                }
                other => panic!("{line}: {other:?}"),
            }
        }
    }
}
