//! `keel_bench::run` against a real Keel started in-process on 127.0.0.1:0.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use keel_bench::{BenchConfig, BenchError, BenchReport, ProgressLine, Workload, CSV_HEADER};
use keel_client::{open_acl_unsafe, Client, CreateMode};
use keel_server::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// A Keel server on its own runtime (the bench builds another one).
struct Server {
    runtime: tokio::runtime::Runtime,
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().to_path_buf();
        let (address, stop, task) = runtime.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            let config = ServerConfig {
                client_port: address.port(),
                data_dir,
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
            for _ in 0..500 {
                if serving(address).await {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (address, stop, task)
        });
        Server {
            runtime,
            address,
            stop: Some(stop),
            task: Some(task),
            _dir: dir,
        }
    }

    fn addr(&self) -> String {
        self.address.to_string()
    }

    /// Runs `f` with a fresh session, on the server's runtime.
    fn with_client<T>(&self, f: impl AsyncFnOnce(&Client) -> T) -> T {
        let addr = self.addr();
        self.runtime.block_on(async move {
            let client = Client::connect(&addr, 10_000).await.unwrap();
            let out = f(&client).await;
            client.close().await.unwrap();
            out
        })
    }

    fn exists(&self, path: &str) -> bool {
        self.with_client(async |c| c.exists(path, false).await.unwrap().is_some())
    }

    fn root_children(&self) -> Vec<String> {
        self.with_client(async |c| c.get_children("/", false).await.unwrap())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = self.runtime.block_on(task);
        }
    }
}

/// srvr answers its stats once the server serves sessions (ruok answers
/// imok earlier, while it loads its data, as ZooKeeper's does).
async fn serving(address: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect(address).await else {
        return false;
    };
    if stream.write_all(b"srvr").await.is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer).await;
    answer.starts_with("Zookeeper version:")
}

fn config(server: &Server, workload: Workload) -> BenchConfig {
    BenchConfig::new(&server.addr(), workload, 4, Duration::from_secs(1)).unwrap()
}

/// The invariants every clean run must satisfy.
fn check_clean(report: &BenchReport, server: &Server) {
    let w = report.workload;
    assert_eq!(report.ops, report.successes + report.errors, "{w}");
    assert_eq!(report.errors, 0, "{w}: errors {:?}", report.error_kinds);
    assert!(report.successes > 0 && report.tps > 0.0, "{w}: nothing ran");
    let l = report.latency;
    assert!(l.p50_us > 0, "{w}: {l:?}");
    assert!(
        l.p50_us <= l.p90_us
            && l.p90_us <= l.p99_us
            && l.p99_us <= l.p999_us
            && l.p999_us <= l.max_us,
        "{w}: percentiles not monotonic: {l:?}"
    );
    assert!(l.avg_us > 0.0 && l.avg_us <= l.max_us as f64, "{w}: {l:?}");
    assert_eq!(report.histogram.len(), report.successes, "{w}");
    assert_eq!(
        report.per_second.iter().sum::<u64>(),
        report.successes,
        "{w}"
    );
    assert_eq!(
        report.per_second_errors.iter().sum::<u64>(),
        report.errors,
        "{w}"
    );
    assert_eq!(
        report.ops_by_kind.iter().map(|(_, n)| n).sum::<u64>(),
        report.ops,
        "{w}"
    );
    assert!(
        report.elapsed >= report.duration,
        "{w}: {:?}",
        report.elapsed
    );
    assert!(
        report.cleanup_error.is_none(),
        "{w}: {:?}",
        report.cleanup_error
    );
    assert!(report.cleaned_nodes > 0, "{w}");
    assert!(
        !server.exists(&report.root),
        "{w}: {} left behind",
        report.root
    );
}

