//! RC protocol tests: two QPs back to back on virtual time.

mod basic;
mod errors;
mod faults;
mod harness;
mod hostile;
mod modify;
