//! The virtual bottleneck: senders, a FIFO and receivers on virtual time.
//!
//! ```text
//!  RoCE hosts (one PathController each, N QPs)   ─┐
//!                                                  ├─► FIFO: rate, byte limit, tail drop ─► receivers
//!  TCP CUBIC hosts (one flow each)               ─┘        (propagation `prop` each way)     │
//!        ▲                                                                                    │
//!        └──────────── ACK / NAK / CNP, propagation only (the reverse path is idle) ──────────┘
//! ```
//!
//! **RoCE flows** model an RC requester writing 64 KiB messages at path MTU
//! 1024: 1082-byte frames carrying 1024 bytes, AckReq at least twice per QP's
//! share of the window and at most `ack_every` packets apart (the requester's
//! `min(64, window/2)` with the window split over the host's QPs); the receiver (rxe's responder) accepts only the next PSN,
//! acknowledges AckReq packets cumulatively, sends one sequence NAK per gap
//! and drops everything out of order, so a loss costs a go-back-N of
//! everything behind it. The sender times each first transmission that asks
//! for an ACK and samples the round trip of the newest one an ACK covers
//! (retransmissions are never timed: Karn). A probe (go-back-N from the
//! oldest unacknowledged PSN) fires when nothing was acknowledged for
//! `max(4·srtt, 1 ms)`. A host without a controller models rxe's
//! requester: 128 PSNs per QP, halved at every retry (floor 8), +4 per
//! acknowledgement that makes progress. A host's QPs share its controller: the host sends
//! round robin over its QPs while the controller's window has room, paced by
//! a token bucket at the controller's rate (quantum `rate × 100 µs`, 2 to 64
//! packets) when it gives one, through a host link of `host_rate`. Each QP
//! keeps at most `qp_cap` PSNs in flight.
//!
//! **The FIFO** serialises frames at `rate`, holds at most `limit` bytes
//! (waiting or being sent) and drops arrivals that do not fit; it may mark CE
//! at random (as the test bed's nftables rule), and a receiver answers a CE
//! packet with a CNP at most once per 50 µs per QP.
//!
//! **Busy receivers** (`Config::stalls`): a RoCE receiver is a process, and
//! while it is off its CPU what reaches it waits in its socket, unanswered;
//! its ACKs leave when it runs again (TCP's are the kernel's, sent at once).
//! Off by default.
//!
//! Everything is integers of nanoseconds and a seeded generator: a run is a
//! pure function of its configuration.

use super::tcp::{self, Cubic};
use crate::rng::Rng;
use ndverbs_proto::cc::{CcConfig, PathController};
use ndverbs_proto::time::{Duration, Instant};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// RoCE payload per packet (path MTU 1024).
pub const MSS: u64 = 1024;
/// A RoCE frame on the wire: Ethernet, IPv4, UDP, BTH, RETH/ICRC and 1024 B.
pub const FRAME: u32 = 1082;
/// The requester's PSN window without a controller: rxe's 128, halved at
/// every retry down to 8 and widened by 4 with every acknowledgement that
/// makes progress (`requester.rs`: `MAX_UNACKED_PSNS`, `MIN_WINDOW`,
/// `WINDOW_STEP`).
pub const RXE_WINDOW: u64 = 128;
const MIN_WINDOW: u64 = 8;
const WINDOW_STEP: u64 = 4;

/// The DEEP profile's buffer (tbf `latency 5ms` at 1 Gb/s).
pub const DEEP: u64 = 629_000;
/// The SHALLOW profile's buffer (tbf `limit 32000`).
pub const SHALLOW: u64 = 32_000;

#[derive(Debug, Clone)]
pub struct Config {
    /// Bottleneck rate in bits per second.
    pub rate_bps: u64,
    /// Bottleneck buffer in bytes.
    pub limit: u64,
    /// One-way propagation, each direction.
    pub prop: Duration,
    /// Each host's own link.
    pub host_rate_bps: u64,
    /// AckReq every this many packets.
    pub ack_every: u64,
    /// Probability of marking a RoCE packet CE at the FIFO.
    pub mark_ce: f64,
    /// PSNs in flight per QP at most.
    pub qp_cap: u64,
    pub cc: CcConfig,
    pub seed: u64,
    /// The receiving processes' scheduling stalls, if any.
    pub stalls: Option<Stalls>,
}

