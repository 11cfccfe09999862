//! Connection endpoints: the CM side of a connection, and the requests that
//! run on it phase by phase (WinVerbs' `wv_ep.c`).
//!
//! An endpoint is an id in the NIC's table. Connect, CompleteConnect,
//! Accept and Disconnect are *requests* that name the endpoint **and** the QP
//! (by number) and run in phases on the endpoint's serialised queue:
//!
//! | Request | Phases |
//! |---|---|
//! | Connect | CM: send REQ, park until REP / REJ / timeout |
//! | CompleteConnect | QP: INIT → RTR → RTS from the REP; CM: send RTU |
//! | Accept | QP: INIT → RTR → RTS; CM: send REP, park until RTU / REJ / timeout |
//! | Disconnect | CM: DREQ (park until DREP / DREQ timeout) or DREP (done at once); QP: → ERR, which flushes every outstanding work request |
//!
//! NotifyDisconnect does not queue: it parks until a DREQ arrives (and never
//! touches the QP), and GetConnectionRequest parks on a listening endpoint
//! until a REQ arrives. The endpoint never holds a QP and the QP never holds
//! an endpoint: each QP phase looks the QP up by number, and a QP that is gone
//! is a status, not a crash. Device removal completes every parked request
//! with [`EpError::DeviceRemoved`].
//!
//! **Tracing.** Each request is a `debug` span (`ep_connect`,
//! `ep_complete_connect`, `ep_accept`, `ep_disconnect`,
//! `ep_notify_disconnect`, `ep_get_request`) with the endpoint id `ep` and,
//! for the four that name one, the QP number `qp`, open from the call until
//! the request completes (inside the NIC's `nic` span, field `local`);
//! its phases are child spans `cm_phase` and `qp_phase`, in the order they
//! run. CM events and CM state transitions (`from`, `to`) are `debug` events
//! with the `ep` field; CM timeouts are `warn`.

use crate::error::EngineError;
use crate::nic::{Core, Nic, Shared};
use crate::pending::{pending, Completion, Pending};
use ndverbs_proto::cm::{
    AcceptParams, CmError, CmEvent, ConnectParams, DisconnectHow, DisconnectStarted, EndpointId,
    QpSetup,
};
use ndverbs_proto::rc::{AttrMask, ModifyError, PathMtu, QpAttr, QpState};
use ndverbs_proto::time::Instant;
use ndverbs_wire::cma::{self, gid_of, CmaHeader};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use tracing::Span;

/// How an endpoint request ended badly.
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
/// #     let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
/// #     ad.modify_qp(qp.qpn(), &init,
/// #         AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS).unwrap();
/// #     (ad, qp)
/// # }
/// # fn cargs(to: &Nic, port: u16) -> ConnectArgs {
/// #     ConnectArgs { remote: to.local(), remote_port: port, local_port: 40000, responder_resources: 1,
/// #         initiator_depth: 1, retry_count: 7, rnr_retry_count: 7, path_mtu: PathMtu::Mtu1024,
/// #         private_data: b"hello".to_vec() }
/// # }
/// let ((a, qa), (b, _qb)) = (side("127.93.16.1"), side("127.93.16.2"));
/// // Nobody listens on B's port 7000: B's CM answers the REQ with a REJ.
/// let ea = a.create_ep()?;
/// match a.ep_connect(ea, qa.qpn(), cargs(&b, 7000))?.wait() {
///     Err(EpError::Rejected { reason, .. }) => assert_eq!(reason, 8), // invalid service ID
///     other => panic!("{other:?}"),
/// }
/// // Cancelled by the application: the pending request ends with `Canceled`.
/// let (listener, eb) = (b.create_ep()?, b.create_ep()?);
/// b.ep_listen(listener, 7001, 1)?;
/// let request = b.ep_get_request(listener, eb)?;
/// b.ep_cancel(listener)?;
/// assert_eq!(request.wait(), Err(EpError::Canceled));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EpError {
    /// The NIC was removed.
    #[error("device removed")]
    DeviceRemoved,
    /// Cancelled by the application (or by destroying the endpoint).
    #[error("canceled")]
    Canceled,
    /// The peer did not answer in time (REQ/REP retries exhausted, DREQ timeout).
    #[error("timed out")]
    Timeout,
    /// The peer rejected the connection.
    #[error("rejected (reason {reason})")]
    Rejected {
        /// REJ reason code.
        reason: u16,
        /// REJ private data.
        private_data: Vec<u8>,
    },
    /// The connection went away (peer disconnected before the request finished).
    #[error("connection aborted")]
    Aborted,
    /// The endpoint was disconnected before a DREQ arrived (NotifyDisconnect).
    #[error("disconnected")]
    Disconnected,
    /// The request does not fit the endpoint's state.
    #[error("invalid endpoint state: {0}")]
    InvalidState(&'static str),
    /// A connection is already active or being set up on the endpoint.
    #[error("connection already active")]
    ConnectionActive,
    /// The QP named by the request does not exist.
    #[error("no QP {0:#x}")]
    NoQp(u32),
    /// The QP refused the transition.
    #[error(transparent)]
    Modify(#[from] ModifyError),
    /// The CM refused the call.
    #[error(transparent)]
    Cm(#[from] CmError),
}

/// Everything a Connect needs besides the QP.
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
///     let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
///     ad.modify_qp(qp.qpn(), &init, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS)?;
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
/// let rep = a.ep_connect(ea, qa.qpn(), args)?;
/// assert!(request.wait()?.private_data.starts_with(b"hello"));
/// let rtu = b.ep_accept(eb, qb.qpn(), AcceptArgs {
///     responder_resources: 4, initiator_depth: 4, rnr_retry_count: 7, private_data: vec![] })?;
/// rep.wait()?;
/// a.ep_complete_connect(ea, qa.qpn())?.wait()?; // A's QP to RTS, then the RTU
/// rtu.wait()?;
/// assert_eq!((qa.state(), qb.state()), (QpState::Rts, QpState::Rts));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectArgs {
    /// Peer address.
    pub remote: IpAddr,
    /// Peer rdma_cm port (service ID `0x0106 << 16 | port`).
    pub remote_port: u16,
    /// Our rdma_cm port (carried in the rdma_cm header).
    pub local_port: u16,
    /// RDMA READ/atomics we accept in flight.
    pub responder_resources: u8,
    /// RDMA READ/atomics we issue in flight.
    pub initiator_depth: u8,
    /// Transport retries (7 = infinite, as rxe).
    pub retry_count: u8,
    /// RNR retries the peer should use towards us (7 = infinite).
    pub rnr_retry_count: u8,
    /// Path MTU.
    pub path_mtu: PathMtu,
    /// Private data (at most 56 bytes with the rdma_cm header).
    pub private_data: Vec<u8>,
}

/// Everything an Accept needs besides the QP.
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
/// #     let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
/// #     ad.modify_qp(qp.qpn(), &init,
/// #         AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS).unwrap();
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
/// let rep = a.ep_connect(ea, qa.qpn(), cargs(&b, 7000))?; // asks for 1 READ each way
/// request.wait()?;
/// // Offer more than the peer asked for: the limits are clamped to its request.
/// let args = AcceptArgs { responder_resources: 16, initiator_depth: 16, rnr_retry_count: 7,
///     private_data: b"welcome".to_vec() };
/// let rtu = b.ep_accept(eb, qb.qpn(), args)?;
/// let info = rep.wait()?;
/// a.ep_complete_connect(ea, qa.qpn())?.wait()?;
/// rtu.wait()?;
/// assert_eq!(b.ep_info(eb)?.read_limits, (1, 1));
/// assert!(info.private_data.starts_with(b"welcome"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptArgs {
    /// RDMA READ/atomics we accept in flight (clamped to the peer's initiator depth).
    pub responder_resources: u8,
    /// RDMA READ/atomics we issue in flight (clamped to the peer's responder resources).
    pub initiator_depth: u8,
    /// RNR retries the peer should use towards us.
    pub rnr_retry_count: u8,
    /// Private data (at most 196 bytes).
    pub private_data: Vec<u8>,
}

