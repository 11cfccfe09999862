//! Against Linux: the MADs of the reference captures (Linux 6.1 rxe,
//! `testdata/captures/*.pcap`).
//!
//! For every connection in rping, rdma_client and ib_send_bw -R we play one
//! side with a `CmAgent` configured like that host (address, node GUID,
//! MAD agent hi_tid 2) and the other side from the capture:
//!
//! * every captured MAD of the other side must be accepted (with its comm
//!   IDs rewritten to ours — ours are random), and produce the right event;
//! * every MAD we send must equal Linux's byte for byte once our random comm
//!   ID (and the TID formed from it) is replaced by Linux's.

use super::harness::{done, Rng};
use ndverbs_proto::cm::*;
use ndverbs_proto::time::{Duration, Instant};
use ndverbs_wire::cm::{attr, CmMessage};
use ndverbs_wire::cma::{CmaHeader, CMA_HEADER_LEN};
use ndverbs_wire::mad::{Mad, MAD_LEN};
use std::net::IpAddr;

#[derive(Debug, Clone)]
struct CapMad {
    ts_nanos: u64,
    src: IpAddr,
    tid: u64,
    msg: CmMessage,
    mad: [u8; MAD_LEN],
}

fn cm_frames(name: &str) -> Vec<CapMad> {
    crate::capture_files::packets(name)
        .iter()
        .filter_map(|c| {
            let p = c.packet();
            let m = Mad::parse(p.payload).ok()?;
            let msg = CmMessage::parse(&m).ok()?;
            Some(CapMad {
                ts_nanos: c.ts_nanos,
                src: c.src,
                tid: m.header.tid,
                msg,
                mad: p.payload.try_into().unwrap(),
            })
        })
        .collect()
}

fn put_u32(mad: &mut [u8; MAD_LEN], off: usize, v: u32) {
    mad[off..off + 4].copy_from_slice(&v.to_be_bytes());
}
fn get_u32(mad: &[u8; MAD_LEN], off: usize) -> u32 {
    u32::from_be_bytes(mad[off..off + 4].try_into().unwrap())
}
const LOCAL_COMM: usize = 24; // MAD offset of every message's local comm ID
const REMOTE_COMM: usize = 28; // … and of the remote one (not REQ)

/// One connection of a capture, seen from `us`.
struct Replay {
    agent: CmAgent,
    ep: Option<EndpointId>,
    /// Linux's comm ID for our side, and ours.
    linux_comm: u32,
    our_comm: u32,
    peer_ip: IpAddr,
    now: Instant,
    checked: usize,
}

impl Replay {
    /// A captured MAD of the peer, with our side's comm ID rewritten.
    fn feed(&mut self, c: &CapMad) {
        let mut mad = c.mad;
        if c.msg.attr_id() != attr::REQ && get_u32(&mad, REMOTE_COMM) == self.linux_comm {
            put_u32(&mut mad, REMOTE_COMM, self.our_comm);
        }
        self.agent.handle_mad(self.now, c.src, &mad);
    }

    /// Our next MAD must be Linux's `c` up to our comm ID.
    fn expect(&mut self, c: &CapMad) {
        let t = self
            .agent
            .poll_transmit()
            .unwrap_or_else(|| panic!("we sent nothing where Linux sent {}", c.msg.name()));
        assert_eq!(t.dst, self.peer_ip);
        let mut mad = t.mad;
        if self.our_comm == 0 {
            // Our first message (REQ or REP) reveals our comm ID.
            self.our_comm = get_u32(&mad, LOCAL_COMM);
        }
        if get_u32(&mad, LOCAL_COMM) == self.our_comm {
            put_u32(&mut mad, LOCAL_COMM, self.linux_comm);
        }
        let tid = u64::from_be_bytes(mad[8..16].try_into().unwrap());
        if tid == form_tid(2, self.our_comm) {
            // A TID we formed: Linux formed its own the same way.
            assert_eq!(c.tid, form_tid(2, self.linux_comm), "Linux's TID layout");
            mad[8..16].copy_from_slice(&c.tid.to_be_bytes());
        }
        let ours = CmMessage::parse(&Mad::parse(&mad).unwrap()).unwrap();
        assert_eq!(ours, c.msg, "{} differs", c.msg.name());
        assert_eq!(mad, c.mad, "{} bytes differ", c.msg.name());
        self.checked += 1;
    }

    /// Feeds the peer's `c`, which must give exactly the event `want`
    /// makes for our endpoint.
    fn hears(&mut self, c: &CapMad, want: impl FnOnce(EndpointId) -> CmEvent) {
        self.feed(c);
        let want = want(self.ep.unwrap());
        assert_eq!(self.event(), want);
    }

    fn event(&mut self) -> CmEvent {
        self.agent.poll_event().expect("an event")
    }
}

