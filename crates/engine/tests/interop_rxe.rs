//! The engine's UDP layer against Linux Soft-RoCE in the interop guest
//! (started once per test run by `scripts/interop.sh up`; the test kit's
//! [`Guest`] finds it, or skips the tests by its rule).
//!
//! * rxe accepts what we send (ICRC computed for IP ID 0): its CM answers our
//!   REQ with REJ "invalid service ID" when nothing listens, and with REP when
//!   rping does.
//! * We accept what rxe sends (random IP IDs recovered from the ICRC).

mod common;

use common::send_signed;
use ndverbs_engine::icrc::IcrcCache;
use ndverbs_engine::link::udp::RoceSocket;
use ndverbs_engine::link::MAX_DATAGRAM;
use ndverbs_testkit::guest::{Guest, Listen, GUEST, HOST};
use ndverbs_wire::bth::Bth;
use ndverbs_wire::cm::{rej_reason, CmMessage, CmPath, Req};
use ndverbs_wire::cma::{self, CmaHeader};
use ndverbs_wire::ext::Deth;
use ndverbs_wire::mad::{Mad, GSI_QKEY, GSI_QPN};
use ndverbs_wire::opcode::Opcode;
use ndverbs_wire::packet::Packet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

fn host() -> IpAddr {
    HOST.parse().unwrap()
}

fn guest() -> IpAddr {
    GUEST.parse().unwrap()
}

/// Our RoCE socket on [`HOST`], in the guest's namespace.
fn host_socket(g: &Guest) -> RoceSocket {
    g.netns().run(|| RoceSocket::bind(host()).unwrap())
}

fn req(local: IpAddr, peer: IpAddr, port: u16, comm_id: u32) -> Vec<u8> {
    let mut pd = [0u8; 92];
    CmaHeader::new(local, 40000, peer).write(&mut pd).unwrap();
    let r = Req {
        local_comm_id: comm_id,
        vendor_id: 0,
        service_id: cma::service_id(cma::RDMA_PS_TCP, port),
        local_ca_guid: 0x0200_00ff_fe00_0001,
        local_qkey: 0,
        local_qpn: 0x123,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: 0,
        end_to_end_flow_control: false,
        starting_psn: 0x1000,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary: CmPath {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: cma::gid_of(local),
            remote_gid: cma::gid_of(peer),
            hop_limit: 64,
            local_ack_timeout: 18,
            ..CmPath::NONE
        },
        alternate: CmPath::NONE,
        private_data: pd,
    };
    let mad = CmMessage::Req(r).to_mad(u64::from(comm_id));
    let mut p = Packet::new(Bth::new(Opcode::UD_SEND_ONLY, GSI_QPN, 0));
    p.ext.deth = Some(Deth {
        qkey: GSI_QKEY,
        resv: 0,
        src_qpn: GSI_QPN,
    });
    p.payload = &mad;
    let mut out = vec![0u8; p.encoded_len().unwrap()];
    p.write(&mut out).unwrap();
    out
}

/// The next CM message received (with a verified ICRC), within `limit`.
fn next_cm(sock: &RoceSocket, limit: Duration) -> Option<(CmMessage, Option<u16>)> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut icrc = IcrcCache::new(sock.addr());
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        let Some(d) = sock.recv_datagram(&mut buf).unwrap() else {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        };
        for range in d.packets() {
            let r = match icrc.verify(&buf[range.clone()], d.src, d.dst) {
                Ok(r) => r,
                Err(e) => panic!("dropped a packet from rxe: {e:?}"),
            };
            let p = Packet::parse(&buf[range.start..range.start + r.len]).unwrap();
            if let Ok(cm) = Mad::parse(p.payload).and_then(|m| CmMessage::parse(&m)) {
                return Some((cm, r.ipv4_id));
            }
        }
    }
    None
}

#[test]
fn rxe_accepts_our_icrc_and_rejects_an_unknown_service() {
    let Some(g) = Guest::get() else { return };
    let sock = host_socket(&g);
    let mut pkt = req(host(), guest(), 7999, 0x1111_0001);
    send_signed(&sock, &mut pkt, guest());
    let (cm, id) = next_cm(&sock, Duration::from_secs(10)).expect("no answer from rxe");
    let CmMessage::Rej(rej) = cm else {
        panic!("expected REJ, got {}", cm.name())
    };
    assert_eq!(rej.reason, rej_reason::INVALID_SERVICE_ID);
    assert_eq!(rej.remote_comm_id, 0x1111_0001);
    assert!(id.is_some(), "IPv4 ID recovered");
}

#[test]
fn rxe_answers_rep_when_rping_listens() {
    let Some(g) = Guest::get() else { return };
    // A port of its own per run: a server left over from an earlier run keeps its port.
    let port = 7300 + (std::process::id() % 600) as u16;
    let job = g.spawn(&format!("timeout 30 rping -s -a {GUEST} -p {port} -C 1"));
    g.wait_listening(&job, Listen::RdmaCm(port));
    let sock = host_socket(&g);
    // rping listens: its rdma_cm answers the REQ with a REP. The REQ is
    // sent again (as a CM would) while no answer came; a REJ fails.
    let mut got = None;
    for attempt in 0..10u32 {
        let mut pkt = req(host(), guest(), port, 0x2222_0000 + attempt);
        send_signed(&sock, &mut pkt, guest());
        match next_cm(&sock, Duration::from_secs(2)) {
            Some((CmMessage::Rep(rep), _)) => {
                got = Some(rep);
                break;
            }
            Some((other, _)) => panic!("expected REP, got {}", other.name()),
            None => {}
        }
    }
    let rep = got.expect("no REP from rping's rdma_cm");
    assert_eq!(rep.remote_comm_id & 0xffff_0000, 0x2222_0000);
    assert_ne!(rep.local_qpn, 0);
    // We never send RTU: stop the server instead of waiting for it to give up.
    g.run(&format!("pkill -f 'rping -s -a {GUEST} -p {port}' || true"));
    g.wait(job);
}

#[test]
fn we_verify_what_rxe_sends() {
    let Some(g) = Guest::get() else { return };
    let sock = host_socket(&g);
    let job = g.spawn(&format!("timeout 4 rping -c -a {HOST} -p 7302 -C 1"));
    let (cm, id) = next_cm(&sock, Duration::from_secs(10)).expect("no REQ from rxe");
    let CmMessage::Req(r) = cm else {
        panic!("expected REQ, got {}", cm.name())
    };
    assert_eq!(r.service_id, cma::service_id(cma::RDMA_PS_TCP, 7302));
    assert_eq!(r.primary.remote_gid, cma::gid_of(host()));
    assert!(id.is_some());
    g.wait(job);
}
