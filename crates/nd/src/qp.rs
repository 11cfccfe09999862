//! Queue pairs and shared receive queues: `Send`, `Receive`, `Read`, `Write`,
//! `Bind`, `Invalidate`, `Flush`.
//!
//! ND queue pairs are created straight into INIT, so receives can be posted
//! before the connection exists. Posting errors are synchronous (the request
//! was never queued): `ND_CONNECTION_INVALID` (not connected),
//! `ND_NO_MORE_ENTRIES` (queue full), `ND_DATA_OVERRUN` (too many SGEs),
//! `ND_BUFFER_OVERFLOW` (more inline data than the QP's inline size, or a
//! message beyond `MaxTransferLength`), `ND_INVALID_PARAMETER_4/6` (bad
//! flags), `ND_ACCESS_VIOLATION` (an inline SGE outside every registered
//! region). Everything else arrives as a completion on the CQ.
//!
//! **Inline data.** With `ND_OP_FLAG_INLINE` a Send or Write copies its
//! bytes when it is posted: the SGEs may be more than the QP's SGE limit
//! and their tokens need not be right, but their total must fit the QP's
//! inline size. In C an inline SGE may point anywhere in the process; safe
//! Rust reads only memory it can name, so here each inline SGE must lie in
//! a region registered on the adapter, and [`QueuePair::send_inline`] and
//! [`QueuePair::write_inline`] take bytes from anywhere as a slice.
//!
//! **Transport retries.** A queue pair retries an unacknowledged request
//! [`QueuePair::retry_count`] times ([`ND_RETRY_COUNT`] unless set) before
//! its requests complete `ND_IO_TIMEOUT`; the Connect carries the count, so
//! the active side's applies to both ends of the connection.
//!
//! Memory-window `Bind` and `Invalidate` take effect at once and complete in
//! order with the other requests through a zero-length RDMA WRITE, as
//! WinVerbs' ND provider did (a zero-length WRITE needs no remote key).

use crate::adapter::{nd_err, post_err, Adapter};
use crate::cq::{wr_id, CompletionQueue, RequestType};
use crate::mr::{gather, MemoryRegion, MemoryWindow};
use crate::pending::NdPending;
use crate::status::{NdError, NdResult, NdStatus};
use ndverbs_verbs::{
    Access, DeviceLimits, Qp, QpCaps, QpId, QpInitAttr, QpState, RecvWr, RemoteAddr, SendOp,
    SendWr, Sge, Srq,
};
use std::sync::atomic::{AtomicU8, Ordering};

/// The transport retry count of a new queue pair: how often an
/// unacknowledged request is sent again before it completes `ND_IO_TIMEOUT`.
/// Finite, so a peer that died is noticed; 7 would mean *infinite* (as in
/// Linux rxe), which [`QueuePair::set_retry_count`] still allows where a
/// peer's conventions need it.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// let adapter = Provider.open_adapter("127.91.10.3".parse().unwrap())?;
/// let cq = adapter.create_completion_queue(4)?;
/// let qp = adapter.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(1, 1))?;
/// assert_eq!(qp.retry_count(), ND_RETRY_COUNT);
/// assert!(ND_RETRY_COUNT < 7);
/// # Ok::<(), NdError>(())
/// ```
pub const ND_RETRY_COUNT: u8 = 6;

bitflags::bitflags! {
    /// `ND_OP_FLAG_*`, with ND's values: how a work request is posted.
    ///
    /// Each request takes only some of them (see each method); any other
    /// bit, known or not, fails the post with the status that names the
    /// flags parameter (`ND_INVALID_PARAMETER_4`, `_6`…).
    /// [`OpFlags::from_bits_retain`] passes raw values through unchanged.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct OpFlags: u32 {
        /// No completion on success.
        const SILENT_SUCCESS = 0x01;
        /// Wait for earlier READs.
        const READ_FENCE = 0x02;
        /// Set the solicited event bit.
        const SEND_AND_SOLICIT_EVENT = 0x04;
        /// Bind: allow remote reads.
        const ALLOW_READ = 0x08;
        /// Bind: allow remote writes.
        const ALLOW_WRITE = 0x10;
        /// Send and Write: the SGEs' bytes are copied at post time (see
        /// the module docs).
        const INLINE = 0x20;
    }
}

impl OpFlags {
    /// What every request takes: its completion and its ordering.
    const ANY_REQUEST: OpFlags = OpFlags::SILENT_SUCCESS.union(OpFlags::READ_FENCE);
    /// What a request carrying data to the peer takes (Send, Write).
    const TO_PEER: OpFlags = OpFlags::ANY_REQUEST
        .union(OpFlags::SEND_AND_SOLICIT_EVENT)
        .union(OpFlags::INLINE);

    /// `self` if every flag is one of `allowed`, else the ND status `bad`
    /// (which names the flags parameter's position in the caller).
    fn allowed(self, allowed: OpFlags, bad: NdStatus) -> NdResult<OpFlags> {
        if allowed.contains(self) {
            Ok(self)
        } else {
            Err(NdError::new(
                bad,
                format!("flags {:#x} not allowed here", self.bits()),
            ))
        }
    }
}

