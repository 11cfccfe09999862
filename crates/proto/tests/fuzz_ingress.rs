//! Replays the `engine_ingress` fuzz target's inputs on stable Rust: inputs
//! built from every reference capture in `testdata/captures/`, and every
//! file in `fuzz/corpus/engine_ingress/`, `fuzz/regressions/engine_ingress/`
//! and (after a local fuzz run) `fuzz/artifacts/engine_ingress/`. The check
//! is `fuzz_checks/ingress.rs`, shared with the fuzz target.
//!
//! `NDV_WRITE_INGRESS_CORPUS=1` (re)writes the capture-derived seeds into
//! `fuzz/corpus/engine_ingress/`.

#[path = "fuzz_checks/ingress.rs"]
mod ingress;

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

#[test]
fn capture_seeds() {
    let caps = files_in(&root().join("testdata/captures"));
    let write = std::env::var_os("NDV_WRITE_INGRESS_CORPUS").is_some();
    let out = root().join("fuzz/corpus/engine_ingress");
    let mut n = 0;
    for cap in caps {
        if cap.extension().and_then(|e| e.to_str()) != Some("pcap") {
            continue;
        }
        let input = ingress::inputs_from_capture(&std::fs::read(&cap).unwrap());
        if input.is_empty() {
            continue;
        }
        ingress::check_ingress(&input);
        // The same with every PSN forced to the expected one.
        let mut fixed = input.clone();
        let mut off = 0;
        while off + 3 <= fixed.len() {
            let len = usize::from(u16::from_le_bytes([fixed[off + 1], fixed[off + 2]]));
            if fixed[off] & 3 == ingress::KIND_PACKET {
                fixed[off] |= ingress::FIX_PSN;
            }
            off += 3 + len;
        }
        ingress::check_ingress(&fixed);
        if write {
            std::fs::create_dir_all(&out).unwrap();
            let stem = cap.file_stem().unwrap().to_str().unwrap();
            std::fs::write(out.join(format!("{stem}.bin")), &input).unwrap();
            std::fs::write(out.join(format!("{stem}-psn.bin")), &fixed).unwrap();
        }
        n += 1;
    }
    assert!(n > 0, "no capture gave an input");
}

#[test]
fn corpus_regressions_artifacts() {
    let mut failures = Vec::new();
    for kind in ["corpus", "regressions", "artifacts"] {
        for f in files_in(&root().join("fuzz").join(kind).join("engine_ingress")) {
            let data = std::fs::read(&f).unwrap();
            if std::panic::catch_unwind(|| ingress::check_ingress(&data)).is_err() {
                failures.push(f.display().to_string());
            }
        }
    }
    assert!(
        failures.is_empty(),
        "failing inputs:\n  {}",
        failures.join("\n  ")
    );
}
