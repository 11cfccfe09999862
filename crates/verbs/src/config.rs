//! How a device is opened: progress model, packet capture, counters for
//! `ndv stat`, fault injection.
//!
//! Configuration is an argument ([`DeviceConfig`] to [`Device::open_with`]),
//! never ambient: the library reads no environment variable on its own, so
//! a variable left set in a shell cannot capture packets or inject loss into
//! a program that did not ask for it. Tools that want the `NDV_*` variables
//! call [`DeviceConfig::from_env`], which is the only place they are read.
//!
//! [`Device::open_with`]: crate::Device::open_with

use crate::error::{Error, ErrorKind, Result};
use std::net::SocketAddr;
use std::path::PathBuf;

/// `NDV_PCAP=FILE`: capture every packet to `FILE` ([`DeviceConfig::from_env`]).
///
/// ```
/// // A tool's `--pcap FILE` option wins over the variable.
/// fn capture_file(option: Option<std::path::PathBuf>) -> Option<std::path::PathBuf> {
///     option.or_else(|| std::env::var_os(ndverbs_verbs::PCAP_ENV).map(Into::into))
/// }
/// # let _ = capture_file(None);
/// ```
pub const PCAP_ENV: &str = "NDV_PCAP";
/// `NDV_STAT=1`: publish counters for `ndv stat` ([`DeviceConfig::from_env`]).
///
/// ```
/// // What a child tool needs to be seen by `ndv stat`.
/// let mut child = std::process::Command::new("ndv");
/// child.env(ndverbs_verbs::STAT_ENV, "1");
/// ```
pub const STAT_ENV: &str = "NDV_STAT";
/// `NDV_METRICS=ADDR:PORT`: serve the counters in the OpenMetrics text
/// format at `http://ADDR:PORT/metrics` ([`DeviceConfig::from_env`],
/// [`DeviceConfig::metrics`]).
///
/// ```
/// // A long-running child that a Prometheus server scrapes.
/// let mut child = std::process::Command::new("ndv");
/// child.env(ndverbs_verbs::METRICS_ENV, "127.0.0.1:9464");
/// ```
pub const METRICS_ENV: &str = "NDV_METRICS";
/// `NDV_FAULTS=SPEC`: inject faults ([`DeviceConfig::from_env`], [`FaultConfig::parse`]).
///
/// ```
/// // Check a specification before handing it to a child process.
/// let spec = "loss=0.01,seed=1";
/// ndverbs_verbs::FaultConfig::parse(spec)?;
/// let mut child = std::process::Command::new("ndv");
/// child.env(ndverbs_verbs::FAULTS_ENV, spec);
/// # Ok::<(), ndverbs_verbs::Error>(())
/// ```
pub const FAULTS_ENV: &str = "NDV_FAULTS";

/// `NDV_CC=swift`: congestion control per peer ([`DeviceConfig::from_env`],
/// [`DeviceConfig::congestion_control`]): a window and pacing per peer, the
/// device's packets marked ECT(1), CNPs for marked packets of peers that do
/// the same; `off` or unset: none.
pub const CC_ENV: &str = "NDV_CC";

/// `NDV_SHARE=1`: share the device's address with other processes of the
/// user ([`DeviceConfig::from_env`], [`DeviceConfig::share_port`]).
///
/// ```
/// // Ranks of one MPI job on one host, each opening the same device.
/// let mut rank = std::process::Command::new("ndv");
/// rank.env(ndverbs_verbs::SHARE_ENV, "1");
/// ```
pub const SHARE_ENV: &str = "NDV_SHARE";

/// `NDV_SPIN=off`: a waiter sleeps at once ([`DeviceConfig::sleep_at_once`]);
/// `on` or unset: it polls for an adaptive window first.
pub const SPIN_ENV: &str = "NDV_SPIN";

