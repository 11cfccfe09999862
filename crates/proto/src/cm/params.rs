//! What the application hands in (connect/accept parameters) and what it gets
//! back (the peer's parameters, and the QP attributes they imply).
//!
//! ## Who uses which PSN
//!
//! Linux reads a REQ's or REP's *Starting PSN* as "the first PSN the sender's
//! QP expects to receive": the active QP's receive PSN is its own REQ value
//! and its send PSN the REP's, and the other way round on the passive side.
//! (rping's capture: REQ 0x00464b, REP 0x7d7d7f; the client's first SEND
//! carries 0x7d7d7f.) [`QpSetup`] spells the result out as `rq_psn`/`sq_psn`.
//!
//! ## Read limits
//!
//! *Responder resources* = RDMA READs/atomics a side accepts in flight
//! (its QP's `max_dest_rd_atomic`), *initiator depth* = those it issues
//! (`max_rd_atomic`). One side's initiator depth is useful only up to the
//! other's responder resources, so: the passive side answers
//! `min(own, peer's opposite)` in its REP (ND: "Accept clamps to the peer's
//! offer"), and the active side programs its QP with the same minimum of
//! what it offered and what the REP says.
//!
//! ## RNR and transport retries
//!
//! Both QPs use the REQ's RetryCount. The RNR retry count in each message is
//! applied by the *other* side: the passive QP retries RNR NAKs REQ.RNRRetryCount
//! times, the active QP REP.RNRRetryCount times (Linux `cm.c`).

use crate::cm::config::{cm_ack_timeout, CmConfig};
use std::net::IpAddr;

/// What `connect` needs: one RC QP's numbers and the connection's options.
///
/// # Example
///
/// ```
/// use ndverbs_proto::cm::ConnectParams;
/// use ndverbs_wire::cma;
/// // rdma_cm's service ID for TCP port 7174; our QP 0x11 expects PSN 0x464b first.
/// let mut p = ConnectParams::new(cma::service_id(cma::RDMA_PS_TCP, 7174), "10.0.0.2".parse().unwrap(), 0x11, 0x464b);
/// p.responder_resources = 4; // let the peer have 4 READs in flight against us
/// p.initiator_depth = 4;
/// p.private_data = b"hello".to_vec();
/// assert_eq!((p.path_mtu, p.retry_count), (3, 7)); // MTU 1024, 7 retries
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// Service ID to connect to (rdma_cm: [`ndverbs_wire::cma::service_id`]).
    pub service_id: u64,
    /// The passive side's address.
    pub remote_addr: IpAddr,
    /// rdma_cm source port (the connector's bound port); goes in the rdma_cm
    /// header and derives the flow label.
    pub local_port: u16,
    /// Our QP number (24 bits).
    pub local_qpn: u32,
    /// The first PSN our QP expects to receive (24 bits, random).
    pub starting_psn: u32,
    /// RDMA READs/atomics we accept in flight (ND inbound read limit).
    pub responder_resources: u8,
    /// RDMA READs/atomics we issue in flight (ND outbound read limit).
    pub initiator_depth: u8,
    /// Transport retry count for both QPs (≤ 7).
    pub retry_count: u8,
    /// RNR retries the passive QP makes against us (≤ 7; 7 = infinite).
    pub rnr_retry_count: u8,
    /// Path MTU enum (1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// Application private data: ≤ 56 bytes for rdma_cm service IDs (the
    /// 36-byte rdma_cm header goes first), else ≤ 92.
    pub private_data: Vec<u8>,
}

impl ConnectParams {
    /// rping-like defaults: 1/1 read limits, retries 7/7, MTU 1024, no data.
    pub fn new(service_id: u64, remote_addr: IpAddr, local_qpn: u32, starting_psn: u32) -> Self {
        ConnectParams {
            service_id,
            remote_addr,
            local_port: 0xc000,
            local_qpn,
            starting_psn,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: 3,
            srq: false,
            private_data: Vec::new(),
        }
    }
}

