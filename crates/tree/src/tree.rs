//! The replicated data tree: nodes, Stat bookkeeping, sessions and their
//! ephemerals, containers and TTL nodes. Pure and deterministic: the same
//! transactions in the same order give the same tree on every node.
//!
//! Every collection is a persistent (structurally shared) map, so cloning
//! the whole tree is O(1): a multi runs on a clone and is dropped on
//! failure, and a snapshot freezes a clone while service goes on.

use std::hash::BuildHasherDefault;
use std::sync::Arc;

use keel_jute::{Acl, EventType, Stat};

use crate::path;

/// Deterministic hashing: iteration order must not depend on the process.
pub(crate) type Hasher = BuildHasherDefault<std::collections::hash_map::DefaultHasher>;
pub(crate) type NodeMap = imbl::HashMap<Arc<str>, Node, Hasher>;

/// ZooKeeper's CONTAINER_EPHEMERAL_OWNER (Long.MIN_VALUE).
pub const CONTAINER_OWNER: i64 = i64::MIN;
/// High byte marking an extended ephemeral owner (TTL nodes).
pub const EXTENDED_OWNER_MASK: i64 = 0xff00_0000_0000_0000u64 as i64;
/// Low 40 bits hold a TTL node's ttl in milliseconds.
pub const TTL_VALUE_MASK: i64 = 0x0000_00ff_ffff_ffff;
/// Bits between the marker and the value: zero for TTL, the only extended type.
const EXTENDED_RESERVED_MASK: i64 = 0x00ff_ff00_0000_0000;

/// The system nodes ZooKeeper creates and refuses to delete.
pub const SYSTEM_PATHS: [&str; 4] = ["/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"];

/// What kind of node an ephemeralOwner value denotes (ZooKeeper's EphemeralType).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerKind {
    Persistent,
    Ephemeral(i64),
    Container,
    Ttl(i64),
}

pub fn owner_kind(ephemeral_owner: i64) -> OwnerKind {
    if ephemeral_owner == 0 {
        OwnerKind::Persistent
    } else if ephemeral_owner == CONTAINER_OWNER {
        OwnerKind::Container
    } else if ephemeral_owner & EXTENDED_OWNER_MASK == EXTENDED_OWNER_MASK
        && ephemeral_owner & EXTENDED_RESERVED_MASK == 0
    {
        OwnerKind::Ttl(ephemeral_owner & TTL_VALUE_MASK)
    } else {
        OwnerKind::Ephemeral(ephemeral_owner)
    }
}

pub fn ttl_owner(ttl_ms: i64) -> Option<i64> {
    if ttl_ms <= 0 || ttl_ms > TTL_VALUE_MASK {
        return None;
    }
    Some(EXTENDED_OWNER_MASK | ttl_ms)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Persisted Stat fields; data_length and num_children are kept current.
    pub stat: Stat,
    pub data: Option<Arc<[u8]>>,
    pub acl: Arc<[Acl]>,
    pub children: imbl::OrdSet<Arc<str>>,
}

/// A change a watch may care about, in the order ZooKeeper fires them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub path: String,
    pub event_type: EventType,
}

#[derive(Clone)]
pub struct DataTree {
    pub(crate) nodes: NodeMap,
    pub(crate) sessions: imbl::OrdMap<i64, u32>,
    pub(crate) ephemerals: imbl::OrdMap<i64, imbl::OrdSet<Arc<str>>>,
    pub(crate) containers: imbl::OrdSet<Arc<str>>,
    pub(crate) ttls: imbl::OrdSet<Arc<str>>,
    pub(crate) last_zxid: i64,
    /// Per origin node, the highest proposal sequence applied: a proposal
    /// resent after a leader change is recognised and applied once.
    pub(crate) origins: imbl::OrdMap<u64, u64>,
    /// Raft index of the last applied entry (0 = none): a snapshot's position.
    pub(crate) applied_index: u64,
    pub(crate) applied_term: u64,
    /// Sum of node digests: equal trees have equal digests (replica checks).
    pub(crate) digest: u64,
}

impl Default for DataTree {
    fn default() -> Self {
        Self::new()
    }
}

