//! perftest 4.5's output, byte for byte: the header block, address lines
//! and result tables.
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
//! [`super::schedule`]'s business; the numbers in the rows are
//! [`super::stats`]'.
//!//!
//! Hex fields use `%#0Nx`, which drops the `0x` of a zero: LID 0 prints as
//! `0000`, QPN 0x15 as `0x0015`, a 5-digit PSN as `0x298e0`. Newer perftest
//! releases print `MiB/sec` and change the row spacing; this module is 4.5's.

use super::exchange::BwReport;
use super::keys::PerftestDest;
use super::program::{Kind, PerfTest, Role, Verb};
use super::settings::{AtomicOp, BwUnits, CmMode, Settings};
use super::stats::{lat_stats, LatStats};
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
    let ext = units == BwUnits::Gbps && r.bw_avg < 0.1;
    let bw = |v| c_left(v, 7, if ext { 6 } else { 2 });
    let (size, iters) = (r.size, r.iters);
    let (peak, avg, rate) = (bw(r.bw_peak), bw(r.bw_avg), c_left(r.msg_rate, 7, 6));
    if ext {
        writeln!(
            out,
            " {size:<7}    {iters}           {peak}            {avg}            {rate}"
        )
    } else {
        writeln!(
            out,
            " {size:<7}    {iters:<10}       {peak}            {avg}\t\t   {rate}"
        )
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
    use super::super::testing::{info, render, with, ATOMIC_BW, SEND_BW};
    use super::*;

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
