//! Connection establishment: the happy path, each message lost, retries
//! running out, REJ, MRA, duplicates, stale connections.

use super::harness::*;
use ndverbs_proto::cm::*;
use ndverbs_wire::cm::{msg_ref, rej_reason, CmMessage};

#[test]
fn happy_path_req_rep_rtu() {
    let mut net = Net::new(1, Faults::default());
    let (listener, ea) = start(&mut net, 7174);
    assert_eq!(net.a.state(ea), Some(CmState::ReqSent));
    net.settle();
    let ev = net.take(Side::B);
    let [CmEvent::ConnectRequest(r)] = ev.as_slice() else {
        panic!("{ev:?}")
    };
    assert_eq!(r.listener, listener);
    assert_eq!(r.service_id, sid(7174));
    assert_eq!(&r.peer.private_data[..6], b"from A");
    assert_eq!(r.peer.private_data.len(), 56);
    assert_eq!((r.peer.qpn, r.peer.starting_psn), (0x11, 0x464b));
    assert_eq!(r.peer.ca_guid, A_GUID);
    let h = r.cma.unwrap();
    assert_eq!((h.src, h.dst, h.src_port), (ip(A_IP), ip(B_IP), 50269));
    let eb = r.endpoint;
    assert_eq!(net.b.state(eb), Some(CmState::ReqRcvd));

    let a = accept_params();
    let preview = net.b.accept_qp_setup(eb, &a).unwrap();
    let now = net.now;
    let qp_b = net.b.accept(now, eb, a).unwrap();
    assert_eq!(preview, qp_b);
    assert_eq!(
        (qp_b.dest_qpn, qp_b.rq_psn, qp_b.sq_psn, qp_b.timeout),
        (0x11, 0x7d7d7f, 0x464b, 19)
    );
    assert_eq!(qp_b.flow_label, flow_label(50269, 7174));
    net.settle();
    let ev = net.take(Side::A);
    let [CmEvent::RepReceived { endpoint, peer, qp }] = ev.as_slice() else {
        panic!("{ev:?}")
    };
    assert_eq!(*endpoint, ea);
    assert_eq!(&peer.private_data[..6], b"from B");
    assert_eq!(peer.private_data.len(), 196);
    assert_eq!(
        (
            qp.dest_qpn,
            qp.sq_psn,
            qp.rq_psn,
            qp.max_rd_atomic,
            qp.max_dest_rd_atomic
        ),
        (0x22, 0x7d7d7f, 0x464b, 1, 1)
    );
    assert_eq!(
        (qp.retry_cnt, qp.rnr_retry, qp.timeout, qp.path_mtu),
        (7, 7, 19, 3)
    );
    assert_eq!(net.a.peer(ea).unwrap().qpn, 0x22);
    let now = net.now;
    net.a.complete_connect(now, ea, b"rtu").unwrap();
    net.settle();
    net.expect(Side::B, &[CmEvent::Established { endpoint: eb }]);
    assert_eq!(net.trace(), "A:REQ B:REP A:RTU");

    // TIDs: REQ forms its own; REP and RTU echo it.
    let req_tid = net.wire[0].tid;
    let ca = net.a.local_comm_id(ea).unwrap();
    assert_eq!(req_tid, form_tid(1, ca));
    assert!(net.wire.iter().all(|s| s.tid == req_tid));
    // Comm IDs pair up.
    let cb = net.b.local_comm_id(eb).unwrap();
    let CmMessage::Rep(rep) = net.wire[1].msg else {
        panic!()
    };
    assert_eq!((rep.local_comm_id, rep.remote_comm_id), (cb, ca));
    let CmMessage::Rtu(rtu) = net.wire[2].msg else {
        panic!()
    };
    assert_eq!((rtu.local_comm_id, rtu.remote_comm_id), (ca, cb));
    assert_eq!(&rtu.private_data[..3], b"rtu");
    // Nothing left to do.
    assert_eq!(net.a.poll_timeout(), None);
    assert_eq!(net.b.poll_timeout(), None);
}

