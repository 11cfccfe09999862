//! What every example takes from its command line.

use std::net::IpAddr;

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
