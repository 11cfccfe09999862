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
//! disconnects (or, with `-P`, waits for the next client).

use ndverbs_verbs::{
    AcceptArgs, Access, AttrMask, ConnectArgs, Cq, Device, Endpoint, EpPending, Mr, PathMtu, Pd,
    Qp, QpAttr, QpCaps, QpInitAttr, QpState, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode,
    WcStatus,
};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

const RPING_SQ_DEPTH: u32 = 16;
const RPING_MIN_BUFSIZE: u32 = 26;
const INFO_LEN: usize = 16;
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
pub fn run(a: &Args) -> Result<(), String> {
    if !a.server && !a.client {
        return Err("one of -s (server) or -c (client) is required".into());
    }
    if !(RPING_MIN_BUFSIZE..=65535).contains(&a.size) {
        return Err(format!(
            "Invalid size {} (valid range is {RPING_MIN_BUFSIZE} to 65535)",
            a.size
        ));
    }
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

/// What both roles set up per connection.
struct Conn {
    cq: Cq,
    qp: Qp,
    recv: Mr,
    send: Mr,
    rdma: Mr,
    start: Option<Mr>,
    size: u32,
    _pd: Pd,
}

impl Conn {
    fn new(dev: &Device, size: u32, client: bool) -> Result<Conn, String> {
        let e = |e: ndverbs_verbs::VerbsError| e.to_string();
        let pd = dev.alloc_pd().map_err(e)?;
        let cq = dev.create_cq(RPING_SQ_DEPTH * 2).map_err(e)?;
        let mut init = QpInitAttr::new(&cq, &cq);
        init.caps = QpCaps {
            max_send_wr: RPING_SQ_DEPTH,
            max_send_sge: 1,
            max_inline_data: 0,
            sq_sig_all: false,
        };
        init.max_recv_wr = 2;
        init.max_recv_sge = 1;
        let qp = pd.create_qp(&init).map_err(e)?;
        let rw = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: rw,
            ..QpAttr::default()
        };
        qp.modify(
            &a,
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
        )
        .map_err(e)?;
        let recv = pd.reg_mr(INFO_LEN, Access::LOCAL_WRITE).map_err(e)?;
        let send = pd.reg_mr(INFO_LEN, Access::NONE).map_err(e)?;
        let rdma = pd.reg_mr(size as usize, rw).map_err(e)?;
        let start = if client {
            Some(pd.reg_mr(size as usize, rw).map_err(e)?)
        } else {
            None
        };
        let c = Conn {
            cq,
            qp,
            recv,
            send,
            rdma,
            start,
            size,
            _pd: pd,
        };
        c.post_recv()?;
        Ok(c)
    }

    fn post_recv(&self) -> Result<(), String> {
        self.qp
            .post_recv(RecvWr::new(1, [self.recv.sge(0, INFO_LEN as u32)]))
            .map_err(|e| e.to_string())
    }

    /// SENDs `{addr, rkey, size}` of `mr` (rping_format_send).
    fn send_info(&self, mr: Option<&Mr>) -> Result<(), String> {
        if let Some(mr) = mr {
            let mut info = [0u8; INFO_LEN];
            info[..8].copy_from_slice(&mr.addr().to_be_bytes());
            info[8..12].copy_from_slice(&mr.rkey().to_be_bytes());
            info[12..].copy_from_slice(&self.size.to_be_bytes());
            self.send.write(0, &info).map_err(|e| e.to_string())?;
        }
        self.qp
            .post_send(SendWr::new(
                2,
                SendOp::Send,
                [self.send.sge(0, INFO_LEN as u32)],
            ))
            .map_err(|e| format!("post send error {e}"))
    }

    /// Waits for the next completion of `want`, re-posting receives; `None`
    /// when the peer disconnected.
    fn wait_for(
        &self,
        want: WcOpcode,
        gone: &EpPending<()>,
    ) -> Result<Option<(u32, Vec<u8>)>, String> {
        loop {
            if gone.is_done() {
                return Ok(None);
            }
            let Some(wc) = self
                .cq
                .wait_one(Duration::from_millis(50))
                .map_err(|e| e.to_string())?
            else {
                continue;
            };
            if wc.status != WcStatus::Success {
                if wc.status == WcStatus::WrFlushErr {
                    return Ok(None);
                }
                return Err(format!("cq completion failed status {}", wc.status as u32));
            }
            let data = if wc.opcode == WcOpcode::Recv {
                if wc.byte_len as usize != INFO_LEN {
                    return Err(format!("Received bogus data, size {}", wc.byte_len));
                }
                let v = self.recv.to_vec(0, INFO_LEN).map_err(|e| e.to_string())?;
                self.post_recv()?;
                v
            } else {
                Vec::new()
            };
            if wc.opcode == want {
                return Ok(Some((wc.byte_len, data)));
            }
        }
    }
}

