//! The one error type of the wire layer.
//!
//! Every parser in this crate returns [`WireError`] instead of panicking, and the
//! message names the header and field that is wrong, so a dropped packet can be
//! explained in a log line or a counter label.

/// What is wrong with a packet or a field value.
///
/// # Example
///
/// ```
/// use ndverbs_wire::{ext::Reth, WireError};
/// // Parsers never panic: short input is an error naming what was cut.
/// let err = Reth::parse(&[0u8; 10]).unwrap_err();
/// assert_eq!(err, WireError::Truncated { what: "RETH", need: 16, have: 10 });
/// assert_eq!(err.to_string(), "RETH: truncated (10 bytes, need 16)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The buffer ends before the named structure does.
    #[error("{what}: truncated ({have} bytes, need {need})")]
    Truncated {
        /// The structure being read.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The IP version nibble is neither 4 nor 6 (or not the one expected).
    #[error("IP header: version {0} is not supported")]
    IpVersion(u8),
    /// IPv4 options: RoCEv2 never uses them and rxe's ICRC covers exactly 20 bytes.
    #[error("IPv4 header: IHL {0} means options, which RoCEv2 does not use")]
    Ipv4Options(u8),
    /// A fragmented IPv4 datagram (MF set or a non-zero offset).
    #[error("IPv4 header: fragment (flags/offset 0x{0:04x}); RoCEv2 packets are never fragmented")]
    Ipv4Fragment(u16),
    /// The IP payload is not UDP.
    #[error("IP header: protocol/next header {0} is not UDP (17)")]
    NotUdp(u8),
    /// A length field disagrees with the bytes present.
    #[error("{what}: length field says {claimed} bytes, {actual} present")]
    Length {
        /// The header whose length field is wrong.
        what: &'static str,
        /// The value of the length field.
        claimed: usize,
        /// The bytes actually present.
        actual: usize,
    },
    /// UDP destination port is not RoCEv2's 4791.
    #[error("UDP header: destination port {0} is not RoCEv2 (4791)")]
    NotRoceV2Port(u16),
    /// An opcode this crate does not know (RD, XRC, reserved values).
    #[error("BTH: opcode 0x{0:02x} is not a supported RC/UC/UD/CNP opcode")]
    UnknownOpcode(u8),
    /// BTH.TVer must be 0.
    #[error("BTH: transport version {0} is not 0")]
    TransportVersion(u8),
    /// The pad count claims more bytes than the payload has, or pad bytes on an opcode without payload.
    #[error("BTH: pad count {pad} does not fit a {len}-byte payload area")]
    Pad {
        /// BTH.PadCnt.
        pad: u8,
        /// Bytes between the headers and the ICRC.
        len: usize,
    },
    /// An opcode that carries no payload has payload bytes.
    #[error("{opcode}: carries no payload but {len} bytes follow the headers")]
    UnexpectedPayload {
        /// Opcode name.
        opcode: &'static str,
        /// Stray payload bytes.
        len: usize,
    },
    /// A payload length that breaks the opcode's rule for the path MTU.
    #[error("{opcode}: payload of {len} bytes breaks the rule \"{rule}\" for MTU {mtu}")]
    PayloadLength {
        /// Opcode name.
        opcode: &'static str,
        /// Payload bytes.
        len: usize,
        /// Path MTU checked against.
        mtu: usize,
        /// The rule that was broken.
        rule: &'static str,
    },
    /// A field holds a value outside what the protocol allows.
    #[error("{what}: value {value} is not valid")]
    Field {
        /// Header and field.
        what: &'static str,
        /// The offending value.
        value: u64,
    },
    /// The extension headers given do not match the opcode's header set.
    #[error("{opcode}: extension header {header} {}", if *present { "is not allowed" } else { "is missing" })]
    HeaderMismatch {
        /// Opcode name.
        opcode: &'static str,
        /// The header in question.
        header: &'static str,
        /// True if it was present but not allowed; false if required but missing.
        present: bool,
    },
    /// A MAD that is not exactly 256 bytes.
    #[error("MAD: {0} bytes, a MAD is exactly 256")]
    MadSize(usize),
    /// A MAD of a class other than the one asked for.
    #[error("MAD: management class 0x{0:02x} is not the connection manager (0x07)")]
    NotCm(u8),
    /// A CM attribute this crate does not decode.
    #[error("CM MAD: attribute 0x{0:04x} is not a CM message")]
    UnknownCmAttribute(u16),
    /// Private data longer than the message allows.
    #[error("{msg}: {len} bytes of private data, at most {max} fit")]
    PrivateDataTooLong {
        /// The message.
        msg: &'static str,
        /// Bytes offered.
        len: usize,
        /// Bytes the message has room for.
        max: usize,
    },
    /// The buffer handed to an encoder is too small.
    #[error("{what}: output buffer of {have} bytes, need {need}")]
    BufferTooSmall {
        /// What was being written.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
}

/// Fails with [`WireError::Truncated`] unless `buf` holds at least `need` bytes.
pub(crate) fn need(what: &'static str, buf: &[u8], need: usize) -> Result<(), WireError> {
    at_least(buf, need, |have| WireError::Truncated { what, need, have })
}

/// Fails with [`WireError::BufferTooSmall`] unless `buf` holds at least `need` bytes.
pub(crate) fn room(what: &'static str, buf: &[u8], need: usize) -> Result<(), WireError> {
    at_least(buf, need, |have| WireError::BufferTooSmall {
        what,
        need,
        have,
    })
}

/// Fails with `short(buf.len())` unless `buf` holds at least `need` bytes.
fn at_least(
    buf: &[u8],
    need: usize,
    short: impl FnOnce(usize) -> WireError,
) -> Result<(), WireError> {
    if buf.len() < need {
        Err(short(buf.len()))
    } else {
        Ok(())
    }
}
