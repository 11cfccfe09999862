//! `ndv pingpong` on loopback and against rdma-core's `ibv_rc_pingpong` in the
//! Linux Soft-RoCE guest, in both roles.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

fn ndv() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ndv"))
}

/// The loopback check: server on 127.0.0.1, client from 127.0.0.2,
/// 4 KiB × 1000 with buffer validation.
#[test]
fn loopback_4k_1000_validated() {
    let port = "18601";
    let server = ndv()
        .args([
            "pingpong",
            "-p",
            port,
            "-s",
            "4096",
            "-n",
            "1000",
            "-c",
            "--ip",
            "127.0.0.1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let client = ndv()
        .args([
            "pingpong",
            "-p",
            port,
            "-s",
            "4096",
            "-n",
            "1000",
            "-c",
            "--ip",
            "127.0.0.2",
            "127.0.0.1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (ok_c, out_c) = wait_child(client, Duration::from_secs(60));
    let (ok_s, out_s) = wait_child(server, Duration::from_secs(60));
    assert!(ok_c && ok_s, "client:\n{out_c}\nserver:\n{out_s}");
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
    assert!(out_c.contains("GID ::ffff:127.0.0.2"), "{out_c}");
}

#[test]
fn ibv_rc_pingpong_server_ndv_client() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = Harness::get() else { return };
    let job = h.guest_bg("timeout 60 ibv_rc_pingpong -g 1 -c -p 18611 -n 500");
    let out = retry(Duration::from_secs(30), || {
        let o = h
            .ndv(&[
                "pingpong", "-g", "1", "-c", "-p", "18611", "-n", "500", GUEST,
            ])
            .output()
            .unwrap();
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        if text.contains("Couldn't connect") || text.contains("Connection refused") {
            None
        } else {
            Some((o.status.success(), text))
        }
    })
    .expect("server never listened");
    let (ok_g, out_g) = h.wait(&job);
    assert!(out.0, "ndv client:\n{}\nguest server:\n{out_g}", out.1);
    assert!(ok_g, "guest server failed:\n{out_g}\nndv:\n{}", out.1);
    assert!(out_g.contains("4096000 bytes in"), "{out_g}");
    assert!(!out_g.contains("invalid data"), "{out_g}");
    assert!(out.1.contains("GID ::ffff:10.77.0.2"), "{}", out.1);
}

#[test]
fn ndv_server_ibv_rc_pingpong_client() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(h) = Harness::get() else { return };
    let server = h.spawn_ndv(&["pingpong", "-g", "1", "-c", "-p", "18612", "-n", "500"]);
    std::thread::sleep(Duration::from_millis(300));
    let out_g = h.guest(&format!(
        "timeout 60 ibv_rc_pingpong -g 1 -c -p 18612 -n 500 {HOST}"
    ));
    let text_g = String::from_utf8_lossy(&out_g.stdout).into_owned()
        + &String::from_utf8_lossy(&out_g.stderr);
    let (ok_s, out_s) = wait_child(server, Duration::from_secs(60));
    assert!(
        out_g.status.success(),
        "guest client:\n{text_g}\nndv server:\n{out_s}"
    );
    assert!(ok_s, "ndv server:\n{out_s}\nguest:\n{text_g}");
    assert!(out_s.contains("4096000 bytes in"), "{out_s}");
    assert!(text_g.contains("500 iters in"), "{text_g}");
}
