//! What simulated clients ask: ZooKeeper operations over a small key space
//! so that they collide (three top-level groups, a few children each,
//! sequential and ephemeral creates, multi across groups), and the
//! translation between the checker's `Call`/`Ret` and the jute requests
//! and responses the production code speaks.

use keel_jute::Record;
use keel_jute::{
    perms, Acl, CheckVersionRequest, CreateRequest, DeleteRequest, ErrorCode, Id, MultiOp,
    MultiResult, Request, Response, SetDataRequest,
};
use keel_linearize::{Call, Ret};

use crate::rng::Rng;

/// Top-level groups: the checker's independent partitions.
pub const GROUPS: [&str; 3] = ["/g0", "/g1", "/g2"];
const CHILDREN: [&str; 3] = ["a", "b", "c"];
/// Prefix of sequential creates inside a group.
const SEQUENTIAL_PREFIX: &str = "s-";

/// One step of a client: a write (or close), a read made linearizable by a
/// sync before it, or a plain local read (checked for session order only).
#[derive(Debug, Clone)]
pub enum Step {
    Write(Call),
    SyncRead {
        call: Call,
        watch: bool,
    },
    LocalRead {
        call: Call,
        watch: bool,
    },
    /// `addWatch`: a persistent (or persistent-recursive) watch on `path`.
    AddWatch {
        path: String,
        recursive: bool,
    },
    /// A request under `ACL_ROOT`, whose nodes only `ACL_USER` may use:
    /// checked against the client's identity, not recorded in the history.
    Acl(AclCall),
    /// A write under `REAP_ROOT` (containers, TTL nodes, their children):
    /// not recorded in the history; the reaper's deletions there are
    /// checked as they apply and after the settle (`machine.rs`, world.rs).
    Reap(ReapCall),
}

/// The subtree of container and TTL nodes, which the leader's reaper
/// deletes (outside the linearizability checker's groups: its model
/// knows no deletions that no client asked for).
pub const REAP_ROOT: &str = "/reap";
/// Containers (`/reap/c0`..) and TTL nodes (`/reap/t0`..) per run.
const REAPED_PER_KIND: u64 = 3;
/// Children a container or TTL node may have (`.../k0`, `.../k1`).
const REAP_CHILDREN: u64 = 2;
/// TTLs the clients give (ms): short, so that nodes expire within a run.
pub const REAP_TTL_MIN_MS: u64 = 300;
pub const REAP_TTL_MAX_MS: u64 = 1_500;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReapCall {
    /// `REAP_ROOT` itself, a persistent node.
    CreateRoot,
    CreateContainer {
        path: String,
    },
    CreateTtl {
        path: String,
        ttl_ms: i64,
    },
    /// Refreshes a TTL node's mtime (or changes a container's data).
    SetData {
        path: String,
    },
    CreateChild {
        path: String,
        ephemeral: bool,
    },
    /// A child, or (rarely) a container or TTL node, deleted by a client.
    Delete {
        path: String,
    },
}

fn some_reaped(rng: &mut Rng, containers_per_million: u64) -> String {
    let kind = if rng.chance(containers_per_million) {
        'c'
    } else {
        't'
    };
    format!("{REAP_ROOT}/{kind}{}", rng.below(REAPED_PER_KIND))
}

fn some_reap_child(rng: &mut Rng) -> String {
    let parent = some_reaped(rng, 800_000);
    format!("{parent}/k{}", rng.below(REAP_CHILDREN))
}

fn some_reap_call(rng: &mut Rng) -> ReapCall {
    match rng.below(100) {
        0..=4 => ReapCall::CreateRoot,
        5..=24 => ReapCall::CreateContainer {
            path: format!("{REAP_ROOT}/c{}", rng.below(REAPED_PER_KIND)),
        },
        25..=44 => ReapCall::CreateTtl {
            path: format!("{REAP_ROOT}/t{}", rng.below(REAPED_PER_KIND)),
            ttl_ms: rng.between(REAP_TTL_MIN_MS, REAP_TTL_MAX_MS) as i64,
        },
        45..=54 => ReapCall::SetData {
            path: some_reaped(rng, 200_000),
        },
        55..=79 => ReapCall::CreateChild {
            path: some_reap_child(rng),
            ephemeral: rng.chance(300_000),
        },
        80..=94 => ReapCall::Delete {
            path: some_reap_child(rng),
        },
        _ => ReapCall::Delete {
            path: some_reaped(rng, 500_000),
        },
    }
}

