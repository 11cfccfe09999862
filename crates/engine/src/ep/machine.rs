//! [`Endpoints`]: the endpoint table, each endpoint's [`State`], and the
//! calls the application makes. The requests' phases are in `request.rs`,
//! the CM events in `events.rs`.

use super::request::{Job, Request};
use super::types::{AcceptArgs, ConnectArgs, ConnectInfo, EpError, EpInfo, QpIdent, RequestInfo};
use crate::keys::KeyGen;
use crate::resources::CmIdRes;
use ndverbs_proto::cm::{
    sidr_status, CmAgent, CmError, CmState, ConnectRequest, EndpointId, QpSetup, SidrAnswer,
    SidrArgs, SidrInfo, SidrParams,
};
use ndverbs_proto::rc::ModifyError;
use ndverbs_proto::time::Instant;
use ndverbs_wire::cma;
use std::collections::{BTreeMap, HashMap, VecDeque};
use tracing::Span;

/// Names one request: the endpoint it was made on and a number unique in
/// the table. The core keys its completion handles by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId {
    pub(crate) ep: u32,
    seq: u64,
}

impl RequestId {
    /// The endpoint the request was made on.
    pub fn ep(&self) -> u32 {
        self.ep
    }
}

/// A QP operation a request needs; the core answers with
/// [`Endpoints::handle_qp_result`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QpOp {
    /// Is the QP in INIT? A connection starts from INIT (rdma_cm and ND move
    /// it on from there): any other state would fail only after the CM
    /// exchange began, leaving the peer waiting for a REP that never comes.
    CheckInit,
    /// Accept's check: is the QP in INIT, or already past it (RTR, RTS:
    /// the application moved it itself, see [`QpOp::ToRts`])?
    CheckReady,
    /// INIT → RTR → RTS with what the CM negotiated. A QP the application
    /// already moved to RTR or RTS itself (rdma_cm's `conn_param->qp_num`
    /// mode, with the attributes [`ConnectInfo::qp`] or
    /// [`RequestInfo::qp`] gave it) is left where it is, provided it was
    /// moved for this connection: its peer QPN and receive PSN (and in RTS
    /// its send PSN) are the negotiated ones, else
    /// [`QpError::OtherConnection`]. The rest (MTU, read limits, timeouts)
    /// is the application's choice, as with Linux, which never touches
    /// such a QP.
    ToRts(QpSetup),
    /// To ERR, which flushes every outstanding work request.
    ToError,
}

/// Why a QP operation did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QpError {
    /// No QP with the number the request named.
    Gone,
    /// [`QpOp::CheckInit`]: the QP is in another state.
    NotInit,
    /// The QP refused the transition.
    Refused(ModifyError),
    /// [`QpOp::ToRts`]: the application moved the QP past INIT for another
    /// connection (peer QPN or PSNs differ from the negotiated ones).
    OtherConnection,
}

/// How a request ended, typed by what it returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Connect.
    Connect(Result<ConnectInfo, EpError>),
    /// GetConnectionRequest.
    Request(Result<RequestInfo, EpError>),
    /// CompleteConnect, Accept, Disconnect, NotifyDisconnect.
    Done(Result<(), EpError>),
    /// Resolve (SIDR, a UD endpoint).
    Resolve(Result<SidrInfo, EpError>),
}

impl Outcome {
    /// How the request failed, if it did.
    pub(super) fn error(&self) -> Option<&EpError> {
        match self {
            Outcome::Connect(r) => r.as_ref().err(),
            Outcome::Request(r) => r.as_ref().err(),
            Outcome::Done(r) => r.as_ref().err(),
            Outcome::Resolve(r) => r.as_ref().err(),
        }
    }
}

/// What the machine asks the core to do, in order.
#[derive(Debug)]
pub enum Action {
    /// Run `op` on QP `qp` inside `span` (the request's `qp_phase`, or the
    /// request itself for the INIT check), then hand the result back with
    /// [`Endpoints::handle_qp_result`] before anything else: the request's
    /// endpoint waits for it. A QP with `qp`'s number but another
    /// generation is not `qp`: the answer is [`QpError::Gone`].
    Qp {
        request: RequestId,
        qp: QpIdent,
        op: QpOp,
        span: Span,
    },
    /// Deliver a request's outcome once the step's packets are out (an
    /// application that exits as soon as its Disconnect completes must not
    /// take the DREP with it).
    Complete {
        request: RequestId,
        outcome: Outcome,
    },
    /// Keep this QPN from being reused: its connection is in time-wait.
    ReserveQpn(u32),
    /// Time-wait is over: this QPN may be reused.
    ReleaseQpn(u32),
}

