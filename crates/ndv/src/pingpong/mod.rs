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

mod exchange;
mod report;

use exchange::{self as oob, PingpongDest};
use ndverbs_verbs::{
    Access, AttrMask, Device, NotifyOn, PathMtu, Progress, Qp, QpAttr, QpCaps, QpInitAttr, QpState,
    RecvWr, SendOp, SendWr, WcStatus,
};
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// Command-line options (rc_pingpong's).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// TCP port of the address exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Size of each message.
    #[arg(short = 's', long, default_value_t = 4096)]
    size: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 1024)]
    mtu: u32,
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
pub fn run(args: &Args) -> Result<(), String> {
    let mtu = PathMtu::at_most(args.mtu as usize)
        .filter(|m| m.bytes() == args.mtu)
        .ok_or_else(|| format!("invalid MTU {} (256, 512, 1024, 2048 or 4096)", args.mtu))?;
    if args.size == 0 || args.rx_depth < 2 || args.iters == 0 {
        return Err("size, iters must be positive and rx-depth at least 2".into());
    }
    let mut stream = match &args.server {
        Some(host) => connect_tcp(host, args.port, args.ip)?,
        None => accept_tcp(args.port, args.ip)?,
    };
    let local_ip = match args.ip {
        Some(ip) => ip,
        None => stream.local_addr().map_err(|e| e.to_string())?.ip(),
    };
    let peer_tcp = stream.peer_addr().map_err(|e| e.to_string())?.ip();
    // Manual progress: this thread drives the engine while it polls, which on
    // a small machine beats handing every packet to an engine thread.
    let dev = Device::open_with(local_ip, Progress::Manual)
        .map_err(|e| format!("cannot open the RDMA device on {local_ip}: {e}"))?;
    let ctx = Context::new(&dev, args)?;
    let my = PingpongDest {
        lid: 0,
        qpn: ctx.qp.qpn(),
        psn: random_psn(),
        gid: dev.gid().octets(),
    };
    println!("{}", report::address_line("local", &my));
    let remote = if args.server.is_some() {
        let r =
            oob::client_exchange(&mut stream, &my).map_err(|e| format!("address exchange: {e}"))?;
        ctx.connect(&my, &r, mtu, peer_tcp)?;
        r
    } else {
        oob::server_exchange(&mut stream, &my, |r| {
            ctx.connect(&my, r, mtu, peer_tcp).map_err(io::Error::other)
        })
        .map_err(|e| format!("address exchange: {e}"))?
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

fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).unwrap_or(());
    u32::from_le_bytes(b) & 0x00ff_ffff
}

fn connect_tcp(host: &str, port: u16, bind: Option<IpAddr>) -> Result<TcpStream, String> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}:{port}: {e}"))?
        .collect();
    let mut last = format!("Couldn't connect to {host}:{port}");
    for a in addrs {
        let sock = match a {
            SocketAddr::V4(_) => {
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            }
            SocketAddr::V6(_) => {
                socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None)
            }
        }
        .map_err(|e| e.to_string())?;
        if let Some(ip) = bind {
            if ip.is_ipv4() == a.is_ipv4() {
                sock.bind(&SocketAddr::new(ip, 0).into())
                    .map_err(|e| format!("bind {ip}: {e}"))?;
            }
        }
        match sock.connect_timeout(&a.into(), Duration::from_secs(10)) {
            Ok(()) => return Ok(sock.into()),
            Err(e) => last = format!("Couldn't connect to {host}:{port}: {e}"),
        }
    }
    Err(last)
}

fn accept_tcp(port: u16, bind: Option<IpAddr>) -> Result<TcpStream, String> {
    let addr = SocketAddr::new(bind.unwrap_or(IpAddr::from([0u8; 4])), port);
    let sock = socket2::Socket::new(
        if addr.is_ipv4() {
            socket2::Domain::IPV4
        } else {
            socket2::Domain::IPV6
        },
        socket2::Type::STREAM,
        None,
    )
    .map_err(|e| e.to_string())?;
    sock.set_reuse_address(true).map_err(|e| e.to_string())?;
    sock.bind(&addr.into())
        .map_err(|e| format!("Couldn't listen to port {port}: {e}"))?;
    sock.listen(1).map_err(|e| e.to_string())?;
    let l: TcpListener = sock.into();
    let (s, _) = l.accept().map_err(|e| format!("accept() failed: {e}"))?;
    Ok(s)
}

struct Context {
    dev: Device,
    cq: ndverbs_verbs::Cq,
    qp: Qp,
    mr: ndverbs_verbs::Mr,
    size: u32,
    rx_depth: u32,
}

