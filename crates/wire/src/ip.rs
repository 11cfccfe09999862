//! IPv4 / IPv6 and UDP: the RoCEv2 encapsulation.
//!
//! A RoCEv2 packet is an ordinary UDP datagram to port 4791 whose payload is the
//! InfiniBand transport packet (BTH onwards) followed by the 4-byte ICRC:
//!
//! ```text
//! IPv4 (20 B, no options) or IPv6 (40 B) | UDP (8 B) | BTH | ext headers | payload | pad | ICRC
//! ```
//!
//! Linux rxe sends IPv4 with DF set, TTL 64, UDP checksum 0 and an IP ID from the
//! kernel's hashed generator. Every field here is kept exactly as received, so a
//! parsed header re-encodes to the same bytes; [`Ipv4Header::compute_checksum`]
//! is for building new headers.

use crate::be::{put_u16, put_u32, u16_at, u32_at};
use crate::error::{need, room, WireError};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// RoCEv2's UDP destination port.
pub const ROCEV2_PORT: u16 = 4791;
/// Bytes in an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// Bytes in the fixed IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;
/// Bytes in a UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IPv4 flags/fragment-offset word with only Don't Fragment set, as RoCEv2 senders use.
pub const IPV4_DONT_FRAGMENT: u16 = 0x4000;

/// An IPv4 header without options.
///
/// # Example
///
/// ```
/// use ndverbs_wire::ip::Ipv4Header;
/// // What Linux sends for ndverbs' socket: DF set, ID 0.
/// let h = Ipv4Header::new_udp("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 8 + 40, 64);
/// assert_eq!((h.total_len, h.id, h.flags_frag), (20 + 48, 0, 0x4000));
/// assert_eq!(h.checksum, h.compute_checksum());
/// let mut buf = [0u8; 20];
/// h.write(&mut buf)?;
/// assert_eq!(Ipv4Header::parse(&buf)?, h);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Header {
    /// DSCP and ECN (masked out of the ICRC).
    pub tos: u8,
    /// Total length: header plus payload.
    pub total_len: u16,
    /// Identification (covered by the ICRC; see [`crate::icrc`]).
    pub id: u16,
    /// Flags (3 bits) and fragment offset (13 bits).
    pub flags_frag: u16,
    /// Time to live (masked out of the ICRC).
    pub ttl: u8,
    /// Payload protocol (17 for UDP).
    pub protocol: u8,
    /// Header checksum as carried.
    pub checksum: u16,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
}

impl Ipv4Header {
    /// A header for a UDP datagram of `udp_len` bytes, DF set, ID 0, checksum filled in.
    pub fn new_udp(src: Ipv4Addr, dst: Ipv4Addr, udp_len: usize, ttl: u8) -> Self {
        let mut h = Ipv4Header {
            tos: 0,
            total_len: (IPV4_HEADER_LEN + udp_len) as u16,
            id: 0,
            flags_frag: IPV4_DONT_FRAGMENT,
            ttl,
            protocol: PROTO_UDP,
            checksum: 0,
            src,
            dst,
        };
        h.checksum = h.compute_checksum();
        h
    }

