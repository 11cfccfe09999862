//! Unreliable datagram queue pairs between two devices on loopback: a
//! ping-pong that answers each datagram from what its completion and GRH
//! area say (as `ibv_ud_pingpong` does), the GRH bytes themselves (IPv4
//! and, in a namespace of this suite's own, IPv6), the Q_Key check, the
//! one-packet limit, the UD ladder's refusals, and UD and RC QPs sharing one
//! CQ.

use ndverbs_testkit::addr;
use ndverbs_verbs::*;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);
const QKEY: u32 = 0x1111_1111;

struct Side {
    dev: Device,
    pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn side(addr: IpAddr) -> Side {
    let dev = Device::open(addr).expect("open");
    let pd = dev.alloc_pd().expect("pd");
    let cq = dev.create_cq(64).expect("cq");
    let mr = pd.reg_mr(1 << 16, Access::LOCAL_WRITE).expect("mr");
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Ud,
            ..QpInitAttr::new(&cq, &cq)
        })
        .expect("create UD QP");
    qp.ud_ready(QKEY, 0x100).expect("RESET -> RTS");
    Side {
        dev,
        pd,
        cq,
        mr,
        qp,
    }
}

fn wc(cq: &Cq) -> WorkCompletion {
    cq.wait_one(T).expect("wait").expect("a completion in time")
}

/// The IPv4 header in a GRH area (after its 20 zero bytes).
fn grh_v4(g: &[u8]) -> (Ipv4Addr, Ipv4Addr, u16, u8) {
    assert_eq!(g[..20], [0; 20], "IPv4: the first 20 bytes are zero");
    assert_eq!(g[20], 0x45, "version 4, 20-byte header");
    let total = u16::from_be_bytes([g[22], g[23]]);
    let src = Ipv4Addr::new(g[32], g[33], g[34], g[35]);
    let dst = Ipv4Addr::new(g[36], g[37], g[38], g[39]);
    (src, dst, total, g[29])
}

#[test]
fn ping_pong_answers_each_datagram_from_its_completion_and_grh() {
    let (a_addr, b_addr) = addr::pair_v4();
    let (a, b) = (side(a_addr), side(b_addr));
    let to_b = UdDest::new(b_addr, b.qp.qpn(), QKEY);
    for i in 0..50u64 {
        let len = 1 + (i as usize * 37) % 4000;
        let msg: Vec<u8> = (0..len).map(|k| (k as u64 * 7 + i) as u8).collect();
        b.qp.post_recv(RecvWr::new(100 + i, vec![b.mr.sge(0, 8192)]))
            .expect("B post_recv");
        a.qp.post_recv(RecvWr::new(200 + i, vec![a.mr.sge(0, 8192)]))
            .expect("A post_recv");
        a.mr.write(16384, &msg).expect("write");
        a.qp.post_send_ud(UdSendWr::new(i, to_b, vec![a.mr.sge(16384, len as u32)]))
            .expect("A send");
        let sent = wc(&a.cq);
        assert_eq!(
            (sent.wr_id, sent.status, sent.queue, sent.byte_len),
            (i, WcStatus::Success, WcQueue::Send, len as u32)
        );
        let r = wc(&b.cq);
        assert_eq!(
            (r.wr_id, r.status, r.opcode),
            (100 + i, WcStatus::Success, WcOpcode::Recv)
        );
        assert_eq!((r.src_qp, r.qpn, r.grh), (a.qp.qpn(), b.qp.qpn(), true));
        assert_eq!(
            r.byte_len as usize,
            GRH_LEN + len,
            "byte_len counts the GRH area"
        );
        let got = b.mr.to_vec(0, GRH_LEN + len).expect("read");
        let (src, dst, total, proto) = grh_v4(&got[..GRH_LEN]);
        assert_eq!((IpAddr::V4(src), IpAddr::V4(dst)), (a_addr, b_addr));
        // IP + UDP + BTH + DETH + payload + pad + ICRC.
        let pad = (4 - len % 4) % 4;
        assert_eq!(usize::from(total), 20 + 8 + 12 + 8 + len + pad + 4);
        assert_eq!(proto, 17, "UDP");
        assert_eq!(&got[GRH_LEN..], &msg[..], "payload after the GRH area");
        // B answers whoever sent it, as ibv_ud_pingpong does: the address
        // from the GRH, the QP from the completion, its own Q_Key (top bit).
        let back = UdDest::new(IpAddr::V4(src), r.src_qp, 0x8000_0000);
        b.mr.write(16384, b"pong").expect("write");
        b.qp.post_send_ud(UdSendWr::new(i, back, vec![b.mr.sge(16384, 4)]))
            .expect("B send");
        assert_eq!(wc(&b.cq).queue, WcQueue::Send);
        let r = wc(&a.cq);
        assert_eq!(
            (r.wr_id, r.status, r.src_qp, r.byte_len),
            (200 + i, WcStatus::Success, b.qp.qpn(), GRH_LEN as u32 + 4)
        );
        assert_eq!(a.mr.to_vec(GRH_LEN, 4).expect("read"), b"pong");
    }
    let (ca, cb) = (a.qp.counters().expect("A"), b.qp.counters().expect("B"));
    assert_eq!((ca.sent_pkts, ca.rcvd_pkts), (50, 50));
    assert_eq!((cb.sent_pkts, cb.rcvd_pkts), (50, 50));
    assert_eq!(a.qp.query().expect("query").sq_psn, 0x100 + 50);
}

