//! Unreliable datagram queue pairs of applications.
//!
//! A UD QP is proto's [`UdQp`] with its own receive queue and CQs (which it
//! may share with RC QPs), kept in its own table ([`UdEntry`]) beside the RC
//! QPs, with a QPN from the same space and the same rules (unpredictable,
//! the shared-port slot in bits 16..23, never reused while in time-wait).
//! The application's handle is the same [`QpShared`] an RC QP has (number,
//! generation, state, caps), marked [`QpShared::is_ud`].
//!
//! **Sending.** UD has no peer, no window and no retransmission: each post
//! takes the core lock, hands the request to the QP, and the packet goes to
//! the socket in the same call, addressed by the request's address vector
//! (the destination GID, an IPv4-mapped or IPv6 address). The send then
//! completes at once — "sent" is all UD promises. A message longer than the
//! port's MTU is refused at post time: a datagram is one packet.
//!
//! **Receiving.** The receive path hands a packet whose destination QPN is
//! a UD QP's to it with the 40-byte GRH area rxe writes at the start of the
//! receive buffer (`crate::gsi::grh`): for RoCEv2 over IPv4 20 zero bytes, then the
//! IPv4 header as it arrived (addresses, total length, the ID the ICRC check
//! recovered, the ECN bits); over IPv6 the IPv6 header. A UDP socket does
//! not report the TTL or the DSCP, so the header carries TTL 64 (what Linux
//! sends with) and DSCP 0. Its completion goes to the CQ at once. A wrong
//! Q_Key, a missing receive, a QP not yet in RTR: a counted drop
//! ([`Drops`](ndverbs_proto::rc::Drops) `bad_qkey`, `no_recv`, `bad_state`).
//!
//! **Receive queues.** A UD QP takes receives from its own queue or, as
//! rxe's may, from a shared receive queue that RC and UD QPs alike draw
//! on (the SRQ's credits and limit event are the step's, as for RC).
//!
//! **Endpoints.** A UD QP belongs to no connection: rdma_cm's UDP port
//! space finds a peer's QPN and Q_Key with SIDR (`endpoints.rs`,
//! `ndverbs_proto::cm::sidr`) and leaves the QP as it is.