/// What a Connect learned from the REP.
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
/// #     let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
/// #     ad.modify_qp(qp.qpn(), &init,
/// #         AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS).unwrap();
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
/// let rep = a.ep_connect(ea, qa.qpn(), ConnectArgs { initiator_depth: 2, ..cargs(&b, 7000) })?;
/// request.wait()?;
/// let _rtu = b.ep_accept(eb, qb.qpn(), AcceptArgs { responder_resources: 8, initiator_depth: 8,
///     rnr_retry_count: 7, private_data: b"token=42".to_vec() })?;
/// // What the REP said: B's private data (zero-padded to the REP's 196 bytes) and
/// // the negotiated (inbound, outbound) READ limits.
/// let info: ConnectInfo = rep.wait()?;
/// assert!(info.private_data.starts_with(b"token=42"));
/// assert_eq!(info.read_limits, (1, 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectInfo {
    /// The peer's private data.
    pub private_data: Vec<u8>,
    /// Negotiated READ/atomic limits: (inbound, outbound).
    pub read_limits: (u8, u8),
}

/// A connection request handed to the application.
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
/// #     let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
/// #     ad.modify_qp(qp.qpn(), &init,
/// #         AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS).unwrap();
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
/// let _rep = a.ep_connect(ea, qa.qpn(), cargs(&b, 7000))?;
/// let req: RequestInfo = request.wait()?;
/// assert_eq!((req.peer, req.peer_port, req.local), (a.local(), 40000, b.local()));
/// assert_eq!(req.service_id, cma::service_id(cma::RDMA_PS_TCP, 7000));
/// assert!(req.private_data.starts_with(b"hello"));
/// assert_eq!(req.peer_read_limits, (1, 1));
/// b.ep_reject(eb, b"not now")?; // or accept it
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    /// Peer address.
    pub peer: IpAddr,
    /// Peer rdma_cm port (0 when the REQ had no rdma_cm header).
    pub peer_port: u16,
    /// Local address the REQ was sent to.
    pub local: IpAddr,
    /// Service ID.
    pub service_id: u64,
    /// The peer's private data (rdma_cm header removed).
    pub private_data: Vec<u8>,
    /// The peer's (responder resources, initiator depth).
    pub peer_read_limits: (u8, u8),
}

/// What an endpoint knows about itself, for queries.
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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EpInfo {
    /// The CM state, if bound to a CM endpoint.
    pub cm_state: Option<ndverbs_proto::cm::CmState>,
    /// Peer address once known.
    pub peer: Option<IpAddr>,
    /// Peer port once known.
    pub peer_port: u16,
    /// Peer private data (REQ, REP or REJ).
    pub private_data: Vec<u8>,
    /// Negotiated (inbound, outbound) read limits.
    pub read_limits: (u8, u8),
    /// A DREQ arrived.
    pub dreq_received: bool,
    /// True while a service ID is being listened on.
    pub listening: bool,
    /// (our, the peer's) CM communication IDs, once both are known.
    pub comm_ids: Option<(u32, u32)>,
}

type Done<T> = Completion<Result<T, EpError>>;

/// Completions waiting until the step's packets are out (see [`defer`]).
pub(crate) type Later = Vec<Box<dyn FnOnce() + Send>>;

/// Queues a request's completion for the end of the engine step, after the
/// packets the step produced (a DREP, an RTU) went out: an application that
/// exits as soon as its Disconnect completes must not take the DREP with it.
fn defer<T: Send + 'static>(later: &mut Later, done: Done<T>, v: Result<T, EpError>) {
    later.push(Box::new(move || done.complete(v)));
}

/// Completes a request (see [`defer`]) and says how it ended, in its span.
fn finish<T: Send + 'static>(later: &mut Later, span: &Span, done: Done<T>, v: Result<T, EpError>) {
    span.in_scope(|| match &v {
        Ok(_) => tracing::debug!("request completed"),
        Err(e) => tracing::debug!(error = %e, "request failed"),
    });
    defer(later, done, v);
}

/// A parked NotifyDisconnect: its span and its completion.
type Notify = (Span, Done<()>);

/// Completes every parked NotifyDisconnect of `list` with `v`.
fn end_notifies(later: &mut Later, list: &mut Vec<Notify>, v: Result<(), EpError>) {
    for (span, done) in list.drain(..) {
        finish(later, &span, done, v.clone());
    }
}

