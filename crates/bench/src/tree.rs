//! The bench tree: where each workload's nodes live, building it before the
//! timed phase and deleting it (recursively) afterwards.
//!
//! ```text
//! <root>                       e.g. /keel-bench-18c2f0a1b2c-4242
//! ├── data/n000 … n099         DATA_NODES nodes of --value-size bytes (get, set, mix)
//! ├── list/c000 … c099         LIST_CHILDREN children of LIST_CHILD_BYTES bytes (list, mix)
//! └── writes/c<client>/        one per client (create, mix)
//!     └── l<lane>-b<bucket>/   BUCKET_NODES nodes each: n<index>
//! ```
//!
//! A lane's nodes are spread over buckets so no node ever has more than
//! `BUCKET_NODES` children (a getChildren reply of a million names would
//! exceed ZooKeeper's jute.maxbuffer and could not be cleaned up).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keel_client::{Acl, Client, ClientError, CreateMode, ErrorCode};
use tokio::task::{JoinError, JoinSet};

use crate::workload::Workload;
use crate::{BenchError, BUCKET_NODES, DATA_NODES, LIST_CHILDREN, LIST_CHILD_BYTES};

/// Requests kept in flight on the admin session while preparing or
/// cleaning up, and connects attempted at once.
pub const SETUP_CONCURRENCY: usize = 256;

/// Paths of the bench tree under one root.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub root: String,
}

impl Layout {
    pub fn data_node(&self, i: usize) -> String {
        format!("{}/data/n{i:03}", self.root)
    }

    pub fn list_node(&self) -> String {
        format!("{}/list", self.root)
    }

    pub fn client_dir(&self, client: usize) -> String {
        format!("{}/writes/c{client}", self.root)
    }

    pub fn bucket(&self, client: usize, lane: usize, bucket: u64) -> String {
        format!("{}/writes/c{client}/l{lane}-b{bucket}", self.root)
    }

    pub fn node(&self, client: usize, lane: usize, index: u64) -> String {
        format!(
            "{}/n{index}",
            self.bucket(client, lane, index / BUCKET_NODES)
        )
    }
}

/// One node to create: path and data.
pub(crate) type NodeSpec = (String, Arc<[u8]>);

/// The nodes a run needs, parents before children (one `Vec` per depth).
pub(crate) fn prepare_levels(
    layout: &Layout,
    workload: Workload,
    clients: usize,
    in_flight: usize,
    value: &Arc<[u8]>,
    delete_pool_per_lane: u64,
) -> Vec<Vec<NodeSpec>> {
    let empty: Arc<[u8]> = Arc::from(&[][..]);
    let root = &layout.root;
    let mut levels: Vec<Vec<NodeSpec>> = vec![vec![(root.clone(), empty.clone())]];
    let mut dirs = Vec::new();
    let mut leaves = Vec::new();
    let mut buckets = Vec::new();
    let mut pool = Vec::new();
    if workload.uses_data_nodes() {
        dirs.push((format!("{root}/data"), empty.clone()));
        leaves.extend((0..DATA_NODES).map(|i| (layout.data_node(i), value.clone())));
    }
    if workload.uses_list_node() {
        let child: Arc<[u8]> = Arc::from(vec![b'c'; LIST_CHILD_BYTES]);
        dirs.push((layout.list_node(), empty.clone()));
        leaves.extend(
            (0..LIST_CHILDREN).map(|i| (format!("{}/c{i:03}", layout.list_node()), child.clone())),
        );
    }
    if workload.creates() {
        dirs.push((format!("{root}/writes"), empty.clone()));
        for c in 0..clients {
            leaves.push((layout.client_dir(c), empty.clone()));
            for l in 0..in_flight {
                buckets.push((layout.bucket(c, l, 0), empty.clone()));
                if workload.deletes() {
                    pool.extend(
                        (0..delete_pool_per_lane).map(|i| (layout.node(c, l, i), value.clone())),
                    );
                }
            }
        }
    }
    for level in [dirs, leaves, buckets, pool] {
        if !level.is_empty() {
            levels.push(level);
        }
    }
    levels
}

/// Runs `f` on every item with at most `concurrency` of them under way
/// (each a spawned task); stops at the first error.
pub(crate) async fn parallel<T, R, E, F, Fut>(
    items: Vec<T>,
    concurrency: usize,
    mut f: F,
) -> Result<Vec<R>, E>
where
    T: Send + 'static,
    R: Send + 'static,
    E: Send + 'static,
    F: FnMut(T) -> Fut,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
{
    fn joined<R, E>(r: Result<Result<R, E>, JoinError>) -> Result<R, E> {
        match r {
            Ok(v) => v,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("setup task cancelled: {e}"),
        }
    }
    let mut set = JoinSet::new();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        if set.len() >= concurrency.max(1) {
            if let Some(r) = set.join_next().await {
                out.push(joined(r)?);
            }
        }
        set.spawn(f(item));
    }
    while let Some(r) = set.join_next().await {
        out.push(joined(r)?);
    }
    Ok(out)
}

