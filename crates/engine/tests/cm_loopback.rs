//! Connection management end to end on loopback: listen, connect, accept,
//! reject, and every disconnect case of the inherited rules — with real MADs on
//! QP1 between two NICs.

mod common;

use common::CmSide as Side;
use ndverbs_engine::config::{CmTimers, NicConfig, Progress};
use ndverbs_engine::cq::CompletionQueue;
use ndverbs_engine::ep::{AcceptArgs, ConnectArgs, EpError};
use ndverbs_engine::link::faults::FaultConfig;
use ndverbs_engine::nic::{sge, Nic};
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::{
    AttrMask, PathMtu, QpAttr, QpCaps, QpState, RecvWr, SendOp, SendWr, WcStatus,
};
use std::net::IpAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);
/// Short CM timers: DREQ/REQ retries every ~50 ms, 3 retries.
const FAST: CmTimers = CmTimers {
    packet_life_time: 12,
    cm_response_timeout: 12,
    max_cm_retries: 3,
};

fn side(ip: &str) -> Side {
    let ad = Nic::open_with(
        ip.parse().unwrap(),
        NicConfig {
            progress: Progress::Thread,
            cm_timers: FAST,
            ..NicConfig::from_env()
        },
    )
    .unwrap();
    let caps = QpCaps {
        max_send_wr: 64,
        max_send_sge: 2,
        max_inline_data: 64,
        sq_sig_all: false,
    };
    common::cm_side(ad, caps, 256, 64, 1 << 16)
}

fn cargs(remote: &str, port: u16, pd: &[u8]) -> ConnectArgs {
    ConnectArgs {
        remote: remote.parse::<IpAddr>().unwrap(),
        remote_port: port,
        local_port: 40000,
        responder_resources: 4,
        initiator_depth: 4,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: PathMtu::Mtu1024,
        private_data: pd.to_vec(),
    }
}

fn aargs(pd: &[u8]) -> AcceptArgs {
    AcceptArgs {
        responder_resources: 4,
        initiator_depth: 4,
        rnr_retry_count: 7,
        private_data: pd.to_vec(),
    }
}

/// Connects `a` to `b` (listening on `port`); returns (ep_a, ep_b, listener).
fn connect(a: &Side, b: &Side, port: u16, ip_b: &str) -> (u32, u32, u32) {
    let l = b.ad.create_ep().unwrap();
    b.ad.ep_listen(l, port, 4).unwrap();
    let eb = b.ad.create_ep().unwrap();
    let req = b.ad.ep_get_request(l, eb).unwrap();
    let ea = a.ad.create_ep().unwrap();
    let conn =
        a.ad.ep_connect(ea, a.qp.qpn(), cargs(ip_b, port, b"hello from a"))
            .unwrap();
    let info = req.wait_timeout(T).expect("connection request").unwrap();
    assert_eq!(&info.private_data[..12], b"hello from a");
    assert_eq!(info.peer_port, 40000);
    let acc =
        b.ad.ep_accept(eb, b.qp.qpn(), aargs(b"hello from b"))
            .unwrap();
    let ci = conn.wait_timeout(T).expect("connect").unwrap();
    assert_eq!(&ci.private_data[..12], b"hello from b");
    assert_eq!(ci.read_limits, (4, 4));
    a.ad.ep_complete_connect(ea, a.qp.qpn())
        .unwrap()
        .wait_timeout(T)
        .expect("complete")
        .unwrap();
    acc.wait_timeout(T).expect("accept").unwrap();
    (ea, eb, l)
}

fn send_one(a: &Side, b: &Side) {
    b.ad.post_recv(&b.qp, RecvWr::new(100, vec![sge(&b.mr, 0, 64)]))
        .unwrap();
    a.mr.write(0, b"ping").unwrap();
    a.ad.post_send(&a.qp, SendWr::new(1, SendOp::Send, vec![sge(&a.mr, 0, 4)]))
        .unwrap();
    let wa = wait(&a.cq, 1);
    let wb = wait(&b.cq, 1);
    assert_eq!(
        (wa[0].status, wb[0].status, wb[0].byte_len),
        (WcStatus::Success, WcStatus::Success, 4)
    );
}

