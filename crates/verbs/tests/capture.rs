//! `Device::set_capture`: two devices of one process writing one pcap file.
//! Every packet appears once (recorded by its sender), with its IP and UDP
//! headers rebuilt so that the ICRC verifies; switching capture off stops
//! recording; switching it on again in the same process appends.

use ndverbs_verbs::*;
use ndverbs_wire::capture::{ip_packet, read_frames};
use ndverbs_wire::ip::Envelope;
use ndverbs_wire::packet::Packet;
use std::net::IpAddr;
use std::time::Duration;

fn connect(qp: &Qp, peer: &Qp, peer_dev: &Device) {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: Access::ALL,
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = PathMtu::Mtu1024;
    a.dest_qp_num = peer.qpn();
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    a.av.dgid = peer_dev.gid().octets();
    qp.modify(
        &a,
        AttrMask::STATE
            | AttrMask::AV
            | AttrMask::PATH_MTU
            | AttrMask::DEST_QPN
            | AttrMask::RQ_PSN
            | AttrMask::MAX_DEST_RD_ATOMIC
            | AttrMask::MIN_RNR_TIMER,
    )
    .unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = 0;
    a.max_rd_atomic = 4;
    qp.modify(
        &a,
        AttrMask::STATE
            | AttrMask::SQ_PSN
            | AttrMask::TIMEOUT
            | AttrMask::RETRY_CNT
            | AttrMask::RNR_RETRY
            | AttrMask::MAX_QP_RD_ATOMIC,
    )
    .unwrap();
}

/// (src, opcode, psn, ICRC ok) of every frame.
fn frames(path: &std::path::Path) -> Vec<(IpAddr, u8, u32, bool)> {
    let bytes = std::fs::read(path).unwrap();
    read_frames(&bytes)
        .unwrap()
        .into_iter()
        .map(|f| {
            let (_, ip) = ip_packet(f.link, f.data).expect("an IP packet");
            let (env, t) = Envelope::parse(ip).unwrap();
            assert!(env.is_rocev2());
            let p = Packet::parse(t).unwrap();
            let ok = ndverbs_wire::icrc::verify(ip).unwrap();
            (env.ip.src(), p.bth.opcode.0, p.bth.psn, ok)
        })
        .collect()
}

#[test]
fn two_devices_one_file_each_packet_once() {
    let (a_ip, b_ip): (IpAddr, IpAddr) =
        ("127.88.4.1".parse().unwrap(), "127.88.4.2".parse().unwrap());
    let path = std::env::temp_dir().join(format!("ndv-verbs-cap-{}.pcap", std::process::id()));
    let (da, db) = (Device::open(a_ip).unwrap(), Device::open(b_ip).unwrap());
    da.set_capture(Some(&path)).unwrap();
    db.set_capture(Some(&path)).unwrap();
    assert_eq!(da.capture_path(), db.capture_path());
    let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
    let (ca, cb) = (da.create_cq(64).unwrap(), db.create_cq(64).unwrap());
    let qa = pa.create_qp(&QpInitAttr::new(&ca, &ca)).unwrap();
    let qb = pb.create_qp(&QpInitAttr::new(&cb, &cb)).unwrap();
    connect(&qa, &qb, &db);
    connect(&qb, &qa, &da);
    let (ma, mb) = (
        pa.reg_mr(8192, Access::ALL).unwrap(),
        pb.reg_mr(8192, Access::ALL).unwrap(),
    );
    let send = |n: u64| {
        qb.post_recv(RecvWr::new(n, vec![mb.sge(0, 8192)])).unwrap();
        qa.post_send(SendWr::new(n, SendOp::Send, vec![ma.sge(0, 3000)]))
            .unwrap();
        let w = cb.wait_one(Duration::from_secs(10)).unwrap().unwrap();
        assert_eq!(w.status, WcStatus::Success);
        let w = ca.wait_one(Duration::from_secs(10)).unwrap().unwrap();
        assert_eq!(w.status, WcStatus::Success);
    };
    send(1);
    std::thread::sleep(Duration::from_millis(50));
    da.set_capture(None).unwrap();
    db.set_capture(None).unwrap();
    assert!(da.capture_path().is_none());
    let f = frames(&path);
    // 3000 bytes at MTU 1024: FIRST, MIDDLE, LAST from a; then b's ACK(s).
    let data: Vec<_> = f
        .iter()
        .filter(|x| x.0 == a_ip)
        .map(|x| (x.1, x.2))
        .collect();
    assert_eq!(data, [(0x00, 0), (0x01, 1), (0x02, 2)], "{f:?}");
    assert!(
        f.iter().any(|x| x.0 == b_ip && x.1 == 0x11),
        "no ACK: {f:?}"
    );
    assert!(f.iter().all(|x| x.3), "bad ICRC: {f:?}");
    // Off: nothing more is written.
    send(2);
    assert_eq!(frames(&path).len(), f.len());
    // On again in the same process: appended after what is there.
    da.set_capture(Some(&path)).unwrap();
    send(3);
    std::thread::sleep(Duration::from_millis(50));
    da.set_capture(None).unwrap();
    let g = frames(&path);
    assert_eq!(&g[..f.len()], &f[..]);
    let more: Vec<_> = g[f.len()..]
        .iter()
        .filter(|x| x.0 == a_ip)
        .map(|x| (x.1, x.2))
        .collect();
    assert_eq!(more, [(0x00, 6), (0x01, 7), (0x02, 8)], "{g:?}");
    // b is not capturing now: its ACKs arrive at a and are recorded as received.
    assert!(
        g[f.len()..].iter().any(|x| x.0 == b_ip && x.1 == 0x11),
        "{g:?}"
    );
    let _ = std::fs::remove_file(&path);
}
