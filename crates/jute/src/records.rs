//! Every record of ZooKeeper's client protocol (`zookeeper.jute`, modules
//! `org.apache.zookeeper.data` and `org.apache.zookeeper.proto`).
//!
//! Field order is the wire order. Types follow one rule: a `buffer` that
//! ZooKeeper can send as null (znode data) is `Option<Vec<u8>>` so null and
//! empty stay distinct; credentials and tokens are plain `Vec<u8>`. A null
//! `ustring` or `vector` decodes as empty.

use crate::codec::{write_bool, Field, Reader, Record, BOOL_BYTES};
use crate::error::Result;

/// Declares a record struct whose wire form is its fields in order, and
/// derives both [`Record`] and the crate-private [`Field`] for it.
macro_rules! jute_record {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$fmeta:meta])* pub $field:ident : $ty:ty,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)+
        }

        impl Record for $name {
            fn write(&self, out: &mut Vec<u8>) {
                $(Field::write_field(&self.$field, out);)+
            }

            fn read(r: &mut Reader<'_>) -> Result<Self> {
                Ok(Self {
                    $($field: Field::read_field(r)?,)+
                })
            }
        }

        impl Field for $name {
            const MIN_WIRE_SIZE: usize = 0 $(+ <$ty as Field>::MIN_WIRE_SIZE)+;

            fn write_field(&self, out: &mut Vec<u8>) {
                Record::write(self, out);
            }

            fn read_field(r: &mut Reader<'_>) -> Result<Self> {
                Record::read(r)
            }
        }
    };
}

// ---------------------------------------------------------------------------
// module org.apache.zookeeper.data

jute_record! {
    /// An authenticated identity, e.g. `digest` / `user:hash`.
    pub struct Id {
        /// Auth scheme: `world`, `auth`, `digest`, `ip`, `sasl`, ...
        pub scheme: String,
        /// Scheme-specific identity, e.g. `anyone` for `world`.
        pub id: String,
    }
}

jute_record! {
    /// One ACL entry: a permission mask granted to an identity.
    pub struct Acl {
        /// Bitwise OR of [`crate::perms`] constants.
        pub perms: i32,
        /// Who is granted the permissions.
        pub id: Id,
    }
}

jute_record! {
    /// Znode metadata as shown to clients (68 bytes on the wire).
    pub struct Stat {
        /// Zxid of the create.
        pub czxid: i64,
        /// Zxid of the last data change.
        pub mzxid: i64,
        /// Creation time, ms since the epoch.
        pub ctime: i64,
        /// Last modification time, ms since the epoch.
        pub mtime: i64,
        /// Data version.
        pub version: i32,
        /// Children version.
        pub cversion: i32,
        /// ACL version.
        pub aversion: i32,
        /// Owning session for ephemerals, 0 otherwise. ZooKeeper stores
        /// container/TTL markers here internally but always shows clients 0
        /// for such nodes (verified against a real 3.8 server).
        pub ephemeral_owner: i64,
        /// Length of the data in bytes.
        pub data_length: i32,
        /// Number of direct children.
        pub num_children: i32,
        /// Zxid of the last change to the children.
        pub pzxid: i64,
    }
}

jute_record! {
    /// One identity of the session, as reported by `whoAmI`.
    pub struct ClientInfo {
        /// Auth scheme, e.g. `ip` or `digest`.
        pub auth_scheme: String,
        /// User name or other id (such as the client IP).
        pub user: String,
    }
}

// ---------------------------------------------------------------------------
// module org.apache.zookeeper.proto: session establishment

/// The first packet a client sends on a connection.
///
/// `read_only` is not part of the Jute record: clients since 3.4 append it
/// as a trailing boolean and the server reads it only if present, so `None`
/// means "old client" and is preserved on re-encoding.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectRequest {
    /// Protocol version; always 0.
    pub protocol_version: i32,
    /// Highest zxid the client has seen (0 for a new session).
    pub last_zxid_seen: i64,
    /// Requested session timeout in ms.
    pub time_out: i32,
    /// Session to resume, or 0 for a new session.
    pub session_id: i64,
    /// Session password (16 bytes when resuming).
    pub passwd: Vec<u8>,
    /// Whether the client accepts a read-only server; absent in old clients.
    pub read_only: Option<bool>,
}