/// An `ND2_SGE`: `len` bytes at `address` of the region with local token `token`.
///
/// # Example
///
/// ```
/// use ndverbs_nd::NdSge;
/// // 64 bytes at 0x1000 of the region whose local token is 0x105.
/// let sge = NdSge::new(0x1000, 64, 0x105);
/// assert_eq!((sge.addr, sge.len, sge.lkey), (0x1000, 64, 0x105));
/// ```
pub type NdSge = Sge;

/// A queue pair.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// # fn connect(
/// #     (server, sqp): (&Adapter, &QueuePair),
/// #     (client, cqp): (&Adapter, &QueuePair),
/// # ) -> NdResult<(Connector, Connector)> {
/// #     let listener = server.create_listener()?;
/// #     listener.bind(std::net::SocketAddr::new(server.address(), 0))?;
/// #     listener.listen(1)?;
/// #     let (sc, cc) = (server.create_connector()?, client.create_connector()?);
/// #     let request = listener.get_connection_request(&sc)?;
/// #     let rep = cc.connect(cqp, listener.get_local_address()?, 1, 1, b"")?;
/// #     request.wait()?;
/// #     let rtu = sc.accept(sqp, 1, 1, b"")?;
/// #     rep.wait()?;
/// #     cc.complete_connect()?.wait()?;
/// #     rtu.wait()?;
/// #     Ok((sc, cc))
/// # }
/// let server = Provider.open_adapter("127.91.10.1".parse().unwrap())?;
/// let client = Provider.open_adapter("127.91.10.2".parse().unwrap())?;
/// let (scq, ccq) = (server.create_completion_queue(8)?, client.create_completion_queue(8)?);
/// // Receive CQ, initiator CQ, context, and the sizes of the queues.
/// let sqp = server.create_queue_pair(&scq, &scq, 0, QueuePairSizes::new(4, 1))?;
/// let cqp = client.create_queue_pair(&ccq, &ccq, 0, QueuePairSizes::new(4, 1).with_inline(64))?;
/// // A new QP can take receives, but not sends until it is connected.
/// let buf = server.create_memory_region()?;
/// buf.register(4096, MrFlags::ALLOW_LOCAL_WRITE).wait()?;
/// sqp.receive(1, &[NdSge::new(buf.address(), 4096, buf.local_token())])?;
/// sqp.receive(2, &[NdSge::new(buf.address() + 2048, 2048, buf.local_token())])?;
/// let err = cqp.send_inline(1, b"too early", OpFlags::empty()).unwrap_err();
/// assert_eq!(err.status, NdStatus::CONNECTION_INVALID);
/// # let _connectors = connect((&server, &sqp), (&client, &cqp))?;
/// // Sends consume receives in order. A SILENT_SUCCESS send completes only on error.
/// cqp.send_inline(1, b"first", OpFlags::SILENT_SUCCESS)?;
/// cqp.send_inline(2, b"second", OpFlags::empty())?;
/// assert_eq!(ccq.wait_result()?.request_context, 2);
/// let (a, b) = (scq.wait_result()?, scq.wait_result()?);
/// assert_eq!((a.request_context, a.bytes_transferred), (1, 5));
/// assert_eq!((b.request_context, b.bytes_transferred), (2, 6));
/// let mut text = [0u8; 6];
/// buf.read(2048, &mut text)?;
/// assert_eq!(&text, b"second");
/// # Ok::<(), NdError>(())
/// ```
pub struct QueuePair {
    /// Taken only by `Drop`, which destroys it before the CQs are told.
    qp: Option<Qp>,
    adapter: Adapter,
    context: u64,
    inline_size: u32,
    retry_count: AtomicU8,
    cqs: (CompletionQueue, CompletionQueue),
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qpn", &self.qpn())
            .finish()
    }
}

/// The sizes ND's `CreateQueuePair` takes: how many requests each queue
/// holds, how many SGEs one request may have, and how many bytes a send may
/// carry inline. Each must be within the adapter's limits
/// ([`AdapterInfo`](crate::AdapterInfo)), or the QP is not created
/// (`ND_INVALID_PARAMETER`); a depth or SGE count of 0 means 1.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// let adapter = Provider.open_adapter("127.91.13.9".parse().unwrap())?;
/// let cq = adapter.create_completion_queue(16)?;
/// // Four requests of one SGE each way, and sends of up to 64 bytes inline.
/// let sizes = QueuePairSizes::new(4, 1).with_inline(64);
/// assert_eq!((sizes.receive_queue_depth, sizes.max_initiator_sge), (4, 1));
/// let qp = adapter.create_queue_pair(&cq, &cq, 0, sizes)?;
/// // A receive queue deeper than the adapter allows.
/// let info = adapter.query(ND_VERSION_2)?;
/// let deep = QueuePairSizes { receive_queue_depth: info.max_receive_queue_depth + 1, ..sizes };
/// let err = adapter.create_queue_pair(&cq, &cq, 0, deep).unwrap_err();
/// assert_eq!(err.status, NdStatus::INVALID_PARAMETER);
/// # drop(qp);
/// # Ok::<(), NdError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuePairSizes {
    /// Receives the QP holds (not used with a shared receive queue).
    pub receive_queue_depth: u32,
    /// Initiator requests (send, read, write, bind…) the QP holds.
    pub initiator_queue_depth: u32,
    /// SGEs per receive (not used with a shared receive queue).
    pub max_receive_sge: u32,
    /// SGEs per initiator request.
    pub max_initiator_sge: u32,
    /// Largest inline send, in bytes.
    pub inline_data_size: u32,
}

