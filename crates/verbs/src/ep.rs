//! Connection endpoints (the connection manager side of a connection).
//!
//! An [`Endpoint`] speaks the IB CM (rdma_cm compatible) for one connection or
//! listens for many. Its long-running calls return an [`EpPending`], which is
//! both a future (any runtime) and a blocking wait. The endpoint and the QP
//! are tied together only per call: Connect, CompleteConnect, Accept and
//! Disconnect take the QP, and run on the engine in phases (see the engine's
//! `ep` module for the phase table and the disconnect rules). They take the QP
//! as a [`QpId`] — a number, not a reference: the endpoint never holds the QP.

use crate::device::Device;
use crate::qp::QpId;
use crate::{Result, VerbsError};
pub use ndverbs_engine::ep::{
    AcceptArgs, ConnectArgs, ConnectInfo, EpError, EpInfo, EpPending, RequestInfo,
};
use ndverbs_engine::error::EngineError;

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
///     let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
///     qp.modify(&init, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS)?;
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
/// # let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
/// # qc.modify(&init, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS)?;
/// let request = listener.get_request(&ed)?;
/// let rep = ec.connect(&qc, ConnectArgs { local_port: 40001, ..args })?;
/// request.wait()?;
/// ed.reject(b"busy")?;
/// match rep.wait() {
///     Err(EpError::Rejected { private_data, .. }) => assert!(private_data.starts_with(b"busy")),
///     other => panic!("{other:?}"),
/// }
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
            id: dev.adapter.create_ep()?,
        })
    }

    /// The engine id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Listens on rdma_cm port `port` with room for `backlog` unanswered requests.
    pub fn listen(&self, port: u16, backlog: usize) -> Result<()> {
        Ok(self.dev.adapter.ep_listen(self.id, port, backlog)?)
    }

    /// Waits for a connection request and binds it to `into`.
    pub fn get_request(&self, into: &Endpoint) -> Result<EpPending<RequestInfo>> {
        // Endpoint ids are per device: another device's would name one of ours.
        if !self.dev.adapter.same_as(&into.dev.adapter) && !self.dev.is_removed() {
            return Err(VerbsError::Engine(EngineError::InvalidArgument(
                "the endpoint belongs to another device",
            )));
        }
        Ok(self.dev.adapter.ep_get_request(self.id, into.id)?)
    }

    /// Connects `qp` (in INIT). Completes when the peer's REP arrives.
    pub fn connect(
        &self,
        qp: impl Into<QpId>,
        args: ConnectArgs,
    ) -> Result<EpPending<ConnectInfo>> {
        Ok(self.dev.adapter.ep_connect(self.id, qp.into().0, args)?)
    }

    /// After `connect` completed: QP to RTS, then RTU.
    pub fn complete_connect(&self, qp: impl Into<QpId>) -> Result<EpPending<()>> {
        Ok(self.dev.adapter.ep_complete_connect(self.id, qp.into().0)?)
    }

    /// Accepts the request bound to this endpoint with `qp`; completes on RTU.
    pub fn accept(&self, qp: impl Into<QpId>, args: AcceptArgs) -> Result<EpPending<()>> {
        Ok(self.dev.adapter.ep_accept(self.id, qp.into().0, args)?)
    }

    /// Rejects the request (or the REP) bound to this endpoint.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        Ok(self.dev.adapter.ep_reject(self.id, private_data)?)
    }

    /// DREQ (or DREP if the peer's DREQ arrived), then `qp` to ERR.
    pub fn disconnect(&self, qp: impl Into<QpId>) -> Result<EpPending<()>> {
        Ok(self.dev.adapter.ep_disconnect(self.id, qp.into().0)?)
    }

    /// Completes when the peer's DREQ arrives.
    pub fn notify_disconnect(&self) -> Result<EpPending<()>> {
        Ok(self.dev.adapter.ep_notify_disconnect(self.id)?)
    }

    /// Completes every pending request of the endpoint with [`EpError::Canceled`].
    pub fn cancel(&self) -> Result<()> {
        Ok(self.dev.adapter.ep_cancel(self.id)?)
    }

    /// State, peer, private data, read limits.
    pub fn info(&self) -> Result<EpInfo> {
        Ok(self.dev.adapter.ep_info(self.id)?)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.dev.adapter.destroy_ep(self.id);
    }
}
