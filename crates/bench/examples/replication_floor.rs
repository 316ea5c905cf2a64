//! The floor of a replicated write on this machine: the least time a
//! single client's write can take when it must be on disk on a quorum,
//! measured with nothing of Keel in the way.
//!
//! Each "node" is one thread with blocking IO, the least a Raft node can
//! be: the leader reads a request from its client, sends it to every
//! follower, appends it to its own log (a 4 KiB O_DIRECT block rewrite
//! and an fdatasync, as Keel's log does), waits until a quorum holds it
//! and replies. A follower reads the record, appends it the same way and
//! acks. No consensus, no state machine, no batching: one request in
//! flight. What Keel spends above this is its own cost; what this spends
//! is the machine's.
//!
//! ```text
//! cargo run --release -p keel-bench --example replication_floor -- DIR [REQUESTS]
//! ```
//!
//! `DIR` must be on the file system the servers use. Prints one line per
//! measurement: `name p50_us p99_us`. `bench/probes/replication_floor.py`
//! runs it beside a 3-node Keel and prints the two side by side.

mod floor_common;

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Instant;

/// Keel's log writes whole blocks of this size with O_DIRECT.
const BLOCK_BYTES: usize = 4096;
/// A request's payload: compare.py's fdatasync probe appends 128 bytes.
const RECORD_BYTES: usize = 128;
/// A record on the wire between nodes: its sequence number, then the payload.
const FRAME_BYTES: usize = 8 + RECORD_BYTES;
/// Room made (zero-filled and synced) before the timed appends, so an
/// fdatasync never has to write the file's size: as zerofill.rs does.
const LOG_FILE_BYTES: u64 = 16 << 20;
/// Requests timed per measurement unless the command line says otherwise.
const REQUESTS_DEFAULT: usize = 3000;
/// Requests made before the timed ones (connections and caches warm).
const WARMUP_REQUESTS: usize = 200;
/// Upper bound on the requests one measurement may be asked for.
const REQUESTS_MAX: usize = 1_000_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 || args.len() > 3 {
        eprintln!("usage: replication_floor DIR [REQUESTS]");
        std::process::exit(2);
    }
    let dir = PathBuf::from(&args[1]);
    let requests = match args.get(2).map(|s| s.parse::<usize>()) {
        None => REQUESTS_DEFAULT,
        Some(Ok(n)) if (1..=REQUESTS_MAX).contains(&n) => n,
        Some(_) => {
            eprintln!("REQUESTS must be a number from 1 to {REQUESTS_MAX}");
            std::process::exit(2);
        }
    };
    if let Err(error) = run(&dir, requests) {
        eprintln!("replication_floor: {error}");
        std::process::exit(1);
    }
}

fn run(dir: &Path, requests: usize) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    report("fsync_direct", &appends(dir, true, requests)?);
    report("fsync_buffered", &appends(dir, false, requests)?);
    report("loopback_rtt", &round_trips(requests)?);
    report("one_node", &cluster(dir, 1, requests)?);
    report("three_nodes", &cluster(dir, 3, requests)?);
    Ok(())
}

fn report(name: &str, samples_ns: &[u64]) {
    assert!(!samples_ns.is_empty());
    let mut sorted = samples_ns.to_vec();
    sorted.sort_unstable();
    let at =
        |fraction: f64| sorted[((sorted.len() - 1) as f64 * fraction) as usize] as f64 / 1000.0;
    println!("{name} {:.1} {:.1}", at(0.50), at(0.99));
}

/// A log file written as Keel's is: room made ahead, each append
/// rewrites the 4 KiB block that holds the write position (O_DIRECT) or
/// writes just its bytes (through the page cache), then fdatasync.
struct Log {
    file: File,
    path: PathBuf,
    buffer: Vec<u8>,
    /// Offset in `buffer` where the aligned block starts.
    block_start: usize,
    position: u64,
    direct: bool,
}

