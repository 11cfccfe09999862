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
//! twice. A request ahead of `epsn` means packets were lost or reordered: it
//! is held for up to 100 µs, adaptively ([`reorder`]); if the gap fills meanwhile
//! everything is handled in PSN order, else one NAK PSN-sequence error
//! carrying `epsn` goes out and later out-of-order packets are dropped
//! silently until `epsn` arrives.
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

mod execute;
pub(super) mod reorder;
mod replies;

use super::emit::{write_packet, write_packet_lent, EmitError};
use super::recv_queue::RecvQueue;
use super::send_queue::npkts;
use super::wr::{RecvWr, WcOpcode, WcQueue, WcStatus, WorkCompletion};
use super::{Counters, Fatal, Params, QpErrorCause};
use crate::mem::{
    lend_remote, scatter, sgl_len, Access, AccessError, AtomicOp, LentPayload, Memory,
};
use crate::time::Instant;
use ndverbs_wire::bth::{psn, Bth};
use ndverbs_wire::ext::{Aeth, NakCode, Syndrome};
use ndverbs_wire::opcode::{Opcode, OpcodeInfo, Operation, Position};
use ndverbs_wire::packet::{ExtHeaders, Packet};
use reorder::Reorder;
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
    /// Requests ahead of a PSN gap, waiting for it to fill.
    ahead: Reorder,
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
        self.ahead.clear();
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
        let (qpn, src_qp) = (cx.p.qpn, cx.p.dest_qpn);
        for wr in in_progress.into_iter().chain(wr) {
            let (wr_id, queue) = (wr.wr_id, WcQueue::Recv);
            let wc = WorkCompletion::unfinished(wr_id, status, WcOpcode::Recv, queue, qpn, src_qp);
            cx.cq.push_back(wc);
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

    /// Handles one request packet of opcode `info`, then the held requests
    /// it lets through.
    pub fn handle(
        &mut self,
        cx: &mut RespCx<'_>,
        now: Instant,
        mem: &mut dyn Memory,
        rq: &mut RecvQueue,
        info: &'static OpcodeInfo,
        pkt: &Packet<'_>,
    ) -> Result<(), Fatal> {
        let filled = !self.ahead.is_empty() && pkt.bth.psn == self.epsn;
        self.handle_one(cx, now, mem, rq, info, pkt)?;
        if filled {
            cx.counters.resequenced += 1;
            self.ahead.filled(now);
        }
        while !self.ahead.is_empty() {
            let (next, stale) = self.ahead.take_next(self.epsn);
            cx.counters.duplicate_request += stale as u64;
            let Some(h) = next else { break };
            self.handle_one(cx, now, mem, rq, h.info, &h.packet())?;
        }
        Ok(())
    }

    /// When held requests are taken for lost ([`Responder::reorder_expired`]).
    pub fn reorder_deadline(&self) -> Option<Instant> {
        self.ahead.deadline()
    }

    /// The gap did not fill in time: the sequence NAK goes out and what
    /// was held is dropped, as it would have been on arrival.
    pub fn reorder_expired(&mut self, cx: &mut RespCx<'_>, now: Instant) {
        if self.ahead.deadline().is_none_or(|t| t > now) {
            return;
        }
        let n = self.ahead.expired() as u64;
        if self.sent_psn_nak {
            cx.counters.drops.out_of_seq += n;
        } else {
            cx.counters.drops.out_of_seq += n.saturating_sub(1);
            self.psn_nak(cx);
        }
    }

    /// The one PSN-sequence NAK of a gap, naming `epsn`; later requests
    /// ahead of it are dropped until it arrives.
    fn psn_nak(&mut self, cx: &mut RespCx<'_>) {
        self.sent_psn_nak = true;
        cx.counters.out_of_seq_request += 1;
        self.ack(cx, self.epsn, Syndrome::Nak(NakCode::PsnSequence));
    }

    fn handle_one(
        &mut self,
        cx: &mut RespCx<'_>,
        now: Instant,
        mem: &mut dyn Memory,
        rq: &mut RecvQueue,
        info: &'static OpcodeInfo,
        pkt: &Packet<'_>,
    ) -> Result<(), Fatal> {
        // CHK_PSN
        let p = pkt.bth.psn;
        let d = psn::diff(p, self.epsn);
        if d > 0 {
            if self.sent_psn_nak {
                cx.counters.drops.out_of_seq += 1;
            } else if !self.ahead.hold(now, info, pkt) {
                // More ahead than a reordering explains: a loss.
                cx.counters.drops.out_of_seq += self.ahead.clear() as u64;
                self.psn_nak(cx);
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
        let ext = &pkt.ext;
        match (info.operation, ext.reth, ext.atomic_eth) {
            (Operation::Send, ..) => self.send(cx, mem, rq, info, pkt),
            (Operation::Write, ..) => self.write(cx, mem, rq, info, pkt),
            (Operation::ReadRequest, Some(reth), _) => {
                self.needs_resources(cx, p)?;
                self.read(cx, mem, p, reth)
            }
            (op, _, Some(a)) => {
                self.needs_resources(cx, p)?;
                self.atomic(cx, mem, p, op, a)
            }
            // Parsing guarantees every header the opcode names.
            _ => Ok(()),
        }
    }
}

/// Appends the completion of a receive that `last`, the last packet of a
/// message, finished: `byte_len` bytes, with the packet's immediate data and
/// solicited-event bit.
pub(super) fn push_recv(
    cx: &mut RespCx<'_>,
    wr_id: u64,
    opcode: WcOpcode,
    byte_len: u32,
    invalidated_rkey: Option<u32>,
    last: &Packet<'_>,
) {
    cx.cq.push_back(WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode,
        queue: WcQueue::Recv,
        byte_len,
        imm: last.ext.immdt,
        invalidated_rkey,
        qpn: cx.p.qpn,
        src_qp: cx.p.dest_qpn,
        solicited: last.bth.se,
        grh: false,
    });
}
