//! Incoming MADs: parse, demultiplex to an endpoint, apply Linux's rules.
//!
//! ## Matching (Linux `cm.c`, rocev2-and-cm.md §7.1)
//!
//! | message | finds its endpoint by |
//! |---|---|
//! | REQ | (REQ.LocalCommID, CA GUID) in the remote-ID table ⇒ duplicate; (QPN, CA GUID) in the remote-QPN table ⇒ stale; else the listener of the service ID |
//! | REP | our comm ID = REP.RemoteCommID, on an endpoint that has no remote comm ID yet; otherwise it is a duplicate of a REP already taken |
//! | RTU, DREQ, DREP | the exact pair (our comm ID, peer comm ID) |
//! | MRA | of a REQ: our comm ID on an endpoint with no remote ID yet; else the exact pair |
//! | REJ | reason 4 (timeout): (REJ.LocalCommID, GUID in the ARI) in the remote-ID table — the active side rejects before it learnt our comm ID; of a REQ: our comm ID with no remote ID yet; else the exact pair |
//!
//! A DREQ is also checked against our QPN (`DREQ.RemoteQPN`); a mismatch is
//! dropped silently, as Linux does.
//!
//! Every message that names an endpoint with a known peer (all of the above,
//! and a REQ matched as a duplicate or a stale connection) must come from
//! that peer's address — the one we sent our REQ to, or the one its REQ came
//! from; otherwise it is dropped and counted (`rx_wrong_source`). Comm IDs
//! travel in the clear, so without this anybody who saw or guessed them could
//! end a connection with one forged DREQ or REJ from anywhere.
//!
//! ## Answers without an endpoint
//!
//! * REQ for a service ID nobody listens on ⇒ REJ 8.
//! * REQ or REP from a (CA GUID, QPN) that a live connection of ours already
//!   uses ⇒ REJ 10 (stale connection) to the sender and a DREQ on the old
//!   connection: the peer must have lost it (a reboot, a crash).
//! * DREQ naming no connection ⇒ DREP (`cm_issue_drep`): the peer may have
//!   missed our DREP and must not wait through all its retries.
//!
//! ## Duplicates and MRA
//!
//! A retransmitted REQ while the application has not answered yet is
//! answered with an MRA (service timeout 24 by default, as rdma_cm's
//! delayed MRA): the peer extends its timeout instead of giving up on a slow
//! `accept`. Once we sent a REP, a duplicate REQ gets the REP again (Linux
//! waits for its own REP timer; re-sending at once only helps a lost REP).
//! Likewise a duplicate REP before `complete_connect` gets an MRA, after it
//! the RTU again.
//!
//! ## Where this differs from Linux
//!
//! * A stale REP: Linux sends REJ 10 but leaves its own REQ retrying until
//!   it times out; we fail the connect at once (`Rejected`, reason 10).
//! * A DREP in DREQ_RCVD (crossing DREQs where the application has not
//!   disconnected yet): Linux enters time-wait; we stay in DREQ_RCVD so the
//!   application's `disconnect` still sends the DREP the peer waits for
//!   (rule D6: no DREP before the application disconnects).
//! * A DREQ for a connection that went back to IDLE (REP or REQ retries
//!   exhausted) is answered with a DREP, as if it were unknown; Linux drops it.
//! * A DREQ in time-wait is answered with a DREP echoing *that* DREQ's TID.
//! * Messages naming an endpoint from another address than its peer's are
//!   dropped (Linux matches by comm ID alone); so is a REQ that claims a live
//!   connection's (CA GUID, QPN) from another address — it is not treated as
//!   that peer's reboot.

use super::agent::CmAgent;
use super::config::{cm_ack_timeout, cm_convert_to_ms};
use super::event::{CmEvent, ConnectRequest, DisconnectHow};
use super::format;
use super::ids::EndpointId;
use super::params::{active_qp_setup, PathInfo, PeerParams};
use super::rdma_cm;
use super::state::CmState;
use crate::time::{Duration, Instant};
use ndverbs_wire::cm::{msg_ref, rej_reason, CmMessage, Drep, Dreq, Mra, Rej, Rep, Req, Rtu};
use ndverbs_wire::cma::{gid_of, CMA_HEADER_LEN};
use ndverbs_wire::mad::{Mad, CM_CLASS_VERSION, METHOD_SEND, MGMT_CLASS_CM};
use std::net::IpAddr;

