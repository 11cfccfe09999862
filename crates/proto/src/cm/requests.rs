//! What an rdma_cm-style endpoint request takes and tells: the arguments of
//! Connect and Accept, what a REP and a REQ said, and what an endpoint knows.
//!
//! These sit a level above the CM's own message parameters
//! ([`ConnectParams`](super::ConnectParams), [`AcceptParams`](super::AcceptParams)):
//! an rdma_cm port instead of a service ID, the QP left out (a request names
//! it separately, and the endpoint never holds it). The engine's endpoint
//! requests take them; the verbs and ND surfaces hand them to applications.

use super::{CmState, QpSetup};
use crate::rc::PathMtu;
use std::net::IpAddr;

/// Everything a Connect needs besides the QP.
///
/// # Example
///
/// ```
/// use ndverbs_proto::cm::ConnectArgs;
/// use ndverbs_proto::rc::PathMtu;
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

impl ConnectArgs {
    /// A connect to `remote:remote_port` with [`ConnectArgs::default`]'s
    /// settings; change the rest with struct update syntax.
    ///
    /// ```
    /// use ndverbs_proto::cm::ConnectArgs;
    /// let a = ConnectArgs::new("10.0.0.2".parse().unwrap(), 7471);
    /// assert_eq!((a.remote_port, a.local_port, a.retry_count), (7471, 0, 7));
    /// let b = ConnectArgs { private_data: b"hi".to_vec(), ..a };
    /// assert_eq!(b.private_data, b"hi");
    /// ```
    pub fn new(remote: IpAddr, remote_port: u16) -> ConnectArgs {
        ConnectArgs {
            remote,
            remote_port,
            ..ConnectArgs::default()
        }
    }
}

impl Default for ConnectArgs {
    /// No destination yet (the unspecified address, port 0: a connect
    /// refuses it), any local port, 4 READ/atomics each way, retries and
    /// RNR retries as rdma_cm's tools use them (7), path MTU 1024 (what an
    /// Ethernet link of 1500 bytes carries; the CM lowers a larger one to
    /// the port's), no private data.
    fn default() -> Self {
        ConnectArgs {
            remote: IpAddr::from([0u8; 4]),
            remote_port: 0,
            local_port: 0,
            responder_resources: 4,
            initiator_depth: 4,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: PathMtu::Mtu1024,
            private_data: Vec::new(),
        }
    }
}

/// Everything an Accept needs besides the QP.
///
/// # Example
///
/// ```
/// use ndverbs_proto::cm::AcceptArgs;
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

impl Default for AcceptArgs {
    /// 4 READ/atomics each way (clamped to what the peer asked for), RNR
    /// retries forever (7), no private data.
    fn default() -> Self {
        AcceptArgs {
            responder_resources: 4,
            initiator_depth: 4,
            rnr_retry_count: 7,
            private_data: Vec::new(),
        }
    }
}

/// What a Connect learned from the REP.
///
/// # Example
///
/// ```
/// use ndverbs_proto::cm::ConnectInfo;
/// fn reads_in_flight(info: &ConnectInfo) -> u8 {
///     // (inbound, outbound): what the peer may READ from us, and we from it.
///     info.read_limits.1
/// }
/// # fn setup() -> ndverbs_proto::cm::QpSetup {
/// #     ndverbs_proto::cm::QpSetup { remote_addr: "10.0.0.2".parse().unwrap(), dest_qpn: 0x22,
/// #         rq_psn: 1, sq_psn: 2, path_mtu: 3, max_rd_atomic: 2, max_dest_rd_atomic: 1,
/// #         retry_cnt: 7, rnr_retry: 7, min_rnr_timer: 0, timeout: 14, flow_label: 0,
/// #         hop_limit: 64, traffic_class: 0 }
/// # }
/// let info = ConnectInfo { private_data: b"token=42".to_vec(), read_limits: (1, 2), qp: setup() };
/// assert_eq!(reads_in_flight(&info), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectInfo {
    /// The peer's private data (zero-padded to the REP's 196 bytes).
    pub private_data: Vec<u8>,
    /// Negotiated READ/atomic limits: (inbound, outbound).
    pub read_limits: (u8, u8),
    /// The QP attributes the connection implies (what CompleteConnect moves
    /// the QP to RTR and RTS with; an application that moves the QP itself
    /// uses these, as rdma_cm's `rdma_init_qp_attr` hands them out).
    pub qp: QpSetup,
}

/// A connection request handed to the application.
///
/// # Example
///
/// ```
/// use ndverbs_proto::cm::RequestInfo;
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
///     qp: ndverbs_proto::cm::QpSetup { remote_addr: "10.0.0.1".parse().unwrap(), dest_qpn: 0x11,
///         rq_psn: 2, sq_psn: 1, path_mtu: 3, max_rd_atomic: 1, max_dest_rd_atomic: 1,
///         retry_cnt: 7, rnr_retry: 7, min_rnr_timer: 0, timeout: 14, flow_label: 0,
///         hop_limit: 64, traffic_class: 0 },
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
    /// The QP attributes the request implies before it is accepted: our
    /// starting PSN (chosen now; the Accept's REP carries it), the peer's
    /// QPN, PSN, path and retry counts, and the read limits the peer
    /// offered (an Accept may lower them). An application that moves its QP
    /// to RTS itself before accepting uses these (rdma_cm's
    /// `rdma_init_qp_attr` on a request).
    pub qp: QpSetup,
}

/// What an endpoint knows about itself.
///
/// # Example
///
/// ```
/// use ndverbs_proto::cm::{CmState, EpInfo};
/// /// Whether the peer has begun to disconnect an established connection.
/// fn closing(info: &EpInfo) -> bool {
///     info.cm_state == Some(CmState::Established) && info.dreq_received
/// }
/// let fresh = EpInfo::default(); // bound to nothing yet
/// assert!(fresh.cm_state.is_none() && !fresh.listening && !closing(&fresh));
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
