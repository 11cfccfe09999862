//! The control channel of `ndv perf` and how its queue pairs get connected.
//!
//! perftest keeps two conversations apart: the *data* QPs that are measured,
//! and a *control* channel over which both sides exchange versions, keys,
//! "hand shakes" (barriers) and results ([`crate::perftest::exchange`] has the
//! exact sequence). The control channel is one of:
//!
//! * **TCP** (default): port 18515, the server listens, the client connects.
//!   Key messages are the 108-byte text form. Data QPs are connected by hand
//!   (INIT → RTR → RTS with the exchanged QPN/PSN/GID, `ctx_connect`).
//! * **rdma_cm** (`-R`): the control channel is itself an RC QP connected
//!   through the CM (service ID `0x0106 << 16 | port`), with one 56-byte
//!   receive posted at a time. Every `ctx_xchg_data` block is one SEND of the
//!   block's size (16, 4, 4, 2 bytes for the preamble, 8 for each BW report
//!   field), and a key message is the binary `struct pingpong_dest` in
//!   network byte order ([`cm_keys_to_wire`]). After the preamble the data
//!   QPs are connected through the CM on the *same* port, between two hand
//!   shakes of all-zero keys; there is no TCP connection and no `"done"`.
//!
//! Everything waits on the network with the engine being driven: in manual
//! progress mode a [`Pump`] thread runs the engine while the main thread is
//! blocked in a TCP read or a CM request, and is paused while the main thread
//! measures (then the measuring loop drives the engine itself).

use crate::oob::OobError;
use crate::perftest::exchange::{self as oob, KeyFormat, PerftestDest, Role};
use ndverbs_verbs::{
    AcceptArgs, Access, AttrMask, ConnectArgs, Cq, Device, Endpoint, Mr, PathMtu, Pd, Progress, Qp,
    QpAttr, QpCaps, QpInitAttr, QpState, RecvWr, SendOp, SendWr, WcQueue, WcStatus,
};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Size of `struct pingpong_dest` (perftest 4.5, x86-64): the key message
/// over rdma_cm and the size of the control QP's receive buffer.
pub const CM_KEY_SIZE: usize = 56;

/// `struct pingpong_dest` as `rdma_write_keys` sends it: `lid, out_reads,
/// qpn, psn, rkey` as big-endian 32-bit words, 4 bytes of padding, `vaddr`
/// big-endian 64-bit, the 16 GID bytes, `srqn` and `gid_index` big-endian.
pub fn cm_keys_to_wire(d: &PerftestDest, gid_index: i32) -> [u8; CM_KEY_SIZE] {
    let mut b = [0u8; CM_KEY_SIZE];
    b[0..4].copy_from_slice(&u32::from(d.lid).to_be_bytes());
    b[4..8].copy_from_slice(&u32::from(d.out_reads).to_be_bytes());
    b[8..12].copy_from_slice(&d.qpn.to_be_bytes());
    b[12..16].copy_from_slice(&d.psn.to_be_bytes());
    b[16..20].copy_from_slice(&d.rkey.to_be_bytes());
    b[24..32].copy_from_slice(&d.vaddr.to_be_bytes());
    b[32..48].copy_from_slice(&d.gid);
    b[48..52].copy_from_slice(&d.srqn.to_be_bytes());
    b[52..56].copy_from_slice(&gid_index.to_be_bytes());
    b
}

