//! An engine thread with nothing to do — a NIC opened and not used (what
//! libfabric and MPI leave behind for every address they list), or queue
//! pairs connected and quiet — costs about one wake-up a second, works at
//! once when used, and releases its UDP port as soon as its last handle
//! goes. In its own binary because it counts the
//! wake-ups of every engine thread of the process.

mod common;

use common::*;
use ndverbs_engine::config::Progress;
use ndverbs_engine::nic::Nic;
use ndverbs_proto::rc::{PathMtu, SendOp, SendWr, WcStatus};
use ndverbs_wire::ip::ROCEV2_PORT;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Voluntary context switches (sleeps) of this process's engine threads so
/// far.
fn engine_sleeps() -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("ndv-engine") {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        total += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

/// Checks that this process's two engine threads wake about once each in
/// the next second (ten times each at the 100-ms guard, the longest sleep
/// of a thread whose NIC has a timer).
#[track_caller]
fn assert_sleeps_through_a_second(what: &str) {
    std::thread::sleep(Duration::from_millis(50));
    let before = engine_sleeps();
    std::thread::sleep(Duration::from_secs(1));
    let woke = engine_sleeps() - before;
    assert!(woke <= 6, "{woke} engine wake-ups in a second {what}");
}

/// How long until UDP port 4791 of `ip` can be bound again (at most `limit`).
fn port_free_after(ip: IpAddr, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if UdpSocket::bind(SocketAddr::new(ip, ROCEV2_PORT)).is_ok() {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

#[test]
fn an_unused_engine_thread_sleeps_and_a_dropped_nic_frees_its_port_at_once() {
    let (ia, ib) = ndverbs_testkit::addr::pair_v4();
    let (na, nb) = (
        Nic::open(ia, Progress::Thread).unwrap(),
        Nic::open(ib, Progress::Thread).unwrap(),
    );
    // A PD and memory need no engine step: still nothing to do.
    let _pd = na.alloc_pd().unwrap();
    assert_sleeps_through_a_second("with nothing to do");

    // Used, it works at once: creating the QPs woke the threads.
    let (a, b) = pair_on(na, nb, PathMtu::Mtu1024, 1 << 16);
    b.post_recv(1, 0, 4096);
    a.mr.write(0, b"awake").unwrap();
    a.post_send(SendWr::new(2, SendOp::Send, vec![a.sge(0, 5)]));
    let (wa, wb) = (wait_n(&a, 1), wait_n(&b, 1));
    assert_eq!(
        (wa[0].status, wb[0].status),
        (WcStatus::Success, WcStatus::Success)
    );
    assert_eq!(b.bytes(0, 5), b"awake");

    // Connected and quiet (every message acknowledged, no timer): asleep
    // again. A post wakes the thread as a packet does.
    assert_sleeps_through_a_second("of quiet QPs");
    b.post_recv(3, 0, 4096);
    a.post_send(SendWr::new(4, SendOp::Send, vec![a.sge(0, 5)]));
    let (wa, wb) = (wait_n(&a, 1), wait_n(&b, 1));
    assert_eq!((wa[0].wr_id, wb[0].wr_id), (4, 3));

    // Back to nothing (no QP), asleep again; then the last handle goes and
    // the port is free at once, not after the thread's long sleep.
    let Side {
        nic, qp, cq, mr, ..
    } = a;
    nic.destroy_qp(qp.qpn()).unwrap();
    drop((qp, cq, mr));
    std::thread::sleep(Duration::from_millis(100));
    drop(nic);
    let freed = port_free_after(ia, Duration::from_secs(3));
    assert!(
        freed.is_some_and(|d| d < Duration::from_millis(300)),
        "port 4791 of {ia} free after {freed:?}"
    );
    drop(b);
}
