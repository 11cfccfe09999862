//! The object tables: every PD, CQ, QP, SRQ and memory key of a NIC, keyed
//! by the ids the NIC hands out.
//!
//! A handle the application still holds after destruction names nothing
//! rather than freed state: a lookup that fails is a typed error, never a
//! crash. A queue pair is two halves: [`QpShared`], what the application's
//! threads touch without the core lock (the post queues, the state as of the
//! last step, the outstanding counts that bound posting), and [`QpEntry`],
//! the protocol state machine and its receive queue, which only the engine
//! touches.

use super::control::NewQp;
use crate::cq::{CompletionQueue, NotifyError};
use crate::ep::QpIdent;
use crate::error::EngineError;
use crate::keys::KeyGen;
use crate::mr::MemTable;
use crate::pending::{pending, Completion, Pending};
use crossbeam_queue::{ArrayQueue, SegQueue};
use ndverbs_proto::limits::LIMITS;
use ndverbs_proto::rc::{
    AttrMask, Counters, ModifyError, QpAttr, QpCaps, QpState, RcQp, RecvQueue, RecvWr, SendWr,
    WorkCompletion,
};
use ndverbs_proto::time::Instant;
use ndverbs_proto::ud::UdQp;
// Object tables are keyed by ids this engine hands out; foldhash is several
// times cheaper than SipHash on the packet path (every packet looks up its QP).
use foldhash::HashMap;
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// Every object of a NIC, by id.
pub(crate) struct Tables {
    /// Registered memory and windows, by key.
    pub(crate) mem: MemTable,
    /// Unpredictable QPNs, PSNs and keys.
    pub(crate) keys: KeyGen,
    next_id: u32,
    /// The generation of the next QP (see [`QpIdent`]).
    next_qp_generation: u64,
    /// Protection domains.
    pub(crate) pds: HashMap<u32, ()>,
    pub(crate) cqs: HashMap<u32, Arc<CompletionQueue>>,
    pub(crate) qps: HashMap<u32, QpEntry>,
    /// Unreliable datagram queue pairs (`super::ud`); their QPNs come from
    /// the same space as `qps`'.
    pub(crate) ud: HashMap<u32, UdEntry>,
    pub(crate) srqs: HashMap<u32, SrqEntry>,
    /// QPNs in time-wait: not reused until the CM says so.
    pub(crate) timewait_qpns: HashSet<u32>,
    /// Counters of destroyed queue pairs (NIC counters are cumulative).
    pub(crate) retired: Counters,
}

impl Tables {
    pub(crate) fn new(mem: MemTable, keys: KeyGen) -> Tables {
        Tables {
            mem,
            keys,
            next_id: 1,
            next_qp_generation: 1,
            pds: HashMap::default(),
            cqs: HashMap::default(),
            qps: HashMap::default(),
            ud: HashMap::default(),
            srqs: HashMap::default(),
            timewait_qpns: HashSet::new(),
            retired: Counters::default(),
        }
    }

    /// A fresh id for a PD, CQ or SRQ.
    pub(crate) fn next_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A generation no QP of this NIC had before.
    pub(crate) fn qp_generation(&mut self) -> u64 {
        let g = self.next_qp_generation;
        self.next_qp_generation += 1;
        g
    }

    /// An unpredictable QPN no queue pair (RC or UD) has and none in
    /// time-wait, never QP0 or QP1. `slot`: a member of a shared port puts
    /// its slot in bits 16..23, the byte the host steers packets by
    /// (`crate::share`).
    pub(crate) fn fresh_qpn(&mut self, slot: Option<u8>) -> u32 {
        let hi = slot.map(|s| u32::from(s) << 16);
        loop {
            let q = match hi {
                None => self.keys.qpn(),
                Some(hi) => hi | (self.keys.qpn() & 0xffff),
            };
            if q > 1
                && !self.qps.contains_key(&q)
                && !self.ud.contains_key(&q)
                && !self.timewait_qpns.contains(&q)
            {
                return q;
            }
        }
    }

