//! The driver thread's one wait: epoll over the inbound peer connections
//! it reads itself, and an eventfd (the bell) that the queues feeding it
//! ring.
//!
//! A peer's frame used to reach Raft through a reader thread: the reader
//! woke for the frame, then woke the driver through a channel. On the VMs
//! Keel is measured on, a thread wake-up across cores costs more CPU than
//! everything else a small append needs, and a write round takes several
//! frames per node (the append, its ack, forwarded proposals). Here the
//! driver is woken by the socket itself and parses the frame in place.
//!
//! The bell keeps the old wake-up rules of the driver's `select!`: a
//! control input (reads, touches, a snapshot's end, shutdown) always wakes
//! a sleeping driver; a proposal wakes it only when it sleeps listening for
//! proposals, that is when it is not holding its next batch (`Core::
//! holding`). The sleeping side publishes how it sleeps, then looks at its
//! queues once more; a queuing side queues, then looks at how the driver
//! sleeps (both with a SeqCst fence between): one of the two always sees
//! the other, so no input waits for the next tick.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::transport::{InboundConnection, PeerInput};

const AWAKE: u8 = 0;
/// Asleep; only control inputs and peer frames wake it.
const ASLEEP_HOLDING: u8 = 1;
/// Asleep; a proposal wakes it too.
const ASLEEP: u8 = 2;

/// Events one `epoll_wait` returns at most (the bell and the inbound
/// connections: two per peer).
const EVENTS_MAX: usize = 64;
/// The epoll token of the bell; a connection's token is its key.
const BELL_TOKEN: u64 = 0;
/// Forwarded batches read off the sockets and not yet taken into a batch
/// (`Core::batch_has_room`): above this, connections that brought one are
/// not read until half of them are taken.
pub(crate) const FORWARDS_HELD_MAX: usize = 64 * 1024;

/// The kernel has no epoll_pwait2 (before Linux 5.11): waits round up to
/// milliseconds.
static PWAIT2_MISSING: AtomicBool = AtomicBool::new(false);

/// How the threads feeding the driver wake it.
pub(crate) struct Bell {
    state: AtomicU8,
    fd: OwnedFd,
}

impl Bell {
    pub(crate) fn new() -> std::io::Result<Arc<Bell>> {
        // SAFETY: eventfd takes no pointers; the descriptor it returns is
        // owned by the OwnedFd from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Arc::new(Bell {
            state: AtomicU8::new(AWAKE),
            // SAFETY: `fd` is a fresh descriptor nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        }))
    }

    /// After queuing a control input: wakes the driver if it sleeps.
    pub(crate) fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.state.load(Ordering::Relaxed) != AWAKE
            && self.state.swap(AWAKE, Ordering::SeqCst) != AWAKE
        {
            self.write();
        }
    }

    /// After queuing a proposal: wakes the driver only if it sleeps
    /// listening for proposals.
    pub(crate) fn ring_proposal(&self) {
        fence(Ordering::SeqCst);
        if self.state.load(Ordering::Relaxed) == ASLEEP
            && self
                .state
                .compare_exchange(ASLEEP, AWAKE, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
        {
            self.write();
        }
    }

    fn write(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd. It
        // fails only when the counter is at its maximum, which still
        // leaves it readable, so the driver wakes either way.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn drain(&self) {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN when not rung.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
    }
}

/// The driver's epoll: the bell and the inbound peer connections, and the
/// forwarded batches read off them that wait for room in a batch.
pub(crate) struct Poller {
    epoll: OwnedFd,
    bell: Arc<Bell>,
    arrivals: Receiver<InboundConnection>,
    connections: HashMap<u64, Inbound>,
    next_token: u64,
    events: Vec<libc::epoll_event>,
    forwards: VecDeque<PeerInput>,
    paused: usize,
    /// Connections adopted and not read yet: bytes read with the
    /// handshake wait in their buffers, where epoll does not see them.
    fresh: Vec<u64>,
}

struct Inbound {
    connection: InboundConnection,
    /// Not read while the held forwards are over `FORWARDS_HELD_MAX`.
    paused: bool,
}

