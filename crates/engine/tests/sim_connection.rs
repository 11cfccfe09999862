//! Deterministic whole-connection simulation: two adapters, each an
//! endpoint request machine ([`Endpoints`], the engine's own) over a CM
//! agent and an RC QP with its own memory, connected through the CM,
//! running a random mix of SEND / WRITE (with and without immediate) / READ
//! / atomics, then disconnecting — all on virtual time through a network
//! with seeded loss (0–30 %), duplication, reordering, delay, partitions
//! that heal, and peer crashes (a crashed side never sends or processes
//! anything again). The harness is each adapter's core: it makes the
//! application's calls (GetConnectionRequest, Connect, Accept,
//! CompleteConnect, NotifyDisconnect, Disconnect), applies the machine's
//! actions to the QP, and acts on the requests' outcomes.
//!
//! Every seed draws its own scenario (faults, CM timers, QP limits, MTU,
//! workload, how the connection ends) and is checked afterwards:
//!
//! * every posted WR of a live side completes exactly once (success, flush
//!   or error), each queue in posting order, a success prefix then a single
//!   error followed only by flushes;
//! * data arrives intact and in order where RC promises it: the k-th
//!   successful receive holds the peer's k-th SEND (or WRITE-with-immediate),
//!   a successful WRITE's bytes are at the target, a successful READ's
//!   bytes match the source, a successful atomic returned the original value
//!   and ran exactly once; memory outside every granted window and outside
//!   every operation's target is byte-identical at the end;
//! * a successful SEND at the requester implies the peer's receive
//!   completed successfully;
//! * every request completes exactly once; every Disconnect completes
//!   within its configured bound (DREQ interval × (MaxCMRetries + 1)), and
//!   only once its QP phase has moved the QP to ERR, with `Timeout` exactly
//!   when the CM's DREQ timed out;
//! * after a peer crash the survivor's WRs all complete within the bound its
//!   retry settings give;
//! * no object leaks: at the end each live side's machine and CM hold no
//!   endpoint and no timer, no QPN is still reserved for time-wait, and its
//!   QP holds no WR, no timer and no queued completion.
//!
//! ```sh
//! cargo test -p ndverbs-engine --test sim_connection              # 1,000 seeds (debug)
//! cargo test --release -p ndverbs-engine --test sim_connection    # 10,000 seeds (CI)
//! NDV_SIM_SEEDS=1000000 cargo test --release -p ndverbs-engine --test sim_connection -- --nocapture
//! NDV_SIM_SEED=1234 cargo test -p ndverbs-engine --test sim_connection -- --nocapture  # one seed, with its log
//! ```
//!
//! A failing seed prints its replay command.

use ndverbs_engine::ep::{
    AcceptArgs, Action, ConnectArgs, Endpoints, EpError, Outcome, QpError, QpIdent, QpOp, Refused,
    RequestId,
};
use ndverbs_engine::keys::KeyGen;
use ndverbs_proto::cm::{CmAgent, CmConfig, CmEvent, DisconnectHow, QpSetup};
use ndverbs_proto::mem::testing::{MrKeys, VecMemory};
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::{
    AttrMask, ModifyError, PathMtu, QpAttr, QpCaps, QpState, RcConnection, RcQp, RecvQueue, RecvWr,
    RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use ndverbs_proto::time::{Duration, Instant};
use ndverbs_wire::mad::MAD_LEN;
use ndverbs_wire::packet::Packet;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rng::Rng;

// ---------------------------------------------------------------------------
// randomness

/// The simulation's generator for `seed` (salted, so its streams differ
/// from other tests' with the same seed).
fn rng(seed: u64) -> Rng {
    Rng::new(seed ^ 0x51_6d_c0_22)
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng(seed ^ 0xda7a).fill(&mut v);
    v
}

// ---------------------------------------------------------------------------
// scenario

const IPS: [&str; 2] = ["10.0.0.1", "10.0.0.2"];
const GUIDS: [u64; 2] = [0x0200_00ff_fe00_000a, 0x0200_00ff_fe00_000b];
const PD: u32 = 1;
const PORT: u16 = 7174;
/// Virtual time after which a run that has not gone quiet is a hang.
const HORIZON: Duration = Duration::from_secs(4 * 3600);

const SRC_VA: u64 = 0x1_0000_0000;
const WTGT_VA: u64 = 0x2_0000_0000;
const ATOM_VA: u64 = 0x3_0000_0000;
const RECV_VA: u64 = 0x4_0000_0000;
const LAND_VA: u64 = 0x5_0000_0000;
const SRC_LEN: usize = 1 << 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Each side disconnects once all its own WRs completed (sequential or
    /// crossing DREQs, whichever the timing gives).
    Graceful,
    /// One side disconnects at a random time, maybe mid-transfer; the other
    /// disconnects when the DREQ arrives.
    OneSided(usize),
    /// Both disconnect at the same instant, maybe mid-transfer.
    Crossing,
}

#[derive(Debug, Clone)]
enum OpKind {
    Send { imm: Option<u32> },
    Write { imm: Option<u32> },
    Read,
    FetchAdd { add: u64 },
    CmpSwap { hit: bool, swap: u64 },
}

#[derive(Debug, Clone)]
struct Op {
    kind: OpKind,
    len: usize,
    /// Offset of the data in the sender's source region (SEND/WRITE), or of
    /// the READ source in the peer's.
    src_off: usize,
    /// Slot in the peer's write-target region (WRITE), atomic region
    /// (atomics), or the local landing region (READ, atomic result).
    slot: usize,
    /// Index among the peer's receives this op consumes (SEND, WRITE imm).
    recv_idx: Option<usize>,
    /// When to post, after the side's QP reached RTS.
    at: Duration,
}

#[derive(Debug, Clone)]
struct Faults {
    loss: f64,
    dup: f64,
    latency: Duration,
    jitter: Duration,
    partitions: Vec<(Instant, Instant)>,
    /// Side and time of a crash.
    crash: Option<(usize, Instant)>,
}

#[derive(Debug, Clone)]
struct Scenario {
    faults: Faults,
    ending: Ending,
    /// Relative to RTS: the latest each side waits before disconnecting.
    disconnect_after: [Duration; 2],
    /// Accept delay (B) and complete_connect delay (A).
    accept_delay: Duration,
    complete_delay: Duration,
    plt: u8,
    cm_response_timeout: u8,
    max_cm_retries: u8,
    ca_ack_delay: u8,
    retry_count: u8,
    rnr_retry: [u8; 2],
    rd_atomic: [(u8, u8); 2],
    path_mtu: u8,
    max_len: usize,
    ops: [Vec<Op>; 2],
    /// Receives each side posts before connecting; the rest later.
    early_recvs: [usize; 2],
    late_recv_delay: [Duration; 2],
}

fn scenario(seed: u64) -> Scenario {
    let mut r = rng(seed);
    let loss = r.below(31) as f64 / 100.0;
    let dup = r.below(11) as f64 / 100.0;
    let latency = match r.below(4) {
        0 => Duration::from_micros(r.range(1, 20)),
        1 | 2 => Duration::from_micros(r.range(20, 500)),
        _ => Duration::from_millis(r.range(1, 20)),
    };
    let jitter = match r.below(3) {
        0 => Duration::ZERO,
        1 => Duration::from_micros(r.range(1, 200)),
        _ => Duration::from_millis(r.range(1, 10)),
    };
    let mut partitions = Vec::new();
    for _ in 0..r.below(3) {
        let start = Instant::ZERO + r.ms(3000);
        let len = if r.chance(0.7) {
            r.ms(300)
        } else {
            r.ms(20_000)
        };
        partitions.push((start, start + len));
    }
    let crash = r
        .chance(0.15)
        .then(|| (r.below(2) as usize, Instant::ZERO + r.ms(4000)));
    let ending = match r.below(3) {
        0 => Ending::Graceful,
        1 => Ending::OneSided(r.below(2) as usize),
        _ => Ending::Crossing,
    };
    let fast = r.chance(0.8);
    let (plt, cm_response_timeout) = if fast {
        (r.range(8, 13) as u8, r.range(10, 14) as u8)
    } else {
        (18, 20)
    };
    let max_cm_retries = if fast { r.range(1, 15) as u8 } else { 15 };
    let ca_ack_delay = r.range(5, 15) as u8;
    let retry_count = if r.chance(0.7) { 7 } else { r.below(7) as u8 };
    let rnr_retry = [0, 1].map(|_| if r.chance(0.8) { 7 } else { r.below(7) as u8 });
    let rd_atomic = [0, 1].map(|_| (r.range(1, 8) as u8, r.range(1, 8) as u8));
    let path_mtu = r.range(1, 5) as u8;
    let max_len = [16usize, 300, 1500, 5000, 16384][r.below(5) as usize];
    let n_ops = [r.below(41) as usize, r.below(41) as usize];
    let mut ops: [Vec<Op>; 2] = [Vec::new(), Vec::new()];
    for (side, n) in n_ops.into_iter().enumerate() {
        let span = r.range(1, 1000);
        let mut recvs = 0;
        let mut ats: Vec<Duration> = (0..n).map(|_| r.ms(span)).collect();
        ats.sort();
        for (i, at) in ats.into_iter().enumerate() {
            let kind = match r.below(10) {
                0..=2 => OpKind::Send {
                    imm: r.chance(0.3).then(|| r.next_u64() as u32),
                },
                3..=5 => OpKind::Write {
                    imm: r.chance(0.3).then(|| r.next_u64() as u32),
                },
                6 | 7 => OpKind::Read,
                8 => OpKind::FetchAdd { add: r.next_u64() },
                _ => OpKind::CmpSwap {
                    hit: r.chance(0.7),
                    swap: r.next_u64(),
                },
            };
            let len = match kind {
                OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. } => 8,
                _ if r.chance(0.05) => 0,
                _ => r.range(1, max_len as u64) as usize,
            };
            let consumes = matches!(kind, OpKind::Send { .. } | OpKind::Write { imm: Some(_) });
            let recv_idx = consumes.then(|| {
                recvs += 1;
                recvs - 1
            });
            let _ = side;
            ops[side].push(Op {
                src_off: r.below((SRC_LEN - max_len) as u64) as usize,
                kind,
                len,
                slot: i,
                recv_idx,
                at,
            });
        }
    }
    let consumed = |ops: &Vec<Op>| ops.iter().filter(|o| o.recv_idx.is_some()).count();
    let peer_sends = [consumed(&ops[1]), consumed(&ops[0])];
    let early_recvs = peer_sends.map(|n| {
        if r.chance(0.7) {
            n
        } else {
            r.below(n as u64 + 1) as usize
        }
    });
    let late_recv_delay = [r.ms(2000), r.ms(2000)];
    let disconnect_after = [
        Duration::from_millis(r.range(10, 8000)),
        Duration::from_millis(r.range(10, 8000)),
    ];
    Scenario {
        faults: Faults {
            loss,
            dup,
            latency,
            jitter,
            partitions,
            crash,
        },
        ending,
        disconnect_after,
        accept_delay: if r.chance(0.1) {
            r.ms(15_000)
        } else {
            r.ms(50)
        },
        complete_delay: if r.chance(0.1) { r.ms(5_000) } else { r.ms(20) },
        plt,
        cm_response_timeout,
        max_cm_retries,
        ca_ack_delay,
        retry_count,
        rnr_retry,
        rd_atomic,
        path_mtu,
        max_len,
        ops,
        early_recvs,
        late_recv_delay,
    }
}

