//! ClickHouse Keeper's extensions, written as specifications of what
//! ClickHouse Keeper answers (src/Coordination/KeeperStorage*.cpp).

use keel_jute::{
    perms, Acl, CheckVersionRequest, CreateRequest, ErrorCode, EventType, ExistsRequest,
    FilteredListRequest, GetChildren2Request, GetChildrenRequest, GetDataRequest, Id,
    ListRequestType, MultiOp, MultiResult, RemoveRecursiveRequest, Request, Response,
    SetDataRequest, Stat,
};

use crate::acl::open_acl_unsafe;
use crate::keeper::{API_VERSION_PATH, FEATURE_FLAGS_PATH, KEEPER_PATH};
use crate::{DataTree, Txn, TxnOp};

const SESSION: i64 = 0x100;
const TERM: u64 = 1;

struct Harness {
    tree: DataTree,
    time_ms: i64,
}

impl Harness {
    fn new() -> Harness {
        let mut h = Harness {
            tree: DataTree::new(),
            time_ms: 1_000,
        };
        h.txn(TxnOp::CreateSession { timeout_ms: 4000 });
        h
    }

    fn txn(&mut self, op: TxnOp) -> crate::Applied {
        self.time_ms += 1;
        let txn = Txn {
            session_id: SESSION,
            xid: 1,
            time_ms: self.time_ms,
            auth: vec![],
            op,
        };
        self.tree.apply(TERM, &txn)
    }

    fn request(&mut self, request: Request) -> crate::Applied {
        let mut body = Vec::new();
        request.encode(&mut body);
        self.txn(TxnOp::Request {
            op_code: request.op_code(),
            body,
        })
    }

    fn result(&mut self, request: Request) -> Result<Response, ErrorCode> {
        self.request(request).result
    }

    fn create(&mut self, path: &str, flags: i32) {
        let request = Request::Create(create_request(path, flags));
        assert!(self.result(request).is_ok(), "create {path}");
    }

    fn create_with_acl(&mut self, path: &str, acl: Vec<Acl>) {
        let request = Request::Create(CreateRequest {
            acl,
            ..create_request(path, 0)
        });
        assert!(self.result(request).is_ok(), "create {path}");
    }

    fn read(&self, request: &Request) -> crate::ReadOutcome {
        self.tree.read(request, SESSION, &[]).expect("a read")
    }

    fn stat(&self, path: &str) -> Stat {
        self.tree.stat(path).expect("present")
    }
}

fn create_request(path: &str, flags: i32) -> CreateRequest {
    CreateRequest {
        path: path.into(),
        data: Some(b"v".to_vec()),
        acl: open_acl_unsafe(),
        flags,
    }
}

fn create_if_not_exists(path: &str, flags: i32) -> Request {
    Request::CreateIfNotExists(create_request(path, flags))
}

fn remove_recursive(path: &str, limit: u32) -> Request {
    Request::RemoveRecursive(RemoveRecursiveRequest {
        path: path.into(),
        remove_nodes_limit: limit,
    })
}

fn check_not_exists(path: &str, version: i32) -> CheckVersionRequest {
    CheckVersionRequest {
        path: path.into(),
        version,
    }
}

fn filtered(path: &str, list_type: ListRequestType) -> Request {
    Request::FilteredList(FilteredListRequest {
        path: path.into(),
        watch: false,
        list_type,
    })
}

fn only(perms: i32) -> Vec<Acl> {
    vec![Acl {
        perms,
        id: Id {
            scheme: "world".into(),
            id: "anyone".into(),
        },
    }]
}

// ---------------------------------------------------------------------------
// createIfNotExists

#[test]
fn create_if_not_exists_creates_a_missing_node_as_create_does() {
    let mut h = Harness::new();
    let applied = h.request(create_if_not_exists("/a", 0));
    assert_eq!(applied.result, Ok(Response::Create("/a".into())));
    let stat = h.stat("/a");
    assert_eq!((stat.czxid, stat.version), (applied.zxid, 0));
    assert_eq!(h.stat("/").pzxid, applied.zxid);
    assert_eq!(
        applied.events,
        [
            crate::tree::event("/a", EventType::NodeCreated),
            crate::tree::event("/", EventType::NodeChildrenChanged),
        ]
    );
}

