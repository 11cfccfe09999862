//! perftest's command line and what follows from it before any I/O: the
//! program, the role, the settings after perftest's own dependency rules,
//! and the buffer layout.

use super::exchange::DEFAULT_PORT;
use super::program::{Kind, PerfTest, Role, Verb};
use super::schedule::Flow;
use super::settings::{AtomicOp, BwUnits, Settings};
use anyhow::{bail, ensure, Context, Result};
use ndverbs_verbs::{Access, PathMtu, LIMITS};
use std::net::IpAddr;
use std::path::PathBuf;

/// `cycle_buffer`: the page size perftest sizes its blocks with.
const CYCLE_BUFFER: u64 = 4096;

/// Command-line options (perftest's).
#[derive(Debug, clap::Args)]
#[command(disable_version_flag = true)]
pub struct Args {
    /// send_bw, write_bw, read_bw, atomic_bw, send_lat, write_lat, read_lat or atomic_lat.
    pub test: String,
    /// Server to connect to (client); none: be the server.
    pub server: Option<String>,
    /// TCP port of the exchange (rdma_cm port with -R).
    #[arg(short = 'p', long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Message size (BW 65536, latency 2, atomics 8).
    #[arg(short = 's', long)]
    pub size: Option<u64>,
    /// Iterations (1000; 5000 for write_bw).
    #[arg(short = 'n', long)]
    pub iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long)]
    pub duration: Option<u32>,
    /// Every size from 2 to 2^23.
    #[arg(short = 'a', long)]
    pub all: bool,
    /// GID index (accepted for compatibility: an ndverbs device has one GID, its address).
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u32>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (default: the port's active
    /// MTU, from the interface's).
    #[arg(short = 'm', long)]
    pub mtu: Option<u32>,
    /// Send queue depth (BW 128, latency 1).
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,
    /// Receive queue depth (SEND tests, 512).
    #[arg(short = 'r', long = "rx-depth")]
    pub rx_depth: Option<u32>,
    /// Number of QPs (BW tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// One signalled completion every N work requests.
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<u32>,
    /// Max inline data (SEND/WRITE).
    #[arg(short = 'I', long = "inline_size", default_value_t = 0)]
    pub inline_size: u32,
    /// Outstanding READs/atomics (default 128, the device maximum).
    #[arg(short = 'o', long = "outs")]
    pub outs: Option<u32>,
    /// Bidirectional (BW tests).
    #[arg(short = 'b', long = "bidirectional")]
    pub duplex: bool,
    /// Report Gb/s instead of MB/s.
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Connect the QPs (and exchange the keys) with rdma_cm.
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// Sleep on completion events instead of polling.
    #[arg(short = 'e', long)]
    pub events: bool,
    /// Local ACK timeout exponent (4.096 us × 2^t).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14)]
    pub qp_timeout: u8,
    /// Connection type (RC only).
    #[arg(short = 'c', long = "connection", default_value = "RC")]
    pub connection: String,
    /// Do not fail on CPU frequency warnings (accepted; nothing to warn about).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Print the perftest version and exit.
    #[arg(short = 'V', long = "version")]
    pub version: bool,
    /// No peak BW.
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Latency: print every sample, unsorted.
    #[arg(short = 'U', long = "report-unsorted")]
    pub unsorted: bool,
    /// Latency: print the kept samples, sorted.
    #[arg(short = 'H', long = "report-histogram")]
    pub histogram: bool,
    /// Atomic operation: FETCH_AND_ADD or CMP_AND_SWAP.
    #[arg(short = 'A', long = "atomic_type", default_value = "FETCH_AND_ADD")]
    pub atomic_type: String,
    /// Device name shown in the header.
    #[arg(short = 'd', long = "ib-dev", default_value = "ndv0")]
    pub ib_dev: String,
    /// Local address of the RDMA device (default: the local address of the
    /// TCP connection; with -R the route to the server, or the first IPv4
    /// address of the host for a server).
    #[arg(long)]
    pub ip: Option<IpAddr>,
    /// Engine progress for BW tests: manual (the polling thread drives the
    /// engine) or thread.
    #[arg(long = "engine-progress", default_value = "manual", hide = true)]
    pub engine_progress: String,
    /// Not in perftest: write an SVG plot of the results against message
    /// size to FILE (average BW, or t_typical for latency tests; t_avg with
    /// -D). Meant for -a (one point per size); without -a it has the one
    /// size measured. stdout is unchanged.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Not in perftest: with -D, print a progress line to stderr once a
    /// second (elapsed, messages, current rate). On by default when stderr
    /// is a terminal; stdout is unchanged.
    #[arg(long = "progress")]
    pub live_progress: bool,
}

/// Everything decided from the options before any I/O.
pub struct Plan {
    /// The program.
    pub test: PerfTest,
    /// Client (given a server) or server.
    pub role: Role,
    /// The settings after perftest's dependency rules.
    pub settings: Settings,
    /// What changes the schedule (`-b`, `-D`, `-a`).
    pub flow: Flow,
    /// `--report_gbits` or MB/sec.
    pub units: BwUnits,
    /// `-m`, if given ([`Plan::path_mtu`] is what is used).
    pub mtu: Option<PathMtu>,
    /// `-q`.
    pub qps: usize,
    /// READs/atomics outstanding (`-o`; 1 for SEND/WRITE).
    pub out_reads: u16,
    /// `-A`.
    pub atomic: AtomicOp,
    /// `-R`.
    pub cm: bool,
}

