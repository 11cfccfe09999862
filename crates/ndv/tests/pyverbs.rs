//! rdma-core's Python binding (Debian's python3-pyverbs, a Cython module
//! linked against libibverbs.so.1) runs unmodified over ndverbs through
//! `ndv run`: `tests/pyverbs/rc_pingpong.py` connects two RC QPs of one
//! device and checks every byte of a ping-pong.

use ndverbs_testkit::process::{Running, LIMIT};
use ndverbs_testkit::skip;
use std::path::Path;
use std::process::Command;

const NDV: &str = env!("CARGO_BIN_EXE_ndv");
/// Debian's interpreter: pyverbs is installed for it, not for another
/// python3 that may come first on the PATH.
const PYTHON: &str = "/usr/bin/python3";

fn pyverbs_installed() -> bool {
    let ok = Path::new(PYTHON).exists()
        && Command::new(PYTHON)
            .args(["-c", "import pyverbs"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        skip::skip("python3-pyverbs not installed (scripts/setup.sh installs it)");
    }
    ok
}

#[test]
fn a_pyverbs_rc_pingpong_runs_over_ndv_run() {
    if !pyverbs_installed() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pyverbs/rc_pingpong.py");
    let mut c = Command::new(NDV);
    c.args(["run", "--", PYTHON])
        .arg(&script)
        .args(["", "200", "8192"]);
    let done = Running::spawn(&mut c).wait(LIMIT);
    let out = done.text();
    assert!(done.ok, "{out}");
    assert!(out.contains("pingpong ok 200 on ndv"), "{out}");
}
