//! What a queue pair costs in memory, and that its post queues still take
//! a full queue's worth of posts made while another thread runs the
//! engine.
//!
//! Most posts go straight into the protocol (the engine is free); the post
//! queues, and the protocol's receive queue, grow as they are used, so a
//! QP that waits with nothing posted — most of an MPI job's connections, or
//! `ndv bench` P4's 10,000 pairs — holds a few KiB whatever its depth. In
//! its own binary because it counts the live heap bytes of the process.

mod common;

use common::*;
use ndverbs_engine::config::Progress;
use ndverbs_engine::nic::{Nic, QpInit};
use ndverbs_proto::rc::{PathMtu, QpCaps, SendOp, SendWr, WcOpcode, WcStatus};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// The system allocator, counting the bytes it holds for the process.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Queue pairs created for the count.
const QPS: usize = 64;

#[test]
fn an_unused_deep_queue_pair_holds_a_few_kib_and_its_queues_take_every_post() {
    // Manual progress: no engine thread allocating beside the count.
    let (ia, ib) = ndverbs_testkit::addr::pair_v4();
    let nic = Nic::open(ia, Progress::Manual).unwrap();
    let pd = nic.alloc_pd().unwrap();
    let (cq, _cq) = nic.create_cq(4096).unwrap();
    // rc_pingpong's and perftest's depth: 128 sends and 128 receives.
    let init = QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        caps: QpCaps {
            max_send_wr: 128,
            max_send_sge: 1,
            max_inline_data: 0,
            sq_sig_all: false,
        },
        max_recv_wr: 128,
        max_recv_sge: 1,
    };
    // One first, so that the tables' growth is not in the count.
    let mut qps = vec![nic.create_qp(init).unwrap()];
    let before = LIVE.load(Ordering::Relaxed);
    qps.extend((0..QPS).map(|_| nic.create_qp(init).unwrap()));
    let per_qp = (LIVE.load(Ordering::Relaxed) - before) / QPS as isize;
    // With the post queues and the receive queue allocated to their depth
    // at creation, 33 KiB.
    assert!(per_qp <= 6 * 1024, "{per_qp} heap bytes per unused QP");
    for qp in qps {
        nic.destroy_qp(qp.qpn()).unwrap();
    }
    drop(nic);

    // A full send queue and a full receive queue posted while another
    // thread holds the engine: through the post queues, every work request
    // completes, in order, with its own bytes.
    let nic_a = Nic::open(ia, Progress::Thread).unwrap();
    let nic_b = Nic::open(ib, Progress::Thread).unwrap();
    let shape = Shape::queues(128, 1, 0, 4096, 1 << 20);
    let (a, b) = (Side::on(nic_a, shape), Side::on(nic_b, shape));
    connect(&a, &b, PathMtu::Mtu1024);
    for i in 0..128 {
        a.mr.write(i * 4096, &pattern(i as u64, 4096)).unwrap();
    }
    // Neither engine thread can step while this thread holds its NIC: the
    // posts queue, and the step after the release takes them.
    b.nic.with_engine_held(|| {
        for i in 0..128 {
            b.post_recv(i as u64, i * 4096, 4096);
        }
    });
    a.nic.with_engine_held(|| {
        for i in 0..128 {
            let sge = a.sge(i * 4096, 4096);
            a.post_send(SendWr::new(1000 + i as u64, SendOp::Send, vec![sge]));
        }
    });
    let (wa, wb) = (wait_n(&a, 128), wait_n(&b, 128));
    for (i, (sent, got)) in wa.iter().zip(&wb).enumerate() {
        assert_eq!(
            (sent.wr_id, sent.status),
            (1000 + i as u64, WcStatus::Success)
        );
        assert_eq!(
            (got.wr_id, got.status, got.opcode, got.byte_len),
            (i as u64, WcStatus::Success, WcOpcode::Recv, 4096)
        );
    }
    assert_eq!(b.bytes(0, 128 * 4096), a.bytes(0, 128 * 4096));
}
