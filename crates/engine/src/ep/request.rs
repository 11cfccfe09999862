//! The queued requests (Connect, CompleteConnect, Accept, Disconnect) and
//! their phases: how the head of an endpoint's queue runs, what it waits
//! for, and how a QP operation's result takes it on.

use super::machine::{Action, Endpoints, Outcome, QpError, QpOp, RequestId, State};
use super::types::{AcceptArgs, ConnectArgs, EpError, QpIdent};
use ndverbs_proto::cm::{
    AcceptParams, CmAgent, CmState, ConnectParams, DisconnectStarted, EndpointId, QpSetup,
};
use ndverbs_proto::time::Instant;
use ndverbs_wire::cma;
use tracing::Span;

/// A request on an endpoint's queue: the QP it names, its span (open until
/// it completes) and where it is.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) id: RequestId,
    /// The QP the request names; every QP operation acts on this QP, and
    /// on no other that took its number since.
    pub(crate) qp: QpIdent,
    pub(crate) span: Span,
    pub(crate) job: Job,
}

/// What a request does, with its phase.
#[derive(Debug)]
pub(crate) enum Job {
    Connect(ConnectArgs, ConnectPhase),
    CompleteConnect(CompletePhase),
    Accept(AcceptArgs, AcceptPhase),
    Disconnect(DisconnectPhase),
}

/// Connect: INIT check, then REQ and wait for the REP.
#[derive(Debug)]
pub(crate) enum ConnectPhase {
    Queued,
    /// [`QpOp::CheckInit`] is out.
    CheckingQp,
    /// The REQ is out.
    AwaitingRep,
}

/// CompleteConnect: QP to RTS, then the RTU.
#[derive(Debug)]
pub(crate) enum CompletePhase {
    Queued,
    /// [`QpOp::ToRts`] is out.
    QpToRts {
        cm: EndpointId,
    },
}

/// Accept: INIT check, QP to RTS, then the REP and wait for the RTU.
#[derive(Debug)]
pub(crate) enum AcceptPhase {
    Queued,
    /// [`QpOp::CheckInit`] is out.
    CheckingQp,
    /// [`QpOp::ToRts`] is out; the REP goes once the QP answers.
    QpToRts {
        cm: EndpointId,
        params: Box<AcceptParams>,
        setup: QpSetup,
    },
    /// The REP is out.
    AwaitingRtu,
}

/// Disconnect: DREQ (wait for DREP or timeout) or DREP, then QP to ERR.
#[derive(Debug)]
pub(crate) enum DisconnectPhase {
    Queued,
    /// Our DREQ is out.
    AwaitingDrep,
    /// [`QpOp::ToError`] is out; the request then ends with `outcome`.
    QpToError {
        outcome: Result<(), EpError>,
        qp_span: Span,
    },
}

impl Job {
    pub(crate) fn connect(args: ConnectArgs) -> Self {
        Job::Connect(args, ConnectPhase::Queued)
    }
    pub(crate) fn complete_connect() -> Self {
        Job::CompleteConnect(CompletePhase::Queued)
    }
    pub(crate) fn accept(args: AcceptArgs) -> Self {
        Job::Accept(args, AcceptPhase::Queued)
    }
    pub(crate) fn disconnect() -> Self {
        Job::Disconnect(DisconnectPhase::Queued)
    }

    /// The request failed with `e` (a Connect returns what the REP says,
    /// the others nothing).
    pub(crate) fn failed(&self, e: EpError) -> Outcome {
        match self {
            Job::Connect(..) => Outcome::Connect(Err(e)),
            _ => Outcome::Done(Err(e)),
        }
    }

    /// A connection being set up (Cancel abandons it).
    pub(crate) fn sets_up(&self) -> bool {
        matches!(self, Job::Connect(..) | Job::Accept(..))
    }

    /// A Connect waiting for the REP.
    pub(crate) fn awaits_rep(&self) -> bool {
        matches!(self, Job::Connect(_, ConnectPhase::AwaitingRep))
    }

    /// An Accept waiting for the RTU.
    pub(crate) fn awaits_rtu(&self) -> bool {
        matches!(self, Job::Accept(_, AcceptPhase::AwaitingRtu))
    }

    /// A Connect waiting for the REP, or an Accept waiting for the RTU.
    pub(crate) fn awaits_setup(&self) -> bool {
        self.awaits_rep() || self.awaits_rtu()
    }

    /// A Disconnect waiting for the DREP.
    pub(crate) fn awaits_drep(&self) -> bool {
        matches!(self, Job::Disconnect(DisconnectPhase::AwaitingDrep))
    }
}