fn wait(cq: &CompletionQueue, n: usize) -> Vec<ndverbs_proto::rc::WorkCompletion> {
    let t0 = std::time::Instant::now();
    let mut v = Vec::new();
    while v.len() < n {
        if let Some(w) = cq.poll_one() {
            v.push(w);
        } else {
            assert!(t0.elapsed() < T, "timed out with {v:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    v
}

fn settle() {
    std::thread::sleep(Duration::from_millis(100));
}

#[test]
fn close_handshake_then_disconnect_on_both_sides() {
    let (a, b) = (side("127.77.60.1"), side("127.77.60.2"));
    let (ea, eb, _l) = connect(&a, &b, 7101, "127.77.60.2");
    send_one(&a, &b);
    // B waits for the disconnect and has receives outstanding.
    let notify = b.ad.ep_notify_disconnect(eb).unwrap();
    for i in 0..3 {
        b.ad.post_recv(&b.qp, RecvWr::new(200 + i, vec![sge(&b.mr, 0, 64)]))
            .unwrap();
    }
    let da = a.ad.ep_disconnect(ea, a.qp.qpn()).unwrap();
    notify.wait_timeout(T).expect("NotifyDisconnect").unwrap();
    // An incoming DREQ alone never flushes the QP.
    settle();
    assert!(
        b.cq.poll_one().is_none(),
        "DREQ must not flush the passive QP"
    );
    assert_eq!(b.qp.state(), QpState::Rts);
    // B's Disconnect sends the DREP and completes; its receives flush, once.
    b.ad.ep_disconnect(eb, b.qp.qpn())
        .unwrap()
        .wait_timeout(T)
        .expect("B disconnect")
        .unwrap();
    let w = wait(&b.cq, 3);
    assert!(w.iter().all(|w| w.status == WcStatus::WrFlushErr));
    da.wait_timeout(T).expect("A disconnect").unwrap();
    settle();
    assert!(b.cq.poll_one().is_none() && a.cq.poll_one().is_none());
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Err, QpState::Err));
}

#[test]
fn crossing_dreqs() {
    let (a, b) = (side("127.77.61.1"), side("127.77.61.2"));
    let (ea, eb, _l) = connect(&a, &b, 7102, "127.77.61.2");
    for s in [&a, &b] {
        s.ad.post_recv(&s.qp, RecvWr::new(7, vec![sge(&s.mr, 0, 64)]))
            .unwrap();
    }
    let da = a.ad.ep_disconnect(ea, a.qp.qpn()).unwrap();
    let db = b.ad.ep_disconnect(eb, b.qp.qpn()).unwrap();
    da.wait_timeout(T).expect("A").unwrap();
    db.wait_timeout(T).expect("B").unwrap();
    for s in [&a, &b] {
        let w = wait(&s.cq, 1);
        assert_eq!((w[0].wr_id, w[0].status), (7, WcStatus::WrFlushErr));
        settle();
        assert!(s.cq.poll_one().is_none());
    }
}

#[test]
fn one_sided_disconnect_with_the_peers_notify_pending() {
    let (a, b) = (side("127.77.62.1"), side("127.77.62.2"));
    let (ea, eb, _l) = connect(&a, &b, 7103, "127.77.62.2");
    let notify = b.ad.ep_notify_disconnect(eb).unwrap();
    a.ad.post_send(&a.qp, SendWr::new(9, SendOp::Send, vec![sge(&a.mr, 0, 4)]))
        .unwrap();
    // Without a posted receive at B the send is RNR-retried forever (rnr 7) …
    settle();
    // … until A disconnects. B only gets notified (rule D6: no DREP until B's
    // own Disconnect), so A's DREQ times out: the documented status of a
    // one-sided disconnect, bounded by the CM timers. The send flushes once.
    let r =
        a.ad.ep_disconnect(ea, a.qp.qpn())
            .unwrap()
            .wait_timeout(T)
            .expect("bounded");
    assert_eq!(r, Err(EpError::Timeout));
    let w = wait(&a.cq, 1);
    assert_eq!((w[0].wr_id, w[0].status), (9, WcStatus::WrFlushErr));
    notify.wait_timeout(T).expect("B notified").unwrap();
    // B never called Disconnect: its QP is untouched …
    assert_eq!(b.qp.state(), QpState::Rts);
    // … until it does: DREP sent, done at once, QP flushed.
    b.ad.post_recv(&b.qp, RecvWr::new(11, vec![sge(&b.mr, 0, 64)]))
        .unwrap();
    b.ad.ep_disconnect(eb, b.qp.qpn())
        .unwrap()
        .wait_timeout(T)
        .expect("B")
        .unwrap();
    let w = wait(&b.cq, 1);
    assert_eq!((w[0].wr_id, w[0].status), (11, WcStatus::WrFlushErr));
}

#[test]
fn dreq_timeout_against_a_silent_peer() {
    let (a, b) = (side("127.77.63.1"), side("127.77.63.2"));
    let (ea, _eb, _l) = connect(&a, &b, 7104, "127.77.63.2");
    // B goes silent: everything it sends is lost on the way to A (the
    // fault layer works where packets arrive).
    a.ad.set_faults(Some(FaultConfig {
        loss: 1.0,
        ..FaultConfig::default()
    }))
    .unwrap();
    a.ad.post_recv(&a.qp, RecvWr::new(3, vec![sge(&a.mr, 0, 64)]))
        .unwrap();
    let r =
        a.ad.ep_disconnect(ea, a.qp.qpn())
            .unwrap()
            .wait_timeout(T)
            .expect("bounded");
    assert_eq!(r, Err(EpError::Timeout));
    let w = wait(&a.cq, 1);
    assert_eq!((w[0].wr_id, w[0].status), (3, WcStatus::WrFlushErr));
}

#[test]
fn reject_no_listener_and_timeout() {
    let (a, b) = (side("127.77.64.1"), side("127.77.64.2"));
    // Rejected by the application, with private data.
    let l = b.ad.create_ep().unwrap();
    b.ad.ep_listen(l, 7105, 4).unwrap();
    let eb = b.ad.create_ep().unwrap();
    let req = b.ad.ep_get_request(l, eb).unwrap();
    let ea = a.ad.create_ep().unwrap();
    let conn =
        a.ad.ep_connect(ea, a.qp.qpn(), cargs("127.77.64.2", 7105, b"x"))
            .unwrap();
    req.wait_timeout(T).unwrap().unwrap();
    b.ad.ep_reject(eb, b"go away").unwrap();
    match conn.wait_timeout(T).expect("connect ends") {
        Err(EpError::Rejected {
            reason,
            private_data,
        }) => {
            assert_eq!(reason, 28);
            assert_eq!(&private_data[..7], b"go away");
        }
        other => panic!("{other:?}"),
    }
    // Nobody listens on the port: REJ 8.
    let ea2 = a.ad.create_ep().unwrap();
    let r =
        a.ad.ep_connect(ea2, a.qp.qpn(), cargs("127.77.64.2", 7999, b""))
            .unwrap()
            .wait_timeout(T)
            .unwrap();
    assert!(
        matches!(r, Err(EpError::Rejected { reason: 8, .. })),
        "{r:?}"
    );
    // Nobody at all at that address: REQ retries run out.
    let ea3 = a.ad.create_ep().unwrap();
    let r =
        a.ad.ep_connect(ea3, a.qp.qpn(), cargs("127.77.64.9", 7105, b""))
            .unwrap()
            .wait_timeout(T)
            .unwrap();
    assert_eq!(r, Err(EpError::Timeout));
    // A second Connect on a busy endpoint is refused at once.
    let l2 = b.ad.create_ep().unwrap();
    b.ad.ep_listen(l2, 7106, 4).unwrap();
    let ea4 = a.ad.create_ep().unwrap();
    let _p =
        a.ad.ep_connect(ea4, a.qp.qpn(), cargs("127.77.64.2", 7106, b""))
            .unwrap();
    assert!(a
        .ad
        .ep_connect(ea4, a.qp.qpn(), cargs("127.77.64.2", 7106, b""))
        .is_err());
    // Listening twice on one port is refused.
    let l3 = b.ad.create_ep().unwrap();
    assert!(b.ad.ep_listen(l3, 7106, 4).is_err());
}

#[test]
fn connect_and_accept_need_a_qp_in_init() {
    let (a, b) = (side("127.77.67.1"), side("127.77.67.2"));
    let l = b.ad.create_ep().unwrap();
    b.ad.ep_listen(l, 7109, 4).unwrap();
    let eb = b.ad.create_ep().unwrap();
    let req = b.ad.ep_get_request(l, eb).unwrap();
    // A QP back in RESET: Connect fails at once, before any REQ goes out.
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    a.ad.modify_qp(a.qp.qpn(), &reset, AttrMask::STATE).unwrap();
    let ea = a.ad.create_ep().unwrap();
    let r =
        a.ad.ep_connect(ea, a.qp.qpn(), cargs("127.77.67.2", 7109, b""))
            .unwrap()
            .wait_timeout(Duration::from_secs(2))
            .expect("Connect must not wait for the peer");
    assert!(matches!(r, Err(EpError::InvalidState(_))), "{r:?}");
    assert!(req.try_take().is_none(), "no REQ reached the listener");
    // From INIT it connects; the passive side's QP in RESET fails Accept at once.
    let init = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: Access::ALL,
        ..QpAttr::default()
    };
    let mask = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    a.ad.modify_qp(a.qp.qpn(), &init, mask).unwrap();
    let ea = a.ad.create_ep().unwrap();
    let conn =
        a.ad.ep_connect(ea, a.qp.qpn(), cargs("127.77.67.2", 7109, b""))
            .unwrap();
    req.wait_timeout(T).unwrap().unwrap();
    b.ad.modify_qp(b.qp.qpn(), &reset, AttrMask::STATE).unwrap();
    let r =
        b.ad.ep_accept(eb, b.qp.qpn(), aargs(b""))
            .unwrap()
            .wait_timeout(Duration::from_secs(2))
            .expect("Accept must not wait");
    assert!(matches!(r, Err(EpError::InvalidState(_))), "{r:?}");
    // The application may still reject the request it could not accept.
    b.ad.ep_reject(eb, b"").unwrap();
    let r = conn.wait_timeout(T).expect("connect ends");
    assert!(matches!(r, Err(EpError::Rejected { .. })), "{r:?}");
}

