//! The floor of a replicated Redis SET on this machine: how many SETs a
//! second a store can acknowledge when each must be on disk on a quorum,
//! with nothing of Keel in the way (issue 17; BENCHMARKS.md, "The floor of
//! a replicated SET").
//!
//! One thread per node, as redis-server is one thread. The leader serves
//! RESP on a port: in one turn of its event loop it reads every client that
//! has bytes, parses whole commands, and when no round is in flight it
//! makes one of everything read: it sends the commands to its followers,
//! appends them to its log (4 KiB blocks rewritten with O_DIRECT, then
//! fdatasync, as Keel's log is written), waits for one follower's ack and
//! answers `+OK` to each command. A follower appends each round the same
//! way and acks. No consensus, no compression, no other command: a SET
//! is only made durable on two nodes and applied. redis-server with `appendfsync always` does
//! the same on one node (and applies the SET); Keel does more.
//!
//! ```text
//! cargo run --release -p keel-bench --example kv_replication_floor -- NODES DIR PORT
//! ```
//!
//! NODES is 1 or 3. Serves until killed. Every node applies each SET to
//! its own keyspace (a hash map), the leader before it answers, a follower
//! after it acks. Commands other than SET get an empty array
//! (redis-benchmark's CONFIG GET) or `+PONG` (PING).

mod floor_common;

use std::collections::HashMap;

/// The keyspace each node applies its rounds to: key to value.
type Keyspace = HashMap<Vec<u8>, Vec<u8>>;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::thread;

/// Keel's log writes whole blocks of this size with O_DIRECT.
const BLOCK_BYTES: usize = 4096;
/// Room made (zero-filled and synced) before serving; the log wraps.
const LOG_FILE_BYTES: u64 = 256 << 20;
/// The most one round carries; a longer batch waits for the next round.
const ROUND_BYTES_MAX: usize = 4 << 20;
/// A client's unparsed bytes beyond this close its connection.
const CLIENT_BUFFER_MAX: usize = 1 << 20;
/// Events taken from epoll at a time.
const EVENTS_MAX: usize = 256;
/// epoll tokens at or above this are clients; below, followers.
const CLIENT_TOKEN_BASE: u64 = 1 << 32;
const LISTENER_TOKEN: u64 = u64::MAX;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: kv_replication_floor NODES(1|3) DIR PORT";
    if args.len() != 4 {
        eprintln!("{usage}");
        std::process::exit(2);
    }
    let nodes: usize = match args[1].parse() {
        Ok(n @ (1 | 3)) => n,
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let Ok(port) = args[3].parse::<u16>() else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    if let Err(error) = serve(nodes, Path::new(&args[2]), port) {
        eprintln!("kv_replication_floor: {error}");
        std::process::exit(1);
    }
}

fn serve(nodes: usize, dir: &Path, port: u16) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut followers = Vec::new();
    for id in 2..=nodes {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let leader_end = TcpStream::connect(listener.local_addr()?)?;
        let (follower_end, _) = listener.accept()?;
        leader_end.set_nodelay(true)?;
        follower_end.set_nodelay(true)?;
        let log = Log::create(dir.join(format!("node{id}.log")))?;
        thread::spawn(move || {
            if let Err(error) = follow(follower_end, log) {
                eprintln!("follower {id}: {error}");
                std::process::exit(1);
            }
        });
        followers.push(leader_end);
    }
    let log = Log::create(dir.join("node1.log"))?;
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    listener.set_nonblocking(true)?;
    println!("serving on 127.0.0.1:{port} with {nodes} node(s)");
    Leader::new(listener, followers, log)?.run()
}

/// A log written as Keel's is: room made ahead, appends rewrite the
/// partial block at the write position and every block after it with
/// O_DIRECT, then fdatasync.
struct Log {
    file: File,
    /// Aligned room for the partial block and the next round's bytes.
    buffer: Vec<u8>,
    buffer_start: usize,
    /// Bytes of the partial block at `position` (its start is aligned).
    tail_bytes: usize,
    /// File offset of the block that holds the write position.
    block_offset: u64,
}

