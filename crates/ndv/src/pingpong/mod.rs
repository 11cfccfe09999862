//! `ndv pingpong`: wire-compatible with rdma-core's `ibv_rc_pingpong`.
//!
//! Both sides create an RC QP (send depth 1, `-r` receives posted), exchange
//! `LID:QPN:PSN:GID` over TCP port 18515 (the client sends first; the server
//! connects its QP before answering; the client then writes `"done"`), connect,
//! and bounce `-s`-byte SENDs `-n` times: a side sends when its previous send
//! completed and the peer's message arrived. The output is rc_pingpong's.
//!
//! The RDMA adapter is the local address of the TCP connection unless `--ip`
//! names one, so the defaults work wherever TCP does. RoCE needs the peer's GID;
//! a peer that sent a zero GID (no `-g`) is reached at its TCP address.
//!
//! [`exchange`] is the TCP address exchange, [`report`] the output.

mod exchange;
mod report;

use crate::net;
use crate::qp::{connect_rc, create_rc_qp, peer_gid, random_psn, QpSize, RcPath, RcPeer};
use anyhow::{bail, ensure, Context as _, Result};
use exchange::PingpongDest;
use ndverbs_verbs::{
    Access, Cq, Device, Error, Mr, NotifyOn, Progress, Qp, RecvWr, SendOp, SendWr, WcStatus,
};
use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// Command-line options (rc_pingpong's).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// TCP port of the address exchange.
    #[arg(short = 'p', long, default_value_t = exchange::DEFAULT_PORT)]
    port: u16,
    /// Size of each message.
    #[arg(short = 's', long, default_value_t = 4096)]
    size: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (default: the port's active
    /// MTU, from the interface's; ibv_rc_pingpong's default is 1024, so
    /// give `-m 1024` against it on links wider than 1500 bytes).
    #[arg(short = 'm', long)]
    mtu: Option<u32>,
    /// Receives posted at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long, default_value_t = 1000)]
    iters: u32,
    /// Service level (accepted for compatibility; RoCEv2 over UDP ignores it).
    #[arg(short = 'l', long, default_value_t = 0)]
    sl: u8,
    /// Sleep on completion events instead of polling.
    #[arg(short = 'e', long)]
    events: bool,
    /// GID index (accepted for compatibility: an ndverbs device has one GID, its address).
    #[arg(short = 'g', long = "gid-idx")]
    gid_idx: Option<i32>,
    /// Validate the received buffer.
    #[arg(short = 'c', long)]
    chk: bool,
    /// Local address of the RDMA device (default: the local address of the TCP connection).
    #[arg(long)]
    ip: Option<IpAddr>,
    /// Server to connect to (client); none: be the server.
    server: Option<String>,
}

/// Runs `ndv pingpong`.
pub fn run(args: &Args) -> Result<()> {
    let requested = crate::qp::requested_mtu(args.mtu)?;
    ensure!(
        args.size > 0 && args.rx_depth >= 2 && args.iters > 0,
        "size, iters must be positive and rx-depth at least 2"
    );
    let mut stream = match &args.server {
        Some(host) => net::connect_tcp(host, args.port, args.ip)?,
        None => net::accept_tcp(args.port, args.ip)?,
    };
    let local_ip = match args.ip {
        Some(ip) => ip,
        None => stream.local_addr().context("reading the TCP address")?.ip(),
    };
    let peer_tcp = stream.peer_addr().context("reading the TCP peer")?.ip();
    // Manual progress: this thread drives the engine while it polls, which on
    // a small machine beats handing every packet to an engine thread.
    let dev = crate::device::open(local_ip, Progress::Manual)?;
    let (mtu, lowered) = crate::qp::run_mtu(requested, dev.active_mtu());
    if let Some(m) = lowered {
        print!("{m}");
    }
    let ctx = Context::new(&dev, args)?;
    let my = PingpongDest {
        lid: 0,
        qpn: ctx.qp.qpn(),
        psn: random_psn(),
        gid: dev.gid().octets(),
    };
    println!("{}", report::address_line("local", &my));
    let path = RcPath::pingpong(mtu);
    let connect = |r: &PingpongDest| {
        let peer = RcPeer {
            qpn: r.qpn,
            psn: r.psn,
            gid: peer_gid(r.gid, Some(peer_tcp)),
        };
        connect_rc(&ctx.qp, my.psn, &peer, &path)
    };
    let remote = if args.server.is_some() {
        let r = exchange::client_exchange(&mut stream, &my).context("address exchange")?;
        connect(&r)?;
        r
    } else {
        exchange::server_exchange(&mut stream, &my, |r| connect(r).map_err(io::Error::other))
            .context("address exchange")?
    };
    drop(stream);
    println!("{}", report::address_line("remote", &remote));
    let elapsed = ctx.pingpong(args)?;
    for line in report::summary(args.size, args.iters, elapsed) {
        println!("{line}");
    }
    if args.chk {
        ctx.check_buffer()?;
    }
    Ok(())
}

