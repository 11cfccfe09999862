//! Connected devices at the verbs level, and the loops that move data
//! through them.
//!
//! * [`Pair`]: two [`Device`]s on a fresh address pair, each with a PD, a CQ,
//!   a registered region and one RC QP, the two QPs connected to each other.
//!   What most data-path tests start from.
//! * [`RcParams`] and [`connect_qps`]: the RESET → INIT → RTR → RTS ladder
//!   for QPs a test made itself (on an SRQ, in a second PD, …) —
//!   [`RcParams::init`], [`RcParams::rtr`] and [`RcParams::rts`] give each
//!   step's attributes for tests that walk it themselves. The values are
//!   handed to [`RcConnection`] ([`RcParams::connection`]), the one place the
//!   ladder is written.
//! * [`Pump`]: `total` operations with at most `window` in flight, each
//!   completion checked to arrive exactly once and successfully;
//!   [`Pair::send`], [`Pair::write`] and [`Pair::read`] run one with every
//!   byte verified.
//! * [`wait_wc`], [`wc_ok`], [`poll_n`]: completions with a time limit;
//!   [`connect_args`] for connections through an endpoint.
//!
//! ```no_run
//! use ndverbs_testkit::verbs::Pair;
//! let pair = Pair::new();
//! pair.write(64, 16 << 10, 8); // 64 WRITEs of 16 KiB, 8 in flight, verified at b
//! ```

use ndverbs_verbs::RcConnection;
use ndverbs_verbs::{
    Access, AttrMask, ConnectArgs, Cq, Device, DeviceConfig, Mr, PathMtu, Pd, Progress, Qp, QpAttr,
    QpInitAttr, QpState, RecvWr, RemoteAddr, SendOp, SendWr, WcStatus, WorkCompletion,
};
use std::collections::HashSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long a test waits for one completion.
pub const WC_LIMIT: Duration = Duration::from_secs(20);

/// The GID of an address: IPv4 as `::ffff:a.b.c.d`, IPv6 as it is.
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// What an RC connection is made of, from one side: its send PSN, the PSN
/// it expects from the peer, the path MTU, the rights it grants the peer,
/// READ/atomic depths and the retry settings.
#[derive(Debug, Clone, Copy)]
pub struct RcParams {
    /// Path MTU.
    pub mtu: PathMtu,
    /// The first PSN this side sends.
    pub sq_psn: u32,
    /// The first PSN this side expects (the peer's `sq_psn`).
    pub rq_psn: u32,
    /// What the peer may do to this side's memory.
    pub access: Access,
    /// READs/atomics in flight, either way.
    pub rd_atomic: u8,
    /// RNR NAK timer this side asks the peer to wait.
    pub min_rnr_timer: u8,
    /// Local ACK timeout (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7: forever).
    pub rnr_retry: u8,
}

impl Default for RcParams {
    fn default() -> Self {
        RcParams {
            mtu: PathMtu::Mtu1024,
            sq_psn: 0,
            rq_psn: 0,
            access: Access::ALL,
            rd_atomic: 4,
            min_rnr_timer: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
        }
    }
}

impl RcParams {
    /// The same connection seen from the peer (the PSNs swapped).
    pub fn reversed(&self) -> RcParams {
        RcParams {
            sq_psn: self.rq_psn,
            rq_psn: self.sq_psn,
            ..*self
        }
    }

    /// This side's connection to QP `dest_qpn` at `peer` as an
    /// [`RcConnection`], which writes the ladder once for every user; the
    /// READ/atomic depth applies both ways.
    pub fn connection(&self, dest_qpn: u32, peer: IpAddr) -> RcConnection {
        RcConnection {
            path_mtu: self.mtu,
            sq_psn: self.sq_psn,
            rq_psn: self.rq_psn,
            access: self.access,
            max_rd_atomic: self.rd_atomic,
            max_dest_rd_atomic: self.rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            ..RcConnection::new(dest_qpn).to_peer(peer)
        }
    }

    /// The steps that name no peer (INIT, RTS) take their values from here.
    fn unaddressed(&self) -> RcConnection {
        self.connection(0, IpAddr::from([0u8; 4]))
    }

    /// RESET → INIT.
    pub fn init(&self) -> (QpAttr, AttrMask) {
        self.unaddressed().init()
    }

    /// INIT → RTR towards QP `dest_qpn` at `peer`.
    pub fn rtr(&self, dest_qpn: u32, peer: IpAddr) -> (QpAttr, AttrMask) {
        self.connection(dest_qpn, peer).rtr()
    }

