//! The ND v2 surface case by case: cleanup after device removal, the
//! statuses and contexts of flushed requests, inline data, shared receive
//! queues, what `Query` reports and that it is enforced.

mod common;

use common::{connect, side, status, Side};
use ndverbs_nd::*;
use ndverbs_testkit::{addr, nd::results};
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn sides() -> (Side, Side) {
    let (a, b) = addr::pair_v4();
    (side(a), side(b))
}

/// Waits until `cq` holds a completion, without taking it.
fn until_queued(cq: &CompletionQueue) {
    cq.notify(NotifyType::Any).wait().unwrap();
}

/// After removal every pending request has ended `ND_DEVICE_REMOVED`, and
/// the cleanup calls — `CancelOverlappedRequests` on every object, releasing
/// it — still succeed.
#[test]
fn cancel_and_release_work_after_removal() {
    let (a, b) = sides();
    let c = connect(&a, &b);
    let notify = c.passive.notify_disconnect().unwrap();
    let next = b.ad.create_connector().unwrap();
    let request = c.listener.get_connection_request(&next).unwrap();
    let srq = b.ad.create_shared_receive_queue(4, 1, 0).unwrap();
    b.ad.remove();
    assert_eq!(status(notify.wait()), NdStatus::DEVICE_REMOVED);
    assert_eq!(status(request.wait()), NdStatus::DEVICE_REMOVED);
    assert_eq!(
        status(c.passive.cancel_overlapped_requests()),
        NdStatus::SUCCESS
    );
    assert_eq!(status(next.cancel_overlapped_requests()), NdStatus::SUCCESS);
    assert_eq!(
        status(c.listener.cancel_overlapped_requests()),
        NdStatus::SUCCESS
    );
    b.cq.cancel_overlapped_requests();
    assert_eq!(status(b.mr.cancel_overlapped_requests()), NdStatus::SUCCESS);
    assert_eq!(status(srq.cancel_overlapped_requests()), NdStatus::SUCCESS);
    // Everything else is refused.
    assert_eq!(
        status(c.passive.notify_disconnect()),
        NdStatus::DEVICE_REMOVED
    );
    assert_eq!(status(b.cq.get_notify_affinity()), NdStatus::DEVICE_REMOVED);
    assert_eq!(status(srq.notify().wait()), NdStatus::DEVICE_REMOVED);
    drop((c, next, srq, b));
}

/// A Notify pending on a CQ when the adapter is removed ends
/// `ND_DEVICE_REMOVED`, even though the removal also flushes requests onto
/// that CQ; a Notify made later ends the same way at once.
#[test]
fn cq_notify_pending_at_removal_ends_device_removed() {
    let a = side(addr::v4());
    let any = a.cq.notify(NotifyType::Any);
    let errors = a.cq.notify(NotifyType::Errors);
    a.qp.receive(1, &[]).unwrap();
    a.ad.remove();
    assert_eq!(status(any.wait()), NdStatus::DEVICE_REMOVED);
    assert_eq!(status(errors.wait()), NdStatus::DEVICE_REMOVED);
    assert_eq!(
        status(a.cq.notify(NotifyType::Any).wait()),
        NdStatus::DEVICE_REMOVED
    );
    let r = results(&a.cq, 1);
    assert_eq!(r[0].status, NdStatus::DEVICE_REMOVED);
}

/// A request flushed before the removal is `ND_CANCELED` even if it is
/// polled after it; one the removal flushed is `ND_DEVICE_REMOVED`.
#[test]
fn flushes_before_removal_stay_canceled() {
    let a = side(addr::v4());
    let flushed =
        a.ad.create_queue_pair(&a.cq, &a.cq, 1, QueuePairSizes::new(4, 1))
            .unwrap();
    flushed.receive(10, &[]).unwrap();
    flushed.flush().unwrap();
    until_queued(&a.cq);
    a.qp.receive(20, &[]).unwrap();
    a.ad.remove();
    let r = results(&a.cq, 2);
    let got: Vec<_> = r
        .iter()
        .map(|r| (r.request_context, r.queue_pair_context, r.status))
        .collect();
    assert_eq!(
        got,
        [
            (10, 1, NdStatus::CANCELED),
            (20, 7, NdStatus::DEVICE_REMOVED)
        ]
    );
}

