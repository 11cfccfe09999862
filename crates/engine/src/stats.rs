//! NIC counters with Linux rxe's names, and publishing them for `ndv stat`.
//!
//! [`Nic::stats`](crate::nic::Nic::stats) is one snapshot of the NIC: rxe's
//! hardware counters (`rxe_hw_counters.c`, same names, same order) summed over
//! every queue pair the NIC has had, then every drop by cause — the NIC's
//! (ICRC, malformed, unknown QP, …), sends refused by cause and what the
//! network reported back, how its packets left (link calls, GSO runs,
//! zero-copy payloads), the queue pairs' drops ([`Drops`], prefixed `qp_`)
//! and the connection manager's counters (prefixed `cm_`).
//!
//! | NIC counter | counts |
//! |---|---|
//! | `drop_other_process` | packets dropped by a member of a shared port: another process's (see [`crate::share`]) |
//! | `send_would_block` | packets dropped: the socket's send buffer was full (retransmitted) |
//! | `send_too_big` | packets dropped: larger than the path carries (`EMSGSIZE`; a QP path MTU above the interface's) |
//! | `send_no_buffers` | packets dropped: no kernel or device buffer (`ENOBUFS`; retransmitted) |
//! | `send_errors` | packets dropped for another send error (no route, …) |
//! | `peer_port_unreachable` | ICMP port unreachable answers: a host with no RoCE endpoint got our packet |
//! | `peer_errors` | other ICMP errors and path-MTU reports about our packets |
//! | `cm_unreachable` | connects that ended at once on a port unreachable answer |
//! | `req_psns_first`, `req_psns_resent` | request PSNs the queue pairs sent for the first time, and again by go-back-N |
//! | `resequenced` | PSN gaps a late request filled while the requests ahead of it were held (reordering, not loss: no NAK, no go-back-N) |
//!
//! | rxe counter | here |
//! |---|---|
//! | `sent_pkts`, `rcvd_pkts` | every datagram sent / received by the NIC (QP1 included) |
//! | `duplicate_request` … `send_err`, `rdma_sends`, `rdma_recvs` | the sum of the queue pairs' [`Counters`] |
//! | `link_downed` | 1 once the NIC was removed |
//!
//! **Publishing.** [`Nic::publish_stats`](crate::nic::Nic::publish_stats)
//! (or `NDV_STAT=1` in the environment, which the `ndv` tools set: see
//! [`crate::config`]) writes the NIC's snapshot twice a second to
//! `<dir>/<pid>-<address>.json` and removes it as the application's last
//! handle of the NIC goes; `<dir>` is
//! [`stat_dir`](crate::config::stat_dir). A process that ends without
//! dropping its NICs leaves its files: the first NIC the next process
//! publishes removes those of every process that is gone. `ndv stat [PID]`
//! reads them. A file is one JSON object:
//! `{"pid":…,"addr":"…","time_ms":…,"counters":{"sent_pkts":…,…}}`, counters
//! in the order above. Beside it goes, when `ndv res` asks for it,
//! `<pid>-<address>.res.json`, the NIC's live objects (see
//! [`crate::resources`]), with the same
//! lifetime. The same counters in the OpenMetrics text format, and the
//! process's `/metrics` endpoint: [`crate::metrics`].
//!
//! [`Drops`]: ndverbs_proto::rc::Drops

use crate::counters::NicCounters;
use ndverbs_proto::cm::CmCounters;
use ndverbs_proto::rc::Counters;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock};
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

/// One snapshot of a NIC's counters: `(name, value)` in rxe's order,
/// then drops by cause.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::nic::Nic;
/// use ndverbs_engine::stats::RXE_COUNTERS;
/// let a = Nic::open("127.93.18.1".parse().unwrap(), Progress::Thread)?;
/// let s = a.stats();
/// // rxe's hardware counters first, with rxe's names in `rxe_hw_counters.c` order.
/// let names: Vec<&str> = s.pairs().iter().map(|(n, _)| n.as_str()).collect();
/// assert_eq!(names[..RXE_COUNTERS.len()], RXE_COUNTERS);
/// assert_eq!(s.get("sent_pkts"), 0);
/// assert!(s.to_json().starts_with("{\"sent_pkts\":0,"));
/// # Ok::<(), ndverbs_engine::error::EngineError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stats {
    pairs: Vec<(String, u64)>,
}

