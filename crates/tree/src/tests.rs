//! The tree's behaviour written as ZooKeeper 3.8 specifications.

use keel_jute::{
    perms, Acl, CheckVersionRequest, CreateRequest, CreateTtlRequest, DeleteRequest, ErrorCode,
    EventType, GetDataRequest, Id, MultiOp, MultiResult, Request, Response, SetAclRequest,
    SetDataRequest, Stat,
};

use crate::acl::open_acl_unsafe;
use crate::{snapshot, DataTree, Txn, TxnOp};

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
        h.txn(SESSION, TxnOp::CreateSession { timeout_ms: 4000 });
        h
    }

    fn txn(&mut self, session_id: i64, op: TxnOp) -> crate::Applied {
        self.time_ms += 1;
        let txn = Txn {
            session_id,
            xid: 1,
            time_ms: self.time_ms,
            auth: vec![],
            op,
        };
        self.tree.apply(TERM, &txn)
    }

    fn request_as(&mut self, session_id: i64, auth: Vec<Id>, request: Request) -> crate::Applied {
        self.time_ms += 1;
        let mut body = Vec::new();
        request.encode(&mut body);
        let op = TxnOp::Request {
            op_code: request.op_code(),
            body,
        };
        let txn = Txn {
            session_id,
            xid: 1,
            time_ms: self.time_ms,
            auth,
            op,
        };
        self.tree.apply(TERM, &txn)
    }

    fn request(&mut self, request: Request) -> crate::Applied {
        self.request_as(SESSION, vec![], request)
    }

    fn create(&mut self, path: &str, flags: i32) -> Result<String, ErrorCode> {
        let request = Request::Create(create_request(path, flags));
        self.request(request).result.map(|r| match r {
            Response::Create(p) => p,
            other => panic!("unexpected {other:?}"),
        })
    }

    fn delete(&mut self, path: &str) -> Result<(), ErrorCode> {
        self.request(Request::Delete(DeleteRequest {
            path: path.into(),
            version: -1,
        }))
        .result
        .map(|_| ())
    }

    /// Creates `parent/name` (persistent) and records `name` in
    /// `expected`.
    fn create_child(
        &mut self,
        parent: &str,
        name: String,
        expected: &mut std::collections::BTreeSet<String>,
    ) {
        self.create(&format!("{parent}/{name}"), 0).unwrap();
        expected.insert(name);
    }

    /// `parent`'s children are exactly `expected`, in order, and the
    /// tree's invariants hold.
    fn assert_children(&self, parent: &str, expected: std::collections::BTreeSet<String>) {
        let children = self.tree.node(parent).unwrap().children;
        assert_eq!(children, expected.into_iter().collect::<Vec<_>>());
        crate::fuzzing::check_invariants(&self.tree);
    }

    fn stat(&self, path: &str) -> Stat {
        self.tree
            .stat(path)
            .unwrap_or_else(|| panic!("{path} missing"))
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

#[test]
fn a_fresh_tree_has_the_zookeeper_system_nodes() {
    let tree = DataTree::new();
    assert_eq!(
        tree.paths(),
        vec!["/", "/zookeeper", "/zookeeper/config", "/zookeeper/quota"]
    );
    assert_eq!(tree.stat("/").unwrap().num_children, 1);
}

#[test]
fn zxids_count_within_a_term_and_restart_in_the_next() {
    let mut h = Harness::new();
    assert_eq!(h.tree.last_zxid(), 1 << 32 | 1);
    h.create("/a", 0).unwrap();
    assert_eq!(h.tree.last_zxid(), 1 << 32 | 2);
    let txn = Txn {
        session_id: SESSION,
        xid: 1,
        time_ms: 5,
        auth: vec![],
        op: TxnOp::CreateSession { timeout_ms: 1 },
    };
    assert_eq!(h.tree.apply(2, &txn).zxid, 2 << 32 | 1);
}

#[test]
fn create_sets_stat_and_bumps_the_parent() {
    let mut h = Harness::new();
    h.create("/a", 0).unwrap();
    let zxid = h.tree.last_zxid();
    let stat = h.stat("/a");
    assert_eq!((stat.czxid, stat.mzxid, stat.pzxid), (zxid, zxid, zxid));
    assert_eq!(
        (stat.version, stat.cversion, stat.aversion, stat.data_length),
        (0, 0, 0, 1)
    );
    let root = h.stat("/");
    // One create counted, two children (/zookeeper came without one):
    // ZooKeeper shows 2 × 1 − 2 = 0, as a fresh ZooKeeper 3.8 does.
    assert_eq!((root.cversion, root.pzxid, root.num_children), (0, zxid, 2));
    assert_eq!(h.tree.node("/").unwrap().stat.cversion, 1);
}

#[test]
fn a_failed_write_still_takes_a_zxid_like_zookeeper_error_txns() {
    let mut h = Harness::new();
    let before = h.tree.last_zxid();
    assert_eq!(h.create("/missing/child", 0), Err(ErrorCode::NoNode));
    assert_eq!(h.tree.last_zxid(), before + 1);
}

#[test]
fn sequential_names_use_the_parent_cversion_with_10_digits() {
    let mut h = Harness::new();
    h.create("/q", 0).unwrap();
    assert_eq!(h.create("/q/n-", 2).unwrap(), "/q/n-0000000000");
    assert_eq!(h.create("/q/n-", 2).unwrap(), "/q/n-0000000001");
    h.request(Request::Delete(DeleteRequest {
        path: "/q/n-0000000000".into(),
        version: -1,
    }))
    .result
    .unwrap();
    // The stored cversion counts creates only, so the counter goes on...
    assert_eq!(h.create("/q/n-", 2).unwrap(), "/q/n-0000000002");
    // ...while clients see ZooKeeper's v3 cversion: 2 × creates − children.
    assert_eq!(h.stat("/q").cversion, 2 * 3 - 2);
}

#[test]
fn sequential_names_go_negative_after_cversion_overflow() {
    let mut h = Harness::new();
    h.create("/q", 0).unwrap();
    let id = h.tree.resolve("/q").unwrap();
    h.tree.update(id, |s| s.cversion = i32::MAX, None, None);
    assert_eq!(h.create("/q/n", 2).unwrap(), format!("/q/n{}", i32::MAX));
    assert_eq!(h.create("/q/n", 2).unwrap(), "/q/n-2147483648");
}

#[test]
fn create_errors_come_in_zookeepers_order() {
    let mut h = Harness::new();
    assert_eq!(h.create("noslash", 0), Err(ErrorCode::BadArguments));
    assert_eq!(h.create("/a/", 0), Err(ErrorCode::NoNode));
    h.create("/a", 0).unwrap();
    assert_eq!(h.create("/a/", 0), Err(ErrorCode::BadArguments));
    assert_eq!(h.create("/a", 0), Err(ErrorCode::NodeExists));
    assert_eq!(h.create("/a/b", 99), Err(ErrorCode::BadArguments));
    assert_eq!(
        h.create("/a/b", 5),
        Err(ErrorCode::BadArguments),
        "a TTL mode needs createTTL"
    );
    let empty_acl = CreateRequest {
        acl: vec![],
        ..create_request("/a/c", 0)
    };
    assert_eq!(
        h.request(Request::Create(empty_acl)).result,
        Err(ErrorCode::InvalidAcl)
    );
    h.create("/e", 1).unwrap();
    assert_eq!(
        h.create("/e/child", 0),
        Err(ErrorCode::NoChildrenForEphemerals)
    );
}

#[test]
fn setdata_and_delete_check_versions() {
    let mut h = Harness::new();
    h.create("/a", 0).unwrap();
    let set = |version| {
        Request::SetData(SetDataRequest {
            path: "/a".into(),
            data: Some(b"xy".to_vec()),
            version,
        })
    };
    assert_eq!(h.request(set(5)).result, Err(ErrorCode::BadVersion));
    let Ok(Response::Stat(stat)) = h.request(set(0)).result else {
        panic!()
    };
    assert_eq!(
        (stat.version, stat.data_length, stat.mzxid),
        (1, 2, h.tree.last_zxid())
    );
    assert_eq!(h.request(set(-1)).result.map(|_| ()), Ok(()));
    h.create("/a/b", 0).unwrap();
    let delete = |path: &str, version| {
        Request::Delete(DeleteRequest {
            path: path.into(),
            version,
        })
    };
    assert_eq!(h.request(delete("/a", -1)).result, Err(ErrorCode::NotEmpty));
    assert_eq!(
        h.request(delete("/a/b", 3)).result,
        Err(ErrorCode::BadVersion)
    );
    assert_eq!(h.request(delete("/a/b", 0)).result, Ok(Response::Empty));
    assert_eq!(
        h.request(delete("/zookeeper", -1)).result,
        Err(ErrorCode::BadArguments)
    );
    assert_eq!(
        h.request(delete("/nope", -1)).result,
        Err(ErrorCode::NoNode)
    );
}

#[test]
fn events_follow_zookeepers_firing_order() {
    let mut h = Harness::new();
    let applied = h.request(Request::Create(create_request("/a", 0)));
    let kinds: Vec<_> = applied
        .events
        .iter()
        .map(|e| (e.path.as_str(), e.event_type))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("/a", EventType::NodeCreated),
            ("/", EventType::NodeChildrenChanged)
        ]
    );
    let applied = h.request(Request::Delete(DeleteRequest {
        path: "/a".into(),
        version: -1,
    }));
    let kinds: Vec<_> = applied
        .events
        .iter()
        .map(|e| (e.path.as_str(), e.event_type))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("/a", EventType::NodeDeleted),
            ("/", EventType::NodeChildrenChanged)
        ]
    );
}

