//! The engine's memory table and proto's test memory (the simulation's and
//! the fuzzers') give the same answer to every access: the same bytes, or
//! the same error — the first check that fails, in one order.
//!
//! Each case registers a few regions in both (same keys, same addresses),
//! then runs a random sequence of window operations (allocate, bind with
//! good and bad arguments, invalidate), region revocations and accesses:
//! local reads and writes through SGEs, remote checks, reads, writes,
//! atomics and invalidations — valid ones and ones with a wrong or dead key,
//! a wrong PD, a missing right, a range out of bounds or overflowing the
//! address space, zero lengths and misaligned atomics. Every result is
//! compared, and at the end every region's bytes.

use ndverbs_engine::keys::KeyGen;
use ndverbs_engine::mr::{MemError, MemTable, Region, RegionBuf};
use ndverbs_proto::mem::testing::VecMemory;
use ndverbs_proto::mem::{Access, AccessError, AtomicOp, Memory, Sge, WindowBind};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
struct RegionSpec {
    pd: u32,
    len: usize,
    access: Access,
}

/// Which key an operation uses.
#[derive(Debug, Clone, Copy)]
enum KeySel {
    /// Region `i % n`'s key.
    Region(usize),
    /// Window `i % n`'s current key.
    Window(usize),
    /// Any key ever issued, `i % n` (some are dead: rebound or revoked).
    Issued(usize),
    /// A key neither table issued.
    Unknown(u32),
}

/// An address: inside what the key covers, `delta` bytes from its start,
/// or near the top of the address space.
#[derive(Debug, Clone, Copy)]
enum At {
    Inside(u64),
    Near(i64),
    Top(u64),
}

/// The PD of the accessing QP: the key's own, or a given one.
#[derive(Debug, Clone, Copy)]
enum PdSel {
    Own,
    Is(u32),
}

/// Where an access goes: the accessing QP's PD, the key it presents and
/// the address.
#[derive(Debug, Clone, Copy)]
struct Aim {
    pd: PdSel,
    key: KeySel,
    at: At,
}

/// What a read or write moves: `len` bytes, written as `fill`.
#[derive(Debug, Clone, Copy)]
struct Data {
    write: bool,
    len: usize,
    fill: u8,
}

impl Data {
    /// The buffer a write sends, or a read fills.
    fn buf(&self) -> Vec<u8> {
        vec![self.fill; self.len]
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// A window in the PD of region `region`, or in `pd`.
    AllocWindow {
        pd: PdSel,
        region: usize,
    },
    /// `narrow` keeps only rights the region has.
    Bind {
        window: usize,
        region: usize,
        at: At,
        len: u64,
        access: Access,
        narrow: bool,
    },
    InvalidateWindow {
        window: usize,
    },
    Revoke {
        region: usize,
    },
    /// Through an SGE of `sge_len` bytes at the aimed address, from
    /// `offset` into it.
    Local {
        aim: Aim,
        sge_len: u32,
        offset: u32,
        data: Data,
    },
    CheckRemote {
        aim: Aim,
        len: u64,
        need: Access,
    },
    Remote {
        aim: Aim,
        data: Data,
    },
    Atomic {
        aim: Aim,
        cas: bool,
        a: u64,
        b: u64,
    },
    InvalidateRemote {
        pd: PdSel,
        key: KeySel,
    },
}

fn access() -> impl Strategy<Value = Access> {
    (0u32..16).prop_map(|b| Access::from_bits(b).unwrap())
}

fn pd() -> impl Strategy<Value = u32> {
    prop_oneof![4 => Just(1u32), 2 => Just(2u32), 1 => Just(3u32)]
}

fn qp_pd() -> impl Strategy<Value = PdSel> {
    prop_oneof![4 => Just(PdSel::Own), 1 => pd().prop_map(PdSel::Is)]
}

fn key() -> impl Strategy<Value = KeySel> {
    prop_oneof![
        6 => any::<usize>().prop_map(KeySel::Region),
        4 => any::<usize>().prop_map(KeySel::Window),
        2 => any::<usize>().prop_map(KeySel::Issued),
        1 => any::<u32>().prop_map(KeySel::Unknown),
    ]
}

fn at() -> impl Strategy<Value = At> {
    prop_oneof![
        6 => any::<u64>().prop_map(At::Inside),
        3 => (-24i64..300).prop_map(At::Near),
        1 => (0u64..16).prop_map(At::Top),
    ]
}

fn len() -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(0usize), 4 => 1usize..=16, 1 => 0usize..=300]
}

