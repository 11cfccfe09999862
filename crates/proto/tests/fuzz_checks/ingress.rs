//! The check behind the `engine_ingress` fuzz target (`fuzz/fuzz_targets/`)
//! and its stable replay (`crates/proto/tests/fuzz_ingress.rs`): arbitrary
//! packets into a live RC QP and a live CM agent, sans-IO.
//!
//! Setup: a QP in RTS (QPN 0x000123, peer 0x000456, expecting PSN 0x100000,
//! sending from 0x200000) with a send queue holding a WRITE, a READ and an
//! atomic, receives posted, memory with a granted region (all remote
//! rights), a local-only region and a region of another PD; two CM agents
//! with an established connection, the fuzzed MADs arriving at the passive
//! one "from" the active one's address.
//!
//! Input: records `[kind u8][len u16 LE][len bytes]` until the data ends.
//! `kind & 3`: 0 = a transport packet (BTH onwards) for the QP, 1 = a MAD
//! for the passive CM agent, 2 = advance the clock by `len` × 1 ms and run
//! both sides' timers, 3 = both (packet bytes reinterpreted as a MAD too).
//! `kind & 0x80` rewrites the packet's destination QPN to the QP's, and
//! `kind & 0x40` its PSN to the one the QP expects (requests) or the oldest
//! it awaits (responses), so the deep paths are reachable.
//!
//! Checked after every record: nothing panics; every packet the QP or the
//! agents emit parses; the QP's completions never exceed what was posted and
//! each WR completes at most once; the local-only and foreign-PD regions are
//! byte-identical to their initial contents; the source region is unchanged.

use ndverbs_proto::cm::{AcceptParams, CmAgent, CmConfig, CmEvent, ConnectParams, SidrParams};
use ndverbs_proto::mem::testing::{MrKeys, VecMemory};
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::{
    QpCaps, QpState, RcConnection, RcQp, RecvQueue, RecvWr, RemoteAddr, SendOp, SendWr, WcQueue,
};
use ndverbs_proto::time::{Duration, Instant};
use ndverbs_wire::cma;
use ndverbs_wire::mad::Mad;
use ndverbs_wire::packet::Packet;
use std::collections::HashSet;
use std::net::IpAddr;

pub const QPN: u32 = 0x123;
pub const PEER_QPN: u32 = 0x456;
pub const RQ_PSN: u32 = 0x10_0000;
pub const SQ_PSN: u32 = 0x20_0000;
pub const KIND_PACKET: u8 = 0;
pub const KIND_MAD: u8 = 1;
pub const KIND_TIME: u8 = 2;
pub const FIX_QPN: u8 = 0x80;
pub const FIX_PSN: u8 = 0x40;

struct Rc {
    qp: RcQp,
    rq: RecvQueue,
    mem: VecMemory,
    src: (MrKeys, Vec<u8>),
    fixed: Vec<(MrKeys, Vec<u8>)>,
    posted: HashSet<u64>,
    done: HashSet<u64>,
}

