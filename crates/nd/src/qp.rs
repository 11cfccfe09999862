//! Queue pairs and shared receive queues: `Send`, `Receive`, `Read`, `Write`,
//! `Bind`, `Invalidate`, `Flush`.
//!
//! ND queue pairs are created straight into INIT, so receives can be posted
//! before the connection exists. Posting errors are synchronous (the request
//! was never queued): `ND_CONNECTION_INVALID` (not connected),
//! `ND_NO_MORE_ENTRIES` (queue full), `ND_DATA_OVERRUN` (too many SGEs),
//! `ND_INVALID_PARAMETER_4/6` (bad flags). Everything else arrives as a
//! completion on the CQ.
//!
//! Memory-window `Bind` and `Invalidate` take effect at once and complete in
//! order with the other requests through a zero-length RDMA WRITE, as
//! WinVerbs' ND provider did (a zero-length WRITE needs no remote key).

use crate::adapter::{nd_err, post_err, Adapter};
use crate::cq::{wr_id, CompletionQueue, RequestType};
use crate::mr::{MemoryRegion, MemoryWindow};
use crate::status::{NdError, NdResult, NdStatus};
use ndverbs_verbs::{
    Access, Qp, QpCaps, QpId, QpInitAttr, QpState, RecvWr, RemoteAddr, SendOp, SendWr, Sge, Srq,
    LIMITS,
};

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
        /// Data is copied at post time (see [`QueuePair::send_inline`]).
        const INLINE = 0x20;
    }
}

impl OpFlags {
    /// What every request takes: its completion and its ordering.
    const ANY_REQUEST: OpFlags = OpFlags::SILENT_SUCCESS.union(OpFlags::READ_FENCE);
    /// What a request carrying data to the peer takes (Send, Write).
    const TO_PEER: OpFlags = OpFlags::ANY_REQUEST.union(OpFlags::SEND_AND_SOLICIT_EVENT);

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
    pub(crate) qp: Qp,
    context: u64,
    inline_size: u32,
    cqs: (CompletionQueue, CompletionQueue),
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qpn", &self.qp.qpn())
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
/// let adapter = Provider.open_adapter("127.91.13.1".parse().unwrap())?;
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
    fn check(&self) -> NdResult<()> {
        let over = if self.receive_queue_depth > LIMITS.max_qp_wr
            || self.initiator_queue_depth > LIMITS.max_qp_wr
        {
            "queue depth"
        } else if self.max_receive_sge > LIMITS.max_sge || self.max_initiator_sge > LIMITS.max_sge {
            "SGE count"
        } else if self.inline_data_size > LIMITS.max_inline_data {
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
        sizes.check()?;
        let mut init = QpInitAttr::new(&icq.cq, &rcq.cq);
        init.srq = srq.map(|s| &s.srq);
        init.caps = QpCaps {
            max_send_wr: sizes.initiator_queue_depth.max(1),
            max_send_sge: sizes.max_initiator_sge.max(1),
            max_inline_data: sizes.inline_data_size,
            sq_sig_all: false,
        };
        init.max_recv_wr = sizes.receive_queue_depth.max(1);
        init.max_recv_sge = sizes.max_receive_sge.max(1);
        let qp = adapter.inner.pd.create_qp(&init).map_err(nd_err)?;
        // ND has no access flags on the QP: memory windows and regions decide.
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_WRITE
            | Access::REMOTE_ATOMIC;
        qp.to_init(access).map_err(nd_err)?;
        for cq in [rcq, icq] {
            cq.qp_contexts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(qp.qpn(), context);
        }
        Ok(QueuePair {
            qp,
            context,
            inline_size: sizes.inline_data_size,
            cqs: (rcq.clone(), icq.clone()),
        })
    }

    /// The QP's identity (what a connector is given).
    pub fn id(&self) -> QpId {
        QpId::from(&self.qp)
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
        self.qp.post_send(wr).map_err(post_err)
    }

    /// `Receive`: `sges` may be empty (a zero-byte receive).
    pub fn receive(&self, context: u64, sges: &[NdSge]) -> NdResult<()> {
        let id = wr_id(RequestType::Receive, context)?;
        self.qp.post_recv(RecvWr::new(id, sges)).map_err(post_err)
    }

    /// `Send` from registered memory.
    pub fn send(&self, context: u64, sges: &[NdSge], flags: OpFlags) -> NdResult<()> {
        let flags = flags.allowed(OpFlags::TO_PEER, NdStatus::INVALID_PARAMETER_4)?;
        let wr = SendWr::new(wr_id(RequestType::Send, context)?, SendOp::Send, sges);
        self.post(wr, flags)
    }

    /// `Send` with `ND_OP_FLAG_INLINE`: `data` is copied now (at most the QP's
    /// inline size; no registration needed).
    pub fn send_inline(&self, context: u64, data: &[u8], flags: OpFlags) -> NdResult<()> {
        let allowed = OpFlags::TO_PEER | OpFlags::INLINE;
        let flags = flags.allowed(allowed, NdStatus::INVALID_PARAMETER_4)?;
        if data.len() > self.inline_size as usize {
            return Err(NdError::new(
                NdStatus::BUFFER_OVERFLOW,
                "inline data larger than the QP's inline size",
            ));
        }
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

    /// `Write` from `sges` into the peer's memory.
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
        self.post(SendWr::new(id, op, sges), flags)
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
        if !matches!(self.qp.state(), QpState::Rts | QpState::Sqd) {
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
        self.qp.to_error().map_err(nd_err)
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qp.qpn()
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        for cq in [&self.cqs.0, &self.cqs.1] {
            cq.qp_contexts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&self.qp.qpn());
        }
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
/// let srq = server.create_shared_receive_queue(16, 1)?;
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
}

impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedReceiveQueue")
    }
}

impl SharedReceiveQueue {
    pub(crate) fn create(adapter: &Adapter, depth: u32, max_sge: u32) -> NdResult<Self> {
        Ok(SharedReceiveQueue {
            srq: adapter
                .inner
                .pd
                .create_srq(depth, max_sge.max(1))
                .map_err(nd_err)?,
        })
    }

    /// `Receive`.
    pub fn receive(&self, context: u64, sges: &[NdSge]) -> NdResult<()> {
        let id = wr_id(RequestType::Receive, context)?;
        self.srq.post_recv(RecvWr::new(id, sges)).map_err(post_err)
    }
}
