//! The replicated data tree: nodes, Stat bookkeeping, sessions and their
//! ephemerals, containers and TTL nodes. Pure and deterministic: the same
//! transactions in the same order give the same tree on every node.
//!
//! Storage is compact (store.rs): a node is a slot in an arena, found by
//! (parent id, name). Every change goes through four edits — `link`,
//! `unlink_slot`, `update`, and the undo of each — so the digest, the data
//! size, the owner indexes, a multi's undo journal and a running
//! snapshot's copy-on-write stay exact.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use keel_jute::{Acl, EventType, Stat};

use crate::path;
use crate::snapshot::SnapshotState;
use crate::store::{
    AclTable, Arena, Blob, Children, NodeId, PackedStat, PathIndex, Slot, NIL, ROOT,
};

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
/// ZooKeeper's configuration znode (ZooDefs.CONFIG_NODE).
pub const CONFIG_PATH: &str = "/zookeeper/config";

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

/// An owned copy of one node, for tests, tools and replica comparison
/// (the tree itself never stores nodes in this form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Persisted Stat fields; data_length and num_children are current.
    pub stat: Stat,
    pub data: Option<Vec<u8>>,
    pub acl: Vec<Acl>,
    /// Child names, sorted.
    pub children: Vec<String>,
}

/// A change a watch may care about, in the order ZooKeeper fires them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub path: String,
    pub event_type: EventType,
}

/// How to undo one edit of a multi that fails.
#[derive(Debug, Clone)]
pub(crate) enum Undo {
    Linked(NodeId),
    Unlinked(NodeId, Box<Slot>),
    Updated(NodeId, Box<(PackedStat, Option<Blob>, Option<u32>)>),
}

#[derive(Debug, Clone)]
pub struct DataTree {
    pub(crate) arena: Arena,
    pub(crate) index: PathIndex,
    pub(crate) acls: AclTable,
    pub(crate) node_count: u64,
    pub(crate) sessions: BTreeMap<i64, u32>,
    pub(crate) ephemerals: BTreeMap<i64, BTreeSet<NodeId>>,
    pub(crate) containers: BTreeSet<NodeId>,
    pub(crate) ttls: BTreeSet<NodeId>,
    pub(crate) last_zxid: i64,
    /// Raft index of the last applied entry (0 = none): a snapshot's position.
    pub(crate) applied_index: u64,
    pub(crate) applied_term: u64,
    /// Sum of node digests: equal trees have equal digests (replica checks).
    pub(crate) digest: u64,
    /// ZooKeeper's approximate data size: Σ path length + data length.
    pub(crate) data_size: u64,
    /// Heap bytes of blobs and child lists (keel_tree_bytes).
    pub(crate) heap_bytes: u64,
    /// The undo journal of the multi being applied.
    pub(crate) journal: Option<Vec<Undo>>,
    /// The snapshot being written, if any (copy-on-write state).
    pub(crate) snapshot: Option<SnapshotState>,
    /// Where each recently grown parent's last child was inserted.
    pub(crate) insert_hints: InsertHints,
    /// Recently resolved parent paths of creates.
    pub(crate) parents: ParentCache,
    /// Path facts (digest hash, length) of recently used parents.
    pub(crate) facts: FactsCache,
    /// The node of /zookeeper/quota, whose children say whether any quota
    /// is set (every write asks): a system node, never deleted, so its id
    /// holds for the tree's life. Set by `new` and by a snapshot's load
    /// (None if the snapshot had none: `quota_prefix` then resolves it).
    pub(crate) quota_root: Option<NodeId>,
}

/// Parent paths remembered for creates (direct-mapped by the path's hash).
pub const PARENT_CACHE_SLOTS: usize = 1024;

/// The node ids of recently resolved parent paths. A create resolves its
/// parent component by component, one index probe per level, and with
/// many writers the upper levels (a directory per client, a bucket per
/// lane) are each used once in hundreds of creates: cold in the cache,
/// three misses a level (the probe's control bytes, its bucket, the
/// node). Here the parent costs one hash of its path and one comparison.
///
/// An entry holds as long as no node was unlinked since it was made (a
/// path names the same node until that node is unlinked, and only an
/// unlinked node's id can be reused): `unlinked` counts unlinks, and an
/// entry made under an older count is ignored. Only a cache: `resolve`
/// finds the same node with or without it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ParentCache {
    /// (path, node, `unlinked` when made); empty until first used.
    slots: Vec<Option<(Box<str>, NodeId, u64)>>,
    unlinked: u64,
    hasher: hashbrown::DefaultHashBuilder,
}

impl ParentCache {
    fn slot_of(&self, path: &str) -> usize {
        std::hash::BuildHasher::hash_one(&self.hasher, path) as usize % PARENT_CACHE_SLOTS
    }

    fn get(&self, path: &str) -> Option<NodeId> {
        let (cached, id, made) = self.slots.get(self.slot_of(path))?.as_ref()?;
        (*made == self.unlinked && &**cached == path).then_some(*id)
    }

