//! Two CM agents wired back to back through an in-memory network on virtual
//! time: seeded loss, duplication and reordering (random delay), plus
//! targeted drops ("lose the first REP from B"). Every MAD either agent
//! emits is logged (before faults) and checked to parse.

#![allow(dead_code)]

pub use crate::rng::Rng;
use ndverbs_proto::cm::*;
use ndverbs_proto::time::{Duration, Instant};
use ndverbs_wire::cm::{attr, CmMessage};
use ndverbs_wire::mad::{Mad, MAD_LEN};
use std::collections::BTreeMap;
use std::net::IpAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    A,
    B,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    pub loss: f64,
    pub dup: f64,
    /// Extra random delay 0..jitter (reorders).
    pub jitter: Duration,
}

/// "Drop the next `count` messages with attribute `attr` sent by `from`."
#[derive(Debug, Clone, Copy)]
pub struct DropRule {
    pub from: Side,
    pub attr: u16,
    pub count: usize,
}

/// One MAD as it left an agent.
#[derive(Debug, Clone)]
pub struct Sent {
    pub at: Instant,
    pub from: Side,
    pub dst: IpAddr,
    pub tid: u64,
    pub msg: CmMessage,
    pub mad: [u8; MAD_LEN],
    pub dropped: bool,
}

pub const A_IP: &str = "10.0.0.1";
pub const B_IP: &str = "10.0.0.2";
pub const A_GUID: u64 = 0x0200_00ff_fe00_000a;
pub const B_GUID: u64 = 0x0200_00ff_fe00_000b;
pub const LATENCY: Duration = Duration::from_micros(100);

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn sid(port: u16) -> u64 {
    ndverbs_wire::cma::service_id(ndverbs_wire::cma::RDMA_PS_TCP, port)
}

pub struct Net {
    pub now: Instant,
    pub a: CmAgent,
    pub b: CmAgent,
    queue: BTreeMap<(Instant, u64), (Side, IpAddr, [u8; MAD_LEN])>,
    seq: u64,
    pub rng: Rng,
    pub faults: Faults,
    pub rules: Vec<DropRule>,
    /// Everything sent, in order.
    pub wire: Vec<Sent>,
    pub events: Vec<(Instant, Side, CmEvent)>,
    /// Messages addressed to an agent after `remove_device` are still
    /// delivered (and must be ignored).
    pub removed_at: [Option<Instant>; 2],
}

impl Net {
    pub fn new(seed: u64, faults: Faults) -> Self {
        let a = CmAgent::new(CmConfig::new(ip(A_IP), A_GUID, seed ^ 0xaaaa));
        let b = CmAgent::new(CmConfig::new(ip(B_IP), B_GUID, seed ^ 0xbbbb));
        Self::with(a, b, seed, faults)
    }

    pub fn with(a: CmAgent, b: CmAgent, seed: u64, faults: Faults) -> Self {
        Net {
            now: Instant::ZERO,
            a,
            b,
            queue: BTreeMap::new(),
            seq: 0,
            rng: Rng::new(seed),
            faults,
            rules: Vec::new(),
            wire: Vec::new(),
            events: Vec::new(),
            removed_at: [None, None],
        }
    }

