//! Two NICs joined by an in-memory link pair: the whole engine without a
//! socket. RC transfers (whose GSO runs arrive as coalesced datagrams, as
//! GRO delivers them), a manual-progress ping-pong that sleeps on the link's
//! readiness descriptor, a CM connect and disconnect with real MADs on QP1,
//! and the fault layer around a link that is not a socket.

mod common;

use common::*;
use ndverbs_engine::config::{CmTimers, NicConfig, Progress};
use ndverbs_engine::ep::{AcceptArgs, ConnectArgs, EpError};
use ndverbs_engine::link::faults::FaultConfig;
use ndverbs_engine::link::memory::MemoryLink;
use ndverbs_engine::nic::{sge, Nic};
use ndverbs_proto::rc::{
    PathMtu, QpCaps, QpState, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus,
};
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);
const KIB: usize = 1024;

/// Two NICs on a memory pair at 10.77.`net`.1 and .2.
fn nics(net: u8, config: NicConfig) -> (Nic, Nic) {
    let (ia, ib) = (
        IpAddr::from([10, 77, net, 1]),
        IpAddr::from([10, 77, net, 2]),
    );
    let (la, lb) = MemoryLink::pair(ia, ib).unwrap();
    let a = Nic::open_on(la, config.clone()).unwrap();
    let b = Nic::open_on(lb, config).unwrap();
    assert_eq!((a.local(), b.local()), (ia, ib));
    (a, b)
}

fn threaded() -> NicConfig {
    NicConfig {
        progress: Progress::Thread,
        ..NicConfig::default()
    }
}

fn write(a: &Side, b: &Side, id: u64, off: usize, len: usize) {
    let remote = RemoteAddr {
        va: b.mr.addr() + off as u64,
        rkey: b.mr.rkey(),
    };
    let wr = SendWr::new(id, SendOp::Write(remote), vec![sge(&a.mr, off, len as u32)]);
    a.nic.post_send(&a.qp, wr).unwrap();
}

#[test]
fn rc_write_read_send_without_sockets() {
    let (a, b) = nics(1, threaded());
    let (a, b) = pair_on(a, b, PathMtu::Mtu4096, 4 * 1024 * KIB);
    // WRITE 1 MiB: 256 packets, leaving in GSO runs.
    a.mr.write(0, &pattern(1, 1024 * KIB)).unwrap();
    write(&a, &b, 1, 0, 1024 * KIB);
    let w = wait_n(&a, 1, T);
    assert_eq!((w[0].wr_id, w[0].status), (1, WcStatus::Success));
    assert_eq!(bytes(&b, 0, 1024 * KIB), pattern(1, 1024 * KIB));
    // READ 256 KiB back into A's second MiB.
    b.mr.write(1024 * KIB, &pattern(2, 256 * KIB)).unwrap();
    let remote = RemoteAddr {
        va: b.mr.addr() + (1024 * KIB) as u64,
        rkey: b.mr.rkey(),
    };
    let local = sge(&a.mr, 1024 * KIB, (256 * KIB) as u32);
    a.nic
        .post_send(&a.qp, SendWr::new(2, SendOp::Read(remote), vec![local]))
        .unwrap();
    let w = wait_n(&a, 1, T);
    assert_eq!((w[0].wr_id, w[0].status), (2, WcStatus::Success));
    assert_eq!(bytes(&a, 1024 * KIB, 256 * KIB), pattern(2, 256 * KIB));
    // SEND 64 KiB into a posted receive.
    b.nic
        .post_recv(
            &b.qp,
            RecvWr::new(9, vec![sge(&b.mr, 2048 * KIB, (64 * KIB) as u32)]),
        )
        .unwrap();
    a.mr.write(2048 * KIB, &pattern(3, 64 * KIB)).unwrap();
    let wr = SendWr::new(
        3,
        SendOp::Send,
        vec![sge(&a.mr, 2048 * KIB, (64 * KIB) as u32)],
    );
    a.nic.post_send(&a.qp, wr).unwrap();
    let (wa, wb) = (wait_n(&a, 1, T), wait_n(&b, 1, T));
    assert_eq!(
        (wa[0].status, wb[0].status),
        (WcStatus::Success, WcStatus::Success)
    );
    assert_eq!(
        (wb[0].opcode, wb[0].byte_len),
        (WcOpcode::Recv, (64 * KIB) as u32)
    );
    assert_eq!(bytes(&b, 2048 * KIB, 64 * KIB), pattern(3, 64 * KIB));
    let c = a.nic.counters();
    assert!(c.gso_runs.load(Relaxed) > 0 && c.zero_copy_packets.load(Relaxed) > 0);
    assert_eq!(b.nic.counters().drop_bad_icrc.load(Relaxed), 0);
}

