//! Jute primitives: big-endian integers, one-byte booleans, length-prefixed
//! buffers, strings and vectors, exactly as ZooKeeper's
//! `BinaryInputArchive` / `BinaryOutputArchive` lay them out.
//!
//! Decoding is defensive: every length read from the wire is checked against
//! the bytes that are actually left *before* anything is allocated, so a
//! peer claiming a 2 GB string gets an error after reading four bytes.

use crate::error::{JuteError, Result};

/// Length prefix that ZooKeeper writes for a null buffer, string or vector.
pub const NULL_LENGTH: i32 = -1;

/// Bytes taken by an `int` on the wire.
pub const I32_BYTES: usize = 4;

/// Bytes taken by a `long` on the wire.
pub const I64_BYTES: usize = 8;

/// Bytes taken by a `boolean` on the wire.
pub const BOOL_BYTES: usize = 1;

/// Bytes taken by the length prefix of a buffer, string or vector.
pub const LENGTH_PREFIX_BYTES: usize = I32_BYTES;

/// A cursor over a borrowed byte slice that decodes Jute primitives.
///
/// It never panics: running out of input yields [`JuteError::Truncated`].
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Consumes and returns everything that is left (used by the one
    /// ZooKeeper op whose body is not a Jute record: `deleteContainer`).
    pub fn read_rest(&mut self) -> &'a [u8] {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        self.pos = self.buf.len();
        rest
    }

    /// Consumes exactly `n` bytes, failing if fewer remain.
    pub fn read_bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let remaining = self.remaining();
        if n > remaining {
            return Err(JuteError::Truncated {
                needed: n,
                remaining,
            });
        }
        let end = self.pos + n;
        let bytes = self
            .buf
            .get(self.pos..end)
            .ok_or(JuteError::Malformed("reader position out of range"))?;
        self.pos = end;
        Ok(bytes)
    }

    fn read_array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let bytes = self.read_bytes(N)?;
        let mut array = [0u8; N];
        array.copy_from_slice(bytes);
        Ok(array)
    }

    /// Reads a big-endian `int`.
    pub fn read_i32(&mut self) -> Result<i32> {
        self.read_array().map(i32::from_be_bytes)
    }

    /// Reads a big-endian `long`.
    pub fn read_i64(&mut self) -> Result<i64> {
        self.read_array().map(i64::from_be_bytes)
    }

    /// Reads a one-byte `boolean`. Like Java's `DataInput.readBoolean`, any
    /// non-zero byte is `true`.
    pub fn read_bool(&mut self) -> Result<bool> {
        self.read_array::<1>().map(|[b]| b != 0)
    }

    /// Reads a length prefix: `Ok(None)` for the null marker `-1`, an error
    /// for any other negative value.
    pub fn read_length(&mut self) -> Result<Option<usize>> {
        match self.read_i32()? {
            NULL_LENGTH => Ok(None),
            len if len < 0 => Err(JuteError::NegativeLength(len)),
            len => usize::try_from(len)
                .map(Some)
                .map_err(|_| JuteError::NegativeLength(len)),
        }
    }

    /// Reads a `buffer`; the null marker decodes as `None`.
    pub fn read_buffer(&mut self) -> Result<Option<Vec<u8>>> {
        match self.read_length()? {
            None => Ok(None),
            Some(len) => self.read_bytes(len).map(|b| Some(b.to_vec())),
        }
    }

    /// Reads a `ustring`; the null marker decodes as the empty string.
    ///
    /// Unlike Java (which substitutes U+FFFD), invalid UTF-8 is rejected:
    /// paths must round-trip byte for byte.
    pub fn read_string(&mut self) -> Result<String> {
        let Some(len) = self.read_length()? else {
            return Ok(String::new());
        };
        let bytes = self.read_bytes(len)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| JuteError::InvalidUtf8)
    }

    /// Reads a `vector<ustring>`; the null marker decodes as empty.
    pub fn read_string_vec(&mut self) -> Result<Vec<String>> {
        self.read_vec()
    }

    /// Reads a vector of any field type, bounding the element count by what
    /// the remaining bytes could possibly encode before allocating.
    pub(crate) fn read_vec<T: Field>(&mut self) -> Result<Vec<T>> {
        let Some(count) = self.read_length()? else {
            return Ok(Vec::new());
        };
        if count > self.remaining() / T::MIN_WIRE_SIZE {
            return Err(JuteError::VectorTooLong(count));
        }
        let mut items = Vec::with_capacity(count);
        for _ in 0..count {
            items.push(T::read_field(self)?);
        }
        Ok(items)
    }
}

/// Converts an in-memory length to its wire form.
///
/// # Panics
/// If `len` exceeds `i32::MAX`. Such a value can never be framed (frames are
/// capped far below that), so reaching this is a caller bug, not bad input.
fn wire_length(len: usize) -> i32 {
    i32::try_from(len).expect("jute length exceeds i32::MAX")
}

