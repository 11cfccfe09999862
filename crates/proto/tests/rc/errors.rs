//! Error paths: RNR, retries, NAKs, flushes.

use crate::harness::*;
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::*;
use ndverbs_proto::time::Duration;
use ndverbs_wire::ext::NakCode;
use ndverbs_wire::opcode::Opcode;

#[test]
fn rnr_then_receive_posted_later() {
    let mut p = Pair::new(Config {
        min_rnr_timer: 14, // 1.28 ms
        rnr_retry: 7,
        ..Config::default()
    });
    let src = p.region(Side::A, 0x1000, pattern(7, 3000), Access::NONE);
    let dst = p.region(Side::B, 0x8000, vec![0; 4096], Access::NONE);
    p.a.post_send(SendWr::new(1, SendOp::Send, vec![src.sge(0, 3000)]));
    // Let it bounce off a few RNR NAKs.
    let _ = p.run_until(Duration::from_millis(5), |_| false);
    assert!(p.b.qp.counters().send_rnr_err >= 2);
    assert!(p.a.qp.counters().rcvd_rnr_err >= 2);
    assert!(p.a.send_wcs().is_empty());
    p.b.post_recv(RecvWr::new(9, vec![dst.sge(0, 4096)]));
    p.run_idle(Duration::from_secs(1));
    p.a.check_completions(true, true);
    p.b.check_completions(true, true);
    assert_eq!(p.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(&p.b.mem.bytes(dst.lkey)[..3000], &pattern(7, 3000)[..]);
    assert_eq!(p.b.qp.state(), QpState::Rts);
}

#[test]
fn rnr_retry_exceeded() {
    let mut p = Pair::new(Config {
        rnr_retry: 2,
        ..Config::default()
    });
    let src = p.region(Side::A, 0x1000, pattern(8, 100), Access::NONE);
    p.a.post_send(SendWr::new(1, SendOp::Send, vec![src.sge(0, 100)]));
    p.a.post_send(SendWr::new(2, SendOp::Send, vec![src.sge(0, 100)]));
    p.run_idle(Duration::from_secs(5));
    p.a.check_completions(true, true);
    let s = p.a.send_wcs();
    assert_eq!(s[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(s[1].status, WcStatus::WrFlushErr);
    assert_eq!(p.a.qp.state(), QpState::Err);
    assert_eq!(
        p.a.qp.error_cause(),
        Some(QpErrorCause::Requester(WcStatus::RnrRetryExcErr))
    );
    let c = p.a.qp.counters();
    assert_eq!(c.rcvd_rnr_err, 3);
    assert_eq!(c.retry_rnr_exceeded_err, 1);
    // The responder is unharmed.
    assert_eq!(p.b.qp.state(), QpState::Rts);
}

#[test]
fn retry_exceeded_against_dead_peer() {
    let cfg = Config {
        retry_cnt: 3,
        timeout: 10,
        ..Config::default()
    };
    let mut p = sending_to_the_dead(cfg, 4, 5000);
    let t0 = p.now;
    p.run_idle(Duration::from_secs(5));
    p.a.check_completions(true, true);
    let s = p.a.send_wcs();
    assert_eq!(s[0].status, WcStatus::RetryExcErr);
    assert!(s[1..].iter().all(|w| w.status == WcStatus::WrFlushErr));
    let c = p.a.qp.counters();
    assert_eq!(c.completer_retry_err, 3);
    assert_eq!(c.retry_exceeded_err, 1);
    // Four timeouts of 4.096 µs << 10 ≈ 4.19 ms each.
    let took = p.now.saturating_duration_since(t0);
    assert!(took >= Duration::from_micros(4 * 4194), "{took:?}");
    assert!(took < Duration::from_millis(20), "{took:?}");
    // Nothing is sent after the error.
    let sent = p.a.qp.counters().sent_pkts;
    let _ = p.run_until(Duration::from_secs(1), |_| false);
    assert_eq!(p.a.qp.counters().sent_pkts, sent);
}

#[test]
fn retry_cnt_7_is_infinite() {
    let cfg = Config {
        retry_cnt: 7,
        timeout: 1,
        ..Config::default()
    };
    let mut p = sending_to_the_dead(cfg, 1, 64);
    let _ = p.run_until(Duration::from_millis(20), |_| false);
    assert!(p.a.qp.counters().completer_retry_err > 100);
    assert!(p.a.send_wcs().is_empty());
    assert_eq!(p.a.qp.state(), QpState::Rts);
    // The peer comes back: the send completes.
    p.b.dead = false;
    let dst = p.region(Side::B, 0x8000, vec![0; 64], Access::NONE);
    p.b.post_recv(RecvWr::new(1, vec![dst.sge(0, 64)]));
    p.run_idle(Duration::from_secs(1));
    assert_eq!(p.a.send_wcs()[0].status, WcStatus::Success);
}

/// Posts `wr` on A against a B region; returns A's and B's outcome.
fn remote_error(
    access_b_region: Access,
    qp_access: Access,
    op: impl FnOnce(RemoteAddr) -> SendOp,
    local_len: u32,
) -> Pair {
    let mut p = Pair::new(Config {
        access: qp_access,
        ..Config::default()
    });
    let target = p.region(Side::B, 0x40_000, vec![0; 4096], access_b_region);
    let local = p.region(Side::A, 0x1000, pattern(10, 4096), Access::NONE);
    let remote = RemoteAddr {
        va: target.addr,
        rkey: target.rkey,
    };
    p.a.post_send(SendWr::new(1, op(remote), vec![local.sge(0, local_len)]));
    p.a.post_send(SendWr::new(2, SendOp::Send, vec![]));
    p.run_idle(Duration::from_secs(1));
    p.a.check_completions(true, true);
    p.b.check_completions(false, false);
    assert_eq!(p.a.qp.state(), QpState::Err);
    assert_eq!(p.b.qp.state(), QpState::Err);
    assert_eq!(p.a.send_wcs()[1].status, WcStatus::WrFlushErr);
    p
}

#[test]
fn remote_access_errors() {
    let all = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
    type Op = fn(RemoteAddr) -> SendOp;
    let (access_err, inv_req) = (
        (WcStatus::RemAccessErr, NakCode::RemoteAccess),
        (WcStatus::RemInvReqErr, NakCode::InvalidRequest),
    );
    // (what, the region's rights, the QP's rights, the operation, bytes
    // at A, A's completion and B's NAK)
    let cases: [(&str, Access, Access, Op, u32, _); 5] = [
        (
            "bad R_Key",
            all,
            all,
            |r| {
                SendOp::Write(RemoteAddr {
                    rkey: r.rkey ^ 0x100,
                    ..r
                })
            },
            100,
            access_err,
        ),
        (
            "READ beyond the region (multi-packet, the tail outside)",
            all,
            all,
            |r| SendOp::Read(RemoteAddr { va: r.va + 1, ..r }),
            4096,
            access_err,
        ),
        (
            "region without atomic rights",
            Access::REMOTE_READ,
            all,
            |remote| SendOp::FetchAdd { remote, add: 1 },
            8,
            access_err,
        ),
        (
            "QP without remote read rights",
            all,
            Access::REMOTE_WRITE,
            SendOp::Read,
            64,
            inv_req,
        ),
        (
            "misaligned atomic",
            all,
            all,
            |r| SendOp::CompareSwap {
                remote: RemoteAddr { va: r.va + 4, ..r },
                compare: 0,
                swap: 1,
            },
            8,
            inv_req,
        ),
    ];
    for (what, region, qp, op, len, (status, nak)) in cases {
        let p = remote_error(region, qp, op, len);
        assert_eq!(p.a.send_wcs()[0].status, status, "{what}");
        assert_eq!(
            p.b.qp.error_cause(),
            Some(QpErrorCause::Responder(nak)),
            "{what}"
        );
    }
}

#[test]
fn send_larger_than_receive() {
    let mut p = Pair::new(Config::default());
    let src = p.region(Side::A, 0x1000, pattern(11, 3000), Access::NONE);
    let dst = p.region(Side::B, 0x8000, vec![0; 4096], Access::NONE);
    p.b.post_recv(RecvWr::new(1, vec![dst.sge(0, 2500)]));
    p.b.post_recv(RecvWr::new(2, vec![dst.sge(0, 4096)]));
    p.a.post_send(SendWr::new(1, SendOp::Send, vec![src.sge(0, 3000)]));
    p.run_idle(Duration::from_secs(1));
    assert_eq!(p.a.send_wcs()[0].status, WcStatus::RemInvReqErr);
    let r = p.b.recv_wcs();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].status, WcStatus::LocLenErr);
    assert_eq!(p.b.qp.state(), QpState::Err);
    // The engine flushes the rest of B's receive queue.
    assert_eq!(p.b.move_to_error(), 1);
    p.b.take_completions();
    p.b.check_completions(true, true);
    assert_eq!(p.b.recv_wcs()[1].status, WcStatus::WrFlushErr);
}

#[test]
fn flush_on_err_exactly_once() {
    let mut p = Pair::new(Config::default());
    p.b.dead = true;
    let src = p.region(Side::A, 0x1000, pattern(12, 8192), Access::NONE);
    let dst = p.region(Side::A, 0x9000, vec![0; 8192], Access::NONE);
    for i in 0..5 {
        let mut wr = SendWr::new(i, SendOp::Send, vec![src.sge(0, 8192)]);
        wr.signaled = i % 2 == 0; // flushes complete even when unsignaled
        p.a.post_send(wr);
        p.a.post_recv(RecvWr::new(100 + i, vec![dst.sge(0, 8192)]));
    }
    let _ = p.run_until(Duration::from_micros(50), |_| false);
    let sent = p.a.qp.counters().sent_pkts;
    assert!(sent > 0);
    assert_eq!(p.a.move_to_error(), 5);
    // Again: nothing more.
    assert_eq!(p.a.move_to_error(), 0);
    // Posting in ERR completes at once with a flush.
    p.a.post_send(SendWr::new(50, SendOp::Send, vec![]));
    p.a.post_recv(RecvWr::new(150, vec![]));
    let _ = p.run_until(Duration::from_secs(1), |_| false);
    assert_eq!(p.a.qp.counters().sent_pkts, sent, "nothing sent in ERR");
    assert_eq!(p.a.qp.poll_timeout(), None);
    p.a.check_completions(true, true);
    let s = p.a.send_wcs();
    assert_eq!(s.len(), 6);
    assert!(s
        .iter()
        .all(|w| w.status == WcStatus::WrFlushErr && w.byte_len == 0));
    let r = p.a.recv_wcs();
    assert_eq!(r.len(), 6);
    assert!(r
        .iter()
        .all(|w| w.status == WcStatus::WrFlushErr && w.opcode == WcOpcode::Recv));
    assert_eq!(p.a.qp.error_cause(), Some(QpErrorCause::Modify));
}

#[test]
fn flush_includes_receive_in_progress() {
    // A multi-packet SEND is half received when B errors out: its receive
    // (already taken from the queue) is flushed exactly once too.
    let mut p = Pair::new(Config::default());
    let src = p.region(Side::A, 0x1000, pattern(13, 4000), Access::NONE);
    let dst = p.region(Side::B, 0x8000, vec![0; 4096], Access::NONE);
    p.b.post_recv(RecvWr::new(1, vec![dst.sge(0, 4096)]));
    p.b.post_recv(RecvWr::new(2, vec![dst.sge(0, 4096)]));
    p.set_filter(|side, pkt| side == Side::A && pkt.bth.opcode == Opcode::RC_SEND_LAST);
    p.a.post_send(SendWr::new(1, SendOp::Send, vec![src.sge(0, 4000)]));
    let _ = p.run_until(Duration::from_micros(100), |_| false);
    p.b.move_to_error();
    p.b.take_completions();
    p.b.check_completions(true, true);
    assert_eq!(p.b.recv_wcs().len(), 2);
    assert!(p
        .b
        .recv_wcs()
        .iter()
        .all(|w| w.status == WcStatus::WrFlushErr));
}

#[test]
fn nak_sequence_go_back_n() {
    let mut p = Pair::new(Config::default());
    p.log = Some(Vec::new());
    let data = pattern(14, 8 * 1024);
    let src = p.region(Side::A, 0x1000, data.clone(), Access::NONE);
    let dst = p.region(Side::B, 0x8000, vec![0; 8192], Access::NONE);
    p.b.post_recv(RecvWr::new(1, vec![dst.sge(0, 8192)]));
    let mut dropped = false;
    p.set_filter(move |side, pkt| {
        let hit = side == Side::A && pkt.bth.opcode == Opcode::RC_SEND_MIDDLE && !dropped;
        dropped |= hit && pkt.bth.psn == 0x10_0003;
        hit && pkt.bth.psn == 0x10_0003
    });
    p.a.post_send(SendWr::new(1, SendOp::Send, vec![src.sge(0, 8192)]));
    p.run_idle(Duration::from_secs(1));
    p.a.check_completions(true, true);
    p.b.check_completions(true, true);
    assert_eq!(p.b.mem.bytes(dst.lkey), &data[..]);
    assert_eq!(p.b.qp.counters().out_of_seq_request, 1);
    assert_eq!(p.a.qp.counters().rcvd_seq_err, 1);
    assert_eq!(p.a.qp.counters().completer_retry_err, 1);
    // The NAK carried the missing PSN; the resend starts there.
    let naks: Vec<_> = p
        .logged()
        .iter()
        .filter(|(s, _)| *s == Side::B)
        .map(|(_, b)| ndverbs_wire::packet::Packet::parse(b).unwrap())
        .filter(|k| k.ext.aeth.is_some_and(|a| a.syndrome == 0x60))
        .map(|k| k.bth.psn)
        .collect();
    assert_eq!(naks, vec![0x10_0003]);
    let a_psns: Vec<u32> = p
        .logged()
        .iter()
        .filter(|(s, _)| *s == Side::A)
        .map(|(_, b)| ndverbs_wire::packet::Packet::parse(b).unwrap().bth.psn)
        .collect();
    assert_eq!(
        &a_psns[..8],
        &[0x10_0000, 0x10_0001, 0x10_0002, 0x10_0003, 0x10_0004, 0x10_0005, 0x10_0006, 0x10_0007]
    );
    assert_eq!(
        &a_psns[8..],
        &[0x10_0003, 0x10_0004, 0x10_0005, 0x10_0006, 0x10_0007]
    );
}

#[test]
fn partial_read_retry_resumes_at_offset() {
    let mut p = Pair::new(Config::default());
    p.log = Some(Vec::new());
    let data = pattern(15, 10 * 1024 - 7);
    let src = p.region(Side::B, 0x40_000, data.clone(), Access::REMOTE_READ);
    let dst = p.region(Side::A, 0x1000, vec![0; data.len()], Access::NONE);
    let mut dropped = false;
    // Lose the 4th response packet once.
    p.set_filter(move |side, pkt| {
        let hit = !dropped && side == Side::B && pkt.bth.psn == 0x10_0003;
        dropped |= hit;
        hit
    });
    let remote = RemoteAddr {
        va: src.addr,
        rkey: src.rkey,
    };
    p.a.post_send(SendWr::new(
        1,
        SendOp::Read(remote),
        vec![dst.sge(0, data.len() as u32)],
    ));
    p.run_idle(Duration::from_secs(1));
    p.a.check_completions(true, true);
    assert_eq!(p.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(p.a.mem.bytes(dst.lkey), &data[..]);
    // Two READ requests: the original and the retry for the tail.
    let reqs: Vec<_> = p
        .logged()
        .iter()
        .filter(|(s, _)| *s == Side::A)
        .map(|(_, b)| ndverbs_wire::packet::Packet::parse(b).unwrap())
        .filter(|k| k.bth.opcode == Opcode::RC_READ_REQUEST)
        .map(|k| (k.bth.psn, k.ext.reth.unwrap()))
        .collect();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].0, 0x10_0000);
    assert_eq!(reqs[0].1.len as usize, data.len());
    assert_eq!(reqs[1].0, 0x10_0003);
    assert_eq!(reqs[1].1.va, src.addr + 3 * 1024);
    assert_eq!(reqs[1].1.len as usize, data.len() - 3 * 1024);
    // The replay continues with MIDDLE … LAST, as rxe does.
    let replay: Vec<_> = p
        .logged()
        .iter()
        .filter(|(s, _)| *s == Side::B)
        .map(|(_, b)| ndverbs_wire::packet::Packet::parse(b).unwrap())
        .filter(|k| k.bth.psn == 0x10_0003)
        .map(|k| k.bth.opcode)
        .collect();
    assert_eq!(
        replay,
        vec![
            Opcode::RC_READ_RESPONSE_MIDDLE,
            Opcode::RC_READ_RESPONSE_MIDDLE
        ]
    );
    assert_eq!(p.b.qp.counters().duplicate_request, 1);
}

