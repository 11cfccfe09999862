//! Connection endpoints (the connection manager side of a connection).
//!
//! An [`Endpoint`] speaks the IB CM (rdma_cm compatible) for one connection or
//! listens for many. Its long-running calls return a [`Pending`], which is
//! both a future (any runtime) and a blocking wait, and ends with an
//! [`Error`] of kind [`ErrorKind::Rejected`] (with the peer's
//! [`Rejection`](crate::Rejection)), [`ErrorKind::TimedOut`],
//! [`ErrorKind::Canceled`], [`ErrorKind::ConnectionAborted`],
//! [`ErrorKind::Disconnected`], [`ErrorKind::InvalidState`] or
//! [`ErrorKind::DeviceRemoved`] when it ends badly. The endpoint and the QP
//! are tied together only per call: Connect, CompleteConnect, Accept and
//! Disconnect take the QP, and run on the engine in phases (CM, then QP, or
//! the other way round). They take the QP as a [`QpId`] — a number, not a
//! reference: the endpoint never holds the QP.
//!
//! The argument and result types here ([`ConnectArgs`], [`AcceptArgs`],
//! [`RequestInfo`], [`ConnectInfo`], [`EpInfo`]) belong to this API, not to
//! the protocol: the connection manager in `ndverbs-proto` has its own
//! message-level parameters, and the engine translates.

use crate::device::Device;
use crate::error::{Error, ErrorKind, Result};
use crate::pending::Pending;
use crate::qp::QpId;
use ndverbs_proto::cm::CmState;
use ndverbs_proto::rc::PathMtu;
use std::net::IpAddr;

/// Everything a Connect needs besides the QP.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// // What rdma_connect's conn_param says, and where to.
/// let args = ConnectArgs {
///     remote: "10.0.0.2".parse().unwrap(),
///     remote_port: 7471,
///     local_port: 40000,
///     responder_resources: 1,
///     initiator_depth: 1,
///     retry_count: 7,
///     rnr_retry_count: 7,
///     path_mtu: PathMtu::Mtu1024,
///     private_data: b"hello".to_vec(),
/// };
/// // One set of arguments, several connections: only the ports differ.
/// let second = ConnectArgs { local_port: 40001, ..args.clone() };
/// assert_ne!(args, second);
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
/// use ndverbs_verbs::*;
/// // Offer up to 16 READs each way: the CM clamps to what the peer asked for.
/// let args = AcceptArgs {
///     responder_resources: 16,
///     initiator_depth: 16,
///     rnr_retry_count: 7,
///     private_data: b"welcome".to_vec(),
/// };
/// assert!(args.private_data.len() <= 196);
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
/// use ndverbs_verbs::ConnectInfo;
/// fn reads_in_flight(info: &ConnectInfo) -> u8 {
///     // (inbound, outbound): what the peer may READ from us, and we from it.
///     info.read_limits.1
/// }
/// let info = ConnectInfo { private_data: b"token=42".to_vec(), read_limits: (1, 2) };
/// assert_eq!(reads_in_flight(&info), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectInfo {
    /// The peer's private data (zero-padded to the REP's 196 bytes).
    pub private_data: Vec<u8>,
    /// Negotiated READ/atomic limits: (inbound, outbound).
    pub read_limits: (u8, u8),
}

/// A connection request handed to the application.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::RequestInfo;
/// /// Accept only requests that introduce themselves.
/// fn welcome(req: &RequestInfo) -> bool {
///     req.private_data.starts_with(b"hello")
/// }
/// let req = RequestInfo {
///     peer: "10.0.0.1".parse().unwrap(),
///     peer_port: 40000,
///     local: "10.0.0.2".parse().unwrap(),
///     service_id: (0x0106 << 16) | 7471,
///     private_data: b"hello".to_vec(),
///     peer_read_limits: (1, 1),
/// };
/// assert!(welcome(&req));
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

