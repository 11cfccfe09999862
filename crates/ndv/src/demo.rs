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

fn side(addr: IpAddr, bytes: usize) -> Result<Side, String> {
    let ad = Provider
        .open_adapter(addr)
        .map_err(|e| format!("open adapter {addr}: {e}"))?;
    let cq = ad
        .create_completion_queue(1024)
        .map_err(|e| e.to_string())?;
    let mr = ad.create_memory_region().map_err(|e| e.to_string())?;
    mr.register(
        bytes.max(CHUNK) * 2,
        mr_flags::ALLOW_REMOTE_READ | mr_flags::ALLOW_REMOTE_WRITE,
    )
    .wait()
    .map_err(|e| e.to_string())?;
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

fn wait<T: Send + 'static>(p: NdPending<T>, what: &str) -> Result<T, String> {
    let mut p = p;
    match p.wait_timeout(LIMIT) {
        Some(r) => r.map_err(|e| format!("{what}: {e}")),
        None => Err(format!("{what}: no completion within {LIMIT:?}")),
    }
}

fn empty() -> NdResultEntry {
    NdResultEntry {
        status: NdStatus::SUCCESS,
        bytes_transferred: 0,
        queue_pair_context: 0,
        request_context: 0,
        request_type: RequestType::Send,
    }
}