    /// Queue pair `id`: the one with its number *and* generation (a QP that
    /// took a released one's number is not it).
    pub(crate) fn qp_ident(&mut self, id: QpIdent) -> Option<&mut QpEntry> {
        self.qps
            .get_mut(&id.qpn)
            .filter(|e| e.shared.generation == id.generation)
    }

    /// Fails unless protection domain `pd` exists.
    pub(crate) fn check_pd(&self, pd: u32) -> Result<(), EngineError> {
        match self.pds.contains_key(&pd) {
            true => Ok(()),
            false => Err(EngineError::NotFound { what: "PD", id: pd }),
        }
    }

    /// Fails when the device has its maximum number of queue pairs, RC
    /// and UD together (`max_qp`, as `ibv_query_device` reports it).
    pub(crate) fn check_qp_room(&self) -> Result<(), EngineError> {
        if self.qps.len() + self.ud.len() >= LIMITS.max_qp as usize {
            return Err(EngineError::Busy(
                "the device has its maximum number of queue pairs",
            ));
        }
        Ok(())
    }

    /// Fails unless shared receive queue `id` exists.
    pub(crate) fn check_srq(&self, id: u32) -> Result<(), EngineError> {
        match self.srqs.contains_key(&id) {
            true => Ok(()),
            false => Err(EngineError::NotFound { what: "SRQ", id }),
        }
    }

    /// Completion queue `id`.
    pub(crate) fn cq(&self, id: u32) -> Result<&Arc<CompletionQueue>, EngineError> {
        self.cqs
            .get(&id)
            .ok_or(EngineError::NotFound { what: "CQ", id })
    }

    /// Queue pair `qpn`.
    pub(crate) fn qp(&self, qpn: u32) -> Result<&QpEntry, EngineError> {
        let not_found = EngineError::NotFound {
            what: "QP",
            id: qpn,
        };
        self.qps.get(&qpn).ok_or(not_found)
    }

    /// Queue pair `qpn`, to change.
    pub(crate) fn qp_mut(&mut self, qpn: u32) -> Result<&mut QpEntry, EngineError> {
        let not_found = EngineError::NotFound {
            what: "QP",
            id: qpn,
        };
        self.qps.get_mut(&qpn).ok_or(not_found)
    }

    /// Fails with [`EngineError::Busy`]`(why)` while a queue pair `uses`
    /// the object being destroyed.
    pub(crate) fn refuse_if_used(
        &self,
        uses: impl Fn(&QpEntry) -> bool,
        why: &'static str,
    ) -> Result<(), EngineError> {
        match self.qps.values().any(uses) {
            true => Err(EngineError::Busy(why)),
            false => Ok(()),
        }
    }
}

/// What the application side of a queue pair shares with the engine.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::nic::{Nic, QpInit};
/// use ndverbs_proto::rc::{QpCaps, QpState};
/// let a = Nic::open("127.93.6.1".parse().unwrap(), Progress::Thread)?;
/// let pd = a.alloc_pd()?;
/// let (cq, _) = a.create_cq(16)?;
/// let init = QpInit { pd, send_cq: cq, recv_cq: cq, srq: None, caps: QpCaps::default(),
///     max_recv_wr: 16, max_recv_sge: 1 };
/// // The application's handle: posts go through it, state and QPN read from it.
/// let qp = a.create_qp(init)?;
/// assert_eq!(qp.state(), QpState::Reset);
/// assert!(qp.qpn() > 1 && qp.qpn() < 1 << 24); // random, never QP0/QP1
/// assert_eq!(a.query_qp(qp.qpn())?.qp_state, QpState::Reset);
/// a.destroy_qp(qp.qpn())?;
/// # Ok::<(), ndverbs_engine::error::EngineError>(())
/// ```
#[derive(Debug)]
pub struct QpShared {
    pub(super) qpn: u32,
    pub(super) generation: u64,
    pub(super) caps: QpCaps,
    pub(super) max_recv_wr: u32,
    pub(super) max_recv_sge: u32,
    pub(super) uses_srq: bool,
    /// An unreliable datagram QP (its engine half is a `UdEntry`).
    pub(super) ud: bool,
    pub(super) state: AtomicU8,
    /// Posts made while another thread runs the engine, for its step. They
    /// grow by blocks as used, not to the QP's depth at creation: most
    /// posts go straight into the protocol, and an idle QP would otherwise
    /// hold tens of KiB it never touches. `sq_outstanding` and
    /// `rq_outstanding` bound them.
    pub(super) sq_in: SegQueue<SendWr>,
    pub(super) rq_in: SegQueue<RecvWr>,
    /// Send WRs posted and not yet retired (completed or silently done).
    pub(super) sq_outstanding: AtomicU32,
    pub(super) rq_outstanding: AtomicU32,
    /// In the NIC's work queue already.
    pub(super) queued: AtomicBool,
}