impl QueuePairSizes {
    /// `depth` requests of up to `max_sge` SGEs in each queue, no inline data.
    pub const fn new(depth: u32, max_sge: u32) -> Self {
        QueuePairSizes {
            receive_queue_depth: depth,
            initiator_queue_depth: depth,
            max_receive_sge: max_sge,
            max_initiator_sge: max_sge,
            inline_data_size: 0,
        }
    }

    /// The same sizes with inline sends of up to `bytes`.
    pub const fn with_inline(self, bytes: u32) -> Self {
        QueuePairSizes {
            inline_data_size: bytes,
            ..self
        }
    }

    /// `ND_INVALID_PARAMETER`, naming it, if a size is over the adapter's limit.
    fn check(&self, l: &DeviceLimits) -> NdResult<()> {
        let over =
            if self.receive_queue_depth > l.max_qp_wr || self.initiator_queue_depth > l.max_qp_wr {
                "queue depth"
            } else if self.max_receive_sge > l.max_sge || self.max_initiator_sge > l.max_sge {
                "SGE count"
            } else if self.inline_data_size > l.max_inline_data {
                "inline data size"
            } else {
                return Ok(());
            };
        Err(NdError::new(
            NdStatus::INVALID_PARAMETER,
            format!("{over} exceeds the adapter's limit"),
        ))
    }
}

/// Where a READ, WRITE or atomic lands in the peer's memory.
fn remote(address: u64, token: u32) -> RemoteAddr {
    RemoteAddr {
        va: address,
        rkey: token,
    }
}

impl QueuePair {
    pub(crate) fn create(
        adapter: &Adapter,
        (rcq, icq): (&CompletionQueue, &CompletionQueue),
        srq: Option<&SharedReceiveQueue>,
        context: u64,
        sizes: QueuePairSizes,
    ) -> NdResult<Self> {
        sizes.check(&adapter.limits())?;
        let mut init = QpInitAttr::new(&icq.inner.cq, &rcq.inner.cq);
        init.srq = srq.map(|s| &s.srq);
        init.caps = QpCaps {
            max_send_wr: sizes.initiator_queue_depth.max(1),
            max_send_sge: sizes.max_initiator_sge.max(1),
            max_inline_data: sizes.inline_data_size,
            sq_sig_all: false,
        };
        init.max_recv_wr = sizes.receive_queue_depth.max(1);
        init.max_recv_sge = sizes.max_receive_sge.max(1);
        let _lifecycle = adapter.lock_qp_lifecycle();
        let qp = adapter.inner.pd.create_qp(&init).map_err(nd_err)?;
        // ND has no access flags on the QP: memory windows and regions decide.
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_WRITE
            | Access::REMOTE_ATOMIC;
        qp.to_init(access).map_err(nd_err)?;
        for cq in [rcq, icq] {
            cq.inner.add_qp(qp.qpn(), context);
        }
        Ok(QueuePair {
            qp: Some(qp),
            adapter: adapter.clone(),
            context,
            inline_size: sizes.inline_data_size,
            retry_count: AtomicU8::new(ND_RETRY_COUNT),
            cqs: (rcq.clone(), icq.clone()),
        })
    }

    fn qp(&self) -> &Qp {
        self.qp.as_ref().expect("the verbs QP lives until Drop")
    }

    /// The QP's identity (what a connector is given).
    pub fn id(&self) -> QpId {
        QpId::from(self.qp())
    }

    /// The transport retry count the next Connect asks for (see
    /// [`ND_RETRY_COUNT`]).
    pub fn retry_count(&self) -> u8 {
        self.retry_count.load(Ordering::Relaxed)
    }

    /// Sets the transport retry count the next Connect with this queue pair
    /// asks for: 0 to 6 retries, or 7 for *infinite* (what Linux rxe and
    /// rdma_cm applications use; a dead peer then never ends a request).
    /// Above 7 → `ND_INVALID_PARAMETER`. An Accept takes the count of the
    /// peer's Connect instead.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// let adapter = Provider.open_adapter("127.91.10.4".parse().unwrap())?;
    /// let cq = adapter.create_completion_queue(4)?;
    /// let qp = adapter.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(1, 1))?;
    /// qp.set_retry_count(7)?; // retry forever, as an rxe peer would
    /// assert_eq!(qp.retry_count(), 7);
    /// assert_eq!(qp.set_retry_count(8).unwrap_err().status, NdStatus::INVALID_PARAMETER);
    /// # Ok::<(), NdError>(())
    /// ```
    pub fn set_retry_count(&self, count: u8) -> NdResult<()> {
        if count > 7 {
            return Err(NdError::new(
                NdStatus::INVALID_PARAMETER,
                format!("retry count {count}: 0 to 7 (7: infinite)"),
            ));
        }
        self.retry_count.store(count, Ordering::Relaxed);
        Ok(())
    }

