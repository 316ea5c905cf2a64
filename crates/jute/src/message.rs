//! Typed request and response bodies, keyed by op code.
//!
//! A packet after the handshake is `RequestHeader` + body (client to server)
//! or `ReplyHeader` + body (server to client). The header carries the op code
//! only in requests, so replies are decoded with the op code of the request
//! they answer. These types cover the *body*; headers are plain records.

use crate::clickhouse::{FilteredListRequest, RemoveRecursiveRequest};
use crate::codec::{
    write_buffer, write_i32, write_string, write_string_vec, write_vec, Reader, Record,
};
use crate::consts::opcode;
use crate::error::{JuteError, Result};
use crate::records::{
    Acl, AddWatchRequest, AuthPacket, CheckVersionRequest, CheckWatchesRequest, ClientInfo,
    Create2Response, CreateRequest, CreateResponse, CreateTtlRequest, DeleteRequest, ErrorResponse,
    ExistsRequest, GetAclRequest, GetAclResponse, GetAllChildrenNumberRequest,
    GetAllChildrenNumberResponse, GetChildren2Request, GetChildren2Response, GetChildrenRequest,
    GetChildrenResponse, GetDataRequest, GetDataResponse, GetEphemeralsRequest,
    GetEphemeralsResponse, GetSaslRequest, MultiHeader, ReconfigRequest, RemoveWatchesRequest,
    SetAclRequest, SetDataRequest, SetSaslResponse, SetWatches, SetWatches2, Stat, SyncRequest,
    SyncResponse, WhoAmIResponse,
};

/// `MultiHeader.err` that ZooKeeper writes in front of every request op and
/// on the terminator; it carries no meaning there.
const MULTI_NO_ERROR: i32 = -1;

/// The header that ends the op list of a multi request or response.
const MULTI_TERMINATOR: MultiHeader = MultiHeader {
    op_type: -1,
    done: true,
    err: MULTI_NO_ERROR,
};

/// One operation inside a `multi` (transaction) or `multiRead` request.
///
/// The variant is the op code from the op's `MultiHeader`, preserved as sent.
/// (ZooKeeper's server re-derives container/TTL from the create flags; a
/// server built on this crate should look at `flags` the same way.)
/// Besides ZooKeeper's ops, a `multi` may carry ClickHouse Keeper's
/// checkNotExists, createIfNotExists and removeRecursive, and a `multiRead`
/// its exists, getChildren2 and filteredList.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiOp {
    /// `create` (op 1): the result carries only the path.
    Create(CreateRequest),
    /// `create2` (op 15): the result carries path and stat.
    Create2(CreateRequest),
    /// `createContainer` (op 19).
    CreateContainer(CreateRequest),
    /// `createTTL` (op 21).
    CreateTtl(CreateTtlRequest),
    /// `delete` (op 2).
    Delete(DeleteRequest),
    /// `setData` (op 5).
    SetData(SetDataRequest),
    /// `check` (op 13): assert a version without changing anything.
    Check(CheckVersionRequest),
    /// `getChildren` (op 8), only in `multiRead`.
    GetChildren(GetChildrenRequest),
    /// `getData` (op 4), only in `multiRead`.
    GetData(GetDataRequest),
    /// `exists` (op 3), only in `multiRead` (ClickHouse Keeper).
    Exists(ExistsRequest),
    /// `getChildren2` (op 12), only in `multiRead` (ClickHouse Keeper).
    GetChildren2(GetChildren2Request),
    /// `filteredList` (op 500), only in `multiRead` (ClickHouse Keeper).
    FilteredList(FilteredListRequest),
    /// `checkNotExists` (op 501, ClickHouse Keeper).
    CheckNotExists(CheckVersionRequest),
    /// `createIfNotExists` (op 502, ClickHouse Keeper).
    CreateIfNotExists(CreateRequest),
    /// `removeRecursive` (op 503, ClickHouse Keeper).
    RemoveRecursive(RemoveRecursiveRequest),
}

impl MultiOp {
    /// The op code written in this op's `MultiHeader`.
    pub fn op_code(&self) -> i32 {
        match self {
            Self::Create(_) => opcode::CREATE,
            Self::Create2(_) => opcode::CREATE2,
            Self::CreateContainer(_) => opcode::CREATE_CONTAINER,
            Self::CreateTtl(_) => opcode::CREATE_TTL,
            Self::Delete(_) => opcode::DELETE,
            Self::SetData(_) => opcode::SET_DATA,
            Self::Check(_) => opcode::CHECK,
            Self::GetChildren(_) => opcode::GET_CHILDREN,
            Self::GetData(_) => opcode::GET_DATA,
            Self::Exists(_) => opcode::EXISTS,
            Self::GetChildren2(_) => opcode::GET_CHILDREN2,
            Self::FilteredList(_) => opcode::FILTERED_LIST,
            Self::CheckNotExists(_) => opcode::CHECK_NOT_EXISTS,
            Self::CreateIfNotExists(_) => opcode::CREATE_IF_NOT_EXISTS,
            Self::RemoveRecursive(_) => opcode::REMOVE_RECURSIVE,
        }
    }

    /// The znode this op targets.
    pub fn path(&self) -> &str {
        match self {
            Self::Create(r) | Self::Create2(r) | Self::CreateContainer(r) => &r.path,
            Self::CreateTtl(r) => &r.path,
            Self::Delete(r) => &r.path,
            Self::SetData(r) => &r.path,
            Self::Check(r) => &r.path,
            Self::GetChildren(r) => &r.path,
            Self::GetData(r) => &r.path,
            Self::Exists(r) => &r.path,
            Self::GetChildren2(r) => &r.path,
            Self::FilteredList(r) => &r.path,
            Self::CheckNotExists(r) => &r.path,
            Self::CreateIfNotExists(r) => &r.path,
            Self::RemoveRecursive(r) => &r.path,
        }
    }

