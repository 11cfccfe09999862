//! perftest 4.5's statistics: bandwidth from its `tposted`/`tcompleted`
//! timestamps, latency from the differences of successive posts
//! (`print_report_bw`, `print_report_lat`, `print_report_lat_duration` in
//! `src/perftest_parameters.c` of tag `v4.5-0.17`), fed with nanoseconds
//! where perftest counts cycles.
//!
//! * BW: MB/sec means **MiB/s** (2^20 bytes); `--report_gbits` is 10^9
//!   bit/s; MsgRate is Mpps. Peak BW is the best per-message time over all
//!   windows that end on a signalled completion (integer arithmetic on
//!   timestamps, as perftest does with cycles); unidirectional `ib_send_bw`
//!   servers and `-D` runs have none (0.00).
//! * Latency: `delta[i] = t_posted[i+1] - t_posted[i]` (iterations − 1
//!   samples), halved for SEND/WRITE (round trips) and taken whole for
//!   READ/atomic. The samples are sorted and **the two largest dropped**;
//!   t_typical is the median of the rest (mean of the two middle ones,
//!   integer, for an even count), t_avg their mean, t_stdev their standard
//!   deviation computed from differences **truncated to integers** (a
//!   perftest quirk, reproduced), t_max the *second largest* sample,
//!   99%/99.9% the samples at index ceil(n·0.99)/ceil(n·0.999) of the kept n.
//! * `-D` latency: t_avg = elapsed / iterations / (2 or 1), tps =
//!   iterations / seconds.

use super::exchange::BwReport;
use super::program::Verb;
use super::settings::BwUnits;

/// Inputs of [`bw_report`] besides the timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BwParams {
    /// Message size.
    pub size: u64,
    /// Iterations per QP; for `-D`, the total count of messages.
    pub iters: u64,
    /// Number of QPs.
    pub num_qps: u64,
    /// Work requests per post (`-l`).
    pub post_list: u64,
    /// CQ moderation.
    pub cq_mod: u64,
    /// Skip the peak (it prints as 0.00).
    pub no_peak: bool,
    /// `-D` run.
    pub duration: bool,
    /// Output units.
    pub units: BwUnits,
}

/// `print_report_bw`'s numbers, from nanosecond timestamps laid out as
/// perftest's `tposted`/`tcompleted` arrays: `tposted[i]` when message `i`
/// was posted, `tcompleted[j]` when the completion covering message `j`
/// was polled (only the indices of signalled messages, every `cq_mod`-th
/// and the last, are read; others may hold anything, 0 is fine). With
/// `no_peak` perftest keeps just `tposted[0]` = start and `tcompleted[0]` =
/// end, and so may the caller. Missing entries read as 0.
pub fn bw_report(p: &BwParams, tposted: &[u64], tcompleted: &[u64]) -> BwReport {
    const TICKS_PER_SEC: u64 = 1_000_000_000;
    let at = |a: &[u64], i: u64| a.get(i as usize).copied().unwrap_or(0);
    let total = p.iters * p.num_qps;
    // perftest starts from tcompleted[0] - tposted[0], which is unset memory
    // unless message 0 is signalled (cq_mod 1), and then the loop below sees
    // it anyway: start from "infinitely slow" instead.
    let mut opt_delta = u64::MAX;
    if !p.no_peak {
        let cq = p.cq_mod.max(1);
        let step = p.post_list.max(1);
        let mut i = 0;
        while i < total {
            let mut consider = |j: u64| {
                let t = at(tcompleted, j).wrapping_sub(at(tposted, i)) / (j - i + 1);
                opt_delta = opt_delta.min(t);
            };
            let mut j = round_up(i + 1, cq) - 1;
            while j < total {
                consider(j);
                j += cq;
            }
            if total % cq != 0 {
                consider(total - 1);
            }
            i += step;
        }
    }
    let n = if p.duration { p.iters } else { total };
    let last = if p.no_peak { 0 } else { n.saturating_sub(1) };
    let factor = p.units.factor();
    let ticks = TICKS_PER_SEC as f64;
    let sum = at(tcompleted, last).wrapping_sub(at(tposted, 0)) as f64;
    let bw_avg = (p.size as f64 * n as f64 * ticks) / (sum * factor as f64);
    let msg_rate = (n as f64 * ticks) / (sum * 1_000_000.0);
    let bw_peak = if p.no_peak || opt_delta == u64::MAX {
        0.0
    } else {
        // Integer products, as perftest computes them in cycles_t.
        let peak_up = p.size.wrapping_mul(TICKS_PER_SEC);
        let peak_down = opt_delta.wrapping_mul(factor);
        peak_up as f64 / peak_down as f64
    };
    BwReport {
        size: p.size,
        iters: n,
        bw_peak,
        bw_avg,
        msg_rate,
    }
}

fn round_up(v: u64, a: u64) -> u64 {
    if v % a == 0 {
        v
    } else {
        a * (v / a + 1)
    }
}

