//! QP1, the general services interface: how connection-manager MADs travel.
//!
//! The GSI is an ordinary UD queue pair ([`ndverbs_proto::ud::UdQp::gsi`]) with
//! a fixed number, QP 1, and a well-known Q_Key. The engine gives it a private
//! registered region (in a protection domain no application can name) cut into
//! receive slots (40-byte GRH + 256-byte MAD) and send slots (256 bytes), keeps
//! every receive slot posted, and hands received MADs with their source
//! address to the [`CmAgent`](ndverbs_proto::cm::CmAgent); MADs the agent
//! wants sent go out through the same QP.

use crate::mr::{MemTable, Region, RegionBuf};
use ndverbs_proto::mem::{Access, Sge};
use ndverbs_proto::rc::{AddressVector, PathMtu, RecvQueue, RecvWr, WcQueue, WcStatus};
use ndverbs_proto::ud::{UdDest, UdQp, UdSendWr, UdTransmit, GRH_LEN, GSI_QKEY};
use ndverbs_wire::cma::{addr_of_gid, gid_of};
use ndverbs_wire::ip::{Ipv4Header, Ipv6Header, UDP_HEADER_LEN};
use ndverbs_wire::mad::{GSI_QPN, MAD_LEN};
use ndverbs_wire::packet::Packet;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;

/// The protection domain of engine-internal memory (applications get 1, 2, …).
pub const GSI_PD: u32 = 0;
const RECV_SLOTS: usize = 64;
const SEND_SLOTS: usize = 64;
const RECV_SLOT: usize = GRH_LEN + MAD_LEN;

/// The GSI queue pair with its buffers.
///
/// # Example
///
/// ```
/// use ndverbs_engine::gsi::Gsi;
/// use ndverbs_engine::keys::KeyGen;
/// use ndverbs_engine::mr::MemTable;
/// use ndverbs_wire::packet::Packet;
/// use std::net::IpAddr;
/// let (a_ip, b_ip): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
/// let (mut mem_a, mut mem_b) = (MemTable::new(KeyGen::seeded(1)), MemTable::new(KeyGen::seeded(2)));
/// let (mut a, mut b) = (Gsi::new(&mut mem_a), Gsi::new(&mut mem_b));
/// // A MAD from A's QP1 to B's QP1, through one UD packet.
/// a.send(b_ip, &[0x5a; 256]);
/// let mut buf = [0; 512];
/// let (len, dst) = a.poll_transmit(&mut mem_a, &mut buf).unwrap();
/// assert_eq!(dst, b_ip);
/// b.handle_packet(&Packet::parse(&buf[..len])?, a_ip, b_ip, &mut mem_b);
/// // B learns the sender from the GRH, as rxe's GSI does.
/// assert_eq!(b.poll_mad(), Some((a_ip, [0x5a; 256])));
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug)]
pub struct Gsi {
    qp: UdQp,
    rq: RecvQueue,
    region: Arc<Region>,
    free_send: Vec<usize>,
    /// MADs waiting for a free send slot.
    backlog: VecDeque<(IpAddr, [u8; MAD_LEN])>,
    /// MADs received and not yet taken by the CM agent.
    received: VecDeque<(IpAddr, [u8; MAD_LEN])>,
}

impl Gsi {
    /// Sets up QP1 with its region registered in `mem`.
    pub fn new(mem: &mut MemTable) -> Self {
        let len = RECV_SLOTS * RECV_SLOT + SEND_SLOTS * MAD_LEN;
        let region = mem
            .register(
                GSI_PD,
                RegionBuf::alloc(len).expect("GSI buffers"),
                Access::LOCAL_WRITE,
            )
            .expect("GSI region");
        let mut g = Gsi {
            qp: UdQp::gsi(GSI_PD, PathMtu::Mtu1024),
            rq: RecvQueue::new(RECV_SLOTS as u32, 1),
            region,
            free_send: (0..SEND_SLOTS).rev().collect(),
            backlog: VecDeque::new(),
            received: VecDeque::new(),
        };
        for i in 0..RECV_SLOTS {
            g.post_recv(i);
        }
        g
    }

    fn recv_sge(&self, slot: usize) -> Sge {
        Sge::new(
            self.region.addr() + (slot * RECV_SLOT) as u64,
            RECV_SLOT as u32,
            self.region.lkey(),
        )
    }

    fn send_offset(slot: usize) -> usize {
        RECV_SLOTS * RECV_SLOT + slot * MAD_LEN
    }

    fn post_recv(&mut self, slot: usize) {
        let sge = self.recv_sge(slot);
        // Cannot overflow: one receive per slot.
        let _ = self.rq.post(RecvWr::new(slot as u64, vec![sge]));
    }

    /// Queues a MAD for `dst`.
    pub fn send(&mut self, dst: IpAddr, mad: &[u8; MAD_LEN]) {
        let Some(slot) = self.free_send.pop() else {
            self.backlog.push_back((dst, *mad));
            return;
        };
        let off = Self::send_offset(slot);
        // In bounds by construction.
        let _ = self.region.write(off, mad);
        let av = AddressVector {
            dgid: gid_of(dst).octets(),
            hop_limit: 64,
            ..AddressVector::default()
        };
        let dest = UdDest {
            av,
            remote_qpn: GSI_QPN,
            remote_qkey: GSI_QKEY,
        };
        let sge = Sge::new(
            self.region.addr() + off as u64,
            MAD_LEN as u32,
            self.region.lkey(),
        );
        if self
            .qp
            .post_send(UdSendWr::new(slot as u64, dest, vec![sge]))
            .is_err()
        {
            self.free_send.push(slot);
            self.backlog.push_back((dst, *mad));
        }
    }

