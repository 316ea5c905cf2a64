//! Session ids and timeout negotiation, laid out as ZooKeeper does.

/// ZooKeeper's `EphemeralType.CONTAINER_EPHEMERAL_OWNER`: the ephemeral owner
/// marking container znodes, so never a session id.
const CONTAINER_EPHEMERAL_OWNER: i64 = i64::MIN;
/// A ConnectRequest with session id 0 asks for a new session, so no session
/// may have it.
const NEW_SESSION_ID: i64 = 0;

/// Bits of the server id at the top of a session id.
const SERVER_ID_SHIFT: u32 = 56;
/// `(now << 24) >>> 8`: the low 40 bits of the clock, placed above 16 zero bits.
const CLOCK_SHIFT_LEFT: u32 = 24;
const CLOCK_SHIFT_RIGHT: u32 = 8;

/// ZooKeeper's session timeout negotiation (`ZooKeeperServer.processConnectRequest`):
/// the client's requested timeout clamped to `[min_ms, max_ms]`. Negative
/// requests get `min_ms`.
pub fn negotiate_timeout_ms(requested_ms: i32, min_ms: u32, max_ms: u32) -> u32 {
    assert!(
        min_ms <= max_ms,
        "session timeout bounds inverted: {min_ms} > {max_ms}"
    );
    let requested_ms = i64::from(requested_ms);
    let negotiated_ms = requested_ms.clamp(i64::from(min_ms), i64::from(max_ms));
    u32::try_from(negotiated_ms).expect("clamped into u32 bounds")
}

/// The first session id a server hands out; it then counts up by one.
///
/// ZooKeeper's `SessionTrackerImpl.initializeNextSessionId`:
/// `(server_id << 56) | ((now_ms << 24) >>> 8)`. The server id in the top byte
/// keeps servers' id spaces disjoint; the clock's low 40 bits (a 34.8-year
/// cycle) in bits 16..56 keep a restarted server from reissuing recent ids, so
/// pass a wall clock here. Each server can issue 2^16 ids per clock millisecond
/// elapsed since start before its range reaches ids that a later restart could
/// produce.
///
/// Like ZooKeeper, skips the container-owner sentinel `i64::MIN`; unlike
/// ZooKeeper, also skips 0 (server 0 at clock 0), which the wire protocol
/// reserves for "new session".
pub fn initial_session_id(server_id: u8, now_ms: u64) -> i64 {
    let clock_bits = (now_ms << CLOCK_SHIFT_LEFT) >> CLOCK_SHIFT_RIGHT;
    let server_bits = u64::from(server_id) << SERVER_ID_SHIFT;
    assert_eq!(clock_bits & server_bits, 0);
    let session_id = (server_bits | clock_bits) as i64;
    let session_id = if session_id == CONTAINER_EPHEMERAL_OWNER || session_id == NEW_SESSION_ID {
        session_id + 1
    } else {
        session_id
    };
    assert_eq!((session_id as u64) >> SERVER_ID_SHIFT, u64::from(server_id));
    session_id
}

/// Bits of the server id in a local session id (below the zero top byte).
const LOCAL_SERVER_ID_SHIFT: u32 = 48;
/// The low 31 bits of the clock, placed above 16 zero bits: bit 47 stays
/// clear, so a counter started anywhere can count 2^47 ids before it
/// would touch the server id.
const LOCAL_CLOCK_MASK: u64 = 0x7FFF_FFFF;
const LOCAL_CLOCK_SHIFT: u32 = 16;

/// The first id of a server's local sessions (read-only mode: sessions
/// that live on one server and never reach the log); it then counts up
/// by one.
///
/// A global session id carries its server id (1..=255) in its top byte
/// (`initial_session_id`); a local one has a zero top byte, so the two
/// spaces never meet (a counter would need 2^47 ids to reach the server
/// id bits). Below it, the server id in bits 48..56 keeps two servers'
/// local ids apart, and the low 31 bits of the clock in bits 16..47 keep
/// a restarted server from reissuing recent ones (2^16 ids per
/// millisecond, a 24.8-day cycle).
pub fn initial_local_session_id(server_id: u8, now_ms: u64) -> i64 {
    assert!(server_id > 0, "server ids start at 1");
    let clock_bits = (now_ms & LOCAL_CLOCK_MASK) << LOCAL_CLOCK_SHIFT;
    let server_bits = u64::from(server_id) << LOCAL_SERVER_ID_SHIFT;
    let session_id = (server_bits | clock_bits) as i64;
    assert!(is_local_session_id(session_id));
    session_id
}

/// Whether `session_id` has the shape of a local session id (zero top
/// byte, not 0): global ids never do.
pub fn is_local_session_id(session_id: i64) -> bool {
    session_id > 0 && (session_id as u64) >> SERVER_ID_SHIFT == 0
}