    /// Whether this is a read op (allowed only in `multiRead`). Checks are
    /// not: ZooKeeper and ClickHouse Keeper both count them as writes.
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Self::GetChildren(_)
                | Self::GetData(_)
                | Self::Exists(_)
                | Self::GetChildren2(_)
                | Self::FilteredList(_)
        )
    }

    fn write_body(&self, out: &mut Vec<u8>) {
        match self {
            Self::Create(r) | Self::Create2(r) | Self::CreateContainer(r) => r.write(out),
            Self::CreateTtl(r) => r.write(out),
            Self::Delete(r) => r.write(out),
            Self::SetData(r) => r.write(out),
            Self::Check(r) => r.write(out),
            Self::GetChildren(r) => r.write(out),
            Self::GetData(r) => r.write(out),
            Self::Exists(r) => r.write(out),
            Self::GetChildren2(r) => r.write(out),
            Self::FilteredList(r) => r.write(out),
            Self::CheckNotExists(r) => r.write(out),
            Self::CreateIfNotExists(r) => r.write(out),
            Self::RemoveRecursive(r) => r.write(out),
        }
    }

    /// Reads an op's body. The read ops only ClickHouse Keeper accepts
    /// (exists, getChildren2, filteredList) are known in a `multiRead`
    /// only: in a `multi` they stay unknown op codes, as in ZooKeeper.
    fn read_body(op_type: i32, multi_read: bool, r: &mut Reader<'_>) -> Result<Self> {
        Ok(match op_type {
            // The flags are carried as sent, whatever they are: ZooKeeper's
            // MultiOperationRecord reads them into Op.create, which takes
            // unknown flags for PERSISTENT's opcode and keeps them; the
            // op then fails at prep (BadArguments, an error txn), not here.
            opcode::CREATE => Self::Create(CreateRequest::read(r)?),
            opcode::CREATE2 => Self::Create2(CreateRequest::read(r)?),
            opcode::CREATE_CONTAINER => Self::CreateContainer(CreateRequest::read(r)?),
            opcode::CREATE_TTL => Self::CreateTtl(CreateTtlRequest::read(r)?),
            opcode::DELETE => Self::Delete(DeleteRequest::read(r)?),
            opcode::SET_DATA => Self::SetData(SetDataRequest::read(r)?),
            opcode::CHECK => Self::Check(CheckVersionRequest::read(r)?),
            opcode::GET_CHILDREN => Self::GetChildren(GetChildrenRequest::read(r)?),
            opcode::GET_DATA => Self::GetData(GetDataRequest::read(r)?),
            opcode::EXISTS if multi_read => Self::Exists(ExistsRequest::read(r)?),
            opcode::GET_CHILDREN2 if multi_read => {
                Self::GetChildren2(GetChildren2Request::read(r)?)
            }
            opcode::FILTERED_LIST if multi_read => {
                Self::FilteredList(FilteredListRequest::read(r)?)
            }
            opcode::CHECK_NOT_EXISTS => Self::CheckNotExists(CheckVersionRequest::read(r)?),
            // ClickHouse reads the flags as they are; a bad mode fails the op.
            opcode::CREATE_IF_NOT_EXISTS => Self::CreateIfNotExists(CreateRequest::read(r)?),
            opcode::REMOVE_RECURSIVE => Self::RemoveRecursive(RemoveRecursiveRequest::read(r)?),
            other => return Err(JuteError::UnknownOpCode(other)),
        })
    }
}

/// Writes `{MultiHeader, op}*` followed by the terminator.
fn write_multi_ops(out: &mut Vec<u8>, ops: &[MultiOp]) {
    for op in ops {
        let header = MultiHeader {
            op_type: op.op_code(),
            done: false,
            err: MULTI_NO_ERROR,
        };
        header.write(out);
        op.write_body(out);
    }
    MULTI_TERMINATOR.write(out);
}

/// Reads ops until the `done` header. Each op consumes at least one header,
/// so the loop is bounded by the input length. Like ZooKeeper, a request that
/// mixes read and write ops is rejected, and so is one holding an op it does
/// not know: that is a malformed request (ZooKeeper's MultiOperationRecord
/// fails to deserialize it: MarshallingError), not an unknown request.
fn read_multi_ops(r: &mut Reader<'_>, multi_read: bool) -> Result<Vec<MultiOp>> {
    let mut ops: Vec<MultiOp> = Vec::new();
    loop {
        let header = MultiHeader::read(r)?;
        if header.done {
            return Ok(ops);
        }
        let op =
            MultiOp::read_body(header.op_type, multi_read, r).map_err(|error| match error {
                JuteError::UnknownOpCode(code) => JuteError::UnknownOpInMulti(code),
                other => other,
            })?;
        if ops
            .first()
            .is_some_and(|first| first.is_read() != op.is_read())
        {
            return Err(JuteError::Malformed("multi mixes read and write ops"));
        }
        ops.push(op);
    }
}

/// A client request body, decoded according to `RequestHeader.type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `create` (1).
    Create(CreateRequest),
    /// `create2` (15).
    Create2(CreateRequest),
    /// `createContainer` (19).
    CreateContainer(CreateRequest),
    /// `createTTL` (21).
    CreateTtl(CreateTtlRequest),
    /// `delete` (2).
    Delete(DeleteRequest),
    /// `deleteContainer` (20). Not a Jute record: ZooKeeper's
    /// `ContainerManager` submits the raw UTF-8 path bytes as the whole
    /// body, with no length prefix, and `PrepRequestProcessor` decodes it
    /// that way. Clients never send it.
    DeleteContainer(String),
    /// `exists` (3).
    Exists(ExistsRequest),
    /// `getData` (4).
    GetData(GetDataRequest),
    /// `setData` (5).
    SetData(SetDataRequest),
    /// `getACL` (6).
    GetAcl(GetAclRequest),
    /// `setACL` (7).
    SetAcl(SetAclRequest),
    /// `getChildren` (8).
    GetChildren(GetChildrenRequest),
    /// `getChildren2` (12).
    GetChildren2(GetChildren2Request),
    /// `getAllChildrenNumber` (104).
    GetAllChildrenNumber(GetAllChildrenNumberRequest),
    /// `getEphemerals` (103).
    GetEphemerals(GetEphemeralsRequest),
    /// `sync` (9).
    Sync(SyncRequest),
    /// `check` (13) outside a multi.
    Check(CheckVersionRequest),
    /// `multi` (14): an atomic transaction.
    Multi(Vec<MultiOp>),
    /// `multiRead` (22): a batch of independent reads.
    MultiRead(Vec<MultiOp>),
    /// `ping` (11), xid -2, empty body.
    Ping,
    /// `auth` (100), xid -4.
    Auth(AuthPacket),
    /// `setWatches` (101), xid -8.
    SetWatches(SetWatches),
    /// `setWatches2` (105), xid -8.
    SetWatches2(SetWatches2),
    /// `addWatch` (106).
    AddWatch(AddWatchRequest),
    /// `removeWatches` (18).
    RemoveWatches(RemoveWatchesRequest),
    /// `checkWatches` (17).
    CheckWatches(CheckWatchesRequest),
    /// `whoAmI` (107), empty body.
    WhoAmI,
    /// `closeSession` (-11), empty body.
    CloseSession,
    /// `sasl` (102).
    Sasl(GetSaslRequest),
    /// `reconfig` (16).
    Reconfig(ReconfigRequest),
    /// `filteredList` (500, ClickHouse Keeper): getChildren2 of one kind of child.
    FilteredList(FilteredListRequest),
    /// `checkNotExists` (501, ClickHouse Keeper): a read outside a multi.
    CheckNotExists(CheckVersionRequest),
    /// `createIfNotExists` (502, ClickHouse Keeper).
    CreateIfNotExists(CreateRequest),
    /// `removeRecursive` (503, ClickHouse Keeper).
    RemoveRecursive(RemoveRecursiveRequest),
}

