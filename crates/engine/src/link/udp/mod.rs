//! RoCEv2 datagrams over a plain UDP socket.
//!
//! RoCEv2 is UDP to port 4791, so an unprivileged process can speak it with
//! an ordinary socket, set up so that the engine knows every header field the
//! ICRC covers ([`crate::icrc`]):
//!
//! * bound to `<ip>:4791` (rxe replies only to 4791, so the source port is
//!   4791 too) and never `connect()`ed: Linux gives a connected socket's DF
//!   packets IPv4 IDs from a per-socket counter that starts at random, which
//!   the ICRC would have to be signed for. (A second socket per busy peer,
//!   connected, its counter learned and tracked, was built and measured:
//!   sending from it was slower than from this socket, which also receives
//!   — BENCHMARKS.md);
//! * `IP_MTU_DISCOVER = IP_PMTUDISC_DO`: Linux then sends IPv4 with DF set
//!   and ID 0 (segment `i` of a GSO send: ID `i`);
//! * `IP_PKTINFO` only for a wildcard bind (the destination address enters
//!   the ICRC; a socket bound to one address receives only what is sent to
//!   it, and a control message less per receive is cheaper);
//! * `IP_RECVERR` (`IPV6_RECVERR`): ICMP errors about what it sent — a host
//!   with no RoCE endpoint answers "port unreachable" — are queued for it
//!   (see *Errors* below).
//!
//! **Batching.** [`RoceSocket::send_runs`] sends up to
//! [`Runs::MAX`] runs with one `sendmmsg`, each run one
//! UDP GSO datagram gathered from pieces (`UDP_SEGMENT` control message); a
//! lone packet goes with a plain `sendto`. With `UDP_GRO` on
//! ([`RoceSocket::enable_gro`]) [`RoceSocket::recv_datagram`] may return
//! several packets of one peer at once, with their segment size.
//!
//! **GSO refusals.** Whether the kernel does UDP GSO at all is probed once,
//! at bind (the `UDP_SEGMENT` option); a kernel or socket that answers a
//! GSO send with `ENOPROTOOPT`/`EOPNOTSUPP` turns it off for the socket.
//! A run whose segment is larger than the path MTU allows — one QP with a
//! path MTU larger than the interface's — is refused with `EMSGSIZE` by
//! current kernels, but with `EINVAL` by older ones (before the stable
//! updates that changed `udp_send_skb`), the answer they also give when GSO
//! cannot be used at all (as `EIO` is for a device that cannot segment;
//! quinn-udp takes both as "no GSO" for good). So after `EIO`/`EINVAL` the
//! run's first packet is sent alone: refused with `EMSGSIZE`, the run was
//! too big for that path (returned as `EMSGSIZE`, counted and dropped by
//! the engine; other destinations keep GSO); taken, it was GSO itself that
//! failed, and the socket sends one datagram per packet from then on.
//!
//! **Errors.** With `IP_RECVERR` the kernel keeps what the network reports
//! about sent packets in the socket's error queue, with the destination
//! they were sent to, and also sets a pending error that the next send or
//! receive returns instead of doing its work (and `poll` reports
//! `POLLERR`). Such a pending error is neither fatal nor about the call that
//! returns it: the call is made again, and the socket notes that its queue
//! wants reading ([`Link::errors_pending`]); the engine then reads it with
//! [`RoceSocket::recv_error`]. A socket with `IP_RECVERR` also reports
//! `ENOBUFS` from a full device queue, which it would otherwise drop
//! silently.
//!
//! The system calls themselves, and all of the link's `unsafe`, are in
//! `sys.rs`.

mod sys;

use super::{Datagram, Link, LinkError, LinkErrorKind, Runs};
use ndverbs_proto::time::Instant;
use ndverbs_wire::ip::ROCEV2_PORT;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use sys::{setsockopt, UDP_GRO, UDP_SEGMENT};

/// Socket buffer size asked for; the kernel caps it at `net.core.{r,w}mem_max`.
pub const SOCKET_BUFFER: usize = 8 << 20;

