//! Property tests for every codec of `ndverbs-wire`.
//!
//! * write → parse gives back the value, parse → write gives back the bytes
//!   (up to the bits a format reserves), for every header, for whole packets of
//!   every opcode and for every CM message;
//! * the ICRC verifies, recovers any IPv4 ID and catches any single-bit error;
//! * no parser panics, on random bytes or on mutated valid datagrams.
//!
//! Failure persistence is off so a failing run leaves no files behind; proptest
//! prints the minimal failing input instead.

use ndverbs_wire::bth::{psn, Bth, BTH_LEN, MASK24};
use ndverbs_wire::cm::{
    attr, CmMessage, CmPath, Dreq, IdsAndData, Mra, Rej, Rep, Req, SidrRep, SidrReq,
};
use ndverbs_wire::cma::{CmaHeader, CMA_HEADER_LEN};
use ndverbs_wire::ext::{
    Aeth, AtomicEth, Deth, Reth, Syndrome, AETH_LEN, ATOMIC_ETH_LEN, CNP_LEN, DETH_LEN, RETH_LEN,
};
use ndverbs_wire::icrc::{self, ICRC_LEN};
use ndverbs_wire::ip::{
    Envelope, IpHeader, Ipv4Header, Ipv6Header, UdpHeader, IPV4_HEADER_LEN, IPV6_HEADER_LEN,
    UDP_HEADER_LEN,
};
use ndverbs_wire::mad::{
    Mad, MadHeader, GSI_QKEY, GSI_QPN, MAD_DATA_LEN, MAD_HEADER_LEN, MAD_LEN, MGMT_CLASS_CM,
};
use ndverbs_wire::opcode::{Headers, Opcode, Payload};
use ndverbs_wire::packet::{write_datagram, Datagram, ExtHeaders, Packet};
use ndverbs_wire::WireError;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use std::fmt::Debug;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;

/// Every value of a 24-bit field (QPN, PSN, MSN, EECN, vendor ID).
const U24: Range<u32> = 0..1 << 24;
/// Largest payload the packet properties generate.
const MAX_PAYLOAD: usize = 300;
/// The attribute IDs of the nine CM messages [`CmMessage`] knows.
const CM_ATTRS: &[u16] = &[
    attr::REQ,
    attr::MRA,
    attr::REJ,
    attr::REP,
    attr::RTU,
    attr::DREQ,
    attr::DREP,
    attr::SIDR_REQ,
    attr::SIDR_REP,
];

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

/// `N` random bytes as an array.
fn arr<const N: usize>() -> impl Strategy<Value = [u8; N]> {
    vec(any::<u8>(), N).prop_map(|v| v.try_into().expect("exactly N bytes"))
}

fn ipv4() -> impl Strategy<Value = Ipv4Addr> {
    any::<u32>().prop_map(Ipv4Addr::from)
}

fn ipv6() -> impl Strategy<Value = Ipv6Addr> {
    any::<u128>().prop_map(Ipv6Addr::from)
}

/// A source and destination of one family.
fn ip_pair() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    prop_oneof![
        (ipv4(), ipv4()).prop_map(|(s, d)| (IpAddr::V4(s), IpAddr::V4(d))),
        (ipv6(), ipv6()).prop_map(|(s, d)| (IpAddr::V6(s), IpAddr::V6(d))),
    ]
}

prop_compose! {
    /// A BTH with every field random except TVer (0, the only value parse accepts).
    fn arb_bth()(
        opcode in any::<u8>(),
        se in any::<bool>(),
        mig_req in any::<bool>(),
        pad in 0u8..4,
        pkey in any::<u16>(),
        fecn in any::<bool>(),
        becn in any::<bool>(),
        resv6 in 0u8..64,
        dqpn in U24,
        ack_req in any::<bool>(),
        resv7 in 0u8..128,
        psn in U24
    ) -> Bth {
        Bth {
            opcode: Opcode(opcode),
            se,
            mig_req,
            pad,
            tver: 0,
            pkey,
            fecn,
            becn,
            resv6,
            dqpn,
            ack_req,
            resv7,
            psn,
        }
    }
}

prop_compose! {
    fn arb_ipv4_header()(
        tos in any::<u8>(),
        total_len in any::<u16>(),
        id in any::<u16>(),
        flags_frag in any::<u16>(),
        ttl in any::<u8>(),
        protocol in any::<u8>(),
        checksum in any::<u16>(),
        src in ipv4(),
        dst in ipv4()
    ) -> Ipv4Header {
        Ipv4Header { tos, total_len, id, flags_frag, ttl, protocol, checksum, src, dst }
    }
}

prop_compose! {
    fn arb_ipv6_header()(
        traffic_class in any::<u8>(),
        flow_label in 0u32..1 << 20,
        payload_len in any::<u16>(),
        next_header in any::<u8>(),
        hop_limit in any::<u8>(),
        src in ipv6(),
        dst in ipv6()
    ) -> Ipv6Header {
        Ipv6Header { traffic_class, flow_label, payload_len, next_header, hop_limit, src, dst }
    }
}

prop_compose! {
    fn arb_udp_header()(
        src_port in any::<u16>(),
        dst_port in any::<u16>(),
        length in any::<u16>(),
        checksum in any::<u16>()
    ) -> UdpHeader {
        UdpHeader { src_port, dst_port, length, checksum }
    }
}

prop_compose! {
    fn arb_reth()(va in any::<u64>(), rkey in any::<u32>(), len in any::<u32>()) -> Reth {
        Reth { va, rkey, len }
    }
}

