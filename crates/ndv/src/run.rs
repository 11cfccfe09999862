//! `ndv run [--] PROGRAM [ARGS…]`: runs an unmodified RDMA program (built
//! against rdma-core's `libibverbs.so.1`) over ndverbs.
//!
//! The C ABI library (crate `ndverbs-cabi`) is a static library that cargo
//! builds next to `ndv` (`cargo build --release` builds both); `ndv run`
//! links it into `libibverbs.so.1`, with `librdmacm.so.1`, `libmlx5.so.1`
//! and `libefa.so.1` pointing at it, in `ndverbs-lib/` beside the `ndv`
//! binary (again only when the static library is newer), then executes the
//! program with that directory first on `LD_LIBRARY_PATH`. The program
//! replaces `ndv`: its exit status and signals are its own. `ndv run --env`
//! prints the shell line that sets the path by hand instead.
//!
//! `--pcap FILE` is passed on as `NDV_PCAP`, which the library honours like
//! every `NDV_*` variable (`NDV_STAT`, `NDV_FAULTS`, and `NDV_PROGRESS`:
//! `adaptive`, the default, or `thread`).
//!
//! MPI launchers start remote ranks through `ssh` (or another agent), which
//! passes no environment on: for Open MPI's `mpirun`, `ndv run` adds
//! `LD_LIBRARY_PATH` and every `NDV_*` variable set to
//! `OMPI_MCA_mca_base_env_list` (what `mpirun -x VAR` does), so the ranks
//! on other hosts load the same libraries — from the same path, so `ndv`
//! must be installed at the same place there. Other programs ignore it.
//! Open MPI refuses that list next to `-x` options, so when an Open MPI
//! launcher's command line has `-x`, the variables go as `-x VAR` options
//! in front of its arguments instead.
//!
//! `--ucx` runs the program in a private view of `/dev` and `/sys/class`
//! holding the kernel's files of our devices, which UCX checks before it
//! uses a device ([`crate::devfiles`] says what and how). It is off unless
//! asked for: it needs a mount namespace (and, not root, a user namespace),
//! which containers may refuse, and the programs that do not look for those
//! files gain nothing from it.

use crate::devfiles;
use anyhow::{bail, Context, Result};
use ndverbs_cabi::install;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// `ndv run` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the shell line that puts the libraries on LD_LIBRARY_PATH
    /// (for `eval "$(ndv run --env)"`) instead of running a program.
    #[arg(long)]
    pub env: bool,
    /// Run the program with /dev/infiniband/uverbsN, /dev/infiniband/rdma_cm
    /// and /sys/class/infiniband/ndvN/… made for our devices, in a private
    /// mount namespace (plus a user namespace when not root), as UCX needs
    /// to use them.
    #[arg(long)]
    pub ucx: bool,
    /// The program and its arguments.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM [ARGS]"
    )]
    pub command: Vec<String>,
}

/// Links the libraries if needed; returns their directory.
pub fn libraries() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("finding the ndv executable")?;
    let profile = exe
        .parent()
        .context("the ndv executable has no directory")?;
    let Some(staticlib) = install::find_staticlib(profile) else {
        bail!(
            "no {} next to {} (build it: cargo build --release, or cargo build -p ndverbs-cabi)",
            install::STATICLIB,
            exe.display()
        );
    };
    let dir = profile.join(install::LIB_DIR);
    install::link(&staticlib, &dir)
        .with_context(|| format!("linking {} in {}", install::SONAME, dir.display()))?;
    Ok(dir)
}

/// `LD_LIBRARY_PATH` with `dir` first.
fn library_path(dir: &Path) -> std::ffi::OsString {
    let mut p = dir.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        p.push(":");
        p.push(old);
    }
    p
}

/// Runs `ndv run`.
pub fn run(a: &Args, pcap: Option<&Path>) -> Result<()> {
    let dir = libraries()?;
    if a.env && a.ucx {
        bail!("--ucx makes a namespace for a program it runs; it has no shell line (--env)");
    }
    if a.env {
        let d = dir.to_string_lossy();
        println!(
            "export LD_LIBRARY_PATH={}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}",
            shell_quote(&d)
        );
        return Ok(());
    }
    let Some((program, args)) = a.command.split_first() else {
        bail!("no program to run (ndv run [--] PROGRAM [ARGS...])");
    };
    if a.ucx {
        // Before anything starts a thread: a user namespace takes only a
        // process with one.
        let devices = ndverbs_verbs::Device::list().context("listing the devices")?;
        devfiles::enter(&devfiles::Layout::for_devices(&devices))
            .context("making /dev/infiniband and /sys/class/infiniband (--ucx)")?;
    }
    let mut cmd = std::process::Command::new(program);
    cmd.env("LD_LIBRARY_PATH", library_path(&dir));
    let mut forward: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("NDV_"))
        .collect();
    if let Some(p) = pcap {
        cmd.env(ndverbs_verbs::PCAP_ENV, p);
        forward.push(ndverbs_verbs::PCAP_ENV.to_string());
    }
    match x_options(program, args, &forward) {
        // Open MPI refuses `-x` together with the env list: when the
        // command line passes variables with `-x`, ours go the same way.
        Some(x) => {
            cmd.args(x);
        }
        None => {
            cmd.env(
                OMPI_ENV_LIST,
                env_list(std::env::var(OMPI_ENV_LIST).ok().as_deref(), &forward),
            );
        }
    }
    cmd.args(args);
    // Only returns if the program could not be started.
    let e = cmd.exec();
    Err(e).with_context(|| format!("running {program}"))
}

