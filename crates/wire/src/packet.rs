//! Whole RoCEv2 packets: the transport part (BTH through ICRC) and the
//! IP/UDP-encapsulated datagram.
//!
//! Parsing is zero-copy: headers are decoded into small `Copy` structs and the
//! payload stays a slice of the input. [`Packet::parse`] enforces what is
//! structural — header set from the opcode, pad count within the payload, no
//! payload where the opcode has none; rules that need connection state (the
//! path MTU) are in [`crate::opcode::OpcodeInfo::check_payload_len`].

use crate::bth::{Bth, BTH_LEN};
use crate::error::{need, room, WireError};
use crate::ext::{self, Aeth, AtomicEth, Deth, Reth};
use crate::icrc::{self, ICRC_LEN};
use crate::ip::Envelope;
use crate::opcode::{Headers, OpcodeInfo, Payload};

/// The extension headers present in one packet.
///
/// # Example
///
/// ```
/// use ndverbs_wire::{bth::Bth, ext::{Aeth, Syndrome}, opcode::Opcode, packet::Packet};
/// // The headers present follow from the opcode: an ACK has exactly an AETH.
/// let mut ack = Packet::new(Bth::new(Opcode::RC_ACK, 0x11, 41));
/// ack.ext.aeth = Some(Aeth::new(Syndrome::ACK, 7));
/// let mut buf = [0u8; 32];
/// let n = ack.write(&mut buf)?;
/// let back = Packet::parse(&buf[..n])?;
/// assert_eq!(back.ext.aeth.map(|a| a.msn), Some(7));
/// assert!(back.ext.reth.is_none() && back.ext.immdt.is_none());
/// // A header the opcode does not carry is refused.
/// ack.ext.immdt = Some(1);
/// assert!(ack.write(&mut buf).is_err());
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders {
    /// Datagram ETH (UD).
    pub deth: Option<Deth>,
    /// Flush ETH (FLUSH), opaque.
    pub feth: Option<u32>,
    /// RDMA ETH.
    pub reth: Option<Reth>,
    /// Atomic ETH.
    pub atomic_eth: Option<AtomicEth>,
    /// ACK ETH.
    pub aeth: Option<Aeth>,
    /// Atomic ACK ETH: the original remote value.
    pub atomic_ack_eth: Option<u64>,
    /// Immediate data.
    pub immdt: Option<u32>,
    /// R_Key to invalidate.
    pub ieth: Option<u32>,
    /// The reserved bytes of a CNP.
    pub cnp: Option<[u8; ext::CNP_LEN]>,
}

/// The transport part of a RoCEv2 packet: BTH, extension headers, payload, ICRC.
///
/// # Example
///
/// ```
/// use ndverbs_wire::{bth::Bth, ext::Reth, opcode::Opcode, packet::Packet};
/// // An RDMA WRITE ONLY: BTH, RETH, 5 bytes of payload (padded to 8), ICRC.
/// let mut pkt = Packet::new(Bth::new(Opcode::RC_WRITE_ONLY, 0x11, 100));
/// pkt.ext.reth = Some(Reth { va: 0x2000, rkey: 0x77, len: 5 });
/// pkt.payload = b"hello";
/// pkt.bth.pad = Packet::pad_for(pkt.payload.len()); // the BTH says how much pad follows
/// let mut buf = [0u8; 64];
/// let n = pkt.write(&mut buf)?;
/// assert_eq!(n, 12 + 16 + 8 + 4);
/// let back = Packet::parse(&buf[..n])?;
/// assert_eq!((back.bth.psn, back.ext.reth, back.payload), (100, pkt.ext.reth, &b"hello"[..]));
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Packet<'a> {
    /// Base transport header.
    pub bth: Bth,
    /// Extension headers.
    pub ext: ExtHeaders,
    /// Payload without pad.
    pub payload: &'a [u8],
    /// ICRC as carried (or to be written).
    pub icrc: u32,
}

