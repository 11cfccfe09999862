//! The requester's send budget (congestion control's hook) and the signals
//! it reports: without a budget nothing changes (rxe's 128 PSNs); with one,
//! payload bytes are spent from it and the QP reports what it sent, what was
//! acknowledged, its round-trip samples and its retries.

use crate::two::{pair, Two};
use ndverbs_proto::cc::{self, CcConfig, PathController};
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::*;
use ndverbs_proto::time::{Duration, Instant};
use ndverbs_wire::packet::Packet;

#[test]
fn without_a_budget_the_window_is_the_fixed_byte_window() {
    // Path MTU 1024 (RcConnection's default): 512 PSNs, 512 KiB.
    let window = max_window(1024) as usize;
    assert!(window > MAX_UNACKED_PSNS as usize);
    let mut t = pair(2 * window as u32 * 1024);
    assert_eq!(t.a.send_budget(), None);
    let sent = t.a_sends(Instant::ZERO, |_| false);
    assert_eq!(sent.len(), window);
    // The signals accumulate all the same.
    assert_eq!(t.a.take_cc_signals().sent, window as u64 * 1024);
}

#[test]
fn a_budget_limits_payload_bytes_and_asks_for_an_ack_when_spent() {
    let mut t = pair(512 * 1024);
    let t0 = Instant::ZERO;
    t.a.set_send_budget(Some(10 * 1024 + 500));
    let sent = t.a_sends(t0, |_| false);
    assert_eq!(sent.len(), 10, "{sent:?}");
    assert_eq!(t.a.send_budget(), Some(500));
    // The packet that spent the budget asks for an ACK.
    assert!(sent.last().unwrap().1);
    let t1 = t0 + Duration::from_micros(20);
    t.b_replies(t1);
    let s = t.a.take_cc_signals();
    assert_eq!((s.sent, s.acked, s.losses), (10 * 1024, 10 * 1024, 0));
    assert_eq!(s.rtt, Some(Duration::from_micros(20)));
    assert_eq!(t.a.take_cc_signals(), CcSignals::default());
    // A large budget goes past rxe's 128 PSNs, up to the hard cap.
    t.a.set_send_budget(Some(u64::MAX));
    let sent = t.a_sends(t1, |_| false);
    assert_eq!(sent.len(), 502);
    t.a.set_send_budget(None);
}

#[test]
fn a_round_trip_sample_ends_when_the_ack_arrived() {
    let us = Duration::from_micros;
    let mut t = pair(8 * 1024);
    let t0 = Instant::ZERO + us(100);
    t.a.set_send_budget(Some(8 * 1024));
    assert_eq!(t.a_sends(t0, |_| false).len(), 8);
    // The ACK reached the host 30 µs after the send but was handled 500 µs
    // later (our thread waited for a CPU): the sample is 30 µs.
    t.b_replies_arriving(t0 + us(530), t0 + us(30));
    assert_eq!(t.a.take_cc_signals().rtt, Some(us(30)));
    // An arrival before the send (a clock that moved under the caller's
    // conversion) measures nothing: the sample ends at `now` instead.
    let mut t = pair(8 * 1024);
    t.a.set_send_budget(Some(8 * 1024));
    t.a_sends(t0, |_| false);
    t.b_replies_arriving(t0 + us(200), Instant::ZERO + us(50));
    assert_eq!(t.a.take_cc_signals().rtt, Some(us(200)));
    // An arrival after `now` is taken as `now`.
    let mut t = pair(8 * 1024);
    t.a.set_send_budget(Some(8 * 1024));
    t.a_sends(t0, |_| false);
    t.b_replies_arriving(t0 + us(40), t0 + us(90));
    assert_eq!(t.a.take_cc_signals().rtt, Some(us(40)));
}

#[test]
fn a_budget_caps_at_the_hard_psn_limit() {
    let mut t = pair(2048 * 1024);
    t.a.set_send_budget(Some(u64::MAX));
    let sent = t.a_sends(Instant::ZERO, |_| true);
    assert_eq!(sent.len(), CC_MAX_UNACKED_PSNS as usize);
}

