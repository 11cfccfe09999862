//! `ndv perf TEST [SERVER]`: perftest 4.5 (`ib_send_bw` … `ib_atomic_lat`),
//! wire-compatible in both roles and printing what perftest prints.
//!
//! # How perftest measures
//!
//! Both programs get the same options; the one given a host name is the
//! client. After the out-of-band exchange (a TCP connection, or rdma_cm with
//! `-R`, see [`conn`]) every test walks the same script on both sides,
//! [`crate::perftest::exchange::schedule`]: exchanges that double as barriers,
//! connecting the QPs, printing, and the measurement itself.
//!
//! * **BW** ([`bw`]): the client keeps up to `-t` (TX depth) work requests
//!   posted per QP, asks for a completion on every `-Q`-th (CQ moderation)
//!   and on the last, and timestamps every post (`tposted[i]`) and every
//!   polled completion (`tcompleted[j]` for the last message it covers).
//!   Average BW is `size × iterations / (tcompleted[last] − tposted[0])`,
//!   peak BW the best per-message time over every window that ends on a
//!   completion ([`crate::perftest::report::bw_report`]). The `ib_send_bw`
//!   server pre-posts `-r` receives, re-posts until it has posted one per
//!   iteration, and times from its first receive to its last. READ, WRITE
//!   and atomic servers are passive: they only wait for the client's result
//!   and print it. `-D` counts completions in the middle of the run (a
//!   quarter of the time is warm-up, a quarter cool-down) instead.
//! * **Latency** ([`lat`]): one message in flight. `ib_send_lat` and
//!   `ib_write_lat` play ping-pong — SEND/receive, or an RDMA WRITE whose
//!   last byte carries the iteration counter that the peer spins on in its
//!   own buffer — and `ib_read_lat`/`ib_atomic_lat` time one-sided round
//!   trips by the client alone. Samples are the differences of successive
//!   post timestamps, halved for ping-pong (a round trip is two latencies).
//!
//! Latency runs and (by default) BW runs use [`Progress::Manual`]: the
//! measuring thread drives the engine while it polls, which on a small
//! machine beats handing every packet to an engine thread; outside the
//! measured run a [`control::Pump`] thread drives it.
//!
//! The buffer of each QP is laid out as perftest's: `2 × QPs × max(size,
//! 4096)` bytes, QP `i` sending from block `i` and offering block `QPs + i`
//! to the peer (the `VAddr` of its key message). Unlike perftest, messages do
//! not cycle through the block: every message uses the block's start.
//!
//! # Beyond perftest
//!
//! Two options perftest lacks; neither changes what goes to stdout, so
//! scripts that parse perftest's report keep working:
//!
//! * `--plot FILE.svg` writes the result rows this side printed as an SVG
//!   line plot against message size ([`crate::plot`]): average bandwidth in
//!   the report's units for BW tests (the sum with `-b`), `t_typical` for
//!   latency tests (`t_avg` with `-D`). With `-a` that is one point per
//!   size; without it, the one size measured. A side that prints no result
//!   (the passive server of `read_lat`/`atomic_lat`) writes no file and says
//!   so on stderr.
//! * During a `-D` run the measuring side prints one progress line a second
//!   to stderr ([`Ticker`]) when stderr is a terminal or `--progress` is
//!   given: elapsed time, messages (or iterations) so far, and the rate of
//!   the last second.

mod bw;
mod control;
mod exchange;
mod lat;
mod report;

