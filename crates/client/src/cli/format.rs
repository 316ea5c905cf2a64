//! Text zkCli prints: Stat blocks, ACL lines, dates, error messages and
//! path validation messages. Each function names the Java code whose
//! output it reproduces.

use std::fmt::Write as _;

use crate::error::ClientError;
use crate::proto::{perms, ErrorCode, Id, Stat};

/// Java's `new Date(ms).toString()` ("EEE MMM dd HH:mm:ss zzz yyyy"),
/// always in UTC.
pub fn java_date(ms: i64) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    // 1970-01-01 was a Thursday.
    let weekday = (days.rem_euclid(7) + 4) % 7;
    format!(
        "{} {} {:02} {:02}:{:02}:{:02} UTC {}",
        DAYS[weekday as usize],
        MONTHS[(month - 1) as usize],
        day,
        sod / 3600,
        (sod / 60) % 60,
        sod % 60,
        year
    )
}

/// Proleptic Gregorian date of a day number counted from 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Java's `Long.toHexString` (two's complement for negative values).
pub fn hex(v: i64) -> String {
    format!("{:x}", v as u64)
}

/// `StatPrinter.print`.
pub fn stat_text(stat: &Stat) -> String {
    let mut s = String::with_capacity(320);
    let _ = writeln!(s, "cZxid = 0x{}", hex(stat.czxid));
    let _ = writeln!(s, "ctime = {}", java_date(stat.ctime));
    let _ = writeln!(s, "mZxid = 0x{}", hex(stat.mzxid));
    let _ = writeln!(s, "mtime = {}", java_date(stat.mtime));
    let _ = writeln!(s, "pZxid = 0x{}", hex(stat.pzxid));
    let _ = writeln!(s, "cversion = {}", stat.cversion);
    let _ = writeln!(s, "dataVersion = {}", stat.version);
    let _ = writeln!(s, "aclVersion = {}", stat.aversion);
    let _ = writeln!(s, "ephemeralOwner = 0x{}", hex(stat.ephemeral_owner));
    let _ = writeln!(s, "dataLength = {}", stat.data_length);
    let _ = writeln!(s, "numChildren = {}", stat.num_children);
    s
}

/// `ZKUtil.getPermString`: the letters of `perms` in the order c d r w a.
pub fn perm_string(p: i32) -> String {
    let mut s = String::with_capacity(5);
    for (bit, c) in [
        (perms::CREATE, 'c'),
        (perms::DELETE, 'd'),
        (perms::READ, 'r'),
        (perms::WRITE, 'w'),
        (perms::ADMIN, 'a'),
    ] {
        if p & bit != 0 {
            s.push(c);
        }
    }
    s
}

/// Jute's `ToStringOutputArchive` string escaping.
fn jute_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 1);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\0' => out.push_str("%00"),
            '\n' => out.push_str("%0A"),
            '\r' => out.push_str("%0D"),
            ',' => out.push_str("%2C"),
            '}' => out.push_str("%7D"),
            '%' => out.push_str("%25"),
            c => out.push(c),
        }
    }
    out
}

/// Jute's generated `Id.toString()`: `'scheme,'id` and a newline — which
/// is why zkCli's getAcl prints the permissions on the following line.
pub fn id_to_string(id: &Id) -> String {
    format!("{},{}\n", jute_escape(&id.scheme), jute_escape(&id.id))
}

/// Java's `List.toString()` for a list of strings.
pub fn java_list(items: &[String]) -> String {
    format!("[{}]", items.join(", "))
}

/// Sorts like Java's `Collections.sort` on strings (UTF-16 code units).
pub fn java_sort(items: &mut [String]) {
    items.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
}

/// `KeeperException.getCodeMessage` (3.8 has no text for the codes that
/// fall through to "Unknown error").
fn code_message(code: ErrorCode) -> String {
    match code {
        ErrorCode::UnknownSession | ErrorCode::RequestTimeout => {
            format!("Unknown error {}", code.name())
        }
        c => c.message().to_string(),
    }
}

/// The ZooKeeper error code a client error surfaces as in Java.
pub fn error_code_of(e: &ClientError) -> Result<ErrorCode, i32> {
    match e {
        ClientError::Zk(c) => Ok(*c),
        ClientError::UnknownErrorCode(n) => Err(*n),
        ClientError::SessionExpired => Ok(ErrorCode::SessionExpired),
        _ => Ok(ErrorCode::ConnectionLoss),
    }
}

