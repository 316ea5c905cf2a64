//! The `populate` workload: fills a server with `znodes` persistent znodes
//! under [`POPULATE_ROOT`] through pipelined multi batches and leaves them
//! there (for memory, snapshot and restart measurements at scale).
//!
//! Layout: the znodes are numbered 0..N in breadth-first order of a
//! complete `fanout`-ary tree whose root is [`POPULATE_ROOT`] itself:
//! znodes 0..fanout are its children, and the children of znode `j` are
//! `(j + 1) × fanout .. (j + 2) × fanout`. A znode's name is its position
//! among its siblings (`i % fanout`), so with fanout 1,000:
//!
//! ```text
//! /keel-populate/7            znode 7
//! /keel-populate/7/15         znode 8 × 1000 + 15 = 8015
//! /keel-populate/7/15/999     znode 8016 × 1000 + 999 = 8016999
//! ```
//!
//! Parents count within N: every znode below [`POPULATE_ROOT`] is one of
//! the N (all hold `value_size` bytes), so afterwards
//! `getAllChildrenNumber(/keel-populate)` is exactly N. No znode has more
//! than `fanout` children. The root must not exist beforehand: a populate
//! never resumes or adds to an earlier one (it refuses with
//! [`BenchError::PopulateExists`]).
//!
//! A depth level is created only after the level above it is complete;
//! within a level, consecutive index ranges of at most [`MULTI_MAX_OPS`]
//! creates (and [`MULTI_MAX_BYTES`] encoded) go out as one multi each,
//! `sessions × in_flight` multis in flight at once.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keel_client::jute::CreateRequest;
use keel_client::{multi_error, open_acl_unsafe, Acl, Client, ClientError, ErrorCode, MultiOp};
use tokio::time::Instant;

use crate::{close_all, connect, parse_servers, ticking, tree, value_bytes, BenchError};

/// Where the populated tree lives.
pub const POPULATE_ROOT: &str = "/keel-populate";
/// Children per parent when `--fanout` is not given.
pub const DEFAULT_FANOUT: u64 = 1_000;
/// Smallest `--fanout` (1 would make a chain N levels deep).
pub const MIN_FANOUT: u64 = 2;
/// Largest `--fanout`: the getChildren reply of a full parent must stay
/// well under ZooKeeper's jute.maxbuffer (1 MiB).
pub const MAX_FANOUT: u64 = 10_000;
/// Most znodes one populate creates (getAllChildrenNumber is an i32).
pub const MAX_POPULATE_ZNODES: u64 = 1_000_000_000;
/// Largest `--value-size` for populate: a create must fit in a multi
/// (see [`MULTI_MAX_BYTES`]).
pub const MAX_POPULATE_VALUE_SIZE: usize = 64 * 1024;
/// Most creates in one multi.
pub const MULTI_MAX_OPS: usize = 1_000;
/// Most encoded bytes of one multi request: a quarter of ZooKeeper's
/// default jute.maxbuffer (0xfffff), so a multi never comes near it.
pub const MULTI_MAX_BYTES: usize = 256 * 1024;
/// Encoded bytes of one create in a multi besides its path and data: the
/// multi header (type, done, err: 9), path and data length prefixes (8),
/// the open ACL (4 + 27) and the flags (4), rounded up.
pub const MULTI_OP_OVERHEAD_BYTES: usize = 64;
/// Sessions a populate opens when `--clients` is not given.
pub const DEFAULT_POPULATE_SESSIONS: usize = 4;
/// Multis each session keeps in flight when `--in-flight` is not given.
pub const DEFAULT_POPULATE_IN_FLIGHT: usize = 4;
/// Most sessions, and most multis in flight per session.
pub const MAX_POPULATE_SESSIONS: usize = 64;
pub const MAX_POPULATE_IN_FLIGHT: usize = 64;

