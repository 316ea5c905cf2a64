//! keel-client against a real Apache ZooKeeper 3.8 standalone server.
//!
//! The server is started (once, shared by the tests that run at the same
//! time) from the Debian jars in /usr/share/java on a free port with a
//! temporary dataDir, and killed by a Drop guard when the last test using it
//! finishes — also when a test panics. Without `java` or the jars every test
//! prints a skip message and passes.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use keel_client::cli::{run_cli_script, run_cli_split};
use keel_client::jute::{
    CheckVersionRequest, CreateRequest, DeleteRequest, GetChildrenRequest, GetDataRequest,
    SetDataRequest,
};
use keel_client::{
    digest_acl_id, multi_error, open_acl_unsafe, perms, Acl, AddWatchMode, Client, ClientError,
    CreateMode, ErrorCode, EventType, Id, KeeperState, MultiOp, MultiResult, Request, Response,
    Stat, WatchedEvent, WatcherType,
};
use tokio::sync::mpsc::UnboundedReceiver;

const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";
const START_TIMEOUT: Duration = Duration::from_secs(30);
const EVENT_TIMEOUT: Duration = Duration::from_secs(5);

struct ZkServer {
    child: Child,
    dir: PathBuf,
    addr: String,
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn java_available() -> bool {
    Path::new(ZK_JAR).exists()
        && Command::new("java")
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn four_letter(addr: &str, cmd: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(cmd.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

impl ZkServer {
    fn start() -> ZkServer {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("keel-client-zk-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let cfg = dir.join("zoo.cfg");
        std::fs::write(
            &cfg,
            format!(
                "tickTime=2000\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
                 4lw.commands.whitelist=*\nextendedTypesEnabled=true\nadmin.enableServer=false\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        // zookeeper.jar's manifest carries the Class-Path of its
        // dependencies; only a logging binding is added.
        let mut cp = ZK_JAR.to_string();
        for binding in [
            "/usr/share/java/slf4j-nop.jar",
            "/usr/share/java/slf4j-simple.jar",
        ] {
            if Path::new(binding).exists() {
                cp.push(':');
                cp.push_str(binding);
                break;
            }
        }
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let child = Command::new("java")
            .arg("-cp")
            .arg(&cp)
            // Check containers and TTL nodes every 100 ms, not every minute.
            .arg("-Dznode.container.checkIntervalMs=100")
            .arg("-Dznode.container.maxPerMinute=100000")
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn java");
        // Should this process die without running Drop (SIGKILL, abort),
        // a watchdog stops the JVM within a second.
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while kill -0 {} 2>/dev/null; do sleep 1; done; kill {} 2>/dev/null; rm -rf '{}'",
                std::process::id(),
                child.id(),
                dir.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let addr = format!("127.0.0.1:{port}");
        let server = ZkServer { child, dir, addr };
        let deadline = Instant::now() + START_TIMEOUT;
        // `srvr` answers with "Mode: standalone" only once the server
        // accepts sessions ("ruok" answers earlier).
        while !four_letter(&server.addr, "srvr").is_some_and(|s| s.contains("Mode:")) {
            assert!(Instant::now() < deadline, "ZooKeeper did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }
}

static SERVER: Mutex<Weak<ZkServer>> = Mutex::new(Weak::new());

/// The shared server, started if no running test holds it; `None` (after
/// printing why) when ZooKeeper is not installed.
fn server(test: &str) -> Option<Arc<ZkServer>> {
    if !java_available() {
        eprintln!("skipping {test}: java or {ZK_JAR} not found");
        return None;
    }
    let mut slot = SERVER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = slot.upgrade() {
        return Some(s);
    }
    let s = Arc::new(ZkServer::start());
    *slot = Arc::downgrade(&s);
    Some(s)
}

async fn connect(zk: &ZkServer) -> Client {
    Client::connect(&zk.addr, 10_000).await.expect("connect")
}

async fn next_event(rx: &mut UnboundedReceiver<WatchedEvent>) -> WatchedEvent {
    tokio::time::timeout(EVENT_TIMEOUT, rx.recv())
        .await
        .expect("no watch event in time")
        .expect("event channel closed")
}

async fn no_event(rx: &mut UnboundedReceiver<WatchedEvent>) {
    if let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        panic!("unexpected event {ev:?}");
    }
}

fn ev(event_type: EventType, path: &str) -> WatchedEvent {
    WatchedEvent {
        event_type,
        state: KeeperState::SyncConnected,
        path: path.to_string(),
    }
}

fn zk_err<T: std::fmt::Debug>(r: Result<T, ClientError>) -> ErrorCode {
    match r {
        Err(ClientError::Zk(c)) => c,
        other => panic!("expected a ZooKeeper error, got {other:?}"),
    }
}

#[tokio::test]
async fn connect_handshake_failover_and_close() {
    let Some(zk) = server("connect_handshake_failover_and_close") else {
        return;
    };
    // The first address refuses; the client moves on to the second.
    let dead = format!("127.0.0.1:{}", free_port());
    let c = Client::connect(&format!("{dead},{}", zk.addr), 5_000)
        .await
        .unwrap();
    assert_ne!(c.session_id(), 0);
    assert_eq!(c.session_password().len(), 16);
    // ZooKeeper clamps the timeout to [2, 20] ticks.
    assert_eq!(c.negotiated_timeout_ms(), 5_000);
    assert_eq!(c.server(), zk.addr);
    let low = Client::connect(&zk.addr, 100).await.unwrap();
    assert_eq!(low.negotiated_timeout_ms(), 4_000);
    assert_ne!(low.session_id(), c.session_id());
    low.close().await.unwrap();

    assert!(c.exists("/", false).await.unwrap().is_some());
    assert!(c.is_connected());
    c.close().await.unwrap();
    assert!(!c.is_connected());
    assert!(matches!(
        c.exists("/", false).await,
        Err(ClientError::ConnectionLoss)
    ));
    // Closing twice is harmless.
    c.close().await.unwrap();

    assert!(Client::connect(&dead, 5_000).await.is_err());
}

#[tokio::test]
async fn crud_stat_and_children() {
    let Some(zk) = server("crud_stat_and_children") else {
        return;
    };
    let c = connect(&zk).await;
    let acl = open_acl_unsafe();
    let base = "/crud";
    assert_eq!(
        c.create(base, b"root", &acl, CreateMode::Persistent)
            .await
            .unwrap(),
        base
    );
    assert_eq!(
        zk_err(c.create(base, b"", &acl, CreateMode::Persistent).await),
        ErrorCode::NodeExists
    );
    assert_eq!(
        zk_err(
            c.create("/crud/x/y", b"", &acl, CreateMode::Persistent)
                .await
        ),
        ErrorCode::NoNode
    );

    let (p, stat) = c
        .create2("/crud/a", b"hello", &acl, CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(p, "/crud/a");
    assert_eq!(stat.data_length, 5);
    assert_eq!(stat.version, 0);
    assert_eq!(stat.czxid, stat.mzxid);
    assert_eq!(stat.ephemeral_owner, 0);

    let (data, s2) = c.get_data("/crud/a", false).await.unwrap();
    assert_eq!(data.as_deref(), Some(&b"hello"[..]));
    assert_eq!(s2, stat);
    assert_eq!(
        c.exists("/crud/a", false).await.unwrap(),
        Some(stat.clone())
    );
    assert_eq!(c.exists("/crud/nope", false).await.unwrap(), None);
    assert_eq!(
        zk_err(c.get_data("/crud/nope", false).await),
        ErrorCode::NoNode
    );

    let s3 = c.set_data("/crud/a", b"bye", 0).await.unwrap();
    assert_eq!(s3.version, 1);
    assert_eq!(s3.data_length, 3);
    assert!(s3.mzxid > stat.mzxid);
    assert_eq!(
        zk_err(c.set_data("/crud/a", b"x", 0).await),
        ErrorCode::BadVersion
    );
    assert!(c.last_zxid() >= s3.mzxid);

    let seq = c
        .create("/crud/s-", b"", &acl, CreateMode::PersistentSequential)
        .await
        .unwrap();
    assert_eq!(seq, "/crud/s-0000000001");
    let eph = c
        .create("/crud/e", b"", &acl, CreateMode::Ephemeral)
        .await
        .unwrap();
    let (_, eph_stat) = c.get_data(&eph, false).await.unwrap();
    assert_eq!(eph_stat.ephemeral_owner, c.session_id());
    assert_eq!(
        zk_err(
            c.create("/crud/e/child", b"", &acl, CreateMode::Persistent)
                .await
        ),
        ErrorCode::NoChildrenForEphemerals
    );
    let eseq = c
        .create("/crud/es-", b"", &acl, CreateMode::EphemeralSequential)
        .await
        .unwrap();
    assert!(eseq.starts_with("/crud/es-"));
    let mut ephs = c.get_ephemerals("/crud").await.unwrap();
    ephs.sort();
    assert_eq!(ephs, vec![eph.clone(), eseq.clone()]);
    assert_eq!(c.get_ephemerals("/crud/es").await.unwrap(), vec![eseq]);

    let mut kids = c.get_children(base, false).await.unwrap();
    kids.sort();
    assert_eq!(kids.len(), 4);
    assert_eq!(kids[0], "a");
    let (kids2, base_stat) = c.get_children2(base, false).await.unwrap();
    assert_eq!(kids2.len(), 4);
    assert_eq!(base_stat.num_children, 4);
    assert_eq!(c.get_all_children_number(base).await.unwrap(), 4);
    assert_eq!(c.get_all_children_number("/zookeeper").await.unwrap(), 2);
    assert_eq!(
        zk_err(c.get_children("/crud/nope", false).await),
        ErrorCode::NoNode
    );
    c.sync(base).await.unwrap();

    assert_eq!(zk_err(c.delete(base, -1).await), ErrorCode::NotEmpty);
    assert_eq!(zk_err(c.delete("/crud/a", 0).await), ErrorCode::BadVersion);
    c.delete("/crud/a", 1).await.unwrap();
    assert_eq!(zk_err(c.delete("/crud/a", -1).await), ErrorCode::NoNode);

    // Ephemerals disappear with the session.
    c.close().await.unwrap();
    let c2 = connect(&zk).await;
    assert_eq!(c2.exists(&eph, false).await.unwrap(), None);
    c2.close().await.unwrap();
}

#[tokio::test]
async fn raw_requests_and_null_data() {
    let Some(zk) = server("raw_requests_and_null_data") else {
        return;
    };
    let c = connect(&zk).await;
    // A non-zero err is returned in the header, not as an Err.
    let (h, r) = c
        .request(Request::GetData(GetDataRequest {
            path: "/raw-nope".into(),
            watch: false,
        }))
        .await
        .unwrap();
    assert_eq!(h.err, ErrorCode::NoNode.code());
    assert!(h.xid > 0);
    assert_eq!(r, Response::Empty);

    // Null data (what zkCli's `create /x` sends) stays null.
    let (h, r) = c
        .request(Request::Create(CreateRequest {
            path: "/raw-null".into(),
            data: None,
            acl: open_acl_unsafe(),
            flags: 0,
        }))
        .await
        .unwrap();
    assert_eq!(h.err, 0);
    assert!(h.zxid > 0);
    assert_eq!(r, Response::Create("/raw-null".into()));
    let (data, stat) = c.get_data("/raw-null", false).await.unwrap();
    assert_eq!(data, None);
    assert_eq!(stat.data_length, 0);
    c.create(
        "/raw-empty",
        b"",
        &open_acl_unsafe(),
        CreateMode::Persistent,
    )
    .await
    .unwrap();
    assert_eq!(
        c.get_data("/raw-empty", false).await.unwrap().0,
        Some(Vec::new())
    );

    // Pings go out with xid -2 and come back through the same path.
    let (h, r) = c.request(Request::Ping).await.unwrap();
    assert_eq!(h.xid, -2);
    assert_eq!(r, Response::Empty);

    // xids keep increasing in order.
    let (h1, _) = c
        .request(Request::Exists(keel_client::jute::ExistsRequest {
            path: "/".into(),
            watch: false,
        }))
        .await
        .unwrap();
    let (h2, r2) = c.request(Request::WhoAmI).await.unwrap();
    assert_eq!(h2.xid, h1.xid + 1);
    assert!(matches!(r2, Response::WhoAmI(_)));
    c.close().await.unwrap();
}

#[tokio::test]
async fn pipelining_many_requests_in_flight() {
    let Some(zk) = server("pipelining_many_requests_in_flight") else {
        return;
    };
    let c = connect(&zk).await;
    let acl = open_acl_unsafe();
    c.create("/pipe", b"", &acl, CreateMode::Persistent)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..500 {
        let c = c.clone();
        let acl = acl.clone();
        tasks.push(tokio::spawn(async move {
            let p = format!("/pipe/n{i}");
            c.create(&p, i.to_string().as_bytes(), &acl, CreateMode::Persistent)
                .await
                .unwrap();
            let (d, _) = c.get_data(&p, false).await.unwrap();
            assert_eq!(d.unwrap(), i.to_string().into_bytes());
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Many reads issued at once without awaiting each one.
    let futs: Vec<_> = (0..2000)
        .map(|i| {
            let c = c.clone();
            async move { c.exists(&format!("/pipe/n{}", i % 500), false).await }
        })
        .collect();
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for f in futs {
        set.spawn(f);
    }
    let mut n = 0;
    while let Some(r) = set.join_next().await {
        assert!(r.unwrap().unwrap().is_some());
        n += 1;
    }
    assert_eq!(n, 2000);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(c.get_all_children_number("/pipe").await.unwrap(), 500);
    c.close().await.unwrap();
}

#[tokio::test]
async fn pings_keep_an_idle_session_alive() {
    let Some(zk) = server("pings_keep_an_idle_session_alive") else {
        return;
    };
    let c = Client::connect(&zk.addr, 4_000).await.unwrap();
    assert_eq!(c.negotiated_timeout_ms(), 4_000);
    c.create("/idle-eph", b"", &open_acl_unsafe(), CreateMode::Ephemeral)
        .await
        .unwrap();
    // Longer than the session timeout: only pings keep it alive.
    tokio::time::sleep(Duration::from_millis(6_000)).await;
    assert!(c.is_connected());
    assert!(c.exists("/idle-eph", false).await.unwrap().is_some());
    c.close().await.unwrap();
}

#[tokio::test]
async fn watches_one_shot_and_persistent() {
    let Some(zk) = server("watches_one_shot_and_persistent") else {
        return;
    };
    let c = connect(&zk).await;
    let mut events = c.take_events().unwrap();
    assert!(c.take_events().is_none());
    let other = connect(&zk).await;
    let acl = open_acl_unsafe();
    c.create("/w", b"", &acl, CreateMode::Persistent)
        .await
        .unwrap();

    // exists watch on a missing node fires on create.
    assert_eq!(c.exists("/w/a", true).await.unwrap(), None);
    other
        .create("/w/a", b"1", &acl, CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ev(EventType::NodeCreated, "/w/a")
    );

    // data watch fires once on change.
    c.get_data("/w/a", true).await.unwrap();
    other.set_data("/w/a", b"2", -1).await.unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ev(EventType::NodeDataChanged, "/w/a")
    );
    other.set_data("/w/a", b"3", -1).await.unwrap();
    no_event(&mut events).await;

    // child watch.
    c.get_children("/w", true).await.unwrap();
    other
        .create("/w/b", b"", &acl, CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ev(EventType::NodeChildrenChanged, "/w")
    );
    // exists watch on an existing node fires on delete.
    c.exists("/w/b", true).await.unwrap();
    other.delete("/w/b", -1).await.unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ev(EventType::NodeDeleted, "/w/b")
    );

    // removeWatches: the server forgets the watch.
    c.get_data("/w/a", true).await.unwrap();
    c.remove_watches("/w/a", WatcherType::Data).await.unwrap();
    assert_eq!(
        zk_err(c.remove_watches("/w/a", WatcherType::Data).await),
        ErrorCode::NoWatcher
    );
    other.set_data("/w/a", b"4", -1).await.unwrap();
    no_event(&mut events).await;

    // persistent recursive watch: every change below, repeatedly.
    c.add_watch("/w", AddWatchMode::PersistentRecursive)
        .await
        .unwrap();
    other
        .create("/w/a/deep", b"", &acl, CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ev(EventType::NodeCreated, "/w/a/deep")
    );
    other.set_data("/w/a/deep", b"x", -1).await.unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ev(EventType::NodeDataChanged, "/w/a/deep")
    );
    other.set_data("/w/a/deep", b"y", -1).await.unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ev(EventType::NodeDataChanged, "/w/a/deep")
    );
    c.remove_watches("/w", WatcherType::Any).await.unwrap();
    other.set_data("/w/a/deep", b"z", -1).await.unwrap();
    no_event(&mut events).await;

    // persistent (non-recursive) watch: the node itself and its children list.
    c.add_watch("/w/a", AddWatchMode::Persistent).await.unwrap();
    other.set_data("/w/a", b"5", -1).await.unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ev(EventType::NodeDataChanged, "/w/a")
    );
    other.delete("/w/a/deep", -1).await.unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ev(EventType::NodeChildrenChanged, "/w/a")
    );

    other.close().await.unwrap();
    c.close().await.unwrap();
    // close() does not report a disconnect.
    no_event(&mut events).await;
}

#[tokio::test]
async fn multi_success_failure_and_multi_read() {
    let Some(zk) = server("multi_success_failure_and_multi_read") else {
        return;
    };
    let c = connect(&zk).await;
    let acl = open_acl_unsafe();
    c.create("/m", b"", &acl, CreateMode::Persistent)
        .await
        .unwrap();
    let create = |p: &str, d: &[u8]| CreateRequest {
        path: p.into(),
        data: Some(d.to_vec()),
        acl: acl.clone(),
        flags: 0,
    };

    let results = c
        .multi(vec![
            MultiOp::Create(create("/m/a", b"a")),
            MultiOp::Create2(create("/m/b", b"b")),
            MultiOp::SetData(SetDataRequest {
                path: "/m/a".into(),
                data: Some(b"a2".to_vec()),
                version: 0,
            }),
            MultiOp::Check(CheckVersionRequest {
                path: "/m/a".into(),
                version: 1,
            }),
            MultiOp::Delete(DeleteRequest {
                path: "/m/b".into(),
                version: -1,
            }),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 5);
    assert_eq!(results[0], MultiResult::Create("/m/a".into()));
    // ZooKeeper 3.8.0's MultiOperationRecord turns a create2 op into a plain
    // create (fixed in later releases), so no Stat comes back.
    match &results[1] {
        MultiResult::Create(p) => assert_eq!(p, "/m/b"),
        MultiResult::Create2(p, s) => {
            assert_eq!(p, "/m/b");
            assert_eq!(s.data_length, 1);
        }
        other => panic!("{other:?}"),
    }
    match &results[2] {
        MultiResult::SetData(s) => assert_eq!(s.version, 1),
        other => panic!("{other:?}"),
    }
    assert_eq!(results[3], MultiResult::Check);
    assert_eq!(results[4], MultiResult::Delete);
    assert_eq!(multi_error(&results), None);
    assert_eq!(c.get_data("/m/a", false).await.unwrap().0.unwrap(), b"a2");
    assert_eq!(c.exists("/m/b", false).await.unwrap(), None);

    // A failing op aborts the whole transaction.
    let results = c
        .multi(vec![
            MultiOp::Create(create("/m/c", b"")),
            MultiOp::Create(create("/m/a", b"")),
            MultiOp::Delete(DeleteRequest {
                path: "/m/a".into(),
                version: -1,
            }),
        ])
        .await
        .unwrap();
    assert_eq!(
        results,
        vec![
            MultiResult::Error(0),
            MultiResult::Error(ErrorCode::NodeExists.code()),
            MultiResult::Error(ErrorCode::RuntimeInconsistency.code()),
        ]
    );
    assert_eq!(multi_error(&results), Some(ErrorCode::NodeExists.code()));
    assert_eq!(c.exists("/m/c", false).await.unwrap(), None);
    assert!(c.exists("/m/a", false).await.unwrap().is_some());

    let results = c
        .multi(vec![MultiOp::Check(CheckVersionRequest {
            path: "/m/a".into(),
            version: 7,
        })])
        .await
        .unwrap();
    assert_eq!(
        results,
        vec![MultiResult::Error(ErrorCode::BadVersion.code())]
    );

    // multiRead: independent reads, errors per op.
    let results = c
        .multi_read(vec![
            MultiOp::GetData(GetDataRequest {
                path: "/m/a".into(),
                watch: false,
            }),
            MultiOp::GetChildren(GetChildrenRequest {
                path: "/m".into(),
                watch: false,
            }),
            MultiOp::GetData(GetDataRequest {
                path: "/m/missing".into(),
                watch: false,
            }),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 3);
    match &results[0] {
        MultiResult::GetData(d, s) => {
            assert_eq!(d.as_deref(), Some(&b"a2"[..]));
            assert_eq!(s.version, 1);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(results[1], MultiResult::GetChildren(vec!["a".into()]));
    assert_eq!(results[2], MultiResult::Error(ErrorCode::NoNode.code()));
    c.close().await.unwrap();
}

#[tokio::test]
async fn acls_and_authentication() {
    let Some(zk) = server("acls_and_authentication") else {
        return;
    };
    let c = connect(&zk).await;
    let digest = digest_acl_id("alice", "secret");
    let alice_rw = vec![Acl {
        perms: perms::READ | perms::WRITE | perms::ADMIN,
        id: Id {
            scheme: "digest".into(),
            id: digest.clone(),
        },
    }];
    c.create("/acl", b"private", &alice_rw, CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(zk_err(c.get_data("/acl", false).await), ErrorCode::NoAuth);
    assert_eq!(zk_err(c.get_acl("/acl").await), ErrorCode::NoAuth);

    let who = c.who_am_i().await.unwrap();
    assert_eq!(who.len(), 1);
    assert_eq!(who[0].auth_scheme, "ip");
    assert_eq!(who[0].user, "127.0.0.1");

    c.add_auth("digest", b"alice:secret").await.unwrap();
    assert_eq!(
        c.get_data("/acl", false).await.unwrap().0.unwrap(),
        b"private"
    );
    let who = c.who_am_i().await.unwrap();
    assert!(who
        .iter()
        .any(|i| i.auth_scheme == "digest" && i.user == "alice"));

    let (acl, stat) = c.get_acl("/acl").await.unwrap();
    assert_eq!(acl, alice_rw);
    assert_eq!(stat.aversion, 0);
    assert_eq!(
        zk_err(c.set_acl("/acl", &open_acl_unsafe(), 5).await),
        ErrorCode::BadVersion
    );
    assert_eq!(
        zk_err(c.set_acl("/acl", &[], -1).await),
        ErrorCode::InvalidAcl
    );
    let stat = c.set_acl("/acl", &open_acl_unsafe(), 0).await.unwrap();
    assert_eq!(stat.aversion, 1);

    // "auth" ACLs expand to the session's identities.
    c.create(
        "/acl-auth",
        b"",
        &keel_client::creator_all_acl(),
        CreateMode::Persistent,
    )
    .await
    .unwrap();
    let (acl, _) = c.get_acl("/acl-auth").await.unwrap();
    assert_eq!(acl.len(), 1);
    assert_eq!(acl[0].id.scheme, "digest");
    assert_eq!(acl[0].id.id, digest);
    assert_eq!(acl[0].perms, perms::ALL);

    // An unauthenticated session cannot create with an "auth" ACL.
    let anon = connect(&zk).await;
    assert_eq!(
        zk_err(
            anon.create(
                "/acl-anon",
                b"",
                &keel_client::creator_all_acl(),
                CreateMode::Persistent
            )
            .await
        ),
        ErrorCode::InvalidAcl
    );
    // A rejected auth packet reports AuthFailed (and the server hangs up).
    let mut events = anon.take_events().unwrap();
    assert_eq!(
        zk_err(anon.add_auth("nosuchscheme", b"x").await),
        ErrorCode::AuthFailed
    );
    let e = next_event(&mut events).await;
    assert_eq!(e.state, KeeperState::Disconnected);
    assert!(!anon.is_connected());
    assert!(matches!(
        anon.exists("/", false).await,
        Err(ClientError::ConnectionLoss)
    ));
    c.close().await.unwrap();
}

#[tokio::test]
async fn ttl_and_container_nodes() {
    let Some(zk) = server("ttl_and_container_nodes") else {
        return;
    };
    let c = connect(&zk).await;
    let acl = open_acl_unsafe();
    let p = c
        .create_ttl("/ttl", b"t", &acl, CreateMode::PersistentWithTtl, 500)
        .await
        .unwrap();
    assert_eq!(p, "/ttl");
    let (_, stat) = c.get_data("/ttl", false).await.unwrap();
    // The server keeps the TTL in the ephemeral owner but shows clients 0
    // (DataNode.getClientEphemeralOwner).
    assert_eq!(stat.ephemeral_owner, 0);
    let (p, stat) = c
        .create_ttl2(
            "/ttls-",
            b"",
            &acl,
            CreateMode::PersistentSequentialWithTtl,
            60_000,
        )
        .await
        .unwrap();
    assert!(p.starts_with("/ttls-") && p.len() == "/ttls-".len() + 10);
    assert_eq!(stat.ephemeral_owner, 0);
    assert_eq!(stat.version, 0);
    assert_eq!(
        zk_err(
            c.create_ttl("/ttl-bad", b"", &acl, CreateMode::PersistentWithTtl, 0)
                .await
        ),
        ErrorCode::BadArguments
    );

    let p = c
        .create("/cont", b"", &acl, CreateMode::Container)
        .await
        .unwrap();
    assert_eq!(p, "/cont");
    let (p, _) = c
        .create2("/cont2", b"", &acl, CreateMode::Container)
        .await
        .unwrap();
    assert_eq!(p, "/cont2");
    let (_, stat) = c.get_data("/cont", false).await.unwrap();
    assert_eq!(stat.ephemeral_owner, 0);
    c.create("/cont/child", b"", &acl, CreateMode::Persistent)
        .await
        .unwrap();
    c.delete("/cont/child", -1).await.unwrap();

    // The server's container manager (every 100 ms here) removes the
    // emptied container and the expired TTL node.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ttl_gone = c.exists("/ttl", false).await.unwrap().is_none();
        let cont_gone = c.exists("/cont", false).await.unwrap().is_none();
        if ttl_gone && cont_gone {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ttl={ttl_gone} container={cont_gone}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A container that never had children stays.
    assert!(c.exists("/cont2", false).await.unwrap().is_some());
    c.close().await.unwrap();
}

/// Runs one zkCli command, returning (exit code, stdout, stderr).
async fn cli(zk: &ZkServer, line: &[&str]) -> (i32, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = run_cli_split(
        &zk.addr,
        line.iter().map(|s| s.to_string()).collect(),
        &mut out,
        &mut err,
    )
    .await
    .expect("cli connect");
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// StatPrinter's layout, spelled out independently of the crate's printer.
fn expected_stat(s: &Stat) -> String {
    let date = keel_client::cli::java_date;
    format!(
        "cZxid = 0x{:x}\nctime = {}\nmZxid = 0x{:x}\nmtime = {}\npZxid = 0x{:x}\ncversion = {}\n\
         dataVersion = {}\naclVersion = {}\nephemeralOwner = 0x{:x}\ndataLength = {}\nnumChildren = {}\n",
        s.czxid,
        date(s.ctime),
        s.mzxid,
        date(s.mtime),
        s.pzxid,
        s.cversion,
        s.version,
        s.aversion,
        s.ephemeral_owner as u64,
        s.data_length,
        s.num_children
    )
}

#[tokio::test]
async fn cli_one_shot_commands_match_zkcli() {
    let Some(zk) = server("cli_one_shot_commands_match_zkcli") else {
        return;
    };
    let c = connect(&zk).await;

    assert_eq!(
        cli(&zk, &["create", "/cli"]).await,
        (0, "".into(), "Created /cli\n".into())
    );
    assert_eq!(
        cli(&zk, &["create", "/cli"]).await,
        (1, "".into(), "Node already exists: /cli\n".into())
    );
    // No data: ZooKeeper stores null, which zkCli prints as "null".
    assert_eq!(
        cli(&zk, &["get", "/cli"]).await,
        (0, "null\n".into(), "".into())
    );
    assert_eq!(cli(&zk, &["create", "/cli/a", "hello world"]).await.0, 0);
    let (_, stat) = c.get_data("/cli/a", false).await.unwrap();
    let (code, out, err) = cli(&zk, &["get", "-s", "/cli/a"]).await;
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, format!("hello world\n{}", expected_stat(&stat)));
    assert!(out.starts_with("hello world\ncZxid = 0x"));
    assert_eq!(out.lines().count(), 12);

    assert_eq!(
        cli(&zk, &["set", "-s", "/cli/a", "v2"]).await.1,
        expected_stat(&c.exists("/cli/a", false).await.unwrap().unwrap())
    );
    assert_eq!(
        cli(&zk, &["set", "-v", "0", "/cli/a", "v3"]).await,
        (1, "".into(), "version No is not valid : /cli/a\n".into())
    );
    assert_eq!(
        cli(&zk, &["stat", "/cli/a"]).await.1,
        expected_stat(&c.exists("/cli/a", false).await.unwrap().unwrap())
    );
    assert_eq!(
        cli(&zk, &["stat", "/cli/none"]).await,
        (1, "".into(), "Node does not exist: /cli/none\n".into())
    );
    assert_eq!(cli(&zk, &["create", "/cli/b", "x"]).await.0, 0);
    assert_eq!(
        cli(&zk, &["create", "-s", "/cli/b/s-", "x"]).await,
        (0, "".into(), "Created /cli/b/s-0000000000\n".into())
    );
    assert_eq!(
        cli(&zk, &["ls", "/cli"]).await,
        (0, "[a, b]\n".into(), "".into())
    );
    assert_eq!(cli(&zk, &["ls", "/zookeeper"]).await.1, "[config, quota]\n");
    let (_, out, _) = cli(&zk, &["ls", "-s", "/cli"]).await;
    assert_eq!(
        out,
        format!(
            "[a, b]\n{}",
            expected_stat(&c.exists("/cli", false).await.unwrap().unwrap())
        )
    );
    assert_eq!(
        cli(&zk, &["ls", "-R", "/cli"]).await.1,
        "/cli\n/cli/a\n/cli/b\n/cli/b/s-0000000000\n"
    );
    assert_eq!(
        cli(&zk, &["ls", "/cli/none"]).await,
        (1, "".into(), "Node does not exist: /cli/none\n".into())
    );
    assert_eq!(cli(&zk, &["getAllChildrenNumber", "/cli"]).await.1, "3\n");
    assert_eq!(cli(&zk, &["sync", "/cli"]).await.1, "Sync is OK\n");
    assert_eq!(cli(&zk, &["getEphemerals"]).await.1, "[]\n");

    // Errors and exit codes.
    assert_eq!(
        cli(&zk, &["delete", "/cli/b"]).await,
        (1, "".into(), "Node not empty: /cli/b\n".into())
    );
    assert_eq!(
        cli(&zk, &["delete", "-v", "5", "/cli/a"]).await,
        (1, "".into(), "version No is not valid : /cli/a\n".into())
    );
    assert_eq!(
        cli(&zk, &["get", "noslash"]).await,
        (1, "".into(), "Path must start with / character\n".into())
    );
    assert_eq!(
        cli(&zk, &["create", "/cli/"]).await.2,
        "Path must not end with / character\n"
    );
    assert_eq!(
        cli(&zk, &["ls", "-x", "/"]).await,
        (
            1,
            "".into(),
            "org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: -x\n".into()
        )
    );
    assert_eq!(
        cli(&zk, &["get"]).await,
        (1, "".into(), "get [-s] [-w] path\n".into())
    );
    assert_eq!(
        cli(&zk, &["create", "-c", "-e", "/x"]).await.2,
        "-c cannot be combined with -s or -e. Containers cannot be ephemeral or sequential.\n"
    );
    assert_eq!(
        cli(&zk, &["create", "-t", "abc", "/x"]).await.2,
        "-t argument must be a long value\n"
    );
    assert_eq!(
        cli(&zk, &["create", "-t", "0", "/x"]).await.2,
        "ttl must be positive and cannot be larger than: 1099511627775\n"
    );
    let (code, out, err) = cli(&zk, &["nosuchcmd"]).await;
    assert_eq!((code, out.as_str()), (127, ""));
    assert!(err.starts_with(
        "ZooKeeper -server host:port -client-configuration properties-file cmd args\n\taddWatch"
    ));
    assert!(err.ends_with("\twhoami \nCommand not found: Command not found nosuchcmd\n"));

    // TTL, container and ephemeral creation from the command line.
    assert_eq!(
        cli(&zk, &["create", "-t", "60000", "/cli/ttl", "d"]).await,
        (0, "".into(), "Created /cli/ttl\n".into())
    );
    assert!(c.exists("/cli/ttl", false).await.unwrap().is_some());
    assert_eq!(
        cli(&zk, &["create", "-c", "/cli/cont"]).await,
        (0, "".into(), "Created /cli/cont\n".into())
    );
    assert!(c.exists("/cli/cont", false).await.unwrap().is_some());

    // deleteall removes the whole subtree.
    assert_eq!(
        cli(&zk, &["deleteall", "/cli/b"]).await,
        (0, "".into(), "".into())
    );
    assert_eq!(c.exists("/cli/b", false).await.unwrap(), None);
    assert_eq!(
        cli(&zk, &["deleteall", "/cli/none"]).await,
        (1, "".into(), "Node does not exist: /cli/none\n".into())
    );
    assert_eq!(
        cli(&zk, &["delete", "/cli/a"]).await,
        (0, "".into(), "".into())
    );
    c.close().await.unwrap();
}

#[tokio::test]
async fn cli_acl_and_auth_commands() {
    let Some(zk) = server("cli_acl_and_auth_commands") else {
        return;
    };
    assert_eq!(cli(&zk, &["create", "/cliacl", "d"]).await.0, 0);
    assert_eq!(
        cli(&zk, &["getAcl", "/cliacl"]).await,
        (0, "'world,'anyone\n: cdrwa\n".into(), "".into())
    );
    assert_eq!(
        cli(
            &zk,
            &["setAcl", "/cliacl", "world:anyone:cdrwa,ip:127.0.0.1:r"]
        )
        .await,
        (0, "".into(), "".into())
    );
    let (code, out, _) = cli(&zk, &["getAcl", "-s", "/cliacl"]).await;
    assert_eq!(code, 0);
    assert!(out.starts_with("'world,'anyone\n: cdrwa\n'ip,'127.0.0.1\n: r\ncZxid = 0x"));
    assert!(out.contains("\naclVersion = 1\n"));
    assert_eq!(
        cli(&zk, &["setAcl", "-v", "0", "/cliacl", "world:anyone:r"]).await,
        (1, "".into(), "version No is not valid : /cliacl\n".into())
    );
    assert_eq!(
        cli(&zk, &["setAcl", "/cliacl", "bogus"]).await,
        (
            1,
            "".into(),
            "bogus does not have the form scheme:id:perm\nAcl is not valid : null\n".into()
        )
    );
    assert_eq!(
        cli(&zk, &["create", "/cliacl2", "d", "world:anyone"]).await,
        (
            1,
            "".into(),
            "world:anyone does not have the form scheme:id:perm\nKeeperErrorCode = InvalidACL\n\
             Acl is not valid : null\n"
                .into()
        )
    );
    let digest = digest_acl_id("bob", "pw");
    let acl = format!("digest:{digest}:cdrwa");
    assert_eq!(
        cli(&zk, &["create", "/cliacl/private", "secret", &acl])
            .await
            .0,
        0
    );
    assert_eq!(
        cli(&zk, &["get", "/cliacl/private"]).await,
        (
            1,
            "".into(),
            "Insufficient permission : /cliacl/private\n".into()
        )
    );
    // setAcl -R visits the subtree; a failed setACL is printed without a
    // newline, a node it cannot list ends the walk (as in ZKUtil).
    assert_eq!(
        cli(&zk, &["setAcl", "-R", "/cliacl", "world:anyone:cdrwa"]).await,
        (
            1,
            "KeeperErrorCode = NoAuth for /cliacl/private".into(),
            "Insufficient permission : /cliacl/private\n".into()
        )
    );

    // An interactive session: addauth then read, whoami, getEphemerals.
    let script = "addauth digest bob:pw\n\
                  get /cliacl/private\n\
                  getAcl /cliacl/private\n\
                  whoami\n\
                  create -e /cliacl/eph\n\
                  getEphemerals /cliacl\n";
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = run_cli_script(&zk.addr, &mut script.as_bytes(), &mut out, Some(&mut err))
        .await
        .unwrap();
    assert_eq!(code, 0);
    let out = String::from_utf8(out).unwrap();
    let err = String::from_utf8(err).unwrap();
    // whoami lists the identities in the server's (hash set) order.
    let expected = |who: &str| {
        format!(
            "Connecting to {}\nWelcome to ZooKeeper!\nJLine support is disabled\n\n\
             WATCHER::\n\nWatchedEvent state:SyncConnected type:None path:null\n\
             secret\n'digest,'{digest}\n: cdrwa\nAuth scheme: User\n{who}[/cliacl/eph]\n",
            zk.addr
        )
    };
    assert!(
        out == expected("ip: 127.0.0.1\ndigest: bob\n")
            || out == expected("digest: bob\nip: 127.0.0.1\n"),
        "{out}"
    );
    assert_eq!(err, "Created /cliacl/eph\n");
}

#[tokio::test]
async fn cli_interactive_session_like_zkcli() {
    let Some(zk) = server("cli_interactive_session_like_zkcli") else {
        return;
    };
    let script = "create /inter one\n\
                  \n\
                  get -w /inter\n\
                  set /inter two\n\
                  create /inter/c \"a b\"\n\
                  get /inter/c\n\
                  ls -w /inter\n\
                  create /inter/d\n\
                  stat /inter/none\n\
                  bogus\n\
                  printwatches off\n\
                  printwatches\n\
                  history\n\
                  redo 5\n\
                  close\n\
                  ls /\n\
                  quit\n\
                  ls /\n";
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = run_cli_script(&zk.addr, &mut script.as_bytes(), &mut out, Some(&mut err))
        .await
        .unwrap();
    // The exit code is the one of the last command before quit.
    assert_eq!(code, 0);
    let out = String::from_utf8(out).unwrap();
    let err = String::from_utf8(err).unwrap();
    let expected_out = format!(
        "Connecting to {addr}\nWelcome to ZooKeeper!\nJLine support is disabled\n\n\
         WATCHER::\n\nWatchedEvent state:SyncConnected type:None path:null\n\
         one\n\
         \nWATCHER::\n\nWatchedEvent state:SyncConnected type:NodeDataChanged path:/inter\n\
         a b\n\
         [c]\n\
         \nWATCHER::\n\nWatchedEvent state:SyncConnected type:NodeChildrenChanged path:/inter\n\
         printwatches is off\n\
         1 - get -w /inter\n2 - set /inter two\n3 - create /inter/c \"a b\"\n\
         4 - get /inter/c\n5 - ls -w /inter\n6 - create /inter/d\n7 - stat /inter/none\n\
         8 - bogus\n9 - printwatches off\n10 - printwatches\n11 - history\n\
         [c, d]\n\
         Not connected\n",
        addr = zk.addr
    );
    assert_eq!(out, expected_out);
    assert!(err.starts_with(
        "Created /inter\nCreated /inter/c\nCreated /inter/d\nNode does not exist: /inter/none\n\
         ZooKeeper -server host:port"
    ));
    assert!(err.ends_with("\twhoami \nCommand not found: Command not found bogus\n"));

    let c = connect(&zk).await;
    assert_eq!(
        c.get_data("/inter", false).await.unwrap().0.unwrap(),
        b"two"
    );
    c.close().await.unwrap();
}
