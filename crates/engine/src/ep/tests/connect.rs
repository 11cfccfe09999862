//! Connect, GetConnectionRequest, Accept, CompleteConnect and Reject: the
//! phases in order, what each request returns, and the refusals.

use super::*;
use ndverbs_proto::cm::CmError;
use ndverbs_wire::cm::rej_reason;

#[test]
fn connect_rep_complete_connect_rtu() {
    let (mut p, c, connect) = Pair::connecting();
    // Connect checks the QP and sends the REQ; the QP stays in INIT.
    assert_eq!(p.a.ops_on(c.qa), [Op::CheckInit]);
    assert_eq!(p.a.state_name(c.ea), "Connecting");
    p.pump();
    let req = p.b.request_result(c.get).unwrap().unwrap();
    assert_eq!(
        (req.peer, req.peer_port, req.local),
        (p.a.ip(), 40000, p.b.ip())
    );
    assert!(req.private_data.starts_with(b"from a"));
    assert_eq!(req.peer_read_limits, (4, 2));
    // What B's endpoint reports before Accept is B's view (ND's
    // GetReadLimits): A's outbound limit is B's inbound one.
    let info = p.b.eps.info(&p.b.cm, c.eb).unwrap();
    assert_eq!(info.read_limits, (2, 4));
    assert_eq!(p.b.state_name(c.eb), "RequestReceived");
    assert!(p.a.pending(connect), "the Connect waits for the REP");

    // Accept: QP phase (INIT check, RTS) before the REP goes out.
    let accept = p.b.accept(c.eb, c.qb).unwrap();
    assert_eq!(p.b.ops_on(c.qb), [Op::CheckInit, Op::ToRts]);
    assert_eq!(p.b.qps[&c.qb], QpState::Rts);
    assert_eq!(p.b.state_name(c.eb), "Accepting");
    p.pump();
    let info = p.a.connect_result(connect).unwrap().unwrap();
    assert!(info.private_data.starts_with(b"from b"));
    assert_eq!(info.read_limits, (4, 2));
    assert_eq!(
        p.a.qps[&c.qa],
        QpState::Init,
        "untouched until CompleteConnect"
    );
    assert_eq!(p.a.state_name(c.ea), "RepReceived");
    assert!(p.b.pending(accept), "the Accept waits for the RTU");

    // CompleteConnect: QP to RTS, then the RTU; the Accept completes on it.
    let complete = p.a.complete_connect(c.ea, c.qa).unwrap();
    assert_eq!(p.a.ops_on(c.qa), [Op::CheckInit, Op::ToRts]);
    p.pump();
    assert_eq!(p.a.result(complete), Some(Ok(())));
    assert_eq!(p.b.result(accept), Some(Ok(())));
    assert_eq!(p.a.state_name(c.ea), "Connected");
    assert_eq!(p.b.state_name(c.eb), "Connected");
    assert_eq!(
        (p.sent(Who::A), p.sent(Who::B)),
        (vec![REQ, RTU], vec![REP])
    );
    // What B's endpoint reports: the limits clamped to A's offer.
    let info = p.b.eps.info(&p.b.cm, c.eb).unwrap();
    assert_eq!((info.peer, info.read_limits), (Some(p.a.ip()), (2, 4)));
    assert!(info.comm_ids.is_some() && !info.listening && !info.dreq_received);
}

#[test]
fn complete_connect_queued_behind_connect_runs_on_the_rep() {
    let (mut p, c, connect) = Pair::connecting();
    let complete = p.a.complete_connect(c.ea, c.qa).unwrap();
    assert!(p.a.pending(complete));
    p.pump();
    let accept = p.b.accept(c.eb, c.qb).unwrap();
    p.pump();
    assert!(p.a.connect_result(connect).unwrap().is_ok());
    assert_eq!(p.a.result(complete), Some(Ok(())));
    assert_eq!(p.b.result(accept), Some(Ok(())));
}

#[test]
fn connect_to_a_port_nobody_listens_on_is_rejected() {
    let mut p = Pair::new();
    let to = p.b.ip();
    let (ea, qa, connect) = p.a.connect_new(cargs(to));
    p.pump();
    assert_eq!(
        rejected(p.a.connect_result(connect)).0,
        rej_reason::INVALID_SERVICE_ID
    );
    assert_eq!(p.a.state_name(ea), "Closed");
    assert_eq!(
        p.a.qps[&qa],
        QpState::Init,
        "a failed Connect leaves the QP alone"
    );
    // The same endpoint and QP may connect again (ND clients retry).
    let (_, _, get) = p.listen();
    p.connect_again(ea, qa, get);
}