prop_compose! {
    fn arb_aeth()(syndrome in any::<u8>(), msn in U24) -> Aeth {
        Aeth { syndrome, msn }
    }
}

prop_compose! {
    fn arb_atomic_eth()(
        va in any::<u64>(),
        rkey in any::<u32>(),
        swap_add in any::<u64>(),
        compare in any::<u64>()
    ) -> AtomicEth {
        AtomicEth { va, rkey, swap_add, compare }
    }
}

prop_compose! {
    fn arb_deth()(qkey in any::<u32>(), resv in any::<u8>(), src_qpn in U24) -> Deth {
        Deth { qkey, resv, src_qpn }
    }
}

prop_compose! {
    fn arb_mad_header()(
        base_version in any::<u8>(),
        mgmt_class in any::<u8>(),
        class_version in any::<u8>(),
        method in any::<u8>(),
        status in any::<u16>(),
        class_specific in any::<u16>(),
        tid in any::<u64>(),
        attr_id in any::<u16>(),
        resv in any::<u16>(),
        attr_mod in any::<u32>()
    ) -> MadHeader {
        MadHeader {
            base_version,
            mgmt_class,
            class_version,
            method,
            status,
            class_specific,
            tid,
            attr_id,
            resv,
            attr_mod,
        }
    }
}

/// Everything random a test datagram needs except its opcode: one value for
/// every extension header (a packet takes those its opcode needs), payload
/// bytes, addresses, and the randomness of the ICRC checks.
#[derive(Debug, Clone)]
struct Parts {
    bth: Bth,
    deth: Deth,
    feth: u32,
    reth: Reth,
    atomic_eth: AtomicEth,
    aeth: Aeth,
    atomic_ack_eth: u64,
    immdt: u32,
    ieth: u32,
    cnp: [u8; CNP_LEN],
    /// Payload for UpToMtu/FullMtu opcodes (LastMtu: at least one byte of it).
    data: Vec<u8>,
    /// Payload for ATOMIC_WRITE.
    eight: [u8; 8],
    addrs: (IpAddr, IpAddr),
    src_port: u16,
    /// IPv4 ID to substitute before recomputing the ICRC.
    ip_id: u16,
    /// Which covered byte after the UDP header to corrupt, and which bit.
    flip_at: Index,
    flip_bit: u8,
    /// XORed into every field the ICRC masks.
    noise: u8,
}

prop_compose! {
    fn arb_parts()(
        bth in arb_bth(),
        deth in arb_deth(),
        feth in any::<u32>(),
        reth in arb_reth(),
        atomic_eth in arb_atomic_eth(),
        aeth in arb_aeth(),
        atomic_ack_eth in any::<u64>(),
        immdt in any::<u32>(),
        ieth in any::<u32>(),
        cnp in arr::<CNP_LEN>(),
        data in vec(any::<u8>(), 0..=MAX_PAYLOAD),
        eight in arr::<8>(),
        addrs in ip_pair(),
        src_port in any::<u16>(),
        ip_id in any::<u16>(),
        flip_at in any::<Index>(),
        flip_bit in 0u8..8,
        noise in 1u8..=255
    ) -> Parts {
        Parts {
            bth,
            deth,
            feth,
            reth,
            atomic_eth,
            aeth,
            atomic_ack_eth,
            immdt,
            ieth,
            cnp,
            data,
            eight,
            addrs,
            src_port,
            ip_id,
            flip_at,
            flip_bit,
            noise,
        }
    }
}

prop_compose! {
    fn arb_cm_path()(
        local_lid in any::<u16>(),
        remote_lid in any::<u16>(),
        local_gid in ipv6(),
        remote_gid in ipv6(),
        flow_label in 0u32..1 << 20,
        resv_fl in 0u8..64,
        packet_rate in 0u8..64,
        traffic_class in any::<u8>(),
        hop_limit in any::<u8>(),
        sl in 0u8..16,
        subnet_local in any::<bool>(),
        resv_sl in 0u8..8,
        local_ack_timeout in 0u8..32,
        resv_ack in 0u8..8
    ) -> CmPath {
        CmPath {
            local_lid,
            remote_lid,
            local_gid,
            remote_gid,
            flow_label,
            resv_fl,
            packet_rate,
            traffic_class,
            hop_limit,
            sl,
            subnet_local,
            resv_sl,
            local_ack_timeout,
            resv_ack,
        }
    }
}

prop_compose! {
    fn arb_req()(
        local_comm_id in any::<u32>(),
        vendor_id in U24,
        service_id in any::<u64>(),
        local_ca_guid in any::<u64>(),
        local_qkey in any::<u32>(),
        local_qpn in U24,
        responder_resources in any::<u8>(),
        local_eecn in U24,
        initiator_depth in any::<u8>(),
        remote_eecn in U24,
        remote_cm_response_timeout in 0u8..32,
        transport_service_type in 0u8..4,
        end_to_end_flow_control in any::<bool>(),
        starting_psn in U24,
        local_cm_response_timeout in 0u8..32,
        retry_count in 0u8..8,
        pkey in any::<u16>(),
        path_mtu in 0u8..16,
        rdc_exists in any::<bool>(),
        rnr_retry_count in 0u8..8,
        max_cm_retries in 0u8..16,
        srq in any::<bool>(),
        extended_transport_type in 0u8..8,
        primary in arb_cm_path(),
        alternate in arb_cm_path(),
        private_data in arr()
    ) -> Req {
        Req {
            local_comm_id,
            vendor_id,
            service_id,
            local_ca_guid,
            local_qkey,
            local_qpn,
            responder_resources,
            local_eecn,
            initiator_depth,
            remote_eecn,
            remote_cm_response_timeout,
            transport_service_type,
            end_to_end_flow_control,
            starting_psn,
            local_cm_response_timeout,
            retry_count,
            pkey,
            path_mtu,
            rdc_exists,
            rnr_retry_count,
            max_cm_retries,
            srq,
            extended_transport_type,
            primary,
            alternate,
            private_data,
        }
    }
}

