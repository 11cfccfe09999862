//! Service ID resolution (SIDR): how rdma_cm's UDP port space (`RDMA_PS_UDP`)
//! finds the UD QP behind an address and port.
//!
//! ```text
//!  requester                                              responder
//!  sidr_request ── SIDR_REQ (request ID, service ID, ─────►  listener: ConnectRequest (sidr)
//!                            rdma_cm header + data)          sidr_reply (or reject)
//!  SidrReply ◄──── SIDR_REP (status, QPN, Q_Key, data) ───
//! ```
//!
//! There is no connection: the requester learns the responder's QPN and
//! Q_Key and sends it UD datagrams; neither side keeps any state once the
//! SIDR_REP is sent or received. As Linux's `cm.c`:
//!
//! * the request ID is the requester's local comm ID and the TID is formed
//!   from it as for a REQ; P_Key 0xFFFF; the private data starts with the
//!   36-byte rdma_cm header, as a REQ's (180 bytes are the application's);
//! * the SIDR_REQ is retransmitted every `cm_convert_to_ms(CM response
//!   timeout)` (rdma_cm's `1 << (CMA_CM_RESPONSE_TIMEOUT - 8)`), at most
//!   `max_cm_retries` times (rdma_cm: 15); when they run out the endpoint
//!   returns to IDLE with [`CmEvent::ConnectTimeout`] (rdma_cm reports
//!   `UNREACHABLE`, `-ETIMEDOUT`); ICMP port unreachable ends it at once
//!   ([`CmEvent::Unreachable`]);
//! * a SIDR_REP is matched by its request ID against an endpoint in
//!   SIDR_REQ_SENT (anything else is dropped and counted), which returns to
//!   IDLE with [`CmEvent::SidrReply`] — whatever the status: rdma_cm turns
//!   a non-zero status into `UNREACHABLE` with that status;
//! * a SIDR_REQ for a service ID nobody listens on is answered at once with
//!   status 1 (`IB_SIDR_UNSUPPORTED`), echoing the service ID and TID; one
//!   whose rdma_cm header does not check out, or that the application
//!   rejects or destroys unanswered, with status 2 (`IB_SIDR_REJECT`);
//! * a SIDR_REQ repeated while its first copy waits for the application is
//!   a duplicate, dropped (`rx_duplicates`); once answered, the request is
//!   forgotten (Linux erases it from its remote-SIDR table), so a late
//!   repeat is a new request.
//!
//! Different on purpose: duplicates are keyed by (source address, request
//! ID); Linux keys them by (request ID, source LID), and every RoCE sender
//! has LID 0. Like every other message, a SIDR_REP must come from the
//! address its SIDR_REQ went to.

use super::agent::CmAgent;
use super::config::cm_convert_to_ms;
use super::event::{CmError, CmEvent, ConnectRequest};
use super::ids::{form_tid, EndpointId};
use super::params::PeerParams;
use super::rdma_cm;
use super::state::CmState;
use crate::time::Instant;
use ndverbs_wire::cm::{pdata, CmMessage, SidrRep, SidrReq};
use ndverbs_wire::cma::{CmaHeader, CMA_HEADER_LEN};
use std::net::IpAddr;

/// SIDR_REP status values (`ib_cm_sidr_status`).
pub mod sidr_status {
    /// The service is there: QPN and Q_Key are valid.
    pub const SUCCESS: u8 = 0;
    /// Nobody listens on the service ID.
    pub const UNSUPPORTED: u8 = 1;
    /// The service (or rdma_cm below it) refused the request.
    pub const REJECT: u8 = 2;
    /// No QP for the service.
    pub const NO_QP: u8 = 3;
    /// Redirected elsewhere (not used on RoCE).
    pub const REDIRECT: u8 = 4;
    /// Unsupported class version.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// What a requester asks for: the service behind `remote_addr` and
/// `service_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrParams {
    /// The service ID (rdma_cm: `0x0111 << 16 | port`).
    pub service_id: u64,
    /// The responder's address.
    pub remote_addr: IpAddr,
    /// Our rdma_cm port, for the rdma_cm header.
    pub local_port: u16,
    /// The application's private data (after the rdma_cm header for
    /// rdma_cm service IDs: at most 180 bytes, else 216).
    pub private_data: Vec<u8>,
}

impl SidrParams {
    /// A request for `service_id` at `remote_addr` from port 0, no data.
    pub fn new(service_id: u64, remote_addr: IpAddr) -> Self {
        SidrParams {
            service_id,
            remote_addr,
            local_port: 0,
            private_data: Vec::new(),
        }
    }
}

