//! Work requests and work completions: what the application posts and what it
//! gets back.
//!
//! A [`SendWr`] goes on the send queue and becomes one *message* on the wire
//! (SEND, RDMA WRITE, RDMA READ or an atomic); a [`RecvWr`] goes on a
//! [`RecvQueue`](super::RecvQueue) and is consumed by one incoming SEND or
//! WRITE-with-immediate. Each finishes as exactly one [`WorkCompletion`] —
//! except successful *unsignaled* sends, which complete silently. Errors and
//! flushes always produce a completion.
//!
//! Completions of one queue come out in posting order. The statuses are the
//! ibverbs `ibv_wc_status` values, in the same numeric order.

use crate::mem::SgList;

/// Remote buffer of an RDMA WRITE or READ.
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{RemoteAddr, SendOp, SendWr};
/// // The peer advertised a buffer at 0x7000 under rkey 0x1234.
/// let at = RemoteAddr { va: 0x7000, rkey: 0x1234 };
/// let wr = SendWr::new_inline(1, SendOp::Write(at), b"put".to_vec());
/// assert_eq!(wr.op, SendOp::Write(RemoteAddr { va: 0x7000, rkey: 0x1234 }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RemoteAddr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
}

/// The operation of a send work request.
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{RemoteAddr, SendOp, WcOpcode};
/// let read = SendOp::Read(RemoteAddr { va: 0x1000, rkey: 7 });
/// assert!(read.is_read_or_atomic() && !read.is_atomic());
/// let add = SendOp::FetchAdd { remote: RemoteAddr { va: 0x1008, rkey: 7 }, add: 1 };
/// assert!(add.is_atomic());
/// assert_eq!(add.wc_opcode(), WcOpcode::FetchAdd);
/// assert_eq!(SendOp::SendImm(42).wc_opcode(), WcOpcode::Send);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND with 32-bit immediate data (carried as is).
    SendImm(u32),
    /// SEND that invalidates the given R_Key at the responder.
    SendInv(u32),
    /// RDMA WRITE.
    Write(RemoteAddr),
    /// RDMA WRITE with immediate data; consumes a receive at the responder.
    WriteImm(RemoteAddr, u32),
    /// RDMA READ into the local SGEs.
    Read(RemoteAddr),
    /// 8-byte COMPARE & SWAP; the original value lands in the local SGEs (8 bytes).
    CompareSwap {
        /// Remote address (8-byte aligned) and key.
        remote: RemoteAddr,
        /// Expected value.
        compare: u64,
        /// Replacement.
        swap: u64,
    },
    /// 8-byte FETCH & ADD; the original value lands in the local SGEs (8 bytes).
    FetchAdd {
        /// Remote address (8-byte aligned) and key.
        remote: RemoteAddr,
        /// Addend.
        add: u64,
    },
}

impl SendOp {
    /// True for RDMA READ and the atomics: they need a response, occupy one of
    /// the `max_rd_atomic` slots and are completed only by their own response.
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::Read(_) | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }

    /// True for the atomics.
    pub fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }

    /// The completion opcode.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendImm(_) | SendOp::SendInv(_) => WcOpcode::Send,
            SendOp::Write(_) | SendOp::WriteImm(..) => WcOpcode::RdmaWrite,
            SendOp::Read(_) => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }
}

/// A send work request.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::Sge;
/// use ndverbs_proto::rc::{SendOp, SendWr};
/// // 100 bytes at 0x1000 of the region with lkey 0x105, sent as one SEND.
/// let mut wr = SendWr::new(9, SendOp::Send, vec![Sge::new(0x1000, 100, 0x105)]);
/// assert!(wr.signaled && wr.inline.is_none());
/// wr.signaled = false; // complete silently on success
/// // Small payloads can go inline: copied at post time, no memory region needed.
/// let small = SendWr::new_inline(10, SendOp::SendImm(0xfeed), b"hi".to_vec());
/// assert!(small.sgl.is_empty() && small.inline.as_deref() == Some(&b"hi"[..]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Local buffers: the data to send (SEND, WRITE) or the destination (READ,
    /// atomics: 8 bytes).
    pub sgl: SgList,
    /// Inline data: sent instead of `sgl` (SEND and WRITE only; `sgl` must then
    /// be empty). Copied at post time, so the caller's buffer is free at once.
    pub inline: Option<Vec<u8>>,
    /// Produce a completion on success (errors always complete).
    pub signaled: bool,
    /// Read fence: do not start until every earlier READ and atomic completed.
    pub fence: bool,
    /// Set the solicited-event bit on the last packet.
    pub solicited: bool,
}