// ---------------------------------------------------------------------------
// one adapter

struct Regions {
    src: MrKeys,
    wtgt: MrKeys,
    atom: MrKeys,
    recv: MrKeys,
    land: MrKeys,
}

/// An application request made on the machine, by what it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Req {
    /// GetConnectionRequest into endpoint `.0`.
    GetRequest(u32),
    Connect,
    CompleteConnect,
    Accept,
    NotifyDisconnect,
    Disconnect,
}

struct Node {
    idx: usize,
    cm: CmAgent,
    /// The endpoint request machine; this harness is its core.
    eps: Endpoints,
    qp: RcQp,
    /// The QP's identity, as requests name it.
    qp_id: QpIdent,
    rq: RecvQueue,
    mem: VecMemory,
    regions: Regions,
    initial: HashMap<u32, Vec<u8>>,
    /// B's listening endpoint.
    listener: Option<u32>,
    /// The connection's endpoint.
    ep: Option<u32>,
    /// B: the endpoint waiting for a further connection request (refused).
    spare: Option<u32>,
    /// Requests made and not yet completed.
    requests: HashMap<RequestId, Req>,
    /// QPNs the machine keeps from reuse through time-wait.
    reserved: BTreeSet<u32>,
    /// How the CM phase of our Disconnect ended, as the CM reported it
    /// (a DREP we sent is reported after the Disconnect completed; a
    /// connection the peer's REJ ended has no CM phase).
    disconnect_how: Option<DisconnectHow>,
    /// Our Disconnect ended with the DREQ's timeout.
    disconnect_timed_out: bool,
    crashed: bool,
    rts_at: Option<Instant>,
    /// Posted sends: (op index, wr_id, posted at).
    sends: Vec<(usize, u64, Instant)>,
    /// Posted receives: (recv index, wr_id).
    recvs: Vec<(usize, u64)>,
    send_wcs: Vec<(Instant, WorkCompletion)>,
    recv_wcs: Vec<WorkCompletion>,
    /// The application's connection set-up is under way (Connect until
    /// CompleteConnect, Accept until it completes).
    pending_connect: bool,
    pending_accept: bool,
    disconnect_called: Option<Instant>,
    disconnect_done: Option<Instant>,
    /// The app tore the connection down (QP to ERR, endpoint destroyed).
    closed: bool,
    next_op: usize,
    late_recvs_posted: bool,
}

fn slot_len(max_len: usize) -> usize {
    (max_len + 64).next_multiple_of(8)
}

