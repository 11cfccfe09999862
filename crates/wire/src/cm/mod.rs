//! InfiniBand communication manager (CM) messages.
//!
//! Each CM message is the 232-byte data area of a MAD of management class 0x07
//! with method Send; the attribute ID says which message it is. Connection setup
//! is REQ → REP → RTU (MRA asks the peer to wait longer, REJ refuses); teardown
//! is DREQ → DREP. SIDR_REQ/SIDR_REP resolve a service ID to a UD QP.
//!
//! Layouts follow IBTA volume 1 chapter 12 (tables 106–120); offsets below are
//! relative to the start of the MAD data (MAD byte 24), bit 7 is a byte's MSB.
//! Every field is decoded, including the ones rdma_cm leaves zero; reserved
//! bits are ignored on parse and written as zero, so a message from a
//! conforming sender re-encodes to the bytes it came from. Private data has no length on the wire:
//! the whole area is always carried.
//!
//! The transaction ID lives in the MAD header, not here: Linux's REP, RTU, MRA
//! and REJ echo the REQ's TID, DREP echoes the DREQ's.

mod fields;
mod path;
mod req;
mod setup;
mod sidr;
mod teardown;

pub use fields::private_data;
pub use path::CmPath;
pub use req::Req;
pub use setup::{IdsAndData, Mra, Rej, Rep, Rtu};
pub use sidr::{SidrRep, SidrReq};
pub use teardown::{Drep, Dreq};

use crate::error::WireError;
use crate::mad::{Mad, MadHeader, MAD_DATA_LEN, MAD_HEADER_LEN, MAD_LEN, MGMT_CLASS_CM};

/// Attribute IDs of the CM messages.
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// Connect request.
    pub const REQ: u16 = 0x0010;
    /// Message receipt acknowledgement.
    pub const MRA: u16 = 0x0011;
    /// Reject.
    pub const REJ: u16 = 0x0012;
    /// Connect reply.
    pub const REP: u16 = 0x0013;
    /// Ready to use.
    pub const RTU: u16 = 0x0014;
    /// Disconnect request.
    pub const DREQ: u16 = 0x0015;
    /// Disconnect reply.
    pub const DREP: u16 = 0x0016;
    /// Service ID resolution request.
    pub const SIDR_REQ: u16 = 0x0017;
    /// Service ID resolution response.
    pub const SIDR_REP: u16 = 0x0018;
    /// Load alternate path.
    pub const LAP: u16 = 0x0019;
    /// Alternate path response.
    pub const APR: u16 = 0x001a;

    /// The short upper-case name of attribute `id` ("REQ", "DREP",
    /// "ClassPortInfo", …), "unknown" for any other: what logs and decoders
    /// print.
    ///
    /// ```
    /// use ndverbs_wire::cm::attr;
    /// assert_eq!((attr::name(attr::DREQ), attr::name(0x7777)), ("DREQ", "unknown"));
    /// ```
    pub fn name(id: u16) -> &'static str {
        match id {
            REQ => "REQ",
            MRA => "MRA",
            REJ => "REJ",
            REP => "REP",
            RTU => "RTU",
            DREQ => "DREQ",
            DREP => "DREP",
            SIDR_REQ => "SIDR_REQ",
            SIDR_REP => "SIDR_REP",
            LAP => "LAP",
            APR => "APR",
            CLASS_PORT_INFO => "ClassPortInfo",
            _ => "unknown",
        }
    }
}

/// Private data capacity of each message, in bytes.
pub mod pdata {
    /// REQ.
    pub const REQ: usize = 92;
    /// MRA.
    pub const MRA: usize = 222;
    /// REJ.
    pub const REJ: usize = 148;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP.
    pub const DREP: usize = 224;
    /// SIDR_REQ.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP.
    pub const SIDR_REP: usize = 136;
}

/// REJ reason codes (IBTA table 109 / Linux `ib_cm_rej_reason`).
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No resources.
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout.
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED: u16 = 5;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid communication instance.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// No listener for the service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport type.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection.
    pub const STALE_CONN: u16 = 10;
    /// Invalid GID.
    pub const INVALID_GID: u16 = 12;
    /// Invalid MTU.
    pub const INVALID_MTU: u16 = 26;
    /// Insufficient responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// Consumer defined (rdma_reject and rdma_cm-side failures).
    pub const CONSUMER_DEFINED: u16 = 28;
    /// Invalid RNR retry count.
    pub const INVALID_RNR_RETRY: u16 = 29;
    /// Duplicate local communication ID.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// Invalid class version.
    pub const INVALID_CLASS_VERSION: u16 = 31;
}

