//! Connection management end to end on loopback: listen, connect, accept,
//! reject, and every disconnect case of the inherited rules — with real MADs on
//! QP1 between two NICs.

mod common;

use common::cm::{self, accept_args, connect_args, done, outcome, CM_LIMIT as T};
use common::{cm_side, init_step, wait_n, Shape, Side};
use ndverbs_engine::config::{CmTimers, NicConfig, Progress};
use ndverbs_engine::ep::{AcceptArgs, ConnectArgs, EpError};
use ndverbs_engine::link::faults::FaultConfig;
use ndverbs_engine::nic::Nic;
use ndverbs_proto::rc::{AttrMask, QpAttr, QpState, SendOp, SendWr, WcStatus};
use std::net::IpAddr;
use std::time::Duration;

/// Short CM timers: DREQ/REQ retries every ~50 ms, 3 retries.
const FAST: CmTimers = CmTimers {
    packet_life_time: 12,
    cm_response_timeout: 12,
    max_cm_retries: 3,
};

fn side(ip: IpAddr) -> Side {
    let config = NicConfig {
        progress: Progress::Thread,
        cm_timers: FAST,
        ..NicConfig::default()
    };
    let nic = Nic::open_with(ip, config).unwrap();
    cm_side(nic, Shape::queues(64, 2, 64, 256, 1 << 16))
}

/// Two sides on a fresh address pair.
fn sides() -> (Side, Side) {
    let (ia, ib) = ndverbs_testkit::addr::pair_v4();
    (side(ia), side(ib))
}

fn cargs(remote: IpAddr, port: u16, pd: &[u8]) -> ConnectArgs {
    ConnectArgs {
        private_data: pd.to_vec(),
        ..connect_args(remote, port)
    }
}

fn aargs(pd: &[u8]) -> AcceptArgs {
    AcceptArgs {
        private_data: pd.to_vec(),
        ..accept_args()
    }
}

/// Connects `a` to `b` (listening on `port`), private data both ways;
/// returns (ep_a, ep_b, listener).
fn connect(a: &Side, b: &Side, port: u16) -> (u32, u32, u32) {
    let l = cm::listen(b, port);
    let args = cargs(b.nic.local(), port, b"hello from a");
    let c = cm::establish(a, b, l, args, aargs(b"hello from b"));
    assert_eq!(&c.request.private_data[..12], b"hello from a");
    assert_eq!(c.request.peer_port, 40001);
    assert_eq!(&c.reply.private_data[..12], b"hello from b");
    assert_eq!(c.reply.read_limits, (4, 4));
    (c.ea, c.eb, l)
}

fn send_one(a: &Side, b: &Side) {
    b.post_recv(100, 0, 64);
    a.mr.write(0, b"ping").unwrap();
    a.post_send(SendWr::new(1, SendOp::Send, vec![a.sge(0, 4)]));
    let wa = wait_n(a, 1);
    let wb = wait_n(b, 1);
    assert_eq!(
        (wa[0].status, wb[0].status, wb[0].byte_len),
        (WcStatus::Success, WcStatus::Success, 4)
    );
}

/// Disconnects `s`'s endpoint `ep` and waits for it to finish with success.
fn disconnect(s: &Side, ep: u32, what: &str) {
    done(s.nic.ep_disconnect(ep, s.qp.ident()).unwrap(), what);
}

/// The next completion of `s`: work request `wr_id`, flushed.
#[track_caller]
fn flushed(s: &Side, wr_id: u64) {
    let w = wait_n(s, 1);
    assert_eq!((w[0].wr_id, w[0].status), (wr_id, WcStatus::WrFlushErr));
}

fn settle() {
    std::thread::sleep(Duration::from_millis(100));
}

