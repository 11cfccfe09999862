//! Spinning before sleeping: how long a waiting thread polls the link before
//! it sleeps in `poll`.
//!
//! A thread that sleeps until the peer's answer pays a wake-up when it comes:
//! on a virtual machine whose other vCPU is idle that is 40–50 µs (the idle
//! vCPU halts and the hypervisor must schedule it again), several times a
//! round trip on loopback. A connection through the CM is seven such hops
//! (REQ, REP, RTU, SEND, ACK, DREQ, DREP): sleeping at once, `ndv bench` P3
//! made 2,200–2,800 cycles/s on a quiet 2-vCPU machine where TCP's kernel
//! handshake made 6,000–8,000; spinning before each sleep, 12,000–15,000.
//!
//! But a spin that does not catch the answer is a core burnt for nothing,
//! and on a machine with more runnable threads than cores it is worse: the
//! kernel wakes the peer on the spinning thread's own core (there is no idle
//! one), where it waits until the spin ends. Measured with three busy loops
//! beside the two processes: spins caught almost nothing, and the sleep
//! after each ended within microseconds. So the window adapts, as KVM's
//! halt-polling does for a vCPU that halts, and backs off when it does not
//! pay ([`SpinState::next`]):
//! - a sleep that ended soon (within [`SHORT_SLEEP`]: the answer came within
//!   a spin's reach) doubles the window, from [`START`] up to [`MAX`];
//! - a sleep that lasted longer, or ended by its timeout, halves it (below
//!   `START`: no spin), so a thread that waits for rare events spins a few
//!   times and then never;
//! - a spin that caught its event keeps the window;
//! - [`MISSES`] spins in a row that missed at the full window, or during
//!   which the thread lost its core (`ru_nivcsw` grew), stop spinning for a
//!   number of waits that doubles each time (up to [`MAX_BACKOFF`]) until a
//!   spin catches again: the machine has no idle core for it. (One lost
//!   core alone is no verdict: with engine threads a spinner is preempted
//!   now and then by its own engine thread's wake-ups, about once per
//!   hundred catches in `ndv bench` P3t.)
//!
//! The policy is a pure function of the state and the outcome, tested below;
//! [`SpinWindow`] holds one NIC's state for all its waiters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The first window after sleeps began to end soon.
pub(crate) const START: Duration = Duration::from_micros(5);
/// The longest spin.
pub(crate) const MAX: Duration = Duration::from_micros(50);
/// A sleep that ends within this was worth spinning for: the event came
/// within a spin's reach, plus the wake-up it cost.
pub(crate) const SHORT_SLEEP: Duration = Duration::from_micros(250);
/// Missed spins at the full window, in a row, that stop spinning.
pub(crate) const MISSES: u8 = 3;
/// The most waits spent without spinning after spins stopped paying.
pub(crate) const MAX_BACKOFF: u16 = 1024;

/// How one wait went, as the window's policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitOutcome {
    /// The event came while the thread spun.
    Caught,
    /// The thread was preempted while it spun.
    Preempted,
    /// The thread slept this long (after a spin that missed, if `spun`) and
    /// was woken by an event (`timed_out` false) or by its timeout.
    Slept {
        spun: bool,
        slept: Duration,
        timed_out: bool,
    },
}

/// The window and its back-off, in whole microseconds and wait counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SpinState {
    /// How long to spin, in microseconds.
    window_us: u16,
    /// Spins in a row that missed at the full window.
    misses: u8,
    /// Waits left without spinning.
    skip: u16,
    /// The next back-off's length in waits (0: the first, 1).
    backoff: u16,
}

impl SpinState {
    /// How long to spin now.
    pub(crate) fn window(self) -> Duration {
        if self.skip > 0 {
            return Duration::ZERO;
        }
        Duration::from_micros(self.window_us.into())
    }