/// A UDP socket bound to `<ip>:4791` that sends and receives RoCEv2 packets
/// (see the module docs).
///
/// # Example
///
/// ```
/// use ndverbs_engine::event::wait_readable;
/// use ndverbs_engine::icrc::IcrcCache;
/// use ndverbs_engine::link::{udp::RoceSocket, MAX_DATAGRAM};
/// use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
/// use std::time::Duration;
/// // Plain UDP sockets on <ip>:4791: no privileges, no kernel RDMA.
/// let a = RoceSocket::bind("127.93.24.1".parse().unwrap())?;
/// let b = RoceSocket::bind("127.93.24.2".parse().unwrap())?;
/// let mut pkt = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, 0x12, 7));
/// pkt.payload = b"ping";
/// let mut out = vec![0; pkt.encoded_len().unwrap()];
/// pkt.write(&mut out).unwrap();
/// // The ICRC over the IP/UDP headers the kernel will write (ID 0), then send.
/// IcrcCache::new(a.addr()).fill(&mut out, b.addr(), 0)?;
/// a.send_to(&out, b.addr())?;
/// assert!(wait_readable(&[b.fd()], Some(Duration::from_secs(5)))?[0]);
/// let mut buf = vec![0; MAX_DATAGRAM];
/// let d = b.recv_datagram(&mut buf)?.unwrap();
/// assert_eq!(d.src, a.addr()); // RoCEv2 sends from 4791 too
/// let r = IcrcCache::new(b.addr()).verify(&buf[..d.len], d.src, d.dst).expect("ICRC verifies");
/// assert_eq!(r.ipv4_id, Some(0)); // recovered from the ICRC
/// let got = Packet::parse(&buf[..r.len]).unwrap();
/// assert_eq!((got.bth.dqpn, got.bth.psn, got.payload), (0x12, 7, &b"ping"[..]));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct RoceSocket {
    sock: Socket,
    local: IpAddr,
    port: u16,
    gso: AtomicBool,
    gro: bool,
    /// A send or receive found an error pending, or the descriptor polled
    /// `POLLERR`: the error queue wants reading.
    errors: AtomicBool,
}

impl RoceSocket {
    /// Binds `<local>:4791`, non-blocking, with DF / ID-0 sending and
    /// destination-address reporting.
    pub fn bind(local: IpAddr) -> io::Result<Self> {
        Self::bind_port(local, ROCEV2_PORT)
    }

    /// Like [`RoceSocket::bind`] on another port (0: any; tests only — real
    /// peers always send to 4791).
    pub fn bind_port(local: IpAddr, port: u16) -> io::Result<Self> {
        Self::bind_with(local, port, false)
    }

    /// Like [`RoceSocket::bind_port`], as one member of a `SO_REUSEPORT`
    /// group: every socket of the same user bound the same way shares the
    /// address, and the group's steering program
    /// ([`crate::share`]) decides which one receives a datagram.
    pub fn bind_shared(local: IpAddr, port: u16) -> io::Result<Self> {
        Self::bind_with(local, port, true)
    }

