//! One rping connection's objects: the QP, its CQ and the four buffers of
//! `rping.c` (`recv_buf` and `send_buf` for the 16-byte buffer
//! advertisements, `rdma_buf` the server READs into and the client receives
//! the WRITE in, and the client's `start_buf`).

use crate::qp::{create_rc_qp, QpSize};
use anyhow::{bail, ensure, Context, Result};
use ndverbs_verbs::{
    Access, Cq, Device, Mr, Pd, Pending, Qp, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus,
};
use std::time::Duration;

/// `RPING_SQ_DEPTH`.
const SQ_DEPTH: u32 = 16;
/// `struct rping_rdma_info`: address, rkey and size, big-endian.
pub const INFO_LEN: usize = 16;

/// What both roles set up per connection.
pub struct Conn {
    pub qp: Qp,
    cq: Cq,
    recv: Mr,
    send: Mr,
    /// `rdma_buf`.
    pub rdma: Mr,
    /// `start_buf` (client only).
    pub start: Option<Mr>,
    size: u32,
    _pd: Pd,
}

/// A buffer advertisement: where the peer may READ or WRITE.
pub struct BufferInfo {
    pub remote: RemoteAddr,
    pub len: u32,
}

impl BufferInfo {
    /// Reads an advertisement as [`Conn::send_info`] writes it.
    pub fn parse(v: &[u8; INFO_LEN]) -> BufferInfo {
        let [a, b, c, d, e, f, g, h, k0, k1, k2, k3, l0, l1, l2, l3] = *v;
        BufferInfo {
            remote: RemoteAddr {
                va: u64::from_be_bytes([a, b, c, d, e, f, g, h]),
                rkey: u32::from_be_bytes([k0, k1, k2, k3]),
            },
            len: u32::from_be_bytes([l0, l1, l2, l3]),
        }
    }
}

impl Conn {
    /// The objects of one connection with `size`-byte ping buffers, the
    /// first receive posted.
    pub fn new(dev: &Device, size: u32, client: bool) -> Result<Conn> {
        let pd = dev.alloc_pd().context("allocating a PD")?;
        let cq = dev.create_cq(SQ_DEPTH * 2).context("creating a CQ")?;
        let rw = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let qp_size = QpSize {
            send: SQ_DEPTH,
            recv: 2,
            inline: 0,
        };
        let qp = create_rc_qp(&pd, &cq, &cq, qp_size, rw)?;
        let reg = |len: usize, access| pd.reg_mr(len, access).context("registering memory");
        let recv = reg(INFO_LEN, Access::LOCAL_WRITE)?;
        let send = reg(INFO_LEN, Access::NONE)?;
        let rdma = reg(size as usize, rw)?;
        let start = if client {
            Some(reg(size as usize, rw)?)
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

    fn post_recv(&self) -> Result<()> {
        self.qp
            .post_recv(RecvWr::new(1, [self.recv.sge(0, INFO_LEN as u32)]))
            .context("post recv error")
    }

    /// SENDs `{addr, rkey, size}` of `mr` (`rping_format_send`), or whatever
    /// the send buffer holds ("go ahead", "done").
    pub fn send_info(&self, mr: Option<&Mr>) -> Result<()> {
        if let Some(mr) = mr {
            let mut info = [0u8; INFO_LEN];
            info[..8].copy_from_slice(&mr.addr().to_be_bytes());
            info[8..12].copy_from_slice(&mr.rkey().to_be_bytes());
            info[12..].copy_from_slice(&self.size.to_be_bytes());
            self.send
                .write(0, &info)
                .context("writing the send buffer")?;
        }
        self.post(SendWr::new(
            2,
            SendOp::Send,
            [self.send.sge(0, INFO_LEN as u32)],
        ))
    }

    /// Posts a send request.
    pub fn post(&self, wr: SendWr) -> Result<()> {
        self.qp.post_send(wr).context("post send error")
    }

    /// Waits for the next completion of `want`, re-posting receives; `None`
    /// when the peer disconnected. A receive's message comes back (zeros
    /// for the other kinds).
    pub fn wait_for(&self, want: WcOpcode, gone: &Pending<()>) -> Result<Option<[u8; INFO_LEN]>> {
        loop {
            if gone.is_ready() {
                return Ok(None);
            }
            let Some(wc) = self
                .cq
                .wait_one(Duration::from_millis(50))
                .context("waiting for a completion")?
            else {
                continue;
            };
            match wc.status {
                WcStatus::Success => {}
                WcStatus::WrFlushErr => return Ok(None),
                s => bail!("cq completion failed status {}", s as u32),
            }
            let mut msg = [0u8; INFO_LEN];
            if wc.opcode == WcOpcode::Recv {
                ensure!(
                    wc.byte_len as usize == INFO_LEN,
                    "Received bogus data, size {}",
                    wc.byte_len
                );
                self.recv
                    .read(0, &mut msg)
                    .context("reading the receive buffer")?;
                self.post_recv()?;
            }
            if wc.opcode == want {
                return Ok(Some(msg));
            }
        }
    }
}
