//! Who owns a packet: the steering rule of a shared port, as a plain Rust
//! function over the UDP payload.
//!
//! The kernel applies the same rule through the classic BPF program of
//! [`super::cbpf`]; the receive path applies this function to what arrived,
//! so a packet the kernel handed to the wrong member (the program was being
//! replaced, a member died and the kernel's indices moved) is recognised
//! and dropped instead of being answered. The unit tests of `cbpf` check
//! that program and function agree.
//!
//! Offsets are from the start of the UDP payload, which is where both this
//! function and a reuseport program see the packet (the kernel pulls the
//! UDP header before running the program):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | BTH opcode (the probe marker [`PROBE_OPCODE`] is never a RoCE opcode) |
//! | 5..8 | destination QPN; byte 5 (QPN bits 16..23) is the owner's slot |
//! | 20 | a QP1 packet's MAD (after BTH 12 + DETH 8) |
//! | 21 | MAD management class (CM: 0x07) |
//! | 36..38 | MAD attribute ID (REQ, REP, …) |
//! | 44 | the CM message |
//! | 48 | "remote communication ID" of MRA, REJ, REP, RTU, DREQ, DREP, LAP, APR: byte 48 is its high byte, the owner's slot |
//! | 52..60 | REQ and SIDR_REQ service ID |

use ndverbs_wire::cm::attr;
use ndverbs_wire::mad::{GSI_QPN, MGMT_CLASS_CM};

/// The opcode byte of a probe: 0xFF is in the manufacturer-specific range
/// (0xC0..=0xFF) that no RoCE peer sends.
pub const PROBE_OPCODE: u8 = 0xff;
/// Offset of the index a probe is steered to.
pub const PROBE_INDEX_OFF: u32 = 1;
/// Offset of the probe's 32-bit magic ([`PROBE_MAGIC`]).
pub const PROBE_MAGIC_OFF: u32 = 4;
/// Identifies a probe beyond its opcode ("ndvP").
pub const PROBE_MAGIC: u32 = 0x6e64_7650;
/// Length of a probe: marker, index, 2 reserved, magic, 8-byte nonce.
pub const PROBE_LEN: usize = 16;

/// Offset of the destination QPN's high byte: the slot of data packets.
pub const QPN_SLOT_OFF: u32 = 5;
/// Offset of the destination QPN (in the 32-bit word at 4, low 24 bits).
pub const DQPN_WORD_OFF: u32 = 4;
/// The opcode of every QP1 MAD: UD SEND_ONLY.
pub const UD_SEND_ONLY: u8 = 0x64;
/// Offset of the MAD management class.
pub const MGMT_CLASS_OFF: u32 = 21;
/// Offset of the MAD attribute ID.
pub const ATTR_ID_OFF: u32 = 36;
/// Offset of a SIDR_REP's request ID (the requester's ID, slot in its high byte).
pub const SIDR_REP_ID_OFF: u32 = 44;
/// Offset of the remote communication ID's high byte.
pub const REMOTE_COMM_SLOT_OFF: u32 = 48;
/// Offset of a REQ's (and SIDR_REQ's) service ID.
pub const SERVICE_ID_OFF: u32 = 52;
/// Shortest payload that holds every field a QP1 rule reads.
pub const MIN_GSI_LEN: u32 = 60;
/// Shortest payload that holds a BTH.
pub const MIN_BTH_LEN: u32 = 12;

/// Who a packet belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The member in this slot (a data packet's QPN, a CM reply's comm ID).
    Slot(u8),
    /// Whoever listens on this service ID (a REQ or SIDR_REQ).
    Service(u64),
    /// A probe steered to this kernel index.
    Probe(u8),
    /// No member in particular (a runt, a non-CM MAD, QP0): the kernel
    /// picks one by hash and that member answers or drops it.
    Any,
}

/// The owner of the UDP payload `p` (see the module docs).
///
/// # Example
///
/// ```
/// use ndverbs_engine::share::steer::{owner, Owner};
/// use ndverbs_wire::{bth::Bth, opcode::Opcode, packet::Packet};
/// let mut buf = [0u8; 64];
/// let n = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, 0x07_1234, 0)).write(&mut buf).unwrap();
/// assert_eq!(owner(&buf[..n]), Owner::Slot(7)); // QPN 0x071234 lives in slot 7
/// assert_eq!(owner(&buf[..3]), Owner::Any); // too short to say
/// ```
pub fn owner(p: &[u8]) -> Owner {
    let byte = |o: u32| p.get(o as usize).copied().unwrap_or(0);
    let len = p.len() as u32;
    if len >= PROBE_LEN as u32 && p[0] == PROBE_OPCODE && be32(p, PROBE_MAGIC_OFF) == PROBE_MAGIC {
        return Owner::Probe(byte(PROBE_INDEX_OFF));
    }
    if len < MIN_BTH_LEN {
        return Owner::Any;
    }
    let dqpn = be32(p, DQPN_WORD_OFF) & 0x00ff_ffff;
    if dqpn == 0 {
        return Owner::Any;
    }
    if dqpn != GSI_QPN {
        return Owner::Slot(byte(QPN_SLOT_OFF));
    }
    if len < MIN_GSI_LEN || p[0] != UD_SEND_ONLY || byte(MGMT_CLASS_OFF) != MGMT_CLASS_CM {
        return Owner::Any;
    }
    match be16(p, ATTR_ID_OFF) {
        attr::REQ | attr::SIDR_REQ => Owner::Service(be64(p, SERVICE_ID_OFF)),
        attr::SIDR_REP => Owner::Slot(byte(SIDR_REP_ID_OFF)),
        attr::MRA
        | attr::REJ
        | attr::REP
        | attr::RTU
        | attr::DREQ
        | attr::DREP
        | attr::LAP
        | attr::APR => Owner::Slot(byte(REMOTE_COMM_SLOT_OFF)),
        _ => Owner::Any,
    }
}

fn be16(p: &[u8], o: u32) -> u16 {
    let o = o as usize;
    u16::from_be_bytes([p[o], p[o + 1]])
}

fn be32(p: &[u8], o: u32) -> u32 {
    let o = o as usize;
    u32::from_be_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]])
}

fn be64(p: &[u8], o: u32) -> u64 {
    (u64::from(be32(p, o)) << 32) | u64::from(be32(p, o + 4))
}
