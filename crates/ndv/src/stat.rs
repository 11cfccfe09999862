//! `ndv stat [PID]`: the counters of running ndverbs processes.
//!
//! Every `ndv` command publishes each device's counters twice a second
//! (unless `NDV_STAT` is set to something other than 1); applications can
//! too (`DeviceConfig::publish_stats` or `Device::publish_stats`). This reads
//! the snapshots (`<pid>-<addr>.json` in the stat directory) and prints one
//! line per adapter in the style of `rdma statistic show link`: rxe's
//! counters in rxe's order, then drops by cause.
//!
//! * `--json`: the snapshots as published, one object per line.
//! * `--rxe`: rxe's counters only (in every form below too).
//! * `--openmetrics`: the OpenMetrics text exposition of every snapshot
//!   (what a process's `NDV_METRICS` endpoint serves for its own devices):
//!   one counter family `ndverbs_<counter>` per counter, one sample per
//!   device and process labelled `device` (`ndvN`), `addr` and `pid`, the
//!   gauge `ndverbs_snapshot_timestamp_seconds` saying when each snapshot
//!   was taken, then `# EOF`. With nothing published it is a valid, empty
//!   exposition — a node exporter's textfile collector can take it as is.
//! * `-w`/`--watch`: every second, the rates: per-second deltas between
//!   the last two snapshots each process published (their own time stamps,
//!   not the reader's), rxe's counters and every other counter that moved;
//!   `--count N` stops after N refreshes. On a terminal each refresh
//!   replaces the last; otherwise refreshes follow one another, separated
//!   by a blank line (`--json`: one object per adapter and refresh, with
//!   `refresh`, `interval_ms` and `rates`).

use anyhow::Result;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `ndv stat` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this process.
    pub pid: Option<u32>,
    /// The snapshots as published (one JSON object per adapter and line).
    #[arg(long, conflicts_with = "openmetrics")]
    pub json: bool,
    /// The OpenMetrics text format (for Prometheus and its kin).
    #[arg(long, conflicts_with = "watch")]
    pub openmetrics: bool,
    /// Only rxe's counters (no drops by cause).
    #[arg(long)]
    pub rxe: bool,
    /// Refresh every second, showing per-second rates.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// With --watch: stop after this many refreshes.
    #[arg(long, value_name = "N", requires = "watch")]
    pub count: Option<u64>,
}

/// The suffix of the resource files published beside the counters.
pub(crate) const RES_SUFFIX: &str = ".res.json";

