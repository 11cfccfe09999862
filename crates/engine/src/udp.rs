//! RoCEv2 datagram I/O over a plain UDP socket.
//!
//! RoCEv2 is UDP to port 4791, so an unprivileged process can speak it with an
//! ordinary socket — with two catches, both about the ICRC, which covers the
//! IP and UDP headers that the kernel, not the application, writes:
//!
//! * **Sending.** The socket is bound to `<ip>:4791` (rxe replies only to 4791, so
//!   the source port is 4791 too), never `connect()`ed, and has
//!   `IP_MTU_DISCOVER = IP_PMTUDISC_DO`: Linux then sends IPv4 with DF set and
//!   **ID 0**, so every header field the ICRC covers is known before sending.
//!   [`RoceSocket::send_to`] computes the ICRC over those headers.
//! * **Receiving.** `recvmsg` shows the UDP payload, the source address and port,
//!   and (with `IP_PKTINFO`) the destination address — everything but the IPv4
//!   ID, which Linux rxe chooses at random. [`RoceSocket::recv`] rebuilds the
//!   headers and recovers the ID from the ICRC itself
//!   ([`ndverbs_wire::icrc::recover_ipv4_id_split`]); a packet no ID explains is
//!   corrupt and dropped. IPv6 has no ID and is verified directly.
//!
//! Both assume the sender sets DF, as rxe and ndverbs always do.

use ndverbs_wire::icrc::{self, ICRC_LEN};
use ndverbs_wire::ip::{Envelope, IpHeader, ROCEV2_PORT, UDP_HEADER_LEN};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};

/// Socket buffer size asked for; the kernel caps it at `net.core.{r,w}mem_max`.
pub const SOCKET_BUFFER: usize = 8 << 20;
/// Largest RoCEv2 transport packet: 4096-byte MTU plus the largest header set.
pub const MAX_TRANSPORT: usize = 4096 + 64;
/// Most bytes handed to the kernel in one UDP GSO send (the IPv4 UDP payload
/// limit is 65,507; 15 segments of a 4096-MTU packet fit).
pub const MAX_GSO_BYTES: usize = 65_000;
/// Most segments in one GSO send (the kernel's `UDP_MAX_SEGMENTS`).
pub const MAX_GSO_SEGMENTS: usize = 64;
/// Receive buffer that holds any datagram, GRO-coalesced ones included.
pub const MAX_DATAGRAM: usize = 65_536;
/// `UDP_SEGMENT` (linux/udp.h): GSO segment size, socket option or cmsg.
const UDP_SEGMENT: libc::c_int = 103;
/// `UDP_GRO` (linux/udp.h): receive coalesced datagrams, segment size in a cmsg.
const UDP_GRO: libc::c_int = 104;

/// Why a received datagram was dropped.
///
/// # Example
///
/// ```
/// # use ndverbs_engine::event::wait_readable;
/// # use ndverbs_engine::udp::*;
/// # use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
/// # use std::time::Duration;
/// # /// A SEND ONLY to QP `dqpn` carrying "ping", ICRC placeholder included.
/// # fn ping(dqpn: u32) -> Vec<u8> {
/// #     let mut pkt = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, dqpn, 0));
/// #     pkt.payload = b"ping";
/// #     let mut buf = vec![0; pkt.encoded_len().unwrap()];
/// #     pkt.write(&mut buf).unwrap();
/// #     buf
/// # }
/// # fn wait(s: &RoceSocket) { assert!(wait_readable(&[s.fd()], Some(Duration::from_secs(5))).unwrap()[0]) }
/// let sock = RoceSocket::bind("127.93.21.1".parse().unwrap())?;
/// let junk = std::net::UdpSocket::bind("127.93.21.2:0")?;
/// let mut buf = [0; 4200];
/// junk.send_to(&[0; 8], "127.93.21.1:4791")?; // shorter than BTH + ICRC
/// wait(&sock);
/// assert_eq!(sock.recv(&mut buf)?, Some(Err(Drop::Runt)));
/// junk.send_to(&ping(5), "127.93.21.1:4791")?; // the right size, but ICRC 0
/// wait(&sock);
/// assert_eq!(sock.recv(&mut buf)?, Some(Err(Drop::BadIcrc)));
/// assert_eq!(sock.recv(&mut buf)?, None); // nothing more waiting
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drop {
    /// Shorter than a BTH plus ICRC.
    Runt,
    /// No IP ID (IPv4) makes the ICRC valid, or the IPv6 ICRC is wrong.
    BadIcrc,
    /// No destination address was reported (should not happen with `IP_PKTINFO`).
    NoDestination,
}

/// One received RoCEv2 datagram with a verified ICRC.
///
/// # Example
///
/// ```
/// # use ndverbs_engine::event::wait_readable;
/// # use ndverbs_engine::udp::*;
/// # use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
/// # use std::time::Duration;
/// # /// A SEND ONLY to QP `dqpn` carrying "ping", ICRC placeholder included.
/// # fn ping(dqpn: u32) -> Vec<u8> {
/// #     let mut pkt = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, dqpn, 0));
/// #     pkt.payload = b"ping";
/// #     let mut buf = vec![0; pkt.encoded_len().unwrap()];
/// #     pkt.write(&mut buf).unwrap();
/// #     buf
/// # }
/// # fn wait(s: &RoceSocket) { assert!(wait_readable(&[s.fd()], Some(Duration::from_secs(5))).unwrap()[0]) }
/// let a = RoceSocket::bind("127.93.22.1".parse().unwrap())?;
/// let b = RoceSocket::bind("127.93.22.2".parse().unwrap())?;
/// a.send_to(&mut ping(5), b.local(), 4791)?;
/// wait(&b);
/// let mut buf = [0; 4200];
/// let r: Received = b.recv(&mut buf)?.unwrap().expect("ICRC verifies");
/// assert_eq!(r.src, "127.93.22.1:4791".parse().unwrap()); // RoCEv2 sends from 4791 too
/// assert_eq!(r.dst, b.local());
/// assert_eq!(r.ipv4_id, Some(0)); // recovered from the ICRC
/// assert_eq!(Packet::parse(&buf[..r.len]).unwrap().payload, b"ping");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Sender's address and UDP port.
    pub src: SocketAddr,
    /// The local address it was sent to.
    pub dst: IpAddr,
    /// Bytes of transport packet (BTH through ICRC) at the start of the buffer.
    pub len: usize,
    /// The IPv4 ID the sender used, recovered from the ICRC (`None` for IPv6).
    pub ipv4_id: Option<u16>,
}