/// Parses what [`cm_keys_to_wire`] writes (`rdma_read_keys`, which ignores
/// `srqn` and `gid_index`). Values that do not fit the key fields (a QPN or
/// PSN beyond 24 bits, a LID beyond 16) are a malformed message.
pub fn cm_keys_from_wire(b: &[u8]) -> Result<PerftestDest, OobError> {
    const WHAT: &str = "rdma_cm key message";
    let bad = |reason: &str| OobError::Malformed {
        what: WHAT,
        reason: reason.to_string(),
        text: b.iter().map(|x| format!("{x:02x}")).collect(),
    };
    if b.len() < CM_KEY_SIZE {
        return Err(bad("too short"));
    }
    let w = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let (lid, out_reads, qpn, psn) = (w(0), w(4), w(8), w(12));
    if lid > 0xffff || out_reads > 0xffff || qpn > 0xff_ffff || psn > 0xff_ffff {
        return Err(bad("field out of range"));
    }
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&b[32..48]);
    let mut va = [0u8; 8];
    va.copy_from_slice(&b[24..32]);
    Ok(PerftestDest {
        lid: lid as u16,
        out_reads: out_reads as u16,
        qpn,
        psn,
        rkey: w(16),
        vaddr: u64::from_be_bytes(va),
        gid,
        srqn: w(48),
    })
}

/// Runs the engine from a helper thread while the main thread waits on
/// something else (manual progress mode only).
pub struct Pump {
    state: Arc<PumpState>,
    handle: Option<JoinHandle<()>>,
}

struct PumpState {
    paused: Mutex<bool>,
    cv: Condvar,
    parked: AtomicBool,
    stop: AtomicBool,
}