/// A CM state for the logs (`none` when the endpoint has no CM endpoint).
struct CmStateField(Option<ndverbs_proto::cm::CmState>);

impl std::fmt::Debug for CmStateField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(s) => write!(f, "{s:?}"),
            None => f.write_str("none"),
        }
    }
}

/// The name of a CM event, for the logs.
fn cm_event_name(ev: &CmEvent) -> &'static str {
    match ev {
        CmEvent::ConnectRequest(_) => "connect request",
        CmEvent::RepReceived { .. } => "REP received",
        CmEvent::Established { .. } => "established",
        CmEvent::Rejected { .. } => "rejected",
        CmEvent::ConnectTimeout { .. } => "connect timeout",
        CmEvent::AcceptTimeout { .. } => "accept timeout",
        CmEvent::MraReceived { .. } => "MRA received",
        CmEvent::DreqReceived { .. } => "DREQ received",
        CmEvent::DisconnectDone { .. } => "disconnect done",
        CmEvent::StaleConnection { .. } => "stale connection",
        CmEvent::TimewaitExit { .. } => "time-wait exit",
        CmEvent::DeviceRemoved { .. } => "device removed",
    }
}

/// Result of an endpoint request.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::nic::Nic;
/// use ndverbs_engine::ep::{EpError, EpPending, RequestInfo};
/// use std::time::Duration;
/// let a = Nic::open("127.93.17.1".parse().unwrap(), Progress::Thread)?;
/// let (listener, ep) = (a.create_ep()?, a.create_ep()?);
/// a.ep_listen(listener, 7000, 1)?;
/// let req: EpPending<RequestInfo> = a.ep_get_request(listener, ep)?;
/// // Nobody connects: it stays pending (`.await` works too) until cancelled.
/// assert_eq!(req.wait_timeout(Duration::from_millis(10)), None);
/// a.ep_cancel(listener)?;
/// assert_eq!(req.wait(), Err(EpError::Canceled));
/// # Ok::<(), ndverbs_engine::error::EngineError>(())
/// ```
pub type EpPending<T> = Pending<Result<T, EpError>>;

fn removed<T>() -> Result<T, EpError> {
    Err(EpError::DeviceRemoved)
}

enum Phase {
    Start,
    Parked,
}

enum Request {
    Connect {
        qpn: u32,
        args: ConnectArgs,
        done: Done<ConnectInfo>,
        phase: Phase,
        span: Span,
    },
    CompleteConnect {
        qpn: u32,
        done: Done<()>,
        span: Span,
    },
    Accept {
        qpn: u32,
        args: AcceptArgs,
        done: Done<()>,
        phase: Phase,
        span: Span,
    },
    Disconnect {
        qpn: u32,
        done: Done<()>,
        phase: Phase,
        outcome: Result<(), EpError>,
        span: Span,
    },
}

impl Request {
    /// The request's span (open until the request completes).
    fn span(&self) -> &Span {
        match self {
            Request::Connect { span, .. }
            | Request::CompleteConnect { span, .. }
            | Request::Accept { span, .. }
            | Request::Disconnect { span, .. } => span,
        }
    }
}

/// One connection endpoint.
#[derive(Default)]
pub(crate) struct Ep {
    cm: Option<EndpointId>,
    listener: Option<Listener>,
    requests: VecDeque<Request>,
    notify: Vec<Notify>,
    info: EpInfo,
    setup: Option<QpSetup>,
    /// Our receive PSN, chosen at Connect/Accept.
    local_psn: u32,
    /// The connection has been torn down (DisconnectDone or a failed setup).
    closed: bool,
    /// The CM state last reported in the logs.
    cm_seen: Option<ndverbs_proto::cm::CmState>,
}

struct Listener {
    service_id: u64,
    cm: EndpointId,
    backlog: usize,
    queue: VecDeque<ndverbs_proto::cm::ConnectRequest>,
    waiters: VecDeque<(u32, Span, Done<RequestInfo>)>,
}

/// The endpoint table.
#[derive(Default)]
pub(crate) struct EpTable {
    eps: HashMap<u32, Ep>,
    by_cm: HashMap<EndpointId, u32>,
    next: u32,
}

impl Core {
    fn ep(&mut self, id: u32) -> Result<&mut Ep, EngineError> {
        self.eps.eps.get_mut(&id).ok_or(EngineError::NotFound {
            what: "endpoint",
            id,
        })
    }

    /// A connection starts from a QP in INIT (rdma_cm and ND move it on from
    /// there): any other state would fail only after the CM exchange began,
    /// leaving the peer waiting for a REP that never comes.
    fn qp_ready(&self, qpn: u32) -> Result<(), EpError> {
        match self.tables.qps.get(&qpn) {
            None => Err(EpError::NoQp(qpn)),
            Some(e) if e.qp.state() == QpState::Init => Ok(()),
            Some(_) => Err(EpError::InvalidState("the QP is not in INIT")),
        }
    }

