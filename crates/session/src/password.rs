//! Session passwords every node of a cluster can recompute.
//!
//! ZooKeeper derives a session's password from `java.util.Random` seeded with
//! `sessionId ^ superSecret`, a constant compiled into every server. That is
//! deterministic, so any server can check a reconnecting client, but it is no
//! secret at all. We keep the determinism and key it properly: the password is
//! SipHash-2-4 (Aumasson & Bernstein, "SipHash: a fast short-input PRF", 2012)
//! of the session id under a cluster-wide secret. SipHash is a keyed PRF, so a
//! client that knows its own (id, password) learns nothing about the secret
//! or another session's password, unlike with an invertible mixing function
//! such as SplitMix64. Strength is bounded by the 64-bit secret.

/// Length of a ZooKeeper session password.
pub const SESSION_PASSWORD_BYTES: usize = 16;

/// Second SipHash key word, derived from the 64-bit secret: an arbitrary
/// constant ("keel-pwd" in ASCII) so that k0 != k1.
const KEY_TWEAK: u64 = u64::from_be_bytes(*b"keel-pwd");

/// The password of `session_id` under `secret`: two SipHash-2-4 outputs, of the
/// id's 8 little-endian bytes followed by a lane byte 0 and 1, little-endian.
pub fn session_password(session_id: i64, secret: u64) -> [u8; SESSION_PASSWORD_BYTES] {
    let (k0, k1) = (secret, secret ^ KEY_TWEAK);
    let mut password = [0u8; SESSION_PASSWORD_BYTES];
    for (lane, half) in password.chunks_exact_mut(8).enumerate() {
        let mut message = [0u8; 9];
        message[..8].copy_from_slice(&session_id.to_le_bytes());
        message[8] = u8::try_from(lane).expect("two lanes");
        half.copy_from_slice(&siphash24(k0, k1, &message).to_le_bytes());
    }
    password
}

/// ZooKeeper's `checkPasswd`: session 0 never matches; the comparison does not
/// stop at the first differing byte.
pub fn check_password(session_id: i64, secret: u64, password: &[u8]) -> bool {
    if session_id == 0 || password.len() != SESSION_PASSWORD_BYTES {
        return false;
    }
    let expected = session_password(session_id, secret);
    let difference = expected
        .iter()
        .zip(password)
        .fold(0u8, |difference, (a, b)| difference | (a ^ b));
    difference == 0
}

/// SipHash-2-4 of `message` under the 128-bit key (k0, k1).
pub(crate) fn siphash24(k0: u64, k1: u64, message: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let blocks = message.chunks_exact(8);
    let tail = blocks.remainder();
    for block in blocks {
        compress(
            &mut v,
            u64::from_le_bytes(block.try_into().expect("8 bytes")),
        );
    }
    // The last block: the remaining bytes, with the length's low byte on top.
    let mut last = (message.len() as u64 & 0xff) << 56;
    for (index, &byte) in tail.iter().enumerate() {
        last |= u64::from(byte) << (8 * index);
    }
    compress(&mut v, last);
    v[2] ^= 0xff;
    for _ in 0..4 {
        sip_round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// Absorbs one 64-bit block with two rounds (the "2" of SipHash-2-4).
fn compress(v: &mut [u64; 4], block: u64) {
    v[3] ^= block;
    sip_round(v);
    sip_round(v);
    v[0] ^= block;
}

fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}
