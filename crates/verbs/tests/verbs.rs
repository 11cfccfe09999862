//! The verbs surface on loopback: handles, SRQ, CQ waiting, drop order.

use ndverbs_verbs::*;
use std::time::Duration;

fn connect(qp: &Qp, peer: &Qp, peer_dev: &Device, psn_local: u32, psn_peer: u32) {
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
    a.rq_psn = psn_peer;
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
    a.sq_psn = psn_local;
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

#[test]
fn srq_and_waiting_on_the_cq() {
    let da = Device::open("127.77.40.1".parse().unwrap()).unwrap();
    let db = Device::open("127.77.40.2".parse().unwrap()).unwrap();
    let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
    let (ca, cb) = (da.create_cq(64).unwrap(), db.create_cq(64).unwrap());
    let srq = pb.create_srq(16, 1).unwrap();
    let qa = pa.create_qp(&QpInitAttr::new(&ca, &ca)).unwrap();
    let mut init = QpInitAttr::new(&cb, &cb);
    init.srq = Some(&srq);
    let qb = pb.create_qp(&init).unwrap();
    connect(&qa, &qb, &db, 100, 200);
    connect(&qb, &qa, &da, 200, 100);
    let ma = pa.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    let mb = pb.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    ma.write(0, b"through the shared receive queue").unwrap();
    srq.post_recv(RecvWr::new(9, vec![mb.sge(0, 4096)]))
        .unwrap();
    assert!(
        qb.post_recv(RecvWr::new(1, vec![])).is_err(),
        "a QP with an SRQ has no own receive queue"
    );
    qa.post_send(SendWr::new(1, SendOp::Send, vec![ma.sge(0, 32)]))
        .unwrap();
    let w = cb
        .wait_one(Duration::from_secs(10))
        .unwrap()
        .expect("receive completion");
    assert_eq!((w.wr_id, w.status, w.byte_len), (9, WcStatus::Success, 32));
    assert_eq!(
        mb.to_vec(0, 32).unwrap(),
        b"through the shared receive queue"
    );
    let w = ca
        .wait_one(Duration::from_secs(10))
        .unwrap()
        .expect("send completion");
    assert_eq!(w.status, WcStatus::Success);
    // Reading outside the region is a typed error.
    assert_eq!(
        ma.read(4090, &mut [0u8; 10]).unwrap_err().kind(),
        ErrorKind::Access
    );
    // Dropping the QP before its CQ and PD is fine; so is the reverse order of
    // handles (they keep what they need alive).
    drop(cb);
    drop(pb);
    drop(qb);
    drop(srq);
}

#[test]
fn removal_fails_later_calls_cleanly() {
    let manual = DeviceConfig {
        progress: Progress::Manual,
        ..DeviceConfig::default()
    };
    let d = Device::open_with("127.77.41.1".parse().unwrap(), &manual).unwrap();
    let pd = d.alloc_pd().unwrap();
    let cq = d.create_cq(8).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq)).unwrap();
    let a = QpAttr {
        qp_state: QpState::Init,
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    let mr = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    qp.post_recv(RecvWr::new(5, vec![mr.sge(0, 64)])).unwrap();
    d.remove();
    let w = cq.poll_one().expect("flushed receive");
    assert_eq!((w.wr_id, w.status), (5, WcStatus::WrFlushErr));
    let removed = ErrorKind::DeviceRemoved;
    assert_eq!(
        qp.post_recv(RecvWr::new(6, vec![])).unwrap_err().kind(),
        removed
    );
    assert_eq!(d.alloc_pd().unwrap_err().kind(), removed);
    assert_eq!(
        cq.wait_one(Duration::from_millis(50)).unwrap_err().kind(),
        removed
    );
}
