//! ZooKeeper's reconfig API on Keel's membership changes: the server
//! string (`server.N=host:peerPort:electionPort[:participant|observer]
//! [;[clientHost:]clientPort]`, ZooKeeper's QuorumServer syntax), the
//! request's three forms (incremental `joiningServers`/`leavingServers`,
//! non-incremental `newMembers`), the configuration's text as
//! `/zookeeper/config` and `conf` show it (QuorumMaj.toString), and the
//! reply routing of a reconfig.
//!
//! Keel has one peer port per member: `peerPort` is where its peers
//! connect (Raft and everything else); `electionPort` is accepted, kept and
//! shown back, never used (an election port equal to the peer port is
//! accepted, unlike ZooKeeper, so the text Keel shows for a member started
//! with `--peers`, `host:P:P`, can be fed back).

use keel_consensus::{Change, Member, Members, Role};
use keel_jute::ErrorCode;

/// Keel's member ids (`--id`): 1..=255.
pub const SERVER_ID_MAX: u64 = 255;

/// Why a server string or a request is refused (the client gets
/// BadArguments; the text goes to the log).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadServerString(pub String);

fn bad(text: impl Into<String>) -> BadServerString {
    BadServerString(text.into())
}

/// Splits "host:port:..." into its parts; an IPv6 host is bracketed
/// (ZooKeeper's ConfigUtils.getHostAndPort).
fn host_and_ports(text: &str) -> Result<Vec<String>, BadServerString> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, tail) = rest
            .split_once(']')
            .ok_or_else(|| bad(format!("{text} starts with '[' but has no matching ']'")))?;
        let mut parts = vec![format!("[{host}]")];
        if !tail.is_empty() {
            let tail = tail
                .strip_prefix(':')
                .ok_or_else(|| bad(format!("{text} does not have : after ]")))?;
            parts.extend(tail.split(':').map(str::to_owned));
        }
        return Ok(parts);
    }
    Ok(text.split(':').map(str::to_owned).collect())
}

fn port(text: &str, whole: &str) -> Result<u16, BadServerString> {
    match text.trim().parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(bad(format!("Address unresolved: {whole}"))),
    }
}

/// One member from `server.N` and its value (`joining` also requires the
/// client part and all three ports, as ZooKeeper's incremental reconfig).
pub fn parse_server(key: &str, value: &str, joining: bool) -> Result<Member, BadServerString> {
    let id_text = key
        .trim()
        .strip_prefix("server.")
        .ok_or_else(|| bad(format!("Unrecognised parameter: {key}")))?;
    let id: u64 = id_text
        .parse()
        .map_err(|_| bad(format!("{key}: the server id is not a number")))?;
    if !(1..=SERVER_ID_MAX).contains(&id) {
        return Err(bad(format!("server id {id} outside 1..={SERVER_ID_MAX}")));
    }
    let value = value.trim();
    let wrong = || {
        bad(format!(
            "{value} does not have the form server_config or server_config;client_config"
        ))
    };
    let sections: Vec<&str> = value.split(';').collect();
    if sections.len() > 2 {
        return Err(wrong());
    }
    if sections[0].contains('|') {
        return Err(bad(format!(
            "Multiple address feature is disabled, but multiple addresses were specified for sid {id}"
        )));
    }
    let server = host_and_ports(sections[0].trim())?;
    if server.len() < 3 || server.len() > 4 || server[0].is_empty() {
        return Err(wrong());
    }
    let peer_port = port(&server[1], value)?;
    let election_port = port(&server[2], value)?;
    let role = match server.get(3).map(|r| r.trim().to_lowercase()) {
        None => Role::Voter,
        Some(r) if r == "participant" => Role::Voter,
        Some(r) if r == "observer" => Role::Observer,
        Some(r) => return Err(bad(format!("Unrecognised peertype: {r}"))),
    };
    let client = match sections.get(1) {
        None => String::new(),
        Some(client) => {
            let parts = host_and_ports(client.trim())?;
            let (host, client_port) = match parts.as_slice() {
                [port_only] => ("0.0.0.0".to_string(), port(port_only, value)?),
                [host, port_text] if !host.is_empty() => (host.clone(), port(port_text, value)?),
                _ => return Err(wrong()),
            };
            format!("{host}:{client_port}")
        }
    };
    if joining && client.is_empty() {
        return Err(bad(
            "Wrong format of server string - each server should have 3 ports specified",
        ));
    }
    Ok(Member {
        id,
        role,
        peer: format!("{}:{peer_port}", server[0]),
        election_port,
        client,
        bootstrap: false,
    })
}

