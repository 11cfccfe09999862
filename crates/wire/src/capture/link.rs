//! Link-layer types and stripping the link-layer header off a frame.
//!
//! RoCEv2 captures come from wherever `tcpdump` ran: a NIC or soft-RoCE
//! (`rxe`) netdev gives Ethernet, `-i any` gives Linux cooked headers (v1 from
//! older libpcap, v2 from newer), tunnels and some VMs give raw IP, and BSD or
//! macOS loopback gives the 4-byte "null" header. All we want from any of them
//! is the IP packet inside, which is what [`ip_packet`] returns.

/// Link-layer header type of the frames of a capture (pcap `LINKTYPE_*`).
///
/// [`LinkType::from_u32`] maps every number this module understands to a
/// named variant, so [`LinkType::Other`] only ever holds the rest.
///
/// # Example
///
/// ```
/// use ndverbs_wire::capture::LinkType;
/// assert_eq!(LinkType::from_u32(1), LinkType::Ethernet);
/// assert_eq!(LinkType::from_u32(12), LinkType::RawIp); // old DLT_RAW...
/// assert_eq!(LinkType::RawIp.to_u32(), 101); // ...written back as LINKTYPE_RAW
/// assert_eq!(LinkType::from_u32(147), LinkType::Other(147));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1): Ethernet II, possibly VLAN-tagged.
    Ethernet,
    /// `LINKTYPE_RAW` (101): an IPv4 or IPv6 packet with no link header.
    ///
    /// Also read from 12, the `DLT_RAW` value most platforms' libpcap once
    /// wrote into files; written back as 101.
    RawIp,
    /// `LINKTYPE_IPV4` (228): an IPv4 packet with no link header.
    Ipv4,
    /// `LINKTYPE_IPV6` (229): an IPv6 packet with no link header.
    Ipv6,
    /// `LINKTYPE_LINUX_SLL` (113): Linux "cooked" capture v1, 16-byte header.
    LinuxSll,
    /// `LINKTYPE_LINUX_SLL2` (276): Linux "cooked" capture v2, 20-byte header.
    LinuxSll2,
    /// `LINKTYPE_NULL` (0): BSD loopback, a 4-byte address family in the
    /// capturing host's byte order.
    Null,
    /// Any other link type, by number.
    Other(u32),
}

impl LinkType {
    /// Names a link-type number from a capture file header.
    #[must_use]
    pub fn from_u32(v: u32) -> Self {
        match v {
            0 => LinkType::Null,
            1 => LinkType::Ethernet,
            12 | 101 => LinkType::RawIp,
            113 => LinkType::LinuxSll,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            276 => LinkType::LinuxSll2,
            other => LinkType::Other(other),
        }
    }

    /// The number to write into a capture file header.
    #[must_use]
    pub fn to_u32(self) -> u32 {
        match self {
            LinkType::Null => 0,
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::LinuxSll => 113,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::LinuxSll2 => 276,
            LinkType::Other(v) => v,
        }
    }
}

/// IP version of the packet returned by [`ip_packet`].
///
/// # Example
///
/// ```
/// use ndverbs_wire::capture::{ip_packet, IpVersion, LinkType};
/// // An Ethernet frame: 14-byte link header, then an IPv4 header (first nibble 4).
/// let mut frame = [0u8; 14 + 20];
/// frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes()); // EtherType IPv4
/// frame[14] = 0x45;
/// let (version, ip) = ip_packet(LinkType::Ethernet, &frame).unwrap();
/// assert_eq!((version, ip.len()), (IpVersion::V4, 20));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
/// Tag protocol identifiers of VLAN tags: 802.1Q, 802.1ad (QinQ service
/// tag), and the pre-standard 0x9100 that some switches still emit for QinQ.
const VLAN_TPIDS: [u16; 3] = [0x8100, 0x88A8, 0x9100];

/// BSD `AF_INET` is 2 everywhere; `AF_INET6` differs by OS (24 NetBSD and
/// OpenBSD, 28 FreeBSD, 30 macOS), and a capture may come from any of them.
const NULL_AF_INET: u32 = 2;
const NULL_AF_INET6: [u32; 3] = [24, 28, 30];