/// What to populate. Build with [`PopulateConfig::new`]; [`populate`]
/// validates it.
#[derive(Debug, Clone)]
pub struct PopulateConfig {
    pub servers: Vec<String>,
    /// Znodes to create below [`POPULATE_ROOT`] (parents included).
    pub znodes: u64,
    /// Bytes of every znode's data.
    pub value_size: usize,
    /// Most children per parent.
    pub fanout: u64,
    /// Sessions the multis are spread over (round-robin).
    pub sessions: usize,
    /// Multis each session keeps in flight.
    pub in_flight: usize,
    /// Connect over TLS (every server is a secure client port).
    pub tls: Option<keel_client::ClientTls>,
}

impl PopulateConfig {
    /// `znodes` znodes with the default value size, fanout, sessions and
    /// in-flight multis; `servers` is comma-separated.
    pub fn new(servers: &str, znodes: u64) -> Result<PopulateConfig, BenchError> {
        Ok(PopulateConfig {
            servers: parse_servers(servers)?,
            znodes,
            value_size: crate::DEFAULT_VALUE_SIZE,
            fanout: DEFAULT_FANOUT,
            sessions: DEFAULT_POPULATE_SESSIONS,
            in_flight: DEFAULT_POPULATE_IN_FLIGHT,
            tls: None,
        })
    }

    /// Checks every bound; the error names the offending setting.
    pub fn validate(&self) -> Result<(), BenchError> {
        let invalid = |m: String| Err(BenchError::Invalid(m));
        if self.servers.is_empty() {
            return invalid("no server given (--servers HOST:PORT[,HOST:PORT...])".into());
        }
        if self.znodes == 0 || self.znodes > MAX_POPULATE_ZNODES {
            return invalid(format!(
                "znodes must be 1..={MAX_POPULATE_ZNODES}, got {}",
                self.znodes
            ));
        }
        if !(MIN_FANOUT..=MAX_FANOUT).contains(&self.fanout) {
            return invalid(format!(
                "fanout must be {MIN_FANOUT}..={MAX_FANOUT}, got {}",
                self.fanout
            ));
        }
        if self.value_size > MAX_POPULATE_VALUE_SIZE {
            return invalid(format!(
                "value-size must be at most {MAX_POPULATE_VALUE_SIZE} bytes for populate, got {}",
                self.value_size
            ));
        }
        if self.sessions == 0 || self.sessions > MAX_POPULATE_SESSIONS {
            return invalid(format!(
                "clients must be 1..={MAX_POPULATE_SESSIONS} for populate, got {}",
                self.sessions
            ));
        }
        if self.in_flight == 0 || self.in_flight > MAX_POPULATE_IN_FLIGHT {
            return invalid(format!(
                "in-flight must be 1..={MAX_POPULATE_IN_FLIGHT} for populate, got {}",
                self.in_flight
            ));
        }
        Ok(())
    }

    fn shape(&self) -> Shape {
        Shape {
            znodes: self.znodes,
            fanout: self.fanout,
        }
    }

    /// Creates per multi: [`MULTI_MAX_OPS`], fewer when long paths or big
    /// values would make the multi exceed [`MULTI_MAX_BYTES`].
    pub fn ops_per_multi(&self) -> usize {
        let op_bytes = MULTI_OP_OVERHEAD_BYTES + self.shape().max_path_len() + self.value_size;
        (MULTI_MAX_BYTES / op_bytes).clamp(1, MULTI_MAX_OPS)
    }
}

/// The numbering of the populated tree (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub znodes: u64,
    pub fanout: u64,
}

impl Shape {
    /// Path of znode `index` (0-based).
    pub fn path(&self, index: u64) -> String {
        let mut names = Vec::new();
        let mut i = index;
        loop {
            names.push(i % self.fanout);
            if i < self.fanout {
                break;
            }
            i = i / self.fanout - 1;
        }
        let mut path = String::from(POPULATE_ROOT);
        for name in names.iter().rev() {
            path.push('/');
            path.push_str(&name.to_string());
        }
        path
    }

    /// Index ranges of the depth levels, top first; each is complete
    /// before the next starts.
    pub fn levels(&self) -> Vec<std::ops::Range<u64>> {
        let mut levels = Vec::new();
        let (mut start, mut width) = (0u64, self.fanout);
        while start < self.znodes {
            let end = start.saturating_add(width).min(self.znodes);
            levels.push(start..end);
            start = end;
            width = width.saturating_mul(self.fanout);
        }
        levels
    }

