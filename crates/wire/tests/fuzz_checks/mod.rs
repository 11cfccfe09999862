//! The invariants the fuzz targets check, written once.
//!
//! Used by the cargo-fuzz targets in `fuzz/fuzz_targets/` (through a `#[path]`
//! module, since `fuzz/` is a crate of its own outside the workspace) and by
//! `tests/fuzz_corpus.rs`, which replays the corpus and the regression inputs
//! on stable Rust in the normal test suite.
//!
//! Both entry points take any byte string. They panic (an `assert!`) only
//! when the wire crate breaks a promise of its docs:
//!
//! * no parser panics, whatever the input;
//! * a parsed datagram or transport packet re-encodes to exactly the bytes it
//!   was parsed from (for a datagram: the first IP-total-length bytes; the
//!   parser ignores what follows), except the contents of pad bytes, which the
//!   crate documents as not kept (writers send zeros); and the re-encoding
//!   parses back to the same value;
//! * the ICRC functions agree with each other: `verify`, `compute`,
//!   `recover_ipv4_id` and `write_datagram`;
//! * a 256-byte MAD keeps its header and data, and a CM message survives
//!   `to_mad` → `parse`.

use ndverbs_wire::capture;
use ndverbs_wire::cm::CmMessage;
use ndverbs_wire::cma::CmaHeader;
use ndverbs_wire::icrc::{self, ICRC_LEN};
use ndverbs_wire::ip::{Envelope, IpHeader, IPV6_HEADER_LEN};
use ndverbs_wire::mad::{Mad, MadHeader, MAD_DATA_LEN, MAD_HEADER_LEN, MAD_LEN};
use ndverbs_wire::packet::{write_datagram, Datagram, Packet};

/// Checks one input of the `wire_parse` target: an IP packet, a UDP payload,
/// or (when 256 bytes long) a MAD, all at once.
pub fn check_wire(data: &[u8]) {
    // As an IP packet.
    if let Ok((env, _)) = Envelope::parse(data) {
        check_envelope(data, &env);
    }
    if let Ok(d) = Datagram::parse(data) {
        check_datagram(data, &d);
    }
    // Whatever the input is, the ICRC functions answer without panicking.
    let _ = icrc::verify(data);
    let _ = icrc::compute(data);
    let _ = icrc::recover_ipv4_id(data);

    // As a UDP payload (BTH onwards).
    if let Ok(p) = Packet::parse(data) {
        check_packet(data, &p);
    }

    // As a MAD, a bare CM message and an rdma_cm header.
    if data.len() == MAD_LEN {
        check_mad(data);
    }
    if let Some((attr, rest)) = data.split_first_chunk::<2>() {
        if let Some(body) = rest.first_chunk::<MAD_DATA_LEN>() {
            if let Ok(msg) = CmMessage::parse_data(u16::from_be_bytes(*attr), body) {
                check_cm(&msg, 0);
            }
        }
    }
    if let Ok(h) = CmaHeader::parse(data) {
        check_cma(&h);
    }
}

/// Checks one input of the `capture_parse` target: a pcap or pcapng file.
///
/// Every frame's IP packet (if its link layer is one the reader strips) goes
/// through [`check_datagram`] when it parses as RoCEv2.
pub fn check_capture(data: &[u8]) {
    let _ = capture::is_capture(data);
    let Ok(frames) = capture::read_frames(data) else {
        return;
    };
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f.number, i + 1, "frames are numbered from 1 without gaps");
        assert!(
            f.data.len() <= data.len(),
            "frame {} is longer than the file",
            f.number
        );
        let Some((_, ip)) = capture::ip_packet(f.link, f.data) else {
            continue;
        };
        if let Ok(d) = Datagram::parse(ip) {
            check_datagram(ip, &d);
        }
    }
}