fn config(ip: IpAddr, guid: u64) -> CmConfig {
    let mut c = CmConfig::new(ip, guid, 0x5eed);
    c.hi_tid = 2;
    c
}

/// Replays every connection of `name`, playing the active side if `active`.
fn replay(name: &str, active: bool) -> usize {
    let frames = cm_frames(name);
    let reqs: Vec<_> = frames
        .iter()
        .filter_map(|c| match c.msg {
            CmMessage::Req(r) => Some((c.clone(), r)),
            _ => None,
        })
        .collect();
    assert!(!reqs.is_empty());
    let mut checked = 0;
    for (req_frame, req) in reqs {
        let active_ip = req_frame.src;
        let active_comm = req.local_comm_id;
        // This connection's messages, in capture order.
        let conv: Vec<&CapMad> = frames
            .iter()
            .filter(|c| {
                c.msg.local_comm_id() == active_comm || c.msg.remote_comm_id() == Some(active_comm)
            })
            .collect();
        let rep_frame = conv
            .iter()
            .find(|c| c.msg.attr_id() == attr::REP)
            .expect("REP");
        let CmMessage::Rep(rep) = rep_frame.msg else {
            unreachable!()
        };
        let passive_ip = rep_frame.src;
        let (our_ip, peer_ip, guid, linux_comm) = if active {
            (active_ip, passive_ip, req.local_ca_guid, active_comm)
        } else {
            (passive_ip, active_ip, rep.local_ca_guid, rep.local_comm_id)
        };
        let mut r = Replay {
            agent: CmAgent::new(config(our_ip, guid)),
            ep: None,
            linux_comm,
            our_comm: 0,
            peer_ip,
            now: Instant::ZERO,
            checked: 0,
        };
        if active {
            let h = CmaHeader::parse(&req.private_data).unwrap();
            let mut p =
                ConnectParams::new(req.service_id, peer_ip, req.local_qpn, req.starting_psn);
            p.local_port = h.src_port;
            p.responder_resources = req.responder_resources;
            p.initiator_depth = req.initiator_depth;
            p.retry_count = req.retry_count;
            p.rnr_retry_count = req.rnr_retry_count;
            p.path_mtu = req.path_mtu;
            p.private_data = req.private_data[CMA_HEADER_LEN..].to_vec();
            r.ep = Some(r.agent.connect(r.now, p).unwrap());
        } else {
            r.agent.listen(req.service_id).unwrap();
        }
        for c in conv {
            let from_us = c.src == our_ip;
            match (c.msg, from_us) {
                (CmMessage::Req(_), true) => r.expect(c),
                (CmMessage::Req(q), false) => {
                    r.feed(c);
                    let CmEvent::ConnectRequest(cr) = r.event() else {
                        panic!()
                    };
                    assert_eq!(
                        (cr.peer.qpn, cr.peer.starting_psn),
                        (q.local_qpn, q.starting_psn)
                    );
                    assert_eq!(cr.cma.unwrap().src, peer_ip);
                    r.ep = Some(cr.endpoint);
                }
                (CmMessage::Rep(p), true) => {
                    let mut a = AcceptParams::new(p.local_qpn, p.starting_psn);
                    a.responder_resources = p.responder_resources;
                    a.initiator_depth = p.initiator_depth;
                    a.rnr_retry_count = p.rnr_retry_count;
                    let qp = r.agent.accept(r.now, r.ep.unwrap(), a).unwrap();
                    assert_eq!(
                        (qp.dest_qpn, qp.sq_psn, qp.rq_psn),
                        (req.local_qpn, req.starting_psn, p.starting_psn)
                    );
                    assert_eq!(qp.timeout, req.primary.local_ack_timeout);
                    r.expect(c);
                }
                (CmMessage::Rep(p), false) => {
                    r.feed(c);
                    let CmEvent::RepReceived { qp, .. } = r.event() else {
                        panic!()
                    };
                    assert_eq!(
                        (qp.dest_qpn, qp.sq_psn, qp.rq_psn),
                        (p.local_qpn, p.starting_psn, req.starting_psn)
                    );
                    assert_eq!(qp.timeout, 19, "cm_ack_timeout(15, 18)");
                }
                (CmMessage::Rtu(_), true) => {
                    r.agent.complete_connect(r.now, r.ep.unwrap(), &[]).unwrap();
                    r.expect(c);
                }
                (CmMessage::Rtu(_), false) => {
                    r.hears(c, |endpoint| CmEvent::Established { endpoint })
                }
                (CmMessage::Dreq(_), true) => {
                    if r.agent.state(r.ep.unwrap()) == Some(CmState::DreqRcvd) {
                        panic!("Linux sent a DREQ after receiving one");
                    }
                    assert_eq!(
                        r.agent.disconnect(r.now, r.ep.unwrap()),
                        Ok(DisconnectStarted::DreqSent)
                    );
                    r.expect(c);
                }
                (CmMessage::Dreq(_), false) => {
                    r.hears(c, |endpoint| CmEvent::DreqReceived { endpoint })
                }
                (CmMessage::Drep(_), true) => {
                    assert_eq!(
                        r.agent.disconnect(r.now, r.ep.unwrap()),
                        Ok(DisconnectStarted::DrepSent)
                    );
                    r.expect(c);
                    assert!(matches!(
                        r.event(),
                        CmEvent::DisconnectDone {
                            how: DisconnectHow::DrepSent,
                            ..
                        }
                    ));
                }
                (CmMessage::Drep(_), false) => {
                    r.hears(c, |ep| done(ep, DisconnectHow::DrepReceived))
                }
                (m, _) => panic!("unexpected {} in {name}", m.name()),
            }
            r.now += Duration::from_millis(1);
        }
        assert!(r.agent.poll_transmit().is_none(), "we sent more than Linux");
        assert_eq!(r.agent.state(r.ep.unwrap()), Some(CmState::Timewait));
        let cnt = r.agent.counters();
        assert_eq!(
            cnt.rx_malformed + cnt.rx_unmatched + cnt.rx_wrong_state + cnt.rx_duplicates,
            0
        );
        checked += r.checked;
    }
    checked
}