#[test]
fn a_go_back_n_retry_reports_a_loss_and_feeds_a_controller() {
    let mut t = pair(64 * 1024);
    let mut path = PathController::new(CcConfig::default());
    let t0 = Instant::ZERO;
    t.a.set_send_budget(Some(path.available()));
    // The fifth packet is lost: B holds the rest for a while, then answers
    // with a sequence NAK.
    let sent = t.a_sends(t0, |psn| psn == 104);
    assert_eq!(sent.len(), 64);
    let t1 = t0 + REORDER_WAIT;
    t.b.handle_timeout(t1);
    t.b_replies(t1);
    let s = t.a.take_cc_signals();
    assert_eq!(s.losses, 1);
    assert_eq!(s.acked, 4 * 1024);
    assert_eq!(s.abandoned, 60 * 1024);
    let before = path.window();
    cc::feed(&mut path, t1, s);
    assert!(path.window() < before);
    assert_eq!(path.in_flight(), 0);
    assert_eq!(path.counters().losses, 1);
}

#[test]
fn a_qp_in_error_releases_its_bytes_in_flight() {
    let mut t = pair(64 * 1024);
    let mut path = PathController::new(CcConfig::default());
    t.a.set_send_budget(Some(path.available()));
    let sent = t.a_sends(Instant::ZERO, |_| true);
    assert_eq!(sent.len(), 64);
    cc::feed(&mut path, Instant::ZERO, t.a.take_cc_signals());
    assert_eq!(path.in_flight(), 64 * 1024);
    let mut rq = RecvQueue::new(4, 1);
    crate::qp::move_to_error(&mut t.a, &mut rq);
    let s = t.a.take_cc_signals();
    assert_eq!((s.losses, s.abandoned), (0, 64 * 1024));
    cc::feed(&mut path, Instant::ZERO, s);
    assert_eq!(path.in_flight(), 0);
    assert_eq!(path.counters().losses, 0);
}

#[test]
fn a_cnp_reaches_the_controller_and_touches_no_psn_state() {
    let mut t = pair(64 * 1024);
    let mut path = PathController::new(CcConfig::default());
    t.a.set_send_budget(Some(path.available()));
    let sent = t.a_sends(Instant::ZERO, |_| false);
    assert_eq!(sent.len(), 64);
    cc::feed(&mut path, Instant::ZERO, t.a.take_cc_signals());
    // A CNP for A's QP (as a peer NIC sends for a CE-marked packet).
    let mut cnp = Packet::new(ndverbs_wire::bth::Bth::new(
        ndverbs_wire::opcode::Opcode::CNP,
        0x11,
        0,
    ));
    cnp.ext.cnp = Some([0; 16]);
    let mut buf = vec![0u8; 256];
    let n = cnp.write(&mut buf).unwrap();
    let t1 = Instant::ZERO + Duration::from_micros(10);
    t.a.handle_packet(
        t1,
        &Packet::parse(&buf[..n]).unwrap(),
        &mut t.mem_a,
        &mut t.rq_a,
    );
    assert_eq!(t.a.counters().drops.not_rc, 1);
    let s = t.a.take_cc_signals();
    assert_eq!((s.cnps, s.acked, s.losses), (1, 0, 0));
    let before = path.window();
    cc::feed(&mut path, t1, s);
    assert_eq!(path.counters().cnp_cuts, 1);
    assert_eq!(path.window(), before / 2);
    // The transfer still completes.
    t.b_replies(t1);
    assert_eq!(t.a.take_cc_signals().acked, 64 * 1024);
}

#[test]
fn a_resend_that_an_ack_overtakes_leaves_nothing_in_flight() {
    // B receives the first half of a 64-packet WRITE, but its ACK is late:
    // A's timer fires first and A re-sends from the start. Then the ACK
    // covers the first half, behind which A is still re-sending: those
    // PSNs are duplicates that B never acknowledges again. The path must
    // end with nothing in flight, or its window stays closed for good with
    // no ACK left to open it.
    let mut t = pair(64 * 1024);
    let mut path = PathController::new(CcConfig::default());
    let t0 = Instant::ZERO;
    // The first half arrives (its last packet asks for an ACK: it spends
    // the budget), the second is lost.
    t.a.set_send_budget(Some(32 * 1024));
    assert_eq!(t.a_sends(t0, |_| false).len(), 32);
    t.a.set_send_budget(Some(32 * 1024));
    assert_eq!(t.a_sends(t0, |_| true).len(), 32);
    cc::feed(&mut path, t0, t.a.take_cc_signals());
    let due = t.a.poll_timeout().expect("a retransmission timer");
    t.a.handle_timeout(due);
    t.a.set_send_budget(Some(10 * 1024));
    assert_eq!(t.a_sends(due, |_| true).len(), 10);
    cc::feed(&mut path, due, t.a.take_cc_signals());
    let mut now = due + Duration::from_micros(10);
    for _ in 0..10 {
        t.b_replies(now);
        cc::feed(&mut path, now, t.a.take_cc_signals());
        t.a.set_send_budget(Some(u64::MAX));
        t.a_sends(now, |_| false);
        cc::feed(&mut path, now, t.a.take_cc_signals());
        now += Duration::from_micros(10);
    }
    assert!(t.a.is_send_idle());
    assert_eq!(path.in_flight(), 0);
}