#[test]
fn create_if_not_exists_on_an_existing_node_succeeds_and_changes_nothing() {
    let mut h = Harness::new();
    h.create("/a", 0);
    let (digest, root) = (h.tree.digest(), h.stat("/"));
    let applied = h.request(create_if_not_exists("/a", 1));
    assert_eq!(applied.result, Ok(Response::Create("/a".into())));
    assert!(applied.events.is_empty());
    assert_eq!((h.tree.digest(), h.stat("/")), (digest, root));
    assert_eq!(applied.zxid, h.tree.last_zxid(), "it still takes a zxid");
    assert_eq!(h.stat("/a").ephemeral_owner, 0, "the node stays as it was");
    // The root exists too.
    assert_eq!(
        h.result(create_if_not_exists("/", 0)),
        Ok(Response::Create("/".into()))
    );
}

#[test]
fn create_if_not_exists_refuses_sequential_nodes_after_the_parent_checks() {
    let mut h = Harness::new();
    assert_eq!(
        h.result(create_if_not_exists("/a/s-", 2)),
        Err(ErrorCode::NoNode)
    );
    h.create("/a", 0);
    for flags in [2, 3] {
        assert_eq!(
            h.result(create_if_not_exists("/a/s-", flags)),
            Err(ErrorCode::BadArguments)
        );
    }
    // Container and TTL modes have no place in it either, nor a bad mode.
    for flags in [4, 5, 6, 7, -1] {
        assert_eq!(
            h.result(create_if_not_exists("/a/c", flags)),
            Err(ErrorCode::BadArguments)
        );
    }
    assert_eq!(h.tree.node("/a").unwrap().children, Vec::<String>::new());
}

#[test]
fn create_if_not_exists_makes_ephemerals_of_the_session_and_checks_the_parent() {
    let mut h = Harness::new();
    assert!(h.result(create_if_not_exists("/e", 1)).is_ok());
    assert_eq!(h.stat("/e").ephemeral_owner, SESSION);
    assert_eq!(h.tree.ephemerals_of(SESSION), ["/e"]);
    assert_eq!(
        h.result(create_if_not_exists("/e/x", 0)),
        Err(ErrorCode::NoChildrenForEphemerals)
    );
    h.create_with_acl("/ro", only(perms::READ));
    assert_eq!(
        h.result(create_if_not_exists("/ro/x", 0)),
        Err(ErrorCode::NoAuth)
    );
    let bad_acl = Request::CreateIfNotExists(CreateRequest {
        acl: vec![],
        ..create_request("/x", 0)
    });
    assert_eq!(h.result(bad_acl), Err(ErrorCode::InvalidAcl));
}

// ---------------------------------------------------------------------------
// removeRecursive

#[test]
fn remove_recursive_deletes_the_subtree_children_first() {
    let mut h = Harness::new();
    for path in ["/a", "/a/b", "/a/b/c", "/a/d"] {
        h.create(path, 0);
    }
    let before = h.stat("/");
    let applied = h.request(remove_recursive("/a", 4));
    assert_eq!(applied.result, Ok(Response::Empty));
    for path in ["/a", "/a/b", "/a/b/c", "/a/d"] {
        assert!(h.tree.node(path).is_none(), "{path} survived");
    }
    let root = h.stat("/");
    assert_eq!(root.num_children, before.num_children - 1);
    assert_eq!(root.cversion, before.cversion + 1);
    assert_eq!(root.pzxid, applied.zxid);
    let deleted: Vec<&str> = applied
        .events
        .iter()
        .filter(|e| e.event_type == EventType::NodeDeleted)
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(deleted, ["/a/b/c", "/a/d", "/a/b", "/a"]);
    crate::fuzzing::check_invariants(&h.tree);
}