    pub fn agent(&mut self, s: Side) -> &mut CmAgent {
        match s {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    pub fn drop_next(&mut self, from: Side, attr: u16, count: usize) {
        self.rules.push(DropRule { from, attr, count });
    }

    /// Moves queued output of both agents onto the network and events into
    /// the log.
    pub fn flush(&mut self) {
        for side in [Side::A, Side::B] {
            while let Some(t) = self.agent(side).poll_transmit() {
                assert!(
                    self.removed_at[side as usize].is_none(),
                    "{side:?} sent after remove_device"
                );
                let m = Mad::parse(&t.mad).expect("our MAD parses");
                let msg = CmMessage::parse(&m).expect("our CM message parses");
                let attr_id = m.header.attr_id;
                let mut dropped = false;
                if let Some(r) = self
                    .rules
                    .iter_mut()
                    .find(|r| r.from == side && r.attr == attr_id && r.count > 0)
                {
                    r.count -= 1;
                    dropped = true;
                }
                if !dropped && self.rng.chance(self.faults.loss) {
                    dropped = true;
                }
                self.wire.push(Sent {
                    at: self.now,
                    from: side,
                    dst: t.dst,
                    tid: m.header.tid,
                    msg,
                    mad: t.mad,
                    dropped,
                });
                if dropped {
                    continue;
                }
                let copies = if self.rng.chance(self.faults.dup) {
                    2
                } else {
                    1
                };
                for _ in 0..copies {
                    let jitter = self.faults.jitter.as_nanos() as u64;
                    let at = self.now + LATENCY + Duration::from_nanos(self.rng.below(jitter));
                    let src = self.agent(side).config().local_addr;
                    self.seq += 1;
                    self.queue
                        .insert((at, self.seq), (side.other(), src, t.mad));
                }
            }
            while let Some(e) = self.agent(side).poll_event() {
                self.events.push((self.now, side, e));
            }
        }
    }

    /// The next instant something happens.
    pub fn next_time(&self) -> Option<Instant> {
        let q = self.queue.keys().next().map(|k| k.0);
        [q, self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Advances to the next instant (if ≤ `limit`) and processes it.
    pub fn step(&mut self, limit: Instant) -> bool {
        self.flush();
        let Some(t) = self.next_time() else {
            return false;
        };
        if t > limit {
            return false;
        }
        self.now = self.now.max(t);
        while let Some((&k, _)) = self.queue.iter().next() {
            if k.0 > self.now {
                break;
            }
            let (dst, src, mad) = self.queue.remove(&k).unwrap();
            let now = self.now;
            self.agent(dst).handle_mad(now, src, &mad);
            self.flush();
        }
        let now = self.now;
        self.a.handle_timeout(now);
        self.b.handle_timeout(now);
        self.flush();
        true
    }

    /// Runs until nothing is left to do before `now + d`, then sets the
    /// clock to `now + d`.
    pub fn run_for(&mut self, d: Duration) {
        let limit = self.now + d;
        while self.step(limit) {}
        self.now = limit;
    }

    /// Delivers what is in flight and runs timers for up to `d`, stopping
    /// early when the network is empty (timers may remain).
    pub fn settle(&mut self) {
        let limit = self.now + Duration::from_millis(50);
        self.flush();
        while !self.queue.is_empty() && self.step(limit) {}
        self.flush();
    }

    /// `side`'s application disconnects `ep`; then the network settles.
    #[track_caller]
    pub fn disconnect(&mut self, side: Side, ep: EndpointId) {
        let now = self.now;
        self.agent(side).disconnect(now, ep).unwrap();
        self.settle();
    }

    pub fn remove_device(&mut self, s: Side) {
        self.flush();
        self.agent(s).remove_device();
        self.removed_at[s as usize] = Some(self.now);
        self.flush();
    }

    /// Events of `side` (all of them so far), without time.
    pub fn events_of(&self, side: Side) -> Vec<CmEvent> {
        self.events
            .iter()
            .filter(|e| e.1 == side)
            .map(|e| e.2.clone())
            .collect()
    }

    /// Runs for `quiet`, checking that `side`'s application heard nothing,
    /// then for `then`: returns what it heard in that second stretch. For
    /// "this fires at that moment, not before".
    #[track_caller]
    pub fn quiet_then(&mut self, side: Side, quiet: Duration, then: Duration) -> Vec<CmEvent> {
        self.run_for(quiet);
        let early = self.take(side);
        assert!(
            early.is_empty(),
            "{side:?} heard {early:?} within {quiet:?}"
        );
        self.run_for(then);
        self.take(side)
    }

    /// Checks that `side`'s application was told exactly `events` since
    /// it last looked.
    #[track_caller]
    pub fn expect(&mut self, side: Side, events: &[CmEvent]) {
        assert_eq!(self.take(side), events);
    }

    /// Removes and returns the logged events of `side`.
    pub fn take(&mut self, side: Side) -> Vec<CmEvent> {
        self.flush();
        let (mine, rest): (Vec<_>, Vec<_>) = self.events.drain(..).partition(|e| e.1 == side);
        self.events = rest;
        mine.into_iter().map(|e| e.2).collect()
    }

    /// Settles and returns the connection request B's application was
    /// given last (its other events are dropped).
    pub fn connect_request(&mut self) -> Box<ConnectRequest> {
        self.settle();
        match self.take(Side::B).pop() {
            Some(CmEvent::ConnectRequest(r)) => r,
            other => panic!("expected ConnectRequest, got {other:?}"),
        }
    }

    /// Messages on the wire with attribute `attr` sent by `from`.
    pub fn sent(&self, from: Side, attr_id: u16) -> Vec<&Sent> {
        self.wire
            .iter()
            .filter(|s| s.from == from && s.msg.attr_id() == attr_id)
            .collect()
    }

    /// The sequence of message names on the wire, e.g. "A:REQ B:REP A:RTU".
    pub fn trace(&self) -> String {
        self.wire
            .iter()
            .map(|s| {
                format!(
                    "{:?}:{}{}",
                    s.from,
                    s.msg.name(),
                    if s.dropped { "(lost)" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A: connect to B's listener on `port`; returns (listener, A endpoint).
pub fn start(net: &mut Net, port: u16) -> (EndpointId, EndpointId) {
    let l = net.b.listen(sid(port)).unwrap();
    let mut p = ConnectParams::new(sid(port), ip(B_IP), 0x11, 0x464b);
    p.local_port = 50269;
    p.private_data = b"from A".to_vec();
    let now = net.now;
    let ea = net.a.connect(now, p).unwrap();
    (l, ea)
}

pub fn accept_params() -> AcceptParams {
    let mut a = AcceptParams::new(0x22, 0x7d7d7f);
    a.private_data = b"from B".to_vec();
    a
}

/// A connects (`start`) until B's application has the request: returns
/// (A endpoint, B endpoint).
pub fn requested(net: &mut Net) -> (EndpointId, EndpointId) {
    let (_, ea) = start(net, 7174);
    (ea, net.connect_request().endpoint)
}

/// Then B accepts and, once the REP arrived, A completes (its RTU is on
/// its way, not yet delivered): returns (A endpoint, B endpoint).
pub fn completed(net: &mut Net) -> (EndpointId, EndpointId) {
    let (ea, eb) = requested(net);
    net.b.accept(net.now, eb, accept_params()).unwrap();
    net.settle();
    net.a.complete_connect(net.now, ea, &[]).unwrap();
    (ea, eb)
}

/// A network without faults where A's RTU is lost: B accepted, A completed
/// (its RTU never arrives): (the network, A endpoint, B endpoint).
pub fn rtu_lost(seed: u64) -> (Net, EndpointId, EndpointId) {
    let mut net = Net::new(seed, Faults::default());
    net.drop_next(Side::A, RTU, 1);
    let (ea, eb) = completed(&mut net);
    (net, ea, eb)
}

/// The comm IDs of A's and B's endpoints of one connection.
pub fn comm_ids(net: &Net, ea: EndpointId, eb: EndpointId) -> (u32, u32) {
    (
        net.a.local_comm_id(ea).unwrap(),
        net.b.local_comm_id(eb).unwrap(),
    )
}

/// A connected pair: returns (A endpoint, B endpoint), both established,
/// events consumed.
pub fn established(net: &mut Net) -> (EndpointId, EndpointId) {
    let (_, ea) = start(net, 7174);
    net.settle();
    let eb = match net.take(Side::B).as_slice() {
        [CmEvent::ConnectRequest(r)] => r.endpoint,
        other => panic!("expected ConnectRequest, got {other:?}"),
    };
    net.b.accept(net.now, eb, accept_params()).unwrap();
    net.settle();
    assert!(matches!(
        net.take(Side::A).as_slice(),
        [CmEvent::RepReceived { .. }]
    ));
    net.a.complete_connect(net.now, ea, &[]).unwrap();
    net.settle();
    assert_eq!(
        net.take(Side::B),
        vec![CmEvent::Established { endpoint: eb }]
    );
    assert_eq!(net.a.state(ea), Some(CmState::Established));
    assert_eq!(net.b.state(eb), Some(CmState::Established));
    (ea, eb)
}

/// A network without faults and a connection established on it: (the
/// network, A endpoint, B endpoint).
pub fn connected(seed: u64) -> (Net, EndpointId, EndpointId) {
    let mut net = Net::new(seed, Faults::default());
    let (ea, eb) = established(&mut net);
    (net, ea, eb)
}

/// Then A disconnects and B after it (each settled): both in TIMEWAIT.
pub fn closed(seed: u64) -> (Net, EndpointId, EndpointId) {
    let (mut net, ea, eb) = connected(seed);
    net.disconnect(Side::A, ea);
    net.disconnect(Side::B, eb);
    (net, ea, eb)
}

/// The event ending a disconnect of `ep`, as `how` says.
pub fn done(ep: EndpointId, how: DisconnectHow) -> CmEvent {
    CmEvent::DisconnectDone { endpoint: ep, how }
}

/// The event ending the time-wait of `ep`, whose QP was `local_qpn`.
pub fn timewait_exit(ep: EndpointId, local_qpn: u32) -> CmEvent {
    CmEvent::TimewaitExit {
        endpoint: ep,
        local_qpn,
    }
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn at_ms(n: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(n)
}

pub const REQ: u16 = attr::REQ;
pub const REP: u16 = attr::REP;
pub const RTU: u16 = attr::RTU;
pub const REJ: u16 = attr::REJ;
pub const MRA: u16 = attr::MRA;
pub const DREQ: u16 = attr::DREQ;
pub const DREP: u16 = attr::DREP;