#[test]
fn closing_a_session_removes_its_ephemerals_at_once() {
    let mut h = Harness::new();
    h.create("/p", 0).unwrap();
    h.create("/p/e1", 1).unwrap();
    h.create("/p/e2", 3).unwrap();
    assert_eq!(h.tree.ephemerals_of(SESSION).len(), 2);
    assert_eq!(h.stat("/p/e1").ephemeral_owner, SESSION);
    let applied = h.txn(SESSION, TxnOp::CloseSession);
    assert_eq!(applied.session_closed, Some(SESSION));
    assert_eq!(applied.events.len(), 4);
    assert_eq!(
        h.tree.paths(),
        vec![
            "/",
            "/p",
            "/zookeeper",
            "/zookeeper/config",
            "/zookeeper/quota"
        ]
    );
    // A closed session's writes fail.
    assert_eq!(h.create("/x", 0), Err(ErrorCode::SessionExpired));
}

#[test]
fn multi_is_all_or_nothing_with_zookeepers_per_op_results() {
    let mut h = Harness::new();
    let before = h.tree.digest();
    let ops = vec![
        MultiOp::Create(create_request("/m", 0)),
        MultiOp::Check(CheckVersionRequest {
            path: "/m".into(),
            version: 7,
        }),
        MultiOp::Delete(DeleteRequest {
            path: "/m".into(),
            version: -1,
        }),
    ];
    let applied = h.request(Request::Multi(ops));
    assert_eq!(
        applied.result,
        Ok(Response::Multi(vec![
            MultiResult::Error(0),
            MultiResult::Error(-103),
            MultiResult::Error(-2)
        ]))
    );
    assert!(applied.events.is_empty());
    assert_eq!(h.tree.digest(), before);
    assert!(h.tree.stat("/m").is_none());

    let ops = vec![
        MultiOp::Create(create_request("/m", 0)),
        MultiOp::SetData(SetDataRequest {
            path: "/m".into(),
            data: None,
            version: 0,
        }),
        MultiOp::Check(CheckVersionRequest {
            path: "/m".into(),
            version: 1,
        }),
    ];
    let applied = h.request(Request::Multi(ops));
    let Ok(Response::Multi(results)) = applied.result else {
        panic!()
    };
    assert_eq!(results[0], MultiResult::Create("/m".into()));
    assert!(
        matches!(results[1], MultiResult::SetData(ref s) if s.version == 1 && s.mzxid == s.czxid)
    );
    assert_eq!(results[2], MultiResult::Check);
}

