//! The Prometheus endpoint: `GET /metrics` on `metrics_address:metrics_port`
//! (off unless `metrics_port` is set), in Prometheus's text format 0.0.4,
//! the format of ZooKeeper's Prometheus provider (Prometheus's Java client
//! 0.9 in ZooKeeper 3.8 and 3.9): ZooKeeper's metric names with its
//! meaning, unprefixed, so its dashboards and alerts work unchanged —
//! gauges, counters named without `_total`, summaries as
//! `name{quantile="0.5"}` (0.5, 0.9, 0.99 for the detailed ones) over the
//! last 10 minutes plus cumulative `name_count` and `name_sum`, durations in
//! milliseconds — and Keel's own under `keel_`, in Prometheus's units
//! (seconds, bytes; counters end in `_total`).
//!
//! Every value is read at scrape time from the atomics and histograms the
//! request path, the apply step and the Raft driver already keep (the same
//! ones `mntr` reads); nothing here runs per request. The text is encoded
//! by the `prometheus` crate (TiKV's client; `prometheus-client`, the
//! Prometheus project's own, has no summaries and appends `_total` to every
//! counter, which would rename ZooKeeper's counters).
//!
//! HTTP/1.1 (hyper) runs on the server's tokio runtime, apart from the
//! client port: at most METRICS_CONNECTIONS_MAX connections at once (more
//! get a 503 and a close), request heads of at most
//! METRICS_REQUEST_HEAD_MAX_BYTES (else 431) read within
//! METRICS_HEADER_READ_TIMEOUT_MS (else closed), and a connection lives at
//! most METRICS_CONNECTION_MAX_MS (plus METRICS_SHUTDOWN_GRACE_MS to finish
//! a response): a slow or broken scraper costs the client port nothing.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use keel_metrics::{Histogram, Snapshot, Window};
use parking_lot::Mutex;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{
    Bucket, Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary,
};
use prometheus::Encoder;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::profile::{self, Op};
use crate::shared::{Shared, Stats};

/// Scrapers served at once; more connections get a 503 and are closed.
pub const METRICS_CONNECTIONS_MAX: usize = 16;
/// Longest request head (request line and headers) accepted: hyper answers
/// 431 to a longer one and closes. Also the connection's read buffer.
pub const METRICS_REQUEST_HEAD_MAX_BYTES: usize = 8 * 1024;
/// Most header lines in a request (431 beyond).
pub const METRICS_REQUEST_HEADERS_MAX: usize = 64;
/// Time a client has to send a request head, also while a kept-alive
/// connection waits for the next one; then the connection is closed.
pub const METRICS_HEADER_READ_TIMEOUT_MS: u64 = 5_000;
/// Longest life of one connection (Prometheus keeps its connection alive
/// between scrapes and simply opens a new one).
pub const METRICS_CONNECTION_MAX_MS: u64 = 60_000;
/// How long a connection past its life may take to finish the response it
/// is writing.
pub const METRICS_SHUTDOWN_GRACE_MS: u64 = 5_000;
/// The path served.
pub const METRICS_PATH: &str = "/metrics";
/// Prometheus's text format, as ZooKeeper serves it.
const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// ZooKeeper's summaries report quantiles over the last 10 minutes, moving
/// in 5 steps (Prometheus's Java client's defaults).
pub const SUMMARY_WINDOW_MS: u64 = 10 * 60 * 1000;
pub const SUMMARY_AGE_BUCKETS: u64 = 5;
/// ZooKeeper's DetailLevel.BASIC and ADVANCED summaries.
const QUANTILES_BASIC: &[f64] = &[0.5];
const QUANTILES_ADVANCED: &[f64] = &[0.5, 0.9, 0.99];

/// Exported duration histograms' upper bounds: 2^k µs for k in this range
/// (8 µs .. 67 s), in seconds.
const DURATION_BOUND_EXPONENTS: std::ops::RangeInclusive<u32> = 3..=26;
/// Exported count histograms' upper bounds: 2^k − 1 for k in this range
/// (0 .. 8191: a group-commit entry carries at most 4,096 proposals).
const COUNT_BOUND_EXPONENTS: std::ops::RangeInclusive<u32> = 0..=13;

