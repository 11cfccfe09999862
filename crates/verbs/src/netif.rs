//! The host's network interfaces: which local addresses can be devices
//! ([`Device::list`]) and which one reaches a destination
//! ([`Device::route_to`]).
//!
//! A device is a local IP address, so the device list is the address list of
//! the interfaces that are up, minus IPv6 link-local addresses (they need a
//! scope that a GID cannot carry). Devices are named `ndv0`, `ndv1`, … in
//! address order, so a name is stable as long as the host's addresses are.
//! Listing opens nothing: it binds no socket, so it works next to the
//! processes that own the devices.

use crate::device::{node_guid, Device};
use crate::error::{Error, ErrorKind, Result};
use ndverbs_proto::rc::PathMtu;
use ndverbs_wire::ip::ROCEV2_PORT;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};

/// A local address that can be opened as a device, with its interface.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let devices = Device::list()?;
/// let lo = devices.iter().find(|d| d.addr == std::net::IpAddr::from([127, 0, 0, 1])).expect("loopback");
/// assert!(lo.name.starts_with("ndv") && lo.link_up && lo.ifindex > 0);
/// assert_eq!(lo.gid(), "::ffff:127.0.0.1".parse::<std::net::Ipv6Addr>()?);
/// assert_eq!(lo.active_mtu(), PathMtu::Mtu4096); // loopback's 64 KiB MTU
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// `ndvN`: the device's rank in address order.
    pub name: String,
    /// The address (the GID's, and the one to [`Device::open`]).
    pub addr: IpAddr,
    /// The interface the address is on.
    pub ifname: String,
    /// The interface's index.
    pub ifindex: u32,
    /// The interface's MTU in bytes.
    pub mtu: u32,
    /// The link is up (the interface is running), as a port's ACTIVE state.
    pub link_up: bool,
}

impl DeviceInfo {
    /// The GID of the device's port (IPv4-mapped for IPv4).
    pub fn gid(&self) -> Ipv6Addr {
        ndverbs_wire::cma::gid_of(self.addr)
    }

    /// The device's node GUID ([`node_guid`]).
    pub fn node_guid(&self) -> u64 {
        node_guid(self.addr)
    }

    /// The port's active MTU as rxe computes it from the interface MTU: the
    /// largest IB MTU that fits after 80 bytes of headers (IPv6, UDP, BTH,
    /// RETH, ICRC), 256 to 4096.
    pub fn active_mtu(&self) -> PathMtu {
        active_mtu_for(self.mtu)
    }
}

/// The active MTU of a port on an interface of MTU `if_mtu` bytes
/// ([`DeviceInfo::active_mtu`]).
fn active_mtu_for(if_mtu: u32) -> PathMtu {
    match if_mtu.saturating_sub(80) {
        m if m >= 4096 => PathMtu::Mtu4096,
        m if m >= 2048 => PathMtu::Mtu2048,
        m if m >= 1024 => PathMtu::Mtu1024,
        m if m >= 512 => PathMtu::Mtu512,
        _ => PathMtu::Mtu256,
    }
}

/// The active MTU of the device on `addr`: its interface's. Every address
/// of 127/8 is on the loopback interface, listed or not (tests bind many);
/// an address the host does not list gets Ethernet's 1500 bytes.
pub(crate) fn active_mtu_of(addr: IpAddr) -> PathMtu {
    let listed = Device::list().unwrap_or_default();
    let info = listed.iter().find(|d| d.addr == addr).or_else(|| {
        addr.is_loopback()
            .then(|| listed.iter().find(|d| d.addr.is_loopback()))
            .flatten()
    });
    active_mtu_for(info.map_or(1500, |d| d.mtu))
}

impl Device {
    /// Every local address that can be opened as a device: the addresses of
    /// the interfaces that are up, minus IPv6 link-local ones (they need a
    /// scope that a GID cannot carry), in address order and named `ndv0`,
    /// `ndv1`, … in that order, so a name is stable as long as the host's
    /// addresses are. Listing binds no socket, so it works next to the
    /// processes that own the devices.
    pub fn list() -> Result<Vec<DeviceInfo>> {
        let mut found: Vec<sys::IfAddr> = sys::interface_addresses()
            .map_err(|e| Error::io("Device::list", e))?
            .into_iter()
            .filter(|a| a.up && !is_link_local_v6(a.addr))
            .collect();
        // Stable: an address on two interfaces keeps the first one listed.
        found.sort_by_key(|a| a.addr);
        found.dedup_by_key(|a| a.addr);
        Ok(found
            .into_iter()
            .enumerate()
            .map(|(i, a)| DeviceInfo {
                name: format!("ndv{i}"),
                addr: a.addr,
                ifindex: sys::if_index(&a.ifname),
                // The Ethernet default when the interface cannot say.
                mtu: sys::if_mtu(&a.ifname).unwrap_or(1500),
                ifname: a.ifname,
                link_up: a.running,
            })
            .collect())
    }

