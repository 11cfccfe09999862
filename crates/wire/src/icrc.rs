//! The RoCEv2 invariant CRC (ICRC).
//!
//! The ICRC is the ordinary CRC-32 (ISO-HDLC, the zlib/Ethernet CRC — *not*
//! CRC-32C) over a masked copy of the packet from the first IP byte up to the
//! ICRC itself, preceded by 8 bytes of `0xFF` that stand in for the InfiniBand
//! LRH. The fields a router may change are masked to all ones: IPv4 TOS, TTL and
//! header checksum (IPv6 traffic class, flow label and hop limit), the UDP
//! checksum, and BTH byte 4 (FECN, BECN, reserved). The result goes on the wire
//! least significant byte first.
//!
//! # The IPv4 identification problem
//!
//! The IPv4 ID is covered, but a UDP socket neither lets the sender choose it nor
//! shows it to the receiver:
//!
//! * **Sending.** An unconnected socket with `IP_MTU_DISCOVER = IP_PMTUDISC_DO`
//!   (DF set) makes Linux send ID 0; with UDP GSO, software segmentation gives
//!   segment *i* the ID *i*. ndverbs' engine therefore never `connect()`s its data
//!   socket, always sets `IP_PMTUDISC_DO`, and computes each segment's ICRC with
//!   [`compute_with_ipv4_id`] for the ID the kernel will write.
//! * **Receiving.** Linux rxe sends effectively random IDs. For a fixed length the
//!   CRC is affine in the 16 ID bits over GF(2): `icrc(id) = icrc(0) ⊕ L(id)` with
//!   `L` linear. [`recover_ipv4_id`] computes `icrc(0)`, then solves
//!   `L(id) = received ⊕ icrc(0)` by Gaussian elimination. A solution means the
//!   packet is accepted (and yields the ID); none means it is corrupt. This spends 16
//!   of the CRC's 32 bits on the unknown ID — an accepted trade-off, since the
//!   Ethernet FCS still protects each frame.

use crate::error::{need, WireError};
use crate::ip::{IPV4_HEADER_LEN, IPV6_HEADER_LEN, UDP_HEADER_LEN};

/// Bytes of ICRC at the end of every RoCEv2 packet.
pub const ICRC_LEN: usize = 4;
/// Bytes of the BTH, the only transport header partly masked.
const BTH_LEN: usize = 12;
/// CRC-32 of eight `0xFF` bytes: the running value after the LRH stand-in.
const LRH_PREFIX_CRC: u32 = 0x2144_DF1C;
/// Transport bytes [`finish`] hashes from one masked copy.
const SMALL_PACKET: usize = 64;
/// The reflected CRC-32 polynomial.
const POLY: u32 = 0xEDB8_8320;

/// Computes the ICRC of an IP packet given without its trailing ICRC.
///
/// `packet` starts at the IP header (IPv4 without options, or IPv6) and holds UDP,
/// BTH, extension headers, payload and pad. Returns the CRC value; store it with
/// `to_le_bytes()`.
pub fn compute(packet: &[u8]) -> Result<u32, WireError> {
    let h = ip_udp_len(packet)?;
    compute_split(&packet[..h], &packet[h..])
}

/// Like [`compute`] for IPv4, but as if the IP ID were `id`, whatever `packet` holds.
pub fn compute_with_ipv4_id(packet: &[u8], id: u16) -> Result<u32, WireError> {
    need("ICRC input", packet, IPV4_HEADER_LEN + UDP_HEADER_LEN)?;
    let mut hdr = [0u8; IPV4_HEADER_LEN + UDP_HEADER_LEN];
    hdr.copy_from_slice(&packet[..IPV4_HEADER_LEN + UDP_HEADER_LEN]);
    hdr[4..6].copy_from_slice(&id.to_be_bytes());
    compute_split(&hdr, &packet[hdr.len()..])
}

/// Computes the ICRC from the IP+UDP headers and the transport bytes (BTH onwards,
/// without the ICRC) held in separate buffers — how a UDP socket user has them:
/// the kernel writes the headers, the application only the UDP payload.
pub fn compute_split(ip_udp: &[u8], transport: &[u8]) -> Result<u32, WireError> {
    compute_parts(ip_udp, &[transport])
}

