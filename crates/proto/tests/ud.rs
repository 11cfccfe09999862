//! UD QPs: byte-exact against rxe's GSI MADs and ibv_ud_pingpong, and the
//! receive-side rules.

#[path = "common/captures.rs"]
mod capture_files;

use ndverbs_proto::mem::testing::VecMemory;
use ndverbs_proto::mem::{Access, Sge};
use ndverbs_proto::rc::{PathMtu, QpState, RecvQueue, RecvWr, WcStatus};
use ndverbs_proto::ud::{UdDest, UdQp, UdSendWr, GRH_LEN, GSI_QKEY};
use ndverbs_wire::packet::Packet;

/// UDP payloads of the UD frames of a capture sent from `src`.
fn ud_frames(name: &str, src: &str) -> Vec<Vec<u8>> {
    let src: std::net::IpAddr = src.parse().unwrap();
    capture_files::packets(name)
        .into_iter()
        .filter(|c| c.src == src && c.packet().ext.deth.is_some())
        .map(|c| c.bytes)
        .collect()
}

/// Sends each captured packet's payload through a fresh `UdQp` and compares.
fn check_sender(frames: &[Vec<u8>], mut qp: UdQp) {
    let mut mem = VecMemory::new();
    let buf = mem.register(1, 0x1000, 4096, Access::LOCAL_WRITE);
    let mut out = vec![0u8; 4200];
    for (i, f) in frames.iter().enumerate() {
        let p = Packet::parse(f).unwrap();
        mem.bytes_mut(buf.lkey)[..p.payload.len()].copy_from_slice(p.payload);
        let dest = UdDest {
            remote_qpn: p.bth.dqpn,
            remote_qkey: p.ext.deth.unwrap().qkey,
            ..UdDest::default()
        };
        qp.post_send(UdSendWr::new(
            i as u64,
            dest,
            vec![buf.sge(0, p.payload.len() as u32)],
        ))
        .unwrap();
        let t = qp.poll_transmit(&mut mem, &mut out).unwrap();
        assert_eq!(&out[..t.len - 4], &f[..f.len() - 4], "packet {i}");
        let wc = qp.poll_completion().unwrap();
        assert_eq!((wc.wr_id, wc.status), (i as u64, WcStatus::Success));
    }
}

#[test]
fn gsi_mads_match_rxe() {
    // rping: the client's REQ and RTU from QP1, PSNs 0 and 1, AckReq set.
    let f = ud_frames("rping.pcap", "10.77.0.2");
    assert!(f.len() >= 2);
    let first_psn = Packet::parse(&f[0]).unwrap().bth.psn;
    check_sender(
        &f,
        UdQp::new(1, 1, GSI_QKEY, PathMtu::Mtu4096, first_psn, 16),
    );
}

#[test]
fn ud_pingpong_matches_rxe() {
    let f = ud_frames("ibv_ud_pingpong.pcap", "10.77.0.2");
    assert!(f.len() >= 2);
    let p = Packet::parse(&f[0]).unwrap();
    let qp = UdQp::new(
        p.ext.deth.unwrap().src_qpn,
        1,
        p.ext.deth.unwrap().qkey,
        PathMtu::Mtu1024,
        p.bth.psn,
        16,
    );
    check_sender(&f, qp);
}

#[test]
fn receive_rules() {
    let mut mem_a = VecMemory::new();
    let mut mem_b = VecMemory::new();
    let src = mem_a.register_bytes(1, 0x1000, b"hello, gsi".to_vec(), Access::NONE);
    let dst = mem_b.register(1, 0x8000, 256, Access::LOCAL_WRITE);
    let mut a = UdQp::gsi(1, PathMtu::Mtu1024);
    let mut b = UdQp::gsi(1, PathMtu::Mtu1024);
    let mut rq = RecvQueue::new(8, 1);
    let dest = UdDest {
        remote_qpn: 1,
        remote_qkey: GSI_QKEY,
        ..UdDest::default()
    };
    let grh = [7u8; GRH_LEN];
    let mut out = vec![0u8; 2048];
    let mut deliver = |a: &mut UdQp,
                       b: &mut UdQp,
                       rq: &mut RecvQueue,
                       mem_a: &mut VecMemory,
                       mem_b: &mut VecMemory,
                       qkey| {
        let mut d = dest;
        d.remote_qkey = qkey;
        a.post_send(UdSendWr::new(1, d, vec![src.sge(0, 10)]))
            .unwrap();
        let t = a.poll_transmit(mem_a, &mut out).unwrap();
        let p = Packet::parse(&out[..t.len]).unwrap();
        b.handle_packet(&p, &grh, mem_b, rq);
    };
    // No receive posted: dropped.
    deliver(&mut a, &mut b, &mut rq, &mut mem_a, &mut mem_b, GSI_QKEY);
    assert_eq!(b.counters().drop_no_recv, 1);
    // A receive: GRH then payload.
    rq.post(RecvWr::new(5, vec![dst.sge(0, 256)])).unwrap();
    deliver(&mut a, &mut b, &mut rq, &mut mem_a, &mut mem_b, GSI_QKEY);
    let wc = b.poll_completion().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len, wc.src_qp),
        (5, WcStatus::Success, 50, 1)
    );
    assert_eq!(&mem_b.bytes(dst.lkey)[..40], &grh);
    assert_eq!(&mem_b.bytes(dst.lkey)[40..50], b"hello, gsi");
    // Wrong Q_Key: dropped, the receive stays.
    rq.post(RecvWr::new(6, vec![dst.sge(0, 45)])).unwrap();
    deliver(&mut a, &mut b, &mut rq, &mut mem_a, &mut mem_b, 0x1234);
    assert_eq!(b.counters().drop_bad_qkey, 1);
    // Too small for GRH + payload: local length error.
    deliver(&mut a, &mut b, &mut rq, &mut mem_a, &mut mem_b, GSI_QKEY);
    assert_eq!(b.poll_completion().unwrap().status, WcStatus::LocLenErr);
    // Oversized send refused at post time; bad SGE completes with LocProtErr.
    assert!(a
        .post_send(UdSendWr::new(9, dest, vec![Sge::new(0, 2000, 0)]))
        .is_err());
    a.post_send(UdSendWr::new(9, dest, vec![Sge::new(0, 8, 0xdead)]))
        .unwrap();
    assert!(a.poll_transmit(&mut mem_a, &mut out).is_none());
    let wcs: Vec<_> = std::iter::from_fn(|| a.poll_completion()).collect();
    assert_eq!(wcs.last().unwrap().status, WcStatus::LocProtErr);
    // ERR flushes sends and receives once.
    rq.post(RecvWr::new(7, vec![dst.sge(0, 256)])).unwrap();
    b.post_send(UdSendWr::new(3, dest, vec![])).unwrap();
    b.set_error();
    assert_eq!(b.state(), QpState::Err);
    assert_eq!(b.flush_recv(&mut rq), 1);
    assert_eq!(b.flush_recv(&mut rq), 0);
    let wcs: Vec<_> = std::iter::from_fn(|| b.poll_completion()).collect();
    assert_eq!(wcs.len(), 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::WrFlushErr));
}
