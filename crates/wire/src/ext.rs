//! Extension transport headers: RETH, AETH, AtomicETH, AtomicAckETH, DETH,
//! ImmDt, IETH, FETH.
//!
//! | Header       | Bytes | Layout                                               |
//! |--------------|-------|------------------------------------------------------|
//! | RETH         | 16    | VA u64 · R_Key u32 · DMA length u32                  |
//! | AETH         | 4     | syndrome u8 · MSN u24                                |
//! | AtomicETH    | 28    | VA u64 · R_Key u32 · swap/add u64 · compare u64      |
//! | AtomicAckETH | 8     | original remote data u64                             |
//! | DETH         | 8     | Q_Key u32 · reserved u8 · source QP u24              |
//! | ImmDt, IETH  | 4     | immediate data / R_Key to invalidate                 |
//! | FETH         | 4     | flush type and placement (opaque here)               |
//!
//! The AETH syndrome's bits 6:5 say ACK (`00`, low bits = credit count; rxe always
//! sends 0x1F), RNR NAK (`01`, low bits = RNR timer code) or NAK (`11`, low bits =
//! error code).

use crate::be::{put_u24, put_u32, put_u64, u24_at, u32_at, u64_at};
use crate::error::{need, room, WireError};

/// Bytes in a RETH.
pub const RETH_LEN: usize = 16;
/// Bytes in an AETH.
pub const AETH_LEN: usize = 4;
/// Bytes in an AtomicETH.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Bytes in an AtomicAckETH.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// Bytes in a DETH.
pub const DETH_LEN: usize = 8;
/// Bytes in ImmDt, IETH and FETH.
pub const WORD_LEN: usize = 4;
/// Bytes of reserved space in a CNP.
pub const CNP_LEN: usize = 16;

/// RDMA extended transport header.
///
/// # Example
///
/// ```
/// use ndverbs_wire::ext::{Reth, RETH_LEN};
/// let reth = Reth { va: 0x7f00_0000_1000, rkey: 0x1234, len: 65536 };
/// let mut b = [0u8; RETH_LEN];
/// assert_eq!(reth.write(&mut b)?, RETH_LEN);
/// assert_eq!(&b[8..12], &[0, 0, 0x12, 0x34]); // big-endian on the wire
/// assert_eq!(Reth::parse(&b)?, reth);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length of the whole message.
    pub len: u32,
}

impl Reth {
    /// Parses 16 bytes.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        need("RETH", b, RETH_LEN)?;
        Ok(Reth {
            va: u64_at(b, 0),
            rkey: u32_at(b, 8),
            len: u32_at(b, 12),
        })
    }

    /// Writes 16 bytes.
    pub fn write(&self, b: &mut [u8]) -> Result<usize, WireError> {
        room("RETH", b, RETH_LEN)?;
        put_u64(b, 0, self.va);
        put_u32(b, 8, self.rkey);
        put_u32(b, 12, self.len);
        Ok(RETH_LEN)
    }
}

/// NAK error codes (AETH syndrome `011xxxxx`).
///
/// # Example
///
/// ```
/// use ndverbs_wire::ext::{Aeth, NakCode, Syndrome};
/// // A responder refusing an RDMA WRITE to memory it may not touch.
/// let aeth = Aeth::new(Syndrome::Nak(NakCode::RemoteAccess), 5);
/// assert_eq!(aeth.syndrome, 0x60 | NakCode::RemoteAccess.code());
/// assert_eq!(aeth.kind(), Syndrome::Nak(NakCode::RemoteAccess));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error: the responder expected another PSN (carried in the NAK).
    PsnSequence,
    /// Invalid request.
    InvalidRequest,
    /// Remote access error (R_Key, bounds, permissions).
    RemoteAccess,
    /// Remote operational error.
    RemoteOperational,
    /// Invalid RD request.
    InvalidRdRequest,
    /// A reserved code.
    Reserved(u8),
}