    /// Parses the first 20 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        need("IPv4 header", buf, IPV4_HEADER_LEN)?;
        let version = buf[0] >> 4;
        if version != 4 {
            return Err(WireError::IpVersion(version));
        }
        let ihl = buf[0] & 0x0f;
        if ihl != 5 {
            return Err(WireError::Ipv4Options(ihl));
        }
        Ok(Ipv4Header {
            tos: buf[1],
            total_len: u16_at(buf, 2),
            id: u16_at(buf, 4),
            flags_frag: u16_at(buf, 6),
            ttl: buf[8],
            protocol: buf[9],
            checksum: u16_at(buf, 10),
            src: Ipv4Addr::from(u32_at(buf, 12)),
            dst: Ipv4Addr::from(u32_at(buf, 16)),
        })
    }

    /// Writes the 20-byte header, checksum as stored in `self`.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        room("IPv4 header", buf, IPV4_HEADER_LEN)?;
        buf[0] = 0x45;
        buf[1] = self.tos;
        put_u16(buf, 2, self.total_len);
        put_u16(buf, 4, self.id);
        put_u16(buf, 6, self.flags_frag);
        buf[8] = self.ttl;
        buf[9] = self.protocol;
        put_u16(buf, 10, self.checksum);
        put_u32(buf, 12, u32::from(self.src));
        put_u32(buf, 16, u32::from(self.dst));
        Ok(IPV4_HEADER_LEN)
    }

    /// The Internet checksum this header should carry.
    pub fn compute_checksum(&self) -> u16 {
        let mut b = [0u8; IPV4_HEADER_LEN];
        let copy = Ipv4Header {
            checksum: 0,
            ..*self
        };
        // Cannot fail: the buffer is exactly one header long.
        let _ = copy.write(&mut b);
        let mut sum: u32 = b.chunks(2).map(|c| u32::from(u16_at(c, 0))).sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }
}

/// The fixed IPv6 header (RoCEv2 uses no extension headers).
///
/// # Example
///
/// ```
/// use ndverbs_wire::ip::Ipv6Header;
/// let h = Ipv6Header::new_udp("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap(), 8 + 40, 64);
/// assert_eq!((h.payload_len, h.next_header), (48, 17));
/// let mut buf = [0u8; 40];
/// h.write(&mut buf)?;
/// assert_eq!(Ipv6Header::parse(&buf)?, h);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Header {
    /// Traffic class (masked out of the ICRC).
    pub traffic_class: u8,
    /// Flow label, 20 bits (masked out of the ICRC).
    pub flow_label: u32,
    /// Payload length (the UDP datagram).
    pub payload_len: u16,
    /// Next header (17 for UDP).
    pub next_header: u8,
    /// Hop limit (masked out of the ICRC).
    pub hop_limit: u8,
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
}

impl Ipv6Header {
    /// A header for a UDP datagram of `udp_len` bytes.
    pub fn new_udp(src: Ipv6Addr, dst: Ipv6Addr, udp_len: usize, hop_limit: u8) -> Self {
        Ipv6Header {
            traffic_class: 0,
            flow_label: 0,
            payload_len: udp_len as u16,
            next_header: PROTO_UDP,
            hop_limit,
            src,
            dst,
        }
    }

    /// Parses the first 40 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        need("IPv6 header", buf, IPV6_HEADER_LEN)?;
        let version = buf[0] >> 4;
        if version != 6 {
            return Err(WireError::IpVersion(version));
        }
        let w = u32_at(buf, 0);
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&buf[8..24]);
        dst.copy_from_slice(&buf[24..40]);
        Ok(Ipv6Header {
            traffic_class: (w >> 20) as u8,
            flow_label: w & 0xf_ffff,
            payload_len: u16_at(buf, 4),
            next_header: buf[6],
            hop_limit: buf[7],
            src: Ipv6Addr::from(src),
            dst: Ipv6Addr::from(dst),
        })
    }

    /// Writes the 40-byte header.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        room("IPv6 header", buf, IPV6_HEADER_LEN)?;
        let w = (6u32 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0xf_ffff);
        put_u32(buf, 0, w);
        put_u16(buf, 4, self.payload_len);
        buf[6] = self.next_header;
        buf[7] = self.hop_limit;
        buf[8..24].copy_from_slice(&self.src.octets());
        buf[24..40].copy_from_slice(&self.dst.octets());
        Ok(IPV6_HEADER_LEN)
    }
}

/// Either IP header.
///
/// # Example
///
/// ```
/// use ndverbs_wire::ip::{Envelope, IpHeader};
/// let v4 = Envelope::new_rocev2("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 4791, 16);
/// let v6 = Envelope::new_rocev2("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap(), 4791, 16);
/// // Either version, one interface.
/// for (env, len) in [(v4, 20), (v6, 40)] {
///     assert_eq!(env.ip.len(), len);
///     assert!(env.ip.src() != env.ip.dst());
/// }
/// assert!(matches!(v6.ip, IpHeader::V6(_)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpHeader {
    /// IPv4.
    V4(Ipv4Header),
    /// IPv6.
    V6(Ipv6Header),
}