#[test]
fn remove_recursive_over_its_limit_is_not_empty_and_removes_nothing() {
    let mut h = Harness::new();
    for path in ["/a", "/a/b", "/a/b/c", "/a/d"] {
        h.create(path, 0);
    }
    let digest = h.tree.digest();
    for limit in [0, 1, 3] {
        let applied = h.request(remove_recursive("/a", limit));
        assert_eq!(applied.result, Err(ErrorCode::NotEmpty), "limit {limit}");
        assert!(applied.events.is_empty());
    }
    assert_eq!(h.tree.digest(), digest);
    // A leaf fits a limit of one; nothing fits zero.
    assert_eq!(
        h.result(remove_recursive("/a/d", 0)),
        Err(ErrorCode::NotEmpty)
    );
    assert_eq!(h.result(remove_recursive("/a/d", 1)), Ok(Response::Empty));
}

#[test]
fn remove_recursive_of_a_missing_node_succeeds_without_change() {
    let mut h = Harness::new();
    let digest = h.tree.digest();
    for path in ["/nope", "/nope/deeper"] {
        let applied = h.request(remove_recursive(path, 10));
        assert_eq!(applied.result, Ok(Response::Empty));
        assert!(applied.events.is_empty());
    }
    assert_eq!(h.tree.digest(), digest);
}

#[test]
fn remove_recursive_refuses_the_root_and_the_system_nodes() {
    let mut h = Harness::new();
    for path in [
        "/",
        "/zookeeper",
        "/zookeeper/quota",
        "/keeper",
        "/keeper/api_version",
    ] {
        assert_eq!(
            h.result(remove_recursive(path, u32::MAX)),
            Err(ErrorCode::BadArguments),
            "{path}"
        );
    }
    for path in ["", "a", "/a/", "/a//b"] {
        assert_eq!(
            h.result(remove_recursive(path, 1)),
            Err(ErrorCode::BadArguments),
            "{path:?}"
        );
    }
}

#[test]
fn remove_recursive_needs_delete_on_the_parent_and_on_every_node_below() {
    let mut h = Harness::new();
    h.create_with_acl("/p", only(perms::ALL & !perms::DELETE));
    h.create("/p/a", 0);
    assert_eq!(
        h.result(remove_recursive("/p/a", 10)),
        Err(ErrorCode::NoAuth)
    );
    h.create("/q", 0);
    h.create("/q/a", 0);
    h.create_with_acl("/q/a/leaf", only(perms::READ));
    assert_eq!(h.result(remove_recursive("/q", 10)), Err(ErrorCode::NoAuth));
    assert!(h.tree.node("/q/a/leaf").is_some(), "nothing goes");
}

#[test]
fn remove_recursive_takes_ephemerals_out_of_their_sessions() {
    let mut h = Harness::new();
    h.create("/a", 0);
    h.create("/a/e", 1);
    assert_eq!(h.result(remove_recursive("/a", 2)), Ok(Response::Empty));
    assert!(h.tree.ephemerals_of(SESSION).is_empty());
    // Closing the session later finds nothing to delete.
    assert_eq!(h.txn(TxnOp::CloseSession).result, Ok(Response::Empty));
}

// ---------------------------------------------------------------------------
// checkNotExists and multi

