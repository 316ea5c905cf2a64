//! Decoding requests: RESP multibulk arrays (`*N\r\n$len\r\n...`) and
//! inline commands (a line of space-separated words, with Redis's
//! quoting, as redis-cli and telnet send them).
//!
//! A frame is checked whole before anything is allocated for it: every
//! header is read and every length checked against `Limits` while the
//! frame is scanned; arguments are copied out only once the whole frame
//! is in the buffer. A partial frame is `None` (read more), never an
//! error, and the scan resumes where it stopped, so a frame trickling in
//! byte by byte costs linear time. Errors carry Redis's texts; after one
//! the connection replies with it and closes, as Redis does.

use crate::reply::Reply;

/// Redis's PROTO_INLINE_MAX_SIZE: the longest inline command, and the
/// longest header line of a multibulk frame.
pub const INLINE_BYTES_MAX: usize = 64 * 1024;

/// Bounds on one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest argument (Redis's proto-max-bulk-len, 512 MiB there;
    /// Keel's default is far lower: a write must fit in one Raft entry).
    pub bulk_bytes_max: usize,
    /// The most arguments of one command.
    pub args_max: usize,
    /// The most bytes of one whole command frame.
    pub command_bytes_max: usize,
}

/// Keel KV's default longest argument: 1 MiB (ZooKeeper's znode bound).
pub const BULK_BYTES_MAX_DEFAULT: usize = 1 << 20;
/// Keel KV's default argument count bound (Redis 6's multibulk bound).
pub const ARGS_MAX_DEFAULT: usize = 1024 * 1024;
/// Keel KV's default bound on one command frame: 8 MiB.
pub const COMMAND_BYTES_MAX_DEFAULT: usize = 8 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            bulk_bytes_max: BULK_BYTES_MAX_DEFAULT,
            args_max: ARGS_MAX_DEFAULT,
            command_bytes_max: COMMAND_BYTES_MAX_DEFAULT,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("Protocol error: too big inline request")]
    InlineTooBig,
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("Protocol error: too big mbulk count string")]
    CountLineTooBig,
    #[error("Protocol error: invalid multibulk length")]
    MultibulkLength,
    #[error("Protocol error: too big bulk count string")]
    BulkLineTooBig,
    #[error("Protocol error: expected '$', got '{}'", *.0 as char)]
    ExpectedDollar(u8),
    #[error("Protocol error: invalid bulk length")]
    BulkLength,
    #[error("Protocol error: command frame larger than {0} bytes")]
    CommandTooBig(usize),
    #[error("Protocol error: NUL byte in inline request")]
    InlineNul,
}

impl ProtocolError {
    /// The error reply sent before the connection closes.
    pub fn reply(&self) -> Reply {
        Reply::error_owned(format!("ERR {self}"))
    }
}

/// One decoded request: its arguments (empty for an empty line or `*0`,
/// which Redis ignores without a reply).
pub type Args = Vec<Vec<u8>>;

/// A resumable decoder over a connection's input buffer. The caller keeps
/// the unconsumed bytes at the front of its buffer and removes a frame's
/// bytes once `decode` returns it.
#[derive(Debug, Default)]
pub struct Decoder {
    limits: Limits,
    scan: Option<Scan>,
}

/// How far a multibulk frame has been checked.
#[derive(Debug, Clone, Copy)]
struct Scan {
    /// Arguments the frame declares.
    count: usize,
    /// Arguments checked so far.
    seen: usize,
    /// Bytes of the frame checked so far.
    at: usize,
}

