//! perftest 4.5's output and statistics.
//!
//! Source: linux-rdma/perftest tag `v4.5-0.17` (Debian 12), `src/perftest_parameters.{c,h}`
//! (`ctx_print_test_info`, `print_report_bw`, `print_full_bw_report`,
//! `print_report_lat`, `print_report_lat_duration`, `force_dependecies`, the
//! `RESULT_*`/`REPORT_*` macros) and `src/perftest_communication.c`
//! (`ctx_print_pingpong_data`). Checked line by line against the tools'
//! output on rxe (see the tests).
//!
//! # What a run prints
//!
//! ```text
//! (server only)                                  write_waiting_banner
//!
//! ************************************
//! * Waiting for client to connect... *
//! ************************************
//! ---------------------------------------------------------------------------------------   write_test_info
//!                     Send BW Test
//!  Dual-port       : OFF\t\tDevice         : rxe0
//!  …
//!  Data ex. method : Ethernet
//! ---------------------------------------------------------------------------------------
//!  local address: LID 0000 QPN 0x0015 PSN 0xcbd3ac                write_address
//!  GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02
//!  remote address: LID 0000 QPN 0x0015 PSN 0x973ddb
//!  GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:03
//! ---------------------------------------------------------------------------------------   write_bw_header
//!  #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
//!  4096       5                7.18               3.45   \t\t   0.000883                   write_bw_row
//! ---------------------------------------------------------------------------------------   RESULT_LINE
//! ```
//!
//! Where each piece goes relative to the TCP exchanges is
//! [`crate::perftest::exchange::schedule`]'s business.
//!
//! # Numbers
//!
//! * Hex fields use `%#0Nx`, which drops the `0x` of a zero: LID 0 prints
//!   as `0000`, QPN 0x15 as `0x0015`, a 5-digit PSN as `0x298e0`.
//! * BW: MB/sec means **MiB/s** (2^20 bytes); `--report_gbits` is 10^9
//!   bit/s; MsgRate is Mpps with 6 decimals. Peak BW is the best
//!   per-message time over all windows that end on a signalled completion
//!   (integer arithmetic on timestamps, as perftest does with cycles);
//!   unidirectional `ib_send_bw` servers and `-D` runs print 0.00.
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
//!
//! Newer perftest releases print `MiB/sec` and change the row spacing; this
//! module is 4.5's.

pub use crate::perftest::exchange::{BwReport, Kind, PerfTest, PerftestDest, Role, Verb};
use crate::printf::{c_alt_hex, c_g, c_left};
use std::io::{self, Write};

/// The separator line (`RESULT_LINE`, 87 dashes), without newline.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

/// What READ/atomic tests write to **stderr** on a device perftest does not
/// know (rxe included), with a RESULT_LINE on stdout before it
/// ([`write_inline_notice`]); printed while parsing options, before anything else.
pub const INLINE_DISABLED_MESSAGE: &str =
    "Device not recognized to implement inline feature. Disabling it";

/// The stdout part of the inline notice: a RESULT_LINE.
pub fn write_inline_notice(out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "{RESULT_LINE}")
}

/// The server's banner, printed before it waits for the TCP connection.
pub fn write_waiting_banner(out: &mut impl Write) -> io::Result<()> {
    write!(
        out,
        "\n************************************\n\
         * Waiting for client to connect... *\n\
         ************************************\n"
    )
}

/// Atomic operation of the atomic tests (`-A`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtomicOp {
    /// `CMP_AND_SWAP`
    CmpAndSwap,
    /// `FETCH_AND_ADD` (the default)
    #[default]
    FetchAndAdd,
}

impl AtomicOp {
    /// perftest's name.
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::CmpAndSwap => "CMP_AND_SWAP",
            AtomicOp::FetchAndAdd => "FETCH_AND_ADD",
        }
    }
}

/// How connections are set up (`-R`, `-z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CmMode {
    /// TCP exchange, QPs connected by hand (the default).
    #[default]
    Off,
    /// `-z`: exchange over rdma_cm, QPs connected by hand.
    Exchange,
    /// `-R`: QPs connected by rdma_cm (exchange too).
    Qps,
}

/// Bandwidth units of the BW tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BwUnits {
    /// MB/sec, meaning 2^20 bytes per second (the default).
    #[default]
    MiBps,
    /// Gb/sec, 10^9 bits per second (`--report_gbits`).
    Gbps,
}

impl BwUnits {
    /// Bytes per unit per second (`format_factor`).
    pub fn factor(self) -> u64 {
        match self {
            BwUnits::MiBps => 0x100000,
            BwUnits::Gbps => 125_000_000,
        }
    }
}

/// Run parameters that the header shows and the statistics need, with
/// perftest's defaults and inter-dependencies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `-s`: message size.
    pub size: u64,
    /// `-n`: iterations (0 after [`Settings::resolve`] with `-D`).
    pub iters: u64,
    /// `-t`: send queue depth.
    pub tx_depth: u32,
    /// `-r`: receive queue depth (SEND tests).
    pub rx_depth: u32,
    /// `-Q`: one signalled completion per this many sends (BW).
    pub cq_mod: u32,
    /// Whether `-Q` was given.
    pub cq_mod_requested: bool,
    /// `-D`: seconds, time-based run.
    pub duration: Option<u32>,
    /// `-b`: bidirectional (BW).
    pub duplex: bool,
    /// `-a`: all sizes.
    pub all_sizes: bool,
    /// `-e`: completion events.
    pub events: bool,
    /// `-N`, or implied (see [`Settings::resolve`]): no peak BW.
    pub no_peak: bool,
    /// `-l`: work requests per post.
    pub post_list: u32,
}

impl Settings {
    /// perftest's defaults for `test` (`init_perftest_params`): size 65536
    /// (BW), 2 (LAT), 8 (atomic); 5000 iterations for `ib_write_bw`, else
    /// 1000; TX depth 128 (BW) or 1 (LAT); RX depth 512 (SEND); CQ
    /// moderation 100.
    pub fn defaults(test: PerfTest) -> Settings {
        let bw = test.kind == Kind::Bw;
        Settings {
            size: match (test.verb, bw) {
                (Verb::Atomic, _) => 8,
                (_, true) => 65536,
                (_, false) => 2,
            },
            iters: if bw && test.verb == Verb::Write {
                5000
            } else {
                1000
            },
            tx_depth: if bw { 128 } else { 1 },
            rx_depth: if test.verb == Verb::Send { 512 } else { 1 },
            cq_mod: 100,
            cq_mod_requested: false,
            duration: None,
            duplex: false,
            all_sizes: false,
            events: false,
            no_peak: false,
            post_list: 1,
        }
    }

