//! `keel bench --profile`: the servers' lock × operation profiles (the
//! four-letter word `lcks`) before and after the timed run, and the top
//! rows of the difference for each server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long one `lcks` exchange may take.
const LCKS_TIMEOUT_MS: u64 = 5_000;
/// Largest `lcks` answer read (a few hundred rows at most).
const LCKS_ANSWER_MAX_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{server}: cannot ask lcks: {source}")]
    Io {
        server: String,
        source: std::io::Error,
    },
    #[error("{server}: the lock profiler is off (start the server with --profile-locks or profile_locks = true)")]
    Off { server: String },
    #[error("{server}: lcks answered something else: {answer:?}")]
    Unexpected { server: String, answer: String },
}

/// One (lock, operation) row of a profile.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileRow {
    pub lock: String,
    pub op: String,
    pub count: u64,
    pub wait_ms: f64,
    pub hold_ms: f64,
}

/// Asks `server` (HOST:PORT) for its profile.
pub fn fetch(server: &str) -> Result<Vec<ProfileRow>, ProfileError> {
    let io = |source| ProfileError::Io {
        server: server.to_string(),
        source,
    };
    let timeout = Some(Duration::from_millis(LCKS_TIMEOUT_MS));
    let mut stream = TcpStream::connect(server).map_err(io)?;
    stream.set_read_timeout(timeout).map_err(io)?;
    stream.set_write_timeout(timeout).map_err(io)?;
    stream.write_all(b"lcks").map_err(io)?;
    let mut answer = String::new();
    stream
        .take(LCKS_ANSWER_MAX_BYTES)
        .read_to_string(&mut answer)
        .map_err(io)?;
    parse(server, &answer)
}

/// Parses an `lcks` answer: a header line, a column line, then rows of
/// `lock operation count wait_ms hold_ms wait_ns/op hold_ns/op`.
pub fn parse(server: &str, answer: &str) -> Result<Vec<ProfileRow>, ProfileError> {
    if answer.starts_with("lock profiler is off") {
        return Err(ProfileError::Off {
            server: server.to_string(),
        });
    }
    let unexpected = || ProfileError::Unexpected {
        server: server.to_string(),
        answer: answer.chars().take(200).collect(),
    };
    let mut lines = answer.lines();
    if !lines
        .next()
        .is_some_and(|l| l.starts_with("lock profiler: on"))
    {
        return Err(unexpected());
    }
    if !lines.next().is_some_and(|l| l.starts_with("lock ")) {
        return Err(unexpected());
    }
    let mut rows = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [lock, op, count, wait_ms, hold_ms, _, _] = fields[..] else {
            return Err(unexpected());
        };
        rows.push(ProfileRow {
            lock: lock.to_string(),
            op: op.to_string(),
            count: count.parse().map_err(|_| unexpected())?,
            wait_ms: wait_ms.parse().map_err(|_| unexpected())?,
            hold_ms: hold_ms.parse().map_err(|_| unexpected())?,
        });
    }
    Ok(rows)
}

/// What happened between two profiles of one server, most wait first.
pub fn difference(before: &[ProfileRow], after: &[ProfileRow]) -> Vec<ProfileRow> {
    let mut rows: Vec<ProfileRow> = after
        .iter()
        .map(|row| {
            let earlier = before.iter().find(|b| b.lock == row.lock && b.op == row.op);
            match earlier {
                Some(b) => ProfileRow {
                    count: row.count.saturating_sub(b.count),
                    wait_ms: (row.wait_ms - b.wait_ms).max(0.0),
                    hold_ms: (row.hold_ms - b.hold_ms).max(0.0),
                    ..row.clone()
                },
                None => row.clone(),
            }
        })
        .filter(|row| row.count > 0)
        .collect();
    rows.sort_by(|a, b| {
        b.wait_ms
            .total_cmp(&a.wait_ms)
            .then(b.hold_ms.total_cmp(&a.hold_ms))
    });
    rows
}

/// The top `top` rows of one server's difference, as a small table.
pub fn format_top(server: &str, rows: &[ProfileRow], top: usize) -> String {
    let mut out = format!(
        "lock profile of {server} during the run (top {} of {} rows by wait):\n",
        top.min(rows.len()),
        rows.len()
    );
    out.push_str(&format!(
        "  {:<12} {:<20} {:>12} {:>12} {:>12}\n",
        "lock", "operation", "count", "wait_ms", "hold_ms"
    ));
    for row in rows.iter().take(top) {
        out.push_str(&format!(
            "  {:<12} {:<20} {:>12} {:>12.3} {:>12.3}\n",
            row.lock, row.op, row.count, row.wait_ms, row.hold_ms
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANSWER: &str = "lock profiler: on for 3.2 s
lock         operation                   count      wait_ms      hold_ms wait_ns/op hold_ns/op
node.write   apply                         100       12.500       40.000     125000     400000
node.read    getData                      5000        3.000        9.000        600       1800
";

    #[test]
    fn parses_lcks_and_takes_differences() {
        let after = parse("s1", ANSWER).unwrap();
        assert_eq!(after.len(), 2);
        assert_eq!(after[0].lock, "node.write");
        assert_eq!(after[1].count, 5000);
        let before = vec![ProfileRow {
            lock: "node.read".into(),
            op: "getData".into(),
            count: 1000,
            wait_ms: 2.5,
            hold_ms: 1.0,
        }];
        let diff = difference(&before, &after);
        assert_eq!(diff[0].lock, "node.write", "most wait first");
        assert_eq!(diff[1].count, 4000);
        assert!((diff[1].wait_ms - 0.5).abs() < 1e-9);
        let table = format_top("s1", &diff, 1);
        assert!(table.contains("top 1 of 2"), "{table}");
        assert!(table.contains("apply"));
        assert!(!table.contains("getData"));
    }

    #[test]
    fn an_off_profiler_and_garbage_are_clear_errors() {
        let off = parse("s1", "lock profiler is off (profile_locks ...)\n").unwrap_err();
        assert!(off.to_string().contains("--profile-locks"), "{off}");
        let garbage = parse(
            "s1",
            "lcks is not executed because it is not in the whitelist.\n",
        );
        assert!(matches!(garbage, Err(ProfileError::Unexpected { .. })));
    }
}