fn parse_info(v: &[u8]) -> (u64, u32, u32) {
    (
        u64::from_be_bytes(v[..8].try_into().expect("16 bytes")),
        u32::from_be_bytes(v[8..12].try_into().expect("16 bytes")),
        u32::from_be_bytes(v[12..16].try_into().expect("16 bytes")),
    )
}

fn server(a: &Args) -> Result<(), String> {
    let addr = a
        .addr
        .ok_or("the server needs -a ADDR: the address of its RDMA adapter")?;
    let dev =
        Device::open(addr).map_err(|e| format!("cannot open the RDMA device on {addr}: {e}"))?;
    let listener = Endpoint::new(&dev).map_err(|e| e.to_string())?;
    listener
        .listen(a.port, 3)
        .map_err(|e| format!("rdma_listen: {e}"))?;
    debug!(a, "rdma_listen");
    loop {
        let child = Endpoint::new(&dev).map_err(|e| e.to_string())?;
        let req = listener
            .get_request(&child)
            .map_err(|e| e.to_string())?
            .wait()
            .map_err(|e| e.to_string())?;
        debug!(a, "child cma {:?}", req.peer);
        let r = serve_one(a, &dev, &child);
        if !a.persistent {
            return r;
        }
        if let Err(e) = r {
            eprintln!("{e}");
        }
    }
}

fn serve_one(a: &Args, dev: &Device, ep: &Endpoint) -> Result<(), String> {
    let c = Conn::new(dev, a.size, false)?;
    let args = AcceptArgs {
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        private_data: vec![],
    };
    ep.accept(&c.qp, args)
        .map_err(|e| e.to_string())?
        .wait()
        .map_err(|e| format!("rdma_accept: {e}"))?;
    debug!(a, "accepting client connection request");
    let gone = ep.notify_disconnect().map_err(|e| e.to_string())?;
    // Each turn starts with the client's start buffer advertisement.
    while let Some((_, info)) = c.wait_for(WcOpcode::Recv, &gone)? {
        let (addr, rkey, len) = parse_info(&info);
        debug!(a, "server received sink adv");
        let remote = RemoteAddr { va: addr, rkey };
        c.qp.post_send(SendWr::new(
            3,
            SendOp::Read(remote),
            [c.rdma.sge(0, len.min(c.size))],
        ))
        .map_err(|e| format!("post send error {e}"))?;
        if c.wait_for(WcOpcode::RdmaRead, &gone)?.is_none() {
            break;
        }
        debug!(a, "server received read complete");
        let data = c
            .rdma
            .to_vec(0, c.size as usize)
            .map_err(|e| e.to_string())?;
        let text_len = data.iter().position(|&b| b == 0).unwrap_or(data.len());
        if a.verbose {
            println!(
                "server ping data: {}",
                String::from_utf8_lossy(&data[..text_len])
            );
        }
        // Tell the client to continue.
        c.send_info(None)?;
        debug!(a, "server posted go ahead");
        let Some((_, info)) = c.wait_for(WcOpcode::Recv, &gone)? else {
            break;
        };
        let (addr, rkey, _) = parse_info(&info);
        debug!(a, "server received sink adv");
        let remote = RemoteAddr { va: addr, rkey };
        let n = (text_len as u32 + 1).min(c.size);
        c.qp.post_send(SendWr::new(4, SendOp::Write(remote), [c.rdma.sge(0, n)]))
            .map_err(|e| format!("post send error {e}"))?;
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
        .map_err(|e| e.to_string())?
        .wait_timeout(STEP);
    eprintln!("wait for RDMA_READ_ADV state 10");
    Ok(())
}

/// The local address that routes to `dst` (what the kernel would pick).
fn source_for(dst: IpAddr) -> Result<IpAddr, String> {
    let any: SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse().expect("addr")
    } else {
        "[::]:0".parse().expect("addr")
    };
    let s = UdpSocket::bind(any).map_err(|e| e.to_string())?;
    s.connect(SocketAddr::new(dst, 9))
        .map_err(|e| format!("no route to {dst}: {e}"))?;
    Ok(s.local_addr().map_err(|e| e.to_string())?.ip())
}

