//! Looking at a device from outside: packet capture, counters (published
//! for `ndv stat`, served as OpenMetrics), live objects (published for
//! `ndv res`), faults.

use crate::config::FaultConfig;
use crate::device::Device;
use crate::error::Result;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// The content type of the OpenMetrics text format, as a `/metrics`
/// endpoint answers: `application/openmetrics-text; version=1.0.0; charset=utf-8`.
pub const OPENMETRICS_CONTENT_TYPE: &str = crate::engine::OPENMETRICS_CONTENT_TYPE;

/// One device of one process in an OpenMetrics exposition ([`openmetrics`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricSeries {
    /// The device's name (`ndv0`…), empty when unknown (label `device`).
    pub device: String,
    /// The device's address (label `addr`).
    pub addr: IpAddr,
    /// The process that has it open (label `pid`).
    pub pid: u32,
    /// When the counters were read, in milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// `(name, value)` in publication order, as [`Stats::pairs`].
    pub counters: Vec<(String, u64)>,
}

/// The OpenMetrics text exposition of `series`: one counter family
/// `ndverbs_<counter>` per counter name (samples `ndverbs_<counter>_total`,
/// one per series, labelled `device`, `addr` and `pid`), the gauge
/// `ndverbs_snapshot_timestamp_seconds`, then `# EOF`. What
/// [`Device::serve_metrics`] answers and `ndv stat --openmetrics` prints.
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.31.1".parse().unwrap())?;
/// let series = MetricSeries {
///     device: "ndv0".into(),
///     addr: dev.query().addr,
///     pid: std::process::id(),
///     time_ms: 0,
///     counters: dev.stats().pairs().to_vec(),
/// };
/// let text = openmetrics(&[series]);
/// assert!(text.starts_with("# TYPE ndverbs_sent_pkts counter\n"));
/// assert!(text.ends_with("# EOF\n"));
/// # Ok::<(), Error>(())
/// ```
pub fn openmetrics(series: &[MetricSeries]) -> String {
    crate::engine::openmetrics(series)
}

/// Linux rxe's hardware counters, by name and in rxe's order
/// (`rxe_hw_counters.c`): the first entries of every [`Stats`].
///
/// ```
/// use ndverbs_verbs::RXE_COUNTERS;
/// // The same names as /sys/class/infiniband/rxe0/ports/1/hw_counters/.
/// assert_eq!(&RXE_COUNTERS[..2], ["sent_pkts", "rcvd_pkts"]);
/// ```
pub const RXE_COUNTERS: [&str; 15] = crate::engine::RXE_COUNTERS;

/// The directory counter snapshots are published in for `ndv stat`:
/// `$NDV_STAT_DIR`, else `$XDG_RUNTIME_DIR/ndv-stat`, else `/tmp/ndv-stat`.
/// Publisher and reader must agree on it, so both look it up the same way.
///
/// ```
/// let dir = ndverbs_verbs::stat_dir();
/// assert!(dir.is_absolute() || std::env::var_os("NDV_STAT_DIR").is_some());
/// ```
pub fn stat_dir() -> PathBuf {
    crate::engine::stat_dir()
}

/// Whether process `pid` still runs (another user's counts): a snapshot in
/// [`stat_dir`] whose owner is gone was left behind and may be removed.
///
/// ```
/// assert!(ndverbs_verbs::process_exists(std::process::id()));
/// assert!(!ndverbs_verbs::process_exists(0)); // never a process group
/// ```
pub fn process_exists(pid: u32) -> bool {
    crate::engine::process_exists(pid)
}

/// One snapshot of a device's counters: `(name, value)` in order — rxe's
/// hardware counters ([`RXE_COUNTERS`]) summed over every queue pair the
/// device has had, then drops by cause (the device's `drop_*`, the queue
/// pairs' `qp_drop_*`, the connection manager's `cm_*`).
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.27.1".parse().unwrap())?;
/// let s: Stats = dev.stats();
/// let names: Vec<&str> = s.pairs().iter().map(|(n, _)| n.as_str()).collect();
/// assert_eq!(names[..RXE_COUNTERS.len()], RXE_COUNTERS);
/// assert_eq!(s.get("sent_pkts"), 0);
/// assert_eq!(s.get("no such counter"), 0);
/// assert!(s.to_json().starts_with("{\"sent_pkts\":0,"));
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stats(pub(crate) ndverbs_engine::stats::Stats);

impl Stats {
    /// Every counter, in order.
    pub fn pairs(&self) -> &[(String, u64)] {
        self.0.pairs()
    }

    /// One counter by name (0 for an unknown name).
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name)
    }

    /// The counters as one JSON object, in order.
    pub fn to_json(&self) -> String {
        self.0.to_json()
    }
}