impl Pump {
    /// Starts pumping `dev` (nothing to do with an engine thread).
    pub fn start(dev: &Device) -> Pump {
        let state = Arc::new(PumpState {
            paused: Mutex::new(false),
            cv: Condvar::new(),
            parked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let handle = (dev.adapter().mode() == Progress::Manual).then(|| {
            let s = state.clone();
            let dev = dev.clone();
            std::thread::spawn(move || {
                while !s.stop.load(Ordering::Acquire) {
                    {
                        let mut p = s.paused.lock().unwrap_or_else(|e| e.into_inner());
                        while *p && !s.stop.load(Ordering::Acquire) {
                            s.parked.store(true, Ordering::Release);
                            p = s.cv.wait(p).unwrap_or_else(|e| e.into_inner());
                        }
                        s.parked.store(false, Ordering::Release);
                    }
                    if dev
                        .adapter()
                        .progress_wait(Duration::from_millis(2))
                        .is_err()
                    {
                        break;
                    }
                }
            })
        });
        Pump { state, handle }
    }

    /// Stops pumping until [`Pump::resume`]; returns once the thread is parked.
    pub fn pause(&self) {
        if self.handle.is_none() {
            return;
        }
        *self.state.paused.lock().unwrap_or_else(|e| e.into_inner()) = true;
        let t0 = Instant::now();
        while !self.state.parked.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Pumps again.
    pub fn resume(&self) {
        *self.state.paused.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.state.cv.notify_all();
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        self.resume();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The control QP of `-R` mode: one 56-byte receive posted at a time, SENDs
/// of each block, completions on one CQ.
pub struct CmChannel {
    ep: Endpoint,
    qp: Qp,
    cq: Cq,
    mr: Mr,
    got: VecDeque<Vec<u8>>,
    got_send: bool,
    timeout: Duration,
    _pd: Pd,
}

const CTRL_RECV: u64 = 5; // SYNC_SPEC_ID
const CTRL_SEND: u64 = 6;

impl CmChannel {
    fn resources(dev: &Device) -> Result<(Pd, Cq, Qp, Mr), String> {
        let e = |e: ndverbs_verbs::VerbsError| e.to_string();
        let pd = dev.alloc_pd().map_err(e)?;
        let cq = dev.create_cq(8).map_err(e)?;
        let mut init = QpInitAttr::new(&cq, &cq);
        init.caps = QpCaps {
            max_send_wr: 2,
            max_send_sge: 1,
            max_inline_data: 0,
            sq_sig_all: false,
        };
        init.max_recv_wr = 2;
        init.max_recv_sge = 1;
        let qp = pd.create_qp(&init).map_err(e)?;
        init_qp(&qp, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        let mr = pd.reg_mr(2 * CM_KEY_SIZE, Access::LOCAL_WRITE).map_err(e)?;
        qp.post_recv(RecvWr::new(CTRL_RECV, [mr.sge(0, CM_KEY_SIZE as u32)]))
            .map_err(|e| format!("Function ibv_post_recv failed for RDMA_CM QP: {e}"))?;
        Ok((pd, cq, qp, mr))
    }

    /// Client: connects the control QP to `server:port` (`rdma_client_connect`).
    pub fn connect(
        dev: &Device,
        server: IpAddr,
        port: u16,
        mtu: PathMtu,
        timeout: Duration,
    ) -> Result<CmChannel, String> {
        let (pd, cq, qp, mr) = Self::resources(dev)?;
        let ep = Endpoint::new(dev).map_err(|e| e.to_string())?;
        cm_connect(&ep, &qp, server, port, mtu, 0, timeout)
            .map_err(|e| format!("Unable to perform rdma_client function: {e}"))?;
        Ok(CmChannel {
            ep,
            qp,
            cq,
            mr,
            got: VecDeque::new(),
            got_send: false,
            timeout,
            _pd: pd,
        })
    }

    /// Server: accepts the first connection request of `listener` for the
    /// control QP (`rdma_server_connect`).
    pub fn accept(
        dev: &Device,
        listener: &Endpoint,
        timeout: Duration,
    ) -> Result<CmChannel, String> {
        let (pd, cq, qp, mr) = Self::resources(dev)?;
        let ep = Endpoint::new(dev).map_err(|e| e.to_string())?;
        cm_accept(listener, &ep, &qp, 0, None)
            .map_err(|e| format!("Unable to perform rdma_server function: {e}"))?;
        Ok(CmChannel {
            ep,
            qp,
            cq,
            mr,
            got: VecDeque::new(),
            got_send: false,
            timeout,
            _pd: pd,
        })
    }

    /// Takes one completion, waiting at most the channel's timeout.
    fn next_wc(&mut self) -> io::Result<()> {
        let wc = self
            .cq
            .wait_one(self.timeout)
            .map_err(io::Error::other)?
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::TimedOut, "no message on the rdma_cm channel")
            })?;
        if wc.status != WcStatus::Success {
            return Err(io::Error::other(format!(
                "Bad wc status -- {} -- {}",
                wc.status as u32, wc.wr_id
            )));
        }
        if wc.queue == WcQueue::Recv {
            let n = (wc.byte_len as usize).min(CM_KEY_SIZE);
            let data = self.mr.to_vec(0, n).map_err(io::Error::other)?;
            self.got.push_back(data);
            self.qp
                .post_recv(RecvWr::new(CTRL_RECV, [self.mr.sge(0, CM_KEY_SIZE as u32)]))
                .map_err(io::Error::other)?;
        } else {
            self.got_send = true;
        }
        Ok(())
    }

    /// Disconnects (DREQ, or DREP to the peer's), waiting up to `limit`.
    pub fn disconnect(&self, limit: Duration) {
        if let Ok(p) = self.ep.disconnect(&self.qp) {
            let _ = p.wait_timeout(limit);
        }
    }
}

impl Read for CmChannel {
    /// One message per call (`rdma_read_data` copies `size` bytes of the one
    /// message that arrived): the first `buf.len()` bytes of it.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.got.is_empty() {
            self.next_wc()?;
        }
        let msg = self.got.pop_front().unwrap_or_default();
        let n = buf.len().min(msg.len());
        buf[..n].copy_from_slice(&msg[..n]);
        // A short message still fills the caller's block (perftest copies
        // whatever the buffer holds): pad with zeros instead of mixing messages.
        buf[n..].iter_mut().for_each(|b| *b = 0);
        Ok(buf.len())
    }
}

impl Write for CmChannel {
    /// One SEND per call, waited for (`rdma_write_data`).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(CM_KEY_SIZE);
        self.mr
            .write(CM_KEY_SIZE, &buf[..n])
            .map_err(io::Error::other)?;
        self.got_send = false;
        self.qp
            .post_send(SendWr::new(
                CTRL_SEND,
                SendOp::Send,
                [self.mr.sge(CM_KEY_SIZE, n as u32)],
            ))
            .map_err(io::Error::other)?;
        while !self.got_send {
            self.next_wc()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The control channel: TCP or the `-R` control QP.
pub enum Ctrl {
    /// The TCP connection (key messages in text).
    Tcp(TcpStream),
    /// The rdma_cm control QP (key messages in binary).
    Cm(Box<CmChannel>),
}

impl Ctrl {
    /// `ctx_hand_shake`: exchange keys (the client writes first).
    pub fn hand_shake(
        &mut self,
        role: Role,
        mine: &PerftestDest,
    ) -> Result<PerftestDest, OobError> {
        match self {
            Ctrl::Tcp(s) => oob::hand_shake(s, role, mine, KeyFormat::WithGid),
            Ctrl::Cm(c) => {
                let m = cm_keys_to_wire(mine, 0);
                let mut theirs = [0u8; CM_KEY_SIZE];
                oob::xchg_data(c.as_mut(), role, &m, &mut theirs, "rdma_cm key message")?;
                cm_keys_from_wire(&theirs)
            }
        }
    }

    /// `ctx_close_connection`: a hand shake, then (TCP only) `"done"`.
    pub fn close(&mut self, role: Role, mine: &PerftestDest) -> Result<(), OobError> {
        match self {
            Ctrl::Tcp(s) => oob::close_connection(s, role, mine, KeyFormat::WithGid).map(|_| ()),
            Ctrl::Cm(_) => self.hand_shake(role, mine).map(|_| ()),
        }
    }
}

impl Read for Ctrl {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Ctrl::Tcp(s) => s.read(buf),
            Ctrl::Cm(c) => c.read(buf),
        }
    }
}

impl Write for Ctrl {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Ctrl::Tcp(s) => s.write(buf),
            Ctrl::Cm(c) => c.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Ctrl::Tcp(s) => s.flush(),
            Ctrl::Cm(c) => c.flush(),
        }
    }
}