    fn put(&mut self, path: &str, id: NodeId) {
        if self.slots.is_empty() {
            self.slots.resize(PARENT_CACHE_SLOTS, None);
        }
        let slot = self.slot_of(path);
        self.slots[slot] = Some((path.into(), id, self.unlinked));
    }

    /// A node was unlinked: every entry may name a node that is gone.
    fn forget_all(&mut self) {
        self.unlinked += 1;
    }
}

/// Parents whose path facts are remembered (direct-mapped by id).
pub const FACTS_CACHE_SLOTS: usize = 1024;

/// The path facts (`DataTree::path_facts`: the FNV-1a of the path, its
/// length) of recently used parents. Every create, delete and setData
/// adds or changes a node's share of the digest, which hashes the node's
/// full path: from its parent's facts that is the hash carried over "/"
/// and the name (FNV-1a runs byte by byte along the path), where without
/// them it is a walk up every ancestor, a cache miss each, and a vector.
/// An entry holds under the same rule as `ParentCache`'s: a node's path
/// changes only when its id is unlinked and reused, so an entry made
/// before the latest unlink is ignored. Only a cache: the facts are the
/// same with or without it.
#[derive(Debug, Clone, Default)]
pub(crate) struct FactsCache {
    /// (parent, `ParentCache::unlinked` when made, path hash, path
    /// length); empty until first used.
    slots: Vec<(NodeId, u64, u64, u64)>,
}

impl FactsCache {
    fn get(&self, parent: NodeId, unlinked: u64) -> Option<(u64, u64)> {
        let (owner, made, hash, len) = *self.slots.get(parent as usize % FACTS_CACHE_SLOTS)?;
        (owner == parent && made == unlinked).then_some((hash, len))
    }

    fn put(&mut self, parent: NodeId, unlinked: u64, (hash, len): (u64, u64)) {
        if self.slots.is_empty() {
            self.slots.resize(FACTS_CACHE_SLOTS, (NIL, 0, 0, 0));
        }
        self.slots[parent as usize % FACTS_CACHE_SLOTS] = (parent, unlinked, hash, len);
    }
}

/// Parents whose last insert position is remembered (direct-mapped).
pub const INSERT_HINTS: usize = 1024;

/// (parent, position just after its last inserted child), by parent id
/// modulo INSERT_HINTS. Siblings are often created in an order where each
/// new name sorts right after the previous one (`n10`, `n11`, ... or
/// `key-a1`, `key-a2`): checking that spot costs two name comparisons
/// instead of a binary search whose every probe is a cache miss. Only a
/// hint: the position found is the same with or without it.
#[derive(Debug, Clone)]
pub(crate) struct InsertHints(Box<[(NodeId, u32)]>);

impl Default for InsertHints {
    fn default() -> Self {
        InsertHints(vec![(NIL, 0); INSERT_HINTS].into_boxed_slice())
    }
}

impl InsertHints {
    fn get(&self, parent: NodeId) -> Option<usize> {
        let (owner, position) = self.0[parent as usize % INSERT_HINTS];
        (owner == parent).then_some(position as usize)
    }

    fn set(&mut self, parent: NodeId, position: usize) {
        self.0[parent as usize % INSERT_HINTS] = (parent, position as u32);
    }
}

/// The first index at or after `from` whose child is not `before` the
/// name sought (`before` holds for a prefix of `children[from..]`, the
/// children being sorted): probes `from`, `from + 1`, `from + 3`, ... and
/// bisects the last step.
pub(crate) fn gallop(
    children: &Children<'_>,
    from: usize,
    before: impl Fn(NodeId) -> bool,
) -> usize {
    assert!(
        from <= children.len(),
        "hint {from} past {} children",
        children.len()
    );
    let mut low = from;
    let mut step = 1;
    while low < children.len() && before(children.get(low)) {
        let probe = low + step;
        if probe >= children.len() || !before(children.get(probe)) {
            let high = probe.min(children.len());
            return children.partition_point(low + 1, high, &before);
        }
        low = probe + 1;
        step *= 2;
    }
    low
}

impl Default for DataTree {
    fn default() -> Self {
        Self::new()
    }
}

impl DataTree {
    /// A tree with only the root (snapshot load fills in the rest).
    pub(crate) fn bare() -> DataTree {
        DataTree {
            arena: Arena::default(),
            index: PathIndex::default(),
            acls: AclTable::default(),
            node_count: 0,
            sessions: BTreeMap::new(),
            ephemerals: BTreeMap::new(),
            containers: BTreeSet::new(),
            ttls: BTreeSet::new(),
            last_zxid: 0,
            applied_index: 0,
            applied_term: 0,
            digest: 0,
            data_size: 0,
            heap_bytes: 0,
            journal: None,
            snapshot: None,
            insert_hints: InsertHints::default(),
            parents: ParentCache::default(),
            facts: FactsCache::default(),
            quota_root: None,
        }
    }