impl ExtHeaders {
    /// Each extension header: its flag, whether it is present, its name.
    fn fields(&self) -> [(Headers, bool, &'static str); 9] {
        [
            (Headers::DETH, self.deth.is_some(), "DETH"),
            (Headers::FETH, self.feth.is_some(), "FETH"),
            (Headers::RETH, self.reth.is_some(), "RETH"),
            (Headers::ATOMIC_ETH, self.atomic_eth.is_some(), "AtomicETH"),
            (Headers::AETH, self.aeth.is_some(), "AETH"),
            (
                Headers::ATOMIC_ACK_ETH,
                self.atomic_ack_eth.is_some(),
                "AtomicAckETH",
            ),
            (Headers::IMMDT, self.immdt.is_some(), "ImmDt"),
            (Headers::IETH, self.ieth.is_some(), "IETH"),
            (Headers::CNP, self.cnp.is_some(), "CNP reserved bytes"),
        ]
    }

    /// The set of headers present.
    pub fn present(&self) -> Headers {
        // Flag by flag rather than through `fields`: every packet written
        // is checked against its opcode with this.
        let flag = |is: bool, h: Headers| if is { h } else { Headers::NONE };
        flag(self.deth.is_some(), Headers::DETH)
            .with(flag(self.feth.is_some(), Headers::FETH))
            .with(flag(self.reth.is_some(), Headers::RETH))
            .with(flag(self.atomic_eth.is_some(), Headers::ATOMIC_ETH))
            .with(flag(self.aeth.is_some(), Headers::AETH))
            .with(flag(self.atomic_ack_eth.is_some(), Headers::ATOMIC_ACK_ETH))
            .with(flag(self.immdt.is_some(), Headers::IMMDT))
            .with(flag(self.ieth.is_some(), Headers::IETH))
            .with(flag(self.cnp.is_some(), Headers::CNP))
    }

    /// The error for headers that do not match what `info`'s opcode carries.
    #[cold]
    fn mismatch(&self, info: &OpcodeInfo) -> WireError {
        self.fields()
            .into_iter()
            .find(|&(flag, is, _)| info.headers.contains(flag) != is)
            .map(|(_, is, name)| WireError::HeaderMismatch {
                opcode: info.name,
                header: name,
                present: is,
            })
            .expect("called only on a mismatch")
    }
}

/// Writes the BTH and the extension headers `ext` — exactly those the
/// opcode carries, in wire order — at the front of `buf`; returns their
/// length. The packet-building fast path: [`Packet::write`] adds payload,
/// pad and ICRC around the same code.
///
/// ```
/// use ndverbs_wire::{bth::Bth, ext::{Aeth, Syndrome}, opcode::Opcode, packet};
/// let mut ext = packet::ExtHeaders::default();
/// ext.aeth = Some(Aeth::new(Syndrome::ACK, 7));
/// let mut buf = [0u8; 16];
/// assert_eq!(packet::write_headers(&Bth::new(Opcode::RC_ACK, 0x11, 41), &ext, &mut buf)?, 16);
/// // A header the opcode does not carry is refused.
/// ext.immdt = Some(1);
/// assert!(packet::write_headers(&Bth::new(Opcode::RC_ACK, 0x11, 41), &ext, &mut buf).is_err());
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
pub fn write_headers(bth: &Bth, ext: &ExtHeaders, buf: &mut [u8]) -> Result<usize, WireError> {
    let info = bth.opcode.info()?;
    if ext.present() != info.headers {
        return Err(ext.mismatch(info));
    }
    room(info.name, buf, BTH_LEN + info.ext_len())?;
    let e = ext;
    let mut off = bth.write(buf)?;
    if info.headers == Headers::NONE {
        // The middle of a message, most of a stream's packets.
        return Ok(off);
    }
    if let Some(d) = e.deth {
        off += d.write(&mut buf[off..])?;
    }
    if let Some(f) = e.feth {
        off += ext::write_word("FETH", f, &mut buf[off..])?;
    }
    if let Some(r) = e.reth {
        off += r.write(&mut buf[off..])?;
    }
    if let Some(a) = e.atomic_eth {
        off += a.write(&mut buf[off..])?;
    }
    if let Some(a) = e.aeth {
        off += a.write(&mut buf[off..])?;
    }
    if let Some(o) = e.atomic_ack_eth {
        crate::be::put_u64(buf, off, o);
        off += ext::ATOMIC_ACK_ETH_LEN;
    }
    if let Some(i) = e.immdt {
        off += ext::write_word("ImmDt", i, &mut buf[off..])?;
    }
    if let Some(i) = e.ieth {
        off += ext::write_word("IETH", i, &mut buf[off..])?;
    }
    if let Some(c) = e.cnp {
        buf[off..off + ext::CNP_LEN].copy_from_slice(&c);
        off += ext::CNP_LEN;
    }
    Ok(off)
}

/// The extension headers `h` after the BTH of `buf`, which end at
/// `hdr_len` (`buf` is long enough: the caller checked).
fn parse_ext(h: Headers, buf: &[u8], hdr_len: usize) -> Result<ExtHeaders, WireError> {
    let mut ext = ExtHeaders::default();
    let mut off = BTH_LEN;
    if h.contains(Headers::DETH) {
        ext.deth = Some(Deth::parse(&buf[off..])?);
        off += ext::DETH_LEN;
    }
    if h.contains(Headers::FETH) {
        ext.feth = Some(ext::parse_word("FETH", &buf[off..])?);
        off += ext::WORD_LEN;
    }
    if h.contains(Headers::RETH) {
        ext.reth = Some(Reth::parse(&buf[off..])?);
        off += ext::RETH_LEN;
    }
    if h.contains(Headers::ATOMIC_ETH) {
        ext.atomic_eth = Some(AtomicEth::parse(&buf[off..])?);
        off += ext::ATOMIC_ETH_LEN;
    }
    if h.contains(Headers::AETH) {
        ext.aeth = Some(Aeth::parse(&buf[off..])?);
        off += ext::AETH_LEN;
    }
    if h.contains(Headers::ATOMIC_ACK_ETH) {
        need("AtomicAckETH", &buf[off..], ext::ATOMIC_ACK_ETH_LEN)?;
        ext.atomic_ack_eth = Some(crate::be::u64_at(buf, off));
        off += ext::ATOMIC_ACK_ETH_LEN;
    }
    if h.contains(Headers::IMMDT) {
        ext.immdt = Some(ext::parse_word("ImmDt", &buf[off..])?);
        off += ext::WORD_LEN;
    }
    if h.contains(Headers::IETH) {
        ext.ieth = Some(ext::parse_word("IETH", &buf[off..])?);
        off += ext::WORD_LEN;
    }
    if h.contains(Headers::CNP) {
        let mut r = [0u8; ext::CNP_LEN];
        r.copy_from_slice(&buf[off..off + ext::CNP_LEN]);
        ext.cnp = Some(r);
        off += ext::CNP_LEN;
    }
    debug_assert_eq!(off, hdr_len);
    Ok(ext)
}

impl<'a> Packet<'a> {
    /// A packet with no extension headers and no payload.
    pub fn new(bth: Bth) -> Self {
        Packet {
            bth,
            ext: ExtHeaders::default(),
            payload: &[],
            icrc: 0,
        }
    }

