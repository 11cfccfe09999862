//! The completer: responses become completions; losses become retries
//! (Linux `rxe_comp.c`).
//!
//! The completer owns the *completion PSN* `psn`: the oldest PSN not yet
//! acknowledged. Everything in `psn .. hw_psn` has been sent and awaits an
//! answer. For each response packet with PSN `p`:
//!
//! * `p` at or beyond `hw_psn` acknowledges something never sent, and `p`
//!   before `psn` is stale (a duplicate or a late copy): both are dropped.
//! * **ACKs are cumulative.** While `p` lies beyond the last PSN of the oldest
//!   WQE, that WQE is done: a SEND or WRITE completes successfully. A READ or
//!   atomic, however, completes *only by its own response* — an answer beyond
//!   it means its response was lost, so a retry starts.
//! * ACK inside a SEND/WRITE: progress to `p + 1`; at its last PSN the WQE
//!   completes.
//! * READ responses must arrive in order (`p == psn`), FIRST/MIDDLE with
//!   exactly one MTU, LAST/ONLY with the rest; each is copied into the local
//!   SGEs at its offset. Once the READ was re-requested in chunks
//!   (`requester.rs`), a LAST or ONLY carrying a full MTU may also end a
//!   chunk inside the message, and FIRST or ONLY may start one there (a chunk
//!   the responder took as a new READ because the original request was lost);
//!   the WQE completes only with the response that carries its final byte. An ATOMIC ACKNOWLEDGE stores the
//!   original 8 bytes.
//! * A READ response *ahead* of `psn` means responses were lost once it is
//!   [`READ_GAP`] or more packets ahead, or is the LAST/ONLY that ends a
//!   response run (nothing after it will fill the hole): a retry starts at once
//!   instead of waiting for the timer. Smaller gaps may be reordering and are
//!   only dropped.
//! * **NAK PSN-sequence error** (`p` = the PSN the responder expects): acknowledges
//!   everything before `p`, then go-back-N from `p`, costing one retry.
//! * **RNR NAK**: acknowledges everything before `p`, costs one RNR retry and
//!   pauses the requester for the RNR timer's delay, then go-back-N.
//! * **NAK invalid request / remote access / remote operational error**: the
//!   WQE completes with `RemInvReqErr` / `RemAccessErr` / `RemOpErr` and the QP
//!   moves to ERR.
//! * A response of the wrong kind for the WQE (a READ response for a SEND, an
//!   atomic ACK for a READ) or with a bad length completes it with `BadRespErr`
//!   and the QP moves to ERR.
//!
//! **Retransmission timer.** `4.096 µs << timeout` (0: never). Armed when a
//! request goes out and none is pending, re-armed on every progress while
//! anything is outstanding, stopped when nothing is. On expiry: one retry.
//!
//! **Probe.** On a path that drops packets, the one NAK of a gap or the last
//! ACK of a burst is lost too now and then, and with a long ACK timeout (rxe's
//! ACK delay makes it 134 ms) every such loss would stall the QP for the whole
//! timeout. So the completer also keeps a smoothed round-trip time and its
//! variation (`srtt`, `rttvar` as TCP's RFC 6298, from packets acknowledged on
//! their first transmission, Karn's rule) and, when nothing was acknowledged
//! for `max(PROBE_RTTS × srtt, srtt + 4 × rttvar, PROBE_MIN)` while requests are
//! outstanding, starts a go-back-N retry early — a *probe*. Probes are armed
//! only within [`PROBE_HOLD`] of the last real loss signal (sequence NAK, lost
//! READ response, ACK timeout): on a clean path a slow ACK never causes a
//! spurious retransmission. Probes back off (the wait doubles with each one until
//! something is acknowledged), are not charged to the retry budget and leave
//! the retransmission timer alone, so `retry_cnt` still counts ACK timeouts
//! exactly as before. They are counted in `completer_retry_err`. No probe
//! fires while the probe wait would not be shorter than the ACK timeout.
//! The QP's owner may raise the floor above [`PROBE_MIN`]
//! ([`super::RcQp::set_probe_floor`]): on a host where our process waits
//! milliseconds for a CPU, an ACK is late that often without any loss.
//!
//! **Round-trip samples** run from the time a packet was built to the time
//! the ACK covering it *arrived* ([`super::RcQp::handle_packet_at`]: a
//! kernel receive timestamp), not to when the completer got to it.
//!
//! **Retry budget.** Each retry costs one of `retry_cnt`, each RNR NAK one of
//! `rnr_retry`; any progress restores both. An exhausted budget completes the
//! oldest WQE with `RetryExcErr` / `RnrRetryExcErr` and the QP moves to ERR.
//! The value 7 means *infinite* for both — as in Linux rxe, which we must
//! interoperate with. (The IBTA makes only `rnr_retry = 7` infinite; ND asks for
//! finite counts, which ndverbs honours.) A sequence NAK that arrives while a
//! retry is already under way and nothing progressed since is not charged again.

