//! `Mr::rereg_raw`: a region re-registered keeps its keys, so the R_Key a
//! peer holds now reaches the new memory, PD and rights; refusals give the
//! region back unchanged.

use ndverbs_testkit::verbs::{wait_wc, Pair};
use ndverbs_verbs::*;
use std::ptr::NonNull;

/// A buffer that lives for the rest of the test process (the regions may
/// point at it until they are dropped).
fn buffer(len: usize) -> NonNull<u8> {
    let b: &'static mut [u64] = Box::leak(vec![0u64; len / 8].into_boxed_slice());
    NonNull::new(b.as_mut_ptr().cast()).expect("non-null")
}

/// Bytes of a leaked buffer, read as the engine writes them (copies only).
fn read(p: NonNull<u8>, len: usize) -> Vec<u8> {
    // SAFETY: `len` bytes of a leaked buffer; nothing writes them while the
    // test reads (every write has completed).
    unsafe { std::slice::from_raw_parts(p.as_ptr(), len).to_vec() }
}

/// An inline RDMA WRITE from a to `va`/`rkey`; its completion status.
fn write(pair: &Pair, va: u64, rkey: u32, data: &[u8]) -> WcStatus {
    let mut wr = SendWr::new(1, SendOp::Write(RemoteAddr { va, rkey }), vec![]);
    wr.inline = Some(data.to_vec());
    pair.a.qp.post_send(wr).expect("post write");
    wait_wc(&pair.a.cq).status
}

#[test]
fn a_reregistered_region_keeps_its_keys_for_new_memory_pd_and_rights() {
    let mut pair = Pair::new();
    let (b1, b2) = (buffer(4096), buffer(4096));
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    // SAFETY: leaked buffers, touched only by the engine and by copies.
    let mr = unsafe { pair.b.pd.reg_mr_raw(b1, 4096, rw) }.expect("reg");
    let (lkey, rkey) = (mr.lkey(), mr.rkey());
    assert_eq!(
        write(&pair, b1.as_ptr() as u64, rkey, b"one"),
        WcStatus::Success
    );
    assert_eq!(read(b1, 3), b"one");

    // Refused, the region unchanged and still reachable: rights the engine
    // refuses, a PD of another device.
    // SAFETY: as above (refused before the memory is used).
    let (mr, e) = unsafe { mr.rereg_raw(&pair.b.pd, b2, 4096, Access::REMOTE_WRITE) }
        .expect_err("remote write without local write");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // SAFETY: as above.
    let (mr, e) =
        unsafe { mr.rereg_raw(&pair.a.pd, b2, 4096, rw) }.expect_err("another device's PD");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // A window bound to it names the old memory: refused while it is bound.
    let mw = pair.b.pd.alloc_mw().expect("mw");
    mw.bind(&mr, b1.as_ptr() as u64, 64, Access::REMOTE_WRITE)
        .expect("bind");
    // SAFETY: as above.
    let (mr, e) = unsafe { mr.rereg_raw(&pair.b.pd, b2, 4096, rw) }.expect_err("window bound");
    assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
    drop(mw);
    assert_eq!((mr.lkey(), mr.addr()), (lkey, b1.as_ptr() as u64));
    assert_eq!(
        write(&pair, b1.as_ptr() as u64, rkey, b"two"),
        WcStatus::Success
    );

    // New memory, same keys: the peer's R_Key reaches b2, and b1 is out.
    // SAFETY: as above.
    let mr = unsafe { mr.rereg_raw(&pair.b.pd, b2, 4096, rw) }.expect("rereg");
    assert_eq!(
        (mr.lkey(), mr.rkey(), mr.addr()),
        (lkey, rkey, b2.as_ptr() as u64)
    );
    assert_eq!(
        write(&pair, b2.as_ptr() as u64 + 8, rkey, b"three"),
        WcStatus::Success
    );
    assert_eq!(read(b2, 13)[8..], *b"three");
    assert_eq!(
        write(&pair, b1.as_ptr() as u64, rkey, b"x"),
        WcStatus::RemAccessErr
    );
    assert_eq!(read(b1, 3), b"two");

    // Another PD of the same device: the QP's PD no longer reaches it.
    pair.new_qps();
    let pd2 = pair.b.dev.alloc_pd().expect("pd");
    // SAFETY: as above.
    let mr = unsafe { mr.rereg_raw(&pd2, b2, 4096, rw) }.expect("rereg pd");
    assert_eq!(
        write(&pair, b2.as_ptr() as u64, rkey, b"y"),
        WcStatus::RemAccessErr
    );

    // Back, without remote write: refused rights at the responder.
    pair.new_qps();
    // SAFETY: as above.
    let mr = unsafe { mr.rereg_raw(&pair.b.pd, b2, 4096, Access::LOCAL_WRITE) }.expect("rights");
    assert_eq!(
        write(&pair, b2.as_ptr() as u64, rkey, b"z"),
        WcStatus::RemAccessErr
    );
    assert_eq!(read(b2, 1), [0]);
    drop(pd2);
    assert!(mr.deregister().is_ok());
}
