//! Probes: the datagrams by which members learn their index in the
//! kernel's reuseport group.
//!
//! A probe is [`PROBE_LEN`] bytes: the marker opcode, the index it is
//! steered to, two zero bytes, the magic, and the round's 64-bit nonce.
//! The steering program sends it to the socket at that index, so whoever
//! receives the probe for index `i` *is* at index `i` — unless the group
//! is smaller than the coordinator thought, when the kernel hashes the
//! surplus probes to some member, which then receives two (see
//! [`super::table::Probed::ambiguous`]). The nonce is in a file only the
//! user can read, so a packet from the network cannot pose as a probe.

use super::steer::{PROBE_INDEX_OFF, PROBE_LEN, PROBE_MAGIC, PROBE_MAGIC_OFF, PROBE_OPCODE};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};

/// The probe for `index` in the round `nonce`.
pub fn encode(index: u8, nonce: u64) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[0] = PROBE_OPCODE;
    p[PROBE_INDEX_OFF as usize] = index;
    let m = PROBE_MAGIC_OFF as usize;
    p[m..m + 4].copy_from_slice(&PROBE_MAGIC.to_be_bytes());
    p[8..16].copy_from_slice(&nonce.to_be_bytes());
    p
}

/// A probe's index and nonce; `None` if `p` is not a probe.
///
/// ```
/// use ndverbs_engine::share::probe::{encode, parse};
/// assert_eq!(parse(&encode(3, 0xfeed)), Some((3, 0xfeed)));
/// assert_eq!(parse(&encode(3, 0xfeed)[..15]), None);
/// ```
pub fn parse(p: &[u8]) -> Option<(u8, u64)> {
    if p.len() != PROBE_LEN || p[0] != PROBE_OPCODE {
        return None;
    }
    let m = PROBE_MAGIC_OFF as usize;
    if p[m..m + 4] != PROBE_MAGIC.to_be_bytes() {
        return None;
    }
    let nonce = u64::from_be_bytes(p[8..16].try_into().ok()?);
    Some((p[PROBE_INDEX_OFF as usize], nonce))
}

/// Sends the probes for indices `0..n` of round `nonce` to `port` on
/// `ip`, from `ip` (members believe only probes from their own address).
pub fn send_round(ip: IpAddr, port: u16, n: u8, nonce: u64) -> io::Result<()> {
    let s = sender(ip)?;
    let dst: socket2::SockAddr = SocketAddr::new(ip, port).into();
    for i in 0..n {
        s.send_to(&encode(i, nonce), &dst)?;
    }
    Ok(())
}

/// Sends a nudge of round `nonce` (see [`super::NUDGE_INDEX`]): it reaches
/// some member, which reconciles.
pub fn send_nudge(ip: IpAddr, port: u16, nonce: u64) -> io::Result<()> {
    let s = sender(ip)?;
    let dst: socket2::SockAddr = SocketAddr::new(ip, port).into();
    s.send_to(&encode(super::NUDGE_INDEX, nonce), &dst)?;
    Ok(())
}

/// A UDP socket on `ip`, any port: probes come from the shared address.
fn sender(ip: IpAddr) -> io::Result<Socket> {
    let domain = if ip.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    s.bind(&SocketAddr::new(ip, 0).into())?;
    Ok(s)
}
