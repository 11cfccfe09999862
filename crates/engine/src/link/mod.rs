//! The link: how a NIC's packets reach the network, and the seam where tests
//! and diagnostics step in.
//!
//! The engine needs little from a datagram link, and [`Link`] is exactly
//! that: send one packet; send up to [`Runs::MAX`] *runs* of equal-size
//! packets in one call, each run one UDP GSO datagram gathered from pieces
//! (headers in the engine's buffer, payloads straight from registered
//! memory); receive one datagram, which GRO may have coalesced from several
//! packets of one peer; and a file descriptor that polls readable when a
//! datagram waits. Links only move bytes: the ICRC is the engine's
//! ([`crate::icrc`]). What the network says back about packets sent earlier
//! — ICMP port unreachable from a host with no RoCE endpoint, a path too
//! small — comes out of [`Link::recv_error`] as a [`LinkError`], and a
//! refused send is classified once ([`SendFailure`]).
//!
//! ```text
//!        NIC core (sends runs, receives datagrams, signs and verifies ICRCs)
//!            │
//!    CaptureLink ── records both directions to a pcap file   (capture.rs)
//!            │
//!    FaultLink ──── loses, duplicates, delays, corrupts       (faults.rs)
//!            │      what *arrives*
//!    NicLink ─┬─ RoceSocket: UDP on <ip>:4791, GSO/GRO       (udp/)
//!             └─ MemoryLink: one end of an in-memory pair     (memory.rs)
//! ```
//!
//! Fault injection and capture are wrappers around any link, as smoltcp's
//! `phy` middleware wraps a device: each is a [`Layer`](layer::Layer) that
//! says only what it does to the traffic, made a link by
//! [`Layered`](layer::Layered). The core's send and receive paths are the
//! same with or without them, and each costs one test of whether it is on
//! per call when it is off. [`MemoryLink`](memory::MemoryLink) lets
//! engine tests run two NICs without sockets.

pub mod capture;
pub mod faults;
pub mod layer;
pub mod memory;
pub mod udp;

use ndverbs_proto::time::Instant;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;

/// Largest RoCEv2 transport packet: 4096-byte MTU plus the largest header set.
pub const MAX_TRANSPORT: usize = 4096 + 64;
/// Receive buffer that holds any datagram, GRO-coalesced ones included.
pub const MAX_DATAGRAM: usize = 65_536;

/// What the engine needs from a datagram link (see the module docs).
///
/// Addresses are the peer's IP address and UDP port: RoCEv2 sends to 4791,
/// tests may use other ports.
pub trait Link {
    /// The local address and UDP port packets leave from.
    fn local_addr(&self) -> SocketAddr;

    /// Whether a run may hold several packets (UDP GSO works). A link that
    /// says no is sent runs of one packet each.
    fn gso(&self) -> bool;

    /// A file descriptor that polls readable when a datagram waits.
    fn fd(&self) -> RawFd;

    /// Sends one packet (ICRC filled in). `WouldBlock` when the link has no
    /// room.
    fn send(&mut self, pkt: &[u8], dst: SocketAddr) -> io::Result<()>;

