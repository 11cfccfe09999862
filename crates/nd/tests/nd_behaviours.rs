//! The behaviours networkdirect.md §9 lists for Microsoft's ND tests (ndconn,
//! ndmemorytest, ndmval, ndcq, ndmw), and the connector statuses
//! `plan/issue13-decisions.md` pins, on loopback adapters.

mod common;

use common::{side, Side};
use ndverbs_nd::*;
use ndverbs_testkit::{addr, nd::results};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

/// A side whose adapter moves only when driven ([`drive`]): what arrived
/// is read when a test says so, which lets it order events across sides.
fn manual_side(ip: IpAddr) -> Side {
    let config = DeviceConfig {
        progress: Progress::Manual,
        ..DeviceConfig::default()
    };
    let ad = Provider.open_adapter_with(ip, &config).unwrap();
    let cq = ad.create_completion_queue(64).unwrap();
    let qp = ad
        .create_queue_pair(&cq, &cq, 7, QueuePairSizes::new(16, 2).with_inline(64))
        .unwrap();
    let mr = ad.create_memory_region().unwrap();
    mr.register(1 << 16, MrFlags::ALLOW_LOCAL_WRITE)
        .wait()
        .unwrap();
    Side { ad, cq, qp, mr }
}

/// Drives the manual-progress adapters of `sides` until `p` completes.
#[track_caller]
fn drive<R: Send + 'static>(sides: &[&Side], mut p: NdPending<R>) -> NdResult<R> {
    let t0 = Instant::now();
    loop {
        if let Some(r) = p.try_take() {
            return r;
        }
        assert!(t0.elapsed() < T, "not done within {T:?}");
        for s in sides {
            s.ad.device().progress();
        }
    }
}

/// Connects a (client) to b (server listening on `port`), driving both
/// manual-progress adapters; returns the connectors.
fn connect_driven(a: &Side, b: &Side, port: u16) -> (Connector, Connector, Listener) {
    let both = [a, b];
    let l = b.ad.create_listener().unwrap();
    l.bind(at(b, port)).unwrap();
    l.listen(8).unwrap();
    let cb = b.ad.create_connector().unwrap();
    let req = l.get_connection_request(&cb).unwrap();
    let ca = a.ad.create_connector().unwrap();
    let conn = ca.connect(&a.qp, at(b, port), 4, 4, b"").unwrap();
    drive(&both, req).unwrap();
    let acc = cb.accept(&b.qp, 4, 4, b"").unwrap();
    drive(&both, conn).unwrap();
    drive(&both, ca.complete_connect().unwrap()).unwrap();
    drive(&both, acc).unwrap();
    (ca, cb, l)
}

/// Two sides on a fresh address pair.
fn sides() -> (Side, Side) {
    let (a, b) = addr::pair_v4();
    (side(a), side(b))
}

/// `port` on `s`'s address.
fn at(s: &Side, port: u16) -> SocketAddr {
    SocketAddr::new(s.ad.address(), port)
}

fn status<T: std::fmt::Debug>(r: Result<T, NdError>) -> NdStatus {
    match r {
        Ok(_) => NdStatus::SUCCESS,
        Err(e) => e.status,
    }
}

/// Connects a (client) to b (server listening on `port`); returns the connectors.
fn connect(a: &Side, b: &Side, port: u16) -> (Connector, Connector, Listener) {
    let l = b.ad.create_listener().unwrap();
    l.bind(SocketAddr::new(b.ad.address(), port)).unwrap();
    l.listen(8).unwrap();
    let cb = b.ad.create_connector().unwrap();
    let req = l.get_connection_request(&cb).unwrap();
    let ca = a.ad.create_connector().unwrap();
    let conn = ca
        .connect(
            &a.qp,
            SocketAddr::new(b.ad.address(), port),
            4,
            4,
            b"caller",
        )
        .unwrap();
    let mut req = req;
    req.wait_timeout(T).expect("request").unwrap();
    assert_eq!(&cb.get_private_data().unwrap()[..6], b"caller");
    assert_eq!(cb.get_peer_address().unwrap().ip(), a.ad.address());
    let acc = cb.accept(&b.qp, 4, 4, b"callee").unwrap();
    let mut conn = conn;
    conn.wait_timeout(T).expect("connect").unwrap();
    assert_eq!(&ca.get_private_data().unwrap()[..6], b"callee");
    ca.complete_connect().unwrap().wait().unwrap();
    let mut acc = acc;
    acc.wait_timeout(T).expect("accept").unwrap();
    (ca, cb, l)
}