/// What a step did with the request.
pub(crate) enum Step {
    /// It completed: run the next one.
    Done,
    /// It waits (for a QP result or a CM event): the queue stops here.
    Wait(Request),
}

impl QpError {
    fn into_ep_error(self, qpn: u32) -> EpError {
        match self {
            QpError::Gone => EpError::NoQp(qpn),
            QpError::NotInit => EpError::InvalidState("the QP is not in INIT"),
            QpError::Refused(e) => EpError::Modify(e),
            QpError::OtherConnection => {
                EpError::InvalidState("the QP was moved for another connection")
            }
        }
    }
}

impl Endpoints {
    /// Runs the requests at the head of endpoint `ep`'s queue as far as they go.
    pub(crate) fn run(&mut self, now: Instant, cm: &mut CmAgent, ep: u32) {
        loop {
            let Some(req) = self.eps.get_mut(&ep).and_then(|e| e.requests.pop_front()) else {
                return;
            };
            let step = {
                let span = req.span.clone();
                let _in_request = span.enter();
                self.start(now, cm, ep, req)
            };
            self.note_cm_state(cm, ep);
            if let Step::Wait(_) = step {
                return self.park(ep, step);
            }
        }
    }

    /// The core's answer to a request's QP operation: the request goes on,
    /// then the rest of its endpoint's queue. An answer for a request that
    /// is no longer waiting (cancelled meanwhile) is dropped.
    pub fn handle_qp_result(
        &mut self,
        now: Instant,
        cm: &mut CmAgent,
        request: RequestId,
        result: Result<(), QpError>,
    ) {
        let ep = request.ep;
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        if e.requests.front().is_none_or(|r| r.id != request) {
            return;
        }
        let Some(req) = e.requests.pop_front() else {
            return;
        };
        let step = {
            let span = req.span.clone();
            let _in_request = span.enter();
            self.resume(now, cm, ep, req, result)
        };
        self.note_cm_state(cm, ep);
        match step {
            Step::Wait(_) => self.park(ep, step),
            Step::Done => self.run(now, cm, ep),
        }
    }

    fn qp_op(&mut self, req: &Request, op: QpOp, span: Span) {
        self.actions.push_back(Action::Qp {
            request: req.id,
            qp: req.qp,
            op,
            span,
        });
    }

    fn fail(&mut self, req: Request, e: EpError) -> Step {
        let outcome = req.job.failed(e);
        self.finish(&req.span, req.id, outcome);
        Step::Done
    }

