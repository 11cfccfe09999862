//! `ndv ping`: rping-compatible (rdma-core `librdmacm/examples/rping.c`).
//!
//! The connection is made by the IB CM with rdma_cm conventions (service ID
//! `0x0106 << 16 | port`, default port 7174), so Linux's `rping` is a peer in
//! either role. Each ping:
//!
//! ```text
//! client                                              server
//!   fill start_buf "rdma-ping-N: ABC…" ─ SEND {addr,rkey,size} of start_buf ─►
//!                                       ◄─ RDMA READ start_buf into rdma_buf
//!                                       ◄─ SEND "go ahead"
//!   ─ SEND {addr,rkey,size} of rdma_buf ─►
//!                                       ◄─ RDMA WRITE rdma_buf (strlen + 1 bytes)
//!                                       ◄─ SEND "done"
//!   compare start_buf with rdma_buf (-V), print (-v)
//! ```
//!
//! The client disconnects after `-C` pings; the server ends when the client
//! disconnects (or, with `-P`, waits for the next client). [`conn`] holds
//! one connection's QP and buffers.

mod conn;

use crate::{cm, net};
use anyhow::{anyhow, ensure, Context, Result};
use conn::{BufferInfo, Conn};
use ndverbs_verbs::{Device, Endpoint, SendOp, SendWr, WcOpcode};
use std::net::IpAddr;
use std::time::Duration;

const RPING_MIN_BUFSIZE: u32 = 26;
const STEP: Duration = Duration::from_secs(30);

/// Command-line options (rping's).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Server.
    #[arg(short = 's', conflicts_with = "client")]
    server: bool,
    /// Client.
    #[arg(short = 'c')]
    client: bool,
    /// Server: address to bind; client: server address.
    #[arg(short = 'a')]
    addr: Option<IpAddr>,
    /// Client: source address.
    #[arg(short = 'I')]
    src: Option<IpAddr>,
    /// rdma_cm port.
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Ping buffer size (26 … 65535).
    #[arg(short = 'S', default_value_t = 64)]
    size: u32,
    /// Number of pings (0: forever).
    #[arg(short = 'C', default_value_t = 0)]
    count: u64,
    /// Print ping data.
    #[arg(short = 'v')]
    verbose: bool,
    /// Validate ping data.
    #[arg(short = 'V')]
    validate: bool,
    /// Persistent server: serve clients one after another.
    #[arg(short = 'P')]
    persistent: bool,
    /// Application-created QP (accepted for compatibility; ndverbs QPs always are).
    #[arg(short = 'q')]
    app_qp: bool,
    /// Debug prints.
    #[arg(short = 'd')]
    debug: bool,
}

/// Runs `ndv ping`; the exit status is rping's (0 when the count completed or
/// the peer disconnected cleanly).
pub fn run(a: &Args) -> Result<()> {
    ensure!(
        a.server || a.client,
        "one of -s (server) or -c (client) is required"
    );
    ensure!(
        (RPING_MIN_BUFSIZE..=65535).contains(&a.size),
        "Invalid size {} (valid range is {RPING_MIN_BUFSIZE} to 65535)",
        a.size
    );
    let _ = a.app_qp;
    if a.server {
        server(a)
    } else {
        client(a)
    }
}

macro_rules! debug {
    ($a:expr, $($t:tt)*) => { if $a.debug { eprintln!($($t)*); } };
}

fn open(addr: IpAddr) -> Result<Device> {
    crate::device::open(addr, ndverbs_verbs::Progress::Thread)
}

fn server(a: &Args) -> Result<()> {
    let addr = a
        .addr
        .context("the server needs -a ADDR: the address of its RDMA adapter")?;
    let dev = open(addr)?;
    let listener = Endpoint::new(&dev).context("rdma_create_id")?;
    listener.listen(a.port, 3).context("rdma_listen")?;
    tracing::info!(%addr, port = a.port, "ready for clients");
    debug!(a, "rdma_listen");
    loop {
        let child = Endpoint::new(&dev).context("rdma_create_id")?;
        let peer = cm::next_request(&listener, &child, None)?;
        debug!(a, "child cma {peer:?}");
        let r = serve_one(a, &dev, &child);
        if !a.persistent {
            return r;
        }
        if let Err(e) = r {
            eprintln!("{e:#}");
        }
    }
}

