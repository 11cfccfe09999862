//! The rest of connection set-up: MRA (wait longer), REJ (refused), REP
//! (the passive side's answer to a REQ) and RTU (ready to use), whose
//! layout DREP shares ([`IdsAndData`]).

use super::fields::{array, bit, bits, comm_ids, field, put_comm_ids};
use super::pdata;
use crate::be::{put_u16, put_u24, put_u32, put_u64, u16_at, u24_at, u32_at, u64_at};

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
    /// Which message is acknowledged ([`msg_ref`](super::msg_ref)).
    pub message_mraed: u8,
    /// Service timeout exponent (5 bits).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; pdata::MRA],
}

impl Mra {
    pub(super) fn parse(b: &[u8]) -> Self {
        let (local_comm_id, remote_comm_id) = comm_ids(b);
        Mra {
            local_comm_id,
            remote_comm_id,
            message_mraed: bits(b, 8, 6, 2),
            service_timeout: bits(b, 9, 3, 5),
            private_data: array(b, 10),
        }
    }

    pub(super) fn write(&self, b: &mut [u8]) {
        put_comm_ids(b, self.local_comm_id, self.remote_comm_id);
        b[8] = field(self.message_mraed, 6, 2);
        b[9] = field(self.service_timeout, 3, 5);
        b[10..].copy_from_slice(&self.private_data);
    }
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
    /// Which message is rejected ([`msg_ref`](super::msg_ref)).
    pub message_rejected: u8,
    /// Bytes of ARI that are meaningful (7 bits).
    pub rejected_info_length: u8,
    /// Reason ([`rej_reason`](super::rej_reason)).
    pub reason: u16,
    /// Additional rejection information.
    pub ari: [u8; 72],
    /// Private data.
    pub private_data: [u8; pdata::REJ],
}

impl Rej {
    pub(super) fn parse(b: &[u8]) -> Self {
        let (local_comm_id, remote_comm_id) = comm_ids(b);
        Rej {
            local_comm_id,
            remote_comm_id,
            message_rejected: bits(b, 8, 6, 2),
            rejected_info_length: bits(b, 9, 1, 7),
            reason: u16_at(b, 10),
            ari: array(b, 12),
            private_data: array(b, 84),
        }
    }

    pub(super) fn write(&self, b: &mut [u8]) {
        put_comm_ids(b, self.local_comm_id, self.remote_comm_id);
        b[8] = field(self.message_rejected, 6, 2);
        b[9] = field(self.rejected_info_length, 1, 7);
        put_u16(b, 10, self.reason);
        b[12..84].copy_from_slice(&self.ari);
        b[84..].copy_from_slice(&self.private_data);
    }
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

impl Rep {
    pub(super) fn parse(b: &[u8]) -> Self {
        let (local_comm_id, remote_comm_id) = comm_ids(b);
        Rep {
            local_comm_id,
            remote_comm_id,
            local_qkey: u32_at(b, 8),
            local_qpn: u24_at(b, 12),
            local_eecn: u24_at(b, 16),
            starting_psn: u24_at(b, 20),
            // The vendor ID is spread over the bytes after the three 24-bit fields.
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
        }
    }

    pub(super) fn write(&self, b: &mut [u8]) {
        put_comm_ids(b, self.local_comm_id, self.remote_comm_id);
        put_u32(b, 8, self.local_qkey);
        put_u24(b, 12, self.local_qpn);
        b[15] = (self.vendor_id >> 16) as u8;
        put_u24(b, 16, self.local_eecn);
        b[19] = (self.vendor_id >> 8) as u8;
        put_u24(b, 20, self.starting_psn);
        b[23] = self.vendor_id as u8;
        b[24] = self.responder_resources;
        b[25] = self.initiator_depth;
        b[26] = field(self.target_ack_delay, 3, 5)
            | field(self.failover_accepted, 1, 2)
            | field(u8::from(self.end_to_end_flow_control), 0, 1);
        b[27] = field(self.rnr_retry_count, 5, 3) | field(u8::from(self.srq), 4, 1);
        put_u64(b, 28, self.local_ca_guid);
        b[36..].copy_from_slice(&self.private_data);
    }
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
pub type Rtu = IdsAndData;

/// The layout RTU and DREP share: the sender's and the receiver's
/// communication IDs, then private data to the end of the MAD. The attribute
/// ID alone tells the two apart, so both are this one type: [`Rtu`] ends
/// connection set-up, [`Drep`](super::Drep) ends teardown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdsAndData {
    /// Sender's communication ID.
    pub local_comm_id: u32,
    /// Receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; pdata::RTU],
}

// One type serves both messages only while their private data areas agree.
const _: () = assert!(pdata::RTU == pdata::DREP);

impl IdsAndData {
    pub(super) fn parse(b: &[u8]) -> Self {
        let (local_comm_id, remote_comm_id) = comm_ids(b);
        IdsAndData {
            local_comm_id,
            remote_comm_id,
            private_data: array(b, 8),
        }
    }

    pub(super) fn write(&self, b: &mut [u8]) {
        put_comm_ids(b, self.local_comm_id, self.remote_comm_id);
        b[8..].copy_from_slice(&self.private_data);
    }
}