prop_compose! {
    fn arb_mra()(
        local_comm_id in any::<u32>(),
        remote_comm_id in any::<u32>(),
        message_mraed in 0u8..4,
        service_timeout in 0u8..32,
        private_data in arr()
    ) -> Mra {
        Mra { local_comm_id, remote_comm_id, message_mraed, service_timeout, private_data }
    }
}

prop_compose! {
    fn arb_rej()(
        local_comm_id in any::<u32>(),
        remote_comm_id in any::<u32>(),
        message_rejected in 0u8..4,
        rejected_info_length in 0u8..128,
        reason in any::<u16>(),
        ari in arr(),
        private_data in arr()
    ) -> Rej {
        Rej {
            local_comm_id,
            remote_comm_id,
            message_rejected,
            rejected_info_length,
            reason,
            ari,
            private_data,
        }
    }
}

prop_compose! {
    fn arb_rep()(
        local_comm_id in any::<u32>(),
        remote_comm_id in any::<u32>(),
        local_qkey in any::<u32>(),
        local_qpn in U24,
        local_eecn in U24,
        starting_psn in U24,
        vendor_id in U24,
        responder_resources in any::<u8>(),
        initiator_depth in any::<u8>(),
        target_ack_delay in 0u8..32,
        failover_accepted in 0u8..4,
        end_to_end_flow_control in any::<bool>(),
        rnr_retry_count in 0u8..8,
        srq in any::<bool>(),
        local_ca_guid in any::<u64>(),
        private_data in arr()
    ) -> Rep {
        Rep {
            local_comm_id,
            remote_comm_id,
            local_qkey,
            local_qpn,
            local_eecn,
            starting_psn,
            vendor_id,
            responder_resources,
            initiator_depth,
            target_ack_delay,
            failover_accepted,
            end_to_end_flow_control,
            rnr_retry_count,
            srq,
            local_ca_guid,
            private_data,
        }
    }
}

prop_compose! {
    /// RTU and DREP: they share one layout.
    fn arb_ids_and_data()(
        local_comm_id in any::<u32>(),
        remote_comm_id in any::<u32>(),
        private_data in arr()
    ) -> IdsAndData {
        IdsAndData { local_comm_id, remote_comm_id, private_data }
    }
}

prop_compose! {
    fn arb_dreq()(
        local_comm_id in any::<u32>(),
        remote_comm_id in any::<u32>(),
        remote_qpn in U24,
        private_data in arr()
    ) -> Dreq {
        Dreq { local_comm_id, remote_comm_id, remote_qpn, private_data }
    }
}

prop_compose! {
    fn arb_sidr_req()(
        request_id in any::<u32>(),
        pkey in any::<u16>(),
        service_id in any::<u64>(),
        private_data in arr()
    ) -> SidrReq {
        SidrReq { request_id, pkey, service_id, private_data }
    }
}

prop_compose! {
    fn arb_sidr_rep()(
        request_id in any::<u32>(),
        status in any::<u8>(),
        add_info_len in any::<u8>(),
        vendor_id in U24,
        qpn in U24,
        service_id in any::<u64>(),
        qkey in any::<u32>(),
        add_info in arr(),
        private_data in arr()
    ) -> SidrRep {
        SidrRep {
            request_id,
            status,
            add_info_len,
            vendor_id,
            qpn,
            service_id,
            qkey,
            add_info,
            private_data,
        }
    }
}

fn arb_cm() -> impl Strategy<Value = CmMessage> {
    prop_oneof![
        arb_req().prop_map(CmMessage::Req),
        arb_mra().prop_map(CmMessage::Mra),
        arb_rej().prop_map(CmMessage::Rej),
        arb_rep().prop_map(CmMessage::Rep),
        arb_ids_and_data().prop_map(CmMessage::Rtu),
        arb_dreq().prop_map(CmMessage::Dreq),
        arb_ids_and_data().prop_map(CmMessage::Drep),
        arb_sidr_req().prop_map(CmMessage::SidrReq),
        arb_sidr_rep().prop_map(CmMessage::SidrRep),
    ]
}