impl Request {
    /// Decodes a request body. Trailing bytes are ignored, as ZooKeeper does.
    pub fn decode(op_type: i32, body: &[u8]) -> Result<Request> {
        let r = &mut Reader::new(body);
        Ok(match op_type {
            opcode::CREATE => Self::Create(CreateRequest::read(r)?),
            opcode::CREATE2 => Self::Create2(CreateRequest::read(r)?),
            opcode::CREATE_CONTAINER => Self::CreateContainer(CreateRequest::read(r)?),
            opcode::CREATE_TTL => Self::CreateTtl(CreateTtlRequest::read(r)?),
            opcode::DELETE => Self::Delete(DeleteRequest::read(r)?),
            opcode::DELETE_CONTAINER => Self::DeleteContainer(decode_raw_path(body)?),
            opcode::EXISTS => Self::Exists(ExistsRequest::read(r)?),
            opcode::GET_DATA => Self::GetData(GetDataRequest::read(r)?),
            opcode::SET_DATA => Self::SetData(SetDataRequest::read(r)?),
            opcode::GET_ACL => Self::GetAcl(GetAclRequest::read(r)?),
            opcode::SET_ACL => Self::SetAcl(SetAclRequest::read(r)?),
            opcode::GET_CHILDREN => Self::GetChildren(GetChildrenRequest::read(r)?),
            opcode::GET_CHILDREN2 => Self::GetChildren2(GetChildren2Request::read(r)?),
            opcode::GET_ALL_CHILDREN_NUMBER => {
                Self::GetAllChildrenNumber(GetAllChildrenNumberRequest::read(r)?)
            }
            opcode::GET_EPHEMERALS => Self::GetEphemerals(GetEphemeralsRequest::read(r)?),
            opcode::SYNC => Self::Sync(SyncRequest::read(r)?),
            opcode::CHECK => Self::Check(CheckVersionRequest::read(r)?),
            opcode::MULTI => Self::Multi(read_multi_ops(r, false)?),
            opcode::MULTI_READ => Self::MultiRead(read_multi_ops(r, true)?),
            opcode::PING => Self::Ping,
            opcode::AUTH => Self::Auth(AuthPacket::read(r)?),
            opcode::SET_WATCHES => Self::SetWatches(SetWatches::read(r)?),
            opcode::SET_WATCHES2 => Self::SetWatches2(SetWatches2::read(r)?),
            opcode::ADD_WATCH => Self::AddWatch(AddWatchRequest::read(r)?),
            opcode::REMOVE_WATCHES => Self::RemoveWatches(RemoveWatchesRequest::read(r)?),
            opcode::CHECK_WATCHES => Self::CheckWatches(CheckWatchesRequest::read(r)?),
            opcode::WHO_AM_I => Self::WhoAmI,
            opcode::CLOSE_SESSION => Self::CloseSession,
            opcode::SASL => Self::Sasl(GetSaslRequest::read(r)?),
            opcode::RECONFIG => Self::Reconfig(ReconfigRequest::read(r)?),
            opcode::FILTERED_LIST => Self::FilteredList(FilteredListRequest::read(r)?),
            opcode::CHECK_NOT_EXISTS => Self::CheckNotExists(CheckVersionRequest::read(r)?),
            opcode::CREATE_IF_NOT_EXISTS => Self::CreateIfNotExists(CreateRequest::read(r)?),
            opcode::REMOVE_RECURSIVE => Self::RemoveRecursive(RemoveRecursiveRequest::read(r)?),
            other => return Err(JuteError::UnknownOpCode(other)),
        })
    }

    /// Appends the body (no header) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Create(r) | Self::Create2(r) | Self::CreateContainer(r) => r.write(out),
            Self::CreateTtl(r) => r.write(out),
            Self::Delete(r) => r.write(out),
            Self::DeleteContainer(path) => out.extend_from_slice(path.as_bytes()),
            Self::Exists(r) => r.write(out),
            Self::GetData(r) => r.write(out),
            Self::SetData(r) => r.write(out),
            Self::GetAcl(r) => r.write(out),
            Self::SetAcl(r) => r.write(out),
            Self::GetChildren(r) => r.write(out),
            Self::GetChildren2(r) => r.write(out),
            Self::GetAllChildrenNumber(r) => r.write(out),
            Self::GetEphemerals(r) => r.write(out),
            Self::Sync(r) => r.write(out),
            Self::Check(r) => r.write(out),
            Self::Multi(ops) | Self::MultiRead(ops) => write_multi_ops(out, ops),
            Self::Ping | Self::WhoAmI | Self::CloseSession => {}
            Self::Auth(r) => r.write(out),
            Self::SetWatches(r) => r.write(out),
            Self::SetWatches2(r) => r.write(out),
            Self::AddWatch(r) => r.write(out),
            Self::RemoveWatches(r) => r.write(out),
            Self::CheckWatches(r) => r.write(out),
            Self::Sasl(r) => r.write(out),
            Self::Reconfig(r) => r.write(out),
            Self::FilteredList(r) => r.write(out),
            Self::CheckNotExists(r) => r.write(out),
            Self::CreateIfNotExists(r) => r.write(out),
            Self::RemoveRecursive(r) => r.write(out),
        }
    }

    /// The op code to put in `RequestHeader.type`.
    pub fn op_code(&self) -> i32 {
        match self {
            Self::Create(_) => opcode::CREATE,
            Self::Create2(_) => opcode::CREATE2,
            Self::CreateContainer(_) => opcode::CREATE_CONTAINER,
            Self::CreateTtl(_) => opcode::CREATE_TTL,
            Self::Delete(_) => opcode::DELETE,
            Self::DeleteContainer(_) => opcode::DELETE_CONTAINER,
            Self::Exists(_) => opcode::EXISTS,
            Self::GetData(_) => opcode::GET_DATA,
            Self::SetData(_) => opcode::SET_DATA,
            Self::GetAcl(_) => opcode::GET_ACL,
            Self::SetAcl(_) => opcode::SET_ACL,
            Self::GetChildren(_) => opcode::GET_CHILDREN,
            Self::GetChildren2(_) => opcode::GET_CHILDREN2,
            Self::GetAllChildrenNumber(_) => opcode::GET_ALL_CHILDREN_NUMBER,
            Self::GetEphemerals(_) => opcode::GET_EPHEMERALS,
            Self::Sync(_) => opcode::SYNC,
            Self::Check(_) => opcode::CHECK,
            Self::Multi(_) => opcode::MULTI,
            Self::MultiRead(_) => opcode::MULTI_READ,
            Self::Ping => opcode::PING,
            Self::Auth(_) => opcode::AUTH,
            Self::SetWatches(_) => opcode::SET_WATCHES,
            Self::SetWatches2(_) => opcode::SET_WATCHES2,
            Self::AddWatch(_) => opcode::ADD_WATCH,
            Self::RemoveWatches(_) => opcode::REMOVE_WATCHES,
            Self::CheckWatches(_) => opcode::CHECK_WATCHES,
            Self::WhoAmI => opcode::WHO_AM_I,
            Self::CloseSession => opcode::CLOSE_SESSION,
            Self::Sasl(_) => opcode::SASL,
            Self::Reconfig(_) => opcode::RECONFIG,
            Self::FilteredList(_) => opcode::FILTERED_LIST,
            Self::CheckNotExists(_) => opcode::CHECK_NOT_EXISTS,
            Self::CreateIfNotExists(_) => opcode::CREATE_IF_NOT_EXISTS,
            Self::RemoveRecursive(_) => opcode::REMOVE_RECURSIVE,
        }
    }

    /// Whether the request changes the tree or session table, i.e. must go
    /// through the replicated log: create*, delete*, setData, setACL, check,
    /// multi, closeSession and reconfig (which rewrites `/zookeeper/config`)
    /// — the same set ZooKeeper turns into transactions — plus ClickHouse
    /// Keeper's createIfNotExists and removeRecursive. (Its checkNotExists
    /// outside a multi is a read, as in ClickHouse Keeper.)
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Self::Create(_)
                | Self::Create2(_)
                | Self::CreateContainer(_)
                | Self::CreateTtl(_)
                | Self::Delete(_)
                | Self::DeleteContainer(_)
                | Self::SetData(_)
                | Self::SetAcl(_)
                | Self::Check(_)
                | Self::Multi(_)
                | Self::CloseSession
                | Self::Reconfig(_)
                | Self::CreateIfNotExists(_)
                | Self::RemoveRecursive(_)
        )
    }

    /// The single znode path the request targets, if it has exactly one.
    /// `getEphemerals` yields its prefix; multi, watches re-registration,
    /// auth, ping and session ops yield `None`.
    pub fn path(&self) -> Option<&str> {
        Some(match self {
            Self::Create(r) | Self::Create2(r) | Self::CreateContainer(r) => &r.path,
            Self::CreateTtl(r) => &r.path,
            Self::Delete(r) => &r.path,
            Self::DeleteContainer(path) => path,
            Self::Exists(r) => &r.path,
            Self::GetData(r) => &r.path,
            Self::SetData(r) => &r.path,
            Self::GetAcl(r) => &r.path,
            Self::SetAcl(r) => &r.path,
            Self::GetChildren(r) => &r.path,
            Self::GetChildren2(r) => &r.path,
            Self::GetAllChildrenNumber(r) => &r.path,
            Self::GetEphemerals(r) => &r.prefix_path,
            Self::Sync(r) => &r.path,
            Self::Check(r) => &r.path,
            Self::AddWatch(r) => &r.path,
            Self::RemoveWatches(r) => &r.path,
            Self::CheckWatches(r) => &r.path,
            Self::FilteredList(r) => &r.path,
            Self::CheckNotExists(r) => &r.path,
            Self::CreateIfNotExists(r) => &r.path,
            Self::RemoveRecursive(r) => &r.path,
            Self::Multi(_)
            | Self::MultiRead(_)
            | Self::Ping
            | Self::Auth(_)
            | Self::SetWatches(_)
            | Self::SetWatches2(_)
            | Self::WhoAmI
            | Self::CloseSession
            | Self::Sasl(_)
            | Self::Reconfig(_) => return None,
        })
    }
}

