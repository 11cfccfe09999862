//! Bulk WRITE, READ and SEND across a lossy network: each NIC's fault layer
//! loses 10 % of the packets that arrive at it and duplicates, reorders,
//! delays and corrupts others. Every byte is verified and every work request
//! must complete exactly once, successfully.
//!
//! Faults are injected where packets arrive, so the senders stay on the
//! production path — GSO runs, `sendmmsg`, payloads straight from registered
//! memory — and both tests here check that they did: a fault layer that
//! pushed senders back to one packet per system call would fail them.
//!
//! Volume: `NDV_LOSSY_MIB` MiB per operation (default 16 here; the README's
//! test command runs this file again in release mode with 1024 = 1 GiB each).

mod common;

use common::*;
use ndverbs_engine::config::Progress;
use ndverbs_engine::counters::NicCounters;
use ndverbs_engine::link::faults::FaultConfig;
use ndverbs_engine::nic::sge;
use ndverbs_engine::nic::Nic;
use ndverbs_proto::rc::{PathMtu, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

const CHUNK: usize = 1 << 20;
const SLOTS: usize = 16;

fn volume_mib() -> usize {
    std::env::var("NDV_LOSSY_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16)
}

fn faults(seed: u64) -> FaultConfig {
    FaultConfig {
        loss: 0.10,
        dup: 0.02,
        reorder: 0.03,
        delay: 0.02,
        delay_time: Duration::from_micros(200),
        corrupt: 0.001,
        seed,
    }
}

/// Runs `total` chunk operations with up to SLOTS in flight; `issue(i)` posts
/// chunk `i`, `check(i, wc)` verifies it. Returns completions per wr_id.
fn pump(s: &Side, total: usize, mut issue: impl FnMut(usize), mut check: impl FnMut(usize)) {
    let mut done: HashMap<u64, u32> = HashMap::new();
    let mut next = 0usize;
    let mut outstanding = 0usize;
    let t0 = Instant::now();
    while done.len() < total {
        while outstanding < SLOTS && next < total {
            issue(next);
            next += 1;
            outstanding += 1;
        }
        match s.cq.poll_one() {
            Some(w) => {
                assert_eq!(w.status, WcStatus::Success, "{w:?}");
                *done.entry(w.wr_id).or_default() += 1;
                outstanding -= 1;
                check(w.wr_id as usize);
            }
            None => {
                assert!(
                    t0.elapsed() < Duration::from_secs(600),
                    "stalled at {} of {total}",
                    done.len()
                );
                std::thread::yield_now();
            }
        }
    }
    assert!(
        done.values().all(|&n| n == 1),
        "a work request completed twice"
    );
    assert!(s.cq.poll_one().is_none(), "extra completions");
}

#[test]
fn write_read_send_through_ten_percent_loss() {
    let mib = volume_mib();
    let (a, b) = pair(30, Progress::Thread, PathMtu::Mtu4096, SLOTS * CHUNK * 2);
    a.nic.set_faults(Some(faults(1))).unwrap();
    b.nic.set_faults(Some(faults(2))).unwrap();
    let t0 = Instant::now();

    // WRITE: a's slot i → b's slot i; verified at b.
    pump(
        &a,
        mib,
        |i| {
            let slot = i % SLOTS;
            a.mr.write(slot * CHUNK, &pattern(i as u64, CHUNK)).unwrap();
            let remote = RemoteAddr {
                va: b.mr.addr() + (slot * CHUNK) as u64,
                rkey: b.mr.rkey(),
            };
            a.nic
                .post_send(
                    &a.qp,
                    SendWr::new(
                        i as u64,
                        SendOp::Write(remote),
                        vec![sge(&a.mr, slot * CHUNK, CHUNK as u32)],
                    ),
                )
                .unwrap();
        },
        |i| {
            let mut got = vec![0u8; CHUNK];
            b.mr.read((i % SLOTS) * CHUNK, &mut got).unwrap();
            assert!(got == pattern(i as u64, CHUNK), "WRITE chunk {i} corrupted");
        },
    );
    let t_write = t0.elapsed();

    // READ: b's slot i (filled with a fresh pattern) → a's second half.
    let t1 = Instant::now();
    pump(
        &a,
        mib,
        |i| {
            let slot = i % SLOTS;
            b.mr.write(slot * CHUNK, &pattern(1_000_000 + i as u64, CHUNK))
                .unwrap();
            let remote = RemoteAddr {
                va: b.mr.addr() + (slot * CHUNK) as u64,
                rkey: b.mr.rkey(),
            };
            let local = sge(&a.mr, (SLOTS + slot) * CHUNK, CHUNK as u32);
            a.nic
                .post_send(
                    &a.qp,
                    SendWr::new(i as u64, SendOp::Read(remote), vec![local]),
                )
                .unwrap();
        },
        |i| {
            let mut got = vec![0u8; CHUNK];
            a.mr.read((SLOTS + i % SLOTS) * CHUNK, &mut got).unwrap();
            assert!(
                got == pattern(1_000_000 + i as u64, CHUNK),
                "READ chunk {i} corrupted"
            );
        },
    );
    let t_read = t1.elapsed();

    // SEND: a's slot → b's receive buffers (second half of b's region).
    let t2 = Instant::now();
    for slot in 0..SLOTS {
        b.nic
            .post_recv(
                &b.qp,
                RecvWr::new(
                    slot as u64,
                    vec![sge(&b.mr, (SLOTS + slot) * CHUNK, CHUNK as u32)],
                ),
            )
            .unwrap();
    }
    let mut recvd: HashMap<u64, u32> = HashMap::new();
    let mut expected_slot_seed: HashMap<usize, u64> = HashMap::new();
    pump(
        &a,
        mib,
        |i| {
            let slot = i % SLOTS;
            a.mr.write(slot * CHUNK, &pattern(2_000_000 + i as u64, CHUNK))
                .unwrap();
            a.nic
                .post_send(
                    &a.qp,
                    SendWr::new(
                        i as u64,
                        SendOp::Send,
                        vec![sge(&a.mr, slot * CHUNK, CHUNK as u32)],
                    ),
                )
                .unwrap();
        },
        |_| {
            // Drain b's receive completions as they come, verify and re-post.
            while let Some(w) = b.cq.poll_one() {
                assert_eq!(
                    (w.status, w.opcode, w.byte_len as usize),
                    (WcStatus::Success, WcOpcode::Recv, CHUNK),
                    "{w:?}"
                );
                *recvd.entry(w.wr_id).or_default() += 1;
                let n = recvd.values().sum::<u32>() as usize - 1; // message number, in order
                let slot = w.wr_id as usize % SLOTS;
                let mut got = vec![0u8; CHUNK];
                b.mr.read((SLOTS + slot) * CHUNK, &mut got).unwrap();
                assert!(
                    got == pattern(2_000_000 + n as u64, CHUNK),
                    "SEND message {n} corrupted"
                );
                expected_slot_seed.insert(slot, n as u64);
                let next_id = w.wr_id + SLOTS as u64;
                b.nic
                    .post_recv(
                        &b.qp,
                        RecvWr::new(
                            next_id,
                            vec![sge(&b.mr, (SLOTS + slot) * CHUNK, CHUNK as u32)],
                        ),
                    )
                    .unwrap();
            }
        },
    );
    // The last receive completions may trail the last send completion.
    let t = Instant::now();
    while (recvd.len()) < mib && t.elapsed() < Duration::from_secs(30) {
        if let Some(w) = b.cq.poll_one() {
            assert_eq!(w.status, WcStatus::Success);
            *recvd.entry(w.wr_id).or_default() += 1;
        }
    }
    assert_eq!(recvd.len(), mib, "receives completed");
    assert!(recvd.values().all(|&n| n == 1));
    let t_send = t2.elapsed();

    let fa = a.nic.fault_counters().unwrap();
    let fb = b.nic.fault_counters().unwrap();
    let bad_icrc = a
        .nic
        .counters()
        .drop_bad_icrc
        .load(std::sync::atomic::Ordering::Relaxed)
        + b.nic
            .counters()
            .drop_bad_icrc
            .load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "{mib} MiB each: WRITE {:.1}s, READ {:.1}s, SEND {:.1}s; faults a {fa:?}, b {fb:?}; corrupt packets dropped {bad_icrc}",
        t_write.as_secs_f64(),
        t_read.as_secs_f64(),
        t_send.as_secs_f64()
    );
    assert!(fa.lost > 0 && fb.lost > 0 && fa.duplicated > 0 && fa.reordered > 0);
    assert!(
        bad_icrc > 0,
        "corrupted packets must be dropped by the ICRC check"
    );
    // A sent the WRITE and SEND payloads (from registered memory), B the
    // READ responses (copied by the responder): both in GSO runs.
    if gso_or_skip(&a.nic, "write_read_send_through_ten_percent_loss") {
        assert_batched("A", a.nic.counters());
        assert_zero_copy("A", a.nic.counters());
        assert_batched("B", b.nic.counters());
    }
}

/// Whether the link sends GSO runs; prints SKIPPED for the send-path checks
/// of `test` if not (a kernel without UDP GSO).
fn gso_or_skip(nic: &Nic, test: &str) -> bool {
    if !nic.gso() {
        eprintln!("SKIPPED: send-path checks of {test} — no UDP GSO in this kernel");
    }
    nic.gso()
}

/// The NIC sent its bulk data as production does: several packets per link
/// call, in multi-packet GSO runs.
fn assert_batched(who: &str, c: &NicCounters) {
    let (calls, sent) = (c.send_calls.load(Relaxed), c.sent_datagrams.load(Relaxed));
    let runs = c.gso_runs.load(Relaxed);
    eprintln!("{who}: {sent} packets in {calls} link calls, {runs} GSO runs");
    assert!(runs > 0, "{who} sent no multi-packet GSO run");
    assert!(
        sent >= 4 * calls,
        "{who} sent {sent} packets in {calls} calls: not batched"
    );
}

/// The NIC sent payloads straight from registered memory.
fn assert_zero_copy(who: &str, c: &NicCounters) {
    let lent = c.zero_copy_packets.load(Relaxed);
    eprintln!("{who}: {lent} packets zero-copy");
    assert!(lent > 0, "{who} sent no payload zero-copy");
}

/// Faults on both sides do not push senders off the production path: a bulk
/// WRITE through loss, duplication, reordering, delay and corruption still
/// leaves in multi-packet GSO runs with zero-copy payloads, and the faults
/// were applied to what arrived.
#[test]
fn faults_leave_senders_on_the_gso_zero_copy_path() {
    let n = 8;
    let (a, b) = pair(31, Progress::Thread, PathMtu::Mtu4096, n * CHUNK);
    a.nic.set_faults(Some(faults(3))).unwrap();
    b.nic.set_faults(Some(faults(4))).unwrap();
    pump(
        &a,
        n,
        |i| {
            a.mr.write(i * CHUNK, &pattern(i as u64, CHUNK)).unwrap();
            let remote = RemoteAddr {
                va: b.mr.addr() + (i * CHUNK) as u64,
                rkey: b.mr.rkey(),
            };
            let wr = SendWr::new(
                i as u64,
                SendOp::Write(remote),
                vec![sge(&a.mr, i * CHUNK, CHUNK as u32)],
            );
            a.nic.post_send(&a.qp, wr).unwrap();
        },
        |i| {
            let mut got = vec![0u8; CHUNK];
            b.mr.read(i * CHUNK, &mut got).unwrap();
            assert!(got == pattern(i as u64, CHUNK), "WRITE chunk {i} corrupted");
        },
    );
    // B received the data, A the ACKs: both through the fault layer.
    let (fa, fb) = (
        a.nic.fault_counters().unwrap(),
        b.nic.fault_counters().unwrap(),
    );
    assert!(fb.packets >= (n * CHUNK / 4096) as u64, "{fb:?}");
    assert!(fb.lost > 0 && fa.packets > 0, "a {fa:?} b {fb:?}");
    if gso_or_skip(&a.nic, "faults_leave_senders_on_the_gso_zero_copy_path") {
        assert_batched("A", a.nic.counters());
        assert_zero_copy("A", a.nic.counters());
    }
}