/// A busy receiving host: the process that answers a RoCE host's packets
/// is now and then off its CPU, and what arrives meanwhile is acknowledged
/// only when it runs again (a user-space responder; the kernel answers
/// TCP's segments at once). Stalls start `gap` apart and last `len`, both
/// drawn uniformly from their ranges, independently for each RoCE host's
/// receiver.
#[derive(Debug, Clone, Copy)]
pub struct Stalls {
    pub gap: (Duration, Duration),
    pub len: (Duration, Duration),
}

impl Config {
    /// 1 Gb/s, 10 µs of base round trip, a 10 Gb/s host link.
    pub fn gigabit(limit: u64) -> Self {
        Config {
            rate_bps: 1_000_000_000,
            limit,
            prop: Duration::from_micros(5),
            host_rate_bps: 10_000_000_000,
            ack_every: 8,
            mark_ce: 0.0,
            qp_cap: 1024,
            cc: CcConfig::with_mss(MSS as u32),
            seed: 1,
            stalls: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Pkt {
    flow: u32,
    /// PSN (RoCE) or segment (TCP).
    seq: u64,
    /// TCP transmission index.
    xmit: u64,
    size: u32,
    ack_req: bool,
    ce: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A sender may send.
    Wake(u32),
    /// A frame reaches the FIFO.
    Arrive(Pkt),
    /// A frame finished leaving the FIFO.
    Depart(u32),
    /// A frame reaches its receiver.
    Deliver(Pkt),
    /// RoCE feedback: cumulative ACK up to (excluding) the PSN.
    Ack(u32, u64),
    /// RoCE sequence NAK: expected PSN.
    Nak(u32, u64),
    Cnp(u32),
    /// TCP ACK of a transmission.
    TcpAck(u32, u64),
    /// A flow's periodic timer.
    Tick(u32),
}

/// A sender: a RoCE host (a controller or rxe's fixed window, and its QPs)
/// or a TCP flow.
#[derive(Debug)]
enum Sender {
    Roce {
        cc: Option<Box<PathController>>,
        qps: Vec<u32>,
        rr: usize,
        tokens: f64,
        refilled: Instant,
    },
    Tcp(u32),
}

#[derive(Debug)]
struct Host {
    sender: Sender,
    link_free: Instant,
    wake: Option<Instant>,
}

/// One flow (a QP, or a TCP connection) and its receiver.
#[derive(Debug)]
pub struct Flow {
    host: u32,
    start: Instant,
    stop: Instant,
    tcp: Option<Box<Cubic>>,
    una: u64,
    next: u64,
    fresh: u64,
    noack: u64,
    /// The requester's own PSN window (used without a controller).
    window: u64,
    timed: VecDeque<(u64, Instant)>,
    last_progress: Instant,
    rcv_expected: u64,
    rcv_nak_sent: bool,
    last_cnp: Option<Instant>,
    /// Delivered payload bytes per millisecond.
    pub bins: Vec<u64>,
    /// Packets sent for the first time, and sent again.
    pub first: u64,
    pub resent: u64,
    /// Drops of this flow's frames at the FIFO.
    pub drops: u64,
    /// Frames of this flow that reached the FIFO.
    pub arrivals: u64,
}

impl Flow {
    /// Goodput in bits per second over `[from, to)` milliseconds.
    pub fn goodput(&self, from_ms: usize, to_ms: usize) -> f64 {
        let to = to_ms.min(self.bins.len());
        let bytes: u64 = self.bins.get(from_ms..to).map_or(0, |b| b.iter().sum());
        bytes as f64 * 8.0 / ((to_ms - from_ms) as f64 / 1000.0)
    }
}

/// The virtual network.
pub struct Sim {
    pub cfg: Config,
    now: Instant,
    seq: u64,
    events: BinaryHeap<Reverse<(Instant, u64, Ev)>>,
    hosts: Vec<Host>,
    pub flows: Vec<Flow>,
    queued: u64,
    busy_until: Instant,
    rng: Rng,
    /// Queueing delay histogram in µs, counted from `measure_from`.
    qdelay: Vec<u64>,
    measure_from: Instant,
    /// Each CNP cut: host, time, the controller's srtt before it.
    pub cnp_cuts: Vec<(u32, Instant, Duration)>,
    pub drops: u64,
    pub arrivals: u64,
    /// Each RoCE host's receiver: the current or next stall.
    stall: Vec<(Instant, Instant)>,
    stall_rng: Rng,
}

fn ser(size: u32, rate_bps: u64) -> Duration {
    Duration::from_nanos(u64::from(size) * 8 * 1_000_000_000 / rate_bps)
}

impl Sim {
    pub fn new(cfg: Config) -> Self {
        let rng = Rng::new(cfg.seed);
        let stall_rng = Rng::new(cfg.seed ^ 0x5eed_57a1);
        Sim {
            stall: Vec::new(),
            stall_rng,
            cfg,
            now: Instant::ZERO,
            seq: 0,
            events: BinaryHeap::new(),
            hosts: Vec::new(),
            flows: Vec::new(),
            queued: 0,
            busy_until: Instant::ZERO,
            rng,
            qdelay: vec![0; 20_001],
            measure_from: Instant::ZERO,
            cnp_cuts: Vec::new(),
            drops: 0,
            arrivals: 0,
        }
    }

    /// A RoCE host with its own controller (or rxe's fixed 128-PSN window
    /// per QP with `cc == None`); returns its index.
    pub fn roce_host(&mut self, cc: Option<CcConfig>) -> u32 {
        self.hosts.push(Host {
            sender: Sender::Roce {
                cc: cc.map(|c| Box::new(PathController::new(c))),
                qps: Vec::new(),
                rr: 0,
                tokens: 0.0,
                refilled: Instant::ZERO,
            },
            link_free: Instant::ZERO,
            wake: None,
        });
        (self.hosts.len() - 1) as u32
    }

    /// A QP on `host` sending from `start` until `stop`; returns the flow.
    pub fn qp(&mut self, host: u32, start: Duration, stop: Duration) -> u32 {
        let f = self.flow(host, start, stop, None);
        if let Sender::Roce { qps, .. } = &mut self.hosts[host as usize].sender {
            qps.push(f);
        }
        f
    }

    /// A TCP CUBIC flow on a host of its own.
    pub fn tcp(&mut self, start: Duration, stop: Duration) -> u32 {
        let h = self.hosts.len() as u32;
        let f = self.flows.len() as u32;
        self.hosts.push(Host {
            sender: Sender::Tcp(f),
            link_free: Instant::ZERO,
            wake: None,
        });
        self.flow(h, start, stop, Some(Box::new(Cubic::new())))
    }

    fn flow(&mut self, host: u32, start: Duration, stop: Duration, tcp: Option<Box<Cubic>>) -> u32 {
        let f = self.flows.len() as u32;
        let start = Instant::ZERO + start;
        self.flows.push(Flow {
            host,
            start,
            stop: Instant::ZERO + stop,
            tcp,
            una: 0,
            next: 0,
            fresh: 0,
            noack: 0,
            window: RXE_WINDOW,
            timed: VecDeque::new(),
            last_progress: start,
            rcv_expected: 0,
            rcv_nak_sent: false,
            last_cnp: None,
            bins: Vec::new(),
            first: 0,
            resent: 0,
            drops: 0,
            arrivals: 0,
        });
        self.at(start, Ev::Wake(host));
        self.at(start, Ev::Tick(f));
        f
    }

    /// The controller of a RoCE host.
    pub fn controller(&self, host: u32) -> Option<&PathController> {
        match &self.hosts[host as usize].sender {
            Sender::Roce { cc, .. } => cc.as_deref(),
            Sender::Tcp(_) => None,
        }
    }

    fn at(&mut self, t: Instant, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, ev)));
    }

