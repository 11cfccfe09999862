//! Owned buffers registered without `unsafe` (`Pd::reg_buf`): peers reach
//! them in place, the buffer comes back with what they wrote, and once the
//! region is gone its keys reach nothing.

use ndverbs_testkit::verbs::{pattern, wait_wc, wc_ok, Pair};
use ndverbs_verbs::{Access, AlignedBuf, RemoteAddr, SendOp, SendWr, WcStatus};

#[test]
fn a_peers_write_lands_in_the_vec_and_the_vec_comes_back() {
    let p = Pair::new();
    let buf = vec![0u8; 64 * 1024];
    let mr =
        p.b.pd
            .reg_buf(buf, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let data = pattern(7, 40_000);
    p.a.mr.write(0, &data).unwrap();
    let to = RemoteAddr {
        va: mr.addr() + 1000,
        rkey: mr.rkey(),
    };
    p.a.qp
        .post_send(SendWr::new(
            1,
            SendOp::Write(to),
            vec![p.a.mr.sge(0, 40_000)],
        ))
        .unwrap();
    wc_ok(&p.a.cq);
    let back = mr.into_inner().map_err(|(_, e)| e).unwrap();
    assert_eq!(back.len(), 64 * 1024);
    assert!(back[..1000].iter().all(|&b| b == 0));
    assert!(back[1000..41_000] == data[..], "the WRITE's bytes");
}

#[test]
fn sends_from_and_receives_into_owned_buffers_of_each_kind() {
    let p = Pair::new();
    let mut src = AlignedBuf::zeroed(8192, 4096).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(9, 8192));
    let src = p.a.pd.reg_buf(src, Access::LOCAL_WRITE).unwrap();
    let dst: Box<[u8]> = vec![0u8; 8192].into_boxed_slice();
    let dst = p.b.pd.reg_buf(dst, Access::LOCAL_WRITE).unwrap();
    p.b.qp
        .post_recv(ndverbs_verbs::RecvWr::new(2, vec![dst.sge(0, 8192)]))
        .unwrap();
    p.a.qp
        .post_send(SendWr::new(3, SendOp::Send, vec![src.sge(0, 8192)]))
        .unwrap();
    wc_ok(&p.a.cq);
    assert_eq!(wc_ok(&p.b.cq).byte_len, 8192);
    let got = dst.into_inner().map_err(|(_, e)| e).unwrap();
    assert!(got[..] == pattern(9, 8192)[..]);
    let src = src.into_inner().map_err(|(_, e)| e).unwrap();
    assert_eq!(src.as_slice().as_ptr() as usize % 4096, 0);
}

#[test]
fn a_dropped_region_s_key_reaches_nothing() {
    let p = Pair::new();
    let mr =
        p.b.pd
            .reg_buf(vec![0u8; 4096], Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let stale = RemoteAddr {
        va: mr.addr(),
        rkey: mr.rkey(),
    };
    drop(mr); // deregistered, then the Vec freed
    p.a.qp
        .post_send(SendWr::new(
            4,
            SendOp::Write(stale),
            vec![p.a.mr.sge(0, 4096)],
        ))
        .unwrap();
    assert_eq!(wait_wc(&p.a.cq).status, WcStatus::RemAccessErr);
}

#[test]
fn empty_buffers_are_refused() {
    let p = Pair::new();
    let e = p.a.pd.reg_buf(Vec::new(), Access::LOCAL_WRITE).unwrap_err();
    assert_eq!(e.kind(), ndverbs_verbs::ErrorKind::InvalidArgument, "{e}");
}
