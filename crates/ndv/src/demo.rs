//! `ndv demo`: the whole NetworkDirect lifecycle in one process, on loopback
//! (a server adapter on 127.0.0.1 and a client adapter on 127.0.0.2), with a
//! short report.
//!
//! 1. Listen; a connect the server rejects (with private data).
//! 2. Connect, accept, complete; SEND/RECEIVE, RDMA WRITE, RDMA READ, atomics
//!    (an ndverbs extension: ND v2 has none), all data verified.
//! 3. The server waits with NotifyDisconnect; an application-level close
//!    handshake; then both sides Disconnect at once (crossing DREQs).
//! 4. A second connection: the client Disconnects alone while the server's
//!    NotifyDisconnect is pending; the server, notified, releases its
//!    connector, which answers with the DREP.

use anyhow::{bail, ensure, Context, Result};
use ndverbs_nd::*;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Command-line options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Server adapter address.
    #[arg(long, default_value = "127.0.0.1")]
    server: IpAddr,
    /// Client adapter address.
    #[arg(long, default_value = "127.0.0.2")]
    client: IpAddr,
    /// Bytes moved by each of the WRITE and READ phases.
    #[arg(long, default_value_t = 64 << 20)]
    bytes: usize,
}

const CHUNK: usize = 1 << 20;
const LIMIT: Duration = Duration::from_secs(60);
const MSG: usize = 4096;

struct Side {
    ad: Adapter,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn side(addr: IpAddr, bytes: usize) -> Result<Side> {
    let ad = crate::device::open_adapter(addr)?;
    let cq = ad
        .create_completion_queue(1024)
        .context("creating a completion queue")?;
    let mr = ad
        .create_memory_region()
        .context("creating a memory region")?;
    mr.register(
        bytes.max(CHUNK) * 2,
        MrFlags::ALLOW_REMOTE_READ | MrFlags::ALLOW_REMOTE_WRITE,
    )
    .wait()
    .context("registering memory")?;
    Ok(Side { ad, cq, mr })
}

#[derive(Default)]
struct Report {
    ops: u64,
    bytes: u64,
    lines: Vec<String>,
}

impl Report {
    fn phase(&mut self, name: &str, ops: u64, bytes: u64, took: Duration) {
        self.ops += ops;
        self.bytes += bytes;
        let rate = if bytes > 0 {
            format!(
                "{:9.1} MiB/s",
                bytes as f64 / (1 << 20) as f64 / took.as_secs_f64().max(1e-9)
            )
        } else {
            String::new()
        };
        self.lines.push(format!(
            "  {name:<44} {ops:>7} ops {:>12} bytes {:>9.3} s {rate}",
            bytes,
            took.as_secs_f64()
        ));
    }

    fn step(&mut self, what: &str) {
        self.lines.push(format!("  {what}"));
    }
}

fn wait<T: Send + 'static>(p: NdPending<T>, what: &str) -> Result<T> {
    let mut p = p;
    match p.wait_timeout(LIMIT) {
        Some(r) => r.with_context(|| what.to_string()),
        None => bail!("{what}: no completion within {LIMIT:?}"),
    }
}

