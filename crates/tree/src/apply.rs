//! Applying committed transactions: ZooKeeper's PrepRequestProcessor checks
//! (in its order, so every error code matches) fused with DataTree's apply.
//! Validation happens here, at apply time, against the tree every replica
//! holds at this log position; the result is therefore identical everywhere.

use std::collections::VecDeque;

use keel_jute::{
    perms, Acl, CreateMode, CreateRequest, ErrorCode, EventType, Id, JuteError, MultiOp,
    MultiResult, Request, Response, Stat,
};

use crate::store::{NodeId, PackedStat};
use crate::tree::{event, owner_kind, ttl_owner, DataTree, Event, OwnerKind, SYSTEM_PATHS};
use crate::txn::{Txn, TxnOp};
use crate::{acl, path};

/// Most znodes one removeRecursive deletes, whatever limit its client
/// asks for: a larger subtree is refused (NotEmpty, as over the client's
/// limit) rather than stalling the apply step on one request.
pub const REMOVE_RECURSIVE_NODES_MAX: usize = 1_000_000;

/// What applying one transaction produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The zxid the transaction took (the last zxid for sync, which takes none).
    pub zxid: i64,
    /// The reply for the originating session (error = ReplyHeader.err).
    pub result: Result<Response, ErrorCode>,
    /// Changes, in ZooKeeper's firing order, for the watch managers.
    pub events: Vec<Event>,
    pub session_created: Option<(i64, u32)>,
    pub session_closed: Option<i64>,
    /// The request holds an op this release does not know (at the top or
    /// in a multi): every proposer decodes a request before it proposes
    /// it, so a newer release's proposer wrote it. The transaction took a
    /// zxid and changed nothing else; the node must stop rather than
    /// answer it with an error where the members that know it apply it.
    pub unapplicable: Option<JuteError>,
}

/// Who is asking, when, and at which zxid: ZooKeeper's Request + TxnHeader.
struct Context<'a> {
    session_id: i64,
    auth: &'a [Id],
    time_ms: i64,
    zxid: i64,
}

/// Who asked for a container's deletion.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reaped {
    /// The leader's reaper (`TxnOp::DeleteContainer`).
    ByReaper,
    /// A client's deleteContainer request (opcode 20).
    ByClient,
}

/// Which create opcode asked: it decides the reply form and the owner.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CreateOp {
    Create,
    Create2,
    Container,
    Ttl,
}

struct CreateArgs<'a> {
    op: CreateOp,
    path: &'a str,
    data: &'a Option<Vec<u8>>,
    acl: &'a [Acl],
    flags: i32,
    ttl_ms: i64,
}

impl DataTree {
    /// Applies one committed transaction of a Raft entry of term `term`.
    pub fn apply(&mut self, term: u64, txn: &Txn) -> Applied {
        if let TxnOp::Sync { path } = &txn.op {
            return self.applied(self.last_zxid, Ok(Response::Sync(path.clone())), Vec::new());
        }
        if let TxnOp::Kv { .. } = &txn.op {
            // The server's keyspace applies these; the tree neither
            // changes nor takes a zxid.
            return self.applied(self.last_zxid, Err(ErrorCode::Unimplemented), Vec::new());
        }
        let zxid = self.next_zxid(term);
        self.last_zxid = zxid;
        let ctx = Context {
            session_id: txn.session_id,
            auth: &txn.auth,
            time_ms: txn.time_ms,
            zxid,
        };
        let mut events = Vec::new();
        let mut applied = match &txn.op {
            TxnOp::CreateSession { timeout_ms } => {
                let mut applied = self.applied(zxid, Ok(Response::Empty), events);
                if self.sessions.insert(txn.session_id, *timeout_ms).is_none() {
                    applied.session_created = Some((txn.session_id, *timeout_ms));
                }
                return applied;
            }
            TxnOp::CloseSession => return self.close_session(&ctx),
            TxnOp::DeleteContainer { path } => {
                let result = self
                    .delete_container(path, Reaped::ByReaper, &ctx, &mut events)
                    .map(|()| Response::Empty);
                self.applied(zxid, result, events)
            }
            TxnOp::Request { op_code, body } => match Request::decode(*op_code, body) {
                Ok(Request::CloseSession) => return self.close_session(&ctx),
                Ok(request) => {
                    let result = self.apply_request(&request, &ctx, &mut events);
                    self.applied(zxid, result, events)
                }
                Err(error @ (JuteError::UnknownOpCode(_) | JuteError::UnknownOpInMulti(_))) => {
                    let mut applied = self.applied(zxid, Err(ErrorCode::Unimplemented), events);
                    applied.unapplicable = Some(error);
                    applied
                }
                Err(_) => self.applied(zxid, Err(ErrorCode::MarshallingError), events),
            },
            TxnOp::Sync { .. } | TxnOp::Kv { .. } => unreachable!("handled above"),
        };
        if applied.result.is_err() {
            applied.events.clear();
        }
        applied
    }