/// Round trips per sample: 2 for SEND/WRITE (the samples are round trips,
/// the latency is half), 1 for READ/atomic.
pub fn rtt_factor(verb: Verb) -> u32 {
    match verb {
        Verb::Send | Verb::Write => 2,
        Verb::Read | Verb::Atomic => 1,
    }
}

/// Latency statistics in microseconds (see the module docs for the rules).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatStats {
    /// Smallest sample.
    pub t_min: f64,
    /// Second largest sample (the largest is dropped).
    pub t_max: f64,
    /// Median of the kept samples.
    pub t_typical: f64,
    /// Mean of the kept samples.
    pub t_avg: f64,
    /// Standard deviation of the kept samples (integer-truncated differences).
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
}

/// Samples from post timestamps: `t[i+1] - t[i]`.
pub fn lat_deltas(tposted_ns: &[u64]) -> Vec<u64> {
    tposted_ns
        .windows(2)
        .map(|w| w[1].wrapping_sub(w[0]))
        .collect()
}

/// `print_report_lat`'s statistics over samples in nanoseconds (one per
/// iteration but the first, e.g. from [`lat_deltas`]). `None` with fewer
/// than 3 samples (perftest needs at least 5 iterations).
pub fn lat_stats(deltas_ns: &[u64], rtt_factor: u32) -> Option<LatStats> {
    if deltas_ns.len() < 3 {
        return None;
    }
    let q = 1000.0 * f64::from(rtt_factor);
    let mut d = deltas_ns.to_vec();
    d.sort_unstable();
    let m = d.len() - 2;
    let median = if (m - 1) % 2 != 0 {
        // Both are u64 cycles in perftest: an integer mean.
        ((u128::from(d[m / 2]) + u128::from(d[m / 2 - 1])) / 2) as u64
    } else {
        d[m / 2]
    };
    let mut sum = 0.0;
    for &x in &d[..m] {
        sum += x as f64 / q;
    }
    let avg = sum / m as f64;
    let mut var_sum = 0.0;
    for &x in &d[..m] {
        // int temp_var = average - x; int pow_var = pow(temp_var, 2);
        let t = c_double_to_int(avg - x as f64 / q);
        var_sum += f64::from(c_double_to_int(f64::from(t).powi(2)));
    }
    let i99 = (m as f64 * 0.99).ceil() as usize;
    let i999 = (m as f64 * 0.999).ceil() as usize;
    Some(LatStats {
        t_min: d[0] as f64 / q,
        t_max: d[m] as f64 / q,
        t_typical: median as f64 / q,
        t_avg: avg,
        t_stdev: (var_sum / m as f64).sqrt(),
        p99: d[i99] as f64 / q,
        p99_9: d[i999] as f64 / q,
    })
}