#[test]
fn read_limits_are_clamped_to_the_peer_offer() {
    let mut net = Net::new(2, Faults::default());
    net.b.listen(sid(1)).unwrap();
    let mut p = ConnectParams::new(sid(1), ip(B_IP), 0x11, 1);
    (p.responder_resources, p.initiator_depth) = (4, 2);
    let ea = net.a.connect(net.now, p).unwrap();
    let r = net.connect_request();
    let mut a = AcceptParams::new(0x22, 2);
    (a.responder_resources, a.initiator_depth) = (16, 16);
    let qp_b = net.b.accept(net.now, r.endpoint, a).unwrap();
    // B may issue up to A's responder resources, accept up to A's initiator depth.
    assert_eq!((qp_b.max_rd_atomic, qp_b.max_dest_rd_atomic), (4, 2));
    net.settle();
    let CmMessage::Rep(rep) = net.sent(Side::B, REP)[0].msg else {
        panic!()
    };
    assert_eq!((rep.responder_resources, rep.initiator_depth), (2, 4));
    let Some(CmEvent::RepReceived { qp, .. }) = net.take(Side::A).pop() else {
        panic!()
    };
    assert_eq!((qp.max_rd_atomic, qp.max_dest_rd_atomic), (2, 4));
    let _ = ea;
}

#[test]
fn lost_req_is_retransmitted_after_the_linux_interval() {
    let mut net = Net::new(3, Faults::default());
    net.drop_next(Side::A, REQ, 1);
    let (_, ea) = start(&mut net, 7174);
    let Some(CmEvent::ConnectRequest(r)) = net.quiet_then(Side::B, ms(6143), ms(2)).pop() else {
        panic!()
    };
    let reqs = net.sent(Side::A, REQ);
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].at, at_ms(6144));
    assert_eq!(
        reqs[0].mad, reqs[1].mad,
        "a retransmission is the same bytes"
    );
    net.b.accept(net.now, r.endpoint, accept_params()).unwrap();
    net.settle();
    assert!(
        matches!(net.take(Side::A)[..], [CmEvent::RepReceived { endpoint, .. }] if endpoint == ea)
    );
    assert_eq!(net.a.counters().tx_retries, 1);
}

#[test]
fn lost_rep_is_retransmitted_without_a_second_connect_request() {
    let mut net = Net::new(4, Faults::default());
    net.drop_next(Side::B, REP, 1);
    let (ea, eb) = requested(&mut net);
    let t0 = net.now;
    net.b.accept(t0, eb, accept_params()).unwrap();
    // B's REP interval is conv(REQ.LocalCMResponseTimeout = 20) = 4096 ms.
    net.run_for(ms(4200));
    let reps = net.sent(Side::B, REP);
    assert_eq!(reps.len(), 2);
    assert_eq!(reps[1].at, t0 + ms(4096));
    assert!(
        matches!(net.take(Side::A)[..], [CmEvent::RepReceived { endpoint, .. }] if endpoint == ea)
    );
    net.a.complete_connect(net.now, ea, &[]).unwrap();
    net.run_for(ms(10_000));
    net.expect(Side::B, &[CmEvent::Established { endpoint: eb }]);
    // A's REQ retransmission (at 6144 ms) hit B in REP_SENT or later: at most
    // a REP re-send, never a new ConnectRequest.
    assert!(net.events.is_empty());
}

#[test]
fn lost_rtu_is_recovered_by_the_rep_retransmission() {
    let (mut net, _ea, eb) = rtu_lost(5);
    net.settle();
    assert_eq!(net.b.state(eb), Some(CmState::RepSent));
    net.run_for(ms(5000));
    net.expect(Side::B, &[CmEvent::Established { endpoint: eb }]);
    // A answered the duplicate REP with the RTU again (Linux cm_dup_rep_handler).
    assert_eq!(net.sent(Side::A, RTU).len(), 2);
    assert!(net.a.counters().rx_duplicates >= 1);
}

#[test]
fn comm_est_establishes_without_the_rtu() {
    let (mut net, _ea, eb) = rtu_lost(6);
    net.settle();
    // The QP saw the peer's first packet: the engine reports COMM_EST.
    net.b.notify_established(eb).unwrap();
    net.flush();
    net.expect(Side::B, &[CmEvent::Established { endpoint: eb }]);
    assert_eq!(net.b.poll_timeout(), None, "REP retransmission cancelled");
    assert_eq!(
        net.b.notify_established(eb),
        Err(CmError::InvalidState(CmState::Established))
    );
}