/// Like [`compute_split`] with the transport bytes (BTH onwards, without the
/// ICRC) in several pieces — a packet whose payload a zero-copy send takes
/// straight from registered memory. The first piece holds at least the BTH.
pub fn compute_parts(ip_udp: &[u8], parts: &[&[u8]]) -> Result<u32, WireError> {
    need("ICRC IP header", ip_udp, 1)?;
    let ip_len = match ip_udp[0] >> 4 {
        4 => IPV4_HEADER_LEN,
        6 => IPV6_HEADER_LEN,
        v => return Err(WireError::IpVersion(v)),
    };
    if ip_udp.len() != ip_len + UDP_HEADER_LEN {
        return Err(WireError::Length {
            what: "ICRC IP+UDP headers",
            claimed: ip_len + UDP_HEADER_LEN,
            actual: ip_udp.len(),
        });
    }
    let mut hdr = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN];
    let hdr = &mut hdr[..ip_udp.len()];
    hdr.copy_from_slice(ip_udp);
    if ip_len == IPV4_HEADER_LEN {
        hdr[1] = 0xff; // TOS
        hdr[8] = 0xff; // TTL
        hdr[10] = 0xff; // header checksum
        hdr[11] = 0xff;
    } else {
        hdr[0] |= 0x0f; // traffic class (low nibble) ...
        hdr[1] = 0xff; // ... and flow label
        hdr[2] = 0xff;
        hdr[3] = 0xff;
        hdr[7] = 0xff; // hop limit
    }
    hdr[ip_len + 6] = 0xff; // UDP checksum
    hdr[ip_len + 7] = 0xff;
    finish(headers_crc(hdr), parts)
}

/// The running CRC after the LRH stand-in and the IP and UDP headers, given
/// already masked (as [`pseudo_headers`] writes them): the part of the ICRC
/// that every packet of one length on one path shares, worth keeping (see
/// [`finish`]).
pub fn headers_crc(masked_ip_udp: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(LRH_PREFIX_CRC);
    h.update(masked_ip_udp);
    h.finalize()
}

/// Completes an ICRC begun by [`headers_crc`] over the transport bytes (BTH
/// onwards, without the ICRC) in pieces; the first piece holds at least the
/// BTH, whose byte 4 (FECN, BECN, reserved) is masked.
///
/// ```
/// use ndverbs_wire::icrc;
/// let src = "10.0.0.1".parse().unwrap();
/// let dst = "10.0.0.2".parse().unwrap();
/// let transport = [0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 1, 0xaa, 0xbb];
/// let (hdr, n) = icrc::pseudo_headers(src, dst, 49152, 4791, 0, transport.len() + 4);
/// let whole = icrc::compute_split(&hdr[..n], &transport).unwrap();
/// let parts = icrc::finish(icrc::headers_crc(&hdr[..n]), &[&transport[..12], &transport[12..]]);
/// assert_eq!(parts.unwrap(), whole);
/// ```
pub fn finish(headers_crc: u32, parts: &[&[u8]]) -> Result<u32, WireError> {
    let transport = parts.first().copied().unwrap_or(&[]);
    need("ICRC BTH", transport, BTH_LEN)?;
    if parts.len() == 1 && transport.len() <= SMALL_PACKET {
        // A small packet (an ACK, a short message) in one piece: a hasher's
        // fixed cost per call (feature detection, dispatch, a masked copy)
        // would be most of the work at this size.
        return Ok(small_masked(headers_crc, transport));
    }
    // The BTH by table (a hasher takes a 12-byte piece byte by byte, after
    // its set-up), the rest (a payload of whole 64-byte blocks, at full
    // path MTU) by the hasher's carry-less folds.
    let mut h =
        crc32fast::Hasher::new_with_initial(small_masked(headers_crc, &transport[..BTH_LEN]));
    h.update(&transport[BTH_LEN..]);
    for p in parts.iter().skip(1) {
        h.update(p);
    }
    Ok(h.finalize())
}

/// Slice-by-8 tables of the reflected CRC-32 (`SLICE8[k][b]`: byte `b`
/// followed by `k` zero bytes), built at compile time.
static SLICE8: [[u32; 256]; 8] = slice8_tables();