fn aim() -> impl Strategy<Value = Aim> {
    (qp_pd(), key(), at()).prop_map(|(pd, key, at)| Aim { pd, key, at })
}

fn data() -> impl Strategy<Value = Data> {
    (any::<bool>(), len(), any::<u8>()).prop_map(|(write, len, fill)| Data { write, len, fill })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (qp_pd(), any::<usize>()).prop_map(|(pd, region)| Op::AllocWindow { pd, region }),
        4 => (any::<usize>(), any::<usize>(), at(), len(), access(), any::<bool>()).prop_map(
            |(window, region, at, len, access, narrow)| Op::Bind {
                window, region, at, len: len as u64, access, narrow
            }
        ),
        1 => any::<usize>().prop_map(|window| Op::InvalidateWindow { window }),
        1 => any::<usize>().prop_map(|region| Op::Revoke { region }),
        10 => (aim(), 0u32..300, 0u32..64, data()).prop_map(|(aim, sge_len, offset, data)| {
            Op::Local { aim, sge_len, offset, data }
        }),
        4 => (aim(), len(), access()).prop_map(|(aim, len, need)| {
            Op::CheckRemote { aim, len: len as u64, need }
        }),
        10 => (aim(), data()).prop_map(|(aim, data)| Op::Remote { aim, data }),
        6 => (aim(), any::<bool>(), 0u64..4, any::<u64>()).prop_map(
            |(aim, cas, a, b)| Op::Atomic { aim, cas, a, b }
        ),
        2 => (qp_pd(), key()).prop_map(|(pd, key)| Op::InvalidateRemote { pd, key }),
    ]
}

fn regions() -> impl Strategy<Value = Vec<RegionSpec>> {
    prop::collection::vec(
        (pd(), 1usize..=256, access()).prop_map(|(pd, len, mut access)| {
            // ibverbs' registration rule, which the engine enforces.
            if access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC) {
                access |= Access::LOCAL_WRITE;
            }
            RegionSpec { pd, len, access }
        }),
        1..=4,
    )
}

/// A window as both tables know it.
struct Window {
    /// Current keys: (engine, test memory).
    keys: (u32, u32),
    pd: u32,
    /// What it is bound to (address, length), if bound.
    bound: Option<(u64, u64)>,
}

/// What an operation aims at: the keys, and the PD and range of what they
/// cover (or, for dead and unknown keys, of the first region).
#[derive(Debug, Clone, Copy)]
struct Target {
    keys: (u32, u32),
    pd: u32,
    access: Access,
    va: u64,
    len: u64,
}

impl Target {
    fn addr(&self, at: At) -> u64 {
        match at {
            At::Inside(x) => self.va + x % self.len.max(1),
            At::Near(d) => self.va.wrapping_add_signed(d),
            At::Top(d) => u64::MAX - d,
        }
    }

    fn pd(&self, sel: PdSel) -> u32 {
        match sel {
            PdSel::Own => self.pd,
            PdSel::Is(pd) => pd,
        }
    }
}

/// Both memories, with the bookkeeping that maps one's keys to the other's.
struct Both {
    table: MemTable,
    vec: VecMemory,
    regions: Vec<Arc<Region>>,
    windows: Vec<Window>,
    /// Every key issued: (engine, test memory).
    issued: Vec<(u32, u32)>,
    /// Test-memory key → engine key, for comparing errors.
    to_table: HashMap<u32, u32>,
}

impl Both {
    fn new(specs: &[RegionSpec], seed: u64) -> Self {
        let mut b = Both {
            table: MemTable::new(KeyGen::seeded(seed)),
            vec: VecMemory::new(),
            regions: Vec::new(),
            windows: Vec::new(),
            issued: Vec::new(),
            to_table: HashMap::new(),
        };
        for s in specs {
            let r = b
                .table
                .register(s.pd, RegionBuf::alloc(s.len).unwrap(), s.access)
                .unwrap();
            // Same key and address in both, so requests are the same bytes.
            b.vec
                .register_with_key(s.pd, r.addr(), vec![0; s.len], s.access, r.lkey());
            b.issued.push((r.lkey(), r.lkey()));
            b.regions.push(r);
        }
        b
    }

