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

use crate::be::{put_u16, put_u24, put_u32, put_u64, u16_at, u24_at, u32_at, u64_at};
use crate::error::WireError;
use crate::mad::{Mad, MadHeader, MAD_DATA_LEN, MAD_HEADER_LEN, MAD_LEN, MGMT_CLASS_CM};
use std::net::Ipv6Addr;

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

#[inline]
fn bits(b: &[u8], byte: usize, shift: u8, width: u8) -> u8 {
    (b[byte] >> shift) & ((1u16 << width) - 1) as u8
}

#[inline]
fn bit(b: &[u8], byte: usize, shift: u8) -> bool {
    b[byte] >> shift & 1 != 0
}

#[inline]
fn field(v: u8, shift: u8, width: u8) -> u8 {
    (v & ((1u16 << width) - 1) as u8) << shift
}

fn gid(b: &[u8], off: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    Ipv6Addr::from(a)
}

fn array<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[off..off + N]);
    a
}

/// Copies `data` into a zero-filled private data area, or fails if it does not fit.
pub fn private_data<const N: usize>(msg: &'static str, data: &[u8]) -> Result<[u8; N], WireError> {
    if data.len() > N {
        return Err(WireError::PrivateDataTooLong {
            msg,
            len: data.len(),
            max: N,
        });
    }
    let mut a = [0u8; N];
    a[..data.len()].copy_from_slice(data);
    Ok(a)
}

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

    fn parse(b: &[u8], o: usize) -> Self {
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

    fn write(&self, b: &mut [u8], o: usize) {
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
    fn parse(b: &[u8]) -> Self {
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

    fn write(&self, b: &mut [u8]) {
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

/// Message receipt acknowledgement: "I got it, wait longer".
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, private_data, CmMessage, Mra};
/// use ndverbs_wire::mad::Mad;
/// use ndverbs_wire::cm::msg_ref;
/// // "Got your REQ, the application is thinking: wait longer" (service timeout 24, over a minute).
/// let m = Mra { local_comm_id: 2, remote_comm_id: 1, message_mraed: msg_ref::REQ,
///     service_timeout: 24, private_data: [0; 222] };
/// // Into a 256-byte MAD and back.
/// let mad = CmMessage::Mra(m).to_mad(0x2_0000_0001);
/// let back = CmMessage::parse(&Mad::parse(&mad)?)?;
/// assert_eq!(back, CmMessage::Mra(m));
/// assert_eq!(back.remote_comm_id(), Some(1));
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mra {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID (0 when MRAing a REQ whose sender we don't know yet).
    pub remote_comm_id: u32,
    /// Which message is acknowledged ([`msg_ref`]).
    pub message_mraed: u8,
    /// Service timeout exponent (5 bits).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; pdata::MRA],
}

/// Reject.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, private_data, CmMessage, Rej};
/// use ndverbs_wire::mad::Mad;
/// use ndverbs_wire::cm::{msg_ref, rej_reason};
/// use ndverbs_wire::mad::MAD_DATA_LEN;
/// let CmMessage::Rej(mut m) = CmMessage::parse_data(attr::REJ, &[0; MAD_DATA_LEN])? else { unreachable!() };
/// // The application said no to a REQ, with a reason of its own.
/// m.local_comm_id = 2;
/// m.remote_comm_id = 1;
/// m.message_rejected = msg_ref::REQ;
/// m.reason = rej_reason::CONSUMER_DEFINED;
/// m.private_data = private_data("REJ", b"busy")?;
/// // Into a 256-byte MAD and back.
/// let mad = CmMessage::Rej(m).to_mad(0x2_0000_0001);
/// let back = CmMessage::parse(&Mad::parse(&mad)?)?;
/// assert_eq!(back, CmMessage::Rej(m));
/// assert!(back.private_data().starts_with(b"busy"));
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rej {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID.
    pub remote_comm_id: u32,
    /// Which message is rejected ([`msg_ref`]).
    pub message_rejected: u8,
    /// Bytes of ARI that are meaningful (7 bits).
    pub rejected_info_length: u8,
    /// Reason ([`rej_reason`]).
    pub reason: u16,
    /// Additional rejection information.
    pub ari: [u8; 72],
    /// Private data.
    pub private_data: [u8; pdata::REJ],
}

/// Connect reply.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, private_data, CmMessage, Rep};
/// use ndverbs_wire::mad::Mad;
/// use ndverbs_wire::mad::MAD_DATA_LEN;
/// let CmMessage::Rep(mut m) = CmMessage::parse_data(attr::REP, &[0; MAD_DATA_LEN])? else { unreachable!() };
/// // The passive side's answer: its QPN and first PSN, the READ limits it grants.
/// m.local_comm_id = 2;
/// m.remote_comm_id = 1;
/// m.local_qpn = 0x22;
/// m.starting_psn = 0x7d_7d7f;
/// m.responder_resources = 4;
/// m.initiator_depth = 4;
/// m.rnr_retry_count = 7;
/// // Into a 256-byte MAD and back.
/// let mad = CmMessage::Rep(m).to_mad(0x2_0000_0001);
/// let back = CmMessage::parse(&Mad::parse(&mad)?)?;
/// assert_eq!(back, CmMessage::Rep(m));
/// assert_eq!(back.attr_id(), attr::REP);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rep {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID (the REQ's local one).
    pub remote_comm_id: u32,
    /// Q_Key.
    pub local_qkey: u32,
    /// Sender's QPN (24 bits).
    pub local_qpn: u32,
    /// Local EECN (24 bits).
    pub local_eecn: u32,
    /// Sender's starting PSN (24 bits).
    pub starting_psn: u32,
    /// ECE vendor ID (24 bits, spread over three bytes).
    pub vendor_id: u32,
    /// Responder resources.
    pub responder_resources: u8,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// Sender uses an SRQ.
    pub srq: bool,
    /// Sender's CA GUID.
    pub local_ca_guid: u64,
    /// Private data.
    pub private_data: [u8; pdata::REP],
}

/// Ready to use.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, private_data, CmMessage, Rtu};
/// use ndverbs_wire::mad::Mad;
/// // The active side's "ready to use": both QPs are in RTS.
/// let m = Rtu { local_comm_id: 1, remote_comm_id: 2, private_data: private_data("RTU", b"")? };
/// // Into a 256-byte MAD and back.
/// let mad = CmMessage::Rtu(m).to_mad(0x2_0000_0001);
/// let back = CmMessage::parse(&Mad::parse(&mad)?)?;
/// assert_eq!(back, CmMessage::Rtu(m));
/// assert_eq!(back.name(), "RTU");
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rtu {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; pdata::RTU],
}

/// Disconnect request.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, private_data, CmMessage, Dreq};
/// use ndverbs_wire::mad::Mad;
/// // Names the receiver's QPN: Linux drops a DREQ for another QP.
/// let m = Dreq { local_comm_id: 1, remote_comm_id: 2, remote_qpn: 0x22, private_data: [0; 220] };
/// // Into a 256-byte MAD and back.
/// let mad = CmMessage::Dreq(m).to_mad(0x2_0000_0001);
/// let back = CmMessage::parse(&Mad::parse(&mad)?)?;
/// assert_eq!(back, CmMessage::Dreq(m));
/// assert_eq!(back.local_comm_id(), 1);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dreq {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QPN (24 bits): Linux drops a DREQ whose QPN is not its own.
    pub remote_qpn: u32,
    /// Private data.
    pub private_data: [u8; pdata::DREQ],
}

/// Disconnect reply.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, private_data, CmMessage, Drep};
/// use ndverbs_wire::mad::Mad;
/// let m = Drep { local_comm_id: 2, remote_comm_id: 1, private_data: private_data("DREP", b"bye")? };
/// // Into a 256-byte MAD and back.
/// let mad = CmMessage::Drep(m).to_mad(0x2_0000_0001);
/// let back = CmMessage::parse(&Mad::parse(&mad)?)?;
/// assert_eq!(back, CmMessage::Drep(m));
/// assert!(back.private_data().starts_with(b"bye"));
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Drep {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; pdata::DREP],
}

