//! Disconnect and NotifyDisconnect (networkdirect.md §6: D1–D11, with the
//! statuses `plan/issue13-decisions.md` pins where the ND documents leave
//! room).

use super::*;

#[test]
fn dreq_then_drep_each_side_flushing_only_on_its_own_disconnect() {
    let (mut p, c) = Pair::connected();
    let nb = p.b.notify(c.eb).unwrap();
    assert!(p.b.pending(nb));
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    assert_eq!(p.a.state_name(c.ea), "Disconnecting");
    p.pump();
    // B: NotifyDisconnect completes, the QP is not touched, no DREP (D6);
    // A's Disconnect waits for it with its QP still in RTS and no QP
    // operation asked for (D2).
    assert_eq!(p.b.result(nb), Some(Ok(())));
    assert_eq!(p.b.state_name(c.eb), "PeerDisconnected");
    assert!(p.a.pending(da));
    assert_eq!(
        (p.a.qps[&c.qa], p.b.qps[&c.qb]),
        (QpState::Rts, QpState::Rts)
    );
    assert_eq!(p.a.ops_on(c.qa), [Op::CheckInit, Op::ToRts]);
    let again = p.b.notify(c.eb).unwrap();
    assert_eq!(p.b.result(again), Some(Ok(())), "the DREQ already arrived");
    assert!(p.b.eps.info(&p.b.cm, c.eb).unwrap().dreq_received);
    // B answers with the DREP: done at once (D1 second branch), QP to ERR.
    let db = p.b.disconnect(c.eb, c.qb).unwrap();
    assert_eq!(p.b.result(db), Some(Ok(())));
    assert_eq!(p.b.ops_on(c.qb).last(), Some(&Op::ToError));
    assert_eq!(p.b.qps[&c.qb], QpState::Err);
    assert!(p.b.reserved.contains(&c.qb.qpn));
    p.pump();
    assert_eq!(p.a.result(da), Some(Ok(())));
    assert_eq!(p.a.qps[&c.qa], QpState::Err);
    assert!(p.a.reserved.contains(&c.qa.qpn));
    assert_eq!((p.sent(Who::A), p.sent(Who::B)), (vec![DREQ], vec![DREP]));
    assert_eq!(p.states(&c), ["Closed", "Closed"]);
    // B heard the DREQ on this connection: a NotifyDisconnect still
    // succeeds at once. A heard none: refused.
    let late = p.b.notify(c.eb).unwrap();
    assert_eq!(p.b.result(late), Some(Ok(())));
    assert_eq!(p.a.notify(c.ea), Err(Refused::NotConnected));
    // Over: a second Disconnect is refused; the QPNs come back after time-wait.
    assert_eq!(p.a.disconnect(c.ea, c.qa), Err(Refused::NotConnected));
    p.advance(LONG);
    assert!(p.a.reserved.is_empty() && p.b.reserved.is_empty());
}

#[test]
fn unanswered_dreq_times_out_and_still_flushes() {
    let (mut p, c) = Pair::connected();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    p.pump();
    // B's application never calls Disconnect: its CM sends no DREP. Until
    // the DREQ times out A's QP stays in RTS, nothing flushed.
    p.advance(Duration::from_millis(100));
    assert!(p.a.pending(da));
    assert_eq!(p.a.qps[&c.qa], QpState::Rts);
    assert!(!p.a.ops_on(c.qa).contains(&Op::ToError));
    p.advance(LONG);
    assert_eq!(p.a.result(da), Some(Err(EpError::Timeout)));
    assert_eq!(p.a.qps[&c.qa], QpState::Err);
    assert_eq!(p.sent(Who::A), [DREQ; 4], "the DREQ and its 3 retries");
    assert_eq!(p.a.state_name(c.ea), "Closed");
    assert_eq!(p.b.state_name(c.eb), "PeerDisconnected");
    assert_eq!(p.b.qps[&c.qb], QpState::Rts);
}

#[test]
fn crossing_dreqs_both_succeed() {
    let (mut p, c) = Pair::connected();
    let (na, nb) = (p.a.notify(c.ea).unwrap(), p.b.notify(c.eb).unwrap());
    // Both DREQs are out before either is carried: they cross.
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    let db = p.b.disconnect(c.eb, c.qb).unwrap();
    assert_eq!(p.states(&c), ["Disconnecting", "Disconnecting"]);
    p.pump();
    for (s, d, n) in [(&p.a, da, na), (&p.b, db, nb)] {
        assert_eq!(s.result(d), Some(Ok(())));
        assert_eq!(s.result(n), Some(Ok(())), "the peer's DREQ arrived");
    }
    assert_eq!(
        (p.a.qps[&c.qa], p.b.qps[&c.qb]),
        (QpState::Err, QpState::Err)
    );
    assert_eq!(
        (p.sent(Who::A), p.sent(Who::B)),
        (vec![DREQ, DREP], vec![DREQ, DREP])
    );
}

