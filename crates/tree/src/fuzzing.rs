//! Bodies of the tree's cargo-fuzz targets in `fuzz/` (see `docs/FUZZING.md`).
//!
//! They live here, not in the fuzz crate, so that the seeded smoke tests at
//! the bottom run exactly the same checks on the stable toolchain with
//! plain `cargo test`, and so that a crashing input found by the fuzzer can
//! be replayed byte for byte in a regression test.
//!
//! - [`tree_apply`] reads the fuzzer's bytes through [`ByteSource`] (an
//!   `arbitrary::Unstructured` work-alike) as a sequence of steps: sessions,
//!   creates of every mode, deletes, setData, setACL, check, multi,
//!   deleteContainer, sync, raw request bodies, reads, reaps, term changes
//!   and snapshot reloads, ClickHouse Keeper's extensions (createIfNotExists,
//!   removeRecursive, checkNotExists, filteredList, their multis and
//!   multiReads, `/keeper`), over a small path alphabet so
//!   that they collide. After every transaction it checks the tree's
//!   invariants ([`check_invariants`]); a second tree that is reloaded from
//!   a snapshot at every `Snapshot` step must answer every transaction the
//!   same way.
//! - [`tree_batch_decode`]: [`decode_txns`] (transaction payloads back to
//!   back, as consensus delivers a batch) on arbitrary bytes, and whatever
//!   decodes is applied to a fresh tree.
//! - [`snapshot_decode`]: `snapshot::decode` on arbitrary bytes, raw and with
//!   the envelope (magic, version, checksum, digest) repaired so the fuzzer
//!   reaches the structural checks.

use std::collections::BTreeSet;

use keel_jute::{
    opcode, perms, Acl, CheckVersionRequest, CreateRequest, CreateTtlRequest, DeleteRequest,
    ErrorCode, EventType, ExistsRequest, FilteredListRequest, GetAclRequest,
    GetAllChildrenNumberRequest, GetChildren2Request, GetChildrenRequest, GetDataRequest,
    GetEphemeralsRequest, Id, ListRequestType, MultiOp, MultiResult, RemoveRecursiveRequest,
    Request, Response, SetAclRequest, SetDataRequest,
};

use crate::store::ROOT;
use crate::tree::{owner_kind, OwnerKind, SYSTEM_PATHS};
use crate::{path, snapshot, Applied, DataTree, Txn, TxnOp};

/// Most steps one `tree_apply` input runs (keeps each execution short).
pub const STEPS_MAX: usize = 96;

