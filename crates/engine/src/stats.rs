//! Adapter counters with Linux rxe's names, and publishing them for `ndv stat`.
//!
//! [`Adapter::stats`] is one snapshot of the adapter: rxe's hardware counters
//! (`rxe_hw_counters.c`, same names, same order) summed over every queue pair
//! the adapter has had, then every drop by cause — the adapter's (ICRC,
//! malformed, unknown QP, …), the queue pairs' ([`Drops`], prefixed `qp_`) and
//! the connection manager's (prefixed `cm_`).
//!
//! | rxe counter | here |
//! |---|---|
//! | `sent_pkts`, `rcvd_pkts` | every datagram sent / received by the adapter (QP1 included) |
//! | `duplicate_request` … `send_err`, `rdma_sends`, `rdma_recvs` | the sum of the queue pairs' [`Counters`] |
//! | `link_downed` | 1 once the adapter was removed |
//!
//! **Publishing.** With `NDV_STAT=1` in the environment (the `ndv` tools set
//! it), every adapter the process opens writes its snapshot once a second to
//! `<dir>/<pid>-<address>.json` and removes it when the adapter goes away;
//! `<dir>` is `$NDV_STAT_DIR`, else `$XDG_RUNTIME_DIR/ndv-stat`, else
//! `/tmp/ndv-stat`. `ndv stat [PID]` reads them. A file is one JSON object:
//! `{"pid":…,"addr":"…","time_ms":…,"counters":{"sent_pkts":…,…}}`, counters
//! in the order above.
//!
//! [`Drops`]: ndverbs_proto::rc::Drops

use crate::adapter::{Adapter, WeakAdapter};
use ndverbs_proto::rc::Counters;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// rxe's hardware counters, in `rxe_hw_counters.c` order.
pub const RXE_COUNTERS: [&str; 15] = [
    "sent_pkts",
    "rcvd_pkts",
    "duplicate_request",
    "out_of_seq_request",
    "rcvd_rnr_err",
    "send_rnr_err",
    "rcvd_seq_err",
    "ack_deferred",
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
    "completer_retry_err",
    "send_err",
    "link_downed",
    "rdma_sends",
    "rdma_recvs",
];

/// The environment variable that switches publishing on (`1`).
pub const STAT_ENV: &str = "NDV_STAT";
/// The environment variable naming the directory of published snapshots.
pub const STAT_DIR_ENV: &str = "NDV_STAT_DIR";

/// One snapshot of an adapter's counters: `(name, value)` in rxe's order,
/// then drops by cause.
///
/// # Example
///
/// ```
/// use ndverbs_engine::adapter::{Adapter, Progress};
/// use ndverbs_engine::stats::RXE_COUNTERS;
/// let a = Adapter::open("127.93.18.1".parse().unwrap(), Progress::Thread)?;
/// let s = a.stats();
/// // rxe's hardware counters first, with rxe's names in `rxe_hw_counters.c` order.
/// let names: Vec<&str> = s.pairs().iter().map(|(n, _)| n.as_str()).collect();
/// assert_eq!(names[..RXE_COUNTERS.len()], RXE_COUNTERS);
/// assert_eq!(s.get("sent_pkts"), 0);
/// assert!(s.to_json().starts_with("{\"sent_pkts\":0,"));
/// # Ok::<(), ndverbs_engine::adapter::EngineError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stats {
    pairs: Vec<(String, u64)>,
}

impl Stats {
    /// Every counter in order.
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

    /// The counters as a JSON object, in order.
    pub fn to_json(&self) -> String {
        let body: Vec<String> = self
            .pairs
            .iter()
            .map(|(n, v)| format!("\"{n}\":{v}"))
            .collect();
        format!("{{{}}}", body.join(","))
    }
}

/// Adds every counter of `c` to `acc`.
pub fn add(acc: &mut Counters, c: &Counters) {
    let (a, d) = (c, &c.drops);
    acc.sent_pkts += a.sent_pkts;
    acc.rcvd_pkts += a.rcvd_pkts;
    acc.duplicate_request += a.duplicate_request;
    acc.out_of_seq_request += a.out_of_seq_request;
    acc.rcvd_rnr_err += a.rcvd_rnr_err;
    acc.send_rnr_err += a.send_rnr_err;
    acc.rcvd_seq_err += a.rcvd_seq_err;
    acc.ack_deferred += a.ack_deferred;
    acc.retry_exceeded_err += a.retry_exceeded_err;
    acc.retry_rnr_exceeded_err += a.retry_rnr_exceeded_err;
    acc.completer_retry_err += a.completer_retry_err;
    acc.send_err += a.send_err;
    acc.rdma_sends += a.rdma_sends;
    acc.rdma_recvs += a.rdma_recvs;
    let x = &mut acc.drops;
    x.wrong_qpn += d.wrong_qpn;
    x.bad_pkey += d.bad_pkey;
    x.not_rc += d.not_rc;
    x.bad_state += d.bad_state;
    x.out_of_seq += d.out_of_seq;
    x.unmatched_duplicate += d.unmatched_duplicate;
    x.invalid_duplicate += d.invalid_duplicate;
    x.reply_queue_full += d.reply_queue_full;
    x.ghost_response += d.ghost_response;
    x.stale_response += d.stale_response;
    x.out_of_order_response += d.out_of_order_response;
    x.unexpected_ack += d.unexpected_ack;
    x.redundant_nak += d.redundant_nak;
    x.tx_no_room += d.tx_no_room;
}