/// Decodes the `deleteContainer` body: the whole body is the path.
fn decode_raw_path(body: &[u8]) -> Result<String> {
    std::str::from_utf8(body)
        .map(str::to_owned)
        .map_err(|_| JuteError::InvalidUtf8)
}

/// The outcome of one op inside a `multi` / `multiRead` response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiResult {
    /// Result of `create`: header type 1, `CreateResponse`.
    Create(String),
    /// Result of `create2` — and, as ZooKeeper's `FinalRequestProcessor`
    /// builds `CreateResult(path, stat)` for them too, of `createContainer`
    /// and `createTTL`: header type 15, `Create2Response`.
    Create2(String, Stat),
    /// Result of `delete` (and `deleteContainer`): header type 2, no body.
    Delete,
    /// Result of `setData`: header type 5, `SetDataResponse`.
    SetData(Stat),
    /// Result of `check`: header type 13, no body.
    Check,
    /// Result of `getData`: header type 4, `GetDataResponse`.
    GetData(Option<Vec<u8>>, Stat),
    /// Result of `getChildren`: header type 8, `GetChildrenResponse`.
    GetChildren(Vec<String>),
    /// A failed (or, in a failed transaction, rolled-back) op: header type
    /// -1 with `err` = the code, body `ErrorResponse`. ZooKeeper reports the
    /// ops before the failing one as `Error(0)` and those after it as
    /// `Error(-2)` (runtime inconsistency).
    Error(i32),
    /// Result of `exists` in a multiRead: header type 3, `Stat`.
    Exists(Stat),
    /// Result of `getChildren2` and `filteredList` in a multiRead: header
    /// type 12, `GetChildren2Response`.
    GetChildren2(Vec<String>, Stat),
    /// Result of `checkNotExists`: header type 501, no body.
    CheckNotExists,
    /// Result of `createIfNotExists`: header type 502, the path.
    CreateIfNotExists(String),
    /// Result of `removeRecursive`: header type 503, no body.
    RemoveRecursive,
    /// A failed multiRead op as ClickHouse Keeper reports it: the header
    /// keeps the op's own reply type and carries the code, and no body
    /// follows. (ClickHouse's client requires this form; ZooKeeper's
    /// clients read [`MultiResult::Error`].) `op` is never -1, `err` never 0.
    Failed {
        /// The reply type, as [`crate::clickhouse::multi_read_reply_op`].
        op: i32,
        /// The error code.
        err: i32,
    },
}

impl MultiResult {
    /// The op code written in this result's `MultiHeader`.
    pub fn op_code(&self) -> i32 {
        match self {
            Self::Create(_) => opcode::CREATE,
            Self::Create2(..) => opcode::CREATE2,
            Self::Delete => opcode::DELETE,
            Self::SetData(_) => opcode::SET_DATA,
            Self::Check => opcode::CHECK,
            Self::GetData(..) => opcode::GET_DATA,
            Self::GetChildren(_) => opcode::GET_CHILDREN,
            Self::Error(_) => opcode::ERROR,
            Self::Exists(_) => opcode::EXISTS,
            Self::GetChildren2(..) => opcode::GET_CHILDREN2,
            Self::CheckNotExists => opcode::CHECK_NOT_EXISTS,
            Self::CreateIfNotExists(_) => opcode::CREATE_IF_NOT_EXISTS,
            Self::RemoveRecursive => opcode::REMOVE_RECURSIVE,
            Self::Failed { op, .. } => *op,
        }
    }

    /// The `err` written in this result's `MultiHeader`.
    fn header_err(&self) -> i32 {
        match self {
            Self::Error(err) | Self::Failed { err, .. } => *err,
            _ => 0,
        }
    }

