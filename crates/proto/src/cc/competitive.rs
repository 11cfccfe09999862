//! Detecting a buffer-filling competitor (Copa's competitive mode, Arun and
//! Balakrishnan, NSDI 2018).
//!
//! A delay-based flow sharing a FIFO with CUBIC loses: CUBIC fills the buffer
//! until it drops, the delay stays far above any sensible target, and the
//! delay-based flow keeps shrinking — behind a 629 KB buffer a 128 KiB window
//! gets 0.44 of a fair share (congestion.md §5.1). Copa's observation: a queue
//! built only by delay-based flows *drains* regularly — each of them backs
//! off when it exceeds the target — while a loss-based competitor keeps it
//! standing.
//!
//! So time is cut into observation windows of one smoothed RTT, each
//! remembering the smallest RTT sample seen. A window is *undrained* when
//! even that minimum stayed above the drain threshold the controller sets
//! (its target plus half the queue target), or when a packet was lost in it
//! (in a shallow buffer a loss-based competitor shows as periodic loss, the
//! delay staying within the buffer's few hundred µs). After
//! `competitive_after` undrained windows in a row the controller competes:
//! no delay-triggered decrease, Reno's +1 packet per RTT and ×0.7 on loss
//! (CUBIC's β). A window whose minimum fell to `base + q_t/2` — the queue
//! really emptied — ends it. Either switch needs `mode_hold_rtts` windows in
//! the current mode first (hysteresis), so a slow-start overshoot or one odd
//! window does not flip it.

use crate::time::{Duration, Instant};

/// The verdict on one finished observation window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The smallest RTT sample in it.
    pub min: Duration,
    /// A loss happened in it.
    pub lossy: bool,
}

/// Observation windows of one RTT each.
#[derive(Debug, Clone, Default)]
pub struct Observer {
    start: Option<Instant>,
    min: Option<Duration>,
    lossy: bool,
}

impl Observer {
    /// A sample at `now`; returns the previous window once `length` has
    /// passed since it started (a new one starts with this sample).
    pub fn on_sample(&mut self, now: Instant, rtt: Duration, length: Duration) -> Option<Window> {
        let Some(start) = self.start else {
            self.start = Some(now);
            self.min = Some(rtt);
            return None;
        };
        if now.saturating_duration_since(start) >= length {
            let done = self.min.map(|min| Window {
                min,
                lossy: self.lossy,
            });
            self.start = Some(now);
            self.min = Some(rtt);
            self.lossy = false;
            return done;
        }
        self.min = Some(self.min.map_or(rtt, |m| m.min(rtt)));
        None
    }

    /// A loss in the current window.
    pub fn on_loss(&mut self) {
        self.lossy = true;
    }
}

/// Consecutive undrained windows, with the rule to switch.
#[derive(Debug, Clone, Default)]
pub struct Detector {
    /// Undrained windows in a row.
    pub undrained: u32,
    /// Windows since the mode last changed.
    pub in_mode: u32,
}

impl Detector {
    /// Judges a window while delay-based: true when it is time to compete.
    pub fn delay_mode(&mut self, w: Window, threshold: Duration, after: u32, hold: u32) -> bool {
        self.in_mode = self.in_mode.saturating_add(1);
        if w.lossy || w.min > threshold {
            self.undrained += 1;
        } else {
            self.undrained = 0;
        }
        self.undrained >= after && self.in_mode >= hold
    }

    /// Judges a window while competing: true when the queue drained (to
    /// `empty`) and it is time to return to delay mode.
    pub fn competitive_mode(&mut self, w: Window, empty: Duration, hold: u32) -> bool {
        self.in_mode = self.in_mode.saturating_add(1);
        w.min <= empty && self.in_mode >= hold
    }

    /// The mode changed.
    pub fn switched(&mut self) {
        self.undrained = 0;
        self.in_mode = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_consecutive_undrained_windows_and_hold() {
        let us = Duration::from_micros;
        let mut d = Detector::default();
        let high = Window {
            min: us(900),
            lossy: false,
        };
        let low = Window {
            min: us(100),
            lossy: false,
        };
        for _ in 0..7 {
            assert!(!d.delay_mode(high, us(500), 8, 10));
        }
        // One drained window resets the count.
        assert!(!d.delay_mode(low, us(500), 8, 10));
        for _ in 0..7 {
            assert!(!d.delay_mode(high, us(500), 8, 10));
        }
        assert!(d.delay_mode(high, us(500), 8, 10));
        d.switched();
        // Back only after the hold, on a drained window.
        for _ in 0..9 {
            assert!(!d.competitive_mode(low, us(200), 10));
        }
        assert!(!d.competitive_mode(high, us(200), 10));
        assert!(d.competitive_mode(low, us(200), 10));
    }

    #[test]
    fn windows_are_one_length_long() {
        let us = Duration::from_micros;
        let t = |n: u64| Instant::from_nanos(n * 1000);
        let mut o = Observer::default();
        assert_eq!(o.on_sample(t(0), us(50), us(100)), None);
        assert_eq!(o.on_sample(t(50), us(30), us(100)), None);
        o.on_loss();
        assert_eq!(
            o.on_sample(t(100), us(70), us(100)),
            Some(Window {
                min: us(30),
                lossy: true
            })
        );
        assert_eq!(
            o.on_sample(t(200), us(70), us(100)),
            Some(Window {
                min: us(70),
                lossy: false
            })
        );
    }
}
