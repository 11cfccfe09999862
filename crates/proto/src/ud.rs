//! Unreliable Datagram (UD) queue pairs — in particular QP1, the GSI, which
//! carries the connection manager's MADs.
//!
//! UD is the simple transport: every message is one packet (`UD SEND_ONLY`,
//! optionally with immediate data) of at most the port MTU, addressed per work
//! request to any `(address, QPN, Q_Key)`. The DETH carries the Q_Key the
//! receiver checks and the sender's QPN. Nothing is acknowledged or
//! retransmitted: a send completes when its packet is handed to the engine, a
//! lost packet is simply lost, and a packet that finds no posted receive (or a
//! wrong Q_Key) is dropped and counted.
//!
//! As in verbs, a UD receive buffer starts with 40 bytes for the *GRH*: the
//! engine passes what to put there (for RoCEv2 over IPv4, Linux rxe writes 20
//! zero bytes and then the 20-byte IPv4 header, which is how the GSI learns
//! where a MAD came from), and the payload follows at offset 40.
//!
//! Linux rxe sets AckReq on QP1's packets but not on other UD QPs' packets;
//! [`UdQp`] does the same so that its bytes match rxe's.
//!
//! **An application's UD QP** ([`UdQp::new_reset`]) walks the UD ladder
//! ([`ud_transition_rules`](crate::rc::ud_transition_rules)): RESET → INIT
//! (Q_Key, P_Key index, port) → RTR (nothing: no peer) → RTS (first PSN).
//! It takes receives from INIT on, delivers datagrams from RTR on and sends
//! in RTS. A send longer than the path MTU is refused when posted
//! ([`PostError::DatagramTooLong`]), not cut into packets.

use crate::mem::{gather, scatter, sgl_len, Memory, Sge};
use crate::rc::{
    check_ud_modify, AddressVector, AttrMask, ModifyError, PathMtu, PostError, QpAttr, QpState,
    RecvQueue, WcOpcode, WcQueue, WcStatus, WorkCompletion,
};
use ndverbs_wire::bth::{psn, Bth, MASK24};
use ndverbs_wire::ext::Deth;
use ndverbs_wire::icrc::ICRC_LEN;
use ndverbs_wire::opcode::Opcode;
use ndverbs_wire::packet::{ExtHeaders, Packet};
use std::collections::VecDeque;

/// Bytes reserved for the GRH at the start of every UD receive buffer.
pub const GRH_LEN: usize = 40;
/// The GSI's Q_Key.
pub const GSI_QKEY: u32 = ndverbs_wire::mad::GSI_QKEY;

/// Where a UD send goes.
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::AddressVector;
/// use ndverbs_proto::ud::{UdDest, GSI_QKEY};
/// // The GSI (QP1) of the host at 192.0.2.7.
/// let gsi = UdDest {
///     av: AddressVector { dgid: std::net::Ipv4Addr::new(192, 0, 2, 7).to_ipv6_mapped().octets(), ..AddressVector::default() },
///     remote_qpn: 1,
///     remote_qkey: GSI_QKEY,
/// };
/// assert_eq!(gsi.remote_qkey, 0x8001_0000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UdDest {
    /// Path to the peer (the engine addresses the datagram with it).
    pub av: AddressVector,
    /// Remote QP number.
    pub remote_qpn: u32,
    /// Remote Q_Key. If its top bit is set the QP's own Q_Key is sent instead
    /// (IBTA: "controlled" Q_Keys).
    pub remote_qkey: u32,
}

impl UdDest {
    /// QP `remote_qpn` at `addr` with Q_Key `remote_qkey` (top bit set:
    /// the sending QP's own), over a path with hop limit 64.
    ///
    /// ```
    /// use ndverbs_proto::ud::UdDest;
    /// let d = UdDest::new("192.0.2.7".parse().unwrap(), 0x33, 0x1111);
    /// assert_eq!(d.av.dgid[10..], [0xff, 0xff, 192, 0, 2, 7]); // an IPv4-mapped GID
    /// ```
    pub fn new(addr: std::net::IpAddr, remote_qpn: u32, remote_qkey: u32) -> Self {
        UdDest {
            av: AddressVector {
                dgid: ndverbs_wire::cma::gid_of(addr).octets(),
                hop_limit: 64,
                ..AddressVector::default()
            },
            remote_qpn,
            remote_qkey,
        }
    }
}