    fn issue(&mut self, keys: (u32, u32)) {
        self.issued.push(keys);
        self.to_table.insert(keys.1, keys.0);
    }

    fn region(&self, i: usize) -> Target {
        let r = &self.regions[i % self.regions.len()];
        Target {
            keys: (r.lkey(), r.lkey()),
            pd: r.pd(),
            access: r.access(),
            va: r.addr(),
            len: r.len() as u64,
        }
    }

    /// The keys `sel` names and what they cover.
    fn target(&self, sel: KeySel) -> Target {
        let first = self.region(0);
        match sel {
            KeySel::Region(i) => self.region(i),
            KeySel::Window(i) if !self.windows.is_empty() => {
                let w = &self.windows[i % self.windows.len()];
                let (va, len) = w.bound.unwrap_or((first.va, first.len));
                Target {
                    keys: w.keys,
                    pd: w.pd,
                    va,
                    len,
                    ..first
                }
            }
            KeySel::Window(i) | KeySel::Issued(i) => Target {
                keys: self.issued[i % self.issued.len()],
                ..first
            },
            KeySel::Unknown(k) => {
                let known = self.issued.iter().any(|&(a, b)| a == k || b == k);
                let k = if known { 0 } else { k };
                Target {
                    keys: (k, k),
                    ..first
                }
            }
        }
    }

    /// Where `aim` goes: the keys it presents (engine, test memory), the
    /// accessing PD and the address.
    fn resolve(&self, aim: Aim) -> ((u32, u32), u32, u64) {
        let tg = self.target(aim.key);
        (tg.keys, tg.pd(aim.pd), tg.addr(aim.at))
    }

    /// The test memory's error with its keys written as the engine's.
    fn canon(&self, e: AccessError) -> AccessError {
        let k = |key: u32| *self.to_table.get(&key).unwrap_or(&key);
        match e {
            AccessError::InvalidLkey(key) => AccessError::InvalidLkey(k(key)),
            AccessError::InvalidRkey(key) => AccessError::InvalidRkey(k(key)),
            AccessError::NotInvalidatable(key) => AccessError::NotInvalidatable(k(key)),
            AccessError::PdMismatch {
                key,
                region_pd,
                qp_pd,
            } => AccessError::PdMismatch {
                key: k(key),
                region_pd,
                qp_pd,
            },
            AccessError::OutOfBounds { key, addr, len } => AccessError::OutOfBounds {
                key: k(key),
                addr,
                len,
            },
            AccessError::NoPermission { key, needed } => AccessError::NoPermission {
                key: k(key),
                needed,
            },
            // Misaligned, SglOverrun and any later error carry no key.
            e => e,
        }
    }

    /// Both answers as comparable text, with the test memory's keys written
    /// as the engine's.
    fn answers<T: std::fmt::Debug>(
        &self,
        t: Result<T, AccessError>,
        v: Result<T, AccessError>,
    ) -> (String, String) {
        (
            format!("{t:?}"),
            format!("{:?}", v.map_err(|e| self.canon(e))),
        )
    }

    /// Runs `f` on each memory with that memory's keys of `keys`.
    fn both<T: std::fmt::Debug>(
        &mut self,
        keys: (u32, u32),
        mut f: impl FnMut(&mut dyn Memory, u32) -> Result<T, AccessError>,
    ) -> (String, String) {
        let t = f(&mut self.table, keys.0);
        let v = f(&mut self.vec, keys.1);
        self.answers(t, v)
    }

