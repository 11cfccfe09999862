//! Bit-field helpers shared by the CM message layouts, and private data.
//!
//! CM layouts pack several sub-byte fields per byte (bit 7 is the MSB, as the
//! IBTA tables number them); `bits`/`field` read and write one such field.

use crate::be::{put_u32, u32_at};
use crate::error::WireError;
use std::net::Ipv6Addr;

#[inline]
pub(super) fn bits(b: &[u8], byte: usize, shift: u8, width: u8) -> u8 {
    (b[byte] >> shift) & ((1u16 << width) - 1) as u8
}

#[inline]
pub(super) fn bit(b: &[u8], byte: usize, shift: u8) -> bool {
    b[byte] >> shift & 1 != 0
}

#[inline]
pub(super) fn field(v: u8, shift: u8, width: u8) -> u8 {
    (v & ((1u16 << width) - 1) as u8) << shift
}

pub(super) fn gid(b: &[u8], off: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    Ipv6Addr::from(a)
}

pub(super) fn array<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[off..off + N]);
    a
}

/// Copies `data` into a zero-filled private data area, or fails if it does not fit.
pub fn private_data<const N: usize>(msg: &'static str, data: &[u8]) -> Result<[u8; N], WireError> {
    if data.len() > N {
        return Err(WireError::PrivateDataTooLong {
            msg,
            len: data.len(),
            max: N,
        });
    }
    let mut a = [0u8; N];
    a[..data.len()].copy_from_slice(data);
    Ok(a)
}

/// The sender's and the receiver's communication IDs, the first eight bytes
/// of every message that answers or follows a REQ.
pub(super) fn comm_ids(b: &[u8]) -> (u32, u32) {
    (u32_at(b, 0), u32_at(b, 4))
}

/// Writes the two communication IDs (see [`comm_ids`]).
pub(super) fn put_comm_ids(b: &mut [u8], local: u32, remote: u32) {
    put_u32(b, 0, local);
    put_u32(b, 4, remote);
}
