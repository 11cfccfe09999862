//! Management datagrams (MADs): the 256-byte messages of QP1.
//!
//! On RoCEv2 a MAD travels as a UD SEND_ONLY to destination QP 1 with DETH
//! Q_Key `0x80010000` and source QP 1; the payload is the whole 256-byte MAD:
//! a 24-byte common header, then 232 bytes of class-specific data.
//!
//! ```text
//!  0 BaseVersion  1 MgmtClass  2 ClassVersion  3 R|Method
//!  4 Status u16   6 ClassSpecific u16
//!  8 TransactionID u64
//! 16 AttributeID u16  18 reserved u16  20 AttributeModifier u32
//! 24 data[232]
//! ```

use crate::be::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::error::{room, WireError};

/// Bytes in a MAD.
pub const MAD_LEN: usize = 256;
/// Bytes in the MAD common header.
pub const MAD_HEADER_LEN: usize = 24;
/// Bytes of class data after the common header.
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;
/// The GSI queue pair.
pub const GSI_QPN: u32 = 1;
/// The well-known Q_Key of QP1.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Management class of the communication manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// Class version the CM uses.
pub const CM_CLASS_VERSION: u8 = 2;
/// Method: Send (every CM message).
pub const METHOD_SEND: u8 = 0x03;
/// Method: Get.
pub const METHOD_GET: u8 = 0x01;
/// Method: GetResp.
pub const METHOD_GET_RESP: u8 = 0x81;

/// The MAD common header.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::attr;
/// use ndverbs_wire::mad::{MadHeader, MAD_HEADER_LEN, MGMT_CLASS_CM};
/// let h = MadHeader::cm(attr::DREQ, 0x2_0000_0001);
/// assert_eq!((h.base_version, h.mgmt_class, h.class_version), (1, MGMT_CLASS_CM, 2));
/// let mut buf = [0u8; MAD_HEADER_LEN];
/// assert_eq!(h.write(&mut buf)?, 24);
/// assert_eq!(buf[16..18], attr::DREQ.to_be_bytes()); // big-endian, as on the wire
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeader {
    /// Base version (1).
    pub base_version: u8,
    /// Management class (0x07 = CM).
    pub mgmt_class: u8,
    /// Class version (2 for the CM).
    pub class_version: u8,
    /// Method byte including the response bit 0x80.
    pub method: u8,
    /// Status.
    pub status: u16,
    /// Class-specific word.
    pub class_specific: u16,
    /// Transaction ID.
    pub tid: u64,
    /// Attribute ID (for the CM: which message).
    pub attr_id: u16,
    /// Reserved word.
    pub resv: u16,
    /// Attribute modifier.
    pub attr_mod: u32,
}

impl MadHeader {
    /// The header of a CM message with attribute `attr_id`.
    pub fn cm(attr_id: u16, tid: u64) -> Self {
        MadHeader {
            base_version: 1,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            resv: 0,
            attr_mod: 0,
        }
    }
}

/// A MAD: header plus borrowed class data.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, CmMessage, Rtu};
/// use ndverbs_wire::mad::{Mad, MGMT_CLASS_CM};
/// let rtu = CmMessage::Rtu(Rtu { local_comm_id: 1, remote_comm_id: 2, private_data: [0; 224] });
/// let bytes: [u8; 256] = rtu.to_mad(0x2_0000_0001);
/// // The common header, then 232 class-specific bytes.
/// let mad = Mad::parse(&bytes)?;
/// assert_eq!((mad.header.mgmt_class, mad.header.attr_id, mad.header.tid), (MGMT_CLASS_CM, attr::RTU, 0x2_0000_0001));
/// assert_eq!(mad.data[..4], 1u32.to_be_bytes());
/// assert!(Mad::parse(&bytes[..100]).is_err()); // MADs are always 256 bytes
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mad<'a> {
    /// Common header.
    pub header: MadHeader,
    /// The 232 data bytes.
    pub data: &'a [u8; MAD_DATA_LEN],
}

impl<'a> Mad<'a> {
    /// Parses a 256-byte MAD (any other length is an error).
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        if buf.len() != MAD_LEN {
            return Err(WireError::MadSize(buf.len()));
        }
        let header = MadHeader {
            base_version: buf[0],
            mgmt_class: buf[1],
            class_version: buf[2],
            method: buf[3],
            status: u16_at(buf, 4),
            class_specific: u16_at(buf, 6),
            tid: u64_at(buf, 8),
            attr_id: u16_at(buf, 16),
            resv: u16_at(buf, 18),
            attr_mod: u32_at(buf, 20),
        };
        let data = buf[MAD_HEADER_LEN..]
            .try_into()
            .map_err(|_| WireError::MadSize(buf.len()))?;
        Ok(Mad { header, data })
    }
}

impl MadHeader {
    /// Writes the 24-byte header.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        room("MAD header", buf, MAD_HEADER_LEN)?;
        buf[0] = self.base_version;
        buf[1] = self.mgmt_class;
        buf[2] = self.class_version;
        buf[3] = self.method;
        put_u16(buf, 4, self.status);
        put_u16(buf, 6, self.class_specific);
        put_u64(buf, 8, self.tid);
        put_u16(buf, 16, self.attr_id);
        put_u16(buf, 18, self.resv);
        put_u32(buf, 20, self.attr_mod);
        Ok(MAD_HEADER_LEN)
    }
}
