//! Addresses: `rdma_bind_addr`, `rdma_resolve_addr`, `rdma_resolve_route`,
//! the port table, and socket addresses as C lays them out.
//!
//! A device is a local address (`crate::device`), so binding to an address
//! picks its device, and resolving a destination asks the kernel which
//! local address it would send from (a `connect()`ed UDP socket: verbs'
//! `Device::route_to`) and takes that address's device. There is nothing
//! to resolve on the wire for RoCE: the peer's GID is its address, so both
//! steps end at once with their event. Binding to the wildcard address
//! binds no device (`verbs` stays NULL), and listening there listens on
//! every device (`conn`). A loopback address binds no device either, as
//! in the kernel; listening there listens on the device of that address.
//!
//! Ports: rdma_cm ports are this process's (the engine's CM demultiplexes
//! by service ID, and a device belongs to one process), so a table here
//! keeps them apart as the kernel's port space does: port 0 picks a free
//! ephemeral port (the kernel's default range, 32768–60999), a port in use
//! on an overlapping address is `EADDRINUSE` unless both ids set
//! `RDMA_OPTION_ID_REUSEADDR` and neither listens.

use super::abi::*;
use super::channel::ConnData;
use super::devices::{self, CmDev};
use super::id::{self, deliver, Phase, Shared, State};
use crate::ffi::ret_minus1;
use libc::{c_int, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t};
use ndverbs_verbs::Device;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Mutex, OnceLock};

/// The port spaces ids may use: TCP's (0x0106: RC QPs, REQ/REP/RTU) and
/// UDP's (0x0111: UD QPs, resolved by SIDR). IPoIB's is not offered
/// (`EOPNOTSUPP`), nor is the native IB space; anything else is `EINVAL`,
/// as from the kernel. As the kernel's, the two spaces' ports are apart: a
/// TCP and a UDP id may hold the same port (their service IDs differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum PortSpace {
    Tcp = RDMA_PS_TCP,
    Udp = RDMA_PS_UDP,
}

impl PortSpace {
    pub(crate) fn from_c(ps: c_int) -> Result<PortSpace, c_int> {
        match ps {
            RDMA_PS_TCP => Ok(PortSpace::Tcp),
            RDMA_PS_UDP => Ok(PortSpace::Udp),
            RDMA_PS_IPOIB | RDMA_PS_IB => Err(libc::EOPNOTSUPP),
            _ => Err(libc::EINVAL),
        }
    }
}

/// Reads a C socket address: `EINVAL` for NULL, `EAFNOSUPPORT` for a
/// family other than IPv4 and IPv6 (`AF_IB` included).
///
/// # Safety
/// `p` must be NULL or point to a socket address of its family's size.
pub(crate) unsafe fn read_sockaddr(p: *const sockaddr) -> Result<SocketAddr, c_int> {
    if p.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the family field of the caller's address.
    match unsafe { (*p).sa_family } as c_int {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let s = unsafe { std::ptr::read_unaligned(p as *const sockaddr_in) };
            Ok(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))),
                u16::from_be(s.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let s = unsafe { std::ptr::read_unaligned(p as *const sockaddr_in6) };
            Ok(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(s.sin6_addr.s6_addr)),
                u16::from_be(s.sin6_port),
            ))
        }
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// `a` as a C socket address, and its length.
pub(crate) fn to_storage(a: SocketAddr) -> (sockaddr_storage, socklen_t) {
    // SAFETY: plain C data; all zeroes is valid.
    let mut ss: sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            // SAFETY: plain C data.
            let mut s: sockaddr_in = unsafe { std::mem::zeroed() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            // SAFETY: a sockaddr_in fits in a sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut sockaddr_in, s) };
            std::mem::size_of::<sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: plain C data.
            let mut s: sockaddr_in6 = unsafe { std::mem::zeroed() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_scope_id = v6.scope_id();
            // SAFETY: a sockaddr_in6 fits in a sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut sockaddr_in6, s) };
            std::mem::size_of::<sockaddr_in6>()
        }
    };
    (ss, len as socklen_t)
}

/// The GID of `a` (IPv4-mapped for IPv4), as RoCE v2 has it.
pub(crate) fn gid(a: IpAddr) -> crate::abi::ibv_gid {
    crate::abi::ibv_gid {
        raw: ndverbs_wire::cma::gid_of(a).octets(),
    }
}

struct PortUse {
    serial: u64,
    ps: PortSpace,
    ip: IpAddr,
    reuse: bool,
    listening: bool,
}