impl Log {
    fn create(path: PathBuf, direct: bool) -> io::Result<Log> {
        floor_common::make_room(&path, LOG_FILE_BYTES)?;
        let mut options = OpenOptions::new();
        options.write(true);
        if direct {
            options.custom_flags(libc::O_DIRECT);
        }
        let file = options.open(&path)?;
        let buffer = vec![0u8; 2 * BLOCK_BYTES];
        let block_start = buffer.as_ptr().align_offset(BLOCK_BYTES);
        assert!(block_start < BLOCK_BYTES);
        Ok(Log {
            file,
            path,
            buffer,
            block_start,
            position: 0,
            direct,
        })
    }

    fn append(&mut self, record: &[u8]) -> io::Result<()> {
        assert!(!record.is_empty() && record.len() <= BLOCK_BYTES);
        let block_bytes = BLOCK_BYTES as u64;
        let length = record.len() as u64;
        if self.position % block_bytes + length > block_bytes {
            // The record would cross a block: it starts the next one.
            self.position = (self.position / block_bytes + 1) * block_bytes;
        }
        if self.position + length > LOG_FILE_BYTES {
            // The room is made once; the log wraps to the file's start.
            self.position = 0;
        }
        let in_block = (self.position % block_bytes) as usize;
        if in_block == 0 {
            // A block begins: nothing of the last one's records stays in it.
            self.block_mut().fill(0);
        }
        let block_offset = self.position - in_block as u64;
        self.block_mut()[in_block..in_block + record.len()].copy_from_slice(record);
        if self.direct {
            let block = &self.buffer[self.block_start..self.block_start + BLOCK_BYTES];
            self.file.write_all_at(block, block_offset)?;
        } else {
            self.file.write_all_at(record, self.position)?;
        }
        self.file.sync_data()?;
        self.position += record.len() as u64;
        Ok(())
    }

