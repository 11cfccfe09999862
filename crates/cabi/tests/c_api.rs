//! The C API as programs use it: `tests/c/api.c`, compiled against
//! rdma-core's headers (libibverbs-dev) and linked with rdma-core's
//! `libibverbs.so`, runs with this crate's `libibverbs.so.1` first on the
//! library path — so every call goes through the exported symbols, the
//! inline data path through `ibv_context.ops`, and the structs as gcc lays
//! them out. Each check runs in a network namespace of its own, whose `lo`
//! (127.0.0.1, the first device there) nothing else binds.

mod common;

use common::{lib_dir, profile_dir};
use ndverbs_testkit::{netns::Netns, skip};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `tests/c/api.c` built, or `None` after the skip rule (no compiler or no
/// libibverbs-dev).
fn api_program() -> Option<&'static Path> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = BIN.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/api.c");
        // Built under a private name and renamed: test processes may run
        // at once.
        let out = profile_dir().join("cabi-api-test");
        let tmp = profile_dir().join(format!(".cabi-api-test.{}", std::process::id()));
        let o = Command::new("cc")
            .args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(&tmp)
            .arg(&src)
            .arg("-libverbs")
            .output()
            .map_err(|e| format!("cc: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "building tests/c/api.c needs gcc and libibverbs-dev (scripts/setup.sh): {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        std::fs::rename(&tmp, &out).map_err(|e| e.to_string())?;
        Ok(out)
    });
    skip::or_skip(r.as_ref().map(PathBuf::as_path), "the C API test program")
}

/// Runs `api CHECK` in a fresh namespace; returns its output after
/// checking it passed.
#[track_caller]
fn api(check: &str) -> Option<String> {
    let prog = api_program()?;
    if !skip::require_root("network namespaces") {
        return None;
    }
    let ns = skip::or_skip(Netns::new(), "a network namespace")?;
    let out = ns
        .command("timeout")
        .arg("60")
        .arg(prog)
        .arg(check)
        .env("LD_LIBRARY_PATH", lib_dir())
        .output()
        .expect("running the C API test");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "api {check}: {}\n{text}", out.status);
    assert!(text.contains(&format!("ok {check}")), "{text}");
    Some(text)
}

#[test]
fn devices_contexts_and_queries() {
    api("devices");
}

#[test]
fn bad_pointers_and_arguments_get_rdma_cores_errno() {
    api("errors");
}

#[test]
fn any_user_memory_registers_in_place() {
    api("mr");
}

#[test]
fn one_channel_multiplexes_cqs_and_says_which_fired() {
    api("channel");
}

#[test]
fn send_imm_inline_write_read_and_atomics_through_the_inline_data_path() {
    api("loop");
}

#[test]
fn shared_receive_queues() {
    api("srq");
}

#[test]
fn a_peer_reaching_unmapped_registered_memory_gets_an_access_error_not_a_crash() {
    api("unmapped");
}