/// Appends a big-endian `int`.
pub fn write_i32(out: &mut Vec<u8>, value: i32) {
    out.extend_from_slice(&value.to_be_bytes());
}

/// Appends a big-endian `long`.
pub fn write_i64(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(&value.to_be_bytes());
}

/// Appends a `boolean` as one byte, 0 or 1.
pub fn write_bool(out: &mut Vec<u8>, value: bool) {
    out.push(u8::from(value));
}

/// Appends a `buffer`; `None` is written as the null marker `-1`.
///
/// # Panics
/// If the buffer is longer than `i32::MAX` bytes.
pub fn write_buffer(out: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        None => write_i32(out, NULL_LENGTH),
        Some(bytes) => {
            write_i32(out, wire_length(bytes.len()));
            out.extend_from_slice(bytes);
        }
    }
}

/// Appends a `ustring` (length-prefixed UTF-8).
///
/// # Panics
/// If the string is longer than `i32::MAX` bytes.
pub fn write_string(out: &mut Vec<u8>, value: &str) {
    write_buffer(out, Some(value.as_bytes()));
}

/// Appends a `vector<ustring>`.
///
/// # Panics
/// If the vector has more than `i32::MAX` elements.
pub fn write_string_vec(out: &mut Vec<u8>, values: &[String]) {
    write_vec(out, values);
}

pub(crate) fn write_vec<T: Field>(out: &mut Vec<u8>, values: &[T]) {
    write_i32(out, wire_length(values.len()));
    for value in values {
        value.write_field(out);
    }
}

/// A Jute record: a struct serialized as the concatenation of its fields.
pub trait Record: Sized {
    /// Appends the record's wire form to `out`.
    fn write(&self, out: &mut Vec<u8>);

    /// Decodes one record from the reader, leaving it after the record.
    fn read(r: &mut Reader<'_>) -> Result<Self, JuteError>;

    /// The record's wire form as a fresh vector.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write(&mut out);
        out
    }

    /// Decodes a record from the start of `buf`. Trailing bytes are ignored,
    /// as ZooKeeper ignores them.
    fn from_bytes(buf: &[u8]) -> Result<Self, JuteError> {
        Self::read(&mut Reader::new(buf))
    }
}

/// Anything that can appear as a field of a record or element of a vector.
///
/// Crate-private glue that lets the `jute_record!` macro derive both the
/// codec and a lower bound on the encoded size of every record.
pub(crate) trait Field: Sized {
    /// Fewest bytes any value of this type occupies on the wire. Always at
    /// least 1, so vector counts can be bounded by `remaining / MIN_WIRE_SIZE`.
    const MIN_WIRE_SIZE: usize;

    fn write_field(&self, out: &mut Vec<u8>);

    fn read_field(r: &mut Reader<'_>) -> Result<Self>;
}

impl Field for i32 {
    const MIN_WIRE_SIZE: usize = I32_BYTES;

    fn write_field(&self, out: &mut Vec<u8>) {
        write_i32(out, *self);
    }

    fn read_field(r: &mut Reader<'_>) -> Result<Self> {
        r.read_i32()
    }
}

impl Field for i64 {
    const MIN_WIRE_SIZE: usize = I64_BYTES;

    fn write_field(&self, out: &mut Vec<u8>) {
        write_i64(out, *self);
    }

    fn read_field(r: &mut Reader<'_>) -> Result<Self> {
        r.read_i64()
    }
}

impl Field for bool {
    const MIN_WIRE_SIZE: usize = BOOL_BYTES;

    fn write_field(&self, out: &mut Vec<u8>) {
        write_bool(out, *self);
    }

    fn read_field(r: &mut Reader<'_>) -> Result<Self> {
        r.read_bool()
    }
}

impl Field for String {
    const MIN_WIRE_SIZE: usize = LENGTH_PREFIX_BYTES;

    fn write_field(&self, out: &mut Vec<u8>) {
        write_string(out, self);
    }

    fn read_field(r: &mut Reader<'_>) -> Result<Self> {
        r.read_string()
    }
}

/// A nullable `buffer` (znode data): ZooKeeper distinguishes null from empty.
impl Field for Option<Vec<u8>> {
    const MIN_WIRE_SIZE: usize = LENGTH_PREFIX_BYTES;

    fn write_field(&self, out: &mut Vec<u8>) {
        write_buffer(out, self.as_deref());
    }

    fn read_field(r: &mut Reader<'_>) -> Result<Self> {
        r.read_buffer()
    }
}

/// A non-null `buffer` (passwords, auth tokens): null decodes as empty.
impl Field for Vec<u8> {
    const MIN_WIRE_SIZE: usize = LENGTH_PREFIX_BYTES;

    fn write_field(&self, out: &mut Vec<u8>) {
        write_buffer(out, Some(self));
    }

    fn read_field(r: &mut Reader<'_>) -> Result<Self> {
        r.read_buffer().map(Option::unwrap_or_default)
    }
}

impl Field for Vec<String> {
    const MIN_WIRE_SIZE: usize = LENGTH_PREFIX_BYTES;