use crate::perftest::exchange::{
    exchange_bw_reports, exchange_preamble, schedule, Flow, Kind, PerfTest, PerftestDest, Preamble,
    Role, Step, Verb, ALL_SIZES,
};
use crate::perftest::report::{
    AtomicOp, BwReport, BwUnits, CmMode, Settings, TestInfo, RESULT_LINE,
};
use control::{Ctrl, Pump, QpPath};
use ndverbs_verbs::{
    Access, Cq, Device, Endpoint, Mr, PathMtu, Pd, Progress, Qp, QpCaps, QpInitAttr, RemoteAddr,
};
use std::io::{self, IsTerminal, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `cycle_buffer`: the page size perftest sizes its blocks with.
const CYCLE_BUFFER: u64 = 4096;

/// Command-line options (perftest's).
#[derive(Debug, clap::Args)]
#[command(disable_version_flag = true)]
pub struct Args {
    /// send_bw, write_bw, read_bw, atomic_bw, send_lat, write_lat, read_lat or atomic_lat.
    test: String,
    /// Server to connect to (client); none: be the server.
    server: Option<String>,
    /// TCP port of the exchange (rdma_cm port with -R).
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Message size (BW 65536, latency 2, atomics 8).
    #[arg(short = 's', long)]
    size: Option<u64>,
    /// Iterations (1000; 5000 for write_bw).
    #[arg(short = 'n', long)]
    iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long)]
    duration: Option<u32>,
    /// Every size from 2 to 2^23.
    #[arg(short = 'a', long)]
    all: bool,
    /// GID index (accepted for compatibility: an ndverbs device has one GID, its address).
    #[arg(short = 'x', long = "gid-index")]
    gid_index: Option<u32>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 1024)]
    mtu: u32,
    /// Send queue depth (BW 128, latency 1).
    #[arg(short = 't', long = "tx-depth")]
    tx_depth: Option<u32>,
    /// Receive queue depth (SEND tests, 512).
    #[arg(short = 'r', long = "rx-depth")]
    rx_depth: Option<u32>,
    /// Number of QPs (BW tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: u32,
    /// One signalled completion every N work requests.
    #[arg(short = 'Q', long = "cq-mod")]
    cq_mod: Option<u32>,
    /// Max inline data (SEND/WRITE).
    #[arg(short = 'I', long = "inline_size", default_value_t = 0)]
    inline_size: u32,
    /// Outstanding READs/atomics (default 128, the device maximum).
    #[arg(short = 'o', long = "outs")]
    outs: Option<u32>,
    /// Bidirectional (BW tests).
    #[arg(short = 'b', long = "bidirectional")]
    duplex: bool,
    /// Report Gb/s instead of MB/s.
    #[arg(long = "report_gbits")]
    report_gbits: bool,
    /// Connect the QPs (and exchange the keys) with rdma_cm.
    #[arg(short = 'R', long = "rdma_cm")]
    rdma_cm: bool,
    /// Sleep on completion events instead of polling.
    #[arg(short = 'e', long)]
    events: bool,
    /// Local ACK timeout exponent (4.096 us × 2^t).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14)]
    qp_timeout: u8,
    /// Connection type (RC only).
    #[arg(short = 'c', long = "connection", default_value = "RC")]
    connection: String,
    /// Do not fail on CPU frequency warnings (accepted; nothing to warn about).
    #[arg(short = 'F', long = "CPU-freq")]
    cpu_freq: bool,
    /// Print the perftest version and exit.
    #[arg(short = 'V', long = "version")]
    version: bool,
    /// No peak BW.
    #[arg(short = 'N', long = "noPeak")]
    no_peak: bool,
    /// Latency: print every sample, unsorted.
    #[arg(short = 'U', long = "report-unsorted")]
    unsorted: bool,
    /// Latency: print the kept samples, sorted.
    #[arg(short = 'H', long = "report-histogram")]
    histogram: bool,
    /// Atomic operation: FETCH_AND_ADD or CMP_AND_SWAP.
    #[arg(short = 'A', long = "atomic_type", default_value = "FETCH_AND_ADD")]
    atomic_type: String,
    /// Device name shown in the header.
    #[arg(short = 'd', long = "ib-dev", default_value = "ndv0")]
    ib_dev: String,
    /// Local address of the RDMA device (default: the local address of the
    /// TCP connection; with -R the route to the server, or the first IPv4
    /// address of the host for a server).
    #[arg(long)]
    ip: Option<IpAddr>,
    /// Engine progress for BW tests: manual (the polling thread drives the
    /// engine) or thread.
    #[arg(long = "engine-progress", default_value = "manual", hide = true)]
    engine_progress: String,
    /// Not in perftest: write an SVG plot of the results against message
    /// size to FILE (average BW, or t_typical for latency tests; t_avg with
    /// -D). Meant for -a (one point per size); without -a it has the one
    /// size measured. stdout is unchanged.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Not in perftest: with -D, print a progress line to stderr once a
    /// second (elapsed, messages, current rate). On by default when stderr
    /// is a terminal; stdout is unchanged.
    #[arg(long = "progress")]
    live_progress: bool,
}

/// Everything decided from the options before any I/O.
pub(crate) struct Plan {
    test: PerfTest,
    role: Role,
    settings: Settings,
    flow: Flow,
    units: BwUnits,
    mtu: PathMtu,
    qps: usize,
    out_reads: u16,
    atomic: AtomicOp,
    cm: bool,
}

fn parse_test(name: &str) -> Option<PerfTest> {
    let n = name.strip_prefix("ib_").unwrap_or(name);
    PerfTest::ALL.into_iter().find(|t| &t.program()[3..] == n)
}