    /// The state after a wait that began in `self` ended with `outcome`.
    pub(crate) fn next(self, outcome: WaitOutcome) -> SpinState {
        let max = MAX.as_micros() as u16;
        let start = START.as_micros() as u16;
        let mut s = self;
        match outcome {
            WaitOutcome::Caught => {
                s.misses = 0;
                s.backoff = 0;
            }
            WaitOutcome::Preempted => s.missed(),
            WaitOutcome::Slept { .. } if s.skip > 0 => s.skip -= 1,
            WaitOutcome::Slept {
                spun,
                slept,
                timed_out,
            } => {
                if timed_out || slept > SHORT_SLEEP {
                    s.window_us /= 2;
                    if s.window_us < start {
                        s.window_us = 0;
                    }
                } else if spun && s.window_us >= max {
                    s.missed();
                } else {
                    s.window_us = (s.window_us * 2).clamp(start, max);
                }
            }
        }
        s
    }

    /// A spin that did not pay: the full window missed, or the thread lost
    /// its core while it spun.
    fn missed(&mut self) {
        self.misses += 1;
        if self.misses >= MISSES {
            self.back_off();
        }
    }

    /// Spinning does not pay: none for the next back-off's waits.
    fn back_off(&mut self) {
        self.window_us = 0;
        self.misses = 0;
        self.skip = self.backoff.max(1);
        self.backoff = (self.skip * 2).min(MAX_BACKOFF);
    }

    fn pack(self) -> u64 {
        u64::from(self.window_us)
            | u64::from(self.misses) << 16
            | u64::from(self.skip) << 24
            | u64::from(self.backoff) << 40
    }

    fn unpack(v: u64) -> SpinState {
        SpinState {
            window_us: v as u16,
            misses: (v >> 16) as u8,
            skip: (v >> 24) as u16,
            backoff: (v >> 40) as u16,
        }
    }
}

/// One NIC's [`SpinState`], shared by its waiting threads (they race
/// benignly: the window is a hint).
#[derive(Debug)]
pub(crate) struct SpinWindow {
    state: AtomicU64,
    /// Never spin (`NicConfig::spin_before_sleep` off).
    off: bool,
}

impl SpinWindow {
    pub(crate) fn new(on: bool) -> Self {
        SpinWindow {
            state: AtomicU64::new(0),
            off: !on,
        }
    }

    /// How long to spin now.
    pub(crate) fn get(&self) -> Duration {
        if self.off {
            return Duration::ZERO;
        }
        SpinState::unpack(self.state.load(Ordering::Relaxed)).window()
    }

    /// Records how a wait went.
    pub(crate) fn record(&self, outcome: WaitOutcome) {
        if self.off {
            return;
        }
        let now = self.state.load(Ordering::Relaxed);
        let next = SpinState::unpack(now).next(outcome).pack();
        if next != now {
            self.state.store(next, Ordering::Relaxed);
        }
    }
}