#[derive(Clone, Copy)]
enum Kind {
    Gauge,
    Counter,
    /// ZooKeeper's summary (milliseconds) with these quantiles.
    Summary(&'static [f64]),
    Histogram,
}

/// One metric family the endpoint serves: its name, help and labels.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
}

const fn family(name: &'static str, kind: Kind, help: &'static str) -> Family {
    Family {
        name,
        help,
        kind,
        labels: &[],
    }
}

use Kind::{Counter as C, Gauge as G, Histogram as H};
const BASIC: Kind = Kind::Summary(QUANTILES_BASIC);
const ADVANCED: Kind = Kind::Summary(QUANTILES_ADVANCED);

const FAMILIES: &[Family] = &[
    // ZooKeeperServer.registerMetrics' gauges.
    family("znode_count", G, "Znodes in the data tree"),
    family("watch_count", G, "Watches set (path, session and kind)"),
    family("ephemerals_count", G, "Ephemeral znodes"),
    family(
        "approximate_data_size",
        G,
        "Bytes of znode paths and data (ZooKeeper's approximate data size)",
    ),
    family("num_alive_connections", G, "Open client connections"),
    family(
        "outstanding_requests",
        G,
        "Client requests read and not yet answered",
    ),
    family(
        "packets_received",
        G,
        "Client requests received since start or srst",
    ),
    family(
        "packets_sent",
        G,
        "Replies and watch events sent since start or srst",
    ),
    family("global_sessions", G, "Sessions in the replicated tree"),
    family(
        "local_sessions",
        G,
        "Read-only mode's local sessions on this node",
    ),
    family("uptime", G, "Milliseconds since the server started"),
    family(
        "avg_latency",
        G,
        "Average request latency in ms since start or srst",
    ),
    family("min_latency", G, "Smallest request latency in ms"),
    family("max_latency", G, "Largest request latency in ms"),
    family(
        "open_file_descriptor_count",
        G,
        "File descriptors the server has open",
    ),
    family(
        "max_file_descriptor_count",
        G,
        "The server's limit on open file descriptors",
    ),
    // ServerMetrics' summaries (milliseconds) and counters.
    family(
        "readlatency",
        ADVANCED,
        "Read request latency in ms, receipt to reply",
    ),
    family(
        "updatelatency",
        ADVANCED,
        "Write request latency in ms, proposal to reply",
    ),
    family(
        "fsynctime",
        BASIC,
        "Raft log write with fdatasync in ms (raft-engine)",
    ),
    family("snapshottime", BASIC, "Snapshot file written in ms"),
    family(
        "election_time",
        BASIC,
        "No leader known (start or leader lost) until one is, in ms",
    ),
    family(
        "quorum_ack_latency",
        ADVANCED,
        "Leader: entry appended until a quorum committed it, in ms",
    ),
    family(
        "propagation_latency",
        ADVANCED,
        "Transaction created until applied on this node, in ms (wall clocks)",
    ),
    family(
        "startup_snap_load_time",
        BASIC,
        "Loading the newest snapshot at start, in ms",
    ),
    family(
        "startup_txns_load_time",
        BASIC,
        "Reading the log and applying what it had committed at start, in ms",
    ),
    family(
        "commit_count",
        C,
        "Transactions committed while this node led",
    ),
    family(
        "snap_count",
        C,
        "Snapshots this node sent to followers as leader",
    ),
    family(
        "looking_count",
        C,
        "Times this node was without a leader (start, leader lost)",
    ),
    family(
        "connection_rejected",
        C,
        "Client connections refused (per-address limit, node still loading)",
    ),
    family(
        "unrecoverable_error_count",
        C,
        "Connection tasks that panicked and Raft drivers that died",
    ),
    // Keel's own.
    family(
        "keel_serving",
        G,
        "1 once the node has caught up and serves sessions",
    ),
    family("keel_raft_is_leader", G, "1 while this node leads"),
    family(
        "keel_log_write_paused",
        G,
        "1 while the Raft log's file system is full (no write is acknowledged)",
    ),
    family(
        "keel_log_write_pauses_total",
        C,
        "Times the Raft log met a full file system",
    ),
    family("keel_raft_term", G, "Raft term"),
    family("keel_raft_leader_id", G, "Id of the leader (0: none known)"),
    family("keel_raft_commit_index", G, "Raft commit index"),
    family(
        "keel_raft_applied_index",
        G,
        "Raft index applied to the tree",
    ),
    family(
        "keel_raft_last_index",
        G,
        "Last index in this node's Raft log",
    ),
    family(
        "keel_raft_apply_lag",
        G,
        "Entries committed and not yet applied here",
    ),
    family(
        "keel_write_linger_seconds",
        G,
        "How long the Raft leader may hold a small write batch now",
    ),
    family(
        "keel_raft_fsyncs_total",
        C,
        "Raft log writes with fdatasync",
    ),
    family(
        "keel_raft_proposals_total",
        C,
        "Proposals put in the log by this node as leader",
    ),
    family(
        "keel_raft_batches_total",
        C,
        "Group-commit entries proposed by this node as leader",
    ),
    family(
        "keel_group_commit_batch_proposals",
        H,
        "Proposals per group-commit entry (leader)",
    ),
    family(
        "keel_heartbeat_rtt_seconds",
        H,
        "Leader to follower heartbeat round trips",
    ),
    family(
        "keel_snapshots_taken_total",
        C,
        "Snapshot files written by this node",
    ),
    family(
        "keel_snapshot_duration_seconds",
        H,
        "Time to write a snapshot file",
    ),
    family(
        "keel_snapshot_last_bytes",
        G,
        "Size of the newest snapshot file written",
    ),
    family(
        "keel_snapshot_last_duration_seconds",
        G,
        "Time the newest snapshot took to write",
    ),
    family(
        "keel_snapshot_preimage_bytes",
        G,
        "Old versions of nodes kept for a snapshot being written",
    ),
    family(
        "keel_tree_bytes",
        G,
        "Memory of the data tree by Keel's own accounting",
    ),
    family("keel_last_zxid", G, "Zxid of the last applied transaction"),
    Family {
        name: "keel_requests_total",
        help: "Client requests received, by operation",
        kind: C,
        labels: &["op"],
    },
    Family {
        name: "keel_request_latency_seconds",
        help: "Reads (receipt to reply) and writes (proposal to reply), by operation",
        kind: H,
        labels: &["op"],
    },
    Family {
        name: "keel_lock_acquisitions_total",
        help: "Lock profiler (profile_locks): acquisitions by lock and operation",
        kind: C,
        labels: &["lock", "op"],
    },
    Family {
        name: "keel_lock_wait_seconds_total",
        help: "Lock profiler: time spent waiting for the lock",
        kind: C,
        labels: &["lock", "op"],
    },
    Family {
        name: "keel_lock_hold_seconds_total",
        help: "Lock profiler: time the lock was held",
        kind: C,
        labels: &["lock", "op"],
    },
];