const fn slice8_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            bit += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// Continues the CRC `crc` (a finished value, as `crc32fast` takes and
/// returns it) over `transport`, at least a BTH long, with BTH byte 4
/// (FECN, BECN, reserved) read as all ones: eight bytes per step.
fn small_masked(crc: u32, transport: &[u8]) -> u32 {
    let mut c = !crc;
    let mut chunks = transport.chunks_exact(8);
    let mut mask = 0xffu64 << 32; // byte 4 of the first eight
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = (u64::from_le_bytes(word) | mask) ^ u64::from(c);
        mask = 0;
        let byte = |i: u32| ((x >> (8 * i)) & 0xff) as usize;
        c = SLICE8[7][byte(0)]
            ^ SLICE8[6][byte(1)]
            ^ SLICE8[5][byte(2)]
            ^ SLICE8[4][byte(3)]
            ^ SLICE8[3][byte(4)]
            ^ SLICE8[2][byte(5)]
            ^ SLICE8[1][byte(6)]
            ^ SLICE8[0][byte(7)];
    }
    !chunks.remainder().iter().fold(c, |c, &b| byte_step(c, b))
}

/// One byte into the CRC register, by table (the initial value and the
/// final inversion are the caller's).
fn byte_step(c: u32, b: u8) -> u32 {
    SLICE8[0][((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8)
}

/// The IP and UDP headers of a RoCEv2 datagram as the ICRC sees them (masked
/// fields already all ones), written straight from the addresses: what a
/// sender or a receiver of `transport_len` bytes needs for [`compute_parts`],
/// without building (and checksumming) real headers. IPv4 when both addresses
/// are IPv4 (DF set, ID `ipv4_id`), IPv6 otherwise (IPv4 addresses mapped).
/// Returns the buffer and how many of its bytes are headers.
pub fn pseudo_headers(
    src: std::net::IpAddr,
    dst: std::net::IpAddr,
    src_port: u16,
    dst_port: u16,
    ipv4_id: u16,
    transport_len: usize,
) -> ([u8; IPV6_HEADER_LEN + UDP_HEADER_LEN], usize) {
    use std::net::IpAddr;
    let mut b = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN];
    let udp_len = (UDP_HEADER_LEN + transport_len) as u16;
    let ip_len = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            b[0] = 0x45;
            b[1] = 0xff; // TOS
            let total = udp_len.wrapping_add(IPV4_HEADER_LEN as u16);
            b[2..4].copy_from_slice(&total.to_be_bytes());
            b[4..6].copy_from_slice(&ipv4_id.to_be_bytes());
            b[6..8].copy_from_slice(&crate::ip::IPV4_DONT_FRAGMENT.to_be_bytes());
            b[8] = 0xff; // TTL
            b[9] = crate::ip::PROTO_UDP;
            b[10] = 0xff; // header checksum
            b[11] = 0xff;
            b[12..16].copy_from_slice(&s.octets());
            b[16..20].copy_from_slice(&d.octets());
            IPV4_HEADER_LEN
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            // Version 6; traffic class and flow label masked.
            b[0] = 0x6f;
            b[1] = 0xff;
            b[2] = 0xff;
            b[3] = 0xff;
            b[4..6].copy_from_slice(&udp_len.to_be_bytes());
            b[6] = crate::ip::PROTO_UDP;
            b[7] = 0xff; // hop limit
            b[8..24].copy_from_slice(&v6(s).octets());
            b[24..40].copy_from_slice(&v6(d).octets());
            IPV6_HEADER_LEN
        }
    };
    b[ip_len..ip_len + 2].copy_from_slice(&src_port.to_be_bytes());
    b[ip_len + 2..ip_len + 4].copy_from_slice(&dst_port.to_be_bytes());
    b[ip_len + 4..ip_len + 6].copy_from_slice(&udp_len.to_be_bytes());
    b[ip_len + 6] = 0xff; // UDP checksum
    b[ip_len + 7] = 0xff;
    (b, ip_len + UDP_HEADER_LEN)
}

fn ip_udp_len(packet: &[u8]) -> Result<usize, WireError> {
    need("ICRC input", packet, 1)?;
    let n = match packet[0] >> 4 {
        4 => IPV4_HEADER_LEN + UDP_HEADER_LEN,
        6 => IPV6_HEADER_LEN + UDP_HEADER_LEN,
        v => return Err(WireError::IpVersion(v)),
    };
    need("ICRC input", packet, n)?;
    Ok(n)
}

