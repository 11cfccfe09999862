//! Queue pairs and shared receive queues.

use crate::device::{Cq, CqInner, Pd, PdInner};
use crate::engine::{QpRef, SrqRef};
use crate::error::{Error, ErrorKind, Result};
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::{
    AttrMask, Counters, QpAttr, QpCaps, QpState, RcConnection, RecvWr, SendWr,
};
use ndverbs_proto::ud::UdSendWr;
use std::sync::Arc;

/// A queue pair's identity: what connection endpoints are given instead of
/// a reference to the QP. It is the QP number *and* which QP had it: QP
/// numbers are reused once released, and an identity names only the QP it
/// was taken from — a request whose QP was released acts on no QP (it ends
/// [`ErrorKind::NotFound`]), never on a newer QP with the same number.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.8.1".parse().unwrap())?;
/// let (pd, cq) = (dev.alloc_pd()?, dev.create_cq(4)?);
/// let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq))?;
/// // Endpoints take a QP by identity (`&qp` converts), never hold it.
/// let id = QpId::from(&qp);
/// assert_eq!(id.qpn(), qp.qpn());
/// let ep = Endpoint::new(&dev)?;
/// // Not connected: the endpoint refuses at once, and the QP is untouched.
/// assert!(ep.disconnect(id).is_err());
/// assert_eq!(qp.state(), QpState::Reset);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpId {
    pub(crate) qpn: u32,
    pub(crate) generation: u64,
}

impl QpId {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
}

impl From<&Qp> for QpId {
    fn from(qp: &Qp) -> QpId {
        let (qpn, generation) = qp.shared.ident();
        QpId { qpn, generation }
    }
}

/// Creation parameters of a queue pair.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.9.1".parse().unwrap())?;
/// let pd = dev.alloc_pd()?;
/// let (send_cq, recv_cq) = (dev.create_cq(64)?, dev.create_cq(1024)?);
/// // Defaults (128 WRs, 4 SGEs, 256 inline bytes), then what this QP needs.
/// let mut init = QpInitAttr::new(&send_cq, &recv_cq);
/// init.caps = QpCaps { max_send_wr: 32, max_send_sge: 1, max_inline_data: 64, sq_sig_all: false };
/// init.max_recv_wr = 512;
/// let qp = pd.create_qp(&init)?;
/// // Receives through a shared queue instead: then the QP has none of its own.
/// let srq = pd.create_srq(256, 1)?;
/// let shared = pd.create_qp(&QpInitAttr { srq: Some(&srq), ..QpInitAttr::new(&send_cq, &recv_cq) })?;
/// assert_ne!(qp.qpn(), shared.qpn());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct QpInitAttr<'a> {
    /// Reliable connected (the default) or unreliable datagram.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: &'a Cq,
    /// CQ for receive completions.
    pub recv_cq: &'a Cq,
    /// Shared receive queue instead of the QP's own.
    pub srq: Option<&'a Srq>,
    /// Send queue limits.
    pub caps: QpCaps,
    /// Receive queue depth (own receive queue only).
    pub max_recv_wr: u32,
    /// SGEs per receive.
    pub max_recv_sge: u32,
}

impl<'a> QpInitAttr<'a> {
    /// Defaults: 128 sends and receives, 4 SGEs each, 256 inline bytes.
    pub fn new(send_cq: &'a Cq, recv_cq: &'a Cq) -> Self {
        QpInitAttr {
            qp_type: QpType::Rc,
            send_cq,
            recv_cq,
            srq: None,
            caps: QpCaps {
                max_send_wr: 128,
                max_send_sge: 4,
                max_inline_data: 256,
                sq_sig_all: false,
            },
            max_recv_wr: 128,
            max_recv_sge: 4,
        }
    }
}

