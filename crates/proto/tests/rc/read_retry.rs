//! Windowed READ retry: a READ whose responses were lost is asked for again in
//! chunks of at most one send window, each at the PSN where it starts; the
//! responder answers chunks (subsets of the original) as rxe does; the WQE
//! completes once with every byte in place. And the completer's probe: an
//! early, uncharged retry when nothing is acknowledged for a few round trips.

use crate::harness::*;
use ndverbs_proto::mem::testing::MrKeys;
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::*;
use ndverbs_proto::time::Duration;
use ndverbs_wire::bth::Bth;
use ndverbs_wire::ext::Reth;
use ndverbs_wire::opcode::Opcode;
use ndverbs_wire::packet::Packet;
use std::cell::Cell;
use std::rc::Rc;

/// Path MTU 4096: the full send window is then rxe's 128 PSNs
/// (`max_window`), which the chunk sizes below are counted in.
const MTU: u32 = 4096;
const PSN: u32 = 0x10_0000; // A's first send PSN (Config::default)

/// A pair with a `len`-byte READ source at B and a landing buffer at A.
fn setup(len: usize) -> (Pair, Vec<u8>, MrKeys, MrKeys) {
    let mut p = Pair::new(Config {
        mtu: PathMtu::Mtu4096,
        ..Config::default()
    });
    p.log = Some(Vec::new());
    let data = pattern(len as u64, len);
    let src = p.region(Side::B, 0x40_0000, data.clone(), Access::REMOTE_READ);
    let dst = p.region(Side::A, 0x1000, vec![0; len], Access::NONE);
    (p, data, src, dst)
}

fn post_read(p: &mut Pair, wr_id: u64, src: &MrKeys, dst: &MrKeys, len: u32) {
    let remote = RemoteAddr {
        va: src.addr,
        rkey: src.rkey,
    };
    p.a.post_send(SendWr::new(
        wr_id,
        SendOp::Read(remote),
        vec![dst.sge(0, len)],
    ));
}

/// Every READ request A sent: (PSN, RETH).
fn read_requests(p: &Pair) -> Vec<(u32, Reth)> {
    p.logged()
        .iter()
        .filter(|(s, _)| *s == Side::A)
        .map(|(_, b)| Packet::parse(b).unwrap())
        .filter(|k| k.bth.opcode == Opcode::RC_READ_REQUEST)
        .map(|k| (k.bth.psn, k.ext.reth.unwrap()))
        .collect()
}

/// Every READ response B sent: (PSN, opcode, payload length).
fn responses(p: &Pair) -> Vec<(u32, Opcode, usize)> {
    p.logged()
        .iter()
        .filter(|(s, _)| *s == Side::B)
        .map(|(_, b)| Packet::parse(b).unwrap())
        .filter(|k| {
            k.info()
                .is_ok_and(|i| i.operation == ndverbs_wire::opcode::Operation::ReadResponse)
        })
        .map(|k| (k.bth.psn, k.bth.opcode, k.payload.len()))
        .collect()
}

/// The READ completed exactly once, successfully, with the source's bytes.
fn check_done(p: &mut Pair, data: &[u8], dst: &MrKeys) {
    p.a.check_completions(true, true);
    let wcs = p.a.send_wcs();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(
        (wcs[0].status, wcs[0].opcode, wcs[0].byte_len as usize),
        (WcStatus::Success, WcOpcode::RdmaRead, data.len())
    );
    assert!(p.a.mem.bytes(dst.lkey) == data, "READ data differs");
    assert_eq!(p.a.qp.send_queue_len(), 0);
}

/// Runs a `len`-byte READ from B's memory into A's after `lose` chose what
/// the network loses, and checks that it completed; returns the pair, the
/// READ's source and every READ request A sent.
fn read_through(len: usize, lose: impl FnOnce(&mut Pair)) -> (Pair, MrKeys, Vec<(u32, Reth)>) {
    let (mut p, data, src, dst) = setup(len);
    lose(&mut p);
    post_read(&mut p, 1, &src, &dst, len as u32);
    p.run_idle(Duration::from_secs(2));
    check_done(&mut p, &data, &dst);
    let reqs = read_requests(&p);
    (p, src, reqs)
}