#[test]
fn every_workload_runs_clean_and_leaves_nothing_behind() {
    let server = Server::start();
    let out = tempfile::tempdir().unwrap();
    let csv = out.path().join("results.csv");
    for workload in Workload::ALL {
        let mut lines = Vec::new();
        let report = keel_bench::run(config(&server, workload), |l| lines.push(l.clone()))
            .unwrap_or_else(|e| panic!("{workload}: {e}"));
        check_clean(&report, &server);
        assert_eq!((report.clients, report.in_flight), (4, 1));
        // One progress line per second of the timed phase.
        let run_lines = lines
            .iter()
            .filter(|l| matches!(l, ProgressLine::Run { .. }))
            .count();
        assert!(run_lines >= 1, "{workload}: {lines:?}");
        let by_kind: Vec<(String, u64)> = report
            .ops_by_kind
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (k.to_string(), *n))
            .collect();
        if workload == Workload::Mix {
            // Every kind of the mix ran: with the default seed each lane
            // draws all five within its first 151 ops (a unit test checks).
            assert_eq!(by_kind.len(), 5, "{by_kind:?}");
        } else {
            assert_eq!(by_kind.len(), 1, "{by_kind:?}");
            assert_eq!(by_kind[0].0, workload.name());
        }
        report.append_csv(&csv).unwrap();
        let svg_path = out.path().join(format!("{workload}.svg"));
        report.write_svg(&svg_path).unwrap();
        let svg = std::fs::read_to_string(&svg_path).unwrap();
        assert!(svg.starts_with("<svg"), "{workload}");
        assert!(svg.trim_end().ends_with("</svg>"), "{workload}");
        assert!(svg.contains("Throughput") && svg.contains("Latency by percentile"));
        let summary = report.to_string();
        for key in [
            "workload",
            "clients",
            "duration",
            "ops",
            "errors",
            "TPS",
            "avg",
            "p50",
            "p90",
            "p99 ",
            "p99.9",
            "max",
            "error rate",
        ] {
            assert!(summary.contains(key), "summary lacks {key}: {summary}");
        }
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 1 + Workload::ALL.len(), "{text}");
    assert_eq!(rows[0], CSV_HEADER);
    assert_eq!(rows.iter().filter(|r| **r == CSV_HEADER).count(), 1);
    let columns = CSV_HEADER.split(',').count();
    for (row, workload) in rows[1..].iter().zip(Workload::ALL) {
        let fields: Vec<&str> = row.split(',').collect();
        assert_eq!(fields.len(), columns, "{row}");
        assert_eq!(fields[1], workload.name());
        assert_eq!(fields[8], "0", "errors column of {row}");
    }
    assert!(
        server
            .root_children()
            .iter()
            .all(|c| !c.starts_with("keel-bench")),
        "{:?}",
        server.root_children()
    );
}

#[test]
fn pipelined_sessions_spread_over_servers_and_an_existing_root_is_left_alone() {
    let server = Server::start();
    // Two entries (the same server twice): clients alternate between them.
    let mut cfg = BenchConfig::new(
        &format!("{0}, {0}", server.addr()),
        Workload::Mix,
        2,
        Duration::from_secs(1),
    )
    .unwrap();
    cfg.in_flight = 8;
    cfg.value_size = 1_000;
    let report = keel_bench::run(cfg, |_| {}).unwrap();
    check_clean(&report, &server);
    assert_eq!(
        (report.clients, report.in_flight, report.servers.len()),
        (2, 8, 2)
    );
    // --csv into an existing empty file: the header once, then the rows.
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("empty.csv");
    std::fs::write(&csv, "").unwrap();
    report.append_csv(&csv).unwrap();
    report.append_csv(&csv).unwrap();
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    assert_eq!(text.lines().next(), Some(CSV_HEADER));

    // A root that is already there is someone else's: refuse, touch nothing.
    server.with_client(async |c| {
        c.create("/mine", b"keep", &open_acl_unsafe(), CreateMode::Persistent)
            .await
            .unwrap();
    });
    let mut cfg = config(&server, Workload::Get);
    cfg.root = Some("/mine".into());
    let err = keel_bench::run(cfg, |_| {}).unwrap_err();
    assert!(matches!(err, BenchError::Prepare { .. }), "{err}");
    assert!(err.to_string().contains("/mine"), "{err}");
    assert!(server.exists("/mine"));
}

#[test]
fn a_run_told_to_keep_its_tree_leaves_it_whole() {
    let server = Server::start();
    let mut cfg = config(&server, Workload::Create);
    cfg.keep_tree = true;
    let report = keel_bench::run(cfg, |_| {}).unwrap();
    assert_eq!(report.errors, 0, "{:?}", report.error_kinds);
    assert!(report.kept_tree && report.cleanup_error.is_none());
    assert_eq!(report.cleaned_nodes, 0);
    assert!(
        report
            .to_string()
            .contains(&format!("tree kept       {}", report.root)),
        "{report}"
    );
    // Every node the run created is still there, under its root.
    let count =
        server.with_client(async |c| c.get_all_children_number(&report.root).await.unwrap());
    assert!(
        count as u64 >= report.successes,
        "{count} nodes under {} after {} creates",
        report.root,
        report.successes
    );
}

