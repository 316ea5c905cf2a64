//! Server configuration: TOML keys, each also a command-line flag of
//! `keel server`; defaults follow ZooKeeper's.

use std::path::PathBuf;

use serde::Deserialize;

pub use crate::tls::ClientAuth;

/// ZooKeeper's default tickTime.
pub const DEFAULT_TICK_TIME_MS: u32 = 2_000;
pub const DEFAULT_CLIENT_PORT: u16 = 2181;
pub const DEFAULT_SNAPSHOT_EVERY_ENTRIES: u64 = 100_000;
/// Log bytes applied since the last snapshot that trigger the next one:
/// at ≥ 300k transactions/s of replay and ≈ 150 bytes a transaction, a
/// restart replays at most ≈ 1.5 s of log behind its snapshot.
pub const DEFAULT_SNAPSHOT_EVERY_LOG_BYTES: u64 = 64 << 20;
/// Smallest `snapshot_every_log_bytes` (a snapshot per few entries would
/// never finish before the next is due).
pub const SNAPSHOT_EVERY_LOG_BYTES_MIN: u64 = 1 << 20;
/// ZooKeeper's container manager runs once a minute by default.
pub const DEFAULT_CONTAINER_CHECK_INTERVAL_MS: u64 = 60_000;
/// Shortest and longest tick Keel accepts.
pub const TICK_TIME_MS_MIN: u32 = 10;
pub const TICK_TIME_MS_MAX: u32 = 60_000;
/// Bounds on jute.maxbuffer: at least a handshake, at most 256 MiB.
pub const JUTE_MAX_BUFFER_MIN: usize = 1024;
pub const JUTE_MAX_BUFFER_MAX: usize = 256 * 1024 * 1024;
/// Bounds on resp_max_bulk_bytes: at least a small value; at most what
/// one Raft entry holds (a longer argument could never be written).
pub const RESP_MAX_BULK_BYTES_MIN: usize = 1024;
pub const RESP_MAX_BULK_BYTES_MAX: usize = keel_consensus::proposal::PROPOSAL_BYTES_MAX;
/// Most threads `client_threads` may ask for.
pub const CLIENT_THREADS_MAX: usize = 1024;
/// Most shard threads `kv_shards` may ask for (each owns a share of Keel
/// KV's 16,384 slots).
pub const KV_SHARDS_MAX: usize = 256;
/// Most client connections the server holds at once (all addresses).
pub const CLIENT_CONNECTIONS_MAX: usize = 60_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub client_address: String,
    pub client_port: u16,
    pub data_dir: PathBuf,
    pub tick_time_ms: u32,
    /// 0 = ZooKeeper's default, 2 × tick.
    pub min_session_timeout_ms: u32,
    /// 0 = ZooKeeper's default, 20 × tick.
    pub max_session_timeout_ms: u32,
    /// "super:<base64 sha1>" as ZooKeeper's superDigest property.
    pub super_digest: Option<String>,
    /// Enabled four-letter words; ["*"] enables all.
    pub four_letter_words: Vec<String>,
    pub container_check_interval_ms: u64,
    pub snapshot_every_entries: u64,
    /// A snapshot is also taken once this many bytes of log were applied
    /// since the last one (bounds restart replay time).
    pub snapshot_every_log_bytes: u64,
    pub jute_max_buffer_bytes: usize,
    /// 0 = unlimited (ZooKeeper's 60 makes leaky clients hang).
    pub max_client_connections_per_ip: usize,
    /// This server's id (1..=255); a cluster gives each node its own.
    pub server_id: u64,
    /// Cluster members' peer addresses, "1=HOST:PORT,2=HOST:PORT,..."; this
    /// node's own entry is where it listens for peers. Empty = single node.
    /// An entry may add the member's client address as ZooKeeper's server
    /// string does (`1=HOST:PORT;CLIENTHOST:CLIENTPORT`, or `;CLIENTPORT`),
    /// shown in /zookeeper/config. Read only when the data dir is empty:
    /// later the members are the data dir's (membership changes).
    pub peers: String,
    /// Name of the cluster (part of its identity; members must agree).
    pub cluster_name: String,
    /// Leader affinity: id of the member that should lead when healthy (0 = none).
    pub preferred_leader: u64,
    /// Ids (listed in `peers`) of observers: members that serve reads and
    /// forward writes but do not vote (read scaling).
    pub observers: Vec<u64>,
    /// The lock × operation profiler (`lcks`; `profile.rs`). Off by default.
    pub profile_locks: bool,
    /// Threads of the runtime that serves client connections (0 = one per
    /// core but one: the Raft driver thread takes a core of its own).
    pub client_threads: usize,
    /// ZooKeeper's secureClientPort: a TLS client port beside the plain
    /// `client_port` (0 = off, the default). `client_port = 0` turns the
    /// plain port off; one of the two must be on.
    pub secure_client_port: u16,
    /// PEM certificate chain (leaf first) the TLS port presents; also the
    /// peers' identity when peer TLS is on.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// PEM CA certificates client (and peer) certificates must chain to.
    pub tls_ca_file: Option<PathBuf>,
    /// none | want | need (ZooKeeper's ssl.clientAuth; default need).
    pub tls_client_auth: ClientAuth,
    /// JAAS file whose `Server` section lists the SASL DIGEST-MD5 users
    /// (`user_<name>="<password>"`); unset = SASL not configured.
    pub sasl_users_file: Option<PathBuf>,
    /// Close every session's connection at its first request until it has
    /// authenticated with SASL (ZooKeeper's sessionRequireClientSASLAuth).
    pub require_sasl: bool,
    /// Every peer connection is TLS 1.3 with certificates checked against
    /// `tls_ca_file` on both sides (needs the three `tls_*_file`s).
    pub peer_tls: bool,
    /// A file holding the cluster's shared secret (at least 32 bytes):
    /// every peer connection proves it knows it (HMAC challenge-response).
    pub peer_secret_file: Option<PathBuf>,
    /// Port of the Prometheus endpoint (`GET /metrics`, metrics.rs); 0 =
    /// off, the default (as ZooKeeper's provider: several nodes on one
    /// machine must not fight over a port).
    pub metrics_port: u16,
    /// Address the Prometheus endpoint listens on.
    pub metrics_address: String,
    /// ZooKeeper's `readonlymode.enabled`: a cluster member that has known
    /// no leader for max(2 s, tick) serves read-only clients (the readOnly
    /// flag of their ConnectRequest) on local sessions, answering writes
    /// NotReadOnly, until a leader is back and it caught up (readonly.rs).
    /// Off by default, as in ZooKeeper; no effect on a single node.
    pub read_only_when_partitioned: bool,
    /// Membership changes through ZooKeeper's reconfig (opcode 16) are
    /// accepted (ZooKeeper's reconfigEnabled, false by default: reconfig
    /// answers ReconfigDisabled).
    pub reconfig_enabled: bool,
    /// Join a running cluster instead of bootstrapping one: client
    /// addresses of members ("HOST:PORT,..."), asked to add this node (needs
    /// `join_auth_file`; otherwise an operator adds it). Needs
    /// `peer_address` and no `peers`.
    pub join: String,
    /// With `join`: this node's peer address ("HOST:PORT"), where it listens
    /// and how the members reach it.
    pub peer_address: String,
    /// With `join`: a file holding "user:password" of a digest identity
    /// allowed to reconfigure (the super user), with which this node asks
    /// to be added.
    pub join_auth_file: Option<PathBuf>,
    /// Port of Keel KV, the Redis-protocol front end (RESP2/RESP3) on
    /// `client_address`; 0 = off, the default.
    pub resp_port: u16,
    /// The longest argument a KV request may carry (Redis's
    /// proto-max-bulk-len); a write must also fit in one Raft entry.
    pub resp_max_bulk_bytes: usize,
    /// Linearizable reads (Keel KV's, ZooKeeper's sync) are served by the
    /// leader from a read lease, renewed by ReadIndex rounds, instead of
    /// each waiting for a round of its own (on by default). The lease
    /// lasts 0.8 s from when its round was asked, within the 0.9 s a
    /// follower that answered refuses to vote for another leader. It
    /// assumes the members' clocks run at rates within 1/8 of each other;
    /// `read_lease = false` makes every read wait for a round instead.
    pub read_lease: bool,
    /// The Raft log's records are written with O_DIRECT, whole 4 KiB
    /// blocks past the page cache (on by default; a file system that
    /// refuses O_DIRECT gets buffered writes, logged once):
    /// `log_direct_io = false` writes through the page cache always.
    pub log_direct_io: bool,
    /// Keel KV's shard threads (each owns a share of the slots and serves
    /// connections); 0, the default, is one per core. A node's own choice:
    /// the snapshot is cut into this many shards when loaded.
    pub kv_shards: usize,
    /// Keel KV proposes a connection's pipelined writes as one log entry
    /// operation each turn (a `COMMANDS` batch, on by default).
    /// `kv_batch_writes = false` proposes every write alone, which a
    /// member of a release before batches (2026-12-06) can still apply:
    /// the setting for a rolling upgrade from such a release (README,
    /// "Rolling restarts").
    pub kv_batch_writes: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            client_address: "127.0.0.1".into(),
            client_port: DEFAULT_CLIENT_PORT,
            data_dir: PathBuf::from("./keel-data"),
            tick_time_ms: DEFAULT_TICK_TIME_MS,
            min_session_timeout_ms: 0,
            max_session_timeout_ms: 0,
            super_digest: None,
            four_letter_words: vec![
                "srvr".into(),
                "stat".into(),
                "ruok".into(),
                "mntr".into(),
                "conf".into(),
                "isro".into(),
                "envi".into(),
                "cons".into(),
                "wchs".into(),
                "dump".into(),
                "lcks".into(),
                "ftfl".into(),
            ],
            container_check_interval_ms: DEFAULT_CONTAINER_CHECK_INTERVAL_MS,
            snapshot_every_entries: DEFAULT_SNAPSHOT_EVERY_ENTRIES,
            snapshot_every_log_bytes: DEFAULT_SNAPSHOT_EVERY_LOG_BYTES,
            jute_max_buffer_bytes: keel_jute::frame::DEFAULT_MAX_FRAME_BYTES,
            max_client_connections_per_ip: 0,
            server_id: 1,
            peers: String::new(),
            cluster_name: "keel".into(),
            preferred_leader: 0,
            observers: Vec::new(),
            profile_locks: false,
            client_threads: 0,
            secure_client_port: 0,
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_file: None,
            tls_client_auth: ClientAuth::default(),
            sasl_users_file: None,
            require_sasl: false,
            peer_tls: false,
            peer_secret_file: None,
            metrics_port: 0,
            metrics_address: "127.0.0.1".into(),
            read_only_when_partitioned: false,
            reconfig_enabled: false,
            join: String::new(),
            peer_address: String::new(),
            join_auth_file: None,
            resp_port: 0,
            resp_max_bulk_bytes: keel_kv::resp::BULK_BYTES_MAX_DEFAULT,
            read_lease: true,
            log_direct_io: true,
            kv_shards: 0,
            kv_batch_writes: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl ServerConfig {
    pub fn from_file(path: &std::path::Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.into(),
            source,
        })
    }

    pub fn min_session_timeout(&self) -> u32 {
        if self.min_session_timeout_ms == 0 {
            2 * self.tick_time_ms
        } else {
            self.min_session_timeout_ms
        }
    }

    pub fn max_session_timeout(&self) -> u32 {
        if self.max_session_timeout_ms == 0 {
            20 * self.tick_time_ms
        } else {
            self.max_session_timeout_ms
        }
    }

    /// Threads for the client runtime: `client_threads`, or with 0 the
    /// cores of this machine but one (at least one). On a 2-core machine
    /// that is one thread: a second one only adds wake-ups between the two
    /// (measured: create x400 +12%, mix x100 +9% with one, 3 nodes on 2
    /// cores; BENCHMARKS.md). One thread runs a current-thread runtime
    /// (`bin/keel` `client_runtime`).
    pub fn client_threads(&self) -> usize {
        if self.client_threads > 0 {
            return self.client_threads;
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        cores.saturating_sub(1).max(1)
    }

    /// Keel KV's shard threads: `kv_shards`, or with 0 one per core. On
    /// the 2-core development VM, with redis-benchmark on the same cores,
    /// one shard served pipelined GETs 1.25-1.36x faster than two (half
    /// the reads hop to the other thread); other loads were even
    /// (BENCHMARKS.md).
    pub fn kv_shards(&self) -> usize {
        if self.kv_shards > 0 {
            return self.kv_shards;
        }
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(KV_SHARDS_MAX)
    }

    /// Rejects values ZooKeeper would reject or Keel cannot honour.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        if !(TICK_TIME_MS_MIN..=TICK_TIME_MS_MAX).contains(&self.tick_time_ms) {
            return invalid(format!(
                "tick_time_ms {} outside {TICK_TIME_MS_MIN}..={TICK_TIME_MS_MAX}",
                self.tick_time_ms
            ));
        }
        if self.min_session_timeout() > self.max_session_timeout() {
            return invalid(format!(
                "min_session_timeout_ms {} > max_session_timeout_ms {}",
                self.min_session_timeout(),
                self.max_session_timeout()
            ));
        }
        if !(JUTE_MAX_BUFFER_MIN..=JUTE_MAX_BUFFER_MAX).contains(&self.jute_max_buffer_bytes) {
            return invalid(format!(
                "jute_max_buffer_bytes {} outside {JUTE_MAX_BUFFER_MIN}..={JUTE_MAX_BUFFER_MAX}",
                self.jute_max_buffer_bytes
            ));
        }
        if self.client_threads > CLIENT_THREADS_MAX {
            return invalid(format!(
                "client_threads {} is above {CLIENT_THREADS_MAX}",
                self.client_threads
            ));
        }
        if self.kv_shards > KV_SHARDS_MAX {
            return invalid(format!(
                "kv_shards {} is above {KV_SHARDS_MAX}",
                self.kv_shards
            ));
        }
        if self.snapshot_every_entries == 0 {
            return invalid("snapshot_every_entries must be at least 1".into());
        }
        if self.snapshot_every_log_bytes < SNAPSHOT_EVERY_LOG_BYTES_MIN {
            return invalid(format!(
                "snapshot_every_log_bytes {} is below {SNAPSHOT_EVERY_LOG_BYTES_MIN}",
                self.snapshot_every_log_bytes
            ));
        }
        if self.container_check_interval_ms == 0 {
            return invalid("container_check_interval_ms must be at least 1".into());
        }
        if !(1..=255).contains(&self.server_id) {
            return invalid(format!("server_id {} outside 1..=255", self.server_id));
        }
        if let Some(digest) = &self.super_digest {
            if digest
                .split_once(':')
                .is_none_or(|(user, hash)| user.is_empty() || hash.is_empty())
            {
                return invalid(format!("super_digest {digest:?} is not user:base64hash"));
            }
        }
        let peers = self.peer_list()?;
        self.validate_join()?;
        for observer in &self.observers {
            if (!self.joining() && !peers.iter().any(|(id, _)| id == observer))
                || *observer == self.preferred_leader
            {
                return invalid(format!(
                    "observer {observer} is not in peers or is the preferred leader"
                ));
            }
        }
        if !self.joining() && !peers.is_empty() && peers.len() < 1 + self.observers.len() {
            return invalid("a cluster needs at least one voting member".into());
        }
        if self.preferred_leader != 0 && !peers.iter().any(|(id, _)| *id == self.preferred_leader) {
            return invalid(format!(
                "preferred_leader {} is not in peers",
                self.preferred_leader
            ));
        }
        if self.metrics_port != 0 {
            if self.metrics_address.trim().is_empty() {
                return invalid("metrics_address is empty".into());
            }
            if self.metrics_port == self.client_port && self.metrics_address == self.client_address
            {
                return invalid(format!(
                    "metrics_port {} is the client port on the same address",
                    self.metrics_port
                ));
            }
        }
        self.validate_resp()?;
        self.validate_security()?;
        for word in &self.four_letter_words {
            if word != "*" && !crate::fourlw::COMMANDS.contains(&word.as_str()) {
                return invalid(format!("four_letter_words: unknown command {word:?}"));
            }
        }
        self.peer_auth()?;
        Ok(())
    }

    /// What peer connections must prove, its files loaded and checked: a
    /// missing, unreadable or too short secret, a certificate, key or CA
    /// file that does not load, or a certificate that does not name this
    /// member is an error naming the file.
    pub fn peer_auth(&self) -> Result<keel_consensus::PeerAuth, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid(message);
        let secret = match &self.peer_secret_file {
            Some(path) => Some(
                keel_consensus::PeerSecret::from_file(path)
                    .map_err(|error| invalid(error.to_string()))?,
            ),
            None => None,
        };
        let tls = if self.peer_tls {
            let (Some(cert), Some(key), Some(ca)) =
                (&self.tls_cert_file, &self.tls_key_file, &self.tls_ca_file)
            else {
                return Err(invalid(
                    "peer_tls needs tls_cert_file, tls_key_file and tls_ca_file".into(),
                ));
            };
            Some(
                keel_consensus::PeerTls::from_files(self.server_id, cert, key, ca)
                    .map_err(|error| invalid(error.to_string()))?,
            )
        } else {
            None
        };
        Ok(keel_consensus::PeerAuth { secret, tls })
    }

    /// Keel KV's port must not be another port of this node.
    fn validate_resp(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        if self.resp_port != 0 {
            for (name, port) in [
                ("client_port", self.client_port),
                ("secure_client_port", self.secure_client_port),
            ] {
                if self.resp_port == port {
                    return invalid(format!("resp_port {port} is also {name}"));
                }
            }
            if self.resp_port == self.metrics_port && self.metrics_address == self.client_address {
                return invalid(format!("resp_port {} is also metrics_port", self.resp_port));
            }
        }
        if !(RESP_MAX_BULK_BYTES_MIN..=RESP_MAX_BULK_BYTES_MAX).contains(&self.resp_max_bulk_bytes)
        {
            return invalid(format!(
                "resp_max_bulk_bytes {} outside {RESP_MAX_BULK_BYTES_MIN}..={RESP_MAX_BULK_BYTES_MAX}",
                self.resp_max_bulk_bytes
            ));
        }
        Ok(())
    }

    /// Keel KV's request bounds.
    pub fn resp_limits(&self) -> keel_kv::resp::Limits {
        keel_kv::resp::Limits {
            bulk_bytes_max: self.resp_max_bulk_bytes,
            ..keel_kv::resp::Limits::default()
        }
    }

    /// The client ports and their TLS and SASL keys (the files themselves
    /// are read at start: `tls::ReloadableServerConfig`, `sasl::SaslUsers`).
    fn validate_security(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        if self.client_port == 0 && self.secure_client_port == 0 {
            return invalid(
                "client_port and secure_client_port are both 0 (off): no client could connect"
                    .into(),
            );
        }
        if self.client_port != 0 && self.client_port == self.secure_client_port {
            return invalid(format!(
                "client_port and secure_client_port are both {}",
                self.client_port
            ));
        }
        if self.secure_client_port != 0 {
            if self.tls_cert_file.is_none() || self.tls_key_file.is_none() {
                return invalid("secure_client_port needs tls_cert_file and tls_key_file".into());
            }
            if self.tls_client_auth != ClientAuth::None && self.tls_ca_file.is_none() {
                return invalid(format!(
                    "tls_client_auth = \"{}\" needs tls_ca_file (or set tls_client_auth = \"none\")",
                    self.tls_client_auth
                ));
            }
        }
        if self.require_sasl && self.sasl_users_file.is_none() {
            return invalid("require_sasl needs sasl_users_file".into());
        }
        Ok(())
    }

    /// The TLS files of the client port, when it is on.
    pub fn client_tls_files(&self) -> Option<crate::tls::TlsFiles> {
        if self.secure_client_port == 0 {
            return None;
        }
        Some(crate::tls::TlsFiles {
            cert_file: self.tls_cert_file.clone()?,
            key_file: self.tls_key_file.clone()?,
            ca_file: self.tls_ca_file.clone(),
        })
    }

    /// This node joins a running cluster (`join`).
    pub fn joining(&self) -> bool {
        !self.join.trim().is_empty()
    }

    /// The members' client addresses given in `peers` (`;CLIENT` parts),
    /// and this node's own (its client port) when not given.
    pub fn peer_clients(&self) -> std::collections::BTreeMap<u64, String> {
        let mut clients = std::collections::BTreeMap::new();
        for item in self.peers.split(',').map(str::trim) {
            let Some((id, rest)) = item.split_once('=') else {
                continue;
            };
            let (Ok(id), Some((_, client))) = (id.trim().parse::<u64>(), rest.split_once(';'))
            else {
                continue;
            };
            let client = client.trim();
            let client = if client.contains(':') {
                client.to_string()
            } else {
                format!("0.0.0.0:{client}")
            };
            clients.insert(id, client);
        }
        clients
            .entry(self.server_id)
            .or_insert_with(|| format!("{}:{}", self.client_address, self.client_port));
        clients
    }

    /// `join` parsed: the members' client addresses to ask.
    pub fn join_list(&self) -> Vec<String> {
        self.join
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect()
    }

    fn validate_join(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        if !self.joining() {
            if !self.peer_address.is_empty() || self.join_auth_file.is_some() {
                return invalid("peer_address and join_auth_file go with join".into());
            }
            return Ok(());
        }
        if !self.peers.trim().is_empty() {
            return invalid("join and peers exclude each other: a joining node learns the members from the cluster".into());
        }
        for address in self.join_list() {
            let valid = address
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !valid {
                return invalid(format!("join: {address:?} is not HOST:PORT"));
            }
        }
        if self.peer_socket_address().is_none() {
            return invalid(format!(
                "join needs peer_address HOST:PORT (this node's peer port), not {:?}",
                self.peer_address
            ));
        }
        if let Some(path) = &self.join_auth_file {
            let credentials = std::fs::read_to_string(path).map_err(|error| {
                ConfigError::Invalid(format!("join_auth_file {}: {error}", path.display()))
            })?;
            if !credentials.trim().contains(':') {
                return invalid(format!(
                    "join_auth_file {} does not hold user:password",
                    path.display()
                ));
            }
        }
        Ok(())
    }

    /// `peer_address` resolved (a joining node's peer listen address).
    pub fn peer_socket_address(&self) -> Option<std::net::SocketAddr> {
        std::net::ToSocketAddrs::to_socket_addrs(self.peer_address.trim())
            .ok()?
            .next()
    }

    /// The parsed `peers` list, sorted by id (a joining node: its own
    /// `peer_address` alone).
    pub fn peer_list(&self) -> Result<Vec<(u64, std::net::SocketAddr)>, ConfigError> {
        if self.joining() {
            return Ok(self
                .peer_socket_address()
                .map(|address| vec![(self.server_id, address)])
                .unwrap_or_default());
        }
        let mut peers = Vec::new();
        for item in self
            .peers
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            let invalid = || {
                ConfigError::Invalid(format!(
                    "peers: {item:?} is not ID=HOST:PORT[;[CLIENTHOST:]CLIENTPORT]"
                ))
            };
            let (id, address) = item.split_once('=').ok_or_else(invalid)?;
            let address = match address.split_once(';') {
                Some((peer, client)) => {
                    let client = client.trim();
                    let port = client.rsplit_once(':').map_or(client, |(_, port)| port);
                    port.parse::<u16>().map_err(|_| invalid())?;
                    peer
                }
                None => address,
            };
            let id: u64 = id.trim().parse().map_err(|_| invalid())?;
            let address = std::net::ToSocketAddrs::to_socket_addrs(address.trim())
                .map_err(|_| invalid())?
                .next()
                .ok_or_else(invalid)?;
            if !(1..=255).contains(&id) || peers.iter().any(|(other, _)| *other == id) {
                return Err(ConfigError::Invalid(format!(
                    "peers: id {id} out of 1..=255 or listed twice"
                )));
            }
            peers.push((id, address));
        }
        peers.sort_unstable_by_key(|(id, _)| *id);
        if !peers.is_empty() && !peers.iter().any(|(id, _)| *id == self.server_id) {
            return Err(ConfigError::Invalid(format!(
                "peers does not list this server's id {}",
                self.server_id
            )));
        }
        Ok(peers)
    }

    pub fn four_letter_word_enabled(&self, word: &str) -> bool {
        self.four_letter_words.iter().any(|w| w == "*" || w == word)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_zookeepers_and_valid() {
        let config = ServerConfig::default();
        config.validate().unwrap();
        assert_eq!(
            (config.min_session_timeout(), config.max_session_timeout()),
            (4_000, 40_000)
        );
    }

    #[test]
    fn bad_values_are_rejected_with_a_reason() {
        let config = ServerConfig {
            tick_time_ms: 0,
            ..ServerConfig::default()
        };
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("tick_time_ms"));
        let config = ServerConfig {
            four_letter_words: vec!["nope".into()],
            ..ServerConfig::default()
        };
        assert!(config.validate().is_err());
        assert!(
            toml::from_str::<ServerConfig>("client_prot = 1").is_err(),
            "unknown keys are errors"
        );
        let parsed: ServerConfig =
            toml::from_str("tick_time_ms = 500\nfour_letter_words = [\"*\"]").unwrap();
        assert!(parsed.four_letter_word_enabled("dump"));
        assert_eq!(parsed.metrics_port, 0, "metrics are off by default");
        let config = ServerConfig {
            metrics_port: DEFAULT_CLIENT_PORT,
            ..ServerConfig::default()
        };
        let error = config.validate().unwrap_err().to_string();
        assert!(
            error.contains("metrics_port 2181 is the client port"),
            "{error}"
        );
        let parsed: ServerConfig =
            toml::from_str("metrics_port = 7000\nmetrics_address = \"0.0.0.0\"").unwrap();
        parsed.validate().unwrap();
        assert_eq!(
            (parsed.metrics_port, parsed.metrics_address.as_str()),
            (7000, "0.0.0.0")
        );
    }

    #[test]
    fn kv_batch_writes_default_on_and_a_toml_key_turns_them_off() {
        assert!(ServerConfig::default().kv_batch_writes);
        let parsed: ServerConfig = toml::from_str("kv_batch_writes = false").unwrap();
        parsed.validate().unwrap();
        assert!(!parsed.kv_batch_writes);
        assert!(toml::from_str::<ServerConfig>("kv_batch_writes = 0").is_err());
    }

    #[test]
    fn kv_shards_default_to_one_per_core_and_are_bounded() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(
            ServerConfig::default().kv_shards(),
            cores.min(KV_SHARDS_MAX)
        );
        let parsed: ServerConfig = toml::from_str("kv_shards = 1").unwrap();
        parsed.validate().unwrap();
        assert_eq!(parsed.kv_shards(), 1);
        let config = ServerConfig {
            kv_shards: KV_SHARDS_MAX + 1,
            ..ServerConfig::default()
        };
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("kv_shards 257 is above 256"), "{error}");
        let at_most = ServerConfig {
            kv_shards: KV_SHARDS_MAX,
            ..ServerConfig::default()
        };
        at_most.validate().unwrap();
    }

    #[test]
    fn client_threads_default_to_cores_but_one_and_are_bounded() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let config = ServerConfig::default();
        assert_eq!(config.client_threads(), cores.saturating_sub(1).max(1));
        assert!(config.client_threads() >= 1);
        let parsed: ServerConfig = toml::from_str("client_threads = 3").unwrap();
        parsed.validate().unwrap();
        assert_eq!(parsed.client_threads(), 3);
        let config = ServerConfig {
            client_threads: CLIENT_THREADS_MAX + 1,
            ..ServerConfig::default()
        };
        let error = config.validate().unwrap_err().to_string();
        assert!(
            error.contains("client_threads 1025 is above 1024"),
            "{error}"
        );
    }

    #[test]
    fn join_and_peers_with_client_addresses_are_checked_at_start() {
        let config = ServerConfig {
            server_id: 2,
            peers: "1=127.0.0.1:2888;127.0.0.1:2181,2=127.0.0.1:2889;2182".into(),
            ..ServerConfig::default()
        };
        config.validate().unwrap();
        let clients = config.peer_clients();
        assert_eq!(clients[&1], "127.0.0.1:2181");
        assert_eq!(clients[&2], "0.0.0.0:2182");
        for (config, wanted) in [
            (
                ServerConfig {
                    peers: "1=127.0.0.1:2888;x".into(),
                    ..ServerConfig::default()
                },
                "is not ID=HOST:PORT",
            ),
            (
                ServerConfig {
                    join: "127.0.0.1:2181".into(),
                    ..ServerConfig::default()
                },
                "join needs peer_address",
            ),
            (
                ServerConfig {
                    join: "127.0.0.1:2181".into(),
                    peer_address: "127.0.0.1:2888".into(),
                    peers: "1=127.0.0.1:2888".into(),
                    ..ServerConfig::default()
                },
                "exclude each other",
            ),
            (
                ServerConfig {
                    join: "nohost".into(),
                    peer_address: "127.0.0.1:2888".into(),
                    ..ServerConfig::default()
                },
                "is not HOST:PORT",
            ),
            (
                ServerConfig {
                    peer_address: "127.0.0.1:2888".into(),
                    ..ServerConfig::default()
                },
                "go with join",
            ),
        ] {
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains(wanted), "{error}");
        }
        let joining = ServerConfig {
            server_id: 4,
            join: "127.0.0.1:2181,127.0.0.1:2182".into(),
            peer_address: "127.0.0.1:2891".into(),
            ..ServerConfig::default()
        };
        joining.validate().unwrap();
        assert_eq!(
            joining.peer_list().unwrap().len(),
            1,
            "its own address only"
        );
        assert!(
            !ServerConfig::default().reconfig_enabled,
            "ZooKeeper's default"
        );
    }

    #[test]
    fn peer_authentication_files_are_checked_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short.secret");
        std::fs::write(&short, "too short\n").unwrap();
        let good = dir.path().join("good.secret");
        std::fs::write(&good, format!("{}\n", "0123456789abcdef".repeat(4))).unwrap();
        let parsed: ServerConfig = toml::from_str(&format!(
            "peer_secret_file = {:?}\nserver_id = 2",
            good.display().to_string()
        ))
        .unwrap();
        parsed.validate().unwrap();
        assert!(parsed.peer_auth().unwrap().secret.is_some());
        for (config, wanted) in [
            (
                ServerConfig {
                    peer_secret_file: Some(short.clone()),
                    ..ServerConfig::default()
                },
                "9 bytes",
            ),
            (
                ServerConfig {
                    peer_secret_file: Some(dir.path().join("missing")),
                    ..ServerConfig::default()
                },
                "missing",
            ),
            (
                ServerConfig {
                    peer_tls: true,
                    tls_ca_file: Some(good.clone()),
                    ..ServerConfig::default()
                },
                "peer_tls needs tls_cert_file, tls_key_file and tls_ca_file",
            ),
            (
                ServerConfig {
                    peer_tls: true,
                    tls_cert_file: Some(good.clone()),
                    tls_key_file: Some(good.clone()),
                    tls_ca_file: Some(good.clone()),
                    ..ServerConfig::default()
                },
                "holds no CERTIFICATE",
            ),
        ] {
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains(wanted), "{error}");
        }
    }

    #[test]
    fn tls_and_sasl_keys_are_checked_together() {
        let error = |text: &str| {
            toml::from_str::<ServerConfig>(text)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string()
        };
        assert!(error("client_port = 0").contains("both 0"));
        assert!(error("secure_client_port = 2181").contains("both 2181"));
        assert!(error("secure_client_port = 2281").contains("needs tls_cert_file"));
        let tls = "secure_client_port = 2281\ntls_cert_file = \"c.pem\"\ntls_key_file = \"k.pem\"";
        assert!(
            error(tls).contains("needs tls_ca_file"),
            "need is the default"
        );
        let config: ServerConfig = toml::from_str(&format!(
            "{tls}\ntls_client_auth = \"none\"\nclient_port = 0"
        ))
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.client_tls_files().unwrap().ca_file, None);
        assert!(toml::from_str::<ServerConfig>("tls_client_auth = \"maybe\"").is_err());
        assert!(error("require_sasl = true").contains("sasl_users_file"));
        assert_eq!(ServerConfig::default().client_tls_files(), None);
    }
}