    /// RTR → RTS.
    pub fn rts(&self) -> (QpAttr, AttrMask) {
        self.unaddressed().rts()
    }

    /// Moves `qp` from RESET (or INIT) to RTS towards QP `dest_qpn` at
    /// `peer` ([`Qp::connect`]).
    pub fn connect(&self, qp: &Qp, dest_qpn: u32, peer: IpAddr) -> ndverbs_verbs::Result<()> {
        qp.connect(&self.connection(dest_qpn, peer))
    }
}

/// Connects two fresh QPs to each other (`a` at `a_addr` sends with
/// `p.sq_psn`, `b` at `b_addr` with `p.rq_psn`); fails the test on an error.
#[track_caller]
pub fn connect_qps(a: &Qp, a_addr: IpAddr, b: &Qp, b_addr: IpAddr, p: &RcParams) {
    p.connect(a, b.qpn(), b_addr)
        .unwrap_or_else(|e| panic!("connecting QP {:#x} to {b_addr}: {e}", a.qpn()));
    p.reversed()
        .connect(b, a.qpn(), a_addr)
        .unwrap_or_else(|e| panic!("connecting QP {:#x} to {a_addr}: {e}", b.qpn()));
    assert_eq!((a.state(), b.state()), (QpState::Rts, QpState::Rts));
}

/// Arguments of an rdma_cm-style connect to `remote:port` (from local
/// port 40001): 4 READs/atomics each way, 7 retries and RNR retries, path
/// MTU 1024, no private data. Change fields with struct update syntax.
pub fn connect_args(remote: IpAddr, port: u16) -> ConnectArgs {
    ConnectArgs {
        local_port: 40001,
        ..ConnectArgs::new(remote, port)
    }
}

/// How a [`Pair`] is built.
#[derive(Debug, Clone, Copy)]
pub struct PairConfig {
    /// Who drives the devices.
    pub progress: Progress,
    /// Depth of each CQ.
    pub cq_depth: u32,
    /// Bytes of each side's registered region.
    pub region: usize,
    /// Rights of each region.
    pub mr_access: Access,
    /// Send and receive queue depth of each QP.
    pub max_wr: u32,
    /// The connection (from a's side).
    pub rc: RcParams,
}

impl Default for PairConfig {
    fn default() -> Self {
        PairConfig {
            progress: Progress::Thread,
            cq_depth: 1024,
            region: 1 << 20,
            mr_access: Access::ALL,
            max_wr: 128,
            rc: RcParams::default(),
        }
    }
}

/// One side of a [`Pair`]: a device with a PD, a CQ (for sends and
/// receives), a region and a QP.
pub struct Side {
    /// The device.
    pub dev: Device,
    /// Its PD.
    pub pd: Pd,
    /// The QP's CQ for both queues.
    pub cq: Cq,
    /// The QP.
    pub qp: Qp,
    /// A region of [`PairConfig::region`] bytes.
    pub mr: Mr,
}

impl Side {
    /// Opens a device on `addr` with a PD, CQ, region and a QP in RESET.
    #[track_caller]
    pub fn open(addr: IpAddr, cfg: &PairConfig) -> Side {
        let config = DeviceConfig {
            progress: cfg.progress,
            ..DeviceConfig::default()
        };
        let dev = Device::open_with(addr, &config)
            .unwrap_or_else(|e| panic!("opening a device on {addr}: {e}"));
        let pd = dev.alloc_pd().expect("alloc_pd");
        let cq = dev.create_cq(cfg.cq_depth).expect("create_cq");
        let mr = pd.reg_mr(cfg.region, cfg.mr_access).expect("reg_mr");
        let qp = new_qp(&pd, &cq, cfg.max_wr);
        Side {
            dev,
            pd,
            cq,
            qp,
            mr,
        }
    }

    /// The device's address.
    pub fn addr(&self) -> IpAddr {
        self.dev.query().addr
    }

    /// Where `offset` of this side's region is, for the peer's WRITE or READ.
    pub fn remote(&self, offset: usize) -> RemoteAddr {
        RemoteAddr {
            va: self.mr.addr() + offset as u64,
            rkey: self.mr.rkey(),
        }
    }
}

fn new_qp(pd: &Pd, cq: &Cq, max_wr: u32) -> Qp {
    let mut init = QpInitAttr::new(cq, cq);
    init.caps.max_send_wr = max_wr;
    init.max_recv_wr = max_wr;
    pd.create_qp(&init).expect("create_qp")
}

