//! The librdmacm C API as programs use it: `tests/c/rdmacm.c`, compiled
//! against rdma-core's headers (librdmacm-dev) and linked with rdma-core's
//! `librdmacm.so`, runs with this crate's libraries first on the library
//! path (`librdmacm.so.1` is a link to `libibverbs.so.1`) — so every call
//! goes through the exported symbols and the structs as gcc lays them out.
//! Each check runs in a network namespace of its own, whose `lo` nothing
//! else binds; connections go from the process to itself.

mod common;

use common::{lib_dir, profile_dir};
use ndverbs_testkit::{netns::Netns, skip};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `tests/c/rdmacm.c` built, or `None` after the skip rule (no compiler or
/// no librdmacm-dev).
fn program() -> Option<&'static Path> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = BIN.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/rdmacm.c");
        let out = profile_dir().join("cabi-rdmacm-test");
        let tmp = profile_dir().join(format!(".cabi-rdmacm-test.{}", std::process::id()));
        let o = Command::new("cc")
            .args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(&tmp)
            .arg(&src)
            .args(["-lrdmacm", "-libverbs", "-lpthread"])
            .output()
            .map_err(|e| format!("cc: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "building tests/c/rdmacm.c needs gcc and librdmacm-dev (scripts/setup.sh): {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        std::fs::rename(&tmp, &out).map_err(|e| e.to_string())?;
        Ok(out)
    });
    skip::or_skip(
        r.as_ref().map(PathBuf::as_path),
        "the rdma_cm C test program",
    )
}

/// Runs `rdmacm CHECK` in a fresh namespace and checks it passed.
#[track_caller]
fn run(check: &str) {
    let Some(prog) = program() else { return };
    if !skip::require_root("network namespaces") {
        return;
    }
    let Some(ns) = skip::or_skip(Netns::new(), "a network namespace") else {
        return;
    };
    let out = ns
        .command("timeout")
        .arg("60")
        .arg(prog)
        .arg(check)
        .env("LD_LIBRARY_PATH", lib_dir())
        .output()
        .expect("running the rdma_cm C test");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "rdmacm {check}: {}\n{text}",
        out.status
    );
    assert!(text.contains(&format!("ok {check}")), "{text}");
}

#[test]
fn bad_ids_states_options_and_ports_get_rdma_cores_errno() {
    run("errors");
}

#[test]
fn event_channel_fd_blocks_polls_goes_nonblocking_and_ids_migrate() {
    run("channel");
}

#[test]
fn destroy_id_waits_for_the_ack_and_drops_queued_events() {
    run("destroy");
}

#[test]
fn getaddrinfo_active_passive_and_errors() {
    run("getaddrinfo");
}

#[test]
fn connect_accept_reject_and_disconnect_with_private_data() {
    run("connect");
}

#[test]
fn synchronous_endpoints_without_a_channel() {
    run("sync");
}

#[test]
fn application_qp_with_qp_num_init_qp_attr_and_establish() {
    run("ownqp");
}
