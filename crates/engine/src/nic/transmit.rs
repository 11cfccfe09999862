//! Transmit: what queue pairs have to send goes to the link in GSO runs, and
//! manual progress postpones a plain ACK by one step.
//!
//! **Batching.** `drain_qp` takes every packet a queue pair has for its peer
//! and hands them to the link in runs of equal-size packets, up to
//! [`Runs::MAX`](crate::link::Runs::MAX) runs per call (one `sendmmsg` on a
//! UDP socket); payloads of registered memory are sent from where they are
//! (zero-copy), only headers are written to the transmit buffer (see
//! `batch.rs`). This is the only send path of queue pairs, whatever wraps
//! the link.
//!
//! **Congestion control** (when configured, `congestion.rs`): each drain
//! first feeds the QP's signals to its peer's controller and gives the QP
//! the path's free window as its send budget (bounded by its pacer while
//! the path is congested); QPs that ran out wait on the path and are
//! drained when its window has room again and its pacer releases.
//!
//! **ACK postponement.** In manual progress the application runs the engine
//! from the thread that will answer a message. When a step leaves a QP with
//! a completion to deliver, its plain ACK waits: the application may answer
//! at once, and the ACK then rides as the short last segment of the
//! answer's GSO run — one send for both, and one (GRO'd) receive at the
//! peer, whose RC requester (perftest's `send_lat`, for one) often waits
//! for that ACK before it looks at the answer. A step that completes one
//! of the QP's own requests (the send completion the peer's ACK brought,
//! which the application is waiting for before it answers) postpones the
//! ACK again, a few steps at most (`AckPlan`), and so does a step with no
//! input at all (an empty poll before the answer is posted); any other step
//! sends it, with whatever data the QP has. Without a completion (the target of an
//! RDMA WRITE stream) nobody will answer: the ACK goes at once, or the
//! sender's window would wait a step for it. Every postponed ACK leaves before the engine sleeps
//! (`flush_acks`).

use super::core::Shared;
use super::core::{AckPlan, Core};
use crate::counters::bump;
use crate::link::{Link, SendFailure};
use ndverbs_proto::mem::LentPayload;
use ndverbs_proto::rc::QpState;
use ndverbs_proto::time::Instant;
use ndverbs_wire::ip::ROCEV2_PORT;
use std::net::{IpAddr, SocketAddr};

impl Core {
    /// Sends what the queue pairs `touched` have to send, then what the
    /// QPs waiting for their path's window or pacer may send now; those are
    /// added to `touched`, so that the step re-arms their timers too (a QP
    /// that sends only when its path releases it would otherwise have no
    /// retransmission timer for what it sent, and a loss would stall it).
    pub(super) fn drive_transmit(&mut self, shared: &Shared, now: Instant, touched: &mut Vec<u32>) {
        for &qpn in touched.iter() {
            if let Some(peer) = self.tables.qps.get(&qpn).and_then(|e| e.peer) {
                self.drain_qp(shared, now, qpn, peer, true);
            }
        }
        // Congestion control: QPs that waited for their path's window.
        let mut ready = Vec::new();
        self.paths.take_ready(now, &mut ready);
        for (qpn, peer) in ready {
            self.drain_qp(shared, now, qpn, peer, true);
            if !touched.contains(&qpn) {
                touched.push(qpn);
            }
        }
    }