    /// A membership change came into effect (a conf-change entry of term
    /// `term`): `/zookeeper/config` holds the new configuration's text, as
    /// ZooKeeper's reconfig writes it (a setData with version -1, so the
    /// Stat's version stays -1 and its mzxid is the configuration's id, the
    /// zxid taken here). `render` gets that zxid (the text ends with
    /// `version=<zxid hex>`). Data watches on the node fire.
    pub fn set_config(
        &mut self,
        term: u64,
        time_ms: i64,
        render: impl FnOnce(i64) -> Vec<u8>,
    ) -> Applied {
        let zxid = self.next_zxid(term);
        self.last_zxid = zxid;
        let path = crate::tree::CONFIG_PATH;
        let id = self.resolve(path).expect("/zookeeper/config always exists");
        let data = render(zxid);
        let old_bytes = self.slot(id).blob.data_len() as i64;
        self.update(
            id,
            |s| {
                s.version = -1;
                s.mtime = time_ms;
                s.mzxid = zxid;
            },
            Some(Some(&data)),
            None,
        );
        let new_bytes = self.slot(id).blob.data_len() as i64;
        self.charge_quota(path, new_bytes - old_bytes, 0);
        let stat = self.client_stat(id);
        let events = vec![event(path, EventType::NodeDataChanged)];
        self.applied(zxid, Ok(Response::GetData(Some(data), stat)), events)
    }

    fn applied(
        &self,
        zxid: i64,
        result: Result<Response, ErrorCode>,
        events: Vec<Event>,
    ) -> Applied {
        Applied {
            zxid,
            result,
            events,
            session_created: None,
            session_closed: None,
            unapplicable: None,
        }
    }

    /// zxid = epoch << 32 | counter, the epoch being the Raft term; the
    /// counter restarts at 1 in a new term, as ZooKeeper's does per epoch.
    fn next_zxid(&self, term: u64) -> i64 {
        assert!(
            term > 0 && term < (1 << 31),
            "term {term} does not fit a zxid epoch"
        );
        let epoch = (self.last_zxid >> 32) as u64;
        assert!(term >= epoch, "term went back: {term} < {epoch}");
        if term > epoch {
            return ((term as i64) << 32) | 1;
        }
        let counter = self.last_zxid & 0xffff_ffff;
        // ZooKeeper forces a new epoch before the counter wraps; Raft terms
        // only change by election, so running out is a hard stop, not a wrap.
        assert!(
            counter < 0xffff_fffe,
            "zxid counter exhausted in term {term}"
        );
        self.last_zxid + 1
    }

    fn apply_request(
        &mut self,
        request: &Request,
        ctx: &Context<'_>,
        events: &mut Vec<Event>,
    ) -> Result<Response, ErrorCode> {
        if let Request::Multi(ops) = request {
            return self.multi(ops, ctx, events).map(Response::Multi);
        }
        self.check_session(ctx)?;
        match request {
            Request::Create(r) => self
                .create(&create_args(CreateOp::Create, r), ctx, events)
                .map(|(p, _)| Response::Create(p)),
            Request::Create2(r) => self
                .create(&create_args(CreateOp::Create2, r), ctx, events)
                .map(|(p, s)| Response::Create2(p, s)),
            Request::CreateContainer(r) => self
                .create(&create_args(CreateOp::Container, r), ctx, events)
                .map(|(p, s)| Response::Create2(p, s)),
            Request::CreateTtl(r) => self
                .create(&ttl_args(r), ctx, events)
                .map(|(p, s)| Response::Create2(p, s)),
            Request::Delete(r) => self
                .delete(&r.path, r.version, ctx, events)
                .map(|()| Response::Empty),
            Request::DeleteContainer(p) => self
                .delete_container(p, Reaped::ByClient, ctx, events)
                .map(|()| Response::Empty),
            Request::SetData(r) => self
                .set_data(&r.path, &r.data, r.version, ctx, events)
                .map(Response::Stat),
            Request::SetAcl(r) => self
                .set_acl(&r.path, &r.acl, r.version, ctx)
                .map(Response::Stat),
            Request::Check(r) => self
                .check_version(&r.path, r.version, ctx)
                .map(|()| Response::Stat(Stat::default())),
            Request::CreateIfNotExists(r) => self
                .create_if_not_exists(r, ctx, events)
                .map(Response::Create),
            Request::RemoveRecursive(r) => self
                .remove_recursive(&r.path, r.remove_nodes_limit, ctx, events)
                .map(|()| Response::Empty),
            _ => Err(ErrorCode::Unimplemented),
        }
    }

