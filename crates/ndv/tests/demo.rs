//! `ndv demo` (the README's main job) runs the whole lifecycle and exits 0.

use std::process::Command;

#[test]
fn demo_exits_zero_with_a_report() {
    let (server, client) = ndverbs_testkit::addr::pair_v4();
    let out = Command::new(env!("CARGO_BIN_EXE_ndv"))
        .args(["demo", "--bytes", "8388608", "--server"])
        .arg(server.to_string())
        .arg("--client")
        .arg(client.to_string())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    for needle in [
        "connect rejected: ND_CONNECTION_REFUSED",
        "SEND/RECEIVE",
        "RDMA WRITE 8 MiB",
        "RDMA READ 8 MiB",
        "FETCH&ADD",
        "close handshake + Disconnect on both sides",
        "one-sided Disconnect, peer NotifyDisconnect",
        "total:",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}
