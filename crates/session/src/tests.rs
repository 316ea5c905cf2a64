//! Specifications of ZooKeeper session bookkeeping.

use std::collections::BTreeMap;

use crate::password::siphash24;
use crate::*;

const TICK_MS: u64 = 2_000;
const ALICE: i64 = 0x0100_0000_0000_0001;
const BOB: i64 = 0x0100_0000_0000_0002;
const CAROL: i64 = 0x0200_0000_0000_0003;

fn tracker() -> SessionTracker {
    SessionTracker::new(TICK_MS)
}

#[test]
fn a_session_expires_exactly_at_its_rounded_deadline() {
    let mut sessions = tracker();
    // 1_000 + 5_000 = 6_000, rounded up past the tick to 8_000.
    sessions.add(ALICE, 5_000, 1_000);
    assert_eq!(sessions.session_deadline_ms(ALICE), Some(8_000));
    assert_eq!(sessions.next_deadline_ms(), Some(8_000));
    assert!(sessions.expired(7_999).is_empty());
    assert_eq!(sessions.expired(8_000), vec![ALICE]);
    assert!(sessions.is_closing(ALICE));
    assert!(sessions.contains(ALICE));
    sessions.assert_invariants();
}

#[test]
fn a_deadline_between_ticks_rounds_up_to_the_next_tick() {
    let mut sessions = tracker();
    sessions.add(ALICE, 4_500, 0);
    sessions.add(BOB, 5_999, 0);
    assert_eq!(sessions.session_deadline_ms(ALICE), Some(6_000));
    assert_eq!(sessions.session_deadline_ms(BOB), Some(6_000));
    assert_eq!(sessions.expired(6_000), vec![ALICE, BOB]);
}

#[test]
fn touch_extends_the_deadline() {
    let mut sessions = tracker();
    sessions.add(ALICE, 4_000, 0);
    assert_eq!(sessions.session_deadline_ms(ALICE), Some(6_000));
    assert!(sessions.touch(ALICE, 3_000));
    assert_eq!(sessions.session_deadline_ms(ALICE), Some(8_000));
    assert!(sessions.expired(7_999).is_empty());
    assert_eq!(sessions.expired(8_000), vec![ALICE]);
    sessions.assert_invariants();
}

#[test]
fn touch_within_the_same_tick_changes_nothing_and_never_shortens() {
    let mut sessions = tracker();
    sessions.add(ALICE, 4_000, 2_500);
    assert_eq!(sessions.session_deadline_ms(ALICE), Some(8_000));
    assert!(sessions.touch(ALICE, 3_500));
    assert_eq!(sessions.session_deadline_ms(ALICE), Some(8_000));
    // A clock that steps back does not pull the deadline in.
    assert!(sessions.touch(ALICE, 0));
    assert_eq!(sessions.session_deadline_ms(ALICE), Some(8_000));
    sessions.assert_invariants();
}

#[test]
fn touch_fails_for_unknown_and_closing_sessions() {
    let mut sessions = tracker();
    assert!(!sessions.touch(ALICE, 0));
    sessions.add(ALICE, 4_000, 0);
    sessions.set_closing(ALICE);
    assert!(!sessions.touch(ALICE, 1_000));
    assert_eq!(sessions.session_deadline_ms(ALICE), None);
    sessions.assert_invariants();
}

#[test]
fn an_expired_session_is_returned_once_and_stays_until_removed() {
    let mut sessions = tracker();
    sessions.add(ALICE, 4_000, 0);
    assert_eq!(sessions.expired(10_000), vec![ALICE]);
    assert!(sessions.expired(20_000).is_empty());
    assert!(!sessions.touch(ALICE, 20_000));
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions.timeout_ms(ALICE), Some(4_000));
    assert!(sessions.remove(ALICE));
    assert!(!sessions.remove(ALICE));
    assert!(sessions.is_empty());
    sessions.assert_invariants();
}

#[test]
fn a_closing_session_is_never_returned_by_expired() {
    let mut sessions = tracker();
    sessions.add(ALICE, 4_000, 0);
    sessions.add(BOB, 4_000, 0);
    sessions.set_closing(BOB);
    sessions.set_closing(BOB);
    sessions.set_closing(CAROL); // Unknown: ignored, as in ZooKeeper.
    assert!(!sessions.contains(CAROL));
    assert_eq!(sessions.expired(6_000), vec![ALICE]);
    assert!(sessions.expired(u64::MAX).is_empty());
    sessions.assert_invariants();
}