impl Log {
    fn create(path: PathBuf) -> io::Result<Log> {
        floor_common::make_room(&path, LOG_FILE_BYTES)?;
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)?;
        let buffer = vec![0u8; ROUND_BYTES_MAX + 3 * BLOCK_BYTES];
        let buffer_start = buffer.as_ptr().align_offset(BLOCK_BYTES);
        assert!(buffer_start < BLOCK_BYTES);
        Ok(Log {
            file,
            buffer,
            buffer_start,
            tail_bytes: 0,
            block_offset: 0,
        })
    }

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        assert!(!bytes.is_empty() && bytes.len() <= ROUND_BYTES_MAX);
        if self.block_offset + (self.tail_bytes + bytes.len()) as u64 + BLOCK_BYTES as u64
            > LOG_FILE_BYTES
        {
            self.block_offset = 0;
            self.tail_bytes = 0;
        }
        let start = self.buffer_start;
        let end = self.tail_bytes + bytes.len();
        let padded = end.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
        self.buffer[start + self.tail_bytes..start + end].copy_from_slice(bytes);
        self.buffer[start + end..start + padded].fill(0);
        self.file
            .write_all_at(&self.buffer[start..start + padded], self.block_offset)?;
        self.file.sync_data()?;
        // Keep the last partial block at the buffer's start.
        let whole = end / BLOCK_BYTES * BLOCK_BYTES;
        self.buffer.copy_within(start + whole..start + end, start);
        self.tail_bytes = end - whole;
        self.block_offset += whole as u64;
        Ok(())
    }
}

fn follow(mut leader: TcpStream, mut log: Log) -> io::Result<()> {
    let mut header = [0u8; 12];
    let mut round = vec![0u8; ROUND_BYTES_MAX];
    let mut keyspace = Keyspace::new();
    loop {
        leader.read_exact(&mut header)?;
        let sequence = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
        let length = u32::from_le_bytes(header[8..].try_into().expect("4 bytes")) as usize;
        assert!(
            length > 0 && length <= ROUND_BYTES_MAX,
            "round of {length} bytes"
        );
        leader.read_exact(&mut round[..length])?;
        log.append(&round[..length])?;
        leader.write_all(&sequence.to_le_bytes())?;
        // Applied after the ack, as a Keel follower applies a commit.
        apply(&mut keyspace, &round[..length]);
    }
}

struct Client {
    stream: TcpStream,
    unparsed: Vec<u8>,
}

struct Leader {
    epoll: i32,
    listener: TcpListener,
    followers: Vec<TcpStream>,
    acked: Vec<u64>,
    log: Log,
    clients: HashMap<u64, Client>,
    next_client: u64,
    /// Commands read and not yet in a round: their bytes, and per client
    /// how many replies they owe, in order.
    batch: Vec<u8>,
    batch_replies: Vec<(u64, usize)>,
    sequence: u64,
    keyspace: Keyspace,
}