fn rc() -> Rc {
    let mut qp = RcQp::new(QPN, 1, QpCaps::default());
    let conn = RcConnection {
        rq_psn: RQ_PSN,
        sq_psn: SQ_PSN,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        timeout: 10,
        retry_cnt: 3,
        rnr_retry: 3,
        min_rnr_timer: 1,
        ..RcConnection::new(PEER_QPN)
    };
    for (attr, mask) in conn.steps() {
        qp.modify(&attr, mask).unwrap();
    }
    let mut mem = VecMemory::new();
    let pat = |seed: u8, n: usize| -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
            .collect()
    };
    let src_bytes = pat(3, 8192);
    let src = mem.register_bytes(1, 0x10_0000, src_bytes.clone(), Access::REMOTE_READ);
    let granted = mem.register_bytes(1, 0x20_0000, pat(5, 8192), Access::ALL);
    let _ = granted;
    let local_bytes = pat(7, 4096);
    let local = mem.register_bytes(1, 0x30_0000, local_bytes.clone(), Access::NONE);
    let other_bytes = pat(11, 4096);
    let other = mem.register_bytes(2, 0x40_0000, other_bytes.clone(), Access::ALL);
    let recv = mem.register(1, 0x50_0000, 8192, Access::LOCAL_WRITE);
    let land = mem.register(1, 0x60_0000, 8192, Access::LOCAL_WRITE);
    let mut rq = RecvQueue::new(8, 2);
    let mut posted = HashSet::new();
    for i in 0..4u64 {
        qp.post_recv(
            &mut rq,
            RecvWr::new(100 + i, vec![recv.sge(i as u32 * 2048, 2048)]),
        )
        .unwrap();
        posted.insert(100 + i);
    }
    let remote = RemoteAddr {
        va: 0x7000_0000,
        rkey: 0x1234,
    };
    for wr in [
        SendWr::new(1, SendOp::Write(remote), vec![src.sge(0, 3000)]),
        SendWr::new(2, SendOp::Read(remote), vec![land.sge(0, 2500)]),
        SendWr::new(
            3,
            SendOp::FetchAdd { remote, add: 1 },
            vec![land.sge(4096, 8)],
        ),
        SendWr::new(4, SendOp::Send, vec![src.sge(0, 100)]),
    ] {
        posted.insert(wr.wr_id);
        qp.post_send(wr).unwrap();
    }
    Rc {
        qp,
        rq,
        mem,
        src: (src, src_bytes),
        fixed: vec![(local, local_bytes), (other, other_bytes)],
        posted,
        done: HashSet::new(),
    }
}

struct Cm {
    a: CmAgent,
    b: CmAgent,
    a_ip: IpAddr,
}

fn pump(now: Instant, x: &mut CmAgent, y: &mut CmAgent) {
    for _ in 0..64 {
        let (xa, ya) = (x.config().local_addr, y.config().local_addr);
        let mut quiet = true;
        while let Some(t) = x.poll_transmit() {
            check_mad(&t.mad);
            y.handle_mad(now, xa, &t.mad);
            quiet = false;
        }
        while let Some(t) = y.poll_transmit() {
            check_mad(&t.mad);
            x.handle_mad(now, ya, &t.mad);
            quiet = false;
        }
        while x.poll_event().is_some() {}
        while y.poll_event().is_some() {}
        if quiet {
            break;
        }
    }
}

fn check_mad(mad: &[u8]) {
    let m = Mad::parse(mad).expect("the agent's own MAD parses");
    ndverbs_wire::cm::CmMessage::parse(&m).expect("the agent's own CM message parses");
}

fn cm() -> Cm {
    let (a_ip, b_ip): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    let mut a = CmAgent::new(CmConfig::new(a_ip, 0xa, 1));
    let mut b = CmAgent::new(CmConfig::new(b_ip, 0xb, 2));
    let now = Instant::ZERO;
    let sid = cma::service_id(cma::RDMA_PS_TCP, 7174);
    b.listen(sid).unwrap();
    let ea = a
        .connect(now, ConnectParams::new(sid, b_ip, 0x11, 0x464b))
        .unwrap();
    // Deliver by hand so the events stay visible.
    while let Some(t) = a.poll_transmit() {
        b.handle_mad(now, a_ip, &t.mad);
    }
    let Some(CmEvent::ConnectRequest(req)) = b.poll_event() else {
        panic!("no connect request")
    };
    b.accept(now, req.endpoint, AcceptParams::new(0x22, 0x7d7d7f))
        .unwrap();
    while let Some(t) = b.poll_transmit() {
        a.handle_mad(now, b_ip, &t.mad);
    }
    a.complete_connect(now, ea, &[]).unwrap();
    pump(now, &mut a, &mut b);
    // A second service listening, for REQs the fuzzer forms.
    b.listen(cma::service_id(cma::RDMA_PS_TCP, 7175)).unwrap();
    // A UDP service and a SIDR request of A's waiting on it (B's
    // application never answers), for the SIDR messages the fuzzer forms.
    let udp = cma::service_id(cma::RDMA_PS_UDP, 7175);
    b.listen(udp).unwrap();
    a.sidr_request(now, SidrParams::new(udp, b_ip)).unwrap();
    pump(now, &mut a, &mut b);
    Cm { a, b, a_ip }
}

