//! Checking a work request against the queue it is posted to.
//!
//! The engine checks a post on the application's thread, to refuse it at
//! once (as `ibv_post_send` returns `EINVAL`) instead of as a completion;
//! [`RcQp`](super::RcQp) checks it again when it takes the request, because
//! the state may have changed in between. Both call these functions, so the
//! two checks cannot drift apart. What depends on the queue's contents (is
//! it full?) or on attributes that `modify` changes (`max_rd_atomic`) stays
//! with the queue.
//!
//! Order: the state, the number of SGEs, inline data (allowed here, then its
//! size), the message length, an atomic's length — the first failure is the
//! error.

use super::{PostError, QpCaps, QpState, RecvWr, SendOp, SendWr};
use crate::mem::sgl_len;

/// Longest message: 2^31 bytes (IBTA).
const MAX_MESSAGE: u64 = 1 << 31;

/// Checks a send request against the send queue's limits `caps` and the QP's
/// `state` (RTS and SQD queue it, ERR flushes it). Returns the message
/// length.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::Sge;
/// use ndverbs_proto::rc::{validate_send, PostError, QpCaps, QpState, RemoteAddr, SendOp, SendWr};
/// let caps = QpCaps { max_send_sge: 2, max_inline_data: 64, ..QpCaps::default() };
/// let wr = SendWr::new(1, SendOp::Send, vec![Sge::new(0x1000, 100, 5), Sge::new(0x2000, 28, 5)]);
/// assert_eq!(validate_send(&caps, QpState::Rts, &wr), Ok(128));
/// assert_eq!(validate_send(&caps, QpState::Init, &wr), Err(PostError::InvalidState(QpState::Init)));
/// // Inline data goes only with SEND and WRITE.
/// let read = SendWr::new_inline(2, SendOp::Read(RemoteAddr::default()), vec![0; 8]);
/// assert_eq!(validate_send(&caps, QpState::Rts, &read), Err(PostError::InlineNotAllowed));
/// ```
pub fn validate_send(caps: &QpCaps, state: QpState, wr: &SendWr) -> Result<u32, PostError> {
    if !matches!(state, QpState::Rts | QpState::Sqd | QpState::Err) {
        return Err(PostError::InvalidState(state));
    }
    if wr.sgl.len() > caps.max_send_sge as usize {
        return Err(PostError::TooManySges {
            given: wr.sgl.len(),
            max: caps.max_send_sge,
        });
    }
    let len = match &wr.inline {
        Some(data) => {
            let carries_data = matches!(
                wr.op,
                SendOp::Send
                    | SendOp::SendImm(_)
                    | SendOp::SendInv(_)
                    | SendOp::Write(_)
                    | SendOp::WriteImm(..)
            );
            if !carries_data || !wr.sgl.is_empty() {
                return Err(PostError::InlineNotAllowed);
            }
            if data.len() > caps.max_inline_data as usize {
                return Err(PostError::InlineTooLarge {
                    len: data.len(),
                    max: caps.max_inline_data,
                });
            }
            data.len() as u64
        }
        None => sgl_len(&wr.sgl),
    };
    if len > MAX_MESSAGE {
        return Err(PostError::MessageTooLong(len));
    }
    if wr.op.is_atomic() && len != 8 {
        return Err(PostError::AtomicLength(len));
    }
    Ok(len as u32)
}

/// Checks a receive against a receive queue holding at most `max_sge` SGEs
/// per request. `state` is the owning QP's state for its own receive queue
/// (anything but RESET accepts; ERR flushes), `None` for a shared receive
/// queue, which takes receives whatever its QPs' states. Returns the
/// buffer's length.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::Sge;
/// use ndverbs_proto::rc::{validate_recv, PostError, QpState, RecvWr};
/// let wr = RecvWr::new(1, vec![Sge::new(0x1000, 64, 5)]);
/// assert_eq!(validate_recv(1, Some(QpState::Init), &wr), Ok(64));
/// assert_eq!(validate_recv(1, Some(QpState::Reset), &wr), Err(PostError::InvalidState(QpState::Reset)));
/// assert_eq!(validate_recv(0, None, &wr), Err(PostError::TooManySges { given: 1, max: 0 }));
/// ```
pub fn validate_recv(max_sge: u32, state: Option<QpState>, wr: &RecvWr) -> Result<u32, PostError> {
    if let Some(QpState::Reset) = state {
        return Err(PostError::InvalidState(QpState::Reset));
    }
    if wr.sgl.len() > max_sge as usize {
        return Err(PostError::TooManySges {
            given: wr.sgl.len(),
            max: max_sge,
        });
    }
    let len = sgl_len(&wr.sgl);
    if len > MAX_MESSAGE {
        return Err(PostError::MessageTooLong(len));
    }
    Ok(len as u32)
}
