//! The engine's state: everything a step touches, behind one lock, with its
//! fields grouped by job.
//!
//! [`Core`] is the private half of a NIC (the [`Shared`] state around it is
//! what application threads reach without the lock). Its methods are spread
//! over the sibling modules by concern — the step loop (`step.rs`),
//! transmit (`transmit.rs`), receive (`receive.rs`), the post path
//! (`post.rs`) — and the endpoint requests (`crate::ep`); this module only
//! defines the state.

use super::batch::RunBatch;
use super::congestion::Paths;
use super::tables::{Tables, Work};
use crate::config::Progress;
use crate::counters::NicCounters;
use crate::ep::{EpTable, Later};
use crate::event::EventFd;
use crate::gsi::Gsi;
use crate::icrc::IcrcCache;
use crate::link::capture::CaptureSlot;
use crate::link::{Datagram, Link, NicLink, Run, MAX_DATAGRAM, MAX_TRANSPORT};
use crossbeam_queue::SegQueue;
use ndverbs_proto::cm::CmAgent;
use ndverbs_proto::rc::PathMtu;
use ndverbs_proto::time::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

/// The link stack of a NIC: capture around faults around the link.
pub(crate) type Stack = CapturedLink<FaultyLink<NicLink>>;

/// The fault layer, when built in (feature `faults`).
#[cfg(feature = "faults")]
pub(crate) type FaultyLink<L> = crate::link::faults::FaultLink<L>;
#[cfg(not(feature = "faults"))]
pub(crate) type FaultyLink<L> = L;

/// The capture layer, when built in (feature `capture`).
#[cfg(feature = "capture")]
pub(crate) type CapturedLink<L> = crate::link::capture::CaptureLink<L>;
#[cfg(not(feature = "capture"))]
pub(crate) type CapturedLink<L> = L;

/// The engine's state: everything the worker touches, behind one lock.
pub(crate) struct Core {
    /// Every object of the NIC, by id.
    pub(crate) tables: Tables,
    /// The connection manager of this NIC's GID.
    pub(crate) cm: CmAgent,
    /// QP1, carrying the CM's MADs.
    pub(crate) gsi: Gsi,
    /// Connection endpoints.
    pub(crate) eps: EpTable,
    /// The link and its buffers.
    pub(crate) io: Io,
    /// Queue pairs' deadlines.
    pub(crate) timers: Timers,
    /// ACKs postponed for an answer to ride with (see [`AckPlan`]).
    pub(crate) acks: AckPlan,
    /// What the step hands to the application besides completions.
    pub(crate) deliveries: Deliveries,
    /// Queue pairs this step gave input (posts, packets, timeouts,
    /// modifications): the end of the step sends what they produced and
    /// delivers their completions.
    pub(crate) touched: Vec<u32>,
    /// A packet of this step left a completion or a CM packet to deliver: a
    /// manual-progress step stops receiving and returns to its caller.
    pub(crate) completion_ready: bool,
    /// The step runs because a spinning thread's CQ poll found nothing
    /// (`Nic::poll_step`): that thread polls again soon. With an engine
    /// thread present, such a step behaves as a manual-progress step (see
    /// [`Core::caller_polls`]).
    pub(crate) empty_poll: bool,
    /// The step being finished had no input (nothing posted or received):
    /// with `empty_poll`, a postponed ACK waits through it.
    pub(crate) idle_input: bool,
    /// The port's active MTU ([`crate::config::NicConfig::active_mtu`]):
    /// an application's modification above it is refused, what the CM
    /// negotiated is lowered to it.
    pub(crate) active_mtu: PathMtu,
    /// Congestion control: a controller per peer, when on.
    pub(crate) paths: Paths,
    /// The shared port this NIC is a member of, if it shares its address.
    pub(crate) share: Option<ShareState>,
    /// Counts the moments a QP's counters may have changed: a step that
    /// finished with work, a packet a QP sent, a control call (see
    /// `counter_sum.rs`, which reuses a sum taken at the same count).
    pub(crate) qp_changes: u64,
    /// The last sum of the QPs' counters and `qp_changes` when it was
    /// taken (`counter_sum.rs`).
    pub(crate) last_sum: Option<(u64, ndverbs_proto::rc::Counters)>,
}

/// A sharing NIC's membership and the listeners it registered host-wide.
pub(crate) struct ShareState {
    pub(crate) port: std::sync::Arc<crate::share::SharedPort>,
    /// Listening endpoint → its service ID, to unregister on destroy.
    pub(crate) listeners: std::collections::HashMap<u32, u64>,
}