/// Who runs a device's engine loop.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// use std::time::Duration;
/// let cfg = DeviceConfig { progress: Progress::Manual, ..DeviceConfig::default() };
/// let dev = Device::open_with("127.92.22.1".parse().unwrap(), &cfg)?;
/// assert_eq!(dev.progress_mode(), Progress::Manual);
/// // No engine thread: polling a CQ runs the engine, or sleep in it until
/// // there is work.
/// dev.progress();
/// dev.progress_wait(Duration::from_millis(1))?;
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Progress {
    /// An engine thread per device sleeps on its socket and runs the engine
    /// when packets, posts or timers need it.
    #[default]
    Thread,
    /// No thread: the application runs the engine by polling CQs,
    /// [`Device::progress`](crate::Device::progress) or
    /// [`Device::progress_wait`](crate::Device::progress_wait) — the lowest
    /// latency on few cores.
    Manual,
}

/// Packet faults a device injects into what it receives, for testing
/// applications against a bad network: loss, duplication, reordering, delay
/// and corruption, each a probability per packet, from one seed, so a
/// failing run replays. Senders are untouched, so traffic still leaves by
/// the production send path. Written in the `NDV_FAULTS` syntax.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// // Unnamed probabilities stay zero.
/// let f = FaultConfig::parse("loss=0.1,dup=0.02,delay_us=200,seed=7")?;
/// assert!(!f.is_off());
/// assert!(FaultConfig::parse("loss=0").unwrap().is_off());
/// assert_eq!(FaultConfig::parse("loss=2").unwrap_err().kind(), ErrorKind::InvalidArgument);
/// let cfg = DeviceConfig { faults: Some(f), ..DeviceConfig::default() };
/// let dev = Device::open_with("127.92.23.1".parse().unwrap(), &cfg)?;
/// dev.set_faults(None)?; // and off again
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig(pub(crate) ndverbs_engine::link::faults::FaultConfig);

impl FaultConfig {
    /// Parses `loss=0.1,dup=0.01,reorder=0.05,delay=0.1,delay_us=200,corrupt=0.001,seed=7`
    /// (any subset); an unknown key or a probability outside 0..=1 is an
    /// [`ErrorKind::InvalidArgument`].
    pub fn parse(spec: &str) -> Result<FaultConfig> {
        crate::engine::parse_faults(spec)
    }

    /// True if every probability is zero (nothing would be injected).
    pub fn is_off(&self) -> bool {
        self.0.is_off()
    }
}

/// How to open a device.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let file = std::env::temp_dir().join(format!("verbs-cfg-{}.pcap", std::process::id()));
/// let cfg = DeviceConfig {
///     progress: Progress::Manual,
///     capture: Some(file.clone()),
///     ..DeviceConfig::default()
/// };
/// let dev = Device::open_with("127.92.24.1".parse().unwrap(), &cfg)?;
/// assert_eq!(dev.capture_path(), Some(file.clone()));
/// // A tool honouring the NDV_* variables asks for them explicitly:
/// let from_env = DeviceConfig::from_env()?;
/// # drop((dev, from_env));
/// # let _ = std::fs::remove_file(&file);
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceConfig {
    /// Who runs the engine loop (default: an engine thread).
    pub progress: Progress,
    /// Write every packet the device sends and receives to this pcap file
    /// (see [`Device::set_capture`](crate::Device::set_capture)).
    pub capture: Option<PathBuf>,
    /// Publish the device's counters for `ndv stat` while it is open (see
    /// [`Device::publish_stats`](crate::Device::publish_stats)).
    pub publish_stats: bool,
    /// Inject packet faults (see [`FaultConfig`]).
    pub faults: Option<FaultConfig>,
    /// Serve the device's counters at `http://ADDR:PORT/metrics` in the
    /// OpenMetrics text format while it is open (see
    /// [`Device::serve_metrics`](crate::Device::serve_metrics)): one
    /// endpoint per process, shared by its devices.
    pub metrics: Option<SocketAddr>,
    /// Congestion control: one controller per peer whose window bounds the
    /// bytes the QPs to that peer have in flight (delay-based with a loss
    /// backstop; see `ndverbs_proto::cc`). Off by default: each QP keeps
    /// its fixed window (512 KiB of packets, at least 128 PSNs). Pacing is not applied yet. Never sends CNPs.
    pub congestion_control: bool,
    /// Share the address with other processes of this user, as several
    /// processes share one Soft-RoCE device: each process's device is one
    /// member of `<ip>:4791` (the kernel steers each packet to the process
    /// whose queue pair or connection it is for); QPNs carry the process's
    /// slot in their high byte, and an rdma_cm port listened on by one
    /// process is `AddressInUse` for the others. Off by default: the device
    /// owns the port, and a second process on the address gets
    /// `AddressInUse` on open.
    pub share_port: bool,
    /// Waits in manual progress sleep at once instead of polling the link
    /// for an adaptive window first (which makes answers that come within
    /// microseconds cost no wake-up; it backs off by itself where it does
    /// not pay). Off by default, as `NDV_SPIN` unset or `on`; `NDV_SPIN=off`
    /// sets it.
    pub sleep_at_once: bool,
}