/// A create op of a multi whose flags are no CreateMode (7, -1, 100, ...),
/// in any create opcode (1, 15, 19, 21): ZooKeeper 3.8 reads the op
/// (MultiOperationRecord keeps the flags) and fails that one op at prep
/// (pRequest2TxnCreate's CreateMode.fromFlag: BadArguments), so the reply
/// is err 0 with the per-op results 0 before it, -8 for it and -2 after,
/// and the zxid is taken (an error txn). Seen from ZooKeeper 3.8.0 for
/// [create /ok, op N flags F, delete /missing]: err 0, zxid + 1, results
/// [-1/0, -1/-8, -1/-2]; for the op alone: [-1/-8]. Outside a multi the
/// same flags answer err -8, zxid + 1. A TTL mode in op 21 with a ttl out
/// of range (0, -1, > 2^40 - 1) fails the op the same way
/// (EphemeralType.validateTTL); op 21 with flags 0 drops its ttl and
/// creates a plain node, whatever the ttl.
#[test]
fn a_multi_create_op_with_flags_that_are_no_create_mode_fails_that_op() {
    let mut h = Harness::new();
    let ttl_request = |path: &str, flags: i32, ttl: i64| CreateTtlRequest {
        path: path.into(),
        data: None,
        acl: open_acl_unsafe(),
        flags,
        ttl,
    };
    let mut bad_ops: Vec<MultiOp> = Vec::new();
    for flags in [7, -1, 100, 8, i32::MIN, i32::MAX] {
        bad_ops.push(MultiOp::Create(create_request("/bad", flags)));
        bad_ops.push(MultiOp::Create2(create_request("/bad", flags)));
        bad_ops.push(MultiOp::CreateContainer(create_request("/bad", flags)));
        bad_ops.push(MultiOp::CreateTtl(ttl_request("/bad", flags, 1000)));
    }
    for ttl in [0, -1, -5, 1 << 40, i64::MAX, i64::MIN] {
        for flags in [5, 6] {
            bad_ops.push(MultiOp::CreateTtl(ttl_request("/bad", flags, ttl)));
        }
    }
    for bad in bad_ops {
        let before = (h.tree.digest(), h.tree.last_zxid());
        let ops = vec![
            MultiOp::Create(create_request("/ok", 0)),
            bad.clone(),
            MultiOp::Delete(DeleteRequest {
                path: "/missing".into(),
                version: -1,
            }),
        ];
        let applied = h.request(Request::Multi(ops));
        assert_eq!(
            applied.result,
            Ok(Response::Multi(vec![
                MultiResult::Error(0),
                MultiResult::Error(-8),
                MultiResult::Error(-2)
            ])),
            "{bad:?}"
        );
        assert_eq!(applied.zxid, before.1 + 1, "the zxid is taken: {bad:?}");
        assert!(applied.events.is_empty());
        assert_eq!(h.tree.digest(), before.0, "the create before it is undone");
        assert!(h.tree.node("/ok").is_none() && h.tree.node("/bad").is_none());
        let applied = h.request(Request::Multi(vec![bad.clone()]));
        assert_eq!(
            applied.result,
            Ok(Response::Multi(vec![MultiResult::Error(-8)])),
            "{bad:?}"
        );
        assert_eq!(applied.zxid, before.1 + 2);
        // The same op on its own: BadArguments, a zxid taken.
        let single = match bad {
            MultiOp::Create(r) => Request::Create(r),
            MultiOp::Create2(r) => Request::Create2(r),
            MultiOp::CreateContainer(r) => Request::CreateContainer(r),
            MultiOp::CreateTtl(r) => Request::CreateTtl(r),
            other => unreachable!("{other:?}"),
        };
        let applied = h.request(single);
        assert_eq!(applied.result, Err(ErrorCode::BadArguments));
        assert_eq!(applied.zxid, before.1 + 3);
        assert_eq!(h.tree.digest(), before.0);
    }
    // Op 21 whose flags are no TTL mode: the ttl is dropped, in range or not.
    for (index, ttl) in [0, -1, 1 << 40, i64::MAX].into_iter().enumerate() {
        let path = format!("/plain{index}");
        let applied = h.request(Request::Multi(vec![MultiOp::CreateTtl(ttl_request(
            &path, 0, ttl,
        ))]));
        assert_eq!(
            applied.result,
            Ok(Response::Multi(vec![MultiResult::Create(path.clone())]))
        );
        assert_eq!(h.tree.node(&path).unwrap().stat.ephemeral_owner, 0);
    }
}

/// A create op of a multi whose flags are a TTL mode but whose body has no
/// ttl (ops 1, 15, 19): ZooKeeper 3.8 fails the whole multi with
/// MarshallingError (pRequest2TxnCreate's cast to CreateTTLRequest) and no
/// results, undoing the ops before it, and the zxid is taken (an error
/// txn: the next create's czxid is one further). Seen on the wire: reply
/// header err -5, zxid N, empty body; the next create gets N + 1.
#[test]
fn a_multi_create_with_a_ttl_mode_and_no_ttl_fails_whole_with_marshalling_error() {
    let mut h = Harness::new();
    for flags in [5, 6] {
        for op in [MultiOp::Create, MultiOp::Create2, MultiOp::CreateContainer] {
            let before = (h.tree.digest(), h.tree.last_zxid());
            let ops = vec![
                MultiOp::Create(create_request("/k", 0)),
                op(create_request("/l", flags)),
                MultiOp::Check(CheckVersionRequest {
                    path: "/nope".into(),
                    version: 0,
                }),
            ];
            let applied = h.request(Request::Multi(ops));
            assert_eq!(applied.result, Err(ErrorCode::MarshallingError));
            assert_eq!(applied.zxid, before.1 + 1, "the zxid is taken");
            assert!(applied.events.is_empty());
            assert_eq!(h.tree.digest(), before.0, "the create before it is undone");
            assert!(h.tree.node("/k").is_none() && h.tree.node("/l").is_none());
            h.create("/after", 0).unwrap();
            assert_eq!(h.stat("/after").czxid, before.1 + 2);
            h.delete("/after").unwrap();
        }
    }
    // Before the op's own checks: an invalid path fails the same way.
    let applied = h.request(Request::Multi(vec![MultiOp::Create(create_request(
        "nopath", 5,
    ))]));
    assert_eq!(applied.result, Err(ErrorCode::MarshallingError));
    // An op that failed before it: that op's error, the usual results.
    let applied = h.request(Request::Multi(vec![
        MultiOp::Check(CheckVersionRequest {
            path: "/nope".into(),
            version: 0,
        }),
        MultiOp::Create(create_request("/l", 5)),
    ]));
    assert_eq!(
        applied.result,
        Ok(Response::Multi(vec![
            MultiResult::Error(-101),
            MultiResult::Error(-2)
        ]))
    );
}

/// ZooKeeper 3.8 gives a multi's create op the opcode its flags make
/// (Op.Create.getOpcode), whatever opcode the client sent: the container
/// flag makes a container answered as type 15 (path and Stat), any other
/// non-TTL flags a plain create answered as type 1 (path only), op 21
/// without a TTL mode drops its ttl. Bytes seen from ZooKeeper 3.8.0:
/// op 1 flags 4 -> result type 15 with a Stat (the node is reaped once
/// emptied), op 15 flags 0 -> type 1, op 19 flags 0 -> type 1 (not a
/// container), op 21 flags 4 ttl 1000 -> type 15, op 21 flags 7 -> error
/// -8.
#[test]
fn a_multi_create_op_takes_its_opcode_from_its_flags() {
    let mut h = Harness::new();
    let ttl_request = |path: &str, flags: i32, ttl: i64| CreateTtlRequest {
        path: path.into(),
        data: None,
        acl: open_acl_unsafe(),
        flags,
        ttl,
    };
    let ops = vec![
        MultiOp::Create(create_request("/c1", 4)),
        MultiOp::Create2(create_request("/p15", 0)),
        MultiOp::CreateContainer(create_request("/p19", 0)),
        MultiOp::CreateContainer(create_request("/e19", 1)),
        MultiOp::CreateTtl(ttl_request("/p21", 0, 1000)),
        MultiOp::CreateTtl(ttl_request("/c21", 4, 1000)),
        MultiOp::Create2(create_request("/c15", 4)),
        MultiOp::CreateTtl(ttl_request("/t21", 5, 1000)),
    ];
    let applied = h.request(Request::Multi(ops));
    let Ok(Response::Multi(results)) = applied.result else {
        panic!("{applied:?}")
    };
    let zxid = applied.zxid;
    let stat = |h: &Harness, path: &str| h.stat(path);
    assert_eq!(
        results,
        vec![
            MultiResult::Create2("/c1".into(), stat(&h, "/c1")),
            MultiResult::Create("/p15".into()),
            MultiResult::Create("/p19".into()),
            MultiResult::Create("/e19".into()),
            MultiResult::Create("/p21".into()),
            MultiResult::Create2("/c21".into(), stat(&h, "/c21")),
            MultiResult::Create2("/c15".into(), stat(&h, "/c15")),
            MultiResult::Create2("/t21".into(), stat(&h, "/t21")),
        ]
    );
    let owner = |path: &str| h.tree.node(path).unwrap().stat.ephemeral_owner;
    for container in ["/c1", "/c21", "/c15"] {
        assert_eq!(owner(container), i64::MIN, "{container} is a container");
        assert_eq!(h.stat(container).czxid, zxid);
    }
    for plain in ["/p15", "/p19", "/p21"] {
        assert_eq!(owner(plain), 0, "{plain} is a plain persistent node");
    }
    assert_eq!(owner("/e19"), SESSION, "flags 1 in op 19: ephemeral");
    assert_eq!(owner("/t21"), (0xffu64 << 56) as i64 | 1000);
    // A container made so is reaped like one once emptied.
    h.create("/c1/x", 0).unwrap();
    h.delete("/c1/x").unwrap();
    assert!(h
        .tree
        .reap_candidates(h.time_ms)
        .contains(&"/c1".to_string()));
    // Unknown flags in op 21 are refused per op (op 21 keeps its int
    // flags, which pRequest2TxnCreate's CreateMode.fromFlag refuses).
    let applied = h.request(Request::Multi(vec![MultiOp::CreateTtl(ttl_request(
        "/bad", 7, 1000,
    ))]));
    assert_eq!(
        applied.result,
        Ok(Response::Multi(vec![MultiResult::Error(-8)]))
    );
}

