//! [`CmAgent`]: the endpoint table, the application-side calls, timers and
//! outputs. Received MADs are handled in `recv.rs`.

use super::config::{cm_convert_to_ms, CmConfig};
use super::endpoint::{Endpoint, Retransmit};
use super::event::{CmError, CmEvent, DisconnectHow, DisconnectStarted};
use super::format;
use super::ids::{form_tid, CommIdAllocator, EndpointId};
use super::outbox::{Outbox, Transmit};
use super::params::{passive_qp_setup, AcceptParams, ConnectParams, PathInfo, PeerParams, QpSetup};
use super::rdma_cm;
use super::state::CmState;
use super::CmCounters;
use crate::time::{Duration, Instant};
use ndverbs_wire::cm::{pdata, rej_reason, CmMessage, CmPath, Req};
use ndverbs_wire::cma::gid_of;
use ndverbs_wire::mad::MAD_LEN;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// The connection manager of one adapter (one GID): every listener and
/// connection, the tables that match incoming MADs to them, and the timers.
/// See the [module documentation](super) for how to drive it.
///
/// # Example
///
/// ```
/// use ndverbs_proto::cm::*;
/// use ndverbs_proto::time::Instant;
/// use ndverbs_wire::cm::rej_reason;
/// let now = Instant::ZERO;
/// let (a_ip, b_ip) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
/// let mut a = CmAgent::new(CmConfig::new(a_ip, 0xa, 1));
/// let mut b = CmAgent::new(CmConfig::new(b_ip, 0xb, 2));
/// // A connects to a service nobody listens on at B.
/// let ea = a.connect(now, ConnectParams::new(0x1234, b_ip, 0x11, 1))?;
/// assert_eq!(a.state(ea), Some(CmState::ReqSent));
/// assert!(a.poll_timeout().is_some()); // the REQ is retransmitted until answered
/// // The engine carries each MAD from QP1 to the peer's QP1.
/// let req = a.poll_transmit().unwrap();
/// assert_eq!(req.dst, b_ip);
/// b.handle_mad(now, a_ip, &req.mad);
/// let rej = b.poll_transmit().unwrap();
/// a.handle_mad(now, b_ip, &rej.mad);
/// let Some(CmEvent::Rejected { endpoint, reason, .. }) = a.poll_event() else { panic!() };
/// assert_eq!((endpoint, reason), (ea, rej_reason::INVALID_SERVICE_ID));
/// assert_eq!(a.state(ea), Some(CmState::Idle));
/// # Ok::<(), CmError>(())
/// ```
#[derive(Debug, Clone)]
pub struct CmAgent {
    pub(crate) cfg: CmConfig,
    pub(crate) endpoints: BTreeMap<EndpointId, Endpoint>,
    /// Local comm ID → endpoint (connections, also in time-wait).
    pub(crate) by_comm_id: HashMap<u32, EndpointId>,
    /// Service ID → listener.
    pub(crate) listeners: HashMap<u64, EndpointId>,
    /// (remote comm ID, remote CA GUID) → endpoint: duplicate REQ/REP
    /// detection and REJ(timeout) matching. Left at time-wait / idle.
    pub(crate) remote_ids: HashMap<(u32, u64), EndpointId>,
    /// (remote QPN, remote CA GUID) → endpoint: stale connection detection.
    pub(crate) remote_qpns: HashMap<(u32, u64), EndpointId>,
    /// (source address, request ID) → SIDR request waiting for the
    /// application: duplicate SIDR_REQ detection (`sidr.rs`).
    pub(crate) remote_sidr: HashMap<(IpAddr, u32), EndpointId>,
    pub(crate) timers: super::timers::Timers,
    pub(crate) out: Outbox,
    comm_ids: CommIdAllocator,
    next_id: u64,
    pub(crate) removed: bool,
}