impl Plan {
    fn new(a: &Args) -> Result<Plan, String> {
        let test = parse_test(&a.test).ok_or_else(|| {
            format!(
                "unknown test {:?}: send_bw, write_bw, read_bw, atomic_bw, send_lat, \
                 write_lat, read_lat or atomic_lat",
                a.test
            )
        })?;
        if !a.connection.eq_ignore_ascii_case("RC") {
            return Err(format!(
                "connection type {} is not supported: ndverbs has RC queue pairs only",
                a.connection
            ));
        }
        let mtu = PathMtu::at_most(a.mtu as usize)
            .filter(|m| m.bytes() == a.mtu)
            .ok_or_else(|| format!("invalid MTU {} (256, 512, 1024, 2048 or 4096)", a.mtu))?;
        let role = if a.server.is_some() {
            Role::Client
        } else {
            Role::Server
        };
        let bw = test.kind == Kind::Bw;
        if a.qps == 0 || a.qps > 64 {
            return Err(format!("number of QPs {} not in 1..=64", a.qps));
        }
        if a.qps > 1 && !bw {
            return Err("multiple QPs (-q) are supported in BW tests only".into());
        }
        if a.duplex && !bw {
            return Err("bidirectional mode (-b) is for BW tests only".into());
        }
        if a.duplex && a.duration.is_some() {
            return Err("-b with -D is not supported".into());
        }
        let atomic = match a.atomic_type.as_str() {
            "FETCH_AND_ADD" => AtomicOp::FetchAndAdd,
            "CMP_AND_SWAP" => AtomicOp::CmpAndSwap,
            o => {
                return Err(format!(
                    "unknown atomic type {o} (FETCH_AND_ADD or CMP_AND_SWAP)"
                ))
            }
        };
        let mut s = Settings::defaults(test);
        if let Some(v) = a.size {
            if test.verb == Verb::Atomic && v != 8 {
                return Err("atomic tests use 8-byte messages (-s 8)".into());
            }
            if v == 0 || v > 1 << 31 {
                return Err(format!("message size {v} not in 1..=2^31"));
            }
            s.size = v;
        }
        if let Some(v) = a.iters {
            if v < 5 {
                return Err("iterations must be at least 5".into());
            }
            s.iters = v;
        }
        if let Some(v) = a.tx_depth {
            if v == 0 {
                return Err("TX depth must be positive".into());
            }
            s.tx_depth = v;
        }
        if let Some(v) = a.rx_depth {
            if v == 0 {
                return Err("RX depth must be positive".into());
            }
            s.rx_depth = v;
        }
        if let Some(v) = a.cq_mod {
            if v == 0 {
                return Err("CQ moderation must be positive".into());
            }
            s.cq_mod = v;
            s.cq_mod_requested = true;
        }
        if let Some(d) = a.duration {
            if d == 0 {
                return Err("duration must be positive".into());
            }
        }
        s.duration = a.duration;
        s.duplex = a.duplex && bw;
        s.all_sizes = a.all;
        s.events = a.events;
        s.no_peak = a.no_peak;
        let settings = s.resolve(test, role);
        let out_reads = if matches!(test.verb, Verb::Read | Verb::Atomic) {
            let max = u32::from(ndverbs_verbs::LIMITS.max_qp_rd_atom);
            a.outs.unwrap_or(max).clamp(1, max) as u16
        } else {
            1
        };
        Ok(Plan {
            test,
            role,
            flow: Flow {
                duplex: settings.duplex,
                duration: settings.duration.is_some(),
                all_sizes: settings.all_sizes,
            },
            settings,
            units: if a.report_gbits {
                BwUnits::Gbps
            } else {
                BwUnits::MiBps
            },
            mtu,
            qps: a.qps as usize,
            out_reads,
            atomic,
            cm: a.rdma_cm,
        })
    }

    /// Bytes of one block of the buffer (`BUFF_SIZE`).
    fn block(&self) -> u64 {
        self.settings.size.max(CYCLE_BUFFER)
    }

    /// Remote rights of the buffer (and of the QPs).
    fn access(&self) -> Access {
        Access::LOCAL_WRITE
            | match self.test.verb {
                Verb::Send => Access::NONE,
                Verb::Write => Access::REMOTE_WRITE,
                Verb::Read => Access::REMOTE_READ,
                Verb::Atomic => Access::REMOTE_ATOMIC,
            }
    }
}

