//! What each perftest program does from its first out-of-band exchange to
//! its exit, step by step ([`schedule`]).
//!
//! The programs call `ctx_hand_shake` several times with the *same* keys:
//! the first carries the information, the others are barriers ("my QP is in
//! RTS", "my receives are posted", "I finished"). Their number differs per
//! test and per side, and a peer that does one hand shake too many or too
//! few deadlocks, so the order is written down here once, per program and
//! role, with the printing and the measurement between the exchanges (see
//! [`super::exchange`] for the exchanges themselves).

use super::program::{Kind, PerfTest, Role, Verb};

/// One step of a perftest program's `main`, from the first exchange to the
/// end: the out-of-band exchanges, in order, with the local actions and the
/// output that come between them. The client and server lists of a test
/// contain the same exchanges in the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// [`super::exchange::exchange_preamble`].
    Preamble,
    /// Print the test header (`ctx_print_test_info`).
    PrintTestInfo,
    /// [`super::exchange::hand_shake`] (`ctx_hand_shake`).
    HandShake,
    /// Local: QP to RTR and RTS with the peer's keys (`ctx_connect`).
    ConnectQp,
    /// Print this side's `local address:` lines.
    PrintLocalAddress,
    /// Print the peer's `remote address:` lines.
    PrintRemoteAddress,
    /// Print the result table header (RESULT_LINE + column names).
    PrintResultHeader,
    /// `-a`: the next message size (2, 4, … 2^23, see [`ALL_SIZES`]).
    NextSize,
    /// Local: post this size's work requests (SEND tests: the receives,
    /// which the next hand shake announces as posted).
    Prepare,
    /// Local: the measurement.
    Run,
    /// Print this side's result row.
    PrintReport,
    /// [`super::exchange::exchange_bw_reports`].
    ExchangeBwReports,
    /// Print the peer's result row (server of READ/WRITE/atomic BW).
    PrintRemoteReport,
    /// Print the sum of both rows (bidirectional).
    PrintSumReport,
    /// Print the closing RESULT_LINE.
    PrintResultLine,
    /// [`super::exchange::close_connection`].
    Close,
}

/// Run options that change the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flow {
    /// `-b` (BW tests only).
    pub duplex: bool,
    /// `-D`: time-based.
    pub duration: bool,
    /// `-a`: every size from 2 to 2^23.
    pub all_sizes: bool,
}

/// The sizes of `-a` (`1 << i` for i in 1..24) for RC.
pub const ALL_SIZES: [u64; 23] = {
    let mut s = [0u64; 23];
    let mut i = 0;
    while i < 23 {
        s[i] = 2 << i;
        i += 1;
    }
    s
};

/// What every program prints around its key exchange: its own address, then
/// (after a hand shake) the peer's. The programs differ in the barriers
/// around it.
const ADDRESSES: [Step; 3] = [
    Step::PrintLocalAddress,
    Step::HandShake,
    Step::PrintRemoteAddress,
];

/// Adds the steps `one_size` gives for each message size: with `-a`
/// (`all_sizes`) a [`Step::NextSize`] and the steps for each of
/// [`ALL_SIZES`], else the steps once.
fn each_size(s: &mut Vec<Step>, all_sizes: bool, one_size: impl Fn(&mut Vec<Step>)) {
    let sizes = if all_sizes { ALL_SIZES.len() } else { 1 };
    for _ in 0..sizes {
        if all_sizes {
            s.push(Step::NextSize);
        }
        one_size(s);
    }
}