    /// A fresh tree: /, /zookeeper, /zookeeper/quota, /zookeeper/config,
    /// all with zxid 0 and time 0, like ZooKeeper's.
    pub fn new() -> DataTree {
        let mut tree = DataTree::bare();
        let open = crate::acl::open_acl_unsafe();
        let acl = tree.acls.intern(&open);
        let root = tree.arena.alloc(
            Slot::leaf(PackedStat::default(), NIL, acl, Blob::new("", Some(&[]))),
            false,
        );
        assert_eq!(root, ROOT);
        tree.account(ROOT, true);
        let zookeeper = tree.create_system(ROOT, "zookeeper", &open, PackedStat::default());
        tree.quota_root =
            Some(tree.create_system(zookeeper, "quota", &open, PackedStat::default()));
        // ZooKeeper 3.8's quirk, as its clients see it: /zookeeper/config is
        // read-only with aversion -1.
        let read_only = vec![Acl {
            perms: keel_jute::perms::READ,
            id: keel_jute::Id {
                scheme: "world".into(),
                id: "anyone".into(),
            },
        }];
        let stat = PackedStat {
            aversion: -1,
            ..PackedStat::default()
        };
        tree.create_system(zookeeper, "config", &read_only, stat);
        tree
    }

    fn create_system(
        &mut self,
        parent: NodeId,
        name: &str,
        acl: &[Acl],
        stat: PackedStat,
    ) -> NodeId {
        let acl = self.acls.intern(acl);
        self.link(parent, name, stat, Some(&[]), acl)
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

    pub fn digest(&self) -> u64 {
        self.digest
    }

    pub fn node_count(&self) -> usize {
        self.node_count as usize
    }

    /// An owned copy of the node at `path`.
    pub fn node(&self, path: &str) -> Option<Node> {
        self.resolve(path).map(|id| self.node_copy(id))
    }

    pub(crate) fn node_copy(&self, id: NodeId) -> Node {
        let slot = self.arena.get(id);
        Node {
            stat: self.persisted_stat(id),
            data: slot.blob.data().map(|d| d.to_vec()),
            acl: self.acls.get(slot.acl).to_vec(),
            children: self
                .arena
                .children(id)
                .iter()
                .map(|c| self.arena.get(c).blob.name().to_string())
                .collect(),
        }
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

    /// The session's ephemeral paths, sorted.
    pub fn ephemerals_of(&self, session_id: i64) -> Vec<String> {
        let mut paths: Vec<String> = match self.ephemerals.get(&session_id) {
            Some(ids) => ids.iter().map(|id| self.path_of(*id)).collect(),
            None => Vec::new(),
        };
        paths.sort();
        paths
    }

    pub fn ephemeral_count(&self) -> usize {
        self.ephemerals.values().map(|ids| ids.len()).sum()
    }

    /// Approximate bytes of node data (mntr's zk_approximate_data_size):
    /// Σ path length + data length, as ZooKeeper's.
    pub fn approximate_data_size(&self) -> u64 {
        self.data_size
    }

    /// The tree's own accounting of its memory (keel_tree_bytes): slots,
    /// blobs, child lists, the path index, ACLs and the owner indexes.
    pub fn memory_bytes(&self) -> u64 {
        const BTREE_ENTRY_BYTES: u64 = 24;
        let owners = (self.ephemeral_count() + self.containers.len() + self.ttls.len()) as u64
            * BTREE_ENTRY_BYTES
            + self.sessions.len() as u64 * BTREE_ENTRY_BYTES;
        self.arena.slot_bytes() as u64
            + self.heap_bytes
            + self.index.heap_bytes() as u64
            + self.acls.heap_bytes() as u64
            + self.arena.kept_list_bytes() as u64
            + owners
    }

    /// Every path, sorted (dump, tests, replica comparison).
    pub fn paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .arena
            .iter()
            .filter(|(_, slot)| !slot.is_free())
            .map(|(id, _)| self.path_of(id))
            .collect();
        paths.sort();
        paths
    }

    /// Containers with no children that had one once, and TTL nodes with no
    /// children unmodified for longer than their ttl: ZooKeeper's
    /// ContainerManager candidates, sorted by path.
    pub fn reap_candidates(&self, now_ms: i64) -> Vec<String> {
        self.reap_candidates_aged(now_ms, |_, _| i64::MAX)
    }

    /// `reap_candidates`, where a TTL node must also be older than its TTL
    /// by `local_age_ms(path, mzxid)`: how long the caller has known the
    /// node's last change (mzxid), on a clock of its own. Both must say the
    /// TTL passed: `now_ms - mtime` (wall clocks, as ZooKeeper compares
    /// them) and the local age (a monotonic clock that no wall-clock jump
    /// moves). The tree reads no clock; the caller measures.
    pub fn reap_candidates_aged(
        &self,
        now_ms: i64,
        mut local_age_ms: impl FnMut(&str, i64) -> i64,
    ) -> Vec<String> {
        let early = crate::planted::reap_early();
        let late = crate::planted::reap_late();
        let mut candidates = Vec::new();
        for id in self.containers.iter() {
            let slot = self.arena.get(*id);
            if slot.is_leaf() && (slot.stat.cversion > 0 || early) && !late {
                candidates.push(self.path_of(*id));
            }
        }
        for id in self.ttls.iter() {
            let slot = self.arena.get(*id);
            if let OwnerKind::Ttl(ttl_ms) = owner_kind(slot.stat.ephemeral_owner) {
                let ttl_ms = if late {
                    ttl_ms.saturating_mul(1000)
                } else {
                    ttl_ms
                };
                if slot.is_leaf()
                    && ttl_ms != 0
                    && (now_ms.saturating_sub(slot.stat.mtime) > ttl_ms || early)
                {
                    let path = self.path_of(*id);
                    if early || local_age_ms(&path, slot.stat.mzxid) > ttl_ms {
                        candidates.push(path);
                    }
                }
            }
        }
        candidates.sort();
        candidates
    }

    /// Every TTL node's path and the zxid of its last change (mzxid), in
    /// no particular order.
    pub fn ttl_nodes(&self) -> Vec<(String, i64)> {
        self.ttls
            .iter()
            .map(|id| (self.path_of(*id), self.arena.get(*id).stat.mzxid))
            .collect()
    }

    /// How many TTL nodes the tree holds.
    pub fn ttl_node_count(&self) -> usize {
        self.ttls.len()
    }

    /// The mzxid of the TTL node at `path`; None when there is no node
    /// there or it is not a TTL node.
    pub fn ttl_mzxid(&self, path: &str) -> Option<i64> {
        let slot = self.arena.get(self.resolve(path)?);
        match owner_kind(slot.stat.ephemeral_owner) {
            OwnerKind::Ttl(_) => Some(slot.stat.mzxid),
            _ => None,
        }
    }

    // ---- lookup

    /// The node at `path`; "" is the root, as in ZooKeeper's node map.
    pub(crate) fn resolve(&self, path: &str) -> Option<NodeId> {
        if path.is_empty() || path == "/" {
            return Some(ROOT);
        }
        let rest = path.strip_prefix('/')?;
        let mut id = ROOT;
        for name in rest.split('/') {
            if name.is_empty() {
                return None;
            }
            id = self.index.find(&self.arena, id, name.as_bytes())?;
        }
        Some(id)
    }

    /// `resolve` for a create's parent, through the parent cache.
    pub(crate) fn resolve_parent(&mut self, path: &str) -> Option<NodeId> {
        if let Some(id) = self.parents.get(path) {
            debug_assert_eq!(
                self.resolve(path),
                Some(id),
                "stale parent cache entry for {path}"
            );
            return Some(id);
        }
        let id = self.resolve(path)?;
        self.parents.put(path, id);
        Some(id)
    }

    /// The children of `id`, sorted by name.
    pub(crate) fn children(&self, id: NodeId) -> Children<'_> {
        self.arena.children(id)
    }

