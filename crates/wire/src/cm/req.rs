//! The connect request (REQ, IBTA table 99): the active side's offer.

use super::fields::{array, bit, bits, field};
use super::path::CmPath;
use super::pdata;
use crate::be::{put_u16, put_u24, put_u32, put_u64, u16_at, u24_at, u32_at, u64_at};

/// Connect request.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, private_data, CmMessage, CmPath};
/// use ndverbs_wire::cma::{service_id, RDMA_PS_TCP};
/// use ndverbs_wire::mad::{Mad, MAD_DATA_LEN};
/// // Start from an all-zero REQ and set what a connection needs.
/// let CmMessage::Req(mut req) = CmMessage::parse_data(attr::REQ, &[0; MAD_DATA_LEN])? else { unreachable!() };
/// req.local_comm_id = 0x1234_5678;
/// req.service_id = service_id(RDMA_PS_TCP, 7174);
/// req.local_qpn = 0x11;
/// req.starting_psn = 0x46_4b00;
/// req.path_mtu = 3; // 1024
/// req.primary = CmPath { hop_limit: 64, ..CmPath::NONE };
/// req.private_data = private_data("REQ", b"hello")?;
/// // Into a 256-byte MAD and back.
/// let mad = CmMessage::Req(req).to_mad(0x2_1234_5678);
/// let back = CmMessage::parse(&Mad::parse(&mad)?)?;
/// assert_eq!(back, CmMessage::Req(req));
/// assert_eq!((back.name(), back.local_comm_id()), ("REQ", 0x1234_5678));
/// assert!(!req.has_alternate_path());
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Req {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// ECE vendor ID (24 bits).
    pub vendor_id: u32,
    /// Service ID (rdma_cm: `0x0106 << 16 | port`).
    pub service_id: u64,
    /// Sender's CA GUID.
    pub local_ca_guid: u64,
    /// Q_Key (0 for RC).
    pub local_qkey: u32,
    /// Sender's QPN (24 bits).
    pub local_qpn: u32,
    /// Responder resources: RDMA READ/atomics the sender accepts in flight.
    pub responder_resources: u8,
    /// Local EECN (24 bits, RD only).
    pub local_eecn: u32,
    /// Initiator depth: RDMA READ/atomics the sender issues in flight.
    pub initiator_depth: u8,
    /// Remote EECN (24 bits, RD only).
    pub remote_eecn: u32,
    /// Remote CM response timeout exponent (5 bits).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (2 bits: 0 RC, 1 UC, 3 XRC).
    pub transport_service_type: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// Sender's starting PSN (24 bits).
    pub starting_psn: u32,
    /// Local CM response timeout exponent (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU enum (4 bits: 1=256 … 5=4096).
    pub path_mtu: u8,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count (3 bits, 7 = infinite).
    pub rnr_retry_count: u8,
    /// Max CM retries (4 bits).
    pub max_cm_retries: u8,
    /// Sender uses an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits).
    pub extended_transport_type: u8,
    /// Primary path.
    pub primary: CmPath,
    /// Alternate path ([`CmPath::NONE`] when absent).
    pub alternate: CmPath,
    /// Private data (rdma_cm puts its 36-byte header first).
    pub private_data: [u8; pdata::REQ],
}

impl Req {
    pub(super) fn parse(b: &[u8]) -> Self {
        Req {
            local_comm_id: u32_at(b, 0),
            vendor_id: u24_at(b, 5),
            service_id: u64_at(b, 8),
            local_ca_guid: u64_at(b, 16),
            local_qkey: u32_at(b, 28),
            local_qpn: u24_at(b, 32),
            responder_resources: b[35],
            local_eecn: u24_at(b, 36),
            initiator_depth: b[39],
            remote_eecn: u24_at(b, 40),
            remote_cm_response_timeout: bits(b, 43, 3, 5),
            transport_service_type: bits(b, 43, 1, 2),
            end_to_end_flow_control: bit(b, 43, 0),
            starting_psn: u24_at(b, 44),
            local_cm_response_timeout: bits(b, 47, 3, 5),
            retry_count: bits(b, 47, 0, 3),
            pkey: u16_at(b, 48),
            path_mtu: bits(b, 50, 4, 4),
            rdc_exists: bit(b, 50, 3),
            rnr_retry_count: bits(b, 50, 0, 3),
            max_cm_retries: bits(b, 51, 4, 4),
            srq: bit(b, 51, 3),
            extended_transport_type: bits(b, 51, 0, 3),
            primary: CmPath::parse(b, 52),
            alternate: CmPath::parse(b, 96),
            private_data: array(b, 140),
        }
    }

    pub(super) fn write(&self, b: &mut [u8]) {
        put_u32(b, 0, self.local_comm_id);
        put_u24(b, 5, self.vendor_id);
        put_u64(b, 8, self.service_id);
        put_u64(b, 16, self.local_ca_guid);
        put_u32(b, 28, self.local_qkey);
        put_u24(b, 32, self.local_qpn);
        b[35] = self.responder_resources;
        put_u24(b, 36, self.local_eecn);
        b[39] = self.initiator_depth;
        put_u24(b, 40, self.remote_eecn);
        b[43] = field(self.remote_cm_response_timeout, 3, 5)
            | field(self.transport_service_type, 1, 2)
            | field(u8::from(self.end_to_end_flow_control), 0, 1);
        put_u24(b, 44, self.starting_psn);
        b[47] = field(self.local_cm_response_timeout, 3, 5) | field(self.retry_count, 0, 3);
        put_u16(b, 48, self.pkey);
        b[50] = field(self.path_mtu, 4, 4)
            | field(u8::from(self.rdc_exists), 3, 1)
            | field(self.rnr_retry_count, 0, 3);
        b[51] = field(self.max_cm_retries, 4, 4)
            | field(u8::from(self.srq), 3, 1)
            | field(self.extended_transport_type, 0, 3);
        self.primary.write(b, 52);
        self.alternate.write(b, 96);
        b[140..].copy_from_slice(&self.private_data);
    }

    /// True if the alternate path is present (Linux tests its local LID).
    pub fn has_alternate_path(&self) -> bool {
        self.alternate.local_lid != 0
    }

    /// SAP supported (bit 2 of the alternate path's last byte).
    pub fn sap_supported(&self) -> bool {
        self.alternate.resv_ack & 0x4 != 0
    }
}