/// A two-way switch in the environment: unset, empty or `default` is
/// false, `other` true, anything else an [`ErrorKind::InvalidArgument`].
fn env_switch(var: &str, default: &str, other: &str) -> Result<bool> {
    match std::env::var(var).as_deref().map(str::trim) {
        Err(_) | Ok("") => Ok(false),
        Ok(v) if v == default => Ok(false),
        Ok(v) if v == other => Ok(true),
        Ok(v) => Err(Error::new(
            ErrorKind::InvalidArgument,
            "DeviceConfig::from_env",
            format!("{var}={v}: expected {other} or {default}"),
        )),
    }
}

impl DeviceConfig {
    /// The configuration the `NDV_*` environment variables ask for — the
    /// only place verbs reads them: [`PCAP_ENV`] (`NDV_PCAP=FILE`: capture),
    /// [`STAT_ENV`] (`NDV_STAT=1`: publish counters), [`METRICS_ENV`]
    /// (`NDV_METRICS=ADDR:PORT`: serve them as OpenMetrics) and
    /// [`FAULTS_ENV`] (`NDV_FAULTS=SPEC`: inject faults,
    /// [`FaultConfig::parse`] syntax) and [`CC_ENV`] (`NDV_CC=swift|off`:
    /// congestion control) and [`SHARE_ENV`] (`NDV_SHARE=1`: share the
    /// address with other processes) and [`SPIN_ENV`] (`NDV_SPIN=off`: sleep
    /// at once). Progress is left at its default. A malformed
    /// `NDV_FAULTS`, `NDV_METRICS`, `NDV_CC` or `NDV_SPIN` is an
    /// [`ErrorKind::InvalidArgument`] rather than silently ignored.
    pub fn from_env() -> Result<DeviceConfig> {
        let congestion_control = env_switch(CC_ENV, "off", "swift")?;
        let sleep_at_once = env_switch(SPIN_ENV, "on", "off")?;
        let faults = match std::env::var(FAULTS_ENV) {
            Ok(spec) if !spec.trim().is_empty() => {
                Some(FaultConfig::parse(&spec).map_err(|e| {
                    Error::new(
                        ErrorKind::InvalidArgument,
                        "DeviceConfig::from_env",
                        format!("{FAULTS_ENV}: {e}"),
                    )
                })?)
            }
            _ => None,
        };
        let metrics = match std::env::var(METRICS_ENV) {
            Ok(at) if !at.trim().is_empty() => Some(at.trim().parse().map_err(|_| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    "DeviceConfig::from_env",
                    format!("{METRICS_ENV}={at}: not an ADDR:PORT socket address"),
                )
            })?),
            _ => None,
        };
        Ok(DeviceConfig {
            progress: Progress::default(),
            metrics,
            capture: std::env::var_os(PCAP_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            publish_stats: std::env::var(STAT_ENV).as_deref() == Ok("1"),
            faults,
            congestion_control,
            share_port: std::env::var(SHARE_ENV).as_deref() == Ok("1"),
            sleep_at_once,
        })
    }
}
