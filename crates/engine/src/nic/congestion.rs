//! Congestion control per peer: one [`PathController`] for every destination
//! address, shared by the queue pairs to it (`proto::cc` has the rules).
//!
//! Off unless [`crate::config::NicConfig::congestion`] asks for it; off, no
//! QP gets a send budget and each keeps its fixed window
//! (`ndverbs_proto::rc::max_window`), bit for bit as before. On:
//!
//! * before `drain_qp` sends a QP's packets, the QP's signals since its last
//!   drain (bytes acknowledged, the smallest RTT sample, retries) go to its
//!   path's controller, and the QP gets the path's free window as its send
//!   budget — at least one packet when nothing is in flight, so a window
//!   below the path MTU never stalls;
//! * after, what it sent goes to the controller too; a QP that stopped with
//!   less than a packet of budget left waits on the path;
//! * when a path's window has room again (an ACK for another QP, a step
//!   later) or its pacer has a packet's worth of tokens, its waiting QPs
//!   are drained (`take_ready`), in turn: each gets at most one GSO run's
//!   worth while others wait, and a QP whose ACK arrives while others wait
//!   queues behind them rather than taking the window that ACK freed (it
//!   would, every time: the QPs that hear back first would keep the path);
//! * **pacing**: while the controller gives a pacing rate (it does only
//!   while the path is congested: loopback and idle paths pay nothing), the
//!   budget is also bounded by the path's [`Pacer`], whose bucket holds at
//!   most two quanta of `rate × 100 µs` — so a drain still builds GSO runs,
//!   of about 12 packets at 1 Gb/s instead of 64. The engine wakes for the
//!   next release (`poll_at`, part of the step's deadline).
//!
//! A CNP from the peer for one of its QPs reaches the controller the same
//! way (the QP still counts it in `qp_drop_not_rc`).
//!
//! **Round trips** end at the kernel's receive time stamp of the ACK
//! (`rx_clock.rs`), not when the engine got round to it. **Loss probes**
//! wait at least [`PROBE_FLOOR`] (2 ms): a probe is a loss to the
//! controller, and on a busy host ACKs are late by a scheduling slice with
//! nothing lost. **Loopback peers bypass the controller** (`bypassed`):
//! no network, no queue but the peer's socket buffer, and round trips that
//! time only the peer's process — their QPs keep the fixed window, as
//! with congestion control off.
//!
//! **ECN.** With congestion control on, the NIC's packets leave with ECT(1)
//! and the socket reports the ECN field of what arrives. A request or data
//! packet marked Congestion Experienced by a router is answered with a CNP
//! to the QP that sent it — at most one per 50 µs per QP
//! (`RcQp::congestion_experienced`) and only to peers seen sending ECT(1)
//! (`ecn_seen`), so rxe never receives one.

use crate::counters::{bump, NicCounters};
use crate::link::{ECN_CE, ECN_ECT1, ECN_NOT_ECT};
use ndverbs_proto::cc::{self, CcConfig, CcCounters, Pacer, PathController};
use ndverbs_proto::rc::{CcSignals, RcQp};
use ndverbs_proto::time::{Duration, Instant};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;

/// One destination's controller and the QPs waiting for its window.
struct Path {
    cc: PathController,
    pacer: Pacer,
    /// Payload bytes of a full packet (the first QP's path MTU).
    mss: u64,
    /// QPs waiting for the path's window or pacer, in turn.
    waiting: VecDeque<u32>,
    /// What `take_ready` granted the QPs it released, until their drain.
    grants: Vec<(u32, u64)>,
    /// The controller's counters last added to the NIC's.
    reported: CcCounters,
}

/// The most a QP sends in one turn while others wait for the same path:
/// one GSO run at an Ethernet MTU.
const TURN: u64 = 64 * 1024;

/// The shortest wait before a QP's loss probe with congestion control on
/// (`RcQp::set_probe_floor`; the transport's own floor is 100 µs). A probe
/// is a go-back-N retry and, to the controller, a loss: it halves the
/// window. On a busy host an ACK is late by a scheduling delay now and then
/// with nothing lost — Linux's EEVDF gives each runnable task a slice of
/// 0.75 ms × (1 + log2 CPUs), 1.5 ms on two CPUs, so a process that wakes
/// behind another waits about that long — and on the kernel test bed the
/// 100-µs floor fired ~300 probes in 12 s, all spurious. Above one such
/// slice, and still far below the ACK timeout a real tail loss would
/// otherwise wait for (67 ms at perftest's `-u 14`).
pub(crate) const PROBE_FLOOR: Duration = Duration::from_millis(2);

