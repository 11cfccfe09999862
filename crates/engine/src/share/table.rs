//! The membership table of shared ports: files in one directory per user,
//! named by IP address.
//!
//! | file | what it is |
//! |---|---|
//! | `<ip>.lock` | the host lock: whoever holds its `flock` coordinates (joins, leaves, reconciles) |
//! | `<ip>.<slot>.lock` | a member's claim on its slot: `flock`ed for the member's lifetime, so a crash frees it |
//! | `<ip>.<slot>.state` | what the member says about itself: pid, the probe it answered last, the service IDs it listens on |
//! | `<ip>.epoch` | the nonce of the current probe round (a probe without it is not believed) |
//! | `<ip>.table` | the steering table last attached, for members to look up service IDs they do not hold |
//!
//! The host lock is taken by locking `<ip>.lock` and then checking that the
//! name still names the file locked: the last member out removes every file
//! of its address, its host lock's too, and a process that was waiting for
//! that lock must not coordinate on a file nobody else can find.
//!
//! A slot is *live* exactly when its lock file is locked: the kernel drops
//! a `flock` when the last descriptor of its open file closes, also when
//! the process is killed. State files are rewritten whole and renamed into
//! place, so a reader sees an old or a new version, never half of one;
//! a state file of a slot whose lock is free is stale and ignored.
//!
//! The directory is `/dev/shm/ndverbs-<euid>` (`/tmp/ndverbs-<euid>` without
//! `/dev/shm`): one place every process of the user finds, whatever its
//! environment. It must be the user's own and closed to others (0700):
//! another user who could write there could steer the user's traffic.

use super::sys;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Number of slots: the destination QPN's high byte names one, and 0xFF is
/// left out (QPN 0xFFFFFF is multicast).
pub const SLOTS: u8 = 255;

/// The directory of one user's shared ports.
#[derive(Debug, Clone)]
pub struct ShareDir {
    path: PathBuf,
}

impl ShareDir {
    /// The user's directory (see the module docs), created if missing.
    pub fn for_user() -> io::Result<ShareDir> {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        ShareDir::at(base.join(format!("ndverbs-{}", sys::uid())))
    }

