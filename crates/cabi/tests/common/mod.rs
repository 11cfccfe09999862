//! What the integration tests share: the libraries linked from the static
//! library this test run built.

use std::path::{Path, PathBuf};
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
