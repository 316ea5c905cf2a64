//! Redis Cluster's key slots: CRC16 (XMODEM: polynomial 0x1021, initial
//! value 0, no reflection) of the key, or of its hash tag, modulo 16,384.
//! A hash tag is the part between the first `{` and the first `}` after
//! it, when that part is not empty: `{user1000}.following` and
//! `{user1000}.followers` share a slot.

/// Slots of the keyspace (Redis Cluster's CLUSTER_SLOTS).
pub const SLOTS: usize = 16_384;

/// CRC16 tables for slicing by 8: `[k][v]` is the CRC of byte `v`
/// followed by `k` zero bytes, so eight bytes fold in with eight
/// independent lookups instead of a chain of eight.
const fn crc16_tables() -> [[u16; 256]; 8] {
    let mut tables = [[0u16; 256]; 8];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = (byte as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        tables[0][byte] = crc;
        byte += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut byte = 0;
        while byte < 256 {
            let previous = tables[k - 1][byte];
            tables[k][byte] = (previous << 8) ^ tables[0][(previous >> 8) as usize];
            byte += 1;
        }
        k += 1;
    }
    tables
}

static CRC16_TABLES: [[u16; 256]; 8] = crc16_tables();

/// CRC16-XMODEM of `bytes`.
pub fn crc16(bytes: &[u8]) -> u16 {
    let t = &CRC16_TABLES;
    let mut chunks = bytes.chunks_exact(8);
    let mut crc = 0u16;
    for c in &mut chunks {
        // The running CRC folds into the first two bytes.
        let first = (crc >> 8) as u8 ^ c[0];
        let second = crc as u8 ^ c[1];
        crc = t[7][first as usize]
            ^ t[6][second as usize]
            ^ t[5][c[2] as usize]
            ^ t[4][c[3] as usize]
            ^ t[3][c[4] as usize]
            ^ t[2][c[5] as usize]
            ^ t[1][c[6] as usize]
            ^ t[0][c[7] as usize];
    }
    crc16_bytewise(crc, chunks.remainder())
}

/// CRC16-XMODEM continued from `crc` over `bytes`, one byte at a time.
fn crc16_bytewise(crc: u16, bytes: &[u8]) -> u16 {
    bytes.iter().fold(crc, |crc, &b| {
        (crc << 8) ^ CRC16_TABLES[0][(((crc >> 8) as u8) ^ b) as usize]
    })
}

/// The part of `key` that is hashed: its hash tag if it has a non-empty
/// one, else the whole key.
pub fn hashed_part(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The slot of `key` (0..SLOTS).
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hashed_part(key)) & (SLOTS as u16 - 1)
}

/// Which of `shards` owns `slot`: shards own equal contiguous ranges.
pub fn shard_of_slot(slot: u16, shards: usize) -> usize {
    assert!(shards > 0 && shards <= SLOTS);
    slot as usize * shards / SLOTS
}

/// The slots shard `index` of `shards` owns: `first..end`.
pub fn shard_slots(index: usize, shards: usize) -> std::ops::Range<u16> {
    assert!(index < shards && shards <= SLOTS);
    let first = (index * SLOTS).div_ceil(shards);
    let end = ((index + 1) * SLOTS).div_ceil(shards);
    first as u16..end as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_xmodem_check_value_and_redis_cluster_slots() {
        // The standard check value of CRC-16/XMODEM.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        // Slots Redis Cluster's CLUSTER KEYSLOT reports.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn slicing_by_eight_agrees_with_one_byte_at_a_time() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..100 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            assert_eq!(crc16(&bytes), crc16_bytewise(0, &bytes), "{bytes:?}");
        }
        assert_eq!(crc16(&[0xff; 64]), crc16_bytewise(0, &[0xff; 64]));
    }

    #[test]
    fn a_non_empty_hash_tag_decides_the_slot() {
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        assert_eq!(key_slot(b"{user1000}.x"), key_slot(b"user1000"));
        // An empty tag: the whole key is hashed.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 16383);
        // Only the first `{` and the first `}` after it count.
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        // No closing brace: the whole key.
        assert_eq!(hashed_part(b"foo{bar"), b"foo{bar");
    }

    #[test]
    fn shard_ranges_cover_every_slot_once_and_agree_with_shard_of_slot() {
        for shards in [1, 2, 3, 7, 64] {
            let mut next = 0u16;
            for index in 0..shards {
                let range = shard_slots(index, shards);
                assert_eq!(range.start, next);
                for slot in range.clone() {
                    assert_eq!(shard_of_slot(slot, shards), index);
                }
                next = range.end;
            }
            assert_eq!(next as usize, SLOTS);
        }
    }
}