    fn write_field(&self, out: &mut Vec<u8>) {
        write_vec(out, self);
    }

    fn read_field(r: &mut Reader<'_>) -> Result<Self> {
        r.read_vec()
    }
}

/// A `vector<Record>`; null decodes as empty.
impl<T: Record + Field> Field for Vec<T> {
    const MIN_WIRE_SIZE: usize = LENGTH_PREFIX_BYTES;

    fn write_field(&self, out: &mut Vec<u8>) {
        write_vec(out, self);
    }

    fn read_field(r: &mut Reader<'_>) -> Result<Self> {
        r.read_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_are_big_endian() {
        let mut out = Vec::new();
        write_i32(&mut out, 0x0102_0304);
        write_i64(&mut out, -2);
        write_bool(&mut out, true);
        write_bool(&mut out, false);
        assert_eq!(
            out,
            [1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 1, 0]
        );
        let mut r = Reader::new(&out);
        assert_eq!(r.read_i32(), Ok(0x0102_0304));
        assert_eq!(r.read_i64(), Ok(-2));
        assert_eq!(r.read_bool(), Ok(true));
        assert_eq!(r.read_bool(), Ok(false));
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.position(), 14);
    }

    #[test]
    fn any_nonzero_byte_is_true() {
        assert_eq!(Reader::new(&[0x7f]).read_bool(), Ok(true));
    }

    #[test]
    fn null_markers() {
        let null = NULL_LENGTH.to_be_bytes();
        assert_eq!(Reader::new(&null).read_buffer(), Ok(None));
        assert_eq!(Reader::new(&null).read_string(), Ok(String::new()));
        assert_eq!(Reader::new(&null).read_string_vec(), Ok(Vec::new()));
        let mut out = Vec::new();
        write_buffer(&mut out, None);
        assert_eq!(out, null);
    }

    #[test]
    fn strings_and_buffers_round_trip() {
        let mut out = Vec::new();
        write_string(&mut out, "/zk");
        write_buffer(&mut out, Some(b""));
        write_string_vec(&mut out, &["a".to_owned(), "bc".to_owned()]);
        assert_eq!(
            out,
            [
                0, 0, 0, 3, b'/', b'z', b'k', 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, b'a', 0, 0, 0, 2,
                b'b', b'c'
            ]
        );
        let mut r = Reader::new(&out);
        assert_eq!(r.read_string().as_deref(), Ok("/zk"));
        assert_eq!(r.read_buffer(), Ok(Some(Vec::new())));
        assert_eq!(
            r.read_string_vec(),
            Ok(vec!["a".to_owned(), "bc".to_owned()])
        );
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn truncated_primitives() {
        assert_eq!(
            Reader::new(&[0, 0, 0]).read_i32(),
            Err(JuteError::Truncated {
                needed: 4,
                remaining: 3
            })
        );
        assert!(Reader::new(&[0; 7]).read_i64().is_err());
        assert!(Reader::new(&[]).read_bool().is_err());
    }

    #[test]
    fn huge_lengths_fail_without_allocating() {
        let huge = i32::MAX.to_be_bytes();
        assert_eq!(
            Reader::new(&huge).read_buffer(),
            Err(JuteError::Truncated {
                needed: i32::MAX as usize,
                remaining: 0
            })
        );
        assert!(Reader::new(&huge).read_string().is_err());
        assert_eq!(
            Reader::new(&huge).read_string_vec(),
            Err(JuteError::VectorTooLong(i32::MAX as usize))
        );
    }

    #[test]
    fn negative_lengths_other_than_null_are_rejected() {
        let minus_two = (-2i32).to_be_bytes();
        assert_eq!(
            Reader::new(&minus_two).read_buffer(),
            Err(JuteError::NegativeLength(-2))
        );
        assert_eq!(
            Reader::new(&minus_two).read_string_vec(),
            Err(JuteError::NegativeLength(-2))
        );
        let min = i32::MIN.to_be_bytes();
        assert_eq!(
            Reader::new(&min).read_string(),
            Err(JuteError::NegativeLength(i32::MIN))
        );
    }

    #[test]
    fn vector_count_is_bounded_by_element_size() {
        // 3 strings need at least 12 bytes; only 8 follow.
        let mut buf = 3i32.to_be_bytes().to_vec();
        buf.extend_from_slice(&[0; 8]);
        assert_eq!(
            Reader::new(&buf).read_string_vec(),
            Err(JuteError::VectorTooLong(3))
        );
    }

    #[test]
    fn invalid_utf8_is_rejected() {
        let buf = [0, 0, 0, 2, 0xc3, 0x28];
        assert_eq!(Reader::new(&buf).read_string(), Err(JuteError::InvalidUtf8));
    }

    #[test]
    fn read_rest_consumes_everything() {
        let mut r = Reader::new(b"abc");
        assert_eq!(r.read_bytes(1), Ok(&b"a"[..]));
        assert_eq!(r.read_rest(), b"bc");
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.read_rest(), b"");
    }
}
