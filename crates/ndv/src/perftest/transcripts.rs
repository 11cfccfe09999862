//! perftest's own output, replayed: every transcript of the real tools in
//! `testdata/perftest/` is printed again by walking the program's
//! [`schedule`] with the header, addresses and rows the log shows, and must
//! come out byte for byte.

use super::exchange::BwReport;
use super::keys::PerftestDest;
use super::program::{Kind, PerfTest, Role, Verb};
use super::report::*;
use super::schedule::{schedule, Step};
use super::settings::{BwUnits, CmMode, Settings};
use super::stats::LatStats;
use super::testing::*;
use std::io::Write;

// ---- Logs of the real tools (testdata/perftest/README.md) ----------

// shared/reference/rxe-linux-6.1/ib_send_bw.log, client (10.77.0.2):
// `ib_send_bw -d rxe0 -x 1 -n 5 -s 4096 10.77.0.3`
const REF_SEND_BW_CLIENT: &str =
    include_str!("../../../../testdata/perftest/ib_send_bw-n5-s4096.client.txt");

// shared/reference/rxe-linux-6.1/ib_send_bw.log, server (10.77.0.3):
// `ib_send_bw -d rxe0 -x 1 -n 5 -s 4096`
const REF_SEND_BW_SERVER: &str =
    include_str!("../../../../testdata/perftest/ib_send_bw-n5-s4096.server.txt");

// shared/reference/rxe-linux-6.1/ib_read_bw_R.log, server:
// `ib_read_bw -d rxe0 -R -n 5 -s 4096` (stderr and stdout merged).
const REF_READ_BW_R_SERVER: &str =
    include_str!("../../../../testdata/perftest/ib_read_bw-R-n5-s4096.server.txt");

// The rest: perftest 4.5-0.17 (Debian 12 package 4.5+0.17-1) run against
// itself in the interop guest (rxe0, loopback 127.0.0.1 for TCP, GID
// ::ffff:10.77.0.2), stdout and stderr of each side in one file. Options
// as noted, always `-d rxe0 -x 1`.

// ib_write_bw -n 5 -s 4096, server (prints the client's result).
const WRITE_BW_SERVER: &str =
    include_str!("../../../../testdata/perftest/ib_write_bw-n5-s4096.server.txt");

// ib_atomic_bw -n 5, client.
const ATOMIC_BW_CLIENT: &str =
    include_str!("../../../../testdata/perftest/ib_atomic_bw-n5.client.txt");

// ib_send_bw -n 5 -s 4096 -b, client (the row is client + server).
const SEND_BW_BI_CLIENT: &str =
    include_str!("../../../../testdata/perftest/ib_send_bw-n5-s4096-b.client.txt");

// ib_send_bw -n 200 -s 2, server: default TX depth/CQ moderation, RX depth = iterations.
const SEND_BW_N200_SERVER: &str =
    include_str!("../../../../testdata/perftest/ib_send_bw-n200-s2.server.txt");

// ib_write_bw -n 5 -s 4096 --report_gbits, client.
const WRITE_BW_GBITS_CLIENT: &str =
    include_str!("../../../../testdata/perftest/ib_write_bw-n5-s4096-report_gbits.client.txt");

// ib_write_bw -s 4096 -D 2, server (the client's row).
const WRITE_BW_D_SERVER: &str =
    include_str!("../../../../testdata/perftest/ib_write_bw-s4096-D2.server.txt");

// ib_send_lat -n 20, server.
const SEND_LAT_SERVER: &str =
    include_str!("../../../../testdata/perftest/ib_send_lat-n20.server.txt");

// ib_write_lat -n 20, client (PCIe relax order is always OFF in ib_write_lat).
const WRITE_LAT_CLIENT: &str =
    include_str!("../../../../testdata/perftest/ib_write_lat-n20.client.txt");

// ib_read_lat -n 20, client.
const READ_LAT_CLIENT: &str =
    include_str!("../../../../testdata/perftest/ib_read_lat-n20.client.txt");

// ib_read_lat -n 20, server: no result, it only waits for the client.
const READ_LAT_SERVER: &str =
    include_str!("../../../../testdata/perftest/ib_read_lat-n20.server.txt");

// ib_send_lat -D 2, client (RX depth 512 on its server: no clamping with -D).
const SEND_LAT_D_CLIENT: &str =
    include_str!("../../../../testdata/perftest/ib_send_lat-D2.client.txt");

// ib_send_lat -n 20 -U, client, from the result header on: the 19
// unsorted samples (µs, %g), the header again and the row.
const SEND_LAT_U_CLIENT_TAIL: &str =
    include_str!("../../../../testdata/perftest/ib_send_lat-n20-U.client-results.txt");

