//! ECN and CNPs through a real kernel: two network namespaces joined by a
//! veth pair, nftables in B setting Congestion Experienced on 2 % of the
//! RoCE packets that arrive there (as a switch's ECN marking would; this
//! kernel has no RED or CoDel to do it by queue length).
//!
//! * With congestion control on at both ends, A's packets carry ECT(1); B
//!   answers marked packets with CNPs — never more than were marked, at most
//!   one per 50 µs per QP — and A's controller hears every one and cuts its
//!   window at most once per round trip. The transfer completes.
//! * A peer with congestion control off never marks its packets, and B
//!   never sends it a CNP, however many of its packets a router marks: that
//!   is what keeps rxe (which would hand a CNP to its completer) safe.
//!
//! Needs root, `ip` and `nft`: without them the tests are skipped by the test
//! kit's rule (`SKIPPED`, or a failure under `CI=true`).

mod common;

use common::bulk::Bulk;
use common::cm::{self, accept_args, connect_args};
use common::{cm_side, Shape, Side};
use ndverbs_engine::config::{NicConfig, Progress};
use ndverbs_engine::nic::Nic;
use ndverbs_proto::cc::CcConfig;
use ndverbs_testkit::netns::Netns;
use ndverbs_testkit::skip;
use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;

const CHUNK: usize = 1 << 20;
const SLOTS: usize = 4;
/// MiB written in each test.
const MIB: usize = 16;

/// The two ends of the veth pair, inside the test's own namespaces.
const IP_A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 99, 0, 1));
const IP_B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 99, 0, 2));

/// CE on 2 % of the RoCE packets arriving in a namespace, counted.
const MARK: &str = "table ip ndvce {\n chain input {\n  type filter hook input priority 0;\n  udp dport 4791 numgen random mod 100 < 2 ip ecn set ce counter\n }\n}\n";

/// Two namespaces joined by veth, B marking; `None` after the skip rule.
fn marking_veth() -> Option<(Netns, Netns)> {
    if !skip::require_root("ECN tests") || !skip::require_tools(&["nft"]) {
        return None;
    }
    let (a, b) = Netns::veth_pair(&format!("{IP_A}/24"), &format!("{IP_B}/24"))?;
    b.nft(MARK).unwrap_or_else(|e| panic!("{e}"));
    Some((a, b))
}

/// A side on a NIC opened inside `ns`, with congestion control if `cc`.
fn side_in(ns: &Netns, ip: IpAddr, cc: bool) -> Side {
    let nic = ns.run(|| {
        let config = NicConfig {
            progress: Progress::Thread,
            congestion: cc.then(CcConfig::default),
            ..NicConfig::default()
        };
        Nic::open_with(ip, config).expect("NIC")
    });
    cm_side(nic, Shape::queues(256, 1, 0, 1024, 2 * SLOTS * CHUNK))
}

/// Writes [`MIB`] from `a` to `b` over a CM connection on `port`; the
/// packets B's nft marked.
fn write_through(a: &Side, b: &Side, ns_b: &Netns, port: u16) -> u64 {
    let l = cm::listen(b, port);
    cm::establish(a, b, l, connect_args(IP_B, port), accept_args());
    Bulk::new(a, b, CHUNK, SLOTS).write(MIB, |_| {});
    ns_b.nft_packets("ip ndvce")
}

#[test]
fn marked_packets_of_an_ndverbs_peer_are_answered_with_cnps() {
    let Some((ns_a, ns_b)) = marking_veth() else {
        return;
    };
    let a = side_in(&ns_a, IP_A, true);
    let b = side_in(&ns_b, IP_B, true);
    let marked = write_through(&a, &b, &ns_b, 7310);
    let (ca, cb) = (a.nic.counters(), b.nic.counters());
    let sent = cb.cc_cnps_sent.load(Relaxed);
    let received = ca.cc_cnps_received.load(Relaxed);
    let cuts = ca.cc_cnp_cuts.load(Relaxed);
    eprintln!(
        "{MIB} MiB: {marked} packets marked CE, {sent} CNPs sent, {received} received, {cuts} cuts"
    );
    assert!(marked > 0, "nft marked nothing");
    assert!(sent > 0, "no CNP for {marked} marked packets");
    // One CNP per marked packet at most (fewer: one per 50 µs per QP, and
    // the marked ACKs of the reverse path are not answered).
    assert!(sent <= marked, "{sent} CNPs for {marked} marks");
    // Every CNP reaches A's controller (veth loses nothing here; B marks
    // only what arrives at B) …
    assert_eq!(received, sent);
    // … which cuts at most once per round trip: never more often than CNPs
    // arrive, and at least once.
    assert!(
        (1..=received).contains(&cuts),
        "{cuts} cuts for {received} CNPs"
    );
    // A's QP counts each CNP as a packet of another transport, nothing else.
    assert_eq!(a.nic.stats().get("qp_drop_not_rc"), received);
}

#[test]
fn a_peer_that_never_sets_ect_never_gets_a_cnp() {
    let Some((ns_a, ns_b)) = marking_veth() else {
        return;
    };
    // A as rxe (or ndverbs without congestion control): Not-ECT.
    let a = side_in(&ns_a, IP_A, false);
    let b = side_in(&ns_b, IP_B, true);
    let marked = write_through(&a, &b, &ns_b, 7311);
    assert!(marked > 0, "nft marked nothing");
    assert_eq!(b.nic.counters().cc_cnps_sent.load(Relaxed), 0);
    assert_eq!(a.nic.stats().get("qp_drop_not_rc"), 0);
}