    fn check_session(&self, ctx: &Context<'_>) -> Result<(), ErrorCode> {
        if self.sessions.contains_key(&ctx.session_id) {
            Ok(())
        } else {
            Err(ErrorCode::SessionExpired)
        }
    }

    /// All or nothing: ops run in order with an undo journal; the first
    /// failure undoes them and reports ZooKeeper's per-op results (0 before
    /// the failing op, its code, RuntimeInconsistency after). A TTL mode in
    /// a create op without a ttl (`multi_create_args`), reached while every
    /// op before it succeeded, undoes them too and fails the whole multi
    /// with MarshallingError: no results, and the zxid is taken as by any
    /// failed write (ZooKeeper logs an error txn).
    fn multi(
        &mut self,
        ops: &[MultiOp],
        ctx: &Context<'_>,
        events: &mut Vec<Event>,
    ) -> Result<Vec<MultiResult>, ErrorCode> {
        let mut multi_events = Vec::new();
        let mut results = Vec::with_capacity(ops.len());
        self.begin_journal();
        for (index, op) in ops.iter().enumerate() {
            if let Some(Err(code)) = multi_create_args(op) {
                self.rollback_journal();
                return Err(code);
            }
            match self.multi_op(op, ctx, &mut multi_events) {
                Ok(result) => results.push(result),
                Err(code) => {
                    self.rollback_journal();
                    let mut failed: Vec<MultiResult> = (0..ops.len())
                        .map(|_| MultiResult::Error(ErrorCode::RuntimeInconsistency.code()))
                        .collect();
                    for slot in failed.iter_mut().take(index) {
                        *slot = MultiResult::Error(0);
                    }
                    failed[index] = MultiResult::Error(code.code());
                    return Ok(failed);
                }
            }
        }
        self.commit_journal();
        events.extend(multi_events);
        Ok(results)
    }

    fn multi_op(
        &mut self,
        op: &MultiOp,
        ctx: &Context<'_>,
        events: &mut Vec<Event>,
    ) -> Result<MultiResult, ErrorCode> {
        self.check_session(ctx)?;
        match op {
            MultiOp::Create(_)
            | MultiOp::Create2(_)
            | MultiOp::CreateContainer(_)
            | MultiOp::CreateTtl(_) => {
                let Some(Ok(args)) = multi_create_args(op) else {
                    unreachable!("multi() fails the whole multi first")
                };
                let (path, stat) = self.create(&args, ctx, events)?;
                // FinalRequestProcessor: CreateResult(path) for create,
                // CreateResult(path, stat) (type 15) for the others.
                Ok(match args.op {
                    CreateOp::Create => MultiResult::Create(path),
                    _ => MultiResult::Create2(path, stat),
                })
            }
            MultiOp::Delete(r) => self
                .delete(&r.path, r.version, ctx, events)
                .map(|()| MultiResult::Delete),
            MultiOp::SetData(r) => self
                .set_data(&r.path, &r.data, r.version, ctx, events)
                .map(MultiResult::SetData),
            MultiOp::Check(r) => self
                .check_version(&r.path, r.version, ctx)
                .map(|()| MultiResult::Check),
            MultiOp::CheckNotExists(r) => self
                .check_not_exists(&r.path, r.version, ctx)
                .map(|()| MultiResult::CheckNotExists),
            MultiOp::CreateIfNotExists(r) => self
                .create_if_not_exists(r, ctx, events)
                .map(MultiResult::CreateIfNotExists),
            MultiOp::RemoveRecursive(r) => self
                .remove_recursive(&r.path, r.remove_nodes_limit, ctx, events)
                .map(|()| MultiResult::RemoveRecursive),
            // Reads inside a write multi: ZooKeeper's prep has no txn for them.
            MultiOp::GetChildren(_)
            | MultiOp::GetData(_)
            | MultiOp::Exists(_)
            | MultiOp::GetChildren2(_)
            | MultiOp::FilteredList(_) => Err(ErrorCode::Unimplemented),
        }
    }