#[test]
fn a_wrong_qkey_is_dropped_and_counted_and_leaves_the_receive_posted() {
    let (a_addr, b_addr) = addr::pair_v4();
    let (a, b) = (side(a_addr), side(b_addr));
    b.qp.post_recv(RecvWr::new(1, vec![b.mr.sge(0, 4096)]))
        .expect("post_recv");
    a.mr.write(0, b"wrong").expect("write");
    let wrong = UdDest::new(b_addr, b.qp.qpn(), QKEY ^ 1);
    a.qp.post_send_ud(UdSendWr::new(1, wrong, vec![a.mr.sge(0, 5)]))
        .expect("send");
    // The send completes: UD does not know what became of it.
    assert_eq!(wc(&a.cq).status, WcStatus::Success);
    // The drop is counted once B's engine has seen the packet.
    let t0 = std::time::Instant::now();
    while b.qp.counters().expect("counters").drops.bad_qkey == 0 {
        assert!(b.cq.poll_one().is_none(), "a wrong Q_Key must not complete");
        assert!(t0.elapsed() < T, "the datagram never arrived");
        std::thread::sleep(Duration::from_millis(1));
    }
    // A's own Q_Key (top bit set) is QKEY: that one is taken.
    a.mr.write(0, b"right").expect("write");
    let own = UdDest::new(b_addr, b.qp.qpn(), 0x8000_0000);
    a.qp.post_send_ud(UdSendWr::new(2, own, vec![a.mr.sge(0, 5)]))
        .expect("send");
    let r = wc(&b.cq);
    assert_eq!((r.wr_id, r.status), (1, WcStatus::Success));
    assert_eq!(b.mr.to_vec(GRH_LEN, 5).expect("read"), b"right");
    let c = b.qp.counters().expect("counters");
    assert_eq!((c.rcvd_pkts, c.drops.bad_qkey, c.rdma_recvs), (2, 1, 1));
    assert!(
        b.dev.stats().get("qp_drop_bad_qkey") == 1,
        "the device counts it too"
    );
}

#[test]
fn a_datagram_longer_than_the_mtu_is_refused_at_post() {
    let (a_addr, b_addr) = addr::pair_v4();
    let (a, b) = (side(a_addr), side(b_addr));
    let mtu = a.dev.active_mtu().bytes();
    let to_b = UdDest::new(b_addr, b.qp.qpn(), QKEY);
    let e =
        a.qp.post_send_ud(UdSendWr::new(1, to_b, vec![a.mr.sge(0, mtu + 1)]))
            .expect_err("one byte over the MTU");
    assert_eq!(
        e.post_error(),
        Some(PostError::DatagramTooLong {
            len: u64::from(mtu) + 1,
            mtu
        })
    );
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(e.to_string().contains("one packet"), "{e}");
    assert!(
        a.cq.poll_one().is_none(),
        "a refused post does not complete"
    );
    // Exactly the MTU is one packet, and arrives.
    b.qp.post_recv(RecvWr::new(7, vec![b.mr.sge(0, GRH_LEN as u32 + mtu)]))
        .expect("post_recv");
    a.qp.post_send_ud(UdSendWr::new(2, to_b, vec![a.mr.sge(0, mtu)]))
        .expect("MTU-sized send");
    assert_eq!(wc(&a.cq).wr_id, 2);
    let r = wc(&b.cq);
    assert_eq!(
        (r.status, r.byte_len),
        (WcStatus::Success, GRH_LEN as u32 + mtu)
    );
}

