//! Disconnect: DREQ/DREP, crossing DREQs, loss, timeouts, NotifyDisconnect,
//! unknown connections, QPN checks.

use super::harness::*;
use ndverbs_proto::cm::*;
use ndverbs_wire::cm::{CmMessage, Dreq};

#[test]
fn dreq_then_drep_after_notify() {
    let (mut net, ea, eb) = connected(20);
    assert_eq!(
        net.a.disconnect(net.now, ea),
        Ok(DisconnectStarted::DreqSent)
    );
    net.settle();
    // B is told, nothing more: no DREP until B's application disconnects.
    net.expect(Side::B, &[CmEvent::DreqReceived { endpoint: eb }]);
    assert!(net.b.dreq_received(eb));
    assert_eq!(net.b.state(eb), Some(CmState::DreqRcvd));
    assert!(net.sent(Side::B, DREP).is_empty());
    // A keeps retransmitting; B drops the duplicates.
    net.run_for(ms(6144 * 2 + 10));
    assert_eq!(net.sent(Side::A, DREQ).len(), 3);
    assert!(net.take(Side::B).is_empty());
    assert_eq!(net.b.counters().rx_duplicates, 2);
    // NotifyDisconnect-style: now B disconnects → DREP, done at once.
    assert_eq!(
        net.b.disconnect(net.now, eb),
        Ok(DisconnectStarted::DrepSent)
    );
    net.settle();
    net.expect(Side::B, &[done(eb, DisconnectHow::DrepSent)]);
    net.expect(Side::A, &[done(ea, DisconnectHow::DrepReceived)]);
    assert_eq!(net.a.state(ea), Some(CmState::Timewait));
    assert_eq!(net.b.state(eb), Some(CmState::Timewait));

    // Wire: DREQ names B's QPN and carries a TID of A's own; DREP echoes it.
    let dreq = net.sent(Side::A, DREQ)[0];
    let CmMessage::Dreq(d) = dreq.msg else {
        panic!()
    };
    assert_eq!(d.remote_qpn, 0x22);
    assert_eq!(dreq.tid, form_tid(1, net.a.local_comm_id(ea).unwrap()));
    let drep = net.sent(Side::B, DREP)[0];
    assert_eq!(drep.tid, dreq.tid);
    let CmMessage::Drep(p) = drep.msg else {
        panic!()
    };
    assert_eq!(
        (p.local_comm_id, p.remote_comm_id),
        (d.remote_comm_id, d.local_comm_id)
    );
    // Second disconnects are refused.
    assert!(net.a.disconnect(net.now, ea).is_err());
    assert!(net.b.disconnect(net.now, eb).is_err());
}

#[test]
fn crossing_dreqs_both_complete_once_with_drep_both_ways() {
    let (mut net, ea, eb) = connected(21);
    let now = net.now;
    assert_eq!(net.a.disconnect(now, ea), Ok(DisconnectStarted::DreqSent));
    assert_eq!(net.b.disconnect(now, eb), Ok(DisconnectStarted::DreqSent));
    net.run_for(ms(60_000));
    let a = net.take(Side::A);
    let b = net.take(Side::B);
    let count = |v: &[CmEvent]| {
        v.iter()
            .filter(|e| matches!(e, CmEvent::DisconnectDone { .. }))
            .count()
    };
    assert_eq!(count(&a), 1, "{a:?}");
    assert_eq!(count(&b), 1, "{b:?}");
    assert!(a.contains(&done(ea, DisconnectHow::DrepSent)));
    assert!(b.contains(&done(eb, DisconnectHow::DrepSent)));
    assert!(a.contains(&CmEvent::DreqReceived { endpoint: ea }));
    assert_eq!(net.sent(Side::A, DREP).len(), 1);
    assert_eq!(net.sent(Side::B, DREP).len(), 1);
    assert_eq!(
        net.sent(Side::A, DREQ).len(),
        1,
        "own DREQ retransmission cancelled"
    );
    assert_eq!(net.sent(Side::B, DREQ).len(), 1);
    // And time-wait ends for both.
    assert!(a.contains(&timewait_exit(ea, 0x11)));
    assert!(b.contains(&timewait_exit(eb, 0x22)));
}