impl CmAgent {
    /// Takes one received MAD (the 256 bytes after the GSI's 40-byte GRH),
    /// sent from `src`. Never panics; whatever is not acted on is counted in
    /// [`CmCounters`](super::CmCounters).
    pub fn handle_mad(&mut self, now: Instant, src: IpAddr, mad: &[u8]) {
        self.out.counters.rx_mads += 1;
        if self.removed {
            self.out.counters.rx_after_removal += 1;
            return;
        }
        let Ok(m) = Mad::parse(mad) else {
            self.out.counters.rx_malformed += 1;
            return;
        };
        let h = m.header;
        if h.base_version != 1
            || h.mgmt_class != MGMT_CLASS_CM
            || h.class_version != CM_CLASS_VERSION
            || h.method != METHOD_SEND
        {
            self.out.counters.rx_malformed += 1;
            return;
        }
        let Ok(msg) = CmMessage::parse_data(h.attr_id, m.data) else {
            self.out.counters.rx_malformed += 1;
            return;
        };
        let tid = h.tid;
        match msg {
            CmMessage::Req(r) => self.on_req(now, src, tid, &r),
            CmMessage::Rep(r) => self.on_rep(now, src, tid, &r),
            CmMessage::Rtu(r) => self.on_rtu(src, &r),
            CmMessage::Mra(r) => self.on_mra(now, src, &r),
            CmMessage::Rej(r) => self.on_rej(now, src, &r),
            CmMessage::Dreq(r) => self.on_dreq(now, src, tid, &r),
            CmMessage::Drep(r) => self.on_drep(now, src, &r),
            CmMessage::SidrReq(r) => self.on_sidr_req(src, tid, &r),
            CmMessage::SidrRep(r) => self.on_sidr_rep(src, &r),
            // LAP/APR, and messages the wire crate may learn later.
            _ => self.out.counters.rx_unsupported += 1,
        }
    }

    /// The endpoint with our comm ID `local` and peer comm ID `remote`
    /// (Linux `cm_acquire_id`; `remote` 0 = "no peer comm ID yet").
    fn find(&self, local: u32, remote: u32) -> Option<EndpointId> {
        let id = *self.by_comm_id.get(&local)?;
        (self.endpoints.get(&id)?.remote_comm_id == remote).then_some(id)
    }

    /// Whether a message naming endpoint `id` came from its peer's address
    /// (counted as `rx_wrong_source` when not).
    pub(crate) fn sent_by_peer(&mut self, id: EndpointId, src: IpAddr) -> bool {
        let ok = self
            .endpoints
            .get(&id)
            .is_none_or(|e| e.remote_addr.to_canonical() == src.to_canonical());
        if !ok {
            self.out.counters.rx_wrong_source += 1;
        }
        ok
    }

    /// The endpoint a message names (`found`) when there is one and the
    /// message came from its peer; counts `rx_unmatched` or
    /// `rx_wrong_source` when not.
    fn peer_endpoint(&mut self, found: Option<EndpointId>, src: IpAddr) -> Option<EndpointId> {
        let Some(id) = found else {
            self.out.counters.rx_unmatched += 1;
            return None;
        };
        self.sent_by_peer(id, src).then_some(id)
    }

    fn state_of(&self, id: EndpointId) -> CmState {
        self.endpoints.get(&id).map_or(CmState::Idle, |e| e.state)
    }

    // ---- REQ -----------------------------------------------------------