/// The link, the packet buffers and the transmit batch.
pub(crate) struct Io {
    pub(crate) link: Stack,
    /// Signs what is sent and verifies what arrives.
    pub(crate) icrc: IcrcCache,
    pub(crate) rx: Box<[u8]>,
    /// Room for a `sendmmsg` batch of GSO runs (a 64 KiB WRITE is two runs:
    /// the first packet is longer than the rest).
    pub(crate) tx: Box<[u8]>,
    /// The packets `drain_qp` is sending (kept to reuse its piece list).
    pub(crate) batch: RunBatch,
    /// Manual progress: the packets of a coalesced datagram in `rx` not yet
    /// dispatched (from this offset), left for the next step because an
    /// earlier one had a completion to deliver.
    pub(crate) rx_rest: Option<(Datagram, usize)>,
    /// Converts the link's receive time stamps to the engine's clock, when
    /// they are on (congestion control).
    pub(super) rx_clock: Option<super::rx_clock::RxClock>,
}

/// Transmit buffer: a few full GSO runs.
const TX_BATCH_BYTES: usize = 4 * (Run::MAX_BYTES + MAX_TRANSPORT);

impl Io {
    pub(crate) fn new(link: Stack) -> Io {
        Io {
            icrc: IcrcCache::new(link.local_addr()),
            link,
            rx: vec![0u8; MAX_DATAGRAM].into_boxed_slice(),
            tx: vec![0u8; TX_BATCH_BYTES].into_boxed_slice(),
            batch: RunBatch::default(),
            rx_rest: None,
            rx_clock: None,
        }
    }
}

/// Queue pairs' deadlines: a min-heap of `(deadline, QPN)`.
///
/// A QP keeps at most about one entry: a later deadline needs none (the
/// armed one re-arms it when it fires), so the heap stays small however
/// often timers restart.
#[derive(Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Instant, u32)>>,
}

impl Timers {
    /// Arms `qpn` for `at` unless it is armed for no later (`armed` is the
    /// QP's record of its earliest entry).
    pub(crate) fn arm(&mut self, armed: &mut Option<Instant>, qpn: u32, at: Instant) {
        if armed.is_none_or(|a| at < a) {
            *armed = Some(at);
            self.heap.push(Reverse((at, qpn)));
        }
    }

    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    /// The earliest entry due by `now`, taken off the heap.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Instant, u32)> {
        match self.heap.peek() {
            Some(Reverse((t, _))) if *t <= now => self.heap.pop().map(|Reverse(e)| e),
            _ => None,
        }
    }
}

/// Manual progress: queue pairs (and their peers) whose plain ACK a step
/// left unbuilt in the responder because the QP had a completion the
/// application may answer at once — the answer then leaves first, with the
/// ACK riding in its GSO run (see `drain_qp`).
///
/// A step that completes one of the QP's own requests (the send
/// completion the peer's ACK just brought, which the application awaits
/// before it answers), or one with no input at all (an empty poll),
/// postpones the ACK again, at most [`AckPlan::MAX_POSTPONED`] steps in a
/// row. Any other step sends it, as does the engine before it sleeps
/// (`flush_acks`).
#[derive(Default)]
pub(crate) struct AckPlan {
    /// Postponed by this step, with the number of steps in a row.
    pub(crate) postponed: Vec<Postponed>,
    /// Postponed by the previous step: due in this one.
    pub(crate) due: Vec<Postponed>,
}

/// A postponed ACK: the QP, its peer and how many steps in a row it waited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Postponed {
    pub(crate) qpn: u32,
    pub(crate) peer: IpAddr,
    pub(crate) steps: u8,
}

impl AckPlan {
    /// Most steps in a row one ACK waits for an answer to ride with.
    pub(crate) const MAX_POSTPONED: u8 = 4;

    /// A new step: what the last one postponed is due.
    pub(crate) fn start_step(&mut self) {
        self.due.append(&mut self.postponed);
    }

    /// How many steps in a row `qpn`'s ACK has waited if it is due (it is
    /// then no longer); 0 if it is not.
    pub(crate) fn take_due(&mut self, qpn: u32) -> u8 {
        match self.due.iter().position(|p| p.qpn == qpn) {
            Some(i) => self.due.swap_remove(i).steps,
            None => 0,
        }
    }

