//! Two links joined in memory: engine tests without sockets.
//!
//! [`MemoryLink::pair`] gives two ends, each with an address as a NIC would
//! have (`<ip>:4791`). What one end sends, the other receives, in order and
//! unchanged — as over the loopback interface, with these properties of a
//! real UDP socket kept, so the engine cannot tell the difference:
//!
//! * a run of several packets arrives as **one datagram with its segment
//!   size**, as UDP GRO delivers a GSO send, so the engine's splitting of
//!   coalesced datagrams is exercised;
//! * the receiver learns the sender's address and port, and not its own
//!   address (a socket bound to one address does not report it);
//! * readiness is an eventfd that polls readable exactly while datagrams
//!   wait, so the worker thread sleeps and wakes as it does on a socket;
//! * a receiver that falls more than [`SOCKET_BUFFER`] bytes behind loses
//!   what does not fit, as a full socket buffer does.
//!
//! Packets to any address but the peer's go nowhere. Faults and capture wrap
//! a memory link like any other.

use super::udp::SOCKET_BUFFER;
use super::{Datagram, Link, Runs};
use crate::event::EventFd;
use ndverbs_proto::time::Instant;
use ndverbs_wire::ip::ROCEV2_PORT;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

/// One end of an in-memory link pair (see the module docs).
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::memory::MemoryLink;
/// use ndverbs_engine::link::{IoPiece, Link, Run, Runs, MAX_DATAGRAM};
/// use ndverbs_proto::time::Instant;
/// let (mut a, mut b) = MemoryLink::pair("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap())?;
/// // Three 100-byte packets in one run arrive as one coalesced datagram.
/// let bytes = [7u8; 300];
/// let (pieces, run) = ([IoPiece::of(&bytes)], [Run { iov: (0, 1), len: 300, seg: 100 }]);
/// // SAFETY: the piece is a live local buffer.
/// assert_eq!(a.send_runs(unsafe { Runs::new(&pieces, &run) }?, b.local_addr())?, 1);
/// let mut buf = vec![0; MAX_DATAGRAM];
/// let d = b.recv(&mut buf, Instant::ZERO)?.unwrap();
/// assert_eq!((d.src, d.len, d.seg), (a.local_addr(), 300, 100));
/// assert!(b.recv(&mut buf, Instant::ZERO)?.is_none());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct MemoryLink {
    local: SocketAddr,
    peer: SocketAddr,
    /// What this end receives.
    inbox: Arc<Inbox>,
    /// What the peer receives.
    outbox: Arc<Inbox>,
}

#[derive(Debug)]
struct Inbox {
    queue: Mutex<Queue>,
    /// Readable while `queue` holds datagrams (signalled and drained under
    /// its lock, so the two never disagree for long).
    ready: EventFd,
}

#[derive(Debug, Default)]
struct Queue {
    datagrams: VecDeque<(Datagram, Vec<u8>)>,
    bytes: usize,
}

impl Inbox {
    fn new() -> io::Result<Arc<Inbox>> {
        Ok(Arc::new(Inbox {
            queue: Mutex::default(),
            ready: EventFd::new()?,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, d: Datagram, bytes: Vec<u8>) {
        let mut q = self.lock();
        if q.bytes + bytes.len() > SOCKET_BUFFER {
            return;
        }
        q.bytes += bytes.len();
        q.datagrams.push_back((d, bytes));
        self.ready.signal();
    }
}

impl MemoryLink {
    /// Two ends, at `a:4791` and `b:4791`, joined to each other.
    pub fn pair(a: IpAddr, b: IpAddr) -> io::Result<(MemoryLink, MemoryLink)> {
        let (a, b) = (
            SocketAddr::new(a, ROCEV2_PORT),
            SocketAddr::new(b, ROCEV2_PORT),
        );
        let (to_a, to_b) = (Inbox::new()?, Inbox::new()?);
        Ok((
            MemoryLink {
                local: a,
                peer: b,
                inbox: to_a.clone(),
                outbox: to_b.clone(),
            },
            MemoryLink {
                local: b,
                peer: a,
                inbox: to_b,
                outbox: to_a,
            },
        ))
    }

    /// The other end's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn deliver(&self, bytes: Vec<u8>, seg: usize) {
        let d = Datagram {
            src: self.local,
            dst: None,
            ecn: 0,
            rx_time: None,
            len: bytes.len(),
            seg: if seg > 0 && seg < bytes.len() {
                seg
            } else {
                bytes.len()
            },
        };
        self.outbox.push(d, bytes);
    }
}

impl Link for MemoryLink {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn gso(&self) -> bool {
        true
    }

    fn fd(&self) -> RawFd {
        self.inbox.ready.fd()
    }

    fn send(&mut self, pkt: &[u8], dst: SocketAddr) -> io::Result<()> {
        if dst == self.peer {
            self.deliver(pkt.to_vec(), pkt.len());
        }
        Ok(())
    }

    fn send_runs(&mut self, runs: Runs<'_>, dst: SocketAddr) -> io::Result<usize> {
        let runs = runs.take(Runs::MAX);
        if dst == self.peer {
            for (i, r) in runs.runs().iter().enumerate() {
                let mut bytes = Vec::with_capacity(r.len);
                runs.gather(i, &mut bytes);
                self.deliver(bytes, r.seg);
            }
        }
        Ok(runs.len())
    }

    fn recv(&mut self, buf: &mut [u8], _now: Instant) -> io::Result<Option<Datagram>> {
        let mut q = self.inbox.lock();
        let Some((d, bytes)) = q.datagrams.pop_front() else {
            return Ok(None);
        };
        q.bytes -= bytes.len();
        if q.datagrams.is_empty() {
            self.inbox.ready.drain();
        }
        drop(q);
        let Some(to) = buf.get_mut(..bytes.len()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "datagram larger than the receive buffer",
            ));
        };
        to.copy_from_slice(&bytes);
        Ok(Some(d))
    }
}