    fn wake(&mut self, host: u32, t: Instant) {
        let h = &mut self.hosts[host as usize];
        if h.wake.is_some_and(|w| w <= t && w >= self.now) {
            return;
        }
        h.wake = Some(t);
        self.at(t, Ev::Wake(host));
    }

    /// Runs until `end`, counting queueing delay from `measure_from`.
    pub fn run(&mut self, end: Duration, measure_from: Duration) {
        let end = Instant::ZERO + end;
        self.measure_from = Instant::ZERO + measure_from;
        while let Some(Reverse((t, _, ev))) = self.events.pop() {
            if t > end {
                self.events.push(Reverse((t, 0, ev)));
                break;
            }
            self.now = t;
            self.handle(ev);
        }
        self.now = end;
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Wake(h) => {
                if self.hosts[h as usize].wake.is_some_and(|w| w <= self.now) {
                    self.hosts[h as usize].wake = None;
                }
                self.send(h);
            }
            Ev::Arrive(p) => self.arrive(p),
            Ev::Depart(size) => self.queued -= u64::from(size),
            Ev::Deliver(p) => self.deliver(p),
            Ev::Ack(f, cum) => self.roce_ack(f, cum, false),
            Ev::Nak(f, e) => self.roce_ack(f, e, true),
            Ev::Cnp(f) => {
                let h = self.flows[f as usize].host;
                let now = self.now;
                if let Sender::Roce { cc: Some(cc), .. } = &mut self.hosts[h as usize].sender {
                    let before = cc.counters().cnp_cuts;
                    let srtt = cc.srtt().unwrap_or_default();
                    cc.on_cnp(now);
                    if cc.counters().cnp_cuts > before {
                        self.cnp_cuts.push((h, now, srtt));
                    }
                }
            }
            Ev::TcpAck(f, x) => {
                let now = self.now;
                let fl = &mut self.flows[f as usize];
                if let Some(t) = fl.tcp.as_mut() {
                    t.on_ack(now, x);
                }
                let h = fl.host;
                self.send(h);
            }
            Ev::Tick(f) => self.tick(f),
        }
    }

    fn send(&mut self, h: u32) {
        let now = self.now;
        let host = &self.hosts[h as usize];
        if host.link_free > now {
            let t = host.link_free;
            self.wake(h, t);
            return;
        }
        let pkt = match host.sender {
            Sender::Tcp(f) => self.send_tcp(f),
            Sender::Roce { .. } => self.send_roce(h),
        };
        if let Some(p) = pkt {
            let free = now + ser(p.size, self.cfg.host_rate_bps);
            self.hosts[h as usize].link_free = free;
            self.at(free, Ev::Arrive(p));
            self.wake(h, free);
        }
    }

    fn send_tcp(&mut self, f: u32) -> Option<Pkt> {
        let now = self.now;
        let fl = &mut self.flows[f as usize];
        if now < fl.start || now >= fl.stop {
            return None;
        }
        let (x, seq) = fl.tcp.as_mut()?.poll_send(now)?;
        Some(Pkt {
            flow: f,
            seq,
            xmit: x,
            size: tcp::FRAME,
            ack_req: true,
            ce: false,
        })
    }

    fn send_roce(&mut self, h: u32) -> Option<Pkt> {
        let now = self.now;
        let cap = self.cfg.qp_cap;
        let Sender::Roce {
            cc,
            qps,
            rr,
            tokens,
            refilled,
        } = &mut self.hosts[h as usize].sender
        else {
            return None;
        };
        // The window: the controller's, or each QP's own PSN window.
        let controlled = cc.is_some();
        if let Some(cc) = cc {
            if cc.in_flight() > 0 && cc.in_flight() + MSS > cc.window() {
                return None;
            }
        }
        // Pacing: a token bucket at the controller's rate.
        if let Some(rate) = cc.as_deref().and_then(PathController::pacing_rate) {
            let rate = rate as f64;
            let quantum = (rate * 100e-6).clamp(2.0 * MSS as f64, 64.0 * MSS as f64);
            let dt = now.saturating_duration_since(*refilled).as_secs_f64();
            *tokens = (*tokens + rate * dt).min(quantum);
            *refilled = now;
            if *tokens < MSS as f64 {
                let wait = Duration::from_secs_f64((MSS as f64 - *tokens) / rate);
                let t = now + wait.max(Duration::from_nanos(1));
                self.wake(h, t);
                return None;
            }
        } else {
            *tokens = 64.0 * MSS as f64;
            *refilled = now;
        }
        // Round robin over the QPs that may send.
        let n = qps.len();
        let mut pick = None;
        for i in 0..n {
            let f = qps[(*rr + i) % n];
            let fl = &self.flows[f as usize];
            let cap = if controlled { cap } else { fl.window };
            if now >= fl.start && now < fl.stop && fl.next - fl.una < cap {
                pick = Some(f);
                *rr = (*rr + i + 1) % n;
                break;
            }
        }
        let f = pick?;
        *tokens -= MSS as f64;
        // AckReq at least twice per QP's share of the window (the
        // requester's `min(64, window/2)` with the window split over the QPs).
        let share = match cc {
            Some(cc) => cc.window() / MSS / n as u64,
            None => self.flows[f as usize].window,
        };
        let every = (share / 2).clamp(1, self.cfg.ack_every);
        if let Some(cc) = cc {
            cc.on_send(now, MSS);
        }
        let fl = &mut self.flows[f as usize];
        let psn = fl.next;
        fl.next += 1;
        let ack_req = fl.noack + 1 >= every;
        fl.noack = if ack_req { 0 } else { fl.noack + 1 };
        if psn == fl.fresh {
            fl.fresh += 1;
            fl.first += 1;
            if ack_req {
                fl.timed.push_back((psn, now));
            }
        } else {
            fl.resent += 1;
        }
        if fl.next - fl.una == 1 {
            fl.last_progress = now;
        }
        Some(Pkt {
            flow: f,
            seq: psn,
            xmit: 0,
            size: FRAME,
            ack_req,
            ce: false,
        })
    }

    fn arrive(&mut self, mut p: Pkt) {
        let now = self.now;
        let fl = &mut self.flows[p.flow as usize];
        fl.arrivals += 1;
        self.arrivals += 1;
        let size = u64::from(p.size);
        if self.queued + size > self.cfg.limit {
            fl.drops += 1;
            self.drops += 1;
            return;
        }
        if fl.tcp.is_none() && self.cfg.mark_ce > 0.0 && self.rng.chance(self.cfg.mark_ce) {
            p.ce = true;
        }
        self.queued += size;
        let start = self.busy_until.max(now);
        if now >= self.measure_from {
            let us = start.saturating_duration_since(now).as_micros() as usize;
            let last = self.qdelay.len() - 1;
            self.qdelay[us.min(last)] += 1;
        }
        let done = start + ser(p.size, self.cfg.rate_bps);
        self.busy_until = done;
        self.at(done, Ev::Depart(p.size));
        self.at(done + self.cfg.prop, Ev::Deliver(p));
    }

    fn deliver(&mut self, p: Pkt) {
        let now = self.now;
        let ms = (now.as_nanos() / 1_000_000) as usize;
        let (host, tcp) = {
            let fl = &self.flows[p.flow as usize];
            (fl.host, fl.tcp.is_some())
        };
        let ready = if tcp {
            now
        } else {
            self.receiver_ready(host, now)
        };
        let back = ready + self.cfg.prop;
        let fl = &mut self.flows[p.flow as usize];
        let delivered = if let Some(t) = fl.tcp.as_mut() {
            let d = t.on_segment(p.seq);
            self.at(back, Ev::TcpAck(p.flow, p.xmit));
            d
        } else {
            let mut d = 0;
            let mut reply = None;
            if p.seq == fl.rcv_expected {
                fl.rcv_expected += 1;
                fl.rcv_nak_sent = false;
                d = MSS;
                if p.ack_req {
                    reply = Some(Ev::Ack(p.flow, fl.rcv_expected));
                }
            } else if p.seq > fl.rcv_expected {
                if !fl.rcv_nak_sent {
                    fl.rcv_nak_sent = true;
                    reply = Some(Ev::Nak(p.flow, fl.rcv_expected));
                }
            } else if p.ack_req {
                reply = Some(Ev::Ack(p.flow, fl.rcv_expected));
            }
            let cnp = p.ce
                && fl
                    .last_cnp
                    .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_micros(50));
            if cnp {
                fl.last_cnp = Some(now);
            }
            if let Some(r) = reply {
                self.at(back, r);
            }
            if cnp {
                self.at(back, Ev::Cnp(p.flow));
            }
            d
        };
        let fl = &mut self.flows[p.flow as usize];
        if fl.bins.len() <= ms {
            fl.bins.resize(ms + 1, 0);
        }
        fl.bins[ms] += delivered;
    }

    /// When the receiver of `host`'s flows can answer what reached it at
    /// `now`: at once, or when its current stall ends.
    fn receiver_ready(&mut self, host: u32, now: Instant) -> Instant {
        let Some(st) = self.cfg.stalls else {
            return now;
        };
        let h = host as usize;
        if self.stall.len() <= h {
            self.stall.resize(h + 1, (Instant::ZERO, Instant::ZERO));
        }
        let draw = |rng: &mut Rng, (lo, hi): (Duration, Duration)| {
            Duration::from_nanos(rng.range(lo.as_nanos() as u64, hi.as_nanos() as u64))
        };
        while now >= self.stall[h].1 {
            let start = self.stall[h].1 + draw(&mut self.stall_rng, st.gap);
            let end = start + draw(&mut self.stall_rng, st.len);
            self.stall[h] = (start, end);
        }
        let (start, end) = self.stall[h];
        if now >= start {
            end
        } else {
            now
        }
    }

    /// A cumulative ACK up to `cum`, or a sequence NAK expecting `cum`.
    fn roce_ack(&mut self, f: u32, cum: u64, nak: bool) {
        let now = self.now;
        let fl = &mut self.flows[f as usize];
        let mut acked = 0;
        let mut rtt = None;
        if cum > fl.una {
            fl.window = (fl.window + WINDOW_STEP).min(RXE_WINDOW);
            acked = (cum - fl.una) * MSS;
            fl.una = cum;
            fl.next = fl.next.max(cum);
            fl.last_progress = now;
            while let Some(&(psn, t)) = fl.timed.front() {
                if psn >= cum {
                    break;
                }
                rtt = Some(now.saturating_duration_since(t));
                fl.timed.pop_front();
            }
        }
        let mut abandoned = 0;
        if nak && cum < fl.next {
            fl.window = (fl.window / 2).max(MIN_WINDOW);
            abandoned = (fl.next - cum) * MSS;
            fl.next = cum;
            fl.noack = 0;
            while fl.timed.back().is_some_and(|&(psn, _)| psn >= cum) {
                fl.timed.pop_back();
            }
        }
        let h = fl.host;
        if let Sender::Roce { cc: Some(cc), .. } = &mut self.hosts[h as usize].sender {
            if acked > 0 || rtt.is_some() {
                cc.on_ack(now, acked, rtt);
            }
            if nak && abandoned > 0 {
                cc.on_loss(now, abandoned);
            }
        }
        self.send(h);
    }

    fn tick(&mut self, f: u32) {
        let now = self.now;
        let fl = &mut self.flows[f as usize];
        if now >= fl.stop {
            return;
        }
        let h = fl.host;
        if let Some(t) = fl.tcp.as_mut() {
            t.on_tick(now);
            self.at(now + Duration::from_millis(10), Ev::Tick(f));
            self.send(h);
            return;
        }
        let srtt = self
            .controller(h)
            .and_then(PathController::srtt)
            .unwrap_or_default();
        let rto = (srtt * 4).max(Duration::from_millis(1));
        let fl = &mut self.flows[f as usize];
        if fl.next > fl.una && now.saturating_duration_since(fl.last_progress) >= rto {
            let abandoned = (fl.next - fl.una) * MSS;
            fl.window = (fl.window / 2).max(MIN_WINDOW);
            fl.next = fl.una;
            fl.noack = 0;
            fl.timed.clear();
            fl.last_progress = now;
            if let Sender::Roce { cc: Some(cc), .. } = &mut self.hosts[h as usize].sender {
                cc.on_loss(now, abandoned);
            }
            self.send(h);
        }
        self.at(now + Duration::from_micros(500), Ev::Tick(f));
    }

    /// Queueing delay percentile (0–100) in µs, over frames that reached the
    /// FIFO after `measure_from` and were queued.
    pub fn qdelay_percentile(&self, p: f64) -> u64 {
        let total: u64 = self.qdelay.iter().sum();
        let want = (total as f64 * p / 100.0).ceil() as u64;
        let mut seen = 0;
        for (us, &n) in self.qdelay.iter().enumerate() {
            seen += n;
            if seen >= want.max(1) {
                return us as u64;
            }
        }
        self.qdelay.len() as u64
    }
}

/// Jain's fairness index of `xs`.
pub fn jain(xs: &[f64]) -> f64 {
    let s: f64 = xs.iter().sum();
    let q: f64 = xs.iter().map(|x| x * x).sum();
    if q == 0.0 {
        return 0.0;
    }
    s * s / (xs.len() as f64 * q)
}