/// One received datagram, possibly several RoCEv2 packets coalesced by GRO,
/// before any ICRC check.
///
/// # Example
///
/// ```
/// # use ndverbs_engine::event::wait_readable;
/// # use ndverbs_engine::udp::*;
/// # use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
/// # use std::time::Duration;
/// # /// A SEND ONLY to QP `dqpn` carrying "ping", ICRC placeholder included.
/// # fn ping(dqpn: u32) -> Vec<u8> {
/// #     let mut pkt = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, dqpn, 0));
/// #     pkt.payload = b"ping";
/// #     let mut buf = vec![0; pkt.encoded_len().unwrap()];
/// #     pkt.write(&mut buf).unwrap();
/// #     buf
/// # }
/// # fn wait(s: &RoceSocket) { assert!(wait_readable(&[s.fd()], Some(Duration::from_secs(5))).unwrap()[0]) }
/// let a = RoceSocket::bind("127.93.23.1".parse().unwrap())?;
/// let b = RoceSocket::bind("127.93.23.2".parse().unwrap())?;
/// a.send_to(&mut ping(5), b.local(), 4791)?;
/// wait(&b);
/// // Receive first, check each packet after (the engine's batched path).
/// let mut buf = [0; MAX_DATAGRAM];
/// let d: Datagram = b.recv_datagram(&mut buf)?.unwrap();
/// assert_eq!((d.len, d.seg), (20, 20)); // one packet: BTH 12 + "ping" + ICRC 4
/// for seg in buf[..d.len].chunks(d.seg) {
///     let r = b.verify_segment(seg, d.src, d.dst).expect("ICRC verifies");
///     assert_eq!(r.len, seg.len());
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Sender's address and UDP port.
    pub src: SocketAddr,
    /// The local address it was sent to (`IP_PKTINFO`).
    pub dst: Option<IpAddr>,
    /// Bytes received.
    pub len: usize,
    /// Size of each coalesced packet (the last may be shorter); `len` when
    /// the datagram is one packet.
    pub seg: usize,
}

/// A UDP socket bound to `<ip>:4791` that sends and receives RoCEv2.
///
/// **Batching.** [`RoceSocket::send_segments`] sends equal-size packets to one
/// peer in one call with UDP GSO; the kernel gives segment `i` the IPv4 ID
/// `i` (software segmentation counts up from the socket's ID 0), so each
/// segment's ICRC is computed with that ID. With `UDP_GRO` on
/// ([`RoceSocket::enable_gro`]) [`RoceSocket::recv_datagram`] may return
/// several packets at once, split by the reported segment size; each is
/// verified on its own ([`RoceSocket::verify_segment`]) and its ID recovered.
///
/// # Example
///
/// ```
/// use ndverbs_engine::event::wait_readable;
/// use ndverbs_engine::udp::RoceSocket;
/// use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
/// use std::time::Duration;
/// // Plain UDP sockets on <ip>:4791: no privileges, no kernel RDMA.
/// let a = RoceSocket::bind("127.93.24.1".parse().unwrap())?;
/// let b = RoceSocket::bind("127.93.24.2".parse().unwrap())?;
/// let mut pkt = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, 0x12, 7));
/// pkt.payload = b"ping";
/// let mut out = vec![0; pkt.encoded_len().unwrap()];
/// pkt.write(&mut out).unwrap();
/// a.send_to(&mut out, b.local(), 4791)?; // fills in the ICRC over the IP/UDP headers
/// assert!(wait_readable(&[b.fd()], Some(Duration::from_secs(5)))?[0]);
/// let mut buf = [0; 4200];
/// let r = b.recv(&mut buf)?.unwrap().expect("ICRC verifies");
/// let got = Packet::parse(&buf[..r.len]).unwrap();
/// assert_eq!((got.bth.dqpn, got.bth.psn, got.payload), (0x12, 7, &b"ping"[..]));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct RoceSocket {
    sock: Socket,
    local: IpAddr,
    port: u16,
    gso: std::sync::atomic::AtomicBool,
    gro: bool,
    /// What ICRCs on this socket keep reusing.
    cache: std::sync::Mutex<IcrcCache>,
}

/// Per-socket ICRC work worth keeping: the CRC of the masked IP and UDP
/// headers of recent paths and lengths (the same for every packet of a
/// message stream or ping-pong: only the transport bytes are hashed then),
/// and the IPv4 ID solvers of recent lengths.
#[derive(Debug, Default)]
struct IcrcCache {
    /// Keys packed for a cheap comparison ([`HeadersKey::packed`]).
    headers: Vec<((u128, u64), u32)>,
    /// The `headers` entry to replace next when full.
    next: usize,
    /// ID solvers by the number of CRC bytes after the ID (one per packet length).
    solvers: Vec<(usize, icrc::IdSolver)>,
}

/// What the masked IP and UDP headers of a packet depend on, besides the
/// socket's own address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HeadersKey {
    peer: IpAddr,
    peer_port: u16,
    ipv4_id: u16,
    transport_len: u32,
    /// Received (the peer is the source) rather than sent.
    rx: bool,
}