#[test]
fn a_second_disconnect_queues_behind_the_first() {
    let (mut p, c) = Pair::connected();
    let d1 = p.a.disconnect(c.ea, c.qa).unwrap();
    let d2 = p.a.disconnect(c.ea, c.qa).unwrap();
    p.pump();
    assert!(p.a.pending(d1) && p.a.pending(d2));
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(
        (p.a.result(d1), p.a.result(d2)),
        (Some(Ok(())), Some(Ok(())))
    );
    assert_eq!(p.a.ops_on(c.qa)[2..], [Op::ToError, Op::ToError]);
    assert_eq!(p.sent(Who::A), [DREQ]);
}

#[test]
fn notify_disconnect_refused_where_no_connection_is() {
    // Never connected (or listening).
    let mut p = Pair::new();
    let e = p.a.create();
    assert_eq!(p.a.notify(e), Err(Refused::NotConnected));
    let l = p.a.create();
    p.a.listen(l, 1).unwrap();
    assert_eq!(p.a.notify(l), Err(Refused::NotConnected));
    assert_eq!(p.a.notify(99), Err(Refused::NoEndpoint(99)));

    // After a failed Connect (rejected, or timed out).
    let mut p = Pair::new();
    let to = p.b.ip();
    let (ea, _, connect) = p.a.connect_new(cargs(to));
    p.pump();
    assert!(p.a.connect_result(connect).unwrap().is_err());
    assert_eq!(p.a.notify(ea), Err(Refused::NotConnected));
    let mut p = Pair::new();
    p.drop.push((Who::A, REQ));
    let (ea, _, connect) = p.a.connect_new(cargs(to));
    p.advance(LONG);
    assert_eq!(p.a.connect_result(connect), Some(Err(EpError::Timeout)));
    assert_eq!(p.a.notify(ea), Err(Refused::NotConnected));

    // After a failed Accept (the RTU never came).
    let (mut p, c, accept) = Pair::accepted();
    p.drop.push((Who::A, RTU));
    p.drop.push((Who::A, MRA));
    p.advance(LONG);
    assert_eq!(p.b.result(accept), Some(Err(EpError::Timeout)));
    assert_eq!(p.b.notify(c.eb), Err(Refused::NotConnected));
}

#[test]
fn notify_disconnect_during_setup_ends_with_the_setup() {
    // Pending through a Connect that is rejected: Aborted.
    let mut p = Pair::new();
    let to = p.b.ip();
    let (ea, _, _) = p.a.connect_new(cargs(to));
    let during = p.a.notify(ea).unwrap();
    p.pump();
    assert_eq!(p.a.result(during), Some(Err(EpError::Aborted)));

    // Pending through a Connect that times out: Aborted.
    let mut p = Pair::new();
    p.drop.push((Who::A, REQ));
    let (ea, _, _) = p.a.connect_new(cargs(to));
    let during = p.a.notify(ea).unwrap();
    p.advance(LONG);
    assert_eq!(p.a.result(during), Some(Err(EpError::Aborted)));

    // Pending through a successful setup: still pending, and a DREQ ends it.
    let (mut p, c, connect) = Pair::connecting();
    let na = p.a.notify(c.ea).unwrap();
    p.pump();
    let nb = p.b.notify(c.eb).unwrap();
    p.b.accept(c.eb, c.qb).unwrap();
    p.pump();
    assert!(p.a.connect_result(connect).unwrap().is_ok());
    p.a.complete_connect(c.ea, c.qa).unwrap();
    p.pump();
    assert!(p.a.pending(na) && p.b.pending(nb));
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(p.a.result(na), Some(Ok(())));
    assert!(p.b.pending(nb), "B's own Disconnect does not end it");
}

