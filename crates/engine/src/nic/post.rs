//! The post path: work requests from the application's threads into the
//! protocol.
//!
//! A post is checked at once against what the application side of the QP
//! knows (state, limits, queue room), so a bad one fails synchronously, as
//! rxe's `post_send` does. Then, when no thread is running the engine, the
//! post takes the core lock itself and goes straight into the protocol, and
//! a send leaves in the same call, as a NIC's doorbell starts a
//! transmission: no queue, and no wake-up of the worker thread (woken only
//! when a timer the post armed would otherwise fire late by more than its
//! own length). When the engine is busy, the post goes through the QP's
//! lock-free queue and a work item, and that step serves it (`drive_posts`);
//! a later direct post takes what is queued for its QP first, so the order
//! holds.

use super::core::{Core, Shared};
use super::tables::{QpEntry, QpShared, SrqShared, Work};
use super::worker::wakes_too_late;
use super::Nic;
use crate::config::Progress;
use crate::error::EngineError;
use ndverbs_proto::rc::{validate_recv, validate_send, PostError, QpState, RecvWr, SendWr};
use ndverbs_proto::time::Instant;
use std::sync::atomic::{fence, Ordering};

impl Nic {
    /// Posts a send request: sent at once if the engine is free, else queued
    /// for the step that is running (see the module docs on posting).
    pub fn post_send(&self, qp: &QpShared, wr: SendWr) -> Result<(), EngineError> {
        self.check()?;
        if qp.ud {
            return Err(EngineError::InvalidArgument(
                "a UD queue pair sends datagrams (post_ud_send), each to an address",
            ));
        }
        // What the protocol would refuse later is refused here, at once, as
        // rxe's post_send does (EINVAL), not as a completion.
        validate_send(&qp.caps, qp.state(), &wr)?;
        if qp.sq_outstanding.fetch_add(1, Ordering::AcqRel) >= qp.caps.max_send_wr {
            qp.sq_outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError::QueueFull(qp.caps.max_send_wr).into());
        }
        // Straight into the protocol and onto the wire from the caller's
        // thread, as a NIC's doorbell starts a transmission, instead of
        // through the post queue and the next progress call or a wake-up of
        // the engine thread. When another thread is running the engine, the
        // queue: that step serves the post.
        let Err(wr) = self.post_direct(qp, wr, |e, wr| {
            e.take_send(wr);
            true
        }) else {
            return Ok(());
        };
        qp.sq_in.push(wr);
        self.queue_qp(qp);
        Ok(())
    }

    /// Hands a post to the protocol at once if the engine is free; gives it
    /// back otherwise (another thread runs the engine, or the QP is gone
    /// from the tables), for the post queue. `take` gives it to the QP —
    /// after what is still queued for the QP, so the order holds — and says
    /// whether the QP has something for a step now: then the step runs in
    /// this call (a send is transmitted before it returns).
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
        take: impl FnOnce(&mut QpEntry, W) -> bool,
    ) -> Result<(), W> {
        let Ok(mut c) = self.shared.core.try_lock() else {
            return Err(wr);
        };
        let _nic = self.shared.span.enter();
        c.qp_changes += 1;
        let Some(e) = c.entry_in_order(qp.qpn) else {
            return Err(wr);
        };
        // The clock only when a step runs or a timer may need the thread:
        // a receive posted in manual progress reads none.
        let now = take(e, wr).then(|| self.now());
        if let Some(t) = now {
            c.touched.push(qp.qpn);
            c.drive_posts(&self.shared, t);
        }
        if self.shared.mode == Progress::Thread {
            let now = now.unwrap_or_else(|| self.now());
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
        if qp.ud {
            return self.post_ud_recv(qp, wr);
        }
        if qp.uses_srq {
            return Err(EngineError::InvalidArgument(
                "the QP uses a shared receive queue",
            ));
        }
        validate_recv(qp.max_recv_sge, Some(qp.state()), &wr)?;
        if qp.rq_outstanding.fetch_add(1, Ordering::AcqRel) >= qp.max_recv_wr {
            qp.rq_outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError::QueueFull(qp.max_recv_wr).into());
        }
        // On a QP in ERR the receive is flushed at once: a step delivers it.
        let Err(wr) = self.post_direct(qp, wr, |e, wr| {
            e.take_recv(wr);
            e.qp.state() == QpState::Err
        }) else {
            return Ok(());
        };
        qp.rq_in.push(wr);
        self.queue_qp(qp);
        Ok(())
    }

    /// Posts a receive to a shared receive queue.
    pub fn post_srq_recv(&self, srq: &SrqShared, wr: RecvWr) -> Result<(), EngineError> {
        self.check()?;
        validate_recv(srq.max_sge, None, &wr)?;
        // SeqCst pairs with a resize's store of the capacity then load of
        // the count: one of them sees the other.
        if srq.outstanding.fetch_add(1, Ordering::SeqCst) >= srq.capacity.load(Ordering::SeqCst) {
            srq.outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError::QueueFull(srq.capacity()).into());
        }
        if let Err(wr) = srq.rq_in.push(wr) {
            // A grown SRQ holds more than its post queue: straight into the
            // engine's queue, after what is queued for it.
            let mut c = self.core().inspect_err(|_| {
                srq.outstanding.fetch_sub(1, Ordering::AcqRel);
            })?;
            let Some(s) = c.tables.srqs.get_mut(&srq.id) else {
                srq.outstanding.fetch_sub(1, Ordering::AcqRel);
                return Err(EngineError::NotFound {
                    what: "SRQ",
                    id: srq.id,
                });
            };
            s.absorb_posts();
            s.rq.post(wr)?;
            s.in_rq += 1;
            return Ok(());
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
}

impl Core {
    /// The QP a post goes to directly (see `Nic::post_direct`), with
    /// earlier posts still queued for it taken first, so the order holds.
    fn entry_in_order(&mut self, qpn: u32) -> Option<&mut QpEntry> {
        let e = self.tables.qps.get_mut(&qpn)?;
        if !e.shared.sq_in.is_empty() || !e.shared.rq_in.is_empty() {
            e.absorb_posts();
        }
        Some(e)
    }

    /// Takes posted work into the protocol and sends what it produced; true
    /// if there was any.
    pub(super) fn drive_posts(&mut self, shared: &Shared, now: Instant) -> bool {
        let mut busy = false;
        while let Some(w) = shared.work.pop() {
            busy = true;
            match w {
                Work::Qp(qpn) => {
                    if let Some(e) = self.tables.qps.get_mut(&qpn) {
                        e.absorb_posts();
                        self.touched.push(qpn);
                    }
                }
                Work::Srq(id) => {
                    if let Some(s) = self.tables.srqs.get_mut(&id) {
                        s.absorb_posts();
                    }
                }
            }
        }
        // Send what was just posted before looking at the link: a reply
        // leaves one receive syscall earlier.
        if !self.touched.is_empty() {
            self.finish_step(shared, now);
        }
        busy
    }
}