impl Node {
    fn new(idx: usize, seed: u64, sc: &Scenario) -> Node {
        let mut cfg = CmConfig::new(IPS[idx].parse().unwrap(), GUIDS[idx], seed ^ idx as u64);
        cfg.packet_life_time = sc.plt;
        cfg.cm_response_timeout = sc.cm_response_timeout;
        cfg.max_cm_retries = sc.max_cm_retries;
        cfg.ca_ack_delay = sc.ca_ack_delay;
        let qpn = [0x11, 0x22][idx] + (seed as u32 & 0xffff) * 0x100;
        let mut qp = RcQp::new(
            qpn,
            PD,
            QpCaps {
                max_send_wr: 64,
                max_send_sge: 1,
                max_inline_data: 64,
                sq_sig_all: false,
            },
        );
        // The QP is in INIT before the CM starts, as rdma_cm leaves it.
        let (init, mask) = RcConnection::new(0).init();
        qp.modify(&init, mask).unwrap();
        let peer_ops = &sc.ops[1 - idx];
        let n_recv = peer_ops.iter().filter(|o| o.recv_idx.is_some()).count();
        let slot = slot_len(sc.max_len);
        let mut mem = VecMemory::new();
        let mut initial = HashMap::new();
        let mut reg = |mem: &mut VecMemory, va: u64, len: usize, acc: Access, tag: u64| {
            let data = pattern(seed ^ tag ^ ((idx as u64) << 40), len);
            let k = mem.register_bytes(PD, va, data.clone(), acc);
            initial.insert(k.lkey, data);
            k
        };
        let src = reg(&mut mem, SRC_VA, SRC_LEN, Access::REMOTE_READ, 1);
        let wtgt = reg(
            &mut mem,
            WTGT_VA,
            peer_ops.len() * slot + 64,
            Access::REMOTE_WRITE | Access::LOCAL_WRITE,
            2,
        );
        let atom = reg(
            &mut mem,
            ATOM_VA,
            peer_ops.len() * 16 + 16,
            Access::REMOTE_ATOMIC | Access::LOCAL_WRITE,
            3,
        );
        let recv = reg(
            &mut mem,
            RECV_VA,
            n_recv * slot + 64,
            Access::LOCAL_WRITE,
            4,
        );
        let land = reg(
            &mut mem,
            LAND_VA,
            sc.ops[idx].len() * slot + 64,
            Access::LOCAL_WRITE,
            5,
        );
        let mut n = Node {
            idx,
            cm: CmAgent::new(cfg),
            eps: Endpoints::new(KeyGen::seeded(seed ^ 0x9e37 ^ idx as u64)),
            qp,
            qp_id: QpIdent { qpn, generation: 1 },
            rq: RecvQueue::new(n_recv.max(1) as u32, 1),
            mem,
            regions: Regions {
                src,
                wtgt,
                atom,
                recv,
                land,
            },
            initial,
            listener: None,
            ep: None,
            spare: None,
            requests: HashMap::new(),
            reserved: BTreeSet::new(),
            disconnect_how: None,
            disconnect_timed_out: false,
            crashed: false,
            rts_at: None,
            sends: Vec::new(),
            recvs: Vec::new(),
            send_wcs: Vec::new(),
            recv_wcs: Vec::new(),
            pending_connect: false,
            pending_accept: false,
            disconnect_called: None,
            disconnect_done: None,
            closed: false,
            next_op: 0,
            late_recvs_posted: false,
        };
        for i in 0..sc.early_recvs[idx] {
            n.post_recv(i, sc);
        }
        n
    }

    fn post_recv(&mut self, i: usize, sc: &Scenario) {
        let slot = slot_len(sc.max_len);
        let wr_id = ((self.idx as u64 + 1) << 48) | (1 << 32) | i as u64;
        let sge = self.regions.recv.sge((i * slot) as u32, sc.max_len as u32);
        if self
            .qp
            .post_recv(&mut self.rq, RecvWr::new(wr_id, vec![sge]))
            .is_ok()
        {
            self.recvs.push((i, wr_id));
        }
    }

    /// INIT → RTR → RTS with what the CM negotiated.
    fn apply_setup(&mut self, s: &QpSetup) -> Result<(), ModifyError> {
        let c = RcConnection::from(s);
        for (attr, mask) in [c.rtr(), c.rts()] {
            self.qp.modify(&attr, mask)?;
        }
        Ok(())
    }

    /// To ERR, flushing the receive queue (the QP flushes its send queue).
    fn move_to_error(&mut self) {
        if self.qp.state() != QpState::Reset {
            let err = QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            };
            self.qp.modify(&err, AttrMask::STATE).expect("QP to ERR");
        }
        self.qp.flush_recv(&mut self.rq);
    }

    /// The core's answer to the machine's QP operation `op` on QP `id`.
    fn qp_op(&mut self, id: QpIdent, op: &QpOp) -> Result<(), QpError> {
        if id != self.qp_id {
            return Err(QpError::Gone);
        }
        match op {
            QpOp::CheckInit | QpOp::CheckReady if self.qp.state() == QpState::Init => Ok(()),
            QpOp::CheckInit | QpOp::CheckReady => Err(QpError::NotInit),
            QpOp::ToRts(s) => self.apply_setup(s).map_err(QpError::Refused),
            QpOp::ToError => {
                self.move_to_error();
                Ok(())
            }
        }
    }

    fn wr(&self, op: &Op, i: usize, sc: &Scenario, peer: &Regions, peer_atom_init: u64) -> SendWr {
        let slot = slot_len(sc.max_len);
        let wr_id = ((self.idx as u64 + 1) << 48) | i as u64;
        let src = self.regions.src.sge(op.src_off as u32, op.len as u32);
        let land = self
            .regions
            .land
            .sge((op.slot * slot) as u32, op.len as u32);
        let wtgt = RemoteAddr {
            va: peer.wtgt.addr + (op.slot * slot) as u64,
            rkey: peer.wtgt.rkey,
        };
        let atom = RemoteAddr {
            va: peer.atom.addr + (op.slot * 16) as u64 + 8,
            rkey: peer.atom.rkey,
        };
        let (sop, sgl) = match op.kind {
            OpKind::Send { imm: None } => (SendOp::Send, vec![src]),
            OpKind::Send { imm: Some(x) } => (SendOp::SendImm(x), vec![src]),
            OpKind::Write { imm: None } => (SendOp::Write(wtgt), vec![src]),
            OpKind::Write { imm: Some(x) } => (SendOp::WriteImm(wtgt, x), vec![src]),
            OpKind::Read => (
                SendOp::Read(RemoteAddr {
                    va: peer.src.addr + op.src_off as u64,
                    rkey: peer.src.rkey,
                }),
                vec![land],
            ),
            OpKind::FetchAdd { add } => (SendOp::FetchAdd { remote: atom, add }, vec![land]),
            OpKind::CmpSwap { hit, swap } => {
                let compare = if hit {
                    peer_atom_init
                } else {
                    peer_atom_init ^ 0x8000
                };
                (
                    SendOp::CompareSwap {
                        remote: atom,
                        compare,
                        swap,
                    },
                    vec![land],
                )
            }
        };
        let mut wr = SendWr::new(wr_id, sop, if op.len == 0 { Vec::new() } else { sgl });
        wr.fence = matches!(op.kind, OpKind::Read) && op.len % 7 == 3;
        wr
    }
}

// ---------------------------------------------------------------------------
// the world

enum Msg {
    Mad(IpAddr, Box<[u8; MAD_LEN]>),
    Rc(Vec<u8>),
}

#[derive(Debug, Clone, Copy)]
enum Act {
    Connect,
    Accept,
    Complete,
    Post,
    LateRecvs,
    Disconnect,
    Crash,
}

#[derive(Debug, Default, Clone)]
struct Stats {
    seeds: u64,
    packets: u64,
    mads: u64,
    lost: u64,
    duplicated: u64,
    partitioned: u64,
    to_crashed: u64,
    crashes: u64,
    connected: u64,
    connect_failed: u64,
    second_requests: u64,
    wrs: u64,
    recvs: u64,
    bytes_ok: u64,
    status: BTreeMap<String, u64>,
    endings: BTreeMap<String, u64>,
    max_disconnect_ms: u64,
    max_crash_drain_ms: u64,
    virtual_secs: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.seeds += o.seeds;
        self.packets += o.packets;
        self.mads += o.mads;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.partitioned += o.partitioned;
        self.to_crashed += o.to_crashed;
        self.crashes += o.crashes;
        self.connected += o.connected;
        self.connect_failed += o.connect_failed;
        self.second_requests += o.second_requests;
        self.wrs += o.wrs;
        self.recvs += o.recvs;
        self.bytes_ok += o.bytes_ok;
        for (k, v) in &o.status {
            *self.status.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.endings {
            *self.endings.entry(k.clone()).or_default() += v;
        }
        self.max_disconnect_ms = self.max_disconnect_ms.max(o.max_disconnect_ms);
        self.max_crash_drain_ms = self.max_crash_drain_ms.max(o.max_crash_drain_ms);
        self.virtual_secs += o.virtual_secs;
    }
}