/// Strips the link-layer header from a captured frame.
///
/// Handles Ethernet (with any number of 802.1Q/802.1ad VLAN tags), Linux
/// cooked v1 and v2, raw IP (version from the first nibble), IPv4/IPv6 link
/// types, and BSD loopback. Returns `None` for frames that do not carry IPv4
/// or IPv6 (ARP, LLDP, ...), for link headers cut short by the snap length,
/// and for link types it does not know.
///
/// The returned slice runs to the end of the captured bytes, so it may include
/// an Ethernet FCS or padding after the IP packet: use the IP length fields to
/// find where the packet ends.
#[must_use]
pub fn ip_packet(link: LinkType, data: &[u8]) -> Option<(IpVersion, &[u8])> {
    match link {
        LinkType::Ethernet => ethernet(data),
        LinkType::LinuxSll => {
            let proto = be16(data, 14)?;
            by_ethertype(proto, data.get(16..)?)
        }
        LinkType::LinuxSll2 => {
            let proto = be16(data, 0)?;
            by_ethertype(proto, data.get(20..)?)
        }
        LinkType::RawIp => match data.first()? >> 4 {
            4 => Some((IpVersion::V4, data)),
            6 => Some((IpVersion::V6, data)),
            _ => None,
        },
        LinkType::Ipv4 => Some((IpVersion::V4, data)),
        LinkType::Ipv6 => Some((IpVersion::V6, data)),
        LinkType::Null => null(data),
        LinkType::Other(_) => None,
    }
}

fn ethernet(data: &[u8]) -> Option<(IpVersion, &[u8])> {
    let mut at = 12;
    let mut ethertype = be16(data, at)?;
    // Each tag is TPID + TCI; the real ethertype follows the last one. The
    // loop ends because every pass consumes four bytes of a finite slice.
    while VLAN_TPIDS.contains(&ethertype) {
        at += 4;
        ethertype = be16(data, at)?;
    }
    by_ethertype(ethertype, data.get(at + 2..)?)
}

fn null(data: &[u8]) -> Option<(IpVersion, &[u8])> {
    let af: [u8; 4] = data.get(..4)?.try_into().ok()?;
    let payload = data.get(4..)?;
    // The header is in the byte order of the host that captured, which the
    // file does not record. Address families are small numbers, so only one
    // reading of the four bytes can match.
    for family in [u32::from_le_bytes(af), u32::from_be_bytes(af)] {
        if family == NULL_AF_INET {
            return Some((IpVersion::V4, payload));
        }
        if NULL_AF_INET6.contains(&family) {
            return Some((IpVersion::V6, payload));
        }
    }
    None
}

fn by_ethertype(ethertype: u16, payload: &[u8]) -> Option<(IpVersion, &[u8])> {
    match ethertype {
        ETHERTYPE_IPV4 => Some((IpVersion::V4, payload)),
        ETHERTYPE_IPV6 => Some((IpVersion::V6, payload)),
        _ => None,
    }
}