/// The transport of a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum QpType {
    /// Reliable connected: one peer, every message acknowledged, any size,
    /// RDMA READ/WRITE and atomics.
    #[default]
    Rc,
    /// Unreliable datagram: each send is one packet (at most the path MTU)
    /// to any address and QP ([`Qp::post_send_ud`]); nothing is
    /// acknowledged; each receive buffer starts with the 40-byte GRH area
    /// ([`GRH_LEN`](crate::GRH_LEN)) that says where the datagram came from.
    ///
    /// ```
    /// use ndverbs_verbs::*;
    /// let dev = Device::open("127.92.40.1".parse().unwrap())?;
    /// let (pd, cq) = (dev.alloc_pd()?, dev.create_cq(16)?);
    /// let qp = pd.create_qp(&QpInitAttr { qp_type: QpType::Ud, ..QpInitAttr::new(&cq, &cq) })?;
    /// qp.ud_ready(0x1111_1111, 0)?; // RESET -> INIT (the Q_Key) -> RTR -> RTS
    /// let mr = pd.reg_mr(4096, Access::LOCAL_WRITE)?;
    /// qp.post_recv(RecvWr::new(1, vec![mr.sge(0, 4096)]))?;
    /// // To itself: its own address and QPN; Q_Key 0x8000_0000 means "my own".
    /// let to_me = UdDest::new(dev.query().addr, qp.qpn(), 0x8000_0000);
    /// mr.write(1024, b"hello")?;
    /// qp.post_send_ud(UdSendWr::new(2, to_me, vec![mr.sge(1024, 5)]))?;
    /// let t = std::time::Duration::from_secs(10);
    /// let (a, b) = (cq.wait_one(t)?.expect("one"), cq.wait_one(t)?.expect("two"));
    /// let recv = if a.queue == WcQueue::Recv { a } else { b };
    /// assert_eq!((recv.src_qp, recv.byte_len, recv.grh), (qp.qpn(), GRH_LEN as u32 + 5, true));
    /// assert_eq!(mr.to_vec(GRH_LEN, 5)?, b"hello");
    /// # Ok::<(), Error>(())
    /// ```
    Ud,
}

/// A queue pair: reliable connected, or unreliable datagram
/// ([`QpType::Ud`]). Dropping it destroys it: as with Linux rxe, its
/// outstanding requests end without completions (the completions already
/// in its CQs stay); [`Qp::to_error`] first flushes them.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// use std::time::Duration;
///
/// let da = Device::open("127.92.7.1".parse().unwrap())?;
/// let db = Device::open("127.92.7.2".parse().unwrap())?;
/// let (pa, pb) = (da.alloc_pd()?, db.alloc_pd()?);
/// let (ca, cb) = (da.create_cq(16)?, db.create_cq(16)?);
/// let qa = pa.create_qp(&QpInitAttr::new(&ca, &ca))?;
/// let qb = pb.create_qp(&QpInitAttr::new(&cb, &cb))?;
/// // RESET → INIT → RTR → RTS towards each other, with what perftest's TCP
/// // exchange (or a connection manager) learns: the peer's QPN, PSN and GID.
/// qa.connect(&RcConnection::new(qb.qpn()).to_peer(db.query().addr))?;
/// qb.connect(&RcConnection::new(qa.qpn()).to_peer(da.query().addr))?;
/// assert_eq!(qa.query()?.qp_state, QpState::Rts);
/// // SEND into a posted receive, and an RDMA WRITE straight into B's memory.
/// let (ma, mb) = (pa.reg_mr(4096, Access::LOCAL_WRITE)?, pb.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?);
/// ma.write(0, b"hello, B")?;
/// qb.post_recv(RecvWr::new(1, vec![mb.sge(0, 64)]))?;
/// qa.post_send(SendWr::new(2, SendOp::Send, vec![ma.sge(0, 8)]))?;
/// let to_b = RemoteAddr { va: mb.addr() + 1024, rkey: mb.rkey() };
/// qa.post_send(SendWr::new(3, SendOp::Write(to_b), vec![ma.sge(0, 8)]))?;
/// let t = Duration::from_secs(10);
/// let recv = cb.wait_one(t)?.expect("receive");
/// assert_eq!((recv.opcode, recv.byte_len), (WcOpcode::Recv, 8));
/// for id in [2, 3] {
///     let wc = ca.wait_one(t)?.expect("send completion");
///     assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
/// }
/// assert_eq!(mb.to_vec(0, 8)?, b"hello, B");
/// assert_eq!(mb.to_vec(1024, 8)?, b"hello, B");
/// // ERR flushes what is still posted.
/// qb.post_recv(RecvWr::new(4, vec![mb.sge(0, 64)]))?;
/// qb.to_error()?;
/// assert_eq!(cb.wait_one(t)?.expect("flush").status, WcStatus::WrFlushErr);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Qp {
    shared: QpRef,
    pd: Arc<PdInner>,
    _cqs: (Arc<CqInner>, Arc<CqInner>),
    _srq: Option<Arc<SrqInner>>,
}

