//! Bounds-checked, byte-order-aware field reads shared by the readers.
//!
//! Every read returns `Option` so that a length field pointing past the end of
//! the file turns into an error at the call site instead of a panic.

/// Byte order of the fields of a pcap file or of one pcapng section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Endian {
    Little,
    Big,
}

impl Endian {
    pub(super) fn u16(self, b: [u8; 2]) -> u16 {
        match self {
            Endian::Little => u16::from_le_bytes(b),
            Endian::Big => u16::from_be_bytes(b),
        }
    }

    pub(super) fn u32(self, b: [u8; 4]) -> u32 {
        match self {
            Endian::Little => u32::from_le_bytes(b),
            Endian::Big => u32::from_be_bytes(b),
        }
    }

    pub(super) fn i64(self, b: [u8; 8]) -> i64 {
        match self {
            Endian::Little => i64::from_le_bytes(b),
            Endian::Big => i64::from_be_bytes(b),
        }
    }

    pub(super) fn u16_at(self, data: &[u8], at: usize) -> Option<u16> {
        Some(self.u16(array(data, at)?))
    }

    pub(super) fn u32_at(self, data: &[u8], at: usize) -> Option<u32> {
        Some(self.u32(array(data, at)?))
    }

    #[cfg(test)]
    pub(super) fn u16_bytes(self, v: u16) -> [u8; 2] {
        match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }

    #[cfg(test)]
    pub(super) fn u32_bytes(self, v: u32) -> [u8; 4] {
        match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }

    #[cfg(test)]
    pub(super) fn i64_bytes(self, v: i64) -> [u8; 8] {
        match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }
}

/// `N` bytes starting at `at`, or `None` if they run past the end.
pub(super) fn array<const N: usize>(data: &[u8], at: usize) -> Option<[u8; N]> {
    slice(data, at, N)?.try_into().ok()
}

/// `len` bytes starting at `at`, or `None` if they run past the end.
pub(super) fn slice(data: &[u8], at: usize, len: usize) -> Option<&[u8]> {
    data.get(at..at.checked_add(len)?)
}

/// Rounds up to the 32-bit boundary that pcapng pads fields to. Saturates
/// rather than wraps, so an absurd length still fails the next bounds check.
pub(super) fn pad4(len: usize) -> usize {
    len.saturating_add(3) & !3
}

/// Widens a length read from the file. On targets where `usize` is narrower
/// than 32 bits the saturated value cannot fit in memory either, so the
/// following bounds check reports it as truncation.
pub(super) fn to_usize(v: u32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}
