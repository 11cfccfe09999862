//! A ping-pong of small SENDs between two manual-progress NICs on an
//! in-memory link, in lockstep on one thread: A sends, B's progress takes
//! the message and B answers (its ACK riding with the answer), A's progress
//! takes the answer and its send's completion. No sockets, no clock, no
//! spinning: every round runs the same code, so the instructions a round
//! costs are a deterministic measure of the engine's per-message path
//! (`scripts/instructions.sh` counts them with callgrind, `ROUNDS=0`
//! against `ROUNDS=10000`). Further tests do the same for 64-KiB READs and
//! WRITEs, and for CQ polls that find nothing.

mod common;

use common::*;
use ndverbs_engine::config::{NicConfig, Progress};
use ndverbs_engine::link::memory::MemoryLink;
use ndverbs_engine::nic::Nic;
use ndverbs_proto::rc::{PathMtu, RcConnection, SendOp, SendWr, WcOpcode, WcStatus};
use std::net::IpAddr;

/// Runs progress on `s` until its CQ holds `want` completions (receives
/// counted apart); returns the receives.
fn take(s: &Side, want: usize) -> usize {
    let (mut got, mut recvs) = (0, 0);
    for _ in 0..1000 {
        s.nic.progress();
        while let Some(w) = s.cq.poll_one() {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            got += 1;
            recvs += usize::from(w.opcode == WcOpcode::Recv);
        }
        if got >= want {
            return recvs;
        }
    }
    panic!("{got} of {want} completions after 1000 progress calls");
}

/// Posts `wr` on `a` and runs progress on both sides, in `order`, until
/// `a`'s CQ holds its successful completion.
fn complete(a: &Side, order: [&Side; 2], wr: SendWr) {
    let id = wr.wr_id;
    a.post_send(wr);
    for _ in 0..1000 {
        for s in order {
            s.nic.progress();
        }
        if let Some(w) = a.cq.poll_one() {
            assert_eq!((w.status, w.wr_id), (WcStatus::Success, id), "{w:?}");
            return;
        }
    }
    panic!("WR {id} not complete after 1000 progress calls");
}

/// `ROUNDS` from the environment, else `default`.
fn rounds(default: u64) -> u64 {
    std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Two manual-progress NICs on the memory link (`10.77.<net>.1` and `.2`),
/// a QP pair between them at path MTU 1024, `region` bytes each. The ACK
/// timeout is long (20, about 4 s): under callgrind a step can take longer
/// than the usual tests' 4 ms, and a retransmission would be counted as
/// the path's cost.
fn lockstep_pair(net: u8, region: usize) -> (Side, Side) {
    let manual = NicConfig {
        progress: Progress::Manual,
        ..NicConfig::default()
    };
    let (ia, ib) = (
        IpAddr::from([10, 77, net, 1]),
        IpAddr::from([10, 77, net, 2]),
    );
    let (la, lb) = MemoryLink::pair(ia, ib).unwrap();
    let a = Nic::open_on(la, manual.clone()).unwrap();
    let b = Nic::open_on(lb, manual).unwrap();
    pair_on_with(a, b, region, |x, y| RcConnection {
        timeout: 20,
        ..connection(x, y, PathMtu::Mtu1024)
    })
}

/// A [`lockstep_pair`] of 4 KiB regions with a 64-byte receive posted on
/// each side (B's at 0, A's at 64).
fn receiving_pair(net: u8) -> (Side, Side) {
    let (a, b) = lockstep_pair(net, 4096);
    b.post_recv(0, 0, 64);
    a.post_recv(0, 64, 64);
    (a, b)
}

#[test]
fn lockstep_pingpong_of_small_sends() {
    let rounds = rounds(200);
    let (a, b) = receiving_pair(99);
    for i in 0..rounds {
        a.mr.write(0, &i.to_le_bytes()).unwrap();
        a.post_send(SendWr::new(i, SendOp::Send, vec![a.sge(0, 8)]));
        // B: the message (its ACK waits to ride with the answer) and, from
        // the second round, its previous send's completion (A's ACK rode
        // with it).
        assert_eq!(take(&b, 1 + usize::from(i > 0)), 1);
        assert_eq!(b.bytes(0, 8), i.to_le_bytes());
        b.post_recv(0, 0, 64);
        b.mr.write(128, &(!i).to_le_bytes()).unwrap();
        b.post_send(SendWr::new(i, SendOp::Send, vec![b.sge(128, 8)]));
        // A: the answer and its own send's completion, from one datagram.
        assert_eq!(take(&a, 2), 1);
        assert_eq!(a.bytes(64, 8), (!i).to_le_bytes());
        a.post_recv(0, 64, 64);
    }
}

/// READs of 64 KiB (64 responses at path MTU 1024) in lockstep between two
/// manual-progress NICs on the memory link: A asks, B's progress answers
/// with every response, A's progress takes them and completes the READ.
/// `scripts/instructions.sh read` divides by the responses: the
/// per-packet cost of both sides of a READ, as rxm's rendezvous moves large
/// MPI messages.
#[test]
fn lockstep_reads_of_64_kib() {
    const LEN: usize = 64 * 1024;
    let rounds = rounds(20);
    let (a, b) = lockstep_pair(98, 2 * LEN);
    for i in 0..rounds {
        b.mr.write(LEN, &i.to_le_bytes()).unwrap();
        let read = SendOp::Read(b.remote(LEN));
        complete(&a, [&b, &a], SendWr::new(i, read, vec![a.sge(0, LEN)]));
        assert_eq!(a.bytes(0, 8), i.to_le_bytes(), "round {i}");
    }
}

/// WRITEs of 64 KiB (64 packets at path MTU 1024) in lockstep: A writes
/// into B's region, B's progress takes the packets (one ACK for the batch),
/// A's progress takes the ACK and completes the WRITE.
/// `scripts/instructions.sh write` divides by the packets: the per-packet
/// cost of both sides of `ndv perf write_bw`.
#[test]
fn lockstep_writes_of_64_kib() {
    const LEN: usize = 64 * 1024;
    let rounds = rounds(20);
    let (a, b) = lockstep_pair(96, 2 * LEN);
    for i in 0..rounds {
        a.mr.write(0, &i.to_le_bytes()).unwrap();
        let write = SendOp::Write(b.remote(LEN));
        complete(&a, [&a, &b], SendWr::new(i, write, vec![a.sge(0, LEN)]));
        assert_eq!(b.bytes(LEN, 8), i.to_le_bytes(), "round {i}");
    }
    // What is counted is the path, not its recovery.
    assert_eq!(a.nic.stats().get("req_psns_resent"), 0);
}

/// CQ polls that find nothing, each running an engine step that finds
/// nothing (as a busy-polling application spins between messages), on a
/// connected QP pair after one message. `scripts/instructions.sh empty`
/// divides by the polls: what the spin adds to each `recvmsg` — half of it
/// is on average between a message's arrival and its being seen.
#[test]
fn lockstep_empty_polls() {
    let rounds = rounds(200);
    let (a, b) = receiving_pair(97);
    a.mr.write(0, &1u64.to_le_bytes()).unwrap();
    a.post_send(SendWr::new(1, SendOp::Send, vec![a.sge(0, 8)]));
    assert_eq!(take(&b, 1), 1);
    for _ in 0..10 {
        a.nic.progress();
        b.nic.progress();
        while a.cq.poll_one().is_some() || b.cq.poll_one().is_some() {}
    }
    for _ in 0..rounds {
        a.nic.poll_step();
        assert!(a.cq.poll_one().is_none());
    }
}
