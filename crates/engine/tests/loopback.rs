//! The engine end to end on loopback: two NICs (on a fresh address pair,
//! both on UDP 4791), real sockets, real ICRCs, both progress models.

mod common;

use common::*;
use ndverbs_engine::config::Progress;
use ndverbs_engine::error::EngineError;
use ndverbs_engine::icrc::IcrcCache;
use ndverbs_engine::link::udp::RoceSocket;
use ndverbs_engine::nic::Nic;
use ndverbs_proto::rc::{
    AttrMask, PathMtu, PostError, QpAttr, QpState, RcConnection, RecvWr, RemoteAddr, SendOp,
    SendWr, WcOpcode, WcStatus,
};
use ndverbs_wire::ext::{Aeth, Syndrome};
use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

fn fill(s: &Side, off: usize, len: usize, seed: u64) {
    s.mr.write(off, &pattern(seed, len)).unwrap();
}

#[test]
fn send_write_read_atomics_threaded() {
    let (a, b) = pair(Progress::Thread, PathMtu::Mtu1024, 1 << 20);
    // SEND of 10000 bytes (10 packets) into a posted receive.
    fill(&a, 0, 10_000, 1);
    b.post_recv(7, 100_000, 16_384);
    a.post_send(SendWr::new(
        1,
        SendOp::SendImm(0xabcd),
        vec![a.sge(0, 10_000)],
    ));
    let wa = wait_n(&a, 1);
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::Success));
    let wb = wait_n(&b, 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].byte_len, wb[0].imm),
        (7, WcStatus::Success, 10_000, Some(0xabcd))
    );
    assert_eq!(b.bytes(100_000, 10_000), a.bytes(0, 10_000));

    // RDMA WRITE 300 KiB.
    fill(&a, 200_000, 300_000, 9);
    let write = SendOp::Write(b.remote(500_000));
    a.post_send(SendWr::new(2, write, vec![a.sge(200_000, 300_000)]));
    assert_eq!(wait_n(&a, 1)[0].status, WcStatus::Success);
    assert_eq!(b.bytes(500_000, 300_000), a.bytes(200_000, 300_000));

    // RDMA READ it back into another place.
    let read = SendOp::Read(b.remote(500_000));
    a.post_send(SendWr::new(3, read, vec![a.sge(600_000, 300_000)]));
    let w = wait_n(&a, 1);
    assert_eq!(
        (w[0].status, w[0].opcode, w[0].byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, 300_000)
    );
    assert_eq!(a.bytes(600_000, 300_000), a.bytes(200_000, 300_000));

    // Atomics on b's memory.
    b.mr.write(8, &40u64.to_ne_bytes()).unwrap();
    let t = b.remote(8);
    let add = SendOp::FetchAdd { remote: t, add: 2 };
    a.post_send(SendWr::new(4, add, vec![a.sge(16, 8)]));
    let swap = SendOp::CompareSwap {
        remote: t,
        compare: 42,
        swap: 7,
    };
    a.post_send(SendWr::new(5, swap, vec![a.sge(24, 8)]));
    let w = wait_n(&a, 2);
    assert!(w.iter().all(|w| w.status == WcStatus::Success), "{w:?}");
    let word = |s: &Side, off| u64::from_ne_bytes(s.bytes(off, 8).try_into().unwrap());
    assert_eq!((word(&a, 16), word(&a, 24), word(&b, 8)), (40, 42, 7));

    // A bad rkey: remote access error, and the QP goes to ERR.
    let bad = RemoteAddr {
        rkey: b.mr.rkey() ^ 0x5a5a,
        ..b.remote(0)
    };
    a.post_send(SendWr::new(6, SendOp::Write(bad), vec![a.sge(0, 64)]));
    let w = wait_n(&a, 1);
    assert_eq!(w[0].status, WcStatus::RemAccessErr);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(a.qp.state(), QpState::Err);
}

