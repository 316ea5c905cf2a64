//! Snapshot encoding of the whole tree and its sessions. Pure: the caller
//! owns files; this turns a frozen tree into bytes and checked bytes back
//! into a tree. A snapshot that fails any check is rejected whole, never
//! half-loaded.

use std::sync::Arc;

use keel_jute::{Acl, JuteError, Reader, Record, Stat};

use crate::path;
use crate::tree::{owner_kind, DataTree, Node, NodeMap, OwnerKind};

const MAGIC: &[u8; 8] = b"KEELSNAP";
const FORMAT_VERSION: i32 = 2;
/// Trailer: CRC32 of everything before it.
const CRC_BYTES: usize = 4;
/// Most nodes a snapshot may declare (a corrupt count must not allocate).
pub const SNAPSHOT_NODES_MAX: usize = 1 << 31;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot is not a Keel snapshot (bad magic)")]
    BadMagic,
    #[error("snapshot format version {0} is not supported")]
    Version(i32),
    #[error("snapshot checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("snapshot is truncated or malformed: {0}")]
    Decode(#[from] JuteError),
    #[error("snapshot is inconsistent: {0}")]
    Inconsistent(String),
}

/// Encodes `tree` (a frozen clone) into `out`.
pub fn encode(tree: &DataTree, out: &mut Vec<u8>) {
    out.extend_from_slice(MAGIC);
    keel_jute::write_i32(out, FORMAT_VERSION);
    keel_jute::write_i64(out, tree.applied_index as i64);
    keel_jute::write_i64(out, tree.applied_term as i64);
    keel_jute::write_i64(out, tree.last_zxid);
    keel_jute::write_i64(out, tree.digest as i64);
    keel_jute::write_i32(out, tree.sessions.len() as i32);
    for (session_id, timeout_ms) in tree.sessions.iter() {
        keel_jute::write_i64(out, *session_id);
        keel_jute::write_i32(out, *timeout_ms as i32);
    }
    keel_jute::write_i32(out, tree.origins.len() as i32);
    for (origin, sequence) in tree.origins.iter() {
        keel_jute::write_i64(out, *origin as i64);
        keel_jute::write_i64(out, *sequence as i64);
    }
    keel_jute::write_i64(out, tree.nodes.len() as i64);
    for (node_path, node) in tree.nodes.iter() {
        keel_jute::write_string(out, node_path);
        keel_jute::write_buffer(out, node.data.as_deref());
        keel_jute::write_i32(out, node.acl.len() as i32);
        for entry in node.acl.iter() {
            entry.write(out);
        }
        node.stat.write(out);
    }
    let crc = crc32fast::hash(out);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// Decodes and verifies a snapshot: checksum, structure and digest.
pub fn decode(bytes: &[u8]) -> Result<DataTree, SnapshotError> {
    if bytes.len() < MAGIC.len() + CRC_BYTES || &bytes[..MAGIC.len()] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let (body, trailer) = bytes.split_at(bytes.len() - CRC_BYTES);
    let stored = u32::from_be_bytes(trailer.try_into().expect("4 bytes"));
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(SnapshotError::Checksum { stored, computed });
    }
    let mut r = Reader::new(&body[MAGIC.len()..]);
    let version = r.read_i32()?;
    if version != FORMAT_VERSION {
        return Err(SnapshotError::Version(version));
    }
    let mut tree = DataTree::new();
    tree.applied_index = r.read_i64()? as u64;
    tree.applied_term = r.read_i64()? as u64;
    tree.last_zxid = r.read_i64()?;
    let digest = r.read_i64()? as u64;
    read_sessions(&mut r, &mut tree)?;
    let origins = read_count(&mut r, 256)?;
    for _ in 0..origins {
        let origin = r.read_i64()? as u64;
        let sequence = r.read_i64()? as u64;
        tree.origins.insert(origin, sequence);
    }
    tree.nodes = read_nodes(&mut r)?;
    if r.remaining() != 0 {
        return Err(SnapshotError::Inconsistent(format!(
            "{} trailing bytes",
            r.remaining()
        )));
    }
    rebuild_indexes(&mut tree)?;
    if tree.digest != digest {
        return Err(SnapshotError::Inconsistent(format!(
            "digest {:#x} != stored {digest:#x}",
            tree.digest
        )));
    }
    Ok(tree)
}