    /// Refuses a REQ no endpoint takes (`cm_issue_rej`): the REJ swaps the
    /// first two words of the REQ as if they were comm IDs (the second is
    /// the vendor ID), and echoes its TID.
    fn refuse_req(&mut self, src: IpAddr, tid: u64, req: &Req, reason: u16) {
        let rej = format::issue_rej(req.vendor_id, req.local_comm_id, reason, msg_ref::REQ);
        self.out.send(src, &rej, tid);
    }

    fn on_req(&mut self, now: Instant, src: IpAddr, tid: u64, req: &Req) {
        if let Some(&id) = self.remote_ids.get(&(req.local_comm_id, req.local_ca_guid)) {
            if !self.sent_by_peer(id, src) {
                return;
            }
            self.out.counters.rx_duplicates += 1;
            self.dup_req(id);
            return;
        }
        if let Some(&old) = self.remote_qpns.get(&(req.local_qpn, req.local_ca_guid)) {
            if !self.sent_by_peer(old, src) {
                return;
            }
            self.refuse_req(src, tid, req, rej_reason::STALE_CONN);
            self.stale(now, old);
            return;
        }
        let Some(&listener) = self.listeners.get(&req.service_id) else {
            self.refuse_req(src, tid, req, rej_reason::INVALID_SERVICE_ID);
            return;
        };
        let comm = self.alloc_comm_id();
        let cma = rdma_cm::uses_cma_header(req.service_id);
        let user = if cma {
            &req.private_data[CMA_HEADER_LEN..]
        } else {
            &req.private_data[..]
        };
        let mut ep = self.new_endpoint(CmState::ReqRcvd);
        let id = ep.id;
        let plt = req.primary.local_ack_timeout.saturating_sub(1);
        ep.local_comm_id = comm;
        ep.remote_comm_id = req.local_comm_id;
        ep.remote_addr = src;
        ep.service_id = req.service_id;
        ep.tid = tid;
        ep.remote_qpn = req.local_qpn;
        ep.remote_ca_guid = req.local_ca_guid;
        ep.listener = Some(listener);
        ep.timeout_ms = cm_convert_to_ms(req.local_cm_response_timeout);
        ep.max_cm_retries = req.max_cm_retries;
        ep.av_timeout = plt + 1;
        ep.local_ack_timeout = plt + 1;
        ep.path = PathInfo {
            path_mtu: req.path_mtu,
            flow_label: req.primary.flow_label,
            hop_limit: req.primary.hop_limit,
            traffic_class: req.primary.traffic_class,
        };
        let peer = PeerParams {
            addr: src,
            ca_guid: req.local_ca_guid,
            comm_id: req.local_comm_id,
            qpn: req.local_qpn,
            starting_psn: req.starting_psn,
            responder_resources: req.responder_resources,
            initiator_depth: req.initiator_depth,
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            path_mtu: req.path_mtu,
            srq: req.srq,
            private_data: user.to_vec(),
        };
        ep.peer = Some(Box::new(peer.clone()));
        self.endpoints.insert(id, ep);
        self.by_comm_id.insert(comm, id);
        self.insert_tables(id);

        // The checks Linux's CM and rdma_cm make before telling anybody.
        let local_gid = gid_of(self.cfg.local_addr);
        let refusal = if req.transport_service_type != 0 {
            Some((rej_reason::INVALID_TRANSPORT_TYPE, Vec::new()))
        } else if !(1..=5).contains(&req.path_mtu) {
            Some((rej_reason::INVALID_MTU, Vec::new()))
        } else if req.primary.remote_gid != local_gid {
            Some((rej_reason::INVALID_GID, local_gid.octets().to_vec()))
        } else {
            None
        };
        let header = if cma && refusal.is_none() {
            match rdma_cm::check_req_header(&req.private_data, self.cfg.local_addr) {
                Ok(h) => Some(h),
                Err(_) => {
                    self.refuse(id, rej_reason::CONSUMER_DEFINED, &[]);
                    return;
                }
            }
        } else {
            None
        };
        if let Some((reason, ari)) = refusal {
            self.refuse(id, reason, &ari);
            return;
        }
        self.out
            .event(CmEvent::ConnectRequest(Box::new(ConnectRequest {
                listener,
                endpoint: id,
                service_id: req.service_id,
                cma: header,
                peer,
                sidr: false,
            })));
    }

