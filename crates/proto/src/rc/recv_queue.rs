//! The receive queue: posted [`RecvWr`]s waiting for incoming SENDs.
//!
//! It is a struct of its own, not part of the QP, so the same code serves a
//! QP's private receive queue and a shared receive queue (SRQ): the engine
//! passes whichever the QP uses to [`RcQp::handle_packet`](super::RcQp::handle_packet).
//! The responder takes the oldest receive when a SEND (or an RDMA WRITE with
//! immediate) begins; with none posted it answers RNR NAK and the requester
//! retries later.

use super::post::validate_recv;
use super::wr::{PostError, RecvWr};
use std::collections::VecDeque;

/// A FIFO of posted receives.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::Sge;
/// use ndverbs_proto::rc::{PostError, RecvQueue, RecvWr};
/// let mut rq = RecvQueue::new(2, 1);
/// rq.post(RecvWr::new(1, vec![Sge::new(0x1000, 256, 0x105)]))?;
/// rq.post(RecvWr::new(2, vec![Sge::new(0x1100, 256, 0x105)]))?;
/// assert_eq!((rq.len(), rq.capacity()), (2, 2));
/// // Full: the third is refused (the responder takes them oldest first).
/// assert_eq!(rq.post(RecvWr::new(3, vec![])), Err(PostError::QueueFull(2)));
/// # Ok::<(), PostError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct RecvQueue {
    wrs: VecDeque<RecvWr>,
    max_wr: u32,
    max_sge: u32,
}

impl RecvQueue {
    /// A queue holding at most `max_wr` receives of at most `max_sge` SGEs.
    pub fn new(max_wr: u32, max_sge: u32) -> Self {
        RecvQueue {
            // Grown as receives are posted: an idle QP holds none.
            wrs: VecDeque::new(),
            max_wr,
            max_sge,
        }
    }

    /// Posts a receive (checked by [`validate_recv`](super::validate_recv)
    /// as a shared receive queue's: in any QP state).
    pub fn post(&mut self, wr: RecvWr) -> Result<(), PostError> {
        validate_recv(self.max_sge, None, &wr)?;
        self.push(wr)
    }

    /// Queues a checked receive, if there is room.
    pub(crate) fn push(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if self.wrs.len() >= self.max_wr as usize {
            return Err(PostError::QueueFull(self.max_wr));
        }
        self.wrs.push_back(wr);
        Ok(())
    }

    /// The most SGEs a receive may have.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// Receives waiting.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// True if no receive is posted.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// The most receives the queue holds.
    pub fn capacity(&self) -> u32 {
        self.max_wr
    }

    /// Changes the most receives the queue holds (a shared receive queue's
    /// resize); receives already posted beyond it stay, and refuse new ones
    /// until they are taken.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::rc::{RecvQueue, RecvWr};
    /// let mut rq = RecvQueue::new(1, 1);
    /// rq.post(RecvWr::new(1, vec![]))?;
    /// rq.set_capacity(2);
    /// rq.post(RecvWr::new(2, vec![]))?;
    /// assert_eq!((rq.len(), rq.capacity()), (2, 2));
    /// # Ok::<(), ndverbs_proto::rc::PostError>(())
    /// ```
    pub fn set_capacity(&mut self, max_wr: u32) {
        self.max_wr = max_wr;
    }

    /// Takes the oldest receive.
    pub(crate) fn pop(&mut self) -> Option<RecvWr> {
        self.wrs.pop_front()
    }
}