use super::send_queue::{complete_send, Kind, SendQueue};
use super::wr::WcStatus;
use super::{Counters, Fatal, Params, QpErrorCause, Requester};
use crate::mem::{scatter, Memory};
use crate::time::{Duration, Instant};
use ndverbs_wire::bth::psn;
use ndverbs_wire::ext::{rnr_timer_micros, NakCode, Syndrome};
use ndverbs_wire::opcode::{OpcodeInfo, Operation, Position};
use ndverbs_wire::packet::Packet;
use std::collections::VecDeque;

use super::wr::WorkCompletion;

/// A READ response this many PSNs ahead of the one expected counts as a loss.
pub const READ_GAP: i32 = 3;
/// Round trips without an acknowledgement before a probe.
pub const PROBE_RTTS: u32 = 3;
/// The shortest wait before a probe.
pub const PROBE_MIN: Duration = Duration::from_micros(100);
/// How long after a loss signal probing stays enabled.
pub const PROBE_HOLD: Duration = Duration::from_secs(1);

/// The send-side pieces the completer works on.
pub(crate) struct SendCx<'a> {
    pub sq: &'a mut SendQueue,
    pub req: &'a mut Requester,
    pub p: &'a Params,
    pub cq: &'a mut VecDeque<WorkCompletion>,
    pub counters: &'a mut Counters,
    pub now: Instant,
    /// When the packet being handled reached the host (a kernel receive
    /// timestamp; `now` when the caller has none): round-trip samples end
    /// here, so the time the packet then waited for our thread is not
    /// counted as path delay. Every timer still runs from `now`.
    pub arrived: Instant,
}

impl SendCx<'_> {
    /// Retires the oldest WQE with `status`.
    fn retire_front(&mut self, status: WcStatus) {
        if let Some(w) = self.sq.wqes.pop_front() {
            self.req.on_retire(&w, self.p.mtu);
            complete_send(&w, status, self.p, self.cq, self.counters);
        }
    }

    /// Marks the oldest WQE failed; the QP then flushes, completing it with `status`.
    fn fail_front(&mut self, status: WcStatus) -> Fatal {
        if let Some(w) = self.sq.wqes.front_mut() {
            w.error = Some(status);
        }
        Fatal(QpErrorCause::Requester(status))
    }
}

/// Takes one retry from the budget `left` that a QP count `count` set;
/// false when none is left. A count of 7 means retry forever.
fn charge(left: &mut u8, count: u8) -> bool {
    if *left == 0 {
        return false;
    }
    if count != 7 {
        *left -= 1;
    }
    true
}

/// What a response needs to know of the WQE it answers (the oldest one).
#[derive(Debug, Clone, Copy)]
struct Front {
    kind: Kind,
    /// Message length.
    len: u32,
    last_psn: u32,
    /// READ: response bytes received in order.
    read_done: u32,
    /// READ: re-requested in chunks.
    chunked: bool,
}

/// Completer state.
#[derive(Debug, Clone, Default)]
pub(crate) struct Completer {
    /// The oldest PSN not yet acknowledged.
    pub psn: u32,
    retry_left: u8,
    rnr_left: u8,
    started_retry: bool,
    /// Retransmission timer.
    pub retrans_deadline: Option<Instant>,
    /// End of the current RNR wait.
    pub rnr_deadline: Option<Instant>,
    /// When to probe (see the module docs).
    pub probe_deadline: Option<Instant>,
    /// Probes since the last acknowledgement (the wait doubles with each).
    probes: u32,
    /// Smoothed round-trip time, once measured.
    srtt: Option<Duration>,
    /// Round-trip time variation.
    rttvar: Duration,
    /// Probing is enabled until then (a loss signal was seen).
    lossy_until: Option<Instant>,
    /// A packet sent once, at this time, whose acknowledgement gives a sample.
    rtt_sample: Option<(u32, Instant)>,
    /// The shortest probe wait instead of [`PROBE_MIN`] (set by the QP's
    /// owner, [`super::RcQp::set_probe_floor`]).
    pub probe_floor: Option<Duration>,
}

