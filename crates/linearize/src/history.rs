//! The history a simulation records: one [`Operation`] per client request,
//! with its invocation time and, when known, its return time and result.
//!
//! A history is a plain `Vec<Operation>` (or `&[Operation]`); [`History`] is a
//! thin wrapper with helpers for recording (`invoke` then `complete`). The
//! order of the operations in the vector does not matter to the checker; the
//! checker's reports refer to operations by their index in it (`op #i`).

use std::fmt;

/// Logical time. The simulator stamps every invocation and every return with
/// a strictly increasing value; an operation's return stamp must be greater
/// than its invocation stamp.
pub type Time = u64;

/// ZooKeeper error codes the model knows about (`KeeperException.Code`).
pub mod err {
    pub const CONNECTION_LOSS: i32 = -4;
    pub const OPERATION_TIMEOUT: i32 = -7;
    pub const BAD_ARGUMENTS: i32 = -8;
    pub const NO_NODE: i32 = -101;
    pub const NO_AUTH: i32 = -102;
    pub const BAD_VERSION: i32 = -103;
    pub const NO_CHILDREN_FOR_EPHEMERALS: i32 = -108;
    pub const NODE_EXISTS: i32 = -110;
    pub const NOT_EMPTY: i32 = -111;
    pub const SESSION_EXPIRED: i32 = -112;

    /// ZooKeeper's name for `code`, or `"?"`.
    pub fn name(code: i32) -> &'static str {
        match code {
            CONNECTION_LOSS => "ConnectionLoss",
            OPERATION_TIMEOUT => "OperationTimeout",
            BAD_ARGUMENTS => "BadArguments",
            NO_NODE => "NoNode",
            NO_AUTH => "NoAuth",
            BAD_VERSION => "BadVersion",
            NO_CHILDREN_FOR_EPHEMERALS => "NoChildrenForEphemerals",
            NODE_EXISTS => "NodeExists",
            NOT_EMPTY => "NotEmpty",
            SESSION_EXPIRED => "SessionExpired",
            _ => "?",
        }
    }
}

/// A request as the client issued it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    Create {
        path: String,
        data: Vec<u8>,
        ephemeral: bool,
        sequential: bool,
    },
    /// `version` -1 means any version.
    Delete {
        path: String,
        version: i32,
    },
    /// `version` -1 means any version.
    SetData {
        path: String,
        data: Vec<u8>,
        version: i32,
    },
    /// Only inside [`Call::Multi`].
    Check {
        path: String,
        version: i32,
    },
    /// Atomic; `ops` are `Create`, `Delete`, `SetData` and `Check` only.
    Multi {
        ops: Vec<Call>,
    },
    /// Reads are recorded only when linearizable (sync + read).
    GetData {
        path: String,
    },
    Exists {
        path: String,
    },
    GetChildren {
        path: String,
    },
    /// Deletes every ephemeral node owned by the operation's session; later
    /// requests of that session fail with SessionExpired.
    CloseSession,
}

/// What the client got back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ret {
    /// The actual path (for a sequential create: with the 10-digit suffix).
    Created {
        path: String,
    },
    /// Delete, Check (inside a multi) and CloseSession succeeded.
    Done,
    /// SetData succeeded; the node's new `stat.version`.
    Set {
        version: i32,
    },
    Data {
        data: Vec<u8>,
        version: i32,
    },
    /// `Some(version)` if the node exists.
    Exists(Option<i32>),
    /// Child names (not paths), sorted.
    Children(Vec<String>),
    /// A successful multi: one result per op (`Created`, `Done`, `Set`, `Done`).
    Multi(Vec<Ret>),
    /// A ZooKeeper error code; the operation had no effect. SessionExpired and
    /// ConnectionLoss are taken as "had no effect, constrains nothing";
    /// OperationTimeout as an unknown outcome (like `ret: None`).
    Error(i32),
}

/// One client request of the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The simulated client (one client = one process order).
    pub client: u64,
    /// The ZooKeeper session the request ran in (owner of its ephemerals).
    pub session: i64,
    pub call: Call,
    pub invoke: Time,
    /// `None`: the outcome is unknown (connection lost, node crashed); the
    /// operation may have taken effect at any time after `invoke`, or never.
    pub ret: Option<(Time, Ret)>,
}

