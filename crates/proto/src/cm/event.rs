//! What the agent tells the application: events, errors, outcomes.
//!
//! ## Terminal events
//!
//! Every request the application makes ends in exactly one *terminal* event
//! for its endpoint (the simulation tests check this over many seeds):
//!
//! | request | terminal events |
//! |---|---|
//! | `connect` | [`RepReceived`](CmEvent::RepReceived), [`Rejected`](CmEvent::Rejected), [`ConnectTimeout`](CmEvent::ConnectTimeout), [`Unreachable`](CmEvent::Unreachable), [`DeviceRemoved`](CmEvent::DeviceRemoved) |
//! | `accept` | [`Established`](CmEvent::Established), [`Rejected`](CmEvent::Rejected), [`AcceptTimeout`](CmEvent::AcceptTimeout), [`DeviceRemoved`](CmEvent::DeviceRemoved) |
//! | `disconnect` | [`DisconnectDone`](CmEvent::DisconnectDone), [`DeviceRemoved`](CmEvent::DeviceRemoved) |
//! | `sidr_request` | [`SidrReply`](CmEvent::SidrReply), [`ConnectTimeout`](CmEvent::ConnectTimeout), [`Unreachable`](CmEvent::Unreachable), [`DeviceRemoved`](CmEvent::DeviceRemoved) |
//!
//! `complete_connect`, `sidr_reply`, `reject`, `notify_established` and `destroy` finish
//! when they return. The other events are notifications: a new connection
//! request, the peer's DREQ (ND's NotifyDisconnect), an MRA, a stale
//! connection, the end of time-wait (the QPN may be reused).

use super::ids::EndpointId;
use super::params::{PeerParams, QpSetup};
use super::state::CmState;
use ndverbs_wire::cma::CmaHeader;

/// A new connection request on a listener (the REQ has been validated).
///
/// # Example
///
/// ```
/// # use ndverbs_proto::cm::*;
/// # use ndverbs_proto::time::Instant;
/// # fn pump(now: Instant, x: &mut CmAgent, y: &mut CmAgent) {
/// #     loop {
/// #         let (xa, ya) = (x.config().local_addr, y.config().local_addr);
/// #         let mut quiet = true;
/// #         while let Some(t) = x.poll_transmit() { y.handle_mad(now, xa, &t.mad); quiet = false; }
/// #         while let Some(t) = y.poll_transmit() { x.handle_mad(now, ya, &t.mad); quiet = false; }
/// #         if quiet { break }
/// #     }
/// # }
/// # fn agents() -> (CmAgent, CmAgent) {
/// #     (CmAgent::new(CmConfig::new("10.0.0.1".parse().unwrap(), 0xa, 1)),
/// #      CmAgent::new(CmConfig::new("10.0.0.2".parse().unwrap(), 0xb, 2)))
/// # }
/// let (mut a, mut b) = agents();
/// let now = Instant::ZERO;
/// let sid = ndverbs_wire::cma::service_id(ndverbs_wire::cma::RDMA_PS_TCP, 7174);
/// let listener = b.listen(sid)?;
/// let mut p = ConnectParams::new(sid, b.config().local_addr, 0x11, 0x464b);
/// p.private_data = b"hi".to_vec();
/// a.connect(now, p)?;
/// pump(now, &mut a, &mut b);
/// let Some(CmEvent::ConnectRequest(req)) = b.poll_event() else { panic!() };
/// assert_eq!((req.listener, req.service_id), (listener, sid));
/// assert!(req.cma.is_some()); // an rdma_cm service ID: the header was parsed off
/// assert_eq!((req.peer.qpn, &req.peer.private_data[..2]), (0x11, &b"hi"[..]));
/// assert_eq!(b.state(req.endpoint), Some(CmState::ReqRcvd)); // now accept or reject it
/// # Ok::<(), CmError>(())
/// ```
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
    /// A SIDR_REQ (UD service ID resolution), not a REQ: answer it with
    /// [`sidr_reply`](super::CmAgent::sidr_reply) or `reject`; only the
    /// peer's address, request ID (`comm_id`) and private data are set.
    pub sidr: bool,
}

