//! Two QPs back to back with one WRITE posted at A, packets moved by hand:
//! the tests choose what is lost, reordered and when it arrives.

use ndverbs_proto::mem::testing::VecMemory;
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::*;
use ndverbs_proto::time::Instant;
use ndverbs_wire::packet::Packet;

/// Every byte of the WRITE's source.
const BYTE: u8 = 7;

pub struct Two {
    pub a: RcQp,
    pub b: RcQp,
    pub mem_a: VecMemory,
    pub mem_b: VecMemory,
    pub rq_a: RecvQueue,
    pub rq_b: RecvQueue,
    pub buf: Vec<u8>,
    /// The WRITE's target region at B.
    pub dst_lkey: u32,
}

/// A connected pair with one WRITE of `len` bytes posted at A.
pub fn pair(len: u32) -> Two {
    let caps = QpCaps::default();
    let (mut a, mut b) = (RcQp::new(0x11, 1, caps), RcQp::new(0x22, 1, caps));
    let to_b = RcConnection {
        rq_psn: 500,
        sq_psn: 100,
        ..RcConnection::new(0x22)
    };
    let to_a = RcConnection {
        rq_psn: 100,
        sq_psn: 500,
        ..RcConnection::new(0x11)
    };
    for (attr, mask) in to_b.steps() {
        a.modify(&attr, mask).unwrap();
    }
    for (attr, mask) in to_a.steps() {
        b.modify(&attr, mask).unwrap();
    }
    let (mut mem_a, mut mem_b) = (VecMemory::new(), VecMemory::new());
    let src = mem_a.register_bytes(1, 0x1000, vec![BYTE; len as usize], Access::NONE);
    let dst = mem_b.register(
        1,
        0x10_0000,
        len,
        Access::REMOTE_WRITE | Access::LOCAL_WRITE,
    );
    let at = RemoteAddr {
        va: dst.addr,
        rkey: dst.rkey,
    };
    a.post_send(SendWr::new(1, SendOp::Write(at), vec![src.sge(0, len)]))
        .unwrap();
    let buf = vec![0u8; a.max_packet_len()];
    Two {
        a,
        b,
        mem_a,
        mem_b,
        rq_a: RecvQueue::new(4, 1),
        rq_b: RecvQueue::new(4, 1),
        buf,
        dst_lkey: dst.lkey,
    }
}

impl Two {
    /// Everything A sends now: (PSN, AckReq) of each packet, delivered to B
    /// unless `drop` says otherwise.
    pub fn a_sends(&mut self, now: Instant, mut drop: impl FnMut(u32) -> bool) -> Vec<(u32, bool)> {
        let mut out = Vec::new();
        while let Some(n) = self.a.poll_transmit(now, &mut self.mem_a, &mut self.buf) {
            let p = Packet::parse(&self.buf[..n]).unwrap();
            out.push((p.bth.psn, p.bth.ack_req));
            if !drop(p.bth.psn) {
                self.b
                    .handle_packet(now, &p, &mut self.mem_b, &mut self.rq_b);
            }
        }
        out
    }

    /// B's replies, delivered to A.
    pub fn b_replies(&mut self, now: Instant) {
        self.b_replies_arriving(now, now);
    }

    /// B's replies, delivered to A at `now` as having reached its host at
    /// `arrived`.
    pub fn b_replies_arriving(&mut self, now: Instant, arrived: Instant) {
        while let Some(n) = self.b.poll_transmit(now, &mut self.mem_b, &mut self.buf) {
            let p = Packet::parse(&self.buf[..n]).unwrap();
            self.a
                .handle_packet_at(now, arrived, &p, &mut self.mem_a, &mut self.rq_a);
        }
    }
}

impl Two {
    /// Everything A sends now, undelivered.
    pub fn a_packets(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(n) = self.a.poll_transmit(now, &mut self.mem_a, &mut self.buf) {
            out.push(self.buf[..n].to_vec());
        }
        out
    }

    /// One of A's packets reaches B.
    pub fn deliver_to_b(&mut self, now: Instant, bytes: &[u8]) {
        let p = Packet::parse(bytes).unwrap();
        self.b
            .handle_packet(now, &p, &mut self.mem_b, &mut self.rq_b);
    }

    /// The WRITE (work request 1) completed at A, and every byte landed at B.
    pub fn assert_write_landed(&mut self) {
        let wc = self.a.poll_completion().expect("the WRITE completed");
        assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
        assert!(self.mem_b.bytes(self.dst_lkey).iter().all(|&x| x == BYTE));
    }
}