/// A recorded history: the operations, in any order (usually invocation
/// order). Checking it is [`crate::check`] on `ops`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub ops: Vec<Operation>,
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    /// Records an invocation; returns the id to pass to [`History::complete`].
    pub fn invoke(&mut self, client: u64, session: i64, call: Call, at: Time) -> usize {
        self.ops.push(Operation {
            client,
            session,
            call,
            invoke: at,
            ret: None,
        });
        self.ops.len() - 1
    }

    /// Records the return of operation `id`. Operations never completed keep
    /// an unknown outcome.
    pub fn complete(&mut self, id: usize, at: Time, ret: Ret) {
        let op = &mut self.ops[id];
        assert!(op.ret.is_none(), "op #{id} completed twice");
        assert!(
            at > op.invoke,
            "op #{id}: return at {at} not after invoke at {}",
            op.invoke
        );
        op.ret = Some((at, ret));
    }

    /// [`crate::check`] on this history.
    pub fn check(&self, budget: crate::Budget) -> crate::Outcome {
        crate::check(&self.ops, budget)
    }
}

impl Call {
    /// The path the call names (`None` for Multi and CloseSession).
    pub fn path(&self) -> Option<&str> {
        match self {
            Call::Create { path, .. }
            | Call::Delete { path, .. }
            | Call::SetData { path, .. }
            | Call::Check { path, .. }
            | Call::GetData { path }
            | Call::Exists { path }
            | Call::GetChildren { path } => Some(path),
            Call::Multi { .. } | Call::CloseSession => None,
        }
    }

    /// Reads change nothing; with an unknown outcome they constrain nothing.
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Call::GetData { .. } | Call::Exists { .. } | Call::GetChildren { .. }
        )
    }
}

/// Bytes as a quoted string if printable ASCII, else hex; long values cut.
struct Bytes<'a>(&'a [u8]);

impl fmt::Display for Bytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX: usize = 40;
        let shown = &self.0[..self.0.len().min(MAX)];
        if shown.iter().all(|b| (0x20..0x7f).contains(b)) {
            write!(f, "{:?}", String::from_utf8_lossy(shown))?;
        } else {
            write!(f, "0x")?;
            for b in shown {
                write!(f, "{b:02x}")?;
            }
        }
        if self.0.len() > MAX {
            write!(f, "..({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

fn version(v: i32) -> String {
    if v == -1 {
        "any".into()
    } else {
        v.to_string()
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Create {
                path,
                data,
                ephemeral,
                sequential,
            } => {
                write!(f, "create {path} {}", Bytes(data))?;
                match (ephemeral, sequential) {
                    (true, true) => write!(f, " ephemeral+sequential"),
                    (true, false) => write!(f, " ephemeral"),
                    (false, true) => write!(f, " sequential"),
                    (false, false) => Ok(()),
                }
            }
            Call::Delete { path, version: v } => write!(f, "delete {path} v={}", version(*v)),
            Call::SetData {
                path,
                data,
                version: v,
            } => {
                write!(f, "setData {path} {} v={}", Bytes(data), version(*v))
            }
            Call::Check { path, version: v } => write!(f, "check {path} v={}", version(*v)),
            Call::Multi { ops } => write!(f, "multi[{}]", join(ops)),
            Call::GetData { path } => write!(f, "getData {path}"),
            Call::Exists { path } => write!(f, "exists {path}"),
            Call::GetChildren { path } => write!(f, "getChildren {path}"),
            Call::CloseSession => write!(f, "closeSession"),
        }
    }
}

impl fmt::Display for Ret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ret::Created { path } => write!(f, "created {path}"),
            Ret::Done => write!(f, "ok"),
            Ret::Set { version } => write!(f, "set v={version}"),
            Ret::Data { data, version } => write!(f, "data {} v={version}", Bytes(data)),
            Ret::Exists(Some(v)) => write!(f, "exists v={v}"),
            Ret::Exists(None) => write!(f, "does not exist"),
            Ret::Children(names) => write!(f, "children [{}]", names.join(", ")),
            Ret::Multi(rets) => write!(f, "multi[{}]", join(rets)),
            Ret::Error(code) => write!(f, "error {}({code})", err::name(*code)),
        }
    }
}

fn join<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Operation {
    /// `client 3 session 0x7: setData /a "x" v=any @[12, 15] -> set v=1`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "client {} session {:#x}: {} @[{}, ",
            self.client, self.session, self.call, self.invoke
        )?;
        match &self.ret {
            Some((t, ret)) => write!(f, "{t}] -> {ret}"),
            None => write!(f, "?] -> outcome unknown"),
        }
    }
}