#[test]
fn expired_collects_every_due_bucket_sorted_by_session_id() {
    let mut sessions = tracker();
    sessions.add(CAROL, 2_000, 0);
    sessions.add(BOB, 8_000, 0);
    sessions.add(ALICE, 4_000, 0);
    sessions.add(0x7fff, 30_000, 0);
    assert_eq!(sessions.next_deadline_ms(), Some(4_000));
    assert_eq!(sessions.expired(10_000), vec![ALICE, BOB, CAROL]);
    assert_eq!(sessions.next_deadline_ms(), Some(32_000));
    sessions.assert_invariants();
}

#[test]
fn removing_an_open_session_forgets_its_deadline() {
    let mut sessions = tracker();
    sessions.add(ALICE, 4_000, 0);
    assert!(sessions.remove(ALICE));
    assert_eq!(sessions.next_deadline_ms(), None);
    assert!(sessions.expired(u64::MAX).is_empty());
    assert_eq!(sessions.timeout_ms(ALICE), None);
    sessions.assert_invariants();
}

#[test]
fn renew_all_gives_every_session_a_full_timeout_and_reopens_closing_ones() {
    let mut sessions = tracker();
    sessions.add(ALICE, 4_000, 0);
    sessions.add(BOB, 10_000, 0);
    sessions.add(CAROL, 4_000, 0);
    sessions.set_closing(CAROL);
    sessions.renew_all(100_000);
    assert_eq!(sessions.session_deadline_ms(ALICE), Some(106_000));
    assert_eq!(sessions.session_deadline_ms(BOB), Some(112_000));
    assert!(!sessions.is_closing(CAROL));
    assert!(sessions.expired(105_999).is_empty());
    assert_eq!(sessions.expired(106_000), vec![ALICE, CAROL]);
    assert_eq!(sessions.expired(112_000), vec![BOB]);
    sessions.assert_invariants();
}

#[test]
fn sessions_lists_ids_and_timeouts_sorted() {
    let mut sessions = tracker();
    sessions.add(CAROL, 30_000, 0);
    sessions.add(-5, 6_000, 0);
    sessions.add(ALICE, 4_000, 0);
    assert_eq!(
        sessions.sessions(),
        vec![(-5, 6_000), (ALICE, 4_000), (CAROL, 30_000)]
    );
}

#[test]
#[should_panic(expected = "tracked twice")]
fn adding_a_tracked_session_again_is_a_caller_bug() {
    let mut sessions = tracker();
    sessions.add(ALICE, 4_000, 0);
    sessions.add(ALICE, 4_000, 0);
}

/// A naive model: every open session's deadline, checked by full scans.
#[test]
fn random_operations_match_a_scan_of_all_deadlines() {
    let mut state = 0x5eed_u64;
    let mut next = move |bound: u64| {
        // SplitMix64.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % bound
    };
    let mut sessions = tracker();
    let mut model: BTreeMap<i64, (u32, Option<u64>)> = BTreeMap::new();
    let mut now_ms = 0u64;
    for _ in 0..20_000 {
        now_ms += next(700);
        let session_id = next(40) as i64;
        let timeout_ms = 1_000 + next(9_000) as u32;
        let rounded = |now_ms: u64, timeout_ms: u32| {
            (now_ms + u64::from(timeout_ms)) / TICK_MS * TICK_MS + TICK_MS
        };
        match next(6) {
            0 if !model.contains_key(&session_id) => {
                sessions.add(session_id, timeout_ms, now_ms);
                model.insert(session_id, (timeout_ms, Some(rounded(now_ms, timeout_ms))));
            }
            0 | 1 => {
                let expected = match model.get_mut(&session_id) {
                    Some((timeout_ms, Some(deadline_ms))) => {
                        *deadline_ms = rounded(now_ms, *timeout_ms);
                        true
                    }
                    _ => false,
                };
                assert_eq!(sessions.touch(session_id, now_ms), expected);
            }
            2 => {
                let expected = model.remove(&session_id).is_some();
                assert_eq!(sessions.remove(session_id), expected);
            }
            3 => {
                sessions.set_closing(session_id);
                if let Some((_, deadline_ms)) = model.get_mut(&session_id) {
                    *deadline_ms = None;
                }
            }
            _ => {
                let mut expected = Vec::new();
                for (&id, (_, deadline_ms)) in model.iter_mut() {
                    if deadline_ms.is_some_and(|deadline_ms| deadline_ms <= now_ms) {
                        *deadline_ms = None;
                        expected.push(id);
                    }
                }
                assert_eq!(sessions.expired(now_ms), expected);
            }
        }
        let next_deadline_ms = model
            .values()
            .filter_map(|(_, deadline_ms)| *deadline_ms)
            .min();
        assert_eq!(sessions.next_deadline_ms(), next_deadline_ms);
        assert_eq!(sessions.len(), model.len());
        sessions.assert_invariants();
    }
}

