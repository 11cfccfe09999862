//! The classic BPF program that steers a shared port's datagrams, and an
//! interpreter for it.
//!
//! `SO_ATTACH_REUSEPORT_CBPF` runs a classic BPF program on every datagram
//! for the port's reuseport group, UDP header already pulled (offset 0 is
//! the BTH); its return value is the index of the socket in the group, and
//! an index the group does not have lets the kernel pick one by hash. The
//! program [`program`] builds applies the rule of [`super::steer::owner`]:
//!
//! * a probe goes to the index it carries (how members learn their index);
//! * a data packet goes to the member of its destination QPN's slot;
//! * a REQ (or SIDR_REQ) goes to the member listening on its service ID;
//! * every other CM message goes to the member of the slot in the high
//!   byte of its remote communication ID;
//! * anything else, and any slot or service ID the table does not name,
//!   returns [`FALLBACK`].
//!
//! The program is straight-line tests and table lookups (one compare per
//! slot, two per service ID); [`MAX_SERVICES`] keeps it under the kernel's
//! 4096 instructions. [`run`] interprets the instruction subset the builder
//! uses, with the kernel's rule for a load past the end (the program
//! returns 0), so the unit tests check the program itself, not a
//! description of it.

use super::steer::*;
use ndverbs_wire::cm::attr;
use ndverbs_wire::mad::MGMT_CLASS_CM;

/// What the program returns when no member in particular owns a packet:
/// larger than any group, so the kernel falls back to its hash.
pub const FALLBACK: u32 = u32::MAX;
/// Most listening service IDs one program steers (five instructions each).
pub const MAX_SERVICES: usize = 512;
/// Most members (slots) one program steers (two instructions each).
pub const MAX_SLOTS: usize = 255;

// Instruction classes and fields (linux/filter.h, linux/bpf_common.h).
const LD: u16 = 0x00;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const ABS: u16 = 0x20;
const LEN: u16 = 0x80;
const AND: u16 = 0x50;
const JA: u16 = 0x00;
const JEQ: u16 = 0x10;
const JGE: u16 = 0x30;
const K: u16 = 0x00;
const A: u16 = 0x10;

/// One classic BPF instruction, laid out as the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Constant operand.
    pub k: u32,
}

/// Who gets what: the table a program is built from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Steering {
    /// Slot → the member's current index in the group.
    pub slots: Vec<(u8, u32)>,
    /// Listening service ID → the listener's current index.
    pub services: Vec<(u64, u32)>,
}

impl Steering {
    /// The index this table sends a packet of `owner` to ([`FALLBACK`]
    /// when none): what the program returns, in Rust.
    pub fn index_of(&self, owner: Owner) -> u32 {
        match owner {
            Owner::Probe(i) => u32::from(i),
            Owner::Slot(s) => self
                .slots
                .iter()
                .find(|&&(x, _)| x == s)
                .map_or(FALLBACK, |&(_, i)| i),
            Owner::Service(sid) => self
                .services
                .iter()
                .find(|&&(x, _)| x == sid)
                .map_or(FALLBACK, |&(_, i)| i),
            Owner::Any => FALLBACK,
        }
    }
}

/// Why a program could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// More slots than [`MAX_SLOTS`].
    #[error("more than {MAX_SLOTS} slots")]
    TooManySlots,
    /// More service IDs than [`MAX_SERVICES`].
    #[error("more than {MAX_SERVICES} listening service IDs")]
    TooManyServices,
}

/// A jump target while assembling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Data,
    Gsi,
    Any,
    Comm,
    Req,
    Slots,
    Next,
}

/// A tiny assembler: conditional jumps name labels, resolved at the end
/// (forward only, as classic BPF requires).
#[derive(Default)]
struct Asm {
    code: Vec<Insn>,
    fixups: Vec<(usize, Label, Label)>,
    labels: Vec<(Label, usize)>,
}

impl Asm {
    fn op(&mut self, code: u16, k: u32) {
        self.code.push(Insn {
            code,
            jt: 0,
            jf: 0,
            k,
        });
    }

    /// A conditional jump: to `t` if it holds, `f` if not (`Next`: fall through).
    fn jump(&mut self, code: u16, k: u32, t: Label, f: Label) {
        self.fixups.push((self.code.len(), t, f));
        self.op(JMP | code | K, k);
    }

    /// An unconditional jump to `l`.
    fn ja(&mut self, l: Label) {
        self.fixups.push((self.code.len(), l, Label::Next));
        self.op(JMP | JA, 0);
    }

    fn label(&mut self, l: Label) {
        self.labels.push((l, self.code.len()));
    }