    pub(crate) fn slot(&self, id: NodeId) -> &Slot {
        self.arena.get(id)
    }

    pub(crate) fn acl_of(&self, id: NodeId) -> &Arc<[Acl]> {
        self.acls.get(self.arena.get(id).acl)
    }

    /// The full path of a node, rebuilt from its ancestors' names.
    pub fn path_of(&self, id: NodeId) -> String {
        if id == ROOT {
            return "/".to_string();
        }
        let chain = self.chain(id);
        let mut path = String::new();
        for ancestor in chain.iter().rev() {
            path.push('/');
            path.push_str(self.arena.get(*ancestor).blob.name());
        }
        path
    }

    /// The node and its ancestors below the root, deepest first.
    fn chain(&self, mut id: NodeId) -> Vec<NodeId> {
        let mut chain = Vec::with_capacity(8);
        while id != ROOT {
            chain.push(id);
            id = self.arena.get(id).parent;
            assert!(id != NIL, "node outside the tree");
        }
        chain
    }

    fn path_len(&self, id: NodeId) -> u64 {
        if id == ROOT {
            return 1;
        }
        self.chain(id)
            .iter()
            .map(|a| 1 + self.arena.get(*a).blob.name_bytes().len() as u64)
            .sum()
    }

    /// Where a new child `name` goes among `parent`'s sorted children: when
    /// `name` sorts after the child before the hinted spot (just after the
    /// last insert), at the end if it sorts past the last child, else at or
    /// a little past the hint; otherwise `child_position`.
    ///
    /// Past the hint the search gallops (1, 2, 4, ... children ahead, then
    /// bisects the last step): names numbered without padding (`n1009`
    /// then `n1010`, which sorts after the older `n101`) land a child or
    /// two past it, found in two or three probes instead of a bisection
    /// of the whole list, where every probe is a cache miss.
    fn insert_position(&self, parent: NodeId, name: &[u8]) -> usize {
        let children = self.arena.children(parent);
        let name_of = |child: NodeId| self.arena.get(child).blob.name_bytes();
        if let Some(at) = self.insert_hints.get(parent) {
            let after_previous =
                at == 0 || (at <= children.len() && name_of(children.get(at - 1)) < name);
            if after_previous {
                // Past the last child (appends, most creates, also those of
                // a second writer whose names sort after the first's) at
                // once; the last child is usually in the cache.
                if children.last().is_none_or(|last| name_of(last) < name) {
                    return children.len();
                }
                let position = gallop(&children, at, |child| name_of(child) < name);
                assert!(
                    position == children.len() || name_of(children.get(position)) != name,
                    "linking an existing name"
                );
                return position;
            }
        }
        self.child_position(parent, name)
            .expect_err("linking an existing name")
    }