impl Qp {
    pub(crate) fn create(pd: &Pd, init: &QpInitAttr<'_>) -> Result<Qp> {
        // Ids are per device: another device's CQ or SRQ would name some
        // object of this one (ibv_create_qp fails with EINVAL).
        let dev = &pd.inner.dev.nic;
        let foreign = !dev.same_as(&init.send_cq.inner.dev.nic)
            || !dev.same_as(&init.recv_cq.inner.dev.nic)
            || init.srq.is_some_and(|s| !dev.same_as(&s.inner.pd.dev.nic));
        if foreign && !dev.is_removed() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "Pd::create_qp",
                "the CQs and SRQ must belong to the QP's device",
            ));
        }
        let shared = dev.create_qp(
            init.qp_type,
            pd.inner.id,
            init.send_cq.inner.id,
            init.recv_cq.inner.id,
            init.srq.map(|s| &s.inner.shared),
            init.caps,
            init.max_recv_wr,
            init.max_recv_sge,
        )?;
        Ok(Qp {
            shared,
            pd: pd.inner.clone(),
            _cqs: (init.send_cq.inner.clone(), init.recv_cq.inner.clone()),
            _srq: init.srq.map(|s| s.inner.clone()),
        })
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.shared.qpn()
    }

    /// The state as of the engine's last step.
    pub fn state(&self) -> QpState {
        self.shared.state()
    }

    /// Modifies attributes/state (runs on the engine; typed errors name the
    /// bad attribute). The peer's address comes from `attr.av.dgid`.
    pub fn modify(&self, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        self.pd.dev.nic.modify_qp(self.qpn(), attr, mask)
    }

    /// Current attributes.
    pub fn query(&self) -> Result<QpAttr> {
        self.pd.dev.nic.query_qp(self.qpn())
    }

    /// Posts a send request.
    pub fn post_send(&self, wr: SendWr) -> Result<()> {
        self.pd.dev.nic.post_send(&self.shared, wr)
    }

    /// Posts a receive (QPs without an SRQ). On a UD QP the first
    /// [`GRH_LEN`](crate::GRH_LEN) bytes of the buffer take the GRH area, the
    /// datagram follows.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.pd.dev.nic.post_recv(&self.shared, wr)
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        if self.shared.is_ud() {
            QpType::Ud
        } else {
            QpType::Rc
        }
    }

    /// Sends a datagram on a UD QP (RTS): one packet to `wr.dest`, at most
    /// the path MTU long (else [`PostError::DatagramTooLong`](crate::PostError::DatagramTooLong),
    /// at once); it completes when handed to the network.
    pub fn post_send_ud(&self, wr: UdSendWr) -> Result<()> {
        self.pd.dev.nic.post_send_ud(&self.shared, wr)
    }

    /// Takes a UD QP from RESET to RTS: INIT with Q_Key `qkey` (port 1,
    /// P_Key index 0), RTR, RTS with first PSN `sq_psn`.
    pub fn ud_ready(&self, qkey: u32, sq_psn: u32) -> Result<()> {
        let mut a = QpAttr {
            qp_state: QpState::Init,
            qkey,
            sq_psn,
            ..QpAttr::default()
        };
        self.modify(
            &a,
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY,
        )?;
        a.qp_state = QpState::Rtr;
        self.modify(&a, AttrMask::STATE)?;
        a.qp_state = QpState::Rts;
        self.modify(&a, AttrMask::STATE | AttrMask::SQ_PSN)
    }

    /// Per-QP counters (rxe names).
    pub fn counters(&self) -> Result<Counters> {
        self.pd.dev.nic.qp_counters(self.qpn())
    }

    /// Connects the QP to its peer in one call: the RESET → INIT → RTR → RTS
    /// ladder with `conn`'s values (the peer's QP number, GID and first PSN,
    /// ours, the path MTU, READ/atomic limits and retry rules). A QP already
    /// in INIT (receives may be posted there while the peer's values are
    /// exchanged) goes on from INIT; in INIT its access rights stay as set.
    ///
    /// ```
    /// use ndverbs_verbs::*;
    /// let dev = Device::open("127.92.30.1".parse().unwrap())?;
    /// let (pd, cq) = (dev.alloc_pd()?, dev.create_cq(4)?);
    /// let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq))?;
    /// // The peer (here: a QP number and an address, as exchanged out of band).
    /// let conn = RcConnection { sq_psn: 100, rq_psn: 200, ..RcConnection::new(0x22) }
    ///     .to_peer("127.92.30.2".parse().unwrap());
    /// qp.connect(&conn)?;
    /// let attr = qp.query()?;
    /// assert_eq!((attr.qp_state, attr.dest_qp_num, attr.sq_psn), (QpState::Rts, 0x22, 100));
    /// // Only a fresh QP (RESET or INIT) connects.
    /// assert_eq!(qp.connect(&conn).unwrap_err().kind(), ErrorKind::InvalidState);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn connect(&self, conn: &RcConnection) -> Result<()> {
        let [init, rtr, rts] = conn.steps();
        match self.state() {
            QpState::Reset => self.modify(&init.0, init.1)?,
            QpState::Init => {}
            s => {
                return Err(Error::new(
                    ErrorKind::InvalidState,
                    "Qp::connect",
                    format!("the QP is in {s:?}, not RESET or INIT"),
                ))
            }
        }
        self.modify(&rtr.0, rtr.1)?;
        self.modify(&rts.0, rts.1)
    }

    /// RESET → INIT, granting peers `access` (remote WRITE, READ, atomics; the
    /// memory regions still decide what they reach): where a QP waits for a
    /// connection manager ([`Endpoint`](crate::Endpoint)) to take it on to RTR
    /// and RTS, and where receives may be posted before a connection.
    ///
    /// ```
    /// use ndverbs_verbs::*;
    /// let dev = Device::open("127.92.31.1".parse().unwrap())?;
    /// let (pd, cq) = (dev.alloc_pd()?, dev.create_cq(4)?);
    /// let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq))?;
    /// qp.to_init(Access::REMOTE_WRITE)?;
    /// assert_eq!(qp.query()?.qp_access_flags, Access::REMOTE_WRITE);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn to_init(&self, access: Access) -> Result<()> {
        let (init, mask) = RcConnection {
            access,
            ..RcConnection::new(0)
        }
        .init();
        self.modify(&init, mask)
    }

    /// Moves the QP to ERR: every outstanding request completes with a flush status.
    pub fn to_error(&self) -> Result<()> {
        self.modify(
            &QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            },
            AttrMask::STATE,
        )
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let _ = self.pd.dev.nic.destroy_qp(self.qpn());
    }
}