/// Service ID resolution request.
///
/// # Example
///
/// ```
/// use ndverbs_wire::cm::{attr, private_data, CmMessage, SidrReq};
/// use ndverbs_wire::mad::Mad;
/// // Which UD QP serves this service ID? (parsed, not used by ndverbs' CM)
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
            attr::MRA => CmMessage::Mra(Mra {
                local_comm_id: u32_at(b, 0),
                remote_comm_id: u32_at(b, 4),
                message_mraed: bits(b, 8, 6, 2),
                service_timeout: bits(b, 9, 3, 5),
                private_data: array(b, 10),
            }),
            attr::REJ => CmMessage::Rej(Rej {
                local_comm_id: u32_at(b, 0),
                remote_comm_id: u32_at(b, 4),
                message_rejected: bits(b, 8, 6, 2),
                rejected_info_length: bits(b, 9, 1, 7),
                reason: u16_at(b, 10),
                ari: array(b, 12),
                private_data: array(b, 84),
            }),
            attr::REP => CmMessage::Rep(Rep {
                local_comm_id: u32_at(b, 0),
                remote_comm_id: u32_at(b, 4),
                local_qkey: u32_at(b, 8),
                local_qpn: u24_at(b, 12),
                local_eecn: u24_at(b, 16),
                starting_psn: u24_at(b, 20),
                vendor_id: (u32::from(b[15]) << 16) | (u32::from(b[19]) << 8) | u32::from(b[23]),
                responder_resources: b[24],
                initiator_depth: b[25],
                target_ack_delay: bits(b, 26, 3, 5),
                failover_accepted: bits(b, 26, 1, 2),
                end_to_end_flow_control: bit(b, 26, 0),
                rnr_retry_count: bits(b, 27, 5, 3),
                srq: bit(b, 27, 4),
                local_ca_guid: u64_at(b, 28),
                private_data: array(b, 36),
            }),
            attr::RTU => CmMessage::Rtu(Rtu {
                local_comm_id: u32_at(b, 0),
                remote_comm_id: u32_at(b, 4),
                private_data: array(b, 8),
            }),
            attr::DREQ => CmMessage::Dreq(Dreq {
                local_comm_id: u32_at(b, 0),
                remote_comm_id: u32_at(b, 4),
                remote_qpn: u24_at(b, 8),
                private_data: array(b, 12),
            }),
            attr::DREP => CmMessage::Drep(Drep {
                local_comm_id: u32_at(b, 0),
                remote_comm_id: u32_at(b, 4),
                private_data: array(b, 8),
            }),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReq {
                request_id: u32_at(b, 0),
                pkey: u16_at(b, 4),
                service_id: u64_at(b, 8),
                private_data: array(b, 16),
            }),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRep {
                request_id: u32_at(b, 0),
                status: b[4],
                add_info_len: b[5],
                vendor_id: (u32::from(u16_at(b, 6)) << 8) | u32::from(b[11]),
                qpn: u24_at(b, 8),
                service_id: u64_at(b, 12),
                qkey: u32_at(b, 20),
                add_info: array(b, 24),
                private_data: array(b, 96),
            }),
            other => return Err(WireError::UnknownCmAttribute(other)),
        })
    }

    /// Writes the 232 data bytes (reserved bits zero).
    pub fn write_data(&self, b: &mut [u8; MAD_DATA_LEN]) {
        b.fill(0);
        match self {
            CmMessage::Req(m) => m.write(b),
            CmMessage::Mra(m) => {
                put_u32(b, 0, m.local_comm_id);
                put_u32(b, 4, m.remote_comm_id);
                b[8] = field(m.message_mraed, 6, 2);
                b[9] = field(m.service_timeout, 3, 5);
                b[10..].copy_from_slice(&m.private_data);
            }
            CmMessage::Rej(m) => {
                put_u32(b, 0, m.local_comm_id);
                put_u32(b, 4, m.remote_comm_id);
                b[8] = field(m.message_rejected, 6, 2);
                b[9] = field(m.rejected_info_length, 1, 7);
                put_u16(b, 10, m.reason);
                b[12..84].copy_from_slice(&m.ari);
                b[84..].copy_from_slice(&m.private_data);
            }
            CmMessage::Rep(m) => {
                put_u32(b, 0, m.local_comm_id);
                put_u32(b, 4, m.remote_comm_id);
                put_u32(b, 8, m.local_qkey);
                put_u24(b, 12, m.local_qpn);
                b[15] = (m.vendor_id >> 16) as u8;
                put_u24(b, 16, m.local_eecn);
                b[19] = (m.vendor_id >> 8) as u8;
                put_u24(b, 20, m.starting_psn);
                b[23] = m.vendor_id as u8;
                b[24] = m.responder_resources;
                b[25] = m.initiator_depth;
                b[26] = field(m.target_ack_delay, 3, 5)
                    | field(m.failover_accepted, 1, 2)
                    | field(u8::from(m.end_to_end_flow_control), 0, 1);
                b[27] = field(m.rnr_retry_count, 5, 3) | field(u8::from(m.srq), 4, 1);
                put_u64(b, 28, m.local_ca_guid);
                b[36..].copy_from_slice(&m.private_data);
            }
            CmMessage::Rtu(m) => {
                put_u32(b, 0, m.local_comm_id);
                put_u32(b, 4, m.remote_comm_id);
                b[8..].copy_from_slice(&m.private_data);
            }
            CmMessage::Dreq(m) => {
                put_u32(b, 0, m.local_comm_id);
                put_u32(b, 4, m.remote_comm_id);
                put_u24(b, 8, m.remote_qpn);
                b[12..].copy_from_slice(&m.private_data);
            }
            CmMessage::Drep(m) => {
                put_u32(b, 0, m.local_comm_id);
                put_u32(b, 4, m.remote_comm_id);
                b[8..].copy_from_slice(&m.private_data);
            }
            CmMessage::SidrReq(m) => {
                put_u32(b, 0, m.request_id);
                put_u16(b, 4, m.pkey);
                put_u64(b, 8, m.service_id);
                b[16..].copy_from_slice(&m.private_data);
            }
            CmMessage::SidrRep(m) => {
                put_u32(b, 0, m.request_id);
                b[4] = m.status;
                b[5] = m.add_info_len;
                put_u16(b, 6, (m.vendor_id >> 8) as u16);
                put_u24(b, 8, m.qpn);
                b[11] = m.vendor_id as u8;
                put_u64(b, 12, m.service_id);
                put_u32(b, 20, m.qkey);
                b[24..96].copy_from_slice(&m.add_info);
                b[96..].copy_from_slice(&m.private_data);
            }
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
        match self {
            CmMessage::Req(_) => "REQ",
            CmMessage::Mra(_) => "MRA",
            CmMessage::Rej(_) => "REJ",
            CmMessage::Rep(_) => "REP",
            CmMessage::Rtu(_) => "RTU",
            CmMessage::Dreq(_) => "DREQ",
            CmMessage::Drep(_) => "DREP",
            CmMessage::SidrReq(_) => "SIDR_REQ",
            CmMessage::SidrRep(_) => "SIDR_REP",
        }
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
