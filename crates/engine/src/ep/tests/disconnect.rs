//! Disconnect and NotifyDisconnect (networkdirect.md §6: D1–D11). Where the
//! machine departs from those rules the test says so and pins what it does,
//! so that a fix shows up as a change to the test.

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
    // A's Disconnect waits for it with its QP still in RTS (D2).
    assert_eq!(p.b.result(nb), Some(Ok(())));
    assert_eq!(p.b.state_name(c.eb), "PeerDisconnected");
    assert!(p.a.pending(da));
    assert_eq!(
        (p.a.qps[&c.qa], p.b.qps[&c.qb]),
        (QpState::Rts, QpState::Rts)
    );
    let again = p.b.notify(c.eb).unwrap();
    assert_eq!(p.b.result(again), Some(Ok(())), "the DREQ already arrived");
    assert!(p.b.eps.info(&p.b.cm, c.eb).unwrap().dreq_received);
    // B answers with the DREP: done at once (D1 second branch), QP to ERR.
    let db = p.b.disconnect(c.eb, c.qb).unwrap();
    assert_eq!(p.b.result(db), Some(Ok(())));
    assert_eq!(p.b.ops_on(c.qb).last(), Some(&Op::ToError));
    assert_eq!(p.b.qps[&c.qb], QpState::Err);
    assert!(p.b.reserved.contains(&c.qb));
    p.pump();
    assert_eq!(p.a.result(da), Some(Ok(())));
    assert_eq!(p.a.qps[&c.qa], QpState::Err);
    assert!(p.a.reserved.contains(&c.qa));
    assert_eq!((p.sent(Who::A), p.sent(Who::B)), (vec![DREQ], vec![DREP]));
    assert_eq!(p.states(&c), ["Closed", "Closed"]);
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
    // B's application never calls Disconnect: its CM sends no DREP.
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
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    let db = p.b.disconnect(c.eb, c.qb).unwrap();
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
fn notify_disconnect_outcomes() {
    // Never connected (or listening): refused.
    let mut p = Pair::new();
    let e = p.a.create();
    assert_eq!(p.a.notify(e), Err(Refused::NotConnected));
    let l = p.a.create();
    p.a.listen(l, 1).unwrap();
    assert_eq!(p.a.notify(l), Err(Refused::NotConnected));
    assert_eq!(p.a.notify(99), Err(Refused::NoEndpoint(99)));

    // Pending while our own Disconnect finishes: Disconnected (departs from
    // D5, which knows only SUCCESS on a DREQ, CANCELED and CONNECTION_INVALID).
    let (mut p, c) = Pair::connected();
    let na = p.a.notify(c.ea).unwrap();
    p.a.disconnect(c.ea, c.qa).unwrap();
    p.pump();
    assert!(p.a.pending(na));
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(p.a.result(na), Some(Err(EpError::Disconnected)));
    // After our own Disconnect: success at once, though no DREQ came
    // (departs from D5).
    let after = p.a.notify(c.ea).unwrap();
    assert_eq!(p.a.result(after), Some(Ok(())));

    // During a Connect that is rejected: Aborted; afterwards: success at
    // once (departs from D5: never connected).
    let mut p = Pair::new();
    let to = p.b.ip();
    let (ea, _, _) = p.a.connect_new(cargs(to));
    let during = p.a.notify(ea).unwrap();
    p.pump();
    assert_eq!(p.a.result(during), Some(Err(EpError::Aborted)));
    let after = p.a.notify(ea).unwrap();
    assert_eq!(p.a.result(after), Some(Ok(())));

    // During a Connect that times out: Aborted.
    let mut p = Pair::new();
    p.drop.push((Who::A, REQ));
    let to = p.b.ip();
    let (ea, _, _) = p.a.connect_new(cargs(to));
    let during = p.a.notify(ea).unwrap();
    p.advance(LONG);
    assert_eq!(p.a.result(during), Some(Err(EpError::Aborted)));
}

#[test]
fn disconnect_refusals() {
    let mut p = Pair::new();
    let e = p.a.create();
    assert_eq!(p.a.disconnect(e, 5), Err(Refused::NotConnected));
    let l = p.a.create();
    p.a.listen(l, 1).unwrap();
    assert_eq!(p.a.disconnect(l, 5), Err(Refused::NotConnected));
    assert_eq!(p.a.disconnect(99, 5), Err(Refused::NoEndpoint(99)));
}

#[test]
fn disconnect_before_complete_connect_flushes_and_sends_nothing() {
    // Departs from D11 (never connected: CONNECTION_INVALID), and leaves the
    // peer waiting.
    let (mut p, c, connect) = Pair::connecting();
    // Queued behind the pending Connect: it runs when the REP arrives.
    let d = p.a.disconnect(c.ea, c.qa).unwrap();
    p.pump();
    let accept = p.b.accept(c.eb, c.qb).unwrap();
    p.pump();
    assert!(p.a.connect_result(connect).unwrap().is_ok());
    assert_eq!(p.a.result(d), Some(Ok(())));
    assert_eq!(p.a.qps[&c.qa], QpState::Err);
    assert!(p.a.reserved.contains(&c.qa));
    assert_eq!(p.a.state_name(c.ea), "Closed");
    // Nothing told B: its Accept waits, held by A's MRAs.
    p.advance(LONG);
    assert!(!p.sent(Who::A).contains(&DREQ) && !p.sent(Who::A).contains(&REJ));
    assert!(p.sent(Who::A).contains(&MRA));
    assert!(p.b.pending(accept));
}

#[test]
fn a_rej_that_ends_an_established_connection_leaves_disconnect_refused() {
    // Departs from D2: the Disconnect should complete and flush the QP.
    let (mut p, c, accept) = Pair::rtu_lost();
    let na = p.a.notify(c.ea).unwrap();
    // B, still waiting for the RTU, rejects: A's connection ends by REJ.
    p.b.reject(c.eb, b"").unwrap();
    assert_eq!(p.b.result(accept), Some(Err(EpError::Canceled)));
    p.pump();
    assert_eq!(p.a.state_name(c.ea), "Closed");
    assert_eq!(p.a.result(na), Some(Err(EpError::Aborted)));
    assert_eq!(p.a.disconnect(c.ea, c.qa), Err(Refused::NotConnected));
    assert_eq!(p.a.qps[&c.qa], QpState::Rts, "nothing flushes A's QP");
}

#[test]
fn reject_on_an_established_connection_is_refused_yet_ends_it() {
    let (mut p, c) = Pair::connected();
    assert_eq!(
        p.a.reject(c.ea, b""),
        Err(Refused::InvalidArgument(
            "not allowed in the connection's state"
        ))
    );
    assert_eq!(p.a.state_name(c.ea), "Closed");
    assert_eq!(p.a.disconnect(c.ea, c.qa), Err(Refused::NotConnected));
    let n = p.a.notify(c.ea).unwrap();
    assert_eq!(p.a.result(n), Some(Ok(())));
    p.pump();
    assert!(p.sent(Who::A).is_empty());
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
fn disconnect_whose_qp_is_gone_still_succeeds() {
    // Departs from D11 (QP already released: CANCELED).
    let (mut p, c) = Pair::connected();
    let da = p.a.disconnect(c.ea, c.qa).unwrap();
    p.a.vanish = Some((c.qa, Op::ToError));
    p.pump();
    p.b.disconnect(c.eb, c.qb).unwrap();
    p.pump();
    assert_eq!(p.a.result(da), Some(Ok(())));
    assert!(!p.a.qps.contains_key(&c.qa));
    assert!(
        p.a.reserved.contains(&c.qa),
        "the QPN is reserved all the same"
    );
}