#[test]
fn the_ud_ladder_refuses_what_ud_does_not_have() {
    let dev = Device::open(addr::v4()).expect("open");
    let pd = dev.alloc_pd().expect("pd");
    let cq = dev.create_cq(16).expect("cq");
    let mr = pd.reg_mr(4096, Access::LOCAL_WRITE).expect("mr");
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Ud,
            ..QpInitAttr::new(&cq, &cq)
        })
        .expect("create");
    assert_eq!(qp.qp_type(), QpType::Ud);
    // INIT needs the Q_Key.
    let init = QpAttr {
        qp_state: QpState::Init,
        ..QpAttr::default()
    };
    let e = qp
        .modify(
            &init,
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT,
        )
        .expect_err("no Q_Key");
    assert!(e.to_string().contains("qkey"), "{e}");
    // RESET takes no receives; INIT does.
    let recv = || RecvWr::new(1, vec![mr.sge(0, 4096)]);
    assert_eq!(
        qp.post_recv(recv()).unwrap_err().kind(),
        ErrorKind::InvalidState
    );
    qp.modify(
        &QpAttr { qkey: 5, ..init },
        AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY,
    )
    .expect("INIT");
    qp.post_recv(recv()).expect("a receive in INIT");
    // RTR has no path: a destination or path MTU is refused.
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ..QpAttr::default()
    };
    let e = qp
        .modify(&rtr, AttrMask::STATE | AttrMask::DEST_QPN)
        .expect_err("UD has no destination QP");
    assert!(e.to_string().contains("dest_qp_num"), "{e}");
    qp.modify(&rtr, AttrMask::STATE).expect("RTR");
    // Not in RTS: sends are refused.
    let d = UdDest::new(dev.query().addr, qp.qpn(), 5);
    let e = qp
        .post_send_ud(UdSendWr::new(1, d, vec![mr.sge(0, 4)]))
        .expect_err("RTR does not send");
    assert_eq!(e.kind(), ErrorKind::InvalidState);
    // An RC request on a UD QP is no datagram.
    let e = qp
        .post_send(SendWr::new(1, SendOp::Send, vec![mr.sge(0, 4)]))
        .expect_err("RC send on UD");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // ERR flushes the receive posted in INIT.
    qp.to_error().expect("ERR");
    let w = wc(&cq);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::WrFlushErr));
    // A UD QP takes no SRQ.
    let srq = pd.create_srq(4, 1).expect("srq");
    let e = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Ud,
            srq: Some(&srq),
            ..QpInitAttr::new(&cq, &cq)
        })
        .expect_err("UD with an SRQ");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn ud_and_rc_queue_pairs_share_a_cq_and_err_flushes() {
    let (a_addr, b_addr) = addr::pair_v4();
    let (a, b) = (side(a_addr), side(b_addr));
    // An RC pair on the same CQs as the UD QPs.
    let rc = |s: &Side| {
        s.pd.create_qp(&QpInitAttr::new(&s.cq, &s.cq))
            .expect("RC QP")
    };
    let (ra, rb) = (rc(&a), rc(&b));
    ra.connect(&RcConnection::new(rb.qpn()).to_peer(b_addr))
        .expect("connect A");
    rb.connect(&RcConnection::new(ra.qpn()).to_peer(a_addr))
        .expect("connect B");
    rb.post_recv(RecvWr::new(1, vec![b.mr.sge(0, 1024)]))
        .expect("RC recv");
    b.qp.post_recv(RecvWr::new(2, vec![b.mr.sge(1024, 1024)]))
        .expect("UD recv");
    a.mr.write(0, b"rc-and-ud").expect("write");
    ra.post_send(SendWr::new(10, SendOp::Send, vec![a.mr.sge(0, 9)]))
        .expect("RC send");
    let to_b = UdDest::new(b_addr, b.qp.qpn(), QKEY);
    a.qp.post_send_ud(UdSendWr::new(20, to_b, vec![a.mr.sge(0, 9)]))
        .expect("UD send");
    let mut got: Vec<(u64, u32, u32, bool)> = (0..2)
        .map(|_| {
            let w = wc(&b.cq);
            assert_eq!(w.status, WcStatus::Success);
            (w.wr_id, w.qpn, w.byte_len, w.grh)
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (1, rb.qpn(), 9, false),
            (2, b.qp.qpn(), GRH_LEN as u32 + 9, true)
        ]
    );
    // Moving a UD QP to ERR flushes its receives into the shared CQ;
    // destroying one ends them without a completion (as rxe does).
    b.qp.post_recv(RecvWr::new(3, vec![b.mr.sge(0, 1024)]))
        .expect("recv");
    b.qp.post_recv(RecvWr::new(4, vec![b.mr.sge(1024, 1024)]))
        .expect("recv");
    let qpn = b.qp.qpn();
    b.qp.to_error().expect("to ERR");
    for id in [3, 4] {
        let w = wc(&b.cq);
        assert_eq!((w.wr_id, w.qpn, w.status), (id, qpn, WcStatus::WrFlushErr));
    }
    rb.post_recv(RecvWr::new(5, vec![b.mr.sge(0, 1024)]))
        .expect("RC recv");
    drop(rb);
    assert!(
        b.cq.wait_one(Duration::from_millis(200))
            .expect("wait")
            .is_none(),
        "a destroyed QP's receive completes nowhere"
    );
}

