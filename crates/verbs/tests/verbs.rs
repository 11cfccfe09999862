//! The verbs surface on loopback: handles, SRQ, CQ waiting, drop order.

use ndverbs_testkit::{addr, verbs as kit};
use ndverbs_verbs::*;
use std::time::Duration;

#[test]
fn srq_and_waiting_on_the_cq() {
    let (a_ip, b_ip) = addr::pair_v4();
    let da = Device::open(a_ip).unwrap();
    let db = Device::open(b_ip).unwrap();
    let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
    let (ca, cb) = (da.create_cq(64).unwrap(), db.create_cq(64).unwrap());
    let srq = pb.create_srq(16, 1).unwrap();
    let qa = pa.create_qp(&QpInitAttr::new(&ca, &ca)).unwrap();
    let mut init = QpInitAttr::new(&cb, &cb);
    init.srq = Some(&srq);
    let qb = pb.create_qp(&init).unwrap();
    let rc = kit::RcParams {
        sq_psn: 100,
        rq_psn: 200,
        ..kit::RcParams::default()
    };
    kit::connect_qps(&qa, a_ip, &qb, b_ip, &rc);
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
    let w = kit::wait_wc(&cb);
    assert_eq!((w.wr_id, w.status, w.byte_len), (9, WcStatus::Success, 32));
    assert_eq!(
        mb.to_vec(0, 32).unwrap(),
        b"through the shared receive queue"
    );
    kit::wc_ok(&ca);
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
    let d = Device::open_with(addr::v4(), &manual).unwrap();
    let pd = d.alloc_pd().unwrap();
    let cq = d.create_cq(8).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq)).unwrap();
    let (a, m) = kit::RcParams::default().init();
    qp.modify(&a, m).unwrap();
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