/// Connects to `host:port` over TCP, from `bind` if given (perftest's
/// `ethernet_client_connect`).
pub fn connect_tcp(host: &str, port: u16, bind: Option<IpAddr>) -> Result<TcpStream, String> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}:{port}: {e}"))?
        .collect();
    let mut last = format!("Couldn't connect to {host}:{port}");
    for a in addrs {
        let domain = if a.is_ipv4() {
            socket2::Domain::IPV4
        } else {
            socket2::Domain::IPV6
        };
        let sock =
            socket2::Socket::new(domain, socket2::Type::STREAM, None).map_err(|e| e.to_string())?;
        if let Some(ip) = bind {
            if ip.is_ipv4() == a.is_ipv4() {
                sock.bind(&SocketAddr::new(ip, 0).into())
                    .map_err(|e| format!("bind {ip}: {e}"))?;
            }
        }
        match sock.connect_timeout(&a.into(), Duration::from_secs(10)) {
            Ok(()) => {
                let s: TcpStream = sock.into();
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = format!("Couldn't connect to {host}:{port}: {e}"),
        }
    }
    Err(last)
}

/// Accepts one TCP connection on `port` (all addresses unless `bind`).
pub fn accept_tcp(port: u16, bind: Option<IpAddr>) -> Result<TcpStream, String> {
    let addr = SocketAddr::new(bind.unwrap_or(IpAddr::from([0u8; 4])), port);
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let sock =
        socket2::Socket::new(domain, socket2::Type::STREAM, None).map_err(|e| e.to_string())?;
    sock.set_reuse_address(true).map_err(|e| e.to_string())?;
    sock.bind(&addr.into())
        .map_err(|e| format!("Couldn't listen to port {port}: {e}"))?;
    sock.listen(1).map_err(|e| e.to_string())?;
    let l: TcpListener = sock.into();
    let (s, _) = l.accept().map_err(|e| format!("accept() failed: {e}"))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// The local address that routes to `dst` (what the kernel would pick).
pub fn source_for(dst: IpAddr) -> Result<IpAddr, String> {
    let any: SocketAddr = if dst.is_ipv4() {
        SocketAddr::from(([0u8; 4], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let s = UdpSocket::bind(any).map_err(|e| e.to_string())?;
    s.connect(SocketAddr::new(dst, 9))
        .map_err(|e| format!("no route to {dst}: {e}"))?;
    Ok(s.local_addr().map_err(|e| e.to_string())?.ip())
}

/// The first non-loopback IPv4 address of an interface that is up (an
/// rdma_cm server without `--ip` listens there).
pub fn first_ipv4() -> Option<IpAddr> {
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `ifap` with a list we free below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return None;
    }
    let mut found = None;
    let mut p = ifap;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr.
        if i32::from(unsafe { (*ifa.ifa_addr).sa_family }) != libc::AF_INET {
            continue;
        }
        // SAFETY: AF_INET addresses are sockaddr_in.
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        if !ip.is_loopback() {
            found = Some(IpAddr::V4(ip));
            break;
        }
    }
    // SAFETY: the list came from getifaddrs.
    unsafe { libc::freeifaddrs(ifap) };
    found
}

/// A random 24-bit PSN (`lrand48() & 0xffffff`).
pub fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    let _ = getrandom::fill(&mut b);
    u32::from_le_bytes(b) & 0x00ff_ffff
}

/// RESET → INIT with `access` remote rights.
pub fn init_qp(qp: &Qp, access: Access) -> Result<(), String> {
    let a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: access,
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
    )
    .map_err(|e| format!("Failed to modify QP to INIT: {e}"))
}