#[test]
fn crossing_dreqs_with_one_dreq_lost() {
    for lost in [Side::A, Side::B] {
        let (mut net, ea, eb) = connected(22);
        net.drop_next(lost, DREQ, 1);
        net.a.disconnect(net.now, ea).unwrap();
        net.b.disconnect(net.now, eb).unwrap();
        net.run_for(ms(60_000));
        let (lost_ep, other_ep) = match lost {
            Side::A => (ea, eb),
            Side::B => (eb, ea),
        };
        // The side whose DREQ got through is answered by a DREP; the other
        // side took the DREP path.
        let lost_ev = net.take(lost);
        let other_ev = net.take(lost.other());
        assert!(
            lost_ev.contains(&done(lost_ep, DisconnectHow::DrepSent)),
            "{lost_ev:?}"
        );
        assert!(
            other_ev.contains(&done(other_ep, DisconnectHow::DrepReceived)),
            "{other_ev:?}"
        );
    }
}

/// A lost DREQ goes out again after its sender's CM retry interval — the
/// REQ's (6144 ms) on the active side, the REP's (4096 ms) on the passive
/// side — with the TID Linux gives a DREQ; the peer then hears it and the
/// disconnect completes.
#[test]
fn lost_dreq_is_retransmitted_after_the_senders_interval() {
    for (seed, side, interval) in [(23, Side::A, 6144), (24, Side::B, 4096)] {
        let (mut net, ea, eb) = connected(seed);
        let (ep, peer_ep) = match side {
            Side::A => (ea, eb),
            Side::B => (eb, ea),
        };
        net.drop_next(side, DREQ, 1);
        let t0 = net.now;
        net.agent(side).disconnect(t0, ep).unwrap();
        net.run_for(ms(interval + 10));
        let comm_id = net.agent(side).local_comm_id(ep).unwrap();
        let dreqs = net.sent(side, DREQ);
        assert_eq!(dreqs[1].at, t0 + ms(interval), "{side:?}");
        assert_eq!(dreqs[0].tid, form_tid(1, comm_id), "{side:?}");
        let dreq_received = CmEvent::DreqReceived { endpoint: peer_ep };
        assert_eq!(net.take(side.other()), vec![dreq_received], "{side:?}");
        net.disconnect(side.other(), peer_ep);
        let drep_received = done(ep, DisconnectHow::DrepReceived);
        assert_eq!(net.take(side), vec![drep_received], "{side:?}");
    }
}

#[test]
fn lost_drep_is_answered_again_from_timewait() {
    let (mut net, ea, eb) = connected(25);
    net.drop_next(Side::B, DREP, 1);
    net.disconnect(Side::A, ea);
    net.disconnect(Side::B, eb);
    net.expect(
        Side::B,
        &[
            CmEvent::DreqReceived { endpoint: eb },
            done(eb, DisconnectHow::DrepSent),
        ],
    );
    assert!(net.take(Side::A).is_empty());
    // B's time-wait (2048 ms) ends before A's retransmission (6144 ms): the
    // retransmitted DREQ then names a connection in IDLE — still answered.
    net.run_for(ms(7000));
    net.expect(Side::A, &[done(ea, DisconnectHow::DrepReceived)]);
    assert_eq!(net.sent(Side::B, DREP).len(), 2);
    assert_eq!(
        net.sent(Side::B, DREP)[1].tid,
        net.sent(Side::A, DREQ)[0].tid
    );
}

#[test]
fn dreq_in_timewait_gets_the_drep_again() {
    let (mut net, _ea, eb) = closed(26);
    let dreq = net.sent(Side::A, DREQ)[0].mad;
    net.b.handle_mad(net.now, ip(A_IP), &dreq);
    net.flush();
    assert_eq!(net.sent(Side::B, DREP).len(), 2);
    assert_eq!(net.b.state(eb), Some(CmState::Timewait));
    assert_eq!(net.b.counters().rx_duplicates, 1);
}

