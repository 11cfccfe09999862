//! The requester: send WQEs become request packets (Linux `rxe_req.c`).
//!
//! Each call to [`Requester::poll`] produces at most one packet for the WQE at
//! `idx`, in this order of checks:
//!
//! 1. **Retry.** If the completer asked for one (timeout, sequence NAK, lost
//!    READ response, or an expired RNR wait), rewind: go back to the oldest
//!    unacknowledged WQE and resend everything from the completer's PSN
//!    (*go-back-N*). A multi-packet SEND/WRITE resumes at the packet with that
//!    PSN; a READ is re-requested in chunks (below).
//! 2. **RNR wait.** After an RNR NAK nothing is sent until the RNR timer fires.
//! 3. **Send window.** At most [`max_window`] PSNs beyond the oldest
//!    unacknowledged one ([`MAX_UNACKED_BYTES`] of packets, and never fewer
//!    than rxe's [`MAX_UNACKED_PSNS`]) — fewer after losses: the window halves at every
//!    retry (down to [`MIN_WINDOW`]) and grows back by [`WINDOW_STEP`] with every
//!    acknowledgement that makes progress. Go-back-N resends everything after a
//!    lost packet, so on a lossy path a full window mostly buys retransmissions;
//!    a smaller one keeps the waste bounded. rxe always uses the full window;
//!    the peer cannot tell the difference.
//!
//!    **With a send budget** (a congestion controller attached, see
//!    [`crate::cc`]) the caller decides instead: a SEND or WRITE packet goes
//!    out only if its payload fits in the bytes the caller allows, which it
//!    consumes, and the PSN window is the hard cap [`CC_MAX_UNACKED_PSNS`]
//!    (rxe responders do not bound a requester's outstanding PSNs; 128 is
//!    rxe's own requester limit). The packet that leaves less than one MTU of
//!    budget asks for an ACK, so a QP stopped by its budget hears back.
//!    A READ request is charged the response bytes it asks for (they cross
//!    the same path, the other way), and asks for no more than the budget
//!    allows — the rest in chunks, as below; atomics are not charged. What was sent, acknowledged, sampled
//!    and lost accumulates in [`CcSignals`] for the caller to take.
//! 4. **Read fence.** A fenced WQE waits until every earlier READ/atomic completed.
//! 5. **`max_rd_atomic`.** A READ or atomic needs a free slot; the slot is
//!    returned when the completer retires it.
//!
//! Segmentation: a SEND/WRITE of `len` bytes becomes `ceil(len / mtu)` packets
//! (one for `len == 0`): FIRST and MIDDLE carry exactly the path MTU, LAST the
//! rest; a single packet is ONLY. RETH rides on the first WRITE packet,
//! ImmDt/IETH on the last. A READ is one request packet that consumes
//! `max(1, ceil(len / mtu))` PSNs (one per response packet). AckReq is set on
//! every READ request, on every [`MAX_PKT_PER_ACK`]th packet (at most half a
//! window apart), and on the last packet of a message unless the next message
//! leaves right behind it (`next_follows`: a stream of messages asks once per
//! [`MAX_PKT_PER_ACK`] packets instead of once per message, half the ACKs of
//! 64-KiB WRITEs at path MTU 1024; the last message of a burst always asks).
//! Under a congestion controller, as rxe: every message's end and every
//! [`RXE_MAX_PKT_PER_ACK`]th packet. Linux rxe acknowledges nothing else.
//!
//! **READ retries in chunks.** The first request of a READ asks for all of it
//! (with a send budget: for what the budget allows, the rest then follows in
//! chunks as below).
//! A re-request (after a rewind) asks only for the next *chunk*: from the first
//! byte not yet received (`read_done`, a multiple of the MTU), at the PSN of
//! that response packet, for at most one send window of packets
//! (`window() × mtu`, at least [`MIN_WINDOW`] packets) — so a loss costs at
//! most a window of re-sent responses, not the rest of a long READ. While a
//! chunk is outstanding the requester stays at that READ and sends nothing
//! behind it; when the completer has received the whole chunk, the next chunk
//! goes out at the PSN where it starts, and after the last chunk the requester
//! moves on. The WQE keeps its PSN range and completes once, when all its bytes
//! arrived. Each chunk ends on a packet boundary, so the PSNs of the responses
//! stay those of the original READ.
//!
//! To the responder a chunk is a duplicate READ whose PSN lies in the range of
//! the original and whose (va, len) is a subset of it (accepted by Linux rxe's
//! `duplicate_request` and by `responder.rs`); it answers from that PSN with MIDDLE …
//! LAST (FIRST … LAST or ONLY if the chunk starts at the first PSN), a LAST
//! that may sit inside the original range. If the original request never
//! arrived, each chunk is simply a new, shorter READ. Chunks go strictly one at
//! a time and in increasing order because rxe, on accepting such a duplicate,
//! makes its va the new lower bound for later ones: a re-request below a chunk
//! already asked for would be dropped forever. And a request never reaches past
//! the end of any earlier re-request that covers its start, even if the window
//! grew meanwhile: when the original request was lost, the responder holds the
//! first of those that arrived as a READ of its own, a later request starting
//! inside it is a duplicate of it, and only a subset of it is valid. (Each new
//! request is thus a subset of every earlier one that covers its start.)

