//! What the integration tests share: the libraries linked from the static
//! library this test run built, and the C test programs built and run.
#![allow(dead_code)]

use ndverbs_testkit::{netns::Netns, skip};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The cargo profile directory (`target/debug`) of this test binary.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// The directory holding `libibverbs.so.1` and its aliases, linked from the
/// static library cargo built for this run.
pub fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        use ndverbs_cabi::install;
        let profile = profile_dir();
        let a = install::find_staticlib(&profile)
            .unwrap_or_else(|| panic!("no {} under {}", install::STATICLIB, profile.display()));
        let dir = profile.join(install::LIB_DIR);
        install::link(&a, &dir).expect("linking libibverbs.so.1");
        dir
    })
}

/// `tests/c/NAME.c` built once per test binary (into `cell`) and linked with
/// `libs`, or `None` after the skip rule (no compiler, or `package`'s
/// headers missing).
pub fn c_program(
    cell: &'static OnceLock<Result<PathBuf, String>>,
    name: &str,
    libs: &[&str],
    package: &str,
) -> Option<&'static Path> {
    let r = cell.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
        // Built under a private name and renamed: test processes may run
        // at once.
        let out = profile_dir().join(format!("cabi-{name}-test"));
        let tmp = profile_dir().join(format!(".cabi-{name}-test.{}", std::process::id()));
        let o = Command::new("cc")
            .args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(&tmp)
            .arg(&src)
            .args(libs)
            .output()
            .map_err(|e| format!("cc: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "building tests/c/{name}.c needs gcc and {package} (scripts/setup.sh): {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        std::fs::rename(&tmp, &out).map_err(|e| e.to_string())?;
        Ok(out)
    });
    skip::or_skip(
        r.as_ref().map(PathBuf::as_path),
        &format!("the C test program {name}"),
    )
}

/// Runs `PROG CHECK` in a fresh network namespace with this run's libraries
/// first on the library path; returns its output after checking that it
/// passed (exit 0 and `ok CHECK`), or `None` after the skip rule.
#[track_caller]
pub fn run_c_check(prog: Option<&Path>, check: &str) -> Option<String> {
    let prog = prog?;
    if !skip::require_root("network namespaces") {
        return None;
    }
    let ns = skip::or_skip(Netns::new(), "a network namespace")?;
    let out = ns
        .command("timeout")
        .arg("60")
        .arg(prog)
        .arg(check)
        .env("LD_LIBRARY_PATH", lib_dir())
        .output()
        .expect("running a C test program");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} {check}: {}\n{text}",
        prog.display(),
        out.status
    );
    assert!(text.contains(&format!("ok {check}")), "{text}");
    Some(text)
}