struct World {
    sc: Scenario,
    now: Instant,
    rng: Rng,
    n: [Node; 2],
    net: BTreeMap<(Instant, u64), (usize, Msg)>,
    acts: BTreeMap<(Instant, u64), (usize, Act)>,
    seq: u64,
    buf: Vec<u8>,
    log: Option<Vec<String>>,
    stats: Stats,
}

macro_rules! log {
    ($w:expr, $($t:tt)*) => {
        if let Some(l) = $w.log.as_mut() {
            let mut s = format!("{:>12.6} ", $w.now.as_nanos() as f64 / 1e9);
            let _ = write!(s, $($t)*);
            l.push(s);
        }
    };
}

impl World {
    fn new(seed: u64, verbose: bool) -> World {
        let sc = scenario(seed);
        let n = [Node::new(0, seed, &sc), Node::new(1, seed, &sc)];
        let mut w = World {
            rng: rng(seed ^ 0x7e7),
            now: Instant::ZERO,
            n,
            net: BTreeMap::new(),
            acts: BTreeMap::new(),
            seq: 0,
            buf: vec![0; 4096 + 64],
            log: verbose.then(Vec::new),
            stats: Stats {
                seeds: 1,
                ..Stats::default()
            },
            sc,
        };
        log!(w, "scenario {:?}", w.sc);
        w
    }

    fn schedule(&mut self, after: Duration, side: usize, a: Act) {
        self.seq += 1;
        self.acts.insert((self.now + after, self.seq), (side, a));
    }

    fn partitioned(&self) -> bool {
        self.sc
            .faults
            .partitions
            .iter()
            .any(|&(s, e)| self.now >= s && self.now < e)
    }