/// A count option that must be positive (`-t`, `-r`, `-Q`, `-D`).
fn positive<T: Copy + Default + PartialEq>(v: Option<T>, what: &str) -> Result<Option<T>> {
    ensure!(v != Some(T::default()), "{what} must be positive");
    Ok(v)
}

impl Plan {
    /// Checks the options as perftest does and resolves the settings.
    pub fn new(a: &Args) -> Result<Plan> {
        let test = PerfTest::from_name(&a.test).with_context(|| {
            format!(
                "unknown test {:?}: send_bw, write_bw, read_bw, atomic_bw, send_lat, \
                 write_lat, read_lat or atomic_lat",
                a.test
            )
        })?;
        ensure!(
            a.connection.eq_ignore_ascii_case("RC"),
            "connection type {} is not supported: ndverbs has RC queue pairs only",
            a.connection
        );
        let mtu = crate::qp::requested_mtu(a.mtu)?;
        let role = if a.server.is_some() {
            Role::Client
        } else {
            Role::Server
        };
        let bw = test.kind == Kind::Bw;
        ensure!(
            (1..=64).contains(&a.qps),
            "number of QPs {} not in 1..=64",
            a.qps
        );
        ensure!(
            a.qps == 1 || bw,
            "multiple QPs (-q) are supported in BW tests only"
        );
        ensure!(
            !a.duplex || bw,
            "bidirectional mode (-b) is for BW tests only"
        );
        ensure!(
            !(a.duplex && a.duration.is_some()),
            "-b with -D is not supported"
        );
        let atomic = match a.atomic_type.as_str() {
            "FETCH_AND_ADD" => AtomicOp::FetchAndAdd,
            "CMP_AND_SWAP" => AtomicOp::CmpAndSwap,
            o => bail!("unknown atomic type {o} (FETCH_AND_ADD or CMP_AND_SWAP)"),
        };
        let mut s = Settings::defaults(test);
        if let Some(v) = a.size {
            ensure!(
                test.verb != Verb::Atomic || v == 8,
                "atomic tests use 8-byte messages (-s 8)"
            );
            ensure!(
                (1..=1 << 31).contains(&v),
                "message size {v} not in 1..=2^31"
            );
            s.size = v;
        }
        if let Some(v) = a.iters {
            ensure!(v >= 5, "iterations must be at least 5");
            s.iters = v;
        }
        if let Some(v) = positive(a.tx_depth, "TX depth")? {
            s.tx_depth = v;
        }
        if let Some(v) = positive(a.rx_depth, "RX depth")? {
            s.rx_depth = v;
        }
        if let Some(v) = positive(a.cq_mod, "CQ moderation")? {
            s.cq_mod = v;
            s.cq_mod_requested = true;
        }
        s.duration = positive(a.duration, "duration")?;
        s.duplex = a.duplex && bw;
        s.all_sizes = a.all;
        s.events = a.events;
        s.no_peak = a.no_peak;
        let settings = s.resolve(test, role);
        let out_reads = if matches!(test.verb, Verb::Read | Verb::Atomic) {
            let max = u32::from(LIMITS.max_qp_rd_atom);
            a.outs.unwrap_or(max).clamp(1, max) as u16
        } else {
            1
        };
        Ok(Plan {
            test,
            role,
            flow: settings.flow(),
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

    /// The path MTU this side runs with (before the peer's preamble may
    /// lower it) and perftest's message when `-m` was above the port's
    /// `active` MTU ([`crate::qp::run_mtu`]).
    pub fn path_mtu(&self, active: PathMtu) -> (PathMtu, Option<String>) {
        crate::qp::run_mtu(self.mtu, active)
    }

    /// Bytes of one block of the buffer (`BUFF_SIZE`).
    pub fn block(&self) -> u64 {
        self.settings.size.max(CYCLE_BUFFER)
    }

    /// Bytes of the buffer: a send and a receive block per QP.
    pub fn buffer_len(&self) -> usize {
        (2 * self.qps as u64 * self.block()) as usize
    }

    /// Offset of QP `q`'s send block.
    pub fn send_off(&self, q: usize) -> usize {
        (q as u64 * self.block()) as usize
    }

    /// Offset of QP `q`'s receive block (the one the peer is told about).
    pub fn recv_off(&self, q: usize) -> usize {
        ((self.qps + q) as u64 * self.block()) as usize
    }

    /// Remote rights of the buffer.
    pub fn access(&self) -> Access {
        Access::LOCAL_WRITE
            | match self.test.verb {
                Verb::Send => Access::NONE,
                Verb::Write => Access::REMOTE_WRITE,
                Verb::Read => Access::REMOTE_READ,
                Verb::Atomic => Access::REMOTE_ATOMIC,
            }
    }

    /// Remote rights of the QPs.
    pub fn qp_access(&self) -> Access {
        match self.test.verb {
            Verb::Send => Access::REMOTE_WRITE | Access::LOCAL_WRITE,
            Verb::Write => Access::REMOTE_WRITE,
            Verb::Read => Access::REMOTE_READ,
            Verb::Atomic => Access::REMOTE_ATOMIC,
        }
    }
}
