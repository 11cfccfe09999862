//! Two NICs joined by an in-memory link pair: the whole engine without a
//! socket. RC transfers (whose GSO runs arrive as coalesced datagrams, as
//! GRO delivers them), a manual-progress ping-pong that sleeps on the link's
//! readiness descriptor, a CM connect and disconnect with real MADs on QP1,
//! and the fault layer around a link that is not a socket.

mod common;

use common::cm::{self, accept_args, connect_args, done, outcome};
use common::*;
use ndverbs_engine::config::{CmTimers, NicConfig, Progress};
use ndverbs_engine::ep::{AcceptArgs, ConnectArgs, EpError};
use ndverbs_engine::link::faults::FaultConfig;
use ndverbs_engine::link::memory::MemoryLink;
use ndverbs_engine::nic::Nic;
use ndverbs_proto::cc::CcConfig;
use ndverbs_proto::rc::{PathMtu, QpState, SendOp, SendWr, WcOpcode, WcStatus};
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);
const KIB: usize = 1024;

/// Two NICs on a memory pair at 10.77.`net`.1 and .2. Fixed addresses: a
/// memory link binds nothing, so no other test can hold them.
fn nics(net: u8, config: NicConfig) -> (Nic, Nic) {
    let (ia, ib) = (
        IpAddr::from([10, 77, net, 1]),
        IpAddr::from([10, 77, net, 2]),
    );
    let (la, lb) = MemoryLink::pair(ia, ib).unwrap();
    let a = Nic::open_on(la, config.clone()).unwrap();
    let b = Nic::open_on(lb, config).unwrap();
    assert_eq!((a.local(), b.local()), (ia, ib));
    (a, b)
}

fn threaded() -> NicConfig {
    NicConfig {
        progress: Progress::Thread,
        ..NicConfig::default()
    }
}

fn manual() -> NicConfig {
    NicConfig {
        progress: Progress::Manual,
        ..NicConfig::default()
    }
}

/// WRITE of `len` bytes at `off` of a's region to the same place in b's.
fn write(a: &Side, b: &Side, id: u64, off: usize, len: usize) {
    let wr = SendWr::new(id, SendOp::Write(b.remote(off)), vec![a.sge(off, len)]);
    a.post_send(wr);
}

#[test]
fn rc_write_read_send_without_sockets() {
    let (a, b) = nics(1, threaded());
    let (a, b) = pair_on(a, b, PathMtu::Mtu4096, 4 * 1024 * KIB);
    // WRITE 1 MiB: 256 packets, leaving in GSO runs.
    a.mr.write(0, &pattern(1, 1024 * KIB)).unwrap();
    write(&a, &b, 1, 0, 1024 * KIB);
    let w = wait_n(&a, 1);
    assert_eq!((w[0].wr_id, w[0].status), (1, WcStatus::Success));
    assert_eq!(b.bytes(0, 1024 * KIB), pattern(1, 1024 * KIB));
    // READ 256 KiB back into A's second MiB.
    b.mr.write(1024 * KIB, &pattern(2, 256 * KIB)).unwrap();
    let read = SendOp::Read(b.remote(1024 * KIB));
    a.post_send(SendWr::new(2, read, vec![a.sge(1024 * KIB, 256 * KIB)]));
    let w = wait_n(&a, 1);
    assert_eq!((w[0].wr_id, w[0].status), (2, WcStatus::Success));
    assert_eq!(a.bytes(1024 * KIB, 256 * KIB), pattern(2, 256 * KIB));
    // SEND 64 KiB into a posted receive.
    b.post_recv(9, 2048 * KIB, 64 * KIB);
    a.mr.write(2048 * KIB, &pattern(3, 64 * KIB)).unwrap();
    a.post_send(SendWr::new(
        3,
        SendOp::Send,
        vec![a.sge(2048 * KIB, 64 * KIB)],
    ));
    let (wa, wb) = (wait_n(&a, 1), wait_n(&b, 1));
    assert_eq!(
        (wa[0].status, wb[0].status),
        (WcStatus::Success, WcStatus::Success)
    );
    assert_eq!(
        (wb[0].opcode, wb[0].byte_len),
        (WcOpcode::Recv, (64 * KIB) as u32)
    );
    assert_eq!(b.bytes(2048 * KIB, 64 * KIB), pattern(3, 64 * KIB));
    let c = a.nic.counters();
    assert!(c.gso_runs.load(Relaxed) > 0 && c.zero_copy_packets.load(Relaxed) > 0);
    assert_eq!(b.nic.counters().drop_bad_icrc.load(Relaxed), 0);
}

