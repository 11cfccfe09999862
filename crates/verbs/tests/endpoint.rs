//! Endpoints through the verbs API: a request names its QP by identity, and
//! the disconnect outcomes as verbs reports them (kinds and errnos).

use ndverbs_testkit::verbs::{self as kit, PairConfig, RcParams, Side};
use ndverbs_testkit::{addr, verbs::WC_LIMIT as T};
use ndverbs_verbs::*;
use std::net::IpAddr;

/// A device on `addr` with a PD, CQ, region and a QP in INIT.
fn side(addr: IpAddr) -> Side {
    let s = Side::open(
        addr,
        &PairConfig {
            cq_depth: 64,
            region: 1 << 16,
            ..PairConfig::default()
        },
    );
    let (a, m) = RcParams::default().init();
    s.qp.modify(&a, m).unwrap();
    s
}

/// How `p` ended, within the time limit.
#[track_caller]
fn ended<R: std::fmt::Debug>(p: Pending<R>) -> Result<R> {
    p.wait_timeout(T).expect("ended in time")
}

fn accept_args() -> AcceptArgs {
    AcceptArgs::default()
}

/// `a`'s endpoint connected to `b`'s (listening on `port`) with `qa` and
/// `b.qp`: (active, passive, listener).
fn connect(a: &Side, qa: &Qp, b: &Side, port: u16) -> (Endpoint, Endpoint, Endpoint) {
    let l = Endpoint::new(&b.dev).unwrap();
    l.listen(port, 4).unwrap();
    let eb = Endpoint::new(&b.dev).unwrap();
    let req = l.get_request(&eb).unwrap();
    let ea = Endpoint::new(&a.dev).unwrap();
    let rep = ea
        .connect(qa, kit::connect_args(b.dev.query().addr, port))
        .unwrap();
    ended(req).unwrap();
    let rtu = eb.accept(&b.qp, accept_args()).unwrap();
    ended(rep).unwrap();
    ended(ea.complete_connect(qa).unwrap()).unwrap();
    ended(rtu).unwrap();
    (ea, eb, l)
}

#[test]
fn a_qp_identity_names_one_qp() {
    let a = side(addr::v4());
    let cq = a.dev.create_cq(4).unwrap();
    let other = a.pd.create_qp(&QpInitAttr::new(&cq, &cq)).unwrap();
    let (ia, io) = (QpId::from(&a.qp), QpId::from(&other));
    assert_eq!((ia.qpn(), io.qpn()), (a.qp.qpn(), other.qpn()));
    assert_ne!(ia, io);
    assert_eq!(ia, QpId::from(&a.qp), "the same QP, the same identity");
}

#[test]
fn a_disconnect_whose_qp_was_released_says_goodbye_and_ends_not_found() {
    let (a, b) = (side(addr::v4()), side(addr::v4()));
    let qa = a.pd.create_qp(&QpInitAttr::new(&a.cq, &a.cq)).unwrap();
    let (init, m) = RcParams::default().init();
    qa.modify(&init, m).unwrap();
    let (ea, eb, _l) = connect(&a, &qa, &b, 7501);
    let id = QpId::from(&qa);
    drop(qa);
    let heard = eb.notify_disconnect().unwrap();
    let bye = ea.disconnect(id).unwrap();
    ended(heard).expect("the DREQ went out");
    ended(eb.disconnect(&b.qp).unwrap()).unwrap();
    let e = ended(bye).unwrap_err();
    assert_eq!((e.kind(), e.errno()), (ErrorKind::NotFound, libc::ENOENT));
}

