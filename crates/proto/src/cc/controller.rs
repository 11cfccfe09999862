//! [`PathController`]: the window and pacing rate of one path (one peer),
//! shared by every QP to it. See the [module docs](super) for the rules.

use super::competitive::{Detector, Observer};
use super::config::CcConfig;
use super::dcqcn::Dcqcn;
use super::filter::MinFilter;
use super::target::{additive_increase, delay_decrease, flow_scaling};
use crate::time::{Duration, Instant};

/// Which rule moves the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Doubling per round trip until the delay reaches the target, a loss or
    /// a CNP.
    SlowStart,
    /// Swift: additive increase below the target delay, proportional
    /// decrease above it.
    Delay,
    /// A buffer-filling competitor holds the queue: Reno-like, loss-driven.
    Competitive,
}

/// What a controller has done, for `ndv stat` and the tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CcCounters {
    /// Bytes reported sent (first transmissions and re-sends).
    pub bytes_sent: u64,
    /// Bytes reported acknowledged.
    pub bytes_acked: u64,
    /// Round-trip samples taken.
    pub rtt_samples: u64,
    /// Losses reported (go-back-N retries and probes).
    pub losses: u64,
    /// CNPs reported.
    pub cnps: u64,
    /// Cuts caused by CNPs (at most one per round trip).
    pub cnp_cuts: u64,
    /// Cuts caused by delay above the target.
    pub delay_cuts: u64,
    /// Cuts caused by loss.
    pub loss_cuts: u64,
    /// Mode changes of any kind.
    pub mode_switches: u64,
    /// Entries into competitive mode.
    pub competitive_entries: u64,
}

/// A congestion controller for one path, sans IO: time and events in, a
/// window in bytes and a pacing rate out.
///
/// ```
/// use ndverbs_proto::cc::{CcConfig, Mode, PathController};
/// use ndverbs_proto::time::{Duration, Instant};
///
/// let mut cc = PathController::new(CcConfig::default());
/// let t0 = Instant::from_nanos(0);
/// assert_eq!(cc.window(), 64 * 1024);
/// cc.on_send(t0, 8192);
/// // An acknowledgement with a 20 µs sample: far below the target, so slow
/// // start adds what was acknowledged.
/// let t1 = t0 + Duration::from_micros(20);
/// cc.on_ack(t1, 8192, Some(Duration::from_micros(20)));
/// assert_eq!(cc.window(), 72 * 1024);
/// assert_eq!(cc.mode(), Mode::SlowStart);
/// // Uncongested: no pacing.
/// assert_eq!(cc.pacing_rate(), None);
/// cc.on_loss(t1, 0);
/// assert_eq!(cc.window(), 36 * 1024);
/// assert!(cc.pacing_rate().is_some());
/// ```
#[derive(Debug, Clone)]
pub struct PathController {
    cfg: CcConfig,
    cwnd: f64,
    in_flight: u64,
    mode: Mode,
    base: MinFilter,
    srtt: Option<Duration>,
    last_rtt: Option<Duration>,
    last_decrease: Option<Instant>,
    /// The queue target after shallow-buffer adaptation (`q_t_eff`).
    q_eff: Duration,
    last_relax: Option<Instant>,
    losses_in_row: u32,
    observer: Observer,
    detector: Detector,
    /// When competitive mode last ended, and the window then.
    competed: Option<(Instant, f64)>,
    dcqcn: Dcqcn,
    /// The last congestion signal (a cut, a loss, a CNP).
    congested_at: Option<Instant>,
    now: Instant,
    counters: CcCounters,
}

impl PathController {
    /// A controller in slow start at the initial window.
    pub fn new(cfg: CcConfig) -> Self {
        PathController {
            cwnd: cfg.initial_window as f64,
            in_flight: 0,
            mode: Mode::SlowStart,
            base: MinFilter::new(cfg.base_rtt_window),
            srtt: None,
            last_rtt: None,
            last_decrease: None,
            q_eff: cfg.target_queue,
            last_relax: None,
            losses_in_row: 0,
            observer: Observer::default(),
            detector: Detector::default(),
            competed: None,
            dcqcn: Dcqcn::new(cfg.dcqcn_g, cfg.cnp_recovery_steps),
            congested_at: None,
            now: Instant::ZERO,
            counters: CcCounters::default(),
            cfg,
        }
    }

    /// The parameters.
    pub fn config(&self) -> &CcConfig {
        &self.cfg
    }