#[test]
fn close_handshake_then_disconnect_on_both_sides() {
    let (a, b) = sides();
    let (ea, eb, _l) = connect(&a, &b, 7101);
    send_one(&a, &b);
    // B waits for the disconnect and has receives outstanding.
    let notify = b.nic.ep_notify_disconnect(eb).unwrap();
    for i in 0..3 {
        b.post_recv(200 + i, 0, 64);
    }
    let da = a.nic.ep_disconnect(ea, a.qp.ident()).unwrap();
    done(notify, "NotifyDisconnect");
    // An incoming DREQ alone never flushes the QP.
    settle();
    assert!(
        b.cq.poll_one().is_none(),
        "DREQ must not flush the passive QP"
    );
    assert_eq!(b.qp.state(), QpState::Rts);
    // B's Disconnect sends the DREP and completes; its receives flush, once.
    disconnect(&b, eb, "B disconnect");
    let w = wait_n(&b, 3);
    assert!(w.iter().all(|w| w.status == WcStatus::WrFlushErr));
    done(da, "A disconnect");
    settle();
    assert!(b.cq.poll_one().is_none() && a.cq.poll_one().is_none());
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Err, QpState::Err));
}

#[test]
fn crossing_dreqs() {
    let (a, b) = sides();
    let (ea, eb, _l) = connect(&a, &b, 7102);
    for s in [&a, &b] {
        s.post_recv(7, 0, 64);
    }
    let da = a.nic.ep_disconnect(ea, a.qp.ident()).unwrap();
    let db = b.nic.ep_disconnect(eb, b.qp.ident()).unwrap();
    done(da, "A");
    done(db, "B");
    for s in [&a, &b] {
        flushed(s, 7);
        settle();
        assert!(s.cq.poll_one().is_none());
    }
}

#[test]
fn one_sided_disconnect_with_the_peers_notify_pending() {
    let (a, b) = sides();
    let (ea, eb, _l) = connect(&a, &b, 7103);
    let notify = b.nic.ep_notify_disconnect(eb).unwrap();
    a.post_send(SendWr::new(9, SendOp::Send, vec![a.sge(0, 4)]));
    // Without a posted receive at B the send is RNR-retried forever (rnr 7) …
    settle();
    // … until A disconnects. B only gets notified (rule D6: no DREP until B's
    // own Disconnect), so A's DREQ times out: the documented status of a
    // one-sided disconnect, bounded by the CM timers. The send flushes once.
    let r = outcome(a.nic.ep_disconnect(ea, a.qp.ident()).unwrap(), "A");
    assert_eq!(r, Err(EpError::Timeout));
    flushed(&a, 9);
    done(notify, "B notified");
    // B never called Disconnect: its QP is untouched …
    assert_eq!(b.qp.state(), QpState::Rts);
    // … until it does: DREP sent, done at once, QP flushed.
    b.post_recv(11, 0, 64);
    disconnect(&b, eb, "B");
    flushed(&b, 11);
}

#[test]
fn dreq_timeout_against_a_silent_peer() {
    let (a, b) = sides();
    let (ea, _eb, _l) = connect(&a, &b, 7104);
    // B goes silent: everything it sends is lost on the way to A (the
    // fault layer works where packets arrive).
    a.nic
        .set_faults(Some(FaultConfig {
            loss: 1.0,
            ..FaultConfig::default()
        }))
        .unwrap();
    a.post_recv(3, 0, 64);
    let r = outcome(a.nic.ep_disconnect(ea, a.qp.ident()).unwrap(), "A");
    assert_eq!(r, Err(EpError::Timeout));
    flushed(&a, 3);
}

