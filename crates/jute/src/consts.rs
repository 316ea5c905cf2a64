//! Protocol constants from ZooKeeper's `ZooDefs`, `KeeperException.Code`,
//! `Watcher`, `CreateMode` and `AddWatchMode`, with their exact wire values.

use std::fmt;

/// Operation codes carried in `RequestHeader.type` (ZooKeeper `ZooDefs.OpCode`).
pub mod opcode {
    /// Watch notification (server to client only).
    pub const NOTIFICATION: i32 = 0;
    /// Create a znode; reply carries only the path.
    pub const CREATE: i32 = 1;
    /// Delete a znode.
    pub const DELETE: i32 = 2;
    /// Stat a znode, optionally leaving a watch.
    pub const EXISTS: i32 = 3;
    /// Read a znode's data and stat.
    pub const GET_DATA: i32 = 4;
    /// Replace a znode's data.
    pub const SET_DATA: i32 = 5;
    /// Read a znode's ACL.
    pub const GET_ACL: i32 = 6;
    /// Replace a znode's ACL.
    pub const SET_ACL: i32 = 7;
    /// List children.
    pub const GET_CHILDREN: i32 = 8;
    /// Sync with the leader.
    pub const SYNC: i32 = 9;
    /// Keep-alive.
    pub const PING: i32 = 11;
    /// List children plus the parent's stat.
    pub const GET_CHILDREN2: i32 = 12;
    /// Version check (only meaningful inside a multi).
    pub const CHECK: i32 = 13;
    /// Atomic transaction of write ops.
    pub const MULTI: i32 = 14;
    /// Create a znode; reply carries path and stat.
    pub const CREATE2: i32 = 15;
    /// Dynamic reconfiguration.
    pub const RECONFIG: i32 = 16;
    /// Ask whether a watch exists.
    pub const CHECK_WATCHES: i32 = 17;
    /// Remove watches.
    pub const REMOVE_WATCHES: i32 = 18;
    /// Create a container znode.
    pub const CREATE_CONTAINER: i32 = 19;
    /// Server-internal deletion of an empty container.
    pub const DELETE_CONTAINER: i32 = 20;
    /// Create a znode with a time-to-live.
    pub const CREATE_TTL: i32 = 21;
    /// Batch of read ops.
    pub const MULTI_READ: i32 = 22;
    /// Add authentication credentials.
    pub const AUTH: i32 = 100;
    /// Re-register watches after reconnecting.
    pub const SET_WATCHES: i32 = 101;
    /// SASL token exchange.
    pub const SASL: i32 = 102;
    /// List the session's ephemeral znodes.
    pub const GET_EPHEMERALS: i32 = 103;
    /// Count all descendants of a znode.
    pub const GET_ALL_CHILDREN_NUMBER: i32 = 104;
    /// Re-register watches, including persistent ones.
    pub const SET_WATCHES2: i32 = 105;
    /// Add a persistent (optionally recursive) watch.
    pub const ADD_WATCH: i32 = 106;
    /// Report the session's authenticated identities.
    pub const WHO_AM_I: i32 = 107;
    /// Session creation (server-internal; the wire form is `ConnectRequest`).
    pub const CREATE_SESSION: i32 = -10;
    /// Close the session.
    pub const CLOSE_SESSION: i32 = -11;
    /// Marks a failed sub-result inside a multi response.
    pub const ERROR: i32 = -1;
    /// ClickHouse Keeper: list children filtered by kind (persistent,
    /// ephemeral); the reply is a `getChildren2` reply.
    pub const FILTERED_LIST: i32 = 500;
    /// ClickHouse Keeper: assert that a znode (of a version) does not exist.
    pub const CHECK_NOT_EXISTS: i32 = 501;
    /// ClickHouse Keeper: create unless the znode exists (then succeed, no change).
    pub const CREATE_IF_NOT_EXISTS: i32 = 502;
    /// ClickHouse Keeper: delete a znode and its subtree, up to a node limit.
    pub const REMOVE_RECURSIVE: i32 = 503;