#[test]
fn ndconn_crossing_disconnects_and_notify_cancel() {
    let (ia, ib) = addr::pair_v4();
    let (a, b) = (manual_side(ia), manual_side(ib));
    let both = [&a, &b];
    for round in 0..3u16 {
        let (a2, b2) = (side_from(&a, 7), side_from(&b, 9));
        b2.qp.receive(1, &[]).unwrap();
        let (ca, cb, _l) = connect_driven(&a2, &b2, 5000 + round);
        let notify = cb.notify_disconnect().unwrap();
        // Both Disconnects go out before either adapter reads the other's
        // DREQ: they cross, always. Both must succeed.
        let da = ca.disconnect().unwrap();
        let db = cb.disconnect().unwrap();
        drive(&both, da).unwrap();
        drive(&both, db).unwrap();
        // The client's DREQ reached the server: its NotifyDisconnect
        // succeeded, and cancelling afterwards changes nothing.
        cb.cancel_overlapped_requests().unwrap();
        assert_eq!(status(drive(&both, notify)), NdStatus::SUCCESS);
        // The server's receive was flushed by its Disconnect, and its result
        // was on the CQ when the Disconnect completed.
        let r =
            b.cq.get_result()
                .expect("flushed before the Disconnect completed");
        assert_eq!(
            (r.status, r.request_type, r.queue_pair_context),
            (NdStatus::CANCELED, RequestType::Receive, 9)
        );
    }
    // No crossing — the server disconnects first and the client answers
    // once the DREQ is in: no DREQ ever reaches the server, so its
    // NotifyDisconnect stays pending through its Disconnect until the
    // cancel ends it CANCELED (what ndconn expects).
    let (a2, b2) = (side_from(&a, 7), side_from(&b, 9));
    let (ca, cb, _l) = connect_driven(&a2, &b2, 5003);
    let (na, nb) = (
        ca.notify_disconnect().unwrap(),
        cb.notify_disconnect().unwrap(),
    );
    let db = cb.disconnect().unwrap();
    assert_eq!(status(drive(&both, na)), NdStatus::SUCCESS);
    drive(&both, ca.disconnect().unwrap()).unwrap();
    drive(&both, db).unwrap();
    let mut nb = nb;
    for _ in 0..100 {
        a.ad.device().progress();
        b.ad.device().progress();
    }
    assert!(nb.try_take().is_none(), "no DREQ reached the server");
    cb.cancel_overlapped_requests().unwrap();
    assert_eq!(status(drive(&both, nb)), NdStatus::CANCELED);
}

/// A fresh queue pair (with `context`) and region on `s`'s adapter and CQ.
fn side_from(s: &Side, context: u64) -> Side {
    let mr = s.ad.create_memory_region().unwrap();
    mr.register(4096, MrFlags::ALLOW_LOCAL_WRITE)
        .wait()
        .unwrap();
    let qp =
        s.ad.create_queue_pair(&s.cq, &s.cq, context, QueuePairSizes::new(4, 1));
    Side {
        ad: s.ad.clone(),
        cq: s.cq.clone(),
        qp: qp.unwrap(),
        mr,
    }
}

