//! The live objects of a NIC, in the spirit of iproute2's `rdma resource
//! show qp|cq|mr|cm_id`: what [`Nic::resources`](crate::nic::Nic::resources)
//! returns and what is published for `ndv res`.
//!
//! A [`Resources`] is taken under the NIC's core lock by copying a few
//! numbers per object (no formatting, no per-packet work). The publisher
//! (while publishing is on, see [`crate::stats`]) writes it only on demand:
//! when a reader has touched `<dir>/<pid>-<address>.res.want` within the
//! last [`WANT_FOR`], it writes `<dir>/<pid>-<address>.res.json` once per
//! publishing interval, next to the counters, and removes it once nobody
//! asks (with 10,000 QPs a snapshot costs about 1 % of a core, which an
//! idle process should not pay for nobody). Both go with the NIC like the
//! counter file. The snapshot file is one JSON object:
//!
//! ```text
//! {"pid":…,"addr":"…","time_ms":…,
//!  "qp":[{"qpn":…,"state":"RTS","pd":…,"peer":"…"|null,"dest_qpn":…,"sq_psn":…,"rq_psn":…,
//!         "sq_outstanding":…,"rq_outstanding":…,"send_cq":…,"recv_cq":…,"srq":…|null,
//!         "sent_pkts":…,"rcvd_pkts":…,"retries":…,"rnr_naks":…,"seq_naks":…,
//!         "retry_exceeded":…,"duplicates":…,"type":"RC"|"UD"},…],
//!  "cq":[{"id":…,"depth":…,"entries":…,"overflowed":false},…],
//!  "mr":[{"lkey":…,"rkey":…,"pd":…,"addr":…,"length":…,"access":"LOCAL_WRITE|REMOTE_READ","windows":…},…],
//!  "cm_id":[{"id":…,"state":"connected","cm_state":"ESTABLISHED"|null,"local":"…","local_port":…,
//!            "peer":"…"|null,"peer_port":…,"qpn":…|null,"dest_qpn":…|null},…]}
//! ```
//!
//! Objects are listed by number (QPN, CQ id, key, endpoint id). The QP's
//! `sq_psn`/`rq_psn` are the next PSN it sends and the next it expects;
//! `sq_outstanding`/`rq_outstanding` the work requests posted and not yet
//! completed; `retries` the go-back-N retries it started (each resends what
//! was outstanding), `rnr_naks`/`seq_naks` the RNR and sequence NAKs it
//! received, `duplicates` the duplicate requests it answered again (the
//! peer's retransmissions).

use ndverbs_proto::cm::CmState;
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::{Counters, QpState};
use std::fmt::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The file a NIC at `addr` of process `pid` publishes its objects to:
/// `<dir>/<pid>-<addr>.res.json`, beside its counters.
pub fn res_file(pid: u32, addr: IpAddr) -> PathBuf {
    file_beside(&crate::stats::stat_file(pid, addr))
}

/// The resource file beside the counter file `stat_file`.
pub(crate) fn file_beside(stat_file: &Path) -> PathBuf {
    stat_file.with_extension("res.json")
}

/// The file a reader touches to ask for the objects of the NIC whose
/// counter file is `stat_file`.
pub fn want_file(stat_file: &Path) -> PathBuf {
    stat_file.with_extension("res.want")
}

/// How long one request keeps the snapshots coming.
pub const WANT_FOR: Duration = Duration::from_secs(10);

/// Whether a reader asked for the objects of `stat_file`'s NIC lately.
fn wanted(stat_file: &Path) -> bool {
    std::fs::metadata(want_file(stat_file))
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().map_or(true, |age| age < WANT_FOR))
}

/// Writes `src`'s objects beside its counter file `stat_file` if a reader
/// asks for them (written then renamed, so readers never see half a file),
/// else removes a snapshot left from an earlier request.
pub(crate) fn publish_if_wanted(src: &dyn crate::stats::Source, stat_file: &Path) {
    if wanted(stat_file) {
        publish(src, stat_file);
    } else {
        let _ = std::fs::remove_file(file_beside(stat_file));
    }
}

/// Removes the snapshot and the request of `stat_file`'s NIC (it is gone).
pub(crate) fn unpublish(stat_file: &Path) {
    let _ = std::fs::remove_file(file_beside(stat_file));
    let _ = std::fs::remove_file(want_file(stat_file));
}

