//! Completion queues: `GetResults`, `Notify`, `Resize`.
//!
//! A completion carries the request's context (what the application passed
//! with it), the QP's context, the request type and an ND status translated
//! from the verbs work-completion status (networkdirect.md §4.2):
//!
//! | verbs | ND |
//! |---|---|
//! | success | `ND_SUCCESS` |
//! | flushed | `ND_CANCELED` (`ND_DEVICE_REMOVED` if the adapter's removal flushed it) |
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
use ndverbs_verbs::{Cq, NotifyOn, WcOpcode, WcStatus};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// `ND2_REQUEST_TYPE`, with ND's values: ND numbers the types in this
/// order, from 0.
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
/// let server = Provider.open_adapter("127.91.6.1".parse().unwrap())?;
/// let client = Provider.open_adapter("127.91.6.2".parse().unwrap())?;
/// let (scq, ccq) = (server.create_completion_queue(8)?, client.create_completion_queue(8)?);
/// let sqp = server.create_queue_pair(&scq, &scq, 0, QueuePairSizes::new(4, 1))?;
/// let cqp = client.create_queue_pair(&ccq, &ccq, 0, QueuePairSizes::new(4, 1))?;
/// let target = server.create_memory_region()?;
/// target.register(64, MrFlags::ALLOW_REMOTE_WRITE | MrFlags::ALLOW_REMOTE_READ).wait()?;
/// let local = client.create_memory_region()?;
/// local.register(64, MrFlags::ALLOW_LOCAL_WRITE).wait()?;
/// local.write(0, b"ping")?;
/// # let _connectors = connect((&server, &sqp), (&client, &cqp))?;
/// // An RDMA WRITE of 4 bytes into the server's region, then a READ of them back.
/// let out = [NdSge::new(local.address(), 4, local.local_token())];
/// cqp.write(1, &out, target.address(), target.remote_token(), OpFlags::empty())?;
/// let back = [NdSge::new(local.address() + 8, 4, local.local_token())];
/// cqp.read(2, &back, target.address(), target.remote_token(), OpFlags::empty())?;
/// // Each completion says which kind of request it ends.
/// let (w, r) = (ccq.wait_result()?, ccq.wait_result()?);
/// assert_eq!((w.request_type, w.request_context), (RequestType::Write, 1));
/// assert_eq!((r.request_type, r.request_context), (RequestType::Read, 2));
/// let mut got = [0u8; 4];
/// local.read(8, &mut got)?;
/// assert_eq!(&got, b"ping");
/// # Ok::<(), NdError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestType {
    /// A receive.
    Receive,
    /// A send.
    Send,
    /// A memory window bind.
    Bind,
    /// A memory window invalidation.
    Invalidate,
    /// An RDMA READ.
    Read,
    /// An RDMA WRITE.
    Write,
}

impl RequestType {
    /// Every type, in ND's order: a type's value is its index.
    const ALL: [RequestType; 6] = [
        RequestType::Receive,
        RequestType::Send,
        RequestType::Bind,
        RequestType::Invalidate,
        RequestType::Read,
        RequestType::Write,
    ];

