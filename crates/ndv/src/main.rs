//! `ndv`: the ndverbs command-line tools.

mod decode;
mod demo;
#[allow(dead_code)]
mod oob;
mod perf;
mod ping;
mod pingpong;
#[allow(dead_code)]
mod report;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ndv",
    version,
    about = "ndverbs: a userspace RoCEv2 RDMA stack"
)]
struct Cli {
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
    Perf(perf::Args),
    /// Print every RoCEv2 packet (UDP port 4791) of a pcap or pcapng file.
    Decode {
        /// One JSON object per packet instead of text.
        #[arg(long)]
        json: bool,
        /// The capture file.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode { json, file } => decode::run(&file, json),
        Command::Ping(a) => ping::run(&a),
        Command::Demo(a) => demo::run(&a),
        Command::Pingpong(a) => pingpong::run(&a),
        Command::Perf(a) => perf::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ndv: {e}");
            ExitCode::FAILURE
        }
    }
}