/// Drops the first copy B sends of the response with PSN `PSN + k`, for
/// each k (a k listed twice loses its first two copies).
fn drop_responses_once(p: &mut Pair, ks: &[u32]) {
    let pending: Rc<Cell<Vec<u32>>> = Rc::new(Cell::new(ks.iter().map(|k| PSN + k).collect()));
    p.set_filter(move |side, pkt| {
        if side != Side::B || pkt.bth.opcode == Opcode::RC_ACK {
            return false;
        }
        let mut v = pending.take();
        let hit = v.iter().position(|&x| x == pkt.bth.psn);
        if let Some(i) = hit {
            v.remove(i);
        }
        pending.set(v);
        hit.is_some()
    });
}

/// Checks that the requests after the first are contiguous chunks starting at
/// `start` packets: each at the PSN of its first byte, va and len matching,
/// each a multiple of the MTU but the last, which ends the READ; returns their
/// lengths in packets.
fn check_chunks(reqs: &[(u32, Reth)], src: &MrKeys, start: u32, total: usize) -> Vec<u32> {
    let mut at = start;
    let mut pkts = Vec::new();
    for (i, (psn, reth)) in reqs.iter().enumerate() {
        assert_eq!(*psn, PSN + at, "chunk {i} PSN");
        assert_eq!(reth.va, src.addr + u64::from(at * MTU), "chunk {i} va");
        assert_eq!(reth.rkey, src.rkey);
        let end = u64::from(at * MTU) + u64::from(reth.len);
        if i + 1 < reqs.len() {
            assert_eq!(reth.len % MTU, 0, "chunk {i} is whole packets");
        } else {
            assert_eq!(end, total as u64, "the last chunk ends the READ");
        }
        let n = reth.len.div_ceil(MTU);
        pkts.push(n);
        at += n;
    }
    pkts
}

#[test]
fn lost_response_rerequests_one_window_at_a_time() {
    // 200 response packets (the last one short); the 11th is lost once.
    let len = 200 * MTU as usize - 300;
    let (p, src, reqs) = read_through(len, |p| drop_responses_once(p, &[10]));

    assert_eq!((reqs[0].0, reqs[0].1.len as usize), (PSN, len));
    // The retry asks from the lost packet for one window: the full window
    // (max_window) halved by the loss.
    let full = max_window(MTU) as u32;
    assert_eq!(full, MAX_UNACKED_PSNS as u32);
    let chunks = check_chunks(&reqs[1..], &src, 10, len);
    assert_eq!(chunks[0], full / 2, "{chunks:?}");
    assert!(chunks.len() >= 2, "{chunks:?}");
    assert!(chunks.iter().all(|&n| n <= full));
    assert_eq!(p.a.qp.counters().completer_retry_err, 1);

    // B answered each chunk with MIDDLE … LAST, the LAST inside the READ's
    // range carrying a full MTU (what rxe sends); the final LAST the rest.
    let resp = responses(&p);
    let mut replay = resp[200..].iter(); // the log holds the lost packet too
    let mut at = 10;
    for &n in &chunks {
        for j in 0..n {
            let &(psn, op, len_) = replay.next().expect("chunk response");
            assert_eq!(psn, PSN + at + j);
            let want = if j + 1 == n {
                Opcode::RC_READ_RESPONSE_LAST
            } else {
                Opcode::RC_READ_RESPONSE_MIDDLE
            };
            assert_eq!(op, want, "chunk at {at}, packet {j}");
            if at + j < 199 {
                assert_eq!(len_, MTU as usize);
            }
        }
        at += n;
    }
    assert!(replay.next().is_none(), "responses beyond the chunks");
    assert_eq!(p.b.qp.counters().duplicate_request, chunks.len() as u64);
}

#[test]
fn lost_first_response_chunk_starts_with_first() {
    // The very first response is lost: the chunk starts at the READ's first
    // PSN, so B answers FIRST … LAST (a LAST in the middle of the READ).
    let len = 150 * MTU as usize;
    let (p, src, reqs) = read_through(len, |p| drop_responses_once(p, &[0]));
    let chunks = check_chunks(&reqs[1..], &src, 0, len);
    assert_eq!(chunks[0], 64);
    let resp = responses(&p);
    let first_chunk: Vec<_> = resp[150..150 + 64].iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(first_chunk[0], (PSN, Opcode::RC_READ_RESPONSE_FIRST));
    assert!(first_chunk[1..63]
        .iter()
        .all(|r| r.1 == Opcode::RC_READ_RESPONSE_MIDDLE));
    assert_eq!(first_chunk[63], (PSN + 63, Opcode::RC_READ_RESPONSE_LAST));
    assert_eq!(resp[150 + 63].2, MTU as usize);
}