impl DataTree {
    /// A fresh tree: /, /zookeeper, /zookeeper/quota, /zookeeper/config,
    /// all with zxid 0 and time 0, like ZooKeeper's.
    pub fn new() -> DataTree {
        let mut tree = DataTree {
            nodes: NodeMap::default(),
            sessions: imbl::OrdMap::new(),
            ephemerals: imbl::OrdMap::new(),
            containers: imbl::OrdSet::new(),
            ttls: imbl::OrdSet::new(),
            last_zxid: 0,
            origins: imbl::OrdMap::new(),
            applied_index: 0,
            applied_term: 0,
            digest: 0,
        };
        let open: Arc<[Acl]> = crate::acl::open_acl_unsafe().into();
        tree.put_node("/".into(), empty_node(open.clone()));
        // ZooKeeper 3.8's quirk, as its clients see it: /zookeeper/config is
        // read-only with aversion -1.
        tree.insert_child("/zookeeper", empty_node(open.clone()));
        tree.insert_child("/zookeeper/quota", empty_node(open));
        let read_only: Arc<[Acl]> = vec![Acl {
            perms: keel_jute::perms::READ,
            id: keel_jute::Id {
                scheme: "world".into(),
                id: "anyone".into(),
            },
        }]
        .into();
        let mut config = empty_node(read_only);
        config.stat.aversion = -1;
        tree.insert_child("/zookeeper/config", config);
        tree
    }

    /// Adds `node` at `path` under its existing parent (no Stat changes to
    /// the parent: used for system nodes and snapshot loading).
    fn insert_child(&mut self, path: &str, node: Node) {
        let (parent, name) = path::split(path).expect("absolute path");
        let parent = path::parent_key(parent);
        let mut parent_node = self.nodes.get(parent).expect("parent exists").clone();
        parent_node.children.insert(name.into());
        parent_node.stat.num_children = parent_node.children.len() as i32;
        self.put_node(parent.into(), parent_node);
        self.put_node(path.into(), node);
    }

    pub fn last_zxid(&self) -> i64 {
        self.last_zxid
    }

    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    pub fn applied_term(&self) -> u64 {
        self.applied_term
    }

    /// Records the Raft position of the entry whose transactions were just applied.
    pub fn set_applied(&mut self, index: u64, term: u64) {
        assert!(
            index >= self.applied_index,
            "applied index went back: {index} < {}",
            self.applied_index
        );
        self.applied_index = index;
        self.applied_term = term;
    }

    /// The highest proposal sequence applied from `origin` (0 = none).
    pub fn origin_applied(&self, origin: u64) -> u64 {
        self.origins.get(&origin).copied().unwrap_or(0)
    }

