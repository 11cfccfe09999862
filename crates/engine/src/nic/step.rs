//! The engine loop: one step is a short list of named stages.
//!
//! ```text
//! step:         drive_posts ─ drive_receive ─ drive_link_errors ─ drive_timers ─ drive_cm_timer ─┐
//!                                                                                               │
//! finish_step:  drive_cm ─ drive_transmit ─ drive_completions ─                                ◄┘
//!               drive_postponed_acks ─ drive_srq_credits ─ drive_requests
//! ```
//!
//! The inputs of a step — posted work, datagrams, expired timers — mark the
//! queue pairs they reach as *touched*; `finish_step` then serves exactly
//! those: the CM first (its events may move QPs, accepting or
//! disconnecting), then what the touched QPs have to send, then their state
//! changes and completions, the ACKs the previous step postponed, the
//! receives taken from shared queues, and last the endpoint requests that
//! completed (after the packets they produced are out). Control calls that
//! change a QP (modify, destroy, endpoint requests) end with `finish_step`
//! too, so everything they caused leaves at once.
//!
//! `drive_link_errors` reads what the network said about packets sent
//! earlier, only when the link says something waits (a send or receive met
//! a pending socket error, or `poll` reported `POLLERR`): an ICMP port
//! unreachable from a host with no RoCE endpoint ends the connects waiting
//! for its REP there (`CmAgent::handle_unreachable`); the rest is counted.
//!
//! The order inside `finish_step` is what the application can rely on: a
//! QP's send slots are freed before its completions become visible (an
//! application that posts as soon as it polls must find room), and its state
//! is updated first (one that polls an error completion finds the QP in ERR,
//! as in rxe).

use super::core::{Core, Shared};
use super::tables::{state_from_u8, state_to_u8};
use super::trace::{log_error_completion, log_mad_received, mad_name, mad_tid};
use crate::config::Progress;
use crate::link::Link;
use ndverbs_proto::rc::{QpState, WcQueue, WcStatus};
use ndverbs_proto::time::Instant;
use std::sync::atomic::Ordering;

impl Core {
    /// Whether the thread running this step will look at completions as
    /// soon as it returns: always in manual progress, and with an engine
    /// thread when an application thread runs the step from its CQ poll.
    /// Such a step stops receiving at a completion and lets ACKs wait for
    /// an answer to ride with (`receive.rs`, `transmit.rs`).
    pub(crate) fn caller_polls(&self, shared: &Shared) -> bool {
        shared.mode == Progress::Manual || self.empty_poll
    }

    /// One turn of the engine loop.
    pub(crate) fn step(&mut self, shared: &Shared, now: Instant) {
        let mut busy = self.drive_posts(shared, now);
        busy |= self.drive_receive(shared, now);
        busy |= self.drive_link_errors(shared, now);
        self.drive_timers(now);
        busy |= self.drive_cm_timer(now);
        // An idle step (nothing arrived, nothing to follow up) skips the rest.
        if busy
            || !self.touched.is_empty()
            || !self.acks.is_empty()
            || !self.deliveries.later.is_empty()
            || self.paths.poll_at().is_some_and(|t| t <= now)
        {
            // A step with no input leaves a postponed ACK waiting
            // (`drive_postponed_acks`).
            self.idle_input = !busy && self.touched.is_empty();
            self.finish_step(shared, now);
            self.idle_input = false;
        }
    }

    /// Serves what the step's inputs touched (see the module docs).
    pub(crate) fn finish_step(&mut self, shared: &Shared, now: Instant) {
        self.qp_changes += 1;
        self.drive_cm(shared, now);
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        self.acks.start_step();
        self.drive_transmit(shared, now, &mut touched);
        self.drive_completions(&touched);
        self.drive_postponed_acks(shared, now);
        self.drive_srq_credits();
        self.drive_requests();
        // Handed back empty: the list keeps its allocation.
        touched.clear();
        self.touched = touched;
    }

    /// Whether nothing here can need the engine before a packet arrives or
    /// an application thread takes the core lock: no queue pair, no
    /// endpoint (listeners included), no deadline, no postponed ACK, no
    /// input left over, no shared port (whose membership is kept in
    /// steps). A device a program opened and left unused (libfabric opens
    /// every address it lists) is in this state.
    pub(crate) fn is_idle(&self) -> bool {
        self.tables.qps.is_empty()
            && self.tables.ud.is_empty()
            && self.eps.machine.eps.is_empty()
            && self.is_quiet()
    }

