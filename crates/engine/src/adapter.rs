//! The adapter: one local IP address, one UDP socket on port 4791, and the
//! worker that drives every queue pair on it.
//!
//! ```text
//!  application threads                         engine (worker thread, or the
//!  ───────────────────                         caller of `progress` in manual mode)
//!  post_send ─► per-QP lock-free queue ─┐
//!  post_recv ─► per-QP lock-free queue ─┤      ┌──────────── Core (one Mutex) ────────────┐
//!                      doorbell (eventfd)├────► │ move posted WRs into the RcQp state      │
//!                                       │      │ recv datagrams → ICRC → parse → RcQp     │
//!  poll CQ ◄── lock-free ring ◄─────────┼───── │ timers (deadline heap) → RcQp            │
//!  CQ eventfd ◄── armed notifications   │      │ RcQp → packets → socket; completions → CQ│
//!                                       │      └──────────────────────────────────────────┘
//!  create/modify/destroy ──────── lock Core (control path, rare)
//! ```
//!
//! **Posting.** When no thread is running the engine, a post takes the Core
//! lock itself and goes straight into the protocol, and a send leaves in the
//! same call, as a NIC's doorbell starts a transmission: no queue, and no
//! wake-up of the worker thread (woken only when a timer the post armed
//! would otherwise fire late by more than its own length). When the engine
//! is busy, the post goes through the per-QP queue above and that step
//! serves it.
//!
//! Objects live in tables keyed by ids (QPN for queue pairs, numbers for PDs,
//! CQs and SRQs, keys for memory), so a handle the application still holds
//! after destruction names nothing rather than freed state: a lookup that
//! fails is a typed error, never a crash.
//!
//! **Progress.** With [`Progress::Thread`] a worker thread sleeps in `poll` on
//! the socket and a doorbell and wakes for packets, queued posts and deadlines. With
//! [`Progress::Manual`] there is no thread: [`Adapter::progress`] (called by
//! polling a CQ in the layers above) runs the same loop inline, which is how
//! latency gets close to a raw UDP ping-pong on a 2-core machine.
//!
//! **Removal.** [`Adapter::remove`] flushes every queue pair (every outstanding
//! work request completes, with a flush status) and stops the worker; every
//! later call returns [`EngineError::Removed`].
//!
//! **Tracing.** The engine never prints; it reports through `tracing`:
//! `debug` spans `adapter_open` (field `local`), `modify_qp` and `destroy_qp`
//! (field `qp`) and an `info` span `remove_device`; `debug` events for QP
//! state changes (`qp`, `from`, `to`), flushes, error completions,
//! retransmissions, RNR and sequence NAKs and MADs sent and received; `warn`
//! for exhausted retries, a full CQ and a full socket buffer (once);
//! `trace` for each dropped packet with its cause. Connection endpoints add
//! their request spans (see [`crate::ep`]). Per-packet paths only test
//! whether a level is on.

use crate::cq::CompletionQueue;
use crate::ep::EpTable;
use crate::event::{wait_readable, EventFd};
use crate::faults::{Fate, FaultConfig, FaultCounters, Faults, Held};
use crate::gsi::Gsi;
use crate::keys::KeyGen;
use crate::mr::{MemError, MemTable, Region, RegionBuf};
use crate::udp::{
    Drop as UdpDrop, IoPiece, RoceSocket, Run, MAX_DATAGRAM, MAX_GSO_BYTES, MAX_GSO_SEGMENTS,
    MAX_RUNS, MAX_RUN_PIECES, MAX_TRANSPORT,
};
use crossbeam_queue::{ArrayQueue, SegQueue};
use ndverbs_proto::cm::{CmAgent, CmConfig};
use ndverbs_proto::mem::{Access, LentPayload, Sge, MAX_LENT_PIECES};
use ndverbs_proto::rc::{
    AttrMask, ModifyError, PostError, QpAttr, QpCaps, QpState, RcQp, RecvQueue, RecvWr, SendOp,
    SendWr, WcStatus,
};
use ndverbs_proto::time::Instant;
use ndverbs_wire::cma::addr_of_gid;
use ndverbs_wire::icrc::ICRC_LEN;
use ndverbs_wire::ip::ROCEV2_PORT;
use ndverbs_wire::packet::Packet;
use std::cmp::Reverse;
// Object tables are keyed by ids this engine hands out; foldhash is several
// times cheaper than SipHash on the packet path (every packet looks up its QP).
use foldhash::HashMap;
use std::collections::{BinaryHeap, HashSet};
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Who runs the engine loop.
///
/// # Example
///
/// ```
/// use ndverbs_engine::adapter::{Adapter, Progress};
/// use std::time::Duration;
/// let a = Adapter::open("127.93.2.1".parse().unwrap(), Progress::Manual)?;
/// assert_eq!(a.mode(), Progress::Manual);
/// // No worker thread: the application runs the engine loop itself (the layers
/// // above do it when a CQ is polled), or sleeps in it until there is work.
/// assert!(a.progress());
/// a.progress_wait(Duration::from_millis(1))?;
/// # Ok::<(), ndverbs_engine::adapter::EngineError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Progress {
    /// A worker thread per adapter.
    Thread,
    /// The application, through [`Adapter::progress`].
    Manual,
}