impl Path {
    /// Bytes the path lets go now: its free window — at least a packet
    /// when nothing is in flight, so a window below the MTU never stalls —
    /// bounded by the pacer's tokens while it paces.
    fn free(&mut self, now: Instant) -> u64 {
        let mut free = self.cc.available();
        if self.cc.in_flight() == 0 {
            free = free.max(self.mss);
        }
        if let Some(rate) = self.cc.pacing_rate() {
            self.pacer.refill(now, rate, self.mss);
            free = free.min(self.pacer.tokens());
        } else {
            self.pacer.reset();
        }
        free
    }
}

/// The controllers of a NIC, by peer address (`None`: congestion control off).
#[derive(Default)]
pub(crate) struct Paths {
    config: Option<CcConfig>,
    paths: HashMap<IpAddr, Path>,
    /// Peers seen sending ECT(1): ndverbs peers with congestion control on,
    /// the only ones a CE mark is answered to with a CNP.
    cnp_peers: HashSet<IpAddr>,
}

impl Paths {
    /// Controllers with `config`, or none.
    pub(crate) fn new(config: Option<CcConfig>) -> Self {
        Paths {
            config,
            paths: HashMap::new(),
            cnp_peers: HashSet::new(),
        }
    }

    /// The probe floor for new QPs: [`PROBE_FLOOR`] with congestion control
    /// on, the transport's own without.
    pub(crate) fn probe_floor(&self) -> Option<Duration> {
        self.config.as_ref().map(|_| PROBE_FLOOR)
    }

    /// A packet from `peer` arrived with ECN field `ecn`: true if it was
    /// marked Congestion Experienced and `peer` takes CNPs — it has been
    /// seen sending ECT(1) ([`ECN_ECT1`]: why that means an ndverbs peer
    /// with congestion control on), and congestion control is on here. A
    /// peer that never marked its packets (rxe, or ndverbs without
    /// congestion control) never gets a CNP, whatever a router does to
    /// its packets.
    #[inline]
    pub(crate) fn ecn_seen(&mut self, peer: IpAddr, ecn: u8) -> bool {
        if ecn == ECN_NOT_ECT || self.config.is_none() {
            return false;
        }
        if ecn == ECN_ECT1 {
            if !self.cnp_peers.contains(&peer) {
                self.cnp_peers.insert(peer);
            }
            return false;
        }
        ecn == ECN_CE && self.cnp_peers.contains(&peer)
    }

    /// Feeds the QP's signals to its path and sets its send budget: what
    /// its turn was granted, or — while no QP waits for the path — the
    /// path's free window; nothing while others wait (it queues behind
    /// them).
    pub(crate) fn before_drain(
        &mut self,
        now: Instant,
        peer: IpAddr,
        qpn: u32,
        qp: &mut RcQp,
        c: &NicCounters,
    ) {
        let Some(config) = &self.config else {
            return;
        };
        if bypassed(peer) {
            return;
        }
        let mtu = u64::from(qp.query().path_mtu.bytes());
        let path = self.paths.entry(peer).or_insert_with(|| {
            // The packet is the unit of increase and the smallest window:
            // the path MTU of the first QP to this peer.
            let mut config = config.clone();
            config.mss = mtu as u32;
            config.min_window = config.min_window.max(mtu);
            Path {
                cc: PathController::new(config),
                pacer: Pacer::default(),
                mss: mtu,
                waiting: VecDeque::new(),
                grants: Vec::new(),
                reported: CcCounters::default(),
            }
        });
        feed(&mut path.cc, now, qp.take_cc_signals(), peer);
        let mut budget = path.free(now);
        let granted = path.grants.iter().position(|g| g.0 == qpn);
        match granted {
            Some(i) => budget = budget.min(path.grants.swap_remove(i).1),
            None if !path.waiting.is_empty() => budget = 0,
            None => {}
        }
        qp.set_send_budget(Some(budget));
        report(path, c);
    }

    /// Feeds what the QP sent; a QP out of budget waits on its path.
    pub(crate) fn after_drain(
        &mut self,
        now: Instant,
        peer: IpAddr,
        qpn: u32,
        qp: &mut RcQp,
        c: &NicCounters,
    ) {
        if self.config.is_none() {
            return;
        }
        let Some(path) = self.paths.get_mut(&peer) else {
            return;
        };
        let signals = qp.take_cc_signals();
        path.pacer.consume(signals.sent);
        feed(&mut path.cc, now, signals, peer);
        let mtu = u64::from(qp.query().path_mtu.bytes());
        if qp.send_budget().is_some_and(|b| b < mtu) && !path.waiting.contains(&qpn) {
            tracing::trace!(
                qp = qpn,
                window = path.cc.window(),
                in_flight = path.cc.in_flight(),
                tokens = path.pacer.tokens(),
                "QP waits for its path"
            );
            path.waiting.push_back(qpn);
        }
        report(path, c);
    }

