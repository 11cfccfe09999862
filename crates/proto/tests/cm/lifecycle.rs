//! Endpoint lifetime: destroy in every state (Linux `cm_destroy_id`),
//! time-wait and comm-ID/QPN reuse, device removal in every state.

use super::harness::*;
use ndverbs_proto::cm::*;
use ndverbs_wire::cm::{msg_ref, rej_reason, CmMessage};
use std::collections::HashSet;

#[test]
fn destroy_in_req_sent_rejects_with_timeout_and_our_guid() {
    let mut net = Net::new(40, Faults::default());
    let (ea, eb) = requested(&mut net);
    net.a.destroy(net.now, ea).unwrap();
    assert_eq!(net.a.state(ea), None);
    assert_eq!(net.a.endpoint_count(), 0);
    net.settle();
    let CmMessage::Rej(j) = net.sent(Side::A, REJ)[0].msg else {
        panic!()
    };
    assert_eq!(j.reason, rej_reason::TIMEOUT);
    assert_eq!(j.remote_comm_id, 0, "A never learnt B's comm ID");
    assert_eq!(&j.ari[..8], &A_GUID.to_be_bytes());
    assert_eq!(j.rejected_info_length, 8);
    // B matched it through (A's comm ID, GUID from the ARI).
    let ev = net.take(Side::B);
    assert!(
        matches!(&ev[..], [CmEvent::Rejected { endpoint, reason: 4, .. }] if *endpoint == eb),
        "{ev:?}"
    );
    assert_eq!(net.a.poll_timeout(), None);
}

#[test]
fn destroy_in_rep_sent_rejects_and_waits() {
    let mut net = Net::new(41, Faults::default());
    let (ea, eb) = requested(&mut net);
    net.b.accept(net.now, eb, accept_params()).unwrap();
    net.b.destroy(net.now, eb).unwrap();
    net.settle();
    let CmMessage::Rej(j) = net.sent(Side::B, REJ)[0].msg else {
        panic!()
    };
    assert_eq!((j.reason, j.message_rejected), (28, msg_ref::OTHER));
    // A got the REP first, then the REJ.
    let ev = net.take(Side::A);
    assert!(
        matches!(
            &ev[..],
            [
                CmEvent::RepReceived { .. },
                CmEvent::Rejected { reason: 28, .. }
            ]
        ),
        "{ev:?}"
    );
    assert_eq!(net.a.state(ea), Some(CmState::Timewait));
    // B lingers invisibly through time-wait, then reports it.
    assert_eq!(net.b.endpoint_count(), 2); // listener + the zombie
    net.run_for(ms(3000));
    net.expect(Side::B, &[timewait_exit(eb, 0x22)]);
    assert_eq!(net.b.endpoint_count(), 1);
}

#[test]
fn destroy_established_sends_one_dreq_and_waits() {
    let (mut net, ea, eb) = connected(42);
    net.a.destroy(net.now, ea).unwrap();
    net.run_for(ms(20_000));
    assert_eq!(
        net.sent(Side::A, DREQ).len(),
        1,
        "cm_issue_dreq: no retries"
    );
    net.expect(Side::B, &[CmEvent::DreqReceived { endpoint: eb }]);
    // B's disconnect: the DREQ's comm IDs still find A's zombie, or after its
    // time-wait A answers as for an unknown connection. Either way a DREP.
    net.disconnect(Side::B, eb);
    assert!(net
        .take(Side::B)
        .contains(&done(eb, DisconnectHow::DrepSent)));
}

#[test]
fn destroy_in_dreq_rcvd_sends_the_drep() {
    let (mut net, ea, eb) = connected(43);
    net.disconnect(Side::A, ea);
    net.take(Side::B);
    net.b.destroy(net.now, eb).unwrap();
    net.settle();
    assert_eq!(net.sent(Side::B, DREP).len(), 1);
    net.expect(Side::A, &[done(ea, DisconnectHow::DrepReceived)]);
    assert!(
        net.take(Side::B).is_empty(),
        "no DisconnectDone for a destroy"
    );
}

#[test]
fn destroy_in_req_rcvd_is_rej_28_and_listener_destroy_stops_listening() {
    let mut net = Net::new(44, Faults::default());
    let (l, ea) = start(&mut net, 7174);
    let r = net.connect_request();
    net.b.destroy(net.now, r.endpoint).unwrap();
    net.settle();
    assert!(matches!(
        &net.take(Side::A)[..],
        [CmEvent::Rejected { reason: 28, .. }]
    ));
    net.b.destroy(net.now, l).unwrap();
    let p = ConnectParams::new(sid(7174), ip(B_IP), 0x13, 1);
    let e2 = net.a.connect(net.now, p).unwrap();
    net.settle();
    assert!(
        matches!(&net.take(Side::A)[..], [CmEvent::Rejected { endpoint, reason: 8, .. }] if *endpoint == e2)
    );
    assert!(
        net.b.listen(sid(7174)).is_ok(),
        "the service ID is free again"
    );
    let _ = ea;
}

