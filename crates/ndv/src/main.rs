//! `ndv`: the ndverbs command-line tools.
//!
//! One module per tool, each mirroring the RDMA tool users already know
//! (perftest, `ibv_rc_pingpong`, rping, `ibv_devinfo`, `rdma statistic`,
//! `rdma resource`)
//! down to its stdout, plus the modules they share: [`net`] (addresses and
//! the TCP exchange connection), [`qp`] and [`cm`] (RC QP set-up), [`oob`]
//! (the C tools' text messages), [`printf`] (C number formatting), [`plot`]
//! and [`device`] (how every device a tool opens is configured), and
//! [`devfiles`] (the device files `ndv run --ucx` makes).
//!
//! Errors carry what was being done (`anyhow` contexts); `main` prints them
//! as `ndv TOOL: what: why` on stderr and exits with status 1, or with the
//! status the mirrored tool uses where it has its own (see [`Exit`]).

mod bench;
mod cm;
mod decode;
mod demo;
mod devfiles;
mod device;
mod devinfo;
mod net;
mod oob;
mod perftest;
mod ping;
mod pingpong;
mod plot;
mod printf;
mod qp;
mod res;
mod run;
mod stat;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ndv",
    version,
    about = "ndverbs: a userspace RoCEv2 RDMA stack",
    after_help = "Logging: RUST_LOG filters the libraries' tracing output on stderr \
                  (e.g. RUST_LOG=ndverbs_engine=debug); warnings only when unset."
)]
struct Cli {
    /// Write every RoCEv2 packet the command's devices send and receive to
    /// this pcap file (raw IP, as on the wire; Wireshark/tshark decode it as
    /// RoCE). Same as setting NDV_PCAP=FILE.
    #[arg(long, global = true, value_name = "FILE")]
    pcap: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// ibv_rc_pingpong-compatible SEND ping-pong (TCP address exchange, no CM).
    Pingpong(pingpong::Args),
    /// The whole NetworkDirect lifecycle on loopback, with a short report.
    Demo(demo::Args),
    /// rping-compatible ping over RDMA (rdma_cm connection, READ/WRITE/SEND).
    Ping(ping::Args),
    /// perftest-compatible bandwidth and latency tests (ib_send_bw … ib_atomic_lat).
    Perf(perftest::Args),
    /// Benchmarks against baselines (iperf3, UDP ping-pong, TCP connect), as ratios.
    Bench(bench::Args),
    /// ibv_devinfo for ndverbs devices (one per local IP address; binds nothing).
    Devinfo(devinfo::Args),
    /// Counters of running ndverbs processes (rxe's names), like `rdma statistic`;
    /// also as OpenMetrics text (--openmetrics) or per-second rates (-w).
    Stat(stat::Args),
    /// Live QPs, CQs, MRs and CM endpoints of running ndverbs processes, like
    /// `rdma resource show`.
    Res(res::Args),
    /// Run an unmodified RDMA program (libibverbs) over ndverbs: the C ABI
    /// libraries first on its library path.
    Run(run::Args),
    /// Print every RoCEv2 packet (UDP port 4791) of a pcap or pcapng file.
    Decode {
        /// One JSON object per packet instead of text.
        #[arg(long)]
        json: bool,
        /// The capture file.
        file: PathBuf,
    },
}

impl Command {
    /// The subcommand's name, for error messages.
    fn name(&self) -> &'static str {
        match self {
            Command::Pingpong(_) => "pingpong",
            Command::Demo(_) => "demo",
            Command::Ping(_) => "ping",
            Command::Perf(_) => "perf",
            Command::Bench(_) => "bench",
            Command::Devinfo(_) => "devinfo",
            Command::Stat(_) => "stat",
            Command::Res(_) => "res",
            Command::Decode { .. } => "decode",
            Command::Run(_) => "run",
        }
    }

    fn run(&self, pcap: Option<&std::path::Path>) -> anyhow::Result<()> {
        match self {
            Command::Run(a) => run::run(a, pcap),
            Command::Decode { json, file } => decode::run(file, *json),
            Command::Ping(a) => ping::run(a),
            Command::Devinfo(a) => devinfo::run(a),
            Command::Stat(a) => stat::run(a),
            Command::Res(a) => res::run(a),
            Command::Demo(a) => demo::run(a),
            Command::Pingpong(a) => pingpong::run(a),
            Command::Perf(a) => perftest::run(a),
            Command::Bench(a) => bench::run(a),
        }
    }
}

/// An error the tool already reported on stderr in the mirrored tool's own
/// words: `main` prints nothing more and exits with this status.
#[derive(Debug, thiserror::Error)]
#[error("exit status {0}")]
pub struct Exit(pub u8);

/// Logs of the ndverbs libraries (and of ndv) on stderr, filtered by
/// `RUST_LOG` (`RUST_LOG=ndverbs_engine=debug`, `RUST_LOG=trace`, …);
/// warnings only when it is unset.
fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::filter::{EnvFilter, LevelFilter};
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::WARN.into())
        .from_env_lossy();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// `outer: inner: …` for an error and its sources. A source whose text the
/// message before it already ends with is left out: some library errors
/// repeat their source in their own message.
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if out.ends_with(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result =
        device::configure(cli.pcap.as_deref()).and_then(|()| cli.command.run(cli.pcap.as_deref()));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<Exit>() {
            Some(Exit(code)) => ExitCode::from(*code),
            None => {
                eprintln!("ndv {}: {}", cli.command.name(), error_chain(&e));
                ExitCode::FAILURE
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn chain_leaves_out_repeated_sources() {
        let io = std::io::Error::other("NDV_PCAP=/x: No such file");
        #[derive(Debug, thiserror::Error)]
        #[error("I/O: {0}")]
        struct Repeats(#[source] std::io::Error);
        let e = Err::<(), _>(Repeats(io))
            .context("cannot open the RDMA device on 127.0.0.1")
            .unwrap_err();
        assert_eq!(
            error_chain(&e),
            "cannot open the RDMA device on 127.0.0.1: I/O: NDV_PCAP=/x: No such file"
        );
    }
}