/// Why a call was refused at once (nothing was queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refused {
    /// No endpoint with this id.
    NoEndpoint(u32),
    /// No QP with this number.
    NoQp(u32),
    /// The endpoint (or the service ID) is in use.
    Busy(&'static str),
    /// The call does not apply.
    InvalidArgument(&'static str),
    /// The endpoint has no connection (ND: `ND_CONNECTION_INVALID`).
    NotConnected,
}

/// Where an endpoint is in its life (WinVerbs' endpoint states, with the
/// CM endpoint it is bound to and what the CM negotiated for the QP).
#[derive(Debug)]
pub(crate) enum State {
    /// Fresh, or its connection setup abandoned: bound to nothing.
    Idle,
    /// Listening on a service ID.
    Listening(Listener),
    /// Active: the REQ is out; the Connect waits for the REP.
    Connecting { cm: EndpointId },
    /// UD: our SIDR_REQ is out; the Resolve waits for the SIDR_REP.
    Resolving { cm: EndpointId },
    /// Active: the REP arrived; CompleteConnect (or Reject) comes next.
    RepReceived { cm: EndpointId, setup: QpSetup },
    /// Passive: a connection request was handed over; Accept or Reject.
    /// `psn` is our starting PSN, chosen when the request was handed over
    /// (the application may set its QP up with it before accepting).
    RequestReceived { cm: EndpointId, psn: u32 },
    /// Passive: the REP is out; the Accept waits for the RTU.
    Accepting { cm: EndpointId, setup: QpSetup },
    /// Connected.
    Connected { cm: EndpointId, setup: QpSetup },
    /// The peer ended the established connection with a REJ (its Accept
    /// timed out waiting for our RTU, or it gave up): nothing is left to
    /// say on the wire, but our QP is still up, so a Disconnect only flushes
    /// it.
    Broken { cm: EndpointId, setup: QpSetup },
    /// The peer's DREQ arrived (our Disconnect will answer with the DREP).
    PeerDisconnected { cm: EndpointId, setup: QpSetup },
    /// Our DREQ is out; the Disconnect waits for the DREP.
    Disconnecting { cm: EndpointId, setup: QpSetup },
    /// The connection is over: disconnected, rejected, timed out.
    Closed {
        cm: EndpointId,
        setup: Option<QpSetup>,
    },
}

impl State {
    /// The CM endpoint of the connection (none when idle or listening).
    pub(crate) fn cm(&self) -> Option<EndpointId> {
        match *self {
            State::Idle | State::Listening(_) => None,
            State::Connecting { cm }
            | State::Resolving { cm }
            | State::RepReceived { cm, .. }
            | State::RequestReceived { cm, .. }
            | State::Accepting { cm, .. }
            | State::Connected { cm, .. }
            | State::Broken { cm, .. }
            | State::PeerDisconnected { cm, .. }
            | State::Disconnecting { cm, .. }
            | State::Closed { cm, .. } => Some(cm),
        }
    }

    /// The state's name, as `ndv res` lists it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Listening(_) => "listening",
            State::Connecting { .. } => "connecting",
            State::Resolving { .. } => "resolving",
            State::RepReceived { .. } => "rep_received",
            State::RequestReceived { .. } => "request_received",
            State::Accepting { .. } => "accepting",
            State::Connected { .. } => "connected",
            State::Broken { .. } => "broken",
            State::PeerDisconnected { .. } => "peer_disconnected",
            State::Disconnecting { .. } => "disconnecting",
            State::Closed { .. } => "closed",
        }
    }

    /// The QP attributes the CM negotiated, once known.
    pub(crate) fn setup(&self) -> Option<QpSetup> {
        match *self {
            State::RepReceived { setup, .. }
            | State::Accepting { setup, .. }
            | State::Connected { setup, .. }
            | State::Broken { setup, .. }
            | State::PeerDisconnected { setup, .. }
            | State::Disconnecting { setup, .. } => Some(setup),
            State::Closed { setup, .. } => setup,
            _ => None,
        }
    }

    /// The connection is over (a bound endpoint only; idle and listening
    /// endpoints stay as they are).
    pub(crate) fn close(&mut self) {
        if let Some(cm) = self.cm() {
            let setup = self.setup();
            *self = State::Closed { cm, setup };
        }
    }

    /// The peer's REJ ended the connection: an established one still has
    /// its QP up (a Disconnect flushes it), any other is over.
    pub(crate) fn rejected(&mut self) {
        match *self {
            State::Connected { cm, setup } => *self = State::Broken { cm, setup },
            _ => self.close(),
        }
    }
}