    /// Runs `op` on both and returns what each answered, comparable.
    fn run(&mut self, op: &Op) -> (String, String) {
        match *op {
            Op::AllocWindow { pd, region } => {
                let pd = self.region(region).pd(pd);
                let keys = (self.table.alloc_window(pd), self.vec.alloc_window(pd));
                self.issue(keys);
                self.windows.push(Window {
                    keys,
                    pd,
                    bound: None,
                });
                (String::new(), String::new())
            }
            Op::Bind {
                window,
                region,
                at,
                len,
                access,
                narrow,
            } => {
                if self.windows.is_empty() {
                    self.run(&Op::AllocWindow {
                        pd: PdSel::Own,
                        region,
                    });
                }
                let w = window % self.windows.len();
                let r = self.region(region);
                let lkey = r.keys.0;
                let va = r.addr(at);
                let access = match narrow {
                    true => Access::from_bits(access.bits() & r.access.bits()).unwrap(),
                    false => access,
                };
                let (mw_t, mw_v) = self.windows[w].keys;
                let bind = WindowBind {
                    lkey,
                    va,
                    len,
                    access,
                };
                let t = self.table.bind_window(mw_t, bind);
                let v = self.vec.bind_window(mw_v, bind);
                if let (Ok(kt), Ok(kv)) = (&t, &v) {
                    self.issue((*kt, *kv));
                    let w = &mut self.windows[w];
                    w.keys = (*kt, *kv);
                    w.bound = Some((va, len));
                }
                let t = t.map(|_| ()).map_err(|e| match e {
                    MemError::BadBind(e) => e,
                    // The engine's table says "unknown key"; the test memory
                    // names the key's role.
                    MemError::UnknownKey(k) if k == lkey => AccessError::InvalidLkey(k),
                    MemError::UnknownKey(k) => AccessError::InvalidRkey(k),
                    e => panic!("unexpected bind error {e}"),
                });
                self.answers(t, v.map(|_| ()))
            }
            Op::InvalidateWindow { window } => {
                if self.windows.is_empty() {
                    return (String::new(), String::new());
                }
                let n = self.windows.len();
                let w = &mut self.windows[window % n];
                w.bound = None;
                let t = self.table.invalidate_window(w.keys.0).is_ok();
                let v = self.vec.invalidate_window(w.keys.1).is_ok();
                (format!("{t}"), format!("{v}"))
            }
            Op::Revoke { region } => {
                let key = self.regions[region % self.regions.len()].lkey();
                let t = self.table.revoke(key).is_ok();
                let was = self.vec.is_valid(key);
                self.vec.set_valid(key, false);
                (format!("{t}"), format!("{was}"))
            }
            Op::Local {
                aim,
                sge_len,
                offset,
                data,
            } => {
                let (keys, pd, addr) = self.resolve(aim);
                self.both(keys, |m, k| {
                    let sge = Sge::new(addr, sge_len, k);
                    let mut buf = data.buf();
                    match data.write {
                        true => m.write_local(pd, &sge, offset, &buf).map(|_| buf),
                        false => m.read_local(pd, &sge, offset, &mut buf).map(|_| buf),
                    }
                })
            }
            Op::CheckRemote { aim, len, need } => {
                let (keys, pd, va) = self.resolve(aim);
                self.both(keys, |m, k| m.check_remote(pd, k, va, len, need))
            }
            Op::Remote { aim, data } => {
                let (keys, pd, va) = self.resolve(aim);
                self.both(keys, |m, k| {
                    let mut buf = data.buf();
                    match data.write {
                        true => m.write_remote(pd, k, va, &buf).map(|_| buf),
                        false => m.read_remote(pd, k, va, &mut buf).map(|_| buf),
                    }
                })
            }
            Op::Atomic { aim, cas, a, b } => {
                let (keys, pd, va) = self.resolve(aim);
                let op = match cas {
                    true => AtomicOp::CompareSwap {
                        compare: a,
                        swap: b,
                    },
                    false => AtomicOp::FetchAdd { add: b },
                };
                self.both(keys, |m, k| m.atomic_remote(pd, k, va, op))
            }
            Op::InvalidateRemote { pd, key } => {
                let tg = self.target(key);
                let pd = tg.pd(pd);
                let answers = self.both(tg.keys, |m, k| m.invalidate_remote(pd, k));
                let unbound = self.windows.iter_mut().find(|w| w.keys == tg.keys);
                if let (Some(w), "Ok(())") = (unbound, answers.0.as_str()) {
                    w.bound = None;
                }
                answers
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn engine_and_test_memory_agree(
        specs in regions(),
        ops in prop::collection::vec(op(), 1..48),
        seed in any::<u64>(),
    ) {
        let mut both = Both::new(&specs, seed);
        for (i, op) in ops.iter().enumerate() {
            let (t, v) = both.run(op);
            prop_assert_eq!(t, v, "operation {} ({:?}): engine vs test memory", i, op);
        }
        for r in &both.regions {
            let mut bytes = vec![0; r.len()];
            r.read(0, &mut bytes).unwrap();
            prop_assert_eq!(&bytes[..], both.vec.bytes(r.lkey()), "bytes of region {:x}", r.lkey());
        }
    }
}
