//! The TCP exchange of perftest 4.5 (`ib_send_bw` … `ib_atomic_lat`) without `-R`.
//!
//! Source: linux-rdma/perftest tag `v4.5-0.17` (Debian 12's `perftest
//! 4.5+0.17-1`, whose `VERSION` string is `"6.06"`): `src/perftest_communication.c`
//! (`ctx_xchg_data_ethernet`, `ethernet_write_keys`/`ethernet_read_keys`,
//! `ctx_hand_shake`, `exchange_versions`, `check_sys_data`, `check_mtu`,
//! `xchg_bw_reports`, `ctx_close_connection`) and the `main` of each test.
//! Every byte count and order below was checked against captures of the
//! real tools (see the tests).
//!
//! # One primitive: the exchange
//!
//! Everything is built on `ctx_xchg_data`: both sides send a block of the
//! same size; **the client writes first and then reads, the server reads
//! first and then writes**. So every exchange is a barrier: neither side
//! leaves it before the other entered it.
//!
//! # The preamble (every test, right after `connect`/`accept`)
//!
//! | block | size | content |
//! |---|---|---|
//! | version | 16 | `"6.06"` NUL-padded (`char version[16]`, `strncpy`) |
//! | page size | 4 | big-endian `int`, `sysconf(_SC_PAGESIZE)` (4096) |
//! | cache line | 4 | big-endian `int` (64) |
//! | MTU | 2 | `sprintf("%d", ibv_mtu enum)`, e.g. `"3\0"` for 1024 |
//!
//! A peer whose version `atof()`s below 5.70 makes perftest 4.5 exit.
//! Each side then uses the larger page and cache-line sizes and the smaller
//! MTU. (The two 4-byte blocks are skipped for peers older than 5.32 and the
//! MTU block is 4 bytes for peers older than 5.31, but such peers are
//! rejected anyway.)
//!
//! # The hand shake
//!
//! `ctx_hand_shake` is one exchange of the local QP's "keys", a 108-byte
//! text message ([`super::keys`]).
//!
//! The tests call `ctx_hand_shake` several times with the *same* keys: the
//! first carries the information, the others are barriers ("my QP is in RTS",
//! "my receives are posted", "I finished"). Their number differs per test
//! and per side; a peer that does one hand shake too many or too few
//! deadlocks. [`super::schedule`] lists them, in order, for each test.
//!
//! # Results and the end
//!
//! * `xchg_bw_reports` (READ/WRITE/atomic BW: the client sends its result to
//!   the server, which prints it; `-b` tests: both sum them): five 8-byte
//!   exchanges, size and iterations as big-endian `u64`, peak BW, average BW
//!   and message rate as big-endian IEEE-754 doubles. The server of a
//!   unidirectional test sends uninitialised stack memory, which the client
//!   ignores.
//! * `ctx_close_connection`: one more hand shake, then each side writes
//!   `"done\0"` (5 bytes) and closes **without reading** the peer's; which
//!   `"done"` travels first is a race. `ib_write_lat` never closes this way:
//!   it just exits after its last hand shake.
//!
//! Captured `ib_write_bw -x 1 -n 5 -s 4096` (client `C`, server `S`, sizes
//! in bytes): `C16 S16 C4 S4 C4 S4 C2 S2`, four `C108 S108`, the run, five
//! `C8 S8`, `C108 S108`, `S5 C5`.
//!
//! # Versions
//!
//! Advertising `"6.06"` keeps newer perftest releases on this same protocol:
//! release 26.x (version 6.28+) adds a binary parameter negotiation only
//! when the *peer's* version is at least 6.28.

use super::keys::PerftestDest;
use super::program::Role;
use crate::oob::{c_text, read_full, OobError};
use std::io::{Read, Write};