/// Below 4 KiB a payload the memory lends is copied into the transmit
/// buffer after all (one long copy per GSO run for the kernel instead of two
/// short ones per packet): at path MTU 1024 WRITE packets, READ responses
/// and a SEND whose packets straddle two SGEs all leave in GSO runs, none
/// zero-copy, signed whole, every byte where it belongs.
#[test]
fn payloads_below_4_kib_are_copied_into_their_runs() {
    let (a, b) = nics(8, threaded());
    let (a, b) = pair_on(a, b, PathMtu::Mtu1024, 1024 * KIB);
    a.mr.write(0, &pattern(1, 256 * KIB)).unwrap();
    write(&a, &b, 1, 0, 256 * KIB);
    let w = wait_n(&a, 1);
    assert_eq!((w[0].wr_id, w[0].status), (1, WcStatus::Success));
    assert_eq!(b.bytes(0, 256 * KIB), pattern(1, 256 * KIB));
    // READ 128 KiB: B's responses are copied the same way.
    b.mr.write(256 * KIB, &pattern(2, 128 * KIB)).unwrap();
    let read = SendOp::Read(b.remote(256 * KIB));
    a.post_send(SendWr::new(2, read, vec![a.sge(512 * KIB, 128 * KIB)]));
    let w = wait_n(&a, 1);
    assert_eq!((w[0].wr_id, w[0].status), (2, WcStatus::Success));
    assert_eq!(a.bytes(512 * KIB, 128 * KIB), pattern(2, 128 * KIB));
    // A SEND of 8000 bytes from two SGEs that meet inside its fourth
    // packet: that packet's payload is lent in two pieces.
    let (first, second) = (3500, 4500);
    let data = pattern(3, first + second);
    a.mr.write(768 * KIB, &data[..first]).unwrap();
    a.mr.write(896 * KIB, &data[first..]).unwrap();
    b.post_recv(9, 768 * KIB, 64 * KIB);
    let sgl = vec![a.sge(768 * KIB, first), a.sge(896 * KIB, second)];
    a.post_send(SendWr::new(3, SendOp::Send, sgl));
    let (wa, wb) = (wait_n(&a, 1), wait_n(&b, 1));
    assert_eq!(
        (wa[0].status, wb[0].status, wb[0].byte_len),
        (
            WcStatus::Success,
            WcStatus::Success,
            (first + second) as u32
        )
    );
    assert_eq!(b.bytes(768 * KIB, first + second), data);
    for (who, nic) in [("A", &a.nic), ("B", &b.nic)] {
        let c = nic.counters();
        assert_eq!(c.zero_copy_packets.load(Relaxed), 0, "{who} lent a payload");
        assert_eq!(c.drop_bad_icrc.load(Relaxed), 0, "{who} got a bad ICRC");
    }
    assert!(a.nic.counters().gso_runs.load(Relaxed) > 0);
    assert!(b.nic.counters().gso_runs.load(Relaxed) > 0);
}

