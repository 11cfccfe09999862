//! The core's side of the endpoint machine ([`crate::ep`]): the pump that
//! applies the machine's actions, the QP operations themselves, and the
//! application's `Nic::ep_*` calls.

use super::{Core, Nic};
use crate::ep::{
    AcceptArgs, Action, ConnectArgs, ConnectInfo, EpInfo, EpPending, Outcome, QpError, QpIdent,
    QpOp, Refused, RequestInfo,
};
use crate::error::EngineError;
use ndverbs_proto::cm::{CmEvent, QpSetup};
use ndverbs_proto::rc::{QpState, RcConnection};
use ndverbs_proto::time::Instant;

impl Core {
    /// Applies the endpoint machine's actions until it has none: a QP
    /// operation's result goes straight back, completions wait for the end
    /// of the step.
    pub(crate) fn drive_eps(&mut self, now: Instant) {
        while let Some(action) = self.eps.machine.poll_action() {
            match action {
                Action::Qp {
                    request,
                    qp,
                    op,
                    span,
                } => {
                    let r = span.in_scope(|| self.apply_qp_op(qp, op));
                    self.eps
                        .machine
                        .handle_qp_result(now, &mut self.cm, request, r);
                }
                Action::Complete {
                    request,
                    mut outcome,
                } => {
                    // What the application moves its own QP with names a
                    // path MTU this port carries, as `qp_to_rts` uses.
                    match &mut outcome {
                        Outcome::Connect(Ok(i)) => self.lower_mtu(&mut i.qp),
                        Outcome::Request(Ok(i)) => self.lower_mtu(&mut i.qp),
                        _ => {}
                    }
                    self.eps
                        .waiters
                        .complete(request, outcome, &mut self.deliveries.later)
                }
                Action::ReserveQpn(qpn) => {
                    self.tables.timewait_qpns.insert(qpn);
                }
                Action::ReleaseQpn(qpn) => {
                    self.tables.timewait_qpns.remove(&qpn);
                }
            }
        }
    }

    /// Routes one CM event to its endpoint and applies what follows.
    pub(crate) fn on_cm_event(&mut self, ev: CmEvent, now: Instant) {
        self.eps.machine.handle_cm_event(now, &mut self.cm, ev);
        self.drive_eps(now);
    }

    /// Device removal: every parked endpoint request fails.
    pub(crate) fn remove_eps(&mut self, now: Instant) {
        self.eps.machine.remove_device(&mut self.cm);
        self.drive_eps(now);
    }

    fn apply_qp_op(&mut self, qp: QpIdent, op: QpOp) -> Result<(), QpError> {
        match op {
            QpOp::CheckInit => match self.tables.qp_ident(qp) {
                None => Err(QpError::Gone),
                Some(e) if e.qp.state() == QpState::Init => Ok(()),
                Some(_) => Err(QpError::NotInit),
            },
            QpOp::CheckReady => match self.tables.qp_ident(qp) {
                None => Err(QpError::Gone),
                Some(e) if matches!(e.qp.state(), QpState::Init | QpState::Rtr | QpState::Rts) => {
                    Ok(())
                }
                Some(_) => Err(QpError::NotInit),
            },
            QpOp::ToRts(s) => self.qp_to_rts(qp, &s),
            QpOp::ToError => self.qp_to_error(qp),
        }
    }

    /// Lowers a negotiated path MTU to what this port carries: a REQ may
    /// carry a larger one than ours (the peer's link is wider), and the
    /// path is what both ends can carry.
    fn lower_mtu(&self, s: &mut QpSetup) {
        let ours = self.active_mtu as u8;
        if s.path_mtu > ours {
            s.path_mtu = ours;
        }
    }