/// Parameters of `ctx_connect` for one QP.
pub struct QpPath {
    /// Path MTU (the preamble's agreed value).
    pub mtu: PathMtu,
    /// Local ACK timeout exponent (`-u`).
    pub timeout: u8,
    /// Where the peer is when its key message has no GID.
    pub peer_ip: Option<IpAddr>,
}

/// `ctx_connect`: INIT → RTR → RTS with the peer's keys (max_dest_rd_atomic
/// = our outstanding reads, max_rd_atomic = the peer's, RNR timer 12,
/// retry and RNR retry 7).
pub fn connect_qp(
    qp: &Qp,
    my: &PerftestDest,
    rem: &PerftestDest,
    path: &QpPath,
) -> Result<(), String> {
    let gid = Ipv6Addr::from(rem.gid);
    let dgid = match (gid.is_unspecified(), path.peer_ip) {
        (true, Some(ip)) => ndverbs_wire::cma::gid_of(ip),
        _ => gid,
    };
    let rd = |v: u16| v.clamp(1, u16::from(ndverbs_verbs::LIMITS.max_qp_rd_atom)) as u8;
    let mut a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: path.mtu,
        dest_qp_num: rem.qpn,
        rq_psn: rem.psn,
        max_dest_rd_atomic: rd(my.out_reads),
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    a.av.dgid = dgid.octets();
    a.av.hop_limit = 0xff;
    qp.modify(
        &a,
        AttrMask::STATE
            | AttrMask::AV
            | AttrMask::PATH_MTU
            | AttrMask::DEST_QPN
            | AttrMask::RQ_PSN
            | AttrMask::MAX_DEST_RD_ATOMIC
            | AttrMask::MIN_RNR_TIMER,
    )
    .map_err(|e| format!("Failed to modify QP {:#x} to RTR: {e}", qp.qpn()))?;
    a.qp_state = QpState::Rts;
    a.timeout = path.timeout;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = my.psn;
    a.max_rd_atomic = rd(rem.out_reads);
    qp.modify(
        &a,
        AttrMask::STATE
            | AttrMask::TIMEOUT
            | AttrMask::RETRY_CNT
            | AttrMask::RNR_RETRY
            | AttrMask::SQ_PSN
            | AttrMask::MAX_QP_RD_ATOMIC,
    )
    .map_err(|e| format!("Failed to modify QP {:#x} to RTS: {e}", qp.qpn()))
}

