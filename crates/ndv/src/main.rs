//! `ndv`: the ndverbs command-line tools.

mod decode;

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
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ndv: {e}");
            ExitCode::FAILURE
        }
    }
}
