//! Looking at a device from outside: packet capture, counters, faults.

use crate::config::FaultConfig;
use crate::device::Device;
use crate::error::Result;
use std::path::{Path, PathBuf};

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
pub struct Stats {
    pairs: Vec<(String, u64)>,
}

impl Stats {
    pub(crate) fn from_pairs(pairs: Vec<(String, u64)>) -> Stats {
        Stats { pairs }
    }

    /// Every counter, in order.
    pub fn pairs(&self) -> &[(String, u64)] {
        &self.pairs
    }

    /// One counter by name (0 for an unknown name).
    pub fn get(&self, name: &str) -> u64 {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }

    /// The counters as one JSON object, in order.
    pub fn to_json(&self) -> String {
        let body: Vec<String> = self
            .pairs
            .iter()
            .map(|(n, v)| format!("\"{n}\":{v}"))
            .collect();
        format!("{{{}}}", body.join(","))
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
    /// dropped. [`DeviceConfig::publish_stats`](crate::DeviceConfig::publish_stats)
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
