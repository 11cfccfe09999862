//! `ndv run --ucx`: the kernel's RDMA device files, as seen by one program.
//!
//! Some programs look for the kernel's files of an RDMA device before they
//! ask libibverbs anything about it. UCX 1.13 is the one that matters:
//! `uct_ib_device_is_accessible` skips every device whose
//! `/dev/infiniband/<dev_name>` is not a character device it may read and
//! write, and it reads a GID's type from
//! `/sys/class/infiniband/<name>/ports/<port>/gid_attrs/types/<index>`
//! (a missing file reads as RoCE v1) and its interface from `…/ndevs/<index>`
//! — hard-coded paths, not through `ibv_get_sysfs_path`. No kernel module
//! makes those files here, and the host's `/dev` and `/sys` are not ours to
//! change, so [`enter`] makes them for this process and its children only:
//!
//! 1. a private mount namespace (`unshare(CLONE_NEWNS)`), every mount
//!    marked private so that nothing done here reaches the host; not root,
//!    a user namespace first (mapping the caller's uid and gid to 0 there),
//!    since mounting needs `CAP_SYS_ADMIN`, and a second one afterwards that
//!    maps them back, so the program runs as the user who started it;
//! 2. for `/dev` and for `/sys/class`: a tmpfs over the directory, holding
//!    a bind mount of every entry it had (a symbolic link is made again), so
//!    the program still finds `/dev/null`, `/dev/shm`, `/dev/pts`,
//!    `/sys/class/net` …, plus the entries of the [`Layout`]:
//!    `/dev/infiniband/uverbs<N>` and `/dev/infiniband/rdma_cm` are bind
//!    mounts of `/dev/null` (character devices anyone may open; our
//!    library never opens them), `/sys/class/infiniband/ndv<N>/ports/1/
//!    gid_attrs/{types,ndevs}/0` say `RoCE v2` and the interface, and
//!    `/sys/class/infiniband_verbs/uverbs<N>/ibdev` names the device, as the
//!    kernel's do.
//!
//! The names agree with what the library's `struct ibv_device` says
//! (`dev_name` `uverbs<N>`, `ibdev_path` `/sys/class/infiniband/ndv<N>`,
//! `dev_path` `/sys/class/infiniband_verbs/uverbs<N>`, `ibv_get_sysfs_path`
//! `/sys`), because both number the devices of
//! [`Device::list`](ndverbs_verbs::Device::list) in its order. Everything
//! else — the working directory, `/tmp`, the network namespace, other
//! mounts — is the host's: only the two directories are covered, and only
//! their entries are added.
//!
//! The [`Layout`] is plain data (what to make), built and tested without
//! privileges; [`enter`] does the system calls.

use ndverbs_verbs::DeviceInfo;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The directory holding the device files.
pub const DEV: &str = "/dev";
/// The directory holding the device classes of sysfs.
pub const SYS_CLASS: &str = "/sys/class";

/// One entry to make, relative to the directory it goes in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory (and its parents).
    Dir(PathBuf),
    /// A file with this content.
    File(PathBuf, String),
    /// A character device anyone may open: a bind mount of `/dev/null`.
    NullDevice(PathBuf),
}

impl Entry {
    fn path(&self) -> &Path {
        match self {
            Entry::Dir(p) | Entry::File(p, _) | Entry::NullDevice(p) => p,
        }
    }

    /// The first component: the name the entry takes in the directory
    /// (an entry of the host's of that name is replaced).
    fn top(&self) -> Option<&OsStr> {
        self.path().components().next().map(|c| c.as_os_str())
    }
}

/// What [`enter`] makes: entries for `/dev` and for `/sys/class`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Layout {
    /// Under `/dev`.
    pub dev: Vec<Entry>,
    /// Under `/sys/class`.
    pub sys_class: Vec<Entry>,
}

impl Layout {
    /// The files of `devices`, numbered in their order (the library's
    /// `uverbs<N>` is the `N`-th device of the list).
    pub fn for_devices(devices: &[DeviceInfo]) -> Layout {
        let mut l = Layout::default();
        l.dev.push(Entry::Dir("infiniband".into()));
        // librdmacm's device; UCX's rdmacm component checks it too.
        l.dev.push(Entry::NullDevice("infiniband/rdma_cm".into()));
        l.sys_class.push(Entry::Dir("infiniband".into()));
        l.sys_class.push(Entry::Dir("infiniband_verbs".into()));
        for (index, d) in devices.iter().enumerate() {
            let uverbs = format!("uverbs{index}");
            l.dev
                .push(Entry::NullDevice(Path::new("infiniband").join(&uverbs)));
            let attrs = Path::new("infiniband")
                .join(&d.name)
                .join("ports/1/gid_attrs");
            // The one GID (index 0) is RoCE v2 (UDP), on the address's
            // interface.
            l.sys_class
                .push(Entry::File(attrs.join("types/0"), "RoCE v2\n".into()));
            l.sys_class.push(Entry::File(
                attrs.join("ndevs/0"),
                format!("{}\n", d.ifname),
            ));
            l.sys_class.push(Entry::File(
                Path::new("infiniband_verbs").join(&uverbs).join("ibdev"),
                format!("{}\n", d.name),
            ));
        }
        l
    }
}