impl Stats {
    /// A snapshot from its parts: the NIC's own counters, the sum of its
    /// queue pairs' counters, its CM agent's counters, and whether it was
    /// removed.
    pub(crate) fn collect(
        nic: &NicCounters,
        qp: &Counters,
        cm: &CmCounters,
        removed: bool,
    ) -> Stats {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut pairs: Vec<(String, u64)> = Vec::with_capacity(64);
        for name in RXE_COUNTERS {
            let v = match name {
                "sent_pkts" => ld(&nic.sent_datagrams),
                "rcvd_pkts" => ld(&nic.rcvd_datagrams),
                "link_downed" => u64::from(removed),
                n => qp
                    .pairs()
                    .into_iter()
                    .find(|(k, _)| *k == n)
                    .map_or(0, |(_, v)| v),
            };
            pairs.push((name.to_string(), v));
        }
        for (n, v) in [
            ("drop_bad_icrc", ld(&nic.drop_bad_icrc)),
            ("drop_malformed", ld(&nic.drop_malformed)),
            ("drop_unknown_qp", ld(&nic.drop_unknown_qp)),
            ("drop_wrong_source", ld(&nic.drop_wrong_source)),
            ("drop_gsi", ld(&nic.drop_gsi)),
            ("drop_other_process", ld(&nic.drop_other_process)),
            ("send_would_block", ld(&nic.send_would_block)),
            ("send_too_big", ld(&nic.send_too_big)),
            ("send_no_buffers", ld(&nic.send_no_buffers)),
            ("send_errors", ld(&nic.send_errors)),
            ("peer_port_unreachable", ld(&nic.peer_port_unreachable)),
            ("peer_errors", ld(&nic.peer_errors)),
            ("send_calls", ld(&nic.send_calls)),
            ("gso_runs", ld(&nic.gso_runs)),
            ("zero_copy_packets", ld(&nic.zero_copy_packets)),
            ("req_psns_first", qp.req_psns_first),
            ("req_psns_resent", qp.req_psns_resent),
            ("resequenced", qp.resequenced),
            ("cc_rtt_samples", ld(&nic.cc_rtt_samples)),
            ("cc_losses", ld(&nic.cc_losses)),
            ("cc_delay_cuts", ld(&nic.cc_delay_cuts)),
            ("cc_loss_cuts", ld(&nic.cc_loss_cuts)),
            ("cc_cnp_cuts", ld(&nic.cc_cnp_cuts)),
            ("cc_mode_switches", ld(&nic.cc_mode_switches)),
            ("cc_competitive_entries", ld(&nic.cc_competitive_entries)),
            ("cc_cnps_received", ld(&nic.cc_cnps_received)),
            ("cc_cnps_sent", ld(&nic.cc_cnps_sent)),
        ] {
            pairs.push((n.to_string(), v));
        }
        for (n, v) in qp.drops.pairs() {
            pairs.push((format!("qp_drop_{n}"), v));
        }
        for (n, v) in cm_pairs(cm) {
            pairs.push((format!("cm_{n}"), v));
        }
        Stats { pairs }
    }

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
    acc.resequenced += a.resequenced;
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
    acc.req_psns_first += a.req_psns_first;
    acc.req_psns_resent += a.req_psns_resent;
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
    x.bad_qkey += d.bad_qkey;
    x.no_recv += d.no_recv;
}

fn cm_pairs(c: &CmCounters) -> [(&'static str, u64); 16] {
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
        ("unreachable", c.unreachable),
    ]
}

/// The file a NIC at `addr` of process `pid` publishes to.
pub fn stat_file(pid: u32, addr: IpAddr) -> PathBuf {
    crate::config::stat_dir().join(format!("{pid}-{addr}.json"))
}

/// How often snapshots are rewritten.
pub const PUBLISH_INTERVAL: Duration = Duration::from_millis(500);

/// Something whose counters are published: a NIC, held weakly so that
/// publishing does not keep it open.
pub(crate) trait Source: Send {
    /// The NIC's address.
    fn local(&self) -> IpAddr;
    /// A snapshot, or `None` once the NIC is gone.
    fn snapshot(&self) -> Option<Stats>;
    /// Writes a snapshot to `path` (and the objects beside it if a reader
    /// asks for them: [`crate::resources`]), keeping the NIC open
    /// meanwhile; false once the NIC is gone.
    fn publish_to(&self, path: &Path) -> bool;
    /// Its live objects (published next to the counters, see
    /// [`crate::resources`]), or `None` once the NIC is gone.
    fn resources(&self) -> Option<crate::resources::Resources> {
        None
    }
}

type Published = Vec<(Box<dyn Source>, PathBuf)>;

fn publisher() -> &'static Mutex<Published> {
    static P: OnceLock<Mutex<Published>> = OnceLock::new();
    P.get_or_init(|| {
        let _ = std::thread::Builder::new()
            .name("ndv-stat".into())
            .spawn(publish_loop);
        Mutex::new(Vec::new())
    })
}

/// Publishes `src`'s counters for `ndv stat` until it is gone; returns the
/// file (`None` if the directory cannot be made). The first call of a
/// process also removes the files of processes that are gone.
pub(crate) fn publish(src: Box<dyn Source>) -> Option<PathBuf> {
    let dir = crate::config::stat_dir();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "counters not published");
        return None;
    }
    static SWEPT: Once = Once::new();
    SWEPT.call_once(|| remove_orphans(&dir));
    let path = stat_file(std::process::id(), src.local());
    src.publish_to(&path);
    let mut g = publisher().lock().unwrap_or_else(|e| e.into_inner());
    g.push((src, path.clone()));
    Some(path)
}

/// Removes a gone NIC's counter file and the files beside it.
pub(crate) fn unpublish(path: &Path) {
    let _ = std::fs::remove_file(path);
    crate::resources::unpublish(path);
}

/// Removes the files in `dir` of processes that are gone: a process that
/// exits without dropping its NICs (`exit` in a C program, a crash, a
/// kill) leaves its files behind, and without this every such run would
/// add to the directory until `ndv stat` next looked.
fn remove_orphans(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !process_exists(pid) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Whether process `pid` exists (one of another user's too): what decides
/// that a published file's owner is gone.
pub fn process_exists(pid: u32) -> bool {
    // 0 and values above `i32::MAX` would name process groups.
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; it only checks that `pid` exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

pub(crate) fn write_snapshot(addr: IpAddr, s: &Stats, path: &Path) {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let json = format!(
        "{{\"pid\":{},\"addr\":\"{addr}\",\"time_ms\":{ms},\"counters\":{}}}\n",
        std::process::id(),
        s.to_json()
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
        // Taken out of the list while snapshots (each taking a NIC's core
        // lock) are written: publishing a NIC meanwhile does not wait.
        let mut list = std::mem::take(&mut *publisher().lock().unwrap_or_else(|e| e.into_inner()));
        list.retain(|(src, path)| {
            let live = src.publish_to(path);
            if !live {
                unpublish(path);
            }
            live
        });
        let mut g = publisher().lock().unwrap_or_else(|e| e.into_inner());
        list.append(&mut g);
        *g = list;
    }
}
