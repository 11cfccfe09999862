//! Addresses and connections the tools share: a default local address, the
//! local address the kernel picks for a destination (both from verbs'
//! interface list), and the
//! TCP connection over which perftest and `ibv_rc_pingpong` exchange their
//! QP addresses.

use anyhow::{anyhow, Context, Result};
use ndverbs_verbs::Device;
use socket2::{Domain, Socket, Type};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The first non-loopback IPv4 address of an interface that is up.
pub fn first_ipv4() -> Option<IpAddr> {
    let devices = Device::list().ok()?;
    devices
        .into_iter()
        .map(|d| d.addr)
        .find(|a| a.is_ipv4() && !a.is_loopback())
}

/// The local address that routes to `dst` (what the kernel would pick).
pub fn source_for(dst: IpAddr) -> Result<IpAddr> {
    Ok(Device::route_to(dst)?)
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
    }
}