/// Outside a multi the opcode decides: create and create2 (ops 1 and 15)
/// with the container flag make a plain persistent node (ZooKeeper 3.8
/// writes a CreateTxn: the node is never reaped), with a TTL mode they
/// fail BadArguments (validateTTL of ttl -1), taking a zxid.
#[test]
fn a_plain_create_with_container_or_ttl_flags_is_no_container_or_ttl_node() {
    let mut h = Harness::new();
    assert_eq!(h.create("/p1", 4), Ok("/p1".into()));
    let Ok(Response::Create2(_, _)) = h
        .request(Request::Create2(create_request("/p15", 4)))
        .result
    else {
        panic!()
    };
    for path in ["/p1", "/p15"] {
        assert_eq!(h.tree.node(path).unwrap().stat.ephemeral_owner, 0);
        h.create(&format!("{path}/x"), 0).unwrap();
        h.delete(&format!("{path}/x")).unwrap();
        assert!(!h
            .tree
            .reap_candidates(h.time_ms)
            .contains(&path.to_string()));
    }
    for flags in [5, 6] {
        let before = h.tree.last_zxid();
        assert_eq!(h.create("/t1", flags), Err(ErrorCode::BadArguments));
        let applied = h.request(Request::Create2(create_request("/t15", flags)));
        assert_eq!(applied.result, Err(ErrorCode::BadArguments));
        assert_eq!(h.tree.last_zxid(), before + 2);
    }
}

#[test]
fn acls_gate_reads_and_writes() {
    let mut h = Harness::new();
    let user = Id {
        scheme: "digest".into(),
        id: crate::acl::generate_digest("u:p"),
    };
    let acl = vec![Acl {
        perms: perms::READ | perms::ADMIN,
        id: user.clone(),
    }];
    let request = CreateRequest {
        acl: acl.clone(),
        ..create_request("/s", 0)
    };
    h.request(Request::Create(request)).result.unwrap();
    let read = Request::GetData(GetDataRequest {
        path: "/s".into(),
        watch: false,
    });
    assert_eq!(
        h.tree.read(&read, SESSION, &[]).unwrap().result,
        Err(ErrorCode::NoAuth)
    );
    assert!(h
        .tree
        .read(&read, SESSION, std::slice::from_ref(&user))
        .unwrap()
        .result
        .is_ok());
    let set = Request::SetData(SetDataRequest {
        path: "/s".into(),
        data: None,
        version: -1,
    });
    assert_eq!(
        h.request_as(SESSION, vec![user.clone()], set.clone())
            .result,
        Err(ErrorCode::NoAuth)
    );
    let superuser = Id {
        scheme: "super".into(),
        id: String::new(),
    };
    assert!(h.request_as(SESSION, vec![superuser], set).result.is_ok());
    let set_acl = Request::SetAcl(SetAclRequest {
        path: "/s".into(),
        acl: open_acl_unsafe(),
        version: 0,
    });
    let Ok(Response::Stat(stat)) = h.request_as(SESSION, vec![user], set_acl).result else {
        panic!()
    };
    assert_eq!(stat.aversion, 1);
}

#[test]
fn containers_and_ttl_nodes_are_reaped_when_due() {
    let mut h = Harness::new();
    let container = CreateRequest {
        flags: 4,
        ..create_request("/c", 4)
    };
    let Ok(Response::Create2(_, stat)) = h.request(Request::CreateContainer(container)).result
    else {
        panic!()
    };
    assert_eq!(stat.ephemeral_owner, 0, "clients see 0 for containers");
    assert_eq!(h.tree.node("/c").unwrap().stat.ephemeral_owner, i64::MIN);
    assert!(
        h.tree.reap_candidates(h.time_ms).is_empty(),
        "a never-used container stays"
    );
    h.create("/c/x", 0).unwrap();
    h.request(Request::Delete(DeleteRequest {
        path: "/c/x".into(),
        version: -1,
    }))
    .result
    .unwrap();
    assert_eq!(h.tree.reap_candidates(h.time_ms), vec!["/c"]);
    let ttl = CreateTtlRequest {
        path: "/t".into(),
        data: None,
        acl: open_acl_unsafe(),
        flags: 5,
        ttl: 100,
    };
    let Ok(Response::Create2(_, stat)) = h.request(Request::CreateTtl(ttl)).result else {
        panic!()
    };
    assert_eq!(stat.ephemeral_owner, 0, "clients see 0 for TTL nodes");
    assert_eq!(
        h.tree.node("/t").unwrap().stat.ephemeral_owner,
        (0xffu64 << 56) as i64 | 100
    );
    assert!(!h
        .tree
        .reap_candidates(h.time_ms + 50)
        .contains(&"/t".to_string()));
    assert!(h
        .tree
        .reap_candidates(h.time_ms + 200)
        .contains(&"/t".to_string()));
    h.time_ms += 500;
    for path in ["/c", "/t"] {
        let applied = h.txn(0, TxnOp::DeleteContainer { path: path.into() });
        assert_eq!(applied.result, Ok(Response::Empty), "{path}");
    }
    let applied = h.txn(
        0,
        TxnOp::DeleteContainer {
            path: "/zookeeper/quota".into(),
        },
    );
    assert_eq!(applied.result, Err(ErrorCode::BadArguments));
}

#[test]
fn the_reaper_never_deletes_a_container_created_anew_after_it_chose_the_old_one() {
    let mut h = Harness::new();
    let container = || {
        Request::CreateContainer(CreateRequest {
            flags: 4,
            ..create_request("/c", 4)
        })
    };
    h.request(container()).result.unwrap();
    h.create("/c/x", 0).unwrap();
    let delete = |path: &str| {
        Request::Delete(DeleteRequest {
            path: path.into(),
            version: -1,
        })
    };
    h.request(delete("/c/x")).result.unwrap();
    assert_eq!(h.tree.reap_candidates(h.time_ms), vec!["/c"]);
    // The reaper's deletion is in flight while a client deletes the
    // container and creates it again: the new one never had a child.
    h.request(delete("/c")).result.unwrap();
    h.request(container()).result.unwrap();
    let reaped = h.txn(0, TxnOp::DeleteContainer { path: "/c".into() });
    assert_eq!(reaped.result, Err(ErrorCode::BadVersion));
    assert!(h.tree.node("/c").is_some());
    // A client's own deleteContainer is checked as ZooKeeper checks it:
    // only for children.
    h.request(Request::DeleteContainer("/c".into()))
        .result
        .unwrap();
    assert!(h.tree.node("/c").is_none());
}