    /// ZooKeeper's pRequest2TxnCreate followed by DataTree.createNode.
    fn create(
        &mut self,
        args: &CreateArgs<'_>,
        ctx: &Context<'_>,
        events: &mut Vec<Event>,
    ) -> Result<(String, Stat), ErrorCode> {
        let mode = CreateMode::from_flags(args.flags).ok_or(ErrorCode::BadArguments)?;
        validate_ttl(mode, args.ttl_ms)?;
        let (parent_path, _) = path::split(args.path).ok_or(ErrorCode::BadArguments)?;
        if args.path.contains('\0') {
            return Err(ErrorCode::BadArguments);
        }
        let acl = acl::fixup(args.acl, ctx.auth)?;
        let parent_path = path::parent_key(parent_path);
        // ClickHouse Keeper's /keeper exists and takes no children.
        if self.system_node(parent_path).is_some() {
            return Err(ErrorCode::BadArguments);
        }
        let parent = self.resolve_parent(parent_path).ok_or(ErrorCode::NoNode)?;
        acl::check(self.acl_of(parent), perms::CREATE, ctx.auth)?;
        let parent_stat = self.slot(parent).stat;
        let mut node_path = args.path.to_string();
        if mode.is_sequential() {
            node_path.push_str(&format!("{:010}", parent_stat.cversion));
        }
        self.refuse_keeper_write(&node_path)?;
        if !path::validate(&node_path) {
            return Err(ErrorCode::BadArguments);
        }
        let (_, name) = path::split(&node_path).expect("validated");
        // The only valid path with an empty last name is "/", which exists.
        if name.is_empty()
            || self
                .index
                .find(&self.arena, parent, name.as_bytes())
                .is_some()
        {
            return Err(ErrorCode::NodeExists);
        }
        if matches!(
            owner_kind(parent_stat.ephemeral_owner),
            OwnerKind::Ephemeral(_)
        ) {
            return Err(ErrorCode::NoChildrenForEphemerals);
        }
        let ephemeral_owner = match args.op {
            CreateOp::Container => crate::tree::CONTAINER_OWNER,
            CreateOp::Ttl => ttl_owner(args.ttl_ms).ok_or(ErrorCode::BadArguments)?,
            CreateOp::Create | CreateOp::Create2 if mode.is_ephemeral() => ctx.session_id,
            CreateOp::Create | CreateOp::Create2 => 0,
        };
        let child = NewChild {
            parent,
            parent_path,
            path: &node_path,
            name,
            ephemeral_owner,
            data: args.data.as_deref(),
            acl: &acl,
        };
        let stat = self.create_child(&child, ctx, events);
        Ok((node_path, stat))
    }

    /// Links a checked new node under its parent (DataTree.createNode):
    /// the parent's cversion and pzxid move, quotas are charged.
    fn create_child(
        &mut self,
        child: &NewChild<'_>,
        ctx: &Context<'_>,
        events: &mut Vec<Event>,
    ) -> Stat {
        let NewChild {
            parent,
            parent_path,
            path: node_path,
            name,
            ephemeral_owner,
            data,
            acl,
        } = *child;
        let stat = PackedStat {
            czxid: ctx.zxid,
            mzxid: ctx.zxid,
            ctime: ctx.time_ms,
            mtime: ctx.time_ms,
            ephemeral_owner,
            pzxid: ctx.zxid,
            ..PackedStat::default()
        };
        let zxid = ctx.zxid;
        self.update(
            parent,
            |s| {
                s.cversion = s.cversion.wrapping_add(1);
                s.pzxid = zxid;
            },
            None,
            None,
        );
        let acl = self.acls.intern(acl);
        let id = self.link(parent, name, stat, data, acl);
        let bytes = self.slot(id).blob.data_len() as i64;
        self.quota_node_created(parent_path, name);
        self.charge_quota(node_path, bytes, 1);
        events.push(event(node_path, EventType::NodeCreated));
        events.push(event(parent_path, EventType::NodeChildrenChanged));
        self.client_stat(id)
    }