    fn transmit(&mut self, from: usize, msg: Msg) {
        if self.partitioned() {
            self.stats.partitioned += 1;
            return;
        }
        if self.rng.chance(self.sc.faults.loss) {
            self.stats.lost += 1;
            return;
        }
        let copies = if self.rng.chance(self.sc.faults.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        let mut msg = Some(msg);
        for c in 0..copies {
            let jitter = self.sc.faults.jitter.as_nanos() as u64;
            let at = self.now
                + self.sc.faults.latency
                + Duration::from_nanos(self.rng.below(jitter + 1));
            let m = if c + 1 == copies {
                msg.take().unwrap()
            } else {
                match msg.as_ref().unwrap() {
                    Msg::Mad(a, m) => Msg::Mad(*a, m.clone()),
                    Msg::Rc(b) => Msg::Rc(b.clone()),
                }
            };
            self.seq += 1;
            self.net.insert((at, self.seq), (1 - from, m));
        }
    }

    /// Drains every output of both live sides until nothing moves.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            for i in 0..2 {
                if self.n[i].crashed {
                    continue;
                }
                while let Some(t) = self.n[i].cm.poll_transmit() {
                    moved = true;
                    self.stats.mads += 1;
                    let src = self.n[i].cm.config().local_addr;
                    self.transmit(i, Msg::Mad(src, Box::new(t.mad)));
                }
                let now = self.now;
                loop {
                    let node = &mut self.n[i];
                    let Some(len) = node.qp.poll_transmit(now, &mut node.mem, &mut self.buf) else {
                        break;
                    };
                    moved = true;
                    self.stats.packets += 1;
                    let bytes = self.buf[..len].to_vec();
                    self.transmit(i, Msg::Rc(bytes));
                }
                if self.n[i].qp.state() == QpState::Err {
                    let node = &mut self.n[i];
                    node.qp.flush_recv(&mut node.rq);
                }
                while let Some(wc) = self.n[i].qp.poll_completion() {
                    moved = true;
                    log!(
                        self,
                        "{} wc {:#x} {:?} {:?} len {}",
                        "AB".as_bytes()[i] as char,
                        wc.wr_id,
                        wc.opcode,
                        wc.status,
                        wc.byte_len
                    );
                    let node = &mut self.n[i];
                    if wc.opcode == WcOpcode::Recv || wc.opcode == WcOpcode::RecvRdmaWithImm {
                        node.recv_wcs.push(wc);
                    } else {
                        node.send_wcs.push((now, wc));
                    }
                }
                while let Some(e) = self.n[i].cm.poll_event() {
                    moved = true;
                    self.on_cm_event(i, e);
                }
                if self.drive_eps(i) {
                    moved = true;
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// A CM event of side `i`: noted where the application needs to know
    /// (the core sees the CM's events too), then handed to the machine.
    fn on_cm_event(&mut self, i: usize, e: CmEvent) {
        log!(self, "{} event {:?}", "AB".as_bytes()[i] as char, e);
        match e {
            CmEvent::DisconnectDone { how, .. } => self.n[i].disconnect_how = Some(how),
            // The peer's connection went stale: it disconnects.
            CmEvent::StaleConnection { .. } => {
                let d = self.rng.ms(200);
                self.schedule(d, i, Act::Disconnect);
            }
            CmEvent::DeviceRemoved { .. } => panic!("no device removal in this simulation"),
            _ => {}
        }
        let now = self.now;
        let n = &mut self.n[i];
        n.eps.handle_cm_event(now, &mut n.cm, e);
        self.drive_eps(i);
    }

    /// Side `i`'s core: applies the machine's actions until it has none.
    /// Returns whether there were any.
    fn drive_eps(&mut self, i: usize) -> bool {
        let mut any = false;
        while let Some(a) = self.n[i].eps.poll_action() {
            any = true;
            match a {
                Action::Qp {
                    request, qp, op, ..
                } => {
                    let r = self.n[i].qp_op(qp, &op);
                    log!(self, "{} qp {op:?}: {r:?}", "AB".as_bytes()[i] as char);
                    if matches!(op, QpOp::ToRts(_)) && r.is_ok() {
                        self.on_rts(i);
                    }
                    let now = self.now;
                    let n = &mut self.n[i];
                    n.eps.handle_qp_result(now, &mut n.cm, request, r);
                }
                Action::Complete { request, outcome } => self.on_complete(i, request, outcome),
                Action::ReserveQpn(q) => {
                    self.n[i].reserved.insert(q);
                }
                Action::ReleaseQpn(q) => {
                    self.n[i].reserved.remove(&q);
                }
            }
        }
        any
    }

    /// Records request `id` of side `i`, made as `what`.
    fn made(&mut self, i: usize, id: RequestId, what: Req) {
        log!(self, "{} {what:?} {id:?}", "AB".as_bytes()[i] as char);
        let again = self.n[i].requests.insert(id, what);
        assert!(again.is_none(), "request {id:?} made twice");
    }

    /// A request of side `i` completed: the application acts on it.
    fn on_complete(&mut self, i: usize, id: RequestId, outcome: Outcome) {
        let name = "AB".as_bytes()[i] as char;
        log!(self, "{name} done {id:?}: {outcome:?}");
        let what = self.n[i]
            .requests
            .remove(&id)
            .unwrap_or_else(|| panic!("{name}: {id:?} completed twice, or was never made"));
        match (what, outcome) {
            (Req::GetRequest(ep), Outcome::Request(r)) => match r {
                Ok(_) if self.n[i].ep.is_none() => {
                    let n = &mut self.n[i];
                    n.ep = Some(ep);
                    n.spare = None;
                    n.pending_accept = true;
                    let d = self.sc.accept_delay;
                    self.schedule(d, i, Act::Accept);
                    self.wait_request(i);
                }
                Ok(_) => {
                    // A REQ retransmission that outlived our accept's
                    // timeout looks like a new request (as in Linux): the
                    // application has one QP and refuses it.
                    let now = self.now;
                    let n = &mut self.n[i];
                    n.eps.reject(now, &mut n.cm, ep, &[]).unwrap();
                    n.eps.destroy(now, &mut n.cm, ep).unwrap();
                    n.spare = None;
                    self.stats.second_requests += 1;
                    self.wait_request(i);
                }
                Err(EpError::Canceled) => {}
                Err(e) => panic!("{name}: GetConnectionRequest failed: {e}"),
            },
            (Req::Connect, Outcome::Connect(r)) => match r {
                Ok(_) => {
                    let d = self.sc.complete_delay;
                    self.schedule(d, i, Act::Complete);
                }
                Err(_) => {
                    self.n[i].pending_connect = false;
                    self.stats.connect_failed += 1;
                    self.teardown(i);
                }
            },
            (Req::CompleteConnect | Req::Accept, Outcome::Done(r)) => {
                let n = &mut self.n[i];
                n.pending_connect = false;
                n.pending_accept = false;
                match r {
                    Ok(()) => {
                        self.stats.connected += 1;
                        self.start_workload(i);
                    }
                    Err(_) => {
                        if what == Req::Accept {
                            self.stats.connect_failed += 1;
                        }
                        self.teardown(i);
                    }
                }
            }
            (Req::NotifyDisconnect, Outcome::Done(r)) => match r {
                // The peer's DREQ: we answer, a little later.
                Ok(()) => {
                    let d = self.rng.ms(200);
                    self.schedule(d, i, Act::Disconnect);
                }
                // A REJ ended the established connection: the Disconnect
                // still flushes the QP.
                Err(EpError::Aborted) => self.schedule(Duration::ZERO, i, Act::Disconnect),
                // Our own Disconnect ended the connection; releasing the
                // endpoint cancels it.
                Err(EpError::Canceled) => {}
                Err(e) => panic!("{name}: NotifyDisconnect failed: {e}"),
            },
            (Req::Disconnect, Outcome::Done(r)) => {
                assert!(
                    matches!(r, Ok(()) | Err(EpError::Timeout)),
                    "{name}: Disconnect ended {r:?}"
                );
                let now = self.now;
                let n = &mut self.n[i];
                // Its QP phase ran before it completed.
                assert_eq!(
                    n.qp.state(),
                    QpState::Err,
                    "{name}: Disconnect done, QP not in ERR"
                );
                assert!(
                    n.disconnect_done.is_none(),
                    "{name}: second Disconnect done"
                );
                let called = n.disconnect_called.expect("Disconnect done without a call");
                n.disconnect_done = Some(now);
                n.disconnect_timed_out = r.is_err();
                let took = now.saturating_duration_since(called);
                let bound = self.disconnect_bound();
                assert!(
                    took <= bound,
                    "disconnect took {took:?}, bound {bound:?} ({r:?})"
                );
                self.stats.max_disconnect_ms =
                    self.stats.max_disconnect_ms.max(took.as_millis() as u64);
                self.teardown(i);
            }
            (what, outcome) => panic!("{name}: {what:?} ended with {outcome:?}"),
        }
    }

    /// B: a fresh endpoint waits on the listener for the next request.
    fn wait_request(&mut self, i: usize) {
        let n = &mut self.n[i];
        let (Some(l), None) = (n.listener, n.spare) else {
            return;
        };
        let ep = n.eps.create();
        n.spare = Some(ep);
        let id = n.eps.get_request(&n.cm, l, ep).unwrap();
        self.made(i, id, Req::GetRequest(ep));
        self.drive_eps(i);
    }

    /// Upper bound of a Disconnect: the DREQ interval times the sends.
    fn disconnect_bound(&self) -> Duration {
        let cfg = self.n[0].cm.config();
        let passive = ndverbs_proto::cm::cm_convert_to_ms(cfg.cm_response_timeout);
        let interval = cfg.req_interval_ms().max(passive);
        Duration::from_millis(interval * (u64::from(cfg.max_cm_retries) + 1) + 1)
    }

    /// QP `i` reached RTS (the QP phase of its CompleteConnect or Accept):
    /// the receives it posts late go in after a while.
    fn on_rts(&mut self, i: usize) {
        self.n[i].rts_at = Some(self.now);
        let late = self.sc.late_recv_delay[i];
        self.schedule(late, i, Act::LateRecvs);
    }

    /// The connection is up on side `i` (CompleteConnect or Accept
    /// completed): post the workload, wait for the peer's DREQ, and plan
    /// the Disconnect.
    fn start_workload(&mut self, i: usize) {
        if self.n[i].rts_at.is_none() {
            self.n[i].rts_at = Some(self.now);
        }
        let ops = &self.sc.ops[i];
        let ats: Vec<Duration> = ops.iter().map(|o| o.at).collect();
        for at in ats {
            self.schedule(at, i, Act::Post);
        }
        let n = &mut self.n[i];
        let ep = n.ep.expect("connected without an endpoint");
        let id = n.eps.notify_disconnect(ep).expect("NotifyDisconnect");
        self.made(i, id, Req::NotifyDisconnect);
        self.drive_eps(i);
        let d = match self.sc.ending {
            Ending::Crossing => self.sc.disconnect_after[0],
            Ending::OneSided(s) if s == i => self.sc.disconnect_after[i],
            // Graceful, or the passive side of a one-sided close: a late
            // deadline so that every run ends.
            _ => self.sc.disconnect_after[i] * 4 + Duration::from_secs(30),
        };
        self.schedule(d, i, Act::Disconnect);
    }

    /// The application gives up on the connection: it releases its QP (to
    /// ERR, flushing) and its endpoint (the CM says goodbye the Linux way;
    /// requests still pending end cancelled).
    fn teardown(&mut self, i: usize) {
        let now = self.now;
        let n = &mut self.n[i];
        if n.closed {
            return;
        }
        n.closed = true;
        n.move_to_error();
        if let Some(ep) = n.ep {
            n.eps.destroy(now, &mut n.cm, ep).unwrap();
        }
        self.drive_eps(i);
    }

    fn act(&mut self, i: usize, a: Act) {
        if self.n[i].crashed {
            return;
        }
        log!(self, "{} do {:?}", "AB".as_bytes()[i] as char, a);
        let now = self.now;
        match a {
            Act::Connect => {
                let sc = &self.sc;
                let (responder_resources, initiator_depth) = sc.rd_atomic[0];
                let args = ConnectArgs {
                    remote: IPS[1].parse().unwrap(),
                    remote_port: PORT,
                    local_port: 40000,
                    responder_resources,
                    initiator_depth,
                    retry_count: sc.retry_count,
                    rnr_retry_count: sc.rnr_retry[1],
                    path_mtu: PathMtu::from_enum(sc.path_mtu).expect("a path MTU"),
                    private_data: Vec::new(),
                };
                let n = &mut self.n[0];
                let ep = n.eps.create();
                n.ep = Some(ep);
                n.pending_connect = true;
                let qp = n.qp_id;
                let id = n.eps.connect(now, &mut n.cm, ep, qp, args, true).unwrap();
                self.made(0, id, Req::Connect);
            }
            Act::Accept => {
                let sc = &self.sc;
                let (responder_resources, initiator_depth) = sc.rd_atomic[1];
                let args = AcceptArgs {
                    responder_resources,
                    initiator_depth,
                    rnr_retry_count: sc.rnr_retry[0],
                    private_data: Vec::new(),
                };
                let n = &mut self.n[i];
                let (ep, qp) = (n.ep.expect("a request to accept"), n.qp_id);
                let id = n.eps.accept(now, &mut n.cm, ep, qp, args).unwrap();
                self.made(i, id, Req::Accept);
            }
            Act::Complete => {
                let n = &mut self.n[i];
                let (ep, qp) = (n.ep.expect("a Connect to complete"), n.qp_id);
                let id = n.eps.complete_connect(now, &mut n.cm, ep, qp).unwrap();
                self.made(i, id, Req::CompleteConnect);
            }
            Act::Post => {
                let k = self.n[i].next_op;
                self.n[i].next_op += 1;
                let op = self.sc.ops[i][k].clone();
                let peer = &self.n[1 - i];
                let a = op.slot * 16 + 8;
                let init = u64::from_ne_bytes(
                    peer.initial[&peer.regions.atom.lkey][a..a + 8]
                        .try_into()
                        .unwrap(),
                );
                let wr = self.n[i].wr(&op, k, &self.sc, &peer.regions, init);
                let wr_id = wr.wr_id;
                match self.n[i].qp.post_send(wr) {
                    Ok(()) => {
                        self.n[i].sends.push((k, wr_id, now));
                        log!(
                            self,
                            "posted {wr_id:#x}: qp {:?} timer {:?}",
                            self.n[i].qp.state(),
                            self.n[i].qp.poll_timeout()
                        );
                    }
                    Err(e) => panic!("post_send refused: {e:?}"),
                }
            }
            Act::LateRecvs => {
                if !self.n[i].late_recvs_posted {
                    self.n[i].late_recvs_posted = true;
                    let total = self.sc.ops[1 - i]
                        .iter()
                        .filter(|o| o.recv_idx.is_some())
                        .count();
                    for r in self.sc.early_recvs[i]..total {
                        let sc = self.sc.clone();
                        self.n[i].post_recv(r, &sc);
                    }
                }
            }
            Act::Disconnect => {
                let n = &mut self.n[i];
                if n.disconnect_called.is_some() || n.closed {
                    return;
                }
                let Some(ep) = n.ep else { return };
                if n.pending_connect || n.pending_accept {
                    return;
                }
                let qp = n.qp_id;
                match n.eps.disconnect(now, &mut n.cm, ep, qp) {
                    Ok(id) => {
                        n.disconnect_called = Some(now);
                        self.made(i, id, Req::Disconnect);
                    }
                    Err(Refused::NotConnected) => {
                        // Nothing to disconnect: the connection ended
                        // without us. Release everything at once.
                        log!(self, "disconnect refused");
                        *self.stats.endings.entry("refused".to_string()).or_default() += 1;
                        self.teardown(i);
                    }
                    Err(e) => panic!("Disconnect refused: {e:?}"),
                }
            }
            Act::Crash => {
                self.n[i].crashed = true;
                self.stats.crashes += 1;
            }
        }
        self.drive_eps(i);
    }

    /// Graceful ending: a side disconnects once every WR it will post has
    /// been posted and completed.
    fn graceful_check(&mut self) {
        if self.sc.ending != Ending::Graceful {
            return;
        }
        for i in 0..2 {
            let n = &self.n[i];
            if n.crashed || n.rts_at.is_none() || n.disconnect_called.is_some() || n.closed {
                continue;
            }
            if n.pending_accept || n.pending_connect {
                continue;
            }
            if n.next_op == self.sc.ops[i].len() && n.send_wcs.len() == n.sends.len() {
                let d = self.rng.ms(50);
                self.schedule(d, i, Act::Disconnect);
            }
        }
    }

    fn next_time(&self) -> Option<Instant> {
        let mut t = [
            self.net.keys().next().map(|k| k.0),
            self.acts.keys().next().map(|k| k.0),
        ]
        .into_iter()
        .flatten()
        .min();
        for n in &self.n {
            if n.crashed {
                continue;
            }
            for d in [n.cm.poll_timeout(), n.qp.poll_timeout()]
                .into_iter()
                .flatten()
            {
                t = Some(t.map_or(d, |x: Instant| x.min(d)));
            }
        }
        t
    }

    fn run(&mut self) {
        self.schedule(Duration::ZERO, 0, Act::Connect);
        let n = &mut self.n[1];
        let listener = n.eps.create();
        n.eps.listen(&mut n.cm, listener, PORT, 4).unwrap();
        n.listener = Some(listener);
        self.wait_request(1);
        if let Some((side, at)) = self.sc.faults.crash {
            self.seq += 1;
            self.acts.insert((at, self.seq), (side, Act::Crash));
        }
        let horizon = Instant::ZERO + HORIZON;
        let mut last_graceful = 0usize;
        loop {
            self.pump();
            let done: usize = self.n.iter().map(|n| n.send_wcs.len()).sum();
            if done != last_graceful {
                last_graceful = done;
                self.graceful_check();
            }
            let Some(t) = self.next_time() else { break };
            assert!(t <= horizon, "still busy after {HORIZON:?} of virtual time");
            self.now = self.now.max(t);
            let now = self.now;
            // Network deliveries due.
            while let Some((&k, _)) = self.net.iter().next() {
                if k.0 > now {
                    break;
                }
                let (to, msg) = self.net.remove(&k).unwrap();
                if self.n[to].crashed {
                    self.stats.to_crashed += 1;
                    continue;
                }
                let n = &mut self.n[to];
                match msg {
                    Msg::Mad(src, mad) => n.cm.handle_mad(now, src, &mad[..]),
                    Msg::Rc(bytes) => {
                        let pkt = Packet::parse(&bytes).expect("our packets parse");
                        n.qp.handle_packet(now, &pkt, &mut n.mem, &mut n.rq);
                    }
                }
                self.pump();
            }
            // Application actions due.
            while let Some((&k, _)) = self.acts.iter().next() {
                if k.0 > now {
                    break;
                }
                let (side, a) = self.acts.remove(&k).unwrap();
                self.act(side, a);
                self.pump();
            }
            // Timers.
            for i in 0..2 {
                let n = &mut self.n[i];
                if n.crashed {
                    continue;
                }
                if n.cm.poll_timeout().is_some_and(|d| d <= now) {
                    n.cm.handle_timeout(now);
                }
                if n.qp.poll_timeout().is_some_and(|d| d <= now) {
                    n.qp.handle_timeout(now);
                }
            }
        }
        // The end of the application: a side that never got a connection
        // releases its QP (flushing the receives it posted), B its listener
        // and the endpoint still waiting on it.
        for i in 0..2 {
            if !self.n[i].crashed && self.n[i].ep.is_none() {
                self.teardown(i);
                self.pump();
            }
        }
        if !self.n[1].crashed {
            let now = self.now;
            let n = &mut self.n[1];
            for ep in [n.listener, n.spare].into_iter().flatten() {
                n.eps.destroy(now, &mut n.cm, ep).unwrap();
            }
            n.spare = None;
            self.pump();
        }
        self.stats.virtual_secs = self.now.as_nanos() / 1_000_000_000;
    }

    // -----------------------------------------------------------------------
    // invariants

    fn check(&mut self) {
        let crash = self.sc.faults.crash;
        for i in 0..2 {
            self.check_completions(i);
            self.check_data(i);
            let n = &self.n[i];
            if n.crashed {
                continue;
            }
            let name = "AB".as_bytes()[i] as char;
            // Every request ended.
            assert!(
                n.requests.is_empty(),
                "{name}: requests never ended: {:?}",
                n.requests
            );
            assert!(!n.pending_connect, "{name}: connect never ended");
            assert!(!n.pending_accept, "{name}: accept never ended");
            if n.disconnect_called.is_some() {
                assert!(
                    n.disconnect_done.is_some(),
                    "{name}: disconnect never ended"
                );
                // Timeout exactly when the CM's DREQ timed out.
                let how = n.disconnect_how.unwrap_or(DisconnectHow::RejReceived);
                assert_eq!(
                    n.disconnect_timed_out,
                    how == DisconnectHow::DreqTimedOut,
                    "{name}: Disconnect outcome against the CM's {how:?}"
                );
                *self.stats.endings.entry(format!("{how:?}")).or_default() += 1;
            }
            // Every WR completed.
            assert_eq!(
                n.send_wcs.len(),
                n.sends.len(),
                "{name}: posted sends without completion"
            );
            assert_eq!(
                n.recv_wcs.len(),
                n.recvs.len(),
                "{name}: posted receives without completion"
            );
            // No leaks.
            assert!(n.closed, "{name}: connection never torn down");
            assert_eq!(n.cm.endpoint_count(), 0, "{name}: CM endpoints leaked");
            assert_eq!(n.eps.endpoint_count(), 0, "{name}: endpoints leaked");
            assert!(n.reserved.is_empty(), "{name}: QPNs still reserved");
            assert_eq!(n.cm.poll_timeout(), None, "{name}: CM timer left");
            assert_eq!(n.qp.send_queue_len(), 0, "{name}: WRs left in the QP");
            assert_eq!(n.qp.poll_timeout(), None, "{name}: QP timer left");
            assert!(n.rq.is_empty(), "{name}: receives left");
            // After the peer crashed: every WR completes within the retry
            // bound (RNR wait + (retry_cnt + 1) ACK timeouts, or the
            // Disconnect that moves the QP to ERR).
            if let Some((c, at)) = crash {
                // Retry count 7 means "retry forever" (as rxe): then the
                // survivor's WRs end with its Disconnect, bounded above.
                if c != i && n.rts_at.is_some() && n.qp.query().retry_cnt < 7 {
                    let bound = self.crash_bound(i);
                    for (k, &(_, wr_id, posted)) in n.sends.iter().enumerate() {
                        let (done, wc) = n.send_wcs[k];
                        let from = posted.max(at);
                        let took = done.saturating_duration_since(from);
                        assert!(
                            took <= bound,
                            "{name}: WR {wr_id:#x} completed ({:?}) {took:?} after the peer crashed, bound {bound:?}",
                            wc.status
                        );
                        self.stats.max_crash_drain_ms =
                            self.stats.max_crash_drain_ms.max(took.as_millis() as u64);
                    }
                }
            }
        }
    }

    /// How long a survivor's WRs may take to complete once the peer is
    /// gone (retry count < 7): what is in flight lands, an RNR wait already
    /// begun (the CM leaves min_rnr_timer 0, 655 ms) runs out, then
    /// retry_cnt + 1 ACK timeouts.
    fn crash_bound(&self, i: usize) -> Duration {
        let a = self.n[i].qp.query();
        let t = ndverbs_wire::ext::ack_timeout_nanos(a.timeout).expect("finite ACK timeout");
        let f = &self.sc.faults;
        f.latency * 2
            + f.jitter * 2
            + Duration::from_micros(u64::from(ndverbs_wire::ext::rnr_timer_micros(0)))
            + Duration::from_nanos(t * (u64::from(a.retry_cnt) + 1))
            + Duration::from_millis(1)
    }

    fn check_completions(&mut self, i: usize) {
        let name = "AB".as_bytes()[i] as char;
        let n = &self.n[i];
        // Sends: exactly once, in posting order.
        let ids: Vec<u64> = n.sends.iter().map(|s| s.1).collect();
        let got: Vec<u64> = n.send_wcs.iter().map(|w| w.1.wr_id).collect();
        assert!(
            ids.starts_with(&got),
            "{name}: send completions not in posting order or duplicated"
        );
        let rids: Vec<u64> = n.recvs.iter().map(|s| s.1).collect();
        let rgot: Vec<u64> = n.recv_wcs.iter().map(|w| w.wr_id).collect();
        assert!(
            rids.starts_with(&rgot),
            "{name}: receive completions not in posting order or duplicated"
        );
        // A success prefix, then one error at most, then flushes.
        for (what, sts) in [
            (
                "send",
                n.send_wcs.iter().map(|w| w.1.status).collect::<Vec<_>>(),
            ),
            ("recv", n.recv_wcs.iter().map(|w| w.status).collect()),
        ] {
            let first_bad = sts.iter().position(|s| *s != WcStatus::Success);
            if let Some(f) = first_bad {
                for s in &sts[f + 1..] {
                    assert_eq!(
                        *s,
                        WcStatus::WrFlushErr,
                        "{name}: {what} completion after the first error is not a flush: {sts:?}"
                    );
                }
            }
            for s in &sts {
                *self.stats.status.entry(format!("{s:?}")).or_default() += 1;
            }
        }
        self.stats.wrs += n.sends.len() as u64;
        self.stats.recvs += n.recvs.len() as u64;
    }

    fn check_data(&mut self, i: usize) {
        let name = "AB".as_bytes()[i] as char;
        let sc = &self.sc;
        let slot = slot_len(sc.max_len);
        let me = &self.n[i];
        let peer = &self.n[1 - i];
        // What may have changed in each of my regions, and where.
        let mut may_change: HashMap<u32, Vec<(usize, usize)>> = HashMap::new();
        // Receives: the k-th successful receive holds the peer's k-th
        // receive-consuming message.
        let consuming: Vec<&Op> = sc.ops[1 - i]
            .iter()
            .filter(|o| o.recv_idx.is_some())
            .collect();
        for (k, &(ri, _)) in me.recvs.iter().enumerate() {
            // A receive that did not complete successfully may hold part of
            // a message that never finished; a successful one exactly its
            // message.
            let op = consuming[ri];
            let wc = me.recv_wcs.get(k).filter(|w| w.status == WcStatus::Success);
            let len = if wc.is_some() { op.len } else { sc.max_len };
            may_change
                .entry(me.regions.recv.lkey)
                .or_default()
                .push((ri * slot, len));
            let Some(wc) = wc else { continue };
            let peer_src = &peer.initial[&peer.regions.src.lkey];
            let want = &peer_src[op.src_off..op.src_off + op.len];
            match op.kind {
                OpKind::Send { imm } => {
                    assert_eq!(wc.opcode, WcOpcode::Recv, "{name}: recv {k} opcode");
                    assert_eq!(wc.imm, imm, "{name}: recv {k} immediate");
                    assert_eq!(wc.byte_len as usize, op.len, "{name}: recv {k} length");
                    let got = &me.mem.bytes(me.regions.recv.lkey)[ri * slot..ri * slot + op.len];
                    assert!(got == want, "{name}: recv {k} data differs from the SEND");
                }
                OpKind::Write { imm } => {
                    assert_eq!(
                        wc.opcode,
                        WcOpcode::RecvRdmaWithImm,
                        "{name}: recv {k} opcode"
                    );
                    assert_eq!(wc.imm, imm, "{name}: recv {k} immediate");
                }
                _ => unreachable!(),
            }
            self.stats.bytes_ok += op.len as u64;
        }
        // Peer's ops that target my memory.
        for (k, op) in sc.ops[1 - i].iter().enumerate() {
            match op.kind {
                OpKind::Write { .. } => may_change
                    .entry(me.regions.wtgt.lkey)
                    .or_default()
                    .push((op.slot * slot, op.len)),
                OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. } => may_change
                    .entry(me.regions.atom.lkey)
                    .or_default()
                    .push((op.slot * 16 + 8, 8)),
                _ => {}
            }
            let _ = k;
        }
        // My own ops: their outcome at the peer (WRITE, atomics) or here
        // (READ, atomic result).
        let ok_ids: HashMap<u64, WorkCompletion> = me
            .send_wcs
            .iter()
            .filter(|w| w.1.status == WcStatus::Success)
            .map(|w| (w.1.wr_id, w.1))
            .collect();
        let failed: HashMap<u64, WcStatus> = me
            .send_wcs
            .iter()
            .filter(|w| w.1.status != WcStatus::Success)
            .map(|w| (w.1.wr_id, w.1.status))
            .collect();
        let my_src = &me.initial[&me.regions.src.lkey];
        for &(k, wr_id, _) in &me.sends {
            let op = &sc.ops[i][k];
            if matches!(
                op.kind,
                OpKind::Read | OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. }
            ) {
                may_change
                    .entry(me.regions.land.lkey)
                    .or_default()
                    .push((op.slot * slot, op.len));
            }
            let atom_slot = op.slot * 16 + 8;
            let peer_atom = |mem: &VecMemory| {
                u64::from_ne_bytes(
                    mem.bytes(peer.regions.atom.lkey)[atom_slot..atom_slot + 8]
                        .try_into()
                        .unwrap(),
                )
            };
            let init = u64::from_ne_bytes(
                peer.initial[&peer.regions.atom.lkey][atom_slot..atom_slot + 8]
                    .try_into()
                    .unwrap(),
            );
            let result = || {
                u64::from_ne_bytes(
                    me.mem.bytes(me.regions.land.lkey)[op.slot * slot..op.slot * slot + 8]
                        .try_into()
                        .unwrap(),
                )
            };
            let after = match op.kind {
                OpKind::FetchAdd { add } => init.wrapping_add(add),
                OpKind::CmpSwap { hit: true, swap } => swap,
                _ => init,
            };
            let Some(wc) = ok_ids.get(&wr_id) else {
                // Failed or never completed (crashed side): an atomic ran at
                // most once.
                if matches!(op.kind, OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. }) {
                    let v = peer_atom(&peer.mem);
                    assert!(
                        v == init || v == after,
                        "{name}: failed atomic {k} ({:?}) left {v:#x}, not {init:#x} or {after:#x}",
                        failed.get(&wr_id)
                    );
                }
                continue;
            };
            assert_eq!(wc.byte_len as usize, op.len, "{name}: op {k} byte_len");
            self.stats.bytes_ok += op.len as u64;
            match op.kind {
                OpKind::Send { .. } => {
                    // The peer consumed the matching receive successfully.
                    let ri = op.recv_idx.unwrap();
                    let pos = peer.recvs.iter().position(|r| r.0 == ri);
                    let ok = pos.and_then(|p| peer.recv_wcs.get(p));
                    assert!(
                        ok.is_some_and(|w| w.status == WcStatus::Success),
                        "{name}: SEND {k} succeeded but the peer's receive {ri} did not: {ok:?}"
                    );
                }
                OpKind::Write { .. } => {
                    let off = op.slot * slot;
                    let got = &peer.mem.bytes(peer.regions.wtgt.lkey)[off..off + op.len];
                    assert!(
                        got == &my_src[op.src_off..op.src_off + op.len],
                        "{name}: WRITE {k} data not at the target"
                    );
                }
                OpKind::Read => {
                    let off = op.slot * slot;
                    let got = &me.mem.bytes(me.regions.land.lkey)[off..off + op.len];
                    let peer_src = &peer.initial[&peer.regions.src.lkey];
                    assert!(
                        got == &peer_src[op.src_off..op.src_off + op.len],
                        "{name}: READ {k} data differs from the source"
                    );
                }
                OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. } => {
                    assert_eq!(result(), init, "{name}: atomic {k} original value");
                    assert_eq!(
                        peer_atom(&peer.mem),
                        after,
                        "{name}: atomic {k} ran other than exactly once"
                    );
                }
            }
        }
        // Everything else in my memory is byte-identical.
        for (&key, init) in &me.initial {
            let now = me.mem.bytes(key);
            let mut allowed = vec![false; init.len()];
            for &(off, len) in may_change.get(&key).into_iter().flatten() {
                allowed[off..off + len].iter_mut().for_each(|a| *a = true);
            }
            for (j, (a, b)) in init.iter().zip(now).enumerate() {
                assert!(
                    a == b || allowed[j],
                    "{name}: region {key:#x} byte {j} changed outside every target"
                );
            }
        }
    }
}

