//! Sockets connected to the peers a NIC sends to most.
//!
//! The NIC's own socket is unconnected (it sends to every peer), so Linux
//! looks up the route of every datagram it sends; a socket `connect()`ed to
//! one peer keeps its route, which spares each send that lookup (on a veth,
//! a few tenths of a microsecond of a latency-bound one-way trip). But the
//! ICRC covers the IPv4 ID, and where Linux gives an unconnected socket's DF
//! packets ID 0, it gives a connected socket's an ID from a per-socket
//! counter that starts at random. So a peer is sent through a socket of its
//! own only while that counter is known:
//!
//! * **Learned at connect** from a probe: a one-byte datagram the socket
//!   sends to its own address (it never leaves the host) with a scheduler
//!   transmit time stamp asked for (`SOF_TIMESTAMPING_TX_SCHED`), which
//!   loops a copy of the packet, headers included, to the socket's error
//!   queue.
//! * **Tracked**: each message of a `sendmmsg` takes the counter's next ID,
//!   a GSO message too (one ID for the message; its segments count up from
//!   it, as software segmentation numbers them), so segment `i` of the
//!   `m`-th message from now carries `next + m + i`
//!   ([`SendPath::Connected`]). A send refused for a full buffer is refused
//!   before the ID is taken.
//! * **Checked** by the same means on the first send and then every
//!   [`CHECK_EVERY`] sends. A mismatch (another kernel's rule), or any error
//!   but a full buffer (it may have taken an ID, or the peer went away:
//!   a connected socket reports the ICMP error itself), closes the socket,
//!   and the peer goes back to the NIC's socket for a while
//!   ([`REST`] batches), whose error reporting takes over.
//!
//! A peer gets its socket after [`PROMOTE_AFTER`] batches, so that one-off
//! traffic (a ping to a host with no RoCE endpoint, whose ICMP answer the
//! NIC's socket reports) never does; [`MAX_PEERS`] at most. Its source port
//! is the socket's own ephemeral one: RoCEv2 leaves the source port free,
//! and peers (rxe and ndverbs) answer to 4791 whatever it is. IPv4 only
//! (IPv6 has no ID, but also no bench that needs it yet).

use super::sys::{self, setsockopt};
use crate::link::{Runs, SendPath};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};

/// Batches a peer is sent through the NIC's socket before it gets its own.
pub(super) const PROMOTE_AFTER: u32 = 64;
/// Peers counted towards a socket or given one, at most.
pub(super) const MAX_PEERS: usize = 64;
/// Sends between two checks of a socket's ID counter.
pub(super) const CHECK_EVERY: u32 = 4096;
/// Batches a peer is sent through the NIC's socket after its own was
/// closed, before it may have one again.
pub(super) const REST: u32 = 1 << 16;
/// A connected socket's receive buffer: it reads nothing but the copies of
/// a check (the first one's fits; a datagram the peer sends to its port
/// waits there, bounded, and is discarded at the next check).
const RECV_BUFFER: usize = 256 << 10;

/// The connected sockets of one NIC's socket (see the module docs).
#[derive(Debug, Default)]
pub(super) struct PeerSockets {
    /// The NIC's address when it is a specific IPv4 address (nothing is
    /// connected otherwise).
    local: Option<Ipv4Addr>,
    /// The NIC socket's `IP_TOS`, which every connected socket copies.
    tos: Option<libc::c_int>,
    peers: Vec<Peer>,
}

#[derive(Debug)]
struct Peer {
    addr: SocketAddrV4,
    state: State,
}

#[derive(Debug)]
enum State {
    /// Sent this many batches through the NIC's socket.
    Counting(u32),
    Connected(Connected),
    /// Back on the NIC's socket for this many more batches.
    Resting(u32),
}

/// A socket connected to one peer, its ID counter known.
#[derive(Debug)]
struct Connected {
    sock: Socket,
    /// The socket's address and its peer's.
    me: SocketAddrV4,
    peer: SocketAddrV4,
    /// The ID the next message will carry.
    next_id: u16,
    /// Sends before the counter is checked again (0: on the next).
    until_check: u32,
}

