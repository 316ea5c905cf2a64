//! Connection behaviour that a healthy ZooKeeper never shows, checked
//! against a scripted fake server on a local socket: expired sessions,
//! ping cadence, reply routing, hang-ups and silent servers.

use std::time::{Duration, Instant};

use keel_client::jute::{
    opcode, xid, ConnectRequest, ConnectResponse, GetDataRequest, Reader, Record, ReplyHeader,
    RequestHeader, WatcherEvent,
};
use keel_client::{Client, ClientError, EventType, KeeperState, Stat};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

async fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await.ok()?;
    Some(body)
}

async fn write_frame(s: &mut TcpStream, body: &[u8]) {
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    s.write_all(&out).await.unwrap();
}

/// Accepts one client and answers its ConnectRequest with `time_out`.
async fn accept(l: &TcpListener, time_out: i32) -> (TcpStream, ConnectRequest) {
    let (mut s, _) = l.accept().await.unwrap();
    let req = ConnectRequest::from_bytes(&read_frame(&mut s).await.unwrap()).unwrap();
    let resp = ConnectResponse {
        protocol_version: 0,
        time_out,
        session_id: if time_out > 0 { 0x1234 } else { 0 },
        passwd: vec![7; 16],
        read_only: false,
    };
    write_frame(&mut s, &resp.to_bytes()).await;
    (s, req)
}

fn reply(xid: i32, err: i32, body: &[u8]) -> Vec<u8> {
    let mut out = ReplyHeader { xid, zxid: 5, err }.to_bytes();
    out.extend_from_slice(body);
    out
}

#[tokio::test]
async fn expired_session_is_reported_at_connect() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move { accept(&l, 0).await });
    let r = Client::connect(&addr, 5_000).await;
    assert!(matches!(r, Err(ClientError::SessionExpired)), "{r:?}");
    let (_, req) = server.await.unwrap();
    // What the client sends in its handshake.
    assert_eq!(req.protocol_version, 0);
    assert_eq!(req.last_zxid_seen, 0);
    assert_eq!(req.time_out, 5_000);
    assert_eq!(req.session_id, 0);
    assert_eq!(req.passwd, vec![0; 16]);
    assert_eq!(req.read_only, Some(false));
}

#[tokio::test]
async fn pings_go_out_at_a_third_of_the_timeout() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (mut s, _) = accept(&l, 600).await;
        let start = Instant::now();
        let mut pings = Vec::new();
        while start.elapsed() < Duration::from_millis(1_100) {
            let f = read_frame(&mut s).await.unwrap();
            let h = RequestHeader::from_bytes(&f).unwrap();
            assert_eq!((h.xid, h.op_type), (xid::PING, opcode::PING));
            assert_eq!(f.len(), 8);
            pings.push(start.elapsed());
            write_frame(&mut s, &reply(xid::PING, 0, &[])).await;
        }
        pings
    });
    let c = Client::connect(&addr, 600).await.unwrap();
    assert_eq!(c.negotiated_timeout_ms(), 600);
    assert_eq!(c.session_id(), 0x1234);
    assert_eq!(c.session_password(), &[7; 16]);
    let pings = server.await.unwrap();
    // One every 200 ms.
    assert!((4..=7).contains(&pings.len()), "{pings:?}");
    assert!(pings[0] >= Duration::from_millis(150), "{pings:?}");
    assert!(c.is_connected());
}

