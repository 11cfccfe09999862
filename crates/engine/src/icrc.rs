//! The ICRC of the packets a NIC sends and receives.
//!
//! RoCEv2's invariant CRC covers the IP and UDP headers (their variant fields
//! masked) as well as the transport packet, but a UDP socket lets the
//! application write neither header. Both directions therefore need what the
//! kernel wrote:
//!
//! * **Sending.** The socket is never `connect()`ed and sends IPv4 with DF
//!   set, for which Linux writes **ID 0**; a UDP GSO send gives its segments
//!   consecutive IDs 0, 1, 2… (software segmentation counts up from the
//!   socket's ID). Every covered header field is thus known before the packet
//!   leaves, and [`IcrcCache::sign`] computes the ICRC for the ID the packet
//!   will carry.
//! * **Receiving.** `recvmsg` shows the UDP payload, the source address and
//!   port and (with `IP_PKTINFO`) the destination — everything but the IPv4
//!   ID, which Linux rxe chooses at random. [`IcrcCache::verify`] rebuilds the
//!   headers and solves for the ID (the CRC is affine in those 16 bits,
//!   [`ndverbs_wire::icrc::IdSolver`]); a packet no ID explains is corrupt.
//!   IPv6 has no ID and is checked directly.
//!
//! Both assume the sender sets DF, as rxe and ndverbs always do.
//!
//! This is the engine's work, not the link's: links only move bytes, so
//! wrappers that lose, duplicate, reorder or record packets never need to
//! know about it. One [`IcrcCache`] per NIC keeps what repeats — the CRC of
//! the masked headers of recent paths and lengths (the same for every packet
//! of a message stream or a ping-pong, so only the transport bytes are hashed
//! per packet) and the ID solvers of recent packet lengths.

use ndverbs_wire::icrc::{self, ICRC_LEN};
use ndverbs_wire::ip::{Envelope, IpHeader, IPV4_HEADER_LEN, UDP_HEADER_LEN};
use std::io;
use std::net::{IpAddr, SocketAddr};

/// Why a received packet failed verification.
///
/// # Example
///
/// ```
/// use ndverbs_engine::icrc::{IcrcCache, VerifyError};
/// let mut icrc = IcrcCache::new("10.0.0.2:4791".parse().unwrap());
/// let peer = "10.0.0.1:4791".parse().unwrap();
/// // Shorter than a BTH plus an ICRC.
/// assert_eq!(icrc.verify(&[0; 8], peer, None), Err(VerifyError::Runt));
/// // The right size, but an ICRC of 0 that no IPv4 ID explains.
/// let mut pkt = [0u8; 20];
/// pkt[0] = 0x04; // RC SEND ONLY
/// assert_eq!(icrc.verify(&pkt, peer, None), Err(VerifyError::BadIcrc));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerifyError {
    /// Shorter than a BTH plus ICRC.
    Runt,
    /// No IP ID (IPv4) makes the ICRC valid, or the IPv6 ICRC is wrong.
    BadIcrc,
    /// No destination address was reported (should not happen with `IP_PKTINFO`).
    NoDestination,
}

/// One received packet whose ICRC verified.
///
/// # Example
///
/// ```
/// use ndverbs_engine::icrc::{IcrcCache, Received};
/// use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
/// let (a, b) = ("10.0.0.1:4791".parse().unwrap(), "10.0.0.2:4791".parse().unwrap());
/// let mut pkt = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, 5, 0));
/// pkt.payload = b"ping";
/// let mut buf = vec![0; pkt.encoded_len().unwrap()];
/// pkt.write(&mut buf).unwrap();
/// // A signs for IPv4 ID 3 (the fourth segment of a GSO send); B recovers it.
/// IcrcCache::new(a).fill(&mut buf, b, 3)?;
/// let r: Received = IcrcCache::new(b).verify(&buf, a, None).expect("ICRC verifies");
/// assert_eq!((r.src, r.dst, r.len, r.ipv4_id), (a, b.ip(), 20, Some(3)));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Sender's address and UDP port.
    pub src: SocketAddr,
    /// The local address it was sent to.
    pub dst: IpAddr,
    /// Bytes of transport packet (BTH through ICRC).
    pub len: usize,
    /// The IPv4 ID the sender used, recovered from the ICRC (`None` for IPv6).
    pub ipv4_id: Option<u16>,
}