impl QpShared {
    /// The application's half of queue pair `new` created with `init`,
    /// receiving `rq` (work requests, SGEs each), in RESET.
    pub(super) fn new(new: &NewQp, init: &QpInit, rq: (u32, u32), ud: bool) -> QpShared {
        QpShared {
            qpn: new.qpn,
            generation: new.generation,
            caps: init.caps,
            max_recv_wr: rq.0,
            max_recv_sge: rq.1,
            uses_srq: init.srq.is_some(),
            ud,
            state: AtomicU8::new(state_to_u8(QpState::Reset)),
            sq_in: SegQueue::new(),
            rq_in: SegQueue::new(),
            sq_outstanding: AtomicU32::new(0),
            rq_outstanding: AtomicU32::new(0),
            queued: AtomicBool::new(false),
        }
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The QP's identity: what endpoint requests name it by.
    pub fn ident(&self) -> QpIdent {
        QpIdent {
            qpn: self.qpn,
            generation: self.generation,
        }
    }

    /// The QP state as of the engine's last step.
    pub fn state(&self) -> QpState {
        state_from_u8(self.state.load(Ordering::Acquire))
    }

    /// Creation-time send limits.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// Whether this is an unreliable datagram QP.
    pub fn is_ud(&self) -> bool {
        self.ud
    }
}

pub(super) fn state_to_u8(s: QpState) -> u8 {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

pub(super) fn state_from_u8(v: u8) -> QpState {
    match v {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        _ => QpState::Err,
    }
}

/// Creation parameters of a queue pair.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::nic::{Nic, QpInit};
/// use ndverbs_proto::rc::QpCaps;
/// let a = Nic::open("127.93.7.1".parse().unwrap(), Progress::Thread)?;
/// let pd = a.alloc_pd()?;
/// let (send_cq, _) = a.create_cq(64)?;
/// let (recv_cq, _) = a.create_cq(64)?;
/// // Separate CQs, a receive queue of 64 two-piece receives, 8 inline bytes.
/// let caps = QpCaps { max_send_wr: 64, max_send_sge: 2, max_inline_data: 8, sq_sig_all: false };
/// let init = QpInit { pd, send_cq, recv_cq, srq: None, caps, max_recv_wr: 64, max_recv_sge: 2 };
/// let qp = a.create_qp(init)?;
/// assert_eq!(qp.caps().max_inline_data, 8);
/// // A CQ in use cannot go.
/// assert!(a.destroy_cq(send_cq).is_err());
/// # Ok::<(), ndverbs_engine::error::EngineError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct QpInit {
    /// Protection domain.
    pub pd: u32,
    /// CQ for send completions.
    pub send_cq: u32,
    /// CQ for receive completions.
    pub recv_cq: u32,
    /// Shared receive queue, if any (then `max_recv_wr`/`max_recv_sge` are ignored).
    pub srq: Option<u32>,
    /// Send queue limits.
    pub caps: QpCaps,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per receive.
    pub max_recv_sge: u32,
}

/// The engine's half of a queue pair.
pub(crate) struct QpEntry {
    pub(crate) qp: RcQp,
    pub(super) shared: Arc<QpShared>,
    pub(super) rq: RecvQueue,
    pub(super) srq: Option<u32>,
    pub(super) send_cq: Arc<CompletionQueue>,
    pub(super) recv_cq: Arc<CompletionQueue>,
    pub(crate) peer: Option<IpAddr>,
    /// Send requests handed to `qp` and not yet seen to retire.
    pub(super) sq_in_proto: usize,
    /// Receives handed to `rq` and not yet seen to retire.
    pub(super) rq_in_proto: usize,
    /// The earliest deadline this QP has in the timer heap: a later deadline
    /// needs no new entry (the armed one re-arms it when it fires), so the
    /// heap holds about one entry per QP however often timers restart.
    pub(super) armed: Option<Instant>,
    /// The counters as last reported in the logs (updated only while
    /// `debug` is on).
    pub(super) logged: Counters,
}

/// The engine's half of an unreliable datagram queue pair: the protocol
/// state machine, its own receive queue and its CQs. Its posts take the core
/// lock (`super::ud`), so it has no post queues of its own.
pub(crate) struct UdEntry {
    pub(crate) qp: UdQp,
    pub(super) shared: Arc<QpShared>,
    pub(super) pd: u32,
    pub(super) rq: RecvQueue,
    /// The shared receive queue it takes receives from instead of `rq`.
    pub(super) srq: Option<u32>,
    pub(super) send_cq: Arc<CompletionQueue>,
    pub(super) recv_cq: Arc<CompletionQueue>,
}

/// The receive queue a QP takes receives from: shared receive queue `srq`
/// when it has one (`None` if that is gone), else its own `rq`. (A function
/// of the pieces: the QP entry is borrowed from the same tables.)
pub(super) fn receive_queue<'a>(
    srqs: &'a mut HashMap<u32, SrqEntry>,
    srq: Option<u32>,
    rq: &'a mut RecvQueue,
) -> Option<&'a mut RecvQueue> {
    match srq {
        Some(id) => srqs.get_mut(&id).map(|s| &mut s.rq),
        None => Some(rq),
    }
}

