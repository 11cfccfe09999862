//! `ndv decode`: print every RoCEv2 packet of a pcap/pcapng file.
//!
//! A frame is a RoCEv2 frame when it holds an IP packet carrying UDP to port
//! 4791. Each one is described as a JSON object (`--json`, one per line, with the
//! keys documented in the README) or as a short human-readable block. Frames
//! that look like RoCEv2 but do not parse get an `error` key naming what is
//! wrong; other frames (ARP, TCP, …) are skipped.

use anyhow::{Context, Result};
use ndverbs_wire::capture::{self, Frame};
use ndverbs_wire::cm::CmMessage;
use ndverbs_wire::cma::{self, CmaHeader};
use ndverbs_wire::icrc;
use ndverbs_wire::ip::{Envelope, IpHeader};
use ndverbs_wire::mad::{Mad, MAD_LEN, MGMT_CLASS_CM};
use ndverbs_wire::packet::Packet;
use ndverbs_wire::WireError;
use serde_json::{json, Map, Value};
use std::io::Write;

/// Everything decoded from one RoCEv2 frame.
pub struct Decoded<'a> {
    /// 1-based frame number in the file.
    pub frame: usize,
    /// IP and UDP headers.
    pub envelope: Envelope,
    /// The transport packet, or why it did not parse.
    pub packet: Result<Packet<'a>, WireError>,
    /// ICRC check over the whole IP packet.
    pub icrc_ok: bool,
}

/// Decodes one capture frame; `None` if it is not RoCEv2 (or not IP/UDP at all).
pub fn decode_frame<'a>(frame: &Frame<'a>) -> Option<Decoded<'a>> {
    let (_, ip) = capture::ip_packet(frame.link, frame.data)?;
    let (envelope, udp_payload) = Envelope::parse(ip).ok()?;
    if !envelope.is_rocev2() {
        return None;
    }
    let ip_len = envelope.len() + udp_payload.len();
    let icrc_ok = icrc::verify(&ip[..ip_len]).unwrap_or(false);
    Some(Decoded {
        frame: frame.number,
        envelope,
        packet: Packet::parse(udp_payload),
        icrc_ok,
    })
}

/// The MAD inside a packet, when it is one (UD to/from QP0 or QP1, 256 bytes).
pub fn mad_of<'a>(p: &Packet<'a>) -> Option<Mad<'a>> {
    let deth = p.ext.deth?;
    if (p.bth.dqpn <= 1 || deth.src_qpn <= 1) && p.payload.len() == MAD_LEN {
        Mad::parse(p.payload).ok()
    } else {
        None
    }
}

/// The JSON object for one frame.
pub fn to_json(d: &Decoded<'_>) -> Value {
    let mut o = Map::new();
    o.insert("frame".into(), json!(d.frame));
    o.insert("src".into(), json!(d.envelope.ip.src().to_string()));
    o.insert("dst".into(), json!(d.envelope.ip.dst().to_string()));
    o.insert("sport".into(), json!(d.envelope.udp.src_port));
    o.insert("dport".into(), json!(d.envelope.udp.dst_port));
    o.insert("icrc_ok".into(), json!(d.icrc_ok));
    let p = match &d.packet {
        Ok(p) => p,
        Err(e) => {
            o.insert("error".into(), json!(e.to_string()));
            return Value::Object(o);
        }
    };
    o.insert("payload_len".into(), json!(p.payload.len()));
    let b = &p.bth;
    o.insert(
        "bth".into(),
        json!({
            "opcode": b.opcode.0, "se": u8::from(b.se), "m": u8::from(b.mig_req), "pad": b.pad,
            "tver": b.tver, "pkey": b.pkey, "fecn": u8::from(b.fecn), "becn": u8::from(b.becn),
            "dqpn": b.dqpn, "ackreq": u8::from(b.ack_req), "psn": b.psn,
        }),
    );
    let e = &p.ext;
    if let Some(r) = e.reth {
        o.insert(
            "reth".into(),
            json!({"va": r.va, "rkey": r.rkey, "len": r.len}),
        );
    }
    if let Some(a) = e.aeth {
        o.insert("aeth".into(), json!({"syndrome": a.syndrome, "msn": a.msn}));
    }
    if let Some(dt) = e.deth {
        o.insert(
            "deth".into(),
            json!({"qkey": dt.qkey, "src_qpn": dt.src_qpn}),
        );
    }
    if let Some(i) = e.immdt {
        o.insert("immdt".into(), json!(i));
    }
    if let Some(i) = e.ieth {
        o.insert("ieth".into(), json!(i));
    }
    if let Some(a) = e.atomic_eth {
        o.insert(
            "atomiceth".into(),
            json!({"va": a.va, "rkey": a.rkey, "swap_add": a.swap_add, "compare": a.compare}),
        );
    }
    if let Some(orig) = e.atomic_ack_eth {
        o.insert("atomicacketh".into(), json!({ "orig": orig }));
    }
    if let Some(mad) = mad_of(p) {
        let h = &mad.header;
        o.insert(
            "mad".into(),
            json!({
                "base_version": h.base_version, "mgmt_class": h.mgmt_class,
                "class_version": h.class_version, "method": h.method, "status": h.status,
                "tid": h.tid, "attr_id": h.attr_id, "attr_mod": h.attr_mod,
            }),
        );
        if h.mgmt_class == MGMT_CLASS_CM {
            if let Ok(cm) = CmMessage::parse(&mad) {
                o.insert("cm".into(), cm_json(&cm));
            }
        }
    }
    Value::Object(o)
}

