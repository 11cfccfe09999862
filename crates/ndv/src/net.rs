//! Addresses and connections the tools share: the host's interface
//! addresses, the local address the kernel picks for a destination, and the
//! TCP connection over which perftest and `ibv_rc_pingpong` exchange their
//! QP addresses.

use anyhow::{anyhow, Context, Result};
use socket2::{Domain, Socket, Type};
use std::ffi::CStr;
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket,
};
use std::time::Duration;

/// One address of an interface that is up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfAddr {
    /// The address.
    pub addr: IpAddr,
    /// The interface's name.
    pub ifname: String,
    /// The interface is running (carrier up), not only administratively up.
    pub running: bool,
}

/// Every IPv4 and IPv6 address of the interfaces that are up, in the
/// kernel's order.
pub fn interface_addrs() -> Vec<IfAddr> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return out;
    }
    let mut p = list;
    while !p.is_null() {
        // SAFETY: `p` walks the list getifaddrs returned.
        let a = unsafe { &*p };
        p = a.ifa_next;
        if a.ifa_addr.is_null() || a.ifa_flags & libc::IFF_UP as u32 == 0 {
            continue;
        }
        // SAFETY: the family says which sockaddr this is.
        let addr = match i32::from(unsafe { (*a.ifa_addr).sa_family }) {
            libc::AF_INET => {
                // SAFETY: AF_INET ⇒ sockaddr_in.
                let s = unsafe { &*(a.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::from(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: AF_INET6 ⇒ sockaddr_in6.
                let s = unsafe { &*(a.ifa_addr as *const libc::sockaddr_in6) };
                IpAddr::from(s.sin6_addr.s6_addr)
            }
            _ => continue,
        };
        out.push(IfAddr {
            addr,
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            ifname: unsafe { CStr::from_ptr(a.ifa_name) }
                .to_string_lossy()
                .into_owned(),
            running: a.ifa_flags & libc::IFF_RUNNING as u32 != 0,
        });
    }
    // SAFETY: allocated by getifaddrs above.
    unsafe { libc::freeifaddrs(list) };
    out
}

/// The first non-loopback IPv4 address of an interface that is up.
pub fn first_ipv4() -> Option<IpAddr> {
    interface_addrs()
        .into_iter()
        .map(|i| i.addr)
        .find(|a| a.is_ipv4() && !a.is_loopback())
}

/// The local address that routes to `dst` (what the kernel would pick).
pub fn source_for(dst: IpAddr) -> Result<IpAddr> {
    let any = if dst.is_ipv4() {
        IpAddr::from(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::from(Ipv6Addr::UNSPECIFIED)
    };
    let s = UdpSocket::bind(SocketAddr::new(any, 0)).context("opening a UDP socket")?;
    // Connecting a UDP socket sends nothing: it only asks for the route.
    s.connect(SocketAddr::new(dst, 9))
        .with_context(|| format!("no route to {dst}"))?;
    Ok(s.local_addr()
        .context("reading the routed source address")?
        .ip())
}

/// Connects to `host:port` over TCP, from `bind` if given (for an address of
/// the same family), trying each address of `host` in turn.
pub fn connect_tcp(host: &str, port: u16, bind: Option<IpAddr>) -> Result<TcpStream> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}:{port}"))?
        .collect();
    let mut last = anyhow!("Couldn't connect to {host}:{port}: no address");
    for a in addrs {
        let sock =
            Socket::new(Domain::for_address(a), Type::STREAM, None).context("opening a socket")?;
        if let Some(ip) = bind.filter(|ip| ip.is_ipv4() == a.is_ipv4()) {
            sock.bind(&SocketAddr::new(ip, 0).into())
                .with_context(|| format!("bind {ip}"))?;
        }
        match sock.connect_timeout(&a.into(), Duration::from_secs(10)) {
            Ok(()) => return Ok(nodelay(sock.into())),
            Err(e) => last = anyhow!(e).context(format!("Couldn't connect to {host}:{port}")),
        }
    }
    Err(last)
}

/// Accepts one TCP connection on `port` (all IPv4 addresses unless `bind`).
pub fn accept_tcp(port: u16, bind: Option<IpAddr>) -> Result<TcpStream> {
    let addr = SocketAddr::new(bind.unwrap_or(IpAddr::from(Ipv4Addr::UNSPECIFIED)), port);
    let sock =
        Socket::new(Domain::for_address(addr), Type::STREAM, None).context("opening a socket")?;
    sock.set_reuse_address(true)
        .context("setting SO_REUSEADDR")?;
    sock.bind(&addr.into())
        .with_context(|| format!("Couldn't listen to port {port}"))?;
    sock.listen(1)
        .with_context(|| format!("Couldn't listen to port {port}"))?;
    tracing::info!(addr = %addr.ip(), port, "ready for clients");
    let (s, _) = TcpListener::from(sock)
        .accept()
        .context("accept() failed")?;
    Ok(nodelay(s))
}

/// Every exchange message is one write the peer waits for: send it at once.
fn nodelay(s: TcpStream) -> TcpStream {
    let _ = s.set_nodelay(true);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_routes_to_itself() {
        let lo = IpAddr::from(Ipv4Addr::LOCALHOST);
        assert_eq!(source_for(lo).unwrap(), lo);
        assert!(first_ipv4().is_none_or(|a| a.is_ipv4() && !a.is_loopback()));
        assert!(interface_addrs().iter().any(|i| i.addr == lo));
    }
}
