//! What the perftest modules' tests share: the programs by name, run
//! settings and headers as the reference logs were made, and rendering
//! output to a string.

use super::program::{Kind, PerfTest, Role, Verb};
use super::report::TestInfo;
use super::settings::Settings;
use std::io;

pub const SEND_BW: PerfTest = PerfTest::new(Verb::Send, Kind::Bw);
pub const WRITE_BW: PerfTest = PerfTest::new(Verb::Write, Kind::Bw);
pub const READ_BW: PerfTest = PerfTest::new(Verb::Read, Kind::Bw);
pub const ATOMIC_BW: PerfTest = PerfTest::new(Verb::Atomic, Kind::Bw);
pub const SEND_LAT: PerfTest = PerfTest::new(Verb::Send, Kind::Lat);
pub const WRITE_LAT: PerfTest = PerfTest::new(Verb::Write, Kind::Lat);
pub const READ_LAT: PerfTest = PerfTest::new(Verb::Read, Kind::Lat);

/// `test`'s default settings changed by `f` (the options given).
pub fn with(test: PerfTest, f: impl FnOnce(&mut Settings)) -> Settings {
    let mut s = Settings::defaults(test);
    f(&mut s);
    s
}

/// The header of `test` on the reference machine's `rxe0`.
pub fn info(test: PerfTest, role: Role, s: &Settings) -> TestInfo {
    TestInfo::new(test, role, "rxe0", &s.resolve(test, role))
}

/// What `f` writes, as text.
pub fn render(f: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> String {
    let mut v = Vec::new();
    f(&mut v).unwrap();
    String::from_utf8(v).unwrap()
}

/// The GID of `10.77.0.LAST`, the reference machines' addresses.
pub fn roce_gid(last: u8) -> [u8; 16] {
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, last]
}
