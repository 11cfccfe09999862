//! The C API as programs use it: `tests/c/api.c`, compiled against
//! rdma-core's headers (libibverbs-dev) and linked with rdma-core's
//! `libibverbs.so`, runs with this crate's `libibverbs.so.1` first on the
//! library path — so every call goes through the exported symbols, the
//! inline data path through `ibv_context.ops`, and the structs as gcc lays
//! them out. Each check runs in a network namespace of its own, whose `lo`
//! (127.0.0.1, the first device there) nothing else binds.

mod common;

use common::{c_program, run_c_check};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `tests/c/api.c` built, or `None` after the skip rule.
fn api_program() -> Option<&'static Path> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    c_program(&BIN, "api", &["-libverbs"], "libibverbs-dev")
}

/// Runs `api CHECK` in a fresh namespace; returns its output after
/// checking it passed.
#[track_caller]
fn api(check: &str) -> Option<String> {
    run_c_check(api_program(), check)
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
fn a_cq_read_until_empty_after_each_completion_still_sees_every_message() {
    api("drain");
}

#[test]
fn an_opened_but_unused_device_sleeps_and_wakes_for_what_is_created() {
    api("idle");
}

#[test]
fn a_peer_reaching_unmapped_registered_memory_gets_an_access_error_not_a_crash() {
    api("unmapped");
}