/// Releasing a QueuePair flushes what it had outstanding; those results
/// carry its context like every other of its results.
#[test]
fn released_queue_pair_results_carry_its_context() {
    let a = side(addr::v4());
    let qp =
        a.ad.create_queue_pair(&a.cq, &a.cq, 42, QueuePairSizes::new(4, 1))
            .unwrap();
    qp.receive(1, &[]).unwrap();
    qp.receive(2, &[]).unwrap();
    drop(qp);
    // A new QP on the same CQ, with another context, changes nothing.
    let _next =
        a.ad.create_queue_pair(&a.cq, &a.cq, 43, QueuePairSizes::new(4, 1))
            .unwrap();
    let r = results(&a.cq, 2);
    for (r, context) in r.iter().zip([1, 2]) {
        assert_eq!(
            (r.status, r.request_context, r.queue_pair_context),
            (NdStatus::CANCELED, context, 42)
        );
    }
}

/// `Query` reports the device's own limits, and each is where refusal
/// begins: at the limit a queue pair is made, beyond it not.
#[test]
fn query_reports_the_limits_that_are_enforced() {
    let a = side(addr::v4());
    let info = a.ad.query(ND_VERSION_2).unwrap();
    let l = a.ad.device().query().limits;
    assert_eq!(info.max_registration_size as u64, l.max_mr_size);
    assert_eq!(
        (
            info.max_initiator_sge,
            info.max_receive_sge,
            info.max_read_sge
        ),
        (l.max_sge, l.max_sge, l.max_sge)
    );
    assert_eq!(u64::from(info.max_transfer_length), l.max_msg_size);
    assert_eq!(info.max_inline_data_size, l.max_inline_data);
    assert_eq!(
        (info.max_inbound_read_limit, info.max_outbound_read_limit),
        (u32::from(l.max_qp_rd_atom), u32::from(l.max_qp_rd_atom))
    );
    assert_eq!(
        (
            info.max_receive_queue_depth,
            info.max_initiator_queue_depth,
            info.max_shared_receive_queue_depth,
            info.max_completion_queue_depth
        ),
        (l.max_qp_wr, l.max_qp_wr, l.max_qp_wr, l.max_cqe)
    );
    assert_eq!(info.adapter_flags, AdapterFlags::REPORTED);
    assert_eq!(a.ad.query(ND_VERSION_1).unwrap(), info);
    // The limits hold exactly.
    let mr = a.ad.create_memory_region().unwrap();
    assert_eq!(
        status(
            mr.register(info.max_registration_size + 1, MrFlags::empty())
                .wait()
        ),
        NdStatus::INVALID_BUFFER_SIZE
    );
    let srq =
        a.ad.create_shared_receive_queue(info.max_shared_receive_queue_depth, 1, 0);
    assert!(srq.is_ok());
    assert_eq!(
        status(a.ad.create_shared_receive_queue(info.max_shared_receive_queue_depth + 1, 1, 0)),
        NdStatus::INVALID_PARAMETER
    );
    assert_eq!(
        status(
            srq.unwrap()
                .modify(info.max_shared_receive_queue_depth + 1, 0)
        ),
        NdStatus::INVALID_PARAMETER
    );
}