impl Leader {
    fn new(listener: TcpListener, followers: Vec<TcpStream>, log: Log) -> io::Result<Leader> {
        // SAFETY: a plain system call with no pointers.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(io::Error::last_os_error());
        }
        let acked = vec![0; followers.len()];
        let leader = Leader {
            epoll,
            listener,
            followers,
            acked,
            log,
            clients: HashMap::new(),
            next_client: CLIENT_TOKEN_BASE,
            batch: Vec::with_capacity(ROUND_BYTES_MAX),
            batch_replies: Vec::new(),
            sequence: 0,
            keyspace: Keyspace::new(),
        };
        leader.watch(leader.listener.as_raw_fd(), LISTENER_TOKEN)?;
        Ok(leader)
    }

    fn watch(&self, fd: i32, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `event` outlives the call; the kernel copies it.
        if unsafe { libc::epoll_ctl(self.epoll, libc::EPOLL_CTL_ADD, fd, &mut event) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn run(mut self) -> io::Result<()> {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS_MAX];
        loop {
            // Wait only when nothing is left to make a round of.
            let timeout_ms = if self.batch.is_empty() { -1 } else { 0 };
            // SAFETY: `events` has room for EVENTS_MAX entries.
            let ready = unsafe {
                libc::epoll_wait(
                    self.epoll,
                    events.as_mut_ptr(),
                    EVENTS_MAX as i32,
                    timeout_ms,
                )
            };
            if ready < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            for event in &events[..ready as usize] {
                let token = event.u64;
                if token == LISTENER_TOKEN {
                    self.accept()?;
                } else {
                    self.read_client(token);
                }
            }
            if !self.batch.is_empty() {
                self.round()?;
            }
        }
    }

    fn accept(&mut self) -> io::Result<()> {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(true)?;
                    stream.set_nodelay(true)?;
                    let token = self.next_client;
                    self.next_client += 1;
                    self.watch(stream.as_raw_fd(), token)?;
                    self.clients.insert(
                        token,
                        Client {
                            stream,
                            unparsed: Vec::new(),
                        },
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads what the client has sent and queues its whole commands; a
    /// closed or misbehaving client is dropped.
    fn read_client(&mut self, token: u64) {
        let Some(client) = self.clients.get_mut(&token) else {
            return;
        };
        let mut chunk = [0u8; 16384];
        let mut open = true;
        loop {
            match client.stream.read(&mut chunk) {
                Ok(0) => {
                    open = false;
                    break;
                }
                Ok(n) => client.unparsed.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    open = false;
                    break;
                }
            }
        }
        let mut consumed = 0;
        let mut immediate = Vec::new();
        while let Some((length, name)) = parse_command(&client.unparsed[consumed..]) {
            let command = &client.unparsed[consumed..consumed + length];
            if name.eq_ignore_ascii_case(b"SET") && set_arguments(command).is_some() {
                self.batch.extend_from_slice(command);
                match self.batch_replies.last_mut() {
                    Some((last, count)) if *last == token => *count += 1,
                    _ => self.batch_replies.push((token, 1)),
                }
            } else if name.eq_ignore_ascii_case(b"SET") {
                immediate
                    .extend_from_slice(b"-ERR wrong number of arguments for 'set' command\r\n");
            } else if name.eq_ignore_ascii_case(b"PING") {
                immediate.extend_from_slice(b"+PONG\r\n");
            } else {
                immediate.extend_from_slice(b"*0\r\n");
            }
            consumed += length;
        }
        client.unparsed.drain(..consumed);
        if !immediate.is_empty() && write_fully(&mut client.stream, &immediate).is_err() {
            open = false;
        }
        if !open || client.unparsed.len() > CLIENT_BUFFER_MAX {
            // Its replies still owed are dropped with it.
            self.clients.remove(&token);
        }
    }

    /// Makes the batch durable on a quorum, then answers it.
    fn round(&mut self) -> io::Result<()> {
        assert!(
            self.batch.len() <= ROUND_BYTES_MAX,
            "a round larger than ROUND_BYTES_MAX"
        );
        self.sequence += 1;
        let mut header = [0u8; 12];
        header[..8].copy_from_slice(&self.sequence.to_le_bytes());
        header[8..].copy_from_slice(&(self.batch.len() as u32).to_le_bytes());
        for follower in &mut self.followers {
            follower.write_all(&header)?;
            follower.write_all(&self.batch)?;
        }
        self.log.append(&self.batch)?;
        floor_common::await_quorum(&mut self.followers, &mut self.acked, self.sequence)?;
        apply(&mut self.keyspace, &self.batch);
        let ok = b"+OK\r\n";
        let mut reply = Vec::new();
        for (token, count) in std::mem::take(&mut self.batch_replies) {
            if let Some(client) = self.clients.get_mut(&token) {
                reply.clear();
                for _ in 0..count {
                    reply.extend_from_slice(ok);
                }
                if write_fully(&mut client.stream, &reply).is_err() {
                    self.clients.remove(&token);
                }
            }
        }
        self.batch.clear();
        Ok(())
    }
}

/// Writes all of `bytes` to a non-blocking socket (a client that does not
/// read its replies stalls the floor, which a probe can accept).
fn write_fully(stream: &mut TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::yield_now(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sets every SET's key to its value; the bytes are whole SET commands.
fn apply(keyspace: &mut Keyspace, mut bytes: &[u8]) {
    while let Some((length, _)) = parse_command(bytes) {
        let (key, value) = set_arguments(&bytes[..length]).expect("a round holds whole SETs");
        match keyspace.get_mut(key) {
            Some(old) => {
                old.clear();
                old.extend_from_slice(value);
            }
            None => {
                keyspace.insert(key.to_vec(), value.to_vec());
            }
        }
        bytes = &bytes[length..];
    }
    assert!(bytes.is_empty(), "a round ends with a whole command");
}

/// The key and value of a whole `SET key value` command.
fn set_arguments(command: &[u8]) -> Option<(&[u8], &[u8])> {
    let (count, mut at) = parse_header(command, b'*')?;
    let mut arguments = [&[][..]; 3];
    for argument in arguments.iter_mut().take(count) {
        let (length, start) = parse_header(&command[at..], b'$')?;
        let start = at + start;
        *argument = command.get(start..start.checked_add(length)?)?;
        at = start + length + 2;
    }
    (count >= 3).then_some((arguments[1], arguments[2]))
}

/// One whole RESP command at the start of `bytes`: its length and its
/// name, or None if more bytes are needed (or it is not an array of bulk
/// strings, which redis-benchmark never sends).
fn parse_command(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let (count, mut at) = parse_header(bytes, b'*')?;
    let mut name: &[u8] = &[];
    for index in 0..count {
        let (length, start) = parse_header(&bytes[at..], b'$')?;
        let start = at + start;
        let end = start.checked_add(length)?;
        if bytes.len() < end + 2 {
            return None;
        }
        if index == 0 {
            name = &bytes[start..end];
        }
        at = end + 2;
    }
    Some((at, name))
}

/// `<kind><decimal>\r\n`: the number and the bytes it took.
fn parse_header(bytes: &[u8], kind: u8) -> Option<(usize, usize)> {
    if bytes.first() != Some(&kind) {
        return None;
    }
    let line_end = bytes.iter().position(|&b| b == b'\r')?;
    if bytes.get(line_end + 1) != Some(&b'\n') {
        return None;
    }
    let number = std::str::from_utf8(&bytes[1..line_end])
        .ok()?
        .parse()
        .ok()?;
    Some((number, line_end + 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: &str) -> Vec<u8> {
        format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n",
            key.len(),
            value.len()
        )
        .into_bytes()
    }

    #[test]
    fn commands_are_parsed_whole_or_not_at_all() {
        let command = set("key:1", "abc");
        assert_eq!(parse_command(&command), Some((command.len(), &b"SET"[..])));
        for cut in 0..command.len() {
            assert_eq!(parse_command(&command[..cut]), None, "cut at {cut}");
        }
        assert_eq!(set_arguments(&command), Some((&b"key:1"[..], &b"abc"[..])));
        assert_eq!(set_arguments(b"*2\r\n$3\r\nSET\r\n$1\r\nk\r\n"), None);
        assert_eq!(parse_command(b"PING\r\n"), None);
        assert_eq!(parse_command(b"*1\r\n$99999999999999999999999\r\n"), None);
    }

    #[test]
    fn a_round_is_applied_in_order() {
        let mut round = set("a", "1");
        round.extend(set("b", "2"));
        round.extend(set("a", "333"));
        let mut keyspace = Keyspace::new();
        apply(&mut keyspace, &round);
        assert_eq!(keyspace.len(), 2);
        assert_eq!(keyspace[&b"a"[..]], b"333");
        assert_eq!(keyspace[&b"b"[..]], b"2");
    }

    /// Appends land back to back in the file, across block boundaries,
    /// with zeros after the last.
    #[test]
    fn appends_land_back_to_back() {
        let dir = std::env::temp_dir().join(format!("kv-floor-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let mut log = match Log::create(path.clone()) {
            Ok(log) => log,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                eprintln!("this file system refuses O_DIRECT; not tested");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let mut expected = Vec::new();
        for (i, size) in [3000, 3000, 5000, 1, 4096].into_iter().enumerate() {
            let bytes = vec![i as u8 + 1; size];
            log.append(&bytes).unwrap();
            expected.extend_from_slice(&bytes);
        }
        let file = std::fs::read(&path).unwrap();
        assert_eq!(&file[..expected.len()], &expected[..]);
        assert!(file[expected.len()..].iter().all(|&b| b == 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