/// The engine's half of a shared receive queue.
pub(crate) struct SrqEntry {
    pub(super) rq: RecvQueue,
    pub(super) shared: Arc<SrqShared>,
    /// Receives handed to `rq` and not yet seen consumed (as a QP's
    /// `rq_in_proto`): the application's outstanding count drops by what
    /// left `rq` since, never by comparing it with the queues — that raced
    /// with a post between its count and its push, and let the next post
    /// past the SRQ's capacity.
    pub(super) in_rq: usize,
}

/// What the application side of a shared receive queue shares with the engine.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::nic::{Nic, QpInit};
/// use ndverbs_engine::mr::RegionBuf;
/// use ndverbs_proto::mem::{Access, Sge};
/// use ndverbs_proto::rc::{QpCaps, RecvWr};
/// let a = Nic::open("127.93.8.1".parse().unwrap(), Progress::Thread)?;
/// let pd = a.alloc_pd()?;
/// let (cq, _) = a.create_cq(16)?;
/// // One pool of receives for several QPs.
/// let srq = a.create_srq(pd, 128, 1)?;
/// let init = |srq| QpInit { pd, send_cq: cq, recv_cq: cq, srq, caps: QpCaps::default(), max_recv_wr: 0, max_recv_sge: 0 };
/// let (q1, q2) = (a.create_qp(init(Some(srq.id())))?, a.create_qp(init(Some(srq.id())))?);
/// let mr = a.reg_mr(pd, RegionBuf::alloc(4096)?, Access::LOCAL_WRITE)?;
/// a.post_srq_recv(&srq, RecvWr::new(1, vec![Sge::new(mr.addr(), 4096, mr.lkey())]))?;
/// assert!(a.destroy_srq(srq.id()).is_err()); // still used by q1 and q2
/// # let _ = (q1, q2);
/// # Ok::<(), ndverbs_engine::error::EngineError>(())
/// ```
#[derive(Debug)]
pub struct SrqShared {
    pub(super) id: u32,
    pub(super) max_sge: u32,
    /// Posts waiting for the engine; sized for the depth the SRQ was
    /// created with (a post that finds it full after a resize goes to the
    /// engine's queue directly).
    pub(super) rq_in: ArrayQueue<RecvWr>,
    pub(super) outstanding: AtomicU32,
    pub(super) capacity: AtomicU32,
    pub(super) queued: AtomicBool,
    /// The limit below which the outstanding receives complete the limit
    /// waiters (ibverbs' `srq_limit`, ND's notify threshold); 0: none.
    pub(super) limit: AtomicU32,
    pub(super) limit_waiters: Mutex<Vec<Completion<Result<(), NotifyError>>>>,
}