impl SendWr {
    /// A signaled request with no flags. `sgl` is anything that converts
    /// to an [`SgList`]: an array or a single [`Sge`](crate::mem::Sge) costs no allocation.
    pub fn new(wr_id: u64, op: SendOp, sgl: impl Into<SgList>) -> Self {
        SendWr {
            wr_id,
            op,
            sgl: sgl.into(),
            inline: None,
            signaled: true,
            fence: false,
            solicited: false,
        }
    }

    /// A signaled request carrying `data` inline.
    pub fn new_inline(wr_id: u64, op: SendOp, data: Vec<u8>) -> Self {
        SendWr {
            inline: Some(data),
            ..SendWr::new(wr_id, op, SgList::new())
        }
    }
}

/// A receive work request.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::Sge;
/// use ndverbs_proto::rc::{RecvQueue, RecvWr};
/// let mut rq = RecvQueue::new(16, 2);
/// // An incoming SEND fills the first SGE, then the second.
/// rq.post(RecvWr::new(1, vec![Sge::new(0x1000, 64, 0x105), Sge::new(0x2000, 64, 0x206)]))?;
/// assert_eq!(rq.len(), 1);
/// # Ok::<(), ndverbs_proto::rc::PostError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Where incoming SEND data lands.
    pub sgl: SgList,
}

impl RecvWr {
    /// A receive (see [`SendWr::new`] for `sgl`).
    pub fn new(wr_id: u64, sgl: impl Into<SgList>) -> Self {
        RecvWr {
            wr_id,
            sgl: sgl.into(),
        }
    }
}

/// Completion status (ibverbs `ibv_wc_status`, same order and values).
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::WcStatus;
/// // The numeric values are ibverbs' `enum ibv_wc_status`.
/// assert_eq!(WcStatus::Success as u32, 0);
/// assert_eq!(WcStatus::WrFlushErr as u32, 5); // flushed by the error state
/// assert_eq!(WcStatus::RetryExcErr as u32, 12); // the peer stopped answering
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WcStatus {
    /// The operation completed.
    Success = 0,
    /// Local length error: an incoming SEND longer than the receive buffer.
    LocLenErr = 1,
    /// Local QP operation error (e.g. a local buffer the responder could not use).
    LocQpOpErr = 2,
    /// Local EE context error (RD only; never produced).
    LocEecOpErr = 3,
    /// Local protection error: an SGE the local side may not use.
    LocProtErr = 4,
    /// Flushed: the QP entered the error state before this request ran.
    WrFlushErr = 5,
    /// Memory window bind error (never produced here).
    MwBindErr = 6,
    /// The responder answered with an unexpected opcode or length.
    BadRespErr = 7,
    /// Local access error.
    LocAccessErr = 8,
    /// The responder NAKed: invalid request.
    RemInvReqErr = 9,
    /// The responder NAKed: remote access error (R_Key, bounds, rights).
    RemAccessErr = 10,
    /// The responder NAKed: remote operational error.
    RemOpErr = 11,
    /// Transport retries (timeouts, sequence NAKs) exhausted.
    RetryExcErr = 12,
    /// RNR NAK retries exhausted.
    RnrRetryExcErr = 13,
    /// Local RDD violation (RD only; never produced).
    LocRddViolErr = 14,
    /// Remote invalid RD request (never produced).
    RemInvRdReqErr = 15,
    /// Remote aborted (never produced).
    RemAbortErr = 16,
    /// Invalid EE context number (never produced).
    InvEecnErr = 17,
    /// Invalid EE context state (never produced).
    InvEecStateErr = 18,
    /// Fatal error.
    FatalErr = 19,
    /// Response timeout.
    RespTimeoutErr = 20,
    /// Anything else.
    GeneralErr = 21,
}