    /// The waiting QPs that may send now, in turn: while the path's window
    /// (and pacer) has a packet's worth free, the next waiting QP is
    /// released with a grant of at most [`TURN`] bytes (all that is free
    /// when it is the only one waiting) — round robin in quanta of one GSO
    /// run, so QPs sharing a path share it evenly.
    pub(crate) fn take_ready(&mut self, now: Instant, out: &mut Vec<(u32, IpAddr)>) {
        if self.config.is_none() {
            return;
        }
        for (&peer, path) in &mut self.paths {
            path.grants.clear();
            if path.waiting.is_empty() {
                continue;
            }
            let mut free = path.free(now);
            while free >= path.mss {
                let Some(q) = path.waiting.pop_front() else {
                    break;
                };
                let grant = if path.waiting.is_empty() {
                    free
                } else {
                    free.min(TURN)
                };
                path.grants.push((q, grant));
                free -= grant;
                out.push((q, peer));
            }
        }
    }

    /// When the pacer of a path with waiting QPs next releases a packet
    /// (the engine must wake then), if any is waiting for its pacer.
    pub(crate) fn poll_at(&self) -> Option<Instant> {
        self.config.as_ref()?;
        self.paths
            .values()
            .filter(|p| !p.waiting.is_empty())
            .filter_map(|p| {
                let rate = p.cc.pacing_rate()?;
                p.pacer.next_release(rate, p.mss)
            })
            .min()
    }
}

/// Whether the path to `peer` bypasses its controller: a loopback peer
/// (127/8, `::1`, or IPv4-mapped 127/8). Such a path has no network and no
/// queue but the peer's socket buffer, which the fixed window bounds as it
/// does without congestion control; its round trips measure only how soon
/// the peer's process runs — on a busy host, far above any delay target —
/// so a controller would only cut (C6: `write_bw` over loopback at 0.64× of
/// the controller off). The QPs to it keep the fixed window, with no send
/// budget: exactly the work of congestion control off. (A peer at another
/// address of this host is routed through loopback too but is not
/// recognized: that needs the host's address list.)
#[inline]
pub(crate) fn bypassed(peer: IpAddr) -> bool {
    match peer {
        IpAddr::V4(a) => a.is_loopback(),
        IpAddr::V6(a) => a.is_loopback() || a.to_ipv4_mapped().is_some_and(|a| a.is_loopback()),
    }
}

/// Adds what the controller did since the last report to the NIC's counters.
fn report(path: &mut Path, c: &NicCounters) {
    let now = path.cc.counters();
    let was = path.reported;
    bump(&c.cc_rtt_samples, now.rtt_samples - was.rtt_samples);
    bump(&c.cc_losses, now.losses - was.losses);
    bump(&c.cc_delay_cuts, now.delay_cuts - was.delay_cuts);
    bump(&c.cc_loss_cuts, now.loss_cuts - was.loss_cuts);
    bump(&c.cc_cnp_cuts, now.cnp_cuts - was.cnp_cuts);
    bump(&c.cc_cnps_received, now.cnps - was.cnps);
    bump(&c.cc_mode_switches, now.mode_switches - was.mode_switches);
    bump(
        &c.cc_competitive_entries,
        now.competitive_entries - was.competitive_entries,
    );
    path.reported = now;
}

