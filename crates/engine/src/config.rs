//! How a NIC is opened: who runs it, its CM timers, and what it should inject
//! and record.
//!
//! [`Nic::open_with`](crate::nic::Nic::open_with) takes a [`NicConfig`];
//! [`Nic::open`](crate::nic::Nic::open) uses the defaults with the progress
//! model given. The engine reads no environment variable to configure a NIC:
//! a program that honours `NDV_*` asks for it through verbs'
//! `DeviceConfig::from_env`. The one variable read here is where published
//! counters meet `ndv stat` ([`STAT_DIR_ENV`], see [`stat_dir`]).

use crate::link::faults::FaultConfig;
use ndverbs_proto::cc::CcConfig;
use ndverbs_proto::rc::PathMtu;
use std::path::PathBuf;

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
#[non_exhaustive]
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
/// // way in.
/// let cfg = NicConfig {
///     progress: Progress::Manual,
///     faults: Some(FaultConfig::parse("loss=0.01,seed=3")?),
///     ..NicConfig::default()
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
    /// The port's active MTU: the largest path MTU a queue pair may use.
    /// The opener derives it from the interface's MTU (as rxe does); a
    /// larger path MTU would make datagrams the link cannot carry.
    pub active_mtu: PathMtu,
    /// Congestion control: one controller per peer with these parameters,
    /// its window a send budget of the QPs to that peer (`nic/congestion.rs`).
    /// `None` (the default): off, every QP keeps its fixed byte window.
    pub congestion: Option<CcConfig>,
    /// Share the address with other processes of this user: the NIC is one
    /// member of `<ip>:4791` ([`crate::share`]) rather than its owner, its
    /// QPNs and CM communication IDs carry its slot, and its listeners are
    /// registered host-wide. Off (the default): the NIC binds the port
    /// alone, and a second process on the address gets `EADDRINUSE`.
    pub share_port: bool,
    /// A manual-progress waiter polls the link for a while before it sleeps
    /// (an adaptive window, `nic/spin.rs`), so an answer that comes within
    /// microseconds costs no wake-up. On (the default); off: every wait
    /// sleeps at once.
    pub spin_before_sleep: bool,
}

impl Default for NicConfig {
    /// A worker thread, Linux's CM timers, no faults, no capture, nothing
    /// published, the active MTU of a loopback link (4096), no congestion
    /// control, spinning before sleeping.
    fn default() -> Self {
        NicConfig {
            progress: Progress::Thread,
            cm_timers: CmTimers::LINUX,
            faults: None,
            capture: None,
            publish_stats: false,
            active_mtu: PathMtu::Mtu4096,
            congestion: None,
            share_port: false,
            spin_before_sleep: true,
        }
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