/// The QP, its one CQ and the message buffer.
struct Context {
    cq: Cq,
    qp: Qp,
    mr: Mr,
    size: u32,
    rx_depth: u32,
}

impl Context {
    fn new(dev: &Device, args: &Args) -> Result<Context> {
        let pd = dev.alloc_pd().context("Couldn't allocate PD")?;
        let cq = dev
            .create_cq(args.rx_depth + 1)
            .context("Couldn't create CQ")?;
        let mr = pd
            .reg_mr(args.size as usize, Access::LOCAL_WRITE)
            .context("Couldn't register MR")?;
        // rc_pingpong's initial buffer contents (its "FIXME memset 0").
        mr.write(0, &vec![0x7b; args.size as usize])
            .context("filling the buffer")?;
        let size = QpSize {
            send: 1,
            recv: args.rx_depth,
            inline: 0,
        };
        let qp = create_rc_qp(&pd, &cq, &cq, size, Access::NONE)?;
        let ctx = Context {
            cq,
            qp,
            mr,
            size: args.size,
            rx_depth: args.rx_depth,
        };
        for _ in 0..args.rx_depth {
            ctx.post_recv().context("Couldn't post receive")?;
        }
        Ok(ctx)
    }

    fn post_recv(&self) -> Result<(), Error> {
        self.qp
            .post_recv(RecvWr::new(RECV_WRID, [self.mr.sge(0, self.size)]))
    }

    fn post_send(&self) -> Result<()> {
        self.qp
            .post_send(SendWr::new(
                SEND_WRID,
                SendOp::Send,
                [self.mr.sge(0, self.size)],
            ))
            .context("Couldn't post send")
    }

    /// The ping-pong loop; returns its duration.
    fn pingpong(&self, args: &Args) -> Result<Duration> {
        let client = args.server.is_some();
        let mut pending = RECV_WRID;
        if client {
            if args.chk {
                self.fill_for_check()?;
            }
            self.post_send()?;
            pending |= SEND_WRID;
        }
        let mut routs = self.rx_depth;
        let (mut rcnt, mut scnt) = (0u32, 0u32);
        let start = Instant::now();
        let mut last_progress = Instant::now();
        while rcnt < args.iters || scnt < args.iters {
            let wc = if args.events {
                self.cq.req_notify(NotifyOn::Any);
                self.cq
                    .wait_one(Duration::from_millis(100))
                    .context("Failed to get cq_event")?
            } else {
                self.cq.poll_one()
            };
            let Some(wc) = wc else {
                ensure!(
                    last_progress.elapsed() <= Duration::from_secs(60),
                    "no completion for 60 s (sent {scnt}, received {rcnt})"
                );
                continue;
            };
            last_progress = Instant::now();
            ensure!(
                wc.status == WcStatus::Success,
                "Failed status {:?} ({}) for wr_id {}",
                wc.status,
                wc.status as u32,
                wc.wr_id
            );
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        while routs < self.rx_depth {
                            self.post_recv()
                                .with_context(|| format!("Couldn't post receive ({routs})"))?;
                            routs += 1;
                        }
                    }
                    rcnt += 1;
                }
                other => bail!("Completion for unknown wr_id {other}"),
            }
            pending &= !wc.wr_id;
            if scnt < args.iters && pending == 0 {
                self.post_send()?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
        Ok(start.elapsed())
    }

    /// rc_pingpong `-c`: the first byte of every page is `page % sizeof(char)`,
    /// i.e. 0; the rest of the buffer keeps its initial 0x7b.
    fn fill_for_check(&self) -> Result<()> {
        for off in (0..self.size as usize).step_by(page_size()) {
            self.mr.write(off, &[0]).context("filling the buffer")?;
        }
        Ok(())
    }

    /// Checks the buffer holds exactly what an rc_pingpong (or ndv) peer sends
    /// with `-c`; prints rc_pingpong's message for each bad page.
    fn check_buffer(&self) -> Result<()> {
        let data = self
            .mr
            .to_vec(0, self.size as usize)
            .context("reading the buffer")?;
        let mut bad = 0;
        for (i, chunk) in data.chunks(page_size()).enumerate() {
            let ok = chunk[0] == 0 && chunk[1..].iter().all(|&b| b == 0x7b);
            if !ok {
                println!("invalid data in page {i}");
                bad += 1;
            }
        }
        ensure!(bad == 0, "{bad} pages with invalid data");
        Ok(())
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}