    /// Whether nothing here can need the engine before a packet arrives, a
    /// post is made or a thread takes the core lock — each of which wakes
    /// a sleeping engine thread (the link is readable; a post that leaves
    /// work or arms a timer the thread would serve late rings its
    /// doorbell; `Nic::lock_for_step`): no deadline, no postponed ACK, no
    /// input left over, no endpoint action waiting, no shared port (whose
    /// membership is kept in steps). Queue pairs and endpoints may exist:
    /// connected and quiet, they need nothing else.
    pub(crate) fn is_quiet(&self) -> bool {
        self.eps.machine.actions.is_empty()
            && self.acks.is_empty()
            && self.io.rx_rest.is_none()
            && self.share.is_none()
            && self.deliveries.later.is_empty()
            && self.next_deadline().is_none()
    }

    /// When the engine next has something to do by itself: a QP timer, a
    /// packet the link holds back, a CM timer, or a paced path's release.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        [
            self.timers.next(),
            self.io.link.poll_at(),
            self.cm.poll_timeout(),
            self.paths.poll_at(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs the QP timers that expired.
    fn drive_timers(&mut self, now: Instant) {
        while let Some((t, qpn)) = self.timers.pop_due(now) {
            let Some(e) = self.tables.qps.get_mut(&qpn) else {
                continue;
            };
            if e.armed == Some(t) {
                e.armed = None;
            }
            match e.qp.poll_timeout() {
                Some(d) if d <= now => {
                    e.qp.handle_timeout(now);
                    self.touched.push(qpn);
                }
                // Restarted since: re-arm for the current deadline.
                Some(d) => self.timers.arm(&mut e.armed, qpn, d),
                None => {}
            }
        }
    }

    /// Runs the CM's timer if it expired; true if it did.
    fn drive_cm_timer(&mut self, now: Instant) -> bool {
        if self.cm.poll_timeout().is_none_or(|t| t > now) {
            return false;
        }
        let retries = self.cm.counters().tx_retries;
        self.cm.handle_timeout(now);
        let n = self.cm.counters().tx_retries - retries;
        if n > 0 {
            tracing::debug!(mads = n, "CM timeout: retransmitting");
        }
        true
    }

    /// Moves MADs between QP1 and the CM agent, lets endpoints react to CM
    /// events, and sends what QP1 has to send, until nothing moves.
    #[inline]
    fn drive_cm(&mut self, shared: &Shared, now: Instant) {
        // Nearly every step brings the CM nothing: say so in a few loads,
        // and keep the handlers (large, and rare) out of the data path's
        // frame.
        if self.gsi.has_work() || self.cm.has_output() {
            self.drive_cm_traffic(shared, now);
        }
    }

    #[cold]
    #[inline(never)]
    fn drive_cm_traffic(&mut self, shared: &Shared, now: Instant) {
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
            while let Some((n, dst)) = self
                .gsi
                .poll_transmit(&mut self.tables.mem, &mut self.io.tx)
            {
                self.send_packet(shared, dst, n);
                busy = true;
            }
            if !busy {
                break;
            }
        }
    }

    /// Publishes the touched queue pairs' state changes and completions,
    /// frees their queue slots and re-arms their timers.
    fn drive_completions(&mut self, touched: &[u32]) {
        for &qpn in touched {
            let Some(e) = self.tables.qps.get_mut(&qpn) else {
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
                    WcQueue::Send => &e.send_cq,
                    WcQueue::Recv => &e.recv_cq,
                };
                cq.push(wc);
                self.deliveries.count += 1;
            }
            if flushed > 0 {
                tracing::debug!(qp = qpn, requests = flushed, "work requests flushed");
            }
            if tracing::enabled!(tracing::Level::DEBUG) {
                e.log_counters();
            }
            if let Some(t) = e.qp.poll_timeout() {
                self.timers.arm(&mut e.armed, qpn, t);
            }
        }
    }

    /// Frees the application's SRQ slots of the receives any QP consumed.
    fn drive_srq_credits(&mut self) {
        for s in self.tables.srqs.values_mut() {
            let left = s.in_rq.saturating_sub(s.rq.len());
            if left > 0 {
                s.shared
                    .outstanding
                    .fetch_sub(left as u32, Ordering::AcqRel);
                s.shared.check_limit();
            }
            s.in_rq = s.rq.len();
        }
    }

    /// Completes the endpoint requests the step finished.
    fn drive_requests(&mut self) {
        self.deliveries.count += self.deliveries.later.len() as u64;
        for f in self.deliveries.later.drain(..) {
            f();
        }
    }
}