    /// Facts about the opcode (it is known: construction through `parse` checks it).
    pub fn info(&self) -> Result<&'static OpcodeInfo, WireError> {
        self.bth.opcode.info()
    }

    /// Parses a UDP payload: BTH, extension headers, payload, pad and ICRC.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let bth = Bth::parse(buf)?;
        let info = bth.opcode.info()?;
        let hdr_len = BTH_LEN + info.ext_len();
        need(info.name, buf, hdr_len + ICRC_LEN)?;
        // Most packets of a stream (MIDDLE) and small SENDs carry none.
        let ext = if info.headers == Headers::NONE {
            ExtHeaders::default()
        } else {
            parse_ext(info.headers, buf, hdr_len)?
        };
        let area = &buf[hdr_len..buf.len() - ICRC_LEN];
        let pad = usize::from(bth.pad);
        if pad > area.len() {
            return Err(WireError::Pad {
                pad: bth.pad,
                len: area.len(),
            });
        }
        let payload = &area[..area.len() - pad];
        if info.payload == Payload::None && !area.is_empty() {
            return Err(WireError::UnexpectedPayload {
                opcode: info.name,
                len: area.len(),
            });
        }
        let icrc = icrc::carried(buf)?;
        Ok(Packet {
            bth,
            ext,
            payload,
            icrc,
        })
    }

    /// Bytes of headers (BTH and extensions) before the payload.
    pub fn header_len(&self) -> Result<usize, WireError> {
        Ok(BTH_LEN + self.info()?.ext_len())
    }

    /// Bytes this packet occupies on the wire (BTH through ICRC).
    pub fn encoded_len(&self) -> Result<usize, WireError> {
        Ok(self.header_len()? + self.payload.len() + usize::from(self.bth.pad & 3) + ICRC_LEN)
    }

    /// The pad count the payload needs: `(-len) & 3`.
    pub fn pad_for(len: usize) -> u8 {
        (len.wrapping_neg() & 3) as u8
    }

    /// Writes BTH through ICRC (the stored `icrc` value; see [`write_datagram`] to
    /// compute it). Pad bytes are zero. Every header the opcode needs must be
    /// present in `ext`, and no other.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let info = self.info()?;
        let len = self.encoded_len()?;
        room(info.name, buf, len)?;
        if info.payload == Payload::None && !self.payload.is_empty() {
            return Err(WireError::UnexpectedPayload {
                opcode: info.name,
                len: self.payload.len(),
            });
        }
        let mut off = write_headers(&self.bth, &self.ext, buf)?;
        buf[off..off + self.payload.len()].copy_from_slice(self.payload);
        off += self.payload.len();
        let pad = usize::from(self.bth.pad & 3);
        buf[off..off + pad].fill(0);
        off += pad;
        buf[off..off + ICRC_LEN].copy_from_slice(&self.icrc.to_le_bytes());
        Ok(off + ICRC_LEN)
    }
}

