//! The criteria of issue #16 on the virtual bottleneck, each with its
//! numbers. Goodput is WRITE payload (at most 1024/1082 of 1 Gb/s, 946 Mb/s,
//! for RoCE; 1448/1514 for TCP), measured after a warm-up as the test bed
//! does; drops and retransmissions count the whole run, start included.

use super::sim::*;
use ndverbs_proto::cc::Mode;
use ndverbs_proto::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const FOREVER: u64 = 1_000_000;

/// One flow alone: (goodput Mb/s, queueing p50 µs, p99 µs, drop %, retransmitted %).
fn one_flow(limit: u64, end_ms: u64) -> (f64, u64, u64, f64, f64) {
    one_flow_on(Config::gigabit(limit), end_ms)
}

fn one_flow_on(cfg: Config, end_ms: u64) -> (f64, u64, u64, f64, f64) {
    let limit = cfg.limit;
    let mut s = Sim::new(cfg);
    let h = s.roce_host(Some(s.cfg.cc.clone()));
    let f = s.qp(h, ms(0), ms(FOREVER));
    s.run(ms(end_ms), ms(500));
    let fl = &s.flows[f as usize];
    let r = (
        fl.goodput(500, end_ms as usize) / 1e6,
        s.qdelay_percentile(50.0),
        s.qdelay_percentile(99.0),
        100.0 * fl.drops as f64 / fl.arrivals as f64,
        100.0 * fl.resent as f64 / fl.first as f64,
    );
    println!(
        "one flow, buffer {limit} B: {:.1} Mb/s, queueing p50 {} µs p99 {} µs, drops {:.3} %, retransmitted {:.3} %; {:?}",
        r.0,
        r.1,
        r.2,
        r.3,
        r.4,
        s.controller(h).unwrap().counters()
    );
    r
}

/// C1–C3, DEEP: ≥ 900 Mb/s, queueing p50 ≤ 0.5 ms and p99 ≤ 1.5 ms, drops
/// ≤ 0.1 %, retransmitted ≤ 1 % of first sends.
#[test]
fn c1_c3_one_flow_deep() {
    let (gbps, p50, p99, drops, retx) = one_flow(DEEP, 2000);
    assert!(gbps >= 900.0, "goodput {gbps:.1} Mb/s");
    assert!(p50 <= 500, "queueing p50 {p50} µs");
    assert!(p99 <= 1500, "queueing p99 {p99} µs");
    assert!(drops <= 0.1, "drops {drops:.3} %");
    assert!(retx <= 1.0, "retransmitted {retx:.3} %");
}

/// C1–C3, SHALLOW: ≥ 850 Mb/s, queueing p99 ≤ 0.3 ms, drops ≤ 1 %,
/// retransmitted ≤ 3 %.
#[test]
fn c1_c3_one_flow_shallow() {
    let (gbps, _, p99, drops, retx) = one_flow(SHALLOW, 2000);
    assert!(gbps >= 850.0, "goodput {gbps:.1} Mb/s");
    assert!(p99 <= 300, "queueing p99 {p99} µs");
    assert!(drops <= 1.0, "drops {drops:.3} %");
    assert!(retx <= 3.0, "retransmitted {retx:.3} %");
}

