//! The control path: creating, modifying and destroying objects.
//!
//! Control calls are rare next to posts and packets: each takes the core
//! lock for its whole work. Checks come first, each a typed error — ids
//! that name nothing ([`EngineError::NotFound`]), limits
//! ([`EngineError::InvalidArgument`]), objects still in use
//! ([`EngineError::Busy`]) — and only then does the call change a table.
//! A call that changes a queue pair ends with the end of a step, so what the
//! change caused (a flush, packets) happens before it returns. Cleanup
//! calls (deregistering, destroying) work after removal too.

use super::core::Core;
use super::tables::{QpEntry, QpInit, QpShared, SrqEntry, SrqShared};
use super::Nic;
use crate::cq::CompletionQueue;
use crate::error::EngineError;
use crate::mr::{Region, RegionBuf};
use crossbeam_queue::ArrayQueue;
use ndverbs_proto::limits::LIMITS;
use ndverbs_proto::mem::{Access, WindowBind};
use ndverbs_proto::rc::{AttrMask, Counters, ModifyError, QpAttr, QpState, RcQp, RecvQueue};
use ndverbs_wire::cma::addr_of_gid;
use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, MutexGuard};

impl Nic {
    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<u32, EngineError> {
        let mut c = self.core()?;
        let id = c.tables.next_id();
        c.tables.pds.insert(id, ());
        Ok(id)
    }

    /// Frees a protection domain (refused while objects use it).
    pub fn dealloc_pd(&self, pd: u32) -> Result<(), EngineError> {
        let mut c = self.core()?;
        c.tables.check_pd(pd)?;
        let why = "queue pairs still use the protection domain";
        c.tables.refuse_if_used(|q| q.qp.pd() == pd, why)?;
        if c.tables.ud.values().any(|u| u.pd == pd) {
            return Err(EngineError::Busy(why));
        }
        c.tables.pds.remove(&pd);
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
        c.tables.check_pd(pd)?;
        Ok(c.tables.mem.register(pd, buf, access)?)
    }

    /// Re-registers region `lkey` as `buf` in `pd` with `access`, under the
    /// same keys (see [`MemTable::reregister`](crate::mr::MemTable::reregister)).
    pub fn rereg_mr(
        &self,
        lkey: u32,
        pd: u32,
        buf: RegionBuf,
        access: Access,
    ) -> Result<Arc<Region>, EngineError> {
        let mut c = self.core()?;
        c.tables.check_pd(pd)?;
        Ok(c.tables.mem.reregister(lkey, pd, buf, access)?)
    }

    /// Deregisters memory (refused while windows are bound to it).
    pub fn dereg_mr(&self, lkey: u32) -> Result<(), EngineError> {
        // Works after removal too: it is cleanup.
        let mut c = self.core_lock();
        c.tables.mem.deregister(lkey)?;
        Ok(())
    }

    /// Deregisters memory even while windows are bound to it (see
    /// [`MemTable::revoke`](crate::mr::MemTable::revoke)): for a region handle that is being dropped.
    pub fn revoke_mr(&self, lkey: u32) -> Result<(), EngineError> {
        let mut c = self.core_lock();
        c.tables.mem.revoke(lkey)?;
        Ok(())
    }

    /// Allocates a type-2 memory window; returns its key.
    pub fn alloc_mw(&self, pd: u32) -> Result<u32, EngineError> {
        let mut c = self.core()?;
        c.tables.check_pd(pd)?;
        Ok(c.tables.mem.alloc_window(pd))
    }

    /// Binds window `mw` as `bind` asks (see
    /// [`MemTable::bind_window`](crate::mr::MemTable::bind_window)); returns its new R_Key.
    pub fn bind_mw(&self, mw: u32, bind: WindowBind) -> Result<u32, EngineError> {
        Ok(self.core()?.tables.mem.bind_window(mw, bind)?)
    }

    /// Invalidates a window locally.
    pub fn invalidate_mw(&self, rkey: u32) -> Result<(), EngineError> {
        Ok(self.core()?.tables.mem.invalidate_window(rkey)?)
    }

    /// Frees a window.
    pub fn dealloc_mw(&self, rkey: u32) -> Result<(), EngineError> {
        let mut c = self.core_lock();
        Ok(c.tables.mem.dealloc_window(rkey)?)
    }