impl HeadersKey {
    /// The key as two integers (the address as IPv6, v4-mapped).
    fn packed(&self) -> (u128, u64) {
        let ip = match self.peer {
            IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
            IpAddr::V6(a) => u128::from(a),
        };
        // A transport length fits 30 bits (a datagram is at most 64 KiB).
        let rest = u64::from(self.peer_port) << 48
            | u64::from(self.ipv4_id) << 32
            | u64::from(self.transport_len & 0x3fff_ffff) << 2
            | u64::from(self.peer.is_ipv6()) << 1
            | u64::from(self.rx);
        (ip, rest)
    }
}

/// Header CRCs kept per socket.
const HEADERS_CACHE: usize = 8;

impl IcrcCache {
    /// The CRC of the masked headers for `key` on a socket at `local:port`.
    fn headers_crc(&mut self, local: IpAddr, port: u16, key: HeadersKey) -> u32 {
        let packed = key.packed();
        if let Some(&(_, c)) = self.headers.iter().find(|(k, _)| *k == packed) {
            return c;
        }
        let (src, dst, sport, dport) = if key.rx {
            (key.peer, local, key.peer_port, port)
        } else {
            (local, key.peer, port, key.peer_port)
        };
        let (hdr, n) = icrc::pseudo_headers(
            src,
            dst,
            sport,
            dport,
            key.ipv4_id,
            key.transport_len as usize,
        );
        let c = icrc::headers_crc(&hdr[..n]);
        if self.headers.len() < HEADERS_CACHE {
            self.headers.push((packed, c));
        } else {
            self.headers[self.next] = (packed, c);
            self.next = (self.next + 1) % HEADERS_CACHE;
        }
        c
    }
}

impl RoceSocket {
    /// Binds `<local>:4791`, non-blocking, with DF / ID-0 sending and
    /// destination-address reporting.
    pub fn bind(local: IpAddr) -> io::Result<Self> {
        Self::bind_port(local, ROCEV2_PORT)
    }

    /// Like [`RoceSocket::bind`] on another port (tests only: real peers always
    /// send to 4791).
    pub fn bind_port(local: IpAddr, port: u16) -> io::Result<Self> {
        let domain = if local.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        if local.is_ipv6() {
            sock.set_only_v6(true)?;
        }
        // Ask for big buffers (past `net.core.{r,w}mem_max` with
        // CAP_NET_ADMIN); the kernel silently caps them otherwise, which
        // costs drops under bursts — say so once.
        let fd = sock.as_raw_fd();
        set_buffers(&sock, fd);
        if local.is_ipv4() {
            setsockopt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )?;
            // The destination address enters the ICRC. A socket bound to one
            // address only receives datagrams sent to it, so the kernel need
            // not report it (a control message less per receive); a wildcard
            // bind needs `IP_PKTINFO`.
            if local.is_unspecified() {
                setsockopt(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
            }
        } else {
            setsockopt(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )?;
            if local.is_unspecified() {
                setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
            }
        }
        sock.bind(&SocketAddr::new(local, port).into())?;
        sock.set_nonblocking(true)?;
        let port = sock.local_addr()?.as_socket().map_or(port, |a| a.port());
        // GSO is asked for per call; a kernel that knows the option accepts 0.
        let gso = setsockopt(fd, libc::SOL_UDP, UDP_SEGMENT, 0).is_ok();
        Ok(RoceSocket {
            sock,
            local,
            port,
            gso: gso.into(),
            gro: false,
            cache: Default::default(),
        })
    }

    /// Turns on `UDP_GRO`: received packets of one flow may arrive coalesced
    /// (read them with [`RoceSocket::recv_datagram`] into a [`MAX_DATAGRAM`]
    /// buffer). Returns whether the kernel accepted it.
    pub fn enable_gro(&mut self) -> bool {
        self.gro = setsockopt(self.sock.as_raw_fd(), libc::SOL_UDP, UDP_GRO, 1).is_ok();
        self.gro
    }

