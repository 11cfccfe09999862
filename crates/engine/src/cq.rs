//! Completion queues: where work completions cross from the engine to the
//! application.
//!
//! The engine is the only producer and pushes into a lock-free bounded ring;
//! any number of application threads poll it. Waiting is by file descriptor:
//! an application *arms* the queue ([`CompletionQueue::arm`]) for the next
//! completion, the next solicited one, or the next error, and the engine
//! signals the queue's eventfd when such a completion arrives — once per arm,
//! as with `ibv_req_notify_cq`. The fd works with `poll`, epoll or any async
//! reactor.
//!
//! A full queue is an overflow: the completion is lost and the queue is marked
//! overflowed for good ([`CompletionQueue::overflowed`]), as hardware does; the
//! layers above report it. Resizing swaps in a larger ring; pushes and polls
//! meanwhile wait or find the queue empty for that moment.

use crate::event::EventFd;
use crate::pending::{pending, Completion, Pending};
use crossbeam_queue::ArrayQueue;
use ndverbs_proto::rc::{WcStatus, WorkCompletion};
use std::io;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, TryLockError};

/// What wakes an armed queue.
///
/// # Example
///
/// ```
/// # use ndverbs_proto::rc::{WcOpcode, WcQueue, WcStatus, WorkCompletion};
/// # fn wc(wr_id: u64, status: WcStatus) -> WorkCompletion {
/// #     WorkCompletion { wr_id, status, opcode: WcOpcode::Recv, queue: WcQueue::Recv, byte_len: 0,
/// #         imm: None, invalidated_rkey: None, qpn: 2, src_qp: 3, solicited: false, grh: false }
/// # }
/// use ndverbs_engine::cq::{CompletionQueue, NotifyOn};
/// let cq = CompletionQueue::new(8)?;
/// // Wake only for errors: a success passes by, a failure fires.
/// let errors = cq.notify(NotifyOn::Errors);
/// cq.push(wc(1, WcStatus::Success));
/// assert!(!errors.is_done());
/// cq.push(wc(2, WcStatus::RemAccessErr));
/// assert_eq!(errors.wait(), Ok(()));
/// assert_eq!(cq.len(), 2); // notification consumes nothing
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotifyOn {
    /// Any completion.
    Any,
    /// A solicited receive, or any error completion (ibverbs' solicited_only).
    Solicited,
    /// Error completions only (ND's `ND_CQ_NOTIFY_ERRORS`).
    Errors,
}

const DISARMED: u8 = 0;

fn code(n: NotifyOn) -> u8 {
    match n {
        NotifyOn::Any => 1,
        NotifyOn::Solicited => 2,
        NotifyOn::Errors => 3,
    }
}

/// Why a resize was refused.
///
/// # Example
///
/// ```
/// # use ndverbs_proto::rc::{WcOpcode, WcQueue, WcStatus, WorkCompletion};
/// # fn wc(wr_id: u64, status: WcStatus) -> WorkCompletion {
/// #     WorkCompletion { wr_id, status, opcode: WcOpcode::Recv, queue: WcQueue::Recv, byte_len: 0,
/// #         imm: None, invalidated_rkey: None, qpn: 2, src_qp: 3, solicited: false, grh: false }
/// # }
/// use ndverbs_engine::cq::{CompletionQueue, ResizeError};
/// let cq = CompletionQueue::new(4)?;
/// for id in 0..3 {
///     cq.push(wc(id, WcStatus::Success));
/// }
/// assert_eq!(cq.resize(2, 1024), Err(ResizeError::TooSmall { queued: 3, depth: 2 }));
/// assert_eq!(cq.resize(0, 1024), Err(ResizeError::OutOfRange(0)));
/// cq.resize(64, 1024).unwrap(); // growing keeps every queued completion
/// assert_eq!((cq.depth(), cq.len()), (64, 3));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResizeError {
    /// More completions are queued than the new depth holds.
    #[error("{queued} completions queued, more than the new depth {depth}")]
    TooSmall {
        /// Entries currently queued.
        queued: usize,
        /// Depth asked for.
        depth: usize,
    },
    /// Depth 0 or above the NIC's maximum.
    #[error("depth {0} is out of range")]
    OutOfRange(usize),
}