/// A busy receiving host: the process that acknowledges is off its CPU for
/// 50–500 µs every 0.5–3 ms (a user-space responder waits for its CPU to
/// answer; the kernel answers TCP at once). The stalls inflate round trips
/// that no queue explains, which a delay-based controller reads as
/// congestion; on this scale it must keep C1 within 10 % of its goal and
/// C2/C3 whole. (Heavier stalls — 0.1–1 ms every 0.2–2 ms — take one flow
/// to about 620 Mb/s with thousands of delay cuts a second and almost no
/// loss, the signature of the kernel test bed's slow runs: BENCHMARKS.md.)
#[test]
fn c1_c3_with_a_busy_receiver() {
    let us = Duration::from_micros;
    let stalls = Stalls {
        gap: (us(500), us(3000)),
        len: (us(50), us(500)),
    };
    for (limit, goal) in [(DEEP, 900.0), (SHALLOW, 850.0)] {
        let cfg = Config {
            stalls: Some(stalls),
            ..Config::gigabit(limit)
        };
        let (gbps, _, p99, drops, retx) = one_flow_on(cfg, 2000);
        let (max_p99, max_drops, max_retx) = if limit == DEEP {
            (1500, 0.1, 1.0)
        } else {
            (300, 1.0, 3.0)
        };
        assert!(gbps >= 0.9 * goal, "buffer {limit}: goodput {gbps:.1} Mb/s");
        assert!(p99 <= max_p99, "buffer {limit}: queueing p99 {p99} µs");
        assert!(drops <= max_drops, "buffer {limit}: drops {drops:.3} %");
        assert!(
            retx <= max_retx,
            "buffer {limit}: retransmitted {retx:.3} %"
        );
    }
}

/// A requester without a controller for comparison (and to show the
/// harness can tell): rxe's 128 PSNs per QP with its halving on loss (the
/// engine's fixed window without a controller is 512 PSNs at this MTU: worse
/// still), 8 QPs into the DEEP buffer — up to 1 MiB in flight against 629 KB — a standing multi-millisecond queue,
/// drops and go-back-N.
#[test]
fn without_a_controller_eight_qps_overflow_the_deep_buffer() {
    let mut s = Sim::new(Config::gigabit(DEEP));
    let h = s.roce_host(None);
    for _ in 0..8 {
        s.qp(h, ms(0), ms(FOREVER));
    }
    s.run(ms(1000), ms(200));
    let (first, resent): (u64, u64) = s
        .flows
        .iter()
        .fold((0, 0), |(a, b), f| (a + f.first, b + f.resent));
    let drops = 100.0 * s.drops as f64 / s.arrivals as f64;
    println!(
        "no controller, 8 QPs: drops {drops:.2} %, retransmitted {:.1} %, queueing p50 {} µs",
        100.0 * resent as f64 / first as f64,
        s.qdelay_percentile(50.0)
    );
    assert!(drops > 0.1 && s.qdelay_percentile(50.0) > 1500);
}

/// Per-flow goodput in 1-s windows from `from_s` to `to_s`: Jain's index of
/// each window (the smallest) and the aggregate Mb/s over the span.
fn fairness(s: &Sim, flows: &[u32], from_s: usize, to_s: usize) -> (f64, f64) {
    let mut worst: f64 = 1.0;
    for w in from_s..to_s {
        let xs: Vec<f64> = flows
            .iter()
            .map(|&f| s.flows[f as usize].goodput(w * 1000, (w + 1) * 1000))
            .collect();
        worst = worst.min(jain(&xs));
    }
    let agg: f64 = flows
        .iter()
        .map(|&f| s.flows[f as usize].goodput(from_s * 1000, to_s * 1000))
        .sum();
    (worst, agg / 1e6)
}

/// C4: N QPs to one peer, sharing one controller: Jain ≥ 0.98 over 1-s
/// windows, aggregate ≥ 900 Mb/s (DEEP buffer), and the queue no longer than
/// C2 allows one flow.
fn sharing_one_controller(n: usize) {
    let mut s = Sim::new(Config::gigabit(DEEP));
    let h = s.roce_host(Some(s.cfg.cc.clone()));
    let flows: Vec<u32> = (0..n).map(|_| s.qp(h, ms(0), ms(FOREVER))).collect();
    s.run(ms(3000), ms(1000));
    let (j, agg) = fairness(&s, &flows, 1, 3);
    let p99 = s.qdelay_percentile(99.0);
    println!(
        "{n} QPs, one controller: Jain {j:.4}, aggregate {agg:.1} Mb/s, queueing p99 {p99} µs"
    );
    assert!(j >= 0.98, "{n} QPs: Jain {j}");
    assert!(agg >= 900.0, "{n} QPs: aggregate {agg:.1} Mb/s");
    // One controller: the QPs queue as one flow would (C2's DEEP bound).
    assert!(p99 <= 1500, "{n} QPs: queueing p99 {p99} µs");
}

