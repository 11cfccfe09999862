//! The reaction to CNPs, after DCQCN's sender (Zhu et al., SIGCOMM 2015; the
//! Mellanox variant as in the HPCC ns-3 model, `rdma-hw.cc`).
//!
//! A CNP says "a switch marked one of your packets CE": the queue is building
//! somewhere on the path. DCQCN keeps an estimate `α` of how often that
//! happens and cuts in proportion to it:
//!
//! * every CNP: `α ← (1 − g)·α + g` (g = 1/16);
//! * at most once per *cut interval*: remember the window before the cut as
//!   the recovery target `W_T`, then `cwnd ← cwnd·(1 − α/2)`. DCQCN gates by
//!   `rate_reduce_monitor_period` (4 µs on NVIDIA NICs); we gate by
//!   `max(srtt, 50 µs)`, so one round trip's worth of marks — all caused by
//!   the same queue — costs one cut (criterion C7);
//! * every quiet interval (no CNP for one of them): `α ← (1 − g)·α`, and
//!   while fast-recovery steps remain (F = 5), `cwnd ← (cwnd + W_T)/2`:
//!   halfway back to where it was, five times, then the normal additive
//!   increase takes over (DCQCN's `R_AI`/`R_HAI` stages are the window's
//!   ordinary increase here).
//!
//! `α` starts at 1 (`initial_alpha_value` 1023/1024), so the first cut halves
//! the window, as DCQCN's first CNP halves the rate.
//!
//! The rest of DCQCN lives elsewhere: marking is a switch's (or nftables')
//! job, generating CNPs is the receiver's, and rxe does neither — never send
//! CNPs to rxe peers (congestion.md §3).

use crate::time::{Duration, Instant};

/// DCQCN sender state for one path.
#[derive(Debug, Clone)]
pub struct Dcqcn {
    g: f64,
    steps: u32,
    /// The congestion estimate α ∈ [0, 1].
    pub alpha: f64,
    last_cnp: Option<Instant>,
    last_cut: Option<Instant>,
    /// Start of the current quiet interval.
    quiet_since: Option<Instant>,
    target: f64,
    steps_left: u32,
}

impl Dcqcn {
    /// Gain `g`, `steps` fast-recovery steps.
    pub fn new(g: f64, steps: u32) -> Self {
        Dcqcn {
            g,
            steps,
            alpha: 1.0,
            last_cnp: None,
            last_cut: None,
            quiet_since: None,
            target: 0.0,
            steps_left: 0,
        }
    }

    /// A CNP at `now` with the window at `cwnd`: the new window if this CNP
    /// cuts (the last cut is at least `gap` old), else `None`.
    pub fn on_cnp(&mut self, now: Instant, gap: Duration, cwnd: f64) -> Option<f64> {
        self.alpha = (1.0 - self.g) * self.alpha + self.g;
        self.last_cnp = Some(now);
        self.quiet_since = Some(now);
        if self
            .last_cut
            .is_some_and(|t| now.saturating_duration_since(t) < gap)
        {
            return None;
        }
        self.last_cut = Some(now);
        self.target = cwnd;
        self.steps_left = self.steps;
        Some(cwnd * (1.0 - self.alpha / 2.0))
    }

    /// Time passes (called with every acknowledgement): for each whole quiet
    /// `interval` since the last CNP, decay α and take a recovery step. The
    /// new window if a step was taken.
    pub fn on_tick(&mut self, now: Instant, interval: Duration, cwnd: f64) -> Option<f64> {
        let since = self.quiet_since?;
        if interval.is_zero() || now.saturating_duration_since(since) < interval {
            return None;
        }
        self.quiet_since = Some(now);
        self.alpha *= 1.0 - self.g;
        if self.steps_left == 0 {
            return None;
        }
        self.steps_left -= 1;
        (self.target > cwnd).then(|| (cwnd + self.target) / 2.0)
    }

    /// When the last cut happened.
    pub fn last_cut(&self) -> Option<Instant> {
        self.last_cut
    }

    /// When the last CNP arrived.
    pub fn last_cnp(&self) -> Option<Instant> {
        self.last_cnp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_once_per_gap_and_recovers() {
        let us = |n: u64| Instant::from_nanos(n * 1000);
        let gap = Duration::from_micros(100);
        let mut d = Dcqcn::new(1.0 / 16.0, 5);
        // The first CNP halves (α ≈ 1).
        assert_eq!(d.on_cnp(us(0), gap, 1000.0), Some(500.0));
        // More CNPs within the gap raise α but do not cut.
        for t in 1..10 {
            assert_eq!(d.on_cnp(us(t * 10), gap, 500.0), None);
        }
        assert_eq!(d.on_cnp(us(100), gap, 500.0).map(|w| w < 500.0), Some(true));
        let target = 500.0;
        // Quiet: halfway back to the window before the last cut, five times.
        let mut w = d.on_cnp(us(200), gap, target).unwrap();
        let mut t = 200;
        for _ in 0..5 {
            t += 100;
            let next = d.on_tick(us(t), gap, w).unwrap();
            assert!((next - (w + target) / 2.0).abs() < 1e-9);
            w = next;
        }
        assert_eq!(d.on_tick(us(t + 100), gap, w), None);
        assert!(d.alpha < 0.9);
    }
}
