//! ClickHouse Keeper's system znodes: `/keeper` with `api_version` and
//! `feature_flags`, which ClickHouse's client reads right after connecting
//! to learn which protocol extensions the server has.
//!
//! Keel serves them as read-only virtual nodes: they are not in the tree,
//! so snapshots, digests, node counts and every listing of `/` are exactly
//! ZooKeeper's (a ZooKeeper client that lists `/` sees no `keeper`; the
//! compatibility suites compare those listings with a real ZooKeeper).
//! Reads of the three paths answer as for an ordinary znode with zero
//! zxids and times; every write at or under `/keeper` is refused with
//! BadArguments, as ClickHouse Keeper refuses them. Data written by an
//! older Keel may hold a real `/keeper` znode: while it exists it is
//! ordinary data and the virtual nodes are absent (a ClickHouse client
//! then finds no feature flags and speaks plain ZooKeeper).

use keel_jute::{perms, Acl, ErrorCode, Id, Request, Response, Stat};

use crate::tree::DataTree;

/// ClickHouse Keeper's system path.
pub const KEEPER_PATH: &str = "/keeper";
/// Holds the API version in decimal text (read by clients that predate
/// feature flags).
pub const API_VERSION_PATH: &str = "/keeper/api_version";
/// Holds the feature-flag bit string.
pub const FEATURE_FLAGS_PATH: &str = "/keeper/feature_flags";

/// ClickHouse's `KeeperApiVersion` 3 (`WITH_CHECK_NOT_EXISTS`): filtered
/// list, multiRead and checkNotExists, all of which Keel implements. (A
/// ClickHouse Keeper of today writes 2 here, frozen when feature flags
/// replaced the version; clients read this only if `feature_flags` is
/// missing, which it never is on Keel.)
pub const API_VERSION: &str = "3";

/// ClickHouse's `KeeperFeatureFlag` enum in declaration order (a flag's
/// bit index is its position) and whether Keel implements it. Names are
/// the enum's, lower-cased, as `ftfl` prints them.
pub const FEATURE_FLAGS: [(&str, bool); 11] = [
    ("filtered_list", true),
    ("multi_read", true),
    ("check_not_exists", true),
    ("create_if_not_exists", true),
    ("remove_recursive", true),
    ("multi_watches", false),
    ("check_stat", false),
    ("persistent_watches", false),
    ("create_with_stats", false),
    ("try_remove", false),
    ("list_with_stat_and_data", false),
];

/// The content of `/keeper/feature_flags`: one bit per flag, flag `n` in
/// byte `n / 8` at bit `7 - n % 8` (the most significant bit first), as
/// many bytes as the highest flag needs (ClickHouse's KeeperFeatureFlags).
pub fn feature_flags_bytes() -> Vec<u8> {
    let mut bytes = vec![0u8; (FEATURE_FLAGS.len() - 1) / 8 + 1];
    for (index, (_, enabled)) in FEATURE_FLAGS.iter().enumerate() {
        if *enabled {
            bytes[index / 8] |= 1 << (7 - index % 8);
        }
    }
    bytes
}

/// The `ftfl` four-letter word: `name<TAB>0|1` per flag, in enum order.
pub fn ftfl() -> String {
    FEATURE_FLAGS
        .iter()
        .map(|(name, enabled)| format!("{name}\t{}\n", u8::from(*enabled)))
        .collect()
}

/// Whether `path` is `/keeper` or under it (ClickHouse's matchPath: a
/// trailing slash does not matter).
pub fn is_keeper_path(path: &str) -> bool {
    let path = path.strip_suffix('/').unwrap_or(path);
    path == KEEPER_PATH
        || path
            .strip_prefix(KEEPER_PATH)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether a read and its answer are ClickHouse's client learning the
/// server's extensions: a successful getData of `feature_flags` (or of
/// `api_version`, read by clients older than feature flags). ClickHouse's
/// client does that right after connecting, before any multiRead; no
/// ZooKeeper client reads these paths (ZooKeeper has no `/keeper`).
pub fn is_extension_probe(request: &Request, answer: &Result<Response, ErrorCode>) -> bool {
    matches!(
        (request, answer),
        (Request::GetData(r), Ok(Response::GetData(..)))
            if r.path == FEATURE_FLAGS_PATH || r.path == API_VERSION_PATH
    )
}

/// One of the virtual system nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemNode {
    /// `/keeper`.
    Keeper,
    /// `/keeper/api_version`.
    ApiVersion,
    /// `/keeper/feature_flags`.
    FeatureFlags,
}