impl Record for ConnectRequest {
    fn write(&self, out: &mut Vec<u8>) {
        self.protocol_version.write_field(out);
        self.last_zxid_seen.write_field(out);
        self.time_out.write_field(out);
        self.session_id.write_field(out);
        self.passwd.write_field(out);
        if let Some(read_only) = self.read_only {
            write_bool(out, read_only);
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            protocol_version: Field::read_field(r)?,
            last_zxid_seen: Field::read_field(r)?,
            time_out: Field::read_field(r)?,
            session_id: Field::read_field(r)?,
            passwd: Field::read_field(r)?,
            read_only: read_optional_bool(r)?,
        })
    }
}

/// The server's answer to a [`ConnectRequest`].
///
/// `read_only` is a trailing boolean outside the Jute record; ZooKeeper
/// servers always send it, and a missing byte decodes as `false`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectResponse {
    /// Protocol version; always 0.
    pub protocol_version: i32,
    /// Negotiated session timeout in ms; 0 means the session is invalid.
    pub time_out: i32,
    /// Session id; 0 means the session is invalid (expired).
    pub session_id: i64,
    /// Session password the client must present to resume.
    pub passwd: Vec<u8>,
    /// Whether the server is in read-only mode.
    pub read_only: bool,
}

impl Record for ConnectResponse {
    fn write(&self, out: &mut Vec<u8>) {
        self.protocol_version.write_field(out);
        self.time_out.write_field(out);
        self.session_id.write_field(out);
        self.passwd.write_field(out);
        write_bool(out, self.read_only);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Self {
            protocol_version: Field::read_field(r)?,
            time_out: Field::read_field(r)?,
            session_id: Field::read_field(r)?,
            passwd: Field::read_field(r)?,
            read_only: read_optional_bool(r)?.unwrap_or(false),
        })
    }
}

/// Reads a trailing boolean that older peers omit.
fn read_optional_bool(r: &mut Reader<'_>) -> Result<Option<bool>> {
    if r.remaining() < BOOL_BYTES {
        return Ok(None);
    }
    r.read_bool().map(Some)
}

jute_record! {
    /// Watches to re-register after reconnecting (op `setWatches`).
    pub struct SetWatches {
        /// Last zxid the client saw; the server fires watches for newer changes.
        pub relative_zxid: i64,
        /// Paths with data watches.
        pub data_watches: Vec<String>,
        /// Paths with exists watches.
        pub exist_watches: Vec<String>,
        /// Paths with child watches.
        pub child_watches: Vec<String>,
    }
}

jute_record! {
    /// [`SetWatches`] plus persistent watches (op `setWatches2`).
    pub struct SetWatches2 {
        /// Last zxid the client saw.
        pub relative_zxid: i64,
        /// Paths with data watches.
        pub data_watches: Vec<String>,
        /// Paths with exists watches.
        pub exist_watches: Vec<String>,
        /// Paths with child watches.
        pub child_watches: Vec<String>,
        /// Paths with persistent watches.
        pub persistent_watches: Vec<String>,
        /// Paths with persistent recursive watches.
        pub persistent_recursive_watches: Vec<String>,
    }
}

// ---------------------------------------------------------------------------
// Headers

jute_record! {
    /// Precedes every client request after the handshake.
    pub struct RequestHeader {
        /// Client-chosen id echoed in the reply, or a reserved [`crate::xid`].
        pub xid: i32,
        /// Operation code, see [`crate::opcode`].
        pub op_type: i32,
    }
}

jute_record! {
    /// Precedes each op or result inside a multi, and terminates the list.
    pub struct MultiHeader {
        /// Op code of the following record, or -1 for the terminator.
        pub op_type: i32,
        /// True only on the terminator.
        pub done: bool,
        /// Error code of a result; -1 in requests and on the terminator.
        pub err: i32,
    }
}

jute_record! {
    /// Credentials sent with xid [`crate::xid::AUTH`] (op `auth`).
    pub struct AuthPacket {
        /// Always 0 in practice.
        pub auth_type: i32,
        /// Auth scheme, e.g. `digest`.
        pub scheme: String,
        /// Scheme-specific credentials, e.g. `user:password`.
        pub auth: Vec<u8>,
    }
}

jute_record! {
    /// Precedes every server packet after the handshake.
    pub struct ReplyHeader {
        /// The request's xid, or a reserved [`crate::xid`].
        pub xid: i32,
        /// Last zxid the server has processed (-1 in some notifications).
        pub zxid: i64,
        /// 0 or an [`crate::ErrorCode`]; when non-zero, no body follows (a
        /// multi whose ops fail has 0 here and reports failures per op).
        pub err: i32,
    }
}

