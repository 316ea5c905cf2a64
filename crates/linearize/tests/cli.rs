//! The `keel-linearize` binary as the nemesis driver calls it: exit 0 on a
//! linearizable history, 1 on one that is not (with the report), 3 on a
//! file it cannot read.

use std::io::Write;
use std::process::{Command, Stdio};

fn run(history: &str) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel-linearize"))
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn keel-linearize");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(history.as_bytes())
        .expect("write history");
    let out = child.wait_with_output().expect("wait");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().expect("exit code"), text)
}

const CREATE: &str = r#"{"process": 1, "session": 1, "invoke": 1, "complete": 2, "call": {"op": "create", "path": "/k", "data": "a"}, "ret": {"type": "created", "path": "/k"}}"#;

#[test]
fn a_linearizable_history_exits_0() {
    let read = r#"{"process": 2, "session": 2, "invoke": 3, "complete": 4, "call": {"op": "getData", "path": "/k"}, "ret": {"type": "data", "data": "a", "version": 0}}"#;
    let (code, out) = run(&format!("{CREATE}\n{read}\n"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("2 operations"), "{out}");
    assert!(out.contains("linearizable"), "{out}");
}

#[test]
fn a_stale_synced_read_exits_1_with_the_report() {
    // The read began after the create was acknowledged and still saw nothing.
    let read = r#"{"process": 2, "session": 2, "invoke": 3, "complete": 4, "call": {"op": "getData", "path": "/k"}, "ret": {"type": "error", "code": -101}}"#;
    let (code, out) = run(&format!("{CREATE}\n{read}\n"));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("NOT linearizable"), "{out}");
    assert!(out.contains("history is not linearizable"), "{out}");
}

#[test]
fn an_ephemeral_outliving_its_closed_session_exits_1() {
    let history = [
        r#"{"process": 1, "session": 9, "invoke": 1, "complete": 2, "call": {"op": "create", "path": "/e", "ephemeral": true}, "ret": {"type": "created", "path": "/e"}}"#,
        r#"{"process": 1, "session": 9, "invoke": 3, "complete": 4, "call": {"op": "closeSession"}, "ret": {"type": "done"}}"#,
        r#"{"process": 2, "session": 2, "invoke": 5, "complete": 6, "call": {"op": "exists", "path": "/e"}, "ret": {"type": "exists", "version": 0}}"#,
    ];
    let (code, out) = run(&(history.join("\n") + "\n"));
    assert_eq!(code, 1, "{out}");
}

#[test]
fn local_reads_are_skipped_and_an_invalid_line_exits_3() {
    let stale_local = r#"{"process": 2, "session": 2, "invoke": 3, "complete": 4, "call": {"op": "getData", "path": "/k"}, "ret": {"type": "error", "code": -101}, "local": true}"#;
    let (code, out) = run(&format!("{CREATE}\n{stale_local}\n"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 local reads not checked"), "{out}");
    let (code, out) = run(&format!("{CREATE}\nnot json\n"));
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("line 2"), "{out}");
}
