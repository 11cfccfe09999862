//! `Nic::resources`: the NIC's live objects, copied under the core lock
//! (see [`crate::resources`]).

use super::Nic;
use crate::cq::CompletionQueue;
use crate::resources::{CqRes, MrRes, QpRes, Resources};
use foldhash::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Nic {
    /// Every live queue pair, completion queue, memory region and
    /// connection endpoint (see [`crate::resources`]). Copies a few numbers
    /// per object under the core lock; nothing is kept or counted for it
    /// between calls.
    pub fn resources(&self) -> Resources {
        let mut r = Resources::default();
        {
            let c = self.core_lock();
            let t = &c.tables;
            r.qps.reserve(t.qps.len() + t.ud.len());
            r.cqs.reserve(t.cqs.len());
            r.mrs.reserve(t.mem.regions());
            // A QP holds its CQs, not their ids.
            let ids: HashMap<*const CompletionQueue, u32> =
                t.cqs.iter().map(|(&id, q)| (Arc::as_ptr(q), id)).collect();
            let cq_id = |cq: &Arc<CompletionQueue>| ids.get(&Arc::as_ptr(cq)).copied().unwrap_or(0);
            for (&id, cq) in &t.cqs {
                r.cqs.push(CqRes {
                    id,
                    depth: cq.depth(),
                    entries: cq.len(),
                    overflowed: cq.overflowed(),
                });
            }
            for (&qpn, e) in &t.qps {
                let a = e.qp.query();
                r.qps.push(QpRes {
                    qpn,
                    ud: false,
                    state: e.qp.state(),
                    pd: e.qp.pd(),
                    peer: e.peer,
                    dest_qpn: a.dest_qp_num,
                    sq_psn: a.sq_psn,
                    rq_psn: a.rq_psn,
                    sq_outstanding: e.shared.sq_outstanding.load(Ordering::Relaxed),
                    rq_outstanding: e.shared.rq_outstanding.load(Ordering::Relaxed),
                    send_cq: cq_id(&e.send_cq),
                    recv_cq: cq_id(&e.recv_cq),
                    srq: e.srq,
                    counters: *e.qp.counters(),
                });
            }
            for (&qpn, e) in &t.ud {
                let a = e.qp.query();
                r.qps.push(QpRes {
                    qpn,
                    ud: true,
                    state: a.qp_state,
                    pd: e.pd,
                    peer: None,
                    dest_qpn: 0,
                    sq_psn: a.sq_psn,
                    rq_psn: 0,
                    // Sends leave in the call that posts them.
                    sq_outstanding: 0,
                    rq_outstanding: e.rq.len() as u32,
                    send_cq: cq_id(&e.send_cq),
                    recv_cq: cq_id(&e.recv_cq),
                    srq: None,
                    counters: e.qp.counters().to_counters(),
                });
            }
            // QP1's own buffers (the GSI's PD) are the NIC's, not the application's.
            for m in t.mem.each_region().filter(|m| m.pd() != crate::gsi::GSI_PD) {
                r.mrs.push(MrRes {
                    lkey: m.lkey(),
                    rkey: m.rkey(),
                    pd: m.pd(),
                    addr: m.addr(),
                    length: m.len(),
                    access: m.access(),
                    windows: m.windows_bound(),
                });
            }
            c.eps.machine.resources(&c.cm, &mut r.cm_ids);
        }
        r.sort();
        r
    }
}
