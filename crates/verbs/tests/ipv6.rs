//! RoCEv2 over IPv6 end to end through the verbs API: two devices on
//! unique-local addresses (added to `lo` of a network namespace the test
//! creates), rdma_cm connect/accept, SEND, WRITE, READ and a graceful
//! disconnect on both sides.
//!
//! Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) for the namespace: without it
//! the test prints `SKIPPED` and passes, except under `CI=true`, where it fails.

use ndverbs_testkit::netns::Netns;
use ndverbs_testkit::verbs::{self as kit, wc_ok, PairConfig, RcParams, Side};
use ndverbs_testkit::{addr, verbs::WC_LIMIT as T};
use ndverbs_verbs::*;
use std::net::IpAddr;

/// A device on `addr` with a PD, CQ, region and a QP in INIT (what a
/// connection through the CM starts from).
fn side(addr: IpAddr) -> Side {
    let s = Side::open(
        addr,
        &PairConfig {
            cq_depth: 64,
            region: 1 << 16,
            ..PairConfig::default()
        },
    );
    let (a, m) = RcParams::default().init();
    s.qp.modify(&a, m).unwrap();
    s
}

/// What `p` completes with, which must be a success within the time limit.
#[track_caller]
fn done<R>(p: Pending<R>, what: &str) -> R {
    match p.wait_timeout(T) {
        Some(r) => r.unwrap_or_else(|e| panic!("{what}: {e}")),
        None => panic!("no {what} in time"),
    }
}

/// Connect, SEND, WRITE, READ, disconnect — with `a` connecting to `b`.
fn cycle(a_addr: IpAddr, b_addr: IpAddr, port: u16) {
    let (a, b) = (side(a_addr), side(b_addr));
    assert_eq!(a.dev.gid(), ndverbs_wire::cma::gid_of(a_addr));
    let listener = Endpoint::new(&b.dev).unwrap();
    listener.listen(port, 4).unwrap();
    let eb = Endpoint::new(&b.dev).unwrap();
    let req = listener.get_request(&eb).unwrap();
    let ea = Endpoint::new(&a.dev).unwrap();
    let conn = ea
        .connect(
            &a.qp,
            ConnectArgs {
                path_mtu: PathMtu::Mtu4096,
                private_data: b"over IPv6".to_vec(),
                ..kit::connect_args(b_addr, port)
            },
        )
        .unwrap();
    let info = done(req, "connection request");
    assert_eq!(info.peer, a_addr);
    assert_eq!(info.local, b_addr);
    assert_eq!(info.peer_port, 40001);
    assert_eq!(&info.private_data[..9], b"over IPv6");
    let acc = eb
        .accept(
            &b.qp,
            AcceptArgs {
                responder_resources: 4,
                initiator_depth: 4,
                rnr_retry_count: 7,
                private_data: b"welcome".to_vec(),
            },
        )
        .unwrap();
    let ci = done(conn, "REP");
    assert_eq!(&ci.private_data[..7], b"welcome");
    done(ea.complete_connect(&a.qp).unwrap(), "RTU");
    done(acc, "accept");
    assert_eq!(a.qp.query().unwrap().av.dgid, b.dev.gid().octets());

    // SEND of more than one 4096-byte MTU.
    let n = 10_000;
    let data: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
    a.mr.write(0, &data).unwrap();
    b.qp.post_recv(RecvWr::new(1, vec![b.mr.sge(0, 1 << 15)]))
        .unwrap();
    a.qp.post_send(SendWr::new(2, SendOp::Send, vec![a.mr.sge(0, n as u32)]))
        .unwrap();
    assert_eq!(wc_ok(&b.cq).byte_len, n as u32);
    wc_ok(&a.cq);
    assert_eq!(b.mr.to_vec(0, n).unwrap(), data);

    // WRITE a's bytes into b at 32 KiB.
    let remote = RemoteAddr {
        va: b.mr.addr() + (1 << 15),
        rkey: b.mr.rkey(),
    };
    a.qp.post_send(SendWr::new(
        3,
        SendOp::Write(remote),
        vec![a.mr.sge(0, n as u32)],
    ))
    .unwrap();
    wc_ok(&a.cq);
    assert_eq!(b.mr.to_vec(1 << 15, n).unwrap(), data);

    // READ them back into a at 32 KiB.
    a.qp.post_send(SendWr::new(
        4,
        SendOp::Read(remote),
        vec![a.mr.sge(1 << 15, n as u32)],
    ))
    .unwrap();
    wc_ok(&a.cq);
    assert_eq!(a.mr.to_vec(1 << 15, n).unwrap(), data);

    // Graceful disconnect: b waits for the DREQ, then answers it with its own
    // Disconnect (the DREP), which completes a's.
    let notified = eb.notify_disconnect().unwrap();
    let da = ea.disconnect(&a.qp).unwrap();
    done(notified, "DREQ");
    done(eb.disconnect(&b.qp).unwrap(), "DREP sent");
    done(da, "DREP received");
    assert_eq!(a.qp.state(), QpState::Err);
}

/// Runs `cycle` inside a fresh namespace whose `lo` has `addrs` (skipped
/// without namespaces, failing under `CI=true`).
fn in_netns(addrs: &[IpAddr], a: IpAddr, b: IpAddr, port: u16) {
    if let Some(ns) = Netns::with_lo_addrs(addrs) {
        ns.run(|| cycle(a, b, port));
    }
}

#[test]
fn connect_send_write_read_disconnect_over_ipv6() {
    let (a, b) = addr::pair_v6();
    in_netns(&[a, b], a, b, 7301);
}

#[test]
fn loopback_ipv6_and_another_address() {
    let (other, _) = addr::pair_v6();
    in_netns(&[other], "::1".parse().unwrap(), other, 7302);
}

/// The same cycle over IPv4, as the reference.
#[test]
fn same_cycle_over_ipv4() {
    let (a, b) = addr::pair_v4();
    cycle(a, b, 7303);
}

/// Addresses whose 13th byte looks like an IPv4 version nibble (0x4_): the GRH
/// QP1 hands to the CM must still be read as IPv6. (Fixed addresses: their
/// shape is the test; the namespace is the test's own.)
#[test]
fn ipv6_addresses_that_look_like_ipv4_in_the_grh() {
    let (a, b) = (
        "fd00::4a00:1".parse().unwrap(),
        "fd00::4500:2".parse().unwrap(),
    );
    in_netns(&[a, b], a, b, 7304);
}
