//! Golden-vector tests: frames captured between real ZooKeeper 3.8 clients
//! (the Java client and kazoo) and a real ZooKeeper 3.8.0 server, see
//! `tests/golden/README.md`. Every frame is decoded with this crate,
//! checked where the values matter, re-encoded, and compared byte for byte
//! with the capture.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use keel_jute::frame::split_frame;
use keel_jute::*;

/// A captured frame plus the metadata the proxy wrote alongside it.
struct Golden {
    name: String,
    meta: HashMap<String, String>,
    frame: Vec<u8>,
}

impl Golden {
    fn meta(&self, key: &str) -> &str {
        self.meta
            .get(key)
            .unwrap_or_else(|| panic!("{}: no `{key}` metadata", self.name))
    }

    /// The op code: the request's own, or for a reply the one of the request
    /// it answers (the proxy matched them by xid).
    fn opcode(&self) -> i32 {
        let text = self.meta("opcode");
        let number = text.split_whitespace().next().unwrap_or_default();
        number
            .parse()
            .unwrap_or_else(|_| panic!("{}: bad opcode {text:?}", self.name))
    }

    fn payload(&self) -> &[u8] {
        let (payload, total) = split_frame(&self.frame, DEFAULT_MAX_FRAME_BYTES)
            .unwrap_or_else(|e| panic!("{}: bad frame: {e}", self.name))
            .unwrap_or_else(|| panic!("{}: incomplete frame", self.name));
        assert_eq!(total, self.frame.len(), "{}: trailing bytes", self.name);
        payload
    }
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn parse_golden(name: &str, text: &str) -> Golden {
    let mut meta = HashMap::new();
    let mut hex = String::new();
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix('#') {
            if let Some((key, value)) = comment.split_once(':') {
                meta.insert(key.trim().to_owned(), value.trim().to_owned());
            }
        } else {
            hex.push_str(line.trim());
        }
    }
    assert!(
        hex.len().is_multiple_of(2),
        "{name}: odd number of hex digits"
    );
    let frame = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex digit"))
        .collect();
    Golden {
        name: name.to_owned(),
        meta,
        frame,
    }
}