/// What the endpoint reads: the server's counters from the start, the
/// node (tree, Raft status) once it runs.
pub struct Sources {
    stats: Arc<Stats>,
    node: watch::Receiver<Option<Arc<Shared>>>,
    /// The summaries' quantile windows, by name (only scrapes take it).
    windows: Mutex<HashMap<&'static str, Window>>,
    /// The windows' clock.
    epoch: Instant,
    descs: Vec<Desc>,
}

/// The endpoint: a Prometheus registry holding Keel's one collector.
pub struct Exporter {
    registry: prometheus::Registry,
}

impl Exporter {
    /// `node` carries the node's state once it has loaded (None before).
    pub fn new(stats: Arc<Stats>, node: watch::Receiver<Option<Arc<Shared>>>) -> Exporter {
        let descs = FAMILIES
            .iter()
            .map(|f| {
                let labels = f.labels.iter().map(|l| l.to_string()).collect();
                Desc::new(f.name.into(), f.help.into(), labels, HashMap::new())
                    .expect("metric names and labels are valid")
            })
            .collect();
        let sources = Sources {
            stats,
            node,
            windows: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
            descs,
        };
        let registry = prometheus::Registry::new();
        registry
            .register(Box::new(sources))
            .expect("one collector with distinct names");
        Exporter { registry }
    }

