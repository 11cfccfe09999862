//! Programs under test: a server started and waited for until it says it is
//! ready, a client after it, both read while they run and waited for with a
//! time limit.
//!
//! **The readiness contract.** Every server role of the `ndv` tools logs, at
//! `info` level on target `ndv`, the message [`READY`] (with `addr` and
//! `port` fields) once a client can connect: its TCP listen socket is bound,
//! or its rdma_cm listener listens. The tools log to stderr and only with
//! `RUST_LOG` asking for it, so stdout — which mirrors perftest and rping
//! byte for byte — never changes. [`start_server`] runs the command with
//! `ndv=info` added to `RUST_LOG` and returns once that line is on stderr, so
//! a client started next never races the server's `listen` — no sleep, and
//! no retry of a client that came too early.
//!
//! ```no_run
//! use ndverbs_testkit::{addr, process};
//! use std::process::Command;
//! let ndv = "target/debug/ndv";
//! let (s, c) = addr::pair_v4();
//! let (s, c) = (s.to_string(), c.to_string());
//! let (client_out, server_out) = process::server_then_client(
//!     Command::new(ndv).args(["ping", "-s", "-a", &s, "-p", "7301", "-C", "3"]),
//!     Command::new(ndv).args(["ping", "-c", "-a", &s, "-I", &c, "-p", "7301", "-C", "3"]),
//!     process::LIMIT,
//! );
//! ```

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What a server of the `ndv` tools logs when clients can connect.
pub const READY: &str = "ready for clients";

/// How long a server may take to become ready.
pub const READY_LIMIT: Duration = Duration::from_secs(30);

/// How long output may trail the exit of the process that wrote it.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// A generous limit for a whole tool run in a test.
pub const LIMIT: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Captured {
    stdout: Vec<u8>,
    stderr: Vec<(Instant, String)>,
    /// Pipes that reached their end.
    closed: usize,
}

#[derive(Default)]
struct Shared {
    captured: Mutex<Captured>,
    grew: Condvar,
}

/// A started program whose stdout and stderr are read as they come.
/// Dropped while it runs, it is killed (a failing test leaves no process
/// behind).
pub struct Running {
    child: Child,
    what: String,
    shared: Arc<Shared>,
    finished: bool,
}

/// A program that ended (or was killed).
#[derive(Debug)]
pub struct Finished {
    /// Exited with status 0 (false when it timed out).
    pub ok: bool,
    /// Killed because it outlived its time limit.
    pub timed_out: bool,
    /// The exit status.
    pub status: Option<ExitStatus>,
    /// Everything it wrote to stdout.
    pub stdout: String,
    /// Its stderr lines, each with the time it was read.
    pub stderr_lines: Vec<(Instant, String)>,
    /// When it was seen to exit.
    pub exited: Instant,
}

impl Finished {
    /// Its stderr.
    pub fn stderr(&self) -> String {
        self.stderr_lines
            .iter()
            .map(|(_, l)| format!("{l}\n"))
            .collect()
    }

    /// stdout, then stderr — what assertions search and failure messages
    /// show; starts with `TIMED OUT` when it was killed for that.
    pub fn text(&self) -> String {
        let head = if self.timed_out { "TIMED OUT\n" } else { "" };
        format!("{head}{}{}", self.stdout, self.stderr())
    }
}

fn read_stdout(mut r: ChildStdout, shared: Arc<Shared>) {
    let mut buf = [0u8; 8192];
    while let Ok(n) = r.read(&mut buf) {
        if n == 0 {
            break;
        }
        shared
            .captured
            .lock()
            .unwrap()
            .stdout
            .extend_from_slice(&buf[..n]);
        shared.grew.notify_all();
    }
    shared.captured.lock().unwrap().closed += 1;
    shared.grew.notify_all();
}

fn read_stderr(r: ChildStderr, shared: Arc<Shared>) {
    let mut r = BufReader::new(r);
    let mut line = Vec::new();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line)
                    .trim_end_matches(['\n', '\r'])
                    .to_string();
                shared
                    .captured
                    .lock()
                    .unwrap()
                    .stderr
                    .push((Instant::now(), text));
                shared.grew.notify_all();
            }
        }
    }
    shared.captured.lock().unwrap().closed += 1;
    shared.grew.notify_all();
}