/// Why a notification request ended without a completion arriving.
///
/// # Example
///
/// ```
/// # use ndverbs_proto::rc::{WcOpcode, WcQueue, WcStatus, WorkCompletion};
/// # fn wc(wr_id: u64, status: WcStatus) -> WorkCompletion {
/// #     WorkCompletion { wr_id, status, opcode: WcOpcode::Recv, queue: WcQueue::Recv, byte_len: 0,
/// #         imm: None, invalidated_rkey: None, qpn: 2, src_qp: 3, solicited: false, grh: false }
/// # }
/// use ndverbs_engine::cq::{CompletionQueue, NotifyError, NotifyOn};
/// let cq = CompletionQueue::new(1)?;
/// // Cancelled notification requests end with `Canceled`...
/// let n = cq.notify(NotifyOn::Any);
/// cq.end_waiters(Err(NotifyError::Canceled));
/// assert_eq!(n.wait(), Err(NotifyError::Canceled));
/// // ...and a queue that lost a completion reports it.
/// cq.push(wc(1, WcStatus::Success));
/// assert!(!cq.push(wc(2, WcStatus::Success))); // full: lost
/// assert!(cq.overflowed());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotifyError {
    /// Cancelled by the application.
    #[error("canceled")]
    Canceled,
    /// The queue overflowed (completions were lost).
    #[error("completion queue overflow")]
    Overflow,
    /// The NIC was removed.
    #[error("device removed")]
    DeviceRemoved,
}

type Waiter = (NotifyOn, Completion<Result<(), NotifyError>>);

/// A completion queue shared by the engine and the application.
///
/// # Example
///
/// ```
/// # use ndverbs_proto::rc::{WcOpcode, WcQueue, WcStatus, WorkCompletion};
/// # fn wc(wr_id: u64, status: WcStatus) -> WorkCompletion {
/// #     WorkCompletion { wr_id, status, opcode: WcOpcode::Recv, queue: WcQueue::Recv, byte_len: 0,
/// #         imm: None, invalidated_rkey: None, qpn: 2, src_qp: 3, solicited: false, grh: false }
/// # }
/// use ndverbs_engine::cq::{CompletionQueue, NotifyOn};
/// use std::time::Duration;
/// let cq = CompletionQueue::new(16)?;
/// // Arm, then wait on the eventfd (also usable with poll/epoll via `fd()`).
/// cq.arm(NotifyOn::Any);
/// assert!(!cq.wait(Some(Duration::ZERO))?); // nothing yet
/// cq.push(wc(7, WcStatus::Success)); // what the engine does
/// assert!(cq.wait(Some(Duration::from_secs(1)))?);
/// assert_eq!(cq.take_events(), 1);
/// // Drain in batches.
/// let mut out = [wc(0, WcStatus::Success); 4];
/// assert_eq!(cq.poll(&mut out), 1);
/// assert_eq!(out[0].wr_id, 7);
/// assert!(cq.poll_one().is_none());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct CompletionQueue {
    /// Pending notification requests (ND's `Notify`), completed together by
    /// the next matching completion.
    waiters: Mutex<Vec<Waiter>>,
    has_waiters: AtomicBool,
    /// The ring. Pushes and polls share it (the ring itself is lock-free);
    /// a resize or a purge takes it alone: it takes every entry out and
    /// puts some back, and a poll in between could return a later
    /// completion of a queue pair before an earlier one. A poll that finds
    /// it taken finds the queue empty, as if its completions came a moment
    /// later.
    ring: RwLock<ArrayQueue<WorkCompletion>>,
    /// Completions pushed and popped so far: equal counts let a poll of an
    /// empty queue return without loading the ring (the common case of a
    /// busy-polling application). A push counts after it lands, so a poll
    /// racing it may miss it, as if it came a moment later.
    pushed: AtomicU64,
    popped: AtomicU64,
    armed: AtomicU8,
    overflowed: AtomicBool,
    events: AtomicU64,
    event: EventFd,
}