use super::emit::{write_packet, write_packet_lent, EmitError};
use super::send_queue::{npkts, Kind, SendQueue, Wqe};
use super::wr::{SendOp, WcStatus};
use super::{Fatal, Params, QpErrorCause};
use crate::mem::{gather, lend, AccessError, LentPayload, Memory};
use crate::time::Duration;
use ndverbs_wire::bth::{psn, Bth};
use ndverbs_wire::ext::{AtomicEth, Reth};
use ndverbs_wire::opcode::Opcode;
use ndverbs_wire::packet::ExtHeaders;

/// Fewest PSNs the send window may reach at full size (rxe
/// `RXE_MAX_UNACKED_PSNS`, which is its only limit).
pub const MAX_UNACKED_PSNS: i32 = 128;
/// Bytes the send window may reach at full size: the window is a byte
/// budget, so a path MTU of 1024 (an Ethernet link) keeps as much data in
/// flight as 4096 does. In PSNs: [`max_window`].
pub const MAX_UNACKED_BYTES: u32 = 512 * 1024;
/// Most PSNs the window may ever reach (at the smallest MTUs).
const MAX_WINDOW_PSNS: i32 = 1024;

/// The full send window in PSNs at path MTU `mtu` bytes: [`MAX_UNACKED_BYTES`]
/// of packets, at least [`MAX_UNACKED_PSNS`].
///
/// ```
/// use ndverbs_proto::rc::{max_window, MAX_UNACKED_PSNS};
/// assert_eq!(max_window(4096), MAX_UNACKED_PSNS); // rxe's 128 at 4 KiB
/// assert_eq!(max_window(1024), 512); // the same 512 KiB on Ethernet
/// assert_eq!(max_window(256), 1024); // capped
/// ```
pub fn max_window(mtu: u32) -> i32 {
    ((MAX_UNACKED_BYTES / mtu.max(1)) as i32).clamp(MAX_UNACKED_PSNS, MAX_WINDOW_PSNS)
}
/// Smallest send window after repeated losses.
pub const MIN_WINDOW: i32 = 8;
/// Window growth per acknowledgement that makes progress.
pub const WINDOW_STEP: i32 = 4;
/// The PSN window's hard cap while a send budget (congestion control) decides
/// what may be sent.
pub const CC_MAX_UNACKED_PSNS: i32 = 1024;
/// Packets between AckReq flags at most: twice [`RXE_MAX_PKT_PER_ACK`], as
/// the window at path MTU 1024 ([`max_window`]) is four times rxe's; never
/// more than half the window.
pub const MAX_PKT_PER_ACK: u32 = 128;
/// Linux rxe's packets between AckReq flags (`RXE_MAX_PKT_PER_ACK`), also
/// ours under a congestion controller.
pub const RXE_MAX_PKT_PER_ACK: u32 = 64;
/// Smallest payload offered to the caller as lent (`LentPayload`) instead of
/// copied into the packet: a lent payload is checked once per SGE, not once
/// per packet. Whether the kernel then gets it as a piece of its own or the
/// engine copies it next to the headers is the engine's choice.
pub const LEND_MIN: usize = 1024;