impl IpHeader {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpHeader::V4(h) => IpAddr::V4(h.src),
            IpHeader::V6(h) => IpAddr::V6(h.src),
        }
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpHeader::V4(h) => IpAddr::V4(h.dst),
            IpHeader::V6(h) => IpAddr::V6(h.dst),
        }
    }

    /// Bytes this header occupies.
    pub fn len(&self) -> usize {
        match self {
            IpHeader::V4(_) => IPV4_HEADER_LEN,
            IpHeader::V6(_) => IPV6_HEADER_LEN,
        }
    }

    /// Always false: an IP header is never empty (present for clippy's `len` convention).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the header.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        match self {
            IpHeader::V4(h) => h.write(buf),
            IpHeader::V6(h) => h.write(buf),
        }
    }
}

/// A UDP header.
///
/// # Example
///
/// ```
/// use ndverbs_wire::ip::{UdpHeader, ROCEV2_PORT};
/// let h = UdpHeader { src_port: 49152, dst_port: ROCEV2_PORT, length: 8 + 20, checksum: 0 };
/// let mut buf = [0u8; 8];
/// h.write(&mut buf)?;
/// assert_eq!(buf[2..4], 4791u16.to_be_bytes());
/// assert_eq!(UdpHeader::parse(&buf)?, h);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpHeader {
    /// Source port (entropy only for RoCEv2).
    pub src_port: u16,
    /// Destination port (4791 for RoCEv2).
    pub dst_port: u16,
    /// Length of header plus payload.
    pub length: u16,
    /// Checksum (0 = none; masked out of the ICRC).
    pub checksum: u16,
}

impl UdpHeader {
    /// Parses the first 8 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        need("UDP header", buf, UDP_HEADER_LEN)?;
        Ok(UdpHeader {
            src_port: u16_at(buf, 0),
            dst_port: u16_at(buf, 2),
            length: u16_at(buf, 4),
            checksum: u16_at(buf, 6),
        })
    }

    /// Writes the 8-byte header.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        room("UDP header", buf, UDP_HEADER_LEN)?;
        put_u16(buf, 0, self.src_port);
        put_u16(buf, 2, self.dst_port);
        put_u16(buf, 4, self.length);
        put_u16(buf, 6, self.checksum);
        Ok(UDP_HEADER_LEN)
    }
}

/// The IP and UDP headers around one RoCEv2 transport packet.
///
/// # Example
///
/// ```
/// use ndverbs_wire::ip::Envelope;
/// // IP + UDP around a 20-byte transport packet.
/// let env = Envelope::new_rocev2("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 4791, 20);
/// assert!(env.is_rocev2());
/// let mut buf = [0u8; 28 + 20];
/// let n = env.write(&mut buf)?;
/// assert_eq!(n, env.len());
/// let (back, transport) = Envelope::parse(&buf)?;
/// assert_eq!((back, transport.len()), (env, 20));
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// IP header.
    pub ip: IpHeader,
    /// UDP header.
    pub udp: UdpHeader,
}

