//! The interop guest: a Linux Soft-RoCE (rxe) peer in a small VM, for tests
//! that check this stack against the kernel's RoCE and rdma-core's tools.
//!
//! The guest is booted once per test run by `scripts/interop.sh up`, which
//! runs the repository's own harness (`interop/guest.sh`; `interop/README.md`
//! describes it). The kit only finds it: [`Guest::get`] returns `None` after
//! the skip rule ([`crate::skip`]) when it is not running, so interop tests
//! pass with a `SKIPPED` line on a machine without it and fail under
//! `CI=true`.
//!
//! Our side runs in the harness's network namespace ([`Guest::netns`]): the
//! host end of the link is [`HOST`], the guest [`GUEST`]. Tests share the one
//! guest and the host's UDP 4791 on [`HOST`], so a [`Guest`] holds a lock for
//! its lifetime — a file lock, which serialises interop tests of every test
//! binary, not only the threads of one.
//!
//! Servers in the guest are waited for, not slept on: [`Guest::wait_listening`]
//! polls the guest's own view (`ss` for TCP, `rdma resource` for rdma_cm
//! listeners) until the port is open.
//!
//! ```no_run
//! use ndverbs_testkit::guest::{Guest, Listen, GUEST};
//! let Some(g) = Guest::get() else { return };
//! let job = g.spawn("timeout 60 rping -s -a 10.77.0.2 -p 7311 -C 3");
//! g.wait_listening(&job, Listen::RdmaCm(7311));
//! // … run our client in g.netns() against GUEST …
//! let (ok, out) = g.wait(job);
//! assert!(ok, "{out}");
//! ```

use crate::netns::Netns;
use crate::skip;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The host end of the interop link (inside [`Guest::netns`]).
pub const HOST: &str = "10.77.0.1";
/// The guest's address (its `rxe0`).
pub const GUEST: &str = "10.77.0.2";

/// How long a guest server may take to start listening (the guest is
/// emulated, and slow when the host is busy).
pub const LISTEN_LIMIT: Duration = Duration::from_secs(60);

/// The running guest, held exclusively (see the module docs).
pub struct Guest {
    harness: PathBuf,
    netns: Netns,
    _lock: std::fs::File,
}

/// A command running in the guest in the background.
#[derive(Debug)]
pub struct GuestJob {
    id: String,
    cmd: String,
}

/// A server socket in the guest to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    /// A TCP port in LISTEN (`ss -ltn`): perftest and ibv_rc_pingpong's
    /// exchange.
    Tcp(u16),
    /// An rdma_cm id in LISTEN on this port (`rdma resource show cm_id`):
    /// rping, perftest with `-R`.
    RdmaCm(u16),
}