fn publish(src: &dyn crate::stats::Source, stat_file: &Path) {
    let Some(r) = src.resources() else {
        return;
    };
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let path = file_beside(stat_file);
    let tmp = path.with_extension("json.tmp");
    let json = r.to_json(std::process::id(), src.local(), ms) + "\n";
    if std::fs::write(&tmp, json).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

/// One queue pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpRes {
    /// QP number.
    pub qpn: u32,
    /// An unreliable datagram QP (no peer, no destination QPN, no receive
    /// PSN); otherwise reliable connected.
    pub ud: bool,
    /// State as of the engine's last step.
    pub state: QpState,
    /// Protection domain.
    pub pd: u32,
    /// The peer's address once the QP has a path.
    pub peer: Option<IpAddr>,
    /// The peer's QP number.
    pub dest_qpn: u32,
    /// The next PSN the requester sends.
    pub sq_psn: u32,
    /// The next PSN the responder expects.
    pub rq_psn: u32,
    /// Send work requests posted and not completed.
    pub sq_outstanding: u32,
    /// Receive work requests posted and not completed (0 with an SRQ).
    pub rq_outstanding: u32,
    /// Send completion queue id.
    pub send_cq: u32,
    /// Receive completion queue id.
    pub recv_cq: u32,
    /// Shared receive queue id.
    pub srq: Option<u32>,
    /// The QP's counters.
    pub counters: Counters,
}

/// One completion queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CqRes {
    /// CQ id.
    pub id: u32,
    /// Capacity.
    pub depth: usize,
    /// Completions waiting to be polled.
    pub entries: usize,
    /// A completion was lost because the queue was full.
    pub overflowed: bool,
}

/// One memory region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrRes {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Protection domain.
    pub pd: u32,
    /// First byte's address.
    pub addr: u64,
    /// Length in bytes.
    pub length: usize,
    /// Rights granted.
    pub access: Access,
    /// Memory windows bound to it.
    pub windows: u32,
}

/// One connection endpoint (an rdma_cm id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmIdRes {
    /// Endpoint id.
    pub id: u32,
    /// Where it is in its life: `idle`, `listening`, `connecting`,
    /// `rep_received`, `request_received`, `accepting`, `connected`,
    /// `broken`, `peer_disconnected`, `disconnecting`, `closed`.
    pub state: &'static str,
    /// The IB CM state of its connection, if bound to one.
    pub cm_state: Option<CmState>,
    /// Local address (the NIC's).
    pub local: IpAddr,
    /// Local rdma_cm port (0 until known).
    pub local_port: u16,
    /// Peer address once known.
    pub peer: Option<IpAddr>,
    /// Peer port (0 until known).
    pub peer_port: u16,
    /// Our QP, once a request named one.
    pub qpn: Option<u32>,
    /// The peer's QP, once the CM negotiated it.
    pub dest_qpn: Option<u32>,
}

/// Every live object of a NIC, each list by number.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::mr::RegionBuf;
/// use ndverbs_engine::nic::{Nic, QpInit};
/// use ndverbs_proto::mem::Access;
/// use ndverbs_proto::rc::{QpCaps, QpState};
/// let a = Nic::open("127.93.19.1".parse().unwrap(), Progress::Thread)?;
/// let pd = a.alloc_pd()?;
/// let (cq, _) = a.create_cq(32)?;
/// let qp = a.create_qp(QpInit { pd, send_cq: cq, recv_cq: cq, srq: None,
///     caps: QpCaps::default(), max_recv_wr: 16, max_recv_sge: 1 })?;
/// let mr = a.reg_mr(pd, RegionBuf::alloc(8192)?, Access::LOCAL_WRITE)?;
/// let ep = a.create_ep()?;
/// a.ep_listen(ep, 7999, 4)?;
/// let r = a.resources();
/// assert_eq!((r.qps[0].qpn, r.qps[0].state, r.qps[0].send_cq), (qp.qpn(), QpState::Reset, cq));
/// assert_eq!((r.cqs[0].id, r.cqs[0].depth, r.cqs[0].entries), (cq, 32, 0));
/// assert_eq!((r.mrs[0].lkey, r.mrs[0].length), (mr.lkey(), 8192));
/// assert_eq!((r.cm_ids[0].state, r.cm_ids[0].local_port), ("listening", 7999));
/// assert_eq!(r.cm_ids[0].cm_state.map(|s| s.name()), Some("LISTEN"));
/// assert!(r.to_json(1, a.local(), 0).contains("\"access\":\"LOCAL_WRITE\""));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// Queue pairs, by QPN.
    pub qps: Vec<QpRes>,
    /// Completion queues, by id.
    pub cqs: Vec<CqRes>,
    /// Memory regions, by key.
    pub mrs: Vec<MrRes>,
    /// Connection endpoints, by id.
    pub cm_ids: Vec<CmIdRes>,
}

/// `QpState` as `ibv_devinfo` and `rdma res` print it.
pub fn qp_state_name(s: QpState) -> &'static str {
    match s {
        QpState::Reset => "RESET",
        QpState::Init => "INIT",
        QpState::Rtr => "RTR",
        QpState::Rts => "RTS",
        QpState::Sqd => "SQD",
        QpState::Sqe => "SQE",
        QpState::Err => "ERR",
    }
}