    /// The next packet to send: its length in `buf` and its destination.
    pub fn poll_transmit(&mut self, mem: &mut MemTable, buf: &mut [u8]) -> Option<(usize, IpAddr)> {
        let UdTransmit { len, av } = self.qp.poll_transmit(mem, buf)?;
        self.reap(mem);
        Some((len, addr_of_gid(av.dgid.into())))
    }

    /// A packet for QP1 arrived from `src` (to local address `dst`).
    pub fn handle_packet(
        &mut self,
        pkt: &Packet<'_>,
        src: IpAddr,
        dst: IpAddr,
        mem: &mut MemTable,
    ) {
        let grh = grh(src, dst, pkt, ReceivedIp::default());
        self.qp.handle_packet(pkt, &grh, mem, &mut self.rq);
        self.reap(mem);
    }

    /// Collects completions: received MADs to the agent's queue, send slots back.
    fn reap(&mut self, mem: &mut MemTable) {
        let _ = mem;
        while let Some(wc) = self.qp.poll_completion() {
            let slot = wc.wr_id as usize;
            match wc.queue {
                WcQueue::Send => {
                    self.free_send.push(slot);
                    if let Some((d, m)) = self.backlog.pop_front() {
                        self.send(d, &m);
                    }
                }
                WcQueue::Recv => {
                    if wc.status == WcStatus::Success && wc.byte_len as usize == RECV_SLOT {
                        let mut buf = [0u8; RECV_SLOT];
                        if self.region.read(slot * RECV_SLOT, &mut buf).is_ok() {
                            let mut mad = [0u8; MAD_LEN];
                            mad.copy_from_slice(&buf[GRH_LEN..]);
                            if let Some(src) = grh_source(&buf[..GRH_LEN]) {
                                self.received.push_back((src, mad));
                            }
                        }
                    }
                    self.post_recv(slot);
                }
            }
        }
    }

    /// Whether a received MAD or a send waits (else the CM's part of a step
    /// has nothing to do).
    pub fn has_work(&self) -> bool {
        !self.received.is_empty() || self.qp.has_output()
    }

    /// The next received MAD and its source address.
    pub fn poll_mad(&mut self) -> Option<(IpAddr, [u8; MAD_LEN])> {
        self.received.pop_front()
    }
}

/// What the receive path knows of a datagram's IP header beyond its
/// addresses.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReceivedIp {
    /// The IPv4 ID (recovered by the ICRC check), if IPv4.
    pub(crate) ipv4_id: Option<u16>,
    /// The ECN bits it arrived with.
    pub(crate) ecn: u8,
}

/// The TTL written into a GRH area: a UDP socket does not report the real
/// one; 64 is what Linux sends with.
const GRH_TTL: u8 = 64;

/// The 40-byte GRH area rxe writes at the start of a UD receive buffer for
/// a RoCEv2 packet from `src` to `dst`: for IPv4, 20 zero bytes then the
/// IPv4 header (addresses, lengths, `ip`'s ID and ECN bits; TTL 64 and DSCP
/// 0, which the socket does not report); for IPv6, the IPv6 header.
pub(crate) fn grh(src: IpAddr, dst: IpAddr, pkt: &Packet<'_>, ip: ReceivedIp) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    let udp_len = UDP_HEADER_LEN + pkt.encoded_len().unwrap_or(0);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h = Ipv4Header::new_udp(s, d, udp_len, GRH_TTL);
            h.id = ip.ipv4_id.unwrap_or(0);
            h.tos = ip.ecn & 3;
            h.checksum = h.compute_checksum();
            let _ = h.write(&mut g[20..]);
        }
        (s, d) => {
            let mut h = Ipv6Header::new_udp(gid_of(s), gid_of(d), udp_len, GRH_TTL);
            h.traffic_class = ip.ecn & 3;
            let _ = h.write(&mut g);
        }
    }
    g
}

/// The source address in a GRH area filled by [`grh`] (or by rxe).
///
/// The IPv6 layout starts with version 6; the IPv4 layout starts with 20 zero
/// bytes. Byte 20 alone cannot tell them apart: in an IPv6 header it is byte
/// 12 of the source address, which may well be `0x4_` (`fd00::4a00:1`).
fn grh_source(g: &[u8]) -> Option<IpAddr> {
    if g[0] >> 4 == 6 {
        Ipv6Header::parse(g).ok().map(|h| addr_of_gid(h.src))
    } else if g[20] >> 4 == 4 {
        Ipv4Header::parse(&g[20..]).ok().map(|h| IpAddr::V4(h.src))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndverbs_wire::bth::Bth;
    use ndverbs_wire::opcode::Opcode;

    #[test]
    fn grh_source_round_trips_both_families() {
        let pkt = Packet::new(Bth::new(Opcode::UD_SEND_ONLY, 0xffff, 1));
        for (s, d) in [
            ("10.0.0.1", "10.0.0.2"),
            ("fd00::1", "fd00::2"),
            // Byte 12 of the source is 0x4a: looks like IPv4 at GRH byte 20.
            ("fd00::4a00:1", "fd00::2"),
            ("::1", "fd00::4500:2"),
        ] {
            let (s, d): (IpAddr, IpAddr) = (s.parse().unwrap(), d.parse().unwrap());
            assert_eq!(
                grh_source(&grh(s, d, &pkt, ReceivedIp::default())),
                Some(s),
                "{s} -> {d}"
            );
        }
        assert_eq!(grh_source(&[0u8; GRH_LEN]), None);
    }
}