fn bytes(s: &Side, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    s.mr.read(off, &mut v).unwrap();
    v
}

/// Manual progress, each side sleeping in `progress_wait` on the link's
/// descriptor between messages: a ping-pong of small SENDs.
#[test]
fn manual_progress_pingpong_without_sockets() {
    let manual = NicConfig {
        progress: Progress::Manual,
        ..NicConfig::default()
    };
    let (a, b) = nics(2, manual);
    let (a, b) = pair_on(a, b, PathMtu::Mtu1024, 64 * KIB);
    let rounds = 200;
    let t0 = Instant::now();
    let a_done = AtomicBool::new(false);
    std::thread::scope(|s| {
        // B echoes every message it receives.
        s.spawn(|| {
            b.nic
                .post_recv(&b.qp, RecvWr::new(0, vec![sge(&b.mr, 0, 64)]))
                .unwrap();
            let mut echoed = 0;
            while echoed < rounds {
                assert!(t0.elapsed() < T, "B stalled at {echoed}");
                b.nic.progress_wait(Duration::from_millis(10)).unwrap();
                while let Some(w) = b.cq.poll_one() {
                    assert_eq!(w.status, WcStatus::Success, "{w:?}");
                    if w.opcode == WcOpcode::Recv {
                        b.nic
                            .post_recv(&b.qp, RecvWr::new(0, vec![sge(&b.mr, 0, 64)]))
                            .unwrap();
                        let wr = SendWr::new(1, SendOp::Send, vec![sge(&b.mr, 0, 8)]);
                        b.nic.post_send(&b.qp, wr).unwrap();
                        echoed += 1;
                    }
                }
            }
            // Until A has its last completions (our ACKs leave with steps).
            while t0.elapsed() < T && !a_done.load(Relaxed) {
                b.nic.progress_wait(Duration::from_millis(1)).unwrap();
            }
        });
        for i in 0..rounds {
            a.nic
                .post_recv(&a.qp, RecvWr::new(i, vec![sge(&a.mr, 64, 64)]))
                .unwrap();
            a.mr.write(0, &i.to_le_bytes()).unwrap();
            let wr = SendWr::new(i, SendOp::Send, vec![sge(&a.mr, 0, 8)]);
            a.nic.post_send(&a.qp, wr).unwrap();
            let (mut sent, mut echo) = (false, false);
            while !(sent && echo) {
                assert!(t0.elapsed() < T, "A stalled at {i}");
                a.nic.progress_wait(Duration::from_millis(10)).unwrap();
                while let Some(w) = a.cq.poll_one() {
                    assert_eq!(w.status, WcStatus::Success, "{w:?}");
                    match w.opcode {
                        WcOpcode::Recv => echo = true,
                        _ => sent = true,
                    }
                }
            }
            assert_eq!(bytes(&a, 64, 8), i.to_le_bytes());
        }
        a_done.store(true, Relaxed);
    });
}

/// Short CM timers, so that a lost MAD is retried within the test.
const FAST: CmTimers = CmTimers {
    packet_life_time: 12,
    cm_response_timeout: 12,
    max_cm_retries: 3,
};

fn cm_sides(net: u8) -> (CmSide, CmSide) {
    let (a, b) = nics(
        net,
        NicConfig {
            cm_timers: FAST,
            ..threaded()
        },
    );
    let caps = QpCaps {
        max_send_wr: 64,
        max_send_sge: 2,
        max_inline_data: 64,
        sq_sig_all: false,
    };
    (
        cm_side(a, caps, 256, 64, 1 << 16),
        cm_side(b, caps, 256, 64, 1 << 16),
    )
}

/// Connects `a` to `b` through the CM and sends one message; returns the
/// endpoints.
fn cm_connect(a: &CmSide, b: &CmSide, port: u16) -> (u32, u32) {
    let l = b.ad.create_ep().unwrap();
    b.ad.ep_listen(l, port, 4).unwrap();
    let eb = b.ad.create_ep().unwrap();
    let req = b.ad.ep_get_request(l, eb).unwrap();
    let ea = a.ad.create_ep().unwrap();
    let args = ConnectArgs {
        remote: b.ad.local(),
        remote_port: port,
        local_port: 40000,
        responder_resources: 4,
        initiator_depth: 4,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: PathMtu::Mtu1024,
        private_data: b"from a".to_vec(),
    };
    let conn = a.ad.ep_connect(ea, a.qp.qpn(), args).unwrap();
    let info = req.wait_timeout(T).expect("request").unwrap();
    assert_eq!(&info.private_data[..6], b"from a");
    let accept = AcceptArgs {
        responder_resources: 4,
        initiator_depth: 4,
        rnr_retry_count: 7,
        private_data: b"from b".to_vec(),
    };
    let acc = b.ad.ep_accept(eb, b.qp.qpn(), accept).unwrap();
    let ci = conn.wait_timeout(T).expect("connect").unwrap();
    assert_eq!(&ci.private_data[..6], b"from b");
    a.ad.ep_complete_connect(ea, a.qp.qpn())
        .unwrap()
        .wait_timeout(T)
        .expect("complete")
        .unwrap();
    acc.wait_timeout(T).expect("accept").unwrap();
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Rts));
    b.ad.post_recv(&b.qp, RecvWr::new(7, vec![sge(&b.mr, 0, 64)]))
        .unwrap();
    a.mr.write(0, b"ping").unwrap();
    a.ad.post_send(&a.qp, SendWr::new(1, SendOp::Send, vec![sge(&a.mr, 0, 4)]))
        .unwrap();
    let (wa, wb) = (wait_cq(a, 1), wait_cq(b, 1));
    assert_eq!(
        (wa[0].status, wb[0].status),
        (WcStatus::Success, WcStatus::Success)
    );
    (ea, eb)
}