#[test]
fn a_planted_early_reaper_takes_what_is_not_due() {
    let mut h = Harness::new();
    let ttl = CreateTtlRequest {
        path: "/t".into(),
        data: None,
        acl: open_acl_unsafe(),
        flags: 5,
        ttl: 10_000,
    };
    h.request(Request::CreateTtl(ttl)).result.unwrap();
    assert!(h.tree.reap_candidates(h.time_ms).is_empty());
    crate::planted::set_reap_early(true);
    assert_eq!(h.tree.reap_candidates(h.time_ms), vec!["/t"]);
    let reaped = h.txn(0, TxnOp::DeleteContainer { path: "/t".into() });
    crate::planted::set_reap_early(false);
    assert_eq!(reaped.result, Ok(Response::Empty));
}

#[test]
fn snapshots_round_trip_and_reject_corruption() {
    let mut h = Harness::new();
    h.create("/a", 0).unwrap();
    h.create("/a/e", 1).unwrap();
    h.create("/a/s", 2).unwrap();
    h.tree.set_applied(9, TERM);
    let mut bytes = Vec::new();
    snapshot::encode(&mut h.tree, &mut bytes);
    let loaded = snapshot::decode(&bytes).unwrap();
    assert_eq!(loaded.digest(), h.tree.digest());
    assert_eq!(loaded.paths(), h.tree.paths());
    assert_eq!(loaded.ephemerals_of(SESSION), vec!["/a/e"]);
    assert_eq!(loaded.sessions(), h.tree.sessions());
    assert_eq!(
        (loaded.applied_index(), loaded.last_zxid()),
        (9, h.tree.last_zxid())
    );
    for cut in [0, 8, bytes.len() / 2, bytes.len() - 1] {
        assert!(snapshot::decode(&bytes[..cut]).is_err());
    }
    let mut flipped = bytes.clone();
    flipped[bytes.len() / 2] ^= 1;
    assert!(snapshot::decode(&flipped).is_err());
    // Another state's part may follow the tree's END frame.
    let mut followed = bytes.clone();
    followed.extend_from_slice(b"KEELKVSN-more");
    assert_eq!(snapshot::part_len(&followed).unwrap(), bytes.len());
    assert_eq!(snapshot::part_len(&bytes).unwrap(), bytes.len());
    assert!(snapshot::part_len(&bytes[..bytes.len() - 1]).is_err());
}

#[test]
fn a_closing_session_deletes_its_ephemerals_in_zookeepers_hashset_order() {
    let mut h = Harness::new();
    h.create("/compat", 0).unwrap();
    for i in 0..4 {
        h.create(&format!("/compat/e3-{i}"), 1).unwrap();
    }
    let applied = h.txn(SESSION, TxnOp::CloseSession);
    let deleted: Vec<&str> = applied
        .events
        .iter()
        .filter(|e| e.event_type == EventType::NodeDeleted)
        .map(|e| e.path.as_str())
        .collect();
    // What a real ZooKeeper 3.8.0 sent on the wire for the same four nodes.
    assert_eq!(
        deleted,
        vec![
            "/compat/e3-2",
            "/compat/e3-1",
            "/compat/e3-3",
            "/compat/e3-0"
        ]
    );
}

/// A snapshot written part by part while creates, sets, deletes and a
/// failed multi change the tree loads as the tree was when it began; the
/// kept old versions go when it ends. Spans several arena segments.
#[test]
fn a_snapshot_written_under_changes_is_the_tree_at_its_start() {
    let mut h = Harness::new();
    let nodes = crate::store::SEGMENT_SLOTS * 2 + 100;
    for parent in 0..3 {
        h.create(&format!("/p{parent}"), 0).unwrap();
    }
    for i in 0..nodes {
        h.create(&format!("/p{}/n{i}", i % 3), 0).unwrap();
    }
    h.tree.set_applied(7, TERM);
    let expected = snapshot::encode_copy(&h.tree);
    let expected = snapshot::decode(&expected).unwrap();
    let mut bytes = h.tree.snapshot_begin();
    let mut step = 0usize;
    loop {
        // Changes between parts: the last nodes (not yet written), the
        // first ones (already written) and new ones.
        for i in [nodes - 1 - step, step, nodes / 2 + step] {
            let path = format!("/p{}/n{i}", i % 3);
            let set = Request::SetData(SetDataRequest {
                path: path.clone(),
                data: Some(vec![step as u8; 50]),
                version: -1,
            });
            assert!(h.request(set).result.is_ok());
        }
        let gone = format!("/p{}/n{}", (nodes / 3 + step) % 3, nodes / 3 + step);
        let delete = Request::Delete(DeleteRequest {
            path: gone,
            version: -1,
        });
        assert!(h.request(delete).result.is_ok());
        h.create(&format!("/p0/new{step}"), 0).unwrap();
        let failed = Request::Multi(vec![
            MultiOp::Create(create_request(&format!("/p1/m{step}"), 0)),
            MultiOp::Delete(DeleteRequest {
                path: format!("/p2/n{}", 2 + 3 * (step + 1000)),
                version: -1,
            }),
            MultiOp::Check(CheckVersionRequest {
                path: "/p0".into(),
                version: 12345,
            }),
        ]);
        let _ = h.request(failed);
        step += 1;
        if !h.tree.snapshot_chunk(&mut bytes).unwrap() {
            break;
        }
        assert!(h.tree.snapshot_preimage_bytes() > 0);
    }
    h.tree.snapshot_end();
    assert_eq!(h.tree.snapshot_preimage_bytes(), 0);
    let loaded = snapshot::load(&bytes, 2).unwrap();
    crate::fuzzing::assert_same(&expected, &loaded);
    crate::fuzzing::check_invariants(&h.tree);
    // A corrupt NODES frame is refused with its offset.
    let mut corrupt = bytes.clone();
    let at = bytes.len() / 2;
    corrupt[at] ^= 0x40;
    let error = snapshot::load(&corrupt, 2).unwrap_err().to_string();
    assert!(error.contains("offset"), "{error}");
    // A truncated file is refused.
    assert!(snapshot::load(&bytes[..bytes.len() - 3], 2).is_err());
}