impl Completer {
    /// A fresh completer (RTR → RTS).
    pub fn start(sq_psn: u32, p: &Params) -> Self {
        let mut c = Completer {
            psn: sq_psn,
            ..Completer::default()
        };
        c.set_limits(p);
        c
    }

    /// Full retry budgets from the QP's counts (also for new counts, SQD →
    /// SQD).
    pub fn set_limits(&mut self, p: &Params) {
        self.retry_left = p.retry_cnt;
        self.rnr_left = p.rnr_retry;
    }

    /// The earliest timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        [
            self.retrans_deadline,
            self.rnr_deadline,
            self.probe_deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Stops every timer (the QP entered ERR).
    pub fn stop_timers(&mut self) {
        self.retrans_deadline = None;
        self.rnr_deadline = None;
        self.probe_deadline = None;
    }

    /// The wait before the next probe, if probing applies.
    fn probe_wait(&self, p: &Params, now: Instant) -> Option<Duration> {
        if self.lossy_until.is_none_or(|t| now >= t) {
            return None;
        }
        let srtt = self.srtt?;
        let ack_timeout = p.ack_timeout?;
        let base = (srtt * PROBE_RTTS)
            .max(srtt + self.rttvar * 4)
            .max(self.probe_floor.unwrap_or(PROBE_MIN));
        let wait = base.checked_mul(1u32.checked_shl(self.probes.min(20))?)?;
        (wait < ack_timeout).then_some(wait)
    }

    /// (Re)arms the probe timer from `now`, if anything is outstanding.
    fn arm_probe(&mut self, cx: &SendCx<'_>) {
        self.probe_deadline = if self.outstanding(cx) && !cx.req.rnr_wait {
            self.probe_wait(cx.p, cx.now).map(|w| cx.now + w)
        } else {
            None
        };
    }

    /// PSNs sent and not yet acknowledged exist.
    fn outstanding(&self, cx: &SendCx<'_>) -> bool {
        psn::diff(cx.req.hw_psn, self.psn) > 0
    }

    /// A request packet went out: make sure the retransmission and probe
    /// timers run; start a round-trip sample if none is running.
    pub fn on_request_sent(&mut self, now: Instant, p: &Params, req: &Requester) {
        if req.rnr_wait {
            return;
        }
        if self.retrans_deadline.is_none() {
            self.retrans_deadline = p.ack_timeout.map(|t| now + t);
        }
        if self.probe_deadline.is_none() {
            self.probe_deadline = self.probe_wait(p, now).map(|w| now + w);
        }
        let (psn, clean) = req.last_sent;
        if self.rtt_sample.is_none() && clean {
            self.rtt_sample = Some((psn, now));
        }
    }

    /// Something was acknowledged (up to `self.psn`): restore the retry
    /// budgets, take a round-trip sample, restart the probe wait.
    fn progress(&mut self, cx: &mut SendCx<'_>) {
        cx.req.on_progress();
        self.set_limits(cx.p);
        self.started_retry = false;
        let mut taken = None;
        if let Some((s, t)) = self.rtt_sample {
            if psn::diff(self.psn, s) > 0 {
                // Until the ACK reached the host, not until we got to it;
                // an arrival before the send (a clock that moved under
                // the caller's conversion) is no measurement: `now` then.
                let end = if cx.arrived >= t { cx.arrived } else { cx.now };
                let sample = end.saturating_duration_since(t);
                taken = Some(sample);
                match self.srtt {
                    Some(old) => {
                        let dev = sample.abs_diff(old);
                        self.rttvar = (self.rttvar * 3 + dev) / 4;
                        self.srtt = Some((old * 7 + sample) / 8);
                    }
                    None => {
                        self.rttvar = sample / 2;
                        self.srtt = Some(sample);
                    }
                }
                self.rtt_sample = None;
            }
        }
        cx.req.cc_progress(self.psn, cx.p.mtu, taken);
        self.probes = 0;
        self.arm_probe(cx);
    }