/// What a completion completes (ibverbs `ibv_wc_opcode`).
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{RemoteAddr, SendOp, WcOpcode};
/// // A send completion's opcode follows from the operation posted.
/// let write = SendOp::WriteImm(RemoteAddr::default(), 1);
/// assert_eq!(write.wc_opcode(), WcOpcode::RdmaWrite);
/// // The receiver of that WRITE-with-immediate sees `RecvRdmaWithImm` instead.
/// assert_ne!(WcOpcode::RecvRdmaWithImm, WcOpcode::Recv);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (any variant).
    Send,
    /// An RDMA WRITE (any variant).
    RdmaWrite,
    /// An RDMA READ.
    RdmaRead,
    /// A COMPARE & SWAP.
    CompSwap,
    /// A FETCH & ADD.
    FetchAdd,
    /// A receive consumed by a SEND.
    Recv,
    /// A receive consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm,
}

/// Which queue a completion belongs to.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::Sge;
/// use ndverbs_proto::rc::*;
/// let mut qp = RcQp::new(1, 0, QpCaps::default());
/// let mut rq = RecvQueue::new(4, 1);
/// let (init, mask) = RcConnection::new(2).init();
/// qp.modify(&init, mask)?;
/// qp.post_recv(&mut rq, RecvWr::new(9, vec![Sge::new(0x1000, 64, 0x105)]))?;
/// // ERR flushes every receive: one completion each, marked as the receive queue's.
/// qp.modify(&QpAttr { qp_state: QpState::Err, ..init }, AttrMask::STATE)?;
/// assert_eq!(qp.flush_recv(&mut rq), 1);
/// let wc = qp.poll_completion().unwrap();
/// assert_eq!((wc.wr_id, wc.queue, wc.status), (9, WcQueue::Recv, WcStatus::WrFlushErr));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcQueue {
    /// The send queue.
    Send,
    /// A receive queue (the QP's own or a shared one).
    Recv,
}

/// A work completion.
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{WcOpcode, WcQueue, WcStatus, WorkCompletion};
/// // What a receive that took a 5-byte SEND with immediate 7 looks like.
/// let wc = WorkCompletion { wr_id: 1, status: WcStatus::Success, opcode: WcOpcode::Recv,
///     queue: WcQueue::Recv, byte_len: 5, imm: Some(7), invalidated_rkey: None,
///     qpn: 0x22, src_qp: 0x11, solicited: false, grh: false };
/// match wc.status {
///     WcStatus::Success => assert_eq!((wc.byte_len, wc.imm), (5, Some(7))),
///     err => panic!("wr {} failed: {err:?}", wc.wr_id),
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WorkCompletion {
    /// The request's identifier.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed (for flushed receives: [`WcOpcode::Recv`]).
    pub opcode: WcOpcode,
    /// Send queue or receive queue.
    pub queue: WcQueue,
    /// Bytes transferred: the message length for sends, READs and atomics (8);
    /// bytes received for receives; 0 for flushed requests.
    pub byte_len: u32,
    /// Immediate data of a SEND/WRITE with immediate.
    pub imm: Option<u32>,
    /// R_Key invalidated by a SEND with invalidate.
    pub invalidated_rkey: Option<u32>,
    /// The local QP.
    pub qpn: u32,
    /// The remote QP (receives).
    pub src_qp: u32,
    /// The solicited-event bit of the incoming message (receives).
    pub solicited: bool,
    /// A UD receive: the buffer starts with the 40-byte GRH area
    /// (`IBV_WC_GRH`), and `byte_len` counts it.
    pub grh: bool,
}