    fn from_code(c: u64) -> Option<Self> {
        Self::ALL.get(usize::try_from(c).ok()?).copied()
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
/// let server = Provider.open_adapter("127.91.5.1".parse().unwrap())?;
/// let client = Provider.open_adapter("127.91.5.2".parse().unwrap())?;
/// let (scq, ccq) = (server.create_completion_queue(8)?, client.create_completion_queue(8)?);
/// // Contexts: 100 for the server's QP, 7 for its receive.
/// let sqp = server.create_queue_pair(&scq, &scq, 100, QueuePairSizes::new(4, 1))?;
/// let cqp = client.create_queue_pair(&ccq, &ccq, 200, QueuePairSizes::new(4, 1).with_inline(64))?;
/// let mr = server.create_memory_region()?;
/// mr.register(64, MrFlags::ALLOW_LOCAL_WRITE).wait()?;
/// sqp.receive(7, &[NdSge::new(mr.address(), 64, mr.local_token())])?;
/// # let _connectors = connect((&server, &sqp), (&client, &cqp))?;
/// cqp.send_inline(8, b"hello", OpFlags::empty())?;
/// // GetResults, sleeping on Notify while the queue is empty.
/// let mut r = [NdResultEntry::default()];
/// while scq.get_results(&mut r) == 0 {
///     scq.notify(NotifyType::Any).wait()?;
/// }
/// assert_eq!(
///     r[0],
///     NdResultEntry {
///         status: NdStatus::SUCCESS,
///         bytes_transferred: 5,
///         queue_pair_context: 100,
///         request_context: 7,
///         request_type: RequestType::Receive,
///     }
/// );
/// # Ok::<(), NdError>(())
/// ```
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

/// An empty entry (success, nothing transferred, no contexts): what an
/// output array for [`CompletionQueue::get_results`] starts as.
impl Default for NdResultEntry {
    fn default() -> Self {
        NdResultEntry {
            status: NdStatus::SUCCESS,
            bytes_transferred: 0,
            queue_pair_context: 0,
            request_context: 0,
            request_type: RequestType::Send,
        }
    }
}

/// `CQ notify` types.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// let adapter = Provider.open_adapter("127.91.7.1".parse().unwrap())?;
/// let cq = adapter.create_completion_queue(8)?;
/// let qp = adapter.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(4, 1))?;
/// // Errors: only a completion with an error status wakes this Notify
/// // (Solicited: a receive whose send set SEND_AND_SOLICIT_EVENT, or an error;
/// // Any: every completion).
/// let on_error = cq.notify(NotifyType::Errors);
/// qp.receive(1, &[])?;
/// qp.flush()?; // the receive completes ND_CANCELED: an error
/// on_error.wait()?;
/// # Ok::<(), NdError>(())
/// ```
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
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// let adapter = Provider.open_adapter("127.91.4.1".parse().unwrap())?;
/// let cq = adapter.create_completion_queue(8)?;
/// // The QP's context (42) comes back with each of its completions.
/// let qp = adapter.create_queue_pair(&cq, &cq, 42, QueuePairSizes::new(4, 1))?;
/// qp.receive(1, &[])?;
/// qp.receive(2, &[])?;
/// // Notify completes on the next completion (at once if some are waiting).
/// let notify = cq.notify(NotifyType::Any);
/// qp.flush()?; // every outstanding request completes ND_CANCELED
/// notify.wait()?;
/// # let blank = NdResultEntry {
/// #     status: NdStatus::SUCCESS,
/// #     bytes_transferred: 0,
/// #     queue_pair_context: 0,
/// #     request_context: 0,
/// #     request_type: RequestType::Send,
/// # };
/// let mut results = [blank; 4];
/// let mut n = 0;
/// while n < 2 {
///     // GetResults never blocks: sleep on Notify when the queue is empty.
///     n += cq.get_results(&mut results[n..]);
///     if n < 2 {
///         cq.notify(NotifyType::Any).wait()?;
///     }
/// }
/// for (r, context) in results[..2].iter().zip([1, 2]) {
///     assert_eq!((r.status, r.request_type), (NdStatus::CANCELED, RequestType::Receive));
///     assert_eq!((r.request_context, r.queue_pair_context), (context, 42));
/// }
/// // A pending Notify can be cancelled.
/// let notify = cq.notify(NotifyType::Any);
/// cq.cancel_overlapped_requests();
/// assert_eq!(notify.wait().unwrap_err().status, NdStatus::CANCELED);
/// # Ok::<(), NdError>(())
/// ```
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
    pub(crate) adapter: Adapter,
}

/// The verbs CQ and what its results need besides its completions.
pub(crate) struct CqInner {
    pub(crate) cq: Cq,
    pub(crate) book: Mutex<CqBook>,
}

/// What turns a completion into an ND result: whose QP it is, and whether
/// the adapter's removal or something before it flushed it.
///
/// Results are numbered in the order they are taken (the queue is FIFO), so
/// "queued before an event" is "numbered below `taken` plus the fill at that
/// moment" — counted under this lock, which `get_results` holds while it
/// takes.
#[derive(Debug, Default)]
pub(crate) struct CqBook {
    /// Results taken so far: the number of the next one.
    taken: u64,
    /// Contexts of the live QPs completing here, by QPN.
    live: HashMap<u32, u64>,
    /// Released QPs (QPN, context) and the number below which their last
    /// results (the flushes of the release) are queued.
    released: Vec<(u32, u64, u64)>,
    /// Results numbered from here on may be the removal's flushes.
    removal: Option<u64>,
}

impl CqInner {
    /// The number the next completion to arrive will have.
    fn end(&self, book: &CqBook) -> u64 {
        book.taken + self.cq.len() as u64
    }

    fn book(&self) -> std::sync::MutexGuard<'_, CqBook> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// QP `qpn` completes here with `context` from now on.
    pub(crate) fn add_qp(&self, qpn: u32, context: u64) {
        self.book().live.insert(qpn, context);
    }

    /// QP `qpn` was destroyed: what it left queued keeps its context.
    pub(crate) fn release_qp(&self, qpn: u32) {
        let mut book = self.book();
        if let Some(context) = book.live.remove(&qpn) {
            let end = self.end(&book);
            book.released.push((qpn, context, end));
        }
    }

    /// The adapter is about to be removed: flushes queued from here on are
    /// the removal's.
    pub(crate) fn mark_removal(&self) {
        let mut book = self.book();
        let end = self.end(&book);
        book.removal.get_or_insert(end);
    }
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("depth", &self.inner.cq.depth())
            .finish()
    }
}