fn load(name: &str) -> Golden {
    let path = golden_dir().join(format!("{name}.hex"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_golden(name, &text)
}

fn load_all() -> Vec<Golden> {
    let mut names: Vec<String> = fs::read_dir(golden_dir())
        .expect("golden dir")
        .map(|entry| {
            entry
                .expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter_map(|file| file.strip_suffix(".hex").map(str::to_owned))
        .collect();
    names.sort();
    names.iter().map(|name| load(name)).collect()
}

/// What a frame decodes to.
#[derive(Debug)]
enum Decoded {
    ConnectRequest(ConnectRequest),
    ConnectResponse(ConnectResponse),
    Request(RequestHeader, Request),
    Reply(ReplyHeader, Response),
    Event(ReplyHeader, WatcherEvent),
}

fn decode(g: &Golden) -> Decoded {
    let payload = g.payload();
    let fail = |e: JuteError| -> ! { panic!("{}: decode failed: {e}", g.name) };
    match g.meta("kind") {
        "connect_request" => {
            Decoded::ConnectRequest(ConnectRequest::from_bytes(payload).unwrap_or_else(|e| fail(e)))
        }
        "connect_response" => Decoded::ConnectResponse(
            ConnectResponse::from_bytes(payload).unwrap_or_else(|e| fail(e)),
        ),
        "request" => {
            let mut r = Reader::new(payload);
            let header = RequestHeader::read(&mut r).unwrap_or_else(|e| fail(e));
            assert_eq!(header.op_type, g.opcode(), "{}", g.name);
            let body = &payload[r.position()..];
            let request = Request::decode(header.op_type, body).unwrap_or_else(|e| fail(e));
            Decoded::Request(header, request)
        }
        "reply" => {
            let mut r = Reader::new(payload);
            let header = ReplyHeader::read(&mut r).unwrap_or_else(|e| fail(e));
            let body = &payload[r.position()..];
            if header.xid == xid::NOTIFICATION {
                let event = WatcherEvent::from_bytes(body).unwrap_or_else(|e| fail(e));
                return Decoded::Event(header, event);
            }
            if header.err != 0 {
                assert!(body.is_empty(), "{}: error reply with a body", g.name);
            }
            let response =
                Response::decode_reply(g.opcode(), header.err, body).unwrap_or_else(|e| fail(e));
            Decoded::Reply(header, response)
        }
        other => panic!("{}: unknown kind {other}", g.name),
    }
}

fn encode(decoded: &Decoded) -> Vec<u8> {
    let mut out = Vec::new();
    write_frame(&mut out, |body| match decoded {
        Decoded::ConnectRequest(c) => c.write(body),
        Decoded::ConnectResponse(c) => c.write(body),
        Decoded::Request(header, request) => {
            header.write(body);
            request.encode(body);
        }
        Decoded::Reply(header, response) => {
            header.write(body);
            response.encode(body);
        }
        Decoded::Event(header, event) => {
            header.write(body);
            event.write(body);
        }
    });
    out
}

/// The bytes re-encoding must produce. Identical to the capture, except that
/// Java writes a null `ustring` as length -1 while this codec decodes null
/// as "" and writes it back as length 0 (see `ReconfigRequest`).
fn expected_reencoding(g: &Golden) -> Vec<u8> {
    let mut expected = g.frame.clone();
    if g.name == "reconfig_disabled.req" {
        // newMembers (null) sits just before the 8-byte curConfigId.
        let at = expected.len() - 12;
        assert_eq!(&expected[at..at + 4], &[0xff; 4], "null newMembers moved");
        expected[at..at + 4].copy_from_slice(&[0; 4]);
    }
    expected
}

#[test]
fn every_golden_frame_round_trips_byte_for_byte() {
    let all = load_all();
    assert!(all.len() >= 150, "only {} golden frames found", all.len());
    for g in &all {
        let decoded = decode(g);
        assert_eq!(
            encode(&decoded),
            expected_reencoding(g),
            "{}: {decoded:?}",
            g.name
        );
    }
}

#[test]
fn golden_frames_split_correctly_when_streamed_back_to_back() {
    let all = load_all();
    let stream: Vec<u8> = all.iter().flat_map(|g| g.frame.clone()).collect();
    let mut rest = &stream[..];
    for g in &all {
        let (_, total) = split_frame(rest, DEFAULT_MAX_FRAME_BYTES)
            .expect("valid frame")
            .expect("complete frame");
        assert_eq!(&rest[..total], &g.frame[..], "{}", g.name);
        rest = &rest[total..];
    }
    assert!(rest.is_empty());
}

#[test]
fn golden_frames_truncated_anywhere_never_panic() {
    for g in load_all() {
        let payload = g.payload();
        for cut in 0..payload.len() {
            let part = &payload[..cut];
            let _ = ConnectRequest::from_bytes(part);
            if let Ok(h) = RequestHeader::from_bytes(part) {
                let _ = Request::decode(h.op_type, part.get(8..).unwrap_or_default());
            }
            let _ = Response::decode(g.opcode_or_zero(), part.get(16..).unwrap_or_default());
            assert_eq!(
                check_frame(&g.frame[..cut], DEFAULT_MAX_FRAME_BYTES),
                Ok(None)
            );
        }
    }
}

impl Golden {
    fn opcode_or_zero(&self) -> i32 {
        if self.meta.contains_key("opcode") {
            self.opcode()
        } else {
            0
        }
    }
}

// ---------------------------------------------------------------------------
// Helpers for value checks.

fn request(name: &str) -> (RequestHeader, Request) {
    match decode(&load(&format!("{name}.req"))) {
        Decoded::Request(header, request) => (header, request),
        other => panic!("{name}.req: not a request: {other:?}"),
    }
}

fn reply(name: &str) -> (ReplyHeader, Response) {
    match decode(&load(&format!("{name}.rsp"))) {
        Decoded::Reply(header, response) => (header, response),
        other => panic!("{name}.rsp: not a reply: {other:?}"),
    }
}

fn ok_reply(name: &str) -> Response {
    let (header, response) = reply(name);
    assert_eq!(header.err, 0, "{name}");
    response
}

fn error_reply(name: &str) -> i32 {
    let (header, response) = reply(name);
    assert_eq!(response, Response::Empty, "{name}");
    header.err
}

fn event(name: &str) -> WatcherEvent {
    match decode(&load(&format!("{name}.rsp"))) {
        Decoded::Event(header, event) => {
            assert_eq!(header.zxid, -1, "{name}");
            event
        }
        other => panic!("{name}.rsp: not an event: {other:?}"),
    }
}

fn connect_request(name: &str) -> ConnectRequest {
    match decode(&load(&format!("{name}.req"))) {
        Decoded::ConnectRequest(c) => c,
        other => panic!("{name}.req: {other:?}"),
    }
}

fn connect_response(name: &str) -> ConnectResponse {
    match decode(&load(&format!("{name}.rsp"))) {
        Decoded::ConnectResponse(c) => c,
        other => panic!("{name}.rsp: {other:?}"),
    }
}

fn open_acl() -> Vec<Acl> {
    vec![Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "world".into(),
            id: "anyone".into(),
        },
    }]
}

fn code(c: ErrorCode) -> i32 {
    c.code()
}

fn create_request(name: &str) -> (i32, CreateRequest) {
    match request(name) {
        (h, Request::Create(c)) | (h, Request::Create2(c)) | (h, Request::CreateContainer(c)) => {
            (h.op_type, c)
        }
        other => panic!("{name}: {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Value checks.

#[test]
fn session_handshake() {
    let request = connect_request("connect");
    assert_eq!(request.protocol_version, 0);
    assert_eq!(request.last_zxid_seen, 0);
    assert_eq!(request.time_out, 10_000);
    assert_eq!(request.session_id, 0);
    assert_eq!(request.passwd, vec![0; 16]);
    assert_eq!(request.read_only, Some(false));

    let response = connect_response("connect");
    assert_eq!(response.protocol_version, 0);
    assert_eq!(response.time_out, 10_000);
    assert_ne!(response.session_id, 0);
    assert_eq!(response.passwd.len(), 16);
    assert!(!response.read_only);

    // Reconnecting resumes the same session with its password.
    let again = connect_request("reconnect_setwatches_connect");
    assert_eq!(again.session_id, response.session_id);
    assert_eq!(again.passwd, response.passwd);
    assert!(again.last_zxid_seen > 0);
    let resumed = connect_response("reconnect_setwatches_connect");
    assert_eq!(resumed.session_id, response.session_id);

    let kazoo = connect_request("kazoo_connect");
    assert_eq!(kazoo.read_only, Some(false));
    assert_eq!(kazoo.session_id, 0);
}

#[test]
fn auth_ping_and_close() {
    let (header, auth) = request("auth_digest");
    assert_eq!((header.xid, header.op_type), (xid::AUTH, opcode::AUTH));
    assert_eq!(
        auth,
        Request::Auth(AuthPacket {
            auth_type: 0,
            scheme: "digest".into(),
            auth: b"keel:secret".to_vec(),
        })
    );
    let (header, response) = reply("auth_digest");
    assert_eq!(
        (header.xid, header.err, response),
        (xid::AUTH, 0, Response::Empty)
    );
    // Re-sent automatically on reconnect.
    assert_eq!(request("reconnect_setwatches_auth").1, auth);

    let (header, failed) = request("auth_failed");
    assert_eq!(header.xid, xid::AUTH);
    assert!(matches!(failed, Request::Auth(ref a) if a.scheme == "nosuchscheme"));
    let (header, _) = reply("auth_failed");
    assert_eq!(
        (header.xid, header.err),
        (xid::AUTH, code(ErrorCode::AuthFailed))
    );

    let (header, ping) = request("ping");
    assert_eq!((header.xid, ping), (xid::PING, Request::Ping));
    let (header, response) = reply("ping");
    assert_eq!(
        (header.xid, header.err, response),
        (xid::PING, 0, Response::Empty)
    );

    assert_eq!(request("close_session").1, Request::CloseSession);
    assert_eq!(ok_reply("close_session"), Response::Empty);
    assert_eq!(request("kazoo_close_session").1, Request::CloseSession);
}

#[test]
fn create_in_every_mode() {
    let modes = [
        ("create_persistent", opcode::CREATE, CreateMode::Persistent),
        ("create_ephemeral", opcode::CREATE, CreateMode::Ephemeral),
        (
            "create_persistent_sequential",
            opcode::CREATE,
            CreateMode::PersistentSequential,
        ),
        (
            "create_ephemeral_sequential",
            opcode::CREATE,
            CreateMode::EphemeralSequential,
        ),
        (
            "create_container",
            opcode::CREATE_CONTAINER,
            CreateMode::Container,
        ),
        ("create2_with_stat", opcode::CREATE2, CreateMode::Persistent),
        (
            "create2_container_with_stat",
            opcode::CREATE_CONTAINER,
            CreateMode::Container,
        ),
    ];
    for (name, op, mode) in modes {
        let (op_type, create) = create_request(name);
        assert_eq!(op_type, op, "{name}");
        assert_eq!(CreateMode::from_flags(create.flags), Some(mode), "{name}");
        assert_eq!(create.acl, open_acl(), "{name}");
    }
    let (_, root) = create_request("create_persistent");
    assert_eq!(root.path, "/golden");
    assert_eq!(root.data.as_deref(), Some(&b"root"[..]));
    assert_eq!(
        ok_reply("create_persistent"),
        Response::Create("/golden".into())
    );

    let Response::Create(path) = ok_reply("create_persistent_sequential") else {
        panic!("create_persistent_sequential")
    };
    let suffix = path
        .strip_prefix("/golden/pseq-")
        .expect("sequential prefix");
    assert!(
        suffix.len() == 10 && suffix.bytes().all(|b| b.is_ascii_digit()),
        "{path}"
    );

    // ZooKeeper answers createContainer with a Create2Response even when the
    // Java client only asked for the path.
    let Response::Create2(path, stat) = ok_reply("create_container") else {
        panic!("create_container")
    };
    assert_eq!(path, "/golden/container");
    // ZooKeeper keeps a container/TTL marker in ephemeralOwner internally but
    // shows clients 0 (DataNode.getClientEphemeralOwner).
    assert_eq!(stat.ephemeral_owner, 0);

    let Response::Create2(path, stat) = ok_reply("create2_with_stat") else {
        panic!("create2_with_stat")
    };
    assert_eq!(path, "/golden/c2");
    assert_eq!(
        (stat.version, stat.data_length, stat.num_children),
        (0, 7, 0)
    );
    assert_eq!(stat.czxid, stat.mzxid);

    let (_, null) = create_request("create_null_data");
    assert_eq!(null.data, None);
    let (_, kazoo_null) = create_request("kazoo_create_null_data");
    assert_eq!(kazoo_null.data, None);
}

#[test]
fn create_ttl() {
    for (name, mode, ttl) in [
        ("create_ttl", CreateMode::PersistentWithTtl, 60_000),
        (
            "create_ttl_sequential",
            CreateMode::PersistentSequentialWithTtl,
            120_000,
        ),
    ] {
        let (header, request) = request(name);
        assert_eq!(header.op_type, opcode::CREATE_TTL);
        let Request::CreateTtl(create) = request else {
            panic!("{name}")
        };
        assert_eq!(CreateMode::from_flags(create.flags), Some(mode));
        assert_eq!(create.ttl, ttl);
        let Response::Create2(path, stat) = ok_reply(name) else {
            panic!("{name}")
        };
        assert!(path.starts_with("/golden/ttl"), "{path}");
        assert_eq!((stat.version, stat.ephemeral_owner), (0, 0));
    }
}

#[test]
fn error_replies_have_no_body() {
    let cases = [
        ("create_nodeexists", ErrorCode::NodeExists),
        ("create_nonode_parent", ErrorCode::NoNode),
        (
            "create_ephemeral_child_of_ephemeral",
            ErrorCode::NoChildrenForEphemerals,
        ),
        ("get_data_nonode", ErrorCode::NoNode),
        ("exists_nonode", ErrorCode::NoNode),
        ("kazoo_exists_nonode", ErrorCode::NoNode),
        ("set_data_badversion", ErrorCode::BadVersion),
        ("set_acl_badversion", ErrorCode::BadVersion),
        ("set_acl_invalid", ErrorCode::InvalidAcl),
        ("remove_watches_nowatcher", ErrorCode::NoWatcher),
        ("delete_nonode", ErrorCode::NoNode),
        ("delete_badversion", ErrorCode::BadVersion),
        ("delete_notempty", ErrorCode::NotEmpty),
        ("reconfig_disabled", ErrorCode::ReconfigDisabled),
    ];
    for (name, expected) in cases {
        assert_eq!(
            ErrorCode::from_code(error_reply(name)),
            Some(expected),
            "{name}"
        );
    }
}

#[test]
fn reads_and_watches() {
    assert_eq!(
        request("get_data_watch").1,
        Request::GetData(GetDataRequest {
            path: "/golden".into(),
            watch: true,
        })
    );
    let Response::GetData(data, stat) = ok_reply("get_data_watch") else {
        panic!("get_data_watch")
    };
    assert_eq!(data.as_deref(), Some(&b"root"[..]));
    assert_eq!(stat.data_length, 4);
    assert!(matches!(
        ok_reply("get_data_null"),
        Response::GetData(None, _)
    ));

    let session = connect_response("connect").session_id;
    assert_eq!(
        request("exists_watch").1,
        Request::Exists(ExistsRequest {
            path: "/golden/eph".into(),
            watch: true,
        })
    );
    let Response::Stat(stat) = ok_reply("exists_watch") else {
        panic!("exists_watch")
    };
    assert_eq!(stat.ephemeral_owner, session);

    let (header, _) = request("get_children2_watch");
    assert_eq!(header.op_type, opcode::GET_CHILDREN2);
    let Response::GetChildren2(children, stat) = ok_reply("get_children2_watch") else {
        panic!("get_children2_watch")
    };
    assert!(children.iter().any(|c| c == "eph"), "{children:?}");
    assert_eq!(stat.num_children as usize, children.len());

    assert_eq!(
        request("get_children").1,
        Request::GetChildren(GetChildrenRequest {
            path: "/golden/container".into(),
            watch: false,
        })
    );
    assert_eq!(
        ok_reply("get_children"),
        Response::GetChildren(vec!["child".into()])
    );
    assert!(matches!(
        ok_reply("kazoo_get_children"),
        Response::GetChildren(_)
    ));
    assert!(matches!(
        ok_reply("kazoo_get_children2"),
        Response::GetChildren2(..)
    ));

    let Response::GetAllChildrenNumber(n) = ok_reply("get_all_children_number") else {
        panic!("get_all_children_number")
    };
    assert!(n > 5, "{n}");
    let Response::GetEphemerals(ephemerals) = ok_reply("get_ephemerals") else {
        panic!("get_ephemerals")
    };
    assert!(
        ephemerals.contains(&"/golden/eph".to_owned()),
        "{ephemerals:?}"
    );

    assert_eq!(
        request("sync").1,
        Request::Sync(SyncRequest {
            path: "/golden".into()
        })
    );
    assert_eq!(ok_reply("sync"), Response::Sync("/golden".into()));

    assert_eq!(
        request("get_config").1.path(),
        Some("/zookeeper/config"),
        "getConfig is a getData"
    );
}

#[test]
fn writes() {
    assert_eq!(
        request("set_data").1,
        Request::SetData(SetDataRequest {
            path: "/golden".into(),
            data: Some(b"changed".to_vec()),
            version: -1,
        })
    );
    let Response::Stat(stat) = ok_reply("set_data") else {
        panic!("set_data")
    };
    assert_eq!((stat.version, stat.data_length), (1, 7));

    assert_eq!(
        request("delete").1,
        Request::Delete(DeleteRequest {
            path: "/golden/nulldata".into(),
            version: -1,
        })
    );
    assert_eq!(ok_reply("delete"), Response::Empty);
    assert!(request("kazoo_set_data").1.is_write());
}

#[test]
fn acls_with_digest() {
    let Request::SetAcl(set) = request("set_acl_digest").1 else {
        panic!("set_acl_digest")
    };
    assert_eq!(set.path, "/golden/acl");
    assert_eq!(set.version, -1);
    assert_eq!(set.acl.len(), 2);
    assert_eq!(set.acl[0].perms, perms::ALL);
    assert_eq!(set.acl[0].id.scheme, "digest");
    assert!(set.acl[0].id.id.starts_with("keel:"), "{:?}", set.acl[0]);
    assert_eq!(set.acl[1].perms, perms::READ);
    assert_eq!(set.acl[1].id.id, "anyone");
    let Response::Stat(stat) = ok_reply("set_acl_digest") else {
        panic!("set_acl_digest")
    };
    assert_eq!(stat.aversion, 1);

    let Response::GetAcl(acl, stat) = ok_reply("get_acl") else {
        panic!("get_acl")
    };
    assert_eq!(acl, set.acl);
    assert_eq!(stat.aversion, 1);
}

#[test]
fn multi_transaction() {
    let (header, Request::Multi(ops)) = request("multi_ok") else {
        panic!("multi_ok")
    };
    assert_eq!(header.op_type, opcode::MULTI);
    let codes: Vec<i32> = ops.iter().map(MultiOp::op_code).collect();
    assert_eq!(codes, [1, 19, 21, 5, 13, 2]);
    assert!(matches!(&ops[2], MultiOp::CreateTtl(c) if c.ttl == 30_000));

    let Response::Multi(results) = ok_reply("multi_ok") else {
        panic!("multi_ok")
    };
    // createContainer and createTTL results come back as create2 (type 15).
    let codes: Vec<i32> = results.iter().map(MultiResult::op_code).collect();
    assert_eq!(codes, [1, 15, 15, 5, 13, 2]);
    assert_eq!(results[0], MultiResult::Create("/golden/m1".into()));
    assert!(matches!(&results[1], MultiResult::Create2(p, _) if p == "/golden/mcontainer"));
    assert!(matches!(&results[3], MultiResult::SetData(s) if s.version == 1));

    // A failed transaction still has err 0 in the reply header; the failure
    // is reported per op: OK before the culprit, RUNTIMEINCONSISTENCY after.
    let (header, _) = reply("multi_fail");
    assert_eq!(header.err, 0);
    assert_eq!(
        ok_reply("multi_fail"),
        Response::Multi(vec![
            MultiResult::Error(0),
            MultiResult::Error(code(ErrorCode::BadVersion)),
            MultiResult::Error(code(ErrorCode::RuntimeInconsistency)),
        ])
    );

    let Request::Multi(kazoo_ops) = request("kazoo_multi").1 else {
        panic!("kazoo_multi")
    };
    assert_eq!(kazoo_ops.len(), 4);
    assert!(matches!(ok_reply("kazoo_multi"), Response::Multi(r) if r.len() == 4));
}

#[test]
fn multi_read() {
    let (header, Request::MultiRead(ops)) = request("multi_read") else {
        panic!("multi_read")
    };
    assert_eq!(header.op_type, opcode::MULTI_READ);
    assert!(ops.iter().all(MultiOp::is_read));
    let paths: Vec<&str> = ops.iter().map(MultiOp::path).collect();
    assert_eq!(paths, ["/golden", "/golden/container", "/golden/missing"]);
    let Response::Multi(results) = ok_reply("multi_read") else {
        panic!("multi_read")
    };
    assert!(matches!(&results[0], MultiResult::GetData(Some(d), _) if d == b"changed"));
    assert_eq!(results[1], MultiResult::GetChildren(vec!["child".into()]));
    assert_eq!(results[2], MultiResult::Error(code(ErrorCode::NoNode)));
}

#[test]
fn persistent_watches_and_watch_management() {
    assert_eq!(
        request("add_watch_persistent").1,
        Request::AddWatch(AddWatchRequest {
            path: "/golden/pw".into(),
            mode: AddWatchMode::Persistent.code(),
        })
    );
    assert_eq!(
        request("add_watch_persistent_recursive").1,
        Request::AddWatch(AddWatchRequest {
            path: "/golden/container".into(),
            mode: AddWatchMode::PersistentRecursive.code(),
        })
    );
    // addWatch is answered with a 4-byte ErrorResponse(0), not an empty body.
    assert_eq!(ok_reply("add_watch_persistent"), Response::ErrorResponse(0));

    assert_eq!(
        request("check_watches").1,
        Request::CheckWatches(CheckWatchesRequest {
            path: "/golden/c2".into(),
            watcher_type: WatcherType::Data.code(),
        })
    );
    assert_eq!(ok_reply("check_watches"), Response::Empty);
    assert_eq!(
        request("remove_watches").1,
        Request::RemoveWatches(RemoveWatchesRequest {
            path: "/golden/pw".into(),
            watcher_type: WatcherType::Any.code(),
        })
    );
    assert_eq!(ok_reply("remove_watches"), Response::Empty);
}

#[test]
fn watch_notifications() {
    let data = event("notification_NodeDataChanged");
    assert_eq!(
        EventType::from_i32(data.event_type),
        Some(EventType::NodeDataChanged)
    );
    assert_eq!(
        KeeperState::from_i32(data.state),
        Some(KeeperState::SyncConnected)
    );
    assert_eq!(data.path, "/golden");
    let persistent = event("notification_NodeDataChanged_2");
    assert_eq!(persistent.path, "/golden/pw");
    let children = event("notification_NodeChildrenChanged");
    assert_eq!(children.event_type, EventType::NodeChildrenChanged.code());
    assert_eq!(children.path, "/golden");
}

#[test]
fn set_watches_on_reconnect() {
    let (header, Request::SetWatches(watches)) = request("reconnect_setwatches_setWatches") else {
        panic!("setWatches")
    };
    // ClientCnxn builds the header with xid -8 (SET_WATCHES_XID), but the
    // 3.8 client's socket layer overwrites every xid except ping's and
    // auth's with the next regular one, so on the wire it is a normal xid
    // and the reply echoes it. Servers must not rely on -8.
    assert_eq!(header.op_type, opcode::SET_WATCHES);
    assert!(header.xid > 0, "{header:?}");
    assert!(watches.relative_zxid > 0);
    assert!(watches.data_watches.contains(&"/golden".to_owned()));
    assert_eq!(watches.exist_watches, ["/golden/missing"]);
    assert_eq!(watches.child_watches, ["/golden"]);
    let xid_sent = header.xid;
    let (header, response) = reply("reconnect_setwatches_setWatches");
    assert_eq!(
        (header.xid, header.err, response),
        (xid_sent, 0, Response::Empty)
    );

    let (header, Request::SetWatches2(watches)) = request("reconnect_setwatches2_setWatches2")
    else {
        panic!("setWatches2")
    };
    assert_eq!(header.op_type, opcode::SET_WATCHES2);
    assert!(header.xid > 0, "{header:?}");
    assert_eq!(watches.persistent_watches, ["/golden/pw"]);
    assert_eq!(watches.persistent_recursive_watches, ["/golden/container"]);
    assert_eq!(
        ok_reply("reconnect_setwatches2_setWatches2"),
        Response::Empty
    );
}

#[test]
fn who_am_i() {
    assert_eq!(request("who_am_i").1, Request::WhoAmI);
    let Response::WhoAmI(infos) = ok_reply("who_am_i") else {
        panic!("who_am_i")
    };
    assert!(infos.contains(&ClientInfo {
        auth_scheme: "digest".into(),
        user: "keel".into(),
    }));
    assert!(infos.iter().any(|i| i.auth_scheme == "ip"));
}

#[test]
fn reconfig_request_with_null_new_members() {
    assert_eq!(
        request("reconfig_disabled").1,
        Request::Reconfig(ReconfigRequest {
            joining_servers: "server.2=127.0.0.1:2888:3888;2181".into(),
            leaving_servers: "3".into(),
            new_members: String::new(), // null on the wire
            cur_config_id: -1,
        })
    );
}
