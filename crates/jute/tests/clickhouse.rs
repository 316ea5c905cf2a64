//! Golden vectors of ClickHouse Keeper's protocol extensions.
//!
//! No ClickHouse binary is available to capture from, so each frame is
//! written out by hand, field by field, in the order ClickHouse's
//! serializer writes it (src/Common/ZooKeeper/ZooKeeperCommon.cpp):
//! a request is `int32 length, int32 xid, int32 op, writeImpl()`, a reply
//! `int32 length, int32 xid, int64 zxid, int32 error` followed by
//! `writeImpl()` only when the error is 0; integers are big-endian, a
//! `bool` and a `uint8_t` one byte, a string an `int32` length and its
//! bytes; a multi is `{int32 op, bool done, int32 error}` headers, each
//! followed by the op's body, ending with `{-1, true, -1}`. Every frame
//! is decoded with keel-jute, checked, re-encoded, and compared byte for
//! byte.

use keel_jute::*;

/// Bytes from hex, whitespace ignored (so fields can stand apart).
fn hex(text: &str) -> Vec<u8> {
    let digits: String = text.split_whitespace().collect();
    assert!(digits.len().is_multiple_of(2), "odd hex: {text}");
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// A frame: the parts after the length prefix, prefixed by their length.
fn frame(parts: &[&str]) -> Vec<u8> {
    let payload: Vec<u8> = parts.iter().flat_map(|part| hex(part)).collect();
    let mut out = (payload.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&payload);
    out
}

fn payload(frame: &[u8]) -> &[u8] {
    let (payload, total) = frame::split_frame(frame, DEFAULT_MAX_FRAME_BYTES)
        .expect("valid frame")
        .expect("complete frame");
    assert_eq!(total, frame.len());
    payload
}

/// Decodes a request frame and checks it re-encodes to the same bytes.
fn request(frame: &[u8]) -> (RequestHeader, Request) {
    let payload = payload(frame);
    let mut r = Reader::new(payload);
    let header = RequestHeader::read(&mut r).expect("header");
    let body = &payload[r.position()..];
    let request = Request::decode(header.op_type, body).expect("body");
    assert_eq!(request.op_code(), header.op_type);
    let mut again = Vec::new();
    write_frame(&mut again, |out| {
        header.write(out);
        request.encode(out);
    });
    assert_eq!(again, frame, "{request:?}");
    (header, request)
}

/// Decodes a reply frame to a request of `op` and checks the round trip.
fn reply(frame: &[u8], op: i32) -> (ReplyHeader, Response) {
    let payload = payload(frame);
    let mut r = Reader::new(payload);
    let header = ReplyHeader::read(&mut r).expect("header");
    let body = &payload[r.position()..];
    if header.err != 0 {
        assert!(body.is_empty(), "an error reply has no body");
    }
    let response = Response::decode_reply(op, header.err, body).expect("body");
    let mut again = Vec::new();
    write_frame(&mut again, |out| {
        header.write(out);
        response.encode(out);
    });
    assert_eq!(again, frame, "{response:?}");
    (header, response)
}

// Fields used more than once.
const XID: &str = "0000002a"; // 42
const ZXID: &str = "0000000100000007"; // epoch 1, counter 7
const OK: &str = "00000000";
/// A Stat: czxid 1<<32|3, mzxid 1<<32|5, ctime 1700000000000, mtime
/// 1700000000001, version 2, cversion 4, aversion 0, ephemeralOwner 0,
/// dataLength 1, numChildren 2, pzxid 1<<32|6.
const STAT: &str = "0000000100000003 0000000100000005 0000018bcfe56800 0000018bcfe56801
                    00000002 00000004 00000000 0000000000000000 00000001 00000002
                    0000000100000006";

fn stat() -> Stat {
    Stat {
        czxid: 1 << 32 | 3,
        mzxid: 1 << 32 | 5,
        ctime: 1_700_000_000_000,
        mtime: 1_700_000_000_001,
        version: 2,
        cversion: 4,
        aversion: 0,
        ephemeral_owner: 0,
        data_length: 1,
        num_children: 2,
        pzxid: 1 << 32 | 6,
    }
}

fn names(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn stat_constant_matches_its_description() {
    assert_eq!(hex(STAT), stat().to_bytes());
}

#[test]
fn filtered_list_request_and_reply() {
    let frame = frame(&[
        XID,
        "000001f4",        // op 500 filteredList
        "00000003 2f6368", // path "/ch"
        "01",              // has_watch
        "02",              // list_request_type EPHEMERAL_ONLY
    ]);
    let (header, request) = request(&frame);
    assert_eq!((header.xid, header.op_type), (42, opcode::FILTERED_LIST));
    assert_eq!(
        request,
        Request::FilteredList(FilteredListRequest {
            path: "/ch".into(),
            watch: true,
            list_type: ListRequestType::EphemeralOnly,
        })
    );
    // Answered by ClickHouse's ZooKeeperListResponse: names, then the Stat.
    let frame = frame_reply(&[
        "00000002", // two names
        "00000001 61",
        "00000001 62",
        STAT,
    ]);
    let (_, response) = reply(&frame, opcode::FILTERED_LIST);
    assert_eq!(response, Response::GetChildren2(names(&["a", "b"]), stat()));
    // A type byte ClickHouse never writes is refused.
    let bad = self::frame(&[XID, "000001f4", "00000003 2f6368", "00", "03"]);
    let mut r = Reader::new(payload(&bad));
    let header = RequestHeader::read(&mut r).unwrap();
    assert!(Request::decode(header.op_type, r.read_rest()).is_err());
}

/// A successful reply to XID at ZXID with this body.
fn frame_reply(body: &[&str]) -> Vec<u8> {
    let mut parts = vec![XID, ZXID, OK];
    parts.extend_from_slice(body);
    frame(&parts)
}

#[test]
fn check_not_exists_request_and_replies() {
    let frame = frame(&[
        XID,
        "000001f5",        // op 501 checkNotExists
        "00000003 2f6368", // path "/ch"
        "ffffffff",        // version -1
    ]);
    let (_, request) = request(&frame);
    assert_eq!(
        request,
        Request::CheckNotExists(CheckVersionRequest {
            path: "/ch".into(),
            version: -1,
        })
    );
    // ZooKeeperCheckResponse writes nothing; NodeExists is a bare header.
    let (header, response) = reply(&frame_reply(&[]), opcode::CHECK_NOT_EXISTS);
    assert_eq!((header.err, response), (0, Response::Empty));
    let exists = self::frame(&[XID, ZXID, "ffffff92"]); // -110 NodeExists
    let (header, response) = reply(&exists, opcode::CHECK_NOT_EXISTS);
    assert_eq!((header.err, response), (-110, Response::Empty));
}

#[test]
fn create_if_not_exists_request_and_reply() {
    let frame = frame(&[
        XID,
        "000001f6",              // op 502 createIfNotExists
        "00000006 2f63682f6e31", // path "/ch/n1"
        "00000002 7631",         // data "v1"
        "00000001",              // one ACL
        "0000001f",              // perms ALL
        "00000005 776f726c64",   // scheme "world"
        "00000006 616e796f6e65", // id "anyone"
        "00000001",              // flags: is_ephemeral (bit 0)
    ]);
    let (_, request) = request(&frame);
    assert_eq!(
        request,
        Request::CreateIfNotExists(CreateRequest {
            path: "/ch/n1".into(),
            data: Some(b"v1".to_vec()),
            acl: vec![Acl {
                perms: perms::ALL,
                id: Id {
                    scheme: "world".into(),
                    id: "anyone".into(),
                },
            }],
            flags: 1,
        })
    );
    assert!(request.is_write());
    // ZooKeeperCreateResponse: path_created, for a created node and for
    // one that was already there alike.
    let frame = frame_reply(&["00000006 2f63682f6e31"]);
    let (_, response) = reply(&frame, opcode::CREATE_IF_NOT_EXISTS);
    assert_eq!(response, Response::Create("/ch/n1".into()));
}

#[test]
fn remove_recursive_request_and_reply() {
    let frame = frame(&[
        XID,
        "000001f7",        // op 503 removeRecursive
        "00000003 2f6368", // path "/ch"
        "00000064",        // remove_nodes_limit 100 (uint32)
    ]);
    let (_, request) = request(&frame);
    assert_eq!(
        request,
        Request::RemoveRecursive(RemoveRecursiveRequest {
            path: "/ch".into(),
            remove_nodes_limit: 100,
        })
    );
    assert!(request.is_write());
    let big = self::frame(&[XID, "000001f7", "00000003 2f6368", "fffffffe"]);
    let (_, request) = self::request(&big);
    assert!(matches!(
        request,
        Request::RemoveRecursive(RemoveRecursiveRequest {
            remove_nodes_limit: 0xffff_fffe,
            ..
        })
    ));
    let (_, response) = reply(&frame_reply(&[]), opcode::REMOVE_RECURSIVE);
    assert_eq!(response, Response::Empty);
    let not_empty = self::frame(&[XID, ZXID, "ffffff91"]); // -111 NotEmpty
    assert_eq!(reply(&not_empty, opcode::REMOVE_RECURSIVE).0.err, -111);
}

#[test]
fn a_multi_of_clickhouse_writes_and_its_replies() {
    let frame = frame(&[
        XID,
        "0000000e", // op 14 multi
        "000001f5 00 ffffffff",
        "00000003 2f6368 00000000", // checkNotExists "/ch" version 0
        "000001f6 00 ffffffff",
        "00000003 2f6368 ffffffff 00000000 00000000", // createIfNotExists "/ch", null data, no ACL, flags 0
        "000001f7 00 ffffffff",
        "00000003 2f6368 00000005", // removeRecursive "/ch" limit 5
        "ffffffff 01 ffffffff",     // end
    ]);
    let (_, request) = request(&frame);
    let Request::Multi(ops) = request else {
        panic!("{request:?}");
    };
    let codes: Vec<i32> = ops.iter().map(MultiOp::op_code).collect();
    assert_eq!(codes, [501, 502, 503]);
    // ZooKeeperMultiResponse: per op its response's op, done=false, error,
    // and its body when the error is 0.
    let ok = frame_reply(&[
        "000001f5 00 00000000",
        "000001f6 00 00000000 00000003 2f6368",
        "000001f7 00 00000000",
        "ffffffff 01 ffffffff",
    ]);
    let (header, response) = reply(&ok, opcode::MULTI);
    assert_eq!(header.err, 0);
    assert_eq!(
        response,
        Response::Multi(vec![
            MultiResult::CheckNotExists,
            MultiResult::CreateIfNotExists("/ch".into()),
            MultiResult::RemoveRecursive,
        ])
    );
    // A failed multi: every op an ErrorResponse (op -1, the code twice);
    // the ops before the failing one 0, those after it -2.
    let failed = frame_reply(&[
        "ffffffff 00 00000000 00000000",
        "ffffffff 00 ffffff92 ffffff92",
        "ffffffff 00 fffffffe fffffffe",
        "ffffffff 01 ffffffff",
    ]);
    let (_, response) = reply(&failed, opcode::MULTI);
    assert_eq!(
        response,
        Response::Multi(vec![
            MultiResult::Error(0),
            MultiResult::Error(-110),
            MultiResult::Error(-2),
        ])
    );
}

#[test]
fn a_multi_read_of_clickhouse_reads_and_its_reply() {
    let frame = frame(&[
        XID,
        "00000016",                                   // op 22 multiRead
        "00000004 00 ffffffff 00000003 2f6368 00",    // get "/ch"
        "00000003 00 ffffffff 00000003 2f6378 00",    // exists "/cx"
        "00000008 00 ffffffff 00000003 2f6368 00",    // simple list "/ch"
        "0000000c 00 ffffffff 00000003 2f6368 00",    // list "/ch"
        "000001f4 00 ffffffff 00000003 2f6378 00 01", // filteredList "/cx" PERSISTENT_ONLY
        "ffffffff 01 ffffffff",
    ]);
    let (_, request) = request(&frame);
    let Request::MultiRead(ops) = request else {
        panic!("{request:?}");
    };
    assert!(ops.iter().all(MultiOp::is_read));
    assert_eq!(
        ops[4],
        MultiOp::FilteredList(FilteredListRequest {
            path: "/cx".into(),
            watch: false,
            list_type: ListRequestType::PersistentOnly,
        })
    );
    // ClickHouse Keeper's reply: a failed op keeps its response's op (a
    // filteredList's is a list, 12) and has no body.
    let frame = frame_reply(&[
        "00000004 00 00000000 00000001 76",
        STAT,
        "00000003 00 ffffff9b", // exists: -101 NoNode
        "00000008 00 00000000 00000001 00000001 61",
        "0000000c 00 00000000 00000001 00000001 61",
        STAT,
        "0000000c 00 ffffff9b", // filteredList: -101 NoNode
        "ffffffff 01 ffffffff",
    ]);
    let (_, response) = reply(&frame, opcode::MULTI_READ);
    let Response::Multi(results) = &response else {
        panic!("{response:?}");
    };
    assert_eq!(
        results,
        &[
            MultiResult::GetData(Some(b"v".to_vec()), stat()),
            MultiResult::Failed { op: 3, err: -101 },
            MultiResult::GetChildren(names(&["a"])),
            MultiResult::GetChildren2(names(&["a"]), stat()),
            MultiResult::Failed { op: 12, err: -101 },
        ]
    );
    // What Keel turns ZooKeeper's form into for a ClickHouse client.
    let mut zookeeper_form = results.clone();
    zookeeper_form[1] = MultiResult::Error(-101);
    zookeeper_form[4] = MultiResult::Error(-101);
    clickhouse::to_clickhouse_failures(&ops, &mut zookeeper_form);
    assert_eq!(&zookeeper_form, results);
}

#[test]
fn feature_flags_reply_is_a_plain_get_data_reply() {
    // What ClickHouse's client reads at connect: getData /keeper/feature_flags.
    let frame = frame(&[
        XID,
        "00000004",
        "00000015 2f6b65657065722f666561747572655f666c616773", // "/keeper/feature_flags"
        "00",
    ]);
    let (_, request) = request(&frame);
    assert_eq!(request.path(), Some("/keeper/feature_flags"));
    let reply_frame = frame_reply(&[
        "00000002 f800", // FILTERED_LIST..REMOVE_RECURSIVE: bits 7..3 of byte 0
        "0000000000000000 0000000000000000 0000000000000000 0000000000000000",
        "00000000 00000000 00000000 0000000000000000 00000002 00000000",
        "0000000000000000",
    ]);
    let (_, response) = reply(&reply_frame, opcode::GET_DATA);
    let Response::GetData(Some(data), stat) = response else {
        panic!("{response:?}");
    };
    assert_eq!(data, [0xf8, 0x00]);
    assert_eq!(stat.data_length, 2);
}
