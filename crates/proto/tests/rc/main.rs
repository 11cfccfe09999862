//! RC protocol tests: two QPs back to back on virtual time.

mod basic;
mod captures;
mod errors;
mod faults;
mod harness;
mod hostile;
mod modify;
mod read_retry;
#[path = "../common/rng.rs"]
mod rng;