/// A `key=value` list separated by commas or newlines (the newMembers of a
/// non-incremental reconfig, read as ZooKeeper reads it into Properties).
fn parse_members(text: &str) -> Result<Vec<Member>, BadServerString> {
    let mut members: Vec<Member> = Vec::new();
    for line in text.split([',', '\n']).map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| bad(format!("{line} is not key=value")))?;
        let key = key.trim();
        if key == "version" {
            continue;
        }
        if key.starts_with("group") || key.starts_with("weight") {
            return Err(bad("hierarchical quorums are not supported by Keel"));
        }
        let member = parse_server(key, value, false)?;
        members.retain(|m| m.id != member.id);
        members.push(member);
    }
    Ok(members)
}

/// The change a ZooKeeper ReconfigRequest asks for. ZooKeeper tells the
/// forms apart by null strings, which jute decodes as "" here (see
/// `keel_jute::ReconfigRequest`): a non-empty `new_members` is
/// non-incremental.
pub fn parse_request(request: &keel_jute::ReconfigRequest) -> Result<Change, BadServerString> {
    if !request.new_members.is_empty() {
        let members = parse_members(&request.new_members)?;
        if !members.iter().any(|m| m.role == Role::Voter) {
            return Err(bad(
                "Observers w/o participants is an invalid configuration",
            ));
        }
        return Ok(Change::Replace(members));
    }
    let mut joining = Vec::new();
    for joiner in request
        .joining_servers
        .split(',')
        .map(str::trim)
        .filter(|j| !j.is_empty())
    {
        let (key, value) = joiner
            .split_once('=')
            .ok_or_else(|| bad("Wrong format of server string"))?;
        joining.push(parse_server(key, value, true)?);
    }
    let mut leaving = Vec::new();
    for id in request
        .leaving_servers
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        leaving.push(
            id.parse::<u64>()
                .map_err(|_| bad(format!("leaving server id {id:?} is not a number")))?,
        );
    }
    Ok(Change::Incremental { joining, leaving })
}

/// "host" and "port" of a "host:port" text (an IPv6 host keeps its brackets).
fn split_address(address: &str) -> (&str, &str) {
    address.rsplit_once(':').unwrap_or((address, ""))
}

/// One member as ZooKeeper's QuorumServer.toString shows it.
pub fn render_member(member: &Member) -> String {
    let (host, peer_port) = split_address(&member.peer);
    let election_port = if member.election_port == 0 {
        peer_port.to_string()
    } else {
        member.election_port.to_string()
    };
    let role = match member.role {
        Role::Voter => "participant",
        Role::Observer => "observer",
    };
    let mut text = format!("{host}:{peer_port}:{election_port}:{role}");
    if !member.client.is_empty() {
        text.push(';');
        text.push_str(&member.client);
    }
    text
}

/// The configuration's text (QuorumMaj.toString): a `server.N=` line per
/// member by id, then `version=<config id in hex>` with no newline.
pub fn render(members: &Members, config_id: u64) -> String {
    let mut text = String::new();
    for member in members.values() {
        text.push_str(&format!("server.{}={}\n", member.id, render_member(member)));
    }
    text.push_str(&format!("version={config_id:x}"));
    text
}

/// Where a reconfig's reply goes: the asking session and its xid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyTo {
    pub session_id: i64,
    pub xid: i32,
}

impl ReplyTo {
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = self.session_id.to_be_bytes().to_vec();
        bytes.extend_from_slice(&self.xid.to_be_bytes());
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Option<ReplyTo> {
        if bytes.len() != 12 {
            return None;
        }
        Some(ReplyTo {
            session_id: i64::from_be_bytes(bytes[..8].try_into().ok()?),
            xid: i32::from_be_bytes(bytes[8..].try_into().ok()?),
        })
    }
}