/// Runs one fuzz input. Panics when a check fails.
pub fn check_ingress(data: &[u8]) {
    let mut rc = rc();
    let mut cm = cm();
    let mut now = Instant::ZERO;
    let mut buf = vec![0u8; rc.qp.max_packet_len()];
    let mut off = 0;
    let mut records = 0;
    while off + 3 <= data.len() && records < 4096 {
        records += 1;
        let kind = data[off];
        let len = usize::from(u16::from_le_bytes([data[off + 1], data[off + 2]]));
        off += 3;
        let end = (off + len).min(data.len());
        let mut bytes = data[off..end].to_vec();
        off = end;
        let what = kind & 3;
        if what == KIND_TIME {
            now += Duration::from_millis(len as u64);
            rc.qp.handle_timeout(now);
            cm.a.handle_timeout(now);
            cm.b.handle_timeout(now);
        }
        if what == KIND_PACKET || what == 3 {
            if bytes.len() >= 12 {
                if kind & FIX_QPN != 0 {
                    bytes[5..8].copy_from_slice(&QPN.to_be_bytes()[1..]);
                }
                if kind & FIX_PSN != 0 {
                    let q = rc.qp.query();
                    // A request gets the PSN the responder expects; anything
                    // else the oldest unacknowledged one.
                    let psn = if bytes[0] & 0x1f <= 0x0c || matches!(bytes[0] & 0x1f, 0x13..=0x17) {
                        q.rq_psn
                    } else {
                        SQ_PSN
                    };
                    bytes[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
                }
            }
            if let Ok(p) = Packet::parse(&bytes) {
                rc.qp.handle_packet(now, &p, &mut rc.mem, &mut rc.rq);
            }
        }
        if what == KIND_MAD || what == 3 {
            cm.b.handle_mad(now, cm.a_ip, &bytes);
        }
        // Drain and check outputs.
        let mut sent = 0;
        while let Some(n) = rc.qp.poll_transmit(now, &mut rc.mem, &mut buf) {
            Packet::parse(&buf[..n]).expect("the QP's own packet parses");
            sent += 1;
            if sent > 100_000 {
                panic!("poll_transmit never ends");
            }
        }
        if rc.qp.state() == QpState::Err {
            rc.qp.flush_recv(&mut rc.rq);
        }
        while let Some(wc) = rc.qp.poll_completion() {
            assert!(
                rc.posted.contains(&wc.wr_id),
                "completion of a WR never posted: {wc:?}"
            );
            assert!(rc.done.insert(wc.wr_id), "WR {} completed twice", wc.wr_id);
            let _ = wc.queue == WcQueue::Send;
        }
        let (a, b) = (&mut cm.a, &mut cm.b);
        pump(now, b, a);
        for (k, bytes) in rc.fixed.iter().chain(std::iter::once(&rc.src)) {
            assert!(
                rc.mem.bytes(k.lkey) == &bytes[..],
                "region {:#x} changed",
                k.lkey
            );
        }
    }
}

/// Capture-derived inputs: every RC packet of a capture as a packet record
/// (QPN rewritten), every MAD as a MAD record, 1 ms apart.
pub fn inputs_from_capture(file: &[u8]) -> Vec<u8> {
    use ndverbs_wire::capture::{ip_packet, read_frames};
    use ndverbs_wire::packet::Datagram;
    let mut out = Vec::new();
    let Ok(frames) = read_frames(file) else {
        return out;
    };
    for f in frames {
        let Some((_, ip)) = ip_packet(f.link, f.data) else {
            continue;
        };
        let Ok(d) = Datagram::parse(ip) else {
            continue;
        };
        let hdr = d.envelope.len();
        let total = d.packet.encoded_len().unwrap_or(0);
        let Some(transport) = ip.get(hdr..hdr + total) else {
            continue;
        };
        let (kind, rec) = if d.packet.bth.dqpn == 1 {
            (KIND_MAD, d.packet.payload)
        } else {
            (KIND_PACKET | FIX_QPN, transport)
        };
        out.push(kind);
        out.extend_from_slice(&(rec.len() as u16).to_le_bytes());
        out.extend_from_slice(rec);
        out.extend_from_slice(&[KIND_TIME, 1, 0]);
    }
    out
}
