//! Shared helpers for tests that run `ndv` against the Linux Soft-RoCE guest
//! (`../shared/interop`, started once per test run by `scripts/interop.sh up`).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The host end of the interop network (inside the namespace).
pub const HOST: &str = "10.77.0.1";
/// The guest.
pub const GUEST: &str = "10.77.0.2";

/// Interop tests share the guest and the host's UDP 4791: one at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// The harness, or `None` (after a SKIPPED line) when the guest is not running
/// outside CI. Under `CI=true` a missing guest fails the test.
pub struct Harness {
    pub run_guest: PathBuf,
    pub netns: String,
}

impl Harness {
    pub fn get() -> Option<Harness> {
        let dir = std::env::var_os("NDV_INTEROP_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../../../shared/interop"
                ))
            });
        let run_guest = dir.join("run-guest.sh");
        let up = run_guest.exists()
            && Command::new(&run_guest)
                .args(["guest", "true"])
                .output()
                .is_ok_and(|o| o.status.success());
        if up {
            return Some(Harness {
                run_guest,
                netns: std::env::var("NDV_NETNS").unwrap_or_else(|_| "ndv-interop".into()),
            });
        }
        let why = "the interop guest is not running (scripts/interop.sh up)";
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{why}; required under CI=true"
        );
        eprintln!("SKIPPED: interop test — {why}");
        None
    }

    /// Runs a command in the guest and returns its output.
    pub fn guest(&self, cmd: &str) -> Output {
        Command::new(&self.run_guest)
            .args(["guest", cmd])
            .output()
            .unwrap()
    }

    /// Starts a command in the guest; returns its job id.
    pub fn guest_bg(&self, cmd: &str) -> String {
        let o = Command::new(&self.run_guest)
            .args(["guest-bg", cmd])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "guest-bg: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Waits for a background guest job; returns (success, output).
    pub fn wait(&self, job: &str) -> (bool, String) {
        let o = Command::new(&self.run_guest)
            .args(["wait", job])
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    }

    /// `ndv ARGS` inside the namespace.
    pub fn ndv(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns, env!("CARGO_BIN_EXE_ndv")])
            .args(args);
        c
    }

    /// Starts `ndv ARGS` in the namespace in the background.
    pub fn spawn_ndv(&self, args: &[&str]) -> Child {
        self.ndv(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// Waits for a child with a time limit; kills it on timeout.
pub fn wait_child(mut c: Child, limit: Duration) -> (bool, String) {
    let t0 = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            let o = c.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            return (st.success(), text);
        }
        if t0.elapsed() > limit {
            let _ = c.kill();
            let o = c.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&o.stdout).into_owned()
                + &String::from_utf8_lossy(&o.stderr);
            return (false, format!("TIMED OUT after {limit:?}\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Retries `f` until it succeeds or `limit` passes (a server in the emulated
/// guest takes a few seconds to start listening).
pub fn retry<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if t0.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Whether every tool in `tools` runs (`<tool> --version`). When one does
/// not, prints a SKIPPED line for `test` and returns false — except under
/// `CI=true`, where `scripts/setup.sh` installed them: there it fails.
pub fn tools_or_skip(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            !Command::new(t)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: {} required under CI=true (scripts/setup.sh installs it)",
        missing.join(", ")
    );
    eprintln!(
        "SKIPPED: {test} — {} not installed (run scripts/setup.sh)",
        missing.join(", ")
    );
    false
}
