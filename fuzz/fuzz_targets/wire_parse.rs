//! Any byte string as an IP packet (RoCEv2 datagram), a UDP payload (BTH
//! onwards) and a MAD; the checks are in
//! `crates/wire/tests/fuzz_checks/mod.rs`, shared with the stable replay test.
#![no_main]

#[allow(dead_code)]
#[path = "../../crates/wire/tests/fuzz_checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_wire(data));