#[test]
fn duplicate_atomic_replays_saved_result() {
    let mut p = Pair::new(Config::default());
    let target = p.region(Side::B, 0x40_000, vec![0; 8], Access::REMOTE_ATOMIC);
    let res = p.region(Side::A, 0x1000, vec![0; 16], Access::NONE);
    let remote = RemoteAddr {
        va: target.addr,
        rkey: target.rkey,
    };
    // Lose the first ATOMIC ACKNOWLEDGE: the requester times out and resends
    // the FETCH_ADD; the responder must answer from its saved result.
    let mut dropped = false;
    p.set_filter(move |side, pkt| {
        let hit = !dropped && side == Side::B && pkt.bth.opcode == Opcode::RC_ATOMIC_ACK;
        dropped |= hit;
        hit
    });
    p.a.post_send(SendWr::new(
        1,
        SendOp::FetchAdd { remote, add: 3 },
        vec![res.sge(0, 8)],
    ));
    p.a.post_send(SendWr::new(
        2,
        SendOp::FetchAdd { remote, add: 4 },
        vec![res.sge(8, 8)],
    ));
    p.run_idle(Duration::from_secs(1));
    p.a.check_completions(true, true);
    assert!(p.a.send_wcs().iter().all(|w| w.status == WcStatus::Success));
    let r = p.a.mem.bytes(res.lkey);
    assert_eq!(u64::from_ne_bytes(r[..8].try_into().unwrap()), 0);
    assert_eq!(u64::from_ne_bytes(r[8..].try_into().unwrap()), 3);
    let t = p.b.mem.bytes(target.lkey);
    assert_eq!(
        u64::from_ne_bytes(t.try_into().unwrap()),
        7,
        "executed once each"
    );
    assert!(p.b.qp.counters().duplicate_request >= 1);
}