    fn bind_with(local: IpAddr, port: u16, reuse_port: bool) -> io::Result<Self> {
        let domain = if local.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        if local.is_ipv6() {
            sock.set_only_v6(true)?;
        }
        let fd = sock.as_raw_fd();
        set_buffers(&sock, fd);
        // DF (so IPv4 ID 0) always; the destination address of each
        // datagram only on a wildcard bind (see the module docs).
        let (level, mtu_discover, pktinfo, recverr) = if local.is_ipv4() {
            (
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PKTINFO,
                libc::IP_RECVERR,
            )
        } else {
            (
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_RECVPKTINFO,
                libc::IPV6_RECVERR,
            )
        };
        setsockopt(fd, level, mtu_discover, libc::IP_PMTUDISC_DO)?;
        // ICMP errors about our packets (see the module docs).
        setsockopt(fd, level, recverr, 1)?;
        if local.is_unspecified() {
            setsockopt(fd, level, pktinfo, 1)?;
        }
        if reuse_port {
            sock.set_reuse_port(true)?;
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
            errors: AtomicBool::new(false),
        })
    }

    /// Turns on `UDP_GRO`: received packets of one flow may arrive coalesced
    /// (read them with [`RoceSocket::recv_datagram`] into a
    /// [`MAX_DATAGRAM`](crate::link::MAX_DATAGRAM) buffer). Returns whether
    /// the kernel accepted it.
    pub fn enable_gro(&mut self) -> bool {
        self.gro = setsockopt(self.sock.as_raw_fd(), libc::SOL_UDP, UDP_GRO, 1).is_ok();
        self.gro
    }

    /// Turns ECN on: every packet leaves with ECT(1) in its IP ECN field
    /// ([`ECN_ECT1`](crate::link::ECN_ECT1), why that one: there), and each
    /// received datagram reports the ECN field it arrived with
    /// ([`Datagram::ecn`]). Returns whether the kernel accepted both.
    pub fn enable_ecn(&mut self) -> bool {
        let fd = self.sock.as_raw_fd();
        let ect = libc::c_int::from(crate::link::ECN_ECT1);
        if self.local.is_ipv4() {
            setsockopt(fd, libc::IPPROTO_IP, libc::IP_TOS, ect).is_ok()
                && setsockopt(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1).is_ok()
        } else {
            setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, ect).is_ok()
                && setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1).is_ok()
        }
    }

    /// Turns on kernel receive timestamps (`SO_TIMESTAMPNS`): each received
    /// datagram reports when the kernel received it
    /// ([`Datagram::rx_time`], `CLOCK_REALTIME` nanoseconds; one per GRO
    /// datagram, its first packet's). Congestion control measures round
    /// trips to them, so the time a packet then waits in the socket for our
    /// thread — on a loaded host, milliseconds — is not taken for queueing
    /// on the path. The kernel stamps software receive times only while
    /// some socket asks, at `netif_rx`/`netif_receive_skb` (before the
    /// protocol's processing); the first socket of the host to ask turns
    /// that on a moment later (a deferred static key), and until then a
    /// datagram is stamped when read — as good as no time stamp. Returns
    /// whether the kernel accepted it.
    pub fn enable_rx_timestamps(&self) -> bool {
        setsockopt(
            self.sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            1,
        )
        .is_ok()
    }

    /// Whether sends may use UDP GSO (off after the kernel refused one).
    pub fn gso(&self) -> bool {
        self.gso.load(Ordering::Relaxed)
    }

    /// Turns GSO off (or back on, if the kernel supports it).
    pub fn set_gso(&self, on: bool) {
        self.gso.store(on, Ordering::Relaxed);
    }

    /// The bound local address.
    pub fn local(&self) -> IpAddr {
        self.local
    }

    /// The UDP port bound (4791 except in tests).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The bound address and port.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.local, self.port)
    }

    /// A second descriptor of the same socket (a shared port's coordinator
    /// attaches steering programs through it; the socket leaves its group
    /// only when both are closed).
    pub(crate) fn dup_socket(&self) -> io::Result<Socket> {
        self.sock.try_clone()
    }

    /// The file descriptor, for polling.
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Sends one datagram (a transport packet, ICRC filled in) to `dst`.
    /// `WouldBlock` when the socket buffer is full; `EMSGSIZE` when it is
    /// larger than the path carries.
    pub fn send_to(&self, pkt: &[u8], dst: SocketAddr) -> io::Result<()> {
        let n = self.again_if_pending(|| sys::sendto(self.fd(), pkt, dst))?;
        if n != pkt.len() {
            return Err(io::Error::other("short UDP send"));
        }
        Ok(())
    }

    /// Sends up to [`Runs::MAX`] runs to `dst` with one `sendmmsg` (see
    /// [`Link::send_runs`]); returns how many runs the kernel took
    /// (`WouldBlock` when none). A run refused for its size is `EMSGSIZE`
    /// and leaves GSO on; a refusal of GSO itself turns it off for good
    /// (see the module docs).
    pub fn send_runs(&self, runs: Runs<'_>, dst: SocketAddr) -> io::Result<usize> {
        let runs = runs.take(Runs::MAX);
        let r = self.again_if_pending(|| sys::sendmmsg_gso(self.fd(), runs, dst));
        match r {
            // sendmmsg stops at the first message it refuses: the first run.
            Err(e) if runs.runs().first().is_some_and(|r| r.len > r.seg) => {
                Err(self.gso_refused(e, runs, dst))
            }
            r => r,
        }
    }

    /// Sorts out why the GSO run `runs[0]` was refused with `e` (see the
    /// module docs); returns the error to report.
    #[cold]
    fn gso_refused(&self, e: io::Error, runs: Runs<'_>, dst: SocketAddr) -> io::Error {
        match e.raw_os_error() {
            Some(libc::ENOPROTOOPT | libc::EOPNOTSUPP) => {
                self.gso_off(&e, dst);
                e
            }
            Some(libc::EIO | libc::EINVAL) => {
                // Its first packet alone (signed for IPv4 ID 0, as a lone
                // packet leaves): too big for the path, or GSO's fault?
                let seg = runs.runs()[0].seg;
                let mut first = Vec::with_capacity(runs.runs()[0].len);
                runs.gather(0, &mut first);
                first.truncate(seg);
                match self.send_to(&first, dst) {
                    Ok(()) => {
                        self.gso_off(&e, dst);
                        e
                    }
                    Err(alone) => alone,
                }
            }
            _ => e,
        }
    }

    #[cold]
    fn gso_off(&self, e: &io::Error, dst: SocketAddr) {
        if self.gso() {
            tracing::warn!(error = %e, peer = %dst, "UDP GSO refused by the kernel or the device; sending one datagram per packet from now on");
            self.set_gso(false);
        }
    }

    /// Runs `call`, once more if it returned an error pending on the socket
    /// rather than its own (see the module docs), noting that the error
    /// queue wants reading.
    #[inline]
    fn again_if_pending<T>(&self, mut call: impl FnMut() -> io::Result<T>) -> io::Result<T> {
        match call() {
            Err(e) if reported_error(&e) => {
                self.errors.store(true, Ordering::Relaxed);
                call()
            }
            r => r,
        }
    }

    /// Receives one datagram (with GRO on, possibly several coalesced
    /// packets) into `buf`; `Ok(None)` when nothing is waiting. An error the
    /// network reported is noted for [`RoceSocket::recv_error`] (see the
    /// module docs), not returned.
    pub fn recv_datagram(&self, buf: &mut [u8]) -> io::Result<Option<Datagram>> {
        // Each pending error is returned once: a few in a row at most.
        for _ in 0..4 {
            match sys::recvmsg_pktinfo(self.fd(), buf) {
                Ok(r) => {
                    return Ok(Some(Datagram {
                        src: r.src,
                        dst: r.dst,
                        ecn: r.tos & 3,
                        len: r.len,
                        seg: r.seg.filter(|&s| s > 0 && s < r.len).unwrap_or(r.len),
                        rx_time: r.rx_time,
                    }))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error().is_some() => {
                    self.errors.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Whether the error queue may hold reports (see the module docs).
    pub fn errors_pending(&self) -> bool {
        self.errors.load(Ordering::Relaxed)
    }

    /// The next report of the error queue: the destination of the packet it
    /// is about and what happened; `Ok(None)` when the queue is empty.
    pub fn recv_error(&self) -> io::Result<Option<LinkError>> {
        loop {
            let Some(q) = sys::recv_errqueue(self.fd())? else {
                self.errors.store(false, Ordering::Relaxed);
                return Ok(None);
            };
            const ICMP_DEST_UNREACH: u8 = 3;
            const ICMP_PORT_UNREACH: u8 = 3;
            const ICMPV6_DEST_UNREACH: u8 = 1;
            const ICMPV6_PORT_UNREACH: u8 = 4;
            let kind = match (q.origin, q.icmp, q.errno) {
                (_, _, 0) => continue,
                (libc::SO_EE_ORIGIN_ICMP, (ICMP_DEST_UNREACH, ICMP_PORT_UNREACH), _)
                | (libc::SO_EE_ORIGIN_ICMP6, (ICMPV6_DEST_UNREACH, ICMPV6_PORT_UNREACH), _) => {
                    LinkErrorKind::PortUnreachable
                }
                (_, _, libc::EMSGSIZE) => LinkErrorKind::TooBig { mtu: q.info },
                (libc::SO_EE_ORIGIN_ICMP | libc::SO_EE_ORIGIN_ICMP6, _, e) => {
                    LinkErrorKind::Unreachable(e)
                }
                (_, _, e) => LinkErrorKind::Other(e),
            };
            let local = q.origin == libc::SO_EE_ORIGIN_LOCAL;
            return Ok(Some(LinkError {
                peer: q.dst,
                kind,
                local,
            }));
        }
    }
}

/// The engine's use of the socket: as the inherent calls, but a full send
/// buffer gets a moment (up to a millisecond, once per call) to drain before
/// `WouldBlock` is reported — the transport would otherwise retransmit what
/// a short wait lets through.
impl Link for RoceSocket {
    fn local_addr(&self) -> SocketAddr {
        self.addr()
    }

    fn gso(&self) -> bool {
        RoceSocket::gso(self)
    }

    fn fd(&self) -> RawFd {
        RoceSocket::fd(self)
    }

    fn send(&mut self, pkt: &[u8], dst: SocketAddr) -> io::Result<()> {
        match self.send_to(pkt, dst) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sys::wait_writable(self.fd());
                self.send_to(pkt, dst)
            }
            r => r,
        }
    }

    fn send_runs(&mut self, runs: Runs<'_>, dst: SocketAddr) -> io::Result<usize> {
        match RoceSocket::send_runs(self, runs, dst) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sys::wait_writable(self.fd());
                RoceSocket::send_runs(self, runs, dst)
            }
            r => r,
        }
    }

    fn recv(&mut self, buf: &mut [u8], _now: Instant) -> io::Result<Option<Datagram>> {
        self.recv_datagram(buf)
    }

    fn errors_pending(&self) -> bool {
        RoceSocket::errors_pending(self)
    }

    fn note_error_event(&self) {
        self.errors.store(true, Ordering::Relaxed);
    }

    fn recv_error(&mut self) -> io::Result<Option<LinkError>> {
        RoceSocket::recv_error(self)
    }
}