#[test]
fn dreq_timeout_against_a_silent_peer() {
    let (mut net, ea, _eb) = connected(27);
    net.drop_next(Side::A, DREQ, usize::MAX);
    net.a.disconnect(net.now, ea).unwrap();
    assert_eq!(
        net.quiet_then(Side::A, ms(16 * 6144 - 10), ms(20)),
        vec![done(ea, DisconnectHow::DreqTimedOut)]
    );
    assert_eq!(net.sent(Side::A, DREQ).len(), 16);
    assert_eq!(net.a.state(ea), Some(CmState::Timewait));
    net.run_for(ms(2048));
    net.expect(Side::A, &[timewait_exit(ea, 0x11)]);
}

#[test]
fn dreq_for_an_unknown_connection_gets_a_drep() {
    let mut net = Net::new(28, Faults::default());
    let d = CmMessage::Dreq(Dreq {
        local_comm_id: 0x1234_5678,
        remote_comm_id: 0x9abc_def0,
        remote_qpn: 0x42,
        private_data: [0; 220],
    });
    let mad = d.to_mad(0x0000_0002_7856_3412);
    net.b.handle_mad(net.now, ip(A_IP), &mad);
    let t = net.b.poll_transmit().expect("a DREP");
    assert_eq!(t.dst, ip(A_IP));
    let m = ndverbs_wire::mad::Mad::parse(&t.mad).unwrap();
    assert_eq!(m.header.tid, 0x0000_0002_7856_3412);
    let CmMessage::Drep(p) = CmMessage::parse(&m).unwrap() else {
        panic!()
    };
    assert_eq!(
        (p.local_comm_id, p.remote_comm_id),
        (0x9abc_def0, 0x1234_5678)
    );
    assert_eq!(net.b.counters().tx_drep_unknown, 1);
    assert!(net.b.poll_event().is_none());
}

#[test]
fn dreq_naming_another_qpn_is_dropped() {
    let (mut net, ea, eb) = connected(29);
    let mut d = Dreq {
        local_comm_id: net.a.local_comm_id(ea).unwrap(),
        remote_comm_id: net.b.local_comm_id(eb).unwrap(),
        remote_qpn: 0x23,
        private_data: [0; 220],
    };
    net.b
        .handle_mad(net.now, ip(A_IP), &CmMessage::Dreq(d).to_mad(7));
    net.flush();
    assert!(net.take(Side::B).is_empty());
    assert!(net.b.poll_transmit().is_none());
    assert_eq!(net.b.counters().rx_dreq_bad_qpn, 1);
    assert_eq!(net.b.state(eb), Some(CmState::Established));
    d.remote_qpn = 0x22;
    net.b
        .handle_mad(net.now, ip(A_IP), &CmMessage::Dreq(d).to_mad(7));
    net.flush();
    net.expect(Side::B, &[CmEvent::DreqReceived { endpoint: eb }]);
}

#[test]
fn dreq_before_the_rtu_establishes_then_notifies() {
    let (mut net, ea, eb) = rtu_lost(30);
    net.disconnect(Side::A, ea);
    net.expect(
        Side::B,
        &[
            CmEvent::Established { endpoint: eb },
            CmEvent::DreqReceived { endpoint: eb },
        ],
    );
    assert_eq!(net.b.poll_timeout(), None, "REP no longer retransmitted");
}

#[test]
fn disconnect_needs_a_connection() {
    let mut net = Net::new(31, Faults::default());
    let (_, ea) = start(&mut net, 7174);
    assert_eq!(
        net.a.disconnect(net.now, ea),
        Err(CmError::InvalidState(CmState::ReqSent))
    );
    let l = net.b.listen(sid(1)).unwrap();
    assert_eq!(
        net.b.disconnect(net.now, l),
        Err(CmError::InvalidState(CmState::Listen))
    );
}