#[test]
fn negotiation_clamps_the_requested_timeout_to_the_bounds() {
    assert_eq!(negotiate_timeout_ms(30_000, 4_000, 40_000), 30_000);
    assert_eq!(negotiate_timeout_ms(1_000, 4_000, 40_000), 4_000);
    assert_eq!(negotiate_timeout_ms(100_000, 4_000, 40_000), 40_000);
    assert_eq!(negotiate_timeout_ms(0, 4_000, 40_000), 4_000);
    assert_eq!(negotiate_timeout_ms(-1, 4_000, 40_000), 4_000);
    assert_eq!(negotiate_timeout_ms(i32::MIN, 4_000, 40_000), 4_000);
    assert_eq!(negotiate_timeout_ms(i32::MAX, 4_000, 40_000), 40_000);
    assert_eq!(negotiate_timeout_ms(i32::MAX, 0, u32::MAX), i32::MAX as u32);
    assert_eq!(negotiate_timeout_ms(7, 5_000, 5_000), 5_000);
}

#[test]
#[should_panic(expected = "inverted")]
fn negotiation_with_inverted_bounds_is_a_configuration_bug() {
    negotiate_timeout_ms(10_000, 40_000, 4_000);
}

#[test]
fn initial_session_ids_follow_zookeepers_layout() {
    // Values computed with Java's long arithmetic:
    // (server << 56) | ((now << 24) >>> 8).
    assert_eq!(
        initial_session_id(1, 0x0123_4567_89ab),
        0x0123_4567_89ab_0000
    );
    assert_eq!(
        initial_session_id(255, 1_767_225_600_000),
        0xff9b_76da_a800_0000_u64 as i64
    );
    assert_eq!(
        initial_session_id(200, 1_767_225_600_000),
        0xc89b_76da_a800_0000_u64 as i64
    );
    // Only the clock's low 40 bits are kept.
    assert_eq!(
        initial_session_id(7, (1 << 40) | 0x10),
        initial_session_id(7, 0x10)
    );
}

#[test]
fn initial_session_ids_skip_reserved_values() {
    assert_eq!(initial_session_id(128, 0), i64::MIN + 1, "container owner");
    assert_eq!(initial_session_id(128, 1 << 40), i64::MIN + 1);
    assert_eq!(initial_session_id(0, 0), 1, "new-session marker");
}

#[test]
fn ids_of_different_server_ids_never_collide() {
    /// Sessions each server issues in this test, counting up from its first id.
    const ISSUED: u64 = 1 << 20;
    let clocks = [0u64, 1, 1_767_225_600_000, (1 << 40) - (ISSUED >> 16) - 1];
    for now_ms in clocks {
        let mut ranges: Vec<(u64, u64)> = (0..=u8::MAX)
            .map(|server_id| {
                let first = initial_session_id(server_id, now_ms) as u64;
                let last = first + ISSUED - 1;
                assert_eq!(
                    last >> 56,
                    u64::from(server_id),
                    "range leaves its top byte"
                );
                (first, last)
            })
            .collect();
        ranges.sort_unstable();
        assert!(ranges.windows(2).all(|pair| pair[0].1 < pair[1].0));
    }
}