    /// The text a scrape gets.
    pub fn render(&self) -> String {
        let families = self.registry.gather();
        let mut text = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&families, &mut text)
            .expect("every family has samples and a name");
        String::from_utf8(text).expect("the text format is UTF-8")
    }

    /// The answer to one HTTP request: the metrics for GET (or HEAD) of
    /// /metrics, 405 for another method there, 404 elsewhere.
    pub fn respond(&self, method: &Method, path: &str) -> Response<Full<Bytes>> {
        if path != METRICS_PATH {
            return plain(
                StatusCode::NOT_FOUND,
                "not found: metrics are at /metrics\n",
            );
        }
        if method != Method::GET && method != Method::HEAD {
            let mut response = plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed: use GET\n",
            );
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        let mut response = Response::new(Full::new(Bytes::from(self.render())));
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_TEXT));
        response
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Accepts scrapers until the task is dropped.
pub async fn serve(listener: TcpListener, exporter: Arc<Exporter>) {
    let slots = Arc::new(Semaphore::new(METRICS_CONNECTIONS_MAX));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Never waits for this client: a full send buffer just drops it.
            let _ = stream.try_write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
            tracing::debug!(%peer, "metrics: too many connections; refused");
            continue;
        };
        let exporter = exporter.clone();
        tokio::spawn(async move {
            serve_connection(stream, exporter).await;
            drop(slot);
        });
    }
}

async fn serve_connection(stream: TcpStream, exporter: Arc<Exporter>) {
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let response = exporter.respond(request.method(), request.uri().path());
        async move { Ok::<_, Infallible>(response) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(METRICS_HEADER_READ_TIMEOUT_MS))
        .max_buf_size(METRICS_REQUEST_HEAD_MAX_BYTES)
        .max_header_size(METRICS_REQUEST_HEAD_MAX_BYTES)
        .max_headers(METRICS_REQUEST_HEADERS_MAX)
        .serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    let lifetime = tokio::time::sleep(Duration::from_millis(METRICS_CONNECTION_MAX_MS));
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = lifetime => {
            // A response being written is finished, then the connection
            // closes (a scrape is not cut in the middle).
            connection.as_mut().graceful_shutdown();
            let grace = Duration::from_millis(METRICS_SHUTDOWN_GRACE_MS);
            tokio::time::timeout(grace, connection).await.unwrap_or(Ok(()))
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "metrics connection ended");
    }
}

impl Collector for Sources {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut out = Collected::default();
        self.collect_server(&mut out);
        let node = self.node.borrow().clone();
        match node {
            Some(shared) => self.collect_node(&shared, &mut out),
            None => out.gauge("local_sessions", 0.0),
        }
        if profile::enabled() {
            collect_lock_profile(&mut out);
        }
        FAMILIES
            .iter()
            .filter_map(|f| {
                let metrics = out.metrics.remove(f.name)?;
                let mut family = MetricFamily::default();
                family.set_name(f.name.into());
                family.set_help(f.help.into());
                family.set_field_type(match f.kind {
                    Kind::Gauge => MetricType::GAUGE,
                    Kind::Counter => MetricType::COUNTER,
                    Kind::Summary(_) => MetricType::SUMMARY,
                    Kind::Histogram => MetricType::HISTOGRAM,
                });
                family.set_metric(metrics.into());
                Some(family)
            })
            .collect()
    }
}

