//! The send queue: work queue elements (WQEs) shared by requester and completer.
//!
//! ```text
//!   front (oldest)                                           back (newest)
//!   [ in flight, awaiting ACK/response ... | requester is here | not yet sent ]
//!     ▲ completer retires from here          ▲ Requester::idx
//! ```
//!
//! A WQE gets its PSN range when the requester first sends it and keeps it
//! through every retransmission: `first_psn ..= last_psn`, one PSN per packet
//! for SEND/WRITE, `max(1, ceil(len / mtu))` for a READ (one per response
//! packet), one for an atomic. The completer retires WQEs strictly from the
//! front, so completions leave in posting order.
//!
//! A READ that is re-requested after a loss keeps its PSN range but is asked
//! for again in chunks (see `requester.rs`): `read_done` counts the bytes that
//! arrived, `read_req_end` marks where the chunk the responder is answering
//! ends.

use super::wr::{SendOp, SendWr, WcQueue, WcStatus, WorkCompletion};
use super::{Counters, Params};
use std::collections::VecDeque;

/// What a WQE does on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Send,
    Write,
    Read,
    Atomic,
}

/// One posted send request and its transmission state.
#[derive(Debug, Clone)]
pub(crate) struct Wqe {
    pub wr: SendWr,
    pub kind: Kind,
    /// Message length in bytes (8 for atomics, whose payload is the result).
    pub len: u32,
    /// PSN range, valid once `assigned`.
    pub first_psn: u32,
    pub last_psn: u32,
    pub assigned: bool,
    /// READ: response bytes received in order.
    pub read_done: u32,
    /// READ: the end (byte offset) of the request the responder is answering
    /// in this pass; `None` until one is sent and again after every rewind.
    pub read_req_end: Option<u32>,
    /// READ: it was re-requested in window-sized chunks, so a LAST response
    /// may end a chunk before the end of the message.
    pub read_chunked: bool,
    /// READ: where the re-requests sent so far end, those beyond `read_done`.
    /// A later request from inside one of them never reaches past its end.
    pub read_bounds: Vec<u32>,
    /// Holds one of the `max_rd_atomic` slots.
    pub holds_rd_atomic: bool,
    /// Set when this WQE failed; it completes with this status on flush.
    pub error: Option<WcStatus>,
}

impl Wqe {
    pub fn new(wr: SendWr, len: u32) -> Self {
        let kind = match wr.op {
            SendOp::Send | SendOp::SendImm(_) | SendOp::SendInv(_) => Kind::Send,
            SendOp::Write(_) | SendOp::WriteImm(..) => Kind::Write,
            SendOp::Read(_) => Kind::Read,
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => Kind::Atomic,
        };
        Wqe {
            wr,
            kind,
            len,
            first_psn: 0,
            last_psn: 0,
            assigned: false,
            read_done: 0,
            read_req_end: None,
            read_chunked: false,
            read_bounds: Vec::new(),
            holds_rd_atomic: false,
            error: None,
        }
    }

    pub fn is_read_or_atomic(&self) -> bool {
        matches!(self.kind, Kind::Read | Kind::Atomic)
    }

    /// PSNs the message occupies.
    pub fn npkts(&self, mtu: u32) -> u32 {
        match self.kind {
            Kind::Atomic => 1,
            _ => npkts(self.len, mtu),
        }
    }
}

/// `max(1, ceil(len / mtu))`.
pub(crate) fn npkts(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

/// The send queue.
#[derive(Debug, Clone, Default)]
pub(crate) struct SendQueue {
    pub wqes: VecDeque<Wqe>,
}

/// Turns a finished send WQE into a completion (if one is due).
pub(crate) fn complete_send(
    wqe: &Wqe,
    status: WcStatus,
    p: &Params,
    cq: &mut VecDeque<WorkCompletion>,
    counters: &mut Counters,
) {
    if status == WcStatus::Success && wqe.kind == Kind::Send {
        counters.rdma_sends += 1;
    }
    if status != WcStatus::Success || wqe.wr.signaled || p.sq_sig_all {
        cq.push_back(WorkCompletion {
            wr_id: wqe.wr.wr_id,
            status,
            opcode: wqe.wr.op.wc_opcode(),
            queue: WcQueue::Send,
            byte_len: if status == WcStatus::WrFlushErr {
                0
            } else {
                wqe.len
            },
            imm: None,
            invalidated_rkey: None,
            qpn: p.qpn,
            src_qp: p.dest_qpn,
            solicited: false,
            grh: false,
        });
    }
}
