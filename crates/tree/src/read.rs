//! Read requests against the local tree (FinalRequestProcessor's reads).
//! The caller holds the tree steady (a read lock) and registers the watches
//! returned here before any later change can be applied.

use keel_jute::{
    perms, write_buffer, write_i32, ErrorCode, EventType, FilteredListRequest, Id, ListRequestType,
    MultiOp, MultiResult, Record, Request, Response, Stat,
};

use crate::acl;
use crate::store::{NodeId, CHILD_LIST_CACHE_CHILDREN_MIN};
use crate::tree::{owner_kind, DataTree, OwnerKind};
use crate::watch::WatchKind;

/// Most children one getChildren reply may list; a frame bounds it anyway
/// (ZooKeeper fails such a reply at serialization), we fail it up front.
pub const CHILDREN_PER_RESPONSE_MAX: usize = 1 << 20;
/// Bytes an encoded child name takes, as a first guess for the reply
/// buffer: its length prefix and a short name.
const ENCODED_CHILD_BYTES_GUESS: usize = 4 + 12;
/// Bytes of an encoded Stat: 6 longs and 5 ints.
const STAT_BYTES: usize = 6 * 8 + 5 * 4;

#[derive(Debug, Clone, PartialEq)]
pub struct ReadOutcome {
    pub result: Result<Response, ErrorCode>,
    /// Watches to register for the asking session, in request order.
    pub watches: Vec<(String, WatchKind)>,
}

impl ReadOutcome {
    fn plain(result: Result<Response, ErrorCode>) -> ReadOutcome {
        ReadOutcome {
            result,
            watches: Vec::new(),
        }
    }
}

impl DataTree {
    /// Serves a read request for `session_id` with the connection's ids.
    /// Returns None for requests that are not reads of the tree.
    pub fn read(&self, request: &Request, session_id: i64, auth: &[Id]) -> Option<ReadOutcome> {
        let outcome = match request {
            Request::Exists(r) => self.exists(&r.path, r.watch),
            Request::GetData(r) => self.get_data(&r.path, r.watch, auth),
            Request::GetChildren(r) => self.get_children(&r.path, r.watch, false, auth),
            Request::GetChildren2(r) => self.get_children(&r.path, r.watch, true, auth),
            Request::GetAcl(r) => ReadOutcome::plain(self.get_acl(&r.path, auth)),
            Request::GetAllChildrenNumber(r) => {
                ReadOutcome::plain(self.all_children_number(&r.path, auth))
            }
            Request::GetEphemerals(r) => ReadOutcome::plain(Ok(Response::GetEphemerals(
                self.ephemerals_under(session_id, &r.prefix_path),
            ))),
            Request::MultiRead(ops) => self.multi_read(ops, auth),
            Request::FilteredList(r) => self.filtered_list(r, auth),
            Request::CheckNotExists(r) => {
                ReadOutcome::plain(self.check_not_exists_read(&r.path, r.version, auth))
            }
            _ => return None,
        };
        Some(outcome)
    }

    fn exists(&self, path: &str, watch: bool) -> ReadOutcome {
        if path.contains('\0') {
            return ReadOutcome::plain(Err(ErrorCode::BadArguments));
        }
        if let Some(node) = self.system_node(path) {
            return ReadOutcome {
                result: Ok(Response::Stat(node.stat())),
                watches: watch_if(watch, path, WatchKind::Data),
            };
        }
        // ZooKeeper 3.8.0 checks no ACL on exists (later 3.8 releases check
        // READ); Keel matches the 3.8.0 server its tests compare against.
        let node = self.resolve(path);
        // An exists watch is set whether or not the node is there.
        let kind = if node.is_some() {
            WatchKind::Data
        } else {
            WatchKind::Exist
        };
        let watches = if watch {
            vec![(path.to_string(), kind)]
        } else {
            Vec::new()
        };
        let result = match node {
            Some(id) => Ok(Response::Stat(self.client_stat(id))),
            None => Err(ErrorCode::NoNode),
        };
        ReadOutcome { result, watches }
    }

    fn get_data(&self, path: &str, watch: bool, auth: &[Id]) -> ReadOutcome {
        if let Some(node) = self.system_node(path) {
            return ReadOutcome {
                result: Ok(Response::GetData(Some(node.data()), node.stat())),
                watches: watch_if(watch, path, WatchKind::Data),
            };
        }
        match self.readable(path, auth) {
            Ok(id) => ReadOutcome {
                result: Ok(Response::GetData(
                    self.slot(id).blob.data().map(|d| d.to_vec()),
                    self.client_stat(id),
                )),
                watches: watch_if(watch, path, WatchKind::Data),
            },
            Err(code) => ReadOutcome::plain(Err(code)),
        }
    }