    /// The congestion window in bytes.
    pub fn window(&self) -> u64 {
        self.cwnd as u64
    }

    /// Bytes sent and neither acknowledged nor given up as lost.
    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// Bytes that may still be sent now: window minus bytes in flight.
    pub fn available(&self) -> u64 {
        self.window().saturating_sub(self.in_flight)
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The base (empty-queue) round trip, once sampled.
    pub fn base_rtt(&self) -> Option<Duration> {
        self.base.get()
    }

    /// The smoothed round trip, once sampled.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The round-trip time aimed at: `base + q_t_eff + fs(cwnd)`, once a
    /// base is known.
    pub fn target(&self) -> Option<Duration> {
        let base = self.base.get()?;
        Some(base + self.q_eff + self.flow_scaling())
    }

    /// The counters.
    pub fn counters(&self) -> CcCounters {
        self.counters
    }

    /// The rate to pace at in bytes per second: `gain·cwnd/srtt` (gain 1.2,
    /// 2.0 in slow start), or `None` while the path is uncongested — no
    /// loss, CNP or delay cut for the quiet period and not competing — so
    /// an idle or fast path (loopback) pays nothing for pacing.
    pub fn pacing_rate(&self) -> Option<u64> {
        let srtt = self.srtt?;
        let quiet = self
            .congested_at
            .is_none_or(|t| self.now.saturating_duration_since(t) >= self.cfg.quiet_period);
        if quiet && self.mode != Mode::Competitive {
            return None;
        }
        let gain = if self.mode == Mode::SlowStart {
            self.cfg.pacing_gain_slow_start
        } else {
            self.cfg.pacing_gain
        };
        let rate = gain * self.cwnd / srtt.as_secs_f64().max(1e-9);
        Some(rate as u64)
    }

    /// `bytes` were put on the wire (a first transmission or a re-send).
    pub fn on_send(&mut self, now: Instant, bytes: u64) {
        self.tick(now);
        self.in_flight = self.in_flight.saturating_add(bytes);
        self.counters.bytes_sent += bytes;
    }

    /// An acknowledgement retired `bytes`, with a round-trip sample if it
    /// acknowledged a timed packet.
    pub fn on_ack(&mut self, now: Instant, bytes: u64, rtt: Option<Duration>) {
        self.tick(now);
        self.in_flight = self.in_flight.saturating_sub(bytes);
        self.counters.bytes_acked += bytes;
        if bytes > 0 {
            self.losses_in_row = 0;
        }
        if let Some(r) = rtt {
            self.sample(now, r);
        }
        self.relax(now);
        if let Some(w) = self.dcqcn.on_tick(now, self.cnp_gap(), self.cwnd) {
            self.cwnd = w;
        }
        let below = match (self.last_rtt, self.target()) {
            (Some(d), Some(t)) => d < t,
            _ => true,
        };
        match self.mode {
            Mode::SlowStart if below => self.cwnd += bytes as f64,
            Mode::SlowStart => {
                self.set_mode(Mode::Delay);
                self.delay_cut(now);
            }
            Mode::Delay if below => self.increase(bytes),
            Mode::Delay => self.delay_cut(now),
            Mode::Competitive => self.increase(bytes),
        }
        self.clamp();
    }

    /// A go-back-N retry or probe: `abandoned` bytes in flight will be sent
    /// again (and reported again by `on_send`).
    pub fn on_loss(&mut self, now: Instant, abandoned: u64) {
        self.tick(now);
        self.in_flight = self.in_flight.saturating_sub(abandoned);
        self.counters.losses += 1;
        self.losses_in_row += 1;
        self.observer.on_loss();
        self.congested_at = Some(now);
        if self.mode == Mode::SlowStart {
            self.set_mode(Mode::Delay);
        }
        if self.mode == Mode::Delay {
            // Loss below the target delay: the buffer is shallower than the
            // target. Aim at half the delay the loss happened at.
            if let (Some(d), Some(base), Some(t)) = (self.last_rtt, self.base.get(), self.target())
            {
                if d < t {
                    let half = d.saturating_sub(base) / 2;
                    self.q_eff = self.q_eff.min(half.max(self.cfg.min_target_queue));
                }
            }
        }
        if self.losses_in_row >= self.cfg.losses_to_min {
            self.cwnd = self.cfg.min_window as f64;
            self.last_decrease = Some(now);
            self.counters.loss_cuts += 1;
        } else if self.may_decrease(now) {
            let f = if self.mode == Mode::Competitive {
                self.cfg.competitive_loss_factor
            } else {
                self.cfg.loss_factor
            };
            self.cwnd *= f;
            self.last_decrease = Some(now);
            self.counters.loss_cuts += 1;
        }
        self.clamp();
    }

    /// `bytes` in flight will be neither acknowledged nor sent again (a QP
    /// left the path): they no longer count, and nothing is learnt.
    pub fn on_release(&mut self, bytes: u64) {
        self.in_flight = self.in_flight.saturating_sub(bytes);
    }

    /// A CNP arrived for a QP on this path: DCQCN's cut, at most once per
    /// `max(srtt, 50 µs)`.
    pub fn on_cnp(&mut self, now: Instant) {
        self.tick(now);
        self.counters.cnps += 1;
        self.congested_at = Some(now);
        if self.mode == Mode::SlowStart {
            self.set_mode(Mode::Delay);
        }
        if let Some(w) = self.dcqcn.on_cnp(now, self.cnp_gap(), self.cwnd) {
            self.cwnd = w;
            self.last_decrease = Some(now);
            self.counters.cnp_cuts += 1;
        }
        self.clamp();
    }

    /// When the last CNP cut happened.
    pub fn last_cnp_cut(&self) -> Option<Instant> {
        self.dcqcn.last_cut()
    }

    fn tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    fn sample(&mut self, now: Instant, rtt: Duration) {
        self.counters.rtt_samples += 1;
        self.base.update(now, rtt, self.mode == Mode::Competitive);
        self.srtt = Some(match self.srtt {
            Some(s) => (s * 7 + rtt) / 8,
            None => rtt,
        });
        self.last_rtt = Some(rtt);
        let length = self.srtt.unwrap_or(rtt);
        let Some(w) = self.observer.on_sample(now, rtt, length) else {
            return;
        };
        let (Some(base), Some(target)) = (self.base.get(), self.target()) else {
            return;
        };
        let hold = self.cfg.mode_hold_rtts;
        match self.mode {
            Mode::SlowStart => {}
            Mode::Delay => {
                let threshold = target + self.q_eff / 2;
                // A competitor that let its queue drain a moment ago is
                // most likely still there: back quickly, at the window
                // competing had reached (less a loss's cut), rather than
                // after the delay cuts of a full hold took it away.
                let recent = self.competed.filter(|&(t, _)| {
                    now.saturating_duration_since(t) < self.cfg.competitor_memory
                });
                let (after, hold) = match recent {
                    Some(_) => (
                        self.cfg.competitive_return_after,
                        self.cfg.competitive_return_after,
                    ),
                    None => (self.cfg.competitive_after, hold),
                };
                if self.detector.delay_mode(w, threshold, after, hold) {
                    self.set_mode(Mode::Competitive);
                    self.counters.competitive_entries += 1;
                    if let Some((_, window)) = recent {
                        self.cwnd = self.cwnd.max(window * self.cfg.competitive_loss_factor);
                        self.clamp();
                    }
                }
            }
            Mode::Competitive => {
                let empty = base + self.cfg.target_queue / 2;
                if self.detector.competitive_mode(w, empty, hold) {
                    self.set_mode(Mode::Delay);
                    self.competed = Some((now, self.cwnd));
                }
            }
        }
    }

    /// The adaptive target relaxes back to `target_queue` over `target_relax`.
    fn relax(&mut self, now: Instant) {
        let last = self.last_relax.replace(now).unwrap_or(now);
        if self.q_eff >= self.cfg.target_queue || self.cfg.target_relax.is_zero() {
            return;
        }
        let dt = now.saturating_duration_since(last).as_secs_f64();
        let frac = (dt / self.cfg.target_relax.as_secs_f64()).min(1.0);
        let gap = (self.cfg.target_queue - self.q_eff).as_secs_f64();
        self.q_eff += Duration::from_secs_f64(gap * frac);
    }

    fn flow_scaling(&self) -> Duration {
        let c = &self.cfg;
        let pkts = self.cwnd / f64::from(c.mss.max(1));
        flow_scaling(c.fs_range, c.fs_min_pkts, c.fs_max_pkts, pkts)
    }

    fn increase(&mut self, bytes: u64) {
        self.cwnd += additive_increase(self.cfg.ai_pkts, self.cfg.mss, bytes, self.cwnd);
    }

    /// Swift's decrease on delay, at most once per srtt.
    fn delay_cut(&mut self, now: Instant) {
        let (Some(d), Some(t)) = (self.last_rtt, self.target()) else {
            return;
        };
        if !self.may_decrease(now) {
            return;
        }
        let f = delay_decrease(d, t, self.cfg.beta, self.cfg.max_mdf);
        if f < 1.0 {
            self.cwnd *= f;
            self.last_decrease = Some(now);
            self.congested_at = Some(now);
            self.counters.delay_cuts += 1;
        }
    }

    fn may_decrease(&self, now: Instant) -> bool {
        let gap = self.srtt.unwrap_or_default();
        self.last_decrease
            .is_none_or(|t| now.saturating_duration_since(t) >= gap)
    }

    fn cnp_gap(&self) -> Duration {
        self.srtt.unwrap_or_default().max(self.cfg.cnp_min_interval)
    }

    fn set_mode(&mut self, m: Mode) {
        if self.mode != m {
            self.mode = m;
            self.counters.mode_switches += 1;
            self.detector.switched();
        }
    }

    fn clamp(&mut self) {
        let (lo, hi) = (self.cfg.min_window as f64, self.cfg.max_window as f64);
        self.cwnd = self.cwnd.clamp(lo, hi.max(lo));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn at(n: u64) -> Instant {
        Instant::from_nanos(n * 1000)
    }

    /// A controller that left slow start at a 20-µs base with a 64 KiB window.
    fn settled() -> PathController {
        let mut cc = PathController::new(CcConfig::default());
        cc.on_ack(at(20), 0, Some(us(20)));
        // Far above the target: slow start ends with a cut.
        cc.on_ack(at(2000), 0, Some(us(1000)));
        assert_eq!(cc.mode(), Mode::Delay);
        cc
    }

    #[test]
    fn slow_start_ends_at_the_target_with_a_proportional_cut() {
        let cc = settled();
        // T = 20 + 250 + fs(64 pkts) = 270 µs; d = 1000 µs:
        // 1 − 0.8·730/1000 = 0.416 → the 0.5 bound.
        assert_eq!(cc.window(), 32 * 1024);
        assert_eq!(cc.counters().delay_cuts, 1);
        assert_eq!(cc.counters().mode_switches, 1);
    }

    #[test]
    fn delay_cuts_at_most_once_per_srtt_and_grows_one_packet_per_window() {
        let mut cc = settled();
        let w = cc.window();
        // srtt is now ≈ 144 µs: more samples above target within it do not cut.
        let srtt = cc.srtt().unwrap();
        cc.on_ack(at(2000) + srtt / 2, 0, Some(us(1000)));
        assert_eq!(cc.window(), w);
        cc.on_ack(at(2000) + srtt * 3, 0, Some(us(1000)));
        assert!(cc.window() < w);
        // Below the target: a whole window acknowledged adds one packet.
        let w = cc.window();
        cc.on_ack(at(10_000), w, Some(us(30)));
        let grown = cc.window() - w;
        assert!((1023..=1024).contains(&grown), "{grown}");
    }

    #[test]
    fn loss_halves_once_per_srtt_and_three_in_a_row_reach_the_minimum() {
        let mut cc = settled();
        let t = at(10_000);
        let w = cc.window();
        cc.on_send(t, 10_000);
        cc.on_loss(t, 10_000);
        assert_eq!(cc.window(), w / 2);
        assert_eq!(cc.in_flight(), 0);
        cc.on_loss(t, 0);
        assert_eq!(cc.window(), w / 2, "gated by srtt");
        cc.on_loss(t + us(1), 0);
        assert_eq!(cc.window(), 1024, "three in a row");
        // Progress resets the count.
        cc.on_ack(at(20_000), 1024, None);
        cc.on_loss(at(30_000), 0);
        assert!(cc.window() >= 512);
        assert_eq!(cc.counters().losses, 4);
    }

    #[test]
    fn a_loss_below_the_target_lowers_it_for_shallow_buffers() {
        let mut cc = settled();
        let before = cc.target().unwrap();
        // A sample 120 µs above the base, then a loss: the queue target
        // becomes 60 µs.
        cc.on_ack(at(10_000), 0, Some(us(140)));
        cc.on_loss(at(10_000), 0);
        let after = cc.target().unwrap();
        assert!(after < before);
        assert_eq!(after - cc.base_rtt().unwrap() - cc.flow_scaling(), us(60));
    }

    #[test]
    fn a_standing_queue_makes_it_compete_and_an_empty_one_ends_that() {
        let mut cc = settled();
        let mut t = 10_000;
        // The queue holds 3 ms for many round trips: competitive.
        while cc.mode() != Mode::Competitive {
            t += 500;
            cc.on_ack(at(t), 1024, Some(us(3000)));
            assert!(t < 100_000, "never competed");
        }
        assert_eq!(cc.counters().competitive_entries, 1);
        // Competing, delay does not cut; a loss cuts by 0.7.
        let w = cc.window();
        t += 5000;
        cc.on_ack(at(t), 0, Some(us(3000)));
        assert!(cc.window() >= w);
        let w = cc.window();
        cc.on_loss(at(t), 0);
        assert_eq!(cc.window(), (w as f64 * 0.7) as u64);
        // The queue empties: back to delay mode after the hold.
        let mut n = 0;
        while cc.mode() != Mode::Delay {
            t += 500;
            n += 1;
            cc.on_ack(at(t), 1024, Some(us(25)));
            assert!(n < 1000, "never left");
        }
        assert_eq!(cc.base_rtt(), Some(us(20)), "held while competing");
    }

    /// Acknowledges a packet every 500 µs with round trips of `rtt_us`
    /// until the controller is in `mode`; the samples that took (at most
    /// `limit`).
    fn samples_until(
        cc: &mut PathController,
        t: &mut u64,
        rtt_us: u64,
        mode: Mode,
        limit: usize,
    ) -> usize {
        let mut n = 0;
        while cc.mode() != mode {
            *t += 500;
            n += 1;
            cc.on_ack(at(*t), 1024, Some(us(rtt_us)));
            assert!(n < limit, "not {mode:?} after {n} samples");
        }
        n
    }

    #[test]
    fn a_competitor_whose_queue_drained_a_moment_is_met_again_at_once() {
        let mut cc = settled();
        let mut t = 10_000;
        samples_until(&mut cc, &mut t, 3000, Mode::Competitive, 1000);
        // Competing for a while: Reno's growth.
        for _ in 0..400 {
            t += 500;
            cc.on_ack(at(t), 1024, Some(us(3000)));
        }
        let competing = cc.window();
        // CUBIC's queue drains after its loss: delay mode; it stands again:
        // the delay cuts start, and two undrained round trips later it
        // competes again at 0.7 of its window.
        samples_until(&mut cc, &mut t, 25, Mode::Delay, 1000);
        samples_until(&mut cc, &mut t, 3000, Mode::Competitive, 40);
        assert_eq!(cc.counters().competitive_entries, 2);
        assert!(
            cc.window() as f64 >= 0.69 * competing as f64,
            "{} of {competing}",
            cc.window()
        );
        // Much later the competitor is forgotten: the full count again.
        t += 3_000_000;
        samples_until(&mut cc, &mut t, 25, Mode::Delay, 1000);
        t += 3_000_000;
        cc.on_ack(at(t), 1024, Some(us(25)));
        let n = samples_until(&mut cc, &mut t, 3000, Mode::Competitive, 1000);
        assert!(n > 16, "back after {n} samples");
    }

    #[test]
    fn pacing_only_while_congested() {
        let mut cc = PathController::new(CcConfig::default());
        assert_eq!(cc.pacing_rate(), None);
        cc.on_ack(at(20), 0, Some(us(20)));
        assert_eq!(cc.pacing_rate(), None);
        cc.on_ack(at(2000), 0, Some(us(1000)));
        // Cut at 2 ms: paced at 1.2·cwnd/srtt.
        let rate = cc.pacing_rate().unwrap() as f64;
        let want = 1.2 * cc.window() as f64 / cc.srtt().unwrap().as_secs_f64();
        assert!((rate - want).abs() / want < 1e-6);
        // 100 ms later without a signal: unpaced again.
        cc.on_ack(at(103_000), 0, Some(us(25)));
        assert_eq!(cc.pacing_rate(), None);
    }

    #[test]
    fn cnps_cut_at_most_once_per_srtt() {
        let mut cc = settled();
        let w = cc.window();
        cc.on_cnp(at(10_000));
        assert_eq!(cc.window(), w / 2, "α starts at 1");
        for i in 1..10 {
            cc.on_cnp(at(10_000 + i * 10));
        }
        assert_eq!(cc.counters().cnp_cuts, 1);
        assert_eq!(cc.counters().cnps, 10);
        cc.on_cnp(at(10_000) + cc.srtt().unwrap());
        assert_eq!(cc.counters().cnp_cuts, 2);
    }
}