#[test]
fn req_retries_exhausted_is_a_connect_timeout_without_rej() {
    let mut net = Net::new(7, Faults::default());
    net.drop_next(Side::A, REQ, usize::MAX);
    let (_, ea) = start(&mut net, 7174);
    assert_eq!(
        net.quiet_then(Side::A, ms(16 * 6144 - 1), ms(1)),
        vec![CmEvent::ConnectTimeout { endpoint: ea }]
    );
    assert_eq!(net.sent(Side::A, REQ).len(), 16, "1 + MaxCMRetries(15)");
    assert!(
        net.sent(Side::A, REJ).is_empty(),
        "Linux sends no REJ on REQ timeout"
    );
    assert_eq!(net.a.state(ea), Some(CmState::Idle));
    assert_eq!(net.a.poll_timeout(), None);
    // The endpoint can be destroyed quietly; a new connect works.
    net.a.destroy(net.now, ea).unwrap();
    net.flush();
    assert!(net.sent(Side::A, REJ).is_empty());
}

#[test]
fn rep_retries_exhausted_is_an_accept_timeout() {
    let mut net = Net::new(8, Faults::default());
    let (_ea, eb) = requested(&mut net);
    // Everything B sends from now on is lost.
    net.drop_next(Side::B, REP, usize::MAX);
    let t0 = net.now;
    net.b.accept(t0, eb, accept_params()).unwrap();
    assert_eq!(
        net.quiet_then(Side::B, ms(16 * 4096 - 10), ms(20)),
        vec![CmEvent::AcceptTimeout { endpoint: eb }]
    );
    // 15 timed retransmissions; the other REPs answered A's duplicate REQs.
    assert_eq!(net.b.counters().tx_retries, 15);
    let dup_reqs = net.sent(Side::A, REQ).len() - 1;
    assert_eq!(net.sent(Side::B, REP).len(), 16 + dup_reqs);
    assert_eq!(net.b.state(eb), Some(CmState::Idle));
}

#[test]
fn reject_delivers_reason_28_and_private_data() {
    let mut net = Net::new(9, Faults::default());
    let (ea, eb) = requested(&mut net);
    net.b.reject(net.now, eb, b"go away").unwrap();
    net.settle();
    let ev = net.take(Side::A);
    let [CmEvent::Rejected {
        endpoint,
        reason,
        private_data,
        ..
    }] = ev.as_slice()
    else {
        panic!("{ev:?}")
    };
    assert_eq!((*endpoint, *reason), (ea, rej_reason::CONSUMER_DEFINED));
    assert_eq!(&private_data[..7], b"go away");
    assert_eq!(net.a.state(ea), Some(CmState::Idle));
    assert_eq!(net.b.state(eb), Some(CmState::Idle));
    let CmMessage::Rej(j) = net.sent(Side::B, REJ)[0].msg else {
        panic!()
    };
    // Rejected from REQ_RCVD: no local comm ID, "REQ" rejected (cm_format_rej).
    assert_eq!((j.local_comm_id, j.message_rejected), (0, msg_ref::REQ));
    assert_eq!(net.sent(Side::B, REJ)[0].tid, net.sent(Side::A, REQ)[0].tid);
    assert!(net.b.reject(net.now, eb, &[]).is_err());
    assert_eq!(
        net.b.reject(net.now, eb, &[0; 149]),
        Err(CmError::InvalidState(CmState::Idle))
    );
}

#[test]
fn active_side_rejects_after_the_rep() {
    let mut net = Net::new(10, Faults::default());
    let (ea, eb) = requested(&mut net);
    net.b.accept(net.now, eb, accept_params()).unwrap();
    net.settle();
    net.take(Side::A);
    // ND: Reject instead of CompleteConnect (unacceptable read limits).
    net.a.reject(net.now, ea, b"no").unwrap();
    net.settle();
    let ev = net.take(Side::B);
    assert!(
        matches!(&ev[..], [CmEvent::Rejected { reason: 28, .. }]),
        "{ev:?}"
    );
    let CmMessage::Rej(j) = net.sent(Side::A, REJ)[0].msg else {
        panic!()
    };
    assert_eq!(j.message_rejected, msg_ref::REP);
    assert_eq!(net.b.poll_timeout(), None, "REP retransmission stopped");
}

