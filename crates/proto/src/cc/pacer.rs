//! [`Pacer`]: a token bucket that releases a path's bytes in quanta.
//!
//! A path at the controller's pacing rate must not leave in 64-packet GSO
//! runs: behind a 1 Gb/s bottleneck such a run is 0.55 ms of queue it makes
//! for itself, more than a shallow buffer holds (SHALLOW's 32 KB drops most
//! of it) and more than the delay target (its last packet's round trip
//! reads as congestion). Sending single packets at the rate would cost a
//! system call and a wake-up each. The middle way (congestion.md §5.4, BBR's
//! burst sizing scaled to our target): tokens accrue at the rate, and a
//! drain may send what the bucket holds, which is at most two *quanta* of
//! `rate × 100 µs` (between two packets and one 64 KiB GSO run) — one
//! quantum, plus one of lateness carried over when the engine woke late.
//!
//! Sans IO like the controller: `now` comes in, the time of the next release
//! goes out (the engine arms a wake-up for it).

use crate::time::{Duration, Instant};

/// Time a quantum lasts at the pacing rate.
pub const QUANTUM_TIME: Duration = Duration::from_micros(100);
/// Largest quantum: one GSO run's worth (64 segments of at most 1 KiB
/// payload at an Ethernet path MTU, 64 KiB in all).
pub const MAX_QUANTUM: u64 = 64 * 1024;

/// A token bucket for one path's payload bytes.
///
/// ```
/// use ndverbs_proto::cc::Pacer;
/// use ndverbs_proto::time::{Duration, Instant};
///
/// let mut p = Pacer::default();
/// let t0 = Instant::from_nanos(0);
/// let rate = 125_000_000; // 1 Gb/s in bytes per second
/// p.refill(t0, rate, 1024);
/// // Starting full: two quanta of 100 µs at 1 Gb/s.
/// assert_eq!(p.tokens(), 25_000);
/// p.consume(25_000);
/// assert_eq!(p.tokens(), 0);
/// // A packet's worth of tokens comes back after 1024 B / 125 MB/s.
/// assert_eq!(p.next_release(rate, 1024), Some(t0 + Duration::from_nanos(8_192)));
/// p.refill(t0 + Duration::from_micros(50), rate, 1024);
/// assert_eq!(p.tokens(), 6_250);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Pacer {
    tokens: u64,
    last: Option<Instant>,
}

/// The quantum at `rate` bytes per second: `rate × 100 µs`, at least two
/// packets of `mss` and at most [`MAX_QUANTUM`].
pub fn quantum(rate: u64, mss: u64) -> u64 {
    let q = (rate as u128 * QUANTUM_TIME.as_nanos() / 1_000_000_000) as u64;
    q.clamp(2 * mss.max(1), MAX_QUANTUM.max(2 * mss))
}

impl Pacer {
    /// Adds the tokens earned at `rate` since the last refill, up to two
    /// quanta (the first refill starts full).
    pub fn refill(&mut self, now: Instant, rate: u64, mss: u64) {
        let cap = 2 * quantum(rate, mss);
        let earned = match self.last {
            None => cap,
            Some(t) => {
                let dt = now.saturating_duration_since(t).as_nanos();
                (dt * rate as u128 / 1_000_000_000).min(u128::from(cap)) as u64
            }
        };
        // Time only advances by what the tokens paid for, so nanoseconds
        // below one token's worth are not lost between frequent refills.
        if let Some(t) = self.last {
            if rate > 0 && earned < cap {
                let spent_ns = earned as u128 * 1_000_000_000 / rate as u128;
                self.last = Some(t + Duration::from_nanos(spent_ns as u64));
            } else {
                self.last = Some(now);
            }
        } else {
            self.last = Some(now);
        }
        self.tokens = self.tokens.saturating_add(earned).min(cap);
    }

    /// Bytes the bucket holds.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// `bytes` were sent.
    pub fn consume(&mut self, bytes: u64) {
        self.tokens = self.tokens.saturating_sub(bytes);
    }

    /// Pacing is off (the path is uncongested): the next time it starts,
    /// the bucket starts full.
    pub fn reset(&mut self) {
        self.tokens = 0;
        self.last = None;
    }

    /// When the bucket will hold `want` bytes at `rate` (`None`: it holds
    /// them now, it was never filled — it starts full — or the rate is
    /// zero).
    pub fn next_release(&self, rate: u64, want: u64) -> Option<Instant> {
        if self.tokens >= want || rate == 0 {
            return None;
        }
        let need = (want - self.tokens) as u128;
        let ns = (need * 1_000_000_000).div_ceil(rate as u128);
        Some(self.last? + Duration::from_nanos(ns.min(u128::from(u64::MAX)) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantum_bounds() {
        // 1 Gb/s: 12.5 KB; 100 Gb/s: capped at one GSO run; 1 Mb/s: two packets.
        assert_eq!(quantum(125_000_000, 1024), 12_500);
        assert_eq!(quantum(12_500_000_000, 1024), MAX_QUANTUM);
        assert_eq!(quantum(125_000, 1024), 2048);
        // A zero rate or MSS never panics.
        assert_eq!(quantum(0, 0), 2);
    }

    #[test]
    fn tokens_follow_the_rate_without_drift() {
        let mut p = Pacer::default();
        let rate = 125_000_000;
        let t0 = Instant::from_nanos(0);
        p.refill(t0, rate, 1024);
        p.consume(p.tokens());
        // A refill every 3 ns earns nothing each time, but 10 µs of them
        // earn 10 µs of tokens: the remainder is carried, not dropped.
        let mut t = t0;
        for _ in 0..3334 {
            t += Duration::from_nanos(3);
            p.refill(t, rate, 1024);
        }
        assert!((1249..=1251).contains(&p.tokens()), "{}", p.tokens());
    }

    #[test]
    fn lateness_is_capped_at_two_quanta() {
        let mut p = Pacer::default();
        let rate = 125_000_000;
        let t0 = Instant::from_nanos(0);
        p.refill(t0, rate, 1024);
        p.consume(p.tokens());
        p.refill(t0 + Duration::from_secs(1), rate, 1024);
        assert_eq!(p.tokens(), 25_000);
        p.reset();
        assert_eq!(p.tokens(), 0);
        assert_eq!(p.next_release(0, 1), None);
        assert_eq!(Pacer::default().next_release(rate, 1), None);
    }
}
