//! One endpoint's record: everything the CM remembers about a listener or a
//! connection. Plain data; the rules live in `agent.rs` and `recv.rs`.

use super::event::DisconnectHow;
use super::ids::EndpointId;
use super::params::{ConnectParams, PathInfo, PeerParams};
use super::state::CmState;
use ndverbs_wire::mad::MAD_LEN;
use std::net::{IpAddr, Ipv4Addr};

/// The one message an endpoint retransmits until it is answered: a REQ, a
/// REP or a DREQ (Linux: the MAD layer's retries of `cm_id_priv->msg`). The
/// copy is byte-for-byte the first send, TID included.
#[derive(Debug, Clone)]
pub(crate) struct Retransmit {
    pub dst: IpAddr,
    pub mad: Box<[u8; MAD_LEN]>,
    pub retries_left: u8,
    pub interval_ms: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub id: EndpointId,
    pub state: CmState,
    /// The application destroyed it; it lingers only through time-wait.
    pub destroyed: bool,
    /// Our comm ID (0 for a listener).
    pub local_comm_id: u32,
    /// The peer's comm ID; 0 until its REP (active) — Linux matches "REP
    /// for an endpoint that has no remote ID yet" on exactly that.
    pub remote_comm_id: u32,
    pub remote_addr: IpAddr,
    pub service_id: u64,
    /// The TID echoed by our REP/RTU/MRA/REJ, replaced by a received DREQ's
    /// for the DREP.
    pub tid: u64,
    pub local_qpn: u32,
    pub remote_qpn: u32,
    pub remote_ca_guid: u64,
    /// Passive: the listener the REQ arrived on.
    pub listener: Option<EndpointId>,
    /// The connection's CM timeout (ms): REQ interval (active) or
    /// conv(REQ.LocalCMResponseTimeout) (passive); DREQs reuse it.
    pub timeout_ms: u64,
    /// Retries of REQ/REP/DREQ.
    pub max_cm_retries: u8,
    /// Linux `av.timeout`: time-wait and the MRA extension use conv() of it.
    pub av_timeout: u8,
    /// QP local ACK timeout (passive: from the REQ).
    pub local_ack_timeout: u8,
    pub retransmit: Option<Retransmit>,
    /// Entered in the agent's remote-ID and remote-QPN tables.
    pub in_tables: bool,
    /// An application `disconnect` waits for DisconnectDone.
    pub disconnect_pending: bool,
    /// The application called `disconnect` once (a second call is refused).
    pub disconnect_requested: bool,
    /// How the DREQ exchange ended, once it has.
    pub ended_by: Option<DisconnectHow>,
    /// The peer's DREQ arrived.
    pub dreq_received: bool,
    /// Active: what we asked for.
    pub connect: Option<Box<ConnectParams>>,
    /// What the peer said (REQ or REP).
    pub peer: Option<Box<PeerParams>>,
    pub path: PathInfo,
    /// RTU private data, re-sent with the RTU on a duplicate REP.
    pub rtu_private_data: Vec<u8>,
}

impl Endpoint {
    pub(crate) fn new(id: EndpointId, state: CmState) -> Self {
        Endpoint {
            id,
            state,
            destroyed: false,
            local_comm_id: 0,
            remote_comm_id: 0,
            remote_addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            service_id: 0,
            tid: 0,
            local_qpn: 0,
            remote_qpn: 0,
            remote_ca_guid: 0,
            listener: None,
            timeout_ms: 0,
            max_cm_retries: 0,
            av_timeout: 0,
            local_ack_timeout: 0,
            retransmit: None,
            in_tables: false,
            disconnect_pending: false,
            disconnect_requested: false,
            ended_by: None,
            dreq_received: false,
            connect: None,
            peer: None,
            path: PathInfo::default(),
            rtu_private_data: Vec::new(),
        }
    }
}