/// The jute request of a reap call; `data` is unique per write.
pub fn reap_request(call: &ReapCall, data: &[u8]) -> Request {
    let create = |path: &str, flags: i32| CreateRequest {
        path: path.to_string(),
        data: Some(data.to_vec()),
        acl: open_acl(),
        flags,
    };
    match call {
        ReapCall::CreateRoot => Request::Create(create(REAP_ROOT, 0)),
        // CreateMode CONTAINER is 4, PERSISTENT_WITH_TTL 5.
        ReapCall::CreateContainer { path } => Request::CreateContainer(create(path, 4)),
        ReapCall::CreateTtl { path, ttl_ms } => {
            let request = create(path, 5);
            Request::CreateTtl(keel_jute::CreateTtlRequest {
                path: request.path,
                data: request.data,
                acl: request.acl,
                flags: request.flags,
                ttl: *ttl_ms,
            })
        }
        ReapCall::SetData { path } => Request::SetData(SetDataRequest {
            path: path.clone(),
            data: Some(data.to_vec()),
            version: -1,
        }),
        ReapCall::CreateChild { path, ephemeral } => {
            Request::Create(create(path, i32::from(*ephemeral)))
        }
        ReapCall::Delete { path } => Request::Delete(DeleteRequest {
            path: path.clone(),
            version: -1,
        }),
    }
}

/// The subtree of ACL checks (outside the linearizability checker's groups).
pub const ACL_ROOT: &str = "/acl";
/// `addauth digest` credentials of the clients that authenticate.
pub const ACL_USER: &str = "alice:secret";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AclCall {
    Create { path: String },
    SetData { path: String },
    GetData { path: String },
}

fn some_acl_call(rng: &mut Rng) -> AclCall {
    let path = if rng.chance(250_000) {
        ACL_ROOT.to_string()
    } else {
        format!("{ACL_ROOT}/x{}", rng.below(3))
    };
    match rng.below(3) {
        0 => AclCall::Create { path },
        1 => AclCall::SetData { path },
        _ => AclCall::GetData { path },
    }
}

/// The body of `addauth digest ACL_USER` (an AUTH request).
pub fn acl_user_auth_packet() -> Vec<u8> {
    keel_jute::AuthPacket {
        auth_type: 0,
        scheme: "digest".into(),
        auth: ACL_USER.as_bytes().to_vec(),
    }
    .to_bytes()
}

/// The digest identity `ACL_USER` authenticates as.
pub fn acl_user_id() -> Id {
    let ids = keel_tree::acl::authenticate("digest", ACL_USER.as_bytes(), None)
        .expect("digest credentials authenticate");
    ids.into_iter().next().expect("one id")
}

/// The jute request of an ACL call: nodes are created readable and
/// writable by `ACL_USER` only.
pub fn acl_request(call: &AclCall, data: &[u8]) -> Request {
    match call {
        AclCall::Create { path } => Request::Create(CreateRequest {
            path: path.clone(),
            data: Some(data.to_vec()),
            acl: vec![Acl {
                perms: perms::ALL,
                id: acl_user_id(),
            }],
            flags: 0,
        }),
        AclCall::SetData { path } => Request::SetData(SetDataRequest {
            path: path.clone(),
            data: Some(data.to_vec()),
            version: -1,
        }),
        AclCall::GetData { path } => Request::GetData(keel_jute::GetDataRequest {
            path: path.clone(),
            watch: false,
        }),
    }
}