#[test]
fn no_listener_is_rej_8() {
    let mut net = Net::new(11, Faults::default());
    let p = ConnectParams::new(sid(9999), ip(B_IP), 0x11, 1);
    let ea = net.a.connect(net.now, p).unwrap();
    net.settle();
    let ev = net.take(Side::A);
    assert!(
        matches!(&ev[..], [CmEvent::Rejected { endpoint, reason: 8, .. }] if *endpoint == ea),
        "{ev:?}"
    );
    let CmMessage::Rej(j) = net.sent(Side::B, REJ)[0].msg else {
        panic!()
    };
    assert_eq!(j.remote_comm_id, net.a.local_comm_id(ea).unwrap());
    assert_eq!(j.local_comm_id, 0);
    assert!(net.b.take_nothing());
    assert_eq!(net.a.poll_timeout(), None);
}

trait Quiet {
    fn take_nothing(&mut self) -> bool;
}
impl Quiet for CmAgent {
    fn take_nothing(&mut self) -> bool {
        self.poll_event().is_none() && self.endpoint_count() == 0
    }
}

#[test]
fn slow_accept_is_covered_by_mra() {
    let mut net = Net::new(12, Faults::default());
    let (ea, eb) = requested(&mut net);
    // B's application takes 60 s to accept. A's REQ retransmission at
    // 6144 ms is a duplicate: B answers with an MRA (service timeout 24).
    net.run_for(ms(6200));
    assert_eq!(net.b.state(eb), Some(CmState::MraReqSent));
    let mras = net.sent(Side::B, MRA);
    assert_eq!(mras.len(), 1);
    let CmMessage::Mra(m) = mras[0].msg else {
        panic!()
    };
    assert_eq!((m.message_mraed, m.service_timeout), (msg_ref::REQ, 24));
    assert_eq!(mras[0].tid, net.sent(Side::A, REQ)[0].tid);
    net.expect(
        Side::A,
        &[CmEvent::MraReceived {
            endpoint: ea,
            service_timeout: 24,
        }],
    );
    assert_eq!(net.a.state(ea), Some(CmState::MraReqRcvd));
    // A now waits conv(24) + conv(19) = 67 584 ms before its next REQ.
    let t_mra = net.sent(Side::B, MRA)[0].at;
    assert_eq!(
        net.a.poll_timeout(),
        Some(t_mra + LATENCY + ms(65_536 + 2048))
    );
    net.run_for(ms(54_000));
    assert_eq!(net.sent(Side::A, REQ).len(), 2);
    net.b.accept(net.now, eb, accept_params()).unwrap();
    net.settle();
    assert!(matches!(
        net.take(Side::A)[..],
        [CmEvent::RepReceived { .. }]
    ));
    assert_eq!(
        net.events_of(Side::B).len(),
        0,
        "still only one ConnectRequest"
    );
}

#[test]
fn slow_complete_connect_is_covered_by_mra() {
    let mut net = Net::new(13, Faults::default());
    let (ea, eb) = requested(&mut net);
    net.b.accept(net.now, eb, accept_params()).unwrap();
    net.settle();
    net.take(Side::A);
    // A's application is slow; B's REP retransmission is a duplicate REP.
    net.run_for(ms(4200));
    assert_eq!(net.a.state(ea), Some(CmState::MraRepSent));
    let CmMessage::Mra(m) = net.sent(Side::A, MRA)[0].msg else {
        panic!()
    };
    assert_eq!(m.message_mraed, msg_ref::REP);
    assert!(matches!(
        net.take(Side::B)[..],
        [CmEvent::MraReceived { .. }]
    ));
    assert_eq!(net.b.state(eb), Some(CmState::MraRepRcvd));
    net.run_for(ms(30_000));
    assert_eq!(
        net.sent(Side::B, REP).len(),
        2,
        "no REP retries while MRAed"
    );
    net.a.complete_connect(net.now, ea, &[]).unwrap();
    net.settle();
    net.expect(Side::B, &[CmEvent::Established { endpoint: eb }]);
}