impl PeerSockets {
    /// Connected sockets for a NIC socket bound to `local` (none unless it
    /// is a specific IPv4 address).
    pub(super) fn new(local: std::net::IpAddr) -> Self {
        let local = match local {
            std::net::IpAddr::V4(a) if !a.is_unspecified() => Some(a),
            _ => None,
        };
        PeerSockets {
            local,
            ..PeerSockets::default()
        }
    }

    /// No connected sockets from now on (those open are closed).
    pub(super) fn disable(&mut self) {
        self.local = None;
        self.peers.clear();
    }

    /// The `IP_TOS` every connected socket sets (ECN).
    pub(super) fn set_tos(&mut self, tos: libc::c_int) {
        self.tos = Some(tos);
        // Those already open reconnect with it.
        self.peers.clear();
    }

    /// Peers sent through a connected socket now.
    pub(super) fn connected(&self) -> usize {
        self.peers
            .iter()
            .filter(|p| matches!(p.state, State::Connected(_)))
            .count()
    }

    /// How the next batch to `dst` leaves: through its connected socket if
    /// it has one (opened on this batch if it is due one).
    pub(super) fn path(&mut self, dst: SocketAddr) -> SendPath {
        let (Some(local), SocketAddr::V4(dst)) = (self.local, dst) else {
            return SendPath::Shared;
        };
        let i = match self.peers.iter().position(|p| p.addr == dst) {
            Some(i) => i,
            None if self.peers.len() < MAX_PEERS => {
                self.peers.push(Peer {
                    addr: dst,
                    state: State::Counting(0),
                });
                self.peers.len() - 1
            }
            None => return SendPath::Shared,
        };
        let p = &mut self.peers[i];
        match &mut p.state {
            State::Connected(c) => return c.path(),
            State::Counting(n) if *n + 1 < PROMOTE_AFTER => {
                *n += 1;
                return SendPath::Shared;
            }
            State::Counting(_) => {}
            State::Resting(n) => {
                *n -= 1;
                if *n == 0 {
                    p.state = State::Counting(0);
                }
                return SendPath::Shared;
            }
        }
        match Connected::open(local, dst, self.tos) {
            Ok(c) => {
                tracing::trace!(peer = %dst, port = c.me.port(), first_id = c.next_id, "connected socket for a busy peer");
                let path = c.path();
                p.state = State::Connected(c);
                path
            }
            Err(e) => {
                tracing::debug!(peer = %dst, error = %e, "no connected socket for the peer");
                p.state = State::Resting(REST);
                SendPath::Shared
            }
        }
    }

    /// Sends `runs`, signed for `path`, through `dst`'s connected socket;
    /// [`SendPath::stale`] if it no longer has that one.
    pub(super) fn send_runs(
        &mut self,
        runs: Runs<'_>,
        dst: SocketAddr,
        path: SendPath,
    ) -> io::Result<usize> {
        let p = self
            .peers
            .iter_mut()
            .find(|p| SocketAddr::V4(p.addr) == dst)
            .ok_or_else(SendPath::stale)?;
        let State::Connected(c) = &mut p.state else {
            return Err(SendPath::stale());
        };
        if c.path() != path {
            return Err(SendPath::stale());
        }
        match c.send_runs(runs) {
            Ok(k) => Ok(k),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(e),
            Err(e) => {
                tracing::debug!(peer = %dst, error = %e, "connected socket closed after an error; the NIC's socket takes over");
                p.state = State::Resting(REST);
                Err(e)
            }
        }
    }
}

/// Why a check found the counter elsewhere than tracked.
fn mismatch(want: u16, got: u16) -> io::Error {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(
            want,
            got,
            "a connected socket's IPv4 IDs do not follow the counter this kernel was expected \
             to keep; peers are sent through the NIC's own socket"
        )
    });
    io::Error::other("connected socket's IPv4 ID counter not where tracked")
}