/// Whether a send or receive returned an error the network reported about
/// an earlier packet (pending on the socket with `IP_RECVERR`) rather than
/// one of its own: ICMP unreachables of every kind.
fn reported_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNREFUSED
                | libc::EMSGSIZE
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EHOSTDOWN
                | libc::ENETDOWN
                | libc::EPROTO
                | libc::ENOPROTOOPT
                | libc::EACCES
        )
    )
}

/// Sets both socket buffers to [`SOCKET_BUFFER`] (forcing past the sysctl
/// caps when privileged) and warns once per process when they were capped:
/// bursts beyond them are dropped.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icrc::{IcrcCache, Received, VerifyError};
    use crate::link::{IoPiece, Run, MAX_DATAGRAM, MAX_TRANSPORT};
    use ndverbs_wire::bth::Bth;
    use ndverbs_wire::icrc::ICRC_LEN;
    use ndverbs_wire::opcode::Opcode;
    use ndverbs_wire::packet::Packet;
    use std::time::Duration;

    fn recv_wait(s: &RoceSocket, buf: &mut [u8]) -> Datagram {
        let t0 = std::time::Instant::now();
        loop {
            if let Some(d) = s.recv_datagram(buf).unwrap() {
                return d;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "nothing received");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn verify_wait(s: &RoceSocket, buf: &mut [u8]) -> Result<Received, VerifyError> {
        let d = recv_wait(s, buf);
        IcrcCache::new(s.addr()).verify(&buf[..d.len], d.src, d.dst)
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

    /// A SEND ONLY carrying `payload`, its ICRC signed for `from` → `to`
    /// with IPv4 ID 0.
    fn signed(payload: &[u8], from: &RoceSocket, to: &RoceSocket) -> Vec<u8> {
        let mut pkt = send_only(payload);
        IcrcCache::new(from.addr())
            .fill(&mut pkt, to.addr(), 0)
            .unwrap();
        pkt
    }

    /// Two sockets on 127.0.0.1 and 127.0.0.2 (same port, as RoCEv2 demands):
    /// the receiver sees a valid ICRC and recovers ID 0, which proves the
    /// sender side's assumption about the kernel's IP ID.
    #[test]
    fn loopback_send_receive_verifies_icrc_and_id_zero() {
        let port = 47910 + (std::process::id() % 50) as u16;
        let a = RoceSocket::bind_port("127.0.0.1".parse().unwrap(), port).unwrap();
        let b = RoceSocket::bind_port("127.0.0.2".parse().unwrap(), port).unwrap();
        let pkt = signed(b"hello, rxe", &a, &b);
        a.send_to(&pkt, b.addr()).unwrap();
        let mut buf = [0u8; MAX_TRANSPORT];
        let r = verify_wait(&b, &mut buf).unwrap();
        assert_eq!(r.src, a.addr());
        assert_eq!(r.dst, b.local());
        assert_eq!(r.ipv4_id, Some(0));
        assert_eq!(&buf[..r.len], &pkt[..]);
        let p = Packet::parse(&buf[..r.len]).unwrap();
        assert_eq!(p.payload, b"hello, rxe");
    }

    /// With receive time stamps on, a datagram carries the kernel's
    /// `CLOCK_REALTIME` receive time, taken before the receive call and
    /// after the send; without, none.
    #[test]
    fn receive_time_stamps_are_the_kernels_realtime() {
        // Any free ports: the time stamps do not care, and a fixed one may
        // be some other socket's ephemeral port.
        let a = RoceSocket::bind_port("127.0.0.1".parse().unwrap(), 0).unwrap();
        let b = RoceSocket::bind_port("127.0.0.2".parse().unwrap(), 0).unwrap();
        let pkt = signed(b"stamped", &a, &b);
        let mut buf = [0u8; MAX_TRANSPORT];
        a.send_to(&pkt, b.addr()).unwrap();
        assert_eq!(recv_wait(&b, &mut buf).rx_time, None, "not asked for");
        assert!(b.enable_rx_timestamps());
        let realtime = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        };
        // The kernel turns stamping on receive on a moment later (a
        // deferred static key, `netstamp_work`) unless another socket of
        // the host already wants it; until then a datagram is stamped when
        // read. So a few tries.
        for _ in 0..50 {
            let before = realtime();
            a.send_to(&pkt, b.addr()).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            let t = recv_wait(&b, &mut buf).rx_time.expect("a time stamp");
            let after = realtime();
            assert!(before <= t, "stamped {} ns before the send", before - t);
            // Received as sent, not when read 20 ms later.
            if t + 10_000_000 < after {
                return;
            }
        }
        panic!("every datagram was stamped when read, not when received");
    }

    #[test]
    fn corrupted_datagram_is_dropped() {
        let port = 47960 + (std::process::id() % 30) as u16;
        let a = RoceSocket::bind_port("127.0.0.3".parse().unwrap(), port).unwrap();
        let b = RoceSocket::bind_port("127.0.0.4".parse().unwrap(), port).unwrap();
        let mut pkt = signed(&[7u8; 64], &a, &b);
        pkt[20] ^= 1;
        a.send_to(&pkt, b.addr()).unwrap();
        let mut buf = [0u8; MAX_TRANSPORT];
        assert_eq!(verify_wait(&b, &mut buf), Err(VerifyError::BadIcrc));
    }

    /// Packets of `sizes` bytes (BTH + payload + ICRC), distinct payloads,
    /// signed for IPv4 IDs 0, 1, 2… as one GSO run to `dst`.
    fn run_of(sizes: &[usize], from: SocketAddr, dst: SocketAddr) -> Vec<u8> {
        let mut icrc = IcrcCache::new(from);
        let mut out = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let mut p = send_only(&vec![i as u8 + 1; n - 16]);
            assert_eq!(p.len(), n);
            icrc.fill(&mut p, dst, i as u16).unwrap();
            out.extend_from_slice(&p);
        }
        out
    }

    fn send_run(a: &RoceSocket, bytes: &[u8], seg: usize, dst: SocketAddr) {
        let pieces = [IoPiece::of(bytes)];
        let run = [Run {
            iov: (0, 1),
            len: bytes.len(),
            seg,
        }];
        // SAFETY: one live local buffer.
        let runs = unsafe { Runs::new(&pieces, &run) }.unwrap();
        assert_eq!(a.send_runs(runs, dst).unwrap(), 1);
    }

    /// A GSO run reaches a plain receiver as separate datagrams whose ICRCs
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
        let batch = run_of(&sizes, a.addr(), b.addr());
        send_run(&a, &batch, 1040, b.addr());
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut off = 0;
        for (i, &n) in sizes.iter().enumerate() {
            let r = verify_wait(&b, &mut buf).unwrap();
            assert_eq!(r.len, n);
            assert_eq!(r.ipv4_id, Some(i as u16), "segment {i}");
            assert_eq!(&buf[..n - ICRC_LEN], &batch[off..off + n - ICRC_LEN]);
            off += n;
        }
        let mut icrc = IcrcCache::new(g.addr());
        let batch = run_of(&sizes, a.addr(), g.addr());
        send_run(&a, &batch, 1040, g.addr());
        let mut got = Vec::new();
        while got.len() < sizes.len() {
            let d = recv_wait(&g, &mut buf);
            for p in d.packets() {
                got.push(icrc.verify(&buf[p], d.src, d.dst).unwrap());
            }
        }
        let ids: Vec<_> = got.iter().map(|r| r.ipv4_id).collect();
        assert_eq!(ids, [Some(0), Some(1), Some(2), Some(3)]);
        let lens: Vec<_> = got.iter().map(|r| r.len).collect();
        assert_eq!(lens, sizes);
        // A corrupted segment is caught on its own.
        let mut batch = run_of(&sizes, a.addr(), g.addr());
        batch[1040 + 20] ^= 1;
        send_run(&a, &batch, 1040, g.addr());
        let d = recv_wait(&g, &mut buf);
        let verdicts: Vec<_> = d
            .packets()
            .map(|p| icrc.verify(&buf[p], d.src, d.dst).map(|r| r.ipv4_id))
            .collect();
        assert_eq!(verdicts[1], Err(VerifyError::BadIcrc));
        assert_eq!(verdicts[0], Ok(Some(0)));
    }

    /// Runs of `n` packets of `size` bytes (signed for `a` → `dst`).
    fn try_run(a: &RoceSocket, n: usize, size: usize, dst: SocketAddr) -> io::Result<usize> {
        let bytes = run_of(&vec![size; n], a.addr(), dst);
        let pieces = [IoPiece::of(&bytes)];
        let run = [Run {
            iov: (0, 1),
            len: bytes.len(),
            seg: size,
        }];
        // SAFETY: one live local buffer.
        a.send_runs(unsafe { Runs::new(&pieces, &run) }?, dst)
    }

    /// A run whose segments a 1500-byte path cannot carry is refused with
    /// `EMSGSIZE` (whichever errno the kernel gave), and GSO stays on: a run
    /// that fits, to the same or another destination, is still one GSO
    /// send. (Needs root for the namespaces: skipped otherwise.)
    #[test]
    fn a_run_too_big_for_the_path_is_emsgsize_and_gso_stays_on() {
        use ndverbs_testkit::netns::Netns;
        let Some((na, _nb)) = Netns::veth_pair("10.99.7.1/24", "10.99.7.2/24") else {
            return;
        };
        let a = na
            .run(|| RoceSocket::bind("10.99.7.1".parse().unwrap()))
            .unwrap();
        if !a.gso() {
            eprintln!("SKIPPED: no UDP GSO in this kernel");
            return;
        }
        let far: SocketAddr = "10.99.7.2:4791".parse().unwrap();
        let near: SocketAddr = "127.0.0.9:4791".parse().unwrap();
        let e = try_run(&a, 4, 4096 + 40, far).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE), "{e}");
        assert!(a.gso(), "one oversize run turned GSO off");
        assert_eq!(try_run(&a, 4, 1040, far).unwrap(), 1);
        assert_eq!(try_run(&a, 4, 4096 + 40, near).unwrap(), 1);
        assert!(a.gso());
        // Nothing listens at either end: what comes back is reported.
        while let Some(r) = a.recv_error().unwrap() {
            assert_eq!(r.kind, LinkErrorKind::PortUnreachable, "{r:?}");
        }
        assert!(!a.errors_pending());
    }

    /// A socket whose GSO sends the kernel refuses although a lone packet
    /// passes (here: UDP checksums off, which GSO needs) falls back to one
    /// datagram per packet for good.
    #[test]
    fn gso_refused_for_itself_falls_back_to_one_datagram_per_packet() {
        let port = 48060 + (std::process::id() % 30) as u16;
        let a = RoceSocket::bind_port("127.0.0.8".parse().unwrap(), port).unwrap();
        let b = RoceSocket::bind_port("127.0.0.9".parse().unwrap(), port).unwrap();
        if !a.gso() {
            eprintln!("SKIPPED: no UDP GSO in this kernel");
            return;
        }
        setsockopt(a.fd(), libc::SOL_SOCKET, libc::SO_NO_CHECK, 1).unwrap();
        let e = try_run(&a, 3, 1040, b.addr()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        assert!(!a.gso(), "GSO off after the kernel refused it");
        // The run's first packet went out alone.
        let mut buf = vec![0u8; MAX_DATAGRAM];
        assert_eq!(recv_wait(&b, &mut buf).len, 1040);
    }

    /// Nothing listens on the port: the kernel's ICMP port unreachable is
    /// reported with the destination, the pending error the next receive
    /// would return is absorbed, and sending goes on.
    #[test]
    fn port_unreachable_is_reported_with_the_destination() {
        let port = 48100 + (std::process::id() % 30) as u16;
        let a = RoceSocket::bind_port("127.0.0.10".parse().unwrap(), port).unwrap();
        let b = RoceSocket::bind_port("127.0.0.11".parse().unwrap(), port).unwrap();
        let nobody: SocketAddr = SocketAddr::new("127.0.0.12".parse().unwrap(), port);
        port_unreachable(&a, &b, nobody);
    }

    /// As above over IPv6 (ICMPv6 port unreachable, `IPV6_RECVERR`).
    #[test]
    fn port_unreachable_is_reported_over_ipv6() {
        let port = 48140 + (std::process::id() % 9) as u16;
        let Ok(a) = RoceSocket::bind_port("::1".parse().unwrap(), port) else {
            eprintln!("SKIPPED: port_unreachable_is_reported_over_ipv6 — no ::1 on this machine");
            return;
        };
        let Ok(b) = RoceSocket::bind_port("::1".parse().unwrap(), port + 10) else {
            return;
        };
        port_unreachable(&a, &b, SocketAddr::new("::1".parse().unwrap(), port + 20));
    }

    fn port_unreachable(a: &RoceSocket, b: &RoceSocket, nobody: SocketAddr) {
        a.send_to(&signed(b"anyone?", a, b), nobody).unwrap();
        let t0 = std::time::Instant::now();
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let report = loop {
            assert_eq!(a.recv_datagram(&mut buf).unwrap(), None);
            if a.errors_pending() {
                if let Some(r) = a.recv_error().unwrap() {
                    break r;
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "no report");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(report.peer, nobody);
        assert_eq!(report.kind, LinkErrorKind::PortUnreachable);
        assert!(!report.local);
        assert_eq!(a.recv_error().unwrap(), None);
        assert!(!a.errors_pending());
        // The socket still sends.
        let pkt = signed(b"hello", a, b);
        a.send_to(&pkt, b.addr()).unwrap();
        assert_eq!(recv_wait(b, &mut buf).len, pkt.len());
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
        let pkt = signed(b"v6", &a, &b);
        a.send_to(&pkt, b.addr()).unwrap();
        let mut buf = [0u8; MAX_TRANSPORT];
        let r = verify_wait(&b, &mut buf).unwrap();
        assert_eq!((r.dst, r.ipv4_id), (b.local(), None));
        assert_eq!(&buf[..r.len], &pkt[..]);
    }
}