    /// ZooKeeper's camelCase name for an op code, for logs and diagnostics.
    pub fn name(op: i32) -> Option<&'static str> {
        Some(match op {
            NOTIFICATION => "notification",
            CREATE => "create",
            DELETE => "delete",
            EXISTS => "exists",
            GET_DATA => "getData",
            SET_DATA => "setData",
            GET_ACL => "getACL",
            SET_ACL => "setACL",
            GET_CHILDREN => "getChildren",
            SYNC => "sync",
            PING => "ping",
            GET_CHILDREN2 => "getChildren2",
            CHECK => "check",
            MULTI => "multi",
            CREATE2 => "create2",
            RECONFIG => "reconfig",
            CHECK_WATCHES => "checkWatches",
            REMOVE_WATCHES => "removeWatches",
            CREATE_CONTAINER => "createContainer",
            DELETE_CONTAINER => "deleteContainer",
            CREATE_TTL => "createTTL",
            MULTI_READ => "multiRead",
            AUTH => "auth",
            SET_WATCHES => "setWatches",
            SASL => "sasl",
            GET_EPHEMERALS => "getEphemerals",
            GET_ALL_CHILDREN_NUMBER => "getAllChildrenNumber",
            SET_WATCHES2 => "setWatches2",
            ADD_WATCH => "addWatch",
            WHO_AM_I => "whoAmI",
            CREATE_SESSION => "createSession",
            CLOSE_SESSION => "closeSession",
            ERROR => "error",
            FILTERED_LIST => "filteredList",
            CHECK_NOT_EXISTS => "checkNotExists",
            CREATE_IF_NOT_EXISTS => "createIfNotExists",
            REMOVE_RECURSIVE => "removeRecursive",
            _ => return None,
        })
    }
}

/// Reserved `xid`s that mark packets which are not replies to a numbered
/// request (ZooKeeper `ClientCnxn`).
pub mod xid {
    /// Watch notification sent by the server.
    pub const NOTIFICATION: i32 = -1;
    /// Ping and its reply.
    pub const PING: i32 = -2;
    /// Auth packet and its reply.
    pub const AUTH: i32 = -4;
    /// SetWatches / SetWatches2 sent while re-establishing a session.
    ///
    /// The Java client 3.8 assigns this in `primeConnection`, but its socket
    /// layer then overwrites it with a regular xid (only ping and auth keep
    /// their reserved xids), so servers must accept SetWatches with any xid
    /// and echo whatever they received.
    pub const SET_WATCHES: i32 = -8;
}

/// ACL permission bits (ZooKeeper `ZooDefs.Perms`).
pub mod perms {
    /// Read data and list children.
    pub const READ: i32 = 1;
    /// Set data.
    pub const WRITE: i32 = 2;
    /// Create children.
    pub const CREATE: i32 = 4;
    /// Delete children.
    pub const DELETE: i32 = 8;
    /// Set ACLs.
    pub const ADMIN: i32 = 16;
    /// Every permission.
    pub const ALL: i32 = READ | WRITE | CREATE | DELETE | ADMIN;
}

/// Declares a fieldless `#[repr(i32)]` enum with its wire values and
/// ZooKeeper's Java constant names, plus lossless conversions.
macro_rules! int_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $value:literal => $java:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum $name {
            $($(#[$vmeta])* $variant = $value,)*
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),*];

            /// The value sent on the wire.
            pub fn code(self) -> i32 {
                self as i32
            }

            /// Maps a wire value back to a variant; `None` if unknown.
            pub fn from_i32(value: i32) -> Option<Self> {
                match value {
                    $($value => Some(Self::$variant),)*
                    _ => None,
                }
            }

            /// The name of the matching constant in ZooKeeper's Java API.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $java,)*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl From<$name> for i32 {
            fn from(value: $name) -> i32 {
                value.code()
            }
        }
    };
}