    /// ClickHouse Keeper's createIfNotExists, its checks in its order: a
    /// node already there is success with no change; a sequential one is
    /// refused (BadArguments), as are container and TTL modes, which it
    /// has no way to ask for. The reply carries the path as sent.
    fn create_if_not_exists(
        &mut self,
        r: &CreateRequest,
        ctx: &Context<'_>,
        events: &mut Vec<Event>,
    ) -> Result<String, ErrorCode> {
        let mode = CreateMode::from_flags(r.flags).ok_or(ErrorCode::BadArguments)?;
        if mode.is_container() || mode.is_ttl() {
            return Err(ErrorCode::BadArguments);
        }
        // A sequential request is refused below, where ClickHouse does:
        // its path may end in a slash.
        if !mode.is_sequential() && !path::validate(&r.path) {
            return Err(ErrorCode::BadArguments);
        }
        let (parent_path, name) = path::split(&r.path).ok_or(ErrorCode::BadArguments)?;
        let parent_path = path::parent_key(parent_path);
        if self.system_node(parent_path).is_some() {
            return Err(ErrorCode::BadArguments);
        }
        let parent = self.resolve_parent(parent_path).ok_or(ErrorCode::NoNode)?;
        acl::check(self.acl_of(parent), perms::CREATE, ctx.auth)?;
        if matches!(
            owner_kind(self.slot(parent).stat.ephemeral_owner),
            OwnerKind::Ephemeral(_)
        ) {
            return Err(ErrorCode::NoChildrenForEphemerals);
        }
        if mode.is_sequential() {
            return Err(ErrorCode::BadArguments);
        }
        self.refuse_keeper_write(&r.path)?;
        // After validation only "/" has an empty last name, and it exists.
        if name.is_empty()
            || self
                .index
                .find(&self.arena, parent, name.as_bytes())
                .is_some()
        {
            return Ok(r.path.clone());
        }
        let acl = acl::fixup(&r.acl, ctx.auth)?;
        let child = NewChild {
            parent,
            parent_path,
            path: &r.path,
            name,
            ephemeral_owner: if mode.is_ephemeral() {
                ctx.session_id
            } else {
                0
            },
            data: r.data.as_deref(),
            acl: &acl,
        };
        self.create_child(&child, ctx, events);
        Ok(r.path.clone())
    }

    /// ClickHouse Keeper's removeRecursive: the node and its whole subtree
    /// go as one change, children before parents (each delete fires what a
    /// delete fires), or nothing goes. A missing node (or parent) is
    /// success. Refused: `/`, ZooKeeper's system nodes and `/keeper`
    /// (BadArguments); DELETE missing on the parent or on any node of the
    /// subtree (NoAuth); a subtree of more than `limit` nodes (NotEmpty).
    fn remove_recursive(
        &mut self,
        path: &str,
        limit: u32,
        ctx: &Context<'_>,
        events: &mut Vec<Event>,
    ) -> Result<(), ErrorCode> {
        self.refuse_keeper_write(path)?;
        if !path::validate(path) || SYSTEM_PATHS.contains(&path) {
            return Err(ErrorCode::BadArguments);
        }
        let (parent_path, name) = path::split(path).expect("a valid path has a slash");
        let Some(parent) = self.resolve(path::parent_key(parent_path)) else {
            return Ok(());
        };
        acl::check(self.acl_of(parent), perms::DELETE, ctx.auth)?;
        let Some(root) = self.index.find(&self.arena, parent, name.as_bytes()) else {
            return Ok(());
        };
        let doomed = self.subtree_to_remove(root, limit, ctx.auth)?;
        // Breadth-first order lists every node after its parent: backwards,
        // each node is childless when its turn comes.
        for id in doomed.into_iter().rev() {
            let node_path = self.path_of(id);
            self.remove(id, &node_path, ctx.zxid, events);
        }
        Ok(())
    }

    /// The subtree under `root`, breadth first, as ClickHouse Keeper walks
    /// it: a node's children are counted when the node is reached, and the
    /// walk stops with NotEmpty as soon as the count (the root included)
    /// passes `limit` (at most [`REMOVE_RECURSIVE_NODES_MAX`]), or with
    /// NoAuth at the first node whose ACL denies DELETE.
    fn subtree_to_remove(
        &self,
        root: NodeId,
        limit: u32,
        auth: &[Id],
    ) -> Result<Vec<NodeId>, ErrorCode> {
        let limit = (limit as usize).min(REMOVE_RECURSIVE_NODES_MAX);
        let mut counted = 1 + self.children(root).len();
        if counted > limit {
            return Err(ErrorCode::NotEmpty);
        }
        let mut doomed = Vec::with_capacity(counted);
        let mut queue = VecDeque::from([root]);
        while let Some(id) = queue.pop_front() {
            acl::check(self.acl_of(id), perms::DELETE, auth)?;
            doomed.push(id);
            for child in self.children(id).iter() {
                counted += self.children(child).len();
                if counted > limit {
                    return Err(ErrorCode::NotEmpty);
                }
                queue.push_back(child);
            }
        }
        assert_eq!(doomed.len(), counted, "every counted node is visited");
        Ok(doomed)
    }

