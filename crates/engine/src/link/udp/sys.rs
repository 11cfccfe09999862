//! The system calls behind [`RoceSocket`](super::RoceSocket): socket options,
//! `sendmmsg` with UDP GSO control messages, and `recvmsg` with the
//! destination address and GRO segment size. All of the link's `unsafe` is
//! here.

use crate::link::Runs;
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;

/// `UDP_SEGMENT` (linux/udp.h): GSO segment size, socket option or cmsg.
pub(super) const UDP_SEGMENT: libc::c_int = 103;
/// `UDP_GRO` (linux/udp.h): receive coalesced datagrams, segment size in a cmsg.
pub(super) const UDP_GRO: libc::c_int = 104;

pub(super) fn setsockopt(
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

/// `sendto` of one buffer.
pub(super) fn sendto(fd: RawFd, buf: &[u8], dst: SocketAddr) -> io::Result<usize> {
    let addr: socket2::SockAddr = dst.into();
    // SAFETY: the buffer and the address outlive the call.
    let n = unsafe {
        libc::sendto(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
            addr.as_ptr().cast(),
            addr.len(),
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `sendmmsg` of the first [`Runs::MAX`] runs, one message each.
pub(super) fn sendmmsg_gso(fd: RawFd, runs: Runs<'_>, dst: SocketAddr) -> io::Result<usize> {
    let addr: socket2::SockAddr = dst.into();
    let runs = runs.take(Runs::MAX);
    let n = runs.len();
    if let [r] = runs.runs() {
        if let ([p], true) = (runs.pieces_of(0), r.len <= r.seg) {
            // One packet in one piece (a latency-bound exchange): a plain
            // `sendto` spares the kernel the message-vector walk.
            // SAFETY: the piece is readable memory (the promise `Runs`
            // carries) and the address outlives the call.
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
    }
    let mut controls = [[0u64; 4]; Runs::MAX];
    // SAFETY: mmsghdr is plain data; zeroed is a valid initial value.
    let mut msgs: [libc::mmsghdr; Runs::MAX] = unsafe { std::mem::zeroed() };
    for (i, r) in runs.runs().iter().enumerate() {
        let m = &mut msgs[i].msg_hdr;
        m.msg_name = addr.as_ptr() as *mut libc::c_void;
        m.msg_namelen = addr.len();
        // IoPiece has iovec's layout (asserted with its definition); the
        // kernel only reads.
        let iov = runs.pieces_of(i);
        m.msg_iov = iov.as_ptr() as *mut libc::iovec;
        m.msg_iovlen = iov.len() as _;
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
    // SAFETY: the first `n` headers point at live iovecs (readable: the
    // promise `Runs` carries), control buffers and the address, all
    // outliving the call.
    let sent =
        unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

/// A `msghdr` for `recvmsg` into one buffer (`iov`), with room for the
/// source address in `addr` and control messages in `control`; every
/// pointer in it borrows from the arguments, which must outlive its use.
fn recv_msghdr(
    addr: &mut MaybeUninit<libc::sockaddr_storage>,
    iov: &mut libc::iovec,
    control: &mut [u64; 16],
) -> libc::msghdr {
    // SAFETY: msghdr is plain data; zeroed is a valid initial value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = addr.as_mut_ptr().cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(control) as _;
    msg
}

/// What `recvmsg_pktinfo` returns.
pub(super) struct RecvInfo {
    pub len: usize,
    pub src: SocketAddr,
    /// From `IP_PKTINFO`/`IPV6_PKTINFO` (a wildcard bind).
    pub dst: Option<IpAddr>,
    /// The GRO segment size.
    pub seg: Option<usize>,
    /// The IPv4 TOS or IPv6 traffic class (0 unless asked for with
    /// `IP_RECVTOS`/`IPV6_RECVTCLASS`).
    pub tos: u8,
    /// The kernel's receive time in `CLOCK_REALTIME` nanoseconds (with
    /// `SO_TIMESTAMPNS`).
    pub rx_time: Option<u64>,
}

/// `recvmsg` that also returns the destination address from `IP_PKTINFO` /
/// `IPV6_PKTINFO` and the segment size of a GRO-coalesced datagram.
pub(super) fn recvmsg_pktinfo(fd: RawFd, buf: &mut [u8]) -> io::Result<RecvInfo> {
    let mut addr: MaybeUninit<libc::sockaddr_storage> = MaybeUninit::zeroed();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for an in_pktinfo or in6_pktinfo (32 or 40 bytes with its
    // header), a UDP_GRO (24), a TOS or traffic class (24) and a timespec
    // (32) message, 8-byte aligned: 120 bytes at most.
    let mut control = [0u64; 16];
    let mut msg = recv_msghdr(&mut addr, &mut iov, &mut control);
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
    let mut tos = 0u8;
    let mut rx_time = None;
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
                let s = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                seg = usize::try_from(s).ok();
            } else if h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_TOS {
                // One byte (ip_cmsg_recv_tos).
                tos = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<u8>());
            } else if h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == libc::IPV6_TCLASS {
                let t = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                tos = (t & 0xff) as u8;
            } else if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_TIMESTAMPNS {
                // The target's own `SO_TIMESTAMPNS` (old or new numbering)
                // comes with the target's own timespec.
                let t = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                rx_time = timespec_ns(t.tv_sec as i64, t.tv_nsec as i64);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(RecvInfo {
        len: n as usize,
        src,
        dst,
        seg,
        tos,
        rx_time,
    })
}

/// A timespec as nanoseconds, if it is a time after the epoch that fits.
fn timespec_ns(sec: i64, nsec: i64) -> Option<u64> {
    let s = u64::try_from(sec).ok()?;
    let n = u64::try_from(nsec).ok().filter(|&n| n < 1_000_000_000)?;
    s.checked_mul(1_000_000_000)?
        .checked_add(n)
        .filter(|&t| t > 0)
}

/// # Safety
/// `sa` must point to `len` initialised bytes of a socket address.
unsafe fn sockaddr_to_std(
    sa: *const libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    // SAFETY: the caller vouches for `len` bytes; each arm reads only a
    // structure of the family the kernel wrote and that fits in `len`.
    unsafe {
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
}

/// Waits up to a millisecond for room in a socket's send buffer.
pub(super) fn wait_writable(fd: RawFd) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, 1) };
}

/// One entry of a socket's error queue (`IP_RECVERR`/`IPV6_RECVERR`).
#[derive(Debug, Clone, Copy)]
pub(super) struct QueuedError {
    /// The destination of the packet the error is about (the errqueue
    /// read's `msg_name`).
    pub dst: SocketAddr,
    /// `ee_errno`.
    pub errno: i32,
    /// `ee_origin` (`SO_EE_ORIGIN_*`).
    pub origin: u8,
    /// `ee_type` and `ee_code`: the ICMP type and code for ICMP origins.
    pub icmp: (u8, u8),
    /// `ee_info`: the MTU for `EMSGSIZE`.
    pub info: u32,
}

/// Reads one entry of the socket's error queue (`MSG_ERRQUEUE`); `Ok(None)`
/// when it is empty. The offending packet's bytes are not wanted: a
/// zero-length buffer (the kernel truncates them away).
pub(super) fn recv_errqueue(fd: RawFd) -> io::Result<Option<QueuedError>> {
    let mut addr: MaybeUninit<libc::sockaddr_storage> = MaybeUninit::zeroed();
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 0,
    };
    // Room for a sock_extended_err and the offender's sockaddr_in6.
    let mut control = [0u64; 16];
    let mut msg = recv_msghdr(&mut addr, &mut iov, &mut control);
    // SAFETY: every pointer in `msg` refers to a live buffer of the stated size.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(e)
        };
    }
    // SAFETY: the kernel filled `addr` with `msg_namelen` valid bytes.
    let dst = unsafe { sockaddr_to_std(addr.as_ptr(), msg.msg_namelen) };
    let mut found = None;
    // SAFETY: CMSG_* walk the control buffer the kernel filled, within
    // msg_controllen; the IP_RECVERR message holds a sock_extended_err.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let h = &*c;
            if (h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_RECVERR)
                || (h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == libc::IPV6_RECVERR)
            {
                found = Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(c).cast::<libc::sock_extended_err>(),
                ));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let (Some(ee), Some(dst)) = (found, dst) else {
        // An entry without the report or the address (a report of another
        // kind): read, and nothing to say about it.
        return Ok(Some(QueuedError {
            dst: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            errno: 0,
            origin: 0,
            icmp: (0, 0),
            info: 0,
        }));
    };
    Ok(Some(QueuedError {
        dst,
        errno: ee.ee_errno as i32,
        origin: ee.ee_origin,
        icmp: (ee.ee_type, ee.ee_code),
        info: ee.ee_info,
    }))
}