    fn finish(mut self) -> Vec<Insn> {
        let at = |l: Label| self.labels.iter().find(|x| x.0 == l).map(|x| x.1);
        for &(pc, t, f) in &self.fixups {
            // Offsets count from the next instruction; every label the
            // builder jumps to lies ahead of the jump (asserted by the tests).
            let off = |l: Label| match l {
                Label::Next => 0,
                l => at(l).map_or(0, |x| x - pc - 1),
            };
            let insn = &mut self.code[pc];
            if insn.code == JMP | JA {
                insn.k = off(t) as u32;
            } else {
                insn.jt = off(t) as u8;
                insn.jf = off(f) as u8;
            }
        }
        self.code
    }
}

/// Builds the steering program for `s` (see the module docs).
///
/// # Example
///
/// ```
/// use ndverbs_engine::share::cbpf::{program, run, Steering, FALLBACK};
/// use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
/// let s = Steering { slots: vec![(3, 0), (9, 1)], services: vec![] };
/// let prog = program(&s)?;
/// let mut buf = [0u8; 64];
/// let n = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, 0x09_0042, 0)).write(&mut buf).unwrap();
/// assert_eq!(run(&prog, &buf[..n]), 1); // QPN 0x090042: slot 9, index 1
/// let n = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, 0x05_0042, 0)).write(&mut buf).unwrap();
/// assert_eq!(run(&prog, &buf[..n]), FALLBACK); // slot 5: nobody
/// # Ok::<(), ndverbs_engine::share::cbpf::BuildError>(())
/// ```
pub fn program(s: &Steering) -> Result<Vec<Insn>, BuildError> {
    if s.slots.len() > MAX_SLOTS {
        return Err(BuildError::TooManySlots);
    }
    if s.services.len() > MAX_SERVICES {
        return Err(BuildError::TooManyServices);
    }
    use Label::*;
    let mut a = Asm::default();
    // Probes: long enough, marker, magic → the index they carry.
    a.op(LD | W | LEN, 0);
    a.jump(JGE, PROBE_LEN as u32, Next, Data);
    a.op(LD | B | ABS, 0);
    a.jump(JEQ, u32::from(PROBE_OPCODE), Next, Data);
    a.op(LD | W | ABS, PROBE_MAGIC_OFF);
    a.jump(JEQ, PROBE_MAGIC, Next, Data);
    a.op(LD | B | ABS, PROBE_INDEX_OFF);
    a.op(RET | A, 0);
    // Data packets: a BTH, a QPN that is neither QP0 nor QP1 → its slot.
    a.label(Data);
    a.op(LD | W | LEN, 0);
    a.jump(JGE, MIN_BTH_LEN, Next, Any);
    a.op(LD | W | ABS, DQPN_WORD_OFF);
    a.op(ALU | AND | K, 0x00ff_ffff);
    a.jump(JEQ, 0, Any, Next);
    a.jump(JEQ, ndverbs_wire::mad::GSI_QPN, Gsi, Next);
    a.op(LD | B | ABS, QPN_SLOT_OFF);
    a.ja(Slots);
    // QP1: a CM MAD in a UD SEND_ONLY → by service ID or by comm ID.
    a.label(Gsi);
    a.op(LD | W | LEN, 0);
    a.jump(JGE, MIN_GSI_LEN, Next, Any);
    a.op(LD | B | ABS, 0);
    a.jump(JEQ, u32::from(UD_SEND_ONLY), Next, Any);
    a.op(LD | B | ABS, MGMT_CLASS_OFF);
    a.jump(JEQ, u32::from(MGMT_CLASS_CM), Next, Any);
    a.op(LD | H | ABS, ATTR_ID_OFF);
    a.jump(JEQ, u32::from(attr::REQ), Req, Next);
    a.jump(JEQ, u32::from(attr::SIDR_REQ), Req, Next);
    for at in [
        attr::MRA,
        attr::REJ,
        attr::REP,
        attr::RTU,
        attr::DREQ,
        attr::DREP,
        attr::LAP,
        attr::APR,
    ] {
        a.jump(JEQ, u32::from(at), Comm, Next);
    }
    a.jump(JEQ, u32::from(attr::SIDR_REP), Next, Any);
    a.op(LD | B | ABS, SIDR_REP_ID_OFF);
    a.ja(Slots);
    a.label(Any);
    a.op(RET | K, FALLBACK);
    a.label(Comm);
    a.op(LD | B | ABS, REMOTE_COMM_SLOT_OFF);
    a.ja(Slots);
    // Service IDs: high word, then low word, of each listener.
    a.label(Req);
    for &(sid, index) in &s.services {
        a.op(LD | W | ABS, SERVICE_ID_OFF);
        a.code.push(Insn {
            code: JMP | JEQ | K,
            jt: 0,
            jf: 3,
            k: (sid >> 32) as u32,
        });
        a.op(LD | W | ABS, SERVICE_ID_OFF + 4);
        a.code.push(Insn {
            code: JMP | JEQ | K,
            jt: 0,
            jf: 1,
            k: sid as u32,
        });
        a.op(RET | K, index);
    }
    a.op(RET | K, FALLBACK);
    // Slots (the slot byte in A).
    a.label(Slots);
    for &(slot, index) in &s.slots {
        a.code.push(Insn {
            code: JMP | JEQ | K,
            jt: 0,
            jf: 1,
            k: u32::from(slot),
        });
        a.op(RET | K, index);
    }
    a.op(RET | K, FALLBACK);
    Ok(a.finish())
}