    /// ZooKeeper's delete: parent ACL DELETE, version, NotEmpty.
    fn delete(
        &mut self,
        path: &str,
        version: i32,
        ctx: &Context<'_>,
        events: &mut Vec<Event>,
    ) -> Result<(), ErrorCode> {
        self.refuse_keeper_write(path)?;
        let parent_path = deletable_parent(path)?;
        let parent = self.resolve(parent_path).ok_or(ErrorCode::NoNode)?;
        acl::check(self.acl_of(parent), perms::DELETE, ctx.auth)?;
        let id = match path::split(path) {
            // One lookup under the parent, not a walk from the root again.
            Some((_, name)) if !name.is_empty() => {
                self.index.find(&self.arena, parent, name.as_bytes())
            }
            _ => self.resolve(path),
        }
        .ok_or(ErrorCode::NoNode)?;
        check_version(self.slot(id).stat.version, version)?;
        if !self.slot(id).is_leaf() {
            return Err(ErrorCode::NotEmpty);
        }
        self.remove(id, path, ctx.zxid, events);
        Ok(())
    }

    /// The reaper's delete: only an empty container or TTL node goes.
    /// The reaper chose it from an older state, so its choice is checked
    /// again here against the state it applies to: a TTL node modified
    /// since stays, and so does a container deleted and created anew
    /// meanwhile (one that never had a child). ZooKeeper's leader checks
    /// only the children (PrepRequestProcessor); a client's own
    /// deleteContainer gets exactly that check.
    fn delete_container(
        &mut self,
        path: &str,
        by: Reaped,
        ctx: &Context<'_>,
        events: &mut Vec<Event>,
    ) -> Result<(), ErrorCode> {
        deletable_parent(path)?;
        let id = self.resolve(path).ok_or(ErrorCode::NoNode)?;
        let slot = self.slot(id);
        if !slot.is_leaf() {
            return Err(ErrorCode::NotEmpty);
        }
        let early = crate::planted::reap_early();
        let never_used = slot.stat.cversion == 0 && by == Reaped::ByReaper && !early;
        match owner_kind(slot.stat.ephemeral_owner) {
            OwnerKind::Container if never_used => return Err(ErrorCode::BadVersion),
            OwnerKind::Container => {}
            // Saturating: a clock far off (either way) must not overflow.
            OwnerKind::Ttl(ttl_ms)
                if ctx.time_ms.saturating_sub(slot.stat.mtime) > ttl_ms || early => {}
            // ZooKeeper answers BadVersion for a node that is not a container.
            _ => return Err(ErrorCode::BadVersion),
        }
        self.remove(id, path, ctx.zxid, events);
        Ok(())
    }

    /// Removes a node known to exist and be childless (DataTree.deleteNode).
    fn remove(&mut self, id: NodeId, path: &str, zxid: i64, events: &mut Vec<Event>) {
        let parent_path = crate::tree::parent_path(path).expect("checked by caller");
        let parent = self.slot(id).parent;
        let removed = self.unlink_slot(id);
        self.update(
            parent,
            |s| {
                if zxid > s.pzxid {
                    s.pzxid = zxid;
                }
            },
            None,
            None,
        );
        self.charge_quota(path, -(removed.blob.data_len() as i64), -1);
        events.push(event(path, EventType::NodeDeleted));
        events.push(event(parent_path, EventType::NodeChildrenChanged));
        self.check_invariants_of(parent);
    }

