//! The engine end to end on loopback: two NICs (127.77.x.1 and .2, both
//! on UDP 4791), real sockets, real ICRCs, both progress models.

mod common;

use common::*;
use ndverbs_engine::config::Progress;
use ndverbs_engine::error::EngineError;
use ndverbs_engine::nic::sge;
use ndverbs_proto::rc::{
    PathMtu, PostError, QpState, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus,
};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

fn fill(s: &Side, off: usize, len: usize, seed: u8) {
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    s.mr.write(off, &data).unwrap();
}

fn bytes(s: &Side, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    s.mr.read(off, &mut v).unwrap();
    v
}

#[test]
fn send_write_read_atomics_threaded() {
    let (a, b) = pair(1, Progress::Thread, PathMtu::Mtu1024, 1 << 20);
    // SEND of 10000 bytes (10 packets) into a posted receive.
    fill(&a, 0, 10_000, 1);
    b.nic
        .post_recv(&b.qp, RecvWr::new(7, vec![sge(&b.mr, 100_000, 16_384)]))
        .unwrap();
    a.nic
        .post_send(
            &a.qp,
            SendWr::new(1, SendOp::SendImm(0xabcd), vec![sge(&a.mr, 0, 10_000)]),
        )
        .unwrap();
    let wa = wait_n(&a, 1, LIMIT);
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::Success));
    let wb = wait_n(&b, 1, LIMIT);
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].byte_len, wb[0].imm),
        (7, WcStatus::Success, 10_000, Some(0xabcd))
    );
    assert_eq!(bytes(&b, 100_000, 10_000), bytes(&a, 0, 10_000));

    // RDMA WRITE 300 KiB.
    fill(&a, 200_000, 300_000, 9);
    let remote = RemoteAddr {
        va: b.mr.addr() + 500_000,
        rkey: b.mr.rkey(),
    };
    a.nic
        .post_send(
            &a.qp,
            SendWr::new(2, SendOp::Write(remote), vec![sge(&a.mr, 200_000, 300_000)]),
        )
        .unwrap();
    assert_eq!(wait_n(&a, 1, LIMIT)[0].status, WcStatus::Success);
    assert_eq!(bytes(&b, 500_000, 300_000), bytes(&a, 200_000, 300_000));

    // RDMA READ it back into another place.
    let remote = RemoteAddr {
        va: b.mr.addr() + 500_000,
        rkey: b.mr.rkey(),
    };
    a.nic
        .post_send(
            &a.qp,
            SendWr::new(3, SendOp::Read(remote), vec![sge(&a.mr, 600_000, 300_000)]),
        )
        .unwrap();
    let w = wait_n(&a, 1, LIMIT);
    assert_eq!(
        (w[0].status, w[0].opcode, w[0].byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, 300_000)
    );
    assert_eq!(bytes(&a, 600_000, 300_000), bytes(&a, 200_000, 300_000));

    // Atomics on b's memory.
    b.mr.write(8, &40u64.to_ne_bytes()).unwrap();
    let t = RemoteAddr {
        va: b.mr.addr() + 8,
        rkey: b.mr.rkey(),
    };
    a.nic
        .post_send(
            &a.qp,
            SendWr::new(
                4,
                SendOp::FetchAdd { remote: t, add: 2 },
                vec![sge(&a.mr, 16, 8)],
            ),
        )
        .unwrap();
    a.nic
        .post_send(
            &a.qp,
            SendWr::new(
                5,
                SendOp::CompareSwap {
                    remote: t,
                    compare: 42,
                    swap: 7,
                },
                vec![sge(&a.mr, 24, 8)],
            ),
        )
        .unwrap();
    let w = wait_n(&a, 2, LIMIT);
    assert!(w.iter().all(|w| w.status == WcStatus::Success), "{w:?}");
    assert_eq!(u64::from_ne_bytes(bytes(&a, 16, 8).try_into().unwrap()), 40);
    assert_eq!(u64::from_ne_bytes(bytes(&a, 24, 8).try_into().unwrap()), 42);
    assert_eq!(u64::from_ne_bytes(bytes(&b, 8, 8).try_into().unwrap()), 7);

    // A bad rkey: remote access error, and the QP goes to ERR.
    let bad = RemoteAddr {
        va: b.mr.addr(),
        rkey: b.mr.rkey() ^ 0x5a5a,
    };
    a.nic
        .post_send(
            &a.qp,
            SendWr::new(6, SendOp::Write(bad), vec![sge(&a.mr, 0, 64)]),
        )
        .unwrap();
    let w = wait_n(&a, 1, LIMIT);
    assert_eq!(w[0].status, WcStatus::RemAccessErr);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(a.qp.state(), QpState::Err);
}