/// What `accept` needs.
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
/// b.listen(0x1234)?;
/// a.connect(now, ConnectParams::new(0x1234, b.config().local_addr, 0x11, 1))?;
/// pump(now, &mut a, &mut b);
/// let Some(CmEvent::ConnectRequest(req)) = b.poll_event() else { panic!() };
/// let mut p = AcceptParams::new(0x22, 0x7777);
/// p.responder_resources = 16; // clamped to what the peer asked for
/// let qp = b.accept(now, req.endpoint, p)?;
/// assert_eq!((qp.dest_qpn, qp.rq_psn, qp.max_dest_rd_atomic), (0x11, 0x7777, 1));
/// # Ok::<(), CmError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    /// Our QP number (24 bits).
    pub local_qpn: u32,
    /// The first PSN our QP expects to receive (24 bits, random).
    pub starting_psn: u32,
    /// Inbound read limit; clamped to the peer's initiator depth.
    pub responder_resources: u8,
    /// Outbound read limit; clamped to the peer's responder resources.
    pub initiator_depth: u8,
    /// RNR retries the active QP makes against us (≤ 7).
    pub rnr_retry_count: u8,
    /// Our QP uses an SRQ.
    pub srq: bool,
    /// Private data for the REP (≤ 196 bytes).
    pub private_data: Vec<u8>,
}

impl AcceptParams {
    /// Defaults: 1/1 read limits, RNR retry 7, no data.
    pub fn new(local_qpn: u32, starting_psn: u32) -> Self {
        AcceptParams {
            local_qpn,
            starting_psn,
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            srq: false,
            private_data: Vec::new(),
        }
    }
}

/// What the peer said about itself in its REQ or REP.
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
/// b.listen(0x1234)?;
/// let ea = a.connect(now, ConnectParams::new(0x1234, b.config().local_addr, 0x11, 1))?;
/// pump(now, &mut a, &mut b);
/// let Some(CmEvent::ConnectRequest(req)) = b.poll_event() else { panic!() };
/// let eb = req.endpoint;
/// b.accept(now, eb, AcceptParams::new(0x22, 2))?;
/// pump(now, &mut a, &mut b);
/// // Each side now knows the other: QPN, first PSN, address.
/// let (peer_of_a, peer_of_b) = (a.peer(ea).unwrap(), b.peer(eb).unwrap());
/// assert_eq!((peer_of_a.qpn, peer_of_a.starting_psn), (0x22, 2));
/// assert_eq!((peer_of_b.qpn, peer_of_b.addr), (0x11, a.config().local_addr));
/// # Ok::<(), CmError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerParams {
    /// Where its MADs come from (and ours go).
    pub addr: IpAddr,
    /// Its CA GUID.
    pub ca_guid: u64,
    /// Its comm ID.
    pub comm_id: u32,
    /// Its QP number.
    pub qpn: u32,
    /// The first PSN its QP expects (our send PSN).
    pub starting_psn: u32,
    /// Its responder resources as sent.
    pub responder_resources: u8,
    /// Its initiator depth as sent.
    pub initiator_depth: u8,
    /// Transport retry count (REQ; for a REP the REQ's value).
    pub retry_count: u8,
    /// RNR retry count as sent (applies to *our* QP).
    pub rnr_retry_count: u8,
    /// Path MTU enum (REQ; for a REP ours).
    pub path_mtu: u8,
    /// It uses an SRQ.
    pub srq: bool,
    /// Private data: the whole area of the message, minus the rdma_cm header
    /// for an rdma_cm REQ (so 56 bytes for a REQ, 196 for a REP).
    pub private_data: Vec<u8>,
}

