//! `ndv bench`: ndverbs against its baselines, interleaved in one run.
//!
//! | | ndverbs | baseline | goal |
//! |---|---|---|---|
//! | P1 | RDMA WRITE bandwidth, 64 KiB, 1 QP, MTU 4096 | one iperf3 TCP stream | ≥ 1.5× (milestone 1.0×) |
//! | P2 | 8-byte SEND ping-pong, half round trip | raw UDP ping-pong | ≤ 1.1× (milestone 1.5×) |
//! | P3 | connect + accept + one SEND + disconnect per second (CM) | TCP connect/accept/8 bytes/close | ≥ 0.5× |
//! | P4 | 10,000 connected QP pairs: RSS per QP, idle CPU | — | ~0 idle CPU |
//! | R1 | veth MTU 1500: `ndv perf write_bw -s 65536`, defaults | one iperf3 TCP stream | ≥ 1.5× (1.0×) |
//! | R2 | veth MTU 1500: `ndv perf send_lat -s 8`, t_typical | UDP ping-pong, half round trip | ≤ 1.1× (1.5×) |
//! | R6 | veth MTU 1500: bytes per CPU-second in R1 (both processes) | iperf3's | ≥ 1.0× |
//!
//! P1–P4 run two fresh processes on loopback (127.0.0.1 ↔ 127.0.0.2); R1,
//! R2 and R6 run the tools with their defaults in two network namespaces
//! joined by a veth pair ([`veth`], root only). ndverbs and baseline
//! alternate within each round (the order flips every round), so each ratio
//! compares runs seconds apart on the same machine. The table shows the median ratio and the spread (min–max) over
//! the rounds. `-a` sweeps WRITE bandwidth over message sizes next to iperf3
//! with the same write size and writes a CSV and an SVG plot.
//!
//! Each round first times how long one CPU takes to hand a cache line to
//! another ([`handoff`]): on a virtual machine that can change by 5× within
//! a second, and every two-process row with it. The report gives its range
//! over the rounds.
//!
//! The sides are this binary again (`ndv bench --role …`), speaking a line
//! protocol on stdin/stdout ([`child`]).

mod base;
mod child;
mod handoff;
mod rdma;
mod veth;

use anyhow::{bail, Context, Result};
use child::Peer;
use ndverbs_verbs::{PathMtu, Progress};
use std::net::IpAddr;
use std::path::PathBuf;

/// Command-line options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rounds of P1–P3 (each round runs every ndverbs test and its baseline).
    #[arg(short = 'r', long, default_value_t = 3)]
    rounds: u32,
    /// Seconds per bandwidth and connection-rate run.
    #[arg(short = 'D', long, default_value_t = 2.0)]
    secs: f64,
    /// Ping-pong iterations per latency run.
    #[arg(short = 'n', long, default_value_t = 20_000)]
    iters: u64,
    /// Queue pairs of P4 (pairs: twice as many QPs exist).
    #[arg(long, default_value_t = 10_000)]
    qps: u32,
    /// Only these tests (comma-separated: p1,p2,p2t,p3,p3t,p4,r1,r2; p2t
    /// and p3t are P2 and P3 with engine threads instead of manual
    /// progress; r1 also gives R6).
    #[arg(long, default_value = "p1,p2,p2t,p3,p3t,p4,r1,r2")]
    only: String,
    /// Internal: progress model of the P2 and P3 sides (manual or thread).
    #[arg(long, hide = true, default_value = "manual")]
    conn_progress: String,
    /// Sweep WRITE bandwidth over message sizes (64 B … 4 MiB) next to TCP
    /// (iperf3 with writes of the same size, at most its 1 MiB); writes CSV
    /// and SVG to --out.
    #[arg(short = 'a', long)]
    all: bool,
    /// Directory for the sweep's bench-sweep.csv and bench-sweep.svg.
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// Only time the cross-CPU cache-line handoff and print it in ns (for
    /// scripts that label their rounds with the host's state).
    #[arg(long)]
    handoff: bool,
    /// WRITE message size of P1.
    #[arg(short = 's', long, default_value_t = 65536)]
    size: usize,
    /// WRITEs in flight in P1.
    #[arg(short = 't', long = "tx-depth", default_value_t = 16)]
    depth: u32,
    /// Address of the client sides (and of iperf3's client).
    #[arg(long, default_value = "127.0.0.1")]
    client_ip: IpAddr,
    /// Address of the server sides; another loopback address than the
    /// client's, as each RoCE adapter owns UDP 4791 on its address.
    #[arg(long, default_value = "127.0.0.2")]
    server_ip: IpAddr,
    /// Internal: run one side of a test.
    #[arg(long, hide = true)]
    role: Option<String>,
    /// Internal: local address of a side.
    #[arg(long, hide = true)]
    ip: Option<IpAddr>,
    /// Internal: the other side's address.
    #[arg(long, hide = true)]
    peer: Option<IpAddr>,
}

