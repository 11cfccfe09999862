//! A hostile peer floods a live connection.
//!
//! Two NICs on loopback (a fresh address pair) with a connected RC QP pair;
//! the target (B) holds a region granted to the peer (all remote rights), a
//! private region (local access only), a region with a memory window bound to
//! one page of it, a window bound and then invalidated, and a region that was
//! deregistered. Three forgers then send `NDV_FLOOD_PACKETS` packets (default
//! 100,000; `scripts/test.sh` runs 1,000,000 in release) at B:
//!
//! * raw garbage from a plain UDP socket (bad ICRC, truncated headers);
//! * random transport bytes with a valid ICRC;
//! * well-formed packets of every opcode with random QPNs, PSNs, P_Keys,
//!   RETHs, atomic headers and payloads, from an address that is not the
//!   peer's ("right everything but the source": B's QPN, the PSN B expects,
//!   a valid RETH into the granted region);
//! * the same from the peer's own IP address (another port — the engine
//!   checks the source address only) with B's QPN and every PSN but the one
//!   B expects: duplicates, PSNs ahead, forged ACKs, NAKs and READ
//!   responses, RETH/atomic targets in and around every region with every
//!   key (granted, private, window, invalidated window, deregistered,
//!   random);
//! * MADs of every CM message type with random fields to QP1.
//!
//! Afterwards: every region's bytes are identical to before (nothing forged
//! reached memory: the forged packets with valid keys came from the wrong
//! address, and those from the right address never carried the expected
//! PSN), the drop counters account for what arrived, both QPs are still in
//! RTS, and the connection moves data correctly both ways.
//!
//! `flood_spares_cm_connections` runs the same flood against QPs connected
//! through the CM (connection endpoints: listen, connect, accept,
//! complete-connect), adding CM messages naming that
//! connection: exact comm IDs from a wrong source address (DREQ, REJ, DREP,
//! RTU, MRA, REP, duplicate and "stale connection" REQs), and from the
//! peer's own address with a wrong remote comm ID or (DREQ) a wrong QPN.
//! Meanwhile a second, unrelated CM connection to the same NIC (from a
//! third NIC) exchanges verified SENDs and WRITEs in both directions.
//! Afterwards no endpoint was notified of a disconnect, all stay
//! established, the drops are counted (`cm_rx_wrong_source`,
//! `cm_rx_dreq_bad_qpn`, `cm_rx_unmatched`), memory is unchanged, both
//! connections carry data and A–B disconnects cleanly.
//!
//! What this does not claim: a packet from the peer's address carrying the
//! exact PSN the responder expects is indistinguishable from the peer's own
//! (RoCEv2 has no authentication) and is executed within the granted
//! windows — or, if it violates them, ends the connection as the IBTA
//! requires. Likewise a DREQ or REJ with the right comm IDs (and QPN) from
//! the peer's address is the peer's own: it ends the connection.

mod common;