    fn set_data(
        &mut self,
        path: &str,
        data: &Option<Vec<u8>>,
        version: i32,
        ctx: &Context<'_>,
        events: &mut Vec<Event>,
    ) -> Result<Stat, ErrorCode> {
        self.refuse_keeper_write(path)?;
        if !path::validate(path) {
            return Err(ErrorCode::BadArguments);
        }
        let id = self.resolve(path).ok_or(ErrorCode::NoNode)?;
        acl::check(self.acl_of(id), perms::WRITE, ctx.auth)?;
        let new_version = check_version(self.slot(id).stat.version, version)?;
        let old_bytes = self.slot(id).blob.data_len() as i64;
        let (time_ms, zxid) = (ctx.time_ms, ctx.zxid);
        self.update(
            id,
            |s| {
                s.version = new_version;
                s.mtime = time_ms;
                s.mzxid = zxid;
            },
            Some(data.as_deref()),
            None,
        );
        let new_bytes = self.slot(id).blob.data_len() as i64;
        self.charge_quota(path, new_bytes - old_bytes, 0);
        events.push(event(path, EventType::NodeDataChanged));
        Ok(self.client_stat(id))
    }

    fn set_acl(
        &mut self,
        path: &str,
        new_acl: &[Acl],
        version: i32,
        ctx: &Context<'_>,
    ) -> Result<Stat, ErrorCode> {
        self.refuse_keeper_write(path)?;
        if !path::validate(path) {
            return Err(ErrorCode::BadArguments);
        }
        let fixed = acl::fixup(new_acl, ctx.auth)?;
        let id = self.resolve(path).ok_or(ErrorCode::NoNode)?;
        acl::check(self.acl_of(id), perms::ADMIN, ctx.auth)?;
        let new_version = check_version(self.slot(id).stat.aversion, version)?;
        let acl = self.acls.intern(&fixed);
        self.update(id, |s| s.aversion = new_version, None, Some(acl));
        Ok(self.client_stat(id))
    }

    fn check_version(&self, path: &str, version: i32, ctx: &Context<'_>) -> Result<(), ErrorCode> {
        // ClickHouse Keeper refuses checks of its system nodes in a multi:
        // their content may differ between its versions.
        self.refuse_keeper_write(path)?;
        if !path::validate(path) {
            return Err(ErrorCode::BadArguments);
        }
        let id = self.resolve(path).ok_or(ErrorCode::NoNode)?;
        acl::check(self.acl_of(id), perms::READ, ctx.auth)?;
        check_version(self.slot(id).stat.version, version).map(|_| ())
    }

    /// ClickHouse Keeper's checkNotExists in a multi: NodeExists if the node
    /// is there (at `version`, unless -1); a node that is there and
    /// unreadable is NoAuth, so no version leaks.
    fn check_not_exists(
        &self,
        path: &str,
        version: i32,
        ctx: &Context<'_>,
    ) -> Result<(), ErrorCode> {
        self.refuse_keeper_write(path)?;
        if !path::validate(path) {
            return Err(ErrorCode::BadArguments);
        }
        self.node_absent(path, version, ctx.auth)
    }

    /// Ends a session: its ephemerals go (sorted order), then the session.
    fn close_session(&mut self, ctx: &Context<'_>) -> Applied {
        let mut events = Vec::new();
        for (id, path) in self.ephemerals_in_java_order(ctx.session_id) {
            assert!(self.slot(id).is_leaf(), "ephemeral {path} has children");
            self.remove(id, &path, ctx.zxid, &mut events);
        }
        assert!(!self.ephemerals.contains_key(&ctx.session_id));
        let existed = self.sessions.remove(&ctx.session_id).is_some();
        let mut applied = self.applied(ctx.zxid, Ok(Response::Empty), events);
        applied.session_closed = existed.then_some(ctx.session_id);
        applied
    }
}

impl DataTree {
    /// The order ZooKeeper deletes a closing session's ephemerals in, which
    /// clients see as the order of NodeDeleted events (all share one zxid):
    /// iteration order of a java.util.HashSet copy of the session's set
    /// (PrepRequestProcessor clones it; the clone is sized for its count).
    /// Ties inside a bucket follow creation order.
    fn ephemerals_in_java_order(&self, session_id: i64) -> Vec<(NodeId, String)> {
        let mut paths: Vec<(NodeId, String)> = match self.ephemerals.get(&session_id) {
            Some(ids) => ids.iter().map(|id| (*id, self.path_of(*id))).collect(),
            None => Vec::new(),
        };
        paths.sort_by(|a, b| a.1.cmp(&b.1));
        paths.sort_by_key(|(id, _)| self.slot(*id).stat.czxid);
        let count = paths.len();
        let original_capacity = (count.saturating_mul(4).div_ceil(3))
            .next_power_of_two()
            .max(16);
        let clone_capacity = ((count as f32 / 0.75 + 1.0) as usize).next_power_of_two();
        paths.sort_by_key(|(_, p)| java_hash_spread(p) as usize & (original_capacity - 1));
        paths.sort_by_key(|(_, p)| java_hash_spread(p) as usize & (clone_capacity - 1));
        paths
    }
}

