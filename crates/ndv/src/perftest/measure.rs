//! What the BW and latency runners share: the measured objects, one run's
//! parameters, the work requests they post, polling, `-D`'s clock and
//! perftest's completion-error report.

use super::args::Plan;
use super::program::Verb;
use super::settings::AtomicOp;
use crate::qp::{create_rc_qp, QpSize};
use anyhow::{bail, Context, Result};
use ndverbs_verbs::{
    Cq, Device, Mr, Pd, Qp, RecvWr, RemoteAddr, SendOp, SendWr, SgList, WcStatus, WorkCompletion,
};
use std::time::{Duration, Instant};

/// Longest wait for any completion before a run is declared stuck.
pub const STALL: Duration = Duration::from_secs(60);

/// The measured objects: one PD, send and receive CQs, the QPs, one buffer
/// laid out as perftest's (see [`Plan::send_off`], [`Plan::recv_off`]).
pub struct Resources {
    pub send_cq: Cq,
    pub recv_cq: Cq,
    pub qps: Vec<Qp>,
    pub mr: Mr,
    _pd: Pd,
}

impl Resources {
    pub fn new(dev: &Device, plan: &Plan, inline: u32) -> Result<Resources> {
        let s = &plan.settings;
        let n = plan.qps as u32;
        let pd = dev.alloc_pd().context("Couldn't allocate PD")?;
        let send_cq = dev
            .create_cq(s.tx_depth * n + 16)
            .context("Couldn't create CQ")?;
        let recv_cq = dev
            .create_cq(s.rx_depth * n + 16)
            .context("Couldn't create CQ")?;
        let len = plan.buffer_len();
        let mr = pd
            .reg_mr(len, plan.access())
            .with_context(|| format!("Couldn't allocate MR of {len} bytes"))?;
        let size = QpSize {
            send: s.tx_depth.max(1),
            recv: s.rx_depth.max(1),
            inline,
        };
        let qps = (0..plan.qps)
            .map(|_| create_rc_qp(&pd, &send_cq, &recv_cq, size, plan.qp_access()))
            .collect::<Result<_>>()?;
        Ok(Resources {
            send_cq,
            recv_cq,
            qps,
            mr,
            _pd: pd,
        })
    }

    /// Posts one receive of `size` bytes into QP `q`'s receive block.
    pub fn post_recv(&self, plan: &Plan, q: usize, size: u64) -> Result<()> {
        let sge = self.mr.sge(plan.recv_off(q), size as u32);
        self.qps[q]
            .post_recv(RecvWr::new(q as u64, [sge]))
            .with_context(|| format!("Couldn't post recv Qp={q}"))
    }
}

/// What a measured run needs.
pub struct RunParams<'a> {
    pub plan: &'a Plan,
    pub res: &'a Resources,
    pub dev: &'a Device,
    pub size: u64,
    pub remotes: Vec<RemoteAddr>,
    pub inline: u32,
    /// Print [`super::ticker::Ticker`] lines (a `-D` run with `--progress` or a terminal).
    pub progress: bool,
}

impl RunParams<'_> {
    /// The send request of one message on QP `q`.
    pub fn send_wr(&self, q: usize, signaled: bool) -> Result<SendWr> {
        let p = self.plan;
        let size = self.size as u32;
        let remote = self.remotes[q];
        let op = match p.test.verb {
            Verb::Send => SendOp::Send,
            Verb::Write => SendOp::Write(remote),
            Verb::Read => SendOp::Read(remote),
            Verb::Atomic => match p.atomic {
                AtomicOp::FetchAndAdd => SendOp::FetchAdd { remote, add: 1 },
                AtomicOp::CmpAndSwap => SendOp::CompareSwap {
                    remote,
                    compare: 0,
                    swap: 0,
                },
            },
        };
        let inline = matches!(p.test.verb, Verb::Send | Verb::Write) && size <= self.inline;
        let mut wr = if inline {
            let data = self
                .res
                .mr
                .to_vec(p.send_off(q), size as usize)
                .context("reading the send block")?;
            let mut wr = SendWr::new(q as u64, op, SgList::new());
            wr.inline = Some(data);
            wr
        } else {
            SendWr::new(q as u64, op, [self.res.mr.sge(p.send_off(q), size)])
        };
        wr.signaled = signaled;
        Ok(wr)
    }

    /// Posts one message on QP `q`; `what` counts what was sent so far
    /// (`scnt=…`) for the error.
    pub fn post_send(&self, q: usize, signaled: bool, what: impl Fn() -> String) -> Result<()> {
        let wr = self.send_wr(q, signaled)?;
        self.res.qps[q]
            .post_send(wr)
            .with_context(|| format!("Couldn't post send: {}", what()))
    }
}

