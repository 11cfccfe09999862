//! How a NIC is opened: who runs it, its CM timers, and what it should inject
//! and record — and the one place the engine reads environment variables.
//!
//! [`Nic::open_with`](crate::nic::Nic::open_with) takes a [`NicConfig`];
//! [`Nic::open`](crate::nic::Nic::open) uses [`NicConfig::from_env`] with the
//! progress model given. The environment variables the engine honours, all
//! read here:
//!
//! | Variable | Effect |
//! |---|---|
//! | [`FAULTS_ENV`] (`NDV_FAULTS`) | fault injection on what the NIC receives, [`FaultConfig::parse`] syntax (`loss=0.1,dup=0.02,seed=7`); logs a warning when it turns faults on |
//! | [`PCAP_ENV`] (`NDV_PCAP`) | a pcap file recording every packet (see [`crate::link::capture`]) |
//! | [`STAT_ENV`] (`NDV_STAT`) | `1`: publish the counters for `ndv stat` (see [`crate::stats`]) |
//! | [`STAT_DIR_ENV`] (`NDV_STAT_DIR`) | where published counters go ([`stat_dir`]) |
//!
//! They are read when a NIC opens, so setting one affects NICs opened later.

use crate::link::faults::FaultConfig;
use std::path::{Path, PathBuf};

/// Fault injection for every NIC a process opens ([`FaultConfig::parse`] syntax).
pub const FAULTS_ENV: &str = "NDV_FAULTS";
/// A capture file for every NIC a process opens.
pub const PCAP_ENV: &str = "NDV_PCAP";
/// `1`: every NIC a process opens publishes its counters.
pub const STAT_ENV: &str = "NDV_STAT";
/// The directory of published counter snapshots.
pub const STAT_DIR_ENV: &str = "NDV_STAT_DIR";

/// Who runs the engine loop.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::nic::Nic;
/// use std::time::Duration;
/// let a = Nic::open("127.93.2.1".parse().unwrap(), Progress::Manual)?;
/// assert_eq!(a.mode(), Progress::Manual);
/// // No worker thread: the application runs the engine loop itself (the layers
/// // above do it when a CQ is polled), or sleeps in it until there is work.
/// assert!(a.progress());
/// a.progress_wait(Duration::from_millis(1))?;
/// # Ok::<(), ndverbs_engine::error::EngineError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Progress {
    /// A worker thread per NIC.
    Thread,
    /// The application, through [`Nic::progress`](crate::nic::Nic::progress).
    Manual,
}

/// CM timer settings (exponents as on the wire: 4.096 µs × 2^t).
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::{CmTimers, NicConfig, Progress};
/// use ndverbs_engine::nic::Nic;
/// // A short-fused CM (a REQ every 2·4 + 4 = 12 ms, 2 retries) for tests that must see timeouts.
/// let cm_timers = CmTimers { packet_life_time: 10, cm_response_timeout: 10, max_cm_retries: 2 };
/// let cfg = NicConfig { progress: Progress::Thread, cm_timers, ..NicConfig::default() };
/// let a = Nic::open_with("127.93.4.1".parse().unwrap(), cfg)?;
/// assert!(!a.is_removed());
/// # Ok::<(), ndverbs_engine::error::EngineError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmTimers {
    /// Packet life time exponent (Linux RoCE: 18).
    pub packet_life_time: u8,
    /// CM response timeout exponent (Linux: 20).
    pub cm_response_timeout: u8,
    /// Retries of REQ/REP/DREQ (Linux: 15).
    pub max_cm_retries: u8,
}

impl CmTimers {
    /// Linux 6.1's settings on RoCE.
    pub const LINUX: CmTimers = CmTimers {
        packet_life_time: 18,
        cm_response_timeout: 20,
        max_cm_retries: 15,
    };
}

impl Default for CmTimers {
    fn default() -> Self {
        CmTimers::LINUX
    }
}

/// Everything a NIC is opened with besides its link.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::{NicConfig, Progress};
/// use ndverbs_engine::link::faults::FaultConfig;
/// use ndverbs_engine::nic::Nic;
/// // Manual progress, and a network that loses one packet in a hundred on the
/// // way in; whatever the environment says about capture and stats.
/// let cfg = NicConfig {
///     progress: Progress::Manual,
///     faults: Some(FaultConfig::parse("loss=0.01,seed=3")?),
///     ..NicConfig::from_env()
/// };
/// let a = Nic::open_with("127.93.9.1".parse().unwrap(), cfg)?;
/// assert_eq!(a.fault_counters().map(|c| c.packets), Some(0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct NicConfig {
    /// Who runs the engine loop.
    pub progress: Progress,
    /// The connection manager's timers.
    pub cm_timers: CmTimers,
    /// Network faults injected into what the NIC receives (`None`: none).
    pub faults: Option<FaultConfig>,
    /// A pcap file recording every packet the NIC sends and receives.
    pub capture: Option<PathBuf>,
    /// Publish the NIC's counters for `ndv stat` while it is open.
    pub publish_stats: bool,
}

impl Default for NicConfig {
    /// A worker thread, Linux's CM timers, no faults, no capture, nothing
    /// published.
    fn default() -> Self {
        NicConfig {
            progress: Progress::Thread,
            cm_timers: CmTimers::LINUX,
            faults: None,
            capture: None,
            publish_stats: false,
        }
    }
}

impl NicConfig {
    /// The defaults, with faults, capture and stats publishing as the
    /// environment variables of the module docs ask. A fault specification
    /// that does not parse is ignored with a warning.
    pub fn from_env() -> NicConfig {
        NicConfig {
            faults: faults_from_env(),
            capture: env_capture_path(),
            publish_stats: std::env::var(STAT_ENV).as_deref() == Ok("1"),
            ..NicConfig::default()
        }
    }
}

/// The fault configuration in [`FAULTS_ENV`], if set and not off.
fn faults_from_env() -> Option<FaultConfig> {
    let spec = std::env::var(FAULTS_ENV).ok()?;
    if spec.trim().is_empty() {
        return None;
    }
    match FaultConfig::parse(&spec) {
        // Turning faults on logs a warning (see `FaultLayer::set_config`).
        Ok(c) if c.is_off() => None,
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "{FAULTS_ENV} ignored");
            None
        }
    }
}

/// The capture file named by [`PCAP_ENV`], if set and not empty.
pub fn env_capture_path() -> Option<PathBuf> {
    std::env::var_os(PCAP_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// How to name a capture file in an error: as the environment variable that
/// chose it, if it did (the user may not know a capture was asked for).
pub(crate) fn capture_origin(path: &Path) -> String {
    if env_capture_path().as_deref() == Some(path) {
        format!("{PCAP_ENV}={}", path.display())
    } else {
        path.display().to_string()
    }
}

/// The directory of published counter snapshots: [`STAT_DIR_ENV`], else
/// `$XDG_RUNTIME_DIR/ndv-stat`, else `/tmp/ndv-stat`.
pub fn stat_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(STAT_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("ndv-stat");
    }
    PathBuf::from("/tmp/ndv-stat")
}