/// Two devices on a fresh loopback address pair with connected RC QPs.
pub struct Pair {
    /// The first side (the requester of [`Pair::send`] and friends).
    pub a: Side,
    /// The second side.
    pub b: Side,
    cfg: PairConfig,
}

impl Default for Pair {
    fn default() -> Self {
        Pair::new()
    }
}

impl Pair {
    /// A pair with [`PairConfig::default`].
    #[track_caller]
    pub fn new() -> Pair {
        Pair::with(PairConfig::default())
    }

    /// A pair built as `cfg` says.
    #[track_caller]
    pub fn with(cfg: PairConfig) -> Pair {
        let (a_ip, b_ip) = crate::addr::pair_v4();
        let a = Side::open(a_ip, &cfg);
        let b = Side::open(b_ip, &cfg);
        connect_qps(&a.qp, a_ip, &b.qp, b_ip, &cfg.rc);
        Pair { a, b, cfg }
    }

    /// Replaces both QPs by a fresh connected pair on the same devices, PDs
    /// and CQs (the old ones are destroyed).
    #[track_caller]
    pub fn new_qps(&mut self) {
        self.a.qp = new_qp(&self.a.pd, &self.a.cq, self.cfg.max_wr);
        self.b.qp = new_qp(&self.b.pd, &self.b.cq, self.cfg.max_wr);
        connect_qps(
            &self.a.qp,
            self.a.addr(),
            &self.b.qp,
            self.b.addr(),
            &self.cfg.rc,
        );
    }

    /// `count` SENDs of `len` bytes from a to b, `window` in flight, each
    /// into a receive posted just before it; every message arrives once,
    /// in order, with its bytes.
    #[track_caller]
    pub fn send(&self, count: u64, len: u32, window: usize) {
        self.slotted(Transfer::Send, count, len, window);
    }

    /// `count` WRITEs of `len` bytes from a into b, `window` in flight;
    /// each verified at b when it completes.
    #[track_caller]
    pub fn write(&self, count: u64, len: u32, window: usize) {
        self.slotted(Transfer::Write, count, len, window);
    }

    /// `count` READs of `len` bytes by a from b, `window` in flight; each
    /// verified at a when it completes.
    #[track_caller]
    pub fn read(&self, count: u64, len: u32, window: usize) {
        self.slotted(Transfer::Read, count, len, window);
    }

    /// Runs `count` transfers of a's with `window` in flight, transfer `i`
    /// using slot `i % window` (`len` bytes at the same offset of both
    /// regions): its bytes, a [`pattern`], are written into the source's
    /// slot before it is posted and must be in the destination's when it
    /// completes.
    #[track_caller]
    fn slotted(&self, t: Transfer, count: u64, len: u32, window: usize) {
        let (a, b, n) = (&self.a, &self.b, len as usize);
        let need = window * n;
        assert!(
            need <= a.mr.len() && need <= b.mr.len(),
            "{window} slots of {len} bytes do not fit the {}-byte regions",
            a.mr.len()
        );
        // A READ moves b's bytes to a, seeded unlike a WRITE's: it must not
        // pass on stale bytes.
        let (from, to, seed): (&Side, &Side, fn(u64) -> u64) = match t {
            Transfer::Read => (b, a, |i| !i),
            Transfer::Send | Transfer::Write => (a, b, |i| i),
        };
        let off = |i: u64| (i % window as u64) as usize * n;
        let post = |i: u64| {
            let off = off(i);
            from.mr.write(off, &pattern(seed(i), n)).unwrap();
            let op = match t {
                Transfer::Send => {
                    b.qp.post_recv(RecvWr::new(i, vec![b.mr.sge(off, len)]))
                        .unwrap();
                    SendOp::Send
                }
                Transfer::Write => SendOp::Write(b.remote(off)),
                Transfer::Read => SendOp::Read(b.remote(off)),
            };
            a.qp.post_send(SendWr::new(i, op, vec![a.mr.sge(off, len)]))
                .unwrap();
        };
        let verify = |wc: &WorkCompletion| {
            if t == Transfer::Send {
                let r = wc_ok(&b.cq);
                assert_eq!((r.wr_id, r.byte_len), (wc.wr_id, len), "{r:?}");
            }
            let got = to.mr.to_vec(off(wc.wr_id), n).unwrap();
            let id = wc.wr_id;
            assert!(got == pattern(seed(id), n), "{t:?} {id} corrupted");
        };
        Pump::new(window).run(count, || a.cq.poll_one(), post, verify);
    }
}

/// What [`Pair::send`], [`Pair::write`] and [`Pair::read`] run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transfer {
    Send,
    Write,
    Read,
}