impl CmAgent {
    /// An agent with no endpoints.
    pub fn new(cfg: CmConfig) -> Self {
        CmAgent {
            comm_ids: CommIdAllocator::new(cfg.seed),
            cfg,
            endpoints: BTreeMap::new(),
            by_comm_id: HashMap::new(),
            listeners: HashMap::new(),
            remote_ids: HashMap::new(),
            remote_qpns: HashMap::new(),
            remote_sidr: HashMap::new(),
            timers: Default::default(),
            out: Outbox::default(),
            next_id: 1,
            removed: false,
        }
    }

    // ---- getters -------------------------------------------------------

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    /// Counters.
    pub fn counters(&self) -> &CmCounters {
        &self.out.counters
    }

    /// True after [`remove_device`](Self::remove_device).
    pub fn is_removed(&self) -> bool {
        self.removed
    }

    pub(crate) fn live(&self, id: EndpointId) -> Result<&Endpoint, CmError> {
        if self.removed {
            return Err(CmError::DeviceRemoved);
        }
        match self.endpoints.get(&id) {
            Some(ep) if !ep.destroyed => Ok(ep),
            _ => Err(CmError::UnknownEndpoint),
        }
    }

    /// An endpoint's state (`None`: unknown or destroyed).
    pub fn state(&self, id: EndpointId) -> Option<CmState> {
        self.live(id).ok().map(|ep| ep.state)
    }

    /// An endpoint's local communication ID (0 for a listener).
    pub fn local_comm_id(&self, id: EndpointId) -> Option<u32> {
        self.live(id).ok().map(|ep| ep.local_comm_id)
    }

    /// What the peer sent in its REQ or REP (private data included).
    pub fn peer(&self, id: EndpointId) -> Option<&PeerParams> {
        self.live(id).ok().and_then(|ep| ep.peer.as_deref())
    }

    /// True once the peer's DREQ has arrived (ND NotifyDisconnect may
    /// complete at once).
    pub fn dreq_received(&self, id: EndpointId) -> bool {
        self.live(id).is_ok_and(|ep| ep.dreq_received)
    }

    /// Endpoints held, destroyed ones still in time-wait included.
    pub fn endpoint_count(&self) -> usize {
        self.endpoints.len()
    }

    // ---- outputs -------------------------------------------------------

    /// Whether a MAD or an event waits to be polled: the engine's fast
    /// check on a step that brought the CM nothing.
    pub fn has_output(&self) -> bool {
        !self.out.tx.is_empty() || !self.out.events.is_empty()
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.tx.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.out.events.pop_front()
    }

    // ---- application calls ---------------------------------------------

    pub(crate) fn new_endpoint(&mut self, state: CmState) -> Endpoint {
        let id = EndpointId(self.next_id);
        self.next_id += 1;
        Endpoint::new(id, state)
    }

    pub(crate) fn alloc_comm_id(&mut self) -> u32 {
        let used = &self.by_comm_id;
        match self.cfg.comm_id_slot {
            None => self.comm_ids.next(|c| used.contains_key(&c)),
            // The permutation's low 24 bits under the slot byte: no longer a
            // permutation, so a value may repeat before 2^24 connections;
            // `used` still keeps live IDs apart.
            Some(slot) => {
                let tag = |c: u32| (u32::from(slot) << 24) | (c & 0x00ff_ffff);
                tag(self
                    .comm_ids
                    .next(|c| tag(c) == 0 || used.contains_key(&tag(c))))
            }
        }
    }

