//! One key and its value, stored compactly: a string's key and value
//! share one blob, kept inside the entry when they are small (no heap
//! allocation, and a lookup reads the key from the table's own memory)
//! and in one allocation otherwise; hashes and sets keep Redis 7.0's
//! small encodings (a listpack-like vector in insertion order for small
//! hashes, a sorted integer vector for small sets of integers) and turn
//! into hash tables past the same thresholds, so their reply orders match
//! Redis's where Redis's are defined by the encoding.

use hashbrown::{HashMap, HashSet};

/// Redis's hash-max-listpack-entries default.
pub const HASH_SMALL_ENTRIES_MAX: usize = 128;
/// Redis's hash-max-listpack-value default (bytes of a field or value).
pub const HASH_SMALL_VALUE_BYTES_MAX: usize = 64;
/// Redis's set-max-intset-entries default.
pub const SET_INTEGERS_MAX: usize = 512;

pub type Bytes = Box<[u8]>;

/// A hash's or a set's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Aggregate {
    /// A small hash: fields in insertion order (Redis's listpack).
    SmallHash(Vec<(Bytes, Bytes)>),
    Hash(HashMap<Bytes, Bytes>),
    /// A small set of integers, ascending (Redis's intset).
    IntSet(Vec<i64>),
    Set(HashSet<Bytes>),
}

/// The type TYPE names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    String,
    Hash,
    Set,
}

impl ValueType {
    pub fn name(self) -> &'static str {
        match self {
            ValueType::String => "string",
            ValueType::Hash => "hash",
            ValueType::Set => "set",
        }
    }
}

/// Bytes of key and value an entry keeps inside itself (Redis keeps
/// strings of up to 44 bytes inside their object, its "embstr"). With
/// it a small string's entry is 56 bytes and needs no allocation; a
/// lookup compares the key without another cache miss.
pub const INLINE_BLOB_BYTES: usize = 22;
// An inline blob's length is a u8.
const _: () = assert!(INLINE_BLOB_BYTES <= u8::MAX as usize);

/// A key, then (strings) its value: inside the entry up to
/// INLINE_BLOB_BYTES, on the heap past it. Always the inline form when it
/// fits, so equal contents compare equal.
#[derive(Clone, PartialEq, Eq)]
enum Blob {
    /// `bytes[len..]` stays zero.
    Inline {
        len: u8,
        bytes: [u8; INLINE_BLOB_BYTES],
    },
    Heap(Bytes),
}

impl Blob {
    fn joined(key: &[u8], value: &[u8]) -> Blob {
        let total = key.len() + value.len();
        if total > INLINE_BLOB_BYTES {
            let mut blob = Vec::with_capacity(total);
            blob.extend_from_slice(key);
            blob.extend_from_slice(value);
            return Blob::Heap(blob.into_boxed_slice());
        }
        let mut bytes = [0u8; INLINE_BLOB_BYTES];
        bytes[..key.len()].copy_from_slice(key);
        bytes[key.len()..total].copy_from_slice(value);
        Blob::Inline {
            len: total as u8,
            bytes,
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Blob::Inline { len, bytes } => &bytes[..*len as usize],
            Blob::Heap(bytes) => bytes,
        }
    }

    /// Bytes allocated outside the entry.
    fn heap_len(&self) -> usize {
        match self {
            Blob::Inline { .. } => 0,
            Blob::Heap(bytes) => bytes.len(),
        }
    }
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_slice()))
    }
}

/// A key with its value, expiry and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key, then (strings) the value.
    blob: Blob,
    /// A hash's or a set's contents; `None` for a string.
    aggregate: Option<Box<Aggregate>>,
    /// The log index of the last change (WATCH compares it).
    pub version: u64,
    /// Unix time in ms when the key expires; 0: never.
    pub expire_at_ms: i64,
    key_len: u32,
}

impl Entry {
    pub fn string(key: &[u8], value: &[u8], version: u64) -> Entry {
        assert!(key.len() <= u32::MAX as usize);
        Entry {
            blob: Blob::joined(key, value),
            aggregate: None,
            version,
            expire_at_ms: 0,
            key_len: key.len() as u32,
        }
    }