#[test]
fn ndmemorytest_connection_cases() {
    let (a, b) = sides();
    // ndconnectlistenerclosing: no listener → CONNECTION_REFUSED.
    let c = a.ad.create_connector().unwrap();
    let r = c.connect(&a.qp, at(&b, 6000), 1, 1, b"").unwrap().wait();
    assert_eq!(status(r), NdStatus::CONNECTION_REFUSED);
    // A failed Connect leaves connector and QP reusable (ndconn retries).
    let l = b.ad.create_listener().unwrap();
    l.bind(at(&b, 6001)).unwrap();
    l.listen(4).unwrap();
    // ndduallisten: a second listener on the same address.
    let l2 = b.ad.create_listener().unwrap();
    assert_eq!(
        status(l2.bind(at(&b, 6001))),
        NdStatus::ADDRESS_ALREADY_ASSOCIATED
    );
    assert!(l2.listen(4).is_err());
    // ndconnrejectclose: the client rejects after its Connect completed.
    let cb = b.ad.create_connector().unwrap();
    let req = l.get_connection_request(&cb).unwrap();
    let p = c.connect(&a.qp, at(&b, 6001), 1, 1, b"").unwrap();
    req.wait().unwrap();
    let acc = cb.accept(&b.qp, 1, 1, b"").unwrap();
    p.wait().unwrap();
    c.reject(b"").unwrap();
    assert_eq!(status(acc.wait()), NdStatus::CONNECTION_REFUSED);
    // nddualconnection: bind again after Connect; a second Connect.
    let c2 = a.ad.create_connector().unwrap();
    let qp2 =
        a.ad.create_queue_pair(&a.cq, &a.cq, 0, QueuePairSizes::new(1, 1))
            .unwrap();
    let _pending = c2.connect(&qp2, at(&b, 6001), 1, 1, b"").unwrap();
    assert_eq!(
        status(c2.bind(at(&a, 0))),
        NdStatus::ADDRESS_ALREADY_ASSOCIATED
    );
    assert_eq!(
        status(c2.connect(&qp2, at(&b, 6001), 1, 1, b"")),
        NdStatus::CONNECTION_ACTIVE
    );
    // ndlargeprivatedata: max fits, max + 1 does not.
    let info = a.ad.query(ND_VERSION_2).unwrap();
    let c3 = a.ad.create_connector().unwrap();
    let big = vec![1u8; info.max_caller_data as usize + 1];
    assert_eq!(
        status(c3.connect(&qp2, at(&b, 6001), 1, 1, &big)),
        NdStatus::INVALID_BUFFER_SIZE
    );
    let cb3 = b.ad.create_connector().unwrap();
    assert_eq!(
        status(cb3.accept(&b.qp, 1, 1, &vec![0; info.max_callee_data as usize + 1])),
        NdStatus::INVALID_BUFFER_SIZE
    );
    // Disconnect on a never-connected connector.
    assert_eq!(status(c3.disconnect()), NdStatus::CONNECTION_INVALID);
}