impl SrqShared {
    /// The SRQ id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Receives posted and not yet taken by a SEND.
    pub fn outstanding(&self) -> u32 {
        self.outstanding.load(Ordering::SeqCst)
    }

    /// The most receives it holds (see [`Nic::resize_srq`](super::Nic::resize_srq)).
    pub fn capacity(&self) -> u32 {
        self.capacity.load(Ordering::SeqCst)
    }

    /// The limit of [`SrqShared::notify_limit`] (0: none).
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Acquire)
    }

    /// Sets the limit: pending and later [`SrqShared::notify_limit`]
    /// requests complete once fewer than `limit` receives are outstanding
    /// (0: never).
    pub fn set_limit(&self, limit: u32) {
        self.limit.store(limit, Ordering::Release);
        self.check_limit();
    }

    /// A request that completes when fewer receives than the limit are
    /// outstanding — at once if that is already so (a receive taken between
    /// the application's look and this call is not missed). Every request
    /// pending at that moment completes together; destroying the SRQ
    /// completes them [`NotifyError::Canceled`], removal
    /// [`NotifyError::DeviceRemoved`].
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_engine::config::Progress;
    /// use ndverbs_engine::cq::NotifyError;
    /// use ndverbs_engine::nic::Nic;
    /// use ndverbs_proto::rc::RecvWr;
    /// let a = Nic::open("127.93.8.2".parse().unwrap(), Progress::Thread)?;
    /// let pd = a.alloc_pd()?;
    /// let srq = a.create_srq(pd, 8, 1)?;
    /// for i in 0..2 {
    ///     a.post_srq_recv(&srq, RecvWr::new(i, vec![]))?;
    /// }
    /// srq.set_limit(2);
    /// let low = srq.notify_limit();
    /// assert!(!low.is_done()); // 2 outstanding, not below 2
    /// srq.end_limit_waiters(Err(NotifyError::Canceled));
    /// assert_eq!(low.wait(), Err(NotifyError::Canceled));
    /// srq.set_limit(3);
    /// assert_eq!(srq.notify_limit().wait(), Ok(())); // already below
    /// # Ok::<(), ndverbs_engine::error::EngineError>(())
    /// ```
    pub fn notify_limit(&self) -> Pending<Result<(), NotifyError>> {
        let (p, c) = pending::<Result<(), NotifyError>>(|| Err(NotifyError::Canceled));
        lock(&self.limit_waiters).push(c);
        self.check_limit();
        p
    }

    /// Completes every pending limit request, in order, with `result`.
    pub fn end_limit_waiters(&self, result: Result<(), NotifyError>) {
        for c in lock(&self.limit_waiters).drain(..) {
            c.complete(result);
        }
    }

    /// Completes the limit requests if the outstanding receives are below
    /// the limit.
    pub(super) fn check_limit(&self) {
        let limit = self.limit();
        if limit > 0 && self.outstanding() < limit {
            let mut waiters = lock(&self.limit_waiters);
            // Checked again under the lock a new request takes.
            if self.outstanding() < self.limit() {
                for c in waiters.drain(..) {
                    c.complete(Ok(()));
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SrqEntry {
    /// Moves the receives the application posted into the queue.
    pub(super) fn absorb_posts(&mut self) {
        self.shared.queued.store(false, Ordering::Release);
        while let Some(wr) = self.shared.rq_in.pop() {
            // Capacity is enforced at post time.
            if self.rq.post(wr).is_ok() {
                self.in_rq += 1;
            } else {
                self.shared.outstanding.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// Work the application queued for the engine.
pub(super) enum Work {
    Qp(u32),
    Srq(u32),
}

impl QpEntry {
    /// Modifies the QP in a `modify_qp` span and reports a state change.
    /// The state the application sees is updated at once, so the end of the
    /// step does not report the change a second time.
    pub(crate) fn modify(&mut self, attr: &QpAttr, mask: AttrMask) -> Result<(), ModifyError> {
        let qpn = self.qp.qpn();
        let from = self.qp.state();
        let to = mask
            .contains(AttrMask::STATE)
            .then(|| tracing::field::debug(attr.qp_state));
        let _span = tracing::debug_span!("modify_qp", qp = qpn, to).entered();
        if let Err(e) = self.qp.modify(attr, mask) {
            tracing::debug!(error = %e, "QP modification refused");
            return Err(e);
        }
        let to = self.qp.state();
        if to != from {
            tracing::debug!(qp = qpn, ?from, ?to, "QP state");
        }
        self.shared.state.store(state_to_u8(to), Ordering::Release);
        Ok(())
    }

    /// Moves the QP to ERR, which flushes every outstanding work request —
    /// posts still in its queues first, so that they are flushed too. A QP
    /// in RESET stays there (nothing is outstanding, and RESET → ERR is not
    /// a transition); one in ERR already is left alone.
    pub(super) fn flush_to_error(&mut self) {
        self.absorb_posts();
        if !matches!(self.qp.state(), QpState::Err | QpState::Reset) {
            let to_err = QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            };
            // Legal from every other state.
            let _ = self.modify(&to_err, AttrMask::STATE);
        }
    }

    /// Moves WRs the application posted into the protocol state machine.
    /// Returns true if anything moved.
    pub(crate) fn absorb_posts(&mut self) -> bool {
        self.shared.queued.store(false, Ordering::Release);
        let mut moved = false;
        while let Some(wr) = self.shared.sq_in.pop() {
            moved = true;
            self.take_send(wr);
        }
        while let Some(wr) = self.shared.rq_in.pop() {
            moved = true;
            self.take_recv(wr);
        }
        moved
    }

    /// Hands a posted send request to the protocol.
    pub(super) fn take_send(&mut self, wr: SendWr) {
        self.sq_in_proto += 1;
        // No clone on the packet path: the refusal needs only these.
        let (wr_id, op) = (wr.wr_id, wr.op);
        if let Err(e) = self.qp.post_send(wr) {
            // Checked at post time; only a state change in between lands here.
            tracing::debug!(qpn = self.qp.qpn(), error = %e, "send request refused by the QP");
            self.send_cq
                .push(WorkCompletion::refused_send(wr_id, op, self.qp.qpn()));
        }
    }

    /// Hands a posted receive to the protocol.
    pub(super) fn take_recv(&mut self, wr: RecvWr) {
        self.rq_in_proto += 1;
        let wr_id = wr.wr_id;
        if let Err(e) = self.qp.post_recv(&mut self.rq, wr) {
            tracing::debug!(qpn = self.qp.qpn(), error = %e, "receive refused by the QP");
            self.recv_cq
                .push(WorkCompletion::refused_recv(wr_id, self.qp.qpn()));
        }
    }

    /// Lowers the application's outstanding counts by the requests that left
    /// the protocol's queues since the last call.
    pub(super) fn retire_done(&mut self) {
        let sq = self.qp.send_queue_len();
        retire(&self.shared.sq_outstanding, self.sq_in_proto, sq);
        self.sq_in_proto = sq;
        if self.srq.is_none() {
            let rq = self.rq.len();
            retire(&self.shared.rq_outstanding, self.rq_in_proto, rq);
            self.rq_in_proto = rq;
        }
    }
}

/// Lowers an outstanding-request counter by the requests that left a queue.
fn retire(counter: &AtomicU32, before: usize, after: usize) {
    let gone = before.saturating_sub(after) as u32;
    if gone > 0 {
        counter.fetch_sub(gone, Ordering::AcqRel);
    }
}