#[test]
fn lost_request_chunks_are_new_reads_first_and_only() {
    // The READ request itself is lost: the responder never saw it, so each
    // chunk is a new READ to it, answered FIRST … LAST and, for a one-packet
    // final chunk, ONLY — both in the middle of the requester's READ.
    let len = 64 * MTU as usize + 1000;
    let dropped = Rc::new(Cell::new(false));
    let d = dropped.clone();
    let (p, src, reqs) = read_through(len, |p| {
        p.set_filter(move |side, pkt| {
            let hit = side == Side::A && pkt.bth.opcode == Opcode::RC_READ_REQUEST && !d.get();
            d.set(d.get() || hit);
            hit
        })
    });
    assert!(dropped.get());
    assert_eq!(reqs.len(), 3, "{reqs:?}");
    // Timeout: window 128 → 64; the 64 packets then widen it well past the
    // one packet left.
    assert_eq!(check_chunks(&reqs[1..], &src, 0, len), vec![64, 1]);
    assert_eq!(p.b.qp.counters().duplicate_request, 0);
    let resp = responses(&p);
    assert_eq!(resp.len(), 65);
    assert_eq!(resp[0].1, Opcode::RC_READ_RESPONSE_FIRST);
    assert_eq!(
        (resp[63].1, resp[63].2),
        (Opcode::RC_READ_RESPONSE_LAST, MTU as usize)
    );
    assert_eq!(resp[64], (PSN + 64, Opcode::RC_READ_RESPONSE_ONLY, 1000));
}

#[test]
fn loss_inside_a_chunk_never_asks_past_that_chunk() {
    // Packet 10 is lost, the chunk 10..74 goes out; then packet 30 of that
    // chunk is lost as well. The window grew meanwhile, but the second
    // re-request still ends where the chunk ends: the responder may hold the
    // chunk as a READ of its own, and only subsets of it are valid.
    let len = 300 * MTU as usize;
    // PSN 10 once in the original run; PSN 30's first copy is in the original
    // run (already behind the gap, discarded), so lose its first two copies.
    let (_, src, reqs) = read_through(len, |p| drop_responses_once(p, &[10, 30, 30]));
    assert_eq!((reqs[1].0, reqs[1].1.len), (PSN + 10, 64 * MTU));
    assert_eq!(reqs[2].0, PSN + 30, "{reqs:?}");
    assert_eq!(reqs[2].1.len, (74 - 30) * MTU, "capped at the chunk's end");
    check_chunks(&reqs[3..], &src, 74, len);
}

#[test]
fn many_reads_through_loss_complete_once() {
    // Several long READs back to back through random loss and reordering.
    let mut p = Pair::new(Config {
        faults: Faults {
            loss: 0.08,
            dup: 0.02,
            latency: Duration::from_micros(5),
            jitter: Duration::from_micros(4),
        },
        max_rd_atomic: 4,
        ..Config::default()
    });
    let len = 300 * MTU as usize - 77;
    let mut expect = Vec::new();
    for i in 0..6u64 {
        let data = pattern(100 + i, len);
        let src = p.region(
            Side::B,
            0x100_0000 * (i + 1),
            data.clone(),
            Access::REMOTE_READ,
        );
        let dst = p.region(Side::A, 0x100_0000 * (i + 1), vec![0; len], Access::NONE);
        post_read(&mut p, i, &src, &dst, len as u32);
        expect.push((data, dst));
    }
    p.run_idle(Duration::from_secs(60));
    p.a.check_completions(true, true);
    let wcs = p.a.send_wcs();
    assert_eq!(wcs.len(), 6);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    for (data, dst) in &expect {
        assert!(p.a.mem.bytes(dst.lkey) == &data[..]);
    }
    assert!(p.a.qp.counters().completer_retry_err > 0);
    // No re-request was refused by the responder.
    assert_eq!(p.b.qp.counters().drops.invalid_duplicate, 0);
}

/// Feeds one crafted READ request to B and returns what B answers:
/// (PSN, opcode, payload).
fn ask_b(p: &mut Pair, psn: u32, reth: Reth) -> Vec<(u32, Opcode, Vec<u8>)> {
    let mut bth = Bth::new(Opcode::RC_READ_REQUEST, QPN_B, psn);
    bth.ack_req = true;
    let mut pkt = Packet::new(bth);
    pkt.ext.reth = Some(reth);
    let mut buf = vec![0u8; 256];
    let n = pkt.write(&mut buf).unwrap();
    let pkt = Packet::parse(&buf[..n]).unwrap();
    let now = p.now;
    p.b.qp.handle_packet(now, &pkt, &mut p.b.mem, &mut p.b.rq);
    let mut out = Vec::new();
    let mut tx = vec![0u8; 4200];
    while let Some(n) = p.b.qp.poll_transmit(now, &mut p.b.mem, &mut tx) {
        let k = Packet::parse(&tx[..n]).unwrap();
        out.push((k.bth.psn, k.bth.opcode, k.payload.to_vec()));
    }
    out
}