/// The ICRC work of one local address and port: signs what it sends,
/// verifies what it receives, and keeps what repeats (see the module docs).
///
/// # Example
///
/// ```
/// use ndverbs_engine::icrc::IcrcCache;
/// use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
/// let (a, b) = ("10.0.0.1:4791".parse().unwrap(), "10.0.0.2:4791".parse().unwrap());
/// let (mut tx, mut rx) = (IcrcCache::new(a), IcrcCache::new(b));
/// let mut pkt = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, 0x12, 7));
/// pkt.payload = b"ping";
/// let mut buf = vec![0; pkt.encoded_len().unwrap()];
/// pkt.write(&mut buf).unwrap();
/// // A payload sent from elsewhere (zero-copy) is signed from its pieces.
/// let (hdr, payload) = buf.split_at(12);
/// let crc = tx.sign(b, 0, &[hdr, &payload[..4]])?;
/// let n = buf.len();
/// buf[n - 4..].copy_from_slice(&crc.to_le_bytes());
/// assert_eq!(rx.verify(&buf, a, None).unwrap().ipv4_id, Some(0));
/// // One flipped bit, and no IPv4 ID explains the ICRC any more.
/// buf[13] ^= 1;
/// assert!(rx.verify(&buf, a, None).is_err());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct IcrcCache {
    local: SocketAddr,
    /// Header CRCs by path, keys packed for a cheap comparison
    /// ([`HeadersKey::packed`]).
    headers: Vec<((u64, u128), u32)>,
    /// The `headers` entry to replace next when full.
    next: usize,
    /// ID solvers by the number of CRC bytes after the ID (one per packet length).
    solvers: Vec<(usize, icrc::IdSolver)>,
}

/// What the masked IP and UDP headers of a packet depend on, besides the
/// local address and port, with IPv4 ID 0 (another ID's share is added to
/// the ICRC afterwards).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HeadersKey {
    peer: SocketAddr,
    transport_len: u32,
    /// Received (the peer is the source) rather than sent.
    rx: bool,
}

impl HeadersKey {
    /// The key as two integers: port, length and direction first (they
    /// tell a path's entries apart), then the address as IPv6, v4-mapped.
    fn packed(&self) -> (u64, u128) {
        let ip = match self.peer.ip() {
            IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
            IpAddr::V6(a) => u128::from(a),
        };
        // A transport length fits 30 bits (a datagram is at most 64 KiB).
        let rest = u64::from(self.peer.port()) << 48
            | u64::from(self.transport_len & 0x3fff_ffff) << 2
            | u64::from(self.peer.is_ipv6()) << 1
            | u64::from(self.rx);
        (rest, ip)
    }
}

/// Header CRCs kept.
const HEADERS_CACHE: usize = 8;
/// ID solvers kept (packet lengths seen most recently).
const SOLVER_CACHE: usize = 8;

impl IcrcCache {
    /// The ICRC work of packets sent from and received at `local`.
    pub fn new(local: SocketAddr) -> Self {
        IcrcCache {
            local,
            headers: Vec::new(),
            next: 0,
            solvers: Vec::new(),
        }
    }

    /// The local address and port.
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// The CRC of the masked headers for `key`.
    #[inline]
    fn headers_crc(&mut self, key: HeadersKey) -> u32 {
        let packed = key.packed();
        match self.headers.iter().find(|(k, _)| *k == packed) {
            Some(&(_, c)) => c,
            None => self.headers_crc_miss(key, packed),
        }
    }

