//! The latency measurements (`run_iter_lat_send`, `run_iter_lat_write`,
//! `run_iter_lat`).
//!
//! * **SEND** (both sides): the server waits for a message, then answers; the
//!   client sends first. Before each send the post time goes to
//!   `tposted[scnt]`; every `cq_mod`-th send (and the last) is signalled and
//!   its completion awaited. Receives are re-posted while more are needed.
//! * **WRITE** (both sides): each side writes `size` bytes whose last byte is
//!   its iteration counter (mod 256) into the peer's receive block, and
//!   before its next write spins on the last byte of its *own* receive block
//!   until the peer's counter arrives — the "poll on the last byte" of
//!   perftest. The server starts by waiting. Every write is signalled.
//! * **READ / atomics** (client only): post, wait for the completion, repeat.
//!
//! Samples are `tposted[i+1] − tposted[i]`; [`rtt_factor`](crate::perftest::report::rtt_factor) halves
//! them for SEND/WRITE. With `-D` the iterations that completed in the SAMPLE
//! window are counted instead.

use super::bw::{poll, post_recv, send_wr};
use super::{completion_error, DurationClock, Phase, RunParams, RunResult, Ticker};
use crate::perftest::exchange::{Role, Verb};
use ndverbs_verbs::{WcStatus, WorkCompletion};
use std::time::{Duration, Instant};

const STALL: Duration = Duration::from_secs(60);

pub(crate) fn run(r: &RunParams) -> Result<RunResult, String> {
    match r.plan.test.verb {
        Verb::Send => run_send(r),
        Verb::Write => run_write(r),
        Verb::Read | Verb::Atomic => run_one_sided(r),
    }
}

/// Collects samples or duration counts.
struct Clock {
    t0: Instant,
    tposted: Vec<u64>,
    dur: Option<DurationClock>,
    counted: u64,
    done: u64,
    ticker: Option<Ticker>,
}

impl Clock {
    fn new(r: &RunParams) -> Clock {
        let s = &r.plan.settings;
        Clock {
            t0: Instant::now(),
            tposted: Vec::with_capacity(if s.duration.is_some() {
                0
            } else {
                s.iters as usize
            }),
            dur: s.duration.map(DurationClock::new),
            counted: 0,
            done: 0,
            ticker: Ticker::new(r),
        }
    }

    fn posted(&mut self) {
        if self.dur.is_none() {
            self.tposted.push(self.t0.elapsed().as_nanos() as u64);
        }
    }

    fn phase(&self) -> Option<Phase> {
        self.dur.map(|d| d.phase())
    }

    fn ended(&self) -> bool {
        self.phase() == Some(Phase::End)
    }

    fn done_one(&mut self) {
        if self.phase() == Some(Phase::Sample) {
            self.counted += 1;
        }
        self.done += 1;
        if let Some(t) = &mut self.ticker {
            t.tick(self.done);
        }
    }

    fn result(self) -> RunResult {
        match self.dur {
            Some(d) => RunResult::LatDuration {
                iters: self.counted,
                elapsed_ns: d.sample_ns(),
            },
            None => RunResult::Lat {
                deltas: crate::perftest::report::lat_deltas(&self.tposted),
            },
        }
    }
}

/// Waits for one completion on `cq`; `None` if the duration ended first.
fn wait_wc(
    r: &RunParams,
    cq: &ndverbs_verbs::Cq,
    clock: &Clock,
) -> Result<Option<WorkCompletion>, String> {
    let t0 = Instant::now();
    let mut wcs = Vec::with_capacity(16);
    loop {
        if clock.ended() {
            return Ok(None);
        }
        // One at a time: a latency loop never has more than one outstanding.
        if r.events {
            poll(cq, true, &mut wcs)?;
            if let Some(w) = wcs.first() {
                return Ok(Some(*w));
            }
        } else if let Some(w) = cq.poll_one() {
            return Ok(Some(w));
        }
        if t0.elapsed() > STALL {
            return Err(format!("no completion for {} s", STALL.as_secs()));
        }
    }
}