fn be16(data: &[u8], at: usize) -> Option<u16> {
    let b = data.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One link type of each kind, an unknown number included.
    pub(crate) const EVERY_KIND: [LinkType; 8] = [
        LinkType::Ethernet,
        LinkType::RawIp,
        LinkType::Ipv4,
        LinkType::Ipv6,
        LinkType::LinuxSll,
        LinkType::LinuxSll2,
        LinkType::Null,
        LinkType::Other(147),
    ];

    const V4: &[u8] = &[
        0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    const V6: &[u8] = &[0x60, 0, 0, 0, 0, 0, 17, 64];

    fn eth(ethertype: u16, tags: &[u16], payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1]);
        for &tpid in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&0x0064u16.to_be_bytes()); // VLAN 100
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn link_type_numbers_round_trip() {
        for lt in EVERY_KIND {
            assert_eq!(LinkType::from_u32(lt.to_u32()), lt);
        }
        assert_eq!(LinkType::from_u32(12), LinkType::RawIp);
        assert_eq!(LinkType::RawIp.to_u32(), 101);
    }

    #[test]
    fn ethernet_plain_and_vlan_tagged() {
        let f = eth(0x0800, &[], V4);
        assert_eq!(ip_packet(LinkType::Ethernet, &f), Some((IpVersion::V4, V4)));

        let f = eth(0x86DD, &[0x8100], V6);
        assert_eq!(ip_packet(LinkType::Ethernet, &f), Some((IpVersion::V6, V6)));

        // QinQ: service tag, customer tag, then IPv4.
        let f = eth(0x0800, &[0x88A8, 0x8100], V4);
        assert_eq!(ip_packet(LinkType::Ethernet, &f), Some((IpVersion::V4, V4)));

        let f = eth(0x0800, &[0x9100, 0x8100, 0x8100], V4);
        assert_eq!(ip_packet(LinkType::Ethernet, &f), Some((IpVersion::V4, V4)));
    }

    #[test]
    fn ethernet_non_ip_and_truncated() {
        let arp = eth(0x0806, &[], &[0; 28]);
        assert_eq!(ip_packet(LinkType::Ethernet, &arp), None);
        let tagged_arp = eth(0x0806, &[0x8100], &[0; 28]);
        assert_eq!(ip_packet(LinkType::Ethernet, &tagged_arp), None);

        let f = eth(0x0800, &[0x8100], V4);
        // Every cut inside the link header (14 + 4 bytes) is a truncated header.
        for cut in 0..18 {
            assert_eq!(ip_packet(LinkType::Ethernet, &f[..cut]), None, "cut {cut}");
        }
        // A complete link header with nothing after it is still IPv4.
        assert_eq!(
            ip_packet(LinkType::Ethernet, &f[..18]),
            Some((IpVersion::V4, &[][..]))
        );
    }

    #[test]
    fn linux_cooked_v1() {
        let mut f = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0];
        f.extend_from_slice(&0x86DDu16.to_be_bytes());
        f.extend_from_slice(V6);
        assert_eq!(ip_packet(LinkType::LinuxSll, &f), Some((IpVersion::V6, V6)));
        assert_eq!(ip_packet(LinkType::LinuxSll, &f[..15]), None);

        f[14..16].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(ip_packet(LinkType::LinuxSll, &f), None);
    }

    #[test]
    fn linux_cooked_v2() {
        let mut f = 0x0800u16.to_be_bytes().to_vec();
        f.extend_from_slice(&[0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
        f.extend_from_slice(V4);
        assert_eq!(
            ip_packet(LinkType::LinuxSll2, &f),
            Some((IpVersion::V4, V4))
        );
        assert_eq!(ip_packet(LinkType::LinuxSll2, &f[..19]), None);
        assert_eq!(ip_packet(LinkType::LinuxSll2, &f[..1]), None);
    }

    #[test]
    fn raw_ip_by_version_nibble() {
        assert_eq!(ip_packet(LinkType::RawIp, V4), Some((IpVersion::V4, V4)));
        assert_eq!(ip_packet(LinkType::RawIp, V6), Some((IpVersion::V6, V6)));
        assert_eq!(ip_packet(LinkType::RawIp, &[0x50, 0]), None);
        assert_eq!(ip_packet(LinkType::RawIp, &[]), None);
        assert_eq!(ip_packet(LinkType::Ipv4, V4), Some((IpVersion::V4, V4)));
        assert_eq!(ip_packet(LinkType::Ipv6, V6), Some((IpVersion::V6, V6)));
    }

    #[test]
    fn null_loopback_either_byte_order() {
        for (af, version) in [
            (2u32, IpVersion::V4),
            (24, IpVersion::V6),
            (28, IpVersion::V6),
            (30, IpVersion::V6),
        ] {
            let payload = if version == IpVersion::V4 { V4 } else { V6 };
            for header in [af.to_le_bytes(), af.to_be_bytes()] {
                let mut f = header.to_vec();
                f.extend_from_slice(payload);
                assert_eq!(ip_packet(LinkType::Null, &f), Some((version, payload)));
            }
        }
        // AF_UNSPEC and an OSI family are not IP.
        assert_eq!(ip_packet(LinkType::Null, &[0, 0, 0, 0, 0x45]), None);
        assert_eq!(ip_packet(LinkType::Null, &[7, 0, 0, 0, 0x45]), None);
        assert_eq!(ip_packet(LinkType::Null, &[2, 0, 0]), None);
    }

    #[test]
    fn other_link_types_are_not_decoded() {
        assert_eq!(ip_packet(LinkType::Other(105), V4), None);
    }
}