#[test]
fn reject_no_listener_and_timeout() {
    let (a, b) = sides();
    let ib = b.nic.local();
    // Rejected by the application, with private data.
    let (eb, req) = cm::wait_request(&b, cm::listen(&b, 7105));
    let (_, conn) = cm::start_connect(&a, cargs(ib, 7105, b"x"));
    done(req, "request");
    b.nic.ep_reject(eb, b"go away").unwrap();
    match outcome(conn, "connect") {
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
    let connect =
        |remote, port| outcome(cm::start_connect(&a, cargs(remote, port, b"")).1, "connect");
    let r = connect(ib, 7999);
    assert!(
        matches!(r, Err(EpError::Rejected { reason: 8, .. })),
        "{r:?}"
    );
    // Nobody at all at that address (a fresh one nothing opened): REQ
    // retries run out.
    let nobody = ndverbs_testkit::addr::v4();
    assert_eq!(connect(nobody, 7105), Err(EpError::Timeout));
    // A second Connect on a busy endpoint is refused at once.
    cm::listen(&b, 7106);
    let (ea4, _p) = cm::start_connect(&a, cargs(ib, 7106, b""));
    assert!(a
        .nic
        .ep_connect(ea4, a.qp.ident(), cargs(ib, 7106, b""))
        .is_err());
    // Listening twice on one port is refused.
    let l3 = b.nic.create_ep().unwrap();
    assert!(b.nic.ep_listen(l3, 7106, 4).is_err());
}

#[test]
fn connect_and_accept_need_a_qp_in_init() {
    let (a, b) = sides();
    let ib = b.nic.local();
    let (eb, req) = cm::wait_request(&b, cm::listen(&b, 7109));
    // A QP back in RESET: Connect fails at once, before any REQ goes out.
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    a.modify([(reset, AttrMask::STATE)]);
    let r = cm::start_connect(&a, cargs(ib, 7109, b""))
        .1
        .wait_timeout(Duration::from_secs(2))
        .expect("Connect must not wait for the peer");
    assert!(matches!(r, Err(EpError::InvalidState(_))), "{r:?}");
    assert!(req.try_take().is_none(), "no REQ reached the listener");
    // From INIT it connects; the passive side's QP in RESET fails Accept at once.
    a.modify([init_step()]);
    let (_, conn) = cm::start_connect(&a, cargs(ib, 7109, b""));
    done(req, "request");
    b.modify([(reset, AttrMask::STATE)]);
    let r = b
        .nic
        .ep_accept(eb, b.qp.ident(), aargs(b""))
        .unwrap()
        .wait_timeout(Duration::from_secs(2))
        .expect("Accept must not wait");
    assert!(matches!(r, Err(EpError::InvalidState(_))), "{r:?}");
    // The application may still reject the request it could not accept.
    b.nic.ep_reject(eb, b"").unwrap();
    let r = outcome(conn, "connect");
    assert!(matches!(r, Err(EpError::Rejected { .. })), "{r:?}");
}

#[test]
fn device_removal_completes_everything_pending() {
    let (a, b) = sides();
    let (_ea, eb, l) = connect(&a, &b, 7107);
    let notify = b.nic.ep_notify_disconnect(eb).unwrap();
    let (_, waiting) = cm::wait_request(&b, l);
    b.post_recv(5, 0, 64);
    settle();
    b.nic.remove();
    assert_eq!(notify.wait_timeout(T), Some(Err(EpError::DeviceRemoved)));
    assert_eq!(waiting.wait_timeout(T), Some(Err(EpError::DeviceRemoved)));
    flushed(&b, 5);
    assert!(b.nic.ep_disconnect(eb, b.qp.ident()).is_err());
    assert!(b.nic.create_ep().is_err());
}

#[test]
fn dead_peer_disconnect_times_out_and_flushes_once() {
    let (a, b) = sides();
    let (ea, _eb, _l) = connect(&a, &b, 7108);
    // The peer dies: its NIC is gone, its port closed (ICMP unreachable).
    b.nic.remove();
    drop(b);
    a.post_recv(1, 0, 64);
    a.post_send(SendWr::new(2, SendOp::Send, vec![a.sge(0, 8)]));
    let r = outcome(a.nic.ep_disconnect(ea, a.qp.ident()).unwrap(), "A");
    assert_eq!(r, Err(EpError::Timeout));
    let mut w = wait_n(&a, 2);
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
    assert!(a.nic.ep_disconnect(ea, a.qp.ident()).is_err());
}