    /// Sends up to [`Runs::MAX`] of `runs` to `dst` in one call: each run is
    /// the bytes of its pieces in order, cut into `seg`-byte packets (the
    /// last may be shorter), packet `i` signed for IPv4 ID `i`. Returns how
    /// many runs the link took (`WouldBlock` when none).
    fn send_runs(&mut self, runs: Runs<'_>, dst: SocketAddr) -> io::Result<usize>;

    /// Receives one datagram into `buf` (at least [`MAX_DATAGRAM`] bytes);
    /// `Ok(None)` when nothing waits. `now` is the engine's clock, for links
    /// that hold packets back.
    fn recv(&mut self, buf: &mut [u8], now: Instant) -> io::Result<Option<Datagram>>;

    /// When the link will have a datagram to hand out although its file
    /// descriptor may not poll readable (packets it holds back), so that the
    /// engine does not sleep past it.
    fn poll_at(&self) -> Option<Instant> {
        None
    }

    /// Whether the link may have errors to report with
    /// [`recv_error`](Link::recv_error): a send or receive found an error
    /// pending, or [`note_error_event`](Link::note_error_event) was called.
    /// Cheap: the engine asks every step.
    fn errors_pending(&self) -> bool {
        false
    }

    /// The file descriptor polled an error condition (`POLLERR`): errors
    /// wait to be read with [`recv_error`](Link::recv_error).
    fn note_error_event(&self) {}

    /// The next error the network reported about packets sent earlier (see
    /// [`LinkError`]); `Ok(None)` when none waits, which also clears
    /// [`errors_pending`](Link::errors_pending).
    fn recv_error(&mut self) -> io::Result<Option<LinkError>> {
        Ok(None)
    }
}

/// What the network said about a packet sent earlier: an ICMP error the
/// kernel queued for the socket (`IP_RECVERR`/`IPV6_RECVERR`), or a local
/// refusal it queued with them.
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::{LinkError, LinkErrorKind};
/// let e = LinkError { peer: "10.0.0.2:4791".parse().unwrap(), kind: LinkErrorKind::PortUnreachable, local: false };
/// assert_eq!(e.to_string(), "10.0.0.2:4791: port unreachable (no RoCE endpoint)");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkError {
    /// The destination of the packet the error is about.
    pub peer: SocketAddr,
    /// What happened to it.
    pub kind: LinkErrorKind,
    /// The kernel's own record of a send it refused (the send already
    /// returned this error), not a report from the network.
    pub local: bool,
}

/// The kinds of [`LinkError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkErrorKind {
    /// ICMP (or ICMPv6) port unreachable: the peer's host has nothing on
    /// the UDP port, so no RoCE endpoint answers there.
    PortUnreachable,
    /// Another ICMP error (host or network unreachable, time exceeded…),
    /// as the errno the kernel converts it to.
    Unreachable(i32),
    /// A packet larger than the path carries: a local refusal or ICMP
    /// "fragmentation needed"; the path MTU when the report gives one (0
    /// otherwise).
    TooBig {
        /// The path MTU reported, or 0.
        mtu: u32,
    },
    /// Anything else, by errno.
    Other(i32),
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.peer)?;
        match self.kind {
            LinkErrorKind::PortUnreachable => f.write_str("port unreachable (no RoCE endpoint)"),
            LinkErrorKind::Unreachable(e) | LinkErrorKind::Other(e) => {
                write!(f, "{}", io::Error::from_raw_os_error(e))
            }
            LinkErrorKind::TooBig { mtu: 0 } => f.write_str("packet too big for the path"),
            LinkErrorKind::TooBig { mtu } => write!(f, "packet too big for the path (MTU {mtu})"),
        }
    }
}

/// Why a send was refused, as the engine counts it: every refused packet
/// is dropped and left to the transport's retransmission; what differs is
/// the counter and what is logged.
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::SendFailure;
/// use std::io;
/// assert_eq!(SendFailure::of(&io::Error::from_raw_os_error(libc::EMSGSIZE)), SendFailure::TooBig);
/// assert_eq!(SendFailure::of(&io::Error::from_raw_os_error(libc::ENOBUFS)), SendFailure::NoBuffers);
/// assert_eq!(SendFailure::of(&io::ErrorKind::WouldBlock.into()), SendFailure::WouldBlock);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendFailure {
    /// The send buffer is full (`EAGAIN`), after the link's short wait.
    WouldBlock,
    /// The kernel or the device queue had no buffer (`ENOBUFS`; a socket
    /// with `IP_RECVERR` reports what it would otherwise drop silently):
    /// transient, as `WouldBlock`.
    NoBuffers,
    /// Larger than the path carries (`EMSGSIZE`, also a GSO run whose
    /// segments are): the QP's path MTU is larger than the interface's.
    TooBig,
    /// Anything else (no route, an error the network reported about an
    /// earlier packet that this send found pending …).
    Other,
}

impl SendFailure {
    /// The failure `e` is.
    pub fn of(e: &io::Error) -> SendFailure {
        match e.raw_os_error() {
            Some(libc::ENOBUFS) => SendFailure::NoBuffers,
            Some(libc::EMSGSIZE) => SendFailure::TooBig,
            _ if e.kind() == io::ErrorKind::WouldBlock => SendFailure::WouldBlock,
            _ => SendFailure::Other,
        }
    }
}

