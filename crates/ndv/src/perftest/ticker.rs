//! `--progress` (not in perftest): a line a second on stderr during a `-D`
//! run, so that a long run shows it is alive; stdout is untouched.

use super::measure::RunParams;
use super::program::Kind;
use super::settings::BwUnits;
use super::stats::rtt_factor;
use std::time::{Duration, Instant};

/// `--progress`: one line a second on stderr during a `-D` run, e.g.
///
/// ```text
/// [ndv perf] 2 s: 61234 messages, 239.2 MiB, 0.98 Gb/s
/// [ndv perf] 2 s: 31012 iterations, 15506 tps, 32.25 usec
/// ```
///
/// for BW (rate of the last second, in the report's units) and latency
/// tests (iterations per second and the mean latency of the last second).
/// Messages count from the start of the run, warm-up included. A BW sender
/// with several QPs adds each QP's completed messages so far
/// (`, per QP: 3811 3790 …`): how evenly QPs that share a path split it,
/// second by second.
pub struct Ticker {
    t0: Instant,
    next: Instant,
    last: (Instant, u64),
    size: u64,
    bw: Option<BwUnits>,
    rtt_factor: u32,
}

impl Ticker {
    /// A ticker for this run, if it shows progress.
    pub fn new(r: &RunParams) -> Option<Ticker> {
        if !r.progress {
            return None;
        }
        let now = Instant::now();
        Some(Ticker {
            t0: now,
            next: now + Duration::from_secs(1),
            last: (now, 0),
            size: r.size,
            bw: (r.plan.test.kind == Kind::Bw).then_some(r.plan.units),
            rtt_factor: rtt_factor(r.plan.test.verb),
        })
    }

    /// `done` messages (iterations) so far, `per_qp` of them by QP (empty
    /// when not counted): prints a line once a second.
    pub fn tick(&mut self, done: u64, per_qp: &[u64]) {
        let now = Instant::now();
        if now < self.next {
            return;
        }
        self.next += Duration::from_secs(1);
        let secs = now.duration_since(self.last.0).as_secs_f64();
        let n = done.saturating_sub(self.last.1);
        self.last = (now, done);
        let mut line = self.line(now.duration_since(self.t0).as_secs(), done, n, secs);
        if per_qp.len() > 1 {
            line.push_str(", per QP:");
            for c in per_qp {
                line.push_str(&format!(" {c}"));
            }
        }
        eprintln!("{line}");
    }

    fn line(&self, elapsed_s: u64, done: u64, n: u64, secs: f64) -> String {
        let secs = secs.max(1e-9);
        match self.bw {
            Some(units) => {
                let total = (done * self.size) as f64 / f64::from(1 << 20);
                let rate = (n * self.size) as f64 / secs;
                let rate = match units {
                    BwUnits::Gbps => format!("{:.2} Gb/s", rate * 8.0 / 1e9),
                    BwUnits::MiBps => format!("{:.2} MB/sec", rate / f64::from(1 << 20)),
                };
                format!("[ndv perf] {elapsed_s} s: {done} messages, {total:.1} MiB, {rate}")
            }
            None => {
                let tps = n as f64 / secs;
                let lat = if n == 0 {
                    0.0
                } else {
                    secs * 1e6 / n as f64 / f64::from(self.rtt_factor)
                };
                format!("[ndv perf] {elapsed_s} s: {done} iterations, {tps:.0} tps, {lat:.2} usec")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticker_lines() {
        let t0 = Instant::now();
        let mut t = Ticker {
            t0,
            next: t0,
            last: (t0, 0),
            size: 1 << 20,
            bw: Some(BwUnits::Gbps),
            rtt_factor: 1,
        };
        assert_eq!(
            t.line(3, 1000, 125, 1.0),
            "[ndv perf] 3 s: 1000 messages, 1000.0 MiB, 1.05 Gb/s"
        );
        t.bw = Some(BwUnits::MiBps);
        assert!(t.line(3, 1000, 125, 1.0).ends_with(", 125.00 MB/sec"));
        t.bw = None;
        t.rtt_factor = 2;
        assert_eq!(
            t.line(2, 30000, 20000, 1.0),
            "[ndv perf] 2 s: 30000 iterations, 20000 tps, 25.00 usec"
        );
        // Due at once (next = t0): one tick moves the deadline a second on.
        t.tick(1, &[]);
        assert!(t.next > t0);
    }
}