    /// The context given at creation (reported with every completion).
    pub fn context(&self) -> u64 {
        self.context
    }

    /// Posts `wr` as its (already checked) `flags` ask: a completion unless
    /// `SILENT_SUCCESS`, a fence, the solicited event.
    fn post(&self, mut wr: SendWr, flags: OpFlags) -> NdResult<()> {
        wr.signaled = !flags.contains(OpFlags::SILENT_SUCCESS);
        wr.fence = flags.contains(OpFlags::READ_FENCE);
        wr.solicited = flags.contains(OpFlags::SEND_AND_SOLICIT_EVENT);
        self.qp().post_send(wr).map_err(post_err)
    }

    /// `ND_BUFFER_OVERFLOW` if `len` inline bytes do not fit the QP.
    fn check_inline(&self, len: usize) -> NdResult<()> {
        if len > self.inline_size as usize {
            return Err(NdError::new(
                NdStatus::BUFFER_OVERFLOW,
                format!(
                    "{len} bytes inline, the QP's inline size is {}",
                    self.inline_size
                ),
            ));
        }
        Ok(())
    }

    /// A Send or Write (`op`) of `sges`, inline if `flags` say so.
    fn post_data(&self, id: u64, op: SendOp, sges: &[NdSge], flags: OpFlags) -> NdResult<()> {
        if !flags.contains(OpFlags::INLINE) {
            return self.post(SendWr::new(id, op, sges), flags);
        }
        self.check_inline(sges.iter().map(|s| s.len as usize).sum())?;
        let data = gather(&self.adapter, sges)?;
        self.post(SendWr::new_inline(id, op, data), flags)
    }

    /// `Receive`: `sges` may be empty (a zero-byte receive).
    pub fn receive(&self, context: u64, sges: &[NdSge]) -> NdResult<()> {
        let id = wr_id(RequestType::Receive, context)?;
        self.qp().post_recv(RecvWr::new(id, sges)).map_err(post_err)
    }

    /// `Send` of `sges`. With [`OpFlags::INLINE`] the bytes are copied now
    /// (see the module docs: any number of SGEs in registered regions, at
    /// most the QP's inline size in all).
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// # fn connect(
    /// #     (server, sqp): (&Adapter, &QueuePair),
    /// #     (client, cqp): (&Adapter, &QueuePair),
    /// # ) -> NdResult<(Connector, Connector)> {
    /// #     let listener = server.create_listener()?;
    /// #     listener.bind(std::net::SocketAddr::new(server.address(), 0))?;
    /// #     listener.listen(1)?;
    /// #     let (sc, cc) = (server.create_connector()?, client.create_connector()?);
    /// #     let request = listener.get_connection_request(&sc)?;
    /// #     let rep = cc.connect(cqp, listener.get_local_address()?, 1, 1, b"")?;
    /// #     request.wait()?;
    /// #     let rtu = sc.accept(sqp, 1, 1, b"")?;
    /// #     rep.wait()?;
    /// #     cc.complete_connect()?.wait()?;
    /// #     rtu.wait()?;
    /// #     Ok((sc, cc))
    /// # }
    /// let server = Provider.open_adapter("127.91.10.5".parse().unwrap())?;
    /// let client = Provider.open_adapter("127.91.10.6".parse().unwrap())?;
    /// let (scq, ccq) = (server.create_completion_queue(8)?, client.create_completion_queue(8)?);
    /// let sqp = server.create_queue_pair(&scq, &scq, 0, QueuePairSizes::new(4, 1))?;
    /// // One SGE per request, 64 bytes inline.
    /// let cqp = client.create_queue_pair(&ccq, &ccq, 0, QueuePairSizes::new(4, 1).with_inline(64))?;
    /// let (dst, src) = (server.create_memory_region()?, client.create_memory_region()?);
    /// dst.register(64, MrFlags::ALLOW_LOCAL_WRITE).wait()?;
    /// src.register(64, MrFlags::empty()).wait()?;
    /// src.write(0, b"inline, in two pieces")?;
    /// sqp.receive(1, &[NdSge::new(dst.address(), 64, dst.local_token())])?;
    /// # let _connectors = connect((&server, &sqp), (&client, &cqp))?;
    /// let pieces = [
    ///     NdSge::new(src.address(), 8, src.local_token()),
    ///     NdSge::new(src.address() + 8, 13, src.local_token()),
    /// ];
    /// // Two SGEs on a one-SGE queue pair: only inline.
    /// let err = cqp.send(2, &pieces, OpFlags::empty()).unwrap_err();
    /// assert_eq!(err.status, NdStatus::DATA_OVERRUN);
    /// cqp.send(2, &pieces, OpFlags::INLINE)?;
    /// src.write(0, b"changed after the post")?; // the bytes went at post time
    /// assert_eq!(ccq.wait_result()?.status, NdStatus::SUCCESS);
    /// assert_eq!(scq.wait_result()?.bytes_transferred, 21);
    /// let mut got = [0u8; 21];
    /// dst.read(0, &mut got)?;
    /// assert_eq!(&got, b"inline, in two pieces");
    /// # Ok::<(), NdError>(())
    /// ```
    pub fn send(&self, context: u64, sges: &[NdSge], flags: OpFlags) -> NdResult<()> {
        let flags = flags.allowed(OpFlags::TO_PEER, NdStatus::INVALID_PARAMETER_4)?;
        let id = wr_id(RequestType::Send, context)?;
        self.post_data(id, SendOp::Send, sges, flags)
    }