    /// Whether sends may use UDP GSO (off after the kernel refused one).
    pub fn gso(&self) -> bool {
        self.gso.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Turns GSO off (or back on, if the kernel supports it).
    pub fn set_gso(&self, on: bool) {
        self.gso.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The bound local address.
    pub fn local(&self) -> IpAddr {
        self.local
    }

    /// The UDP port bound (4791 except in tests).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The file descriptor, for polling.
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Fills in the ICRC (last 4 bytes of `transport`) and sends the datagram to
    /// `dst:4791` (or `dst_port` in tests). Returns `WouldBlock` when the socket
    /// buffer is full.
    pub fn send_to(&self, transport: &mut [u8], dst: IpAddr, dst_port: u16) -> io::Result<()> {
        self.send_to_flipped(transport, dst, dst_port, None)
    }

    /// Like [`RoceSocket::send_to`], but flips bit `flip` of the datagram after
    /// the ICRC was computed (the fault layer's corruption).
    pub fn send_to_flipped(
        &self,
        transport: &mut [u8],
        dst: IpAddr,
        dst_port: u16,
        flip: Option<usize>,
    ) -> io::Result<()> {
        if transport.len() < 12 + ICRC_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "RoCEv2 packet shorter than BTH + ICRC",
            ));
        }
        let body = transport.len() - ICRC_LEN;
        let c = self.icrc(dst, dst_port, 0, &[&transport[..body]])?;
        transport[body..].copy_from_slice(&c.to_le_bytes());
        if let Some(bit) = flip {
            transport[(bit / 8) % transport.len()] ^= 1 << (bit % 8);
        }
        let n = self
            .sock
            .send_to(transport, &SocketAddr::new(dst, dst_port).into())?;
        if n != transport.len() {
            return Err(io::Error::other("short UDP send"));
        }
        Ok(())
    }

    /// Sends the packets in `buf` — consecutive transport packets of `seg`
    /// bytes each but the last, which may be shorter — to `dst`, with one GSO
    /// call when possible, filling in every ICRC (segment `i` with IPv4 ID
    /// `i`). `buf` holds at most [`MAX_GSO_BYTES`] and [`MAX_GSO_SEGMENTS`]
    /// packets. Returns `WouldBlock` when the socket buffer is full (nothing
    /// was sent). Falls back to one send per packet, for good, if the kernel
    /// refuses GSO.
    pub fn send_segments(
        &self,
        buf: &mut [u8],
        seg: usize,
        dst: IpAddr,
        dst_port: u16,
    ) -> io::Result<()> {
        if seg < 12 + ICRC_LEN || buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "RoCEv2 packet shorter than BTH + ICRC",
            ));
        }
        let count = buf.len().div_ceil(seg);
        if count == 1 || !self.gso() || count > MAX_GSO_SEGMENTS || buf.len() > MAX_GSO_BYTES {
            return self.send_each(buf, seg, dst, dst_port);
        }
        for (i, p) in buf.chunks_mut(seg).enumerate() {
            self.fill_icrc(p, dst, dst_port, i as u16)?;
        }
        match sendmsg_gso(
            self.sock.as_raw_fd(),
            buf,
            SocketAddr::new(dst, dst_port),
            seg,
        ) {
            Ok(n) if n == buf.len() => Ok(()),
            Ok(_) => Err(io::Error::other("short UDP send")),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "UDP GSO refused; sending one datagram per packet from now on");
                self.set_gso(false);
                self.send_each(buf, seg, dst, dst_port)
            }
        }
    }

    /// The ICRC of a packet sent to `dst:dst_port` with IPv4 ID `id`, whose
    /// transport bytes (BTH onwards, without the ICRC) are `parts` in order.
    pub fn icrc(&self, dst: IpAddr, dst_port: u16, id: u16, parts: &[&[u8]]) -> io::Result<u32> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        icrc_cached(self.local, self.port, &mut cache, dst, dst_port, id, parts)
    }

    /// Like [`RoceSocket::icrc`] through exclusive access: no lock (the
    /// engine owns its socket; a lock per packet was a measurable share of
    /// a small message's latency).
    pub fn icrc_mut(
        &mut self,
        dst: IpAddr,
        dst_port: u16,
        id: u16,
        parts: &[&[u8]],
    ) -> io::Result<u32> {
        let cache = self.cache.get_mut().unwrap_or_else(|e| e.into_inner());
        icrc_cached(self.local, self.port, cache, dst, dst_port, id, parts)
    }

    /// Sends up to [`MAX_RUNS`] runs to `dst` with one `sendmmsg`, each run
    /// one UDP GSO datagram of `seg`-byte packets (ICRCs already filled in,
    /// segment `i` of a run with IPv4 ID `i`) gathered from `pieces` — packet
    /// headers in the engine's buffer and, for a zero-copy send, payloads in
    /// registered memory. The transfer path leaves a run per change of packet
    /// size (a WRITE's first packet carries a RETH and is 16 bytes longer than
    /// the rest); one system call for all of them is what batching buys.
    /// Returns how many runs the kernel took (`WouldBlock` when none). After
    /// a refusal other than `WouldBlock` GSO is off for good (the caller
    /// falls back to one packet per send).
    ///
    /// # Safety
    /// Every piece must be readable memory for the duration of the call.
    pub unsafe fn send_runs(
        &self,
        pieces: &[IoPiece],
        runs: &[Run],
        dst: IpAddr,
        dst_port: u16,
    ) -> io::Result<usize> {
        let runs = &runs[..runs.len().min(MAX_RUNS)];
        for r in runs {
            let ok = r.seg >= 12 + ICRC_LEN
                && r.len > 0
                && r.iov.0 < r.iov.1
                && r.iov.1 <= pieces.len()
                && r.iov.1 - r.iov.0 <= MAX_RUN_PIECES
                && r.len <= MAX_GSO_BYTES
                && r.len.div_ceil(r.seg) <= MAX_GSO_SEGMENTS;
            if !ok {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad GSO run"));
            }
        }
        // SAFETY: the runs index `pieces` (checked above) and the caller
        // vouches for the memory they point at.
        let r = unsafe {
            sendmmsg_gso(
                self.sock.as_raw_fd(),
                pieces,
                runs,
                SocketAddr::new(dst, dst_port),
            )
        };
        if let Err(e) = &r {
            if e.kind() != io::ErrorKind::WouldBlock {
                tracing::warn!(error = %e, "UDP GSO refused; sending one datagram per packet from now on");
                self.set_gso(false);
            }
        }
        r
    }

    /// One `sendto` per packet of `buf` (see [`RoceSocket::send_segments`]).
    fn send_each(&self, buf: &mut [u8], seg: usize, dst: IpAddr, dst_port: u16) -> io::Result<()> {
        for p in buf.chunks_mut(seg) {
            self.send_to(p, dst, dst_port)?;
        }
        Ok(())
    }

    /// Writes the ICRC of `transport` as sent to `dst` with IPv4 ID `id`.
    fn fill_icrc(
        &self,
        transport: &mut [u8],
        dst: IpAddr,
        dst_port: u16,
        id: u16,
    ) -> io::Result<()> {
        let body = transport.len() - ICRC_LEN;
        let c = self.icrc(dst, dst_port, id, &[&transport[..body]])?;
        transport[body..].copy_from_slice(&c.to_le_bytes());
        Ok(())
    }

    /// Receives one datagram (with GRO on, possibly several coalesced packets)
    /// into `buf` without checking it; `Ok(None)` when nothing is waiting.
    /// Check each packet with [`RoceSocket::verify_segment`].
    pub fn recv_datagram(&self, buf: &mut [u8]) -> io::Result<Option<Datagram>> {
        match recvmsg_pktinfo(self.sock.as_raw_fd(), buf) {
            Ok((len, src, dst, seg)) => Ok(Some(Datagram {
                src,
                dst,
                len,
                seg: seg.filter(|&s| s > 0 && s < len).unwrap_or(len),
            })),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Verifies the ICRC of one packet of a [`Datagram`], recovering its IPv4 ID.
    pub fn verify_segment(
        &self,
        transport: &[u8],
        src: SocketAddr,
        dst: Option<IpAddr>,
    ) -> Result<Received, Drop> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        verify_cached(transport, src, dst, self.local, self.port, &mut cache)
    }

    /// Like [`RoceSocket::verify_segment`] through exclusive access: no lock.
    pub fn verify_segment_mut(
        &mut self,
        transport: &[u8],
        src: SocketAddr,
        dst: Option<IpAddr>,
    ) -> Result<Received, Drop> {
        let cache = self.cache.get_mut().unwrap_or_else(|e| e.into_inner());
        verify_cached(transport, src, dst, self.local, self.port, cache)
    }

    /// Receives one datagram into `buf` and verifies its ICRC.
    ///
    /// `Ok(None)` when nothing is waiting; `Ok(Some(Err(drop)))` for a datagram
    /// that arrived but must be dropped (the caller counts it).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<Result<Received, Drop>>> {
        let (len, src, dst, _) = match recvmsg_pktinfo(self.sock.as_raw_fd(), buf) {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(Some(verify(&buf[..len], src, dst, self.local, self.port)))
    }
}