#[test]
fn disconnect_and_notify_outcomes_as_kinds() {
    let (a, b) = (side(addr::v4()), side(addr::v4()));
    // During setup: NotConnected at once, the QP untouched.
    let l = Endpoint::new(&b.dev).unwrap();
    l.listen(7502, 4).unwrap();
    let eb = Endpoint::new(&b.dev).unwrap();
    let req = l.get_request(&eb).unwrap();
    let ea = Endpoint::new(&a.dev).unwrap();
    let rep = ea
        .connect(&a.qp, kit::connect_args(b.dev.query().addr, 7502))
        .unwrap();
    let e = ea.disconnect(&a.qp).unwrap_err();
    assert_eq!(
        (e.kind(), e.errno()),
        (ErrorKind::NotConnected, libc::ENOTCONN)
    );
    ended(req).unwrap();
    let rtu = eb.accept(&b.qp, accept_args()).unwrap();
    ended(rep).unwrap();
    assert_eq!(
        ea.disconnect(&a.qp).unwrap_err().kind(),
        ErrorKind::NotConnected
    );
    assert_eq!(a.qp.state(), QpState::Init);
    ended(ea.complete_connect(&a.qp).unwrap()).unwrap();
    ended(rtu).unwrap();
    // Our Disconnect, answered: a NotifyDisconnect pending through it stays
    // pending; afterwards a new one is NotConnected on our side and
    // succeeds on the side that heard the DREQ.
    let mine = ea.notify_disconnect().unwrap();
    let bye = ea.disconnect(&a.qp).unwrap();
    ended(eb.notify_disconnect().unwrap()).unwrap();
    ended(eb.disconnect(&b.qp).unwrap()).unwrap();
    ended(bye).unwrap();
    assert!(mine
        .wait_timeout(std::time::Duration::from_millis(50))
        .is_none());
    assert_eq!(
        ea.notify_disconnect().unwrap_err().kind(),
        ErrorKind::NotConnected
    );
    ended(eb.notify_disconnect().unwrap()).unwrap();
    ea.cancel().unwrap();
    assert_eq!(ended(mine).unwrap_err().kind(), ErrorKind::Canceled);
}

/// A connect to an address with no RoCE endpoint (nothing on UDP 4791)
/// ends with `PortUnreachable` (errno `ECONNREFUSED`, no REJ to read) as
/// soon as the kernel answers "port unreachable", long before the REQ
/// retries would have run out; the device counts the answer.
#[test]
fn a_connect_to_no_roce_endpoint_is_port_unreachable() {
    let a = side(addr::v4());
    let nobody = addr::v4();
    let ea = Endpoint::new(&a.dev).unwrap();
    let t0 = std::time::Instant::now();
    let rep = ea.connect(&a.qp, kit::connect_args(nobody, 7510)).unwrap();
    let e = ended(rep).unwrap_err();
    assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(
        (e.kind(), e.errno()),
        (ErrorKind::PortUnreachable, libc::ECONNREFUSED)
    );
    assert!(e.rejection().is_none());
    assert!(e.to_string().contains("port unreachable"), "{e}");
    let s = a.dev.stats();
    assert!(s.get("peer_port_unreachable") >= 1);
    assert_eq!(s.get("cm_unreachable"), 1);
}

#[test]
fn a_connection_in_one_call_each_with_the_defaults() {
    let (ia, ib) = addr::pair_v4();
    let (a, b) = (side(ia), side(ib));
    let l = Endpoint::new(&b.dev).unwrap();
    l.listen(7300, 4).unwrap();
    let eb = Endpoint::new(&b.dev).unwrap();
    let req = l.get_request(&eb).unwrap();
    let ea = Endpoint::new(&a.dev).unwrap();
    let rep = ea.connect(&a.qp, ConnectArgs::new(ib, 7300)).unwrap();
    let info = ended(req).unwrap();
    // Local port 0 took one of the ephemeral range.
    assert!(
        (32768..61000).contains(&info.peer_port),
        "{}",
        info.peer_port
    );
    let rtu = eb.accept(&b.qp, AcceptArgs::default()).unwrap();
    assert_eq!(ended(rep).unwrap().read_limits, (4, 4));
    ended(ea.complete_connect(&a.qp).unwrap()).unwrap();
    ended(rtu).unwrap();
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Rts));
}

