//! Connection endpoints (the connection manager side of a connection).
//!
//! An [`Endpoint`] speaks the IB CM (rdma_cm compatible) for one connection or
//! listens for many. Its long-running calls return a [`Pending`], which is
//! both a future (any runtime) and a blocking wait, and ends with an
//! [`Error`] of kind [`ErrorKind::Rejected`] (with the peer's
//! [`Rejection`](crate::Rejection)), [`ErrorKind::PortUnreachable`] (a
//! connect whose peer's host has no RoCE endpoint: it answered ICMP port
//! unreachable), [`ErrorKind::TimedOut`],
//! [`ErrorKind::Canceled`], [`ErrorKind::ConnectionAborted`],
//! [`ErrorKind::InvalidState`], [`ErrorKind::NotFound`] (its QP was
//! released) or [`ErrorKind::DeviceRemoved`] when it ends badly
//! ([`ErrorKind::Internal`] if the engine lost it). The endpoint and the QP
//! are tied together only per call: Connect, CompleteConnect, Accept and
//! Disconnect take the QP, and run on the engine in phases (CM, then QP, or
//! the other way round). They take the QP as a [`QpId`] — an identity, not
//! a reference: the endpoint never holds the QP, and a phase never acts on
//! a newer QP that took a released one's number.
//!
//! The argument and result types ([`ConnectArgs`], [`AcceptArgs`],
//! [`RequestInfo`], [`ConnectInfo`], [`EpInfo`], and the [`QpSetup`] a
//! request or a REP implies) are the connection manager's
//! (`ndverbs_proto::cm`), one level above its message parameters.
//!
//! Accept and CompleteConnect move the QP from INIT to RTR and RTS
//! themselves. A QP the application already moved to RTR or RTS with the
//! attributes [`RequestInfo::qp`] or [`ConnectInfo::qp`] report (what
//! rdma_cm's `rdma_init_qp_attr` hands out when the application brings its
//! own QP) is left where it is, and the REP or the RTU still goes out; one
//! moved for another connection (peer QPN or PSNs not the negotiated ones)
//! fails the request with [`ErrorKind::InvalidState`] before anything is
//! sent.