impl NakCode {
    /// The 5-bit code.
    pub fn code(self) -> u8 {
        match self {
            NakCode::PsnSequence => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccess => 2,
            NakCode::RemoteOperational => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }

    fn from_code(c: u8) -> Self {
        match c {
            0 => NakCode::PsnSequence,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccess,
            3 => NakCode::RemoteOperational,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
}

/// What an AETH syndrome means.
///
/// # Example
///
/// ```
/// use ndverbs_wire::ext::{rnr_timer_micros, NakCode, Syndrome};
/// assert_eq!(Syndrome::ACK.to_byte(), 0x1f); // ACK with "invalid" credits, as rxe sends
/// match Syndrome::from_byte(0x2e) {
///     Syndrome::RnrNak { timer } => assert_eq!(rnr_timer_micros(timer), 1280), // retry in 1.28 ms
///     other => panic!("{other:?}"),
/// }
/// assert_eq!(Syndrome::from_byte(0x60), Syndrome::Nak(NakCode::PsnSequence));
/// assert!(matches!(Syndrome::from_byte(0x40), Syndrome::Reserved(_)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with a credit count (0x1F: "invalid", as rxe sends).
    Ack {
        /// Credit count code.
        credits: u8,
    },
    /// Receiver not ready: retry after the timer code's delay.
    RnrNak {
        /// RNR timer code, see [`rnr_timer_micros`].
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// Syndrome class `10` (reserved) or bit 7 set.
    Reserved(u8),
}

impl Syndrome {
    /// Decodes a syndrome byte.
    pub fn from_byte(s: u8) -> Self {
        if s & 0x80 != 0 {
            return Syndrome::Reserved(s);
        }
        match (s >> 5) & 3 {
            0 => Syndrome::Ack { credits: s & 0x1f },
            1 => Syndrome::RnrNak { timer: s & 0x1f },
            3 => Syndrome::Nak(NakCode::from_code(s & 0x1f)),
            _ => Syndrome::Reserved(s),
        }
    }

    /// Encodes a syndrome byte.
    pub fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(c) => 0x60 | c.code(),
            Syndrome::Reserved(s) => s,
        }
    }

    /// The ACK rxe sends: credit count 0x1F.
    pub const ACK: Syndrome = Syndrome::Ack { credits: 0x1f };
}

/// ACK extended transport header.
///
/// # Example
///
/// ```
/// use ndverbs_wire::ext::{Aeth, NakCode, Syndrome, AETH_LEN};
/// // An ACK of message 7 with credits, an RNR NAK, a NAK: one syndrome byte.
/// let ack = Aeth::new(Syndrome::ACK, 7);
/// assert_eq!((ack.syndrome, ack.msn), (0x1f, 7));
/// let nak = Aeth::new(Syndrome::Nak(NakCode::RemoteAccess), 7);
/// let mut b = [0u8; AETH_LEN];
/// nak.write(&mut b)?;
/// assert_eq!(b, [0x62, 0, 0, 7]);
/// assert_eq!(Aeth::parse(&b)?.kind(), Syndrome::Nak(NakCode::RemoteAccess));
/// assert_eq!(Syndrome::from_byte(0x2e), Syndrome::RnrNak { timer: 14 });
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Aeth {
    /// Raw syndrome byte; see [`Aeth::kind`].
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl Aeth {
    /// Builds an AETH.
    pub fn new(syndrome: Syndrome, msn: u32) -> Self {
        Aeth {
            syndrome: syndrome.to_byte(),
            msn: msn & crate::bth::MASK24,
        }
    }

    /// Decoded syndrome.
    pub fn kind(&self) -> Syndrome {
        Syndrome::from_byte(self.syndrome)
    }

    /// Parses 4 bytes.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        need("AETH", b, AETH_LEN)?;
        Ok(Aeth {
            syndrome: b[0],
            msn: u24_at(b, 1),
        })
    }

    /// Writes 4 bytes.
    pub fn write(&self, b: &mut [u8]) -> Result<usize, WireError> {
        room("AETH", b, AETH_LEN)?;
        b[0] = self.syndrome;
        put_u24(b, 1, self.msn);
        Ok(AETH_LEN)
    }
}

/// Minimum RNR NAK delay for each timer code, in microseconds (IBTA table 45).
pub const RNR_TIMER_MICROS: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The minimum delay an RNR NAK with timer code `code` asks for, in microseconds.
pub fn rnr_timer_micros(code: u8) -> u32 {
    RNR_TIMER_MICROS[usize::from(code & 0x1f)]
}

/// Local ACK timeout for an exponent: 4.096 µs × 2^t, in nanoseconds (0 = disabled).
pub fn ack_timeout_nanos(t: u8) -> Option<u64> {
    match t {
        0 => None,
        t if t < 32 => Some(4096u64 << t),
        _ => None,
    }
}

/// Atomic extended transport header.
///
/// # Example
///
/// ```
/// use ndverbs_wire::ext::{AtomicEth, ATOMIC_ETH_LEN};
/// // A FETCH & ADD of 1 on the 8 bytes at va (compare unused).
/// let eth = AtomicEth { va: 0x1000, rkey: 0x55, swap_add: 1, compare: 0 };
/// let mut b = [0u8; ATOMIC_ETH_LEN];
/// eth.write(&mut b)?;
/// assert_eq!(AtomicEth::parse(&b)?, eth);
/// assert!(AtomicEth::parse(&b[..20]).is_err());
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEth {
    /// Remote virtual address (8-byte aligned for the operation to succeed).
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value (CMP&SWAP) or addend (FETCH&ADD).
    pub swap_add: u64,
    /// Compare value (CMP&SWAP only).
    pub compare: u64,
}

impl AtomicEth {
    /// Parses 28 bytes.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        need("AtomicETH", b, ATOMIC_ETH_LEN)?;
        Ok(AtomicEth {
            va: u64_at(b, 0),
            rkey: u32_at(b, 8),
            swap_add: u64_at(b, 12),
            compare: u64_at(b, 20),
        })
    }

