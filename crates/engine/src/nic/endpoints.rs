//! The core's side of the endpoint machine ([`crate::ep`]): the pump that
//! applies the machine's actions, the QP operations themselves, and the
//! application's `Nic::ep_*` calls.

use super::{Core, Nic};
use crate::ep::{
    AcceptArgs, Action, ConnectArgs, ConnectInfo, EpInfo, EpPending, QpError, QpOp, Refused,
    RequestInfo,
};
use crate::error::EngineError;
use ndverbs_proto::cm::{CmEvent, QpSetup};
use ndverbs_proto::rc::{AttrMask, QpAttr, QpState, RcConnection};
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
                    qpn,
                    op,
                    span,
                } => {
                    let r = span.in_scope(|| self.apply_qp_op(qpn, op));
                    self.eps
                        .machine
                        .handle_qp_result(now, &mut self.cm, request, r);
                }
                Action::Complete { request, outcome } => {
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

    fn apply_qp_op(&mut self, qpn: u32, op: QpOp) -> Result<(), QpError> {
        match op {
            QpOp::CheckInit => match self.tables.qps.get(&qpn) {
                None => Err(QpError::Gone),
                Some(e) if e.qp.state() == QpState::Init => Ok(()),
                Some(_) => Err(QpError::NotInit),
            },
            QpOp::ToRts(s) => self.qp_to_rts(qpn, &s),
            QpOp::ToError => self.qp_to_error(qpn),
        }
    }

    /// Applies what the CM negotiated to QP `qpn`: INIT → RTR → RTS.
    fn qp_to_rts(&mut self, qpn: u32, s: &QpSetup) -> Result<(), QpError> {
        let Some(e) = self.tables.qps.get_mut(&qpn) else {
            return Err(QpError::Gone);
        };
        // The QP arrives in INIT, where the application set its access
        // rights: only RTR's and RTS's own attributes change.
        let c = RcConnection::from(s);
        let (rtr, rtr_mask) = c.rtr();
        e.modify(&rtr, rtr_mask).map_err(QpError::Refused)?;
        e.peer = Some(s.remote_addr);
        let (rts, rts_mask) = c.rts();
        e.modify(&rts, rts_mask).map_err(QpError::Refused)?;
        self.touched.push(qpn);
        Ok(())
    }

    /// Moves QP `qpn` to ERR, flushing it.
    fn qp_to_error(&mut self, qpn: u32) -> Result<(), QpError> {
        let Some(e) = self.tables.qps.get_mut(&qpn) else {
            return Err(QpError::Gone);
        };
        e.absorb_posts();
        if !matches!(e.qp.state(), QpState::Err | QpState::Reset) {
            let _ = e.modify(
                &QpAttr {
                    qp_state: QpState::Err,
                    ..QpAttr::default()
                },
                AttrMask::STATE,
            );
        }
        self.touched.push(qpn);
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
    pub fn ep_info(&self, ep: u32) -> Result<EpInfo, EngineError> {
        self.with_eps(|c, _| c.eps.machine.info(&c.cm, ep))
    }

    /// Listens for connection requests on rdma_cm TCP `port` (service ID
    /// `0x0106 << 16 | port`), queueing at most `backlog` unanswered ones.
    pub fn ep_listen(&self, ep: u32, port: u16, backlog: usize) -> Result<(), EngineError> {
        self.with_eps(|c, _| c.eps.machine.listen(&mut c.cm, ep, port, backlog))
    }

    /// Waits on listening endpoint `listener` for a connection request and
    /// binds it to endpoint `new_ep` (several may wait at once).
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

    /// Connects endpoint `ep` with QP `qpn` (in INIT). Completes when the REP
    /// arrives (then call [`Nic::ep_complete_connect`]), on REJ, or on timeout.
    pub fn ep_connect(
        &self,
        ep: u32,
        qpn: u32,
        args: ConnectArgs,
    ) -> Result<EpPending<ConnectInfo>, EngineError> {
        self.with_eps(|c, now| {
            let exists = c.tables.qps.contains_key(&qpn);
            let id = c
                .eps
                .machine
                .connect(now, &mut c.cm, ep, qpn, args, exists)?;
            Ok(c.eps.waiters.connect(id))
        })
    }

    /// Active side, after Connect completed: QP to RTS, then RTU.
    pub fn ep_complete_connect(&self, ep: u32, qpn: u32) -> Result<EpPending<()>, EngineError> {
        self.with_eps(|c, now| {
            let id = c.eps.machine.complete_connect(now, &mut c.cm, ep, qpn)?;
            Ok(c.eps.waiters.done(id))
        })
    }

    /// Passive side: QP to RTS, then REP; completes when the RTU arrives.
    pub fn ep_accept(
        &self,
        ep: u32,
        qpn: u32,
        args: AcceptArgs,
    ) -> Result<EpPending<()>, EngineError> {
        self.with_eps(|c, now| {
            let id = c.eps.machine.accept(now, &mut c.cm, ep, qpn, args)?;
            Ok(c.eps.waiters.done(id))
        })
    }

    /// Rejects the connection request (passive) or the REP (active) bound to `ep`.
    pub fn ep_reject(&self, ep: u32, private_data: &[u8]) -> Result<(), EngineError> {
        self.with_eps(|c, now| c.eps.machine.reject(now, &mut c.cm, ep, private_data))
    }

    /// Disconnects: DREQ (or DREP if the peer's DREQ arrived), then QP
    /// `qpn` to ERR. Completes when a DREP arrives, the DREQ times out
    /// ([`super::EpError::Timeout`]) or the DREP is sent.
    ///
    /// Refused with [`EngineError::NotConnected`] on an endpoint that never
    /// connected or whose connection is already over (ND: `ND_CONNECTION_INVALID`).
    pub fn ep_disconnect(&self, ep: u32, qpn: u32) -> Result<EpPending<()>, EngineError> {
        self.with_eps(|c, now| {
            let id = c.eps.machine.disconnect(now, &mut c.cm, ep, qpn)?;
            Ok(c.eps.waiters.done(id))
        })
    }

    /// Completes when the peer's DREQ arrives — at once if it already did or
    /// the connection is already over; [`super::EpError::Disconnected`] if our
    /// own Disconnect finishes first. Refused with
    /// [`EngineError::NotConnected`] on an endpoint that never connected.
    pub fn ep_notify_disconnect(&self, ep: u32) -> Result<EpPending<()>, EngineError> {
        self.with_eps(|c, _| {
            let id = c.eps.machine.notify_disconnect(ep)?;
            Ok(c.eps.waiters.done(id))
        })
    }

    /// Completes every parked request of `ep` with [`super::EpError::Canceled`];
    /// a Connect or Accept in progress is abandoned (its CM endpoint destroyed).
    pub fn ep_cancel(&self, ep: u32) -> Result<(), EngineError> {
        self.with_eps(|c, now| c.eps.machine.cancel(now, &mut c.cm, ep))
    }

    /// Destroys an endpoint: parked requests complete
    /// [`super::EpError::Canceled`] and the CM endpoint goes the Linux way
    /// (REJ, DREQ or DREP as its state demands). Works after device removal.
    pub fn destroy_ep(&self, ep: u32) -> Result<(), EngineError> {
        let _nic = self.shared().span.enter();
        let now = self.now();
        let mut guard = self.core_lock();
        let c = &mut *guard;
        let r = c.eps.machine.destroy(now, &mut c.cm, ep);
        c.drive_eps(now);
        c.finish_step(self.shared(), now);
        Ok(r?)
    }
}