#[test]
fn c4_two_qps_sharing_one_controller() {
    sharing_one_controller(2);
}

#[test]
fn c4_four_qps_sharing_one_controller() {
    sharing_one_controller(4);
}

#[test]
fn c4_eight_qps_sharing_one_controller() {
    sharing_one_controller(8);
}

#[test]
fn c4_sixteen_qps_sharing_one_controller() {
    sharing_one_controller(16);
}

/// C4: four peers, each with its own controller, on one bottleneck: Jain ≥
/// 0.90 over 1-s windows, aggregate ≥ 900 Mb/s (DEEP buffer), the queue
/// within C2's bound, and no controller mistaking the others for a
/// buffer-filler.
#[test]
fn c4_four_peers_separate_controllers() {
    let mut s = Sim::new(Config::gigabit(DEEP));
    let flows: Vec<u32> = (0..4)
        .map(|_| {
            let h = s.roce_host(Some(s.cfg.cc.clone()));
            s.qp(h, ms(0), ms(FOREVER))
        })
        .collect();
    s.run(ms(3000), ms(1000));
    let (j, agg) = fairness(&s, &flows, 1, 3);
    let modes: Vec<Mode> = (0..4).map(|h| s.controller(h).unwrap().mode()).collect();
    println!(
        "4 peers: Jain {j:.4}, aggregate {agg:.1} Mb/s, queueing p50 {} p99 {} µs, modes {modes:?}",
        s.qdelay_percentile(50.0),
        s.qdelay_percentile(99.0)
    );
    assert!(j >= 0.90, "Jain {j}");
    let p99 = s.qdelay_percentile(99.0);
    assert!(p99 <= 1500, "queueing p99 {p99} µs");
    assert!(agg >= 900.0, "aggregate {agg:.1} Mb/s");
    assert!(modes.iter().all(|&m| m == Mode::Delay), "{modes:?}");
}

/// Milliseconds after `join_ms` until the flow's goodput over 10 ms first
/// reaches `rate` b/s.
fn time_to_rate(fl: &Flow, join_ms: usize, rate: f64) -> Option<usize> {
    (join_ms + 10..join_ms + 1000)
        .find(|&t| fl.goodput(t - 10, t) >= rate)
        .map(|t| t - join_ms)
}

/// C4: a late joiner reaches half its fair share within 200 ms — a fourth
/// QP on a shared controller, and a fourth peer with a controller of its own.
#[test]
fn c4_late_joiner() {
    let share = 946e6 / 4.0;
    for shared in [true, false] {
        let mut s = Sim::new(Config::gigabit(DEEP));
        let h0 = s.roce_host(Some(s.cfg.cc.clone()));
        for i in 0..3 {
            let h = if shared || i == 0 {
                h0
            } else {
                s.roce_host(Some(s.cfg.cc.clone()))
            };
            s.qp(h, ms(0), ms(FOREVER));
        }
        let h = if shared {
            h0
        } else {
            s.roce_host(Some(s.cfg.cc.clone()))
        };
        let late = s.qp(h, ms(1000), ms(FOREVER));
        s.run(ms(2000), ms(1000));
        let t = time_to_rate(&s.flows[late as usize], 1000, share / 2.0);
        println!("late joiner (shared controller: {shared}): half its share after {t:?} ms");
        assert!(t.is_some_and(|t| t <= 200), "shared {shared}: {t:?}");
    }
}