use super::core::{Core, Shared};
use super::tables::{state_to_u8, QpInit, QpShared, UdEntry};
use super::Nic;
use crate::error::EngineError;
use ndverbs_proto::rc::{
    AttrMask, Counters, PostError, QpAttr, QpState, RecvQueue, RecvWr, WcQueue,
};
use ndverbs_proto::ud::{UdQp, UdSendWr};
use ndverbs_wire::cma::addr_of_gid;
use std::net::Ipv6Addr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Nic {
    /// Creates an unreliable datagram queue pair in RESET with an
    /// unpredictable QPN. `init.srq` must be `None` (UD QPs have their own
    /// receive queue).
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_engine::config::Progress;
    /// use ndverbs_engine::nic::{Nic, QpInit};
    /// use ndverbs_proto::rc::{AttrMask, QpAttr, QpCaps, QpState};
    /// let a = Nic::open("127.93.6.9".parse().unwrap(), Progress::Thread)?;
    /// let pd = a.alloc_pd()?;
    /// let (cq, _) = a.create_cq(16)?;
    /// let init = QpInit { pd, send_cq: cq, recv_cq: cq, srq: None, caps: QpCaps::default(),
    ///     max_recv_wr: 16, max_recv_sge: 1 };
    /// let qp = a.create_ud_qp(init)?;
    /// assert!(qp.is_ud() && qp.state() == QpState::Reset);
    /// // The UD ladder: INIT takes the Q_Key, RTR nothing, RTS the first PSN.
    /// let mut attr = QpAttr { qp_state: QpState::Init, qkey: 0x11111111, ..QpAttr::default() };
    /// a.modify_qp(qp.qpn(), &attr, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY)?;
    /// attr.qp_state = QpState::Rtr;
    /// a.modify_qp(qp.qpn(), &attr, AttrMask::STATE)?;
    /// attr.qp_state = QpState::Rts;
    /// a.modify_qp(qp.qpn(), &attr, AttrMask::STATE | AttrMask::SQ_PSN)?;
    /// assert_eq!(a.query_qp(qp.qpn())?.qkey, 0x11111111);
    /// // `ndv res` lists it as UD.
    /// let r = a.resources();
    /// assert_eq!((r.qps[0].qpn, r.qps[0].ud, r.qps[0].state), (qp.qpn(), true, QpState::Rts));
    /// a.destroy_qp(qp.qpn())?;
    /// assert!(a.resources().qps.is_empty());
    /// # Ok::<(), ndverbs_engine::error::EngineError>(())
    /// ```
    pub fn create_ud_qp(&self, init: QpInit) -> Result<Arc<QpShared>, EngineError> {
        let _nic = self.shared.span.enter();
        let rq_sge = init.max_recv_sge.max(1);
        let (mut c, new) = self.admit_qp(&init)?;
        let qpn = new.qpn;
        // (Posts take the core lock: its post queues stay empty.)
        let rq = (init.max_recv_wr, rq_sge);
        let shared = Arc::new(QpShared::new(&new, &init, rq, true));
        let qp = UdQp::new_reset(qpn, init.pd, c.active_mtu, init.caps.max_send_wr);
        c.tables.ud.insert(
            qpn,
            UdEntry {
                qp,
                shared: shared.clone(),
                pd: init.pd,
                rq: RecvQueue::new(init.max_recv_wr, rq_sge),
                srq: init.srq,
                send_cq: new.send_cq,
                recv_cq: new.recv_cq,
            },
        );
        tracing::debug!(qp = qpn, pd = init.pd, "UD QP created");
        Ok(shared)
    }

    /// Posts a send on a UD queue pair: checked, sent and completed before
    /// the call returns (see the module docs).
    pub fn post_ud_send(&self, qp: &QpShared, mut wr: UdSendWr) -> Result<(), EngineError> {
        self.check()?;
        if !qp.ud {
            return Err(EngineError::InvalidArgument(
                "a datagram send needs a UD queue pair",
            ));
        }
        if wr.sgl.len() > qp.caps.max_send_sge as usize {
            return Err(PostError::TooManySges {
                given: wr.sgl.len(),
                max: qp.caps.max_send_sge,
            }
            .into());
        }
        if let Some(d) = &wr.inline {
            if d.len() > qp.caps.max_inline_data as usize {
                return Err(PostError::InlineTooLarge {
                    len: d.len(),
                    max: qp.caps.max_inline_data,
                }
                .into());
            }
        }
        wr.signaled |= qp.caps.sq_sig_all;
        let _nic = self.shared.span.enter();
        let mut c = self.core()?;
        let e = c.tables.ud.get_mut(&qp.qpn).ok_or(EngineError::NotFound {
            what: "QP",
            id: qp.qpn,
        })?;
        e.qp.post_send(wr)?;
        c.drain_ud(&self.shared, qp.qpn);
        Ok(())
    }

    /// Posts a receive on a UD queue pair (from INIT on; see
    /// [`Nic::post_recv`], which sends UD QPs' receives here).
    pub(super) fn post_ud_recv(&self, qp: &QpShared, wr: RecvWr) -> Result<(), EngineError> {
        if qp.uses_srq {
            return Err(EngineError::InvalidArgument(
                "the QP uses a shared receive queue",
            ));
        }
        let mut c = self.core()?;
        let e = c.tables.ud.get_mut(&qp.qpn).ok_or(EngineError::NotFound {
            what: "QP",
            id: qp.qpn,
        })?;
        let state = e.qp.state();
        ndverbs_proto::rc::validate_recv(qp.max_recv_sge, Some(state), &wr)?;
        e.rq.post(wr)?;
        if state == QpState::Err {
            // Flushed at once, as on an RC QP in ERR.
            c.deliver_ud(qp.qpn);
        }
        Ok(())
    }
}