/// Takes `n` completions from `cq`, failing on any non-success.
fn results(cq: &CompletionQueue, n: usize) -> Result<Vec<NdResultEntry>> {
    let t0 = Instant::now();
    let mut v = Vec::with_capacity(n);
    let mut buf = [NdResultEntry::default(); 64];
    while v.len() < n {
        let k = cq.get_results(&mut buf[..(n - v.len()).min(64)]);
        for r in &buf[..k] {
            ensure!(
                r.status == NdStatus::SUCCESS,
                "{:?} request {} completed with {}",
                r.request_type,
                r.request_context,
                r.status
            );
        }
        v.extend_from_slice(&buf[..k]);
        if k == 0 {
            ensure!(
                t0.elapsed() <= LIMIT,
                "only {} of {n} completions within {LIMIT:?}",
                v.len()
            );
            std::thread::yield_now();
        }
    }
    Ok(v)
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Posts requests `0..n` with at most `depth` in flight on `cq`, then waits
/// for the rest.
fn pipeline(
    cq: &CompletionQueue,
    n: usize,
    depth: usize,
    mut post: impl FnMut(usize) -> Result<(), NdError>,
) -> Result<()> {
    for i in 0..n {
        post(i).with_context(|| format!("posting request {i}"))?;
        if i >= depth {
            results(cq, 1)?;
        }
    }
    results(cq, n.min(depth))?;
    Ok(())
}

/// Checks that `mr` holds `want` at `off`.
fn verify(mr: &MemoryRegion, off: usize, want: &[u8], what: &str) -> Result<()> {
    let mut got = vec![0u8; want.len()];
    mr.read(off, &mut got).context("reading memory")?;
    ensure!(got == want, "{what}: data mismatch");
    Ok(())
}

struct Conn {
    cqp: QueuePair,
    sqp: QueuePair,
    cc: Connector,
    sc: Connector,
}

/// Connects client to the server's listener; the client's private data says `hello`.
fn connect(c: &Side, s: &Side, l: &Listener, port: u16, r: &mut Report) -> Result<Conn> {
    let cqp =
        c.ad.create_queue_pair(&c.cq, &c.cq, 1, QueuePairSizes::new(256, 2).with_inline(64))?;
    let sqp =
        s.ad.create_queue_pair(&s.cq, &s.cq, 2, QueuePairSizes::new(256, 2).with_inline(64))?;
    let sc = s.ad.create_connector()?;
    let cc = c.ad.create_connector()?;
    let t0 = Instant::now();
    let req = l.get_connection_request(&sc)?;
    let to = SocketAddr::new(s.ad.address(), port);
    let conn = cc.connect(&cqp, to, 8, 8, b"hello")?;
    wait(req, "GetConnectionRequest")?;
    let peer = sc.get_peer_address()?;
    let acc = sc.accept(&sqp, 8, 8, b"welcome")?;
    wait(conn, "Connect")?;
    let limits = cc.get_read_limits()?;
    wait(cc.complete_connect()?, "CompleteConnect")?;
    wait(acc, "Accept")?;
    r.step(&format!(
        "connected {} -> {to} in {:.1} ms (server sees peer {peer}; read limits {limits:?}; private data {:?})",
        cc.get_local_address()?,
        t0.elapsed().as_secs_f64() * 1e3,
        String::from_utf8_lossy(&cc.get_private_data()?[..7])
    ));
    Ok(Conn { cqp, sqp, cc, sc })
}

/// Runs `ndv demo`.
pub fn run(a: &Args) -> Result<()> {
    let total = Instant::now();
    let bytes = a.bytes.div_ceil(CHUNK) * CHUNK;
    let s = side(a.server, bytes)?;
    let c = side(a.client, bytes)?;
    let mut r = Report::default();
    println!(
        "ndv demo: NetworkDirect over RoCEv2, server {} / client {}",
        a.server, a.client
    );

    // 1. Listen, and a connect the server rejects.
    let l = s.ad.create_listener().context("creating a listener")?;
    l.bind(SocketAddr::new(s.ad.address(), 0))
        .and_then(|()| l.listen(8))
        .context("listening")?;
    let port = l.get_local_address()?.port();
    r.step(&format!("listening on {}", l.get_local_address()?));
    rejected_connect(&c, &s, &l, port, &mut r).context("the rejected connect")?;

    // 2. A connection and its traffic.
    let k = connect(&c, &s, &l, port, &mut r).context("connecting")?;
    send_receive(&c, &s, &k, &mut r).context("SEND/RECEIVE")?;
    write_read(&c, &s, &k, bytes, &mut r).context("RDMA WRITE and READ")?;
    atomics(&c, &s, &k, &mut r).context("atomics")?;

    // 3. NotifyDisconnect on both sides, a close handshake, then both Disconnect.
    close_both(&c, &s, &k, &mut r).context("closing from both sides")?;
    drop(k);

    // 4. One-sided: the client disconnects, the server only waits.
    let k = connect(&c, &s, &l, port, &mut r).context("connecting again")?;
    one_sided_disconnect(&s, k, &mut r).context("the one-sided Disconnect")?;

    println!("{}", r.lines.join("\n"));
    println!(
        "total: {} operations, {} bytes, {:.2} s ({:.1} MiB/s overall)",
        r.ops,
        r.bytes,
        total.elapsed().as_secs_f64(),
        r.bytes as f64 / (1 << 20) as f64 / total.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A connect the server turns down with private data.
fn rejected_connect(c: &Side, s: &Side, l: &Listener, port: u16, r: &mut Report) -> Result<()> {
    let qp =
        c.ad.create_queue_pair(&c.cq, &c.cq, 0, QueuePairSizes::new(4, 1))?;
    let sc = s.ad.create_connector()?;
    let cc = c.ad.create_connector()?;
    let req = l.get_connection_request(&sc)?;
    let to = SocketAddr::new(s.ad.address(), port);
    let conn = cc.connect(&qp, to, 1, 1, b"may I?")?;
    wait(req, "GetConnectionRequest")?;
    sc.reject(b"not now")?;
    match wait(conn, "Connect") {
        Err(e)
            if e.downcast_ref::<NdError>()
                .is_some_and(|e| e.status == NdStatus::CONNECTION_REFUSED) =>
        {
            let pd = cc.get_private_data()?;
            r.step(&format!(
                "connect rejected: ND_CONNECTION_REFUSED, private data {:?}",
                String::from_utf8_lossy(&pd[..7])
            ));
            Ok(())
        }
        other => bail!("the rejected connect ended with {other:?}"),
    }
}

/// An SGE over `mr`.
fn sge(mr: &MemoryRegion, off: usize, len: usize) -> NdSge {
    NdSge::new(mr.address() + off as u64, len as u32, mr.local_token())
}

/// 256 SENDs of 4 KiB, each received and checked.
fn send_receive(c: &Side, s: &Side, k: &Conn, r: &mut Report) -> Result<()> {
    let (cm, sm) = (&c.mr, &s.mr);
    let t0 = Instant::now();
    let n = 256usize;
    for i in 0..n {
        k.sqp.receive(i as u64, &[sge(sm, i % 16 * MSG, MSG)])?;
    }
    for i in 0..n {
        cm.write(0, &pattern(i as u64, MSG))?;
        k.cqp.send(i as u64, &[sge(cm, 0, MSG)], OpFlags::empty())?;
        results(&c.cq, 1)?;
        let rcv = results(&s.cq, 1)?;
        ensure!(
            rcv[0].bytes_transferred as usize == MSG && rcv[0].request_context == i as u64,
            "receive {i}: {:?}",
            rcv[0]
        );
        verify(sm, i % 16 * MSG, &pattern(i as u64, MSG), "SEND")?;
    }
    r.phase(
        "SEND/RECEIVE 4 KiB",
        2 * n as u64,
        (n * MSG) as u64,
        t0.elapsed(),
    );
    Ok(())
}

/// RDMA WRITE client → server, 1 MiB at a time, 16 in flight; then RDMA
/// READ of server memory back into the client's second half, 8 in flight.
fn write_read(c: &Side, s: &Side, k: &Conn, bytes: usize, r: &mut Report) -> Result<()> {
    let (cm, sm) = (&c.mr, &s.mr);
    let chunks = bytes / CHUNK;
    let remote = |i: usize| sm.address() + (i * CHUNK) as u64;
    let (token, flags) = (sm.remote_token(), OpFlags::empty());
    let t0 = Instant::now();
    cm.write(0, &pattern(7, bytes))?;
    pipeline(&c.cq, chunks, 16, |i| {
        let local = sge(cm, i * CHUNK, CHUNK);
        k.cqp.write(i as u64, &[local], remote(i), token, flags)
    })?;
    let took = t0.elapsed();
    verify(sm, 0, &pattern(7, bytes), "RDMA WRITE")?;
    r.phase(
        &format!("RDMA WRITE {} MiB in 1 MiB requests", bytes >> 20),
        chunks as u64,
        bytes as u64,
        took,
    );

    let t0 = Instant::now();
    sm.write(0, &pattern(8, bytes))?;
    pipeline(&c.cq, chunks, 8, |i| {
        let local = sge(cm, bytes + i * CHUNK, CHUNK);
        k.cqp.read(i as u64, &[local], remote(i), token, flags)
    })?;
    let took = t0.elapsed();
    verify(cm, bytes, &pattern(8, bytes), "RDMA READ")?;
    r.phase(
        &format!("RDMA READ {} MiB in 1 MiB requests", bytes >> 20),
        chunks as u64,
        bytes as u64,
        took,
    );
    Ok(())
}

/// 1000 FETCH & ADD, then a COMPARE & SWAP that must see their sum.
fn atomics(c: &Side, s: &Side, k: &Conn, r: &mut Report) -> Result<()> {
    let (cm, sm) = (&c.mr, &s.mr);
    let t0 = Instant::now();
    sm.write(0, &0u64.to_ne_bytes())?;
    let adds = 1000u64;
    for i in 0..adds {
        k.cqp.fetch_add(
            i,
            sge(cm, 8, 8),
            sm.address(),
            sm.remote_token(),
            3,
            OpFlags::empty(),
        )?;
        results(&c.cq, 1)?;
    }
    let (addr, token) = (sm.address(), sm.remote_token());
    k.cqp.compare_swap(
        adds,
        sge(cm, 16, 8),
        addr,
        token,
        3 * adds,
        42,
        OpFlags::empty(),
    )?;
    results(&c.cq, 1)?;
    let mut v = [0u8; 8];
    cm.read(16, &mut v)?;
    let orig = u64::from_ne_bytes(v);
    sm.read(0, &mut v)?;
    ensure!(
        orig == 3 * adds && u64::from_ne_bytes(v) == 42,
        "atomics: compare saw {orig}, memory holds {}",
        u64::from_ne_bytes(v)
    );
    r.phase(
        "FETCH&ADD x1000 + COMPARE&SWAP (8 B)",
        adds + 1,
        8 * (adds + 1),
        t0.elapsed(),
    );
    Ok(())
}

/// NotifyDisconnect on both sides, an application-level close handshake,
/// then both sides Disconnect at once (crossing DREQs).
fn close_both(c: &Side, s: &Side, k: &Conn, r: &mut Report) -> Result<()> {
    let (cm, sm) = (&c.mr, &s.mr);
    let t0 = Instant::now();
    let ns = k.sc.notify_disconnect()?;
    let nc = k.cc.notify_disconnect()?;
    k.sqp.receive(900, &[sge(sm, 0, 16)])?;
    k.cqp.receive(901, &[sge(cm, 0, 16)])?;
    k.cqp.send_inline(902, b"close", OpFlags::empty())?;
    results(&s.cq, 1)?;
    k.sqp.send_inline(903, b"close_ack", OpFlags::empty())?;
    results(&c.cq, 2)?;
    results(&s.cq, 1)?;
    // Both sides receive before disconnecting: a receive still posted gets
    // flushed (ND_CANCELED) by the Disconnect, counted here.
    k.sqp.receive(904, &[])?;
    let dc = k.cc.disconnect()?;
    let ds = k.sc.disconnect()?;
    wait(dc, "client Disconnect")?;
    wait(ds, "server Disconnect")?;
    let flushed = {
        let mut buf = [NdResultEntry::default(); 4];
        let t = Instant::now();
        let mut n = 0;
        while n == 0 && t.elapsed() < LIMIT {
            n = s.cq.get_results(&mut buf);
        }
        ensure!(
            n == 1 && buf[0].status == NdStatus::CANCELED,
            "flushed receive: {:?}",
            &buf[..n]
        );
        n
    };
    let notify = |p: NdPending<()>| {
        let mut p = p;
        match p.wait_timeout(Duration::from_millis(100)) {
            Some(Ok(())) => "SUCCESS (DREQ arrived)".to_string(),
            Some(Err(e)) => e.status.to_string(),
            None => "still pending".to_string(),
        }
    };
    r.phase(
        "close handshake + Disconnect on both sides",
        6,
        14,
        t0.elapsed(),
    );
    r.step(&format!(
        "  both Disconnects ND_SUCCESS (the second one answered the first one's DREQ, or they crossed); NotifyDisconnect server: {}, client: {}; {flushed} receive flushed ND_CANCELED",
        notify(ns),
        notify(nc)
    ));
    Ok(())
}

/// The client Disconnects alone while the server's NotifyDisconnect is
/// pending; the server, notified, releases its connector, whose CM answers
/// the DREQ with a DREP.
fn one_sided_disconnect(s: &Side, k: Conn, r: &mut Report) -> Result<()> {
    let t0 = Instant::now();
    let ns = k.sc.notify_disconnect()?;
    k.sqp.receive(1000, &[])?;
    let dc = k.cc.disconnect()?;
    wait(ns, "server NotifyDisconnect")?;
    // Rule D6: the DREQ did not flush the server's QP.
    let mut buf = [NdResultEntry::default(); 1];
    ensure!(
        s.cq.get_results(&mut buf) == 0,
        "an incoming DREQ flushed the server's QP"
    );
    let Conn { cqp, sqp, cc, sc } = k;
    drop(sc);
    wait(dc, "client Disconnect")?;
    drop(sqp);
    let flushed = results_any(&s.cq)?;
    r.phase(
        "one-sided Disconnect, peer NotifyDisconnect",
        2,
        0,
        t0.elapsed(),
    );
    r.step(&format!(
        "  server notified (ND_SUCCESS), its QP untouched until it let go; client Disconnect ND_SUCCESS; {flushed} receive flushed"
    ));
    drop((cqp, cc));
    Ok(())
}

fn results_any(cq: &CompletionQueue) -> Result<usize> {
    let mut buf = [NdResultEntry::default(); 8];
    let t = Instant::now();
    loop {
        let n = cq.get_results(&mut buf);
        if n > 0 {
            ensure!(
                buf[..n].iter().all(|r| r.status == NdStatus::CANCELED),
                "unexpected completions {:?}",
                &buf[..n]
            );
            return Ok(n);
        }
        ensure!(
            t.elapsed() <= LIMIT,
            "the released QP's receive was never flushed"
        );
        std::thread::yield_now();
    }
}