#[test]
fn a_connect_without_a_destination_is_refused() {
    let (ia, _) = addr::pair_v4();
    let a = side(ia);
    let ea = Endpoint::new(&a.dev).unwrap();
    let e = ea.connect(&a.qp, ConnectArgs::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert_eq!(a.qp.state(), QpState::Init);
}

/// A request waited for `without_progress` on a manual-progress device:
/// polling its future runs no engine step and does not ask to be polled
/// again; another thread running the engine completes it and wakes it.
#[test]
fn a_request_without_progress_is_woken_by_whoever_runs_the_engine() {
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let cfg = DeviceConfig {
        progress: Progress::Manual,
        ..DeviceConfig::default()
    };
    let dev = Device::open_with(addr::v4(), &cfg).unwrap();
    let (l, ep) = (Endpoint::new(&dev).unwrap(), Endpoint::new(&dev).unwrap());
    l.listen(7300, 1).unwrap();
    let mut req = Box::pin(l.get_request(&ep).unwrap().without_progress());
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(req.as_mut().poll(&mut cx).is_pending());
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        0,
        "asked to be polled again"
    );
    // Cancelling completes it; the waiter hears of it without running anything.
    l.cancel().unwrap();
    dev.progress();
    assert!(count.0.load(Ordering::SeqCst) >= 1);
    match req.as_mut().poll(&mut cx) {
        Poll::Ready(r) => assert_eq!(r.unwrap_err().kind(), ErrorKind::Canceled),
        Poll::Pending => panic!("still pending"),
    }
}

/// rdma_cm's `qp_num` mode on real QPs: each side moves its QP to RTS
/// itself with what the request and the REP report; Accept and
/// CompleteConnect leave it there and still send the REP and the RTU. A QP
/// moved for another connection is refused before the REP, and the request
/// is still there for one moved for this one.
#[test]
fn qps_moved_by_the_application_connect_and_carry_a_send() {
    let (a, b) = (side(addr::v4()), side(addr::v4()));
    let moved = |qp: &Qp, s: &QpSetup| {
        let c = RcConnection::from(s);
        for (attr, mask) in [c.rtr(), c.rts()] {
            qp.modify(&attr, mask).unwrap();
        }
    };
    let l = Endpoint::new(&b.dev).unwrap();
    l.listen(7503, 4).unwrap();
    let eb = Endpoint::new(&b.dev).unwrap();
    let req = l.get_request(&eb).unwrap();
    let ea = Endpoint::new(&a.dev).unwrap();
    let rep = ea
        .connect(&a.qp, kit::connect_args(b.addr(), 7503))
        .unwrap();
    let req = ended(req).unwrap();
    assert_eq!(
        (req.qp.dest_qpn, req.qp.remote_addr),
        (a.qp.qpn(), a.addr())
    );

    // Another connection's PSN: refused, nothing sent.
    let other = b.pd.create_qp(&QpInitAttr::new(&b.cq, &b.cq)).unwrap();
    let (init, m) = RcParams::default().init();
    other.modify(&init, m).unwrap();
    moved(
        &other,
        &QpSetup {
            rq_psn: req.qp.rq_psn ^ 1,
            ..req.qp
        },
    );
    let e = ended(eb.accept(&other, accept_args()).unwrap()).unwrap_err();
    assert_eq!(
        (e.kind(), e.errno()),
        (ErrorKind::InvalidState, libc::EINVAL)
    );

    moved(&b.qp, &req.qp);
    let rtu = eb.accept(&b.qp, accept_args()).unwrap();
    assert_eq!(b.qp.state(), QpState::Rts);
    let info = ended(rep).unwrap();
    assert_eq!(
        (info.qp.dest_qpn, info.qp.sq_psn, info.qp.rq_psn),
        (b.qp.qpn(), req.qp.rq_psn, req.qp.sq_psn)
    );
    assert_eq!(
        a.qp.state(),
        QpState::Init,
        "untouched until the application moves it"
    );
    moved(&a.qp, &info.qp);
    ended(ea.complete_connect(&a.qp).unwrap()).unwrap();
    ended(rtu).unwrap();

    b.qp.post_recv(RecvWr::new(1, b.mr.sge(0, 64))).unwrap();
    a.qp.post_send(SendWr::new(2, SendOp::Send, a.mr.sge(0, 64)))
        .unwrap();
    assert_eq!(kit::wc_ok(&a.cq).wr_id, 2);
    let wc = kit::wc_ok(&b.cq);
    assert_eq!((wc.wr_id, wc.byte_len), (1, 64));
}