/// Runs `ndv bench`.
pub fn run(args: &Args) -> Result<()> {
    if let Some(role) = &args.role {
        return run_role(role, args).with_context(|| format!("bench side {role}"));
    }
    if args.handoff {
        let h = handoff::probe().context("timing a handoff needs two CPUs")?;
        println!("{}", h.as_nanos());
        return Ok(());
    }
    let exe = std::env::current_exe().context("finding this program")?;
    let b = Bench { exe, args };
    if args.all {
        return b.sweep();
    }
    b.table()
}

fn progress_of(s: &str) -> Result<Progress> {
    match s {
        "manual" => Ok(Progress::Manual),
        "thread" => Ok(Progress::Thread),
        _ => bail!("progress {s:?}: manual or thread"),
    }
}

fn run_role(role: &str, a: &Args) -> Result<()> {
    let ip = a.ip.context("a side needs --ip")?;
    let peer = a.peer.unwrap_or(ip);
    let mtu = PathMtu::Mtu4096;
    match role {
        "write-server" => rdma::write_server(ip, peer, mtu, a.size),
        "write-client" => rdma::write_client(ip, peer, mtu, a.size, a.depth, a.secs),
        "lat-server" => rdma::lat(ip, peer, progress_of(&a.conn_progress)?, a.iters, false),
        "lat-client" => rdma::lat(ip, peer, progress_of(&a.conn_progress)?, a.iters, true),
        "conn-server" => rdma::conn_server(ip, progress_of(&a.conn_progress)?),
        "conn-client" => rdma::conn_client(ip, peer, progress_of(&a.conn_progress)?, a.secs),
        "scale" => rdma::scale(ip, peer, a.qps, a.secs),
        "udp-echo" => base::udp_echo(ip),
        "udp-ping" => base::udp_ping(ip, peer, 8, a.iters),
        "tcp-accept" => base::tcp_accept(ip),
        "tcp-connect" => base::tcp_connect(ip, peer, a.secs),
        _ => bail!("unknown role {role}"),
    }
}

struct Bench<'a> {
    exe: PathBuf,
    args: &'a Args,
}

/// One measurement of each kind in a round.
#[derive(Default, Clone)]
struct Samples {
    rdma: Vec<f64>,
    base: Vec<f64>,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return f64::NAN;
    }
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// A table figure: two decimals, or two significant digits below 0.1 (a
/// debug build under load can be hundreds of times slower than its
/// baseline, and "0.00" would say nothing).
fn figure(x: f64) -> String {
    if x.is_finite() && x > 0.0 && x < 0.1 {
        let digits = (1.0 - x.log10().floor()).clamp(2.0, 9.0) as usize;
        format!("{x:.digits$}")
    } else {
        format!("{x:.2}")
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        })
}

