//! The keyspace as specifications of Redis 7.0 behaviour, driven through
//! `Keyspace` (log operations for writes, reads at the current state).

use crate::op::Op;
use crate::reply::{Protocol, Reply};
use crate::Keyspace;

struct Fixture {
    keyspace: Keyspace,
    index: u64,
    now_ms: i64,
}

fn args(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

impl Fixture {
    fn new(shards: usize) -> Fixture {
        Fixture {
            keyspace: Keyspace::new(shards),
            index: 0,
            now_ms: 1_000_000,
        }
    }

    /// A command as a connection would run it: writes through the log.
    fn run(&mut self, words: &[&str]) -> Reply {
        let args = args(words);
        let spec = match crate::command::lookup(&args) {
            Ok(spec) => spec,
            Err(error) => return error,
        };
        let command = match crate::command::Command::parse(spec, &args) {
            Ok(command) => command,
            Err(error) => return error,
        };
        if command.is_write() {
            self.index += 1;
            let op = Op::Command {
                seq: 1,
                args: args.clone(),
            };
            self.keyspace
                .apply(self.index, self.now_ms, &op)
                .expect("a reply")
        } else {
            self.keyspace.read(&args, self.now_ms)
        }
    }

    fn resp(&mut self, words: &[&str]) -> String {
        String::from_utf8(self.run(words).to_bytes(Protocol::Resp2)).unwrap()
    }
}

#[test]
fn strings_set_get_and_their_options() {
    let mut f = Fixture::new(2);
    assert_eq!(f.resp(&["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(f.resp(&["GET", "k"]), "$1\r\nv\r\n");
    assert_eq!(f.resp(&["SET", "k", "w", "NX"]), "$-1\r\n");
    assert_eq!(f.resp(&["SET", "k", "w", "XX", "GET"]), "$1\r\nv\r\n");
    assert_eq!(f.resp(&["SET", "missing", "w", "XX"]), "$-1\r\n");
    assert_eq!(f.resp(&["SET", "missing", "w", "NX", "GET"]), "$-1\r\n");
    assert_eq!(f.resp(&["GET", "missing"]), "$1\r\nw\r\n");
    assert_eq!(f.resp(&["SETNX", "k", "x"]), ":0\r\n");
    assert_eq!(f.resp(&["GETSET", "k", "z"]), "$1\r\nw\r\n");
    assert_eq!(f.resp(&["GETDEL", "k"]), "$1\r\nz\r\n");
    assert_eq!(f.resp(&["GETDEL", "k"]), "$-1\r\n");
    assert_eq!(f.resp(&["APPEND", "k", "ab"]), ":2\r\n");
    assert_eq!(f.resp(&["APPEND", "k", "cd"]), ":4\r\n");
    assert_eq!(f.resp(&["STRLEN", "k"]), ":4\r\n");
    assert_eq!(f.resp(&["STRLEN", "nope"]), ":0\r\n");
}

#[test]
fn counters_and_their_errors() {
    let mut f = Fixture::new(2);
    assert_eq!(f.resp(&["INCR", "n"]), ":1\r\n");
    assert_eq!(f.resp(&["INCRBY", "n", "41"]), ":42\r\n");
    assert_eq!(f.resp(&["DECRBY", "n", "2"]), ":40\r\n");
    assert_eq!(f.resp(&["DECR", "n"]), ":39\r\n");
    f.run(&["SET", "s", "abc"]);
    assert_eq!(
        f.resp(&["INCR", "s"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    f.run(&["SET", "big", "9223372036854775807"]);
    assert_eq!(
        f.resp(&["INCR", "big"]),
        "-ERR increment or decrement would overflow\r\n"
    );
    f.run(&["SET", "sp", " 1"]);
    assert_eq!(
        f.resp(&["INCR", "sp"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    f.run(&["HSET", "h", "f", "1"]);
    assert_eq!(
        f.resp(&["INCR", "h"]),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    assert_eq!(
        f.resp(&["INCRBY", "h", "x"]),
        "-ERR value is not an integer or out of range\r\n",
        "arguments before type"
    );
    assert!(f.resp(&["GET", "h"]).starts_with("-WRONGTYPE"));
}

#[test]
fn multi_key_strings_span_shards() {
    let mut f = Fixture::new(4);
    assert_eq!(f.resp(&["MSET", "a", "1", "b", "2", "c", "3"]), "+OK\r\n");
    assert_eq!(
        f.resp(&["MGET", "a", "nope", "c"]),
        "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n3\r\n"
    );
    assert_eq!(f.resp(&["MSETNX", "x", "1", "a", "9"]), ":0\r\n");
    assert_eq!(f.resp(&["EXISTS", "x"]), ":0\r\n");
    assert_eq!(f.resp(&["MSETNX", "x", "1", "y", "2"]), ":1\r\n");
    assert_eq!(f.resp(&["EXISTS", "a", "a", "x", "zz"]), ":3\r\n");
    assert_eq!(f.resp(&["DEL", "a", "b", "zz"]), ":2\r\n");
    assert_eq!(f.resp(&["DBSIZE"]), ":3\r\n");
    assert_eq!(f.resp(&["UNLINK", "c"]), ":1\r\n");
    f.run(&["SADD", "set", "m"]);
    assert_eq!(
        f.resp(&["MGET", "set"]),
        "*1\r\n$-1\r\n",
        "MGET of another type is nil"
    );
}

#[test]
fn expiry_follows_the_log_clock() {
    let mut f = Fixture::new(2);
    f.run(&["SET", "k", "v", "EX", "10"]);
    assert_eq!(f.resp(&["TTL", "k"]), ":10\r\n");
    assert_eq!(f.resp(&["PTTL", "k"]), ":10000\r\n");
    assert_eq!(f.resp(&["EXPIRETIME", "k"]), ":1010\r\n");
    assert_eq!(f.resp(&["TTL", "nope"]), ":-2\r\n");
    f.run(&["SET", "p", "v"]);
    assert_eq!(f.resp(&["TTL", "p"]), ":-1\r\n");
    assert_eq!(f.resp(&["EXPIRE", "p", "100", "XX"]), ":0\r\n");
    assert_eq!(f.resp(&["EXPIRE", "p", "100", "NX"]), ":1\r\n");
    assert_eq!(f.resp(&["EXPIRE", "p", "50", "GT"]), ":0\r\n");
    assert_eq!(f.resp(&["EXPIRE", "p", "50", "LT"]), ":1\r\n");
    assert_eq!(f.resp(&["PERSIST", "p"]), ":1\r\n");
    assert_eq!(f.resp(&["PERSIST", "p"]), ":0\r\n");
    assert_eq!(f.resp(&["EXPIRE", "nope", "10"]), ":0\r\n");
    // SET without KEEPTTL drops the expiry; INCR keeps it.
    f.run(&["SET", "n", "1", "PX", "5000"]);
    f.run(&["INCR", "n"]);
    assert_eq!(f.resp(&["PTTL", "n"]), ":5000\r\n");
    f.run(&["SET", "n", "1", "KEEPTTL"]);
    assert_eq!(f.resp(&["PTTL", "n"]), ":5000\r\n");
    f.run(&["SET", "n", "1"]);
    assert_eq!(f.resp(&["PTTL", "n"]), ":-1\r\n");
    // A past deadline deletes at once.
    assert_eq!(f.resp(&["EXPIRE", "p", "-1"]), ":1\r\n");
    assert_eq!(f.resp(&["EXISTS", "p"]), ":0\r\n");
    // The clock moves only with the log: a key past its deadline is
    // gone for reads once an entry stamped after it is applied.
    f.now_ms += 10_001;
    assert_eq!(f.resp(&["GET", "k"]), "$1\r\nv\r\n");
    f.run(&["SET", "other", "x"]);
    assert_eq!(f.resp(&["GET", "k"]), "$-1\r\n");
    assert_eq!(f.resp(&["DBSIZE"]), ":3\r\n", "still stored until deleted");
    f.index += 1;
    f.keyspace.apply(
        f.index,
        f.now_ms,
        &Op::Expire {
            keys: vec![b"k".to_vec(), b"n".to_vec()],
        },
    );
    assert_eq!(f.resp(&["DBSIZE"]), ":2\r\n", "only the expired key went");
}

#[test]
fn hashes_keep_small_order_and_redis_errors() {
    let mut f = Fixture::new(2);
    assert_eq!(f.resp(&["HSET", "h", "b", "1", "a", "2"]), ":2\r\n");
    assert_eq!(f.resp(&["HSET", "h", "b", "3", "c", "4"]), ":1\r\n");
    assert_eq!(
        f.resp(&["HGETALL", "h"]),
        "*6\r\n$1\r\nb\r\n$1\r\n3\r\n$1\r\na\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n4\r\n"
    );
    assert_eq!(f.resp(&["HMSET", "h", "d", "5"]), "+OK\r\n");
    assert_eq!(f.resp(&["HGET", "h", "d"]), "$1\r\n5\r\n");
    assert_eq!(
        f.resp(&["HMGET", "h", "a", "zz"]),
        "*2\r\n$1\r\n2\r\n$-1\r\n"
    );
    assert_eq!(f.resp(&["HMGET", "nope", "a"]), "*1\r\n$-1\r\n");
    assert_eq!(f.resp(&["HLEN", "h"]), ":4\r\n");
    assert_eq!(f.resp(&["HEXISTS", "h", "a"]), ":1\r\n");
    assert_eq!(f.resp(&["HSTRLEN", "h", "a"]), ":1\r\n");
    assert_eq!(f.resp(&["HINCRBY", "h", "a", "10"]), ":12\r\n");
    assert_eq!(f.resp(&["HINCRBY", "h", "new", "-3"]), ":-3\r\n");
    f.run(&["HSET", "h", "s", "x"]);
    assert_eq!(
        f.resp(&["HINCRBY", "h", "s", "1"]),
        "-ERR hash value is not an integer\r\n"
    );
    assert_eq!(f.resp(&["HSETNX", "h", "a", "z"]), ":0\r\n");
    assert_eq!(f.resp(&["HDEL", "h", "a", "b", "zz"]), ":2\r\n");
    assert_eq!(f.resp(&["HGETALL", "nope"]), "*0\r\n");
    assert_eq!(
        f.run(&["HGETALL", "nope"]).to_bytes(Protocol::Resp3),
        b"%0\r\n"
    );
    f.run(&["SET", "str", "v"]);
    assert!(f.resp(&["HGET", "str", "f"]).starts_with("-WRONGTYPE"));
    assert!(f.resp(&["HSET", "str", "f", "v"]).starts_with("-WRONGTYPE"));
    // Deleting the last field deletes the key.
    f.run(&["HSET", "one", "f", "v"]);
    assert_eq!(f.resp(&["HDEL", "one", "f"]), ":1\r\n");
    assert_eq!(f.resp(&["TYPE", "one"]), "+none\r\n");
    assert_eq!(f.resp(&["TYPE", "h"]), "+hash\r\n");
}

#[test]
fn sets_of_integers_come_back_sorted() {
    let mut f = Fixture::new(2);
    assert_eq!(f.resp(&["SADD", "s", "3", "1", "2", "1"]), ":3\r\n");
    assert_eq!(
        f.resp(&["SMEMBERS", "s"]),
        "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
    );
    assert_eq!(f.resp(&["SISMEMBER", "s", "2"]), ":1\r\n");
    assert_eq!(f.resp(&["SMISMEMBER", "s", "2", "9"]), "*2\r\n:1\r\n:0\r\n");
    assert_eq!(f.resp(&["SCARD", "s"]), ":3\r\n");
    assert_eq!(f.resp(&["SREM", "s", "1", "9"]), ":1\r\n");
    assert_eq!(f.resp(&["SMEMBERS", "nope"]), "*0\r\n");
    assert_eq!(
        f.run(&["SMEMBERS", "nope"]).to_bytes(Protocol::Resp3),
        b"~0\r\n"
    );
    assert_eq!(f.resp(&["SREM", "s", "2", "3"]), ":2\r\n");
    assert_eq!(f.resp(&["EXISTS", "s"]), ":0\r\n");
    assert_eq!(f.resp(&["TYPE", "s"]), "+none\r\n");
}

#[test]
fn scan_visits_every_key_once_across_shards() {
    for shards in [1, 3] {
        let mut f = Fixture::new(shards);
        for i in 0..500 {
            f.run(&["SET", &format!("key:{i}"), "v"]);
        }
        f.run(&["HSET", "hash:1", "f", "v"]);
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = "0".to_string();
        let mut calls = 0;
        loop {
            let reply = f.run(&["SCAN", &cursor, "COUNT", "37"]);
            let Reply::Array(parts) = reply else { panic!() };
            let (Reply::Bulk(next), Reply::Array(keys)) = (&parts[0], &parts[1]) else {
                panic!()
            };
            for key in keys {
                let Reply::Bulk(key) = key else { panic!() };
                assert!(seen.insert(key.clone()), "returned twice");
            }
            cursor = String::from_utf8(next.clone()).unwrap();
            calls += 1;
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(seen.len(), 501);
        assert!(calls >= 501 / 37);
        let Reply::Array(parts) = f.run(&[
            "SCAN", "0", "MATCH", "hash:*", "COUNT", "1000", "TYPE", "HASH",
        ]) else {
            panic!()
        };
        if shards == 1 {
            assert_eq!(parts[1], Reply::Array(vec![Reply::bulk(b"hash:1")]));
        }
        let Reply::Array(keys) = f.run(&["KEYS", "key:4?"]) else {
            panic!()
        };
        assert_eq!(keys.len(), 10);
    }
}

#[test]
fn a_transaction_is_all_or_nothing_at_one_position() {
    let mut f = Fixture::new(4);
    f.run(&["SET", "a", "1"]);
    let watch_a = f.keyspace.watch(b"a");
    let watch_b = f.keyspace.watch(b"b");
    let exec = |f: &mut Fixture, watches: Vec<crate::Watch>| {
        f.index += 1;
        let op = Op::Exec {
            seq: 1,
            watches,
            commands: vec![
                args(&["INCR", "a"]),
                args(&["SET", "b", "x", "BAD"]),
                args(&["GET", "a"]),
            ],
        };
        f.keyspace
            .apply(f.index, f.now_ms, &op)
            .unwrap()
            .to_bytes(Protocol::Resp2)
    };
    assert_eq!(
        String::from_utf8(exec(&mut f, vec![watch_a.clone(), watch_b.clone()])).unwrap(),
        "*3\r\n:2\r\n-ERR syntax error\r\n$1\r\n2\r\n"
    );
    // `a` changed (by the transaction itself) since the watch.
    assert_eq!(exec(&mut f, vec![watch_a]), b"*-1\r\n");
    // `b` was created and deleted since.
    f.run(&["SET", "b", "1"]);
    f.run(&["DEL", "b"]);
    assert_eq!(exec(&mut f, vec![watch_b]), b"*-1\r\n");
    let fresh = f.keyspace.watch(b"b");
    assert_eq!(
        String::from_utf8(exec(&mut f, vec![fresh])).unwrap(),
        "*3\r\n:3\r\n-ERR syntax error\r\n$1\r\n3\r\n"
    );
}

#[test]
fn flushdb_empties_every_shard_and_snapshots_round_trip() {
    let mut f = Fixture::new(3);
    f.run(&["SET", "s", "v", "EX", "100"]);
    f.run(&["HSET", "h", "z", "1", "a", "2"]);
    f.run(&["SADD", "ints", "5", "-3"]);
    f.run(&["SADD", "words", "x", "y"]);
    f.run(&["DEL", "s2"]);
    f.run(&["SET", "gone", "1"]);
    f.run(&["DEL", "gone"]);
    let bytes = crate::snapshot::encode(f.keyspace.shards(), f.keyspace.index, f.keyspace.clock_ms);
    for shard_count in [1, 2, 5] {
        let image = crate::snapshot::decode(&bytes, shard_count).unwrap();
        let mut loaded = Keyspace::from_shards(image.shards, image.index, image.clock_ms);
        assert_eq!(loaded.key_count(), 4);
        assert_eq!(
            loaded.read(&args(&["PTTL", "s"]), f.now_ms),
            Reply::Integer(100_000)
        );
        assert_eq!(
            loaded.read(&args(&["HKEYS", "h"]), f.now_ms),
            Reply::Array(vec![Reply::bulk(b"z"), Reply::bulk(b"a")])
        );
        assert_eq!(
            loaded.read(&args(&["SMEMBERS", "ints"]), f.now_ms),
            Reply::Set(vec![Reply::bulk(b"-3"), Reply::bulk(b"5")])
        );
        assert_eq!(
            loaded.watch(b"gone").token,
            crate::shard::entry_end_stamp(f.keyspace.index)
        );
        let stale = crate::Watch {
            key: b"gone".to_vec(),
            token: 1,
            watched_ms: 0,
        };
        loaded.index += 0;
        let mut view = loaded.view();
        assert!(
            view.shard(b"gone")
                .changed_since(b"gone", stale.token, 0, 0),
            "deletion marks survive"
        );
    }
    for cut in 0..bytes.len() {
        assert!(
            crate::snapshot::decode(&bytes[..cut], 2).is_err() || cut == 0,
            "cut at {cut}"
        );
    }
    // A version 1 file (before deletions were remembered key by key):
    // its DELETED frames lack the second list, and still load.
    let v1 = older_version(&bytes, 1);
    let image = crate::snapshot::decode(&v1, 2).unwrap();
    let loaded = Keyspace::from_shards(image.shards, image.index, image.clock_ms);
    assert_eq!(loaded.key_count(), 4);
    // Versions 2 and 3 (the versions write stamps) have version 4's
    // frames with a HEADER that stops at the clock: they load; a newer
    // one is refused, as an older Keel refuses version 4 (its versions
    // would not order with its own).
    assert_eq!(crate::snapshot::FORMAT_VERSION, 4);
    for version in [2, 3] {
        let older = older_version(&bytes, version);
        let image = crate::snapshot::decode(&older, 2).unwrap();
        let loaded = Keyspace::from_shards(image.shards, image.index, image.clock_ms);
        assert_eq!(loaded.key_count(), 4, "version {version}");
    }
    let mut v5 = bytes.clone();
    v5[8..12].copy_from_slice(&5u32.to_be_bytes());
    assert!(matches!(
        crate::snapshot::decode(&v5, 2),
        Err(crate::snapshot::KvSnapshotError::Version(5))
    ));
    let mut flipped = bytes.clone();
    let last = flipped.len() - 20;
    flipped[last] ^= 1;
    assert!(crate::snapshot::decode(&flipped, 2).is_err());
    assert_eq!(f.resp(&["FLUSHDB"]), "+OK\r\n");
    assert_eq!(f.resp(&["DBSIZE"]), ":0\r\n");
}

/// A part whose frames are sound (a writer's bug, or damage the CRC
/// missed) can still list a hash field or a set member twice: loaded, a
/// small hash would keep both (HLEN and HGETALL count the field twice)
/// and a table would keep one value and drop the other in silence.
/// Found by the `kv_snapshot_decode` fuzz body's invariants.
#[test]
fn a_part_that_lists_a_field_or_a_member_twice_is_refused() {
    use crate::value::{Aggregate, Entry};
    let field = |f: &[u8], v: &[u8]| -> (Box<[u8]>, Box<[u8]>) { (f.into(), v.into()) };
    let small = Aggregate::SmallHash(vec![field(b"f", b"1"), field(b"f", b"2")]);
    let mut shard = crate::snapshot::empty(1).shards.remove(0);
    shard.insert(Entry::aggregate(b"h", small, 6));
    let bytes = crate::snapshot::encode(std::slice::from_ref(&shard), 6, 0);
    let Err(error) = crate::snapshot::decode(&bytes, 2) else {
        panic!("a field or a member twice loaded");
    };
    let error = error.to_string();
    assert!(error.contains("a hash field listed twice"), "{error}");

    // The same pairs as a table, and a set table, written with one
    // element and its record patched to declare it twice.
    for (aggregate, tag, reason) in [
        (
            Aggregate::Hash([field(b"f", b"1")].into_iter().collect()),
            2u8,
            "a hash field listed twice",
        ),
        (
            Aggregate::Set([Box::from(&b"m"[..])].into_iter().collect()),
            4u8,
            "a set member listed twice",
        ),
    ] {
        let mut shard = crate::snapshot::empty(1).shards.remove(0);
        shard.insert(Entry::aggregate(b"k", aggregate, 6));
        let bytes = crate::snapshot::encode(std::slice::from_ref(&shard), 6, 0);
        // The record: encoding, key "k" (len 1), expiry 0, version 6,
        // count 1, then the element.
        let record = [tag, 1, b'k', 0, 6, 1];
        let at = bytes
            .windows(6)
            .position(|w| w == record)
            .expect("the record");
        let element_len = if tag == 2 { 4 } else { 2 };
        let element = bytes[at + 6..at + 6 + element_len].to_vec();
        let mut patched = bytes[..at].to_vec();
        patched.extend_from_slice(&record[..5]);
        patched.push(2);
        patched.extend_from_slice(&element);
        patched.extend_from_slice(&bytes[at + 6..]);
        // The record is its KEYS frame's only one: the frame grows by
        // the element (sealing computes its CRC).
        let frame = at - 9;
        assert_eq!(patched[frame], 3, "a KEYS frame");
        let len = u32::from_be_bytes(patched[frame + 1..frame + 5].try_into().unwrap());
        let len = len + element_len as u32;
        patched[frame + 1..frame + 5].copy_from_slice(&len.to_be_bytes());
        let sealed = crate::fuzzing::seal_kv_snapshot(&patched);
        let Err(error) = crate::snapshot::decode(&sealed, 2) else {
            panic!("a field or a member twice loaded");
        };
        let error = error.to_string();
        assert!(error.contains(reason), "{error}");
    }
}

/// The file's version is outside every frame; the HEADER's copy is what
/// a CRC covers. A part whose version reads anything else than the one
/// it was written with is refused: every bit flipped, and every older
/// version written over it (simulator seed 209899 flipped a version 3
/// to 2, which has the same layout, and the restart loaded it).
#[test]
fn a_part_whose_version_field_changed_is_refused() {
    let mut f = Fixture::new(2);
    f.run(&["SET", "s", "v"]);
    f.run(&["SET", "gone", "1"]);
    f.run(&["DEL", "gone"]);
    let bytes = crate::snapshot::encode(f.keyspace.shards(), f.keyspace.index, f.keyspace.clock_ms);
    assert!(crate::snapshot::decode(&bytes, 2).is_ok());
    let versions = (0..32)
        .map(|bit| crate::snapshot::FORMAT_VERSION ^ (1 << bit))
        .chain(1..crate::snapshot::FORMAT_VERSION);
    for version in versions {
        let mut changed = bytes.clone();
        changed[8..12].copy_from_slice(&version.to_be_bytes());
        assert!(
            crate::snapshot::decode(&changed, 2).is_err(),
            "version {version} loaded"
        );
    }
    // The HEADER's copy itself disagreeing (its CRC mended) is refused too.
    let mut header = bytes.clone();
    // After the file's header and HEADER's frame header: index, clock,
    // then the copy.
    let copy = crate::snapshot::FILE_HEADER_BYTES + crate::snapshot::FRAME_HEADER_BYTES + 16;
    header[copy..copy + 4].copy_from_slice(&3u32.to_be_bytes());
    let sealed = crate::fuzzing::seal_kv_snapshot(&header);
    let error = crate::snapshot::decode(&sealed, 2).unwrap_err().to_string();
    assert!(
        error.contains("the header says format 3, the file 4"),
        "{error}"
    );
}

/// A current part rewritten as version `version` (1-3) wrote it: the
/// HEADER without the version's copy; in version 1, DELETED frames
/// without their second list; each frame's CRC made again.
fn older_version(bytes: &[u8], version: u32) -> Vec<u8> {
    use crate::snapshot::{FILE_HEADER_BYTES, FRAME_HEADER_BYTES, KIND_DELETED, KIND_HEADER};
    assert!((1..=3).contains(&version));
    let mut out = bytes[..FILE_HEADER_BYTES].to_vec();
    out[8..FILE_HEADER_BYTES].copy_from_slice(&version.to_be_bytes());
    let mut at = FILE_HEADER_BYTES;
    while at < bytes.len() {
        let kind = bytes[at];
        let len = u32::from_be_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        let start = at + FRAME_HEADER_BYTES;
        let mut payload = bytes[start..start + len].to_vec();
        if kind == KIND_HEADER {
            assert_eq!(payload.len(), 20, "index, clock, version");
            payload.truncate(16);
        }
        if kind == KIND_DELETED && version == 1 {
            let slots = u32::from_be_bytes(payload[..4].try_into().unwrap()) as usize;
            payload.truncate(4 + slots * 10);
        }
        let crc = crate::snapshot::frame_crc(kind, &payload);
        out.push(kind);
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&crc.to_be_bytes());
        out.extend_from_slice(&payload);
        at = start + len;
    }
    out
}

#[test]
fn remembered_deletions_survive_a_snapshot_and_keep_exec_exact() {
    let mut f = Fixture::new(2);
    f.run(&["SET", "{u}a", "1"]);
    f.run(&["SET", "{u}b", "1"]);
    let watch_c = f.keyspace.watch(b"{u}c"); // absent
    f.run(&["DEL", "{u}a"]);
    let bytes = crate::snapshot::encode(f.keyspace.shards(), f.keyspace.index, f.keyspace.clock_ms);
    for shard_count in [1, 3] {
        let image = crate::snapshot::decode(&bytes, shard_count).unwrap();
        let mut loaded = Keyspace::from_shards(image.shards, image.index, image.clock_ms);
        let mut view = loaded.view();
        let shard = view.shard(b"{u}c");
        assert!(
            !shard.changed_since(b"{u}c", watch_c.token, 0, 0),
            "another key's deletion"
        );
        assert!(
            shard.changed_since(b"{u}a", watch_c.token, 0, 0),
            "its own deletion"
        );
    }
}