// ---------------------------------------------------------------------------
// Requests and responses

jute_record! {
    /// Body of `getData`.
    pub struct GetDataRequest {
        /// Znode path.
        pub path: String,
        /// Leave a data watch.
        pub watch: bool,
    }
}

jute_record! {
    /// Body of `setData`.
    pub struct SetDataRequest {
        /// Znode path.
        pub path: String,
        /// New data; may be null.
        pub data: Option<Vec<u8>>,
        /// Expected data version, -1 for any.
        pub version: i32,
    }
}

jute_record! {
    /// Body of `reconfig`.
    ///
    /// ZooKeeper tells incremental from non-incremental reconfig by which
    /// strings are *null*; the Java admin client sends the unused ones as
    /// null (length -1). Like every `ustring` here they decode as `""`, so a
    /// server must treat an empty string as absent. (Re-encoding writes
    /// length 0, the one place this codec is not byte-identical to Java.)
    pub struct ReconfigRequest {
        /// Comma-separated servers to add.
        pub joining_servers: String,
        /// Comma-separated server ids to remove.
        pub leaving_servers: String,
        /// Full new membership (non-incremental reconfig).
        pub new_members: String,
        /// Expected current config version, -1 for any.
        pub cur_config_id: i64,
    }
}

jute_record! {
    /// Reply body of `setData` (and of a standalone `check`).
    pub struct SetDataResponse {
        /// Stat after the change.
        pub stat: Stat,
    }
}

jute_record! {
    /// Body of `create`, `create2` and `createContainer`.
    pub struct CreateRequest {
        /// Znode path (a prefix, for sequential modes).
        pub path: String,
        /// Initial data; may be null.
        pub data: Option<Vec<u8>>,
        /// ACL of the new node.
        pub acl: Vec<Acl>,
        /// [`crate::CreateMode`] flags.
        pub flags: i32,
    }
}

jute_record! {
    /// Body of `createTTL`.
    pub struct CreateTtlRequest {
        /// Znode path (a prefix, for sequential modes).
        pub path: String,
        /// Initial data; may be null.
        pub data: Option<Vec<u8>>,
        /// ACL of the new node.
        pub acl: Vec<Acl>,
        /// [`crate::CreateMode`] flags (a TTL mode).
        pub flags: i32,
        /// Time to live in ms.
        pub ttl: i64,
    }
}

jute_record! {
    /// Body of `delete`.
    pub struct DeleteRequest {
        /// Znode path.
        pub path: String,
        /// Expected data version, -1 for any.
        pub version: i32,
    }
}

jute_record! {
    /// Body of `getChildren`.
    pub struct GetChildrenRequest {
        /// Znode path.
        pub path: String,
        /// Leave a child watch.
        pub watch: bool,
    }
}

jute_record! {
    /// Body of `getAllChildrenNumber`.
    pub struct GetAllChildrenNumberRequest {
        /// Znode path.
        pub path: String,
    }
}

jute_record! {
    /// Body of `getChildren2`.
    pub struct GetChildren2Request {
        /// Znode path.
        pub path: String,
        /// Leave a child watch.
        pub watch: bool,
    }
}

jute_record! {
    /// Body of `check` (a multi op).
    pub struct CheckVersionRequest {
        /// Znode path.
        pub path: String,
        /// Required data version.
        pub version: i32,
    }
}

jute_record! {
    /// Body of `sync`.
    pub struct SyncRequest {
        /// Znode path.
        pub path: String,
    }
}

jute_record! {
    /// Reply body of `sync`.
    pub struct SyncResponse {
        /// The path from the request.
        pub path: String,
    }
}

jute_record! {
    /// Body of `getACL`.
    pub struct GetAclRequest {
        /// Znode path.
        pub path: String,
    }
}

jute_record! {
    /// Body of `setACL`.
    pub struct SetAclRequest {
        /// Znode path.
        pub path: String,
        /// New ACL.
        pub acl: Vec<Acl>,
        /// Expected ACL version (`aversion`), -1 for any.
        pub version: i32,
    }
}

jute_record! {
    /// Reply body of `setACL`.
    pub struct SetAclResponse {
        /// Stat after the change.
        pub stat: Stat,
    }
}

jute_record! {
    /// Body of `addWatch`.
    pub struct AddWatchRequest {
        /// Znode path.
        pub path: String,
        /// [`crate::AddWatchMode`] value.
        pub mode: i32,
    }
}

