//! Hostile peers: garbage and protocol violations never panic, are counted,
//! and never break exactly-once / in-order completion.

use crate::harness::*;
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::*;
use ndverbs_proto::time::Duration;
use ndverbs_wire::bth::Bth;
use ndverbs_wire::ext::{Aeth, NakCode, Reth, Syndrome};
use ndverbs_wire::opcode::Opcode;
use ndverbs_wire::packet::Packet;

/// A pair with traffic of every kind posted in both directions.
fn busy_pair(seed: u64) -> Pair {
    let mut p = Pair::new(Config {
        seed,
        mtu: PathMtu::Mtu256,
        timeout: 6,
        retry_cnt: 7,
        ..Config::default()
    });
    for (from, to) in [(Side::A, Side::B), (Side::B, Side::A)] {
        let src = p.region(from, 0x1000, pattern(seed, 4096), Access::REMOTE_READ);
        let land = p.region(from, 0x10_000, vec![0; 8192], Access::NONE);
        let dst = p.region(
            to,
            0x20_000,
            vec![0; 8192],
            Access::REMOTE_WRITE | Access::REMOTE_ATOMIC,
        );
        let peer_src = p.region(to, 0x30_000, pattern(seed + 1, 4096), Access::REMOTE_READ);
        for i in 0..6u64 {
            p.node(to)
                .post_recv(RecvWr::new(100 + i, vec![dst.sge(i as u32 * 1024, 1024)]));
        }
        let n = p.node(from);
        let r = |va: u64, rkey| RemoteAddr { va, rkey };
        let ops = [
            SendOp::Send,
            SendOp::Write(r(dst.addr + 6144, dst.rkey)),
            SendOp::Read(r(peer_src.addr, peer_src.rkey)),
            SendOp::FetchAdd {
                remote: r(dst.addr + 8184, dst.rkey),
                add: 1,
            },
            SendOp::SendImm(5),
            SendOp::WriteImm(r(dst.addr + 7000, dst.rkey), 9),
            SendOp::CompareSwap {
                remote: r(dst.addr + 8184, dst.rkey),
                compare: 1,
                swap: 2,
            },
            SendOp::Send,
        ];
        for (i, op) in ops.into_iter().enumerate() {
            let sge = match op {
                SendOp::Read(_) => land.sge(0, 1000),
                SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. } => {
                    land.sge(2000 + i as u32 * 8, 8)
                }
                _ => src.sge(i as u32 * 10, 700),
            };
            n.post_send(SendWr::new(i as u64, op, vec![sge]));
        }
    }
    p
}

#[test]
fn mutated_packets_never_panic() {
    let mut outcomes = [0usize; 2];
    for seed in 0..150u64 {
        let mut p = busy_pair(seed);
        let rate = 0.02 + (seed % 10) as f64 * 0.03;
        p.mutate = Some(Box::new(move |rng: &mut Rng, b: &mut Vec<u8>| {
            if !rng.chance(rate) {
                return;
            }
            match rng.below(6) {
                // Any byte.
                0 => {
                    let i = rng.below(b.len() as u64) as usize;
                    b[i] = rng.next_u64() as u8;
                }
                // Opcode (keep it RC so it gets past the dispatcher).
                1 => b[0] = rng.below(0x18) as u8,
                // PSN near the current one.
                2 => b[11] = b[11].wrapping_add(rng.below(5) as u8).wrapping_sub(2),
                // Extension header bytes (RETH/AETH/AtomicETH live here).
                3 if b.len() > 16 => {
                    let i = 12 + rng.below((b.len() - 16).min(28) as u64) as usize;
                    b[i] = rng.next_u64() as u8;
                }
                // Truncate or extend.
                4 => {
                    let n = rng.below(b.len() as u64 + 8) as usize;
                    b.resize(n, 0);
                }
                // Pad count.
                _ => b[1] = (b[1] & !0x30) | ((rng.below(4) as u8) << 4),
            }
        }));
        let _ = p.run_until(Duration::from_millis(200), |_| false);
        for side in [Side::A, Side::B] {
            p.node(side).check_completions(false, false);
        }
        outcomes[usize::from(p.a.qp.state() == QpState::Err)] += 1;
    }
    // Both outcomes happen: recovered runs and runs a bad packet killed.
    assert!(outcomes[0] > 0 && outcomes[1] > 0, "{outcomes:?}");
}