/// Takes up to 16 completions from `cq` (with `-e`, sleeping for the first).
pub fn poll(cq: &Cq, events: bool, out: &mut Vec<WorkCompletion>) -> Result<()> {
    out.clear();
    if events {
        if let Some(w) = cq
            .wait_one(Duration::from_millis(10))
            .context("Failed to get cq_event")?
        {
            out.push(w);
        }
    }
    while out.len() < 16 {
        match cq.poll_one() {
            Some(w) => out.push(w),
            None => break,
        }
    }
    Ok(())
}

/// Nanoseconds since `t0`.
pub fn now_ns(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

/// `-D`: warm-up (a quarter, START), measurement (SAMPLE), cool-down
/// (STOP), end — perftest's `catch_alarm` states.
#[derive(Debug, Clone, Copy)]
pub struct DurationClock {
    start: Instant,
    margin: Duration,
    total: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Start,
    Sample,
    Stop,
    End,
}

impl DurationClock {
    pub fn new(seconds: u32) -> Self {
        DurationClock {
            start: Instant::now(),
            margin: Duration::from_secs(u64::from(seconds / 4)),
            total: Duration::from_secs(u64::from(seconds)),
        }
    }

    pub fn phase(&self) -> Phase {
        let t = self.start.elapsed();
        if t < self.margin {
            Phase::Start
        } else if t < self.total - self.margin {
            Phase::Sample
        } else if t < self.total {
            Phase::Stop
        } else {
            Phase::End
        }
    }

    /// Length of the SAMPLE window in nanoseconds.
    pub fn sample_ns(&self) -> u64 {
        (self.total - 2 * self.margin).as_nanos() as u64
    }
}

/// Fails unless `wc` succeeded, after perftest's completion-error report
/// (`NOTIFY_COMP_ERROR_SEND`/`_RECV`) on stderr; `counts` are its
/// `scnt=…, ccnt=…` (sender) or ` rcnt=…` (receiver) line.
pub fn check_wc(
    wc: &WorkCompletion,
    at_client: bool,
    counts: impl FnOnce() -> String,
) -> Result<()> {
    if wc.status == WcStatus::Success {
        return Ok(());
    }
    eprintln!(
        " Completion with error at {}",
        if at_client { "client" } else { "server" }
    );
    eprintln!(
        " Failed status {}: wr_id {} syndrom 0x0",
        wc.status as u32, wc.wr_id
    );
    eprintln!("{}", counts());
    bail!("completion with error: {:?}", wc.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_phases() {
        // -D 8: two seconds of warm-up and of cool-down around the sample.
        let mut d = DurationClock::new(8);
        assert_eq!(d.margin, Duration::from_secs(2));
        assert_eq!(d.sample_ns(), 4_000_000_000);
        assert_eq!(d.phase(), Phase::Start);
        d.start -= Duration::from_secs(3);
        assert_eq!(d.phase(), Phase::Sample);
        d.start -= Duration::from_secs(4);
        assert_eq!(d.phase(), Phase::Stop);
        d.start -= Duration::from_secs(2);
        assert_eq!(d.phase(), Phase::End);
    }
}