/// Requester state.
#[derive(Debug, Clone, Default)]
pub(crate) struct Requester {
    /// Index (from the SQ front) of the WQE being transmitted.
    pub idx: usize,
    /// Bytes of that WQE already transmitted in this pass.
    pub offset: u32,
    /// The next PSN this pass will use (for the window check and `query`).
    pub psn: u32,
    /// The next PSN never sent before: everything below was sent at least once.
    pub hw_psn: u32,
    /// Packets sent since the last AckReq.
    pub noack_pkts: u32,
    /// READ/atomic slots in use.
    pub rd_atomic_used: u32,
    /// The completer asked for go-back-N.
    pub need_retry: bool,
    /// Waiting for the RNR timer.
    pub rnr_wait: bool,
    /// Send window in PSNs (0 until the first `start`: means the maximum).
    pub window: i32,
    /// The full window at this QP's path MTU ([`max_window`]).
    pub max_window: i32,
    /// The last packet sent: its PSN, and whether it was sent for the first
    /// time and occupies one PSN (a clean round-trip sample once acknowledged).
    pub last_sent: (u32, bool),
    /// The PSNs the last packet sent took (a READ request takes one per
    /// response packet) and whether they were new (beyond every PSN sent
    /// before) rather than a go-back-N re-send: the QP counts them.
    pub last_span: (u32, bool),
    /// Congestion signals not yet taken.
    pub cc: CcSignals,
    /// Payload bytes sent and not yet acknowledged or abandoned.
    pub cc_in_flight: u64,
    /// The completer's PSN when acknowledged bytes were last counted.
    pub cc_acked_psn: u32,
}

/// What a QP's requester and completer tell a congestion controller:
/// everything since the signals were last taken
/// ([`crate::rc::RcQp::take_cc_signals`]).
///
/// Bytes are payload bytes of SEND and WRITE packets and the response bytes
/// READ requests ask for (they cross the path too, the other way);
/// acknowledged bytes are the PSNs acknowledged times the MTU, bounded by
/// what is in flight (atomic PSNs count nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CcSignals {
    /// Payload bytes sent (first transmissions and re-sends).
    pub sent: u64,
    /// Payload bytes acknowledged.
    pub acked: u64,
    /// The smallest round-trip sample taken, if any.
    pub rtt: Option<Duration>,
    /// Go-back-N retries and probes started.
    pub losses: u32,
    /// CNPs received for this QP (a switch marked one of its packets).
    pub cnps: u32,
    /// Bytes in flight given up: by those retries (they will be sent
    /// again), or because the QP stopped sending.
    pub abandoned: u64,
}

/// What one poll produced.
pub(crate) enum ReqOut {
    /// A packet of this length is in the buffer.
    Sent(usize),
    /// Nothing to send now.
    Idle,
    /// The buffer is too small.
    NoRoom,
}

impl Requester {
    /// A fresh requester starting at `sq_psn` (RTR → RTS) on a path of
    /// MTU `mtu` bytes.
    pub fn start(sq_psn: u32, mtu: u32) -> Self {
        Requester {
            psn: sq_psn,
            hw_psn: sq_psn,
            max_window: max_window(mtu),
            cc_acked_psn: sq_psn,
            ..Requester::default()
        }
    }

    /// The completer's PSN advanced to `comp_psn`, with a round-trip sample
    /// if one was taken: count the acknowledged bytes.
    pub fn cc_progress(&mut self, comp_psn: u32, mtu: u32, rtt: Option<Duration>) {
        let d = psn::diff(comp_psn, self.cc_acked_psn);
        if d > 0 {
            let bytes = (d as u64 * u64::from(mtu)).min(self.cc_in_flight);
            self.cc_in_flight -= bytes;
            self.cc.acked += bytes;
            self.cc_acked_psn = comp_psn;
        }
        // Never more in flight than the PSNs not yet acknowledged carry: a
        // go-back-N re-send of a PSN that an ACK of the original then covered
        // is never acknowledged again (the responder answers it as a
        // duplicate), and counted in flight forever it would close the
        // path's window for good.
        let outstanding = psn::diff(self.hw_psn, comp_psn).max(0) as u64 * u64::from(mtu);
        if self.cc_in_flight > outstanding {
            self.cc.abandoned += self.cc_in_flight - outstanding;
            self.cc_in_flight = outstanding;
        }
        if let Some(r) = rtt {
            self.cc.rtt = Some(self.cc.rtt.map_or(r, |m| m.min(r)));
        }
    }