impl Envelope {
    /// Parses IP and UDP headers from an IP packet and returns them with the UDP payload.
    ///
    /// Bytes after the IP total length (Ethernet padding) are ignored; every length
    /// field must agree with the bytes present. The UDP port is not checked: see
    /// [`Envelope::is_rocev2`].
    pub fn parse(packet: &[u8]) -> Result<(Envelope, &[u8]), WireError> {
        need("IP header", packet, 1)?;
        let (ip, rest) = match packet[0] >> 4 {
            4 => {
                let h = Ipv4Header::parse(packet)?;
                let total = usize::from(h.total_len);
                if total < IPV4_HEADER_LEN {
                    return Err(WireError::Length {
                        what: "IPv4 total length",
                        claimed: total,
                        actual: packet.len(),
                    });
                }
                need("IPv4 packet", packet, total)?;
                if h.flags_frag & 0x3fff != 0 {
                    return Err(WireError::Ipv4Fragment(h.flags_frag));
                }
                if h.protocol != PROTO_UDP {
                    return Err(WireError::NotUdp(h.protocol));
                }
                (IpHeader::V4(h), &packet[IPV4_HEADER_LEN..total])
            }
            6 => {
                let h = Ipv6Header::parse(packet)?;
                let total = IPV6_HEADER_LEN + usize::from(h.payload_len);
                need("IPv6 packet", packet, total)?;
                if h.next_header != PROTO_UDP {
                    return Err(WireError::NotUdp(h.next_header));
                }
                (IpHeader::V6(h), &packet[IPV6_HEADER_LEN..total])
            }
            v => return Err(WireError::IpVersion(v)),
        };
        let udp = UdpHeader::parse(rest)?;
        if usize::from(udp.length) != rest.len() {
            return Err(WireError::Length {
                what: "UDP length",
                claimed: usize::from(udp.length),
                actual: rest.len(),
            });
        }
        Ok((Envelope { ip, udp }, &rest[UDP_HEADER_LEN..]))
    }

    /// True if the datagram goes to RoCEv2's port.
    pub fn is_rocev2(&self) -> bool {
        self.udp.dst_port == ROCEV2_PORT
    }

    /// Bytes of IP plus UDP header.
    pub fn len(&self) -> usize {
        self.ip.len() + UDP_HEADER_LEN
    }

    /// Always false (present for clippy's `len` convention).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes both headers; returns the bytes written.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let n = self.ip.write(buf)?;
        self.udp.write(&mut buf[n..])?;
        Ok(n + UDP_HEADER_LEN)
    }

    /// IP and UDP headers for a RoCEv2 datagram carrying `transport_len` bytes
    /// (BTH through ICRC), built the way ndverbs sends: IPv4 with DF and ID 0
    /// (see [`crate::icrc`] for why), UDP checksum 0, TTL/hop limit 64.
    pub fn new_rocev2(src: IpAddr, dst: IpAddr, src_port: u16, transport_len: usize) -> Self {
        let udp_len = UDP_HEADER_LEN + transport_len;
        let ip = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpHeader::V4(Ipv4Header::new_udp(s, d, udp_len, 64)),
            (s, d) => IpHeader::V6(Ipv6Header::new_udp(to_v6(s), to_v6(d), udp_len, 64)),
        };
        Envelope {
            ip,
            udp: UdpHeader {
                src_port,
                dst_port: ROCEV2_PORT,
                length: udp_len as u16,
                checksum: 0,
            },
        }
    }
}

fn to_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_checksum_matches_known_header() {
        // V2 from the wire reference: checksum 0x26af.
        let h = Ipv4Header::new_udp(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            40,
            64,
        );
        assert_eq!(h.checksum, 0x26af);
    }

    #[test]
    fn rejects_options_fragments_and_wrong_lengths() {
        let h = Ipv4Header::new_udp(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 8, 64);
        let mut b = [0u8; 28];
        h.write(&mut b).unwrap();
        UdpHeader {
            src_port: 1,
            dst_port: ROCEV2_PORT,
            length: 8,
            checksum: 0,
        }
        .write(&mut b[20..])
        .unwrap();
        assert!(Envelope::parse(&b).is_ok());
        let mut o = b;
        o[0] = 0x46;
        assert_eq!(Envelope::parse(&o), Err(WireError::Ipv4Options(6)));
        let mut f = b;
        f[6] = 0x20; // MF
        assert!(matches!(
            Envelope::parse(&f),
            Err(WireError::Ipv4Fragment(_))
        ));
        let mut l = b;
        l[25] = 9;
        assert!(matches!(Envelope::parse(&l), Err(WireError::Length { .. })));
        assert!(matches!(
            Envelope::parse(&b[..27]),
            Err(WireError::Truncated { .. })
        ));
    }
}