    /// `read` for a reply on the wire: the same outcome, except that a
    /// getChildren list of the data tree comes already encoded
    /// (`Response::Encoded`, the bytes `Response::encode` gives for the
    /// list `read` returns): one buffer, no `String` per child. A server
    /// answers the mixed load's listings with this.
    pub fn read_for_reply(
        &self,
        request: &Request,
        session_id: i64,
        auth: &[Id],
    ) -> Option<ReadOutcome> {
        match request {
            Request::GetChildren(r) if self.system_node(&r.path).is_none() => {
                Some(self.get_children_encoded(&r.path, r.watch, false, auth))
            }
            Request::GetChildren2(r) if self.system_node(&r.path).is_none() => {
                Some(self.get_children_encoded(&r.path, r.watch, true, auth))
            }
            _ => self.read(request, session_id, auth),
        }
    }

    /// `get_children` of a data-tree node, its reply body encoded as it is
    /// read: `vector<ustring>` of the names, then the parent's stat for
    /// getChildren2.
    fn get_children_encoded(
        &self,
        path: &str,
        watch: bool,
        with_stat: bool,
        auth: &[Id],
    ) -> ReadOutcome {
        let id = match self.listable(path, auth) {
            Ok(id) => id,
            Err(code) => return ReadOutcome::plain(Err(code)),
        };
        let mut body = match self.arena.kept_list(id) {
            Some(list) => {
                let mut body = Vec::with_capacity(list.len() + STAT_BYTES);
                body.extend_from_slice(&list);
                body
            }
            None => self.encode_children(id),
        };
        if with_stat {
            self.client_stat(id).write(&mut body);
        }
        ReadOutcome {
            result: Ok(Response::Encoded(body)),
            watches: watch_if(watch, path, WatchKind::Child),
        }
    }

    /// The `vector<ustring>` of the names of the children of `id`, with
    /// room for a stat after it; kept for the next listing when the parent
    /// has CHILD_LIST_CACHE_CHILDREN_MIN children or more.
    fn encode_children(&self, id: NodeId) -> Vec<u8> {
        let children = self.children(id);
        let count = children.len();
        let mut body = Vec::with_capacity(4 + count * ENCODED_CHILD_BYTES_GUESS + STAT_BYTES);
        write_i32(
            &mut body,
            i32::try_from(count).expect("bounded by CHILDREN_PER_RESPONSE_MAX"),
        );
        // A ustring is its length and bytes, as a buffer: the stored name
        // (UTF-8 since it was created from a `&str`) is copied without
        // checking its UTF-8 again.
        for child in children.iter() {
            write_buffer(&mut body, Some(self.slot(child).blob.name_bytes()));
        }
        if count >= CHILD_LIST_CACHE_CHILDREN_MIN {
            self.arena.keep_list(id, &body);
        }
        body
    }

    fn get_children(&self, path: &str, watch: bool, with_stat: bool, auth: &[Id]) -> ReadOutcome {
        if let Some(node) = self.system_node(path) {
            let children = node.children().iter().map(|c| c.to_string()).collect();
            let result = if with_stat {
                Response::GetChildren2(children, node.stat())
            } else {
                Response::GetChildren(children)
            };
            return ReadOutcome {
                result: Ok(result),
                watches: watch_if(watch, path, WatchKind::Child),
            };
        }
        let id = match self.listable(path, auth) {
            Ok(id) => id,
            Err(code) => return ReadOutcome::plain(Err(code)),
        };
        let children: Vec<String> = self
            .children(id)
            .iter()
            .map(|c| self.slot(c).blob.name().to_string())
            .collect();
        let result = if with_stat {
            Response::GetChildren2(children, self.client_stat(id))
        } else {
            Response::GetChildren(children)
        };
        ReadOutcome {
            result: Ok(result),
            watches: watch_if(watch, path, WatchKind::Child),
        }
    }

    /// getACL needs READ or ADMIN; without ADMIN, digests are redacted.
    fn get_acl(&self, path: &str, auth: &[Id]) -> Result<Response, ErrorCode> {
        if let Some(node) = self.system_node(path) {
            return Ok(Response::GetAcl(node.acl(), node.stat()));
        }
        let id = self.resolve(path).ok_or(ErrorCode::NoNode)?;
        let node_acl = self.acl_of(id);
        acl::check(node_acl, perms::READ | perms::ADMIN, auth)?;
        let list = match acl::check(node_acl, perms::ADMIN, auth) {
            Ok(()) => node_acl.to_vec(),
            Err(_) => acl::redact_digests(node_acl),
        };
        Ok(Response::GetAcl(list, self.client_stat(id)))
    }