use common::cm::{self, accept_args, connect_args, done, CM_LIMIT};
use common::*;
use ndverbs_engine::config::Progress;
use ndverbs_engine::counters::NicCounters;
use ndverbs_engine::ep::ConnectArgs;
use ndverbs_engine::link::udp::RoceSocket;
use ndverbs_engine::mr::{Region, RegionBuf};
use ndverbs_engine::nic::{node_guid, sge, Nic};
use ndverbs_proto::cm::CmState;
use ndverbs_proto::mem::{Access, WindowBind};
use ndverbs_proto::rc::{PathMtu, QpState, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus};
use ndverbs_wire::bth::Bth;
use ndverbs_wire::cm::{
    attr as cm_attr, msg_ref, pdata, rej_reason, CmMessage, Drep, Dreq, Mra, Rej, Rtu,
};
use ndverbs_wire::ext::{Aeth, AtomicEth, Deth, Reth, Syndrome};
use ndverbs_wire::mad::{MAD_DATA_LEN, MAD_LEN};
use ndverbs_wire::opcode::{Headers, Opcode, Payload};
use ndverbs_wire::packet::Packet;
use std::net::{IpAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LEN: usize = 64 << 10;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn packets() -> u64 {
    std::env::var("NDV_FLOOD_PACKETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

fn snapshot(r: &Region) -> Vec<u8> {
    let mut v = vec![0; r.len()];
    r.read(0, &mut v).unwrap();
    v
}

/// Nothing forged reached memory: every region holds the bytes it held
/// `before` the flood.
#[track_caller]
fn assert_unchanged(regions: &[(&str, &Arc<Region>)], before: &[Vec<u8>]) {
    for ((name, r), old) in regions.iter().zip(before) {
        if let Some(i) = snapshot(r).iter().zip(old).position(|(x, y)| x != y) {
            panic!("{name} region changed at byte {i}");
        }
    }
}

/// Datagrams received since the count was `rcvd0`, once the engine has
/// drained its socket (the count stood still for 200 ms).
fn drained(counters: &NicCounters, rcvd0: u64) -> u64 {
    let mut last = u64::MAX;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = counters.rcvd_datagrams.load(Ordering::Relaxed);
        if now == last {
            return last - rcvd0;
        }
        last = now;
    }
}

/// Where forged RETHs and atomic headers point.
struct Targets {
    keys: Vec<u32>,
    bases: Vec<u64>,
}

impl Targets {
    fn reth(&self, r: &mut Rng) -> Reth {
        let base = r.pick(&self.bases);
        let va = match r.below(4) {
            0 => base,
            1 => base + r.below(LEN as u64 * 2),
            2 => base.wrapping_sub(r.below(4096) + 1),
            _ => r.next(),
        };
        let len = match r.below(4) {
            0 => r.below(64) as u32,
            1 => r.below(LEN as u64 * 2) as u32,
            2 => u32::MAX - r.below(16) as u32,
            _ => r.next() as u32,
        };
        let rkey = if r.below(8) == 0 {
            r.next() as u32
        } else {
            r.pick(&self.keys)
        };
        Reth { va, rkey, len }
    }
}

/// A well-formed packet of a random opcode with random headers.
fn forge(r: &mut Rng, dqpn: u32, psn: u32, t: &Targets, buf: &mut [u8]) -> usize {
    let op = if r.below(4) == 0 {
        Opcode(r.next() as u8)
    } else {
        r.pick(Opcode::ALL)
    };
    let Ok(info) = op.info() else {
        // An opcode no table knows: a bare BTH and some bytes.
        let mut b = Bth::new(Opcode::RC_SEND_ONLY, dqpn, psn);
        b.opcode = op;
        let n = b.write(buf).unwrap();
        let extra = r.below(64) as usize + 4;
        buf[n..n + extra].copy_from_slice(&r.bytes(extra));
        return n + extra;
    };
    let mut bth = Bth::new(op, dqpn, psn);
    bth.ack_req = r.below(2) == 0;
    bth.se = r.below(8) == 0;
    match r.below(16) {
        0 => bth.pkey = r.next() as u16,
        1 => bth.tver = 0, // tver must be 0 for the packet to parse
        2 => bth.fecn = true,
        _ => {}
    }
    let h = info.headers;
    let mut p = Packet::new(bth);
    let reth = t.reth(r);
    let e = &mut p.ext;
    if h.contains(Headers::RETH) {
        e.reth = Some(reth);
    }
    if h.contains(Headers::ATOMIC_ETH) {
        e.atomic_eth = Some(AtomicEth {
            va: if r.below(4) == 0 {
                reth.va
            } else {
                reth.va & !7
            },
            rkey: reth.rkey,
            swap_add: r.next(),
            compare: r.next(),
        });
    }
    if h.contains(Headers::AETH) {
        let syn = match r.below(4) {
            0 => Syndrome::ACK,
            _ => Syndrome::from_byte(r.next() as u8),
        };
        e.aeth = Some(Aeth::new(syn, r.next() as u32 & 0xff_ffff));
    }
    if h.contains(Headers::ATOMIC_ACK_ETH) {
        e.atomic_ack_eth = Some(r.next());
    }
    if h.contains(Headers::IMMDT) {
        e.immdt = Some(r.next() as u32);
    }
    if h.contains(Headers::IETH) {
        e.ieth = Some(r.pick(&t.keys));
    }
    if h.contains(Headers::DETH) {
        e.deth = Some(Deth {
            qkey: if r.below(2) == 0 {
                0x8001_0000
            } else {
                r.next() as u32
            },
            resv: 0,
            src_qpn: r.next() as u32 & 0xff_ffff,
        });
    }
    if h.contains(Headers::FETH) {
        e.feth = Some(r.next() as u32);
    }
    if h.contains(Headers::CNP) {
        e.cnp = Some([0; 16]);
    }
    let plen = match info.payload {
        Payload::None => 0,
        _ => match r.below(4) {
            0 => 0,
            1 => 8,
            2 => r.below(1100) as usize,
            _ => 1024,
        },
    };
    let payload = r.bytes(plen);
    p.payload = &payload;
    p.bth.pad = Packet::pad_for(payload.len());
    p.write(buf).expect("forged packet encodes")
}

/// A MAD to QP1: a CM message type with random contents.
fn forge_mad(r: &mut Rng, buf: &mut [u8]) -> usize {
    let mut mad = r.bytes(256);
    mad[0] = 1; // base version
    mad[1] = 7; // CM class
    mad[2] = 2; // class version
    mad[3] = r.pick(&[3u8, 2, 0x83, 0x81]);
    let attr: u16 = r.pick(&[0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19]);
    mad[16..18].copy_from_slice(&attr.to_be_bytes());
    mad_packet(r, &mad, buf)
}

/// `mad` as a UD SEND to QP1 (random PSN).
fn mad_packet(r: &mut Rng, mad: &[u8], buf: &mut [u8]) -> usize {
    let mut p = Packet::new(Bth::new(Opcode::UD_SEND_ONLY, 1, r.next() as u32));
    p.ext.deth = Some(Deth {
        qkey: 0x8001_0000,
        resv: 0,
        src_qpn: 1,
    });
    p.payload = mad;
    p.write(buf).unwrap()
}

/// A CM message naming the connection `c` (B is its passive side, `b_qpn`
/// its QP) that B must not act on; returns the MAD and whether it is sent
/// from the peer's IP address. Either the IDs are exact and the source is
/// wrong, or the source is the peer's and something else is wrong (the
/// remote comm ID, the QPN of a DREQ). An exact DREQ or REJ from the peer's
/// address is the peer's own and is never sent.
fn forge_cm(r: &mut Rng, c: &CmAim, b_qpn: u32) -> ([u8; MAD_LEN], bool) {
    let zero = [0u8; MAD_DATA_LEN];
    let blank = |attr_id| CmMessage::parse_data(attr_id, &zero).expect("zeroed CM message");
    // A remote comm ID that is not B's.
    let wrong_b = c.b_comm ^ (1 + r.below(u64::from(u32::MAX)) as u32);
    // A's comm ID, or a new one.
    let a_or_new = |r: &mut Rng| {
        if r.below(2) == 0 {
            c.a_comm
        } else {
            r.next() as u32
        }
    };
    let (msg, from_peer) = match r.below(10) {
        // DREQ, exact IDs and QPN, wrong source.
        0 => (
            CmMessage::Dreq(Dreq {
                local_comm_id: c.a_comm,
                remote_comm_id: c.b_comm,
                remote_qpn: b_qpn,
                private_data: [0; pdata::DREQ],
            }),
            false,
        ),
        // DREQ from the peer's address with exact IDs but another QPN, or
        // a wrong remote comm ID (answered with a DREP: "no such connection").
        1 => {
            let (remote_comm_id, remote_qpn) = if r.below(2) == 0 {
                (c.b_comm, b_qpn ^ (1 + r.below(0xff_fffe) as u32))
            } else {
                (wrong_b, b_qpn)
            };
            (
                CmMessage::Dreq(Dreq {
                    local_comm_id: c.a_comm,
                    remote_comm_id,
                    remote_qpn,
                    private_data: [0; pdata::DREQ],
                }),
                true,
            )
        }
        // REJ, exact IDs (or reason 4 with A's GUID in the ARI), wrong source;
        // or from the peer's address with a wrong remote comm ID.
        2 | 3 => {
            let from_peer = r.below(3) == 0;
            let mut ari = [0u8; 72];
            let reason = if !from_peer && r.below(2) == 0 {
                ari[..8].copy_from_slice(&c.a_guid.to_be_bytes());
                rej_reason::TIMEOUT
            } else {
                r.below(40) as u16
            };
            (
                CmMessage::Rej(Rej {
                    local_comm_id: c.a_comm,
                    remote_comm_id: if from_peer { wrong_b } else { c.b_comm },
                    message_rejected: r.pick(&[msg_ref::REQ, msg_ref::REP, msg_ref::OTHER]),
                    rejected_info_length: 8,
                    reason,
                    ari,
                    private_data: [0; pdata::REJ],
                }),
                from_peer,
            )
        }
        // REQ from the wrong source: a duplicate of A's (A's comm ID, GUID,
        // QPN), or a "stale connection" (A's GUID and QPN, a new comm ID).
        4 | 5 => {
            let CmMessage::Req(mut q) = blank(cm_attr::REQ) else {
                unreachable!()
            };
            q.local_comm_id = a_or_new(r);
            q.local_ca_guid = c.a_guid;
            q.local_qpn = c.a_qpn;
            q.service_id = c.service_id;
            q.starting_psn = r.next() as u32 & 0xff_ffff;
            q.path_mtu = 3;
            (CmMessage::Req(q), false)
        }
        // DREP, RTU, MRA with exact IDs from the wrong source, or from the
        // peer's address with a wrong remote comm ID.
        6..=8 => {
            let from_peer = r.below(3) == 0;
            let remote = if from_peer { wrong_b } else { c.b_comm };
            let msg = match r.below(3) {
                0 => CmMessage::Drep(Drep {
                    local_comm_id: c.a_comm,
                    remote_comm_id: remote,
                    private_data: [0; pdata::DREP],
                }),
                1 => CmMessage::Rtu(Rtu {
                    local_comm_id: c.a_comm,
                    remote_comm_id: remote,
                    private_data: [0; pdata::RTU],
                }),
                _ => CmMessage::Mra(Mra {
                    local_comm_id: c.a_comm,
                    remote_comm_id: remote,
                    message_mraed: r.pick(&[msg_ref::REQ, msg_ref::REP, msg_ref::OTHER]),
                    service_timeout: r.below(32) as u8,
                    private_data: [0; pdata::MRA],
                }),
            };
            (msg, from_peer)
        }
        // REP naming B's comm ID, wrong source.
        _ => {
            let CmMessage::Rep(mut p) = blank(cm_attr::REP) else {
                unreachable!()
            };
            p.local_comm_id = a_or_new(r);
            p.remote_comm_id = c.b_comm;
            p.local_qpn = c.a_qpn;
            p.local_ca_guid = c.a_guid;
            (CmMessage::Rep(p), false)
        }
    };
    (msg.to_mad(r.next()), from_peer)
}

/// The forgers' sockets: a RoCE socket on an address nobody uses, one on the
/// peer's own IP address (another port), and a plain UDP socket for garbage.
struct Forgers {
    other: RoceSocket,
    from_peer_ip: RoceSocket,
    raw: UdpSocket,
}

impl Forgers {
    fn new(peer_ip: IpAddr) -> Self {
        let (other, raw) = ndverbs_testkit::addr::pair_v4();
        Forgers {
            other: RoceSocket::bind(other).unwrap(),
            from_peer_ip: RoceSocket::bind_port(peer_ip, 0).unwrap(),
            raw: UdpSocket::bind((raw, 0)).unwrap(),
        }
    }
}

/// The connection under attack: B's address, QP and the PSN it expects.
struct Aim<'a> {
    b_ip: IpAddr,
    b_qpn: u32,
    epsn: u32,
    targets: &'a Targets,
    /// When the QPs were connected through the CM: its identifiers, for
    /// MADs aimed at that connection.
    cm: Option<CmAim>,
    /// B's count of received datagrams: the flood waits for the engine
    /// when too many are still in the socket buffer, so a slow (shared,
    /// debug-built) machine gets the same flood instead of kernel drops.
    received: &'a AtomicU64,
}

/// How many forged datagrams may wait in B's socket buffer; a small
/// datagram costs about 1 KiB of receive buffer, so this stays well
/// under the engine's buffer.
const FLOOD_BACKLOG: u64 = 1024;

/// What a forger knows of a CM connection from A (active) to B (passive).
#[derive(Clone, Copy)]
struct CmAim {
    a_comm: u32,
    b_comm: u32,
    a_qpn: u32,
    a_guid: u64,
    service_id: u64,
}

/// Sends `n` forged packets at `aim`; returns how many of each kind:
/// garbage, valid-ICRC random, wrong source, right-but-source, from the
/// peer's address, random MAD, CM MAD aimed at the connection.
fn flood(n: u64, f: &Forgers, aim: &Aim<'_>, rng: &mut Rng) -> [u64; 7] {
    let (b_ip, b_qpn, epsn, targets) = (aim.b_ip, aim.b_qpn, aim.epsn, aim.targets);
    let mut buf = vec![0u8; 4096];
    let mut kinds = [0u64; 7];
    let received0 = aim.received.load(Ordering::Relaxed);
    for i in 0..n {
        let kind = match rng.below(100) {
            0..=9 => 0,
            10..=19 => 1,
            20..=49 => 2,
            50..=54 => 3,
            55..=94 => 4,
            _ => 5,
        };
        // With a CM connection, a quarter of the peer-address forgeries and
        // MADs become MADs naming that connection.
        let kind = if aim.cm.is_some() && kind >= 4 && rng.below(4) == 0 {
            6
        } else {
            kind
        };
        kinds[kind] += 1;
        match kind {
            // Garbage: no valid ICRC.
            0 => {
                let len = rng.below(200) as usize;
                let bytes = rng.bytes(len);
                loop {
                    match f.raw.send_to(&bytes, (b_ip, 4791)) {
                        Ok(_) => break,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::yield_now()
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            // Random transport bytes with a valid ICRC.
            1 => {
                let len = 16 + rng.below(300) as usize;
                let mut bytes = rng.bytes(len);
                bytes[0] = rng.pick(&[bytes[0], 0x04, 0x0a, 0x0c, 0x11, 0x64]);
                if rng.below(2) == 0 {
                    bytes[5..8].copy_from_slice(&b_qpn.to_be_bytes()[1..]);
                }
                send_signed(&f.other, &mut bytes, b_ip);
            }
            // Well-formed, wrong source address, random or B's QPN.
            2 => {
                let dqpn = match rng.below(3) {
                    0 => rng.next() as u32 & 0xff_ffff,
                    _ => b_qpn,
                };
                let psn = if rng.below(2) == 0 {
                    epsn
                } else {
                    rng.next() as u32
                };
                let len = forge(rng, dqpn, psn, targets, &mut buf);
                send_signed(&f.other, &mut buf[..len], b_ip);
            }
            // Right everything but the source: a valid WRITE into the
            // granted region with the expected PSN.
            3 => {
                let mut p = Packet::new(Bth::new(Opcode::RC_WRITE_ONLY, b_qpn, epsn));
                p.bth.ack_req = true;
                let data = rng.bytes(256);
                p.ext.reth = Some(Reth {
                    va: targets.bases[0] + rng.below(1024) * 8,
                    rkey: targets.keys[0],
                    len: 256,
                });
                p.payload = &data;
                let len = p.write(&mut buf).unwrap();
                send_signed(&f.other, &mut buf[..len], b_ip);
            }
            // From the peer's address, B's QPN, any PSN but the expected.
            4 => {
                let mut psn = match rng.below(4) {
                    0 => epsn.wrapping_sub(1 + rng.below(64) as u32),
                    1 => epsn.wrapping_add(1 + rng.below(64) as u32),
                    _ => rng.next() as u32,
                } & 0xff_ffff;
                if psn == epsn {
                    psn = epsn ^ 0x80_0000;
                }
                let len = forge(rng, b_qpn, psn, targets, &mut buf);
                send_signed(&f.from_peer_ip, &mut buf[..len], b_ip);
            }
            // CM MADs to QP1.
            5 => {
                let len = forge_mad(rng, &mut buf);
                let s = if rng.below(2) == 0 {
                    &f.other
                } else {
                    &f.from_peer_ip
                };
                send_signed(s, &mut buf[..len], b_ip);
            }
            // CM MADs naming the connection.
            _ => {
                let cm = aim.cm.expect("kind 6 only with a CM connection");
                let (mad, from_peer) = forge_cm(rng, &cm, b_qpn);
                let len = mad_packet(rng, &mad, &mut buf);
                let s = if from_peer { &f.from_peer_ip } else { &f.other };
                send_signed(s, &mut buf[..len], b_ip);
            }
        }
        if i % 256 == 255 {
            // Let the engine keep up (the kernel drops what overflows the
            // socket buffer, uncounted by the engine), but never wait on a
            // stalled engine for long.
            let deadline = Instant::now() + Duration::from_millis(50);
            while (i + 1).saturating_sub(aim.received.load(Ordering::Relaxed) - received0)
                > FLOOD_BACKLOG
                && Instant::now() < deadline
            {
                std::thread::yield_now();
            }
        }
    }
    kinds
}

#[test]
fn flood_leaves_memory_and_connection_intact() {
    let _one = FLOOD.lock().unwrap_or_else(|e| e.into_inner());
    let n = packets();
    let (a, b) = pair(Progress::Thread, PathMtu::Mtu1024, LEN);
    let a_ip = a.nic.local();
    let b_ip = b.nic.local();
    let pd = b.pd;
    let ad = &b.nic;
    let reg = |acc: Access, seed: u64| -> Arc<Region> {
        let r = ad.reg_mr(pd, RegionBuf::alloc(LEN).unwrap(), acc).unwrap();
        r.write(0, &pattern(seed, LEN)).unwrap();
        r
    };
    let granted = b.mr.clone();
    granted.write(0, &pattern(1, LEN)).unwrap();
    let private = reg(Access::LOCAL_WRITE, 2);
    let windowed = reg(Access::ALL, 3);
    let whole = WindowBind {
        lkey: windowed.lkey(),
        va: windowed.addr(),
        len: 8192,
        access: Access::ALL,
    };
    let mw = ad.alloc_mw(pd).unwrap();
    let second_page = WindowBind {
        va: windowed.addr() + 4096,
        len: 4096,
        access: Access::REMOTE_READ | Access::REMOTE_WRITE,
        ..whole
    };
    let mw_key = ad.bind_mw(mw, second_page).unwrap();
    let mw2 = ad.alloc_mw(pd).unwrap();
    let dead_mw = ad.bind_mw(mw2, whole).unwrap();
    ad.invalidate_mw(dead_mw).unwrap();
    let stale = reg(Access::ALL, 4);
    let stale_key = stale.rkey();
    ad.dereg_mr(stale.lkey()).unwrap();
    let regions = [
        ("granted", &granted),
        ("private", &private),
        ("windowed", &windowed),
        ("deregistered", &stale),
    ];

    // Some real traffic first, so the responder has saved READ/atomic
    // resources a forged duplicate could try to replay.
    let a_buf = a.mr.clone();
    a_buf.write(0, &pattern(9, LEN)).unwrap();
    for (i, op) in [
        SendOp::Write(RemoteAddr {
            va: granted.addr(),
            rkey: granted.rkey(),
        }),
        SendOp::Read(RemoteAddr {
            va: granted.addr() + 8192,
            rkey: granted.rkey(),
        }),
        SendOp::FetchAdd {
            remote: RemoteAddr {
                va: granted.addr() + 16384,
                rkey: granted.rkey(),
            },
            add: 5,
        },
    ]
    .into_iter()
    .enumerate()
    {
        let len = if op.is_atomic() { 8 } else { 4096 };
        a.nic
            .post_send(
                &a.qp,
                SendWr::new(i as u64, op, vec![sge(&a_buf, 32768, len)]),
            )
            .unwrap();
    }
    for wc in wait_n(&a, 3) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    let before: Vec<Vec<u8>> = regions.iter().map(|(_, r)| snapshot(r)).collect();
    let b_qpn = b.qp.qpn();
    let epsn = b.nic.query_qp(b_qpn).unwrap().rq_psn;
    let b_counters0 = b.nic.qp_counters(b_qpn).unwrap();
    let rcvd0 = b.nic.counters().rcvd_datagrams.load(Ordering::Relaxed);

    let targets = Targets {
        keys: vec![
            granted.rkey(),
            private.rkey(),
            windowed.rkey(),
            mw_key,
            dead_mw,
            stale_key,
            0,
        ],
        bases: vec![
            granted.addr(),
            private.addr(),
            windowed.addr(),
            windowed.addr() + 4096,
            stale.addr(),
            0,
        ],
    };
    let forgers = Forgers::new(a_ip);
    let aim = Aim {
        b_ip,
        b_qpn,
        epsn,
        targets: &targets,
        cm: None,
        received: &b.nic.counters().rcvd_datagrams,
    };
    let t0 = Instant::now();
    let kinds = flood(n, &forgers, &aim, &mut Rng(0xf100d));
    let send_time = t0.elapsed();
    let counters = &b.nic.counters();
    let arrived = drained(counters, rcvd0);
    let c = b.nic.qp_counters(b_qpn).unwrap();
    let get = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
    println!(
        "flood: {n} packets in {:.1} s ({:?} garbage/valid-ICRC-random/wrong-source/right-but-source/peer-address/MAD), {arrived} arrived",
        send_time.as_secs_f64(),
        &kinds[..6]
    );
    println!(
        "NIC drops: bad ICRC {}, malformed {}, unknown QP {}, wrong source {}, GSI {}",
        get(&counters.drop_bad_icrc),
        get(&counters.drop_malformed),
        get(&counters.drop_unknown_qp),
        get(&counters.drop_wrong_source),
        get(&counters.drop_gsi),
    );
    let st = b.nic.stats();
    println!(
        "CM: {:?}",
        st.pairs()
            .iter()
            .filter(|(n, v)| n.starts_with("cm_rx") && *v > 0)
            .collect::<Vec<_>>()
    );
    let qp_rcvd = c.rcvd_pkts - b_counters0.rcvd_pkts;
    println!(
        "B's QP: {qp_rcvd} packets handled: duplicates {}, out-of-sequence NAKs {}, drops {:?}",
        c.duplicate_request - b_counters0.duplicate_request,
        c.out_of_seq_request - b_counters0.out_of_seq_request,
        c.drops
            .pairs()
            .into_iter()
            .filter(|p| p.1 > 0)
            .collect::<Vec<_>>()
    );
    assert!(
        arrived >= n / 2,
        "only {arrived} of {n} forged packets reached the engine"
    );
    assert!(get(&counters.drop_bad_icrc) > 0);
    assert!(get(&counters.drop_malformed) > 0);
    assert!(get(&counters.drop_unknown_qp) > 0);
    assert!(get(&counters.drop_wrong_source) > 0);
    assert!(qp_rcvd > 0 && c.drops.bad_pkey > 0 && c.drops.not_rc > 0);

    assert_unchanged(&regions, &before);
    // The connection is intact.
    for s in [&a, &b] {
        assert_eq!(
            s.nic.query_qp(s.qp.qpn()).unwrap().qp_state,
            QpState::Rts,
            "a QP left RTS"
        );
    }
    assert!(a.cq.poll_one().is_none() && b.cq.poll_one().is_none());
    let data = pattern(77, 32768);
    a_buf.write(0, &data).unwrap();
    b.nic
        .post_recv(&b.qp, RecvWr::new(100, vec![sge(&private, 0, 32768)]))
        .unwrap();
    let remote = RemoteAddr {
        va: granted.addr(),
        rkey: granted.rkey(),
    };
    let posts = [
        SendWr::new(1, SendOp::Write(remote), vec![sge(&a_buf, 0, 32768)]),
        SendWr::new(2, SendOp::Read(remote), vec![sge(&a_buf, 32768, 32768)]),
        SendWr::new(3, SendOp::Send, vec![sge(&a_buf, 0, 32768)]),
    ];
    for wr in posts {
        a.nic.post_send(&a.qp, wr).unwrap();
    }
    for wc in wait_n(&a, 3) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    let wc = wait_n(&b, 1)[0];
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::Success, WcOpcode::Recv, 32768)
    );
    let mut got = vec![0u8; 32768];
    granted.read(0, &mut got).unwrap();
    assert!(got == data, "WRITE after the flood corrupted");
    a_buf.read(32768, &mut got).unwrap();
    assert!(got == data, "READ after the flood corrupted");
    private.read(0, &mut got).unwrap();
    assert!(got == data, "SEND after the flood corrupted");
    // And the other way.
    b.nic
        .post_send(
            &b.qp,
            SendWr::new(
                5,
                SendOp::Write(RemoteAddr {
                    va: a_buf.addr() + 32768,
                    rkey: a_buf.rkey(),
                }),
                vec![sge(&windowed, 0, 4096)],
            ),
        )
        .unwrap();
    assert_eq!(wait_n(&b, 1)[0].status, WcStatus::Success);
    let mut page = vec![0u8; 4096];
    a_buf.read(32768, &mut page).unwrap();
    assert!(page == pattern(3, LEN)[..4096], "B→A WRITE corrupted");
}

/// Keys are not predictable: consecutive registrations give keys with no
/// fixed stride, spread over all 32 bits, and two NICs give unrelated
/// sequences.
#[test]
fn keys_are_not_predictable() {
    let (ia, ib) = ndverbs_testkit::addr::pair_v4();
    let (a, b) = (
        side(ia, Progress::Manual, 4096),
        side(ib, Progress::Manual, 4096),
    );
    let mut keys = Vec::new();
    for s in [&a, &b] {
        let mut ks = Vec::new();
        for _ in 0..256 {
            let r = s
                .nic
                .reg_mr(s.pd, RegionBuf::alloc(64).unwrap(), Access::ALL)
                .unwrap();
            ks.push(r.rkey());
            s.nic.dereg_mr(r.lkey()).unwrap();
        }
        keys.push(ks);
    }
    for ks in &keys {
        let strides: std::collections::HashSet<u32> =
            ks.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(strides.len() > 250, "keys follow a stride: {strides:?}");
        let ones: u32 = ks.iter().map(|k| k.count_ones()).sum();
        let mean = f64::from(ones) / ks.len() as f64;
        assert!((12.0..20.0).contains(&mean), "key bits unbalanced: {mean}");
        let uniq: std::collections::HashSet<u32> = ks.iter().copied().collect();
        assert_eq!(uniq.len(), ks.len(), "a key repeated");
    }
    let shared: Vec<_> = keys[0].iter().filter(|k| keys[1].contains(k)).collect();
    assert!(shared.is_empty(), "two NICs produced the same keys");
}

/// The floods run one at a time (each needs the cores to drain its socket).
static FLOOD: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Connects `a` to `b` through the CM (B listens on `listener`, port
/// `port`); returns (A's endpoint, B's endpoint).
fn cm_connect(a: &Side, b: &Side, listener: u32, port: u16) -> (u32, u32) {
    let args = ConnectArgs {
        local_port: 40000 + (a.qp.qpn() & 0xfff) as u16,
        ..connect_args(b.nic.local(), port)
    };
    let c = cm::establish(a, b, listener, args, accept_args());
    (c.ea, c.eb)
}

/// One verified exchange from `x` to `y`: a SEND of `len` bytes of pattern
/// `seed` into `y`'s region at 0 and a WRITE of the same bytes to `y`'s
/// region at `LEN / 2`; every completion succeeds and the bytes arrive.
fn exchange(x: &Side, y: &Side, seed: u64, len: usize) {
    let data = pattern(seed, len);
    x.mr.write(0, &data).unwrap();
    y.post_recv(seed, 0, len);
    let mut wr = SendWr::new(1, SendOp::Write(y.remote(LEN / 2)), vec![x.sge(0, len)]);
    wr.signaled = true;
    x.post_send(wr);
    let mut wr = SendWr::new(2, SendOp::Send, vec![x.sge(0, len)]);
    wr.signaled = true;
    x.post_send(wr);
    for wc in wait_n(x, 2) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    let wc = wait_n(y, 1)[0];
    assert_eq!(
        (wc.status, wc.wr_id, wc.byte_len),
        (WcStatus::Success, seed, len as u32),
        "{wc:?}"
    );
    assert!(y.bytes(0, len) == data, "SEND {seed} corrupted");
    assert!(y.bytes(LEN / 2, len) == data, "WRITE {seed} corrupted");
}

/// The flood against QPs connected through the CM (connection endpoints),
/// with MADs aimed at that connection among the forgeries, while a second,
/// unrelated connection on the same NIC moves verified data.
///
/// B listens; A connects to it, and so does C, the bystander. The forgers also send, besides everything of
/// [`flood_leaves_memory_and_connection_intact`], CM messages naming the
/// A–B connection: DREQ, REJ (also reason 4 with A's GUID), DREP, RTU, MRA
/// and REP with the exact comm IDs from an address that is not A's; REQs
/// from there that duplicate A's REQ or claim A's QPN and GUID (a "stale
/// connection"); and from A's own address DREQs with the exact IDs but
/// another QPN, and DREQ/REJ/DREP/RTU/MRA with a wrong remote comm ID.
/// Afterwards: no endpoint saw a disconnect, the regions of B are unchanged,
/// both connections still carry data both ways and A–B still disconnects
/// cleanly; the bystander kept exchanging verified data during the flood.
#[test]
fn flood_spares_cm_connections() {
    let _one = FLOOD.lock().unwrap_or_else(|e| e.into_inner());
    let n = packets();
    let shape = Shape::queues(256, 2, 64, 1024, LEN);
    let open = |ip| cm_side(Nic::open(ip, Progress::Thread).unwrap(), shape);
    let ips = ndverbs_testkit::addr::many_v4(3);
    let (a, b, c) = (open(ips[0]), open(ips[1]), open(ips[2]));
    // The bystander's end at B: same NIC and PD as the end under attack.
    let b2 = Side::in_pd(b.nic.clone(), b.pd, shape);
    b2.modify([init_step()]);
    let port = 7190;
    let listener = cm::listen(&b, port);
    let (ea, eb) = cm_connect(&a, &b, listener, port);
    let (ec, eb2) = cm_connect(&c, &b2, listener, port);
    exchange(&a, &b, 1, 4096);
    exchange(&b, &a, 2, 4096);
    // Every endpoint waits for a disconnect that must not come.
    let ends = [(&a, ea), (&b, eb), (&c, ec), (&b2, eb2)];
    let notified: Vec<_> = ends
        .iter()
        .map(|(s, ep)| s.nic.ep_notify_disconnect(*ep).unwrap())
        .collect();

    let (b_comm, a_comm) = b.nic.ep_info(eb).unwrap().comm_ids.unwrap();
    assert_eq!(a.nic.ep_info(ea).unwrap().comm_ids, Some((a_comm, b_comm)));
    let private = b
        .nic
        .reg_mr(b.pd, RegionBuf::alloc(LEN).unwrap(), Access::LOCAL_WRITE)
        .unwrap();
    private.write(0, &pattern(3, LEN)).unwrap();
    b.mr.write(0, &pattern(4, LEN)).unwrap();
    let regions = [("granted", &b.mr), ("private", &private)];
    let before: Vec<Vec<u8>> = regions.iter().map(|(_, r)| snapshot(r)).collect();
    let b_qpn = b.qp.qpn();
    let targets = Targets {
        keys: vec![b.mr.rkey(), private.rkey(), b2.mr.rkey(), 0],
        bases: vec![b.mr.addr(), private.addr(), b2.mr.addr(), 0],
    };
    let aim = Aim {
        b_ip: b.nic.local(),
        b_qpn,
        epsn: b.nic.query_qp(b_qpn).unwrap().rq_psn,
        targets: &targets,
        cm: Some(CmAim {
            a_comm,
            b_comm,
            a_qpn: a.qp.qpn(),
            a_guid: node_guid(a.nic.local()),
            service_id: ndverbs_wire::cma::service_id(ndverbs_wire::cma::RDMA_PS_TCP, port),
        }),
        received: &b.nic.counters().rcvd_datagrams,
    };
    let forgers = Forgers::new(a.nic.local());
    let b_stats0 = b.nic.stats();
    let counters = b.nic.counters();
    let rcvd0 = counters.rcvd_datagrams.load(Ordering::Relaxed);

    // The flood, with the bystander C–B exchanging data throughout.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let t0 = Instant::now();
    let (kinds, rounds) = std::thread::scope(|s| {
        let bystander = s.spawn(|| {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                rounds += 1;
                let (x, y) = if rounds % 2 == 0 {
                    (&c, &b2)
                } else {
                    (&b2, &c)
                };
                exchange(x, y, 1000 + rounds, 2048);
            }
            rounds
        });
        let kinds = flood(n, &forgers, &aim, &mut Rng(0xc0ffee));
        stop.store(true, Ordering::Relaxed);
        (kinds, bystander.join().expect("bystander"))
    });
    let send_time = t0.elapsed();
    let arrived = drained(counters, rcvd0);
    let st = b.nic.stats();
    let delta = |name: &str| st.get(name) - b_stats0.get(name);
    println!(
        "CM flood: {n} packets in {:.1} s ({kinds:?} garbage/valid-ICRC-random/wrong-source/right-but-source/peer-address/MAD/CM-aimed), {arrived} datagrams arrived (bystander's included); bystander: {rounds} verified exchanges during the flood",
        send_time.as_secs_f64()
    );
    println!(
        "CM: {:?}",
        st.pairs()
            .iter()
            .filter(|(n, _)| n.starts_with("cm_rx") || n.starts_with("cm_tx_drep"))
            .map(|(n, _)| (n.as_str(), delta(n)))
            .filter(|(_, v)| *v > 0)
            .collect::<Vec<_>>()
    );
    println!(
        "NIC drops: bad ICRC {}, malformed {}, unknown QP {}, wrong source {}",
        delta("drop_bad_icrc"),
        delta("drop_malformed"),
        delta("drop_unknown_qp"),
        delta("drop_wrong_source"),
    );
    assert!(
        arrived >= n / 2,
        "only {arrived} of {n} forged packets reached the engine"
    );
    assert!(
        rounds >= 2,
        "the bystander connection stalled: {rounds} rounds"
    );
    // No disconnect anywhere, every connection established.
    for (p, name) in notified.iter().zip(["A", "B", "C", "B (bystander)"]) {
        assert!(
            !p.is_done(),
            "{name} was told of a disconnect: {:?}",
            p.try_take()
        );
    }
    for (s, ep) in ends {
        let info = s.nic.ep_info(ep).unwrap();
        assert_eq!(info.cm_state, Some(CmState::Established), "{info:?}");
        assert!(!info.dreq_received);
    }
    for e in [&a, &b, &c, &b2] {
        assert_eq!(e.qp.state(), QpState::Rts);
    }
    assert!(a.cq.poll_one().is_none() && b.cq.poll_one().is_none());
    assert_unchanged(&regions, &before);
    // The forgeries naming the connection were seen and dropped.
    for counter in [
        "cm_rx_wrong_source",
        "cm_rx_dreq_bad_qpn",
        "cm_rx_unmatched",
    ] {
        assert!(delta(counter) > 0, "{counter} did not move");
    }
    assert!(delta("drop_wrong_source") > 0);

    // Both connections carry data both ways.
    exchange(&a, &b, 5, 32768);
    exchange(&b, &a, 6, 32768);
    exchange(&c, &b2, 7, 32768);
    // And A–B still ends cleanly: A's DREQ, B's DREP.
    let da = a.nic.ep_disconnect(ea, a.qp.ident()).unwrap();
    notified[1]
        .wait_timeout(CM_LIMIT)
        .expect("B notified")
        .unwrap();
    done(
        b.nic.ep_disconnect(eb, b.qp.ident()).unwrap(),
        "B disconnect",
    );
    done(da, "A disconnect");
    assert!(!notified[2].is_done() && !notified[3].is_done());
}
