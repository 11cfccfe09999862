//! Happy paths: every operation, no faults.

use crate::harness::*;
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::*;
use ndverbs_proto::time::Duration;

#[test]
fn send_multi_packet() {
    let mut p = Pair::new(Config::default());
    let data = pattern(1, 5000);
    let src = p.region(Side::A, 0x1000, data.clone(), Access::NONE);
    let dst = p.region(Side::B, 0x8000, vec![0; 8192], Access::NONE);
    p.b.post_recv(RecvWr::new(100, vec![dst.sge(0, 8192)]));
    p.a.post_send(SendWr::new(1, SendOp::Send, vec![src.sge(0, 5000)]));
    p.run_idle(Duration::from_secs(1));
    p.a.check_completions(true, true);
    p.b.check_completions(true, true);
    let s = p.a.send_wcs();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].status, WcStatus::Success);
    let r = p.b.recv_wcs();
    assert_eq!(r[0].status, WcStatus::Success);
    assert_eq!(r[0].byte_len, 5000);
    assert_eq!(&p.b.mem.bytes(dst.lkey)[..5000], &data[..]);
    assert_eq!(p.a.qp.counters().rdma_sends, 1);
    assert_eq!(p.b.qp.counters().rdma_recvs, 1);
}

#[test]
fn send_with_imm_and_invalidate_and_inline() {
    let mut p = Pair::new(Config::default());
    let src = p.region(Side::A, 0x1000, pattern(2, 3000), Access::NONE);
    let dst = p.region(Side::B, 0x8000, vec![0; 4096], Access::NONE);
    let victim = p.region(Side::B, 0x20_000, vec![0; 64], Access::REMOTE_WRITE);
    p.b.mem.allow_remote_invalidate(victim.rkey);
    for i in 0..3 {
        p.b.post_recv(RecvWr::new(100 + i, vec![dst.sge(0, 4096)]));
    }
    let mut wr = SendWr::new(1, SendOp::SendImm(0xdead_beef), vec![src.sge(0, 3000)]);
    wr.solicited = true;
    p.a.post_send(wr);
    p.a.post_send(SendWr::new(
        2,
        SendOp::SendInv(victim.rkey),
        vec![src.sge(0, 1500)],
    ));
    p.a.post_send(SendWr::new_inline(3, SendOp::Send, b"inline!".to_vec()));
    p.run_idle(Duration::from_secs(1));
    p.a.check_completions(true, true);
    p.b.check_completions(true, true);
    let r = p.b.recv_wcs();
    assert_eq!(r[0].imm, Some(0xdead_beef));
    assert!(r[0].solicited);
    assert_eq!(r[0].byte_len, 3000);
    assert_eq!(r[1].invalidated_rkey, Some(victim.rkey));
    assert!(!p.b.mem.is_valid(victim.rkey));
    assert_eq!(r[2].byte_len, 7);
    assert_eq!(&p.b.mem.bytes(dst.lkey)[..7], b"inline!");
    assert!(r
        .iter()
        .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Recv));
}

#[test]
fn write_and_write_imm() {
    let mut p = Pair::new(Config::default());
    let data = pattern(3, 10_000);
    let src = p.region(Side::A, 0x1000, data.clone(), Access::NONE);
    let dst = p.region(Side::B, 0x40_000, vec![0; 20_000], Access::REMOTE_WRITE);
    let rbuf = p.region(Side::B, 0x90_000, vec![0; 16], Access::NONE);
    p.b.post_recv(RecvWr::new(7, vec![rbuf.sge(0, 16)]));
    let remote = RemoteAddr {
        va: dst.addr + 100,
        rkey: dst.rkey,
    };
    p.a.post_send(SendWr::new(
        1,
        SendOp::Write(remote),
        vec![src.sge(0, 10_000)],
    ));
    let remote2 = RemoteAddr {
        va: dst.addr + 12_000,
        rkey: dst.rkey,
    };
    p.a.post_send(SendWr::new(
        2,
        SendOp::WriteImm(remote2, 42),
        vec![src.sge(0, 2048)],
    ));
    // Zero-length WRITE needs no valid key.
    p.a.post_send(SendWr::new(
        3,
        SendOp::Write(RemoteAddr { va: 0, rkey: 0xbad }),
        vec![],
    ));
    p.run_idle(Duration::from_secs(1));
    p.a.check_completions(true, true);
    p.b.check_completions(true, true);
    let m = p.b.mem.bytes(dst.lkey);
    assert_eq!(&m[100..10_100], &data[..]);
    assert_eq!(&m[12_000..14_048], &data[..2048]);
    let r = p.b.recv_wcs();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(r[0].imm, Some(42));
    assert_eq!(r[0].byte_len, 2048);
    assert!(p.a.send_wcs().iter().all(|w| w.status == WcStatus::Success));
}