/// `KeeperException.getMessage()`.
pub fn keeper_message(e: &ClientError, path: Option<&str>) -> String {
    let text = match error_code_of(e) {
        Ok(c) => code_message(c),
        Err(n) => format!("Unknown error {n}"),
    };
    match path {
        Some(p) if !p.is_empty() => format!("KeeperErrorCode = {text} for {p}"),
        _ => format!("KeeperErrorCode = {text}"),
    }
}

/// `CliWrapperException.getMessage(KeeperException)`; `path` is the one
/// the Java client would have attached (`None` prints as "null").
pub fn wrapper_message(e: &ClientError, path: Option<&str>) -> String {
    let p = path.unwrap_or("null");
    match error_code_of(e) {
        Ok(ErrorCode::NoNode) => format!("Node does not exist: {p}"),
        Ok(ErrorCode::NoChildrenForEphemerals) => format!("Ephemerals cannot have children: {p}"),
        Ok(ErrorCode::NodeExists) => format!("Node already exists: {p}"),
        Ok(ErrorCode::NotEmpty) => format!("Node not empty: {p}"),
        Ok(ErrorCode::NotReadOnly) => format!("Not a read-only call: {p}"),
        Ok(ErrorCode::InvalidAcl) => format!("Acl is not valid : {p}"),
        Ok(ErrorCode::NoAuth) => format!("Insufficient permission : {p}"),
        Ok(ErrorCode::BadArguments) => format!("Arguments are not valid : {p}"),
        Ok(ErrorCode::BadVersion) => format!("version No is not valid : {p}"),
        Ok(ErrorCode::ReconfigInProgress) => {
            "Another reconfiguration is in progress -- concurrent reconfigs not supported (yet)"
                .to_string()
        }
        Ok(ErrorCode::NewConfigNoQuorum) => "No quorum of new config is connected and up-to-date \
             with the leader of last commmitted config - try invoking reconfiguration after new \
             servers are connected and synced"
            .to_string(),
        Ok(ErrorCode::QuotaExceeded) => format!("Quota has exceeded : {p}"),
        _ => keeper_message(e, path),
    }
}

/// `PathUtils.validatePath`: `Err` holds the IllegalArgumentException text.
pub fn validate_path(path: &str) -> Result<(), String> {
    let units: Vec<u16> = path.encode_utf16().collect();
    if units.is_empty() {
        return Err("Path length must be > 0".into());
    }
    if units[0] != u16::from(b'/') {
        return Err("Path must start with / character".into());
    }
    if units.len() == 1 {
        return Ok(());
    }
    if units[units.len() - 1] == u16::from(b'/') {
        return Err("Path must not end with / character".into());
    }
    let slash = u16::from(b'/');
    let dot = u16::from(b'.');
    let mut reason = None;
    let mut last = slash;
    for i in 1..units.len() {
        let c = units[i];
        let next_is_end_or_slash = i + 1 == units.len() || units[i + 1] == slash;
        if c == 0 {
            reason = Some(format!("null character not allowed @{i}"));
        } else if c == slash && last == slash {
            reason = Some(format!("empty node name specified @{i}"));
        } else if c == dot && last == dot {
            if units[i - 2] == slash && next_is_end_or_slash {
                reason = Some(format!("relative paths not allowed @{i}"));
            }
        } else if c == dot {
            if units[i - 1] == slash && next_is_end_or_slash {
                reason = Some(format!("relative paths not allowed @{i}"));
            }
        } else if (c > 0 && c <= 0x1f)
            || (0x7f..=0x9f).contains(&c)
            || (0xd800..=0xf8ff).contains(&c)
            || c >= 0xfff0
        {
            reason = Some(format!("invalid character @{i}"));
        }
        if reason.is_some() {
            break;
        }
        last = c;
    }
    match reason {
        Some(r) => Err(format!("Invalid path string \"{path}\" caused by {r}")),
        None => Ok(()),
    }
}