/// Runs `ndv perf`.
pub fn run(a: &Args) -> Result<(), String> {
    if a.version {
        println!("Version: {}", crate::perftest::exchange::VERSION);
        return Ok(());
    }
    let _ = a.cpu_freq;
    let plan = Plan::new(a)?;
    let mut out = io::stdout();
    let w = |r: io::Result<()>| r.map_err(|e| format!("stdout: {e}"));
    if matches!(plan.test.verb, Verb::Read | Verb::Atomic) && a.inline_size == 0 {
        eprintln!("{}", report::INLINE_DISABLED_MESSAGE);
        w(report::write_inline_notice(&mut out))?;
    }
    if plan.role == Role::Server {
        w(report::write_waiting_banner(&mut out))?;
        let _ = out.flush();
    }
    let timeout = Duration::from_secs(60 + u64::from(a.duration.unwrap_or(0)));
    let progress = if plan.test.kind == Kind::Bw && a.engine_progress == "thread" {
        Progress::Thread
    } else {
        Progress::Manual
    };
    // The control channel and the device.
    let (dev, ctrl, listener, peer_ip) = if plan.cm {
        open_cm(a, &plan, progress, timeout)?
    } else {
        let stream = match &a.server {
            Some(host) => control::connect_tcp(host, a.port, a.ip)?,
            None => control::accept_tcp(a.port, a.ip)?,
        };
        let _ = stream.set_read_timeout(Some(timeout));
        let local = match a.ip {
            Some(ip) => ip,
            None => stream.local_addr().map_err(|e| e.to_string())?.ip(),
        };
        let peer = stream.peer_addr().map_err(|e| e.to_string())?.ip();
        let dev = Device::open_with(local, progress)
            .map_err(|e| format!("cannot open the RDMA device on {local}: {e}"))?;
        (dev, Ctrl::Tcp(stream), None, Some(peer))
    };
    let pump = Pump::start(&dev);
    let res = Resources::new(&dev, &plan, a.inline_size)?;
    let mut session = Session {
        plan: &plan,
        args: a,
        dev: &dev,
        res: &res,
        ctrl,
        listener,
        pump: &pump,
        eps: Vec::new(),
        peer_ip,
        timeout,
        out,
        points: Vec::new(),
    };
    let r = session.execute();
    session.finish();
    let points = std::mem::take(&mut session.points);
    drop(session);
    // Let the engine answer the peer's last packets before the QPs go.
    std::thread::sleep(Duration::from_millis(50));
    drop(pump);
    r?;
    match &a.plot {
        Some(path) => write_plot(path, a, &plan, &points),
        None => Ok(()),
    }
}

/// `--plot`: the result rows this side printed, as an SVG file.
fn write_plot(
    path: &std::path::Path,
    a: &Args,
    plan: &Plan,
    points: &[(u64, f64)],
) -> Result<(), String> {
    if points.is_empty() {
        eprintln!(
            "--plot: this side printed no results (only the client measures {}): {} not written",
            plan.test.program(),
            path.display()
        );
        return Ok(());
    }
    let (what, y_label) = match (plan.test.kind, plan.units, plan.flow.duration) {
        (Kind::Bw, BwUnits::Gbps, _) => ("average bandwidth", "BW average [Gb/sec]"),
        (Kind::Bw, BwUnits::MiBps, _) => ("average bandwidth", "BW average [MB/sec]"),
        (Kind::Lat, _, false) => ("typical latency", "t_typical [usec]"),
        (Kind::Lat, _, true) => ("average latency", "t_avg [usec]"),
    };
    let title = format!("ndv perf {}: {what} vs message size", plan.test.program());
    let run = match plan.settings.duration {
        Some(d) => format!("{d} s per size"),
        None => format!("{} iterations", plan.settings.iters),
    };
    let subtitle = format!(
        "RC, {} QP{}, MTU {}, TX depth {}, {run}{}, device {} ({})",
        plan.qps,
        if plan.qps == 1 { "" } else { "s" },
        plan.mtu.bytes(),
        plan.settings.tx_depth,
        if plan.flow.duplex {
            ", bidirectional"
        } else {
            ""
        },
        a.ib_dev,
        if plan.role == Role::Server {
            "server"
        } else {
            "client"
        },
    );
    let plot = crate::plot::Plot {
        title: &title,
        subtitle: &subtitle,
        y_label,
        series: vec![crate::plot::Series {
            name: plan.test.program(),
            color: "#d62728",
            points: points.to_vec(),
        }],
    };
    std::fs::write(path, plot.svg()).map_err(|e| format!("--plot {}: {e}", path.display()))
}

/// Opens the device and the `-R` control channel.
fn open_cm(
    a: &Args,
    plan: &Plan,
    progress: Progress,
    timeout: Duration,
) -> Result<(Device, Ctrl, Option<Endpoint>, Option<IpAddr>), String> {
    match &a.server {
        Some(host) => {
            use std::net::ToSocketAddrs;
            let server = (host.as_str(), a.port)
                .to_socket_addrs()
                .map_err(|e| format!("{host}: {e}"))?
                .map(|s| s.ip())
                .find(IpAddr::is_ipv4)
                .ok_or_else(|| format!("{host}: no IPv4 address"))?;
            let local = match a.ip {
                Some(ip) => ip,
                None => control::source_for(server)?,
            };
            let dev = Device::open_with(local, progress)
                .map_err(|e| format!("cannot open the RDMA device on {local}: {e}"))?;
            let pump = Pump::start(&dev);
            let ch =
                retry_cm(|| control::CmChannel::connect(&dev, server, a.port, plan.mtu, timeout))?;
            drop(pump);
            Ok((dev, Ctrl::Cm(Box::new(ch)), None, Some(server)))
        }
        None => {
            let local = a
                .ip
                .or_else(control::first_ipv4)
                .ok_or("no IPv4 address to listen on: give the RDMA adapter's address with --ip")?;
            let dev = Device::open_with(local, progress)
                .map_err(|e| format!("cannot open the RDMA device on {local}: {e}"))?;
            let pump = Pump::start(&dev);
            let listener = Endpoint::new(&dev).map_err(|e| e.to_string())?;
            listener
                .listen(a.port, 2 * plan.qps + 2)
                .map_err(|e| format!("rdma_listen: {e}"))?;
            // No time limit: the server waits for its client like perftest.
            let ch = control::CmChannel::accept(&dev, &listener, Duration::from_secs(3600 * 24))?;
            drop(pump);
            Ok((dev, Ctrl::Cm(Box::new(ch)), Some(listener), None))
        }
    }
}

