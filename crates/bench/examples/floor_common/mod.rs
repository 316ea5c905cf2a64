//! What the two floor programs (`replication_floor`, `kv_replication_floor`)
//! share: the room a log is written into, and the leader's wait for a
//! quorum of acks.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Creates `path` as `bytes` of zeros, synced: room made ahead so that an
/// fdatasync of a later write never has to write the file's size, as
/// Keel's zerofill.rs makes it.
pub fn make_room(path: &Path, bytes: u64) -> io::Result<()> {
    let mut file = File::create(path)?;
    let zeros = vec![0u8; 1 << 20];
    let mut made: u64 = 0;
    while made < bytes {
        file.write_all(&zeros)?;
        made += zeros.len() as u64;
    }
    file.sync_all()
}

/// Blocks until at least `needed` followers have acked `sequence` or
/// later; `acked` holds each follower's last ack. An ack is the 8-byte
/// little-endian sequence number of the record or round it acknowledges.
pub fn await_quorum(
    followers: &mut [TcpStream],
    acked: &mut [u64],
    sequence: u64,
) -> io::Result<()> {
    assert_eq!(followers.len(), acked.len());
    // A quorum of the cluster counts the leader's own copy.
    let nodes = followers.len() + 1;
    let needed = nodes / 2 + 1 - 1;
    while acked.iter().filter(|&&a| a >= sequence).count() < needed {
        await_acks(followers, acked)?;
    }
    Ok(())
}

/// Blocks until at least one follower's connection is readable, then
/// reads one ack from each that is.
fn await_acks(followers: &mut [TcpStream], acked: &mut [u64]) -> io::Result<()> {
    let mut polls: Vec<libc::pollfd> = followers
        .iter()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `polls` is a valid array of pollfd of the length passed.
    let ready = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, -1) };
    if ready < 0 {
        let error = io::Error::last_os_error();
        return if error.kind() == io::ErrorKind::Interrupted {
            Ok(())
        } else {
            Err(error)
        };
    }
    for (index, poll) in polls.iter().enumerate() {
        if poll.revents != 0 {
            let mut ack = [0u8; 8];
            followers[index].read_exact(&mut ack)?;
            let sequence = u64::from_le_bytes(ack);
            assert!(sequence > acked[index], "acks in order");
            acked[index] = sequence;
        }
    }
    Ok(())
}
