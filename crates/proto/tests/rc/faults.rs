//! Random mixed workloads in both directions under seeded loss, duplication
//! and reordering; every byte and every completion is checked.

use crate::harness::*;
use ndverbs_proto::mem::testing::MrKeys;
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::*;
use ndverbs_proto::time::Duration;

/// What one posted operation must produce.
enum Expect {
    /// A SEND whose data must land in receive `recv_id` of the peer.
    Send {
        data: Vec<u8>,
        recv_id: u64,
        imm: Option<u32>,
    },
    /// Peer memory `[off, off+len)` of the write region must equal `data`.
    Write {
        off: usize,
        data: Vec<u8>,
        recv_id: Option<u64>,
    },
    /// Local read-landing memory `[off, off+len)` must equal peer source bytes.
    Read {
        off: usize,
        src_off: usize,
        len: usize,
    },
    /// Local result slot must hold `orig`.
    Atomic { slot: usize, orig: u64 },
}

struct Dir {
    from: Side,
    // Local regions of the sender.
    src: MrKeys,     // data to send / write; peer READs from here too
    landing: MrKeys, // READ destinations
    results: MrKeys, // atomic results
    // Peer regions.
    peer_recv: MrKeys, // receive buffers
    peer_write: MrKeys,
    peer_src: MrKeys, // READ sources
    peer_counter: MrKeys,
    expects: Vec<(u64, Expect)>,
    recv_slots: Vec<(u64, usize, usize)>, // (recv wr_id, offset, len) in peer_recv
}

const SRC_LEN: usize = 1 << 20;

struct Workload {
    dirs: Vec<Dir>,
    /// Payload bytes of all operations.
    bytes: usize,
}