/// ZooKeeper's code for a refusal (`Lost` has none: the connection closes,
/// as a ZooKeeper client's does when its server loses the leader).
pub fn error_code(error: &keel_consensus::ReconfigError) -> Option<ErrorCode> {
    use keel_consensus::ReconfigError as E;
    Some(match error {
        E::Disabled => ErrorCode::ReconfigDisabled,
        E::InProgress => ErrorCode::ReconfigInProgress,
        E::BadVersion { .. } => ErrorCode::BadVersion,
        E::BadArguments(_) => ErrorCode::BadArguments,
        E::NoQuorum => ErrorCode::NewConfigNoQuorum,
        E::NoAuth => ErrorCode::NoAuth,
        E::Lost => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(joining: &str, leaving: &str, new_members: &str) -> keel_jute::ReconfigRequest {
        keel_jute::ReconfigRequest {
            joining_servers: joining.into(),
            leaving_servers: leaving.into(),
            new_members: new_members.into(),
            cur_config_id: -1,
        }
    }

    #[test]
    fn a_server_string_reads_as_zookeeper_reads_it_and_renders_back() {
        let member = parse_server(
            "server.4",
            "127.0.0.1:2891:3891:participant;127.0.0.1:2184",
            true,
        )
        .unwrap();
        assert_eq!(
            (
                member.id,
                member.role,
                member.peer.as_str(),
                member.election_port
            ),
            (4, Role::Voter, "127.0.0.1:2891", 3891)
        );
        assert_eq!(
            render_member(&member),
            "127.0.0.1:2891:3891:participant;127.0.0.1:2184"
        );
        let observer = parse_server("server.5", "h:1:2:OBSERVER;2185", true).unwrap();
        assert_eq!(observer.role, Role::Observer);
        assert_eq!(render_member(&observer), "h:1:2:observer;0.0.0.0:2185");
        let ipv6 = parse_server("server.6", "[::1]:2888:3888;[::1]:2181", false).unwrap();
        assert_eq!(
            render_member(&ipv6),
            "[::1]:2888:3888:participant;[::1]:2181"
        );
    }

    #[test]
    fn bad_server_strings_are_refused() {
        for (key, value) in [
            ("server.4", "127.0.0.1:2891;2184"),
            ("server.4", "127.0.0.1:2891:x;2184"),
            ("server.4", "127.0.0.1:2891:3891:voter;2184"),
            ("server.4", "127.0.0.1:2891:3891"),
            ("server.x", "127.0.0.1:2891:3891;2184"),
            ("server.0", "127.0.0.1:2891:3891;2184"),
            ("server.4", "a:1:2|b:1:2;2184"),
            ("server.4", "a:1:2;2184;x"),
            ("srv.4", "a:1:2;2184"),
        ] {
            assert!(parse_server(key, value, true).is_err(), "{key}={value}");
        }
        assert!(parse_request(&request("server.4", "", "")).is_err());
        assert!(parse_request(&request("", "x", "")).is_err());
        assert!(parse_request(&request("", "", "server.1=a:1:2:observer")).is_err());
        assert!(parse_request(&request("", "", "nonsense=1")).is_err());
    }

    #[test]
    fn the_three_forms_parse() {
        assert_eq!(
            parse_request(&request("", "2, 3", "")).unwrap(),
            Change::Incremental {
                joining: vec![],
                leaving: vec![2, 3]
            }
        );
        let Change::Incremental { joining, .. } = parse_request(&request(
            "server.4=h:1:2;3,server.5=h:4:5:observer;6",
            "",
            "",
        ))
        .unwrap() else {
            panic!("incremental")
        };
        assert_eq!(joining.iter().map(|m| m.id).collect::<Vec<_>>(), [4, 5]);
        let Change::Replace(members) = parse_request(&request(
            "",
            "",
            "server.1=h:1:2;3\nserver.2=h:4:5;6,version=100000000",
        ))
        .unwrap() else {
            panic!("non-incremental")
        };
        assert_eq!(members.len(), 2);
    }

    #[test]
    fn the_configuration_renders_as_quorum_maj_does() {
        let mut members = Members::new();
        for member in [
            parse_server(
                "server.2",
                "127.0.0.1:2889:3889:participant;127.0.0.1:2182",
                true,
            ),
            parse_server(
                "server.1",
                "127.0.0.1:2888:3888:participant;127.0.0.1:2181",
                true,
            ),
            parse_server(
                "server.3",
                "127.0.0.1:2890:3890:observer;127.0.0.1:2183",
                true,
            ),
        ] {
            let member = member.unwrap();
            members.insert(member.id, member);
        }
        assert_eq!(
            render(&members, 0x1_0000_0000),
            "server.1=127.0.0.1:2888:3888:participant;127.0.0.1:2181\n\
             server.2=127.0.0.1:2889:3889:participant;127.0.0.1:2182\n\
             server.3=127.0.0.1:2890:3890:observer;127.0.0.1:2183\n\
             version=100000000"
        );
    }
}
