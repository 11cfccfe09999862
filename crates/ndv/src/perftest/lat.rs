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
//! Samples are `tposted[i+1] − tposted[i]`; [`super::stats::rtt_factor`]
//! halves them for SEND/WRITE. With `-D` the iterations that completed in the SAMPLE
//! window are counted instead.

use super::measure::{check_wc, poll, DurationClock, Phase, RunParams, STALL};
use super::program::{Role, Verb};
use super::stats::lat_deltas;
use super::ticker::Ticker;
use anyhow::{bail, Context, Result};
use ndverbs_verbs::{Cq, WorkCompletion};
use std::time::Instant;

/// The result of one measured latency run.
pub enum LatResult {
    /// Post timestamps' differences (ns).
    Samples(Vec<u64>),
    /// `-D`: iterations in the SAMPLE window and its length.
    Duration { iters: u64, elapsed_ns: u64 },
}

pub fn run(r: &RunParams) -> Result<LatResult> {
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
            t.tick(self.done, &[]);
        }
    }

    fn result(self) -> LatResult {
        match self.dur {
            Some(d) => LatResult::Duration {
                iters: self.counted,
                elapsed_ns: d.sample_ns(),
            },
            None => LatResult::Samples(lat_deltas(&self.tposted)),
        }
    }
}

/// Waits for one successful completion on `cq` (see [`check_wc`] for
/// `at_client` and `counts`); `None` if the duration ended first.
fn wait_ok(
    r: &RunParams,
    cq: &Cq,
    clock: &Clock,
    at_client: bool,
    counts: impl FnOnce() -> String,
) -> Result<Option<()>> {
    let Some(wc) = wait_wc(r, cq, clock)? else {
        return Ok(None);
    };
    check_wc(&wc, at_client, counts)?;
    Ok(Some(()))
}

/// Waits for one completion on `cq`; `None` if the duration ended first.
fn wait_wc(r: &RunParams, cq: &Cq, clock: &Clock) -> Result<Option<WorkCompletion>> {
    // Nothing on the way from a completion to the next post that perftest
    // does not do: the stall check reads the clock only every 1024 empty
    // polls (a read per poll stretches the loop, and a message that lands
    // mid-poll waits longer to be seen), and only events mode allocates.
    let mut t0 = None;
    let mut wcs = Vec::new();
    let mut polls = 0u32;
    loop {
        if clock.ended() {
            return Ok(None);
        }
        // One at a time: a latency loop never has more than one outstanding.
        if r.plan.settings.events {
            poll(cq, true, &mut wcs)?;
            if let Some(w) = wcs.first() {
                return Ok(Some(*w));
            }
        } else if let Some(w) = cq.poll_one() {
            return Ok(Some(w));
        }
        polls = polls.wrapping_add(1);
        if polls % 1024 == 0 && t0.get_or_insert_with(Instant::now).elapsed() > STALL {
            bail!("no completion for {} s", STALL.as_secs());
        }
    }
}

fn run_send(r: &RunParams) -> Result<LatResult> {
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
            let got = wait_ok(r, &r.res.recv_cq, &clock, false, || format!(" rcnt={rcnt}"))?;
            if got.is_none() {
                break;
            }
            rcnt += 1;
            clock.done_one();
            if dur || rcnt + rx_depth <= iters {
                r.res.post_recv(p, 0, r.size)?;
            }
        }
        if scnt < iters || (dur && !clock.ended()) {
            clock.posted();
            scnt += 1;
            let signaled = scnt % cq_mod == 0 || (!dur && scnt == iters);
            r.post_send(0, signaled, || format!("scnt={scnt}"))?;
            if signaled {
                let counts = || format!("scnt={scnt}, ccnt={scnt}");
                if wait_ok(r, &r.res.send_cq, &clock, true, counts)?.is_none() {
                    break;
                }
            }
        }
    }
    Ok(clock.result())
}

fn run_write(r: &RunParams) -> Result<LatResult> {
    let p = r.plan;
    let s = &p.settings;
    let server = p.role == Role::Server;
    let iters = s.iters;
    let dur = s.duration.is_some();
    let size = r.size as usize;
    let post_byte = p.send_off(0) + size - 1;
    let poll_byte = p.recv_off(0) + size - 1;
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
                    .context("reading the receive block")?;
                if b[0] == rcnt as u8 || clock.ended() {
                    break;
                }
                r.dev.progress();
                spins = spins.wrapping_add(1);
                if spins % 1024 == 0 && t0.elapsed() > STALL {
                    bail!(
                        "the peer's write {rcnt} did not arrive in {} s",
                        STALL.as_secs()
                    );
                }
            }
        }
        if scnt < iters || dur {
            clock.posted();
            scnt += 1;
            r.res
                .mr
                .write(post_byte, &[scnt as u8])
                .context("writing the send block")?;
            r.post_send(0, true, || format!("scnt={scnt}"))?;
        }
        if dur && clock.ended() {
            break;
        }
        if ccnt < iters || dur {
            let counts = || format!("scnt={scnt}, ccnt={ccnt}");
            if wait_ok(r, &r.res.send_cq, &clock, true, counts)?.is_none() {
                break;
            }
            ccnt += 1;
            clock.done_one();
        }
    }
    Ok(clock.result())
}

fn run_one_sided(r: &RunParams) -> Result<LatResult> {
    let s = &r.plan.settings;
    let iters = s.iters;
    let dur = s.duration.is_some();
    let mut clock = Clock::new(r);
    let mut scnt = 0u64;
    while scnt < iters || (dur && !clock.ended()) {
        clock.posted();
        scnt += 1;
        r.post_send(0, true, || format!("scnt={scnt}"))?;
        let counts = || format!("scnt={scnt}, ccnt={scnt}");
        if wait_ok(r, &r.res.send_cq, &clock, true, counts)?.is_none() {
            break;
        }
        clock.done_one();
    }
    Ok(clock.result())
}
