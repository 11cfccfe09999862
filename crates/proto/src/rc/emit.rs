//! Writing one transport packet (BTH … payload, pad, ICRC placeholder) with the
//! payload copied straight from registered memory into the output buffer.

use crate::mem::AccessError;
use ndverbs_wire::bth::{Bth, BTH_LEN};
use ndverbs_wire::icrc::ICRC_LEN;
use ndverbs_wire::packet::{write_headers, ExtHeaders, Packet};
use ndverbs_wire::WireError;

/// Why a packet was not written.
#[derive(Debug)]
pub(crate) enum EmitError {
    /// The buffer is too small; nothing changed.
    NoRoom,
    /// Headers inconsistent with the opcode (a bug; nothing sent).
    Wire,
    /// The payload could not be read from memory.
    Memory,
}

impl From<WireError> for EmitError {
    fn from(_: WireError) -> Self {
        EmitError::Wire
    }
}

/// Writes headers, lets `fill` put `payload_len` bytes in place, zeroes the pad
/// and writes a zero ICRC (the engine computes the real one). Returns the length.
pub(crate) fn write_packet(
    buf: &mut [u8],
    mut bth: Bth,
    ext: &ExtHeaders,
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), AccessError>,
) -> Result<usize, EmitError> {
    bth.pad = Packet::pad_for(payload_len);
    let hdr = BTH_LEN + bth.opcode.info()?.ext_len();
    let total = hdr + payload_len + usize::from(bth.pad) + ICRC_LEN;
    if buf.len() < total {
        return Err(EmitError::NoRoom);
    }
    write_headers(&bth, ext, buf)?;
    fill(&mut buf[hdr..hdr + payload_len]).map_err(|_| EmitError::Memory)?;
    buf[hdr + payload_len..total].fill(0);
    Ok(total)
}

/// Writes a packet whose payload of `payload_len` bytes stays in registered
/// memory (a zero-copy send, see [`crate::mem::LentPayload`]): the headers,
/// then the pad and a zero ICRC right behind them. Returns the header length
/// and the bytes written; on the wire the payload goes between the two parts.
pub(crate) fn write_packet_lent(
    buf: &mut [u8],
    mut bth: Bth,
    ext: &ExtHeaders,
    payload_len: usize,
) -> Result<(usize, usize), EmitError> {
    bth.pad = Packet::pad_for(payload_len);
    let hdr = BTH_LEN + bth.opcode.info()?.ext_len();
    let written = hdr + usize::from(bth.pad) + ICRC_LEN;
    if buf.len() < written {
        return Err(EmitError::NoRoom);
    }
    write_headers(&bth, ext, buf)?;
    buf[hdr..written].fill(0);
    Ok((hdr, written))
}