impl Core {
    /// Modifies UD queue pair `qpn` (which exists).
    pub(super) fn modify_ud(
        &mut self,
        qpn: u32,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> Result<(), EngineError> {
        let Some(e) = self.tables.ud.get_mut(&qpn) else {
            return Err(EngineError::NotFound {
                what: "QP",
                id: qpn,
            });
        };
        let from = e.qp.state();
        e.qp.modify(attr, mask)?;
        let to = e.qp.state();
        if to != from {
            tracing::debug!(qp = qpn, ?from, ?to, "UD QP state");
        }
        if to == QpState::Reset {
            // A reset forgets the receives too (and the completions left in
            // the CQs, which the caller purges).
            e.rq = RecvQueue::new(e.shared.max_recv_wr, e.shared.max_recv_sge);
        }
        e.shared.state.store(state_to_u8(to), Ordering::Release);
        self.deliver_ud(qpn);
        Ok(())
    }

    /// The attributes of UD queue pair `qpn`.
    pub(super) fn query_ud(&self, qpn: u32) -> Option<QpAttr> {
        self.tables.ud.get(&qpn).map(|e| e.qp.query())
    }

    /// The counters of UD queue pair `qpn`.
    pub(super) fn ud_counters(&self, qpn: u32) -> Option<Counters> {
        self.tables
            .ud
            .get(&qpn)
            .map(|e| e.qp.counters().to_counters())
    }

    /// Destroys UD queue pair `qpn` (see `Nic::destroy_qp`). False if
    /// there is none.
    pub(super) fn destroy_ud(&mut self, qpn: u32) -> bool {
        if !self.tables.ud.contains_key(&qpn) {
            return false;
        }
        // What completed is delivered; what is outstanding ends without a
        // result, as with an RC queue pair (`Nic::destroy_qp`).
        self.deliver_ud(qpn);
        if let Some(e) = self.tables.ud.remove(&qpn) {
            let c = e.qp.counters().to_counters();
            crate::stats::add(&mut self.tables.retired, &c);
        }
        true
    }

    /// Moves every UD queue pair to ERR (device removal), flushing what is
    /// outstanding.
    pub(super) fn flush_ud(&mut self) {
        let qpns: Vec<u32> = self.tables.ud.keys().copied().collect();
        for qpn in qpns {
            if let Some(e) = self.tables.ud.get_mut(&qpn) {
                if !matches!(e.qp.state(), QpState::Reset | QpState::Err) {
                    e.qp.set_error();
                    e.shared
                        .state
                        .store(state_to_u8(QpState::Err), Ordering::Release);
                }
            }
            self.deliver_ud(qpn);
        }
    }

    /// Sends what UD queue pair `qpn` has queued, each packet to the
    /// address its request named, then delivers its completions.
    fn drain_ud(&mut self, shared: &Shared, qpn: u32) {
        loop {
            let t = &mut self.tables;
            let Some(e) = t.ud.get_mut(&qpn) else {
                return;
            };
            let Some(out) = e.qp.poll_transmit(&mut t.mem, &mut self.io.tx) else {
                break;
            };
            let peer = addr_of_gid(Ipv6Addr::from(out.av.dgid));
            self.send_packet(shared, peer, out.len);
        }
        self.deliver_ud(qpn);
    }

    /// Pushes UD queue pair `qpn`'s completions to its CQs (see [`deliver`]).
    fn deliver_ud(&mut self, qpn: u32) {
        if let Some(e) = self.tables.ud.get_mut(&qpn) {
            let n = deliver(e);
            self.deliveries.count += n;
            self.completion_ready |= n > 0;
        }
    }
}

/// Pushes a UD queue pair's completions to its CQs, flushing its own
/// receives first when it is in ERR (never a shared queue's, which other
/// QPs still use); returns how many.
pub(super) fn deliver(e: &mut UdEntry) -> u64 {
    e.qp.flush_recv(&mut e.rq);
    let mut n = 0;
    while let Some(wc) = e.qp.poll_completion() {
        let cq = match wc.queue {
            WcQueue::Send => &e.send_cq,
            WcQueue::Recv => &e.recv_cq,
        };
        cq.push(wc);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use crate::gsi::{grh, ReceivedIp};
    use ndverbs_wire::bth::Bth;
    use ndverbs_wire::ip::{Ipv4Header, Ipv6Header};
    use ndverbs_wire::opcode::Opcode;
    use ndverbs_wire::packet::Packet;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn grh_carries_the_ip_header_as_it_arrived() {
        let pkt = Packet::new(Bth::new(Opcode::UD_SEND_ONLY, 0x33, 1));
        let (s, d) = (Ipv4Addr::new(10, 91, 0, 1), Ipv4Addr::new(10, 91, 0, 2));
        let ip = ReceivedIp {
            ipv4_id: Some(0xbeef),
            ecn: 1,
        };
        let g = grh(s.into(), d.into(), &pkt, ip);
        assert_eq!(g[..20], [0; 20]);
        let h = Ipv4Header::parse(&g[20..]).unwrap();
        assert_eq!((h.src, h.dst, h.id, h.tos), (s, d, 0xbeef, 1));
        assert_eq!(
            usize::from(h.total_len),
            20 + 8 + pkt.encoded_len().unwrap()
        );
        assert_eq!(h.checksum, h.compute_checksum());
        let (s6, d6): (IpAddr, IpAddr) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        let h = Ipv6Header::parse(&grh(s6, d6, &pkt, ReceivedIp::default())).unwrap();
        assert_eq!((IpAddr::V6(h.src), IpAddr::V6(h.dst)), (s6, d6));
    }
}
