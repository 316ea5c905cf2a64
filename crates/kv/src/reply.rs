//! Replies as the keyspace and the connection produce them, and their
//! encoding in RESP2 or RESP3 (the connection's protocol, chosen by
//! HELLO). Replies are built without knowing the protocol; the few types
//! RESP2 lacks (null, map, set, verbatim string) take their RESP2 forms
//! when written, as Redis writes them.

use std::borrow::Cow;

/// The protocol a connection speaks (HELLO 2 / HELLO 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

impl Protocol {
    pub fn version(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+text`.
    Status(Cow<'static, str>),
    /// `-text`: the text starts with the error code (`ERR`, `WRONGTYPE`).
    Error(Cow<'static, str>),
    Integer(i64),
    Bulk(Vec<u8>),
    /// A missing value: RESP2 `$-1`, RESP3 `_`.
    Null,
    /// A missing array (EXEC after a touched WATCH): RESP2 `*-1`, RESP3 `_`.
    NullArray,
    Array(Vec<Reply>),
    /// RESP3 `%`; RESP2 a flat array of keys and values.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 `~`; RESP2 an array.
    Set(Vec<Reply>),
    /// RESP3 `=` with a 3-letter format (`txt`); RESP2 a bulk string.
    Verbatim(Vec<u8>),
}

pub const OK: Reply = Reply::Status(Cow::Borrowed("OK"));
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const SYNTAX: &str = "ERR syntax error";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const OVERFLOW: &str = "ERR increment or decrement would overflow";

impl Reply {
    pub fn ok() -> Reply {
        OK
    }

    pub fn status(text: &'static str) -> Reply {
        Reply::Status(Cow::Borrowed(text))
    }

    pub fn error(text: &'static str) -> Reply {
        Reply::Error(Cow::Borrowed(text))
    }

    /// An error whose text is made at run time (it must not contain CR or
    /// LF: `encode` replaces them with spaces, as Redis does).
    pub fn error_owned(text: String) -> Reply {
        Reply::Error(Cow::Owned(text))
    }

    pub fn wrong_type() -> Reply {
        Reply::error(WRONGTYPE)
    }

    pub fn syntax() -> Reply {
        Reply::error(SYNTAX)
    }

    pub fn not_integer() -> Reply {
        Reply::error(NOT_INTEGER)
    }

    pub fn bulk(bytes: &[u8]) -> Reply {
        Reply::Bulk(bytes.to_vec())
    }

    pub fn bulk_integer(value: i64) -> Reply {
        Reply::Bulk(value.to_string().into_bytes())
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Appends the reply in `protocol` to `out`.
    pub fn encode(&self, protocol: Protocol, out: &mut Vec<u8>) {
        match self {
            Reply::Status(text) => line(out, b'+', text.as_bytes()),
            Reply::Error(text) => line(out, b'-', text.as_bytes()),
            Reply::Integer(value) => header(out, b':', *value),
            Reply::Bulk(bytes) => {
                header(out, b'$', bytes.len() as i64);
                out.extend_from_slice(bytes);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Null => match protocol {
                Protocol::Resp2 => out.extend_from_slice(b"$-1\r\n"),
                Protocol::Resp3 => out.extend_from_slice(b"_\r\n"),
            },
            Reply::NullArray => match protocol {
                Protocol::Resp2 => out.extend_from_slice(b"*-1\r\n"),
                Protocol::Resp3 => out.extend_from_slice(b"_\r\n"),
            },
            Reply::Array(items) => {
                header(out, b'*', items.len() as i64);
                for item in items {
                    item.encode(protocol, out);
                }
            }
            Reply::Map(pairs) => {
                match protocol {
                    Protocol::Resp2 => header(out, b'*', 2 * pairs.len() as i64),
                    Protocol::Resp3 => header(out, b'%', pairs.len() as i64),
                }
                for (key, value) in pairs {
                    key.encode(protocol, out);
                    value.encode(protocol, out);
                }
            }
            Reply::Set(items) => {
                match protocol {
                    Protocol::Resp2 => header(out, b'*', items.len() as i64),
                    Protocol::Resp3 => header(out, b'~', items.len() as i64),
                }
                for item in items {
                    item.encode(protocol, out);
                }
            }
            Reply::Verbatim(text) => match protocol {
                Protocol::Resp2 => Reply::Bulk(text.clone()).encode(protocol, out),
                Protocol::Resp3 => {
                    header(out, b'=', text.len() as i64 + 4);
                    out.extend_from_slice(b"txt:");
                    out.extend_from_slice(text);
                    out.extend_from_slice(b"\r\n");
                }
            },
        }
    }

    /// The reply in `protocol` as bytes (tests, small replies).
    pub fn to_bytes(&self, protocol: Protocol) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(protocol, &mut out);
        out
    }
}

fn header(out: &mut Vec<u8>, kind: u8, value: i64) {
    out.push(kind);
    let mut buffer = itoa_buffer();
    out.extend_from_slice(format_i64(value, &mut buffer));
    out.extend_from_slice(b"\r\n");
}

/// A status or error line: CR and LF in the text become spaces, so a
/// reply can never break the framing.
fn line(out: &mut Vec<u8>, kind: u8, text: &[u8]) {
    out.push(kind);
    out.extend(
        text.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

fn itoa_buffer() -> [u8; 20] {
    [0; 20]
}

/// Decimal digits of `value` in `buffer` (no allocation on the reply path).
pub fn format_i64(value: i64, buffer: &mut [u8; 20]) -> &[u8] {
    let negative = value < 0;
    let mut magnitude = value.unsigned_abs();
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = b'0' + (magnitude % 10) as u8;
        magnitude /= 10;
        if magnitude == 0 {
            break;
        }
    }
    if negative {
        at -= 1;
        buffer[at] = b'-';
    }
    &buffer[at..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp2_and_resp3_forms() {
        let r2 = Protocol::Resp2;
        let r3 = Protocol::Resp3;
        assert_eq!(Reply::ok().to_bytes(r2), b"+OK\r\n");
        assert_eq!(Reply::Integer(-42).to_bytes(r2), b":-42\r\n");
        assert_eq!(
            Reply::Integer(i64::MIN).to_bytes(r2),
            b":-9223372036854775808\r\n"
        );
        assert_eq!(Reply::bulk(b"hi").to_bytes(r2), b"$2\r\nhi\r\n");
        assert_eq!(Reply::Null.to_bytes(r2), b"$-1\r\n");
        assert_eq!(Reply::Null.to_bytes(r3), b"_\r\n");
        assert_eq!(Reply::NullArray.to_bytes(r2), b"*-1\r\n");
        assert_eq!(Reply::NullArray.to_bytes(r3), b"_\r\n");
        let map = Reply::Map(vec![(Reply::bulk(b"f"), Reply::bulk(b"v"))]);
        assert_eq!(map.to_bytes(r2), b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(map.to_bytes(r3), b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n");
        let set = Reply::Set(vec![Reply::bulk(b"a")]);
        assert_eq!(set.to_bytes(r2), b"*1\r\n$1\r\na\r\n");
        assert_eq!(set.to_bytes(r3), b"~1\r\n$1\r\na\r\n");
        let text = Reply::Verbatim(b"x".to_vec());
        assert_eq!(text.to_bytes(r2), b"$1\r\nx\r\n");
        assert_eq!(text.to_bytes(r3), b"=5\r\ntxt:x\r\n");
    }

    #[test]
    fn line_breaks_in_errors_become_spaces() {
        let reply = Reply::error_owned("ERR a\r\nb".into());
        assert_eq!(reply.to_bytes(Protocol::Resp2), b"-ERR a  b\r\n");
    }
}
