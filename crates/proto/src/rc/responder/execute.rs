//! Executing a new request: SEND and WRITE place their data (a SEND into a
//! receive, which it may have to wait for: RNR NAK), READ and atomics run
//! against memory and leave a *responder resource* for replays.

use super::*;
use ndverbs_wire::ext::{AtomicEth, Reth};

impl Responder {
    /// Takes a receive or answers RNR NAK (returns `None`).
    pub(super) fn take_recv(
        &mut self,
        cx: &mut RespCx<'_>,
        rq: &mut RecvQueue,
        p: u32,
    ) -> Option<RecvWr> {
        let wr = rq.pop();
        if wr.is_none() {
            cx.counters.send_rnr_err += 1;
            self.ack(
                cx,
                p,
                Syndrome::RnrNak {
                    timer: cx.p.min_rnr_timer,
                },
            );
            // Later packets of this burst are dropped quietly, not sequence-NAKed.
            self.sent_psn_nak = true;
        }
        wr
    }

    pub(super) fn send(
        &mut self,
        cx: &mut RespCx<'_>,
        mem: &mut dyn Memory,
        rq: &mut RecvQueue,
        info: &OpcodeInfo,
        pkt: &Packet<'_>,
    ) -> Result<(), Fatal> {
        let p = pkt.bth.psn;
        let last = info.is_last();
        if info.is_first() {
            let Some(wr) = self.take_recv(cx, rq, p) else {
                return Ok(());
            };
            self.cur = Current::Send { wr, offset: 0 };
        }
        let Current::Send { wr, offset } = &mut self.cur else {
            return Ok(());
        };
        let n = pkt.payload.len() as u32;
        let room = sgl_len(&wr.sgl);
        if u64::from(*offset) + u64::from(n) > room {
            return Err(self.fatal(cx, p, NakCode::InvalidRequest, WcStatus::LocLenErr, None));
        }
        if scatter(mem, cx.p.pd, &wr.sgl, u64::from(*offset), pkt.payload).is_err() {
            return Err(self.fatal(
                cx,
                p,
                NakCode::RemoteOperational,
                WcStatus::LocProtErr,
                None,
            ));
        }
        *offset += n;
        self.epsn = psn::add(p, 1);
        if last {
            let mut inv = None;
            if let Some(rkey) = pkt.ext.ieth {
                if mem.invalidate_remote(cx.p.pd, rkey).is_err() {
                    return Err(self.fatal(
                        cx,
                        p,
                        NakCode::RemoteOperational,
                        WcStatus::LocQpOpErr,
                        None,
                    ));
                }
                inv = Some(rkey);
            }
            if let Current::Send { wr, offset } = std::mem::take(&mut self.cur) {
                self.msn = psn::add(self.msn, 1);
                cx.counters.rdma_recvs += 1;
                push_recv(cx, wr.wr_id, WcOpcode::Recv, offset, inv, pkt);
            }
        }
        if pkt.bth.ack_req {
            self.ack(cx, p, Syndrome::ACK);
        }
        Ok(())
    }

    pub(super) fn write(
        &mut self,
        cx: &mut RespCx<'_>,
        mem: &mut dyn Memory,
        rq: &mut RecvQueue,
        info: &OpcodeInfo,
        pkt: &Packet<'_>,
    ) -> Result<(), Fatal> {
        let p = pkt.bth.psn;
        let last = info.is_last();
        // CHK_RESOURCE: WRITE with immediate consumes a receive at its end.
        let recv = if last && pkt.ext.immdt.is_some() {
            match self.take_recv(cx, rq, p) {
                Some(wr) => Some(wr),
                None => return Ok(()),
            }
        } else {
            None
        };
        // CHK_RKEY
        if let Some(reth) = pkt.ext.reth {
            if let Err(e) = check_rkey(mem, cx.p.pd, &reth, Access::REMOTE_WRITE) {
                return Err(self.access_fatal(cx, p, e, recv));
            }
            self.cur = Current::Write {
                va: reth.va,
                rkey: reth.rkey,
                total: reth.len,
                resid: reth.len,
            };
        }
        let Current::Write {
            va,
            rkey,
            total,
            resid,
        } = self.cur
        else {
            return Ok(());
        };
        let n = pkt.payload.len() as u32;
        if n > resid || (last && n != resid) {
            return Err(self.fatal(cx, p, NakCode::InvalidRequest, WcStatus::RemInvReqErr, recv));
        }
        // EXECUTE
        if n > 0 {
            let at = va.wrapping_add(u64::from(total - resid));
            if let Err(e) = mem.write_remote(cx.p.pd, rkey, at, pkt.payload) {
                return Err(self.access_fatal(cx, p, e, recv));
            }
        }
        self.epsn = psn::add(p, 1);
        if last {
            self.cur = Current::Idle;
            self.msn = psn::add(self.msn, 1);
            if let Some(wr) = recv {
                cx.counters.rdma_recvs += 1;
                push_recv(cx, wr.wr_id, WcOpcode::RecvRdmaWithImm, total, None, pkt);
            }
        } else if let Current::Write { resid, .. } = &mut self.cur {
            *resid -= n;
        }
        if pkt.bth.ack_req {
            self.ack(cx, p, Syndrome::ACK);
        }
        Ok(())
    }

