//! BTH opcodes: which headers follow, what payload is allowed.
//!
//! The top three bits of an opcode name the transport (RC `000`, UC `001`,
//! RD `010`, UD `011`, CNP `100`); the low five the operation. Every opcode
//! implies a fixed set of extension headers in a fixed order after the BTH —
//! `DETH`, `FETH`, `RETH`/`AtomicETH`, `AETH`, `AtomicAckETH`, `ImmDt`/`IETH` — and
//! a payload rule. Multi-packet messages use FIRST/MIDDLE packets of exactly the
//! path MTU and a LAST packet of 1..MTU bytes; ONLY packets carry 0..MTU.
//!
//! RD and XRC opcodes are not supported: Linux rxe does not speak them either.

use crate::error::WireError;

/// The extension headers an opcode carries (a bit set).
///
/// # Example
///
/// ```
/// use ndverbs_wire::opcode::{Headers, Opcode};
/// let h = Opcode::RC_WRITE_ONLY_IMM.info()?.headers;
/// assert!(h.contains(Headers::RETH) && h.contains(Headers::IMMDT));
/// assert!(!h.contains(Headers::AETH));
/// assert_eq!(Opcode::RC_SEND_MIDDLE.info()?.headers, Headers::NONE);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(u16);

impl Headers {
    /// RDMA extended transport header (16 bytes).
    pub const RETH: Headers = Headers(1 << 0);
    /// ACK extended transport header (4 bytes).
    pub const AETH: Headers = Headers(1 << 1);
    /// Atomic extended transport header (28 bytes).
    pub const ATOMIC_ETH: Headers = Headers(1 << 2);
    /// Atomic ACK extended transport header (8 bytes).
    pub const ATOMIC_ACK_ETH: Headers = Headers(1 << 3);
    /// Immediate data (4 bytes).
    pub const IMMDT: Headers = Headers(1 << 4);
    /// Invalidate extended transport header (4 bytes).
    pub const IETH: Headers = Headers(1 << 5);
    /// Datagram extended transport header (8 bytes).
    pub const DETH: Headers = Headers(1 << 6);
    /// Flush extended transport header (4 bytes).
    pub const FETH: Headers = Headers(1 << 7);
    /// The 16 reserved bytes of a congestion notification packet.
    pub const CNP: Headers = Headers(1 << 8);
    /// No extension headers.
    pub const NONE: Headers = Headers(0);

    /// True if every header in `other` is in `self`.
    pub const fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0
    }

    /// The headers in either set.
    pub const fn with(self, other: Headers) -> Headers {
        Headers(self.0 | other.0)
    }
}

/// What a packet's payload may hold.
///
/// # Example
///
/// ```
/// use ndverbs_wire::opcode::{Opcode, Payload};
/// // A FIRST or MIDDLE packet is exactly one MTU; an ACK carries nothing.
/// assert_eq!(Opcode::RC_SEND_FIRST.info()?.payload, Payload::FullMtu);
/// assert_eq!(Opcode::RC_ACK.info()?.payload, Payload::None);
/// assert_eq!(Opcode::RC_ATOMIC_WRITE.info()?.payload, Payload::Eight);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Payload {
    /// No payload bytes at all.
    None,
    /// Exactly the path MTU (FIRST, MIDDLE).
    FullMtu,
    /// 1..=MTU bytes (LAST without immediate).
    LastMtu,
    /// 0..=MTU bytes (ONLY, LAST with immediate/invalidate, UD).
    UpToMtu,
    /// Exactly 8 bytes (ATOMIC_WRITE).
    Eight,
}

/// Where a packet sits in a message.
///
/// # Example
///
/// ```
/// use ndverbs_wire::opcode::{Opcode, Position};
/// // A 3-packet READ response: FIRST, MIDDLE, LAST.
/// let pos: Vec<Position> = [Opcode::RC_READ_RESPONSE_FIRST, Opcode::RC_READ_RESPONSE_MIDDLE, Opcode::RC_READ_RESPONSE_LAST]
///     .iter().map(|op| op.info().unwrap().position).collect();
/// assert_eq!(pos, [Position::First, Position::Middle, Position::Last]);
/// assert_eq!(Opcode::RC_SEND_ONLY.info()?.position, Position::Only);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First of several.
    First,
    /// Neither first nor last.
    Middle,
    /// Last of several.
    Last,
    /// The whole message.
    Only,
}