#[test]
fn without_mra_a_duplicate_req_is_dropped() {
    let mut cfg = CmConfig::new(ip(B_IP), B_GUID, 5);
    cfg.mra_service_timeout = None;
    let a = CmAgent::new(CmConfig::new(ip(A_IP), A_GUID, 4));
    let mut net = Net::with(a, CmAgent::new(cfg), 14, Faults::default());
    start(&mut net, 7174);
    net.run_for(ms(7000));
    assert!(net.sent(Side::B, MRA).is_empty());
    assert_eq!(net.take(Side::B).len(), 1);
    assert_eq!(net.b.counters().rx_duplicates, 1);
}

#[test]
fn duplicate_req_after_accept_gets_the_rep_again() {
    let mut net = Net::new(15, Faults::default());
    let (ea, eb) = requested(&mut net);
    net.b.accept(net.now, eb, accept_params()).unwrap();
    let req = net.sent(Side::A, REQ)[0].mad;
    net.b.handle_mad(net.now, ip(A_IP), &req);
    net.settle();
    let reps = net.sent(Side::B, REP);
    assert_eq!(reps.len(), 2);
    assert_eq!(reps[0].mad, reps[1].mad);
    // A took the first REP; the second is a duplicate answered with an MRA
    // (A's application has not completed yet). No second ConnectRequest.
    assert!(
        matches!(net.take(Side::A)[..], [CmEvent::RepReceived { endpoint, .. }] if endpoint == ea)
    );
    assert!(matches!(
        net.take(Side::B)[..],
        [CmEvent::MraReceived {
            service_timeout: 24,
            ..
        }]
    ));
}

#[test]
fn stale_connection_rej_10_and_dreq_to_the_old_one() {
    let (mut net, old_a, old_b) = connected(16);
    // A "reboots" its QP: a new REQ from the same (GUID, QPN 0x11).
    let p = ConnectParams::new(sid(7174), ip(B_IP), 0x11, 0x999);
    let new_a = net.a.connect(net.now, p).unwrap();
    net.settle();
    let ev = net.take(Side::A);
    assert!(ev.contains(&CmEvent::Rejected {
        endpoint: new_a,
        reason: rej_reason::STALE_CONN,
        private_data: vec![0; 148],
        ari: vec![],
    }));
    assert!(ev.contains(&CmEvent::DreqReceived { endpoint: old_a }));
    net.expect(Side::B, &[CmEvent::StaleConnection { endpoint: old_b }]);
    assert_eq!(net.b.state(old_b), Some(CmState::DreqSent));
    // The old connection's owners disconnect normally.
    net.disconnect(Side::A, old_a);
    assert_eq!(net.b.state(old_b), Some(CmState::Timewait));
    assert_eq!(
        net.b.disconnect(net.now, old_b),
        Ok(DisconnectStarted::AlreadyDone)
    );
    net.flush();
    net.expect(Side::B, &[done(old_b, DisconnectHow::DrepReceived)]);
    assert!(net.b.disconnect(net.now, old_b).is_err());
}

#[test]
fn connect_argument_checks() {
    let mut net = Net::new(17, Faults::default());
    let mut p = ConnectParams::new(sid(1), ip(B_IP), 0x11, 1);
    p.private_data = vec![0; 57];
    assert_eq!(
        net.a.connect(net.now, p.clone()),
        Err(CmError::PrivateDataTooLong { len: 57, max: 56 })
    );
    p.private_data = vec![0; 56];
    assert!(net.a.connect(net.now, p.clone()).is_ok());
    p.service_id = 0x1_0000_0000; // not rdma_cm: the whole 92 bytes
    p.private_data = vec![0; 92];
    assert!(net.a.connect(net.now, p.clone()).is_ok());
    p.path_mtu = 6;
    assert!(net.a.connect(net.now, p.clone()).is_err());
    p.path_mtu = 3;
    p.local_qpn = 1 << 24;
    assert!(net.a.connect(net.now, p.clone()).is_err());
    let mut p6 = ConnectParams::new(sid(1), ip("fd00::2"), 0x11, 1);
    p6.private_data.clear();
    assert_eq!(
        net.a.connect(net.now, p6),
        Err(CmError::InvalidParameter("address family"))
    );
    assert_eq!(net.b.listen(sid(5)).map(|_| ()), Ok(()));
    assert_eq!(net.b.listen(sid(5)), Err(CmError::ServiceIdBusy(sid(5))));
    assert_eq!(
        net.a.accept(net.now, EndpointId(999), accept_params()),
        Err(CmError::UnknownEndpoint)
    );
}

