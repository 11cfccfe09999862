//! Swift's delay arithmetic (Kumar et al., SIGCOMM 2020), as pure functions.
//!
//! * **Target.** `T = base_rtt + q_t + fs(cwnd)`. Swift adds a per-hop term;
//!   we have no hop count, so `q_t` covers the path. Flow scaling
//!   `fs(cwnd) = clamp(a/√cwnd + b, 0, fs_range)` with `a`, `b` chosen so that
//!   `fs = fs_range` at `fs_min_pkts` and `0` at `fs_max_pkts` (Swift's
//!   `fs_range` is 100 µs over `fcwnd ∈ [0.1, 256]` in `google/isekai`; the
//!   design notes take 250 µs over 1–64 packets). Smaller windows — more flows
//!   on the bottleneck — tolerate more delay, which both keeps the link busy
//!   with many flows and lets the small ones grow: AIMD with a
//!   window-dependent target converges to fairness faster.
//! * **Decrease.** When the delay `d` exceeds `T`, at most once per round
//!   trip: `cwnd ×= max(1 − β·(d − T)/d, 1 − max_mdf)` (β 0.8, max_mdf 0.5):
//!   proportional to how far above target the queue is, never more than half.
//! * **Increase.** Below target, `ai` packets per round trip, i.e.
//!   `ai·mss·acked/cwnd` bytes per acknowledgement.

use crate::time::Duration;

/// Swift's flow-scaling term for a window of `cwnd_pkts` packets.
pub fn flow_scaling(range: Duration, min_pkts: f64, max_pkts: f64, cwnd_pkts: f64) -> Duration {
    if range.is_zero() || max_pkts <= min_pkts {
        return Duration::ZERO;
    }
    let inv = |w: f64| 1.0 / w.max(f64::MIN_POSITIVE).sqrt();
    let a = range.as_secs_f64() / (inv(min_pkts) - inv(max_pkts));
    let b = -a * inv(max_pkts);
    let fs = (a * inv(cwnd_pkts) + b).clamp(0.0, range.as_secs_f64());
    Duration::from_secs_f64(fs)
}

/// The factor a window is multiplied by when the delay `d` exceeds the
/// target `t` (1.0 when it does not).
pub fn delay_decrease(d: Duration, t: Duration, beta: f64, max_mdf: f64) -> f64 {
    if d <= t || d.is_zero() {
        return 1.0;
    }
    let over = (d - t).as_secs_f64() / d.as_secs_f64();
    (1.0 - beta * over).max(1.0 - max_mdf)
}

/// Additive increase in bytes for `acked` bytes acknowledged at window
/// `cwnd`: `ai` packets per window's worth of acknowledgements.
pub fn additive_increase(ai_pkts: f64, mss: u32, acked: u64, cwnd: f64) -> f64 {
    ai_pkts * f64::from(mss) * acked as f64 / cwnd.max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_scaling_spans_its_range() {
        let r = Duration::from_micros(250);
        assert_eq!(flow_scaling(r, 1.0, 64.0, 0.5), r);
        assert_eq!(flow_scaling(r, 1.0, 64.0, 1.0).as_micros(), 250);
        assert_eq!(flow_scaling(r, 1.0, 64.0, 64.0), Duration::ZERO);
        assert_eq!(flow_scaling(r, 1.0, 64.0, 1000.0), Duration::ZERO);
        let mid = flow_scaling(r, 1.0, 64.0, 16.0).as_micros();
        // 250·(1/4 − 1/8)/(1 − 1/8) ≈ 35.7 µs
        assert!((35..=36).contains(&mid), "{mid}");
    }

    #[test]
    fn decrease_is_proportional_and_bounded() {
        let us = Duration::from_micros;
        assert_eq!(delay_decrease(us(100), us(200), 0.8, 0.5), 1.0);
        // 0.8·(400−300)/400 = 0.2
        assert!((delay_decrease(us(400), us(300), 0.8, 0.5) - 0.8).abs() < 1e-9);
        assert_eq!(delay_decrease(us(10_000), us(300), 0.8, 0.5), 0.5);
    }

    #[test]
    fn one_packet_per_window() {
        // A whole window acknowledged adds `ai` packets.
        let cwnd = 32.0 * 1024.0;
        assert!((additive_increase(1.0, 1024, 32 * 1024, cwnd) - 1024.0).abs() < 1e-9);
    }
}