/// Access rights as `LOCAL_WRITE|REMOTE_READ` (`NONE` for none).
pub fn access_names(a: Access) -> String {
    let names = [
        (Access::LOCAL_WRITE, "LOCAL_WRITE"),
        (Access::REMOTE_WRITE, "REMOTE_WRITE"),
        (Access::REMOTE_READ, "REMOTE_READ"),
        (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
    ];
    let set: Vec<&str> = names
        .iter()
        .filter(|(f, _)| a.contains(*f))
        .map(|(_, n)| *n)
        .collect();
    if set.is_empty() {
        "NONE".into()
    } else {
        set.join("|")
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>, quoted: bool) -> String {
    match (v, quoted) {
        (None, _) => "null".into(),
        (Some(v), true) => format!("\"{v}\""),
        (Some(v), false) => v.to_string(),
    }
}

impl Resources {
    /// Sorts every list by number (the order of the published file).
    pub(crate) fn sort(&mut self) {
        self.qps.sort_by_key(|q| q.qpn);
        self.cqs.sort_by_key(|c| c.id);
        self.mrs.sort_by_key(|m| m.lkey);
        self.cm_ids.sort_by_key(|e| e.id);
    }

    /// The published JSON object (see the module docs) of NIC `addr` in
    /// process `pid` at `time_ms` (milliseconds since the Unix epoch).
    pub fn to_json(&self, pid: u32, addr: IpAddr, time_ms: u128) -> String {
        let mut s = format!("{{\"pid\":{pid},\"addr\":\"{addr}\",\"time_ms\":{time_ms},\"qp\":[");
        for (i, q) in self.qps.iter().enumerate() {
            let c = &q.counters;
            let _ = write!(
                s,
                "{}{{\"qpn\":{},\"state\":\"{}\",\"pd\":{},\"peer\":{},\"dest_qpn\":{},\
                 \"sq_psn\":{},\"rq_psn\":{},\"sq_outstanding\":{},\"rq_outstanding\":{},\
                 \"send_cq\":{},\"recv_cq\":{},\"srq\":{},\"sent_pkts\":{},\"rcvd_pkts\":{},\
                 \"retries\":{},\"rnr_naks\":{},\"seq_naks\":{},\"retry_exceeded\":{},\
                 \"duplicates\":{},\"type\":\"{}\"}}",
                if i == 0 { "" } else { "," },
                q.qpn,
                qp_state_name(q.state),
                q.pd,
                opt(q.peer, true),
                q.dest_qpn,
                q.sq_psn,
                q.rq_psn,
                q.sq_outstanding,
                q.rq_outstanding,
                q.send_cq,
                q.recv_cq,
                opt(q.srq, false),
                c.sent_pkts,
                c.rcvd_pkts,
                c.completer_retry_err,
                c.rcvd_rnr_err,
                c.rcvd_seq_err,
                c.retry_exceeded_err + c.retry_rnr_exceeded_err,
                c.duplicate_request,
                if q.ud { "UD" } else { "RC" },
            );
        }
        s.push_str("],\"cq\":[");
        for (i, c) in self.cqs.iter().enumerate() {
            let _ = write!(
                s,
                "{}{{\"id\":{},\"depth\":{},\"entries\":{},\"overflowed\":{}}}",
                if i == 0 { "" } else { "," },
                c.id,
                c.depth,
                c.entries,
                c.overflowed
            );
        }
        s.push_str("],\"mr\":[");
        for (i, m) in self.mrs.iter().enumerate() {
            let _ = write!(
                s,
                "{}{{\"lkey\":{},\"rkey\":{},\"pd\":{},\"addr\":{},\"length\":{},\
                 \"access\":\"{}\",\"windows\":{}}}",
                if i == 0 { "" } else { "," },
                m.lkey,
                m.rkey,
                m.pd,
                m.addr,
                m.length,
                access_names(m.access),
                m.windows
            );
        }
        s.push_str("],\"cm_id\":[");
        for (i, e) in self.cm_ids.iter().enumerate() {
            let _ = write!(
                s,
                "{}{{\"id\":{},\"state\":\"{}\",\"cm_state\":{},\"local\":\"{}\",\
                 \"local_port\":{},\"peer\":{},\"peer_port\":{},\"qpn\":{},\"dest_qpn\":{}}}",
                if i == 0 { "" } else { "," },
                e.id,
                e.state,
                opt(e.cm_state.map(CmState::name), true),
                e.local,
                e.local_port,
                opt(e.peer, true),
                e.peer_port,
                opt(e.qpn, false),
                opt(e.dest_qpn, false),
            );
        }
        s.push_str("]}");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_and_empty_lists() {
        assert_eq!(access_names(Access::NONE), "NONE");
        assert_eq!(
            access_names(Access::ALL),
            "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC"
        );
        let r = Resources::default();
        assert_eq!(
            r.to_json(7, "10.0.0.1".parse().unwrap(), 5),
            "{\"pid\":7,\"addr\":\"10.0.0.1\",\"time_ms\":5,\"qp\":[],\"cq\":[],\"mr\":[],\"cm_id\":[]}"
        );
    }
}
