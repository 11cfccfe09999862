//! Counters in the OpenMetrics text format, and the opt-in `/metrics`
//! endpoint a process can serve them on.
//!
//! **The exposition** ([`render`]). Each counter of [`crate::stats`] is one
//! counter family named `ndverbs_<counter>` (rxe's names, then ours), with a
//! `# TYPE` and a `# HELP` line and one `ndverbs_<counter>_total` sample per
//! device and process, labelled `device` (`ndv0`…, empty when the address is
//! not one of the host's), `addr` and `pid`:
//!
//! ```text
//! # TYPE ndverbs_sent_pkts counter
//! # HELP ndverbs_sent_pkts Datagrams sent (rxe: sent_pkts).
//! ndverbs_sent_pkts_total{device="ndv0",addr="10.0.0.1",pid="1234"} 42
//! …
//! # TYPE ndverbs_snapshot_timestamp_seconds gauge
//! # UNIT ndverbs_snapshot_timestamp_seconds seconds
//! # HELP ndverbs_snapshot_timestamp_seconds When the counters were read (Unix time).
//! ndverbs_snapshot_timestamp_seconds{device="ndv0",addr="10.0.0.1",pid="1234"} 1764633600.123
//! # EOF
//! ```
//!
//! Families are written whole, one after the other, in the order their
//! counters are published; a name that would clash with another family's
//! samples (`x` against `x_total`/`x_created`) or repeat one is left out, so
//! a family never appears twice. Label values and help texts are escaped as
//! the format says (`\\`, `\"`, `\n`). The gauge says how old a published
//! snapshot is; it has a unit, so it has a `# UNIT` line and the unit as its
//! name's suffix.
//!
//! Written here rather than with a metrics crate (`prometheus-client`, say):
//! those model live instruments registered once and updated in place,
//! while these are snapshots — this process's, or read from other
//! processes' files — whose counter names are known only at run time, and
//! the rules that matter for them are few. `ndv`'s tests hold the output to
//! the format's ABNF and rules with a strict parser of their own.
//!
//! **The endpoint** ([`Nic::serve_metrics`](crate::nic::Nic::serve_metrics),
//! verbs' `DeviceConfig::metrics` and `NDV_METRICS=ADDR:PORT`). One per
//! process, off unless asked for: a thread (`ndv-metrics`) with a blocking
//! TCP listener answers HTTP/1.1 `GET /metrics` (and `HEAD`) with the
//! exposition of every NIC that asked to be served and is still open, as
//! [`CONTENT_TYPE`]; one request per connection (`Connection: close`), at
//! most 8 KiB of head, read within 2 seconds. A request it cannot parse,
//! too long or too slow is a `400`, another method a `405`, another path a
//! `404`; nothing a client sends makes it panic or stop.

use crate::stats::Source;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The content type of the exposition (OpenMetrics 1.0.0 text).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The prefix of every family name.
pub const PREFIX: &str = "ndverbs_";

/// The gauge saying when each series' counters were read.
const TIMESTAMP_FAMILY: &str = "ndverbs_snapshot_timestamp_seconds";

/// One device of one process: one sample in every family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    /// The device's name (`ndv0`…), empty when unknown.
    pub device: String,
    /// The device's address.
    pub addr: IpAddr,
    /// The process that has it open.
    pub pid: u32,
    /// When the counters were read, in milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// `(name, value)` in publication order (see [`crate::stats::Stats`]).
    pub counters: Vec<(String, u64)>,
}