    pub fn digest(&self) -> u64 {
        self.digest
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn node(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    pub fn session_timeout_ms(&self, session_id: i64) -> Option<u32> {
        self.sessions.get(&session_id).copied()
    }

    /// Live sessions and their negotiated timeouts, sorted by id.
    pub fn sessions(&self) -> Vec<(i64, u32)> {
        self.sessions
            .iter()
            .map(|(id, timeout)| (*id, *timeout))
            .collect()
    }

    pub fn ephemerals_of(&self, session_id: i64) -> Vec<String> {
        match self.ephemerals.get(&session_id) {
            Some(paths) => paths.iter().map(|p| p.to_string()).collect(),
            None => Vec::new(),
        }
    }

    pub fn ephemeral_count(&self) -> usize {
        self.ephemerals.values().map(|paths| paths.len()).sum()
    }

    /// Approximate bytes of node data (mntr's zk_approximate_data_size).
    pub fn approximate_data_size(&self) -> u64 {
        self.nodes
            .iter()
            .map(|(path, node)| {
                path.len() as u64 + node.data.as_ref().map_or(0, |d| d.len() as u64)
            })
            .sum()
    }

    /// Every path with its Stat, sorted (dump, tests, replica comparison).
    pub fn paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self.nodes.keys().map(|p| p.to_string()).collect();
        paths.sort();
        paths
    }

    /// Containers with no children that had one once, and TTL nodes with no
    /// children unmodified for longer than their ttl: ZooKeeper's
    /// ContainerManager candidates.
    pub fn reap_candidates(&self, now_ms: i64) -> Vec<String> {
        let mut candidates = Vec::new();
        for path in self.containers.iter() {
            if let Some(node) = self.nodes.get(path) {
                if node.children.is_empty() && node.stat.cversion > 0 {
                    candidates.push(path.to_string());
                }
            }
        }
        for path in self.ttls.iter() {
            if let Some(node) = self.nodes.get(path) {
                if let OwnerKind::Ttl(ttl_ms) = owner_kind(node.stat.ephemeral_owner) {
                    if node.children.is_empty()
                        && ttl_ms != 0
                        && now_ms.saturating_sub(node.stat.mtime) > ttl_ms
                    {
                        candidates.push(path.to_string());
                    }
                }
            }
        }
        candidates
    }

    // ---- low-level node edits: every change goes through these two, so the
    // digest and the container/ttl/ephemeral indexes stay exact.

    pub(crate) fn put_node(&mut self, path: Arc<str>, mut node: Node) {
        node.stat.num_children = node.children.len() as i32;
        node.stat.data_length = node.data.as_ref().map_or(0, |d| d.len() as i32);
        let added = node_digest(&path, &node);
        if let Some(old) = self.nodes.insert(path.clone(), node.clone()) {
            self.digest = self.digest.wrapping_sub(node_digest(&path, &old));
        } else {
            self.index_owner(&path, node.stat.ephemeral_owner, true);
        }
        self.digest = self.digest.wrapping_add(added);
    }

    pub(crate) fn remove_node(&mut self, path: &str) -> Option<Node> {
        let old = self.nodes.remove(path)?;
        self.digest = self.digest.wrapping_sub(node_digest(path, &old));
        self.index_owner(path, old.stat.ephemeral_owner, false);
        Some(old)
    }

    fn index_owner(&mut self, path: &str, ephemeral_owner: i64, present: bool) {
        let key: Arc<str> = path.into();
        match owner_kind(ephemeral_owner) {
            OwnerKind::Persistent => {}
            OwnerKind::Container => toggle(&mut self.containers, key, present),
            OwnerKind::Ttl(_) => toggle(&mut self.ttls, key, present),
            OwnerKind::Ephemeral(session_id) => {
                let mut paths = self
                    .ephemerals
                    .get(&session_id)
                    .cloned()
                    .unwrap_or_default();
                toggle(&mut paths, key, present);
                if paths.is_empty() {
                    self.ephemerals.remove(&session_id);
                } else {
                    self.ephemerals.insert(session_id, paths);
                }
            }
        }
    }

    /// The client-visible Stat of a node, as ZooKeeper's DataNode.copyStat
    /// reports it: the stored cversion counts child creates, clients see
    /// creates + deletes = 2 × creates − children; containers and TTL nodes
    /// show ephemeralOwner 0.
    pub fn stat_of(node: &Node) -> Stat {
        let mut stat = node.stat.clone();
        stat.cversion = stat
            .cversion
            .wrapping_mul(2)
            .wrapping_sub(stat.num_children);
        if !matches!(owner_kind(stat.ephemeral_owner), OwnerKind::Ephemeral(_)) {
            stat.ephemeral_owner = 0;
        }
        stat
    }

    /// Invariants of one node: counts match, ephemerals never have children.
    pub(crate) fn check_invariants_of(&self, path: &str) {
        let Some(node) = self.nodes.get(path) else {
            return;
        };
        assert_eq!(
            node.stat.num_children as usize,
            node.children.len(),
            "{path}"
        );
        if let OwnerKind::Ephemeral(_) = owner_kind(node.stat.ephemeral_owner) {
            assert!(node.children.is_empty(), "ephemeral {path} has children");
        }
    }
}

fn toggle(set: &mut imbl::OrdSet<Arc<str>>, key: Arc<str>, present: bool) {
    if present {
        set.insert(key);
    } else {
        set.remove(&key);
    }
}

fn empty_node(acl: Arc<[Acl]>) -> Node {
    Node {
        stat: Stat::default(),
        data: Some(Arc::from(&[][..])),
        acl,
        children: imbl::OrdSet::new(),
    }
}

/// FNV-1a over the path, data and persisted Stat: cheap, stable across
/// processes and versions (it goes into replica comparisons).
pub(crate) fn node_digest(path: &str, node: &Node) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for byte in bytes {
            hash ^= *byte as u64;
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    feed(path.as_bytes());
    feed(&[0xff]);
    match &node.data {
        Some(data) => {
            feed(&(data.len() as u64).to_be_bytes());
            feed(data);
        }
        None => feed(&u64::MAX.to_be_bytes()),
    }
    let s = &node.stat;
    for value in [
        s.czxid,
        s.mzxid,
        s.ctime,
        s.mtime,
        s.ephemeral_owner,
        s.pzxid,
    ] {
        feed(&value.to_be_bytes());
    }
    for value in [s.version, s.cversion, s.aversion] {
        feed(&value.to_be_bytes());
    }
    hash
}

pub(crate) fn event(path: &str, event_type: EventType) -> Event {
    Event {
        path: path.to_string(),
        event_type,
    }
}