    /// Advances the head request; a request already waiting keeps waiting.
    fn start(&mut self, now: Instant, cm: &mut CmAgent, ep: u32, mut req: Request) -> Step {
        let state = self.eps.get(&ep).map(|e| (e.state.cm(), e.state.setup()));
        let (cm_id, setup) = state.unwrap_or((None, None));
        match &mut req.job {
            Job::Connect(_, phase @ ConnectPhase::Queued) => {
                *phase = ConnectPhase::CheckingQp;
                let span = req.span.clone();
                self.qp_op(&req, QpOp::CheckInit, span);
                Step::Wait(req)
            }
            Job::CompleteConnect(phase @ CompletePhase::Queued) => {
                let (Some(setup), Some(cm_id)) = (setup, cm_id) else {
                    return self.fail(
                        req,
                        EpError::InvalidState("CompleteConnect before Connect completed"),
                    );
                };
                let qp_span = tracing::debug_span!("qp_phase");
                *phase = CompletePhase::QpToRts { cm: cm_id };
                self.qp_op(&req, QpOp::ToRts(setup), qp_span);
                Step::Wait(req)
            }
            Job::Accept(_, phase @ AcceptPhase::Queued) => {
                if cm_id.is_none() {
                    return self.fail(
                        req,
                        EpError::InvalidState("Accept without a connection request"),
                    );
                }
                *phase = AcceptPhase::CheckingQp;
                let span = req.span.clone();
                self.qp_op(&req, QpOp::CheckReady, span);
                Step::Wait(req)
            }
            Job::Disconnect(DisconnectPhase::Queued) => {
                // Our DREQ is already out (its Disconnect was cancelled):
                // this one waits for the DREP, the QP untouched meanwhile.
                let dreq_out = self
                    .eps
                    .get(&ep)
                    .is_some_and(|e| matches!(e.state, State::Disconnecting { .. }));
                if dreq_out {
                    tracing::debug_span!("cm_phase")
                        .in_scope(|| tracing::debug!("our DREQ is out; waiting for the DREP"));
                    req.job = Job::Disconnect(DisconnectPhase::AwaitingDrep);
                    return Step::Wait(req);
                }
                // Only a connection that is up (or whose peer sent its DREQ)
                // has something to say on the wire; after a REJ, or behind
                // a first Disconnect that finished, the QP phase is all.
                let on_the_wire = self.eps.get(&ep).is_some_and(|e| {
                    matches!(
                        e.state,
                        State::Connected { .. } | State::PeerDisconnected { .. }
                    )
                });
                let started = tracing::debug_span!("cm_phase").in_scope(|| {
                    let started = match cm_id {
                        Some(cm_id) if on_the_wire => cm.disconnect(now, cm_id),
                        _ => Ok(DisconnectStarted::AlreadyDone),
                    };
                    match &started {
                        Ok(DisconnectStarted::DreqSent) => {
                            tracing::debug!("DREQ sent; waiting for the DREP")
                        }
                        Ok(DisconnectStarted::DrepSent) => tracing::debug!("DREP sent"),
                        Ok(DisconnectStarted::AlreadyDone) => {
                            tracing::debug!("connection already over")
                        }
                        Err(e) => tracing::debug!(error = %e, "nothing to disconnect on the wire"),
                    }
                    started
                });
                match started {
                    Ok(DisconnectStarted::DreqSent) => {
                        if let Some(e) = self.eps.get_mut(&ep) {
                            if let State::Connected { cm, setup }
                            | State::PeerDisconnected { cm, setup } = e.state
                            {
                                e.state = State::Disconnecting { cm, setup };
                            }
                        }
                        req.job = Job::Disconnect(DisconnectPhase::AwaitingDrep);
                        Step::Wait(req)
                    }
                    // A DREP, or nothing to say on the wire (the connection
                    // is over, or was never up): the QP phase still runs so
                    // outstanding requests flush.
                    Ok(DisconnectStarted::DrepSent | DisconnectStarted::AlreadyDone) | Err(_) => {
                        self.flush(ep, req, Ok(()))
                    }
                }
            }
            _ => Step::Wait(req),
        }
    }

    /// Puts a request that waits back at the head of `ep`'s queue.
    pub(crate) fn park(&mut self, ep: u32, step: Step) {
        if let Step::Wait(req) = step {
            if let Some(e) = self.eps.get_mut(&ep) {
                e.requests.push_front(req);
            }
        }
    }

    /// The QP phase of a Disconnect: the connection is over, then QP to
    /// ERR; the request completes with `outcome` when the QP answers (once
    /// the flush completions are on the CQ). Parked NotifyDisconnects stay:
    /// only a DREQ, cancel or destroy ends them.
    pub(crate) fn flush(
        &mut self,
        ep: u32,
        mut req: Request,
        outcome: Result<(), EpError>,
    ) -> Step {
        if let Some(e) = self.eps.get_mut(&ep) {
            e.state.close();
        }
        let qp_span = req.span.in_scope(|| tracing::debug_span!("qp_phase"));
        req.job = Job::Disconnect(DisconnectPhase::QpToError {
            outcome,
            qp_span: qp_span.clone(),
        });
        self.qp_op(&req, QpOp::ToError, qp_span);
        Step::Wait(req)
    }