fn run_seed(seed: u64, verbose: bool) -> Stats {
    let mut w = World::new(seed, verbose);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        w.run();
        w.check();
    }));
    if let Err(e) = r {
        if let Some(l) = &w.log {
            eprintln!("{}", l.join("\n"));
        }
        eprintln!(
            "\nsimulation seed {seed} failed; replay with:\n  NDV_SIM_SEED={seed} cargo test -p ndverbs-engine --test sim_connection -- --nocapture\n"
        );
        std::panic::resume_unwind(e);
    }
    w.stats
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[test]
fn sim() {
    if let Some(seed) = env_u64("NDV_SIM_SEED") {
        let s = run_seed(seed, true);
        println!("seed {seed}: {s:#?}");
        return;
    }
    // 10,000 seeds take ~10 s in release (scripts/test.sh runs them there)
    // and ~4 min in debug, where `cargo test --workspace` runs 1,000.
    let default = if cfg!(debug_assertions) {
        1_000
    } else {
        10_000
    };
    let seeds = env_u64("NDV_SIM_SEEDS").unwrap_or(default);
    let first = env_u64("NDV_SIM_FIRST").unwrap_or(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let next = AtomicU64::new(first);
    let total = Mutex::new(Stats::default());
    let failed = Mutex::new(Vec::new());
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut mine = Stats::default();
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= first + seeds || !failed.lock().unwrap().is_empty() {
                        break;
                    }
                    match std::panic::catch_unwind(|| run_seed(seed, false)) {
                        Ok(st) => mine.add(&st),
                        Err(_) => failed.lock().unwrap().push(seed),
                    }
                }
                total.lock().unwrap().add(&mine);
            });
        }
    });
    let total = total.into_inner().unwrap();
    println!(
        "simulation: {} seeds in {:.1} s: {total:#?}",
        total.seeds,
        start.elapsed().as_secs_f64()
    );
    let failed = failed.into_inner().unwrap();
    assert!(
        failed.is_empty(),
        "seeds {failed:?} failed; replay with NDV_SIM_SEED={} cargo test -p ndverbs-engine --test sim_connection -- --nocapture",
        failed[0]
    );
    if seeds >= 1000 {
        // The scenarios cover what they claim to.
        for k in ["DrepReceived", "DrepSent", "DreqTimedOut"] {
            assert!(
                total.endings.get(k).copied().unwrap_or(0) > 0,
                "{k} never happened"
            );
        }
        for k in ["Success", "WrFlushErr", "RetryExcErr"] {
            assert!(
                total.status.get(k).copied().unwrap_or(0) > 0,
                "{k} never happened"
            );
        }
        assert!(total.crashes > 0 && total.lost > 0 && total.duplicated > 0);
        assert!(total.partitioned > 0 && total.connect_failed > 0);
    }
}

/// splitmix64: the protocol crate's tests' generator, for the faults and
/// scenarios.
#[path = "../../proto/tests/common/rng.rs"]
mod rng;