/// How long the coexistence runs last: 30 s as the criterion says in
/// release (`scripts/test.sh`), `NDV_CC_COEXIST_S` to choose, 4 s by default
/// so debug runs stay short.
fn coexist_seconds() -> usize {
    std::env::var("NDV_CC_COEXIST_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

/// C5: one RoCE flow and one CUBIC flow share the bottleneck: each gets at
/// least half its fair share, the aggregate is ≥ 880 Mb/s (after a 1-s
/// warm-up, as the test bed's 3 s are scaled to the run).
fn coexist(limit: u64) {
    let secs = coexist_seconds();
    let mut s = Sim::new(Config::gigabit(limit));
    let h = s.roce_host(Some(s.cfg.cc.clone()));
    let roce = s.qp(h, ms(0), ms(FOREVER));
    let tcp = s.tcp(ms(0), ms(FOREVER));
    let end = secs as u64 * 1000;
    s.run(ms(end), ms(1000));
    let r = s.flows[roce as usize].goodput(1000, end as usize) / 1e6;
    let t = s.flows[tcp as usize].goodput(1000, end as usize) / 1e6;
    let c = s.controller(h).unwrap();
    let fl = &s.flows[roce as usize];
    println!(
        "with CUBIC, buffer {limit} B, {secs} s: RoCE {r:.1} Mb/s, CUBIC {t:.1} Mb/s, aggregate {:.1} Mb/s; RoCE drops {:.2} %, retransmitted {:.2} %; mode {:?}; {:?}",
        r + t,
        100.0 * fl.drops as f64 / fl.arrivals as f64,
        100.0 * fl.resent as f64 / fl.first as f64,
        c.mode(),
        c.counters()
    );
    let fair = (r + t) / 2.0;
    assert!(r >= 0.5 * fair, "RoCE {r:.1} Mb/s of a fair {fair:.1}");
    assert!(t >= 0.5 * fair, "CUBIC {t:.1} Mb/s of a fair {fair:.1}");
    assert!(r + t >= 880.0, "aggregate {:.1} Mb/s", r + t);
}

#[test]
fn c5_coexistence_with_cubic_deep() {
    coexist(DEEP);
}

#[test]
fn c5_coexistence_with_cubic_shallow() {
    coexist(SHALLOW);
}

/// C7: CNPs cut the window at most once per round trip. The FIFO marks CE
/// at random — 0.5 % of RoCE packets, as the test bed's nftables rule, and
/// every packet — and the receiver answers with at most one CNP per 50 µs.
#[test]
fn c7_cnp_cuts_at_most_once_per_rtt() {
    for mark in [0.005, 1.0] {
        let mut cfg = Config::gigabit(DEEP);
        cfg.mark_ce = mark;
        cfg.seed = 7;
        let mut s = Sim::new(cfg);
        let h = s.roce_host(Some(s.cfg.cc.clone()));
        let f = s.qp(h, ms(0), ms(FOREVER));
        s.run(ms(1000), ms(0));
        let c = s.controller(h).unwrap().counters();
        println!(
            "CE on {:.1} % of packets: {} CNPs, {} cuts, {:.1} Mb/s; window {} B, srtt {:?}",
            mark * 100.0,
            c.cnps,
            c.cnp_cuts,
            s.flows[f as usize].goodput(0, 1000) / 1e6,
            s.controller(h).unwrap().window(),
            s.controller(h).unwrap().srtt(),
        );
        assert!(c.cnp_cuts > 10 && c.cnps > c.cnp_cuts, "{c:?}");
        assert_eq!(c.cnp_cuts, s.cnp_cuts.len() as u64);
        let min_gap = Duration::from_micros(50);
        for w in s.cnp_cuts.windows(2) {
            let ((_, a, _), (_, b, srtt)) = (w[0], w[1]);
            let gap = b.saturating_duration_since(a);
            assert!(
                gap >= srtt.max(min_gap),
                "cuts {gap:?} apart, srtt {srtt:?}"
            );
        }
    }
}