/// One received datagram: one packet, or several of one peer coalesced by GRO.
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::Datagram;
/// // Three packets of 1040 bytes and one of 500, coalesced: split by `seg`.
/// let d = Datagram { src: "10.0.0.1:4791".parse().unwrap(), dst: None, len: 3 * 1040 + 500, seg: 1040, ecn: 0, rx_time: None };
/// let buf = vec![0u8; d.len];
/// let sizes: Vec<usize> = buf[..d.len].chunks(d.seg).map(|p| p.len()).collect();
/// assert_eq!(sizes, [1040, 1040, 1040, 500]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Sender's address and UDP port.
    pub src: SocketAddr,
    /// The local address it was sent to, when the link reports it (a socket
    /// bound to one address does not need to).
    pub dst: Option<IpAddr>,
    /// Bytes received.
    pub len: usize,
    /// Size of each coalesced packet (the last may be shorter); `len` when
    /// the datagram is one packet.
    pub seg: usize,
    /// The IP ECN field it arrived with ([`ECN_CE`], [`ECN_ECT1`] …; the
    /// kernel never coalesces datagrams that differ in it), when the link
    /// reports it (a socket with ECN on, [`udp::RoceSocket::enable_ecn`]); 0
    /// (Not-ECT) otherwise.
    pub ecn: u8,
    /// When the kernel received it, in `CLOCK_REALTIME` nanoseconds, when
    /// the link reports it (a socket with receive timestamps on,
    /// [`udp::RoceSocket::enable_rx_timestamps`]). A GRO datagram carries
    /// one, its first packet's: the kernel stamps a packet as it enters the
    /// receive path, and coalesces only what arrives in one burst, so the
    /// others arrived later by at most the burst's length on the wire.
    pub rx_time: Option<u64>,
}

/// ECN field value Not-ECT: the sender does not speak ECN.
pub const ECN_NOT_ECT: u8 = 0;
/// ECN field value ECT(1). ndverbs marks its packets with it when
/// congestion control is on (RFC 3168 makes ECT(0) and ECT(1) equivalent to
/// routers); since rxe and RoCE applications that ask for ECN through the
/// traffic class use ECT(0), a peer seen sending ECT(1) is an ndverbs peer
/// that reacts to CNPs — the only kind a notification point here answers
/// (`nic/congestion.rs`).
pub const ECN_ECT1: u8 = 1;
/// ECN field value ECT(0).
pub const ECN_ECT0: u8 = 2;
/// ECN field value Congestion Experienced: a router on the path marked it.
pub const ECN_CE: u8 = 3;

impl Datagram {
    /// The byte ranges of its packets in the receive buffer.
    pub fn packets(&self) -> impl Iterator<Item = std::ops::Range<usize>> {
        let (len, seg) = (self.len, self.seg.max(1));
        (0..len)
            .step_by(seg)
            .map(move |off| off..(off + seg).min(len))
    }
}

/// One piece of a datagram to send: `len` bytes at address `base`. Laid out
/// as the kernel's `struct iovec`, so a slice of them is handed to `sendmmsg`
/// as is; plain integers, so the tables that hold them stay `Send`.
///
/// # Example
///
/// ```
/// use ndverbs_engine::link::IoPiece;
/// // An iovec made of plain integers.
/// let bytes = [1u8, 2, 3];
/// let p = IoPiece::of(&bytes);
/// assert_eq!((p.base, p.len), (bytes.as_ptr() as usize, 3));
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoPiece {
    /// Address of the first byte.
    pub base: usize,
    /// Bytes.
    pub len: usize,
}

const _: () = assert!(
    std::mem::size_of::<IoPiece>() == std::mem::size_of::<libc::iovec>()
        && std::mem::align_of::<IoPiece>() == std::mem::align_of::<libc::iovec>()
);

impl IoPiece {
    /// The piece covering `bytes`.
    pub fn of(bytes: &[u8]) -> IoPiece {
        IoPiece {
            base: bytes.as_ptr() as usize,
            len: bytes.len(),
        }
    }
}

/// A run of equal-size packets (the last may be shorter) sent as one UDP GSO
/// datagram of `seg`-byte segments, gathered from pieces `iov.0 .. iov.1`
/// of the piece list it travels with (see [`Runs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Run {
    /// Its pieces (a range of indices into the piece list).
    pub iov: (usize, usize),
    /// Its length in bytes.
    pub len: usize,
    /// Segment (packet) size.
    pub seg: usize,
}

