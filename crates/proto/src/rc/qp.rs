//! [`RcQp`]: one RC queue pair — requester, completer and responder behind the
//! sans-IO interface.

use super::attr::{check_modify, rxe_default_udp_sport, rxe_udp_sport};
use super::cnp::CNP_INTERVAL;
use super::completer::{Completer, SendCx};
use super::post::{validate_recv, validate_send};
use super::requester::{CcSignals, ReqOut};
use super::responder::{RespCx, Responder};
use super::send_queue::{complete_send, SendQueue, Wqe};
use super::wr::{WcOpcode, WcQueue};
use super::{
    AttrMask, Counters, Fatal, ModifyError, Params, PostError, QpAttr, QpCaps, QpErrorCause,
    QpState, RecvQueue, RecvWr, Requester, SendWr, WcStatus, WorkCompletion,
};
use crate::mem::{LentPayload, Memory};
use crate::time::{Duration, Instant};
use ndverbs_wire::bth::MASK24;
use ndverbs_wire::opcode::Transport;
use ndverbs_wire::packet::Packet;
use std::collections::VecDeque;

/// Largest header + pad + ICRC overhead of an RC packet: a buffer of
/// `path MTU + MAX_HEADER_LEN` bytes always holds the next packet.
pub const MAX_HEADER_LEN: usize = 12 + 28 + 4 + 3 + 4;

/// One RC queue pair. See the [module docs](super).
///
/// # Example
///
/// Two QPs talking sans-IO: every packet one emits with `poll_transmit` is
/// parsed and handed to the other's `handle_packet`, with [`VecMemory`] as
/// registered memory. The sender's SEND completes once the receiver's ACK
/// came back.
///
/// [`VecMemory`]: crate::mem::testing::VecMemory
///
/// ```
/// use ndverbs_proto::mem::{testing::VecMemory, Access};
/// use ndverbs_proto::rc::*;
/// use ndverbs_proto::time::Instant;
/// use ndverbs_wire::packet::Packet;
///
/// /// RESET → INIT → RTR → RTS towards QP `peer` (PSN 0 both ways, defaults elsewhere).
/// fn connect(qp: &mut RcQp, peer: u32) {
///     for (attr, mask) in RcConnection::new(peer).steps() {
///         qp.modify(&attr, mask).unwrap();
///     }
/// }
///
/// /// Moves every packet `from` has to send into `to`; returns how many.
/// fn pump(from: &mut RcQp, from_mem: &mut VecMemory,
///         to: &mut RcQp, to_mem: &mut VecMemory, to_rq: &mut RecvQueue) -> usize {
///     let now = Instant::from_nanos(0);
///     let mut buf = vec![0; from.max_packet_len()];
///     let mut n = 0;
///     while let Some(len) = from.poll_transmit(now, from_mem, &mut buf) {
///         to.handle_packet(now, &Packet::parse(&buf[..len]).unwrap(), to_mem, to_rq);
///         n += 1;
///     }
///     n
/// }
///
/// let (mut a, mut b) = (RcQp::new(0x11, 1, QpCaps::default()), RcQp::new(0x22, 1, QpCaps::default()));
/// connect(&mut a, 0x22);
/// connect(&mut b, 0x11);
/// let (mut rq_a, mut rq_b) = (RecvQueue::new(4, 1), RecvQueue::new(4, 1));
/// let (mut mem_a, mut mem_b) = (VecMemory::new(), VecMemory::new());
/// let src = mem_a.register_bytes(1, 0x1000, b"hello".to_vec(), Access::NONE);
/// let dst = mem_b.register(1, 0x2000, 64, Access::LOCAL_WRITE);
///
/// b.post_recv(&mut rq_b, RecvWr::new(7, vec![dst.sge(0, 64)]))?;
/// a.post_send(SendWr::new(1, SendOp::Send, vec![src.sge(0, 5)]))?;
/// while pump(&mut a, &mut mem_a, &mut b, &mut mem_b, &mut rq_b)
///     + pump(&mut b, &mut mem_b, &mut a, &mut mem_a, &mut rq_a) > 0 {}
///
/// let recv = b.poll_completion().unwrap();
/// assert_eq!((recv.wr_id, recv.status, recv.byte_len), (7, WcStatus::Success, 5));
/// assert_eq!(&mem_b.bytes(dst.lkey)[..5], b"hello");
/// let sent = a.poll_completion().unwrap(); // the ACK arrived
/// assert_eq!((sent.wr_id, sent.opcode, sent.status), (1, WcOpcode::Send, WcStatus::Success));
/// assert_eq!(a.counters().sent_pkts, 1);
/// # Ok::<(), PostError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RcQp {
    qpn: u32,
    pd: u32,
    caps: QpCaps,
    state: QpState,
    attr: QpAttr,
    p: Params,
    sq: SendQueue,
    req: Requester,
    /// Bytes a congestion controller lets the requester send (`None`: no
    /// controller, rxe's PSN window alone).
    send_budget: Option<u64>,
    comp: Completer,
    resp: Responder,
    cq: VecDeque<WorkCompletion>,
    counters: Counters,
    error: Option<QpErrorCause>,
    responder_first: bool,
    /// When this QP last asked for a CNP ([`RcQp::congestion_experienced`]).
    last_cnp: Option<Instant>,
}

