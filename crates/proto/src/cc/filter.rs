//! The base-RTT filter: a windowed minimum of round-trip samples.
//!
//! A delay-based controller measures queueing as `rtt − base_rtt`, so the
//! base must be the path's *empty-queue* round trip — and must forget it when
//! the path changes (a route gets longer). BBR keeps `min_rtt` over 10 s
//! (`tcp_bbr.c`); the design notes (congestion.md §5.1) take the same window
//! with a two-bucket filter: the minimum of the current bucket and of the one
//! before it, each half a window long. The result therefore remembers a sample
//! for at least half a window and at most a whole one, with O(1) state.
//!
//! A controller competing with a buffer-filling flow never sees an empty
//! queue; if the filter expired then, the base would climb to the competitor's
//! queue and every delay rule would be measured against the wrong zero. So the
//! caller may *hold* the filter (no expiry) while it knows the queue is not
//! its own (competitive mode).

use crate::time::{Duration, Instant};

/// A windowed minimum over two half-window buckets.
#[derive(Debug, Clone)]
pub struct MinFilter {
    window: Duration,
    /// Start of the current bucket and its minimum.
    current: Option<(Instant, Duration)>,
    /// The previous bucket's minimum.
    previous: Option<Duration>,
}

impl MinFilter {
    /// A filter remembering samples for `window` (at least half of it).
    pub fn new(window: Duration) -> Self {
        MinFilter {
            window,
            current: None,
            previous: None,
        }
    }

    /// Adds a sample taken at `now`. With `hold`, buckets do not roll over
    /// (nothing expires).
    pub fn update(&mut self, now: Instant, sample: Duration, hold: bool) {
        match &mut self.current {
            Some((start, min)) => {
                let age = now.saturating_duration_since(*start);
                if !hold && age >= self.window / 2 {
                    // A bucket older than a whole window says nothing any more.
                    self.previous = (age < self.window).then_some(*min);
                    self.current = Some((now, sample));
                } else if sample < *min {
                    *min = sample;
                }
            }
            None => self.current = Some((now, sample)),
        }
    }

    /// The minimum over the window, once anything was sampled.
    pub fn get(&self) -> Option<Duration> {
        match (self.current, self.previous) {
            (Some((_, c)), Some(p)) => Some(c.min(p)),
            (Some((_, c)), None) => Some(c),
            (None, p) => p,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn keeps_the_minimum_and_forgets_it_after_a_window() {
        let us = Duration::from_micros;
        let mut f = MinFilter::new(Duration::from_millis(10));
        assert_eq!(f.get(), None);
        f.update(at(0), us(20), false);
        f.update(at(1), us(50), false);
        assert_eq!(f.get(), Some(us(20)));
        // A new bucket at 5 ms: the old minimum is still remembered.
        f.update(at(5), us(60), false);
        assert_eq!(f.get(), Some(us(20)));
        // At 10 ms the first bucket is a window old: forgotten.
        f.update(at(10), us(70), false);
        assert_eq!(f.get(), Some(us(60)));
        // A gap longer than the window forgets everything before it.
        f.update(at(40), us(80), false);
        assert_eq!(f.get(), Some(us(80)));
    }

    #[test]
    fn holding_never_expires() {
        let us = Duration::from_micros;
        let mut f = MinFilter::new(Duration::from_millis(10));
        f.update(at(0), us(20), true);
        f.update(at(100), us(900), true);
        assert_eq!(f.get(), Some(us(20)));
        // Released: the next sample after half a window rolls the bucket.
        f.update(at(101), us(900), false);
        f.update(at(200), us(900), false);
        assert_eq!(f.get(), Some(us(900)));
    }
}