    /// Takes the head request on with its QP operation's result.
    fn resume(
        &mut self,
        now: Instant,
        cm: &mut CmAgent,
        ep: u32,
        mut req: Request,
        result: Result<(), QpError>,
    ) -> Step {
        let qpn = req.qp.qpn;
        let result = result.map_err(|e| e.into_ep_error(qpn));
        match &mut req.job {
            Job::Connect(args, phase @ ConnectPhase::CheckingQp) => {
                if let Err(e) = result {
                    return self.fail(req, e);
                }
                let _phase = tracing::debug_span!("cm_phase").entered();
                let psn = self.keys.psn();
                let service_id = cma::service_id(cma::RDMA_PS_TCP, args.remote_port);
                let mut p = ConnectParams::new(service_id, args.remote, qpn, psn);
                p.local_port = args.local_port;
                p.responder_resources = args.responder_resources;
                p.initiator_depth = args.initiator_depth;
                p.retry_count = args.retry_count;
                p.rnr_retry_count = args.rnr_retry_count;
                p.path_mtu = args.path_mtu as u8;
                p.private_data = args.private_data.clone();
                let cm_id = match cm.connect(now, p) {
                    Ok(id) => id,
                    Err(e) => return self.fail(req, e.into()),
                };
                *phase = ConnectPhase::AwaitingRep;
                let (remote, port) = (args.remote, args.remote_port);
                if let Some(e) = self.eps.get_mut(&ep) {
                    e.state = State::Connecting { cm: cm_id };
                    e.info.peer = Some(remote);
                    e.info.peer_port = port;
                    e.info.dreq_received = false;
                    e.local_port = args.local_port;
                }
                self.by_cm.insert(cm_id, ep);
                tracing::debug!(peer = %remote, port, "REQ sent; waiting for the REP");
                Step::Wait(req)
            }
            Job::CompleteConnect(CompletePhase::QpToRts { cm: cm_id }) => {
                let cm_id = *cm_id;
                let r = result.and_then(|()| {
                    let _phase = tracing::debug_span!("cm_phase").entered();
                    cm.complete_connect(now, cm_id, &[])?;
                    tracing::debug!("RTU sent");
                    Ok(())
                });
                if r.is_ok() {
                    if let Some(e) = self.eps.get_mut(&ep) {
                        if let State::RepReceived { cm, setup } = e.state {
                            e.state = State::Connected { cm, setup };
                        }
                    }
                }
                self.finish(&req.span, req.id, Outcome::Done(r));
                Step::Done
            }
            Job::Accept(args, phase @ AcceptPhase::CheckingQp) => {
                if let Err(e) = result {
                    return self.fail(req, e);
                }
                let Some((cm_id, psn)) = self.eps.get(&ep).and_then(|e| match e.state {
                    State::RequestReceived { cm, psn } => Some((cm, psn)),
                    _ => None,
                }) else {
                    let e = EpError::InvalidState("Accept without a connection request");
                    return self.fail(req, e);
                };
                let mut a = AcceptParams::new(qpn, psn);
                a.responder_resources = args.responder_resources;
                a.initiator_depth = args.initiator_depth;
                a.rnr_retry_count = args.rnr_retry_count;
                a.private_data = args.private_data.clone();
                // QP phase first: the QP must answer before the peer sees the REP.
                let qp_span = tracing::debug_span!("qp_phase");
                let setup = match qp_span.in_scope(|| cm.accept_qp_setup(cm_id, &a)) {
                    Ok(s) => s,
                    Err(e) => return self.fail(req, e.into()),
                };
                *phase = AcceptPhase::QpToRts {
                    cm: cm_id,
                    params: Box::new(a),
                    setup,
                };
                self.qp_op(&req, QpOp::ToRts(setup), qp_span);
                Step::Wait(req)
            }
            Job::Accept(_, phase @ AcceptPhase::QpToRts { .. }) => {
                let AcceptPhase::QpToRts {
                    cm: cm_id,
                    params,
                    setup,
                } = std::mem::replace(phase, AcceptPhase::AwaitingRtu)
                else {
                    unreachable!("matched above")
                };
                if let Err(e) = result {
                    return self.fail(req, e);
                }
                let _phase = tracing::debug_span!("cm_phase").entered();
                if let Err(e) = cm.accept(now, cm_id, *params) {
                    return self.fail(req, e.into());
                }
                if let Some(e) = self.eps.get_mut(&ep) {
                    e.state = State::Accepting { cm: cm_id, setup };
                    e.info.read_limits = (setup.max_dest_rd_atomic, setup.max_rd_atomic);
                }
                tracing::debug!("REP sent; waiting for the RTU");
                Step::Wait(req)
            }
            Job::Disconnect(DisconnectPhase::QpToError { outcome, qp_span }) => {
                // A QP released before this phase: the CM phase ran, but
                // the request's QP is gone, so it ends cancelled (ND:
                // `ND_CANCELED`, "the queue pair was removed").
                let outcome = match result {
                    Err(EpError::NoQp(_)) => {
                        qp_span.in_scope(|| tracing::debug!("the QP is gone; nothing to flush"));
                        Err(EpError::NoQp(qpn))
                    }
                    _ => std::mem::replace(outcome, Ok(())),
                };
                // The connection's QPN stays out of reuse while its CM
                // connection is in time-wait (time-wait's end releases it;
                // reserving after it would keep the number forever).
                let cm_id = self.eps.get(&ep).and_then(|e| e.state.cm());
                if cm_id.is_some_and(|id| cm.state(id) == Some(CmState::Timewait)) {
                    self.actions.push_back(Action::ReserveQpn(qpn));
                }
                self.finish(&req.span, req.id, Outcome::Done(outcome));
                Step::Done
            }
            _ => Step::Wait(req),
        }
    }
}
