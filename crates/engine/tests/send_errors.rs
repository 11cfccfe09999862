//! Sends the kernel refuses, and what the network says back, on real
//! sockets: a queue pair whose path MTU is larger than its interface carries
//! has its packets counted and dropped (`send_too_big`) without turning UDP
//! GSO off for the NIC's other destinations. (An address without a RoCE
//! endpoint answering ICMP port unreachable to a connect is in
//! `cm_loopback.rs`.)
//!
//! The MTU test needs root and `ip` (two network namespaces joined by a
//! veth pair of MTU 1500): without them it is skipped by the test kit's rule
//! (`SKIPPED`, or a failure under `CI=true`).

mod common;

use common::{connect, connection, Shape, Side};
use ndverbs_engine::config::Progress;
use ndverbs_engine::nic::Nic;
use ndverbs_proto::rc::{PathMtu, RcConnection, SendOp, SendWr, WcStatus};
use ndverbs_testkit::netns::Netns;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// The veth ends (they exist only inside the test's own namespaces).
const IP_A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 99, 0, 1));
const IP_B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 99, 0, 2));
/// A second NIC in A's namespace, reached over its `lo` (MTU 65536).
const IP_C: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

const REGION: usize = 1 << 20;

/// A NIC opened inside `ns` (its socket lives there).
fn nic_in(ns: &Netns, ip: IpAddr) -> Nic {
    ns.run(|| Nic::open(ip, Progress::Thread)).expect("NIC")
}

/// `a`'s next completion, within the limit.
fn next_wc(s: &Side) -> ndverbs_proto::rc::WorkCompletion {
    common::wait_n(s, 1).remove(0)
}

/// `ndv perf write_bw -m 4096` over a veth of MTU 1500: every full-size
/// packet of A's QP to B is too big for the path. They are counted and
/// dropped (the WRITE ends with retry exceeded, as the misconfiguration
/// deserves), and A keeps sending GSO runs to C, a destination whose path
/// carries them.
#[test]
fn a_run_too_big_for_its_path_leaves_gso_on_for_other_destinations() {
    let Some((na, nb)) = Netns::veth_pair(&format!("{IP_A}/24"), &format!("{IP_B}/24")) else {
        return;
    };
    let (a, b, c) = (nic_in(&na, IP_A), nic_in(&nb, IP_B), nic_in(&na, IP_C));
    let shape = Shape::deep(REGION);
    let (ab, ba) = (Side::on(a.clone(), shape), Side::on(b, shape));
    // Two retries (7 would mean for ever, as in rxe).
    ab.modify(
        RcConnection {
            retry_cnt: 2,
            ..connection(&ab, &ba, PathMtu::Mtu4096)
        }
        .steps(),
    );
    ba.modify(connection(&ba, &ab, PathMtu::Mtu4096).steps());
    let (ac, ca) = (Side::on(a.clone(), shape), Side::on(c, shape));
    connect(&ac, &ca, PathMtu::Mtu4096);
    let counters = a.counters();

    // 64 KiB to B: runs of 4096-byte segments, which a 1500-byte path
    // cannot carry.
    ab.post_send(SendWr::new(
        1,
        SendOp::Write(ba.remote(0)),
        vec![ab.sge(0, 65536)],
    ));
    let t0 = Instant::now();
    while counters.send_too_big.load(Relaxed) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "nothing refused");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Then 256 KiB to C while A's QP to B keeps retrying.
    let runs = counters.gso_runs.load(Relaxed);
    ac.post_send(SendWr::new(
        2,
        SendOp::Write(ca.remote(0)),
        vec![ac.sge(0, 262_144)],
    ));
    assert_eq!(next_wc(&ac).status, WcStatus::Success);
    assert_eq!(ca.bytes(0, 262_144), ac.bytes(0, 262_144));
    assert!(
        counters.gso_runs.load(Relaxed) > runs,
        "A's sends to C are still GSO runs"
    );
    // The QP to B gives up as its retry count says.
    assert_eq!(next_wc(&ab).status, WcStatus::RetryExcErr);
    let stats = a.stats();
    // Every packet of the first attempt and of both retries.
    assert!(stats.get("send_too_big") >= 3 * 16, "{stats:?}");
    assert_eq!(stats.get("send_errors"), 0, "{stats:?}");
}