#[test]
fn bad_input_is_refused_with_a_clear_error() {
    let err = "readonly".parse::<Workload>().unwrap_err().to_string();
    assert!(err.contains("unknown workload \"readonly\""), "{err}");

    let base = || BenchConfig::new("127.0.0.1:2181", Workload::Get, 4, Duration::from_secs(1));
    let refused = |c: BenchConfig, needle: &str| {
        let started = Instant::now();
        let e = keel_bench::run(c, |_| {}).unwrap_err();
        assert!(matches!(e, BenchError::Invalid(_)), "{e:?}");
        assert!(e.to_string().contains(needle), "{e} lacks {needle}");
        assert!(started.elapsed() < Duration::from_secs(1));
    };
    let mut c = base().unwrap();
    c.clients = 0;
    refused(c, "clients must be 1..=10000, got 0");
    let mut c = base().unwrap();
    c.duration = Duration::ZERO;
    refused(c, "duration");
    let mut c = base().unwrap();
    c.value_size = (1 << 20) + 1;
    refused(c, "value-size must be at most 1048576");
    let mut c = base().unwrap();
    c.in_flight = 0;
    refused(c, "in-flight");
    assert!(BenchConfig::new(" ,", Workload::Get, 1, Duration::from_secs(1)).is_err());

    // Nobody listens on this port: connection refused, reported at once
    // with the address.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let started = Instant::now();
    let err = keel_bench::run(
        BenchConfig::new(&address, Workload::Mix, 4, Duration::from_secs(1)).unwrap(),
        |_| {},
    )
    .unwrap_err();
    assert!(matches!(err, BenchError::Connect { .. }), "{err:?}");
    assert!(err.to_string().contains(&address), "{err}");
    assert!(started.elapsed() <= keel_bench::CONNECT_TIMEOUT + Duration::from_secs(1));
}

#[test]
fn populate_creates_exactly_n_znodes_and_refuses_to_run_twice() {
    use keel_bench::{PopulateConfig, Shape, POPULATE_ROOT};
    const ZNODES: u64 = 5_003;
    const FANOUT: u64 = 10;
    let server = Server::start();
    let mut config = PopulateConfig::new(&server.addr(), ZNODES).unwrap();
    config.fanout = FANOUT;
    config.value_size = 10;
    config.sessions = 2;
    config.in_flight = 3;
    let report = keel_bench::populate(config.clone(), |_| {}).unwrap();
    assert_eq!((report.znodes, report.counted), (ZNODES, ZNODES));
    assert_eq!(
        report.to_string(),
        format!(
            "populated {ZNODES} znodes in {:.1} s",
            report.elapsed.as_secs_f64()
        )
    );
    let shape = Shape {
        znodes: ZNODES,
        fanout: FANOUT,
    };
    assert_eq!(report.last_path, shape.last_path());
    let (count, top, last, next) = server.with_client(async |c| {
        (
            c.get_all_children_number(POPULATE_ROOT).await.unwrap(),
            c.get_children(POPULATE_ROOT, false).await.unwrap().len(),
            c.get_data(&shape.last_path(), false).await.unwrap().0,
            c.exists(&shape.path(ZNODES), false).await.unwrap(),
        )
    });
    assert_eq!(count as u64, ZNODES);
    assert_eq!(top as u64, FANOUT);
    assert_eq!(last, Some(b"abcdefghij".to_vec()));
    assert!(next.is_none(), "one znode too many");

    // A second populate refuses and leaves the tree as it was.
    let err = keel_bench::populate(config, |_| {}).unwrap_err();
    assert!(
        matches!(
            err,
            BenchError::PopulateExists {
                existing: ZNODES,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("already exists"), "{err}");
    let again = server.with_client(async |c| c.get_all_children_number(POPULATE_ROOT).await);
    assert_eq!(again.unwrap() as u64, ZNODES);
}