/// Creates every node of `levels` (persistent, `acl`), a level at a time;
/// `done` counts created nodes.
pub(crate) async fn create_levels(
    client: &Client,
    acl: &Arc<Vec<Acl>>,
    root: &str,
    levels: Vec<Vec<NodeSpec>>,
    done: &Arc<AtomicU64>,
) -> Result<(), BenchError> {
    for level in levels {
        parallel(level, SETUP_CONCURRENCY, |(path, data)| {
            let (client, acl, done) = (client.clone(), acl.clone(), done.clone());
            let root = root.to_string();
            async move {
                match client
                    .create(&path, &data, &acl, CreateMode::Persistent)
                    .await
                {
                    Ok(_) => {
                        done.fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    }
                    Err(source) => Err(BenchError::Prepare { root, path, source }),
                }
            }
        })
        .await?;
    }
    Ok(())
}

/// Progress of [`delete_tree`], read by the coordinator.
#[derive(Debug, Default)]
pub(crate) struct DeleteProgress {
    /// Nodes found so far (the root plus every child listed).
    pub found: AtomicU64,
    pub deleted: AtomicU64,
}

/// Deletes `root` and everything under it, a level at a time: every node
/// of the level is deleted (pipelined); one that is not empty is listed,
/// its children form the next level, and it is deleted again once they
/// are gone. Leaves, nearly all nodes of a bench tree, so cost one request
/// each. A node that is already gone is fine. Returns how many were
/// deleted.
pub(crate) async fn delete_tree(
    client: &Client,
    root: &str,
    progress: &Arc<DeleteProgress>,
) -> Result<u64, BenchError> {
    let fail = |(path, source): (String, ClientError)| BenchError::Cleanup {
        root: root.to_string(),
        path,
        source,
    };
    tracing::debug!(root, "deleting the bench tree");
    match client.exists(root, false).await {
        Ok(Some(_)) => {}
        Ok(None) => return Ok(0),
        Err(e) => return Err(fail((root.to_string(), e))),
    }
    progress.found.fetch_add(1, Ordering::Relaxed);
    // Nodes that had children, by depth.
    let mut parents: Vec<Vec<String>> = Vec::new();
    let mut level = vec![root.to_string()];
    while !level.is_empty() {
        let outcomes = parallel(level, SETUP_CONCURRENCY, |path| {
            let (client, progress) = (client.clone(), progress.clone());
            async move {
                match client.delete(&path, -1).await {
                    Ok(()) => {
                        progress.deleted.fetch_add(1, Ordering::Relaxed);
                        return Ok(None);
                    }
                    Err(ClientError::Zk(ErrorCode::NoNode)) => return Ok(None),
                    Err(ClientError::Zk(ErrorCode::NotEmpty)) => {}
                    Err(e) => return Err((path, e)),
                }
                match client.get_children(&path, false).await {
                    Ok(names) => {
                        progress
                            .found
                            .fetch_add(names.len() as u64, Ordering::Relaxed);
                        Ok(Some((path, names)))
                    }
                    Err(ClientError::Zk(ErrorCode::NoNode)) => Ok(None),
                    Err(e) => Err((path, e)),
                }
            }
        })
        .await
        .map_err(fail)?;
        let mut next = Vec::new();
        let mut listed = Vec::new();
        for (path, names) in outcomes.into_iter().flatten() {
            next.extend(names.into_iter().map(|n| format!("{path}/{n}")));
            listed.push(path);
        }
        tracing::debug!(
            parents = listed.len(),
            children = next.len(),
            "bench tree level"
        );
        parents.push(listed);
        level = next;
    }
    for level in parents.into_iter().rev() {
        parallel(level, SETUP_CONCURRENCY, |path| {
            let (client, progress) = (client.clone(), progress.clone());
            async move {
                match client.delete(&path, -1).await {
                    Ok(()) => {
                        progress.deleted.fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    }
                    Err(ClientError::Zk(ErrorCode::NoNode)) => Ok(()),
                    Err(e) => Err((path, e)),
                }
            }
        })
        .await
        .map_err(fail)?;
    }
    Ok(progress.deleted.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_paths_are_bucketed() {
        let l = Layout { root: "/r".into() };
        assert_eq!(l.node(3, 1, 0), "/r/writes/c3/l1-b0/n0");
        assert_eq!(
            l.node(3, 1, BUCKET_NODES - 1),
            format!("/r/writes/c3/l1-b0/n{}", BUCKET_NODES - 1)
        );
        assert_eq!(
            l.node(3, 1, BUCKET_NODES),
            format!("/r/writes/c3/l1-b1/n{BUCKET_NODES}")
        );
        assert_eq!(l.data_node(7), "/r/data/n007");
    }

    #[test]
    fn mix_prepares_everything_parents_first() {
        let l = Layout { root: "/r".into() };
        let value: Arc<[u8]> = Arc::from(vec![0u8; 10]);
        let levels = prepare_levels(&l, Workload::Mix, 2, 3, &value, 4);
        let sizes: Vec<usize> = levels.iter().map(Vec::len).collect();
        // root; data, list, writes; 100 data + 100 list + 2 client dirs;
        // 6 buckets; 6 × 4 pool nodes.
        assert_eq!(sizes, vec![1, 3, 202, 6, 24]);
        let mut seen = std::collections::HashSet::new();
        for level in &levels {
            for (path, _) in level {
                let parent = &path[..path.rfind('/').unwrap()];
                assert!(
                    parent.is_empty() || seen.contains(parent),
                    "{path} before its parent"
                );
                seen.insert(path.clone());
            }
        }
        let get = prepare_levels(&l, Workload::Get, 2, 3, &value, 4);
        assert_eq!(
            get.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![1, 1, 100]
        );
    }
}