    /// The values perftest actually uses (`force_dependecies`, RC): TX/RX
    /// depth at most the iterations (iteration runs), CQ moderation 1 for
    /// messages above 8 KiB unless `-Q`/`-a`/`-e`, CQ moderation at most the
    /// TX depth, the post list as CQ moderation unless `-Q`, no peak for `-D`,
    /// for the server of a unidirectional `ib_send_bw` and above 20000
    /// iterations, an odd SEND RX depth rounded up (not with `-a`).
    pub fn resolve(&self, test: PerfTest, role: Role) -> Settings {
        let mut s = self.clone();
        let send = test.verb == Verb::Send;
        let bw = test.kind == Kind::Bw;
        if s.duration.is_none() {
            s.tx_depth = s.tx_depth.min(clamp_u32(s.iters));
            if send {
                s.rx_depth = s.rx_depth.min(clamp_u32(s.iters));
            }
        }
        if s.size > 8192 && !s.all_sizes && !s.events && !s.cq_mod_requested {
            s.cq_mod = 1;
        }
        if s.cq_mod > s.tx_depth {
            s.cq_mod = s.tx_depth;
        }
        if s.all_sizes {
            s.size = 1 << 23;
        }
        if s.post_list > 1 && bw && !s.cq_mod_requested {
            s.cq_mod = s.post_list;
        }
        if s.duration.is_some() {
            s.iters = 0;
            s.no_peak = true;
        }
        if send && bw && role == Role::Server && !s.duplex {
            s.no_peak = true;
        }
        if send && s.rx_depth % 2 == 1 && !s.all_sizes {
            s.rx_depth += 1;
        }
        if s.duration.is_none() && s.iters > 20000 && bw {
            s.no_peak = true;
        }
        s
    }

    /// `-D`'s warm-up/cool-down margin: a quarter of the duration.
    pub fn margin_secs(&self) -> u32 {
        self.duration.map_or(0, |d| d / 4)
    }
}

fn clamp_u32(v: u64) -> u32 {
    v.min(u64::from(u32::MAX)) as u32
}

/// Everything `ctx_print_test_info` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestInfo {
    /// The program.
    pub test: PerfTest,
    /// This side.
    pub role: Role,
    /// `-A` (atomic tests).
    pub atomic: AtomicOp,
    /// `-b`.
    pub duplex: bool,
    /// `-l` (shown above 1).
    pub post_list: u32,
    /// `--recv_post_list` (shown above 1).
    pub recv_post_list: u32,
    /// `-e`: events, with the completion vector (`Using rxe0_comp0`).
    pub events: Option<u32>,
    /// Device name.
    pub device: String,
    /// `-q`.
    pub num_qps: u32,
    /// `"RC"`, `"UC"`, `"UD"`…
    pub connection: &'static str,
    /// `--use_srq`.
    pub use_srq: bool,
    /// `PCIe relax order`: `Some(true)` prints ON (perftest built with
    /// relaxed-ordering support, the Debian build), `Some(false)` OFF
    /// (`--disable_pcie_relaxed`, and always in `ib_write_lat`), `None`
    /// `Unsupported`.
    pub pcie_relaxed: Option<bool>,
    /// `ibv_wr* API`: ON only on devices with the new post-send API (not rxe).
    pub wr_api: bool,
    /// TX depth (shown by clients and in bidirectional runs).
    pub tx_depth: u32,
    /// RX depth (shown by SEND servers and in bidirectional runs).
    pub rx_depth: u32,
    /// CQ moderation (BW tests).
    pub cq_mod: u32,
    /// Path MTU in bytes (after the preamble's negotiation).
    pub mtu: u32,
    /// `"Ethernet"` or `"IB"`.
    pub link_layer: &'static str,
    /// GID index (always set on Ethernet: `-x` or the one perftest picked).
    pub gid_index: Option<u32>,
    /// Max inline data (SEND/WRITE; 0 on rxe).
    pub inline_size: u32,
    /// Outstanding reads (READ/atomic; the device's `max_qp_rd_atom`, 128 on rxe).
    pub out_reads: u32,
    /// `-R`/`-z`.
    pub cm: CmMode,
    /// `--tos` (shown with `-R`).
    pub tos: Option<u8>,
}

impl TestInfo {
    /// The header perftest 4.5 prints on an rxe-like RoCE device named
    /// `device` (MTU 1024, GID index 1, no inline, 128 outstanding reads)
    /// for resolved `settings`. Adjust the fields for anything else.
    pub fn new(test: PerfTest, role: Role, device: &str, settings: &Settings) -> TestInfo {
        TestInfo {
            test,
            role,
            atomic: AtomicOp::default(),
            duplex: settings.duplex && test.kind == Kind::Bw,
            post_list: settings.post_list,
            recv_post_list: 1,
            events: settings.events.then_some(0),
            device: device.to_string(),
            num_qps: 1,
            connection: "RC",
            use_srq: false,
            pcie_relaxed: Some(test != PerfTest::new(Verb::Write, Kind::Lat)),
            wr_api: false,
            tx_depth: settings.tx_depth,
            rx_depth: settings.rx_depth,
            cq_mod: settings.cq_mod,
            mtu: 1024,
            link_layer: "Ethernet",
            gid_index: Some(1),
            inline_size: 0,
            out_reads: 128,
            cm: CmMode::Off,
            tos: None,
        }
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "ON"
    } else {
        "OFF"
    }
}

/// The perftest name of a verb (`testsStr`).
pub fn verb_name(verb: Verb) -> &'static str {
    match verb {
        Verb::Send => "Send",
        Verb::Write => "RDMA_Write",
        Verb::Read => "RDMA_Read",
        Verb::Atomic => "Atomic",
    }
}

