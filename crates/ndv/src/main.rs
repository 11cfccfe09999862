//! `ndv`: the ndverbs command-line tools.

mod bench;
mod decode;
mod demo;
mod devinfo;
#[allow(dead_code)]
mod oob;
#[allow(dead_code)]
mod perftest;
mod ping;
#[allow(dead_code)]
mod pingpong;
mod plot;
#[allow(dead_code)]
mod printf;
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
    /// Counters of running ndverbs processes (rxe's names), like `rdma statistic`.
    Stat(stat::Args),
    /// Print every RoCEv2 packet (UDP port 4791) of a pcap or pcapng file.
    Decode {
        /// One JSON object per packet instead of text.
        #[arg(long)]
        json: bool,
        /// The capture file.
        file: PathBuf,
    },
}

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

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    if std::env::var_os(ndverbs_verbs::STAT_ENV).is_none() {
        // Every adapter a tool opens publishes its counters for `ndv stat`.
        std::env::set_var(ndverbs_verbs::STAT_ENV, "1");
    }
    if let Some(p) = &cli.pcap {
        // Read by every adapter the command opens (ndverbs_engine::capture),
        // wherever the tool opens it. Set before any thread starts.
        std::env::set_var(ndverbs_verbs::PCAP_ENV, p);
    }
    let result = match cli.command {
        Command::Decode { json, file } => decode::run(&file, json),
        Command::Ping(a) => ping::run(&a),
        Command::Devinfo(a) => devinfo::run(&a),
        Command::Stat(a) => stat::run(&a),
        Command::Demo(a) => demo::run(&a),
        Command::Pingpong(a) => pingpong::run(&a),
        Command::Perf(a) => perftest::run(&a),
        Command::Bench(a) => bench::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ndv: {e}");
            ExitCode::FAILURE
        }
    }
}
