//! The tools on a link with an Ethernet MTU (two network namespaces joined
//! by a veth pair, MTU 1500, so the port's active MTU is 1024): by default
//! they run at the active MTU, and a larger `-m` is lowered to it with
//! perftest's message instead of producing nothing.

mod programs;

use ndverbs_testkit::netns::Netns;
use ndverbs_testkit::process::{self, LIMIT};
use programs::rows;

use programs::NDV;
const LOWERED: &str = "Requested mtu is higher than active mtu \nChanging to active mtu - 3\n";

/// `ndv perf write_bw` with `extra` on both sides, A serving B; returns
/// (client output, server output).
fn write_bw(a: &str, b: &str, port: &str, extra: &[&str]) -> Option<(String, String)> {
    let (na, nb) = Netns::veth_pair(&format!("{a}/24"), &format!("{b}/24"))?;
    let common = ["perf", "write_bw", "-s", "65536", "-n", "300", "-p", port];
    let mut server = na.command(NDV);
    server.args(common).args(extra);
    let mut client = nb.command(NDV);
    client.args(common).args(extra).arg(a);
    Some(process::server_then_client(&mut server, &mut client, LIMIT))
}

#[test]
fn perf_runs_at_the_active_mtu_by_default() {
    let Some((c, s)) = write_bw("10.99.3.1", "10.99.3.2", "18711", &[]) else {
        return;
    };
    for out in [&c, &s] {
        assert!(out.contains(" Mtu             : 1024[B]"), "{out}");
        assert!(!out.contains("Requested mtu"), "{out}");
    }
    let r = rows(&c);
    assert_eq!(r.len(), 1, "{c}");
    assert!(r[0][1] == 300.0 && r[0][3] > 0.0, "{c}");
}

#[test]
fn perf_lowers_a_larger_mtu_to_the_active_one_with_perftests_message() {
    let Some((c, s)) = write_bw("10.99.4.1", "10.99.4.2", "18712", &["-m", "4096"]) else {
        return;
    };
    for out in [&c, &s] {
        assert!(out.contains(LOWERED), "{out}");
        assert!(out.contains(" Mtu             : 1024[B]"), "{out}");
    }
    let r = rows(&c);
    assert_eq!(r.len(), 1, "{c}");
    assert!(r[0][1] == 300.0 && r[0][3] > 0.0, "{c}");
}

#[test]
fn pingpong_lowers_a_larger_mtu_and_runs() {
    let Some((na, nb)) = Netns::veth_pair("10.99.5.1/24", "10.99.5.2/24") else {
        return;
    };
    let common = [
        "pingpong", "-p", "18713", "-n", "100", "-s", "8192", "-c", "-m", "4096",
    ];
    let mut server = na.command(NDV);
    server.args(common);
    let mut client = nb.command(NDV);
    client.args(common).arg("10.99.5.1");
    let (c, s) = process::server_then_client(&mut server, &mut client, LIMIT);
    for out in [&c, &s] {
        assert!(out.contains(LOWERED), "{out}");
        assert!(out.contains("1638400 bytes in"), "{out}");
    }
}