    /// Applies what the CM negotiated to QP `qpn`: INIT → RTR → RTS.
    fn qp_to_rts(&mut self, qpn: u32, s: &QpSetup, now: Instant) -> Result<(), EpError> {
        let Some(e) = self.tables.qps.get_mut(&qpn) else {
            return Err(EpError::NoQp(qpn));
        };
        let mut a = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: PathMtu::from_enum(s.path_mtu).unwrap_or(PathMtu::Mtu1024),
            dest_qp_num: s.dest_qpn,
            rq_psn: s.rq_psn,
            max_dest_rd_atomic: s.max_dest_rd_atomic,
            // Code 0 is the longest RNR delay (655 ms), as rdma_cm programs it.
            min_rnr_timer: s.min_rnr_timer,
            ..e.qp.query()
        };
        a.av.dgid = gid_of(s.remote_addr).octets();
        a.av.hop_limit = s.hop_limit;
        a.av.flow_label = s.flow_label;
        a.av.traffic_class = s.traffic_class;
        e.modify(
            &a,
            AttrMask::STATE
                | AttrMask::AV
                | AttrMask::PATH_MTU
                | AttrMask::DEST_QPN
                | AttrMask::RQ_PSN
                | AttrMask::MAX_DEST_RD_ATOMIC
                | AttrMask::MIN_RNR_TIMER,
        )?;
        e.peer = Some(s.remote_addr);
        a.qp_state = QpState::Rts;
        a.sq_psn = s.sq_psn;
        a.timeout = s.timeout;
        a.retry_cnt = s.retry_cnt;
        a.rnr_retry = s.rnr_retry;
        a.max_rd_atomic = s.max_rd_atomic;
        e.modify(
            &a,
            AttrMask::STATE
                | AttrMask::SQ_PSN
                | AttrMask::TIMEOUT
                | AttrMask::RETRY_CNT
                | AttrMask::RNR_RETRY
                | AttrMask::MAX_QP_RD_ATOMIC,
        )?;
        self.touched.push(qpn);
        let _ = now;
        Ok(())
    }

    /// Moves QP `qpn` to ERR (flushing it); false if there is no such QP.
    fn qp_to_error(&mut self, qpn: u32) -> bool {
        let Some(e) = self.tables.qps.get_mut(&qpn) else {
            return false;
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
        true
    }

    /// Runs the requests at the head of endpoint `id`'s queue as far as they go.
    fn run_ep(&mut self, id: u32, now: Instant) {
        loop {
            let Some(ep) = self.eps.eps.get_mut(&id) else {
                return;
            };
            let Some(req) = ep.requests.pop_front() else {
                return;
            };
            let parked = self.step_request(id, req, now);
            self.note_cm_state(id);
            match parked {
                Some(parked) => {
                    if let Some(ep) = self.eps.eps.get_mut(&id) {
                        ep.requests.push_front(parked);
                    }
                    return;
                }
                None => continue,
            }
        }
    }

    /// Reports endpoint `id`'s CM state if it changed since the last report.
    fn note_cm_state(&mut self, id: u32) {
        let Some(ep) = self.eps.eps.get_mut(&id) else {
            return;
        };
        let state = ep.cm.and_then(|c| self.cm.state(c));
        if state != ep.cm_seen {
            tracing::debug!(
                ep = id,
                from = ?CmStateField(ep.cm_seen),
                to = ?CmStateField(state),
                "CM state"
            );
            ep.cm_seen = state;
        }
    }

    /// Advances one request; returns it if it must wait for a CM event.
    fn step_request(&mut self, id: u32, req: Request, now: Instant) -> Option<Request> {
        let span = req.span().clone();
        let _in_request = span.enter();
        match req {
            Request::Connect {
                qpn,
                args,
                done,
                phase: Phase::Start,
                span,
            } => {
                if let Err(e) = self.qp_ready(qpn) {
                    finish(&mut self.deliveries.later, &span, done, Err(e));
                    return None;
                }
                let _phase = tracing::debug_span!("cm_phase").entered();
                let psn = self.tables.keys.psn();
                let service_id = cma::service_id(cma::RDMA_PS_TCP, args.remote_port);
                let mut p = ConnectParams::new(service_id, args.remote, qpn, psn);
                p.local_port = args.local_port;
                p.responder_resources = args.responder_resources;
                p.initiator_depth = args.initiator_depth;
                p.retry_count = args.retry_count;
                p.rnr_retry_count = args.rnr_retry_count;
                p.path_mtu = args.path_mtu as u8;
                p.private_data = args.private_data.clone();
                match self.cm.connect(now, p) {
                    Ok(cm_id) => {
                        let ep = self.eps.eps.get_mut(&id)?;
                        ep.cm = Some(cm_id);
                        ep.local_psn = psn;
                        ep.closed = false;
                        ep.info.peer = Some(args.remote);
                        ep.info.peer_port = args.remote_port;
                        self.eps.by_cm.insert(cm_id, id);
                        tracing::debug!(peer = %args.remote, port = args.remote_port, "REQ sent; waiting for the REP");
                        Some(Request::Connect {
                            qpn,
                            args,
                            done,
                            phase: Phase::Parked,
                            span,
                        })
                    }
                    Err(e) => {
                        finish(&mut self.deliveries.later, &span, done, Err(e.into()));
                        None
                    }
                }
            }
            r @ Request::Connect {
                phase: Phase::Parked,
                ..
            } => Some(r),
            Request::CompleteConnect { qpn, done, span } => {
                let ep = self.eps.eps.get(&id)?;
                let (Some(setup), Some(cm_id)) = (ep.setup, ep.cm) else {
                    finish(
                        &mut self.deliveries.later,
                        &span,
                        done,
                        Err(EpError::InvalidState(
                            "CompleteConnect before Connect completed",
                        )),
                    );
                    return None;
                };
                let r = tracing::debug_span!("qp_phase")
                    .in_scope(|| self.qp_to_rts(qpn, &setup, now))
                    .and_then(|()| {
                        let _phase = tracing::debug_span!("cm_phase").entered();
                        self.cm.complete_connect(now, cm_id, &[])?;
                        tracing::debug!("RTU sent");
                        Ok(())
                    });
                finish(&mut self.deliveries.later, &span, done, r);
                None
            }
            Request::Accept {
                qpn,
                args,
                done,
                phase: Phase::Start,
                span,
            } => {
                let ep = self.eps.eps.get(&id)?;
                let Some(cm_id) = ep.cm else {
                    finish(
                        &mut self.deliveries.later,
                        &span,
                        done,
                        Err(EpError::InvalidState("Accept without a connection request")),
                    );
                    return None;
                };
                if let Err(e) = self.qp_ready(qpn) {
                    finish(&mut self.deliveries.later, &span, done, Err(e));
                    return None;
                }
                let psn = self.tables.keys.psn();
                let mut a = AcceptParams::new(qpn, psn);
                a.responder_resources = args.responder_resources;
                a.initiator_depth = args.initiator_depth;
                a.rnr_retry_count = args.rnr_retry_count;
                a.private_data = args.private_data.clone();
                // QP phase first: the QP must answer before the peer sees the REP.
                let r = tracing::debug_span!("qp_phase").in_scope(|| {
                    self.cm
                        .accept_qp_setup(cm_id, &a)
                        .map_err(EpError::from)
                        .and_then(|s| self.qp_to_rts(qpn, &s, now).map(|()| s))
                });
                let setup = match r {
                    Ok(s) => s,
                    Err(e) => {
                        finish(&mut self.deliveries.later, &span, done, Err(e));
                        return None;
                    }
                };
                let _phase = tracing::debug_span!("cm_phase").entered();
                match self.cm.accept(now, cm_id, a) {
                    Ok(_) => {
                        let ep = self.eps.eps.get_mut(&id)?;
                        ep.setup = Some(setup);
                        ep.local_psn = psn;
                        ep.info.read_limits = (setup.max_dest_rd_atomic, setup.max_rd_atomic);
                        tracing::debug!("REP sent; waiting for the RTU");
                        Some(Request::Accept {
                            qpn,
                            args,
                            done,
                            phase: Phase::Parked,
                            span,
                        })
                    }
                    Err(e) => {
                        finish(&mut self.deliveries.later, &span, done, Err(e.into()));
                        None
                    }
                }
            }
            r @ Request::Accept {
                phase: Phase::Parked,
                ..
            } => Some(r),
            Request::Disconnect {
                qpn,
                done,
                phase: Phase::Start,
                span,
                ..
            } => {
                let ep = self.eps.eps.get(&id)?;
                let started = tracing::debug_span!("cm_phase").in_scope(|| {
                    let started = match ep.cm {
                        Some(cm_id) if !ep.closed => self.cm.disconnect(now, cm_id),
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
                    Ok(DisconnectStarted::DreqSent) => Some(Request::Disconnect {
                        qpn,
                        done,
                        phase: Phase::Parked,
                        outcome: Ok(()),
                        span,
                    }),
                    Ok(DisconnectStarted::DrepSent) | Ok(DisconnectStarted::AlreadyDone) => {
                        self.finish_disconnect(id, qpn, done, &span, Ok(()));
                        None
                    }
                    Err(_) => {
                        // Not connected (yet): nothing to say on the wire; the QP
                        // phase still runs so outstanding requests flush.
                        self.finish_disconnect(id, qpn, done, &span, Ok(()));
                        None
                    }
                }
            }
            Request::Disconnect {
                qpn,
                done,
                phase: Phase::Parked,
                outcome,
                span,
            } => {
                // Resumed by DisconnectDone (see on_cm_event), which set `outcome`.
                let ep = self.eps.eps.get(&id)?;
                if ep.closed {
                    self.finish_disconnect(id, qpn, done, &span, outcome);
                    None
                } else {
                    Some(Request::Disconnect {
                        qpn,
                        done,
                        phase: Phase::Parked,
                        outcome,
                        span,
                    })
                }
            }
        }
    }

    /// The QP phase of a Disconnect, then its completion.
    fn finish_disconnect(
        &mut self,
        id: u32,
        qpn: u32,
        done: Done<()>,
        span: &Span,
        outcome: Result<(), EpError>,
    ) {
        tracing::debug_span!("qp_phase").in_scope(|| {
            if !self.qp_to_error(qpn) {
                tracing::debug!("the QP is gone; nothing to flush");
            }
        });
        self.tables.timewait_qpns.insert(qpn);
        if let Some(ep) = self.eps.eps.get_mut(&id) {
            ep.closed = true;
            end_notifies(
                &mut self.deliveries.later,
                &mut ep.notify,
                Err(EpError::Disconnected),
            );
        }
        finish(&mut self.deliveries.later, span, done, outcome);
    }

    /// Routes one CM event to its endpoint and resumes what waited for it.
    pub(crate) fn on_cm_event(&mut self, ev: CmEvent, now: Instant) {
        let cm_id = match &ev {
            CmEvent::ConnectRequest(req) => req.listener,
            ev => ev.endpoint(),
        };
        let id = self.eps.by_cm.get(&cm_id).copied();
        match &ev {
            CmEvent::ConnectTimeout { .. } | CmEvent::AcceptTimeout { .. } => {
                tracing::warn!(ep = id, event = cm_event_name(&ev), "CM event")
            }
            CmEvent::DisconnectDone {
                how: DisconnectHow::DreqTimedOut,
                ..
            } => tracing::warn!(ep = id, event = "disconnect done", "DREQ timed out"),
            CmEvent::Rejected { reason, .. } => {
                tracing::debug!(ep = id, event = "rejected", reason, "CM event")
            }
            _ => tracing::debug!(ep = id, event = cm_event_name(&ev), "CM event"),
        }
        self.handle_cm_event(ev, now);
        if let Some(id) = id {
            self.note_cm_state(id);
        }
    }

    fn handle_cm_event(&mut self, ev: CmEvent, now: Instant) {
        match ev {
            CmEvent::ConnectRequest(req) => {
                let Some(&lid) = self.eps.by_cm.get(&req.listener) else {
                    let _ = self.cm.reject(now, req.endpoint, &[]);
                    return;
                };
                let Some(l) = self.eps.eps.get_mut(&lid).and_then(|e| e.listener.as_mut()) else {
                    return;
                };
                if l.queue.len() >= l.backlog {
                    tracing::debug!(
                        ep = lid,
                        backlog = l.backlog,
                        "connection request rejected: backlog full"
                    );
                    let _ = self.cm.reject(now, req.endpoint, &[]);
                    return;
                }
                l.queue.push_back(*req);
                self.serve_listener(lid);
            }
            CmEvent::RepReceived { endpoint, peer, qp } => {
                let Some(id) = self.eps.by_cm.get(&endpoint).copied() else {
                    return;
                };
                let Some(ep) = self.eps.eps.get_mut(&id) else {
                    return;
                };
                ep.setup = Some(qp);
                ep.info.private_data = peer.private_data.clone();
                ep.info.read_limits = (qp.max_dest_rd_atomic, qp.max_rd_atomic);
                if let Some(Request::Connect {
                    phase: Phase::Parked,
                    ..
                }) = ep.requests.front()
                {
                    if let Some(Request::Connect { done, span, .. }) = ep.requests.pop_front() {
                        finish(
                            &mut self.deliveries.later,
                            &span,
                            done,
                            Ok(ConnectInfo {
                                private_data: peer.private_data.clone(),
                                read_limits: (qp.max_dest_rd_atomic, qp.max_rd_atomic),
                            }),
                        );
                    }
                }
                self.run_ep(id, now);
            }
            CmEvent::Established { endpoint } => self.finish_setup(endpoint, now, Ok(())),
            CmEvent::Rejected {
                endpoint,
                reason,
                private_data,
                ..
            } => {
                if let Some(id) = self.eps.by_cm.get(&endpoint).copied() {
                    if let Some(ep) = self.eps.eps.get_mut(&id) {
                        ep.info.private_data = private_data.clone();
                        ep.closed = true;
                    }
                }
                self.finish_setup(
                    endpoint,
                    now,
                    Err(EpError::Rejected {
                        reason,
                        private_data,
                    }),
                );
                self.fail_notifies(endpoint, EpError::Aborted);
            }
            CmEvent::ConnectTimeout { endpoint } | CmEvent::AcceptTimeout { endpoint } => {
                if let Some(ep) = self
                    .eps
                    .by_cm
                    .get(&endpoint)
                    .copied()
                    .and_then(|id| self.eps.eps.get_mut(&id))
                {
                    ep.closed = true;
                }
                self.finish_setup(endpoint, now, Err(EpError::Timeout));
                self.fail_notifies(endpoint, EpError::Aborted);
            }
            CmEvent::DreqReceived { endpoint } => {
                let Some(id) = self.eps.by_cm.get(&endpoint).copied() else {
                    return;
                };
                let Some(ep) = self.eps.eps.get_mut(&id) else {
                    return;
                };
                ep.info.dreq_received = true;
                // NotifyDisconnect completes; the QP is not touched (rule D6).
                end_notifies(&mut self.deliveries.later, &mut ep.notify, Ok(()));
                // A DREQ while the REP waits for its RTU: the connection is
                // up and already closing; the Accept has done its job (WV).
                if let Some(Request::Accept {
                    phase: Phase::Parked,
                    ..
                }) = ep.requests.front()
                {
                    if let Some(Request::Accept { done, span, .. }) = ep.requests.pop_front() {
                        finish(&mut self.deliveries.later, &span, done, Ok(()));
                    }
                    self.run_ep(id, now);
                }
            }
            CmEvent::DisconnectDone { endpoint, how } => {
                let Some(id) = self.eps.by_cm.get(&endpoint).copied() else {
                    return;
                };
                let Some(ep) = self.eps.eps.get_mut(&id) else {
                    return;
                };
                ep.closed = true;
                let outcome = match how {
                    DisconnectHow::DrepReceived
                    | DisconnectHow::DrepSent
                    | DisconnectHow::RejReceived => Ok(()),
                    DisconnectHow::DreqTimedOut => Err(EpError::Timeout),
                };
                if let Some(Request::Disconnect { outcome: o, .. }) = ep.requests.front_mut() {
                    *o = outcome;
                }
                self.run_ep(id, now);
            }
            CmEvent::DeviceRemoved { endpoint } => {
                if let Some(id) = self.eps.by_cm.get(&endpoint).copied() {
                    self.fail_ep(id, EpError::DeviceRemoved);
                }
            }
            CmEvent::TimewaitExit { local_qpn, .. } => {
                self.tables.timewait_qpns.remove(&local_qpn);
            }
            _ => {}
        }
    }

    /// Ends a parked Connect or Accept at the head of the endpoint bound to
    /// `cm_id` with `result` (a Connect only ever fails here: it succeeds on
    /// the REP), then runs the queue on.
    fn finish_setup(&mut self, cm_id: EndpointId, now: Instant, result: Result<(), EpError>) {
        let Some(id) = self.eps.by_cm.get(&cm_id).copied() else {
            return;
        };
        let Some(ep) = self.eps.eps.get_mut(&id) else {
            return;
        };
        let parked = matches!(
            ep.requests.front(),
            Some(
                Request::Connect {
                    phase: Phase::Parked,
                    ..
                } | Request::Accept {
                    phase: Phase::Parked,
                    ..
                }
            )
        );
        if !parked {
            return;
        }
        match ep.requests.pop_front() {
            Some(Request::Connect { done, span, .. }) => finish(
                &mut self.deliveries.later,
                &span,
                done,
                result.and(Err(EpError::InvalidState(
                    "connection established without a REP",
                ))),
            ),
            Some(Request::Accept { done, span, .. }) => {
                finish(&mut self.deliveries.later, &span, done, result)
            }
            _ => {}
        }
        self.run_ep(id, now);
    }

    fn fail_notifies(&mut self, cm_id: EndpointId, err: EpError) {
        if let Some(ep) = self
            .eps
            .by_cm
            .get(&cm_id)
            .copied()
            .and_then(|id| self.eps.eps.get_mut(&id))
        {
            end_notifies(&mut self.deliveries.later, &mut ep.notify, Err(err));
        }
    }

    /// Completes every parked request of endpoint `id` with `err`.
    fn fail_ep(&mut self, id: u32, err: EpError) {
        let Some(ep) = self.eps.eps.get_mut(&id) else {
            return;
        };
        for r in ep.requests.drain(..) {
            let l = &mut self.deliveries.later;
            match r {
                Request::Connect { done, span, .. } => finish(l, &span, done, Err(err.clone())),
                Request::CompleteConnect { done, span, .. } => {
                    finish(l, &span, done, Err(err.clone()))
                }
                Request::Accept { done, span, .. } => finish(l, &span, done, Err(err.clone())),
                Request::Disconnect { done, span, .. } => finish(l, &span, done, Err(err.clone())),
            }
        }
        end_notifies(&mut self.deliveries.later, &mut ep.notify, Err(err.clone()));
        if let Some(l) = ep.listener.as_mut() {
            for (_, span, w) in l.waiters.drain(..) {
                finish(&mut self.deliveries.later, &span, w, Err(err.clone()));
            }
        }
    }

    /// Hands queued connection requests to waiting GetConnectionRequest calls.
    fn serve_listener(&mut self, lid: u32) {
        loop {
            let Some(l) = self.eps.eps.get_mut(&lid).and_then(|e| e.listener.as_mut()) else {
                return;
            };
            if l.queue.is_empty() || l.waiters.is_empty() {
                return;
            }
            let req = l.queue.pop_front().expect("non-empty");
            let (new_id, span, done) = l.waiters.pop_front().expect("non-empty");
            let local = self.cm.config().local_addr;
            let Some(ep) = self.eps.eps.get_mut(&new_id) else {
                // The waiting endpoint was destroyed meanwhile: put the request back.
                if let Some(l) = self.eps.eps.get_mut(&lid).and_then(|e| e.listener.as_mut()) {
                    l.queue.push_front(req);
                }
                finish(
                    &mut self.deliveries.later,
                    &span,
                    done,
                    Err(EpError::Canceled),
                );
                continue;
            };
            let peer_port = req.cma.map_or(0, |h: CmaHeader| h.src_port);
            let info = RequestInfo {
                peer: req.peer.addr,
                peer_port,
                local,
                service_id: req.service_id,
                private_data: req.peer.private_data.clone(),
                peer_read_limits: (req.peer.responder_resources, req.peer.initiator_depth),
            };
            ep.cm = Some(req.endpoint);
            ep.closed = false;
            ep.info.peer = Some(req.peer.addr);
            ep.info.peer_port = peer_port;
            ep.info.private_data = req.peer.private_data.clone();
            ep.info.read_limits = (req.peer.responder_resources, req.peer.initiator_depth);
            self.eps.by_cm.insert(req.endpoint, new_id);
            span.in_scope(|| {
                tracing::debug!(peer = %info.peer, port = info.peer_port, "connection request handed over")
            });
            finish(&mut self.deliveries.later, &span, done, Ok(info));
            self.note_cm_state(new_id);
        }
    }

    /// Device removal: every parked endpoint request fails.
    pub(crate) fn remove_eps(&mut self) {
        let ids: Vec<u32> = self.eps.eps.keys().copied().collect();
        for id in ids {
            self.fail_ep(id, EpError::DeviceRemoved);
        }
        self.cm.remove_device();
        while self.cm.poll_event().is_some() {}
    }
}

impl Nic {
    fn with_core<T>(
        &self,
        f: impl FnOnce(&mut Core, Instant) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let _nic = self.shared().span.enter();
        let now = self.now();
        let mut c = self.core_guard()?;
        let r = f(&mut c, now);
        c.finish_step(self.shared(), now);
        r
    }

    fn submit<T>(
        &self,
        ep: u32,
        make: impl FnOnce(Done<T>) -> Request,
    ) -> Result<EpPending<T>, EngineError> {
        self.with_core(|c, now| {
            let e = c.ep(ep)?;
            let (p, done) = pending::<Result<T, EpError>>(removed);
            e.requests.push_back(make(done));
            let only = e.requests.len() == 1;
            if only {
                c.run_ep(ep, now);
            }
            Ok(p)
        })
    }

    /// Creates a connection endpoint.
    pub fn create_ep(&self) -> Result<u32, EngineError> {
        self.with_core(|c, _| {
            c.eps.next += 1;
            let id = c.eps.next;
            c.eps.eps.insert(id, Ep::default());
            tracing::debug!(ep = id, "endpoint created");
            Ok(id)
        })
    }

    /// What an endpoint knows (state, peer, private data, read limits).
    pub fn ep_info(&self, ep: u32) -> Result<EpInfo, EngineError> {
        self.with_core(|c, _| {
            let cm = c.ep(ep)?.cm;
            let cm_state = cm.and_then(|id| c.cm.state(id));
            let comm_ids =
                cm.and_then(|id| Some((c.cm.local_comm_id(id)?, c.cm.peer(id)?.comm_id)));
            let e = c.ep(ep)?;
            let mut info = e.info.clone();
            info.cm_state = cm_state;
            info.comm_ids = comm_ids;
            info.listening = e.listener.is_some();
            Ok(info)
        })
    }

    /// Listens for connection requests on rdma_cm TCP `port` (service ID
    /// `0x0106 << 16 | port`), queueing at most `backlog` unanswered ones.
    pub fn ep_listen(&self, ep: u32, port: u16, backlog: usize) -> Result<(), EngineError> {
        self.with_core(|c, _| {
            let sid = cma::service_id(cma::RDMA_PS_TCP, port);
            if c.ep(ep)?.listener.is_some() || c.ep(ep)?.cm.is_some() {
                return Err(EngineError::Busy("the endpoint is already in use"));
            }
            let cm_id = c.cm.listen(sid).map_err(|e| match e {
                CmError::ServiceIdBusy(_) => {
                    EngineError::Busy("the address is already being listened on")
                }
                e => EngineError::InvalidArgument(leak_cm(e)),
            })?;
            c.eps.by_cm.insert(cm_id, ep);
            c.ep(ep)?.listener = Some(Listener {
                service_id: sid,
                cm: cm_id,
                backlog: backlog.max(1),
                queue: VecDeque::new(),
                waiters: VecDeque::new(),
            });
            tracing::debug!(ep, port, backlog, "listening");
            Ok(())
        })
    }

    /// Waits on listening endpoint `listener` for a connection request and
    /// binds it to endpoint `new_ep` (several may wait at once).
    pub fn ep_get_request(
        &self,
        listener: u32,
        new_ep: u32,
    ) -> Result<EpPending<RequestInfo>, EngineError> {
        self.with_core(|c, _| {
            c.ep(new_ep)?;
            let e = c.ep(listener)?;
            let Some(l) = e.listener.as_mut() else {
                return Err(EngineError::InvalidArgument(
                    "the endpoint is not listening",
                ));
            };
            let (p, done) = pending::<Result<RequestInfo, EpError>>(removed);
            let span = tracing::debug_span!("ep_get_request", ep = listener, new_ep);
            l.waiters.push_back((new_ep, span, done));
            c.serve_listener(listener);
            Ok(p)
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
        {
            let c = self.core_guard()?;
            let e = c.eps.eps.get(&ep).ok_or(EngineError::NotFound {
                what: "endpoint",
                id: ep,
            })?;
            if e.listener.is_some() || (e.cm.is_some() && !e.closed) || !e.requests.is_empty() {
                return Err(EngineError::Busy("connection already active"));
            }
            if !c.tables.qps.contains_key(&qpn) {
                return Err(EngineError::NotFound {
                    what: "QP",
                    id: qpn,
                });
            }
        }
        self.submit(ep, |done| Request::Connect {
            qpn,
            args,
            done,
            phase: Phase::Start,
            span: tracing::debug_span!("ep_connect", ep, qp = qpn),
        })
    }

    /// Active side, after Connect completed: QP to RTS, then RTU.
    pub fn ep_complete_connect(&self, ep: u32, qpn: u32) -> Result<EpPending<()>, EngineError> {
        self.submit(ep, |done| Request::CompleteConnect {
            qpn,
            done,
            span: tracing::debug_span!("ep_complete_connect", ep, qp = qpn),
        })
    }

    /// Passive side: QP to RTS, then REP; completes when the RTU arrives.
    pub fn ep_accept(
        &self,
        ep: u32,
        qpn: u32,
        args: AcceptArgs,
    ) -> Result<EpPending<()>, EngineError> {
        self.submit(ep, |done| Request::Accept {
            qpn,
            args,
            done,
            phase: Phase::Start,
            span: tracing::debug_span!("ep_accept", ep, qp = qpn),
        })
    }

    /// Rejects the connection request (passive) or the REP (active) bound to `ep`.
    pub fn ep_reject(&self, ep: u32, private_data: &[u8]) -> Result<(), EngineError> {
        self.with_core(|c, now| {
            let e = c.ep(ep)?;
            let Some(cm_id) = e.cm else {
                return Err(EngineError::InvalidArgument("no connection to reject"));
            };
            e.closed = true;
            tracing::debug!(ep, "rejecting the connection");
            c.cm.reject(now, cm_id, private_data)
                .map_err(|e| EngineError::InvalidArgument(leak_cm(e)))?;
            c.fail_ep(ep, EpError::Canceled);
            c.note_cm_state(ep);
            Ok(())
        })
    }

    /// Disconnects: DREQ (or DREP if the peer's DREQ arrived), then QP
    /// `qpn` to ERR. Completes when a DREP arrives, the DREQ times out
    /// ([`EpError::Timeout`]) or the DREP is sent.
    ///
    /// Refused with [`EngineError::NotConnected`] on an endpoint that never
    /// connected or whose connection is already over (ND: `ND_CONNECTION_INVALID`).
    pub fn ep_disconnect(&self, ep: u32, qpn: u32) -> Result<EpPending<()>, EngineError> {
        {
            let c = self.core_guard()?;
            let e = c.eps.eps.get(&ep).ok_or(EngineError::NotFound {
                what: "endpoint",
                id: ep,
            })?;
            let disconnecting = e
                .requests
                .iter()
                .any(|r| matches!(r, Request::Disconnect { .. }));
            if e.cm.is_none() || (e.closed && !disconnecting && e.requests.is_empty()) {
                return Err(EngineError::NotConnected);
            }
        }
        self.submit(ep, |done| Request::Disconnect {
            qpn,
            done,
            phase: Phase::Start,
            outcome: Ok(()),
            span: tracing::debug_span!("ep_disconnect", ep, qp = qpn),
        })
    }

    /// Completes when the peer's DREQ arrives — at once if it already did or
    /// the connection is already over; [`EpError::Disconnected`] if our own
    /// Disconnect finishes first. Refused with [`EngineError::NotConnected`]
    /// on an endpoint that never connected.
    pub fn ep_notify_disconnect(&self, ep: u32) -> Result<EpPending<()>, EngineError> {
        self.with_core(|c, _| {
            let e = c.ep(ep)?;
            if e.cm.is_none() {
                return Err(EngineError::NotConnected);
            }
            let (p, done) = pending::<Result<(), EpError>>(removed);
            let span = tracing::debug_span!("ep_notify_disconnect", ep);
            if e.info.dreq_received || e.closed {
                finish(&mut c.deliveries.later, &span, done, Ok(()));
            } else {
                span.in_scope(|| tracing::debug!("waiting for the peer's DREQ"));
                e.notify.push((span, done));
            }
            Ok(p)
        })
    }

    /// Completes every parked request of `ep` with [`EpError::Canceled`]; a
    /// Connect or Accept in progress is abandoned (its CM endpoint destroyed).
    pub fn ep_cancel(&self, ep: u32) -> Result<(), EngineError> {
        self.with_core(|c, now| {
            let e = c.ep(ep)?;
            let setting_up = matches!(
                e.requests.front(),
                Some(Request::Connect { .. } | Request::Accept { .. })
            );
            if setting_up {
                if let Some(cm_id) = e.cm.take() {
                    e.closed = true;
                    c.eps.by_cm.remove(&cm_id);
                    let _ = c.cm.destroy(now, cm_id);
                }
            }
            tracing::debug!(ep, setting_up, "canceling the endpoint's requests");
            c.fail_ep(ep, EpError::Canceled);
            c.note_cm_state(ep);
            Ok(())
        })
    }

    /// Destroys an endpoint: parked requests complete [`EpError::Canceled`]
    /// and the CM endpoint goes the Linux way (REJ, DREQ or DREP as its state
    /// demands).
    pub fn destroy_ep(&self, ep: u32) -> Result<(), EngineError> {
        let _nic = self.shared().span.enter();
        let now = self.now();
        let mut c = self.core_lock();
        tracing::debug!(ep, "destroying the endpoint");
        c.fail_ep(ep, EpError::Canceled);
        let Some(e) = c.eps.eps.remove(&ep) else {
            return Err(EngineError::NotFound {
                what: "endpoint",
                id: ep,
            });
        };
        if let Some(l) = e.listener {
            c.eps.by_cm.remove(&l.cm);
            let _ = c.cm.destroy(now, l.cm);
            for r in l.queue {
                let _ = c.cm.reject(now, r.endpoint, &[]);
            }
            let _ = l.service_id;
        }
        if let Some(cm_id) = e.cm {
            c.eps.by_cm.remove(&cm_id);
            if !c.is_removed_cm() {
                let _ = c.cm.destroy(now, cm_id);
            }
        }
        c.finish_step(self.shared(), now);
        Ok(())
    }
}

fn leak_cm(e: CmError) -> &'static str {
    match e {
        CmError::UnknownEndpoint => "unknown CM endpoint",
        CmError::InvalidState(_) => "not allowed in the connection's state",
        CmError::DeviceRemoved => "device removed",
        CmError::PrivateDataTooLong { .. } => "private data too long",
        CmError::ServiceIdBusy(_) => "service ID already listened on",
        CmError::InvalidParameter(p) => p,
    }
}

impl Core {
    fn is_removed_cm(&self) -> bool {
        self.cm.is_removed()
    }
}

#[allow(dead_code)]
fn _assert_send(_: &Shared) {}