/// With the `serde` feature: a map from counter name to value, in the order
/// of [`Stats::pairs`] (the same object as [`Stats::to_json`]).
#[cfg(feature = "serde")]
impl serde::Serialize for Stats {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let pairs = self.pairs();
        let mut map = s.serialize_map(Some(pairs.len()))?;
        for (name, value) in pairs {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

impl Device {
    /// Writes every RoCEv2 packet this device sends and receives to the pcap
    /// file `path` (raw IP with the IP and UDP headers rebuilt as on the wire,
    /// ICRC included, so Wireshark decodes it as RoCE), or stops with `None`.
    /// Devices of one process naming the same file share it.
    /// [`DeviceConfig::capture`](crate::DeviceConfig::capture) does the same
    /// from the moment the device opens.
    ///
    /// ```
    /// use ndverbs_verbs::Device;
    /// let dev = Device::open("127.92.13.1".parse().unwrap())?;
    /// let file = std::env::temp_dir().join(format!("verbs-doc-{}.pcap", std::process::id()));
    /// dev.set_capture(Some(&file))?;
    /// assert_eq!(dev.capture_path(), Some(file.clone()));
    /// dev.set_capture(None)?;
    /// # let _ = std::fs::remove_file(&file);
    /// # Ok::<(), ndverbs_verbs::Error>(())
    /// ```
    pub fn set_capture(&self, path: Option<&Path>) -> Result<()> {
        self.nic.set_capture(path)
    }

    /// The capture file this device writes to, if any.
    pub fn capture_path(&self) -> Option<PathBuf> {
        self.nic.capture_path()
    }

    /// A snapshot of the device's counters (see [`Stats`]).
    ///
    /// ```
    /// use ndverbs_verbs::{Device, RXE_COUNTERS};
    /// let dev = Device::open("127.92.14.1".parse().unwrap())?;
    /// let s = dev.stats();
    /// for name in RXE_COUNTERS {
    ///     println!("{name} {}", s.get(name));
    /// }
    /// # Ok::<(), ndverbs_verbs::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.nic.stats()
    }

    /// Publishes this device's counters for `ndv stat`: a JSON snapshot in
    /// [`stat_dir`] refreshed twice a second and removed when the device is
    /// dropped, and beside it its live queue pairs, completion queues,
    /// memory regions and endpoints for `ndv res`. [`DeviceConfig::publish_stats`](crate::DeviceConfig::publish_stats)
    /// does it from the moment the device opens.
    ///
    /// ```no_run
    /// let dev = ndverbs_verbs::Device::open("127.0.0.1".parse().unwrap())?;
    /// dev.publish_stats(); // `ndv stat` now lists this process
    /// # Ok::<(), ndverbs_verbs::Error>(())
    /// ```
    pub fn publish_stats(&self) {
        self.nic.publish_stats();
    }

    /// Serves this device's counters at `http://<at>/metrics` in the
    /// OpenMetrics text format ([`openmetrics`]) until the device is
    /// dropped, labelled with its name (`ndvN`). One endpoint per process,
    /// answered by one thread: the first call binds `at`, later calls (other
    /// devices) must name the same address (else [`ErrorKind::Busy`]).
    /// Returns the bound address (the port chosen when `at`'s is 0).
    /// [`DeviceConfig::metrics`](crate::DeviceConfig::metrics) (and
    /// `NDV_METRICS=ADDR:PORT` through
    /// [`DeviceConfig::from_env`](crate::DeviceConfig::from_env)) does the
    /// same from the moment the device opens.
    ///
    /// [`ErrorKind::Busy`]: crate::ErrorKind::Busy
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let dev = ndverbs_verbs::Device::open("127.92.32.1".parse().unwrap())?;
    /// let at = dev.serve_metrics("127.92.32.1:0".parse().unwrap())?;
    /// let mut http = std::net::TcpStream::connect(at)?;
    /// http.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")?;
    /// let mut answer = String::new();
    /// http.read_to_string(&mut answer)?;
    /// assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"));
    /// assert!(answer.contains("addr=\"127.92.32.1\""));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn serve_metrics(&self, at: SocketAddr) -> Result<SocketAddr> {
        self.nic.serve_metrics("Device::serve_metrics", at)
    }

    /// Turns fault injection on with `faults`, or off with `None`, for the
    /// packets this device receives from now on (see [`FaultConfig`]).
    ///
    /// ```
    /// use ndverbs_verbs::*;
    /// let dev = Device::open("127.92.28.1".parse().unwrap())?;
    /// dev.set_faults(Some(&FaultConfig::parse("loss=0.01,seed=3")?))?;
    /// dev.set_faults(None)?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn set_faults(&self, faults: Option<&FaultConfig>) -> Result<()> {
        self.nic.set_faults(faults)
    }
}
