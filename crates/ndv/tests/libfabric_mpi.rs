//! libfabric 1.17 and Open MPI 4.1.4 (Debian 12's packages), unmodified,
//! over ndverbs through `ndv run`, between two network namespaces joined by
//! a veth pair (two "hosts", one process each; libfabric's verbs provider
//! ignores loopback interfaces, so a namespace's veth address is its device):
//!
//! - `fi_pingpong -p verbs -e msg` (verbs RC QPs over rdma_cm) and
//!   `fi_pingpong -p "verbs;ofi_rxm" -e rdm` (the reliable-datagram layer
//!   over them, with its rendezvous by RDMA READ for large messages), a
//!   small and a large message each, with fi_pingpong's own data check
//!   (`-c`); every message sent must be acknowledged on both sides. Both
//!   again over IPv6 (`-6`: the GIDs are the IPv6 addresses).
//! - Open MPI with `--mca pml cm --mca mtl ofi` and `FI_PROVIDER="verbs;ofi_rxm"`
//!   running `tests/mpi/mpicheck.c` (built here with `mpicc`): ping-pong
//!   latency and bandwidth, `MPI_Allreduce`, `MPI_Bcast`, `MPI_Alltoall`,
//!   `MPI_Put`/`MPI_Get`, every byte checked by the program. `ndv run --
//!   mpirun` starts it; the remote rank is launched by an rsh agent that
//!   enters the other namespace *without* `LD_LIBRARY_PATH`, as `ssh` would,
//!   so it reaches our libraries only through what `ndv run` tells Open MPI
//!   to forward (as its environment list, or as `-x` options when the
//!   command line has `-x`, which Open MPI does not let mix). With the
//!   system's libibverbs (no RDMA device) the `cm` PML cannot be selected
//!   and the job fails.
//! - A rank killed with SIGKILL mid-transfer: the job ends in error within
//!   seconds (no hang), and a new job runs at once on the same addresses.
//!
//! These run in the release section of `scripts/test.sh` (ignored in the
//! debug run): they measure nothing, but debug builds make Open MPI's
//! start-up and large transfers slow.

mod programs;

use ndverbs_testkit::netns::Netns;
use ndverbs_testkit::process::{Finished, Running, LIMIT};
use ndverbs_testkit::skip;
use programs::{
    both_ok, build_mpicheck, check_mpicheck_passed, kill_rank_1_mid_job, mpicheck_rank_pid,
    ndv_run, open_mpi_between_namespaces, veth, wait_tcp_listening, write_netns_agent, A, B,
};
use std::path::{Path, PathBuf};
use std::process::Command;

/// fi_pingpong's control port (its default), TCP in the server's namespace.
const CTRL_PORT: u16 = 47592;

/// fi_pingpong's result row for `size` bytes: (messages sent, acknowledged).
fn pingpong_row(out: &str, size: &str) -> Option<(u64, u64)> {
    out.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() < 8 || w[0] != size {
            return None;
        }
        let sent = w[1].parse().ok()?;
        let acked = w[2].strip_prefix('=')?.parse().ok()?;
        Some((sent, acked))
    })
}

/// fi_pingpong with `provider` and `endpoint` type from `b` to the server
/// in `a` at `server`, for each (size, fi_pingpong's spelling of it,
/// iterations); `extra` goes to both sides.
fn pingpong_runs(
    a: &Netns,
    b: &Netns,
    server: &str,
    provider: &str,
    endpoint: &str,
    runs: &[(&str, &str, &str)],
    extra: &[&str],
) {
    for &(size, shown, iters) in runs {
        let mut args = vec![
            "-p", provider, "-e", endpoint, "-S", size, "-I", iters, "-c",
        ];
        args.extend_from_slice(extra);
        let s = Running::spawn(&mut ndv_run(a, "fi_pingpong", &args));
        wait_tcp_listening(a, CTRL_PORT, &s);
        let client: Vec<&str> = args.iter().copied().chain([server]).collect();
        let c = Running::spawn(&mut ndv_run(b, "fi_pingpong", &client)).wait(LIMIT);
        let s = s.wait(LIMIT);
        let (tc, ts) = both_ok(&c, &s);
        let want: u64 = iters.parse().unwrap();
        for out in [&tc, &ts] {
            assert_eq!(
                pingpong_row(out, shown),
                Some((want, want)),
                "{provider} {endpoint} {size} B:\n{out}"
            );
        }
    }
}