impl Workload {
    /// Sets up regions and posts `ops` random operations in each direction,
    /// totalling about `bytes` per direction. Receives for the second half of
    /// the SENDs are posted only after `late_recv` (RNR NAKs until then).
    fn build(
        p: &mut Pair,
        seed: u64,
        ops: usize,
        max_len: usize,
    ) -> (Workload, Vec<(Side, RecvWr)>) {
        let mut rng = Rng::new(seed);
        let mut dirs = Vec::new();
        let mut all_late = Vec::new();
        let mut bytes = 0;
        for (from, to, base) in [
            (Side::A, Side::B, 0x1_0000_0000u64),
            (Side::B, Side::A, 0x2_0000_0000),
        ] {
            let region =
                |p: &mut Pair, side: Side, off: u64, len: usize, acc: Access, seed: u64| {
                    p.region(side, base + off, pattern(seed, len), acc)
                };
            let src = region(p, from, 0, SRC_LEN, Access::REMOTE_READ, seed ^ base);
            let landing = region(p, from, 0x1000_0000, ops * max_len + 1, Access::NONE, 0);
            let results = region(p, from, 0x2000_0000, ops * 8, Access::NONE, 0);
            let peer_recv = region(p, to, 0x3000_0000, ops * max_len + 1, Access::NONE, 0);
            let peer_write = region(
                p,
                to,
                0x4000_0000,
                ops * max_len + 1,
                Access::REMOTE_WRITE,
                0,
            );
            let peer_src = region(
                p,
                to,
                0x5000_0000,
                SRC_LEN,
                Access::REMOTE_READ,
                seed ^ base ^ 1,
            );
            let peer_counter = region(p, to, 0x6000_0000, 8, Access::REMOTE_ATOMIC, 0);
            p.node(to).mem.bytes_mut(peer_counter.lkey).fill(0);
            dirs.push(Dir {
                from,
                src,
                landing,
                results,
                peer_recv,
                peer_write,
                peer_src,
                peer_counter,
                expects: Vec::new(),
                recv_slots: Vec::new(),
            });
        }
        #[allow(clippy::needless_range_loop)]
        for d in 0..2 {
            let mut counter = 0u64;
            let mut off = 0usize;
            let mut sends = 0usize;
            let mut late = Vec::new();
            for i in 0..ops {
                let wr_id = (d as u64) << 32 | i as u64;
                let len = match rng.below(10) {
                    0 => 0,
                    1..=3 => rng.below(64) as usize + 1,
                    _ => rng.below(max_len as u64) as usize + 1,
                };
                let src_off = rng.below((SRC_LEN - len) as u64) as usize;
                bytes += len;
                let dir = &mut dirs[d];
                let data = dir_src_bytes(p, dir, src_off, len);
                let sge = vec![dir.src.sge(src_off as u32, len as u32)];
                let kind = rng.below(8);
                let (op, expect, recv) = match kind {
                    0 | 1 => {
                        let imm = (kind == 1).then_some(i as u32);
                        let op = imm.map_or(SendOp::Send, SendOp::SendImm);
                        let recv_id = wr_id | 1 << 40;
                        (
                            op,
                            Expect::Send { data, recv_id, imm },
                            Some((recv_id, len.max(1))),
                        )
                    }
                    2 | 3 => {
                        let remote = RemoteAddr {
                            va: dir.peer_write.addr + off as u64,
                            rkey: dir.peer_write.rkey,
                        };
                        let (op, recv_id) = if kind == 3 {
                            (SendOp::WriteImm(remote, i as u32), Some(wr_id | 1 << 40))
                        } else {
                            (SendOp::Write(remote), None)
                        };
                        let e = Expect::Write { off, data, recv_id };
                        off += len;
                        (op, e, recv_id.map(|r| (r, 1)))
                    }
                    4 | 5 => {
                        let remote = RemoteAddr {
                            va: dir.peer_src.addr + src_off as u64,
                            rkey: dir.peer_src.rkey,
                        };
                        let e = Expect::Read { off, src_off, len };
                        let sge2 = vec![dir.landing.sge(off as u32, len as u32)];
                        off += len;
                        let wr = SendWr::new(wr_id, SendOp::Read(remote), sge2);
                        dir.expects.push((wr_id, e));
                        p.node(dir.from).post_send(wr);
                        continue;
                    }
                    _ => {
                        let remote = RemoteAddr {
                            va: dir.peer_counter.addr,
                            rkey: dir.peer_counter.rkey,
                        };
                        let op = if kind == 6 {
                            SendOp::FetchAdd {
                                remote,
                                add: i as u64 + 1,
                            }
                        } else {
                            SendOp::CompareSwap {
                                remote,
                                compare: counter,
                                swap: counter.wrapping_mul(3).wrapping_add(1),
                            }
                        };
                        let e = Expect::Atomic {
                            slot: i,
                            orig: counter,
                        };
                        counter = if kind == 6 {
                            counter.wrapping_add(i as u64 + 1)
                        } else {
                            counter.wrapping_mul(3).wrapping_add(1)
                        };
                        let wr = SendWr::new(wr_id, op, vec![dir.results.sge(i as u32 * 8, 8)]);
                        dir.expects.push((wr_id, e));
                        p.node(dir.from).post_send(wr);
                        continue;
                    }
                };
                let mut wr = SendWr::new(wr_id, op, sge);
                wr.signaled = rng.below(4) != 0;
                wr.solicited = rng.below(2) == 0;
                if let Some((recv_id, rlen)) = recv {
                    let roff = dir.recv_slots.last().map_or(0, |s| s.1 + s.2);
                    dir.recv_slots.push((recv_id, roff, rlen));
                    let rwr =
                        RecvWr::new(recv_id, vec![dir.peer_recv.sge(roff as u32, rlen as u32)]);
                    sends += 1;
                    let to = if dir.from == Side::A {
                        Side::B
                    } else {
                        Side::A
                    };
                    late.push((to, rwr));
                }
                dir.expects.push((wr_id, expect));
                p.node(dir.from).post_send(wr);
            }
            // The first half of the receives now, the rest later (in order).
            let _ = sends;
            let early = late.len() - late.len() / 2;
            for (to, rwr) in late.drain(..early).collect::<Vec<_>>() {
                p.node(to).post_recv(rwr);
            }
            all_late.append(&mut late);
        }
        (Workload { dirs, bytes }, all_late)
    }

    fn verify(&self, p: &mut Pair) {
        for dir in &self.dirs {
            let to = if dir.from == Side::A {
                Side::B
            } else {
                Side::A
            };
            let sends: Vec<_> = p.node(dir.from).send_wcs();
            for wc in &sends {
                assert_eq!(wc.status, WcStatus::Success, "wr {:x}", wc.wr_id);
            }
            let recvs = p.node(to).recv_wcs();
            let mut counter_expect = None;
            for (wr_id, e) in &dir.expects {
                match e {
                    Expect::Send { data, recv_id, imm } => {
                        let wc = recvs
                            .iter()
                            .find(|w| w.wr_id == *recv_id)
                            .expect("receive completed");
                        assert_eq!(wc.status, WcStatus::Success);
                        assert_eq!(wc.byte_len as usize, data.len());
                        assert_eq!(wc.imm, *imm);
                        let slot = dir.recv_slots.iter().find(|s| s.0 == *recv_id).unwrap();
                        let got =
                            &p.node(to).mem.bytes(dir.peer_recv.lkey)[slot.1..slot.1 + data.len()];
                        assert!(got == &data[..], "SEND {wr_id:x} data");
                    }
                    Expect::Write { off, data, recv_id } => {
                        let got =
                            &p.node(to).mem.bytes(dir.peer_write.lkey)[*off..off + data.len()];
                        assert!(got == &data[..], "WRITE {wr_id:x} data");
                        if let Some(r) = recv_id {
                            let wc = recvs.iter().find(|w| w.wr_id == *r).expect("imm receive");
                            assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm);
                            assert_eq!(wc.byte_len as usize, data.len());
                        }
                    }
                    Expect::Read { off, src_off, len } => {
                        let want = p.node(to).mem.bytes(dir.peer_src.lkey)[*src_off..src_off + len]
                            .to_vec();
                        let got = &p.node(dir.from).mem.bytes(dir.landing.lkey)[*off..off + len];
                        assert!(got == &want[..], "READ {wr_id:x} data");
                        assert!(sends.iter().any(|w| w.wr_id == *wr_id));
                    }
                    Expect::Atomic { slot, orig } => {
                        let r =
                            &p.node(dir.from).mem.bytes(dir.results.lkey)[slot * 8..slot * 8 + 8];
                        assert_eq!(
                            u64::from_ne_bytes(r.try_into().unwrap()),
                            *orig,
                            "atomic {wr_id:x}"
                        );
                        counter_expect = Some(());
                    }
                }
            }
            let _ = counter_expect;
        }
    }
}