#[test]
fn random_garbage_is_counted_and_dropped() {
    let mut p = busy_pair(7);
    let _ = p.run_until(Duration::from_micros(20), |_| false);
    let mut rng = Rng::new(99);
    let mut buf = [0u8; 200];
    let mut parsed = 0;
    for _ in 0..20_000 {
        let n = 12 + rng.below(150) as usize;
        rng.fill(&mut buf[..n]);
        buf[0] = rng.below(0x18) as u8; // RC opcodes mostly
        buf[1] &= 0xf0; // TVer 0
        buf[5..8].copy_from_slice(&QPN_A.to_be_bytes()[1..]);
        if let Ok(pkt) = Packet::parse(&buf[..n]) {
            parsed += 1;
            let now = p.now;
            p.a.qp.handle_packet(now, &pkt, &mut p.a.mem, &mut p.a.rq);
            let mut out = [0u8; 512];
            while p.a.qp.poll_transmit(now, &mut p.a.mem, &mut out).is_some() {}
            p.a.qp.handle_timeout(now);
        }
    }
    assert!(parsed > 1000);
    p.a.take_completions();
    p.a.check_completions(false, false);
}

/// Feeds one crafted packet to A.
fn inject(p: &mut Pair, bth: Bth, f: impl FnOnce(&mut Packet<'_>)) {
    let mut pkt = Packet::new(bth);
    f(&mut pkt);
    let mut buf = vec![0u8; 4200];
    let n = pkt.write(&mut buf).unwrap();
    let pkt = Packet::parse(&buf[..n]).unwrap();
    let now = p.now;
    p.a.qp.handle_packet(now, &pkt, &mut p.a.mem, &mut p.a.rq);
}

#[test]
fn protocol_violations() {
    // A READ response answering a SEND: BadRespErr.
    let mut p = sending_to_the_dead(Config::default(), 1, 64);
    let _ = p.run_until(Duration::from_micros(1), |_| false);
    let psn = p.cfg.psn_a;
    inject(
        &mut p,
        Bth::new(Opcode::RC_READ_RESPONSE_ONLY, QPN_A, psn),
        |k| {
            k.ext.aeth = Some(Aeth::new(Syndrome::ACK, 1));
        },
    );
    assert_eq!(p.a.qp.state(), QpState::Err);
    assert_eq!(
        p.a.qp.poll_completion().unwrap().status,
        WcStatus::BadRespErr
    );

    // ACK for a PSN never sent, for a stale PSN, with a reserved syndrome, and
    // for another QP: dropped and counted.
    let mut p = Pair::new(Config::default());
    p.b.dead = true;
    p.a.post_send(SendWr::new(1, SendOp::Send, vec![]));
    let _ = p.run_until(Duration::from_micros(1), |_| false);
    let psn = p.cfg.psn_a;
    let ack = |psn, syn: u8| {
        move |k: &mut Packet<'_>| {
            k.ext.aeth = Some(Aeth {
                syndrome: syn,
                msn: 1,
            });
            let _ = psn;
        }
    };
    inject(
        &mut p,
        Bth::new(Opcode::RC_ACK, QPN_A, psn + 1),
        ack(0, 0x1f),
    );
    inject(
        &mut p,
        Bth::new(Opcode::RC_ACK, QPN_A, psn - 1),
        ack(0, 0x1f),
    );
    inject(&mut p, Bth::new(Opcode::RC_ACK, QPN_A, psn), ack(0, 0x40));
    inject(&mut p, Bth::new(Opcode::RC_ACK, QPN_B, psn), ack(0, 0x1f));
    inject(&mut p, Bth::new(Opcode::UD_SEND_ONLY, QPN_A, psn), |k| {
        k.ext.deth = Some(Default::default());
    });
    let d = p.a.qp.counters().drops;
    assert_eq!(
        (
            d.ghost_response,
            d.stale_response,
            d.unexpected_ack,
            d.wrong_qpn,
            d.not_rc
        ),
        (1, 1, 1, 1, 1)
    );
    assert_eq!(p.a.qp.state(), QpState::Rts);
    // A NAK "remote operational error" ends it.
    inject(&mut p, Bth::new(Opcode::RC_ACK, QPN_A, psn), |k| {
        k.ext.aeth = Some(Aeth::new(Syndrome::Nak(NakCode::RemoteOperational), 0));
    });
    assert_eq!(p.a.qp.poll_completion().unwrap().status, WcStatus::RemOpErr);

    // Requests: WRITE MIDDLE without FIRST ⇒ NAK invalid request, QP → ERR,
    // and the NAK is the last thing sent.
    let mut p = Pair::new(Config::default());
    p.log = Some(Vec::new());
    let psn = p.cfg.psn_b;
    inject(&mut p, Bth::new(Opcode::RC_WRITE_MIDDLE, QPN_A, psn), |k| {
        k.payload = &[0; 1024];
    });
    assert_eq!(p.a.qp.state(), QpState::Err);
    assert_eq!(
        p.a.qp.error_cause(),
        Some(QpErrorCause::Responder(NakCode::InvalidRequest))
    );
    let _ = p.run_until(Duration::from_millis(10), |_| false);
    let sent: Vec<_> = p
        .logged()
        .iter()
        .filter(|(s, _)| *s == Side::A)
        .map(|(_, b)| Packet::parse(b).unwrap())
        .map(|k| (k.bth.opcode, k.bth.psn, k.ext.aeth.map(|a| a.syndrome)))
        .collect();
    assert_eq!(sent, vec![(Opcode::RC_ACK, psn, Some(0x61))]);

    // A WRITE FIRST shorter than the MTU ⇒ invalid request.
    let mut p = Pair::new(Config::default());
    let psn = p.cfg.psn_b;
    inject(&mut p, Bth::new(Opcode::RC_WRITE_FIRST, QPN_A, psn), |k| {
        k.ext.reth = Some(Reth {
            va: 0,
            rkey: 0,
            len: 5000,
        });
        k.payload = &[0; 1000];
    });
    assert_eq!(
        p.a.qp.error_cause(),
        Some(QpErrorCause::Responder(NakCode::InvalidRequest))
    );

    // Out-of-sequence requests: held while the gap may still fill, then
    // one NAK, and silence.
    let mut p = Pair::new(Config::default());
    let psn = p.cfg.psn_b;
    for d in 1..5 {
        inject(
            &mut p,
            Bth::new(Opcode::RC_SEND_ONLY, QPN_A, psn + d),
            |_| {},
        );
    }
    let c = p.a.qp.counters();
    assert_eq!((c.out_of_seq_request, c.drops.out_of_seq), (0, 0));
    assert_eq!(p.a.qp.poll_timeout(), Some(p.now + REORDER_WAIT));
    let now = p.now + REORDER_WAIT;
    p.a.qp.handle_timeout(now);
    let c = p.a.qp.counters();
    assert_eq!((c.out_of_seq_request, c.drops.out_of_seq), (1, 3));
    inject(
        &mut p,
        Bth::new(Opcode::RC_SEND_ONLY, QPN_A, psn + 5),
        |_| {},
    );
    assert_eq!(p.a.qp.counters().drops.out_of_seq, 4);
    let mut out = [0u8; 64];
    let n = p.a.qp.poll_transmit(now, &mut p.a.mem, &mut out).unwrap();
    let nak = Packet::parse(&out[..n]).unwrap();
    assert_eq!((nak.bth.psn, nak.ext.aeth.unwrap().syndrome), (psn, 0x60));
    assert!(p.a.qp.poll_transmit(now, &mut p.a.mem, &mut out).is_none());

    // A buffer too small for the next packet is refused without losing it.
    let mut p = Pair::new(Config::default());
    let src = p.region(Side::A, 0x1000, pattern(2, 1024), Access::NONE);
    p.a.post_send(SendWr::new(1, SendOp::Send, vec![src.sge(0, 1024)]));
    let mut small = [0u8; 100];
    let now = p.now;
    assert!(p
        .a
        .qp
        .poll_transmit(now, &mut p.a.mem, &mut small)
        .is_none());
    assert_eq!(p.a.qp.counters().drops.tx_no_room, 1);
    let mut big = vec![0u8; p.a.qp.max_packet_len()];
    assert!(p.a.qp.poll_transmit(now, &mut p.a.mem, &mut big).is_some());
}

#[test]
fn bad_local_sge_is_a_local_protection_error() {
    let mut p = Pair::new(Config::default());
    let dst = p.region(Side::B, 0x8000, vec![0; 64], Access::NONE);
    p.b.post_recv(RecvWr::new(1, vec![dst.sge(0, 64)]));
    let src = p.region(Side::A, 0x1000, pattern(3, 64), Access::NONE);
    p.a.post_send(SendWr::new(1, SendOp::Send, vec![src.sge(0, 64)]));
    p.a.post_send(SendWr::new(
        2,
        SendOp::Send,
        vec![ndverbs_proto::mem::Sge::new(0x1000, 64, 0xdead)],
    ));
    p.a.post_send(SendWr::new(3, SendOp::Send, vec![src.sge(0, 64)]));
    let _ = p.run_until(Duration::from_millis(10), |_| false);
    p.a.check_completions(true, true);
    let s: Vec<_> = p.a.send_wcs().iter().map(|w| (w.wr_id, w.status)).collect();
    // WR 1 was in flight when WR 2 failed: it is flushed, not completed.
    assert_eq!(
        s,
        vec![
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::LocProtErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(p.a.qp.counters().send_err, 1);
}