/// Every published file of live processes ending in `suffix` (but not in
/// the resource suffix unless asked for), by pid then address; files of
/// processes that are gone are removed.
pub(crate) fn published(pid: Option<u32>, suffix: &str) -> Vec<(PathBuf, Value)> {
    let dir = ndverbs_verbs::stat_dir();
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(suffix) || (suffix != RES_SUFFIX && name.ends_with(RES_SUFFIX)) {
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
        if !ndverbs_verbs::process_exists(owner) {
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

/// Every published counter snapshot of live processes, by pid then address.
pub fn snapshots(pid: Option<u32>) -> Vec<(PathBuf, Value)> {
    published(pid, ".json")
}

/// The error for "nothing published".
pub(crate) fn nothing(pid: Option<u32>, what: &str) -> anyhow::Error {
    let dir = ndverbs_verbs::stat_dir();
    match pid {
        Some(p) => anyhow::anyhow!("process {p} publishes no {what} (in {})", dir.display()),
        None => anyhow::anyhow!("no ndverbs process publishes {what} (in {})", dir.display()),
    }
}

/// `ndvN` by address, for the `device` label (the host's devices now).
fn device_names() -> HashMap<IpAddr, String> {
    ndverbs_verbs::Device::list()
        .unwrap_or_default()
        .into_iter()
        .map(|d| (d.addr, d.name))
        .collect()
}

/// The counters of a snapshot, in order.
fn counters(v: &Value) -> Vec<(String, u64)> {
    v["counters"].as_object().map_or_else(Vec::new, |m| {
        m.iter()
            .map(|(k, c)| (k.clone(), c.as_u64().unwrap_or(0)))
            .collect()
    })
}

/// The OpenMetrics exposition of `snaps` (`rxe`: rxe's counters only).
pub fn openmetrics(snaps: &[(PathBuf, Value)], rxe: bool) -> String {
    let names = device_names();
    let series: Vec<ndverbs_verbs::MetricSeries> = snaps
        .iter()
        .filter_map(|(_, v)| {
            let addr: IpAddr = v["addr"].as_str()?.parse().ok()?;
            Some(ndverbs_verbs::MetricSeries {
                device: names.get(&addr).cloned().unwrap_or_default(),
                addr,
                pid: v["pid"].as_u64()? as u32,
                time_ms: v["time_ms"].as_u64().unwrap_or(0),
                counters: counters(v)
                    .into_iter()
                    .take(if rxe {
                        ndverbs_verbs::RXE_COUNTERS.len()
                    } else {
                        usize::MAX
                    })
                    .collect(),
            })
        })
        .collect();
    ndverbs_verbs::openmetrics(&series)
}

/// Runs `ndv stat`.
pub fn run(a: &Args) -> Result<()> {
    if a.openmetrics {
        print!("{}", openmetrics(&snapshots(a.pid), a.rxe));
        return Ok(());
    }
    if a.watch {
        return watch(a);
    }
    let snaps = snapshots(a.pid);
    if snaps.is_empty() {
        return Err(nothing(a.pid, "counters"));
    }
    for (_, v) in snaps {
        if a.json {
            println!("{v}");
            continue;
        }
        let mut line = link(&v);
        for (i, (k, c)) in counters(&v).iter().enumerate() {
            if a.rxe && i >= ndverbs_verbs::RXE_COUNTERS.len() {
                break;
            }
            line.push_str(&format!(" {k} {c}"));
        }
        println!("{line}");
    }
    Ok(())
}

/// `link ADDR/1 pid PID`, as every line starts.
pub(crate) fn link(v: &Value) -> String {
    format!(
        "link {}/1 pid {}",
        v["addr"].as_str().unwrap_or("?"),
        v["pid"]
    )
}

/// One adapter's rates between two snapshots: `(name, per second)` in
/// publication order, or `None` when no time passed between them.
pub fn rates(before: &Value, after: &Value) -> Option<(u64, Vec<(String, f64)>)> {
    let t0 = before["time_ms"].as_u64()?;
    let t1 = after["time_ms"].as_u64()?;
    let dt = t1.checked_sub(t0).filter(|&d| d > 0)?;
    let old: HashMap<String, u64> = counters(before).into_iter().collect();
    let r = counters(after)
        .into_iter()
        .map(|(k, v)| {
            // A counter that went backwards belongs to a new adapter.
            let d = v.saturating_sub(old.get(&k).copied().unwrap_or(v));
            let per_s = d as f64 * 1000.0 / dt as f64;
            (k, per_s)
        })
        .collect();
    Some((dt, r))
}

/// `ndv stat -w`: a refresh every second until `--count` refreshes.
fn watch(a: &Args) -> Result<()> {
    let key = |v: &Value| (v["pid"].as_u64(), v["addr"].as_str().map(str::to_owned));
    let mut last: HashMap<(Option<u64>, Option<String>), Value> = snapshots(a.pid)
        .into_iter()
        .map(|(_, v)| (key(&v), v))
        .collect();
    if last.is_empty() {
        return Err(nothing(a.pid, "counters"));
    }
    let tty = std::io::stdout().is_terminal() && !a.json;
    let rxe = ndverbs_verbs::RXE_COUNTERS.len();
    let mut refresh = 0u64;
    while a.count.is_none_or(|n| refresh < n) {
        std::thread::sleep(Duration::from_secs(1));
        refresh += 1;
        let now = snapshots(a.pid);
        let mut out = String::new();
        if tty {
            out.push_str("\x1b[H\x1b[2J");
            out.push_str(&format!(
                "ndv stat -w: per-second rates (refresh {refresh})\n"
            ));
        } else if refresh > 1 && !a.json {
            out.push('\n');
        }
        let mut next = HashMap::new();
        for (_, v) in now {
            let k = key(&v);
            // A snapshot not rewritten since the last refresh keeps the older
            // one as the base, so the rate spans the time that passed.
            let base = last.get(&k);
            let computed = base.and_then(|b| rates(b, &v));
            let keep = match (&computed, base) {
                (None, Some(b)) => b.clone(),
                _ => v.clone(),
            };
            if let Some((dt, r)) = computed {
                if a.json {
                    let mut m = Map::new();
                    for (i, (n, x)) in r.iter().enumerate() {
                        if a.rxe && i >= rxe {
                            break;
                        }
                        m.insert(n.clone(), json!((x * 10.0).round() / 10.0));
                    }
                    let o = json!({"refresh": refresh, "pid": v["pid"], "addr": v["addr"],
                        "time_ms": v["time_ms"], "interval_ms": dt, "rates": m});
                    out.push_str(&format!("{o}\n"));
                } else {
                    let mut line = link(&v);
                    for (i, (n, x)) in r.iter().enumerate() {
                        let shown = if a.rxe { i < rxe } else { i < rxe || *x > 0.0 };
                        if shown {
                            line.push_str(&format!(" {n} {x:.0}/s"));
                        }
                    }
                    out.push_str(&line);
                    out.push('\n');
                }
            }
            next.insert(k, keep);
        }
        last = next;
        let mut so = std::io::stdout().lock();
        so.write_all(out.as_bytes())?;
        so.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_per_second_over_the_snapshots_own_interval() {
        let a = json!({"time_ms": 1000, "counters": {"sent_pkts": 10, "rcvd_pkts": 5}});
        let b = json!({"time_ms": 1500, "counters": {"sent_pkts": 60, "rcvd_pkts": 5, "new": 3}});
        let (dt, r) = rates(&a, &b).unwrap();
        assert_eq!(dt, 500);
        assert_eq!(
            r,
            [
                ("sent_pkts".to_string(), 100.0),
                ("rcvd_pkts".to_string(), 0.0),
                ("new".to_string(), 0.0)
            ]
        );
        // The same snapshot twice, or one from the past: no rate.
        assert!(rates(&b, &b).is_none());
        assert!(rates(&b, &a).is_none());
    }

    #[test]
    fn resource_files_are_not_counter_snapshots() {
        let dir = std::env::temp_dir().join(format!("ndv-stat-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        std::fs::write(
            dir.join(format!("{me}-10.0.0.1.json")),
            format!("{{\"pid\":{me},\"addr\":\"10.0.0.1\",\"counters\":{{}}}}"),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("{me}-10.0.0.1.res.json")),
            format!("{{\"pid\":{me},\"addr\":\"10.0.0.1\",\"qp\":[]}}"),
        )
        .unwrap();
        std::env::set_var("NDV_STAT_DIR", &dir);
        let stats = published(None, ".json");
        let res = published(None, RES_SUFFIX);
        std::env::remove_var("NDV_STAT_DIR");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(stats.len(), 1);
        assert!(stats[0].1.get("counters").is_some());
        assert_eq!(res.len(), 1);
        assert!(res[0].1.get("qp").is_some());
    }
}