/// How the CM phase of a disconnect ended.
///
/// # Example
///
/// ```
/// # use ndverbs_proto::cm::*;
/// # use ndverbs_proto::time::Instant;
/// # fn pump(now: Instant, x: &mut CmAgent, y: &mut CmAgent) {
/// #     loop {
/// #         let (xa, ya) = (x.config().local_addr, y.config().local_addr);
/// #         let mut quiet = true;
/// #         while let Some(t) = x.poll_transmit() { y.handle_mad(now, xa, &t.mad); quiet = false; }
/// #         while let Some(t) = y.poll_transmit() { x.handle_mad(now, ya, &t.mad); quiet = false; }
/// #         if quiet { break }
/// #     }
/// # }
/// # fn agents() -> (CmAgent, CmAgent) {
/// #     (CmAgent::new(CmConfig::new("10.0.0.1".parse().unwrap(), 0xa, 1)),
/// #      CmAgent::new(CmConfig::new("10.0.0.2".parse().unwrap(), 0xb, 2)))
/// # }
/// # fn connected() -> (CmAgent, CmAgent, EndpointId, EndpointId) {
/// #     let now = Instant::ZERO;
/// #     let (mut a, mut b) = agents();
/// #     let sid = ndverbs_wire::cma::service_id(ndverbs_wire::cma::RDMA_PS_TCP, 7174);
/// #     b.listen(sid).unwrap();
/// #     let ea = a.connect(now, ConnectParams::new(sid, b.config().local_addr, 0x11, 1)).unwrap();
/// #     pump(now, &mut a, &mut b);
/// #     let Some(CmEvent::ConnectRequest(req)) = b.poll_event() else { panic!() };
/// #     b.accept(now, req.endpoint, AcceptParams::new(0x22, 2)).unwrap();
/// #     pump(now, &mut a, &mut b);
/// #     a.poll_event().unwrap();
/// #     a.complete_connect(now, ea, &[]).unwrap();
/// #     pump(now, &mut a, &mut b);
/// #     b.poll_event().unwrap();
/// #     (a, b, ea, req.endpoint)
/// # }
/// let (mut a, mut b, ea, eb) = connected();
/// let now = Instant::ZERO;
/// // A disconnects first; B's application answers after the DREQ arrived.
/// a.disconnect(now, ea)?;
/// pump(now, &mut a, &mut b);
/// assert_eq!(b.poll_event(), Some(CmEvent::DreqReceived { endpoint: eb }));
/// b.disconnect(now, eb)?;
/// pump(now, &mut a, &mut b);
/// assert_eq!(a.poll_event(), Some(CmEvent::DisconnectDone { endpoint: ea, how: DisconnectHow::DrepReceived }));
/// assert_eq!(b.poll_event(), Some(CmEvent::DisconnectDone { endpoint: eb, how: DisconnectHow::DrepSent }));
/// # Ok::<(), CmError>(())
/// ```
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
///
/// # Example
///
/// ```
/// # use ndverbs_proto::cm::*;
/// # use ndverbs_proto::time::Instant;
/// # fn pump(now: Instant, x: &mut CmAgent, y: &mut CmAgent) {
/// #     loop {
/// #         let (xa, ya) = (x.config().local_addr, y.config().local_addr);
/// #         let mut quiet = true;
/// #         while let Some(t) = x.poll_transmit() { y.handle_mad(now, xa, &t.mad); quiet = false; }
/// #         while let Some(t) = y.poll_transmit() { x.handle_mad(now, ya, &t.mad); quiet = false; }
/// #         if quiet { break }
/// #     }
/// # }
/// # fn agents() -> (CmAgent, CmAgent) {
/// #     (CmAgent::new(CmConfig::new("10.0.0.1".parse().unwrap(), 0xa, 1)),
/// #      CmAgent::new(CmConfig::new("10.0.0.2".parse().unwrap(), 0xb, 2)))
/// # }
/// # fn connected() -> (CmAgent, CmAgent, EndpointId, EndpointId) {
/// #     let now = Instant::ZERO;
/// #     let (mut a, mut b) = agents();
/// #     let sid = ndverbs_wire::cma::service_id(ndverbs_wire::cma::RDMA_PS_TCP, 7174);
/// #     b.listen(sid).unwrap();
/// #     let ea = a.connect(now, ConnectParams::new(sid, b.config().local_addr, 0x11, 1)).unwrap();
/// #     pump(now, &mut a, &mut b);
/// #     let Some(CmEvent::ConnectRequest(req)) = b.poll_event() else { panic!() };
/// #     b.accept(now, req.endpoint, AcceptParams::new(0x22, 2)).unwrap();
/// #     pump(now, &mut a, &mut b);
/// #     a.poll_event().unwrap();
/// #     a.complete_connect(now, ea, &[]).unwrap();
/// #     pump(now, &mut a, &mut b);
/// #     b.poll_event().unwrap();
/// #     (a, b, ea, req.endpoint)
/// # }
/// let (mut a, mut b, ea, eb) = connected();
/// let now = Instant::ZERO;
/// assert_eq!(a.disconnect(now, ea)?, DisconnectStarted::DreqSent);
/// pump(now, &mut a, &mut b);
/// // B got the DREQ first: its disconnect only answers it.
/// assert_eq!(b.disconnect(now, eb)?, DisconnectStarted::DrepSent);
/// # Ok::<(), CmError>(())
/// ```
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
///
/// # Example
///
/// ```
/// # use ndverbs_proto::cm::*;
/// # use ndverbs_proto::time::Instant;
/// # fn pump(now: Instant, x: &mut CmAgent, y: &mut CmAgent) {
/// #     loop {
/// #         let (xa, ya) = (x.config().local_addr, y.config().local_addr);
/// #         let mut quiet = true;
/// #         while let Some(t) = x.poll_transmit() { y.handle_mad(now, xa, &t.mad); quiet = false; }
/// #         while let Some(t) = y.poll_transmit() { x.handle_mad(now, ya, &t.mad); quiet = false; }
/// #         if quiet { break }
/// #     }
/// # }
/// # fn agents() -> (CmAgent, CmAgent) {
/// #     (CmAgent::new(CmConfig::new("10.0.0.1".parse().unwrap(), 0xa, 1)),
/// #      CmAgent::new(CmConfig::new("10.0.0.2".parse().unwrap(), 0xb, 2)))
/// # }
/// # fn connected() -> (CmAgent, CmAgent, EndpointId, EndpointId) {
/// #     let now = Instant::ZERO;
/// #     let (mut a, mut b) = agents();
/// #     let sid = ndverbs_wire::cma::service_id(ndverbs_wire::cma::RDMA_PS_TCP, 7174);
/// #     b.listen(sid).unwrap();
/// #     let ea = a.connect(now, ConnectParams::new(sid, b.config().local_addr, 0x11, 1)).unwrap();
/// #     pump(now, &mut a, &mut b);
/// #     let Some(CmEvent::ConnectRequest(req)) = b.poll_event() else { panic!() };
/// #     b.accept(now, req.endpoint, AcceptParams::new(0x22, 2)).unwrap();
/// #     pump(now, &mut a, &mut b);
/// #     a.poll_event().unwrap();
/// #     a.complete_connect(now, ea, &[]).unwrap();
/// #     pump(now, &mut a, &mut b);
/// #     b.poll_event().unwrap();
/// #     (a, b, ea, req.endpoint)
/// # }
/// let (mut a, mut b, ea, _eb) = connected();
/// let now = Instant::ZERO;
/// a.disconnect(now, ea)?;
/// pump(now, &mut a, &mut b);
/// // The application (or the engine for it) handles each event as it comes.
/// while let Some(ev) = b.poll_event() {
///     match ev {
///         CmEvent::DreqReceived { endpoint } => { b.disconnect(now, endpoint)?; }
///         CmEvent::DisconnectDone { endpoint, how } => println!("{endpoint}: {how:?}; QP to ERR"),
///         other => panic!("{other:?}"),
///     }
/// }
/// # Ok::<(), CmError>(())
/// ```
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
    /// Active, terminal for `connect`: the peer's host answered the REQ
    /// with ICMP port unreachable (reported by the engine through
    /// [`CmAgent::handle_unreachable`](super::CmAgent::handle_unreachable)):
    /// nothing listens on UDP 4791 there, so no retry would be answered. No
    /// REJ is sent. ND: `ND_CONNECTION_REFUSED`.
    Unreachable {
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
    /// SIDR: the SIDR_REP to our SIDR_REQ arrived (the endpoint is back in
    /// IDLE). `status` 0 means `qpn` and `qkey` name the service's UD QP;
    /// anything else is a refusal (see [`sidr_status`](super::sidr_status)).
    SidrReply {
        /// The endpoint.
        endpoint: EndpointId,
        /// The SIDR_REP's status.
        status: u8,
        /// The service's UD QP.
        qpn: u32,
        /// Its Q_Key.
        qkey: u32,
        /// The SIDR_REP's private data (136 bytes).
        private_data: Vec<u8>,
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
            | CmEvent::Unreachable { endpoint }
            | CmEvent::AcceptTimeout { endpoint }
            | CmEvent::MraReceived { endpoint, .. }
            | CmEvent::DreqReceived { endpoint }
            | CmEvent::DisconnectDone { endpoint, .. }
            | CmEvent::StaleConnection { endpoint }
            | CmEvent::TimewaitExit { endpoint, .. }
            | CmEvent::SidrReply { endpoint, .. }
            | CmEvent::DeviceRemoved { endpoint } => *endpoint,
        }
    }
}

