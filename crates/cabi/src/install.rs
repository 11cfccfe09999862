//! Linking the shared object from this crate's static library.
//!
//! rustc writes its own version script for a `cdylib` (one anonymous node
//! that hides everything else), and a second `--version-script` cannot be
//! combined with it, so a `cdylib` cannot carry rdma-core's version nodes.
//! This crate is therefore built as a `staticlib` (`cargo build` does that
//! as part of the workspace, or of any crate that depends on this one), and
//! [`link`] turns it into the shared object with the system C compiler:
//!
//! ```text
//! cc -shared -o libibverbs.so.1 -Wl,--whole-archive libndverbs_cabi.a -Wl,--no-whole-archive
//!    -Wl,--version-script=exports.map -Wl,-soname,libibverbs.so.1
//!    -Wl,-z,now -Wl,-z,defs -Wl,-Bsymbolic -Wl,--gc-sections
//!    -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
//! ```
//!
//! `--whole-archive` keeps every exported function, the version script
//! ([`VERSION_SCRIPT`]) names and versions them and hides the rest,
//! `-Bsymbolic` binds the library's calls to its own functions (a program
//! defining an `ibv_*` of its own cannot divert them), `-z defs` refuses an
//! unresolved symbol at link time rather than at load time, and the `-l`
//! list is what rustc reports as the static library's native dependencies.
//! The other three names ([`ALIASES`]) are symbolic links to the same file,
//! so a process maps it once however many of them it needs.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The linker version script: every exported symbol with its version node.
pub const VERSION_SCRIPT: &str = include_str!("../exports.map");

/// The file name and SONAME of the shared object.
pub const SONAME: &str = "libibverbs.so.1";

/// The other libraries it stands in for, as links to [`SONAME`].
pub const ALIASES: [&str; 3] = ["librdmacm.so.1", "libmlx5.so.1", "libefa.so.1"];

/// The static library cargo builds from this crate.
pub const STATICLIB: &str = "libndverbs_cabi.a";

/// The directory under a cargo profile directory (`target/release`) where
/// the libraries are linked: what goes first on `LD_LIBRARY_PATH`.
pub const LIB_DIR: &str = "ndverbs-lib";

/// The native libraries the static library needs (rustc's
/// `--print native-static-libs` for it).
const NATIVE_LIBS: [&str; 7] = ["gcc_s", "util", "rt", "pthread", "m", "dl", "c"];

/// The newest build of the static library in cargo profile directory
/// `profile_dir`: the copy cargo puts there when it builds this crate
/// itself, or the one in `deps/` when it built it for a crate that depends
/// on it (`ndv`), whichever is newer.
pub fn find_staticlib(profile_dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = vec![profile_dir.join(STATICLIB)];
    if let Ok(rd) = std::fs::read_dir(profile_dir.join("deps")) {
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("libndverbs_cabi-") && name.ends_with(".a") {
                found.push(e.path());
            }
        }
    }
    found
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p)
}

/// Links `staticlib` into `out_dir` (created if needed) as [`SONAME`] with
/// its [`ALIASES`], unless the shared object there is already newer than
/// the static library and was linked with this version script. Safe to run
/// from several processes at once: each links to a private name and
/// renames.
pub fn link(staticlib: &Path, out_dir: &Path) -> io::Result<PathBuf> {
    std::fs::create_dir_all(out_dir)?;
    let so = out_dir.join(SONAME);
    let map = out_dir.join("exports.map");
    let fresh = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let up_to_date = match (fresh(&so), fresh(staticlib)) {
        (Some(s), Some(a)) => {
            s >= a && std::fs::read_to_string(&map).is_ok_and(|m| m == VERSION_SCRIPT)
        }
        _ => false,
    };
    if !up_to_date {
        let tag = format!("{}.{}", std::process::id(), unique());
        let tmp_map = out_dir.join(format!(".exports.map.{tag}"));
        let tmp_so = out_dir.join(format!(".{SONAME}.{tag}"));
        std::fs::write(&tmp_map, VERSION_SCRIPT)?;
        let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
        let mut cmd = Command::new(&cc);
        cmd.arg("-shared")
            .arg("-o")
            .arg(&tmp_so)
            .arg("-Wl,--whole-archive")
            .arg(staticlib)
            .arg("-Wl,--no-whole-archive")
            .arg(format!("-Wl,--version-script={}", tmp_map.display()))
            .arg(format!("-Wl,-soname,{SONAME}"))
            .args([
                "-Wl,-z,now",
                "-Wl,-z,defs",
                "-Wl,-Bsymbolic",
                "-Wl,--gc-sections",
            ])
            .args(NATIVE_LIBS.iter().map(|l| format!("-l{l}")));
        let out = cmd.output().map_err(|e| {
            io::Error::new(e.kind(), format!("running {}: {e}", cc.to_string_lossy()))
        })?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&tmp_so);
            let _ = std::fs::remove_file(&tmp_map);
            return Err(io::Error::other(format!(
                "linking {SONAME} failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        std::fs::rename(&tmp_so, &so)?;
        std::fs::rename(&tmp_map, &map)?;
    }
    for alias in ALIASES {
        let link = out_dir.join(alias);
        if std::fs::read_link(&link).is_ok_and(|t| t == Path::new(SONAME)) {
            continue;
        }
        let tmp = out_dir.join(format!(".{alias}.{}.{}", std::process::id(), unique()));
        std::os::unix::fs::symlink(SONAME, &tmp)?;
        std::fs::rename(&tmp, &link)?;
    }
    Ok(so)
}

fn unique() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