#[test]
fn passive_reject_fails_the_connect() {
    let (mut p, c, connect) = Pair::requested();
    p.b.reject(c.eb, b"not now").unwrap();
    p.pump();
    let (reason, private_data) = rejected(p.a.connect_result(connect));
    assert_eq!(reason, rej_reason::CONSUMER_DEFINED);
    assert!(private_data.starts_with(b"not now"));
    assert_eq!(p.states(&c), ["Closed", "Closed"]);
    assert_eq!(p.a.qps[&c.qa], QpState::Init);
    assert_eq!(p.sent(Who::B), [REJ]);
    // The REJ's private data is what the endpoint reports.
    let info = p.a.eps.info(&p.a.cm, c.ea).unwrap();
    assert!(info.private_data.starts_with(b"not now"));
    // Rejecting again: the CM refuses (nothing left to reject).
    assert_eq!(
        p.b.reject(c.eb, b""),
        Err(Refused::InvalidArgument(
            "not allowed in the connection's state"
        ))
    );
}

#[test]
fn active_reject_after_the_rep_fails_the_accept() {
    let (mut p, c, accept) = Pair::accepted();
    p.a.reject(c.ea, b"limits").unwrap();
    p.pump();
    assert_eq!(rejected(p.b.result(accept)).0, rej_reason::CONSUMER_DEFINED);
    assert_eq!(p.states(&c), ["Closed", "Closed"]);
    // B's QP went to RTS before its REP and stays there; A's never moved.
    assert_eq!(
        (p.a.qps[&c.qa], p.b.qps[&c.qb]),
        (QpState::Init, QpState::Rts)
    );
    // Pinned: a CompleteConnect after the Reject still moves the
    // QP (the REP's attributes are kept), then the CM refuses the RTU.
    let complete = p.a.complete_connect(c.ea, c.qa).unwrap();
    assert!(matches!(
        p.a.result(complete),
        Some(Err(EpError::Cm(CmError::InvalidState(_))))
    ));
    assert_eq!(p.a.qps[&c.qa], QpState::Rts);
}

#[test]
fn accept_and_connect_time_out_when_the_rep_is_lost() {
    let (mut p, c, connect) = Pair::requested();
    p.drop.push((Who::B, REP));
    let accept = p.b.accept(c.eb, c.qb).unwrap();
    p.advance(LONG);
    assert_eq!(p.b.result(accept), Some(Err(EpError::Timeout)));
    // B's MRA for A's last REQ stretched A's wait (rdma_cm: ~67 s).
    assert_eq!(p.sent(Who::B).last(), Some(&MRA));
    p.advance(Duration::from_secs(120));
    assert_eq!(p.a.connect_result(connect), Some(Err(EpError::Timeout)));
    assert_eq!(p.states(&c), ["Closed", "Closed"]);
}

#[test]
fn request_phases_refuse_what_does_not_fit() {
    let mut p = Pair::new();
    let (_, eb, _) = p.listen();
    let (qa, qb) = (p.a.qp(), p.b.qp());
    // CompleteConnect and Accept with no connection: failed, no QP touched.
    let ea = p.a.create();
    let complete = p.a.complete_connect(ea, qa).unwrap();
    assert_eq!(
        p.a.result(complete),
        Some(Err(EpError::InvalidState(
            "CompleteConnect before Connect completed"
        )))
    );
    let accept = p.a.accept(ea, qa).unwrap();
    assert_eq!(
        p.a.result(accept),
        Some(Err(EpError::InvalidState(
            "Accept without a connection request"
        )))
    );
    assert!(p.a.ops.is_empty());

    // A QP not in INIT: refused before anything goes on the wire.
    p.a.qps.insert(qa, QpState::Rts);
    let connect = p.a.connect(ea, qa, p.b.ip()).unwrap();
    assert_eq!(
        p.a.connect_result(connect),
        Some(Err(EpError::InvalidState("the QP is not in INIT")))
    );
    assert_eq!(p.a.state_name(ea), "Idle");
    p.pump();
    assert!(p.sent(Who::A).is_empty());

    let qa2 = p.a.qp();
    p.a.connect(ea, qa2, p.b.ip()).unwrap();
    p.pump();
    // (RTR and RTS are taken: the application may have moved it itself,
    // see `qps_the_application_moved_itself_are_left_in_rts`.)
    p.b.qps.insert(qb, QpState::Err);
    let accept = p.b.accept(eb, qb).unwrap();
    assert_eq!(
        p.b.result(accept),
        Some(Err(EpError::InvalidState("the QP is not in INIT")))
    );
    assert_eq!(p.b.ops_on(qb), [Op::CheckInit]);
    assert_eq!(p.b.state_name(eb), "RequestReceived");
    p.pump();
    assert!(!p.sent(Who::B).contains(&REP));
    // The request is still there: a good QP can accept it.
    let qb2 = p.b.qp();
    p.b.accept(eb, qb2).unwrap();
    p.pump();
    assert!(p.sent(Who::B).contains(&REP));
}

