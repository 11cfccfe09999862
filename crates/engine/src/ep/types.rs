//! The endpoint API's public types: what the application passes in, what a
//! request reports back, and how it ends badly.

use crate::pending::Pending;
pub use ndverbs_proto::cm::{
    AcceptArgs, CmError, ConnectArgs, ConnectInfo, EpInfo, RequestInfo, SidrArgs, SidrInfo,
};
use ndverbs_proto::rc::ModifyError;

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
/// #     let (init, mask) = RcConnection { access: Access::ALL, ..RcConnection::new(0) }.init();
/// #     ad.modify_qp(qp.qpn(), &init, mask).unwrap();
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
/// match a.ep_connect(ea, qa.ident(), cargs(&b, 7000))?.wait() {
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
#[non_exhaustive]
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
    /// The peer's host answered the REQ with ICMP port unreachable: no
    /// RoCE endpoint there (nothing on UDP 4791), so the connect ended
    /// without waiting out the REQ retries.
    #[error("port unreachable: no RoCE endpoint at the peer's address")]
    PortUnreachable,
    /// The peer rejected the connection.
    #[error("rejected (reason {reason})")]
    Rejected {
        /// REJ reason code.
        reason: u16,
        /// REJ private data.
        private_data: Vec<u8>,
    },
    /// The connection failed without a DREQ while the request waited: a REJ
    /// or a CM timeout (NotifyDisconnect; ND: `ND_CONNECTION_ABORTED`).
    #[error("connection aborted")]
    Aborted,
    /// The request does not fit the endpoint's state.
    #[error("invalid endpoint state: {0}")]
    InvalidState(&'static str),
    /// A connection is already active or being set up on the endpoint.
    #[error("connection already active")]
    ConnectionActive,
    /// The QP named by the request does not exist: it was never created, or
    /// it was released before the request's QP phase (ND: `ND_CANCELED`).
    /// A new QP that took the released one's number is not that QP.
    #[error("no QP {0:#x}")]
    NoQp(u32),
    /// The QP refused the transition.
    #[error(transparent)]
    Modify(#[from] ModifyError),
    /// The CM refused the call.
    #[error(transparent)]
    Cm(#[from] CmError),
    /// The engine dropped the request without an outcome: a bug in the
    /// engine, never a state of the connection or the device.
    #[error("internal error: the engine lost the request")]
    Lost,
}

/// Which QP a request names: its number and its creation generation. QPNs
/// are reused once released, so a number alone could name a QP created
/// after the one the application meant; the generation (unique per NIC,
/// never reused) tells them apart, and a request whose QP was released acts
/// on no QP at all.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::nic::{Nic, QpInit};
/// use ndverbs_proto::rc::QpCaps;
/// let a = Nic::open("127.93.18.1".parse().unwrap(), Progress::Thread)?;
/// let pd = a.alloc_pd()?;
/// let (cq, _) = a.create_cq(16)?;
/// let init = QpInit { pd, send_cq: cq, recv_cq: cq, srq: None, caps: QpCaps::default(),
///     max_recv_wr: 16, max_recv_sge: 1 };
/// let (first, second) = (a.create_qp(init)?, a.create_qp(init)?);
/// assert_eq!(first.ident().qpn, first.qpn());
/// assert_ne!(first.ident().generation, second.ident().generation);
/// # Ok::<(), ndverbs_engine::error::EngineError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpIdent {
    /// The QP number.
    pub qpn: u32,
    /// The NIC's count of QPs created before this one.
    pub generation: u64,
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
