//! RC protocol tests: two QPs back to back on virtual time.

mod ack_requests;
mod basic;
#[path = "../common/captures.rs"]
mod capture_files;
mod captures;
mod cc_budget;
mod errors;
mod faults;
mod harness;
mod hostile;
mod modify;
#[path = "../common/qp.rs"]
mod qp;
mod read_retry;
mod reorder;
#[path = "../common/rng.rs"]
mod rng;
mod two;