fn dir_src_bytes(p: &mut Pair, dir: &Dir, off: usize, len: usize) -> Vec<u8> {
    p.node(dir.from).mem.bytes(dir.src.lkey)[off..off + len].to_vec()
}

/// Runs a workload to completion and checks everything.
fn run_workload(cfg: Config, ops: usize, max_len: usize) -> (Pair, usize) {
    let mut p = Pair::new(Config {
        caps: QpCaps {
            max_send_wr: 4096,
            ..cfg.caps
        },
        rq_depth: 4096,
        ..cfg
    });
    let (w, late) = Workload::build(&mut p, cfg.seed, ops, max_len);
    // Hold the late receives back until the peers have met an empty queue.
    let _ = p.run_until(Duration::from_secs(1), |p| {
        p.a.qp.counters().send_rnr_err > 0 && p.b.qp.counters().send_rnr_err > 0
    });
    for (side, wr) in late {
        p.node(side).post_recv(wr);
    }
    p.run_idle(Duration::from_secs(600));
    for side in [Side::A, Side::B] {
        let n = p.node(side);
        assert_eq!(
            n.qp.state(),
            QpState::Rts,
            "{side:?} cause {:?} counters {:?}\nwcs {:?}",
            n.qp.error_cause(),
            n.qp.counters(),
            n.wcs
                .iter()
                .filter(|w| w.status != WcStatus::Success)
                .take(3)
                .collect::<Vec<_>>()
        );
        assert_eq!(n.qp.send_queue_len(), 0);
        n.check_completions(true, true);
    }
    w.verify(&mut p);
    (p, w.bytes)
}

#[test]
fn mixed_transfer_4mib_under_loss_reordering_duplication() {
    let cfg = Config {
        seed: 42,
        mtu: PathMtu::Mtu4096,
        psn_a: 0xff_ff00, // wraps during the run
        faults: Faults {
            loss: 0.10,
            dup: 0.05,
            latency: Duration::from_micros(10),
            jitter: Duration::from_micros(30),
        },
        ..Config::default()
    };
    let (p, bytes) = run_workload(cfg, 300, 32 * 1024);
    assert!(bytes > 4 << 20, "{bytes} bytes");
    let total: u64 = p.a.sends.len() as u64 + p.b.sends.len() as u64;
    assert_eq!(total, 600);
    let (a, b) = (p.a.qp.counters(), p.b.qp.counters());
    // The faults were real.
    assert!(p.packets_lost > 100, "lost {}", p.packets_lost);
    assert!(a.duplicate_request + b.duplicate_request > 0);
    assert!(a.out_of_seq_request + b.out_of_seq_request > 0);
    assert!(a.resequenced + b.resequenced > 0);
    assert!(a.send_rnr_err + b.send_rnr_err > 0);
    eprintln!(
        "{bytes} bytes: sent {} lost {} virtual {:?}\nA {:?}\nB {:?}",
        p.packets_sent, p.packets_lost, p.now, a, b
    );
}

#[test]
fn many_seeds_small_workloads() {
    for seed in 0..24u64 {
        let mut r = Rng::new(seed * 7919);
        let mtu = [PathMtu::Mtu256, PathMtu::Mtu1024, PathMtu::Mtu4096][r.below(3) as usize];
        let cfg = Config {
            seed,
            mtu,
            psn_a: if seed % 3 == 0 {
                0xff_fff0
            } else {
                r.below(1 << 24) as u32
            },
            psn_b: r.below(1 << 24) as u32,
            max_rd_atomic: 1 + r.below(8) as u8,
            faults: Faults {
                loss: r.below(20) as f64 / 100.0,
                dup: r.below(10) as f64 / 100.0,
                latency: Duration::from_micros(1 + r.below(20)),
                jitter: Duration::from_micros(r.below(40)),
            },
            ..Config::default()
        };
        eprintln!("seed {seed}: {cfg:?}");
        run_workload(cfg, 40, 3000);
    }
}