/// A helper thread in `progress_wait_or_idle` on a NIC with no QP, no
/// endpoint and no timer sleeps its idle bound, not its busy one; a thread
/// that takes the engine (here to create an endpoint) or `Nic::wake` ends
/// that sleep at once. The idle bound is a minute, so a missed wake-up
/// fails the test instead of passing late.
#[test]
fn an_idle_manual_nic_sleeps_until_a_thread_takes_it() {
    let (a, _b) = nics(7, manual());
    let returns = std::sync::atomic::AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (busy, idle) = (Duration::from_millis(2), Duration::from_secs(60));
    let wait_for = |n: u64, what: &str| {
        let t0 = Instant::now();
        while returns.load(Relaxed) < n {
            assert!(t0.elapsed() < T, "the waiter did not return after {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    /// Stops the waiter however the test ends (it may sleep its minute).
    struct StopWaiter<'a>(&'a AtomicBool, &'a Nic);
    impl Drop for StopWaiter<'_> {
        fn drop(&mut self) {
            self.0.store(true, Relaxed);
            self.1.wake();
        }
    }
    std::thread::scope(|s| {
        let stopper = StopWaiter(&stop, &a);
        s.spawn(|| {
            while !stop.load(Relaxed) {
                a.progress_wait_or_idle(busy, idle).unwrap();
                returns.fetch_add(1, Relaxed);
            }
        });
        // Idle: in 300 ms a 2-ms wait would return about 150 times; the
        // first call may return at once (its step found nothing to sleep
        // on yet), then it sleeps.
        std::thread::sleep(Duration::from_millis(300));
        let idle_returns = returns.load(Relaxed);
        assert!(idle_returns <= 2, "{idle_returns} returns while idle");
        // An endpoint: the waiter wakes, and from then on waits its busy
        // bound (an endpoint may arm CM timers).
        let ep = a.create_ep().unwrap();
        wait_for(idle_returns + 10, "an endpoint was created");
        // Idle again: `wake` ends the long sleep.
        a.destroy_ep(ep).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let n = returns.load(Relaxed);
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            returns.load(Relaxed) <= n + 1,
            "it did not sleep long again"
        );
        stop.store(true, Relaxed);
        a.wake();
        wait_for(n + 1, "wake");
        drop(stopper);
    });
}

/// Manual progress, each side sleeping in `progress_wait` on the link's
/// descriptor between messages: a ping-pong of small SENDs.
#[test]
fn manual_progress_pingpong_without_sockets() {
    let (a, b) = nics(2, manual());
    let (a, b) = pair_on(a, b, PathMtu::Mtu1024, 64 * KIB);
    let rounds = 200;
    let t0 = Instant::now();
    let a_done = AtomicBool::new(false);
    std::thread::scope(|s| {
        // B echoes every message it receives.
        s.spawn(|| {
            b.post_recv(0, 0, 64);
            let mut echoed = 0;
            while echoed < rounds {
                assert!(t0.elapsed() < T, "B stalled at {echoed}");
                b.nic.progress_wait(Duration::from_millis(10)).unwrap();
                while let Some(w) = b.cq.poll_one() {
                    assert_eq!(w.status, WcStatus::Success, "{w:?}");
                    if w.opcode == WcOpcode::Recv {
                        b.post_recv(0, 0, 64);
                        b.post_send(SendWr::new(1, SendOp::Send, vec![b.sge(0, 8)]));
                        echoed += 1;
                    }
                }
            }
            // Until A has its last completions (our ACKs leave with steps).
            while t0.elapsed() < T && !a_done.load(Relaxed) {
                b.nic.progress_wait(Duration::from_millis(1)).unwrap();
            }
        });
        for i in 0..rounds {
            a.post_recv(i, 64, 64);
            a.mr.write(0, &i.to_le_bytes()).unwrap();
            a.post_send(SendWr::new(i, SendOp::Send, vec![a.sge(0, 8)]));
            let (mut sent, mut echo) = (false, false);
            while !(sent && echo) {
                assert!(t0.elapsed() < T, "A stalled at {i}");
                a.nic.progress_wait(Duration::from_millis(10)).unwrap();
                while let Some(w) = a.cq.poll_one() {
                    assert_eq!(w.status, WcStatus::Success, "{w:?}");
                    match w.opcode {
                        WcOpcode::Recv => echo = true,
                        _ => sent = true,
                    }
                }
            }
            assert_eq!(a.bytes(64, 8), i.to_le_bytes());
        }
        a_done.store(true, Relaxed);
    });
}

/// Short CM timers, so that a lost MAD is retried within the test.
const FAST: CmTimers = CmTimers {
    packet_life_time: 12,
    cm_response_timeout: 12,
    max_cm_retries: 3,
};

fn cm_sides(net: u8) -> (Side, Side) {
    let (a, b) = nics(
        net,
        NicConfig {
            cm_timers: FAST,
            ..threaded()
        },
    );
    let shape = Shape::queues(64, 2, 64, 256, 1 << 16);
    (cm_side(a, shape), cm_side(b, shape))
}

/// Connects `a` to `b` through the CM and sends one message; returns the
/// endpoints.
fn cm_connect(a: &Side, b: &Side, port: u16) -> (u32, u32) {
    let args = ConnectArgs {
        private_data: b"from a".to_vec(),
        ..connect_args(b.nic.local(), port)
    };
    let accept = AcceptArgs {
        private_data: b"from b".to_vec(),
        ..accept_args()
    };
    let c = cm::establish(a, b, cm::listen(b, port), args, accept);
    assert_eq!(&c.request.private_data[..6], b"from a");
    assert_eq!(&c.reply.private_data[..6], b"from b");
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Rts));
    b.post_recv(7, 0, 64);
    a.mr.write(0, b"ping").unwrap();
    a.post_send(SendWr::new(1, SendOp::Send, vec![a.sge(0, 4)]));
    let (wa, wb) = (wait_n(a, 1), wait_n(b, 1));
    assert_eq!(
        (wa[0].status, wb[0].status),
        (WcStatus::Success, WcStatus::Success)
    );
    (c.ea, c.eb)
}

#[test]
fn cm_connect_and_disconnect_without_sockets() {
    let (a, b) = cm_sides(3);
    let (ea, eb) = cm_connect(&a, &b, 7001);
    // B waits for the disconnect with a receive outstanding; A's DREQ
    // notifies it, B's Disconnect answers with the DREP that completes A's.
    let notify = b.nic.ep_notify_disconnect(eb).unwrap();
    b.post_recv(8, 0, 64);
    let da = a.nic.ep_disconnect(ea, a.qp.ident()).unwrap();
    done(notify, "B notified");
    done(
        b.nic.ep_disconnect(eb, b.qp.ident()).unwrap(),
        "B's disconnect",
    );
    done(da, "A's disconnect");
    let w = wait_n(&b, 1);
    assert_eq!((w[0].wr_id, w[0].status), (8, WcStatus::WrFlushErr));
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Err, QpState::Err));
    // A second disconnect is refused: the connection is over.
    assert!(a.nic.ep_disconnect(ea, a.qp.ident()).is_err());
    assert_eq!(a.nic.counters().drop_bad_icrc.load(Relaxed), 0);
}