/// What a counter counts, for its `# HELP` line.
pub fn help(counter: &str) -> String {
    let known = match counter {
        "sent_pkts" => "Datagrams sent (rxe: sent_pkts).",
        "rcvd_pkts" => "Datagrams received (rxe: rcvd_pkts).",
        "duplicate_request" => "Duplicate requests received: the peer retransmitted.",
        "out_of_seq_request" => "Sequence NAKs sent for a gap in the request PSNs.",
        "resequenced" => "PSN gaps a late request filled while later ones were held (reordering).",
        "rcvd_rnr_err" => "RNR NAKs received.",
        "send_rnr_err" => "RNR NAKs sent (no receive was posted).",
        "rcvd_seq_err" => "Sequence NAKs received.",
        "ack_deferred" => "ACKs merged into a later ACK.",
        "retry_exceeded_err" => "Send requests failed: transport retries exhausted.",
        "retry_rnr_exceeded_err" => "Send requests failed: RNR retries exhausted.",
        "completer_retry_err" => {
            "Go-back-N retries started (timeout, sequence NAK, lost response)."
        }
        "send_err" => "Send requests failed locally (bad scatter/gather element).",
        "link_downed" => "1 once the device was removed.",
        "rdma_sends" => "SEND work requests completed.",
        "rdma_recvs" => "Receive work requests completed.",
        "drop_bad_icrc" => "Datagrams dropped: the ICRC did not verify.",
        "drop_malformed" => "Datagrams dropped: too short or unparsable headers.",
        "drop_unknown_qp" => "Packets dropped: no queue pair with that number.",
        "drop_wrong_source" => "Packets dropped: not from the queue pair's peer.",
        "drop_gsi" => "QP1 packets dropped: no connection manager attached.",
        "drop_other_process" => "Packets dropped: another process's on a shared address.",
        "send_would_block" => "Packets the socket refused (buffer full); retransmitted later.",
        "send_calls" => "Calls that handed packets to the socket (sendmmsg or sendto).",
        "gso_runs" => "Runs of several packets sent as one UDP GSO datagram.",
        "zero_copy_packets" => "Packets whose payload was sent straight from registered memory.",
        "cc_rtt_samples" => "Congestion control: round-trip samples taken.",
        "cc_losses" => "Congestion control: go-back-N retries and probes reported.",
        "cc_delay_cuts" => "Congestion control: window cuts for delay above the target.",
        "cc_loss_cuts" => "Congestion control: window cuts for loss.",
        "cc_cnp_cuts" => "Congestion control: window cuts for CNPs.",
        "cc_mode_switches" => "Congestion control: changes of mode.",
        "cc_competitive_entries" => "Congestion control: entries into competitive mode.",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_string();
    }
    if let Some(cause) = counter.strip_prefix("qp_drop_") {
        return format!("Packets a queue pair dropped without effect: {cause}.");
    }
    if let Some(what) = counter.strip_prefix("cm_") {
        return format!("Connection manager: {what}.");
    }
    format!("ndverbs counter {counter}.")
}

/// `s` with every character a metric name cannot hold replaced by `_`
/// (colons are reserved for aggregations, so they go too).
fn metric_name(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' => c,
            _ => '_',
        })
        .collect()
}

/// `s` escaped for a label value or a help text.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn labels(s: &Series) -> String {
    format!(
        "{{device=\"{}\",addr=\"{}\",pid=\"{}\"}}",
        escape(&s.device),
        escape(&s.addr.to_string()),
        s.pid
    )
}