/// A UD send work request.
///
/// # Example
///
/// ```
/// use ndverbs_proto::ud::{UdDest, UdSendWr};
/// // A datagram with immediate data, inline (no registered memory needed).
/// let mut wr = UdSendWr::new(1, UdDest { remote_qpn: 0x33, remote_qkey: 0x1111, ..UdDest::default() }, vec![]);
/// wr.inline = Some(b"ping".to_vec());
/// wr.imm = Some(7);
/// assert!(wr.signaled);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdSendWr {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Destination.
    pub dest: UdDest,
    /// Data (at most the MTU).
    pub sgl: Vec<Sge>,
    /// Inline data instead of `sgl`.
    pub inline: Option<Vec<u8>>,
    /// Immediate data.
    pub imm: Option<u32>,
    /// Complete on success.
    pub signaled: bool,
    /// Solicited-event bit.
    pub solicited: bool,
}

impl UdSendWr {
    /// A signaled send of `sgl` to `dest`.
    pub fn new(wr_id: u64, dest: UdDest, sgl: Vec<Sge>) -> Self {
        UdSendWr {
            wr_id,
            dest,
            sgl,
            inline: None,
            imm: None,
            signaled: true,
            solicited: false,
        }
    }
}

/// One packet ready to go: its length in the buffer and where it goes.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::testing::VecMemory;
/// use ndverbs_proto::rc::{AddressVector, PathMtu};
/// use ndverbs_proto::ud::{UdDest, UdQp, UdSendWr};
/// use ndverbs_wire::packet::Packet;
/// let mut qp = UdQp::new(0x20, 1, 0x1111, PathMtu::Mtu1024, 0, 16);
/// let mut wr = UdSendWr::new(1, UdDest { remote_qpn: 0x33, remote_qkey: 0x1111, ..UdDest::default() }, vec![]);
/// wr.inline = Some(b"ping".to_vec());
/// qp.post_send(wr)?;
/// let mut buf = [0; 2048];
/// // `len` bytes of `buf` are the packet; `av` tells the engine where to send it.
/// let t = qp.poll_transmit(&mut VecMemory::new(), &mut buf).unwrap();
/// let pkt = Packet::parse(&buf[..t.len])?;
/// assert_eq!((pkt.bth.dqpn, pkt.payload), (0x33, &b"ping"[..]));
/// assert_eq!(t.av, AddressVector::default()); // the `dest.av` of the WR
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdTransmit {
    /// Bytes written (BTH to a zero ICRC).
    pub len: usize,
    /// The path to address it with.
    pub av: AddressVector,
}

/// UD counters.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::testing::VecMemory;
/// use ndverbs_proto::rc::{PathMtu, RecvQueue};
/// use ndverbs_proto::ud::{UdQp, GRH_LEN};
/// use ndverbs_wire::{bth::Bth, ext::Deth, opcode::Opcode, packet::Packet};
/// // A datagram with the wrong Q_Key: counted and dropped.
/// let mut qp = UdQp::new(0x20, 1, 0x1111, PathMtu::Mtu1024, 0, 16);
/// let mut pkt = Packet::new(Bth::new(Opcode::UD_SEND_ONLY, 0x20, 0));
/// pkt.ext.deth = Some(Deth { qkey: 0x2222, resv: 0, src_qpn: 0x33 });
/// qp.handle_packet(&pkt, &[0; GRH_LEN], &mut VecMemory::new(), &mut RecvQueue::new(4, 1));
/// let c = qp.counters();
/// assert_eq!((c.rcvd_pkts, c.drop_bad_qkey), (1, 1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UdCounters {
    /// Packets sent.
    pub sent_pkts: u64,
    /// Packets received (before checks).
    pub rcvd_pkts: u64,
    /// Dropped: not a UD SEND, wrong QPN or P_Key.
    pub drop_malformed: u64,
    /// Dropped: Q_Key mismatch.
    pub drop_bad_qkey: u64,
    /// Dropped: no receive posted.
    pub drop_no_recv: u64,
    /// Dropped: the QP is not ready (or in ERR).
    pub drop_bad_state: u64,
}