    /// Applies what the CM negotiated to QP `qp`: INIT → RTR → RTS. A QP
    /// the application already moved to RTR or RTS itself stays where it
    /// is, if it was moved for this connection ([`QpOp::ToRts`]).
    fn qp_to_rts(&mut self, qp: QpIdent, s: &QpSetup) -> Result<(), QpError> {
        let Some(e) = self.tables.qp_ident(qp) else {
            return Err(QpError::Gone);
        };
        let state = e.qp.state();
        if matches!(state, QpState::Rtr | QpState::Rts) {
            let a = e.qp.query();
            let same = a.dest_qp_num == s.dest_qpn
                && a.rq_psn == s.rq_psn
                && (state == QpState::Rtr || a.sq_psn == s.sq_psn);
            if !same {
                return Err(QpError::OtherConnection);
            }
            e.peer = Some(s.remote_addr);
            return Ok(());
        }
        // The QP arrives in INIT, where the application set its access
        // rights: only RTR's and RTS's own attributes change.
        let mut c = RcConnection::from(s);
        // A REQ may carry a larger MTU than this port's (the peer's link is
        // wider): the path is what both ends can carry.
        c.path_mtu = c.path_mtu.min(self.active_mtu);
        let (rtr, rtr_mask) = c.rtr();
        e.modify(&rtr, rtr_mask).map_err(QpError::Refused)?;
        e.peer = Some(s.remote_addr);
        let (rts, rts_mask) = c.rts();
        e.modify(&rts, rts_mask).map_err(QpError::Refused)?;
        self.touched.push(qp.qpn);
        Ok(())
    }

    /// Moves QP `qp` to ERR, flushing it.
    fn qp_to_error(&mut self, qp: QpIdent) -> Result<(), QpError> {
        let Some(e) = self.tables.qp_ident(qp) else {
            return Err(QpError::Gone);
        };
        e.flush_to_error();
        self.touched.push(qp.qpn);
        Ok(())
    }
}

impl Nic {
    /// Runs `f` on the core, then what the endpoint machine asked for, then
    /// the rest of the step (the packets go out before completions).
    fn with_eps<T>(
        &self,
        f: impl FnOnce(&mut Core, Instant) -> Result<T, Refused>,
    ) -> Result<T, EngineError> {
        let _nic = self.shared().span.enter();
        let now = self.now();
        let mut guard = self.core_guard()?;
        let c = &mut *guard;
        let r = f(c, now);
        c.drive_eps(now);
        c.finish_step(self.shared(), now);
        Ok(r?)
    }

    /// Creates a connection endpoint.
    pub fn create_ep(&self) -> Result<u32, EngineError> {
        self.with_eps(|c, _| Ok(c.eps.machine.create()))
    }

    /// What an endpoint knows (state, peer, private data, read limits).
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_engine::config::Progress;
    /// use ndverbs_engine::nic::Nic;
    /// let a = Nic::open("127.93.15.1".parse().unwrap(), Progress::Thread)?;
    /// let ep = a.create_ep()?;
    /// let info = a.ep_info(ep)?;
    /// assert!(info.cm_state.is_none() && !info.listening); // not bound to anything yet
    /// a.ep_listen(ep, 7000, 8)?;
    /// let info = a.ep_info(ep)?;
    /// assert!(info.listening && info.peer.is_none() && info.comm_ids.is_none());
    /// # Ok::<(), ndverbs_engine::error::EngineError>(())
    /// ```
    pub fn ep_info(&self, ep: u32) -> Result<EpInfo, EngineError> {
        self.with_eps(|c, _| c.eps.machine.info(&c.cm, ep))
    }

    /// Listens for connection requests on rdma_cm TCP `port` (service ID
    /// `0x0106 << 16 | port`), queueing at most `backlog` unanswered ones.
    ///
    /// On a shared port the service ID is registered host-wide first (not
    /// under the core lock: the reconcile that steers its REQs here waits
    /// for this engine to answer a probe); another process listening on it
    /// makes this `EADDRINUSE` (as [`EngineError::Io`]), as the kernel's
    /// rdma_cm does.
    pub fn ep_listen(&self, ep: u32, port: u16, backlog: usize) -> Result<(), EngineError> {
        self.ep_listen_ps(ep, ndverbs_wire::cma::RDMA_PS_TCP, port, backlog)
    }