#[derive(Debug)]
pub(crate) struct SrqInner {
    shared: SrqRef,
    pd: Arc<PdInner>,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let _ = self.pd.dev.nic.destroy_srq(&self.shared);
    }
}

/// A shared receive queue.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// use std::time::Duration;
/// # fn connect(
/// #     (da, qa): (&Device, &Qp),
/// #     (db, qb): (&Device, &Qp),
/// # ) -> std::result::Result<(Endpoint, Endpoint), Box<dyn std::error::Error>> {
/// #     for qp in [qa, qb] {
/// #         qp.to_init(Access::ALL)?;
/// #     }
/// #     let listener = Endpoint::new(db)?;
/// #     listener.listen(7000, 1)?;
/// #     let (ea, eb) = (Endpoint::new(da)?, Endpoint::new(db)?);
/// #     let request = listener.get_request(&eb)?;
/// #     let rep = ea.connect(qa, ConnectArgs {
/// #         remote: db.query().addr,
/// #         remote_port: 7000,
/// #         local_port: 40000,
/// #         responder_resources: 1,
/// #         initiator_depth: 1,
/// #         retry_count: 7,
/// #         rnr_retry_count: 7,
/// #         path_mtu: PathMtu::Mtu1024,
/// #         private_data: vec![],
/// #     })?;
/// #     request.wait()?;
/// #     let rtu = eb.accept(qb, AcceptArgs {
/// #         responder_resources: 1,
/// #         initiator_depth: 1,
/// #         rnr_retry_count: 7,
/// #         private_data: vec![],
/// #     })?;
/// #     rep.wait()?;
/// #     ea.complete_connect(qa)?.wait()?;
/// #     rtu.wait()?;
/// #     Ok((ea, eb))
/// # }
/// let da = Device::open("127.92.10.1".parse().unwrap())?;
/// let db = Device::open("127.92.10.2".parse().unwrap())?;
/// let (pa, pb) = (da.alloc_pd()?, db.alloc_pd()?);
/// let (ca, cb) = (da.create_cq(16)?, db.create_cq(16)?);
/// // One pool of receives for any number of QPs of the PD.
/// let srq = pb.create_srq(64, 1)?;
/// let mb = pb.reg_mr(4096, Access::LOCAL_WRITE)?;
/// for i in 0..4 {
///     srq.post_recv(RecvWr::new(i, vec![mb.sge(i as usize * 1024, 1024)]))?;
/// }
/// let qa = pa.create_qp(&QpInitAttr::new(&ca, &ca))?;
/// let qb = pb.create_qp(&QpInitAttr { srq: Some(&srq), ..QpInitAttr::new(&cb, &cb) })?;
/// # let _eps = connect((&da, &qa), (&db, &qb))?;
/// let mut wr = SendWr::new(1, SendOp::Send, vec![]);
/// wr.inline = Some(b"to the pool".to_vec());
/// qa.post_send(wr)?;
/// let wc = cb.wait_one(Duration::from_secs(10))?.expect("receive");
/// assert_eq!((wc.qpn, wc.byte_len), (qb.qpn(), 11));
/// assert_eq!(mb.to_vec(wc.wr_id as usize * 1024, 11)?, b"to the pool");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Srq {
    inner: Arc<SrqInner>,
}