pub fn paths() -> Vec<String> {
    let mut paths = Vec::new();
    for group in GROUPS {
        paths.push(group.to_string());
        for child in CHILDREN {
            paths.push(format!("{group}/{child}"));
        }
    }
    paths
}

fn some_path(rng: &mut Rng) -> String {
    let group = rng.pick(&GROUPS);
    match rng.below(4) {
        0 => group.to_string(),
        _ => format!("{group}/{}", rng.pick(&CHILDREN)),
    }
}

fn some_version(rng: &mut Rng) -> i32 {
    if rng.chance(600_000) {
        -1
    } else {
        rng.below(3) as i32
    }
}

fn some_write(rng: &mut Rng, data: Vec<u8>, in_multi: bool) -> Call {
    match rng.below(if in_multi { 4 } else { 3 }) {
        0 => {
            let sequential = rng.chance(150_000);
            let path = if sequential {
                format!("{}/{SEQUENTIAL_PREFIX}", rng.pick(&GROUPS))
            } else {
                some_path(rng)
            };
            Call::Create {
                path,
                data,
                ephemeral: rng.chance(250_000),
                sequential,
            }
        }
        1 => Call::SetData {
            path: some_path(rng),
            data,
            version: some_version(rng),
        },
        2 => Call::Delete {
            path: some_path(rng),
            version: some_version(rng),
        },
        _ => Call::Check {
            path: some_path(rng),
            version: some_version(rng),
        },
    }
}

fn some_read(rng: &mut Rng) -> Call {
    match rng.below(3) {
        0 => Call::GetData {
            path: some_path(rng),
        },
        1 => Call::Exists {
            path: some_path(rng),
        },
        _ => Call::GetChildren {
            path: rng.pick(&GROUPS).to_string(),
        },
    }
}

/// The next step of a client; `data` is unique per write.
pub fn next_step(rng: &mut Rng, data: Vec<u8>) -> Step {
    match rng.below(100) {
        0..=1 => Step::Write(Call::CloseSession),
        2..=41 => Step::Write(some_write(rng, data, false)),
        42..=51 => {
            let count = rng.between(2, 3);
            let ops = (0..count)
                .map(|i| {
                    let mut data = data.clone();
                    data.push(b'0' + i as u8);
                    some_write(rng, data, true)
                })
                .collect();
            Step::Write(Call::Multi { ops })
        }
        52..=79 => Step::SyncRead {
            call: some_read(rng),
            watch: rng.chance(500_000),
        },
        83..=86 => Step::Acl(some_acl_call(rng)),
        87..=91 => Step::Reap(some_reap_call(rng)),
        80..=82 => Step::AddWatch {
            path: some_path(rng),
            recursive: rng.chance(500_000),
        },
        _ => Step::LocalRead {
            call: some_read(rng),
            watch: rng.chance(500_000),
        },
    }
}

