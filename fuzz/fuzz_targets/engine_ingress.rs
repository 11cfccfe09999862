//! Arbitrary packets and MADs into a live RC QP and a live CM agent
//! (sans-IO: no sockets); the check is in
//! `crates/proto/tests/fuzz_checks/ingress.rs`, shared with the stable
//! replay test `crates/proto/tests/fuzz_ingress.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../../crates/proto/tests/fuzz_checks/ingress.rs"]
mod ingress;

libfuzzer_sys::fuzz_target!(|data: &[u8]| ingress::check_ingress(data));
