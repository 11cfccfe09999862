//! The base transport header (BTH) and PSN arithmetic.
//!
//! ```text
//!  byte 0   opcode
//!  byte 1   SE(7) MigReq(6) PadCnt(5:4) TVer(3:0)
//!  2..4     P_Key
//!  byte 4   FECN(7) BECN(6) reserved(5:0)     <- masked to 0xFF in the ICRC
//!  5..8     destination QP (24 bits)
//!  byte 8   AckReq(7) reserved(6:0)
//!  9..12    PSN (24 bits)
//! ```

use crate::be::{put_u16, put_u24, u16_at, u24_at};
use crate::error::{need, room, WireError};
use crate::opcode::Opcode;

/// Bytes in a BTH.
pub const BTH_LEN: usize = 12;
/// The default partition key (full membership, default partition).
pub const DEFAULT_PKEY: u16 = 0xffff;
/// 24-bit field mask (QPNs and PSNs).
pub const MASK24: u32 = 0x00ff_ffff;

/// A parsed BTH. Every bit is kept so a header re-encodes to identical bytes.
///
/// # Example
///
/// ```
/// use ndverbs_wire::bth::{psn, Bth, BTH_LEN};
/// use ndverbs_wire::opcode::Opcode;
/// let mut bth = Bth::new(Opcode::RC_SEND_ONLY, 0x11, psn::add(0xff_ffff, 1)); // PSNs wrap at 2^24
/// bth.ack_req = true;
/// let mut buf = [0u8; BTH_LEN];
/// bth.write(&mut buf)?;
/// assert_eq!(buf[..4], [0x04, 0x00, 0xff, 0xff]); // opcode, flags, default P_Key
/// let back = Bth::parse(&buf)?;
/// assert_eq!((back.dqpn, back.psn, back.ack_req), (0x11, 0, true));
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bth {
    /// Operation code.
    pub opcode: Opcode,
    /// Solicited event.
    pub se: bool,
    /// Migration request (rxe sends 0).
    pub mig_req: bool,
    /// Pad count, 0..=3 bytes after the payload.
    pub pad: u8,
    /// Transport header version, must be 0.
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward explicit congestion notification.
    pub fecn: bool,
    /// Backward explicit congestion notification.
    pub becn: bool,
    /// The six reserved bits of byte 4.
    pub resv6: u8,
    /// Destination QP number (24 bits).
    pub dqpn: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// The seven reserved bits of byte 8.
    pub resv7: u8,
    /// Packet sequence number (24 bits).
    pub psn: u32,
}

impl Bth {
    /// A BTH with the common defaults: default P_Key, everything else clear.
    pub fn new(opcode: Opcode, dqpn: u32, psn: u32) -> Self {
        Bth {
            opcode,
            se: false,
            mig_req: false,
            pad: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            resv6: 0,
            dqpn: dqpn & MASK24,
            ack_req: false,
            resv7: 0,
            psn: psn & MASK24,
        }
    }

    /// Parses the first 12 bytes of `buf`. Only TVer is validated here.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        need("BTH", buf, BTH_LEN)?;
        let tver = buf[1] & 0x0f;
        if tver != 0 {
            return Err(WireError::TransportVersion(tver));
        }
        Ok(Bth {
            opcode: Opcode(buf[0]),
            se: buf[1] & 0x80 != 0,
            mig_req: buf[1] & 0x40 != 0,
            pad: (buf[1] >> 4) & 3,
            tver,
            pkey: u16_at(buf, 2),
            fecn: buf[4] & 0x80 != 0,
            becn: buf[4] & 0x40 != 0,
            resv6: buf[4] & 0x3f,
            dqpn: u24_at(buf, 5),
            ack_req: buf[8] & 0x80 != 0,
            resv7: buf[8] & 0x7f,
            psn: u24_at(buf, 9),
        })
    }

    /// Writes 12 bytes; out-of-range values are truncated to their field width.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        room("BTH", buf, BTH_LEN)?;
        buf[0] = self.opcode.0;
        buf[1] = (u8::from(self.se) << 7)
            | (u8::from(self.mig_req) << 6)
            | ((self.pad & 3) << 4)
            | (self.tver & 0x0f);
        put_u16(buf, 2, self.pkey);
        buf[4] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6) | (self.resv6 & 0x3f);
        put_u24(buf, 5, self.dqpn);
        buf[8] = (u8::from(self.ack_req) << 7) | (self.resv7 & 0x7f);
        put_u24(buf, 9, self.psn);
        Ok(BTH_LEN)
    }
}

/// 24-bit packet sequence number arithmetic.
///
/// PSNs wrap modulo 2^24; "a is after b" is decided by the sign of the 24-bit
/// difference, exactly as rxe's `psn_compare` does.
pub mod psn {
    use super::MASK24;

    /// `a + n` modulo 2^24.
    #[inline]
    pub fn add(a: u32, n: u32) -> u32 {
        a.wrapping_add(n) & MASK24
    }

    /// `a - n` modulo 2^24.
    #[inline]
    pub fn sub(a: u32, n: u32) -> u32 {
        a.wrapping_sub(n) & MASK24
    }

    /// Signed distance from `b` to `a` (positive: `a` is after `b`).
    #[inline]
    pub fn diff(a: u32, b: u32) -> i32 {
        (a.wrapping_sub(b) << 8) as i32 >> 8
    }

    /// Orders two PSNs on the 24-bit circle.
    #[inline]
    pub fn cmp(a: u32, b: u32) -> std::cmp::Ordering {
        diff(a, b).cmp(&0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_wraps() {
        assert_eq!(psn::add(0xff_fffe, 3), 1);
        assert_eq!(psn::sub(1, 3), 0xff_fffe);
        assert_eq!(psn::diff(1, 0xff_ffff), 2);
        assert_eq!(psn::diff(0xff_ffff, 1), -2);
        assert_eq!(psn::cmp(5, 5), std::cmp::Ordering::Equal);
    }

    #[test]
    fn rejects_nonzero_tver() {
        let mut b = [0u8; 12];
        Bth::new(Opcode::RC_ACK, 1, 2).write(&mut b).unwrap();
        b[1] |= 1;
        assert_eq!(Bth::parse(&b), Err(WireError::TransportVersion(1)));
    }
}
