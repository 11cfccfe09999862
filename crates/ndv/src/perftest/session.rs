//! One run of a perftest program's [`schedule`]: the exchanges over the
//! control channel, connecting the data QPs, printing, and the measured runs,
//! in the order the real program does them.

use super::args::{Args, Plan};
use super::control::{retry_cm, Ctrl, Opened};
use super::exchange::{exchange_bw_reports, exchange_preamble, mtu_bytes, mtu_enum};
use super::exchange::{BwReport, Preamble};
use super::keys::PerftestDest;
use super::lat::LatResult;
use super::measure::{Resources, RunParams};
use super::program::{Kind, Role, Verb};
use super::pump::Pump;
use super::report::{self, TestInfo, RESULT_LINE};
use super::schedule::{schedule, Step, ALL_SIZES};
use super::settings::CmMode;
use super::stats::{lat_duration, rtt_factor};
use super::{bw, lat};
use crate::cm;
use crate::qp::{connect_rc, peer_gid, random_psn, rd_atomic, RcPath, RcPeer};
use anyhow::{Context, Result};
use ndverbs_verbs::{Device, Endpoint, PathMtu, RemoteAddr};
use std::io::{self, IsTerminal, Write};
use std::net::IpAddr;
use std::time::Duration;

/// What perftest says when an exchange fails, by where it failed.
const EXCHANGE: &str = "Failed to exchange data between server and clients";
const CLOSE: &str = "Failed to close connection between server and client";
const CM_SYNC_BEFORE: &str =
    "Failed to sync between client and server before creating RDMA CM connection";
const CM_SYNC_AFTER: &str =
    "Failed to sync between client and server after creating RDMA CM connection";
const CM_CONNECT: &str = "Failed to create RDMA CM connection";

/// The result of one measured run.
enum RunResult {
    Bw(BwReport),
    Lat(LatResult),
}

/// One run of the schedule.
pub struct Session<'a> {
    plan: &'a Plan,
    args: &'a Args,
    dev: &'a Device,
    res: &'a Resources,
    ctrl: Ctrl,
    listener: Option<Endpoint>,
    pump: &'a Pump,
    eps: Vec<Endpoint>,
    peer_ip: Option<IpAddr>,
    timeout: Duration,
    out: io::Stdout,
    /// `--plot`: (size, value) of each result row printed, one per size.
    points: Vec<(u64, f64)>,
}

