//! The responder: request packets are checked, executed and answered (Linux
//! `rxe_resp.c`).
//!
//! rxe runs each request through a fixed chain of states; so does this file,
//! one function per step:
//!
//! ```text
//! CHK_PSN ─► duplicate? ─► replay (ACK / saved READ / saved atomic result)
//!    │       ahead?     ─► one NAK PSN-sequence error, then silence
//!    ▼
//! CHK_OP_SEQ   FIRST/MIDDLE/LAST in order, never a new message inside one
//! CHK_OP_VALID the QP's access flags allow WRITE / READ / atomics
//! CHK_LENGTH   FIRST/MIDDLE = MTU, LAST 1..MTU, ONLY ≤ MTU, pad = (−len) & 3
//! CHK_RESOURCE a receive for SEND / WRITE-with-immediate, else RNR NAK
//! CHK_RKEY     R_Key, bounds, rights and PD through `Memory`
//! EXECUTE      place data, run the atomic, queue the READ response
//! COMPLETE     receive completion at the end of a message
//! ACKNOWLEDGE  ACK if AckReq was set
//! ```
//!
//! **PSNs.** `epsn` is the next PSN expected. A SEND/WRITE packet advances it by
//! one, a READ by the response packets it asks for, an atomic by one. A
//! request behind `epsn` is a duplicate: SEND/WRITE are acknowledged again with
//! PSN `epsn − 1` (never re-executed), a READ is answered again from the saved
//! *responder resource* (it may ask for a tail of the original, as a partial
//! retry does), an atomic gets its saved original value — it must never run
//! twice. A request ahead of `epsn` means packets were lost: one NAK
//! PSN-sequence error carrying `epsn` goes out and later out-of-order packets
//! are dropped silently until `epsn` arrives.
//!
//! **Acknowledgements.** An ACK (syndrome 0x1F, "no credit count", as rxe)
//! carries the packet's PSN and the *MSN*, which counts finished messages,
//! executed READs and atomics. ACKs are sent only for packets with AckReq (and
//! for duplicates); an ACK still waiting in the reply queue is replaced by a
//! later one instead of queueing both (coalescing — ACKs are cumulative).
//! READ responses are FIRST/MIDDLE/LAST or ONLY, AETH on all but MIDDLE; a
//! replay that starts inside the original range starts with MIDDLE or LAST, as
//! rxe does. Responses are generated lazily: the reply queue holds a cursor
//! per READ and each packet's payload is read from memory when it is written.
//!
//! **Receiver not ready.** A SEND (or WRITE with immediate) that needs a receive
//! when none is posted gets RNR NAK `0x20 | min_rnr_timer` with its own PSN;
//! `epsn` stays, and until the retransmission arrives later packets are dropped
//! without a sequence NAK.
//!
//! **Errors (class C, fatal).** Broken sequencing, a disallowed operation, a bad
//! length or a SEND longer than its receive ⇒ NAK invalid request; a rejected
//! R_Key/range/right ⇒ NAK remote access error; a receive buffer the responder
//! cannot write or an R_Key it cannot invalidate ⇒ NAK remote operational
//! error. The receive being filled completes with the error (`LocLenErr` for
//! the oversized SEND), the NAK is the last packet the QP sends, and the QP
//! moves to ERR.

use super::emit::{write_packet, EmitError};
use super::recv_queue::RecvQueue;
use super::send_queue::npkts;
use super::wr::{RecvWr, WcOpcode, WcQueue, WcStatus, WorkCompletion};
use super::{Counters, Fatal, Params, QpErrorCause};
use crate::mem::{scatter, sgl_len, Access, AccessError, AtomicOp, Memory};
use ndverbs_wire::bth::{psn, Bth};
use ndverbs_wire::ext::{Aeth, NakCode, Syndrome};
use ndverbs_wire::opcode::{Opcode, OpcodeInfo, Operation, Position};
use ndverbs_wire::packet::{ExtHeaders, Packet};
use std::collections::VecDeque;

/// Most replies queued before further requests are treated as lost.
pub const MAX_QUEUED_REPLIES: usize = 1024;

/// Largest RDMA message (IBTA).
const MAX_MSG: u32 = 1 << 31;

/// The message being received.
#[derive(Debug, Clone, Default)]
enum Current {
    #[default]
    Idle,
    /// A multi-packet SEND: its receive and the bytes placed so far.
    Send { wr: RecvWr, offset: u32 },
    /// A multi-packet WRITE: target and bytes still to come.
    Write {
        va: u64,
        rkey: u32,
        total: u32,
        resid: u32,
    },
}

