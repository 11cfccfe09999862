//! `ndv perf TEST [SERVER]`: perftest 4.5 (`ib_send_bw` … `ib_atomic_lat`),
//! wire-compatible in both roles and printing what perftest prints.
//!
//! # How perftest measures
//!
//! Both programs get the same options; the one given a host name is the
//! client. After the out-of-band exchange (a TCP connection, or rdma_cm with
//! `-R`, see [`control`]) every test walks the same script on both sides,
//! [`schedule`] (walked by [`session`]): exchanges that double as barriers,
//! connecting the QPs, printing ([`report`]), and the measurement itself.
//!
//! * **BW** ([`bw`]): the client keeps up to `-t` (TX depth) work requests
//!   posted per QP, asks for a completion on every `-Q`-th (CQ moderation)
//!   and on the last, and timestamps every post (`tposted[i]`) and every
//!   polled completion (`tcompleted[j]` for the last message it covers).
//!   Average BW is `size × iterations / (tcompleted[last] − tposted[0])`,
//!   peak BW the best per-message time over every window that ends on a
//!   completion ([`stats::bw_report`]). The `ib_send_bw`
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
//! measured run a [`pump::Pump`] thread drives it.
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
//!   line plot against message size ([`plot`]): average bandwidth in
//!   the report's units for BW tests (the sum with `-b`), `t_typical` for
//!   latency tests (`t_avg` with `-D`). With `-a` that is one point per
//!   size; without it, the one size measured. A side that prints no result
//!   (the passive server of `read_lat`/`atomic_lat`) writes no file and says
//!   so on stderr.
//! * During a `-D` run the measuring side prints one progress line a second
//!   to stderr ([`ticker`]) when stderr is a terminal or `--progress` is
//!   given: elapsed time, messages (or iterations) so far, and the rate of
//!   the last second.
//!
//! # Where things are
//!
//! [`args`] (the command line and the [`args::Plan`]), [`program`] and
//! [`settings`] (perftest's programs and defaults), [`keys`], [`exchange`]
//! and [`control`] (the out-of-band exchange over TCP or rdma_cm), [`schedule`]
//! and [`session`] (what happens in which order), [`measure`], [`bw`],
//! [`lat`] and [`pump`] (the measured runs), [`stats`] and [`report`] (the
//! numbers and how perftest prints them).

mod args;
mod bw;
mod control;
mod exchange;
mod keys;
mod lat;
mod measure;
mod plot;
mod program;
mod pump;
mod report;
mod schedule;
mod session;
mod settings;
mod stats;
mod ticker;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod transcripts;

pub use args::Args;

use anyhow::{Context, Result};
use args::Plan;
use control::Opened;
use measure::Resources;
use ndverbs_verbs::Progress;
use program::{Kind, Role, Verb};
use pump::Pump;
use session::Session;
use std::io::{self, Write};
use std::time::Duration;

/// Runs `ndv perf`.
pub fn run(a: &Args) -> Result<()> {
    if a.version {
        println!("Version: {}", exchange::VERSION);
        return Ok(());
    }
    // -F: nothing to warn about (no CPU frequency scaling check).
    let _ = a.cpu_freq;
    let plan = Plan::new(a)?;
    let mut out = io::stdout();
    if matches!(plan.test.verb, Verb::Read | Verb::Atomic) && a.inline_size == 0 {
        eprintln!("{}", report::INLINE_DISABLED_MESSAGE);
        report::write_inline_notice(&mut out).context("writing stdout")?;
    }
    if plan.role == Role::Server {
        report::write_waiting_banner(&mut out).context("writing stdout")?;
        let _ = out.flush();
    }
    let timeout = Duration::from_secs(60 + u64::from(a.duration.unwrap_or(0)));
    let progress = if plan.test.kind == Kind::Bw && a.engine_progress == "thread" {
        Progress::Thread
    } else {
        Progress::Manual
    };
    let opened = Opened::new(a, &plan, progress, timeout)?;
    let dev = opened.dev.clone();
    let pump = Pump::start(&dev);
    let res = Resources::new(&dev, &plan, a.inline_size)?;
    let points = Session::new(a, &plan, opened, &dev, &res, &pump, timeout).run();
    // Let the engine answer the peer's last packets before the QPs go.
    std::thread::sleep(Duration::from_millis(50));
    drop(pump);
    let points = points?;
    match &a.plot {
        Some(path) => plot::write_plot(path, a, &plan, plan.path_mtu(dev.active_mtu()).0, &points),
        None => Ok(()),
    }
}
