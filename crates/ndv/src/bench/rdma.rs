//! The ndverbs sides of the benchmarks, each run as a child process
//! (`ndv bench --role …`) that talks to the orchestrator over stdin/stdout.
//!
//! Protocol: a side prints `info <qpn> <psn> <rkey> <va>` (or `info <port>`),
//! reads `peer …`, prints `ready`, reads `go`, runs, prints `result …`; a
//! server runs until it reads `stop` (or its stdin closes).

use super::child::{emit, expect, stop_flag};
use crate::qp::{connect_rc, create_rc_qp, QpSize, RcPath, RcPeer};
use anyhow::{bail, ensure, Context, Result};
use ndverbs_verbs::{
    AcceptArgs, Access, ConnectArgs, Cq, Device, Endpoint, Mr, PathMtu, Pd, Pending, Progress, Qp,
    RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcQueue, WcStatus, WorkCompletion,
};
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Remote rights of every bench QP and buffer.
const RW: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ);

/// One RC QP with its CQ and a buffer.
pub struct Side {
    pub dev: Device,
    pub cq: Cq,
    pub mr: Mr,
    pub qp: Qp,
    pub psn: u32,
    _pd: Pd,
}

fn open(ip: IpAddr, mode: Progress) -> Result<Device> {
    crate::device::open(ip, mode)
}

impl Side {
    pub fn new(ip: IpAddr, mode: Progress, buf: usize, depth: u32) -> Result<Side> {
        let dev = open(ip, mode)?;
        let pd = dev.alloc_pd().context("allocating a PD")?;
        let cq = dev.create_cq(4 * depth + 16).context("creating a CQ")?;
        let mr = pd.reg_mr(buf.max(64), RW).context("registering memory")?;
        let qp = new_qp(&pd, &cq, depth)?;
        Ok(Side {
            dev,
            cq,
            mr,
            qp,
            psn: 0x1000 + (std::process::id() & 0xffff),
            _pd: pd,
        })
    }

    pub fn info_line(&self) -> String {
        format!(
            "info {} {} {} {}",
            self.qp.qpn(),
            self.psn,
            self.mr.rkey(),
            self.mr.addr()
        )
    }

    /// Reads `peer qpn psn rkey va`, connects, returns the peer's buffer.
    pub fn connect_from_stdin(&self, peer_ip: IpAddr, mtu: PathMtu) -> Result<RemoteAddr> {
        let l = expect("peer")?;
        let f: Vec<u64> = l
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .with_context(|| format!("bad peer line {l:?}"))?;
        let [qpn, psn, rkey, va] = f[..] else {
            bail!("bad peer line {l:?}");
        };
        connect_qp(&self.qp, self.psn, peer_ip, qpn as u32, psn as u32, mtu)?;
        Ok(RemoteAddr {
            va,
            rkey: rkey as u32,
        })
    }
}

/// A QP of `depth` sends and receives (64 bytes inline) in INIT.
pub fn new_qp(pd: &Pd, cq: &Cq, depth: u32) -> Result<Qp> {
    let size = QpSize {
        send: depth,
        recv: depth,
        inline: 64,
    };
    create_rc_qp(pd, cq, cq, size, RW)
}

/// INIT → RTR → RTS by hand (no CM), as `ibv_rc_pingpong` does.
pub fn connect_qp(
    qp: &Qp,
    my_psn: u32,
    peer: IpAddr,
    peer_qpn: u32,
    peer_psn: u32,
    mtu: PathMtu,
) -> Result<()> {
    let peer = RcPeer {
        qpn: peer_qpn,
        psn: peer_psn,
        gid: ndverbs_wire::cma::gid_of(peer),
    };
    connect_rc(qp, my_psn, &peer, &RcPath::pingpong(mtu))
}

/// Polls a CQ in manual progress; after [`SPIN`] without completions it
/// sleeps in the engine (socket, doorbell, timers) for up to a millisecond
/// per call, so a side that waits does not take a core from its peer.
struct Poller {
    idle_since: Option<Instant>,
}

/// How long a bandwidth side spins before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

impl Poller {
    fn new() -> Self {
        Poller { idle_since: None }
    }

    fn poll(&mut self, dev: &Device, cq: &Cq, out: &mut [WorkCompletion]) -> usize {
        let n = cq.poll(out);
        if n > 0 {
            self.idle_since = None;
            return n;
        }
        let t = *self.idle_since.get_or_insert_with(Instant::now);
        if t.elapsed() > SPIN {
            let _ = dev.progress_wait(Duration::from_millis(1));
        }
        0
    }
}

fn check(wc: &WorkCompletion) -> Result<()> {
    ensure!(
        wc.status == WcStatus::Success,
        "completion {:?} for wr {}",
        wc.status,
        wc.wr_id
    );
    Ok(())
}