    /// The QP stopped sending: its bytes in flight are given up, no loss.
    pub fn cc_release(&mut self) {
        self.cc.abandoned += self.cc_in_flight;
        self.cc_in_flight = 0;
    }

    /// A go-back-N retry or probe from `comp_psn`: everything in flight
    /// behind it will be sent again.
    pub fn cc_loss(&mut self, comp_psn: u32, mtu: u32) {
        self.cc_progress(comp_psn, mtu, None);
        self.cc.losses += 1;
        self.cc.abandoned += self.cc_in_flight;
        self.cc_in_flight = 0;
    }

    /// The current send window in PSNs.
    pub fn window(&self) -> i32 {
        if self.window == 0 {
            self.full_window()
        } else {
            self.window
        }
    }

    /// The full window ([`max_window`]; rxe's before the first start).
    fn full_window(&self) -> i32 {
        if self.max_window == 0 {
            MAX_UNACKED_PSNS
        } else {
            self.max_window
        }
    }

    /// A retry started: halve the window.
    pub fn on_loss(&mut self) {
        self.window = (self.window() / 2).max(MIN_WINDOW);
    }

    /// An acknowledgement made progress: widen the window.
    pub fn on_progress(&mut self) {
        self.window = (self.window() + WINDOW_STEP).min(self.full_window());
    }

    /// Go-back-N: resend from the oldest WQE.
    fn rewind(&mut self, sq: &mut SendQueue, comp_psn: u32, mtu: u32) {
        self.idx = 0;
        self.offset = 0;
        self.noack_pkts = 0;
        self.psn = comp_psn;
        for w in &mut sq.wqes {
            w.read_req_end = None;
        }
        if let Some(w) = sq.wqes.front() {
            if w.assigned && matches!(w.kind, Kind::Send | Kind::Write) {
                let k = psn::diff(comp_psn, w.first_psn);
                if k > 0 && (k as u32) < w.npkts(mtu) {
                    self.offset = k as u32 * mtu;
                }
            }
        }
    }

    /// Whether the message after WQE `idx`, whose last packet carries
    /// `pkt_psn`, will be sent right after that packet: a SEND or WRITE not
    /// yet started, not fenced, with room in the window, and that packet a
    /// first transmission (a retry asks at every message's end, so a
    /// mistaken guess costs one timeout, never a loop of them). READs and
    /// atomics ask for their own ACKs and may wait for `max_rd_atomic`
    /// slots; a draining QP (SQD) starts nothing new.
    fn next_follows(
        &self,
        sq: &SendQueue,
        idx: usize,
        pkt_psn: u32,
        comp_psn: u32,
        window: i32,
        draining: bool,
    ) -> bool {
        let fresh = psn::diff(pkt_psn, self.hw_psn) >= 0;
        fresh
            && in_window(psn::add(pkt_psn, 1), comp_psn, window)
            && !draining
            && sq
                .wqes
                .get(idx + 1)
                .is_some_and(|n| !n.assigned && !n.is_read_or_atomic() && !n.wr.fence)
    }

    /// Called when the completer retires the front WQE.
    pub fn on_retire(&mut self, w: &Wqe, mtu: u32) {
        if w.holds_rd_atomic {
            self.rd_atomic_used = self.rd_atomic_used.saturating_sub(1);
        }
        if self.idx > 0 {
            self.idx -= 1;
        } else {
            // We were re-sending this very WQE; its remaining packets are moot.
            self.offset = 0;
            let next = psn::add(w.first_psn, w.npkts(mtu));
            if psn::diff(next, self.psn) > 0 {
                self.psn = next;
            }
        }
    }

