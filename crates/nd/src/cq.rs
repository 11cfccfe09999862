//! Completion queues: `GetResults`, `Notify`, `Resize`.
//!
//! A completion carries the request's context (what the application passed
//! with it), the QP's context, the request type and an ND status translated
//! from the verbs work-completion status (networkdirect.md §4.2):
//!
//! | verbs | ND |
//! |---|---|
//! | success | `ND_SUCCESS` |
//! | flushed | `ND_CANCELED` (`ND_DEVICE_REMOVED` after removal) |
//! | retry / RNR retry exceeded | `ND_IO_TIMEOUT` |
//! | receive too small | `ND_DATA_OVERRUN` (ndmval's expectation) |
//! | local protection/access/QP-op, bind, remote access | `ND_ACCESS_VIOLATION` |
//! | remote invalid request (e.g. send larger than the receive) | `STATUS_DATA_ERROR` (0xC000003E, ndmval's sender check) |
//! | remote operation, bad response | `ND_REMOTE_ERROR` |
//! | anything else | `ND_INTERNAL_ERROR` |
//!
//! A request's type and context travel in its verbs work-request id: the top
//! three bits hold the type, the rest the context, so contexts must fit in
//! 61 bits.

use crate::adapter::{nd_err, Adapter};
use crate::pending::NdPending;
use crate::status::{NdError, NdResult, NdStatus};
use ndverbs_verbs::{Cq, NotifyError, NotifyOn, WcOpcode, WcStatus};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// `ND2_REQUEST_TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestType {
    /// A receive.
    Receive = 0,
    /// A send.
    Send = 1,
    /// A memory window bind.
    Bind = 2,
    /// A memory window invalidation.
    Invalidate = 3,
    /// An RDMA READ.
    Read = 4,
    /// An RDMA WRITE.
    Write = 5,
}

impl RequestType {
    fn from_code(c: u64) -> Option<Self> {
        Some(match c {
            0 => RequestType::Receive,
            1 => RequestType::Send,
            2 => RequestType::Bind,
            3 => RequestType::Invalidate,
            4 => RequestType::Read,
            5 => RequestType::Write,
            _ => return None,
        })
    }
}

const TYPE_SHIFT: u32 = 61;
/// Largest request context (61 bits).
pub const MAX_CONTEXT: u64 = (1 << TYPE_SHIFT) - 1;

/// Packs a request type and context into a work-request id.
pub(crate) fn wr_id(t: RequestType, context: u64) -> NdResult<u64> {
    if context > MAX_CONTEXT {
        return Err(NdError::new(
            NdStatus::INVALID_PARAMETER_1,
            "request context must fit in 61 bits",
        ));
    }
    Ok(((t as u64) << TYPE_SHIFT) | context)
}

/// `ND2_RESULT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdResultEntry {
    /// Outcome.
    pub status: NdStatus,
    /// Bytes received (meaningful for receives).
    pub bytes_transferred: u32,
    /// The QP's context.
    pub queue_pair_context: u64,
    /// The request's context.
    pub request_context: u64,
    /// The request type.
    pub request_type: RequestType,
}

/// `CQ notify` types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyType {
    /// `ND_CQ_NOTIFY_ERRORS` (0).
    Errors,
    /// `ND_CQ_NOTIFY_ANY` (1).
    Any,
    /// `ND_CQ_NOTIFY_SOLICITED` (2).
    Solicited,
}

/// A completion queue.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) cq: Cq,
    pub(crate) adapter: Adapter,
    /// Contexts of the QPs that complete here, by QPN.
    pub(crate) qp_contexts: Arc<Mutex<HashMap<u32, u64>>>,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("depth", &self.cq.depth())
            .finish()
    }
}