use crate::device::Device;
use crate::error::{Error, ErrorKind, Result};
use crate::pending::Pending;
use crate::qp::QpId;
pub use ndverbs_proto::cm::{
    AcceptArgs, ConnectArgs, ConnectInfo, EpInfo, QpSetup, RequestInfo, SidrArgs, SidrInfo,
};

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

    /// Listens on rdma_cm UDP port `port` (`RDMA_PS_UDP`): each SIDR_REQ
    /// becomes a request for [`get_request`](Self::get_request), answered
    /// with [`accept_ud`](Self::accept_ud) or [`reject`](Self::reject).
    pub fn listen_ud(&self, port: u16, backlog: usize) -> Result<()> {
        self.dev.nic.ep_listen_ud(self.id, port, backlog)
    }

    /// UD: asks the rdma_cm UDP service `args` names for its QP (SIDR).
    /// Completes with the SIDR_REP (a status other than 0 is the peer's
    /// refusal), [`ErrorKind::TimedOut`] after the last retransmission or
    /// [`ErrorKind::PortUnreachable`]. Local port 0 takes an ephemeral one.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_verbs::*;
    /// let da = Device::open("127.92.12.1".parse().unwrap())?;
    /// let db = Device::open("127.92.12.2".parse().unwrap())?;
    /// let listener = Endpoint::new(&db)?;
    /// listener.listen_ud(7001, 4)?;
    /// let eb = Endpoint::new(&db)?;
    /// let request = listener.get_request(&eb)?;
    /// let ea = Endpoint::new(&da)?;
    /// let rep = ea.resolve(SidrArgs { remote: db.query().addr, remote_port: 7001,
    ///     local_port: 0, private_data: vec![] })?;
    /// assert_eq!(request.wait()?.peer, da.query().addr);
    /// eb.accept_ud(0x42, 0x0123_4567, b"ok")?;
    /// let info: SidrInfo = rep.wait()?;
    /// assert_eq!((info.status, info.qpn, info.qkey), (0, 0x42, 0x0123_4567));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolve(&self, mut args: SidrArgs) -> Result<Pending<SidrInfo>> {
        if args.remote.is_unspecified() || args.remote_port == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "Endpoint::resolve",
                "no destination: give SidrArgs a remote address and port",
            ));
        }
        if args.local_port == 0 {
            args.local_port = ephemeral_port();
        }
        self.dev.nic.ep_resolve(self.id, args)
    }

    /// Accepts the SIDR request bound to this endpoint: our UD QP is `qpn`
    /// with Q_Key `qkey`. Done when it returns.
    pub fn accept_ud(&self, qpn: u32, qkey: u32, private_data: &[u8]) -> Result<()> {
        self.dev.nic.ep_accept_ud(self.id, qpn, qkey, private_data)
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
    /// An unspecified remote address ([`ConnectArgs::default`]'s) is
    /// [`ErrorKind::InvalidArgument`]; local port 0 takes an ephemeral one,
    /// as rdma_cm binds an unbound id before it connects.
    pub fn connect(
        &self,
        qp: impl Into<QpId>,
        mut args: ConnectArgs,
    ) -> Result<Pending<ConnectInfo>> {
        if args.remote.is_unspecified() || args.remote_port == 0 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "Endpoint::connect",
                "no destination: give ConnectArgs a remote address and port",
            ));
        }
        if args.local_port == 0 {
            args.local_port = ephemeral_port();
        }
        self.dev.nic.ep_connect(self.id, qp.into(), args)
    }

    /// After `connect` completed: QP to RTS, then RTU.
    pub fn complete_connect(&self, qp: impl Into<QpId>) -> Result<Pending<()>> {
        self.dev.nic.ep_complete_connect(self.id, qp.into())
    }

    /// Accepts the request bound to this endpoint with `qp`; completes on RTU.
    pub fn accept(&self, qp: impl Into<QpId>, args: AcceptArgs) -> Result<Pending<()>> {
        self.dev.nic.ep_accept(self.id, qp.into(), args)
    }

    /// Rejects the request (or the REP) bound to this endpoint.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        self.dev.nic.ep_reject(self.id, private_data)
    }

    /// DREQ (or DREP if the peer's DREQ arrived), then `qp` to ERR, which
    /// flushes its outstanding work requests; completes once those flushes
    /// are on the CQ (on the DREP, the DREQ's timeout —
    /// [`ErrorKind::TimedOut`] — or the DREP sent). After the peer ended the
    /// connection with a REJ it only flushes. A `qp` released meanwhile:
    /// [`ErrorKind::NotFound`] after the DREQ/DREP. An endpoint that never
    /// connected, is still setting up its connection (nothing is sent, the
    /// QP is untouched) or is already disconnected is
    /// [`ErrorKind::NotConnected`].
    pub fn disconnect(&self, qp: impl Into<QpId>) -> Result<Pending<()>> {
        self.dev.nic.ep_disconnect(self.id, qp.into())
    }

    /// Completes when the peer's DREQ arrives — at once if it already did on
    /// this connection. Our own disconnect does not end it (cancel does);
    /// a connection that fails without a DREQ ends it
    /// [`ErrorKind::ConnectionAborted`]. [`ErrorKind::NotConnected`] at once
    /// where there is no connection or it ended without a DREQ.
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

/// A port of Linux's ephemeral range (32768–60999), a different one each
/// call, starting at a point of the range that depends on the process.
fn ephemeral_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 32768;
    const COUNT: u32 = 61000 - FIRST;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let start = std::process::id().wrapping_mul(2_654_435_761) % COUNT;
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    (FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % COUNT) as u16
}