/// A listening endpoint's queues.
#[derive(Debug)]
pub(crate) struct Listener {
    /// The CM's listening endpoint.
    pub(crate) cm: EndpointId,
    /// At most this many connection requests wait for GetConnectionRequest;
    /// more are rejected.
    pub(crate) backlog: usize,
    /// Connection requests nobody asked for yet, oldest first.
    pub(crate) queue: VecDeque<ConnectRequest>,
    /// GetConnectionRequest calls waiting for a request, oldest first.
    pub(crate) waiters: VecDeque<GetRequest>,
}

/// A parked GetConnectionRequest: the endpoint the request goes to.
#[derive(Debug)]
pub(crate) struct GetRequest {
    pub(crate) id: RequestId,
    pub(crate) new_ep: u32,
    pub(crate) span: Span,
}

/// A parked NotifyDisconnect.
#[derive(Debug)]
pub(crate) struct Notify {
    pub(crate) id: RequestId,
    pub(crate) span: Span,
}

/// One connection endpoint.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) state: State,
    /// Connect, CompleteConnect, Accept and Disconnect, one at a time: only
    /// the head runs.
    pub(crate) requests: VecDeque<Request>,
    /// NotifyDisconnect calls waiting for the peer's DREQ.
    pub(crate) notify: Vec<Notify>,
    /// The Resolve waiting for its SIDR_REP (UD endpoints).
    pub(crate) resolve: Option<Notify>,
    /// What queries report (peer, private data, read limits).
    pub(crate) info: EpInfo,
    /// The CM state last reported in the logs.
    pub(crate) cm_seen: Option<CmState>,
    /// Our rdma_cm port: the one listened on, connected from, or the
    /// listener's for an endpoint a request was handed to (0 until known).
    pub(crate) local_port: u16,
    /// The QP the last request named (for `ndv res`).
    pub(crate) qpn: Option<u32>,
}

impl Endpoint {
    fn new() -> Self {
        Endpoint {
            state: State::Idle,
            requests: VecDeque::new(),
            notify: Vec::new(),
            resolve: None,
            info: EpInfo::default(),
            cm_seen: None,
            local_port: 0,
            qpn: None,
        }
    }
}

/// The endpoint request machine (sans IO): every endpoint, the CM
/// endpoints they are bound to, and the actions waiting for the core. See
/// the [module docs](super) for the rules and what the core does with each
/// [`Action`].
///
/// # Example
///
/// ```
/// use ndverbs_engine::ep::{Action, Endpoints, Outcome, QpIdent, Refused};
/// use ndverbs_engine::keys::KeyGen;
/// use ndverbs_proto::cm::{CmAgent, CmConfig};
/// use ndverbs_proto::time::Instant;
/// let mut cm = CmAgent::new(CmConfig::new("10.0.0.1".parse().unwrap(), 1, 1));
/// let mut eps = Endpoints::new(KeyGen::seeded(1));
/// let (listener, ep) = (eps.create(), eps.create());
/// eps.listen(&mut cm, listener, 7000, 4).unwrap();
/// let request = eps.get_request(&cm, listener, ep).unwrap();
/// // Nothing connected yet: Disconnect and NotifyDisconnect are refused,
/// // and nothing is asked of the core.
/// let qp = QpIdent { qpn: 0x11, generation: 1 };
/// assert_eq!(eps.disconnect(Instant::ZERO, &mut cm, ep, qp), Err(Refused::NotConnected));
/// assert_eq!(eps.notify_disconnect(ep), Err(Refused::NotConnected));
/// assert!(eps.poll_action().is_none());
/// // Destroying the listener ends its GetConnectionRequest.
/// eps.destroy(Instant::ZERO, &mut cm, listener).unwrap();
/// match eps.poll_action() {
///     Some(Action::Complete { request: r, outcome: Outcome::Request(Err(e)) }) => {
///         assert_eq!((r, e.to_string().as_str()), (request, "canceled"))
///     }
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug)]
pub struct Endpoints {
    pub(crate) eps: BTreeMap<u32, Endpoint>,
    /// CM endpoint → endpoint, for routing CM events.
    pub(crate) by_cm: HashMap<EndpointId, u32>,
    next_ep: u32,
    next_request: u64,
    /// Starting PSNs: as unpredictable as keys (a blind attacker needs the QPN and PSN).
    pub(crate) keys: KeyGen,
    pub(crate) actions: VecDeque<Action>,
}