    /// [`IcrcCache::headers_crc`] for a key not cached: computed and kept
    /// (kept out of line: a stream of packets misses once).
    #[cold]
    #[inline(never)]
    fn headers_crc_miss(&mut self, key: HeadersKey, packed: (u64, u128)) -> u32 {
        let (src, dst) = if key.rx {
            (key.peer, self.local)
        } else {
            (self.local, key.peer)
        };
        let (hdr, n) = icrc::pseudo_headers(
            src.ip(),
            dst.ip(),
            src.port(),
            dst.port(),
            0,
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

    /// The ICRC of a packet sent to `dst` with IPv4 ID `ipv4_id`, whose
    /// transport bytes (BTH onwards, without the ICRC) are `parts` in order.
    pub fn sign(&mut self, dst: SocketAddr, ipv4_id: u16, parts: &[&[u8]]) -> io::Result<u32> {
        let body: usize = parts.iter().map(|p| p.len()).sum();
        let local = self.local;
        if local.is_ipv4() != dst.is_ipv4() || local.ip().is_unspecified() {
            // Not a path this address sends on (the generic code reports it).
            let (hdr, n) = icrc::pseudo_headers(
                local.ip(),
                dst.ip(),
                local.port(),
                dst.port(),
                ipv4_id,
                body + ICRC_LEN,
            );
            return icrc::compute_parts(&hdr[..n], parts).map_err(invalid);
        }
        // The headers' share is cached for ID 0 only: a GSO run's segments
        // carry IDs 0, 1, 2…, and one entry per ID would churn the cache.
        // The ID's own share is added after (the CRC is affine in it).
        let h = self.headers_crc(HeadersKey {
            peer: dst,
            transport_len: (body + ICRC_LEN) as u32,
            rx: false,
        });
        let c = icrc::finish(h, parts).map_err(invalid)?;
        if ipv4_id == 0 || !dst.is_ipv4() {
            return Ok(c);
        }
        Ok(c ^ self.solver(body).contribution(ipv4_id))
    }

    /// The ID solver for IPv4 packets whose transport bytes before the ICRC
    /// number `body`, cached.
    #[inline]
    fn solver(&mut self, body: usize) -> &icrc::IdSolver {
        // Bytes after the ID field inside the CRC input (as
        // `icrc::recover_ipv4_id_split` counts them).
        let after_id = IPV4_HEADER_LEN + UDP_HEADER_LEN - 6 + body;
        let i = match self.solvers.iter().position(|(k, _)| *k == after_id) {
            Some(i) => i,
            None => self.add_solver(after_id),
        };
        &self.solvers[i].1
    }

    /// Builds and keeps the solver for `after_id` bytes (out of line: each
    /// packet length misses once); returns its index.
    #[cold]
    #[inline(never)]
    fn add_solver(&mut self, after_id: usize) -> usize {
        if self.solvers.len() >= SOLVER_CACHE {
            self.solvers.remove(0);
        }
        self.solvers.push((after_id, icrc::IdSolver::new(after_id)));
        self.solvers.len() - 1
    }

    /// Writes the ICRC of `transport` (BTH through the ICRC's 4 bytes) as
    /// sent to `dst` with IPv4 ID `ipv4_id`.
    pub fn fill(&mut self, transport: &mut [u8], dst: SocketAddr, ipv4_id: u16) -> io::Result<()> {
        if transport.len() < 12 + ICRC_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "RoCEv2 packet shorter than BTH + ICRC",
            ));
        }
        let body = transport.len() - ICRC_LEN;
        let c = self.sign(dst, ipv4_id, &[&transport[..body]])?;
        transport[body..].copy_from_slice(&c.to_le_bytes());
        Ok(())
    }

    /// Verifies the ICRC of one received packet from `src`, recovering its
    /// IPv4 ID; `dst` is the destination address the socket reported (`None`:
    /// the local address). ID 0 is tried first (what Linux's software
    /// segmentation and ndverbs send), then solved for.
    pub fn verify(
        &mut self,
        transport: &[u8],
        src: SocketAddr,
        dst: Option<IpAddr>,
    ) -> Result<Received, VerifyError> {
        let local = self.local;
        let dst = match dst {
            Some(d) => d,
            None if !local.ip().is_unspecified() => local.ip(),
            None => return Err(VerifyError::NoDestination),
        };
        if transport.len() < 12 + ICRC_LEN || !src.is_ipv4() || dst != local.ip() || !dst.is_ipv4()
        {
            return verify(transport, src, SocketAddr::new(dst, local.port()));
        }
        let body = transport.len() - ICRC_LEN;
        let carried = u32::from_le_bytes(
            transport[body..]
                .try_into()
                .map_err(|_| VerifyError::Runt)?,
        );
        // The ICRC as if the ID were 0, the headers' share cached per path
        // and length.
        let h = self.headers_crc(HeadersKey {
            peer: src,
            transport_len: transport.len() as u32,
            rx: true,
        });
        let icrc0 = icrc::finish(h, &[&transport[..body]]).map_err(|_| VerifyError::Runt)?;
        let ok = |id| {
            Ok(Received {
                src,
                dst,
                len: transport.len(),
                ipv4_id: Some(id),
            })
        };
        let delta = icrc0 ^ carried;
        if delta == 0 {
            return ok(0);
        }
        match self.solver(body).solve(delta) {
            Some(id) => ok(id),
            None => Err(VerifyError::BadIcrc),
        }
    }
}

