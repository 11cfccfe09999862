//! Replays of real Linux rxe traffic (`testdata/captures`): one end of each RC
//! connection is played by an `RcQp`. It is fed the peer's packets, posts the
//! work requests its own captured requests imply, and everything it emits must
//! equal what rxe sent, byte for byte (BTH through payload and pad; the ICRC
//! is the engine's job and left zero here).

use crate::capture_files::{self, Captured};
use crate::harness::PD;
use ndverbs_proto::mem::testing::VecMemory;
use ndverbs_proto::mem::{Access, Sge};
use ndverbs_proto::rc::*;
use ndverbs_proto::time::Instant;
use ndverbs_wire::opcode::{Operation, Position, Transport};
use ndverbs_wire::packet::Packet;
use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;

/// The RC packets of capture `name`.
fn frames(name: &str) -> Vec<Captured> {
    capture_files::packets(name)
        .into_iter()
        .filter(|c| c.rocev2 && c.packet().info().map(|i| i.transport) == Ok(Transport::Rc))
        .collect()
}

fn parse(b: &[u8]) -> Packet<'_> {
    Packet::parse(b).unwrap()
}

/// Replays connection `sport` of capture `name` with our QP at address `us`.
/// Returns how many of our packets were compared.
fn replay(name: &str, sport: u16, us: &str) -> usize {
    let us: IpAddr = us.parse().unwrap();
    let all: Vec<Captured> = frames(name)
        .into_iter()
        .filter(|f| f.sport == sport)
        .collect();
    assert!(!all.is_empty(), "{name}: no frames from port {sport}");
    let mine = |f: &Captured| f.src == us;
    let req = |f: &Captured| parse(&f.bytes).info().unwrap().is_request();
    let our_qpn = all
        .iter()
        .find(|f| !mine(f))
        .map(|f| parse(&f.bytes).bth.dqpn)
        .unwrap();
    let peer_qpn = all
        .iter()
        .find(|f| mine(f))
        .map(|f| parse(&f.bytes).bth.dqpn)
        .unwrap();
    let sq_psn = all
        .iter()
        .find(|f| mine(f) && req(f))
        .map_or(0, |f| parse(&f.bytes).bth.psn);
    let rq_psn = all
        .iter()
        .find(|f| !mine(f) && req(f))
        .map_or(0, |f| parse(&f.bytes).bth.psn);
    let mtu = all
        .iter()
        .map(|f| parse(&f.bytes))
        .filter(|p| p.info().unwrap().position == Position::First)
        .map(|p| p.payload.len())
        .max()
        .and_then(PathMtu::at_most)
        .unwrap_or(PathMtu::Mtu1024);

    // Memory: one region per R_Key the peer uses, spanning its accesses;
    // a local region for our outgoing data and READ landings; receives.
    let mut mem = VecMemory::new();
    let mut spans: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for f in all.iter().filter(|f| !mine(f)) {
        let p = parse(&f.bytes);
        if let Some(r) = p.ext.reth {
            let e = spans.entry(r.rkey).or_insert((r.va, r.va));
            e.0 = e.0.min(r.va);
            e.1 = e.1.max(r.va + u64::from(r.len));
        }
    }
    for (rkey, (lo, hi)) in &spans {
        mem.register_with_key(
            PD,
            *lo,
            vec![0; (hi - lo).max(8) as usize],
            Access::ALL,
            *rkey,
        );
    }
    let local = mem.register_with_key(
        PD,
        0x7000_0000,
        vec![0; 1 << 22],
        Access::LOCAL_WRITE,
        0xabc,
    );
    let mut local_off = 0u32;
    let mut qp = RcQp::new(
        our_qpn,
        PD,
        QpCaps {
            max_send_wr: 1024,
            ..QpCaps::default()
        },
    );
    let cfg = crate::harness::Config {
        mtu,
        max_rd_atomic: 16,
        access: Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC,
        ..crate::harness::Config::default()
    };
    crate::harness::connect(&mut qp, peer_qpn, rq_psn, sq_psn, &cfg);
    let mut rq = RecvQueue::new(1024, 1);
    for i in 0..256u32 {
        let sge = Sge::new(
            local.addr + (1 << 21) + u64::from(i) * 8192,
            8192,
            local.lkey,
        );
        qp.post_recv(&mut rq, RecvWr::new(u64::from(i), vec![sge]))
            .unwrap();
    }

    let now = Instant::from_nanos(1);
    let mut out: VecDeque<Vec<u8>> = VecDeque::new();
    let mut buf = vec![0u8; 8192];
    let mut compared = 0;
    for (i, f) in all.iter().enumerate() {
        let p = parse(&f.bytes);
        let info = p.info().unwrap();
        if mine(f) {
            if info.is_request() && info.is_first() {
                // Post the WR this message came from.
                let mut data = Vec::new();
                for g in all[i..].iter().filter(|g| mine(g)) {
                    let q = parse(&g.bytes);
                    let qi = q.info().unwrap();
                    if !qi.is_request() {
                        continue;
                    }
                    data.extend_from_slice(q.payload);
                    if qi.is_last() {
                        break;
                    }
                }
                let len = match p.ext.reth {
                    Some(r) if info.operation == Operation::ReadRequest => r.len,
                    _ => data.len() as u32,
                };
                let len = if p.ext.atomic_eth.is_some() { 8 } else { len };
                mem.bytes_mut(local.lkey)[local_off as usize..local_off as usize + data.len()]
                    .copy_from_slice(&data);
                let sgl = vec![Sge::new(local.addr + u64::from(local_off), len, local.lkey)];
                local_off += len.next_multiple_of(64);
                let ra = |r: ndverbs_wire::ext::Reth| RemoteAddr {
                    va: r.va,
                    rkey: r.rkey,
                };
                let op = match (info.operation, p.ext.reth, p.ext.atomic_eth) {
                    (Operation::Send, ..) => SendOp::Send,
                    (Operation::Write, Some(r), _) => SendOp::Write(ra(r)),
                    (Operation::ReadRequest, Some(r), _) => SendOp::Read(ra(r)),
                    (Operation::FetchAdd, _, Some(a)) => SendOp::FetchAdd {
                        remote: RemoteAddr {
                            va: a.va,
                            rkey: a.rkey,
                        },
                        add: a.swap_add,
                    },
                    other => panic!("{name}: cannot replay {other:?}"),
                };
                qp.post_send(SendWr::new(f.number as u64, op, sgl)).unwrap();
            }
        } else {
            // Before a READ request, load what the responses will carry.
            if info.operation == Operation::ReadRequest {
                let r = p.ext.reth.unwrap();
                let mut data = Vec::new();
                for g in all[i..].iter().filter(|g| mine(g)) {
                    let q = parse(&g.bytes);
                    if q.info().unwrap().operation == Operation::ReadResponse
                        && ndverbs_wire::bth::psn::diff(q.bth.psn, p.bth.psn) >= 0
                    {
                        data.extend_from_slice(q.payload);
                        if q.info().unwrap().is_last() {
                            break;
                        }
                    }
                }
                let (lo, _) = spans[&r.rkey];
                let off = (r.va - lo) as usize;
                mem.bytes_mut(r.rkey)[off..off + data.len()].copy_from_slice(&data);
            }
            qp.handle_packet(now, &p, &mut mem, &mut rq);
            assert_eq!(
                qp.state(),
                QpState::Rts,
                "{name} frame {}: {:?}",
                f.number,
                qp.error_cause()
            );
        }
        while let Some(n) = qp.poll_transmit(now, &mut mem, &mut buf) {
            out.push_back(buf[..n].to_vec());
        }
        if mine(f) {
            let ours = out
                .pop_front()
                .unwrap_or_else(|| panic!("{name} frame {}: we had nothing to send", f.number));
            let want = &f.bytes[..f.bytes.len() - 4];
            assert_eq!(
                &ours[..ours.len() - 4],
                want,
                "{name} frame {}: ours {:?}\nrxe {:?}",
                f.number,
                parse(&ours),
                p
            );
            compared += 1;
        }
    }
    assert!(out.is_empty(), "{name}: {} extra packets", out.len());
    while let Some(wc) = qp.poll_completion() {
        assert_eq!(wc.status, WcStatus::Success, "{name}: {wc:?}");
    }
    compared
}