/// The addWatch request (mode 0 persistent, 1 persistent-recursive).
pub fn add_watch_request(path: &str, recursive: bool) -> Request {
    Request::AddWatch(keel_jute::AddWatchRequest {
        path: path.to_string(),
        mode: i32::from(recursive),
    })
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

fn create_request(path: &str, data: &[u8], ephemeral: bool, sequential: bool) -> CreateRequest {
    CreateRequest {
        path: path.to_string(),
        data: Some(data.to_vec()),
        acl: open_acl(),
        flags: i32::from(ephemeral) | (i32::from(sequential) << 1),
    }
}

fn multi_op(call: &Call) -> MultiOp {
    match call {
        Call::Create {
            path,
            data,
            ephemeral,
            sequential,
        } => MultiOp::Create(create_request(path, data, *ephemeral, *sequential)),
        Call::Delete { path, version } => MultiOp::Delete(DeleteRequest {
            path: path.clone(),
            version: *version,
        }),
        Call::SetData {
            path,
            data,
            version,
        } => MultiOp::SetData(SetDataRequest {
            path: path.clone(),
            data: Some(data.clone()),
            version: *version,
        }),
        Call::Check { path, version } => MultiOp::Check(CheckVersionRequest {
            path: path.clone(),
            version: *version,
        }),
        other => panic!("{other:?} is not a multi op"),
    }
}

/// The jute request of a write `Call` (None for CloseSession, which is a
/// transaction of its own).
pub fn write_request(call: &Call) -> Option<Request> {
    let request = match call {
        Call::Create {
            path,
            data,
            ephemeral,
            sequential,
        } => Request::Create(create_request(path, data, *ephemeral, *sequential)),
        Call::Delete { .. } | Call::SetData { .. } => match multi_op(call) {
            MultiOp::Delete(r) => Request::Delete(r),
            MultiOp::SetData(r) => Request::SetData(r),
            _ => unreachable!("mapped above"),
        },
        Call::Multi { ops } => Request::Multi(ops.iter().map(multi_op).collect()),
        Call::CloseSession => return None,
        other => panic!("{other:?} is not a write"),
    };
    Some(request)
}

pub fn read_request(call: &Call, watch: bool) -> Request {
    match call {
        Call::GetData { path } => Request::GetData(keel_jute::GetDataRequest {
            path: path.clone(),
            watch,
        }),
        Call::Exists { path } => Request::Exists(keel_jute::ExistsRequest {
            path: path.clone(),
            watch,
        }),
        Call::GetChildren { path } => Request::GetChildren(keel_jute::GetChildrenRequest {
            path: path.clone(),
            watch,
        }),
        other => panic!("{other:?} is not a read"),
    }
}

/// What the checker sees of a reply.
pub fn ret_of(call: &Call, result: &Result<Response, ErrorCode>) -> Ret {
    let response = match result {
        Ok(response) => response,
        Err(ErrorCode::NoNode) if matches!(call, Call::Exists { .. }) => return Ret::Exists(None),
        Err(code) => return Ret::Error(code.code()),
    };
    match (call, response) {
        (Call::Create { .. }, Response::Create(path)) => Ret::Created { path: path.clone() },
        (Call::Delete { .. } | Call::CloseSession, Response::Empty) => Ret::Done,
        (Call::SetData { .. }, Response::Stat(stat)) => Ret::Set {
            version: stat.version,
        },
        (Call::GetData { .. }, Response::GetData(data, stat)) => Ret::Data {
            data: data.clone().unwrap_or_default(),
            version: stat.version,
        },
        (Call::Exists { .. }, Response::Stat(stat)) => Ret::Exists(Some(stat.version)),
        (Call::GetChildren { .. }, Response::GetChildren(names)) => {
            let mut names = names.clone();
            names.sort();
            Ret::Children(names)
        }
        (Call::Multi { .. }, Response::Multi(results)) => multi_ret(results),
        // The server's own encoding of a listing (`DataTree::read_for_reply`):
        // checked as a client sees it, decoded from the bytes it would send.
        (Call::GetChildren { .. }, Response::Encoded(body)) => {
            let decoded = Response::decode(keel_jute::opcode::GET_CHILDREN, body)
                .expect("the server encodes a getChildren reply a client decodes");
            ret_of(call, &Ok(decoded))
        }
        (call, response) => panic!("reply {response:?} does not fit {call:?}"),
    }
}

fn multi_ret(results: &[MultiResult]) -> Ret {
    let failed = results.iter().find_map(|r| match r {
        MultiResult::Error(code)
            if *code != 0 && *code != ErrorCode::RuntimeInconsistency.code() =>
        {
            Some(*code)
        }
        _ => None,
    });
    if let Some(code) = failed {
        return Ret::Error(code);
    }
    Ret::Multi(
        results
            .iter()
            .map(|r| match r {
                MultiResult::Create(path) | MultiResult::Create2(path, _) => {
                    Ret::Created { path: path.clone() }
                }
                MultiResult::SetData(stat) => Ret::Set {
                    version: stat.version,
                },
                MultiResult::Delete | MultiResult::Check => Ret::Done,
                other => panic!("unexpected multi result {other:?}"),
            })
            .collect(),
    )
}