/// The fault layer wraps any link: a lossy memory pair still carries a CM
/// handshake (MADs retried) and a bulk WRITE (packets retransmitted), and a
/// peer that hears nothing times a disconnect out.
#[test]
fn faults_wrap_a_memory_link_too() {
    let (a, b) = cm_sides(4);
    let lossy = FaultConfig::parse("loss=0.05,dup=0.02,reorder=0.02,corrupt=0.01,seed=9").unwrap();
    a.nic.set_faults(Some(lossy)).unwrap();
    b.nic
        .set_faults(Some(FaultConfig { seed: 10, ..lossy }))
        .unwrap();
    let (ea, _eb) = cm_connect(&a, &b, 7002);
    a.mr.write(0, &pattern(4, 1 << 16)).unwrap();
    write(&a, &b, 2, 0, 1 << 16);
    let w = wait_n(&a, 1);
    assert_eq!((w[0].wr_id, w[0].status), (2, WcStatus::Success));
    assert!(b.bytes(0, 1 << 16) == pattern(4, 1 << 16));
    let (fa, fb) = (
        a.nic.fault_counters().unwrap(),
        b.nic.fault_counters().unwrap(),
    );
    assert!(fa.packets > 0 && fb.packets > 0, "a {fa:?} b {fb:?}");
    // Everything B sends is now lost on the way to A: A's DREQ times out.
    a.nic
        .set_faults(Some(FaultConfig {
            loss: 1.0,
            ..FaultConfig::default()
        }))
        .unwrap();
    let r = outcome(a.nic.ep_disconnect(ea, a.qp.ident()).unwrap(), "A");
    assert_eq!(r, Err(EpError::Timeout));
}

/// Congestion control on: QPs to a peer share its controller's window as a
/// send budget. Bulk WRITEs from two QPs and a READ complete, the
/// controller took round-trip samples, and through 5 % loss it is told of
/// the retries.
// Run alone, in release, by scripts/test.sh: beside other tests on a small
// machine, scheduling delays read as queueing make the delay-based
// controller fall to a packet per round trip (BENCHMARKS.md), and the
// megabytes here then take longer than the time limit.
#[test]
#[ignore = "timing-sensitive: scripts/test.sh runs it alone in release"]
fn congestion_control_carries_bulk_traffic() {
    let config = NicConfig {
        congestion: Some(CcConfig::default()),
        ..threaded()
    };
    let (a, b) = nics(6, config);
    let (a, b) = pair_on(a, b, PathMtu::Mtu4096, 8 * 1024 * KIB);
    a.mr.write(0, &pattern(6, 4096 * KIB)).unwrap();
    write(&a, &b, 1, 0, 2048 * KIB);
    write(&a, &b, 2, 2048 * KIB, 2048 * KIB);
    let w = wait_n(&a, 2);
    assert!(w.iter().all(|w| w.status == WcStatus::Success), "{w:?}");
    assert_eq!(b.bytes(0, 4096 * KIB), pattern(6, 4096 * KIB));
    let read = SendOp::Read(b.remote(0));
    a.post_send(SendWr::new(3, read, vec![a.sge(4096 * KIB, 1024 * KIB)]));
    let w = wait_n(&a, 1);
    assert_eq!((w[0].wr_id, w[0].status), (3, WcStatus::Success));
    let c = a.nic.counters();
    assert!(c.cc_rtt_samples.load(Relaxed) > 0);
    // Lossy now (B loses what arrives): the controller hears of the
    // retries and the data still arrives.
    b.nic
        .set_faults(Some(FaultConfig {
            loss: 0.05,
            seed: 3,
            ..FaultConfig::default()
        }))
        .unwrap();
    b.mr.write(0, &[0; 64 * KIB]).unwrap();
    a.mr.write(0, &pattern(7, 2048 * KIB)).unwrap();
    write(&a, &b, 4, 0, 2048 * KIB);
    let w = wait_n(&a, 1);
    assert_eq!((w[0].wr_id, w[0].status), (4, WcStatus::Success));
    assert_eq!(b.bytes(0, 2048 * KIB), pattern(7, 2048 * KIB));
    assert!(c.cc_losses.load(Relaxed) > 0 && c.cc_loss_cuts.load(Relaxed) > 0);
}