/// A RoCEv2 datagram: IP and UDP headers around a transport [`Packet`].
///
/// # Example
///
/// ```
/// use ndverbs_wire::{bth::Bth, icrc, ip::Envelope, opcode::Opcode};
/// use ndverbs_wire::packet::{write_datagram, Datagram, Packet};
/// let mut pkt = Packet::new(Bth::new(Opcode::RC_SEND_ONLY, 0x11, 0));
/// pkt.payload = b"ping";
/// let env = Envelope::new_rocev2("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 4791, pkt.encoded_len()?);
/// // A whole IP packet, ICRC computed: what a capture shows.
/// let mut buf = [0u8; 128];
/// let n = write_datagram(&env, &pkt, &mut buf)?;
/// assert!(icrc::verify(&buf[..n])?);
/// let d = Datagram::parse(&buf[..n])?;
/// assert_eq!((d.envelope.udp.dst_port, d.packet.payload), (4791, &b"ping"[..]));
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Datagram<'a> {
    /// IP and UDP headers.
    pub envelope: Envelope,
    /// The transport packet.
    pub packet: Packet<'a>,
}

impl<'a> Datagram<'a> {
    /// Parses an IP packet carrying RoCEv2 (UDP destination port 4791).
    pub fn parse(ip_packet: &'a [u8]) -> Result<Self, WireError> {
        let (envelope, udp_payload) = Envelope::parse(ip_packet)?;
        if !envelope.is_rocev2() {
            return Err(WireError::NotRoceV2Port(envelope.udp.dst_port));
        }
        let packet = Packet::parse(udp_payload)?;
        Ok(Datagram { envelope, packet })
    }