#[test]
fn calls_refused_at_once() {
    let mut p = Pair::new();
    let qa = p.a.qp();
    let ea = p.a.create();
    assert_eq!(p.a.connect(99, qa, p.b.ip()), Err(Refused::NoEndpoint(99)));
    let never = QpIdent {
        qpn: 0x7777,
        generation: 99,
    };
    assert_eq!(p.a.connect(ea, never, p.b.ip()), Err(Refused::NoQp(0x7777)));
    // A released QP whose number a new QP took: the old identity names
    // nothing.
    let released = p.a.qp();
    p.a.reuse(released);
    assert_eq!(
        p.a.connect(ea, released, p.b.ip()),
        Err(Refused::NoQp(released.qpn))
    );
    assert_eq!(p.a.complete_connect(99, qa), Err(Refused::NoEndpoint(99)));
    assert_eq!(p.a.accept(99, qa), Err(Refused::NoEndpoint(99)));
    p.a.connect(ea, qa, p.b.ip()).unwrap();
    let busy = Err(Refused::Busy("connection already active"));
    assert_eq!(p.a.connect(ea, qa, p.b.ip()), busy);
    assert_eq!(
        p.a.listen(ea, 1),
        Err(Refused::Busy("the endpoint is already in use"))
    );
    let l = p.a.create();
    p.a.listen(l, 1).unwrap();
    assert_eq!(p.a.connect(l, qa, p.b.ip()), busy);
    let l2 = p.a.create();
    assert_eq!(
        p.a.listen(l2, 1),
        Err(Refused::Busy("the address is already being listened on"))
    );
    assert_eq!(
        p.a.get_request(ea, l2),
        Err(Refused::InvalidArgument("the endpoint is not listening"))
    );
    assert_eq!(p.a.get_request(l, 99), Err(Refused::NoEndpoint(99)));
    assert_eq!(
        p.a.reject(l2, b""),
        Err(Refused::InvalidArgument("no connection to reject"))
    );
}

#[test]
fn qp_gone_between_phases_is_a_status() {
    // Accept: the QP is released between the INIT check and RTS: no REP.
    let (mut p, c, connect) = Pair::requested();
    p.b.vanish = Some((c.qb, Op::ToRts));
    let accept = p.b.accept(c.eb, c.qb).unwrap();
    p.lost_its_qp(Who::B, accept, c.qb, REP);
    assert_eq!(p.b.state_name(c.eb), "RequestReceived");

    // CompleteConnect: the QP is gone at RTS: no RTU.
    let qb2 = p.b.qp();
    p.b.accept(c.eb, qb2).unwrap();
    p.pump();
    assert!(p.a.connect_result(connect).unwrap().is_ok());
    p.a.vanish = Some((c.qa, Op::ToRts));
    let complete = p.a.complete_connect(c.ea, c.qa).unwrap();
    p.lost_its_qp(Who::A, complete, c.qa, RTU);
    assert_eq!(p.a.state_name(c.ea), "RepReceived");

    // Connect: the QP is gone at the INIT check: no REQ.
    let mut p = Pair::new();
    let (qa, ea) = (p.a.qp(), p.a.create());
    p.a.vanish = Some((qa, Op::CheckInit));
    let connect = p.a.connect(ea, qa, p.b.ip()).unwrap();
    assert_eq!(
        p.a.connect_result(connect),
        Some(Err(EpError::NoQp(qa.qpn)))
    );
    p.pump();
    assert!(p.sent(Who::A).is_empty());
}

#[test]
fn listener_backlog_rejects_the_excess_and_requests_go_out_in_order() {
    let mut p = Pair::new();
    let l = p.b.create();
    p.b.listen(l, 2).unwrap();
    let to = p.b.ip();
    // Three REQs, nobody asking: two wait, the third is rejected.
    let mut connects = Vec::new();
    for pd in [b"one", b"two", b"thr"] {
        let args = ConnectArgs {
            private_data: pd.to_vec(),
            ..cargs(to)
        };
        connects.push(p.a.connect_new(args).2);
        p.pump();
    }
    let reason = rejected(p.a.connect_result(connects[2])).0;
    assert_eq!(reason, rej_reason::CONSUMER_DEFINED);
    assert!(p.a.pending(connects[0]) && p.a.pending(connects[1]));
    // GetConnectionRequests take them oldest first; a third one waits.
    let (e1, e2, e3) = (p.b.create(), p.b.create(), p.b.create());
    let g1 = p.b.get_request(l, e1).unwrap();
    let g2 = p.b.get_request(l, e2).unwrap();
    let g3 = p.b.get_request(l, e3).unwrap();
    assert_eq!(
        (p.b.request_data(g1), p.b.request_data(g2)),
        (b"one".to_vec(), b"two".to_vec())
    );
    assert!(p.b.pending(g3));
    // A destroyed waiter passes the next request on to the one behind it.
    let e4 = p.b.create();
    let g4 = p.b.get_request(l, e4).unwrap();
    p.b.destroy(e3).unwrap();
    p.a.connect_new(cargs(to));
    p.pump();
    assert_eq!(p.b.request_result(g3), Some(Err(EpError::Canceled)));
    assert!(p.b.request_result(g4).unwrap().is_ok());
    assert_eq!(p.b.state_name(e4), "RequestReceived");
}