/// The ND status of a verbs completion; `removed`: a flush is the removal's.
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
        let inner = Arc::new(CqInner {
            cq,
            book: Mutex::default(),
        });
        adapter.track_cq(&inner);
        Ok(CompletionQueue {
            inner,
            adapter: adapter.clone(),
        })
    }

    /// `GetResults`: takes up to `out.len()` completions; never blocks.
    ///
    /// A flushed request is `ND_CANCELED`, or `ND_DEVICE_REMOVED` if the
    /// adapter's removal flushed it; results of a released queue pair keep
    /// its context.
    pub fn get_results(&self, out: &mut [NdResultEntry]) -> usize {
        // Removed beneath the adapter (through its verbs device): every
        // flush may be the removal's.
        let removed_unmarked = self.adapter.is_removed();
        let mut book = self.inner.book();
        let removal = book.removal.or(removed_unmarked.then_some(0));
        let mut n = 0;
        while n < out.len() {
            let Some(wc) = self.inner.cq.poll_one() else {
                break;
            };
            let number = book.taken;
            book.taken += 1;
            let t = RequestType::from_code(wc.wr_id >> TYPE_SHIFT).unwrap_or(RequestType::Send);
            let context = book
                .released
                .iter()
                .find(|&&(qpn, _, end)| qpn == wc.qpn && number < end)
                .map(|&(_, context, _)| context)
                .or_else(|| book.live.get(&wc.qpn).copied())
                .unwrap_or(0);
            out[n] = NdResultEntry {
                status: nd_status(wc.status, wc.opcode, removal.is_some_and(|r| number >= r)),
                bytes_transferred: if t == RequestType::Receive {
                    wc.byte_len
                } else {
                    0
                },
                queue_pair_context: context,
                request_context: wc.wr_id & MAX_CONTEXT,
                request_type: t,
            };
            n += 1;
        }
        let taken = book.taken;
        book.released.retain(|&(_, _, end)| end > taken);
        n
    }

    /// Takes one completion if one is waiting (`GetResults` with room for one).
    pub fn get_result(&self) -> Option<NdResultEntry> {
        let mut r = [NdResultEntry::default()];
        (self.get_results(&mut r) == 1).then_some(r[0])
    }

    /// Takes one completion, sleeping on the queue's `Notify` until there is
    /// one: the loop around `GetResults` and `Notify` most programs need. No
    /// wake-up is lost: a `Notify` issued while completions wait completes at
    /// once. Fails only if the `Notify` does (device removal, overflow).
    pub fn wait_result(&self) -> NdResult<NdResultEntry> {
        loop {
            if let Some(r) = self.get_result() {
                return Ok(r);
            }
            self.notify(NotifyType::Any).wait()?;
        }
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
        // Canceled, Overflow (ND_BUFFER_OVERFLOW) and DeviceRemoved map by kind.
        NdPending::map(self.inner.cq.notify(on), |r| r.map_err(nd_err))
    }

    /// `GetNotifyAffinity`: processor group 0 and the processors Notify
    /// completes on — the ones the calling thread may run on (the engine
    /// thread, or in manual progress the waiter itself, runs there: ndverbs
    /// sets no affinity of its own, and ND prefers an answer to
    /// `ND_NOT_SUPPORTED`). `ND_DEVICE_REMOVED` after removal.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// let adapter = Provider.open_adapter("127.91.4.2".parse().unwrap())?;
    /// let cq = adapter.create_completion_queue(8)?;
    /// let (group, affinity) = cq.get_notify_affinity()?;
    /// assert_eq!(group, 0);
    /// assert_ne!(affinity, 0); // at least the processor running this
    /// # Ok::<(), NdError>(())
    /// ```
    pub fn get_notify_affinity(&self) -> NdResult<(u16, u64)> {
        self.adapter.notify_affinity()
    }

    /// `CancelOverlappedRequests`: pending Notify requests complete
    /// `ND_CANCELED`, in the order they were made.
    pub fn cancel_overlapped_requests(&self) {
        self.inner.cq.cancel_notifies();
    }

    /// `Resize`: never loses completions; below the current fill it fails with
    /// `ND_BUFFER_OVERFLOW` and leaves the queue unchanged.
    pub fn resize(&self, depth: u32) -> NdResult<()> {
        // Below the fill is ErrorKind::Overflow: ND_BUFFER_OVERFLOW.
        self.inner.cq.resize(depth).map_err(nd_err)
    }

    /// Capacity.
    pub fn depth(&self) -> usize {
        self.inner.cq.depth()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_types_have_nds_values_and_travel_in_the_wr_id() {
        use RequestType as T;
        let nd = [
            (T::Receive, 0),
            (T::Send, 1),
            (T::Bind, 2),
            (T::Invalidate, 3),
            (T::Read, 4),
            (T::Write, 5),
        ];
        for (t, value) in nd {
            assert_eq!(t as u64, value);
            let id = wr_id(t, MAX_CONTEXT).unwrap();
            assert_eq!(RequestType::from_code(id >> TYPE_SHIFT), Some(t));
        }
        assert_eq!(RequestType::from_code(6), None);
    }
}
