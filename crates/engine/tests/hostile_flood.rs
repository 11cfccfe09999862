//! A hostile peer floods a live connection.
//!
//! Two adapters on loopback (127.77.90.1 ↔ .2) with a connected RC QP pair;
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
//! What this does not claim: a packet from the peer's address carrying the
//! exact PSN the responder expects is indistinguishable from the peer's own
//! (RoCEv2 has no authentication) and is executed within the granted
//! windows — or, if it violates them, ends the connection as the IBTA
//! requires.

mod common;

use common::*;
use ndverbs_engine::adapter::{sge, Progress};
use ndverbs_engine::mr::{Region, RegionBuf};
use ndverbs_engine::udp::RoceSocket;
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::{PathMtu, QpState, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus};
use ndverbs_wire::bth::Bth;
use ndverbs_wire::ext::{Aeth, AtomicEth, Deth, Reth, Syndrome};
use ndverbs_wire::opcode::{Headers, Opcode, Payload};
use ndverbs_wire::packet::Packet;
use std::net::{IpAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NET: u8 = 90;
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

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed);
    r.bytes(len)
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

/// Sends `buf` (a transport packet whose ICRC the socket fills in), waiting
/// while the socket buffer is full.
fn send_valid(s: &RoceSocket, buf: &mut [u8], dst: IpAddr) {
    loop {
        match s.send_to_flipped(buf, dst, 4791, None) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) => panic!("forger send: {e}"),
        }
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
    let mut p = Packet::new(Bth::new(Opcode::UD_SEND_ONLY, 1, r.next() as u32));
    p.ext.deth = Some(Deth {
        qkey: 0x8001_0000,
        resv: 0,
        src_qpn: 1,
    });
    p.payload = &mad;
    p.write(buf).unwrap()
}