/// `ctx_print_test_info`: from the first RESULT_LINE to the one after
/// `Data ex. method`.
pub fn write_test_info(out: &mut impl Write, info: &TestInfo) -> io::Result<()> {
    let t = info.test;
    writeln!(out, "{RESULT_LINE}")?;
    let mut title = format!("                    {} ", verb_name(t.verb));
    if t.verb == Verb::Atomic {
        title += info.atomic.name();
        title += " ";
    }
    match t.kind {
        Kind::Bw => {
            if info.duplex {
                title += "Bidirectional ";
            }
            if info.post_list > 1 {
                title += "Post List ";
            }
            title += "BW ";
        }
        Kind::Lat => title += "Latency ",
    }
    writeln!(out, "{title}Test")?;
    if let Some(eq) = info.events {
        writeln!(out, " Test with events. Using {}_comp{eq}", info.device)?;
    }
    writeln!(
        out,
        " Dual-port       : OFF\t\tDevice         : {}",
        info.device
    )?;
    writeln!(
        out,
        " Number of qps   : {}\t\tTransport type : IB",
        info.num_qps
    )?;
    writeln!(
        out,
        " Connection type : {}\t\tUsing SRQ      : {}",
        info.connection,
        on_off(info.use_srq)
    )?;
    match info.pcie_relaxed {
        Some(on) => writeln!(out, " PCIe relax order: {}", on_off(on))?,
        None => writeln!(out, " PCIe relax order: Unsupported")?,
    }
    writeln!(out, " ibv_wr* API     : {}", on_off(info.wr_api))?;
    let client = info.role == Role::Client;
    if client || info.duplex {
        writeln!(out, " TX depth        : {}", info.tx_depth)?;
    }
    if info.post_list > 1 {
        writeln!(out, " Post List       : {}", info.post_list)?;
    }
    if info.recv_post_list > 1 {
        writeln!(out, " Recv Post List  : {}", info.recv_post_list)?;
    }
    if t.verb == Verb::Send && (!client || info.duplex) {
        writeln!(out, " RX depth        : {}", info.rx_depth)?;
    }
    if t.kind == Kind::Bw {
        writeln!(out, " CQ Moderation   : {}", info.cq_mod)?;
    }
    writeln!(out, " Mtu             : {}[B]", info.mtu)?;
    writeln!(out, " Link type       : {}", info.link_layer)?;
    if let Some(g) = info.gid_index {
        writeln!(out, " GID index       : {g}")?;
    }
    if matches!(t.verb, Verb::Read | Verb::Atomic) {
        writeln!(out, " Outstand reads  : {}", info.out_reads)?;
    } else {
        writeln!(out, " Max inline data : {}[B]", info.inline_size)?;
    }
    writeln!(out, " rdma_cm QPs\t : {}", on_off(info.cm == CmMode::Qps))?;
    let method = if info.cm == CmMode::Off {
        "Ethernet"
    } else {
        "rdma_cm"
    };
    write!(out, " Data ex. method : {method}")?;
    if info.cm == CmMode::Qps {
        if let Some(tos) = info.tos {
            write!(out, " \tTOS    : {tos}")?;
        }
        if !client {
            write!(
                out,
                "\n{RESULT_LINE}\n Waiting for client rdma_cm QP to connect\n \
                 Please run the same command with the IB/RoCE interface IP"
            )?;
        }
    }
    writeln!(out)?;
    writeln!(out, "{RESULT_LINE}")
}

/// `ctx_print_pingpong_data`: one QP's address line, then (with a GID
/// index, i.e. always on RoCE) its GID in decimal. `remote` selects the
/// `remote address:` wording. READ prints `OUT`, READ and WRITE print
/// `RKey`/`VAddr`, SEND and atomic neither.
pub fn write_address(
    out: &mut impl Write,
    remote: bool,
    verb: Verb,
    dest: &PerftestDest,
    show_gid: bool,
) -> io::Result<()> {
    write!(
        out,
        " {} address: LID {} QPN {} PSN {}",
        if remote { "remote" } else { "local" },
        c_alt_hex(dest.lid.into(), 4),
        c_alt_hex(dest.qpn.into(), 6),
        c_alt_hex(dest.psn.into(), 6)
    )?;
    if verb == Verb::Read {
        write!(out, " OUT {}", c_alt_hex(dest.out_reads.into(), 4))?;
    }
    if matches!(verb, Verb::Read | Verb::Write) {
        write!(
            out,
            " RKey {} VAddr {}",
            c_alt_hex(dest.rkey.into(), 8),
            c_alt_hex(dest.vaddr, 16)
        )?;
    }
    writeln!(out)?;
    if show_gid {
        let g: Vec<String> = dest.gid.iter().map(|b| format!("{b:02}")).collect();
        writeln!(out, " GID: {}", g.join(":"))?;
    }
    Ok(())
}

/// The BW table header: RESULT_LINE and the column names.
pub fn write_bw_header(out: &mut impl Write, units: BwUnits) -> io::Result<()> {
    let u = match units {
        BwUnits::MiBps => "MB",
        BwUnits::Gbps => "Gb",
    };
    writeln!(out, "{RESULT_LINE}")?;
    writeln!(
        out,
        " #bytes     #iterations    BW peak[{u}/sec]    BW average[{u}/sec]   MsgRate[Mpps]"
    )
}

/// One BW row (`print_full_bw_report`): `REPORT_FMT`, or `REPORT_FMT_EXT`
/// with 6 decimals when the average is below 0.1 Gb/s.
pub fn write_bw_row(out: &mut impl Write, r: &BwReport, units: BwUnits) -> io::Result<()> {
    if units == BwUnits::Gbps && r.bw_avg < 0.1 {
        writeln!(
            out,
            " {:<7}    {}           {}            {}            {}",
            r.size,
            r.iters,
            c_left(r.bw_peak, 7, 6),
            c_left(r.bw_avg, 7, 6),
            c_left(r.msg_rate, 7, 6)
        )
    } else {
        writeln!(
            out,
            " {:<7}    {:<10}       {}            {}\t\t   {}",
            r.size,
            r.iters,
            c_left(r.bw_peak, 7, 2),
            c_left(r.bw_avg, 7, 2),
            c_left(r.msg_rate, 7, 6)
        )
    }
}

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

