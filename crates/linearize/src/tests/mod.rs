//! Tests: hand-written classic cases, and histories generated from a
//! separate reference implementation of ZooKeeper's semantics.

mod classic;
mod differential;
mod generated;
mod reference;

use crate::history::{err, Call, Operation, Ret, Time};
use crate::{check, Budget, Outcome};

pub(super) fn create(path: &str, data: &str) -> Call {
    Call::Create {
        path: path.into(),
        data: data.into(),
        ephemeral: false,
        sequential: false,
    }
}

pub(super) fn create_ephemeral(path: &str) -> Call {
    Call::Create {
        path: path.into(),
        data: Vec::new(),
        ephemeral: true,
        sequential: false,
    }
}

pub(super) fn create_sequential(path: &str) -> Call {
    Call::Create {
        path: path.into(),
        data: Vec::new(),
        ephemeral: false,
        sequential: true,
    }
}

pub(super) fn delete(path: &str, version: i32) -> Call {
    Call::Delete {
        path: path.into(),
        version,
    }
}

pub(super) fn set(path: &str, data: &str, version: i32) -> Call {
    Call::SetData {
        path: path.into(),
        data: data.into(),
        version,
    }
}

pub(super) fn check_version(path: &str, version: i32) -> Call {
    Call::Check {
        path: path.into(),
        version,
    }
}

pub(super) fn get(path: &str) -> Call {
    Call::GetData { path: path.into() }
}

pub(super) fn exists(path: &str) -> Call {
    Call::Exists { path: path.into() }
}

pub(super) fn children(path: &str) -> Call {
    Call::GetChildren { path: path.into() }
}

pub(super) fn multi(ops: Vec<Call>) -> Call {
    Call::Multi { ops }
}

pub(super) fn created(path: &str) -> Ret {
    Ret::Created { path: path.into() }
}

pub(super) fn data(d: &str, version: i32) -> Ret {
    Ret::Data {
        data: d.into(),
        version,
    }
}

pub(super) fn names(ns: &[&str]) -> Ret {
    Ret::Children(ns.iter().map(|n| n.to_string()).collect())
}

pub(super) fn error(code: i32) -> Ret {
    Ret::Error(code)
}

pub(super) const NO_NODE: i32 = err::NO_NODE;

/// A completed op of `client`, in session `client`.
pub(super) fn op(client: u64, call: Call, invoke: Time, ret_at: Time, ret: Ret) -> Operation {
    Operation {
        client,
        session: client as i64,
        call,
        invoke,
        ret: Some((ret_at, ret)),
    }
}

/// An op of `client` whose outcome is unknown.
pub(super) fn lost(client: u64, call: Call, invoke: Time) -> Operation {
    Operation {
        client,
        session: client as i64,
        call,
        invoke,
        ret: None,
    }
}

/// Client 0 creates /a = "0" during [1, 2].
pub(super) fn with_a(mut rest: Vec<Operation>) -> Vec<Operation> {
    rest.insert(0, op(0, create("/a", "0"), 1, 2, created("/a")));
    rest
}

pub(super) fn assert_linearizable(ops: &[Operation]) {
    match check(ops, Budget::default()) {
        Outcome::Linearizable => {}
        other => panic!("expected linearizable, got {other:?}"),
    }
}

/// Returns the report.
pub(super) fn assert_not_linearizable(ops: &[Operation]) -> String {
    match check(ops, Budget::default()) {
        Outcome::NotLinearizable { report } => report,
        other => panic!("expected not linearizable, got {other:?}"),
    }
}
