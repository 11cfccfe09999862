//! Cancel, destroy, device removal and queries: every parked request ends,
//! and the CM says goodbye to the peer the Linux way.

use super::*;
use ndverbs_proto::cm::CmState;
use ndverbs_wire::cm::rej_reason;

#[test]
fn cancel_abandons_a_pending_connect_and_rejects_the_peer() {
    let (mut p, c, connect) = Pair::requested();
    p.a.cancel(c.ea).unwrap();
    assert_eq!(p.a.connect_result(connect), Some(Err(EpError::Canceled)));
    assert_eq!(p.a.state_name(c.ea), "Idle");
    p.pump();
    assert_eq!(p.sent(Who::A), [REQ, REJ]);
    assert_eq!(p.b.state_name(c.eb), "Closed");
    assert_eq!(p.a.qps[&c.qa], QpState::Init);
    // Idle again: the endpoint may connect anew.
    let waiting = p.b.create();
    let get = p.b.get_request(c.listener, waiting).unwrap();
    p.connect_again(c.ea, c.qa, get);
}

#[test]
fn cancel_abandons_a_pending_accept_and_rejects_the_peer() {
    let (mut p, c, accept) = Pair::accepted();
    p.b.cancel(c.eb).unwrap();
    assert_eq!(p.b.result(accept), Some(Err(EpError::Canceled)));
    assert_eq!(p.b.state_name(c.eb), "Idle");
    p.pump();
    match p.sent(Who::B).last() {
        Some(&REJ) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(p.a.state_name(c.ea), "Closed");
    assert_eq!(p.b.qps[&c.qb], QpState::Rts);
}

#[test]
fn cancel_ends_parked_requests_and_moves_no_qp() {
    let (mut p, c) = Pair::connected();
    let na = p.a.notify(c.ea).unwrap();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    p.a.cancel(c.ea).unwrap();
    assert_eq!(p.a.result(na), Some(Err(EpError::Canceled)));
    assert_eq!(p.a.result(da), Some(Err(EpError::Canceled)));
    assert_eq!(p.a.qps[&c.qa], QpState::Rts);
    assert_eq!(p.a.state_name(c.ea), "Disconnecting");
    // The DREQ is out all the same; when it is answered, nothing is left to run.
    p.pump();
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(p.a.state_name(c.ea), "Closed");
    assert_eq!(p.a.qps[&c.qa], QpState::Rts);
    assert!(!p.a.reserved.contains(&c.qa.qpn));

    // A Disconnect after the cancelled one, while the DREQ is still out:
    // it waits for the DREP, the QP untouched meanwhile.
    let (mut p2, c2) = Pair::connected();
    p2.a.disconnect(c2.ea, c2.qa).unwrap();
    p2.a.cancel(c2.ea).unwrap();
    let again = p2.a.disconnect(c2.ea, c2.qa).unwrap();
    p2.pump();
    assert!(p2.a.pending(again));
    assert_eq!(p2.a.qps[&c2.qa], QpState::Rts);
    p2.b.disconnect(c2.eb, c2.qb).unwrap();
    p2.pump();
    assert_eq!(p2.a.result(again), Some(Ok(())));
    assert_eq!(p2.a.qps[&c2.qa], QpState::Err);
    assert_eq!(p2.sent(Who::A), [DREQ], "one DREQ");

    // A listener's waiting GetConnectionRequests; it keeps listening.
    let waiting = p.b.create();
    let get = p.b.get_request(c.listener, waiting).unwrap();
    p.b.cancel(c.listener).unwrap();
    assert_eq!(p.b.request_result(get), Some(Err(EpError::Canceled)));
    assert!(p.b.eps.info(&p.b.cm, c.listener).unwrap().listening);
}

#[test]
fn destroy_ends_requests_and_says_goodbye() {
    // A pending Connect: Canceled, and the peer gets a REJ.
    let (mut p, c, connect) = Pair::requested();
    p.a.destroy(c.ea).unwrap();
    assert_eq!(p.a.connect_result(connect), Some(Err(EpError::Canceled)));
    assert_eq!(p.a.destroy(c.ea), Err(Refused::NoEndpoint(c.ea)));
    p.pump();
    assert_eq!(p.sent(Who::A), [REQ, REJ]);
    assert_eq!(p.b.state_name(c.eb), "Closed");

    // A parked Disconnect: Canceled; a connected endpoint sends its DREQ.
    let (mut p, c) = Pair::connected();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    p.a.destroy(c.ea).unwrap();
    assert_eq!(p.a.result(da), Some(Err(EpError::Canceled)));
    let (mut p2, c2) = Pair::connected();
    p2.b.destroy(c2.eb).unwrap();
    p2.pump();
    assert_eq!(p2.sent(Who::B), [DREQ]);
    assert_eq!(p2.a.state_name(c2.ea), "PeerDisconnected");

    // A listener: its waiters are Canceled, its unclaimed requests rejected.
    let mut p = Pair::new();
    let l = p.b.create();
    p.b.listen(l, 4).unwrap();
    let to = p.b.ip();
    let (_, _, connect) = p.a.connect_new(cargs(to));
    p.pump();
    let l2 = p.b.create();
    p.b.listen(l2, 4).unwrap_err();
    p.b.destroy(l).unwrap();
    p.pump();
    assert_eq!(
        rejected(p.a.connect_result(connect)).0,
        rej_reason::CONSUMER_DEFINED
    );
    // The port is free again.
    p.b.listen(l2, 4).unwrap();
}

#[test]
fn device_removal_fails_every_parked_request() {
    let (mut p, c) = Pair::connected();
    let na = p.a.notify(c.ea).unwrap();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    // A listener of A's own with a waiting GetConnectionRequest …
    let (la, wa) = (p.a.create(), p.a.create());
    p.a.listen(la, 1).unwrap();
    let get = p.a.get_request(la, wa).unwrap();
    // … and a Connect of A's waiting for B (whose listener nobody serves).
    let to = p.b.ip();
    let (e2, _, connect) = p.a.connect_new(cargs(to));
    p.pump();
    assert!(p.a.pending(na) && p.a.pending(da) && p.a.pending(get) && p.a.pending(connect));
    p.a.remove_device();
    let removed = Some(Err(EpError::DeviceRemoved));
    assert_eq!(
        (p.a.result(na), p.a.result(da)),
        (removed.clone(), removed.clone())
    );
    assert_eq!(p.a.request_result(get), Some(Err(EpError::DeviceRemoved)));
    assert_eq!(
        p.a.connect_result(connect),
        Some(Err(EpError::DeviceRemoved))
    );
    // The QPs are the core's to flush; the endpoints stay until destroyed.
    assert_eq!(p.a.qps[&c.qa], QpState::Rts);
    for ep in [c.ea, la, wa, e2] {
        p.a.destroy(ep).unwrap();
    }
    p.pump();
    assert_eq!(p.sent(Who::A), [DREQ, REQ], "nothing after the removal");
}

#[test]
fn endpoint_info_follows_the_connection() {
    let mut p = Pair::new();
    let (l, eb, _) = p.listen();
    let info = p.b.eps.info(&p.b.cm, l).unwrap();
    assert!(info.listening && info.cm_state.is_none() && info.peer.is_none());
    let fresh = p.b.eps.info(&p.b.cm, eb).unwrap();
    assert!(!fresh.listening && fresh.cm_state.is_none() && fresh.comm_ids.is_none());
    assert_eq!(p.b.eps.info(&p.b.cm, 99), Err(Refused::NoEndpoint(99)));

    let (p, c) = Pair::connected();
    let (ia, ib) = (
        p.a.eps.info(&p.a.cm, c.ea).unwrap(),
        p.b.eps.info(&p.b.cm, c.eb).unwrap(),
    );
    assert_eq!(
        (ia.cm_state, ib.cm_state),
        (Some(CmState::Established), Some(CmState::Established))
    );
    let (a_ids, b_ids) = (ia.comm_ids.unwrap(), ib.comm_ids.unwrap());
    assert_eq!(a_ids, (b_ids.1, b_ids.0));
    assert_eq!((ia.peer, ia.peer_port), (Some(p.b.ip()), PORT));
    assert_eq!((ib.peer, ib.peer_port), (Some(p.a.ip()), 40000));
    assert!(ia.private_data.starts_with(b"from b") && ib.private_data.starts_with(b"from a"));
}

#[test]
fn a_request_the_machine_loses_reads_as_lost_never_as_removal() {
    use crate::ep::waiters::Waiters;
    let mut p = Pair::new();
    let ep = p.a.create();
    let (dropped, mismatched) = (p.a.eps.request_id(ep), p.a.eps.request_id(ep));
    let mut w = Waiters::default();
    let (never, wrong) = (w.done(dropped), w.connect(mismatched));
    // An outcome of the wrong kind, and a table dropped with a request in it.
    let mut later = Vec::new();
    w.complete(mismatched, Outcome::Done(Ok(())), &mut later);
    later.into_iter().for_each(|f| f());
    drop(w);
    assert_eq!(never.try_take(), Some(Err(EpError::Lost)));
    assert_eq!(wrong.try_take(), Some(Err(EpError::Lost)));
}