/// Bytes of `ip_packet` that the IP header's length field covers.
fn ip_total_len(ip: &IpHeader) -> usize {
    match ip {
        IpHeader::V4(h) => usize::from(h.total_len),
        IpHeader::V6(h) => IPV6_HEADER_LEN + usize::from(h.payload_len),
    }
}

/// IP and UDP headers re-encode to the bytes they came from.
fn check_envelope(data: &[u8], env: &Envelope) {
    let mut out = vec![0u8; env.len()];
    assert_eq!(env.write(&mut out), Ok(env.len()), "Envelope::write");
    assert_eq!(out, data[..env.len()], "Envelope round trip");
    assert!(
        env.len() <= ip_total_len(&env.ip),
        "IP and UDP headers inside the IP packet"
    );
}

/// A parsed datagram: byte-exact round trip of the covered prefix, and
/// consistent ICRC functions.
pub fn check_datagram(data: &[u8], d: &Datagram<'_>) {
    let total = ip_total_len(&d.envelope.ip);
    assert!(
        total <= data.len(),
        "IP total length {total} past the {} input bytes",
        data.len()
    );
    let covered = &data[..total];

    let len = d
        .encoded_len()
        .expect("a parsed datagram has a known opcode");
    assert_eq!(len, total, "Datagram::encoded_len vs IP total length");
    let mut out = vec![0u8; len];
    assert_eq!(d.write(&mut out), Ok(len), "Datagram::write");
    let pad = pad_range(d.envelope.len(), &d.packet, len);
    assert_same(covered, &out, pad.clone(), "Datagram round trip");
    assert_eq!(
        Datagram::parse(&out).as_ref(),
        Ok(d),
        "re-encoded datagram parses back"
    );

    // ICRC: the carried one is checked against the computed one, and the
    // IPv4 ID recovered from the ICRC is the one in the header exactly when
    // the ICRC is valid.
    let body = &covered[..total - ICRC_LEN];
    let verified = icrc::verify(covered).expect("a parsed datagram has room for an ICRC");
    let computed = icrc::compute(body).expect("a parsed datagram has an ICRC input");
    assert_eq!(verified, computed == d.packet.icrc, "verify vs compute");
    if let IpHeader::V4(h) = d.envelope.ip {
        let recovered =
            icrc::recover_ipv4_id(covered).expect("IPv4 RoCEv2 packets are long enough");
        assert_eq!(
            recovered == Some(h.id),
            verified,
            "recover_ipv4_id {recovered:?} vs header ID {} (ICRC valid: {verified})",
            h.id
        );
        if let Some(id) = recovered {
            assert_eq!(
                icrc::compute_with_ipv4_id(body, id),
                Ok(d.packet.icrc),
                "the recovered ID explains the ICRC"
            );
        }
    }

    // write_datagram fills in a valid ICRC and changes nothing else.
    let mut fresh = vec![0u8; len];
    assert_eq!(
        write_datagram(&d.envelope, &d.packet, &mut fresh),
        Ok(len),
        "write_datagram of a parsed datagram"
    );
    assert_eq!(
        icrc::verify(&fresh),
        Ok(true),
        "write_datagram writes a valid ICRC"
    );
    assert_same(
        &covered[..total - ICRC_LEN],
        &fresh[..total - ICRC_LEN],
        pad,
        "write_datagram",
    );
    if let IpHeader::V4(h) = d.envelope.ip {
        assert_eq!(
            icrc::recover_ipv4_id(&fresh),
            Ok(Some(h.id)),
            "ID of a fresh ICRC"
        );
    }

    if d.packet.payload.len() == MAD_LEN {
        check_mad(d.packet.payload);
    }
}

/// A parsed transport packet (UDP payload): byte-exact round trip.
fn check_packet(data: &[u8], p: &Packet<'_>) {
    let len = p.encoded_len().expect("a parsed packet has a known opcode");
    assert_eq!(len, data.len(), "Packet::encoded_len vs UDP payload length");
    let mut out = vec![0u8; len];
    assert_eq!(p.write(&mut out), Ok(len), "Packet::write");
    assert_same(data, &out, pad_range(0, p, len), "Packet round trip");
    assert_eq!(
        Packet::parse(&out).as_ref(),
        Ok(p),
        "re-encoded packet parses back"
    );
    if p.payload.len() == MAD_LEN {
        check_mad(p.payload);
    }
}