impl Srq {
    pub(crate) fn create(pd: &Pd, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let shared = pd.inner.dev.nic.create_srq(pd.inner.id, max_wr, max_sge)?;
        Ok(Srq {
            inner: Arc::new(SrqInner {
                shared,
                pd: pd.inner.clone(),
            }),
        })
    }

    /// Posts a receive.
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.inner.pd.dev.nic.post_srq_recv(&self.inner.shared, wr)
    }

    /// Receives posted and not yet taken by an incoming SEND.
    pub fn outstanding(&self) -> u32 {
        self.inner.shared.outstanding()
    }

    /// The most receives it holds.
    pub fn depth(&self) -> u32 {
        self.inner.shared.capacity()
    }

    /// Changes the most receives it holds (`ibv_modify_srq` with
    /// `IBV_SRQ_MAX_WR`): 1 to [`DeviceLimits::max_qp_wr`](crate::DeviceLimits)
    /// ([`ErrorKind::InvalidArgument`]), and no fewer than are outstanding
    /// ([`ErrorKind::Overflow`], nothing changes).
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_verbs::*;
    /// let dev = Device::open("127.92.10.3".parse().unwrap())?;
    /// let srq = dev.alloc_pd()?.create_srq(1, 1)?;
    /// srq.post_recv(RecvWr::new(1, vec![]))?;
    /// assert_eq!(srq.post_recv(RecvWr::new(2, vec![])).unwrap_err().kind(), ErrorKind::QueueFull);
    /// srq.resize(2)?;
    /// srq.post_recv(RecvWr::new(2, vec![]))?;
    /// assert_eq!((srq.outstanding(), srq.depth()), (2, 2));
    /// assert_eq!(srq.resize(1).unwrap_err().kind(), ErrorKind::Overflow);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn resize(&self, max_wr: u32) -> Result<()> {
        self.inner.pd.dev.nic.resize_srq(&self.inner.shared, max_wr)
    }

    /// The limit of [`Srq::notify_limit`] (0: none).
    pub fn limit(&self) -> u32 {
        self.inner.shared.limit()
    }

    /// Sets the limit below which the outstanding receives complete
    /// [`Srq::notify_limit`] requests (`srq_limit`; 0: never).
    pub fn set_limit(&self, limit: u32) {
        self.inner.shared.set_limit(limit);
    }

    /// A request that completes when fewer receives than [`Srq::limit`] are
    /// outstanding (at once if that is already so): time to post more. All
    /// requests pending then complete together. It ends with
    /// [`ErrorKind::Canceled`] ([`Srq::cancel_limit_notifies`], or the SRQ
    /// is dropped) or [`ErrorKind::DeviceRemoved`].
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_verbs::*;
    /// let dev = Device::open("127.92.10.4".parse().unwrap())?;
    /// let srq = dev.alloc_pd()?.create_srq(16, 1)?;
    /// for i in 0..4 {
    ///     srq.post_recv(RecvWr::new(i, vec![]))?;
    /// }
    /// srq.set_limit(2);
    /// let low = srq.notify_limit();
    /// assert!(!low.is_ready()); // 4 outstanding; incoming SENDs take them
    /// srq.cancel_limit_notifies();
    /// assert_eq!(low.wait().unwrap_err().kind(), ErrorKind::Canceled);
    /// srq.set_limit(5);
    /// srq.notify_limit().wait()?; // 4 < 5 already
    /// assert_eq!(srq.limit(), 5);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn notify_limit(&self) -> crate::Pending<()> {
        let dev = &self.inner.pd.dev;
        let p = self.inner.shared.notify_limit().driven_by(&dev.nic);
        // Removal ends the requests it finds; one made after it would wait
        // forever.
        if dev.is_removed() {
            self.inner
                .shared
                .end_limit_waiters(ErrorKind::DeviceRemoved);
        }
        p
    }

    /// Completes every pending [`Srq::notify_limit`] request with
    /// [`ErrorKind::Canceled`], in order.
    pub fn cancel_limit_notifies(&self) {
        self.inner.shared.end_limit_waiters(ErrorKind::Canceled);
    }
}