/// Samples gathered in one scrape, by family name.
#[derive(Default)]
struct Collected {
    metrics: HashMap<&'static str, Vec<Metric>>,
}

impl Collected {
    fn push(&mut self, name: &'static str, labels: &[(&str, &str)], metric: Metric) {
        let family = FAMILIES
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("{name} is not in FAMILIES"));
        assert_eq!(family.labels.len(), labels.len(), "labels of {name}");
        let mut metric = metric;
        metric.set_label(
            labels
                .iter()
                .map(|(name, value)| {
                    let mut pair = LabelPair::default();
                    pair.set_name(name.to_string());
                    pair.set_value(value.to_string());
                    pair
                })
                .collect::<Vec<_>>()
                .into(),
        );
        self.metrics.entry(name).or_default().push(metric);
    }

    fn gauge(&mut self, name: &'static str, value: f64) {
        let mut gauge = Gauge::default();
        gauge.set_value(value);
        let mut metric = Metric::default();
        metric.set_gauge(gauge);
        self.push(name, &[], metric);
    }

    fn counter(&mut self, name: &'static str, labels: &[(&str, &str)], value: f64) {
        let mut counter = Counter::default();
        counter.set_value(value);
        let mut metric = Metric::default();
        metric.set_counter(counter);
        self.push(name, labels, metric);
    }

    /// A histogram of µs as Prometheus seconds.
    fn duration_histogram(
        &mut self,
        name: &'static str,
        labels: &[(&str, &str)],
        snapshot: &Snapshot,
    ) {
        let bounds = DURATION_BOUND_EXPONENTS.map(|k| {
            (
                (1u64 << k) as f64 / 1e6,
                snapshot.count_below_power_of_two(k),
            )
        });
        self.histogram(name, labels, bounds, snapshot, 1e-6);
    }

    /// A histogram of counts, bounds 2^k − 1.
    fn count_histogram(&mut self, name: &'static str, snapshot: &Snapshot) {
        let bounds = COUNT_BOUND_EXPONENTS.map(|k| {
            (
                ((1u64 << k) - 1) as f64,
                snapshot.count_below_power_of_two(k),
            )
        });
        self.histogram(name, &[], bounds, snapshot, 1.0);
    }

    fn histogram(
        &mut self,
        name: &'static str,
        labels: &[(&str, &str)],
        bounds: impl Iterator<Item = (f64, u64)>,
        snapshot: &Snapshot,
        unit: f64,
    ) {
        let mut histogram = prometheus::proto::Histogram::default();
        histogram.set_sample_count(snapshot.count());
        histogram.set_sample_sum(snapshot.sum as f64 * unit);
        histogram.set_bucket(
            bounds
                .map(|(upper, cumulative)| {
                    let mut bucket = Bucket::default();
                    bucket.set_upper_bound(upper);
                    bucket.set_cumulative_count(cumulative);
                    bucket
                })
                .collect::<Vec<_>>()
                .into(),
        );
        let mut metric = Metric::default();
        metric.set_histogram(histogram);
        self.push(name, labels, metric);
    }
}