/// Which message an MRA or REJ refers to (2-bit field).
pub mod msg_ref {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// Another message (LAP).
    pub const OTHER: u8 = 2;
}

/// Any CM message.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{CmMessage, Drep, Dreq};
/// use ndverbs_wire::mad::Mad;
/// // Dispatch on what arrived on QP1.
/// fn answer(mad: &[u8]) -> Option<CmMessage> {
///     match CmMessage::parse(&Mad::parse(mad).ok()?).ok()? {
///         CmMessage::Dreq(d) => Some(CmMessage::Drep(Drep {
///             local_comm_id: d.remote_comm_id,
///             remote_comm_id: d.local_comm_id,
///             private_data: [0; 224],
///         })),
///         _ => None,
///     }
/// }
/// let dreq = Dreq { local_comm_id: 1, remote_comm_id: 2, remote_qpn: 0x22, private_data: [0; 220] };
/// let reply = answer(&CmMessage::Dreq(dreq).to_mad(7)).unwrap();
/// assert_eq!((reply.name(), reply.local_comm_id(), reply.remote_comm_id()), ("DREP", 2, Some(1)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CmMessage {
    /// Connect request.
    Req(Req),
    /// Message receipt acknowledgement.
    Mra(Mra),
    /// Reject.
    Rej(Rej),
    /// Connect reply.
    Rep(Rep),
    /// Ready to use.
    Rtu(Rtu),
    /// Disconnect request.
    Dreq(Dreq),
    /// Disconnect reply.
    Drep(Drep),
    /// Service ID resolution request.
    SidrReq(SidrReq),
    /// Service ID resolution response.
    SidrRep(SidrRep),
}

impl CmMessage {
    /// Decodes the CM message in a MAD.
    pub fn parse(mad: &Mad<'_>) -> Result<Self, WireError> {
        if mad.header.mgmt_class != MGMT_CLASS_CM {
            return Err(WireError::NotCm(mad.header.mgmt_class));
        }
        Self::parse_data(mad.header.attr_id, mad.data)
    }

    /// Decodes a CM message from the 232 data bytes of a MAD with attribute `attr_id`.
    pub fn parse_data(attr_id: u16, b: &[u8; MAD_DATA_LEN]) -> Result<Self, WireError> {
        Ok(match attr_id {
            attr::REQ => CmMessage::Req(Req::parse(b)),
            attr::MRA => CmMessage::Mra(Mra::parse(b)),
            attr::REJ => CmMessage::Rej(Rej::parse(b)),
            attr::REP => CmMessage::Rep(Rep::parse(b)),
            attr::RTU => CmMessage::Rtu(Rtu::parse(b)),
            attr::DREQ => CmMessage::Dreq(Dreq::parse(b)),
            attr::DREP => CmMessage::Drep(Drep::parse(b)),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReq::parse(b)),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRep::parse(b)),
            other => return Err(WireError::UnknownCmAttribute(other)),
        })
    }

    /// Writes the 232 data bytes (reserved bits zero).
    pub fn write_data(&self, b: &mut [u8; MAD_DATA_LEN]) {
        b.fill(0);
        match self {
            CmMessage::Req(m) => m.write(b),
            CmMessage::Mra(m) => m.write(b),
            CmMessage::Rej(m) => m.write(b),
            CmMessage::Rep(m) => m.write(b),
            CmMessage::Rtu(m) => m.write(b),
            CmMessage::Dreq(m) => m.write(b),
            CmMessage::Drep(m) => m.write(b),
            CmMessage::SidrReq(m) => m.write(b),
            CmMessage::SidrRep(m) => m.write(b),
        }
    }

    /// The whole 256-byte MAD for this message with transaction ID `tid`.
    pub fn to_mad(&self, tid: u64) -> [u8; MAD_LEN] {
        let mut m = [0u8; MAD_LEN];
        // Cannot fail: the buffer is a whole MAD.
        let _ = MadHeader::cm(self.attr_id(), tid).write(&mut m);
        let data: &mut [u8; MAD_DATA_LEN] = (&mut m[MAD_HEADER_LEN..])
            .try_into()
            .expect("MAD data area is 232 bytes");
        self.write_data(data);
        m
    }

    /// The MAD attribute ID of this message.
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// Short upper-case name: "REQ", "REP", "DREQ", ….
    pub fn name(&self) -> &'static str {
        attr::name(self.attr_id())
    }

    /// The sender's communication ID (SIDR: the request ID).
    pub fn local_comm_id(&self) -> u32 {
        match self {
            CmMessage::Req(m) => m.local_comm_id,
            CmMessage::Mra(m) => m.local_comm_id,
            CmMessage::Rej(m) => m.local_comm_id,
            CmMessage::Rep(m) => m.local_comm_id,
            CmMessage::Rtu(m) => m.local_comm_id,
            CmMessage::Dreq(m) => m.local_comm_id,
            CmMessage::Drep(m) => m.local_comm_id,
            CmMessage::SidrReq(m) => m.request_id,
            CmMessage::SidrRep(m) => m.request_id,
        }
    }

    /// The receiver's communication ID, for messages that carry one.
    pub fn remote_comm_id(&self) -> Option<u32> {
        match self {
            CmMessage::Mra(m) => Some(m.remote_comm_id),
            CmMessage::Rej(m) => Some(m.remote_comm_id),
            CmMessage::Rep(m) => Some(m.remote_comm_id),
            CmMessage::Rtu(m) => Some(m.remote_comm_id),
            CmMessage::Dreq(m) => Some(m.remote_comm_id),
            CmMessage::Drep(m) => Some(m.remote_comm_id),
            CmMessage::Req(_) | CmMessage::SidrReq(_) | CmMessage::SidrRep(_) => None,
        }
    }

    /// The private data area.
    pub fn private_data(&self) -> &[u8] {
        match self {
            CmMessage::Req(m) => &m.private_data,
            CmMessage::Mra(m) => &m.private_data,
            CmMessage::Rej(m) => &m.private_data,
            CmMessage::Rep(m) => &m.private_data,
            CmMessage::Rtu(m) => &m.private_data,
            CmMessage::Dreq(m) => &m.private_data,
            CmMessage::Drep(m) => &m.private_data,
            CmMessage::SidrReq(m) => &m.private_data,
            CmMessage::SidrRep(m) => &m.private_data,
        }
    }
}