    /// Sends everything queue pair `qpn` has to send to `peer` (see the
    /// module docs); `may_postpone`: its plain ACK may wait for the next
    /// step.
    pub(super) fn drain_qp(
        &mut self,
        shared: &Shared,
        now: Instant,
        qpn: u32,
        peer: IpAddr,
        may_postpone: bool,
    ) {
        self.qp_changes += 1;
        let dst = SocketAddr::new(peer, ROCEV2_PORT);
        let waited = self.acks.take_due(qpn);
        let due = waited > 0;
        let caller_polls = self.caller_polls(shared);
        // One lookup for the whole drain: the entry, the memory table, the
        // link and the paths are separate fields.
        let Some(e) = self.tables.qps.get_mut(&qpn) else {
            return;
        };
        let mem = &mut self.tables.mem;
        // (A QP in ERR answers nothing: its completions are flushes.) An
        // ACK waits again only for a step that completed one of the QP's
        // own requests — the application was waiting for that and answers
        // next; more receives (a stream of SENDs) must not hold it.
        let postpone = may_postpone && waited < AckPlan::MAX_POSTPONED && caller_polls && {
            let waiting = if waited == 0 {
                e.qp.has_completion()
            } else {
                e.qp.has_send_completion()
            };
            waiting && e.qp.state() != QpState::Err
        };
        if postpone && e.qp.owes_only_ack() && !e.qp.may_transmit(false) {
            // Nothing leaves now (the application is about to answer), so
            // no batch and no path: the controller takes the QP's signals
            // at its next drain, the answer's.
            self.acks.postpone(qpn, peer, waited);
            return;
        }
        let ack_last = postpone || due;
        self.paths
            .before_drain(now, peer, qpn, &mut e.qp, &shared.counters);
        // One per drain: it remembers the bytes the memory table lent whole
        // (an SGE, a READ's range) for the packets after, which holds while
        // the table cannot change — under the lock, until the drain ends.
        let mut lent = LentPayload::default();
        let io = &mut self.io;
        io.batch.reset(io.link.gso());
        loop {
            if !io.batch.has_room(io.tx.len()) {
                io.batch.flush(&mut io.link, &shared.counters, dst);
            }
            let end = io.batch.tx_end();
            let buf = &mut io.tx[end..];
            let requests_only = ack_last && e.qp.owes_only_ack();
            if !e.qp.may_transmit(!requests_only) {
                break;
            }
            let n = if requests_only {
                e.qp.poll_transmit_requests(now, mem, buf, Some(&mut lent))
            } else {
                e.qp.poll_transmit_lending(now, mem, buf, Some(&mut lent))
            };
            let Some(n) = n else {
                break;
            };
            io.batch.add(&mut io.icrc, &mut io.tx, n, &lent, dst);
        }
        if ack_last && e.qp.owes_only_ack() {
            // With data leaving now the ACK rides with it rather than wait.
            if postpone && io.batch.is_empty() {
                self.acks.postpone(qpn, peer, waited);
            } else {
                // The data first, then the ACK riding as the short last
                // segment of the data's GSO run.
                if !io.batch.has_room(io.tx.len()) {
                    io.batch.flush(&mut io.link, &shared.counters, dst);
                }
                let end = io.batch.tx_end();
                if let Some(n) =
                    e.qp.poll_transmit_lending(now, mem, &mut io.tx[end..], None)
                {
                    lent.clear();
                    io.batch.add(&mut io.icrc, &mut io.tx, n, &lent, dst);
                }
            }
        }
        io.batch.flush(&mut io.link, &shared.counters, dst);
        self.paths
            .after_drain(now, peer, qpn, &mut e.qp, &shared.counters);
    }

    /// Sends the plain ACK queue pair `qpn` owes now, alone, postponed or
    /// not: before a reset, which forgets it. The peer's requests whose
    /// completions the application took must complete at the peer too (a
    /// program that takes its last message and destroys its QP, which
    /// resets it first, must not fail the peer's send).
    pub(super) fn send_owed_ack(&mut self, shared: &Shared, qpn: u32) {
        self.qp_changes += 1;
        self.acks.forget(qpn);
        let Some(e) = self.tables.qps.get_mut(&qpn) else {
            return;
        };
        let Some(peer) = e.peer else {
            return;
        };
        let dst = SocketAddr::new(peer, ROCEV2_PORT);
        let io = &mut self.io;
        io.batch.reset(io.link.gso());
        let end = io.batch.tx_end();
        if let Some(n) = e.qp.poll_owed_ack(&mut self.tables.mem, &mut io.tx[end..]) {
            io.batch
                .add(&mut io.icrc, &mut io.tx, n, &LentPayload::default(), dst);
            io.batch.flush(&mut io.link, &shared.counters, dst);
        }
    }

    /// Sends the ACKs the previous step postponed whose QPs had nothing
    /// else to send in this one — unless this step had no input at all and
    /// ran for a CQ poll that found nothing (libfabric's rxm polls once
    /// more after each completion, to find its queue drained, before the
    /// application answers): the ACK waits again,
    /// [`AckPlan::MAX_POSTPONED`] steps in a row at most. An explicit
    /// progress call sends it.
    pub(super) fn drive_postponed_acks(&mut self, shared: &Shared, now: Instant) {
        // (A step for an empty poll is always one whose caller polls.)
        let hold = self.idle_input && self.empty_poll;
        // Popped one by one: the list keeps its allocation.
        while let Some(p) = self.acks.due.pop() {
            if hold && p.steps < AckPlan::MAX_POSTPONED {
                self.acks.postpone(p.qpn, p.peer, p.steps);
                continue;
            }
            self.drain_qp(shared, now, p.qpn, p.peer, false);
        }
    }

    /// Sends every postponed ACK now (before the engine sleeps).
    pub(crate) fn flush_acks(&mut self, shared: &Shared, now: Instant) {
        self.acks.start_step();
        self.drive_postponed_acks(shared, now);
    }

    /// Sends `self.io.tx[..n]`, a packet of QP1, to `peer`.
    pub(super) fn send_packet(&mut self, shared: &Shared, peer: IpAddr, n: usize) {
        let dst = SocketAddr::new(peer, ROCEV2_PORT);
        let io = &mut self.io;
        let pkt = &mut io.tx[..n];
        if let Err(e) = io.icrc.fill(pkt, dst, 0) {
            tracing::debug!(error = %e, %peer, "packet not sent");
            return;
        }
        match io.link.send(pkt, dst) {
            Ok(()) => {
                bump(&shared.counters.send_calls, 1);
                bump(&shared.counters.sent_datagrams, 1);
            }
            Err(e) => {
                let failure = SendFailure::of(&e);
                super::batch::count_refused(&shared.counters, failure, &e, 1, dst);
            }
        }
    }
}