int_enum! {
    /// Result codes carried in `ReplyHeader.err` (ZooKeeper `KeeperException.Code`).
    pub enum ErrorCode {
        /// Success.
        Ok = 0 => "OK",
        /// Generic server-side failure.
        SystemError = -1 => "SYSTEMERROR",
        /// A runtime inconsistency was found.
        RuntimeInconsistency = -2 => "RUNTIMEINCONSISTENCY",
        /// A data inconsistency was found.
        DataInconsistency = -3 => "DATAINCONSISTENCY",
        /// Connection to the server has been lost.
        ConnectionLoss = -4 => "CONNECTIONLOSS",
        /// Error while (de)serializing data.
        MarshallingError = -5 => "MARSHALLINGERROR",
        /// Operation is not implemented.
        Unimplemented = -6 => "UNIMPLEMENTED",
        /// Operation timed out.
        OperationTimeout = -7 => "OPERATIONTIMEOUT",
        /// Invalid arguments.
        BadArguments = -8 => "BADARGUMENTS",
        /// Unknown session (internal).
        UnknownSession = -12 => "UNKNOWNSESSION",
        /// No quorum of the new config is connected.
        NewConfigNoQuorum = -13 => "NEWCONFIGNOQUORUM",
        /// Another reconfiguration is in progress.
        ReconfigInProgress = -14 => "RECONFIGINPROGRESS",
        /// Generic API error (base of the codes below).
        ApiError = -100 => "APIERROR",
        /// Node does not exist.
        NoNode = -101 => "NONODE",
        /// Not authorized.
        NoAuth = -102 => "NOAUTH",
        /// Version conflict.
        BadVersion = -103 => "BADVERSION",
        /// Ephemeral nodes may not have children.
        NoChildrenForEphemerals = -108 => "NOCHILDRENFOREPHEMERALS",
        /// Node already exists.
        NodeExists = -110 => "NODEEXISTS",
        /// Node has children.
        NotEmpty = -111 => "NOTEMPTY",
        /// Session has expired.
        SessionExpired = -112 => "SESSIONEXPIRED",
        /// Invalid callback.
        InvalidCallback = -113 => "INVALIDCALLBACK",
        /// Invalid ACL.
        InvalidAcl = -114 => "INVALIDACL",
        /// Client authentication failed.
        AuthFailed = -115 => "AUTHFAILED",
        /// Session moved to another server.
        SessionMoved = -118 => "SESSIONMOVED",
        /// State-changing request sent to a read-only server.
        NotReadOnly = -119 => "NOTREADONLY",
        /// Ephemeral node requested on a local session.
        EphemeralOnLocalSession = -120 => "EPHEMERALONLOCALSESSION",
        /// The watcher to remove or check does not exist.
        NoWatcher = -121 => "NOWATCHER",
        /// Request did not complete in time.
        RequestTimeout = -122 => "REQUESTTIMEOUT",
        /// Reconfiguration is disabled.
        ReconfigDisabled = -123 => "RECONFIGDISABLED",
        /// Session closed because SASL authentication is required.
        SessionClosedRequireSaslAuth = -124 => "SESSIONCLOSEDREQUIRESASLAUTH",
        /// A quota was exceeded.
        QuotaExceeded = -125 => "QUOTAEXCEEDED",
        /// Request was throttled under load.
        ThrottledOp = -127 => "THROTTLEDOP",
    }
}

impl ErrorCode {
    /// Maps a wire value to a code; `None` for values ZooKeeper does not define.
    pub fn from_code(code: i32) -> Option<Self> {
        Self::from_i32(code)
    }