/// With `NDV_BENCH_DEBUG` set, prints the QP's and adapter's counters.
fn debug_counters(s: &Side) {
    if std::env::var_os("NDV_BENCH_DEBUG").is_none() {
        return;
    }
    if let Ok(c) = s.qp.counters() {
        let nz: Vec<String> = c
            .pairs()
            .into_iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        eprintln!("qp {:#x}: {}", s.qp.qpn(), nz.join(" "));
    }
    let st = s.dev.stats();
    let [rcvd, sent, would_block] =
        ["rcvd_pkts", "sent_pkts", "send_would_block"].map(|k| st.get(k));
    eprintln!("device: rcvd {rcvd} sent {sent} would_block {would_block}");
}

/// Passive side of the WRITE bandwidth test: drives the engine until `stop`.
pub fn write_server(ip: IpAddr, peer: IpAddr, mtu: PathMtu, size: usize) -> Result<()> {
    let s = Side::new(ip, Progress::Manual, size, 16)?;
    emit(&s.info_line());
    s.connect_from_stdin(peer, mtu)?;
    let stop = stop_flag();
    emit("ready");
    let mut wc = [no_wc(); 16];
    let mut p = Poller::new();
    while !stop.load(Ordering::Relaxed) {
        p.poll(&s.dev, &s.cq, &mut wc);
    }
    debug_counters(&s);
    Ok(())
}

/// Active side: keeps `depth` WRITEs of `size` bytes in flight for `secs`
/// (after a quarter-second warm-up); prints `result <bytes> <seconds>`.
pub fn write_client(
    ip: IpAddr,
    peer: IpAddr,
    mtu: PathMtu,
    size: usize,
    depth: u32,
    secs: f64,
) -> Result<()> {
    let s = Side::new(ip, Progress::Manual, size, depth)?;
    emit(&s.info_line());
    let remote = s.connect_from_stdin(peer, mtu)?;
    emit("ready");
    expect("go")?;
    // Signal every `sig`-th WRITE: completions are moderated as in perftest.
    let sig = (depth / 4).max(1) as u64;
    let sge = s.mr.sge(0, size as u32);
    let mut posted = 0u64;
    let mut done = 0u64;
    let mut wc = [no_wc(); 32];
    let warm = Duration::from_millis(250);
    let t_start = Instant::now();
    let mut t0: Option<(Instant, u64)> = None;
    let end = warm + Duration::from_secs_f64(secs);
    let mut p = Poller::new();
    loop {
        while posted - done < depth as u64 {
            let signaled = posted % sig == sig - 1;
            let mut wr = SendWr::new(posted, SendOp::Write(remote), [sge]);
            wr.signaled = signaled;
            s.qp.post_send(wr)?;
            posted += 1;
        }
        let n = p.poll(&s.dev, &s.cq, &mut wc);
        for w in &wc[..n] {
            check(w)?;
            done = w.wr_id + 1;
        }
        let el = t_start.elapsed();
        if t0.is_none() && el >= warm {
            t0 = Some((Instant::now(), done));
        }
        if el >= end {
            break;
        }
    }
    let (t0, d0) = t0.unwrap_or((t_start, 0));
    let secs = t0.elapsed().as_secs_f64();
    emit(&format!("result {} {secs}", (done - d0) * size as u64));
    debug_counters(&s);
    // Drain so the peer sees no half-finished message.
    let t = Instant::now();
    while done < posted && t.elapsed() < Duration::from_secs(2) {
        let n = s.cq.poll(&mut wc);
        for w in &wc[..n] {
            done = w.wr_id + 1;
        }
        if done + sig > posted {
            break;
        }
    }
    Ok(())
}