    /// Length of the longest path (the deepest level's, names at most
    /// `fanout - 1`).
    pub fn max_path_len(&self) -> usize {
        let digits = (self.fanout - 1).to_string().len();
        POPULATE_ROOT.len() + self.levels().len() * (1 + digits)
    }

    /// Path of the last znode created (the highest index).
    pub fn last_path(&self) -> String {
        self.path(self.znodes - 1)
    }
}

/// A populate's periodic progress line, `Display`ed by `keel bench` on
/// stderr.
#[derive(Debug, Clone, PartialEq)]
pub struct PopulateProgress {
    pub elapsed: Duration,
    pub created: u64,
    pub total: u64,
    /// Znodes created per second since the previous line.
    pub rate_per_sec: u64,
}

impl fmt::Display for PopulateProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let percent = self.created as f64 * 100.0 / self.total.max(1) as f64;
        write!(
            f,
            "populate {:>7.1} s: {}/{} znodes created ({percent:.1} %), {} znodes/s",
            self.elapsed.as_secs_f64(),
            self.created,
            self.total,
            self.rate_per_sec
        )
    }
}

/// The outcome of [`populate`]. `Display` is the final line,
/// `populated N znodes in S s`.
#[derive(Debug, Clone)]
pub struct PopulateReport {
    /// Znodes created below [`POPULATE_ROOT`] (parents included).
    pub znodes: u64,
    /// getAllChildrenNumber of [`POPULATE_ROOT`] after the run (equal to
    /// `znodes`, or [`populate`] fails).
    pub counted: u64,
    /// From the first connect until the last multi's reply.
    pub elapsed: Duration,
    /// Path of the last znode created.
    pub last_path: String,
    pub multis: u64,
}

impl fmt::Display for PopulateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "populated {} znodes in {:.1} s",
            self.znodes,
            self.elapsed.as_secs_f64()
        )
    }
}

/// Runs a populate on a runtime of its own (not from inside a Tokio
/// runtime).
pub fn populate(
    config: PopulateConfig,
    mut progress: impl FnMut(&PopulateProgress),
) -> Result<PopulateReport, BenchError> {
    populate_blocking(config, &mut progress)
}

/// `populate`, not generic: compiled once, in this crate, not again in
/// every crate that calls `populate`.
fn populate_blocking(
    config: PopulateConfig,
    progress: &mut dyn FnMut(&PopulateProgress),
) -> Result<PopulateReport, BenchError> {
    config.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("keel-populate")
        .build()
        .map_err(BenchError::Runtime)?;
    runtime.block_on(populate_dyn(config, progress))
}

/// [`populate`] on the caller's runtime.
pub async fn populate_async(
    config: PopulateConfig,
    mut progress: impl FnMut(&PopulateProgress),
) -> Result<PopulateReport, BenchError> {
    populate_dyn(config, &mut progress).await
}