impl RcQp {
    /// A QP in RESET with number `qpn` (24 bits) in protection domain `pd`.
    pub fn new(qpn: u32, pd: u32, caps: QpCaps) -> Self {
        let qpn = qpn & MASK24;
        let attr = QpAttr {
            udp_sport: rxe_default_udp_sport(qpn),
            ..QpAttr::default()
        };
        RcQp {
            qpn,
            pd,
            caps,
            state: QpState::Reset,
            p: Params::new(qpn, pd, &caps, &attr),
            attr,
            sq: SendQueue::default(),
            req: Requester::default(),
            send_budget: None,
            comp: Completer::default(),
            resp: Responder::default(),
            cq: VecDeque::new(),
            counters: Counters::default(),
            error: None,
            responder_first: false,
            last_cnp: None,
        }
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The protection domain.
    pub fn pd(&self) -> u32 {
        self.pd
    }

    /// Creation-time limits.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// Why the QP is in ERR (`None` if it never was, or was reset since).
    pub fn error_cause(&self) -> Option<QpErrorCause> {
        self.error
    }

    /// Counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Send requests posted and not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.sq.wqes.len()
    }

    /// Bytes `poll_transmit` may need: path MTU plus [`MAX_HEADER_LEN`].
    pub fn max_packet_len(&self) -> usize {
        self.p.mtu as usize + MAX_HEADER_LEN
    }

