//! UCX 1.13 (Debian 12's `libucx0` and `ucx-utils`), unmodified, over
//! ndverbs through `ndv run --ucx`, between two network namespaces joined by
//! a veth pair:
//!
//! - what `--ucx` makes: `/dev/infiniband/uverbs<N>` and `rdma_cm` character
//!   devices, the GID type and interface files under
//!   `/sys/class/infiniband`, while the program still sees the host's `/dev`
//!   entries, `/sys/class/net` of its network namespace, its working
//!   directory and `/tmp`, and the host sees none of it;
//! - `ucx_info -d` lists our device's `rc_verbs` and `ud_verbs` transports
//!   with `--ucx`, and no ndverbs memory domain without it (UCX's
//!   `/dev/infiniband` gate is what the option answers);
//! - `ucx_perftest` from one namespace to the other, every iteration
//!   reported: over `rc_verbs`, short and zero-copy RDMA WRITE bandwidth
//!   (`put_bw`) and active-message latency (`am_lat`); over `ud_verbs`,
//!   active-message latency and bandwidth; and UCP (`tag_lat`, `tag_bw`,
//!   `ucp_am_bw`) with only our two transports allowed (`UCX_TLS`), and
//!   over `ud_verbs` alone;
//! - MPICH 4.0.2 (Debian's is `ch4:ucx`): `mpirun.mpich` under `ndv run
//!   --ucx` with one and with two ranks per namespace, the remote ones started by a
//!   launcher agent that enters the other namespace through `ndv run --ucx`
//!   (what `ssh HOST ndv run --ucx -- …` would be), running
//!   `tests/mpi/mpicheck.c` built with `mpicc.mpich`: every check passes
//!   over our transports only (`UCX_TLS=rc_verbs,ud_verbs`);
//! - Open MPI 4.1.4 with `--mca pml ucx` the same way, one rank per
//!   namespace, its rsh agent entering the other namespace through `ndv run
//!   --ucx`.
//!
//! The UCX runs are in the release section of `scripts/test.sh` (ignored in
//! the debug run), as the other programs' exchanges are.

mod programs;

use ndverbs_testkit::netns::Netns;
use ndverbs_testkit::process::{Running, LIMIT};
use programs::{
    both_ok, build_mpicheck, check_mpicheck_passed, kill_rank_1_mid_job, ndv_run,
    open_mpi_between_namespaces, veth, wait_tcp_listening, write_netns_agent, A, NDV,
};
use std::path::Path;

/// ucx_perftest's default TCP port for its exchange.
const PERFTEST_PORT: u16 = 13337;

/// `ndv run --ucx -- PROGRAM ARGS` inside `ns`.
fn ndv_run_ucx(ns: &Netns, program: &str, args: &[&str]) -> std::process::Command {
    let mut c = ns.command(NDV);
    c.args(["run", "--ucx", "--", program]).args(args);
    c
}

#[test]
fn run_ucx_adds_device_files_and_keeps_the_host_view() {
    let Some((a, _b)) = veth(&["sh"]) else {
        return;
    };
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ucx-view-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("host-file"), "from the host\n").unwrap();
    let host_dev_had_infiniband = Path::new("/dev/infiniband").exists();
    let script = "set -e
[ -c /dev/infiniband/uverbs0 ] && [ -r /dev/infiniband/uverbs0 ] && [ -w /dev/infiniband/uverbs0 ]
[ -c /dev/infiniband/rdma_cm ]
[ -c /dev/null ] && [ -e /dev/shm ] && [ -e /dev/pts/ptmx ]
echo types=$(cat /sys/class/infiniband/ndv0/ports/1/gid_attrs/types/0)
echo ndevs=$(cat /sys/class/infiniband/ndv0/ports/1/gid_attrs/ndevs/0)
echo ibdev=$(cat /sys/class/infiniband_verbs/uverbs0/ibdev)
[ -e /sys/class/net/veth0 ]
echo cwd=$(pwd)
cat host-file
echo written > from-inside
echo uid=$(id -u)
";
    let out = ndv_run_ucx(&a, "sh", &["-c", script])
        .current_dir(&dir)
        .output()
        .expect("ndv run --ucx sh");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    for want in [
        "types=RoCE v2\n",
        "ndevs=veth0\n",
        "ibdev=ndv0\n",
        &format!("cwd={}\n", dir.display()),
        "from the host\n",
        // SAFETY: no arguments.
        &format!("uid={}\n", unsafe { libc::geteuid() }),
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    // What the program wrote is on the host's disk; its mounts are not.
    assert_eq!(
        std::fs::read_to_string(dir.join("from-inside")).unwrap(),
        "written\n"
    );
    assert_eq!(
        Path::new("/dev/infiniband").exists(),
        host_dev_had_infiniband
    );
    let _ = std::fs::remove_dir_all(&dir);

    // Not root: the same through a user namespace, and the program runs
    // with the caller's own uid.
    if !programs::installed(&["setpriv"]) {
        return;
    }
    let mut c = a.command("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", NDV])
        .args(["run", "--ucx", "--", "sh", "-c"])
        .arg("set -e; [ -c /dev/infiniband/uverbs0 ]; echo > /dev/null; cat /sys/class/infiniband/ndv0/ports/1/gid_attrs/types/0; id -u")
        .current_dir("/");
    let out = c.output().expect("setpriv ndv run --ucx");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "as uid 65534:\n{text}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "RoCE v2\n65534\n");
}