jute_record! {
    /// Body of a watch notification (reply xid [`crate::xid::NOTIFICATION`]).
    pub struct WatcherEvent {
        /// [`crate::EventType`] value.
        pub event_type: i32,
        /// [`crate::KeeperState`] value.
        pub state: i32,
        /// Znode path the event is about (client-relative chroot applied by
        /// the client, not the server).
        pub path: String,
    }
}

jute_record! {
    /// A bare error code: a failed multi result, or the body of an
    /// `addWatch` reply (always 0 there).
    pub struct ErrorResponse {
        /// [`crate::ErrorCode`] value.
        pub err: i32,
    }
}

jute_record! {
    /// Reply body of `create`.
    pub struct CreateResponse {
        /// Actual path created (with sequence suffix, if any).
        pub path: String,
    }
}

jute_record! {
    /// Reply body of `create2`, `createContainer` and `createTTL`.
    pub struct Create2Response {
        /// Actual path created.
        pub path: String,
        /// Stat of the new node.
        pub stat: Stat,
    }
}

jute_record! {
    /// Body of `exists`.
    pub struct ExistsRequest {
        /// Znode path.
        pub path: String,
        /// Leave an exists/data watch.
        pub watch: bool,
    }
}

jute_record! {
    /// Reply body of `exists` when the node exists.
    pub struct ExistsResponse {
        /// Stat of the node.
        pub stat: Stat,
    }
}

jute_record! {
    /// Reply body of `getData` (and of `reconfig`).
    pub struct GetDataResponse {
        /// Node data; may be null.
        pub data: Option<Vec<u8>>,
        /// Stat of the node.
        pub stat: Stat,
    }
}

jute_record! {
    /// Reply body of `getChildren`.
    pub struct GetChildrenResponse {
        /// Child names (not full paths).
        pub children: Vec<String>,
    }
}

jute_record! {
    /// Reply body of `getAllChildrenNumber`.
    pub struct GetAllChildrenNumberResponse {
        /// Number of descendants.
        pub total_number: i32,
    }
}

jute_record! {
    /// Reply body of `getChildren2`.
    pub struct GetChildren2Response {
        /// Child names (not full paths).
        pub children: Vec<String>,
        /// Stat of the parent.
        pub stat: Stat,
    }
}

jute_record! {
    /// Reply body of `getACL`.
    pub struct GetAclResponse {
        /// The node's ACL.
        pub acl: Vec<Acl>,
        /// Stat of the node.
        pub stat: Stat,
    }
}

jute_record! {
    /// Body of `checkWatches`.
    pub struct CheckWatchesRequest {
        /// Znode path.
        pub path: String,
        /// [`crate::WatcherType`] value.
        pub watcher_type: i32,
    }
}

jute_record! {
    /// Body of `removeWatches`.
    pub struct RemoveWatchesRequest {
        /// Znode path.
        pub path: String,
        /// [`crate::WatcherType`] value.
        pub watcher_type: i32,
    }
}

jute_record! {
    /// Body of `getEphemerals`.
    pub struct GetEphemeralsRequest {
        /// Only ephemerals whose path starts with this prefix (`/` for all).
        pub prefix_path: String,
    }
}

jute_record! {
    /// Reply body of `getEphemerals`.
    pub struct GetEphemeralsResponse {
        /// Full paths of the session's ephemeral nodes.
        pub ephemerals: Vec<String>,
    }
}

jute_record! {
    /// Reply body of `whoAmI`.
    pub struct WhoAmIResponse {
        /// The session's identities.
        pub client_info: Vec<ClientInfo>,
    }
}

jute_record! {
    /// Body of `sasl` (`GetSASLRequest`).
    pub struct GetSaslRequest {
        /// SASL token from the client.
        pub token: Vec<u8>,
    }
}