/// A responder's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrAnswer {
    /// [`sidr_status`]; QPN and Q_Key are sent only with `SUCCESS`.
    pub status: u8,
    /// Our UD QP.
    pub qpn: u32,
    /// Its Q_Key (rdma_cm: `RDMA_UDP_QKEY`, 0x01234567).
    pub qkey: u32,
    /// At most 136 bytes.
    pub private_data: Vec<u8>,
}

/// The most private data a SIDR_REQ for `service_id` carries for the
/// application.
pub fn max_sidr_private_data(service_id: u64) -> usize {
    if rdma_cm::uses_cma_header(service_id) {
        pdata::SIDR_REQ - CMA_HEADER_LEN
    } else {
        pdata::SIDR_REQ
    }
}

impl CmAgent {
    /// Sends a SIDR_REQ and retransmits it until a SIDR_REP
    /// ([`CmEvent::SidrReply`]), ICMP ([`CmEvent::Unreachable`]) or the
    /// last retry ([`CmEvent::ConnectTimeout`]).
    pub fn sidr_request(&mut self, now: Instant, p: SidrParams) -> Result<EndpointId, CmError> {
        if self.removed {
            return Err(CmError::DeviceRemoved);
        }
        let max = max_sidr_private_data(p.service_id);
        if p.private_data.len() > max {
            return Err(CmError::PrivateDataTooLong {
                len: p.private_data.len(),
                max,
            });
        }
        let cma = rdma_cm::uses_cma_header(p.service_id);
        if cma && p.remote_addr.is_ipv4() != self.cfg.local_addr.is_ipv4() {
            return Err(CmError::InvalidParameter("address family"));
        }
        let mut pd = [0u8; pdata::SIDR_REQ];
        let off = if cma {
            CmaHeader::new(self.cfg.local_addr, p.local_port, p.remote_addr)
                .write(&mut pd)
                .map_err(|_| CmError::InvalidParameter("address family"))?
        } else {
            0
        };
        pd[off..off + p.private_data.len()].copy_from_slice(&p.private_data);
        let comm = self.alloc_comm_id();
        let tid = form_tid(self.cfg.hi_tid, comm);
        let msg = CmMessage::SidrReq(SidrReq {
            request_id: comm,
            pkey: 0xffff,
            service_id: p.service_id,
            private_data: pd,
        });
        let mut ep = self.new_endpoint(CmState::SidrReqSent);
        let id = ep.id;
        ep.local_comm_id = comm;
        ep.remote_addr = p.remote_addr;
        ep.service_id = p.service_id;
        ep.tid = tid;
        ep.timeout_ms = cm_convert_to_ms(self.cfg.cm_response_timeout);
        ep.max_cm_retries = self.cfg.max_cm_retries;
        let (dst, interval, retries) = (ep.remote_addr, ep.timeout_ms, ep.max_cm_retries);
        self.endpoints.insert(id, ep);
        self.by_comm_id.insert(comm, id);
        self.send_retransmitted(now, id, dst, &msg, tid, interval, retries);
        Ok(id)
    }

    /// Answers the SIDR_REQ handed over on `id` (in SIDR_REQ_RCVD): one
    /// SIDR_REP, then the endpoint is IDLE (nothing to retransmit: a lost
    /// reply is recovered by the requester's next SIDR_REQ).
    pub fn sidr_reply(&mut self, id: EndpointId, a: SidrAnswer) -> Result<(), CmError> {
        let ep = self.live(id)?;
        if ep.state != CmState::SidrReqRcvd {
            return Err(CmError::InvalidState(ep.state));
        }
        if a.private_data.len() > pdata::SIDR_REP {
            return Err(CmError::PrivateDataTooLong {
                len: a.private_data.len(),
                max: pdata::SIDR_REP,
            });
        }
        if a.status == sidr_status::SUCCESS && (a.qpn > 0xff_ffff || a.qpn < 2) {
            return Err(CmError::InvalidParameter("local_qpn"));
        }
        self.send_sidr_rep(id, &a);
        Ok(())
    }

    /// Sends the SIDR_REP for `id` and forgets the request (Linux
    /// `cm_send_sidr_rep_locked`).
    pub(crate) fn send_sidr_rep(&mut self, id: EndpointId, a: &SidrAnswer) {
        let Some(ep) = self.endpoints.get_mut(&id) else {
            return;
        };
        let ok = a.status == sidr_status::SUCCESS;
        let mut pd = [0u8; pdata::SIDR_REP];
        let n = a.private_data.len().min(pd.len());
        pd[..n].copy_from_slice(&a.private_data[..n]);
        let msg = CmMessage::SidrRep(SidrRep {
            request_id: ep.remote_comm_id,
            status: a.status,
            add_info_len: 0,
            vendor_id: 0,
            qpn: if ok { a.qpn } else { 0 },
            service_id: ep.service_id,
            qkey: if ok { a.qkey } else { 0 },
            add_info: [0; 72],
            private_data: pd,
        });
        ep.state = CmState::Idle;
        if ok {
            ep.local_qpn = a.qpn;
        }
        let (dst, tid) = (ep.remote_addr, ep.tid);
        self.forget_sidr(id);
        self.out.send(dst, &msg, tid);
    }