/// The OpenMetrics text exposition of `series` (see the module docs),
/// ending with `# EOF`.
///
/// ```
/// use ndverbs_engine::metrics::{render, Series};
/// let s = Series { device: "ndv0".into(), addr: "10.0.0.1".parse().unwrap(), pid: 7,
///     time_ms: 1_500, counters: vec![("sent_pkts".into(), 3)] };
/// let text = render(&[s]);
/// assert!(text.starts_with("# TYPE ndverbs_sent_pkts counter\n# HELP ndverbs_sent_pkts "));
/// assert!(text.contains("\nndverbs_sent_pkts_total{device=\"ndv0\",addr=\"10.0.0.1\",pid=\"7\"} 3\n"));
/// assert!(text.contains("pid=\"7\"} 1.500\n"));
/// assert!(text.ends_with("\n# EOF\n"));
/// ```
pub fn render(series: &[Series]) -> String {
    // Every counter name, in the order first published.
    let mut names: Vec<&str> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for s in series {
        for (n, _) in &s.counters {
            if seen.insert(n.as_str()) {
                names.push(n);
            }
        }
    }
    // Sample names taken so far: a family is left out rather than clash.
    let mut taken: HashSet<String> = HashSet::new();
    taken.insert(TIMESTAMP_FAMILY.to_string());
    let mut out = String::new();
    for n in names {
        let family = format!("{PREFIX}{}", metric_name(n));
        let samples = [
            family.clone(),
            format!("{family}_total"),
            format!("{family}_created"),
        ];
        if samples.iter().any(|x| taken.contains(x)) {
            continue;
        }
        taken.extend(samples);
        let _ = writeln!(out, "# TYPE {family} counter");
        let _ = writeln!(out, "# HELP {family} {}", escape(&help(n)));
        let mut done: HashSet<String> = HashSet::new();
        for s in series {
            let Some(v) = s.counters.iter().find(|(k, _)| k == n).map(|(_, v)| *v) else {
                continue;
            };
            let l = labels(s);
            if done.insert(l.clone()) {
                let _ = writeln!(out, "{family}_total{l} {v}");
            }
        }
    }
    let _ = writeln!(out, "# TYPE {TIMESTAMP_FAMILY} gauge");
    let _ = writeln!(out, "# UNIT {TIMESTAMP_FAMILY} seconds");
    let _ = writeln!(
        out,
        "# HELP {TIMESTAMP_FAMILY} When the counters were read (Unix time)."
    );
    let mut done: HashSet<String> = HashSet::new();
    for s in series {
        let l = labels(s);
        if done.insert(l.clone()) {
            let (sec, ms) = (s.time_ms / 1000, s.time_ms % 1000);
            let _ = writeln!(out, "{TIMESTAMP_FAMILY}{l} {sec}.{ms:03}");
        }
    }
    out.push_str("# EOF\n");
    out
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

// ---- the endpoint ---------------------------------------------------------

/// How long a client may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// The most a request head may hold.
const MAX_HEAD: usize = 8 * 1024;

/// An HTTP/1.1 responder serving `GET /metrics` with what `render` returns,
/// on a thread of its own until the process ends.
///
/// ```
/// use std::io::{Read, Write};
/// let at = ndverbs_engine::metrics::Responder::start(
///     "127.0.0.1:0".parse().unwrap(),
///     || "# EOF\n".to_string(),
/// )?;
/// let mut c = std::net::TcpStream::connect(at)?;
/// c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")?;
/// let mut answer = String::new();
/// c.read_to_string(&mut answer)?;
/// assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"));
/// assert!(answer.ends_with("\r\n\r\n# EOF\n"));
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Responder;

impl Responder {
    /// Binds `at` and starts answering; returns the bound address (the port
    /// chosen when `at`'s is 0).
    pub fn start(
        at: SocketAddr,
        render: impl Fn() -> String + Send + 'static,
    ) -> io::Result<SocketAddr> {
        let listener = TcpListener::bind(at)?;
        let bound = listener.local_addr()?;
        std::thread::Builder::new()
            .name("ndv-metrics".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    match conn {
                        Ok(c) => {
                            // A panic (in rendering, say) costs this request,
                            // not the endpoint.
                            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                answer(c, &render)
                            }));
                            match r {
                                Ok(Ok(())) => {}
                                Ok(Err(e)) => tracing::debug!(error = %e, "metrics request"),
                                Err(_) => tracing::warn!("metrics request: rendering panicked"),
                            }
                        }
                        // Out of descriptors and the like: try again shortly.
                        Err(_) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
            })?;
        Ok(bound)
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    /// `GET /metrics` (`head`: only the headers).
    Metrics {
        head: bool,
    },
    BadRequest,
    NotFound,
    MethodNotAllowed,
}

