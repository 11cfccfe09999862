//! The 44-byte path record a REQ carries twice (primary and alternate).

use super::fields::{bit, bits, field, gid};
use crate::be::{put_u16, put_u32, u16_at, u32_at};
use std::net::Ipv6Addr;

/// A path as a REQ describes it (primary or alternate), 44 bytes.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::CmPath;
/// use ndverbs_wire::cma::gid_of;
/// // The primary path of a REQ on RoCEv2: permissive LIDs, IPv4-mapped GIDs.
/// let path = CmPath {
///     local_lid: 0xffff,
///     remote_lid: 0xffff,
///     local_gid: gid_of("10.0.0.1".parse().unwrap()),
///     remote_gid: gid_of("10.0.0.2".parse().unwrap()),
///     hop_limit: 64,
///     local_ack_timeout: 18,
///     ..CmPath::NONE
/// };
/// assert_eq!(path.remote_gid.to_ipv4_mapped(), Some("10.0.0.2".parse().unwrap()));
/// assert_eq!(CmPath::NONE.local_lid, 0); // an absent alternate path
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmPath {
    /// Local port LID (0xFFFF, permissive, on RoCE).
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID (IPv4-mapped on RoCEv2 over IPv4).
    pub local_gid: Ipv6Addr,
    /// Remote port GID.
    pub remote_gid: Ipv6Addr,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Reserved bits 11:6 of the flow label word.
    pub resv_fl: u8,
    /// Packet rate (6 bits).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local.
    pub subnet_local: bool,
    /// Reserved low bits of the SL byte.
    pub resv_sl: u8,
    /// Local ACK timeout exponent (5 bits).
    pub local_ack_timeout: u8,
    /// Low 3 bits of the ACK timeout byte (the alternate path's holds SAP supported).
    pub resv_ack: u8,
}

impl CmPath {
    /// An all-zero path: "no alternate path".
    pub const NONE: CmPath = CmPath {
        local_lid: 0,
        remote_lid: 0,
        local_gid: Ipv6Addr::UNSPECIFIED,
        remote_gid: Ipv6Addr::UNSPECIFIED,
        flow_label: 0,
        resv_fl: 0,
        packet_rate: 0,
        traffic_class: 0,
        hop_limit: 0,
        sl: 0,
        subnet_local: false,
        resv_sl: 0,
        local_ack_timeout: 0,
        resv_ack: 0,
    };

    pub(super) fn parse(b: &[u8], o: usize) -> Self {
        let w = u32_at(b, o + 36);
        CmPath {
            local_lid: u16_at(b, o),
            remote_lid: u16_at(b, o + 2),
            local_gid: gid(b, o + 4),
            remote_gid: gid(b, o + 20),
            flow_label: w >> 12,
            resv_fl: ((w >> 6) & 0x3f) as u8,
            packet_rate: (w & 0x3f) as u8,
            traffic_class: b[o + 40],
            hop_limit: b[o + 41],
            sl: bits(b, o + 42, 4, 4),
            subnet_local: bit(b, o + 42, 3),
            resv_sl: bits(b, o + 42, 0, 3),
            local_ack_timeout: bits(b, o + 43, 3, 5),
            resv_ack: bits(b, o + 43, 0, 3),
        }
    }

    pub(super) fn write(&self, b: &mut [u8], o: usize) {
        put_u16(b, o, self.local_lid);
        put_u16(b, o + 2, self.remote_lid);
        b[o + 4..o + 20].copy_from_slice(&self.local_gid.octets());
        b[o + 20..o + 36].copy_from_slice(&self.remote_gid.octets());
        let w = ((self.flow_label & 0xf_ffff) << 12)
            | (u32::from(self.resv_fl & 0x3f) << 6)
            | u32::from(self.packet_rate & 0x3f);
        put_u32(b, o + 36, w);
        b[o + 40] = self.traffic_class;
        b[o + 41] = self.hop_limit;
        b[o + 42] = field(self.sl, 4, 4)
            | field(u8::from(self.subnet_local), 3, 1)
            | field(self.resv_sl, 0, 3);
        b[o + 43] = field(self.local_ack_timeout, 3, 5) | field(self.resv_ack, 0, 3);
    }
}
