//! A node started with `join` and an empty data dir asks the cluster to add
//! it: a ZooKeeper client of the `join` addresses sends an incremental
//! reconfig adding this node's server string, authenticated with the
//! digest identity of `join_auth_file` (ZooKeeper lets only the super user
//! reconfigure). Refused for lack of rights, or with reconfig disabled, it
//! says so and waits: an operator adds it (`reconfig -add` with the
//! server string it logs). Either way the leader then sends it a snapshot
//! and it becomes a voter once caught up (consensus's membership.rs).

use std::time::Duration;

use keel_client::{Client, ClientError};
use keel_jute::{ErrorCode, ReconfigRequest, Request};

use crate::config::ServerConfig;

/// Pause between two attempts after a refusal worth retrying (another
/// change in progress, no synced quorum, no connection).
pub const JOIN_RETRY_MS: u64 = 2_000;
/// Attempts before the node only waits for an operator.
pub const JOIN_ATTEMPTS_MAX: u32 = 30;
/// Session timeout of the asking client.
const JOIN_SESSION_TIMEOUT_MS: u32 = 30_000;

/// This node's ZooKeeper server string (`server.N=...` without the key).
pub fn server_string(config: &ServerConfig) -> String {
    let role = if config.observers.contains(&config.server_id) {
        "observer"
    } else {
        "participant"
    };
    let peer = config.peer_address.trim();
    let port = peer.rsplit_once(':').map_or("", |(_, port)| port);
    format!(
        "{peer}:{port}:{role};{}:{}",
        config.client_address, config.client_port
    )
}

/// What one attempt came to.
enum Outcome {
    Added,
    /// Nothing this node can do: wait for an operator.
    Wait(String),
    Retry(String),
}

async fn ask_once(config: &ServerConfig, credentials: Option<&str>) -> Outcome {
    let servers = config.join_list().join(",");
    let client = match Client::connect(&servers, JOIN_SESSION_TIMEOUT_MS).await {
        Ok(client) => client,
        Err(error) => return Outcome::Retry(format!("cannot reach {servers}: {error}")),
    };
    if let Some(credentials) = credentials {
        if let Err(error) = client.add_auth("digest", credentials.as_bytes()).await {
            return Outcome::Wait(format!("authentication refused: {error}"));
        }
    }
    let joining = format!("server.{}={}", config.server_id, server_string(config));
    let request = Request::Reconfig(ReconfigRequest {
        joining_servers: joining,
        leaving_servers: String::new(),
        new_members: String::new(),
        cur_config_id: -1,
    });
    let outcome = match client.request(request).await {
        Ok((header, _)) if header.err == 0 => Outcome::Added,
        Ok((header, _)) => match ErrorCode::from_code(header.err) {
            Some(ErrorCode::NoAuth | ErrorCode::ReconfigDisabled | ErrorCode::BadArguments) => {
                Outcome::Wait(format!("the cluster refused: error {}", header.err))
            }
            _ => Outcome::Retry(format!("the cluster answered error {}", header.err)),
        },
        Err(ClientError::ConnectionLoss | ClientError::Timeout) => {
            Outcome::Retry("no answer (the node may have been added meanwhile)".into())
        }
        Err(error) => Outcome::Retry(error.to_string()),
    };
    let _ = client.close().await;
    outcome
}

/// Asks until added, refused for good, or out of attempts; `member` tells
/// whether the node is in the configuration already (then it stops).
pub async fn ask(config: ServerConfig, member: impl Fn() -> bool) {
    let credentials = config
        .join_auth_file
        .as_ref()
        .and_then(|path| std::fs::read_to_string(path).ok())
        .map(|text| text.trim().to_string());
    let wait_for_operator = |reason: &str| {
        tracing::warn!(
            reason,
            "not added to the cluster yet; waiting for an operator: reconfig -add server.{}={}",
            config.server_id,
            server_string(&config)
        )
    };
    if credentials.is_none() {
        return wait_for_operator("no join_auth_file to ask with");
    }
    for attempt in 1..=JOIN_ATTEMPTS_MAX {
        if member() {
            return;
        }
        match ask_once(&config, credentials.as_deref()).await {
            Outcome::Added => return tracing::info!("the cluster added this node"),
            Outcome::Wait(reason) => return wait_for_operator(&reason),
            Outcome::Retry(reason) => {
                tracing::info!(
                    attempt,
                    reason,
                    "asking to join again in {JOIN_RETRY_MS} ms"
                )
            }
        }
        tokio::time::sleep(Duration::from_millis(JOIN_RETRY_MS)).await;
    }
    wait_for_operator("out of attempts");
}
