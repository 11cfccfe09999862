//! Simulation over many seeds: connect, accept, complete, disconnect (one
//! side, the other, or both at once) with seeded loss, duplication,
//! reordering, slow applications and device removal. Checked for every
//! seed:
//!
//! * every request (connect, accept, disconnect) ends in exactly one
//!   terminal event, within a bounded virtual time (40 minutes — the
//!   longest legal path is 16 REQs each extended by an MRA, ≈ 18 min);
//! * no terminal event arrives for a request that is not pending;
//! * after `remove_device` a side sends nothing and reports nothing more
//!   than one `DeviceRemoved` per endpoint;
//! * every REQ and DREQ carries the TID Linux would form.
//!
//! A failing seed is printed with its fault parameters and replays
//! deterministically.

use super::harness::*;
use ndverbs_proto::cm::*;
use ndverbs_proto::time::{Duration, Instant};
use ndverbs_wire::cm::CmMessage;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Connect,
    Accept,
    Disconnect,
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Accept(EndpointId),
    Complete(EndpointId),
    Disconnect(EndpointId),
    Remove,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    A,
    B,
    Both,
}

struct Sim {
    net: Net,
    rng: Rng,
    actions: Vec<(Instant, Side, Action)>,
    open: HashMap<(Side, EndpointId), Kind>,
    disconnected: HashMap<(Side, EndpointId), bool>,
    who: Who,
    seen: usize,
    removed: [bool; 2],
    log: Vec<String>,
}

impl Sim {
    fn delay(&mut self, max_ms: u64) -> Duration {
        Duration::from_millis(self.rng.below(max_ms + 1))
    }

    fn schedule(&mut self, after: Duration, side: Side, a: Action) {
        let at = self.net.now + after;
        self.actions.push((at, side, a));
    }

    fn close(&mut self, side: Side, ep: EndpointId, kinds: &[Kind], e: &CmEvent) {
        match self.open.get(&(side, ep)) {
            Some(k) if kinds.contains(k) => {
                self.open.remove(&(side, ep));
            }
            other => panic!(
                "terminal event {e:?} on {side:?} with open request {other:?}\n{}",
                self.log.join("\n")
            ),
        }
    }

    fn want_disconnect(&mut self, side: Side, ep: EndpointId, initiator: bool) {
        let mine = match self.who {
            Who::A => side == Side::A,
            Who::B => side == Side::B,
            Who::Both => true,
        };
        if !initiator || mine {
            let d = if initiator {
                self.delay(3000)
            } else {
                self.delay(2000)
            };
            self.schedule(d, side, Action::Disconnect(ep));
        }
    }

    fn on_events(&mut self) {
        while self.seen < self.net.events.len() {
            let (t, side, e) = self.net.events[self.seen].clone();
            self.seen += 1;
            self.log.push(format!("{t:?} {side:?} {e:?}"));
            assert!(
                !self.removed[side as usize] || matches!(e, CmEvent::DeviceRemoved { .. }),
                "event after removal: {e:?}"
            );
            let ep = e.endpoint();
            match &e {
                CmEvent::ConnectRequest(r) => {
                    let slow = self.rng.chance(0.2);
                    let d = self.delay(if slow { 20_000 } else { 500 });
                    self.schedule(d, side, Action::Accept(r.endpoint));
                }
                CmEvent::RepReceived { .. } => {
                    self.close(side, ep, &[Kind::Connect], &e);
                    let slow = self.rng.chance(0.2);
                    let d = self.delay(if slow { 10_000 } else { 200 });
                    self.schedule(d, side, Action::Complete(ep));
                }
                CmEvent::Established { .. } => {
                    self.close(side, ep, &[Kind::Accept], &e);
                    self.want_disconnect(side, ep, true);
                }
                CmEvent::ConnectTimeout { .. } | CmEvent::Unreachable { .. } => {
                    self.close(side, ep, &[Kind::Connect], &e)
                }
                CmEvent::AcceptTimeout { .. } => self.close(side, ep, &[Kind::Accept], &e),
                CmEvent::Rejected { .. } => {
                    if matches!(
                        self.open.get(&(side, ep)),
                        Some(Kind::Connect | Kind::Accept)
                    ) {
                        self.open.remove(&(side, ep));
                    }
                }
                CmEvent::DreqReceived { .. } => self.want_disconnect(side, ep, false),
                CmEvent::DisconnectDone { .. } => self.close(side, ep, &[Kind::Disconnect], &e),
                CmEvent::DeviceRemoved { .. } => {
                    assert!(self.removed[side as usize]);
                    self.open.remove(&(side, ep));
                }
                CmEvent::MraReceived { .. }
                | CmEvent::StaleConnection { .. }
                | CmEvent::TimewaitExit { .. } => {}
                // This simulation sends no SIDR_REQ.
                CmEvent::SidrReply { .. } => panic!("unexpected {e:?}"),
            }
        }
    }