/// The transport service an opcode belongs to.
///
/// # Example
///
/// ```
/// use ndverbs_wire::opcode::{Opcode, Transport};
/// // The top three bits of the opcode name the transport.
/// assert_eq!(Opcode::RC_SEND_ONLY.info()?.transport, Transport::Rc);
/// assert_eq!(Opcode::UD_SEND_ONLY.info()?.transport, Transport::Ud);
/// assert_eq!(Opcode::CNP.info()?.transport, Transport::Cnp);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// Congestion notification packet.
    Cnp,
}

/// The operation family of an opcode.
///
/// # Example
///
/// ```
/// use ndverbs_wire::opcode::{Opcode, Operation};
/// let reads = Opcode::ALL.iter().filter(|op| op.info().unwrap().operation == Operation::ReadResponse).count();
/// assert_eq!(reads, 4); // FIRST, MIDDLE, LAST, ONLY
/// assert_eq!(Opcode::RC_FETCH_ADD.info()?.operation, Operation::FetchAdd);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND (any variant).
    Send,
    /// RDMA WRITE (any variant).
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// Plain acknowledgement (ACK/NAK).
    Acknowledge,
    /// Atomic acknowledgement.
    AtomicAcknowledge,
    /// COMPARE & SWAP.
    CompareSwap,
    /// FETCH & ADD.
    FetchAdd,
    /// FLUSH (rxe extension).
    Flush,
    /// ATOMIC WRITE (rxe extension).
    AtomicWrite,
    /// Congestion notification.
    Cnp,
}

/// Static facts about one opcode.
///
/// # Example
///
/// ```
/// use ndverbs_wire::opcode::Opcode;
/// let info = Opcode::RC_SEND_LAST_IMM.info()?;
/// assert_eq!(info.name, "RC Send Last Immediate");
/// assert!(info.is_request() && info.is_last() && !info.is_first());
/// assert_eq!(info.ext_len(), 4); // the immediate data
/// assert!(!Opcode::RC_ACK.info()?.is_request()); // responses go to the completer
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The name tshark and the IBTA use, e.g. `"RC RDMA Write First"`.
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// Operation family.
    pub operation: Operation,
    /// Position in the message.
    pub position: Position,
    /// Extension headers, in wire order as given by [`Headers`].
    pub headers: Headers,
    /// Payload rule.
    pub payload: Payload,
}

impl OpcodeInfo {
    /// True for packets a requester sends (the responder consumes them).
    pub fn is_request(&self) -> bool {
        !matches!(
            self.operation,
            Operation::ReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
        )
    }

    /// True if this is the last (or only) packet of a message.
    pub fn is_last(&self) -> bool {
        matches!(self.position, Position::Last | Position::Only)
    }

    /// True if this is the first (or only) packet of a message.
    pub fn is_first(&self) -> bool {
        matches!(self.position, Position::First | Position::Only)
    }

    /// Bytes of extension headers after the BTH.
    pub fn ext_len(&self) -> usize {
        // Indexed by the bit of each header in `Headers`.
        const LEN: [u8; 9] = [16, 4, 28, 8, 4, 4, 8, 4, 16];
        let mut bits = self.headers.0;
        let mut n = 0;
        while bits != 0 {
            n += usize::from(LEN[bits.trailing_zeros() as usize % LEN.len()]);
            bits &= bits - 1;
        }
        n
    }

    /// Checks a payload length against this opcode's rule for a path MTU.
    pub fn check_payload_len(&self, len: usize, mtu: usize) -> Result<(), WireError> {
        let (ok, rule) = match self.payload {
            Payload::None => (len == 0, "no payload"),
            Payload::FullMtu => (len == mtu, "exactly the path MTU"),
            Payload::LastMtu => (len >= 1 && len <= mtu, "1..=MTU bytes"),
            Payload::UpToMtu => (len <= mtu, "at most the path MTU"),
            Payload::Eight => (len == 8, "exactly 8 bytes"),
        };
        if ok {
            Ok(())
        } else {
            Err(WireError::PayloadLength {
                opcode: self.name,
                len,
                mtu,
                rule,
            })
        }
    }
}

/// A BTH opcode byte.
///
/// # Example
///
/// ```
/// use ndverbs_wire::opcode::{Opcode, Operation, Transport};
/// let info = Opcode::RC_READ_REQUEST.info()?;
/// assert_eq!((info.name, info.transport, info.operation), ("RC RDMA Read Request", Transport::Rc, Operation::ReadRequest));
/// assert!(info.is_request() && info.is_first() && info.is_last());
/// assert_eq!(info.ext_len(), 16); // the RETH
/// assert!(Opcode(0x1f).info().is_err()); // reserved
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