/// Why the namespace could not be made.
#[derive(Debug, thiserror::Error)]
pub enum NsError {
    /// `unshare` refused (no privilege, user namespaces disabled, or a
    /// seccomp filter).
    #[error("unshare({what}): {err}")]
    Unshare {
        /// The namespaces asked for.
        what: &'static str,
        /// Why.
        err: io::Error,
    },
    /// A mount failed.
    #[error("mounting {what} on {target}: {err}")]
    Mount {
        /// What was mounted.
        what: String,
        /// Where.
        target: PathBuf,
        /// Why.
        err: io::Error,
    },
    /// A file, directory or link could not be made or read.
    #[error("{path}: {err}")]
    File {
        /// Which.
        path: PathBuf,
        /// Why.
        err: io::Error,
    },
    /// A path with a NUL byte (cannot be passed to the kernel).
    #[error("{0}: contains a NUL byte")]
    Nul(PathBuf),
}

fn file_err(path: &Path) -> impl FnOnce(io::Error) -> NsError + '_ {
    move |err| NsError::File {
        path: path.to_path_buf(),
        err,
    }
}

fn cstr(p: &Path) -> Result<CString, NsError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| NsError::Nul(p.to_path_buf()))
}

/// `mount(2)`.
fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    what: &str,
) -> Result<(), NsError> {
    let err = |err| NsError::Mount {
        what: what.to_string(),
        target: target.to_path_buf(),
        err,
    };
    let src = source.map(cstr).transpose()?;
    let tgt = cstr(target)?;
    let fs = fstype.map(|f| CString::new(f).unwrap_or_default());
    // SAFETY: NUL-terminated strings (or NULL) that outlive the call; no
    // data argument.
    let rc = unsafe {
        libc::mount(
            src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            tgt.as_ptr(),
            fs.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(err(io::Error::last_os_error()))
    }
}

fn unshare(flags: libc::c_int, what: &'static str) -> Result<(), NsError> {
    // SAFETY: no pointers.
    if unsafe { libc::unshare(flags) } == 0 {
        Ok(())
    } else {
        Err(NsError::Unshare {
            what,
            err: io::Error::last_os_error(),
        })
    }
}

/// Maps `inside` of the current user namespace to `outside` of its parent
/// (one id each for users and groups).
fn map_ids(inside: (u32, u32), outside: (u32, u32)) -> Result<(), NsError> {
    // Needed before an unprivileged gid_map; harmless (and refused) when
    // already denied by the parent namespace.
    let _ = std::fs::write("/proc/self/setgroups", "deny");
    let uid = Path::new("/proc/self/uid_map");
    std::fs::write(uid, format!("{} {} 1\n", inside.0, outside.0)).map_err(file_err(uid))?;
    let gid = Path::new("/proc/self/gid_map");
    std::fs::write(gid, format!("{} {} 1\n", inside.1, outside.1)).map_err(file_err(gid))?;
    Ok(())
}

/// Makes this process's private view of `/dev` and `/sys/class` with the
/// entries of `layout` (module docs). Must run while the process has one
/// thread (a user namespace cannot be entered otherwise); what it starts
/// afterwards inherits the view.
pub fn enter(layout: &Layout) -> Result<(), NsError> {
    // SAFETY: no arguments.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let rootless = uid != 0;
    if rootless {
        unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS, "user, mount")?;
        map_ids((0, 0), (uid, gid))?;
    } else {
        unshare(libc::CLONE_NEWNS, "mount")?;
    }
    // Mounts are shared with the host by default (systemd): made private,
    // nothing below propagates out.
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        "private propagation",
    )?;
    shadow(Path::new(DEV), &layout.dev)?;
    shadow(Path::new(SYS_CLASS), &layout.sys_class)?;
    if rootless {
        // Back to the caller's own ids: programs that refuse to run as
        // root (Open MPI's mpirun) or check their uid see the real one.
        unshare(libc::CLONE_NEWUSER, "user")?;
        map_ids((uid, gid), (0, 0))?;
    }
    Ok(())
}