    fn act(&mut self, side: Side, a: Action) {
        let now = self.net.now;
        if self.removed[side as usize] {
            return;
        }
        self.log.push(format!("{now:?} {side:?} do {a:?}"));
        match a {
            Action::Accept(ep) => {
                let qp = 0x1000 + ep.0 as u32;
                if self
                    .net
                    .agent(side)
                    .accept(now, ep, AcceptParams::new(qp, 7))
                    .is_ok()
                {
                    self.open.insert((side, ep), Kind::Accept);
                }
            }
            Action::Complete(ep) => {
                if self.net.agent(side).complete_connect(now, ep, &[]).is_ok() {
                    self.want_disconnect(side, ep, true);
                }
            }
            Action::Disconnect(ep) => {
                if self.disconnected.insert((side, ep), true).is_some() {
                    return; // the application disconnects once
                }
                if self.net.agent(side).disconnect(now, ep).is_ok() {
                    self.open.insert((side, ep), Kind::Disconnect);
                }
            }
            Action::Remove => {
                self.net.remove_device(side);
                self.removed[side as usize] = true;
            }
        }
        self.net.flush();
    }
}

/// Outcome counts over all seeds, to show the simulation covers the paths.
#[derive(Debug, Default)]
struct Stats {
    events: HashMap<String, usize>,
    mads: usize,
    lost: usize,
}

fn run(seed: u64, stats: &mut Stats) {
    let mut rng = Rng::new(seed);
    let faults = Faults {
        loss: rng.below(45) as f64 / 100.0,
        dup: rng.below(20) as f64 / 100.0,
        jitter: Duration::from_millis(rng.below(30)),
    };
    let who = [Who::A, Who::B, Who::Both][rng.below(3) as usize];
    let remove = rng.chance(0.2).then(|| {
        let side = if rng.chance(0.5) { Side::A } else { Side::B };
        (side, Duration::from_millis(rng.below(20_000)))
    });
    let ctx = format!("seed {seed}: {faults:?} who {who:?} remove {remove:?}");
    let mut sim = Sim {
        net: Net::new(seed, faults),
        rng,
        actions: Vec::new(),
        open: HashMap::new(),
        disconnected: HashMap::new(),
        who,
        seen: 0,
        removed: [false, false],
        log: vec![ctx.clone()],
    };
    sim.net.b.listen(sid(7174)).unwrap();
    let p = ConnectParams::new(sid(7174), ip(B_IP), 0x11, 0x464b);
    let ea = sim.net.a.connect(Instant::ZERO, p).unwrap();
    sim.open.insert((Side::A, ea), Kind::Connect);
    if let Some((side, at)) = remove {
        sim.schedule(at, side, Action::Remove);
    }
    let end = Instant::ZERO + Duration::from_secs(40 * 60);
    loop {
        sim.net.flush();
        sim.on_events();
        let next_action = sim.actions.iter().map(|a| a.0).min();
        let next_net = sim.net.next_time();
        let t = match (next_action, next_net) {
            (None, None) => break,
            (Some(a), Some(n)) => a.min(n),
            (a, n) => a.or(n).unwrap(),
        };
        if t > end {
            break;
        }
        if next_action.is_some_and(|a| a <= t) && next_net.is_none_or(|n| n >= t) {
            sim.net.now = sim.net.now.max(t);
            let (due, rest): (Vec<_>, Vec<_>) = sim.actions.drain(..).partition(|a| a.0 <= t);
            sim.actions = rest;
            for (_, side, a) in due {
                sim.act(side, a);
                sim.on_events();
            }
        } else {
            sim.net.step(t);
        }
    }
    sim.on_events();
    assert!(
        sim.open.is_empty(),
        "{ctx}: requests never ended: {:?}\n{}",
        sim.open,
        sim.log.join("\n")
    );
    for (_, _, e) in &sim.net.events {
        // The variant's name (a disconnect's also says how it ended).
        let name = match e {
            CmEvent::DisconnectDone { how, .. } => format!("Done({how:?})"),
            other => format!("{other:?}")
                .split([' ', '('])
                .next()
                .unwrap_or_default()
                .to_string(),
        };
        *stats.events.entry(name).or_default() += 1;
    }
    stats.mads += sim.net.wire.len();
    stats.lost += sim.net.wire.iter().filter(|s| s.dropped).count();
    // Linux's TID layout on everything we originate.
    for s in &sim.net.wire {
        if let CmMessage::Req(_) | CmMessage::Dreq(_) = s.msg {
            assert_eq!(s.tid, form_tid(1, s.msg.local_comm_id()), "{ctx}");
        }
    }
}

#[test]
fn every_request_ends_exactly_once_under_faults() {
    let mut stats = Stats::default();
    for seed in 0..3000 {
        run(seed, &mut stats);
    }
    println!("{stats:#?}");
    // The paths that matter were all taken.
    for e in [
        "MraReceived",
        "ConnectTimeout",
        "AcceptTimeout",
        "Done(DrepReceived)",
        "Done(DrepSent)",
        "Done(DreqTimedOut)",
        "DeviceRemoved",
        "TimewaitExit",
    ] {
        assert!(
            stats.events.get(e).copied().unwrap_or(0) > 0,
            "{e} never happened"
        );
    }
}
