//! Fuzz-target bodies (feature `testing`): the fuzz package's `kv_resp`
//! target calls `resp_session`, and this crate's tests run it over seeds
//! and a fixed-seed PRNG's inputs, so every property is checked without
//! nightly.

use crate::command::{self, Command, Route};
use crate::op::{Op, Watch};
use crate::reply::{Protocol, Reply};
use crate::resp::{Decoder, Limits};
use crate::session::{Action, ReadRoute, Server, Session};
use crate::slot::key_slot;
use crate::Keyspace;

/// Small bounds, so the fuzzer reaches them.
const LIMITS: Limits = Limits {
    bulk_bytes_max: 64,
    args_max: 16,
    command_bytes_max: 512,
};

struct NoServer;

impl Server for NoServer {
    fn info(&self, _: &[Vec<u8>], _: &Session) -> String {
        String::new()
    }
    fn client_list(&self, _: &Session) -> String {
        String::new()
    }
    fn client_info(&self, _: &Session) -> String {
        String::new()
    }
    fn time(&self) -> (u64, u64) {
        (0, 0)
    }
    fn role(&self) -> &'static str {
        "master"
    }
}

/// Requests decoded from `bytes` fed at once and fed in two parts split at
/// the first byte's position; both must agree, then every request runs
/// through a session and a two-shard keyspace (writes as log operations,
/// reads at the state), every reply encodes in both protocols, and the
/// keyspace survives a snapshot round trip.
pub fn resp_session(bytes: &[u8]) {
    let whole = decode_all(bytes, &[bytes]);
    let split = bytes.first().map_or(0, |b| *b as usize % (bytes.len() + 1));
    let parts = decode_all(bytes, &[&bytes[..split], &bytes[split..]]);
    assert_eq!(whole, parts, "decoding depends on how the bytes arrive");
    let mut keyspace = Keyspace::new(2);
    let mut session = Session::new(1);
    let mut index = 0;
    let mut now_ms = 1_000_000i64;
    for args in whole.0 {
        now_ms += 7;
        let reply = match session.handle(args, &NoServer) {
            Action::None => continue,
            Action::Reply(reply) | Action::ReplyAndClose(reply) => reply,
            Action::Read(args, route) => {
                let spec = command::lookup(&args).expect("the session checked it");
                let command = Command::parse(spec, &args).expect("the session checked it");
                assert!(!command.is_write());
                assert_eq!(
                    route,
                    ReadRoute::of(spec, &command),
                    "the route of what was read"
                );
                assert_eq!(ReadRoute::checked(&args), Some(route));
                if let (Some(slot), Route::Keys(keys)) = (route.slot, command.route()) {
                    assert!(keys.iter().all(|key| key_slot(key) == slot));
                }
                // As a server runs it (its spec and slot taken from the
                // route), and from the arguments alone: the same reply.
                let routed = keyspace.read_routed(&args, route, now_ms);
                assert_eq!(
                    routed,
                    keyspace.read(&args, now_ms),
                    "a routed read differs"
                );
                routed
            }
            Action::Write(args) => {
                index += 1;
                let op = Op::Command { seq: 1, args };
                let encoded = op.to_bytes();
                assert_eq!(Op::decode(&encoded).as_ref(), Ok(&op));
                keyspace
                    .apply(index, now_ms, &op)
                    .expect("a command answers")
            }
            Action::Watch(keys) => {
                let watches: Vec<Watch> = keys.iter().map(|k| keyspace.watch(k)).collect();
                session.add_watches(watches);
                Reply::ok()
            }
            Action::Exec {
                watches,
                commands,
                local,
            } => {
                index += 1;
                let op = Op::Exec {
                    seq: 1,
                    watches,
                    commands,
                };
                let logged = keyspace.apply(index, now_ms, &op).expect("EXEC answers");
                Session::merge_exec(logged, local)
            }
        };
        for protocol in [Protocol::Resp2, Protocol::Resp3] {
            let encoded = reply.to_bytes(protocol);
            assert!(!encoded.is_empty());
        }
    }
    let snapshot = crate::snapshot::encode(keyspace.shards(), keyspace.index, keyspace.clock_ms);
    let image = crate::snapshot::decode(&snapshot, 3).expect("a snapshot loads");
    let again = crate::snapshot::encode(&image.shards, image.index, image.clock_ms);
    let reloaded = crate::snapshot::decode(&again, 2).expect("a snapshot loads");
    assert_eq!(
        reloaded.shards.iter().map(|s| s.key_count()).sum::<usize>(),
        keyspace.key_count()
    );
}

