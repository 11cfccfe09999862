//! Replays the fuzz corpus on stable Rust, in the normal test suite.
//!
//! Every file under `fuzz/corpus/<target>/`, `fuzz/regressions/<target>/`
//! and (when a local fuzz run left any) `fuzz/artifacts/<target>/` goes
//! through the same checks the cargo-fuzz target `<target>` runs (see
//! `fuzz_checks/mod.rs`). A crash that was found by fuzzing and then fixed is
//! kept as a regression test by copying its input into
//! `fuzz/regressions/<target>/`.

mod fuzz_checks;

use std::path::{Path, PathBuf};

/// The fuzz crate, beside the workspace's `crates/`.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The check of a fuzz target, by the target's name.
fn check_of(target: &str) -> Option<fn(&[u8])> {
    match target {
        "wire_parse" => Some(fuzz_checks::check_wire),
        "capture_parse" => Some(fuzz_checks::check_capture),
        _ => None,
    }
}

/// Targets of other crates, replayed by their own tests
/// (`engine_ingress`: `crates/proto/tests/fuzz_ingress.rs`).
const REPLAYED_ELSEWHERE: &[&str] = &["engine_ingress"];

/// Sorted entries of `dir` that `keep` accepts (not recursive); none if it
/// does not exist.
fn sorted_entries(dir: &Path, keep: fn(&Path) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| keep(p))
        .collect();
    found.sort();
    found
}

/// Runs the checks of each `<kind>/<target>/` directory over its files;
/// returns how many files each target saw. Panics listing every failing file.
fn replay(kind: &str) -> Vec<(String, usize)> {
    let targets = sorted_entries(&fuzz_dir().join(kind), Path::is_dir);
    let mut counts = Vec::new();
    let mut failures = Vec::new();
    for dir in targets {
        let target = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("UTF-8 target directory name")
            .to_owned();
        if REPLAYED_ELSEWHERE.contains(&target.as_str()) {
            continue;
        }
        let check = check_of(&target)
            .unwrap_or_else(|| panic!("{}: no fuzz target named {target:?}", dir.display()));
        let files = sorted_entries(&dir, Path::is_file);
        for file in &files {
            let data = std::fs::read(file).expect("readable corpus file");
            if std::panic::catch_unwind(|| check(&data)).is_err() {
                failures.push(file.display().to_string());
            }
        }
        counts.push((target, files.len()));
    }
    assert!(
        failures.is_empty(),
        "{} input(s) fail the fuzz checks (messages above):\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
    counts
}

#[test]
fn corpus() {
    let counts = replay("corpus");
    for target in ["wire_parse", "capture_parse"] {
        let n = counts.iter().find(|(t, _)| t == target).map_or(0, |c| c.1);
        assert!(
            n > 0,
            "fuzz/corpus/{target}/ is empty or missing: run scripts/fuzz-seed-corpus.sh"
        );
    }
}

#[test]
fn regressions() {
    replay("regressions");
}

/// Inputs a local `cargo fuzz run` saved (crashes, timeouts, leaks). The
/// directory is not committed, so this checks nothing in CI; locally it
/// fails until the crash is fixed, and reminds whoever fixed it to move the
/// input to `fuzz/regressions/`.
#[test]
fn artifacts() {
    replay("artifacts");
}