#[tokio::test]
async fn pipelined_replies_and_notifications_are_routed() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (mut s, _) = accept(&l, 30_000).await;
        let mut xids = Vec::new();
        for _ in 0..3 {
            let f = read_frame(&mut s).await.unwrap();
            let mut r = Reader::new(&f);
            let h = RequestHeader::read(&mut r).unwrap();
            assert_eq!(h.op_type, opcode::GET_DATA);
            let req = GetDataRequest::read(&mut r).unwrap();
            xids.push((h.xid, req.path));
        }
        // A notification may arrive between replies.
        let ev = WatcherEvent {
            event_type: EventType::NodeDeleted.code(),
            state: KeeperState::SyncConnected.code(),
            path: "/gone".into(),
        };
        write_frame(&mut s, &reply(xid::NOTIFICATION, 0, &ev.to_bytes())).await;
        // Replies in request order, each carrying its path as data.
        for (x, path) in &xids {
            let mut body = Vec::new();
            keel_client::jute::write_buffer(&mut body, Some(path.as_bytes()));
            Stat::default().write(&mut body);
            let err = if path == "/b" { -101 } else { 0 };
            let frame = if err == 0 {
                reply(*x, 0, &body)
            } else {
                reply(*x, err, &[])
            };
            write_frame(&mut s, &frame).await;
        }
        xids
    });
    let c = Client::connect(&addr, 30_000).await.unwrap();
    let mut events = c.take_events().unwrap();
    let (a, b, cc) = tokio::join!(
        c.get_data("/a", true),
        c.get_data("/b", false),
        c.get_data("/c", false)
    );
    assert_eq!(a.unwrap().0.unwrap(), b"/a");
    assert!(matches!(
        b,
        Err(ClientError::Zk(keel_client::ErrorCode::NoNode))
    ));
    assert_eq!(cc.unwrap().0.unwrap(), b"/c");
    let xids = server.await.unwrap();
    let mut sorted: Vec<i32> = xids.iter().map(|(x, _)| *x).collect();
    sorted.sort();
    assert_eq!(sorted, vec![1, 2, 3]);
    let ev = events.recv().await.unwrap();
    assert_eq!(ev.event_type, EventType::NodeDeleted);
    assert_eq!(ev.path, "/gone");
    assert_eq!(c.last_zxid(), 5);
}

#[tokio::test]
async fn hang_up_fails_outstanding_requests_and_reports_disconnect() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (mut s, _) = accept(&l, 30_000).await;
        let _ = read_frame(&mut s).await.unwrap();
        // Hang up without answering.
    });
    let c = Client::connect(&addr, 30_000).await.unwrap();
    let mut events = c.take_events().unwrap();
    let r = c.exists("/x", false).await;
    assert!(matches!(r, Err(ClientError::ConnectionLoss)), "{r:?}");
    server.await.unwrap();
    let ev = events.recv().await.unwrap();
    assert_eq!(ev.state, KeeperState::Disconnected);
    assert_eq!(ev.event_type, EventType::None);
    assert!(!c.is_connected());
    assert!(matches!(
        c.get_children("/", false).await,
        Err(ClientError::ConnectionLoss)
    ));
}

#[tokio::test]
async fn out_of_order_reply_breaks_the_connection() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (mut s, _) = accept(&l, 30_000).await;
        let f = read_frame(&mut s).await.unwrap();
        let h = RequestHeader::from_bytes(&f).unwrap();
        write_frame(&mut s, &reply(h.xid + 7, 0, &[])).await;
        // Keep the socket open: the client must give up by itself.
        let _ = read_frame(&mut s).await;
    });
    let c = Client::connect(&addr, 30_000).await.unwrap();
    let r = c.sync("/").await;
    assert!(matches!(r, Err(ClientError::ConnectionLoss)), "{r:?}");
    assert!(!c.is_connected());
    drop(c);
    server.await.unwrap();
}

#[tokio::test]
async fn silent_server_is_detected_by_the_read_timeout() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (mut s, _) = accept(&l, 300).await;
        // Read pings but never answer them.
        while read_frame(&mut s).await.is_some() {}
    });
    let c = Client::connect(&addr, 300).await.unwrap();
    let mut events = c.take_events().unwrap();
    let started = Instant::now();
    let ev = tokio::time::timeout(Duration::from_secs(3), events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ev.state, KeeperState::Disconnected);
    // Read timeout = 2/3 of the session timeout.
    assert!(started.elapsed() < Duration::from_millis(1_000));
    assert!(!c.is_connected());
    drop(c);
    server.await.unwrap();
}