/// (requests, whether a protocol error ended the stream).
fn decode_all(_all: &[u8], parts: &[&[u8]]) -> (Vec<Vec<Vec<u8>>>, bool) {
    let mut decoder = Decoder::new(LIMITS);
    let mut buffer = Vec::new();
    let mut requests = Vec::new();
    for part in parts {
        buffer.extend_from_slice(part);
        loop {
            match decoder.decode(&buffer) {
                Ok(Some((args, used))) => {
                    assert!(used > 0 && used <= buffer.len());
                    // args_max bounds a multibulk frame; an inline line's
                    // words are bounded by its length only, as in Redis.
                    assert!(args.len() <= LIMITS.args_max || buffer[0] != b'*');
                    assert!(args
                        .iter()
                        .all(|a| a.len() <= LIMITS.bulk_bytes_max || buffer[0] != b'*'));
                    buffer.drain(..used);
                    if !args.is_empty() {
                        requests.push(args);
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    assert!(error.reply().is_error());
                    return (requests, true);
                }
            }
        }
    }
    (requests, false)
}

/// Seed inputs: what redis-cli and redis-benchmark send.
pub fn seeds() -> Vec<Vec<u8>> {
    let frame = |words: &[&str]| -> Vec<u8> {
        let mut out = format!("*{}\r\n", words.len()).into_bytes();
        for w in words {
            out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
        }
        out
    };
    let scripts: Vec<Vec<&[&str]>> = vec![
        vec![
            &["SET", "k", "v", "EX", "10"],
            &["GET", "k"],
            &["TTL", "k"],
            &["INCR", "n"],
        ],
        vec![
            &["MSET", "a", "1", "{a}b", "2"],
            &["MGET", "a", "{a}b"],
            &["DEL", "a"],
        ],
        vec![
            &["HSET", "h", "f", "v"],
            &["HGETALL", "h"],
            &["SADD", "s", "1", "x"],
            &["SMEMBERS", "s"],
        ],
        vec![
            &["WATCH", "w"],
            &["MULTI"],
            &["SET", "w", "1"],
            &["INCR", "w"],
            &["EXEC"],
        ],
        vec![
            &["HELLO", "3"],
            &["SCAN", "0", "MATCH", "*"],
            &["KEYS", "*"],
            &["FLUSHDB"],
        ],
    ];
    let mut seeds: Vec<Vec<u8>> = scripts
        .into_iter()
        .map(|script| script.into_iter().flat_map(&frame).collect())
        .collect();
    seeds.push(b"PING\r\nSET k \"a b\"\r\nGET k\r\n".to_vec());
    seeds.push(b"*1\r\n$x\r\n".to_vec());
    // Found by the fuzzer: an inline line of more words than args_max
    // (only a multibulk frame is held to it), and NUL bytes in a line.
    seeds.push(b"ECHO a b c d e f g h i j k l m n o p q r\r\nPING\r\n".to_vec());
    let mut nul = vec![1, 0, b'{'];
    nul.extend([0; 113]);
    nul.extend([b'*', 0x93, b'\n']);
    seeds.push(nul);
    seeds
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_session_body_holds_on_seeds_and_pseudo_random_inputs() {
        for seed in super::seeds() {
            super::resp_session(&seed);
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let seeds = super::seeds();
        for _ in 0..3000 {
            let mut input = seeds[(next() % seeds.len() as u64) as usize].clone();
            for _ in 0..(next() % 6) {
                let at = (next() % (input.len() as u64 + 1)) as usize;
                match next() % 3 {
                    0 if at < input.len() => input[at] = next() as u8,
                    1 => input.insert(at, b"*$\r\n0123:-+ ab"[(next() % 14) as usize]),
                    _ if at < input.len() => {
                        input.remove(at);
                    }
                    _ => {}
                }
            }
            super::resp_session(&input);
        }
    }
}
