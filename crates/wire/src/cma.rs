//! rdma_cm conventions on top of the IB CM: service IDs and the IP header in
//! REQ private data.
//!
//! Linux's rdma_cm maps a (port space, port) pair to an IB service ID,
//! `port_space << 16 | port`; TCP-like connections use port space 0x0106, so
//! rping's port 7174 is service ID `0x0000000001061C06`. The first 36 bytes of a
//! REQ's (and SIDR_REQ's) private data carry the rdma_cm header; the application
//! gets the remaining 56 bytes. No other message has the header.
//!
//! ```text
//!  0     cma_version (0)
//!  1     IP version in bits 7:4 (4 or 6)
//!  2..4  source port of the active side (big-endian)
//!  4..20 source address  (IPv4: 12 zero bytes, then the address — not ::ffff:)
//! 20..36 destination address (same encoding)
//! ```

use crate::error::{need, room, WireError};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// rdma_cm port space of TCP-like (connected) ids.
pub const RDMA_PS_TCP: u16 = 0x0106;
/// rdma_cm port space of UDP-like ids.
pub const RDMA_PS_UDP: u16 = 0x0111;
/// rdma_cm port space of IPoIB ids.
pub const RDMA_PS_IPOIB: u16 = 0x0002;
/// rdma_cm port space of IB-native ids.
pub const RDMA_PS_IB: u16 = 0x013f;
/// Bytes of the rdma_cm header.
pub const CMA_HEADER_LEN: usize = 36;
/// Private data left to an application in a REQ: 92 − 36.
pub const REQ_USER_PRIVATE_DATA: usize = crate::cm::pdata::REQ - CMA_HEADER_LEN;

/// The service ID for `port` in `port_space`.
pub fn service_id(port_space: u16, port: u16) -> u64 {
    (u64::from(port_space) << 16) | u64::from(port)
}

/// Splits an rdma_cm service ID into (port space, port), or `None` if the high
/// bits are not rdma_cm's.
pub fn split_service_id(sid: u64) -> Option<(u16, u16)> {
    if sid >> 32 != 0 {
        return None;
    }
    Some(((sid >> 16) as u16, sid as u16))
}

/// The rdma_cm header at the start of REQ private data.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cma::{CmaHeader, CMA_HEADER_LEN};
/// // The 36 bytes rdma_cm puts at the start of a REQ's private data.
/// let h = CmaHeader::new("10.0.0.1".parse().unwrap(), 40000, "10.0.0.2".parse().unwrap());
/// let mut pdata = [0u8; 92];
/// assert_eq!(h.write(&mut pdata)?, CMA_HEADER_LEN);
/// pdata[CMA_HEADER_LEN..][..5].copy_from_slice(b"hello"); // the application's data follows
/// assert_eq!(CmaHeader::parse(&pdata)?, h);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHeader {
    /// Header version (0).
    pub version: u8,
    /// Active side's source port.
    pub src_port: u16,
    /// Active side's address.
    pub src: IpAddr,
    /// Passive side's address.
    pub dst: IpAddr,
}

impl CmaHeader {
    /// A version-0 header.
    pub fn new(src: IpAddr, src_port: u16, dst: IpAddr) -> Self {
        CmaHeader {
            version: 0,
            src_port,
            src,
            dst,
        }
    }

    /// Parses the first 36 bytes of REQ private data.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        need("rdma_cm header", b, CMA_HEADER_LEN)?;
        let ipv = b[1] >> 4;
        let addr = |off: usize| -> Result<IpAddr, WireError> {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[off..off + 16]);
            match ipv {
                4 => Ok(IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))),
                6 => Ok(IpAddr::V6(Ipv6Addr::from(a))),
                v => Err(WireError::Field {
                    what: "rdma_cm header IP version",
                    value: u64::from(v),
                }),
            }
        };
        Ok(CmaHeader {
            version: b[0],
            src_port: u16::from_be_bytes([b[2], b[3]]),
            src: addr(4)?,
            dst: addr(20)?,
        })
    }

    /// Writes 36 bytes. Both addresses must be of one family.
    pub fn write(&self, b: &mut [u8]) -> Result<usize, WireError> {
        room("rdma_cm header", b, CMA_HEADER_LEN)?;
        let enc = |a: IpAddr| -> [u8; 16] {
            match a {
                IpAddr::V4(v4) => {
                    let mut x = [0u8; 16];
                    x[12..].copy_from_slice(&v4.octets());
                    x
                }
                IpAddr::V6(v6) => v6.octets(),
            }
        };
        let ipv = match (self.src, self.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4u8,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => {
                return Err(WireError::Field {
                    what: "rdma_cm header: mixed address families",
                    value: 0,
                })
            }
        };
        b[0] = self.version;
        b[1] = ipv << 4;
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        b[4..20].copy_from_slice(&enc(self.src));
        b[20..36].copy_from_slice(&enc(self.dst));
        Ok(CMA_HEADER_LEN)
    }
}

/// The GID of an IP address as RoCEv2 uses it: IPv4 maps to `::ffff:a.b.c.d`.
pub fn gid_of(addr: IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The IP address a RoCEv2 GID stands for (IPv4-mapped GIDs give IPv4).
pub fn addr_of_gid(gid: Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids() {
        assert_eq!(service_id(RDMA_PS_TCP, 7174), 0x0000_0000_0106_1C06);
        assert_eq!(service_id(RDMA_PS_TCP, 18515), 0x0000_0000_0106_4853);
        assert_eq!(split_service_id(0x0106_1C06), Some((RDMA_PS_TCP, 7174)));
        assert_eq!(split_service_id(1 << 40), None);
    }

    #[test]
    fn header_round_trip_v4_and_v6() {
        for h in [
            CmaHeader::new(
                "10.0.0.1".parse().unwrap(),
                40000,
                "10.0.0.2".parse().unwrap(),
            ),
            CmaHeader::new("fd00::1".parse().unwrap(), 1, "fd00::2".parse().unwrap()),
        ] {
            let mut b = [0u8; 36];
            h.write(&mut b).unwrap();
            assert_eq!(CmaHeader::parse(&b).unwrap(), h);
        }
        let mixed = CmaHeader::new("10.0.0.1".parse().unwrap(), 1, "fd00::2".parse().unwrap());
        assert!(mixed.write(&mut [0u8; 36]).is_err());
        assert!(CmaHeader::parse(&[0u8; 36]).is_err());
    }
}
