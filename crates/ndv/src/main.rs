//! `ndv`: the ndverbs command-line tools.

mod decode;
#[allow(dead_code)]
mod oob;
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
    /// rping-compatible ping over RDMA (rdma_cm connection, READ/WRITE/SEND).
    Ping(ping::Args),
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
        Command::Pingpong(a) => pingpong::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ndv: {e}");
            ExitCode::FAILURE
        }
    }
}