/// The ICRC carried in the last four bytes of `packet`.
pub fn carried(packet: &[u8]) -> Result<u32, WireError> {
    need("ICRC", packet, ICRC_LEN)?;
    let t = &packet[packet.len() - ICRC_LEN..];
    Ok(u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
}

/// Checks the ICRC of a complete IP packet (ICRC included) whose headers are all known.
pub fn verify(packet: &[u8]) -> Result<bool, WireError> {
    need("RoCEv2 packet", packet, ICRC_LEN + 1)?;
    let body = &packet[..packet.len() - ICRC_LEN];
    Ok(compute(body)? == carried(packet)?)
}

/// For an IPv4 packet (ICRC included) whose ID field is unknown, finds the ID
/// that makes the ICRC valid. `None` means no ID does: the packet is corrupt.
///
/// The ID bytes in `packet` are ignored.
pub fn recover_ipv4_id(packet: &[u8]) -> Result<Option<u16>, WireError> {
    need("RoCEv2 packet", packet, IPV4_HEADER_LEN + UDP_HEADER_LEN)?;
    let (h, t) = packet.split_at(IPV4_HEADER_LEN + UDP_HEADER_LEN);
    recover_ipv4_id_split(h, t)
}

/// [`recover_ipv4_id`] with the IPv4+UDP headers (ID ignored) and the transport
/// bytes (BTH through ICRC) in separate buffers, as a UDP socket receiver has them.
pub fn recover_ipv4_id_split(ip_udp: &[u8], transport: &[u8]) -> Result<Option<u16>, WireError> {
    need("RoCEv2 transport", transport, BTH_LEN + ICRC_LEN)?;
    if ip_udp.first().map(|b| b >> 4) != Some(4) {
        return Err(WireError::IpVersion(ip_udp.first().map_or(0, |b| b >> 4)));
    }
    let body = &transport[..transport.len() - ICRC_LEN];
    let mut hdr = [0u8; IPV4_HEADER_LEN + UDP_HEADER_LEN];
    let n = hdr.len();
    need("IPv4+UDP headers", ip_udp, n)?;
    hdr.copy_from_slice(&ip_udp[..n]);
    hdr[4] = 0;
    hdr[5] = 0;
    let delta = compute_split(&hdr, body)? ^ carried(transport)?;
    // Bytes that follow the ID field inside the CRC input (the LRH stand-in
    // precedes it, so it does not count).
    let after_id = hdr.len() - 6 + body.len();
    Ok(IdSolver::new(after_id).solve(delta))
}

/// The 16 columns of the linear map from IP ID bits to ICRC bits for one length.
///
/// Reusable across packets of the same length; the engine may cache it.
///
/// # Example
///
/// ```
/// use ndverbs_wire::icrc::{compute_with_ipv4_id, IdSolver};
/// use ndverbs_wire::ip::Envelope;
/// // An IPv4 RoCEv2 packet (headers and a 16-byte transport part, ICRC left out).
/// let env = Envelope::new_rocev2("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), 4791, 16);
/// let mut pkt = [0u8; 28 + 12];
/// env.write(&mut pkt)?;
/// // The ICRC covers the IPv4 ID, which a UDP socket does not show. The CRC is
/// // linear: the difference the ID makes solves for the ID.
/// let delta = compute_with_ipv4_id(&pkt, 0)? ^ compute_with_ipv4_id(&pkt, 0xbeef)?;
/// let after_id = pkt.len() - 6; // bytes after the ID field
/// assert_eq!(IdSolver::new(after_id).solve(delta), Some(0xbeef));
/// // And forwards: what the ID adds to the ICRC computed for ID 0.
/// assert_eq!(IdSolver::new(after_id).contribution(0xbeef), delta);
/// # Ok::<(), ndverbs_wire::WireError>(())
/// ```
#[derive(Debug, Clone)]
pub struct IdSolver {
    /// What each nibble of an ID adds to the ICRC (`[k][n]`: nibble `k`,
    /// least significant first, of value `n`).
    by_id_nibble: [[u32; 16]; 4],
    /// The reduction of each nibble of a delta against the basis of the
    /// ID's contributions: what is left in the low 32 bits, the ID bits
    /// taken above them. The reduction is linear, so a delta's is the XOR
    /// of its eight nibbles'.
    by_delta_nibble: [[u64; 16]; 8],
}

/// Tables of a linear map by nibble of its input (`[k][n]`: nibble `k`,
/// least significant first, of value `n`), from the map of each single
/// input bit: an entry is the one without its lowest bit XOR that bit's.
fn nibble_tables<T, const K: usize>(bit: impl Fn(usize) -> T) -> [[T; 16]; K]
where
    T: Copy + Default + std::ops::BitXor<Output = T>,
{
    let mut tables = [[T::default(); 16]; K];
    for (k, t) in tables.iter_mut().enumerate() {
        for n in 1..16usize {
            t[n] = t[n & (n - 1)] ^ bit(4 * k + n.trailing_zeros() as usize);
        }
    }
    tables
}

impl IdSolver {
    /// Builds the solver for packets in which `after_id` bytes follow the ID field.
    pub fn new(after_id: usize) -> Self {
        let shift = xpow8n(after_id as u64);
        let mut basis: Vec<(u32, u32, u16)> = Vec::with_capacity(16);
        let mut columns = [0u32; 16];
        for (bit, column) in columns.iter_mut().enumerate() {
            let id = 1u16 << bit;
            let mut col = multmodp(shift, crc0(&id.to_be_bytes()));
            *column = col;
            let mut ids = id;
            for &(p, v, i) in &basis {
                if col & p != 0 {
                    col ^= v;
                    ids ^= i;
                }
            }
            if col != 0 {
                let p = col & col.wrapping_neg();
                // Keep the basis fully reduced so a reduction is one pass.
                for e in basis.iter_mut() {
                    if e.1 & p != 0 {
                        e.1 ^= col;
                        e.2 ^= ids;
                    }
                }
                basis.push((p, col, ids));
            }
        }
        // The reduction of each single bit of a delta: a pivot's leaves the
        // rest of its basis vector (fully reduced, it holds no other pivot)
        // and takes its ID bits; any other bit is left alone.
        let mut by_bit: [u64; 32] = std::array::from_fn(|j| 1 << j);
        for &(p, v, i) in &basis {
            by_bit[p.trailing_zeros() as usize] = u64::from(v ^ p) | u64::from(i) << 32;
        }
        IdSolver {
            by_id_nibble: nibble_tables(|b| columns[b]),
            by_delta_nibble: nibble_tables(|b| by_bit[b]),
        }
    }

    /// What ID `id` adds (XOR) to the ICRC of the same packet with ID 0:
    /// the CRC is affine in the ID's bits, so a sender can sign any ID from
    /// one CRC of the headers with ID 0 (a GSO send's segments count their
    /// IDs up from 0).
    #[inline]
    pub fn contribution(&self, id: u16) -> u32 {
        let t = &self.by_id_nibble;
        let n = |k: u32| usize::from((id >> (4 * k)) & 0xf);
        t[0][n(0)] ^ t[1][n(1)] ^ t[2][n(2)] ^ t[3][n(3)]
    }

    /// The ID whose contribution equals `delta`, if any.
    #[inline]
    pub fn solve(&self, delta: u32) -> Option<u16> {
        let r = self
            .by_delta_nibble
            .iter()
            .enumerate()
            .fold(0u64, |r, (k, t)| r ^ t[((delta >> (4 * k)) & 0xf) as usize]);
        (r as u32 == 0).then_some((r >> 32) as u16)
    }
}

/// CRC-32 without initial value or final inversion: the purely linear part.
fn crc0(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0, |c, &b| byte_step(c, b))
}