/// Connects `qp` (in INIT) through the CM to `server:port` (`rdma_connect`
/// with `out_reads` responder resources and initiator depth, retry and RNR
/// retry 7), then RTU.
pub fn cm_connect(
    ep: &Endpoint,
    qp: &Qp,
    server: IpAddr,
    port: u16,
    mtu: PathMtu,
    out_reads: u8,
    timeout: Duration,
) -> Result<(), String> {
    let mut port_bytes = [0u8; 2];
    let _ = getrandom::fill(&mut port_bytes);
    let args = ConnectArgs {
        remote: server,
        remote_port: port,
        local_port: 32768 | (u16::from_le_bytes(port_bytes) & 0x7fff),
        responder_resources: out_reads,
        initiator_depth: out_reads,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: mtu,
        private_data: vec![],
    };
    let p = ep.connect(qp, args).map_err(|e| e.to_string())?;
    p.wait_timeout(timeout)
        .ok_or("rdma_connect: no answer")?
        .map_err(|e| format!("rdma_connect: {e}"))?;
    ep.complete_connect(qp)
        .map_err(|e| e.to_string())?
        .wait_timeout(timeout)
        .ok_or("rdma_connect: RTU not sent")?
        .map_err(|e| format!("rdma_connect: {e}"))
}

/// Waits for the next connection request on `listener`, binds it to `ep`
/// and accepts it with `qp` (`rdma_accept`); returns the peer's address.
pub fn cm_accept(
    listener: &Endpoint,
    ep: &Endpoint,
    qp: &Qp,
    out_reads: u8,
    timeout: Option<Duration>,
) -> Result<IpAddr, String> {
    let req = listener.get_request(ep).map_err(|e| e.to_string())?;
    let info = match timeout {
        Some(t) => req.wait_timeout(t).ok_or("no rdma_cm connection request")?,
        None => req.wait(),
    }
    .map_err(|e| format!("rdma_cm connection request: {e}"))?;
    let args = AcceptArgs {
        responder_resources: out_reads,
        initiator_depth: out_reads,
        rnr_retry_count: 7,
        private_data: vec![],
    };
    ep.accept(qp, args)
        .map_err(|e| e.to_string())?
        .wait_timeout(timeout.unwrap_or(Duration::from_secs(60)))
        .ok_or("rdma_accept: no RTU")?
        .map_err(|e| format!("rdma_accept: {e}"))?;
    Ok(info.peer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oob::testutil::unhex;

    #[test]
    fn cm_keys_match_capture() {
        // shared/reference/rxe-linux-6.1/ib_send_bw_R.pcap frame 31: the
        // client's keys over the rdma_cm control QP.
        let wire = unhex(
            "0000000000000001000000170046cde200000000000000000000559646d26000\
             00000000000000000000ffff0a4d00020000000000000001",
        );
        let d = cm_keys_from_wire(&wire).unwrap();
        assert_eq!((d.lid, d.out_reads, d.qpn, d.psn), (0, 1, 0x17, 0x46cde2));
        assert_eq!((d.rkey, d.vaddr), (0, 0x5596_46d2_6000));
        assert_eq!(&d.gid[10..], &[0xff, 0xff, 10, 77, 0, 2]);
        assert_eq!(cm_keys_to_wire(&d, 1).as_slice(), wire.as_slice());
        // The all-zero keys of the two hand shakes around the CM connection.
        assert_eq!(
            cm_keys_from_wire(&[0; CM_KEY_SIZE]).unwrap(),
            PerftestDest::default()
        );
    }

    #[test]
    fn cm_keys_malformed() {
        assert!(cm_keys_from_wire(&[0; 20]).is_err());
        let mut w = [0u8; CM_KEY_SIZE];
        w[8] = 1; // QPN beyond 24 bits
        assert!(cm_keys_from_wire(&w).is_err());
    }
}
