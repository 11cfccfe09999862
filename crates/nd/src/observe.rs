//! Looking at an adapter from outside: packet capture and counters.

use crate::adapter::{nd_err, Adapter};
use crate::status::NdResult;
use ndverbs_verbs::Stats;
use std::path::{Path, PathBuf};

impl Adapter {
    /// Writes every RoCEv2 packet of this adapter to the pcap file `path`
    /// (Wireshark decodes it as RoCE), or stops with `None`. See
    /// [`ndverbs_verbs::Device::set_capture`]; [`DeviceConfig::capture`]
    /// (with [`Provider::open_adapter_with`]) does it from the moment the
    /// adapter opens.
    ///
    /// [`DeviceConfig::capture`]: crate::DeviceConfig::capture
    /// [`Provider::open_adapter_with`]: crate::Provider::open_adapter_with
    ///
    /// ```
    /// use ndverbs_nd::Provider;
    /// let ad = Provider.open_adapter("127.91.17.1".parse().unwrap())?;
    /// let file = std::env::temp_dir().join(format!("nd-doc-{}.pcap", std::process::id()));
    /// ad.set_capture(Some(&file))?;
    /// assert_eq!(ad.capture_path(), Some(file.clone()));
    /// ad.set_capture(None)?;
    /// # let _ = std::fs::remove_file(&file);
    /// # Ok::<(), ndverbs_nd::NdError>(())
    /// ```
    pub fn set_capture(&self, path: Option<&Path>) -> NdResult<()> {
        self.inner.dev.set_capture(path).map_err(nd_err)
    }

    /// The capture file this adapter writes to, if any.
    pub fn capture_path(&self) -> Option<PathBuf> {
        self.inner.dev.capture_path()
    }

    /// A snapshot of the adapter's counters, with Linux rxe's names (see
    /// [`ndverbs_verbs::Device::stats`]).
    ///
    /// ```
    /// use ndverbs_nd::Provider;
    /// let ad = Provider.open_adapter("127.91.18.1".parse().unwrap())?;
    /// assert_eq!(ad.stats().get("link_downed"), 0);
    /// # Ok::<(), ndverbs_nd::NdError>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.inner.dev.stats()
    }
}