/// `PathUtils.validatePath(path, isSequential)`.
pub fn validate_create_path(path: &str, sequential: bool) -> Result<(), String> {
    if sequential {
        validate_path(&format!("{path}1"))
    } else {
        validate_path(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_match_java() {
        // zkCli printed this for a znode created at 1795309865xxx ms.
        assert_eq!(java_date(1_795_309_865_123), "Sun Nov 22 01:11:05 UTC 2026");
        assert_eq!(java_date(0), "Thu Jan 01 00:00:00 UTC 1970");
        assert_eq!(java_date(951_782_400_000), "Tue Feb 29 00:00:00 UTC 2000");
        assert_eq!(java_date(-1), "Wed Dec 31 23:59:59 UTC 1969");
    }

    #[test]
    fn stat_layout_matches_stat_printer() {
        let stat = Stat {
            czxid: 3,
            mzxid: 0x1f,
            ctime: 1_795_309_865_000,
            mtime: 1_795_309_865_000,
            version: 2,
            cversion: 1,
            aversion: 0,
            ephemeral_owner: -1,
            data_length: 5,
            num_children: 0,
            pzxid: 3,
        };
        assert_eq!(
            stat_text(&stat),
            "cZxid = 0x3\n\
             ctime = Sun Nov 22 01:11:05 UTC 2026\n\
             mZxid = 0x1f\n\
             mtime = Sun Nov 22 01:11:05 UTC 2026\n\
             pZxid = 0x3\n\
             cversion = 1\n\
             dataVersion = 2\n\
             aclVersion = 0\n\
             ephemeralOwner = 0xffffffffffffffff\n\
             dataLength = 5\n\
             numChildren = 0\n"
        );
    }

    #[test]
    fn perms_and_ids() {
        assert_eq!(perm_string(31), "cdrwa");
        assert_eq!(perm_string(perms::READ | perms::WRITE), "rw");
        assert_eq!(perm_string(0), "");
        let id = Id {
            scheme: "world".into(),
            id: "anyone".into(),
        };
        assert_eq!(id_to_string(&id), "'world,'anyone\n");
        let id = Id {
            scheme: "x".into(),
            id: "a,b%c}".into(),
        };
        assert_eq!(id_to_string(&id), "'x,'a%2Cb%25c%7D\n");
    }

    #[test]
    fn error_messages() {
        let nonode = ClientError::Zk(ErrorCode::NoNode);
        assert_eq!(
            wrapper_message(&nonode, Some("/a")),
            "Node does not exist: /a"
        );
        let exists = ClientError::Zk(ErrorCode::NodeExists);
        assert_eq!(
            wrapper_message(&exists, Some("/a")),
            "Node already exists: /a"
        );
        let acl = ClientError::Zk(ErrorCode::InvalidAcl);
        assert_eq!(wrapper_message(&acl, None), "Acl is not valid : null");
        assert_eq!(keeper_message(&acl, None), "KeeperErrorCode = InvalidACL");
        let lost = ClientError::ConnectionLoss;
        assert_eq!(
            wrapper_message(&lost, Some("/")),
            "KeeperErrorCode = ConnectionLoss for /"
        );
        let auth = ClientError::Zk(ErrorCode::AuthFailed);
        assert_eq!(
            wrapper_message(&auth, Some("/x")),
            "KeeperErrorCode = AuthFailed for /x"
        );
        let nw = ClientError::Zk(ErrorCode::NoWatcher);
        assert_eq!(
            wrapper_message(&nw, Some("/x")),
            "KeeperErrorCode = No such watcher for /x"
        );
        let rt = ClientError::Zk(ErrorCode::RequestTimeout);
        assert_eq!(
            keeper_message(&rt, None),
            "KeeperErrorCode = Unknown error REQUESTTIMEOUT"
        );
    }

    #[test]
    fn path_validation_messages() {
        assert_eq!(validate_path("/"), Ok(()));
        assert_eq!(validate_path("/a/b.c/..d"), Ok(()));
        assert_eq!(validate_path("").unwrap_err(), "Path length must be > 0");
        assert_eq!(
            validate_path("noslash").unwrap_err(),
            "Path must start with / character"
        );
        assert_eq!(
            validate_path("/a/").unwrap_err(),
            "Path must not end with / character"
        );
        assert_eq!(
            validate_path("/a//b").unwrap_err(),
            "Invalid path string \"/a//b\" caused by empty node name specified @3"
        );
        assert_eq!(
            validate_path("/a/../b").unwrap_err(),
            "Invalid path string \"/a/../b\" caused by relative paths not allowed @4"
        );
        assert_eq!(
            validate_path("/a/.").unwrap_err(),
            "Invalid path string \"/a/.\" caused by relative paths not allowed @3"
        );
        assert_eq!(
            validate_path("/a\u{1}").unwrap_err(),
            "Invalid path string \"/a\u{1}\" caused by invalid character @2"
        );
        assert_eq!(validate_create_path("/b/", true), Ok(()));
        assert!(validate_create_path("/b/", false).is_err());
    }

    #[test]
    fn java_list_and_sort() {
        let mut v = vec!["b".to_string(), "a".to_string(), "zookeeper".to_string()];
        java_sort(&mut v);
        assert_eq!(java_list(&v), "[a, b, zookeeper]");
        assert_eq!(java_list(&[]), "[]");
    }
}
