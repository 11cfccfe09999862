//! RoCEv2 over IPv6 with the tools: `ndv ping` (rdma_cm) and `ndv pingpong`
//! (no CM) between two addresses on `lo` of one namespace, and between two
//! namespaces joined by a veth pair (MTU 1500). Needs root for the
//! namespaces: SKIPPED without, failing under `CI=true`.

mod pcapcheck;

use ndverbs_testkit::addr;
use ndverbs_testkit::netns::Netns;
use ndverbs_testkit::process::{self, LIMIT};

const NDV: &str = env!("CARGO_BIN_EXE_ndv");

/// `ndv ping` server in `ns_s` on `server`, client in `ns_c` from `client`;
/// the client captures into `pcap`, which must then hold the whole exchange.
fn ping(ns_s: &Netns, ns_c: &Netns, server: &str, client: &str, port: &str) {
    let pcap = std::env::temp_dir().join(format!("ndv-ipv6-{port}-{}.pcap", std::process::id()));
    let (out_c, out_s) = process::server_then_client(
        ns_s.command(NDV)
            .args(["ping", "-s", "-a", server, "-p", port, "-v", "-C", "3"]),
        ns_c.command(NDV)
            .args([
                "ping", "-c", "-a", server, "-I", client, "-p", port, "-v", "-V", "-C", "3",
            ])
            .arg("--pcap")
            .arg(&pcap),
        LIMIT,
    );
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
    let common = ["pingpong", "-p", "18600", "-n", "200", "-m", mtu, "-c"];
    let (out_c, out_s) = process::server_then_client(
        ns_s.command(NDV).args(common).args(["--ip", server]),
        ns_c.command(NDV)
            .args(common)
            .args(["--ip", client, server]),
        LIMIT,
    );
    for (out, local, remote) in [(&out_c, client, server), (&out_s, server, client)] {
        assert!(out.contains(&format!("GID {local}\n")), "{out}");
        assert!(out.contains(&format!("GID {remote}\n")), "{out}");
        assert!(out.contains("200 iters in"), "{out}");
    }
}

#[test]
fn ping_and_pingpong_on_one_namespaces_lo() {
    let (a, b) = addr::pair_v6();
    let Some(ns) = Netns::with_lo_addrs(&[a, b]) else {
        return;
    };
    let (a, b) = (a.to_string(), b.to_string());
    ping(&ns, &ns, &a, &b, "7401");
    pingpong(&ns, &ns, &a, &b, "4096");
    // ::1 with another address.
    ping(&ns, &ns, "::1", &b, "7402");
}

#[test]
fn ping_and_pingpong_between_namespaces() {
    let (a, b) = addr::pair_v6();
    let Some((ns_a, ns_b)) = Netns::veth_pair(&format!("{a}/64"), &format!("{b}/64")) else {
        return;
    };
    let (a, b) = (a.to_string(), b.to_string());
    ping(&ns_a, &ns_b, &a, &b, "7403");
    // MTU 1500: path MTU 1024 is the largest that fits, as for IPv4.
    pingpong(&ns_a, &ns_b, &a, &b, "1024");
}