/// The latency table header: RESULT_LINE and the column names
/// (`RESULT_FMT_LAT`, or `RESULT_FMT_LAT_DUR` for `-D`).
pub fn write_lat_header(out: &mut impl Write, duration: bool) -> io::Result<()> {
    writeln!(out, "{RESULT_LINE}")?;
    if duration {
        writeln!(
            out,
            " #bytes        #iterations       t_avg[usec]    tps average"
        )
    } else {
        writeln!(
            out,
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    \
             t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
        )
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

/// One latency row (`REPORT_FMT_LAT`).
pub fn write_lat_row(out: &mut impl Write, size: u64, iters: u64, s: &LatStats) -> io::Result<()> {
    writeln!(
        out,
        " {:<7} {}          {}        {}      {}  \t       {}     \t{}\t\t{} \t\t{}",
        size,
        iters,
        c_left(s.t_min, 7, 2),
        c_left(s.t_max, 7, 2),
        c_left(s.t_typical, 7, 2),
        c_left(s.t_avg, 7, 2),
        c_left(s.t_stdev, 7, 2),
        c_left(s.p99, 7, 2),
        c_left(s.p99_9, 7, 2)
    )
}

/// Everything `print_report_lat` writes for one size: with `unsorted`
/// (`-U`) every sample in order and with `histogram` (`-H`) the kept samples
/// sorted, each list as `#, usec` then `N, %g` lines, followed by the table
/// header again; then the row. Returns the statistics (`None`, printing
/// nothing, with fewer than 3 samples).
pub fn write_lat_report(
    out: &mut impl Write,
    size: u64,
    iters: u64,
    deltas_ns: &[u64],
    rtt_factor: u32,
    unsorted: bool,
    histogram: bool,
) -> io::Result<Option<LatStats>> {
    let Some(stats) = lat_stats(deltas_ns, rtt_factor) else {
        return Ok(None);
    };
    let q = 1000.0 * f64::from(rtt_factor);
    let list = |out: &mut dyn Write, samples: &[u64]| -> io::Result<()> {
        writeln!(out, "#, usec")?;
        for (i, &x) in samples.iter().enumerate() {
            writeln!(out, "{}, {}", i + 1, c_g(x as f64 / q))?;
        }
        Ok(())
    };
    if unsorted {
        list(out, deltas_ns)?;
    }
    if histogram {
        let mut d = deltas_ns.to_vec();
        d.sort_unstable();
        list(out, &d[..d.len() - 2])?;
    }
    if unsorted || histogram {
        write_lat_header(out, false)?;
    }
    write_lat_row(out, size, iters, &stats)?;
    Ok(Some(stats))
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

/// One `-D` latency row (`REPORT_FMT_LAT_DUR`).
pub fn write_lat_duration_row(
    out: &mut impl Write,
    size: u64,
    iters: u64,
    t_avg: f64,
    tps: f64,
) -> io::Result<()> {
    writeln!(
        out,
        " {:<7}       {}            {}        {}",
        size,
        iters,
        c_left(t_avg, 7, 2),
        c_left(tps, 7, 2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perftest::exchange::{schedule, Flow, Step};
    use crate::printf::c_fixed;

    fn render(f: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> String {
        let mut v = Vec::new();
        f(&mut v).unwrap();
        String::from_utf8(v).unwrap()
    }

    // ---- Logs of the real tools ---------------------------------------

    // shared/reference/rxe-linux-6.1/ib_send_bw.log, client (10.77.0.2):
    // `ib_send_bw -d rxe0 -x 1 -n 5 -s 4096 10.77.0.3`
    const REF_SEND_BW_CLIENT: &str = concat!(
        "---------------------------------------------------------------------------------------\n",
        "                    Send BW Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " TX depth        : 5\n",
        " CQ Moderation   : 5\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Max inline data : 0[B]\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x0015 PSN 0xcbd3ac\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        " remote address: LID 0000 QPN 0x0015 PSN 0x973ddb\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:03\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
        " 4096       5                7.18               3.45   \t\t   0.000883\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // shared/reference/rxe-linux-6.1/ib_send_bw.log, server (10.77.0.3):
    // `ib_send_bw -d rxe0 -x 1 -n 5 -s 4096`
    const REF_SEND_BW_SERVER: &str = concat!(
        "\n",
        "************************************\n",
        "* Waiting for client to connect... *\n",
        "************************************\n",
        "---------------------------------------------------------------------------------------\n",
        "                    Send BW Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " RX depth        : 6\n",
        " CQ Moderation   : 5\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Max inline data : 0[B]\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x0015 PSN 0x973ddb\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:03\n",
        " remote address: LID 0000 QPN 0x0015 PSN 0xcbd3ac\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
        " 4096       5                0.00               259.09 \t\t   0.066328\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // shared/reference/rxe-linux-6.1/ib_read_bw_R.log, server:
    // `ib_read_bw -d rxe0 -R -n 5 -s 4096` (stderr and stdout merged).
    const REF_READ_BW_R_SERVER: &str = concat!(
        "Device not recognized to implement inline feature. Disabling it\n",
        "---------------------------------------------------------------------------------------\n",
        "\n",
        "************************************\n",
        "* Waiting for client to connect... *\n",
        "************************************\n",
        "---------------------------------------------------------------------------------------\n",
        "                    RDMA_Read BW Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " CQ Moderation   : 5\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Outstand reads  : 128\n",
        " rdma_cm QPs\t : ON\n",
        " Data ex. method : rdma_cm\n",
        "---------------------------------------------------------------------------------------\n",
        " Waiting for client rdma_cm QP to connect\n",
        " Please run the same command with the IB/RoCE interface IP\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // The rest: perftest 4.5-0.17 (Debian 12 package 4.5+0.17-1) run against
    // itself in the interop guest (rxe0, loopback 127.0.0.1 for TCP, GID
    // ::ffff:10.77.0.2), stdout and stderr of each side in one file. Options
    // as noted, always `-d rxe0 -x 1`.

    // ib_write_bw -n 5 -s 4096, server (prints the client's result).
    const WRITE_BW_SERVER: &str = concat!(
        "\n",
        "************************************\n",
        "* Waiting for client to connect... *\n",
        "************************************\n",
        "---------------------------------------------------------------------------------------\n",
        "                    RDMA_Write BW Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " CQ Moderation   : 5\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Max inline data : 0[B]\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x002e PSN 0xe8ef7a RKey 0x00366f VAddr 0x0055afeb940000\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        " remote address: LID 0000 QPN 0x002f PSN 0xe9d901 RKey 0x0037d4 VAddr 0x00561374b66000\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
        " 4096       5                25.61              15.46  \t\t   0.003957\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // ib_atomic_bw -n 5, client.
    const ATOMIC_BW_CLIENT: &str = concat!(
        "Device not recognized to implement inline feature. Disabling it\n",
        "---------------------------------------------------------------------------------------\n",
        "---------------------------------------------------------------------------------------\n",
        "                    Atomic FETCH_AND_ADD BW Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " TX depth        : 5\n",
        " CQ Moderation   : 5\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Outstand reads  : 128\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x0033 PSN 0xc27e2e\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        " remote address: LID 0000 QPN 0x0032 PSN 0xab24e\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
        " 8          5                0.12               0.05   \t\t   0.005962\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // ib_send_bw -n 5 -s 4096 -b, client (the row is client + server).
    const SEND_BW_BI_CLIENT: &str = concat!(
        "---------------------------------------------------------------------------------------\n",
        "                    Send Bidirectional BW Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " TX depth        : 5\n",
        " RX depth        : 6\n",
        " CQ Moderation   : 5\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Max inline data : 0[B]\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x0042 PSN 0xb8aea3\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        " remote address: LID 0000 QPN 0x0043 PSN 0xaefeba\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
        " 4096       5                52.27              31.58  \t\t   0.008084\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // ib_send_bw -n 200 -s 2, server: default TX depth/CQ moderation, RX depth = iterations.
    const SEND_BW_N200_SERVER: &str = concat!(
        "\n",
        "************************************\n",
        "* Waiting for client to connect... *\n",
        "************************************\n",
        "---------------------------------------------------------------------------------------\n",
        "                    Send BW Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " RX depth        : 200\n",
        " CQ Moderation   : 100\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Max inline data : 0[B]\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x0040 PSN 0x2900d8\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        " remote address: LID 0000 QPN 0x0041 PSN 0x366342\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
        " 2          200              0.00               0.05   \t\t   0.025091\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // ib_write_bw -n 5 -s 4096 --report_gbits, client.
    const WRITE_BW_GBITS_CLIENT: &str = concat!(
        "---------------------------------------------------------------------------------------\n",
        "                    RDMA_Write BW Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " TX depth        : 5\n",
        " CQ Moderation   : 5\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Max inline data : 0[B]\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x003c PSN 0x2f6e22 RKey 0x004421 VAddr 0x005580d7e40000\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        " remote address: LID 0000 QPN 0x003d PSN 0xc68ce2 RKey 0x0045dc VAddr 0x005621143c2000\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n",
        " 4096       5                0.13               0.10   \t\t   0.003063\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // ib_write_bw -s 4096 -D 2, server (the client's row).
    const WRITE_BW_D_SERVER: &str = concat!(
        "\n",
        "************************************\n",
        "* Waiting for client to connect... *\n",
        "************************************\n",
        "---------------------------------------------------------------------------------------\n",
        "                    RDMA_Write BW Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " CQ Moderation   : 100\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Max inline data : 0[B]\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x0046 PSN 0xd9f85c RKey 0x004e99 VAddr 0x00560674103000\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        " remote address: LID 0000 QPN 0x0047 PSN 0xdc4343 RKey 0x004faa VAddr 0x00562be3ce2000\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
        " 4096       16500            0.00               32.20  \t\t   0.008244\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // ib_send_lat -n 20, server.
    const SEND_LAT_SERVER: &str = concat!(
        "\n",
        "************************************\n",
        "* Waiting for client to connect... *\n",
        "************************************\n",
        "---------------------------------------------------------------------------------------\n",
        "                    Send Latency Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " RX depth        : 20\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Max inline data : 0[B]\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x0035 PSN 0x4097fb\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        " remote address: LID 0000 QPN 0x0034 PSN 0xb84340\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n",
        " 2       20          3548.65        4469.66      3982.69  \t       3963.87     \t130.08 \t\t4469.66 \t\t4469.66\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // ib_write_lat -n 20, client (PCIe relax order is always OFF in ib_write_lat).
    const WRITE_LAT_CLIENT: &str = concat!(
        "---------------------------------------------------------------------------------------\n",
        "                    RDMA_Write Latency Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: OFF\n",
        " ibv_wr* API     : OFF\n",
        " TX depth        : 1\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Max inline data : 0[B]\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x0037 PSN 0x49d351 RKey 0x003f89 VAddr 0x0055b8180d8000\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        " remote address: LID 0000 QPN 0x0036 PSN 0xd5da8e RKey 0x003ef4 VAddr 0x0055f16ef81000\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n",
        " 2       20          3842.45        6014.79      4006.06  \t       4217.86     \t639.01 \t\t6014.79 \t\t6014.79\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // ib_read_lat -n 20, client.
    const READ_LAT_CLIENT: &str = concat!(
        "Device not recognized to implement inline feature. Disabling it\n",
        "---------------------------------------------------------------------------------------\n",
        "---------------------------------------------------------------------------------------\n",
        "                    RDMA_Read Latency Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " TX depth        : 1\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Outstand reads  : 128\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x0039 PSN 0x5b2e1a OUT 0x80 RKey 0x004147 VAddr 0x0055842d7b2000\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        " remote address: LID 0000 QPN 0x0038 PSN 0xeae7d8 OUT 0x80 RKey 0x004031 VAddr 0x0055b80c8d9000\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n",
        " 2       20          53.60          169.39       56.95    \t       60.88       \t11.78  \t\t169.39  \t\t169.39 \n",
        "---------------------------------------------------------------------------------------\n",
    );

    // ib_read_lat -n 20, server: no result, it only waits for the client.
    const READ_LAT_SERVER: &str = concat!(
        "Device not recognized to implement inline feature. Disabling it\n",
        "---------------------------------------------------------------------------------------\n",
        "\n",
        "************************************\n",
        "* Waiting for client to connect... *\n",
        "************************************\n",
        "---------------------------------------------------------------------------------------\n",
        "                    RDMA_Read Latency Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Outstand reads  : 128\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x0038 PSN 0xeae7d8 OUT 0x80 RKey 0x004031 VAddr 0x0055b80c8d9000\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        " remote address: LID 0000 QPN 0x0039 PSN 0x5b2e1a OUT 0x80 RKey 0x004147 VAddr 0x0055842d7b2000\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // ib_send_lat -D 2, client (RX depth 512 on its server: no clamping with -D).
    const SEND_LAT_D_CLIENT: &str = concat!(
        "---------------------------------------------------------------------------------------\n",
        "                    Send Latency Test\n",
        " Dual-port       : OFF\t\tDevice         : rxe0\n",
        " Number of qps   : 1\t\tTransport type : IB\n",
        " Connection type : RC\t\tUsing SRQ      : OFF\n",
        " PCIe relax order: ON\n",
        " ibv_wr* API     : OFF\n",
        " TX depth        : 1\n",
        " Mtu             : 1024[B]\n",
        " Link type       : Ethernet\n",
        " GID index       : 1\n",
        " Max inline data : 0[B]\n",
        " rdma_cm QPs\t : OFF\n",
        " Data ex. method : Ethernet\n",
        "---------------------------------------------------------------------------------------\n",
        " local address: LID 0000 QPN 0x004b PSN 0x3f93da\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        " remote address: LID 0000 QPN 0x004a PSN 0xc68736\n",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes        #iterations       t_avg[usec]    tps average\n",
        " 2             237            4224.50        118.36 \n",
        "---------------------------------------------------------------------------------------\n",
    );

    // ib_send_lat -n 20 -U, client, from the result header on: the 19
    // unsorted samples (µs, %g), the header again and the row.
    const SEND_LAT_U_CLIENT_TAIL: &str = concat!(
        "---------------------------------------------------------------------------------------\n",
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n",
        "#, usec\n",
        "1, 3667.47\n",
        "2, 3747.96\n",
        "3, 4051.74\n",
        "4, 3957.55\n",
        "5, 3977.35\n",
        "6, 4025.21\n",
        "7, 6033.95\n",
        "8, 5398.23\n",
        "9, 4988.06\n",
        "10, 3701.62\n",
        "11, 6012.28\n",
        "12, 3917.47\n",
        "13, 3964.44\n",
        "14, 5273.17\n",
        "15, 6821.23\n",
        "16, 3909.39\n",
        "17, 3984.68\n",
        "18, 3997.91\n",
        "19, 3970.29\n",
        "---------------------------------------------------------------------------------------\n",
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n",
        " 2       20          3667.47        6033.95      3977.35  \t       4267.34     \t671.20 \t\t6033.95 \t\t6033.95\n",
        "---------------------------------------------------------------------------------------\n",
    );

    // ---- Rebuilding a transcript from the schedule ---------------------

    /// A result row as the log shows it.
    enum Row {
        Bw(BwReport),
        Lat(u64, u64, LatStats),
        LatDur(u64, u64, f64, f64),
    }

    fn hex(s: &str) -> u64 {
        u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
    }

    /// The two QPs' keys and the result rows printed in `log`.
    fn parse_log(log: &str) -> (PerftestDest, PerftestDest, Vec<Row>) {
        let mut dests = Vec::new();
        let mut rows = Vec::new();
        let mut lat_dur = false;
        for line in log.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            if line.contains(" address: LID ") {
                let get = |k: &str| w.iter().position(|x| *x == k).map(|i| hex(w[i + 1]));
                dests.push(PerftestDest {
                    lid: get("LID").unwrap() as u16,
                    qpn: get("QPN").unwrap() as u32,
                    psn: get("PSN").unwrap() as u32,
                    out_reads: get("OUT").unwrap_or(0) as u16,
                    rkey: get("RKey").unwrap_or(0) as u32,
                    vaddr: get("VAddr").unwrap_or(0),
                    ..Default::default()
                });
            } else if let Some(g) = line.strip_prefix(" GID: ") {
                let d = dests.last_mut().unwrap();
                for (i, b) in g.split(':').enumerate() {
                    d.gid[i] = b.parse().unwrap();
                }
            } else if line.contains("tps average") {
                lat_dur = true;
            } else if line.starts_with(' ')
                && w.len() >= 4
                && w.iter().all(|x| x.parse::<f64>().is_ok())
            {
                let n: Vec<f64> = w.iter().map(|x| x.parse().unwrap()).collect();
                let (size, iters) = (n[0] as u64, n[1] as u64);
                rows.push(match n.len() {
                    5 => Row::Bw(BwReport {
                        size,
                        iters,
                        bw_peak: n[2],
                        bw_avg: n[3],
                        msg_rate: n[4],
                    }),
                    4 if lat_dur => Row::LatDur(size, iters, n[2], n[3]),
                    9 => Row::Lat(
                        size,
                        iters,
                        LatStats {
                            t_min: n[2],
                            t_max: n[3],
                            t_typical: n[4],
                            t_avg: n[5],
                            t_stdev: n[6],
                            p99: n[7],
                            p99_9: n[8],
                        },
                    ),
                    _ => panic!("row {line:?}"),
                });
            }
        }
        assert_eq!(dests.len(), 2, "two address lines");
        (dests[0], dests[1], rows)
    }

    /// Prints what perftest would for `info` by walking the schedule,
    /// with the keys and rows taken from `log`; compares with `log`.
    fn check_transcript(log: &str, info: &TestInfo, flow: Flow, units: BwUnits) {
        let (local, remote, rows) = parse_log(log);
        let mut rows = rows.into_iter();
        let out = render(|o| {
            if matches!(info.test.verb, Verb::Read | Verb::Atomic) {
                writeln!(o, "{INLINE_DISABLED_MESSAGE}")?;
                write_inline_notice(o)?;
            }
            if info.role == Role::Server {
                write_waiting_banner(o)?;
            }
            for step in schedule(info.test, info.role, flow) {
                match step {
                    Step::PrintTestInfo => write_test_info(o, info)?,
                    Step::PrintLocalAddress => {
                        write_address(o, false, info.test.verb, &local, true)?
                    }
                    Step::PrintRemoteAddress => {
                        write_address(o, true, info.test.verb, &remote, true)?
                    }
                    Step::PrintResultHeader => match info.test.kind {
                        Kind::Bw => write_bw_header(o, units)?,
                        Kind::Lat => write_lat_header(o, flow.duration)?,
                    },
                    Step::PrintReport | Step::PrintRemoteReport | Step::PrintSumReport => {
                        match rows.next().expect("a row for each report step") {
                            Row::Bw(r) => write_bw_row(o, &r, units)?,
                            Row::Lat(size, iters, s) => write_lat_row(o, size, iters, &s)?,
                            Row::LatDur(size, iters, t, tps) => {
                                write_lat_duration_row(o, size, iters, t, tps)?
                            }
                        }
                    }
                    Step::PrintResultLine => writeln!(o, "{RESULT_LINE}")?,
                    _ => {}
                }
            }
            Ok(())
        });
        assert!(rows.next().is_none(), "unused rows");
        for (i, (got, want)) in out.lines().zip(log.lines()).enumerate() {
            assert_eq!(got, want, "line {}", i + 1);
        }
        assert_eq!(out, log);
    }

    fn info(test: PerfTest, role: Role, s: &Settings) -> TestInfo {
        TestInfo::new(test, role, "rxe0", &s.resolve(test, role))
    }

    fn with(test: PerfTest, f: impl FnOnce(&mut Settings)) -> Settings {
        let mut s = Settings::defaults(test);
        f(&mut s);
        s
    }

    const SEND_BW: PerfTest = PerfTest::new(Verb::Send, Kind::Bw);
    const WRITE_BW: PerfTest = PerfTest::new(Verb::Write, Kind::Bw);
    const READ_BW: PerfTest = PerfTest::new(Verb::Read, Kind::Bw);
    const ATOMIC_BW: PerfTest = PerfTest::new(Verb::Atomic, Kind::Bw);
    const SEND_LAT: PerfTest = PerfTest::new(Verb::Send, Kind::Lat);
    const WRITE_LAT: PerfTest = PerfTest::new(Verb::Write, Kind::Lat);
    const READ_LAT: PerfTest = PerfTest::new(Verb::Read, Kind::Lat);

    #[test]
    fn bw_transcripts() {
        let n5 = |t| {
            with(t, |s| {
                s.iters = 5;
                s.size = 4096;
            })
        };
        let plain = Flow::default();
        check_transcript(
            REF_SEND_BW_CLIENT,
            &info(SEND_BW, Role::Client, &n5(SEND_BW)),
            plain,
            BwUnits::MiBps,
        );
        check_transcript(
            REF_SEND_BW_SERVER,
            &info(SEND_BW, Role::Server, &n5(SEND_BW)),
            plain,
            BwUnits::MiBps,
        );
        check_transcript(
            WRITE_BW_SERVER,
            &info(WRITE_BW, Role::Server, &n5(WRITE_BW)),
            plain,
            BwUnits::MiBps,
        );
        let atomic = with(ATOMIC_BW, |s| s.iters = 5);
        check_transcript(
            ATOMIC_BW_CLIENT,
            &info(ATOMIC_BW, Role::Client, &atomic),
            plain,
            BwUnits::MiBps,
        );
        let bi = with(SEND_BW, |s| {
            s.iters = 5;
            s.size = 4096;
            s.duplex = true;
        });
        let duplex = Flow {
            duplex: true,
            ..plain
        };
        check_transcript(
            SEND_BW_BI_CLIENT,
            &info(SEND_BW, Role::Client, &bi),
            duplex,
            BwUnits::MiBps,
        );
        let n200 = with(SEND_BW, |s| {
            s.iters = 200;
            s.size = 2;
        });
        check_transcript(
            SEND_BW_N200_SERVER,
            &info(SEND_BW, Role::Server, &n200),
            plain,
            BwUnits::MiBps,
        );
        check_transcript(
            WRITE_BW_GBITS_CLIENT,
            &info(WRITE_BW, Role::Client, &n5(WRITE_BW)),
            plain,
            BwUnits::Gbps,
        );
        let dur = with(WRITE_BW, |s| {
            s.size = 4096;
            s.duration = Some(2);
        });
        let flow_d = Flow {
            duration: true,
            ..plain
        };
        check_transcript(
            WRITE_BW_D_SERVER,
            &info(WRITE_BW, Role::Server, &dur),
            flow_d,
            BwUnits::MiBps,
        );
    }

    #[test]
    fn rdma_cm_header() {
        let s = with(READ_BW, |s| {
            s.iters = 5;
            s.size = 4096;
        });
        let mut i = info(READ_BW, Role::Server, &s);
        i.cm = CmMode::Qps;
        let out = render(|o| {
            writeln!(o, "{INLINE_DISABLED_MESSAGE}")?;
            write_inline_notice(o)?;
            write_waiting_banner(o)?;
            write_test_info(o, &i)
        });
        assert_eq!(out, REF_READ_BW_R_SERVER);
    }

    #[test]
    fn lat_transcripts() {
        let n20 = |t| with(t, |s| s.iters = 20);
        let plain = Flow::default();
        check_transcript(
            SEND_LAT_SERVER,
            &info(SEND_LAT, Role::Server, &n20(SEND_LAT)),
            plain,
            BwUnits::MiBps,
        );
        check_transcript(
            WRITE_LAT_CLIENT,
            &info(WRITE_LAT, Role::Client, &n20(WRITE_LAT)),
            plain,
            BwUnits::MiBps,
        );
        check_transcript(
            READ_LAT_CLIENT,
            &info(READ_LAT, Role::Client, &n20(READ_LAT)),
            plain,
            BwUnits::MiBps,
        );
        check_transcript(
            READ_LAT_SERVER,
            &info(READ_LAT, Role::Server, &n20(READ_LAT)),
            plain,
            BwUnits::MiBps,
        );
        let d = with(SEND_LAT, |s| s.duration = Some(2));
        let flow_d = Flow {
            duration: true,
            ..plain
        };
        check_transcript(
            SEND_LAT_D_CLIENT,
            &info(SEND_LAT, Role::Client, &d),
            flow_d,
            BwUnits::MiBps,
        );
        // Its server showed "RX depth : 512".
        assert_eq!(d.resolve(SEND_LAT, Role::Server).rx_depth, 512);
    }

    #[test]
    fn other_headers() {
        // Title lines seen with -A CMP_AND_SWAP, -l, -e (from the source).
        let s = with(ATOMIC_BW, |s| s.iters = 5);
        let mut i = info(ATOMIC_BW, Role::Client, &s);
        i.atomic = AtomicOp::CmpAndSwap;
        let out = render(|o| write_test_info(o, &i));
        assert_eq!(
            out.lines().nth(1).unwrap(),
            "                    Atomic CMP_AND_SWAP BW Test"
        );
        let mut i = info(SEND_BW, Role::Client, &Settings::defaults(SEND_BW));
        i.post_list = 4;
        i.events = Some(0);
        i.pcie_relaxed = None;
        i.cm = CmMode::Qps;
        i.tos = Some(3);
        let out = render(|o| write_test_info(o, &i));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[1], "                    Send Post List BW Test");
        assert_eq!(lines[2], " Test with events. Using rxe0_comp0");
        assert!(lines.contains(&" PCIe relax order: Unsupported"));
        assert!(lines.contains(&" Post List       : 4"));
        assert!(lines.contains(&" Data ex. method : rdma_cm \tTOS    : 3"));
    }

    // ---- Settings -------------------------------------------------------

    #[test]
    fn settings_like_perftest() {
        let r = |t: PerfTest, role, f: fn(&mut Settings)| with(t, f).resolve(t, role);
        // Defaults: 65536-byte messages disable CQ moderation.
        let s = r(WRITE_BW, Role::Client, |_| {});
        assert_eq!(
            (s.size, s.iters, s.tx_depth, s.cq_mod),
            (65536, 5000, 128, 1)
        );
        let s = r(SEND_BW, Role::Server, |_| {});
        assert_eq!((s.iters, s.rx_depth, s.no_peak), (1000, 512, true));
        let s = r(SEND_LAT, Role::Client, |_| {});
        assert_eq!((s.size, s.tx_depth, s.rx_depth), (2, 1, 512));
        let s = r(ATOMIC_BW, Role::Client, |_| {});
        assert_eq!((s.size, s.cq_mod), (8, 100));
        // -n 5: depths clamped, odd SEND RX depth rounded up, CQ moderation <= TX depth.
        let s = r(SEND_BW, Role::Server, |s| {
            s.iters = 5;
            s.size = 4096;
        });
        assert_eq!((s.tx_depth, s.rx_depth, s.cq_mod), (5, 6, 5));
        // -Q keeps CQ moderation for big messages; -D: no peak, no clamping.
        let s = r(WRITE_BW, Role::Client, |s| {
            s.cq_mod_requested = true;
            s.duration = Some(8);
        });
        assert_eq!(
            (s.cq_mod, s.iters, s.no_peak, s.tx_depth),
            (100, 0, true, 128)
        );
        assert_eq!(with(WRITE_BW, |s| s.duration = Some(8)).margin_secs(), 2);
        let s = r(WRITE_BW, Role::Client, |s| s.iters = 30000);
        assert!(s.no_peak);
        let s = r(SEND_BW, Role::Client, |s| {
            s.size = 64;
            s.post_list = 8;
        });
        assert_eq!(s.cq_mod, 8);
    }

    // ---- Statistics -----------------------------------------------------

    #[test]
    fn bw_numbers_of_reference_log() {
        // ib_send_bw.log, server: no peak; 5 x 4096 B received in 75383 ns.
        let p = BwParams {
            size: 4096,
            iters: 5,
            num_qps: 1,
            post_list: 1,
            cq_mod: 5,
            no_peak: true,
            duration: false,
            units: BwUnits::MiBps,
        };
        let r = bw_report(&p, &[1_000], &[76_383]);
        assert_eq!(
            render(|o| write_bw_row(o, &r, BwUnits::MiBps)),
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
        let r = bw_report(&p, &posted, &completed);
        assert_eq!(
            render(|o| write_bw_row(o, &r, BwUnits::MiBps)),
            " 4096       5                7.18               3.45   \t\t   0.000883\n"
        );
        assert_eq!(r.iters, 5);
    }

    #[test]
    fn bw_peak_windows() {
        // 10 messages of 1 MiB, one completion every 2 (cq_mod 2) plus the
        // odd last one: the best window is messages 2..=3, 2 in 1 ms.
        let p = BwParams {
            size: 1 << 20,
            iters: 9,
            num_qps: 1,
            post_list: 1,
            cq_mod: 2,
            no_peak: false,
            duration: false,
            units: BwUnits::MiBps,
        };
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
            size: 4096,
            iters: 16500,
            num_qps: 1,
            post_list: 1,
            cq_mod: 100,
            no_peak: true,
            duration: true,
            units: BwUnits::MiBps,
        };
        let r = bw_report(&p, &[0], &[2_001_455_000]);
        assert_eq!(
            render(|o| write_bw_row(o, &r, BwUnits::MiBps)),
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

    /// The -U samples of SEND_LAT_U_CLIENT_TAIL, in ns of round trip.
    fn send_lat_u_samples() -> Vec<u64> {
        SEND_LAT_U_CLIENT_TAIL
            .lines()
            .filter_map(|l| l.split_once(", "))
            .filter(|(i, _)| i.parse::<u32>().is_ok())
            .map(|(_, us)| (us.parse::<f64>().unwrap() * 2000.0).round() as u64)
            .collect()
    }

    #[test]
    fn lat_stats_match_real_samples() {
        // ib_send_lat -n 20 -U printed its 19 samples and then the row; our
        // statistics over those samples give the same row, including the
        // truncated-integer standard deviation (671.20; 671.23 without the quirk).
        let d = send_lat_u_samples();
        assert_eq!(d.len(), 19);
        let out = render(|o| {
            write_lat_header(o, false)?;
            write_lat_report(o, 2, 20, &d, 2, true, false).map(|_| ())?;
            writeln!(o, "{RESULT_LINE}")
        });
        assert_eq!(out, SEND_LAT_U_CLIENT_TAIL);
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
    fn lat_histogram() {
        let d = send_lat_u_samples();
        let out = render(|o| write_lat_report(o, 2, 20, &d, 2, false, true).map(|_| ()));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "#, usec");
        assert_eq!(lines[1], "1, 3667.47");
        assert_eq!(lines[17], "17, 6012.28"); // 17 kept of 19, sorted
        assert_eq!(lines[18], RESULT_LINE);
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

    #[test]
    fn address_quirks() {
        let d = PerftestDest {
            lid: 0,
            out_reads: 128,
            qpn: 0x44,
            psn: 0x298e0,
            rkey: 0,
            vaddr: 0,
            gid: [0; 16],
            srqn: 0,
        };
        assert_eq!(
            render(|o| write_address(o, false, Verb::Read, &d, false)),
            " local address: LID 0000 QPN 0x0044 PSN 0x298e0 OUT 0x80 RKey 00000000 VAddr 0000000000000000\n"
        );
        assert_eq!(
            render(|o| write_address(o, true, Verb::Atomic, &d, true)),
            " remote address: LID 0000 QPN 0x0044 PSN 0x298e0\n GID: 00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00\n"
        );
    }
}
