//! The BW measurements (`run_iter_bw`, `run_iter_bw_server`, `run_iter_bi`).
//!
//! **Sender** (every client; both sides with `-b`): for each QP, post while
//! fewer than TX depth messages are outstanding (`scnt − ccnt < tx_depth`),
//! timestamping each post in `tposted[total_sent]`. Message `m` of a QP asks
//! for a completion when `m % cq_mod == cq_mod − 1` or it is the last one,
//! and each completion counts as `cq_mod` messages: its poll time goes to
//! `tcompleted[total_completed − 1]` (clamped to the last message). Then
//! [`bw_report`] turns the two arrays into peak and average BW.
//! With `-N` (or implied) only the first post and the last poll are kept.
//!
//! **`ib_send_bw` receiver**: `-r` receives are posted per QP before the
//! barrier ([`super::measure::Resources::post_recv`]); each completion
//! re-posts one until one receive per iteration was posted. The clock
//! starts at the first receive and stops at the last; the report has no
//! peak.
//!
//! **`-D`**: the loop runs until the end of the duration; only completions
//! polled in the SAMPLE window count, over the window's length.

use super::exchange::BwReport;
use super::measure::{check_wc, now_ns, poll, DurationClock, Phase, RunParams, STALL};
use super::program::{Role, Verb};
use super::stats::{bw_report, BwParams};
use super::ticker::Ticker;
use anyhow::{bail, Context, Result};
use std::time::Instant;

/// Runs one BW measurement for this side.
pub fn run(r: &RunParams) -> Result<BwReport> {
    let p = r.plan;
    if p.test.verb == Verb::Send && p.flow.duplex {
        return run_sender(r, true);
    }
    if p.test.verb == Verb::Send && p.role == Role::Server {
        return run_receiver(r);
    }
    run_sender(r, false)
}

fn params(r: &RunParams, iters: u64, no_peak: bool) -> BwParams {
    let s = &r.plan.settings;
    BwParams {
        size: r.size,
        iters,
        num_qps: r.plan.qps as u64,
        post_list: 1,
        cq_mod: u64::from(s.cq_mod),
        no_peak,
        duration: s.duration.is_some(),
        units: r.plan.units,
    }
}