/// Errors of engine calls.
///
/// # Example
///
/// ```
/// use ndverbs_engine::adapter::{Adapter, EngineError, Progress};
/// let a = Adapter::open("127.93.3.1".parse().unwrap(), Progress::Thread)?;
/// // Handles are plain ids: a stale one is an error, never a crash.
/// let err = a.destroy_qp(0x1234).unwrap_err();
/// assert!(matches!(err, EngineError::NotFound { what: "QP", id: 0x1234 }), "{err}");
/// assert!(matches!(a.create_cq(0), Err(EngineError::InvalidArgument(_))));
/// a.remove();
/// assert!(matches!(a.alloc_pd(), Err(EngineError::Removed)));
/// # Ok::<(), EngineError>(())
/// ```
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The adapter was removed; only cleanup works.
    #[error("the adapter was removed")]
    Removed,
    /// No object with this id (already destroyed, or never existed).
    #[error("no {what} with id {id:#x}")]
    NotFound {
        /// Object kind.
        what: &'static str,
        /// The id.
        id: u32,
    },
    /// The endpoint has no connection (never connected, or already disconnected).
    #[error("the endpoint is not connected")]
    NotConnected,
    /// The object is still in use by others.
    #[error("{0}")]
    Busy(&'static str),
    /// An argument out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// Socket or system call failure.
    #[error("I/O: {0}")]
    Io(#[from] io::Error),
    /// Refused QP modification.
    #[error(transparent)]
    Modify(#[from] ModifyError),
    /// Refused post.
    #[error(transparent)]
    Post(#[from] PostError),
    /// Refused memory registration/window operation.
    #[error(transparent)]
    Mem(#[from] MemError),
}

/// Limits an adapter enforces (reported by device queries).
///
/// # Example
///
/// ```
/// use ndverbs_engine::adapter::{Limits, LIMITS};
/// // Every adapter has the same limits; device queries report them.
/// fn fits(l: &Limits, wr: u32, sge: u32) -> bool {
///     wr <= l.max_qp_wr && sge <= l.max_sge
/// }
/// assert!(fits(&LIMITS, 1024, 4));
/// assert!(!fits(&LIMITS, LIMITS.max_qp_wr + 1, 1));
/// assert_eq!(LIMITS.max_msg_size, 1 << 31);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most work requests per send or receive queue.
    pub max_qp_wr: u32,
    /// Most SGEs per work request.
    pub max_sge: u32,
    /// Most inline bytes per send.
    pub max_inline_data: u32,
    /// Most completions per CQ.
    pub max_cqe: u32,
    /// Most queue pairs.
    pub max_qp: u32,
    /// Largest message.
    pub max_msg_size: u64,
    /// Outstanding READ/atomic per QP, either direction.
    pub max_qp_rd_atom: u8,
}

/// The limits of every ndverbs adapter.
pub const LIMITS: Limits = Limits {
    max_qp_wr: 16_384,
    max_sge: 32,
    max_inline_data: 4096,
    max_cqe: 1 << 20,
    max_qp: 1 << 17,
    max_msg_size: 1 << 31,
    max_qp_rd_atom: ndverbs_proto::rc::MAX_RD_ATOMIC,
};

/// CM timer settings (exponents as on the wire: 4.096 µs × 2^t).
///
/// # Example
///
/// ```
/// use ndverbs_engine::adapter::{Adapter, CmTimers, Progress};
/// // A short-fused CM (a REQ every 2·4 + 4 = 12 ms, 2 retries) for tests that must see timeouts.
/// let t = CmTimers { packet_life_time: 10, cm_response_timeout: 10, max_cm_retries: 2 };
/// let a = Adapter::open_with_timers("127.93.4.1".parse().unwrap(), Progress::Thread, t)?;
/// assert!(!a.is_removed());
/// # Ok::<(), ndverbs_engine::adapter::EngineError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmTimers {
    /// Packet life time exponent (Linux RoCE: 18).
    pub packet_life_time: u8,
    /// CM response timeout exponent (Linux: 20).
    pub cm_response_timeout: u8,
    /// Retries of REQ/REP/DREQ (Linux: 15).
    pub max_cm_retries: u8,
}

/// Adapter-wide packet counters (per-QP counters live in the QPs).
///
/// # Example
///
/// ```
/// use ndverbs_engine::adapter::{Adapter, Progress};
/// use std::sync::atomic::Ordering::Relaxed;
/// let a = Adapter::open("127.93.5.1".parse().unwrap(), Progress::Manual)?;
/// // Eight bytes that are no RoCE packet, sent to port 4791: received, then dropped.
/// let junk = std::net::UdpSocket::bind("127.93.5.2:0")?;
/// junk.send_to(&[0; 8], "127.93.5.1:4791")?;
/// let c = a.counters();
/// let t0 = std::time::Instant::now();
/// while c.rcvd_datagrams.load(Relaxed) == 0 {
///     assert!(t0.elapsed().as_secs() < 10);
///     a.progress();
/// }
/// assert_eq!(c.drop_malformed.load(Relaxed) + c.drop_bad_icrc.load(Relaxed), 1);
/// assert_eq!(c.sent_datagrams.load(Relaxed), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct AdapterCounters {
    /// Datagrams received (all).
    pub rcvd_datagrams: AtomicU64,
    /// Datagrams sent.
    pub sent_datagrams: AtomicU64,
    /// Dropped: ICRC did not verify.
    pub drop_bad_icrc: AtomicU64,
    /// Dropped: too short or unparsable transport headers.
    pub drop_malformed: AtomicU64,
    /// Dropped: no QP with that number.
    pub drop_unknown_qp: AtomicU64,
    /// Dropped: source address is not the QP's peer.
    pub drop_wrong_source: AtomicU64,
    /// Dropped: QP1 (CM) packets with no management agent attached.
    pub drop_gsi: AtomicU64,
    /// Packets the socket refused to take (buffer full); recovered by retransmission.
    pub send_would_block: AtomicU64,
}

/// What the application side of a queue pair shares with the engine.
///
/// # Example
///
/// ```
/// use ndverbs_engine::adapter::{Adapter, Progress, QpInit};
/// use ndverbs_proto::rc::{QpCaps, QpState};
/// let a = Adapter::open("127.93.6.1".parse().unwrap(), Progress::Thread)?;
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
/// # Ok::<(), ndverbs_engine::adapter::EngineError>(())
/// ```
#[derive(Debug)]
pub struct QpShared {
    qpn: u32,
    caps: QpCaps,
    max_recv_wr: u32,
    max_recv_sge: u32,
    uses_srq: bool,
    state: AtomicU8,
    sq_in: ArrayQueue<SendWr>,
    rq_in: ArrayQueue<RecvWr>,
    /// Send WRs posted and not yet retired (completed or silently done).
    sq_outstanding: AtomicU32,
    rq_outstanding: AtomicU32,
    queued: AtomicBool,
}

impl QpShared {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The QP state as of the engine's last step.
    pub fn state(&self) -> QpState {
        state_from_u8(self.state.load(Ordering::Acquire))
    }

    /// Creation-time send limits.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }
}

fn state_to_u8(s: QpState) -> u8 {
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

fn state_from_u8(v: u8) -> QpState {
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
/// use ndverbs_engine::adapter::{Adapter, Progress, QpInit};
/// use ndverbs_proto::rc::QpCaps;
/// let a = Adapter::open("127.93.7.1".parse().unwrap(), Progress::Thread)?;
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
/// # Ok::<(), ndverbs_engine::adapter::EngineError>(())
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

pub(crate) struct QpEntry {
    pub(crate) qp: RcQp,
    shared: Arc<QpShared>,
    rq: RecvQueue,
    srq: Option<u32>,
    send_cq: Arc<CompletionQueue>,
    recv_cq: Arc<CompletionQueue>,
    pub(crate) peer: Option<IpAddr>,
    /// Send requests handed to `qp` and not yet seen to retire.
    sq_in_proto: usize,
    /// Receives handed to `rq` and not yet seen to retire.
    rq_in_proto: usize,
    /// The earliest deadline this QP has in the timer heap: a later deadline
    /// needs no new entry (the armed one re-arms it when it fires), so the
    /// heap holds about one entry per QP however often timers restart.
    armed: Option<Instant>,
    /// The counters as last reported in the logs (updated only while
    /// `debug` is on).
    logged: ndverbs_proto::rc::Counters,
}

struct SrqEntry {
    rq: RecvQueue,
    shared: Arc<SrqShared>,
    /// Receives handed to `rq` and not yet seen consumed (as a QP's
    /// `rq_in_proto`): the application's outstanding count drops by what
    /// left `rq` since, never by comparing it with the queues — that raced
    /// with a post between its count and its push, and let the next post
    /// past the SRQ's capacity.
    in_rq: usize,
}

/// What the application side of a shared receive queue shares with the engine.
///
/// # Example
///
/// ```
/// use ndverbs_engine::adapter::{Adapter, Progress, QpInit};
/// use ndverbs_engine::mr::RegionBuf;
/// use ndverbs_proto::mem::{Access, Sge};
/// use ndverbs_proto::rc::{QpCaps, RecvWr};
/// let a = Adapter::open("127.93.8.1".parse().unwrap(), Progress::Thread)?;
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
/// # Ok::<(), ndverbs_engine::adapter::EngineError>(())
/// ```
#[derive(Debug)]
pub struct SrqShared {
    id: u32,
    max_sge: u32,
    rq_in: ArrayQueue<RecvWr>,
    outstanding: AtomicU32,
    capacity: u32,
    queued: AtomicBool,
}

impl SrqShared {
    /// The SRQ id.
    pub fn id(&self) -> u32 {
        self.id
    }
}

/// Work the application queued for the engine.
enum Work {
    Qp(u32),
    Srq(u32),
}

/// The engine's state: everything the worker touches, behind one lock.
pub(crate) struct Core {
    sock: RoceSocket,
    mem: MemTable,
    pub(crate) keys: KeyGen,
    next_id: u32,
    pds: HashMap<u32, u32>,
    cqs: HashMap<u32, Arc<CompletionQueue>>,
    pub(crate) qps: HashMap<u32, QpEntry>,
    srqs: HashMap<u32, SrqEntry>,
    timers: BinaryHeap<Reverse<(Instant, u32)>>,
    pub(crate) touched: Vec<u32>,
    rx: Box<[u8]>,
    tx: Box<[u8]>,
    faults: Option<Faults>,
    /// The connection manager of this adapter's GID.
    pub(crate) cm: CmAgent,
    /// QP1, carrying the CM's MADs.
    gsi: Gsi,
    /// Connection endpoints.
    pub(crate) eps: EpTable,
    /// QPNs in time-wait: not reused until the CM says so.
    pub(crate) timewait_qpns: HashSet<u32>,
    /// Request completions to deliver at the end of the step.
    pub(crate) later: crate::ep::Later,
    /// Counters of destroyed queue pairs (adapter counters are cumulative).
    pub(crate) retired: ndverbs_proto::rc::Counters,
    /// Manual progress: queue pairs (and their peers) whose plain ACK this
    /// step left unbuilt in the responder, because the QP has a completion
    /// the application may answer at once: the answer then leaves first.
    /// The next step sends the ACK at the latest, after that step's data and
    /// in a send of its own (see `drain_qp`).
    acks: Vec<(u32, IpAddr)>,
    /// The ACKs the previous step postponed, while this step's `finish_step`
    /// runs.
    acks_due: Vec<(u32, IpAddr)>,
    /// Completions and request results delivered so far (`progress_wait`
    /// does not sleep after a step that delivered something).
    delivered: u64,
    /// When the last datagram arrived (for busy polling).
    last_rx: Option<Instant>,
    /// Manual progress: the packets of a coalesced datagram in `rx` not yet
    /// dispatched (from this offset), left for the next step because an
    /// earlier one had a completion to deliver.
    rx_rest: Option<(crate::udp::Datagram, usize)>,
    /// The packets `drain_qp` is sending (kept to reuse its piece list).
    batch: RunBatch,
    /// A packet of this step left a completion or a CM packet to deliver: a
    /// manual-progress step stops receiving and returns to its caller.
    completion_ready: bool,
}

pub(crate) struct Shared {
    local: IpAddr,
    mode: Progress,
    core: Mutex<Core>,
    work: SegQueue<Work>,
    doorbell: EventFd,
    sleeping: AtomicBool,
    removed: AtomicBool,
    stop: AtomicBool,
    /// `CLOCK_MONOTONIC` at open, in nanoseconds: the engine's time zero.
    epoch_ns: u64,
    counters: AdapterCounters,
    sock_fd: i32,
    /// Packet capture (off unless switched on; see [`crate::capture`]).
    pub(crate) capture: crate::capture::Slot,
    /// Busy-poll window in nanoseconds (0: off): see [`Adapter::set_busy_poll`].
    busy_poll_ns: AtomicU64,
    /// When the engine thread will wake up by itself, in engine nanoseconds,
    /// written under the core lock before it sleeps (see
    /// `Adapter::post_direct`).
    worker_wake_ns: AtomicU64,
    /// The `adapter` span (field `local`), entered by every engine step and
    /// control call, so that ids in the logs name their adapter.
    pub(crate) span: tracing::Span,
}

/// An adapter: the engine for one local IP address. Cheap to clone.
///
/// # Example
///
/// ```
/// use ndverbs_engine::adapter::{Adapter, EngineError, Progress, QpInit, QpShared};
/// use ndverbs_engine::cq::CompletionQueue;
/// use ndverbs_engine::mr::{Region, RegionBuf};
/// use ndverbs_proto::mem::{Access, Sge};
/// use ndverbs_proto::rc::*;
/// use ndverbs_wire::cma::gid_of;
/// use std::sync::Arc;
///
/// /// One side: an adapter driven by `progress` (no thread), PD, CQ, QP, 4 KiB region.
/// fn open(ip: &str) -> Result<(Adapter, Arc<CompletionQueue>, Arc<QpShared>, Arc<Region>), EngineError> {
///     let ad = Adapter::open(ip.parse().unwrap(), Progress::Manual)?;
///     let pd = ad.alloc_pd()?;
///     let (cq_id, cq) = ad.create_cq(16)?;
///     let qp = ad.create_qp(QpInit { pd, send_cq: cq_id, recv_cq: cq_id, srq: None,
///         caps: QpCaps::default(), max_recv_wr: 16, max_recv_sge: 1 })?;
///     let mr = ad.reg_mr(pd, RegionBuf::alloc(4096)?, Access::LOCAL_WRITE)?;
///     Ok((ad, cq, qp, mr))
/// }
/// let (a, cq_a, qp_a, mr_a) = open("127.93.1.1")?;
/// let (b, cq_b, qp_b, mr_b) = open("127.93.1.2")?;
/// // RESET -> INIT -> RTR -> RTS, each QP towards the other (PSN 0 both ways).
/// for (ad, qp, peer, peer_qpn) in [(&a, &qp_a, &b, qp_b.qpn()), (&b, &qp_b, &a, qp_a.qpn())] {
///     let mut attr = QpAttr { qp_state: QpState::Init, dest_qp_num: peer_qpn, ..QpAttr::default() };
///     attr.av.dgid = gid_of(peer.local()).octets();
///     ad.modify_qp(qp.qpn(), &attr, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS)?;
///     attr.qp_state = QpState::Rtr;
///     ad.modify_qp(qp.qpn(), &attr, AttrMask::STATE | AttrMask::AV | AttrMask::PATH_MTU | AttrMask::DEST_QPN
///         | AttrMask::RQ_PSN | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER)?;
///     attr.qp_state = QpState::Rts;
///     ad.modify_qp(qp.qpn(), &attr, AttrMask::STATE | AttrMask::SQ_PSN | AttrMask::TIMEOUT
///         | AttrMask::RETRY_CNT | AttrMask::RNR_RETRY | AttrMask::MAX_QP_RD_ATOMIC)?;
/// }
/// b.post_recv(&qp_b, RecvWr::new(1, vec![Sge::new(mr_b.addr(), 4096, mr_b.lkey())]))?;
/// mr_a.write(0, b"over UDP").unwrap();
/// a.post_send(&qp_a, SendWr::new(2, SendOp::Send, vec![Sge::new(mr_a.addr(), 8, mr_a.lkey())]))?;
/// // Manual progress: run both engines until each side has its completion.
/// let (mut sent, mut recv) = (None, None);
/// let t0 = std::time::Instant::now();
/// while sent.is_none() || recv.is_none() {
///     assert!(t0.elapsed().as_secs() < 10, "no completions");
///     a.progress();
///     b.progress();
///     sent = sent.or_else(|| cq_a.poll_one());
///     recv = recv.or_else(|| cq_b.poll_one());
/// }
/// let recv = recv.unwrap();
/// assert_eq!((sent.unwrap().status, recv.status, recv.byte_len), (WcStatus::Success, WcStatus::Success, 8));
/// let mut got = [0; 8];
/// mr_b.read(0, &mut got).unwrap();
/// assert_eq!(&got, b"over UDP");
/// # Ok::<(), EngineError>(())
/// ```
#[derive(Clone)]
pub struct Adapter {
    shared: Arc<Shared>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter")
            .field("local", &self.shared.local)
            .field("mode", &self.shared.mode)
            .field("removed", &self.shared.removed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Adapter {
    /// Opens the adapter for `local` (binds `local:4791`).
    pub fn open(local: IpAddr, mode: Progress) -> Result<Adapter, EngineError> {
        Self::open_on(RoceSocket::bind(local)?, mode)
    }

    /// Opens the adapter for `local` with CM timers other than Linux's
    /// (tests and simulations that must see timeouts quickly).
    pub fn open_with_timers(
        local: IpAddr,
        mode: Progress,
        timers: CmTimers,
    ) -> Result<Adapter, EngineError> {
        Self::open_inner(RoceSocket::bind(local)?, mode, Some(timers))
    }

    /// Opens an adapter on an already bound socket (tests use other ports).
    pub fn open_on(sock: RoceSocket, mode: Progress) -> Result<Adapter, EngineError> {
        Self::open_inner(sock, mode, None)
    }

    fn open_inner(
        mut sock: RoceSocket,
        mode: Progress,
        timers: Option<CmTimers>,
    ) -> Result<Adapter, EngineError> {
        let local = sock.local();
        let _span =
            tracing::debug_span!("adapter_open", %local, port = sock.port(), ?mode).entered();
        // Coalesced receives (split again in `Core::step`); fine if refused.
        let gro = sock.enable_gro();
        let sock_fd = sock.fd();
        let mut keys = KeyGen::new();
        let mut mem = MemTable::new(KeyGen::new());
        let gsi = Gsi::new(&mut mem);
        let mut cm_cfg = CmConfig::new(local, node_guid(local), keys.next_u64());
        if let Some(t) = timers {
            cm_cfg.packet_life_time = t.packet_life_time;
            cm_cfg.cm_response_timeout = t.cm_response_timeout;
            cm_cfg.max_cm_retries = t.max_cm_retries;
        }
        let cm = CmAgent::new(cm_cfg);
        let core = Core {
            sock,
            mem,
            keys,
            cm,
            gsi,
            eps: EpTable::default(),
            timewait_qpns: HashSet::new(),
            later: Vec::new(),
            retired: Default::default(),
            acks: Vec::new(),
            acks_due: Vec::new(),
            delivered: 0,
            last_rx: None,
            rx_rest: None,
            batch: RunBatch::default(),
            completion_ready: false,
            next_id: 1,
            pds: HashMap::default(),
            cqs: HashMap::default(),
            qps: HashMap::default(),
            srqs: HashMap::default(),
            timers: BinaryHeap::new(),
            touched: Vec::new(),
            rx: vec![0u8; MAX_DATAGRAM].into_boxed_slice(),
            // Room for a `sendmmsg` batch of GSO runs (a 64 KiB WRITE is two
            // runs: the first packet is longer than the rest).
            tx: vec![0u8; TX_BATCH_BYTES].into_boxed_slice(),
            faults: match FaultConfig::from_env() {
                Ok(c) => c.filter(|c| !c.is_off()).map(Faults::new),
                Err(e) => {
                    tracing::warn!(error = %e, "NDV_FAULTS ignored");
                    None
                }
            },
        };
        let shared = Arc::new(Shared {
            local,
            mode,
            core: Mutex::new(core),
            work: SegQueue::new(),
            doorbell: EventFd::new()?,
            sleeping: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            epoch_ns: monotonic_ns(),
            counters: AdapterCounters::default(),
            sock_fd,
            capture: Default::default(),
            busy_poll_ns: AtomicU64::new(busy_poll_from_env()),
            worker_wake_ns: AtomicU64::new(u64::MAX),
            span: tracing::debug_span!(parent: None, "adapter", %local),
        });
        crate::capture::from_env(&shared.capture, local)?;
        let thread = if mode == Progress::Thread {
            let s = Arc::downgrade(&shared);
            Some(
                std::thread::Builder::new()
                    .name(format!("ndv-engine-{local}"))
                    .spawn(move || worker(s))?,
            )
        } else {
            None
        };
        let adapter = Adapter {
            shared,
            thread: Arc::new(Mutex::new(thread)),
        };
        crate::stats::publish_from_env(&adapter);
        tracing::debug!(gro, gso = adapter.core_lock().sock.gso(), "adapter open");
        Ok(adapter)
    }

    /// The local address.
    pub fn local(&self) -> IpAddr {
        self.shared.local
    }

    /// The progress model.
    pub fn mode(&self) -> Progress {
        self.shared.mode
    }

    /// Adapter-wide counters.
    pub fn counters(&self) -> &AdapterCounters {
        &self.shared.counters
    }

    /// True if `other` is a handle to this same adapter.
    pub fn same_as(&self, other: &Adapter) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// True once [`Adapter::remove`] ran.
    pub fn is_removed(&self) -> bool {
        self.shared.removed.load(Ordering::Acquire)
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The core, locked, unless the adapter was removed.
    pub(crate) fn core_guard(&self) -> Result<MutexGuard<'_, Core>, EngineError> {
        self.core()
    }

    /// The core, locked, even after removal (cleanup calls).
    pub(crate) fn core_lock(&self) -> MutexGuard<'_, Core> {
        self.shared.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn core(&self) -> Result<MutexGuard<'_, Core>, EngineError> {
        if self.is_removed() {
            return Err(EngineError::Removed);
        }
        Ok(self.shared.core.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn check(&self) -> Result<(), EngineError> {
        if self.is_removed() {
            Err(EngineError::Removed)
        } else {
            Ok(())
        }
    }

    /// Turns the fault layer on (with `cfg`) or off (`None`) for packets this
    /// adapter sends. `NDV_FAULTS` sets it at open.
    pub fn set_faults(&self, cfg: Option<FaultConfig>) -> Result<(), EngineError> {
        self.core()?.faults = cfg.filter(|c| !c.is_off()).map(Faults::new);
        Ok(())
    }

    /// What the fault layer did so far (`None` when it is off).
    pub fn fault_counters(&self) -> Option<FaultCounters> {
        let c = self.shared.core.lock().unwrap_or_else(|e| e.into_inner());
        c.faults.as_ref().map(|f| f.counters)
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<u32, EngineError> {
        let mut c = self.core()?;
        let id = c.next_id();
        c.pds.insert(id, 0);
        Ok(id)
    }

    /// Frees a protection domain (refused while objects use it).
    pub fn dealloc_pd(&self, pd: u32) -> Result<(), EngineError> {
        let mut c = self.core()?;
        let users = c.qps.values().filter(|q| q.qp.pd() == pd).count();
        if !c.pds.contains_key(&pd) {
            return Err(EngineError::NotFound { what: "PD", id: pd });
        }
        if users > 0 {
            return Err(EngineError::Busy(
                "queue pairs still use the protection domain",
            ));
        }
        c.pds.remove(&pd);
        Ok(())
    }

    /// Registers memory.
    pub fn reg_mr(
        &self,
        pd: u32,
        buf: RegionBuf,
        access: Access,
    ) -> Result<Arc<Region>, EngineError> {
        let mut c = self.core()?;
        if !c.pds.contains_key(&pd) {
            return Err(EngineError::NotFound { what: "PD", id: pd });
        }
        Ok(c.mem.register(pd, buf, access)?)
    }

    /// Deregisters memory (refused while windows are bound to it).
    pub fn dereg_mr(&self, lkey: u32) -> Result<(), EngineError> {
        // Works after removal too: it is cleanup.
        let mut c = self.shared.core.lock().unwrap_or_else(|e| e.into_inner());
        c.mem.deregister(lkey)?;
        Ok(())
    }

    /// Deregisters memory even while windows are bound to it (see
    /// [`MemTable::revoke`]): for a region handle that is being dropped.
    pub fn revoke_mr(&self, lkey: u32) -> Result<(), EngineError> {
        let mut c = self.shared.core.lock().unwrap_or_else(|e| e.into_inner());
        c.mem.revoke(lkey)?;
        Ok(())
    }

    /// Allocates a type-2 memory window; returns its key.
    pub fn alloc_mw(&self, pd: u32) -> Result<u32, EngineError> {
        let mut c = self.core()?;
        if !c.pds.contains_key(&pd) {
            return Err(EngineError::NotFound { what: "PD", id: pd });
        }
        Ok(c.mem.alloc_window(pd))
    }

    /// Binds a window (see [`MemTable::bind_window`]); returns its new R_Key.
    pub fn bind_mw(
        &self,
        mw: u32,
        lkey: u32,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<u32, EngineError> {
        Ok(self.core()?.mem.bind_window(mw, lkey, va, len, access)?)
    }

    /// Invalidates a window locally.
    pub fn invalidate_mw(&self, rkey: u32) -> Result<(), EngineError> {
        Ok(self.core()?.mem.invalidate_window(rkey)?)
    }

    /// Frees a window.
    pub fn dealloc_mw(&self, rkey: u32) -> Result<(), EngineError> {
        let mut c = self.shared.core.lock().unwrap_or_else(|e| e.into_inner());
        Ok(c.mem.dealloc_window(rkey)?)
    }

    /// Creates a completion queue.
    pub fn create_cq(&self, depth: u32) -> Result<(u32, Arc<CompletionQueue>), EngineError> {
        if depth == 0 || depth > LIMITS.max_cqe {
            return Err(EngineError::InvalidArgument("CQ depth out of range"));
        }
        let mut c = self.core()?;
        let id = c.next_id();
        let cq = Arc::new(CompletionQueue::new(depth as usize)?);
        c.cqs.insert(id, cq.clone());
        Ok((id, cq))
    }

    /// Destroys a completion queue (refused while queue pairs use it).
    pub fn destroy_cq(&self, id: u32) -> Result<(), EngineError> {
        let mut c = self.shared.core.lock().unwrap_or_else(|e| e.into_inner());
        let cq = c
            .cqs
            .get(&id)
            .ok_or(EngineError::NotFound { what: "CQ", id })?;
        if c.qps
            .values()
            .any(|q| Arc::ptr_eq(&q.send_cq, cq) || Arc::ptr_eq(&q.recv_cq, cq))
        {
            return Err(EngineError::Busy(
                "queue pairs still use the completion queue",
            ));
        }
        c.cqs.remove(&id);
        Ok(())
    }

    /// Creates a shared receive queue.
    pub fn create_srq(
        &self,
        pd: u32,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<Arc<SrqShared>, EngineError> {
        if max_wr == 0 || max_wr > LIMITS.max_qp_wr || max_sge == 0 || max_sge > LIMITS.max_sge {
            return Err(EngineError::InvalidArgument(
                "SRQ depth or SGE count out of range",
            ));
        }
        let mut c = self.core()?;
        if !c.pds.contains_key(&pd) {
            return Err(EngineError::NotFound { what: "PD", id: pd });
        }
        let id = c.next_id();
        let shared = Arc::new(SrqShared {
            id,
            max_sge,
            rq_in: ArrayQueue::new(max_wr as usize),
            outstanding: AtomicU32::new(0),
            capacity: max_wr,
            queued: AtomicBool::new(false),
        });
        c.srqs.insert(
            id,
            SrqEntry {
                rq: RecvQueue::new(max_wr, max_sge),
                shared: shared.clone(),
                in_rq: 0,
            },
        );
        Ok(shared)
    }

    /// Destroys a shared receive queue (refused while queue pairs use it).
    pub fn destroy_srq(&self, id: u32) -> Result<(), EngineError> {
        let mut c = self.shared.core.lock().unwrap_or_else(|e| e.into_inner());
        if !c.srqs.contains_key(&id) {
            return Err(EngineError::NotFound { what: "SRQ", id });
        }
        if c.qps.values().any(|q| q.srq == Some(id)) {
            return Err(EngineError::Busy(
                "queue pairs still use the shared receive queue",
            ));
        }
        c.srqs.remove(&id);
        Ok(())
    }

    /// Creates an RC queue pair in RESET with an unpredictable QPN.
    pub fn create_qp(&self, init: QpInit) -> Result<Arc<QpShared>, EngineError> {
        let _adapter = self.shared.span.enter();
        let caps = init.caps;
        if caps.max_send_wr == 0 || caps.max_send_wr > LIMITS.max_qp_wr {
            return Err(EngineError::InvalidArgument("max_send_wr out of range"));
        }
        if caps.max_send_sge > LIMITS.max_sge || caps.max_inline_data > LIMITS.max_inline_data {
            return Err(EngineError::InvalidArgument(
                "max_send_sge or max_inline_data out of range",
            ));
        }
        if init.srq.is_none()
            && (init.max_recv_wr == 0
                || init.max_recv_wr > LIMITS.max_qp_wr
                || init.max_recv_sge > LIMITS.max_sge)
        {
            return Err(EngineError::InvalidArgument(
                "max_recv_wr or max_recv_sge out of range",
            ));
        }
        let mut c = self.core()?;
        if !c.pds.contains_key(&init.pd) {
            return Err(EngineError::NotFound {
                what: "PD",
                id: init.pd,
            });
        }
        let send_cq = c
            .cqs
            .get(&init.send_cq)
            .cloned()
            .ok_or(EngineError::NotFound {
                what: "CQ",
                id: init.send_cq,
            })?;
        let recv_cq = c
            .cqs
            .get(&init.recv_cq)
            .cloned()
            .ok_or(EngineError::NotFound {
                what: "CQ",
                id: init.recv_cq,
            })?;
        if let Some(s) = init.srq {
            if !c.srqs.contains_key(&s) {
                return Err(EngineError::NotFound { what: "SRQ", id: s });
            }
        }
        if c.qps.len() >= LIMITS.max_qp as usize {
            return Err(EngineError::Busy(
                "the adapter has its maximum number of queue pairs",
            ));
        }
        let qpn = loop {
            let q = c.keys.qpn();
            if !c.qps.contains_key(&q) && !c.timewait_qpns.contains(&q) {
                break q;
            }
        };
        let (rq_wr, rq_sge) = if init.srq.is_some() {
            (1, 1)
        } else {
            (init.max_recv_wr, init.max_recv_sge.max(1))
        };
        let shared = Arc::new(QpShared {
            qpn,
            caps,
            max_recv_wr: rq_wr,
            max_recv_sge: rq_sge,
            uses_srq: init.srq.is_some(),
            state: AtomicU8::new(state_to_u8(QpState::Reset)),
            sq_in: ArrayQueue::new(caps.max_send_wr as usize),
            rq_in: ArrayQueue::new(rq_wr as usize),
            sq_outstanding: AtomicU32::new(0),
            rq_outstanding: AtomicU32::new(0),
            queued: AtomicBool::new(false),
        });
        let entry = QpEntry {
            qp: RcQp::new(qpn, init.pd, caps),
            shared: shared.clone(),
            rq: RecvQueue::new(rq_wr, rq_sge),
            srq: init.srq,
            send_cq,
            recv_cq,
            peer: None,
            sq_in_proto: 0,
            rq_in_proto: 0,
            armed: None,
            logged: Default::default(),
        };
        c.qps.insert(qpn, entry);
        tracing::debug!(qp = qpn, pd = init.pd, "QP created");
        Ok(shared)
    }

    /// Modifies a queue pair. The peer's address comes from `attr.av.dgid`
    /// (an IPv4-mapped or IPv6 GID) when [`AttrMask::AV`] is given.
    pub fn modify_qp(&self, qpn: u32, attr: &QpAttr, mask: AttrMask) -> Result<(), EngineError> {
        let _adapter = self.shared.span.enter();
        let now = self.now();
        let mut c = self.core()?;
        let e = c.qps.get_mut(&qpn).ok_or(EngineError::NotFound {
            what: "QP",
            id: qpn,
        })?;
        // Pending posts are ordered before the modification.
        e.absorb_posts();
        e.modify(attr, mask)?;
        if mask.contains(AttrMask::AV) {
            e.peer = Some(addr_of_gid(Ipv6Addr::from(attr.av.dgid)));
        }
        c.touched.push(qpn);
        c.finish_step(&self.shared, now);
        Ok(())
    }

    /// The current attributes of a queue pair.
    pub fn query_qp(&self, qpn: u32) -> Result<QpAttr, EngineError> {
        let c = self.core()?;
        Ok(c.qps
            .get(&qpn)
            .ok_or(EngineError::NotFound {
                what: "QP",
                id: qpn,
            })?
            .qp
            .query())
    }

    /// Destroys a queue pair. Its outstanding requests are flushed to its CQs
    /// first, so each completes exactly once.
    pub fn destroy_qp(&self, qpn: u32) -> Result<(), EngineError> {
        let _adapter = self.shared.span.enter();
        let _span = tracing::debug_span!("destroy_qp", qp = qpn).entered();
        let now = self.now();
        let mut c = self.shared.core.lock().unwrap_or_else(|e| e.into_inner());
        let e = c.qps.get_mut(&qpn).ok_or(EngineError::NotFound {
            what: "QP",
            id: qpn,
        })?;
        e.absorb_posts();
        let to_err = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        if e.qp.state() != QpState::Err && e.qp.state() != QpState::Reset {
            // Always legal from any state but RESET.
            let _ = e.modify(&to_err, AttrMask::STATE);
        }
        c.touched.push(qpn);
        c.finish_step(&self.shared, now);
        if let Some(e) = c.qps.remove(&qpn) {
            crate::stats::add(&mut c.retired, e.qp.counters());
        }
        Ok(())
    }

    /// Counters of one queue pair.
    pub fn qp_counters(&self, qpn: u32) -> Result<ndverbs_proto::rc::Counters, EngineError> {
        let c = self.shared.core.lock().unwrap_or_else(|e| e.into_inner());
        let e = c.qps.get(&qpn).ok_or(EngineError::NotFound {
            what: "QP",
            id: qpn,
        })?;
        Ok(*e.qp.counters())
    }

    /// Posts a send request: sent at once if the engine is free, else queued
    /// for the step that is running (see the module docs on posting).
    pub fn post_send(&self, qp: &QpShared, wr: SendWr) -> Result<(), EngineError> {
        self.check()?;
        let state = qp.state();
        if !matches!(state, QpState::Rts | QpState::Sqd | QpState::Err) {
            return Err(PostError::InvalidState(state).into());
        }
        if wr.sgl.len() > qp.caps.max_send_sge as usize {
            return Err(PostError::TooManySges {
                given: wr.sgl.len(),
                max: qp.caps.max_send_sge,
            }
            .into());
        }
        if let Some(d) = &wr.inline {
            if d.len() > qp.caps.max_inline_data as usize {
                return Err(PostError::InlineTooLarge {
                    len: d.len(),
                    max: qp.caps.max_inline_data,
                }
                .into());
            }
        }
        // What the protocol would refuse later is refused here, at once, as
        // rxe's post_send does (EINVAL), not as a completion.
        let len = match &wr.inline {
            Some(d) => {
                let data_op = matches!(
                    wr.op,
                    SendOp::Send
                        | SendOp::SendImm(_)
                        | SendOp::SendInv(_)
                        | SendOp::Write(_)
                        | SendOp::WriteImm(..)
                );
                if !data_op || !wr.sgl.is_empty() {
                    return Err(PostError::InlineNotAllowed.into());
                }
                d.len() as u64
            }
            None => ndverbs_proto::mem::sgl_len(&wr.sgl),
        };
        if len > 1 << 31 {
            return Err(PostError::MessageTooLong(len).into());
        }
        if wr.op.is_atomic() && len != 8 {
            return Err(PostError::AtomicLength(len).into());
        }
        if qp.sq_outstanding.fetch_add(1, Ordering::AcqRel) >= qp.caps.max_send_wr {
            qp.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError::QueueFull(qp.caps.max_send_wr).into());
        }
        // Straight into the protocol and onto the wire from the caller's
        // thread, as a NIC's doorbell starts a transmission, instead of
        // through the post queue and the next progress call or a wake-up of
        // the engine thread. When another thread is running the engine, the
        // queue: that step serves the post.
        let Err(wr) = self.post_direct(qp, wr, Core::post_send_direct) else {
            return Ok(());
        };
        if qp.sq_in.push(wr).is_err() {
            qp.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError::QueueFull(qp.caps.max_send_wr).into());
        }
        self.queue_qp(qp);
        Ok(())
    }

    /// Hands a post to the protocol at once if the engine is free (a send
    /// is transmitted in the same call); gives it back otherwise (another
    /// thread runs the engine, or the QP is gone from the tables), for the
    /// post queue.
    ///
    /// With an engine thread, a post made here may arm a timer (a send's
    /// ACK timeout) that the sleeping thread does not know of: it sleeps
    /// until the wake-up it chose before (`Shared::worker_wake_ns`, at most
    /// 100 ms away). It is woken only if that would fire the timer later
    /// than the timer's own length — a retransmission may be late by less
    /// than one timeout, never more; waking the thread for every post would
    /// cost the wake-up this path exists to save.
    fn post_direct<W>(
        &self,
        qp: &QpShared,
        wr: W,
        take: impl FnOnce(&mut Core, &Shared, Instant, u32, W) -> Result<(), W>,
    ) -> Result<(), W> {
        let Ok(mut c) = self.shared.core.try_lock() else {
            return Err(wr);
        };
        let _adapter = self.shared.span.enter();
        let now = self.now();
        take(&mut c, &self.shared, now, qp.qpn, wr)?;
        if self.shared.mode == Progress::Thread {
            if let Some(d) = c.next_deadline() {
                let wake = self.shared.worker_wake_ns.load(Ordering::Relaxed);
                if wakes_too_late(wake, d.as_nanos(), now.as_nanos()) {
                    drop(c);
                    // Unconditionally: the thread may be between choosing
                    // its wake-up and setting `sleeping`.
                    self.shared.doorbell.signal();
                }
            }
        }
        Ok(())
    }

    /// Posts a receive to a queue pair's own receive queue.
    pub fn post_recv(&self, qp: &QpShared, wr: RecvWr) -> Result<(), EngineError> {
        self.check()?;
        if qp.uses_srq {
            return Err(EngineError::InvalidArgument(
                "the QP uses a shared receive queue",
            ));
        }
        let state = qp.state();
        if state == QpState::Reset {
            return Err(PostError::InvalidState(state).into());
        }
        if wr.sgl.len() > qp.max_recv_sge as usize {
            return Err(PostError::TooManySges {
                given: wr.sgl.len(),
                max: qp.max_recv_sge,
            }
            .into());
        }
        if qp.rq_outstanding.fetch_add(1, Ordering::AcqRel) >= qp.max_recv_wr {
            qp.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError::QueueFull(qp.max_recv_wr).into());
        }
        let Err(wr) = self.post_direct(qp, wr, Core::post_recv_direct) else {
            return Ok(());
        };
        if qp.rq_in.push(wr).is_err() {
            qp.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError::QueueFull(qp.max_recv_wr).into());
        }
        self.queue_qp(qp);
        Ok(())
    }

    /// Posts a receive to a shared receive queue.
    pub fn post_srq_recv(&self, srq: &SrqShared, wr: RecvWr) -> Result<(), EngineError> {
        self.check()?;
        if wr.sgl.len() > srq.max_sge as usize {
            return Err(PostError::TooManySges {
                given: wr.sgl.len(),
                max: srq.max_sge,
            }
            .into());
        }
        if srq.outstanding.fetch_add(1, Ordering::AcqRel) >= srq.capacity
            || srq.rq_in.push(wr).is_err()
        {
            srq.outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError::QueueFull(srq.capacity).into());
        }
        if !srq.queued.swap(true, Ordering::AcqRel) {
            self.shared.work.push(Work::Srq(srq.id));
        }
        self.ring();
        Ok(())
    }

    fn queue_qp(&self, qp: &QpShared) {
        // The plain load first: a second post before the engine ran (a
        // receive, then the send that answers) finds the QP queued already
        // and spares the locked swap.
        if !qp.queued.load(Ordering::Acquire) && !qp.queued.swap(true, Ordering::AcqRel) {
            self.shared.work.push(Work::Qp(qp.qpn));
        }
        self.ring();
    }

    fn ring(&self) {
        if self.shared.mode == Progress::Manual {
            // Only the worker thread sleeps with `sleeping` set; in manual
            // progress the caller drives the engine and there is no one to
            // wake (a full fence per post cost more than the rest of it).
            return;
        }
        // Pairs with the worker's store of `sleeping` then re-check of `work`.
        fence(Ordering::SeqCst);
        if self.shared.sleeping.load(Ordering::SeqCst) {
            self.shared.doorbell.signal();
        }
    }

    /// The engine's clock.
    pub fn now(&self) -> Instant {
        self.shared.now()
    }

    /// Runs one step of the engine loop if no other thread is running it;
    /// returns true if it ran. In manual mode this is how work gets done.
    pub fn progress(&self) -> bool {
        if self.is_removed() {
            return false;
        }
        match self.shared.core.try_lock() {
            Ok(mut c) => {
                let _adapter = self.shared.span.enter();
                let now = self.now();
                c.step(&self.shared, now);
                true
            }
            Err(_) => false,
        }
    }

    /// Manual mode: blocks until a packet or post arrives, the next timer is
    /// due, or `timeout` passes — then runs one step.
    pub fn progress_wait(&self, timeout: Duration) -> Result<(), EngineError> {
        self.check()?;
        let rcvd = &self.shared.counters.rcvd_datagrams;
        let before = rcvd.load(Ordering::Relaxed);
        let (deadline, delivered, busy) = {
            let _adapter = self.shared.span.enter();
            let mut c = self.shared.core.lock().unwrap_or_else(|e| e.into_inner());
            let now = self.now();
            let d0 = c.delivered;
            c.step(&self.shared, now);
            let busy = self.shared.busy(&c, now);
            if !busy {
                c.flush_acks(&self.shared, now);
            }
            (c.next_deadline(), c.delivered != d0, busy)
        };
        // The step just took packets or delivered completions or request
        // results (a phase that needed no packet, such as CompleteConnect):
        // return to the caller instead of sleeping on a socket that is now
        // empty. Within the busy-poll window after traffic, return too: the
        // caller calls again at once, and the next packet is picked up
        // without a wake-up.
        if delivered || busy || rcvd.load(Ordering::Relaxed) != before {
            return Ok(());
        }
        let wait = deadline.map_or(timeout, |d| {
            d.saturating_duration_since(self.now()).min(timeout)
        });
        if self.shared.work.is_empty() {
            wait_readable(
                &[self.shared.sock_fd, self.shared.doorbell.fd()],
                Some(wait),
            )?;
            self.shared.doorbell.drain();
        }
        self.progress();
        Ok(())
    }

    /// Sets the busy-poll window (as Linux's `SO_BUSY_POLL`): for this long
    /// after the last datagram arrived, the engine thread (or
    /// [`Adapter::progress_wait`] in manual progress) polls the socket again
    /// instead of sleeping. A stream of packets then costs its sender no
    /// wake-ups and its receiver no sleeps, for a core spent spinning while
    /// traffic flows; an idle adapter still sleeps. Zero (the default, or
    /// `NDV_BUSY_POLL_US`) turns it off.
    pub fn set_busy_poll(&self, window: Duration) {
        let ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        self.shared.busy_poll_ns.store(ns, Ordering::Relaxed);
    }

    /// The busy-poll window (see [`Adapter::set_busy_poll`]).
    pub fn busy_poll(&self) -> Duration {
        Duration::from_nanos(self.shared.busy_poll_ns.load(Ordering::Relaxed))
    }

    /// Removes the adapter: every queue pair goes to ERR (every outstanding
    /// request completes with a flush status), the worker stops, and every
    /// later call fails with [`EngineError::Removed`].
    pub fn remove(&self) {
        if self.shared.removed.swap(true, Ordering::AcqRel) {
            return;
        }
        let _adapter = self.shared.span.enter();
        let _span = tracing::info_span!("remove_device", local = %self.shared.local).entered();
        tracing::info!("device removed: flushing every queue pair, failing every request");
        self.shared.stop.store(true, Ordering::Release);
        self.shared.doorbell.signal();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
        let now = self.now();
        let mut c = self.shared.core.lock().unwrap_or_else(|e| e.into_inner());
        let qpns: Vec<u32> = c.qps.keys().copied().collect();
        for qpn in qpns {
            let e = c.qps.get_mut(&qpn).expect("listed");
            e.absorb_posts();
            if !matches!(e.qp.state(), QpState::Err | QpState::Reset) {
                let _ = e.modify(
                    &QpAttr {
                        qp_state: QpState::Err,
                        ..QpAttr::default()
                    },
                    AttrMask::STATE,
                );
            }
            c.touched.push(qpn);
        }
        c.remove_eps(now);
        for cq in c.cqs.values() {
            cq.end_waiters(Err(crate::cq::NotifyError::DeviceRemoved));
        }
        c.finish_step(&self.shared, now);
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _span = tracing::debug_span!("adapter_close", local = %self.local).entered();
        tracing::debug!(
            sent = self.counters.sent_datagrams.load(Ordering::Relaxed),
            received = self.counters.rcvd_datagrams.load(Ordering::Relaxed),
            "adapter closed"
        );
    }
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

    /// Reports what the protocol counted since the last report: retries and
    /// NAKs at `debug`, drops by cause at `trace` (exhausted retries are
    /// reported with their completion). Called only while `debug` is on.
    #[cold]
    fn log_counters(&mut self) {
        let (old, new) = (&self.logged, self.qp.counters());
        if old == new {
            return;
        }
        let qp = self.qp.qpn();
        let d = |a: u64, b: u64| b.wrapping_sub(a);
        let n = d(old.completer_retry_err, new.completer_retry_err);
        if n > 0 {
            tracing::debug!(qp, retries = n, "retransmitting (timeout or sequence NAK)");
        }
        let n = d(old.rcvd_rnr_err, new.rcvd_rnr_err);
        if n > 0 {
            tracing::debug!(
                qp,
                naks = n,
                "RNR NAK received: the peer had no receive posted"
            );
        }
        let n = d(old.send_rnr_err, new.send_rnr_err);
        if n > 0 {
            tracing::debug!(qp, naks = n, "RNR NAK sent: no receive posted");
        }
        let n = d(old.rcvd_seq_err, new.rcvd_seq_err);
        if n > 0 {
            tracing::debug!(qp, naks = n, "sequence NAK received");
        }
        let n = d(old.out_of_seq_request, new.out_of_seq_request);
        if n > 0 {
            tracing::debug!(qp, naks = n, "sequence NAK sent: PSN gap");
        }
        let n = d(old.duplicate_request, new.duplicate_request);
        if n > 0 {
            tracing::debug!(qp, requests = n, "duplicate requests answered");
        }
        if old.drops != new.drops && tracing::enabled!(tracing::Level::TRACE) {
            for ((cause, a), (_, b)) in old.drops.pairs().into_iter().zip(new.drops.pairs()) {
                if b != a {
                    tracing::trace!(qp, cause, packets = d(a, b), "packets dropped");
                }
            }
        }
        self.logged = *new;
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
    fn take_send(&mut self, wr: SendWr) {
        self.sq_in_proto += 1;
        // No clone on the packet path: the refusal needs only these.
        let (wr_id, op) = (wr.wr_id, wr.op);
        if let Err(e) = self.qp.post_send(wr) {
            // Checked at post time; only a state change in between lands here.
            tracing::debug!(qpn = self.qp.qpn(), error = %e, "send request refused by the QP");
            self.send_cq.push(refused(wr_id, op, self.qp.qpn(), e));
        }
    }

    /// Hands a posted receive to the protocol.
    fn take_recv(&mut self, wr: RecvWr) {
        self.rq_in_proto += 1;
        let wr_id = wr.wr_id;
        if let Err(e) = self.qp.post_recv(&mut self.rq, wr) {
            tracing::debug!(qpn = self.qp.qpn(), error = %e, "receive refused by the QP");
            self.recv_cq.push(refused_recv(wr_id, self.qp.qpn()));
        }
    }

    /// Lowers the application's outstanding counts by the requests that left
    /// the protocol's queues since the last call.
    fn retire_done(&mut self) {
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

fn refused(wr_id: u64, op: SendOp, qpn: u32, _e: PostError) -> ndverbs_proto::rc::WorkCompletion {
    use ndverbs_proto::rc::{WcOpcode, WcQueue, WorkCompletion};
    let opcode = match op {
        SendOp::Send | SendOp::SendImm(_) | SendOp::SendInv(_) => WcOpcode::Send,
        SendOp::Write(_) | SendOp::WriteImm(..) => WcOpcode::RdmaWrite,
        SendOp::Read(_) => WcOpcode::RdmaRead,
        SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
        SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
    };
    WorkCompletion {
        wr_id,
        status: WcStatus::LocQpOpErr,
        opcode,
        queue: WcQueue::Send,
        byte_len: 0,
        imm: None,
        invalidated_rkey: None,
        qpn,
        src_qp: 0,
        solicited: false,
    }
}

fn refused_recv(wr_id: u64, qpn: u32) -> ndverbs_proto::rc::WorkCompletion {
    use ndverbs_proto::rc::{WcOpcode, WcQueue, WorkCompletion};
    WorkCompletion {
        wr_id,
        status: WcStatus::LocQpOpErr,
        opcode: WcOpcode::Recv,
        queue: WcQueue::Recv,
        byte_len: 0,
        imm: None,
        invalidated_rkey: None,
        qpn,
        src_qp: 0,
        solicited: false,
    }
}

impl Core {
    fn next_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn next_deadline(&self) -> Option<Instant> {
        let timer = self.timers.peek().map(|Reverse((t, _))| *t);
        let held = self
            .faults
            .as_ref()
            .and_then(|f| f.next_release())
            .map(Instant::from_nanos);
        [timer, held, self.cm.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Moves MADs between QP1 and the CM agent and lets endpoints react to
    /// CM events.
    fn pump_cm(&mut self, shared: &Shared, now: Instant) {
        loop {
            let mut busy = false;
            while let Some((src, mad)) = self.gsi.poll_mad() {
                let before = tracing::enabled!(tracing::Level::DEBUG).then(|| *self.cm.counters());
                self.cm.handle_mad(now, src, &mad);
                if let Some(before) = before {
                    log_mad_received(src, &mad, &before, self.cm.counters());
                }
                busy = true;
            }
            while let Some(ev) = self.cm.poll_event() {
                self.on_cm_event(ev, now);
                busy = true;
            }
            while let Some(t) = self.cm.poll_transmit() {
                tracing::debug!(to = %t.dst, mad = mad_name(&t.mad), tid = mad_tid(&t.mad), "MAD sent");
                self.gsi.send(t.dst, &t.mad);
                busy = true;
            }
            while let Some((n, dst)) = self.gsi.poll_transmit(&mut self.mem, &mut self.tx) {
                self.transmit(shared, now, dst, n);
                busy = true;
            }
            if !busy {
                break;
            }
        }
    }

    /// Sends `self.tx[..n]` to `peer`, through the fault layer if it is on.
    fn transmit(&mut self, shared: &Shared, now: Instant, peer: IpAddr, n: usize) {
        let Some(f) = self.faults.as_mut() else {
            send(&self.sock, shared, &mut self.tx[..n], peer, None);
            return;
        };
        match f.fate(now.as_nanos(), n) {
            Fate::Drop => {}
            Fate::Send { copies, corrupt } => {
                for _ in 0..copies {
                    send(&self.sock, shared, &mut self.tx[..n], peer, corrupt);
                }
            }
            Fate::Hold(t) => f.hold(Held {
                release_ns: t,
                dst: peer,
                bytes: self.tx[..n].to_vec(),
                corrupt: None,
            }),
        }
    }

    /// Sends held packets that are due.
    fn release_held(&mut self, shared: &Shared, now: Instant) {
        let Some(f) = self.faults.as_mut() else {
            return;
        };
        while let Some(mut h) = f.due(now.as_nanos()) {
            send(&self.sock, shared, &mut h.bytes, h.dst, h.corrupt);
        }
    }

    /// The QP a post goes to directly (see `Adapter::post_direct`), with
    /// earlier posts still queued for it taken first, so the order holds.
    fn entry_in_order(&mut self, qpn: u32) -> Option<&mut QpEntry> {
        let e = self.qps.get_mut(&qpn)?;
        if !e.shared.sq_in.is_empty() || !e.shared.rq_in.is_empty() {
            e.absorb_posts();
        }
        Some(e)
    }

    /// A send request handed to the protocol directly, and sent.
    fn post_send_direct(
        &mut self,
        shared: &Shared,
        now: Instant,
        qpn: u32,
        wr: SendWr,
    ) -> Result<(), SendWr> {
        let Some(e) = self.entry_in_order(qpn) else {
            return Err(wr);
        };
        e.take_send(wr);
        self.touched.push(qpn);
        self.run_posted(shared, now);
        Ok(())
    }

    /// A receive handed to the protocol directly. It sends nothing; on a QP
    /// in ERR it is flushed at once, which a step delivers.
    fn post_recv_direct(
        &mut self,
        shared: &Shared,
        now: Instant,
        qpn: u32,
        wr: RecvWr,
    ) -> Result<(), RecvWr> {
        let Some(e) = self.entry_in_order(qpn) else {
            return Err(wr);
        };
        e.take_recv(wr);
        if e.qp.state() == QpState::Err {
            self.touched.push(qpn);
            self.finish_step(shared, now);
        }
        Ok(())
    }

    /// Takes posted work into the protocol and sends what it produced; true
    /// if there was any.
    fn run_posted(&mut self, shared: &Shared, now: Instant) -> bool {
        let mut busy = false;
        while let Some(w) = shared.work.pop() {
            busy = true;
            match w {
                Work::Qp(qpn) => {
                    if let Some(e) = self.qps.get_mut(&qpn) {
                        e.absorb_posts();
                        self.touched.push(qpn);
                    }
                }
                Work::Srq(id) => {
                    if let Some(s) = self.srqs.get_mut(&id) {
                        s.shared.queued.store(false, Ordering::Release);
                        while let Some(wr) = s.shared.rq_in.pop() {
                            // Capacity is enforced at post time.
                            if s.rq.post(wr).is_ok() {
                                s.in_rq += 1;
                            } else {
                                s.shared.outstanding.fetch_sub(1, Ordering::AcqRel);
                            }
                        }
                    }
                }
            }
        }
        // Send what was just posted before looking at the socket: a reply
        // leaves one receive syscall earlier.
        if !self.touched.is_empty() {
            self.finish_step(shared, now);
        }
        busy
    }

    /// One turn of the engine loop.
    fn step(&mut self, shared: &Shared, now: Instant) {
        // Whether anything happened that `finish_step` must follow up (an
        // idle step — most of a busy-polling loop — skips it).
        // 1. Posted work.
        let mut busy = self.run_posted(shared, now);
        self.release_held(shared, now);
        // 2. Received datagrams (a bounded batch, so timers and sends
        // interleave); a GRO datagram carries several packets of one peer.
        // In manual progress the step stops at the first datagram that
        // leaves a completion (or a CM packet) to deliver: the caller is
        // likely waiting for it, and a further receive would only find the
        // socket empty. Datagrams that complete nothing (the bulk of a
        // transfer into an RDMA WRITE target, ACKs) are taken in a batch,
        // which also lets one ACK answer all of them.
        let manual = shared.mode == Progress::Manual;
        let batch = if manual { MANUAL_RX_BATCH } else { 64 };
        self.completion_ready = false;
        for _ in 0..batch {
            if manual && self.completion_ready {
                break;
            }
            let (d, mut off) = match self.rx_rest.take() {
                Some(rest) => rest,
                None => match self.sock.recv_datagram(&mut self.rx) {
                    Ok(None) => break,
                    Ok(Some(d)) => {
                        self.last_rx = Some(now);
                        (d, 0)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "receive failed");
                        break;
                    }
                },
            };
            busy = true;
            while off < d.len {
                let end = (off + d.seg).min(d.len);
                self.receive_one(shared, now, &d, off, end);
                off = end;
                if manual && self.completion_ready && off < d.len {
                    // The rest (typically the ACK that rode with the
                    // message) waits for the next step: the caller gets
                    // its completion first.
                    self.rx_rest = Some((d, off));
                    break;
                }
            }
        }
        // 3. Timers.
        while let Some(Reverse((t, qpn))) = self.timers.peek().copied() {
            if t > now {
                break;
            }
            self.timers.pop();
            if let Some(e) = self.qps.get_mut(&qpn) {
                if e.armed == Some(t) {
                    e.armed = None;
                }
                match e.qp.poll_timeout() {
                    Some(d) if d <= now => {
                        e.qp.handle_timeout(now);
                        self.touched.push(qpn);
                    }
                    Some(d) if e.armed.is_none_or(|a| d < a) => {
                        // Restarted since: re-arm for the current deadline.
                        e.armed = Some(d);
                        self.timers.push(Reverse((d, qpn)));
                    }
                    _ => {}
                }
            }
        }
        if self.cm.poll_timeout().is_some_and(|t| t <= now) {
            busy = true;
            let retries = self.cm.counters().tx_retries;
            self.cm.handle_timeout(now);
            let n = self.cm.counters().tx_retries - retries;
            if n > 0 {
                tracing::debug!(mads = n, "CM timeout: retransmitting");
            }
        }
        if busy
            || !self.touched.is_empty()
            || !self.acks.is_empty()
            || !self.acks_due.is_empty()
            || !self.later.is_empty()
        {
            self.finish_step(shared, now);
        }
    }

    /// Verifies and dispatches the packet at `self.rx[off..end]` of datagram `d`.
    fn receive_one(
        &mut self,
        shared: &Shared,
        now: Instant,
        d: &crate::udp::Datagram,
        off: usize,
        end: usize,
    ) {
        bump(&shared.counters.rcvd_datagrams, 1);
        match self
            .sock
            .verify_segment_mut(&self.rx[off..end], d.src, d.dst)
        {
            Ok(r) => {
                shared.capture.rx(&r, self.sock.port(), &self.rx[off..end]);
                self.dispatch(shared, now, r.src.ip(), off, r.len)
            }
            Err(UdpDrop::BadIcrc) => {
                bump(&shared.counters.drop_bad_icrc, 1);
                tracing::trace!(src = %d.src, cause = "bad ICRC", "packet dropped");
            }
            Err(_) => {
                bump(&shared.counters.drop_malformed, 1);
                tracing::trace!(src = %d.src, cause = "malformed", "packet dropped");
            }
        }
    }

    fn dispatch(&mut self, shared: &Shared, now: Instant, src: IpAddr, off: usize, len: usize) {
        let pkt = match Packet::parse(&self.rx[off..off + len]) {
            Ok(p) => p,
            Err(_) => {
                bump(&shared.counters.drop_malformed, 1);
                tracing::trace!(%src, cause = "malformed transport headers", "packet dropped");
                return;
            }
        };
        let qpn = pkt.bth.dqpn;
        if qpn == ndverbs_wire::mad::GSI_QPN {
            let local = self.sock.local();
            self.gsi.handle_packet(&pkt, src, local, &mut self.mem);
            self.completion_ready = true;
            return;
        }
        if qpn == 0 {
            bump(&shared.counters.drop_gsi, 1);
            tracing::trace!(%src, cause = "QP0", "packet dropped");
            return;
        }
        let Some(e) = self.qps.get_mut(&qpn) else {
            bump(&shared.counters.drop_unknown_qp, 1);
            tracing::trace!(%src, qp = qpn, cause = "unknown QP", "packet dropped");
            return;
        };
        if e.peer != Some(src) {
            bump(&shared.counters.drop_wrong_source, 1);
            tracing::trace!(%src, qp = qpn, cause = "not the QP's peer", "packet dropped");
            return;
        }
        let rq = match e.srq {
            Some(id) => match self.srqs.get_mut(&id) {
                Some(s) => &mut s.rq,
                None => return,
            },
            None => &mut e.rq,
        };
        e.qp.handle_packet(now, &pkt, &mut self.mem, rq);
        self.completion_ready |= e.qp.has_completion();
        self.touched.push(qpn);
    }

    /// Sends everything queue pair `qpn` has to send to `peer`: runs of
    /// equal-size packets (the last of a run may be shorter) become one UDP
    /// GSO datagram of up to [`MAX_GSO_BYTES`] each, and up to [`MAX_RUNS`]
    /// runs leave in one `sendmmsg`. One packet at a time when the fault
    /// layer is on or the kernel has no GSO.
    fn drain_qp(
        &mut self,
        shared: &Shared,
        now: Instant,
        qpn: u32,
        peer: IpAddr,
        may_postpone: bool,
    ) {
        if self.faults.is_some() || !self.sock.gso() {
            while let Some(n) = self
                .qps
                .get_mut(&qpn)
                .and_then(|e| e.qp.poll_transmit(now, &mut self.mem, &mut self.tx))
            {
                self.transmit(shared, now, peer, n);
            }
            return;
        }
        // Manual progress postpones a plain ACK by one step when the QP has
        // a completion to deliver: the application may answer it at once,
        // and the answer then leaves first, the ACK just after it in a send
        // of its own (riding in one GSO send with the answer cost the answer
        // about 0.45 µs per one-way trip; alone, its send overlaps the peer's
        // work on the answer). Without a completion (the target of an RDMA
        // WRITE stream) nobody will answer: the ACK goes now, or the sender's
        // window would wait a step for it. An ACK is postponed once: one the previous
        // step postponed leaves in this one.
        let due = match self.acks_due.iter().position(|&(q, _)| q == qpn) {
            Some(i) => {
                self.acks_due.swap_remove(i);
                true
            }
            None => false,
        };
        // (A QP in ERR answers nothing: its completions are flushes.)
        let postpone = may_postpone
            && !due
            && shared.mode == Progress::Manual
            && self
                .qps
                .get(&qpn)
                .is_some_and(|e| e.qp.has_completion() && e.qp.state() != QpState::Err);
        let ack_last = postpone || due;
        // Zero-copy sends gather payloads from registered memory; a capture
        // wants every packet whole in the buffer.
        let mut lent = LentPayload::default();
        let lend = !shared.capture.is_on();
        self.batch.reset();
        loop {
            if !self.batch.has_room(self.tx.len()) {
                self.batch.flush(&self.sock, shared, &self.tx, peer);
            }
            let end = self.batch.tx_end;
            let Some(e) = self.qps.get_mut(&qpn) else {
                break;
            };
            let buf = &mut self.tx[end..];
            let lend_to = lend.then_some(&mut lent);
            let n = if ack_last && e.qp.owes_only_ack() {
                e.qp.poll_transmit_requests(now, &mut self.mem, buf, lend_to)
            } else {
                e.qp.poll_transmit_lending(now, &mut self.mem, buf, lend_to)
            };
            let Some(n) = n else {
                break;
            };
            self.batch.add(&mut self.sock, &mut self.tx, n, &lent, peer);
        }
        if ack_last && self.qps.get(&qpn).is_some_and(|e| e.qp.owes_only_ack()) {
            if postpone {
                if !self.acks.iter().any(|&(q, _)| q == qpn) {
                    self.acks.push((qpn, peer));
                }
            } else {
                // The data first, then the ACK alone.
                self.batch.flush(&self.sock, shared, &self.tx, peer);
                let end = self.batch.tx_end;
                if let Some(n) = self.qps.get_mut(&qpn).and_then(|e| {
                    e.qp.poll_transmit_lending(now, &mut self.mem, &mut self.tx[end..], None)
                }) {
                    lent.clear();
                    self.batch.add(&mut self.sock, &mut self.tx, n, &lent, peer);
                }
            }
        }
        self.batch.flush(&self.sock, shared, &self.tx, peer);
    }

    /// Sends the ACKs the previous step postponed whose QPs had nothing
    /// else to send in this one.
    fn send_due_acks(&mut self, shared: &Shared, now: Instant) {
        // Popped one by one: the list keeps its allocation.
        while let Some((qpn, peer)) = self.acks_due.pop() {
            self.drain_qp(shared, now, qpn, peer, false);
        }
    }

    /// Sends every postponed ACK now (before the engine sleeps).
    pub(crate) fn flush_acks(&mut self, shared: &Shared, now: Instant) {
        self.acks_due.append(&mut self.acks);
        self.send_due_acks(shared, now);
    }

    /// Sends what touched queue pairs have to send, delivers their
    /// completions, and re-arms their timers.
    pub(crate) fn finish_step(&mut self, shared: &Shared, now: Instant) {
        // CM first: its events may move QPs (accept, disconnect), which the
        // loop below then serves.
        self.pump_cm(shared, now);
        self.touched.sort_unstable();
        self.touched.dedup();
        // ACKs postponed by the previous step go out in this one.
        self.acks_due.append(&mut self.acks);
        let touched = std::mem::take(&mut self.touched);
        for &qpn in &touched {
            if let Some(peer) = self.qps.get(&qpn).and_then(|e| e.peer) {
                self.drain_qp(shared, now, qpn, peer, true);
            }
            let Some(e) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if e.qp.state() == QpState::Err && e.srq.is_none() {
                e.qp.flush_recv(&mut e.rq);
            }
            // Free the queue slots before the completions become visible: an
            // application that posts as soon as it polls a completion must
            // find room.
            e.retire_done();
            // The state first: an application that polls an error
            // completion must find the QP in ERR already (as in rxe). A
            // change the protocol made by itself (an exhausted retry, a
            // drained send queue) is logged here; modifications report their
            // own.
            let state = state_to_u8(e.qp.state());
            if e.shared.state.load(Ordering::Relaxed) != state {
                let from = state_from_u8(e.shared.state.load(Ordering::Relaxed));
                tracing::debug!(qp = qpn, ?from, to = ?e.qp.state(), "QP state");
                e.shared.state.store(state, Ordering::Release);
            }
            let mut flushed = 0u32;
            while let Some(wc) = e.qp.poll_completion() {
                if wc.status != WcStatus::Success {
                    flushed += log_error_completion(&wc);
                }
                let cq = match wc.queue {
                    ndverbs_proto::rc::WcQueue::Send => &e.send_cq,
                    ndverbs_proto::rc::WcQueue::Recv => &e.recv_cq,
                };
                cq.push(wc);
                self.delivered += 1;
            }
            if flushed > 0 {
                tracing::debug!(qp = qpn, requests = flushed, "work requests flushed");
            }
            if tracing::enabled!(tracing::Level::DEBUG) {
                e.log_counters();
            }
            if let Some(t) = e.qp.poll_timeout() {
                if e.armed.is_none_or(|a| t < a) {
                    e.armed = Some(t);
                    self.timers.push(Reverse((t, qpn)));
                }
            }
        }
        self.send_due_acks(shared, now);
        // Receives consumed from SRQs (any QP may have taken one).
        for s in self.srqs.values_mut() {
            let left = s.in_rq.saturating_sub(s.rq.len());
            if left > 0 {
                s.shared
                    .outstanding
                    .fetch_sub(left as u32, Ordering::AcqRel);
            }
            s.in_rq = s.rq.len();
        }
        self.touched = touched;
        self.touched.clear();
        self.delivered += self.later.len() as u64;
        for f in self.later.drain(..) {
            f();
        }
    }
}

/// Adds `n` to a counter only the engine (holding the core lock) writes: a
/// plain load and store, not a locked read-modify-write per packet.
#[inline]
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// Reports a completion with an error status; returns 1 for a flush (counted
/// and reported per step by the caller), else 0.
#[cold]
fn log_error_completion(wc: &ndverbs_proto::rc::WorkCompletion) -> u32 {
    match wc.status {
        WcStatus::WrFlushErr => return 1,
        WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr => tracing::warn!(
            qp = wc.qpn,
            wr_id = wc.wr_id,
            status = ?wc.status,
            "retries exhausted: the request failed and the QP went to error"
        ),
        _ => tracing::debug!(
            qp = wc.qpn,
            wr_id = wc.wr_id,
            status = ?wc.status,
            opcode = ?wc.opcode,
            "work request completed with an error"
        ),
    }
    0
}

/// Warns, once per process, that a socket's send buffer was full after a
/// wait (the packets are dropped; the transport retransmits them).
#[cold]
fn warn_send_buffer_full(peer: IpAddr) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(
            %peer,
            "UDP send buffer full: packets dropped and left to retransmission (counted in \
             send_would_block; raise net.core.wmem_max)"
        )
    });
}

/// Sends one packet (filling in its ICRC), waiting a moment once if the
/// socket buffer is full.
fn send(sock: &RoceSocket, shared: &Shared, pkt: &mut [u8], peer: IpAddr, flip: Option<usize>) {
    for attempt in 0..2 {
        match sock.send_to_flipped(pkt, peer, ROCEV2_PORT, flip) {
            Ok(()) => {
                shared.capture.tx(sock, peer, ROCEV2_PORT, 0, pkt);
                bump(&shared.counters.sent_datagrams, 1);
                return;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && attempt == 0 => {
                // The socket buffer is full: give the kernel a moment.
                wait_writable(sock);
            }
            Err(e) => {
                if e.kind() == io::ErrorKind::WouldBlock {
                    bump(&shared.counters.send_would_block, 1);
                    warn_send_buffer_full(peer);
                } else {
                    tracing::debug!(error = %e, %peer, "send failed");
                }
                return;
            }
        }
    }
}

/// The packets one `drain_qp` sends, grouped into GSO runs: a packet joins
/// the open run if it is no longer than the run's segment size (a shorter
/// one closes it) and the run stays within the GSO limits. Each packet's
/// headers (or all of it) sit in the transmit buffer; a zero-copy packet's
/// payload stays in registered memory, and the run gathers both (`pieces`).
/// ICRCs are filled in as packets join, since a packet's place in its run
/// decides its IPv4 ID.
#[derive(Default)]
pub(crate) struct RunBatch {
    runs: [Run; MAX_RUNS],
    /// Closed runs in `runs`.
    closed: usize,
    pieces: Vec<IoPiece>,
    /// Bytes of the transmit buffer in use.
    tx_end: usize,
    /// The open run: pieces from `iov_start`, `len` bytes, `count` packets
    /// of `seg` bytes.
    iov_start: usize,
    len: usize,
    seg: usize,
    count: usize,
    /// Packets in the batch (for the counters when a send fails).
    packets: usize,
}

impl RunBatch {
    fn reset(&mut self) {
        self.closed = 0;
        self.pieces.clear();
        self.tx_end = 0;
        (self.iov_start, self.len, self.seg, self.count, self.packets) = (0, 0, 0, 0, 0);
    }

    /// Whether another packet of any size fits in the batch.
    fn has_room(&self, cap: usize) -> bool {
        self.closed + usize::from(self.count > 0) < MAX_RUNS
            && self.tx_end + MAX_TRANSPORT <= cap
            && self.pieces.len() - self.iov_start + 2 + MAX_LENT_PIECES <= MAX_RUN_PIECES
    }

    /// The packet of `n` buffer bytes just written at `tx[tx_end..]` (plus
    /// `lent`'s payload, if any) joins the batch, its ICRC filled in.
    fn add(
        &mut self,
        sock: &mut RoceSocket,
        tx: &mut [u8],
        n: usize,
        lent: &LentPayload,
        peer: IpAddr,
    ) {
        let total = n + lent.len();
        let fits = self.count > 0
            && total <= self.seg
            && self.len + total <= MAX_GSO_BYTES
            && self.count < MAX_GSO_SEGMENTS;
        if !fits {
            self.close();
            self.seg = total;
        }
        let id = self.count as u16;
        let start = self.tx_end;
        let pkt = &mut tx[start..start + n];
        if lent.is_empty() {
            let crc = sock.icrc_mut(peer, ROCEV2_PORT, id, &[&pkt[..n - ICRC_LEN]]);
            pkt[n - ICRC_LEN..].copy_from_slice(&crc.unwrap_or(0).to_le_bytes());
            self.piece(IoPiece::of(pkt));
        } else {
            let h = lent.hdr_len;
            let mut parts: [&[u8]; MAX_LENT_PIECES + 2] = [&[]; MAX_LENT_PIECES + 2];
            parts[0] = &pkt[..h];
            for (i, &(base, len)) in lent.pieces().iter().enumerate() {
                // SAFETY: the memory table lent these bytes for this step
                // (`Memory::lend_local`): they stay mapped until it changes,
                // which needs the engine lock held throughout the send.
                parts[1 + i] = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
            }
            let k = lent.pieces().len();
            parts[1 + k] = &pkt[h..n - ICRC_LEN];
            let crc = sock
                .icrc_mut(peer, ROCEV2_PORT, id, &parts[..k + 2])
                .unwrap_or(0);
            pkt[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
            let pkt = &tx[start..start + n];
            self.piece(IoPiece::of(&pkt[..h]));
            for &(base, len) in lent.pieces() {
                self.piece(IoPiece { base, len });
            }
            self.piece(IoPiece::of(&pkt[h..]));
        }
        self.tx_end += n;
        self.len += total;
        self.count += 1;
        self.packets += 1;
        if total < self.seg {
            // A shorter packet ends a GSO run.
            self.close();
        }
    }

    /// Appends a piece, merged with the previous one of the same run when
    /// they touch (whole packets back to back in the buffer).
    fn piece(&mut self, p: IoPiece) {
        if self.pieces.len() > self.iov_start {
            if let Some(last) = self.pieces.last_mut() {
                if last.base + last.len == p.base {
                    last.len += p.len;
                    return;
                }
            }
        }
        self.pieces.push(p);
    }

    fn close(&mut self) {
        if self.count > 0 {
            self.runs[self.closed] = Run {
                iov: (self.iov_start, self.pieces.len()),
                len: self.len,
                seg: self.seg,
            };
            self.closed += 1;
        }
        self.iov_start = self.pieces.len();
        (self.len, self.count) = (0, 0);
    }

    /// Sends every run (waiting a moment once if the socket buffer is full)
    /// and empties the batch.
    fn flush(&mut self, sock: &RoceSocket, shared: &Shared, tx: &[u8], peer: IpAddr) {
        self.close();
        let mut done = 0;
        let mut waited = false;
        while done < self.closed {
            let runs = &self.runs[done..self.closed];
            // SAFETY: the pieces are the transmit buffer (borrowed for the
            // call) and regions the memory table lent for this step.
            let r = unsafe { sock.send_runs(&self.pieces, runs, peer, ROCEV2_PORT) };
            match r {
                Ok(k) => {
                    for r in &runs[..k] {
                        if shared.capture.is_on() && r.iov.1 - r.iov.0 == 1 {
                            // Captured packets are never lent: one piece.
                            let p = self.pieces[r.iov.0];
                            let off = p.base - tx.as_ptr() as usize;
                            let b = &tx[off..off + p.len];
                            shared
                                .capture
                                .tx_segments(sock, peer, ROCEV2_PORT, b, r.seg);
                        }
                        let pkts = r.len.div_ceil(r.seg);
                        self.packets -= pkts;
                        bump(&shared.counters.sent_datagrams, pkts as u64);
                    }
                    done += k;
                    if k == 0 {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !waited => {
                    waited = true;
                    wait_writable(sock);
                }
                Err(e) => {
                    if e.kind() == io::ErrorKind::WouldBlock {
                        bump(&shared.counters.send_would_block, self.packets as u64);
                        warn_send_buffer_full(peer);
                    } else {
                        tracing::debug!(error = %e, %peer, "send failed");
                    }
                    break;
                }
            }
        }
        self.reset();
    }
}

/// Waits up to a millisecond for room in the socket's send buffer.
fn wait_writable(sock: &RoceSocket) {
    let mut p = libc::pollfd {
        fd: sock.fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    unsafe { libc::poll(&mut p, 1, 1) };
}

/// Transmit buffer: a few full GSO runs.
const TX_BATCH_BYTES: usize = 4 * (MAX_GSO_BYTES + MAX_TRANSPORT);

/// Most datagrams one manual-progress step receives (it stops earlier at a
/// datagram that leaves something to deliver).
const MANUAL_RX_BATCH: usize = 8;

impl Shared {
    /// The engine's clock: nanoseconds since the adapter opened.
    fn now(&self) -> Instant {
        Instant::from_nanos(monotonic_ns().saturating_sub(self.epoch_ns))
    }

    /// Within the busy-poll window after the last datagram.
    fn busy(&self, c: &Core, now: Instant) -> bool {
        let window = self.busy_poll_ns.load(Ordering::Relaxed);
        window > 0
            && c.last_rx
                .is_some_and(|t| now.as_nanos().saturating_sub(t.as_nanos()) < window)
    }
}

/// Whether an engine thread that wakes by itself at `wake` would serve a
/// timer due at `deadline` (armed at `now`) later than the timer's own
/// length (all in engine nanoseconds): then a post must wake it.
fn wakes_too_late(wake: u64, deadline: u64, now: u64) -> bool {
    wake.saturating_sub(deadline) > deadline.saturating_sub(now)
}

/// `CLOCK_MONOTONIC` in nanoseconds (the clock of `std::time::Instant`,
/// read without its `Duration` arithmetic: a busy-polling loop reads it
/// on every turn).
fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// `NDV_BUSY_POLL_US`: the default busy-poll window, in microseconds.
fn busy_poll_from_env() -> u64 {
    std::env::var("NDV_BUSY_POLL_US")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(0, |us| us.saturating_mul(1000))
}

/// The worker thread: step, then sleep until a packet, a post or a deadline.
///
/// It holds the shared state only weakly between turns: when the application
/// drops its last handle the state (socket, tables) is freed and the worker
/// ends at its next wake-up (at most 100 ms later), releasing UDP port 4791.
fn worker(weak: std::sync::Weak<Shared>) {
    loop {
        let Some(shared) = weak.upgrade() else { return };
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        // Sleep at most 100 ms so a lost wake-up costs little.
        let max = Duration::from_millis(100);
        let (wait, busy) = {
            let _adapter = shared.span.enter();
            let mut c = shared.core.lock().unwrap_or_else(|e| e.into_inner());
            let now = shared.now();
            c.step(&shared, now);
            let wait = c.next_deadline().map_or(max, |d| {
                Duration::from_nanos(d.as_nanos().saturating_sub(now.as_nanos())).min(max)
            });
            // Published while the lock is held: a post that takes the lock
            // later sees the wake-up this thread will sleep until.
            shared.worker_wake_ns.store(
                now.as_nanos().saturating_add(wait.as_nanos() as u64),
                Ordering::Relaxed,
            );
            (wait, shared.busy(&c, now))
        };
        if busy {
            std::hint::spin_loop();
            continue;
        }
        shared.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !shared.work.is_empty() || shared.stop.load(Ordering::Acquire) {
            shared.sleeping.store(false, Ordering::SeqCst);
            continue;
        }
        let _ = wait_readable(&[shared.sock_fd, shared.doorbell.fd()], Some(wait));
        shared.sleeping.store(false, Ordering::SeqCst);
        shared.doorbell.drain();
    }
}

/// The CM message name of a MAD (its attribute ID), for the logs.
fn mad_name(mad: &[u8]) -> &'static str {
    use ndverbs_wire::cm::attr;
    // Attribute ID: bytes 16..18 of the MAD header.
    match u16::from_be_bytes([mad[16], mad[17]]) {
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        attr::SIDR_REQ => "SIDR_REQ",
        attr::SIDR_REP => "SIDR_REP",
        attr::LAP => "LAP",
        attr::APR => "APR",
        attr::CLASS_PORT_INFO => "ClassPortInfo",
        _ => "unknown",
    }
}

/// The transaction ID of a MAD (bytes 8..16 of its header).
fn mad_tid(mad: &[u8]) -> u64 {
    u64::from_be_bytes(mad[8..16].try_into().expect("8 bytes"))
}

/// Reports a MAD the CM agent took, and why it dropped it if it did.
#[cold]
fn log_mad_received(
    src: IpAddr,
    mad: &[u8],
    before: &ndverbs_proto::cm::CmCounters,
    after: &ndverbs_proto::cm::CmCounters,
) {
    let (name, tid) = (mad_name(mad), mad_tid(mad));
    let drop = [
        (before.rx_malformed, after.rx_malformed, "malformed"),
        (before.rx_unsupported, after.rx_unsupported, "unsupported"),
        (
            before.rx_unmatched,
            after.rx_unmatched,
            "no such connection",
        ),
        (before.rx_wrong_state, after.rx_wrong_state, "wrong state"),
        (
            before.rx_dreq_bad_qpn,
            after.rx_dreq_bad_qpn,
            "DREQ for another QP",
        ),
        (
            before.rx_after_removal,
            after.rx_after_removal,
            "device removed",
        ),
    ]
    .into_iter()
    .find(|(b, a, _)| a != b);
    match drop {
        Some((_, _, cause)) => tracing::debug!(from = %src, mad = name, tid, cause, "MAD dropped"),
        None if after.rx_duplicates != before.rx_duplicates => {
            tracing::debug!(from = %src, mad = name, tid, "MAD received (a retransmission)")
        }
        None => tracing::debug!(from = %src, mad = name, tid, "MAD received"),
    }
}

/// A scatter/gather element over a region (helper for callers).
pub fn sge(region: &Region, offset: usize, len: u32) -> Sge {
    Sge::new(region.addr() + offset as u64, len, region.lkey())
}

/// The node GUID of an adapter: a fixed prefix and the low bits of its address
/// (stable across runs, distinct per address).
pub fn node_guid(addr: IpAddr) -> u64 {
    let o = ndverbs_wire::cma::gid_of(addr).octets();
    u64::from_be_bytes([0x02, 0x00, 0x6e, 0x64, o[12], o[13], o[14], o[15]])
}

/// A weak adapter handle (the stats publisher's): alive while the
/// application holds any [`Adapter`] clone (the worker's own reference to the
/// shared state does not count).
#[derive(Clone)]
pub(crate) struct WeakAdapter {
    shared: std::sync::Weak<Shared>,
    thread: std::sync::Weak<Mutex<Option<JoinHandle<()>>>>,
}

impl WeakAdapter {
    pub(crate) fn is_alive(&self) -> bool {
        self.thread.strong_count() > 0
    }

    pub(crate) fn upgrade(&self) -> Option<Adapter> {
        Some(Adapter {
            shared: self.shared.upgrade()?,
            thread: self.thread.upgrade()?,
        })
    }
}

impl Adapter {
    pub(crate) fn downgrade(&self) -> WeakAdapter {
        WeakAdapter {
            shared: Arc::downgrade(&self.shared),
            thread: Arc::downgrade(&self.thread),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::wakes_too_late;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_post_wakes_the_engine_thread_only_for_a_timer_it_would_serve_too_late() {
        // Asleep until 100 ms: a 67 ms ACK timeout armed at 0 would fire
        // 33 ms late, less than its length: no wake-up.
        assert!(!wakes_too_late(100 * MS, 67 * MS, 0));
        // A 4 ms timeout would fire 96 ms late: wake it.
        assert!(wakes_too_late(100 * MS, 4 * MS, 0));
        // Exactly one length late is still tolerated.
        assert!(!wakes_too_late(100 * MS, 50 * MS, 0));
        // A thread that wakes before the deadline anyway, or is awake (its
        // last wake-up in the past), needs nothing.
        assert!(!wakes_too_late(3 * MS, 4 * MS, 0));
        assert!(!wakes_too_late(0, 4 * MS, 2 * MS));
        // A timer already due: any lateness is too much.
        assert!(wakes_too_late(10 * MS, 5 * MS, 5 * MS));
    }
}