#[test]
fn flood_leaves_memory_and_connection_intact() {
    let n = packets();
    let (a, b) = pair(NET, Progress::Thread, PathMtu::Mtu1024, LEN);
    let a_ip = a.adapter.local();
    let b_ip = b.adapter.local();
    let pd = b.pd;
    let ad = &b.adapter;
    let reg = |acc: Access, seed: u64| -> Arc<Region> {
        let r = ad.reg_mr(pd, RegionBuf::alloc(LEN).unwrap(), acc).unwrap();
        r.write(0, &pattern(seed, LEN)).unwrap();
        r
    };
    let granted = b.mr.clone();
    granted.write(0, &pattern(1, LEN)).unwrap();
    let private = reg(Access::LOCAL_WRITE, 2);
    let windowed = reg(Access::ALL, 3);
    let mw = ad.alloc_mw(pd).unwrap();
    let mw_key = ad
        .bind_mw(
            mw,
            windowed.lkey(),
            windowed.addr() + 4096,
            4096,
            Access::REMOTE_READ | Access::REMOTE_WRITE,
        )
        .unwrap();
    let mw2 = ad.alloc_mw(pd).unwrap();
    let dead_mw = ad
        .bind_mw(mw2, windowed.lkey(), windowed.addr(), 8192, Access::ALL)
        .unwrap();
    ad.invalidate_mw(dead_mw).unwrap();
    let stale = reg(Access::ALL, 4);
    let stale_key = stale.rkey();
    ad.dereg_mr(stale.lkey()).unwrap();
    let regions: Vec<(&str, Arc<Region>)> = vec![
        ("granted", granted.clone()),
        ("private", private.clone()),
        ("windowed", windowed.clone()),
        ("deregistered", stale.clone()),
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
        a.adapter
            .post_send(
                &a.qp,
                SendWr::new(i as u64, op, vec![sge(&a_buf, 32768, len)]),
            )
            .unwrap();
    }
    for wc in wait_n(&a, 3, Duration::from_secs(10)) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    let before: Vec<Vec<u8>> = regions.iter().map(|(_, r)| snapshot(r)).collect();
    let b_qpn = b.qp.qpn();
    let epsn = b.adapter.query_qp(b_qpn).unwrap().rq_psn;
    let b_counters0 = b.adapter.qp_counters(b_qpn).unwrap();
    let rcvd0 = b.adapter.counters().rcvd_datagrams.load(Ordering::Relaxed);

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
    let other = RoceSocket::bind(IpAddr::from([127, 77, NET, 3])).unwrap();
    let from_peer_ip = RoceSocket::bind_port(a_ip, 0).unwrap();
    let raw = UdpSocket::bind((IpAddr::from([127, 77, NET, 4]), 0)).unwrap();
    let mut rng = Rng(0xf100d);
    let mut buf = vec![0u8; 4096];
    let mut kinds = [0u64; 6];
    let t0 = Instant::now();
    for i in 0..n {
        let kind = (rng.below(100)) as usize;
        let kind = match kind {
            0..=9 => 0,
            10..=19 => 1,
            20..=49 => 2,
            50..=54 => 3,
            55..=94 => 4,
            _ => 5,
        };
        kinds[kind] += 1;
        match kind {
            // Garbage: no valid ICRC.
            0 => {
                let len = rng.below(200) as usize;
                let bytes = rng.bytes(len);
                loop {
                    match raw.send_to(&bytes, (b_ip, 4791)) {
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
                send_valid(&other, &mut bytes, b_ip);
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
                let len = forge(&mut rng, dqpn, psn, &targets, &mut buf);
                send_valid(&other, &mut buf[..len], b_ip);
            }
            // Right everything but the source: a valid WRITE into the
            // granted region with the expected PSN.
            3 => {
                let mut p = Packet::new(Bth::new(Opcode::RC_WRITE_ONLY, b_qpn, epsn));
                p.bth.ack_req = true;
                let data = rng.bytes(256);
                p.ext.reth = Some(Reth {
                    va: granted.addr() + rng.below(1024) * 8,
                    rkey: granted.rkey(),
                    len: 256,
                });
                p.payload = &data;
                let len = p.write(&mut buf).unwrap();
                send_valid(&other, &mut buf[..len], b_ip);
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
                let len = forge(&mut rng, b_qpn, psn, &targets, &mut buf);
                send_valid(&from_peer_ip, &mut buf[..len], b_ip);
            }
            // CM MADs to QP1.
            _ => {
                let len = forge_mad(&mut rng, &mut buf);
                let s = if rng.below(2) == 0 {
                    &other
                } else {
                    &from_peer_ip
                };
                send_valid(s, &mut buf[..len], b_ip);
            }
        }
        if i % 256 == 255 {
            // Let the engine keep up (the kernel drops what overflows the
            // socket buffer, uncounted by the engine).
            std::thread::yield_now();
        }
    }
    let send_time = t0.elapsed();
    // Wait until the engine has drained its socket.
    let counters = &b.adapter.counters();
    let mut last = u64::MAX;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = counters.rcvd_datagrams.load(Ordering::Relaxed);
        if now == last {
            break;
        }
        last = now;
    }
    let arrived = last - rcvd0;
    let c = b.adapter.qp_counters(b_qpn).unwrap();
    let get = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
    println!(
        "flood: {n} packets in {:.1} s ({kinds:?} garbage/valid-ICRC-random/wrong-source/right-but-source/peer-address/MAD), {arrived} arrived",
        send_time.as_secs_f64()
    );
    println!(
        "adapter drops: bad ICRC {}, malformed {}, unknown QP {}, wrong source {}, GSI {}",
        get(&counters.drop_bad_icrc),
        get(&counters.drop_malformed),
        get(&counters.drop_unknown_qp),
        get(&counters.drop_wrong_source),
        get(&counters.drop_gsi),
    );
    let st = b.adapter.stats();
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

    // Nothing forged reached memory.
    for ((name, r), old) in regions.iter().zip(&before) {
        let now = snapshot(r);
        if let Some(i) = now.iter().zip(old).position(|(x, y)| x != y) {
            panic!("{name} region changed at byte {i}");
        }
    }
    // The connection is intact.
    for s in [&a, &b] {
        assert_eq!(
            s.adapter.query_qp(s.qp.qpn()).unwrap().qp_state,
            QpState::Rts,
            "a QP left RTS"
        );
    }
    assert!(a.cq.poll_one().is_none() && b.cq.poll_one().is_none());
    let data = pattern(77, 32768);
    a_buf.write(0, &data).unwrap();
    b.adapter
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
        a.adapter.post_send(&a.qp, wr).unwrap();
    }
    for wc in wait_n(&a, 3, Duration::from_secs(20)) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    let wc = wait_n(&b, 1, Duration::from_secs(20))[0];
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
    b.adapter
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
    assert_eq!(
        wait_n(&b, 1, Duration::from_secs(20))[0].status,
        WcStatus::Success
    );
    let mut page = vec![0u8; 4096];
    a_buf.read(32768, &mut page).unwrap();
    assert!(page == pattern(3, LEN)[..4096], "B→A WRITE corrupted");
}

/// Keys are not predictable: consecutive registrations give keys with no
/// fixed stride, spread over all 32 bits, and two adapters give unrelated
/// sequences.
#[test]
fn keys_are_not_predictable() {
    let a = side(IpAddr::from([127, 77, NET, 5]), Progress::Manual, 4096);
    let b = side(IpAddr::from([127, 77, NET, 6]), Progress::Manual, 4096);
    let mut keys = Vec::new();
    for s in [&a, &b] {
        let mut ks = Vec::new();
        for _ in 0..256 {
            let r = s
                .adapter
                .reg_mr(s.pd, RegionBuf::alloc(64).unwrap(), Access::ALL)
                .unwrap();
            ks.push(r.rkey());
            s.adapter.dereg_mr(r.lkey()).unwrap();
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
    assert!(shared.is_empty(), "two adapters produced the same keys");
}
