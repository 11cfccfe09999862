//! Two NICs on loopback addresses with one connected RC QP pair, and
//! sides for connections through the CM (a QP in INIT, as ND creates them).
#![allow(dead_code)]

use ndverbs_engine::config::Progress;
use ndverbs_engine::cq::CompletionQueue;
use ndverbs_engine::mr::{Region, RegionBuf};
use ndverbs_engine::nic::{Nic, QpInit, QpShared};
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::{AttrMask, PathMtu, QpAttr, QpCaps, QpState, WorkCompletion};
use ndverbs_wire::cma::gid_of;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One side: NIC, PD, CQ, QP and a region.
pub struct Side {
    pub nic: Nic,
    pub pd: u32,
    pub cq: Arc<CompletionQueue>,
    pub qp: Arc<QpShared>,
    pub mr: Arc<Region>,
}

pub const ALL: Access = Access::ALL;

/// Opens two NICs on `127.<net>.<host>.1` and `.2` and connects one QP
/// pair between them (path MTU `mtu`, `region` bytes of memory each).
pub fn pair(net: u8, mode: Progress, mtu: PathMtu, region: usize) -> (Side, Side) {
    let a = side(IpAddr::from([127, 77, net, 1]), mode, region);
    let b = side(IpAddr::from([127, 77, net, 2]), mode, region);
    connect(&a, &b, mtu, 0x10_0000);
    connect(&b, &a, mtu, 0x20_0000);
    (a, b)
}

pub fn side(ip: IpAddr, mode: Progress, region: usize) -> Side {
    side_on(
        Nic::open(ip, mode).unwrap_or_else(|e| panic!("open {ip}: {e}")),
        region,
    )
}

/// Connects one QP pair between two NICs already open (see [`pair`]).
pub fn pair_on(a: Nic, b: Nic, mtu: PathMtu, region: usize) -> (Side, Side) {
    let (a, b) = (side_on(a, region), side_on(b, region));
    connect(&a, &b, mtu, 0x10_0000);
    connect(&b, &a, mtu, 0x20_0000);
    (a, b)
}

/// A side on `nic`: PD, CQ, QP and `region` bytes of memory.
pub fn side_on(nic: Nic, region: usize) -> Side {
    let pd = nic.alloc_pd().unwrap();
    let (cq_id, cq) = nic.create_cq(4096).unwrap();
    let caps = QpCaps {
        max_send_wr: 1024,
        max_send_sge: 4,
        max_inline_data: 256,
        sq_sig_all: false,
    };
    let qp = nic
        .create_qp(QpInit {
            pd,
            send_cq: cq_id,
            recv_cq: cq_id,
            srq: None,
            caps,
            max_recv_wr: 1024,
            max_recv_sge: 4,
        })
        .unwrap();
    let mr = nic
        .reg_mr(pd, RegionBuf::alloc(region).unwrap(), ALL)
        .unwrap();
    Side {
        nic,
        pd,
        cq,
        qp,
        mr,
    }
}

/// Moves `a`'s QP to RTS towards `b`'s QP (a's send PSN `psn`; it expects b's
/// PSN per the convention of `pair`).
pub fn connect(a: &Side, b: &Side, mtu: PathMtu, _psn: u32) {
    let a_psn = psn_of(a);
    let b_psn = psn_of(b);
    let mut attr = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: ALL,
        ..QpAttr::default()
    };
    a.nic
        .modify_qp(
            a.qp.qpn(),
            &attr,
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
        )
        .unwrap();
    attr.qp_state = QpState::Rtr;
    attr.path_mtu = mtu;
    attr.dest_qp_num = b.qp.qpn();
    attr.rq_psn = b_psn;
    attr.max_dest_rd_atomic = 16;
    attr.min_rnr_timer = 1;
    attr.av.dgid = gid_of(b.nic.local()).octets();
    attr.av.hop_limit = 64;
    a.nic
        .modify_qp(
            a.qp.qpn(),
            &attr,
            AttrMask::STATE
                | AttrMask::AV
                | AttrMask::PATH_MTU
                | AttrMask::DEST_QPN
                | AttrMask::RQ_PSN
                | AttrMask::MAX_DEST_RD_ATOMIC
                | AttrMask::MIN_RNR_TIMER,
        )
        .unwrap();
    attr.qp_state = QpState::Rts;
    attr.sq_psn = a_psn;
    attr.timeout = 10;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 16;
    a.nic
        .modify_qp(
            a.qp.qpn(),
            &attr,
            AttrMask::STATE
                | AttrMask::SQ_PSN
                | AttrMask::TIMEOUT
                | AttrMask::RETRY_CNT
                | AttrMask::RNR_RETRY
                | AttrMask::MAX_QP_RD_ATOMIC,
        )
        .unwrap();
}

/// A PSN derived from the QPN (both sides can compute the other's).
pub fn psn_of(s: &Side) -> u32 {
    (s.qp.qpn().wrapping_mul(2_654_435_761)) & 0x00ff_ffff
}

/// Polls `cq` (driving manual progress) until `n` completions arrived.
pub fn wait_n(s: &Side, n: usize, limit: Duration) -> Vec<WorkCompletion> {
    let t0 = Instant::now();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        if let Some(wc) = s.cq.poll_one() {
            out.push(wc);
            continue;
        }
        assert!(
            t0.elapsed() < limit,
            "timed out with {} of {n} completions: {out:?}",
            out.len()
        );
        if s.nic.mode() == Progress::Manual {
            s.nic.progress();
        } else {
            std::thread::yield_now();
        }
    }
    out
}

/// Drives both manual-mode NICs until `pred` holds.
pub fn drive_until(a: &Side, b: &Side, limit: Duration, mut pred: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !pred() {
        assert!(t0.elapsed() < limit, "timed out");
        a.nic.progress();
        b.nic.progress();
    }
}

/// `len` bytes of a reproducible xorshift pattern for `seed` (bulk-transfer checks).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A side for connections through the CM: NIC, CQ, one QP already in
/// INIT (as ND creates them, so receives can be posted before connecting)
/// and a region.
pub struct CmSide {
    pub ad: Nic,
    pub cq: Arc<CompletionQueue>,
    pub qp: Arc<QpShared>,
    pub mr: Arc<Region>,
}

/// Builds a [`CmSide`] on `ad`: a CQ of `cq_depth`, a QP with `caps` and
/// `max_recv_wr` receives (`caps.max_send_sge` SGEs each way), `region`
/// bytes of memory.
pub fn cm_side(ad: Nic, caps: QpCaps, cq_depth: u32, max_recv_wr: u32, region: usize) -> CmSide {
    let pd = ad.alloc_pd().unwrap();
    let (cq_id, cq) = ad.create_cq(cq_depth).unwrap();
    let qp = ad
        .create_qp(QpInit {
            pd,
            send_cq: cq_id,
            recv_cq: cq_id,
            srq: None,
            caps,
            max_recv_wr,
            max_recv_sge: caps.max_send_sge,
        })
        .unwrap();
    let a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: ALL,
        ..QpAttr::default()
    };
    ad.modify_qp(
        qp.qpn(),
        &a,
        AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    let mr = ad
        .reg_mr(pd, RegionBuf::alloc(region).unwrap(), ALL)
        .unwrap();
    CmSide { ad, cq, qp, mr }
}