/// Converts a CM timeout exponent to milliseconds as Linux does:
/// `1 << max(t - 8, 0)` (4.096 µs × 2^t, rounded to a power of two in ms).
pub fn cm_timeout_ms(t: u8) -> u64 {
    1u64 << t.saturating_sub(8).min(31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cma::CmaHeader;
    use crate::packet::Datagram;

    /// Vector V6 of the wire reference: a synthetic REQ with the values tshark reports.
    #[test]
    fn v6_req_fields_match_tshark() {
        let s: String = crate::icrc::tests::V6.split_whitespace().collect();
        let p: Vec<u8> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect();
        let d = Datagram::parse(&p).unwrap();
        let mad = Mad::parse(d.packet.payload).unwrap();
        assert_eq!(mad.header.tid, 0x0000_000a_1234_5678);
        let CmMessage::Req(r) = CmMessage::parse(&mad).unwrap() else {
            panic!("not a REQ")
        };
        assert_eq!(r.local_comm_id, 0x1234_5678);
        assert_eq!(r.service_id, 0x0000_0000_0106_1C06);
        assert_eq!(r.local_ca_guid, 0x0211_2233_4455_6677);
        assert_eq!(r.local_qpn, 0x11);
        assert_eq!(r.starting_psn, 0x12_3456);
        assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
        assert_eq!(
            (r.remote_cm_response_timeout, r.local_cm_response_timeout),
            (20, 20)
        );
        assert_eq!(
            (r.retry_count, r.rnr_retry_count, r.max_cm_retries),
            (7, 7, 15)
        );
        assert_eq!(r.path_mtu, 3);
        assert_eq!(
            (r.primary.local_lid, r.primary.remote_lid),
            (0xffff, 0xffff)
        );
        assert_eq!(r.primary.hop_limit, 64);
        assert_eq!(r.primary.local_ack_timeout, 18);
        assert_eq!(r.primary.local_gid.to_string(), "::ffff:10.0.0.1");
        assert_eq!(r.primary.remote_gid.to_string(), "::ffff:10.0.0.2");
        assert!(!r.has_alternate_path());
        let h = CmaHeader::parse(&r.private_data).unwrap();
        assert_eq!(h.src_port, 40000);
        assert_eq!(
            (h.src.to_string(), h.dst.to_string()),
            ("10.0.0.1".into(), "10.0.0.2".into())
        );
        assert_eq!(
            &CmMessage::Req(r).to_mad(mad.header.tid)[..],
            d.packet.payload
        );
    }

    #[test]
    fn private_data_limits() {
        assert!(private_data::<{ pdata::REQ }>("REQ", &[1; 92]).is_ok());
        assert_eq!(
            private_data::<{ pdata::REQ }>("REQ", &[1; 93]),
            Err(WireError::PrivateDataTooLong {
                msg: "REQ",
                len: 93,
                max: 92
            })
        );
        assert_eq!(cm_timeout_ms(20), 4096);
        assert_eq!(cm_timeout_ms(3), 1);
    }
}
