//! Service ID resolution (SIDR_REQ, SIDR_REP): which UD QP serves a service ID.
//! ndverbs' CM (`ndverbs_proto::cm`) uses them for rdma_cm's UDP port space.

use super::fields::array;
use super::pdata;
use crate::be::{put_u16, put_u24, put_u32, put_u64, u16_at, u24_at, u32_at, u64_at};

/// Service ID resolution request.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, private_data, CmMessage, SidrReq};
/// use ndverbs_wire::mad::Mad;
/// // Which UD QP serves this service ID?
/// let m = SidrReq { request_id: 9, pkey: 0xffff, service_id: 0x0111_1234, private_data: [0; 216] };
/// // Into a 256-byte MAD and back.
/// let mad = CmMessage::SidrReq(m).to_mad(0x2_0000_0001);
/// let back = CmMessage::parse(&Mad::parse(&mad)?)?;
/// assert_eq!(back, CmMessage::SidrReq(m));
/// assert_eq!(back.attr_id(), attr::SIDR_REQ);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrReq {
    /// Request ID.
    pub request_id: u32,
    /// Partition key.
    pub pkey: u16,
    /// Service ID.
    pub service_id: u64,
    /// Private data.
    pub private_data: [u8; pdata::SIDR_REQ],
}

impl SidrReq {
    pub(super) fn parse(b: &[u8]) -> Self {
        SidrReq {
            request_id: u32_at(b, 0),
            pkey: u16_at(b, 4),
            service_id: u64_at(b, 8),
            private_data: array(b, 16),
        }
    }

    pub(super) fn write(&self, b: &mut [u8]) {
        put_u32(b, 0, self.request_id);
        put_u16(b, 4, self.pkey);
        put_u64(b, 8, self.service_id);
        b[16..].copy_from_slice(&self.private_data);
    }
}

/// Service ID resolution response.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, private_data, CmMessage, SidrRep};
/// use ndverbs_wire::mad::Mad;
/// let m = SidrRep { request_id: 9, status: 0, add_info_len: 0, vendor_id: 0, qpn: 0x33,
///     service_id: 0x0111_1234, qkey: 0x1111, add_info: [0; 72], private_data: [0; 136] };
/// // Into a 256-byte MAD and back.
/// let mad = CmMessage::SidrRep(m).to_mad(0x2_0000_0001);
/// let back = CmMessage::parse(&Mad::parse(&mad)?)?;
/// assert_eq!(back, CmMessage::SidrRep(m));
/// assert_eq!(back.name(), "SIDR_REP");
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrRep {
    /// Request ID being answered.
    pub request_id: u32,
    /// Status (0 = valid).
    pub status: u8,
    /// Bytes of additional information.
    pub add_info_len: u8,
    /// ECE vendor ID (24 bits).
    pub vendor_id: u32,
    /// UD QPN (24 bits).
    pub qpn: u32,
    /// Service ID.
    pub service_id: u64,
    /// Q_Key.
    pub qkey: u32,
    /// Additional information.
    pub add_info: [u8; 72],
    /// Private data.
    pub private_data: [u8; pdata::SIDR_REP],
}

impl SidrRep {
    pub(super) fn parse(b: &[u8]) -> Self {
        SidrRep {
            request_id: u32_at(b, 0),
            status: b[4],
            add_info_len: b[5],
            vendor_id: (u32::from(u16_at(b, 6)) << 8) | u32::from(b[11]),
            qpn: u24_at(b, 8),
            service_id: u64_at(b, 12),
            qkey: u32_at(b, 20),
            add_info: array(b, 24),
            private_data: array(b, 96),
        }
    }

    pub(super) fn write(&self, b: &mut [u8]) {
        put_u32(b, 0, self.request_id);
        b[4] = self.status;
        b[5] = self.add_info_len;
        put_u16(b, 6, (self.vendor_id >> 8) as u16);
        put_u24(b, 8, self.qpn);
        b[11] = self.vendor_id as u8;
        put_u64(b, 12, self.service_id);
        put_u32(b, 20, self.qkey);
        b[24..96].copy_from_slice(&self.add_info);
        b[96..].copy_from_slice(&self.private_data);
    }
}