fn arb_cma() -> impl Strategy<Value = CmaHeader> {
    (any::<u8>(), any::<u16>(), ip_pair()).prop_map(|(version, src_port, (src, dst))| CmaHeader {
        version,
        src_port,
        src,
        dst,
    })
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// The two round trips of a fixed-size header, plus: it takes exactly `N`
/// bytes, and one byte less is an error for both directions.
///
/// `fix` turns random bytes into ones the parser accepts (version nibbles).
fn check_header<T: PartialEq + Debug, const N: usize>(
    value: T,
    mut raw: [u8; N],
    fix: impl Fn(&mut [u8; N]),
    parse: impl Fn(&[u8]) -> Result<T, WireError>,
    write: impl Fn(&T, &mut [u8]) -> Result<usize, WireError>,
) -> Result<(), TestCaseError> {
    let mut buf = [0u8; N];
    prop_assert_eq!(write(&value, &mut buf)?, N);
    prop_assert_eq!(parse(&buf)?, value);

    fix(&mut raw);
    let parsed = parse(&raw)?;
    let mut out = [0u8; N];
    prop_assert_eq!(write(&parsed, &mut out)?, N);
    prop_assert_eq!(out, raw);

    prop_assert!(parse(&raw[..N - 1]).is_err());
    prop_assert!(write(&parsed, &mut out[..N - 1]).is_err());
    Ok(())
}

/// The extension headers `h` calls for, taken from `p`.
fn ext_for(h: Headers, p: &Parts) -> ExtHeaders {
    ExtHeaders {
        deth: h.contains(Headers::DETH).then_some(p.deth),
        feth: h.contains(Headers::FETH).then_some(p.feth),
        reth: h.contains(Headers::RETH).then_some(p.reth),
        atomic_eth: h.contains(Headers::ATOMIC_ETH).then_some(p.atomic_eth),
        aeth: h.contains(Headers::AETH).then_some(p.aeth),
        atomic_ack_eth: h
            .contains(Headers::ATOMIC_ACK_ETH)
            .then_some(p.atomic_ack_eth),
        immdt: h.contains(Headers::IMMDT).then_some(p.immdt),
        ieth: h.contains(Headers::IETH).then_some(p.ieth),
        cnp: h.contains(Headers::CNP).then_some(p.cnp),
    }
}

/// A payload obeying `rule`, taken from `p`.
fn payload_for(rule: Payload, p: &Parts) -> &[u8] {
    match rule {
        Payload::None => &[],
        Payload::Eight => &p.eight,
        Payload::LastMtu if p.data.is_empty() => &p.eight[..1],
        Payload::LastMtu | Payload::UpToMtu | Payload::FullMtu => &p.data,
    }
}

/// The packet for `op` made of `p`'s parts (ICRC 0), and its envelope.
fn build(op: Opcode, p: &Parts) -> Result<(Envelope, Packet<'_>), WireError> {
    let info = op.info()?;
    let payload = payload_for(info.payload, p);
    let mut bth = p.bth;
    bth.opcode = op;
    bth.pad = Packet::pad_for(payload.len());
    let pkt = Packet {
        bth,
        ext: ext_for(info.headers, p),
        payload,
        icrc: 0,
    };
    let env = Envelope::new_rocev2(p.addrs.0, p.addrs.1, p.src_port, pkt.encoded_len()?);
    Ok((env, pkt))
}

/// Writes the datagram (ICRC computed) into a buffer of exactly its size.
fn encode(env: &Envelope, pkt: &Packet<'_>) -> Result<Vec<u8>, WireError> {
    let mut buf = vec![0u8; env.len() + pkt.encoded_len()?];
    let n = write_datagram(env, pkt, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Offsets of the bytes the ICRC masks, and which bits of each.
fn masked_fields(ip: &IpHeader) -> Vec<(usize, u8)> {
    let (ip_len, mut v) = match ip {
        IpHeader::V4(_) => (
            IPV4_HEADER_LEN,
            vec![(1, 0xff), (8, 0xff), (10, 0xff), (11, 0xff)],
        ),
        IpHeader::V6(_) => (
            IPV6_HEADER_LEN,
            vec![(0, 0x0f), (1, 0xff), (2, 0xff), (3, 0xff), (7, 0xff)],
        ),
    };
    v.extend([
        (ip_len + 6, 0xff),
        (ip_len + 7, 0xff),
        (ip_len + UDP_HEADER_LEN + 4, 0xff),
    ]);
    v
}

/// Everything one datagram of opcode `op` must satisfy.
fn check_datagram(op: Opcode, p: &Parts) -> Result<(), TestCaseError> {
    let info = op.info()?;
    let (env, pkt) = build(op, p)?;
    let pad = usize::from(pkt.bth.pad);
    let tlen = pkt.encoded_len()?;
    prop_assert_eq!(
        tlen,
        BTH_LEN + info.ext_len() + pkt.payload.len() + pad + ICRC_LEN
    );
    prop_assert_eq!(
        tlen % 4,
        0,
        "{}: transport part not 4-byte aligned",
        info.name
    );
    let mtu = if info.payload == Payload::FullMtu {
        pkt.payload.len()
    } else {
        MAX_PAYLOAD
    };
    prop_assert!(info.check_payload_len(pkt.payload.len(), mtu).is_ok());

    // write → parse → write.
    let buf = encode(&env, &pkt)?;
    let n = buf.len();
    let icrc = icrc::compute(&buf[..n - ICRC_LEN])?;
    let want = Datagram {
        envelope: env,
        packet: Packet { icrc, ..pkt },
    };
    let got = Datagram::parse(&buf)?;
    prop_assert_eq!(got, want, "{}", info.name);
    prop_assert!(icrc::verify(&buf)?, "{}: ICRC does not verify", info.name);
    prop_assert_eq!(got.encoded_len()?, n);
    let mut again = vec![0u8; n];
    prop_assert_eq!(got.write(&mut again)?, n);
    prop_assert_eq!(&again, &buf, "{}: re-encoding differs", info.name);
    prop_assert!(
        buf[n - ICRC_LEN - pad..n - ICRC_LEN]
            .iter()
            .all(|&b| b == 0),
        "{}: pad bytes not zero",
        info.name
    );
    // Ethernet padding after the IP packet is ignored.
    let mut padded = buf.clone();
    padded.extend_from_slice(&[0xee; 6]);
    prop_assert_eq!(Datagram::parse(&padded)?, want);
    // Anything shorter is an error.
    prop_assert!(Datagram::parse(&buf[..n - 1]).is_err());

    // Fields a router may rewrite are masked out of the ICRC.
    let mut rewritten = buf.clone();
    for (off, bits) in masked_fields(&env.ip) {
        rewritten[off] ^= p.noise & bits;
    }
    prop_assert!(
        icrc::verify(&rewritten)?,
        "{}: masked field covered",
        info.name
    );

    // Any single-bit error after the UDP header (except masked BTH byte 4,
    // and including the ICRC itself) is caught.
    let first = env.len();
    let masked = first + 4;
    let mut at = first + p.flip_at.index(n - first - 1);
    if at >= masked {
        at += 1;
    }
    let mut bad = buf.clone();
    bad[at] ^= 1 << p.flip_bit;
    prop_assert!(
        !icrc::verify(&bad)?,
        "{}: bit flip at {} undetected",
        info.name,
        at
    );

    if let IpHeader::V4(h) = env.ip {
        // The ICRC is computed with the ID in the packet.
        prop_assert_eq!(
            icrc::compute_with_ipv4_id(&buf[..n - ICRC_LEN], h.id)?,
            icrc
        );
        prop_assert_eq!(icrc::recover_ipv4_id(&buf)?, Some(h.id));

        // Any other ID, as a kernel that picks it would send.
        let mut q = buf.clone();
        q[4..6].copy_from_slice(&p.ip_id.to_be_bytes());
        let c = icrc::compute_with_ipv4_id(&q[..n - ICRC_LEN], p.ip_id)?;
        q[n - ICRC_LEN..].copy_from_slice(&c.to_le_bytes());
        prop_assert!(icrc::verify(&q)?);
        prop_assert_eq!(icrc::recover_ipv4_id(&q)?, Some(p.ip_id), "{}", info.name);
        // recover_ipv4_id ignores the ID bytes.
        let mut hidden = q.clone();
        hidden[4..6].copy_from_slice(&(!p.ip_id).to_be_bytes());
        prop_assert_eq!(icrc::recover_ipv4_id(&hidden)?, Some(p.ip_id));
        let moved = IpHeader::V4(Ipv4Header { id: p.ip_id, ..h });
        prop_assert_eq!(Datagram::parse(&q)?.envelope.ip, moved);

        let mut bad = q;
        bad[at] ^= 1 << p.flip_bit;
        prop_assert!(
            !icrc::verify(&bad)?,
            "{}: bit flip at {} undetected",
            info.name,
            at
        );
    }
    Ok(())
}

/// The bits of a CM message's data area that `write_data` reproduces: all but
/// the reserved bits the IBTA layouts (vol. 1 ch. 12) leave unnamed. Reserved
/// bits inside a path (`CmPath::resv_*`) are kept, so they are not listed.
fn defined_bits(attr_id: u16) -> [u8; MAD_DATA_LEN] {
    let reserved: &[(usize, u8)] = match attr_id {
        // Reserved byte before the vendor ID, reserved word before the Q_Key.
        attr::REQ => &[(4, 0xff), (24, 0xff), (25, 0xff), (26, 0xff), (27, 0xff)],
        // Low 6 bits after Message MRAed, low 3 after the service timeout.
        attr::MRA => &[(8, 0x3f), (9, 0x07)],
        // Low 6 bits after Message Rejected, the bit after the ARI length.
        attr::REJ => &[(8, 0x3f), (9, 0x01)],
        // Low 4 bits after RNR retry count and SRQ.
        attr::REP => &[(27, 0x0f)],
        // Reserved byte after the remote QPN.
        attr::DREQ => &[(11, 0xff)],
        // Reserved word after the P_Key.
        attr::SIDR_REQ => &[(6, 0xff), (7, 0xff)],
        attr::RTU | attr::DREP | attr::SIDR_REP => &[],
        other => panic!("not a CM attribute: {other:#x}"),
    };
    let mut m = [0xffu8; MAD_DATA_LEN];
    for &(off, bits) in reserved {
        m[off] &= !bits;
    }
    m
}

/// Calls every parser on `bytes`; none may panic. Where a datagram parses,
/// writing it back must give the same bytes (pad bytes aside: see below).
fn poke(bytes: &[u8]) -> Result<(), TestCaseError> {
    let _ = Envelope::parse(bytes);
    let _ = Ipv4Header::parse(bytes);
    let _ = Ipv6Header::parse(bytes);
    let _ = Packet::parse(bytes);
    for off in [
        IPV4_HEADER_LEN + UDP_HEADER_LEN,
        IPV6_HEADER_LEN + UDP_HEADER_LEN,
    ] {
        if let Some(t) = bytes.get(off..) {
            let _ = Packet::parse(t);
        }
    }
    let _ = icrc::compute(bytes);
    let _ = icrc::verify(bytes);
    let _ = icrc::recover_ipv4_id(bytes);
    let _ = icrc::compute_with_ipv4_id(bytes, 0x1234);
    let _ = CmaHeader::parse(bytes);
    if let Ok(mad) = Mad::parse(bytes) {
        let _ = CmMessage::parse(&mad);
    }
    if let Ok(d) = Datagram::parse(bytes) {
        let n = d.encoded_len()?;
        prop_assert!(n <= bytes.len());
        let mut out = vec![0u8; n];
        prop_assert_eq!(d.write(&mut out)?, n);
        // Packet keeps no pad bytes and writes zeros, so a nonzero pad byte on
        // the wire does not survive the round trip.
        let mut want = bytes[..n].to_vec();
        let pad = usize::from(d.packet.bth.pad);
        want[n - ICRC_LEN - pad..n - ICRC_LEN].fill(0);
        prop_assert_eq!(out, want);
        if let Ok(mad) = Mad::parse(d.packet.payload) {
            let _ = CmMessage::parse(&mad);
        }
    }
    Ok(())
}

prop_compose! {
    /// A valid datagram of a random opcode with up to four random bytes
    /// overwritten, maybe cut short: input that gets past the first checks.
    fn arb_mutated()(
        p in arb_parts(),
        op in select(Opcode::ALL),
        edits in vec((any::<Index>(), any::<u8>()), 0..4),
        cut in proptest::option::of(any::<Index>())
    ) -> Vec<u8> {
        let (env, pkt) = build(op, &p).expect("valid parts");
        let mut b = encode(&env, &pkt).expect("valid packet");
        for (at, v) in edits {
            let i = at.index(b.len());
            b[i] = v;
        }
        if let Some(cut) = cut {
            b.truncate(cut.index(b.len() + 1));
        }
        b
    }
}

// ---------------------------------------------------------------------------
// 1. Headers
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn bth_round_trips(h in arb_bth(), raw in arr::<BTH_LEN>()) {
        check_header(h, raw, |b| b[1] &= 0xf0, Bth::parse, Bth::write)?;
        let mut b = [0u8; BTH_LEN];
        h.write(&mut b)?;
        b[1] |= 1;
        prop_assert_eq!(Bth::parse(&b), Err(WireError::TransportVersion(1)));
    }

    #[test]
    fn ipv4_header_round_trips(h in arb_ipv4_header(), raw in arr::<IPV4_HEADER_LEN>()) {
        check_header(h, raw, |b| b[0] = 0x45, Ipv4Header::parse, Ipv4Header::write)?;
        // A computed checksum makes the header sum to 0xffff.
        let good = Ipv4Header { checksum: h.compute_checksum(), ..h };
        prop_assert_eq!(good.compute_checksum(), good.checksum);
        let mut b = [0u8; IPV4_HEADER_LEN];
        good.write(&mut b)?;
        let mut sum: u32 = b.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        prop_assert_eq!(sum, 0xffff);
    }

    #[test]
    fn ipv6_header_round_trips(h in arb_ipv6_header(), raw in arr::<IPV6_HEADER_LEN>()) {
        check_header(h, raw, |b| b[0] = 0x60 | (b[0] & 0x0f), Ipv6Header::parse, Ipv6Header::write)?;
    }

    #[test]
    fn udp_header_round_trips(h in arb_udp_header(), raw in arr::<UDP_HEADER_LEN>()) {
        check_header(h, raw, |_| (), UdpHeader::parse, UdpHeader::write)?;
    }

    #[test]
    fn reth_round_trips(h in arb_reth(), raw in arr::<RETH_LEN>()) {
        check_header(h, raw, |_| (), Reth::parse, Reth::write)?;
    }

    #[test]
    fn aeth_round_trips(h in arb_aeth(), raw in arr::<AETH_LEN>()) {
        check_header(h, raw, |_| (), Aeth::parse, Aeth::write)?;
        prop_assert_eq!(Aeth::new(h.kind(), h.msn), h);
        prop_assert_eq!(Syndrome::from_byte(h.syndrome).to_byte(), h.syndrome);
    }

    #[test]
    fn atomic_eth_round_trips(h in arb_atomic_eth(), raw in arr::<ATOMIC_ETH_LEN>()) {
        check_header(h, raw, |_| (), AtomicEth::parse, AtomicEth::write)?;
    }

    #[test]
    fn deth_round_trips(h in arb_deth(), raw in arr::<DETH_LEN>()) {
        check_header(h, raw, |_| (), Deth::parse, Deth::write)?;
    }

    #[test]
    fn mad_header_round_trips(
        h in arb_mad_header(),
        data in arr::<MAD_DATA_LEN>(),
        raw in arr::<MAD_LEN>()
    ) {
        let mut b = [0u8; MAD_LEN];
        prop_assert_eq!(h.write(&mut b)?, MAD_HEADER_LEN);
        b[MAD_HEADER_LEN..].copy_from_slice(&data);
        let mad = Mad::parse(&b)?;
        prop_assert_eq!(mad.header, h);
        prop_assert_eq!(mad.data, &data);

        let mad = Mad::parse(&raw)?;
        let mut out = [0u8; MAD_HEADER_LEN];
        prop_assert_eq!(mad.header.write(&mut out)?, MAD_HEADER_LEN);
        prop_assert_eq!(&out[..], &raw[..MAD_HEADER_LEN]);
        prop_assert_eq!(&mad.data[..], &raw[MAD_HEADER_LEN..]);

        prop_assert_eq!(Mad::parse(&raw[..MAD_LEN - 1]), Err(WireError::MadSize(MAD_LEN - 1)));
        prop_assert!(h.write(&mut out[..MAD_HEADER_LEN - 1]).is_err());
    }
}

// ---------------------------------------------------------------------------
// 2. Whole datagrams, every opcode
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(128))]

    /// Each case checks every supported opcode with the same random parts.
    #[test]
    fn every_opcode_round_trips_with_a_valid_icrc(p in arb_parts()) {
        for &op in Opcode::ALL {
            check_datagram(op, &p)?;
        }
    }

    /// A packet must carry exactly the headers its opcode names.
    #[test]
    fn a_missing_or_extra_header_is_refused(p in arb_parts(), op in select(Opcode::ALL)) {
        let info = op.info()?;
        let (_, pkt) = build(op, &p)?;
        let mut buf = vec![0u8; pkt.encoded_len()? + 64];
        prop_assert!(pkt.write(&mut buf).is_ok());
        for flip in [
            Headers::DETH,
            Headers::FETH,
            Headers::RETH,
            Headers::ATOMIC_ETH,
            Headers::AETH,
            Headers::ATOMIC_ACK_ETH,
            Headers::IMMDT,
            Headers::IETH,
            Headers::CNP,
        ] {
            // Drop the header if the opcode has it, add it if not.
            let only = ext_for(flip, &p);
            let mut bad = pkt;
            macro_rules! toggle {
                ($($f:ident),*) => {$(
                    if only.$f.is_some() {
                        bad.ext.$f = if pkt.ext.$f.is_some() { None } else { only.$f };
                    }
                )*};
            }
            toggle!(deth, feth, reth, atomic_eth, aeth, atomic_ack_eth, immdt, ieth, cnp);
            let r = bad.write(&mut buf);
            prop_assert!(
                matches!(r, Err(WireError::HeaderMismatch { .. })),
                "{}: toggling {:?} gave {:?}",
                info.name,
                flip,
                r
            );
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// What the opcode table says about a transport packet is enforced:
    /// payload where none is allowed, a pad count larger than the payload
    /// area, and a packet shorter than its headers plus ICRC are errors.
    #[test]
    fn structural_errors_are_reported(
        p in arb_parts(),
        op in select(Opcode::ALL),
        stray in vec(any::<u8>(), 1..=8),
        cut in any::<Index>()
    ) {
        let info = op.info()?;
        let (env, pkt) = build(op, &p)?;
        let buf = encode(&env, &pkt)?;
        let t = &buf[env.len()..];
        prop_assert_eq!(Packet::parse(t)?, Datagram::parse(&buf)?.packet);
        let hdr = pkt.header_len()?;

        let short = cut.index(hdr + ICRC_LEN);
        prop_assert!(
            matches!(Packet::parse(&t[..short]), Err(WireError::Truncated { .. })),
            "{}: {} bytes",
            info.name,
            short
        );

        // Pad count 3 on a payload area of fewer than 3 bytes.
        let area = t.len() - hdr - ICRC_LEN;
        if area < 3 {
            let mut q = t.to_vec();
            q[1] |= 0x30;
            prop_assert_eq!(
                Packet::parse(&q),
                Err(WireError::Pad { pad: 3, len: area })
            );
        }

        if info.payload == Payload::None {
            let mut q = t[..hdr].to_vec();
            q.extend_from_slice(&stray);
            q.extend_from_slice(&t[hdr..]);
            prop_assert_eq!(
                Packet::parse(&q),
                Err(WireError::UnexpectedPayload { opcode: info.name, len: stray.len() })
            );
            let mut with = pkt;
            with.payload = &stray;
            with.bth.pad = Packet::pad_for(stray.len());
            let mut out = vec![0u8; with.encoded_len()?];
            let r = with.write(&mut out);
            prop_assert!(
                matches!(r, Err(WireError::UnexpectedPayload { .. })),
                "{}: writing a payload gave {:?}",
                info.name,
                r
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 3. CM messages
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn cm_messages_round_trip_through_a_mad(msg in arb_cm(), tid in any::<u64>()) {
        let bytes = msg.to_mad(tid);
        let mad = Mad::parse(&bytes)?;
        prop_assert_eq!(mad.header, MadHeader::cm(msg.attr_id(), tid));
        prop_assert_eq!(CmMessage::parse(&mad)?, msg);
        // Private data always ends the MAD.
        let pd = msg.private_data();
        prop_assert_eq!(&bytes[MAD_LEN - pd.len()..], pd);
        // write_data clears whatever the buffer held.
        let mut data = [0xa5u8; MAD_DATA_LEN];
        msg.write_data(&mut data);
        prop_assert_eq!(&data[..], &bytes[MAD_HEADER_LEN..]);
    }

    /// A CM MAD carried as RoCEv2 does it: UD SEND_ONLY to QP1.
    #[test]
    fn cm_messages_round_trip_through_a_datagram(
        msg in arb_cm(),
        tid in any::<u64>(),
        addrs in ip_pair(),
        psn in U24
    ) {
        let mad = msg.to_mad(tid);
        let mut pkt = Packet::new(Bth::new(Opcode::UD_SEND_ONLY, GSI_QPN, psn));
        pkt.ext.deth = Some(Deth { qkey: GSI_QKEY, resv: 0, src_qpn: GSI_QPN });
        pkt.payload = &mad;
        let env = Envelope::new_rocev2(addrs.0, addrs.1, 0xc000, pkt.encoded_len()?);
        let buf = encode(&env, &pkt)?;
        prop_assert!(icrc::verify(&buf)?);
        let d = Datagram::parse(&buf)?;
        let back = Mad::parse(d.packet.payload)?;
        prop_assert_eq!(back.header.tid, tid);
        prop_assert_eq!(CmMessage::parse(&back)?, msg);
    }

    /// Random data: parse → write keeps exactly the defined bits, so
    /// parse(write(parse(b))) == parse(b).
    #[test]
    fn cm_parse_of_random_data_is_idempotent(
        attr_id in select(CM_ATTRS),
        raw in arr::<MAD_DATA_LEN>()
    ) {
        let msg = CmMessage::parse_data(attr_id, &raw)?;
        prop_assert_eq!(msg.attr_id(), attr_id);
        let mut out = [0x5au8; MAD_DATA_LEN];
        msg.write_data(&mut out);
        prop_assert_eq!(CmMessage::parse_data(attr_id, &out)?, msg);
        let defined = defined_bits(attr_id);
        for i in 0..MAD_DATA_LEN {
            prop_assert_eq!(
                out[i],
                raw[i] & defined[i],
                "{} byte {}: wrote {:#04x} from {:#04x}",
                msg.name(),
                i,
                out[i],
                raw[i]
            );
        }
    }

    #[test]
    fn other_attributes_and_classes_are_refused(
        attr_id in any::<u16>().prop_filter("a CM message", |a| !CM_ATTRS.contains(a)),
        class in any::<u8>().prop_filter("not the CM", |c| *c != MGMT_CLASS_CM),
        raw in arr::<MAD_LEN>()
    ) {
        let data: &[u8; MAD_DATA_LEN] = raw[MAD_HEADER_LEN..].try_into().expect("232 bytes");
        prop_assert_eq!(
            CmMessage::parse_data(attr_id, data),
            Err(WireError::UnknownCmAttribute(attr_id))
        );
        let mut b = raw;
        b[1] = class;
        prop_assert_eq!(
            CmMessage::parse(&Mad::parse(&b)?),
            Err(WireError::NotCm(class))
        );
    }
}

// ---------------------------------------------------------------------------
// 4. rdma_cm header
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn cma_header_round_trips(h in arb_cma(), raw in arr::<CMA_HEADER_LEN>(), v6 in any::<bool>()) {
        let mut b = [0u8; CMA_HEADER_LEN];
        prop_assert_eq!(h.write(&mut b)?, CMA_HEADER_LEN);
        prop_assert_eq!(CmaHeader::parse(&b)?, h);
        prop_assert_eq!(b[1], if h.src.is_ipv4() { 0x40 } else { 0x60 });

        // From random bytes with a valid IP version: only the low nibble of
        // byte 1 and, for IPv4, the 12 bytes before each address are dropped.
        let mut raw = raw;
        raw[1] = if v6 { 0x60 } else { 0x40 } | (raw[1] & 0x0f);
        let parsed = CmaHeader::parse(&raw)?;
        let mut out = [0u8; CMA_HEADER_LEN];
        parsed.write(&mut out)?;
        prop_assert_eq!(CmaHeader::parse(&out)?, parsed);
        let mut want = raw;
        want[1] &= 0xf0;
        if !v6 {
            want[4..16].fill(0);
            want[20..32].fill(0);
        }
        prop_assert_eq!(out, want);

        // Mixed families cannot be encoded.
        let mixed = CmaHeader {
            dst: if h.src.is_ipv4() {
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            } else {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            },
            ..h
        };
        prop_assert!(mixed.write(&mut out).is_err());
        prop_assert!(h.write(&mut out[..CMA_HEADER_LEN - 1]).is_err());
    }
}

// ---------------------------------------------------------------------------
// 5. Robustness
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn parsers_never_panic_on_random_bytes(bytes in vec(any::<u8>(), 0..600)) {
        poke(&bytes)?;
    }

    #[test]
    fn parsers_never_panic_on_random_cm_data(
        attr_id in prop_oneof![select(CM_ATTRS), any::<u16>()],
        data in arr::<MAD_DATA_LEN>(),
        mad in arr::<MAD_LEN>()
    ) {
        let _ = CmMessage::parse_data(attr_id, &data);
        poke(&mad)?;
    }

    #[test]
    fn parsers_never_panic_on_mutated_datagrams(bytes in arb_mutated()) {
        poke(&bytes)?;
    }
}

// ---------------------------------------------------------------------------
// 6. PSN arithmetic
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn psn_arithmetic_is_modulo_2_24(a in U24, n in 0u32..1 << 23, m in any::<u32>()) {
        let ahead = psn::add(a, n);
        prop_assert_eq!(psn::diff(ahead, a), n as i32);
        prop_assert_eq!(psn::diff(a, ahead), -(n as i32));
        prop_assert_eq!(psn::cmp(ahead, a), n.cmp(&0));
        prop_assert_eq!(psn::sub(ahead, n), a);
        prop_assert_eq!(psn::sub(psn::add(a, m), m), a);
        prop_assert_eq!(psn::add(psn::sub(a, m), m), a);
        prop_assert!(psn::add(a, m) <= MASK24 && psn::sub(a, m) <= MASK24);
    }
}

/// The reserved-bit table above is the IBTA one: a message of all ones
/// written back keeps exactly the defined bits.
#[test]
fn cm_defined_bits_match_the_layouts() {
    for &attr_id in CM_ATTRS {
        let msg = CmMessage::parse_data(attr_id, &[0xff; MAD_DATA_LEN]).expect("CM attribute");
        let mut out = [0u8; MAD_DATA_LEN];
        msg.write_data(&mut out);
        assert_eq!(out, defined_bits(attr_id), "{}", msg.name());
    }
}