/// Solvers kept per socket (packet lengths seen most recently).
const SOLVER_CACHE: usize = 8;

/// [`verify`] with ID 0 tried first and the ID solver cached per length.
fn verify_cached(
    transport: &[u8],
    src: SocketAddr,
    dst: Option<IpAddr>,
    local: IpAddr,
    local_port: u16,
    cache: &mut IcrcCache,
) -> Result<Received, Drop> {
    if transport.len() < 12 + ICRC_LEN || !src.is_ipv4() {
        return verify(transport, src, dst, local, local_port);
    }
    let dst = match dst {
        Some(d) => d,
        None if !local.is_unspecified() => local,
        None => return Err(Drop::NoDestination),
    };
    let body = transport.len() - ICRC_LEN;
    let carried = u32::from_le_bytes(transport[body..].try_into().map_err(|_| Drop::Runt)?);
    // The ICRC as if the ID were 0; the headers' share is cached per path
    // and length when the destination is the socket's own address.
    let n = ndverbs_wire::ip::IPV4_HEADER_LEN + UDP_HEADER_LEN;
    let icrc0 = if dst == local && dst.is_ipv4() {
        let key = HeadersKey {
            peer: src.ip(),
            peer_port: src.port(),
            ipv4_id: 0,
            transport_len: transport.len() as u32,
            rx: true,
        };
        let h = cache.headers_crc(local, local_port, key);
        icrc::finish(h, &[&transport[..body]])
    } else {
        let (hdr, n) =
            icrc::pseudo_headers(src.ip(), dst, src.port(), local_port, 0, transport.len());
        icrc::compute_split(&hdr[..n], &transport[..body])
    };
    let delta = icrc0.map_err(|_| Drop::Runt)? ^ carried;
    let ok = |id| {
        Ok(Received {
            src,
            dst,
            len: transport.len(),
            ipv4_id: Some(id),
        })
    };
    if delta == 0 {
        return ok(0);
    }
    // Bytes after the ID field inside the CRC input (as icrc::recover_ipv4_id_split).
    let after_id = n - 6 + body;
    let solvers = &mut cache.solvers;
    let i = match solvers.iter().position(|(k, _)| *k == after_id) {
        Some(i) => i,
        None => {
            if solvers.len() >= SOLVER_CACHE {
                solvers.remove(0);
            }
            solvers.push((after_id, icrc::IdSolver::new(after_id)));
            solvers.len() - 1
        }
    };
    match solvers[i].1.solve(delta) {
        Some(id) => ok(id),
        None => Err(Drop::BadIcrc),
    }
}

/// The ICRC of a packet sent from `local:port` to `dst:dst_port` with IPv4 ID
/// `id` (see [`RoceSocket::icrc`]), the headers' share from `cache`.
fn icrc_cached(
    local: IpAddr,
    port: u16,
    cache: &mut IcrcCache,
    dst: IpAddr,
    dst_port: u16,
    id: u16,
    parts: &[&[u8]],
) -> io::Result<u32> {
    let body: usize = parts.iter().map(|p| p.len()).sum();
    if local.is_ipv4() != dst.is_ipv4() || local.is_unspecified() {
        // Not a path this socket sends on (the generic code reports it).
        let (hdr, n) = icrc::pseudo_headers(local, dst, port, dst_port, id, body + ICRC_LEN);
        return icrc::compute_parts(&hdr[..n], parts).map_err(invalid);
    }
    let key = HeadersKey {
        peer: dst,
        peer_port: dst_port,
        ipv4_id: id,
        transport_len: (body + ICRC_LEN) as u32,
        rx: false,
    };
    let h = cache.headers_crc(local, port, key);
    icrc::finish(h, parts).map_err(invalid)
}

/// Checks the ICRC of a received transport packet given what the socket told us.
fn verify(
    transport: &[u8],
    src: SocketAddr,
    dst: Option<IpAddr>,
    local: IpAddr,
    local_port: u16,
) -> Result<Received, Drop> {
    if transport.len() < 12 + ICRC_LEN {
        return Err(Drop::Runt);
    }
    let dst = match dst {
        Some(d) => d,
        None if !local.is_unspecified() => local,
        None => return Err(Drop::NoDestination),
    };
    let mut env = Envelope::new_rocev2(src.ip(), dst, src.port(), transport.len());
    env.udp.dst_port = local_port;
    let mut hdr = [0u8; 48];
    let n = env.write(&mut hdr).map_err(|_| Drop::Runt)?;
    match env.ip {
        IpHeader::V4(_) => match icrc::recover_ipv4_id_split(&hdr[..n], transport) {
            Ok(Some(id)) => Ok(Received {
                src,
                dst,
                len: transport.len(),
                ipv4_id: Some(id),
            }),
            _ => Err(Drop::BadIcrc),
        },
        IpHeader::V6(_) => {
            let body = transport.len() - ICRC_LEN;
            let ok = icrc::compute_split(&hdr[..n], &transport[..body])
                .is_ok_and(|c| c.to_le_bytes() == transport[body..]);
            if ok {
                Ok(Received {
                    src,
                    dst,
                    len: transport.len(),
                    ipv4_id: None,
                })
            } else {
                Err(Drop::BadIcrc)
            }
        }
    }
}