/// The QP attributes a connection implies (what Linux `ib_cm_init_qp_attr`
/// returns for RTR and RTS): the engine moves the QP INIT→RTR→RTS with them.
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
/// b.listen(0x1234)?;
/// a.connect(now, ConnectParams::new(0x1234, b.config().local_addr, 0x11, 0x100))?;
/// pump(now, &mut a, &mut b);
/// let Some(CmEvent::ConnectRequest(req)) = b.poll_event() else { panic!() };
/// // What B's QP must be moved to RTR/RTS with before the REP goes out.
/// let s = b.accept_qp_setup(req.endpoint, &AcceptParams::new(0x22, 0x200))?;
/// assert_eq!(s.remote_addr, a.config().local_addr);
/// assert_eq!((s.dest_qpn, s.rq_psn, s.sq_psn), (0x11, 0x200, 0x100));
/// assert_eq!(s.path_mtu, 3); // 1024
/// # Ok::<(), CmError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpSetup {
    /// Peer address (the RC packets' destination).
    pub remote_addr: IpAddr,
    /// Peer QPN (`dest_qp_num`).
    pub dest_qpn: u32,
    /// First PSN we expect (`rq_psn`) — our own starting PSN.
    pub rq_psn: u32,
    /// First PSN we send (`sq_psn`) — the peer's starting PSN.
    pub sq_psn: u32,
    /// Path MTU enum.
    pub path_mtu: u8,
    /// `max_rd_atomic` (negotiated initiator depth).
    pub max_rd_atomic: u8,
    /// `max_dest_rd_atomic` (negotiated responder resources).
    pub max_dest_rd_atomic: u8,
    /// `retry_cnt`.
    pub retry_cnt: u8,
    /// `rnr_retry`.
    pub rnr_retry: u8,
    /// `min_rnr_timer` (Linux's CM leaves 0 = 655 ms).
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent (`timeout`).
    pub timeout: u8,
    /// Flow label (seeds the RC UDP source port).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// The path part of a connection, as the REQ describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PathInfo {
    pub path_mtu: u8,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// Active side: QP attributes from our REQ and the peer's REP.
pub(crate) fn active_qp_setup(
    cfg: &CmConfig,
    c: &ConnectParams,
    path: &PathInfo,
    peer: &PeerParams,
    target_ack_delay: u8,
) -> QpSetup {
    QpSetup {
        remote_addr: peer.addr,
        dest_qpn: peer.qpn,
        rq_psn: c.starting_psn,
        sq_psn: peer.starting_psn,
        path_mtu: c.path_mtu,
        max_rd_atomic: c.initiator_depth.min(peer.responder_resources),
        max_dest_rd_atomic: c.responder_resources.min(peer.initiator_depth),
        retry_cnt: c.retry_count.min(7),
        rnr_retry: peer.rnr_retry_count,
        min_rnr_timer: 0,
        timeout: cm_ack_timeout(target_ack_delay, cfg.packet_life_time),
        flow_label: path.flow_label,
        hop_limit: path.hop_limit,
        traffic_class: path.traffic_class,
    }
}

/// Passive side: QP attributes from the peer's REQ and our accept.
pub(crate) fn passive_qp_setup(
    peer: &PeerParams,
    path: &PathInfo,
    local_ack_timeout: u8,
    a: &AcceptParams,
) -> QpSetup {
    QpSetup {
        remote_addr: peer.addr,
        dest_qpn: peer.qpn,
        rq_psn: a.starting_psn,
        sq_psn: peer.starting_psn,
        path_mtu: path.path_mtu,
        max_rd_atomic: a.initiator_depth.min(peer.responder_resources),
        max_dest_rd_atomic: a.responder_resources.min(peer.initiator_depth),
        retry_cnt: peer.retry_count,
        rnr_retry: peer.rnr_retry_count,
        min_rnr_timer: 0,
        timeout: local_ack_timeout.max(1),
        flow_label: path.flow_label,
        hop_limit: path.hop_limit,
        traffic_class: path.traffic_class,
    }
}
