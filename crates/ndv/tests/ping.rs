//! `ndv ping` (rping-compatible): loopback, and against Linux `rping` in the
//! Soft-RoCE guest in both roles with `-V`, with DREQ and DREP on the wire and
//! every ICRC valid (checked by decoding a capture of the exchange).

mod support;

use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

fn ndv() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ndv"))
}

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
    let server = ndv()
        .args([
            "ping",
            "-s",
            "-a",
            "127.0.0.1",
            "-p",
            "7301",
            "-v",
            "-C",
            "3",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let client = ndv()
        .args([
            "ping",
            "-c",
            "-a",
            "127.0.0.1",
            "-I",
            "127.0.0.2",
            "-p",
            "7301",
            "-v",
            "-V",
            "-C",
            "3",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (ok_c, out_c) = wait_child(client, Duration::from_secs(60));
    let (ok_s, out_s) = wait_child(server, Duration::from_secs(60));
    assert!(ok_c && ok_s, "client:\n{out_c}\nserver:\n{out_s}");
    check_pings(&out_c, "ping data: ");
    check_pings(&out_s, "server ping data: ");
}

/// Decodes a capture and returns the CM message names in order, checking that
/// every RoCEv2 frame carries a valid ICRC.
fn cm_messages(pcap: &str) -> Vec<String> {
    let out = ndv().args(["decode", "--json", pcap]).output().unwrap();
    assert!(out.status.success());
    let mut msgs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["icrc_ok"], Value::Bool(true), "bad ICRC: {line}");
        if let Some(m) = v["cm"]["msg"].as_str() {
            msgs.push(format!("{}>{}", v["src"].as_str().unwrap(), m));
        }
    }
    msgs
}

fn capture(h: &Harness, name: &str) -> String {
    let path = std::env::temp_dir().join(format!("ndv-{name}-{}.pcap", std::process::id()));
    let p = path.to_string_lossy().into_owned();
    let o = Command::new(&h.run_guest)
        .args(["pcap-start", &p, "udp", "port", "4791"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "pcap-start: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // pcap-start can return before tcpdump listens (it may read the previous
    // run's log); tcpdump writes the file header once it does.
    let ready = retry(Duration::from_secs(10), || {
        std::fs::metadata(&path)
            .ok()
            .filter(|m| m.len() >= 24)
            .map(|_| ())
    });
    assert!(ready.is_some(), "tcpdump did not start");
    std::thread::sleep(Duration::from_millis(200));
    p
}

fn stop_capture(h: &Harness) {
    // tcpdump (without --immediate-mode) sees packets in blocks that the
    // kernel hands over after its buffer timeout: give it that long.
    std::thread::sleep(Duration::from_millis(1500));
    let _ = Command::new(&h.run_guest).arg("pcap-stop").output();
}

#[test]
fn rping_server_ndv_client() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = Harness::get() else { return };
    let pcap = capture(&h, "rping-server");
    let job = h.guest_bg(&format!(
        "timeout 60 rping -s -a {GUEST} -p 7311 -v -V -C 3"
    ));
    let (ok, out) = retry(Duration::from_secs(30), || {
        let o = h
            .ndv(&[
                "ping", "-c", "-a", GUEST, "-p", "7311", "-v", "-V", "-C", "3",
            ])
            .output()
            .unwrap();
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        // Until rping listens, its CM rejects with "invalid service ID".
        if text.contains("reason 8") {
            None
        } else {
            Some((o.status.success(), text))
        }
    })
    .expect("rping never listened");
    let (ok_g, out_g) = h.wait(&job);
    stop_capture(&h);
    assert!(ok && ok_g, "ndv:\n{out}\nrping:\n{out_g}");
    check_pings(&out, "ping data: ");
    check_pings(&out_g, "server ping data: ");
    let msgs = cm_messages(&pcap);
    for m in [
        format!("{HOST}>REQ"),
        format!("{GUEST}>REP"),
        format!("{HOST}>RTU"),
        format!("{HOST}>DREQ"),
        format!("{GUEST}>DREP"),
    ] {
        assert!(msgs.contains(&m), "{m} missing from {msgs:?}");
    }
    let _ = std::fs::remove_file(&pcap);
}

#[test]
fn ndv_server_rping_client() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = Harness::get() else { return };
    let pcap = capture(&h, "rping-client");
    let server = h.spawn_ndv(&["ping", "-s", "-a", HOST, "-p", "7312", "-v", "-C", "3"]);
    std::thread::sleep(Duration::from_millis(500));
    let o = h.guest(&format!("timeout 60 rping -c -a {HOST} -p 7312 -v -V -C 3"));
    let out_g =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    let (ok_s, out_s) = wait_child(server, Duration::from_secs(60));
    stop_capture(&h);
    assert!(o.status.success() && ok_s, "rping:\n{out_g}\nndv:\n{out_s}");
    check_pings(&out_g, "ping data: ");
    check_pings(&out_s, "server ping data: ");
    let msgs = cm_messages(&pcap);
    for m in [
        format!("{GUEST}>REQ"),
        format!("{HOST}>REP"),
        format!("{GUEST}>RTU"),
        format!("{GUEST}>DREQ"),
        format!("{HOST}>DREP"),
    ] {
        assert!(msgs.contains(&m), "{m} missing from {msgs:?}");
    }
    let _ = std::fs::remove_file(&pcap);
}