/// Sets both socket buffers to [`SOCKET_BUFFER`] (forcing past the sysctl
/// caps when privileged) and warns once per process when they were capped.
fn set_buffers(sock: &Socket, fd: RawFd) {
    let size = SOCKET_BUFFER as libc::c_int;
    if setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, size).is_err() {
        let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
    }
    if setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, size).is_err() {
        let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
    }
    // Linux reports twice the size it granted.
    let rcv = sock.recv_buffer_size().unwrap_or(0) / 2;
    let snd = sock.send_buffer_size().unwrap_or(0) / 2;
    if rcv < SOCKET_BUFFER || snd < SOCKET_BUFFER {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            tracing::warn!(
                "UDP socket buffers capped at {} KiB receive / {} KiB send (asked {} KiB): bursts \
                 beyond them are dropped and retransmitted; raise net.core.rmem_max and \
                 net.core.wmem_max to at least {} (sysctl -w), or run with CAP_NET_ADMIN",
                rcv >> 10,
                snd >> 10,
                SOCKET_BUFFER >> 10,
                SOCKET_BUFFER
            );
        });
    }
}

fn invalid(e: ndverbs_wire::WireError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
}

fn setsockopt(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` outlives the call and its size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `sendmsg` of `buf` to `dst` with a `UDP_SEGMENT` control message: the
/// kernel cuts it into datagrams of `seg` bytes (the last may be shorter).
fn sendmsg_gso(fd: RawFd, buf: &[u8], dst: SocketAddr, seg: usize) -> io::Result<usize> {
    let addr: socket2::SockAddr = dst.into();
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; zeroed is a valid initial value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = addr.as_ptr() as *mut libc::c_void;
    msg.msg_namelen = addr.len();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as _;
    // SAFETY: the control buffer is 32 bytes, more than CMSG_SPACE(2); the
    // first header lies within it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg as u16);
    }
    // SAFETY: every pointer in `msg` refers to a live buffer of the stated size.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Most runs one [`RoceSocket::send_runs`] call sends.
pub const MAX_RUNS: usize = 8;
/// Most pieces one run gathers (the kernel takes at most 1024 per message).
pub const MAX_RUN_PIECES: usize = 1024;

/// One piece of a datagram to send: `len` bytes at address `base`. Laid out
/// as the kernel's `struct iovec`, so a slice of them is handed to `sendmmsg`
/// as is; plain integers, so the tables that hold them stay `Send`.
///
/// # Example
///
/// ```
/// use ndverbs_engine::udp::IoPiece;
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
/// datagram of `seg`-byte segments, gathered from pieces `iov.0 .. iov.1`.
///
/// # Example
///
/// ```
/// # use ndverbs_engine::event::wait_readable;
/// # use ndverbs_engine::udp::*;
/// # use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
/// # use std::time::Duration;
/// # /// A SEND ONLY to QP `dqpn` carrying "ping", ICRC placeholder included.
/// # fn ping(dqpn: u32) -> Vec<u8> {
/// #     let mut pkt = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, dqpn, 0));
/// #     pkt.payload = b"ping";
/// #     let mut buf = vec![0; pkt.encoded_len().unwrap()];
/// #     pkt.write(&mut buf).unwrap();
/// #     buf
/// # }
/// # fn wait(s: &RoceSocket) { assert!(wait_readable(&[s.fd()], Some(Duration::from_secs(5))).unwrap()[0]) }
/// let a = RoceSocket::bind("127.93.25.1".parse().unwrap())?;
/// let b = RoceSocket::bind("127.93.25.2".parse().unwrap())?;
/// // One packet gathered from three places (headers, payload, ICRC), as the
/// // engine sends a payload straight out of registered memory.
/// let pkt = ping(5);
/// let (hdr, payload) = (&pkt[..12], &pkt[12..16]);
/// let icrc = a.icrc(b.local(), 4791, 0, &[hdr, payload])?.to_le_bytes();
/// let pieces = [IoPiece::of(hdr), IoPiece::of(payload), IoPiece::of(&icrc)];
/// let run = Run { iov: (0, 3), len: 20, seg: 20 };
/// // SAFETY: the pieces are live local buffers.
/// assert_eq!(unsafe { a.send_runs(&pieces, &[run], b.local(), 4791)? }, 1);
/// wait(&b);
/// let mut buf = [0; 4200];
/// let r = b.recv(&mut buf)?.unwrap().expect("ICRC verifies");
/// assert_eq!(&buf[..r.len], &[hdr, payload, &icrc].concat()[..]);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Run {
    /// Its pieces (a range of indices into the piece list).
    pub iov: (usize, usize),
    /// Its length in bytes.
    pub len: usize,
    /// Segment (packet) size.
    pub seg: usize,
}