// ---- Rebuilding a transcript from the schedule ---------------------

/// A result row as the log shows it.
enum Row {
    Bw(BwReport),
    Lat(u64, u64, LatStats),
    LatDur(u64, u64, f64, f64),
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// The two QPs' keys and the result rows printed in `log`.
fn parse_log(log: &str) -> (PerftestDest, PerftestDest, Vec<Row>) {
    let mut dests = Vec::new();
    let mut rows = Vec::new();
    let mut lat_dur = false;
    for line in log.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if line.contains(" address: LID ") {
            let get = |k: &str| w.iter().position(|x| *x == k).map(|i| hex(w[i + 1]));
            dests.push(PerftestDest {
                lid: get("LID").unwrap() as u16,
                qpn: get("QPN").unwrap() as u32,
                psn: get("PSN").unwrap() as u32,
                out_reads: get("OUT").unwrap_or(0) as u16,
                rkey: get("RKey").unwrap_or(0) as u32,
                vaddr: get("VAddr").unwrap_or(0),
                ..Default::default()
            });
        } else if let Some(g) = line.strip_prefix(" GID: ") {
            let d = dests.last_mut().unwrap();
            for (i, b) in g.split(':').enumerate() {
                d.gid[i] = b.parse().unwrap();
            }
        } else if line.contains("tps average") {
            lat_dur = true;
        } else if line.starts_with(' ')
            && w.len() >= 4
            && w.iter().all(|x| x.parse::<f64>().is_ok())
        {
            let n: Vec<f64> = w.iter().map(|x| x.parse().unwrap()).collect();
            let (size, iters) = (n[0] as u64, n[1] as u64);
            rows.push(match n.len() {
                5 => Row::Bw(BwReport {
                    size,
                    iters,
                    bw_peak: n[2],
                    bw_avg: n[3],
                    msg_rate: n[4],
                }),
                4 if lat_dur => Row::LatDur(size, iters, n[2], n[3]),
                9 => Row::Lat(
                    size,
                    iters,
                    LatStats {
                        t_min: n[2],
                        t_max: n[3],
                        t_typical: n[4],
                        t_avg: n[5],
                        t_stdev: n[6],
                        p99: n[7],
                        p99_9: n[8],
                    },
                ),
                _ => panic!("row {line:?}"),
            });
        }
    }
    assert_eq!(dests.len(), 2, "two address lines");
    (dests[0], dests[1], rows)
}

/// Prints what perftest would for `test` as `role` with `settings` by
/// walking the schedule, with the keys and rows taken from `log`; compares
/// with `log`.
fn check_transcript(log: &str, test: PerfTest, role: Role, settings: &Settings, units: BwUnits) {
    let info = &info(test, role, settings);
    let flow = settings.flow();
    let (local, remote, rows) = parse_log(log);
    let mut rows = rows.into_iter();
    let out = render(|o| {
        if matches!(info.test.verb, Verb::Read | Verb::Atomic) {
            writeln!(o, "{INLINE_DISABLED_MESSAGE}")?;
            write_inline_notice(o)?;
        }
        if info.role == Role::Server {
            write_waiting_banner(o)?;
        }
        for step in schedule(info.test, info.role, flow) {
            match step {
                Step::PrintTestInfo => write_test_info(o, info)?,
                Step::PrintLocalAddress => write_address(o, false, info.test.verb, &local, true)?,
                Step::PrintRemoteAddress => write_address(o, true, info.test.verb, &remote, true)?,
                Step::PrintResultHeader => match info.test.kind {
                    Kind::Bw => write_bw_header(o, units)?,
                    Kind::Lat => write_lat_header(o, flow.duration)?,
                },
                Step::PrintReport | Step::PrintRemoteReport | Step::PrintSumReport => {
                    match rows.next().expect("a row for each report step") {
                        Row::Bw(r) => write_bw_row(o, &r, units)?,
                        Row::Lat(size, iters, s) => write_lat_row(o, size, iters, &s)?,
                        Row::LatDur(size, iters, t, tps) => {
                            write_lat_duration_row(o, size, iters, t, tps)?
                        }
                    }
                }
                Step::PrintResultLine => writeln!(o, "{RESULT_LINE}")?,
                _ => {}
            }
        }
        Ok(())
    });
    assert!(rows.next().is_none(), "unused rows");
    for (i, (got, want)) in out.lines().zip(log.lines()).enumerate() {
        assert_eq!(got, want, "line {}", i + 1);
    }
    assert_eq!(out, log);
}