    /// Listens on `service_id`; REQs for it become
    /// [`CmEvent::ConnectRequest`]s. REQs for service IDs nobody listens on
    /// are refused with REJ 8.
    pub fn listen(&mut self, service_id: u64) -> Result<EndpointId, CmError> {
        if self.removed {
            return Err(CmError::DeviceRemoved);
        }
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::ServiceIdBusy(service_id));
        }
        let mut ep = self.new_endpoint(CmState::Listen);
        ep.service_id = service_id;
        let id = ep.id;
        self.endpoints.insert(id, ep);
        self.listeners.insert(service_id, id);
        Ok(id)
    }

    /// Sends a REQ (Linux `cm_format_req` + rdma_cm's RoCE path) and
    /// retransmits it until REP, REJ or
    /// [`ConnectTimeout`](CmEvent::ConnectTimeout).
    pub fn connect(&mut self, now: Instant, p: ConnectParams) -> Result<EndpointId, CmError> {
        if self.removed {
            return Err(CmError::DeviceRemoved);
        }
        let cma = rdma_cm::uses_cma_header(p.service_id);
        let max = rdma_cm::max_req_private_data(p.service_id);
        check_private_data(&p.private_data, max)?;
        if p.local_qpn > 0xff_ffff || p.local_qpn < 2 {
            return Err(CmError::InvalidParameter("local_qpn"));
        }
        if !(1..=5).contains(&p.path_mtu) {
            return Err(CmError::InvalidParameter("path_mtu"));
        }
        if cma && p.remote_addr.is_ipv4() != self.cfg.local_addr.is_ipv4() {
            return Err(CmError::InvalidParameter("address family"));
        }
        let comm = self.alloc_comm_id();
        let mut ep = self.new_endpoint(CmState::ReqSent);
        let cfg = &self.cfg;
        let flow_label = if cma {
            rdma_cm::flow_label(p.local_port, p.service_id as u16)
        } else {
            0
        };
        let routed = cfg.hop_limit > 1;
        let lid = if routed { 0xffff } else { 0 };
        let req = Req {
            local_comm_id: comm,
            vendor_id: 0,
            service_id: p.service_id,
            local_ca_guid: cfg.ca_guid,
            local_qkey: 0,
            local_qpn: p.local_qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: cfg.cm_response_timeout,
            transport_service_type: 0,
            end_to_end_flow_control: false,
            starting_psn: p.starting_psn & 0xff_ffff,
            local_cm_response_timeout: cfg.cm_response_timeout,
            retry_count: p.retry_count.min(7),
            pkey: 0xffff,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count.min(7),
            max_cm_retries: cfg.max_cm_retries.min(15),
            srq: p.srq,
            extended_transport_type: 0,
            primary: CmPath {
                local_lid: lid,
                remote_lid: lid,
                local_gid: gid_of(cfg.local_addr),
                remote_gid: gid_of(p.remote_addr),
                flow_label,
                hop_limit: cfg.hop_limit,
                subnet_local: !routed,
                local_ack_timeout: cfg.local_ack_timeout(),
                ..CmPath::NONE
            },
            alternate: CmPath::NONE,
            private_data: rdma_cm::req_private_data(
                p.service_id,
                cfg.local_addr,
                p.local_port,
                p.remote_addr,
                &p.private_data,
            ),
        };
        let tid = form_tid(cfg.hi_tid, comm);
        ep.local_comm_id = comm;
        ep.remote_addr = p.remote_addr;
        ep.service_id = p.service_id;
        ep.tid = tid;
        ep.local_qpn = p.local_qpn;
        ep.timeout_ms = cfg.req_interval_ms();
        ep.max_cm_retries = req.max_cm_retries;
        ep.av_timeout = cfg.packet_life_time + 1;
        ep.local_ack_timeout = req.primary.local_ack_timeout;
        ep.path = PathInfo {
            path_mtu: p.path_mtu,
            flow_label,
            hop_limit: cfg.hop_limit,
            traffic_class: 0,
        };
        ep.connect = Some(Box::new(p));
        let id = ep.id;
        let (dst, interval, retries) = (ep.remote_addr, ep.timeout_ms, ep.max_cm_retries);
        self.endpoints.insert(id, ep);
        self.by_comm_id.insert(comm, id);
        self.send_retransmitted(now, id, dst, &CmMessage::Req(req), tid, interval, retries);
        Ok(id)
    }

    fn accept_checks(
        &self,
        id: EndpointId,
        a: &AcceptParams,
    ) -> Result<(QpSetup, u8, u8), CmError> {
        let ep = self.live(id)?;
        if !matches!(ep.state, CmState::ReqRcvd | CmState::MraReqSent) {
            return Err(CmError::InvalidState(ep.state));
        }
        check_private_data(&a.private_data, pdata::REP)?;
        if a.local_qpn > 0xff_ffff || a.local_qpn < 2 {
            return Err(CmError::InvalidParameter("local_qpn"));
        }
        let peer = ep.peer.as_deref().ok_or(CmError::InvalidState(ep.state))?;
        let qp = passive_qp_setup(peer, &ep.path, ep.local_ack_timeout, a);
        Ok((qp, qp.max_dest_rd_atomic, qp.max_rd_atomic))
    }

    /// The QP attributes an [`accept`](Self::accept) with `a` would imply,
    /// without sending anything: ND's Accept moves the QP to RTR/RTS first
    /// and sends the REP only if that worked.
    pub fn accept_qp_setup(&self, id: EndpointId, a: &AcceptParams) -> Result<QpSetup, CmError> {
        self.accept_checks(id, a).map(|(qp, _, _)| qp)
    }

    /// The QP attributes a connection request implies before it is
    /// accepted, with our QP starting at `starting_psn`: the read limits
    /// are the peer's offer (its initiator depth is our responder
    /// resources, its responder resources our initiator depth), as Linux's
    /// CM reports them for a request not yet answered.
    pub fn request_qp_setup(&self, id: EndpointId, starting_psn: u32) -> Result<QpSetup, CmError> {
        let mut a = AcceptParams::new(2, starting_psn);
        a.responder_resources = u8::MAX;
        a.initiator_depth = u8::MAX;
        self.accept_qp_setup(id, &a)
    }

    /// Passive: sends the REP (read limits clamped to the peer's offer) and
    /// retransmits it until RTU ([`Established`](CmEvent::Established)),
    /// REJ or [`AcceptTimeout`](CmEvent::AcceptTimeout).
    pub fn accept(
        &mut self,
        now: Instant,
        id: EndpointId,
        a: AcceptParams,
    ) -> Result<QpSetup, CmError> {
        let (qp, rr, depth) = self.accept_checks(id, &a)?;
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return Err(CmError::UnknownEndpoint);
        };
        let (msg, tid) = format::rep(&self.cfg, ep, &a, rr, depth);
        ep.local_qpn = a.local_qpn;
        ep.state = CmState::RepSent;
        let (dst, interval, retries) = (ep.remote_addr, ep.timeout_ms, ep.max_cm_retries);
        self.send_retransmitted(now, id, dst, &msg, tid, interval, retries);
        Ok(qp)
    }

    /// Active: sends the RTU once the application has moved its QP to RTS
    /// (after [`RepReceived`](CmEvent::RepReceived)). Done when it returns.
    pub fn complete_connect(
        &mut self,
        _now: Instant,
        id: EndpointId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let ep = self.live(id)?;
        if !matches!(ep.state, CmState::RepRcvd | CmState::MraRepSent) {
            return Err(CmError::InvalidState(ep.state));
        }
        check_private_data(private_data, pdata::RTU)?;
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return Err(CmError::UnknownEndpoint);
        };
        ep.rtu_private_data = private_data.to_vec();
        ep.state = CmState::Established;
        let (msg, tid) = format::rtu(ep);
        self.out.send(ep.remote_addr, &msg, tid);
        Ok(())
    }

    /// Refuses a connection before it is established: REJ 28 (consumer
    /// defined) with ≤ 148 bytes of private data. Passive before or after
    /// `accept`, active after the REP. Done when it returns.
    pub fn reject(
        &mut self,
        now: Instant,
        id: EndpointId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let ep = self.live(id)?;
        if ep.state == CmState::SidrReqRcvd {
            // rdma_reject on a UD id: SIDR_REP with IB_SIDR_REJECT.
            return self.sidr_reply(
                id,
                super::sidr::SidrAnswer {
                    status: super::sidr::sidr_status::REJECT,
                    qpn: 0,
                    qkey: 0,
                    private_data: private_data.to_vec(),
                },
            );
        }
        match ep.state {
            CmState::ReqRcvd
            | CmState::MraReqSent
            | CmState::RepRcvd
            | CmState::MraRepSent
            | CmState::RepSent
            | CmState::MraRepRcvd => {}
            s => return Err(CmError::InvalidState(s)),
        }
        check_private_data(private_data, pdata::REJ)?;
        self.send_rej(now, id, rej_reason::CONSUMER_DEFINED, &[], private_data);
        Ok(())
    }

    /// Passive: the QP received its first packet before the RTU (verbs'
    /// COMM_EST): the connection is established without waiting for the RTU.
    pub fn notify_established(&mut self, id: EndpointId) -> Result<(), CmError> {
        let ep = self.live(id)?;
        if !matches!(ep.state, CmState::RepSent | CmState::MraRepRcvd) {
            return Err(CmError::InvalidState(ep.state));
        }
        self.establish(id);
        Ok(())
    }

    /// Disconnects (ND rules D1–D3): a DREQ from ESTABLISHED, or the DREP if
    /// the peer's DREQ already arrived. The CM phase ends with
    /// [`DisconnectDone`](CmEvent::DisconnectDone).
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: EndpointId,
    ) -> Result<DisconnectStarted, CmError> {
        let ep = self.live(id)?;
        let (state, requested, ended_by) = (ep.state, ep.disconnect_requested, ep.ended_by);
        match state {
            CmState::Established => {
                self.send_dreq(now, id, true);
                self.set_requested(id, true);
                Ok(DisconnectStarted::DreqSent)
            }
            CmState::DreqRcvd => {
                self.set_requested(id, true);
                self.send_drep_and_wait(now, id);
                self.disconnect_done(id, DisconnectHow::DrepSent);
                Ok(DisconnectStarted::DrepSent)
            }
            // A DREQ of ours is out, but the application did not send it
            // (stale connection): take it over.
            CmState::DreqSent if !requested => {
                self.set_requested(id, true);
                Ok(DisconnectStarted::DreqSent)
            }
            CmState::Timewait if !requested && ended_by.is_some() => {
                self.set_requested(id, false);
                let how = ended_by.unwrap_or(DisconnectHow::DrepReceived);
                self.out
                    .event(CmEvent::DisconnectDone { endpoint: id, how });
                Ok(DisconnectStarted::AlreadyDone)
            }
            s => Err(CmError::InvalidState(s)),
        }
    }

    fn set_requested(&mut self, id: EndpointId, pending: bool) {
        if let Some(ep) = self.endpoints.get_mut(&id) {
            ep.disconnect_requested = true;
            ep.disconnect_pending = pending;
        }
    }

    /// Releases an endpoint the way Linux `cm_destroy_id` does: REQ_SENT →
    /// REJ(timeout, ARI = our GUID); REQ_RCVD / REP_* → REJ 28; ESTABLISHED →
    /// one DREQ and time-wait; DREQ_SENT → time-wait; DREQ_RCVD → DREP and
    /// time-wait. A connection in time-wait stays (invisibly) until it ends,
    /// so its comm ID and QPN are not reused early; [`CmEvent::TimewaitExit`]
    /// still reports the end. Events already queued stay queued; a request
    /// still pending on the endpoint (connect, accept, disconnect) gets no
    /// terminal event — the caller completes it (ND: `ND_CANCELED`).
    pub fn destroy(&mut self, now: Instant, id: EndpointId) -> Result<(), CmError> {
        let state = self.live(id)?.state;
        match state {
            CmState::Listen => {
                if let Some(ep) = self.endpoints.get(&id) {
                    self.listeners.remove(&ep.service_id);
                }
            }
            CmState::ReqSent | CmState::MraReqRcvd => {
                let guid = self.cfg.ca_guid.to_be_bytes();
                self.send_rej(now, id, rej_reason::TIMEOUT, &guid, &[]);
            }
            CmState::ReqRcvd
            | CmState::MraReqSent
            | CmState::RepRcvd
            | CmState::MraRepSent
            | CmState::RepSent
            | CmState::MraRepRcvd => {
                self.send_rej(now, id, rej_reason::CONSUMER_DEFINED, &[], &[]);
            }
            CmState::Established => {
                // cm_issue_dreq: one DREQ, no retransmission.
                if let Some(ep) = self.endpoints.get(&id) {
                    let (msg, tid) = format::dreq(&self.cfg, ep);
                    self.out.send(ep.remote_addr, &msg, tid);
                }
                self.enter_timewait(now, id);
            }
            CmState::DreqSent => self.enter_timewait(now, id),
            CmState::DreqRcvd => self.send_drep_and_wait(now, id),
            // cm_destroy_id: a SIDR request left unanswered is refused; our
            // own SIDR_REQ just stops.
            CmState::SidrReqRcvd => self.send_sidr_rep(
                id,
                &super::sidr::SidrAnswer {
                    status: super::sidr::sidr_status::REJECT,
                    qpn: 0,
                    qkey: 0,
                    private_data: Vec::new(),
                },
            ),
            CmState::SidrReqSent | CmState::Timewait | CmState::Idle => {}
        }
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return Ok(());
        };
        ep.destroyed = true;
        ep.disconnect_pending = false;
        if ep.state != CmState::Timewait {
            self.free(id);
        }
        Ok(())
    }

    /// The device is gone: every endpoint gets one
    /// [`DeviceRemoved`](CmEvent::DeviceRemoved) (its last event), queued
    /// MADs are dropped, timers stop, and nothing is ever sent again; every
    /// later call fails with [`CmError::DeviceRemoved`].
    pub fn remove_device(&mut self) {
        if self.removed {
            return;
        }
        self.removed = true;
        for (&id, ep) in &self.endpoints {
            if !ep.destroyed {
                self.out.event(CmEvent::DeviceRemoved { endpoint: id });
            }
        }
        self.endpoints.clear();
        self.by_comm_id.clear();
        self.listeners.clear();
        self.remote_ids.clear();
        self.remote_qpns.clear();
        self.remote_sidr.clear();
        self.timers.clear();
        self.out.tx.clear();
    }

    // ---- timers --------------------------------------------------------

    /// Runs every deadline that is due: retransmissions, retries running
    /// out, time-wait ends.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(id) = self.timers.pop_expired(now) {
            let Some(ep) = self.endpoints.get_mut(&id) else {
                continue;
            };
            if ep.state == CmState::Timewait {
                ep.state = CmState::Idle;
                let (qpn, destroyed) = (ep.local_qpn, ep.destroyed);
                self.out.event(CmEvent::TimewaitExit {
                    endpoint: id,
                    local_qpn: qpn,
                });
                if destroyed {
                    self.free(id);
                }
                continue;
            }
            let Some(rt) = ep.retransmit.as_mut() else {
                continue;
            };
            if rt.retries_left > 0 {
                rt.retries_left -= 1;
                let (dst, mad, interval) = (rt.dst, *rt.mad, rt.interval_ms);
                self.out.push(dst, mad);
                self.out.counters.tx_retries += 1;
                self.timers.set(id, now + Duration::from_millis(interval));
                continue;
            }
            ep.retransmit = None;
            match ep.state {
                CmState::SidrReqSent => {
                    // Linux IB_CM_SIDR_REQ_ERROR: back to IDLE.
                    self.reset_to_idle(id);
                    self.out.event(CmEvent::ConnectTimeout { endpoint: id });
                }
                CmState::ReqSent | CmState::MraReqRcvd => {
                    // Linux IB_CM_REQ_ERROR: back to IDLE, no REJ.
                    self.reset_to_idle(id);
                    self.out.event(CmEvent::ConnectTimeout { endpoint: id });
                }
                CmState::RepSent | CmState::MraRepRcvd => {
                    self.reset_to_idle(id);
                    self.out.event(CmEvent::AcceptTimeout { endpoint: id });
                }
                CmState::DreqSent => {
                    self.enter_timewait(now, id);
                    self.disconnect_done(id, DisconnectHow::DreqTimedOut);
                }
                _ => {}
            }
        }
    }

    /// The network says `peer` has no endpoint: its host answered a packet
    /// we sent to its UDP port 4791 with ICMP port unreachable (the engine
    /// learns this from its socket's error queue). Every connect still
    /// waiting for the REP from that address (REQ_SENT, or MRA_REQ_RCVD:
    /// whoever sent the MRA has gone since) ends at once, back in IDLE
    /// without a REJ, with [`CmEvent::Unreachable`] instead of retransmitting
    /// its REQ until [`ConnectTimeout`](CmEvent::ConnectTimeout). Returns
    /// how many connects ended.
    ///
    /// Nothing else reacts: a passive side or an established connection
    /// keeps its own timers (a REP or DREQ may still be answered by a peer
    /// that restarts), as Linux's CM, which never sees ICMP, does.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::cm::*;
    /// use ndverbs_proto::time::Instant;
    /// let (a_ip, b_ip) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    /// let mut a = CmAgent::new(CmConfig::new(a_ip, 0xa, 1));
    /// let ep = a.connect(Instant::ZERO, ConnectParams::new(0x1234, b_ip, 0x11, 1))?;
    /// assert_eq!(a.poll_transmit().map(|t| t.dst), Some(b_ip)); // the REQ
    /// assert_eq!(a.handle_unreachable(b_ip, Instant::ZERO), 1);
    /// assert_eq!(a.poll_event(), Some(CmEvent::Unreachable { endpoint: ep }));
    /// assert_eq!(a.state(ep), Some(CmState::Idle));
    /// assert!(a.poll_timeout().is_none()); // no more REQs
    /// # Ok::<(), CmError>(())
    /// ```
    pub fn handle_unreachable(&mut self, peer: IpAddr, _now: Instant) -> usize {
        if self.removed {
            return 0;
        }
        let ended: Vec<EndpointId> = self
            .endpoints
            .values()
            .filter(|ep| {
                !ep.destroyed
                    && ep.remote_addr == peer
                    && matches!(
                        ep.state,
                        CmState::ReqSent | CmState::MraReqRcvd | CmState::SidrReqSent
                    )
            })
            .map(|ep| ep.id)
            .collect();
        for &id in &ended {
            self.reset_to_idle(id);
            self.out.counters.unreachable += 1;
            self.out.event(CmEvent::Unreachable { endpoint: id });
        }
        ended.len()
    }

    // ---- transitions shared with recv.rs ---------------------------------

    /// Sends `msg` and arms its retransmission.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_retransmitted(
        &mut self,
        now: Instant,
        id: EndpointId,
        dst: IpAddr,
        msg: &CmMessage,
        tid: u64,
        interval_ms: u64,
        retries: u8,
    ) {
        let mad: [u8; MAD_LEN] = self.out.send(dst, msg, tid);
        if let Some(ep) = self.endpoints.get_mut(&id) {
            ep.retransmit = Some(Retransmit {
                dst,
                mad: Box::new(mad),
                retries_left: retries,
                interval_ms,
            });
            self.timers
                .set(id, now + Duration::from_millis(interval_ms));
        }
    }

    /// Stops retransmitting (Linux `ib_cancel_mad`).
    pub(crate) fn cancel(&mut self, id: EndpointId) {
        if let Some(ep) = self.endpoints.get_mut(&id) {
            ep.retransmit = None;
        }
        self.timers.cancel(id);
    }

    pub(crate) fn insert_tables(&mut self, id: EndpointId) {
        if let Some(ep) = self.endpoints.get_mut(&id) {
            ep.in_tables = true;
            self.remote_ids
                .insert((ep.remote_comm_id, ep.remote_ca_guid), id);
            self.remote_qpns
                .insert((ep.remote_qpn, ep.remote_ca_guid), id);
        }
    }

    fn remove_tables(&mut self, id: EndpointId) {
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return;
        };
        if !ep.in_tables {
            return;
        }
        ep.in_tables = false;
        let k1 = (ep.remote_comm_id, ep.remote_ca_guid);
        let k2 = (ep.remote_qpn, ep.remote_ca_guid);
        if self.remote_ids.get(&k1) == Some(&id) {
            self.remote_ids.remove(&k1);
        }
        if self.remote_qpns.get(&k2) == Some(&id) {
            self.remote_qpns.remove(&k2);
        }
    }

    /// Linux `cm_reset_to_idle`.
    pub(crate) fn reset_to_idle(&mut self, id: EndpointId) {
        self.cancel(id);
        self.remove_tables(id);
        if let Some(ep) = self.endpoints.get_mut(&id) {
            ep.state = CmState::Idle;
        }
    }

    /// Linux `cm_enter_timewait`: out of the tables, no retransmission,
    /// conv(av timeout) until the QPN and comm ID may be reused.
    pub(crate) fn enter_timewait(&mut self, now: Instant, id: EndpointId) {
        self.cancel(id);
        self.remove_tables(id);
        if let Some(ep) = self.endpoints.get_mut(&id) {
            ep.state = CmState::Timewait;
            let wait = cm_convert_to_ms(ep.av_timeout);
            self.timers.set(id, now + Duration::from_millis(wait));
        }
    }

    /// Forgets an endpoint entirely.
    pub(crate) fn free(&mut self, id: EndpointId) {
        self.cancel(id);
        self.forget_sidr(id);
        self.remove_tables(id);
        if let Some(ep) = self.endpoints.remove(&id) {
            if self.by_comm_id.get(&ep.local_comm_id) == Some(&id) {
                self.by_comm_id.remove(&ep.local_comm_id);
            }
        }
    }

    /// REP_SENT → ESTABLISHED (RTU, DREQ or COMM_EST).
    pub(crate) fn establish(&mut self, id: EndpointId) {
        self.cancel(id);
        if let Some(ep) = self.endpoints.get_mut(&id) {
            ep.state = CmState::Established;
        }
        self.out.event(CmEvent::Established { endpoint: id });
    }

    /// Linux `cm_send_rej_locked`: REJ from the current state, then IDLE
    /// (or time-wait once we had sent a REP).
    pub(crate) fn send_rej(
        &mut self,
        now: Instant,
        id: EndpointId,
        reason: u16,
        ari: &[u8],
        pd: &[u8],
    ) {
        let Some(ep) = self.endpoints.get(&id) else {
            return;
        };
        let state = ep.state;
        let (msg, tid) = format::rej(ep, state, reason, ari, pd);
        let dst = ep.remote_addr;
        match state {
            CmState::RepSent | CmState::MraRepRcvd => self.enter_timewait(now, id),
            _ => self.reset_to_idle(id),
        }
        self.out.send(dst, &msg, tid);
    }

    /// ESTABLISHED → DREQ_SENT, retransmitting.
    pub(crate) fn send_dreq(&mut self, now: Instant, id: EndpointId, pending: bool) {
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return;
        };
        ep.state = CmState::DreqSent;
        ep.disconnect_pending = pending;
        let (msg, tid) = format::dreq(&self.cfg, ep);
        let (dst, interval, retries) = (ep.remote_addr, ep.timeout_ms, ep.max_cm_retries);
        self.send_retransmitted(now, id, dst, &msg, tid, interval, retries);
    }

    /// DREQ_RCVD → TIMEWAIT, DREP sent (Linux `cm_send_drep_locked`).
    pub(crate) fn send_drep_and_wait(&mut self, now: Instant, id: EndpointId) {
        let Some(ep) = self.endpoints.get(&id) else {
            return;
        };
        let (msg, tid) = format::drep(ep.local_comm_id, ep.remote_comm_id, ep.tid);
        let dst = ep.remote_addr;
        self.enter_timewait(now, id);
        self.out.send(dst, &msg, tid);
    }

    /// Records how the DREQ exchange ended and completes a pending
    /// disconnect.
    pub(crate) fn disconnect_done(&mut self, id: EndpointId, how: DisconnectHow) {
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return;
        };
        ep.ended_by = Some(how);
        if ep.disconnect_pending {
            ep.disconnect_pending = false;
            self.out
                .event(CmEvent::DisconnectDone { endpoint: id, how });
        }
    }
}

/// Refuses private data longer than the `max` bytes its message carries.
fn check_private_data(data: &[u8], max: usize) -> Result<(), CmError> {
    if data.len() > max {
        return Err(CmError::PrivateDataTooLong {
            len: data.len(),
            max,
        });
    }
    Ok(())
}