    /// Creates a completion queue.
    pub fn create_cq(&self, depth: u32) -> Result<(u32, Arc<CompletionQueue>), EngineError> {
        if depth == 0 || depth > LIMITS.max_cqe {
            return Err(EngineError::InvalidArgument("CQ depth out of range"));
        }
        let mut c = self.core()?;
        let id = c.tables.next_id();
        let cq = Arc::new(CompletionQueue::new(depth as usize)?);
        c.tables.cqs.insert(id, cq.clone());
        Ok((id, cq))
    }

    /// Destroys a completion queue (refused while queue pairs use it).
    pub fn destroy_cq(&self, id: u32) -> Result<(), EngineError> {
        let mut c = self.core_lock();
        let cq = c.tables.cq(id)?;
        let uses = |q: &QpEntry| Arc::ptr_eq(&q.send_cq, cq) || Arc::ptr_eq(&q.recv_cq, cq);
        let why = "queue pairs still use the completion queue";
        c.tables.refuse_if_used(uses, why)?;
        if c.tables
            .ud
            .values()
            .any(|u| Arc::ptr_eq(&u.send_cq, cq) || Arc::ptr_eq(&u.recv_cq, cq))
        {
            return Err(EngineError::Busy(why));
        }
        c.tables.cqs.remove(&id);
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
        c.tables.check_pd(pd)?;
        let id = c.tables.next_id();
        let shared = Arc::new(SrqShared {
            id,
            max_sge,
            rq_in: ArrayQueue::new(max_wr as usize),
            outstanding: AtomicU32::new(0),
            capacity: AtomicU32::new(max_wr),
            queued: AtomicBool::new(false),
            limit: AtomicU32::new(0),
            limit_waiters: Default::default(),
        });
        c.tables.srqs.insert(
            id,
            SrqEntry {
                rq: RecvQueue::new(max_wr, max_sge),
                shared: shared.clone(),
                in_rq: 0,
            },
        );
        Ok(shared)
    }

    /// Changes the most receives SRQ `id` holds (ibverbs' `IBV_SRQ_MAX_WR`):
    /// 1 to [`LIMITS`]`.max_qp_wr` (else [`EngineError::InvalidArgument`]),
    /// and no fewer than are outstanding (else [`EngineError::Busy`]).
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_engine::config::Progress;
    /// use ndverbs_engine::nic::Nic;
    /// use ndverbs_proto::rc::RecvWr;
    /// let a = Nic::open("127.93.8.3".parse().unwrap(), Progress::Thread)?;
    /// let pd = a.alloc_pd()?;
    /// let srq = a.create_srq(pd, 1, 1)?;
    /// a.post_srq_recv(&srq, RecvWr::new(1, vec![]))?;
    /// assert!(a.post_srq_recv(&srq, RecvWr::new(2, vec![])).is_err()); // full
    /// a.resize_srq(srq.id(), 4)?;
    /// for i in 2..5 {
    ///     a.post_srq_recv(&srq, RecvWr::new(i, vec![]))?;
    /// }
    /// assert_eq!((srq.outstanding(), srq.capacity()), (4, 4));
    /// assert!(a.resize_srq(srq.id(), 3).is_err()); // 4 are outstanding
    /// # Ok::<(), ndverbs_engine::error::EngineError>(())
    /// ```
    pub fn resize_srq(&self, id: u32, max_wr: u32) -> Result<(), EngineError> {
        if max_wr == 0 || max_wr > LIMITS.max_qp_wr {
            return Err(EngineError::InvalidArgument("SRQ depth out of range"));
        }
        let mut c = self.core()?;
        let Some(s) = c.tables.srqs.get_mut(&id) else {
            return Err(EngineError::NotFound { what: "SRQ", id });
        };
        s.absorb_posts();
        // Store, then count (as a post counts, then loads): a post racing
        // the resize is either counted here or sees the new capacity.
        let old = s.shared.capacity.swap(max_wr, Ordering::SeqCst);
        if s.shared.outstanding.load(Ordering::SeqCst) > max_wr {
            s.shared.capacity.store(old, Ordering::SeqCst);
            return Err(EngineError::Busy(
                "more receives are outstanding than the new depth",
            ));
        }
        s.rq.set_capacity(max_wr);
        Ok(())
    }

    /// Destroys a shared receive queue (refused while queue pairs use it).
    pub fn destroy_srq(&self, id: u32) -> Result<(), EngineError> {
        let mut c = self.core_lock();
        c.tables.check_srq(id)?;
        let why = "queue pairs still use the shared receive queue";
        c.tables.refuse_if_used(|q| q.srq == Some(id), why)?;
        if c.tables.ud.values().any(|u| u.srq == Some(id)) {
            return Err(EngineError::Busy(why));
        }
        c.tables.srqs.remove(&id);
        Ok(())
    }