    /// The position of `name` among the sorted children of `parent`. Names
    /// past the last child (sequential nodes, most creates) and at the
    /// first (oldest-first deletes) are found without a search: each probe
    /// of the search is a cache miss in a list of millions.
    fn child_position(&self, parent: NodeId, name: &[u8]) -> Result<usize, usize> {
        let arena = &self.arena;
        let children = arena.children(parent);
        let name_of = |child: NodeId| arena.get(child).blob.name_bytes();
        match children.last().map(|last| name_of(last).cmp(name)) {
            None | Some(std::cmp::Ordering::Less) => return Err(children.len()),
            Some(std::cmp::Ordering::Equal) => return Ok(children.len() - 1),
            Some(std::cmp::Ordering::Greater) => {}
        }
        match name_of(children.get(0)).cmp(name) {
            std::cmp::Ordering::Equal => return Ok(0),
            std::cmp::Ordering::Greater => return Err(0),
            std::cmp::Ordering::Less => {}
        }
        // Between the first and the last, both already compared.
        let position =
            children.partition_point(1, children.len() - 1, |child| name_of(child) < name);
        if name_of(children.get(position)) == name {
            Ok(position)
        } else {
            Err(position)
        }
    }

    /// The client-visible Stat of a node, as ZooKeeper's DataNode.copyStat
    /// reports it: the stored cversion counts child creates, clients see
    /// creates + deletes = 2 × creates − children; containers and TTL nodes
    /// show ephemeralOwner 0.
    pub fn stat_of(node: &Node) -> Stat {
        client_stat(node.stat.clone())
    }

    pub(crate) fn client_stat(&self, id: NodeId) -> Stat {
        client_stat(self.persisted_stat(id))
    }

    /// The stored Stat with data_length and num_children filled in.
    pub(crate) fn persisted_stat(&self, id: NodeId) -> Stat {
        let slot = self.arena.get(id);
        let s = &slot.stat;
        Stat {
            czxid: s.czxid,
            mzxid: s.mzxid,
            ctime: s.ctime,
            mtime: s.mtime,
            version: s.version,
            cversion: s.cversion,
            aversion: s.aversion,
            ephemeral_owner: s.ephemeral_owner,
            data_length: slot.blob.data_len() as i32,
            num_children: self.arena.children(id).len() as i32,
            pzxid: s.pzxid,
        }
    }

    // ---- the edits: every change of a node goes through these.

    /// Adds a child `name` under `parent` (which must not have it).
    pub(crate) fn link(
        &mut self,
        parent: NodeId,
        name: &str,
        stat: PackedStat,
        data: Option<&[u8]>,
        acl: u32,
    ) -> NodeId {
        let position = self.insert_position(parent, name.as_bytes());
        let fresh_only = self.snapshot.is_some();
        let blob = Blob::new(name, data);
        let id = self
            .arena
            .alloc(Slot::leaf(stat, parent, acl, blob), fresh_only);
        self.index.insert(&self.arena, id);
        self.list_child(parent, position, id);
        self.account(id, true);
        if let Some(journal) = &mut self.journal {
            journal.push(Undo::Linked(id));
        }
        id
    }

    /// Puts `id` at `position` among the children of `parent` (`link` and
    /// its undo's `relink`): the heap count follows the list, the next
    /// insert under `parent` is hinted past it.
    fn list_child(&mut self, parent: NodeId, position: usize, id: NodeId) {
        let before = self.arena.children_heap_bytes(parent);
        self.arena.insert_child(parent, position, id);
        self.insert_hints.set(parent, position + 1);
        let after = self.arena.children_heap_bytes(parent);
        self.heap_bytes = self.heap_bytes + after as u64 - before as u64;
    }

    /// Removes a childless node; returns its slot.
    pub(crate) fn unlink_slot(&mut self, id: NodeId) -> Slot {
        assert!(id != ROOT, "unlinking the root");
        assert!(
            self.arena.get(id).is_leaf(),
            "unlinking a node with children"
        );
        self.before_change(id);
        self.account(id, false);
        self.parents.forget_all();
        self.index.remove(&self.arena, id);
        let parent = self.arena.get(id).parent;
        let position = self
            .child_position(parent, self.arena.get(id).blob.name_bytes())
            .expect("a node is listed by its parent");
        let before = self.arena.children_heap_bytes(parent);
        let removed = self.arena.remove_child(parent, position);
        assert_eq!(removed, id);
        let after = self.arena.children_heap_bytes(parent);
        self.heap_bytes = self.heap_bytes + after as u64 - before as u64;
        let slot = self.arena.release(id);
        self.heap_bytes -= slot.children_heap_bytes() as u64;
        match &mut self.journal {
            // The journal keeps the ACL reference until the multi ends.
            Some(journal) => journal.push(Undo::Unlinked(id, Box::new(slot.clone()))),
            None => self.acls.release(slot.acl),
        }
        slot
    }

