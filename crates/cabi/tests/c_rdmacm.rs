//! The librdmacm C API as programs use it: `tests/c/rdmacm.c`, compiled
//! against rdma-core's headers (librdmacm-dev) and linked with rdma-core's
//! `librdmacm.so`, runs with this crate's libraries first on the library
//! path (`librdmacm.so.1` is a link to `libibverbs.so.1`) — so every call
//! goes through the exported symbols and the structs as gcc lays them out.
//! Each check runs in a network namespace of its own, whose `lo` nothing
//! else binds; connections go from the process to itself.

mod common;

use common::{c_program, run_c_check};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `tests/c/rdmacm.c` built, or `None` after the skip rule.
fn program() -> Option<&'static Path> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    c_program(
        &BIN,
        "rdmacm",
        &["-lrdmacm", "-libverbs", "-lpthread"],
        "librdmacm-dev",
    )
}

/// Runs `rdmacm CHECK` in a fresh namespace and checks it passed.
#[track_caller]
fn run(check: &str) {
    run_c_check(program(), check);
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

#[test]
fn the_peers_disconnect_waits_for_its_last_message_to_be_polled() {
    run("drain");
}

#[test]
fn udp_port_space_sidr_events_and_a_datagram() {
    run("ud");
}

#[test]
fn udp_port_space_synchronous_endpoints() {
    run("udsync");
}