    /// `path` as the directory, created (0700) if missing; refused if it
    /// belongs to another user or others may enter it.
    pub fn at(path: PathBuf) -> io::Result<ShareDir> {
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let m = fs::symlink_metadata(&path)?;
        if !m.is_dir() || m.uid() != sys::uid() || m.permissions().mode() & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is not a directory of this user closed to others",
                    path.display()
                ),
            ));
        }
        Ok(ShareDir { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn file(&self, ip: IpAddr, suffix: &str) -> PathBuf {
        self.path.join(format!("{ip}.{suffix}"))
    }

    fn open_lock(&self, p: PathBuf) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(p)
    }

    /// Takes the host lock of `ip`, waiting at most `timeout` (a
    /// coordinator that is alive finishes within a few probe rounds; one
    /// that died released it).
    pub fn lock_host(&self, ip: IpAddr, timeout: Duration) -> io::Result<HostLock> {
        let t0 = Instant::now();
        loop {
            let f = self.open_lock(self.file(ip, "lock"))?;
            while !sys::try_lock(&f)? {
                if t0.elapsed() > timeout {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the shared port {ip} stays locked by another process"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            if self.still_named(ip, &f)? {
                return Ok(HostLock { _file: f });
            }
            // The last member out removed the file while we waited for it:
            // the lock is on a file nobody else will open again.
        }
    }

    /// Whether `<ip>.lock` still names the file `f` (see [`remove_address`](Self::remove_address)).
    fn still_named(&self, ip: IpAddr, f: &File) -> io::Result<bool> {
        let ours = f.metadata()?;
        match fs::metadata(self.file(ip, "lock")) {
            Ok(m) => Ok(m.ino() == ours.ino() && m.dev() == ours.dev()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Claims the lowest free slot of `ip` (the caller holds the host lock).
    pub fn claim_slot(&self, ip: IpAddr) -> io::Result<SlotClaim> {
        for slot in 0..SLOTS {
            let f = self.open_lock(self.file(ip, &format!("{slot}.lock")))?;
            if sys::try_lock(&f)? {
                return Ok(SlotClaim { slot, _file: f });
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("all {SLOTS} slots of the shared port {ip} are taken"),
        ))
    }

    /// The live slots of `ip` (see the module docs); `own` is counted live
    /// without a test (its lock is the caller's).
    pub fn live_slots(&self, ip: IpAddr, own: Option<u8>) -> io::Result<Vec<u8>> {
        let mut live = Vec::new();
        for slot in 0..SLOTS {
            if Some(slot) == own {
                live.push(slot);
                continue;
            }
            let p = self.file(ip, &format!("{slot}.lock"));
            let f = match OpenOptions::new().read(true).open(&p) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            // Locking it would succeed only if nobody holds it; the lock is
            // ours for a moment then and goes with `f`.
            if !sys::try_lock(&f)? {
                live.push(slot);
            }
        }
        Ok(live)
    }

    /// What the member in `slot` last said (`None`: never written).
    pub fn read_state(&self, ip: IpAddr, slot: u8) -> io::Result<Option<MemberState>> {
        match fs::read_to_string(self.file(ip, &format!("{slot}.state"))) {
            Ok(s) => Ok(Some(MemberState::parse(&s))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Replaces the state of `slot` (whole, by rename).
    pub fn write_state(&self, ip: IpAddr, slot: u8, s: &MemberState) -> io::Result<()> {
        self.replace(self.file(ip, &format!("{slot}.state")), &s.to_text())
    }

    /// The current probe nonce of `ip` (0 if none was ever written).
    pub fn read_epoch(&self, ip: IpAddr) -> io::Result<u64> {
        match fs::read_to_string(self.file(ip, "epoch")) {
            Ok(s) => Ok(u64::from_str_radix(s.trim(), 16).unwrap_or(0)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Starts a probe round of `ip` with `nonce`.
    pub fn write_epoch(&self, ip: IpAddr, nonce: u64) -> io::Result<()> {
        self.replace(self.file(ip, "epoch"), &format!("{nonce:016x}\n"))
    }

    /// The service IDs of the steering table last attached for `ip`.
    pub fn read_services(&self, ip: IpAddr) -> io::Result<Vec<u64>> {
        match fs::read_to_string(self.file(ip, "table")) {
            Ok(s) => Ok(s
                .lines()
                .filter_map(|l| l.strip_prefix("service "))
                .filter_map(|v| u64::from_str_radix(v.split(' ').next()?, 16).ok())
                .collect()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Records the steering table attached for `ip` (for people and for
    /// [`read_services`](Self::read_services)).
    pub fn write_table(&self, ip: IpAddr, t: &super::cbpf::Steering) -> io::Result<()> {
        let mut s = String::new();
        for (slot, i) in &t.slots {
            s += &format!("slot {slot} {i}\n");
        }
        for (sid, i) in &t.services {
            s += &format!("service {sid:016x} {i}\n");
        }
        self.replace(self.file(ip, "table"), &s)
    }

    /// Removes the files of `ip`, its host lock's too (the caller holds it,
    /// and the last member has left). A process that was waiting for that
    /// lock gets it on the removed file, finds the name now names another
    /// file or none, and starts over ([`lock_host`](Self::lock_host)); so
    /// only the caller, which does nothing more under it, and whoever locks
    /// a new file of the name can both "hold" the lock.
    pub fn remove_address(&self, ip: IpAddr) -> io::Result<()> {
        let prefix = format!("{ip}.");
        for e in fs::read_dir(&self.path)? {
            let name = e?.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
                continue;
            };
            // `rest` starts with a slot number or a word: another address
            // (`127.0.0.10.` after `127.0.0.1.`) never matches the prefix.
            if rest != "lock" {
                remove(&self.path.join(&name))?;
            }
        }
        // Last: while it exists, a joiner that locks it is the coordinator.
        remove(&self.file(ip, "lock"))
    }

    /// Removes the files of every address but `except` whose members are
    /// all gone (processes that ended without leaving: killed, or exited
    /// with the engine's thread still holding the NIC). Addresses whose host
    /// lock is held are left alone; returns how many were swept.
    pub fn sweep(&self, except: IpAddr) -> io::Result<usize> {
        let mut swept = 0;
        for e in fs::read_dir(&self.path)? {
            let name = e?.file_name();
            // An address with files to sweep has its epoch file: looking
            // only at those keeps a join's cost independent of how many
            // addresses were ever shared.
            let Some(ip) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".epoch"))
                .and_then(|n| n.parse::<IpAddr>().ok())
            else {
                continue;
            };
            if ip == except {
                continue;
            }
            let f = self.open_lock(self.file(ip, "lock"))?;
            if sys::try_lock(&f)?
                && self.still_named(ip, &f)?
                && self.live_slots(ip, None)?.is_empty()
            {
                self.remove_address(ip)?;
                swept += 1;
            }
        }
        Ok(swept)
    }

    fn replace(&self, path: PathBuf, text: &str) -> io::Result<()> {
        // A name of this process and thread: writers never share a temp file.
        let tmp = path.with_extension(format!(
            "tmp{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let tmp = PathBuf::from(tmp.to_string_lossy().replace(['(', ')'], ""));
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        drop(f);
        fs::rename(&tmp, &path)
    }
}

/// Removes `p`; gone already is fine.
fn remove(p: &Path) -> io::Result<()> {
    match fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The host lock of one IP address: held until dropped.
#[derive(Debug)]
pub struct HostLock {
    _file: File,
}

/// A member's claim on its slot: held until dropped (or the process ends).
#[derive(Debug)]
pub struct SlotClaim {
    slot: u8,
    _file: File,
}

impl SlotClaim {
    /// The slot.
    pub fn slot(&self) -> u8 {
        self.slot
    }
}

/// What a member says about itself in its state file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberState {
    /// Its process ID (for people reading the directory).
    pub pid: u32,
    /// The last probe round it took part in: the round's nonce, the index
    /// its probe carried, and whether more than one probe of that round
    /// reached it (then the index means nothing: the group was smaller
    /// than the coordinator thought, and the kernel hashed the extra one).
    pub probe: Option<Probed>,
    /// The service IDs it listens on.
    pub listens: Vec<u64>,
}

/// A member's answer to one probe round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probed {
    /// The round's nonce.
    pub nonce: u64,
    /// The index the probe carried: the member's index in the group.
    pub index: u8,
    /// More than one probe of the round arrived.
    pub ambiguous: bool,
}

impl MemberState {
    /// Parses a state file; lines it does not know are skipped (a newer
    /// writer's additions), malformed values ignored.
    pub fn parse(s: &str) -> MemberState {
        let mut m = MemberState::default();
        for line in s.lines() {
            let mut w = line.split_whitespace();
            match (w.next(), w.next(), w.next(), w.next()) {
                (Some("pid"), Some(p), ..) => m.pid = p.parse().unwrap_or(0),
                (Some("probe"), Some(n), Some(i), a) => {
                    if let (Ok(nonce), Ok(index)) = (u64::from_str_radix(n, 16), i.parse()) {
                        m.probe = Some(Probed {
                            nonce,
                            index,
                            ambiguous: a == Some("ambiguous"),
                        });
                    }
                }
                (Some("listen"), Some(v), ..) => {
                    if let Ok(sid) = u64::from_str_radix(v, 16) {
                        m.listens.push(sid);
                    }
                }
                _ => {}
            }
        }
        m
    }

    /// The file's text.
    pub fn to_text(&self) -> String {
        let mut s = format!("pid {}\n", self.pid);
        if let Some(p) = self.probe {
            let a = if p.ambiguous { " ambiguous" } else { "" };
            s += &format!("probe {:016x} {}{a}\n", p.nonce, p.index);
        }
        for sid in &self.listens {
            s += &format!("listen {sid:016x}\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> (ShareDir, IpAddr) {
        let base = std::env::temp_dir().join(format!(
            "ndv-share-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let base = PathBuf::from(base.to_string_lossy().replace(['(', ')'], ""));
        let _ = fs::remove_dir_all(&base);
        (ShareDir::at(base).unwrap(), "127.0.0.9".parse().unwrap())
    }

    #[test]
    fn slots_are_live_while_claimed() {
        let (d, ip) = dir();
        let a = d.claim_slot(ip).unwrap();
        let b = d.claim_slot(ip).unwrap();
        assert_eq!((a.slot(), b.slot()), (0, 1));
        assert_eq!(d.live_slots(ip, None).unwrap(), vec![0, 1]);
        assert_eq!(d.live_slots(ip, Some(1)).unwrap(), vec![0, 1]);
        drop(a);
        assert_eq!(d.live_slots(ip, None).unwrap(), vec![1]);
        // The freed slot is the next one claimed.
        assert_eq!(d.claim_slot(ip).unwrap().slot(), 0);
        let _ = fs::remove_dir_all(d.path());
    }

    #[test]
    fn removing_an_address_leaves_others_and_its_waiters_start_over() {
        let (d, ip) = dir();
        let other: IpAddr = "127.0.0.90".parse().unwrap();
        let l = d.lock_host(ip, Duration::from_secs(1)).unwrap();
        // A process waiting for the host lock while the last member leaves.
        let waiter = {
            let d = d.clone();
            std::thread::spawn(move || d.lock_host(ip, Duration::from_secs(10)).unwrap())
        };
        std::thread::sleep(Duration::from_millis(50));
        drop(d.claim_slot(ip).unwrap());
        d.write_epoch(ip, 1).unwrap();
        d.write_epoch(other, 1).unwrap();
        d.remove_address(ip).unwrap();
        let mut left: Vec<String> = fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["127.0.0.90.epoch"]);
        drop(l);
        // The waiter locked the removed file first, saw it gone, and holds
        // a new one: nobody else gets the lock meanwhile.
        let held = waiter.join().unwrap();
        let e = d.lock_host(ip, Duration::from_millis(30)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(held);
        d.lock_host(ip, Duration::from_millis(30)).unwrap();
        let _ = fs::remove_dir_all(d.path());
    }

    #[test]
    fn sweeping_removes_only_dead_addresses() {
        let (d, ip) = dir();
        let (dead, live, busy): (IpAddr, IpAddr, IpAddr) = (
            "127.0.0.91".parse().unwrap(),
            "127.0.0.92".parse().unwrap(),
            "127.0.0.93".parse().unwrap(),
        );
        for a in [ip, dead, live, busy] {
            drop(d.lock_host(a, Duration::from_secs(1)).unwrap());
            d.write_epoch(a, 1).unwrap();
        }
        drop(d.claim_slot(dead).unwrap()); // a member that is gone
        let _member = d.claim_slot(live).unwrap();
        let _coordinator = d.lock_host(busy, Duration::from_secs(1)).unwrap();
        assert_eq!(d.sweep(ip).unwrap(), 1);
        assert_eq!(d.read_epoch(dead).unwrap(), 0);
        for a in [ip, live, busy] {
            assert_eq!(d.read_epoch(a).unwrap(), 1, "{a}");
        }
        let _ = fs::remove_dir_all(d.path());
    }

    #[test]
    fn host_lock_excludes_and_times_out() {
        let (d, ip) = dir();
        let l = d.lock_host(ip, Duration::from_secs(1)).unwrap();
        let e = d.lock_host(ip, Duration::from_millis(20)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(l);
        d.lock_host(ip, Duration::from_millis(20)).unwrap();
        let _ = fs::remove_dir_all(d.path());
    }

    #[test]
    fn state_round_trips_and_tolerates_garbage() {
        let (d, ip) = dir();
        let s = MemberState {
            pid: 42,
            probe: Some(Probed {
                nonce: 0xdead_beef,
                index: 3,
                ambiguous: true,
            }),
            listens: vec![0x0106_1c06, 7],
        };
        d.write_state(ip, 4, &s).unwrap();
        assert_eq!(d.read_state(ip, 4).unwrap(), Some(s));
        assert_eq!(d.read_state(ip, 5).unwrap(), None);
        let g = MemberState::parse("pid x\nprobe zz 1\nlisten 12\nnew field\n\u{0}");
        assert_eq!(
            g,
            MemberState {
                pid: 0,
                probe: None,
                listens: vec![0x12]
            }
        );
        d.write_epoch(ip, 0x1234).unwrap();
        assert_eq!(d.read_epoch(ip).unwrap(), 0x1234);
        let t = super::super::cbpf::Steering {
            slots: vec![(1, 0)],
            services: vec![(9, 0)],
        };
        d.write_table(ip, &t).unwrap();
        assert_eq!(d.read_services(ip).unwrap(), vec![9]);
        let _ = fs::remove_dir_all(d.path());
    }

    #[test]
    fn a_directory_open_to_others_is_refused() {
        let (d, _) = dir();
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let e = ShareDir::at(d.path().to_path_buf()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        let _ = fs::remove_dir_all(d.path());
    }
}
