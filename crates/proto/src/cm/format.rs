//! Building CM messages from an endpoint, field for field as Linux's
//! `cm_format_*` functions do. Each returns the message and the TID it
//! travels with.
//!
//! Comm IDs in REJ depend on the state it is sent from (`cm_format_rej`):
//! rejecting a REQ we have not answered yet (REQ_RCVD) names no local comm
//! ID (0) and "REQ" as the rejected message; after an MRA it names ours; an
//! active side rejecting a REP names "REP"; anything else "other". The
//! receiver matches accordingly (see `recv.rs`).

use super::config::CmConfig;
use super::endpoint::Endpoint;
use super::ids::form_tid;
use super::params::AcceptParams;
use super::state::CmState;
use ndverbs_wire::cm::{msg_ref, pdata, private_data, CmMessage, Drep, Dreq, Mra, Rej, Rep, Rtu};

/// Copies `data` into a zero-filled area of `N` bytes (callers check length).
fn area<const N: usize>(msg: &'static str, data: &[u8]) -> [u8; N] {
    private_data::<N>(msg, data).unwrap_or([0u8; N])
}

pub(crate) fn rej(
    ep: &Endpoint,
    state: CmState,
    reason: u16,
    ari: &[u8],
    pd: &[u8],
) -> (CmMessage, u64) {
    let (local, rejected) = match state {
        CmState::ReqRcvd => (0, msg_ref::REQ),
        CmState::MraReqSent => (ep.local_comm_id, msg_ref::REQ),
        CmState::RepRcvd | CmState::MraRepSent => (ep.local_comm_id, msg_ref::REP),
        _ => (ep.local_comm_id, msg_ref::OTHER),
    };
    let mut a = [0u8; 72];
    let n = ari.len().min(72);
    a[..n].copy_from_slice(&ari[..n]);
    let m = Rej {
        local_comm_id: local,
        remote_comm_id: ep.remote_comm_id,
        message_rejected: rejected,
        rejected_info_length: n as u8,
        reason,
        ari: a,
        private_data: area::<{ pdata::REJ }>("REJ", pd),
    };
    (CmMessage::Rej(m), ep.tid)
}

/// REJ for a message that matched no endpoint (`cm_issue_rej`): comm IDs
/// swapped from the received message, its TID echoed.
pub(crate) fn issue_rej(local: u32, remote: u32, reason: u16, rejected: u8) -> CmMessage {
    CmMessage::Rej(Rej {
        local_comm_id: local,
        remote_comm_id: remote,
        message_rejected: rejected,
        rejected_info_length: 0,
        reason,
        ari: [0; 72],
        private_data: [0; pdata::REJ],
    })
}

pub(crate) fn rep(
    cfg: &CmConfig,
    ep: &Endpoint,
    a: &AcceptParams,
    responder_resources: u8,
    initiator_depth: u8,
) -> (CmMessage, u64) {
    let m = Rep {
        local_comm_id: ep.local_comm_id,
        remote_comm_id: ep.remote_comm_id,
        local_qkey: 0,
        local_qpn: a.local_qpn,
        local_eecn: 0,
        starting_psn: a.starting_psn & 0xff_ffff,
        vendor_id: 0,
        responder_resources,
        initiator_depth,
        target_ack_delay: cfg.ca_ack_delay,
        failover_accepted: 0,
        end_to_end_flow_control: false,
        rnr_retry_count: a.rnr_retry_count.min(7),
        srq: a.srq,
        local_ca_guid: cfg.ca_guid,
        private_data: area::<{ pdata::REP }>("REP", &a.private_data),
    };
    (CmMessage::Rep(m), ep.tid)
}

pub(crate) fn rtu(ep: &Endpoint) -> (CmMessage, u64) {
    let m = Rtu {
        local_comm_id: ep.local_comm_id,
        remote_comm_id: ep.remote_comm_id,
        private_data: area::<{ pdata::RTU }>("RTU", &ep.rtu_private_data),
    };
    (CmMessage::Rtu(m), ep.tid)
}

pub(crate) fn mra(ep: &Endpoint, mraed: u8, service_timeout: u8) -> (CmMessage, u64) {
    let m = Mra {
        local_comm_id: ep.local_comm_id,
        remote_comm_id: ep.remote_comm_id,
        message_mraed: mraed,
        service_timeout,
        private_data: [0; pdata::MRA],
    };
    (CmMessage::Mra(m), ep.tid)
}

/// DREQ: a new transaction, so a TID of our own (`cm_form_tid`).
pub(crate) fn dreq(cfg: &CmConfig, ep: &Endpoint) -> (CmMessage, u64) {
    let m = Dreq {
        local_comm_id: ep.local_comm_id,
        remote_comm_id: ep.remote_comm_id,
        remote_qpn: ep.remote_qpn,
        private_data: [0; pdata::DREQ],
    };
    (CmMessage::Dreq(m), form_tid(cfg.hi_tid, ep.local_comm_id))
}

/// DREP answering the DREQ whose TID is `tid`.
pub(crate) fn drep(local: u32, remote: u32, tid: u64) -> (CmMessage, u64) {
    let m = Drep {
        local_comm_id: local,
        remote_comm_id: remote,
        private_data: [0; pdata::DREP],
    };
    (CmMessage::Drep(m), tid)
}