/// Runs `prog` on the UDP payload `p` as the kernel runs a reuseport
/// program; returns what it returns. Only the instructions [`program`]
/// emits are known: any other, or a jump out of the program, returns 0 (as
/// the kernel would never load such a program, a test that meets it fails
/// on the index). A load past the end of `p` returns 0, the kernel's rule.
pub fn run(prog: &[Insn], p: &[u8]) -> u32 {
    let (mut acc, mut pc) = (0u32, 0usize);
    let load = |k: u32, n: usize| -> Option<u32> {
        let o = k as usize;
        let b = p.get(o..o.checked_add(n)?)?;
        Some(b.iter().fold(0u32, |v, &x| (v << 8) | u32::from(x)))
    };
    // Every jump goes forward, so the loop ends within `prog.len()` rounds.
    while let Some(i) = prog.get(pc) {
        pc += 1;
        match i.code {
            c if c == LD | W | LEN => acc = p.len() as u32,
            c if c == LD | W | ABS => match load(i.k, 4) {
                Some(v) => acc = v,
                None => return 0,
            },
            c if c == LD | H | ABS => match load(i.k, 2) {
                Some(v) => acc = v,
                None => return 0,
            },
            c if c == LD | B | ABS => match load(i.k, 1) {
                Some(v) => acc = v,
                None => return 0,
            },
            c if c == ALU | AND | K => acc &= i.k,
            c if c == JMP | JA => pc += i.k as usize,
            c if c == JMP | JEQ | K => pc += usize::from(if acc == i.k { i.jt } else { i.jf }),
            c if c == JMP | JGE | K => pc += usize::from(if acc >= i.k { i.jt } else { i.jf }),
            c if c == RET | K => return i.k,
            c if c == RET | A => return acc,
            _ => return 0,
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeyGen;
    use ndverbs_wire::bth::Bth;
    use ndverbs_wire::opcode::Opcode;
    use ndverbs_wire::packet::Packet;

    fn table() -> Steering {
        Steering {
            slots: vec![(0, 2), (3, 0), (9, 1), (254, 3)],
            services: vec![(0x0000_0000_0106_1c06, 1), (0x0000_0000_0106_0001, 3)],
        }
    }

    /// A CM MAD in a UD SEND_ONLY to QP1, with `attr` and `fill` at the CM data.
    fn mad(attr_id: u16, cm: &[(usize, &[u8])]) -> Vec<u8> {
        let mut p = vec![0u8; 20 + 256 + 4];
        p[0] = UD_SEND_ONLY;
        p[7] = 1; // dest QPN 1
        p[21] = MGMT_CLASS_CM;
        p[36..38].copy_from_slice(&attr_id.to_be_bytes());
        for &(off, bytes) in cm {
            p[44 + off..44 + off + bytes.len()].copy_from_slice(bytes);
        }
        p
    }

    fn data(qpn: u32) -> Vec<u8> {
        let mut buf = [0u8; 64];
        let n = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, qpn, 5))
            .write(&mut buf)
            .unwrap();
        buf[..n].to_vec()
    }

    fn probe(index: u8) -> Vec<u8> {
        let mut p = vec![0u8; PROBE_LEN];
        p[0] = PROBE_OPCODE;
        p[1] = index;
        p[4..8].copy_from_slice(&PROBE_MAGIC.to_be_bytes());
        p
    }

    fn check(s: &Steering, p: &[u8], want: u32) {
        let prog = program(s).unwrap();
        assert_eq!(run(&prog, p), want, "program on {p:02x?}");
        assert_eq!(s.index_of(owner(p)), want, "rule on {p:02x?}");
    }

    #[test]
    fn data_packets_go_to_their_slot() {
        let s = table();
        check(&s, &data(0x09_1234), 1);
        check(&s, &data(0x03_0002), 0);
        check(&s, &data(0x00_0002), 2);
        check(&s, &data(0xfe_ffff), 3);
        check(&s, &data(0x05_1234), FALLBACK); // slot nobody holds
        check(&s, &data(0), FALLBACK); // QP0
    }

    #[test]
    fn cm_messages_go_by_service_id_or_comm_id() {
        let s = table();
        let sid = 0x0000_0000_0106_1c06u64.to_be_bytes();
        check(&s, &mad(attr::REQ, &[(8, &sid)]), 1);
        check(&s, &mad(attr::SIDR_REQ, &[(8, &sid)]), 1);
        let other = 0x0000_0000_0106_1c07u64.to_be_bytes();
        check(&s, &mad(attr::REQ, &[(8, &other)]), FALLBACK);
        // Same low word, another high word: not the listener's.
        let hi = 0x0000_0001_0106_1c06u64.to_be_bytes();
        check(&s, &mad(attr::REQ, &[(8, &hi)]), FALLBACK);
        for at in [
            attr::REP,
            attr::RTU,
            attr::REJ,
            attr::MRA,
            attr::DREQ,
            attr::DREP,
            attr::LAP,
            attr::APR,
        ] {
            check(&s, &mad(at, &[(4, &[9, 0xaa, 0xbb, 0xcc])]), 1);
            check(&s, &mad(at, &[(4, &[254, 0, 0, 1])]), 3);
            check(&s, &mad(at, &[(4, &[7, 0, 0, 1])]), FALLBACK);
        }
        check(&s, &mad(attr::SIDR_REP, &[(0, &[3, 1, 2, 3])]), 0);
        check(&s, &mad(0x0001, &[]), FALLBACK); // ClassPortInfo
        let mut not_cm = mad(attr::REP, &[(4, &[9, 0, 0, 0])]);
        not_cm[21] = 0x04; // another management class
        check(&s, &not_cm, FALLBACK);
        let mut imm = mad(attr::REP, &[(4, &[9, 0, 0, 0])]);
        imm[0] = 0x65; // SEND_ONLY with immediate: not a MAD we send
        check(&s, &imm, FALLBACK);
    }

    #[test]
    fn probes_go_to_their_index_and_runts_anywhere() {
        let s = table();
        check(&s, &probe(0), 0);
        check(&s, &probe(77), 77);
        let mut bad = probe(5);
        bad[5] = 3; // no magic: a (bogus) data packet to QPN 0x037650, slot 3
        check(&s, &bad, 0);
        let mut short = probe(5)[..PROBE_LEN - 1].to_vec();
        short[5] = 9; // too short for a probe: a data packet to slot 9
        check(&s, &short, 1);
        check(&s, &[], FALLBACK);
        check(&s, &[0u8; 11], FALLBACK);
        check(&s, &mad(attr::REQ, &[])[..59], FALLBACK); // too short for the service ID
    }

    #[test]
    fn program_and_rule_agree_on_random_packets() {
        let s = table();
        let prog = program(&s).unwrap();
        let mut rng = KeyGen::seeded(17);
        let templates = [
            data(0x09_0001),
            mad(attr::REQ, &[]),
            mad(attr::REP, &[]),
            probe(1),
        ];
        for n in 0..20_000 {
            let mut p = templates[n % templates.len()].clone();
            // Mutate a few bytes among the ones the rule reads, and the length.
            for _ in 0..(rng.next_u64() % 4) {
                let at = [0usize, 1, 4, 5, 6, 7, 21, 36, 37, 44, 48, 52, 59]
                    [rng.next_u64() as usize % 13];
                if at < p.len() {
                    p[at] = rng.next_u64() as u8 % 4 * 3; // small values hit the table
                }
            }
            if rng.next_u64() % 5 == 0 {
                p.truncate(rng.next_u64() as usize % 70);
            }
            assert_eq!(run(&prog, &p), s.index_of(owner(&p)), "{p:02x?}");
        }
    }

    #[test]
    fn jumps_stay_inside_and_tables_fit() {
        let s = Steering {
            slots: (0..MAX_SLOTS as u8).map(|x| (x, u32::from(x))).collect(),
            services: (0..MAX_SERVICES as u64)
                .map(|x| (x << 20, x as u32))
                .collect(),
        };
        let prog = program(&s).unwrap();
        assert!(prog.len() <= 4096, "{} instructions", prog.len());
        for (pc, i) in prog
            .iter()
            .enumerate()
            .filter(|(_, i)| i.code & 0x07 == JMP)
        {
            let reach = if i.code == JMP | JA {
                i.k as usize
            } else {
                usize::from(i.jt.max(i.jf))
            };
            assert!(pc + 1 + reach < prog.len(), "jump out at {pc}");
        }
        assert_eq!(prog.last().map(|i| i.code & 0x07), Some(RET));
        let mut too_many = s.clone();
        too_many.services.push((1, 0));
        assert_eq!(program(&too_many), Err(BuildError::TooManyServices));
        check(&s, &data(0x80_0001), 0x80);
        let sid = (511u64 << 20).to_be_bytes();
        check(&s, &mad(attr::REQ, &[(8, &sid)]), 511);
    }
}