/// Involuntary context switches of the calling thread so far (the kernel
/// took its core for another thread).
pub(crate) fn preemptions() -> u64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD exists on Linux since 2.6.26.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return 0;
    }
    ru.ru_nivcsw as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    fn slept(spun: bool, us: u64) -> WaitOutcome {
        WaitOutcome::Slept {
            spun,
            slept: Duration::from_micros(us),
            timed_out: false,
        }
    }

    /// The windows after each outcome in turn, from `s`.
    fn run(mut s: SpinState, outcomes: &[WaitOutcome]) -> (SpinState, Vec<u128>) {
        let mut seen = Vec::new();
        for &o in outcomes {
            s = s.next(o);
            seen.push(s.window().as_micros());
        }
        (s, seen)
    }

    #[test]
    fn short_sleeps_grow_the_window_to_its_cap_and_catches_keep_it() {
        let first = slept(false, 60);
        let (s, seen) = run(
            SpinState::default(),
            &[first, slept(true, 60), slept(true, 60)],
        );
        assert_eq!(seen, [5, 10, 20]);
        let (s, seen) = run(s, &[slept(true, 60), slept(true, 60), WaitOutcome::Caught]);
        assert_eq!(seen, [40, 50, 50]);
        // Caught ever after: the window stays.
        let (_, seen) = run(s, &[WaitOutcome::Caught; 4]);
        assert_eq!(seen, [50; 4]);
    }

    #[test]
    fn long_or_timed_out_sleeps_shrink_it_to_nothing() {
        let at_max = SpinState {
            window_us: 50,
            ..SpinState::default()
        };
        let (s, seen) = run(at_max, &[slept(true, 5_000); 4]);
        assert_eq!(seen, [25, 12, 6, 0]);
        // Nothing to halve stays nothing, and no back-off is involved.
        assert_eq!(s.next(slept(false, 5_000)), SpinState::default());
        // A sleep that ended soon only because its timeout was short says
        // nothing good of spinning.
        let timed_out = WaitOutcome::Slept {
            spun: true,
            slept: 10 * US,
            timed_out: true,
        };
        assert_eq!(at_max.next(timed_out).window(), 25 * US);
        // Exactly the threshold still counts as short.
        let short = slept(false, SHORT_SLEEP.as_micros() as u64);
        assert_eq!(SpinState::default().next(short).window(), START);
    }

    #[test]
    fn spins_that_keep_missing_at_the_cap_back_off_longer_each_time() {
        let at_max = SpinState {
            window_us: 50,
            ..SpinState::default()
        };
        // Two misses at the cap, then a catch: nothing lost.
        let (s, seen) = run(
            at_max,
            &[slept(true, 3), slept(true, 3), WaitOutcome::Caught],
        );
        assert_eq!(seen, [50, 50, 50]);
        // Three in a row (the contended machine: the answer comes as soon
        // as the spin gives up its core): no spin for one wait.
        let (s, seen) = run(s, &[slept(true, 3); 3]);
        assert_eq!(seen, [50, 50, 0]);
        // It climbs back (the wait it skipped, then the growth) and misses
        // again: two waits without spinning this time, then four.
        let climb_and_miss = [
            slept(false, 3), // the skipped wait
            slept(false, 3),
            slept(true, 3),
            slept(true, 3),
            slept(true, 3),
            slept(true, 3),
            slept(true, 3),
            slept(true, 3),
            slept(true, 3),
        ];
        let (s, seen) = run(s, &climb_and_miss);
        assert_eq!(seen, [0, 5, 10, 20, 40, 50, 50, 50, 0]);
        assert_eq!((s.skip, s.backoff), (2, 4));
        // A spin during which the thread lost its core counts as a miss at
        // any window: the third in a row backs off, longer again.
        let s = s
            .next(slept(false, 3))
            .next(slept(false, 3))
            .next(slept(false, 3));
        assert_eq!(s.window(), START);
        let (s, seen) = run(s, &[WaitOutcome::Preempted; 3]);
        assert_eq!(seen, [5, 5, 0]);
        assert_eq!((s.skip, s.backoff), (4, 8));
        // A catch forgets the back-off's growth.
        let s = SpinState { window_us: 20, ..s };
        let s = SpinState { skip: 0, ..s }.next(WaitOutcome::Caught);
        assert_eq!((s.window(), s.backoff), (20 * US, 0));
    }

    #[test]
    fn the_back_off_is_capped_and_the_state_packs_losslessly() {
        let mut s = SpinState::default();
        for _ in 0..20 {
            let last_straw = SpinState {
                skip: 0,
                misses: MISSES - 1,
                ..s
            };
            s = last_straw.next(WaitOutcome::Preempted);
        }
        assert_eq!((s.skip, s.backoff), (MAX_BACKOFF, MAX_BACKOFF));
        let odd = SpinState {
            window_us: 50,
            misses: 2,
            skip: 1000,
            backoff: 513,
        };
        assert_eq!(SpinState::unpack(odd.pack()), odd);
    }

    #[test]
    fn off_never_spins() {
        let off = SpinWindow::new(false);
        for _ in 0..4 {
            off.record(slept(false, 1));
        }
        assert_eq!(off.get(), Duration::ZERO);
        let on = SpinWindow::new(true);
        on.record(slept(false, 1));
        assert_eq!(on.get(), START);
    }
}
