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

use crate::mem::Sge;

/// Remote buffer of an RDMA WRITE or READ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RemoteAddr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
}

/// The operation of a send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Local buffers: the data to send (SEND, WRITE) or the destination (READ,
    /// atomics: 8 bytes).
    pub sgl: Vec<Sge>,
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
    /// A signaled request with no flags.
    pub fn new(wr_id: u64, op: SendOp, sgl: Vec<Sge>) -> Self {
        SendWr {
            wr_id,
            op,
            sgl,
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
            ..SendWr::new(wr_id, op, Vec::new())
        }
    }
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Where incoming SEND data lands.
    pub sgl: Vec<Sge>,
}

impl RecvWr {
    /// A receive.
    pub fn new(wr_id: u64, sgl: Vec<Sge>) -> Self {
        RecvWr { wr_id, sgl }
    }
}

/// Completion status (ibverbs `ibv_wc_status`, same order and values).
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcQueue {
    /// The send queue.
    Send,
    /// A receive queue (the QP's own or a shared one).
    Recv,
}

/// A work completion.
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
}

/// Why a post was refused. Nothing was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
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
}