/// NotifyDisconnect against each way a Disconnect can go, case by case.
#[test]
fn notify_disconnect_beside_disconnect_case_by_case() {
    // 1. Pending while our own Disconnect finishes on the DREP: it stays
    //    pending (no DREQ will come); cancel ends it Canceled.
    let (mut p, c) = Pair::connected();
    let na = p.a.notify(c.ea).unwrap();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    p.pump();
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(p.a.result(da), Some(Ok(())));
    assert!(p.a.pending(na));
    p.a.cancel(c.ea).unwrap();
    assert_eq!(p.a.result(na), Some(Err(EpError::Canceled)));

    // 2. The same, but the DREQ times out: still pending; destroying the
    //    endpoint ends it Canceled.
    let (mut p, c) = Pair::connected();
    let na = p.a.notify(c.ea).unwrap();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    p.advance(LONG);
    assert_eq!(p.a.result(da), Some(Err(EpError::Timeout)));
    assert!(p.a.pending(na));
    p.a.destroy(c.ea).unwrap();
    assert_eq!(p.a.result(na), Some(Err(EpError::Canceled)));

    // 3. Issued while our DREQ is out: it waits; the DREP leaves it waiting.
    let (mut p, c) = Pair::connected();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    let na = p.a.notify(c.ea).unwrap();
    p.pump();
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(p.a.result(da), Some(Ok(())));
    assert!(p.a.pending(na));

    // 4. Issued while our DREQ is out, and the peer's DREQ crosses it:
    //    success.
    let (mut p, c) = Pair::connected();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    let na = p.a.notify(c.ea).unwrap();
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(
        (p.a.result(da), p.a.result(na)),
        (Some(Ok(())), Some(Ok(())))
    );

    // 5. The peer's DREQ first, then our Disconnect (the DREP): the notify
    //    completed on the DREQ, before the Disconnect.
    let (mut p, c) = Pair::connected();
    let nb = p.b.notify(c.eb).unwrap();
    p.a.disconnect(c.ea, c.qa).unwrap();
    p.pump();
    assert_eq!(p.b.result(nb), Some(Ok(())));
    assert_eq!(p.b.qps[&c.qb], QpState::Rts, "a DREQ flushes nothing");
    let db = p.b.disconnect(c.eb, c.qb).unwrap();
    assert_eq!(p.b.result(db), Some(Ok(())));

    // 6. Issued after our Disconnect finished without a DREQ: refused.
    //    (After one that heard the DREQ: success — see
    //    `dreq_then_drep_each_side_flushing_only_on_its_own_disconnect`.)
    let (mut p, c) = Pair::connected();
    p.a.disconnect(c.ea, c.qa).unwrap();
    p.advance(LONG);
    assert_eq!(p.a.notify(c.ea), Err(Refused::NotConnected));
}

#[test]
fn disconnect_refusals() {
    let mut p = Pair::new();
    let q = p.a.qp();
    let e = p.a.create();
    assert_eq!(p.a.disconnect(e, q), Err(Refused::NotConnected));
    let l = p.a.create();
    p.a.listen(l, 1).unwrap();
    assert_eq!(p.a.disconnect(l, q), Err(Refused::NotConnected));
    assert_eq!(p.a.disconnect(99, q), Err(Refused::NoEndpoint(99)));
    assert!(p.a.ops.is_empty());
}

/// Disconnect while the connection is being set up: refused at once
/// (`ND_CONNECTION_INVALID`), nothing sent, the QP untouched — and the
/// setup goes on as if it had not been called.
#[test]
fn disconnect_during_setup_is_refused_and_touches_nothing() {
    let (mut p, c, connect) = Pair::connecting();
    // Connect pending (REQ out).
    assert_eq!(p.a.disconnect(c.ea, c.qa), Err(Refused::NotConnected));
    p.pump();
    // Passive, the request handed over, before Accept.
    assert_eq!(p.b.disconnect(c.eb, c.qb), Err(Refused::NotConnected));
    let accept = p.b.accept(c.eb, c.qb).unwrap();
    p.pump();
    // Active after the REP, before CompleteConnect; passive while Accept
    // waits for its RTU.
    assert!(p.a.connect_result(connect).unwrap().is_ok());
    assert_eq!(p.a.disconnect(c.ea, c.qa), Err(Refused::NotConnected));
    assert_eq!(p.b.disconnect(c.eb, c.qb), Err(Refused::NotConnected));
    assert_eq!(p.a.qps[&c.qa], QpState::Init);
    assert_eq!(p.a.ops_on(c.qa), [Op::CheckInit]);
    assert_eq!(p.b.ops_on(c.qb), [Op::CheckInit, Op::ToRts]);
    assert_eq!((p.sent(Who::A), p.sent(Who::B)), (vec![REQ], vec![REP]));
    // The connection completes as usual, and disconnects as usual.
    let complete = p.a.complete_connect(c.ea, c.qa).unwrap();
    p.pump();
    assert_eq!(p.a.result(complete), Some(Ok(())));
    assert_eq!(p.b.result(accept), Some(Ok(())));
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(p.a.result(da), Some(Ok(())));

    // A CompleteConnect queued behind the pending Connect does not make the
    // connection established: still refused.
    let (mut p, c, _connect) = Pair::connecting();
    p.a.complete_connect(c.ea, c.qa).unwrap();
    assert_eq!(p.a.disconnect(c.ea, c.qa), Err(Refused::NotConnected));
}