    /// Human-readable text, taken from `KeeperException.getCodeMessage`
    /// where ZooKeeper defines one (it has none for `UnknownSession` and
    /// `RequestTimeout`, which get a descriptive text here instead).
    pub fn message(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::SystemError => "SystemError",
            Self::RuntimeInconsistency => "RuntimeInconsistency",
            Self::DataInconsistency => "DataInconsistency",
            Self::ConnectionLoss => "ConnectionLoss",
            Self::MarshallingError => "MarshallingError",
            Self::Unimplemented => "Unimplemented",
            Self::OperationTimeout => "OperationTimeout",
            Self::BadArguments => "BadArguments",
            Self::UnknownSession => "UnknownSession",
            Self::NewConfigNoQuorum => "NewConfigNoQuorum",
            Self::ReconfigInProgress => "ReconfigInProgress",
            Self::ApiError => "APIError",
            Self::NoNode => "NoNode",
            Self::NoAuth => "NoAuth",
            Self::BadVersion => "BadVersion",
            Self::NoChildrenForEphemerals => "NoChildrenForEphemerals",
            Self::NodeExists => "NodeExists",
            Self::NotEmpty => "Directory not empty",
            Self::SessionExpired => "Session expired",
            Self::InvalidCallback => "Invalid callback",
            Self::InvalidAcl => "InvalidACL",
            Self::AuthFailed => "AuthFailed",
            Self::SessionMoved => "Session moved",
            Self::NotReadOnly => "Not a read-only call",
            Self::EphemeralOnLocalSession => "Ephemeral node on local session",
            Self::NoWatcher => "No such watcher",
            Self::RequestTimeout => "Request timeout",
            Self::ReconfigDisabled => "Reconfig is disabled",
            Self::SessionClosedRequireSaslAuth => {
                "Session closed because client failed to authenticate"
            }
            Self::QuotaExceeded => "Quota has exceeded",
            Self::ThrottledOp => "Op throttled due to high load",
        }
    }
}

int_enum! {
    /// The kind of change a watch notification reports (`Watcher.Event.EventType`).
    pub enum EventType {
        /// Session state change, not a znode event.
        None = -1 => "None",
        /// A watched znode was created.
        NodeCreated = 1 => "NodeCreated",
        /// A watched znode was deleted.
        NodeDeleted = 2 => "NodeDeleted",
        /// A watched znode's data changed.
        NodeDataChanged = 3 => "NodeDataChanged",
        /// A watched znode's children changed.
        NodeChildrenChanged = 4 => "NodeChildrenChanged",
        /// A data watch was removed.
        DataWatchRemoved = 5 => "DataWatchRemoved",
        /// A child watch was removed.
        ChildWatchRemoved = 6 => "ChildWatchRemoved",
        /// A persistent watch was removed.
        PersistentWatchRemoved = 7 => "PersistentWatchRemoved",
    }
}

int_enum! {
    /// Session state reported in watch notifications (`Watcher.Event.KeeperState`).
    pub enum KeeperState {
        /// Not connected.
        Disconnected = 0 => "Disconnected",
        /// Connected to a read-write server.
        SyncConnected = 3 => "SyncConnected",
        /// Authentication failed.
        AuthFailed = 4 => "AuthFailed",
        /// Connected to a read-only server.
        ConnectedReadOnly = 5 => "ConnectedReadOnly",
        /// SASL authentication succeeded.
        SaslAuthenticated = 6 => "SaslAuthenticated",
        /// Session closed by the client.
        Closed = 7 => "Closed",
        /// Session expired.
        Expired = -112 => "Expired",
    }
}

int_enum! {
    /// Znode creation mode, carried in `CreateRequest.flags` (`CreateMode`).
    pub enum CreateMode {
        /// Survives the session.
        Persistent = 0 => "PERSISTENT",
        /// Deleted when the session ends.
        Ephemeral = 1 => "EPHEMERAL",
        /// Persistent with a monotonically increasing suffix.
        PersistentSequential = 2 => "PERSISTENT_SEQUENTIAL",
        /// Ephemeral with a monotonically increasing suffix.
        EphemeralSequential = 3 => "EPHEMERAL_SEQUENTIAL",
        /// Deleted by the server once its last child is gone.
        Container = 4 => "CONTAINER",
        /// Persistent, deleted after a TTL without children or changes.
        PersistentWithTtl = 5 => "PERSISTENT_WITH_TTL",
        /// Sequential variant of [`CreateMode::PersistentWithTtl`].
        PersistentSequentialWithTtl = 6 => "PERSISTENT_SEQUENTIAL_WITH_TTL",
    }
}

impl CreateMode {
    /// Decodes `CreateRequest.flags`; `None` for flags ZooKeeper rejects.
    pub fn from_flags(flags: i32) -> Option<Self> {
        Self::from_i32(flags)
    }

    /// The value for `CreateRequest.flags`.
    pub fn flags(self) -> i32 {
        self.code()
    }