#[test]
fn rping_both_ends() {
    // Client: SENDs, answers the server's READs and WRITEs.
    assert!(replay("rping.pcap", 58198, "10.77.0.2") >= 10);
    // Server: READs the client's buffer, WRITEs into it, SENDs.
    assert!(replay("rping.pcap", 58198, "10.77.0.3") >= 10);
}

#[test]
fn rc_pingpong_multi_packet_sends() {
    assert!(replay("ibv_rc_pingpong.pcap", 49513, "10.77.0.2") >= 8);
    assert!(replay("ibv_rc_pingpong.pcap", 49513, "10.77.0.3") >= 8);
}

/// Every RC connection of every perftest capture, both ends: each is found
/// (by its UDP source port) and each end sends what rxe sent, every packet
/// of it compared.
#[test]
fn perftest_connections_both_ends() {
    // (capture, connection's source port, our address, our packets compared)
    const CONNECTIONS: [(&str, u16, &str, usize); 16] = [
        ("ib_send_bw.pcap", 49593, "10.77.0.2", 20),
        ("ib_send_bw.pcap", 49593, "10.77.0.3", 5),
        ("ib_send_bw_R.pcap", 61250, "10.77.0.2", 20),
        ("ib_send_bw_R.pcap", 61250, "10.77.0.3", 5),
        ("ib_send_bw_R.pcap", 64058, "10.77.0.2", 22),
        ("ib_send_bw_R.pcap", 64058, "10.77.0.3", 22),
        ("ib_write_bw_R.pcap", 58311, "10.77.0.2", 20),
        ("ib_write_bw_R.pcap", 58311, "10.77.0.3", 5),
        ("ib_write_bw_R.pcap", 61395, "10.77.0.2", 32),
        ("ib_write_bw_R.pcap", 61395, "10.77.0.3", 32),
        ("ib_read_bw_R.pcap", 55203, "10.77.0.2", 32),
        ("ib_read_bw_R.pcap", 55203, "10.77.0.3", 32),
        ("ib_read_bw_R.pcap", 59540, "10.77.0.2", 5),
        ("ib_read_bw_R.pcap", 59540, "10.77.0.3", 20),
        ("rdma_client.pcap", 50656, "10.77.0.2", 2),
        ("rdma_client.pcap", 50656, "10.77.0.3", 2),
    ];
    let mut replayed = Vec::new();
    for name in [
        "ib_send_bw.pcap",
        "ib_send_bw_R.pcap",
        "ib_write_bw_R.pcap",
        "ib_read_bw_R.pcap",
        "rdma_client.pcap",
    ] {
        let mut ports: Vec<u16> = frames(name).iter().map(|f| f.sport).collect();
        ports.sort();
        ports.dedup();
        for port in ports {
            for us in ["10.77.0.2", "10.77.0.3"] {
                replayed.push((name, port, us, replay(name, port, us)));
            }
        }
    }
    assert_eq!(replayed, CONNECTIONS);
}
