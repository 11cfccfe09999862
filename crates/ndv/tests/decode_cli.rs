//! `ndv decode` end to end: JSON keys, ICRC verdicts, and agreement with tshark.

mod pcapcheck;

use ndverbs_wire::capture;
use pcapcheck::{decode_vs_tshark, repo};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn ndv() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ndv"))
}

fn captures() -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(repo().join("testdata/captures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    v.sort();
    v
}

fn decode_json(path: &Path) -> Vec<Value> {
    let out = ndv().args(["decode", "--json"]).arg(path).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn int(v: &Value, path: &str) -> u64 {
    let mut x = v;
    for k in path.split('.') {
        x = &x[k];
    }
    x.as_u64()
        .unwrap_or_else(|| panic!("{path} is not an integer in {v}"))
}

#[test]
fn json_has_the_documented_keys() {
    let mut seen_cm = std::collections::BTreeSet::new();
    for c in captures() {
        for o in decode_json(&c) {
            for k in ["frame", "sport", "dport", "payload_len"] {
                int(&o, k);
            }
            assert!(o["src"].is_string() && o["dst"].is_string() && o["icrc_ok"].is_boolean());
            assert_eq!(o["icrc_ok"], Value::Bool(true), "{}: {o}", c.display());
            for k in [
                "opcode", "se", "m", "pad", "tver", "pkey", "fecn", "becn", "dqpn", "ackreq", "psn",
            ] {
                int(&o, &format!("bth.{k}"));
            }
            if let Some(cm) = o.get("cm") {
                let msg = cm["msg"].as_str().unwrap().to_string();
                int(&o, "cm.local_comm_id");
                for k in [
                    "base_version",
                    "mgmt_class",
                    "class_version",
                    "method",
                    "status",
                    "tid",
                    "attr_id",
                    "attr_mod",
                ] {
                    int(&o, &format!("mad.{k}"));
                }
                let extra: &[&str] = match msg.as_str() {
                    "REQ" => &[
                        "service_id",
                        "local_ca_guid",
                        "local_qpn",
                        "starting_psn",
                        "path_mtu",
                        "retry_count",
                        "rnr_retry_count",
                        "max_cm_retries",
                        "private_data_len",
                    ],
                    "REP" => &["remote_comm_id", "local_qpn", "starting_psn"],
                    "REJ" => &["remote_comm_id", "reason"],
                    "DREQ" => &["remote_comm_id", "remote_qpn"],
                    _ => &["remote_comm_id"],
                };
                for k in extra {
                    int(&o, &format!("cm.{k}"));
                }
                if msg == "REQ" {
                    assert!(cm["primary_local_gid"]
                        .as_str()
                        .unwrap()
                        .starts_with("::ffff:10.77.0."));
                    assert_eq!(int(&o, "cm.private_data_len"), 92);
                }
                seen_cm.insert(msg);
            }
        }
    }
    for m in ["REQ", "REP", "RTU", "DREQ", "DREP"] {
        assert!(seen_cm.contains(m), "no {m} in the reference captures");
    }
}

#[test]
fn one_flipped_payload_byte_fails_exactly_that_frame() {
    let src = repo().join("testdata/captures/rping.pcap");
    let bytes = std::fs::read(&src).unwrap();
    let frames = capture::read_frames(&bytes).unwrap();
    // Frame 14 is an RDMA WRITE with 64 payload bytes; its payload starts after
    // Ethernet 14 + IP 20 + UDP 8 + BTH 12 + RETH 16.
    let f = frames.iter().find(|f| f.number == 14).unwrap();
    let off = f.data.as_ptr() as usize - bytes.as_ptr() as usize + 14 + 20 + 8 + 12 + 16 + 5;
    let mut bad = bytes.clone();
    bad[off] ^= 0x80;
    let dir = std::env::temp_dir().join(format!("ndv-decode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("flipped.pcap");
    std::fs::write(&path, &bad).unwrap();
    let out = decode_json(&path);
    let bad_frames: Vec<u64> = out
        .iter()
        .filter(|o| o["icrc_ok"] == Value::Bool(false))
        .map(|o| int(o, "frame"))
        .collect();
    assert_eq!(bad_frames, vec![14]);
    assert_eq!(out.len(), decode_json(&src).len());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn text_mode_and_errors() {
    for c in captures() {
        let out = ndv().arg("decode").arg(&c).output().unwrap();
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("icrc ok"));
    }
    let out = ndv()
        .args(["decode", "/nonexistent/x.pcap"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/x.pcap"));
    let dir = std::env::temp_dir().join(format!("ndv-garbage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("g.pcap"), b"this is not a capture file").unwrap();
    let out = ndv()
        .arg("decode")
        .arg(dir.join("g.pcap"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
    std::fs::remove_dir_all(&dir).ok();
}

/// The same values as tshark for every field it decodes, and ICRC verdicts that
/// agree with an independent zlib-based implementation.
#[test]
fn agrees_with_tshark() {
    if !ndverbs_testkit::skip::require_tools(&["tshark"]) {
        return;
    }
    let text = decode_vs_tshark(&captures());
    assert!(
        text.contains(&format!("{} passed, 0 failed", captures().len())),
        "{text}"
    );
}

/// Captures made here: every opcode over IPv6 as raw IP, the same over IPv4 in
/// Linux cooked (SLL) framing, and the reference captures converted to pcapng —
/// each decoded by ndv and by tshark and compared field by field.
#[test]
fn synthetic_and_pcapng_captures_agree_with_tshark() {
    use ndverbs_wire::bth::Bth;
    use ndverbs_wire::capture::{LinkType, PcapWriter};
    use ndverbs_wire::ext::{Aeth, AtomicEth, Deth, Reth, Syndrome};
    use ndverbs_wire::ip::Envelope;
    use ndverbs_wire::opcode::{Headers, Opcode, Payload};
    use ndverbs_wire::packet::{write_datagram, Packet};

    if !ndverbs_testkit::skip::require_tools(&["tshark", "editcap"]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ndv-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let payload: Vec<u8> = (0..=255u8).collect();
    let mut v6 = PcapWriter::new(Vec::new(), LinkType::RawIp).unwrap();
    let mut sll = PcapWriter::new(Vec::new(), LinkType::LinuxSll).unwrap();
    for (i, &op) in Opcode::ALL.iter().enumerate() {
        let info = op.info().unwrap();
        if info.transport == ndverbs_wire::opcode::Transport::Cnp {
            continue; // tshark 4.0 does not dissect CNP over RoCEv2 UDP
        }
        let mut bth = Bth::new(op, 0x12 + i as u32, 0x00ff_fff0 + i as u32);
        bth.ack_req = info.is_last();
        let len = match info.payload {
            Payload::None => 0,
            Payload::Eight => 8,
            Payload::FullMtu => 256,
            _ => 1 + i * 5 % 250,
        };
        bth.pad = Packet::pad_for(len);
        let mut p = Packet::new(bth);
        p.payload = &payload[..len];
        let h = info.headers;
        if h.contains(Headers::RETH) {
            p.ext.reth = Some(Reth {
                va: 0x1000 + i as u64,
                rkey: 0xabc0 + i as u32,
                len: 4096,
            });
        }
        if h.contains(Headers::AETH) {
            p.ext.aeth = Some(Aeth::new(Syndrome::ACK, i as u32));
        }
        if h.contains(Headers::ATOMIC_ETH) {
            p.ext.atomic_eth = Some(AtomicEth {
                va: 0x2000,
                rkey: 0x77,
                swap_add: 5 + i as u64,
                compare: 9,
            });
        }
        if h.contains(Headers::ATOMIC_ACK_ETH) {
            p.ext.atomic_ack_eth = Some(0x1122_3344_5566_7788);
        }
        if h.contains(Headers::DETH) {
            p.ext.deth = Some(Deth {
                qkey: 0x1111_2222,
                resv: 0,
                src_qpn: 0x33,
            });
        }
        if h.contains(Headers::IMMDT) {
            p.ext.immdt = Some(0xdead_beef);
        }
        if h.contains(Headers::IETH) {
            p.ext.ieth = Some(0x0bad_cafe);
        }
        if h.contains(Headers::FETH) {
            p.ext.feth = Some(0);
        }
        for (addrs, w, cooked) in [
            (("fd00::1", "fd00::2"), &mut v6, false),
            (("10.1.0.1", "10.1.0.2"), &mut sll, true),
        ] {
            let env = Envelope::new_rocev2(
                addrs.0.parse().unwrap(),
                addrs.1.parse().unwrap(),
                0xc000 + i as u16,
                p.encoded_len().unwrap(),
            );
            let mut buf = vec![0u8; 16 + env.len() + p.encoded_len().unwrap()];
            let n = write_datagram(&env, &p, &mut buf[16..]).unwrap();
            if cooked {
                buf[14..16].copy_from_slice(&0x0800u16.to_be_bytes());
                w.write_packet(i as u64 * 1000, &buf[..16 + n]).unwrap();
            } else {
                w.write_packet(i as u64 * 1000, &buf[16..16 + n]).unwrap();
            }
        }
    }
    let mut paths = vec![dir.join("v6_rawip.pcap"), dir.join("v4_sll.pcap")];
    std::fs::write(&paths[0], v6.into_inner()).unwrap();
    std::fs::write(&paths[1], sll.into_inner()).unwrap();
    for c in captures() {
        let out = dir.join(format!(
            "{}.pcapng",
            c.file_stem().unwrap().to_string_lossy()
        ));
        assert!(Command::new("editcap")
            .args(["-F", "pcapng"])
            .arg(&c)
            .arg(&out)
            .status()
            .unwrap()
            .success());
        paths.push(out);
    }
    for p in &paths[..2] {
        assert!(decode_json(p).len() >= 38, "{}", p.display());
    }
    decode_vs_tshark(&paths);
    std::fs::remove_dir_all(&dir).ok();
}