fn ports() -> &'static Mutex<HashMap<u16, Vec<PortUse>>> {
    static P: OnceLock<Mutex<HashMap<u16, Vec<PortUse>>>> = OnceLock::new();
    P.get_or_init(|| Mutex::new(HashMap::new()))
}

fn overlap(a: IpAddr, b: IpAddr) -> bool {
    a.is_unspecified() || b.is_unspecified() || a == b
}

/// The kernel's default ephemeral range.
const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;

/// Takes `port` (0: a free ephemeral one) of port space `ps` on `ip` for
/// id `serial`.
pub(crate) fn take_port(
    serial: u64,
    ps: PortSpace,
    ip: IpAddr,
    port: u16,
    reuse: bool,
) -> Result<u16, c_int> {
    let mut m = ports().lock().unwrap_or_else(|e| e.into_inner());
    let free = |m: &HashMap<u16, Vec<PortUse>>, p: u16| {
        m.get(&p).is_none_or(|uses| {
            uses.iter()
                .all(|u| u.ps != ps || !overlap(u.ip, ip) || (reuse && u.reuse && !u.listening))
        })
    };
    let port = if port != 0 {
        if !free(&m, port) {
            return Err(libc::EADDRINUSE);
        }
        port
    } else {
        let span = u32::from(EPHEMERAL.end() - EPHEMERAL.start()) + 1;
        let start = random() % span;
        (0..span)
            .map(|i| EPHEMERAL.start() + ((start + i) % span) as u16)
            .find(|&p| m.get(&p).is_none_or(Vec::is_empty))
            .ok_or(libc::EADDRNOTAVAIL)?
    };
    m.entry(port).or_default().push(PortUse {
        serial,
        ps,
        ip,
        reuse,
        listening: false,
    });
    Ok(port)
}

/// Marks id `serial`'s port as listened on: `EADDRINUSE` if another id
/// listens there on an overlapping address.
pub(crate) fn listen_port(serial: u64, port: u16) -> Result<(), c_int> {
    let mut m = ports().lock().unwrap_or_else(|e| e.into_inner());
    let uses = m.entry(port).or_default();
    let Some((ps, ip)) = uses
        .iter()
        .find(|u| u.serial == serial)
        .map(|u| (u.ps, u.ip))
    else {
        return Err(libc::EINVAL);
    };
    if uses
        .iter()
        .any(|u| u.serial != serial && u.ps == ps && overlap(u.ip, ip) && (u.listening || !u.reuse))
    {
        return Err(libc::EADDRINUSE);
    }
    for u in uses.iter_mut().filter(|u| u.serial == serial) {
        u.listening = true;
    }
    Ok(())
}

/// Undoes [`listen_port`] (the listen failed).
pub(crate) fn unlisten_port(serial: u64, port: u16) {
    let mut m = ports().lock().unwrap_or_else(|e| e.into_inner());
    for u in m.get_mut(&port).into_iter().flatten() {
        if u.serial == serial {
            u.listening = false;
        }
    }
}

/// Gives id `serial`'s port back.
pub(crate) fn release_port(serial: u64, port: u16) {
    let mut m = ports().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(uses) = m.get_mut(&port) {
        uses.retain(|u| u.serial != serial);
        if uses.is_empty() {
            m.remove(&port);
        }
    }
}

/// A random number (ephemeral port choice) from the kernel.
fn random() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most 4 bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr() as *mut libc::c_void, 4, 0) };
    if n != 4 {
        return std::process::id();
    }
    u32::from_ne_bytes(b)
}

/// Writes `src`/`dst` into the public route (and the GIDs).
fn publish_addrs(id: &Shared, st: &State) {
    let (src, dst) = (st.src, st.dst);
    id.with_public(st, |p| {
        let a = &mut p.route.addr;
        if let Some(s) = src {
            a.src = to_storage(s).0;
            a.ibaddr.sgid = gid(s.ip());
        }
        if let Some(d) = dst {
            a.dst = to_storage(d).0;
            a.ibaddr.dgid = gid(d.ip());
        }
        a.ibaddr.pkey = 0xffffu16.to_be();
    });
}

/// Whether `ip` is a loopback address, which the kernel's rdma_cm binds
/// like the wildcard (`cma_any_addr`): no device until a listen or a
/// resolve picks one. libfabric's verbs provider relies on it: it probes
/// with a bind to `localhost` and, when that names a device, keeps only
/// that device's interfaces — and it never offers loopback interfaces.
pub(crate) fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|m| m.is_loopback()),
    }
}