#[test]
fn invalid_reqs_are_refused_like_linux() {
    let mut net = Net::new(18, Faults::default());
    net.drop_next(Side::A, REQ, 1);
    start(&mut net, 7174);
    net.flush();
    let CmMessage::Req(good) = net.sent(Side::A, REQ)[0].msg else {
        panic!()
    };
    let tid = net.sent(Side::A, REQ)[0].tid;
    let mut cases: Vec<(ndverbs_wire::cm::Req, u16)> = Vec::new();
    let mut r = good;
    r.private_data[0] = 1; // cma_version
    cases.push((r, rej_reason::CONSUMER_DEFINED));
    let mut r = good;
    r.private_data[35] ^= 1; // header destination is not B
    cases.push((r, rej_reason::CONSUMER_DEFINED));
    let mut r = good;
    r.private_data[1] = 0x50; // IP version 5
    cases.push((r, rej_reason::CONSUMER_DEFINED));
    let mut r = good;
    r.primary.remote_gid = "::ffff:10.0.0.9".parse().unwrap();
    cases.push((r, rej_reason::INVALID_GID));
    let mut r = good;
    r.transport_service_type = 1; // UC
    cases.push((r, rej_reason::INVALID_TRANSPORT_TYPE));
    let mut r = good;
    r.path_mtu = 0;
    cases.push((r, rej_reason::INVALID_MTU));
    for (i, (mut r, reason)) in cases.into_iter().enumerate() {
        r.local_comm_id = 0x100 + i as u32;
        net.b
            .handle_mad(net.now, ip(A_IP), &CmMessage::Req(r).to_mad(tid));
        let t = net.b.poll_transmit().expect("a REJ");
        let m = ndverbs_wire::mad::Mad::parse(&t.mad).unwrap();
        assert_eq!(m.header.tid, tid);
        let CmMessage::Rej(j) = CmMessage::parse(&m).unwrap() else {
            panic!()
        };
        assert_eq!(j.reason, reason, "case {i}");
        assert_eq!((j.local_comm_id, j.remote_comm_id), (0, r.local_comm_id));
        assert_eq!(j.message_rejected, msg_ref::REQ);
        if reason == rej_reason::INVALID_GID {
            assert_eq!(
                &j.ari[..16],
                &"::ffff:10.0.0.2"
                    .parse::<std::net::Ipv6Addr>()
                    .unwrap()
                    .octets()
            );
        }
        assert!(net.b.poll_event().is_none(), "no ConnectRequest");
        assert_eq!(net.b.endpoint_count(), 1, "only the listener");
    }
    assert_eq!(net.b.counters().rx_req_invalid, 6);
    // The untouched REQ is fine.
    net.b
        .handle_mad(net.now, ip(A_IP), &CmMessage::Req(good).to_mad(tid));
    assert!(matches!(
        net.b.poll_event(),
        Some(CmEvent::ConnectRequest(_))
    ));
}

#[test]
fn an_agent_can_connect_to_itself() {
    let a_ip = ip(A_IP);
    let mut a = CmAgent::new(CmConfig::new(a_ip, A_GUID, 77));
    let now = ndverbs_proto::time::Instant::ZERO;
    let pump = |a: &mut CmAgent| {
        while let Some(t) = a.poll_transmit() {
            assert_eq!(t.dst, a_ip);
            a.handle_mad(now, a_ip, &t.mad);
        }
    };
    a.listen(sid(5)).unwrap();
    let ea = a
        .connect(now, ConnectParams::new(sid(5), a_ip, 0x11, 1))
        .unwrap();
    pump(&mut a);
    let Some(CmEvent::ConnectRequest(r)) = a.poll_event() else {
        panic!()
    };
    a.accept(now, r.endpoint, AcceptParams::new(0x12, 2))
        .unwrap();
    pump(&mut a);
    assert!(matches!(a.poll_event(), Some(CmEvent::RepReceived { .. })));
    a.complete_connect(now, ea, &[]).unwrap();
    pump(&mut a);
    assert_eq!(
        a.poll_event(),
        Some(CmEvent::Established {
            endpoint: r.endpoint
        })
    );
    a.disconnect(now, ea).unwrap();
    a.disconnect(now, r.endpoint).unwrap();
    pump(&mut a);
    let ev: Vec<_> = std::iter::from_fn(|| a.poll_event()).collect();
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, CmEvent::DisconnectDone { .. }))
            .count(),
        2,
        "{ev:?}"
    );
}

