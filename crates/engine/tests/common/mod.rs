//! What the engine's integration tests share, written once:
//!
//! * [`Side`]: a NIC with a PD, a CQ (for both queues), one RC QP and a
//!   registered region, in the [`Shape`] a test asks for; [`pair`] opens two
//!   on fresh loopback addresses (the test kit's allocator, unique across
//!   test processes) and connects their QPs;
//! * the RC ladder between two sides ([`connection`], [`connect`]): proto's
//!   `RcConnection`, the one place the RESET → INIT → RTR → RTS steps are
//!   written; [`cm_side`] stops at INIT, as ND creates QPs for the CM;
//! * [`cm`]: connections through the CM (listen, connect, accept, complete);
//! * [`bulk`]: WRITE, READ and SEND streams with every byte verified and
//!   every work request completing exactly once;
//! * completions with a time limit ([`wait_n`], [`drive_until`]) and signed
//!   raw packets for tests that play a peer by hand ([`send_signed`]).
//!
//! Every test binary uses a part of it: what one leaves unused is no error.
#![allow(dead_code)]

pub mod bulk;
pub mod cm;

use ndverbs_engine::config::Progress;
use ndverbs_engine::cq::CompletionQueue;
use ndverbs_engine::icrc::IcrcCache;
use ndverbs_engine::link::udp::RoceSocket;
use ndverbs_engine::mr::{Region, RegionBuf};
use ndverbs_engine::nic::{sge, Nic, QpInit, QpShared};
use ndverbs_proto::mem::{Access, Sge};
use ndverbs_proto::rc::{
    AttrMask, PathMtu, QpAttr, QpCaps, RcConnection, RecvWr, RemoteAddr, SendWr, WorkCompletion,
};
use ndverbs_wire::ip::ROCEV2_PORT;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use ndverbs_testkit::verbs::pattern;

/// Every right, for regions and for what the peer may do through a QP.
pub const ALL: Access = Access::ALL;

/// How long a test waits for the completions it expects.
pub const WC_LIMIT: Duration = Duration::from_secs(30);

/// One side: NIC, PD, CQ, QP and a region.
pub struct Side {
    pub nic: Nic,
    pub pd: u32,
    pub cq: Arc<CompletionQueue>,
    pub qp: Arc<QpShared>,
    pub mr: Arc<Region>,
}

/// The queues and memory of a [`Side`].
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Send queue limits; receives take as many SGEs as sends.
    pub caps: QpCaps,
    /// Depth of the one CQ.
    pub cq_depth: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Bytes of the region.
    pub region: usize,
}

impl Shape {
    /// Deep queues (1024 work requests, 4 SGEs, 256 bytes inline, a CQ of
    /// 4096) and `region` bytes: room for any data-path test.
    pub fn deep(region: usize) -> Shape {
        Shape {
            caps: QpCaps {
                max_send_wr: 1024,
                max_send_sge: 4,
                max_inline_data: 256,
                sq_sig_all: false,
            },
            cq_depth: 4096,
            max_recv_wr: 1024,
            region,
        }
    }

    /// `max_wr` work requests each way with `sges` SGEs, `inline` bytes
    /// inline, a CQ of `cq_depth` and `region` bytes.
    pub fn queues(max_wr: u32, sges: u32, inline: u32, cq_depth: u32, region: usize) -> Shape {
        Shape {
            caps: QpCaps {
                max_send_wr: max_wr,
                max_send_sge: sges,
                max_inline_data: inline,
                sq_sig_all: false,
            },
            cq_depth,
            max_recv_wr: max_wr,
            region,
        }
    }
}

impl Side {
    /// A side on `nic` with a PD of its own; the QP is in RESET.
    pub fn on(nic: Nic, shape: Shape) -> Side {
        let pd = nic.alloc_pd().unwrap();
        Side::in_pd(nic, pd, shape)
    }

    /// A side on `nic` in its PD `pd` (several sides may share one NIC and
    /// PD); the QP is in RESET.
    pub fn in_pd(nic: Nic, pd: u32, shape: Shape) -> Side {
        let (cq_id, cq) = nic.create_cq(shape.cq_depth).unwrap();
        let qp = nic
            .create_qp(QpInit {
                pd,
                send_cq: cq_id,
                recv_cq: cq_id,
                srq: None,
                caps: shape.caps,
                max_recv_wr: shape.max_recv_wr,
                max_recv_sge: shape.caps.max_send_sge,
            })
            .unwrap();
        let mr = nic
            .reg_mr(pd, RegionBuf::alloc(shape.region).unwrap(), ALL)
            .unwrap();
        Side {
            nic,
            pd,
            cq,
            qp,
            mr,
        }
    }

    /// `len` bytes of the region from `offset`.
    pub fn sge(&self, offset: usize, len: usize) -> Sge {
        sge(
            &self.mr,
            offset,
            u32::try_from(len).expect("an SGE's length"),
        )
    }

    /// Where `offset` of the region is, for the peer's WRITE, READ or atomic.
    pub fn remote(&self, offset: usize) -> RemoteAddr {
        RemoteAddr {
            va: self.mr.addr() + offset as u64,
            rkey: self.mr.rkey(),
        }
    }

