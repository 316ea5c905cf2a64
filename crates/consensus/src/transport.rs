//! Peer transport: length-framed TCP between cluster members.
//!
//! Two lanes per peer, each its own connection and queue: `Control`
//! carries heartbeats, votes and small messages, `Bulk` carries appends,
//! snapshots and forwarded proposals. A saturating write load fills the
//! bulk queue, never the control one, so heartbeats keep their latency and
//! no spurious election follows (ZNBase's lesson).
//!
//! Frame: u32 length (of what follows) | u8 kind | u64 sender id | payload.
//! The first frame on a connection is a hello carrying the cluster id; a
//! peer of another cluster, an unknown sender or a frame that fails to
//! decode closes that connection with a logged reason, never the process.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use protobuf::Message as _;
use raft::eraftpb::{Message, MessageType};

/// Largest frame accepted from a peer (snapshot chunks stay far below).
pub const PEER_FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Frames queued per peer and lane before new ones are dropped (Raft
/// retransmits; dropping beats blocking the driver).
pub const PEER_QUEUE_FRAMES_MAX: usize = 4096;
const CONNECT_RETRY_MS: u64 = 100;
const CONNECT_TIMEOUT_MS: u64 = 1_000;

const KIND_HELLO: u8 = 0;
const KIND_RAFT: u8 = 1;
const KIND_FORWARD: u8 = 2;
const KIND_TOUCH: u8 = 3;

/// What arrives from peers, for the driver.
#[derive(Debug)]
pub enum PeerInput {
    Raft(Box<Message>),
    /// A follower's client transactions, encoded as one batch.
    Forward(Vec<u8>),
    /// Sessions a follower saw activity from.
    Touch(Vec<i64>),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lane {
    Control,
    Bulk,
}

fn lane_of(message: &Message) -> Lane {
    match message.get_msg_type() {
        MessageType::MsgAppend | MessageType::MsgSnapshot => Lane::Bulk,
        _ => Lane::Control,
    }
}

struct Outgoing {
    control: Sender<Vec<u8>>,
    bulk: Sender<Vec<u8>>,
}

/// Heartbeat round trips as this node (when leader) measures them:
/// MsgHeartbeat sent to MsgHeartbeatResponse received, per peer.
/// Filled in by the transport; read by mntr and tests.
#[derive(Default, Debug)]
pub struct HeartbeatStats {
    // TODO(helper): counters / histogram of round trips in microseconds.
}

/// Sends to peers; cheap to clone.
#[derive(Clone)]
pub struct Transport {
    self_id: u64,
    peers: Arc<HashMap<u64, Outgoing>>,
    heartbeat: Arc<HeartbeatStats>,
}

impl Transport {
    /// Listens on `listen` and keeps connections to every other peer.
    pub fn start(
        self_id: u64,
        cluster_id: u64,
        listen: SocketAddr,
        peers: &HashMap<u64, SocketAddr>,
        inbox: Sender<PeerInput>,
    ) -> std::io::Result<Transport> {
        let listener = TcpListener::bind(listen)?;
        let known: Vec<u64> = peers.keys().copied().collect();
        std::thread::Builder::new()
            .name("keel-peer-accept".into())
            .spawn(move || accept_loop(listener, cluster_id, known, inbox))?;
        let mut outgoing = HashMap::new();
        for (&peer_id, &address) in peers {
            if peer_id == self_id {
                continue;
            }
            let control = spawn_sender(self_id, cluster_id, peer_id, address, "control")?;
            let bulk = spawn_sender(self_id, cluster_id, peer_id, address, "bulk")?;
            outgoing.insert(peer_id, Outgoing { control, bulk });
        }
        Ok(Transport {
            self_id,
            peers: Arc::new(outgoing),
            heartbeat: Arc::new(HeartbeatStats::default()),
        })
    }

    /// The heartbeat round-trip statistics this transport keeps.
    pub fn heartbeat_stats(&self) -> Arc<HeartbeatStats> {
        self.heartbeat.clone()
    }

    pub fn send_raft(&self, message: &Message) {
        let payload = match message.write_to_bytes() {
            Ok(bytes) => bytes,
            Err(error) => return tracing::error!(%error, "cannot encode raft message"),
        };
        self.enqueue(message.to, lane_of(message), KIND_RAFT, &payload);
    }

    pub fn forward(&self, leader_id: u64, batch: &[u8]) {
        self.enqueue(leader_id, Lane::Bulk, KIND_FORWARD, batch);
    }

    pub fn touch(&self, leader_id: u64, sessions: &[i64]) {
        let mut payload = Vec::with_capacity(sessions.len() * 8);
        for session in sessions {
            payload.extend_from_slice(&session.to_be_bytes());
        }
        self.enqueue(leader_id, Lane::Control, KIND_TOUCH, &payload);
    }

    fn enqueue(&self, to: u64, lane: Lane, kind: u8, payload: &[u8]) {
        let Some(outgoing) = self.peers.get(&to) else {
            return tracing::warn!(to, "message for an unknown peer dropped");
        };
        let frame = encode_frame(kind, self.self_id, payload);
        let queue = if lane == Lane::Control {
            &outgoing.control
        } else {
            &outgoing.bulk
        };
        if let Err(TrySendError::Full(_)) = queue.try_send(frame) {
            tracing::debug!(to, ?lane, "peer queue full; frame dropped");
        }
    }
}

fn encode_frame(kind: u8, from: u64, payload: &[u8]) -> Vec<u8> {
    let length = 1 + 8 + payload.len();
    assert!(
        length <= PEER_FRAME_BYTES_MAX,
        "peer frame of {length} bytes"
    );
    let mut frame = Vec::with_capacity(4 + length);
    frame.extend_from_slice(&(length as u32).to_be_bytes());
    frame.push(kind);
    frame.extend_from_slice(&from.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

fn spawn_sender(
    self_id: u64,
    cluster_id: u64,
    peer_id: u64,
    address: SocketAddr,
    lane: &'static str,
) -> std::io::Result<Sender<Vec<u8>>> {
    let (sender, frames) = crossbeam_channel::bounded::<Vec<u8>>(PEER_QUEUE_FRAMES_MAX);
    std::thread::Builder::new()
        .name(format!("keel-peer-{peer_id}-{lane}"))
        .spawn(move || loop {
            let hello = encode_frame(KIND_HELLO, self_id, &cluster_id.to_be_bytes());
            match TcpStream::connect_timeout(&address, Duration::from_millis(CONNECT_TIMEOUT_MS)) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    if let Err(error) = pump(stream, &hello, &frames) {
                        tracing::debug!(peer_id, lane, %error, "peer connection lost");
                    }
                    if frames.is_empty() && is_disconnected(&frames) {
                        return;
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(CONNECT_RETRY_MS)),
            }
            // Frames queued while disconnected are stale for Raft: drop them.
            while frames.try_recv().is_ok() {}
        })?;
    Ok(sender)
}

fn is_disconnected(frames: &Receiver<Vec<u8>>) -> bool {
    matches!(
        frames.try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    )
}

/// Writes queued frames, batching whatever is already queued per flush.
fn pump(stream: TcpStream, hello: &[u8], frames: &Receiver<Vec<u8>>) -> std::io::Result<()> {
    let mut writer = BufWriter::with_capacity(256 * 1024, stream);
    writer.write_all(hello)?;
    writer.flush()?;
    loop {
        let frame = match frames.recv_timeout(Duration::from_secs(1)) {
            Ok(frame) => frame,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Ok(()),
        };
        writer.write_all(&frame)?;
        while let Ok(more) = frames.try_recv() {
            writer.write_all(&more)?;
        }
        writer.flush()?;
    }
}

fn accept_loop(listener: TcpListener, cluster_id: u64, known: Vec<u64>, inbox: Sender<PeerInput>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let inbox = inbox.clone();
        let known = known.clone();
        let _ = std::thread::Builder::new()
            .name("keel-peer-read".into())
            .spawn(move || {
                let peer = stream
                    .peer_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                if let Err(reason) = read_peer(stream, cluster_id, &known, &inbox) {
                    tracing::warn!(%peer, reason, "peer connection closed");
                }
            });
    }
}

fn read_peer(
    stream: TcpStream,
    cluster_id: u64,
    known: &[u64],
    inbox: &Sender<PeerInput>,
) -> Result<(), String> {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::with_capacity(256 * 1024, stream);
    let (kind, from, payload) = read_frame(&mut reader)?;
    if kind != KIND_HELLO || payload.len() != 8 {
        return Err("first frame is not a hello".into());
    }
    let their_cluster = u64::from_be_bytes(payload[..8].try_into().expect("8 bytes"));
    if their_cluster != cluster_id {
        return Err(format!(
            "peer {from} belongs to cluster {their_cluster:#x}, we are {cluster_id:#x}"
        ));
    }
    if !known.contains(&from) {
        return Err(format!("unknown peer id {from}"));
    }
    loop {
        let (kind, sender, payload) = read_frame(&mut reader)?;
        if sender != from {
            return Err(format!("frame from {sender} on {from}'s connection"));
        }
        let input = match kind {
            KIND_RAFT => {
                let message = Message::parse_from_bytes(&payload)
                    .map_err(|e| format!("raft message does not decode: {e}"))?;
                if message.from != from {
                    return Err(format!("raft message claims sender {}", message.from));
                }
                PeerInput::Raft(Box::new(message))
            }
            KIND_FORWARD => PeerInput::Forward(payload),
            KIND_TOUCH if payload.len() % 8 == 0 => PeerInput::Touch(
                payload
                    .chunks_exact(8)
                    .map(|c| i64::from_be_bytes(c.try_into().expect("8 bytes")))
                    .collect(),
            ),
            _ => return Err(format!("bad frame kind {kind}")),
        };
        if inbox.send(input).is_err() {
            return Ok(());
        }
    }
}

fn read_frame(reader: &mut impl Read) -> Result<(u8, u64, Vec<u8>), String> {
    let mut length = [0u8; 4];
    reader
        .read_exact(&mut length)
        .map_err(|e| format!("read: {e}"))?;
    let length = u32::from_be_bytes(length) as usize;
    if !(9..=PEER_FRAME_BYTES_MAX).contains(&length) {
        return Err(format!("frame length {length} out of bounds"));
    }
    let mut body = vec![0u8; length];
    reader
        .read_exact(&mut body)
        .map_err(|e| format!("read: {e}"))?;
    let from = u64::from_be_bytes(body[1..9].try_into().expect("8 bytes"));
    Ok((body[0], from, body[9..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_lengths_are_refused() {
        let frame = encode_frame(KIND_TOUCH, 3, &[1, 2, 3]);
        let (kind, from, payload) = read_frame(&mut &frame[..]).unwrap();
        assert_eq!((kind, from, payload), (KIND_TOUCH, 3, vec![1, 2, 3]));
        let mut huge = frame.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(read_frame(&mut &huge[..]).is_err());
        assert!(read_frame(&mut &frame[..6]).is_err());
    }

    #[test]
    fn heartbeats_and_votes_take_the_control_lane() {
        let mut message = Message::default();
        for (kind, lane) in [
            (MessageType::MsgHeartbeat, Lane::Control),
            (MessageType::MsgRequestVote, Lane::Control),
            (MessageType::MsgAppend, Lane::Bulk),
            (MessageType::MsgSnapshot, Lane::Bulk),
        ] {
            message.set_msg_type(kind);
            assert_eq!(lane_of(&message), lane);
        }
    }
}