impl Decoder {
    pub fn new(limits: Limits) -> Decoder {
        assert!(limits.bulk_bytes_max > 0 && limits.args_max > 0);
        assert!(limits.command_bytes_max >= limits.bulk_bytes_max);
        Decoder { limits, scan: None }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The next request at the front of `buffer` and the bytes it takes,
    /// `None` if it is not complete yet.
    pub fn decode(&mut self, buffer: &[u8]) -> Result<Option<(Args, usize)>, ProtocolError> {
        match buffer.first() {
            None => Ok(None),
            Some(b'*') => self.multibulk(buffer),
            Some(_) => inline(buffer),
        }
    }

    fn multibulk(&mut self, buffer: &[u8]) -> Result<Option<(Args, usize)>, ProtocolError> {
        let mut scan = match self.scan {
            Some(scan) => scan,
            None => {
                let Some((line, next)) = header_line(buffer, 0)? else {
                    if buffer.len() > INLINE_BYTES_MAX {
                        return Err(ProtocolError::CountLineTooBig);
                    }
                    return Ok(None);
                };
                let count = parse_i64(&line[1..]).ok_or(ProtocolError::MultibulkLength)?;
                if count > self.limits.args_max as i64 {
                    return Err(ProtocolError::MultibulkLength);
                }
                if count <= 0 {
                    return Ok(Some((Vec::new(), next)));
                }
                Scan {
                    count: count as usize,
                    seen: 0,
                    at: next,
                }
            }
        };
        while scan.seen < scan.count {
            let Some((line, next)) = header_line(buffer, scan.at)? else {
                if buffer.len() - scan.at > INLINE_BYTES_MAX {
                    return Err(ProtocolError::BulkLineTooBig);
                }
                self.scan = Some(scan);
                return Ok(None);
            };
            if line[0] != b'$' {
                return Err(ProtocolError::ExpectedDollar(line[0]));
            }
            let len = parse_i64(&line[1..]).ok_or(ProtocolError::BulkLength)?;
            if len < 0 || len as usize > self.limits.bulk_bytes_max {
                return Err(ProtocolError::BulkLength);
            }
            let end = next + len as usize + 2;
            if end > self.limits.command_bytes_max {
                return Err(ProtocolError::CommandTooBig(self.limits.command_bytes_max));
            }
            if end > buffer.len() {
                self.scan = Some(scan);
                return Ok(None);
            }
            scan.at = end;
            scan.seen += 1;
        }
        self.scan = None;
        Ok(Some((copy_args(buffer, scan.count), scan.at)))
    }
}

/// The line at `at` (up to its `\r`, which must be followed by one more
/// byte, the `\n` Redis skips unchecked) and the offset after it.
fn header_line(buffer: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let rest = &buffer[at..];
    let window = &rest[..rest.len().min(INLINE_BYTES_MAX + 1)];
    match window.iter().position(|&b| b == b'\r') {
        Some(cr) if cr + 1 < rest.len() => {
            // An empty line is its `\r` alone (Redis then names that byte).
            Ok(Some((&rest[..cr.max(1)], at + cr + 2)))
        }
        _ => Ok(None),
    }
}

/// Copies the arguments of a checked frame out of the buffer.
fn copy_args(buffer: &[u8], count: usize) -> Args {
    let mut args = Vec::with_capacity(count);
    let (_, mut at) = header_line(buffer, 0).expect("checked").expect("checked");
    for _ in 0..count {
        let (line, next) = header_line(buffer, at).expect("checked").expect("checked");
        let len = parse_i64(&line[1..]).expect("checked") as usize;
        args.push(buffer[next..next + len].to_vec());
        at = next + len + 2;
    }
    args
}

/// Redis's string2ll: optional '-', no '+', no leading zeros (but "0"),
/// no spaces, within i64.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    if bytes == b"0" {
        return Some(0);
    }
    let (negative, digits) = match bytes[0] {
        b'-' => (true, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() || !(b'1'..=b'9').contains(&digits[0]) {
        return None;
    }
    let mut value: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add((b - b'0') as u64)?;
    }
    if negative {
        if value > i64::MAX as u64 + 1 {
            return None;
        }
        Some((value as i64).wrapping_neg())
    } else {
        i64::try_from(value).ok()
    }
}