impl Context {
    fn new(dev: &Device, args: &Args) -> Result<Context, String> {
        let err = |e: ndverbs_verbs::VerbsError| e.to_string();
        let pd = dev.alloc_pd().map_err(err)?;
        let cq = dev.create_cq(args.rx_depth + 1).map_err(err)?;
        let mr = pd
            .reg_mr(args.size as usize, Access::LOCAL_WRITE)
            .map_err(err)?;
        // rc_pingpong's initial buffer contents (its "FIXME memset 0").
        mr.write(0, &vec![0x7b; args.size as usize]).map_err(err)?;
        let mut init = QpInitAttr::new(&cq, &cq);
        init.caps = QpCaps {
            max_send_wr: 1,
            max_send_sge: 1,
            max_inline_data: 0,
            sq_sig_all: false,
        };
        init.max_recv_wr = args.rx_depth;
        init.max_recv_sge = 1;
        let qp = pd.create_qp(&init).map_err(err)?;
        let a = QpAttr {
            qp_state: QpState::Init,
            ..QpAttr::default()
        };
        qp.modify(
            &a,
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
        )
        .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
        let ctx = Context {
            dev: dev.clone(),
            cq,
            qp,
            mr,
            size: args.size,
            rx_depth: args.rx_depth,
        };
        for _ in 0..args.rx_depth {
            ctx.post_recv()
                .map_err(|e| format!("Couldn't post receive: {e}"))?;
        }
        Ok(ctx)
    }

    fn post_recv(&self) -> Result<(), ndverbs_verbs::VerbsError> {
        self.qp
            .post_recv(RecvWr::new(RECV_WRID, [self.mr.sge(0, self.size)]))
    }

    fn connect(
        &self,
        my: &PingpongDest,
        rem: &PingpongDest,
        mtu: PathMtu,
        peer_tcp: IpAddr,
    ) -> Result<(), String> {
        let gid = Ipv6Addr::from(rem.gid);
        // A zero GID (peer without -g) cannot route on RoCE: use the peer's TCP address.
        let dgid = if gid.is_unspecified() {
            ndverbs_wire::cma::gid_of(peer_tcp)
        } else {
            gid
        };
        let mut a = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: mtu,
            dest_qp_num: rem.qpn,
            rq_psn: rem.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..QpAttr::default()
        };
        a.av.dgid = dgid.octets();
        a.av.hop_limit = 1;
        self.qp
            .modify(
                &a,
                AttrMask::STATE
                    | AttrMask::AV
                    | AttrMask::PATH_MTU
                    | AttrMask::DEST_QPN
                    | AttrMask::RQ_PSN
                    | AttrMask::MAX_DEST_RD_ATOMIC
                    | AttrMask::MIN_RNR_TIMER,
            )
            .map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
        a.qp_state = QpState::Rts;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = my.psn;
        a.max_rd_atomic = 1;
        self.qp
            .modify(
                &a,
                AttrMask::STATE
                    | AttrMask::TIMEOUT
                    | AttrMask::RETRY_CNT
                    | AttrMask::RNR_RETRY
                    | AttrMask::SQ_PSN
                    | AttrMask::MAX_QP_RD_ATOMIC,
            )
            .map_err(|e| format!("Failed to modify QP to RTS: {e}"))
    }

    fn post_send(&self) -> Result<(), String> {
        self.qp
            .post_send(SendWr::new(
                SEND_WRID,
                SendOp::Send,
                [self.mr.sge(0, self.size)],
            ))
            .map_err(|e| format!("Couldn't post send: {e}"))
    }

    /// The ping-pong loop; returns its duration.
    fn pingpong(&self, args: &Args) -> Result<Duration, String> {
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
                match self.cq.wait_one(Duration::from_millis(100)) {
                    Ok(w) => w,
                    Err(e) => return Err(format!("Failed to get cq_event: {e}")),
                }
            } else {
                self.cq.poll_one()
            };
            let Some(wc) = wc else {
                if last_progress.elapsed() > Duration::from_secs(60) {
                    return Err(format!(
                        "no completion for 60 s (sent {scnt}, received {rcnt})"
                    ));
                }
                continue;
            };
            last_progress = Instant::now();
            if wc.status != WcStatus::Success {
                return Err(format!(
                    "Failed status {:?} ({}) for wr_id {}",
                    wc.status, wc.status as u32, wc.wr_id
                ));
            }
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        while routs < self.rx_depth {
                            self.post_recv()
                                .map_err(|e| format!("Couldn't post receive ({routs}): {e}"))?;
                            routs += 1;
                        }
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {other}")),
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
    fn fill_for_check(&self) -> Result<(), String> {
        for off in (0..self.size as usize).step_by(page_size()) {
            self.mr.write(off, &[0]).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Checks the buffer holds exactly what an rc_pingpong (or ndv) peer sends
    /// with `-c`; prints rc_pingpong's message for each bad page.
    fn check_buffer(&self) -> Result<(), String> {
        let data = self
            .mr
            .to_vec(0, self.size as usize)
            .map_err(|e| e.to_string())?;
        let page = page_size();
        let mut bad = 0;
        for (i, chunk) in data.chunks(page).enumerate() {
            let ok = chunk[0] == 0 && chunk[1..].iter().all(|&b| b == 0x7b);
            if !ok {
                println!("invalid data in page {i}");
                bad += 1;
            }
        }
        if bad > 0 {
            return Err(format!("{bad} pages with invalid data"));
        }
        let _ = &self.dev;
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
