//! The server through its testable entry point `run(listener, config,
//! shutdown)`, driven by Keel's own client over loopback.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use keel_client::{open_acl_unsafe, Client, ClientError, CreateMode, ErrorCode};
use keel_server::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

struct Running {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap();
    }
}

async fn start(data_dir: &Path, snapshot_every_entries: u64) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let config = ServerConfig {
        client_port: address.port(),
        data_dir: data_dir.to_path_buf(),
        tick_time_ms: 200,
        snapshot_every_entries,
        four_letter_words: vec!["*".into()],
        ..ServerConfig::default()
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        keel_server::run(listener, config, async move {
            let _ = stopped.await;
        })
        .await
        .expect("server runs cleanly");
    });
    // ruok answers imok while the node still loads its data (as
    // ZooKeeper's does); srvr answers its stats only once it serves.
    for _ in 0..500 {
        let srvr = four_letter_word(address, "srvr").await.unwrap_or_default();
        if srvr.starts_with("Zookeeper version:") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Running {
        address,
        stop: Some(stop),
        task,
    }
}

async fn four_letter_word(address: SocketAddr, word: &str) -> Option<String> {
    let mut stream = TcpStream::connect(address).await.ok()?;
    stream.write_all(word.as_bytes()).await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    Some(answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 100_000).await;
    let client = Client::connect(&server.address.to_string(), 4_000)
        .await
        .unwrap();
    client
        .create("/kept", b"v1", &open_acl_unsafe(), CreateMode::Persistent)
        .await
        .unwrap();
    client.set_data("/kept", b"v2", -1).await.unwrap();
    let sequential = client
        .create(
            "/kept/s-",
            b"",
            &open_acl_unsafe(),
            CreateMode::PersistentSequential,
        )
        .await
        .unwrap();
    assert_eq!(sequential, "/kept/s-0000000000");
    drop(client);
    server.stop().await;

    let server = start(dir.path(), 100_000).await;
    let client = Client::connect(&server.address.to_string(), 4_000)
        .await
        .unwrap();
    let (data, stat) = client.get_data("/kept", false).await.unwrap();
    assert_eq!(data.as_deref(), Some(&b"v2"[..]));
    assert_eq!((stat.version, stat.num_children), (1, 1));
    // The parent's cversion survived too, so sequence numbers go on.
    let next = client
        .create(
            "/kept/s-",
            b"",
            &open_acl_unsafe(),
            CreateMode::PersistentSequential,
        )
        .await
        .unwrap();
    assert_eq!(next, "/kept/s-0000000001");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_taken_and_restart_loads_them_with_the_log_tail() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 20).await;
    let client = Client::connect(&server.address.to_string(), 4_000)
        .await
        .unwrap();
    for i in 0..120 {
        client
            .create(
                &format!("/n{i}"),
                format!("{i}").as_bytes(),
                &open_acl_unsafe(),
                CreateMode::Persistent,
            )
            .await
            .unwrap();
    }
    // Snapshots run in the background: wait until one covers most writes.
    let mut snapshots = Vec::new();
    for _ in 0..200 {
        snapshots = keel_consensus::snapfile::list(&dir.path().join("snapshots")).unwrap();
        if snapshots.first().is_some_and(|(index, _, _)| *index >= 100) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!snapshots.is_empty(), "no snapshot written");
    drop(client);
    server.stop().await;
    // A clean stop waits for the snapshot in progress, which prunes.
    let snapshots = keel_consensus::snapfile::list(&dir.path().join("snapshots")).unwrap();
    assert!(
        snapshots.len() <= keel_consensus::snapfile::SNAPSHOTS_KEPT,
        "{snapshots:?}"
    );

    let server = start(dir.path(), 20).await;
    let client = Client::connect(&server.address.to_string(), 4_000)
        .await
        .unwrap();
    let children = client.get_children("/", false).await.unwrap();
    assert_eq!(children.len(), 121, "120 nodes + /zookeeper");
    let (data, _) = client.get_data("/n119", false).await.unwrap();
    assert_eq!(data.as_deref(), Some(&b"119"[..]));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_newest_snapshot_falls_back_to_the_previous_one_and_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 10).await;
    let client = Client::connect(&server.address.to_string(), 4_000)
        .await
        .unwrap();
    for i in 0..60 {
        client
            .create(
                &format!("/c{i}"),
                b"x",
                &open_acl_unsafe(),
                CreateMode::Persistent,
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(client);
    server.stop().await;
    let snapshots = keel_consensus::snapfile::list(&dir.path().join("snapshots")).unwrap();
    assert_eq!(snapshots.len(), 2, "newest plus one fallback");
    let newest = &snapshots[0].2;
    let mut bytes = std::fs::read(newest).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(newest, bytes).unwrap();

    let server = start(dir.path(), 10).await;
    let client = Client::connect(&server.address.to_string(), 4_000)
        .await
        .unwrap();
    assert_eq!(client.get_children("/", false).await.unwrap().len(), 61);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_session_loses_its_ephemerals_and_an_oversized_frame_closes_only_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 100_000).await;
    let address = server.address.to_string();
    let owner = Client::connect(&address, 4_000).await.unwrap();
    owner
        .create("/e", b"", &open_acl_unsafe(), CreateMode::Ephemeral)
        .await
        .unwrap();
    let observer = Client::connect(&address, 4_000).await.unwrap();
    assert!(observer.exists("/e", false).await.unwrap().is_some());
    owner.close().await.unwrap();
    assert!(observer.exists("/e", false).await.unwrap().is_none());

    // A frame claiming 2 GiB: the server closes that connection only.
    let mut rogue = TcpStream::connect(server.address).await.unwrap();
    rogue
        .write_all(&0x7fff_ffffi32.to_be_bytes())
        .await
        .unwrap();
    let mut sink = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), rogue.read_to_end(&mut sink)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "rogue connection closed"
    );
    let error = observer
        .create("/e/child", b"", &open_acl_unsafe(), CreateMode::Persistent)
        .await
        .unwrap_err();
    assert!(
        matches!(error, ClientError::Zk(ErrorCode::NoNode)),
        "{error:?}"
    );
    server.stop().await;
}