#[test]
fn a_rej_that_ends_an_established_connection_leaves_a_disconnect_to_flush() {
    let (mut p, c, accept) = Pair::rtu_lost();
    let na = p.a.notify(c.ea).unwrap();
    // B, still waiting for the RTU, rejects: A's connection ends by REJ.
    p.b.reject(c.eb, b"").unwrap();
    assert_eq!(p.b.result(accept), Some(Err(EpError::Canceled)));
    p.pump();
    assert_eq!(p.a.state_name(c.ea), "Broken");
    // A pending NotifyDisconnect: aborted (no DREQ came); a new one refused.
    assert_eq!(p.a.result(na), Some(Err(EpError::Aborted)));
    assert_eq!(p.a.notify(c.ea), Err(Refused::NotConnected));
    // The QP is still up until the Disconnect, which sends nothing and
    // flushes it.
    assert_eq!(p.a.qps[&c.qa], QpState::Rts);
    p.clear_wire();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    assert_eq!(p.a.result(da), Some(Ok(())));
    assert_eq!(p.a.qps[&c.qa], QpState::Err);
    assert!(
        p.a.reserved.contains(&c.qa.qpn),
        "the QPN waits out time-wait"
    );
    p.pump();
    assert!(p.sent(Who::A).is_empty());
    assert_eq!(p.a.state_name(c.ea), "Closed");
    assert_eq!(p.a.disconnect(c.ea, c.qa), Err(Refused::NotConnected));
    // Time-wait over: the QPN is free, and stays free.
    p.advance(LONG);
    assert!(p.a.reserved.is_empty());

    // A Disconnect after time-wait ended reserves nothing it would never
    // release.
    let (mut p, c, _) = Pair::rtu_lost();
    p.b.reject(c.eb, b"").unwrap();
    p.advance(LONG);
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    assert_eq!(p.a.result(da), Some(Ok(())));
    assert!(p.a.reserved.is_empty());
}

#[test]
fn reject_on_an_established_connection_is_refused_and_changes_nothing() {
    let (mut p, c) = Pair::connected();
    assert_eq!(
        p.a.reject(c.ea, b""),
        Err(Refused::InvalidArgument(
            "not allowed in the connection's state"
        ))
    );
    assert_eq!(p.a.state_name(c.ea), "Connected");
    let na = p.a.notify(c.ea).unwrap();
    assert!(p.a.pending(na));
    p.pump();
    assert!(p.sent(Who::A).is_empty());
    // The connection ends the usual way.
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    let db = p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(
        (p.a.result(da), p.b.result(db)),
        (Some(Ok(())), Some(Ok(())))
    );
    assert_eq!(p.a.qps[&c.qa], QpState::Err);
}

#[test]
fn accept_completes_on_a_dreq_that_overtakes_the_rtu() {
    let (mut p, c, accept) = Pair::rtu_lost();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    p.pump();
    assert_eq!(p.b.result(accept), Some(Ok(())));
    assert_eq!(p.b.state_name(c.eb), "PeerDisconnected");
    assert_eq!(p.b.qps[&c.qb], QpState::Rts);
    let nb = p.b.notify(c.eb).unwrap();
    assert_eq!(p.b.result(nb), Some(Ok(())));
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(p.a.result(da), Some(Ok(())));
}