fn cm_json(cm: &CmMessage) -> Value {
    let mut o = Map::new();
    o.insert("msg".into(), json!(cm.name()));
    o.insert("local_comm_id".into(), json!(cm.local_comm_id()));
    if let Some(r) = cm.remote_comm_id() {
        o.insert("remote_comm_id".into(), json!(r));
    }
    match cm {
        CmMessage::Req(r) => {
            for (k, v) in [
                ("service_id", json!(r.service_id)),
                ("local_ca_guid", json!(r.local_ca_guid)),
                ("local_qpn", json!(r.local_qpn)),
                ("starting_psn", json!(r.starting_psn)),
                ("path_mtu", json!(r.path_mtu)),
                ("retry_count", json!(r.retry_count)),
                ("rnr_retry_count", json!(r.rnr_retry_count)),
                ("max_cm_retries", json!(r.max_cm_retries)),
                ("primary_local_gid", json!(r.primary.local_gid.to_string())),
                (
                    "primary_remote_gid",
                    json!(r.primary.remote_gid.to_string()),
                ),
                ("private_data_len", json!(r.private_data.len())),
            ] {
                o.insert(k.into(), v);
            }
        }
        CmMessage::Rep(r) => {
            o.insert("local_qpn".into(), json!(r.local_qpn));
            o.insert("starting_psn".into(), json!(r.starting_psn));
        }
        CmMessage::Rej(r) => {
            o.insert("reason".into(), json!(r.reason));
        }
        CmMessage::Dreq(r) => {
            o.insert("remote_qpn".into(), json!(r.remote_qpn));
        }
        _ => {}
    }
    Value::Object(o)
}

/// Writes the human-readable description of one frame.
pub fn write_text(out: &mut impl Write, d: &Decoded<'_>) -> std::io::Result<()> {
    let env = &d.envelope;
    let name = match &d.packet {
        Ok(p) => p.bth.opcode.to_string(),
        Err(_) => "malformed".to_string(),
    };
    writeln!(
        out,
        "frame {}: {}:{} -> {}:{}  {}  icrc {}",
        d.frame,
        env.ip.src(),
        env.udp.src_port,
        env.ip.dst(),
        env.udp.dst_port,
        name,
        if d.icrc_ok { "ok" } else { "BAD" }
    )?;
    match env.ip {
        IpHeader::V4(h) => writeln!(
            out,
            "  ipv4   tos 0x{:02x} ttl {} id 0x{:04x} flags/frag 0x{:04x} len {}",
            h.tos, h.ttl, h.id, h.flags_frag, h.total_len
        )?,
        IpHeader::V6(h) => writeln!(
            out,
            "  ipv6   tclass 0x{:02x} flow 0x{:05x} hop {} len {}",
            h.traffic_class, h.flow_label, h.hop_limit, h.payload_len
        )?,
    }
    let p = match &d.packet {
        Ok(p) => p,
        Err(e) => return writeln!(out, "  error  {e}"),
    };
    let b = &p.bth;
    writeln!(
        out,
        "  bth    opcode 0x{:02x} se {} m {} pad {} tver {} pkey 0x{:04x} fecn {} becn {} dqpn 0x{:06x} ackreq {} psn 0x{:06x}",
        b.opcode.0, u8::from(b.se), u8::from(b.mig_req), b.pad, b.tver, b.pkey,
        u8::from(b.fecn), u8::from(b.becn), b.dqpn, u8::from(b.ack_req), b.psn
    )?;
    let e = &p.ext;
    if let Some(x) = e.deth {
        writeln!(
            out,
            "  deth   qkey 0x{:08x} src_qpn 0x{:06x}",
            x.qkey, x.src_qpn
        )?;
    }
    if let Some(x) = e.reth {
        writeln!(
            out,
            "  reth   va 0x{:016x} rkey 0x{:08x} len {}",
            x.va, x.rkey, x.len
        )?;
    }
    if let Some(x) = e.atomic_eth {
        writeln!(
            out,
            "  atomic va 0x{:016x} rkey 0x{:08x} swap/add 0x{:016x} compare 0x{:016x}",
            x.va, x.rkey, x.swap_add, x.compare
        )?;
    }
    if let Some(x) = e.aeth {
        writeln!(
            out,
            "  aeth   syndrome 0x{:02x} ({:?}) msn {}",
            x.syndrome,
            x.kind(),
            x.msn
        )?;
    }
    if let Some(x) = e.atomic_ack_eth {
        writeln!(out, "  atomicack orig 0x{x:016x}")?;
    }
    if let Some(x) = e.immdt {
        writeln!(out, "  immdt  0x{x:08x}")?;
    }
    if let Some(x) = e.ieth {
        writeln!(out, "  ieth   rkey 0x{x:08x}")?;
    }
    writeln!(
        out,
        "  data   {} bytes, icrc 0x{:08x}",
        p.payload.len(),
        p.icrc
    )?;
    if let Some(mad) = mad_of(p) {
        let h = &mad.header;
        writeln!(
            out,
            "  mad    base {} class 0x{:02x} classver {} method 0x{:02x} status 0x{:04x} tid 0x{:016x} attr 0x{:04x} attrmod 0x{:08x}",
            h.base_version, h.mgmt_class, h.class_version, h.method, h.status, h.tid, h.attr_id, h.attr_mod
        )?;
        if h.mgmt_class == MGMT_CLASS_CM {
            match CmMessage::parse(&mad) {
                Ok(cm) => write_cm_text(out, &cm)?,
                Err(e) => writeln!(out, "  cm     {e}")?,
            }
        }
    }
    Ok(())
}