    /// What creating a queue pair of either kind checks and takes: `init`'s
    /// sizes, its PD, CQs and SRQ, room in the tables, and a fresh QPN.
    /// Returns the core, still locked, for the caller to insert the QP.
    pub(super) fn admit_qp(
        &self,
        init: &QpInit,
    ) -> Result<(MutexGuard<'_, Core>, NewQp), EngineError> {
        check_send_sizes(init)?;
        if init.srq.is_none() {
            check_recv_sizes(init)?;
        }
        let mut c = self.core()?;
        c.tables.check_pd(init.pd)?;
        let send_cq = c.tables.cq(init.send_cq)?.clone();
        let recv_cq = c.tables.cq(init.recv_cq)?.clone();
        if let Some(s) = init.srq {
            c.tables.check_srq(s)?;
        }
        c.tables.check_qp_room()?;
        let slot = c.share.as_ref().map(|s| s.port.slot());
        let qpn = c.tables.fresh_qpn(slot);
        let generation = c.tables.qp_generation();
        let new = NewQp {
            qpn,
            generation,
            send_cq,
            recv_cq,
        };
        Ok((c, new))
    }

    /// Creates an RC queue pair in RESET with an unpredictable QPN.
    pub fn create_qp(&self, init: QpInit) -> Result<Arc<QpShared>, EngineError> {
        let _nic = self.shared.span.enter();
        let (rq_wr, rq_sge) = if init.srq.is_some() {
            (1, 1)
        } else {
            (init.max_recv_wr, init.max_recv_sge.max(1))
        };
        let (mut c, new) = self.admit_qp(&init)?;
        let qpn = new.qpn;
        let shared = Arc::new(QpShared::new(&new, &init, (rq_wr, rq_sge), false));
        let mut qp = RcQp::new(qpn, init.pd, init.caps);
        qp.set_probe_floor(c.paths.probe_floor());
        let entry = QpEntry {
            qp,
            shared: shared.clone(),
            rq: RecvQueue::new(rq_wr, rq_sge),
            srq: init.srq,
            send_cq: new.send_cq,
            recv_cq: new.recv_cq,
            peer: None,
            sq_in_proto: 0,
            rq_in_proto: 0,
            armed: None,
            logged: Default::default(),
        };
        c.tables.qps.insert(qpn, entry);
        tracing::debug!(qp = qpn, pd = init.pd, "QP created");
        Ok(shared)
    }

    /// Modifies a queue pair. The peer's address comes from `attr.av.dgid`
    /// (an IPv4-mapped or IPv6 GID) when [`AttrMask::AV`] is given. A move
    /// to RESET also removes the queue pair's completions still queued in
    /// its CQs ([`CompletionQueue::purge`]), as libmlx5 does.
    pub fn modify_qp(&self, qpn: u32, attr: &QpAttr, mask: AttrMask) -> Result<(), EngineError> {
        let _nic = self.shared.span.enter();
        let now = self.now();
        let mut c = self.core()?;
        if c.tables.ud.contains_key(&qpn) {
            c.modify_ud(qpn, attr, mask)?;
            c.finish_step(&self.shared, now);
            if mask.contains(AttrMask::STATE) && attr.qp_state == QpState::Reset {
                c.purge_qp_completions(qpn);
            }
            return Ok(());
        }
        let active = c.active_mtu;
        let e = c.tables.qp_mut(qpn)?;
        if mask.contains(AttrMask::PATH_MTU) && attr.path_mtu > active {
            // Datagrams the link cannot carry would be refused or dropped
            // one by one; refused here, the mistake is named once.
            return Err(ModifyError::PathMtuAboveActive {
                requested: attr.path_mtu,
                active,
            }
            .into());
        }
        // Pending posts are ordered before the modification.
        e.absorb_posts();
        let to_reset = mask.contains(AttrMask::STATE) && attr.qp_state == QpState::Reset;
        if to_reset {
            c.send_owed_ack(&self.shared, qpn);
        }
        let e = c.tables.qp_mut(qpn)?;
        e.modify(attr, mask)?;
        if mask.contains(AttrMask::AV) {
            e.peer = Some(addr_of_gid(Ipv6Addr::from(attr.av.dgid)));
        }
        c.touched.push(qpn);
        c.finish_step(&self.shared, now);
        if mask.contains(AttrMask::STATE) && attr.qp_state == QpState::Reset {
            // A reset forgets the queue pair's work: the completions it
            // left in its CQs (the flushes of an earlier error, above all)
            // go too, as libmlx5 cleans a QP's CQs when it is reset, so an
            // application that resets a failed QP and starts over does not
            // poll stale completions first.
            c.purge_qp_completions(qpn);
        }
        Ok(())
    }