    /// Whether the znode is bound to the creating session.
    pub fn is_ephemeral(self) -> bool {
        matches!(self, Self::Ephemeral | Self::EphemeralSequential)
    }

    /// Whether the server appends a sequence suffix to the path.
    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            Self::PersistentSequential
                | Self::EphemeralSequential
                | Self::PersistentSequentialWithTtl
        )
    }

    /// Whether this is a container znode.
    pub fn is_container(self) -> bool {
        self == Self::Container
    }

    /// Whether the znode carries a time-to-live.
    pub fn is_ttl(self) -> bool {
        matches!(
            self,
            Self::PersistentWithTtl | Self::PersistentSequentialWithTtl
        )
    }
}

int_enum! {
    /// Mode of an `addWatch` request (`AddWatchMode`).
    pub enum AddWatchMode {
        /// Watch the node's data and children; survives triggering.
        Persistent = 0 => "PERSISTENT",
        /// Like `Persistent`, for the whole subtree.
        PersistentRecursive = 1 => "PERSISTENT_RECURSIVE",
    }
}

int_enum! {
    /// Watch kind in `checkWatches` / `removeWatches` (`Watcher.WatcherType`).
    pub enum WatcherType {
        /// Child watches.
        Children = 1 => "Children",
        /// Data and exists watches.
        Data = 2 => "Data",
        /// Any kind of watch.
        Any = 3 => "Any",
        /// Persistent watches.
        Persistent = 4 => "Persistent",
        /// Persistent recursive watches.
        PersistentRecursive = 5 => "PersistentRecursive",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_round_trip_and_are_named_like_java() {
        for &code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(code.code()), Some(code));
        }
        assert_eq!(ErrorCode::ALL.len(), 32);
        assert_eq!(ErrorCode::NoNode.code(), -101);
        assert_eq!(ErrorCode::NoNode.name(), "NONODE");
        assert_eq!(ErrorCode::NoNode.to_string(), "NONODE");
        assert_eq!(ErrorCode::NotEmpty.message(), "Directory not empty");
        assert_eq!(ErrorCode::from_code(-9), None);
        assert_eq!(i32::from(ErrorCode::ThrottledOp), -127);
    }

    #[test]
    fn create_mode_flags() {
        for &mode in CreateMode::ALL {
            assert_eq!(CreateMode::from_flags(mode.flags()), Some(mode));
        }
        assert_eq!(CreateMode::from_flags(7), None);
        assert_eq!(CreateMode::from_flags(-1), None);
        let c = CreateMode::Container;
        assert!(c.is_container() && !c.is_ephemeral() && !c.is_sequential() && !c.is_ttl());
        let t = CreateMode::PersistentSequentialWithTtl;
        assert!(t.is_ttl() && t.is_sequential() && !t.is_ephemeral());
        let e = CreateMode::EphemeralSequential;
        assert!(e.is_ephemeral() && e.is_sequential() && !e.is_ttl());
    }

    #[test]
    fn enums_round_trip() {
        for &e in EventType::ALL {
            assert_eq!(EventType::from_i32(e.code()), Some(e));
        }
        for &s in KeeperState::ALL {
            assert_eq!(KeeperState::from_i32(s.code()), Some(s));
        }
        for &w in WatcherType::ALL {
            assert_eq!(WatcherType::from_i32(w.code()), Some(w));
        }
        for &m in AddWatchMode::ALL {
            assert_eq!(AddWatchMode::from_i32(m.code()), Some(m));
        }
        assert_eq!(KeeperState::Expired.code(), -112);
        assert_eq!(WatcherType::from_i32(0), None);
    }

    #[test]
    fn opcode_names_and_perms() {
        assert_eq!(opcode::name(opcode::CREATE_TTL), Some("createTTL"));
        assert_eq!(opcode::name(opcode::CLOSE_SESSION), Some("closeSession"));
        assert_eq!(opcode::name(10), None);
        assert_eq!(
            opcode::name(opcode::REMOVE_RECURSIVE),
            Some("removeRecursive")
        );
        assert_eq!(opcode::name(504), None);
        assert_eq!(perms::ALL, 31);
    }
}