    /// Changes a node's Stat and, if given, its data and ACL id (the new
    /// ACL id carries the reference the caller took).
    pub(crate) fn update(
        &mut self,
        id: NodeId,
        change: impl FnOnce(&mut PackedStat),
        data: Option<Option<&[u8]>>,
        acl: Option<u32>,
    ) {
        self.before_change(id);
        // The path, its hash and the owner stay: only the content's share
        // of the digest, data size and memory changes (no owner index is
        // touched; the path's facts are taken once, from the parent's when
        // they are remembered).
        let path = self.path_facts_cached(id);
        let (old_digest, old_size, old_heap) = self.content_share(id, path);
        let slot = self.arena.get_mut(id);
        let old_stat = slot.stat;
        change(&mut slot.stat);
        assert_eq!(
            old_stat.ephemeral_owner, slot.stat.ephemeral_owner,
            "a node's owner never changes"
        );
        let old_blob = data.map(|data| {
            let blob = slot.blob.with_data(data);
            std::mem::replace(&mut slot.blob, blob)
        });
        let old_acl = acl.map(|acl| std::mem::replace(&mut slot.acl, acl));
        let (new_digest, new_size, new_heap) = self.content_share(id, path);
        self.digest = self
            .digest
            .wrapping_sub(old_digest)
            .wrapping_add(new_digest);
        self.data_size = self.data_size - old_size + new_size;
        self.heap_bytes = self.heap_bytes - old_heap + new_heap;
        match &mut self.journal {
            Some(journal) => {
                journal.push(Undo::Updated(id, Box::new((old_stat, old_blob, old_acl))))
            }
            None => {
                if let Some(old) = old_acl {
                    self.acls.release(old);
                }
            }
        }
    }

    /// Adds (or removes) a node's share of the digest, data size, memory
    /// and owner indexes; an ACL reference is dropped on removal only by
    /// the caller that frees the slot for good.
    fn account(&mut self, id: NodeId, present: bool) {
        let facts = self.path_facts_cached(id);
        let (digest, size, heap) = self.content_share(id, facts);
        let owner = self.arena.get(id).stat.ephemeral_owner;
        if present {
            self.node_count += 1;
            self.digest = self.digest.wrapping_add(digest);
            self.data_size += size;
            self.heap_bytes += heap;
        } else {
            self.node_count -= 1;
            self.digest = self.digest.wrapping_sub(digest);
            self.data_size -= size;
            self.heap_bytes -= heap;
        }
        match owner_kind(owner) {
            OwnerKind::Persistent => {}
            OwnerKind::Container => toggle(&mut self.containers, id, present),
            OwnerKind::Ttl(_) => toggle(&mut self.ttls, id, present),
            OwnerKind::Ephemeral(session_id) => {
                let ids = self.ephemerals.entry(session_id).or_default();
                toggle(ids, id, present);
                if ids.is_empty() {
                    self.ephemerals.remove(&session_id);
                }
            }
        }
    }

    // ---- multi: all or nothing

    pub(crate) fn begin_journal(&mut self) {
        assert!(self.journal.is_none(), "nested multi");
        self.journal = Some(Vec::new());
    }

    /// Keeps the multi's changes: ACL references the edits dropped go now.
    pub(crate) fn commit_journal(&mut self) {
        let journal = self.journal.take().expect("a multi is running");
        for undo in journal {
            match undo {
                Undo::Linked(_) => {}
                Undo::Unlinked(_, slot) => self.acls.release(slot.acl),
                Undo::Updated(_, old) => {
                    if let Some(acl) = old.2 {
                        self.acls.release(acl);
                    }
                }
            }
        }
    }

    /// Undoes every edit of the multi, newest first.
    pub(crate) fn rollback_journal(&mut self) {
        let journal = self.journal.take().expect("a multi is running");
        for undo in journal.into_iter().rev() {
            match undo {
                Undo::Linked(id) => {
                    self.unlink_slot(id);
                }
                Undo::Unlinked(id, slot) => self.relink(id, *slot),
                Undo::Updated(id, old) => {
                    let (stat, blob, acl) = *old;
                    self.account(id, false);
                    let slot = self.arena.get_mut(id);
                    slot.stat = stat;
                    if let Some(blob) = blob {
                        slot.blob = blob;
                    }
                    let replaced = acl.map(|acl| std::mem::replace(&mut slot.acl, acl));
                    self.account(id, true);
                    if let Some(new_acl) = replaced {
                        self.acls.release(new_acl);
                    }
                }
            }
        }
    }

    /// Puts an unlinked slot back at its id (undo of `unlink_slot`).
    fn relink(&mut self, id: NodeId, slot: Slot) {
        let parent = slot.parent;
        let position = self
            .child_position(parent, slot.blob.name_bytes())
            .expect_err("relinking over an existing name");
        self.heap_bytes += slot.children_heap_bytes() as u64;
        self.arena.restore(id, slot);
        self.index.insert(&self.arena, id);
        self.list_child(parent, position, id);
        self.account(id, true);
    }

    // ---- digest

    /// A node's digest: its path's FNV-1a combined with the FNV-1a of its
    /// data and persisted Stat. Cheap, stable across processes (it goes
    /// into replica comparisons), and the two halves can be computed apart
    /// (a snapshot load hashes contents on every core).
    pub(crate) fn slot_digest(&self, id: NodeId) -> u64 {
        combine_digest(self.path_facts(id).0, content_digest(self.arena.get(id)))
    }