/// 8-byte SEND ping-pong, both roles busy-polling their CQ (as
/// `ib_send_lat`: sends are unsignaled but every 64th; each side waits only
/// for the peer's message). In manual progress the polls drive the engine;
/// with engine threads they only read the CQ. The client prints
/// `result <iters> <seconds> <median ns>`.
pub fn lat(ip: IpAddr, peer: IpAddr, mode: Progress, iters: u64, client: bool) -> Result<()> {
    let depth = 128;
    let size = 8;
    let s = Side::new(ip, mode, 2 * size, depth)?;
    for i in 0..depth as u64 {
        s.qp.post_recv(RecvWr::new(i, [s.mr.sge(size, size as u32)]))?;
    }
    emit(&s.info_line());
    s.connect_from_stdin(peer, PathMtu::Mtu4096)?;
    let stop = if client { None } else { Some(stop_flag()) };
    emit("ready");
    if client {
        expect("go")?;
    }
    let warm = iters / 10 + 100;
    let mut sent = 0u64;
    let mut wc = [no_wc(); 16];
    let sge = s.mr.sge(0, size as u32);
    let send = |n: u64| -> Result<()> {
        let mut wr = SendWr::new(u64::MAX - n, SendOp::Send, [sge]);
        wr.signaled = n % 64 == 63;
        Ok(s.qp.post_send(wr)?)
    };
    let mut t_sent = Instant::now();
    if client {
        send(sent)?;
        sent += 1;
    }
    let mut got = 0u64;
    let mut t0 = Instant::now();
    let mut last = Instant::now();
    let mut rtt = Vec::with_capacity(if client { iters as usize } else { 0 });
    loop {
        let n = s.cq.poll(&mut wc);
        if n == 0 {
            if let Some(f) = &stop {
                if f.load(Ordering::Relaxed) {
                    return Ok(());
                }
            }
            if last.elapsed() > Duration::from_secs(10) {
                bail!("ping-pong stalled after {got} messages");
            }
            continue;
        }
        last = Instant::now();
        for w in &wc[..n] {
            check(w)?;
            if w.wr_id >= depth as u64 {
                continue; // a send completion
            }
            s.qp.post_recv(RecvWr::new(w.wr_id, [s.mr.sge(size, size as u32)]))?;
            got += 1;
            if client && got > warm {
                rtt.push(last.duration_since(t_sent).as_nanos() as u64);
            }
            if client && got == warm {
                t0 = Instant::now();
            }
            if client && got == warm + iters {
                let secs = t0.elapsed().as_secs_f64();
                let med = super::base::median_ns(&mut rtt);
                emit(&format!("result {iters} {secs} {med}"));
                return Ok(());
            }
            t_sent = Instant::now();
            send(sent)?;
            sent += 1;
        }
    }
}

/// Waits for an endpoint request as an application would (the wait runs
/// the engine in manual mode, and spins before it sleeps while that pays:
/// see `DeviceConfig::sleep_at_once`).
fn drive<T>(p: Pending<T>, what: &str) -> Result<T> {
    p.wait_timeout(Duration::from_secs(10))
        .with_context(|| format!("{what}: no answer in 10 s"))?
        .with_context(|| what.to_string())
}

fn wait_wc(cq: &Cq, what: &str) -> Result<WorkCompletion> {
    let w = cq
        .wait_one(Duration::from_secs(10))?
        .with_context(|| format!("{what}: no completion in 10 s"))?;
    check(&w)?;
    Ok(w)
}

const CM_PORT: u16 = 7471;

/// Server of the connection-rate test: accepts, receives one message, waits
/// for the peer's DREQ and answers it; until `stop`.
pub fn conn_server(ip: IpAddr, mode: Progress) -> Result<()> {
    let dev = open(ip, mode)?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(64)?;
    let mr = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    let listener = Endpoint::new(&dev)?;
    listener.listen(CM_PORT, 64)?;
    emit(&format!("info {CM_PORT}"));
    let stop = stop_flag();
    emit("ready");
    while !stop.load(Ordering::Relaxed) {
        let ep = Endpoint::new(&dev)?;
        let qp = new_qp(&pd, &cq, 4)?;
        qp.post_recv(RecvWr::new(1, [mr.sge(0, 8)]))?;
        let req = listener.get_request(&ep)?;
        // Wait for a request, checking `stop` now and then.
        let got = loop {
            if let Some(v) = req.wait_timeout(Duration::from_millis(50)) {
                break Some(v);
            }
            if stop.load(Ordering::Relaxed) {
                break None;
            }
        };
        let Some(got) = got else { break };
        if got.is_err() {
            continue;
        }
        let acc = ep.accept(
            &qp,
            AcceptArgs {
                responder_resources: 0,
                initiator_depth: 0,
                rnr_retry_count: 7,
                private_data: vec![],
            },
        )?;
        if drive(acc, "accept").is_err() {
            continue;
        }
        let dn = ep.notify_disconnect()?;
        if wait_wc(&cq, "receive").is_err() {
            continue;
        }
        let _ = drive(dn, "notify disconnect");
        let _ = ep.disconnect(&qp).map(|p| drive(p, "disconnect"));
        while cq.poll_one().is_some() {}
    }
    Ok(())
}

