//! The control channel of `ndv perf`, and the device it comes with.
//!
//! perftest keeps two conversations apart: the *data* QPs that are measured,
//! and a *control* channel over which both sides exchange versions, keys,
//! "hand shakes" (barriers) and results ([`super::exchange`] has the exact
//! sequence). The control channel is one of:
//!
//! * **TCP** (default): port 18515, the server listens, the client connects.
//!   Key messages are the 108-byte text form. Data QPs are connected by hand
//!   (INIT → RTR → RTS with the exchanged QPN/PSN/GID, `ctx_connect`,
//!   [`crate::qp::connect_rc`]).
//! * **rdma_cm** (`-R`): the control channel is itself an RC QP connected
//!   through the CM (service ID `0x0106 << 16 | port`), with one 56-byte
//!   receive posted at a time. Every `ctx_xchg_data` block is one SEND of the
//!   block's size (16, 4, 4, 2 bytes for the preamble, 8 for each BW report
//!   field), and a key message is the binary `struct pingpong_dest` in
//!   network byte order ([`PerftestDest::to_cm_wire`]). After the preamble
//!   the data QPs are connected through the CM on the *same* port, between
//!   two hand shakes of all-zero keys; there is no TCP connection and no
//!   `"done"`.
//!
//! Everything waits on the network with the engine being driven: in manual
//! progress mode a [`super::pump::Pump`] thread runs the engine while the
//! main thread is blocked in a TCP read or a CM request, and is paused while
//! the main thread measures (then the measuring loop drives the engine
//! itself).

