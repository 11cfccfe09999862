//! RoCEv2 over IPv6 with the tools: `ndv ping` (rdma_cm) and `ndv pingpong`
//! (no CM) between two addresses on `lo` of one namespace, and between two
//! namespaces joined by a veth pair (MTU 1500). Needs root for the
//! namespaces: SKIPPED without, failing under `CI=true`.

mod netns;
mod pcapcheck;
mod support;

use netns::Netns;
use std::process::Stdio;
use std::time::Duration;
use support::wait_child;

const NDV: &str = env!("CARGO_BIN_EXE_ndv");
const LIMIT: Duration = Duration::from_secs(60);

/// `ndv ping` server in `ns_s` on `server`, client in `ns_c` from `client`;
/// the client captures into `pcap`, which must then hold the whole exchange.
fn ping(ns_s: &Netns, ns_c: &Netns, server: &str, client: &str, port: &str) {
    let pcap = std::env::temp_dir().join(format!("ndv-ipv6-{port}-{}.pcap", std::process::id()));
    let s = ns_s
        .command(NDV)
        .args(["ping", "-s", "-a", server, "-p", port, "-v", "-C", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let c = ns_c
        .command(NDV)
        .args([
            "ping", "-c", "-a", server, "-I", client, "-p", port, "-v", "-V", "-C", "3",
        ])
        .arg("--pcap")
        .arg(&pcap)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (ok_c, out_c) = wait_child(c, LIMIT);
    let (ok_s, out_s) = wait_child(s, LIMIT);
    assert!(ok_c && ok_s, "client:\n{out_c}\nserver:\n{out_s}");
    assert!(out_c.contains("ping data: rdma-ping-2: "), "{out_c}");
    assert!(out_s.contains("server ping data: rdma-ping-2: "), "{out_s}");
    let sum = pcapcheck::check(&pcap);
    assert_eq!(
        sum.cm,
        [
            format!("{client}>REQ"),
            format!("{server}>REP"),
            format!("{client}>RTU"),
            format!("{client}>DREQ"),
            format!("{server}>DREP"),
        ]
    );
    assert!(sum
        .json
        .iter()
        .all(|v| v["src"].as_str().unwrap().contains(':')));
    let _ = std::fs::remove_file(&pcap);
}

/// `ndv pingpong` server on `server`, client from `client` (TCP exchange over
/// IPv6 too), 4 KiB messages at path MTU `mtu`, with `--chk`.
fn pingpong(ns_s: &Netns, ns_c: &Netns, server: &str, client: &str, mtu: &str) {
    let s = ns_s
        .command(NDV)
        .args([
            "pingpong", "--ip", server, "-p", "18600", "-n", "200", "-m", mtu, "-c",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let c = ns_c
        .command(NDV)
        .args([
            "pingpong", "--ip", client, "-p", "18600", "-n", "200", "-m", mtu, "-c", server,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (ok_c, out_c) = wait_child(c, LIMIT);
    let (ok_s, out_s) = wait_child(s, LIMIT);
    assert!(ok_c && ok_s, "client:\n{out_c}\nserver:\n{out_s}");
    for (out, local, remote) in [(&out_c, client, server), (&out_s, server, client)] {
        assert!(out.contains(&format!("GID {local}\n")), "{out}");
        assert!(out.contains(&format!("GID {remote}\n")), "{out}");
        assert!(out.contains("200 iters in"), "{out}");
    }
}

#[test]
fn ping_and_pingpong_on_one_namespaces_lo() {
    let Some(ns) = Netns::with_lo_addrs("ndv over IPv6 on lo", &["fd00::1", "fd00::2"]) else {
        return;
    };
    ping(&ns, &ns, "fd00::1", "fd00::2", "7401");
    pingpong(&ns, &ns, "fd00::1", "fd00::2", "4096");
    // ::1 with another address.
    ping(&ns, &ns, "::1", "fd00::2", "7402");
}

#[test]
fn ping_and_pingpong_between_namespaces() {
    let Some((a, b)) = Netns::veth_pair(
        "ndv over IPv6 between namespaces",
        "fd00:88::1/64",
        "fd00:88::2/64",
    ) else {
        return;
    };
    ping(&a, &b, "fd00:88::1", "fd00:88::2", "7403");
    // MTU 1500: path MTU 1024 is the largest that fits, as for IPv4.
    pingpong(&a, &b, "fd00:88::1", "fd00:88::2", "1024");
}