/// fi_info lists our veth device for `provider` in the namespaces, then
/// fi_pingpong runs a small and a large message.
fn fi_pingpong(provider: &str, endpoint: &str) {
    let Some((a, b)) = veth(&["fi_pingpong", "fi_info"]) else {
        return;
    };
    // The provider lists our device in each namespace, and only the veth
    // address's (loopback interfaces are not libfabric's).
    let info = ndv_run(&a, "fi_info", &["-p", provider])
        .output()
        .expect("fi_info");
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(
        info.status.success() && text.contains(&format!("provider: {provider}\n")),
        "fi_info -p {provider}:\n{text}{}",
        String::from_utf8_lossy(&info.stderr)
    );
    assert!(text.contains("domain: ndv0\n"), "{text}");
    // ndv1 and ndv2 are the namespace's 127.0.0.1 and ::1: never a domain
    // for connections (their `-dgram` domains are listed: libfabric lists a
    // UD domain for every device with UD QPs, whatever its address).
    assert!(
        !text.contains("domain: ndv1\n") && !text.contains("domain: ndv2\n"),
        "{text}"
    );
    let runs = [("64", "64", "200"), ("1048576", "1m", "20")];
    pingpong_runs(&a, &b, A, provider, endpoint, &runs, &[]);
}

#[test]
#[ignore = "release section of scripts/test.sh"]
fn fi_pingpong_verbs_msg_between_namespaces() {
    fi_pingpong("verbs", "msg");
}

#[test]
#[ignore = "release section of scripts/test.sh"]
fn fi_pingpong_verbs_rxm_rdm_between_namespaces() {
    fi_pingpong("verbs;ofi_rxm", "rdm");
}

#[test]
#[ignore = "release section of scripts/test.sh"]
fn fi_pingpong_both_modes_over_ipv6() {
    if !programs::installed(&["fi_pingpong"]) {
        return;
    }
    let (a_ip, b_ip) = ndverbs_testkit::addr::pair_v6();
    let Some((a, b)) = Netns::veth_pair(&format!("{a_ip}/64"), &format!("{b_ip}/64")) else {
        return;
    };
    let server = a_ip.to_string();
    let runs = [("65536", "64k", "50")];
    pingpong_runs(&a, &b, &server, "verbs", "msg", &runs, &["-6"]);
    pingpong_runs(&a, &b, &server, "verbs;ofi_rxm", "rdm", &runs, &["-6"]);
}

/// The number after `prefix` on a line of `out`.
fn value_after(out: &str, prefix: &str) -> Option<f64> {
    out.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Two namespaces with `slots` MPI slots each, `mpicheck` built, Open
/// MPI's agent and hostfile written; the scratch directory goes with it.
struct MpiHosts {
    slots: u32,
    a: Netns,
    _b: Netns,
    dir: PathBuf,
    bin: PathBuf,
    agent: PathBuf,
    hostfile: PathBuf,
}

impl MpiHosts {
    /// The set-up, or `None` after the skip rule.
    fn new(slots: u32) -> Option<MpiHosts> {
        if !skip::require_tools(&["mpicc", "mpirun"]) {
            return None;
        }
        let (a, b) = veth(&["fi_info"])?;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "mpi-{}-{}",
            std::process::id(),
            a.name()
        ));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let bin = build_mpicheck(&dir, "mpicc", &["-O2", "-Wall"]);
        let agent = write_netns_agent(&dir, "netns-agent.sh", &[(A, &a), (B, &b)], "");
        let hostfile = dir.join("hosts");
        std::fs::write(&hostfile, format!("{A} slots={slots}\n{B} slots={slots}\n"))
            .expect("hostfile");
        Some(MpiHosts {
            slots,
            a,
            _b: b,
            dir,
            bin,
            agent,
            hostfile,
        })
    }

    /// `ndv run -- mpirun … mpicheck ARGS` in namespace A, every slot a
    /// rank.
    fn mpirun(&self, args: &[&str]) -> Command {
        self.mpirun_with(&[], args)
    }

    /// [`MpiHosts::mpirun`] with `opts` first on mpirun's command line.
    fn mpirun_with(&self, opts: &[&str], args: &[&str]) -> Command {
        let mut cmd = ndv_run(&self.a, "mpirun", opts);
        let ranks = (2 * self.slots).to_string();
        cmd.args(["--hostfile"])
            .arg(&self.hostfile)
            .args(["-np", &ranks, "--bind-to", "none"]);
        open_mpi_between_namespaces(&mut cmd, &self.agent);
        cmd.args([
            "--mca",
            "pml",
            "cm",
            "--mca",
            "mtl",
            "ofi",
            "--mca",
            "mtl_ofi_provider_include",
            "verbs;ofi_rxm",
            "--mca",
            "btl",
            "self",
            // One-sided operations as messages through the cm PML (and
            // so through libfabric): Debian's openmpi-mca-params.conf
            // excludes osc pt2pt (as it excludes mtl ofi), and the
            // default left (osc rdma) needs a BTL with RDMA, which
            // btl ofi refuses to be over ofi_rxm.
            "--mca",
            "osc",
            "pt2pt",
        ])
        .arg(&self.bin)
        .args(args)
        .env("FI_PROVIDER", "verbs;ofi_rxm");
        cmd
    }
}