/// perftest retries a CM connection 10 times, 100 ms apart (the server may
/// not listen yet).
fn retry_cm<T>(mut f: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let mut last = String::new();
    for _ in 0..10 {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("{last} (tried 10 times)"))
}

/// The measured objects: one PD, send and receive CQs, the QPs, one buffer.
pub(crate) struct Resources {
    pub send_cq: Cq,
    pub recv_cq: Cq,
    pub qps: Vec<Qp>,
    pub mr: Mr,
    _pd: Pd,
}

impl Resources {
    fn new(dev: &Device, plan: &Plan, inline: u32) -> Result<Resources, String> {
        let e = |e: ndverbs_verbs::VerbsError| e.to_string();
        let s = &plan.settings;
        let n = plan.qps as u32;
        let pd = dev.alloc_pd().map_err(e)?;
        let send_cq = dev.create_cq(s.tx_depth * n + 16).map_err(e)?;
        let recv_cq = dev.create_cq(s.rx_depth * n + 16).map_err(e)?;
        let len = 2 * plan.qps as u64 * plan.block();
        let mr = pd
            .reg_mr(len as usize, plan.access())
            .map_err(|e| format!("Couldn't allocate MR of {len} bytes: {e}"))?;
        let mut qps = Vec::new();
        for _ in 0..plan.qps {
            let mut init = QpInitAttr::new(&send_cq, &recv_cq);
            init.caps = QpCaps {
                max_send_wr: s.tx_depth.max(1),
                max_send_sge: 1,
                max_inline_data: inline,
                sq_sig_all: false,
            };
            init.max_recv_wr = s.rx_depth.max(1);
            init.max_recv_sge = 1;
            let qp = pd
                .create_qp(&init)
                .map_err(|e| format!("Couldn't create QP: {e}"))?;
            let qp_access = match plan.test.verb {
                Verb::Send => Access::REMOTE_WRITE | Access::LOCAL_WRITE,
                Verb::Write => Access::REMOTE_WRITE,
                Verb::Read => Access::REMOTE_READ,
                Verb::Atomic => Access::REMOTE_ATOMIC,
            };
            control::init_qp(&qp, qp_access)?;
            qps.push(qp);
        }
        Ok(Resources {
            send_cq,
            recv_cq,
            qps,
            mr,
            _pd: pd,
        })
    }
}

/// The result of one measured run.
enum RunResult {
    Bw(BwReport),
    Lat { deltas: Vec<u64> },
    LatDuration { iters: u64, elapsed_ns: u64 },
}

/// One run of the schedule.
struct Session<'a> {
    plan: &'a Plan,
    args: &'a Args,
    dev: &'a Device,
    res: &'a Resources,
    ctrl: Ctrl,
    listener: Option<Endpoint>,
    pump: &'a Pump,
    eps: Vec<Endpoint>,
    peer_ip: Option<IpAddr>,
    timeout: Duration,
    out: io::Stdout,
    /// `--plot`: (size, value) of each result row printed, one per size.
    points: Vec<(u64, f64)>,
}