/// An inline command: the line up to `\n` (a `\r` before it is dropped),
/// split as Redis's sdssplitargs splits it.
fn inline(buffer: &[u8]) -> Result<Option<(Args, usize)>, ProtocolError> {
    let window = &buffer[..buffer.len().min(INLINE_BYTES_MAX + 1)];
    // Redis finds the line's end with strchr, which stops at a NUL byte:
    // a line with one never ends for it, and the connection waits until
    // the buffer passes 64 KB ("too big inline request"). Here it is
    // refused as soon as the NUL is seen, with its own error.
    let end = window.iter().position(|&b| b == b'\n' || b == 0);
    if end.is_some_and(|at| window[at] == 0) {
        return Err(ProtocolError::InlineNul);
    }
    let Some(newline) = end else {
        if buffer.len() > INLINE_BYTES_MAX {
            return Err(ProtocolError::InlineTooBig);
        }
        return Ok(None);
    };
    let mut line = &buffer[..newline];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    let args = split_args(line).ok_or(ProtocolError::UnbalancedQuotes)?;
    Ok(Some((args, newline + 1)))
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex_value(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Words of an inline line: blanks separate them; "double quotes" take
/// `\n \r \t \b \a \xHH` and `\<any>` escapes, 'single quotes' only `\'`;
/// a closing quote must be followed by a blank or the end. `None` for
/// unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Args> {
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && is_space(line[i]) {
            i += 1;
        }
        if i >= line.len() {
            return Some(args);
        }
        let mut word = Vec::new();
        let (mut double, mut single) = (false, false);
        loop {
            let c = at(i);
            if double {
                if c == b'\\' && at(i + 1) == b'x' {
                    if let (Some(high), Some(low)) = (hex_value(at(i + 2)), hex_value(at(i + 3))) {
                        word.push(high * 16 + low);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < line.len() {
                    word.push(match at(i + 1) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                    i += 2;
                    continue;
                } else if c == b'"' {
                    if i + 1 < line.len() && !is_space(at(i + 1)) {
                        return None;
                    }
                    i += 1;
                    break;
                } else if i >= line.len() {
                    return None;
                }
                word.push(c);
                i += 1;
            } else if single {
                if c == b'\\' && at(i + 1) == b'\'' {
                    word.push(b'\'');
                    i += 2;
                    continue;
                } else if c == b'\'' {
                    if i + 1 < line.len() && !is_space(at(i + 1)) {
                        return None;
                    }
                    i += 1;
                    break;
                } else if i >= line.len() {
                    return None;
                }
                word.push(c);
                i += 1;
            } else {
                if i >= line.len() || matches!(c, b' ' | b'\n' | b'\r' | b'\t' | 0) {
                    i += 1;
                    break;
                }
                match c {
                    b'"' => double = true,
                    b'\'' => single = true,
                    _ => word.push(c),
                }
                i += 1;
            }
        }
        args.push(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Args {
        list.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_multibulk_frame_decodes_only_once_complete() {
        let frame = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*1\r\n$4\r\nPING\r\n";
        let first = 31;
        for cut in 0..first {
            let mut decoder = Decoder::default();
            assert_eq!(decoder.decode(&frame[..cut]), Ok(None), "cut at {cut}");
        }
        let mut decoder = Decoder::default();
        let (args, used) = decoder.decode(frame).unwrap().unwrap();
        assert_eq!(args, words(&["SET", "k", "hello"]));
        assert_eq!(used, first);
        let (args, used) = decoder.decode(&frame[first..]).unwrap().unwrap();
        assert_eq!(args, words(&["PING"]));
        assert_eq!(first + used, frame.len());
    }

    #[test]
    fn a_frame_arriving_byte_by_byte_resumes_its_scan() {
        let frame = b"*2\r\n$4\r\nECHO\r\n$3\r\nabc\r\n";
        let mut decoder = Decoder::default();
        for end in 1..frame.len() {
            assert_eq!(decoder.decode(&frame[..end]), Ok(None));
        }
        let (args, _) = decoder.decode(frame).unwrap().unwrap();
        assert_eq!(args, words(&["ECHO", "abc"]));
    }

    #[test]
    fn limits_and_malformed_headers_are_redis_errors() {
        let limits = Limits {
            bulk_bytes_max: 4,
            args_max: 2,
            command_bytes_max: 64,
        };
        let error = |bytes: &[u8]| Decoder::new(limits).decode(bytes).unwrap_err();
        assert_eq!(error(b"*3\r\n"), ProtocolError::MultibulkLength);
        assert_eq!(error(b"*x\r\n"), ProtocolError::MultibulkLength);
        assert_eq!(error(b"*1\r\n$5\r\n"), ProtocolError::BulkLength);
        assert_eq!(error(b"*1\r\n$-1\r\n"), ProtocolError::BulkLength);
        assert_eq!(error(b"*1\r\n:5\r\n"), ProtocolError::ExpectedDollar(b':'));
        assert_eq!(
            ProtocolError::ExpectedDollar(b':').reply(),
            Reply::error_owned("ERR Protocol error: expected '$', got ':'".into())
        );
        let mut decoder = Decoder::default();
        assert_eq!(decoder.decode(b"*0\r\nrest"), Ok(Some((Vec::new(), 4))));
        assert_eq!(decoder.decode(b"*-1\r\n"), Ok(Some((Vec::new(), 5))));
        let long = vec![b'a'; INLINE_BYTES_MAX + 1];
        assert_eq!(
            Decoder::default().decode(&long),
            Err(ProtocolError::InlineTooBig)
        );
        let mut star = b"*".to_vec();
        star.extend(vec![b'1'; INLINE_BYTES_MAX + 1]);
        assert_eq!(
            Decoder::default().decode(&star),
            Err(ProtocolError::CountLineTooBig)
        );
    }

    #[test]
    fn the_whole_frame_is_bounded() {
        let limits = Limits {
            bulk_bytes_max: 8,
            args_max: 100,
            command_bytes_max: 30,
        };
        let mut decoder = Decoder::new(limits);
        let frame = b"*3\r\n$8\r\naaaaaaaa\r\n$8\r\nbbbbbbbb\r\n$1\r\nc\r\n";
        assert_eq!(decoder.decode(frame), Err(ProtocolError::CommandTooBig(30)));
    }

    #[test]
    fn inline_commands_split_like_redis() {
        let mut decoder = Decoder::default();
        let (args, used) = decoder
            .decode(b"set k \"a b\\x41\\n\"\r\nget")
            .unwrap()
            .unwrap();
        assert_eq!(
            args,
            vec![b"set".to_vec(), b"k".to_vec(), b"a bA\n".to_vec()]
        );
        assert_eq!(used, 19);
        assert_eq!(decoder.decode(b"get"), Ok(None));
        assert_eq!(
            split_args(b"  a  'b c' 'it\\'s'  "),
            Some(words(&["a", "b c", "it's"]))
        );
        assert_eq!(split_args(b"\"unterminated"), None);
        assert_eq!(split_args(b"\"a\"b"), None);
        assert_eq!(split_args(b""), Some(Vec::new()));
        assert_eq!(
            decoder.decode(b"\"x\r\n"),
            Err(ProtocolError::UnbalancedQuotes)
        );
        assert_eq!(decoder.decode(b"\n"), Ok(Some((Vec::new(), 1))));
        // A NUL byte before the line's end: refused whether or not the
        // end has come, never split into words.
        for line in [
            &b"ECHO a\0b\r\n"[..],
            b"ECHO a\0",
            b"\0PING\r\n",
            b"ECHO \"x\0y\"\n",
        ] {
            assert_eq!(
                decoder.decode(line),
                Err(ProtocolError::InlineNul),
                "{line:?}"
            );
        }
        // After the line's end it belongs to the next line.
        assert_eq!(
            decoder.decode(b"PING\r\n\0"),
            Ok(Some((words(&["PING"]), 6)))
        );
        // Words of an inline line are bounded by its length, not by
        // args_max (Redis has no count for them either).
        let mut small = Decoder::new(Limits {
            bulk_bytes_max: 8,
            args_max: 2,
            command_bytes_max: 64,
        });
        let (args, _) = small.decode(b"a b c d e\r\n").unwrap().unwrap();
        assert_eq!(args.len(), 5);
    }

    #[test]
    fn integers_parse_as_redis_string2ll() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b"01",
            b"-0",
            b" 1",
            b"1 ",
            b"9223372036854775808",
            b"1.5",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