fn serve_one(a: &Args, dev: &Device, ep: &Endpoint) -> Result<()> {
    let c = Conn::new(dev, a.size, false)?;
    cm::accept(ep, &c.qp, 1, None)?;
    debug!(a, "accepting client connection request");
    let gone = ep.notify_disconnect().context("rdma_get_cm_event")?;
    // Each turn starts with the client's start buffer advertisement.
    while let Some(msg) = c.wait_for(WcOpcode::Recv, &gone)? {
        let start = BufferInfo::parse(&msg);
        debug!(a, "server received sink adv");
        let sge = c.rdma.sge(0, start.len.min(a.size));
        c.post(SendWr::new(3, SendOp::Read(start.remote), [sge]))?;
        if c.wait_for(WcOpcode::RdmaRead, &gone)?.is_none() {
            break;
        }
        debug!(a, "server received read complete");
        let data = c
            .rdma
            .to_vec(0, a.size as usize)
            .context("reading rdma_buf")?;
        let text = &data[..data.iter().position(|&b| b == 0).unwrap_or(data.len())];
        if a.verbose {
            println!("server ping data: {}", String::from_utf8_lossy(text));
        }
        // Tell the client to continue.
        c.send_info(None)?;
        debug!(a, "server posted go ahead");
        let Some(msg) = c.wait_for(WcOpcode::Recv, &gone)? else {
            break;
        };
        let sink = BufferInfo::parse(&msg);
        debug!(a, "server received sink adv");
        let n = (text.len() as u32 + 1).min(a.size);
        c.post(SendWr::new(
            4,
            SendOp::Write(sink.remote),
            [c.rdma.sge(0, n)],
        ))?;
        if c.wait_for(WcOpcode::RdmaWrite, &gone)?.is_none() {
            break;
        }
        debug!(a, "server rdma write complete ");
        c.send_info(None)?;
        debug!(a, "server posted go ahead");
    }
    eprintln!("server DISCONNECT EVENT...");
    // The client's DREQ arrived: answer it (DREP), which also flushes the QP.
    let _ = ep
        .disconnect(&c.qp)
        .context("rdma_disconnect")?
        .wait_timeout(STEP);
    eprintln!("wait for RDMA_READ_ADV state 10");
    Ok(())
}

/// Ping `n`'s text: `rdma-ping-N: ` and then printable ASCII from `'A' + n`
/// (wrapping after `'z'`), NUL-terminated at `size - 1`.
fn ping_data(n: u64, size: usize) -> Vec<u8> {
    let mut buf = format!("rdma-ping-{n}: ").into_bytes();
    buf.truncate(size);
    let mut ch = b'A' + (n % 58) as u8;
    while buf.len() < size {
        buf.push(ch);
        ch = if ch == b'z' { b'A' } else { ch + 1 };
    }
    buf[size - 1] = 0;
    buf
}

fn client(a: &Args) -> Result<()> {
    let server = a
        .addr
        .context("the client needs -a ADDR: the server's address")?;
    let src = match a.src {
        Some(s) => s,
        None => net::source_for(server)?,
    };
    let dev = open(src)?;
    let c = Conn::new(&dev, a.size, true)?;
    let ep = Endpoint::new(&dev).context("rdma_create_id")?;
    let to = cm::CmConnect {
        server,
        port: a.port,
        // rdma_cm's: the port's active MTU.
        mtu: dev.active_mtu(),
        rd_atomic: 1,
    };
    cm::connect(&ep, &c.qp, &to, None)?;
    debug!(a, "rdma_connect successful");
    let gone = ep.notify_disconnect().context("rdma_get_cm_event")?;
    let start_mr = c.start.as_ref().context("the client has a start buffer")?;
    let size = a.size as usize;
    let mut ping: u64 = 0;
    let mut result = Ok(());
    while a.count == 0 || ping < a.count {
        let buf = ping_data(ping, size);
        start_mr.write(0, &buf).context("writing start_buf")?;
        c.send_info(Some(start_mr))?;
        // The server READs start_buf and says "go ahead".
        if c.wait_for(WcOpcode::Recv, &gone)?.is_none() {
            break;
        }
        c.send_info(Some(&c.rdma))?;
        // The server WRITEs into rdma_buf and says "done".
        if c.wait_for(WcOpcode::Recv, &gone)?.is_none() {
            break;
        }
        let got = c.rdma.to_vec(0, size).context("reading rdma_buf")?;
        if a.validate && got != buf {
            eprintln!("data mismatch!");
            result = Err(anyhow!("data mismatch"));
            break;
        }
        if a.verbose {
            let n = got.iter().position(|&b| b == 0).unwrap_or(got.len());
            println!("ping data: {}", String::from_utf8_lossy(&got[..n]));
        }
        ping += 1;
    }
    eprintln!("client DISCONNECT EVENT...");
    let bye = ep.disconnect(&c.qp).context("rdma_disconnect")?;
    if let Some(Err(e)) = bye.wait_timeout(STEP) {
        debug!(a, "rdma_disconnect: {e}");
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_text_like_rping() {
        let p0 = ping_data(0, 64);
        assert_eq!(
            &p0[..63],
            b"rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
        );
        assert_eq!(p0[63], 0);
        // The run starts one later each ping and wraps after 'z'.
        assert!(ping_data(1, 64).starts_with(b"rdma-ping-1: BCD"));
        assert!(ping_data(57, 64).starts_with(b"rdma-ping-57: z"));
        assert!(ping_data(57, 64)[15..].starts_with(b"AB"));
        assert!(ping_data(58, 64).starts_with(b"rdma-ping-58: A"));
        assert_eq!(ping_data(3, 26).len(), 26);
    }
}