impl Run {
    /// Most bytes in one run (one UDP GSO send: the IPv4 UDP payload limit
    /// is 65,507; 15 segments of a 4096-MTU packet fit).
    pub const MAX_BYTES: usize = 65_000;
    /// Most packets in one run (the kernel's `UDP_MAX_SEGMENTS`).
    pub const MAX_SEGMENTS: usize = 64;
    /// Most pieces one run gathers (the kernel takes at most 1024 per
    /// message).
    pub const MAX_PIECES: usize = 1024;

    /// How many packets it holds.
    pub fn packets(&self) -> usize {
        self.len.div_ceil(self.seg.max(1))
    }

    /// Whether a GSO send may carry it, gathered from a list of `pieces`
    /// pieces: a non-empty range of them, within the limits above, cut
    /// into packets of at least a BTH and an ICRC.
    fn is_sendable(&self, pieces: usize) -> bool {
        self.seg >= 12 + ndverbs_wire::icrc::ICRC_LEN
            && self.len > 0
            && self.iov.0 < self.iov.1
            && self.iov.1 <= pieces
            && self.iov.1 - self.iov.0 <= Run::MAX_PIECES
            && self.len <= Run::MAX_BYTES
            && self.packets() <= Run::MAX_SEGMENTS
    }
}

/// What one [`Link::send_runs`] call is given: runs and the pieces they
/// gather from.
///
/// A run names its pieces by index, so the two only make sense together,
/// and a `Runs` holds them only once they are known good: every run
/// sendable ([`Runs::new`] checks) and every piece readable memory (the
/// promise its caller makes). A link then gathers and sends them without
/// checking again, and without `unsafe` of its own.
///
/// # Example
///
/// ```
/// use ndverbs_engine::event::wait_readable;
/// use ndverbs_engine::icrc::IcrcCache;
/// use ndverbs_engine::link::udp::RoceSocket;
/// use ndverbs_engine::link::{IoPiece, Run, Runs, MAX_DATAGRAM};
/// use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
/// use std::time::Duration;
/// let a = RoceSocket::bind("127.93.25.1".parse().unwrap())?;
/// let b = RoceSocket::bind("127.93.25.2".parse().unwrap())?;
/// let mut pkt = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, 5, 0));
/// pkt.payload = b"ping";
/// let mut buf = vec![0; pkt.encoded_len().unwrap()];
/// pkt.write(&mut buf).unwrap();
/// // One packet gathered from three places (headers, payload, ICRC), as the
/// // engine sends a payload straight out of registered memory.
/// let (hdr, payload) = (&buf[..12], &buf[12..16]);
/// let icrc = IcrcCache::new(a.addr()).sign(b.addr(), 0, &[hdr, payload])?.to_le_bytes();
/// let pieces = [IoPiece::of(hdr), IoPiece::of(payload), IoPiece::of(&icrc)];
/// let run = [Run { iov: (0, 3), len: 20, seg: 20 }];
/// // SAFETY: the pieces are live local buffers.
/// let runs = unsafe { Runs::new(&pieces, &run) }?;
/// assert_eq!(a.send_runs(runs, b.addr())?, 1);
/// assert!(wait_readable(&[b.fd()], Some(Duration::from_secs(5)))?[0]);
/// let mut got = vec![0; MAX_DATAGRAM];
/// let d = b.recv_datagram(&mut got)?.unwrap();
/// assert_eq!(&got[..d.len], &[hdr, payload, &icrc].concat()[..]);
/// assert!(IcrcCache::new(b.addr()).verify(&got[..d.len], d.src, d.dst).is_ok());
/// // A run that names pieces the list does not have is refused up front.
/// let bad = [Run { iov: (0, 4), len: 20, seg: 20 }];
/// // SAFETY: as above.
/// assert!(unsafe { Runs::new(&pieces, &bad) }.is_err());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Runs<'a> {
    pieces: &'a [IoPiece],
    runs: &'a [Run],
}

impl<'a> Runs<'a> {
    /// Most runs one [`Link::send_runs`] call sends (one `sendmmsg`).
    pub const MAX: usize = 8;