#[test]
fn run_ucx_refuses_env() {
    let out = std::process::Command::new(NDV)
        .args(["run", "--ucx", "--env"])
        .output()
        .expect("ndv run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--ucx"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "release section of scripts/test.sh"]
fn ucx_info_lists_rc_and_ud_verbs_on_our_device() {
    let Some((a, _b)) = veth(&["ucx_info"]) else {
        return;
    };
    let out = ndv_run_ucx(&a, "ucx_info", &["-d"])
        .output()
        .expect("ucx_info");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ndv0 is the namespace's veth address (the lower ones come first).
    let md = text
        .split("# Memory domain: ")
        .find(|s| s.starts_with("ndv0\n"))
        .unwrap_or_else(|| panic!("no ndv0 memory domain:\n{text}"));
    for tl in ["rc_verbs", "ud_verbs"] {
        assert!(
            md.contains(&format!(
                "#      Transport: {tl}\n#         Device: ndv0:1\n"
            )),
            "no {tl} on ndv0:1:\n{md}"
        );
    }
    // Without the files, UCX passes our devices over.
    let out = ndv_run(&a, "ucx_info", &["-d"]).output().expect("ucx_info");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("# Memory domain: ndv"), "{text}");
}

/// ucx_perftest's `Final:` row: (iterations, the numbers after them).
fn final_row(out: &str) -> Option<(u64, Vec<f64>)> {
    let l = out.lines().find(|l| l.starts_with("Final:"))?;
    let mut w = l.split_whitespace().skip(1);
    let n = w.next()?.parse().ok()?;
    Some((n, w.filter_map(|v| v.parse().ok()).collect()))
}

/// `ucx_perftest ARGS` served in A, run from B, `iters` iterations; the
/// client's final row (iterations, then the seven measures).
fn perftest(a: &Netns, b: &Netns, args: &[&str], iters: u64) -> Vec<(u64, Vec<f64>)> {
    perftest_env(a, b, &[], args, iters)
}

/// [`perftest`] with `env` set on both sides.
fn perftest_env(
    a: &Netns,
    b: &Netns,
    env: &[(&str, &str)],
    args: &[&str],
    iters: u64,
) -> Vec<(u64, Vec<f64>)> {
    let n = iters.to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-n", &n]);
    let mut server = ndv_run_ucx(a, "ucx_perftest", &all);
    server.envs(env.iter().copied());
    let s = Running::spawn(&mut server);
    wait_tcp_listening(a, PERFTEST_PORT, &s);
    let client: Vec<&str> = [A].iter().copied().chain(all.iter().copied()).collect();
    let mut client = ndv_run_ucx(b, "ucx_perftest", &client);
    client.envs(env.iter().copied());
    let c = Running::spawn(&mut client).wait(LIMIT);
    let s = s.wait(LIMIT);
    let (tc, ts) = both_ok(&c, &s);
    let row = final_row(&tc).unwrap_or_else(|| panic!("no result for {args:?}:\n{tc}\n{ts}"));
    assert_eq!(row.0, iters, "{args:?}:\n{tc}");
    // Latencies (µs) and message rates (msg/s) are positive. The bandwidth
    // columns are MB/s to two decimals: small messages on a loaded machine
    // (under 1,250 8-byte messages a second) print 0.00 there.
    let m = &row.1;
    assert!(
        m.len() == 7
            && m.iter().all(|v| v.is_finite() && *v >= 0.0)
            && [0, 1, 2, 5, 6].iter().all(|&i| m[i] > 0.0),
        "{args:?}: {m:?}\n{tc}"
    );
    vec![row]
}