#[test]
fn rping_both_roles() {
    assert_eq!(replay("rping.pcap", true), 3, "REQ RTU DREQ");
    assert_eq!(replay("rping.pcap", false), 2, "REP DREP");
}

#[test]
fn rdma_client_both_roles() {
    assert_eq!(replay("rdma_client.pcap", true), 3);
    assert_eq!(replay("rdma_client.pcap", false), 2);
}

#[test]
fn ib_send_bw_rdma_cm_both_roles() {
    // Two connections (perftest's data QP and its rdma_cm control), the
    // passive side disconnects both.
    assert_eq!(replay("ib_send_bw_R.pcap", true), 2 * 3, "REQ RTU DREP ×2");
    assert_eq!(replay("ib_send_bw_R.pcap", false), 2 * 2, "REP DREQ ×2");
}

#[test]
fn read_and_write_bw_rdma_cm_both_roles() {
    for f in ["ib_read_bw_R.pcap", "ib_write_bw_R.pcap"] {
        assert!(replay(f, true) >= 3, "{f}");
        assert!(replay(f, false) >= 2, "{f}");
    }
}

#[test]
fn req_retransmission_like_the_unanswered_capture() {
    let f = cm_frames("guest_rping_req_unanswered.pcap");
    let [a, b] = &f[..] else { panic!("two REQs") };
    assert_eq!(
        a.mad, b.mad,
        "Linux retransmits the same bytes, TID included"
    );
    let gap_ms = (b.ts_nanos - a.ts_nanos) / 1_000_000;
    let cfg = CmConfig::new(a.src, 1, 1);
    // 6189 ms on the wire (scheduling jitter); ours is the exact 6144.
    assert_eq!(cfg.req_interval_ms(), 6144);
    assert!((6144..6144 + 100).contains(&gap_ms), "{gap_ms}");
}

#[test]
fn captured_mads_under_random_corruption_never_panic() {
    let frames: Vec<CapMad> = ["rping.pcap", "ib_send_bw_R.pcap", "rdma_client.pcap"]
        .iter()
        .flat_map(|n| cm_frames(n))
        .collect();
    let mut rng = Rng::new(99);
    let mut agent = CmAgent::new(config("10.77.0.3".parse().unwrap(), 3));
    agent.listen(0x0106_1c06).unwrap();
    let mut now = Instant::ZERO;
    for i in 0..20_000u64 {
        let c = &frames[rng.below(frames.len() as u64) as usize];
        let mut mad = c.mad;
        for _ in 0..=rng.below(4) {
            let pos = rng.below(MAD_LEN as u64) as usize;
            mad[pos] ^= 1 << rng.below(8);
        }
        let len = if i % 97 == 0 {
            rng.below(300) as usize
        } else {
            MAD_LEN
        };
        let buf: Vec<u8> = mad.iter().copied().cycle().take(len).collect();
        agent.handle_mad(now, c.src, &buf);
        while agent.poll_transmit().is_some() {}
        while let Some(e) = agent.poll_event() {
            if let CmEvent::ConnectRequest(r) = e {
                match rng.below(3) {
                    0 => drop(agent.accept(now, r.endpoint, AcceptParams::new(0x50, 1))),
                    1 => drop(agent.reject(now, r.endpoint, &[])),
                    _ => {}
                }
            }
        }
        now += Duration::from_millis(rng.below(3000));
        agent.handle_timeout(now);
    }
    assert_eq!(agent.counters().rx_mads, 20_000);
}