impl Session<'_> {
    /// Keeps the value of a printed row for `--plot`; a later row of the same
    /// size (the sum of `-b`) replaces the earlier.
    fn point(&mut self, size: u64, v: f64) {
        match self.points.last_mut() {
            Some(last) if last.0 == size => last.1 = v,
            _ => self.points.push((size, v)),
        }
    }

    fn my_keys(&self, psns: &[u32]) -> Vec<PerftestDest> {
        let gid = self.dev.gid().octets();
        let block = self.plan.block();
        (0..self.plan.qps)
            .map(|i| PerftestDest {
                lid: 0,
                out_reads: self.plan.out_reads,
                qpn: self.res.qps[i].qpn(),
                psn: psns[i],
                rkey: if self.plan.test.verb == Verb::Send {
                    0
                } else {
                    self.res.mr.rkey()
                },
                vaddr: self.res.mr.addr() + (self.plan.qps + i) as u64 * block,
                gid,
                srqn: 0,
            })
            .collect()
    }

    fn info(&self, mtu_enum: u8) -> TestInfo {
        let p = self.plan;
        let mut info = TestInfo::new(p.test, p.role, &self.args.ib_dev, &p.settings);
        info.atomic = p.atomic;
        info.num_qps = p.qps as u32;
        info.mtu = crate::perftest::exchange::mtu_bytes(mtu_enum).unwrap_or(1024);
        info.gid_index = Some(self.args.gid_index.unwrap_or(0));
        info.inline_size = self.args.inline_size;
        info.out_reads = u32::from(p.out_reads);
        if p.cm {
            info.cm = CmMode::Qps;
        }
        info
    }

    fn execute(&mut self) -> Result<(), String> {
        let p = self.plan;
        let role = p.role;
        let steps = schedule(p.test, role, p.flow);
        let psns: Vec<u32> = (0..p.qps).map(|_| control::random_psn()).collect();
        let my = self.my_keys(&psns);
        let mut remote = vec![PerftestDest::default(); p.qps];
        let mut mtu_enum = crate::perftest::exchange::mtu_enum(p.mtu.bytes()).unwrap_or(3);
        let mut keys_done = false;
        let mut size = p.settings.size;
        let mut sizes = ALL_SIZES.iter();
        let mut result: Option<RunResult> = None;
        let mut my_report = BwReport::default();
        let mut remote_report = BwReport::default();
        let ex = |e: crate::oob::OobError| {
            format!("Failed to exchange data between server and clients: {e}")
        };
        let mut i = 0;
        while i < steps.len() {
            let step = steps[i];
            i += 1;
            match step {
                Step::Preamble => {
                    let peer =
                        exchange_preamble(&mut self.ctrl, role, &Preamble::new(p.mtu.bytes()))
                            .map_err(ex)?;
                    mtu_enum = peer.agreed_mtu;
                    if p.cm {
                        self.connect_cm(PathMtu::from_enum(mtu_enum).unwrap_or(p.mtu))?;
                    }
                }
                Step::PrintTestInfo => {
                    let info = self.info(mtu_enum);
                    self.w(|o| report::write_test_info(o, &info))?;
                }
                Step::HandShake => {
                    let prints_remote = steps.get(i) == Some(&Step::PrintRemoteAddress);
                    if !keys_done || prints_remote {
                        for (q, r) in remote.iter_mut().enumerate() {
                            *r = self.ctrl.hand_shake(role, &my[q]).map_err(ex)?;
                            if prints_remote {
                                let d = *r;
                                self.w(|o| report::write_address(o, true, p.test.verb, &d, true))?;
                            }
                        }
                        keys_done = true;
                        if prints_remote {
                            i += 1;
                        }
                    } else {
                        self.ctrl.hand_shake(role, &my[0]).map_err(ex)?;
                    }
                }
                Step::ConnectQp => {
                    if !p.cm {
                        let path = QpPath {
                            mtu: PathMtu::from_enum(mtu_enum).unwrap_or(p.mtu),
                            timeout: self.args.qp_timeout,
                            peer_ip: self.peer_ip,
                        };
                        for (q, qp) in self.res.qps.iter().enumerate() {
                            control::connect_qp(qp, &my[q], &remote[q], &path)?;
                        }
                    }
                }
                Step::PrintLocalAddress => {
                    for d in &my {
                        self.w(|o| report::write_address(o, false, p.test.verb, d, true))?;
                    }
                }
                Step::PrintRemoteAddress => {
                    for d in &remote {
                        self.w(|o| report::write_address(o, true, p.test.verb, d, true))?;
                    }
                }
                Step::PrintResultHeader => match p.test.kind {
                    Kind::Bw => self.w(|o| report::write_bw_header(o, p.units))?,
                    Kind::Lat => self.w(|o| report::write_lat_header(o, p.flow.duration))?,
                },
                Step::NextSize => size = *sizes.next().unwrap_or(&ALL_SIZES[22]),
                Step::Prepare => self.prepare(size)?,
                Step::Run => {
                    self.pump.pause();
                    let r = self.run_once(size, &remote);
                    self.pump.resume();
                    let r = r?;
                    if let RunResult::Bw(rep) = &r {
                        my_report = *rep;
                    }
                    result = Some(r);
                }
                Step::PrintReport => match result.take() {
                    Some(RunResult::Bw(r)) => {
                        self.w(|o| report::write_bw_row(o, &r, p.units))?;
                        self.point(r.size, r.bw_avg);
                    }
                    Some(RunResult::Lat { deltas }) => {
                        let iters = p.settings.iters;
                        let (u, h) = (self.args.unsorted, self.args.histogram);
                        let f = report::rtt_factor(p.test.verb);
                        let mut stats = None;
                        self.w(|o| {
                            stats = report::write_lat_report(o, size, iters, &deltas, f, u, h)?;
                            Ok(())
                        })?;
                        if let Some(st) = stats {
                            self.point(size, st.t_typical);
                        }
                    }
                    Some(RunResult::LatDuration { iters, elapsed_ns }) => {
                        let (t, tps) = report::lat_duration(
                            iters,
                            elapsed_ns,
                            report::rtt_factor(p.test.verb),
                        );
                        self.w(|o| report::write_lat_duration_row(o, size, iters, t, tps))?;
                        self.point(size, t);
                    }
                    None => {}
                },
                Step::ExchangeBwReports => {
                    let mine = if role == Role::Server && !p.flow.duplex {
                        BwReport::default()
                    } else {
                        my_report
                    };
                    remote_report = exchange_bw_reports(&mut self.ctrl, role, &mine).map_err(ex)?;
                }
                Step::PrintRemoteReport => {
                    let r = remote_report;
                    self.w(|o| report::write_bw_row(o, &r, p.units))?;
                    self.point(r.size, r.bw_avg);
                }
                Step::PrintSumReport => {
                    let r = my_report.sum(&remote_report);
                    self.w(|o| report::write_bw_row(o, &r, p.units))?;
                    self.point(r.size, r.bw_avg);
                }
                Step::PrintResultLine => self.w(|o| writeln!(o, "{RESULT_LINE}"))?,
                Step::Close => self.ctrl.close(role, &my[0]).map_err(|e| {
                    format!("Failed to close connection between server and client: {e}")
                })?,
            }
        }
        Ok(())
    }

    /// Writes to stdout and flushes.
    fn w(&mut self, f: impl FnOnce(&mut io::Stdout) -> io::Result<()>) -> Result<(), String> {
        f(&mut self.out)
            .and_then(|()| self.out.flush())
            .map_err(|e| format!("stdout: {e}"))
    }

    /// `-R`: the two all-zero hand shakes around connecting the data QPs
    /// through the CM (`create_rdma_cm_connection`).
    fn connect_cm(&mut self, mtu: PathMtu) -> Result<(), String> {
        let p = self.plan;
        let zero = PerftestDest::default();
        let ex = |e: crate::oob::OobError| {
            format!(
                "Failed to sync between client and server before creating RDMA CM connection: {e}"
            )
        };
        self.ctrl.hand_shake(p.role, &zero).map_err(ex)?;
        let rd = if matches!(p.test.verb, Verb::Read | Verb::Atomic) {
            p.out_reads.min(255) as u8
        } else {
            0
        };
        for qp in &self.res.qps {
            let ep = match &self.listener {
                Some(l) => {
                    let ep = Endpoint::new(self.dev).map_err(|e| e.to_string())?;
                    control::cm_accept(l, &ep, qp, rd, Some(self.timeout))
                        .map_err(|e| format!("Failed to create RDMA CM connection: {e}"))?;
                    ep
                }
                None => {
                    let server = self.peer_ip.ok_or("no server address")?;
                    let (port, t) = (self.args.port, self.timeout);
                    // A fresh endpoint per attempt: the server may not listen yet.
                    retry_cm(|| {
                        let ep = Endpoint::new(self.dev).map_err(|e| e.to_string())?;
                        control::cm_connect(&ep, qp, server, port, mtu, rd, t)?;
                        Ok(ep)
                    })
                    .map_err(|e| format!("Failed to create RDMA CM connection: {e}"))?
                }
            };
            self.eps.push(ep);
        }
        self.ctrl.hand_shake(p.role, &zero).map_err(|e| {
            format!(
                "Failed to sync between client and server after creating RDMA CM connection: {e}"
            )
        })?;
        Ok(())
    }

    /// Posts what a size needs before its barrier (the receives of SEND tests).
    fn prepare(&mut self, size: u64) -> Result<(), String> {
        let p = self.plan;
        let s = &p.settings;
        let posts_recvs = p.test.verb == Verb::Send
            && (p.test.kind == Kind::Lat || p.role == Role::Server || p.flow.duplex);
        if posts_recvs {
            for q in 0..p.qps {
                for _ in 0..s.rx_depth {
                    bw::post_recv(self.res, p, q, size)
                        .map_err(|e| format!("Failed to post receive recv_wqes: {e}"))?;
                }
            }
        }
        Ok(())
    }

    fn run_once(&mut self, size: u64, remote: &[PerftestDest]) -> Result<RunResult, String> {
        let p = self.plan;
        let remotes: Vec<RemoteAddr> = remote
            .iter()
            .map(|r| RemoteAddr {
                va: r.vaddr,
                rkey: r.rkey,
            })
            .collect();
        let run = RunParams {
            plan: p,
            res: self.res,
            dev: self.dev,
            size,
            remotes,
            inline: self.args.inline_size,
            events: self.args.events,
            progress: p.settings.duration.is_some()
                && (self.args.live_progress || io::stderr().is_terminal()),
        };
        match p.test.kind {
            Kind::Bw => bw::run(&run).map(RunResult::Bw),
            Kind::Lat => lat::run(&run),
        }
    }

    /// `-R`: disconnect the data QPs and the control QP.
    fn finish(&mut self) {
        for (ep, qp) in self.eps.iter().zip(&self.res.qps) {
            if let Ok(p) = ep.disconnect(qp) {
                let _ = p.wait_timeout(Duration::from_secs(2));
            }
        }
        if let Ctrl::Cm(c) = &self.ctrl {
            c.disconnect(Duration::from_secs(2));
        }
    }
}