/// A saved READ or atomic, for answering duplicates.
#[derive(Debug, Clone, Copy)]
enum Resource {
    Read {
        first_psn: u32,
        last_psn: u32,
        va: u64,
        rkey: u32,
        len: u32,
    },
    Atomic {
        psn: u32,
        orig: u64,
    },
}

/// A packet (or, for READ, packets) the responder owes the requester.
#[derive(Debug, Clone, Copy)]
enum Reply {
    Ack {
        psn: u32,
        syndrome: Syndrome,
        msn: u32,
        /// The NAK of a fatal error: survives the move to ERR.
        terminal: bool,
    },
    Atomic {
        psn: u32,
        orig: u64,
        msn: u32,
    },
    Read {
        psn: u32,
        va: u64,
        rkey: u32,
        remaining: u32,
        /// The next packet starts the response (FIRST/ONLY) rather than
        /// continuing it (MIDDLE/LAST).
        first: bool,
        msn: u32,
    },
}

/// What the responder needs from the QP for one call.
pub(crate) struct RespCx<'a> {
    pub p: &'a Params,
    pub cq: &'a mut VecDeque<WorkCompletion>,
    pub counters: &'a mut Counters,
}

/// Responder state.
#[derive(Debug, Clone, Default)]
pub(crate) struct Responder {
    /// Next expected PSN.
    pub epsn: u32,
    /// Message sequence number.
    pub msn: u32,
    sent_psn_nak: bool,
    cur: Current,
    resources: VecDeque<Resource>,
    replies: VecDeque<Reply>,
}

impl Responder {
    /// A fresh responder expecting `rq_psn` (INIT → RTR).
    pub fn start(rq_psn: u32) -> Self {
        Responder {
            epsn: rq_psn,
            ..Responder::default()
        }
    }

    /// True if a reply is waiting.
    pub fn has_output(&self) -> bool {
        !self.replies.is_empty()
    }

    /// True if the one reply waiting is a positive ACK (cumulative: a later
    /// one replaces it).
    pub fn owes_only_ack(&self) -> bool {
        self.replies.len() == 1
            && matches!(
                self.replies.front(),
                Some(Reply::Ack {
                    syndrome: Syndrome::Ack { .. },
                    terminal: false,
                    ..
                })
            )
    }

    /// The QP entered ERR: keep only the terminal NAK and a positive ACK
    /// still owed for what was received (a caller may have postponed it, see
    /// `RcQp::owes_only_ack`; the peer's requests it covers did land); hand
    /// back the receive being filled so it can be flushed.
    pub fn on_error(&mut self) -> Option<RecvWr> {
        self.replies.retain(|r| {
            matches!(
                r,
                Reply::Ack { terminal: true, .. }
                    | Reply::Ack {
                        syndrome: Syndrome::Ack { .. },
                        ..
                    }
            )
        });
        self.resources.clear();
        match std::mem::take(&mut self.cur) {
            Current::Send { wr, .. } => Some(wr),
            _ => None,
        }
    }

    fn queue(&mut self, cx: &mut RespCx<'_>, r: Reply) -> bool {
        if let (
            Reply::Ack {
                psn: new_psn,
                syndrome: Syndrome::Ack { .. },
                msn: new_msn,
                terminal: false,
            },
            Some(Reply::Ack {
                psn: old_psn,
                syndrome: Syndrome::Ack { .. },
                msn: old_msn,
                terminal: false,
            }),
        ) = (r, self.replies.back_mut())
        {
            // Coalesce: one cumulative ACK stands for both.
            if psn::diff(new_psn, *old_psn) >= 0 {
                *old_psn = new_psn;
                *old_msn = new_msn;
            }
            cx.counters.ack_deferred += 1;
            return true;
        }
        if self.replies.len() >= MAX_QUEUED_REPLIES {
            cx.counters.drops.reply_queue_full += 1;
            return false;
        }
        self.replies.push_back(r);
        true
    }

    fn ack(&mut self, cx: &mut RespCx<'_>, psn: u32, syndrome: Syndrome) {
        let msn = self.msn;
        self.queue(
            cx,
            Reply::Ack {
                psn,
                syndrome,
                msn,
                terminal: false,
            },
        );
    }

