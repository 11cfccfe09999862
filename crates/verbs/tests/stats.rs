//! `Device::stats`: rxe-named counters summed over the device's queue pairs,
//! kept after a QP is destroyed; `link_downed` after removal.

use ndverbs_verbs::*;
use std::time::Duration;

fn to_rts(qp: &Qp, peer: &Qp, peer_dev: &Device) {
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
fn counters_sum_over_queue_pairs_and_survive_them() {
    let da = Device::open("127.88.8.1".parse().unwrap()).unwrap();
    let db = Device::open("127.88.8.2".parse().unwrap()).unwrap();
    let (pa, pb) = (da.alloc_pd().unwrap(), db.alloc_pd().unwrap());
    let (ca, cb) = (da.create_cq(64).unwrap(), db.create_cq(64).unwrap());
    let (ma, mb) = (
        pa.reg_mr(4096, Access::ALL).unwrap(),
        pb.reg_mr(4096, Access::ALL).unwrap(),
    );
    for round in 0..2 {
        let qa = pa.create_qp(&QpInitAttr::new(&ca, &ca)).unwrap();
        let qb = pb.create_qp(&QpInitAttr::new(&cb, &cb)).unwrap();
        to_rts(&qa, &qb, &db);
        to_rts(&qb, &qa, &da);
        for i in 0..5 {
            qb.post_recv(RecvWr::new(i, vec![mb.sge(0, 4096)])).unwrap();
            qa.post_send(SendWr::new(i, SendOp::Send, vec![ma.sge(0, 100)]))
                .unwrap();
            for cq in [&cb, &ca] {
                let w = cq.wait_one(Duration::from_secs(10)).unwrap().unwrap();
                assert_eq!(w.status, WcStatus::Success);
            }
        }
        assert_eq!(qa.counters().unwrap().rdma_sends, 5);
        let (sa, sb) = (da.stats(), db.stats());
        assert_eq!(sa.get("rdma_sends"), 5 * (round + 1), "{sa:?}");
        assert_eq!(sb.get("rdma_recvs"), 5 * (round + 1), "{sb:?}");
        assert!(sa.get("sent_pkts") >= 5 * (round + 1));
        assert!(sb.get("rcvd_pkts") >= 5 * (round + 1));
        // QPs dropped here: the next round's totals include them.
    }
    let s = da.stats();
    let names: Vec<&str> = s.pairs().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(&names[..15], RXE_COUNTERS);
    assert_eq!(s.get("link_downed"), 0);
    da.remove();
    assert_eq!(da.stats().get("link_downed"), 1);
    assert!(s.to_json().starts_with("{\"sent_pkts\":"));
}