impl Connected {
    /// Opens a socket from `local` connected to `peer` and learns its ID
    /// counter with a probe (see the module docs).
    fn open(local: Ipv4Addr, peer: SocketAddrV4, tos: Option<libc::c_int>) -> io::Result<Self> {
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        let fd = sock.as_raw_fd();
        super::set_buffers(&sock, fd);
        sock.set_recv_buffer_size(RECV_BUFFER)?;
        setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?;
        if let Some(t) = tos {
            setsockopt(fd, libc::IPPROTO_IP, libc::IP_TOS, t)?;
        }
        sock.bind(&SocketAddr::new(local.into(), 0).into())?;
        sock.connect(&SocketAddr::V4(peer).into())?;
        sock.set_nonblocking(true)?;
        let me = sock
            .local_addr()?
            .as_socket_ipv4()
            .ok_or_else(|| io::Error::other("connected socket without an IPv4 address"))?;
        stamp(fd, true)?;
        let sent = sys::sendto(fd, &[0], SocketAddr::V4(me));
        stamp(fd, false)?;
        sent?;
        let id = read_ids(fd, me, me, 1, true)?
            .ok_or_else(|| io::Error::other("no time stamp looped back for the probe"))?;
        Ok(Connected {
            sock,
            me,
            peer,
            next_id: id.wrapping_add(1),
            until_check: 0,
        })
    }

    fn path(&self) -> SendPath {
        SendPath::Connected {
            src_port: self.me.port(),
            first_id: self.next_id,
        }
    }

    /// Sends `runs` (a full buffer gets a moment to drain, as on the NIC's
    /// socket), checking the counter when due.
    fn send_runs(&mut self, runs: Runs<'_>) -> io::Result<usize> {
        let fd = self.sock.as_raw_fd();
        let check = self.until_check == 0;
        if check {
            // Late copies of an earlier check's packets would be taken for
            // this one's, and anything the peer sent to this port is noise.
            while sys::recv_looped_id(fd, self.me, self.peer)?.is_some() {}
            sys::discard_received(fd);
            stamp(fd, true)?;
        }
        let r = match sys::sendmmsg_gso(fd, runs, None) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sys::wait_writable(fd);
                sys::sendmmsg_gso(fd, runs, None)
            }
            r => r,
        };
        if check {
            stamp(fd, false)?;
        }
        let k = r?;
        let first = self.next_id;
        self.next_id = first.wrapping_add(k as u16);
        if check {
            // A copy not looped back yet (the packet waits for its
            // neighbour) leaves the check to the next send.
            match read_ids(fd, self.me, self.peer, k, false)? {
                Some(got) if got != first => return Err(mismatch(first, got)),
                Some(_) => self.until_check = CHECK_EVERY,
                None => {}
            }
        } else {
            self.until_check -= 1;
        }
        Ok(k)
    }
}

/// Turns scheduler transmit time stamps (a looped copy of each packet sent)
/// on or off.
fn stamp(fd: RawFd, on: bool) -> io::Result<()> {
    let flags = if on {
        libc::SOF_TIMESTAMPING_TX_SCHED as libc::c_int
    } else {
        0
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, flags)
}

/// Reads the copies `count` sends looped back and returns the IPv4 ID of
/// the first packet from `src` to `dst` among them, having checked that
/// the others' follow it (`None`: none came back, at once or, with `wait`,
/// within a millisecond).
fn read_ids(
    fd: RawFd,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    count: usize,
    wait: bool,
) -> io::Result<Option<u16>> {
    let mut first: Option<u16> = None;
    let mut seen = 0;
    let mut waits = 0;
    while seen < count {
        match sys::recv_looped_id(fd, src, dst)? {
            Some(Some(id)) => {
                let want = first.map(|f| f.wrapping_add(seen as u16));
                match want {
                    Some(w) if id != w => return Err(mismatch(w, id)),
                    Some(_) => {}
                    None => first = Some(id),
                }
                seen += 1;
            }
            Some(None) => {}
            None if wait && waits < 20 && first.is_none() => {
                waits += 1;
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            None => break,
        }
    }
    Ok(first)
}