    /// `Send` with `ND_OP_FLAG_INLINE` of `data`, which need not be in any
    /// region: it is copied now (at most the QP's inline size, else
    /// `ND_BUFFER_OVERFLOW`). `flags` may include [`OpFlags::INLINE`] or not.
    pub fn send_inline(&self, context: u64, data: &[u8], flags: OpFlags) -> NdResult<()> {
        let flags = flags.allowed(OpFlags::TO_PEER, NdStatus::INVALID_PARAMETER_4)?;
        self.check_inline(data.len())?;
        let id = wr_id(RequestType::Send, context)?;
        self.post(SendWr::new_inline(id, SendOp::Send, data.to_vec()), flags)
    }

    /// `Read` from the peer's memory into `sges`.
    pub fn read(
        &self,
        context: u64,
        sges: &[NdSge],
        remote_address: u64,
        remote_token: u32,
        flags: OpFlags,
    ) -> NdResult<()> {
        let flags = flags.allowed(OpFlags::ANY_REQUEST, NdStatus::INVALID_PARAMETER_6)?;
        let id = wr_id(RequestType::Read, context)?;
        let op = SendOp::Read(remote(remote_address, remote_token));
        self.post(SendWr::new(id, op, sges), flags)
    }

    /// `Write` from `sges` into the peer's memory; with [`OpFlags::INLINE`]
    /// the bytes are copied now, as for [`QueuePair::send`].
    pub fn write(
        &self,
        context: u64,
        sges: &[NdSge],
        remote_address: u64,
        remote_token: u32,
        flags: OpFlags,
    ) -> NdResult<()> {
        let flags = flags.allowed(OpFlags::TO_PEER, NdStatus::INVALID_PARAMETER_6)?;
        let id = wr_id(RequestType::Write, context)?;
        let op = SendOp::Write(remote(remote_address, remote_token));
        self.post_data(id, op, sges, flags)
    }

    /// `Write` with `ND_OP_FLAG_INLINE` of `data`, which need not be in any
    /// region (as [`QueuePair::send_inline`]).
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// # fn connect(
    /// #     (server, sqp): (&Adapter, &QueuePair),
    /// #     (client, cqp): (&Adapter, &QueuePair),
    /// # ) -> NdResult<(Connector, Connector)> {
    /// #     let listener = server.create_listener()?;
    /// #     listener.bind(std::net::SocketAddr::new(server.address(), 0))?;
    /// #     listener.listen(1)?;
    /// #     let (sc, cc) = (server.create_connector()?, client.create_connector()?);
    /// #     let request = listener.get_connection_request(&sc)?;
    /// #     let rep = cc.connect(cqp, listener.get_local_address()?, 1, 1, b"")?;
    /// #     request.wait()?;
    /// #     let rtu = sc.accept(sqp, 1, 1, b"")?;
    /// #     rep.wait()?;
    /// #     cc.complete_connect()?.wait()?;
    /// #     rtu.wait()?;
    /// #     Ok((sc, cc))
    /// # }
    /// let server = Provider.open_adapter("127.91.10.7".parse().unwrap())?;
    /// let client = Provider.open_adapter("127.91.10.8".parse().unwrap())?;
    /// let (scq, ccq) = (server.create_completion_queue(8)?, client.create_completion_queue(8)?);
    /// let sqp = server.create_queue_pair(&scq, &scq, 0, QueuePairSizes::new(4, 1))?;
    /// let cqp = client.create_queue_pair(&ccq, &ccq, 0, QueuePairSizes::new(4, 1).with_inline(16))?;
    /// let target = server.create_memory_region()?;
    /// target.register(64, MrFlags::ALLOW_REMOTE_WRITE).wait()?;
    /// # let _connectors = connect((&server, &sqp), (&client, &cqp))?;
    /// cqp.write_inline(1, b"no registration", target.address(), target.remote_token(), OpFlags::empty())?;
    /// assert_eq!(ccq.wait_result()?.request_type, RequestType::Write);
    /// let mut got = [0u8; 15];
    /// target.read(0, &mut got)?;
    /// assert_eq!(&got, b"no registration");
    /// // More than the QP's inline size.
    /// let err = cqp.write_inline(2, &[0; 17], target.address(), target.remote_token(), OpFlags::empty());
    /// assert_eq!(err.unwrap_err().status, NdStatus::BUFFER_OVERFLOW);
    /// # Ok::<(), NdError>(())
    /// ```
    pub fn write_inline(
        &self,
        context: u64,
        data: &[u8],
        remote_address: u64,
        remote_token: u32,
        flags: OpFlags,
    ) -> NdResult<()> {
        let flags = flags.allowed(OpFlags::TO_PEER, NdStatus::INVALID_PARAMETER_6)?;
        self.check_inline(data.len())?;
        let id = wr_id(RequestType::Write, context)?;
        let op = SendOp::Write(remote(remote_address, remote_token));
        self.post(SendWr::new_inline(id, op, data.to_vec()), flags)
    }