    fn write_entry(&self, out: &mut Vec<u8>) {
        let header = MultiHeader {
            op_type: self.op_code(),
            done: false,
            err: self.header_err(),
        };
        header.write(out);
        match self {
            Self::Create(path) => write_path(out, path),
            Self::Create2(path, stat) => write_path_and_stat(out, path, stat),
            Self::Delete | Self::Check => {}
            Self::SetData(stat) => stat.write(out),
            Self::GetData(data, stat) => write_data_and_stat(out, data, stat),
            Self::GetChildren(children) => write_children(out, children),
            Self::Error(err) => ErrorResponse { err: *err }.write(out),
            Self::Exists(stat) => stat.write(out),
            Self::GetChildren2(children, stat) => {
                write_children(out, children);
                stat.write(out);
            }
            Self::CreateIfNotExists(path) => write_path(out, path),
            Self::CheckNotExists | Self::RemoveRecursive => {}
            Self::Failed { op, err } => {
                assert!(
                    *op != opcode::ERROR && *err != 0,
                    "not a ClickHouse failure"
                );
            }
        }
    }

    /// Reads one result body given its header. For errors the body's code
    /// wins over the header's, as in ZooKeeper's `MultiResponse`. A header
    /// with a code and an op type other than -1 is ClickHouse Keeper's
    /// failed op, which has no body (its client reads one only when the
    /// code is 0 or the type -1).
    fn read_body(header: &MultiHeader, r: &mut Reader<'_>) -> Result<Self> {
        if header.err != 0 && header.op_type != opcode::ERROR {
            return Ok(Self::Failed {
                op: header.op_type,
                err: header.err,
            });
        }
        Ok(match header.op_type {
            opcode::CREATE => Self::Create(CreateResponse::read(r)?.path),
            opcode::CREATE2 => {
                let response = Create2Response::read(r)?;
                Self::Create2(response.path, response.stat)
            }
            opcode::DELETE => Self::Delete,
            opcode::SET_DATA => Self::SetData(Stat::read(r)?),
            opcode::CHECK => Self::Check,
            opcode::GET_DATA => {
                let response = GetDataResponse::read(r)?;
                Self::GetData(response.data, response.stat)
            }
            opcode::GET_CHILDREN => Self::GetChildren(GetChildrenResponse::read(r)?.children),
            opcode::ERROR => Self::Error(ErrorResponse::read(r)?.err),
            opcode::EXISTS => Self::Exists(Stat::read(r)?),
            opcode::GET_CHILDREN2 => {
                let response = GetChildren2Response::read(r)?;
                Self::GetChildren2(response.children, response.stat)
            }
            opcode::CHECK_NOT_EXISTS => Self::CheckNotExists,
            opcode::CREATE_IF_NOT_EXISTS => Self::CreateIfNotExists(CreateResponse::read(r)?.path),
            opcode::REMOVE_RECURSIVE => Self::RemoveRecursive,
            other => return Err(JuteError::UnknownOpCode(other)),
        })
    }
}

fn write_multi_results(out: &mut Vec<u8>, results: &[MultiResult]) {
    for result in results {
        result.write_entry(out);
    }
    MULTI_TERMINATOR.write(out);
}

/// Reads results until the `done` header; bounded by the input length since
/// every result consumes at least its header.
fn read_multi_results(r: &mut Reader<'_>) -> Result<Vec<MultiResult>> {
    let mut results = Vec::new();
    loop {
        let header = MultiHeader::read(r)?;
        if header.done {
            return Ok(results);
        }
        results.push(MultiResult::read_body(&header, r)?);
    }
}

/// A reply body (what follows `ReplyHeader` when `err` is 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// No body: delete, setWatches*, removeWatches, checkWatches, ping,
    /// auth, closeSession, checkNotExists, removeRecursive, and every reply
    /// whose header `err` is non-zero.
    Empty,
    /// `create` and `createIfNotExists`: the created (or existing) path.
    Create(String),
    /// `create2`, `createContainer`, `createTTL`: path and stat.
    Create2(String, Stat),
    /// `exists`, `setData`, `setACL` (and a standalone `check`, which
    /// ZooKeeper answers with a `SetDataResponse`): a bare `Stat`.
    Stat(Stat),
    /// `getData` and `reconfig` (which returns the new config as data).
    GetData(Option<Vec<u8>>, Stat),
    /// `getACL`.
    GetAcl(Vec<Acl>, Stat),
    /// `getChildren`.
    GetChildren(Vec<String>),
    /// `getChildren2` and `filteredList`: children and the parent's stat.
    GetChildren2(Vec<String>, Stat),
    /// `getAllChildrenNumber`.
    GetAllChildrenNumber(i32),
    /// `getEphemerals`.
    GetEphemerals(Vec<String>),
    /// `sync`: the synced path.
    Sync(String),
    /// `multi` and `multiRead`.
    Multi(Vec<MultiResult>),
    /// `whoAmI`.
    WhoAmI(Vec<ClientInfo>),
    /// A bare `ErrorResponse` body. ZooKeeper 3.8 answers a successful
    /// `addWatch` with `ErrorResponse(0)` (4 bytes), and the Java client
    /// insists on reading them, so `addWatch` must not be answered `Empty`.
    ErrorResponse(i32),
    /// `sasl`: the server's `SetSASLResponse` token.
    Sasl(Vec<u8>),
    /// A body the server encoded as it read it (a getChildren list: one
    /// buffer instead of a `String` per child), written as is. Never
    /// decoded into: `decode` of these bytes, with the request's op code,
    /// gives the structured response.
    Encoded(Vec<u8>),
}

