//! `ndv stat [PID]`: the counters of running ndverbs processes.
//!
//! Every `ndv` command publishes each device's counters once a second
//! (unless `NDV_STAT` is set to something other than 1); applications can
//! too (`DeviceConfig::publish_stats` or `Device::publish_stats`). This reads the snapshots and
//! prints one line per adapter in the style of `rdma statistic show link`:
//! rxe's counters in rxe's order, then drops by cause.

use anyhow::{bail, Result};
use serde_json::Value;
use std::path::PathBuf;

/// `ndv stat` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this process.
    pub pid: Option<u32>,
    /// The snapshots as published (one JSON object per adapter and line).
    #[arg(long)]
    pub json: bool,
    /// Only rxe's counters (no drops by cause).
    #[arg(long)]
    pub rxe: bool,
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Every published snapshot of live processes, by pid then address.
pub fn snapshots(pid: Option<u32>) -> Vec<(PathBuf, Value)> {
    let dir = ndverbs_verbs::stat_dir();
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Some(v) = std::fs::read_to_string(&p)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        else {
            continue;
        };
        let Some(owner) = v["pid"].as_u64().map(|p| p as u32) else {
            continue;
        };
        if !alive(owner) {
            // Left behind by a process that ended without dropping its adapters.
            let _ = std::fs::remove_file(&p);
            continue;
        }
        if pid.is_some_and(|want| want != owner) {
            continue;
        }
        out.push((p, v));
    }
    out.sort_by(|a, b| {
        (a.1["pid"].as_u64(), a.1["addr"].as_str())
            .cmp(&(b.1["pid"].as_u64(), b.1["addr"].as_str()))
    });
    out
}

/// Runs `ndv stat`.
pub fn run(a: &Args) -> Result<()> {
    let snaps = snapshots(a.pid);
    if snaps.is_empty() {
        let dir = ndverbs_verbs::stat_dir();
        match a.pid {
            Some(p) => bail!("process {p} publishes no counters (in {})", dir.display()),
            None => bail!(
                "no ndverbs process publishes counters (in {})",
                dir.display()
            ),
        }
    }
    for (_, v) in snaps {
        if a.json {
            println!("{v}");
            continue;
        }
        let mut line = format!(
            "link {}/1 pid {}",
            v["addr"].as_str().unwrap_or("?"),
            v["pid"]
        );
        if let Some(m) = v["counters"].as_object() {
            for (i, (k, c)) in m.iter().enumerate() {
                if a.rxe && i >= ndverbs_verbs::RXE_COUNTERS.len() {
                    break;
                }
                line.push_str(&format!(" {k} {c}"));
            }
        }
        println!("{line}");
    }
    Ok(())
}
