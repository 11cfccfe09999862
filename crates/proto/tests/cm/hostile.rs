//! Input nobody should send: random bytes, valid messages with guessed or
//! wrong IDs. Nothing panics, a live connection is not disturbed by a
//! message that does not name it exactly, and every drop is counted.

use super::harness::*;
use ndverbs_proto::cm::*;
use ndverbs_wire::cm::{msg_ref, pdata, CmMessage, Drep, Dreq, Mra, Rej, Rep, Rtu};

/// A REJ (reason 28) from the endpoint with comm ID `local` to `remote`.
fn rej(local: u32, remote: u32) -> CmMessage {
    CmMessage::Rej(Rej {
        local_comm_id: local,
        remote_comm_id: remote,
        message_rejected: msg_ref::OTHER,
        rejected_info_length: 0,
        reason: 28,
        ari: [0; 72],
        private_data: [0; pdata::REJ],
    })
}

/// The answers that name both comm IDs: REJ, DREP, RTU and an MRA of
/// message `mraed`.
fn replies(local: u32, remote: u32, mraed: u8) -> [CmMessage; 4] {
    [
        rej(local, remote),
        CmMessage::Drep(Drep {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: [0; pdata::DREP],
        }),
        CmMessage::Rtu(Rtu {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: [0; pdata::RTU],
        }),
        CmMessage::Mra(Mra {
            local_comm_id: local,
            remote_comm_id: remote,
            message_mraed: mraed,
            service_timeout: 31,
            private_data: [0; pdata::MRA],
        }),
    ]
}

#[test]
fn random_bytes_are_counted_not_acted_on() {
    let (mut net, ea, _eb) = connected(60);
    let mut rng = Rng::new(61);
    let before = *net.a.counters();
    for len in [0usize, 1, 24, 255, 256, 257, 1000] {
        for _ in 0..200 {
            let mut b: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if len == 256 && rng.chance(0.5) {
                // A CM header so that the body gets parsed.
                b[..4].copy_from_slice(&[1, 7, 2, 3]);
                b[16] = 0;
                b[17] = 0x10 + rng.below(11) as u8;
            }
            net.a.handle_mad(net.now, ip(B_IP), &b);
        }
    }
    assert_eq!(net.a.state(ea), Some(CmState::Established));
    let c = *net.a.counters();
    assert_eq!(c.rx_mads - before.rx_mads, 1400);
    // DREQs naming nothing get DREPs; everything else is dropped.
    let dropped = c.rx_malformed + c.rx_unmatched + c.rx_wrong_state + c.rx_unsupported;
    assert!(dropped + c.tx_drep_unknown + c.tx_rej >= 1300, "{c:?}");
}

#[test]
fn guessed_ids_do_not_touch_a_connection() {
    let (mut net, ea, eb) = connected(62);
    let (ca, cb) = comm_ids(&net, ea, eb);
    let now = net.now;
    // Right local ID, wrong remote: REJ, DREP, RTU, MRA, REP.
    let wrong = cb ^ 1;
    let msgs = replies(wrong, ca, msg_ref::REP);
    for m in msgs {
        net.a.handle_mad(now, ip(B_IP), &m.to_mad(1));
    }
    // A REP for A's comm ID from someone else: A already has its peer.
    let CmMessage::Rep(mut rep) = net.sent(Side::B, REP)[0].msg else {
        panic!()
    };
    rep.local_comm_id = wrong;
    net.a
        .handle_mad(now, ip(B_IP), &CmMessage::Rep(Rep { ..rep }).to_mad(1));
    net.flush();
    assert!(net.take(Side::A).is_empty());
    assert!(net.a.poll_transmit().is_none());
    assert_eq!(net.a.state(ea), Some(CmState::Established));
    assert_eq!(net.a.counters().rx_unmatched, 5);
    // The exact REJ does end it (the peer's CM says the connection is gone).
    net.a.handle_mad(now, ip(B_IP), &rej(cb, ca).to_mad(1));
    assert_eq!(net.a.state(ea), Some(CmState::Timewait));
    assert!(matches!(
        net.a.poll_event(),
        Some(CmEvent::Rejected { reason: 28, .. })
    ));
    // ND's Disconnect on it still succeeds.
    assert_eq!(
        net.a.disconnect(now, ea),
        Ok(DisconnectStarted::AlreadyDone)
    );
    assert_eq!(
        net.a.poll_event(),
        Some(done(ea, DisconnectHow::RejReceived))
    );
}

#[test]
fn messages_in_the_wrong_state_are_dropped() {
    let (mut net, ea, eb) = connected(63);
    // Replay the whole setup exchange at both ends.
    let old: Vec<_> = net.wire.iter().map(|s| (s.from, s.mad)).collect();
    for (from, mad) in &old {
        match from {
            Side::A => net.b.handle_mad(net.now, ip(A_IP), mad),
            Side::B => net.a.handle_mad(net.now, ip(B_IP), mad),
        }
    }
    net.settle();
    // The REP replay makes A resend its RTU (Linux's dup REP handling); the
    // REQ replay hits B's remote-ID table as a duplicate and is ignored.
    assert!(net.take(Side::A).is_empty());
    assert!(net.take(Side::B).is_empty());
    assert_eq!(net.a.state(ea), Some(CmState::Established));
    assert_eq!(net.b.state(eb), Some(CmState::Established));
    assert_eq!(net.sent(Side::A, RTU).len(), 2);
}

#[test]
fn exact_ids_from_another_address_are_dropped() {
    let (mut net, ea, eb) = connected(64);
    let (ca, cb) = comm_ids(&net, ea, eb);
    let now = net.now;
    let forger = ip("10.0.0.66");
    // Everything that names B's connection exactly (comm IDs, QPN), sent to
    // B from an address that is not A's.
    let mut msgs = vec![CmMessage::Dreq(Dreq {
        local_comm_id: ca,
        remote_comm_id: cb,
        remote_qpn: 0x22,
        private_data: [0; pdata::DREQ],
    })];
    msgs.extend(replies(ca, cb, msg_ref::OTHER));
    let before = *net.b.counters();
    for m in &msgs {
        net.b.handle_mad(now, forger, &m.to_mad(9));
    }
    // A's own REQ replayed (a duplicate) and with A's QPN but a fresh comm ID
    // (a "stale connection"), both from the forger.
    let CmMessage::Req(req) = net.sent(Side::A, REQ)[0].msg else {
        panic!()
    };
    net.b
        .handle_mad(now, forger, &CmMessage::Req(req).to_mad(9));
    let mut fresh = req;
    fresh.local_comm_id ^= 0x5555;
    net.b
        .handle_mad(now, forger, &CmMessage::Req(fresh).to_mad(9));
    net.flush();
    assert!(net.take(Side::B).is_empty());
    assert!(net.b.poll_transmit().is_none(), "nothing answers a forgery");
    assert_eq!(net.b.state(eb), Some(CmState::Established));
    let c = *net.b.counters();
    assert_eq!(c.rx_wrong_source - before.rx_wrong_source, 7, "{c:?}");
    // A REJ naming A's connection from the forger does not end it either.
    net.a.handle_mad(now, forger, &rej(cb, ca).to_mad(9));
    assert_eq!(net.a.state(ea), Some(CmState::Established));
    assert_eq!(net.a.counters().rx_wrong_source, 1);
    // The same DREQ from A's address is A's: it is acted on.
    net.b.handle_mad(now, ip(A_IP), &msgs[0].to_mad(9));
    assert_eq!(
        net.b.poll_event(),
        Some(CmEvent::DreqReceived { endpoint: eb })
    );
}