/// Covers `dir` with a tmpfs that holds bind mounts of what `dir` held,
/// then `entries`.
fn shadow(dir: &Path, entries: &[Entry]) -> Result<(), NsError> {
    let ours: Vec<&OsStr> = entries.iter().filter_map(Entry::top).collect();
    let mut old: Vec<(OsString, std::fs::FileType)> = Vec::new();
    for e in std::fs::read_dir(dir).map_err(file_err(dir))? {
        let e = e.map_err(file_err(dir))?;
        let t = e.file_type().map_err(file_err(&e.path()))?;
        if !ours.contains(&e.file_name().as_os_str()) {
            old.push((e.file_name(), t));
        }
    }
    // The covered directory stays reachable through this descriptor
    // (/proc/self/fd/N/NAME walks the directory under the tmpfs).
    let under = std::fs::File::open(dir).map_err(file_err(dir))?;
    let under_path = PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&under)
    ));
    mount(
        Some(Path::new("tmpfs")),
        dir,
        Some("tmpfs"),
        libc::MS_NOSUID,
        "a tmpfs",
    )?;
    // tmpfs starts 1777; the directories it covers are 0755.
    set_mode(dir, 0o755)?;
    for (name, t) in &old {
        let src = under_path.join(name);
        let dst = dir.join(name);
        if t.is_symlink() {
            let to = std::fs::read_link(&src).map_err(file_err(&src))?;
            std::os::unix::fs::symlink(&to, &dst).map_err(file_err(&dst))?;
            continue;
        }
        if t.is_dir() {
            std::fs::create_dir(&dst).map_err(file_err(&dst))?;
        } else {
            std::fs::File::create(&dst).map_err(file_err(&dst))?;
        }
        // Recursive: what is mounted below comes along (devpts under
        // /dev/pts), and a user namespace may not bind a subtree without
        // the mounts locked in it.
        mount(
            Some(&src),
            &dst,
            None,
            libc::MS_BIND | libc::MS_REC,
            &dst.to_string_lossy(),
        )?;
    }
    drop(under);
    for e in entries {
        let path = dir.join(e.path());
        match e {
            Entry::Dir(_) => std::fs::create_dir_all(&path).map_err(file_err(&path))?,
            Entry::File(_, text) => {
                make_parent(&path)?;
                std::fs::write(&path, text).map_err(file_err(&path))?;
                set_mode(&path, 0o444)?;
            }
            Entry::NullDevice(_) => {
                make_parent(&path)?;
                std::fs::File::create(&path).map_err(file_err(&path))?;
                mount(
                    Some(Path::new("/dev/null")),
                    &path,
                    None,
                    libc::MS_BIND,
                    "/dev/null",
                )?;
            }
        }
    }
    Ok(())
}

fn make_parent(path: &Path) -> Result<(), NsError> {
    match path.parent() {
        Some(p) => std::fs::create_dir_all(p).map_err(file_err(p)),
        None => Ok(()),
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<(), NsError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(file_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn dev(name: &str, addr: &str, ifname: &str) -> DeviceInfo {
        DeviceInfo {
            name: name.into(),
            addr: addr.parse::<IpAddr>().unwrap(),
            ifname: ifname.into(),
            ifindex: 1,
            mtu: 1500,
            link_up: true,
        }
    }

    #[test]
    fn layout_names_each_device_as_the_library_does() {
        let l = Layout::for_devices(&[
            dev("ndv0", "10.99.0.1", "veth0"),
            dev("ndv1", "127.0.0.1", "lo"),
        ]);
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            l.dev,
            vec![
                Entry::Dir(p("infiniband")),
                Entry::NullDevice(p("infiniband/rdma_cm")),
                Entry::NullDevice(p("infiniband/uverbs0")),
                Entry::NullDevice(p("infiniband/uverbs1")),
            ]
        );
        let files: Vec<(String, String)> = l
            .sys_class
            .iter()
            .filter_map(|e| match e {
                Entry::File(p, t) => Some((p.display().to_string(), t.clone())),
                _ => None,
            })
            .collect();
        let f = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            files,
            vec![
                f("infiniband/ndv0/ports/1/gid_attrs/types/0", "RoCE v2\n"),
                f("infiniband/ndv0/ports/1/gid_attrs/ndevs/0", "veth0\n"),
                f("infiniband_verbs/uverbs0/ibdev", "ndv0\n"),
                f("infiniband/ndv1/ports/1/gid_attrs/types/0", "RoCE v2\n"),
                f("infiniband/ndv1/ports/1/gid_attrs/ndevs/0", "lo\n"),
                f("infiniband_verbs/uverbs1/ibdev", "ndv1\n"),
            ]
        );
        // Only these names are taken from the host's directories.
        let tops = |v: &[Entry]| {
            let mut t: Vec<String> = v
                .iter()
                .filter_map(|e| e.top().map(|s| s.to_string_lossy().into_owned()))
                .collect();
            t.sort();
            t.dedup();
            t
        };
        assert_eq!(tops(&l.dev), vec!["infiniband"]);
        assert_eq!(tops(&l.sys_class), vec!["infiniband", "infiniband_verbs"]);
    }

    #[test]
    fn no_devices_still_makes_the_directories() {
        let l = Layout::for_devices(&[]);
        assert_eq!(
            l.dev,
            vec![
                Entry::Dir("infiniband".into()),
                Entry::NullDevice("infiniband/rdma_cm".into())
            ]
        );
        assert_eq!(
            l.sys_class,
            vec![
                Entry::Dir("infiniband".into()),
                Entry::Dir("infiniband_verbs".into())
            ]
        );
    }
}