/// 4 KiB SEND ping-pong, 1000 round trips, in manual progress mode (one thread
/// drives both NICs) — the `ndv pingpong -s 4096 -n 1000` pattern.
#[test]
fn pingpong_manual_progress() {
    let (a, b) = pair(2, Progress::Manual, PathMtu::Mtu4096, 1 << 16);
    let n = 1000;
    for s in [&a, &b] {
        for i in 0..16 {
            s.nic
                .post_recv(&s.qp, RecvWr::new(i, vec![sge(&s.mr, 8192, 4096)]))
                .unwrap();
        }
    }
    fill(&a, 0, 4096, 3);
    fill(&b, 0, 4096, 4);
    let (mut a_recv, mut b_recv) = (0, 0);
    for i in 0..n {
        a.nic
            .post_send(
                &a.qp,
                SendWr::new(i, SendOp::Send, vec![sge(&a.mr, 0, 4096)]),
            )
            .unwrap();
        drive_until(&a, &b, LIMIT, || {
            while let Some(w) = b.cq.poll_one() {
                assert_eq!(w.status, WcStatus::Success);
                if w.opcode == WcOpcode::Recv {
                    b_recv += 1;
                    b.nic
                        .post_recv(&b.qp, RecvWr::new(w.wr_id, vec![sge(&b.mr, 8192, 4096)]))
                        .unwrap();
                }
            }
            b_recv > i
        });
        b.nic
            .post_send(
                &b.qp,
                SendWr::new(i, SendOp::Send, vec![sge(&b.mr, 0, 4096)]),
            )
            .unwrap();
        drive_until(&a, &b, LIMIT, || {
            while let Some(w) = a.cq.poll_one() {
                assert_eq!(w.status, WcStatus::Success);
                if w.opcode == WcOpcode::Recv {
                    a_recv += 1;
                    a.nic
                        .post_recv(&a.qp, RecvWr::new(w.wr_id, vec![sge(&a.mr, 8192, 4096)]))
                        .unwrap();
                }
            }
            a_recv > i
        });
    }
    assert_eq!(bytes(&b, 8192, 4096), bytes(&a, 0, 4096));
    assert_eq!(bytes(&a, 8192, 4096), bytes(&b, 0, 4096));
    assert_eq!(
        a.nic
            .counters()
            .drop_bad_icrc
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[test]
fn post_errors_destroy_and_removal() {
    let (a, b) = pair(3, Progress::Thread, PathMtu::Mtu1024, 1 << 16);
    // Too many SGEs, inline too large: typed, synchronous.
    let many = vec![sge(&a.mr, 0, 1); 5];
    assert!(matches!(
        a.nic.post_send(&a.qp, SendWr::new(1, SendOp::Send, many)),
        Err(EngineError::Post(PostError::TooManySges { .. }))
    ));
    let mut w = SendWr::new(1, SendOp::Send, vec![]);
    w.inline = Some(vec![0; 257]);
    assert!(matches!(
        a.nic.post_send(&a.qp, w),
        Err(EngineError::Post(PostError::InlineTooLarge { .. }))
    ));
    // Receives outstanding, then removal: each completes exactly once, flushed.
    for i in 0..10 {
        b.nic
            .post_recv(&b.qp, RecvWr::new(i, vec![sge(&b.mr, 0, 64)]))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    b.nic.remove();
    let w = wait_n(&b, 10, LIMIT);
    let mut ids: Vec<u64> = w.iter().map(|w| w.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..10).collect::<Vec<_>>());
    assert!(w.iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert!(b.cq.poll_one().is_none());
    assert!(matches!(
        b.nic.post_recv(&b.qp, RecvWr::new(1, vec![])),
        Err(EngineError::Removed)
    ));
    assert!(matches!(b.nic.alloc_pd(), Err(EngineError::Removed)));
    // Destroy: later use of the id is a typed error.
    let qpn = a.qp.qpn();
    a.nic.destroy_qp(qpn).unwrap();
    assert!(matches!(
        a.nic.query_qp(qpn),
        Err(EngineError::NotFound { .. })
    ));
    assert!(matches!(
        a.nic.destroy_qp(qpn),
        Err(EngineError::NotFound { .. })
    ));
}

/// Dropping every handle of a threaded NIC ends its worker and frees its
/// UDP port: the same address can be opened again at once.
#[test]
fn dropping_a_nic_releases_its_port() {
    let ip: std::net::IpAddr = "127.77.4.1".parse().unwrap();
    for _ in 0..3 {
        let a = ndverbs_engine::nic::Nic::open(ip, Progress::Thread).unwrap();
        let pd = a.alloc_pd().unwrap();
        let _ = a.create_cq(8).unwrap();
        let _ = pd;
        drop(a);
        // The worker may hold the state for one more turn (≤ 100 ms).
        let t0 = std::time::Instant::now();
        loop {
            match ndverbs_engine::link::udp::RoceSocket::bind(ip) {
                Ok(s) => {
                    drop(s);
                    break;
                }
                Err(e) => {
                    assert!(
                        t0.elapsed() < Duration::from_secs(2),
                        "port still bound: {e}"
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}

/// Manual progress answers before it acknowledges: the ACK of a received
/// SEND is postponed while its completion waits for the application; a
/// reply posted at once leaves first, the ACK right behind it in a datagram
/// of its own. Without a reply the next progress call sends the ACK, and
/// destroying the QP first sends it too. A hand-driven peer socket sees the
/// exact order.
#[test]
fn manual_progress_sends_the_reply_before_the_ack() {
    use ndverbs_engine::icrc::IcrcCache;
    use ndverbs_engine::link::udp::RoceSocket;
    use ndverbs_proto::rc::{AttrMask, QpAttr};
    use std::net::{IpAddr, SocketAddr};

    /// Fills in the ICRC of `pkt` and sends it to `dst`'s RoCEv2 port.
    fn send_signed(sock: &RoceSocket, pkt: &mut [u8], dst: IpAddr) {
        let dst = SocketAddr::new(dst, 4791);
        IcrcCache::new(sock.addr()).fill(pkt, dst, 0).unwrap();
        sock.send_to(pkt, dst).unwrap();
    }
    use ndverbs_wire::ext::{Aeth, Syndrome};
    use ndverbs_wire::{bth::Bth, cma::gid_of, opcode::Opcode, packet::Packet};

    let peer_ip = std::net::IpAddr::from([127, 77, 210, 1]);
    let peer = RoceSocket::bind(peer_ip).unwrap();
    let b = side(
        std::net::IpAddr::from([127, 77, 210, 2]),
        Progress::Manual,
        4096,
    );
    let (peer_qpn, peer_psn, b_psn) = (0x51, 0x100, 0x900);
    let mut attr = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: ALL,
        ..QpAttr::default()
    };
    let init = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    b.nic.modify_qp(b.qp.qpn(), &attr, init).unwrap();
    attr.qp_state = QpState::Rtr;
    attr.path_mtu = PathMtu::Mtu1024;
    attr.dest_qp_num = peer_qpn;
    attr.rq_psn = peer_psn;
    attr.av.dgid = gid_of(peer_ip).octets();
    let rtr = AttrMask::STATE
        | AttrMask::AV
        | AttrMask::PATH_MTU
        | AttrMask::DEST_QPN
        | AttrMask::RQ_PSN
        | AttrMask::MAX_DEST_RD_ATOMIC
        | AttrMask::MIN_RNR_TIMER;
    b.nic.modify_qp(b.qp.qpn(), &attr, rtr).unwrap();
    attr.qp_state = QpState::Rts;
    attr.sq_psn = b_psn;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    let rts = AttrMask::STATE
        | AttrMask::SQ_PSN
        | AttrMask::TIMEOUT
        | AttrMask::RETRY_CNT
        | AttrMask::RNR_RETRY
        | AttrMask::MAX_QP_RD_ATOMIC;
    b.nic.modify_qp(b.qp.qpn(), &attr, rts).unwrap();
    for i in 0..2 {
        b.nic
            .post_recv(&b.qp, RecvWr::new(i, [sge(&b.mr, 64 * i as usize, 64)]))
            .unwrap();
    }
    // The peer's SEND ONLY, asking for an ACK.
    let send_from_peer = |psn: u32| {
        let mut bth = Bth::new(Opcode::RC_SEND_ONLY, b.qp.qpn(), psn);
        bth.ack_req = true;
        let mut p = Packet::new(bth);
        p.payload = b"pingping";
        let mut buf = [0u8; 64];
        let n = p.write(&mut buf).unwrap();
        send_signed(&peer, &mut buf[..n], b.nic.local());
    };
    let mut buf = vec![0u8; ndverbs_engine::link::MAX_DATAGRAM];
    let mut icrc = IcrcCache::new(peer.addr());
    let mut next_from_b = || -> Option<(Opcode, u32)> {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_millis(200) {
            if let Some(d) = peer.recv_datagram(&mut buf).unwrap() {
                assert_eq!(d.len, d.seg, "one packet per datagram");
                let r = icrc.verify(&buf[..d.len], d.src, d.dst);
                let r = r.expect("b's packets verify");
                let p = Packet::parse(&buf[..r.len]).unwrap();
                return Some((p.bth.opcode, p.bth.psn));
            }
        }
        None
    };

    // With a reply: the reply first, then the ACK of the request.
    send_from_peer(peer_psn);
    let wc = wait_n(&b, 1, LIMIT);
    assert_eq!((wc[0].opcode, wc[0].byte_len), (WcOpcode::Recv, 8));
    b.nic
        .post_send(&b.qp, SendWr::new(7, SendOp::Send, [sge(&b.mr, 0, 8)]))
        .unwrap();
    assert_eq!(next_from_b(), Some((Opcode::RC_SEND_ONLY, b_psn)));
    assert_eq!(next_from_b(), Some((Opcode::RC_ACK, peer_psn)));
    // The peer acknowledges the reply (or b would send it again).
    let mut ack = Packet::new(Bth::new(Opcode::RC_ACK, b.qp.qpn(), b_psn));
    ack.ext.aeth = Some(Aeth::new(Syndrome::ACK, 1));
    let mut abuf = [0u8; 32];
    let n = ack.write(&mut abuf).unwrap();
    send_signed(&peer, &mut abuf[..n], b.nic.local());
    let wc = wait_n(&b, 1, LIMIT);
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));

    // Without one: the ACK leaves with the next progress call.
    send_from_peer(peer_psn + 1);
    let wc = wait_n(&b, 1, LIMIT);
    assert_eq!(wc[0].opcode, WcOpcode::Recv);
    b.nic.progress();
    assert_eq!(next_from_b(), Some((Opcode::RC_ACK, peer_psn + 1)));
    assert_eq!(next_from_b(), None);

    // Nor is it lost when the QP goes away first (an application that took
    // its last message and tears down: the peer's send must complete).
    b.nic
        .post_recv(&b.qp, RecvWr::new(2, [sge(&b.mr, 128, 64)]))
        .unwrap();
    send_from_peer(peer_psn + 2);
    let wc = wait_n(&b, 1, LIMIT);
    assert_eq!(wc[0].opcode, WcOpcode::Recv);
    b.nic.destroy_qp(b.qp.qpn()).unwrap();
    assert_eq!(next_from_b(), Some((Opcode::RC_ACK, peer_psn + 2)));
}
