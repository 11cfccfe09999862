//! Any byte string as a pcap/pcapng file, then every frame's IP packet as a
//! RoCEv2 datagram; the checks are in `crates/wire/tests/fuzz_checks/mod.rs`,
//! shared with the stable replay test.
#![no_main]

#[allow(dead_code)]
#[path = "../../crates/wire/tests/fuzz_checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_capture(data));