    /// `runs` gathered from `pieces`; `InvalidInput` unless every run is
    /// sendable (a range of `pieces` within the GSO limits of [`Run`]).
    ///
    /// # Safety
    /// Every piece must be readable memory for as long as the `Runs` lives
    /// (`'a`): links read them through raw pointers.
    pub unsafe fn new(pieces: &'a [IoPiece], runs: &'a [Run]) -> io::Result<Runs<'a>> {
        if runs.iter().all(|r| r.is_sendable(pieces.len())) {
            Ok(Runs { pieces, runs })
        } else {
            Err(io::Error::new(io::ErrorKind::InvalidInput, "bad GSO run"))
        }
    }

    /// The runs.
    pub fn runs(&self) -> &'a [Run] {
        self.runs
    }

    /// How many runs.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The first `n` runs (all of them if there are fewer).
    pub fn take(self, n: usize) -> Runs<'a> {
        Runs {
            runs: &self.runs[..n.min(self.runs.len())],
            ..self
        }
    }

    /// Run `i`'s pieces.
    pub fn pieces_of(&self, i: usize) -> &'a [IoPiece] {
        let r = &self.runs[i];
        &self.pieces[r.iov.0..r.iov.1]
    }

    /// Appends the bytes of run `i` to `out`.
    pub fn gather(&self, i: usize, out: &mut Vec<u8>) {
        for p in self.pieces_of(i) {
            // SAFETY: readable for `'a`, as promised to `Runs::new`.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts(p.base as *const u8, p.len)
            });
        }
    }
}

/// The link a NIC sits on: a UDP socket, or one end of an in-memory pair.
/// An enum rather than a trait object: the packet path calls it without an
/// indirect call.
#[derive(Debug)]
pub enum NicLink {
    /// The real thing: UDP on `<ip>:4791`.
    Udp(udp::RoceSocket),
    /// One end of a [`memory::MemoryLink::pair`].
    Memory(memory::MemoryLink),
}

impl From<udp::RoceSocket> for NicLink {
    fn from(s: udp::RoceSocket) -> Self {
        NicLink::Udp(s)
    }
}

impl From<memory::MemoryLink> for NicLink {
    fn from(m: memory::MemoryLink) -> Self {
        NicLink::Memory(m)
    }
}

impl Link for NicLink {
    #[inline]
    fn local_addr(&self) -> SocketAddr {
        match self {
            NicLink::Udp(l) => l.local_addr(),
            NicLink::Memory(l) => l.local_addr(),
        }
    }

    #[inline]
    fn gso(&self) -> bool {
        match self {
            NicLink::Udp(l) => Link::gso(l),
            NicLink::Memory(l) => l.gso(),
        }
    }

    #[inline]
    fn fd(&self) -> RawFd {
        match self {
            NicLink::Udp(l) => Link::fd(l),
            NicLink::Memory(l) => l.fd(),
        }
    }

    #[inline]
    fn send(&mut self, pkt: &[u8], dst: SocketAddr) -> io::Result<()> {
        match self {
            NicLink::Udp(l) => Link::send(l, pkt, dst),
            NicLink::Memory(l) => l.send(pkt, dst),
        }
    }

    #[inline]
    fn send_runs(&mut self, runs: Runs<'_>, dst: SocketAddr) -> io::Result<usize> {
        match self {
            NicLink::Udp(l) => Link::send_runs(l, runs, dst),
            NicLink::Memory(l) => l.send_runs(runs, dst),
        }
    }

    #[inline]
    fn recv(&mut self, buf: &mut [u8], now: Instant) -> io::Result<Option<Datagram>> {
        match self {
            NicLink::Udp(l) => Link::recv(l, buf, now),
            NicLink::Memory(l) => l.recv(buf, now),
        }
    }

    #[inline]
    fn errors_pending(&self) -> bool {
        match self {
            NicLink::Udp(l) => Link::errors_pending(l),
            NicLink::Memory(l) => l.errors_pending(),
        }
    }

    fn note_error_event(&self) {
        match self {
            NicLink::Udp(l) => Link::note_error_event(l),
            NicLink::Memory(l) => l.note_error_event(),
        }
    }

    fn recv_error(&mut self) -> io::Result<Option<LinkError>> {
        match self {
            NicLink::Udp(l) => Link::recv_error(l),
            NicLink::Memory(l) => l.recv_error(),
        }
    }
}
