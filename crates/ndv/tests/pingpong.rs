//! `ndv pingpong` on loopback and against rdma-core's `ibv_rc_pingpong` in the
//! Linux Soft-RoCE guest, in both roles.

use ndverbs_testkit::addr;
use ndverbs_testkit::guest::{Guest, Listen, GUEST, HOST};
use ndverbs_testkit::process::{self, Running, LIMIT};
use std::process::Command;

const NDV: &str = env!("CARGO_BIN_EXE_ndv");

/// The loopback check — server on one address, client from
/// another, 4 KiB × 1000 with buffer validation.
#[test]
fn loopback_4k_1000_validated() {
    let (s, c) = addr::pair_v4();
    let (s, c) = (s.to_string(), c.to_string());
    let common = ["pingpong", "-p", "18601", "-s", "4096", "-n", "1000", "-c"];
    let (out_c, out_s) = process::server_then_client(
        Command::new(NDV).args(common).args(["--ip", &s]),
        Command::new(NDV).args(common).args(["--ip", &c, &s]),
        LIMIT,
    );
    for out in [&out_c, &out_s] {
        assert!(
            out.contains("  local address:  LID 0x0000, QPN 0x"),
            "{out}"
        );
        assert!(
            out.contains("  remote address: LID 0x0000, QPN 0x"),
            "{out}"
        );
        assert!(out.contains("8192000 bytes in "), "{out}");
        assert!(out.contains("1000 iters in "), "{out}");
        assert!(!out.contains("invalid data"), "{out}");
    }
    assert!(out_c.contains(&format!("GID ::ffff:{c}")), "{out_c}");
}

#[test]
fn ibv_rc_pingpong_server_ndv_client() {
    let Some(g) = Guest::get() else { return };
    let job = g.spawn("timeout 60 ibv_rc_pingpong -g 1 -c -p 18611 -n 500");
    g.wait_listening(&job, Listen::Tcp(18611));
    let client = Running::spawn(g.netns().command(NDV).args([
        "pingpong", "-g", "1", "-c", "-p", "18611", "-n", "500", GUEST,
    ]))
    .wait(LIMIT);
    let out = client.text();
    let (ok_g, out_g) = g.wait(job);
    assert!(client.ok, "ndv client:\n{out}\nguest server:\n{out_g}");
    assert!(ok_g, "guest server failed:\n{out_g}\nndv:\n{out}");
    assert!(out_g.contains("4096000 bytes in"), "{out_g}");
    assert!(!out_g.contains("invalid data"), "{out_g}");
    assert!(out.contains("GID ::ffff:10.77.0.2"), "{out}");
}

#[test]
fn ndv_server_ibv_rc_pingpong_client() {
    let Some(g) = Guest::get() else { return };
    let server = process::start_server(
        g.netns()
            .command(NDV)
            .args(["pingpong", "-g", "1", "-c", "-p", "18612", "-n", "500"]),
    );
    let (ok_g, text_g) = g.run(&format!(
        "timeout 60 ibv_rc_pingpong -g 1 -c -p 18612 -n 500 {HOST}"
    ));
    let s = server.wait(LIMIT);
    let out_s = s.text();
    assert!(ok_g, "guest client:\n{text_g}\nndv server:\n{out_s}");
    assert!(s.ok, "ndv server:\n{out_s}\nguest:\n{text_g}");
    assert!(out_s.contains("4096000 bytes in"), "{out_s}");
    assert!(text_g.contains("500 iters in"), "{text_g}");
}
