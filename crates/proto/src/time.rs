//! Virtual time.
//!
//! The protocol core never reads a clock. Every call that depends on time takes
//! an [`Instant`] from the caller: the engine passes a monotonic clock reading,
//! tests pass a simulated one and jump it straight to the next deadline
//! ([`crate::rc::RcQp::poll_timeout`]). An `Instant` is just nanoseconds since
//! an arbitrary origin, so two runs with the same inputs are bit-for-bit
//! identical.

use std::ops::{Add, AddAssign};
pub use std::time::Duration;

/// A point in time: nanoseconds since an origin the caller chooses.
///
/// # Example
///
/// ```
/// use ndverbs_proto::time::{Duration, Instant};
/// // The caller owns the clock: the engine passes monotonic time, tests pass virtual time.
/// let start = Instant::from_nanos(1_000);
/// let deadline = start + Duration::from_micros(5);
/// assert_eq!(deadline.as_nanos(), 6_000);
/// assert_eq!(deadline.saturating_duration_since(start), Duration::from_micros(5));
/// assert_eq!(start.checked_duration_since(deadline), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(0);

    /// An instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Time elapsed from `earlier` to `self`, or `None` if `earlier` is later.
    pub fn checked_duration_since(self, earlier: Instant) -> Option<Duration> {
        self.0.checked_sub(earlier.0).map(Duration::from_nanos)
    }
}

/// Saturates at `u64::MAX` nanoseconds (about 584 years).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturating: a deadline beyond the end of time stays at the end of time.
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(nanos(d)))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic() {
        let t = Instant::from_nanos(1_000);
        assert_eq!(t + Duration::from_micros(1), Instant(2_000));
        assert_eq!(
            (t + Duration::from_nanos(5)).saturating_duration_since(t),
            Duration::from_nanos(5)
        );
        assert_eq!(
            t.saturating_duration_since(t + Duration::from_secs(1)),
            Duration::ZERO
        );
        assert_eq!(t.checked_duration_since(Instant(2_000)), None);
        assert_eq!(
            Instant(u64::MAX - 1) + Duration::from_secs(1),
            Instant(u64::MAX)
        );
        let mut u = t;
        u += Duration::from_nanos(1);
        assert_eq!(u, Instant(1_001));
    }
}