/// Binds `id` to `sa` (see the module docs).
pub(crate) fn bind(id: &Shared, st: &mut State, sa: SocketAddr) -> Result<(), c_int> {
    if st.phase != Phase::Idle {
        return Err(libc::EINVAL);
    }
    let ip = sa.ip();
    let dev = if ip.is_unspecified() {
        None
    } else if is_loopback(ip) {
        // Still refused when no device has the address (a listen needs one).
        devices::by_addr(ip)?;
        None
    } else {
        Some(devices::by_addr(ip)?)
    };
    let port = take_port(id.serial(), st.ps, ip, sa.port(), st.reuseaddr)?;
    if let Some(d) = dev {
        if let Err(e) = id::attach_device(id, st, d) {
            release_port(id.serial(), port);
            return Err(e);
        }
    }
    st.port_held = Some(port);
    st.src = Some(SocketAddr::new(ip, port));
    st.phase = Phase::Bound;
    publish_addrs(id, st);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    ret_minus1(|| {
        let id = id::get(id)?;
        // SAFETY: the caller's socket address.
        let sa = unsafe { read_sockaddr(addr) }?;
        let mut st = id.lock();
        bind(&id, &mut st, sa)
    })
}

/// The device to reach `dst` from, for an id bound to `src`.
fn source_for(src: IpAddr, dst: IpAddr) -> Result<IpAddr, c_int> {
    if !src.is_unspecified() {
        return Ok(src);
    }
    Device::route_to(dst).map_err(|e| e.errno())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut sockaddr,
    dst_addr: *mut sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    ret_minus1(|| {
        let id = id::get(id)?;
        // SAFETY: the caller's socket addresses.
        let mut dst = unsafe { read_sockaddr(dst_addr) }?;
        if dst.ip().is_unspecified() {
            // The kernel resolves the wildcard to the loopback device.
            dst.set_ip(match dst {
                SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        {
            let mut st = id.lock();
            if st.phase == Phase::Idle {
                let src = if src_addr.is_null() {
                    SocketAddr::new(
                        match dst {
                            SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                            SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                        },
                        0,
                    )
                } else {
                    // SAFETY: the caller's socket address.
                    unsafe { read_sockaddr(src_addr) }?
                };
                bind(&id, &mut st, src)?;
            }
            if st.phase != Phase::Bound {
                return Err(libc::EINVAL);
            }
            let bound = st.src.ok_or(libc::EINVAL)?;
            let local = source_for(bound.ip(), dst.ip())?;
            match devices::by_addr(local) {
                Ok(d) => {
                    if st.dev.is_none() {
                        id::attach_device(&id, &mut st, d)?;
                    }
                    let d: CmDev = st.dev.ok_or(libc::ENODEV)?;
                    st.src = Some(SocketAddr::new(d.addr(), bound.port()));
                    st.dst = Some(dst);
                    st.phase = Phase::AddrResolved;
                    publish_addrs(&id, &st);
                    deliver(
                        &id,
                        &st,
                        EventType::AddrResolved,
                        0,
                        ConnData::default(),
                        None,
                    );
                }
                Err(e) => {
                    deliver(
                        &id,
                        &st,
                        EventType::AddrError,
                        -e,
                        ConnData::default(),
                        None,
                    );
                }
            }
        }
        id::complete(&id)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    ret_minus1(|| {
        let id = id::get(id)?;
        {
            let mut st = id.lock();
            if st.phase != Phase::AddrResolved {
                return Err(libc::EINVAL);
            }
            let (src, dst, d) = match (st.src, st.dst, st.dev) {
                (Some(s), Some(d), Some(dev)) => (s, d, dev),
                _ => return Err(libc::EINVAL),
            };
            let mtu = d.dev.info().active_mtu() as u8;
            let tos = st.tos;
            let rec = &mut *st.path_rec;
            rec.dgid = gid(dst.ip());
            rec.sgid = gid(src.ip());
            rec.pkey = 0xffffu16.to_be();
            rec.hop_limit = 64;
            rec.traffic_class = tos;
            rec.reversible = 1;
            rec.numb_path = 1;
            rec.mtu_selector = 2;
            rec.mtu = mtu;
            rec.rate_selector = 2;
            rec.rate = 3;
            rec.packet_life_time_selector = 2;
            rec.packet_life_time = 18;
            let rec: *mut ibv_sa_path_rec = rec;
            id.with_public(&st, |p| {
                p.route.path_rec = rec;
                p.route.num_paths = 1;
            });
            st.phase = Phase::RouteResolved;
            deliver(
                &id,
                &st,
                EventType::RouteResolved,
                0,
                ConnData::default(),
                None,
            );
        }
        id::complete(&id)
    })
}