impl Running {
    /// Starts `cmd` with stdin closed and stdout and stderr read by threads.
    #[track_caller]
    pub fn spawn(cmd: &mut Command) -> Running {
        let what = format!("{cmd:?}");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        let shared = Arc::new(Shared::default());
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let s1 = shared.clone();
        let s2 = shared.clone();
        std::thread::spawn(move || read_stdout(out.expect("piped"), s1));
        std::thread::spawn(move || read_stderr(err.expect("piped"), s2));
        Running {
            child,
            what,
            shared,
            finished: false,
        }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its output so far (stdout, then stderr).
    pub fn output_so_far(&self) -> String {
        let c = self.shared.captured.lock().unwrap();
        let mut s = String::from_utf8_lossy(&c.stdout).into_owned();
        for (_, l) in &c.stderr {
            s.push_str(l);
            s.push('\n');
        }
        s
    }

    /// Waits until a line of its stderr contains `needle`. An error (with
    /// the output so far) when it exits first or `limit` passes.
    pub fn wait_for_stderr(&mut self, needle: &str, limit: Duration) -> Result<(), String> {
        let t0 = Instant::now();
        loop {
            {
                let c = self.shared.captured.lock().unwrap();
                if c.stderr.iter().any(|(_, l)| l.contains(needle)) {
                    return Ok(());
                }
                // Woken by new output, or every 50 ms to look at the process.
                drop(
                    self.shared
                        .grew
                        .wait_timeout(c, Duration::from_millis(50))
                        .unwrap(),
                );
            }
            let exited = self.child.try_wait().ok().flatten();
            if exited.is_some() || t0.elapsed() > limit {
                // Whatever it wrote before exiting may still be in the pipe.
                if exited.is_some() {
                    std::thread::sleep(Duration::from_millis(50));
                    if self.output_so_far().contains(needle) {
                        return Ok(());
                    }
                }
                let why = match exited {
                    Some(st) => format!("exited ({st})"),
                    None => format!("still not there after {limit:?}"),
                };
                return Err(format!(
                    "{}: waiting for {needle:?} on stderr: {why}; output:\n{}",
                    self.what,
                    self.output_so_far()
                ));
            }
        }
    }

    /// Waits for it to exit, killing it after `limit`.
    pub fn wait(mut self, limit: Duration) -> Finished {
        let t0 = Instant::now();
        let (status, timed_out) = loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                break (Some(st), false);
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                break (self.child.wait().ok(), true);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.finish(status, timed_out)
    }

    /// Kills it (SIGKILL) and collects what it wrote.
    pub fn kill(mut self) -> Finished {
        let _ = self.child.kill();
        let status = self.child.wait().ok();
        self.finish(status, false)
    }

    fn finish(&mut self, status: Option<ExitStatus>, timed_out: bool) -> Finished {
        let exited = Instant::now();
        self.finished = true;
        // The pipes end with the process — unless a child it started still
        // holds them: then what came so far is all there is.
        let mut c = self.shared.captured.lock().unwrap();
        while c.closed < 2 && exited.elapsed() < PIPE_GRACE {
            c = self.shared.grew.wait_timeout(c, PIPE_GRACE).unwrap().0;
        }
        let c = std::mem::take(&mut *c);
        Finished {
            ok: !timed_out && status.is_some_and(|s| s.success()),
            timed_out,
            status,
            stdout: String::from_utf8_lossy(&c.stdout).into_owned(),
            stderr_lines: c.stderr,
            exited,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Adds `ndv=info` to the `RUST_LOG` the command would run with (its own,
/// or the test's), keeping warnings of everything else as the tools show
/// them without `RUST_LOG`.
fn log_readiness(cmd: &mut Command) {
    let own = cmd
        .get_envs()
        .find(|(k, _)| *k == "RUST_LOG")
        .map(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()));
    let base = match own {
        Some(v) => v,
        None => std::env::var("RUST_LOG").ok(),
    }
    .filter(|v| !v.trim().is_empty())
    .unwrap_or_else(|| "warn".into());
    cmd.env("RUST_LOG", format!("{base},ndv=info"));
}

/// Starts a server role of the `ndv` tools and returns once it logged
/// [`READY`]; fails the test (with its output) when it exits first or does
/// not get ready within [`READY_LIMIT`].
#[track_caller]
pub fn start_server(cmd: &mut Command) -> Running {
    log_readiness(cmd);
    let mut server = Running::spawn(cmd);
    if let Err(e) = server.wait_for_stderr(READY, READY_LIMIT) {
        drop(server.kill());
        panic!("server not ready: {e}");
    }
    server
}

/// Starts `server` ([`start_server`]), then `client`, waits for both (each
/// within `limit`) and checks both succeeded. Returns (client output,
/// server output), each stdout then stderr.
#[track_caller]
pub fn server_then_client(
    server: &mut Command,
    client: &mut Command,
    limit: Duration,
) -> (String, String) {
    let s = start_server(server);
    let c = Running::spawn(client).wait(limit);
    let s = s.wait(limit);
    let (out_c, out_s) = (c.text(), s.text());
    assert!(c.ok && s.ok, "client:\n{out_c}\nserver:\n{out_s}");
    (out_c, out_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_server_is_ready_when_it_says_so() {
        let s = start_server(&mut sh(
            "echo \"$RUST_LOG\" >&2; echo out; echo 'INFO ndv: ready for clients addr=x port=1' >&2; read -t 5 x; echo done",
        ));
        let f = s.wait(Duration::from_secs(20));
        assert!(f.ok, "{}", f.text());
        assert_eq!(f.stdout, "out\ndone\n");
        assert!(
            f.stderr_lines[0].1.ends_with(",ndv=info"),
            "{:?}",
            f.stderr_lines
        );
    }

    #[test]
    fn a_server_that_exits_first_fails_with_its_output() {
        let r = std::panic::catch_unwind(|| start_server(&mut sh("echo no port >&2; exit 3")));
        let msg = r.err().and_then(|p| p.downcast::<String>().ok()).unwrap();
        assert!(msg.contains("exited") && msg.contains("no port"), "{msg}");
    }

    #[test]
    fn time_limits_kill() {
        let f = Running::spawn(&mut sh("echo started; sleep 30")).wait(Duration::from_millis(200));
        assert!(f.timed_out && !f.ok);
        assert!(f.text().starts_with("TIMED OUT\nstarted\n"), "{}", f.text());
    }
}