#[test]
fn responder_answers_chunk_rerequests_like_rxe() {
    // B receives a 20-packet READ, then chunks of it as duplicates: each is
    // answered from its PSN (MIDDLE … LAST, FIRST … at the first PSN), a
    // second chunk beyond the first is accepted too, and a request that is
    // not a subset of the original is dropped.
    let len = 20 * MTU;
    let (mut p, data, src, _dst) = setup(len as usize);
    let reth = |off: u32, n: u32| Reth {
        va: src.addr + u64::from(off * MTU),
        rkey: src.rkey,
        len: n,
    };
    let full = ask_b(&mut p, PSN, reth(0, len));
    assert_eq!(full.len(), 20);
    let check = |got: &[(u32, Opcode, Vec<u8>)], off: u32, n: u32, first: bool| {
        assert_eq!(got.len(), n as usize);
        for (j, (psn, op, payload)) in got.iter().enumerate() {
            let j = j as u32;
            assert_eq!(*psn, PSN + off + j);
            let want = match (first && j == 0, j + 1 == n) {
                (true, true) => Opcode::RC_READ_RESPONSE_ONLY,
                (true, false) => Opcode::RC_READ_RESPONSE_FIRST,
                (false, false) => Opcode::RC_READ_RESPONSE_MIDDLE,
                (false, true) => Opcode::RC_READ_RESPONSE_LAST,
            };
            assert_eq!(*op, want);
            let at = ((off + j) * MTU) as usize;
            assert!(payload[..] == data[at..at + MTU as usize]);
        }
    };
    check(&ask_b(&mut p, PSN + 5, reth(5, 4 * MTU)), 5, 4, false);
    check(&ask_b(&mut p, PSN + 9, reth(9, 8 * MTU)), 9, 8, false);
    check(&ask_b(&mut p, PSN + 17, reth(17, 3 * MTU)), 17, 3, false);
    check(&ask_b(&mut p, PSN, reth(0, 8 * MTU)), 0, 8, true);
    check(&ask_b(&mut p, PSN, reth(0, MTU)), 0, 1, true);
    assert_eq!(p.b.qp.counters().duplicate_request, 5);
    // Past the original's end: not a subset, dropped.
    assert!(ask_b(&mut p, PSN + 17, reth(17, 4 * MTU)).is_empty());
    assert_eq!(p.b.qp.counters().drops.invalid_duplicate, 1);
}

/// ACK timeout ≈ 1.07 s. Round trips of ~10 µs are measured first; then
/// the NAK of a gap is lost: how long the WRITE then takes to complete, with
/// A's probe floor at `floor`.
fn lost_nak_recovery(floor: Option<Duration>) -> Duration {
    let mut p = Pair::new(Config {
        timeout: 18,
        retry_cnt: 1,
        ..Config::default()
    });
    p.a.qp.set_probe_floor(floor);
    let data = pattern(77, 64 * 1024);
    let src = p.region(Side::A, 0x1000, data.clone(), Access::NONE);
    let dst = p.region(
        Side::B,
        0x40_0000,
        vec![0; data.len()],
        Access::REMOTE_WRITE,
    );
    let write = |wr_id: u64, off: u32, len: u32| {
        SendWr::new(
            wr_id,
            SendOp::Write(RemoteAddr {
                va: dst.addr + u64::from(off),
                rkey: dst.rkey,
            }),
            vec![src.sge(off, len)],
        )
    };
    // A first loss, recovered by its NAK: probing is enabled from now on.
    let step = Rc::new(Cell::new(0u8));
    let s = step.clone();
    p.set_filter(move |side, pkt| match (s.get(), side) {
        (0, Side::A) if pkt.bth.opcode == Opcode::RC_WRITE_MIDDLE => {
            s.set(1);
            true
        }
        (2, Side::A) if pkt.bth.opcode == Opcode::RC_WRITE_MIDDLE => {
            s.set(3);
            true
        }
        (3, Side::B) if pkt.ext.aeth.is_some_and(|a| a.syndrome == 0x60) => {
            s.set(4);
            true
        }
        _ => false,
    });
    p.a.post_send(write(1, 0, 4096));
    p.run_idle(Duration::from_secs(1));
    // A clean one: a round-trip sample.
    p.a.post_send(write(2, 0, 4096));
    p.run_idle(Duration::from_secs(1));
    assert_eq!(p.a.send_wcs().len(), 2);
    assert_eq!(step.get(), 1);
    // Now lose one request packet and the NAK it causes.
    step.set(2);
    let t0 = p.now;
    p.a.post_send(write(3, 4096, 60 * 1024));
    assert!(p.run_until(Duration::from_secs(5), |p| p.a.send_wcs().len() == 3));
    assert_eq!(step.get(), 4, "both losses happened");
    let took = p.now.saturating_duration_since(t0);
    let wcs = p.a.send_wcs();
    assert_eq!(wcs[2].status, WcStatus::Success);
    assert!(p.b.mem.bytes(dst.lkey) == &data[..]);
    let c = p.a.qp.counters();
    assert_eq!(c.retry_exceeded_err, 0);
    assert!(c.completer_retry_err >= 2);
    took
}