impl<'a> Session<'a> {
    /// A session over `opened`'s control channel, measuring with `res`.
    pub fn new(
        a: &'a Args,
        plan: &'a Plan,
        opened: Opened,
        dev: &'a Device,
        res: &'a Resources,
        pump: &'a Pump,
        timeout: Duration,
    ) -> Session<'a> {
        Session {
            plan,
            args: a,
            dev,
            res,
            ctrl: opened.ctrl,
            listener: opened.listener,
            pump,
            eps: Vec::new(),
            peer_ip: opened.peer_ip,
            timeout,
            out: io::stdout(),
            points: Vec::new(),
        }
    }

    /// Walks the schedule, then (`-R`) disconnects; returns the points of
    /// the rows printed, for `--plot`.
    pub fn run(mut self) -> Result<Vec<(u64, f64)>> {
        let r = self.execute();
        self.finish();
        r.map(|()| self.points)
    }

    /// Keeps the value of a printed row for `--plot`; a later row of the same
    /// size (the sum of `-b`) replaces the earlier.
    fn point(&mut self, size: u64, v: f64) {
        match self.points.last_mut() {
            Some(last) if last.0 == size => last.1 = v,
            _ => self.points.push((size, v)),
        }
    }

    fn my_keys(&self, psns: &[u32]) -> Vec<PerftestDest> {
        let p = self.plan;
        let gid = self.dev.gid().octets();
        (0..p.qps)
            .map(|i| PerftestDest {
                lid: 0,
                out_reads: p.out_reads,
                qpn: self.res.qps[i].qpn(),
                psn: psns[i],
                rkey: if p.test.verb == Verb::Send {
                    0
                } else {
                    self.res.mr.rkey()
                },
                vaddr: self.res.mr.addr() + p.recv_off(i) as u64,
                gid,
                srqn: 0,
            })
            .collect()
    }

    fn info(&self, mtu_enum: u8) -> TestInfo {
        let p = self.plan;
        let mut info = TestInfo::new(p.test, p.role, &self.args.ib_dev, &p.settings);
        info.atomic = p.atomic;
        info.num_qps = p.qps as u32;
        info.mtu = mtu_bytes(mtu_enum).unwrap_or(1024);
        info.gid_index = Some(self.args.gid_index.unwrap_or(0));
        info.inline_size = self.args.inline_size;
        info.out_reads = u32::from(p.out_reads);
        if p.cm {
            info.cm = CmMode::Qps;
        }
        info
    }

    fn execute(&mut self) -> Result<()> {
        let p = self.plan;
        let role = p.role;
        let steps = schedule(p.test, role, p.flow);
        let psns: Vec<u32> = (0..p.qps).map(|_| random_psn()).collect();
        let my = self.my_keys(&psns);
        let mut remote = vec![PerftestDest::default(); p.qps];
        let (my_mtu, lowered) = p.path_mtu(self.dev.active_mtu());
        let mut mtu_enum = mtu_enum(my_mtu.bytes()).unwrap_or(3);
        let mut keys_done = false;
        let mut size = p.settings.size;
        let mut sizes = ALL_SIZES.iter();
        let mut result: Option<RunResult> = None;
        let mut my_report = BwReport::default();
        let mut remote_report = BwReport::default();
        let mut i = 0;
        while i < steps.len() {
            let step = steps[i];
            i += 1;
            match step {
                Step::Preamble => {
                    if let Some(m) = &lowered {
                        self.w(|o| o.write_all(m.as_bytes()))?;
                    }
                    let mine = Preamble::new(my_mtu.bytes());
                    let peer = exchange_preamble(&mut self.ctrl, role, &mine).context(EXCHANGE)?;
                    mtu_enum = peer.agreed_mtu;
                    if p.cm {
                        self.connect_cm(PathMtu::from_enum(mtu_enum).unwrap_or(my_mtu))?;
                    }
                }
                Step::PrintTestInfo => {
                    let info = self.info(mtu_enum);
                    self.w(|o| report::write_test_info(o, &info))?;
                }
                Step::HandShake => {
                    let prints_remote = steps.get(i) == Some(&Step::PrintRemoteAddress);
                    if !keys_done || prints_remote {
                        for (q, r) in remote.iter_mut().enumerate() {
                            *r = self.ctrl.hand_shake(role, &my[q]).context(EXCHANGE)?;
                            if prints_remote {
                                let d = *r;
                                self.w(|o| report::write_address(o, true, p.test.verb, &d, true))?;
                            }
                        }
                        keys_done = true;
                        if prints_remote {
                            i += 1;
                        }
                    } else {
                        self.ctrl.hand_shake(role, &my[0]).context(EXCHANGE)?;
                    }
                }
                Step::ConnectQp => {
                    if !p.cm {
                        self.connect_qps(&my, &remote, mtu_enum)?;
                    }
                }
                Step::PrintLocalAddress => {
                    for d in &my {
                        self.w(|o| report::write_address(o, false, p.test.verb, d, true))?;
                    }
                }
                Step::PrintRemoteAddress => {
                    for d in &remote {
                        self.w(|o| report::write_address(o, true, p.test.verb, d, true))?;
                    }
                }
                Step::PrintResultHeader => match p.test.kind {
                    Kind::Bw => self.w(|o| report::write_bw_header(o, p.units))?,
                    Kind::Lat => self.w(|o| report::write_lat_header(o, p.flow.duration))?,
                },
                Step::NextSize => size = *sizes.next().unwrap_or(&ALL_SIZES[22]),
                Step::Prepare => self.prepare(size)?,
                Step::Run => {
                    self.pump.pause();
                    let r = self.run_once(size, &remote);
                    self.pump.resume();
                    let r = r?;
                    if let RunResult::Bw(rep) = &r {
                        my_report = *rep;
                    }
                    result = Some(r);
                }
                Step::PrintReport => match result.take() {
                    Some(RunResult::Bw(r)) => self.print_bw(&r)?,
                    Some(RunResult::Lat(r)) => self.print_lat(size, r)?,
                    None => {}
                },
                Step::ExchangeBwReports => {
                    let mine = if role == Role::Server && !p.flow.duplex {
                        BwReport::default()
                    } else {
                        my_report
                    };
                    remote_report =
                        exchange_bw_reports(&mut self.ctrl, role, &mine).context(EXCHANGE)?;
                }
                Step::PrintRemoteReport => self.print_bw(&remote_report)?,
                Step::PrintSumReport => self.print_bw(&my_report.sum(&remote_report))?,
                Step::PrintResultLine => self.w(|o| writeln!(o, "{RESULT_LINE}"))?,
                Step::Close => self.ctrl.close(role, &my[0]).context(CLOSE)?,
            }
        }
        Ok(())
    }

    /// Writes to stdout and flushes.
    fn w(&mut self, f: impl FnOnce(&mut io::Stdout) -> io::Result<()>) -> Result<()> {
        f(&mut self.out)
            .and_then(|()| self.out.flush())
            .context("writing stdout")
    }

    /// A BW row.
    fn print_bw(&mut self, r: &BwReport) -> Result<()> {
        let units = self.plan.units;
        self.w(|o| report::write_bw_row(o, r, units))?;
        self.point(r.size, r.bw_avg);
        Ok(())
    }

    /// A latency report: the row (after the samples with `-U`/`-H`), or the
    /// `-D` row.
    fn print_lat(&mut self, size: u64, r: LatResult) -> Result<()> {
        let p = self.plan;
        let f = rtt_factor(p.test.verb);
        match r {
            LatResult::Samples(deltas) => {
                let iters = p.settings.iters;
                let (u, h) = (self.args.unsorted, self.args.histogram);
                let mut stats = None;
                self.w(|o| {
                    stats = report::write_lat_report(o, size, iters, &deltas, f, u, h)?;
                    Ok(())
                })?;
                if let Some(st) = stats {
                    self.point(size, st.t_typical);
                }
            }
            LatResult::Duration { iters, elapsed_ns } => {
                let (t, tps) = lat_duration(iters, elapsed_ns, f);
                self.w(|o| report::write_lat_duration_row(o, size, iters, t, tps))?;
                self.point(size, t);
            }
        }
        Ok(())
    }

    /// `ctx_connect`: each data QP to RTS with the peer's keys.
    fn connect_qps(&self, my: &[PerftestDest], remote: &[PerftestDest], mtu: u8) -> Result<()> {
        for ((qp, me), rem) in self.res.qps.iter().zip(my).zip(remote) {
            let path = RcPath {
                mtu: PathMtu::from_enum(mtu).unwrap_or(self.dev.active_mtu()),
                hop_limit: 0xff,
                timeout: self.args.qp_timeout,
                responder_resources: rd_atomic(me.out_reads),
                initiator_depth: rd_atomic(rem.out_reads),
            };
            let peer = RcPeer {
                qpn: rem.qpn,
                psn: rem.psn,
                gid: peer_gid(rem.gid, self.peer_ip),
            };
            connect_rc(qp, me.psn, &peer, &path)?;
        }
        Ok(())
    }

    /// `-R`: the two all-zero hand shakes around connecting the data QPs
    /// through the CM (`create_rdma_cm_connection`).
    fn connect_cm(&mut self, mtu: PathMtu) -> Result<()> {
        let p = self.plan;
        let zero = PerftestDest::default();
        self.ctrl
            .hand_shake(p.role, &zero)
            .context(CM_SYNC_BEFORE)?;
        let rd = if matches!(p.test.verb, Verb::Read | Verb::Atomic) {
            p.out_reads.min(255) as u8
        } else {
            0
        };
        let limit = Some(self.timeout);
        for qp in &self.res.qps {
            let ep = match &self.listener {
                Some(l) => {
                    let ep = Endpoint::new(self.dev).context("rdma_create_id")?;
                    cm::next_request(l, &ep, limit)
                        .and_then(|_| cm::accept(&ep, qp, rd, limit))
                        .context(CM_CONNECT)?;
                    ep
                }
                None => {
                    let to = cm::CmConnect {
                        server: self.peer_ip.context("no server address")?,
                        port: self.args.port,
                        mtu,
                        rd_atomic: rd,
                    };
                    // A fresh endpoint per attempt: the server may not listen yet.
                    retry_cm(|| {
                        let ep = Endpoint::new(self.dev).context("rdma_create_id")?;
                        cm::connect(&ep, qp, &to, limit)?;
                        Ok(ep)
                    })
                    .context(CM_CONNECT)?
                }
            };
            self.eps.push(ep);
        }
        self.ctrl.hand_shake(p.role, &zero).context(CM_SYNC_AFTER)?;
        Ok(())
    }

    /// Posts what a size needs before its barrier (the receives of SEND tests).
    fn prepare(&mut self, size: u64) -> Result<()> {
        let p = self.plan;
        let posts_recvs = p.test.verb == Verb::Send
            && (p.test.kind == Kind::Lat || p.role == Role::Server || p.flow.duplex);
        if posts_recvs {
            for q in 0..p.qps {
                for _ in 0..p.settings.rx_depth {
                    self.res
                        .post_recv(p, q, size)
                        .context("Failed to post receive recv_wqes")?;
                }
            }
        }
        Ok(())
    }

    fn run_once(&mut self, size: u64, remote: &[PerftestDest]) -> Result<RunResult> {
        let p = self.plan;
        let remotes: Vec<RemoteAddr> = remote
            .iter()
            .map(|r| RemoteAddr {
                va: r.vaddr,
                rkey: r.rkey,
            })
            .collect();
        let run = RunParams {
            plan: p,
            res: self.res,
            dev: self.dev,
            size,
            remotes,
            inline: self.args.inline_size,
            progress: p.settings.duration.is_some()
                && (self.args.live_progress || io::stderr().is_terminal()),
        };
        match p.test.kind {
            Kind::Bw => bw::run(&run).map(RunResult::Bw),
            Kind::Lat => lat::run(&run).map(RunResult::Lat),
        }
    }

    /// `-R`: disconnect the data QPs and the control QP.
    fn finish(&mut self) {
        for (ep, qp) in self.eps.iter().zip(&self.res.qps) {
            if let Ok(p) = ep.disconnect(qp) {
                let _ = p.wait_timeout(Duration::from_secs(2));
            }
        }
        if let Ctrl::Cm(c) = &self.ctrl {
            c.disconnect(Duration::from_secs(2));
        }
    }
}
