//! The extended verbs as programs use them: `tests/c/extended.c`, compiled
//! against rdma-core's headers (libibverbs-dev), so `ibv_create_cq_ex`,
//! `ibv_create_qp_ex`, `ibv_start_poll` … and the `ibv_wr_*` calls are the
//! `verbs.h` inlines reaching this crate's `verbs_context` slots and
//! `ibv_cq_ex`/`ibv_qp_ex` function pointers. Each check runs in a network
//! namespace of its own, with this run's `libibverbs.so.1` first on the
//! library path.

mod common;

use common::{c_program, run_c_check};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `tests/c/extended.c` built, or `None` after the skip rule.
fn extended_program() -> Option<&'static Path> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    c_program(&BIN, "extended", &["-libverbs"], "libibverbs-dev")
}

#[test]
fn extended_cqs_poll_with_the_cq_ex_api_and_refuse_what_they_cannot_fill() {
    run_c_check(extended_program(), "cq_ex");
}

#[test]
fn extended_qps_post_with_the_wr_api_and_refuse_what_the_engine_lacks() {
    run_c_check(extended_program(), "qp_ex");
}

#[test]
fn rereg_mr_moves_a_region_to_other_memory_pd_or_rights_under_new_keys() {
    run_c_check(extended_program(), "rereg");
}

#[test]
fn threads_share_an_extended_qp_and_cq_and_each_completion_is_seen_once() {
    run_c_check(extended_program(), "threads");
}