/// What a measured run needs.
pub(crate) struct RunParams<'a> {
    pub plan: &'a Plan,
    pub res: &'a Resources,
    pub dev: &'a Device,
    pub size: u64,
    pub remotes: Vec<RemoteAddr>,
    pub inline: u32,
    pub events: bool,
    /// Print [`Ticker`] lines (a `-D` run with `--progress` or a terminal).
    pub progress: bool,
}

impl RunParams<'_> {
    /// Offset of QP `q`'s send block.
    pub fn send_off(&self, q: usize) -> usize {
        (q as u64 * self.plan.block()) as usize
    }

    /// Offset of QP `q`'s receive block (the one the peer is told about).
    pub fn recv_off(&self, q: usize) -> usize {
        ((self.plan.qps + q) as u64 * self.plan.block()) as usize
    }
}

/// `-D`: warm-up (a quarter, START), measurement (SAMPLE), cool-down
/// (STOP), end — perftest's `catch_alarm` states.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DurationClock {
    start: std::time::Instant,
    margin: Duration,
    total: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Start,
    Sample,
    Stop,
    End,
}

impl DurationClock {
    pub fn new(seconds: u32) -> Self {
        DurationClock {
            start: std::time::Instant::now(),
            margin: Duration::from_secs(u64::from(seconds / 4)),
            total: Duration::from_secs(u64::from(seconds)),
        }
    }