fn wait_cq(s: &CmSide, n: usize) -> Vec<ndverbs_proto::rc::WorkCompletion> {
    let t0 = Instant::now();
    let mut v = Vec::new();
    while v.len() < n {
        match s.cq.poll_one() {
            Some(w) => v.push(w),
            None => {
                assert!(t0.elapsed() < T, "timed out with {v:?}");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    v
}

#[test]
fn cm_connect_and_disconnect_without_sockets() {
    let (a, b) = cm_sides(3);
    let (ea, eb) = cm_connect(&a, &b, 7001);
    // B waits for the disconnect with a receive outstanding; A's DREQ
    // notifies it, B's Disconnect answers with the DREP that completes A's.
    let notify = b.ad.ep_notify_disconnect(eb).unwrap();
    b.ad.post_recv(&b.qp, RecvWr::new(8, vec![sge(&b.mr, 0, 64)]))
        .unwrap();
    let da = a.ad.ep_disconnect(ea, a.qp.qpn()).unwrap();
    notify.wait_timeout(T).expect("B notified").unwrap();
    b.ad.ep_disconnect(eb, b.qp.qpn())
        .unwrap()
        .wait_timeout(T)
        .expect("B's disconnect")
        .unwrap();
    da.wait_timeout(T).expect("A's disconnect").unwrap();
    let w = wait_cq(&b, 1);
    assert_eq!((w[0].wr_id, w[0].status), (8, WcStatus::WrFlushErr));
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Err, QpState::Err));
    // A second disconnect is refused: the connection is over.
    assert!(a.ad.ep_disconnect(ea, a.qp.qpn()).is_err());
    assert_eq!(a.ad.counters().drop_bad_icrc.load(Relaxed), 0);
}

/// The fault layer wraps any link: a lossy memory pair still carries a CM
/// handshake (MADs retried) and a bulk WRITE (packets retransmitted), and a
/// peer that hears nothing times a disconnect out.
#[test]
fn faults_wrap_a_memory_link_too() {
    let (a, b) = cm_sides(4);
    let lossy = FaultConfig::parse("loss=0.05,dup=0.02,reorder=0.02,corrupt=0.01,seed=9").unwrap();
    a.ad.set_faults(Some(lossy)).unwrap();
    b.ad.set_faults(Some(FaultConfig { seed: 10, ..lossy }))
        .unwrap();
    let (ea, _eb) = cm_connect(&a, &b, 7002);
    let remote = RemoteAddr {
        va: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    a.mr.write(0, &pattern(4, 1 << 16)).unwrap();
    let wr = SendWr::new(2, SendOp::Write(remote), vec![sge(&a.mr, 0, 1 << 16)]);
    a.ad.post_send(&a.qp, wr).unwrap();
    let w = wait_cq(&a, 1);
    assert_eq!((w[0].wr_id, w[0].status), (2, WcStatus::Success));
    let mut got = vec![0; 1 << 16];
    b.mr.read(0, &mut got).unwrap();
    assert!(got == pattern(4, 1 << 16));
    let (fa, fb) = (
        a.ad.fault_counters().unwrap(),
        b.ad.fault_counters().unwrap(),
    );
    assert!(fa.packets > 0 && fb.packets > 0, "a {fa:?} b {fb:?}");
    // Everything B sends is now lost on the way to A: A's DREQ times out.
    a.ad.set_faults(Some(FaultConfig {
        loss: 1.0,
        ..FaultConfig::default()
    }))
    .unwrap();
    let r = a.ad.ep_disconnect(ea, a.qp.qpn()).unwrap().wait_timeout(T);
    assert_eq!(r.expect("bounded"), Err(EpError::Timeout));
}