    /// The local address the kernel would send from to reach `dst`: the
    /// device to open to talk to it. No route is [`ErrorKind::Unreachable`].
    ///
    /// ```
    /// use ndverbs_verbs::Device;
    /// let local = Device::route_to("127.92.29.2".parse().unwrap())?;
    /// assert!(local.is_loopback());
    /// # Ok::<(), ndverbs_verbs::Error>(())
    /// ```
    pub fn route_to(dst: IpAddr) -> Result<IpAddr> {
        const OP: &str = "Device::route_to";
        let any = match dst {
            IpAddr::V4(_) => SocketAddr::from(([0u8; 4], 0)),
            IpAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
        };
        // Connecting a UDP socket sends nothing: it only asks the routing
        // table, which then reports the source address it chose.
        let s = UdpSocket::bind(any).map_err(|e| Error::io(OP, e))?;
        s.connect(SocketAddr::new(dst, ROCEV2_PORT))
            .map_err(|e| Error::new(ErrorKind::Unreachable, OP, format!("{dst}: {e}")))?;
        Ok(s.local_addr().map_err(|e| Error::io(OP, e))?.ip())
    }
}

fn is_link_local_v6(a: IpAddr) -> bool {
    matches!(a, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// The system calls: `getifaddrs`, `if_nametoindex` and the `SIOCGIFMTU`
/// ioctl, each with what it relies on.
mod sys {
    use std::ffi::{CStr, CString};
    use std::io;
    use std::net::IpAddr;

    /// One address of an interface.
    pub(super) struct IfAddr {
        pub(super) addr: IpAddr,
        pub(super) ifname: String,
        /// Administratively up (`IFF_UP`).
        pub(super) up: bool,
        /// Running: the link is up (`IFF_RUNNING`).
        pub(super) running: bool,
    }

    /// Every IPv4 and IPv6 address of every interface.
    pub(super) fn interface_addresses() -> io::Result<Vec<IfAddr>> {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        // SAFETY: `head` is a valid place for getifaddrs to store its list,
        // which is freed below and not used after.
        if unsafe { libc::getifaddrs(&mut head) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut out = Vec::new();
        let mut p = head;
        while !p.is_null() {
            // SAFETY: `p` is a node of the list getifaddrs returned, alive
            // until freeifaddrs.
            let ifa = unsafe { &*p };
            p = ifa.ifa_next;
            if ifa.ifa_addr.is_null() {
                continue;
            }
            // SAFETY: a non-null ifa_addr points to a sockaddr of the list.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            let addr = match family {
                libc::AF_INET => {
                    // SAFETY: AF_INET means the sockaddr is a sockaddr_in.
                    let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                    IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes())
                }
                libc::AF_INET6 => {
                    // SAFETY: AF_INET6 means the sockaddr is a sockaddr_in6.
                    let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                    IpAddr::from(sin6.sin6_addr.s6_addr)
                }
                _ => continue,
            };
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let ifname = unsafe { CStr::from_ptr(ifa.ifa_name) }
                .to_string_lossy()
                .into_owned();
            out.push(IfAddr {
                addr,
                ifname,
                up: ifa.ifa_flags & libc::IFF_UP as u32 != 0,
                running: ifa.ifa_flags & libc::IFF_RUNNING as u32 != 0,
            });
        }
        // SAFETY: `head` came from getifaddrs and is freed once; the
        // strings copied out above do not borrow from it.
        unsafe { libc::freeifaddrs(head) };
        Ok(out)
    }

    /// The index of interface `name` (0 if it has none any more).
    pub(super) fn if_index(name: &str) -> u32 {
        let Ok(c) = CString::new(name) else { return 0 };
        // SAFETY: `c` is a NUL-terminated string that outlives the call.
        unsafe { libc::if_nametoindex(c.as_ptr()) }
    }

    /// The MTU of interface `name`.
    pub(super) fn if_mtu(name: &str) -> Option<u32> {
        // SAFETY: a plain datagram socket; closed below on every path.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: ifreq is plain data, for which all zeroes is valid.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        // At most IFNAMSIZ - 1 bytes: the zeroed tail keeps the name terminated.
        for (d, s) in req
            .ifr_name
            .iter_mut()
            .zip(name.bytes().take(libc::IFNAMSIZ - 1))
        {
            *d = s as libc::c_char;
        }
        // SAFETY: `req` is a valid ifreq naming the interface, and
        // SIOCGIFMTU writes only its ifru_mtu member.
        let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) };
        // SAFETY: `fd` is the socket opened above, closed exactly once.
        unsafe { libc::close(fd) };
        if rc != 0 {
            return None;
        }
        // SAFETY: SIOCGIFMTU succeeded, so the union holds the MTU.
        u32::try_from(unsafe { req.ifr_ifru.ifru_mtu }).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_mtu_like_rxe() {
        let at = |mtu| {
            DeviceInfo {
                name: "ndv0".into(),
                addr: IpAddr::from([10, 0, 0, 1]),
                ifname: "eth0".into(),
                ifindex: 2,
                mtu,
                link_up: true,
            }
            .active_mtu()
        };
        assert_eq!(at(1500), PathMtu::Mtu1024);
        assert_eq!(at(9000), PathMtu::Mtu4096);
        assert_eq!(at(65536), PathMtu::Mtu4096);
        assert_eq!(at(2200), PathMtu::Mtu2048);
        assert_eq!(at(1280), PathMtu::Mtu1024);
        assert_eq!(at(100), PathMtu::Mtu256);
    }

    #[test]
    fn names_follow_address_order_without_link_local() {
        let list = Device::list().unwrap();
        assert!(list.windows(2).all(|w| w[0].addr < w[1].addr));
        assert!(list.iter().all(|d| !is_link_local_v6(d.addr)));
        for (i, d) in list.iter().enumerate() {
            assert_eq!(d.name, format!("ndv{i}"));
        }
    }
}