    /// Current attributes. `sq_psn` and `rq_psn` are the *next* PSNs the
    /// requester sends and the responder expects.
    pub fn query(&self) -> QpAttr {
        let mut a = self.attr;
        a.qp_state = self.state;
        a.cur_qp_state = self.state;
        if matches!(self.state, QpState::Rts | QpState::Sqd) {
            a.sq_psn = self.req.hw_psn;
        }
        if matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            a.rq_psn = self.resp.epsn;
        }
        a
    }

    /// Changes state and/or attributes (see [`AttrMask`] for the transition
    /// table). On error nothing changes.
    pub fn modify(&mut self, attr: &QpAttr, mask: AttrMask) -> Result<(), ModifyError> {
        let from = self.state;
        let to = check_modify(from, attr, mask)?;
        let a = &mut self.attr;
        macro_rules! take {
            ($($bit:ident => $field:ident),*) => {$(
                if mask.contains(AttrMask::$bit) {
                    a.$field = attr.$field;
                }
            )*};
        }
        take!(ACCESS_FLAGS => qp_access_flags, PKEY_INDEX => pkey_index, PORT => port_num,
              AV => av, PATH_MTU => path_mtu, TIMEOUT => timeout, RETRY_CNT => retry_cnt,
              RNR_RETRY => rnr_retry, RQ_PSN => rq_psn, MAX_QP_RD_ATOMIC => max_rd_atomic,
              MIN_RNR_TIMER => min_rnr_timer, SQ_PSN => sq_psn,
              MAX_DEST_RD_ATOMIC => max_dest_rd_atomic, DEST_QPN => dest_qp_num,
              UDP_SPORT => udp_sport);
        if mask.contains(AttrMask::AV) && !mask.contains(AttrMask::UDP_SPORT) {
            a.udp_sport = rxe_udp_sport(a.av.flow_label, self.qpn, a.dest_qp_num);
        }
        self.p = Params::new(self.qpn, self.pd, &self.caps, &self.attr);
        match (from, to) {
            (_, QpState::Reset) => self.reset(),
            (QpState::Err, QpState::Err) => {}
            (_, QpState::Err) => self.enter_error(QpErrorCause::Modify),
            (QpState::Init, QpState::Rtr) => {
                self.resp = Responder::start(self.attr.rq_psn);
            }
            (QpState::Rtr, QpState::Rts) => {
                self.req = Requester {
                    cc: self.req.cc,
                    ..Requester::start(self.attr.sq_psn, self.attr.path_mtu.bytes())
                };
                let floor = self.comp.probe_floor;
                self.comp = Completer::start(self.attr.sq_psn, &self.p);
                self.comp.probe_floor = floor;
            }
            (QpState::Sqd, QpState::Sqd) => self.comp.set_limits(&self.p),
            _ => {}
        }
        self.state = to;
        Ok(())
    }

    fn reset(&mut self) {
        self.sq = SendQueue::default();
        // Completions not yet taken are forgotten with the rest of the
        // work: a reset QP has nothing left to report.
        self.cq.clear();
        self.req.cc_release();
        self.req = Requester {
            cc: self.req.cc,
            ..Requester::default()
        };
        let floor = self.comp.probe_floor;
        self.comp = Completer::default();
        self.comp.probe_floor = floor;
        self.resp = Responder::default();
        self.error = None;
        let sport = rxe_default_udp_sport(self.qpn);
        self.attr = QpAttr {
            udp_sport: sport,
            ..QpAttr::default()
        };
        self.p = Params::new(self.qpn, self.pd, &self.caps, &self.attr);
    }

    /// Moves to ERR and flushes the send queue (each WR exactly once).
    fn enter_error(&mut self, cause: QpErrorCause) {
        self.state = QpState::Err;
        self.error.get_or_insert(cause);
        while let Some(w) = self.sq.wqes.pop_front() {
            let status = w.error.unwrap_or(WcStatus::WrFlushErr);
            complete_send(&w, status, &self.p, &mut self.cq, &mut self.counters);
        }
        // The bytes in flight leave the path's count (take_cc_signals).
        self.req.cc_release();
        self.req = Requester {
            cc: self.req.cc,
            ..Requester::default()
        };
        self.comp.stop_timers();
        if let Some(wr) = self.resp.on_error() {
            self.flush_one_recv(wr);
        }
    }

    fn flush_one_recv(&mut self, wr: RecvWr) {
        self.cq.push_back(WorkCompletion::unfinished(
            wr.wr_id,
            WcStatus::WrFlushErr,
            WcOpcode::Recv,
            WcQueue::Recv,
            self.qpn,
            self.p.dest_qpn,
        ));
    }

    /// In ERR: completes every receive in `rq` with `WrFlushErr` and returns
    /// how many. Call it with the QP's own receive queue after the QP entered
    /// ERR, and after each later post (never with a shared receive queue other
    /// QPs still use). Outside ERR it does nothing.
    pub fn flush_recv(&mut self, rq: &mut RecvQueue) -> usize {
        if self.state != QpState::Err {
            return 0;
        }
        let mut n = 0;
        while let Some(wr) = rq.pop() {
            self.flush_one_recv(wr);
            n += 1;
        }
        n
    }

    /// Posts a send request. Allowed in RTS and SQD (queued) and in ERR
    /// (flushed at once), as Linux rxe does.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        let len = validate_send(&self.caps, self.state, &wr)?;
        if wr.op.is_read_or_atomic() && self.p.max_rd_atomic == 0 && self.state != QpState::Err {
            return Err(PostError::NoRdAtomicCredits);
        }
        if self.sq.wqes.len() >= self.caps.max_send_wr as usize {
            return Err(PostError::QueueFull(self.caps.max_send_wr));
        }
        let wqe = Wqe::new(wr, len);
        if self.state == QpState::Err {
            complete_send(
                &wqe,
                WcStatus::WrFlushErr,
                &self.p,
                &mut self.cq,
                &mut self.counters,
            );
        } else {
            self.sq.wqes.push_back(wqe);
        }
        Ok(())
    }

    /// Posts a receive to this QP's own receive queue `rq` (refused in RESET,
    /// flushed at once in ERR).
    pub fn post_recv(&mut self, rq: &mut RecvQueue, wr: RecvWr) -> Result<(), PostError> {
        validate_recv(rq.max_sge(), Some(self.state), &wr)?;
        rq.push(wr)?;
        self.flush_recv(rq);
        Ok(())
    }

    /// Takes one packet addressed to this QP. Request packets go to the
    /// responder (which may consume a receive from `rq`), responses to the
    /// completer. Anything malformed or unexpected is counted and dropped.
    pub fn handle_packet(
        &mut self,
        now: Instant,
        pkt: &Packet<'_>,
        mem: &mut dyn Memory,
        rq: &mut RecvQueue,
    ) {
        self.handle_packet_at(now, now, pkt, mem, rq);
    }

    /// [`RcQp::handle_packet`] for a packet that reached the host at
    /// `arrived` (≤ `now`; a kernel receive timestamp in the caller's
    /// clock): a round-trip sample its acknowledgement gives ends at
    /// `arrived`, so it measures the path rather than how long the packet
    /// then waited for the caller. Timers run from `now` as ever.
    ///
    /// ```
    /// # use ndverbs_proto::rc::{QpCaps, RcQp, RecvQueue};
    /// # use ndverbs_proto::mem::testing::VecMemory;
    /// # use ndverbs_proto::time::Instant;
    /// # use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
    /// let mut qp = RcQp::new(1, 1, QpCaps::default());
    /// let (mut mem, mut rq) = (VecMemory::new(), RecvQueue::new(16, 1));
    /// let pkt = Packet::new(Bth::new(Opcode::RC_ACK, 1, 0));
    /// let now = Instant::from_nanos(5_000);
    /// qp.handle_packet_at(now, Instant::from_nanos(4_000), &pkt, &mut mem, &mut rq);
    /// ```
    pub fn handle_packet_at(
        &mut self,
        now: Instant,
        arrived: Instant,
        pkt: &Packet<'_>,
        mem: &mut dyn Memory,
        rq: &mut RecvQueue,
    ) {
        self.counters.rcvd_pkts += 1;
        let drops = &mut self.counters.drops;
        if pkt.bth.dqpn != self.qpn {
            drops.wrong_qpn += 1;
            return;
        }
        if pkt.bth.pkey & 0x7fff != 0x7fff {
            drops.bad_pkey += 1;
            return;
        }
        let info = match pkt.info() {
            Ok(i) if i.transport == Transport::Rc => i,
            Ok(i) => {
                // A CNP touches no PSN state (still counted here), but a
                // congestion controller hears of it (take_cc_signals).
                if i.transport == Transport::Cnp {
                    self.req.cc.cnps = self.req.cc.cnps.saturating_add(1);
                }
                drops.not_rc += 1;
                return;
            }
            Err(_) => {
                drops.not_rc += 1;
                return;
            }
        };
        let result = if info.is_request() {
            if !takes_requests(self.state) {
                drops.bad_state += 1;
                return;
            }
            let (resp, mut cx) = self.responder();
            resp.handle(&mut cx, now, mem, rq, info, pkt)
        } else {
            if !matches!(self.state, QpState::Rts | QpState::Sqd) {
                drops.bad_state += 1;
                return;
            }
            let (comp, mut cx) = self.completer(now);
            cx.arrived = arrived.min(now);
            comp.handle(&mut cx, mem, info, pkt)
        };
        if let Err(Fatal(cause)) = result {
            self.enter_error(cause);
        }
    }

    /// The responder and what it works on.
    fn responder(&mut self) -> (&mut Responder, RespCx<'_>) {
        let cx = RespCx {
            p: &self.p,
            cq: &mut self.cq,
            counters: &mut self.counters,
        };
        (&mut self.resp, cx)
    }

    /// The completer and what it works on at `now`.
    fn completer(&mut self, now: Instant) -> (&mut Completer, SendCx<'_>) {
        let cx = SendCx {
            sq: &mut self.sq,
            req: &mut self.req,
            p: &self.p,
            cq: &mut self.cq,
            counters: &mut self.counters,
            now,
            arrived: now,
        };
        (&mut self.comp, cx)
    }

    /// Runs the timers that expired by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if takes_requests(self.state) {
            let (resp, mut cx) = self.responder();
            resp.reorder_expired(&mut cx, now);
        }
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return;
        }
        let (comp, mut cx) = self.completer(now);
        if let Err(Fatal(cause)) = comp.handle_timeout(&mut cx) {
            self.enter_error(cause);
        }
    }

    /// Sets the shortest wait before a loss probe (a go-back-N retry started
    /// when nothing was acknowledged for a few round trips on a path that
    /// lost packets lately) to `floor` instead of 100 µs;
    /// `None` restores that. It survives resets and reconnections. An
    /// engine on a host whose threads wait for a CPU raises it above the
    /// scheduling delays it sees, or every such wait on a lossy path fires
    /// a probe — a spurious go-back-N retry.
    pub fn set_probe_floor(&mut self, floor: Option<Duration>) {
        self.comp.probe_floor = floor;
    }

    /// Attaches a send budget (congestion control): from now on SEND and
    /// WRITE payloads go out only while they fit in `bytes`, which each
    /// consumes, under a PSN cap of [`super::CC_MAX_UNACKED_PSNS`] instead of
    /// the byte window ([`super::max_window`]). The caller sets it before polling — typically the QP's
    /// share of its path controller's [`available`](crate::cc::PathController::available)
    /// bytes — and may read what is left with [`RcQp::send_budget`]. `None`
    /// (the default) detaches it: the requester keeps its byte window
    /// ([`super::max_window`], at least rxe's 128 PSNs) and its halving on loss.
    ///
    /// ```
    /// use ndverbs_proto::cc::{self, CcConfig, PathController};
    /// use ndverbs_proto::rc::{QpCaps, RcQp};
    /// use ndverbs_proto::time::Instant;
    ///
    /// let mut qp = RcQp::new(0x11, 1, QpCaps::default());
    /// let mut path = PathController::new(CcConfig::default());
    /// // Before polling: the bytes the path allows this QP.
    /// qp.set_send_budget(Some(path.available()));
    /// // … poll_transmit, handle_packet …
    /// // After: hand what happened to the controller.
    /// cc::feed(&mut path, Instant::from_nanos(0), qp.take_cc_signals());
    /// assert_eq!(qp.send_budget(), Some(64 * 1024));
    /// ```
    pub fn set_send_budget(&mut self, bytes: Option<u64>) {
        self.send_budget = bytes;
    }

    /// The budget left, if one is attached.
    pub fn send_budget(&self) -> Option<u64> {
        self.send_budget
    }

    /// A packet for this QP arrived with Congestion Experienced in its IP
    /// ECN field: true when the QP should answer with a CNP now — a
    /// notification point sends at most one per [`CNP_INTERVAL`] per QP
    /// (DCQCN's 50 µs), and only while connected. The CNP itself is
    /// [`super::cnp_packet`] to the peer's QP ([`QpAttr::dest_qp_num`]).
    pub fn congestion_experienced(&mut self, now: Instant) -> bool {
        if !matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            return false;
        }
        if self
            .last_cnp
            .is_some_and(|t| now.saturating_duration_since(t) < CNP_INTERVAL)
        {
            return false;
        }
        self.last_cnp = Some(now);
        true
    }

    /// What was sent, acknowledged, sampled (the smallest round-trip sample)
    /// and lost since the last call, for a congestion controller
    /// ([`crate::cc::feed`]). Accumulates whether or not a budget is attached.
    /// Once the QP has left RTS/SQD (an error, a destroy flushing it), its
    /// bytes still in flight come back as `abandoned` without a loss, so its
    /// path does not count them forever.
    pub fn take_cc_signals(&mut self) -> CcSignals {
        // Whatever the completer retired since (READ responses, NAKs) counts
        // as acknowledged too.
        // A QP that stopped sending (ERR, or reset) gives its bytes in
        // flight up without a loss: they leave the path's count.
        if matches!(self.state, QpState::Rts | QpState::Sqd) {
            self.req.cc_progress(self.comp.psn, self.p.mtu, None);
        } else {
            self.req.cc_release();
        }
        std::mem::take(&mut self.req.cc)
    }

    /// When `handle_timeout` is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let comp = match self.state {
            QpState::Rts | QpState::Sqd => self.comp.next_deadline(),
            _ => None,
        };
        let resp = takes_requests(self.state)
            .then(|| self.resp.reorder_deadline())
            .flatten();
        comp.into_iter().chain(resp).min()
    }

    /// Whether a completion is waiting for [`RcQp::poll_completion`].
    pub fn has_completion(&self) -> bool {
        !self.cq.is_empty()
    }

    /// Whether a completion of the send queue waits to be polled (an ACK
    /// or a response just completed one of the QP's own requests).
    pub fn has_send_completion(&self) -> bool {
        self.cq.iter().any(|wc| wc.queue == WcQueue::Send)
    }

    /// The next completion.
    pub fn poll_completion(&mut self) -> Option<WorkCompletion> {
        self.cq.pop_front()
    }

    /// Writes the next packet to send into `buf` (transport part only: BTH to
    /// a zero ICRC) and returns its length; `None` when there is nothing to send
    /// (or `buf` is shorter than [`max_packet_len`](Self::max_packet_len) needs,
    /// counted in `drops.tx_no_room`). Responder replies and requests take
    /// turns.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        mem: &mut dyn Memory,
        buf: &mut [u8],
    ) -> Option<usize> {
        self.poll_transmit_lending(now, mem, buf, None)
    }

    /// Like [`RcQp::poll_transmit`], but a packet with a large payload from
    /// registered memory (a SEND or WRITE, or a READ response) may leave the
    /// payload there when `lent` is given and the memory lends it
    /// ([`Memory::lend_local`], [`Memory::lend_remote`]): `buf` then
    /// holds the headers (`lent.hdr_len` bytes), the pad and a zero ICRC, the
    /// returned length counts only those, and the packet on the wire is
    /// headers, `lent`'s pieces, pad and ICRC. `lent` is empty after a packet
    /// that is whole in `buf`.
    pub fn poll_transmit_lending(
        &mut self,
        now: Instant,
        mem: &mut dyn Memory,
        buf: &mut [u8],
        lent: Option<&mut LentPayload>,
    ) -> Option<usize> {
        self.poll_transmit_from(now, mem, buf, lent, true)
    }

    /// True when all the responder has to send is one positive ACK (which
    /// acknowledges everything up to its PSN, so a later ACK would replace
    /// it). A caller may then send requests first
    /// ([`RcQp::poll_transmit_requests`]) and the ACK after them: a reply
    /// to the message just received leaves without waiting for its ACK.
    pub fn owes_only_ack(&self) -> bool {
        !matches!(self.state, QpState::Reset | QpState::Init) && self.resp.owes_only_ack()
    }

    /// The plain ACK the responder owes ([`RcQp::owes_only_ack`]), alone;
    /// `None` if it owes something else or nothing. For a caller about to
    /// reset the QP, which forgets what the responder owes: the peer's
    /// requests the application already took must still be acknowledged.
    pub fn poll_owed_ack(&mut self, mem: &mut dyn Memory, buf: &mut [u8]) -> Option<usize> {
        if !self.owes_only_ack() {
            return None;
        }
        let n = self.poll_responder(mem, buf, None)?;
        self.counters.sent_pkts += 1;
        Some(n)
    }

    /// False when a transmit poll would surely find nothing: no reply owed
    /// (`with_replies`: [`RcQp::poll_transmit`] rather than
    /// [`RcQp::poll_transmit_requests`]), no request queued that has not
    /// left, no retransmission pending. A caller draining the QP may stop
    /// then without the poll; true says only that a poll may send.
    pub fn may_transmit(&self, with_replies: bool) -> bool {
        let requests =
            self.requester_may() && (self.req.need_retry || self.req.idx < self.sq.wqes.len());
        let replies = self.responder_may(with_replies) && self.resp.has_output();
        requests || replies
    }

    /// Whether the QP's state lets its requester send.
    fn requester_may(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd)
    }

    /// Whether the QP's state lets its responder reply (and the caller
    /// asked for replies).
    fn responder_may(&self, with_replies: bool) -> bool {
        with_replies && !matches!(self.state, QpState::Reset | QpState::Init)
    }

    /// Like [`RcQp::poll_transmit_lending`], but only request packets; the
    /// responder's replies wait for the next [`RcQp::poll_transmit`].
    pub fn poll_transmit_requests(
        &mut self,
        now: Instant,
        mem: &mut dyn Memory,
        buf: &mut [u8],
        lent: Option<&mut LentPayload>,
    ) -> Option<usize> {
        self.poll_transmit_from(now, mem, buf, lent, false)
    }

    fn poll_transmit_from(
        &mut self,
        now: Instant,
        mem: &mut dyn Memory,
        buf: &mut [u8],
        mut lent: Option<&mut LentPayload>,
        with_replies: bool,
    ) -> Option<usize> {
        if let Some(l) = lent.as_deref_mut() {
            l.clear();
        }
        let requester_may = self.requester_may();
        let responder_may = self.responder_may(with_replies);
        let order = if self.responder_first {
            [true, false]
        } else {
            [false, true]
        };
        for responder in order {
            let out = if responder {
                if !responder_may || !self.resp.has_output() {
                    continue;
                }
                self.poll_responder(mem, buf, lent.as_deref_mut())
            } else {
                if !requester_may {
                    continue;
                }
                self.poll_requester(now, mem, buf, lent.as_deref_mut())
            };
            if let Some(n) = out {
                self.counters.sent_pkts += 1;
                self.responder_first = !responder;
                return Some(n);
            }
        }
        None
    }

    fn poll_responder(
        &mut self,
        mem: &mut dyn Memory,
        buf: &mut [u8],
        mut lent: Option<&mut LentPayload>,
    ) -> Option<usize> {
        let (resp, mut cx) = self.responder();
        match resp.poll(&mut cx, mem, buf, lent.as_deref_mut()) {
            Ok(n) => n,
            Err(Fatal(cause)) => {
                self.enter_error(cause);
                // The terminal NAK is now first in line.
                let (resp, mut cx) = self.responder();
                resp.poll(&mut cx, mem, buf, lent).ok().flatten()
            }
        }
    }

    fn poll_requester(
        &mut self,
        now: Instant,
        mem: &mut dyn Memory,
        buf: &mut [u8],
        lent: Option<&mut LentPayload>,
    ) -> Option<usize> {
        let draining = self.state == QpState::Sqd;
        match self.req.poll(
            &mut self.sq,
            self.comp.psn,
            draining,
            &self.p,
            mem,
            buf,
            lent,
            &mut self.send_budget,
        ) {
            Ok(ReqOut::Sent(n)) => {
                let (psns, fresh) = self.req.last_span;
                if fresh {
                    self.counters.req_psns_first += u64::from(psns);
                } else {
                    self.counters.req_psns_resent += u64::from(psns);
                }
                self.comp.on_request_sent(now, &self.p, &self.req);
                Some(n)
            }
            Ok(ReqOut::Idle) => None,
            Ok(ReqOut::NoRoom) => {
                self.counters.drops.tx_no_room += 1;
                None
            }
            Err(Fatal(cause)) => {
                self.counters.send_err += 1;
                self.enter_error(cause);
                None
            }
        }
    }

    /// True when the send queue has nothing in flight (SQD drained).
    pub fn is_send_idle(&self) -> bool {
        self.sq.wqes.iter().all(|w| !w.assigned)
    }
}

/// Whether a QP in `state` lets its responder take requests.
fn takes_requests(state: QpState) -> bool {
    matches!(
        state,
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
    )
}