#[test]
fn a_qp_asks_for_at_most_one_cnp_per_interval() {
    let mut t = pair(1024);
    let t0 = Instant::from_nanos(1_000);
    assert!(t.b.congestion_experienced(t0));
    assert!(!t.b.congestion_experienced(t0 + Duration::from_micros(49)));
    assert!(t.b.congestion_experienced(t0 + CNP_INTERVAL));
    // A QP that is not connected answers nothing.
    let mut idle = RcQp::new(3, 1, QpCaps::default());
    assert!(!idle.congestion_experienced(t0));
}

/// A connected pair with one READ of `len` bytes posted at A (from B's
/// bytes `i as u8` for i in 0..len).
fn read_pair(len: u32) -> (Two, ndverbs_proto::mem::testing::MrKeys) {
    let mut t = pair(0);
    t.a = {
        let caps = QpCaps::default();
        let mut a = RcQp::new(0x11, 1, caps);
        let to_b = RcConnection {
            rq_psn: 500,
            sq_psn: 100,
            max_rd_atomic: 4,
            ..RcConnection::new(0x22)
        };
        for (attr, mask) in to_b.steps() {
            a.modify(&attr, mask).unwrap();
        }
        a
    };
    let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let src = t
        .mem_b
        .register_bytes(1, 0x40_0000, bytes, Access::REMOTE_READ);
    let dst = t.mem_a.register(1, 0x80_0000, len, Access::LOCAL_WRITE);
    let at = RemoteAddr {
        va: src.addr,
        rkey: src.rkey,
    };
    t.a.post_send(SendWr::new(7, SendOp::Read(at), vec![dst.sge(0, len)]))
        .unwrap();
    (t, dst)
}

#[test]
fn a_budget_splits_a_read_into_requests_of_what_it_allows() {
    let len = 256 * 1024;
    let (mut t, dst) = read_pair(len);
    let mut path = PathController::new(CcConfig::default());
    let mut now = Instant::ZERO;
    let mut requests = Vec::new();
    for _ in 0..20 {
        t.a.set_send_budget(Some(64 * 1024 + 100));
        let mut buf = vec![0u8; t.a.max_packet_len()];
        while let Some(n) = t.a.poll_transmit(now, &mut t.mem_a, &mut buf) {
            let p = Packet::parse(&buf[..n]).unwrap();
            requests.push((p.bth.psn, p.ext.reth.unwrap().len));
            t.b.handle_packet(now, &p, &mut t.mem_b, &mut t.rq_b);
        }
        cc::feed(&mut path, now, t.a.take_cc_signals());
        assert!(path.in_flight() <= 64 * 1024, "{}", path.in_flight());
        now += Duration::from_micros(10);
        t.b_replies(now);
        cc::feed(&mut path, now, t.a.take_cc_signals());
    }
    // Four requests of 64 KiB (the budget's whole packets), each at the PSN
    // of its first response; the READ completes with every byte.
    assert_eq!(
        requests,
        [(100, 65536), (164, 65536), (228, 65536), (292, 65536)]
    );
    let wc = t.a.poll_completion().expect("the READ completed");
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::Success));
    let want: Vec<u8> = (0..len).map(|i| i as u8).collect();
    assert_eq!(t.mem_a.bytes(dst.lkey), &want[..]);
    assert_eq!(path.in_flight(), 0);
    assert_eq!(path.counters().bytes_acked, u64::from(len));
}