impl Sources {
    /// A ZooKeeper summary in ms of a µs histogram: quantiles over the
    /// window (NaN when nothing was recorded in it, as Prometheus's Java
    /// client reports), count and sum since start.
    fn summary(&self, out: &mut Collected, name: &'static str, total: Snapshot) {
        let Kind::Summary(quantiles) = FAMILIES
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.kind)
            .expect("a known family")
        else {
            panic!("{name} is not a summary");
        };
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let recent = self
            .windows
            .lock()
            .entry(name)
            .or_insert_with(|| Window::new(SUMMARY_WINDOW_MS, SUMMARY_AGE_BUCKETS, 0))
            .recent(now_ms, &total);
        let mut summary = Summary::default();
        summary.set_sample_count(total.count());
        summary.set_sample_sum(total.sum as f64 / 1000.0);
        summary.set_quantile(
            quantiles
                .iter()
                .map(|q| {
                    let mut quantile = Quantile::default();
                    quantile.set_quantile(*q);
                    quantile.set_value(
                        recent
                            .quantile(*q)
                            .map_or(f64::NAN, |us| us as f64 / 1000.0),
                    );
                    quantile
                })
                .collect::<Vec<_>>()
                .into(),
        );
        let mut metric = Metric::default();
        metric.set_summary(summary);
        out.push(name, &[], metric);
    }

    /// What exists from the first moment: the server's own counters.
    fn collect_server(&self, out: &mut Collected) {
        let stats = &self.stats;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as f64;
        out.gauge("uptime", stats.uptime_ms() as f64);
        out.gauge(
            "keel_serving",
            stats.caught_up.load(Ordering::Relaxed) as u8 as f64,
        );
        out.counter("connection_rejected", &[], load(&stats.connection_rejected));
        out.counter(
            "unrecoverable_error_count",
            &[],
            load(&stats.unrecoverable_errors),
        );
        self.summary(
            out,
            "startup_snap_load_time",
            stats.startup_snapshot_load_us.snapshot(),
        );
        self.summary(
            out,
            "startup_txns_load_time",
            stats.startup_log_replay_us.snapshot(),
        );
        self.summary(out, "propagation_latency", stats.propagation_us.snapshot());
        self.collect_requests(out);
    }

    /// Per operation: requests received and answered requests' latencies;
    /// ZooKeeper's readlatency and updatelatency are the reads' and the
    /// writes' merged (sync counts as a read, as in ZooKeeper, where it
    /// carries no transaction).
    fn collect_requests(&self, out: &mut Collected) {
        let (mut reads, mut writes) = (Snapshot::empty(), Snapshot::empty());
        for op in Op::all() {
            let received = self.stats.received(op);
            let latency = self.stats.latency_of(op).snapshot();
            if received == 0 && latency.count() == 0 {
                continue;
            }
            let labels = [("op", op.name())];
            out.counter("keel_requests_total", &labels, received as f64);
            if latency.count() > 0 {
                out.duration_histogram("keel_request_latency_seconds", &labels, &latency);
            }
            let write = op.opcode().is_some_and(|code| {
                crate::fifo::is_write_op(code) && code != keel_jute::opcode::SYNC
            });
            if write {
                writes.merge(&latency);
            } else {
                reads.merge(&latency);
            }
        }
        self.summary(out, "readlatency", reads);
        self.summary(out, "updatelatency", writes);
    }

    /// What the node holds once it runs: the tree's gauges (the ones mntr
    /// prints) and the Raft side's measurements.
    fn collect_node(&self, shared: &Shared, out: &mut Collected) {
        let g = shared.gauges();
        for (name, value) in [
            ("znode_count", g.znode_count as f64),
            ("watch_count", g.watch_count as f64),
            ("ephemerals_count", g.ephemerals_count as f64),
            ("approximate_data_size", g.approximate_data_size as f64),
            ("num_alive_connections", g.num_alive_connections as f64),
            ("outstanding_requests", g.outstanding_requests as f64),
            ("packets_received", g.packets_received as f64),
            ("packets_sent", g.packets_sent as f64),
            ("global_sessions", g.global_sessions as f64),
            ("local_sessions", g.local_sessions as f64),
            ("avg_latency", g.avg_latency_ms),
            ("min_latency", g.min_latency_ms as f64),
            ("max_latency", g.max_latency_ms as f64),
            (
                "open_file_descriptor_count",
                g.open_file_descriptor_count as f64,
            ),
            (
                "max_file_descriptor_count",
                g.max_file_descriptor_count as f64,
            ),
            (
                "keel_snapshot_preimage_bytes",
                g.snapshot_preimage_bytes as f64,
            ),
            ("keel_tree_bytes", g.tree_bytes as f64),
            ("keel_last_zxid", g.last_zxid as f64),
        ] {
            out.gauge(name, value);
        }
        self.collect_raft(&shared.raft().status, out);
    }

    fn collect_raft(&self, status: &keel_consensus::RaftStatus, out: &mut Collected) {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let (commit, applied) = (load(&status.commit_index), load(&status.applied_index));
        for (name, value) in [
            ("keel_raft_term", load(&status.term)),
            ("keel_raft_leader_id", load(&status.leader_id)),
            ("keel_raft_commit_index", commit),
            ("keel_raft_applied_index", applied),
            ("keel_raft_last_index", load(&status.last_index)),
            ("keel_raft_apply_lag", commit.saturating_sub(applied)),
            (
                "keel_snapshot_last_bytes",
                load(&status.snapshot_last_bytes),
            ),
        ] {
            out.gauge(name, value as f64);
        }
        out.gauge(
            "keel_raft_is_leader",
            status.is_leader.load(Ordering::Relaxed) as u8 as f64,
        );
        out.gauge(
            "keel_log_write_paused",
            status.log_write_paused.load(Ordering::Relaxed) as u8 as f64,
        );
        out.gauge(
            "keel_snapshot_last_duration_seconds",
            load(&status.snapshot_last_ms) as f64 / 1000.0,
        );
        out.gauge(
            "keel_write_linger_seconds",
            load(&status.linger_us) as f64 / 1_000_000.0,
        );
        for (name, counter) in [
            ("commit_count", &status.commits),
            ("snap_count", &status.snapshots_sent),
            ("looking_count", &status.elections_started),
            ("keel_raft_fsyncs_total", &status.fsyncs),
            ("keel_raft_proposals_total", &status.proposals),
            ("keel_raft_batches_total", &status.batches),
            ("keel_snapshots_taken_total", &status.snapshots_taken),
            ("keel_log_write_pauses_total", &status.log_write_pauses),
        ] {
            out.counter(name, &[], load(counter) as f64);
        }
        let summaries: [(&'static str, &Histogram); 4] = [
            ("fsynctime", &status.fsync_us),
            ("snapshottime", &status.snapshot_write_us),
            ("election_time", &status.election_us),
            ("quorum_ack_latency", &status.quorum_ack_us),
        ];
        for (name, histogram) in summaries {
            self.summary(out, name, histogram.snapshot());
        }
        out.count_histogram(
            "keel_group_commit_batch_proposals",
            &status.batch_proposals.snapshot(),
        );
        out.duration_histogram(
            "keel_heartbeat_rtt_seconds",
            &[],
            &status.heartbeat.histogram().snapshot(),
        );
        out.duration_histogram(
            "keel_snapshot_duration_seconds",
            &[],
            &status.snapshot_write_us.snapshot(),
        );
    }
}

