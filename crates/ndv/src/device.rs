//! How every device a tool opens is configured, in one place: counters and
//! live objects published for `ndv stat` and `ndv res` (unless `NDV_STAT`
//! says otherwise), counters served at `http://ADDR:PORT/metrics` with
//! `NDV_METRICS=ADDR:PORT`, packets captured with `--pcap` or `NDV_PCAP`,
//! faults from `NDV_FAULTS`. The
//! libraries read no environment of their own; `main` builds this
//! configuration once, before any tool runs.

use anyhow::{Context, Result};
use ndverbs_nd::{Adapter, Provider};
use ndverbs_verbs::{Device, DeviceConfig, Progress, STAT_ENV};
use std::net::IpAddr;
use std::path::Path;
use std::sync::OnceLock;

static CONFIG: OnceLock<DeviceConfig> = OnceLock::new();

/// Sets the configuration of every device this process opens: the `NDV_*`
/// variables, counters published by default, and `pcap` over `NDV_PCAP`.
pub fn configure(pcap: Option<&Path>) -> Result<()> {
    let mut c = DeviceConfig::from_env()?;
    if std::env::var_os(STAT_ENV).is_none() {
        c.publish_stats = true;
    }
    if let Some(p) = pcap {
        c.capture = Some(p.to_path_buf());
    }
    // A second call (unit tests) keeps the first configuration.
    let _ = CONFIG.set(c);
    Ok(())
}

/// Whether the configured devices' waits sleep at once (`NDV_SPIN=off`).
pub fn sleeps_at_once() -> bool {
    CONFIG.get().is_some_and(|c| c.sleep_at_once)
}

/// The configuration with `progress`.
fn config(progress: Progress) -> DeviceConfig {
    DeviceConfig {
        progress,
        ..CONFIG.get().cloned().unwrap_or_default()
    }
}

/// Opens the verbs device on `addr`.
pub fn open(addr: IpAddr, progress: Progress) -> Result<Device> {
    Device::open_with(addr, &config(progress))
        .with_context(|| format!("cannot open the RDMA device on {addr}"))
}

/// Opens the ND adapter on `addr` (engine thread progress, as ND programs run).
pub fn open_adapter(addr: IpAddr) -> Result<Adapter> {
    Provider
        .open_adapter_with(addr, &config(Progress::Thread))
        .with_context(|| format!("opening the adapter on {addr}"))
}