#[test]
fn check_not_exists_in_a_multi_compares_the_version_like_clickhouse() {
    let mut h = Harness::new();
    h.create("/a", 0);
    let multi = |version: i32, path: &str| {
        Request::Multi(vec![MultiOp::CheckNotExists(check_not_exists(
            path, version,
        ))])
    };
    let error = |code: ErrorCode| Ok(Response::Multi(vec![MultiResult::Error(code.code())]));
    assert_eq!(h.result(multi(-1, "/a")), error(ErrorCode::NodeExists));
    assert_eq!(h.result(multi(0, "/a")), error(ErrorCode::NodeExists));
    assert_eq!(
        h.result(multi(1, "/a")),
        Ok(Response::Multi(vec![MultiResult::CheckNotExists]))
    );
    assert_eq!(
        h.result(multi(-1, "/b")),
        Ok(Response::Multi(vec![MultiResult::CheckNotExists]))
    );
    assert_eq!(
        h.result(multi(-1, KEEPER_PATH)),
        error(ErrorCode::BadArguments)
    );
    h.create_with_acl("/secret", only(perms::WRITE));
    assert_eq!(h.result(multi(5, "/secret")), error(ErrorCode::NoAuth));
}

#[test]
fn a_multi_of_clickhouse_ops_is_all_or_nothing() {
    let mut h = Harness::new();
    h.create("/lock", 0);
    h.create("/old", 0);
    h.create("/old/x", 0);
    let ok = h.result(Request::Multi(vec![
        MultiOp::CheckNotExists(check_not_exists("/queue", -1)),
        MultiOp::CreateIfNotExists(create_request("/lock", 0)),
        MultiOp::CreateIfNotExists(create_request("/queue", 0)),
        MultiOp::RemoveRecursive(RemoveRecursiveRequest {
            path: "/old".into(),
            remove_nodes_limit: 2,
        }),
    ]));
    assert_eq!(
        ok,
        Ok(Response::Multi(vec![
            MultiResult::CheckNotExists,
            MultiResult::CreateIfNotExists("/lock".into()),
            MultiResult::CreateIfNotExists("/queue".into()),
            MultiResult::RemoveRecursive,
        ]))
    );
    assert!(h.tree.node("/old").is_none() && h.tree.node("/queue").is_some());
    // The check sees the create before it; everything is undone.
    h.create("/old2", 0);
    let digest = h.tree.digest();
    let failed = h.request(Request::Multi(vec![
        MultiOp::RemoveRecursive(RemoveRecursiveRequest {
            path: "/old2".into(),
            remove_nodes_limit: 1,
        }),
        MultiOp::CreateIfNotExists(create_request("/new", 0)),
        MultiOp::CheckNotExists(check_not_exists("/new", -1)),
        MultiOp::SetData(SetDataRequest {
            path: "/lock".into(),
            data: None,
            version: -1,
        }),
    ]));
    assert_eq!(
        failed.result,
        Ok(Response::Multi(vec![
            MultiResult::Error(0),
            MultiResult::Error(0),
            MultiResult::Error(ErrorCode::NodeExists.code()),
            MultiResult::Error(ErrorCode::RuntimeInconsistency.code()),
        ]))
    );
    assert!(failed.events.is_empty());
    assert_eq!(h.tree.digest(), digest);
    assert!(h.tree.node("/old2").is_some() && h.tree.node("/new").is_none());
}

#[test]
fn check_not_exists_outside_a_multi_is_a_read() {
    let mut h = Harness::new();
    h.create("/a", 0);
    let read = |h: &Harness, path: &str, version: i32| {
        h.read(&Request::CheckNotExists(check_not_exists(path, version)))
            .result
    };
    assert_eq!(read(&h, "/a", -1), Err(ErrorCode::NodeExists));
    assert_eq!(read(&h, "/a", 3), Ok(Response::Empty));
    assert_eq!(read(&h, "/b", 0), Ok(Response::Empty));
    // There the system nodes are nodes like any other.
    assert_eq!(read(&h, API_VERSION_PATH, -1), Err(ErrorCode::NodeExists));
    assert_eq!(read(&h, KEEPER_PATH, 1), Ok(Response::Empty));
    // Sent through the log, it is no write Keel knows.
    let applied = h.request(Request::CheckNotExists(check_not_exists("/a", -1)));
    assert_eq!(applied.result, Err(ErrorCode::Unimplemented));
}

// ---------------------------------------------------------------------------
// filteredList and multiRead

