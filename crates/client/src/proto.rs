//! The single place where this crate names items of `keel-jute`, so that a
//! change in the codec's module layout touches only this file.

pub use keel_jute::frame::{check_frame, write_frame};
pub use keel_jute::message::{MultiOp, MultiResult, Request, Response};
pub use keel_jute::{opcode, perms, xid};
pub use keel_jute::{
    Acl, AddWatchMode, AuthPacket, ClientInfo, ConnectRequest, ConnectResponse, CreateMode,
    ErrorCode, EventType, Id, JuteError, KeeperState, Reader, Record, ReplyHeader, RequestHeader,
    Stat, WatcherEvent, WatcherType,
};
pub use keel_jute::{
    AddWatchRequest, CreateRequest, CreateTtlRequest, DeleteRequest, ExistsRequest, GetAclRequest,
    GetAllChildrenNumberRequest, GetChildren2Request, GetChildrenRequest, GetDataRequest,
    GetEphemeralsRequest, RemoveWatchesRequest, SetAclRequest, SetDataRequest, SyncRequest,
};