fn read_sessions(r: &mut Reader<'_>, tree: &mut DataTree) -> Result<(), SnapshotError> {
    let count = read_count(r, r.remaining() / 12)?;
    for _ in 0..count {
        let session_id = r.read_i64()?;
        let timeout_ms = r.read_i32()? as u32;
        tree.sessions.insert(session_id, timeout_ms);
    }
    Ok(())
}

fn read_nodes(r: &mut Reader<'_>) -> Result<NodeMap, SnapshotError> {
    let count = r.read_i64()?;
    if count < 1 || count as usize > SNAPSHOT_NODES_MAX || count as usize > r.remaining() {
        return Err(SnapshotError::Inconsistent(format!("node count {count}")));
    }
    let mut nodes = NodeMap::default();
    for _ in 0..count {
        let node_path = r.read_string()?;
        let data = r.read_buffer()?;
        let acl_len = read_count(r, crate::acl::ACL_ENTRIES_MAX)?;
        let mut acl = Vec::with_capacity(acl_len);
        for _ in 0..acl_len {
            acl.push(Acl::read(r)?);
        }
        let stat = Stat::read(r)?;
        let node = Node {
            stat,
            data: data.map(Arc::from),
            acl: acl.into(),
            children: imbl::OrdSet::new(),
        };
        if nodes.insert(Arc::from(node_path.as_str()), node).is_some() {
            return Err(SnapshotError::Inconsistent(format!(
                "duplicate path {node_path}"
            )));
        }
    }
    Ok(nodes)
}

fn read_count(r: &mut Reader<'_>, max: usize) -> Result<usize, SnapshotError> {
    let count = r.read_i32()?;
    if count < 0 || count as usize > max {
        return Err(SnapshotError::Inconsistent(format!(
            "count {count} out of range"
        )));
    }
    Ok(count as usize)
}

/// Links children to parents and recomputes digest and owner indexes by
/// re-inserting every node through the tree's single edit path.
fn rebuild_indexes(tree: &mut DataTree) -> Result<(), SnapshotError> {
    let mut nodes = std::mem::take(&mut tree.nodes);
    if !nodes.contains_key("/") {
        return Err(SnapshotError::Inconsistent("no root".into()));
    }
    let paths: Vec<Arc<str>> = nodes.keys().cloned().collect();
    for node_path in &paths {
        if node_path.as_ref() == "/" {
            continue;
        }
        let (parent, name) = path::split(node_path)
            .ok_or_else(|| SnapshotError::Inconsistent(format!("bad path {node_path}")))?;
        let parent_node = nodes
            .get_mut(path::parent_key(parent))
            .ok_or_else(|| SnapshotError::Inconsistent(format!("orphan {node_path}")))?;
        parent_node.children.insert(name.into());
    }
    // apply never gives an ephemeral children, and relies on it: deleting a
    // child or closing the owner's session would hit an assertion.
    for (node_path, node) in nodes.iter() {
        if matches!(
            owner_kind(node.stat.ephemeral_owner),
            OwnerKind::Ephemeral(_)
        ) && !node.children.is_empty()
        {
            return Err(SnapshotError::Inconsistent(format!(
                "ephemeral {node_path} has children"
            )));
        }
    }
    tree.digest = 0;
    tree.ephemerals = imbl::OrdMap::new();
    tree.containers = imbl::OrdSet::new();
    tree.ttls = imbl::OrdSet::new();
    for node_path in paths {
        let node = nodes.remove(&node_path).expect("listed above");
        tree.put_node(node_path, node);
    }
    Ok(())
}