#[test]
fn filtered_list_splits_children_by_owner() {
    let mut h = Harness::new();
    h.create("/p", 0);
    h.create("/p/persistent", 0);
    h.create("/p/ephemeral", 1);
    h.create("/p/other", 0);
    let container = Request::CreateContainer(create_request("/p/box", 4));
    assert!(h.result(container).is_ok());
    let stat = h.stat("/p");
    let list = |h: &Harness, t| h.read(&filtered("/p", t)).result;
    let names = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        list(&h, ListRequestType::All),
        Ok(Response::GetChildren2(
            names(&["box", "ephemeral", "other", "persistent"]),
            stat.clone()
        ))
    );
    assert_eq!(
        list(&h, ListRequestType::PersistentOnly),
        Ok(Response::GetChildren2(
            names(&["box", "other", "persistent"]),
            stat.clone()
        ))
    );
    assert_eq!(
        list(&h, ListRequestType::EphemeralOnly),
        Ok(Response::GetChildren2(names(&["ephemeral"]), stat))
    );
    assert_eq!(
        h.read(&filtered("/nope", ListRequestType::All)).result,
        Err(ErrorCode::NoNode)
    );
}

#[test]
fn a_filtered_list_needs_read_on_every_child_an_unfiltered_one_does_not() {
    let mut h = Harness::new();
    h.create("/p", 0);
    h.create_with_acl("/p/hidden", only(perms::WRITE));
    assert!(h.read(&filtered("/p", ListRequestType::All)).result.is_ok());
    for t in [
        ListRequestType::PersistentOnly,
        ListRequestType::EphemeralOnly,
    ] {
        assert_eq!(h.read(&filtered("/p", t)).result, Err(ErrorCode::NoAuth));
    }
    let watched = Request::FilteredList(FilteredListRequest {
        path: "/p".into(),
        watch: true,
        list_type: ListRequestType::All,
    });
    assert_eq!(
        h.read(&watched).watches,
        [("/p".to_string(), crate::watch::WatchKind::Child)]
    );
}

#[test]
fn multi_read_answers_clickhouse_reads_each_on_its_own() {
    let mut h = Harness::new();
    h.create("/a", 0);
    h.create("/a/e", 1);
    let stat = h.stat("/a");
    let ops = vec![
        MultiOp::Exists(ExistsRequest {
            path: "/a".into(),
            watch: false,
        }),
        MultiOp::Exists(ExistsRequest {
            path: "/nope".into(),
            watch: false,
        }),
        MultiOp::GetChildren2(GetChildren2Request {
            path: "/a".into(),
            watch: false,
        }),
        MultiOp::FilteredList(FilteredListRequest {
            path: "/a".into(),
            watch: false,
            list_type: ListRequestType::PersistentOnly,
        }),
        MultiOp::GetData(GetDataRequest {
            path: "/nope".into(),
            watch: false,
        }),
        MultiOp::GetChildren(GetChildrenRequest {
            path: "/a".into(),
            watch: false,
        }),
    ];
    let read = h.read(&Request::MultiRead(ops));
    assert_eq!(
        read.result,
        Ok(Response::Multi(vec![
            MultiResult::Exists(stat.clone()),
            MultiResult::Error(ErrorCode::NoNode.code()),
            MultiResult::GetChildren2(vec!["e".into()], stat.clone()),
            MultiResult::GetChildren2(vec![], stat),
            MultiResult::Error(ErrorCode::NoNode.code()),
            MultiResult::GetChildren(vec!["e".into()]),
        ]))
    );
}

#[test]
fn a_multi_read_of_writes_is_a_marshalling_error() {
    let h = Harness::new();
    let writes = Request::MultiRead(vec![MultiOp::CreateIfNotExists(create_request("/x", 0))]);
    assert_eq!(h.read(&writes).result, Err(ErrorCode::MarshallingError));
}

// ---------------------------------------------------------------------------
// /keeper

