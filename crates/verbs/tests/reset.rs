//! A queue pair moved to RESET takes its completions still queued in its
//! CQs with it (as libmlx5 cleans a reset QP's CQs), and leaves the other
//! queue pairs' completions where they were.

use ndverbs_testkit::verbs::Pair;
use ndverbs_verbs::*;

#[test]
fn reset_removes_the_queue_pairs_own_queued_completions_only() {
    let pair = Pair::new();
    let a = &pair.a;
    // A second QP on the same CQ, with a flushed receive of its own.
    let mut init = QpInitAttr::new(&a.cq, &a.cq);
    init.max_recv_wr = 4;
    let other = a.pd.create_qp(&init).expect("create_qp");
    other.to_init(Access::LOCAL_WRITE).expect("init");
    other
        .post_recv(RecvWr::new(9, vec![a.mr.sge(0, 64)]))
        .expect("post_recv");
    other.to_error().expect("other to ERR");
    for id in [1, 2] {
        a.qp.post_recv(RecvWr::new(id, vec![a.mr.sge(64, 64)]))
            .expect("post_recv");
    }
    a.qp.to_error().expect("to ERR");
    // The flushes are queued before the calls return.
    assert_eq!(a.cq.len(), 3);
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    a.qp.modify(&reset, AttrMask::STATE).expect("to RESET");
    assert_eq!(a.cq.len(), 1);
    let wc = a.cq.poll_one().expect("the other QP's flush");
    assert_eq!(
        (wc.wr_id, wc.qpn, wc.status),
        (9, other.qpn(), WcStatus::WrFlushErr)
    );
    assert!(a.cq.poll_one().is_none());
}