    fn all_children_number(&self, path: &str, auth: &[Id]) -> Result<Response, ErrorCode> {
        if let Some(node) = self.system_node(path) {
            return Ok(Response::GetAllChildrenNumber(node.children().len() as i32));
        }
        let id = self.readable(path, auth)?;
        if path == "/" {
            return Ok(Response::GetAllChildrenNumber(
                (self.node_count() as i64 - 1).min(i32::MAX as i64) as i32,
            ));
        }
        let mut count: i64 = 0;
        let mut stack: Vec<NodeId> = self.children(id).to_vec();
        while let Some(child) = stack.pop() {
            count += 1;
            stack.extend(self.children(child).iter());
        }
        Ok(Response::GetAllChildrenNumber(
            count.min(i32::MAX as i64) as i32
        ))
    }

    /// getEphemerals: an empty or "/" prefix means all; otherwise a plain
    /// string prefix, as ZooKeeper compares.
    fn ephemerals_under(&self, session_id: i64, prefix: &str) -> Vec<String> {
        let all = self.ephemerals_of(session_id);
        let prefix = prefix.trim();
        if prefix.is_empty() || prefix == "/" {
            return all;
        }
        all.into_iter().filter(|p| p.starts_with(prefix)).collect()
    }

    /// ClickHouse Keeper's filteredList: getChildren2 listing all children,
    /// or only the persistent (containers and TTL nodes included) or only
    /// the ephemeral ones. Telling them apart reveals a child's owner, so
    /// a filtered list needs READ on every child, or is NoAuth.
    fn filtered_list(&self, r: &FilteredListRequest, auth: &[Id]) -> ReadOutcome {
        let outcome = self.get_children(&r.path, r.watch, true, auth);
        let Ok(Response::GetChildren2(children, stat)) = outcome.result else {
            return outcome;
        };
        let children = match (r.list_type, self.resolve(&r.path)) {
            (ListRequestType::All, _) => children,
            // The virtual system nodes are persistent and readable.
            (ListRequestType::EphemeralOnly, None) => Vec::new(),
            (ListRequestType::PersistentOnly, None) => children,
            (wanted, Some(id)) => match self.children_of_kind(id, wanted, auth) {
                Ok(children) => children,
                Err(code) => return ReadOutcome::plain(Err(code)),
            },
        };
        ReadOutcome {
            result: Ok(Response::GetChildren2(children, stat)),
            ..outcome
        }
    }

    /// The names of `id`'s ephemeral (or persistent) children; NoAuth if
    /// any child denies READ.
    fn children_of_kind(
        &self,
        id: NodeId,
        wanted: ListRequestType,
        auth: &[Id],
    ) -> Result<Vec<String>, ErrorCode> {
        let mut children = Vec::new();
        for child in self.children(id).iter() {
            acl::check(self.acl_of(child), perms::READ, auth)?;
            let slot = self.slot(child);
            let ephemeral = matches!(
                owner_kind(slot.stat.ephemeral_owner),
                OwnerKind::Ephemeral(_)
            );
            if ephemeral == (wanted == ListRequestType::EphemeralOnly) {
                children.push(slot.blob.name().to_string());
            }
        }
        Ok(children)
    }

    /// checkNotExists outside a multi, a read in ClickHouse Keeper too
    /// (there the system nodes exist, and are not refused).
    fn check_not_exists_read(
        &self,
        path: &str,
        version: i32,
        auth: &[Id],
    ) -> Result<Response, ErrorCode> {
        if self.system_node(path).is_some() {
            return match version {
                -1 | 0 => Err(ErrorCode::NodeExists),
                _ => Ok(Response::Empty),
            };
        }
        self.node_absent(path, version, auth)
            .map(|()| Response::Empty)
    }

    /// checkNotExists against the tree: NodeExists if the node is there at
    /// `version` (any version for -1); NoAuth if it is there unreadable.
    pub(crate) fn node_absent(
        &self,
        path: &str,
        version: i32,
        auth: &[Id],
    ) -> Result<(), ErrorCode> {
        let Some(id) = self.resolve(path) else {
            return Ok(());
        };
        acl::check(self.acl_of(id), perms::READ, auth)?;
        if version == -1 || version == self.slot(id).stat.version {
            return Err(ErrorCode::NodeExists);
        }
        Ok(())
    }