macro_rules! opcodes {
    ($($konst:ident = $val:literal, $name:literal, $tr:ident, $op:ident, $pos:ident, [$($h:ident),*], $pl:ident;)*) => {
        impl Opcode {
            $(
                #[doc = $name]
                pub const $konst: Opcode = Opcode($val);
            )*

            /// Facts about this opcode, or an error for RD, XRC and reserved values.
            pub fn info(self) -> Result<&'static OpcodeInfo, WireError> {
                match &OPCODE_TABLE[usize::from(self.0)] {
                    Some(i) => Ok(i),
                    None => Err(WireError::UnknownOpcode(self.0)),
                }
            }

            const fn lookup(v: u8) -> Option<OpcodeInfo> {
                match v {
                    $($val => Some(OpcodeInfo {
                        name: $name,
                        transport: Transport::$tr,
                        operation: Operation::$op,
                        position: Position::$pos,
                        headers: Headers::NONE $(.with(Headers::$h))*,
                        payload: Payload::$pl,
                    }),)*
                    _ => None,
                }
            }

            /// Every supported opcode.
            pub const ALL: &'static [Opcode] = &[$(Opcode($val)),*];
        }
    };
}

opcodes! {
    RC_SEND_FIRST = 0x00, "RC Send First", Rc, Send, First, [], FullMtu;
    RC_SEND_MIDDLE = 0x01, "RC Send Middle", Rc, Send, Middle, [], FullMtu;
    RC_SEND_LAST = 0x02, "RC Send Last", Rc, Send, Last, [], LastMtu;
    RC_SEND_LAST_IMM = 0x03, "RC Send Last Immediate", Rc, Send, Last, [IMMDT], UpToMtu;
    RC_SEND_ONLY = 0x04, "RC Send Only", Rc, Send, Only, [], UpToMtu;
    RC_SEND_ONLY_IMM = 0x05, "RC Send Only Immediate", Rc, Send, Only, [IMMDT], UpToMtu;
    RC_WRITE_FIRST = 0x06, "RC RDMA Write First", Rc, Write, First, [RETH], FullMtu;
    RC_WRITE_MIDDLE = 0x07, "RC RDMA Write Middle", Rc, Write, Middle, [], FullMtu;
    RC_WRITE_LAST = 0x08, "RC RDMA Write Last", Rc, Write, Last, [], LastMtu;
    RC_WRITE_LAST_IMM = 0x09, "RC RDMA Write Last with Immediate", Rc, Write, Last, [IMMDT], UpToMtu;
    RC_WRITE_ONLY = 0x0a, "RC RDMA Write Only", Rc, Write, Only, [RETH], UpToMtu;
    RC_WRITE_ONLY_IMM = 0x0b, "RC RDMA Write Only with Immediate", Rc, Write, Only, [RETH, IMMDT], UpToMtu;
    RC_READ_REQUEST = 0x0c, "RC RDMA Read Request", Rc, ReadRequest, Only, [RETH], None;
    RC_READ_RESPONSE_FIRST = 0x0d, "RC RDMA Read Response First", Rc, ReadResponse, First, [AETH], FullMtu;
    RC_READ_RESPONSE_MIDDLE = 0x0e, "RC RDMA Read Response Middle", Rc, ReadResponse, Middle, [], FullMtu;
    RC_READ_RESPONSE_LAST = 0x0f, "RC RDMA Read Response Last", Rc, ReadResponse, Last, [AETH], LastMtu;
    RC_READ_RESPONSE_ONLY = 0x10, "RC RDMA Read Response Only", Rc, ReadResponse, Only, [AETH], UpToMtu;
    RC_ACK = 0x11, "RC Acknowledge", Rc, Acknowledge, Only, [AETH], None;
    RC_ATOMIC_ACK = 0x12, "RC Atomic Acknowledge", Rc, AtomicAcknowledge, Only, [AETH, ATOMIC_ACK_ETH], None;
    RC_COMPARE_SWAP = 0x13, "RC CmpSwap", Rc, CompareSwap, Only, [ATOMIC_ETH], None;
    RC_FETCH_ADD = 0x14, "RC FetchAdd", Rc, FetchAdd, Only, [ATOMIC_ETH], None;
    RC_SEND_LAST_INV = 0x16, "RC Send Last Invalidate", Rc, Send, Last, [IETH], UpToMtu;
    RC_SEND_ONLY_INV = 0x17, "RC Send Only Invalidate", Rc, Send, Only, [IETH], UpToMtu;
    RC_FLUSH = 0x1c, "RC Flush", Rc, Flush, Only, [FETH, RETH], None;
    RC_ATOMIC_WRITE = 0x1d, "RC Atomic Write", Rc, AtomicWrite, Only, [RETH], Eight;
    UC_SEND_FIRST = 0x20, "UC Send First", Uc, Send, First, [], FullMtu;
    UC_SEND_MIDDLE = 0x21, "UC Send Middle", Uc, Send, Middle, [], FullMtu;
    UC_SEND_LAST = 0x22, "UC Send Last", Uc, Send, Last, [], LastMtu;
    UC_SEND_LAST_IMM = 0x23, "UC Send Last Immediate", Uc, Send, Last, [IMMDT], UpToMtu;
    UC_SEND_ONLY = 0x24, "UC Send Only", Uc, Send, Only, [], UpToMtu;
    UC_SEND_ONLY_IMM = 0x25, "UC Send Only Immediate", Uc, Send, Only, [IMMDT], UpToMtu;
    UC_WRITE_FIRST = 0x26, "UC RDMA Write First", Uc, Write, First, [RETH], FullMtu;
    UC_WRITE_MIDDLE = 0x27, "UC RDMA Write Middle", Uc, Write, Middle, [], FullMtu;
    UC_WRITE_LAST = 0x28, "UC RDMA Write Last", Uc, Write, Last, [], LastMtu;
    UC_WRITE_LAST_IMM = 0x29, "UC RDMA Write Last with Immediate", Uc, Write, Last, [IMMDT], UpToMtu;
    UC_WRITE_ONLY = 0x2a, "UC RDMA Write Only", Uc, Write, Only, [RETH], UpToMtu;
    UC_WRITE_ONLY_IMM = 0x2b, "UC RDMA Write Only with Immediate", Uc, Write, Only, [RETH, IMMDT], UpToMtu;
    UD_SEND_ONLY = 0x64, "UD Send Only", Ud, Send, Only, [DETH], UpToMtu;
    UD_SEND_ONLY_IMM = 0x65, "UD Send Only Immediate", Ud, Send, Only, [DETH, IMMDT], UpToMtu;
    CNP = 0x81, "CNP", Cnp, Cnp, Only, [CNP], None;
}

