//! Non-default sample values shared by the unit tests, chosen so that every
//! field is distinguishable (a swapped or dropped field changes the bytes).

use crate::clickhouse::{FilteredListRequest, ListRequestType, RemoveRecursiveRequest};
use crate::consts::{opcode, perms, CreateMode};
use crate::message::{MultiOp, MultiResult, Request, Response};
use crate::records::*;

pub fn id() -> Id {
    Id {
        scheme: "digest".into(),
        id: "user:hash=".into(),
    }
}

pub fn acl() -> Vec<Acl> {
    vec![
        Acl {
            perms: perms::ALL,
            id: id(),
        },
        Acl {
            perms: perms::READ,
            id: Id {
                scheme: "world".into(),
                id: "anyone".into(),
            },
        },
    ]
}

pub fn stat() -> Stat {
    Stat {
        czxid: 0x0102_0304_0506_0708,
        mzxid: 2,
        ctime: 1_700_000_000_000,
        mtime: 1_700_000_000_001,
        version: 3,
        cversion: -4,
        aversion: 5,
        ephemeral_owner: 0x7f00_0000_0000_0001,
        data_length: 6,
        num_children: 7,
        pzxid: 8,
    }
}

pub fn create(path: &str, flags: i32) -> CreateRequest {
    CreateRequest {
        path: path.into(),
        data: Some(b"data".to_vec()),
        acl: acl(),
        flags,
    }
}

pub fn create_ttl() -> CreateTtlRequest {
    CreateTtlRequest {
        path: "/ttl".into(),
        data: None,
        acl: acl(),
        flags: CreateMode::PersistentWithTtl.flags(),
        ttl: 60_000,
    }
}

pub fn write_ops() -> Vec<MultiOp> {
    vec![
        MultiOp::Create(create("/m/a", 0)),
        MultiOp::Create2(create("/m/b", 2)),
        MultiOp::CreateContainer(create("/m/c", 4)),
        MultiOp::CreateTtl(create_ttl()),
        MultiOp::Delete(DeleteRequest {
            path: "/m/d".into(),
            version: -1,
        }),
        MultiOp::SetData(SetDataRequest {
            path: "/m/e".into(),
            data: Some(Vec::new()),
            version: 9,
        }),
        MultiOp::Check(CheckVersionRequest {
            path: "/m".into(),
            version: 1,
        }),
    ]
}

pub fn read_ops() -> Vec<MultiOp> {
    vec![
        MultiOp::GetChildren(GetChildrenRequest {
            path: "/r".into(),
            watch: false,
        }),
        MultiOp::GetData(GetDataRequest {
            path: "/r/x".into(),
            watch: true,
        }),
    ]
}

/// ClickHouse Keeper's write ops, as a multi carries them.
pub fn clickhouse_write_ops() -> Vec<MultiOp> {
    vec![
        MultiOp::CheckNotExists(CheckVersionRequest {
            path: "/ch/a".into(),
            version: -1,
        }),
        MultiOp::CreateIfNotExists(create("/ch/b", 1)),
        MultiOp::RemoveRecursive(RemoveRecursiveRequest {
            path: "/ch/c".into(),
            remove_nodes_limit: 100,
        }),
    ]
}

