//! Receive: datagrams from the link, verified packet by packet and
//! dispatched to QP1 or the queue pair they name.
//!
//! A GRO datagram carries several packets of one peer; each is verified on
//! its own (its ICRC, with the IPv4 ID recovered) and then checked header by
//! header: parsable transport headers, a QP that exists, a source that is
//! the QP's peer. Every packet that fails a check is counted by cause in the
//! [`NicCounters`](crate::counters::NicCounters) and reported at `trace`,
//! never an error.
//!
//! A step takes a bounded batch of datagrams, so timers and sends
//! interleave. In manual progress it stops at the first packet that leaves
//! a completion (or a CM packet) to deliver: the caller is likely waiting
//! for it, and a further receive would only find the link empty. The rest
//! of that datagram waits for the next step — unless all that is left is
//! its last packet and that one is shorter than the others: an ACK riding
//! at the end of the answer's GSO run (see `transmit.rs`), whose send
//! completion the application is often waiting for too. Datagrams that complete nothing (the bulk of a
//! transfer into an RDMA WRITE target, ACKs) are taken in a batch, which
//! also lets one ACK answer all of them.
//!
//! **What the network says back.** `drive_link_errors` reads the reports
//! the link keeps about packets sent earlier ([`Link::recv_error`]) when it
//! says some wait: an ICMP port unreachable (a host with no RoCE endpoint)
//! is counted and ends the CM's connects waiting for a REP from there; a
//! local refusal was already counted when its send failed; the rest is
//! counted and logged at debug.

use super::core::{Core, Shared};
use super::tables::receive_queue;
use crate::counters::bump;
use crate::gsi::{grh, ReceivedIp};
use crate::icrc::VerifyError;
use crate::link::{Datagram, Link, LinkError, LinkErrorKind};
use ndverbs_proto::time::Instant;
use ndverbs_wire::opcode::Opcode;
use ndverbs_wire::packet::Packet;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

/// Most datagrams one step receives with an engine thread.
const THREAD_RX_BATCH: usize = 64;
/// Most datagrams one manual-progress step receives (it stops earlier at a
/// datagram that leaves something to deliver).
const MANUAL_RX_BATCH: usize = 8;
/// Most error reports one step reads (the rest wait for the next).
const ERROR_BATCH: usize = 64;

impl Core {
    /// Receives and dispatches a batch of datagrams; true if there were any.
    pub(super) fn drive_receive(&mut self, shared: &Shared, now: Instant) -> bool {
        let manual = self.caller_polls(shared);
        let batch = if manual {
            MANUAL_RX_BATCH
        } else {
            THREAD_RX_BATCH
        };
        let mut busy = false;
        self.completion_ready = false;
        if let Some(c) = &mut self.io.rx_clock {
            c.refresh(now, shared.epoch_ns);
        }
        for _ in 0..batch {
            if manual && self.completion_ready {
                break;
            }
            let (d, mut off) = match self.io.rx_rest.take() {
                Some(rest) => rest,
                None => match self.io.link.recv(&mut self.io.rx, now) {
                    Ok(None) => break,
                    Ok(Some(d)) => (d, 0),
                    Err(e) => {
                        tracing::warn!(error = %e, "receive failed");
                        break;
                    }
                },
            };
            busy = true;
            // When the kernel received it (`rx_clock.rs`): round trips end
            // there. One stamp for all the packets of a GRO datagram.
            let arrived = match (d.rx_time, &self.io.rx_clock) {
                (Some(t), Some(c)) => c.to_engine(t, now),
                _ => now,
            };
            while off < d.len {
                let end = (off + d.seg).min(d.len);
                self.receive_one(shared, now, arrived, &d, off, end);
                off = end;
                if manual && self.completion_ready && off < d.len && !riding_ack_left(&d, off) {
                    self.io.rx_rest = Some((d, off));
                    break;
                }
            }
        }
        busy
    }

    /// Reads the link's error reports if it says some wait (see the module
    /// docs); true if there were any.
    #[inline]
    pub(super) fn drive_link_errors(&mut self, shared: &Shared, now: Instant) -> bool {
        if shared.link_error.load(Ordering::Relaxed) {
            shared.link_error.store(false, Ordering::Relaxed);
            self.io.link.note_error_event();
        }
        if !self.io.link.errors_pending() {
            return false;
        }
        self.read_link_errors(shared, now)
    }

    #[cold]
    #[inline(never)]
    fn read_link_errors(&mut self, shared: &Shared, now: Instant) -> bool {
        let mut any = false;
        for _ in 0..ERROR_BATCH {
            match self.io.link.recv_error() {
                Ok(Some(e)) => {
                    any = true;
                    self.on_link_error(shared, now, e);
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the socket's error queue failed");
                    break;
                }
            }
        }
        any
    }

    /// One report of the network about a packet sent to `e.peer`.
    fn on_link_error(&mut self, shared: &Shared, now: Instant, e: LinkError) {
        let peer = e.peer.ip();
        match e.kind {
            _ if e.local => {
                // Counted when the send failed (`send_too_big`, …).
                tracing::debug!(error = %e, "send refused by the kernel");
            }
            LinkErrorKind::PortUnreachable => {
                bump(&shared.counters.peer_port_unreachable, 1);
                // The CM stops waiting for a REP that cannot come. RC QPs
                // to that peer are only counted: their transport keeps
                // retrying until its retry count runs out, as rxe's does
                // (the kernel never tells rxe about ICMP either), and a
                // peer that restarts its endpoint may still answer.
                // (Debug only: a connect it ends fails with its own error.)
                let ended = self.cm.handle_unreachable(peer, now);
                tracing::debug!(
                    %peer,
                    connects_ended = ended,
                    "ICMP port unreachable: no RoCE endpoint at the peer"
                );
            }
            _ => {
                bump(&shared.counters.peer_errors, 1);
                tracing::debug!(error = %e, "the network reported an error");
            }
        }
    }