#[test]
fn siphash_matches_the_reference_vectors() {
    // Key 00..0f; from the SipHash paper's appendix and reference vectors.
    let (k0, k1) = (0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
    let message: Vec<u8> = (0u8..15).collect();
    assert_eq!(siphash24(k0, k1, &message), 0xa129_ca61_49be_45e5);
    assert_eq!(siphash24(k0, k1, &[]), 0x726f_db47_dd0e_0e31);
}

#[test]
#[allow(deprecated)] // std's SipHasher is SipHash-2-4: a second implementation.
fn siphash_matches_the_standard_librarys_sip_hasher() {
    use std::hash::{Hasher, SipHasher};
    for length in 0..40u8 {
        let message: Vec<u8> = (0..length).map(|i| i.wrapping_mul(37) ^ length).collect();
        let (k0, k1) = (u64::from(length) * 0x1234_5678_9abc, !u64::from(length));
        let mut hasher = SipHasher::new_with_keys(k0, k1);
        hasher.write(&message);
        assert_eq!(
            siphash24(k0, k1, &message),
            hasher.finish(),
            "length {length}"
        );
    }
}

#[test]
fn session_passwords_are_deterministic_and_differ_per_session_and_secret() {
    const SECRET: u64 = 0x5ec2_e7c0_ffee_0001;
    let password = session_password(ALICE, SECRET);
    assert_eq!(password.len(), SESSION_PASSWORD_BYTES);
    assert_eq!(session_password(ALICE, SECRET), password);
    assert_ne!(
        password[..8],
        password[8..],
        "the two halves are independent"
    );
    assert_ne!(session_password(BOB, SECRET), password);
    assert_ne!(session_password(ALICE, SECRET ^ 1), password);
    let mut seen = std::collections::HashSet::new();
    for session_id in 0..10_000i64 {
        assert!(seen.insert(session_password(session_id, SECRET)));
    }
}

#[test]
fn a_password_checks_only_for_its_own_session() {
    const SECRET: u64 = 42;
    let password = session_password(ALICE, SECRET);
    assert!(check_password(ALICE, SECRET, &password));
    assert!(!check_password(BOB, SECRET, &password));
    assert!(!check_password(ALICE, SECRET + 1, &password));
    assert!(!check_password(ALICE, SECRET, &password[..15]));
    assert!(!check_password(ALICE, SECRET, &[0; 16]));
    assert!(!check_password(0, SECRET, &session_password(0, SECRET)));
}

#[test]
fn local_session_ids_never_meet_global_ones() {
    /// Sessions each server issues in this test, counting up from its first id.
    const ISSUED: u64 = 1 << 20;
    // The last clock: a global counter started there still stays inside
    // its top byte (ids_of_different_server_ids_never_collide).
    let clocks = [0u64, 1, 1_767_225_600_000, (1 << 40) - (ISSUED >> 16) - 1];
    for server_id in 1..=u8::MAX {
        let first = initial_local_session_id(server_id, u64::MAX);
        assert!(is_local_session_id(first + (1 << 46)), "2^46 ids later");
    }
    for now_ms in clocks {
        for server_id in 1..=u8::MAX {
            let first = initial_local_session_id(server_id, now_ms);
            let last = first + ISSUED as i64 - 1;
            assert!(is_local_session_id(first) && is_local_session_id(last));
            assert_eq!(
                (first as u64) >> 48,
                u64::from(server_id),
                "the server id sits below the zero top byte"
            );
            // Every global id of every server (1..=255) has its server
            // id in the top byte: never the shape of a local one.
            let global = initial_session_id(server_id, now_ms);
            assert!(!is_local_session_id(global));
            assert!(!is_local_session_id(global + ISSUED as i64 - 1));
        }
    }
    assert!(!is_local_session_id(0), "the new-session marker");
    assert!(!is_local_session_id(i64::MIN), "the container owner");
    assert!(!is_local_session_id(-1));
}

#[test]
fn local_session_ids_of_two_servers_or_two_starts_differ() {
    assert_ne!(
        initial_local_session_id(1, 5_000),
        initial_local_session_id(2, 5_000)
    );
    // A restart a millisecond later starts 2^16 ids further on.
    assert_eq!(
        initial_local_session_id(3, 5_001) - initial_local_session_id(3, 5_000),
        1 << 16
    );
}