/// Default TCP port (`DEF_PORT`).
pub const DEFAULT_PORT: u16 = 18515;
/// The version string perftest 4.5-0.17 sends.
pub const VERSION: &str = "6.06";
/// Size of the version block (`MAX_VERSION`).
pub const VERSION_LEN: usize = 16;
/// perftest 4.5 refuses peers whose version `atof()`s below this.
pub const MIN_PEER_VERSION: f64 = 5.70;
/// What each side writes at the end (`sizeof "done"`).
pub const DONE: &[u8; 5] = b"done\0";
/// Default page size sent in the preamble (`DEF_PAGE_SIZE`).
pub const DEFAULT_PAGE_SIZE: u32 = 4096;
/// Default cache line size sent in the preamble (`DEF_CACHE_LINE_SIZE`).
pub const DEFAULT_CACHE_LINE_SIZE: u32 = 64;

/// One `ctx_xchg_data`: the client writes `mine` then reads `theirs`, the
/// server reads then writes. Both buffers must have the same size.
pub fn xchg_data<S: Read + Write>(
    stream: &mut S,
    role: Role,
    mine: &[u8],
    theirs: &mut [u8],
    what: &'static str,
) -> Result<(), OobError> {
    debug_assert_eq!(mine.len(), theirs.len());
    match role {
        Role::Client => {
            stream.write_all(mine)?;
            stream.flush()?;
            read_full(stream, theirs, what)
        }
        Role::Server => {
            read_full(stream, theirs, what)?;
            stream.write_all(mine)?;
            stream.flush()?;
            Ok(())
        }
    }
}

/// `ctx_hand_shake`: exchange key messages (108 bytes each way).
pub fn hand_shake<S: Read + Write>(
    stream: &mut S,
    role: Role,
    mine: &PerftestDest,
) -> Result<PerftestDest, OobError> {
    let msg = mine.to_wire();
    let mut buf = [0u8; PerftestDest::TEXT_LEN];
    xchg_data(stream, role, &msg, &mut buf, "perftest key message")?;
    PerftestDest::from_wire(&buf)
}

/// `ibv_mtu` enum value (1 = 256 … 5 = 4096) of an MTU in bytes.
pub fn mtu_enum(bytes: u32) -> Option<u8> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// MTU in bytes of an `ibv_mtu` enum value.
pub fn mtu_bytes(mtu: u8) -> Option<u32> {
    (1..=5).contains(&mtu).then(|| 128u32 << mtu)
}

/// What this side sends in the preamble.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preamble {
    /// Version string, at most 15 bytes (sent NUL-padded to 16).
    pub version: String,
    /// Page size (`cycle_buffer`).
    pub page_size: u32,
    /// Cache line size.
    pub cache_line_size: u32,
    /// This port's active MTU as an `ibv_mtu` enum value (3 = 1024).
    pub mtu: u8,
}

impl Preamble {
    /// perftest 4.5's values for a port with the given MTU (in bytes;
    /// anything but 256…4096 is sent as 1024).
    pub fn new(mtu_bytes: u32) -> Self {
        Preamble {
            version: VERSION.to_string(),
            page_size: DEFAULT_PAGE_SIZE,
            cache_line_size: DEFAULT_CACHE_LINE_SIZE,
            mtu: mtu_enum(mtu_bytes).unwrap_or(3),
        }
    }
}

/// What the peer sent in the preamble, and what both sides then use.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerPreamble {
    /// The peer's version string (up to its NUL).
    pub version: String,
    /// `atof()` of it.
    pub version_number: f64,
    /// The peer's page size.
    pub page_size: u32,
    /// The peer's cache line size.
    pub cache_line_size: u32,
    /// The peer's MTU enum value as `strtol` reads it (0 if unreadable).
    pub mtu: i64,
    /// max(ours, theirs), as perftest uses from now on.
    pub agreed_page_size: u32,
    /// max(ours, theirs).
    pub agreed_cache_line_size: u32,
    /// The MTU both use: the peer's if it is a valid enum value smaller than
    /// ours, else ours (`check_mtu`). Printed as `Mtu : …[B]`.
    pub agreed_mtu: u8,
}

