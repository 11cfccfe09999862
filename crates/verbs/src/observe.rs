//! Looking at a device from outside: packet capture and counters.

use crate::device::Device;
use crate::Result;
use ndverbs_engine::stats::Stats;
use std::path::{Path, PathBuf};

impl Device {
    /// Writes every RoCEv2 packet this device sends and receives to the pcap
    /// file `path` (raw IP with the IP and UDP headers rebuilt as on the wire,
    /// ICRC included, so Wireshark decodes it as RoCE), or stops with `None`.
    /// Devices of one process naming the same file share it. Setting the
    /// environment variable `NDV_PCAP=FILE` does the same for every device the
    /// process opens.
    ///
    /// ```
    /// use ndverbs_verbs::Device;
    /// let dev = Device::open("127.92.13.1".parse().unwrap())?;
    /// let file = std::env::temp_dir().join(format!("verbs-doc-{}.pcap", std::process::id()));
    /// dev.set_capture(Some(&file))?;
    /// assert_eq!(dev.capture_path(), Some(file.clone()));
    /// dev.set_capture(None)?;
    /// # let _ = std::fs::remove_file(&file);
    /// # Ok::<(), ndverbs_verbs::VerbsError>(())
    /// ```
    pub fn set_capture(&self, path: Option<&Path>) -> Result<()> {
        Ok(self.adapter.set_capture(path)?)
    }

    /// The capture file this device writes to, if any.
    pub fn capture_path(&self) -> Option<PathBuf> {
        self.adapter.capture().map(|c| c.path().to_path_buf())
    }

    /// A snapshot of the device's counters: Linux rxe's hardware counters by
    /// name and in rxe's order (`sent_pkts` … `rdma_recvs`), then drops by
    /// cause (see [`ndverbs_engine::stats`]).
    ///
    /// ```
    /// use ndverbs_verbs::{Device, RXE_COUNTERS};
    /// let dev = Device::open("127.92.14.1".parse().unwrap())?;
    /// let s = dev.stats();
    /// for name in RXE_COUNTERS {
    ///     println!("{name} {}", s.get(name));
    /// }
    /// # Ok::<(), ndverbs_verbs::VerbsError>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.adapter.stats()
    }

    /// Publishes this device's counters for `ndv stat` (once a second, until
    /// the device is dropped). `NDV_STAT=1` does it for every device.
    pub fn publish_stats(&self) {
        self.adapter.publish_stats();
    }
}
