//! What the tests of unmodified Debian programs over `ndv run` share: the
//! skip rule for programs not installed, the two namespaces joined by veth,
//! `ndv run` and `ndv` commands inside a namespace, a server started before
//! its client, perftest's result rows and clock failures, and perftest
//! against Linux rxe in both roles.
#![allow(dead_code)]

use ndverbs_testkit::guest::{Guest, Listen, GUEST, HOST};
use ndverbs_testkit::netns::Netns;
use ndverbs_testkit::process::{self, Finished, Running, LIMIT};
use ndverbs_testkit::skip;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const NDV: &str = env!("CARGO_BIN_EXE_ndv");

/// The server's and the client's address on the veth pair.
pub const A: &str = "10.99.0.1";
pub const B: &str = "10.99.0.2";

/// Whether the Debian programs are installed (they have no `--version`
/// to try); otherwise the skip rule.
#[track_caller]
pub fn installed(programs: &[&str]) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|p| !std::env::split_paths(&path).any(|d| d.join(p).is_file()))
        .collect();
    if missing.is_empty() {
        return true;
    }
    skip::skip(format!(
        "{} not installed (scripts/setup.sh installs the Debian packages)",
        missing.join(", ")
    ));
    false
}

/// Two namespaces joined by veth (A: server side, B: client side), or
/// `None` after the skip rule (no root, or the Debian programs missing).
#[track_caller]
pub fn veth(programs: &[&str]) -> Option<(Netns, Netns)> {
    if !installed(programs) {
        return None;
    }
    Netns::veth_pair(&format!("{A}/24"), &format!("{B}/24"))
}

/// `ndv run -- PROGRAM ARGS` inside `ns`.
pub fn ndv_run(ns: &Netns, program: &str, args: &[&str]) -> Command {
    let mut c = ns.command(NDV);
    c.args(["run", "--", program]).args(args);
    c
}

/// `ndv ARGS` inside `ns`.
pub fn ndv_tool(ns: &Netns, args: &[&str]) -> Command {
    let mut c = ns.command(NDV);
    c.args(args);
    c
}

/// Both ended well; panics with both outputs otherwise.
#[track_caller]
pub fn both_ok(c: &Finished, s: &Finished) -> (String, String) {
    let (tc, ts) = (c.text(), s.text());
    assert!(c.ok && s.ok, "client:\n{tc}\nserver:\n{ts}");
    (tc, ts)
}

/// The result rows of perftest output (a blank, then a digit), as numbers.
pub fn rows(out: &str) -> Vec<Vec<f64>> {
    out.lines()
        .filter(|l| l.starts_with(' ') && l[1..].starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            l.split_whitespace()
                .map(|w| w.parse().unwrap_or(f64::NAN))
                .collect()
        })
        .collect()
}