#[test]
fn waiting_get_requests_are_served_in_the_order_they_were_made() {
    let mut p = Pair::new();
    let l = p.b.create();
    p.b.listen(l, 1).unwrap();
    let (e1, e2) = (p.b.create(), p.b.create());
    let g1 = p.b.get_request(l, e1).unwrap();
    let g2 = p.b.get_request(l, e2).unwrap();
    let to = p.b.ip();
    for pd in [b"one", b"two"] {
        let args = ConnectArgs {
            private_data: pd.to_vec(),
            ..cargs(to)
        };
        p.a.connect_new(args);
        p.pump();
    }
    assert_eq!(
        (p.b.request_data(g1), p.b.request_data(g2)),
        (b"one".to_vec(), b"two".to_vec())
    );
    assert_eq!(
        (p.b.state_name(e1), p.b.state_name(e2)),
        ("RequestReceived".into(), "RequestReceived".into())
    );
}

/// rdma_cm's `qp_num` mode: each side moves its QP to RTS itself with the
/// attributes the request (B) and the REP (A) report; Accept and
/// CompleteConnect leave such a QP where it is and still send the REP and
/// the RTU. The PSN B's request reports is the one its REP carries.
#[test]
fn qps_the_application_moved_itself_are_left_in_rts() {
    let (mut p, c, connect) = Pair::requested();
    let req = p.b.request_result(c.get).unwrap().unwrap();
    assert_eq!((req.qp.dest_qpn, req.qp.remote_addr), (c.qa.qpn, p.a.ip()));
    assert_eq!(
        (req.qp.max_dest_rd_atomic, req.qp.max_rd_atomic),
        (2, 4),
        "before the Accept, the read limits are the peer's offer"
    );
    p.b.move_to_rts(c.qb, &req.qp);
    let accept = p.b.accept(c.eb, c.qb).unwrap();
    assert_eq!(p.b.ops_on(c.qb), [Op::CheckInit, Op::ToRts]);
    assert_eq!(p.b.state_name(c.eb), "Accepting");
    p.pump();
    let info = p.a.connect_result(connect).unwrap().unwrap();
    assert_eq!(
        (info.qp.dest_qpn, info.qp.sq_psn, info.qp.rq_psn),
        (c.qb.qpn, req.qp.rq_psn, req.qp.sq_psn),
        "each side's send PSN is the other's receive PSN"
    );
    p.a.move_to_rts(c.qa, &info.qp);
    let complete = p.a.complete_connect(c.ea, c.qa).unwrap();
    p.pump();
    assert_eq!(p.a.result(complete), Some(Ok(())));
    assert_eq!(p.b.result(accept), Some(Ok(())));
    assert_eq!(p.states(&c), ["Connected", "Connected"]);
    assert_eq!(
        (p.sent(Who::A), p.sent(Who::B)),
        (vec![REQ, RTU], vec![REP])
    );
}

/// A QP moved to RTS for another connection is refused before the REP
/// leaves (Accept) or the RTU does (CompleteConnect).
#[test]
fn a_qp_moved_for_another_connection_is_refused() {
    let (mut p, c, _connect) = Pair::requested();
    let mut req = p.b.request_result(c.get).unwrap().unwrap();
    req.qp.rq_psn ^= 1;
    p.b.move_to_rts(c.qb, &req.qp);
    let accept = p.b.accept(c.eb, c.qb).unwrap();
    p.pump();
    assert!(matches!(
        p.b.result(accept),
        Some(Err(EpError::InvalidState(_)))
    ));
    assert_eq!(p.sent(Who::B), Vec::<u16>::new(), "no REP");

    let (mut p, c, connect) = Pair::requested();
    p.b.accept(c.eb, c.qb).unwrap();
    p.pump();
    let mut info = p.a.connect_result(connect).unwrap().unwrap();
    info.qp.dest_qpn ^= 1;
    p.a.move_to_rts(c.qa, &info.qp);
    let complete = p.a.complete_connect(c.ea, c.qa).unwrap();
    p.pump();
    assert!(matches!(
        p.a.result(complete),
        Some(Err(EpError::InvalidState(_)))
    ));
    assert_eq!(p.sent(Who::A), vec![REQ], "no RTU");
}
