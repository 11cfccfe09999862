//! `Device::stats`: rxe-named counters summed over the device's queue pairs,
//! kept after a QP is destroyed; `link_downed` after removal.

use ndverbs_testkit::verbs::Pair;
use ndverbs_verbs::*;

#[test]
fn counters_sum_over_queue_pairs_and_survive_them() {
    let mut pair = Pair::new();
    for round in 0..2 {
        if round > 0 {
            // The previous QPs are destroyed: the totals must keep them.
            pair.new_qps();
        }
        pair.send(5, 100, 1);
        assert_eq!(pair.a.qp.counters().unwrap().rdma_sends, 5);
        let (sa, sb) = (pair.a.dev.stats(), pair.b.dev.stats());
        assert_eq!(sa.get("rdma_sends"), 5 * (round + 1), "{sa:?}");
        assert_eq!(sb.get("rdma_recvs"), 5 * (round + 1), "{sb:?}");
        assert!(sa.get("sent_pkts") >= 5 * (round + 1));
        assert!(sb.get("rcvd_pkts") >= 5 * (round + 1));
    }
    let da = &pair.a.dev;
    let s = da.stats();
    let names: Vec<&str> = s.pairs().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(&names[..15], RXE_COUNTERS);
    assert_eq!(s.get("link_downed"), 0);
    da.remove();
    assert_eq!(da.stats().get("link_downed"), 1);
    assert!(s.to_json().starts_with("{\"sent_pkts\":"));
}