    pub fn aggregate(key: &[u8], aggregate: Aggregate, version: u64) -> Entry {
        Entry {
            blob: Blob::joined(key, b""),
            aggregate: Some(Box::new(aggregate)),
            version,
            expire_at_ms: 0,
            key_len: key.len() as u32,
        }
    }

    pub fn key(&self) -> &[u8] {
        &self.blob.as_slice()[..self.key_len as usize]
    }

    pub fn value_type(&self) -> ValueType {
        match self.aggregate.as_deref() {
            None => ValueType::String,
            Some(Aggregate::SmallHash(_) | Aggregate::Hash(_)) => ValueType::Hash,
            Some(Aggregate::IntSet(_) | Aggregate::Set(_)) => ValueType::Set,
        }
    }

    /// A string's value (`None` for other types).
    pub fn string_value(&self) -> Option<&[u8]> {
        match self.aggregate {
            None => Some(&self.blob.as_slice()[self.key_len as usize..]),
            Some(_) => None,
        }
    }

    /// Replaces the value with a string (the key keeps its place).
    pub fn set_string(&mut self, value: &[u8]) {
        self.blob = Blob::joined(self.key(), value);
        self.aggregate = None;
    }

    /// Appends to a string's value.
    pub fn append(&mut self, tail: &[u8]) {
        assert!(self.aggregate.is_none());
        self.blob = match std::mem::replace(&mut self.blob, Blob::joined(b"", b"")) {
            Blob::Heap(heap) => {
                let mut blob = heap.into_vec();
                blob.extend_from_slice(tail);
                Blob::Heap(blob.into_boxed_slice())
            }
            inline @ Blob::Inline { .. } => Blob::joined(inline.as_slice(), tail),
        };
    }

    pub fn aggregate_ref(&self) -> Option<&Aggregate> {
        self.aggregate.as_deref()
    }

    pub fn aggregate_mut(&mut self) -> Option<&mut Aggregate> {
        self.aggregate.as_deref_mut()
    }

    /// A hash's or set's contents together with the version to bump.
    pub fn aggregate_and_version(&mut self) -> Option<(&mut Aggregate, &mut u64)> {
        let version = &mut self.version;
        self.aggregate.as_deref_mut().map(|a| (a, version))
    }

    pub fn expired(&self, now_ms: i64) -> bool {
        self.expire_at_ms != 0 && self.expire_at_ms <= now_ms
    }

    /// Bytes this entry holds besides its table slot (accounting).
    pub fn heap_bytes(&self) -> usize {
        self.blob.heap_len() + self.aggregate.as_deref().map_or(0, Aggregate::heap_bytes)
    }
}