/// A format 3 file (written before consensus kept the dedup table) still
/// loads: its header's dedup table is read past and dropped.
#[test]
fn a_format_3_snapshot_loads_with_its_dedup_table_skipped() {
    let mut h = Harness::new();
    h.create("/a", 0).unwrap();
    h.create("/a/b", 1).unwrap();
    h.tree.set_applied(7, 2);
    let mut v4 = Vec::new();
    snapshot::encode(&mut h.tree, &mut v4);
    // [magic 8][version 4] then the HEADER frame [kind 1][len 4][crc 4].
    let len = u32::from_be_bytes(v4[13..17].try_into().unwrap()) as usize;
    let payload = &v4[21..21 + len];
    let sessions = h.tree.sessions().len();
    let split = 48 + 4 + 12 * sessions;
    let mut v3 = v4[..8].to_vec();
    v3.extend_from_slice(&3i32.to_be_bytes());
    // Format 3's digest hashed contents byte-wise (header field 4).
    let legacy_digest = h.tree.legacy_digest().to_be_bytes();
    assert_ne!(
        legacy_digest,
        payload[24..32],
        "the content hash changed in format 4"
    );
    snapshot::frame(&mut v3, snapshot::KIND_HEADER, |out| {
        out.extend_from_slice(&payload[..24]);
        out.extend_from_slice(&legacy_digest);
        out.extend_from_slice(&payload[32..split]);
        out.extend_from_slice(&2i32.to_be_bytes());
        for (origin, sequence) in [(1i64, 40i64), (3, 9)] {
            out.extend_from_slice(&origin.to_be_bytes());
            out.extend_from_slice(&sequence.to_be_bytes());
        }
        out.extend_from_slice(&payload[split..]);
    });
    v3.extend_from_slice(&v4[21 + len..]);
    let loaded = snapshot::load(&v3, 2).expect("format 3 loads");
    // Loaded, the tree keeps this Keel's digest.
    crate::fuzzing::assert_same(&h.tree, &loaded);
    assert_eq!(loaded.applied_index(), 7);
    // The same bytes called format 4 are refused: the table is not a header field.
    let mut mislabelled = v3.clone();
    mislabelled[8..12].copy_from_slice(&4i32.to_be_bytes());
    assert!(snapshot::load(&mislabelled, 2).is_err());
}

/// Children stay sorted whether a new name lands on the remembered spot
/// after its previous sibling (`n10` after `n1`, `n11` after `n10`) or not,
/// also after deletes shrink the list under a stale hint.
#[test]
fn children_created_in_any_order_stay_sorted() {
    let mut h = Harness::new();
    h.create("/h", 0).unwrap();
    let mut expected = std::collections::BTreeSet::new();
    for i in (0..150).chain((300..320).rev()).chain(150..160) {
        h.create_child("/h", format!("n{i}"), &mut expected);
    }
    for i in (0..160).step_by(3) {
        h.delete(&format!("/h/n{i}")).unwrap();
        expected.remove(&format!("n{i}"));
    }
    for i in [1000, 5, 6, 0, 3] {
        let created = h.create(&format!("/h/n{i}"), 0);
        assert_eq!(created.is_ok(), expected.insert(format!("n{i}")), "n{i}");
    }
    h.assert_children("/h", expected);
}

/// Unpadded numbered names (what `keel bench` creates: `n1009` then
/// `n1010`, which sorts after the older `n101`) land a little past the
/// hint, in sorted order, with numbers crossing 10, 100 and 1,000, and
/// with a second writer's names interleaved under the same parent.
#[test]
fn unpadded_numbered_children_land_in_order_past_the_hint() {
    let mut h = Harness::new();
    h.create("/u", 0).unwrap();
    let mut expected = std::collections::BTreeSet::new();
    for i in 0..2_500 {
        h.create_child("/u", format!("n{i}"), &mut expected);
        if i % 7 == 0 {
            h.create_child("/u", format!("m{i}"), &mut expected);
        }
    }
    h.assert_children("/u", expected);
}

/// `gallop` finds the first child not before the name, from any start
/// at or before it, whatever the distance, in one vector and in chunks.
#[test]
fn gallop_finds_the_first_child_not_before_the_name() {
    let children: Vec<u32> = (0..3000).map(|i| i * 2).collect();
    let chunked = crate::store::Chunked::from_sorted(&children);
    for form in [
        crate::store::Children::Flat(&children),
        crate::store::Children::Chunked(&chunked),
    ] {
        for from in (0..=children.len()).step_by(7) {
            for sought in (0..=6000u32).step_by(13) {
                let expected = children.partition_point(|c| *c < sought);
                if expected < from {
                    continue; // the hint is only used when children[from - 1] < sought
                }
                let got = crate::tree::gallop(&form, from, |c| c < sought);
                assert_eq!(got, expected, "{form:?}: from {from}, sought {sought}");
            }
        }
    }
}

/// The parent cache never outlives the node it names: after the parent
/// is deleted (and its slot reused by another node) a create under its
/// path is NoNode, and under a parent made again at that path it lands
/// there; a multi that deleted the parent and rolled back leaves it
/// usable.
#[test]
fn a_cached_parent_is_forgotten_when_nodes_are_unlinked() {
    let mut h = Harness::new();
    h.create("/a", 0).unwrap();
    h.create("/a/p", 0).unwrap();
    h.create("/a/p/x", 0).unwrap(); // /a/p now cached
    let old = h.tree.resolve("/a/p").unwrap();
    h.delete("/a/p/x").unwrap();
    h.delete("/a/p").unwrap();
    h.create("/b", 0).unwrap();
    h.create("/c", 0).unwrap();
    let reused = [h.tree.resolve("/b"), h.tree.resolve("/c")];
    assert!(
        reused.contains(&Some(old)),
        "the deleted parent's slot was reused"
    );
    assert_eq!(h.create("/a/p/y", 0), Err(ErrorCode::NoNode));
    assert!(h.tree.node("/b").unwrap().children.is_empty());
    assert!(h.tree.node("/c").unwrap().children.is_empty());
    h.create("/a/p", 0).unwrap();
    h.create("/a/p/z", 0).unwrap();
    assert_eq!(h.tree.node("/a/p").unwrap().children, vec!["z".to_string()]);
    // A multi that deletes /a/p/z and /a/p, then fails: both come back.
    let failed = Request::Multi(vec![
        MultiOp::Delete(DeleteRequest {
            path: "/a/p/z".into(),
            version: -1,
        }),
        MultiOp::Delete(DeleteRequest {
            path: "/a/p".into(),
            version: -1,
        }),
        MultiOp::Check(CheckVersionRequest {
            path: "/a".into(),
            version: 12345,
        }),
    ]);
    let Ok(Response::Multi(results)) = h.request(failed).result else {
        panic!("a multi answers per op")
    };
    assert!(matches!(results[2], MultiResult::Error(_)), "{results:?}");
    assert!(h.tree.resolve("/a/p/z").is_some(), "the multi rolled back");
    h.create("/a/p/w", 0).unwrap();
    assert_eq!(
        h.tree.node("/a/p").unwrap().children,
        vec!["w".to_string(), "z".to_string()]
    );
    crate::fuzzing::check_invariants(&h.tree);
}