/// Reads the request line of `head` (the bytes up to the blank line).
fn parse(head: &[u8]) -> Ask {
    let Ok(text) = std::str::from_utf8(head) else {
        return Ask::BadRequest;
    };
    let line = text.split("\r\n").next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Ask::BadRequest;
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0")
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
        || !target.starts_with('/')
    {
        return Ask::BadRequest;
    }
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => Ask::Metrics {
            head: method == "HEAD",
        },
        ("GET" | "HEAD", _) => Ask::NotFound,
        _ => Ask::MethodNotAllowed,
    }
}

/// Reads one request from `c` and answers it.
fn answer(mut c: TcpStream, render: &dyn Fn() -> String) -> io::Result<()> {
    c.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    c.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let ask = loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break parse(&head[..end]);
        }
        if head.len() > MAX_HEAD {
            break Ask::BadRequest;
        }
        match c.read(&mut buf) {
            Ok(0) => break Ask::BadRequest,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            // Too slow (the timeout), or gone: answered if it still listens.
            Err(_) => break Ask::BadRequest,
        }
    };
    let (status, body, head_only, extra) = match ask {
        Ask::Metrics { head } => ("200 OK", render(), head, ""),
        Ask::BadRequest => ("400 Bad Request", "bad request\n".into(), false, ""),
        Ask::NotFound => (
            "404 Not Found",
            "not found: the metrics are at /metrics\n".into(),
            false,
            "",
        ),
        Ask::MethodNotAllowed => (
            "405 Method Not Allowed",
            "method not allowed\n".into(),
            false,
            "Allow: GET, HEAD\r\n",
        ),
    };
    let ctype = if status.starts_with("200") {
        CONTENT_TYPE
    } else {
        "text/plain; charset=utf-8"
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        out.push_str(&body);
    }
    c.write_all(out.as_bytes())?;
    let _ = c.shutdown(std::net::Shutdown::Write);
    // Closing with unread input would reset the connection, and the client
    // could lose the answer: read what it still sends, for a moment.
    c.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut left: usize = 64 * 1024;
    while left > 0 {
        match c.read(&mut buf) {
            Ok(n) if n > 0 => left = left.saturating_sub(n),
            _ => break,
        }
    }
    Ok(())
}

/// The process's endpoint: where it was asked for, where it listens, and
/// the NICs it serves (held weakly, as the publisher holds them).
struct Served {
    asked: SocketAddr,
    bound: SocketAddr,
    nics: Vec<(Box<dyn Source>, String)>,
}

fn served() -> &'static Mutex<Option<Served>> {
    static S: OnceLock<Mutex<Option<Served>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(None))
}

/// The exposition of every NIC served (dropping those that are gone).
fn render_served() -> String {
    let mut g = served().lock().unwrap_or_else(|e| e.into_inner());
    let mut series = Vec::new();
    if let Some(s) = g.as_mut() {
        s.nics.retain(|(src, device)| match src.snapshot() {
            Some(stats) => {
                series.push(Series {
                    device: device.clone(),
                    addr: src.local(),
                    pid: std::process::id(),
                    time_ms: now_ms(),
                    counters: stats.pairs().to_vec(),
                });
                true
            }
            None => false,
        });
    }
    drop(g);
    render(&series)
}