    /// Postpones `qpn`'s ACK to `peer` to the next step, `waited` steps in
    /// a row before this one.
    pub(crate) fn postpone(&mut self, qpn: u32, peer: IpAddr, waited: u8) {
        if !self.postponed.iter().any(|p| p.qpn == qpn) {
            self.postponed.push(Postponed {
                qpn,
                peer,
                steps: waited + 1,
            });
        }
    }

    /// Drops whatever `qpn` has postponed or due (its ACK left otherwise).
    pub(crate) fn forget(&mut self, qpn: u32) {
        self.postponed.retain(|p| p.qpn != qpn);
        self.due.retain(|p| p.qpn != qpn);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.postponed.is_empty() && self.due.is_empty()
    }
}

#[cfg(test)]
mod ack_plan_tests {
    use super::AckPlan;
    use std::net::{IpAddr, Ipv4Addr};

    const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn a_postponed_ack_is_due_in_the_next_step_only() {
        let mut plan = AckPlan::default();
        plan.postpone(7, PEER, 0);
        plan.postpone(7, PEER, 0);
        assert_eq!(plan.take_due(7), 0, "not due in the step that postponed it");
        plan.start_step();
        assert_eq!(plan.take_due(8), 0);
        assert_eq!(plan.take_due(7), 1);
        assert_eq!(plan.take_due(7), 0, "taken once");
        assert!(plan.is_empty());
    }

    #[test]
    fn postponing_again_counts_the_steps_in_a_row() {
        let mut plan = AckPlan::default();
        let mut waited = 0;
        for _ in 0..AckPlan::MAX_POSTPONED {
            plan.postpone(7, PEER, waited);
            plan.start_step();
            waited = plan.take_due(7);
        }
        assert_eq!(waited, AckPlan::MAX_POSTPONED);
    }
}

/// What a step hands to the application besides completions.
#[derive(Default)]
pub(crate) struct Deliveries {
    /// Endpoint request completions, run at the end of the step (after the
    /// packets it produced are out).
    pub(crate) later: Later,
    /// Completions and request results delivered so far (`progress_wait`
    /// does not sleep after a step that delivered something).
    pub(crate) count: u64,
}

/// What the NIC's handles share with the engine: the core behind its lock,
/// and what application threads touch without it.
pub(crate) struct Shared {
    pub(crate) local: IpAddr,
    pub(crate) mode: Progress,
    pub(crate) core: Mutex<Core>,
    /// Queue pairs and SRQs with posts waiting in their queues.
    pub(super) work: SegQueue<Work>,
    /// Wakes the worker thread.
    pub(crate) doorbell: EventFd,
    /// The worker thread is asleep (or about to be): a post must ring.
    pub(crate) sleeping: AtomicBool,
    /// A thread sleeps long because nothing needed the engine (the engine
    /// thread, or a manual-progress waiter in
    /// `Nic::progress_wait_or_idle`): set under the core lock, so a thread
    /// that takes the lock next to change that rings the doorbell.
    pub(crate) idle_sleep: AtomicBool,
    pub(crate) removed: AtomicBool,
    /// Tells the worker thread to end.
    pub(crate) stop: AtomicBool,
    /// `CLOCK_MONOTONIC` at open, in nanoseconds: the engine's time zero.
    pub(crate) epoch_ns: u64,
    pub(crate) counters: NicCounters,
    /// The link's readiness descriptor (valid while the core lives).
    pub(crate) link_fd: RawFd,
    /// The link's descriptor polled `POLLERR` while the core was not held:
    /// the next step tells the link (`Link::note_error_event`).
    pub(crate) link_error: AtomicBool,
    /// Packet capture (off unless switched on; see
    /// [`crate::link::capture`]), shared with the link stack.
    pub(crate) capture: Arc<CaptureSlot>,
    /// When the engine thread will wake up by itself, in engine nanoseconds,
    /// written under the core lock before it sleeps (see `Nic::post_direct`).
    pub(crate) worker_wake_ns: AtomicU64,
    /// When an application thread last polled an empty completion queue
    /// (`Nic::poll_step`), in engine nanoseconds; 0 when none is polling.
    /// While one polls, the engine thread leaves the link to it (see
    /// `worker`).
    pub(crate) busy_poll_ns: AtomicU64,
    /// How long a manual-progress waiter polls before it sleeps.
    pub(crate) spin: super::spin::SpinWindow,
    /// The `nic` span (field `local`), entered by every engine step and
    /// control call, so that ids in the logs name their NIC.
    pub(crate) span: tracing::Span,
}