    /// Class C error: NAK, complete the receive in progress (or `wr`) with
    /// `status`, and tell the QP to move to ERR.
    fn fatal(
        &mut self,
        cx: &mut RespCx<'_>,
        psn: u32,
        code: NakCode,
        status: WcStatus,
        wr: Option<RecvWr>,
    ) -> Fatal {
        let in_progress = match std::mem::take(&mut self.cur) {
            Current::Send { wr, .. } => Some(wr),
            _ => None,
        };
        for wr in in_progress.into_iter().chain(wr) {
            push_recv(cx, wr.wr_id, status, WcOpcode::Recv, 0, None, None, false);
        }
        let msn = self.msn;
        self.replies.push_back(Reply::Ack {
            psn,
            syndrome: Syndrome::Nak(code),
            msn,
            terminal: true,
        });
        Fatal(QpErrorCause::Responder(code))
    }

    /// Handles one request packet.
    pub fn handle(
        &mut self,
        cx: &mut RespCx<'_>,
        mem: &mut dyn Memory,
        rq: &mut RecvQueue,
        pkt: &Packet<'_>,
    ) -> Result<(), Fatal> {
        let Ok(info) = pkt.info() else {
            cx.counters.drops.not_rc += 1;
            return Ok(());
        };
        // CHK_PSN
        let p = pkt.bth.psn;
        let d = psn::diff(p, self.epsn);
        if d > 0 {
            if self.sent_psn_nak {
                cx.counters.drops.out_of_seq += 1;
            } else {
                self.sent_psn_nak = true;
                cx.counters.out_of_seq_request += 1;
                self.ack(cx, self.epsn, Syndrome::Nak(NakCode::PsnSequence));
            }
            return Ok(());
        }
        if d < 0 {
            cx.counters.duplicate_request += 1;
            self.duplicate(cx, info, pkt);
            return Ok(());
        }
        // A full reply queue makes this request look lost; the requester retries.
        if self.replies.len() >= MAX_QUEUED_REPLIES {
            cx.counters.drops.reply_queue_full += 1;
            return Ok(());
        }
        // CHK_OP_SEQ
        let seq_ok = matches!(
            (&self.cur, info.operation, info.position),
            (
                Current::Send { .. },
                Operation::Send,
                Position::Middle | Position::Last
            ) | (
                Current::Write { .. },
                Operation::Write,
                Position::Middle | Position::Last
            ) | (Current::Idle, _, Position::First | Position::Only)
        );
        if !seq_ok {
            return Err(self.fatal(cx, p, NakCode::InvalidRequest, WcStatus::RemInvReqErr, None));
        }
        // CHK_OP_VALID
        let needed = match info.operation {
            Operation::Send => Access::NONE,
            Operation::Write => Access::REMOTE_WRITE,
            Operation::ReadRequest => Access::REMOTE_READ,
            Operation::CompareSwap | Operation::FetchAdd => Access::REMOTE_ATOMIC,
            _ => {
                return Err(self.fatal(
                    cx,
                    p,
                    NakCode::InvalidRequest,
                    WcStatus::RemInvReqErr,
                    None,
                ))
            }
        };
        if !cx.p.access.contains(needed) {
            return Err(self.fatal(cx, p, NakCode::InvalidRequest, WcStatus::RemInvReqErr, None));
        }
        // CHK_LENGTH (packet level)
        let n = pkt.payload.len();
        let pad_ok = pkt.bth.pad == Packet::pad_for(n);
        let reth_ok = pkt.ext.reth.is_none_or(|r| r.len <= MAX_MSG);
        if info.check_payload_len(n, cx.p.mtu as usize).is_err() || !pad_ok || !reth_ok {
            return Err(self.fatal(cx, p, NakCode::InvalidRequest, WcStatus::RemInvReqErr, None));
        }
        self.sent_psn_nak = false;
        match info.operation {
            Operation::Send => self.send(cx, mem, rq, info, pkt),
            Operation::Write => self.write(cx, mem, rq, info, pkt),
            Operation::ReadRequest => self.read(cx, mem, pkt),
            _ => self.atomic(cx, mem, pkt),
        }
    }