/// `sendmmsg` of GSO runs (validated by the caller), one message each.
///
/// # Safety
/// Every piece the runs name must be readable memory.
unsafe fn sendmmsg_gso(
    fd: RawFd,
    pieces: &[IoPiece],
    runs: &[Run],
    dst: SocketAddr,
) -> io::Result<usize> {
    let addr: socket2::SockAddr = dst.into();
    let n = runs.len().min(MAX_RUNS);
    if n == 1 && runs[0].iov.1 - runs[0].iov.0 == 1 && runs[0].len <= runs[0].seg {
        // One packet in one piece (a latency-bound exchange): a plain
        // `sendto` spares the kernel the message-vector walk.
        let p = pieces[runs[0].iov.0];
        // SAFETY: the piece is readable memory (the caller's promise) and
        // the address outlives the call.
        let sent = unsafe {
            libc::sendto(
                fd,
                p.base as *const libc::c_void,
                p.len,
                libc::MSG_DONTWAIT,
                addr.as_ptr().cast(),
                addr.len(),
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        return Ok(1);
    }
    let mut controls = [[0u64; 4]; MAX_RUNS];
    // SAFETY: mmsghdr is plain data; zeroed is a valid initial value.
    let mut msgs: [libc::mmsghdr; MAX_RUNS] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        let r = runs[i];
        let m = &mut msgs[i].msg_hdr;
        m.msg_name = addr.as_ptr() as *mut libc::c_void;
        m.msg_namelen = addr.len();
        // IoPiece has iovec's layout (asserted above); the kernel only reads.
        m.msg_iov = pieces[r.iov.0..].as_ptr() as *mut libc::iovec;
        m.msg_iovlen = (r.iov.1 - r.iov.0) as _;
        if r.len > r.seg {
            m.msg_control = controls[i].as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE is a pure computation.
            m.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as _;
            // SAFETY: each control buffer is 32 bytes, more than CMSG_SPACE(2);
            // the first header lies within it.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(m);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), r.seg as u16);
            }
        }
    }
    // SAFETY: the first `n` headers point at live iovecs (readable, by the
    // caller's promise), control buffers and the address, all outliving the call.
    let sent =
        unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

/// What `recvmsg_pktinfo` returns: length, source, destination, GRO segment size.
type RecvInfo = (usize, SocketAddr, Option<IpAddr>, Option<usize>);

/// `recvmsg` that also returns the destination address from `IP_PKTINFO` /
/// `IPV6_PKTINFO` and the segment size of a GRO-coalesced datagram.
fn recvmsg_pktinfo(fd: RawFd, buf: &mut [u8]) -> io::Result<RecvInfo> {
    let mut addr: MaybeUninit<libc::sockaddr_storage> = MaybeUninit::zeroed();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for an in_pktinfo or in6_pktinfo and a UDP_GRO message, 8-byte aligned.
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain data; zeroed is a valid initial value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = addr.as_mut_ptr().cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: every pointer in `msg` refers to a live buffer of the stated size.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if msg.msg_flags & libc::MSG_TRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "datagram larger than the receive buffer",
        ));
    }
    // SAFETY: the kernel filled `addr` with `msg_namelen` valid bytes.
    let src = unsafe { sockaddr_to_std(addr.as_ptr(), msg.msg_namelen) }.ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, "unknown source address family")
    })?;
    let mut dst = None;
    let mut seg = None;
    // SAFETY: CMSG_* walk the control buffer the kernel filled, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let h = &*c;
            if h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_PKTINFO {
                let info = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::in_pktinfo>());
                dst = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    info.ipi_addr.s_addr,
                ))));
            } else if h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == libc::IPV6_PKTINFO {
                let info = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::in6_pktinfo>());
                dst = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
            } else if h.cmsg_level == libc::SOL_UDP && h.cmsg_type == UDP_GRO {
                let s = std::ptr::read_unaligned(cmsg_int(c));
                seg = usize::try_from(s).ok();
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, src, dst, seg))
}

/// The `int` payload of a control message.
///
/// # Safety
/// `c` must be a valid control message header inside a live buffer.
unsafe fn cmsg_int(c: *const libc::cmsghdr) -> *const libc::c_int {
    libc::CMSG_DATA(c).cast::<libc::c_int>()
}

/// # Safety
/// `sa` must point to `len` initialised bytes of a socket address.
unsafe fn sockaddr_to_std(
    sa: *const libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    match i32::from((*sa).ss_family) {
        libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            let a = &*sa.cast::<libc::sockaddr_in>();
            Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))),
                u16::from_be(a.sin_port),
            ))
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            let a = &*sa.cast::<libc::sockaddr_in6>();
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)),
                u16::from_be(a.sin6_port),
            ))
        }
        _ => None,
    }
}

/// Bytes of UDP header, re-exported for callers sizing datagrams.
pub const UDP_HEADER: usize = UDP_HEADER_LEN;

#[cfg(test)]
mod tests {
    use super::*;
    use ndverbs_wire::bth::Bth;
    use ndverbs_wire::opcode::Opcode;
    use ndverbs_wire::packet::Packet;
    use std::time::{Duration, Instant};