    /// The current attributes of a queue pair.
    pub fn query_qp(&self, qpn: u32) -> Result<QpAttr, EngineError> {
        let c = self.core()?;
        match c.query_ud(qpn) {
            Some(a) => Ok(a),
            None => Ok(c.tables.qp(qpn)?.qp.query()),
        }
    }

    /// Destroys a queue pair, as `ibv_destroy_qp` does with Linux rxe: its
    /// outstanding requests end with it, without completions (their
    /// `wr_id`s may point at memory the program frees with the QP), and
    /// the completions already in its CQs stay there. The plain ACK it
    /// still owes leaves first: a program that takes its last message and
    /// destroys its QP must not fail the peer's send. To flush what is
    /// outstanding, move the QP to ERR first (ND's release does).
    pub fn destroy_qp(&self, qpn: u32) -> Result<(), EngineError> {
        let _nic = self.shared.span.enter();
        let _span = tracing::debug_span!("destroy_qp", qp = qpn).entered();
        let mut c = self.core_lock();
        if c.destroy_ud(qpn) {
            return Ok(());
        }
        c.tables.qp(qpn)?;
        c.send_owed_ack(&self.shared, qpn);
        if let Some(e) = c.tables.qps.remove(&qpn) {
            crate::stats::add(&mut c.tables.retired, e.qp.counters());
        }
        Ok(())
    }

    /// Counters of one queue pair.
    pub fn qp_counters(&self, qpn: u32) -> Result<Counters, EngineError> {
        let c = self.core_lock();
        match c.ud_counters(qpn) {
            Some(u) => Ok(u),
            None => Ok(*c.tables.qp(qpn)?.qp.counters()),
        }
    }
}

impl super::core::Core {
    /// Removes queue pair `qpn`'s completions still queued in its CQs (a
    /// QP moved to RESET forgets its work).
    fn purge_qp_completions(&mut self, qpn: u32) {
        let cqs = match (self.tables.qp(qpn), self.tables.ud.get(&qpn)) {
            (Ok(e), _) => (e.send_cq.clone(), e.recv_cq.clone()),
            (_, Some(u)) => (u.send_cq.clone(), u.recv_cq.clone()),
            _ => return,
        };
        let (send, recv) = cqs;
        send.purge(|w| w.qpn == qpn);
        if !Arc::ptr_eq(&send, &recv) {
            recv.purge(|w| w.qpn == qpn);
        }
    }
}

/// A new queue pair's send queue sizes against the device's limits.
pub(super) fn check_send_sizes(init: &QpInit) -> Result<(), EngineError> {
    let caps = &init.caps;
    if caps.max_send_wr == 0 || caps.max_send_wr > LIMITS.max_qp_wr {
        return Err(EngineError::InvalidArgument("max_send_wr out of range"));
    }
    if caps.max_send_sge > LIMITS.max_sge || caps.max_inline_data > LIMITS.max_inline_data {
        return Err(EngineError::InvalidArgument(
            "max_send_sge or max_inline_data out of range",
        ));
    }
    Ok(())
}

/// The sizes of a new queue pair's own receive queue against the device's
/// limits.
pub(super) fn check_recv_sizes(init: &QpInit) -> Result<(), EngineError> {
    if init.max_recv_wr == 0
        || init.max_recv_wr > LIMITS.max_qp_wr
        || init.max_recv_sge > LIMITS.max_sge
    {
        return Err(EngineError::InvalidArgument(
            "max_recv_wr or max_recv_sge out of range",
        ));
    }
    Ok(())
}

/// A queue pair admitted by [`Nic::admit_qp`]: its number and identity, and
/// the completion queues it names.
pub(super) struct NewQp {
    pub(super) qpn: u32,
    pub(super) generation: u64,
    pub(super) send_cq: Arc<CompletionQueue>,
    pub(super) recv_cq: Arc<CompletionQueue>,
}
