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

/// `ND_OP_FLAG_*`.
pub mod op_flags {
    /// No completion on success.
    pub const SILENT_SUCCESS: u32 = 0x01;
    /// Wait for earlier READs.
    pub const READ_FENCE: u32 = 0x02;
    /// Set the solicited event bit.
    pub const SEND_AND_SOLICIT_EVENT: u32 = 0x04;
    /// Bind: allow remote reads.
    pub const ALLOW_READ: u32 = 0x08;
    /// Bind: allow remote writes.
    pub const ALLOW_WRITE: u32 = 0x10;
    /// Data is copied at post time (see [`QueuePair::send_inline`](super::QueuePair::send_inline)).
    pub const INLINE: u32 = 0x20;
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
/// // receive CQ, initiator CQ, context, queue depths, SGEs, inline bytes.
/// let sqp = server.create_queue_pair(&scq, &scq, 0, 4, 4, 1, 1, 0)?;
/// let cqp = client.create_queue_pair(&ccq, &ccq, 0, 4, 4, 1, 1, 64)?;
/// // A new QP can take receives, but not sends until it is connected.
/// let buf = server.create_memory_region()?;
/// buf.register(4096, mr_flags::ALLOW_LOCAL_WRITE).wait()?;
/// sqp.receive(1, &[NdSge::new(buf.address(), 4096, buf.local_token())])?;
/// sqp.receive(2, &[NdSge::new(buf.address() + 2048, 2048, buf.local_token())])?;
/// let err = cqp.send_inline(1, b"too early", 0).unwrap_err();
/// assert_eq!(err.status, NdStatus::CONNECTION_INVALID);
/// # let _connectors = connect((&server, &sqp), (&client, &cqp))?;
/// // Sends consume receives in order. A SILENT_SUCCESS send completes only on error.
/// cqp.send_inline(1, b"first", op_flags::SILENT_SUCCESS)?;
/// cqp.send_inline(2, b"second", 0)?;
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

fn flags_of(flags: u32, allowed: u32, bad: NdStatus) -> NdResult<(bool, bool, bool)> {
    if flags & !allowed != 0 {
        return Err(NdError::new(
            bad,
            format!("flags {flags:#x} not allowed here"),
        ));
    }
    Ok((
        flags & op_flags::SILENT_SUCCESS == 0,
        flags & op_flags::READ_FENCE != 0,
        flags & op_flags::SEND_AND_SOLICIT_EVENT != 0,
    ))
}

impl QueuePair {
    pub(crate) fn create(
        adapter: &Adapter,
        rcq: &CompletionQueue,
        icq: &CompletionQueue,
        srq: Option<&SharedReceiveQueue>,
        context: u64,
        (rq_depth, iq_depth, max_rsge, max_isge, inline): (u32, u32, u32, u32, u32),
    ) -> NdResult<Self> {
        let bad = |what: &str| {
            Err(NdError::new(
                NdStatus::INVALID_PARAMETER,
                format!("{what} exceeds the adapter's limit"),
            ))
        };
        if rq_depth > LIMITS.max_qp_wr || iq_depth > LIMITS.max_qp_wr {
            return bad("queue depth");
        }
        if max_rsge > LIMITS.max_sge || max_isge > LIMITS.max_sge {
            return bad("SGE count");
        }
        if inline > LIMITS.max_inline_data {
            return bad("inline data size");
        }
        let mut init = QpInitAttr::new(&icq.cq, &rcq.cq);
        init.srq = srq.map(|s| &s.srq);
        init.caps = QpCaps {
            max_send_wr: iq_depth.max(1),
            max_send_sge: max_isge.max(1),
            max_inline_data: inline,
            sq_sig_all: false,
        };
        init.max_recv_wr = rq_depth.max(1);
        init.max_recv_sge = max_rsge.max(1);
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
            inline_size: inline,
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

    fn post(&self, wr: SendWr) -> NdResult<()> {
        self.qp.post_send(wr).map_err(post_err)
    }

    /// `Receive`: `sges` may be empty (a zero-byte receive).
    pub fn receive(&self, context: u64, sges: &[NdSge]) -> NdResult<()> {
        let id = wr_id(RequestType::Receive, context)?;
        self.qp.post_recv(RecvWr::new(id, sges)).map_err(post_err)
    }

    /// `Send` from registered memory.
    pub fn send(&self, context: u64, sges: &[NdSge], flags: u32) -> NdResult<()> {
        let allowed =
            op_flags::SILENT_SUCCESS | op_flags::READ_FENCE | op_flags::SEND_AND_SOLICIT_EVENT;
        let (signaled, fence, solicited) = flags_of(flags, allowed, NdStatus::INVALID_PARAMETER_4)?;
        let mut wr = SendWr::new(wr_id(RequestType::Send, context)?, SendOp::Send, sges);
        (wr.signaled, wr.fence, wr.solicited) = (signaled, fence, solicited);
        self.post(wr)
    }

    /// `Send` with `ND_OP_FLAG_INLINE`: `data` is copied now (at most the QP's
    /// inline size; no registration needed).
    pub fn send_inline(&self, context: u64, data: &[u8], flags: u32) -> NdResult<()> {
        let allowed = op_flags::SILENT_SUCCESS
            | op_flags::READ_FENCE
            | op_flags::SEND_AND_SOLICIT_EVENT
            | op_flags::INLINE;
        let (signaled, fence, solicited) = flags_of(flags, allowed, NdStatus::INVALID_PARAMETER_4)?;
        if data.len() > self.inline_size as usize {
            return Err(NdError::new(
                NdStatus::BUFFER_OVERFLOW,
                "inline data larger than the QP's inline size",
            ));
        }
        let mut wr = SendWr::new(
            wr_id(RequestType::Send, context)?,
            SendOp::Send,
            ndverbs_verbs::SgList::new(),
        );
        wr.inline = Some(data.to_vec());
        (wr.signaled, wr.fence, wr.solicited) = (signaled, fence, solicited);
        self.post(wr)
    }

    /// `Read` from the peer's memory into `sges`.
    pub fn read(
        &self,
        context: u64,
        sges: &[NdSge],
        remote_address: u64,
        remote_token: u32,
        flags: u32,
    ) -> NdResult<()> {
        let allowed = op_flags::SILENT_SUCCESS | op_flags::READ_FENCE;
        let (signaled, fence, _) = flags_of(flags, allowed, NdStatus::INVALID_PARAMETER_6)?;
        let op = SendOp::Read(RemoteAddr {
            va: remote_address,
            rkey: remote_token,
        });
        let mut wr = SendWr::new(wr_id(RequestType::Read, context)?, op, sges);
        (wr.signaled, wr.fence) = (signaled, fence);
        self.post(wr)
    }

    /// `Write` from `sges` into the peer's memory.
    pub fn write(
        &self,
        context: u64,
        sges: &[NdSge],
        remote_address: u64,
        remote_token: u32,
        flags: u32,
    ) -> NdResult<()> {
        let allowed =
            op_flags::SILENT_SUCCESS | op_flags::READ_FENCE | op_flags::SEND_AND_SOLICIT_EVENT;
        let (signaled, fence, solicited) = flags_of(flags, allowed, NdStatus::INVALID_PARAMETER_6)?;
        let op = SendOp::Write(RemoteAddr {
            va: remote_address,
            rkey: remote_token,
        });
        let mut wr = SendWr::new(wr_id(RequestType::Write, context)?, op, sges);
        (wr.signaled, wr.fence, wr.solicited) = (signaled, fence, solicited);
        self.post(wr)
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
        flags: u32,
    ) -> NdResult<()> {
        let remote = RemoteAddr {
            va: remote_address,
            rkey: remote_token,
        };
        let op = SendOp::FetchAdd { remote, add };
        self.atomic(context, sge, op, flags, NdStatus::INVALID_PARAMETER_6)
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
        flags: u32,
    ) -> NdResult<()> {
        let remote = RemoteAddr {
            va: remote_address,
            rkey: remote_token,
        };
        let op = SendOp::CompareSwap {
            remote,
            compare,
            swap,
        };
        self.atomic(context, sge, op, flags, NdStatus::INVALID_PARAMETER_7)
    }

    /// Posts an atomic `op`; `bad_flags` is the status naming the flags
    /// parameter's position in the caller's signature.
    fn atomic(
        &self,
        context: u64,
        sge: NdSge,
        op: SendOp,
        flags: u32,
        bad_flags: NdStatus,
    ) -> NdResult<()> {
        let allowed = op_flags::SILENT_SUCCESS | op_flags::READ_FENCE;
        let (signaled, fence, _) = flags_of(flags, allowed, bad_flags)?;
        // Atomics return the original value like a READ, and complete as one.
        let mut wr = SendWr::new(wr_id(RequestType::Read, context)?, op, [sge]);
        (wr.signaled, wr.fence) = (signaled, fence);
        self.post(wr)
    }

    /// A request with no data that completes in order as `t`.
    fn marker(&self, t: RequestType, context: u64, flags: u32) -> NdResult<()> {
        let mut wr = SendWr::new(
            wr_id(t, context)?,
            SendOp::Write(RemoteAddr::default()),
            vec![],
        );
        wr.signaled = flags & op_flags::SILENT_SUCCESS == 0;
        self.post(wr)
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
        flags: u32,
    ) -> NdResult<()> {
        let allowed = op_flags::SILENT_SUCCESS
            | op_flags::READ_FENCE
            | op_flags::ALLOW_READ
            | op_flags::ALLOW_WRITE;
        flags_of(flags, allowed, NdStatus::INVALID_PARAMETER_6)?;
        if !matches!(self.qp.state(), QpState::Rts | QpState::Sqd) {
            return Err(NdError::new(
                NdStatus::CONNECTION_INVALID,
                "the queue pair is not connected",
            ));
        }
        let mut a = Access::NONE;
        if flags & op_flags::ALLOW_READ != 0 {
            a |= Access::REMOTE_READ;
        }
        if flags & op_flags::ALLOW_WRITE != 0 {
            a |= Access::REMOTE_WRITE;
        }
        mr.with_mr(|m| mw.mw.bind(m, address, len, a))?
            .map_err(nd_err)?;
        self.marker(RequestType::Bind, context, flags)
    }

    /// `Invalidate`: revokes `mw`'s grant.
    pub fn invalidate(&self, context: u64, mw: &MemoryWindow, flags: u32) -> NdResult<()> {
        flags_of(
            flags,
            op_flags::SILENT_SUCCESS | op_flags::READ_FENCE,
            NdStatus::INVALID_PARAMETER_3,
        )?;
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
/// buf.register(4096, mr_flags::ALLOW_LOCAL_WRITE).wait()?;
/// for i in 0..4 {
///     srq.receive(i, &[NdSge::new(buf.address() + i * 1024, 1024, buf.local_token())])?;
/// }
/// let sqp = server.create_queue_pair_with_srq(&scq, &scq, &srq, 0, 4, 1, 0)?;
/// let cqp = client.create_queue_pair(&ccq, &ccq, 0, 4, 4, 1, 1, 64)?;
/// # let _connectors = connect((&server, &sqp), (&client, &cqp))?;
/// cqp.send_inline(1, b"to the shared queue", 0)?;
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