#[test]
fn port_unreachable_ends_a_pending_connect_at_once() {
    let mut net = Net::new(8, Faults::default());
    // Nothing at B answers: its host says "port unreachable" instead.
    net.drop_next(Side::A, REQ, usize::MAX);
    let (_, ea) = start(&mut net, 7174);
    // A second connect, to an address that said nothing, is not touched.
    let other = ConnectParams::new(sid(7175), ip("10.0.0.3"), 0x12, 1);
    let eo = net.a.connect(net.now, other).unwrap();
    net.run_for(ms(10));
    assert_eq!(net.a.handle_unreachable(ip(B_IP), net.now), 1);
    net.expect(Side::A, &[CmEvent::Unreachable { endpoint: ea }]);
    assert_eq!(net.a.state(ea), Some(CmState::Idle));
    assert_eq!(net.a.state(eo), Some(CmState::ReqSent));
    assert_eq!(net.a.counters().unreachable, 1);
    // No REQ retransmission for the ended connect, no REJ either; the other
    // one keeps retrying until its own timeout.
    net.run_for(ms(16 * 6144));
    let to_b = |net: &Net| {
        net.sent(Side::A, REQ)
            .iter()
            .filter(|s| s.dst == ip(B_IP))
            .count()
    };
    assert_eq!(to_b(&net), 1);
    assert!(net.sent(Side::A, REJ).is_empty());
    assert_eq!(
        net.take(Side::A),
        vec![CmEvent::ConnectTimeout { endpoint: eo }]
    );
    // A late ICMP for an endpoint already ended changes nothing.
    assert_eq!(net.a.handle_unreachable(ip(B_IP), net.now), 0);
    assert!(net.take(Side::A).is_empty());
}

#[test]
fn port_unreachable_leaves_established_connections_alone() {
    let (mut net, ea, eb) = connected(9);
    assert_eq!(net.a.handle_unreachable(ip(B_IP), net.now), 0);
    assert_eq!(net.a.state(ea), Some(CmState::Established));
    assert!(net.take(Side::A).is_empty());
    assert_eq!(net.b.state(eb), Some(CmState::Established));
}

#[test]
fn comm_ids_carry_the_slot_of_a_shared_port() {
    // Two agents whose IDs carry slots 7 and 0 (a shared port's members):
    // every reply names the receiver's slot in its remote comm ID's high byte.
    let mut ca = CmConfig::new(ip(A_IP), A_GUID, 1);
    ca.comm_id_slot = Some(7);
    let mut cb = CmConfig::new(ip(B_IP), B_GUID, 2);
    cb.comm_id_slot = Some(0);
    let mut net = Net::with(CmAgent::new(ca), CmAgent::new(cb), 3, Faults::default());
    let (_, ea) = start(&mut net, 7174);
    let id = net.a.local_comm_id(ea).unwrap();
    assert_eq!(id >> 24, 7);
    net.settle();
    let ev = net.take(Side::B);
    let [CmEvent::ConnectRequest(r)] = ev.as_slice() else {
        panic!("{ev:?}")
    };
    let eb = r.endpoint;
    let idb = net.b.local_comm_id(eb).unwrap();
    assert_eq!(idb >> 24, 0);
    assert_ne!(idb, 0);
    let mut ids = std::collections::HashSet::new();
    for port in 0..200u16 {
        let mut p = ConnectParams::new(sid(port), ip(B_IP), 0x11, 0x464b);
        p.local_port = 40000 + port;
        let e = net.a.connect(net.now, p).unwrap();
        let id = net.a.local_comm_id(e).unwrap();
        assert_eq!(id >> 24, 7);
        assert!(ids.insert(id), "comm ID {id:#x} twice");
    }
}