    /// Produces the next request packet, if any.
    #[allow(clippy::too_many_arguments)]
    pub fn poll(
        &mut self,
        sq: &mut SendQueue,
        comp_psn: u32,
        draining: bool,
        p: &Params,
        mem: &mut dyn Memory,
        buf: &mut [u8],
        lent: Option<&mut LentPayload>,
        budget: &mut Option<u64>,
    ) -> Result<ReqOut, Fatal> {
        let mtu = p.mtu;
        if self.need_retry && !self.rnr_wait {
            self.rewind(sq, comp_psn, mtu);
            self.need_retry = false;
        }
        if self.rnr_wait {
            return Ok(ReqOut::Idle);
        }
        let idx = self.idx;
        let Some(w) = sq.wqes.get(idx) else {
            return Ok(ReqOut::Idle);
        };
        if w.kind == Kind::Read && w.read_req_end.is_some_and(|end| w.read_done < end) {
            // A chunk of this READ is being answered: wait for all of it.
            return Ok(ReqOut::Idle);
        }
        // Where this packet starts and which PSN it carries.
        let offset = if w.kind == Kind::Read {
            w.read_done
        } else {
            self.offset
        };
        let pkt_psn = if w.assigned {
            psn::add(w.first_psn, offset / mtu)
        } else {
            self.hw_psn
        };
        let window = if budget.is_some() {
            CC_MAX_UNACKED_PSNS
        } else {
            self.window()
        };
        if !in_window(pkt_psn, comp_psn, window) {
            return Ok(ReqOut::Idle);
        }
        if draining && !w.assigned {
            return Ok(ReqOut::Idle);
        }
        if w.wr.fence && sq.wqes.iter().take(idx).any(Wqe::is_read_or_atomic) {
            return Ok(ReqOut::Idle);
        }
        if w.is_read_or_atomic() && !w.holds_rd_atomic && self.rd_atomic_used >= p.max_rd_atomic {
            return Ok(ReqOut::Idle);
        }

        let remaining = w.len - offset.min(w.len);
        // What a READ request asks for: everything the first time, a chunk of
        // at most one window when it is asked again.
        let read_len = if w.assigned {
            let chunk = (self.window().max(MIN_WINDOW) as u32).saturating_mul(mtu);
            // Never past the end of a chunk asked for before that covers this
            // offset: the responder may hold that chunk as a READ of its own,
            // and only a subset of it is a valid duplicate.
            let bound = w.read_bounds.iter().filter(|&&e| e > offset).min();
            let mut n = remaining.min(chunk);
            if let Some(&end) = bound {
                n = n.min(end - offset);
            }
            n
        } else {
            remaining
        };
        // With a congestion controller's budget a READ asks for no more
        // response bytes than the budget allows (whole packets): those bytes
        // cross the path toward us, and a READ of megabytes answered at once
        // would land on the bottleneck as one burst. The rest follows in
        // chunks, as after a loss.
        let read_len = match *budget {
            Some(b) if w.kind == Kind::Read && u64::from(read_len) > b => {
                let whole = (b / u64::from(mtu)).min(u64::from(u32::MAX / mtu)) as u32 * mtu;
                if whole == 0 {
                    return Ok(ReqOut::Idle);
                }
                whole
            }
            _ => read_len,
        };
        let (payload, first, last) = match w.kind {
            Kind::Send | Kind::Write => (remaining.min(mtu), offset == 0, remaining <= mtu),
            Kind::Read => (0, true, read_len == remaining),
            Kind::Atomic => (0, true, true),
        };
        // The congestion controller's budget: a payload must fit (a READ's
        // responses fit: just bounded).
        let charge = u64::from(if w.kind == Kind::Read {
            read_len
        } else {
            payload
        });
        let left = match *budget {
            Some(b) if charge > b => return Ok(ReqOut::Idle),
            Some(b) => Some(b - charge),
            None => None,
        };
        let opcode = opcode_for(&w.wr.op, first, last);
        let mut ext = ExtHeaders::default();
        match w.wr.op {
            SendOp::Write(r) | SendOp::WriteImm(r, _) if first => {
                ext.reth = Some(Reth {
                    va: r.va,
                    rkey: r.rkey,
                    len: w.len,
                });
            }
            SendOp::Read(r) => {
                ext.reth = Some(Reth {
                    va: r.va.wrapping_add(u64::from(offset)),
                    rkey: r.rkey,
                    len: read_len,
                });
            }
            SendOp::CompareSwap {
                remote,
                compare,
                swap,
            } => {
                ext.atomic_eth = Some(AtomicEth {
                    va: remote.va,
                    rkey: remote.rkey,
                    swap_add: swap,
                    compare,
                });
            }
            SendOp::FetchAdd { remote, add } => {
                ext.atomic_eth = Some(AtomicEth {
                    va: remote.va,
                    rkey: remote.rkey,
                    swap_add: add,
                    compare: 0,
                });
            }
            _ => {}
        }
        if last {
            match w.wr.op {
                SendOp::SendImm(imm) | SendOp::WriteImm(_, imm) => ext.immdt = Some(imm),
                SendOp::SendInv(rkey) => ext.ieth = Some(rkey),
                _ => {}
            }
        }
        // Ask for an ACK at least twice per window, or a small window stalls
        // until the retransmission timer. Every READ request asks for one.
        // Under a congestion controller (a budget) a QP asks as rxe does, at
        // every message's end and every RXE_MAX_PKT_PER_ACK packets: the
        // controller's round-trip samples and its window ride on the ACKs.
        let cc = budget.is_some();
        let most = if cc {
            RXE_MAX_PKT_PER_ACK
        } else {
            MAX_PKT_PER_ACK
        };
        let every = most.min((self.window() / 2).max(1) as u32);
        // A QP about to stop for lack of budget asks for an ACK too.
        let starved = left.is_some_and(|l| l < u64::from(mtu));
        // The last packet of a message asks for an ACK unless the next
        // message leaves right behind it (which then asks, or a later one).
        let end_asks =
            last && (cc || !self.next_follows(sq, idx, pkt_psn, comp_psn, window, draining));
        let ack_req = end_asks || w.kind == Kind::Read || self.noack_pkts + 1 >= every || starved;
        let mut bth = Bth::new(opcode, p.dest_qpn, pkt_psn);
        bth.ack_req = ack_req;
        bth.se = last && w.wr.solicited && matches!(w.kind, Kind::Send | Kind::Write);

        let (inline, sgl) = (w.wr.inline.as_deref(), &w.wr.sgl);
        // A large payload from registered memory may stay there: the engine
        // sends it from the region (no copy into the packet buffer).
        let lent = match lent {
            Some(l) if inline.is_none() && payload as usize >= LEND_MIN => {
                match lend(mem, p.pd, sgl, u64::from(offset), payload as usize, l) {
                    Ok(true) => Some(l),
                    Ok(false) => None,
                    Err(_) => {
                        if let Some(w) = sq.wqes.get_mut(idx) {
                            w.error = Some(WcStatus::LocProtErr);
                        }
                        return Err(Fatal(QpErrorCause::Requester(WcStatus::LocProtErr)));
                    }
                }
            }
            Some(l) => {
                l.clear();
                None
            }
            None => None,
        };
        let written = if let Some(l) = lent {
            match write_packet_lent(buf, bth, &ext, payload as usize) {
                Ok((hdr, n)) => {
                    l.hdr_len = hdr;
                    Ok(n)
                }
                Err(e) => {
                    l.clear();
                    Err(e)
                }
            }
        } else {
            write_packet(buf, bth, &ext, payload as usize, |out| {
                if out.is_empty() {
                    return Ok(());
                }
                match inline {
                    Some(data) => {
                        let s = offset as usize;
                        let src = data.get(s..s + out.len()).ok_or(AccessError::SglOverrun {
                            offset: u64::from(offset),
                            len: out.len() as u64,
                            total: data.len() as u64,
                        })?;
                        out.copy_from_slice(src);
                        Ok(())
                    }
                    None => gather(mem, p.pd, sgl, u64::from(offset), out),
                }
            })
        };
        let n = match written {
            Ok(n) => n,
            Err(EmitError::NoRoom) => return Ok(ReqOut::NoRoom),
            Err(EmitError::Wire) => return Ok(ReqOut::Idle),
            Err(EmitError::Memory) => {
                if let Some(w) = sq.wqes.get_mut(idx) {
                    w.error = Some(WcStatus::LocProtErr);
                }
                return Err(Fatal(QpErrorCause::Requester(WcStatus::LocProtErr)));
            }
        };

        // The packet is out: advance.
        if left.is_some() {
            *budget = left;
        }
        self.cc.sent += charge;
        self.cc_in_flight += charge;
        let Some(w) = sq.wqes.get_mut(idx) else {
            return Ok(ReqOut::Sent(n));
        };
        let resent = w.assigned;
        if !w.assigned {
            w.first_psn = pkt_psn;
            w.last_psn = psn::add(pkt_psn, w.npkts(mtu) - 1);
            w.assigned = true;
        }
        let consumed = match w.kind {
            Kind::Read => {
                w.read_req_end = Some(offset + read_len);
                // A first request cut short by the budget bounds later
                // re-requests as a re-request does (see the module docs).
                if resent || !last {
                    let end = offset + read_len;
                    w.read_bounds.retain(|&e| e > offset && e != end);
                    w.read_bounds.push(end);
                }
                if !last {
                    w.read_chunked = true;
                }
                npkts(read_len, mtu)
            }
            _ => 1,
        };
        if w.is_read_or_atomic() && !w.holds_rd_atomic {
            w.holds_rd_atomic = true;
            self.rd_atomic_used += 1;
        }
        self.psn = psn::add(pkt_psn, consumed);
        let fresh = psn::diff(self.psn, self.hw_psn) > 0;
        if fresh {
            self.hw_psn = self.psn;
        }
        self.last_sent = (pkt_psn, fresh && consumed == 1);
        self.last_span = (consumed, fresh);
        self.noack_pkts = if ack_req { 0 } else { self.noack_pkts + 1 };
        if last {
            self.idx += 1;
            self.offset = 0;
        } else {
            self.offset = offset + payload;
        }
        Ok(ReqOut::Sent(n))
    }
}