    /// `path_facts` from the parent's facts when `FactsCache` has them (a
    /// parent missing there is walked once and remembered).
    fn path_facts_cached(&mut self, id: NodeId) -> (u64, u64) {
        if id == ROOT {
            return self.path_facts(ROOT);
        }
        let parent = self.arena.get(id).parent;
        let (hash, len) = if parent == ROOT {
            // The root's own facts are those of "/"; its children's paths
            // start from nothing.
            (FNV_OFFSET, 0)
        } else {
            let unlinked = self.parents.unlinked;
            match self.facts.get(parent, unlinked) {
                Some(facts) => facts,
                None => {
                    let facts = self.path_facts(parent);
                    self.facts.put(parent, unlinked, facts);
                    facts
                }
            }
        };
        let name = self.arena.get(id).blob.name_bytes();
        let facts = (fnv(fnv(hash, b"/"), name), len + 1 + name.len() as u64);
        debug_assert_eq!(facts, self.path_facts(id), "stale path facts of node {id}");
        facts
    }

    /// FNV-1a of a node's full path, and the path's length in bytes, from
    /// one walk up its ancestors.
    fn path_facts(&self, id: NodeId) -> (u64, u64) {
        let mut hash = FNV_OFFSET;
        if id == ROOT {
            return (fnv(hash, b"/"), 1);
        }
        let mut len = 0;
        for ancestor in self.chain(id).iter().rev() {
            let name = self.arena.get(*ancestor).blob.name_bytes();
            hash = fnv(hash, b"/");
            hash = fnv(hash, name);
            len += 1 + name.len() as u64;
        }
        (hash, len)
    }

    /// A node's digest, approximate data size (the path counts, as in
    /// ZooKeeper) and blob heap bytes, given its `path_facts`.
    fn content_share(&self, id: NodeId, (path_hash, path_len): (u64, u64)) -> (u64, u64, u64) {
        let slot = self.arena.get(id);
        let digest = combine_digest(path_hash, content_digest(slot));
        let size = path_len + slot.blob.data_len() as u64;
        (digest, size, slot.blob.heap_bytes() as u64)
    }

    /// Invariants of one node: ephemerals never have children.
    pub(crate) fn check_invariants_of(&self, id: NodeId) {
        let slot = self.arena.get(id);
        assert!(!slot.is_free(), "node {id} is free");
        if let OwnerKind::Ephemeral(_) = owner_kind(slot.stat.ephemeral_owner) {
            assert!(slot.is_leaf(), "ephemeral {id} has children");
        }
    }

    /// Recomputes everything derived (digest, data size, memory, owner
    /// indexes) from the nodes and compares (tests, fuzzing, load checks).
    /// The digest summed afresh over every node (no incremental state).
    pub(crate) fn recomputed_digest(&self) -> u64 {
        self.arena
            .iter()
            .filter(|(_, slot)| !slot.is_free())
            .fold(0u64, |sum, (id, _)| sum.wrapping_add(self.slot_digest(id)))
    }

    /// The digest as snapshot formats 2 and 3 defined it (tests build
    /// such files).
    #[cfg(test)]
    pub(crate) fn legacy_digest(&self) -> u64 {
        self.arena
            .iter()
            .filter(|(_, slot)| !slot.is_free())
            .fold(0u64, |sum, (id, slot)| {
                let path_hash = self.path_facts(id).0;
                sum.wrapping_add(combine_digest(path_hash, legacy_content_digest(slot)))
            })
    }

    pub fn verify(&self) -> Result<(), String> {
        let mut copy = DataTree::bare();
        let mut count = 0u64;
        for (id, slot) in self.arena.iter() {
            if slot.is_free() {
                continue;
            }
            count += 1;
            copy.digest = copy.digest.wrapping_add(self.slot_digest(id));
            copy.data_size += self.path_len(id) + slot.blob.data_len() as u64;
            copy.heap_bytes += (slot.blob.heap_bytes() + self.arena.children_heap_bytes(id)) as u64;
            let owner = slot.stat.ephemeral_owner;
            match owner_kind(owner) {
                OwnerKind::Persistent => {}
                OwnerKind::Container => toggle(&mut copy.containers, id, true),
                OwnerKind::Ttl(_) => toggle(&mut copy.ttls, id, true),
                OwnerKind::Ephemeral(session) => {
                    toggle(copy.ephemerals.entry(session).or_default(), id, true)
                }
            }
            if id != ROOT
                && self
                    .index
                    .find(&self.arena, slot.parent, slot.blob.name_bytes())
                    != Some(id)
            {
                return Err(format!("{} is not indexed", self.path_of(id)));
            }
        }
        let checks = [
            ("node count", count, self.node_count),
            ("digest", copy.digest, self.digest),
            ("data size", copy.data_size, self.data_size),
            ("heap bytes", copy.heap_bytes, self.heap_bytes),
            ("index entries", count - 1, self.index.len() as u64),
        ];
        for (what, computed, kept) in checks {
            if computed != kept {
                return Err(format!("{what}: kept {kept:#x}, computed {computed:#x}"));
            }
        }
        if copy.ephemerals != self.ephemerals
            || copy.containers != self.containers
            || copy.ttls != self.ttls
        {
            return Err("owner indexes differ from the nodes".into());
        }
        Ok(())
    }