impl Drop for MpiHosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Checks a finished `mpicheck` job of `ranks` ranks: every check
/// reported, no failure, positive measurements.
#[track_caller]
fn check_mpicheck(f: &Finished, ranks: u32) {
    check_mpicheck_passed(f, ranks);
    let out = f.text();
    let lat = value_after(&out, "latency 8 B: ").expect("8-byte latency");
    let bw = value_after(&out, "bandwidth 1048576 B: ").expect("1 MiB bandwidth");
    assert!(lat > 0.0 && lat.is_finite(), "{out}");
    assert!(bw > 0.0 && bw.is_finite(), "{out}");
}

#[test]
#[ignore = "release section of scripts/test.sh"]
fn open_mpi_cm_ofi_verbs_rxm_one_rank_per_namespace() {
    let Some(h) = MpiHosts::new(1) else {
        return;
    };
    check_mpicheck(&Running::spawn(&mut h.mpirun(&["500"])).wait(LIMIT), 2);
    // With `-x` on the command line Open MPI refuses the environment list
    // `ndv run` sets; the library path must reach the remote rank anyway.
    let mut x = h.mpirun_with(&["-x", "FI_PROVIDER"], &["100"]);
    check_mpicheck(&Running::spawn(&mut x).wait(LIMIT), 2);
}

/// Two ranks per namespace: the two processes of a host share its devices
/// (`NDV_SHARE=1`, which `ndv run` passes on to the remote ranks), and
/// ranks 0 and 1 ping-pong between processes on one address.
#[test]
#[ignore = "release section of scripts/test.sh"]
fn open_mpi_two_ranks_per_namespace_share_the_devices() {
    let Some(h) = MpiHosts::new(2) else {
        return;
    };
    let mut cmd = h.mpirun(&["200"]);
    cmd.env("NDV_SHARE", "1");
    check_mpicheck(&Running::spawn(&mut cmd).wait(LIMIT), 4);
}

#[test]
#[ignore = "release section of scripts/test.sh"]
fn open_mpi_job_with_a_rank_killed_mid_transfer_ends_in_error_and_the_next_runs() {
    let Some(h) = MpiHosts::new(1) else {
        return;
    };
    // Long enough to be killed in the middle: about a second of 8-byte
    // ping-pongs, then 3000 of 1 MiB (rendezvous RDMA READs), for seconds.
    kill_rank_1_mid_job(Running::spawn(&mut h.mpirun(&["30000"])));
    // The killed rank's address is free at once: a new job runs there.
    check_mpicheck(&Running::spawn(&mut h.mpirun(&["200"])).wait(LIMIT), 2);
}

#[test]
fn fi_pingpong_rows_and_mpicheck_values_parse() {
    let out = "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n\
               1m      20      =20      40m         0.10s    400.00    2621.44       0.00\n";
    assert_eq!(pingpong_row(out, "1m"), Some((20, 20)));
    assert_eq!(pingpong_row(out, "64"), None);
    assert_eq!(pingpong_row("1m 20 -3 40m 0.1s 1 2 3", "1m"), None);
    let m = "latency 8 B: 12.50 us (median 11.00 us)\n\
             bandwidth 1048576 B: 2345.67 MB/s (median window 2400.00 MB/s)\n";
    assert_eq!(value_after(m, "latency 8 B: "), Some(12.5));
    assert_eq!(value_after(m, "bandwidth 1048576 B: "), Some(2345.67));
    assert_eq!(value_after(m, "latency 64 B: "), None);
    let r = "mpicheck: rank 0 pid 17\nmpicheck: rank 1 pid 4242\n";
    assert_eq!(mpicheck_rank_pid(r, 1), Some(4242));
    assert_eq!(mpicheck_rank_pid(r, 2), None);
}