use super::args::{Args, Plan};
use super::exchange as oob;
use super::keys::PerftestDest;
use super::program::Role;
use super::pump::Pump;
use crate::oob::OobError;
use crate::qp::{create_rc_qp, QpSize};
use crate::{cm, net};
use anyhow::{Context, Result};
use ndverbs_verbs::{
    Access, Cq, Device, Endpoint, Mr, Pd, Progress, Qp, RecvWr, SendOp, SendWr, WcQueue, WcStatus,
};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

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
    /// The control QP (in INIT, its first receive posted), connected by
    /// `connect` through a fresh endpoint.
    fn new(
        dev: &Device,
        timeout: Duration,
        connect: impl FnOnce(&Endpoint, &Qp) -> Result<()>,
    ) -> Result<CmChannel> {
        let pd = dev.alloc_pd().context("allocating a PD")?;
        let cq = dev.create_cq(8).context("creating a CQ")?;
        let size = QpSize {
            send: 2,
            recv: 2,
            inline: 0,
        };
        let qp = create_rc_qp(
            &pd,
            &cq,
            &cq,
            size,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )?;
        let mr = pd
            .reg_mr(2 * PerftestDest::CM_LEN, Access::LOCAL_WRITE)
            .context("registering memory")?;
        qp.post_recv(RecvWr::new(
            CTRL_RECV,
            [mr.sge(0, PerftestDest::CM_LEN as u32)],
        ))
        .context("Function ibv_post_recv failed for RDMA_CM QP")?;
        let ep = Endpoint::new(dev).context("rdma_create_id")?;
        connect(&ep, &qp)?;
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

    /// Client: connects the control QP to `server:port` (`rdma_client_connect`).
    pub fn connect(dev: &Device, to: &cm::CmConnect, timeout: Duration) -> Result<CmChannel> {
        CmChannel::new(dev, timeout, |ep, qp| {
            cm::connect(ep, qp, to, Some(timeout)).context("Unable to perform rdma_client function")
        })
    }

    /// Server: accepts the first connection request of `listener` for the
    /// control QP (`rdma_server_connect`); waits for it without a limit, as
    /// perftest waits for its client.
    pub fn accept(dev: &Device, listener: &Endpoint, timeout: Duration) -> Result<CmChannel> {
        CmChannel::new(dev, timeout, |ep, qp| {
            cm::next_request(listener, ep, None)
                .and_then(|_| cm::accept(ep, qp, 0, Some(Duration::from_secs(60))))
                .context("Unable to perform rdma_server function")
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
            let n = (wc.byte_len as usize).min(PerftestDest::CM_LEN);
            let data = self.mr.to_vec(0, n).map_err(io::Error::other)?;
            self.got.push_back(data);
            self.qp
                .post_recv(RecvWr::new(
                    CTRL_RECV,
                    [self.mr.sge(0, PerftestDest::CM_LEN as u32)],
                ))
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
        let n = buf.len().min(PerftestDest::CM_LEN);
        self.mr
            .write(PerftestDest::CM_LEN, &buf[..n])
            .map_err(io::Error::other)?;
        self.got_send = false;
        self.qp
            .post_send(SendWr::new(
                CTRL_SEND,
                SendOp::Send,
                [self.mr.sge(PerftestDest::CM_LEN, n as u32)],
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
            Ctrl::Tcp(s) => oob::hand_shake(s, role, mine),
            Ctrl::Cm(c) => {
                let m = mine.to_cm_wire(0);
                let mut theirs = [0u8; PerftestDest::CM_LEN];
                oob::xchg_data(c.as_mut(), role, &m, &mut theirs, "rdma_cm key message")?;
                PerftestDest::from_cm_wire(&theirs)
            }
        }
    }

    /// `ctx_close_connection`: a hand shake, then (TCP only) `"done"`.
    pub fn close(&mut self, role: Role, mine: &PerftestDest) -> Result<(), OobError> {
        match self {
            Ctrl::Tcp(s) => oob::close_connection(s, role, mine).map(|_| ()),
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

/// The device and the control channel the options ask for.
pub struct Opened {
    /// The RDMA device.
    pub dev: Device,
    /// The control channel.
    pub ctrl: Ctrl,
    /// `-R` server: the endpoint listening for the data QPs' connections.
    pub listener: Option<Endpoint>,
    /// The peer's address, where it is known before its keys arrive.
    pub peer_ip: Option<IpAddr>,
}

/// Opens the device on `local`.
fn open_device(local: IpAddr, progress: Progress) -> Result<Device> {
    crate::device::open(local, progress)
}

impl Opened {
    /// Connects (client) or waits for the client (server) over TCP, or with
    /// `-R` over rdma_cm, and opens the device: on `--ip`, else on the TCP
    /// connection's local address, else (`-R`) on the route to the server or
    /// the host's first IPv4 address.
    pub fn new(a: &Args, plan: &Plan, progress: Progress, timeout: Duration) -> Result<Opened> {
        if plan.cm {
            return Opened::cm(a, plan, progress, timeout);
        }
        let stream = match &a.server {
            Some(host) => net::connect_tcp(host, a.port, a.ip)?,
            None => net::accept_tcp(a.port, a.ip)?,
        };
        let _ = stream.set_read_timeout(Some(timeout));
        let local = match a.ip {
            Some(ip) => ip,
            None => stream.local_addr().context("reading the TCP address")?.ip(),
        };
        let peer = stream.peer_addr().context("reading the TCP peer")?.ip();
        Ok(Opened {
            dev: open_device(local, progress)?,
            ctrl: Ctrl::Tcp(stream),
            listener: None,
            peer_ip: Some(peer),
        })
    }

    fn cm(a: &Args, plan: &Plan, progress: Progress, timeout: Duration) -> Result<Opened> {
        match &a.server {
            Some(host) => {
                let server = (host.as_str(), a.port)
                    .to_socket_addrs()
                    .with_context(|| format!("resolving {host}"))?
                    .map(|s| s.ip())
                    .find(IpAddr::is_ipv4)
                    .with_context(|| format!("{host}: no IPv4 address"))?;
                let local = match a.ip {
                    Some(ip) => ip,
                    None => net::source_for(server)?,
                };
                let dev = open_device(local, progress)?;
                let to = cm::CmConnect {
                    server,
                    port: a.port,
                    mtu: plan.path_mtu(dev.active_mtu()).0,
                    rd_atomic: 0,
                };
                let pump = Pump::start(&dev);
                let ch = retry_cm(|| CmChannel::connect(&dev, &to, timeout))?;
                drop(pump);
                Ok(Opened {
                    dev,
                    ctrl: Ctrl::Cm(Box::new(ch)),
                    listener: None,
                    peer_ip: Some(server),
                })
            }
            None => {
                let local = a.ip.or_else(net::first_ipv4).context(
                    "no IPv4 address to listen on: give the RDMA adapter's address with --ip",
                )?;
                let dev = open_device(local, progress)?;
                let pump = Pump::start(&dev);
                let listener = Endpoint::new(&dev).context("rdma_create_id")?;
                listener
                    .listen(a.port, 2 * plan.qps + 2)
                    .context("rdma_listen")?;
                tracing::info!(addr = %local, port = a.port, "ready for clients");
                // No time limit: the server waits for its client like perftest.
                let ch = CmChannel::accept(&dev, &listener, Duration::from_secs(3600 * 24))?;
                drop(pump);
                Ok(Opened {
                    dev,
                    ctrl: Ctrl::Cm(Box::new(ch)),
                    listener: Some(listener),
                    peer_ip: None,
                })
            }
        }
    }
}

/// perftest retries a CM connection 10 times, 100 ms apart (the server may
/// not listen yet).
pub fn retry_cm<T>(mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let mut attempt = 1;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if attempt == 10 => return Err(e.context("no connection in 10 attempts")),
            Err(_) => attempt += 1,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