impl UdCounters {
    /// The same counts under the names every QP reports
    /// ([`Counters`](crate::rc::Counters), rxe's): packets that are not a
    /// UD SEND for this QP in the default partition count as `not_rc`
    /// (another transport's, for this QP).
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::ud::UdCounters;
    /// let c = UdCounters { rcvd_pkts: 3, drop_bad_qkey: 1, drop_no_recv: 2, ..UdCounters::default() };
    /// let r = c.to_counters();
    /// assert_eq!((r.rcvd_pkts, r.drops.bad_qkey, r.drops.no_recv), (3, 1, 2));
    /// ```
    pub fn to_counters(&self) -> crate::rc::Counters {
        let mut c = crate::rc::Counters {
            sent_pkts: self.sent_pkts,
            rcvd_pkts: self.rcvd_pkts,
            rdma_sends: self.sent_pkts,
            ..Default::default()
        };
        // Every drop was counted as received first.
        c.rdma_recvs = self.rcvd_pkts.saturating_sub(
            self.drop_malformed + self.drop_bad_qkey + self.drop_no_recv + self.drop_bad_state,
        );
        c.drops.not_rc = self.drop_malformed;
        c.drops.bad_qkey = self.drop_bad_qkey;
        c.drops.no_recv = self.drop_no_recv;
        c.drops.bad_state = self.drop_bad_state;
        c
    }
}

/// A UD queue pair. Created ready to send and receive (the RESET → RTS walk of
/// an RC QP carries no information for UD beyond the Q_Key and first PSN);
/// [`UdQp::set_error`] flushes it.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{testing::VecMemory, Access};
/// use ndverbs_proto::rc::{PathMtu, RecvQueue, RecvWr, WcStatus};
/// use ndverbs_proto::ud::{UdDest, UdQp, UdSendWr, GRH_LEN};
/// use ndverbs_wire::packet::Packet;
/// let (mut a, mut b) = (UdQp::new(0x20, 1, 0x1111, PathMtu::Mtu1024, 0, 16),
///                       UdQp::new(0x30, 1, 0x1111, PathMtu::Mtu1024, 0, 16));
/// let (mut mem_a, mut mem_b) = (VecMemory::new(), VecMemory::new());
/// let src = mem_a.register_bytes(1, 0x1000, b"datagram".to_vec(), Access::NONE);
/// let dst = mem_b.register(1, 0x2000, 256, Access::LOCAL_WRITE);
/// let mut rq_b = RecvQueue::new(4, 1);
/// rq_b.post(RecvWr::new(9, vec![dst.sge(0, 256)]))?;
/// let to_b = UdDest { remote_qpn: 0x30, remote_qkey: 0x1111, ..UdDest::default() };
/// a.post_send(UdSendWr::new(1, to_b, vec![src.sge(0, 8)]))?;
/// let mut buf = [0; 2048];
/// let t = a.poll_transmit(&mut mem_a, &mut buf).unwrap();
/// // Sent means done for UD: the completion is there at once.
/// assert_eq!(a.poll_completion().unwrap().status, WcStatus::Success);
/// b.handle_packet(&Packet::parse(&buf[..t.len])?, &[0; GRH_LEN], &mut mem_b, &mut rq_b);
/// let wc = b.poll_completion().unwrap();
/// assert_eq!((wc.wr_id, wc.src_qp, wc.byte_len), (9, 0x20, (GRH_LEN + 8) as u32));
/// // The payload lands behind the 40 bytes reserved for the GRH.
/// assert_eq!(&mem_b.bytes(dst.lkey)[GRH_LEN..GRH_LEN + 8], b"datagram");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct UdQp {
    qpn: u32,
    pd: u32,
    qkey: u32,
    mtu: u32,
    psn: u32,
    max_send_wr: usize,
    state: QpState,
    sq: VecDeque<UdSendWr>,
    cq: VecDeque<WorkCompletion>,
    counters: UdCounters,
}