    /// Verifies and dispatches the packet at `rx[off..end]` of datagram `d`,
    /// which reached the host at `arrived`.
    fn receive_one(
        &mut self,
        shared: &Shared,
        now: Instant,
        arrived: Instant,
        d: &Datagram,
        off: usize,
        end: usize,
    ) {
        bump(&shared.counters.rcvd_datagrams, 1);
        if let Some(s) = &self.share {
            // Probes carry no ICRC: they are the host's, not RoCE's.
            if s.port.handle_probe(&self.io.rx[off..end], d.src.ip()) {
                return;
            }
        }
        match self.io.icrc.verify(&self.io.rx[off..end], d.src, d.dst) {
            Ok(r) => {
                let ip = ReceivedIp {
                    ipv4_id: r.ipv4_id,
                    ecn: d.ecn,
                };
                self.dispatch(shared, now, arrived, r.src.ip(), ip, off, r.len)
            }
            Err(VerifyError::BadIcrc) => {
                bump(&shared.counters.drop_bad_icrc, 1);
                tracing::trace!(src = %d.src, cause = "bad ICRC", "packet dropped");
            }
            Err(_) => {
                bump(&shared.counters.drop_malformed, 1);
                tracing::trace!(src = %d.src, cause = "malformed", "packet dropped");
            }
        }
    }

    /// Hands the verified packet at `rx[off..off + len]` from `src` to
    /// QP1 or its queue pair; one that arrived with Congestion Experienced
    /// (`ecn`) may be answered with a CNP (`answer_ce`). It reached the host
    /// at `arrived` (≤ `now`), where a round-trip sample it ends stops.
    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &mut self,
        shared: &Shared,
        now: Instant,
        arrived: Instant,
        src: IpAddr,
        ip: ReceivedIp,
        off: usize,
        len: usize,
    ) {
        let ecn = ip.ecn;
        let pkt = match Packet::parse(&self.io.rx[off..off + len]) {
            Ok(p) => p,
            Err(_) => {
                bump(&shared.counters.drop_malformed, 1);
                tracing::trace!(%src, cause = "malformed transport headers", "packet dropped");
                return;
            }
        };
        if let Some(s) = &self.share {
            // Another member's packet (the kernel's indices moved): never
            // ours to answer or complete; counted, and the table fixed.
            if !s.port.accepts(&self.io.rx[off..off + len]) {
                bump(&shared.counters.drop_other_process, 1);
                tracing::trace!(%src, cause = "another process's", "packet dropped");
                return;
            }
        }
        let qpn = pkt.bth.dqpn;
        if qpn == ndverbs_wire::mad::GSI_QPN {
            self.gsi
                .handle_packet(&pkt, src, shared.local, &mut self.tables.mem);
            self.completion_ready = true;
            return;
        }
        if qpn == 0 {
            bump(&shared.counters.drop_gsi, 1);
            tracing::trace!(%src, cause = "QP0", "packet dropped");
            return;
        }
        let t = &mut self.tables;
        if let Some(u) = t.ud.get_mut(&qpn) {
            // A datagram: no peer to check, no ACK, no congestion signal.
            let grh = grh(src, shared.local, &pkt, ip);
            let Some(rq) = receive_queue(&mut t.srqs, u.srq, &mut u.rq) else {
                return;
            };
            u.qp.handle_packet(&pkt, &grh, &mut t.mem, rq);
            let n = super::ud::deliver(u);
            self.deliveries.count += n;
            self.completion_ready |= n > 0;
            return;
        }
        let Some(e) = t.qps.get_mut(&qpn) else {
            bump(&shared.counters.drop_unknown_qp, 1);
            tracing::trace!(%src, qp = qpn, cause = "unknown QP", "packet dropped");
            return;
        };
        if e.peer != Some(src) {
            bump(&shared.counters.drop_wrong_source, 1);
            tracing::trace!(%src, qp = qpn, cause = "not the QP's peer", "packet dropped");
            return;
        }
        let Some(rq) = receive_queue(&mut t.srqs, e.srq, &mut e.rq) else {
            return;
        };
        e.qp.handle_packet_at(now, arrived, &pkt, &mut t.mem, rq);
        self.completion_ready |= e.qp.has_completion();
        self.touched.push(qpn);
        // A marked packet that carries data or a request (not an ACK or a
        // CNP, whose marks are the reverse path's business).
        let data = !matches!(pkt.bth.opcode, Opcode::RC_ACK | Opcode::CNP);
        if self.paths.ecn_seen(src, ecn) && data && e.qp.congestion_experienced(now) {
            let dest = e.qp.query().dest_qp_num;
            self.answer_ce(shared, src, dest);
        }
    }

    /// Sends a CNP to QP `dest` at `peer`.
    fn answer_ce(&mut self, shared: &Shared, peer: IpAddr, dest: u32) {
        let Some(n) = ndverbs_proto::rc::cnp_packet(dest, &mut self.io.tx) else {
            return;
        };
        bump(&shared.counters.cc_cnps_sent, 1);
        tracing::trace!(%peer, qp = dest, "CNP sent");
        self.send_packet(shared, peer, n);
    }
}

/// Whether all that is left of datagram `d` from `off` is its last packet,
/// shorter than the run's segment size: what an ACK riding at the end of a
/// GSO run looks like.
fn riding_ack_left(d: &Datagram, off: usize) -> bool {
    d.len - off < d.seg
}
