//! Unreliable datagram QPs as C programs use them: `tests/c/ud.c`, compiled
//! against rdma-core's headers (libibverbs-dev), so `ibv_post_send` with
//! `wr.ud`, the completion's fields, `ibv_create_ah_from_wc` and the
//! `ibv_wr_*` calls with `ibv_wr_set_ud_addr` go through this crate's
//! exported symbols and op slots. Runs in a network namespace of its own,
//! with this run's `libibverbs.so.1` first on the library path.

mod common;

use common::{c_program, run_c_check};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `tests/c/ud.c` built, or `None` after the skip rule.
fn ud_program() -> Option<&'static Path> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    c_program(&BIN, "ud", &["-libverbs"], "libibverbs-dev")
}

#[test]
fn ud_datagrams_answered_from_their_completion_through_the_c_api() {
    run_c_check(ud_program(), "ud");
}