/// Multiplies two polynomials modulo the CRC polynomial (reflected bit order,
/// x^0 in the top bit).
fn multmodp(a: u32, mut b: u32) -> u32 {
    let mut p = 0u32;
    let mut m = 1u32 << 31;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// x^(8n) mod P: the operator that runs a CRC register through `n` zero bytes.
fn xpow8n(n: u64) -> u32 {
    let mut result = 1u32 << 31; // x^0
    let mut sq = 1u32 << 23; // x^8
    let mut n = n;
    while n != 0 {
        if n & 1 != 0 {
            result = multmodp(sq, result);
        }
        sq = multmodp(sq, sq);
        n >>= 1;
    }
    result
}

#[cfg(test)]
mod pseudo_header_tests {
    use super::*;
    use crate::ip::{Envelope, IpHeader};
    use std::net::IpAddr;

    #[test]
    fn pseudo_headers_give_the_icrc_of_real_headers() {
        let addrs: [(IpAddr, IpAddr); 3] = [
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()),
            ("fe80::1".parse().unwrap(), "fe80::2".parse().unwrap()),
            ("10.0.0.1".parse().unwrap(), "fe80::2".parse().unwrap()),
        ];
        let mut transport = [0u8; 64];
        for (i, b) in transport.iter_mut().enumerate() {
            *b = (i * 37 + 5) as u8;
        }
        for (src, dst) in addrs {
            for (len, id) in [(16usize, 0u16), (40, 7), (64, 0xbeef)] {
                let body = &transport[..len - ICRC_LEN];
                let mut env = Envelope::new_rocev2(src, dst, 4791, len);
                env.udp.dst_port = 4790;
                if let IpHeader::V4(h) = &mut env.ip {
                    h.id = id;
                }
                let mut hdr = [0u8; 48];
                let n = env.write(&mut hdr).unwrap();
                let want = compute_split(&hdr[..n], body).unwrap();
                let (p, m) = pseudo_headers(src, dst, 4791, 4790, id, len);
                assert_eq!(m, n);
                // Split anywhere after the BTH: the same CRC.
                let got = compute_parts(&p[..m], &[&body[..12], &body[12..]]).unwrap();
                assert_eq!(got, want, "{src} -> {dst}, len {len}, id {id}");
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Bytes from hex digits (white space ignored): test vectors as printed.
    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn v1_plain_crc_engine_and_byte_order() {
        let b = hex("f012375c000e17d20a202487ff87b1b3000dec2a01710a1c015d400238f27a050000000ebb884d85fd5cfba4728bc0690ed40000");
        assert_eq!(crc32fast::hash(&b), 0x5AB7_2596);
        assert_eq!(0x5AB7_2596u32.to_le_bytes(), [0x96, 0x25, 0xB7, 0x5A]);
    }

    /// A xorshift32 stream from `seed`.
    fn xorshift(mut x: u32) -> impl FnMut() -> u32 {
        move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        }
    }

    /// `len` bytes of `next` and a starting value, with what crc32fast
    /// gives for them over a copy with BTH byte 4 set to all ones.
    fn masked_case(next: &mut impl FnMut() -> u32, len: usize) -> (Vec<u8>, u32, u32) {
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let init = next();
        let mut masked = data.clone();
        masked[4] = 0xff;
        let mut h = crc32fast::Hasher::new_with_initial(init);
        h.update(&masked);
        (data, init, h.finalize())
    }

    #[test]
    fn small_packets_hash_as_the_masked_copy_does() {
        // Every length the table path takes, from varied starting values.
        let mut next = xorshift(0x9e37_79b9);
        for len in BTH_LEN..=SMALL_PACKET {
            for _ in 0..16 {
                let (data, init, want) = masked_case(&mut next, len);
                assert_eq!(small_masked(init, &data), want, "length {len}");
                assert_eq!(finish(init, &[&data]), Ok(want));
            }
        }
    }

    #[test]
    fn large_packets_in_pieces_hash_as_the_masked_copy_does() {
        // Lengths past the table path, whole and cut into pieces anywhere.
        let mut next = xorshift(0x2545_f491);
        for len in [SMALL_PACKET + 1, 77, 200, 1040, 1052, 4108] {
            let (data, init, want) = masked_case(&mut next, len);
            assert_eq!(finish(init, &[&data]), Ok(want), "length {len}");
            let cut = BTH_LEN + next() as usize % (len - BTH_LEN);
            let (a, b) = data.split_at(cut);
            assert_eq!(finish(init, &[a, b]), Ok(want), "length {len} cut at {cut}");
        }
    }

    #[test]
    fn lrh_prefix_constant() {
        assert_eq!(crc32fast::hash(&[0xff; 8]), LRH_PREFIX_CRC);
    }

    pub(crate) const V2: &str = "4500003c00004000401126af0a0000010a000002c13212b7002800000400ffff000000128012345600007f000000100000001234000000406fa629ef";
    const V3: &str = "4500003000004000401126bb0a0000020a000001c13212b7001c00001100ffff00000011001234561f000001851f6617";
    const V4: &str = "4500004400004000401126a70a0000010a000002c13212b7003000000a30ffff000000128012345700000000000010000000abcd0000000568656c6c6f00000026b855ff";
    const V5: &str = "4500003cbeef4000401167bf0a0000010a000002c13212b7002800000400ffff000000128012345600007f000000100000001234000000409986ae61";
    pub(crate) const V6: &str =
        "4500013400004000401125b70a0000010a000002d87212b7012000006400ffff000000010000000080010000
        0000000101070203000000000000000a12345678001000000000000012345678000000000000000001061c06
        021122334455667700000000000000000000110100000001000000a0123456a7ffff37f0ffffffff00000000
        000000000000ffff0a00000100000000000000000000ffff0a00000200000000004000900000000000000000
        00000000000000000000000000000000000000000000000000000000000000000000000000409c4000000000
        00000000000000000a0000010000000000000000000000000a00000200000000000000000000000000000000
        00000000000000000000000000000000000000000000000000000000000000000000000000000000d513cad3";

    #[test]
    fn reference_vectors_v2_to_v6() {
        for (v, want) in [
            (V2, [0x6f, 0xa6, 0x29, 0xef]),
            (V3, [0x85, 0x1f, 0x66, 0x17]),
            (V4, [0x26, 0xb8, 0x55, 0xff]),
            (V5, [0x99, 0x86, 0xae, 0x61]),
            (V6, [0xd5, 0x13, 0xca, 0xd3]),
        ] {
            let p = hex(v);
            assert_eq!(compute(&p[..p.len() - 4]).unwrap().to_le_bytes(), want);
            assert!(verify(&p).unwrap());
        }
    }

    #[test]
    fn masked_fields_do_not_change_the_icrc() {
        let mut p = hex(V2);
        for off in [1usize, 8, 10, 11, 26, 27, 32] {
            p[off] ^= 0x5a;
        }
        assert!(verify(&p).unwrap());
        let mut q = hex(V2);
        q[33] ^= 1; // DestQP is covered
        assert!(!verify(&q).unwrap());
    }

    #[test]
    fn recovers_the_ip_id_of_v5() {
        let mut p = hex(V5);
        p[4] = 0;
        p[5] = 0;
        assert_eq!(recover_ipv4_id(&p).unwrap(), Some(0xBEEF));
        assert_eq!(recover_ipv4_id(&hex(V2)).unwrap(), Some(0));
    }

    #[test]
    fn recovery_rejects_corruption_and_finds_every_id() {
        let base = hex(V6);
        let body_len = base.len() - 4;
        for id in [1u16, 0x8000, 0x1234, 0xffff] {
            let mut p = base.clone();
            let c = compute_with_ipv4_id(&p[..body_len], id).unwrap();
            p[body_len..].copy_from_slice(&c.to_le_bytes());
            assert_eq!(recover_ipv4_id(&p).unwrap(), Some(id));
            // Corrupt one payload bit: no ID explains it (with overwhelming
            // probability; this particular case is deterministic).
            p[200] ^= 0x10;
            assert_eq!(recover_ipv4_id(&p).unwrap(), None);
        }
    }

    /// The nibble tables agree with the CRC itself for every ID at a few
    /// packet lengths, and a delta one bit off an ID's, if solved at all,
    /// is solved for an ID that explains it.
    #[test]
    fn every_id_solves_and_signs_by_the_tables() {
        for after_id in [22usize, 38, 1066] {
            let solver = IdSolver::new(after_id);
            let shift = xpow8n(after_id as u64);
            for id in 0..=u16::MAX {
                let delta = multmodp(shift, crc0(&id.to_be_bytes()));
                assert_eq!(solver.contribution(id), delta, "id {id:#x}");
                assert_eq!(solver.solve(delta), Some(id), "id {id:#x}");
                if id % 251 == 0 {
                    let off = delta ^ (1 << (id % 32));
                    if let Some(other) = solver.solve(off) {
                        assert_eq!(solver.contribution(other), off);
                    }
                }
            }
        }
    }

    #[test]
    fn ipv6_masks_traffic_class_flow_label_and_hop_limit() {
        // Build an IPv6 packet from V2's transport bytes.
        let v2 = hex(V2);
        let transport = &v2[28..v2.len() - 4];
        let mut p = vec![0x60, 0, 0, 0, 0, (8 + transport.len() + 4) as u8, 17, 64];
        p.extend_from_slice(&[0xfe; 16]);
        p.extend_from_slice(&[0xfd; 16]);
        p.extend_from_slice(&v2[20..28]);
        p[44..46].copy_from_slice(&((8 + transport.len() + 4) as u16).to_be_bytes());
        p.extend_from_slice(transport);
        let c = compute(&p).unwrap();
        let mut q = p.clone();
        q[0] = 0x6f;
        q[1] = 0x12;
        q[3] = 0x99;
        q[7] = 1;
        assert_eq!(compute(&q).unwrap(), c);
        q[8] ^= 1; // source address is covered
        assert_ne!(compute(&q).unwrap(), c);
    }
}