    /// Marks a node about to change for a running snapshot (copy-on-write).
    fn before_change(&mut self, id: NodeId) {
        if let Some(snapshot) = &mut self.snapshot {
            snapshot.preserve(id, &self.arena);
        }
    }
}

pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

pub(crate) fn fnv(mut hash: u64, bytes: &[u8]) -> u64 {
    for byte in bytes {
        hash ^= *byte as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// A node's content hash (snapshot format 4 on): its data length (or
/// u64::MAX for none), data and persisted Stat, a 64-bit word at a time.
/// Byte-wise FNV-1a (`feed_content`, formats 2 and 3) cost a multiply per
/// byte, and every write hashes its node and its parent.
pub(crate) fn content_digest(slot: &Slot) -> u64 {
    let mut hash = FNV_OFFSET;
    match slot.blob.data() {
        Some(data) => {
            hash = mix_word(hash, data.len() as u64);
            let mut words = data.chunks_exact(8);
            for word in &mut words {
                hash = mix_word(hash, u64::from_le_bytes(word.try_into().expect("8 bytes")));
            }
            let mut tail = [0u8; 8];
            tail[..words.remainder().len()].copy_from_slice(words.remainder());
            hash = mix_word(hash, u64::from_le_bytes(tail));
        }
        None => hash = mix_word(hash, u64::MAX),
    }
    let s = &slot.stat;
    for value in [
        s.czxid,
        s.mzxid,
        s.ctime,
        s.mtime,
        s.ephemeral_owner,
        s.pzxid,
    ] {
        hash = mix_word(hash, value as u64);
    }
    let versions = (s.version as u32 as u64) | ((s.cversion as u32 as u64) << 32);
    hash = mix_word(hash, versions);
    mix_word(hash, s.aversion as u32 as u64)
}

/// One word into a content hash: xor, multiply by an odd constant, rotate
/// (so high bits feed the low ones of the next step).
fn mix_word(hash: u64, word: u64) -> u64 {
    (hash ^ word)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(29)
}

/// The content hash of snapshot formats 2 and 3 (byte-wise FNV-1a), still
/// computed to verify such a file.
pub(crate) fn legacy_content_digest(slot: &Slot) -> u64 {
    feed_content(FNV_OFFSET, slot.blob.data(), &slot.stat)
}

/// Feeds a node's data (length first, or u64::MAX for none) and persisted
/// Stat into an FNV-1a state: the content part of the format 2 and 3
/// digests.
pub(crate) fn feed_content(mut hash: u64, data: Option<&[u8]>, s: &PackedStat) -> u64 {
    match data {
        Some(data) => {
            hash = fnv(hash, &(data.len() as u64).to_be_bytes());
            hash = fnv(hash, data);
        }
        None => hash = fnv(hash, &u64::MAX.to_be_bytes()),
    }
    for value in [
        s.czxid,
        s.mzxid,
        s.ctime,
        s.mtime,
        s.ephemeral_owner,
        s.pzxid,
    ] {
        hash = fnv(hash, &value.to_be_bytes());
    }
    for value in [s.version, s.cversion, s.aversion] {
        hash = fnv(hash, &value.to_be_bytes());
    }
    hash
}

/// One node's digest from its path hash and content hash (the tree's
/// digest is the wrapping sum over nodes).
pub(crate) fn combine_digest(path_hash: u64, content_hash: u64) -> u64 {
    let mut x = path_hash ^ content_hash.rotate_left(32);
    x = (x ^ (x >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

fn client_stat(mut stat: Stat) -> Stat {
    stat.cversion = stat
        .cversion
        .wrapping_mul(2)
        .wrapping_sub(stat.num_children);
    if !matches!(owner_kind(stat.ephemeral_owner), OwnerKind::Ephemeral(_)) {
        stat.ephemeral_owner = 0;
    }
    stat
}

fn toggle(set: &mut BTreeSet<NodeId>, id: NodeId, present: bool) {
    let changed = if present {
        set.insert(id)
    } else {
        set.remove(&id)
    };
    assert!(changed, "owner index out of step for node {id}");
}

pub(crate) fn event(path: &str, event_type: EventType) -> Event {
    Event {
        path: path.to_string(),
        event_type,
    }
}

/// Counts of references per ACL id (snapshot load).
pub(crate) fn acl_refs(arena: &Arena) -> HashMap<u32, u64> {
    let mut counts = HashMap::new();
    for (_, slot) in arena.iter() {
        if !slot.is_free() {
            *counts.entry(slot.acl).or_insert(0) += 1;
        }
    }
    counts
}

/// The parent path of `path` as the tree keys it ("" → "/").
pub(crate) fn parent_path(path: &str) -> Option<&str> {
    path::split(path).map(|(parent, _)| path::parent_key(parent))
}