/// Writes and syncs pipelined on one session: every reply comes back, in
/// order, and the connection lives. (A sync started while writes of its
/// session flew was answered by its ReadIndex before them, and the
/// connection closed on the out-of-order reply; the simulator found it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_writes_and_syncs_are_answered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), 100_000).await;
    let client = Client::connect(&server.address.to_string(), 4_000)
        .await
        .unwrap();
    let acl = open_acl_unsafe();
    for round in 0..200 {
        let path = format!("/p{round}");
        let (created, synced, set, synced_again, read) = tokio::join!(
            client.create(&path, b"a", &acl, CreateMode::Persistent),
            client.sync("/"),
            client.set_data(&path, b"b", -1),
            client.sync(&path),
            client.get_data(&path, false),
        );
        created.unwrap_or_else(|e| panic!("round {round}: create: {e:?}"));
        synced.unwrap_or_else(|e| panic!("round {round}: sync: {e:?}"));
        set.unwrap_or_else(|e| panic!("round {round}: setData: {e:?}"));
        synced_again.unwrap_or_else(|e| panic!("round {round}: sync: {e:?}"));
        let (data, _) = read.unwrap_or_else(|e| panic!("round {round}: getData: {e:?}"));
        assert_eq!(
            data.as_deref(),
            Some(&b"b"[..]),
            "round {round}: the read sees the session's writes"
        );
    }
    server.stop().await;
}