/// C's `(int)` of a double as x86-64 does it: truncation, and
/// `INT_MIN` for anything out of range (the "integer indefinite").
fn c_double_to_int(x: f64) -> i32 {
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// `-D` latency (`print_report_lat_duration`): `(t_avg µs, transactions/s)`
/// from the count of iterations in the measured window of `elapsed_ns`.
pub fn lat_duration(iters: u64, elapsed_ns: u64, rtt_factor: u32) -> (f64, f64) {
    const NS_PER_US: f64 = 1000.0;
    let t = elapsed_ns as f64;
    let latency = ((t / NS_PER_US) / f64::from(rtt_factor)) / iters as f64;
    let tps = iters as f64 / (t / (NS_PER_US * 1_000_000.0));
    (latency, tps)
}

#[cfg(test)]
mod tests {
    use super::super::report::{write_bw_row, write_lat_duration_row};
    use super::super::testing::render;
    use super::*;
    use crate::printf::c_fixed;

    /// `size` bytes `iters` times on one QP, one request per post, one
    /// completion every `cq_mod`, peak included, in MiB/s.
    fn params(size: u64, iters: u64, cq_mod: u64) -> BwParams {
        BwParams {
            size,
            iters,
            num_qps: 1,
            post_list: 1,
            cq_mod,
            no_peak: false,
            duration: false,
            units: BwUnits::MiBps,
        }
    }

    /// The row perftest prints, in MiB/s, for messages posted and
    /// completed at these times.
    fn mib_row(p: &BwParams, posted: &[u64], completed: &[u64]) -> String {
        let r = bw_report(p, posted, completed);
        render(|o| write_bw_row(o, &r, BwUnits::MiBps))
    }

    #[test]
    fn bw_numbers_of_reference_log() {
        // ib_send_bw.log, server: no peak; 5 x 4096 B received in 75383 ns.
        let p = BwParams {
            no_peak: true,
            ..params(4096, 5, 5)
        };
        assert_eq!(
            mib_row(&p, &[1_000], &[76_383]),
            " 4096       5                0.00               259.09 \t\t   0.066328\n"
        );
        // Client: 5 sends, one signalled completion (cq_mod 5) at 5.662 ms;
        // the last message alone went in 544.05 us: peak 7.18 MB/s.
        let p = BwParams {
            no_peak: false,
            ..p
        };
        let posted = [0, 1_000, 2_000, 3_000, 5_117_950];
        let completed = [0, 0, 0, 0, 5_662_000];
        assert_eq!(
            mib_row(&p, &posted, &completed),
            " 4096       5                7.18               3.45   \t\t   0.000883\n"
        );
        assert_eq!(bw_report(&p, &posted, &completed).iters, 5);
    }

    #[test]
    fn bw_peak_windows() {
        // 10 messages of 1 MiB, one completion every 2 (cq_mod 2) plus the
        // odd last one: the best window is messages 2..=3, 2 in 1 ms.
        let p = params(1 << 20, 9, 2);
        let posted: Vec<u64> = (0..9).map(|i| i * 10_000_000).collect();
        let mut completed = vec![0u64; 9];
        completed[1] = 25_000_000;
        completed[3] = 21_000_000; // posted[2] = 20 ms: 2 messages in 1 ms
        completed[5] = 70_000_000;
        completed[7] = 90_000_000;
        completed[8] = 100_000_000;
        let r = bw_report(&p, &posted, &completed);
        // peak = 2^20 B / 0.5 ms = 2000 MiB/s; average = 9 MiB / 0.1 s.
        assert_eq!(c_fixed(r.bw_peak, 2), "2000.00");
        assert_eq!(c_fixed(r.bw_avg, 2), "90.00");
        assert_eq!(c_fixed(r.msg_rate, 6), "0.000090");
        let g = bw_report(
            &BwParams {
                units: BwUnits::Gbps,
                ..p
            },
            &posted,
            &completed,
        );
        assert_eq!(c_fixed(g.bw_avg, 4), "0.7550");
    }

    #[test]
    fn bw_duration_row() {
        // ib_write_bw -D 2: 16500 messages in 2.001455 s.
        let p = BwParams {
            no_peak: true,
            duration: true,
            ..params(4096, 16500, 100)
        };
        assert_eq!(
            mib_row(&p, &[0], &[2_001_455_000]),
            " 4096       16500            0.00               32.20  \t\t   0.008244\n"
        );
    }

    #[test]
    fn bw_report_over_the_wire_prints_like_the_server() {
        // The 40 bytes the ib_write_bw client sent (see oob::perftest tests),
        // printed by our server exactly as the real server printed them.
        let r = BwReport {
            size: 4096,
            iters: 5,
            bw_peak: f64::from_bits(0x4039_9d19_ee37_6630),
            bw_avg: f64::from_bits(0x402e_e92b_66a6_c50e),
            msg_rate: f64::from_bits(0x3f70_34c7_a2e3_2017),
        };
        assert_eq!(
            render(|o| write_bw_row(o, &r, BwUnits::MiBps)),
            " 4096       5                25.61              15.46  \t\t   0.003957\n"
        );
        // Bidirectional sums, and the 6-decimal Gb/s form below 0.1.
        let s = r.sum(&r);
        assert_eq!(c_fixed(s.bw_avg, 2), "30.91");
        let small = BwReport {
            bw_avg: 0.05,
            bw_peak: 0.125,
            ..r
        };
        assert_eq!(
            render(|o| write_bw_row(o, &small, BwUnits::Gbps)),
            " 4096       5           0.125000            0.050000            0.003957\n"
        );
    }

    #[test]
    fn lat_stats_rules() {
        // 7 samples (8 iterations): 2 largest dropped, 5 kept.
        let d = [5_000, 1_000, 3_000, 2_000, 100_000, 4_000, 50_000];
        let s = lat_stats(&d, 1).unwrap();
        assert_eq!(s.t_min, 1.0);
        assert_eq!(s.t_max, 50.0); // second largest
        assert_eq!(s.t_typical, 3.0);
        assert_eq!(s.t_avg, 3.0);
        // differences -2,-1,0,1,2 -> sqrt(10/5)
        assert_eq!(s.t_stdev, 2f64.sqrt());
        assert_eq!(s.p99, 50.0); // index ceil(5*0.99) = 5
                                 // Even count: integer mean of the two middle samples.
        let s = lat_stats(&[1_000, 2_001, 4_000, 8_000, 9_000, 9_000], 2).unwrap();
        // (4000 + 2001) / 2 = 3000 ns in integers (not 3000.5), / 2 / 1000.
        assert_eq!(s.t_typical, 1.5);
        assert!(lat_stats(&[1, 2], 1).is_none());
        assert_eq!(lat_deltas(&[10, 15, 30]), vec![5, 15]);
        assert_eq!(c_double_to_int(-2.9), -2);
        assert_eq!(c_double_to_int(3e9), i32::MIN);
    }

    #[test]
    fn lat_duration_numbers() {
        // ib_send_lat -D 2: 237 round trips in 2.002413 s.
        let (t, tps) = lat_duration(237, 2_002_413_000, 2);
        assert_eq!(
            render(|o| write_lat_duration_row(o, 2, 237, t, tps)),
            " 2             237            4224.50        118.36 \n"
        );
        // ib_read_lat -D 2: 38491 reads, rtt factor 1.
        let (t, tps) = lat_duration(38491, 2_000_368_000, 1);
        assert_eq!(
            render(|o| write_lat_duration_row(o, 2, 38491, t, tps)),
            " 2             38491            51.97          19241.96\n"
        );
    }
}