/// Facts for every opcode value, built at compile time so lookups are one index.
static OPCODE_TABLE: [Option<OpcodeInfo>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = Opcode::lookup(i as u8);
        i += 1;
    }
    t
};

impl std::fmt::Display for Opcode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.info() {
            Ok(i) => f.write_str(i.name),
            Err(_) => write!(f, "opcode 0x{:02x}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        for &op in Opcode::ALL {
            let i = op.info().unwrap();
            match i.transport {
                Transport::Rc => assert_eq!(op.0 >> 5, 0),
                Transport::Uc => {
                    assert_eq!(op.0 >> 5, 1);
                    // UC mirrors RC's SEND/WRITE opcodes.
                    let rc = Opcode(op.0 - 0x20).info().unwrap();
                    assert_eq!((rc.headers, rc.payload), (i.headers, i.payload));
                }
                Transport::Ud => assert_eq!(op.0 >> 5, 3),
                Transport::Cnp => assert_eq!(op.0, 0x81),
            }
            if i.headers.contains(Headers::RETH) && i.operation != Operation::Flush {
                assert!(i.is_first());
            }
        }
        assert_eq!(Opcode::RC_ATOMIC_ACK.info().unwrap().ext_len(), 12);
        assert_eq!(Opcode::RC_FLUSH.info().unwrap().ext_len(), 20);
        assert!(Opcode(0x15).info().is_err());
        assert!(Opcode(0x40).info().is_err());
    }

    #[test]
    fn payload_rules() {
        let first = Opcode::RC_WRITE_FIRST.info().unwrap();
        assert!(first.check_payload_len(1024, 1024).is_ok());
        assert!(first.check_payload_len(1000, 1024).is_err());
        let last = Opcode::RC_SEND_LAST.info().unwrap();
        assert!(last.check_payload_len(0, 1024).is_err());
        assert!(Opcode::RC_SEND_ONLY
            .info()
            .unwrap()
            .check_payload_len(0, 256)
            .is_ok());
    }
}
