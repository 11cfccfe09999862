//! The skip-or-fail rule for tests that need something of the host.
//!
//! Some tests need root (network namespaces), `/dev/net/tun`, a tool such as
//! `iperf3`, `tshark` or `nft`, or the interop guest. On a developer's machine
//! without them such a test passes after printing one loud line,
//!
//! ```text
//! SKIPPED: <test>: <why>
//! ```
//!
//! and under `CI=true` — where `scripts/setup.sh` installed everything and
//! `scripts/interop.sh up` booted the guest — the same absence is a failure,
//! so a broken CI set-up can never turn into a green run that tested nothing.
//!
//! Use [`skip`] where the test finds out itself, [`or_skip`] around a
//! fallible set-up step, [`require_root`] and [`require_tools`] as guards:
//!
//! ```no_run
//! use ndverbs_testkit::skip;
//! if !skip::require_tools(&["tshark"]) {
//!     return;
//! }
//! ```

use std::fmt::Display;
use std::io::Write;
use std::process::{Command, Stdio};

/// Whether this run is CI's (`CI=true`), where nothing may be skipped.
pub fn under_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// The running test's name: libtest names each test's thread after the test;
/// elsewhere (a test on the main thread) the test binary's name.
pub fn test_name() -> String {
    match std::thread::current().name() {
        Some(n) if n != "main" => n.to_string(),
        _ => std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "this test".into()),
    }
}

/// Skips the running test because of `why`: prints `SKIPPED: <test>: <why>`,
/// or panics under `CI=true`. The caller returns from the test afterwards.
#[track_caller]
pub fn skip(why: impl Display) {
    let test = test_name();
    assert!(!under_ci(), "{test}: {why} (required under CI=true)");
    // Straight to the process's stderr: libtest captures `eprintln!` of
    // passing tests, and a skip must be seen.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
}

/// `Some(value)`, or `None` after [`skip`] with the error and `what` was
/// being set up.
#[track_caller]
pub fn or_skip<T, E: Display>(r: Result<T, E>, what: &str) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            skip(format!("{what}: {e}"));
            None
        }
    }
}

/// Whether the process is root; otherwise [`skip`]s with `what` it needs
/// root for.
#[track_caller]
pub fn require_root(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        skip(format!("{what} needs root"));
    }
    root
}

/// Whether every program in `tools` runs (`<tool> --version`); otherwise
/// [`skip`]s naming the missing ones (`scripts/setup.sh` installs them).
#[track_caller]
pub fn require_tools(tools: &[&str]) -> bool {
    require_tools_for("", tools)
}

/// [`require_tools`] for one part of a test (`what`, named in the
/// `SKIPPED` line), where the rest of the test goes on without it.
#[track_caller]
pub fn require_tools_for(what: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            !Command::new(t)
                .arg("--version")
                .stdin(Stdio::null())
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if !missing.is_empty() {
        let part = if what.is_empty() {
            String::new()
        } else {
            format!("{what}: ")
        };
        skip(format!(
            "{part}{} not installed (scripts/setup.sh installs it)",
            missing.join(", ")
        ));
    }
    missing.is_empty()
}