/// 4 KiB SEND ping-pong, 1000 round trips, in manual progress mode (one thread
/// drives both NICs) — the `ndv pingpong -s 4096 -n 1000` pattern.
#[test]
fn pingpong_manual_progress() {
    let (a, b) = pair(Progress::Manual, PathMtu::Mtu4096, 1 << 16);
    let n = 1000;
    for s in [&a, &b] {
        for i in 0..16 {
            s.post_recv(i, 8192, 4096);
        }
    }
    fill(&a, 0, 4096, 3);
    fill(&b, 0, 4096, 4);
    let mut received = [0u64; 2];
    for i in 0..n {
        // a's message to b, then b's answer: each side posts its receive
        // again once it is taken.
        for (from, to, count) in [(&a, &b, 1), (&b, &a, 0)] {
            from.post_send(SendWr::new(i, SendOp::Send, vec![from.sge(0, 4096)]));
            drive_until(&a, &b, || {
                while let Some(w) = to.cq.poll_one() {
                    assert_eq!(w.status, WcStatus::Success);
                    if w.opcode == WcOpcode::Recv {
                        received[count] += 1;
                        to.post_recv(w.wr_id, 8192, 4096);
                    }
                }
                received[count] > i
            });
        }
    }
    assert_eq!(b.bytes(8192, 4096), a.bytes(0, 4096));
    assert_eq!(a.bytes(8192, 4096), b.bytes(0, 4096));
    assert_eq!(a.nic.counters().drop_bad_icrc.load(Relaxed), 0);
}

#[test]
fn post_errors_destroy_and_removal() {
    let (a, b) = pair(Progress::Thread, PathMtu::Mtu1024, 1 << 16);
    // Too many SGEs, inline too large: typed, synchronous.
    let many = vec![a.sge(0, 1); 5];
    assert!(matches!(
        a.nic.post_send(&a.qp, SendWr::new(1, SendOp::Send, many)),
        Err(EngineError::Post(PostError::TooManySges { .. }))
    ));
    let mut w = SendWr::new(1, SendOp::Send, vec![]);
    w.inline = Some(vec![0; 257]);
    assert!(matches!(
        a.nic.post_send(&a.qp, w),
        Err(EngineError::Post(PostError::InlineTooLarge { .. }))
    ));
    // Receives outstanding, then removal: each completes exactly once, flushed.
    for i in 0..10 {
        b.post_recv(i, 0, 64);
    }
    std::thread::sleep(Duration::from_millis(20));
    b.nic.remove();
    let w = wait_n(&b, 10);
    let mut ids: Vec<u64> = w.iter().map(|w| w.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..10).collect::<Vec<_>>());
    assert!(w.iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert!(b.cq.poll_one().is_none());
    assert!(matches!(
        b.nic.post_recv(&b.qp, RecvWr::new(1, vec![])),
        Err(EngineError::Removed)
    ));
    assert!(matches!(b.nic.alloc_pd(), Err(EngineError::Removed)));
    // Destroy: later use of the id is a typed error.
    let qpn = a.qp.qpn();
    a.nic.destroy_qp(qpn).unwrap();
    assert!(matches!(
        a.nic.query_qp(qpn),
        Err(EngineError::NotFound { .. })
    ));
    assert!(matches!(
        a.nic.destroy_qp(qpn),
        Err(EngineError::NotFound { .. })
    ));
}