impl WorkCompletion {
    /// The completion of a send request the QP refused when it took it
    /// (the post was accepted, then the QP's state or attributes changed
    /// before the request reached it): [`WcStatus::LocQpOpErr`], nothing
    /// transferred.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::rc::{RemoteAddr, SendOp, WcOpcode, WcQueue, WcStatus, WorkCompletion};
    /// let wc = WorkCompletion::refused_send(7, SendOp::Read(RemoteAddr::default()), 0x11);
    /// assert_eq!((wc.wr_id, wc.status, wc.opcode), (7, WcStatus::LocQpOpErr, WcOpcode::RdmaRead));
    /// assert_eq!((wc.queue, wc.qpn, wc.byte_len), (WcQueue::Send, 0x11, 0));
    /// ```
    pub fn refused_send(wr_id: u64, op: SendOp, qpn: u32) -> Self {
        Self::unfinished(
            wr_id,
            WcStatus::LocQpOpErr,
            op.wc_opcode(),
            WcQueue::Send,
            qpn,
            0,
        )
    }

    /// The completion of a receive the QP refused when it took it; see
    /// [`WorkCompletion::refused_send`].
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::rc::{WcOpcode, WcQueue, WcStatus, WorkCompletion};
    /// let wc = WorkCompletion::refused_recv(8, 0x11);
    /// assert_eq!((wc.status, wc.opcode, wc.queue), (WcStatus::LocQpOpErr, WcOpcode::Recv, WcQueue::Recv));
    /// ```
    pub fn refused_recv(wr_id: u64, qpn: u32) -> Self {
        Self::unfinished(
            wr_id,
            WcStatus::LocQpOpErr,
            WcOpcode::Recv,
            WcQueue::Recv,
            qpn,
            0,
        )
    }

    /// A request that ends with `status` having moved no data.
    pub(crate) fn unfinished(
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        queue: WcQueue,
        qpn: u32,
        src_qp: u32,
    ) -> Self {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            queue,
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
            qpn,
            src_qp,
            solicited: false,
            grh: false,
        }
    }
}

/// Why a post was refused. Nothing was queued.
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{PostError, QpCaps, QpState, RcQp, SendOp, SendWr};
/// // A new QP is in RESET: posting a send is refused, nothing is queued.
/// let mut qp = RcQp::new(1, 0, QpCaps::default());
/// let err = qp.post_send(SendWr::new(1, SendOp::Send, vec![])).unwrap_err();
/// assert_eq!(err, PostError::InvalidState(QpState::Reset));
/// println!("{err}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum PostError {
    /// The QP state does not accept this queue's requests (send: RTS, SQD or
    /// ERR; receive: anything but RESET).
    #[error("QP state {0:?} does not accept this request")]
    InvalidState(super::QpState),
    /// The queue holds its maximum of outstanding requests.
    #[error("queue full ({0} outstanding requests)")]
    QueueFull(u32),
    /// More SGEs than the queue was created for.
    #[error("{given} SGEs, at most {max}")]
    TooManySges {
        /// SGEs in the request.
        given: usize,
        /// The queue's limit.
        max: u32,
    },
    /// More inline data than the QP was created for.
    #[error("{len} bytes inline, at most {max}")]
    InlineTooLarge {
        /// Bytes offered.
        len: usize,
        /// The QP's limit.
        max: u32,
    },
    /// Inline data on an operation without outgoing data, or together with SGEs.
    #[error("inline data is only for SEND and WRITE, without SGEs")]
    InlineNotAllowed,
    /// The message is longer than 2^31 bytes.
    #[error("message of {0} bytes exceeds 2^31")]
    MessageTooLong(u64),
    /// An atomic whose local buffer is not exactly 8 bytes.
    #[error("atomic result buffer of {0} bytes, must be 8")]
    AtomicLength(u64),
    /// READ or atomic on a QP with `max_rd_atomic` 0.
    #[error("READ/atomic needs max_rd_atomic > 0")]
    NoRdAtomicCredits,
    /// A UD message longer than the path MTU: a datagram is one packet.
    #[error(
        "UD message of {len} bytes exceeds the path MTU of {mtu} bytes (a datagram is one packet)"
    )]
    DatagramTooLong {
        /// Bytes in the request.
        len: u64,
        /// The QP's path MTU.
        mtu: u32,
    },
}