/// java.lang.String.hashCode over UTF-16 units, spread as HashMap.hash does.
fn java_hash_spread(text: &str) -> u32 {
    let hash = text
        .encode_utf16()
        .fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32)) as u32;
    hash ^ (hash >> 16)
}

/// A new node, checked and ready to link.
#[derive(Clone, Copy)]
struct NewChild<'a> {
    parent: NodeId,
    parent_path: &'a str,
    path: &'a str,
    name: &'a str,
    ephemeral_owner: i64,
    data: Option<&'a [u8]>,
    acl: &'a [Acl],
}

fn ttl_args(r: &keel_jute::CreateTtlRequest) -> CreateArgs<'_> {
    CreateArgs {
        op: CreateOp::Ttl,
        path: &r.path,
        data: &r.data,
        acl: &r.acl,
        flags: r.flags,
        ttl_ms: r.ttl,
    }
}

fn create_args(op: CreateOp, r: &keel_jute::CreateRequest) -> CreateArgs<'_> {
    CreateArgs {
        op,
        path: &r.path,
        data: &r.data,
        acl: &r.acl,
        flags: r.flags,
        ttl_ms: -1,
    }
}

/// A create op of a multi as ZooKeeper 3.8 runs it (None: not a create).
/// MultiOperationRecord reads every create-family op (1, 15 and 19 carry a
/// CreateRequest, 21 a CreateTTLRequest) into Op.create(path, data, acl,
/// flags[, ttl]), whose opcode Op.Create.getOpcode takes from the flags
/// alone: createTTL for a TTL mode, createContainer for the container mode,
/// create for anything else (unknown flags included, which
/// pRequest2TxnCreate then refuses: BadArguments). So an op 15 answers as
/// create (a path, no Stat), an op 1 with the container flag makes a
/// container answered as createContainer is (type 15, path and Stat), an op
/// 21 without a TTL mode drops its ttl; and a TTL mode in a CreateRequest
/// reaches pRequest2TxnCreate's cast to CreateTTLRequest, whose
/// ClassCastException fails the whole multi (`Err(MarshallingError)`,
/// pRequest's catch-all; before the op's other checks).
fn multi_create_args(op: &MultiOp) -> Option<Result<CreateArgs<'_>, ErrorCode>> {
    let (args, has_ttl) = match op {
        MultiOp::Create(r) | MultiOp::Create2(r) | MultiOp::CreateContainer(r) => {
            (create_args(CreateOp::Create, r), false)
        }
        MultiOp::CreateTtl(r) => (ttl_args(r), true),
        _ => return None,
    };
    let op = match CreateMode::from_flags(args.flags) {
        Some(mode) if mode.is_ttl() && !has_ttl => return Some(Err(ErrorCode::MarshallingError)),
        Some(mode) if mode.is_ttl() => CreateOp::Ttl,
        Some(mode) if mode.is_container() => CreateOp::Container,
        _ => CreateOp::Create,
    };
    let ttl_ms = if op == CreateOp::Ttl { args.ttl_ms } else { -1 };
    Some(Ok(CreateArgs { op, ttl_ms, ..args }))
}

/// EphemeralType.validateTTL: a TTL mode needs 0 < ttl <= max; any other
/// mode must not carry a ttl.
fn validate_ttl(mode: CreateMode, ttl_ms: i64) -> Result<(), ErrorCode> {
    if mode.is_ttl() {
        ttl_owner(ttl_ms).map(|_| ()).ok_or(ErrorCode::BadArguments)
    } else if ttl_ms >= 0 {
        Err(ErrorCode::BadArguments)
    } else {
        Ok(())
    }
}

/// getParentPathAndValidate: a slash, no NUL, not a system node.
fn deletable_parent(path: &str) -> Result<&str, ErrorCode> {
    let (parent, _) = path::split(path).ok_or(ErrorCode::BadArguments)?;
    if path.contains('\0') || SYSTEM_PATHS.contains(&path) {
        return Err(ErrorCode::BadArguments);
    }
    Ok(path::parent_key(parent))
}

/// checkAndIncVersion: -1 matches anything.
fn check_version(current: i32, expected: i32) -> Result<i32, ErrorCode> {
    if expected != -1 && expected != current {
        return Err(ErrorCode::BadVersion);
    }
    Ok(current.wrapping_add(1))
}