    /// ndverbs extension (ND v2 has no atomics): 8-byte FETCH & ADD on the
    /// peer's memory; the original value lands in `sge` (8 bytes). Completes
    /// as a [`RequestType::Read`].
    pub fn fetch_add(
        &self,
        context: u64,
        sge: NdSge,
        remote_address: u64,
        remote_token: u32,
        add: u64,
        flags: OpFlags,
    ) -> NdResult<()> {
        let flags = flags.allowed(OpFlags::ANY_REQUEST, NdStatus::INVALID_PARAMETER_6)?;
        let remote = remote(remote_address, remote_token);
        self.atomic(context, sge, SendOp::FetchAdd { remote, add }, flags)
    }

    /// ndverbs extension: 8-byte COMPARE & SWAP on the peer's memory; the
    /// original value lands in `sge`. Completes as a [`RequestType::Read`].
    #[allow(clippy::too_many_arguments)]
    pub fn compare_swap(
        &self,
        context: u64,
        sge: NdSge,
        remote_address: u64,
        remote_token: u32,
        compare: u64,
        swap: u64,
        flags: OpFlags,
    ) -> NdResult<()> {
        // The flags are the seventh parameter here, the sixth in the others.
        let flags = flags.allowed(OpFlags::ANY_REQUEST, NdStatus::INVALID_PARAMETER_7)?;
        let remote = remote(remote_address, remote_token);
        let op = SendOp::CompareSwap {
            remote,
            compare,
            swap,
        };
        self.atomic(context, sge, op, flags)
    }

    /// Posts an atomic `op`: it returns the original value like a READ, and
    /// completes as one.
    fn atomic(&self, context: u64, sge: NdSge, op: SendOp, flags: OpFlags) -> NdResult<()> {
        let id = wr_id(RequestType::Read, context)?;
        self.post(SendWr::new(id, op, [sge]), flags)
    }

    /// A request with no data that completes in order as `t`. Only its
    /// completion is asked for: what it stands for took effect already.
    fn marker(&self, t: RequestType, context: u64, flags: OpFlags) -> NdResult<()> {
        let op = SendOp::Write(RemoteAddr::default());
        let wr = SendWr::new(wr_id(t, context)?, op, vec![]);
        self.post(wr, flags & OpFlags::SILENT_SUCCESS)
    }

    /// `Bind`: grants the peer `len` bytes at `address` of `mr` through `mw`
    /// (`ALLOW_READ`/`ALLOW_WRITE`); the window's token changes.
    pub fn bind(
        &self,
        context: u64,
        mr: &MemoryRegion,
        mw: &MemoryWindow,
        address: u64,
        len: u64,
        flags: OpFlags,
    ) -> NdResult<()> {
        let allowed = OpFlags::ANY_REQUEST | OpFlags::ALLOW_READ | OpFlags::ALLOW_WRITE;
        let flags = flags.allowed(allowed, NdStatus::INVALID_PARAMETER_6)?;
        if !matches!(self.qp().state(), QpState::Rts | QpState::Sqd) {
            return Err(NdError::new(
                NdStatus::CONNECTION_INVALID,
                "the queue pair is not connected",
            ));
        }
        let mut a = Access::NONE;
        if flags.contains(OpFlags::ALLOW_READ) {
            a |= Access::REMOTE_READ;
        }
        if flags.contains(OpFlags::ALLOW_WRITE) {
            a |= Access::REMOTE_WRITE;
        }
        mr.with_mr(|m| mw.mw.bind(m, address, len, a))?
            .map_err(nd_err)?;
        self.marker(RequestType::Bind, context, flags)
    }

    /// `Invalidate`: revokes `mw`'s grant.
    pub fn invalidate(&self, context: u64, mw: &MemoryWindow, flags: OpFlags) -> NdResult<()> {
        let flags = flags.allowed(OpFlags::ANY_REQUEST, NdStatus::INVALID_PARAMETER_3)?;
        mw.mw.invalidate().map_err(|e| {
            let mut err = nd_err(e);
            err.status = NdStatus::INVALID_DEVICE_REQUEST;
            err
        })?;
        self.marker(RequestType::Invalidate, context, flags)
    }

    /// `Flush`: every outstanding request completes `ND_CANCELED`; the QP is
    /// dead afterwards.
    pub fn flush(&self) -> NdResult<()> {
        self.qp().to_error().map_err(nd_err)
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qp().qpn()
    }
}