#[test]
#[ignore = "release section of scripts/test.sh"]
fn ucx_perftest_rc_verbs_between_namespaces() {
    let Some((a, b)) = veth(&["ucx_perftest"]) else {
        return;
    };
    let rc = ["-d", "ndv0:1", "-x", "rc_verbs"];
    // Short RDMA WRITEs (inline, 8 bytes), then zero-copy 64 KiB ones.
    perftest(
        &a,
        &b,
        &[&rc[..], &["-t", "put_bw", "-s", "8"]].concat(),
        20000,
    );
    let big = perftest(
        &a,
        &b,
        &[&rc[..], &["-t", "put_bw", "-s", "65536", "-D", "zcopy"]].concat(),
        2000,
    );
    // 64 KiB × 2000 went through: the bandwidth column is in MB/s.
    assert!(big[0].1[3] > 1.0, "{big:?}");
    // Active messages both ways (SENDs into UCX's SRQ).
    perftest(
        &a,
        &b,
        &[&rc[..], &["-t", "am_lat", "-s", "8"]].concat(),
        10000,
    );
}

#[test]
#[ignore = "release section of scripts/test.sh"]
fn ucx_perftest_ud_verbs_between_namespaces() {
    let Some((a, b)) = veth(&["ucx_perftest"]) else {
        return;
    };
    let ud = ["-d", "ndv0:1", "-x", "ud_verbs"];
    // UCX's reliable protocol over datagrams: every datagram's GRH area must
    // name this side's address for ud_verbs to take it.
    perftest(
        &a,
        &b,
        &[&ud[..], &["-t", "am_lat", "-s", "8"]].concat(),
        10000,
    );
    perftest(
        &a,
        &b,
        &[&ud[..], &["-t", "am_bw", "-s", "8"]].concat(),
        10000,
    );
}

#[test]
#[ignore = "release section of scripts/test.sh"]
fn ucx_perftest_ucp_between_namespaces() {
    let Some((a, b)) = veth(&["ucx_perftest"]) else {
        return;
    };
    // Our transports only (no TCP, no shared memory between the
    // namespaces): UCP wires up over ud_verbs and sends over both.
    let env = [
        ("UCX_TLS", "rc_verbs,ud_verbs"),
        ("UCX_NET_DEVICES", "ndv0:1"),
    ];
    perftest_env(&a, &b, &env, &["-t", "tag_lat", "-s", "8"], 10000);
    let bw = perftest_env(&a, &b, &env, &["-t", "tag_bw", "-s", "1048576"], 500);
    assert!(bw[0].1[3] > 1.0, "{bw:?}");
    perftest_env(&a, &b, &env, &["-t", "ucp_am_bw", "-s", "65536"], 2000);
    // UD alone carries UCP too.
    perftest_env(
        &a,
        &b,
        &[("UCX_TLS", "ud_verbs"), ("UCX_NET_DEVICES", "ndv0:1")],
        &["-t", "tag_lat", "-s", "8"],
        10000,
    );
}

#[test]
#[ignore = "release section of scripts/test.sh"]
fn mpich_over_ucx_one_rank_per_namespace() {
    let Some(h) = UcxMpiHosts::new(Mpi::Mpich) else {
        return;
    };
    check_mpicheck_passed(&Running::spawn(&mut h.mpirun(1, &[])).wait(LIMIT), 2);
}

/// Open MPI over UCX (`--mca pml ucx`), its remote rank's daemon started
/// by an rsh agent under `ndv run --ucx`: every check passes.
#[test]
#[ignore = "release section of scripts/test.sh"]
fn open_mpi_pml_ucx_one_rank_per_namespace() {
    let Some(h) = UcxMpiHosts::new(Mpi::OpenMpi) else {
        return;
    };
    check_mpicheck_passed(&Running::spawn(&mut h.mpirun(1, &["500"])).wait(LIMIT), 2);
}

