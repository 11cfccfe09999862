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

use common::bulk::Bulk;
use common::pair;
use ndverbs_engine::config::Progress;
use ndverbs_engine::counters::NicCounters;
use ndverbs_engine::link::faults::FaultConfig;
use ndverbs_engine::nic::Nic;
use ndverbs_proto::rc::PathMtu;
use ndverbs_testkit::skip;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

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

#[test]
fn write_read_send_through_ten_percent_loss() {
    let mib = volume_mib();
    let (a, b) = pair(Progress::Thread, PathMtu::Mtu4096, SLOTS * CHUNK * 2);
    a.nic.set_faults(Some(faults(1))).unwrap();
    b.nic.set_faults(Some(faults(2))).unwrap();
    let [t_write, t_read, t_send] = Bulk::new(&a, &b, CHUNK, SLOTS).all(mib, |_| {});

    let fa = a.nic.fault_counters().unwrap();
    let fb = b.nic.fault_counters().unwrap();
    let bad_icrc =
        a.nic.counters().drop_bad_icrc.load(Relaxed) + b.nic.counters().drop_bad_icrc.load(Relaxed);
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
    // A sent the WRITE and SEND payloads, B the READ responses: both in GSO
    // runs, the payloads straight from registered memory.
    if gso_or_skip(&a.nic) {
        assert_batched("A", a.nic.counters());
        assert_zero_copy("A", a.nic.counters());
        assert_batched("B", b.nic.counters());
        assert_zero_copy("B", b.nic.counters());
    }
}

/// Whether the link sends GSO runs; otherwise the send-path checks of the
/// running test are skipped (a kernel without UDP GSO).
fn gso_or_skip(nic: &Nic) -> bool {
    if !nic.gso() {
        skip::skip("send-path checks: no UDP GSO in this kernel");
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
    let (a, b) = pair(Progress::Thread, PathMtu::Mtu4096, n * CHUNK);
    a.nic.set_faults(Some(faults(3))).unwrap();
    b.nic.set_faults(Some(faults(4))).unwrap();
    Bulk::new(&a, &b, CHUNK, n).write(n, |_| {});
    // B received the data, A the ACKs: both through the fault layer.
    let (fa, fb) = (
        a.nic.fault_counters().unwrap(),
        b.nic.fault_counters().unwrap(),
    );
    assert!(fb.packets >= (n * CHUNK / 4096) as u64, "{fb:?}");
    assert!(fb.lost > 0 && fa.packets > 0, "a {fa:?} b {fb:?}");
    if gso_or_skip(&a.nic) {
        assert_batched("A", a.nic.counters());
        assert_zero_copy("A", a.nic.counters());
    }
}