/// Reads structured choices from fuzzer bytes, like `arbitrary::Unstructured`:
/// every read consumes bytes from the front and yields zeros once the input
/// is exhausted, so any byte string is a valid (possibly short) program.
#[derive(Debug, Clone)]
pub struct ByteSource<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> ByteSource<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    pub fn byte(&mut self) -> u8 {
        let byte = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = (self.pos + 1).min(self.data.len());
        byte
    }

    /// A value in `0..n` (0 when `n` <= 1).
    pub fn below(&mut self, n: usize) -> usize {
        match n {
            0 | 1 => 0,
            2..=256 => self.byte() as usize % n,
            _ => self.u32() as usize % n,
        }
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    pub fn i32(&mut self) -> i32 {
        self.u32() as i32
    }

    pub fn i64(&mut self) -> i64 {
        ((self.u32() as i64) << 32) | self.u32() as i64
    }

    /// Up to `max` bytes, length first.
    pub fn bytes(&mut self, max: usize) -> Vec<u8> {
        let len = self.below(max + 1);
        let start = self.pos;
        let end = (start + len).min(self.data.len());
        self.pos = end;
        self.data[start..end].to_vec()
    }

    pub fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

// ---------------------------------------------------------------------------
// Alphabets: few enough values that operations hit each other.

/// Paths, valid and not: system nodes, quota nodes, bad syntax.
const PATHS: &[&str] = &[
    "/",
    "/a",
    "/a/b",
    "/a/b/c",
    "/a/c",
    "/b",
    "/b/a",
    "/c",
    "/a/",
    "/a//b",
    "a",
    "",
    "/a/../b",
    "/.",
    "/x\0",
    "/\u{1F600}",
    "/ü",
    "/zookeeper",
    "/zookeeper/config",
    "/zookeeper/config/x",
    "/zookeeper/quota",
    "/zookeeper/quota/a",
    "/zookeeper/quota/a/zookeeper_limits",
    "/zookeeper/quota/a/zookeeper_stats",
    "/zookeeper/quotax",
    "/zookeeper/quotax/zookeeper_stats",
];

/// ClickHouse Keeper's system paths and neighbours (a list of their own,
/// so that picks from `PATHS` keep meaning what they meant in recorded
/// inputs).
const KEEPER_PATHS: &[&str] = &[
    "/keeper",
    "/keeper/api_version",
    "/keeper/feature_flags",
    "/keeper/x",
    "/keeper/",
    "/keeperx",
];

/// removeRecursive limits: none, tight, loose, the whole range.
const REMOVE_LIMITS: &[u32] = &[0, 1, 2, 3, 5, 100, u32::MAX];

/// Child names appended to existing paths.
const NAMES: &[&str] = &[
    "a",
    "b",
    "c",
    "d",
    "s-",
    "",
    "zookeeper_limits",
    "zookeeper_stats",
];

/// Live-able session ids, shaped like Keel's (server id in the top byte;
/// 0xff is server 255). Ids the tree treats as owner markers (0, i64::MIN,
/// 0xff00..00xx) are never issued by keel-session, so they are not used.
const SESSIONS: &[i64] = &[
    0x100,
    0x200,
    0x0100_0000_0000_0001,
    0xff9b_76da_a800_0000_u64 as i64,
];

const TIMEOUTS: &[u32] = &[0, 4_000, 30_000, u32::MAX];

const VERSIONS: &[i32] = &[-1, -1, 0, 0, 1, 2, -2, i32::MAX, i32::MIN];

const FLAGS: &[i32] = &[0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 7, -1, i32::MIN];

const TTLS: &[i64] = &[
    -1,
    -1,
    0,
    1,
    100,
    10_000,
    0xff_ffff_ffff,
    0x100_0000_0000,
    i64::MAX,
    i64::MIN,
];

fn id(scheme: &str, id: &str) -> Id {
    Id {
        scheme: scheme.into(),
        id: id.into(),
    }
}

fn acl(perms: i32, scheme: &str, who: &str) -> Acl {
    Acl {
        perms,
        id: id(scheme, who),
    }
}

fn auth_choices() -> Vec<Vec<Id>> {
    vec![
        vec![],
        vec![],
        vec![id("digest", "u:h")],
        vec![id("super", "")],
        vec![id("ip", "10.1.2.3")],
        vec![id("ip", "10.1.2.3"), id("digest", "v:h")],
    ]
}

fn acl_choices() -> Vec<Vec<Acl>> {
    vec![
        vec![acl(perms::ALL, "world", "anyone")],
        vec![acl(perms::ALL, "world", "anyone")],
        vec![acl(perms::READ, "world", "anyone")],
        vec![acl(perms::CREATE | perms::DELETE, "world", "anyone")],
        vec![acl(perms::ALL, "digest", "u:h")],
        vec![acl(perms::ALL, "auth", "")],
        vec![acl(perms::ALL, "ip", "10.0.0.0/8")],
        vec![acl(perms::ALL, "ip", "10.0.0.0/99")],
        vec![],
        vec![acl(perms::ALL, "kerberos", "x")],
        vec![acl(perms::ALL, "digest", "no-colon")],
        vec![
            acl(perms::ALL, "world", "anyone"),
            acl(perms::ALL, "world", "anyone"),
        ],
        vec![acl(0, "world", "anyone")],
    ]
}

// ---------------------------------------------------------------------------
// tree_apply

/// Target `tree_apply`: runs the step program in `data`.
pub fn tree_apply(data: &[u8]) {
    let mut src = ByteSource::new(data);
    let mut world = World::new();
    world.open_session(SESSIONS[0]);
    for _ in 0..STEPS_MAX {
        if src.is_empty() {
            break;
        }
        world.step(&mut src);
    }
    world.finish();
}

struct World {
    /// The tree every transaction is applied to.
    tree: DataTree,
    /// Gets the same transactions, but is replaced by a reload of its own
    /// snapshot at every `Snapshot` step: it must stay indistinguishable.
    restored: DataTree,
    term: u64,
    time_ms: i64,
    /// Next proposal sequence per origin (index = origin id).
    index: u64,
    /// A snapshot of `tree` being written a part per transaction: the
    /// tree as it was when it began, and the bytes so far.
    writing: Option<(DataTree, Vec<u8>)>,
}

impl World {
    fn new() -> World {
        World {
            tree: DataTree::new(),
            restored: DataTree::new(),
            term: 1,
            writing: None,
            time_ms: 1_700_000_000_000,
            index: 0,
        }
    }

    fn open_session(&mut self, session_id: i64) {
        self.apply(Txn {
            session_id,
            xid: 0,
            time_ms: self.time_ms,
            auth: Vec::new(),
            op: TxnOp::CreateSession { timeout_ms: 30_000 },
        });
    }

    fn step(&mut self, src: &mut ByteSource<'_>) {
        match src.below(28) {
            0 | 1 => {
                let timeout_ms = src.pick(TIMEOUTS);
                let session_id = src.pick(SESSIONS);
                self.apply_as(src, session_id, TxnOp::CreateSession { timeout_ms });
            }
            2 if src.below(2) == 0 => {
                self.txn(src, TxnOp::CloseSession);
            }
            2 => {
                self.request(src, Request::CloseSession);
            }
            3..=7 | 24..=27 => {
                let request = self.gen_create(src);
                self.request(src, request);
            }
            8 => {
                let request = Request::Delete(DeleteRequest {
                    path: self.gen_path(src),
                    version: src.pick(VERSIONS),
                });
                self.request(src, request);
            }
            9 => {
                let request = Request::SetData(SetDataRequest {
                    path: self.gen_path(src),
                    data: gen_data(src),
                    version: src.pick(VERSIONS),
                });
                self.request(src, request);
            }
            10 => {
                let request = Request::SetAcl(SetAclRequest {
                    path: self.gen_path(src),
                    acl: src.pick(&acl_choices()),
                    version: src.pick(VERSIONS),
                });
                self.request(src, request);
            }
            11 => {
                let request = Request::Check(CheckVersionRequest {
                    path: self.gen_path(src),
                    version: src.pick(VERSIONS),
                });
                self.request(src, request);
            }
            12 | 13 => {
                let count = src.below(6);
                let ops = (0..count).map(|_| self.gen_multi_op(src)).collect();
                self.request(src, Request::Multi(ops));
            }
            14 => {
                let path = self.gen_path(src);
                self.txn(src, TxnOp::DeleteContainer { path });
            }
            15 => {
                let path = self.gen_path(src);
                self.request(src, Request::DeleteContainer(path));
            }
            16 => {
                let path = self.gen_path(src);
                self.txn(src, TxnOp::Sync { path });
            }
            17 => {
                let op_code = src.pick(&keel_jute::fuzzing::OP_CODES);
                let body = src.bytes(48);
                self.txn(src, TxnOp::Request { op_code, body });
            }
            18 => self.read(src),
            19 => self.reap(),
            20 if src.below(2) == 0 => self.begin_writing(),
            20 => self.snapshot(),
            21 if self.term < (1 << 31) - 1 => self.term += 1,
            22 => {
                self.time_ms = match src.below(8) {
                    0 => src.pick(&[i64::MIN, i64::MAX, 0, -1]),
                    1 => self.time_ms.saturating_sub(src.below(1_000) as i64),
                    _ => self.time_ms.saturating_add(src.below(200_000) as i64),
                }
            }
            23 => self.clickhouse_step(src),
            _ => {}
        }
    }

    /// One of ClickHouse Keeper's requests (slot 23 was a no-op before
    /// them, so recorded inputs keep their meaning).
    fn clickhouse_step(&mut self, src: &mut ByteSource<'_>) {
        match src.below(8) {
            0 | 1 => {
                let Request::Create(create) = self.gen_create_kind(src, 0) else {
                    unreachable!("kind 0 is a plain create");
                };
                let request = Request::CreateIfNotExists(CreateRequest {
                    path: self.gen_clickhouse_path(src),
                    ..create
                });
                self.request(src, request);
            }
            2 | 3 => {
                let request = Request::RemoveRecursive(RemoveRecursiveRequest {
                    path: self.gen_clickhouse_path(src),
                    remove_nodes_limit: src.pick(REMOVE_LIMITS),
                });
                self.request(src, request);
            }
            4 => {
                let count = src.below(5);
                let ops = (0..count).map(|_| self.gen_clickhouse_op(src)).collect();
                self.request(src, Request::Multi(ops));
            }
            5 => {
                let op_code = src.pick(&keel_jute::fuzzing::CLICKHOUSE_OP_CODES);
                let body = src.bytes(48);
                self.txn(src, TxnOp::Request { op_code, body });
            }
            _ => self.clickhouse_read(src),
        }
    }

    /// A path of the usual alphabet, or one at or near `/keeper`.
    fn gen_clickhouse_path(&self, src: &mut ByteSource<'_>) -> String {
        if src.below(4) == 0 {
            return src.pick(KEEPER_PATHS).to_string();
        }
        self.gen_path(src)
    }

    /// A multi op: one of ClickHouse's writes, or any of ZooKeeper's.
    fn gen_clickhouse_op(&self, src: &mut ByteSource<'_>) -> MultiOp {
        match src.below(4) {
            0 => MultiOp::CheckNotExists(CheckVersionRequest {
                path: self.gen_clickhouse_path(src),
                version: src.pick(VERSIONS),
            }),
            1 => match self.gen_create_kind(src, 0) {
                Request::Create(create) => MultiOp::CreateIfNotExists(CreateRequest {
                    path: self.gen_clickhouse_path(src),
                    ..create
                }),
                other => unreachable!("kind 0 made {other:?}"),
            },
            2 => MultiOp::RemoveRecursive(RemoveRecursiveRequest {
                path: self.gen_clickhouse_path(src),
                remove_nodes_limit: src.pick(REMOVE_LIMITS),
            }),
            _ => self.gen_multi_op(src),
        }
    }

    /// filteredList, checkNotExists or a multiRead of ClickHouse's reads,
    /// answered alike by the tree and its snapshot-restored twin.
    fn clickhouse_read(&mut self, src: &mut ByteSource<'_>) {
        let types = [
            ListRequestType::All,
            ListRequestType::PersistentOnly,
            ListRequestType::EphemeralOnly,
        ];
        let path = self.gen_clickhouse_path(src);
        let watch = src.below(2) == 1;
        let list = FilteredListRequest {
            path: path.clone(),
            watch,
            list_type: src.pick(&types),
        };
        let request = match src.below(3) {
            0 => Request::FilteredList(list),
            1 => Request::CheckNotExists(CheckVersionRequest {
                path,
                version: src.pick(VERSIONS),
            }),
            _ => Request::MultiRead(vec![
                MultiOp::Exists(ExistsRequest {
                    path: path.clone(),
                    watch,
                }),
                MultiOp::GetChildren2(GetChildren2Request {
                    path: path.clone(),
                    watch,
                }),
                MultiOp::FilteredList(list),
                MultiOp::GetData(GetDataRequest { path, watch }),
            ]),
        };
        let session_id = self.gen_session(src);
        let auth = src.pick(&auth_choices());
        let outcome = self
            .tree
            .read(&request, session_id, &auth)
            .expect("a read request is served");
        let again = self.restored.read(&request, session_id, &auth);
        assert_eq!(Some(&outcome), again.as_ref());
        check_read_for_reply(&self.tree, &request, session_id, &auth, &outcome);
        if let (Request::MultiRead(ops), Ok(Response::Multi(results))) = (&request, &outcome.result)
        {
            assert_eq!(ops.len(), results.len());
        }
    }

    /// A fixed path, an existing node, or a child of an existing node.
    fn gen_path(&self, src: &mut ByteSource<'_>) -> String {
        self.gen_path_weighted(src, 3)
    }

    /// Like `gen_path`, but rather a new child of an existing node.
    fn gen_new_path(&self, src: &mut ByteSource<'_>) -> String {
        self.gen_path_weighted(src, 1)
    }

    /// Out of 8: 2 a fixed path, `existing` an existing node, the rest a
    /// child of an existing node.
    fn gen_path_weighted(&self, src: &mut ByteSource<'_>, existing: usize) -> String {
        let mode = src.below(8);
        if mode < 2 {
            return src.pick(PATHS).to_string();
        }
        let paths = self.tree.paths();
        let node = src.pick(&paths);
        if mode < 2 + existing {
            node
        } else {
            path::join(&node, src.pick(NAMES))
        }
    }

    /// Mostly well-formed creates (flags that fit the op, a valid ACL and
    /// ttl), so that trees grow; sometimes anything from the alphabets.
    fn gen_create(&self, src: &mut ByteSource<'_>) -> Request {
        let kind = src.below(4);
        self.gen_create_kind(src, kind)
    }

    /// `gen_create` of one kind: 0 create, 1 create2, 2 container, 3 TTL.
    fn gen_create_kind(&self, src: &mut ByteSource<'_>, kind: usize) -> Request {
        let wild = src.below(4) == 0;
        let flags = if wild {
            src.pick(FLAGS)
        } else {
            match kind {
                0 | 1 => src.below(4) as i32,
                2 => 4,
                _ => 5 + src.below(2) as i32,
            }
        };
        let request = CreateRequest {
            path: self.gen_new_path(src),
            data: gen_data(src),
            acl: if wild {
                src.pick(&acl_choices())
            } else {
                crate::acl::open_acl_unsafe()
            },
            flags,
        };
        match kind {
            0 => Request::Create(request),
            1 => Request::Create2(request),
            2 => Request::CreateContainer(request),
            _ => Request::CreateTtl(CreateTtlRequest {
                path: request.path,
                data: request.data,
                acl: request.acl,
                flags: request.flags,
                ttl: if wild {
                    src.pick(TTLS)
                } else {
                    src.pick(&[1, 100, 5_000])
                },
            }),
        }
    }

    fn gen_multi_op(&self, src: &mut ByteSource<'_>) -> MultiOp {
        if src.below(2) == 0 {
            return match src.below(5) {
                0 => MultiOp::Delete(DeleteRequest {
                    path: self.gen_path(src),
                    version: src.pick(VERSIONS),
                }),
                1 => MultiOp::SetData(SetDataRequest {
                    path: self.gen_path(src),
                    data: gen_data(src),
                    version: src.pick(VERSIONS),
                }),
                2 => MultiOp::Check(CheckVersionRequest {
                    path: self.gen_path(src),
                    version: src.pick(VERSIONS),
                }),
                3 => MultiOp::GetData(GetDataRequest {
                    path: self.gen_path(src),
                    watch: false,
                }),
                _ => MultiOp::GetChildren(GetChildrenRequest {
                    path: self.gen_path(src),
                    watch: false,
                }),
            };
        }
        match self.gen_create(src) {
            Request::Create(r) => MultiOp::Create(r),
            Request::Create2(r) => MultiOp::Create2(r),
            Request::CreateContainer(r) => MultiOp::CreateContainer(r),
            Request::CreateTtl(r) => MultiOp::CreateTtl(r),
            other => unreachable!("gen_create made {other:?}"),
        }
    }

    /// Mostly a live session, else any from the alphabet.
    fn gen_session(&self, src: &mut ByteSource<'_>) -> i64 {
        let live: Vec<i64> = self.tree.sessions.keys().copied().collect();
        if live.is_empty() || src.below(8) == 0 {
            src.pick(SESSIONS)
        } else {
            src.pick(&live)
        }
    }

    fn request(&mut self, src: &mut ByteSource<'_>, request: Request) -> Applied {
        let mut body = Vec::new();
        request.encode(&mut body);
        let op = TxnOp::Request {
            op_code: request.op_code(),
            body,
        };
        let applied = self.txn(src, op);
        check_request_outcome(&self.tree, &request, &applied);
        applied
    }

    fn txn(&mut self, src: &mut ByteSource<'_>, op: TxnOp) -> Applied {
        let session_id = self.gen_session(src);
        self.apply_as(src, session_id, op)
    }

    fn apply_as(&mut self, src: &mut ByteSource<'_>, session_id: i64, op: TxnOp) -> Applied {
        // Formerly a proposal id (dedup moved to keel-consensus): the
        // bytes are still consumed, so recorded inputs keep their meaning.
        if src.below(4) == 0 {
            src.below(3);
            src.below(2);
        }
        self.time_ms = self.time_ms.saturating_add(src.below(50) as i64);
        let txn = Txn {
            session_id,
            xid: src.below(100) as i32,
            time_ms: self.time_ms,
            auth: if src.below(2) == 0 {
                Vec::new()
            } else {
                src.pick(&auth_choices())
            },
            op,
        };
        self.apply(txn)
    }

    fn apply(&mut self, txn: Txn) -> Applied {
        assert_eq!(Txn::decode(&txn.encode()).as_ref(), Ok(&txn));
        let before = self.tree.clone();
        let applied = self.tree.apply(self.term, &txn);
        let replayed = self.restored.apply(self.term, &txn);
        assert_eq!(applied, replayed, "a snapshot-restored tree diverged");
        assert_eq!(self.tree.digest(), self.restored.digest());
        check_applied(&before, &self.tree, &txn, &applied);
        check_invariants(&self.tree);
        self.write_part();
        applied
    }

    fn read(&mut self, src: &mut ByteSource<'_>) {
        let path = self.gen_path(src);
        let watch = src.below(2) == 1;
        let request = match src.below(8) {
            0 => Request::Exists(keel_jute::ExistsRequest { path, watch }),
            1 => Request::GetData(GetDataRequest { path, watch }),
            2 => Request::GetChildren(GetChildrenRequest { path, watch }),
            3 => Request::GetChildren2(GetChildren2Request { path, watch }),
            4 => Request::GetAcl(GetAclRequest { path }),
            5 => Request::GetAllChildrenNumber(GetAllChildrenNumberRequest { path }),
            6 => Request::GetEphemerals(GetEphemeralsRequest { prefix_path: path }),
            _ => Request::MultiRead(vec![
                MultiOp::GetData(GetDataRequest {
                    path: path.clone(),
                    watch,
                }),
                MultiOp::GetChildren(GetChildrenRequest { path, watch }),
            ]),
        };
        let session_id = self.gen_session(src);
        let auth = src.pick(&auth_choices());
        let outcome = self
            .tree
            .read(&request, session_id, &auth)
            .expect("a read request is served");
        let again = self.restored.read(&request, session_id, &auth);
        assert_eq!(Some(&outcome), again.as_ref());
        check_read_for_reply(&self.tree, &request, session_id, &auth, &outcome);
        if let Ok(Response::GetAllChildrenNumber(n)) = &outcome.result {
            assert!(*n >= 0);
        }
    }

    /// Every reap candidate can be deleted by the reaper right now.
    fn reap(&mut self) {
        let candidates = self.tree.reap_candidates(self.time_ms);
        assert_eq!(candidates, self.restored.reap_candidates(self.time_ms));
        for path in candidates {
            if self.tree.node(&path).is_none() {
                continue;
            }
            let txn = Txn {
                session_id: 0,
                xid: 0,
                time_ms: self.time_ms,
                auth: Vec::new(),
                op: TxnOp::DeleteContainer { path: path.clone() },
            };
            let applied = self.apply(txn);
            assert_eq!(applied.result, Ok(Response::Empty), "reaping {path}");
        }
    }

    /// Starts writing a snapshot of `tree` while the next transactions
    /// change it (copy-on-write per node).
    fn begin_writing(&mut self) {
        if self.writing.is_some() {
            return;
        }
        let expected = self.tree.clone();
        let bytes = self.tree.snapshot_begin();
        self.writing = Some((expected, bytes));
    }

    /// One part of the snapshot being written; at its end, the file must
    /// load as the tree was when the write began.
    fn write_part(&mut self) {
        let Some((_, bytes)) = &mut self.writing else {
            return;
        };
        if self.tree.snapshot_chunk(bytes).expect("a running snapshot") {
            return;
        }
        let (expected, bytes) = self.writing.take().expect("checked");
        self.tree.snapshot_end();
        let loaded = snapshot::decode(&bytes).expect("a snapshot written under changes loads");
        assert_same(&expected, &loaded);
        check_invariants(&loaded);
    }

    fn snapshot(&mut self) {
        self.index += 1;
        self.tree.set_applied(self.index, self.term);
        self.restored.set_applied(self.index, self.term);
        let mut bytes = Vec::new();
        snapshot::encode(&mut self.restored, &mut bytes);
        self.restored = snapshot::decode(&bytes).expect("a snapshot of a valid tree loads");
        assert_same(&self.tree, &self.restored);
    }

    fn finish(&mut self) {
        while self.writing.is_some() {
            self.write_part();
        }
        check_invariants(&self.tree);
        assert_same(&self.tree, &self.restored);
        let bytes = snapshot::encode_copy(&self.tree);
        let loaded = snapshot::decode(&bytes).expect("a snapshot of a valid tree loads");
        assert_same(&self.tree, &loaded);
        check_invariants(&loaded);
    }
}

fn gen_data(src: &mut ByteSource<'_>) -> Option<Vec<u8>> {
    match src.below(8) {
        0 => None,
        1 => Some(Vec::new()),
        2 => Some(b"count=9223372036854775807,bytes=9223372036854775807".to_vec()),
        3 => Some(b"count=1,bytes=-9223372036854775808=;countHardLimit=1".to_vec()),
        _ => Some(src.bytes(24)),
    }
}

/// What one transaction may and must have changed.
fn check_applied(before: &DataTree, after: &DataTree, txn: &Txn, applied: &Applied) {
    let unchanged = |why: &str| {
        assert_eq!(before.digest, after.digest, "{why}: digest changed");
        assert_eq!(before.node_count, after.node_count, "{why}: nodes changed");
        assert_eq!(before.sessions, after.sessions, "{why}: sessions changed");
    };
    // What takes no zxid and changes nothing: a sync, and a Keel KV
    // operation (the keyspace's: the server never gives it to the tree,
    // which refuses it).
    let untouched = match &txn.op {
        TxnOp::Sync { path } => Some(("sync", Ok(Response::Sync(path.clone())))),
        TxnOp::Kv { .. } => Some(("kv", Err(ErrorCode::Unimplemented))),
        _ => None,
    };
    if let Some((why, result)) = untouched {
        unchanged(why);
        assert_eq!(applied.zxid, before.last_zxid);
        assert_eq!(after.last_zxid, before.last_zxid);
        assert_eq!(applied.result, result);
        assert!(applied.events.is_empty());
        return;
    }
    assert_eq!(applied.zxid, after.last_zxid);
    assert!(after.last_zxid > before.last_zxid, "zxid did not advance");
    match &applied.result {
        Err(_) => {
            unchanged("failed txn");
            assert!(applied.events.is_empty(), "failed txn fired {applied:?}");
        }
        Ok(Response::Multi(results)) if results.iter().any(is_error) => {
            unchanged("failed multi");
            assert!(applied.events.is_empty(), "failed multi fired {applied:?}");
        }
        Ok(_) => {}
    }
    if let Some((session, timeout)) = applied.session_created {
        assert_eq!(before.sessions.get(&session), None);
        assert_eq!(after.sessions.get(&session), Some(&timeout));
    }
    if let Some(session) = applied.session_closed {
        assert!(!after.sessions.contains_key(&session));
        assert!(!after.ephemerals.contains_key(&session));
        for event in &applied.events {
            assert_eq!(
                event.event_type == EventType::NodeDeleted,
                after.node(&event.path).is_none()
            );
        }
    }
    if matches!(txn.op, TxnOp::CloseSession) {
        assert!(!after.sessions.contains_key(&txn.session_id));
        assert!(!after.ephemerals.contains_key(&txn.session_id));
    }
}

fn is_error(result: &MultiResult) -> bool {
    matches!(result, MultiResult::Error(_) | MultiResult::Failed { .. })
}

/// The reply matches the request's kind and the tree agrees with it.
fn check_request_outcome(tree: &DataTree, request: &Request, applied: &Applied) {
    let Ok(response) = &applied.result else {
        return;
    };
    match (request, response) {
        (Request::Create(_), Response::Create(path)) => {
            assert!(tree.node(path).is_some(), "created {path} is missing");
        }
        (
            Request::Create2(_) | Request::CreateContainer(_) | Request::CreateTtl(_),
            Response::Create2(path, stat),
        ) => {
            let node = tree.node(path).expect("created node exists");
            assert_eq!(&DataTree::stat_of(&node), stat);
        }
        (Request::SetData(r), Response::Stat(stat)) => {
            let node = tree.node(&r.path).expect("set node exists");
            assert_eq!(&DataTree::stat_of(&node), stat);
            assert_eq!(node.data.as_deref(), r.data.as_deref());
        }
        (Request::SetAcl(r), Response::Stat(stat)) => {
            let node = tree.node(&r.path).expect("set node exists");
            assert_eq!(&DataTree::stat_of(&node), stat);
        }
        (Request::Delete(DeleteRequest { path, .. }), Response::Empty)
        | (Request::DeleteContainer(path), Response::Empty) => {
            assert!(tree.node(path).is_none(), "deleted {path} is still there");
        }
        (Request::Check(_), Response::Stat(_)) | (Request::CloseSession, Response::Empty) => {}
        (Request::CreateIfNotExists(r), Response::Create(path)) => {
            assert_eq!(&r.path, path, "createIfNotExists answers the path asked");
            assert!(
                tree.node(path).is_some() || path == "/",
                "{path} is missing"
            );
        }
        (Request::RemoveRecursive(r), Response::Empty) => {
            assert!(tree.node(&r.path).is_none(), "{} is still there", r.path);
        }
        (Request::Multi(ops), Response::Multi(results)) => {
            assert_eq!(ops.len(), results.len());
        }
        (request, response) => panic!("{request:?} answered {response:?}"),
    }
}

/// Everything that must hold of any tree built by `apply`.
pub fn check_invariants(tree: &DataTree) {
    check_tree(tree, true);
}

/// The structural part of [`check_invariants`], which must hold of any tree
/// `snapshot::decode` accepts too: links, sorted child lists, counts,
/// digest, path index, owner indexes and childless ephemerals. (Without
/// `strict`, paths, zxids and ephemeral owners are not checked against the
/// rest of the tree: a snapshot is trusted for those.)
pub fn check_tree(tree: &DataTree, strict: bool) {
    tree.verify().unwrap_or_else(|e| panic!("{e}"));
    assert!(!tree.arena.get(ROOT).is_free(), "the root is missing");
    for system in SYSTEM_PATHS {
        assert!(
            !strict || tree.resolve(system).is_some(),
            "{system} is missing"
        );
    }
    for (id, slot) in tree.arena.iter() {
        if slot.is_free() {
            continue;
        }
        let node_path = tree.path_of(id);
        if strict {
            assert!(path::validate(&node_path), "invalid path {node_path:?}");
            assert!(slot.stat.czxid <= tree.last_zxid, "{node_path} czxid");
            assert!(slot.stat.mzxid <= tree.last_zxid, "{node_path} mzxid");
            assert!(slot.stat.pzxid <= tree.last_zxid, "{node_path} pzxid");
        }
        assert_eq!(tree.resolve(&node_path), Some(id), "{node_path} resolves");
        if id != ROOT {
            let parent = tree.arena.get(slot.parent);
            assert!(!parent.is_free(), "{node_path} has no parent");
            assert!(
                tree.arena.children(slot.parent).contains(id),
                "{node_path} not linked"
            );
        }
        tree.arena.check_children_form(id);
        let mut previous: Option<&[u8]> = None;
        for child in tree.arena.children(id).iter() {
            let child_slot = tree.arena.get(child);
            assert!(!child_slot.is_free(), "a child of {node_path} is dangling");
            assert_eq!(
                child_slot.parent, id,
                "a child of {node_path} names another parent"
            );
            let name = child_slot.blob.name_bytes();
            assert!(
                previous.is_none_or(|previous| previous < name),
                "{node_path} children unsorted"
            );
            previous = Some(name);
        }
        if let OwnerKind::Ephemeral(session) = owner_kind(slot.stat.ephemeral_owner) {
            assert!(slot.is_leaf(), "ephemeral {node_path} has children");
            assert!(
                !strict || tree.sessions.contains_key(&session),
                "ephemeral {node_path} of dead session {session:#x}"
            );
        }
        let _ = tree.client_stat(id);
    }
}

/// Two trees hold the same state (a tree and its snapshot reload).
pub fn assert_same(a: &DataTree, b: &DataTree) {
    assert_eq!(a.digest, b.digest, "digest");
    assert_eq!(a.last_zxid, b.last_zxid, "last zxid");
    assert_eq!(a.applied_index, b.applied_index, "applied index");
    assert_eq!(a.applied_term, b.applied_term, "applied term");
    assert_eq!(a.sessions, b.sessions, "sessions");
    assert_eq!(a.node_count, b.node_count, "node count");
    assert_eq!(a.data_size, b.data_size, "data size");
    let paths = a.paths();
    assert_eq!(paths, b.paths(), "paths");
    for node_path in &paths {
        assert_eq!(a.node(node_path), b.node(node_path), "{node_path}");
    }
    for session in a.sessions.keys() {
        assert_eq!(
            a.ephemerals_of(*session),
            b.ephemerals_of(*session),
            "ephemerals"
        );
    }
    let by_path = |tree: &DataTree, ids: &BTreeSet<u32>| -> BTreeSet<String> {
        ids.iter().map(|id| tree.path_of(*id)).collect()
    };
    assert_eq!(
        by_path(a, &a.containers),
        by_path(b, &b.containers),
        "containers"
    );
    assert_eq!(by_path(a, &a.ttls), by_path(b, &b.ttls), "ttls");
}

// ---------------------------------------------------------------------------
// Transactions for code that applies to a tree without a server (the
// crate's examples and integration tests)

/// `op` as session 1's transaction (xid 1, time 1 ms, no auth ids).
pub fn local_txn(op: TxnOp) -> Txn {
    Txn {
        session_id: 1,
        xid: 1,
        time_ms: 1,
        auth: Vec::new(),
        op,
    }
}

/// A client's write request as session 1's transaction.
pub fn local_request(request: &keel_jute::Request) -> Txn {
    let mut body = Vec::new();
    request.encode(&mut body);
    local_txn(TxnOp::Request {
        op_code: request.op_code(),
        body,
    })
}

// ---------------------------------------------------------------------------
// tree_batch_decode

/// Most transactions [`decode_txns`] reads.
pub const DECODE_TXNS_MAX: usize = 4096;

/// Transaction payloads back to back (what a log entry's proposals carry),
/// read until the bytes end: any malformed one fails the whole input.
pub fn decode_txns(data: &[u8]) -> Result<Vec<Txn>, keel_jute::JuteError> {
    let mut r = keel_jute::Reader::new(data);
    let mut txns = Vec::new();
    while r.remaining() > 0 {
        if txns.len() == DECODE_TXNS_MAX {
            return Err(keel_jute::JuteError::Malformed("too many transactions"));
        }
        txns.push(Txn::read(&mut r)?);
    }
    Ok(txns)
}

/// The inverse of [`decode_txns`].
pub fn encode_txns(txns: &[Txn]) -> Vec<u8> {
    txns.iter().flat_map(|txn| txn.encode()).collect()
}

/// Target `tree_batch_decode`: [`decode_txns`] on arbitrary bytes must fail
/// cleanly or give transactions that re-encode losslessly and apply to a
/// fresh tree without breaking its invariants.
pub fn tree_batch_decode(data: &[u8]) {
    let Ok(txns) = decode_txns(data) else {
        return;
    };
    let encoded = encode_txns(&txns);
    assert!(encoded.len() <= data.len());
    assert_eq!(decode_txns(&encoded).as_ref(), Ok(&txns));
    let mut tree = DataTree::new();
    for txn in &txns {
        let before = tree.clone();
        let applied = tree.apply(1, txn);
        check_applied(&before, &tree, txn, &applied);
        check_invariants(&tree);
    }
}

// ---------------------------------------------------------------------------
// snapshot_decode

const SNAPSHOT_MAGIC: &[u8] = b"KEELSNAP";
/// Offset of the stored digest in a snapshot body (the frames after magic
/// and version): the header frame's 9-byte frame header, then the applied
/// index, applied term and last zxid.
const BODY_DIGEST_AT: usize = 9 + 8 + 8 + 8;

/// Magic + version + `body` with every whole frame's CRC recomputed: a
/// snapshot whose envelope is right, so the fuzzer reaches the structure.
pub fn seal_snapshot(body: &[u8]) -> Vec<u8> {
    let mut bytes = SNAPSHOT_MAGIC.to_vec();
    bytes.extend_from_slice(&snapshot::FORMAT_VERSION.to_be_bytes());
    let start = bytes.len();
    bytes.extend_from_slice(body);
    let mut offset = start;
    while bytes.len() - offset >= 9 {
        let len = u32::from_be_bytes(bytes[offset + 1..offset + 5].try_into().expect("4")) as usize;
        if bytes.len() - offset - 9 < len {
            break;
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(&bytes[offset..offset + 1]);
        crc.update(&bytes[offset + 9..offset + 9 + len]);
        let crc = crc.finalize();
        bytes[offset + 5..offset + 9].copy_from_slice(&crc.to_be_bytes());
        offset += 9 + len;
    }
    bytes
}

/// The part of a snapshot `seal_snapshot` wraps.
pub fn snapshot_body(tree: &DataTree) -> Vec<u8> {
    let bytes = snapshot::encode_copy(tree);
    bytes[SNAPSHOT_MAGIC.len() + 4..].to_vec()
}

/// Target `snapshot_decode`: `snapshot::decode` must reject bad bytes with
/// an error, never a panic or a huge allocation. The input is tried raw and
/// sealed (right magic, version and CRC); if only the stored digest is
/// wrong it is corrected, so the structural checks are reached. A snapshot
/// that loads must satisfy [`check_invariants`], survive a re-encode and
/// keep working: closing every session and creating a node must not panic.
pub fn snapshot_decode(data: &[u8]) {
    if let Ok(tree) = snapshot::decode(data) {
        check_loaded(tree);
    }
    if let Ok(tree) = snapshot::decode(&seal_snapshot_fixing_digest(data)) {
        check_loaded(tree);
    }
}

/// [`seal_snapshot`], and if `decode` then gets as far as the digest check
/// and only that fails, with the stored digest (in the header frame of
/// `body`) replaced by the one `decode` computed.
pub fn seal_snapshot_fixing_digest(body: &[u8]) -> Vec<u8> {
    let sealed = seal_snapshot(body);
    let Err(snapshot::SnapshotError::Digest { computed, .. }) = snapshot::decode(&sealed) else {
        return sealed;
    };
    let mut body = body.to_vec();
    if body.len() < BODY_DIGEST_AT + 8 {
        return sealed;
    }
    body[BODY_DIGEST_AT..BODY_DIGEST_AT + 8].copy_from_slice(&computed.to_be_bytes());
    seal_snapshot(&body)
}

fn check_loaded(mut tree: DataTree) {
    check_tree(&tree, false);
    let bytes = snapshot::encode_copy(&tree);
    let again = snapshot::decode(&bytes).expect("re-encoded snapshot loads");
    assert_same(&tree, &again);
    // The loaded tree must be usable: close every session (which deletes
    // its ephemerals) and create a node, in the term after the last zxid's.
    let epoch = tree.last_zxid >> 32;
    if !(0..(1 << 31) - 1).contains(&epoch) {
        return; // no term can follow this zxid: apply would refuse it
    }
    let term = epoch as u64 + 1;
    let sessions: Vec<i64> = tree.sessions.keys().copied().collect();
    let mut txns: Vec<Txn> = sessions
        .iter()
        .map(|session| Txn {
            session_id: *session,
            xid: 0,
            time_ms: 0,
            auth: Vec::new(),
            op: TxnOp::CloseSession,
        })
        .collect();
    let mut body = Vec::new();
    Request::Create(CreateRequest {
        path: "/fuzz".into(),
        data: None,
        acl: crate::acl::open_acl_unsafe(),
        flags: 0,
    })
    .encode(&mut body);
    txns.push(Txn {
        session_id: 1,
        xid: 0,
        time_ms: 0,
        auth: Vec::new(),
        op: TxnOp::CreateSession { timeout_ms: 1 },
    });
    txns.push(Txn {
        session_id: 1,
        xid: 1,
        time_ms: 0,
        auth: Vec::new(),
        op: TxnOp::Request {
            op_code: opcode::CREATE,
            body,
        },
    });
    for txn in &txns {
        let before = tree.clone();
        let applied = tree.apply(term, txn);
        check_applied(&before, &tree, txn, &applied);
        check_tree(&tree, false);
    }
}

/// Seed inputs for `tree_batch_decode` and `snapshot_decode` (written by
/// `fuzz/examples/make_seeds.rs`): a few batches and snapshot bodies of a
/// tree with every kind of node.
pub fn seeds() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut world = World::new();
    let session = SESSIONS[0];
    let txn = |op: TxnOp| Txn {
        session_id: session,
        xid: 1,
        time_ms: 1_700_000_000_000,
        auth: vec![id("digest", "u:h")],
        op,
    };
    let request = |request: Request| {
        let mut body = Vec::new();
        request.encode(&mut body);
        TxnOp::Request {
            op_code: request.op_code(),
            body,
        }
    };
    let create = |path: &str, flags: i32| CreateRequest {
        path: path.into(),
        data: Some(b"v".to_vec()),
        acl: crate::acl::open_acl_unsafe(),
        flags,
    };
    let txns = vec![
        txn(TxnOp::CreateSession { timeout_ms: 4_000 }),
        txn(request(Request::Create(create("/a", 0)))),
        txn(request(Request::Create(create("/a/e", 1)))),
        txn(request(Request::Create2(create("/a/s", 2)))),
        txn(request(Request::CreateContainer(create("/c", 4)))),
        txn(request(Request::CreateTtl(CreateTtlRequest {
            path: "/t".into(),
            data: None,
            acl: vec![acl(perms::ALL, "digest", "u:h")],
            flags: 5,
            ttl: 100,
        }))),
        txn(request(Request::Multi(vec![
            MultiOp::Create(create("/m", 0)),
            MultiOp::SetData(SetDataRequest {
                path: "/m".into(),
                data: None,
                version: 0,
            }),
            MultiOp::Check(CheckVersionRequest {
                path: "/a".into(),
                version: 0,
            }),
        ]))),
        txn(request(Request::SetAcl(SetAclRequest {
            path: "/a".into(),
            acl: vec![acl(perms::ALL, "auth", "")],
            version: -1,
        }))),
        // ClickHouse Keeper's: an existing node, a new ephemeral, a subtree.
        txn(request(Request::CreateIfNotExists(create("/a", 0)))),
        txn(request(Request::CreateIfNotExists(create("/i", 1)))),
        txn(request(Request::Create(create("/r", 0)))),
        txn(request(Request::Create(create("/r/x", 0)))),
        txn(request(Request::RemoveRecursive(RemoveRecursiveRequest {
            path: "/r".into(),
            remove_nodes_limit: 2,
        }))),
        txn(TxnOp::DeleteContainer { path: "/c".into() }),
        txn(TxnOp::Sync { path: "/".into() }),
        txn(TxnOp::CloseSession),
    ];
    let mut batches = Vec::new();
    let mut snapshots = vec![snapshot_body(&world.tree)];
    for txn in &txns {
        world.apply(txn.clone());
        batches.push(txn.encode());
        if matches!(txn.op, TxnOp::CreateSession { .. } | TxnOp::Sync { .. }) {
            snapshots.push(snapshot_body(&world.tree));
        }
    }
    batches.push(encode_txns(&txns));
    (batches, snapshots)
}

/// `read_for_reply` (the server's read) sends the bytes `read` encodes to,
/// with the same watches and errors. Returns the reply it checked.
pub(crate) fn check_read_for_reply(
    tree: &DataTree,
    request: &Request,
    session_id: i64,
    auth: &[Id],
    outcome: &crate::ReadOutcome,
) -> crate::ReadOutcome {
    let reply = tree
        .read_for_reply(request, session_id, auth)
        .expect("a read request is served");
    assert_eq!(outcome.watches, reply.watches);
    match (&outcome.result, &reply.result) {
        (Ok(plain), Ok(encoded)) => {
            let (mut want, mut got) = (Vec::new(), Vec::new());
            plain.encode(&mut want);
            encoded.encode(&mut got);
            assert_eq!(want, got, "{request:?}");
        }
        (plain, encoded) => assert_eq!(plain, encoded, "{request:?}"),
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_jute::fuzzing::XorShift;

    #[test]
    fn tree_apply_target_survives_random_programs() {
        let mut rng = XorShift(0x5eed_0101);
        for round in 0..1_000 {
            let len = 16 + rng.below(400) as usize;
            let mut input = rng.bytes(len);
            if round % 2 == 0 {
                rng.mutate(&mut input);
            }
            tree_apply(&input);
        }
    }

    #[test]
    fn tree_batch_decode_target_survives_seeds_and_mutations() {
        let (batches, _) = seeds();
        for batch in &batches {
            assert!(decode_txns(batch).is_ok());
            tree_batch_decode(batch);
        }
        let mut rng = XorShift(0x5eed_0102);
        for _ in 0..4_000 {
            let mut input = batches[rng.below(batches.len() as u64) as usize].clone();
            rng.mutate(&mut input);
            tree_batch_decode(&input);
        }
    }

    #[test]
    fn snapshot_decode_target_survives_seeds_and_mutations() {
        let (_, snapshots) = seeds();
        for body in &snapshots {
            assert!(snapshot::decode(&seal_snapshot(body)).is_ok());
            snapshot_decode(body);
        }
        let mut rng = XorShift(0x5eed_0103);
        for round in 0..3_000 {
            let mut input = if round % 5 == 0 {
                let len = rng.below(128) as usize;
                rng.bytes(len)
            } else {
                snapshots[rng.below(snapshots.len() as u64) as usize].clone()
            };
            rng.mutate(&mut input);
            snapshot_decode(&input);
        }
    }

    /// The sealing gets an input with only a wrong digest past the digest
    /// check (`SnapshotError::Digest` carries the computed one): without
    /// it the fuzzer would rarely reach the checks after it.
    #[test]
    fn sealing_puts_the_computed_digest_in_the_header() {
        let (_, snapshots) = seeds();
        for body in &snapshots {
            let mut wrong = body.clone();
            wrong[BODY_DIGEST_AT + 7] ^= 1;
            match snapshot::decode(&seal_snapshot(&wrong)) {
                Err(snapshot::SnapshotError::Digest { computed, stored }) => {
                    assert_eq!(computed ^ 1, stored)
                }
                other => panic!("refused for another reason: {other:?}"),
            }
            assert!(snapshot::decode(&seal_snapshot_fixing_digest(&wrong)).is_ok());
        }
    }
}