    /// Takes a receive or answers RNR NAK (returns `None`).
    fn take_recv(&mut self, cx: &mut RespCx<'_>, rq: &mut RecvQueue, p: u32) -> Option<RecvWr> {
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

    fn send(
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
                push_recv(
                    cx,
                    wr.wr_id,
                    WcStatus::Success,
                    WcOpcode::Recv,
                    offset,
                    pkt.ext.immdt,
                    inv,
                    pkt.bth.se,
                );
            }
        }
        if pkt.bth.ack_req {
            self.ack(cx, p, Syndrome::ACK);
        }
        Ok(())
    }

    fn write(
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
            if reth.len > 0 {
                if let Err(e) = mem.check_remote(
                    cx.p.pd,
                    reth.rkey,
                    reth.va,
                    u64::from(reth.len),
                    Access::REMOTE_WRITE,
                ) {
                    return Err(self.access_fatal(cx, p, e, recv));
                }
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
                push_recv(
                    cx,
                    wr.wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    total,
                    pkt.ext.immdt,
                    None,
                    pkt.bth.se,
                );
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
    fn access_fatal(
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

    fn push_resource(&mut self, cx: &RespCx<'_>, r: Resource) {
        let max = cx.p.max_dest_rd_atomic.max(1) as usize;
        while self.resources.len() >= max {
            self.resources.pop_front();
        }
        self.resources.push_back(r);
    }

    /// READs and atomics need responder resources: on a QP that keeps none
    /// for the peer, the request is invalid.
    fn needs_resources(&mut self, cx: &mut RespCx<'_>, p: u32) -> Result<(), Fatal> {
        if cx.p.max_dest_rd_atomic == 0 {
            return Err(self.fatal(cx, p, NakCode::InvalidRequest, WcStatus::RemInvReqErr, None));
        }
        Ok(())
    }

    /// A READ or atomic ran: keep it for duplicates, count the message,
    /// expect `epsn` next and queue the reply for the new MSN.
    fn answer(
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

    fn read(
        &mut self,
        cx: &mut RespCx<'_>,
        mem: &mut dyn Memory,
        pkt: &Packet<'_>,
    ) -> Result<(), Fatal> {
        let p = pkt.bth.psn;
        let Some(reth) = pkt.ext.reth else {
            return Ok(());
        };
        self.needs_resources(cx, p)?;
        if reth.len > 0 {
            if let Err(e) = mem.check_remote(
                cx.p.pd,
                reth.rkey,
                reth.va,
                u64::from(reth.len),
                Access::REMOTE_READ,
            ) {
                return Err(self.access_fatal(cx, p, e, None));
            }
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

    fn atomic(
        &mut self,
        cx: &mut RespCx<'_>,
        mem: &mut dyn Memory,
        pkt: &Packet<'_>,
    ) -> Result<(), Fatal> {
        let p = pkt.bth.psn;
        let Some(a) = pkt.ext.atomic_eth else {
            return Ok(());
        };
        self.needs_resources(cx, p)?;
        let op = if pkt.bth.opcode == Opcode::RC_COMPARE_SWAP {
            AtomicOp::CompareSwap {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            AtomicOp::FetchAdd { add: a.swap_add }
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

    /// A request with a PSN already seen.
    fn duplicate(&mut self, cx: &mut RespCx<'_>, info: &OpcodeInfo, pkt: &Packet<'_>) {
        let p = pkt.bth.psn;
        match info.operation {
            Operation::Send | Operation::Write => {
                self.ack(cx, psn::sub(self.epsn, 1), Syndrome::ACK);
            }
            Operation::ReadRequest => {
                let Some(reth) = pkt.ext.reth else { return };
                let found = self.resources.iter().rev().find_map(|r| match *r {
                    Resource::Read {
                        first_psn,
                        last_psn,
                        va,
                        rkey,
                        len,
                    } if psn::diff(p, first_psn) >= 0 && psn::diff(p, last_psn) <= 0 => {
                        Some((first_psn, va, rkey, len))
                    }
                    _ => None,
                });
                let Some((first_psn, va, rkey, len)) = found else {
                    cx.counters.drops.unmatched_duplicate += 1;
                    return;
                };
                let end = va.checked_add(u64::from(len));
                let sub_end = reth.va.checked_add(u64::from(reth.len));
                let sub_range = reth.va >= va
                    && matches!((sub_end, end), (Some(s), Some(e)) if s <= e)
                    && reth.rkey == rkey;
                if !sub_range {
                    cx.counters.drops.invalid_duplicate += 1;
                    return;
                }
                let msn = self.msn;
                self.queue(
                    cx,
                    Reply::Read {
                        psn: p,
                        va: reth.va,
                        rkey,
                        remaining: reth.len,
                        first: p == first_psn,
                        msn,
                    },
                );
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let found = self.resources.iter().rev().find_map(|r| match *r {
                    Resource::Atomic { psn, orig } if psn == p => Some(orig),
                    _ => None,
                });
                match found {
                    Some(orig) => {
                        let msn = self.msn;
                        self.queue(cx, Reply::Atomic { psn: p, orig, msn });
                    }
                    None => cx.counters.drops.unmatched_duplicate += 1,
                }
            }
            _ => cx.counters.drops.unmatched_duplicate += 1,
        }
    }

    /// Writes the next reply packet. `Ok(None)`: nothing to send (or no room,
    /// counted). An `Err` means a READ source became inaccessible: the QP must
    /// move to ERR; the NAK is queued as the next (terminal) reply.
    pub fn poll(
        &mut self,
        cx: &mut RespCx<'_>,
        mem: &mut dyn Memory,
        buf: &mut [u8],
    ) -> Result<Option<usize>, Fatal> {
        let p = cx.p;
        let Some(reply) = self.replies.front().copied() else {
            return Ok(None);
        };
        let mut ext = ExtHeaders::default();
        let result = match reply {
            Reply::Ack {
                psn, syndrome, msn, ..
            } => {
                ext.aeth = Some(Aeth::new(syndrome, msn));
                let bth = Bth::new(Opcode::RC_ACK, p.dest_qpn, psn);
                write_packet(buf, bth, &ext, 0, |_| Ok(())).map(|n| (n, None))
            }
            Reply::Atomic { psn, orig, msn } => {
                ext.aeth = Some(Aeth::new(Syndrome::ACK, msn));
                ext.atomic_ack_eth = Some(orig);
                let bth = Bth::new(Opcode::RC_ATOMIC_ACK, p.dest_qpn, psn);
                write_packet(buf, bth, &ext, 0, |_| Ok(())).map(|n| (n, None))
            }
            Reply::Read {
                psn,
                va,
                rkey,
                remaining,
                first,
                msn,
            } => {
                let n = remaining.min(p.mtu);
                let last = remaining <= p.mtu;
                // An empty replay is a whole (ONLY) response, never an empty LAST.
                let first = first || remaining == 0;
                let opcode = match (first, last) {
                    (true, true) => Opcode::RC_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RC_READ_RESPONSE_FIRST,
                    (false, false) => Opcode::RC_READ_RESPONSE_MIDDLE,
                    (false, true) => Opcode::RC_READ_RESPONSE_LAST,
                };
                if first || last {
                    ext.aeth = Some(Aeth::new(Syndrome::ACK, msn));
                }
                let bth = Bth::new(opcode, p.dest_qpn, psn);
                write_packet(buf, bth, &ext, n as usize, |out| {
                    if out.is_empty() {
                        Ok(())
                    } else {
                        mem.read_remote(p.pd, rkey, va, out)
                    }
                })
                .map(|len| (len, Some((n, last))))
            }
        };
        match result {
            Ok((len, read)) => {
                match (read, self.replies.front_mut()) {
                    (
                        Some((n, false)),
                        Some(Reply::Read {
                            psn,
                            va,
                            remaining,
                            first,
                            ..
                        }),
                    ) => {
                        *psn = psn::add(*psn, 1);
                        *va = va.wrapping_add(u64::from(n));
                        *remaining -= n;
                        *first = false;
                    }
                    _ => {
                        self.replies.pop_front();
                    }
                }
                Ok(Some(len))
            }
            Err(EmitError::NoRoom) => {
                cx.counters.drops.tx_no_room += 1;
                Ok(None)
            }
            Err(EmitError::Wire) => {
                self.replies.pop_front();
                Ok(None)
            }
            Err(EmitError::Memory) => {
                let Reply::Read { psn, msn, .. } = reply else {
                    return Ok(None);
                };
                self.replies.pop_front();
                self.replies.push_front(Reply::Ack {
                    psn,
                    syndrome: Syndrome::Nak(NakCode::RemoteAccess),
                    msn,
                    terminal: true,
                });
                Err(Fatal(QpErrorCause::Responder(NakCode::RemoteAccess)))
            }
        }
    }
}

/// Appends a receive completion.
#[allow(clippy::too_many_arguments)]
fn push_recv(
    cx: &mut RespCx<'_>,
    wr_id: u64,
    status: WcStatus,
    opcode: WcOpcode,
    byte_len: u32,
    imm: Option<u32>,
    invalidated_rkey: Option<u32>,
    solicited: bool,
) {
    cx.cq.push_back(WorkCompletion {
        wr_id,
        status,
        opcode,
        queue: WcQueue::Recv,
        byte_len,
        imm,
        invalidated_rkey,
        qpn: cx.p.qpn,
        src_qp: cx.p.dest_qpn,
        solicited,
    });
}
