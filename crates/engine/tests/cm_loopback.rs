//! Connection management end to end on loopback: listen, connect, accept,
//! reject, and every disconnect case of the inherited rules (with the
//! statuses `plan/issue13-decisions.md` pins) — with real MADs on QP1
//! between two NICs.

mod common;

use common::cm::{self, accept_args, connect_args, done, outcome, CM_LIMIT as T};
use common::{cm_side, drive_until, init_step, wait_n, Shape, Side};
use ndverbs_engine::config::{CmTimers, NicConfig, Progress};
use ndverbs_engine::ep::{AcceptArgs, ConnectArgs, EpError, EpPending};
use ndverbs_engine::error::EngineError;
use ndverbs_engine::link::faults::FaultConfig;
use ndverbs_engine::nic::Nic;
use ndverbs_proto::rc::{AttrMask, QpAttr, QpState, SendOp, SendWr, WcStatus};
use std::net::IpAddr;
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Short CM timers: DREQ/REQ retries every ~50 ms, 3 retries.
const FAST: CmTimers = CmTimers {
    packet_life_time: 12,
    cm_response_timeout: 12,
    max_cm_retries: 3,
};

fn side(ip: IpAddr) -> Side {
    side_with(ip, Progress::Thread, FAST)
}

fn side_with(ip: IpAddr, progress: Progress, cm_timers: CmTimers) -> Side {
    let config = NicConfig {
        progress,
        cm_timers,
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

/// Two sides with Linux's CM timers: a DREQ nobody answers waits seconds
/// before it times out, long enough to look at what it left alone.
fn patient_sides() -> (Side, Side) {
    let (ia, ib) = ndverbs_testkit::addr::pair_v4();
    let s = |ip| side_with(ip, Progress::Thread, CmTimers::LINUX);
    (s(ia), s(ib))
}

/// Nothing more arrives on `s`'s CQ.
#[track_caller]
fn quiet(s: &Side) {
    settle();
    assert!(s.cq.poll_one().is_none(), "each request completes once");
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

/// Drives both manual-progress sides until `p` ends.
#[track_caller]
fn driven<T>(a: &Side, b: &Side, p: EpPending<T>) -> Result<T, EpError> {
    drive_until(a, b, || p.is_done());
    p.try_take().expect("done")
}

#[test]
fn crossing_dreqs() {
    // Manual progress: a NIC reads what arrived only when driven, so B's
    // Disconnect runs before B has seen A's DREQ — the DREQs cross, always.
    let (ia, ib) = ndverbs_testkit::addr::pair_v4();
    let (a, b) = (
        side_with(ia, Progress::Manual, FAST),
        side_with(ib, Progress::Manual, FAST),
    );
    let l = cm::listen(&b, 7102);
    let (eb, req) = cm::wait_request(&b, l);
    let (ea, conn) = cm::start_connect(&a, connect_args(b.nic.local(), 7102));
    driven(&a, &b, req).unwrap();
    let acc = b.nic.ep_accept(eb, b.qp.ident(), accept_args()).unwrap();
    driven(&a, &b, conn).unwrap();
    let complete = a.nic.ep_complete_connect(ea, a.qp.ident()).unwrap();
    driven(&a, &b, complete).unwrap();
    driven(&a, &b, acc).unwrap();
    for s in [&a, &b] {
        s.post_recv(7, 0, 64);
    }
    let (na, nb) = (
        a.nic.ep_notify_disconnect(ea).unwrap(),
        b.nic.ep_notify_disconnect(eb).unwrap(),
    );
    let da = a.nic.ep_disconnect(ea, a.qp.ident()).unwrap();
    let db = b.nic.ep_disconnect(eb, b.qp.ident()).unwrap();
    assert_eq!((driven(&a, &b, da), driven(&a, &b, db)), (Ok(()), Ok(())));
    // Each side heard the other's DREQ: they crossed.
    assert_eq!((driven(&a, &b, na), driven(&a, &b, nb)), (Ok(()), Ok(())));
    for (s, ep) in [(&a, ea), (&b, eb)] {
        assert!(s.nic.ep_info(ep).unwrap().dreq_received);
        flushed(s, 7);
        drive_until(&a, &b, || true);
        assert!(s.cq.poll_one().is_none());
        assert_eq!(s.qp.state(), QpState::Err);
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
    // Nobody at all at that address (a fresh one nothing opened): its host
    // answers the REQ with ICMP port unreachable, and the connect ends.
    let nobody = ndverbs_testkit::addr::v4();
    assert_eq!(connect(nobody, 7105), Err(EpError::PortUnreachable));
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

/// A connect to an address where nothing listens on UDP 4791 ends as soon
/// as the kernel answers "port unreachable", not after the minute of REQ
/// retries Linux's CM timers give it; the NIC counts the answer. The
/// endpoint may connect again.
#[test]
fn connect_to_an_address_without_roce_fails_fast() {
    let (ia, ib) = ndverbs_testkit::addr::pair_v4();
    let a = side_with(ia, Progress::Thread, CmTimers::LINUX);
    let nobody = ndverbs_testkit::addr::v4();
    let t0 = std::time::Instant::now();
    let (ea, conn) = cm::start_connect(&a, cargs(nobody, 7110, b""));
    assert_eq!(outcome(conn, "connect"), Err(EpError::PortUnreachable));
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let s = a.nic.stats();
    assert!(s.get("peer_port_unreachable") >= 1, "{s:?}");
    assert_eq!(s.get("cm_unreachable"), 1);
    assert_eq!(s.get("cm_tx_retries"), 0, "no REQ retransmitted");
    // The same endpoint connects to a peer that is there.
    let b = side_with(ib, Progress::Thread, CmTimers::LINUX);
    let (eb, req) = cm::wait_request(&b, cm::listen(&b, 7110));
    let conn = a.nic.ep_connect(ea, a.qp.ident(), cargs(ib, 7110, b""));
    // (A refusal here would be a state the failed connect left behind.)
    let conn = conn.unwrap();
    done(req, "request");
    b.nic.ep_reject(eb, b"").unwrap();
    assert!(matches!(
        outcome(conn, "connect"),
        Err(EpError::Rejected { reason: 28, .. })
    ));
}

/// The same in manual progress: the application's own waits find the port
/// unreachable, and once the error queue is read the link no longer polls
/// ready — waiting sleeps again rather than returning at once for ever.
#[test]
fn a_port_unreachable_leaves_manual_progress_waiting_quietly() {
    let a = side_with(
        ndverbs_testkit::addr::v4(),
        Progress::Manual,
        CmTimers::LINUX,
    );
    let nobody = ndverbs_testkit::addr::v4();
    let (_, conn) = cm::start_connect(&a, cargs(nobody, 7111, b""));
    let t0 = std::time::Instant::now();
    let r = loop {
        if let Some(r) = conn.try_take() {
            break r;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "connect still pending"
        );
        a.nic.progress_wait(Duration::from_millis(10)).unwrap();
    };
    assert_eq!(r, Err(EpError::PortUnreachable));
    // Nothing left to do: five waits of 100 ms sleep about that long.
    let t1 = std::time::Instant::now();
    for _ in 0..5 {
        a.nic.progress_wait(Duration::from_millis(100)).unwrap();
    }
    assert!(
        t1.elapsed() >= Duration::from_millis(450),
        "progress_wait returned at once: {:?}",
        t1.elapsed()
    );
    assert!(a.nic.stats().get("peer_port_unreachable") >= 1);
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
    // The send's retries are unbounded (retry count 7), so it ends only
    // with the Disconnect's flush.
    let mut w = wait_n(&a, 2);
    w.sort_by_key(|w| w.wr_id);
    assert_eq!((w[0].wr_id, w[0].status), (1, WcStatus::WrFlushErr));
    assert_eq!((w[1].wr_id, w[1].status), (2, WcStatus::WrFlushErr));
    settle();
    assert!(
        a.cq.poll_one().is_none(),
        "each request completes exactly once"
    );
    // A second Disconnect on the finished connection is refused.
    assert!(a.nic.ep_disconnect(ea, a.qp.ident()).is_err());
}

#[test]
fn a_disconnect_completes_after_its_flush_completions_are_on_the_cq() {
    let (a, b) = sides();
    let (ea, eb, _l) = connect(&a, &b, 7110);
    for s in [&a, &b] {
        for i in 0..3 {
            s.post_recv(20 + i, 0, 64);
        }
    }
    let notify = b.nic.ep_notify_disconnect(eb).unwrap();
    let da = a.nic.ep_disconnect(ea, a.qp.ident()).unwrap();
    done(notify, "B notified");
    // The DREP side (done at once) and the DREQ side (done on the DREP):
    // when each Disconnect completes, its three flushes are already there.
    done(b.nic.ep_disconnect(eb, b.qp.ident()).unwrap(), "B");
    done(da, "A");
    for s in [&b, &a] {
        let flushed: Vec<_> = std::iter::from_fn(|| s.cq.poll_one()).collect();
        assert_eq!(flushed.len(), 3, "{flushed:?}");
        assert!(flushed.iter().all(|w| w.status == WcStatus::WrFlushErr));
        quiet(s);
    }
}

#[test]
fn our_dreq_outstanding_leaves_the_qp_in_rts_and_flushes_nothing() {
    let (a, b) = patient_sides();
    let (ea, eb, _l) = connect(&a, &b, 7111);
    a.post_recv(30, 0, 64);
    let notify = b.nic.ep_notify_disconnect(eb).unwrap();
    let da = a.nic.ep_disconnect(ea, a.qp.ident()).unwrap();
    done(notify, "B notified");
    settle();
    // B has not answered: A's Disconnect waits, its QP in RTS, its receive
    // posted (it could still complete).
    assert!(!da.is_done());
    assert_eq!(a.qp.state(), QpState::Rts);
    assert!(a.cq.poll_one().is_none());
    disconnect(&b, eb, "B");
    done(da, "A");
    flushed(&a, 30);
    assert_eq!(a.qp.state(), QpState::Err);
}

#[test]
fn notify_disconnect_beside_our_own_disconnect() {
    // Pending while our Disconnect ends on the DREP: it stays pending (no
    // DREQ will come) until cancelled.
    let (a, b) = sides();
    let (ea, eb, _l) = connect(&a, &b, 7112);
    let na = a.nic.ep_notify_disconnect(ea).unwrap();
    let nb = b.nic.ep_notify_disconnect(eb).unwrap();
    let da = a.nic.ep_disconnect(ea, a.qp.ident()).unwrap();
    done(nb, "B notified");
    disconnect(&b, eb, "B");
    done(da, "A");
    settle();
    assert!(!na.is_done(), "no DREQ came");
    // A new one is refused: the connection ended without a DREQ. B heard
    // one: it succeeds at once.
    assert!(matches!(
        a.nic.ep_notify_disconnect(ea),
        Err(EngineError::NotConnected)
    ));
    done(b.nic.ep_notify_disconnect(eb).unwrap(), "B again");
    a.nic.ep_cancel(ea).unwrap();
    assert_eq!(na.wait_timeout(T), Some(Err(EpError::Canceled)));
}

#[test]
fn disconnect_during_setup_is_refused_and_sends_nothing() {
    let (a, b) = sides();
    let ib = b.nic.local();
    let refused = |s: &Side, ep| {
        let r = s.nic.ep_disconnect(ep, s.qp.ident());
        assert!(matches!(r, Err(EngineError::NotConnected)), "{r:?}");
    };
    let (eb, req) = cm::wait_request(&b, cm::listen(&b, 7113));
    let (ea, conn) = cm::start_connect(&a, cargs(ib, 7113, b""));
    refused(&a, ea); // Connect pending
    done(req, "request");
    refused(&b, eb); // before Accept
    let acc = b.nic.ep_accept(eb, b.qp.ident(), aargs(b"")).unwrap();
    done(conn, "connect");
    refused(&a, ea); // before CompleteConnect
    refused(&b, eb); // Accept waiting for the RTU
    assert_eq!(a.qp.state(), QpState::Init);
    let cm_state = a.nic.ep_info(ea).unwrap().cm_state;
    // Nothing left the active side: the connection completes as usual.
    done(
        a.nic.ep_complete_connect(ea, a.qp.ident()).unwrap(),
        "complete",
    );
    done(acc, "accept");
    assert!(cm_state.is_some());
    send_one(&a, &b);
}

#[test]
fn a_rej_that_ends_an_established_connection_leaves_a_disconnect_to_flush() {
    let (a, b) = sides();
    let ib = b.nic.local();
    let (eb, req) = cm::wait_request(&b, cm::listen(&b, 7114));
    let (ea, conn) = cm::start_connect(&a, cargs(ib, 7114, b""));
    done(req, "request");
    let acc = b.nic.ep_accept(eb, b.qp.ident(), aargs(b"")).unwrap();
    done(conn, "connect");
    // B hears nothing more: A's RTU is lost, and B, its Accept still
    // waiting, gives up with a REJ, which ends A's established connection.
    b.nic
        .set_faults(Some(FaultConfig {
            loss: 1.0,
            ..FaultConfig::default()
        }))
        .unwrap();
    let na = a.nic.ep_notify_disconnect(ea).unwrap();
    done(
        a.nic.ep_complete_connect(ea, a.qp.ident()).unwrap(),
        "complete",
    );
    a.post_recv(40, 0, 64);
    b.nic.ep_reject(eb, b"").unwrap();
    assert_eq!(outcome(acc, "accept"), Err(EpError::Canceled));
    assert_eq!(na.wait_timeout(T), Some(Err(EpError::Aborted)));
    // A's QP is still up; its Disconnect sends nothing and flushes it.
    assert_eq!(a.qp.state(), QpState::Rts);
    disconnect(&a, ea, "A");
    flushed(&a, 40);
    assert_eq!(a.qp.state(), QpState::Err);
    quiet(&a);
}

#[test]
fn a_disconnect_whose_qp_was_destroyed_still_says_goodbye_and_ends_canceled() {
    let (a, b) = sides();
    let (ea, eb, _l) = connect(&a, &b, 7115);
    let qa = a.qp.ident();
    a.nic.destroy_qp(qa.qpn).unwrap();
    let notify = b.nic.ep_notify_disconnect(eb).unwrap();
    let da = a.nic.ep_disconnect(ea, qa).unwrap();
    done(notify, "the DREQ went out");
    disconnect(&b, eb, "B");
    assert_eq!(outcome(da, "A"), Err(EpError::NoQp(qa.qpn)));
}

#[test]
fn destroying_an_endpoint_ends_its_pending_requests_canceled() {
    let (a, b) = patient_sides();
    let ib = b.nic.local();
    // Released after the REP, before CompleteConnect: the peer's Accept
    // is rejected.
    let (eb, req) = cm::wait_request(&b, cm::listen(&b, 7116));
    let (ea, conn) = cm::start_connect(&a, cargs(ib, 7116, b""));
    done(req, "request");
    let acc = b.nic.ep_accept(eb, b.qp.ident(), aargs(b"")).unwrap();
    done(conn, "connect");
    a.nic.destroy_ep(ea).unwrap();
    assert!(matches!(
        outcome(acc, "accept"),
        Err(EpError::Rejected { .. })
    ));

    // A pending NotifyDisconnect and a Disconnect waiting for its DREP.
    let (a, b) = patient_sides();
    let (ea, _eb, _l) = connect(&a, &b, 7117);
    let na = a.nic.ep_notify_disconnect(ea).unwrap();
    let da = a.nic.ep_disconnect(ea, a.qp.ident()).unwrap();
    settle();
    a.nic.destroy_ep(ea).unwrap();
    assert_eq!(na.wait_timeout(T), Some(Err(EpError::Canceled)));
    assert_eq!(da.wait_timeout(T), Some(Err(EpError::Canceled)));

    // A Connect still waiting for its REP: Canceled.
    let (a, b) = patient_sides();
    let (_eb, req) = cm::wait_request(&b, cm::listen(&b, 7118));
    let (ea, conn) = cm::start_connect(&a, cargs(b.nic.local(), 7118, b""));
    done(req, "request");
    a.nic.destroy_ep(ea).unwrap();
    assert_eq!(
        conn.wait_timeout(T).map(|r| r.err()),
        Some(Some(EpError::Canceled))
    );
}

/// A request whose endpoint queue is empty runs on the caller's thread; a
/// queued one on the worker, when what it waits for arrives. Same outcome,
/// same QP state.
#[test]
fn a_request_ends_the_same_inline_and_on_the_worker() {
    let run = |queued: bool, port| {
        let (a, b) = sides();
        let (eb, req) = cm::wait_request(&b, cm::listen(&b, port));
        let (ea, conn) = cm::start_connect(&a, cargs(b.nic.local(), port, b""));
        // Queued: behind the Connect, run by the worker on the REP.
        let early = queued.then(|| a.nic.ep_complete_connect(ea, a.qp.ident()).unwrap());
        done(req, "request");
        let acc = b.nic.ep_accept(eb, b.qp.ident(), aargs(b"")).unwrap();
        done(conn, "connect");
        let complete =
            early.unwrap_or_else(|| a.nic.ep_complete_connect(ea, a.qp.ident()).unwrap());
        let r = outcome(complete, "complete");
        done(acc, "accept");
        send_one(&a, &b);
        (r, a.qp.state(), b.qp.state())
    };
    let inline = run(false, 7119);
    assert_eq!(inline, (Ok(()), QpState::Rts, QpState::Rts));
    assert_eq!(run(true, 7120), inline);
}

#[test]
fn concurrent_connects_on_one_endpoint_one_is_taken() {
    let (a, b) = sides();
    let l = cm::listen(&b, 7121);
    let (_eb, _req) = cm::wait_request(&b, l);
    let ea = a.nic.create_ep().unwrap();
    let a = Arc::new(a);
    let start = Arc::new(Barrier::new(8));
    let ib = b.nic.local();
    let tries: Vec<_> = (0..8)
        .map(|_| {
            let (a, start) = (a.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                a.nic
                    .ep_connect(ea, a.qp.ident(), cargs(ib, 7121, b""))
                    .map(drop)
            })
        })
        .collect();
    let results: Vec<_> = tries.into_iter().map(|t| t.join().unwrap()).collect();
    let taken = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(taken, 1, "{results:?}");
    assert!(results
        .iter()
        .all(|r| r.is_ok() || matches!(r, Err(EngineError::Busy(_)))));
}

#[test]
fn concurrent_disconnects_all_complete_and_flush_once() {
    let (a, b) = sides();
    let (ea, eb, _l) = connect(&a, &b, 7122);
    a.post_recv(50, 0, 64);
    let a = Arc::new(a);
    let start = Arc::new(Barrier::new(8));
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let (a, start) = (a.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                a.nic.ep_disconnect(ea, a.qp.ident()).unwrap()
            })
        })
        .collect();
    let pending: Vec<_> = calls.into_iter().map(|t| t.join().unwrap()).collect();
    disconnect(&b, eb, "B");
    for p in pending {
        assert_eq!(outcome(p, "A"), Ok(()));
    }
    flushed(&a, 50);
    quiet(&a);
    assert!(matches!(
        a.nic.ep_disconnect(ea, a.qp.ident()),
        Err(EngineError::NotConnected)
    ));
}