fn run_send(r: &RunParams) -> Result<RunResult, String> {
    let p = r.plan;
    let s = &p.settings;
    let client = p.role == Role::Client;
    let iters = s.iters;
    let dur = s.duration.is_some();
    let cq_mod = u64::from(s.cq_mod.max(1));
    let rx_depth = u64::from(s.rx_depth);
    let mut clock = Clock::new(r);
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    while scnt < iters || rcnt < iters || (dur && !clock.ended()) {
        if (rcnt < iters || dur) && !(scnt < 1 && client) {
            let Some(wc) = wait_wc(r, &r.res.recv_cq, &clock)? else {
                break;
            };
            if wc.status != WcStatus::Success {
                return Err(completion_error(false, &wc, &format!(" rcnt={rcnt}")));
            }
            rcnt += 1;
            clock.done_one();
            if dur || rcnt + rx_depth <= iters {
                post_recv(r.res, p, 0, r.size)?;
            }
        }
        if scnt < iters || (dur && !clock.ended()) {
            clock.posted();
            scnt += 1;
            let signaled = scnt % cq_mod == 0 || (!dur && scnt == iters);
            let wr = send_wr(r, 0, signaled)?;
            r.res.qps[0]
                .post_send(wr)
                .map_err(|e| format!("Couldn't post send: scnt={scnt}: {e}"))?;
            if signaled {
                let Some(wc) = wait_wc(r, &r.res.send_cq, &clock)? else {
                    break;
                };
                if wc.status != WcStatus::Success {
                    return Err(completion_error(
                        true,
                        &wc,
                        &format!("scnt={scnt}, ccnt={scnt}"),
                    ));
                }
            }
        }
    }
    Ok(clock.result())
}

fn run_write(r: &RunParams) -> Result<RunResult, String> {
    let p = r.plan;
    let s = &p.settings;
    let server = p.role == Role::Server;
    let iters = s.iters;
    let dur = s.duration.is_some();
    let size = r.size as usize;
    let post_byte = r.send_off(0) + size - 1;
    let poll_byte = r.recv_off(0) + size - 1;
    let mut clock = Clock::new(r);
    let (mut scnt, mut ccnt, mut rcnt) = (0u64, 0u64, 0u64);
    let mut b = [0u8; 1];
    while scnt < iters || ccnt < iters || rcnt < iters || (dur && !clock.ended()) {
        if (rcnt < iters || dur) && !(scnt < 1 && server) {
            rcnt += 1;
            let t0 = Instant::now();
            let mut spins = 0u32;
            loop {
                r.res
                    .mr
                    .read(poll_byte, &mut b)
                    .map_err(|e| e.to_string())?;
                if b[0] == rcnt as u8 || clock.ended() {
                    break;
                }
                r.dev.progress();
                spins = spins.wrapping_add(1);
                if spins % 1024 == 0 && t0.elapsed() > STALL {
                    return Err(format!(
                        "the peer's write {rcnt} did not arrive in {} s",
                        STALL.as_secs()
                    ));
                }
            }
        }
        if scnt < iters || dur {
            clock.posted();
            scnt += 1;
            r.res
                .mr
                .write(post_byte, &[scnt as u8])
                .map_err(|e| e.to_string())?;
            let wr = send_wr(r, 0, true)?;
            r.res.qps[0]
                .post_send(wr)
                .map_err(|e| format!("Couldn't post send: scnt={scnt}: {e}"))?;
        }
        if dur && clock.ended() {
            break;
        }
        if ccnt < iters || dur {
            let Some(wc) = wait_wc(r, &r.res.send_cq, &clock)? else {
                break;
            };
            if wc.status != WcStatus::Success {
                return Err(completion_error(
                    true,
                    &wc,
                    &format!("scnt={scnt}, ccnt={ccnt}"),
                ));
            }
            ccnt += 1;
            clock.done_one();
        }
    }
    Ok(clock.result())
}

fn run_one_sided(r: &RunParams) -> Result<RunResult, String> {
    let s = &r.plan.settings;
    let iters = s.iters;
    let dur = s.duration.is_some();
    let mut clock = Clock::new(r);
    let mut scnt = 0u64;
    while scnt < iters || (dur && !clock.ended()) {
        clock.posted();
        scnt += 1;
        let wr = send_wr(r, 0, true)?;
        r.res.qps[0]
            .post_send(wr)
            .map_err(|e| format!("Couldn't post send: scnt={scnt}: {e}"))?;
        let Some(wc) = wait_wc(r, &r.res.send_cq, &clock)? else {
            break;
        };
        if wc.status != WcStatus::Success {
            return Err(completion_error(
                true,
                &wc,
                &format!("scnt={scnt}, ccnt={scnt}"),
            ));
        }
        clock.done_one();
    }
    Ok(clock.result())
}