#[test]
fn timewait_holds_the_qpn_and_comm_ids_are_never_reused() {
    let (mut net, ea, _eb) = closed(45);
    net.take(Side::A);
    let t_wait = net.sent(Side::B, DREP)[0].at + LATENCY;
    // Active: av timeout = cm_ack_timeout(REP TargetAckDelay 15, plt 18) = 19 → 2048 ms.
    assert_eq!(net.a.poll_timeout(), Some(t_wait + ms(2048)));
    net.a.destroy(net.now, ea).unwrap();
    assert_eq!(net.a.state(ea), None, "destroyed…");
    assert_eq!(net.a.endpoint_count(), 1, "…but held through time-wait");
    assert_eq!(
        net.quiet_then(Side::A, ms(1900), ms(200)),
        vec![timewait_exit(ea, 0x11)]
    );
    assert_eq!(net.a.endpoint_count(), 0);
    // Many connections: every comm ID distinct, endpoint IDs too.
    let mut comm = HashSet::new();
    let mut eps = HashSet::new();
    net.b.listen(sid(1)).unwrap();
    for i in 0..300u32 {
        let p = ConnectParams::new(sid(1), ip(B_IP), 0x100 + i, i);
        let e = net.a.connect(net.now, p).unwrap();
        assert!(eps.insert(e));
        assert!(comm.insert(net.a.local_comm_id(e).unwrap()));
        net.a.destroy(net.now, e).unwrap();
    }
    net.settle();
    for e in net.take(Side::B) {
        if let CmEvent::ConnectRequest(r) = e {
            assert!(comm.insert(net.b.local_comm_id(r.endpoint).unwrap()));
        }
    }
}

/// Drives A's endpoints into every state at once; returns them.
fn every_state(net: &mut Net) -> Vec<(CmState, EndpointId)> {
    let mut out = Vec::new();
    let l = net.a.listen(sid(100)).unwrap();
    out.push((CmState::Listen, l));
    net.b.listen(sid(200)).unwrap();
    let connect = |net: &mut Net, qpn: u32| {
        let p = ConnectParams::new(sid(200), ip(B_IP), qpn, qpn);
        let now = net.now;
        net.a.connect(now, p).unwrap()
    };
    // REQ_SENT: B never hears it.
    net.drop_next(Side::A, REQ, 1);
    out.push((CmState::ReqSent, connect(net, 0x100)));
    net.settle();
    // Passive states on A: B connects to A's listener.
    let inbound = |net: &mut Net, qpn: u32| {
        let p = ConnectParams::new(sid(100), ip(A_IP), qpn, qpn);
        let now = net.now;
        net.b.connect(now, p).unwrap();
        net.settle();
        match net.take(Side::A).pop() {
            Some(CmEvent::ConnectRequest(r)) => r.endpoint,
            other => panic!("{other:?}"),
        }
    };
    out.push((CmState::ReqRcvd, inbound(net, 0x200)));
    let rep_sent = inbound(net, 0x201);
    net.drop_next(Side::A, REP, 1);
    net.a
        .accept(net.now, rep_sent, AcceptParams::new(0x300, 1))
        .unwrap();
    out.push((CmState::RepSent, rep_sent));
    // REP_RCVD: B answers, A's app does not complete.
    let rep_rcvd = connect(net, 0x101);
    let r = net.connect_request();
    net.b
        .accept(net.now, r.endpoint, AcceptParams::new(0x400, 1))
        .unwrap();
    net.settle();
    out.push((CmState::RepRcvd, rep_rcvd));
    // ESTABLISHED, DREQ_SENT, DREQ_RCVD, TIMEWAIT, IDLE.
    let conn = |net: &mut Net, qpn: u32| {
        let e = connect(net, qpn);
        let r = net.connect_request();
        net.b
            .accept(net.now, r.endpoint, AcceptParams::new(qpn + 0x1000, 1))
            .unwrap();
        net.settle();
        net.a.complete_connect(net.now, e, &[]).unwrap();
        net.settle();
        net.take(Side::B);
        (e, r.endpoint)
    };
    let (est, _) = conn(net, 0x102);
    out.push((CmState::Established, est));
    let (ds, _) = conn(net, 0x103);
    net.drop_next(Side::A, DREQ, 1);
    net.a.disconnect(net.now, ds).unwrap();
    out.push((CmState::DreqSent, ds));
    let (dr, dr_b) = conn(net, 0x104);
    net.disconnect(Side::B, dr_b);
    out.push((CmState::DreqRcvd, dr));
    let (tw, tw_b) = conn(net, 0x105);
    net.disconnect(Side::B, tw_b);
    net.disconnect(Side::A, tw);
    out.push((CmState::Timewait, tw));
    let idle = connect(net, 0x106);
    let r = net.connect_request();
    net.b.reject(net.now, r.endpoint, &[]).unwrap();
    net.settle();
    out.push((CmState::Idle, idle));
    net.take(Side::A);
    net.take(Side::B);
    for &(s, e) in &out {
        assert_eq!(net.a.state(e), Some(s), "setup of {s}");
    }
    out
}