fn write_cm_text(out: &mut impl Write, cm: &CmMessage) -> std::io::Result<()> {
    write!(
        out,
        "  cm     {} local_comm_id 0x{:08x}",
        cm.name(),
        cm.local_comm_id()
    )?;
    if let Some(r) = cm.remote_comm_id() {
        write!(out, " remote_comm_id 0x{r:08x}")?;
    }
    writeln!(out)?;
    match cm {
        CmMessage::Req(r) => {
            let svc = match cma::split_service_id(r.service_id) {
                Some((ps, port)) => format!(" (rdma_cm port space 0x{ps:04x} port {port})"),
                None => String::new(),
            };
            writeln!(out, "         service_id 0x{:016x}{svc} local_ca_guid 0x{:016x}", r.service_id, r.local_ca_guid)?;
            writeln!(
                out,
                "         qpn 0x{:06x} psn 0x{:06x} resp_res {} init_depth {} mtu {} retry {} rnr_retry {} max_cm_retries {} resp_timeouts {}/{}",
                r.local_qpn, r.starting_psn, r.responder_resources, r.initiator_depth, r.path_mtu,
                r.retry_count, r.rnr_retry_count, r.max_cm_retries,
                r.remote_cm_response_timeout, r.local_cm_response_timeout
            )?;
            let p = &r.primary;
            writeln!(
                out,
                "         path {} -> {} lids 0x{:04x}/0x{:04x} flow 0x{:05x} tclass {} hop {} sl {} ack_timeout {}",
                p.local_gid, p.remote_gid, p.local_lid, p.remote_lid, p.flow_label,
                p.traffic_class, p.hop_limit, p.sl, p.local_ack_timeout
            )?;
            if let Ok(h) = CmaHeader::parse(&r.private_data) {
                writeln!(out, "         rdma_cm header v{} {}:{} -> {}", h.version, h.src, h.src_port, h.dst)?;
            }
        }
        CmMessage::Rep(r) => writeln!(
            out,
            "         qpn 0x{:06x} psn 0x{:06x} resp_res {} init_depth {} rnr_retry {} srq {} ca_guid 0x{:016x}",
            r.local_qpn, r.starting_psn, r.responder_resources, r.initiator_depth,
            r.rnr_retry_count, u8::from(r.srq), r.local_ca_guid
        )?,
        CmMessage::Rej(r) => writeln!(out, "         reason {} message_rejected {}", r.reason, r.message_rejected)?,
        CmMessage::Mra(r) => writeln!(out, "         message_mraed {} service_timeout {}", r.message_mraed, r.service_timeout)?,
        CmMessage::Dreq(r) => writeln!(out, "         remote_qpn 0x{:06x}", r.remote_qpn)?,
        CmMessage::SidrReq(r) => writeln!(out, "         service_id 0x{:016x} pkey 0x{:04x}", r.service_id, r.pkey)?,
        CmMessage::SidrRep(r) => writeln!(
            out,
            "         status {} qpn 0x{:06x} qkey 0x{:08x} service_id 0x{:016x}",
            r.status, r.qpn, r.qkey, r.service_id
        )?,
        // RTU and DREP carry nothing more; newer messages print their name only.
        _ => {}
    }
    Ok(())
}

/// Runs `ndv decode`.
pub fn run(path: &std::path::Path, as_json: bool) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let frames = capture::read_frames(&bytes)
        .with_context(|| format!("reading the capture {}", path.display()))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut result = Ok(());
    for f in &frames {
        let Some(d) = decode_frame(f) else { continue };
        result = if as_json {
            writeln!(out, "{}", to_json(&d))
        } else {
            write_text(&mut out, &d)
        };
        if result.is_err() {
            break;
        }
    }
    match result.and_then(|_| out.flush()) {
        // A closed pipe (`| head`) is a normal way to stop reading.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing stdout"),
        _ => Ok(()),
    }
}