/// Client of the connection-rate test: connect + complete + one 8-byte SEND
/// (until its ACK) + disconnect (until the DREP), for `secs`; prints
/// `result <cycles> <seconds>`.
pub fn conn_client(ip: IpAddr, server: IpAddr, mode: Progress, secs: f64) -> Result<()> {
    let dev = open(ip, mode)?;
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(64)?;
    let mr = pd.reg_mr(64, Access::LOCAL_WRITE)?;
    emit("info 0");
    expect("peer")?;
    emit("ready");
    expect("go")?;
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut port = 40000u16;
    let debug = std::env::var_os("NDV_BENCH_DEBUG").is_some();
    let mut phases = [Duration::ZERO; 5];
    while t0.elapsed().as_secs_f64() < secs {
        let tc = Instant::now();
        let ep = Endpoint::new(&dev)?;
        let qp = new_qp(&pd, &cq, 4)?;
        port = if port >= 65000 { 40000 } else { port + 1 };
        let args = ConnectArgs {
            remote: server,
            remote_port: CM_PORT,
            local_port: port,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: PathMtu::Mtu4096,
            private_data: vec![],
        };
        drive(ep.connect(&qp, args)?, "connect")?;
        let t1 = tc.elapsed();
        drive(ep.complete_connect(&qp)?, "complete connect")?;
        let t2 = tc.elapsed();
        qp.post_send(SendWr::new(7, SendOp::Send, [mr.sge(0, 8)]))?;
        wait_wc(&cq, "send")?;
        let t3 = tc.elapsed();
        drive(ep.disconnect(&qp)?, "disconnect")?;
        let t4 = tc.elapsed();
        phases[0] += t1;
        phases[1] += t2 - t1;
        phases[2] += t3 - t2;
        phases[3] += t4 - t3;
        if debug && tc.elapsed() > Duration::from_millis(20) {
            eprintln!(
                "slow cycle {n}: connect {t1:?} complete {t2:?} send {t3:?} disconnect {:?}",
                tc.elapsed()
            );
        }
        while cq.poll_one().is_some() {}
        n += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    if debug {
        let avg: Vec<_> = phases[..4].iter().map(|d| *d / n.max(1) as u32).collect();
        eprintln!("average per cycle: connect, complete, send, disconnect = {avg:?}");
    }
    emit(&format!("result {n} {secs}"));
    Ok(())
}

/// Resident memory (`VmRSS`) in bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// CPU time (user + system) of this process so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// P4: `qps` connected pairs between 127.0.0.1 and 127.0.0.2 in this process
/// (engine threads); prints `result <qps> <rss bytes per QP> <idle cpu %>
/// <idle cpu % with no QPs> <setup seconds>`.
pub fn scale(a: IpAddr, b: IpAddr, qps: u32, idle_secs: f64) -> Result<()> {
    let da = open(a, Progress::Thread)?;
    let db = open(b, Progress::Thread)?;
    // An idle adapter pair with nothing on it.
    std::thread::sleep(Duration::from_millis(200));
    let (c0, t0) = (cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(idle_secs));
    let empty = (cpu_time() - c0).as_secs_f64() / t0.elapsed().as_secs_f64() * 100.0;
    let (pa, pb) = (da.alloc_pd()?, db.alloc_pd()?);
    let (ca, cb) = (da.create_cq(1 << 16)?, db.create_cq(1 << 16)?);
    let ma = pa.reg_mr(4096, Access::LOCAL_WRITE)?;
    let mb = pb.reg_mr(4096, Access::LOCAL_WRITE)?;
    let before = rss();
    let setup = Instant::now();
    let mut pairs = Vec::with_capacity(qps as usize);
    for _ in 0..qps {
        // perftest/rc_pingpong-like defaults: 128 sends, 128 receives.
        let qa = new_qp(&pa, &ca, 128)?;
        let qb = new_qp(&pb, &cb, 128)?;
        connect_qp(&qa, 1, b, qb.qpn(), 2, PathMtu::Mtu4096)?;
        connect_qp(&qb, 2, a, qa.qpn(), 1, PathMtu::Mtu4096)?;
        pairs.push((qa, qb));
    }
    let setup = setup.elapsed().as_secs_f64();
    // Prove the first and last pair carry traffic.
    for (qa, qb) in [pairs.first(), pairs.last()].into_iter().flatten() {
        qb.post_recv(RecvWr::new(1, [mb.sge(0, 64)]))?;
        qa.post_send(SendWr::new(2, SendOp::Send, [ma.sge(0, 64)]))?;
        wait_wc(&ca, "scale send")?;
        wait_wc(&cb, "scale receive")?;
    }
    std::thread::sleep(Duration::from_millis(300));
    let after = rss();
    let (c0, t0) = (cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(idle_secs));
    let idle = (cpu_time() - c0).as_secs_f64() / t0.elapsed().as_secs_f64() * 100.0;
    let per_qp = after.saturating_sub(before) / (2 * qps.max(1) as u64);
    emit(&format!("result {qps} {per_qp} {idle} {empty} {setup}"));
    drop(pairs);
    Ok(())
}

/// A zeroed completion for output arrays.
fn no_wc() -> WorkCompletion {
    WorkCompletion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        queue: WcQueue::Send,
        byte_len: 0,
        imm: None,
        invalidated_rkey: None,
        qpn: 0,
        src_qp: 0,
        solicited: false,
        grh: false,
    }
}