/// A parent's remembered path facts (the digest's path hash) are never
/// used for another node that got its id: after the parent is deleted and
/// its slot reused at another depth, the digest of every create, setData
/// and delete under the new node still equals the digest summed afresh.
#[test]
fn remembered_path_facts_are_dropped_when_their_node_goes() {
    let mut h = Harness::new();
    h.create("/a", 0).unwrap();
    h.create("/a/p", 0).unwrap();
    h.create("/a/p/x", 0).unwrap(); // /a/p's facts remembered
    let old = h.tree.resolve("/a/p").unwrap();
    h.delete("/a/p/x").unwrap();
    h.delete("/a/p").unwrap();
    h.create("/deep", 0).unwrap();
    h.create("/deep/er", 0).unwrap();
    h.create("/deep/er/still", 0).unwrap();
    let reused = ["/deep", "/deep/er", "/deep/er/still"]
        .iter()
        .find(|path| h.tree.resolve(path) == Some(old))
        .expect("the deleted parent's slot was reused");
    for round in 0..3 {
        let child = format!("{reused}/n{round}");
        h.create(&child, 0).unwrap();
        h.request(Request::SetData(SetDataRequest {
            path: child.clone(),
            data: Some(vec![round as u8; 8]),
            version: -1,
        }))
        .result
        .unwrap();
        assert_eq!(h.tree.digest, h.tree.recomputed_digest(), "round {round}");
    }
    h.delete(&format!("{reused}/n1")).unwrap();
    assert_eq!(h.tree.digest, h.tree.recomputed_digest());
    // Parents at the root and more parents than the cache has slots.
    for p in 0..crate::tree::FACTS_CACHE_SLOTS + 5 {
        h.create(&format!("/r{p}"), 0).unwrap();
        h.create(&format!("/r{p}/c"), 0).unwrap();
    }
    assert_eq!(h.tree.digest, h.tree.recomputed_digest());
    crate::fuzzing::check_invariants(&h.tree);
}

/// Many parents, more than the cache has slots, each used again and
/// again: every create lands under its own parent.
#[test]
fn creates_under_more_parents_than_the_cache_holds_land_right() {
    let mut h = Harness::new();
    h.create("/w", 0).unwrap();
    let parents = crate::tree::PARENT_CACHE_SLOTS + 300;
    for p in 0..parents {
        h.create(&format!("/w/c{p}"), 0).unwrap();
    }
    for round in 0..3 {
        for p in (0..parents).step_by(7) {
            h.create(&format!("/w/c{p}/n{round}"), 0).unwrap();
        }
    }
    for p in (0..parents).step_by(7) {
        assert_eq!(
            h.tree.node(&format!("/w/c{p}")).unwrap().children,
            vec!["n0", "n1", "n2"]
        );
    }
    crate::fuzzing::check_invariants(&h.tree);
}

/// Two writers under one parent, each numbering its own names: every
/// insert of the second lands at the end although the hint points into
/// the first's names, and all stay sorted.
#[test]
fn two_interleaved_writers_under_one_parent_stay_sorted() {
    let mut h = Harness::new();
    h.create("/i", 0).unwrap();
    let mut expected = std::collections::BTreeSet::new();
    for i in 0..500 {
        for writer in ["a", "b"] {
            h.create_child("/i", format!("{writer}{i:04}"), &mut expected);
        }
    }
    h.assert_children("/i", expected);
}

/// `read_for_reply` answers a getChildren of the data tree with the bytes
/// `read`'s list encodes to (its watches and errors the same), and leaves
/// every other read, the system nodes' listings included, to `read`.
#[test]
fn listings_encoded_for_the_reply_are_the_bytes_of_the_plain_read() {
    let mut h = Harness::new();
    h.create("/empty", 0).unwrap();
    h.create("/one", 0).unwrap();
    h.create("/one/only", 0).unwrap();
    h.create("/many", 0).unwrap();
    for i in 0..300 {
        let name = match i % 3 {
            0 => format!("n{i}"),
            1 => format!("ü-{i}-{}", "x".repeat(i % 40)),
            _ => format!("{i:010}"),
        };
        h.create(&format!("/many/{name}"), 0).unwrap();
    }
    let secret = Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "digest".into(),
            id: "someone:hash".into(),
        },
    };
    h.request(Request::Create(CreateRequest {
        acl: vec![secret],
        ..create_request("/secret", 0)
    }))
    .result
    .unwrap();
    let paths = [
        "/",
        "/empty",
        "/one",
        "/many",
        "/secret",
        "/missing",
        "/zookeeper",
        "/keeper",
    ];
    let mut encoded = 0;
    for path in paths {
        for watch in [false, true] {
            let requests = [
                Request::GetChildren(keel_jute::GetChildrenRequest {
                    path: path.into(),
                    watch,
                }),
                Request::GetChildren2(keel_jute::GetChildren2Request {
                    path: path.into(),
                    watch,
                }),
            ];
            for request in requests {
                let plain = h.tree.read(&request, SESSION, &[]).unwrap();
                let reply =
                    crate::fuzzing::check_read_for_reply(&h.tree, &request, SESSION, &[], &plain);
                if let Ok(response) = &reply.result {
                    // ClickHouse's virtual /keeper is not in the data tree.
                    let system = path == "/keeper";
                    assert_eq!(
                        matches!(response, Response::Encoded(_)),
                        !system,
                        "{request:?}"
                    );
                    encoded += usize::from(!system);
                }
            }
        }
    }
    // /, /empty, /one, /many and /zookeeper, both ops, both watch flags.
    assert_eq!(encoded, 5 * 2 * 2);
    let get = Request::GetData(GetDataRequest {
        path: "/one".into(),
        watch: true,
    });
    assert_eq!(
        h.tree.read(&get, SESSION, &[]),
        h.tree.read_for_reply(&get, SESSION, &[])
    );
}

/// A parent with more children than one vector holds (its list in
/// chunks): creates and deletes in random order keep the list sorted and
/// complete, a multi that fails after crossing the bound rolls back whole,
/// and a snapshot taken while the list is chunked loads the same tree.
#[test]
fn a_wide_parent_keeps_its_children_sorted_through_creates_deletes_and_snapshots() {
    use crate::store::CHILDREN_FLAT_MAX;
    let mut h = Harness::new();
    h.create("/w", 0).unwrap();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut name = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        format!("{x:016x}")
    };
    let mut expected = std::collections::BTreeSet::new();
    // Just under the bound: one vector.
    while expected.len() < CHILDREN_FLAT_MAX {
        h.create_child("/w", name(), &mut expected);
    }
    // A multi that crosses the bound and then fails leaves the list as it was.
    let crossing: Vec<MultiOp> = (0..3)
        .map(|_| MultiOp::Create(create_request(&format!("/w/{}", name()), 0)))
        .chain([MultiOp::Delete(DeleteRequest {
            path: "/missing".into(),
            version: -1,
        })])
        .collect();
    // ZooKeeper's answer: the ops before the failure Ok (0), the failing
    // delete NoNode (-101).
    assert_eq!(
        h.request(Request::Multi(crossing)).result,
        Ok(Response::Multi(vec![
            MultiResult::Error(0),
            MultiResult::Error(0),
            MultiResult::Error(0),
            MultiResult::Error(-101),
        ]))
    );
    h.assert_children("/w", expected.clone());
    // Past it, in random order, with deletes between.
    for round in 0..3 * CHILDREN_FLAT_MAX {
        h.create_child("/w", name(), &mut expected);
        if round % 3 == 0 {
            let victim = expected.iter().nth(round % expected.len()).unwrap().clone();
            h.delete(&format!("/w/{victim}")).unwrap();
            expected.remove(&victim);
        }
    }
    h.assert_children("/w", expected.clone());
    let wide = h.tree.resolve("/w").unwrap();
    assert!(matches!(
        h.tree.children(wide),
        crate::store::Children::Chunked(_)
    ));
    assert_eq!(h.stat("/w").num_children as usize, expected.len());
    h.tree.set_applied(7, TERM);
    let mut bytes = Vec::new();
    snapshot::encode(&mut h.tree, &mut bytes);
    let loaded = snapshot::decode(&bytes).unwrap();
    assert_eq!(loaded.digest(), h.tree.digest());
    assert_eq!(
        loaded.node("/w").unwrap().children,
        expected.iter().cloned().collect::<Vec<_>>()
    );
    crate::fuzzing::check_invariants(&loaded);
    // Deleted down to nothing, through the bound again.
    let all: Vec<String> = expected.iter().cloned().collect();
    for (i, victim) in all.iter().enumerate() {
        h.delete(&format!("/w/{victim}")).unwrap();
        expected.remove(victim);
        if i % 2000 == 0 {
            h.assert_children("/w", expected.clone());
        }
    }
    h.assert_children("/w", expected);
    h.delete("/w").unwrap();
}