/// Why an application call was refused (nothing was sent).
///
/// # Example
///
/// ```
/// # use ndverbs_proto::cm::*;
/// # use ndverbs_proto::time::Instant;
/// # fn pump(now: Instant, x: &mut CmAgent, y: &mut CmAgent) {
/// #     loop {
/// #         let (xa, ya) = (x.config().local_addr, y.config().local_addr);
/// #         let mut quiet = true;
/// #         while let Some(t) = x.poll_transmit() { y.handle_mad(now, xa, &t.mad); quiet = false; }
/// #         while let Some(t) = y.poll_transmit() { x.handle_mad(now, ya, &t.mad); quiet = false; }
/// #         if quiet { break }
/// #     }
/// # }
/// # fn agents() -> (CmAgent, CmAgent) {
/// #     (CmAgent::new(CmConfig::new("10.0.0.1".parse().unwrap(), 0xa, 1)),
/// #      CmAgent::new(CmConfig::new("10.0.0.2".parse().unwrap(), 0xb, 2)))
/// # }
/// let (mut a, _b) = agents();
/// let sid = 0x1234;
/// let ep = a.listen(sid)?;
/// assert_eq!(a.listen(sid), Err(CmError::ServiceIdBusy(sid)));
/// // A listener cannot be disconnected.
/// let err = a.disconnect(Instant::ZERO, ep).unwrap_err();
/// assert_eq!(err, CmError::InvalidState(CmState::Listen));
/// assert_eq!(err.to_string(), "not allowed in state LISTEN");
/// # Ok::<(), CmError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