/// Releasing a queue pair flushes what it has outstanding; those results
/// carry its context like all of its others.
impl Drop for QueuePair {
    fn drop(&mut self) {
        let _lifecycle = self.adapter.lock_qp_lifecycle();
        let qpn = self.qpn();
        // Flushed (verbs' destroy alone ends outstanding work without
        // results), then destroyed, before the CQs are told: its flushes
        // are queued by then.
        if let Some(qp) = self.qp.take() {
            let _ = qp.to_error();
            drop(qp);
        }
        // Once per CQ: a second call for the same CQ finds nothing to do.
        self.cqs.0.inner.release_qp(qpn);
        self.cqs.1.inner.release_qp(qpn);
    }
}

/// A shared receive queue.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// # fn connect(
/// #     (server, sqp): (&Adapter, &QueuePair),
/// #     (client, cqp): (&Adapter, &QueuePair),
/// # ) -> NdResult<(Connector, Connector)> {
/// #     let listener = server.create_listener()?;
/// #     listener.bind(std::net::SocketAddr::new(server.address(), 0))?;
/// #     listener.listen(1)?;
/// #     let (sc, cc) = (server.create_connector()?, client.create_connector()?);
/// #     let request = listener.get_connection_request(&sc)?;
/// #     let rep = cc.connect(cqp, listener.get_local_address()?, 1, 1, b"")?;
/// #     request.wait()?;
/// #     let rtu = sc.accept(sqp, 1, 1, b"")?;
/// #     rep.wait()?;
/// #     cc.complete_connect()?.wait()?;
/// #     rtu.wait()?;
/// #     Ok((sc, cc))
/// # }
/// let server = Provider.open_adapter("127.91.11.1".parse().unwrap())?;
/// let client = Provider.open_adapter("127.91.11.2".parse().unwrap())?;
/// let (scq, ccq) = (server.create_completion_queue(8)?, client.create_completion_queue(8)?);
/// // One pool of receives for any number of QPs.
/// let srq = server.create_shared_receive_queue(16, 1, 0)?;
/// let buf = server.create_memory_region()?;
/// buf.register(4096, MrFlags::ALLOW_LOCAL_WRITE).wait()?;
/// for i in 0..4 {
///     srq.receive(i, &[NdSge::new(buf.address() + i * 1024, 1024, buf.local_token())])?;
/// }
/// let sqp = server.create_queue_pair_with_srq(&scq, &scq, &srq, 0, QueuePairSizes::new(4, 1))?;
/// let cqp = client.create_queue_pair(&ccq, &ccq, 0, QueuePairSizes::new(4, 1).with_inline(64))?;
/// # let _connectors = connect((&server, &sqp), (&client, &cqp))?;
/// cqp.send_inline(1, b"to the shared queue", OpFlags::empty())?;
/// let r = scq.wait_result()?;
/// assert_eq!((r.request_type, r.bytes_transferred), (RequestType::Receive, 19));
/// let mut text = [0u8; 19];
/// buf.read(r.request_context as usize * 1024, &mut text)?;
/// assert_eq!(&text, b"to the shared queue");
/// # Ok::<(), NdError>(())
/// ```
pub struct SharedReceiveQueue {
    pub(crate) srq: Srq,
    adapter: Adapter,
}

impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("depth", &self.srq.depth())
            .finish()
    }
}

impl SharedReceiveQueue {
    pub(crate) fn create(
        adapter: &Adapter,
        depth: u32,
        max_sge: u32,
        notify_threshold: u32,
    ) -> NdResult<Self> {
        let srq = adapter
            .inner
            .pd
            .create_srq(depth, max_sge.max(1))
            .map_err(nd_err)?;
        srq.set_limit(notify_threshold);
        Ok(SharedReceiveQueue {
            srq,
            adapter: adapter.clone(),
        })
    }

    /// `Receive`.
    pub fn receive(&self, context: u64, sges: &[NdSge]) -> NdResult<()> {
        let id = wr_id(RequestType::Receive, context)?;
        self.srq.post_recv(RecvWr::new(id, sges)).map_err(post_err)
    }