/// The preamble (`exchange_versions`, `check_version_compatibility`,
/// `check_sys_data`, `check_mtu`): four exchanges of 16, 4, 4 and 2 bytes.
///
/// A peer version below 5.70 is [`OobError::IncompatibleVersion`] right after
/// the first exchange, where perftest 4.5 would exit.
pub fn exchange_preamble<S: Read + Write>(
    stream: &mut S,
    role: Role,
    mine: &Preamble,
) -> Result<PeerPreamble, OobError> {
    let mut version = [0u8; VERSION_LEN];
    let v = mine.version.as_bytes();
    let n = v.len().min(VERSION_LEN - 1);
    version[..n].copy_from_slice(&v[..n]);
    let mut theirs = [0u8; VERSION_LEN];
    xchg_data(stream, role, &version, &mut theirs, "perftest version")?;
    let remote = String::from_utf8_lossy(c_text(&theirs)).into_owned();
    let version_number = c_atof(&remote);
    if version_number.is_nan() || version_number < MIN_PEER_VERSION {
        return Err(OobError::IncompatibleVersion { remote });
    }

    let page_size = xchg_u32(stream, role, mine.page_size, "perftest page size")?;
    let cache_line_size = xchg_u32(
        stream,
        role,
        mine.cache_line_size,
        "perftest cache line size",
    )?;

    // sprintf(cur, "%d", mtu) into a char[4], of which 2 bytes are sent.
    let mut cur = [0u8; 4];
    let digits = mine.mtu.to_string();
    cur[..digits.len().min(3)].copy_from_slice(&digits.as_bytes()[..digits.len().min(3)]);
    let mut rem = [0u8; 2];
    xchg_data(stream, role, &cur[..2], &mut rem, "perftest MTU")?;
    let mtu = c_strtol(c_text(&rem));
    let agreed_mtu = if (1..=5).contains(&mtu) && i64::from(mine.mtu) > mtu {
        mtu as u8
    } else {
        mine.mtu
    };

    Ok(PeerPreamble {
        version: remote,
        version_number,
        page_size,
        cache_line_size,
        mtu,
        agreed_page_size: page_size.max(mine.page_size),
        agreed_cache_line_size: cache_line_size.max(mine.cache_line_size),
        agreed_mtu,
    })
}

/// Exchanges one big-endian 32-bit value with the peer (`what` names it
/// in errors).
fn xchg_u32<S: Read + Write>(
    stream: &mut S,
    role: Role,
    mine: u32,
    what: &'static str,
) -> Result<u32, OobError> {
    let mut theirs = [0u8; 4];
    xchg_data(stream, role, &mine.to_be_bytes(), &mut theirs, what)?;
    Ok(u32::from_be_bytes(theirs))
}

/// A BW result as `xchg_bw_reports` sends it (`struct bw_report_data`, the
/// fields that go on the wire; BW in the units of the report format).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwReport {
    /// Message size in bytes.
    pub size: u64,
    /// Messages counted (iterations × QPs, or the count of a `-D` run).
    pub iters: u64,
    /// Peak BW (0 when not computed).
    pub bw_peak: f64,
    /// Average BW.
    pub bw_avg: f64,
    /// Message rate in Mpps.
    pub msg_rate: f64,
}

impl BwReport {
    /// `print_full_bw_report`'s sum for bidirectional tests: BW and rate
    /// add up, size and iterations are this side's.
    pub fn sum(&self, remote: &BwReport) -> BwReport {
        BwReport {
            bw_peak: self.bw_peak + remote.bw_peak,
            bw_avg: self.bw_avg + remote.bw_avg,
            msg_rate: self.msg_rate + remote.msg_rate,
            ..*self
        }
    }
}

/// `xchg_bw_reports` with a ≥ 5.33 peer: five 8-byte exchanges.
pub fn exchange_bw_reports<S: Read + Write>(
    stream: &mut S,
    role: Role,
    mine: &BwReport,
) -> Result<BwReport, OobError> {
    let mut b = [0u8; 8];
    let mut next = |v: [u8; 8], what| -> Result<[u8; 8], OobError> {
        xchg_data(stream, role, &v, &mut b, what)?;
        Ok(b)
    };
    let size = u64::from_be_bytes(next(mine.size.to_be_bytes(), "BW report size")?);
    let iters = u64::from_be_bytes(next(mine.iters.to_be_bytes(), "BW report iterations")?);
    let bw_peak = f64::from_be_bytes(next(mine.bw_peak.to_be_bytes(), "BW report peak")?);
    let bw_avg = f64::from_be_bytes(next(mine.bw_avg.to_be_bytes(), "BW report average")?);
    let msg_rate = f64::from_be_bytes(next(mine.msg_rate.to_be_bytes(), "BW report rate")?);
    Ok(BwReport {
        size,
        iters,
        bw_peak,
        bw_avg,
        msg_rate,
    })
}