    /// Bytes of the whole IP packet.
    pub fn encoded_len(&self) -> Result<usize, WireError> {
        Ok(self.envelope.len() + self.packet.encoded_len()?)
    }

    /// Writes the datagram exactly as stored (headers, ICRC and all).
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let n = self.envelope.write(buf)?;
        Ok(n + self.packet.write(&mut buf[n..])?)
    }
}

/// Writes IP, UDP and transport headers and payload, then computes and stores the
/// ICRC (using the IPv4 ID in the envelope). Returns the bytes written.
///
/// Length fields in the envelope must already match the packet (see
/// [`Envelope::new_rocev2`]); this is checked.
pub fn write_datagram(
    env: &Envelope,
    pkt: &Packet<'_>,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    let plen = pkt.encoded_len()?;
    if usize::from(env.udp.length) != crate::ip::UDP_HEADER_LEN + plen {
        return Err(WireError::Length {
            what: "UDP length",
            claimed: usize::from(env.udp.length),
            actual: crate::ip::UDP_HEADER_LEN + plen,
        });
    }
    let n = Datagram {
        envelope: *env,
        packet: *pkt,
    }
    .write(buf)?;
    let c = icrc::compute(&buf[..n - ICRC_LEN])?;
    buf[n - ICRC_LEN..n].copy_from_slice(&c.to_le_bytes());
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icrc::tests::hex;
    use crate::opcode::Opcode;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn builds_v4_write_only_byte_exact() {
        let want = hex("4500004400004000401126a70a0000010a000002c13212b7003000000a30ffff000000128012345700000000000010000000abcd0000000568656c6c6f00000026b855ff");
        let mut bth = Bth::new(Opcode::RC_WRITE_ONLY, 0x12, 0x123457);
        bth.ack_req = true;
        bth.pad = Packet::pad_for(5);
        let mut pkt = Packet::new(bth);
        pkt.ext.reth = Some(Reth {
            va: 0x1000,
            rkey: 0xabcd,
            len: 5,
        });
        pkt.payload = b"hello";
        let env = Envelope::new_rocev2(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            0xc132,
            pkt.encoded_len().unwrap(),
        );
        let mut buf = [0u8; 128];
        let n = write_datagram(&env, &pkt, &mut buf).unwrap();
        assert_eq!(&buf[..n], &want[..]);
        let d = Datagram::parse(&want).unwrap();
        assert_eq!(d.packet.payload, b"hello");
        assert_eq!(d.packet.ext.reth.unwrap().rkey, 0xabcd);
    }

    #[test]
    fn structural_errors() {
        let v3 = hex("4500003000004000401126bb0a0000020a000001c13212b7001c00001100ffff00000011001234561f000001851f6617");
        let t = &v3[28..];
        assert!(Packet::parse(t).is_ok());
        // An ACK with pad bytes claimed but no room.
        let mut p = t.to_vec();
        p[1] |= 0x30;
        assert!(matches!(Packet::parse(&p), Err(WireError::Pad { .. })));
        // An ACK with stray payload.
        let mut q = t[..t.len() - 4].to_vec();
        q.extend_from_slice(&[1, 2, 3, 4, 0, 0, 0, 0]);
        assert!(matches!(
            Packet::parse(&q),
            Err(WireError::UnexpectedPayload { .. })
        ));
        // Unknown opcode, truncated.
        let mut r = t.to_vec();
        r[0] = 0x15;
        assert_eq!(Packet::parse(&r), Err(WireError::UnknownOpcode(0x15)));
        assert!(matches!(
            Packet::parse(&t[..10]),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(
            Packet::parse(&t[..15]),
            Err(WireError::Truncated { .. })
        ));
    }
}