impl Adapter {
    /// A snapshot of the adapter's counters (see [`crate::stats`]).
    ///
    /// ```no_run
    /// # use ndverbs_engine::adapter::{Adapter, Progress};
    /// let a = Adapter::open("127.0.0.1".parse().unwrap(), Progress::Thread)?;
    /// let s = a.stats();
    /// println!("sent {} received {}", s.get("sent_pkts"), s.get("rcvd_pkts"));
    /// # Ok::<(), ndverbs_engine::adapter::EngineError>(())
    /// ```
    pub fn stats(&self) -> Stats {
        let (qp, cm) = {
            let c = self.core_lock();
            let mut sum = c.retired;
            for e in c.qps.values() {
                add(&mut sum, e.qp.counters());
            }
            (sum, *c.cm.counters())
        };
        let ac = self.counters();
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let mut pairs: Vec<(String, u64)> = Vec::with_capacity(48);
        for name in RXE_COUNTERS {
            let v = match name {
                "sent_pkts" => ld(&ac.sent_datagrams),
                "rcvd_pkts" => ld(&ac.rcvd_datagrams),
                "link_downed" => u64::from(self.is_removed()),
                n => qp
                    .pairs()
                    .into_iter()
                    .find(|(k, _)| *k == n)
                    .map_or(0, |(_, v)| v),
            };
            pairs.push((name.to_string(), v));
        }
        for (n, v) in [
            ("drop_bad_icrc", ld(&ac.drop_bad_icrc)),
            ("drop_malformed", ld(&ac.drop_malformed)),
            ("drop_unknown_qp", ld(&ac.drop_unknown_qp)),
            ("drop_wrong_source", ld(&ac.drop_wrong_source)),
            ("drop_gsi", ld(&ac.drop_gsi)),
            ("send_would_block", ld(&ac.send_would_block)),
        ] {
            pairs.push((n.to_string(), v));
        }
        for (n, v) in qp.drops.pairs() {
            pairs.push((format!("qp_drop_{n}"), v));
        }
        for (n, v) in cm_pairs(&cm) {
            pairs.push((format!("cm_{n}"), v));
        }
        Stats { pairs }
    }
}

fn cm_pairs(c: &ndverbs_proto::cm::CmCounters) -> [(&'static str, u64); 15] {
    [
        ("rx_mads", c.rx_mads),
        ("rx_malformed", c.rx_malformed),
        ("rx_unsupported", c.rx_unsupported),
        ("rx_unmatched", c.rx_unmatched),
        ("rx_duplicates", c.rx_duplicates),
        ("rx_wrong_state", c.rx_wrong_state),
        ("rx_dreq_bad_qpn", c.rx_dreq_bad_qpn),
        ("rx_wrong_source", c.rx_wrong_source),
        ("rx_after_removal", c.rx_after_removal),
        ("rx_req_invalid", c.rx_req_invalid),
        ("tx_mads", c.tx_mads),
        ("tx_retries", c.tx_retries),
        ("tx_rej", c.tx_rej),
        ("tx_mra", c.tx_mra),
        ("tx_drep_unknown", c.tx_drep_unknown),
    ]
}

/// The directory of published snapshots.
pub fn stat_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(STAT_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("ndv-stat");
    }
    PathBuf::from("/tmp/ndv-stat")
}

/// The file an adapter at `addr` of process `pid` publishes to.
pub fn stat_file(pid: u32, addr: std::net::IpAddr) -> PathBuf {
    stat_dir().join(format!("{pid}-{addr}.json"))
}

/// How often snapshots are rewritten.
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(500);

fn publisher() -> &'static Mutex<Vec<(std::net::IpAddr, WeakAdapter, PathBuf)>> {
    static P: OnceLock<Mutex<Vec<(std::net::IpAddr, WeakAdapter, PathBuf)>>> = OnceLock::new();
    P.get_or_init(|| {
        let _ = std::thread::Builder::new()
            .name("ndv-stat".into())
            .spawn(publish_loop);
        Mutex::new(Vec::new())
    })
}

/// Starts publishing `a`'s counters if [`STAT_ENV`] is `1`.
pub(crate) fn publish_from_env(a: &Adapter) {
    if std::env::var(STAT_ENV).as_deref() == Ok("1") {
        publish(a);
    }
}

/// Publishes `a`'s counters for `ndv stat` until the adapter is dropped.
pub fn publish(a: &Adapter) {
    let path = stat_file(std::process::id(), a.local());
    if let Err(e) = std::fs::create_dir_all(stat_dir()) {
        tracing::warn!(dir = %stat_dir().display(), error = %e, "counters not published");
        return;
    }
    write_snapshot(a, &path);
    let mut g = publisher().lock().unwrap_or_else(|e| e.into_inner());
    g.push((a.local(), a.downgrade(), path));
}

fn write_snapshot(a: &Adapter, path: &std::path::Path) {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let json = format!(
        "{{\"pid\":{},\"addr\":\"{}\",\"time_ms\":{ms},\"counters\":{}}}\n",
        std::process::id(),
        a.local(),
        a.stats().to_json()
    );
    // Write then rename, so that readers never see half a file.
    let tmp = path.with_extension("json.tmp");
    if std::fs::write(&tmp, json).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

fn publish_loop() {
    loop {
        std::thread::sleep(PUBLISH_INTERVAL);
        let list: Vec<(WeakAdapter, PathBuf)> = {
            let mut g = publisher().lock().unwrap_or_else(|e| e.into_inner());
            g.retain(|(_, w, p)| {
                let alive = w.is_alive();
                if !alive {
                    let _ = std::fs::remove_file(p);
                }
                alive
            });
            g.iter().map(|(_, w, p)| (w.clone(), p.clone())).collect()
        };
        for (w, p) in list {
            if let Some(a) = w.upgrade() {
                write_snapshot(&a, &p);
            }
        }
    }
}