    /// Re-arms or stops the retransmission timer after progress.
    fn rearm(&mut self, cx: &SendCx<'_>) {
        self.retrans_deadline = if self.outstanding(cx) && !cx.req.rnr_wait {
            cx.p.ack_timeout.map(|t| cx.now + t)
        } else {
            None
        };
    }

    /// Starts a go-back-N retry, charging the retry budget.
    fn retry(&mut self, cx: &mut SendCx<'_>, timeout: bool) -> Result<(), Fatal> {
        if !self.outstanding(cx) {
            return Ok(());
        }
        if !timeout && (self.started_retry || cx.req.need_retry) {
            cx.counters.drops.redundant_nak += 1;
            return Ok(());
        }
        if !charge(&mut self.retry_left, cx.p.retry_cnt) {
            cx.counters.retry_exceeded_err += 1;
            return Err(cx.fail_front(WcStatus::RetryExcErr));
        }
        cx.counters.completer_retry_err += 1;
        cx.req.on_loss();
        cx.req.cc_loss(self.psn, cx.p.mtu);
        cx.req.need_retry = true;
        self.started_retry = true;
        self.retrans_deadline = None;
        self.rtt_sample = None;
        self.lossy_until = Some(cx.now + PROBE_HOLD);
        Ok(())
    }

    /// Nothing was acknowledged for a while: retry early, free of charge.
    fn probe(&mut self, cx: &mut SendCx<'_>) {
        if !self.outstanding(cx) || cx.req.rnr_wait || cx.req.need_retry {
            return;
        }
        cx.counters.completer_retry_err += 1;
        cx.req.on_loss();
        cx.req.cc_loss(self.psn, cx.p.mtu);
        cx.req.need_retry = true;
        self.started_retry = true;
        self.rtt_sample = None;
        self.probes += 1;
        self.arm_probe(cx);
    }

    /// An RNR NAK: wait, then go-back-N, charging the RNR budget.
    fn rnr(&mut self, cx: &mut SendCx<'_>, timer: u8) -> Result<(), Fatal> {
        cx.counters.rcvd_rnr_err += 1;
        if cx.req.need_retry {
            cx.counters.drops.redundant_nak += 1;
            return Ok(());
        }
        if !charge(&mut self.rnr_left, cx.p.rnr_retry) {
            cx.counters.retry_rnr_exceeded_err += 1;
            return Err(cx.fail_front(WcStatus::RnrRetryExcErr));
        }
        cx.req.need_retry = true;
        cx.req.rnr_wait = true;
        self.started_retry = true;
        self.retrans_deadline = None;
        self.rnr_deadline =
            Some(cx.now + Duration::from_micros(u64::from(rnr_timer_micros(timer))));
        Ok(())
    }

    /// An RNR or PSN-sequence NAK with PSN `p` for a WQE of `kind` at the
    /// front: it acknowledges every PSN before `p`. For a READ or atomic it
    /// must name the oldest PSN; otherwise it is dropped (false).
    fn take_nak(&mut self, cx: &mut SendCx<'_>, kind: Kind, p: u32) -> bool {
        if !matches!(kind, Kind::Send | Kind::Write) && p != self.psn {
            cx.counters.drops.unexpected_ack += 1;
            return false;
        }
        if psn::diff(p, self.psn) > 0 {
            self.psn = p;
            self.progress(cx);
        }
        true
    }

    /// Timers that expired by `cx.now`.
    pub fn handle_timeout(&mut self, cx: &mut SendCx<'_>) -> Result<(), Fatal> {
        let now = cx.now;
        if self.rnr_deadline.is_some_and(|d| d <= now) {
            self.rnr_deadline = None;
            cx.req.rnr_wait = false;
        }
        if self.retrans_deadline.is_some_and(|d| d <= now) {
            self.retrans_deadline = None;
            self.probe_deadline = None;
            if self.outstanding(cx) && !cx.req.rnr_wait {
                return self.retry(cx, true);
            }
        }
        if self.probe_deadline.is_some_and(|d| d <= now) {
            self.probe_deadline = None;
            self.probe(cx);
        }
        Ok(())
    }