/// The harness's control script, in this repository.
fn harness_script() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../interop/guest.sh"
    ))
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// Takes the lock every [`Guest`] holds (blocking until the test holding it
/// is done).
fn lock() -> std::fs::File {
    let path = std::env::temp_dir().join("ndverbs-testkit-guest.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // SAFETY: flock on a file descriptor the returned File owns; the lock
    // is released when it is closed.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
    f
}

impl Guest {
    /// The guest, or `None` after the skip rule when it is not running.
    #[track_caller]
    pub fn get() -> Option<Guest> {
        let harness = harness_script();
        let lock = lock();
        let up = Command::new(&harness)
            .arg("status")
            .output()
            .is_ok_and(|o| o.status.success());
        if !up {
            skip::skip("the interop guest is not running (scripts/interop.sh up)");
            return None;
        }
        let ns = std::env::var("NDV_NETNS").unwrap_or_else(|_| "ndv-interop".into());
        Some(Guest {
            harness,
            netns: Netns::existing(&ns),
            _lock: lock,
        })
    }

    /// The namespace our side runs in (it has [`HOST`]).
    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    /// Runs `cmd` in the guest (bash) and waits for it: (success, stdout and
    /// stderr).
    pub fn run(&self, cmd: &str) -> (bool, String) {
        let o = self.harness(&["run", cmd]);
        (o.status.success(), text(&o))
    }

    /// Starts `cmd` in the guest in the background.
    pub fn spawn(&self, cmd: &str) -> GuestJob {
        let o = self.harness(&["bg", cmd]);
        assert!(o.status.success(), "bg {cmd}: {}", text(&o));
        GuestJob {
            id: String::from_utf8_lossy(&o.stdout).trim().to_string(),
            cmd: cmd.to_string(),
        }
    }

    /// Waits for a background job: (success, its output).
    pub fn wait(&self, job: GuestJob) -> (bool, String) {
        let o = self.harness(&["wait", &job.id]);
        (o.status.success(), text(&o))
    }

    /// Waits until `listen` is open in the guest, for at most
    /// [`LISTEN_LIMIT`]; fails the test (with the job's output when it
    /// ended) when it never opens.
    #[track_caller]
    pub fn wait_listening(&self, job: &GuestJob, listen: Listen) {
        let t0 = Instant::now();
        let (cmd, port) = match listen {
            Listen::Tcp(p) => ("ss -ltnH", p),
            Listen::RdmaCm(p) => ("rdma resource show cm_id", p),
        };
        loop {
            let (ok, listing) = self.run(cmd);
            if ok && listing.lines().any(|l| listens(l, listen)) {
                return;
            }
            if let Some(out) = self.finished_output(job) {
                panic!(
                    "guest job `{}` ended before listening on {port}:\n{out}",
                    job.cmd
                );
            }
            assert!(
                t0.elapsed() < LISTEN_LIMIT,
                "guest job `{}` not listening ({listen:?}) after {LISTEN_LIMIT:?}; `{cmd}` shows:\n{listing}",
                job.cmd
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The output of `job` if it has ended, `None` while it runs.
    fn finished_output(&self, job: &GuestJob) -> Option<String> {
        let o = self.harness(&["poll", &job.id]);
        (o.status.code() != Some(3)).then(|| text(&o))
    }

    /// Starts a capture of the interop link (tcpdump in the namespace, with
    /// the tcpdump `filter` words) into `path`; returns once tcpdump writes.
    #[track_caller]
    pub fn capture(&self, path: &std::path::Path, filter: &[&str]) -> GuestCapture<'_> {
        let p = path.to_string_lossy();
        let mut args = vec!["capture", &p];
        args.extend_from_slice(filter);
        let o = self.harness(&args);
        assert!(o.status.success(), "capture: {}", text(&o));
        // tcpdump writes the file header once it listens.
        let t0 = Instant::now();
        while !std::fs::metadata(path).is_ok_and(|m| m.len() >= 24) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "tcpdump did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        GuestCapture { guest: self }
    }

    fn harness(&self, args: &[&str]) -> Output {
        Command::new(&self.harness)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", self.harness.display()))
    }
}

/// A running capture of the interop link; [`GuestCapture::stop`] (or drop)
/// ends it.
pub struct GuestCapture<'a> {
    guest: &'a Guest,
}

impl GuestCapture<'_> {
    /// Ends the capture after the last packets of an exchange had time to
    /// cross the emulated link into tcpdump.
    pub fn stop(self) {}
}

impl Drop for GuestCapture<'_> {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(1500));
        let _ = self.guest.harness(&["capture-stop"]);
    }
}

/// Whether a line of `ss -ltnH` or `rdma resource show cm_id` shows `listen`.
fn listens(line: &str, listen: Listen) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    match listen {
        // `LISTEN 0 1 0.0.0.0:18611 0.0.0.0:*`
        Listen::Tcp(port) => {
            words.first() == Some(&"LISTEN")
                && words
                    .get(3)
                    .is_some_and(|a| a.rsplit(':').next() == Some(&port.to_string()))
        }
        // `link rxe0/1 cm-idn 3 state LISTEN ps TCP pid 77 comm rping src-addr 10.77.0.2:7311 dst-addr 0.0.0.0:0`
        Listen::RdmaCm(port) => {
            words.windows(2).any(|w| w == ["state", "LISTEN"])
                && words.windows(2).any(|w| {
                    w[0] == "src-addr" && w[1].rsplit(':').next() == Some(&port.to_string())
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_recognised() {
        let ss =
            "LISTEN 0      1            0.0.0.0:18611      0.0.0.0:*\nLISTEN 0 5 [::]:22 [::]:*";
        assert!(ss.lines().any(|l| listens(l, Listen::Tcp(18611))));
        assert!(ss.lines().any(|l| listens(l, Listen::Tcp(22))));
        assert!(!ss.lines().any(|l| listens(l, Listen::Tcp(1861))));
        let cm = "link rxe0/1 cm-idn 3 state LISTEN ps TCP pid 77 comm rping src-addr 10.77.0.2:7311 dst-addr 0.0.0.0:0 \n\
                  link rxe0/1 cm-idn 4 state CONNECT ps TCP pid 78 comm rping src-addr 10.77.0.2:7312 dst-addr 10.77.0.1:40000 ";
        assert!(cm.lines().any(|l| listens(l, Listen::RdmaCm(7311))));
        assert!(!cm.lines().any(|l| listens(l, Listen::RdmaCm(7312))));
        assert!(!cm.lines().any(|l| listens(l, Listen::Tcp(7311))));
    }
}