/// Dropping every handle of a threaded NIC ends its worker and frees its
/// UDP port: the same address can be opened again at once.
#[test]
fn dropping_a_nic_releases_its_port() {
    let ip = ndverbs_testkit::addr::v4();
    for _ in 0..3 {
        let a = Nic::open(ip, Progress::Thread).unwrap();
        let pd = a.alloc_pd().unwrap();
        let _ = a.create_cq(8).unwrap();
        let _ = pd;
        drop(a);
        // The worker may hold the state for one more turn (≤ 100 ms).
        let t0 = std::time::Instant::now();
        loop {
            match RoceSocket::bind(ip) {
                Ok(s) => {
                    drop(s);
                    break;
                }
                Err(e) => {
                    assert!(
                        t0.elapsed() < Duration::from_secs(2),
                        "port still bound: {e}"
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}

/// A bare socket playing b's RC peer by hand: it sends b signed packets and
/// reads b's packets one at a time (a GRO datagram split into its packets,
/// each with the number of the datagram that brought it, so a test sees
/// which packets rode together).
struct HandPeer {
    sock: RoceSocket,
    /// Whether the socket coalesces datagrams (and b sends GSO runs) at all.
    gro: bool,
    icrc: IcrcCache,
    buf: Vec<u8>,
    pending: std::collections::VecDeque<(Opcode, u32, usize)>,
    datagrams: usize,
    b_qpn: u32,
    b_ip: std::net::IpAddr,
}

/// b (`progress`) on a fresh address pair, connected to a [`HandPeer`]
/// whose QP is `peer_qpn`: the peer's first PSN `peer_psn`, b's `b_psn`;
/// `recvs` receives of 64 bytes posted.
fn hand_peer(
    progress: Progress,
    (peer_qpn, peer_psn, b_psn): (u32, u32, u32),
    recvs: u64,
) -> (HandPeer, Side) {
    let (peer_ip, b_ip) = ndverbs_testkit::addr::pair_v4();
    let mut sock = RoceSocket::bind(peer_ip).unwrap();
    let gro = sock.enable_gro();
    let b = side(b_ip, progress, 4096);
    let to_peer = RcConnection {
        rq_psn: peer_psn,
        sq_psn: b_psn,
        ..RcConnection::new(peer_qpn).to_peer(peer_ip)
    };
    b.modify(to_peer.steps());
    for i in 0..recvs {
        b.post_recv(i, 64 * i as usize, 64);
    }
    let peer = HandPeer {
        icrc: IcrcCache::new(sock.addr()),
        sock,
        gro: gro && b.nic.gso(),
        buf: vec![0u8; ndverbs_engine::link::MAX_DATAGRAM],
        pending: Default::default(),
        datagrams: 0,
        b_qpn: b.qp.qpn(),
        b_ip: b.nic.local(),
    };
    (peer, b)
}

impl HandPeer {
    fn send(&self, p: Packet) {
        let mut buf = [0u8; 64];
        let n = p.write(&mut buf).unwrap();
        send_signed(&self.sock, &mut buf[..n], self.b_ip);
    }

    /// A SEND ONLY of 8 bytes with PSN `psn`, asking for an ACK.
    fn send_request(&self, psn: u32) {
        let mut bth = Bth::new(Opcode::RC_SEND_ONLY, self.b_qpn, psn);
        bth.ack_req = true;
        let mut p = Packet::new(bth);
        p.payload = b"pingping";
        self.send(p);
    }

    /// The ACK of b's packets up to `psn`.
    fn ack(&self, psn: u32) {
        let mut p = Packet::new(Bth::new(Opcode::RC_ACK, self.b_qpn, psn));
        p.ext.aeth = Some(Aeth::new(Syndrome::ACK, 1));
        self.send(p);
    }

    /// b's next packet (opcode, PSN, datagram number), if one comes within
    /// `within`.
    fn next(&mut self, within: Duration) -> Option<(Opcode, u32, usize)> {
        let t0 = std::time::Instant::now();
        while self.pending.is_empty() && t0.elapsed() < within {
            match self.sock.recv_datagram(&mut self.buf).unwrap() {
                Some(d) => {
                    self.datagrams += 1;
                    for seg in self.buf[..d.len].chunks(d.seg) {
                        let r = self.icrc.verify(seg, d.src, d.dst);
                        let r = r.expect("b's packets verify");
                        let p = Packet::parse(&seg[..r.len]).unwrap();
                        self.pending
                            .push_back((p.bth.opcode, p.bth.psn, self.datagrams));
                    }
                }
                None => std::thread::sleep(Duration::from_micros(50)),
            }
        }
        self.pending.pop_front()
    }

    /// [`HandPeer::next`] within 200 ms, without the datagram number.
    fn next_packet(&mut self) -> Option<(Opcode, u32)> {
        self.next(Duration::from_millis(200)).map(|p| (p.0, p.1))
    }

    /// b's answer (`answer_psn`) comes first, then its ACK of
    /// `acked_psn`, riding in the answer's datagram (one datagram for a GRO
    /// receiver).
    fn expect_answer_with_ack(&mut self, answer_psn: u32, acked_psn: u32) {
        let within = Duration::from_millis(200);
        let (op, psn, first) = self.next(within).unwrap();
        assert_eq!((op, psn), (Opcode::RC_SEND_ONLY, answer_psn));
        let (op, psn, second) = self.next(within).unwrap();
        assert_eq!((op, psn), (Opcode::RC_ACK, acked_psn));
        if self.gro {
            assert_eq!(first, second, "the ACK rides in the answer's datagram");
        }
    }
}

/// Manual progress answers before it acknowledges: the ACK of a received
/// SEND is postponed while its completion waits for the application; a
/// reply posted at once leaves first, the ACK riding behind it in the same
/// GSO send (one datagram for a GRO receiver). Without a reply the next
/// progress call sends the ACK, and destroying the QP first sends it too. A
/// hand-driven peer socket sees the exact order.
#[test]
fn manual_progress_sends_the_reply_before_the_ack() {
    let (peer_psn, b_psn) = (0x100, 0x900);
    let (mut peer, b) = hand_peer(Progress::Manual, (0x51, peer_psn, b_psn), 2);

    // With a reply: the reply first, then the ACK of the request.
    peer.send_request(peer_psn);
    let wc = wait_n(&b, 1);
    assert_eq!((wc[0].opcode, wc[0].byte_len), (WcOpcode::Recv, 8));
    b.post_send(SendWr::new(7, SendOp::Send, [b.sge(0, 8)]));
    peer.expect_answer_with_ack(b_psn, peer_psn);
    // The peer acknowledges the reply (or b would send it again).
    peer.ack(b_psn);
    let wc = wait_n(&b, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));

    // Without one: the ACK leaves with the next progress call.
    peer.send_request(peer_psn + 1);
    let wc = wait_n(&b, 1);
    assert_eq!(wc[0].opcode, WcOpcode::Recv);
    b.nic.progress();
    assert_eq!(peer.next_packet(), Some((Opcode::RC_ACK, peer_psn + 1)));
    assert_eq!(peer.next_packet(), None);

    // Nor is it lost when the QP goes away first (an application that took
    // its last message and tears down: the peer's send must complete).
    b.post_recv(2, 128, 64);
    peer.send_request(peer_psn + 2);
    let wc = wait_n(&b, 1);
    assert_eq!(wc[0].opcode, WcOpcode::Recv);
    b.nic.destroy_qp(b.qp.qpn()).unwrap();
    assert_eq!(peer.next_packet(), Some((Opcode::RC_ACK, peer_psn + 2)));
}

/// A QP moved straight to RESET after taking a message still acknowledges
/// it first (the ACK waiting for an answer to ride with leaves alone), and
/// the reset leaves nothing in the CQ: no flush of the receive still posted.
/// Our `ibv_destroy_qp` resets a QP before destroying it, so this is what a
/// program that takes its last message and tears down shows its peer.
#[test]
fn a_reset_after_taking_a_message_still_acknowledges_it() {
    let (peer_psn, b_psn) = (0x180, 0x980);
    let (mut peer, b) = hand_peer(Progress::Manual, (0x54, peer_psn, b_psn), 2);
    peer.send_request(peer_psn);
    let wc = wait_n(&b, 1);
    assert_eq!((wc[0].opcode, wc[0].byte_len), (WcOpcode::Recv, 8));
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    b.modify([(reset, AttrMask::STATE)]);
    assert_eq!(peer.next_packet(), Some((Opcode::RC_ACK, peer_psn)));
    assert_eq!(peer.next_packet(), None);
    b.nic.progress();
    assert!(
        b.cq.poll_one().is_none(),
        "the flush of the second receive is purged"
    );
}

/// With an engine thread, an application thread that polls its CQ runs the
/// engine's steps itself as manual progress does: the ACK of a SEND it
/// takes waits for its answer and rides behind it; when it takes a SEND and
/// then stops polling without answering, the engine thread still sends the
/// ACK (the peer's send must complete).
#[test]
fn a_polling_thread_answers_before_the_ack_and_the_engine_thread_sends_a_left_ack() {
    let (peer_psn, b_psn) = (0x200, 0xa00);
    let (mut peer, b) = hand_peer(Progress::Thread, (0x52, peer_psn, b_psn), 2);
    // Polls as a busy application does: the CQ, then the engine.
    let poll_until_recv = || {
        let t0 = std::time::Instant::now();
        loop {
            if let Some(wc) = b.cq.poll_one() {
                assert_eq!(wc.status, WcStatus::Success);
                if wc.opcode == WcOpcode::Recv {
                    return;
                }
                continue; // the previous answer's send completion
            }
            assert!(t0.elapsed() < WC_LIMIT, "no receive completion");
            b.nic.poll_step();
        }
    };
    let within = Duration::from_secs(2);

    // Answered at once: the answer first, the ACK riding with it — when
    // the polling thread took the SEND. The engine thread may take one that
    // arrives while it is awake (it then acknowledges at once): it wakes
    // when the poller has not polled for the hand-off's 200 µs, which a
    // loaded machine's scheduler does now and then to the test thread. So
    // each round first polls for a while, and rounds go on, up to
    // `MAX_ROUNDS`, until one shows a ride.
    const MAX_ROUNDS: u32 = 100;
    let mut rides = 0;
    let mut rounds = 0;
    while rides == 0 && rounds < MAX_ROUNDS {
        let round = rounds;
        rounds += 1;
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_millis(20) {
            b.nic.poll_step();
        }
        peer.send_request(peer_psn + round);
        poll_until_recv();
        b.post_recv(2 + u64::from(round), 128, 64);
        b.post_send(SendWr::new(7, SendOp::Send, [b.sge(0, 8)]));
        let from_b: Vec<_> = (0..2).filter_map(|_| peer.next(within)).collect();
        assert_eq!(from_b.len(), 2, "got {from_b:?}");
        let find = |op| *from_b.iter().find(|p| p.0 == op).unwrap();
        let (answer, ack) = (find(Opcode::RC_SEND_ONLY), find(Opcode::RC_ACK));
        assert_eq!((answer.1, ack.1), (b_psn + round, peer_psn + round));
        // The peer acknowledges the answer.
        peer.ack(b_psn + round);
        let one_datagram = !peer.gro || answer.2 == ack.2;
        if from_b[0] == answer && one_datagram {
            rides += 1;
        }
    }
    assert!(
        rides > 0,
        "the polling thread never let the ACK ride behind the answer"
    );

    // Taken, never answered, and the poller gone: the ACK still comes.
    peer.send_request(peer_psn + rounds);
    poll_until_recv();
    assert_eq!(
        peer.next(within).map(|p| (p.0, p.1)),
        Some((Opcode::RC_ACK, peer_psn + rounds)),
        "the engine thread sends the ACK the poller left"
    );
}

/// A postponed ACK waits again only for a step that completes one of the
/// QP's own requests (the application awaited that before answering): with
/// the ACK of b's own SEND arriving in between, b's answer still carries
/// the ACK; with another SEND arriving instead, the ACK leaves at once.
#[test]
fn a_postponed_ack_waits_again_for_a_send_completion_but_not_for_more_receives() {
    let (peer_psn, b_psn) = (0x300, 0xb00);
    let (mut peer, b) = hand_peer(Progress::Manual, (0x53, peer_psn, b_psn), 4);
    // Drives b until `want` completions; each step separately (one packet
    // each: the peer's socket sends them one by one).
    let step_until = |want: usize| {
        let mut got = Vec::new();
        let t0 = std::time::Instant::now();
        while got.len() < want {
            assert!(t0.elapsed() < WC_LIMIT, "completions: {got:?}");
            b.nic.progress();
            while let Some(wc) = b.cq.poll_one() {
                got.push(wc);
            }
        }
        got
    };

    // b's own SEND, which the peer will acknowledge.
    b.post_send(SendWr::new(1, SendOp::Send, [b.sge(0, 8)]));
    assert_eq!(peer.next_packet(), Some((Opcode::RC_SEND_ONLY, b_psn)));
    // The peer's SEND, then (a step later) the ACK of b's: the postponed ACK
    // waits through the step that completed b's SEND, and rides with b's
    // answer.
    peer.send_request(peer_psn);
    assert_eq!(step_until(1)[0].opcode, WcOpcode::Recv);
    peer.ack(b_psn);
    assert_eq!(step_until(1)[0].opcode, WcOpcode::Send);
    assert_eq!(peer.next_packet(), None, "the ACK waits for the answer");
    b.post_send(SendWr::new(2, SendOp::Send, [b.sge(0, 8)]));
    assert_eq!(peer.next_packet(), Some((Opcode::RC_SEND_ONLY, b_psn + 1)));
    assert_eq!(peer.next_packet(), Some((Opcode::RC_ACK, peer_psn)));
    peer.ack(b_psn + 1);
    assert_eq!(step_until(1)[0].opcode, WcOpcode::Send);

    // Two SENDs from the peer in two steps: the second step sends the ACK
    // (of both) without waiting for an answer.
    peer.send_request(peer_psn + 1);
    assert_eq!(step_until(1)[0].opcode, WcOpcode::Recv);
    peer.send_request(peer_psn + 2);
    assert_eq!(step_until(1)[0].opcode, WcOpcode::Recv);
    assert_eq!(peer.next_packet(), Some((Opcode::RC_ACK, peer_psn + 2)));
}

/// A postponed ACK also waits through empty CQ polls, as libfabric's rxm
/// makes one after each completion to find its queue drained: the answer
/// posted after them still carries the ACK. Polls that find nothing for
/// [`MAX_EMPTY_POLLS`] steps in a row send it alone, and so does an
/// explicit progress call.
#[test]
fn a_postponed_ack_waits_through_empty_polls_but_not_forever() {
    /// `AckPlan::MAX_POSTPONED`: steps in a row an ACK waits.
    const MAX_EMPTY_POLLS: u32 = 4;
    let (peer_psn, b_psn) = (0x400, 0xc00);
    let (mut peer, b) = hand_peer(Progress::Manual, (0x55, peer_psn, b_psn), 4);
    let poll_once = || {
        assert!(b.cq.poll_one().is_none());
        assert!(b.nic.poll_step());
    };

    // Two empty polls between the completion and the answer: one datagram.
    peer.send_request(peer_psn);
    assert_eq!(wait_n(&b, 1)[0].opcode, WcOpcode::Recv);
    poll_once();
    poll_once();
    assert_eq!(peer.next_packet(), None, "the ACK waits for the answer");
    b.post_send(SendWr::new(1, SendOp::Send, [b.sge(0, 8)]));
    peer.expect_answer_with_ack(b_psn, peer_psn);
    peer.ack(b_psn);
    assert_eq!(wait_n(&b, 1)[0].opcode, WcOpcode::Send);

    // No answer: the ACK leaves alone after the last step it may wait.
    peer.send_request(peer_psn + 1);
    assert_eq!(wait_n(&b, 1)[0].opcode, WcOpcode::Recv);
    for _ in 1..MAX_EMPTY_POLLS {
        poll_once();
    }
    assert_eq!(peer.next_packet(), None);
    poll_once();
    assert_eq!(peer.next_packet(), Some((Opcode::RC_ACK, peer_psn + 1)));

    // An explicit progress call sends it at once.
    peer.send_request(peer_psn + 2);
    assert_eq!(wait_n(&b, 1)[0].opcode, WcOpcode::Recv);
    b.nic.progress();
    assert_eq!(peer.next_packet(), Some((Opcode::RC_ACK, peer_psn + 2)));
}

/// A counter snapshot reuses the last sum while no QP's counters moved
/// (`nic/counter_sum.rs`), and sums again after traffic and after what
/// timers alone do (retransmissions to a peer that went away).
#[test]
fn counter_snapshots_are_summed_again_only_after_counters_move() {
    let (a, b) = pair(Progress::Thread, PathMtu::Mtu1024, 1 << 16);
    // Idle QPs: the sum takes several chunks of four (each chunk one call
    // of the callback), so a sum shows as calls and a reuse as none.
    let idle: Vec<Side> = (0..20)
        .map(|_| Side::in_pd(a.nic.clone(), a.pd, Shape::deep(64)))
        .collect();
    let summed = |s: &Side| {
        let mut calls = 0;
        let stats = s.nic.stats_in_chunks(4, true, &mut || calls += 1);
        (stats, calls)
    };
    let traffic = |n: u64| {
        for i in 0..n {
            b.post_recv(i, 0, 4096);
            a.post_send(SendWr::new(i, SendOp::Send, vec![a.sge(0, 3000)]));
        }
        wait_n(&b, n as usize);
        wait_n(&a, n as usize);
    };
    traffic(3);
    // Once the engine is quiet (a late ACK or timer may still move things),
    // a snapshot right after another reuses its sum.
    let t0 = Instant::now();
    let last = loop {
        let (first, _) = summed(&a);
        let (second, calls) = summed(&a);
        if calls == 0 {
            assert_eq!(first.pairs(), second.pairs());
            break second;
        }
        assert!(t0.elapsed() < WC_LIMIT, "every snapshot summed again");
        std::thread::sleep(Duration::from_millis(5));
    };
    // Traffic moves the counters: summed again, and the sum shows it.
    traffic(1);
    let (after, calls) = summed(&a);
    assert!(calls > 0, "a snapshot after traffic reused the old sum");
    assert!(after.get("sent_pkts") > last.get("sent_pkts"));
    // Retransmissions on the ACK timer, with nothing posted or received.
    b.nic.destroy_qp(b.qp.qpn()).unwrap();
    a.post_send(SendWr::new(9, SendOp::Send, vec![a.sge(0, 64)]));
    let t0 = Instant::now();
    while summed(&a).0.get("completer_retry_err") == after.get("completer_retry_err") {
        assert!(
            t0.elapsed() < WC_LIMIT,
            "no retransmission seen by a snapshot"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(idle);
}

/// A counter snapshot sums the QPs a few at a time, letting the engine go
/// in between (`nic/counter_sum.rs`): it adds up to what one pass under the
/// lock gives, and a QP destroyed in the middle is counted once, not twice
/// (in its chunk and again among the destroyed).
#[test]
fn counter_snapshots_in_chunks_count_every_qp_once() {
    let (a, b) = pair(Progress::Thread, PathMtu::Mtu1024, 1 << 16);
    for i in 0..3 {
        b.post_recv(i, 0, 4096);
        a.post_send(SendWr::new(i, SendOp::Send, vec![a.sge(0, 3000)]));
    }
    wait_n(&b, 3);
    wait_n(&a, 3);
    // Twenty more QPs (idle, in RESET) on each NIC: several chunks of four.
    let idle: Vec<u32> = (0..20)
        .map(|_| Side::in_pd(a.nic.clone(), a.pd, Shape::deep(64)).qp.qpn())
        .collect();
    for s in [&a, &b] {
        let whole = s.nic.stats_in_chunks(usize::MAX, false, &mut || {});
        let chunked = s.nic.stats_in_chunks(4, false, &mut || {});
        assert_eq!(whole.pairs(), chunked.pairs());
    }
    let sent = a.nic.stats().get("sent_pkts");
    assert!(sent >= 9, "sent_pkts {sent}");
    // The QP that sent everything goes once the snapshot has listed the
    // QPs, before it reaches it.
    let mut calls = 0;
    let qpn = a.qp.qpn();
    let during = a.nic.stats_in_chunks(4, false, &mut || {
        calls += 1;
        if calls == 1 {
            a.nic.destroy_qp(qpn).unwrap();
        }
    });
    assert_eq!(calls, 1, "the sum starts again in one hold");
    assert_eq!(during.get("sent_pkts"), sent);
    assert_eq!(
        during.pairs(),
        a.nic.stats_in_chunks(usize::MAX, false, &mut || {}).pairs()
    );
    for q in idle {
        a.nic.destroy_qp(q).unwrap();
    }
}