    /// A REQ that fails our checks: REJ from REQ_RCVD, endpoint gone, no event.
    fn refuse(&mut self, id: EndpointId, reason: u16, ari: &[u8]) {
        self.out.counters.rx_req_invalid += 1;
        if let Some(ep) = self.endpoints.get(&id) {
            let (msg, tid) = format::rej(ep, CmState::ReqRcvd, reason, ari, &[]);
            self.out.send(ep.remote_addr, &msg, tid);
        }
        self.free(id);
    }

    fn dup_req(&mut self, id: EndpointId) {
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return;
        };
        match ep.state {
            CmState::ReqRcvd | CmState::MraReqSent => {
                if let Some(st) = self.cfg.mra_service_timeout {
                    ep.state = CmState::MraReqSent;
                    let (msg, tid) = format::mra(ep, msg_ref::REQ, st);
                    self.out.send(ep.remote_addr, &msg, tid);
                }
            }
            CmState::RepSent | CmState::MraRepRcvd => {
                if let Some(rt) = &ep.retransmit {
                    let (dst, mad) = (rt.dst, *rt.mad);
                    self.out.push(dst, mad);
                }
            }
            _ => {}
        }
    }

    /// The peer reused the QP of connection `old`: DREQ it if established
    /// (Linux `ib_send_cm_dreq` on the old id; other states are left alone).
    fn stale(&mut self, now: Instant, old: EndpointId) {
        if self.state_of(old) != CmState::Established {
            return;
        }
        self.send_dreq(now, old, false);
        self.out.event(CmEvent::StaleConnection { endpoint: old });
    }

    // ---- REP / RTU / MRA -------------------------------------------------

    fn on_rep(&mut self, now: Instant, src: IpAddr, tid: u64, rep: &Rep) {
        let found = self.by_comm_id.get(&rep.remote_comm_id).copied();
        let Some(id) = self.peer_endpoint(found, src) else {
            return;
        };
        let Some(ep) = self.endpoints.get(&id) else {
            return;
        };
        if ep.remote_comm_id != 0 {
            if ep.remote_comm_id == rep.local_comm_id {
                self.out.counters.rx_duplicates += 1;
                self.dup_rep(id);
            } else {
                self.out.counters.rx_unmatched += 1;
            }
            return;
        }
        if !matches!(ep.state, CmState::ReqSent | CmState::MraReqRcvd) {
            self.out.counters.rx_wrong_state += 1;
            return;
        }
        if self
            .remote_ids
            .contains_key(&(rep.local_comm_id, rep.local_ca_guid))
        {
            self.out.counters.rx_wrong_state += 1;
            return;
        }
        if let Some(&old) = self.remote_qpns.get(&(rep.local_qpn, rep.local_ca_guid)) {
            let rej = format::issue_rej(
                rep.remote_comm_id,
                rep.local_comm_id,
                rej_reason::STALE_CONN,
                msg_ref::REP,
            );
            self.out.send(src, &rej, tid);
            self.stale(now, old);
            self.enter_timewait(now, id);
            self.out.event(CmEvent::Rejected {
                endpoint: id,
                reason: rej_reason::STALE_CONN,
                private_data: Vec::new(),
                ari: Vec::new(),
            });
            return;
        }
        let plt = self.cfg.packet_life_time;
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return;
        };
        ep.remote_comm_id = rep.local_comm_id;
        ep.remote_qpn = rep.local_qpn;
        ep.remote_ca_guid = rep.local_ca_guid;
        ep.state = CmState::RepRcvd;
        ep.av_timeout = cm_ack_timeout(rep.target_ack_delay, plt);
        let Some(c) = ep.connect.as_deref() else {
            return;
        };
        let peer = PeerParams {
            addr: ep.remote_addr,
            ca_guid: rep.local_ca_guid,
            comm_id: rep.local_comm_id,
            qpn: rep.local_qpn,
            starting_psn: rep.starting_psn,
            responder_resources: rep.responder_resources,
            initiator_depth: rep.initiator_depth,
            retry_count: c.retry_count.min(7),
            rnr_retry_count: rep.rnr_retry_count,
            path_mtu: c.path_mtu,
            srq: rep.srq,
            private_data: rep.private_data.to_vec(),
        };
        let qp = active_qp_setup(&self.cfg, c, &ep.path, &peer, rep.target_ack_delay);
        ep.peer = Some(Box::new(peer.clone()));
        self.cancel(id);
        self.insert_tables(id);
        self.out.event(CmEvent::RepReceived {
            endpoint: id,
            peer: Box::new(peer),
            qp,
        });
    }

    fn dup_rep(&mut self, id: EndpointId) {
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return;
        };
        match ep.state {
            CmState::Established => {
                let (msg, tid) = format::rtu(ep);
                self.out.send(ep.remote_addr, &msg, tid);
            }
            CmState::RepRcvd | CmState::MraRepSent => {
                if let Some(st) = self.cfg.mra_service_timeout {
                    ep.state = CmState::MraRepSent;
                    let (msg, tid) = format::mra(ep, msg_ref::REP, st);
                    self.out.send(ep.remote_addr, &msg, tid);
                }
            }
            _ => {}
        }
    }

    fn on_rtu(&mut self, src: IpAddr, rtu: &Rtu) {
        let found = self.find(rtu.remote_comm_id, rtu.local_comm_id);
        let Some(id) = self.peer_endpoint(found, src) else {
            return;
        };
        match self.state_of(id) {
            CmState::RepSent | CmState::MraRepRcvd => self.establish(id),
            _ => self.out.counters.rx_duplicates += 1,
        }
    }

    fn on_mra(&mut self, now: Instant, src: IpAddr, mra: &Mra) {
        let id = match mra.message_mraed {
            msg_ref::REQ => self.find(mra.remote_comm_id, 0),
            msg_ref::REP | msg_ref::OTHER => self.find(mra.remote_comm_id, mra.local_comm_id),
            _ => None,
        };
        let Some(id) = self.peer_endpoint(id, src) else {
            return;
        };
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return;
        };
        let next = match (ep.state, mra.message_mraed) {
            (CmState::ReqSent, msg_ref::REQ) => CmState::MraReqRcvd,
            (CmState::RepSent, msg_ref::REP) => CmState::MraRepRcvd,
            (CmState::MraReqRcvd | CmState::MraRepRcvd, _) => {
                self.out.counters.rx_duplicates += 1;
                return;
            }
            _ => {
                self.out.counters.rx_wrong_state += 1;
                return;
            }
        };
        let Some(rt) = ep.retransmit.as_mut() else {
            self.out.counters.rx_wrong_state += 1;
            return;
        };
        // ib_modify_mad: this and every later wait becomes the extended one.
        let wait = cm_convert_to_ms(mra.service_timeout) + cm_convert_to_ms(ep.av_timeout);
        rt.interval_ms = wait;
        ep.state = next;
        self.timers.set(id, now + Duration::from_millis(wait));
        self.out.event(CmEvent::MraReceived {
            endpoint: id,
            service_timeout: mra.service_timeout,
        });
    }

    // ---- REJ -------------------------------------------------------------

    fn on_rej(&mut self, now: Instant, src: IpAddr, rej: &Rej) {
        let id = if rej.reason == rej_reason::TIMEOUT {
            let mut g = [0u8; 8];
            g.copy_from_slice(&rej.ari[..8]);
            self.remote_ids
                .get(&(rej.local_comm_id, u64::from_be_bytes(g)))
                .copied()
        } else if rej.message_rejected == msg_ref::REQ {
            self.find(rej.remote_comm_id, 0)
        } else {
            self.find(rej.remote_comm_id, rej.local_comm_id)
        };
        let Some(id) = self.peer_endpoint(id, src) else {
            return;
        };
        let stale = rej.reason == rej_reason::STALE_CONN;
        let event = CmEvent::Rejected {
            endpoint: id,
            reason: rej.reason,
            private_data: rej.private_data.to_vec(),
            ari: rej.ari[..usize::from(rej.rejected_info_length).min(72)].to_vec(),
        };
        match self.state_of(id) {
            CmState::ReqSent
            | CmState::MraReqRcvd
            | CmState::RepSent
            | CmState::MraRepRcvd
            | CmState::ReqRcvd
            | CmState::MraReqSent => {
                if stale {
                    self.enter_timewait(now, id);
                } else {
                    self.reset_to_idle(id);
                }
                self.out.event(event);
            }
            CmState::RepRcvd | CmState::MraRepSent | CmState::Established => {
                self.enter_timewait(now, id);
                if let Some(ep) = self.endpoints.get_mut(&id) {
                    // A later disconnect completes at once with this outcome.
                    ep.ended_by = Some(DisconnectHow::RejReceived);
                }
                self.out.event(event);
            }
            CmState::DreqSent => {
                self.enter_timewait(now, id);
                self.disconnect_done(id, DisconnectHow::RejReceived);
            }
            _ => self.out.counters.rx_wrong_state += 1,
        }
    }

    // ---- DREQ / DREP -----------------------------------------------------

    fn on_dreq(&mut self, now: Instant, src: IpAddr, tid: u64, dreq: &Dreq) {
        let Some(id) = self.find(dreq.remote_comm_id, dreq.local_comm_id) else {
            self.issue_drep(src, tid, dreq);
            return;
        };
        if !self.sent_by_peer(id, src) {
            return;
        }
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return;
        };
        if ep.local_qpn != dreq.remote_qpn {
            self.out.counters.rx_dreq_bad_qpn += 1;
            return;
        }
        let state = ep.state;
        match state {
            CmState::RepSent | CmState::MraRepRcvd | CmState::DreqSent | CmState::Established => {
                ep.state = CmState::DreqRcvd;
                ep.tid = tid;
                ep.dreq_received = true;
                let pending = ep.disconnect_pending;
                self.cancel(id);
                if matches!(state, CmState::RepSent | CmState::MraRepRcvd) {
                    // The peer is connected (it got our REP; the RTU was lost).
                    self.out.event(CmEvent::Established { endpoint: id });
                }
                self.out.event(CmEvent::DreqReceived { endpoint: id });
                if state == CmState::DreqSent && pending {
                    // Crossing DREQs: our disconnect answers with the DREP.
                    self.send_drep_and_wait(now, id);
                    self.disconnect_done(id, DisconnectHow::DrepSent);
                }
            }
            CmState::Timewait => {
                self.out.counters.rx_duplicates += 1;
                let (msg, tid) = format::drep(ep.local_comm_id, ep.remote_comm_id, tid);
                self.out.send(src, &msg, tid);
            }
            CmState::DreqRcvd => self.out.counters.rx_duplicates += 1,
            CmState::Idle => self.issue_drep(src, tid, dreq),
            _ => self.out.counters.rx_wrong_state += 1,
        }
    }

    /// `cm_issue_drep`: a DREP for a DREQ we cannot place.
    fn issue_drep(&mut self, src: IpAddr, tid: u64, dreq: &Dreq) {
        self.out.counters.tx_drep_unknown += 1;
        let (msg, tid) = format::drep(dreq.remote_comm_id, dreq.local_comm_id, tid);
        self.out.send(src, &msg, tid);
    }

    fn on_drep(&mut self, now: Instant, src: IpAddr, drep: &Drep) {
        let found = self.find(drep.remote_comm_id, drep.local_comm_id);
        let Some(id) = self.peer_endpoint(found, src) else {
            return;
        };
        match self.state_of(id) {
            CmState::DreqSent => {
                self.enter_timewait(now, id);
                self.disconnect_done(id, DisconnectHow::DrepReceived);
            }
            CmState::DreqRcvd | CmState::Timewait => self.out.counters.rx_duplicates += 1,
            _ => self.out.counters.rx_wrong_state += 1,
        }
    }
}