    pub fn phase(&self) -> Phase {
        let t = self.start.elapsed();
        if t < self.margin {
            Phase::Start
        } else if t < self.total - self.margin {
            Phase::Sample
        } else if t < self.total {
            Phase::Stop
        } else {
            Phase::End
        }
    }

    /// Length of the SAMPLE window in nanoseconds.
    pub fn sample_ns(&self) -> u64 {
        (self.total - 2 * self.margin).as_nanos() as u64
    }
}

/// `--progress`: one line a second on stderr during a `-D` run, e.g.
///
/// ```text
/// [ndv perf] 2 s: 61234 messages, 239.2 MiB, 0.98 Gb/s
/// [ndv perf] 2 s: 31012 iterations, 15506 tps, 32.25 usec
/// ```
///
/// for BW (rate of the last second, in the report's units) and latency
/// tests (iterations per second and the mean latency of the last second).
/// Messages count from the start of the run, warm-up included.
pub(crate) struct Ticker {
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
            rtt_factor: report::rtt_factor(r.plan.test.verb),
        })
    }

    /// `done` messages (iterations) so far: prints a line once a second.
    pub fn tick(&mut self, done: u64) {
        let now = Instant::now();
        if now < self.next {
            return;
        }
        self.next += Duration::from_secs(1);
        let secs = now.duration_since(self.last.0).as_secs_f64();
        let n = done.saturating_sub(self.last.1);
        self.last = (now, done);
        eprintln!(
            "{}",
            self.line(now.duration_since(self.t0).as_secs(), done, n, secs)
        );
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

/// The completion-error report of perftest (`NOTIFY_COMP_ERROR_SEND`/`_RECV`),
/// on stderr, and the error to exit with.
pub(crate) fn completion_error(
    at_client: bool,
    wc: &ndverbs_verbs::WorkCompletion,
    counts: &str,
) -> String {
    eprintln!(
        " Completion with error at {}",
        if at_client { "client" } else { "server" }
    );
    eprintln!(
        " Failed status {}: wr_id {} syndrom 0x0",
        wc.status as u32, wc.wr_id
    );
    eprintln!("{counts}");
    format!("completion with error: {:?}", wc.status)
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
        t.tick(1);
        assert!(t.next > t0);
    }

    #[test]
    fn test_names() {
        assert_eq!(
            parse_test("write_bw"),
            Some(PerfTest::new(Verb::Write, Kind::Bw))
        );
        assert_eq!(
            parse_test("ib_atomic_lat"),
            Some(PerfTest::new(Verb::Atomic, Kind::Lat))
        );
        assert_eq!(parse_test("write"), None);
    }
}