/// ClickHouse Keeper's read ops, as a multiRead carries them.
pub fn clickhouse_read_ops() -> Vec<MultiOp> {
    vec![
        MultiOp::Exists(ExistsRequest {
            path: "/ch/d".into(),
            watch: true,
        }),
        MultiOp::GetChildren2(GetChildren2Request {
            path: "/ch/e".into(),
            watch: false,
        }),
        MultiOp::FilteredList(FilteredListRequest {
            path: "/ch/f".into(),
            watch: true,
            list_type: ListRequestType::PersistentOnly,
        }),
        MultiOp::GetData(GetDataRequest {
            path: "/ch/g".into(),
            watch: false,
        }),
    ]
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// One sample of every `Request` variant.
pub fn requests() -> Vec<Request> {
    vec![
        Request::Create(create("/a", 0)),
        Request::Create2(create("/b", 3)),
        Request::CreateContainer(create("/c", 4)),
        Request::CreateTtl(create_ttl()),
        Request::Delete(DeleteRequest {
            path: "/d".into(),
            version: 7,
        }),
        Request::DeleteContainer("/container/ü".into()),
        Request::Exists(ExistsRequest {
            path: "/e".into(),
            watch: true,
        }),
        Request::GetData(GetDataRequest {
            path: "/f".into(),
            watch: false,
        }),
        Request::SetData(SetDataRequest {
            path: "/g".into(),
            data: None,
            version: -1,
        }),
        Request::GetAcl(GetAclRequest { path: "/h".into() }),
        Request::SetAcl(SetAclRequest {
            path: "/i".into(),
            acl: acl(),
            version: 2,
        }),
        Request::GetChildren(GetChildrenRequest {
            path: "/j".into(),
            watch: true,
        }),
        Request::GetChildren2(GetChildren2Request {
            path: "/k".into(),
            watch: true,
        }),
        Request::GetAllChildrenNumber(GetAllChildrenNumberRequest { path: "/l".into() }),
        Request::GetEphemerals(GetEphemeralsRequest {
            prefix_path: "/m".into(),
        }),
        Request::Sync(SyncRequest { path: "/n".into() }),
        Request::Check(CheckVersionRequest {
            path: "/o".into(),
            version: 4,
        }),
        Request::Multi(write_ops()),
        Request::Multi(Vec::new()),
        Request::MultiRead(read_ops()),
        Request::Ping,
        Request::Auth(AuthPacket {
            auth_type: 0,
            scheme: "digest".into(),
            auth: b"user:pass".to_vec(),
        }),
        Request::SetWatches(SetWatches {
            relative_zxid: 42,
            data_watches: strings(&["/a", "/b"]),
            exist_watches: strings(&["/c"]),
            child_watches: Vec::new(),
        }),
        Request::SetWatches2(SetWatches2 {
            relative_zxid: 43,
            data_watches: strings(&["/a"]),
            exist_watches: Vec::new(),
            child_watches: strings(&["/b"]),
            persistent_watches: strings(&["/p"]),
            persistent_recursive_watches: strings(&["/q", "/r"]),
        }),
        Request::AddWatch(AddWatchRequest {
            path: "/p".into(),
            mode: 1,
        }),
        Request::RemoveWatches(RemoveWatchesRequest {
            path: "/q".into(),
            watcher_type: 3,
        }),
        Request::CheckWatches(CheckWatchesRequest {
            path: "/r".into(),
            watcher_type: 2,
        }),
        Request::WhoAmI,
        Request::CloseSession,
        Request::Sasl(GetSaslRequest {
            token: vec![1, 2, 3],
        }),
        Request::Reconfig(ReconfigRequest {
            joining_servers: "server.4=h:1:2;3".into(),
            leaving_servers: "2".into(),
            new_members: String::new(),
            cur_config_id: -1,
        }),
        Request::FilteredList(FilteredListRequest {
            path: "/s".into(),
            watch: true,
            list_type: ListRequestType::EphemeralOnly,
        }),
        Request::CheckNotExists(CheckVersionRequest {
            path: "/t".into(),
            version: 3,
        }),
        Request::CreateIfNotExists(create("/u", 0)),
        Request::RemoveRecursive(RemoveRecursiveRequest {
            path: "/v".into(),
            remove_nodes_limit: 1000,
        }),
        Request::Multi(clickhouse_write_ops()),
        Request::MultiRead(clickhouse_read_ops()),
    ]
}

/// One sample of every `MultiResult` variant.
pub fn multi_results() -> Vec<MultiResult> {
    vec![
        MultiResult::Create("/m/a".into()),
        MultiResult::Create2("/m/b0000000001".into(), stat()),
        MultiResult::Delete,
        MultiResult::SetData(stat()),
        MultiResult::Check,
        MultiResult::GetData(None, stat()),
        MultiResult::GetData(Some(b"x".to_vec()), stat()),
        MultiResult::GetChildren(strings(&["a", "b"])),
        MultiResult::Error(0),
        MultiResult::Error(-101),
        MultiResult::Error(-2),
        MultiResult::Exists(stat()),
        MultiResult::GetChildren2(strings(&["c"]), stat()),
        MultiResult::CheckNotExists,
        MultiResult::CreateIfNotExists("/ch/b".into()),
        MultiResult::RemoveRecursive,
        MultiResult::Failed { op: 4, err: -101 },
        MultiResult::Failed { op: 12, err: -102 },
    ]
}

/// One sample of every `Response` variant, with the op code that selects it.
pub fn responses() -> Vec<(i32, Response)> {
    vec![
        (opcode::DELETE, Response::Empty),
        (opcode::CREATE, Response::Create("/a".into())),
        (opcode::CREATE2, Response::Create2("/b".into(), stat())),
        (
            opcode::CREATE_CONTAINER,
            Response::Create2("/c".into(), stat()),
        ),
        (opcode::CREATE_TTL, Response::Create2("/d".into(), stat())),
        (opcode::EXISTS, Response::Stat(stat())),
        (opcode::SET_DATA, Response::Stat(stat())),
        (opcode::SET_ACL, Response::Stat(stat())),
        (opcode::CHECK, Response::Stat(stat())),
        (opcode::CHECK, Response::Empty),
        (
            opcode::GET_DATA,
            Response::GetData(Some(b"v".to_vec()), stat()),
        ),
        (opcode::GET_DATA, Response::GetData(None, stat())),
        (
            opcode::RECONFIG,
            Response::GetData(Some(b"server.1=x".to_vec()), stat()),
        ),
        (opcode::GET_ACL, Response::GetAcl(acl(), stat())),
        (
            opcode::GET_CHILDREN,
            Response::GetChildren(strings(&["x", "y"])),
        ),
        (
            opcode::GET_CHILDREN2,
            Response::GetChildren2(strings(&["z"]), stat()),
        ),
        (
            opcode::GET_ALL_CHILDREN_NUMBER,
            Response::GetAllChildrenNumber(12),
        ),
        (
            opcode::GET_EPHEMERALS,
            Response::GetEphemerals(strings(&["/e1", "/e2"])),
        ),
        (opcode::SYNC, Response::Sync("/s".into())),
        (opcode::MULTI, Response::Multi(multi_results())),
        (opcode::MULTI_READ, Response::Multi(Vec::new())),
        (
            opcode::WHO_AM_I,
            Response::WhoAmI(vec![
                ClientInfo {
                    auth_scheme: "ip".into(),
                    user: "127.0.0.1".into(),
                },
                ClientInfo {
                    auth_scheme: "digest".into(),
                    user: "user".into(),
                },
            ]),
        ),
        (opcode::ADD_WATCH, Response::ErrorResponse(0)),
        (opcode::SASL, Response::Sasl(vec![9, 8, 7])),
        (
            opcode::FILTERED_LIST,
            Response::GetChildren2(strings(&["p"]), stat()),
        ),
        (opcode::CHECK_NOT_EXISTS, Response::Empty),
        (opcode::CREATE_IF_NOT_EXISTS, Response::Create("/q".into())),
        (opcode::REMOVE_RECURSIVE, Response::Empty),
    ]
}
