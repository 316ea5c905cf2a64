//! Bodies of the cargo-fuzz targets in `fuzz/` (see `docs/FUZZING.md`).
//!
//! They live here, not in the fuzz crate, so that the seeded smoke tests
//! below run exactly the same checks on the stable toolchain with plain
//! `cargo test`. Each function takes arbitrary bytes and panics only when a
//! property is violated: decoding must fail with an error, never panic,
//! and whatever decodes must re-encode to something that decodes to the
//! same value and is no longer than the input it came from (so decoding
//! can never amplify a peer's bytes into a bigger value).

use crate::codec::{Reader, Record};
use crate::frame::{check_frame, split_frame, write_frame, DEFAULT_MAX_FRAME_BYTES};
use crate::message::{Request, Response};
use crate::records::{ConnectRequest, ConnectResponse, RequestHeader};

/// Every op code a request or reply can carry, plus unknown neighbours.
pub const OP_CODES: [i32; 38] = [
    -11, -10, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
    23, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 1000,
];

/// ClickHouse Keeper's op codes and an unknown neighbour: a list of their
/// own, so that picks from [`OP_CODES`] keep meaning what they meant in
/// recorded inputs.
pub const CLICKHOUSE_OP_CODES: [i32; 5] = [500, 501, 502, 503, 504];

/// The packet inside `data`: the payload of its first frame when `data`
/// starts with a complete frame, else `data` itself (so the fuzzer does not
/// have to get the length prefix right to reach the decoders).
fn packet(data: &[u8]) -> &[u8] {
    let checked = check_frame(data, DEFAULT_MAX_FRAME_BYTES);
    let split = split_frame(data, DEFAULT_MAX_FRAME_BYTES);
    match (checked, split) {
        (Ok(Some(total)), Ok(Some((payload, split_total)))) => {
            assert_eq!(total, split_total);
            assert!(total <= data.len() && total >= 4);
            assert!(total - 4 <= DEFAULT_MAX_FRAME_BYTES);
            assert_eq!(payload.len(), total - 4);
            payload
        }
        (Ok(None), Ok(None)) | (Err(_), Err(_)) => data,
        (checked, split) => panic!("check_frame {checked:?} disagrees with split_frame {split:?}"),
    }
}

/// Re-framing a payload gives a frame `check_frame` accepts whole.
fn assert_reframes(payload: &[u8]) {
    let mut framed = Vec::new();
    write_frame(&mut framed, |out| out.extend_from_slice(payload));
    assert_eq!(
        check_frame(&framed, DEFAULT_MAX_FRAME_BYTES.max(payload.len())),
        Ok(Some(framed.len()))
    );
}

fn check_request(op: i32, body: &[u8]) {
    let Ok(request) = Request::decode(op, body) else {
        return;
    };
    assert_eq!(request.op_code(), op, "{request:?}");
    let _ = request.is_write();
    let _ = request.path();
    let mut encoded = Vec::new();
    request.encode(&mut encoded);
    assert!(
        encoded.len() <= body.len(),
        "op {op}: {} input bytes re-encode to {}: {request:?}",
        body.len(),
        encoded.len()
    );
    assert_eq!(
        Request::decode(op, &encoded).as_ref(),
        Ok(&request),
        "op {op}: decode(encode(x)) != x"
    );
    let mut again = Vec::new();
    request.encode(&mut again);
    assert_eq!(again, encoded, "encoding is not deterministic");
}

fn check_response(op: i32, body: &[u8]) {
    let Ok(response) = Response::decode(op, body) else {
        return;
    };
    let mut encoded = Vec::new();
    response.encode(&mut encoded);
    assert!(
        encoded.len() <= body.len(),
        "reply to op {op}: {} input bytes re-encode to {}: {response:?}",
        body.len(),
        encoded.len()
    );
    assert_eq!(
        Response::decode(op, &encoded).as_ref(),
        Ok(&response),
        "reply to op {op}: decode(encode(x)) != x"
    );
    assert_eq!(Response::decode_reply(op, 0, body).as_ref(), Ok(&response));
}

/// Target `jute_request`: framing, `RequestHeader`, then the body decoded as
/// the header's op code and as every other op code, requests and replies.
pub fn jute_request(data: &[u8]) {
    let payload = packet(data);
    assert_reframes(payload);
    let mut r = Reader::new(payload);
    let Ok(header) = RequestHeader::read(&mut r) else {
        assert!(payload.len() < 8);
        return;
    };
    assert_eq!(r.position(), 8);
    assert_eq!(
        RequestHeader::from_bytes(&header.to_bytes()),
        Ok(header.clone())
    );
    let body = r.read_rest();
    check_request(header.op_type, body);
    check_response(header.op_type, body);
    for op in OP_CODES.into_iter().chain(CLICKHOUSE_OP_CODES) {
        check_request(op, body);
        check_response(op, body);
    }
}

