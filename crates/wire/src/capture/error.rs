//! The one error type of the capture readers.

use super::pcapng::block_name;

/// Why a capture file could not be read.
///
/// Every variant says where in the file the problem is, as a byte offset from
/// the start of the file, so a broken capture can be inspected with a hex
/// dump. pcapng variants also name the block (by name and numeric type).
///
/// # Example
///
/// ```
/// use ndverbs_wire::capture::{read_frames, CaptureError};
/// let err = read_frames(b"not a capture file").unwrap_err();
/// assert!(matches!(err, CaptureError::UnknownMagic { .. }));
/// println!("{err}"); // says what is wrong and where
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureError {
    /// The file ends inside a structure that the format says must be whole.
    #[error(
        "truncated {what} at offset {offset}: needs {needed} bytes, only {available} left in the file"
    )]
    Truncated {
        /// The structure that was cut short, e.g. `"pcap record header"`.
        what: &'static str,
        /// Where that structure starts.
        offset: usize,
        /// How many bytes it needs.
        needed: usize,
        /// How many bytes the file has from `offset` on.
        available: usize,
    },

    /// The first four bytes are neither a pcap magic nor a pcapng section
    /// header.
    #[error(
        "unrecognised magic number {magic:#010x} at offset 0 (read big-endian): not a pcap or pcapng file"
    )]
    UnknownMagic {
        /// The first four bytes, read big-endian so they print as stored.
        magic: u32,
    },

    /// A header carries a major version whose layout we do not know.
    #[error("unsupported {format} version {major}.{minor} in the header at offset {offset}")]
    UnsupportedVersion {
        /// `"pcap"` or `"pcapng"`.
        format: &'static str,
        /// Where the header (file header or section header block) starts.
        offset: usize,
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },

    /// A pcapng section header's byte-order magic is `0x1a2b3c4d` in neither
    /// byte order, so nothing in that section can be decoded.
    #[error(
        "pcapng section header byte-order magic at offset {offset} is {magic:#010x} (read big-endian), expected 0x1a2b3c4d in either byte order"
    )]
    BadByteOrderMagic {
        /// Where the byte-order magic is (section header start + 8).
        offset: usize,
        /// The four bytes, read big-endian so they print as stored.
        magic: u32,
    },

    /// A pcapng block's total length cannot be right.
    #[error(
        "{} (type {block_type:#x}) at offset {offset} has total length {length}, {reason}",
        block_name(*.block_type)
    )]
    BadBlockLength {
        /// Numeric block type.
        block_type: u32,
        /// Where the block starts.
        offset: usize,
        /// Total length from the block header.
        length: u32,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A pcapng block's trailing length differs from its leading one, which
    /// means the leading length is corrupt and the next block would be read
    /// from the wrong place.
    #[error(
        "{} (type {block_type:#x}) at offset {offset} has total length {leading} but its trailing copy says {trailing}",
        block_name(*.block_type)
    )]
    LengthMismatch {
        /// Numeric block type.
        block_type: u32,
        /// Where the block starts.
        offset: usize,
        /// Total length from the block header.
        leading: u32,
        /// Total length from the block trailer.
        trailing: u32,
    },

    /// A pcapng packet block names an interface that its section has not
    /// described (yet), so its link type is unknown.
    #[error(
        "{} (type {block_type:#x}) at offset {offset} refers to interface {interface_id}, but its section has described only {described} interface(s) so far",
        block_name(*.block_type)
    )]
    UnknownInterface {
        /// Numeric block type.
        block_type: u32,
        /// Where the block starts.
        offset: usize,
        /// Interface id from the block (always 0 for a simple packet block).
        interface_id: u32,
        /// Interface description blocks seen in the section before this block.
        described: usize,
    },

    /// A pcapng packet block claims more captured bytes than it holds.
    #[error(
        "{} (type {block_type:#x}) at offset {offset} claims {caplen} captured bytes, but only {room} fit in the block",
        block_name(*.block_type)
    )]
    PacketOverrun {
        /// Numeric block type.
        block_type: u32,
        /// Where the block starts.
        offset: usize,
        /// Captured length from the block.
        caplen: u32,
        /// Bytes of the block body available for packet data.
        room: usize,
    },

    /// A pcapng option's header or value runs past the end of its block.
    #[error(
        "option at offset {offset} in the {} (type {block_type:#x}) runs past the end of the block",
        block_name(*.block_type)
    )]
    OptionOverrun {
        /// Numeric block type.
        block_type: u32,
        /// Where the option starts.
        offset: usize,
    },

    /// A pcapng option we interpret has a value we cannot use.
    #[error(
        "option {code} at offset {offset} in the {} (type {block_type:#x}): {reason}",
        block_name(*.block_type)
    )]
    BadOption {
        /// Numeric block type.
        block_type: u32,
        /// Where the option starts.
        offset: usize,
        /// Option code.
        code: u16,
        /// What is wrong with it.
        reason: &'static str,
    },
}
