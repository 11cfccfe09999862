//! What the agent tells the application: events, errors, outcomes.
//!
//! ## Terminal events
//!
//! Every request the application makes ends in exactly one *terminal* event
//! for its endpoint (the simulation tests check this over many seeds):
//!
//! | request | terminal events |
//! |---|---|
//! | `connect` | [`RepReceived`](CmEvent::RepReceived), [`Rejected`](CmEvent::Rejected), [`ConnectTimeout`](CmEvent::ConnectTimeout), [`DeviceRemoved`](CmEvent::DeviceRemoved) |
//! | `accept` | [`Established`](CmEvent::Established), [`Rejected`](CmEvent::Rejected), [`AcceptTimeout`](CmEvent::AcceptTimeout), [`DeviceRemoved`](CmEvent::DeviceRemoved) |
//! | `disconnect` | [`DisconnectDone`](CmEvent::DisconnectDone), [`DeviceRemoved`](CmEvent::DeviceRemoved) |
//!
//! `complete_connect`, `reject`, `notify_established` and `destroy` finish
//! when they return. The other events are notifications: a new connection
//! request, the peer's DREQ (ND's NotifyDisconnect), an MRA, a stale
//! connection, the end of time-wait (the QPN may be reused).

use super::ids::EndpointId;
use super::params::{PeerParams, QpSetup};
use super::state::CmState;
use ndverbs_wire::cma::CmaHeader;

/// A new connection request on a listener (the REQ has been validated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The listener it arrived on.
    pub listener: EndpointId,
    /// The new endpoint, in REQ_RCVD: `accept` or `reject` it.
    pub endpoint: EndpointId,
    /// The REQ's service ID.
    pub service_id: u64,
    /// The rdma_cm header, for rdma_cm service IDs.
    pub cma: Option<CmaHeader>,
    /// The peer's parameters and private data (after the rdma_cm header).
    pub peer: PeerParams,
}

/// How the CM phase of a disconnect ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DisconnectHow {
    /// Our DREQ was answered with a DREP.
    DrepReceived,
    /// Our DREQ went unanswered through every retry (ND: `ND_TIMEOUT`).
    DreqTimedOut,
    /// The peer had sent a DREQ (before or crossing ours); we sent the DREP.
    DrepSent,
    /// The peer answered our DREQ with a REJ.
    RejReceived,
}

/// What `disconnect` sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DisconnectStarted {
    /// A DREQ; [`CmEvent::DisconnectDone`] follows on DREP or timeout.
    DreqSent,
    /// A DREP (the peer's DREQ had arrived); `DisconnectDone { DrepSent }`
    /// is already queued.
    DrepSent,
    /// Nothing: the connection had already ended without a disconnect
    /// request of ours (stale connection, or the peer's REJ);
    /// `DisconnectDone` is queued with how it ended.
    AlreadyDone,
}