/// The result of [`close_connection`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed {
    /// The peer's keys from the final hand shake.
    pub remote: PerftestDest,
    /// Whether the peer's `"done"` arrived (perftest never reads it; we do,
    /// so that closing does not reset the connection under unread data).
    pub peer_done: bool,
}

/// `ctx_close_connection`: a hand shake, then `"done\0"`. Afterwards the
/// peer's own `"done"` is read if it comes (a perftest peer always writes it
/// without waiting for anything); its absence is not an error.
pub fn close_connection<S: Read + Write>(
    stream: &mut S,
    role: Role,
    mine: &PerftestDest,
) -> Result<Closed, OobError> {
    let remote = hand_shake(stream, role, mine)?;
    stream.write_all(DONE)?;
    stream.flush()?;
    let mut done = [0u8; DONE.len()];
    let peer_done = read_full(stream, &mut done, "perftest \"done\"").is_ok() && &done == DONE;
    Ok(Closed { remote, peer_done })
}

/// C `atof` on a version string: the longest leading decimal number, 0 if none.
fn c_atof(s: &str) -> f64 {
    let s = s.trim_start();
    let b = s.as_bytes();
    let mut end = 0;
    if end < b.len() && (b[end] == b'+' || b[end] == b'-') {
        end += 1;
    }
    let digits_start = end;
    while end < b.len() && b[end].is_ascii_digit() {
        end += 1;
    }
    if end < b.len() && b[end] == b'.' {
        end += 1;
        while end < b.len() && b[end].is_ascii_digit() {
            end += 1;
        }
    }
    if end == digits_start || &s[digits_start..end] == "." {
        return 0.0;
    }
    s[..end].parse().unwrap_or(0.0)
}