impl Endpoints {
    /// An empty table drawing starting PSNs from `keys`.
    pub fn new(keys: KeyGen) -> Self {
        Endpoints {
            eps: BTreeMap::new(),
            by_cm: HashMap::new(),
            next_ep: 0,
            next_request: 0,
            keys,
            actions: VecDeque::new(),
        }
    }

    /// The next thing the core must do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// How many endpoints exist (created and not yet destroyed).
    pub fn endpoint_count(&self) -> usize {
        self.eps.len()
    }

    /// Every endpoint as `ndv res` lists it (see [`crate::resources`]).
    pub(crate) fn resources(&self, cm: &CmAgent, out: &mut Vec<CmIdRes>) {
        let local = cm.config().local_addr;
        for (&id, e) in &self.eps {
            out.push(CmIdRes {
                id,
                state: e.state.name(),
                cm_state: match &e.state {
                    State::Listening(l) => Some(l.cm),
                    s => s.cm(),
                }
                .and_then(|c| cm.state(c)),
                local,
                local_port: e.local_port,
                peer: e.info.peer,
                peer_port: e.info.peer_port,
                qpn: e.qpn,
                dest_qpn: e.state.setup().map(|s| s.dest_qpn),
            });
        }
    }

    pub(crate) fn ep(&mut self, id: u32) -> Result<&mut Endpoint, Refused> {
        self.eps.get_mut(&id).ok_or(Refused::NoEndpoint(id))
    }

    pub(crate) fn request_id(&mut self, ep: u32) -> RequestId {
        self.next_request += 1;
        RequestId {
            ep,
            seq: self.next_request,
        }
    }

    /// Completes a request (the core delivers it after the step's packets)
    /// and says how it ended, in its span.
    pub(crate) fn finish(&mut self, span: &Span, request: RequestId, outcome: Outcome) {
        span.in_scope(|| match outcome.error() {
            None => tracing::debug!("request completed"),
            Some(e) => tracing::debug!(error = %e, "request failed"),
        });
        self.actions
            .push_back(Action::Complete { request, outcome });
    }