/// Over IPv6 the GRH area is the IPv6 header as it arrived: version 6, UDP,
/// the sender's address, from which the answer is addressed.
fn ipv6_datagrams(a_addr: IpAddr, b_addr: IpAddr) {
    let (a, b) = (side(a_addr), side(b_addr));
    b.qp.post_recv(RecvWr::new(1, vec![b.mr.sge(0, 4096)]))
        .expect("post_recv");
    a.mr.write(0, b"over IPv6").expect("write");
    let to_b = UdDest::new(b_addr, b.qp.qpn(), QKEY);
    a.qp.post_send_ud(UdSendWr::new(1, to_b, vec![a.mr.sge(0, 9)]))
        .expect("send");
    assert_eq!(wc(&a.cq).status, WcStatus::Success);
    let r = wc(&b.cq);
    assert_eq!(
        (r.status, r.grh, r.byte_len),
        (WcStatus::Success, true, GRH_LEN as u32 + 9)
    );
    let g = b.mr.to_vec(0, GRH_LEN + 9).expect("read");
    assert_eq!(g[0] >> 4, 6, "an IPv6 header");
    assert_eq!(g[6], 17, "next header UDP");
    let payload_len = usize::from(u16::from_be_bytes([g[4], g[5]]));
    assert_eq!(
        payload_len,
        8 + 12 + 8 + 9 + 3 + 4,
        "UDP, BTH, DETH, data, pad, ICRC"
    );
    let src: [u8; 16] = g[8..24].try_into().unwrap();
    let dst: [u8; 16] = g[24..40].try_into().unwrap();
    let src = IpAddr::V6(src.into());
    assert_eq!((src, IpAddr::V6(dst.into())), (a_addr, b_addr));
    assert_eq!(&g[GRH_LEN..], b"over IPv6");
    // The answer goes to the GRH's source.
    a.qp.post_recv(RecvWr::new(2, vec![a.mr.sge(4096, 4096)]))
        .expect("post_recv");
    b.qp.post_send_ud(UdSendWr::new(
        2,
        UdDest::new(src, r.src_qp, QKEY),
        vec![b.mr.sge(GRH_LEN, 9)],
    ))
    .expect("answer");
    assert_eq!(wc(&b.cq).queue, WcQueue::Send);
    let r = wc(&a.cq);
    assert_eq!(
        (r.wr_id, r.status, r.src_qp),
        (2, WcStatus::Success, b.qp.qpn())
    );
    assert_eq!(a.mr.to_vec(4096 + GRH_LEN, 9).expect("read"), b"over IPv6");
}

#[test]
fn ipv6_datagrams_carry_the_ipv6_header_in_the_grh_area() {
    let (a_addr, b_addr) = addr::pair_v6();
    let ns = ndverbs_testkit::netns::Netns::new().and_then(|ns| {
        for x in [a_addr, b_addr] {
            ns.add_addr("lo", &x.to_string())?;
        }
        Ok(ns)
    });
    if let Some(ns) = ndverbs_testkit::skip::or_skip(ns, "a network namespace (root)") {
        ns.run(|| ipv6_datagrams(a_addr, b_addr));
    }
}