impl UdQp {
    /// A UD QP in RTS. `mtu` is the port MTU; `sq_psn` the first PSN.
    pub fn new(qpn: u32, pd: u32, qkey: u32, mtu: PathMtu, sq_psn: u32, max_send_wr: u32) -> Self {
        UdQp {
            qpn: qpn & MASK24,
            pd,
            qkey,
            mtu: mtu.bytes(),
            psn: sq_psn & MASK24,
            max_send_wr: max_send_wr as usize,
            state: QpState::Rts,
            sq: VecDeque::new(),
            cq: VecDeque::new(),
            counters: UdCounters::default(),
        }
    }

    /// QP1, the GSI: Q_Key 0x80010000, PSN from 0.
    pub fn gsi(pd: u32, mtu: PathMtu) -> Self {
        UdQp::new(1, pd, GSI_QKEY, mtu, 0, 256)
    }

    /// An application's UD QP in RESET: [`UdQp::modify`] takes it to RTS.
    /// `mtu` is the port's active MTU, the longest datagram it sends.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::rc::{AttrMask, PathMtu, PostError, QpAttr, QpState};
    /// use ndverbs_proto::ud::{UdDest, UdQp, UdSendWr};
    /// let mut qp = UdQp::new_reset(0x20, 1, PathMtu::Mtu1024, 16);
    /// let mut a = QpAttr { qp_state: QpState::Init, qkey: 0x1111, ..QpAttr::default() };
    /// qp.modify(&a, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY)?;
    /// a.qp_state = QpState::Rtr;
    /// qp.modify(&a, AttrMask::STATE)?;
    /// let wr = UdSendWr::new(1, UdDest::default(), vec![]);
    /// // Not in RTS yet: sends are refused.
    /// assert_eq!(qp.post_send(wr.clone()), Err(PostError::InvalidState(QpState::Rtr)));
    /// a.qp_state = QpState::Rts;
    /// a.sq_psn = 0x42;
    /// qp.modify(&a, AttrMask::STATE | AttrMask::SQ_PSN)?;
    /// qp.post_send(wr)?;
    /// assert_eq!((qp.query().qkey, qp.query().sq_psn), (0x1111, 0x42));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new_reset(qpn: u32, pd: u32, mtu: PathMtu, max_send_wr: u32) -> Self {
        UdQp {
            state: QpState::Reset,
            ..UdQp::new(qpn, pd, 0, mtu, 0, max_send_wr)
        }
    }

    /// Changes state and attributes by the UD transition table
    /// ([`check_ud_modify`]); on error nothing changes. ERR flushes the
    /// queued sends; RESET forgets them (and the completions not yet
    /// taken), as a reset QP forgets its work.
    pub fn modify(&mut self, attr: &QpAttr, mask: AttrMask) -> Result<(), ModifyError> {
        let to = check_ud_modify(self.state, attr, mask)?;
        if mask.contains(AttrMask::QKEY) {
            self.qkey = attr.qkey;
        }
        if mask.contains(AttrMask::SQ_PSN) {
            self.psn = attr.sq_psn & MASK24;
        }
        match to {
            QpState::Err if self.state != QpState::Err => self.set_error(),
            QpState::Reset => {
                self.sq.clear();
                self.cq.clear();
                self.state = QpState::Reset;
            }
            s => self.state = s,
        }
        Ok(())
    }

    /// The current attributes: state, Q_Key, next PSN, port 1, P_Key index 0,
    /// the path MTU.
    pub fn query(&self) -> QpAttr {
        QpAttr {
            qp_state: self.state,
            cur_qp_state: self.state,
            qkey: self.qkey,
            sq_psn: self.psn,
            path_mtu: PathMtu::at_most(self.mtu as usize).unwrap_or(PathMtu::Mtu256),
            ..QpAttr::default()
        }
    }

    /// The longest datagram this QP sends (its path MTU), in bytes.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The state (RTS or ERR).
    pub fn state(&self) -> QpState {
        self.state
    }

    /// Counters.
    pub fn counters(&self) -> &UdCounters {
        &self.counters
    }

    /// Moves to ERR: every queued send completes with `WrFlushErr` (once).
    pub fn set_error(&mut self) {
        self.state = QpState::Err;
        while let Some(wr) = self.sq.pop_front() {
            self.complete(wr.wr_id, WcStatus::WrFlushErr, 0);
        }
    }

    /// In ERR, flushes every receive in `rq`; returns how many.
    pub fn flush_recv(&mut self, rq: &mut RecvQueue) -> usize {
        if self.state != QpState::Err {
            return 0;
        }
        let mut n = 0;
        while let Some(wr) = rq.pop() {
            self.push_recv(wr.wr_id, WcStatus::WrFlushErr, 0, None, 0, false);
            n += 1;
        }
        n
    }

    fn complete(&mut self, wr_id: u64, status: WcStatus, byte_len: u32) {
        self.cq.push_back(WorkCompletion {
            wr_id,
            status,
            opcode: WcOpcode::Send,
            queue: WcQueue::Send,
            byte_len,
            imm: None,
            invalidated_rkey: None,
            qpn: self.qpn,
            src_qp: 0,
            solicited: false,
            grh: false,
        });
    }

    fn push_recv(
        &mut self,
        wr_id: u64,
        status: WcStatus,
        byte_len: u32,
        imm: Option<u32>,
        src_qp: u32,
        solicited: bool,
    ) {
        self.cq.push_back(WorkCompletion {
            wr_id,
            status,
            opcode: WcOpcode::Recv,
            queue: WcQueue::Recv,
            byte_len,
            imm,
            invalidated_rkey: None,
            qpn: self.qpn,
            src_qp,
            solicited,
            grh: status == WcStatus::Success,
        });
    }

    /// Queues a send (at most one MTU of data) in RTS; in ERR it completes
    /// flushed; other states refuse it.
    pub fn post_send(&mut self, wr: UdSendWr) -> Result<(), PostError> {
        if !matches!(self.state, QpState::Rts | QpState::Err) {
            return Err(PostError::InvalidState(self.state));
        }
        let len = match &wr.inline {
            Some(d) if wr.sgl.is_empty() => d.len() as u64,
            Some(_) => return Err(PostError::InlineNotAllowed),
            None => sgl_len(&wr.sgl),
        };
        if len > u64::from(self.mtu) {
            return Err(PostError::DatagramTooLong { len, mtu: self.mtu });
        }
        if self.sq.len() >= self.max_send_wr {
            return Err(PostError::QueueFull(self.max_send_wr as u32));
        }
        if self.state == QpState::Err {
            self.complete(wr.wr_id, WcStatus::WrFlushErr, 0);
        } else {
            self.sq.push_back(wr);
        }
        Ok(())
    }

    /// Whether sends wait to be written ([`UdQp::poll_transmit`]).
    pub fn has_output(&self) -> bool {
        !self.sq.is_empty()
    }

    /// Writes the next packet into `buf`. A send whose local buffer cannot be
    /// read completes with `LocProtErr` (UD QPs do not enter ERR for it).
    pub fn poll_transmit(&mut self, mem: &mut dyn Memory, buf: &mut [u8]) -> Option<UdTransmit> {
        loop {
            let wr = self.sq.front()?;
            let len = wr
                .inline
                .as_ref()
                .map_or_else(|| sgl_len(&wr.sgl) as usize, Vec::len);
            let opcode = if wr.imm.is_some() {
                Opcode::UD_SEND_ONLY_IMM
            } else {
                Opcode::UD_SEND_ONLY
            };
            let mut bth = Bth::new(opcode, wr.dest.remote_qpn, self.psn);
            bth.ack_req = self.qpn == 1;
            bth.se = wr.solicited;
            bth.pad = Packet::pad_for(len);
            let qkey = if wr.dest.remote_qkey & 0x8000_0000 != 0 && self.qpn != 1 {
                self.qkey
            } else {
                wr.dest.remote_qkey
            };
            let mut pkt = Packet::new(bth);
            pkt.ext = ExtHeaders {
                deth: Some(Deth {
                    qkey,
                    resv: 0,
                    src_qpn: self.qpn,
                }),
                immdt: wr.imm,
                ..ExtHeaders::default()
            };
            let hdr = pkt.header_len().ok()?;
            let total = hdr + len + usize::from(bth.pad) + ICRC_LEN;
            if buf.len() < total {
                return None;
            }
            pkt.write(buf).ok()?;
            let body = &mut buf[hdr..hdr + len];
            let filled = match &wr.inline {
                Some(d) => {
                    body.copy_from_slice(d);
                    Ok(())
                }
                None => gather(mem, self.pd, &wr.sgl, 0, body),
            };
            buf[hdr + len..total].fill(0);
            let wr = self.sq.pop_front()?;
            if filled.is_err() {
                self.complete(wr.wr_id, WcStatus::LocProtErr, 0);
                continue;
            }
            self.psn = psn::add(self.psn, 1);
            self.counters.sent_pkts += 1;
            if wr.signaled {
                self.complete(wr.wr_id, WcStatus::Success, len as u32);
            }
            return Some(UdTransmit {
                len: total,
                av: wr.dest.av,
            });
        }
    }

    /// Takes one packet for this QP: a UD SEND with the right Q_Key lands in
    /// the oldest receive of `rq` behind the 40-byte `grh` the engine supplies.
    pub fn handle_packet(
        &mut self,
        pkt: &Packet<'_>,
        grh: &[u8; GRH_LEN],
        mem: &mut dyn Memory,
        rq: &mut RecvQueue,
    ) {
        self.counters.rcvd_pkts += 1;
        if !matches!(self.state, QpState::Rtr | QpState::Rts) {
            self.counters.drop_bad_state += 1;
            return;
        }
        let (Some(deth), true, true, true) = (
            pkt.ext.deth,
            matches!(
                pkt.bth.opcode,
                Opcode::UD_SEND_ONLY | Opcode::UD_SEND_ONLY_IMM
            ),
            pkt.bth.dqpn == self.qpn,
            pkt.bth.pkey & 0x7fff == 0x7fff,
        ) else {
            self.counters.drop_malformed += 1;
            return;
        };
        if deth.qkey != self.qkey {
            self.counters.drop_bad_qkey += 1;
            return;
        }
        let Some(wr) = rq.pop() else {
            self.counters.drop_no_recv += 1;
            return;
        };
        let need = (GRH_LEN + pkt.payload.len()) as u64;
        if need > sgl_len(&wr.sgl) {
            self.push_recv(wr.wr_id, WcStatus::LocLenErr, 0, None, deth.src_qpn, false);
            return;
        }
        let ok = scatter(mem, self.pd, &wr.sgl, 0, grh).is_ok()
            && scatter(mem, self.pd, &wr.sgl, GRH_LEN as u64, pkt.payload).is_ok();
        let (status, len) = if ok {
            (WcStatus::Success, need as u32)
        } else {
            (WcStatus::LocProtErr, 0)
        };
        self.push_recv(
            wr.wr_id,
            status,
            len,
            pkt.ext.immdt,
            deth.src_qpn,
            pkt.bth.se,
        );
    }

    /// The next completion.
    pub fn poll_completion(&mut self) -> Option<WorkCompletion> {
        self.cq.pop_front()
    }
}