impl SystemNode {
    /// The node at exactly `path`, if it is one of the three.
    pub fn at(path: &str) -> Option<SystemNode> {
        match path {
            KEEPER_PATH => Some(SystemNode::Keeper),
            API_VERSION_PATH => Some(SystemNode::ApiVersion),
            FEATURE_FLAGS_PATH => Some(SystemNode::FeatureFlags),
            _ => None,
        }
    }

    /// The node's data (never null).
    pub fn data(self) -> Vec<u8> {
        match self {
            SystemNode::Keeper => Vec::new(),
            SystemNode::ApiVersion => API_VERSION.as_bytes().to_vec(),
            SystemNode::FeatureFlags => feature_flags_bytes(),
        }
    }

    /// Child names, sorted as Keel lists children.
    pub fn children(self) -> &'static [&'static str] {
        match self {
            SystemNode::Keeper => &["api_version", "feature_flags"],
            SystemNode::ApiVersion | SystemNode::FeatureFlags => &[],
        }
    }

    /// Zero zxids, times and versions, like ZooKeeper's own system nodes.
    pub fn stat(self) -> Stat {
        Stat {
            data_length: self.data().len() as i32,
            num_children: self.children().len() as i32,
            ..Stat::default()
        }
    }

    /// Read-only to everyone (the writes are refused anyway).
    pub fn acl(self) -> Vec<Acl> {
        vec![Acl {
            perms: perms::READ,
            id: Id {
                scheme: "world".into(),
                id: "anyone".into(),
            },
        }]
    }
}

impl DataTree {
    /// Whether the virtual nodes are served: the data has no `/keeper`.
    pub fn keeper_nodes_served(&self) -> bool {
        self.resolve(KEEPER_PATH).is_none()
    }

    /// The virtual node at `path`, if served.
    pub fn system_node(&self, path: &str) -> Option<SystemNode> {
        let node = SystemNode::at(path)?;
        self.keeper_nodes_served().then_some(node)
    }

    /// BadArguments for a write at or under `/keeper` while it is served.
    pub(crate) fn refuse_keeper_write(&self, path: &str) -> Result<(), ErrorCode> {
        if is_keeper_path(path) && self.keeper_nodes_served() {
            return Err(ErrorCode::BadArguments);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_five_implemented_flags_are_the_top_five_bits_of_the_first_byte() {
        assert_eq!(feature_flags_bytes(), [0b1111_1000, 0]);
    }

    #[test]
    fn ftfl_lists_every_flag_in_enum_order() {
        let text = ftfl();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 11);
        assert_eq!(lines[0], "filtered_list\t1");
        assert_eq!(lines[4], "remove_recursive\t1");
        assert_eq!(lines[5], "multi_watches\t0");
        assert_eq!(lines[10], "list_with_stat_and_data\t0");
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn keeper_paths_match_as_clickhouse_matches_them() {
        for yes in ["/keeper", "/keeper/", "/keeper/api_version", "/keeper/x/y"] {
            assert!(is_keeper_path(yes), "{yes}");
        }
        for no in ["/", "/keeperx", "/kee", "/zookeeper", "keeper", "/a/keeper"] {
            assert!(!is_keeper_path(no), "{no}");
        }
    }

    #[test]
    fn only_a_successful_read_of_the_flags_or_version_is_a_probe() {
        let get = |path: &str| {
            Request::GetData(keel_jute::GetDataRequest {
                path: path.into(),
                watch: false,
            })
        };
        let found = Ok(Response::GetData(Some(vec![]), Stat::default()));
        assert!(is_extension_probe(&get(FEATURE_FLAGS_PATH), &found));
        assert!(is_extension_probe(&get(API_VERSION_PATH), &found));
        assert!(!is_extension_probe(&get(KEEPER_PATH), &found));
        assert!(!is_extension_probe(
            &get(FEATURE_FLAGS_PATH),
            &Err(ErrorCode::NoNode)
        ));
    }

    #[test]
    fn system_nodes_describe_themselves() {
        assert_eq!(SystemNode::at("/keeper"), Some(SystemNode::Keeper));
        assert_eq!(SystemNode::at("/keeper/x"), None);
        assert_eq!(SystemNode::ApiVersion.data(), b"3");
        assert_eq!(SystemNode::Keeper.stat().num_children, 2);
        assert_eq!(SystemNode::FeatureFlags.stat().data_length, 2);
        assert_eq!(SystemNode::FeatureFlags.stat().czxid, 0);
    }
}