/// Open MPI's list of variables `mpirun` sets for every rank (`-x`).
const OMPI_ENV_LIST: &str = "OMPI_MCA_mca_base_env_list";

/// `old` (Open MPI's `;`-separated list, `VAR` or `VAR=value`) with
/// `LD_LIBRARY_PATH` and `vars` added unless named there already.
fn env_list(old: Option<&str>, vars: &[String]) -> String {
    let mut items: Vec<String> = old
        .unwrap_or("")
        .split(';')
        .filter(|i| !i.is_empty())
        .map(str::to_string)
        .collect();
    let named = |items: &[String], v: &str| items.iter().any(|i| i.split('=').next() == Some(v));
    for v in std::iter::once("LD_LIBRARY_PATH").chain(vars.iter().map(String::as_str)) {
        if !named(&items, v) {
            items.push(v.to_string());
        }
    }
    items.join(";")
}

/// For an Open MPI launcher (`mpirun`, `mpiexec`, `orterun`, `oshrun`)
/// whose arguments pass variables with `-x`: `-x VAR` for `LD_LIBRARY_PATH`
/// and each of `vars` it does not name, to go before its arguments. `None`
/// for any other command line (`-x` means other things to other programs:
/// perftest's GID index).
fn x_options(program: &str, args: &[String], vars: &[String]) -> Option<Vec<String>> {
    let name = Path::new(program).file_name()?.to_str()?;
    let launcher = ["mpirun", "mpiexec", "orterun", "oshrun"]
        .iter()
        .any(|l| name == *l || name.starts_with(&format!("{l}.")));
    if !launcher || !args.iter().any(|a| a == "-x") {
        return None;
    }
    let named: Vec<&str> = args
        .windows(2)
        .filter(|w| w[0] == "-x")
        .map(|w| w[1].split('=').next().unwrap_or(""))
        .collect();
    let mut x = Vec::new();
    for v in std::iter::once("LD_LIBRARY_PATH").chain(vars.iter().map(String::as_str)) {
        if !named.contains(&v) && !x.iter().any(|o| o == v) {
            x.push("-x".to_string());
            x.push(v.to_string());
        }
    }
    Some(x)
}

/// `s` quoted for a POSIX shell when it needs it.
fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("/a/b-c/ndverbs-lib"), "/a/b-c/ndverbs-lib");
        assert_eq!(shell_quote("/a b/it's"), r"'/a b/it'\''s'");
    }

    #[test]
    fn open_mpi_env_list() {
        assert_eq!(env_list(None, &[]), "LD_LIBRARY_PATH");
        assert_eq!(
            env_list(Some("FOO=1;;BAR"), &["NDV_PROGRESS".into()]),
            "FOO=1;BAR;LD_LIBRARY_PATH;NDV_PROGRESS"
        );
        // A variable the user set already is not named twice.
        assert_eq!(
            env_list(Some("LD_LIBRARY_PATH=/x;NDV_STAT"), &["NDV_STAT".into()]),
            "LD_LIBRARY_PATH=/x;NDV_STAT"
        );
    }

    #[test]
    fn open_mpi_x_options() {
        let v = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let ndv = v(&["NDV_PROGRESS"]);
        // Without -x, or not Open MPI's launcher: the env list's job.
        assert_eq!(x_options("mpirun", &v(&["-np", "2", "a.out"]), &ndv), None);
        assert_eq!(x_options("ib_write_bw", &v(&["-x", "0"]), &ndv), None);
        assert_eq!(x_options("/usr/bin/", &v(&["-x", "A"]), &ndv), None);
        assert_eq!(
            x_options("/usr/bin/mpirun", &v(&["-x", "FOO", "a.out"]), &ndv),
            Some(v(&["-x", "LD_LIBRARY_PATH", "-x", "NDV_PROGRESS"]))
        );
        // What the command line names already is not named twice.
        assert_eq!(
            x_options(
                "mpiexec.openmpi",
                &v(&["-x", "LD_LIBRARY_PATH=/x", "-x", "NDV_PROGRESS"]),
                &ndv
            ),
            Some(vec![])
        );
    }
}