#[test]
fn disconnect_whose_qp_is_gone_runs_its_cm_phase_and_ends_canceled() {
    let (mut p, c) = Pair::connected();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    p.a.vanish = Some((c.qa, Op::ToError));
    p.pump();
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    // DREQ and DREP as usual; the QP phase finds no QP: NoQp (ND_CANCELED).
    assert_eq!((p.sent(Who::A), p.sent(Who::B)), (vec![DREQ], vec![DREP]));
    assert_eq!(p.a.result(da), Some(Err(EpError::NoQp(c.qa.qpn))));
    assert!(!p.a.qps.contains_key(&c.qa));
    assert!(
        p.a.reserved.contains(&c.qa.qpn),
        "the connection's QPN waits out time-wait all the same"
    );

    // Released before the Disconnect was even called: the same.
    let (mut p, c) = Pair::connected();
    p.a.qps.remove(&c.qa);
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(p.a.result(da), Some(Err(EpError::NoQp(c.qa.qpn))));
    assert_eq!(p.sent(Who::A), [DREQ, DREP]);
}

/// QPNs are random and a released one may be handed out again: a phase
/// that finds the request's number on a newer QP acts on nothing.
#[test]
fn a_phase_never_acts_on_a_newer_qp_with_the_released_ones_number() {
    // Disconnect: the QP released (and its number reused) while our DREQ
    // is out.
    let (mut p, c) = Pair::connected();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    p.pump();
    let newer = p.a.reuse(c.qa);
    assert_eq!(newer.qpn, c.qa.qpn);
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(p.a.result(da), Some(Err(EpError::NoQp(c.qa.qpn))));
    assert_eq!(p.a.qps[&newer], QpState::Init, "the newer QP is untouched");
    assert!(p.a.ops_on(newer).is_empty());

    // CompleteConnect: the QP released after the Connect completed.
    let (mut p, c, _accept) = Pair::accepted();
    let newer = p.a.reuse(c.qa);
    let complete = p.a.complete_connect(c.ea, c.qa).unwrap();
    p.lost_its_qp(Who::A, complete, c.qa, RTU);
    assert_eq!(p.a.qps[&newer], QpState::Init);

    // Accept: the QP released after GetConnectionRequest.
    let (mut p, c, _connect) = Pair::requested();
    let newer = p.b.reuse(c.qb);
    let accept = p.b.accept(c.eb, c.qb).unwrap();
    p.lost_its_qp(Who::B, accept, c.qb, REP);
    assert_eq!(p.b.qps[&newer], QpState::Init);
}

/// A request runs inline when its endpoint's queue is empty and later,
/// from a CM event, when it is queued: the outcome, the QP operations, the
/// QP's state and the MADs are the same either way. (A Disconnect queues
/// only behind another: `a_second_disconnect_queues_behind_the_first`.)
#[test]
fn inline_and_queued_requests_end_the_same() {
    /// What a run left behind, for comparison.
    fn trace(p: &Pair, c: &Conn, id: RequestId) -> impl PartialEq + std::fmt::Debug {
        (
            p.a.done.get(&id).cloned(),
            p.a.ops_on(c.qa),
            p.a.qps[&c.qa],
            p.sent(Who::A),
            p.a.state_name(c.ea),
        )
    }

    // CompleteConnect after the Connect completed (inline) and right after
    // Connect (queued behind it, run when the REP arrives).
    let (mut p, c, connect) = Pair::connecting();
    p.pump();
    p.b.accept(c.eb, c.qb).unwrap();
    p.pump();
    assert!(p.a.connect_result(connect).unwrap().is_ok());
    let inline = p.a.complete_connect(c.ea, c.qa).unwrap();
    p.pump();
    let (mut q, d, _) = Pair::connecting();
    let queued = q.a.complete_connect(d.ea, d.qa).unwrap();
    assert!(q.a.pending(queued));
    q.pump();
    q.b.accept(d.eb, d.qb).unwrap();
    q.pump();
    assert_eq!(trace(&p, &c, inline), trace(&q, &d, queued));
    assert_eq!(p.a.result(inline), Some(Ok(())));

    // The same when the Connect fails: the queued CompleteConnect fails as
    // an inline one after the failure does, and neither moves the QP.
    let (mut p, c, _) = Pair::requested();
    p.b.reject(c.eb, b"").unwrap();
    p.pump();
    let inline = p.a.complete_connect(c.ea, c.qa).unwrap();
    let (mut q, d, _) = Pair::requested();
    let queued = q.a.complete_connect(d.ea, d.qa).unwrap();
    q.b.reject(d.eb, b"").unwrap();
    q.pump();
    assert_eq!(trace(&p, &c, inline), trace(&q, &d, queued));
    assert_eq!(p.a.qps[&c.qa], QpState::Init);
}