impl Aggregate {
    pub fn len(&self) -> usize {
        match self {
            Aggregate::SmallHash(v) => v.len(),
            Aggregate::Hash(m) => m.len(),
            Aggregate::IntSet(v) => v.len(),
            Aggregate::Set(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn heap_bytes(&self) -> usize {
        const PAIR: usize = 2 * std::mem::size_of::<Bytes>();
        match self {
            Aggregate::SmallHash(v) => v.iter().map(|(f, x)| PAIR + f.len() + x.len()).sum(),
            Aggregate::Hash(m) => m.iter().map(|(f, x)| PAIR + 8 + f.len() + x.len()).sum(),
            Aggregate::IntSet(v) => 8 * v.len(),
            Aggregate::Set(s) => s.iter().map(|m| 24 + m.len()).sum(),
        }
    }

    pub fn new_hash() -> Aggregate {
        Aggregate::SmallHash(Vec::new())
    }

    /// A new set as Redis creates one for its first member.
    pub fn new_set(first: &[u8]) -> Aggregate {
        if integer_member(first).is_some() {
            Aggregate::IntSet(Vec::new())
        } else {
            Aggregate::Set(HashSet::new())
        }
    }

    // ----- hashes

    pub fn hash_get(&self, field: &[u8]) -> Option<&[u8]> {
        match self {
            Aggregate::SmallHash(v) => v.iter().find(|(f, _)| &f[..] == field).map(|(_, x)| &x[..]),
            Aggregate::Hash(m) => m.get(field).map(|x| &x[..]),
            _ => unreachable!("not a hash"),
        }
    }

    /// Turns a small hash into a table when `lengths` (of the arguments
    /// about to be written) hold one over the small-value bound, as
    /// Redis's hashTypeTryConversion does before HSET writes.
    pub fn hash_prepare<'a>(&mut self, lengths: impl IntoIterator<Item = &'a [u8]>) {
        if matches!(self, Aggregate::SmallHash(_))
            && lengths
                .into_iter()
                .any(|a| a.len() > HASH_SMALL_VALUE_BYTES_MAX)
        {
            self.hash_to_table();
        }
    }

    fn hash_to_table(&mut self) {
        if let Aggregate::SmallHash(v) = self {
            let table = std::mem::take(v).into_iter().collect();
            *self = Aggregate::Hash(table);
        }
    }

    /// Sets a field; true if it is new.
    pub fn hash_set(&mut self, field: &[u8], value: &[u8]) -> bool {
        if let Aggregate::SmallHash(v) = self {
            if let Some(pair) = v.iter_mut().find(|(f, _)| &f[..] == field) {
                pair.1 = value.into();
                return false;
            }
            v.push((field.into(), value.into()));
            if v.len() > HASH_SMALL_ENTRIES_MAX {
                self.hash_to_table();
            }
            return true;
        }
        match self {
            Aggregate::Hash(m) => m.insert(field.into(), value.into()).is_none(),
            _ => unreachable!("not a hash"),
        }
    }

    pub fn hash_delete(&mut self, field: &[u8]) -> bool {
        match self {
            Aggregate::SmallHash(v) => match v.iter().position(|(f, _)| &f[..] == field) {
                Some(at) => {
                    v.remove(at);
                    true
                }
                None => false,
            },
            Aggregate::Hash(m) => m.remove(field).is_some(),
            _ => unreachable!("not a hash"),
        }
    }

    /// Fields and values in the encoding's order.
    pub fn hash_pairs(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        match self {
            Aggregate::SmallHash(v) => Box::new(v.iter().map(|(f, x)| (&f[..], &x[..]))),
            Aggregate::Hash(m) => Box::new(m.iter().map(|(f, x)| (&f[..], &x[..]))),
            _ => unreachable!("not a hash"),
        }
    }

    // ----- sets

    pub fn set_contains(&self, member: &[u8]) -> bool {
        match self {
            Aggregate::IntSet(v) => {
                integer_member(member).is_some_and(|i| v.binary_search(&i).is_ok())
            }
            Aggregate::Set(s) => s.contains(member),
            _ => unreachable!("not a set"),
        }
    }

    /// Adds a member; true if it is new. An integer set turns into a
    /// table when a non-integer comes or it outgrows SET_INTEGERS_MAX.
    pub fn set_add(&mut self, member: &[u8]) -> bool {
        if let Aggregate::IntSet(v) = self {
            match integer_member(member) {
                Some(i) => {
                    let Err(at) = v.binary_search(&i) else {
                        return false;
                    };
                    v.insert(at, i);
                    if v.len() > SET_INTEGERS_MAX {
                        self.set_to_table();
                    }
                    return true;
                }
                None => self.set_to_table(),
            }
        }
        match self {
            Aggregate::Set(s) => s.insert(member.into()),
            _ => unreachable!("not a set"),
        }
    }

    fn set_to_table(&mut self) {
        if let Aggregate::IntSet(v) = self {
            let table = v
                .iter()
                .map(|i| i.to_string().into_bytes().into_boxed_slice())
                .collect();
            *self = Aggregate::Set(table);
        }
    }

    pub fn set_remove(&mut self, member: &[u8]) -> bool {
        match self {
            Aggregate::IntSet(v) => match integer_member(member).map(|i| v.binary_search(&i)) {
                Some(Ok(at)) => {
                    v.remove(at);
                    true
                }
                _ => false,
            },
            Aggregate::Set(s) => s.remove(member),
            _ => unreachable!("not a set"),
        }
    }

    /// Members in the encoding's order (integer sets ascending).
    pub fn set_members(&self) -> Vec<Vec<u8>> {
        match self {
            Aggregate::IntSet(v) => v.iter().map(|i| i.to_string().into_bytes()).collect(),
            Aggregate::Set(s) => s.iter().map(|m| m.to_vec()).collect(),
            _ => unreachable!("not a set"),
        }
    }
}

/// A set member Redis stores in an intset: the canonical decimal form of
/// an i64 (string2ll's rules).
pub fn integer_member(member: &[u8]) -> Option<i64> {
    crate::resp::parse_i64(member)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_strings_live_inside_the_entry_and_large_ones_on_the_heap() {
        assert_eq!(std::mem::size_of::<Entry>(), 56);
        let key = b"key:000000012345";
        let fits = vec![b'v'; INLINE_BLOB_BYTES - key.len()];
        let mut entry = Entry::string(key, &fits, 1);
        assert_eq!(entry.heap_bytes(), 0);
        assert_eq!(entry.key(), key);
        assert_eq!(entry.string_value(), Some(&fits[..]));
        // One byte more crosses to the heap, and shrinking comes back.
        entry.append(b"!");
        assert_eq!(entry.heap_bytes(), INLINE_BLOB_BYTES + 1);
        assert_eq!(entry.key(), key);
        assert_eq!(&entry.string_value().unwrap()[fits.len()..], b"!");
        entry.append(b"?");
        assert_eq!(entry.heap_bytes(), INLINE_BLOB_BYTES + 2);
        entry.set_string(b"x");
        assert_eq!(entry.heap_bytes(), 0);
        assert_eq!(entry.string_value(), Some(&b"x"[..]));
        // The same contents compare equal whichever way they were made.
        let mut grown = Entry::string(key, b"", 1);
        grown.append(b"x");
        assert_eq!(grown, entry);
        // An empty key and value, and a key alone past the inline room.
        assert_eq!(Entry::string(b"", b"", 1).string_value(), Some(&b""[..]));
        let long_key = vec![b'k'; INLINE_BLOB_BYTES + 10];
        let long = Entry::string(&long_key, b"v", 1);
        assert_eq!(long.key(), &long_key[..]);
        assert_eq!(long.string_value(), Some(&b"v"[..]));
        assert_eq!(long.heap_bytes(), long_key.len() + 1);
    }

    #[test]
    fn a_string_entry_keeps_key_and_value_in_one_blob() {
        let mut entry = Entry::string(b"key", b"value", 7);
        assert_eq!(entry.key(), b"key");
        assert_eq!(entry.string_value(), Some(&b"value"[..]));
        entry.append(b"!");
        assert_eq!(entry.string_value(), Some(&b"value!"[..]));
        entry.set_string(b"");
        assert_eq!(entry.string_value(), Some(&b""[..]));
        assert_eq!(entry.key(), b"key");
        assert_eq!(entry.value_type(), ValueType::String);
    }

    #[test]
    fn small_hashes_keep_insertion_order_until_they_grow() {
        let mut hash = Aggregate::new_hash();
        assert!(hash.hash_set(b"b", b"1"));
        assert!(hash.hash_set(b"a", b"2"));
        assert!(!hash.hash_set(b"b", b"3"));
        let pairs: Vec<_> = hash.hash_pairs().collect();
        assert_eq!(pairs, vec![(&b"b"[..], &b"3"[..]), (&b"a"[..], &b"2"[..])]);
        hash.hash_prepare([&[0u8; 65][..]]);
        assert!(matches!(hash, Aggregate::Hash(_)));
        let mut hash = Aggregate::new_hash();
        for i in 0..=HASH_SMALL_ENTRIES_MAX {
            hash.hash_set(i.to_string().as_bytes(), b"x");
        }
        assert!(matches!(hash, Aggregate::Hash(_)));
        assert_eq!(hash.len(), HASH_SMALL_ENTRIES_MAX + 1);
    }

    #[test]
    fn integer_sets_stay_sorted_and_convert_like_redis() {
        let mut set = Aggregate::new_set(b"3");
        assert!(set.set_add(b"3"));
        assert!(set.set_add(b"-1"));
        assert!(!set.set_add(b"3"));
        assert_eq!(set.set_members(), vec![b"-1".to_vec(), b"3".to_vec()]);
        assert!(!set.set_contains(b"03"), "not canonical");
        assert!(set.set_add(b"x"));
        assert!(matches!(set, Aggregate::Set(_)));
        assert!(set.set_contains(b"3") && set.set_contains(b"x"));
        assert!(set.set_remove(b"-1"));
        assert_eq!(set.len(), 2);
    }
}
