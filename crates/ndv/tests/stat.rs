//! `ndv stat [PID]`: counters of running ndv processes, rxe's names in rxe's
//! order; snapshots disappear with their process. `--openmetrics` is checked
//! against the format's rules (`omcheck`) and against the JSON snapshots;
//! `-w --count N` refreshes N times with per-second rates; `NDV_METRICS`
//! serves the same exposition over HTTP.

mod omcheck;

use ndverbs_testkit::{addr, process};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

const NDV: &str = env!("CARGO_BIN_EXE_ndv");

fn ndv(dir: &std::path::Path) -> Command {
    let mut c = Command::new(NDV);
    c.env("NDV_STAT_DIR", dir).env_remove("NDV_STAT");
    c
}

fn stat_json(dir: &std::path::Path, pid: Option<u32>) -> Option<Vec<Value>> {
    let mut c = ndv(dir);
    c.args(["stat", "--json"]);
    if let Some(p) = pid {
        c.arg(p.to_string());
    }
    let o = c.output().unwrap();
    o.status.success().then(|| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    })
}

#[test]
fn running_ping_pair() {
    let dir = std::env::temp_dir().join(format!("ndv-stat-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (s_ip, c_ip) = addr::pair_v4();
    let (s_ip, c_ip) = (s_ip.to_string(), c_ip.to_string());
    let server =
        process::start_server(ndv(&dir).args(["ping", "-s", "-a", &s_ip, "-p", "7441", "-C", "0"]));
    let client = process::Running::spawn(ndv(&dir).args([
        "ping", "-c", "-a", &s_ip, "-I", &c_ip, "-p", "7441", "-C", "0",
    ]));
    let (sp, cp) = (server.id(), client.id());
    // Both publish within a second; the counters grow while they run.
    let t0 = Instant::now();
    let snaps = loop {
        let s = stat_json(&dir, None).unwrap_or_default();
        let busy = s.len() == 2
            && s.iter()
                .all(|v| v["counters"]["rdma_sends"].as_u64().unwrap_or(0) > 10);
        if busy {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no snapshots: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for v in &snaps {
        let names: Vec<&str> = v["counters"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(&names[..15], ndverbs_verbs::RXE_COUNTERS, "{v}");
        assert!(names.contains(&"drop_bad_icrc") && names.contains(&"qp_drop_bad_state"));
        let c = &v["counters"];
        assert!(c["sent_pkts"].as_u64().unwrap() > c["rdma_sends"].as_u64().unwrap());
        assert_eq!(c["link_downed"], 0);
        assert_eq!(c["drop_bad_icrc"], 0);
    }
    let addrs: Vec<(u64, &str)> = snaps
        .iter()
        .map(|v| (v["pid"].as_u64().unwrap(), v["addr"].as_str().unwrap()))
        .collect();
    assert!(addrs.contains(&(u64::from(sp), s_ip.as_str())), "{addrs:?}");
    assert!(addrs.contains(&(u64::from(cp), c_ip.as_str())), "{addrs:?}");
    // PID filter and the rdma-statistic-style text.
    assert_eq!(stat_json(&dir, Some(cp)).unwrap().len(), 1);
    let o = ndv(&dir).args(["stat", &sp.to_string()]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with(&format!("link {s_ip}/1 pid {sp} sent_pkts ")),
        "{text}"
    );
    // A process that is gone has no counters (its file is cleaned up).
    drop(client.kill());
    assert!(stat_json(&dir, Some(cp)).is_none());
    let o = ndv(&dir).args(["stat", &cp.to_string()]).output().unwrap();
    assert!(!o.status.success());
    drop(server.kill());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A ping server and client (rdma_cm, SEND/READ/WRITE without end) on
/// fresh addresses and `port`, both publishing into `dir`; returns once
/// both have published counters that show traffic.
fn ping_pair(
    dir: &std::path::Path,
    port: u16,
    server_env: &[(&str, String)],
) -> (process::Running, process::Running, IpAddr, IpAddr) {
    let (s_ip, c_ip) = addr::pair_v4();
    let (s, c, p) = (s_ip.to_string(), c_ip.to_string(), port.to_string());
    let mut sc = ndv(dir);
    sc.args(["ping", "-s", "-a", &s, "-p", &p, "-C", "0"]);
    for (k, v) in server_env {
        sc.env(k, v);
    }
    let server = process::start_server(&mut sc);
    let client = process::Running::spawn(
        ndv(dir).args(["ping", "-c", "-a", &s, "-I", &c, "-p", &p, "-C", "0"]),
    );
    let t0 = Instant::now();
    loop {
        let snaps = stat_json(dir, None).unwrap_or_default();
        if snaps.len() == 2
            && snaps
                .iter()
                .all(|v| v["counters"]["rdma_sends"].as_u64().unwrap_or(0) > 10)
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no traffic: {snaps:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (server, client, s_ip, c_ip)
}

fn test_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ndv-stat-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Processes that end leave nothing behind: a NIC's files go with its last
/// handle (the publisher would take them only at its next tick, which a
/// process that exits at once never reaches), and the first NIC a process
/// publishes removes the files of processes that are gone without
/// dropping theirs (killed, crashed, `exit` in a C program).
#[test]
fn ended_runs_leave_no_files() {
    let dir = test_dir("left");
    std::fs::create_dir_all(&dir).unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    for suffix in ["json", "json.tmp", "res.json", "res.want"] {
        std::fs::write(dir.join(format!("{gone_pid}-10.9.9.9.{suffix}")), b"{}").unwrap();
    }
    // A live process's file (pid 1 always exists) and a stranger stay.
    let kept = ["1-10.9.9.8.json", "notes"];
    for f in kept {
        std::fs::write(dir.join(f), b"{}").unwrap();
    }
    let (s_ip, c_ip) = addr::pair_v4();
    let (s, c) = (s_ip.to_string(), c_ip.to_string());
    process::server_then_client(
        ndv(&dir).args(["ping", "-s", "-a", &s, "-p", "7447", "-C", "3"]),
        ndv(&dir).args(["ping", "-c", "-a", &s, "-I", &c, "-p", "7447", "-C", "3"]),
        Duration::from_secs(30),
    );
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, kept, "in {}", dir.display());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_checker_rejects_what_openmetrics_forbids() {
    omcheck::self_test();
}

#[test]
fn openmetrics_exposition_of_every_snapshot() {
    let dir = test_dir("om");
    // Nothing published: still a valid exposition, and a success.
    let o = ndv(&dir).args(["stat", "--openmetrics"]).output().unwrap();
    assert!(o.status.success());
    let empty = String::from_utf8(o.stdout).unwrap();
    let fams = omcheck::check(&empty).unwrap_or_else(|e| panic!("{e}:\n{empty}"));
    assert!(fams.iter().all(|f| f.samples.is_empty()), "{empty}");

    let (server, client, s_ip, c_ip) = ping_pair(&dir, 7442, &[]);
    let before = stat_json(&dir, None).unwrap();
    let o = ndv(&dir).args(["stat", "--openmetrics"]).output().unwrap();
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    let fams = omcheck::check(&text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
    // One counter family per published counter, each with TYPE and HELP,
    // rxe's first and in rxe's order, then the time stamp gauge.
    let names: Vec<String> = before[0]["counters"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| format!("ndverbs_{k}"))
        .collect();
    let got: Vec<&str> = fams.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(got[..names.len()], names, "{text}");
    assert_eq!(got[names.len()..], ["ndverbs_snapshot_timestamp_seconds"]);
    for f in &fams[..names.len()] {
        assert_eq!(f.kind, "counter", "{}", f.name);
        assert!(
            f.help.as_deref().is_some_and(|h| !h.is_empty()),
            "{}",
            f.name
        );
        // One series per device and process.
        assert_eq!(f.samples.len(), 2, "{}: {:?}", f.name, f.samples);
    }
    let ts = fams.last().unwrap();
    assert_eq!(
        (ts.kind.as_str(), ts.unit.as_deref()),
        ("gauge", Some("seconds"))
    );
    // The values are the snapshots' (they only grow, and the exposition
    // read them later), labelled by device, address and process.
    for (ip, p) in [(s_ip, server.id()), (c_ip, client.id())] {
        let (ip, p) = (ip.to_string(), p.to_string());
        let snap = before.iter().find(|v| v["addr"] == ip.as_str()).unwrap();
        let labels = [("addr", ip.as_str()), ("pid", p.as_str())];
        let sends = omcheck::value(&fams, "ndverbs_rdma_sends_total", &labels).unwrap();
        assert!(sends >= snap["counters"]["rdma_sends"].as_f64().unwrap());
        let icrc = omcheck::value(&fams, "ndverbs_drop_bad_icrc_total", &labels).unwrap();
        assert_eq!(icrc, 0.0);
        let t = omcheck::value(&fams, "ndverbs_snapshot_timestamp_seconds", &labels).unwrap();
        assert!(t >= snap["time_ms"].as_f64().unwrap() / 1000.0, "{t}");
        assert!(fams[0]
            .samples
            .iter()
            .any(|s| s.labels.iter().any(|l| l.0 == "device")));
    }
    // Only one process.
    let o = ndv(&dir)
        .args(["stat", "--openmetrics", &client.id().to_string()])
        .output()
        .unwrap();
    let one = omcheck::check(&String::from_utf8(o.stdout).unwrap()).unwrap();
    assert_eq!(one[0].samples.len(), 1);
    // Only rxe's counters.
    let o = ndv(&dir)
        .args(["stat", "--openmetrics", "--rxe"])
        .output()
        .unwrap();
    let rxe = omcheck::check(&String::from_utf8(o.stdout).unwrap()).unwrap();
    let got: Vec<&str> = rxe.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(got[..got.len() - 1], names[..15]);
    drop((client.kill(), server.kill()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn watch_refreshes_count_times_with_rates() {
    let dir = test_dir("watch");
    // Nothing to watch: an error, at once.
    let o = ndv(&dir)
        .args(["stat", "-w", "--count", "1"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let (server, client, _, c_ip) = ping_pair(&dir, 7443, &[]);
    let t0 = Instant::now();
    let o = ndv(&dir)
        .args([
            "stat",
            "-w",
            "--count",
            "3",
            "--json",
            &client.id().to_string(),
        ])
        .output()
        .unwrap();
    let took = t0.elapsed();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // A line per refresh for the one process, a second apart (a refresh
    // that finds no newer snapshot, as under a stalled publisher, has none).
    let refreshes: Vec<u64> = lines
        .iter()
        .map(|v| v["refresh"].as_u64().unwrap())
        .collect();
    assert!(refreshes.len() >= 2, "{lines:?}");
    assert!(refreshes.windows(2).all(|w| w[0] < w[1]), "{lines:?}");
    assert!(refreshes.iter().all(|r| (1..=3).contains(r)), "{lines:?}");
    assert!(took >= Duration::from_secs(3), "{took:?}");
    for v in &lines {
        assert_eq!(v["addr"], c_ip.to_string());
        let dt = v["interval_ms"].as_u64().unwrap();
        assert!((200..=3000).contains(&dt), "{v}");
        // The ping runs without pause: thousands of SENDs a second, none
        // refused.
        let r = &v["rates"];
        assert!(r["rdma_sends"].as_f64().unwrap() > 10.0, "{v}");
        assert!(r["sent_pkts"].as_f64().unwrap() >= r["rdma_sends"].as_f64().unwrap());
        assert_eq!(r["link_downed"], 0.0);
    }
    // Text: a line per process and refresh, refreshes apart by a blank line.
    let o = ndv(&dir)
        .args(["stat", "-w", "--count", "2", "--rxe"])
        .output()
        .unwrap();
    let text = String::from_utf8(o.stdout).unwrap();
    let blocks: Vec<&str> = text.split("\n\n").collect();
    assert_eq!(blocks.len(), 2, "{text}");
    for b in blocks {
        assert!((1..=2).contains(&b.trim_end().lines().count()), "{text}");
        assert!(b
            .lines()
            .all(|l| l.starts_with("link ") && l.contains(" rdma_sends ")));
        assert!(!b.contains("drop_bad_icrc"), "--rxe: {b}");
    }
    drop((client.kill(), server.kill()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `GET /metrics` (or another request line) from `at`: status line and body.
fn scrape(at: &str, request_line: &str) -> Option<(String, String)> {
    let mut c = std::net::TcpStream::connect(at).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    c.write_all(format!("{request_line}\r\nHost: test\r\n\r\n").as_bytes())
        .ok()?;
    let mut answer = String::new();
    c.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    Some((head.to_string(), body.to_string()))
}

#[test]
fn metrics_endpoint_of_a_running_process() {
    let dir = test_dir("endpoint");
    let (m_ip, _) = addr::pair_v4();
    let at = format!("{m_ip}:9464");
    let env = [("NDV_METRICS", at.clone())];
    let (server, client, s_ip, _) = ping_pair(&dir, 7444, &env);
    let (head, body) = scrape(&at, "GET /metrics HTTP/1.1").expect("no endpoint");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{head}"
    );
    let fams = omcheck::check(&body).unwrap_or_else(|e| panic!("{e}:\n{body}"));
    // The server's own device only (the client did not ask to be served).
    let sends = &fams
        .iter()
        .find(|f| f.name == "ndverbs_rdma_sends")
        .unwrap()
        .samples;
    assert_eq!(sends.len(), 1, "{sends:?}");
    let (ip, pid) = (s_ip.to_string(), server.id().to_string());
    assert!(sends[0].labels.contains(&("addr".into(), ip.clone())));
    assert!(sends[0].labels.contains(&("pid".into(), pid.clone())));
    assert!(sends[0].value > 10.0);
    // Counters move between scrapes.
    std::thread::sleep(Duration::from_millis(300));
    let (_, body2) = scrape(&at, "GET /metrics HTTP/1.1").unwrap();
    let fams2 = omcheck::check(&body2).unwrap();
    let labels = [("addr", ip.as_str()), ("pid", pid.as_str())];
    let v1 = omcheck::value(&fams, "ndverbs_rdma_sends_total", &labels).unwrap();
    let v2 = omcheck::value(&fams2, "ndverbs_rdma_sends_total", &labels).unwrap();
    assert!(v2 > v1, "{v1} then {v2}");
    // Bad requests are refused and the endpoint goes on.
    let (h, _) = scrape(&at, "GET /other HTTP/1.1").unwrap();
    assert!(h.starts_with("HTTP/1.1 404 "), "{h}");
    let (h, _) = scrape(&at, "BREW /metrics HTTP/1.1").unwrap();
    assert!(h.starts_with("HTTP/1.1 405 "), "{h}");
    let (h, _) = scrape(&at, "what").unwrap();
    assert!(h.starts_with("HTTP/1.1 400 "), "{h}");
    assert!(scrape(&at, "GET /metrics HTTP/1.0")
        .unwrap()
        .0
        .starts_with("HTTP/1.1 200 "));
    drop((client.kill(), server.kill()));
    // A malformed NDV_METRICS stops the tool before it opens anything.
    let o = ndv(&dir)
        .env("NDV_METRICS", "nowhere")
        .args(["devinfo"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("NDV_METRICS=nowhere"));
    let _ = std::fs::remove_dir_all(&dir);
}
