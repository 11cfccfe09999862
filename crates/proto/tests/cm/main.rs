//! CM tests: two `CmAgent`s back to back on virtual time, Linux's captured
//! MADs, hostile input, and a many-seed simulation.

#[path = "../common/captures.rs"]
mod capture_files;
mod captures;
mod connect;
mod disconnect;
mod harness;
mod hostile;
mod lifecycle;
#[path = "../common/rng.rs"]
mod rng;
mod sidr;
mod sim;