/// Takes `n` completions from `cq`, failing on any non-success.
fn results(cq: &CompletionQueue, n: usize) -> Result<Vec<NdResultEntry>, String> {
    let t0 = Instant::now();
    let mut v = Vec::with_capacity(n);
    let mut buf = [empty(); 64];
    while v.len() < n {
        let k = cq.get_results(&mut buf[..(n - v.len()).min(64)]);
        for r in &buf[..k] {
            if r.status != NdStatus::SUCCESS {
                return Err(format!(
                    "{:?} request {} completed with {}",
                    r.request_type, r.request_context, r.status
                ));
            }
        }
        v.extend_from_slice(&buf[..k]);
        if k == 0 {
            if t0.elapsed() > LIMIT {
                return Err(format!(
                    "only {} of {n} completions within {LIMIT:?}",
                    v.len()
                ));
            }
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

struct Conn {
    cqp: QueuePair,
    sqp: QueuePair,
    cc: Connector,
    sc: Connector,
}

/// Connects client to the server's listener; the client's private data says `hello`.
fn connect(c: &Side, s: &Side, l: &Listener, port: u16, r: &mut Report) -> Result<Conn, String> {
    let e = |e: NdError| e.to_string();
    let cqp =
        c.ad.create_queue_pair(&c.cq, &c.cq, 1, 256, 256, 2, 2, 64)
            .map_err(e)?;
    let sqp =
        s.ad.create_queue_pair(&s.cq, &s.cq, 2, 256, 256, 2, 2, 64)
            .map_err(e)?;
    let sc = s.ad.create_connector().map_err(e)?;
    let cc = c.ad.create_connector().map_err(e)?;
    let t0 = Instant::now();
    let req = l.get_connection_request(&sc).map_err(e)?;
    let conn = cc
        .connect(&cqp, SocketAddr::new(s.ad.address(), port), 8, 8, b"hello")
        .map_err(e)?;
    wait(req, "GetConnectionRequest")?;
    let peer = sc.get_peer_address().map_err(e)?;
    let acc = sc.accept(&sqp, 8, 8, b"welcome").map_err(e)?;
    wait(conn, "Connect")?;
    let limits = cc.get_read_limits().map_err(e)?;
    wait(cc.complete_connect().map_err(e)?, "CompleteConnect")?;
    wait(acc, "Accept")?;
    r.step(&format!(
        "connected {} -> {} in {:.1} ms (server sees peer {peer}; read limits {limits:?}; private data {:?})",
        cc.get_local_address().map_err(e)?,
        SocketAddr::new(s.ad.address(), port),
        t0.elapsed().as_secs_f64() * 1e3,
        String::from_utf8_lossy(&cc.get_private_data().map_err(e)?[..7])
    ));
    Ok(Conn { cqp, sqp, cc, sc })
}

/// Runs `ndv demo`.
pub fn run(a: &Args) -> Result<(), String> {
    let e = |e: NdError| e.to_string();
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
    let l = s.ad.create_listener().map_err(e)?;
    l.bind(SocketAddr::new(s.ad.address(), 0)).map_err(e)?;
    l.listen(8).map_err(e)?;
    let port = l.get_local_address().map_err(e)?.port();
    r.step(&format!(
        "listening on {}",
        l.get_local_address().map_err(e)?
    ));
    {
        let qp =
            c.ad.create_queue_pair(&c.cq, &c.cq, 0, 4, 4, 1, 1, 0)
                .map_err(e)?;
        let sc = s.ad.create_connector().map_err(e)?;
        let cc = c.ad.create_connector().map_err(e)?;
        let req = l.get_connection_request(&sc).map_err(e)?;
        let conn = cc
            .connect(&qp, SocketAddr::new(s.ad.address(), port), 1, 1, b"may I?")
            .map_err(e)?;
        wait(req, "GetConnectionRequest")?;
        sc.reject(b"not now").map_err(e)?;
        match wait(conn, "Connect") {
            Err(msg) if msg.contains("CONNECTION_REFUSED") => {
                let pd = cc.get_private_data().map_err(e)?;
                r.step(&format!(
                    "connect rejected: ND_CONNECTION_REFUSED, private data {:?}",
                    String::from_utf8_lossy(&pd[..7])
                ));
            }
            other => return Err(format!("the rejected connect ended with {other:?}")),
        }
    }

    // 2. A connection and its traffic.
    let k = connect(&c, &s, &l, port, &mut r)?;
    let (cm, sm) = (&c.mr, &s.mr);
    let csge = |off: usize, len: usize| {
        NdSge::new(cm.address() + off as u64, len as u32, cm.local_token())
    };
    let ssge = |off: usize, len: usize| {
        NdSge::new(sm.address() + off as u64, len as u32, sm.local_token())
    };

    // SEND/RECEIVE: 256 messages of 4 KiB, echoed back.
    let t0 = Instant::now();
    let n = 256usize;
    for i in 0..n {
        k.sqp
            .receive(i as u64, &[ssge(i % 16 * MSG, MSG)])
            .map_err(e)?;
    }
    for i in 0..n {
        cm.write(0, &pattern(i as u64, MSG)).map_err(e)?;
        k.cqp.send(i as u64, &[csge(0, MSG)], 0).map_err(e)?;
        results(&c.cq, 1)?;
        let rcv = results(&s.cq, 1)?;
        if rcv[0].bytes_transferred as usize != MSG || rcv[0].request_context != i as u64 {
            return Err(format!("receive {i}: {:?}", rcv[0]));
        }
        let mut got = vec![0u8; MSG];
        sm.read(i % 16 * MSG, &mut got).map_err(e)?;
        if got != pattern(i as u64, MSG) {
            return Err(format!("SEND {i}: data mismatch"));
        }
    }
    r.phase(
        "SEND/RECEIVE 4 KiB",
        2 * n as u64,
        (n * MSG) as u64,
        t0.elapsed(),
    );

    // RDMA WRITE client → server, 1 MiB at a time, 16 in flight.
    let chunks = bytes / CHUNK;
    let t0 = Instant::now();
    cm.write(0, &pattern(7, bytes)).map_err(e)?;
    let mut done = 0;
    for i in 0..chunks {
        k.cqp
            .write(
                i as u64,
                &[csge(i * CHUNK, CHUNK)],
                sm.address() + (i * CHUNK) as u64,
                sm.remote_token(),
                0,
            )
            .map_err(e)?;
        if i >= 16 {
            results(&c.cq, 1)?;
            done += 1;
        }
    }
    results(&c.cq, chunks - done)?;
    let took = t0.elapsed();
    let mut got = vec![0u8; bytes];
    sm.read(0, &mut got).map_err(e)?;
    if got != pattern(7, bytes) {
        return Err("RDMA WRITE: data mismatch".into());
    }
    r.phase(
        &format!("RDMA WRITE {} MiB in 1 MiB requests", bytes >> 20),
        chunks as u64,
        bytes as u64,
        took,
    );

    // RDMA READ server memory back into the client's second half.
    let t0 = Instant::now();
    sm.write(0, &pattern(8, bytes)).map_err(e)?;
    let mut done = 0;
    for i in 0..chunks {
        k.cqp
            .read(
                i as u64,
                &[csge(bytes + i * CHUNK, CHUNK)],
                sm.address() + (i * CHUNK) as u64,
                sm.remote_token(),
                0,
            )
            .map_err(e)?;
        if i >= 8 {
            results(&c.cq, 1)?;
            done += 1;
        }
    }
    results(&c.cq, chunks - done)?;
    let took = t0.elapsed();
    cm.read(bytes, &mut got).map_err(e)?;
    if got != pattern(8, bytes) {
        return Err("RDMA READ: data mismatch".into());
    }
    r.phase(
        &format!("RDMA READ {} MiB in 1 MiB requests", bytes >> 20),
        chunks as u64,
        bytes as u64,
        took,
    );

    // Atomics: 1000 FETCH & ADD, then a COMPARE & SWAP that must see their sum.
    let t0 = Instant::now();
    sm.write(0, &0u64.to_ne_bytes()).map_err(e)?;
    let adds = 1000u64;
    for i in 0..adds {
        k.cqp
            .fetch_add(i, csge(8, 8), sm.address(), sm.remote_token(), 3, 0)
            .map_err(e)?;
        results(&c.cq, 1)?;
    }
    k.cqp
        .compare_swap(
            adds,
            csge(16, 8),
            sm.address(),
            sm.remote_token(),
            3 * adds,
            42,
            0,
        )
        .map_err(e)?;
    results(&c.cq, 1)?;
    let mut v = [0u8; 8];
    cm.read(16, &mut v).map_err(e)?;
    let orig = u64::from_ne_bytes(v);
    sm.read(0, &mut v).map_err(e)?;
    if orig != 3 * adds || u64::from_ne_bytes(v) != 42 {
        return Err(format!(
            "atomics: compare saw {orig}, memory holds {}",
            u64::from_ne_bytes(v)
        ));
    }
    r.phase(
        "FETCH&ADD x1000 + COMPARE&SWAP (8 B)",
        adds + 1,
        8 * (adds + 1),
        t0.elapsed(),
    );

    // 3. NotifyDisconnect on both sides, a close handshake, then both Disconnect.
    let t0 = Instant::now();
    let ns = k.sc.notify_disconnect().map_err(e)?;
    let nc = k.cc.notify_disconnect().map_err(e)?;
    k.sqp.receive(900, &[ssge(0, 16)]).map_err(e)?;
    k.cqp.receive(901, &[csge(0, 16)]).map_err(e)?;
    k.cqp.send_inline(902, b"close", 0).map_err(e)?;
    results(&s.cq, 1)?;
    k.sqp.send_inline(903, b"close_ack", 0).map_err(e)?;
    results(&c.cq, 2)?;
    results(&s.cq, 1)?;
    // Both sides receive before disconnecting: a receive still posted gets
    // flushed (ND_CANCELED) by the Disconnect, counted here.
    k.sqp.receive(904, &[]).map_err(e)?;
    let dc = k.cc.disconnect().map_err(e)?;
    let ds = k.sc.disconnect().map_err(e)?;
    wait(dc, "client Disconnect")?;
    wait(ds, "server Disconnect")?;
    let flushed = {
        let mut buf = [empty(); 4];
        let t = Instant::now();
        let mut n = 0;
        while n == 0 && t.elapsed() < LIMIT {
            n = s.cq.get_results(&mut buf);
        }
        if n != 1 || buf[0].status != NdStatus::CANCELED {
            return Err(format!("flushed receive: {:?}", &buf[..n]));
        }
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
    drop(k);

    // 4. One-sided: the client disconnects, the server only waits.
    let k = connect(&c, &s, &l, port, &mut r)?;
    let t0 = Instant::now();
    let ns = k.sc.notify_disconnect().map_err(e)?;
    k.sqp.receive(1000, &[]).map_err(e)?;
    let dc = k.cc.disconnect().map_err(e)?;
    wait(ns, "server NotifyDisconnect")?;
    // Rule D6: the DREQ did not flush the server's QP.
    let mut buf = [empty(); 1];
    if s.cq.get_results(&mut buf) != 0 {
        return Err("an incoming DREQ flushed the server's QP".into());
    }
    // The server releases its connector: the CM answers the DREQ with a DREP.
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

fn results_any(cq: &CompletionQueue) -> Result<usize, String> {
    let mut buf = [empty(); 8];
    let t = Instant::now();
    loop {
        let n = cq.get_results(&mut buf);
        if n > 0 {
            if buf[..n].iter().any(|r| r.status != NdStatus::CANCELED) {
                return Err(format!("unexpected completions {:?}", &buf[..n]));
            }
            return Ok(n);
        }
        if t.elapsed() > LIMIT {
            return Err("the released QP's receive was never flushed".into());
        }
        std::thread::yield_now();
    }
}
