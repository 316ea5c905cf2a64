//! keel-client: an asynchronous ZooKeeper client (speaking the wire
//! protocol through `keel-jute`) and a zkCli-compatible command line.
//!
//! ```no_run
//! # async fn demo() -> Result<(), keel_client::ClientError> {
//! use keel_client::{open_acl_unsafe, Client, CreateMode};
//! let zk = Client::connect("127.0.0.1:2181", 30_000).await?;
//! zk.create("/a", b"hello", &open_acl_unsafe(), CreateMode::Persistent).await?;
//! let (data, stat) = zk.get_data("/a", false).await?;
//! # let _ = (data, stat);
//! zk.close().await?;
//! # Ok(()) }
//! ```

pub mod cli;
mod client;
mod error;
mod proto;
pub mod tls;

pub use client::{
    multi_error, Client, WatchedEvent, AUTH_TIMEOUT, CLOSE_TIMEOUT, CONNECT_TIMEOUT, DEFAULT_PORT,
    MAX_IN_FLIGHT, MAX_REPLY_FRAME_BYTES, PING_TIMEOUT, REQUEST_QUEUE_CAPACITY, REQUEST_TIMEOUT,
    SYNC_TIMEOUT, WRITE_BATCH_BYTES,
};
pub use error::ClientError;
/// The codec crate, re-exported so callers use the very same types.
pub use keel_jute as jute;
pub use proto::{
    perms, Acl, AddWatchMode, ClientInfo, CreateMode, ErrorCode, EventType, Id, KeeperState,
    MultiOp, MultiResult, ReplyHeader, Request, Response, Stat, WatcherType,
};
pub use tls::{ClientTls, SendStream, TlsOptions};

use base64::Engine as _;
use sha1::{Digest as _, Sha1};

/// The ACL id ZooKeeper's `DigestAuthenticationProvider.generateDigest`
/// makes for a user: `user:base64(sha1("user:password"))`.
pub fn digest_acl_id(user: &str, password: &str) -> String {
    let digest = Sha1::digest(format!("{user}:{password}").as_bytes());
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// `ZooDefs.Ids.OPEN_ACL_UNSAFE`: world:anyone with every permission.
pub fn open_acl_unsafe() -> Vec<Acl> {
    vec![Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "world".into(),
            id: "anyone".into(),
        },
    }]
}

/// `ZooDefs.Ids.READ_ACL_UNSAFE`: world:anyone may read.
pub fn read_acl_unsafe() -> Vec<Acl> {
    vec![Acl {
        perms: perms::READ,
        id: Id {
            scheme: "world".into(),
            id: "anyone".into(),
        },
    }]
}

/// `ZooDefs.Ids.CREATOR_ALL_ACL`: every permission for the identities the
/// creating session authenticated as.
pub fn creator_all_acl() -> Vec<Acl> {
    vec![Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "auth".into(),
            id: String::new(),
        },
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_matches_zookeeper() {
        // Value produced by ZooKeeper 3.8 (`addauth digest user:pass`, then
        // `create /d data auth::crdwa`, then `getAcl /d`).
        assert_eq!(
            digest_acl_id("user", "pass"),
            "user:smGaoVKd/cQkjm7b88GyorAUz20="
        );
    }
}
