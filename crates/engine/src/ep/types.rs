//! The endpoint API's public types: what the application passes in, what a
//! request reports back, and how it ends badly.

use crate::pending::Pending;
use ndverbs_proto::cm::CmError;
use ndverbs_proto::rc::{ModifyError, PathMtu};
use std::net::IpAddr;

/// How an endpoint request ended badly.
///
/// # Example
///
/// ```
/// # use ndverbs_engine::adapter::{Adapter, Progress, QpInit, QpShared};
/// # use ndverbs_engine::ep::*;
/// # use ndverbs_proto::mem::Access;
/// # use ndverbs_proto::rc::*;
/// # use std::sync::Arc;
/// # fn side(ip: &str) -> (Adapter, Arc<QpShared>) {
/// #     let ad = Adapter::open(ip.parse().unwrap(), Progress::Thread).unwrap();
/// #     let pd = ad.alloc_pd().unwrap();
/// #     let (cq, _) = ad.create_cq(16).unwrap();
/// #     let qp = ad.create_qp(QpInit { pd, send_cq: cq, recv_cq: cq, srq: None,
/// #         caps: QpCaps::default(), max_recv_wr: 16, max_recv_sge: 1 }).unwrap();
/// #     let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
/// #     ad.modify_qp(qp.qpn(), &init,
/// #         AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS).unwrap();
/// #     (ad, qp)
/// # }
/// # fn cargs(to: &Adapter, port: u16) -> ConnectArgs {
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
    /// The adapter was removed.
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
/// use ndverbs_engine::adapter::{Adapter, Progress, QpInit, QpShared};
/// use ndverbs_engine::ep::{AcceptArgs, ConnectArgs};
/// use ndverbs_proto::mem::Access;
/// use ndverbs_proto::rc::*;
/// use std::sync::Arc;
/// /// An adapter with one QP in INIT (the CM takes it on to RTR and RTS).
/// fn side(ip: &str) -> Result<(Adapter, Arc<QpShared>), Box<dyn std::error::Error>> {
///     let ad = Adapter::open(ip.parse()?, Progress::Thread)?;
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
/// # use ndverbs_engine::adapter::{Adapter, Progress, QpInit, QpShared};
/// # use ndverbs_engine::ep::*;
/// # use ndverbs_proto::mem::Access;
/// # use ndverbs_proto::rc::*;
/// # use std::sync::Arc;
/// # fn side(ip: &str) -> (Adapter, Arc<QpShared>) {
/// #     let ad = Adapter::open(ip.parse().unwrap(), Progress::Thread).unwrap();
/// #     let pd = ad.alloc_pd().unwrap();
/// #     let (cq, _) = ad.create_cq(16).unwrap();
/// #     let qp = ad.create_qp(QpInit { pd, send_cq: cq, recv_cq: cq, srq: None,
/// #         caps: QpCaps::default(), max_recv_wr: 16, max_recv_sge: 1 }).unwrap();
/// #     let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
/// #     ad.modify_qp(qp.qpn(), &init,
/// #         AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS).unwrap();
/// #     (ad, qp)
/// # }
/// # fn cargs(to: &Adapter, port: u16) -> ConnectArgs {
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
/// # use ndverbs_engine::adapter::{Adapter, Progress, QpInit, QpShared};
/// # use ndverbs_engine::ep::*;
/// # use ndverbs_proto::mem::Access;
/// # use ndverbs_proto::rc::*;
/// # use std::sync::Arc;
/// # fn side(ip: &str) -> (Adapter, Arc<QpShared>) {
/// #     let ad = Adapter::open(ip.parse().unwrap(), Progress::Thread).unwrap();
/// #     let pd = ad.alloc_pd().unwrap();
/// #     let (cq, _) = ad.create_cq(16).unwrap();
/// #     let qp = ad.create_qp(QpInit { pd, send_cq: cq, recv_cq: cq, srq: None,
/// #         caps: QpCaps::default(), max_recv_wr: 16, max_recv_sge: 1 }).unwrap();
/// #     let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
/// #     ad.modify_qp(qp.qpn(), &init,
/// #         AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS).unwrap();
/// #     (ad, qp)
/// # }
/// # fn cargs(to: &Adapter, port: u16) -> ConnectArgs {
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
/// # use ndverbs_engine::adapter::{Adapter, Progress, QpInit, QpShared};
/// # use ndverbs_engine::ep::*;
/// # use ndverbs_proto::mem::Access;
/// # use ndverbs_proto::rc::*;
/// # use std::sync::Arc;
/// # fn side(ip: &str) -> (Adapter, Arc<QpShared>) {
/// #     let ad = Adapter::open(ip.parse().unwrap(), Progress::Thread).unwrap();
/// #     let pd = ad.alloc_pd().unwrap();
/// #     let (cq, _) = ad.create_cq(16).unwrap();
/// #     let qp = ad.create_qp(QpInit { pd, send_cq: cq, recv_cq: cq, srq: None,
/// #         caps: QpCaps::default(), max_recv_wr: 16, max_recv_sge: 1 }).unwrap();
/// #     let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
/// #     ad.modify_qp(qp.qpn(), &init,
/// #         AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS).unwrap();
/// #     (ad, qp)
/// # }
/// # fn cargs(to: &Adapter, port: u16) -> ConnectArgs {
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
/// use ndverbs_engine::adapter::{Adapter, Progress};
/// let a = Adapter::open("127.93.15.1".parse().unwrap(), Progress::Thread)?;
/// let ep = a.create_ep()?;
/// let info = a.ep_info(ep)?;
/// assert!(info.cm_state.is_none() && !info.listening); // not bound to anything yet
/// a.ep_listen(ep, 7000, 8)?;
/// let info = a.ep_info(ep)?;
/// assert!(info.listening && info.peer.is_none() && info.comm_ids.is_none());
/// # Ok::<(), ndverbs_engine::adapter::EngineError>(())
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

/// Result of an endpoint request.
///
/// # Example
///
/// ```
/// use ndverbs_engine::adapter::{Adapter, Progress};
/// use ndverbs_engine::ep::{EpError, EpPending, RequestInfo};
/// use std::time::Duration;
/// let a = Adapter::open("127.93.17.1".parse().unwrap(), Progress::Thread)?;
/// let (listener, ep) = (a.create_ep()?, a.create_ep()?);
/// a.ep_listen(listener, 7000, 1)?;
/// let req: EpPending<RequestInfo> = a.ep_get_request(listener, ep)?;
/// // Nobody connects: it stays pending (`.await` works too) until cancelled.
/// assert_eq!(req.wait_timeout(Duration::from_millis(10)), None);
/// a.ep_cancel(listener)?;
/// assert_eq!(req.wait(), Err(EpError::Canceled));
/// # Ok::<(), ndverbs_engine::adapter::EngineError>(())
/// ```
pub type EpPending<T> = Pending<Result<T, EpError>>;