#[test]
fn device_removal_in_every_state() {
    let mut net = Net::new(46, Faults::default());
    let eps = every_state(&mut net);
    net.remove_device(Side::A);
    let ev = net.take(Side::A);
    assert_eq!(ev.len(), eps.len(), "{ev:?}");
    for (s, e) in &eps {
        assert_eq!(
            ev.iter().filter(|x| x.endpoint() == *e).count(),
            1,
            "endpoint in {s}"
        );
        assert!(ev.contains(&CmEvent::DeviceRemoved { endpoint: *e }));
    }
    assert!(net.a.poll_transmit().is_none());
    assert_eq!(net.a.poll_timeout(), None);
    // The peer keeps talking; A stays silent and quiet for ever.
    net.run_for(ms(30 * 60 * 1000));
    assert!(net.take(Side::A).is_empty());
    assert!(net.a.counters().rx_after_removal > 0);
    assert!(net.a.poll_transmit().is_none());
    // Every call fails.
    let (_, e) = eps[0];
    assert_eq!(net.a.destroy(net.now, e), Err(CmError::DeviceRemoved));
    assert_eq!(net.a.listen(sid(9)), Err(CmError::DeviceRemoved));
    let p = ConnectParams::new(sid(1), ip(B_IP), 0x11, 1);
    assert_eq!(net.a.connect(net.now, p), Err(CmError::DeviceRemoved));
    // The peer's requests all ended (timeouts), each exactly once.
    let b = net.take(Side::B);
    let mut seen = HashSet::new();
    for e in &b {
        if matches!(
            e,
            CmEvent::ConnectTimeout { .. }
                | CmEvent::AcceptTimeout { .. }
                | CmEvent::DisconnectDone { .. }
        ) {
            assert!(seen.insert(e.endpoint()), "{b:?}");
        }
    }
    assert!(net.b.poll_timeout().is_none(), "B settled");
}

#[test]
fn destroy_in_every_state_follows_cm_destroy_id() {
    let mut net = Net::new(47, Faults::default());
    let eps = every_state(&mut net);
    let expect = |s: CmState| -> Option<(u16, Option<u16>)> {
        // (attribute sent, REJ reason)
        match s {
            CmState::ReqSent => Some((REJ, Some(rej_reason::TIMEOUT))),
            CmState::ReqRcvd | CmState::RepSent | CmState::RepRcvd => {
                Some((REJ, Some(rej_reason::CONSUMER_DEFINED)))
            }
            CmState::Established => Some((DREQ, None)),
            CmState::DreqRcvd => Some((DREP, None)),
            _ => None,
        }
    };
    for (s, e) in eps {
        let before = net.wire.len();
        net.a.destroy(net.now, e).unwrap();
        net.flush();
        let sent: Vec<_> = net.wire[before..]
            .iter()
            .filter(|w| w.from == Side::A)
            .collect();
        match expect(s) {
            None => assert!(
                sent.is_empty(),
                "{s}: {:?}",
                sent.iter().map(|w| w.msg.name()).collect::<Vec<_>>()
            ),
            Some((attr_id, reason)) => {
                assert_eq!(sent.len(), 1, "{s}");
                assert_eq!(sent[0].msg.attr_id(), attr_id, "{s}");
                if let (CmMessage::Rej(j), Some(r)) = (sent[0].msg, reason) {
                    assert_eq!(j.reason, r, "{s}");
                }
            }
        }
        assert_eq!(net.a.state(e), None);
        net.take(Side::A);
    }
    // Only the time-wait zombies remain, and they expire.
    net.run_for(ms(3000));
    for e in net.take(Side::A) {
        assert!(matches!(e, CmEvent::TimewaitExit { .. }), "{e:?}");
    }
    assert_eq!(net.a.endpoint_count(), 0);
}