    /// `Notify`: completes when fewer receives than the notify threshold are
    /// outstanding — time to post more — at once if that is already so.
    /// Every Notify pending then completes together; without a threshold
    /// (0) only `CancelOverlappedRequests` (`ND_CANCELED`), releasing the
    /// queue (`ND_CANCELED`) or removal (`ND_DEVICE_REMOVED`) ends it.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// # fn connect(
    /// #     (server, sqp): (&Adapter, &QueuePair),
    /// #     (client, cqp): (&Adapter, &QueuePair),
    /// # ) -> NdResult<(Connector, Connector)> {
    /// #     let listener = server.create_listener()?;
    /// #     listener.bind(std::net::SocketAddr::new(server.address(), 0))?;
    /// #     listener.listen(1)?;
    /// #     let (sc, cc) = (server.create_connector()?, client.create_connector()?);
    /// #     let request = listener.get_connection_request(&sc)?;
    /// #     let rep = cc.connect(cqp, listener.get_local_address()?, 1, 1, b"")?;
    /// #     request.wait()?;
    /// #     let rtu = sc.accept(sqp, 1, 1, b"")?;
    /// #     rep.wait()?;
    /// #     cc.complete_connect()?.wait()?;
    /// #     rtu.wait()?;
    /// #     Ok((sc, cc))
    /// # }
    /// let server = Provider.open_adapter("127.91.11.3".parse().unwrap())?;
    /// let client = Provider.open_adapter("127.91.11.4".parse().unwrap())?;
    /// let (scq, ccq) = (server.create_completion_queue(8)?, client.create_completion_queue(8)?);
    /// // Tell me when fewer than 2 receives are left.
    /// let srq = server.create_shared_receive_queue(8, 1, 2)?;
    /// srq.receive(1, &[])?;
    /// srq.receive(2, &[])?;
    /// let sqp = server.create_queue_pair_with_srq(&scq, &scq, &srq, 0, QueuePairSizes::new(4, 1))?;
    /// let cqp = client.create_queue_pair(&ccq, &ccq, 0, QueuePairSizes::new(4, 1))?;
    /// # let _connectors = connect((&server, &sqp), (&client, &cqp))?;
    /// let low = srq.notify();
    /// cqp.send(1, &[], OpFlags::empty())?; // takes one receive: 1 left
    /// low.wait()?;
    /// assert_eq!(scq.wait_result()?.request_context, 1);
    /// # Ok::<(), NdError>(())
    /// ```
    pub fn notify(&self) -> NdPending<()> {
        NdPending::map(self.srq.notify_limit(), |r| r.map_err(nd_err))
    }

    /// `Modify`: a new depth (0: unchanged) and notify threshold (0:
    /// unchanged). A depth beyond `MaxSharedReceiveQueueDepth` is
    /// `ND_INVALID_PARAMETER`; below the receives outstanding
    /// `ND_BUFFER_OVERFLOW`. Either way nothing changes.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// let adapter = Provider.open_adapter("127.91.11.5".parse().unwrap())?;
    /// let srq = adapter.create_shared_receive_queue(2, 1, 0)?;
    /// for i in 0..2 {
    ///     srq.receive(i, &[])?;
    /// }
    /// assert_eq!(srq.receive(2, &[]).unwrap_err().status, NdStatus::NO_MORE_ENTRIES);
    /// srq.modify(4, 0)?; // deeper; the threshold stays
    /// srq.receive(2, &[])?;
    /// assert_eq!(srq.modify(2, 0).unwrap_err().status, NdStatus::BUFFER_OVERFLOW);
    /// let max = adapter.query(ND_VERSION_2)?.max_shared_receive_queue_depth;
    /// assert_eq!(srq.modify(max + 1, 0).unwrap_err().status, NdStatus::INVALID_PARAMETER);
    /// // A threshold above the 3 outstanding: Notify completes at once.
    /// srq.modify(0, 4)?;
    /// srq.notify().wait()?;
    /// # Ok::<(), NdError>(())
    /// ```
    pub fn modify(&self, depth: u32, notify_threshold: u32) -> NdResult<()> {
        if self.adapter.is_removed() {
            return Err(NdError::new(NdStatus::DEVICE_REMOVED, "adapter removed"));
        }
        if depth > 0 {
            self.srq.resize(depth).map_err(nd_err)?;
        }
        if notify_threshold > 0 {
            self.srq.set_limit(notify_threshold);
        }
        Ok(())
    }

    /// `GetNotifyAffinity`: processor group 0 and the processors Notify
    /// requests complete on (see [`CompletionQueue::get_notify_affinity`]).
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// let adapter = Provider.open_adapter("127.91.11.6".parse().unwrap())?;
    /// let srq = adapter.create_shared_receive_queue(2, 1, 0)?;
    /// let (group, affinity) = srq.get_notify_affinity()?;
    /// assert_eq!(group, 0);
    /// assert_ne!(affinity, 0);
    /// # Ok::<(), NdError>(())
    /// ```
    pub fn get_notify_affinity(&self) -> NdResult<(u16, u64)> {
        self.adapter.notify_affinity()
    }

    /// `CancelOverlappedRequests`: pending Notify requests complete
    /// `ND_CANCELED`, in order. It is cleanup: it works after removal too.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// let adapter = Provider.open_adapter("127.91.11.7".parse().unwrap())?;
    /// let srq = adapter.create_shared_receive_queue(2, 1, 1)?;
    /// srq.receive(1, &[])?;
    /// let (a, b) = (srq.notify(), srq.notify());
    /// srq.cancel_overlapped_requests()?;
    /// assert_eq!(a.wait().unwrap_err().status, NdStatus::CANCELED);
    /// assert_eq!(b.wait().unwrap_err().status, NdStatus::CANCELED);
    /// # Ok::<(), NdError>(())
    /// ```
    pub fn cancel_overlapped_requests(&self) -> NdResult<()> {
        self.srq.cancel_limit_notifies();
        Ok(())
    }
}