    /// Drops a received SIDR request from the duplicate table.
    pub(crate) fn forget_sidr(&mut self, id: EndpointId) {
        let Some(ep) = self.endpoints.get(&id) else {
            return;
        };
        let key = (ep.remote_addr.to_canonical(), ep.remote_comm_id);
        if self.remote_sidr.get(&key) == Some(&id) {
            self.remote_sidr.remove(&key);
        }
    }

    pub(crate) fn on_sidr_req(&mut self, src: IpAddr, tid: u64, req: &SidrReq) {
        let key = (src.to_canonical(), req.request_id);
        if self.remote_sidr.contains_key(&key) {
            self.out.counters.rx_duplicates += 1;
            return;
        }
        let reply = |status| SidrAnswer {
            status,
            qpn: 0,
            qkey: 0,
            private_data: Vec::new(),
        };
        let mut ep = self.new_endpoint(CmState::SidrReqRcvd);
        let id = ep.id;
        ep.remote_comm_id = req.request_id;
        ep.remote_addr = src;
        ep.service_id = req.service_id;
        ep.tid = tid;
        self.endpoints.insert(id, ep);
        self.remote_sidr.insert(key, id);
        let Some(&listener) = self.listeners.get(&req.service_id) else {
            self.out.counters.rx_req_invalid += 1;
            self.send_sidr_rep(id, &reply(sidr_status::UNSUPPORTED));
            self.free(id);
            return;
        };
        let (header, user) = if rdma_cm::uses_cma_header(req.service_id) {
            match rdma_cm::check_req_header(&req.private_data, self.cfg.local_addr) {
                Ok(h) => (Some(h), &req.private_data[CMA_HEADER_LEN..]),
                Err(_) => {
                    // rdma_cm refuses it; the CM's destroy of the id in
                    // SIDR_REQ_RCVD answers IB_SIDR_REJECT.
                    self.out.counters.rx_req_invalid += 1;
                    self.send_sidr_rep(id, &reply(sidr_status::REJECT));
                    self.free(id);
                    return;
                }
            }
        } else {
            (None, &req.private_data[..])
        };
        let peer = PeerParams {
            addr: src,
            ca_guid: 0,
            comm_id: req.request_id,
            qpn: 0,
            starting_psn: 0,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            path_mtu: 0,
            srq: false,
            private_data: user.to_vec(),
        };
        if let Some(ep) = self.endpoints.get_mut(&id) {
            ep.listener = Some(listener);
            ep.peer = Some(Box::new(peer.clone()));
        }
        self.out
            .event(CmEvent::ConnectRequest(Box::new(ConnectRequest {
                listener,
                endpoint: id,
                service_id: req.service_id,
                cma: header,
                peer,
                sidr: true,
            })));
    }

    pub(crate) fn on_sidr_rep(&mut self, src: IpAddr, rep: &SidrRep) {
        let Some(&id) = self.by_comm_id.get(&rep.request_id) else {
            self.out.counters.rx_unmatched += 1;
            return;
        };
        if self.endpoints.get(&id).map(|e| e.state) != Some(CmState::SidrReqSent) {
            self.out.counters.rx_wrong_state += 1;
            return;
        }
        if !self.sent_by_peer(id, src) {
            return;
        }
        self.reset_to_idle(id);
        self.out.event(CmEvent::SidrReply {
            endpoint: id,
            status: rep.status,
            qpn: rep.qpn,
            qkey: rep.qkey,
            private_data: rep.private_data.to_vec(),
        });
    }
}

/// What a UD endpoint resolves: the rdma_cm UDP service (`RDMA_PS_UDP`)
/// at `remote`, port `remote_port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrArgs {
    /// The responder's address.
    pub remote: IpAddr,
    /// Its rdma_cm UDP port.
    pub remote_port: u16,
    /// Our rdma_cm port (for the rdma_cm header).
    pub local_port: u16,
    /// At most 180 bytes for the responder's application.
    pub private_data: Vec<u8>,
}

/// What the SIDR_REP said. `status` 0: the service's UD QP is `qpn` with
/// Q_Key `qkey`; anything else is a refusal ([`sidr_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrInfo {
    /// The SIDR_REP's status.
    pub status: u8,
    /// The responder's UD QP.
    pub qpn: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// The SIDR_REP's private data (136 bytes).
    pub private_data: Vec<u8>,
}