fn client(a: &Args) -> Result<(), String> {
    let server = a
        .addr
        .ok_or("the client needs -a ADDR: the server's address")?;
    let src = match a.src {
        Some(s) => s,
        None => source_for(server)?,
    };
    let dev =
        Device::open(src).map_err(|e| format!("cannot open the RDMA device on {src}: {e}"))?;
    let c = Conn::new(&dev, a.size, true)?;
    let ep = Endpoint::new(&dev).map_err(|e| e.to_string())?;
    let mut port_bytes = [0u8; 2];
    let _ = getrandom::fill(&mut port_bytes);
    let args = ConnectArgs {
        remote: server,
        remote_port: a.port,
        local_port: 32768 | u16::from_le_bytes(port_bytes) & 0x7fff,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: PathMtu::Mtu1024,
        private_data: vec![],
    };
    ep.connect(&c.qp, args)
        .map_err(|e| e.to_string())?
        .wait()
        .map_err(|e| format!("rdma_connect: {e}"))?;
    ep.complete_connect(&c.qp)
        .map_err(|e| e.to_string())?
        .wait()
        .map_err(|e| format!("rdma_connect: {e}"))?;
    debug!(a, "rdma_connect successful");
    let gone = ep.notify_disconnect().map_err(|e| e.to_string())?;
    let start_mr = c.start.as_ref().expect("client has a start buffer");
    let size = a.size as usize;
    let mut start: u8 = 65;
    let mut ping: u64 = 0;
    let mut result = Ok(());
    while a.count == 0 || ping < a.count {
        let mut buf = format!("rdma-ping-{ping}: ").into_bytes();
        buf.truncate(size);
        let mut ch = start;
        while buf.len() < size {
            buf.push(ch);
            ch += 1;
            if ch > 122 {
                ch = 65;
            }
        }
        start += 1;
        if start > 122 {
            start = 65;
        }
        buf[size - 1] = 0;
        start_mr.write(0, &buf).map_err(|e| e.to_string())?;
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
        let got = c.rdma.to_vec(0, size).map_err(|e| e.to_string())?;
        if a.validate && got != buf {
            eprintln!("data mismatch!");
            result = Err("data mismatch".to_string());
            break;
        }
        if a.verbose {
            let n = got.iter().position(|&b| b == 0).unwrap_or(got.len());
            println!("ping data: {}", String::from_utf8_lossy(&got[..n]));
        }
        ping += 1;
    }
    eprintln!("client DISCONNECT EVENT...");
    match ep
        .disconnect(&c.qp)
        .map_err(|e| e.to_string())?
        .wait_timeout(STEP)
    {
        Some(Ok(())) | None => {}
        Some(Err(e)) => debug!(a, "rdma_disconnect: {e}"),
    }
    result
}
