//! A TCP CUBIC sender as the kernel runs it on a bulk transfer, reduced to
//! what matters at a FIFO: slow start until the first loss (no HyStart: the
//! kernel's HyStart exits only on ≥ 4 ms of extra delay, i.e. once a 5-ms
//! buffer is full anyway), CUBIC growth with its TCP-friendly floor (RFC 8312:
//! C = 0.4, β = 0.7, fast convergence), SACK-exact loss detection (a packet
//! is lost when one sent after it is acknowledged — FIFO paths do not
//! reorder), one reduction per round trip (recovery until everything sent
//! before the reduction is acknowledged), selective retransmission, a 200-ms
//! minimum RTO, an ACK per segment. Segments are 1448 B in 1514-B frames.

use ndverbs_proto::time::{Duration, Instant};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// TCP payload per segment.
pub const MSS: u64 = 1448;
/// A segment's frame on the wire.
pub const FRAME: u32 = 1514;
const C: f64 = 0.4;
const BETA: f64 = 0.7;
const RTO: Duration = Duration::from_millis(200);

/// One CUBIC flow's sender and receiver state.
#[derive(Debug)]
pub struct Cubic {
    pub cwnd: f64,
    ssthresh: f64,
    /// Transmissions in flight: transmission index → (segment, sent at).
    in_flight: BTreeMap<u64, (u64, Instant)>,
    retx: VecDeque<u64>,
    next_seq: u64,
    next_xmit: u64,
    recovery_until: Option<u64>,
    w_last_max: f64,
    epoch: Option<Instant>,
    k: f64,
    origin: f64,
    w_est: f64,
    min_rtt: Option<Duration>,
    last_ack: Instant,
    /// Receiver: the next in-order segment and those above it.
    rcv_next: u64,
    rcv_ooo: BTreeSet<u64>,
    pub losses: u64,
    pub retransmits: u64,
    pub sent: u64,
}

impl Cubic {
    pub fn new() -> Self {
        Cubic {
            cwnd: 10.0,
            ssthresh: f64::INFINITY,
            in_flight: BTreeMap::new(),
            retx: VecDeque::new(),
            next_seq: 0,
            next_xmit: 0,
            recovery_until: None,
            w_last_max: 0.0,
            epoch: None,
            k: 0.0,
            origin: 0.0,
            w_est: 0.0,
            min_rtt: None,
            last_ack: Instant::ZERO,
            rcv_next: 0,
            rcv_ooo: BTreeSet::new(),
            losses: 0,
            retransmits: 0,
            sent: 0,
        }
    }

    /// The next segment to send now, if the window allows: (transmission
    /// index, segment).
    pub fn poll_send(&mut self, now: Instant) -> Option<(u64, u64)> {
        if self.in_flight.len() as f64 >= self.cwnd.floor().max(1.0) {
            return None;
        }
        let seq = match self.retx.pop_front() {
            Some(s) => {
                self.retransmits += 1;
                s
            }
            None => {
                self.next_seq += 1;
                self.next_seq - 1
            }
        };
        if self.in_flight.is_empty() {
            self.last_ack = now;
        }
        let x = self.next_xmit;
        self.next_xmit += 1;
        self.in_flight.insert(x, (seq, now));
        self.sent += 1;
        Some((x, seq))
    }

    /// The receiver got segment `seq`: the payload bytes now delivered in order.
    pub fn on_segment(&mut self, seq: u64) -> u64 {
        if seq < self.rcv_next {
            return 0;
        }
        self.rcv_ooo.insert(seq);
        let before = self.rcv_next;
        while self.rcv_ooo.remove(&self.rcv_next) {
            self.rcv_next += 1;
        }
        (self.rcv_next - before) * MSS
    }

    /// The ACK of transmission `x` arrived.
    pub fn on_ack(&mut self, now: Instant, x: u64) {
        let Some((_, sent)) = self.in_flight.remove(&x) else {
            return;
        };
        self.last_ack = now;
        let rtt = now.saturating_duration_since(sent);
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        // Everything sent before it and still unacknowledged is lost.
        let lost: Vec<u64> = self.in_flight.range(..x).map(|(&k, _)| k).collect();
        if !lost.is_empty() {
            for k in &lost {
                if let Some((seq, _)) = self.in_flight.remove(k) {
                    self.retx.push_back(seq);
                }
            }
            self.losses += lost.len() as u64;
            if self.recovery_until.is_none_or(|r| x > r) {
                self.reduce();
                self.recovery_until = Some(self.next_xmit);
            }
            return;
        }
        if self.recovery_until.is_some_and(|r| x < r) {
            return;
        }
        self.grow(now);
    }

    /// The periodic timer at `now`: no ACK for the RTO while data is in
    /// flight means everything is lost, back to one segment.
    pub fn on_tick(&mut self, now: Instant) {
        if self.in_flight.is_empty() || now.saturating_duration_since(self.last_ack) < RTO {
            return;
        }
        let all: Vec<u64> = self.in_flight.values().map(|&(s, _)| s).collect();
        self.in_flight.clear();
        self.retx.extend(all);
        self.losses += 1;
        self.reduce();
        self.ssthresh = self.cwnd;
        self.cwnd = 1.0;
        self.last_ack = now;
        self.recovery_until = Some(self.next_xmit);
    }

    fn reduce(&mut self) {
        self.epoch = None;
        self.w_last_max = if self.cwnd < self.w_last_max {
            self.cwnd * (1.0 + BETA) / 2.0
        } else {
            self.cwnd
        };
        self.cwnd = (self.cwnd * BETA).max(2.0);
        self.ssthresh = self.cwnd;
    }

    fn grow(&mut self, now: Instant) {
        if self.cwnd < self.ssthresh {
            self.cwnd += 1.0;
            return;
        }
        let epoch = *self.epoch.get_or_insert_with(|| {
            if self.cwnd < self.w_last_max {
                self.k = ((self.w_last_max - self.cwnd) / C).cbrt();
                self.origin = self.w_last_max;
            } else {
                self.k = 0.0;
                self.origin = self.cwnd;
            }
            self.w_est = self.cwnd;
            now
        });
        let t = now.saturating_duration_since(epoch).as_secs_f64()
            + self.min_rtt.unwrap_or_default().as_secs_f64();
        let target = self.origin + C * (t - self.k).powi(3);
        let mut inc = if target > self.cwnd {
            ((target - self.cwnd) / self.cwnd).min(0.5)
        } else {
            0.01 / self.cwnd
        };
        // The TCP-friendly region: Reno's growth with CUBIC's β.
        self.w_est += 3.0 * (1.0 - BETA) / (1.0 + BETA) / self.cwnd;
        if self.w_est > self.cwnd {
            inc = inc.max((self.w_est - self.cwnd) / self.cwnd);
        }
        self.cwnd += inc;
    }
}