    /// Handles one response packet (ACK, ATOMIC ACK, READ response) of
    /// opcode `info`: first what it acknowledges cumulatively, then what it
    /// says about the WQE it answers.
    pub fn handle(
        &mut self,
        cx: &mut SendCx<'_>,
        mem: &mut dyn Memory,
        info: &OpcodeInfo,
        pkt: &Packet<'_>,
    ) -> Result<(), Fatal> {
        if let Some(front) = self.acknowledge_before(cx, pkt.bth.psn)? {
            match info.operation {
                Operation::Acknowledge => self.on_ack(cx, &front, pkt)?,
                Operation::AtomicAcknowledge => self.on_atomic_ack(cx, mem, &front, pkt)?,
                Operation::ReadResponse => {
                    self.on_read_response(cx, mem, &front, info.position, pkt)?
                }
                _ => cx.counters.drops.not_rc += 1,
            }
        }
        self.check_timer(cx);
        Ok(())
    }

    /// Keeps the retransmission timer consistent with what is outstanding.
    fn check_timer(&mut self, cx: &SendCx<'_>) {
        if !self.outstanding(cx) || cx.req.rnr_wait {
            self.retrans_deadline = None;
            self.probe_deadline = None;
        }
    }

    /// The cumulative part of a response with PSN `p`: completes every WQE
    /// that ends before `p`. Returns the WQE `p` answers, or `None` when
    /// nothing more is to be done (the packet was dropped, or a retry
    /// started because a READ or atomic response was lost).
    fn acknowledge_before(&mut self, cx: &mut SendCx<'_>, p: u32) -> Result<Option<Front>, Fatal> {
        if psn::diff(p, cx.req.hw_psn) >= 0 {
            cx.counters.drops.ghost_response += 1;
            return Ok(None);
        }
        if psn::diff(p, self.psn) < 0 {
            cx.counters.drops.stale_response += 1;
            return Ok(None);
        }
        let mut progressed = false;
        loop {
            let Some(front) = cx.sq.wqes.front() else {
                cx.counters.drops.ghost_response += 1;
                return Ok(None);
            };
            if !front.assigned {
                cx.counters.drops.ghost_response += 1;
                return Ok(None);
            }
            if psn::diff(p, front.last_psn) <= 0 {
                break;
            }
            if front.is_read_or_atomic() {
                // Its response was lost: the peer already answers later requests.
                if progressed {
                    self.progress(cx);
                    self.rearm(cx);
                }
                return self.retry(cx, false).map(|()| None);
            }
            self.psn = psn::add(front.last_psn, 1);
            cx.retire_front(WcStatus::Success);
            progressed = true;
        }
        if progressed {
            self.progress(cx);
        }
        Ok(cx.sq.wqes.front().map(|w| Front {
            kind: w.kind,
            len: w.len,
            last_psn: w.last_psn,
            read_done: w.read_done,
            chunked: w.read_chunked,
        }))
    }

    /// An ACK or NAK for `front`.
    fn on_ack(
        &mut self,
        cx: &mut SendCx<'_>,
        front: &Front,
        pkt: &Packet<'_>,
    ) -> Result<(), Fatal> {
        let p = pkt.bth.psn;
        let Some(aeth) = pkt.ext.aeth else {
            cx.counters.drops.unexpected_ack += 1;
            return Ok(());
        };
        match aeth.kind() {
            Syndrome::Ack { .. } => {
                if !matches!(front.kind, Kind::Send | Kind::Write) {
                    cx.counters.drops.unexpected_ack += 1;
                } else {
                    self.psn = psn::add(p, 1);
                    self.progress(cx);
                    if p == front.last_psn {
                        cx.retire_front(WcStatus::Success);
                    }
                    self.rearm(cx);
                }
            }
            Syndrome::RnrNak { timer } => {
                if self.take_nak(cx, front.kind, p) {
                    self.rnr(cx, timer)?;
                }
            }
            Syndrome::Nak(NakCode::PsnSequence) => {
                cx.counters.rcvd_seq_err += 1;
                if self.take_nak(cx, front.kind, p) {
                    self.retry(cx, false)?;
                }
            }
            Syndrome::Nak(code) => {
                let status = match code {
                    NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                    NakCode::RemoteAccess => WcStatus::RemAccessErr,
                    _ => WcStatus::RemOpErr,
                };
                return Err(cx.fail_front(status));
            }
            Syndrome::Reserved(_) => cx.counters.drops.unexpected_ack += 1,
        }
        Ok(())
    }