    /// Completes every parked NotifyDisconnect of `ep` with `v`.
    pub(crate) fn end_notifies(&mut self, ep: u32, v: Result<(), EpError>) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        for n in std::mem::take(&mut e.notify) {
            self.finish(&n.span, n.id, Outcome::Done(v.clone()));
        }
    }

    /// Completes every parked request of `ep` with `err`.
    pub(crate) fn fail_ep(&mut self, ep: u32, err: EpError) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        let requests = std::mem::take(&mut e.requests);
        let waiters = match &mut e.state {
            State::Listening(l) => std::mem::take(&mut l.waiters),
            _ => VecDeque::new(),
        };
        for r in requests {
            let outcome = r.job.failed(err.clone());
            self.finish(&r.span, r.id, outcome);
        }
        self.end_notifies(ep, Err(err.clone()));
        for w in waiters {
            self.finish(&w.span, w.id, Outcome::Request(Err(err.clone())));
        }
        self.end_resolve(ep, Err(err));
    }

    /// Completes endpoint `ep`'s parked Resolve (if any) with `v`.
    pub(crate) fn end_resolve(&mut self, ep: u32, v: Result<SidrInfo, EpError>) {
        let Some(r) = self.eps.get_mut(&ep).and_then(|e| e.resolve.take()) else {
            return;
        };
        self.finish(&r.span, r.id, Outcome::Resolve(v));
    }

    /// Reports endpoint `ep`'s CM state if it changed since the last report.
    pub(crate) fn note_cm_state(&mut self, cm: &CmAgent, ep: u32) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        let state = e.state.cm().and_then(|c| cm.state(c));
        if state != e.cm_seen {
            tracing::debug!(
                ep,
                from = ?CmStateField(e.cm_seen),
                to = ?CmStateField(state),
                "CM state"
            );
            e.cm_seen = state;
        }
    }

    // ---- calls -----------------------------------------------------------

    /// Creates an endpoint.
    pub fn create(&mut self) -> u32 {
        self.next_ep += 1;
        let id = self.next_ep;
        self.eps.insert(id, Endpoint::new());
        tracing::debug!(ep = id, "endpoint created");
        id
    }

    /// What endpoint `ep` knows.
    pub fn info(&self, cm: &CmAgent, ep: u32) -> Result<EpInfo, Refused> {
        let e = self.eps.get(&ep).ok_or(Refused::NoEndpoint(ep))?;
        let id = e.state.cm();
        let mut info = e.info.clone();
        info.cm_state = id.and_then(|id| cm.state(id));
        info.comm_ids = id.and_then(|id| Some((cm.local_comm_id(id)?, cm.peer(id)?.comm_id)));
        info.listening = matches!(e.state, State::Listening(_));
        Ok(info)
    }

    /// Listens on rdma_cm TCP `port`, queueing at most `backlog` requests.
    pub fn listen(
        &mut self,
        cm: &mut CmAgent,
        ep: u32,
        port: u16,
        backlog: usize,
    ) -> Result<(), Refused> {
        self.listen_ps(cm, ep, cma::RDMA_PS_TCP, port, backlog)
    }

    /// Listens on `port` of rdma_cm port space `ps` (`RDMA_PS_TCP`: REQs;
    /// `RDMA_PS_UDP`: SIDR_REQs, answered with [`Endpoints::accept_ud`]).
    pub fn listen_ps(
        &mut self,
        cm: &mut CmAgent,
        ep: u32,
        ps: u16,
        port: u16,
        backlog: usize,
    ) -> Result<(), Refused> {
        let sid = cma::service_id(ps, port);
        if !matches!(self.ep(ep)?.state, State::Idle) {
            return Err(Refused::Busy("the endpoint is already in use"));
        }
        let cm_id = cm.listen(sid).map_err(|e| match e {
            CmError::ServiceIdBusy(_) => Refused::Busy("the address is already being listened on"),
            e => Refused::InvalidArgument(cm_error_text(e)),
        })?;
        self.by_cm.insert(cm_id, ep);
        self.ep(ep)?.local_port = port;
        self.ep(ep)?.state = State::Listening(Listener {
            cm: cm_id,
            backlog: backlog.max(1),
            queue: VecDeque::new(),
            waiters: VecDeque::new(),
        });
        tracing::debug!(ep, port, backlog, "listening");
        Ok(())
    }

    /// GetConnectionRequest: waits on `listener` for a connection request
    /// and binds it to endpoint `new_ep` (several may wait at once).
    pub fn get_request(
        &mut self,
        cm: &CmAgent,
        listener: u32,
        new_ep: u32,
    ) -> Result<RequestId, Refused> {
        self.ep(new_ep)?;
        if !matches!(self.ep(listener)?.state, State::Listening(_)) {
            return Err(Refused::InvalidArgument("the endpoint is not listening"));
        }
        let id = self.request_id(listener);
        let span = tracing::debug_span!("ep_get_request", ep = listener, new_ep);
        if let State::Listening(l) = &mut self.ep(listener)?.state {
            l.waiters.push_back(GetRequest { id, new_ep, span });
        }
        self.serve_listener(cm, listener);
        Ok(id)
    }

    /// Connect on endpoint `ep` with QP `qp` (`qp_exists`: the core has
    /// that QP now). Refused unless the endpoint is idle or its last
    /// connection is over, with nothing queued.
    pub fn connect(
        &mut self,
        now: Instant,
        cm: &mut CmAgent,
        ep: u32,
        qp: QpIdent,
        args: ConnectArgs,
        qp_exists: bool,
    ) -> Result<RequestId, Refused> {
        let e = self.ep(ep)?;
        if !matches!(e.state, State::Idle | State::Closed { .. }) || !e.requests.is_empty() {
            return Err(Refused::Busy("connection already active"));
        }
        if !qp_exists {
            return Err(Refused::NoQp(qp.qpn));
        }
        let span = tracing::debug_span!("ep_connect", ep, qp = qp.qpn);
        Ok(self.submit(now, cm, ep, qp, span, Job::connect(args)))
    }

    /// CompleteConnect (active, after the Connect completed).
    pub fn complete_connect(
        &mut self,
        now: Instant,
        cm: &mut CmAgent,
        ep: u32,
        qp: QpIdent,
    ) -> Result<RequestId, Refused> {
        self.ep(ep)?;
        let span = tracing::debug_span!("ep_complete_connect", ep, qp = qp.qpn);
        Ok(self.submit(now, cm, ep, qp, span, Job::complete_connect()))
    }

    /// Accept (passive, after GetConnectionRequest handed a request over).
    pub fn accept(
        &mut self,
        now: Instant,
        cm: &mut CmAgent,
        ep: u32,
        qp: QpIdent,
        args: AcceptArgs,
    ) -> Result<RequestId, Refused> {
        self.ep(ep)?;
        let span = tracing::debug_span!("ep_accept", ep, qp = qp.qpn);
        Ok(self.submit(now, cm, ep, qp, span, Job::accept(args)))
    }

    /// Resolve (UD): sends a SIDR_REQ for the rdma_cm UDP service `args`
    /// names; completes with what the SIDR_REP said (any status), or
    /// [`EpError::Timeout`] when the retries run out, or
    /// [`EpError::PortUnreachable`]. Refused unless the endpoint is idle or
    /// its last exchange is over.
    pub fn resolve(
        &mut self,
        now: Instant,
        cm: &mut CmAgent,
        ep: u32,
        args: SidrArgs,
    ) -> Result<RequestId, Refused> {
        let e = self.ep(ep)?;
        if !matches!(e.state, State::Idle | State::Closed { .. })
            || !e.requests.is_empty()
            || e.resolve.is_some()
        {
            return Err(Refused::Busy("connection already active"));
        }
        let span = tracing::debug_span!("ep_resolve", ep);
        let p = SidrParams {
            service_id: cma::service_id(cma::RDMA_PS_UDP, args.remote_port),
            remote_addr: args.remote,
            local_port: args.local_port,
            private_data: args.private_data,
        };
        let cm_id = span
            .in_scope(|| cm.sidr_request(now, p))
            .map_err(|e| Refused::InvalidArgument(cm_error_text(e)))?;
        let id = self.request_id(ep);
        span.in_scope(|| tracing::debug!("SIDR_REQ sent"));
        if let Some(old) = self.ep(ep)?.state.cm() {
            self.by_cm.remove(&old);
        }
        self.by_cm.insert(cm_id, ep);
        let e = self.ep(ep)?;
        e.state = State::Resolving { cm: cm_id };
        e.local_port = args.local_port;
        e.info.peer = Some(args.remote);
        e.info.peer_port = args.remote_port;
        e.resolve = Some(Notify { id, span });
        self.note_cm_state(cm, ep);
        Ok(id)
    }

    /// Accepts the SIDR request handed over to `ep`: one SIDR_REP naming
    /// our UD QP `qpn` and its `qkey`. Done when it returns (nothing comes
    /// back: the requester just starts sending).
    pub fn accept_ud(
        &mut self,
        cm: &mut CmAgent,
        ep: u32,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), Refused> {
        let e = self.ep(ep)?;
        let State::RequestReceived { cm: cm_id, .. } = e.state else {
            return Err(Refused::InvalidArgument("no SIDR request to accept"));
        };
        let a = SidrAnswer {
            status: sidr_status::SUCCESS,
            qpn,
            qkey,
            private_data: private_data.to_vec(),
        };
        cm.sidr_reply(cm_id, a)
            .map_err(|e| Refused::InvalidArgument(cm_error_text(e)))?;
        tracing::debug!(ep, qpn, "SIDR_REP sent");
        let e = self.ep(ep)?;
        e.qpn = Some(qpn);
        e.state.close();
        self.note_cm_state(cm, ep);
        Ok(())
    }

    /// Disconnect. Taken only on an established connection: connected, the
    /// peer's DREQ arrived (we answer with the DREP), our DREQ is out (it
    /// queues behind the first Disconnect), or the peer's REJ ended it (only
    /// the QP phase runs). Refused on an endpoint that never connected, whose
    /// connection is still being set up (Connect pending, before
    /// CompleteConnect, Accept waiting for its RTU: nothing is sent and the
    /// QP is untouched; Reject, cancel or destroy abandon such a
    /// connection), or whose connection is over.
    pub fn disconnect(
        &mut self,
        now: Instant,
        cm: &mut CmAgent,
        ep: u32,
        qp: QpIdent,
    ) -> Result<RequestId, Refused> {
        let e = self.ep(ep)?;
        let established = matches!(
            e.state,
            State::Connected { .. }
                | State::PeerDisconnected { .. }
                | State::Disconnecting { .. }
                | State::Broken { .. }
        );
        if !established {
            return Err(Refused::NotConnected);
        }
        let span = tracing::debug_span!("ep_disconnect", ep, qp = qp.qpn);
        Ok(self.submit(now, cm, ep, qp, span, Job::disconnect()))
    }

    /// NotifyDisconnect: completes when the peer's DREQ arrives — at once if
    /// it already did on this connection. Refused (ND:
    /// `ND_CONNECTION_INVALID`) on an endpoint that never connected or whose
    /// connection ended without a DREQ; a pending one stays pending when our
    /// own Disconnect finishes (no DREQ will come: cancel or destroy ends
    /// it) and fails [`EpError::Aborted`] when the connection fails without
    /// a DREQ.
    pub fn notify_disconnect(&mut self, ep: u32) -> Result<RequestId, Refused> {
        let e = self.ep(ep)?;
        let at_once = match e.state {
            State::Idle | State::Listening(_) | State::Broken { .. } => {
                return Err(Refused::NotConnected)
            }
            State::PeerDisconnected { .. } => true,
            State::Closed { .. } if e.info.dreq_received => true,
            State::Closed { .. } => return Err(Refused::NotConnected),
            _ => false,
        };
        let id = self.request_id(ep);
        let span = tracing::debug_span!("ep_notify_disconnect", ep);
        if at_once {
            self.finish(&span, id, Outcome::Done(Ok(())));
        } else {
            span.in_scope(|| tracing::debug!("waiting for the peer's DREQ"));
            self.ep(ep)?.notify.push(Notify { id, span });
        }
        Ok(id)
    }

    /// Reject: refuses the connection request (passive) or the REP (active),
    /// which ends the connection. Where the CM refuses (an established
    /// connection, one already over) nothing changes: an established
    /// connection ends with Disconnect.
    pub fn reject(
        &mut self,
        now: Instant,
        cm: &mut CmAgent,
        ep: u32,
        private_data: &[u8],
    ) -> Result<(), Refused> {
        let e = self.ep(ep)?;
        let Some(cm_id) = e.state.cm() else {
            return Err(Refused::InvalidArgument("no connection to reject"));
        };
        tracing::debug!(ep, "rejecting the connection");
        cm.reject(now, cm_id, private_data)
            .map_err(|e| Refused::InvalidArgument(cm_error_text(e)))?;
        self.ep(ep)?.state.close();
        self.fail_ep(ep, EpError::Canceled);
        self.note_cm_state(cm, ep);
        Ok(())
    }

    /// CancelOverlappedRequests: every parked request of `ep` completes
    /// [`EpError::Canceled`]; a Connect or Accept in progress is abandoned
    /// (its CM endpoint destroyed, which rejects the peer).
    pub fn cancel(&mut self, now: Instant, cm: &mut CmAgent, ep: u32) -> Result<(), Refused> {
        let e = self.ep(ep)?;
        let setting_up = e.requests.front().is_some_and(|r| r.job.sets_up()) || e.resolve.is_some();
        if setting_up {
            if let Some(cm_id) = e.state.cm() {
                e.state = State::Idle;
                self.by_cm.remove(&cm_id);
                let _ = cm.destroy(now, cm_id);
            }
        }
        tracing::debug!(ep, setting_up, "canceling the endpoint's requests");
        self.fail_ep(ep, EpError::Canceled);
        self.note_cm_state(cm, ep);
        Ok(())
    }

    /// Destroys endpoint `ep`: parked requests complete
    /// [`EpError::Canceled`]; the CM endpoint goes the Linux way (REJ, DREQ
    /// or DREP as its state demands); a listener's unclaimed requests are
    /// rejected.
    pub fn destroy(&mut self, now: Instant, cm: &mut CmAgent, ep: u32) -> Result<(), Refused> {
        tracing::debug!(ep, "destroying the endpoint");
        self.fail_ep(ep, EpError::Canceled);
        let e = self.eps.remove(&ep).ok_or(Refused::NoEndpoint(ep))?;
        if let Some(cm_id) = e.state.cm() {
            self.by_cm.remove(&cm_id);
            if !cm.is_removed() {
                let _ = cm.destroy(now, cm_id);
            }
        }
        if let State::Listening(l) = e.state {
            self.by_cm.remove(&l.cm);
            let _ = cm.destroy(now, l.cm);
            for r in l.queue {
                let _ = cm.reject(now, r.endpoint, &[]);
            }
        }
        Ok(())
    }

    /// Device removal: every parked request of every endpoint completes
    /// [`EpError::DeviceRemoved`]; the CM goes silent for good.
    pub fn remove_device(&mut self, cm: &mut CmAgent) {
        let ids: Vec<u32> = self.eps.keys().copied().collect();
        for id in ids {
            self.fail_ep(id, EpError::DeviceRemoved);
        }
        cm.remove_device();
        while cm.poll_event().is_some() {}
    }

    /// Queues a request on `ep` and runs it at once if nothing is ahead.
    fn submit(
        &mut self,
        now: Instant,
        cm: &mut CmAgent,
        ep: u32,
        qp: QpIdent,
        span: Span,
        job: Job,
    ) -> RequestId {
        let id = self.request_id(ep);
        let Some(e) = self.eps.get_mut(&ep) else {
            return id;
        };
        e.qpn = Some(qp.qpn);
        e.requests.push_back(Request { id, qp, span, job });
        if e.requests.len() == 1 {
            self.run(now, cm, ep);
        }
        id
    }

    /// A connection request for endpoint `new_ep`'s GetConnectionRequest:
    /// what the application learns, and the endpoint bound to it.
    pub(crate) fn hand_over(
        &mut self,
        cm: &CmAgent,
        new_ep: u32,
        req: &ConnectRequest,
    ) -> Option<RequestInfo> {
        self.eps.get(&new_ep)?;
        let psn = self.keys.psn();
        let qp = if req.sidr {
            // No connection, no QP attributes: only the peer's address.
            QpSetup {
                remote_addr: req.peer.addr,
                dest_qpn: 0,
                rq_psn: 0,
                sq_psn: 0,
                path_mtu: 0,
                max_rd_atomic: 0,
                max_dest_rd_atomic: 0,
                retry_cnt: 0,
                rnr_retry: 0,
                min_rnr_timer: 0,
                timeout: 0,
                flow_label: 0,
                hop_limit: 0,
                traffic_class: 0,
            }
        } else {
            cm.request_qp_setup(req.endpoint, psn).ok()?
        };
        let e = self.eps.get_mut(&new_ep)?;
        let peer_port = req.cma.map_or(0, |h| h.src_port);
        let info = RequestInfo {
            peer: req.peer.addr,
            peer_port,
            local: cm.config().local_addr,
            service_id: req.service_id,
            private_data: req.peer.private_data.clone(),
            peer_read_limits: (req.peer.responder_resources, req.peer.initiator_depth),
            qp,
        };
        e.state = State::RequestReceived {
            cm: req.endpoint,
            psn,
        };
        // The port listened on, from rdma_cm's service ID.
        e.local_port = cma::split_service_id(req.service_id).map_or(0, |(_, port)| port);
        e.info.peer = Some(req.peer.addr);
        e.info.peer_port = peer_port;
        e.info.private_data = req.peer.private_data.clone();
        // Ours, not the peer's: what it may READ from us (its initiator
        // depth) is our inbound limit, what it accepts (its responder
        // resources) our outbound one (ND's GetReadLimits before Accept).
        e.info.read_limits = (req.peer.initiator_depth, req.peer.responder_resources);
        e.info.dreq_received = false;
        self.by_cm.insert(req.endpoint, new_ep);
        Some(info)
    }
}

/// The text of a CM refusal, for [`Refused::InvalidArgument`].
fn cm_error_text(e: CmError) -> &'static str {
    match e {
        CmError::UnknownEndpoint => "unknown CM endpoint",
        CmError::InvalidState(_) => "not allowed in the connection's state",
        CmError::DeviceRemoved => "device removed",
        CmError::PrivateDataTooLong { .. } => "private data too long",
        CmError::ServiceIdBusy(_) => "service ID already listened on",
        CmError::InvalidParameter(p) => p,
        _ => "refused by the connection manager",
    }
}

/// A CM state for the logs (`none` when the endpoint has no CM endpoint).
pub(crate) struct CmStateField(pub(crate) Option<CmState>);

impl std::fmt::Debug for CmStateField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(s) => write!(f, "{s:?}"),
            None => f.write_str("none"),
        }
    }
}

/// What a Connect learns from the REP.
pub(crate) fn connect_info(private_data: &[u8], qp: &QpSetup) -> ConnectInfo {
    ConnectInfo {
        private_data: private_data.to_vec(),
        read_limits: (qp.max_dest_rd_atomic, qp.max_rd_atomic),
        qp: *qp,
    }
}
