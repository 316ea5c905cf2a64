//! What a run measured: the summary printed at the end, the CSV row and
//! the SVG plot.

use std::fmt;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::svg::{self, trim};
use crate::workload::{OpKind, Workload};
use crate::BenchError;

/// The CSV header `--csv` writes to a new (or empty) file. `tps` counts
/// successful operations per second; latencies are µs; `error_rate` is
/// errors / ops (a fraction, not a percentage).
pub const CSV_HEADER: &str = "unix_time,workload,clients,in_flight,value_size,duration_s,\
elapsed_s,ops,errors,tps,avg_us,p50_us,p90_us,p99_us,p999_us,max_us,error_rate";

/// Latency of the successful operations, in µs, from the run's HDR
/// histogram (3 significant digits; percentiles are the highest value
/// equivalent to the bucket, so p50 <= p90 <= … <= max always holds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencySummary {
    pub avg_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl LatencySummary {
    pub(crate) fn of(h: &Histogram<u64>) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary {
                avg_us: 0.0,
                p50_us: 0,
                p90_us: 0,
                p99_us: 0,
                p999_us: 0,
                max_us: 0,
            };
        }
        LatencySummary {
            avg_us: h.mean(),
            p50_us: h.value_at_quantile(0.5),
            p90_us: h.value_at_quantile(0.9),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

/// The outcome of [`crate::run`].
#[derive(Debug, Clone)]
pub struct BenchReport {
    pub workload: Workload,
    pub servers: Vec<String>,
    pub clients: usize,
    pub in_flight: usize,
    pub value_size: usize,
    pub seed: u64,
    /// The bench root the run used (deleted again unless `cleanup_error`
    /// or `kept_tree`).
    pub root: String,
    /// The configured timed phase.
    pub duration: Duration,
    /// From the start of the timed phase until the last lane's last reply.
    pub elapsed: Duration,
    /// successes + errors.
    pub ops: u64,
    pub successes: u64,
    pub errors: u64,
    /// Successful operations per second of `elapsed`.
    pub tps: f64,
    pub latency: LatencySummary,
    /// Operations issued per kind (successes and errors).
    pub ops_by_kind: Vec<(OpKind, u64)>,
    /// "op: error" and how often it happened.
    pub error_kinds: Vec<(String, u64)>,
    /// Successful operations in each second of the timed phase (replies
    /// that arrive after the last full second count in the last entry).
    pub per_second: Vec<u64>,
    /// Errors in each second, aligned with `per_second`.
    pub per_second_errors: Vec<u64>,
    /// Latencies of the successful operations in µs.
    pub histogram: Histogram<u64>,
    /// Connecting the sessions and building the tree.
    pub setup: Duration,
    /// Nodes deleted by the cleanup, and how long it took.
    pub cleaned_nodes: u64,
    pub cleanup: Duration,
    /// Why the bench root could not be deleted, if it could not.
    pub cleanup_error: Option<String>,
    /// The run was told to leave its tree (`--no-cleanup`).
    pub kept_tree: bool,
}

impl BenchReport {
    /// errors / ops (0 when nothing ran).
    pub fn error_rate(&self) -> f64 {
        if self.ops == 0 {
            0.0
        } else {
            self.errors as f64 / self.ops as f64
        }
    }

    /// One CSV line (no newline) in the order of [`CSV_HEADER`].
    pub fn csv_row(&self) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let l = &self.latency;
        format!(
            "{now},{},{},{},{},{},{:.3},{},{},{:.1},{:.1},{},{},{},{},{},{:.6}",
            self.workload,
            self.clients,
            self.in_flight,
            self.value_size,
            trim(self.duration.as_secs_f64(), 3),
            self.elapsed.as_secs_f64(),
            self.ops,
            self.errors,
            self.tps,
            l.avg_us,
            l.p50_us,
            l.p90_us,
            l.p99_us,
            l.p999_us,
            l.max_us,
            self.error_rate()
        )
    }

    /// Appends [`Self::csv_row`] to `path`, first writing [`CSV_HEADER`]
    /// if the file is new or empty.
    pub fn append_csv(&self, path: &Path) -> Result<(), BenchError> {
        let io = |source| BenchError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        let mut out = String::new();
        if file.metadata().map_err(io)?.len() == 0 {
            out.push_str(CSV_HEADER);
            out.push('\n');
        }
        out.push_str(&self.csv_row());
        out.push('\n');
        file.write_all(out.as_bytes()).map_err(io)
    }

    /// The two-panel SVG (throughput per second, latency percentiles).
    pub fn svg(&self) -> String {
        svg::render(self)
    }

    /// Writes [`Self::svg`] to `path`.
    pub fn write_svg(&self, path: &Path) -> Result<(), BenchError> {
        std::fs::write(path, self.svg()).map_err(|source| BenchError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

impl fmt::Display for BenchReport {
    /// The end-of-run summary, one `name value` pair per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = &self.latency;
        writeln!(f, "workload        {}", self.workload)?;
        writeln!(f, "servers         {}", self.servers.join(","))?;
        writeln!(
            f,
            "clients         {} ({} in flight each)",
            self.clients, self.in_flight
        )?;
        writeln!(f, "value size      {} bytes", self.value_size)?;
        writeln!(
            f,
            "duration        {} s (measured {:.3} s)",
            trim(self.duration.as_secs_f64(), 3),
            self.elapsed.as_secs_f64()
        )?;
        writeln!(f, "ops             {}", self.ops)?;
        writeln!(f, "errors          {}", self.errors)?;
        writeln!(f, "TPS             {:.1}", self.tps)?;
        writeln!(f, "avg latency     {:.1} µs", l.avg_us)?;
        writeln!(f, "p50 latency     {} µs", l.p50_us)?;
        writeln!(f, "p90 latency     {} µs", l.p90_us)?;
        writeln!(f, "p99 latency     {} µs", l.p99_us)?;
        writeln!(f, "p99.9 latency   {} µs", l.p999_us)?;
        writeln!(f, "max latency     {} µs", l.max_us)?;
        writeln!(f, "error rate      {:.3} %", self.error_rate() * 100.0)?;
        let kinds: Vec<String> = self
            .ops_by_kind
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        write!(f, "ops by kind     {}", kinds.join(", "))?;
        for (kind, n) in &self.error_kinds {
            write!(f, "\nerror           {n} × {kind}")?;
        }
        if let Some(e) = &self.cleanup_error {
            write!(f, "\ncleanup failed  {e}")?;
        }
        if self.kept_tree {
            write!(f, "\ntree kept       {} (--no-cleanup)", self.root)?;
        }
        Ok(())
    }
}