/// Serves `src`'s counters, as device `device`, on the process's endpoint
/// at `at`, which the first call starts; a later call must ask for the
/// same address. Returns the bound address.
pub(crate) fn serve(
    at: SocketAddr,
    src: Box<dyn Source>,
    device: String,
) -> Result<SocketAddr, crate::error::EngineError> {
    let mut g = served().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = g.as_mut() {
        if s.asked != at && s.bound != at {
            return Err(crate::error::EngineError::Busy(
                "this process already serves its metrics on another address",
            ));
        }
        // Served once: a NIC asking again (or a new NIC on the address of
        // one that is gone) replaces its entry.
        let local = src.local();
        s.nics.retain(|(n, _)| n.local() != local);
        s.nics.push((src, device));
        return Ok(s.bound);
    }
    let bound = Responder::start(at, render_served)?;
    tracing::info!(%bound, "serving OpenMetrics at /metrics");
    *g = Some(Served {
        asked: at,
        bound,
        nics: vec![(src, device)],
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(device: &str, pid: u32, counters: &[(&str, u64)]) -> Series {
        Series {
            device: device.into(),
            addr: "10.0.0.1".parse().unwrap(),
            pid,
            time_ms: 1_764_633_600_042,
            counters: counters.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        }
    }

    #[test]
    fn requests() {
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\nHost: a"),
            Ask::Metrics { head: false }
        );
        assert_eq!(
            parse(b"HEAD /metrics?x=1 HTTP/1.0"),
            Ask::Metrics { head: true }
        );
        assert_eq!(parse(b"GET / HTTP/1.1"), Ask::NotFound);
        assert_eq!(parse(b"POST /metrics HTTP/1.1"), Ask::MethodNotAllowed);
        for bad in [
            &b""[..],
            b"GET",
            b"GET /metrics",
            b"GET /metrics HTTP/2",
            b"GET  /metrics HTTP/1.1",
            b"get /metrics HTTP/1.1",
            b"GET metrics HTTP/1.1",
            b"GET /metrics HTTP/1.1 extra",
            b"\xff\xfe /metrics HTTP/1.1",
        ] {
            assert_eq!(
                parse(bad),
                Ask::BadRequest,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    proptest::proptest! {
        /// Any bytes make an answer: parsing a request head never panics,
        /// and only a well-formed request line gets the metrics.
        #[test]
        fn any_head_gets_an_answer(head in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if let Ask::Metrics { .. } = parse(&head) {
                proptest::prop_assert!(head.starts_with(b"GET /metrics") || head.starts_with(b"HEAD /metrics"));
            }
        }
    }

    #[test]
    fn a_panicking_render_costs_one_request_not_the_endpoint() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let once = AtomicBool::new(false);
        let at = Responder::start("127.0.0.1:0".parse().unwrap(), move || {
            if !once.swap(true, Ordering::Relaxed) {
                panic!("render failed");
            }
            "# EOF\n".to_string()
        })
        .unwrap();
        let get = || {
            let mut c = TcpStream::connect(at).unwrap();
            c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
            let mut s = String::new();
            let _ = c.read_to_string(&mut s);
            s
        };
        assert_eq!(get(), "");
        assert!(get().starts_with("HTTP/1.1 200 OK\r\n"));
    }

    #[test]
    fn clashing_and_repeated_families_are_left_out() {
        // "x_total" as a counter would give a sample named like x's.
        let text = render(&[series(
            "ndv0",
            1,
            &[("x", 1), ("x_total", 2), ("x", 3), ("we:ird", 4)],
        )]);
        assert_eq!(text.matches("# TYPE ndverbs_x counter").count(), 1);
        assert!(!text.contains("ndverbs_x_total counter"));
        assert!(text.contains("# TYPE ndverbs_we_ird counter\n"));
        // One sample per label set: the first value.
        assert_eq!(text.matches("ndverbs_x_total{").count(), 1);
        assert!(text.contains("ndverbs_x_total{device=\"ndv0\",addr=\"10.0.0.1\",pid=\"1\"} 1\n"));
    }

    #[test]
    fn labels_and_help_are_escaped() {
        let text = render(&[series("a\"b\\c\nd", 1, &[("sent_pkts", 1)])]);
        assert!(text.contains("device=\"a\\\"b\\\\c\\nd\""), "{text}");
        assert_eq!(escape("plain"), "plain");
        assert!(help("qp_drop_bad_state").contains("bad_state"));
        assert!(help("cm_rx_mads").starts_with("Connection manager"));
        assert_eq!(help("sent_pkts"), "Datagrams sent (rxe: sent_pkts).");
    }

    #[test]
    fn timestamp_has_millisecond_precision() {
        let text = render(&[series("ndv0", 1, &[])]);
        assert!(
            text.ends_with("pid=\"1\"} 1764633600.042\n# EOF\n"),
            "{text}"
        );
    }
}