/// Where the pad bytes of `p` lie in an encoding of `len` bytes whose
/// transport part starts at `start`.
fn pad_range(start: usize, p: &Packet<'_>, len: usize) -> std::ops::Range<usize> {
    let pad = usize::from(p.bth.pad & 3);
    assert!(start + pad + ICRC_LEN <= len, "pad inside the packet");
    len - ICRC_LEN - pad..len - ICRC_LEN
}

/// Compares an input with its re-encoding and names the first differing
/// byte. Pad bytes are the exception the crate documents: their contents are
/// not kept, and the writers send zeros there.
fn assert_same(input: &[u8], output: &[u8], pad: std::ops::Range<usize>, what: &str) {
    assert_eq!(input.len(), output.len(), "{what}: length");
    for i in pad.clone() {
        assert_eq!(
            output[i], 0,
            "{what}: pad byte at offset {i} written non-zero"
        );
    }
    let differs = |i: &usize| input[*i] != output[*i] && !pad.contains(i);
    if let Some(i) = (0..input.len()).find(differs) {
        panic!(
            "{what}: byte {i} differs: input 0x{:02x}, re-encoded 0x{:02x}\n input: {:02x?}\noutput: {:02x?}",
            input[i], output[i], input, output
        );
    }
}

/// A 256-byte MAD keeps every header field and its data; a CM message in it
/// survives `to_mad` → `parse`.
fn check_mad(buf: &[u8]) {
    let mad = Mad::parse(buf).expect("any 256 bytes are a MAD");
    let mut hdr = [0u8; MAD_HEADER_LEN];
    assert_eq!(
        mad.header.write(&mut hdr),
        Ok(MAD_HEADER_LEN),
        "MadHeader::write"
    );
    assert_eq!(hdr, buf[..MAD_HEADER_LEN], "MAD header round trip");
    assert_eq!(mad.data[..], buf[MAD_HEADER_LEN..], "MAD data");
    if let Ok(msg) = CmMessage::parse(&mad) {
        assert_eq!(msg.attr_id(), mad.header.attr_id, "CM attribute ID");
        check_cm(&msg, mad.header.tid);
    }
}

/// `to_mad(tid)` of a CM message is a CM MAD that parses back to it.
fn check_cm(msg: &CmMessage, tid: u64) {
    let _ = (msg.name(), msg.local_comm_id(), msg.remote_comm_id());
    assert!(
        msg.private_data().len() < MAD_DATA_LEN,
        "private data inside the MAD"
    );
    let bytes = msg.to_mad(tid);
    let again = Mad::parse(&bytes).expect("to_mad makes 256 bytes");
    assert_eq!(
        again.header,
        MadHeader::cm(msg.attr_id(), tid),
        "to_mad header"
    );
    assert_eq!(
        CmMessage::parse(&again).as_ref(),
        Ok(msg),
        "CM message round trip through to_mad"
    );
    if let CmMessage::Req(req) = msg {
        let _ = (req.has_alternate_path(), req.sap_supported());
        if let Ok(h) = CmaHeader::parse(&req.private_data) {
            check_cma(&h);
        }
    }
}

/// A parsed rdma_cm header writes and parses back to itself.
fn check_cma(h: &CmaHeader) {
    let mut b = [0u8; ndverbs_wire::cma::CMA_HEADER_LEN];
    let n = h
        .write(&mut b)
        .expect("a parsed rdma_cm header has one address family");
    assert_eq!(
        CmaHeader::parse(&b[..n]).as_ref(),
        Ok(h),
        "rdma_cm header round trip"
    );
}
