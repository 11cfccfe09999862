//! The responder holds requests that arrive ahead of a PSN gap for a
//! moment: a gap that a late packet fills costs nothing, one that outlasts
//! the wait is a loss (one sequence NAK, go-back-N).

use crate::two::pair;
use ndverbs_proto::rc::*;
use ndverbs_proto::time::{Duration, Instant};

const LEN: u32 = 64 * 1024;

#[test]
fn a_late_packet_fills_its_gap_without_a_nak() {
    let mut t = pair(LEN);
    let t0 = Instant::ZERO;
    let pkts = t.a_packets(t0);
    assert_eq!(pkts.len(), 64);
    // PSNs 100..=103 in order, then 105..=112 overtake 104.
    let mut order: Vec<usize> = (0..4).chain(5..13).collect();
    order.push(4);
    order.extend(13..64);
    let late = t0 + (REORDER_WAIT - Duration::from_nanos(1));
    for (k, &i) in order.iter().enumerate() {
        let at = if i == 4 {
            late
        } else {
            t0 + Duration::from_nanos(k as u64)
        };
        t.deliver_to_b(at, &pkts[i]);
        if k == 11 {
            // The gap is open: B waits, with a deadline, and sends no NAK.
            assert_eq!(
                t.b.poll_timeout(),
                Some(t0 + Duration::from_nanos(4) + REORDER_WAIT)
            );
        }
    }
    let b = *t.b.counters();
    assert_eq!(
        (b.resequenced, b.out_of_seq_request, b.drops.out_of_seq),
        (1, 0, 0)
    );
    assert_eq!(t.b.poll_timeout(), None);
    t.b_replies(late);
    let a = *t.a.counters();
    assert_eq!(
        (a.rcvd_seq_err, a.completer_retry_err, a.req_psns_resent),
        (0, 0, 0)
    );
    t.assert_write_landed();
}

#[test]
fn a_gap_that_outlasts_the_wait_is_naked_and_resent() {
    let mut t = pair(LEN);
    let t0 = Instant::ZERO;
    let pkts = t.a_packets(t0);
    // PSN 104 is lost; 105..=112 arrive and wait.
    for p in pkts[..4].iter().chain(&pkts[5..13]) {
        t.deliver_to_b(t0, p);
    }
    // Until the deadline only the ACK of what came in order is owed.
    t.b.handle_timeout(t0 + (REORDER_WAIT - Duration::from_nanos(1)));
    assert_eq!(t.b.counters().out_of_seq_request, 0);
    t.b.handle_timeout(t0 + REORDER_WAIT);
    let b = *t.b.counters();
    assert_eq!(
        (b.out_of_seq_request, b.drops.out_of_seq, b.resequenced),
        (1, 7, 0)
    );
    // What comes later past the gap is dropped until A goes back.
    for p in &pkts[13..] {
        t.deliver_to_b(t0 + REORDER_WAIT, p);
    }
    assert_eq!(t.b.counters().drops.out_of_seq, 7 + 51);
    let t1 = t0 + REORDER_WAIT;
    t.b_replies(t1);
    assert_eq!(t.a.counters().rcvd_seq_err, 1);
    // A goes back to PSN 104; everything from there lands in order.
    for p in t.a_packets(t1) {
        t.deliver_to_b(t1, &p);
    }
    t.b_replies(t1);
    let a = *t.a.counters();
    assert_eq!(a.req_psns_resent, 60);
    t.assert_write_landed();
}

#[test]
fn more_ahead_than_a_reordering_explains_is_naked_at_once() {
    let mut t = pair(LEN);
    let t0 = Instant::ZERO;
    let pkts = t.a_packets(t0);
    for p in pkts[..4].iter().chain(&pkts[5..5 + REORDER_MAX_PACKETS]) {
        t.deliver_to_b(t0, p);
    }
    assert_eq!(t.b.counters().out_of_seq_request, 0);
    t.deliver_to_b(t0, &pkts[5 + REORDER_MAX_PACKETS]);
    let b = *t.b.counters();
    assert_eq!(
        (b.out_of_seq_request, b.drops.out_of_seq),
        (1, REORDER_MAX_PACKETS as u64)
    );
    assert_eq!(t.b.poll_timeout(), None);
}