impl Bench<'_> {
    fn common(&self, role: &str, client: bool) -> Vec<String> {
        let a = self.args;
        let (ip, peer) = if client {
            (a.client_ip, a.server_ip)
        } else {
            (a.server_ip, a.client_ip)
        };
        let (ip, peer) = (ip.to_string(), peer.to_string());
        [
            "bench",
            "--role",
            role,
            "--ip",
            &ip,
            "--peer",
            &peer,
            "-D",
            &a.secs.to_string(),
            "-n",
            &a.iters.to_string(),
            "-s",
            &a.size.to_string(),
            "-t",
            &a.depth.to_string(),
            "--qps",
            &a.qps.to_string(),
            "--conn-progress",
            &a.conn_progress,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// Runs a server role and a client role against each other; returns the
    /// client's `result` words.
    fn pair(&self, server: &str, client: &str, extra: &[&str]) -> Result<Vec<f64>> {
        let mut sa = self.common(server, false);
        let mut ca = self.common(client, true);
        // Extra `flag value` pairs override the common ones.
        for kv in extra.chunks(2) {
            for v in [&mut sa, &mut ca] {
                match v.iter().position(|x| x == kv[0]) {
                    Some(i) => v[i + 1] = kv[1].to_string(),
                    None => v.extend(kv.iter().map(|x| x.to_string())),
                }
            }
        }
        let s = Peer::spawn(server, &self.exe, &sa)?;
        let r = child::measure(s, || Peer::spawn(client, &self.exe, &ca))?;
        parse_result(&r)
    }

    fn p1_rdma(&self, size: usize) -> Result<f64> {
        let s = size.to_string();
        let r = self.pair("write-server", "write-client", &["-s", &s])?;
        Ok(r[0] / r[1])
    }

    fn p1_tcp(&self, len: Option<usize>) -> Result<f64> {
        let a = self.args;
        base::iperf3(a.client_ip, a.server_ip, a.secs.max(1.0), len)
    }

    /// Half round trip in microseconds: the median of the round trips
    /// (perftest's `t_typical`), halved — robust to the scheduling hiccups
    /// of a shared machine; the mean goes to the log.
    fn p2(&self, rdma: bool, progress: &str) -> Result<f64> {
        let r = if rdma {
            self.pair("lat-server", "lat-client", &["--conn-progress", progress])?
        } else {
            self.pair("udp-echo", "udp-ping", &[])?
        };
        eprintln!("    (mean half RTT {:.2} µs)", r[1] / r[0] / 2.0 * 1e6);
        Ok(r[2] / 2.0 / 1e3)
    }

    /// Cycles per second.
    fn p3(&self, rdma: bool, progress: &str) -> Result<f64> {
        let r = if rdma {
            self.pair("conn-server", "conn-client", &["--conn-progress", progress])?
        } else {
            self.pair("tcp-accept", "tcp-connect", &[])?
        };
        Ok(r[0] / r[1])
    }

    fn p4(&self) -> Result<Vec<f64>> {
        let a = self.common("scale", true);
        let mut p = Peer::spawn("scale", &self.exe, &a)?;
        let r = p.expect("result")?;
        p.finish()?;
        parse_result(&r)
    }

    fn table(&self) -> Result<()> {
        let a = self.args;
        let only: Vec<&str> = a.only.split(',').map(str::trim).collect();
        let want = |t: &str| only.contains(&t);
        if want("p1") {
            need_iperf3()?;
        }
        let mut s = [
            Samples::default(),
            Samples::default(),
            Samples::default(),
            Samples::default(),
            Samples::default(),
        ];
        let veth = if want("r1") || want("r2") {
            if want("r1") {
                need_iperf3()?;
            }
            veth::VethPair::create()?
        } else {
            None
        };
        // R1, R6, R2.
        let mut r = [Samples::default(), Samples::default(), Samples::default()];
        let mut handoffs = Vec::new();
        for round in 0..a.rounds {
            let h = handoff::probe();
            handoffs.extend(h);
            let state = h.map_or(String::new(), |h| {
                format!(" (cross-CPU handoff {} ns)", h.as_nanos())
            });
            eprintln!("round {}/{}{state}", round + 1, a.rounds);
            let flip = round % 2 == 1;
            for (i, t) in ["p1", "p2", "p2t", "p3", "p3t"].iter().enumerate() {
                if !want(t) {
                    continue;
                }
                for rdma in [flip, !flip] {
                    let v = match (i, rdma) {
                        (0, true) => self.p1_rdma(a.size)? / 1e9 * 8.0,
                        (0, false) => self.p1_tcp(None)? / 1e9 * 8.0,
                        (1, r) => self.p2(r, "manual")?,
                        (2, true) => self.p2(true, "thread")?,
                        // One UDP figure per round serves both P2 rows.
                        (2, false) => match s[1].base.last() {
                            Some(&v) if want("p2") => v,
                            _ => self.p2(false, "")?,
                        },
                        (3, r) => self.p3(r, "manual")?,
                        (4, true) => self.p3(true, "thread")?,
                        // One TCP figure per round serves both P3 rows.
                        (4, false) => match s[3].base.last() {
                            Some(&v) if want("p3") => v,
                            _ => self.p3(false, "")?,
                        },
                        _ => unreachable!(),
                    };
                    eprintln!(
                        "  {t} {}: {v:.3}",
                        if rdma { "ndverbs" } else { "baseline" }
                    );
                    if rdma {
                        s[i].rdma.push(v);
                    } else {
                        s[i].base.push(v);
                    }
                }
            }
            if let Some(v) = &veth {
                self.veth_round(v, round, flip, &want, &mut r)?;
            }
        }
        println!(
            "ndv bench: {} round(s), {} s per BW/rate run, {} ping-pongs per latency run",
            a.rounds, a.secs, a.iters
        );
        println!("{}", machine());
        // P3 depends on it several-fold on a quiet machine: say which.
        if crate::device::sleeps_at_once() {
            println!("waits: sleep at once ({}=off)", ndverbs_verbs::SPIN_ENV);
        } else {
            println!("waits: spin before sleeping, adaptive (the default)");
        }
        if let (Some(lo), Some(hi)) = (handoffs.iter().min(), handoffs.iter().max()) {
            println!(
                "cross-CPU cache-line handoff: {}–{} ns over the rounds (a ratio compares runs in the same state)",
                lo.as_nanos(),
                hi.as_nanos()
            );
        }
        println!();
        println!("| test | ndverbs (median) | baseline (median) | ratio median | ratio min–max | goal (milestone) |");
        println!("|---|---|---|---|---|---|");
        let rows = [
            (
                "P1 WRITE 64 KiB BW, Gb/s (vs 1 iperf3 TCP stream)",
                "≥ 1.5× (1.0×)",
            ),
            (
                "P2 8 B SEND half RTT (median), µs (vs UDP ping-pong)",
                "≤ 1.1× (1.5×)",
            ),
            (
                "P2 the same with engine threads (Progress::Thread; the application busy-polls its CQ)",
                "—",
            ),
            (
                "P3 connect+accept+1 SEND+disconnect /s, manual progress (vs TCP connect/accept/8 B/close)",
                "≥ 0.5×",
            ),
            (
                "P3 the same with engine threads (Progress::Thread)",
                "≥ 0.5×",
            ),
        ];
        for ((name, goal), x) in rows.iter().zip(&s) {
            print_row(name, goal, x);
        }
        let veth_rows = [
            (
                "R1 veth MTU 1500: ndv perf write_bw -s 65536 (defaults), Gb/s (vs 1 iperf3 TCP stream)",
                "≥ 1.5× (1.0×)",
            ),
            (
                "R6 the same runs: GB moved per CPU-second, both processes (vs iperf3's)",
                "≥ 1.0×",
            ),
            (
                "R2 veth MTU 1500: ndv perf send_lat -s 8 t_typical, µs (vs UDP ping-pong half RTT)",
                "≤ 1.1× (1.5×)",
            ),
        ];
        for ((name, goal), x) in veth_rows.iter().zip(&r) {
            print_row(name, goal, x);
        }
        if want("p4") {
            let r = self.p4()?;
            println!(
                "| P4 {} connected QP pairs (2 adapters, engine threads) | {:.1} KiB RSS per QP; idle CPU {:.2} % (no QPs: {:.2} %); set-up {:.1} s | — | — | — | idle ≈ 0 % |",
                r[0] as u64,
                r[1] / 1024.0,
                r[2],
                r[3],
                r[4]
            );
        }
        Ok(())
    }

    /// One round of the veth rows, ndverbs and baseline in `flip`'s order.
    fn veth_round(
        &self,
        v: &veth::VethPair,
        round: u32,
        flip: bool,
        want: &dyn Fn(&str) -> bool,
        r: &mut [Samples; 3],
    ) -> Result<()> {
        let a = self.args;
        // A fresh port per run: a server of the last run may linger.
        let port = 18900 + (round as u16 % 50) * 4;
        for rdma in [flip, !flip] {
            let who = if rdma { "ndverbs" } else { "baseline" };
            if want("r1") {
                let m = if rdma {
                    v.write_bw(&self.exe, a.secs, port)?
                } else {
                    v.iperf3(a.secs, port + 1)?
                };
                eprintln!(
                    "  r1 {who}: {:.3} Gb/s, {:.3} GB per CPU-second",
                    m.value,
                    m.bytes_per_cpu_s / 1e9
                );
                side_of(&mut r[0], rdma).push(m.value);
                side_of(&mut r[1], rdma).push(m.bytes_per_cpu_s / 1e9);
            }
            if want("r2") {
                let m = if rdma {
                    v.send_lat(&self.exe, a.iters, port + 2)?
                } else {
                    v.udp_pingpong(&self.exe, a.iters)?
                };
                eprintln!("  r2 {who}: {:.3} µs", m.value);
                side_of(&mut r[2], rdma).push(m.value);
            }
        }
        Ok(())
    }

    fn sweep(&self) -> Result<()> {
        need_iperf3()?;
        let mut rows = Vec::new();
        let mut size = 64usize;
        while size <= 4 << 20 {
            let r = self.p1_rdma(size)? * 8.0 / 1e9;
            let t = self.p1_tcp(Some(size))? * 8.0 / 1e9;
            eprintln!("{size:>8} B  ndverbs {r:8.3} Gb/s  TCP {t:8.3} Gb/s");
            rows.push((size, r, t));
            size *= 2;
        }
        std::fs::create_dir_all(&self.args.out)
            .with_context(|| format!("creating {}", self.args.out.display()))?;
        let csv = self.args.out.join("bench-sweep.csv");
        let mut text = String::from("bytes,ndverbs_gbps,tcp_gbps\n");
        for (s, r, t) in &rows {
            text.push_str(&format!("{s},{r:.4},{t:.4}\n"));
        }
        std::fs::write(&csv, text).with_context(|| format!("writing {}", csv.display()))?;
        let svg = self.args.out.join("bench-sweep.svg");
        let sub = machine();
        let plot = crate::plot::Plot {
            title: "RDMA WRITE bandwidth (ndverbs, 1 QP, MTU 4096) vs one TCP stream (iperf3), loopback",
            subtitle: &sub,
            y_label: "Gb/s",
            series: vec![
                crate::plot::Series {
                    name: "ndverbs RDMA WRITE",
                    color: "#d62728",
                    points: rows.iter().map(|r| (r.0 as u64, r.1)).collect(),
                },
                crate::plot::Series {
                    name: "TCP, 1 stream (iperf3 -l size, ≤ 1 MiB)",
                    color: "#1f77b4",
                    points: rows.iter().map(|r| (r.0 as u64, r.2)).collect(),
                },
            ],
        };
        std::fs::write(&svg, plot.svg()).with_context(|| format!("writing {}", svg.display()))?;
        println!("wrote {} and {}", csv.display(), svg.display());
        Ok(())
    }
}

/// The ndverbs or the baseline samples of `x`.
fn side_of(x: &mut Samples, rdma: bool) -> &mut Vec<f64> {
    if rdma {
        &mut x.rdma
    } else {
        &mut x.base
    }
}

/// One table row: medians of both, the median ratio and its spread.
fn print_row(name: &str, goal: &str, x: &Samples) {
    if x.rdma.is_empty() {
        return;
    }
    let ratios: Vec<f64> = x.rdma.iter().zip(&x.base).map(|(r, b)| r / b).collect();
    let (lo, hi) = min_max(&ratios);
    println!(
        "| {name} | {} | {} | **{}×** | {}–{} | {goal} |",
        figure(median(&x.rdma)),
        figure(median(&x.base)),
        figure(median(&ratios)),
        figure(lo),
        figure(hi),
    );
}

/// The numbers of a side's `result` line.
fn parse_result(words: &[String]) -> Result<Vec<f64>> {
    words
        .iter()
        .map(|x| x.parse::<f64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("bad result line {words:?}"))
}

fn need_iperf3() -> Result<()> {
    if !base::have_iperf3() {
        bail!("iperf3 not found: run scripts/setup.sh (as root) to install it");
    }
    Ok(())
}

/// One line describing the machine.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let n = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("machine: {cpu}, {n} CPUs, Linux {kernel}")
}

#[cfg(test)]
mod tests {
    use super::figure;

    #[test]
    fn small_figures_keep_two_significant_digits() {
        assert_eq!(figure(1.234), "1.23");
        assert_eq!(figure(0.1), "0.10");
        assert_eq!(figure(0.099), "0.099");
        assert_eq!(figure(0.05), "0.050");
        assert_eq!(figure(0.0032), "0.0032");
        assert_eq!(figure(0.0), "0.00");
        assert_eq!(figure(f64::NAN), "NaN");
        // The test of `ndv bench` reads the ratio back as a number.
        assert_eq!(figure(0.0032).parse::<f64>(), Ok(0.0032));
    }
}