pub(crate) fn nd_status(s: WcStatus, opcode: WcOpcode, removed: bool) -> NdStatus {
    match s {
        WcStatus::Success => NdStatus::SUCCESS,
        WcStatus::WrFlushErr if removed => NdStatus::DEVICE_REMOVED,
        WcStatus::WrFlushErr => NdStatus::CANCELED,
        WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr => NdStatus::IO_TIMEOUT,
        WcStatus::LocLenErr if opcode == WcOpcode::Recv => NdStatus::DATA_OVERRUN,
        WcStatus::LocLenErr => NdStatus::DATA_OVERRUN,
        WcStatus::LocProtErr
        | WcStatus::LocAccessErr
        | WcStatus::LocQpOpErr
        | WcStatus::MwBindErr
        | WcStatus::RemAccessErr => NdStatus::ACCESS_VIOLATION,
        WcStatus::RemInvReqErr => NdStatus::DATA_ERROR,
        WcStatus::RemOpErr | WcStatus::BadRespErr => NdStatus::REMOTE_ERROR,
        _ => NdStatus::INTERNAL_ERROR,
    }
}

impl CompletionQueue {
    pub(crate) fn create(adapter: &Adapter, depth: u32) -> NdResult<Self> {
        if depth == 0 {
            return Err(NdError::new(NdStatus::INVALID_PARAMETER, "CQ depth 0"));
        }
        let cq = adapter.inner.dev.create_cq(depth).map_err(|e| {
            let mut err = nd_err(e);
            if err.status == NdStatus::INVALID_PARAMETER {
                err.status = NdStatus::INSUFFICIENT_RESOURCES;
            }
            err
        })?;
        Ok(CompletionQueue {
            cq,
            adapter: adapter.clone(),
            qp_contexts: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    /// `GetResults`: takes up to `out.len()` completions; never blocks.
    pub fn get_results(&self, out: &mut [NdResultEntry]) -> usize {
        let removed = self.adapter.is_removed();
        let ctx = self.qp_contexts.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        while n < out.len() {
            let Some(wc) = self.cq.poll_one() else { break };
            let t = RequestType::from_code(wc.wr_id >> TYPE_SHIFT).unwrap_or(RequestType::Send);
            out[n] = NdResultEntry {
                status: nd_status(wc.status, wc.opcode, removed),
                bytes_transferred: if t == RequestType::Receive {
                    wc.byte_len
                } else {
                    0
                },
                queue_pair_context: ctx.get(&wc.qpn).copied().unwrap_or(0),
                request_context: wc.wr_id & MAX_CONTEXT,
                request_type: t,
            };
            n += 1;
        }
        n
    }

    /// `Notify`: completes on the next completion of the kind asked for (at
    /// once if completions are waiting); every Notify pending at that moment
    /// completes together. `ND_BUFFER_OVERFLOW` after an overflow.
    pub fn notify(&self, t: NotifyType) -> NdPending<()> {
        if self.adapter.is_removed() {
            return NdPending::ready(Err(NdError::new(
                NdStatus::DEVICE_REMOVED,
                "adapter removed",
            )));
        }
        let on = match t {
            NotifyType::Any => NotifyOn::Any,
            NotifyType::Solicited => NotifyOn::Solicited,
            NotifyType::Errors => NotifyOn::Errors,
        };
        NdPending::map(self.cq.notify(on), |r| match r {
            Ok(()) => Ok(()),
            Err(NotifyError::Canceled) => Err(NdError::new(NdStatus::CANCELED, "notify canceled")),
            Err(NotifyError::Overflow) => Err(NdError::new(
                NdStatus::BUFFER_OVERFLOW,
                "completion queue overflow",
            )),
            Err(NotifyError::DeviceRemoved) => {
                Err(NdError::new(NdStatus::DEVICE_REMOVED, "adapter removed"))
            }
        })
    }

    /// `CancelOverlappedRequests`: pending Notify requests complete
    /// `ND_CANCELED`, in the order they were made.
    pub fn cancel_overlapped_requests(&self) {
        self.cq.cancel_notifies();
    }

    /// `Resize`: never loses completions; below the current fill it fails with
    /// `ND_BUFFER_OVERFLOW` and leaves the queue unchanged.
    pub fn resize(&self, depth: u32) -> NdResult<()> {
        self.cq.resize(depth).map_err(|e| match e {
            ndverbs_verbs::ResizeError::TooSmall { .. } => {
                NdError::new(NdStatus::BUFFER_OVERFLOW, e.to_string())
            }
            ndverbs_verbs::ResizeError::OutOfRange(_) => {
                NdError::new(NdStatus::INVALID_PARAMETER, e.to_string())
            }
        })
    }

    /// Capacity.
    pub fn depth(&self) -> usize {
        self.cq.depth()
    }
}