/// Lists `path` for a reply (both forms) and checks the bytes against the
/// plain read: a kept child list must never be stale.
fn list_for_reply(h: &Harness, path: &str) {
    list_tree_for_reply(&h.tree, path);
}

fn list_tree_for_reply(tree: &DataTree, path: &str) {
    let requests = [
        Request::GetChildren(keel_jute::GetChildrenRequest {
            path: path.into(),
            watch: false,
        }),
        Request::GetChildren2(keel_jute::GetChildren2Request {
            path: path.into(),
            watch: true,
        }),
    ];
    for request in requests {
        let plain = tree.read(&request, SESSION, &[]).unwrap();
        crate::fuzzing::check_read_for_reply(tree, &request, SESSION, &[], &plain);
    }
}

/// Every way a parent's children change drops its kept list: creates,
/// deletes, a multi rolled back, ephemerals going with their session, the
/// parent deleted and its slot reused, a list crossing into chunks and
/// back. A change to a child's data keeps it; a clone starts without; a
/// list over the entry bound is not kept, and the count bound holds.
#[test]
fn a_kept_child_list_follows_every_change_of_the_children() {
    use crate::store::{
        CHILDREN_FLAT_MAX, CHILD_LIST_CACHE_BYTES_MAX, CHILD_LIST_CACHE_ENTRY_BYTES_MAX,
        CHILD_LIST_CACHE_LISTS_MAX,
    };
    let mut h = Harness::new();
    h.create("/p", 0).unwrap();
    for i in 0..5 {
        h.create(&format!("/p/c{i}"), 0).unwrap();
    }
    let parent = h.tree.resolve("/p").unwrap();
    assert!(h.tree.arena.kept_list(parent).is_none());
    list_for_reply(&h, "/p");
    let kept = h
        .tree
        .arena
        .kept_list(parent)
        .expect("a listed parent is kept");
    assert_eq!(h.tree.arena.kept_list_bytes(), kept.len());
    let copy = h.tree.clone();
    assert_eq!(copy.arena.kept_list_bytes(), 0, "a clone starts empty");
    list_tree_for_reply(&copy, "/p");
    assert_eq!(copy.arena.kept_list_bytes(), kept.len());

    h.request(Request::SetData(SetDataRequest {
        path: "/p/c1".into(),
        data: Some(b"new".to_vec()),
        version: -1,
    }))
    .result
    .unwrap();
    assert!(
        h.tree.arena.kept_list(parent).is_some(),
        "data is not the list"
    );

    h.create("/p/a", 0).unwrap();
    assert!(h.tree.arena.kept_list(parent).is_none());
    list_for_reply(&h, "/p");
    h.delete("/p/c3").unwrap();
    list_for_reply(&h, "/p");

    let failing = vec![
        MultiOp::Create(create_request("/p/m1", 0)),
        MultiOp::Delete(DeleteRequest {
            path: "/p/c0".into(),
            version: -1,
        }),
        MultiOp::Check(CheckVersionRequest {
            path: "/p".into(),
            version: 12_345,
        }),
    ];
    assert!(h.request(Request::Multi(failing)).result.is_ok());
    assert!(h.tree.stat("/p/m1").is_none());
    list_for_reply(&h, "/p");

    const OTHER: i64 = 0x200;
    h.txn(OTHER, TxnOp::CreateSession { timeout_ms: 4000 });
    h.request_as(OTHER, vec![], Request::Create(create_request("/p/eph", 1)))
        .result
        .unwrap();
    list_for_reply(&h, "/p");
    h.txn(OTHER, TxnOp::CloseSession);
    assert!(h.tree.stat("/p/eph").is_none());
    list_for_reply(&h, "/p");

    for name in ["a", "c0", "c1", "c2", "c4"] {
        h.delete(&format!("/p/{name}")).unwrap();
        list_for_reply(&h, "/p");
    }
    h.delete("/p").unwrap();
    // The freed slots are reused by new nodes: none may show a dead list.
    h.create("/q", 0).unwrap();
    for i in 0..3 {
        h.create(&format!("/q/d{i}"), 0).unwrap();
    }
    list_for_reply(&h, "/q");
    list_for_reply(&h, "/");

    h.create("/wide", 0).unwrap();
    for i in 0..=CHILDREN_FLAT_MAX {
        h.create(&format!("/wide/w{i:05}"), 0).unwrap();
        if i % 1000 == 0 || i + 1 >= CHILDREN_FLAT_MAX {
            list_for_reply(&h, "/wide");
        }
    }
    for i in 0..=CHILDREN_FLAT_MAX / 2 + 1 {
        h.delete(&format!("/wide/w{i:05}")).unwrap();
        if i % 1000 == 0 || i + 2 >= CHILDREN_FLAT_MAX / 2 {
            list_for_reply(&h, "/wide");
        }
    }

    // A list longer than CHILD_LIST_CACHE_ENTRY_BYTES_MAX is encoded on
    // every read, never kept.
    h.create("/long", 0).unwrap();
    let name_bytes = 600;
    let count = CHILD_LIST_CACHE_ENTRY_BYTES_MAX / (4 + name_bytes) + 1;
    for i in 0..count {
        h.create(&format!("/long/{i:0name_bytes$}"), 0).unwrap();
    }
    list_for_reply(&h, "/long");
    let long = h.tree.resolve("/long").unwrap();
    assert!(h.tree.arena.kept_list(long).is_none());
    assert!(h.tree.arena.kept_list_bytes() <= CHILD_LIST_CACHE_BYTES_MAX);

    // More listed parents than are kept: the lists start over, bounded.
    for i in 0..=CHILD_LIST_CACHE_LISTS_MAX {
        let parent = format!("/many{i}");
        h.create(&parent, 0).unwrap();
        h.create(&format!("{parent}/x"), 0).unwrap();
        h.create(&format!("{parent}/y"), 0).unwrap();
        list_for_reply(&h, &parent);
    }
    list_for_reply(&h, "/many0");
    list_for_reply(&h, "/q");
    crate::fuzzing::check_invariants(&h.tree);
}