/// Waits until TCP `port` listens in `ns` (where `server` runs); fails the
/// test with the server's output when it takes too long.
#[track_caller]
pub fn wait_tcp_listening(ns: &Netns, port: u16, server: &Running) {
    let t0 = Instant::now();
    let needle = format!(":{port} ");
    loop {
        let out = ns.command("ss").args(["-ltnH"]).output().expect("ss");
        if String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.contains(&needle))
        {
            return;
        }
        assert!(
            t0.elapsed() < process::READY_LIMIT,
            "not listening on {port} after {:?}:\n{}",
            process::READY_LIMIT,
            server.output_so_far()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `server` (a program that listens on TCP `port` in `ns`), then
/// `client`: (client, server) outputs.
#[track_caller]
pub fn server_then_client(
    ns: &Netns,
    port: u16,
    server: &mut Command,
    client: &mut Command,
) -> (Finished, Finished) {
    let s = Running::spawn(server);
    wait_tcp_listening(ns, port, &s);
    let c = Running::spawn(client).wait(process::LIMIT);
    let s = s.wait(process::LIMIT);
    (c, s)
}

/// perftest measures its CPU clock before it reports and gives up when the
/// samples do not line up, which happens on a busy host; such a run says
/// nothing about the exchange and is tried again.
pub fn perftest_clock_failed(out: &str) -> bool {
    out.contains("Correlation coefficient r^2")
}

/// perftest `program` against Linux rxe in the guest, in both roles: rxe
/// serves (`theirs`: the guest's command line without a peer) and ours
/// (`ours`: its arguments without a peer) connects, then the reverse.
/// `check(output, role)` checks each side's output, `role` "client" or
/// "server". A round whose clock check failed ([`perftest_clock_failed`])
/// is run again, three rounds at most.
pub fn perftest_with_rxe(
    g: &Guest,
    program: &str,
    port: u16,
    ours: &[&str],
    theirs: &str,
    check: impl Fn(&str, &str),
) {
    for attempt in 1..=3 {
        let again = |ok: bool, out: &str| !ok && attempt < 3 && perftest_clock_failed(out);
        // rxe serves.
        let job = g.spawn(theirs);
        g.wait_listening(&job, Listen::Tcp(port));
        let c = Running::spawn(&mut ndv_run(g.netns(), program, &[ours, &[GUEST]].concat()))
            .wait(LIMIT);
        let (ok_g, out_g) = g.wait(job);
        if again(c.ok && ok_g, &(c.text() + &out_g)) {
            continue;
        }
        assert!(c.ok && ok_g, "ours:\n{}\nrxe:\n{out_g}", c.text());
        check(&c.text(), "client");
        check(&out_g, "server");
        // We serve.
        let server = Running::spawn(&mut ndv_run(g.netns(), program, ours));
        wait_tcp_listening(g.netns(), port, &server);
        let (ok_g, out_g) = g.run(&format!("{theirs} {HOST}"));
        let s = server.wait(LIMIT);
        if again(s.ok && ok_g, &(s.text() + &out_g)) {
            continue;
        }
        assert!(s.ok && ok_g, "ours:\n{}\nrxe:\n{out_g}", s.text());
        check(&out_g, "client");
        check(&s.text(), "server");
        return;
    }
}

/// An MPI launcher agent for the namespaces, called as ssh is (`AGENT
/// [OPTIONS] HOST COMMAND…`: Open MPI's rsh agent, MPICH's
/// `-launcher-exec`): runs COMMAND in the namespace that has HOST's
/// address, after `wrap` (nothing, or `ndv run --ucx --`), with
/// `LD_LIBRARY_PATH` removed as a login over ssh would. Written to `dir` as
/// `name`.
pub fn write_netns_agent(dir: &Path, name: &str, hosts: &[(&str, &Netns)], wrap: &str) -> PathBuf {
    let mut cases = String::new();
    for (addr, ns) in hosts {
        cases.push_str(&format!("    {addr}) ns={} ;;\n", ns.name()));
    }
    let script = format!(
        "#!/bin/sh\nwhile [ \"${{1#-}}\" != \"$1\" ]; do shift; done\nhost=$1\nshift\ncase $host in\n{cases}    *) echo \"no namespace for $host\" >&2; exit 1 ;;\nesac\nexec ip netns exec \"$ns\" env -u LD_LIBRARY_PATH {wrap} sh -c \"$*\"\n"
    );
    let path = dir.join(name);
    std::fs::write(&path, script).expect("agent script");
    let mut perm = std::fs::metadata(&path).expect("agent").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&path, perm).expect("chmod agent");
    path
}

/// What every Open MPI job between the two namespaces needs: remote
/// daemons started by `agent` (from [`write_netns_agent`]) in the other
/// namespace, the out-of-band exchange on the veth pair's subnet, root
/// allowed (namespaces need it, and Open MPI refuses root without these),
/// and no environment list inherited from the caller's environment.
pub fn open_mpi_between_namespaces(cmd: &mut Command, agent: &Path) {
    cmd.args(["--mca", "plm_rsh_agent"])
        .arg(agent)
        .args(["--mca", "oob_tcp_if_include", "10.99.0.0/24"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env_remove("OMPI_MCA_mca_base_env_list");
}

/// The pid `mpicheck`'s rank `rank` announced in `out`.
pub fn mpicheck_rank_pid(out: &str, rank: u32) -> Option<i32> {
    let prefix = format!("mpicheck: rank {rank} pid ");
    out.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|p| p.trim().parse().ok())
}

/// Kills `mpicheck`'s rank 1 with SIGKILL two seconds into `job` (started
/// with enough iterations to be in the middle of its transfers then): the
/// job must end in error within 30 s, neither hanging nor passing.
pub fn kill_rank_1_mid_job(mut job: Running) {
    job.wait_for_stderr("mpicheck: rank 1 pid ", process::READY_LIMIT)
        .unwrap_or_else(|e| panic!("rank 1 never started: {e}"));
    std::thread::sleep(Duration::from_secs(2));
    let pid = mpicheck_rank_pid(&job.output_so_far(), 1).expect("rank 1's pid");
    // SAFETY: kill(2) on the pid the rank announced, a process of this test.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill {pid}");
    let killed = Instant::now();
    let f = job.wait(LIMIT);
    assert!(
        !f.timed_out && !f.ok,
        "the job must end in error, not hang or pass:\n{}",
        f.text()
    );
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "the job took {:?} to end",
        killed.elapsed()
    );
}

/// `tests/mpi/mpicheck.c` built with the MPI compiler `mpicc` (Open MPI's
/// `mpicc`, MPICH's `mpicc.mpich`) and `flags` into `dir`.
pub fn build_mpicheck(dir: &Path, mpicc: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/mpicheck.c");
    let bin = dir.join("mpicheck");
    let out = Command::new(mpicc)
        .args(flags)
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("{mpicc}: {e}"));
    assert!(
        out.status.success(),
        "{mpicc} {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// The MPI job `f` of `ranks` ranks passed, and `mpicheck` said every check
/// did.
pub fn check_mpicheck_passed(f: &Finished, ranks: u32) {
    let out = f.text();
    assert!(f.ok, "the MPI job:\n{out}");
    let all_ok = format!("mpicheck ok ({ranks} ranks)");
    for line in [
        "allreduce ok",
        "bcast ok",
        "alltoall ok",
        "put/get ok",
        all_ok.as_str(),
    ] {
        assert!(out.lines().any(|l| l == line), "no {line:?} in:\n{out}");
    }
    assert!(!out.contains("FAIL"), "{out}");
}