impl CompletionQueue {
    /// A queue for `depth` completions.
    pub fn new(depth: usize) -> io::Result<Self> {
        Ok(CompletionQueue {
            waiters: Mutex::new(Vec::new()),
            has_waiters: AtomicBool::new(false),
            ring: RwLock::new(ArrayQueue::new(depth.max(1))),
            pushed: AtomicU64::new(0),
            popped: AtomicU64::new(0),
            armed: AtomicU8::new(DISARMED),
            overflowed: AtomicBool::new(false),
            events: AtomicU64::new(0),
            event: EventFd::new()?,
        })
    }

    /// Capacity.
    pub fn depth(&self) -> usize {
        self.shared_ring().capacity()
    }

    /// Completions waiting to be polled.
    pub fn len(&self) -> usize {
        self.shared_ring().len()
    }

    /// True if no completion is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many completions have landed so far: a point in the queue's
    /// history that [`CompletionQueue::polled_past`] checks.
    pub fn mark(&self) -> u64 {
        self.pushed.load(Ordering::Acquire)
    }

    /// True once every completion that had landed at `mark` was taken
    /// (polled, or purged with its queue pair).
    pub fn polled_past(&self, mark: u64) -> bool {
        self.popped.load(Ordering::Acquire) >= mark
    }

    /// Takes up to `out.len()` completions; returns how many.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        if self.surely_empty() {
            return 0;
        }
        let Some(ring) = self.ring_unless_rearranged() else {
            return 0;
        };
        let mut n = 0;
        while n < out.len() {
            match ring.pop() {
                Some(wc) => {
                    out[n] = wc;
                    n += 1;
                }
                None => break,
            }
        }
        if n > 0 {
            self.popped.fetch_add(n as u64, Ordering::Release);
        }
        n
    }

    /// Takes one completion.
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        if self.surely_empty() {
            return None;
        }
        let wc = self.ring_unless_rearranged()?.pop();
        if wc.is_some() {
            self.popped.fetch_add(1, Ordering::Release);
        }
        wc
    }

    /// True when every completion pushed so far was popped.
    fn surely_empty(&self) -> bool {
        self.pushed.load(Ordering::Acquire) == self.popped.load(Ordering::Acquire)
    }

    /// The ring, shared (waits out a resize or a purge).
    fn shared_ring(&self) -> RwLockReadGuard<'_, ArrayQueue<WorkCompletion>> {
        // Only a resize or a purge writes, and neither leaves the ring
        // inconsistent if it panics.
        self.ring.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The ring, shared, unless a resize or a purge holds it now.
    fn ring_unless_rearranged(&self) -> Option<RwLockReadGuard<'_, ArrayQueue<WorkCompletion>>> {
        match self.ring.try_read() {
            Ok(ring) => Some(ring),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Engine side: queues a completion and fires an armed notification.
    /// Returns false (and marks the queue overflowed) if it was full.
    pub fn push(&self, wc: WorkCompletion) -> bool {
        let ok = self.shared_ring().push(wc).is_ok();
        // The arm is read only after the completion is in the ring, with a
        // SeqCst operation between — the count's increment (a locked
        // instruction, itself a full barrier on x86), or a fence when the
        // queue was full — that pairs with the fence in `arm`: a consumer
        // that arms and then finds the queue empty is sure to have its arm
        // seen here. (Read before the push, an arm landing in between would
        // be missed, and that consumer would sleep for good.) A completion
        // that was already there when the queue was armed may fire it too:
        // a spare wake-up.
        if ok {
            self.pushed.fetch_add(1, Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
        if !ok && !self.overflowed.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                depth = self.depth(),
                qp = wc.qpn,
                "completion queue overflow: completions are being lost (poll faster or make the CQ deeper)"
            );
        }
        let fire = match self.armed.load(Ordering::SeqCst) {
            DISARMED => false,
            1 => true,
            2 => wc.solicited || wc.status != WcStatus::Success,
            _ => wc.status != WcStatus::Success,
        };
        if (fire || !ok) && self.armed.swap(DISARMED, Ordering::AcqRel) != DISARMED {
            self.events.fetch_add(1, Ordering::Relaxed);
            self.event.signal();
        }
        if self.has_waiters.load(Ordering::SeqCst) {
            self.fire_waiters(&wc, ok);
        }
        ok
    }

    /// Completes the pending notification requests `wc` satisfies: all of
    /// them at once, as ND asks; ANY beats SOLICITED beats ERRORS.
    fn fire_waiters(&self, wc: &WorkCompletion, ok: bool) {
        let mut w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        let strongest = w
            .iter()
            .map(|(on, _)| *on)
            .fold(NotifyOn::Errors, |a, b| match (a, b) {
                (NotifyOn::Any, _) | (_, NotifyOn::Any) => NotifyOn::Any,
                (NotifyOn::Solicited, _) | (_, NotifyOn::Solicited) => NotifyOn::Solicited,
                _ => NotifyOn::Errors,
            });
        let error = wc.status != WcStatus::Success;
        let fires = match strongest {
            NotifyOn::Any => true,
            NotifyOn::Solicited => wc.solicited || error,
            NotifyOn::Errors => error,
        };
        if !ok || fires {
            let result = if ok {
                Ok(())
            } else {
                Err(NotifyError::Overflow)
            };
            for (_, c) in w.drain(..) {
                c.complete(result);
            }
            self.has_waiters.store(false, Ordering::Release);
        }
    }

    /// A notification request (ND's `Notify`): completes on the next matching
    /// completion — at once if completions are already waiting, which closes
    /// the race "poll found nothing, a completion arrived, then Notify".
    pub fn notify(&self, on: NotifyOn) -> Pending<Result<(), NotifyError>> {
        let (p, c) = pending::<Result<(), NotifyError>>(|| Err(NotifyError::Canceled));
        if self.overflowed() {
            c.complete(Err(NotifyError::Overflow));
        } else if !self.is_empty() {
            c.complete(Ok(()));
        } else {
            let mut w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
            w.push((on, c));
            self.has_waiters.store(true, Ordering::Release);
            drop(w);
            // A completion may have landed between the emptiness check and the
            // registration; it did not see the waiter, so look again (after
            // the fence that pairs with the SeqCst increment in `push`).
            fence(Ordering::SeqCst);
            if !self.is_empty() {
                self.end_waiters(Ok(()));
            }
        }
        p
    }

    /// Completes every pending notification request, in the order they were
    /// made, with `result` (cancellation, device removal).
    pub fn end_waiters(&self, result: Result<(), NotifyError>) {
        let mut w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        for (_, c) in w.drain(..) {
            c.complete(result);
        }
        self.has_waiters.store(false, Ordering::Release);
    }

    /// Arms the queue: the next matching completion signals [`Self::fd`] once.
    pub fn arm(&self, on: NotifyOn) {
        self.armed.store(code(on), Ordering::Release);
        // Pairs with the SeqCst increment (or fence) in `push`: the poll that
        // follows an arm must not be ordered before it.
        fence(Ordering::SeqCst);
    }

    /// Whether someone waits to be told of the next completion: the queue
    /// is armed or has notification requests. A poll of such a queue comes
    /// from a thread about to sleep (the arm, poll again, sleep pattern),
    /// not from one spinning on it.
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Acquire) != DISARMED || self.has_waiters.load(Ordering::Acquire)
    }

    /// Disarms without firing (a cancelled wait).
    pub fn disarm(&self) {
        self.armed.store(DISARMED, Ordering::Release);
    }

    /// True once a completion was lost to a full queue.
    pub fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire)
    }

    /// Notifications fired so far.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    /// Consumes pending notifications (like `ibv_get_cq_event` + ack); returns how many.
    pub fn take_events(&self) -> u64 {
        self.event.drain()
    }

    /// Waits for a notification (after [`Self::arm`]); true if one fired.
    pub fn wait(&self, timeout: Option<std::time::Duration>) -> io::Result<bool> {
        self.event.wait(timeout)
    }

    /// The notification file descriptor (readable after a notification fired).
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.event.fd()
    }

    /// Removes the queued completions `remove` selects; the others keep
    /// their order. Returns how many went. For a queue pair's reset (see
    /// [`Nic::modify_qp`](crate::nic::Nic::modify_qp)). A consumer polling
    /// meanwhile may find the queue empty for that moment, as if the
    /// completions it would have found came a moment later.
    ///
    /// ```
    /// # use ndverbs_proto::rc::{WcOpcode, WcQueue, WcStatus, WorkCompletion};
    /// # fn wc(wr_id: u64, qpn: u32) -> WorkCompletion {
    /// #     WorkCompletion { wr_id, status: WcStatus::WrFlushErr, opcode: WcOpcode::Recv,
    /// #         queue: WcQueue::Recv, byte_len: 0, imm: None, invalidated_rkey: None, qpn,
    /// #         src_qp: 0, solicited: false, grh: false }
    /// # }
    /// use ndverbs_engine::cq::CompletionQueue;
    /// let cq = CompletionQueue::new(8)?;
    /// for (id, qpn) in [(1, 10), (2, 20), (3, 10), (4, 20)] {
    ///     cq.push(wc(id, qpn));
    /// }
    /// assert_eq!(cq.purge(|w| w.qpn == 10), 2);
    /// let ids: Vec<u64> = std::iter::from_fn(|| cq.poll_one()).map(|w| w.wr_id).collect();
    /// assert_eq!(ids, [2, 4]);
    /// assert!(cq.is_empty() && cq.poll_one().is_none());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn purge(&self, mut remove: impl FnMut(&WorkCompletion) -> bool) -> usize {
        let ring = self.ring.write().unwrap_or_else(|e| e.into_inner());
        let mut kept = Vec::new();
        let mut taken = 0u64;
        while let Some(wc) = ring.pop() {
            taken += 1;
            if !remove(&wc) {
                kept.push(wc);
            }
        }
        if taken == 0 {
            return 0;
        }
        let removed = taken as usize - kept.len();
        self.popped.fetch_add(taken, Ordering::Release);
        for wc in kept {
            // Room for each: they came out of this ring, and nothing else
            // pushes while it is held.
            let _ = ring.push(wc);
            self.pushed.fetch_add(1, Ordering::Release);
        }
        removed
    }

    /// Changes the capacity; never loses a completion.
    pub fn resize(&self, depth: usize, max: usize) -> Result<(), ResizeError> {
        if depth == 0 || depth > max {
            return Err(ResizeError::OutOfRange(depth));
        }
        let mut ring = self.ring.write().unwrap_or_else(|e| e.into_inner());
        if ring.len() > depth {
            return Err(ResizeError::TooSmall {
                queued: ring.len(),
                depth,
            });
        }
        let new = ArrayQueue::new(depth);
        while let Some(wc) = ring.pop() {
            let _ = new.push(wc);
        }
        *ring = new;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndverbs_proto::rc::{WcOpcode, WcQueue};
    use std::sync::Arc;
    use std::time::Duration;

    fn wc(id: u64, status: WcStatus, solicited: bool) -> WorkCompletion {
        WorkCompletion {
            wr_id: id,
            status,
            opcode: WcOpcode::Send,
            queue: WcQueue::Send,
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
            qpn: 2,
            src_qp: 0,
            solicited,
            grh: false,
        }
    }

    #[test]
    fn poll_in_order_and_overflow() {
        let cq = CompletionQueue::new(2).unwrap();
        assert!(cq.push(wc(1, WcStatus::Success, false)));
        assert!(cq.push(wc(2, WcStatus::Success, false)));
        assert!(!cq.push(wc(3, WcStatus::Success, false)));
        assert!(cq.overflowed());
        assert_eq!(cq.poll_one().unwrap().wr_id, 1);
        assert_eq!(cq.poll_one().unwrap().wr_id, 2);
        assert!(cq.poll_one().is_none());
    }

    #[test]
    fn notification_modes_fire_once_per_arm() {
        let cq = CompletionQueue::new(16).unwrap();
        cq.push(wc(1, WcStatus::Success, false));
        assert!(
            !cq.wait(Some(Duration::from_millis(1))).unwrap(),
            "not armed"
        );
        cq.arm(NotifyOn::Solicited);
        cq.push(wc(2, WcStatus::Success, false));
        assert_eq!(cq.take_events(), 0);
        cq.push(wc(3, WcStatus::Success, true));
        assert!(cq.wait(Some(Duration::from_secs(1))).unwrap());
        assert_eq!(cq.take_events(), 1);
        cq.push(wc(4, WcStatus::Success, true));
        assert_eq!(cq.take_events(), 0, "fires once per arm");
        cq.arm(NotifyOn::Errors);
        cq.push(wc(5, WcStatus::Success, true));
        assert_eq!(cq.take_events(), 0);
        cq.push(wc(6, WcStatus::WrFlushErr, false));
        assert_eq!(cq.take_events(), 1);
        cq.arm(NotifyOn::Any);
        cq.push(wc(7, WcStatus::Success, false));
        assert_eq!(cq.take_events(), 1);
        assert_eq!(cq.events(), 3);
    }

    #[test]
    fn nd_style_notify_requests() {
        let cq = CompletionQueue::new(16).unwrap();
        // Two requests, one completion: both complete.
        let a = cq.notify(NotifyOn::Any);
        let b = cq.notify(NotifyOn::Solicited);
        assert!(!a.is_done() && !b.is_done());
        cq.push(wc(1, WcStatus::Success, false));
        assert_eq!((a.try_take(), b.try_take()), (Some(Ok(())), Some(Ok(()))));
        // Entries already waiting: complete at once.
        assert_eq!(cq.notify(NotifyOn::Errors).try_take(), Some(Ok(())));
        cq.poll_one();
        // ERRORS ignores successes.
        let e = cq.notify(NotifyOn::Errors);
        cq.push(wc(2, WcStatus::Success, false));
        cq.poll_one();
        assert!(!e.is_done());
        cq.push(wc(3, WcStatus::WrFlushErr, false));
        assert_eq!(e.try_take(), Some(Ok(())));
        cq.poll_one();
        // Cancel completes them in order with Canceled.
        let x = cq.notify(NotifyOn::Any);
        let y = cq.notify(NotifyOn::Any);
        cq.end_waiters(Err(NotifyError::Canceled));
        assert_eq!(
            (x.try_take(), y.try_take()),
            (
                Some(Err(NotifyError::Canceled)),
                Some(Err(NotifyError::Canceled))
            )
        );
    }

    #[test]
    fn resize_keeps_entries() {
        let cq = CompletionQueue::new(4).unwrap();
        for i in 0..3 {
            cq.push(wc(i, WcStatus::Success, false));
        }
        assert_eq!(
            cq.resize(2, 100),
            Err(ResizeError::TooSmall {
                queued: 3,
                depth: 2
            })
        );
        cq.resize(64, 100).unwrap();
        assert_eq!(cq.depth(), 64);
        let mut out = [wc(0, WcStatus::Success, false); 8];
        assert_eq!(cq.poll(&mut out), 3);
        assert_eq!(
            out[..3].iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert_eq!(cq.resize(101, 100), Err(ResizeError::OutOfRange(101)));
    }

    #[test]
    fn concurrent_producer_and_consumers_lose_nothing() {
        let cq = Arc::new(CompletionQueue::new(1024).unwrap());
        let n = 100_000u64;
        let p = {
            let cq = cq.clone();
            std::thread::spawn(move || {
                for i in 0..n {
                    assert!(cq.push(wc(i, WcStatus::Success, false)), "overflow");
                    while cq.len() > 900 {
                        std::thread::yield_now();
                    }
                    if i == n / 2 {
                        cq.resize(4096, 1 << 20).unwrap();
                    }
                }
            })
        };
        let mut seen = 0u64;
        let mut sum = 0u64;
        while seen < n {
            if let Some(w) = cq.poll_one() {
                seen += 1;
                sum += w.wr_id;
            }
        }
        p.join().unwrap();
        assert_eq!(sum, n * (n - 1) / 2);
    }

    /// Purges and resizes take every entry out of the ring and put the
    /// others back; consumers polling meanwhile (two here) must still see
    /// each queue pair's completions in order, and lose none.
    #[test]
    fn purges_and_resizes_keep_each_queue_pairs_order_for_concurrent_consumers() {
        let cq = Arc::new(CompletionQueue::new(512).unwrap());
        let n = 40_000u64;
        let done = Arc::new(AtomicBool::new(false));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (cq, done) = (cq.clone(), done.clone());
                std::thread::spawn(move || {
                    // Per consumer, each QP's wr_ids must rise.
                    let mut last = [None::<u64>; 3];
                    let mut taken = 0u64;
                    while !done.load(Ordering::Acquire) || !cq.is_empty() {
                        if let Some(w) = cq.poll_one() {
                            let q = (w.qpn - 10) as usize / 10;
                            assert!(
                                last[q].is_none_or(|l| l < w.wr_id),
                                "qp {} out of order",
                                w.qpn
                            );
                            last[q] = Some(w.wr_id);
                            taken += 1;
                        }
                    }
                    taken
                })
            })
            .collect();
        let mut pushed = 0u64;
        let mut purged = 0u64;
        for i in 0..n {
            let qpn = [10, 20, 30][(i % 3) as usize];
            let mut w = wc(i, WcStatus::Success, false);
            w.qpn = qpn;
            while cq.len() > 400 {
                if consumers.iter().any(|c| c.is_finished()) {
                    // A consumer failed: join it for its message.
                    done.store(true, Ordering::Release);
                    for c in consumers {
                        c.join().unwrap();
                    }
                    unreachable!("a consumer ended before the producer");
                }
                std::thread::yield_now();
            }
            assert!(cq.push(w), "overflow");
            pushed += 1;
            if i % 97 == 0 {
                purged += cq.purge(|w| w.qpn == 30) as u64;
            }
            if i % 1009 == 0 {
                cq.resize(if (i / 1009) % 2 == 0 { 1024 } else { 512 }, 1 << 20)
                    .unwrap();
            }
        }
        purged += cq.purge(|w| w.qpn == 30) as u64;
        done.store(true, Ordering::Release);
        let taken: u64 = consumers.into_iter().map(|c| c.join().unwrap()).sum();
        // QP 30's completions were either purged or taken; every
        // completion is accounted for once.
        assert_eq!(taken + purged, pushed);
    }

    /// Arm, find the queue empty, sleep on the descriptor: a completion
    /// pushed while the queue is being armed must fire it or be found (an
    /// arm read before the completion is queued misses an arm landing in
    /// between). The two threads meet at a barrier each round to race arm
    /// against push; a lost wake-up shows as a wait that never ends, caught
    /// by the generous timeout.
    #[test]
    fn a_push_racing_the_arm_fires_or_is_found() {
        let cq = Arc::new(CompletionQueue::new(4).unwrap());
        let rounds = 20_000;
        let go = Arc::new(std::sync::Barrier::new(2));
        let engine = {
            let (cq, go) = (cq.clone(), go.clone());
            std::thread::spawn(move || {
                for i in 0..rounds {
                    go.wait();
                    assert!(cq.push(wc(i, WcStatus::Success, false)));
                }
            })
        };
        for i in 0..rounds {
            go.wait();
            cq.arm(NotifyOn::Any);
            let got = match cq.poll_one() {
                Some(w) => w,
                // (A notification may be the previous round's, fired after
                // its completion was found: look again after each.)
                None => loop {
                    assert!(
                        cq.wait(Some(Duration::from_secs(10))).unwrap(),
                        "round {i}: the completion neither fired the armed queue nor was found"
                    );
                    cq.take_events();
                    if let Some(w) = cq.poll_one() {
                        break w;
                    }
                },
            };
            assert_eq!(got.wr_id, i);
            cq.take_events();
            cq.disarm();
        }
        engine.join().unwrap();
    }
}