/// Verifies the ICRC of a packet from `src` to `dst` without a cache (for
/// captures and tools that see few packets).
pub fn verify(transport: &[u8], src: SocketAddr, dst: SocketAddr) -> Result<Received, VerifyError> {
    if transport.len() < 12 + ICRC_LEN {
        return Err(VerifyError::Runt);
    }
    let mut env = Envelope::new_rocev2(src.ip(), dst.ip(), src.port(), transport.len());
    env.udp.dst_port = dst.port();
    let mut hdr = [0u8; 48];
    let n = env.write(&mut hdr).map_err(|_| VerifyError::Runt)?;
    let received = |ipv4_id| Received {
        src,
        dst: dst.ip(),
        len: transport.len(),
        ipv4_id,
    };
    match env.ip {
        IpHeader::V4(_) => match icrc::recover_ipv4_id_split(&hdr[..n], transport) {
            Ok(Some(id)) => Ok(received(Some(id))),
            _ => Err(VerifyError::BadIcrc),
        },
        IpHeader::V6(_) => {
            let body = transport.len() - ICRC_LEN;
            let ok = icrc::compute_split(&hdr[..n], &transport[..body])
                .is_ok_and(|c| c.to_le_bytes() == transport[body..]);
            if ok {
                Ok(received(None))
            } else {
                Err(VerifyError::BadIcrc)
            }
        }
    }
}

fn invalid(e: ndverbs_wire::WireError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x04; // RC SEND ONLY
        p[2] = 0xff;
        p[3] = 0xff;
        for (i, b) in p[12..len - ICRC_LEN].iter_mut().enumerate() {
            *b = i as u8;
        }
        p
    }

    /// The cached paths agree with the uncached ones, for every ID, both
    /// address families, and repeated use of one path.
    #[test]
    fn cached_and_uncached_agree() {
        for (a, b) in [
            ("10.0.0.1:4791", "10.0.0.2:4791"),
            ("[fd00::1]:4791", "[fd00::2]:4791"),
        ] {
            let (a, b): (SocketAddr, SocketAddr) = (a.parse().unwrap(), b.parse().unwrap());
            let (mut tx, mut rx) = (IcrcCache::new(a), IcrcCache::new(b));
            for id in [0u16, 1, 7, 0xffff, 0, 1] {
                for len in [20, 1040, 4112] {
                    let mut p = packet(len);
                    tx.fill(&mut p, b, id).unwrap();
                    let cached = rx.verify(&p, a, None).unwrap();
                    assert_eq!(Ok(cached), verify(&p, a, b));
                    let want = a.is_ipv4().then_some(id);
                    assert_eq!(cached.ipv4_id, want);
                }
            }
        }
    }

    #[test]
    fn corrupt_and_short_packets_are_refused() {
        let (a, b): (SocketAddr, SocketAddr) = (
            "10.0.0.3:4791".parse().unwrap(),
            "10.0.0.4:4791".parse().unwrap(),
        );
        let mut p = packet(80);
        IcrcCache::new(a).fill(&mut p, b, 0).unwrap();
        p[20] ^= 1;
        assert_eq!(
            IcrcCache::new(b).verify(&p, a, None),
            Err(VerifyError::BadIcrc)
        );
        assert_eq!(verify(&[0u8; 8], a, b), Err(VerifyError::Runt));
        let wildcard = IcrcCache::new("0.0.0.0:4791".parse().unwrap()).verify(&p, a, None);
        assert_eq!(wildcard, Err(VerifyError::NoDestination));
    }
}
