//! Sends one CM REQ (rdma_cm style) from `<local ip>` to `<peer ip>` for an
//! rdma_cm TCP port and prints the CM answer — REP when something listens
//! there, REJ otherwise. Proves the peer accepts our ICRC (IP ID 0, DF).
//!
//! usage: cargo run -p ndverbs-engine --example cm_probe -- 10.77.0.1 10.77.0.2 7174

use ndverbs_engine::udp::{RoceSocket, MAX_TRANSPORT};
use ndverbs_wire::bth::Bth;
use ndverbs_wire::cm::{CmMessage, CmPath, Req};
use ndverbs_wire::cma::{self, CmaHeader};
use ndverbs_wire::ext::Deth;
use ndverbs_wire::ip::ROCEV2_PORT;
use ndverbs_wire::mad::{Mad, GSI_QKEY, GSI_QPN};
use ndverbs_wire::opcode::Opcode;
use ndverbs_wire::packet::Packet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let local: IpAddr = a
        .first()
        .map_or("10.77.0.1", |s| s)
        .parse()
        .expect("local ip");
    let peer: IpAddr = a
        .get(1)
        .map_or("10.77.0.2", |s| s)
        .parse()
        .expect("peer ip");
    let port: u16 = a.get(2).map_or(7174, |s| s.parse().expect("port"));
    let sock = RoceSocket::bind(local)?;
    let mut pd = [0u8; 92];
    CmaHeader::new(local, 40000, peer)
        .write(&mut pd)
        .expect("cma header");
    let req = Req {
        local_comm_id: 0x1234_5678,
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
    let mad = CmMessage::Req(req).to_mad(0x0000_0001_1234_5678);
    let mut p = Packet::new(Bth::new(Opcode::UD_SEND_ONLY, GSI_QPN, 0));
    p.ext.deth = Some(Deth {
        qkey: GSI_QKEY,
        resv: 0,
        src_qpn: GSI_QPN,
    });
    p.payload = &mad;
    let mut out = vec![0u8; p.encoded_len().expect("len")];
    p.write(&mut out).expect("write");
    sock.send_to(&mut out, peer, ROCEV2_PORT)?;
    println!("sent REQ for port {port} to {peer}");
    let mut buf = [0u8; MAX_TRANSPORT];
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        match sock.recv(&mut buf)? {
            None => std::thread::sleep(Duration::from_millis(1)),
            Some(Err(d)) => println!("dropped {d:?}"),
            Some(Ok(r)) => {
                let pkt = Packet::parse(&buf[..r.len]).expect("parse");
                if let Ok(m) = Mad::parse(pkt.payload) {
                    match CmMessage::parse(&m) {
                        Ok(cm) => {
                            println!(
                                "got {} from {} (ip id {:?}): {:?}",
                                cm.name(),
                                r.src,
                                r.ipv4_id,
                                match cm {
                                    CmMessage::Rej(j) => format!("reason {}", j.reason),
                                    CmMessage::Rep(p) =>
                                        format!("qpn {:#x} psn {:#x}", p.local_qpn, p.starting_psn),
                                    other => other.name().to_string(),
                                }
                            );
                            return Ok(());
                        }
                        Err(e) => println!("MAD: {e}"),
                    }
                }
            }
        }
    }
    println!("no answer");
    std::process::exit(1);
}
