//! Two RC QPs wired back to back through a simulated network on virtual time
//! (quinn-proto's `Pair` idea). Seeded loss, duplication, reordering (random
//! extra delay) and dead links; every packet either side emits is checked to
//! parse and to obey the opcode's length rules before it travels.

#![allow(dead_code)]

pub use crate::rng::Rng;
use ndverbs_proto::mem::testing::VecMemory;
use ndverbs_proto::mem::{Access, Memory};
use ndverbs_proto::rc::{
    PathMtu, QpCaps, RcConnection, RcQp, RecvQueue, RecvWr, SendWr, WcQueue, WcStatus,
    WorkCompletion,
};
use ndverbs_proto::time::{Duration, Instant};
use ndverbs_wire::packet::Packet;
use std::collections::HashMap;

/// Deterministic test bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed ^ 0x5eed).fill(&mut v);
    v
}

/// Network behaviour.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    pub loss: f64,
    pub dup: f64,
    pub latency: Duration,
    /// Extra delay, uniform in `0..jitter`: reorders packets.
    pub jitter: Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            loss: 0.0,
            dup: 0.0,
            latency: Duration::from_micros(5),
            jitter: Duration::ZERO,
        }
    }
}

/// QP settings for both ends.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub mtu: PathMtu,
    pub psn_a: u32,
    pub psn_b: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub access: Access,
    pub caps: QpCaps,
    pub rq_depth: u32,
    pub seed: u64,
    pub faults: Faults,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mtu: PathMtu::Mtu1024,
            psn_a: 0x10_0000,
            psn_b: 0x20_0000,
            timeout: 8, // ≈1 ms
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1, // 10 µs
            max_rd_atomic: 4,
            access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            caps: QpCaps {
                max_send_wr: 256,
                ..QpCaps::default()
            },
            rq_depth: 256,
            seed: 1,
            faults: Faults::default(),
        }
    }
}

pub const QPN_A: u32 = 0x11;
pub const QPN_B: u32 = 0x22;
pub const PD: u32 = 1;

/// One end.
pub struct Node {
    pub qp: RcQp,
    pub rq: RecvQueue,
    pub mem: VecMemory,
    pub wcs: Vec<WorkCompletion>,
    /// Posted send WRs in order: (wr_id, signaled).
    pub sends: Vec<(u64, bool)>,
    /// Posted receive wr_ids in order.
    pub recvs: Vec<u64>,
    /// Drops everything it would send or receive.
    pub dead: bool,
}

impl Node {
    pub fn post_send(&mut self, wr: SendWr) {
        self.sends.push((wr.wr_id, wr.signaled));
        self.qp.post_send(wr).expect("post_send");
    }

    pub fn post_recv(&mut self, wr: RecvWr) {
        self.recvs.push(wr.wr_id);
        self.qp.post_recv(&mut self.rq, wr).expect("post_recv");
    }

    /// Moves the QP to ERR and flushes the receive queue; returns how many
    /// receives were flushed.
    pub fn move_to_error(&mut self) -> usize {
        crate::qp::move_to_error(&mut self.qp, &mut self.rq)
    }

    /// Takes the QP's completions into `wcs`.
    pub fn take_completions(&mut self) {
        while let Some(wc) = self.qp.poll_completion() {
            self.wcs.push(wc);
        }
    }

    pub fn send_wcs(&self) -> Vec<WorkCompletion> {
        self.wcs
            .iter()
            .filter(|w| w.queue == WcQueue::Send)
            .copied()
            .collect()
    }

    pub fn recv_wcs(&self) -> Vec<WorkCompletion> {
        self.wcs
            .iter()
            .filter(|w| w.queue == WcQueue::Recv)
            .copied()
            .collect()
    }