impl Poller {
    pub(crate) fn new(
        bell: Arc<Bell>,
        arrivals: Receiver<InboundConnection>,
    ) -> std::io::Result<Poller> {
        // SAFETY: epoll_create1 takes no pointers; the descriptor is owned
        // by the OwnedFd from here on.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        let poller = Poller {
            epoll,
            bell,
            arrivals,
            connections: HashMap::new(),
            next_token: BELL_TOKEN + 1,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS_MAX],
            forwards: VecDeque::new(),
            paused: 0,
            fresh: Vec::new(),
        };
        poller.control(
            libc::EPOLL_CTL_ADD,
            poller.bell.fd.as_raw_fd(),
            BELL_TOKEN,
            true,
        )?;
        Ok(poller)
    }

    /// Sleeps until a peer frame arrives, the bell rings or `timeout`
    /// passes (not at all when `timeout` is zero or `pending` finds an
    /// input queued once the driver said how it sleeps), then reads every
    /// connection with something to read: each input goes to `deliver`,
    /// except forwarded batches, which wait in `forwards`.
    pub(crate) fn wait(
        &mut self,
        holding: bool,
        timeout: Duration,
        pending: impl Fn() -> bool,
        deliver: &mut dyn FnMut(PeerInput),
    ) {
        self.adopt_arrivals(deliver);
        let mut timeout = timeout;
        if !timeout.is_zero() {
            let asleep = if holding { ASLEEP_HOLDING } else { ASLEEP };
            self.bell.state.store(asleep, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if pending() {
                timeout = Duration::ZERO;
            }
        }
        let ready = self.epoll_wait(timeout);
        self.bell.state.store(AWAKE, Ordering::SeqCst);
        for index in 0..ready {
            let token = self.events[index].u64;
            if token == BELL_TOKEN {
                self.bell.drain();
                continue;
            }
            self.read(token, deliver);
        }
        self.adopt_arrivals(deliver);
    }

    /// Forwarded batches read and not yet taken.
    pub(crate) fn has_forwards(&self) -> bool {
        !self.forwards.is_empty()
    }

    /// The oldest forwarded batch read and not yet taken; connections
    /// paused for lack of room are read again once half are taken.
    pub(crate) fn take_forward(&mut self) -> Option<PeerInput> {
        let forward = self.forwards.pop_front()?;
        if self.paused > 0 && self.forwards.len() <= FORWARDS_HELD_MAX / 2 {
            self.resume_all();
        }
        Some(forward)
    }

    fn read(&mut self, token: u64, deliver: &mut dyn FnMut(PeerInput)) {
        let Some(inbound) = self.connections.get_mut(&token) else {
            return;
        };
        let forwards = &mut self.forwards;
        let result = inbound.connection.read_now(&mut |input| match input {
            PeerInput::Forward(_) => forwards.push_back(input),
            input => deliver(input),
        });
        match result {
            Ok(true) => {
                if self.forwards.len() > FORWARDS_HELD_MAX && !inbound.paused {
                    inbound.paused = true;
                    self.paused += 1;
                    let fd = inbound.connection.raw_fd();
                    let _ = self.control(libc::EPOLL_CTL_MOD, fd, token, false);
                }
            }
            Ok(false) => self.close(token, None),
            Err(reason) => self.close(token, Some(reason)),
        }
    }

    fn close(&mut self, token: u64, reason: Option<crate::transport::PeerError>) {
        let inbound = self.connections.remove(&token).expect("a known connection");
        if inbound.paused {
            self.paused -= 1;
        }
        let _ = self.control(
            libc::EPOLL_CTL_DEL,
            inbound.connection.raw_fd(),
            token,
            false,
        );
        inbound.connection.finish(reason);
    }

    fn resume_all(&mut self) {
        let paused: Vec<(u64, RawFd)> = self
            .connections
            .iter_mut()
            .filter(|(_, inbound)| inbound.paused)
            .map(|(&token, inbound)| {
                inbound.paused = false;
                (token, inbound.connection.raw_fd())
            })
            .collect();
        self.paused = 0;
        for (token, fd) in paused {
            let _ = self.control(libc::EPOLL_CTL_MOD, fd, token, true);
        }
    }

    /// Connections the transport authenticated since the last look, each
    /// read at once.
    fn adopt_arrivals(&mut self, deliver: &mut dyn FnMut(PeerInput)) {
        while let Ok(connection) = self.arrivals.try_recv() {
            let token = self.next_token;
            self.next_token += 1;
            let fd = connection.raw_fd();
            if let Err(error) = self.control(libc::EPOLL_CTL_ADD, fd, token, true) {
                connection.finish(Some(error.into()));
                continue;
            }
            self.connections.insert(
                token,
                Inbound {
                    connection,
                    paused: false,
                },
            );
            // Frames that came with the handshake's last read wait in the
            // connection's buffer, not in the socket: read them now.
            self.fresh.push(token);
        }
        for token in std::mem::take(&mut self.fresh) {
            self.read(token, deliver);
        }
    }

    fn control(
        &self,
        op: libc::c_int,
        fd: RawFd,
        token: u64,
        readable: bool,
    ) -> std::io::Result<()> {
        let mut event = libc::epoll_event {
            events: if readable { libc::EPOLLIN as u32 } else { 0 },
            u64: token,
        };
        // SAFETY: `event` is live for the call; the descriptors are ours.
        let done = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut event) };
        if done < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// epoll_pwait2 (a timeout in nanoseconds: a linger of 300 µs must not
    /// become a millisecond); epoll_wait rounding up where the kernel
    /// lacks it. The number of events in `self.events`.
    fn epoll_wait(&mut self, timeout: Duration) -> usize {
        let events = self.events.as_mut_ptr();
        let capacity = self.events.len() as libc::c_int;
        let timespec = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        if !PWAIT2_MISSING.load(Ordering::Relaxed) {
            // SAFETY: `events` has room for `capacity` entries and
            // `timespec` lives for the call; no signal mask is passed.
            let ready = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.epoll.as_raw_fd(),
                    events,
                    capacity,
                    &timespec as *const libc::timespec,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if ready >= 0 {
                return ready as usize;
            }
            let error = std::io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EINTR) => return 0,
                Some(libc::ENOSYS) => PWAIT2_MISSING.store(true, Ordering::Relaxed),
                _ => panic!("epoll_pwait2 on the driver's own epoll failed: {error}"),
            }
        }
        let millis = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: as above.
        let ready = unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), events, capacity, millis) };
        ready.max(0) as usize
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Bell, Poller};

    fn poller() -> (std::sync::Arc<Bell>, Poller) {
        let bell = Bell::new().unwrap();
        let (_, arrivals) = crossbeam_channel::unbounded();
        let poller = Poller::new(bell.clone(), arrivals).unwrap();
        (bell, poller)
    }

    /// How long a wait of `timeout` lasts while another thread rings.
    fn waited(holding: bool, ring: fn(&Bell), timeout: Duration) -> Duration {
        let (bell, mut poller) = poller();
        let ringer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            ring(&bell);
        });
        let started = Instant::now();
        poller.wait(holding, timeout, || false, &mut |_| panic!("no peer"));
        let waited = started.elapsed();
        ringer.join().unwrap();
        waited
    }

    #[test]
    fn a_control_input_wakes_the_driver_a_proposal_only_when_it_listens() {
        let long = Duration::from_secs(10);
        assert!(waited(false, Bell::ring, long) < Duration::from_secs(5));
        assert!(waited(true, Bell::ring, long) < Duration::from_secs(5));
        assert!(waited(false, Bell::ring_proposal, long) < Duration::from_secs(5));
        // A holding driver sleeps its timeout out through a proposal.
        let short = Duration::from_millis(600);
        assert!(waited(true, Bell::ring_proposal, short) >= short);
    }

    #[test]
    fn an_input_queued_before_the_sleep_is_seen_without_sleeping() {
        let (_, mut poller) = poller();
        let started = Instant::now();
        poller.wait(false, Duration::from_secs(10), || true, &mut |_| {
            panic!("no peer")
        });
        assert!(started.elapsed() < Duration::from_secs(5));
        // A short timeout is waited out, not skipped.
        let started = Instant::now();
        for _ in 0..20 {
            poller.wait(false, Duration::from_micros(100), || false, &mut |_| {
                panic!("no peer")
            });
        }
        assert!(started.elapsed() >= Duration::from_micros(2000));
    }
}