#[test]
fn device_removal_completes_everything_pending() {
    let (a, b) = (side("127.77.65.1"), side("127.77.65.2"));
    let (_ea, eb, l) = connect(&a, &b, 7107, "127.77.65.2");
    let notify = b.ad.ep_notify_disconnect(eb).unwrap();
    let e2 = b.ad.create_ep().unwrap();
    let waiting = b.ad.ep_get_request(l, e2).unwrap();
    b.ad.post_recv(&b.qp, RecvWr::new(5, vec![sge(&b.mr, 0, 64)]))
        .unwrap();
    settle();
    b.ad.remove();
    assert_eq!(notify.wait_timeout(T), Some(Err(EpError::DeviceRemoved)));
    assert_eq!(waiting.wait_timeout(T), Some(Err(EpError::DeviceRemoved)));
    let w = wait(&b.cq, 1);
    assert_eq!((w[0].wr_id, w[0].status), (5, WcStatus::WrFlushErr));
    assert!(b.ad.ep_disconnect(eb, b.qp.qpn()).is_err());
    assert!(b.ad.create_ep().is_err());
}

#[test]
fn dead_peer_disconnect_times_out_and_flushes_once() {
    let (a, b) = (side("127.77.66.1"), side("127.77.66.2"));
    let (ea, _eb, _l) = connect(&a, &b, 7108, "127.77.66.2");
    // The peer dies: its NIC is gone, its port closed (ICMP unreachable).
    b.ad.remove();
    drop(b);
    a.ad.post_recv(&a.qp, RecvWr::new(1, vec![sge(&a.mr, 0, 64)]))
        .unwrap();
    a.ad.post_send(&a.qp, SendWr::new(2, SendOp::Send, vec![sge(&a.mr, 0, 8)]))
        .unwrap();
    let r =
        a.ad.ep_disconnect(ea, a.qp.qpn())
            .unwrap()
            .wait_timeout(T)
            .expect("bounded");
    assert_eq!(r, Err(EpError::Timeout));
    let mut w = wait(&a.cq, 2);
    w.sort_by_key(|w| w.wr_id);
    assert_eq!((w[0].wr_id, w[0].status), (1, WcStatus::WrFlushErr));
    assert!(
        matches!(w[1].status, WcStatus::WrFlushErr | WcStatus::RetryExcErr),
        "{w:?}"
    );
    settle();
    assert!(
        a.cq.poll_one().is_none(),
        "each request completes exactly once"
    );
    // A second Disconnect on the finished connection is refused.
    assert!(a.ad.ep_disconnect(ea, a.qp.qpn()).is_err());
}