    /// No WR completed twice, completions per queue in posting order, and
    /// (if `all`) every signaled send and every receive completed.
    pub fn check_completions(&self, all_sends: bool, all_recvs: bool) {
        let order = |posted: &[u64], done: &[WorkCompletion], what: &str| {
            let pos: HashMap<u64, usize> =
                posted.iter().enumerate().map(|(i, id)| (*id, i)).collect();
            assert_eq!(pos.len(), posted.len(), "{what}: wr_ids must be unique");
            let mut last = None;
            for wc in done {
                let i = *pos
                    .get(&wc.wr_id)
                    .unwrap_or_else(|| panic!("{what}: unknown wr_id {}", wc.wr_id));
                if let Some(l) = last {
                    assert!(
                        i > l,
                        "{what}: wr_id {} completed out of order or twice",
                        wc.wr_id
                    );
                }
                last = Some(i);
            }
        };
        let sends: Vec<u64> = self.sends.iter().map(|s| s.0).collect();
        let swcs = self.send_wcs();
        order(&sends, &swcs, "send");
        for wc in &swcs {
            let signaled = self.sends.iter().find(|s| s.0 == wc.wr_id).unwrap().1;
            assert!(
                signaled || self.qp.caps().sq_sig_all || wc.status != WcStatus::Success,
                "unsignaled wr {} completed successfully",
                wc.wr_id
            );
        }
        if all_sends {
            for (id, signaled) in &self.sends {
                if *signaled {
                    assert!(
                        swcs.iter().any(|w| w.wr_id == *id),
                        "signaled send {id} never completed"
                    );
                }
            }
        }
        let rwcs = self.recv_wcs();
        order(&self.recvs, &rwcs, "recv");
        if all_recvs {
            assert_eq!(rwcs.len(), self.recvs.len(), "every receive completes");
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

struct InFlight {
    at: Instant,
    seq: u64,
    to: Side,
    bytes: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    /// Reversed: the heap pops the earliest first.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// Decides which packets the network drops.
pub type Filter = Box<dyn FnMut(Side, &Packet<'_>) -> bool>;
/// Rewrites packets in flight.
pub type Mutator = Box<dyn FnMut(&mut Rng, &mut Vec<u8>)>;

/// Two nodes and the network between them.
pub struct Pair {
    pub a: Node,
    pub b: Node,
    pub now: Instant,
    pub faults: Faults,
    pub cfg: Config,
    rng: Rng,
    net: std::collections::BinaryHeap<InFlight>,
    seq: u64,
    buf: Vec<u8>,
    /// Every packet that left a node: (from, bytes).
    pub log: Option<Vec<(Side, Vec<u8>)>>,
    pub packets_sent: u64,
    pub packets_lost: u64,
    /// Drops a packet when it returns true: (from, parsed packet).
    pub filter: Option<Filter>,
    /// Rewrites packets in flight (hostile peer / corruption past the ICRC).
    pub mutate: Option<Mutator>,
    /// Mutated packets that no longer parse.
    pub unparsable: u64,
}

impl Config {
    /// This configuration's connection to QP `remote_qpn`.
    pub fn connection(&self, remote_qpn: u32, rq_psn: u32, sq_psn: u32) -> RcConnection {
        RcConnection {
            rq_psn,
            sq_psn,
            path_mtu: self.mtu,
            access: self.access,
            max_rd_atomic: self.max_rd_atomic,
            max_dest_rd_atomic: self.max_rd_atomic,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            min_rnr_timer: self.min_rnr_timer,
            ..RcConnection::new(remote_qpn)
        }
    }
}

/// Walks a QP from RESET to RTS.
pub fn connect(qp: &mut RcQp, remote_qpn: u32, rq_psn: u32, sq_psn: u32, cfg: &Config) {
    for (attr, mask) in cfg.connection(remote_qpn, rq_psn, sq_psn).steps() {
        qp.modify(&attr, mask).unwrap();
    }
}

impl Pair {
    pub fn new(cfg: Config) -> Self {
        let node = |qpn: u32, peer: u32, rq_psn: u32, sq_psn: u32| {
            let mut qp = RcQp::new(qpn, PD, cfg.caps);
            connect(&mut qp, peer, rq_psn, sq_psn, &cfg);
            Node {
                qp,
                rq: RecvQueue::new(cfg.rq_depth, 8),
                mem: VecMemory::new(),
                wcs: Vec::new(),
                sends: Vec::new(),
                recvs: Vec::new(),
                dead: false,
            }
        };
        Pair {
            a: node(QPN_A, QPN_B, cfg.psn_b, cfg.psn_a),
            b: node(QPN_B, QPN_A, cfg.psn_a, cfg.psn_b),
            now: Instant::from_nanos(1_000_000),
            faults: cfg.faults,
            cfg,
            rng: Rng::new(cfg.seed),
            net: std::collections::BinaryHeap::new(),
            seq: 0,
            buf: vec![0u8; 4096 + 64],
            log: None,
            packets_sent: 0,
            packets_lost: 0,
            filter: None,
            mutate: None,
            unparsable: 0,
        }
    }

    /// Drops the packets for which `f` returns true.
    pub fn set_filter(&mut self, f: impl FnMut(Side, &Packet<'_>) -> bool + 'static) {
        self.filter = Some(Box::new(f));
    }

    /// Packets logged so far, parsed: (from, packet bytes).
    pub fn logged(&self) -> &[(Side, Vec<u8>)] {
        self.log.as_deref().unwrap_or(&[])
    }

    pub fn node(&mut self, side: Side) -> &mut Node {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    /// Both nodes send everything they have; completions are collected.
    fn transmit(&mut self) {
        for side in [Side::A, Side::B] {
            loop {
                let now = self.now;
                let mut buf = std::mem::take(&mut self.buf);
                let node = self.node(side);
                let out = node.qp.poll_transmit(now, &mut node.mem, &mut buf);
                let dead = node.dead;
                let Some(n) = out else {
                    self.buf = buf;
                    break;
                };
                let bytes = buf[..n].to_vec();
                self.buf = buf;
                self.check_packet(&bytes);
                if let Some(log) = &mut self.log {
                    log.push((side, bytes.clone()));
                }
                self.packets_sent += 1;
                let to = if side == Side::A { Side::B } else { Side::A };
                let filtered = match &mut self.filter {
                    Some(f) => f(side, &Packet::parse(&bytes).unwrap()),
                    None => false,
                };
                if dead || filtered || self.rng.chance(self.faults.loss) {
                    self.packets_lost += 1;
                    continue;
                }
                let copies = if self.rng.chance(self.faults.dup) {
                    2
                } else {
                    1
                };
                let mut bytes = bytes;
                if let Some(m) = &mut self.mutate {
                    m(&mut self.rng, &mut bytes);
                }
                for _ in 0..copies {
                    let jitter = self.rng.below(self.faults.jitter.as_nanos() as u64);
                    let at = self.now + self.faults.latency + Duration::from_nanos(jitter);
                    self.seq += 1;
                    self.net.push(InFlight {
                        at,
                        seq: self.seq,
                        to,
                        bytes: bytes.clone(),
                    });
                }
            }
            self.node(side).take_completions();
        }
    }

    /// What every emitted packet must satisfy.
    fn check_packet(&self, bytes: &[u8]) {
        let pkt = Packet::parse(bytes).expect("emitted packet parses");
        let info = pkt.info().unwrap();
        info.check_payload_len(pkt.payload.len(), self.cfg.mtu.bytes() as usize)
            .expect("payload length rule");
        assert_eq!(pkt.bth.pad, Packet::pad_for(pkt.payload.len()));
        assert_eq!(pkt.icrc, 0, "ICRC placeholder is zero");
    }

    fn deliver_due(&mut self) {
        loop {
            let now = self.now;
            if self.net.peek().is_none_or(|p| p.at > now) {
                break;
            }
            let Some(p) = self.net.pop() else { break };
            let node = self.node(p.to);
            if node.dead {
                continue;
            }
            match Packet::parse(&p.bytes) {
                Ok(pkt) => node
                    .qp
                    .handle_packet(now, &pkt, &mut node.mem, &mut node.rq),
                Err(_) => self.unparsable += 1,
            }
        }
    }

    fn next_event(&self) -> Option<Instant> {
        let net = self.net.peek().map(|p| p.at);
        [net, self.a.qp.poll_timeout(), self.b.qp.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs until `done` holds (true), the system is idle or `limit` of
    /// virtual time passed (false).
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Pair) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            self.transmit();
            if done(self) {
                return true;
            }
            let Some(t) = self.next_event() else {
                return false;
            };
            if t > end {
                self.now = end;
                return false;
            }
            self.now = self.now.max(t);
            self.deliver_due();
            let now = self.now;
            self.a.qp.handle_timeout(now);
            self.b.qp.handle_timeout(now);
        }
    }

    /// Runs until nothing is in flight and no timer is armed.
    pub fn run_idle(&mut self, limit: Duration) {
        let idle = self.run_until(limit, |p| p.net.is_empty() && p.next_event().is_none());
        assert!(
            idle || (self.net.is_empty() && self.next_event().is_none()),
            "not idle after {limit:?}: now {:?} in flight {}\nA sq {} timeout {:?} {:?}\n{:?}\nB sq {} timeout {:?} {:?}\n{:?}",
            self.now,
            self.net.len(),
            self.a.qp.send_queue_len(),
            self.a.qp.poll_timeout(),
            self.a.qp.query(),
            self.a.qp.counters(),
            self.b.qp.send_queue_len(),
            self.b.qp.poll_timeout(),
            self.b.qp.query(),
            self.b.qp.counters(),
        );
    }

    /// Registers `len` bytes at `va` on `side` with `access` (+ LOCAL_WRITE).
    pub fn region(
        &mut self,
        side: Side,
        va: u64,
        data: Vec<u8>,
        access: Access,
    ) -> ndverbs_proto::mem::testing::MrKeys {
        self.node(side)
            .mem
            .register_bytes(PD, va, data, access | Access::LOCAL_WRITE)
    }
}

/// A pair whose B is dead (hears and says nothing) after A posted `sends`
/// SENDs of the same `len` bytes.
pub fn sending_to_the_dead(cfg: Config, sends: u64, len: usize) -> Pair {
    let mut p = Pair::new(cfg);
    p.b.dead = true;
    let src = p.region(Side::A, 0x1000, pattern(9, len), Access::NONE);
    for i in 0..sends {
        let sge = src.sge(0, len as u32);
        p.a.post_send(SendWr::new(i, ndverbs_proto::rc::SendOp::Send, vec![sge]));
    }
    p
}

/// Reads `len` bytes of a region by key (test convenience).
pub fn read_mem(mem: &mut VecMemory, key: u32, va: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    mem.read_local(
        PD,
        &ndverbs_proto::mem::Sge::new(va, len as u32, key),
        0,
        &mut out,
    )
    .unwrap();
    out
}
