//! SIDR: UD service ID resolution, byte for byte as Linux's CM, its
//! retransmission, refusals, duplicates and hostile replies.

use crate::harness::*;
use ndverbs_proto::cm::*;
use ndverbs_wire::cm::{attr, CmMessage, SidrRep};
use ndverbs_wire::cma;
use ndverbs_wire::mad::Mad;

fn udp_sid(port: u16) -> u64 {
    cma::service_id(cma::RDMA_PS_UDP, port)
}

fn request(net: &mut Net, port: u16, data: &[u8]) -> EndpointId {
    let mut p = SidrParams::new(udp_sid(port), ip(B_IP));
    p.local_port = 41000;
    p.private_data = data.to_vec();
    let now = net.now;
    net.a.sidr_request(now, p).unwrap()
}

fn answer(qpn: u32) -> SidrAnswer {
    SidrAnswer {
        status: sidr_status::SUCCESS,
        qpn,
        qkey: 0x0123_4567,
        private_data: b"rep".to_vec(),
    }
}

#[test]
fn resolve_and_answer_byte_exact() {
    let mut net = Net::new(1, Faults::default());
    let listener = net.b.listen(udp_sid(7174)).unwrap();
    let ea = request(&mut net, 7174, b"hello");
    assert_eq!(net.a.state(ea), Some(CmState::SidrReqSent));
    let req = net.connect_request();
    assert!(req.sidr);
    assert_eq!((req.listener, req.service_id), (listener, udp_sid(7174)));
    assert_eq!(req.peer.addr, ip(A_IP));
    assert_eq!(req.peer.private_data.len(), 180);
    assert!(req.peer.private_data.starts_with(b"hello"));
    let h = req.cma.unwrap();
    assert_eq!((h.src, h.src_port, h.dst), (ip(A_IP), 41000, ip(B_IP)));
    assert_eq!(net.b.state(req.endpoint), Some(CmState::SidrReqRcvd));
    // A REQ's accept does not apply to a SIDR request.
    let now = net.now;
    assert!(net
        .b
        .accept(now, req.endpoint, AcceptParams::new(0x22, 1))
        .is_err());
    net.b.sidr_reply(req.endpoint, answer(0x22)).unwrap();
    assert_eq!(net.b.state(req.endpoint), Some(CmState::Idle));
    net.settle();
    match net.take(Side::A).as_slice() {
        [CmEvent::SidrReply {
            endpoint,
            status: 0,
            qpn: 0x22,
            qkey: 0x0123_4567,
            private_data,
        }] => {
            assert_eq!(*endpoint, ea);
            assert_eq!(private_data.len(), 136);
            assert!(private_data.starts_with(b"rep"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(net.a.state(ea), Some(CmState::Idle));
    assert!(net.a.poll_timeout().is_none(), "no more SIDR_REQs");

    // The SIDR_REQ as Linux's cm_format_sidr_req writes it.
    let s = net.sent(Side::A, attr::SIDR_REQ);
    assert_eq!(s.len(), 1);
    let CmMessage::SidrReq(r) = s[0].msg else {
        panic!()
    };
    let comm = net.a.local_comm_id(ea).unwrap();
    assert_eq!(r.request_id, comm);
    assert_eq!(s[0].tid, form_tid(net.a.config().hi_tid, comm));
    assert_eq!((r.pkey, r.service_id), (0xffff, 0x0000_0000_0111_1c06));
    let d = &s[0].mad[24..];
    assert_eq!(&d[0..4], &comm.to_be_bytes());
    assert_eq!(&d[4..6], &[0xff, 0xff]);
    assert_eq!(&d[8..16], &0x0111_1c06u64.to_be_bytes());
    // The rdma_cm header: version 0, IPv4, port, addresses.
    assert_eq!(&d[16..20], &[0, 0x40, 0xa0, 0x28]);
    assert_eq!(&d[32..36], &[10, 0, 0, 1]);
    assert_eq!(&d[48..52], &[10, 0, 0, 2]);
    assert_eq!(&d[52..57], b"hello");
    let m = Mad::parse(&s[0].mad).unwrap();
    assert_eq!(m.header.attr_id, attr::SIDR_REQ);
    // The SIDR_REP as cm_format_sidr_rep: request ID, status, QPN, service
    // ID and Q_Key, the request's TID echoed.
    let s = net.sent(Side::B, attr::SIDR_REP);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].tid, form_tid(net.a.config().hi_tid, comm));
    let d = &s[0].mad[24..];
    assert_eq!(&d[0..4], &comm.to_be_bytes());
    assert_eq!(d[4], 0);
    assert_eq!(&d[8..11], &[0, 0, 0x22]);
    assert_eq!(&d[12..20], &0x0111_1c06u64.to_be_bytes());
    assert_eq!(&d[20..24], &[0x01, 0x23, 0x45, 0x67]);
    assert_eq!(&d[96..99], b"rep");
}

#[test]
fn retransmitted_at_the_response_timeout_then_times_out() {
    let mut net = Net::new(2, Faults::default());
    // Nobody answers: B's SIDR_REPs are lost.
    net.b.listen(udp_sid(7174)).unwrap();
    net.drop_next(Side::A, attr::SIDR_REQ, usize::MAX);
    let ea = request(&mut net, 7174, &[]);
    // conv(20) = 4096 ms between copies, 15 retries, then IDLE.
    let ev = net.quiet_then(Side::A, ms(16 * 4096 - 1), ms(2));
    assert_eq!(ev, vec![CmEvent::ConnectTimeout { endpoint: ea }]);
    let s = net.sent(Side::A, attr::SIDR_REQ);
    assert_eq!(s.len(), 16);
    assert_eq!(s[1].at.saturating_duration_since(s[0].at), ms(4096));
    assert!(
        s.windows(2).all(|w| w[0].mad == w[1].mad),
        "same bytes each time"
    );
    assert_eq!(net.a.state(ea), Some(CmState::Idle));
}

#[test]
fn lost_reply_is_recovered_and_duplicates_are_dropped() {
    let mut net = Net::new(3, Faults::default());
    net.b.listen(udp_sid(9)).unwrap();
    let ea = request(&mut net, 9, &[]);
    let req = net.connect_request();
    // The application thinks for 5 s: the retransmitted SIDR_REQ is a
    // duplicate of the one it holds, not a second request.
    net.run_for(ms(5000));
    assert!(net.take(Side::B).is_empty());
    assert_eq!(net.b.counters().rx_duplicates, 1);
    net.drop_next(Side::B, attr::SIDR_REP, 1);
    net.b.sidr_reply(req.endpoint, answer(0x33)).unwrap();
    net.settle();
    assert!(net.take(Side::A).is_empty());
    // Answered requests are forgotten: the next copy is a new request.
    net.run_for(ms(4096));
    let again = match net.take(Side::B).pop() {
        Some(CmEvent::ConnectRequest(r)) => r,
        other => panic!("{other:?}"),
    };
    assert_ne!(again.endpoint, req.endpoint);
    net.b.sidr_reply(again.endpoint, answer(0x33)).unwrap();
    net.settle();
    assert!(matches!(
        net.take(Side::A).as_slice(),
        [CmEvent::SidrReply { endpoint, qpn: 0x33, .. }] if *endpoint == ea
    ));
}

#[test]
fn refusals_carry_linux_statuses() {
    let mut net = Net::new(4, Faults::default());
    // No listener: IB_SIDR_UNSUPPORTED at once, service ID echoed.
    let ea = request(&mut net, 1, &[]);
    net.settle();
    match net.take(Side::A).as_slice() {
        [CmEvent::SidrReply {
            endpoint,
            status: sidr_status::UNSUPPORTED,
            qpn: 0,
            qkey: 0,
            ..
        }] => assert_eq!(*endpoint, ea),
        other => panic!("{other:?}"),
    }
    let CmMessage::SidrRep(r) = net.sent(Side::B, attr::SIDR_REP)[0].msg else {
        panic!()
    };
    assert_eq!(r.service_id, udp_sid(1));
    // The application rejects: IB_SIDR_REJECT with its private data.
    net.b.listen(udp_sid(2)).unwrap();
    let eb = request(&mut net, 2, &[]);
    let req = net.connect_request();
    let now = net.now;
    net.b.reject(now, req.endpoint, b"no").unwrap();
    net.settle();
    match net.take(Side::A).as_slice() {
        [CmEvent::SidrReply {
            endpoint,
            status: sidr_status::REJECT,
            private_data,
            ..
        }] => {
            assert_eq!(*endpoint, eb);
            assert!(private_data.starts_with(b"no"));
        }
        other => panic!("{other:?}"),
    }
    // Destroyed unanswered: IB_SIDR_REJECT too.
    let ec = request(&mut net, 2, &[]);
    let req = net.connect_request();
    let now = net.now;
    net.b.destroy(now, req.endpoint).unwrap();
    net.settle();
    assert!(matches!(
        net.take(Side::A).as_slice(),
        [CmEvent::SidrReply { endpoint, status: sidr_status::REJECT, .. }] if *endpoint == ec
    ));
    // A bad rdma_cm header never reaches the application.
    let now = net.now;
    let mut p = SidrParams::new(udp_sid(2), ip(A_IP));
    p.local_port = 1;
    // A's header names A as the destination: B refuses it.
    let mut bad = CmAgent::new(CmConfig::new(ip(A_IP), A_GUID, 9));
    bad.sidr_request(now, p).unwrap();
    let t = bad.poll_transmit().unwrap();
    net.b.handle_mad(now, ip(A_IP), &t.mad);
    let rep = net.b.poll_transmit().unwrap();
    let CmMessage::SidrRep(r) = CmMessage::parse(&Mad::parse(&rep.mad).unwrap()).unwrap() else {
        panic!()
    };
    assert_eq!(r.status, sidr_status::REJECT);
    assert!(net.b.poll_event().is_none());
}

#[test]
fn hostile_replies_are_dropped_and_counted() {
    let mut net = Net::new(5, Faults::default());
    net.b.listen(udp_sid(3)).unwrap();
    let ea = request(&mut net, 3, &[]);
    let comm = net.a.local_comm_id(ea).unwrap();
    let rep = |request_id| {
        CmMessage::SidrRep(SidrRep {
            request_id,
            status: 0,
            add_info_len: 0,
            vendor_id: 0,
            qpn: 0x66,
            service_id: udp_sid(3),
            qkey: 1,
            add_info: [0; 72],
            private_data: [0; 136],
        })
        .to_mad(7)
    };
    let now = net.now;
    // Unknown request ID.
    net.a.handle_mad(now, ip(B_IP), &rep(comm ^ 1));
    assert_eq!(net.a.counters().rx_unmatched, 1);
    // Right ID, wrong sender.
    net.a.handle_mad(now, ip("10.0.0.66"), &rep(comm));
    assert_eq!(net.a.counters().rx_wrong_source, 1);
    // A SIDR_REP for a connection endpoint, not a SIDR request.
    net.b.listen(sid(4)).unwrap();
    let ec = net
        .a
        .connect(now, ConnectParams::new(sid(4), ip(B_IP), 0x11, 1))
        .unwrap();
    let c2 = net.a.local_comm_id(ec).unwrap();
    net.a.handle_mad(now, ip(B_IP), &rep(c2));
    assert_eq!(net.a.counters().rx_wrong_state, 1);
    assert_eq!(net.a.state(ea), Some(CmState::SidrReqSent));
    assert_eq!(net.a.state(ec), Some(CmState::ReqSent));
    // Truncated and garbage SIDR MADs.
    let mut short = rep(comm);
    short[18] = 0;
    net.a.handle_mad(now, ip(B_IP), &short[..100]);
    assert!(net.a.counters().rx_malformed >= 1);
    assert!(net.take(Side::A).is_empty());
    // The real one still completes it.
    net.settle();
    let req = match net.take(Side::B).into_iter().find_map(|e| match e {
        CmEvent::ConnectRequest(r) if r.sidr => Some(r),
        _ => None,
    }) {
        Some(r) => r,
        None => panic!("no SIDR request"),
    };
    net.b.sidr_reply(req.endpoint, answer(0x44)).unwrap();
    net.settle();
    assert!(net
        .take(Side::A)
        .iter()
        .any(|e| matches!(e, CmEvent::SidrReply { endpoint, qpn: 0x44, .. } if *endpoint == ea)));
}

#[test]
fn calls_are_checked() {
    let mut net = Net::new(6, Faults::default());
    let now = net.now;
    let mut p = SidrParams::new(udp_sid(5), ip(B_IP));
    p.private_data = vec![0; 181];
    assert_eq!(
        net.a.sidr_request(now, p.clone()),
        Err(CmError::PrivateDataTooLong { len: 181, max: 180 })
    );
    p.private_data = vec![0; 180];
    assert!(net.a.sidr_request(now, p).is_ok());
    assert_eq!(max_sidr_private_data(0x1234), 216);
    let v6 = SidrParams::new(udp_sid(5), ip("fd00::1"));
    assert!(net.a.sidr_request(now, v6).is_err());
    // Replying to something that is not a SIDR request.
    let l = net.b.listen(udp_sid(5)).unwrap();
    assert!(net.b.sidr_reply(l, answer(0x22)).is_err());
    let req = net.connect_request();
    assert!(net.b.sidr_reply(req.endpoint, answer(1)).is_err(), "QPN 1");
    let mut big = answer(0x22);
    big.private_data = vec![0; 137];
    assert!(net.b.sidr_reply(req.endpoint, big).is_err());
    net.b.sidr_reply(req.endpoint, answer(0x22)).unwrap();
    assert!(
        net.b.sidr_reply(req.endpoint, answer(0x22)).is_err(),
        "answered once"
    );
    // ICMP ends a SIDR request at once.
    let ea = request(&mut net, 5, &[]);
    net.flush();
    assert!(net.a.handle_unreachable(ip(B_IP), now) >= 1);
    assert!(net
        .take(Side::A)
        .contains(&CmEvent::Unreachable { endpoint: ea }));
}