/// `populate_async`, not generic: `populate` blocks on it here, so a crate
/// that calls `populate` compiles none of it again (one that awaits
/// `populate_async` still does).
async fn populate_dyn(
    config: PopulateConfig,
    progress: &mut dyn FnMut(&PopulateProgress),
) -> Result<PopulateReport, BenchError> {
    config.validate()?;
    let started = Instant::now();
    let admin = connect(&config.servers[0], config.tls.as_ref()).await?;
    let created_root = create_root(&admin).await;
    let _ = admin.close().await;
    created_root?;
    let result = async {
        let mut sessions = Vec::with_capacity(config.sessions);
        for i in 0..config.sessions {
            match connect(
                &config.servers[i % config.servers.len()],
                config.tls.as_ref(),
            )
            .await
            {
                Ok(c) => sessions.push(c),
                Err(e) => {
                    close_all(sessions).await;
                    return Err(e);
                }
            }
        }
        let created = Arc::new(AtomicU64::new(0));
        let mut last = (Duration::ZERO, 0u64);
        let outcome = ticking(create_all(&config, &sessions, &created), |elapsed| {
            let now = created.load(Ordering::Relaxed);
            let secs = (elapsed - last.0).as_secs_f64().max(1e-3);
            let rate_per_sec = ((now - last.1) as f64 / secs).round() as u64;
            last = (elapsed, now);
            progress(&PopulateProgress {
                elapsed: started.elapsed(),
                created: now,
                total: config.znodes,
                rate_per_sec,
            });
        })
        .await;
        close_all(sessions).await;
        let multis = outcome?;
        let elapsed = started.elapsed();
        // A fresh session counts: one left idle through a long load would
        // only test its pings.
        let checker = connect(&config.servers[0], config.tls.as_ref()).await?;
        let counted = count(&checker).await;
        let _ = checker.close().await;
        let counted = counted?;
        if counted != config.znodes {
            return Err(BenchError::PopulateCount {
                root: POPULATE_ROOT.into(),
                expected: config.znodes,
                counted,
            });
        }
        Ok(PopulateReport {
            znodes: config.znodes,
            counted,
            elapsed,
            last_path: config.shape().last_path(),
            multis,
        })
    }
    .await;
    result
}

fn prepare_error(path: &str, source: ClientError) -> BenchError {
    BenchError::Prepare {
        root: POPULATE_ROOT.into(),
        path: path.into(),
        source,
    }
}

/// Creates the (empty) root; an existing one is refused with its count.
async fn create_root(admin: &Client) -> Result<(), BenchError> {
    let acl = open_acl_unsafe();
    match admin
        .create(
            POPULATE_ROOT,
            &[],
            &acl,
            keel_client::CreateMode::Persistent,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(ClientError::Zk(ErrorCode::NodeExists)) => Err(BenchError::PopulateExists {
            root: POPULATE_ROOT.into(),
            existing: count(admin).await?,
        }),
        Err(e) => Err(prepare_error(POPULATE_ROOT, e)),
    }
}