/// `total` operations (work request ids `0..total`) with at most `window`
/// in flight: `issue(i)` posts operation `i`, `poll` returns the next
/// completion if there is one, `check` verifies each as it arrives. Every
/// id must complete exactly once, successfully, within the time limit, and
/// nothing more may come.
#[derive(Debug, Clone, Copy)]
pub struct Pump {
    window: usize,
    limit: Duration,
}

impl Pump {
    /// A pump keeping `window` operations in flight, with 10 minutes for
    /// the whole run.
    pub fn new(window: usize) -> Pump {
        assert!(window > 0, "a pump needs a window");
        Pump {
            window,
            limit: Duration::from_secs(600),
        }
    }

    /// The time the whole run may take.
    pub fn limit(self, limit: Duration) -> Pump {
        Pump { limit, ..self }
    }

    /// Runs it (see [`Pump`]).
    #[track_caller]
    pub fn run(
        &self,
        total: u64,
        mut poll: impl FnMut() -> Option<WorkCompletion>,
        mut issue: impl FnMut(u64),
        mut check: impl FnMut(&WorkCompletion),
    ) {
        let mut done: HashSet<u64> = HashSet::new();
        let (mut next, mut in_flight) = (0u64, 0usize);
        let t0 = Instant::now();
        while (done.len() as u64) < total {
            while in_flight < self.window && next < total {
                issue(next);
                next += 1;
                in_flight += 1;
            }
            match poll() {
                Some(wc) => {
                    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                    assert!(wc.wr_id < next, "completion of an unposted request: {wc:?}");
                    assert!(done.insert(wc.wr_id), "{} completed twice", wc.wr_id);
                    in_flight -= 1;
                    check(&wc);
                }
                None => {
                    assert!(
                        t0.elapsed() < self.limit,
                        "stalled at {} of {total} completions",
                        done.len()
                    );
                    std::thread::yield_now();
                }
            }
        }
        if let Some(extra) = poll() {
            panic!("a completion after all {total}: {extra:?}");
        }
    }
}

/// The next completion on `cq`, within [`WC_LIMIT`].
#[track_caller]
pub fn wait_wc(cq: &Cq) -> WorkCompletion {
    cq.wait_one(WC_LIMIT)
        .expect("wait_one")
        .unwrap_or_else(|| panic!("no completion within {WC_LIMIT:?}"))
}

/// The next completion on `cq`, which must be successful.
#[track_caller]
pub fn wc_ok(cq: &Cq) -> WorkCompletion {
    let wc = wait_wc(cq);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    wc
}

/// The next `n` completions on `cq`, each within [`WC_LIMIT`].
#[track_caller]
pub fn poll_n(cq: &Cq, n: usize) -> Vec<WorkCompletion> {
    (0..n).map(|_| wait_wc(cq)).collect()
}

/// `len` bytes of a reproducible pattern for `seed` (SplitMix64 output,
/// eight bytes a step), for checking transfers byte for byte.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_moves_data_every_way() {
        let mut p = Pair::new();
        p.send(20, 3000, 4);
        p.write(20, 16 << 10, 8);
        p.read(20, 16 << 10, 8);
        assert_eq!(p.a.qp.counters().unwrap().rdma_sends, 20);
        p.new_qps();
        p.send(3, 100, 1);
        assert_eq!(p.a.qp.counters().unwrap().rdma_sends, 3);
    }

    #[test]
    fn the_pump_finds_duplicates_and_failures() {
        let wc = |wr_id, status| WorkCompletion {
            wr_id,
            status,
            opcode: ndverbs_verbs::WcOpcode::Send,
            queue: ndverbs_verbs::WcQueue::Send,
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
            qpn: 1,
            src_qp: 0,
            solicited: false,
            grh: false,
        };
        let twice = std::panic::catch_unwind(|| {
            let mut q = vec![wc(0, WcStatus::Success), wc(0, WcStatus::Success)];
            Pump::new(2).run(2, || q.pop(), |_| {}, |_| {});
        });
        assert!(twice.is_err());
        let failed = std::panic::catch_unwind(|| {
            let mut q = vec![wc(0, WcStatus::RemAccessErr)];
            Pump::new(1).run(1, || q.pop(), |_| {}, |_| {});
        });
        assert!(failed.is_err());
        let mut q = vec![wc(1, WcStatus::Success), wc(0, WcStatus::Success)];
        Pump::new(2).run(2, || q.pop(), |_| {}, |_| {});
    }
}