/// Two ranks per namespace: the two processes of a host share its device
/// (`NDV_SHARE=1`; MPICH's launcher hands the environment to every rank);
/// ranks on one host talk through MPICH's shared memory, across hosts
/// through UCX on ndverbs.
#[test]
#[ignore = "release section of scripts/test.sh"]
fn mpich_over_ucx_two_ranks_per_namespace_share_the_device() {
    let Some(h) = UcxMpiHosts::new(Mpi::Mpich) else {
        return;
    };
    let mut cmd = h.mpirun(2, &[]);
    cmd.env("NDV_SHARE", "1");
    check_mpicheck_passed(&Running::spawn(&mut cmd).wait(LIMIT), 4);
}

/// A rank killed with SIGKILL in the middle of the transfers: the job ends
/// in error (UCX's peer failure, MPICH aborts the job), not a hang, and a
/// new job runs on the same addresses at once.
#[test]
#[ignore = "release section of scripts/test.sh"]
fn mpich_job_with_a_rank_killed_mid_transfer_ends_in_error_and_the_next_runs() {
    let Some(h) = UcxMpiHosts::new(Mpi::Mpich) else {
        return;
    };
    kill_rank_1_mid_job(Running::spawn(&mut h.mpirun(1, &["30000"])));
    check_mpicheck_passed(&Running::spawn(&mut h.mpirun(1, &["200"])).wait(LIMIT), 2);
}

/// The MPI implementation a job over UCX uses.
#[derive(Debug, Clone, Copy)]
enum Mpi {
    /// MPICH 4.0.2, `ch4:ucx`.
    Mpich,
    /// Open MPI 4.1.4 with `--mca pml ucx`.
    OpenMpi,
}

/// Two namespaces, `mpicheck` built with the MPI's compiler and the launcher
/// agent that starts remote ranks under `ndv run --ucx` in the other one.
struct UcxMpiHosts {
    mpi: Mpi,
    a: Netns,
    _b: Netns,
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
    agent: std::path::PathBuf,
}

impl UcxMpiHosts {
    fn new(mpi: Mpi) -> Option<UcxMpiHosts> {
        let (compiler, launcher, flags): (_, _, &[&str]) = match mpi {
            // Not -Wall: MPICH's MPI_STATUSES_IGNORE trips gcc's
            // -Wstringop-overflow on MPI_Waitall.
            Mpi::Mpich => ("mpicc.mpich", "mpirun.mpich", &["-O2"]),
            Mpi::OpenMpi => ("mpicc", "mpirun", &["-O2", "-Wall"]),
        };
        let (a, b) = veth(&[compiler, launcher, "ucx_info"])?;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{compiler}-ucx-{}-{}",
            std::process::id(),
            a.name()
        ));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let bin = build_mpicheck(&dir, compiler, flags);
        let agent = write_netns_agent(
            &dir,
            "ucx-agent.sh",
            &[(A, &a), (programs::B, &b)],
            &format!("{NDV} run --ucx --"),
        );
        Some(UcxMpiHosts {
            mpi,
            a,
            _b: b,
            dir,
            bin,
            agent,
        })
    }

    /// The MPI's launcher running `mpicheck args` with `per_host` ranks in
    /// each namespace, over our two UCX transports only.
    fn mpirun(&self, per_host: u32, args: &[&str]) -> std::process::Command {
        let hosts = format!("{A}:{per_host},{}:{per_host}", programs::B);
        let np = (2 * per_host).to_string();
        let mut cmd = match self.mpi {
            Mpi::Mpich => {
                let mut c = ndv_run_ucx(&self.a, "mpirun.mpich", &["-hosts", &hosts, "-np", &np]);
                c.args(["-iface", "veth0", "-launcher", "ssh", "-launcher-exec"])
                    .arg(&self.agent);
                c
            }
            Mpi::OpenMpi => {
                let mut c = ndv_run_ucx(
                    &self.a,
                    "mpirun",
                    &["--host", &hosts, "-np", &np, "--bind-to", "none"],
                );
                open_mpi_between_namespaces(&mut c, &self.agent);
                c.args(["--mca", "pml", "ucx"])
                    // (Debian's openmpi-mca-params.conf excludes osc ucx
                    // and pt2pt; pt2pt carries MPI_Put/Get as messages.)
                    .args(["--mca", "osc", "pt2pt"])
                    .args(["-x", "UCX_TLS", "-x", "UCX_NET_DEVICES"]);
                c
            }
        };
        cmd.arg(&self.bin).args(args).envs([
            ("UCX_TLS", "rc_verbs,ud_verbs"),
            ("UCX_NET_DEVICES", "ndv0:1"),
        ]);
        cmd
    }
}

impl Drop for UcxMpiHosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