    /// Listens on `port` of rdma_cm port space `ps`: `RDMA_PS_TCP` as
    /// [`Nic::ep_listen`], or `RDMA_PS_UDP` (service ID `0x0111 << 16 |
    /// port`), whose SIDR_REQs are handed over by [`Nic::ep_get_request`]
    /// and answered with [`Nic::ep_accept_ud`] or [`Nic::ep_reject`]. On a
    /// shared port the service ID is registered host-wide, so each SIDR_REQ
    /// is steered to this process.
    pub fn ep_listen_ps(
        &self,
        ep: u32,
        ps: u16,
        port: u16,
        backlog: usize,
    ) -> Result<(), EngineError> {
        let sid = ndverbs_wire::cma::service_id(ps, port);
        let share = self.shared_port();
        let added = match &share {
            Some(s) => s.listen(sid)?,
            None => false,
        };
        let r = self.with_eps(|c, _| {
            c.eps.machine.listen_ps(&mut c.cm, ep, ps, port, backlog)?;
            if let Some(s) = &mut c.share {
                s.listeners.insert(ep, sid);
            }
            Ok(())
        });
        if let (Err(_), Some(s), true) = (&r, &share, added) {
            // Registered for this listen only: take it back.
            if let Err(e) = s.unlisten(sid) {
                tracing::warn!(error = %e, "cannot unregister a shared port listener");
            }
        }
        r
    }

    /// Waits on listening endpoint `listener` for a connection request and
    /// binds it to endpoint `new_ep` (several may wait at once).
    ///
    /// # Example
    ///
    /// ```
    /// # use ndverbs_engine::config::Progress;
    /// # use ndverbs_engine::nic::{Nic, QpInit, QpShared};
    /// # use ndverbs_engine::ep::*;
    /// # use ndverbs_proto::mem::Access;
    /// # use ndverbs_proto::rc::*;
    /// # use std::sync::Arc;
    /// # fn side(ip: &str) -> (Nic, Arc<QpShared>) {
    /// #     let ad = Nic::open(ip.parse().unwrap(), Progress::Thread).unwrap();
    /// #     let pd = ad.alloc_pd().unwrap();
    /// #     let (cq, _) = ad.create_cq(16).unwrap();
    /// #     let qp = ad.create_qp(QpInit { pd, send_cq: cq, recv_cq: cq, srq: None,
    /// #         caps: QpCaps::default(), max_recv_wr: 16, max_recv_sge: 1 }).unwrap();
    /// #     let (init, mask) = RcConnection { access: Access::ALL, ..RcConnection::new(0) }.init();
    /// #     ad.modify_qp(qp.qpn(), &init, mask).unwrap();
    /// #     (ad, qp)
    /// # }
    /// # fn cargs(to: &Nic, port: u16) -> ConnectArgs {
    /// #     ConnectArgs { remote: to.local(), remote_port: port, local_port: 40000, responder_resources: 1,
    /// #         initiator_depth: 1, retry_count: 7, rnr_retry_count: 7, path_mtu: PathMtu::Mtu1024,
    /// #         private_data: b"hello".to_vec() }
    /// # }
    /// use ndverbs_wire::cma;
    /// let ((a, qa), (b, _qb)) = (side("127.93.14.1"), side("127.93.14.2"));
    /// let (listener, eb, ea) = (b.create_ep()?, b.create_ep()?, a.create_ep()?);
    /// b.ep_listen(listener, 7000, 4)?;
    /// let request = b.ep_get_request(listener, eb)?;
    /// let _rep = a.ep_connect(ea, qa.ident(), cargs(&b, 7000))?;
    /// let req: RequestInfo = request.wait()?;
    /// assert_eq!((req.peer, req.peer_port, req.local), (a.local(), 40000, b.local()));
    /// assert_eq!(req.service_id, cma::service_id(cma::RDMA_PS_TCP, 7000));
    /// assert!(req.private_data.starts_with(b"hello"));
    /// assert_eq!(req.peer_read_limits, (1, 1));
    /// b.ep_reject(eb, b"not now")?; // or accept it
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ep_get_request(
        &self,
        listener: u32,
        new_ep: u32,
    ) -> Result<EpPending<RequestInfo>, EngineError> {
        self.with_eps(|c, _| {
            let id = c.eps.machine.get_request(&c.cm, listener, new_ep)?;
            Ok(c.eps.waiters.request(id))
        })
    }