/// Whether the packet with PSN `psn` fits in a send window of `window` PSNs
/// beyond `comp_psn`, the oldest unacknowledged.
fn in_window(psn: u32, comp_psn: u32, window: i32) -> bool {
    psn::diff(psn, comp_psn) < window
}

/// The RC opcode of a packet of `op` at this position.
fn opcode_for(op: &SendOp, first: bool, last: bool) -> Opcode {
    match (op, first, last) {
        (SendOp::Send, true, true) => Opcode::RC_SEND_ONLY,
        (SendOp::SendImm(_), true, true) => Opcode::RC_SEND_ONLY_IMM,
        (SendOp::SendInv(_), true, true) => Opcode::RC_SEND_ONLY_INV,
        (SendOp::Send | SendOp::SendImm(_) | SendOp::SendInv(_), true, false) => {
            Opcode::RC_SEND_FIRST
        }
        (SendOp::Send | SendOp::SendImm(_) | SendOp::SendInv(_), false, false) => {
            Opcode::RC_SEND_MIDDLE
        }
        (SendOp::Send, false, true) => Opcode::RC_SEND_LAST,
        (SendOp::SendImm(_), false, true) => Opcode::RC_SEND_LAST_IMM,
        (SendOp::SendInv(_), false, true) => Opcode::RC_SEND_LAST_INV,
        (SendOp::Write(_), true, true) => Opcode::RC_WRITE_ONLY,
        (SendOp::WriteImm(..), true, true) => Opcode::RC_WRITE_ONLY_IMM,
        (SendOp::Write(_) | SendOp::WriteImm(..), true, false) => Opcode::RC_WRITE_FIRST,
        (SendOp::Write(_) | SendOp::WriteImm(..), false, false) => Opcode::RC_WRITE_MIDDLE,
        (SendOp::Write(_), false, true) => Opcode::RC_WRITE_LAST,
        (SendOp::WriteImm(..), false, true) => Opcode::RC_WRITE_LAST_IMM,
        (SendOp::Read(_), ..) => Opcode::RC_READ_REQUEST,
        (SendOp::CompareSwap { .. }, ..) => Opcode::RC_COMPARE_SWAP,
        (SendOp::FetchAdd { .. }, ..) => Opcode::RC_FETCH_ADD,
    }
}