jute_record! {
    /// Reply body of `sasl` (`SetSASLResponse`).
    pub struct SetSaslResponse {
        /// SASL challenge from the server.
        pub token: Vec<u8>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::write_i32;
    use crate::error::JuteError;
    use crate::samples;
    use std::fmt::Debug;

    fn round_trip<T: Record + PartialEq + Debug>(value: T) -> Vec<u8> {
        let bytes = value.to_bytes();
        assert_eq!(T::from_bytes(&bytes).as_ref(), Ok(&value), "{value:?}");
        for cut in 0..bytes.len() {
            assert!(
                T::from_bytes(&bytes[..cut]).is_err(),
                "{value:?} cut at {cut}"
            );
        }
        bytes
    }

    fn s(text: &str) -> String {
        text.to_owned()
    }

    #[test]
    fn data_records_round_trip() {
        round_trip(samples::id());
        for acl in samples::acl() {
            round_trip(acl);
        }
        assert_eq!(round_trip(samples::stat()).len(), 68);
        round_trip(ClientInfo {
            auth_scheme: s("ip"),
            user: s("127.0.0.1"),
        });
    }

    #[test]
    fn header_records_round_trip() {
        assert_eq!(round_trip(RequestHeader { xid: 7, op_type: 4 }).len(), 8);
        assert_eq!(
            round_trip(ReplyHeader {
                xid: -1,
                zxid: -1,
                err: 0
            })
            .len(),
            16
        );
        let header = MultiHeader {
            op_type: -1,
            done: true,
            err: -1,
        };
        assert_eq!(
            round_trip(header),
            [0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff]
        );
        round_trip(AuthPacket {
            auth_type: 0,
            scheme: s("digest"),
            auth: b"u:p".to_vec(),
        });
    }

    #[test]
    fn session_records_round_trip() {
        round_trip(SetWatches {
            relative_zxid: 1,
            data_watches: vec![s("/a")],
            exist_watches: vec![s("/b"), s("/c")],
            child_watches: vec![],
        });
        round_trip(SetWatches2 {
            relative_zxid: 2,
            data_watches: vec![],
            exist_watches: vec![s("/b")],
            child_watches: vec![s("/c")],
            persistent_watches: vec![s("/d")],
            persistent_recursive_watches: vec![s("/e")],
        });
        round_trip(WatcherEvent {
            event_type: 3,
            state: 3,
            path: s("/w"),
        });
    }

    #[test]
    fn request_records_round_trip() {
        round_trip(GetDataRequest {
            path: s("/a"),
            watch: true,
        });
        round_trip(SetDataRequest {
            path: s("/a"),
            data: None,
            version: -1,
        });
        round_trip(ReconfigRequest {
            joining_servers: s("j"),
            leaving_servers: s("l"),
            new_members: s("n"),
            cur_config_id: 5,
        });
        round_trip(samples::create("/c", 1));
        round_trip(samples::create_ttl());
        round_trip(DeleteRequest {
            path: s("/d"),
            version: 3,
        });
        round_trip(GetChildrenRequest {
            path: s("/e"),
            watch: false,
        });
        round_trip(GetAllChildrenNumberRequest { path: s("/f") });
        round_trip(GetChildren2Request {
            path: s("/g"),
            watch: true,
        });
        round_trip(CheckVersionRequest {
            path: s("/h"),
            version: 1,
        });
        round_trip(SyncRequest { path: s("/i") });
        round_trip(GetAclRequest { path: s("/j") });
        round_trip(SetAclRequest {
            path: s("/k"),
            acl: samples::acl(),
            version: 0,
        });
        round_trip(AddWatchRequest {
            path: s("/l"),
            mode: 0,
        });
        round_trip(ExistsRequest {
            path: s("/m"),
            watch: true,
        });
        round_trip(CheckWatchesRequest {
            path: s("/n"),
            watcher_type: 1,
        });
        round_trip(RemoveWatchesRequest {
            path: s("/o"),
            watcher_type: 3,
        });
        round_trip(GetEphemeralsRequest {
            prefix_path: s("/"),
        });
        round_trip(GetSaslRequest { token: vec![1] });
    }

    #[test]
    fn response_records_round_trip() {
        let stat = samples::stat();
        round_trip(SetDataResponse { stat: stat.clone() });
        round_trip(SyncResponse { path: s("/a") });
        round_trip(SetAclResponse { stat: stat.clone() });
        round_trip(ErrorResponse { err: -101 });
        round_trip(CreateResponse { path: s("/b") });
        round_trip(Create2Response {
            path: s("/c"),
            stat: stat.clone(),
        });
        round_trip(ExistsResponse { stat: stat.clone() });
        round_trip(GetDataResponse {
            data: Some(b"x".to_vec()),
            stat: stat.clone(),
        });
        round_trip(GetChildrenResponse {
            children: vec![s("a"), s("b")],
        });
        round_trip(GetAllChildrenNumberResponse { total_number: 9 });
        round_trip(GetChildren2Response {
            children: vec![s("c")],
            stat: stat.clone(),
        });
        round_trip(GetAclResponse {
            acl: samples::acl(),
            stat,
        });
        round_trip(GetEphemeralsResponse {
            ephemerals: vec![s("/e")],
        });
        round_trip(WhoAmIResponse {
            client_info: vec![ClientInfo {
                auth_scheme: s("ip"),
                user: s("::1"),
            }],
        });
        round_trip(SetSaslResponse { token: vec![2, 3] });
    }

    #[test]
    fn id_layout() {
        let bytes = Id {
            scheme: s("world"),
            id: s("anyone"),
        }
        .to_bytes();
        assert_eq!(bytes, b"\0\0\0\x05world\0\0\0\x06anyone");
    }

    #[test]
    fn null_and_empty_data_stay_distinct() {
        let null = GetDataResponse {
            data: None,
            stat: Stat::default(),
        };
        let empty = GetDataResponse {
            data: Some(Vec::new()),
            stat: Stat::default(),
        };
        assert_eq!(&null.to_bytes()[..4], &[0xff; 4]);
        assert_eq!(&empty.to_bytes()[..4], &[0; 4]);
        assert_eq!(GetDataResponse::from_bytes(&null.to_bytes()), Ok(null));
        assert_eq!(GetDataResponse::from_bytes(&empty.to_bytes()), Ok(empty));
    }

    fn connect_request(read_only: Option<bool>) -> ConnectRequest {
        ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 0x11,
            time_out: 30_000,
            session_id: 0x22,
            passwd: vec![0; 16],
            read_only,
        }
    }

    #[test]
    fn connect_request_with_and_without_read_only() {
        let old = connect_request(None).to_bytes();
        assert_eq!(old.len(), 4 + 8 + 4 + 8 + 4 + 16);
        assert_eq!(ConnectRequest::from_bytes(&old), Ok(connect_request(None)));
        let new = connect_request(Some(true)).to_bytes();
        assert_eq!(new.len(), old.len() + 1);
        assert_eq!(&new[..old.len()], &old[..]);
        assert_eq!(
            ConnectRequest::from_bytes(&new),
            Ok(connect_request(Some(true)))
        );
        for cut in 0..old.len() {
            assert!(
                ConnectRequest::from_bytes(&new[..cut]).is_err(),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn connect_response_read_only_defaults_to_false() {
        let response = ConnectResponse {
            protocol_version: 0,
            time_out: 4000,
            session_id: 0x1000_0000_0000_0001,
            passwd: vec![7; 16],
            read_only: true,
        };
        let bytes = response.to_bytes();
        assert_eq!(bytes.len(), 4 + 4 + 8 + 4 + 16 + 1);
        assert_eq!(ConnectResponse::from_bytes(&bytes), Ok(response.clone()));
        let old = ConnectResponse::from_bytes(&bytes[..bytes.len() - 1]);
        assert_eq!(
            old,
            Ok(ConnectResponse {
                read_only: false,
                ..response
            })
        );
    }

    #[test]
    fn null_vectors_and_strings_decode_as_empty() {
        let mut bytes = Vec::new();
        write_i32(&mut bytes, -1); // path
        write_i32(&mut bytes, -1); // data
        write_i32(&mut bytes, -1); // acl
        write_i32(&mut bytes, 0); // flags
        assert_eq!(
            CreateRequest::from_bytes(&bytes),
            Ok(CreateRequest {
                path: String::new(),
                data: None,
                acl: Vec::new(),
                flags: 0,
            })
        );
    }

    #[test]
    fn acl_vector_count_is_bounded_before_allocating() {
        // Claim i32::MAX ACL entries in a 20-byte body.
        let mut bytes = Vec::new();
        write_i32(&mut bytes, 1);
        bytes.push(b'/');
        write_i32(&mut bytes, i32::MAX);
        bytes.extend_from_slice(&[0; 11]);
        assert_eq!(
            SetAclRequest::from_bytes(&bytes),
            Err(JuteError::VectorTooLong(i32::MAX as usize))
        );
    }

    #[test]
    fn min_wire_sizes_are_exact_lower_bounds() {
        assert_eq!(<Stat as Field>::MIN_WIRE_SIZE, 68);
        assert_eq!(<Id as Field>::MIN_WIRE_SIZE, 8);
        assert_eq!(<Acl as Field>::MIN_WIRE_SIZE, 12);
        assert_eq!(<ClientInfo as Field>::MIN_WIRE_SIZE, 8);
        assert_eq!(Acl::default().to_bytes().len(), 12);
    }
}
