//! `--plot FILE.svg` (not in perftest): the result rows this side printed,
//! against message size.

use super::args::{Args, Plan};
use super::program::{Kind, Role};
use super::settings::BwUnits;
use crate::plot::{Plot, Series};
use anyhow::{Context, Result};
use ndverbs_verbs::PathMtu;
use std::path::Path;

/// `--plot`: the result rows this side printed, as an SVG file.
pub fn write_plot(
    path: &Path,
    a: &Args,
    plan: &Plan,
    mtu: PathMtu,
    points: &[(u64, f64)],
) -> Result<()> {
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
        mtu.bytes(),
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
    let plot = Plot {
        title: &title,
        subtitle: &subtitle,
        y_label,
        series: vec![Series {
            name: plan.test.program(),
            color: "#d62728",
            points: points.to_vec(),
        }],
    };
    std::fs::write(path, plot.svg()).with_context(|| format!("--plot: writing {}", path.display()))
}