/// What an endpoint knows about itself.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.26.1".parse().unwrap())?;
/// let ep = Endpoint::new(&dev)?;
/// let info: EpInfo = ep.info()?;
/// assert!(info.cm_state.is_none() && !info.listening); // not bound to anything yet
/// ep.listen(7000, 8)?;
/// let info = ep.info()?;
/// assert!(info.listening && info.peer.is_none() && info.comm_ids.is_none());
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EpInfo {
    /// The CM state, if bound to a CM endpoint.
    pub cm_state: Option<CmState>,
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

/// A connection endpoint. Dropping it destroys it (the CM endpoint ends the
/// Linux way: REJ, DREQ or DREP as its state demands).
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let da = Device::open("127.92.11.1".parse().unwrap())?;
/// let db = Device::open("127.92.11.2".parse().unwrap())?;
/// let (pa, pb) = (da.alloc_pd()?, db.alloc_pd()?);
/// let (ca, cb) = (da.create_cq(16)?, db.create_cq(16)?);
/// let (qa, qb) = (pa.create_qp(&QpInitAttr::new(&ca, &ca))?, pb.create_qp(&QpInitAttr::new(&cb, &cb))?);
/// // QPs join a connection in INIT (the CM takes them on to RTR and RTS).
/// for qp in [&qa, &qb] {
///     qp.to_init(Access::ALL)?;
/// }
/// // B listens on rdma_cm port 7000; each request is bound to a fresh endpoint.
/// let listener = Endpoint::new(&db)?;
/// listener.listen(7000, 4)?;
/// let eb = Endpoint::new(&db)?;
/// let request = listener.get_request(&eb)?;
/// // A connects: REQ, completes on B's REP.
/// let args = ConnectArgs {
///     remote: db.query().addr,
///     remote_port: 7000,
///     local_port: 40000,
///     responder_resources: 1,
///     initiator_depth: 1,
///     retry_count: 7,
///     rnr_retry_count: 7,
///     path_mtu: PathMtu::Mtu1024,
///     private_data: b"hello".to_vec(),
/// };
/// let ea = Endpoint::new(&da)?;
/// let rep = ea.connect(&qa, args.clone())?;
/// let req: RequestInfo = request.wait()?;
/// assert_eq!(req.peer, da.query().addr);
/// assert!(req.private_data.starts_with(b"hello"));
/// let rtu = eb.accept(&qb, AcceptArgs {
///     responder_resources: 1,
///     initiator_depth: 1,
///     rnr_retry_count: 7,
///     private_data: b"welcome".to_vec(),
/// })?;
/// let info: ConnectInfo = rep.wait()?;
/// assert!(info.private_data.starts_with(b"welcome"));
/// // CompleteConnect: A's QP to RTS and the RTU, which completes B's Accept.
/// ea.complete_connect(&qa)?.wait()?;
/// rtu.wait()?;
/// assert_eq!((qa.state(), qb.state()), (QpState::Rts, QpState::Rts));
/// // Teardown: notify_disconnect (optional) hears the DREQ and flushes
/// // nothing; each side's disconnect moves its own QP to ERR.
/// let dreq = eb.notify_disconnect()?;
/// let bye = ea.disconnect(&qa)?; // DREQ
/// dreq.wait()?;
/// assert!(eb.info()?.dreq_received);
/// eb.disconnect(&qb)?.wait()?; // DREP
/// bye.wait()?;
/// // A request turned down: the connect fails with the REJ's private data.
/// let (qc, ec, ed) = (pa.create_qp(&QpInitAttr::new(&ca, &ca))?, Endpoint::new(&da)?, Endpoint::new(&db)?);
/// # qc.to_init(Access::ALL)?;
/// let request = listener.get_request(&ed)?;
/// let rep = ec.connect(&qc, ConnectArgs { local_port: 40001, ..args })?;
/// request.wait()?;
/// ed.reject(b"busy")?;
/// let err = rep.wait().unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Rejected);
/// assert!(err.rejection().unwrap().private_data.starts_with(b"busy"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Endpoint {
    dev: Device,
    id: u32,
}

impl Endpoint {
    /// A fresh endpoint on `dev`.
    pub fn new(dev: &Device) -> Result<Endpoint> {
        Ok(Endpoint {
            dev: dev.clone(),
            id: dev.nic.create_ep()?,
        })
    }

    /// The endpoint's number on its device (for logs: the engine's spans
    /// name endpoints by it).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Listens on rdma_cm port `port` with room for `backlog` unanswered
    /// requests; a port already listened on is [`ErrorKind::Busy`].
    pub fn listen(&self, port: u16, backlog: usize) -> Result<()> {
        self.dev.nic.ep_listen(self.id, port, backlog)
    }

    /// Waits for a connection request and binds it to `into`.
    pub fn get_request(&self, into: &Endpoint) -> Result<Pending<RequestInfo>> {
        // Endpoint ids are per device: another device's would name one of ours.
        if !self.dev.nic.same_as(&into.dev.nic) && !self.dev.is_removed() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "Endpoint::get_request",
                "the endpoint belongs to another device",
            ));
        }
        self.dev.nic.ep_get_request(self.id, into.id)
    }

    /// Connects `qp` (in INIT). Completes when the peer's REP arrives.
    pub fn connect(&self, qp: impl Into<QpId>, args: ConnectArgs) -> Result<Pending<ConnectInfo>> {
        self.dev.nic.ep_connect(self.id, qp.into().0, args)
    }

    /// After `connect` completed: QP to RTS, then RTU.
    pub fn complete_connect(&self, qp: impl Into<QpId>) -> Result<Pending<()>> {
        self.dev.nic.ep_complete_connect(self.id, qp.into().0)
    }

    /// Accepts the request bound to this endpoint with `qp`; completes on RTU.
    pub fn accept(&self, qp: impl Into<QpId>, args: AcceptArgs) -> Result<Pending<()>> {
        self.dev.nic.ep_accept(self.id, qp.into().0, args)
    }

    /// Rejects the request (or the REP) bound to this endpoint.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        self.dev.nic.ep_reject(self.id, private_data)
    }

    /// DREQ (or DREP if the peer's DREQ arrived), then `qp` to ERR. An
    /// endpoint that never connected is [`ErrorKind::NotConnected`].
    pub fn disconnect(&self, qp: impl Into<QpId>) -> Result<Pending<()>> {
        self.dev.nic.ep_disconnect(self.id, qp.into().0)
    }

    /// Completes when the peer's DREQ arrives.
    pub fn notify_disconnect(&self) -> Result<Pending<()>> {
        self.dev.nic.ep_notify_disconnect(self.id)
    }

    /// Completes every pending request of the endpoint with
    /// [`ErrorKind::Canceled`].
    pub fn cancel(&self) -> Result<()> {
        self.dev.nic.ep_cancel(self.id)
    }

    /// State, peer, private data, read limits.
    pub fn info(&self) -> Result<EpInfo> {
        self.dev.nic.ep_info(self.id)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.dev.nic.destroy_ep(self.id);
    }
}