#[test]
fn bw_transcripts() {
    use BwUnits::{Gbps, MiBps};
    use Role::{Client, Server};
    let n5 = |t| {
        with(t, |s| {
            s.iters = 5;
            s.size = 4096;
        })
    };
    let atomic = with(ATOMIC_BW, |s| s.iters = 5);
    let bi = with(SEND_BW, |s| {
        s.iters = 5;
        s.size = 4096;
        s.duplex = true;
    });
    let n200 = with(SEND_BW, |s| {
        s.iters = 200;
        s.size = 2;
    });
    let dur = with(WRITE_BW, |s| {
        s.size = 4096;
        s.duration = Some(2);
    });
    // Each recorded run: its transcript, the program and side, its settings
    // and the units.
    let runs = [
        (REF_SEND_BW_CLIENT, SEND_BW, Client, n5(SEND_BW), MiBps),
        (REF_SEND_BW_SERVER, SEND_BW, Server, n5(SEND_BW), MiBps),
        (WRITE_BW_SERVER, WRITE_BW, Server, n5(WRITE_BW), MiBps),
        (ATOMIC_BW_CLIENT, ATOMIC_BW, Client, atomic, MiBps),
        (SEND_BW_BI_CLIENT, SEND_BW, Client, bi, MiBps),
        (SEND_BW_N200_SERVER, SEND_BW, Server, n200, MiBps),
        (WRITE_BW_GBITS_CLIENT, WRITE_BW, Client, n5(WRITE_BW), Gbps),
        (WRITE_BW_D_SERVER, WRITE_BW, Server, dur, MiBps),
    ];
    for (log, test, role, settings, units) in runs {
        check_transcript(log, test, role, &settings, units);
    }
}

#[test]
fn rdma_cm_header() {
    let s = with(READ_BW, |s| {
        s.iters = 5;
        s.size = 4096;
    });
    let mut i = info(READ_BW, Role::Server, &s);
    i.cm = CmMode::Qps;
    let out = render(|o| {
        writeln!(o, "{INLINE_DISABLED_MESSAGE}")?;
        write_inline_notice(o)?;
        write_waiting_banner(o)?;
        write_test_info(o, &i)
    });
    assert_eq!(out, REF_READ_BW_R_SERVER);
}

#[test]
fn lat_transcripts() {
    let n20 = |t| with(t, |s| s.iters = 20);
    let d = with(SEND_LAT, |s| s.duration = Some(2));
    // As in bw_transcripts; the units do not show in latency tests.
    use Role::{Client, Server};
    let runs = [
        (SEND_LAT_SERVER, SEND_LAT, Server, n20(SEND_LAT)),
        (WRITE_LAT_CLIENT, WRITE_LAT, Client, n20(WRITE_LAT)),
        (READ_LAT_CLIENT, READ_LAT, Client, n20(READ_LAT)),
        (READ_LAT_SERVER, READ_LAT, Server, n20(READ_LAT)),
        (SEND_LAT_D_CLIENT, SEND_LAT, Client, d.clone()),
    ];
    for (log, test, role, settings) in runs {
        check_transcript(log, test, role, &settings, BwUnits::MiBps);
    }
    // Its server showed "RX depth : 512".
    assert_eq!(d.resolve(SEND_LAT, Role::Server).rx_depth, 512);
}

/// The -U samples of SEND_LAT_U_CLIENT_TAIL, in ns of round trip.
fn send_lat_u_samples() -> Vec<u64> {
    SEND_LAT_U_CLIENT_TAIL
        .lines()
        .filter_map(|l| l.split_once(", "))
        .filter(|(i, _)| i.parse::<u32>().is_ok())
        .map(|(_, us)| (us.parse::<f64>().unwrap() * 2000.0).round() as u64)
        .collect()
}

#[test]
fn lat_stats_match_real_samples() {
    // ib_send_lat -n 20 -U printed its 19 samples and then the row; our
    // statistics over those samples give the same row, including the
    // truncated-integer standard deviation (671.20; 671.23 without the quirk).
    let d = send_lat_u_samples();
    assert_eq!(d.len(), 19);
    let out = render(|o| {
        write_lat_header(o, false)?;
        write_lat_report(o, 2, 20, &d, 2, true, false).map(|_| ())?;
        writeln!(o, "{RESULT_LINE}")
    });
    assert_eq!(out, SEND_LAT_U_CLIENT_TAIL);
}

#[test]
fn lat_histogram() {
    let d = send_lat_u_samples();
    let out = render(|o| write_lat_report(o, 2, 20, &d, 2, false, true).map(|_| ()));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "#, usec");
    assert_eq!(lines[1], "1, 3667.47");
    assert_eq!(lines[17], "17, 6012.28"); // 17 kept of 19, sorted
    assert_eq!(lines[18], RESULT_LINE);
}