impl Response {
    /// Appends the body (no header) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Empty => {}
            Self::Create(path) | Self::Sync(path) => write_path(out, path),
            Self::Create2(path, stat) => write_path_and_stat(out, path, stat),
            Self::Stat(stat) => stat.write(out),
            Self::GetData(data, stat) => write_data_and_stat(out, data, stat),
            Self::GetAcl(acl, stat) => {
                write_vec(out, acl);
                stat.write(out);
            }
            Self::GetChildren(children) | Self::GetEphemerals(children) => {
                write_children(out, children)
            }
            Self::GetChildren2(children, stat) => {
                write_children(out, children);
                stat.write(out);
            }
            Self::GetAllChildrenNumber(n) | Self::ErrorResponse(n) => write_i32(out, *n),
            Self::Multi(results) => write_multi_results(out, results),
            Self::WhoAmI(infos) => write_vec(out, infos),
            Self::Sasl(token) => write_buffer(out, Some(token)),
            Self::Encoded(body) => out.extend_from_slice(body),
        }
    }

    /// Decodes a successful reply body, given the op code of the request it
    /// answers (replies do not carry one). Trailing bytes are ignored.
    /// Only for replies whose `ReplyHeader.err` is 0; see [`Response::decode_reply`].
    pub fn decode(op_type: i32, body: &[u8]) -> Result<Response> {
        let r = &mut Reader::new(body);
        Ok(match op_type {
            opcode::CREATE => Self::Create(CreateResponse::read(r)?.path),
            opcode::CREATE2 | opcode::CREATE_CONTAINER | opcode::CREATE_TTL => {
                let response = Create2Response::read(r)?;
                Self::Create2(response.path, response.stat)
            }
            opcode::EXISTS | opcode::SET_DATA | opcode::SET_ACL => Self::Stat(Stat::read(r)?),
            opcode::CHECK if body.is_empty() => Self::Empty,
            opcode::CHECK => Self::Stat(Stat::read(r)?),
            opcode::GET_DATA | opcode::RECONFIG => {
                let response = GetDataResponse::read(r)?;
                Self::GetData(response.data, response.stat)
            }
            opcode::GET_ACL => {
                let response = GetAclResponse::read(r)?;
                Self::GetAcl(response.acl, response.stat)
            }
            opcode::GET_CHILDREN => Self::GetChildren(GetChildrenResponse::read(r)?.children),
            opcode::GET_CHILDREN2 | opcode::FILTERED_LIST => {
                let response = GetChildren2Response::read(r)?;
                Self::GetChildren2(response.children, response.stat)
            }
            opcode::GET_ALL_CHILDREN_NUMBER => {
                Self::GetAllChildrenNumber(GetAllChildrenNumberResponse::read(r)?.total_number)
            }
            opcode::GET_EPHEMERALS => {
                Self::GetEphemerals(GetEphemeralsResponse::read(r)?.ephemerals)
            }
            opcode::SYNC => Self::Sync(SyncResponse::read(r)?.path),
            opcode::MULTI | opcode::MULTI_READ => Self::Multi(read_multi_results(r)?),
            opcode::WHO_AM_I => Self::WhoAmI(WhoAmIResponse::read(r)?.client_info),
            opcode::ADD_WATCH => Self::ErrorResponse(ErrorResponse::read(r)?.err),
            opcode::SASL => Self::Sasl(SetSaslResponse::read(r)?.token),
            opcode::CREATE_IF_NOT_EXISTS => Self::Create(CreateResponse::read(r)?.path),
            opcode::DELETE
            | opcode::DELETE_CONTAINER
            | opcode::CHECK_NOT_EXISTS
            | opcode::REMOVE_RECURSIVE
            | opcode::PING
            | opcode::AUTH
            | opcode::SET_WATCHES
            | opcode::SET_WATCHES2
            | opcode::REMOVE_WATCHES
            | opcode::CHECK_WATCHES
            | opcode::CLOSE_SESSION => Self::Empty,
            other => return Err(JuteError::UnknownOpCode(other)),
        })
    }

    /// Decodes the body that follows a `ReplyHeader` with the given `err`.
    ///
    /// Mirrors the Java client (`ClientCnxn.readResponse`), which reads a body
    /// only when `err` is 0: a failed request carries no body. (A multi whose
    /// ops fail still has `err` 0 and reports the failures per op.)
    pub fn decode_reply(op_type: i32, err: i32, body: &[u8]) -> Result<Response> {
        if err != 0 {
            return Ok(Self::Empty);
        }
        Self::decode(op_type, body)
    }
}

fn write_path(out: &mut Vec<u8>, path: &str) {
    write_string(out, path);
}

fn write_path_and_stat(out: &mut Vec<u8>, path: &str, stat: &Stat) {
    write_path(out, path);
    stat.write(out);
}

fn write_data_and_stat(out: &mut Vec<u8>, data: &Option<Vec<u8>>, stat: &Stat) {
    write_buffer(out, data.as_deref());
    stat.write(out);
}