/// getAllChildrenNumber of the root, after a sync (the multis may have
/// gone to other servers).
async fn count(admin: &Client) -> Result<u64, BenchError> {
    admin
        .sync(POPULATE_ROOT)
        .await
        .map_err(|e| prepare_error(POPULATE_ROOT, e))?;
    let n = admin
        .get_all_children_number(POPULATE_ROOT)
        .await
        .map_err(|e| prepare_error(POPULATE_ROOT, e))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Creates every level's znodes; returns the number of multis sent.
async fn create_all(
    config: &PopulateConfig,
    sessions: &[Client],
    created: &Arc<AtomicU64>,
) -> Result<u64, BenchError> {
    let shape = config.shape();
    let per_multi = config.ops_per_multi() as u64;
    let value: Arc<[u8]> = Arc::from(value_bytes(config.value_size));
    let acl: Arc<Vec<Acl>> = Arc::new(open_acl_unsafe());
    let concurrency = sessions.len() * config.in_flight;
    let mut multis = 0u64;
    for level in shape.levels() {
        let batches: Vec<(std::ops::Range<u64>, Client)> = (level.start..level.end)
            .step_by(per_multi as usize)
            .enumerate()
            .map(|(n, start)| {
                let end = (start + per_multi).min(level.end);
                (start..end, sessions[n % sessions.len()].clone())
            })
            .collect();
        multis += batches.len() as u64;
        tree::parallel(batches, concurrency, |(range, client)| {
            let (value, acl, created) = (value.clone(), acl.clone(), created.clone());
            async move { create_batch(&client, shape, range, &value, &acl, &created).await }
        })
        .await?;
    }
    Ok(multis)
}

/// One multi creating the znodes of `range`.
async fn create_batch(
    client: &Client,
    shape: Shape,
    range: std::ops::Range<u64>,
    value: &[u8],
    acl: &[Acl],
    created: &AtomicU64,
) -> Result<(), BenchError> {
    let first = shape.path(range.start);
    let ops: Vec<MultiOp> = range
        .clone()
        .map(|i| {
            MultiOp::Create(CreateRequest {
                path: shape.path(i),
                data: Some(value.to_vec()),
                acl: acl.to_vec(),
                flags: 0,
            })
        })
        .collect();
    let results = client
        .multi(ops)
        .await
        .map_err(|e| prepare_error(&first, e))?;
    if let Some(code) = multi_error(&results) {
        return Err(prepare_error(&first, ClientError::from_code(code)));
    }
    created.fetch_add(range.end - range.start, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(znodes: u64, fanout: u64) -> Shape {
        Shape { znodes, fanout }
    }

    #[test]
    fn paths_follow_the_breadth_first_numbering() {
        let s = shape(10_000_000, 1_000);
        assert_eq!(s.path(0), "/keel-populate/0");
        assert_eq!(s.path(999), "/keel-populate/999");
        assert_eq!(s.path(1_000), "/keel-populate/0/0");
        assert_eq!(s.path(8_015), "/keel-populate/7/15");
        assert_eq!(s.path(8_016_999), "/keel-populate/7/15/999");
        assert_eq!(s.last_path(), "/keel-populate/8/998/999");
    }

    #[test]
    fn every_parent_comes_earlier_and_levels_cover_everything() {
        let s = shape(5_000, 10);
        let levels = s.levels();
        assert_eq!(levels, vec![0..10, 10..110, 110..1_110, 1_110..5_000]);
        let mut seen = std::collections::HashMap::new();
        for (depth, level) in levels.iter().enumerate() {
            for i in level.clone() {
                let path = s.path(i);
                assert_eq!(path.matches('/').count(), depth + 2, "{path}");
                let parent = &path[..path.rfind('/').unwrap()];
                if parent != POPULATE_ROOT {
                    let p = seen.get(parent).copied();
                    assert!(p.is_some_and(|p| p < level.start), "{path}");
                }
                assert!(seen.insert(path, i).is_none());
            }
        }
        assert_eq!(seen.len(), 5_000);
        let longest = seen.keys().map(String::len).max().unwrap();
        assert!(longest <= s.max_path_len());
    }

    #[test]
    fn multis_stay_bounded() {
        let mut c = PopulateConfig::new("127.0.0.1:1", 10_000_000).unwrap();
        c.validate().unwrap();
        assert_eq!(c.ops_per_multi(), MULTI_MAX_OPS);
        c.value_size = MAX_POPULATE_VALUE_SIZE;
        c.validate().unwrap();
        let n = c.ops_per_multi();
        assert!(
            n >= 1 && n * (MAX_POPULATE_VALUE_SIZE + MULTI_OP_OVERHEAD_BYTES) <= MULTI_MAX_BYTES
        );
        c.value_size = MAX_POPULATE_VALUE_SIZE + 1;
        assert!(c.validate().unwrap_err().to_string().contains("value-size"));
        for (f, ok) in [
            (1, false),
            (2, true),
            (MAX_FANOUT, true),
            (MAX_FANOUT + 1, false),
        ] {
            let mut c = PopulateConfig::new("127.0.0.1:1", 10).unwrap();
            c.fanout = f;
            assert_eq!(c.validate().is_ok(), ok, "fanout {f}");
        }
        let mut c = PopulateConfig::new("127.0.0.1:1", 0).unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("znodes"));
        c.znodes = 1;
        c.sessions = 0;
        assert!(c.validate().unwrap_err().to_string().contains("clients"));
    }

    #[test]
    fn lines_read_well() {
        let r = PopulateReport {
            znodes: 200_000,
            counted: 200_000,
            elapsed: Duration::from_millis(12_345),
            last_path: "/keel-populate/199/798".into(),
            multis: 201,
        };
        assert_eq!(r.to_string(), "populated 200000 znodes in 12.3 s");
        let p = PopulateProgress {
            elapsed: Duration::from_secs(2),
            created: 50_000,
            total: 200_000,
            rate_per_sec: 25_000,
        };
        let s = p.to_string();
        assert!(
            s.contains("50000/200000 znodes created (25.0 %)") && s.ends_with("25000 znodes/s")
        );
    }
}