/// [`cc::feed`], logging a change of mode (at debug level) with what the
/// controller saw.
fn feed(cc: &mut PathController, now: Instant, signals: CcSignals, peer: IpAddr) {
    let mode = cc.mode();
    cc::feed(cc, now, signals);
    if cc.mode() != mode {
        tracing::debug!(
            %peer,
            from = ?mode,
            to = ?cc.mode(),
            window = cc.window(),
            srtt = ?cc.srtt(),
            base = ?cc.base_rtt(),
            target = ?cc.target(),
            "congestion control mode"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndverbs_proto::mem::testing::VecMemory;
    use ndverbs_proto::mem::Access;
    use ndverbs_proto::rc::{QpCaps, RcConnection, RemoteAddr, SendOp, SendWr};

    const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));
    const KIB: u64 = 1024;

    /// QP `qpn`, connected (path MTU 1024), with a 1 MiB WRITE posted.
    fn writer(qpn: u32, mem: &mut VecMemory) -> RcQp {
        let mut qp = RcQp::new(qpn, 1, QpCaps::default());
        for (attr, mask) in RcConnection::new(qpn + 0x100).steps() {
            qp.modify(&attr, mask).unwrap();
        }
        let len = 1 << 20;
        let src = mem.register_bytes(1, 0x1000 * u64::from(qpn), vec![1; len], Access::NONE);
        let at = RemoteAddr { va: 0, rkey: 1 };
        qp.post_send(SendWr::new(
            1,
            SendOp::Write(at),
            vec![src.sge(0, len as u32)],
        ))
        .unwrap();
        qp
    }

    /// A drain as `drain_qp` does it: budget, every packet it allows, feed.
    fn drain(p: &mut Paths, now: Instant, qp: &mut RcQp, mem: &mut VecMemory) -> u64 {
        let c = NicCounters::default();
        p.before_drain(now, PEER, qp.qpn(), qp, &c);
        let budget = qp.send_budget().unwrap();
        let mut buf = vec![0u8; qp.max_packet_len()];
        while qp.poll_transmit(now, mem, &mut buf).is_some() {}
        let sent = budget - qp.send_budget().unwrap();
        p.after_drain(now, PEER, qp.qpn(), qp, &c);
        sent
    }

    #[test]
    fn qps_of_a_path_take_turns() {
        let mut mem = VecMemory::new();
        let mut qps: Vec<RcQp> = (1..=3).map(|n| writer(n, &mut mem)).collect();
        let mut p = Paths::new(Some(CcConfig::default()));
        let t0 = Instant::from_nanos(1_000);
        // The first takes the initial window; the others find it full and
        // queue, in the order they came.
        assert_eq!(drain(&mut p, t0, &mut qps[0], &mut mem), 64 * KIB);
        assert_eq!(drain(&mut p, t0, &mut qps[1], &mut mem), 0);
        assert_eq!(drain(&mut p, t0, &mut qps[2], &mut mem), 0);
        let path = p.paths.get_mut(&PEER).unwrap();
        assert_eq!(path.waiting, [1, 2, 3]);
        // An acknowledgement frees the window and slow start doubles it:
        // 128 KiB for the waiting QPs, one GSO run each, in turn.
        let t1 = t0 + Duration::from_micros(20);
        path.cc
            .on_ack(t1, 64 * KIB, Some(Duration::from_micros(20)));
        let mut ready = Vec::new();
        p.take_ready(t1, &mut ready);
        assert_eq!(ready, [(1, PEER), (2, PEER)]);
        assert_eq!(drain(&mut p, t1, &mut qps[0], &mut mem), TURN);
        // QP 3 is drained out of turn (say an ACK of its own arrived): it
        // gets nothing while others wait, and keeps its place.
        assert_eq!(drain(&mut p, t1, &mut qps[2], &mut mem), 0);
        assert_eq!(drain(&mut p, t1, &mut qps[1], &mut mem), TURN);
        assert_eq!(p.paths[&PEER].waiting, [3, 1, 2]);
        // Alone in the queue, a QP is granted all that is free.
        let mut p = Paths::new(Some(CcConfig::default()));
        assert_eq!(drain(&mut p, t0, &mut qps[2], &mut mem), 64 * KIB);
        let path = p.paths.get_mut(&PEER).unwrap();
        path.cc
            .on_ack(t1, 64 * KIB, Some(Duration::from_micros(20)));
        let mut ready = Vec::new();
        p.take_ready(t1, &mut ready);
        assert_eq!(ready, [(3, PEER)]);
        assert_eq!(drain(&mut p, t1, &mut qps[2], &mut mem), 128 * KIB);
    }

    #[test]
    fn loopback_paths_bypass_the_controller() {
        let mut mem = VecMemory::new();
        let mut qp = writer(1, &mut mem);
        let mut p = Paths::new(Some(CcConfig::default()));
        let c = NicCounters::default();
        let t0 = Instant::from_nanos(1_000);
        for lo in ["127.0.0.2", "::1", "::ffff:127.0.0.1"] {
            let lo: IpAddr = lo.parse().unwrap();
            p.before_drain(t0, lo, 1, &mut qp, &c);
            assert_eq!(qp.send_budget(), None, "{lo}: the fixed window");
            p.after_drain(t0, lo, 1, &mut qp, &c);
            assert!(p.paths.is_empty(), "{lo}: no controller");
        }
        // Any other peer has one.
        p.before_drain(t0, PEER, 1, &mut qp, &c);
        assert_eq!(qp.send_budget(), Some(64 * KIB));
        assert!(!bypassed("::ffff:10.0.0.2".parse().unwrap()));
    }

    #[test]
    fn cnps_go_only_to_peers_seen_sending_ect1() {
        let mut p = Paths::new(Some(CcConfig::default()));
        assert!(
            !p.ecn_seen(PEER, ECN_CE),
            "a CE from a peer never seen with ECT(1)"
        );
        assert!(
            !p.ecn_seen(PEER, crate::link::ECN_ECT0),
            "ECT(0): rxe asking for ECN"
        );
        assert!(!p.ecn_seen(PEER, ECN_CE));
        assert!(!p.ecn_seen(PEER, ECN_ECT1));
        assert!(p.ecn_seen(PEER, ECN_CE));
        // Without congestion control here, none at all.
        let mut off = Paths::new(None);
        assert!(!off.ecn_seen(PEER, ECN_ECT1));
        assert!(!off.ecn_seen(PEER, ECN_CE));
    }
}
