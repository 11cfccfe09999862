//! What every example takes from its command line, and the listener they
//! all start with (`send_receive` spells its steps out).

use ndverbs_nd::{Adapter, Listener, NdResult};
use std::net::{IpAddr, SocketAddr};

/// The server's and the client's addresses: arguments 1 and 2, or two
/// loopback addresses (each adapter owns UDP 4791 on its address, so the two
/// sides need two).
pub fn addresses() -> (IpAddr, IpAddr) {
    (arg(1, "127.0.0.1"), arg(2, "127.0.0.2"))
}

/// Argument 3, a count, or `default`.
#[allow(dead_code)] // not every example takes a count
pub fn count(default: u32) -> u32 {
    std::env::args()
        .nth(3)
        .map_or(default, |s| s.parse().expect("a count"))
}

fn arg(i: usize, default: &str) -> IpAddr {
    let a = std::env::args().nth(i);
    a.as_deref()
        .unwrap_or(default)
        .parse()
        .expect("an IP address")
}

/// A listener on an ephemeral port of `server`'s address, with room for
/// `backlog` unanswered requests, and the address clients connect to.
#[allow(dead_code)] // send_receive shows these steps one by one
pub fn listen(server: &Adapter, backlog: u32) -> NdResult<(Listener, SocketAddr)> {
    let listener = server.create_listener()?;
    listener.bind(SocketAddr::new(server.address(), 0))?;
    listener.listen(backlog)?;
    let at = listener.get_local_address()?;
    Ok((listener, at))
}