fn write_children(out: &mut Vec<u8>, children: &[String]) {
    write_string_vec(out, children);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::write_i64;
    use crate::records::{RequestHeader, SetWatches};
    use crate::samples;

    fn encode_request(request: &Request) -> Vec<u8> {
        let mut out = Vec::new();
        request.encode(&mut out);
        out
    }

    fn encode_response(response: &Response) -> Vec<u8> {
        let mut out = Vec::new();
        response.encode(&mut out);
        out
    }

    /// Every op code a client may send, plus the internal and unknown ones.
    const ALL_OP_CODES: [i32; 41] = [
        -11, -10, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
        22, 23, 100, 101, 102, 103, 104, 105, 106, 107, 108, 500, 501, 502, 503, 504,
    ];

    #[test]
    fn every_request_variant_round_trips() {
        let requests = samples::requests();
        assert_eq!(requests.len(), 37);
        for request in requests {
            let body = encode_request(&request);
            let decoded = Request::decode(request.op_code(), &body);
            assert_eq!(decoded.as_ref(), Ok(&request));
        }
    }

    #[test]
    fn every_response_variant_round_trips() {
        for (op, response) in samples::responses() {
            let body = encode_response(&response);
            assert_eq!(Response::decode(op, &body), Ok(response), "op {op}");
        }
    }

    #[test]
    fn every_multi_result_variant_round_trips_alone() {
        for result in samples::multi_results() {
            let response = Response::Multi(vec![result]);
            let body = encode_response(&response);
            assert_eq!(Response::decode(opcode::MULTI, &body), Ok(response));
        }
    }

    #[test]
    fn trailing_bytes_are_ignored() {
        let request = Request::GetData(GetDataRequest {
            path: "/x".into(),
            watch: true,
        });
        let mut body = encode_request(&request);
        body.extend_from_slice(b"junk");
        assert_eq!(Request::decode(opcode::GET_DATA, &body), Ok(request));
    }

    #[test]
    fn multi_request_wire_form() {
        let ops = vec![MultiOp::Check(CheckVersionRequest {
            path: "/a".into(),
            version: 5,
        })];
        let body = encode_request(&Request::Multi(ops));
        let expected: Vec<u8> = [
            &[0, 0, 0, 13, 0, 0xff, 0xff, 0xff, 0xff][..], // header: check, !done, -1
            &[0, 0, 0, 2, b'/', b'a', 0, 0, 0, 5],         // CheckVersionRequest
            &[0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff], // terminator
        ]
        .concat();
        assert_eq!(body, expected);
    }

    #[test]
    fn multi_response_wire_form() {
        let results = vec![MultiResult::Delete, MultiResult::Error(-101)];
        let body = encode_response(&Response::Multi(results));
        let expected: Vec<u8> = [
            &[0, 0, 0, 2, 0, 0, 0, 0, 0][..],                     // delete, ok
            &[0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 0x9b], // error, -101
            &[0xff, 0xff, 0xff, 0x9b],                            // ErrorResponse
            &[0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff], // terminator
        ]
        .concat();
        assert_eq!(body, expected);
    }

    #[test]
    fn multi_op_codes_and_paths() {
        let codes: Vec<i32> = samples::write_ops().iter().map(MultiOp::op_code).collect();
        assert_eq!(codes, [1, 15, 19, 21, 2, 5, 13]);
        let read_ops = samples::read_ops();
        let paths: Vec<&str> = read_ops.iter().map(MultiOp::path).collect();
        assert_eq!(paths, ["/r", "/r/x"]);
        assert!(samples::read_ops().iter().all(MultiOp::is_read));
        assert!(!samples::write_ops().iter().any(MultiOp::is_read));
        let codes: Vec<i32> = samples::multi_results()
            .iter()
            .map(MultiResult::op_code)
            .collect();
        assert_eq!(
            codes,
            [1, 15, 2, 5, 13, 4, 4, 8, -1, -1, -1, 3, 12, 501, 502, 503, 4, 12]
        );
        let codes: Vec<i32> = samples::clickhouse_write_ops()
            .iter()
            .map(MultiOp::op_code)
            .collect();
        assert_eq!(codes, [501, 502, 503]);
        assert!(!samples::clickhouse_write_ops().iter().any(MultiOp::is_read));
        assert!(samples::clickhouse_read_ops().iter().all(MultiOp::is_read));
    }

    #[test]
    fn mixed_multi_is_rejected() {
        let mut ops = samples::write_ops();
        ops.extend(samples::read_ops());
        let body = encode_request(&Request::Multi(ops));
        assert_eq!(
            Request::decode(opcode::MULTI, &body),
            Err(JuteError::Malformed("multi mixes read and write ops"))
        );
    }

    #[test]
    fn clickhouse_read_ops_are_known_in_multi_read_only() {
        let body = encode_request(&Request::MultiRead(samples::clickhouse_read_ops()));
        assert_eq!(
            Request::decode(opcode::MULTI_READ, &body),
            Ok(Request::MultiRead(samples::clickhouse_read_ops()))
        );
        // In a multi they stay unknown, as ZooKeeper has them.
        for op in [opcode::EXISTS, opcode::GET_CHILDREN2, opcode::FILTERED_LIST] {
            let body = encode_request(&Request::Multi(
                samples::clickhouse_read_ops()
                    .into_iter()
                    .filter(|o| o.op_code() == op)
                    .collect(),
            ));
            assert_eq!(
                Request::decode(opcode::MULTI, &body),
                Err(JuteError::UnknownOpInMulti(op)),
                "op {op}"
            );
        }
        // ClickHouse's writes join ZooKeeper's in a multi; never a multiRead's reads.
        let mut ops = samples::write_ops();
        ops.extend(samples::clickhouse_write_ops());
        let body = encode_request(&Request::Multi(ops.clone()));
        assert_eq!(
            Request::decode(opcode::MULTI, &body),
            Ok(Request::Multi(ops))
        );
        let mut mixed = samples::clickhouse_read_ops();
        mixed.extend(samples::clickhouse_write_ops());
        let body = encode_request(&Request::MultiRead(mixed));
        assert_eq!(
            Request::decode(opcode::MULTI_READ, &body),
            Err(JuteError::Malformed("multi mixes read and write ops"))
        );
    }

    #[test]
    fn clickhouse_failed_results_have_no_body() {
        let results = vec![
            MultiResult::Failed { op: 4, err: -101 },
            MultiResult::GetData(Some(b"x".to_vec()), samples::stat()),
        ];
        let body = encode_response(&Response::Multi(results.clone()));
        assert_eq!(
            &body[..9],
            &[0, 0, 0, 4, 0, 0xff, 0xff, 0xff, 0x9b],
            "getData, !done, -101 and nothing more"
        );
        assert_eq!(
            &body[9..13],
            &[0, 0, 0, 4],
            "the next result starts at once"
        );
        assert_eq!(
            Response::decode(opcode::MULTI_READ, &body),
            Ok(Response::Multi(results))
        );
        let ops = samples::clickhouse_read_ops();
        let mut failed = vec![
            MultiResult::Error(-101),
            MultiResult::Error(-102),
            MultiResult::Error(-101),
            MultiResult::GetData(None, samples::stat()),
        ];
        crate::clickhouse::to_clickhouse_failures(&ops, &mut failed);
        assert_eq!(
            failed,
            [
                MultiResult::Failed { op: 3, err: -101 },
                MultiResult::Failed { op: 12, err: -102 },
                MultiResult::Failed { op: 12, err: -101 },
                MultiResult::GetData(None, samples::stat()),
            ]
        );
    }

    /// ZooKeeper 3.8's MultiOperationRecord deserializes a create op whatever
    /// its flags (Op.create keeps them; prep then fails that one op with
    /// BadArguments, an error txn): the codec carries them as sent, in every
    /// create opcode, in a multi as outside one.
    #[test]
    fn create_flags_that_are_no_create_mode_are_carried_as_sent() {
        for flags in [7, -1, 100, i32::MIN, i32::MAX] {
            let ttl = CreateTtlRequest {
                flags,
                ..samples::create_ttl()
            };
            let ops = vec![
                MultiOp::Create(samples::create("/ok", 0)),
                MultiOp::Create(samples::create("/bad1", flags)),
                MultiOp::Create2(samples::create("/bad15", flags)),
                MultiOp::CreateContainer(samples::create("/bad19", flags)),
                MultiOp::CreateTtl(ttl.clone()),
                MultiOp::Check(CheckVersionRequest {
                    path: "/ok".into(),
                    version: 0,
                }),
            ];
            let multi = Request::Multi(ops);
            let body = encode_request(&multi);
            assert_eq!(Request::decode(opcode::MULTI, &body), Ok(multi), "{flags}");
            for (op, request) in [
                (
                    opcode::CREATE,
                    Request::Create(samples::create("/bad", flags)),
                ),
                (
                    opcode::CREATE2,
                    Request::Create2(samples::create("/bad", flags)),
                ),
                (
                    opcode::CREATE_CONTAINER,
                    Request::CreateContainer(samples::create("/bad", flags)),
                ),
                (opcode::CREATE_TTL, Request::CreateTtl(ttl.clone())),
            ] {
                let body = encode_request(&request);
                assert_eq!(Request::decode(op, &body), Ok(request), "{op} {flags}");
            }
        }
    }

    #[test]
    fn unknown_op_in_multi_is_rejected() {
        let mut body = Vec::new();
        MultiHeader {
            op_type: opcode::EXISTS,
            done: false,
            err: -1,
        }
        .write(&mut body);
        body.extend_from_slice(&[0; 16]);
        assert_eq!(
            Request::decode(opcode::MULTI, &body),
            Err(JuteError::UnknownOpInMulti(opcode::EXISTS))
        );
        let mut body = Vec::new();
        MultiHeader {
            op_type: 99,
            done: false,
            err: 0,
        }
        .write(&mut body);
        assert_eq!(
            Response::decode(opcode::MULTI, &body),
            Err(JuteError::UnknownOpCode(99))
        );
    }

    #[test]
    fn unknown_op_codes_are_rejected() {
        for op in [-10, -1, 0, 10, 23, 99, 108, 499, 504, i32::MIN, i32::MAX] {
            assert_eq!(Request::decode(op, &[]), Err(JuteError::UnknownOpCode(op)));
            assert_eq!(Response::decode(op, &[]), Err(JuteError::UnknownOpCode(op)));
        }
    }

    #[test]
    fn delete_container_body_is_the_raw_path() {
        let request = Request::DeleteContainer("/c/1".into());
        assert_eq!(encode_request(&request), b"/c/1");
        assert_eq!(
            Request::decode(opcode::DELETE_CONTAINER, b"/c/1"),
            Ok(request)
        );
        assert_eq!(
            Request::decode(opcode::DELETE_CONTAINER, &[0xff]),
            Err(JuteError::InvalidUtf8)
        );
    }

    #[test]
    fn write_classification() {
        let writes: Vec<i32> = samples::requests()
            .iter()
            .filter(|r| r.is_write())
            .map(Request::op_code)
            .collect();
        assert_eq!(
            writes,
            [1, 15, 19, 21, 2, 20, 5, 7, 13, 14, 14, -11, 16, 502, 503, 14]
        );
    }

    #[test]
    fn request_paths() {
        let with_path = samples::requests()
            .iter()
            .filter_map(|r| r.path().map(str::to_owned))
            .collect::<Vec<_>>();
        assert_eq!(
            with_path,
            [
                "/a",
                "/b",
                "/c",
                "/ttl",
                "/d",
                "/container/ü",
                "/e",
                "/f",
                "/g",
                "/h",
                "/i",
                "/j",
                "/k",
                "/l",
                "/m",
                "/n",
                "/o",
                "/p",
                "/q",
                "/r",
                "/s",
                "/t",
                "/u",
                "/v"
            ]
        );
    }

    #[test]
    fn decode_reply_skips_bodies_of_failed_requests() {
        assert_eq!(
            Response::decode_reply(opcode::GET_DATA, -101, &[]),
            Ok(Response::Empty)
        );
        let failed = encode_response(&Response::Multi(vec![MultiResult::Error(-101)]));
        assert_eq!(
            Response::decode_reply(opcode::MULTI, 0, &failed),
            Ok(Response::Multi(vec![MultiResult::Error(-101)]))
        );
        assert_eq!(
            Response::decode_reply(opcode::MULTI, -5, &[]),
            Ok(Response::Empty)
        );
        assert_eq!(
            Response::decode_reply(opcode::ADD_WATCH, 0, &[0, 0, 0, 0]),
            Ok(Response::ErrorResponse(0))
        );
    }

    /// Requests whose every strict prefix is invalid: truncating them at any
    /// byte must yield an error, never a panic or a bogus success.
    fn truncation_samples() -> Vec<Request> {
        samples::requests()
            .into_iter()
            .filter(|r| !matches!(r, Request::DeleteContainer(_)))
            .filter(|r| !encode_request(r).is_empty())
            .collect()
    }

    #[test]
    fn truncated_requests_fail_at_every_offset() {
        for request in truncation_samples() {
            let body = encode_request(&request);
            for cut in 0..body.len() {
                let result = Request::decode(request.op_code(), &body[..cut]);
                assert!(result.is_err(), "{request:?} cut at {cut}: {result:?}");
            }
        }
    }

    #[test]
    fn truncated_responses_fail_at_every_offset() {
        for (op, response) in samples::responses() {
            let body = encode_response(&response);
            if op == opcode::CHECK {
                continue; // an empty body is a valid (empty) check reply
            }
            for cut in 0..body.len() {
                let result = Response::decode(op, &body[..cut]);
                assert!(result.is_err(), "{response:?} cut at {cut}: {result:?}");
            }
        }
    }

    #[test]
    fn truncated_framed_packets_fail_at_every_offset() {
        // Header + body as it travels, cut anywhere: never a panic.
        for request in samples::requests() {
            let mut packet = Vec::new();
            RequestHeader {
                xid: 1,
                op_type: request.op_code(),
            }
            .write(&mut packet);
            request.encode(&mut packet);
            for cut in 0..8 {
                assert!(RequestHeader::from_bytes(&packet[..cut]).is_err());
            }
        }
    }

    #[test]
    fn huge_lengths_are_rejected_without_allocating() {
        // A path claiming ~2 GB.
        let mut body = i32::MAX.to_be_bytes().to_vec();
        body.extend_from_slice(b"/x");
        for op in [
            opcode::GET_DATA,
            opcode::CREATE,
            opcode::SET_DATA,
            opcode::SYNC,
        ] {
            assert_eq!(
                Request::decode(op, &body),
                Err(JuteError::Truncated {
                    needed: i32::MAX as usize,
                    remaining: 2
                })
            );
        }
        // SetWatches claiming 2^31-1 data watches.
        let mut body = Vec::new();
        write_i64(&mut body, 0);
        write_i32(&mut body, i32::MAX);
        assert_eq!(
            Request::decode(opcode::SET_WATCHES, &body),
            Err(JuteError::VectorTooLong(i32::MAX as usize))
        );
        // getData reply claiming 2 GB of data.
        let body = 0x7fff_fff0i32.to_be_bytes();
        assert!(matches!(
            Response::decode(opcode::GET_DATA, &body),
            Err(JuteError::Truncated { .. })
        ));
        // Negative lengths other than -1.
        let body = (-5i32).to_be_bytes();
        assert_eq!(
            Request::decode(opcode::EXISTS, &body),
            Err(JuteError::NegativeLength(-5))
        );
        assert_eq!(
            Response::decode(opcode::GET_CHILDREN, &body),
            Err(JuteError::NegativeLength(-5))
        );
    }

    #[test]
    fn set_watches_with_null_vectors() {
        let mut body = Vec::new();
        write_i64(&mut body, 9);
        for _ in 0..3 {
            write_i32(&mut body, -1);
        }
        assert_eq!(
            Request::decode(opcode::SET_WATCHES, &body),
            Ok(Request::SetWatches(SetWatches {
                relative_zxid: 9,
                ..SetWatches::default()
            }))
        );
    }

    /// A tiny deterministic PRNG so the fuzz test needs no dependencies.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn byte(&mut self) -> u8 {
            self.next().to_le_bytes()[0]
        }
    }

    #[test]
    fn random_and_mutated_input_never_panics() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let seeds: Vec<Vec<u8>> = samples::requests().iter().map(encode_request).collect();
        for round in 0..20_000 {
            let mut body = if round % 2 == 0 {
                let len = (rng.next() % 64) as usize;
                (0..len).map(|_| rng.byte()).collect()
            } else {
                seeds[round % seeds.len()].clone()
            };
            if !body.is_empty() {
                let flips = 1 + rng.next() % 4;
                for _ in 0..flips {
                    let at = (rng.next() % body.len() as u64) as usize;
                    body[at] = rng.byte();
                }
            }
            let op = ALL_OP_CODES[(rng.next() % ALL_OP_CODES.len() as u64) as usize];
            let _ = Request::decode(op, &body);
            let _ = Response::decode(op, &body);
            let _ = crate::frame::check_frame(&body, crate::frame::DEFAULT_MAX_FRAME_BYTES);
        }
    }
}