    fn recv_wait(s: &RoceSocket, buf: &mut [u8]) -> Result<Received, Drop> {
        let t0 = Instant::now();
        loop {
            if let Some(r) = s.recv(buf).unwrap() {
                return r;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "nothing received");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn send_only(payload: &[u8]) -> Vec<u8> {
        let mut bth = Bth::new(Opcode::RC_SEND_ONLY, 0x11, 0x42);
        bth.ack_req = true;
        bth.pad = Packet::pad_for(payload.len());
        let mut p = Packet::new(bth);
        p.payload = payload;
        let mut v = vec![0u8; p.encoded_len().unwrap()];
        p.write(&mut v).unwrap();
        v
    }

    /// Two adapters on 127.0.0.1 and 127.0.0.2 (same port, as RoCEv2 demands):
    /// the receiver sees a valid ICRC and recovers ID 0, which proves the sender
    /// side's assumption about the kernel's IP ID.
    #[test]
    fn loopback_send_receive_verifies_icrc_and_id_zero() {
        let port = 47910 + (std::process::id() % 50) as u16;
        let a = RoceSocket::bind_port("127.0.0.1".parse().unwrap(), port).unwrap();
        let b = RoceSocket::bind_port("127.0.0.2".parse().unwrap(), port).unwrap();
        let mut pkt = send_only(b"hello, rxe");
        a.send_to(&mut pkt, b.local(), port).unwrap();
        let mut buf = [0u8; MAX_TRANSPORT];
        let r = recv_wait(&b, &mut buf).unwrap();
        assert_eq!(r.src, SocketAddr::new(a.local(), port));
        assert_eq!(r.dst, b.local());
        assert_eq!(r.ipv4_id, Some(0));
        assert_eq!(&buf[..r.len], &pkt[..]);
        let p = Packet::parse(&buf[..r.len]).unwrap();
        assert_eq!(p.payload, b"hello, rxe");
    }

    #[test]
    fn corrupted_datagram_is_dropped() {
        let port = 47960 + (std::process::id() % 30) as u16;
        let a = RoceSocket::bind_port("127.0.0.3".parse().unwrap(), port).unwrap();
        let b = RoceSocket::bind_port("127.0.0.4".parse().unwrap(), port).unwrap();
        let mut pkt = send_only(&[7u8; 64]);
        // Compute a valid ICRC, then corrupt the payload and send it raw.
        a.send_to(&mut pkt, b.local(), port).unwrap();
        let mut buf = [0u8; MAX_TRANSPORT];
        recv_wait(&b, &mut buf).unwrap();
        pkt[20] ^= 1;
        a.sock
            .send_to(&pkt, &SocketAddr::new(b.local(), port).into())
            .unwrap();
        assert_eq!(recv_wait(&b, &mut buf), Err(Drop::BadIcrc));
        assert_eq!(
            verify(
                &[0u8; 8],
                SocketAddr::new(a.local(), 1),
                None,
                a.local(),
                port
            ),
            Err(Drop::Runt)
        );
    }

    /// Packets of `sizes` bytes (BTH + payload + ICRC), distinct payloads.
    fn packets(sizes: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let payload = vec![i as u8 + 1; n - 16];
            let p = send_only(&payload);
            assert_eq!(p.len(), n);
            out.extend_from_slice(&p);
        }
        out
    }

    /// A GSO send reaches a plain receiver as separate datagrams whose ICRCs
    /// verify with IDs 0, 1, 2… (the kernel's software segmentation), and a
    /// GRO receiver as one buffer that splits into the same packets.
    #[test]
    fn gso_send_gro_receive() {
        let port = 48010 + (std::process::id() % 40) as u16;
        let a = RoceSocket::bind_port("127.0.0.5".parse().unwrap(), port).unwrap();
        let b = RoceSocket::bind_port("127.0.0.6".parse().unwrap(), port).unwrap();
        let mut g = RoceSocket::bind_port("127.0.0.7".parse().unwrap(), port).unwrap();
        if !a.gso() || !g.enable_gro() {
            eprintln!("SKIPPED: gso_send_gro_receive — no UDP GSO/GRO in this kernel");
            return;
        }
        let sizes = [1040, 1040, 1040, 500];
        let mut batch = packets(&sizes);
        a.send_segments(&mut batch, 1040, b.local(), port).unwrap();
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut off = 0;
        for (i, &n) in sizes.iter().enumerate() {
            let r = recv_wait(&b, &mut buf).unwrap();
            assert_eq!(r.len, n);
            assert_eq!(r.ipv4_id, Some(i as u16), "segment {i}");
            assert_eq!(&buf[..n - ICRC_LEN], &batch[off..off + n - ICRC_LEN]);
            off += n;
        }
        let mut batch = packets(&sizes);
        a.send_segments(&mut batch, 1040, g.local(), port).unwrap();
        let t0 = Instant::now();
        let mut got = Vec::new();
        while got.len() < sizes.len() {
            assert!(t0.elapsed() < Duration::from_secs(5), "nothing received");
            let Some(d) = g.recv_datagram(&mut buf).unwrap() else {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            };
            for p in buf[..d.len].chunks(d.seg) {
                got.push(g.verify_segment(p, d.src, d.dst).unwrap());
            }
        }
        let ids: Vec<_> = got.iter().map(|r| r.ipv4_id).collect();
        assert_eq!(ids, [Some(0), Some(1), Some(2), Some(3)]);
        let lens: Vec<_> = got.iter().map(|r| r.len).collect();
        assert_eq!(lens, sizes);
        // A corrupted segment is caught on its own.
        let mut batch = packets(&sizes);
        a.send_segments(&mut batch, 1040, g.local(), port).unwrap();
        let d = loop {
            if let Some(d) = g.recv_datagram(&mut buf).unwrap() {
                break d;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        buf[d.seg + 20] ^= 1;
        let verdicts: Vec<_> = buf[..d.len]
            .chunks(d.seg)
            .map(|p| g.verify_segment(p, d.src, d.dst).map(|r| r.ipv4_id))
            .collect();
        assert_eq!(verdicts[1], Err(Drop::BadIcrc));
        assert_eq!(verdicts[0], Ok(Some(0)));
    }

    #[test]
    fn ipv6_loopback() {
        let port = 47990 + (std::process::id() % 9) as u16;
        let Ok(a) = RoceSocket::bind_port("::1".parse().unwrap(), port) else {
            eprintln!("SKIPPED: ipv6_loopback — no ::1 on this machine");
            return;
        };
        let Ok(b) = RoceSocket::bind_port("::1".parse().unwrap(), port + 1) else {
            return;
        };
        let mut pkt = send_only(b"v6");
        a.send_to(&mut pkt, b.local(), port + 1).unwrap();
        let mut buf = [0u8; MAX_TRANSPORT];
        let r = recv_wait(&b, &mut buf).unwrap();
        assert_eq!((r.dst, r.ipv4_id), (b.local(), None));
        assert_eq!(&buf[..r.len], &pkt[..]);
    }
}