/// `run_iter_bw` (and, with `recv`, `run_iter_bi` for SEND: receives are
/// counted and re-posted in the same loop).
fn run_sender(r: &RunParams, recv: bool) -> Result<BwReport> {
    let p = r.plan;
    let s = &p.settings;
    let nq = p.qps;
    let cq_mod = u64::from(s.cq_mod.max(1));
    let tx_depth = u64::from(s.tx_depth.max(1));
    let dur = s.duration.map(DurationClock::new);
    let iters = if dur.is_some() { 0 } else { s.iters };
    let tot = iters * nq as u64;
    let no_peak = s.no_peak || dur.is_some();
    let cap = if no_peak { 1 } else { tot.max(1) as usize };
    let mut tposted = vec![0u64; cap];
    let mut tcompleted = vec![0u64; cap];
    let (mut scnt, mut ccnt) = (vec![0u64; nq], vec![0u64; nq]);
    let (mut totscnt, mut totccnt) = (0u64, 0u64);
    // Receives (SEND -b): one re-posted per completion until one per iteration.
    let (mut rcnt, mut rposted) = (0u64, vec![u64::from(s.rx_depth); nq]);
    let mut counted = 0u64;
    let mut wcs = Vec::with_capacity(16);
    let t0 = Instant::now();
    if no_peak {
        tposted[0] = 0;
    }
    let mut last_progress = Instant::now();
    let mut ticker = Ticker::new(r);
    loop {
        if let Some(t) = &mut ticker {
            t.tick(totccnt, &ccnt);
        }
        let phase = dur.map(|d| d.phase());
        let ended = phase == Some(Phase::End);
        if dur.is_some() {
            if ended {
                break;
            }
        } else if totscnt >= tot && totccnt >= tot && (!recv || rcnt >= tot) {
            break;
        }
        for q in 0..nq {
            while (scnt[q] < iters || dur.is_some()) && scnt[q] - ccnt[q] < tx_depth {
                let m = scnt[q];
                let signaled = m % cq_mod == cq_mod - 1 || (dur.is_none() && m == iters - 1);
                let wr = r.send_wr(q, signaled)?;
                if !no_peak {
                    tposted[totscnt as usize] = now_ns(t0);
                }
                match r.res.qps[q].post_send(wr) {
                    Ok(()) => {}
                    // With an engine thread a completion can be polled a moment
                    // before its send queue slot is released: poll, post later.
                    Err(e) if e.kind() == ndverbs_verbs::ErrorKind::QueueFull => break,
                    Err(e) => {
                        return Err(e).context(format!("Couldn't post send: qp {q} scnt={m}"))
                    }
                }
                scnt[q] += 1;
                totscnt += 1;
            }
        }
        let mut any = false;
        if totccnt < tot || (dur.is_some() && totccnt < totscnt) {
            poll(&r.res.send_cq, r.plan.settings.events, &mut wcs)?;
            for wc in &wcs {
                check_wc(wc, true, || format!("scnt={totscnt}, ccnt={totccnt}"))?;
                let q = (wc.wr_id as usize).min(nq - 1);
                ccnt[q] += cq_mod;
                totccnt += cq_mod;
                if !no_peak {
                    let j = totccnt.min(tot) - 1;
                    tcompleted[j as usize] = now_ns(t0);
                }
                if phase == Some(Phase::Sample) {
                    counted += cq_mod;
                }
            }
            any |= !wcs.is_empty();
        }
        if recv && rcnt < tot {
            poll(&r.res.recv_cq, false, &mut wcs)?;
            for wc in &wcs {
                check_wc(wc, false, || format!(" rcnt={rcnt}"))?;
                let q = (wc.wr_id as usize).min(nq - 1);
                rcnt += 1;
                if dur.is_some() || rposted[q] < iters {
                    r.res.post_recv(p, q, r.size)?;
                    rposted[q] += 1;
                }
            }
            any |= !wcs.is_empty();
        }
        if any {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > STALL {
            bail!(
                "no completion for {} s (sent {totscnt}, completed {totccnt})",
                STALL.as_secs()
            );
        }
    }
    if no_peak {
        tcompleted[0] = now_ns(t0);
    }
    if let Some(d) = dur {
        return Ok(bw_report(&params(r, counted, true), &[0], &[d.sample_ns()]));
    }
    Ok(bw_report(&params(r, iters, no_peak), &tposted, &tcompleted))
}

/// `run_iter_bw_server` for `ib_send_bw`.
fn run_receiver(r: &RunParams) -> Result<BwReport> {
    let p = r.plan;
    let s = &p.settings;
    let nq = p.qps;
    let mut dur: Option<DurationClock> = None;
    let iters = s.iters;
    let tot = if s.duration.is_some() {
        0
    } else {
        iters * nq as u64
    };
    let mut rposted = vec![u64::from(s.rx_depth); nq];
    let mut rcnt = 0u64;
    let mut counted = 0u64;
    let mut first: Option<Instant> = None;
    let mut wcs = Vec::with_capacity(16);
    let mut last_progress = Instant::now();
    let mut ticker = Ticker::new(r);
    loop {
        if let Some(t) = &mut ticker {
            t.tick(rcnt, &[]);
        }
        match (s.duration, dur) {
            (Some(_), Some(d)) if d.phase() == Phase::End => break,
            (None, _) if rcnt >= tot => break,
            _ => {}
        }
        poll(&r.res.recv_cq, r.plan.settings.events, &mut wcs)?;
        if wcs.is_empty() {
            if last_progress.elapsed() > STALL {
                bail!(
                    "no message for {} s (received {rcnt} of {tot})",
                    STALL.as_secs()
                );
            }
            continue;
        }
        last_progress = Instant::now();
        if first.is_none() {
            first = Some(Instant::now());
            dur = s.duration.map(DurationClock::new);
        }
        let phase = dur.map(|d| d.phase());
        for wc in &wcs {
            let q = (wc.wr_id as usize).min(nq - 1);
            check_wc(wc, false, || format!(" rcnt={rcnt}"))?;
            rcnt += 1;
            if phase == Some(Phase::Sample) {
                counted += 1;
            }
            if s.duration.is_some() || rposted[q] < iters {
                r.res.post_recv(p, q, r.size)?;
                rposted[q] += 1;
            }
        }
    }
    if let Some(d) = dur {
        return Ok(bw_report(&params(r, counted, true), &[0], &[d.sample_ns()]));
    }
    let start = first.unwrap_or_else(Instant::now);
    let elapsed = start.elapsed().as_nanos() as u64;
    Ok(bw_report(&params(r, iters, true), &[0], &[elapsed]))
}