/// `profile_locks = true`: `lcks` charges the locks a getData takes to
/// getData (the profiler's counters are process-wide; other tests here
/// only add rows of their own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_profiler_charges_reads_to_their_operation() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let config = ServerConfig {
        client_port: address.port(),
        data_dir: dir.path().to_path_buf(),
        four_letter_words: vec!["*".into()],
        profile_locks: true,
        ..ServerConfig::default()
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        keel_server::run(listener, config, async move {
            let _ = stopped.await;
        })
        .await
        .expect("server runs cleanly");
    });
    let server = Running {
        address,
        stop: Some(stop),
        task,
    };
    for _ in 0..500 {
        let srvr = four_letter_word(address, "srvr").await.unwrap_or_default();
        if srvr.starts_with("Zookeeper version:") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let client = Client::connect(&address.to_string(), 4_000).await.unwrap();
    client
        .create("/p", b"x", &open_acl_unsafe(), CreateMode::Persistent)
        .await
        .unwrap();
    for _ in 0..100 {
        client.get_data("/p", false).await.unwrap();
    }
    let lcks = four_letter_word(address, "lcks").await.unwrap();
    assert!(lcks.starts_with("lock profiler: on for"), "{lcks}");
    let row = lcks
        .lines()
        .find(|line| line.starts_with("node.read") && line.contains(" getData "))
        .unwrap_or_else(|| panic!("no getData row:\n{lcks}"));
    let count: u64 = row.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(count >= 100, "{row}");
    assert!(lcks.contains("node.write   apply"), "{lcks}");
    server.stop().await;
}

fn tls_fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tls")
        .join(name)
}

/// A client port of each kind: the same session protocol inside TLS, with
/// a client certificate required; plain-text bytes on the TLS port end the
/// connection at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_port_serves_the_same_tree_as_the_plain_port() {
    let dir = tempfile::tempdir().unwrap();
    let plain = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let secure = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (plain_address, secure_address) =
        (plain.local_addr().unwrap(), secure.local_addr().unwrap());
    let config = ServerConfig {
        client_port: plain_address.port(),
        secure_client_port: secure_address.port(),
        tls_cert_file: Some(tls_fixture("server.pem")),
        tls_key_file: Some(tls_fixture("server.key")),
        tls_ca_file: Some(tls_fixture("ca.pem")),
        data_dir: dir.path().to_path_buf(),
        tick_time_ms: 200,
        ..ServerConfig::default()
    };
    let listeners = keel_server::ClientListeners {
        plain: Some(plain),
        secure: Some(keel_server::SecureListener::load(secure, &config).unwrap()),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        keel_server::run_with(
            listeners,
            config,
            Box::pin(async move {
                let _ = stopped.await;
            }),
        )
        .await
        .expect("server runs cleanly");
    });
    let tls = |cert: Option<&str>| {
        keel_client::ClientTls::load(&keel_client::TlsOptions {
            ca_file: tls_fixture("ca.pem"),
            cert_file: cert.map(|name| tls_fixture(&format!("{name}.pem"))),
            key_file: cert.map(|name| tls_fixture(&format!("{name}.key"))),
        })
        .unwrap()
    };
    let (with_certificate, without_certificate) = (tls(Some("client")), tls(None));
    let secure_target = secure_address.to_string();
    let mut secure_client = None;
    for _ in 0..500 {
        let attempt = Client::connect_with(&secure_target, 4_000, Some(&with_certificate));
        if let Ok(client) = attempt.await {
            secure_client = Some(client);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let secure_client = secure_client.expect("a TLS session");
    secure_client
        .create(
            "/tls",
            b"inside",
            &open_acl_unsafe(),
            CreateMode::Persistent,
        )
        .await
        .unwrap();
    let plain_client = Client::connect(&plain_address.to_string(), 4_000)
        .await
        .unwrap();
    let data = plain_client.get_data("/tls", false).await.unwrap().0;
    assert_eq!(data.as_deref(), Some(&b"inside"[..]));
    let refused = Client::connect_with(&secure_target, 4_000, Some(&without_certificate));
    assert!(refused.await.is_err(), "no client certificate, no session");
    let started = std::time::Instant::now();
    let answer = four_letter_word(secure_address, "ruok").await;
    assert!(answer.unwrap_or_default().is_empty());
    assert!(started.elapsed() < Duration::from_secs(2));
    for client in [secure_client, plain_client] {
        client.close().await.unwrap();
    }
    let _ = stop.send(());
    task.await.unwrap();
}