    /// The region's `len` bytes from `offset`.
    pub fn bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.mr.read(offset, &mut v).unwrap();
        v
    }

    /// Posts `wr` to the send queue; a refusal fails the test.
    #[track_caller]
    pub fn post_send(&self, wr: SendWr) {
        let id = wr.wr_id;
        self.nic
            .post_send(&self.qp, wr)
            .unwrap_or_else(|e| panic!("post_send {id}: {e}"));
    }

    /// Posts a receive of `len` bytes at `offset` with id `wr_id`.
    #[track_caller]
    pub fn post_recv(&self, wr_id: u64, offset: usize, len: usize) {
        let wr = RecvWr::new(wr_id, vec![self.sge(offset, len)]);
        self.nic
            .post_recv(&self.qp, wr)
            .unwrap_or_else(|e| panic!("post_recv {wr_id}: {e}"));
    }

    /// Applies ladder steps to the QP.
    #[track_caller]
    pub fn modify(&self, steps: impl IntoIterator<Item = (QpAttr, AttrMask)>) {
        for (attr, mask) in steps {
            self.nic
                .modify_qp(self.qp.qpn(), &attr, mask)
                .unwrap_or_else(|e| panic!("QP {:#x} to {:?}: {e}", self.qp.qpn(), attr.qp_state));
        }
    }
}

/// Opens a NIC on `ip` and a side on it with [`Shape::deep`] queues.
pub fn side(ip: IpAddr, mode: Progress, region: usize) -> Side {
    let nic = Nic::open(ip, mode).unwrap_or_else(|e| panic!("open {ip}: {e}"));
    Side::on(nic, Shape::deep(region))
}

/// Two NICs on a fresh loopback address pair, one connected QP pair
/// between them (path MTU `mtu`, `region` bytes of memory each).
pub fn pair(mode: Progress, mtu: PathMtu, region: usize) -> (Side, Side) {
    let (ia, ib) = ndverbs_testkit::addr::pair_v4();
    let (a, b) = (side(ia, mode, region), side(ib, mode, region));
    connect(&a, &b, mtu);
    (a, b)
}

/// Connects one QP pair between two NICs already open (see [`pair`]).
pub fn pair_on(a: Nic, b: Nic, mtu: PathMtu, region: usize) -> (Side, Side) {
    pair_on_with(a, b, region, |x, y| connection(x, y, mtu))
}

/// [`pair_on`] with each side's connection from `conn(side, peer)`.
pub fn pair_on_with(
    a: Nic,
    b: Nic,
    region: usize,
    conn: impl Fn(&Side, &Side) -> RcConnection,
) -> (Side, Side) {
    let shape = Shape::deep(region);
    let (a, b) = (Side::on(a, shape), Side::on(b, shape));
    connect_using(&a, &b, conn);
    (a, b)
}

/// `a`'s side of an RC connection to `b`: each sends from [`psn_of`] its
/// own QP; the peer may do anything; the ACK timeout is short (10, about
/// 4 ms) so that tests with loss retransmit soon, and so is the RNR timer
/// (1, 0.01 ms).
pub fn connection(a: &Side, b: &Side, mtu: PathMtu) -> RcConnection {
    RcConnection {
        path_mtu: mtu,
        sq_psn: psn_of(a),
        rq_psn: psn_of(b),
        access: ALL,
        timeout: 10,
        min_rnr_timer: 1,
        ..RcConnection::new(b.qp.qpn()).to_peer(b.nic.local())
    }
}

/// Connects the QPs of `a` and `b` to each other (RESET → RTS both).
pub fn connect(a: &Side, b: &Side, mtu: PathMtu) {
    connect_using(a, b, |x, y| connection(x, y, mtu));
}

/// [`connect`] with each side's connection from `conn(side, peer)`.
pub fn connect_using(a: &Side, b: &Side, conn: impl Fn(&Side, &Side) -> RcConnection) {
    a.modify(conn(a, b).steps());
    b.modify(conn(b, a).steps());
}

/// RESET → INIT as ND and the CM want it: every right for the peer.
pub fn init_step() -> (QpAttr, AttrMask) {
    RcConnection {
        access: ALL,
        ..RcConnection::new(0)
    }
    .init()
}

/// A side for connections through the CM: its QP already in INIT (as ND
/// creates them, so receives can be posted before connecting).
pub fn cm_side(nic: Nic, shape: Shape) -> Side {
    let s = Side::on(nic, shape);
    s.modify([init_step()]);
    s
}

/// A PSN derived from the QPN (both sides can compute the other's).
pub fn psn_of(s: &Side) -> u32 {
    (s.qp.qpn().wrapping_mul(2_654_435_761)) & 0x00ff_ffff
}

/// Polls `s`'s CQ until `n` completions arrived (driving a manual-progress
/// NIC), within [`WC_LIMIT`].
#[track_caller]
pub fn wait_n(s: &Side, n: usize) -> Vec<WorkCompletion> {
    let t0 = Instant::now();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        if let Some(wc) = s.cq.poll_one() {
            out.push(wc);
            continue;
        }
        assert!(
            t0.elapsed() < WC_LIMIT,
            "timed out with {} of {n} completions: {out:?}",
            out.len()
        );
        if s.nic.mode() == Progress::Manual {
            s.nic.progress();
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    out
}

/// Drives both manual-mode NICs until `pred` holds.
#[track_caller]
pub fn drive_until(a: &Side, b: &Side, mut pred: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !pred() {
        assert!(t0.elapsed() < WC_LIMIT, "timed out");
        a.nic.progress();
        b.nic.progress();
    }
}

/// Fills in the ICRC of transport packet `pkt` (for IPv4 ID 0, which the
/// socket sends) and sends it to `dst`'s RoCEv2 port, waiting while the
/// socket buffer is full.
pub fn send_signed(sock: &RoceSocket, pkt: &mut [u8], dst: IpAddr) {
    let dst = SocketAddr::new(dst, ROCEV2_PORT);
    IcrcCache::new(sock.addr()).fill(pkt, dst, 0).unwrap();
    loop {
        match sock.send_to(pkt, dst) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) => panic!("send to {dst}: {e}"),
        }
    }
}