#[test]
fn the_keeper_nodes_answer_reads_but_stay_out_of_listings_of_the_root() {
    let h = Harness::new();
    let get = |path: &str| {
        h.read(&Request::GetData(GetDataRequest {
            path: path.into(),
            watch: false,
        }))
        .result
    };
    let Ok(Response::GetData(Some(version), stat)) = get(API_VERSION_PATH) else {
        panic!("no api_version");
    };
    assert_eq!((version.as_slice(), stat.data_length), (&b"3"[..], 1));
    let Ok(Response::GetData(Some(flags), _)) = get(FEATURE_FLAGS_PATH) else {
        panic!("no feature_flags");
    };
    assert_eq!(flags, [0xf8, 0x00]);
    let children = |path: &str| {
        h.read(&Request::GetChildren(GetChildrenRequest {
            path: path.into(),
            watch: false,
        }))
        .result
    };
    assert_eq!(
        children("/"),
        Ok(Response::GetChildren(vec!["zookeeper".into()]))
    );
    assert_eq!(
        children(KEEPER_PATH),
        Ok(Response::GetChildren(vec![
            "api_version".into(),
            "feature_flags".into()
        ]))
    );
    assert_eq!(h.stat("/").num_children, 1);
    assert_eq!(get("/keeper/other"), Err(ErrorCode::NoNode));
    assert_eq!(h.tree.node_count(), 4, "nothing was added to the tree");
}

#[test]
fn every_write_at_or_under_keeper_is_bad_arguments() {
    let mut h = Harness::new();
    let digest = h.tree.digest();
    let writes = [
        Request::Create(create_request(KEEPER_PATH, 0)),
        Request::Create(create_request("/keeper/x", 0)),
        Request::Create(create_request("/keeper/api_version/x", 0)),
        Request::Create2(create_request("/keeper/s-", 2)),
        create_if_not_exists("/keeper/x", 0),
        Request::Delete(keel_jute::DeleteRequest {
            path: API_VERSION_PATH.into(),
            version: -1,
        }),
        Request::SetData(SetDataRequest {
            path: FEATURE_FLAGS_PATH.into(),
            data: None,
            version: -1,
        }),
        Request::SetAcl(keel_jute::SetAclRequest {
            path: KEEPER_PATH.into(),
            acl: open_acl_unsafe(),
            version: -1,
        }),
        remove_recursive(KEEPER_PATH, 10),
    ];
    for request in writes {
        assert_eq!(
            h.result(request.clone()),
            Err(ErrorCode::BadArguments),
            "{request:?}"
        );
    }
    // A deeper path's parent does not exist.
    assert_eq!(
        h.result(Request::Create(create_request("/keeper/x/y", 0))),
        Err(ErrorCode::NoNode)
    );
    assert_eq!(h.tree.digest(), digest);
}

#[test]
fn data_with_a_znode_named_keeper_keeps_it_as_ordinary_data() {
    let mut h = Harness::new();
    let acl = h.tree.acls.intern(&open_acl_unsafe());
    h.tree.link(
        crate::store::ROOT,
        "keeper",
        crate::store::PackedStat::default(),
        Some(b"mine"),
        acl,
    );
    assert!(!h.tree.keeper_nodes_served());
    let get = h.read(&Request::GetData(GetDataRequest {
        path: API_VERSION_PATH.into(),
        watch: false,
    }));
    assert_eq!(get.result, Err(ErrorCode::NoNode));
    h.create("/keeper/a", 0);
    assert_eq!(
        h.result(remove_recursive(KEEPER_PATH, 10)),
        Ok(Response::Empty)
    );
    assert!(h.tree.keeper_nodes_served(), "served again once it is gone");
}

#[test]
fn set_watches_on_the_keeper_nodes_fires_nothing() {
    let h = Harness::new();
    let (fired, watches) =
        h.tree
            .missed_events(5, &[API_VERSION_PATH.into()], &[], &[KEEPER_PATH.into()]);
    assert!(fired.is_empty(), "{fired:?}");
    assert_eq!(watches.len(), 2);
}
