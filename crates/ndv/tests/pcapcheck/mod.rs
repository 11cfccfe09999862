//! Checks a capture written by `--pcap`: `ndv decode --json` finds every ICRC
//! valid, and tshark dissects every frame as RoCE with the same field values
//! (`scripts/decode-vs-tshark.py`, which also recomputes each ICRC with zlib).
#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a capture holds.
#[derive(Debug, Default)]
pub struct Summary {
    /// RoCEv2 frames.
    pub frames: usize,
    /// CM messages in order, as `src>MSG`.
    pub cm: Vec<String>,
    /// Frames per BTH opcode.
    pub opcodes: BTreeMap<u64, usize>,
    /// Every decoded frame.
    pub json: Vec<Value>,
}

impl Summary {
    /// The CM message names without sources.
    pub fn cm_names(&self) -> Vec<&str> {
        self.cm
            .iter()
            .map(|s| s.rsplit('>').next().unwrap_or(""))
            .collect()
    }

    /// Frames with this opcode.
    pub fn count(&self, opcode: u64) -> usize {
        self.opcodes.get(&opcode).copied().unwrap_or(0)
    }

    /// Packets with this opcode, each counted once however often it was
    /// retransmitted (distinct sender and PSN): what a loaded machine cannot
    /// change.
    pub fn distinct(&self, opcode: u64) -> usize {
        let packets: std::collections::BTreeSet<(String, u64)> = self
            .json
            .iter()
            .filter(|v| v["bth"]["opcode"].as_u64() == Some(opcode))
            .map(|v| (v["src"].to_string(), v["bth"]["psn"].as_u64().unwrap_or(0)))
            .collect();
        packets.len()
    }
}

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Runs `scripts/decode-vs-tshark.py` (ndv and tshark on each capture, field
/// by field, and each ICRC recomputed with zlib), which must pass; returns
/// its report.
pub fn decode_vs_tshark(captures: &[PathBuf]) -> String {
    let out = Command::new("python3")
        .arg(repo().join("scripts/decode-vs-tshark.py"))
        .arg(env!("CARGO_BIN_EXE_ndv"))
        .args(captures)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Decodes `path` with `ndv decode --json` (every ICRC must verify) and, when
/// tshark is there, cross-checks every frame against it.
pub fn check(path: &Path) -> Summary {
    let out = Command::new(env!("CARGO_BIN_EXE_ndv"))
        .args(["decode", "--json"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ndv decode {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut s = Summary::default();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert!(v.get("error").is_none(), "undecodable frame: {line}");
        assert_eq!(v["icrc_ok"], Value::Bool(true), "bad ICRC: {line}");
        s.frames += 1;
        *s.opcodes
            .entry(v["bth"]["opcode"].as_u64().unwrap())
            .or_default() += 1;
        if let Some(m) = v["cm"]["msg"].as_str() {
            s.cm.push(format!("{}>{}", v["src"].as_str().unwrap(), m));
        }
        s.json.push(v);
    }
    assert!(s.frames > 0, "{} holds no RoCEv2 frame", path.display());
    if ndverbs_testkit::skip::require_tools_for("the tshark cross-check", &["tshark"]) {
        let text = decode_vs_tshark(&[path.to_path_buf()]);
        assert!(text.contains("1 passed, 0 failed"), "{text}");
        // tshark sees every frame as RoCE (RRoCE), with good UDP checksums,
        // and names the CM messages.
        let out = Command::new("tshark")
            .args(["-o", "udp.check_checksum:TRUE", "-r"])
            .arg(path)
            .args([
                "-T",
                "fields",
                "-e",
                "frame.protocols",
                "-e",
                "udp.checksum.status",
                "-e",
                "infiniband.mad.attributeid",
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let mut tshark_cm = 0;
        let mut lines = 0;
        for l in text.lines() {
            let f: Vec<&str> = l.split('\t').collect();
            assert!(f[0].contains(":udp:infiniband"), "not RoCE to tshark: {l}");
            assert_eq!(f.get(1).copied(), Some("1"), "bad UDP checksum: {l}");
            if f.get(2).is_some_and(|a| !a.is_empty()) {
                tshark_cm += 1;
            }
            lines += 1;
        }
        assert_eq!(lines, s.frames, "tshark and ndv count different frames");
        assert_eq!(
            tshark_cm,
            s.cm.len(),
            "tshark and ndv see different CM MADs"
        );
    }
    s
}