    /// An R_Key check failed: remote access error (or invalid request for a
    /// misaligned atomic).
    pub(super) fn access_fatal(
        &mut self,
        cx: &mut RespCx<'_>,
        p: u32,
        e: AccessError,
        wr: Option<RecvWr>,
    ) -> Fatal {
        match e {
            AccessError::Misaligned(_) => {
                self.fatal(cx, p, NakCode::InvalidRequest, WcStatus::RemInvReqErr, wr)
            }
            _ => self.fatal(cx, p, NakCode::RemoteAccess, WcStatus::RemAccessErr, wr),
        }
    }

    pub(super) fn push_resource(&mut self, cx: &RespCx<'_>, r: Resource) {
        let max = cx.p.max_dest_rd_atomic.max(1) as usize;
        while self.resources.len() >= max {
            self.resources.pop_front();
        }
        self.resources.push_back(r);
    }

    /// READs and atomics need responder resources: on a QP that keeps none
    /// for the peer, the request is invalid.
    pub(super) fn needs_resources(&mut self, cx: &mut RespCx<'_>, p: u32) -> Result<(), Fatal> {
        if cx.p.max_dest_rd_atomic == 0 {
            return Err(self.fatal(cx, p, NakCode::InvalidRequest, WcStatus::RemInvReqErr, None));
        }
        Ok(())
    }

    /// A READ or atomic ran: keep it for duplicates, count the message,
    /// expect `epsn` next and queue the reply for the new MSN.
    pub(super) fn answer(
        &mut self,
        cx: &mut RespCx<'_>,
        resource: Resource,
        epsn: u32,
        reply: impl FnOnce(u32) -> Reply,
    ) {
        self.push_resource(cx, resource);
        self.msn = psn::add(self.msn, 1);
        self.epsn = epsn;
        let msn = self.msn;
        self.queue(cx, reply(msn));
    }

    /// A READ request asking for what `reth` names, at PSN `p`.
    pub(super) fn read(
        &mut self,
        cx: &mut RespCx<'_>,
        mem: &mut dyn Memory,
        p: u32,
        reth: Reth,
    ) -> Result<(), Fatal> {
        if let Err(e) = check_rkey(mem, cx.p.pd, &reth, Access::REMOTE_READ) {
            return Err(self.access_fatal(cx, p, e, None));
        }
        let n = npkts(reth.len, cx.p.mtu);
        let resource = Resource::Read {
            first_psn: p,
            last_psn: psn::add(p, n - 1),
            va: reth.va,
            rkey: reth.rkey,
            len: reth.len,
        };
        self.answer(cx, resource, psn::add(p, n), |msn| Reply::Read {
            psn: p,
            va: reth.va,
            rkey: reth.rkey,
            remaining: reth.len,
            first: true,
            msn,
        });
        Ok(())
    }

    /// A COMPARE & SWAP or FETCH & ADD (`operation`) at PSN `p`.
    pub(super) fn atomic(
        &mut self,
        cx: &mut RespCx<'_>,
        mem: &mut dyn Memory,
        p: u32,
        operation: Operation,
        a: AtomicEth,
    ) -> Result<(), Fatal> {
        let op = match operation {
            Operation::CompareSwap => AtomicOp::CompareSwap {
                compare: a.compare,
                swap: a.swap_add,
            },
            _ => AtomicOp::FetchAdd { add: a.swap_add },
        };
        let orig = match mem.atomic_remote(cx.p.pd, a.rkey, a.va, op) {
            Ok(v) => v,
            Err(e) => return Err(self.access_fatal(cx, p, e, None)),
        };
        let resource = Resource::Atomic { psn: p, orig };
        self.answer(cx, resource, psn::add(p, 1), |msn| Reply::Atomic {
            psn: p,
            orig,
            msn,
        });
        Ok(())
    }
}

/// CHK_RKEY for the RETH of a READ or WRITE needing `need`. A zero-length
/// one carries no usable key (IBTA C9-88): only a nonzero length is checked.
fn check_rkey(mem: &mut dyn Memory, pd: u32, reth: &Reth, need: Access) -> Result<(), AccessError> {
    if reth.len == 0 {
        return Ok(());
    }
    mem.check_remote(pd, reth.rkey, reth.va, u64::from(reth.len), need)
}
