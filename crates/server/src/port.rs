//! The client port, open from the first moment: while the node loads its
//! data and replays its log it answers four-letter words as a ZooKeeper
//! that is not running yet and closes session requests at once, so a
//! client moves on to another server instead of waiting; once the node
//! has applied everything committed, connections are served.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::config::{ServerConfig, CLIENT_CONNECTIONS_MAX};
use crate::sasl::SaslUsers;
use crate::shared::{Shared, Stats};

/// `None` while loading, the serving state once caught up (never unset).
pub type Serving = watch::Receiver<Option<Arc<Shared>>>;

pub struct ClientPort {
    pub config: ServerConfig,
    /// The server's counters (refused connections count from the start).
    pub stats: Arc<Stats>,
    /// The DIGEST-MD5 users (`sasl_users_file`); None = SASL not configured.
    pub sasl_users: Option<Arc<SaslUsers>>,
    serving: Serving,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
}

impl ClientPort {
    pub fn new(
        config: ServerConfig,
        stats: Arc<Stats>,
        serving: Serving,
        sasl_users: Option<Arc<SaslUsers>>,
    ) -> ClientPort {
        ClientPort {
            config,
            stats,
            sasl_users,
            serving,
            per_ip: Mutex::new(HashMap::new()),
        }
    }

    /// The serving state, or None while the node still loads its data.
    pub fn serving(&self) -> Option<Arc<Shared>> {
        self.serving.borrow().clone()
    }

    /// Counts a new connection from `ip`, or refuses it (over the per-IP
    /// limit or `CLIENT_CONNECTIONS_MAX` in all).
    pub fn admit(&self, ip: IpAddr) -> bool {
        let mut per_ip = self.per_ip.lock();
        let total: usize = per_ip.values().sum();
        let count = per_ip.entry(ip).or_insert(0);
        let limit = self.config.max_client_connections_per_ip;
        if total >= CLIENT_CONNECTIONS_MAX || (limit > 0 && *count >= limit) {
            if *count == 0 {
                per_ip.remove(&ip);
            }
            self.stats
                .connection_rejected
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return false;
        }
        *count += 1;
        true
    }

    pub fn release(&self, ip: IpAddr) {
        let mut per_ip = self.per_ip.lock();
        let count = per_ip
            .get_mut(&ip)
            .expect("released a connection never admitted");
        assert!(*count > 0);
        *count -= 1;
        if *count == 0 {
            per_ip.remove(&ip);
        }
    }
}