/// An event for the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// Passive: a REQ for a listener.
    ConnectRequest(Box<ConnectRequest>),
    /// Active, terminal for `connect`: the REP arrived. Move the QP to RTR
    /// and RTS with `qp`, then call `complete_connect` (or `reject`).
    RepReceived {
        /// The endpoint.
        endpoint: EndpointId,
        /// The peer's parameters and REP private data.
        peer: Box<PeerParams>,
        /// The QP attributes to apply.
        qp: QpSetup,
    },
    /// Passive, terminal for `accept`: the RTU (or the peer's DREQ, or
    /// `notify_established`) showed the peer is connected.
    Established {
        /// The endpoint.
        endpoint: EndpointId,
    },
    /// The peer sent a REJ (terminal for a pending `connect` or `accept`).
    /// Also reported for a REJ that ends an established connection.
    Rejected {
        /// The endpoint.
        endpoint: EndpointId,
        /// REJ reason ([`ndverbs_wire::cm::rej_reason`]).
        reason: u16,
        /// REJ private data (148 bytes).
        private_data: Vec<u8>,
        /// Additional rejection information (its declared length).
        ari: Vec<u8>,
    },
    /// Active, terminal for `connect`: REQ retries exhausted (Linux
    /// `IB_CM_REQ_ERROR`; no REJ is sent). ND: `ND_TIMEOUT`.
    ConnectTimeout {
        /// The endpoint (back in IDLE).
        endpoint: EndpointId,
    },
    /// Passive, terminal for `accept`: REP retries exhausted (Linux
    /// `IB_CM_REP_ERROR`). ND: `ND_IO_TIMEOUT`.
    AcceptTimeout {
        /// The endpoint (back in IDLE).
        endpoint: EndpointId,
    },
    /// The peer's MRA extended our REQ or REP timeout.
    MraReceived {
        /// The endpoint.
        endpoint: EndpointId,
        /// The MRA's service timeout exponent.
        service_timeout: u8,
    },
    /// The peer's DREQ arrived (ND NotifyDisconnect completes). Nothing is
    /// flushed and no DREP is sent until `disconnect` — unless a
    /// `disconnect` of ours was pending (crossing DREQs), in which case the
    /// DREP goes out at once and `DisconnectDone { DrepSent }` follows.
    DreqReceived {
        /// The endpoint.
        endpoint: EndpointId,
    },
    /// Terminal for `disconnect`: the CM phase is over; the engine moves the
    /// QP to ERR now.
    DisconnectDone {
        /// The endpoint (in TIMEWAIT).
        endpoint: EndpointId,
        /// How it ended.
        how: DisconnectHow,
    },
    /// The peer reused this connection's QP for a new connection: we sent
    /// REJ(stale) to the new one and a DREQ on this one (Linux does the same).
    /// NotifyDisconnect may complete; `disconnect` completes when that DREQ
    /// is answered.
    StaleConnection {
        /// The endpoint (in DREQ_SENT).
        endpoint: EndpointId,
    },
    /// Time-wait ended: `local_qpn` may be reused. Reported even for an
    /// endpoint already destroyed (it is gone afterwards).
    TimewaitExit {
        /// The endpoint (IDLE, or gone if destroyed).
        endpoint: EndpointId,
        /// The QPN the connection used.
        local_qpn: u32,
    },
    /// The device went away: the endpoint's last event; every pending
    /// request fails with `ND_DEVICE_REMOVED`.
    DeviceRemoved {
        /// The endpoint.
        endpoint: EndpointId,
    },
}

impl CmEvent {
    /// The endpoint the event is about.
    pub fn endpoint(&self) -> EndpointId {
        match self {
            CmEvent::ConnectRequest(r) => r.endpoint,
            CmEvent::RepReceived { endpoint, .. }
            | CmEvent::Established { endpoint }
            | CmEvent::Rejected { endpoint, .. }
            | CmEvent::ConnectTimeout { endpoint }
            | CmEvent::AcceptTimeout { endpoint }
            | CmEvent::MraReceived { endpoint, .. }
            | CmEvent::DreqReceived { endpoint }
            | CmEvent::DisconnectDone { endpoint, .. }
            | CmEvent::StaleConnection { endpoint }
            | CmEvent::TimewaitExit { endpoint, .. }
            | CmEvent::DeviceRemoved { endpoint } => *endpoint,
        }
    }
}

/// Why an application call was refused (nothing was sent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// No such endpoint (never existed, or destroyed).
    #[error("unknown CM endpoint")]
    UnknownEndpoint,
    /// The call does not apply in the endpoint's state.
    #[error("not allowed in state {0}")]
    InvalidState(CmState),
    /// `remove_device` was called.
    #[error("device removed")]
    DeviceRemoved,
    /// Private data longer than the message carries.
    #[error("private data of {len} bytes, at most {max} fit")]
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// Bytes that fit.
        max: usize,
    },
    /// Somebody already listens on this service ID.
    #[error("service ID {0:#x} already has a listener")]
    ServiceIdBusy(u64),
    /// A parameter is out of range.
    #[error("invalid parameter: {0}")]
    InvalidParameter(&'static str),
}