/// Target `jute_handshake`: the first packet of a connection, a
/// `ConnectRequest` with its optional trailing `readOnly` byte (and the
/// server's `ConnectResponse`, decoded from the same bytes).
pub fn jute_handshake(data: &[u8]) {
    let payload = packet(data);
    if let Ok(request) = ConnectRequest::from_bytes(payload) {
        let encoded = request.to_bytes();
        assert!(encoded.len() <= payload.len(), "{request:?}");
        assert_eq!(ConnectRequest::from_bytes(&encoded).as_ref(), Ok(&request));
        // The readOnly byte is read exactly when a byte follows passwd.
        let without_flag = ConnectRequest {
            read_only: None,
            ..request.clone()
        };
        let core_len = without_flag.to_bytes().len();
        assert_eq!(request.read_only.is_some(), payload.len() > core_len);
        if let Some(flag) = request.read_only {
            assert_eq!(flag, payload[core_len] != 0);
        }
        // An old client's request (no flag) decodes as such.
        assert_eq!(
            ConnectRequest::from_bytes(&without_flag.to_bytes()),
            Ok(without_flag)
        );
    }
    if let Ok(response) = ConnectResponse::from_bytes(payload) {
        let encoded = response.to_bytes();
        assert_eq!(
            ConnectResponse::from_bytes(&encoded).as_ref(),
            Ok(&response)
        );
        // A missing readOnly byte decodes as false, so the re-encoding may be
        // one byte longer than the input, never more.
        assert!(encoded.len() <= payload.len() + 1, "{response:?}");
    }
}

/// A tiny deterministic PRNG (xorshift64) for the smoke tests here and in
/// other crates: no dependency, same sequence everywhere.
#[derive(Debug, Clone)]
pub struct XorShift(pub u64);

impl XorShift {
    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A pseudo-random value in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// `len` pseudo-random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    /// Mutates `data` the way a fuzzer would: overwrite, insert, delete or
    /// splice in an interesting integer.
    pub fn mutate(&mut self, data: &mut Vec<u8>) {
        const INTERESTING: [i32; 8] = [-1, -2, 0, 1, 0x7fff_ffff, i32::MIN, 0xfffff, 0x100000];
        for _ in 0..1 + self.below(4) {
            let at = if data.is_empty() {
                0
            } else {
                self.below(data.len() as u64) as usize
            };
            match self.below(4) {
                0 if !data.is_empty() => data[at] = self.next_u64() as u8,
                1 => data.insert(at, self.next_u64() as u8),
                2 if !data.is_empty() => {
                    data.remove(at);
                }
                _ => {
                    let value = INTERESTING[self.below(INTERESTING.len() as u64) as usize];
                    let bytes = value.to_be_bytes();
                    let end = (at + 4).min(data.len());
                    data.splice(at..end, bytes);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::write_i32;
    use crate::samples;

    /// Seed packets: every sample request framed with its header, and the
    /// handshakes with and without the readOnly byte.
    fn seeds() -> Vec<Vec<u8>> {
        let mut seeds = Vec::new();
        for (xid, request) in samples::requests().into_iter().enumerate() {
            let mut framed = Vec::new();
            write_frame(&mut framed, |out| {
                RequestHeader {
                    xid: xid as i32,
                    op_type: request.op_code(),
                }
                .write(out);
                request.encode(out);
            });
            seeds.push(framed);
        }
        for read_only in [None, Some(false), Some(true)] {
            let request = ConnectRequest {
                protocol_version: 0,
                last_zxid_seen: 0x1_0000_0005,
                time_out: 30_000,
                session_id: 0x0100_0000_0000_0001,
                passwd: vec![7; 16],
                read_only,
            };
            let mut framed = Vec::new();
            write_frame(&mut framed, |out| request.write(out));
            seeds.push(framed);
        }
        seeds
    }

    fn drive(target: fn(&[u8]), iterations: usize, seed: u64) {
        let seeds = seeds();
        for input in &seeds {
            target(input);
        }
        let mut rng = XorShift(seed);
        for round in 0..iterations {
            let mut input = if round % 4 == 0 {
                let len = rng.below(96) as usize;
                rng.bytes(len)
            } else {
                seeds[rng.below(seeds.len() as u64) as usize].clone()
            };
            rng.mutate(&mut input);
            if round % 3 == 0 && input.len() >= 4 {
                // Drop the frame so the header is read straight away.
                input.drain(..4);
            }
            target(&input);
        }
    }

    #[test]
    fn jute_request_target_survives_seeds_and_mutations() {
        drive(jute_request, 4_000, 0x5eed_0001);
    }

    #[test]
    fn jute_handshake_target_survives_seeds_and_mutations() {
        drive(jute_handshake, 4_000, 0x5eed_0002);
    }

    #[test]
    fn huge_length_prefixes_are_errors() {
        // A frame and a body each claiming 2 GB.
        let mut data = i32::MAX.to_be_bytes().to_vec();
        write_i32(&mut data, 1);
        write_i32(&mut data, 1);
        write_i32(&mut data, i32::MAX);
        jute_request(&data);
        jute_handshake(&data);
    }
}