/// `ND_OP_FLAG_INLINE`: an SGE's token may be wrong as long as its bytes
/// lie in a region of the adapter; bytes in no region are
/// `ND_ACCESS_VIOLATION` at post time; only Send and Write take the flag.
#[test]
fn inline_sges_are_copied_from_registered_memory() {
    let (a, b) = sides();
    let _c = connect(&a, &b);
    a.mr.write(100, b"abcdefgh").unwrap();
    let recv = NdSge::new(b.mr.address(), 64, b.mr.local_token());
    b.qp.receive(1, &[recv]).unwrap();
    // Three SGEs (the QP takes two), one with a token that names nothing.
    let sges = [
        NdSge::new(a.mr.address() + 100, 2, a.mr.local_token()),
        NdSge::new(a.mr.address() + 102, 2, 0),
        NdSge::new(a.mr.address() + 104, 4, a.mr.local_token()),
    ];
    a.qp.send(2, &sges, OpFlags::INLINE).unwrap();
    assert_eq!(results(&a.cq, 1)[0].status, NdStatus::SUCCESS);
    let r = results(&b.cq, 1);
    assert_eq!(
        (r[0].status, r[0].bytes_transferred),
        (NdStatus::SUCCESS, 8)
    );
    let mut got = [0u8; 8];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"abcdefgh");
    // Bytes in no registered region; one running past its region's end.
    let nowhere = [NdSge::new(0x1000, 4, a.mr.local_token())];
    let past_end = [NdSge::new(
        a.mr.address() + (1 << 16) - 2,
        4,
        a.mr.local_token(),
    )];
    let (addr, token) = (b.mr.address(), b.mr.remote_token());
    for sges in [&nowhere, &past_end] {
        assert_eq!(
            status(a.qp.send(3, sges, OpFlags::INLINE)),
            NdStatus::ACCESS_VIOLATION
        );
        assert_eq!(
            status(a.qp.write(3, sges, addr, token, OpFlags::INLINE)),
            NdStatus::ACCESS_VIOLATION
        );
    }
    // A deregistered region is no source either.
    let gone = a.ad.create_memory_region().unwrap();
    gone.register(64, MrFlags::empty()).wait().unwrap();
    let sge = [NdSge::new(gone.address(), 4, gone.local_token())];
    gone.deregister().wait().unwrap();
    assert_eq!(
        status(a.qp.send(3, &sge, OpFlags::INLINE)),
        NdStatus::ACCESS_VIOLATION
    );
    // Read, Bind and Invalidate do not take the flag.
    let one = [NdSge::new(a.mr.address(), 4, a.mr.local_token())];
    assert_eq!(
        status(a.qp.read(4, &one, addr, token, OpFlags::INLINE)),
        NdStatus::INVALID_PARAMETER_6
    );
    // The connection is intact: an inline Write lands.
    a.qp.write(5, &sges[..1], addr + 32, token, OpFlags::INLINE)
        .unwrap();
    assert_eq!(results(&a.cq, 1)[0].status, NdStatus::SUCCESS);
    b.mr.read(32, &mut got[..2]).unwrap();
    assert_eq!(&got[..2], b"ab");
}

/// The shared receive queue's Notify: completes when the outstanding
/// receives fall below the threshold (an incoming Send takes one), all
/// pending at once; `ND_CANCELED` when cancelled or the queue is released,
/// `ND_DEVICE_REMOVED` on removal.
#[test]
fn srq_notify_threshold_cancel_release_and_removal() {
    let (a, b) = sides();
    let srq = b.ad.create_shared_receive_queue(8, 1, 3).unwrap();
    let bqp =
        b.ad.create_queue_pair_with_srq(&b.cq, &b.cq, &srq, 9, QueuePairSizes::new(4, 1))
            .unwrap();
    let _c = common::connect_qps((&a.ad, &a.qp), (&b.ad, &bqp));
    for i in 0..3 {
        srq.receive(i, &[]).unwrap();
    }
    let (mut first, mut second) = (srq.notify(), srq.notify());
    std::thread::sleep(Duration::from_millis(20));
    assert!(first.try_take().is_none(), "3 outstanding, threshold 3");
    a.qp.send(1, &[], OpFlags::empty()).unwrap();
    assert_eq!(
        status(first.wait_timeout(T).expect("below the threshold")),
        NdStatus::SUCCESS
    );
    assert_eq!(
        status(second.wait_timeout(T).expect("together")),
        NdStatus::SUCCESS
    );
    let r = results(&b.cq, 1);
    assert_eq!((r[0].request_context, r[0].queue_pair_context), (0, 9));
    // Below the threshold already: at once.
    assert_eq!(status(srq.notify().wait()), NdStatus::SUCCESS);
    // Threshold lowered: pends again until cancelled.
    srq.modify(0, 1).unwrap();
    let pending = srq.notify();
    srq.cancel_overlapped_requests().unwrap();
    assert_eq!(status(pending.wait()), NdStatus::CANCELED);
    // Released with a Notify pending.
    let other = b.ad.create_shared_receive_queue(2, 1, 1).unwrap();
    other.receive(1, &[]).unwrap();
    let orphan = other.notify();
    drop(other);
    assert_eq!(status(orphan.wait()), NdStatus::CANCELED);
    // Removal.
    let pending = srq.notify();
    b.ad.remove();
    assert_eq!(status(pending.wait()), NdStatus::DEVICE_REMOVED);
    assert_eq!(status(srq.modify(4, 0)), NdStatus::DEVICE_REMOVED);
    assert_eq!(status(srq.get_notify_affinity()), NdStatus::DEVICE_REMOVED);
}