    fn block_mut(&mut self) -> &mut [u8] {
        &mut self.buffer[self.block_start..self.block_start + BLOCK_BYTES]
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn appends(dir: &Path, direct: bool, requests: usize) -> io::Result<Vec<u64>> {
    let mut log = Log::create(dir.join("floor-alone.log"), direct)?;
    let record = [7u8; RECORD_BYTES];
    let mut samples_ns = Vec::with_capacity(requests);
    for i in 0..WARMUP_REQUESTS + requests {
        let start = Instant::now();
        log.append(&record)?;
        if i >= WARMUP_REQUESTS {
            samples_ns.push(start.elapsed().as_nanos() as u64);
        }
    }
    Ok(samples_ns)
}

fn connected_pair() -> io::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let near = TcpStream::connect(listener.local_addr()?)?;
    let (far, _) = listener.accept()?;
    near.set_nodelay(true)?;
    far.set_nodelay(true)?;
    Ok((near, far))
}

fn round_trips(requests: usize) -> io::Result<Vec<u64>> {
    let (mut near, mut far) = connected_pair()?;
    let echo = thread::spawn(move || -> io::Result<()> {
        let mut record = [0u8; RECORD_BYTES];
        loop {
            match far.read_exact(&mut record) {
                Ok(()) => far.write_all(&record)?,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    });
    let mut record = [3u8; RECORD_BYTES];
    let mut samples_ns = Vec::with_capacity(requests);
    for i in 0..WARMUP_REQUESTS + requests {
        let start = Instant::now();
        near.write_all(&record)?;
        near.read_exact(&mut record)?;
        if i >= WARMUP_REQUESTS {
            samples_ns.push(start.elapsed().as_nanos() as u64);
        }
    }
    drop(near);
    echo.join().expect("echo thread panicked")?;
    Ok(samples_ns)
}

/// One client, one leader, `nodes - 1` followers, each a thread; the
/// client's latency per request.
fn cluster(dir: &Path, nodes: usize, requests: usize) -> io::Result<Vec<u64>> {
    assert!(nodes == 1 || nodes == 3);
    let (mut client, leader_side) = connected_pair()?;
    let mut to_followers = Vec::new();
    let mut followers = Vec::new();
    for id in 1..nodes {
        let (leader_end, follower_end) = connected_pair()?;
        to_followers.push(leader_end);
        let log = Log::create(dir.join(format!("floor-node{}.log", id + 1)), true)?;
        followers.push(thread::spawn(move || follow(follower_end, log)));
    }
    let log = Log::create(dir.join("floor-node1.log"), true)?;
    let leader = thread::spawn(move || lead(leader_side, to_followers, log));

    let mut record = [5u8; RECORD_BYTES];
    let mut reply = [0u8; 8];
    let mut samples_ns = Vec::with_capacity(requests);
    for i in 0..WARMUP_REQUESTS + requests {
        record[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let start = Instant::now();
        client.write_all(&record)?;
        client.read_exact(&mut reply)?;
        if i >= WARMUP_REQUESTS {
            samples_ns.push(start.elapsed().as_nanos() as u64);
        }
        assert_eq!(u64::from_le_bytes(reply), i as u64 + 1, "replies in order");
    }
    drop(client);
    leader.join().expect("leader thread panicked")?;
    for follower in followers {
        follower.join().expect("follower thread panicked")?;
    }
    Ok(samples_ns)
}

fn follow(mut leader: TcpStream, mut log: Log) -> io::Result<()> {
    let mut frame = [0u8; FRAME_BYTES];
    loop {
        match leader.read_exact(&mut frame) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        log.append(&frame[8..])?;
        leader.write_all(&frame[..8])?;
    }
}

fn lead(mut client: TcpStream, mut followers: Vec<TcpStream>, mut log: Log) -> io::Result<()> {
    let mut acked = vec![0u64; followers.len()];
    let mut frame = [0u8; FRAME_BYTES];
    let mut sequence: u64 = 0;
    loop {
        match client.read_exact(&mut frame[8..]) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return drain(followers),
            Err(e) => return Err(e),
        }
        sequence += 1;
        frame[..8].copy_from_slice(&sequence.to_le_bytes());
        for follower in &mut followers {
            follower.write_all(&frame)?;
        }
        log.append(&frame[8..])?;
        floor_common::await_quorum(&mut followers, &mut acked, sequence)?;
        client.write_all(&sequence.to_le_bytes())?;
    }
}

/// Tells every follower the run is over and reads its last acks, so that
/// no connection closes with bytes unread (which would reset it).
fn drain(followers: Vec<TcpStream>) -> io::Result<()> {
    for mut follower in followers {
        follower.shutdown(std::net::Shutdown::Write)?;
        io::copy(&mut follower, &mut io::sink())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records land where a reader of the log expects them: packed within
    /// a block, a record that would cross a block starting the next one,
    /// zeros after the last, in both ways of writing.
    #[test]
    fn appends_land_where_a_reader_expects_them() {
        let dir =
            std::env::temp_dir().join(format!("replication-floor-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for direct in [false, true] {
            for (size, count, expected_offset) in
                [(RECORD_BYTES, 100, RECORD_BYTES), (3000, 5, BLOCK_BYTES)]
            {
                let path = dir.join(format!("log-{direct}-{size}"));
                let mut log = match Log::create(path.clone(), direct) {
                    Ok(log) => log,
                    Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
                        eprintln!("this file system refuses O_DIRECT; its arm is not tested");
                        break;
                    }
                    Err(e) => panic!("{e}"),
                };
                for i in 0..count {
                    log.append(&vec![i as u8 + 1; size]).unwrap();
                }
                let bytes = std::fs::read(&path).unwrap();
                assert_eq!(bytes.len() as u64, LOG_FILE_BYTES);
                for i in 0..count {
                    let at = i * expected_offset;
                    assert!(
                        bytes[at..at + size].iter().all(|&b| b == i as u8 + 1),
                        "record {i}"
                    );
                    let gap_end = (i + 1) * expected_offset;
                    assert!(
                        bytes[at + size..gap_end].iter().all(|&b| b == 0),
                        "after record {i}"
                    );
                }
                assert!(
                    bytes[count * expected_offset..].iter().all(|&b| b == 0),
                    "past the end"
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