    /// Connects endpoint `ep` with QP `qp` (in INIT). Completes when the REP
    /// arrives (then call [`Nic::ep_complete_connect`]), on REJ, or on timeout.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_engine::config::Progress;
    /// use ndverbs_engine::nic::{Nic, QpInit, QpShared};
    /// use ndverbs_engine::ep::{AcceptArgs, ConnectArgs};
    /// use ndverbs_proto::mem::Access;
    /// use ndverbs_proto::rc::*;
    /// use std::sync::Arc;
    /// /// A NIC with one QP in INIT (the CM takes it on to RTR and RTS).
    /// fn side(ip: &str) -> Result<(Nic, Arc<QpShared>), Box<dyn std::error::Error>> {
    ///     let ad = Nic::open(ip.parse()?, Progress::Thread)?;
    ///     let pd = ad.alloc_pd()?;
    ///     let (cq, _) = ad.create_cq(16)?;
    ///     let qp = ad.create_qp(QpInit { pd, send_cq: cq, recv_cq: cq, srq: None,
    ///         caps: QpCaps::default(), max_recv_wr: 16, max_recv_sge: 1 })?;
    ///     // INIT with every remote right; the CM takes the QP on to RTR and RTS.
    ///     let (init, mask) = RcConnection { access: Access::ALL, ..RcConnection::new(0) }.init();
    ///     ad.modify_qp(qp.qpn(), &init, mask)?;
    ///     Ok((ad, qp))
    /// }
    /// let ((a, qa), (b, qb)) = (side("127.93.11.1")?, side("127.93.11.2")?);
    /// // B listens on rdma_cm port 7000 and waits for a request on a fresh endpoint.
    /// let (listener, eb) = (b.create_ep()?, b.create_ep()?);
    /// b.ep_listen(listener, 7000, 4)?;
    /// let request = b.ep_get_request(listener, eb)?;
    /// // A connects: a REQ, completed by B's REP.
    /// let args = ConnectArgs {
    ///     remote: b.local(),
    ///     remote_port: 7000,
    ///     local_port: 40000,
    ///     responder_resources: 4,
    ///     initiator_depth: 4,
    ///     retry_count: 7,
    ///     rnr_retry_count: 7,
    ///     path_mtu: PathMtu::Mtu1024,
    ///     private_data: b"hello".to_vec(),
    /// };
    /// let ea = a.create_ep()?;
    /// let rep = a.ep_connect(ea, qa.ident(), args)?;
    /// assert!(request.wait()?.private_data.starts_with(b"hello"));
    /// let rtu = b.ep_accept(eb, qb.ident(), AcceptArgs {
    ///     responder_resources: 4, initiator_depth: 4, rnr_retry_count: 7, private_data: vec![] })?;
    /// rep.wait()?;
    /// a.ep_complete_connect(ea, qa.ident())?.wait()?; // A's QP to RTS, then the RTU
    /// rtu.wait()?;
    /// assert_eq!((qa.state(), qb.state()), (QpState::Rts, QpState::Rts));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ep_connect(
        &self,
        ep: u32,
        qp: QpIdent,
        args: ConnectArgs,
    ) -> Result<EpPending<ConnectInfo>, EngineError> {
        self.with_eps(|c, now| {
            let exists = c.tables.qp_ident(qp).is_some();
            let id = c
                .eps
                .machine
                .connect(now, &mut c.cm, ep, qp, args, exists)?;
            Ok(c.eps.waiters.connect(id))
        })
    }

    /// Resolves the rdma_cm UDP service `args` names from UD endpoint `ep`
    /// (SIDR): completes with the SIDR_REP's status, QPN, Q_Key and private
    /// data, or fails [`crate::ep::EpError::Timeout`] after the last
    /// retransmission, [`crate::ep::EpError::PortUnreachable`] on ICMP.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_engine::config::Progress;
    /// use ndverbs_engine::ep::SidrArgs;
    /// use ndverbs_engine::nic::Nic;
    /// use ndverbs_wire::cma::RDMA_PS_UDP;
    /// let a = Nic::open("127.93.16.1".parse().unwrap(), Progress::Thread)?;
    /// let b = Nic::open("127.93.16.2".parse().unwrap(), Progress::Thread)?;
    /// let (listener, eb, ea) = (b.create_ep()?, b.create_ep()?, a.create_ep()?);
    /// b.ep_listen_ps(listener, RDMA_PS_UDP, 7000, 4)?;
    /// let request = b.ep_get_request(listener, eb)?;
    /// let args = SidrArgs { remote: b.local(), remote_port: 7000, local_port: 40000,
    ///     private_data: b"hi".to_vec() };
    /// let rep = a.ep_resolve(ea, args)?;
    /// let req = request.wait()?;
    /// assert!(req.private_data.starts_with(b"hi"));
    /// b.ep_accept_ud(eb, 0x99, 0x0123_4567, b"there")?;
    /// let info = rep.wait()?;
    /// assert_eq!((info.status, info.qpn, info.qkey), (0, 0x99, 0x0123_4567));
    /// assert!(info.private_data.starts_with(b"there"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ep_resolve(
        &self,
        ep: u32,
        args: crate::ep::SidrArgs,
    ) -> Result<EpPending<crate::ep::SidrInfo>, EngineError> {
        self.with_eps(|c, now| {
            let id = c.eps.machine.resolve(now, &mut c.cm, ep, args)?;
            Ok(c.eps.waiters.resolve(id))
        })
    }

    /// Accepts the SIDR request handed over to `ep`: a SIDR_REP naming UD
    /// QP `qpn` and its `qkey` (the QP is the application's to set up).
    pub fn ep_accept_ud(
        &self,
        ep: u32,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), EngineError> {
        self.with_eps(|c, _| {
            c.eps
                .machine
                .accept_ud(&mut c.cm, ep, qpn, qkey, private_data)
        })
    }

    /// Active side, after Connect completed: QP to RTS, then RTU.
    ///
    /// # Example
    ///
    /// ```
    /// # use ndverbs_engine::config::Progress;
    /// # use ndverbs_engine::nic::{Nic, QpInit, QpShared};
    /// # use ndverbs_engine::ep::*;
    /// # use ndverbs_proto::mem::Access;
    /// # use ndverbs_proto::rc::*;
    /// # use std::sync::Arc;
    /// # fn side(ip: &str) -> (Nic, Arc<QpShared>) {
    /// #     let ad = Nic::open(ip.parse().unwrap(), Progress::Thread).unwrap();
    /// #     let pd = ad.alloc_pd().unwrap();
    /// #     let (cq, _) = ad.create_cq(16).unwrap();
    /// #     let qp = ad.create_qp(QpInit { pd, send_cq: cq, recv_cq: cq, srq: None,
    /// #         caps: QpCaps::default(), max_recv_wr: 16, max_recv_sge: 1 }).unwrap();
    /// #     let (init, mask) = RcConnection { access: Access::ALL, ..RcConnection::new(0) }.init();
    /// #     ad.modify_qp(qp.qpn(), &init, mask).unwrap();
    /// #     (ad, qp)
    /// # }
    /// # fn cargs(to: &Nic, port: u16) -> ConnectArgs {
    /// #     ConnectArgs { remote: to.local(), remote_port: port, local_port: 40000, responder_resources: 1,
    /// #         initiator_depth: 1, retry_count: 7, rnr_retry_count: 7, path_mtu: PathMtu::Mtu1024,
    /// #         private_data: b"hello".to_vec() }
    /// # }
    /// let ((a, qa), (b, qb)) = (side("127.93.13.1"), side("127.93.13.2"));
    /// let (listener, eb, ea) = (b.create_ep()?, b.create_ep()?, a.create_ep()?);
    /// b.ep_listen(listener, 7000, 4)?;
    /// let request = b.ep_get_request(listener, eb)?;
    /// let rep = a.ep_connect(ea, qa.ident(), ConnectArgs { initiator_depth: 2, ..cargs(&b, 7000) })?;
    /// request.wait()?;
    /// let _rtu = b.ep_accept(eb, qb.ident(), AcceptArgs { responder_resources: 8, initiator_depth: 8,
    ///     rnr_retry_count: 7, private_data: b"token=42".to_vec() })?;
    /// // What the REP said: B's private data (zero-padded to the REP's 196 bytes) and
    /// // the negotiated (inbound, outbound) READ limits.
    /// let info: ConnectInfo = rep.wait()?;
    /// assert!(info.private_data.starts_with(b"token=42"));
    /// assert_eq!(info.read_limits, (1, 2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ep_complete_connect(&self, ep: u32, qp: QpIdent) -> Result<EpPending<()>, EngineError> {
        self.with_eps(|c, now| {
            let id = c.eps.machine.complete_connect(now, &mut c.cm, ep, qp)?;
            Ok(c.eps.waiters.done(id))
        })
    }

    /// Passive side: QP to RTS, then REP; completes when the RTU arrives.
    ///
    /// # Example
    ///
    /// ```
    /// # use ndverbs_engine::config::Progress;
    /// # use ndverbs_engine::nic::{Nic, QpInit, QpShared};
    /// # use ndverbs_engine::ep::*;
    /// # use ndverbs_proto::mem::Access;
    /// # use ndverbs_proto::rc::*;
    /// # use std::sync::Arc;
    /// # fn side(ip: &str) -> (Nic, Arc<QpShared>) {
    /// #     let ad = Nic::open(ip.parse().unwrap(), Progress::Thread).unwrap();
    /// #     let pd = ad.alloc_pd().unwrap();
    /// #     let (cq, _) = ad.create_cq(16).unwrap();
    /// #     let qp = ad.create_qp(QpInit { pd, send_cq: cq, recv_cq: cq, srq: None,
    /// #         caps: QpCaps::default(), max_recv_wr: 16, max_recv_sge: 1 }).unwrap();
    /// #     let (init, mask) = RcConnection { access: Access::ALL, ..RcConnection::new(0) }.init();
    /// #     ad.modify_qp(qp.qpn(), &init, mask).unwrap();
    /// #     (ad, qp)
    /// # }
    /// # fn cargs(to: &Nic, port: u16) -> ConnectArgs {
    /// #     ConnectArgs { remote: to.local(), remote_port: port, local_port: 40000, responder_resources: 1,
    /// #         initiator_depth: 1, retry_count: 7, rnr_retry_count: 7, path_mtu: PathMtu::Mtu1024,
    /// #         private_data: b"hello".to_vec() }
    /// # }
    /// let ((a, qa), (b, qb)) = (side("127.93.12.1"), side("127.93.12.2"));
    /// let (listener, eb, ea) = (b.create_ep()?, b.create_ep()?, a.create_ep()?);
    /// b.ep_listen(listener, 7000, 4)?;
    /// let request = b.ep_get_request(listener, eb)?;
    /// let rep = a.ep_connect(ea, qa.ident(), cargs(&b, 7000))?; // asks for 1 READ each way
    /// request.wait()?;
    /// // Offer more than the peer asked for: the limits are clamped to its request.
    /// let args = AcceptArgs { responder_resources: 16, initiator_depth: 16, rnr_retry_count: 7,
    ///     private_data: b"welcome".to_vec() };
    /// let rtu = b.ep_accept(eb, qb.ident(), args)?;
    /// let info = rep.wait()?;
    /// a.ep_complete_connect(ea, qa.ident())?.wait()?;
    /// rtu.wait()?;
    /// assert_eq!(b.ep_info(eb)?.read_limits, (1, 1));
    /// assert!(info.private_data.starts_with(b"welcome"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ep_accept(
        &self,
        ep: u32,
        qp: QpIdent,
        args: AcceptArgs,
    ) -> Result<EpPending<()>, EngineError> {
        self.with_eps(|c, now| {
            let id = c.eps.machine.accept(now, &mut c.cm, ep, qp, args)?;
            Ok(c.eps.waiters.done(id))
        })
    }

    /// Rejects the connection request (passive) or the REP (active) bound to `ep`.
    pub fn ep_reject(&self, ep: u32, private_data: &[u8]) -> Result<(), EngineError> {
        self.with_eps(|c, now| c.eps.machine.reject(now, &mut c.cm, ep, private_data))
    }

    /// Disconnects an established connection: DREQ (or DREP if the peer's
    /// DREQ arrived), then QP `qp` to ERR, which flushes every outstanding
    /// work request. Completes when a DREP arrives, the DREQ times out
    /// ([`crate::ep::EpError::Timeout`]) or the DREP is sent — always after
    /// the flush completions are on the CQ; while our DREQ is outstanding
    /// the QP stays as it is. After the peer ended the connection with a REJ
    /// only the flush is left. A QP released before the QP phase:
    /// [`crate::ep::EpError::NoQp`] (ND: `ND_CANCELED`), and no other QP is
    /// touched.
    ///
    /// Refused with [`EngineError::NotConnected`] (ND:
    /// `ND_CONNECTION_INVALID`) on an endpoint that never connected, whose
    /// connection is still being set up (nothing is sent, the QP is
    /// untouched), or whose connection is already over.
    pub fn ep_disconnect(&self, ep: u32, qp: QpIdent) -> Result<EpPending<()>, EngineError> {
        self.with_eps(|c, now| {
            let id = c.eps.machine.disconnect(now, &mut c.cm, ep, qp)?;
            Ok(c.eps.waiters.done(id))
        })
    }

    /// Completes when the peer's DREQ arrives — at once if it already did on
    /// this connection. A pending one stays pending when our own Disconnect
    /// finishes first (cancel or destroy ends it,
    /// [`crate::ep::EpError::Canceled`]) and fails
    /// [`crate::ep::EpError::Aborted`] when the connection fails without a
    /// DREQ. Refused with [`EngineError::NotConnected`] on an endpoint that
    /// never connected, or whose connection ended without a DREQ.
    pub fn ep_notify_disconnect(&self, ep: u32) -> Result<EpPending<()>, EngineError> {
        self.with_eps(|c, _| {
            let id = c.eps.machine.notify_disconnect(ep)?;
            Ok(c.eps.waiters.done(id))
        })
    }

    /// Completes every parked request of `ep` with [`crate::ep::EpError::Canceled`];
    /// a Connect or Accept in progress is abandoned (its CM endpoint destroyed).
    pub fn ep_cancel(&self, ep: u32) -> Result<(), EngineError> {
        self.with_eps(|c, now| c.eps.machine.cancel(now, &mut c.cm, ep))
    }

    /// Destroys an endpoint: parked requests complete
    /// [`crate::ep::EpError::Canceled`] and the CM endpoint goes the Linux way
    /// (REJ, DREQ or DREP as its state demands). Works after device removal.
    pub fn destroy_ep(&self, ep: u32) -> Result<(), EngineError> {
        let _nic = self.shared().span.enter();
        let now = self.now();
        let mut guard = self.core_lock();
        let c = &mut *guard;
        let r = c.eps.machine.destroy(now, &mut c.cm, ep);
        c.drive_eps(now);
        c.finish_step(self.shared(), now);
        let unlisten = c
            .share
            .as_mut()
            .and_then(|s| Some((s.port.clone(), s.listeners.remove(&ep)?)));
        drop(guard);
        if let Some((port, sid)) = unlisten {
            // After the core lock is released: the reconcile waits for this
            // engine's answer to its probe.
            if let Err(e) = port.unlisten(sid) {
                tracing::warn!(error = %e, "cannot unregister a shared port listener");
            }
        }
        Ok(r?)
    }
}