    /// Writes 28 bytes.
    pub fn write(&self, b: &mut [u8]) -> Result<usize, WireError> {
        room("AtomicETH", b, ATOMIC_ETH_LEN)?;
        put_u64(b, 0, self.va);
        put_u32(b, 8, self.rkey);
        put_u64(b, 12, self.swap_add);
        put_u64(b, 20, self.compare);
        Ok(ATOMIC_ETH_LEN)
    }
}

/// Datagram extended transport header.
///
/// # Example
///
/// ```
/// use ndverbs_wire::ext::{Deth, DETH_LEN};
/// // The CM's MADs go UD to QP1 with the well-known Q_Key.
/// let deth = Deth { qkey: 0x8001_0000, resv: 0, src_qpn: 1 };
/// let mut b = [0u8; DETH_LEN];
/// deth.write(&mut b)?;
/// assert_eq!(b, [0x80, 0x01, 0, 0, 0, 0, 0, 1]);
/// assert_eq!(Deth::parse(&b)?, deth);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Deth {
    /// Queue key.
    pub qkey: u32,
    /// Reserved byte.
    pub resv: u8,
    /// Source QP number (24 bits).
    pub src_qpn: u32,
}

impl Deth {
    /// Parses 8 bytes.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        need("DETH", b, DETH_LEN)?;
        Ok(Deth {
            qkey: u32_at(b, 0),
            resv: b[4],
            src_qpn: u24_at(b, 5),
        })
    }

    /// Writes 8 bytes.
    pub fn write(&self, b: &mut [u8]) -> Result<usize, WireError> {
        room("DETH", b, DETH_LEN)?;
        put_u32(b, 0, self.qkey);
        b[4] = self.resv;
        put_u24(b, 5, self.src_qpn);
        Ok(DETH_LEN)
    }
}

pub(crate) fn parse_word(what: &'static str, b: &[u8]) -> Result<u32, WireError> {
    need(what, b, WORD_LEN)?;
    Ok(u32_at(b, 0))
}

pub(crate) fn write_word(what: &'static str, v: u32, b: &mut [u8]) -> Result<usize, WireError> {
    room(what, b, WORD_LEN)?;
    put_u32(b, 0, v);
    Ok(WORD_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_round_trip() {
        for s in 0u8..=255 {
            assert_eq!(Syndrome::from_byte(s).to_byte(), s);
        }
        assert_eq!(Syndrome::from_byte(0x1f), Syndrome::ACK);
        assert_eq!(Syndrome::from_byte(0x2c), Syndrome::RnrNak { timer: 12 });
        assert_eq!(
            Syndrome::from_byte(0x62),
            Syndrome::Nak(NakCode::RemoteAccess)
        );
        assert_eq!(rnr_timer_micros(12), 640);
        assert_eq!(rnr_timer_micros(0), 655_360);
        assert_eq!(ack_timeout_nanos(14), Some(67_108_864));
    }
}