#[test]
fn probe_recovers_a_lost_nak_long_before_the_ack_timeout() {
    // The probe resends after a few round trips instead of the whole
    // timeout, and is not charged to the retry budget.
    let took = lost_nak_recovery(None);
    assert!(took < Duration::from_millis(5), "recovered after {took:?}");
}

#[test]
fn a_probe_floor_delays_the_probe_to_it_and_no_further() {
    // An engine on a busy host raises the floor above its scheduling
    // delays: the probe waits that long, still far from the ACK timeout.
    let floor = Duration::from_millis(3);
    let took = lost_nak_recovery(Some(floor));
    assert!(
        took >= floor && took < floor * 2,
        "recovered after {took:?}"
    );
}

#[test]
fn no_probe_on_a_clean_path() {
    // Without any loss signal a slow ACK is waited for: no retransmission.
    let mut p = Pair::new(Config {
        timeout: 18,
        faults: Faults {
            latency: Duration::from_micros(5),
            jitter: Duration::from_micros(400),
            ..Faults::default()
        },
        ..Config::default()
    });
    let src = p.region(Side::A, 0x1000, pattern(79, 64 * 1024), Access::NONE);
    let dst = p.region(Side::B, 0x40_0000, vec![0; 64 * 1024], Access::REMOTE_WRITE);
    for i in 0..50u32 {
        p.a.post_send(SendWr::new(
            u64::from(i),
            SendOp::Write(RemoteAddr {
                va: dst.addr + u64::from(i % 64) * 1024,
                rkey: dst.rkey,
            }),
            vec![src.sge((i % 64) * 1024, 1024)],
        ));
        p.run_idle(Duration::from_secs(1));
    }
    p.a.check_completions(true, true);
    assert_eq!(p.a.qp.counters().completer_retry_err, 0);
    assert_eq!(p.b.qp.counters().duplicate_request, 0);
}

#[test]
fn probes_do_not_shorten_the_retry_budget() {
    // The peer dies after round trips were measured: probes keep resending,
    // but the WR fails with RetryExcErr only after retry_cnt + 1 ACK timeouts.
    let mut p = Pair::new(Config {
        timeout: 14, // ≈ 67 ms
        retry_cnt: 2,
        ..Config::default()
    });
    let src = p.region(Side::A, 0x1000, pattern(78, 8192), Access::NONE);
    let dst = p.region(Side::B, 0x40_0000, vec![0; 8192], Access::REMOTE_WRITE);
    let write = |wr_id: u64| {
        SendWr::new(
            wr_id,
            SendOp::Write(RemoteAddr {
                va: dst.addr,
                rkey: dst.rkey,
            }),
            vec![src.sge(0, 8192)],
        )
    };
    p.a.post_send(write(1));
    p.run_idle(Duration::from_secs(1));
    p.b.dead = true;
    let t0 = p.now;
    p.a.post_send(write(2));
    assert!(p.run_until(Duration::from_secs(10), |p| p.a.send_wcs().len() == 2));
    let took = p.now.saturating_duration_since(t0);
    assert_eq!(p.a.send_wcs()[1].status, WcStatus::RetryExcErr);
    let ack_timeout = Duration::from_nanos(4096 << 14);
    assert!(took >= ack_timeout * 3, "failed after {took:?}");
    assert!(took < ack_timeout * 4, "failed after {took:?}");
    // Probes did go out in between (more retries than the 3 timeouts).
    assert!(p.a.qp.counters().completer_retry_err > 3);
}