#[test]
fn read_multi_packet_and_zero_length() {
    let mut p = Pair::new(Config::default());
    let data = pattern(4, 9000);
    let src = p.region(Side::B, 0x40_000, data.clone(), Access::REMOTE_READ);
    let dst = p.region(Side::A, 0x1000, vec![0; 9000], Access::NONE);
    let remote = RemoteAddr {
        va: src.addr,
        rkey: src.rkey,
    };
    // Two SGEs on the local side.
    p.a.post_send(SendWr::new(
        1,
        SendOp::Read(remote),
        vec![dst.sge(0, 4000), dst.sge(4000, 5000)],
    ));
    p.a.post_send(SendWr::new(
        2,
        SendOp::Read(RemoteAddr { va: 0, rkey: 0 }),
        vec![],
    ));
    p.run_idle(Duration::from_secs(1));
    p.a.check_completions(true, true);
    let s = p.a.send_wcs();
    assert_eq!(s[0].opcode, WcOpcode::RdmaRead);
    assert_eq!(s[0].byte_len, 9000);
    assert!(s.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(p.a.mem.bytes(dst.lkey), &data[..]);
    // 9 response packets + 1 for the empty READ, plus B's nothing else.
    assert_eq!(p.b.qp.counters().sent_pkts, 10);
}

#[test]
fn atomics() {
    let mut p = Pair::new(Config::default());
    let mut init = vec![0u8; 16];
    init[..8].copy_from_slice(&5u64.to_ne_bytes());
    let target = p.region(Side::B, 0x40_000, init, Access::REMOTE_ATOMIC);
    let res = p.region(Side::A, 0x1000, vec![0; 24], Access::NONE);
    let remote = RemoteAddr {
        va: target.addr,
        rkey: target.rkey,
    };
    // 5 + 10; then 15 → 99 (it was 15); then no swap to 7 (it is 99).
    let cas = |compare, swap| SendOp::CompareSwap {
        remote,
        compare,
        swap,
    };
    let ops = [
        SendOp::FetchAdd { remote, add: 10 },
        cas(15, 99),
        cas(15, 7),
    ];
    for (i, op) in ops.into_iter().enumerate() {
        p.a.post_send(SendWr::new(
            i as u64 + 1,
            op,
            vec![res.sge(8 * i as u32, 8)],
        ));
    }
    p.run_idle(Duration::from_secs(1));
    p.a.check_completions(true, true);
    let s = p.a.send_wcs();
    assert!(s.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(s[0].opcode, WcOpcode::FetchAdd);
    assert_eq!(s[1].opcode, WcOpcode::CompSwap);
    let r = p.a.mem.bytes(res.lkey);
    let v = |i: usize| u64::from_ne_bytes(r[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!((v(0), v(1), v(2)), (5, 15, 99));
    let t = p.b.mem.bytes(target.lkey);
    assert_eq!(u64::from_ne_bytes(t[..8].try_into().unwrap()), 99);
}

#[test]
fn unsignaled_fence_and_rd_atomic_limit() {
    let cfg = Config {
        max_rd_atomic: 1,
        ..Config::default()
    };
    let mut p = Pair::new(cfg);
    let data = pattern(5, 4096);
    let src = p.region(
        Side::B,
        0x40_000,
        data.clone(),
        Access::REMOTE_READ | Access::REMOTE_WRITE,
    );
    let dst = p.region(Side::A, 0x1000, vec![0; 16_384], Access::NONE);
    let remote = RemoteAddr {
        va: src.addr,
        rkey: src.rkey,
    };
    for i in 0..3u64 {
        p.a.post_send(SendWr::new(
            i,
            SendOp::Read(remote),
            vec![dst.sge(i as u32 * 4096, 4096)],
        ));
    }
    // Fenced WRITE of what the READs brought: waits for all three.
    let mut w = SendWr::new(
        10,
        SendOp::Write(RemoteAddr {
            va: src.addr,
            rkey: src.rkey,
        }),
        vec![dst.sge(4096, 8)],
    );
    w.fence = true;
    w.signaled = false;
    p.a.post_send(w);
    p.a.post_send(SendWr::new(11, SendOp::Send, vec![]));
    let rb = p.region(Side::B, 0x90_000, vec![0; 8], Access::NONE);
    p.b.post_recv(RecvWr::new(1, vec![rb.sge(0, 8)]));
    p.run_idle(Duration::from_secs(1));
    p.a.check_completions(true, true);
    let s = p.a.send_wcs();
    assert_eq!(
        s.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![0, 1, 2, 11]
    );
    for i in 0..3 {
        assert_eq!(
            &p.a.mem.bytes(dst.lkey)[i * 4096..(i + 1) * 4096],
            &data[..]
        );
    }
}

#[test]
fn psn_wraps_at_2_pow_24() {
    let cfg = Config {
        psn_a: 0xff_fffc,
        psn_b: 0xff_fffe,
        mtu: PathMtu::Mtu256,
        ..Config::default()
    };
    let mut p = Pair::new(cfg);
    let data = pattern(6, 2000);
    let src = p.region(Side::A, 0x1000, data.clone(), Access::REMOTE_READ);
    let dst = p.region(Side::B, 0x40_000, vec![0; 4000], Access::REMOTE_WRITE);
    p.b.post_recv(RecvWr::new(1, vec![dst.sge(2000, 2000)]));
    p.a.post_send(SendWr::new(1, SendOp::Send, vec![src.sge(0, 2000)]));
    // B reads A's buffer across B's own wrap.
    let bdst = p.region(Side::B, 0x80_000, vec![0; 2000], Access::NONE);
    p.b.post_send(SendWr::new(
        2,
        SendOp::Read(RemoteAddr {
            va: src.addr,
            rkey: src.rkey,
        }),
        vec![bdst.sge(0, 2000)],
    ));
    p.run_idle(Duration::from_secs(1));
    p.a.check_completions(true, true);
    p.b.check_completions(true, true);
    assert_eq!(&p.b.mem.bytes(dst.lkey)[2000..], &data[..]);
    assert_eq!(p.b.mem.bytes(bdst.lkey), &data[..]);
    assert_eq!(p.a.qp.query().sq_psn, (0xff_fffc + 8) & 0xff_ffff);
    assert_eq!(p.b.qp.query().sq_psn, (0xff_fffe + 8) & 0xff_ffff);
}