/// The steps of `test`'s `main` for `role`, as perftest 4.5-0.17 runs them
/// with one QP, RC, no `-R`/`--run_infinitely`/multicast.
pub fn schedule(test: PerfTest, role: Role, flow: Flow) -> Vec<Step> {
    use Step::*;
    let server = role == Role::Server;
    let client = role == Role::Client;
    let duplex = flow.duplex && test.kind == Kind::Bw;
    let mut s = vec![Preamble, PrintTestInfo];
    match (test.kind, test.verb) {
        (Kind::Bw, Verb::Send) => {
            s.extend([HandShake, ConnectQp, HandShake]);
            s.extend(ADDRESSES);
            s.push(PrintResultHeader);
            // print_report_bw prints unless bidirectional (except SEND -D).
            let own_row = !duplex || flow.duration;
            let sum = duplex && !flow.duration;
            each_size(&mut s, flow.all_sizes, |s| {
                s.extend([Prepare, HandShake, Run]);
                if own_row {
                    s.push(PrintReport);
                }
                if sum {
                    s.extend([ExchangeBwReports, PrintSumReport]);
                }
                if flow.all_sizes {
                    s.push(HandShake);
                }
            });
            s.extend([PrintResultLine, Close]);
        }
        (Kind::Bw, verb) => {
            s.extend([HandShake, ConnectQp]);
            s.extend(ADDRESSES);
            s.extend([HandShake, PrintResultHeader]);
            if server && !duplex {
                // The server waits for the client's end and prints its result.
                s.extend([HandShake, ExchangeBwReports, PrintRemoteReport]);
                if verb == Verb::Atomic {
                    s.extend([PrintResultLine, Close]);
                } else {
                    s.extend([Close, PrintResultLine]);
                }
                return s;
            }
            // atomic_bw runs -a as a single size.
            let per_size = flow.all_sizes && verb != Verb::Atomic;
            each_size(&mut s, per_size, |s| {
                s.push(Prepare);
                if duplex {
                    s.push(HandShake);
                }
                s.push(Run);
                if duplex && per_size {
                    s.push(HandShake);
                }
                if duplex {
                    s.extend([ExchangeBwReports, PrintSumReport]);
                } else {
                    s.push(PrintReport);
                }
            });
            s.push(PrintResultLine);
            if client && !duplex {
                s.extend([HandShake, ExchangeBwReports]);
            }
            s.push(Close);
        }
        (Kind::Lat, Verb::Send) => {
            s.extend([HandShake, ConnectQp, HandShake]);
            s.extend(ADDRESSES);
            s.push(PrintResultHeader);
            each_size(&mut s, flow.all_sizes, |s| {
                s.extend([Prepare, HandShake, Run, PrintReport]);
            });
            s.extend([PrintResultLine, Close]);
        }
        (Kind::Lat, verb) => {
            s.extend([HandShake, HandShake, ConnectQp]);
            s.extend(ADDRESSES);
            s.push(HandShake);
            let per_size = flow.all_sizes && verb != Verb::Atomic;
            let run = |s: &mut Vec<Step>| each_size(s, per_size, |s| s.extend([Run, PrintReport]));
            if verb == Verb::Write {
                // Both sides measure; no close: the program just exits.
                s.extend([Prepare, PrintResultHeader]);
                run(&mut s);
                s.push(PrintResultLine);
            } else if server {
                // Only the client posts READs/atomics.
                s.extend([Close, PrintResultLine]);
            } else {
                s.extend([PrintResultHeader, Prepare]);
                run(&mut s);
                s.extend([Close, PrintResultLine]);
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message sizes a schedule puts on the wire, as "C16 S16 …"; both
    /// "done"s are shown client first.
    fn wire_trace(steps: &[Step]) -> String {
        let mut t = Vec::new();
        let mut pair = |n: usize| {
            t.push(format!("C{n}"));
            t.push(format!("S{n}"));
        };
        for step in steps {
            match step {
                Step::Preamble => [16, 4, 4, 2].into_iter().for_each(&mut pair),
                Step::HandShake => pair(108),
                Step::ExchangeBwReports => (0..5).for_each(|_| pair(8)),
                Step::Close => {
                    pair(108);
                    pair(5);
                }
                _ => {}
            }
        }
        t.join(" ")
    }

    fn is_exchange(s: &Step) -> bool {
        matches!(
            s,
            Step::Preamble | Step::HandShake | Step::ExchangeBwReports | Step::Close
        )
    }

    #[test]
    fn schedules_match_captured_traces() {
        // TCP payload sizes captured (tcpdump -i lo in the interop guest) while
        // perftest 4.5-0.17 ran against itself; `done` order normalised to C5 S5
        // (it is a race). Options as noted; all with `-d rxe0 -x 1`.
        let pre = "C16 S16 C4 S4 C4 S4 C2 S2";
        let hs = |n: usize| vec!["C108 S108"; n].join(" ");
        let rep = ["C8 S8"; 5].join(" ");
        // SEND and the latency tests but WRITE: five hand shakes, then "done".
        let five = format!("{pre} {} C5 S5", hs(5));
        // READ/WRITE/atomic BW and bidirectional SEND: the reports in between.
        let reports = format!("{pre} {} {rep} {} C5 S5", hs(4), hs(1));
        // ib_write_lat never closes: it exits after its last hand shake.
        let no_close = format!("{pre} {}", hs(4));
        let plain = Flow::default();
        let duplex = Flow {
            duplex: true,
            ..plain
        };
        let dur = Flow {
            duration: true,
            ..plain
        };
        let all = Flow {
            all_sizes: true,
            ..plain
        };
        use Kind::*;
        use Verb::*;
        let t = PerfTest::new;
        let cases = [
            // -n 5 -s 4096 (also without -x, -n 200 -s 2, -D 2); -b.
            (t(Send, Bw), plain, &five),
            (t(Send, Bw), dur, &five),
            (t(Send, Bw), duplex, &reports),
            // -n 5 -s 4096 (also --report_gbits, -D 2, -a, -A CMP_AND_SWAP).
            (t(Write, Bw), plain, &reports),
            (t(Write, Bw), dur, &reports),
            (t(Write, Bw), all, &reports),
            (t(Write, Bw), duplex, &reports),
            (t(Read, Bw), plain, &reports),
            (t(Atomic, Bw), plain, &reports),
            // -n 20 (also -D 2, -U, -H, default iterations).
            (t(Send, Lat), plain, &five),
            (t(Send, Lat), dur, &five),
            (t(Write, Lat), plain, &no_close),
            (t(Read, Lat), plain, &five),
            (t(Read, Lat), dur, &five),
            (t(Atomic, Lat), plain, &five),
        ];
        for (test, flow, want) in cases {
            for role in [Role::Client, Role::Server] {
                let steps = schedule(test, role, flow);
                assert_eq!(
                    &wire_trace(&steps),
                    want,
                    "{} {role:?} {flow:?}",
                    test.program()
                );
            }
        }
    }

    #[test]
    fn client_and_server_schedules_pair_up() {
        for test in PerfTest::ALL {
            for duplex in [false, true] {
                for duration in [false, true] {
                    for all_sizes in [false, true] {
                        let flow = Flow {
                            duplex,
                            duration,
                            all_sizes,
                        };
                        let c: Vec<Step> = schedule(test, Role::Client, flow)
                            .into_iter()
                            .filter(is_exchange)
                            .collect();
                        let s: Vec<Step> = schedule(test, Role::Server, flow)
                            .into_iter()
                            .filter(is_exchange)
                            .collect();
                        assert_eq!(c, s, "{} {flow:?}", test.program());
                    }
                }
            }
        }
    }

    #[test]
    fn send_bw_all_sizes_syncs_each_size() {
        let flow = Flow {
            all_sizes: true,
            ..Flow::default()
        };
        let steps = schedule(PerfTest::new(Verb::Send, Kind::Bw), Role::Client, flow);
        let hs = steps.iter().filter(|s| **s == Step::HandShake).count();
        // keys, after connect, remote print; then 2 per size.
        assert_eq!(hs, 3 + 2 * ALL_SIZES.len());
        assert_eq!(ALL_SIZES[0], 2);
        assert_eq!(ALL_SIZES[22], 1 << 23);
    }
}