/// The lock profiler's matrix (`lcks`), when it is on.
fn collect_lock_profile(out: &mut Collected) {
    for row in profile::rows() {
        let labels = [("lock", row.lock), ("op", row.op)];
        out.counter("keel_lock_acquisitions_total", &labels, row.count as f64);
        out.counter(
            "keel_lock_wait_seconds_total",
            &labels,
            row.wait_ns as f64 / 1e9,
        );
        out.counter(
            "keel_lock_hold_seconds_total",
            &labels,
            row.hold_ns as f64 / 1e9,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_jute::opcode;

    fn exporter(stats: Arc<Stats>) -> Exporter {
        // No node yet: what a server serves while it loads its data.
        let (_publish, node) = watch::channel(None);
        Exporter::new(stats, node)
    }

    fn lines(text: &str) -> Vec<&str> {
        text.lines().collect()
    }

    #[test]
    fn a_loading_server_serves_its_own_counters_in_zookeepers_format() {
        let stats = Arc::new(Stats::default());
        stats.connection_rejected.fetch_add(3, Ordering::Relaxed);
        let text = exporter(stats.clone()).render();
        let lines = lines(&text);
        // ZooKeeper 3.8's counters carry no _total; an empty summary's
        // quantiles are NaN, as Prometheus's Java client reports them.
        for expected in [
            "# TYPE connection_rejected counter",
            "connection_rejected 3",
            "unrecoverable_error_count 0",
            "# TYPE startup_snap_load_time summary",
            "startup_snap_load_time{quantile=\"0.5\"} NaN",
            "startup_snap_load_time_count 0",
            "readlatency{quantile=\"0.99\"} NaN",
            "keel_serving 0",
            "local_sessions 0",
        ] {
            assert!(lines.contains(&expected), "{expected:?} missing in\n{text}");
        }
        assert!(
            !text.contains("znode_count"),
            "no tree before the node runs"
        );
        stats.startup_snapshot_load_us.record(2_500);
        let text = exporter(stats).render();
        assert!(
            text.contains("startup_snap_load_time{quantile=\"0.5\"} 2.5\n"),
            "{text}"
        );
        assert!(text.contains("startup_snap_load_time_sum 2.5\n"), "{text}");
    }

    #[test]
    fn reads_and_writes_are_merged_into_zookeepers_latency_summaries() {
        let stats = Arc::new(Stats::default());
        for (op_code, micros) in [
            (opcode::GET_DATA, 1_000),
            (opcode::GET_DATA, 2_000),
            // sync carries no transaction: a read in ZooKeeper's terms.
            (opcode::SYNC, 3_000),
            (opcode::CREATE, 4_000),
        ] {
            stats.count_received(Op::of_opcode(op_code));
            stats.record_request(op_code, micros);
        }
        let text = exporter(stats).render();
        let lines = lines(&text);
        for expected in [
            "readlatency_count 3",
            "readlatency_sum 6",
            "updatelatency_count 1",
            "updatelatency_sum 4",
            "updatelatency{quantile=\"0.5\"} 4",
            "keel_requests_total{op=\"getData\"} 2",
            "keel_requests_total{op=\"create\"} 1",
            "keel_request_latency_seconds_count{op=\"getData\"} 2",
            "keel_request_latency_seconds_bucket{op=\"getData\",le=\"0.001024\"} 1",
            "keel_request_latency_seconds_bucket{op=\"getData\",le=\"+Inf\"} 2",
        ] {
            assert!(lines.contains(&expected), "{expected:?} missing in\n{text}");
        }
        assert!(
            !text.contains("op=\"exists\""),
            "operations never seen are left out"
        );
    }

    #[test]
    fn only_get_and_head_of_the_metrics_path_are_served() {
        let exporter = exporter(Arc::new(Stats::default()));
        let ok = exporter.respond(&Method::GET, "/metrics");
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()[CONTENT_TYPE], CONTENT_TYPE_TEXT);
        assert_eq!(
            exporter.respond(&Method::HEAD, "/metrics").status(),
            StatusCode::OK
        );
        assert_eq!(
            exporter.respond(&Method::GET, "/").status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            exporter.respond(&Method::POST, "/elsewhere").status(),
            StatusCode::NOT_FOUND
        );
        let post = exporter.respond(&Method::POST, "/metrics");
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(post.headers()[ALLOW], "GET, HEAD");
    }

    #[test]
    fn every_family_has_a_kind_its_samples_match() {
        for family in FAMILIES {
            let unit_suffix = family.name.ends_with("_seconds")
                || family.name.ends_with("_bytes")
                || family.name.ends_with("_total");
            if family.name.starts_with("keel_") && matches!(family.kind, Kind::Counter) {
                assert!(family.name.ends_with("_total"), "{}", family.name);
            }
            if let Kind::Histogram = family.kind {
                assert!(
                    unit_suffix || family.name.ends_with("_proposals"),
                    "{}",
                    family.name
                );
            }
        }
        let names: std::collections::HashSet<_> = FAMILIES.iter().map(|f| f.name).collect();
        assert_eq!(names.len(), FAMILIES.len(), "names are distinct");
    }
}