    /// An ATOMIC ACKNOWLEDGE for `front`: stores the original value.
    fn on_atomic_ack(
        &mut self,
        cx: &mut SendCx<'_>,
        mem: &mut dyn Memory,
        front: &Front,
        pkt: &Packet<'_>,
    ) -> Result<(), Fatal> {
        let p = pkt.bth.psn;
        if front.kind != Kind::Atomic {
            return Err(cx.fail_front(WcStatus::BadRespErr));
        }
        if p != self.psn {
            cx.counters.drops.out_of_order_response += 1;
            return Ok(());
        }
        if !matches!(pkt.ext.aeth.map(|a| a.kind()), Some(Syndrome::Ack { .. })) {
            return Err(cx.fail_front(WcStatus::BadRespErr));
        }
        let orig = pkt.ext.atomic_ack_eth.unwrap_or(0);
        let sgl = &cx.sq.wqes[0].wr.sgl;
        if scatter(mem, cx.p.pd, sgl, 0, &orig.to_ne_bytes()).is_err() {
            return Err(cx.fail_front(WcStatus::LocProtErr));
        }
        self.psn = psn::add(p, 1);
        self.progress(cx);
        cx.retire_front(WcStatus::Success);
        self.rearm(cx);
        Ok(())
    }

    /// A READ response packet at `position` of its run, for `front`.
    fn on_read_response(
        &mut self,
        cx: &mut SendCx<'_>,
        mem: &mut dyn Memory,
        front: &Front,
        position: Position,
        pkt: &Packet<'_>,
    ) -> Result<(), Fatal> {
        let p = pkt.bth.psn;
        let (len, read_done, chunked) = (front.len, front.read_done, front.chunked);
        if front.kind != Kind::Read {
            return Err(cx.fail_front(WcStatus::BadRespErr));
        }
        if p != self.psn {
            cx.counters.drops.out_of_order_response += 1;
            let run_end = matches!(position, Position::Last | Position::Only);
            if run_end || psn::diff(p, self.psn) >= READ_GAP {
                return self.retry(cx, false);
            }
            return Ok(());
        }
        if let Some(a) = pkt.ext.aeth {
            if !matches!(a.kind(), Syndrome::Ack { .. }) {
                return Err(cx.fail_front(WcStatus::BadRespErr));
            }
        }
        let mtu = cx.p.mtu;
        let remaining = len - read_done.min(len);
        let n = pkt.payload.len();
        // The final packet of the READ carries the rest; any other one MTU.
        let fin = remaining <= mtu;
        let n_ok = if fin {
            n == remaining as usize
        } else {
            n == mtu as usize
        };
        // After a chunked re-request a run may end before the end of
        // the message, and start inside it with FIRST/ONLY (the
        // original request was lost, so each chunk is a new READ).
        let end_ok = fin || chunked;
        let start_ok = read_done == 0 || chunked;
        let ok = n_ok
            && match position {
                Position::First => start_ok && !fin,
                Position::Middle => read_done > 0 && !fin,
                Position::Last => read_done > 0 && end_ok,
                Position::Only => start_ok && end_ok,
            };
        if !ok {
            return Err(cx.fail_front(WcStatus::BadRespErr));
        }
        let sgl = &cx.sq.wqes[0].wr.sgl;
        if scatter(mem, cx.p.pd, sgl, u64::from(read_done), pkt.payload).is_err() {
            return Err(cx.fail_front(WcStatus::LocProtErr));
        }
        if let Some(w) = cx.sq.wqes.front_mut() {
            w.read_done = read_done + n as u32;
        }
        self.psn = psn::add(p, 1);
        self.progress(cx);
        if fin {
            cx.retire_front(WcStatus::Success);
        }
        self.rearm(cx);
        Ok(())
    }
}