#[test]
fn ndmemorytest_queue_pair_and_memory_cases() {
    let a = side(addr::v4());
    let info = a.ad.query(ND_VERSION_2).unwrap();
    // ndlargeqpdepth / ndqpmaxall.
    let deep = QueuePairSizes {
        receive_queue_depth: info.max_receive_queue_depth + 1,
        ..QueuePairSizes::new(1, 1)
    };
    assert!(a.ad.create_queue_pair(&a.cq, &a.cq, 0, deep).is_err());
    let tiny = a.ad.create_completion_queue(1).unwrap();
    let all_maximum = QueuePairSizes {
        receive_queue_depth: info.max_receive_queue_depth,
        initiator_queue_depth: info.max_initiator_queue_depth,
        max_receive_sge: info.max_receive_sge,
        max_initiator_sge: info.max_initiator_sge,
        inline_data_size: info.max_inline_data_size,
    };
    a.ad.create_queue_pair(&tiny, &tiny, 0, all_maximum)
        .expect("all-maximum QP");
    // ndmrinvalidbuffer.
    let mr = a.ad.create_memory_region().unwrap();
    assert_eq!(
        status(unsafe { mr.register_raw(std::ptr::null_mut(), 0, MrFlags::empty()) }.wait()),
        NdStatus::INVALID_PARAMETER
    );
    assert_eq!(
        status(mr.register(0, MrFlags::empty()).wait()),
        NdStatus::INVALID_BUFFER_SIZE
    );
    // Query with a wrong version.
    assert_eq!(status(a.ad.query(7)), NdStatus::INVALID_PARAMETER);
    // ndreceiveflushqp: two receives, Flush → one notify, both CANCELED.
    a.qp.receive(1, &[]).unwrap();
    a.qp.receive(2, &[]).unwrap();
    let n = a.cq.notify(NotifyType::Any);
    a.qp.flush().unwrap();
    n.wait().unwrap();
    let r = results(&a.cq, 2);
    assert!(r
        .iter()
        .all(|r| r.status == NdStatus::CANCELED && r.request_type == RequestType::Receive));
    assert_eq!((r[0].request_context, r[1].request_context), (1, 2));
    // ndcq: two Notify(ANY), cancel → both CANCELED in order.
    let n1 = a.cq.notify(NotifyType::Any);
    let n2 = a.cq.notify(NotifyType::Any);
    a.cq.cancel_overlapped_requests();
    assert_eq!(
        (status(n1.wait()), status(n2.wait())),
        (NdStatus::CANCELED, NdStatus::CANCELED)
    );
    // Resize below the fill fails and keeps everything.
    a.qp.receive(3, &[]).unwrap();
    a.qp.receive(4, &[]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(status(a.cq.resize(1)), NdStatus::BUFFER_OVERFLOW);
    assert_eq!(results(&a.cq, 2).len(), 2);
}

#[test]
fn ndmemorytest_remote_access_cases() {
    let (a, b) = sides();
    let (_ca, _cb, _l) = connect(&a, &b, 6100);
    let lsge =
        |s: &Side, off: u64, len: u32| NdSge::new(s.mr.address() + off, len, s.mr.local_token());
    // A good WRITE and READ through the MR, 100 bytes in: where the window
    // will be.
    let window = b.mr.address() + 100;
    a.mr.write(0, b"0123456789").unwrap();
    let flags = OpFlags::empty();
    a.qp.write(1, &[lsge(&a, 0, 10)], window, b.mr.remote_token(), flags)
        .unwrap();
    assert_eq!(results(&a.cq, 1)[0].status, NdStatus::SUCCESS);
    let mut got = [0u8; 10];
    b.mr.read(100, &mut got).unwrap();
    assert_eq!(&got, b"0123456789");
    // ndmw: bind a read-only window, read through it.
    let mw = b.ad.create_memory_window().unwrap();
    b.qp.bind(5, &b.mr, &mw, window, 10, OpFlags::ALLOW_READ)
        .unwrap();
    let r = results(&b.cq, 1);
    assert_eq!(
        (r[0].status, r[0].request_type, r[0].request_context),
        (NdStatus::SUCCESS, RequestType::Bind, 5)
    );
    a.qp.read(2, &[lsge(&a, 1000, 10)], window, mw.remote_token(), flags)
        .unwrap();
    assert_eq!(results(&a.cq, 1)[0].status, NdStatus::SUCCESS);
    // ndmrderegister: a bound window keeps the region busy.
    assert_eq!(status(b.mr.deregister().wait()), NdStatus::DEVICE_BUSY);
    // ndwriteviolation: WRITE into the read-only window → ACCESS_VIOLATION at
    // the writer; the owner's posted zero-SGE receive is flushed (its QP went
    // to ERROR on the access error).
    b.qp.receive(9, &[]).unwrap();
    a.qp.write(3, &[lsge(&a, 0, 4)], window, mw.remote_token(), flags)
        .unwrap();
    assert_eq!(results(&a.cq, 1)[0].status, NdStatus::ACCESS_VIOLATION);
    let r = results(&b.cq, 1);
    assert_eq!((r[0].status, r[0].request_context), (NdStatus::CANCELED, 9));
    // Later requests on the dead QP complete CANCELED.
    a.qp.send(4, &[], flags).unwrap();
    assert_eq!(results(&a.cq, 1)[0].status, NdStatus::CANCELED);
}

#[test]
fn ndmemorytest_overreadwrite_and_invalidated_window() {
    let (a, b) = sides();
    let (_ca, _cb, _l) = connect(&a, &b, 6200);
    let sge = NdSge::new(a.mr.address(), 64, a.mr.local_token());
    // ndinvalidreadwrite: through an invalidated window.
    let mw = b.ad.create_memory_window().unwrap();
    b.qp.bind(
        1,
        &b.mr,
        &mw,
        b.mr.address(),
        4096,
        OpFlags::ALLOW_READ | OpFlags::ALLOW_WRITE,
    )
    .unwrap();
    results(&b.cq, 1);
    b.qp.invalidate(2, &mw, OpFlags::empty()).unwrap();
    let r = results(&b.cq, 1);
    assert_eq!(r[0].request_type, RequestType::Invalidate);
    a.qp.read(
        3,
        &[sge],
        b.mr.address(),
        mw.remote_token(),
        OpFlags::empty(),
    )
    .unwrap();
    assert_eq!(results(&a.cq, 1)[0].status, NdStatus::ACCESS_VIOLATION);
    a.qp.read(
        4,
        &[sge],
        b.mr.address(),
        b.mr.remote_token(),
        OpFlags::empty(),
    )
    .unwrap();
    assert_eq!(results(&a.cq, 1)[0].status, NdStatus::CANCELED);
    // ndoverreadwrite on a fresh connection: past the end of the region.
    let (c, d) = sides();
    let (_cc, _cd, _l2) = connect(&c, &d, 6201);
    let sge = NdSge::new(c.mr.address(), 64, c.mr.local_token());
    c.qp.write(
        5,
        &[sge],
        d.mr.address() + (1 << 16) - 32,
        d.mr.remote_token(),
        OpFlags::empty(),
    )
    .unwrap();
    assert_eq!(results(&c.cq, 1)[0].status, NdStatus::ACCESS_VIOLATION);
}

#[test]
fn ndmval_oversized_send() {
    let (a, b) = sides();
    let (_ca, _cb, _l) = connect(&a, &b, 6300);
    b.qp.receive(1, &[NdSge::new(b.mr.address(), 1023, b.mr.local_token())])
        .unwrap();
    a.qp.send(
        2,
        &[NdSge::new(a.mr.address(), 1024, a.mr.local_token())],
        OpFlags::empty(),
    )
    .unwrap();
    let r = results(&b.cq, 1);
    assert_eq!(r[0].status, NdStatus::DATA_OVERRUN, "receiver");
    let s = results(&a.cq, 1)[0].status;
    assert!(
        s == NdStatus::SUCCESS || s == NdStatus::DATA_ERROR,
        "sender {s}"
    );
}

#[test]
fn device_removal_completes_pending_requests() {
    let (a, b) = sides();
    let (_ca, cb, l) = connect(&a, &b, 6400);
    let notify = cb.notify_disconnect().unwrap();
    let next = b.ad.create_connector().unwrap();
    let req = l.get_connection_request(&next).unwrap();
    let cqn = b.cq.notify(NotifyType::Errors);
    b.qp.receive(1, &[]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    b.ad.remove();
    for s in [status(notify.wait()), status(req.wait())] {
        assert_eq!(s, NdStatus::DEVICE_REMOVED);
    }
    let r = results(&b.cq, 1);
    assert_eq!(r[0].status, NdStatus::DEVICE_REMOVED);
    // The CQ Notify pending at removal ends like every pending request (R1).
    assert_eq!(status(cqn.wait()), NdStatus::DEVICE_REMOVED);
    assert_eq!(status(b.qp.receive(2, &[])), NdStatus::DEVICE_REMOVED);
    assert_eq!(status(b.ad.create_connector()), NdStatus::DEVICE_REMOVED);
    assert_eq!(status(b.ad.query(ND_VERSION_2)), NdStatus::DEVICE_REMOVED);
}

/// ndmpic: two ranks connect to each other at the same time; the higher rank
/// keeps its active connection and rejects the peer's request; the lower rank
/// abandons its own connect and accepts. Private data 39 bytes; shutdown with
/// close/close_ack and Disconnect from both sides.
#[test]
fn ndmpic_simultaneous_connects() {
    let (r0, r1) = sides();
    let port = 5200;
    let listeners: Vec<Listener> = [&r0, &r1]
        .iter()
        .map(|s| {
            let l = s.ad.create_listener().unwrap();
            l.bind(SocketAddr::new(s.ad.address(), port)).unwrap();
            l.listen(4).unwrap();
            l
        })
        .collect();
    let key = |rank: u8| {
        let mut v = vec![rank];
        v.extend_from_slice(&[0xab; 38]);
        v
    };
    // Both sides: a passive connector waiting, and an active Connect.
    let pass0 = r0.ad.create_connector().unwrap();
    let pass1 = r1.ad.create_connector().unwrap();
    let req0 = listeners[0].get_connection_request(&pass0).unwrap();
    let req1 = listeners[1].get_connection_request(&pass1).unwrap();
    let act0 = r0.ad.create_connector().unwrap();
    let act1 = r1.ad.create_connector().unwrap();
    let qp0_active = r0
        .ad
        .create_queue_pair(
            &r0.cq,
            &r0.cq,
            100,
            QueuePairSizes::new(4, 1).with_inline(64),
        )
        .unwrap();
    let c0 = act0
        .connect(
            &qp0_active,
            SocketAddr::new(r1.ad.address(), port),
            1,
            1,
            &key(0),
        )
        .unwrap();
    let c1 = act1
        .connect(
            &r1.qp,
            SocketAddr::new(r0.ad.address(), port),
            1,
            1,
            &key(1),
        )
        .unwrap();
    req0.wait().unwrap();
    req1.wait().unwrap();
    // GetPeerAddress before Accept.
    assert_eq!(pass0.get_peer_address().unwrap().ip(), r1.ad.address());
    assert_eq!(pass1.get_private_data().unwrap()[..39], key(0)[..]);
    // Rank 1 (higher) rejects rank 0's request and releases that connector.
    pass1.reject(&[]).unwrap();
    drop(pass1);
    // Rank 0's own Connect ends REFUSED: rank 1 rejected it.
    assert_eq!(status(c0.wait()), NdStatus::CONNECTION_REFUSED);
    drop((act0, qp0_active));
    // Rank 0 accepts rank 1's request.
    let acc = pass0.accept(&r0.qp, 1, 1, &key(0)).unwrap();
    c1.wait().expect("rank 1's connect must succeed");
    act1.complete_connect().unwrap().wait().unwrap();
    acc.wait().unwrap();
    // Shutdown: close, close_ack, then Disconnect from both sides.
    r0.qp
        .receive(1, &[NdSge::new(r0.mr.address(), 16, r0.mr.local_token())])
        .unwrap();
    r1.qp
        .receive(2, &[NdSge::new(r1.mr.address(), 16, r1.mr.local_token())])
        .unwrap();
    r1.qp.send_inline(3, b"close", OpFlags::empty()).unwrap();
    results(&r0.cq, 1);
    r0.qp
        .send_inline(4, b"close_ack", OpFlags::empty())
        .unwrap();
    results(&r1.cq, 2);
    results(&r0.cq, 1);
    let d0 = pass0.disconnect().unwrap();
    let d1 = act1.disconnect().unwrap();
    d0.wait().expect("rank 0 Disconnect");
    d1.wait().expect("rank 1 Disconnect");
}

/// Disconnect while the connection is being set up: `ND_CONNECTION_INVALID`
/// at once, nothing sent, the queue pair untouched — the setup then goes on.
#[test]
fn disconnect_during_setup_is_connection_invalid() {
    let (a, b) = sides();
    let l = b.ad.create_listener().unwrap();
    l.bind(at(&b, 6500)).unwrap();
    l.listen(4).unwrap();
    let cb = b.ad.create_connector().unwrap();
    let req = l.get_connection_request(&cb).unwrap();
    let ca = a.ad.create_connector().unwrap();
    let conn = ca.connect(&a.qp, at(&b, 6500), 1, 1, b"").unwrap();
    assert_eq!(status(ca.disconnect()), NdStatus::CONNECTION_INVALID);
    req.wait().unwrap();
    assert_eq!(status(cb.disconnect()), NdStatus::CONNECTION_INVALID);
    let acc = cb.accept(&b.qp, 1, 1, b"").unwrap();
    conn.wait().unwrap();
    // After the REP, before CompleteConnect; and the Accept waiting for the RTU.
    assert_eq!(status(ca.disconnect()), NdStatus::CONNECTION_INVALID);
    assert_eq!(status(cb.disconnect()), NdStatus::CONNECTION_INVALID);
    ca.complete_connect().unwrap().wait().unwrap();
    acc.wait().unwrap();
    // The connection works: a Send reaches the posted Receive.
    b.qp.receive(1, &[]).unwrap();
    a.qp.send(2, &[], OpFlags::empty()).unwrap();
    assert_eq!(results(&b.cq, 1)[0].status, NdStatus::SUCCESS);
    assert_eq!(results(&a.cq, 1)[0].status, NdStatus::SUCCESS);
}

/// A Connect to an address with no RoCE endpoint at all: its host answers
/// ICMP port unreachable, and the Connect is refused at once, as when
/// nobody listens on the port (REJ), instead of timing out.
#[test]
fn connect_to_no_roce_endpoint_is_refused_at_once() {
    let a = side(addr::v4());
    let c = a.ad.create_connector().unwrap();
    let nobody = SocketAddr::new(addr::v4(), 6610);
    let t0 = Instant::now();
    let r = c.connect(&a.qp, nobody, 1, 1, b"").unwrap().wait();
    assert_eq!(status(r), NdStatus::CONNECTION_REFUSED);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[test]
fn notify_disconnect_statuses() {
    let (a, b) = sides();
    // Never connected.
    let c = a.ad.create_connector().unwrap();
    assert_eq!(status(c.notify_disconnect()), NdStatus::CONNECTION_INVALID);
    // Its Connect failed (nobody listens).
    let r = c.connect(&a.qp, at(&b, 6600), 1, 1, b"").unwrap().wait();
    assert_eq!(status(r), NdStatus::CONNECTION_REFUSED);
    assert_eq!(status(c.notify_disconnect()), NdStatus::CONNECTION_INVALID);
    // Pending through our own Disconnect, which the peer answers: it stays
    // pending (no DREQ came) until cancelled.
    let (ca, cb, _l) = connect(&a, &b, 6601);
    let mut na = ca.notify_disconnect().unwrap();
    let nb = cb.notify_disconnect().unwrap();
    let da = ca.disconnect().unwrap();
    nb.wait().unwrap();
    cb.disconnect().unwrap().wait().unwrap();
    da.wait().unwrap();
    assert!(na.wait_timeout(Duration::from_millis(100)).is_none());
    // A new one: CONNECTION_INVALID on the side that heard no DREQ, SUCCESS
    // at once on the side that did.
    assert_eq!(status(ca.notify_disconnect()), NdStatus::CONNECTION_INVALID);
    assert_eq!(
        status(cb.notify_disconnect().unwrap().wait()),
        NdStatus::SUCCESS
    );
    ca.cancel_overlapped_requests().unwrap();
    assert_eq!(status(na.wait()), NdStatus::CANCELED);
}

#[test]
fn disconnect_after_the_queue_pair_was_released_is_canceled() {
    let (a, b) = sides();
    let a2 = side_from(&a, 3);
    let (ca, cb, _l) = connect(&a2, &b, 6700);
    let notify = cb.notify_disconnect().unwrap();
    drop(a2);
    // The DREQ still goes out (the peer hears it); the request ends CANCELED.
    let da = ca.disconnect().unwrap();
    notify.wait().unwrap();
    cb.disconnect().unwrap().wait().unwrap();
    assert_eq!(status(da.wait()), NdStatus::CANCELED);
}

#[test]
fn releasing_a_connector_cancels_its_requests() {
    let (a, b) = sides();
    // A Connect waiting for its REP.
    let l = b.ad.create_listener().unwrap();
    l.bind(at(&b, 6800)).unwrap();
    l.listen(4).unwrap();
    let cb = b.ad.create_connector().unwrap();
    let req = l.get_connection_request(&cb).unwrap();
    let ca = a.ad.create_connector().unwrap();
    let conn = ca.connect(&a.qp, at(&b, 6800), 1, 1, b"").unwrap();
    req.wait().unwrap();
    drop(ca);
    assert_eq!(status(conn.wait()), NdStatus::CANCELED);
    // A NotifyDisconnect and a Disconnect of an established connection.
    let (a, b) = sides();
    let (ca, _cb, _l) = connect(&a, &b, 6801);
    let notify = ca.notify_disconnect().unwrap();
    drop(ca);
    assert_eq!(status(notify.wait()), NdStatus::CANCELED);
    // A passive connector whose Accept waits for the RTU: CANCELED, and the
    // client's CompleteConnect finds the connection refused.
    let (a, b) = sides();
    let l = b.ad.create_listener().unwrap();
    l.bind(at(&b, 6802)).unwrap();
    l.listen(4).unwrap();
    let cb = b.ad.create_connector().unwrap();
    let req = l.get_connection_request(&cb).unwrap();
    let ca = a.ad.create_connector().unwrap();
    let conn = ca.connect(&a.qp, at(&b, 6802), 1, 1, b"").unwrap();
    req.wait().unwrap();
    let acc = cb.accept(&b.qp, 1, 1, b"").unwrap();
    conn.wait().unwrap();
    drop(cb);
    assert_eq!(status(acc.wait()), NdStatus::CANCELED);
}

#[test]
fn passive_connector_local_address_and_read_limits() {
    let (a, b) = sides();
    let l = b.ad.create_listener().unwrap();
    l.bind(at(&b, 6900)).unwrap();
    l.listen(4).unwrap();
    let cb = b.ad.create_connector().unwrap();
    let req = l.get_connection_request(&cb).unwrap();
    assert_eq!(status(cb.get_local_address()), NdStatus::CONNECTION_INVALID);
    // The client reads 2 at a time from the server and lets it read 4.
    let ca = a.ad.create_connector().unwrap();
    let conn = ca.connect(&a.qp, at(&b, 6900), 4, 2, b"").unwrap();
    req.wait().unwrap();
    assert_eq!(cb.get_local_address().unwrap(), at(&b, 6900));
    // Before Accept the server sees its own limits: inbound 2 (the client's
    // outbound), outbound 4 (the client's inbound).
    assert_eq!(cb.get_read_limits().unwrap(), (2, 4));
    let acc = cb.accept(&b.qp, 8, 8, b"").unwrap();
    conn.wait().unwrap();
    assert_eq!(ca.get_read_limits().unwrap(), (4, 2));
    ca.complete_connect().unwrap().wait().unwrap();
    acc.wait().unwrap();
    assert_eq!(cb.get_read_limits().unwrap(), (2, 4));
    assert_eq!(cb.get_local_address().unwrap(), at(&b, 6900));
    assert_eq!(ca.get_peer_address().unwrap(), at(&b, 6900));
}

#[test]
fn concurrent_connects_on_one_connector() {
    let (a, b) = sides();
    let l = b.ad.create_listener().unwrap();
    l.bind(at(&b, 6950)).unwrap();
    l.listen(4).unwrap();
    let ca = a.ad.create_connector().unwrap();
    let go = std::sync::Barrier::new(4);
    let statuses: Vec<NdStatus> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    go.wait();
                    status(ca.connect(&a.qp, at(&b, 6950), 1, 1, b""))
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let taken = statuses.iter().filter(|s| **s == NdStatus::SUCCESS).count();
    assert_eq!(taken, 1, "{statuses:?}");
    assert!(statuses
        .iter()
        .all(|s| *s == NdStatus::SUCCESS || *s == NdStatus::CONNECTION_ACTIVE));
}