/// C `strtol(s, NULL, 10)`: leading whitespace, sign, digits; 0 if none.
fn c_strtol(b: &[u8]) -> i64 {
    let s = String::from_utf8_lossy(b);
    let s = s.trim_start();
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let v = digits.parse::<i64>().unwrap_or(0);
    if neg {
        -v
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::super::program::{Kind, PerfTest, Verb};
    use super::super::schedule::{schedule, Flow, Step};
    use super::super::testing::roce_gid;
    use super::*;
    use crate::oob::testutil::{unhex, Scripted};

    // perftest 4.5-0.17 in the interop guest (Debian 12, rxe0), loopback,
    // `ib_write_bw -d rxe0 -x 1 -n 5 -s 4096 -p 18651 [127.0.0.1]`, captured
    // with `tcpdump -i lo`. The whole TCP payload, message by message.
    const WRITE_BW_CLIENT_KEYS: &[u8] = b"0000:0001:00002f:e9d901:000037d4:0000561374b66000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:\0";
    const WRITE_BW_SERVER_KEYS: &[u8] = b"0000:0001:00002e:e8ef7a:0000366f:000055afeb940000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:\0";
    /// (sender, hex payload) in capture order; "K" stands for that side's key message.
    const WRITE_BW_TRACE: &[(char, &str)] = &[
        ('C', "362e3036000000000000000000000000"),
        ('S', "362e3036000000000000000000000000"),
        ('C', "00001000"),
        ('S', "00001000"),
        ('C', "00000040"),
        ('S', "00000040"),
        ('C', "3300"),
        ('S', "3300"),
        ('C', "K"),
        ('S', "K"),
        ('C', "K"),
        ('S', "K"),
        ('C', "K"),
        ('S', "K"),
        ('C', "K"),
        ('S', "K"),
        ('C', "0000000000001000"),
        ('S', "00007fff377be284"),
        ('C', "0000000000000005"),
        ('S', "00007f24bbad211a"),
        ('C', "40399d19ee376630"),
        ('S', "0000000000000006"),
        ('C', "402ee92b66a6c50e"),
        ('S', "00007fff377fc300"),
        ('C', "3f7034c7a2e32017"),
        ('S', "00007fff377be284"),
        ('C', "K"),
        ('S', "K"),
        ('S', "646f6e6500"),
        ('C', "646f6e6500"),
    ];

    fn write_bw_client() -> PerftestDest {
        PerftestDest {
            lid: 0,
            out_reads: 1,
            qpn: 0x2f,
            psn: 0xe9d901,
            rkey: 0x37d4,
            vaddr: 0x5613_74b6_6000,
            gid: roce_gid(2),
            srqn: 0,
        }
    }

    fn write_bw_server() -> PerftestDest {
        PerftestDest {
            qpn: 0x2e,
            psn: 0xe8ef7a,
            rkey: 0x366f,
            vaddr: 0x55af_eb94_0000,
            ..write_bw_client()
        }
    }

    fn trace_payload(side: char) -> Vec<Vec<u8>> {
        WRITE_BW_TRACE
            .iter()
            .filter(|(s, _)| *s == side)
            .map(|(s, hex)| match (*s, *hex) {
                ('C', "K") => WRITE_BW_CLIENT_KEYS.to_vec(),
                ('S', "K") => WRITE_BW_SERVER_KEYS.to_vec(),
                _ => unhex(hex),
            })
            .collect()
    }

    #[test]
    fn mtu_values() {
        assert_eq!(mtu_enum(1024), Some(3));
        assert_eq!(mtu_bytes(3), Some(1024));
        assert_eq!(mtu_bytes(5), Some(4096));
        assert_eq!(mtu_bytes(0), None);
        assert_eq!(mtu_enum(1500), None);
        assert_eq!(c_atof("6.06"), 6.06);
        assert_eq!(c_atof("25.01.0-0.80"), 25.01);
        assert_eq!(c_atof("x"), 0.0);
        assert_eq!(c_strtol(b"3"), 3);
        assert_eq!(c_strtol(b"z"), 0);
    }

    /// Walks `steps` doing the exchanges; returns the remote keys, the BW
    /// report received, and whether the peer's "done" came.
    fn drive<S: Read + Write>(
        stream: &mut S,
        role: Role,
        steps: &[Step],
        mine: &PerftestDest,
        report: &BwReport,
    ) -> Result<(PerftestDest, Option<BwReport>, PeerPreamble), OobError> {
        let mut remote = None;
        let mut peer = None;
        let mut got = None;
        for step in steps {
            match step {
                Step::Preamble => {
                    peer = Some(exchange_preamble(stream, role, &Preamble::new(1024))?)
                }
                Step::HandShake => remote = Some(hand_shake(stream, role, mine)?),
                Step::ExchangeBwReports => got = Some(exchange_bw_reports(stream, role, report)?),
                Step::Close => remote = Some(close_connection(stream, role, mine)?.remote),
                _ => {}
            }
        }
        Ok((remote.unwrap(), got, peer.unwrap()))
    }

    /// Our `role` of ib_write_bw, with keys `mine` and BW report `report`,
    /// against the bytes the real other side sent (which it must read to the
    /// end); the stream, holding what we wrote, and what [`drive`] returned.
    fn replay_write_bw(
        role: Role,
        mine: &PerftestDest,
        report: &BwReport,
    ) -> (Scripted, (PerftestDest, Option<BwReport>, PeerPreamble)) {
        let peer = if role == Role::Server { 'C' } else { 'S' };
        let mut s = Scripted::new(trace_payload(peer).concat());
        let test = PerfTest::new(Verb::Write, Kind::Bw);
        let steps = schedule(test, role, Flow::default());
        let got = drive(&mut s, role, &steps, mine, report).unwrap();
        assert!(s.input_done());
        (s, got)
    }

    #[test]
    fn server_replays_captured_client() {
        // Feed the real ib_write_bw client's bytes to our server; it must read
        // exactly them and write exactly what the real server wrote (its BW
        // report is stack garbage in perftest, ours is zeros).
        let (s, (remote, report, peer)) =
            replay_write_bw(Role::Server, &write_bw_server(), &BwReport::default());
        assert_eq!(remote, write_bw_client());
        assert_eq!(peer.version, "6.06");
        assert_eq!(
            (
                peer.agreed_page_size,
                peer.agreed_cache_line_size,
                peer.agreed_mtu
            ),
            (4096, 64, 3)
        );
        // The client's result, as the real server printed it: 4096 5 25.61 15.46 0.003957.
        let r = report.unwrap();
        assert_eq!((r.size, r.iters), (4096, 5));
        assert_eq!(
            format!("{:.2} {:.2} {:.6}", r.bw_peak, r.bw_avg, r.msg_rate),
            "25.61 15.46 0.003957"
        );
        let mut want = trace_payload('S');
        for w in &mut want[8..13] {
            *w = vec![0; 8];
        }
        assert_eq!(s.writes, want);
    }

    #[test]
    fn client_replays_captured_server() {
        let mine = BwReport {
            size: 4096,
            iters: 5,
            bw_peak: f64::from_be_bytes(unhex("40399d19ee376630").try_into().unwrap()),
            bw_avg: f64::from_be_bytes(unhex("402ee92b66a6c50e").try_into().unwrap()),
            msg_rate: f64::from_be_bytes(unhex("3f7034c7a2e32017").try_into().unwrap()),
        };
        let (s, (remote, _, _)) = replay_write_bw(Role::Client, &write_bw_client(), &mine);
        assert_eq!(remote, write_bw_server());
        // Byte for byte what the real client sent, one write per message.
        assert_eq!(s.writes, trace_payload('C'));
    }

    #[test]
    fn old_peer_rejected() {
        let mut input = b"5.60".to_vec();
        input.resize(16, 0);
        let mut s = Scripted::new(input);
        match exchange_preamble(&mut s, Role::Server, &Preamble::new(1024)) {
            Err(OobError::IncompatibleVersion { remote }) => assert_eq!(remote, "5.60"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mtu_negotiation() {
        // Peer at 512 (enum 2): both use the smaller.
        let mut input = unhex(&format!(
            "362e3036{}{}{}{}",
            "00".repeat(12),
            "00002000",
            "00000080",
            "3200"
        ));
        let mut s = Scripted::new(input.clone());
        let p = exchange_preamble(&mut s, Role::Server, &Preamble::new(1024)).unwrap();
        assert_eq!(
            (
                p.mtu,
                p.agreed_mtu,
                p.agreed_page_size,
                p.agreed_cache_line_size
            ),
            (2, 2, 8192, 128)
        );
        // An unreadable MTU keeps ours.
        let n = input.len();
        input[n - 2] = b'x';
        let mut s = Scripted::new(input);
        let p = exchange_preamble(&mut s, Role::Server, &Preamble::new(4096)).unwrap();
        assert_eq!((p.mtu, p.agreed_mtu), (0, 5));
    }

    #[test]
    fn all_tests_over_tcp() {
        use std::net::{TcpListener, TcpStream};
        for test in PerfTest::ALL {
            for flow in [
                Flow::default(),
                Flow {
                    duplex: true,
                    ..Flow::default()
                },
                Flow {
                    all_sizes: true,
                    duration: false,
                    duplex: true,
                },
            ] {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let server = std::thread::spawn(move || {
                    let (mut s, _) = listener.accept().unwrap();
                    let steps = schedule(test, Role::Server, flow);
                    let rep = BwReport {
                        size: 2,
                        iters: 9,
                        ..Default::default()
                    };
                    drive(&mut s, Role::Server, &steps, &write_bw_server(), &rep).unwrap()
                });
                let mut c = TcpStream::connect(addr).unwrap();
                let steps = schedule(test, Role::Client, flow);
                let rep = BwReport {
                    size: 1,
                    iters: 7,
                    bw_peak: 1.5,
                    bw_avg: 1.25,
                    msg_rate: 0.5,
                };
                let (remote, got, _) =
                    drive(&mut c, Role::Client, &steps, &write_bw_client(), &rep).unwrap();
                let (s_remote, s_got, _) = server.join().unwrap();
                assert_eq!(remote, write_bw_server());
                assert_eq!(s_remote, write_bw_client());
                if steps.contains(&Step::ExchangeBwReports) {
                    assert_eq!(s_got.unwrap(), rep);
                    assert_eq!(got.unwrap().iters, 9);
                }
            }
        }
    }
}