    /// multiRead: each op answers on its own; a failed op never fails the
    /// rest. Besides ZooKeeper's getData and getChildren it takes ClickHouse
    /// Keeper's reads (exists, getChildren2, filteredList). Write ops (a
    /// multiRead of writes alone; mixed ones do not decode) fail the whole
    /// request with MarshallingError, as ZooKeeper's "invalid type of
    /// readOp" does.
    fn multi_read(&self, ops: &[MultiOp], auth: &[Id]) -> ReadOutcome {
        if !ops.iter().all(MultiOp::is_read) {
            return ReadOutcome::plain(Err(ErrorCode::MarshallingError));
        }
        let mut results = Vec::with_capacity(ops.len());
        let mut watches = Vec::new();
        for op in ops {
            let outcome = match op {
                MultiOp::GetData(r) => self.get_data(&r.path, r.watch, auth),
                MultiOp::GetChildren(r) => self.get_children(&r.path, r.watch, false, auth),
                MultiOp::Exists(r) => self.exists(&r.path, r.watch),
                MultiOp::GetChildren2(r) => self.get_children(&r.path, r.watch, true, auth),
                MultiOp::FilteredList(r) => self.filtered_list(r, auth),
                _ => unreachable!("only reads get here"),
            };
            watches.extend(outcome.watches);
            results.push(match outcome.result {
                Ok(Response::GetData(data, stat)) => MultiResult::GetData(data, stat),
                Ok(Response::GetChildren(children)) => MultiResult::GetChildren(children),
                Ok(Response::Stat(stat)) => MultiResult::Exists(stat),
                Ok(Response::GetChildren2(children, stat)) => {
                    MultiResult::GetChildren2(children, stat)
                }
                Ok(_) => MultiResult::Error(ErrorCode::SystemError.code()),
                Err(code) => MultiResult::Error(code.code()),
            });
        }
        ReadOutcome {
            result: Ok(Response::Multi(results)),
            watches,
        }
    }

    /// ZooKeeper's node map also holds the root under "": a read of the
    /// empty path answers for "/" (`resolve` does so).
    /// The data-tree node a getChildren of `path` lists: readable, with no
    /// more children than one reply may carry.
    fn listable(&self, path: &str, auth: &[Id]) -> Result<NodeId, ErrorCode> {
        let id = self.readable(path, auth)?;
        if self.children(id).len() > CHILDREN_PER_RESPONSE_MAX {
            return Err(ErrorCode::MarshallingError);
        }
        Ok(id)
    }

    fn readable(&self, path: &str, auth: &[Id]) -> Result<NodeId, ErrorCode> {
        let id = self.resolve(path).ok_or(ErrorCode::NoNode)?;
        acl::check(self.acl_of(id), perms::READ, auth)?;
        Ok(id)
    }

    /// setWatches after a reconnect: events the client missed since
    /// `relative_zxid` fire now; the rest become watches again.
    pub fn missed_events(
        &self,
        relative_zxid: i64,
        data: &[String],
        exist: &[String],
        child: &[String],
    ) -> MissedEvents {
        let mut fired = Vec::new();
        let mut watches = Vec::new();
        for path in data {
            match self.lookup_slot(path) {
                None => fired.push((path.clone(), EventType::NodeDeleted)),
                Some(node) if node.mzxid > relative_zxid => {
                    fired.push((path.clone(), EventType::NodeDataChanged))
                }
                Some(_) => watches.push((path.clone(), WatchKind::Data)),
            }
        }
        for path in exist {
            match self.lookup_slot(path) {
                Some(_) => fired.push((path.clone(), EventType::NodeCreated)),
                None => watches.push((path.clone(), WatchKind::Exist)),
            }
        }
        for path in child {
            match self.lookup_slot(path) {
                None => fired.push((path.clone(), EventType::NodeDeleted)),
                Some(node) if node.pzxid > relative_zxid => {
                    fired.push((path.clone(), EventType::NodeChildrenChanged))
                }
                Some(_) => watches.push((path.clone(), WatchKind::Child)),
            }
        }
        (fired, watches)
    }

    /// The Stat of a path, if present (tests, cli, dump).
    pub fn stat(&self, path: &str) -> Option<Stat> {
        self.resolve_exact(path).map(|id| self.client_stat(id))
    }

    /// The (mzxid, pzxid) of the node at exactly `path` ("" is not the
    /// root here, as the old node map's keys); the virtual system nodes
    /// have zeros.
    fn lookup_slot(&self, path: &str) -> Option<WatchedStat> {
        if self.system_node(path).is_some() {
            return Some(WatchedStat { mzxid: 0, pzxid: 0 });
        }
        self.resolve_exact(path).map(|id| {
            let stat = &self.slot(id).stat;
            WatchedStat {
                mzxid: stat.mzxid,
                pzxid: stat.pzxid,
            }
        })
    }

    fn resolve_exact(&self, path: &str) -> Option<NodeId> {
        if path.is_empty() {
            return None;
        }
        self.resolve(path)
    }
}

/// What setWatches compares with a client's last zxid.
struct WatchedStat {
    mzxid: i64,
    pzxid: i64,
}

/// setWatches' outcome: events to fire now, watches to register again.
pub type MissedEvents = (Vec<(String, EventType)>, Vec<(String, WatchKind)>);

fn watch_if(watch: bool, path: &str, kind: WatchKind) -> Vec<(String, WatchKind)> {
    if watch {
        vec![(path.to_string(), kind)]
    } else {
        Vec::new()
    }
}
