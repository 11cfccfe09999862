//! Kernel receive timestamps in the engine's clock.
//!
//! With congestion control on, the socket reports when the kernel received
//! each datagram (`SO_TIMESTAMPNS`, [`Datagram::rx_time`]), and a round-trip
//! sample ends there rather than when the engine got round to the packet
//! (`RcQp::handle_packet_at`): on a loaded host the engine's thread waits
//! for a CPU for milliseconds, which a delay-based controller would take
//! for a queue on the path.
//!
//! **The two clocks.** The kernel stamps software receive times with
//! `CLOCK_REALTIME` (`ktime_get_real`; `SO_TIMESTAMPNS` offers no other
//! clock), the engine runs on `CLOCK_MONOTONIC` since the NIC opened
//! (`worker.rs`). Both advance at the same rate — NTP's frequency
//! corrections slew both; only `CLOCK_MONOTONIC_RAW` escapes them — but
//! `CLOCK_REALTIME` can be *stepped* (`settimeofday`, an NTP step). So the
//! difference `offset = REALTIME − engine time` is read as a pair —
//! monotonic, realtime, monotonic, the tightest of three tries, realtime
//! against the midpoint of its two monotonic reads (error: half their gap,
//! tens of nanoseconds) — and read again every [`RECALIBRATE`]. Converted,
//! a time stamp is `rx_time − offset`, never later than the step's `now`
//! (a forward step, or a datagram received between the step's clock read
//! and its `recvmsg`); after a backward step it may lie before the packet's
//! send, which the completer then ignores (the sample ends at `now`), until
//! the next calibration.
//!
//! [`Datagram::rx_time`]: crate::link::Datagram::rx_time

use ndverbs_proto::time::{Duration, Instant};

/// How often the offset between the clocks is read again.
pub(super) const RECALIBRATE: Duration = Duration::from_secs(1);

/// The offset between the kernel's receive time stamps and the engine's
/// clock.
#[derive(Debug, Clone, Copy)]
pub(super) struct RxClock {
    /// `CLOCK_REALTIME − engine time`, in nanoseconds.
    offset: i64,
    /// The engine time of the last calibration.
    at: Instant,
}

impl RxClock {
    /// Calibrated now, for an engine whose time zero is `CLOCK_MONOTONIC` =
    /// `epoch_ns`.
    pub(super) fn new(epoch_ns: u64) -> RxClock {
        let (offset, at) = measure(epoch_ns);
        RxClock { offset, at }
    }

    /// With a given offset (tests).
    #[cfg(test)]
    fn with_offset(offset: i64) -> RxClock {
        RxClock {
            offset,
            at: Instant::ZERO,
        }
    }

    /// Reads the offset again if the last reading is [`RECALIBRATE`] old.
    #[inline]
    pub(super) fn refresh(&mut self, now: Instant, epoch_ns: u64) {
        if now.saturating_duration_since(self.at) >= RECALIBRATE {
            *self = RxClock::new(epoch_ns);
        }
    }

    /// The engine time of a kernel time stamp `rx_time` (`CLOCK_REALTIME`
    /// nanoseconds), at most `now`.
    #[inline]
    pub(super) fn to_engine(self, rx_time: u64, now: Instant) -> Instant {
        let t = (rx_time as i64).saturating_sub(self.offset);
        match u64::try_from(t) {
            Ok(t) if t < now.as_nanos() => Instant::from_nanos(t),
            // Before the NIC opened (a stepped clock): no better guess.
            _ => now,
        }
    }
}

/// `(CLOCK_REALTIME − engine time, engine time)`, from the tightest of
/// three monotonic–realtime–monotonic readings.
fn measure(epoch_ns: u64) -> (i64, Instant) {
    let mut best: Option<(u64, i64, u64)> = None;
    for _ in 0..3 {
        let m1 = clock_ns(libc::CLOCK_MONOTONIC);
        let r = clock_ns(libc::CLOCK_REALTIME);
        let m2 = clock_ns(libc::CLOCK_MONOTONIC);
        let gap = m2.saturating_sub(m1);
        let mid = m1 + gap / 2;
        let engine = mid.saturating_sub(epoch_ns);
        let offset = r as i64 - engine as i64;
        if best.is_none_or(|b| gap < b.0) {
            best = Some((gap, offset, engine));
        }
    }
    let (_, offset, engine) = best.expect("three readings");
    (offset, Instant::from_nanos(engine))
}

/// A clock in nanoseconds.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write; both clocks always exist.
    unsafe { libc::clock_gettime(clock, &mut t) };
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_by_the_offset_and_never_past_now() {
        // REALTIME read 1_700_000_000 s when the engine clock read 5 ms.
        let offset = 1_700_000_000_000_000_000 - 5_000_000;
        let c = RxClock::with_offset(offset);
        let now = Instant::from_nanos(9_000_000);
        // Received at engine time 8 ms.
        let rx = (offset + 8_000_000) as u64;
        assert_eq!(c.to_engine(rx, now), Instant::from_nanos(8_000_000));
        // Stamped after `now` (REALTIME stepped forward): `now`.
        assert_eq!(c.to_engine(rx + 2_000_000, now), now);
        // Before the engine's time zero (stepped back): `now`.
        assert_eq!(c.to_engine(1_000, now), now);
    }

    #[test]
    fn a_calibrated_clock_maps_realtime_onto_the_engine_clock() {
        let epoch = clock_ns(libc::CLOCK_MONOTONIC);
        let mut c = RxClock::new(epoch);
        let engine = || Instant::from_nanos(clock_ns(libc::CLOCK_MONOTONIC) - epoch);
        // A realtime reading between two engine readings converts to a time
        // between them (give or take the calibration's error: a preempted
        // reading could make it microseconds; 1 ms is far above that).
        let before = engine();
        let r = clock_ns(libc::CLOCK_REALTIME);
        let after = engine() + Duration::from_millis(1);
        let t = c.to_engine(r, after);
        assert!(t + Duration::from_millis(1) >= before, "{t:?} < {before:?}");
        assert!(t < after, "{t:?} >= {after:?}");
        // Not read again within a second; read again after one.
        let at = c.at;
        c.refresh(at + Duration::from_millis(999), epoch);
        assert_eq!(c.at, at);
        c.refresh(at + RECALIBRATE, epoch);
        assert!(c.at > at);
    }
}
