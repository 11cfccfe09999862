//! `ndv ping` (rping-compatible): loopback, and against Linux `rping` in the
//! Soft-RoCE guest in both roles with `-V`, with DREQ and DREP on the wire and
//! every ICRC valid (checked by decoding a capture of the exchange).

use ndverbs_testkit::addr;
use ndverbs_testkit::guest::{Guest, Listen, GUEST, HOST};
use ndverbs_testkit::process::{self, Running, LIMIT};
use ndverbs_testkit::rping;
use serde_json::Value;
use std::process::Command;

const NDV: &str = env!("CARGO_BIN_EXE_ndv");

const PINGS: [&str; 3] = [
    "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr",
    "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs",
    "rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrst",
];

fn check_pings(out: &str, prefix: &str) {
    for p in PINGS {
        assert!(
            out.contains(&format!("{prefix}{p}")),
            "missing {prefix}{p} in:\n{out}"
        );
    }
}

#[test]
fn loopback() {
    let (s, c) = addr::pair_v4();
    let (s, c) = (s.to_string(), c.to_string());
    let (out_c, out_s) = process::server_then_client(
        Command::new(NDV).args(["ping", "-s", "-a", &s, "-p", "7301", "-v", "-C", "3"]),
        Command::new(NDV).args([
            "ping", "-c", "-a", &s, "-I", &c, "-p", "7301", "-v", "-V", "-C", "3",
        ]),
        LIMIT,
    );
    check_pings(&out_c, "ping data: ");
    check_pings(&out_s, "server ping data: ");
}

/// A client pointed at an address where nothing speaks RoCE (no socket on
/// UDP 4791: its host answers ICMP port unreachable) ends at once with a
/// plain message and a failure status, instead of retrying its REQ for a
/// minute. (A host that runs RoCE without a listener on the port answers
/// with a REJ: `rping` says "connection refused"-like things for that.)
#[test]
fn client_to_an_address_without_roce_fails_fast() {
    let (nobody, c) = addr::pair_v4();
    let (nobody, c) = (nobody.to_string(), c.to_string());
    let t0 = std::time::Instant::now();
    let done = Running::spawn(Command::new(NDV).args([
        "ping", "-c", "-a", &nobody, "-I", &c, "-p", "7302", "-C", "1",
    ]))
    .wait(std::time::Duration::from_secs(20));
    let took = t0.elapsed();
    assert!(!done.timed_out, "{}", done.text());
    assert!(!done.ok, "{}", done.text());
    assert!(
        done.stderr().contains(&format!(
            "ndv ping: {nobody} has no RoCE endpoint (ICMP port unreachable)"
        )),
        "{}",
        done.text()
    );
    assert!(took < std::time::Duration::from_secs(5), "took {took:?}");
}

/// Decodes a capture (then removes it), checking that every RoCEv2 frame
/// carries a valid ICRC and that the connection went REQ, REP, RTU, DREQ,
/// DREP between `client` and `server`.
fn check_cm(pcap: &std::path::Path, client: &str, server: &str) {
    let out = Command::new(NDV)
        .args(["decode", "--json"])
        .arg(pcap)
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut msgs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["icrc_ok"], Value::Bool(true), "bad ICRC: {line}");
        if let Some(m) = v["cm"]["msg"].as_str() {
            msgs.push(format!("{}>{}", v["src"].as_str().unwrap(), m));
        }
    }
    for (from, m) in [
        (client, "REQ"),
        (server, "REP"),
        (client, "RTU"),
        (client, "DREQ"),
        (server, "DREP"),
    ] {
        let m = format!("{from}>{m}");
        assert!(msgs.contains(&m), "{m} missing from {msgs:?}");
    }
    let _ = std::fs::remove_file(pcap);
}

fn pcap_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ndv-{name}-{}.pcap", std::process::id()))
}

#[test]
fn rping_server_ndv_client() {
    let Some(g) = Guest::get() else { return };
    let pcap = pcap_path("rping-server");
    let capture = g.capture(&pcap, &["udp", "port", "4791"]);
    let job = g.spawn(&format!(
        "timeout 60 rping -s -a {GUEST} -p 7311 -v -V -C 3"
    ));
    g.wait_listening(&job, Listen::RdmaCm(7311));
    let c = Running::spawn(g.netns().command(NDV).args([
        "ping", "-c", "-a", GUEST, "-p", "7311", "-v", "-V", "-C", "3",
    ]))
    .wait(LIMIT);
    let out = c.text();
    let (ok_g, out_g) = g.wait(job);
    capture.stop();
    assert!(
        c.ok && rping::ended_well(ok_g, &out_g),
        "ndv:\n{out}\nrping:\n{out_g}"
    );
    check_pings(&out, "ping data: ");
    check_pings(&out_g, "server ping data: ");
    check_cm(&pcap, HOST, GUEST);
}

#[test]
fn ndv_server_rping_client() {
    let Some(g) = Guest::get() else { return };
    let pcap = pcap_path("rping-client");
    let capture = g.capture(&pcap, &["udp", "port", "4791"]);
    let server = process::start_server(
        g.netns()
            .command(NDV)
            .args(["ping", "-s", "-a", HOST, "-p", "7312", "-v", "-C", "3"]),
    );
    let (ok_g, out_g) = g.run(&format!("timeout 60 rping -c -a {HOST} -p 7312 -v -V -C 3"));
    let s = server.wait(LIMIT);
    let out_s = s.text();
    capture.stop();
    assert!(
        rping::ended_well(ok_g, &out_g) && s.ok,
        "rping:\n{out_g}\nndv:\n{out_s}"
    );
    check_pings(&out_g, "ping data: ");
    check_pings(&out_s, "server ping data: ");
    check_cm(&pcap, GUEST, HOST);
}
