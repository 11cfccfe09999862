//! Debian 12's rdma_cm programs, unmodified, over ndverbs through `ndv run`
//! (the `ndverbs-cabi` libraries, librdmacm included): `rping` (also with
//! `-q`, its own QP moved by itself), `ucmatose`,
//! `rdma_server`/`rdma_client`, `cmtime`, `udaddy` (UD over rdma_cm's UDP
//! port space: SIDR) and perftest's eight tests with
//! `-R` — each against itself between two network namespaces joined by a
//! veth pair, against ndv's own tools where one speaks its protocol
//! (`ndv ping` is rping, `ndv perf -R` is perftest's rdma_cm mode), and
//! against Linux rxe in the interop guest in both roles. Exit statuses and
//! result lines are checked; one rping exchange with rxe is captured and
//! checked packet by packet with `ndv decode` and tshark, and the udaddy
//! exchanges' SIDR_REQ/SIDR_REP are compared field by field with rxe's.
//!
//! Our servers listen on rdma_cm ports, which show nowhere in `ss`: a
//! server counts as ready once its engine has bound UDP 4791 on its address
//! (the engine opens when the program binds or listens, just before the
//! listen itself) and a short settling pause has passed.
//!
//! perftest 4.5's `-R` client connects its test QP right after the
//! exchange connection, racing the server's second listen; the library
//! sends a REQ that finds no listener again for a while (`rdmacm::conn`),
//! so the client waits for a slow server. A run that fails for perftest's
//! own reasons anyway (its CPU clock check on a busy host, or its broken
//! retry) is tried again.

mod programs;

mod pcapcheck;

use ndverbs_testkit::guest::{Guest, Listen, GUEST, HOST};
use ndverbs_testkit::netns::Netns;
use ndverbs_testkit::process::{self, Finished, Running, LIMIT};
use ndverbs_testkit::rping;
use programs::{both_ok, installed, ndv_run, ndv_tool, rows, veth, A, B, NDV};
use std::process::Command;
use std::time::{Duration, Instant};

const PINGS: [&str; 3] = [
    "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr",
    "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs",
    "rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrst",
];

/// The guest, or `None` after the skip rule.
#[track_caller]
fn guest(programs: &[&str]) -> Option<Guest> {
    if !installed(programs) {
        return None;
    }
    Guest::get()
}

/// Waits until a server in `ns` has bound UDP 4791 on `addr` (see the
/// module docs), then lets it reach its listen; fails the test with the
/// server's output when it exits first or takes too long.
#[track_caller]
fn wait_rdma_listening(ns: &Netns, addr: &str, server: &Running) {
    let t0 = Instant::now();
    let needle = format!("{addr}:4791 ");
    loop {
        let out = ns.command("ss").args(["-lunH"]).output().expect("ss");
        if String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.contains(&needle))
        {
            std::thread::sleep(Duration::from_millis(300));
            return;
        }
        assert!(
            t0.elapsed() < process::READY_LIMIT,
            "no engine on {addr} after {:?}:\n{}",
            process::READY_LIMIT,
            server.output_so_far()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `server` in `ns` (serving on `addr`), then `client`: (client,
/// server) outputs.
#[track_caller]
fn server_then_client(
    ns: &Netns,
    addr: &str,
    server: &mut Command,
    client: &mut Command,
) -> (Finished, Finished) {
    let s = Running::spawn(server);
    wait_rdma_listening(ns, addr, &s);
    let c = Running::spawn(client).wait(LIMIT);
    let s = s.wait(LIMIT);
    (c, s)
}

/// Both sides (rping, or ndv ping) ended well ([`rping::ended_well`]);
/// panics with both outputs otherwise.
#[track_caller]
fn rpings_ok(c: &Finished, s: &Finished) -> (String, String) {
    let (tc, ts) = (c.text(), s.text());
    assert!(
        rping::ended_well(c.ok, &tc) && rping::ended_well(s.ok, &ts),
        "client:\n{tc}\nserver:\n{ts}"
    );
    (tc, ts)
}

/// Our rping and rxe's (in the guest: success, output) ended well
/// ([`rping::ended_well`]): ours' output; panics with both otherwise.
#[track_caller]
fn rpings_ok_with_rxe(ours: &Finished, ok_g: bool, out_g: &str) -> String {
    let t = ours.text();
    assert!(
        rping::ended_well(ours.ok, &t) && rping::ended_well(ok_g, out_g),
        "ours:\n{t}\nrxe:\n{out_g}"
    );
    t
}

#[track_caller]
fn check_pings(out: &str, prefix: &str) {
    for p in PINGS {
        assert!(
            out.contains(&format!("{prefix}{p}")),
            "missing {prefix}{p} in:\n{out}"
        );
    }
}

/// A perftest run that failed for perftest's own reasons (see the module
/// docs): its CPU clock check on a busy host, its broken retry, or a
/// Linux client whose REQ beat our server's second listen (rejected for
/// want of a listener, reason 8): worth another try.
fn perftest_flaked(out: &str) -> bool {
    out.contains("Correlation coefficient r^2")
        || out.contains("Failed to destroy RDMA CM ID")
        || out.contains("RDMA_CM_EVENT_REJECTED; error: 8.")
}

/// perftest's result row for `ib_<t>` with 200 iterations on `side`.
#[track_caller]
fn check_perftest(t: &str, out: &str, side: &str) {
    let r = rows(out);
    // READ/atomic latency servers are passive and print no result.
    if side == "server" && (t == "read_lat" || t == "atomic_lat") {
        assert!(r.is_empty(), "{out}");
        return;
    }
    assert_eq!(r.len(), 1, "{side}:\n{out}");
    let size = if t.starts_with("atomic") {
        8.0
    } else if t.ends_with("lat") {
        2.0
    } else {
        65536.0
    };
    assert_eq!(&r[0][..2], &[size, 200.0], "{side}:\n{out}");
    if t.ends_with("bw") {
        assert!(r[0][3] > 0.0, "{side}:\n{out}");
    } else {
        assert!(
            r[0][2] > 0.0 && r[0][2] <= r[0][4] && r[0][4] <= r[0][3],
            "{side}:\n{out}"
        );
    }
}

// ---- Against themselves and ndv's tools, between two namespaces ------------

#[test]
fn rping_itself_over_veth_bound_and_wildcard_server() {
    let Some((a, b)) = veth(&["rping"]) else {
        return;
    };
    // Bound to the veth address.
    let (c, s) = server_then_client(
        &a,
        A,
        &mut ndv_run(&a, "rping", &["-s", "-a", A, "-p", "7401", "-C", "3", "-v"]),
        &mut ndv_run(
            &b,
            "rping",
            &["-c", "-a", A, "-p", "7401", "-C", "3", "-v", "-V"],
        ),
    );
    let (tc, ts) = rpings_ok(&c, &s);
    check_pings(&tc, "ping data: ");
    check_pings(&ts, "server ping data: ");
    // Bound to nothing: listens on every device (lo and the veth), and the
    // request's id gets the veth device.
    let (c, s) = server_then_client(
        &a,
        A,
        &mut ndv_run(&a, "rping", &["-s", "-p", "7402", "-C", "3", "-v"]),
        &mut ndv_run(
            &b,
            "rping",
            &["-c", "-a", A, "-p", "7402", "-C", "3", "-v", "-V"],
        ),
    );
    let (tc, ts) = rpings_ok(&c, &s);
    check_pings(&tc, "ping data: ");
    check_pings(&ts, "server ping data: ");
}

/// `rping -q`: each side creates its QP with `ibv_create_qp`, names it in
/// `conn_param->qp_num` and moves it itself with `rdma_init_qp_attr` (the
/// server before `rdma_accept`, the client on `CONNECT_RESPONSE`, then
/// `rdma_establish`); against itself, and against a plain rping both ways.
#[test]
fn rping_self_created_qp_itself_and_with_a_plain_rping() {
    let Some((a, b)) = veth(&["rping"]) else {
        return;
    };
    for (port, server_q, client_q) in [
        ("7408", true, true),
        ("7409", true, false),
        ("7410", false, true),
    ] {
        let mut server = vec!["-s", "-a", A, "-p", port, "-C", "3", "-v"];
        let mut client = vec!["-c", "-a", A, "-p", port, "-C", "3", "-v", "-V"];
        if server_q {
            server.push("-q");
        }
        if client_q {
            client.push("-q");
        }
        let (c, s) = server_then_client(
            &a,
            A,
            &mut ndv_run(&a, "rping", &server),
            &mut ndv_run(&b, "rping", &client),
        );
        let (tc, ts) = rpings_ok(&c, &s);
        check_pings(&tc, "ping data: ");
        check_pings(&ts, "server ping data: ");
    }
}

#[test]
fn rping_against_ndv_ping_both_roles() {
    let Some((a, b)) = veth(&["rping"]) else {
        return;
    };
    let (c, s) = server_then_client(
        &a,
        A,
        &mut ndv_tool(&a, &["ping", "-s", "-a", A, "-p", "7403", "-C", "3", "-v"]),
        &mut ndv_run(
            &b,
            "rping",
            &["-c", "-a", A, "-p", "7403", "-C", "3", "-v", "-V"],
        ),
    );
    let (tc, ts) = rpings_ok(&c, &s);
    check_pings(&tc, "ping data: ");
    check_pings(&ts, "server ping data: ");
    let (c, s) = server_then_client(
        &a,
        A,
        &mut ndv_run(&a, "rping", &["-s", "-a", A, "-p", "7404", "-C", "3", "-v"]),
        &mut ndv_tool(
            &b,
            &["ping", "-c", "-a", A, "-p", "7404", "-C", "3", "-v", "-V"],
        ),
    );
    let (tc, ts) = rpings_ok(&c, &s);
    check_pings(&tc, "ping data: ");
    check_pings(&ts, "server ping data: ");
}

/// ucmatose's two ends finished their transfers and disconnects.
#[track_caller]
fn check_ucmatose(tc: &str, ts: &str) {
    for out in [tc, ts] {
        assert!(
            out.contains("test complete") && out.contains("return status 0"),
            "{out}"
        );
    }
    assert!(ts.contains("data transfers complete"), "{ts}");
}

#[test]
fn ucmatose_itself_over_veth_with_several_connections() {
    let Some((a, b)) = veth(&["ucmatose"]) else {
        return;
    };
    let (c, s) = server_then_client(
        &a,
        A,
        &mut ndv_run(&a, "ucmatose", &["-p", "7405", "-c", "4", "-C", "10"]),
        &mut ndv_run(
            &b,
            "ucmatose",
            &["-s", A, "-p", "7405", "-c", "4", "-C", "10"],
        ),
    );
    let (tc, ts) = both_ok(&c, &s);
    check_ucmatose(&tc, &ts);
}

#[test]
fn rdma_server_and_rdma_client_over_veth() {
    let Some((a, b)) = veth(&["rdma_server", "rdma_client"]) else {
        return;
    };
    let (c, s) = server_then_client(
        &a,
        A,
        &mut ndv_run(&a, "rdma_server", &["-p", "7406"]),
        &mut ndv_run(&b, "rdma_client", &["-s", A, "-p", "7406"]),
    );
    let (tc, ts) = both_ok(&c, &s);
    assert!(tc.contains("rdma_client: end 0"), "{tc}");
    assert!(ts.contains("rdma_server: end 0"), "{ts}");
}

/// cmtime's client table: every step timed, for `n` connections.
#[track_caller]
fn check_cmtime(out: &str) {
    for step in [
        "create id",
        "resolve addr",
        "resolve route",
        "create qp",
        "connect",
        "disconnect",
        "destroy",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(step) && l.contains(':'))
            .unwrap_or_else(|| panic!("no {step} row:\n{out}"));
        let v: Vec<f64> = line
            .split(':')
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .map(|w| w.parse().unwrap_or(f64::NAN))
            .collect();
        assert!(v.len() == 4 && v.iter().all(|x| x.is_finite()), "{line}");
    }
}

#[test]
fn cmtime_itself_over_veth() {
    let Some((a, b)) = veth(&["cmtime"]) else {
        return;
    };
    // The server serves until killed.
    let s = Running::spawn(&mut ndv_run(&a, "cmtime", &["-p", "7407"]));
    wait_rdma_listening(&a, A, &s);
    let c = Running::spawn(&mut ndv_run(
        &b,
        "cmtime",
        &["-s", A, "-p", "7407", "-c", "50"],
    ))
    .wait(LIMIT);
    let s = s.kill();
    assert!(c.ok, "client:\n{}\nserver:\n{}", c.text(), s.text());
    check_cmtime(&c.text());
}

/// `ib_<t> -R` between the namespaces: against itself, then against
/// `ndv perf <t> -R` in both roles.
fn perftest_rdma_cm_three_ways(t: &str, port: u16) {
    let program = format!("ib_{t}");
    let Some((a, b)) = veth(&[&program]) else {
        return;
    };
    let ports: Vec<String> = (0..3).map(|i| (port + i).to_string()).collect();
    let ours = |p: &str| -> Vec<String> {
        ["-R", "-d", "ndv0", "-n", "200", "-p", p]
            .map(String::from)
            .to_vec()
    };
    let ndv = |p: &str| -> Vec<String> {
        ["perf", t, "-R", "-n", "200", "-p", p]
            .map(String::from)
            .to_vec()
    };
    let strs = |v: &[String]| v.iter().map(String::as_str).collect::<Vec<_>>().join(" ");
    for (i, (server, client)) in [
        (ours(&ports[0]), ours(&ports[0])),
        (ndv(&ports[1]), ours(&ports[1])),
        (ours(&ports[2]), ndv(&ports[2])),
    ]
    .into_iter()
    .enumerate()
    {
        let cmd = |ns: &Netns, args: &[String], client: bool| {
            let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
            if client {
                a.push(A);
            }
            if a[0] == "perf" {
                ndv_tool(ns, &a)
            } else {
                ndv_run(ns, &program, &a)
            }
        };
        for attempt in 1..=3 {
            let (c, s) = server_then_client(
                &a,
                A,
                &mut cmd(&a, &server, false),
                &mut cmd(&b, &client, true),
            );
            let (tc, ts) = (c.text(), s.text());
            if !(c.ok && s.ok) && attempt < 3 && perftest_flaked(&(tc.clone() + &ts)) {
                eprintln!(
                    "{program} ({}): perftest's own failure; again",
                    strs(&server)
                );
                continue;
            }
            let (tc, ts) = both_ok(&c, &s);
            check_perftest(t, &tc, "client");
            check_perftest(t, &ts, "server");
            // perftest's own ends say they used rdma_cm.
            if i != 1 {
                assert!(ts.contains(" Data ex. method : rdma_cm"), "{ts}");
            }
            if i != 2 {
                assert!(tc.contains(" Data ex. method : rdma_cm"), "{tc}");
            }
            break;
        }
    }
}

#[test]
fn ib_send_bw_rdma_cm_itself_and_ndv_perf() {
    perftest_rdma_cm_three_ways("send_bw", 18701);
}

#[test]
fn ib_write_bw_rdma_cm_itself_and_ndv_perf() {
    perftest_rdma_cm_three_ways("write_bw", 18704);
}

#[test]
fn ib_read_bw_rdma_cm_itself_and_ndv_perf() {
    perftest_rdma_cm_three_ways("read_bw", 18707);
}

#[test]
fn ib_atomic_bw_rdma_cm_itself_and_ndv_perf() {
    perftest_rdma_cm_three_ways("atomic_bw", 18710);
}

#[test]
fn ib_send_lat_rdma_cm_itself_and_ndv_perf() {
    perftest_rdma_cm_three_ways("send_lat", 18713);
}

#[test]
fn ib_write_lat_rdma_cm_itself_and_ndv_perf() {
    perftest_rdma_cm_three_ways("write_lat", 18716);
}

#[test]
fn ib_read_lat_rdma_cm_itself_and_ndv_perf() {
    perftest_rdma_cm_three_ways("read_lat", 18719);
}

#[test]
fn ib_atomic_lat_rdma_cm_itself_and_ndv_perf() {
    perftest_rdma_cm_three_ways("atomic_lat", 18722);
}

/// What `udaddy` prints on a side whose datagrams all arrived.
#[track_caller]
fn check_udaddy(out: &str) {
    assert!(out.contains("data transfers complete"), "{out}");
    assert!(out.contains("return status 0"), "{out}");
}

#[test]
fn udaddy_itself_over_veth_bound_and_wildcard_server() {
    let Some((a, b)) = veth(&["udaddy"]) else {
        return;
    };
    // udaddy always uses rdma_cm UDP port 7174 (its -p is the port space).
    // Bound to the veth address, then bound to nothing (every device), two
    // ids (SIDR requests) at once.
    for (server, conns) in [(vec!["-b", A], "1"), (vec![], "2")] {
        let server: Vec<&str> = server.into_iter().chain(["-c", conns]).collect();
        let (c, s) = server_then_client(
            &a,
            A,
            &mut ndv_run(&a, "udaddy", &server),
            &mut ndv_run(&b, "udaddy", &["-s", A, "-b", B, "-c", conns]),
        );
        let (tc, ts) = both_ok(&c, &s);
        check_udaddy(&tc);
        check_udaddy(&ts);
        assert!(tc.contains("initiating data transfers"), "{tc}");
        assert!(ts.contains("sending replies"), "{ts}");
    }
}

#[test]
fn udaddy_itself_over_ipv6_veth() {
    if !installed(&["udaddy"]) {
        return;
    }
    let (a6, b6) = ndverbs_testkit::addr::pair_v6();
    let Some((a, b)) = Netns::veth_pair(&format!("{a6}/64"), &format!("{b6}/64")) else {
        return;
    };
    // The rdma_cm header of the SIDR_REQ says IPv6 (0x60), and the
    // ESTABLISHED event's address handle names the server's IPv6 GID.
    let (sa, sb) = (a6.to_string(), b6.to_string());
    let (c, s) = server_then_client(
        &a,
        &format!("[{sa}]"),
        &mut ndv_run(&a, "udaddy", &["-b", &sa]),
        &mut ndv_run(&b, "udaddy", &["-s", &sa, "-b", &sb]),
    );
    let (tc, ts) = both_ok(&c, &s);
    check_udaddy(&tc);
    check_udaddy(&ts);
}

#[test]
fn udaddy_without_a_udp_listener_is_unreachable_with_status_1() {
    let Some((a, b)) = veth(&["udaddy", "rping"]) else {
        return;
    };
    // An rping server holds rdma_cm TCP port 7174 on A: the engine is up,
    // but nothing listens on UDP 7174, so the SIDR_REP says status 1
    // (IB_SIDR_UNSUPPORTED), reported as the kernel's rdma_cm does.
    let server = Running::spawn(&mut ndv_run(&a, "rping", &["-s", "-a", A, "-p", "7174"]));
    wait_rdma_listening(&a, A, &server);
    let c = Running::spawn(&mut ndv_run(&b, "udaddy", &["-s", A, "-b", B])).wait(LIMIT);
    server.kill();
    let out = c.text();
    assert!(!c.ok, "{out}");
    assert!(
        out.contains("udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1"),
        "{out}"
    );
}

// ---- Against Linux rxe in the interop guest --------------------------------

/// `server` (a program in the guest, listening on rdma_cm `port`) against
/// `client` (ours, in the guest's namespace): (ours, theirs) outputs.
#[track_caller]
fn rxe_serves(
    g: &Guest,
    server: &str,
    port: u16,
    program: &str,
    client: &[&str],
) -> (Finished, (bool, String)) {
    let job = g.spawn(&format!("timeout 90 {server}"));
    g.wait_listening(&job, Listen::RdmaCm(port));
    let c = Running::spawn(&mut ndv_run(g.netns(), program, client)).wait(LIMIT);
    (c, g.wait(job))
}

/// `server` (ours) against `client` (a command in the guest).
#[track_caller]
fn we_serve(g: &Guest, program: &str, server: &[&str], client: &str) -> (Finished, (bool, String)) {
    let s = Running::spawn(&mut ndv_run(g.netns(), program, server));
    wait_rdma_listening(g.netns(), HOST, &s);
    let theirs = g.run(&format!("timeout 90 {client}"));
    (s.wait(LIMIT), theirs)
}

#[test]
fn rping_against_rxe_both_roles() {
    let Some(g) = guest(&["rping"]) else { return };
    let (c, (ok_g, out_g)) = rxe_serves(
        &g,
        &format!("rping -s -a {GUEST} -p 7411 -C 3 -v"),
        7411,
        "rping",
        &["-c", "-a", GUEST, "-p", "7411", "-C", "3", "-v", "-V"],
    );
    let tc = rpings_ok_with_rxe(&c, ok_g, &out_g);
    check_pings(&tc, "ping data: ");
    check_pings(&out_g, "server ping data: ");
    let (s, (ok_g, out_g)) = we_serve(
        &g,
        "rping",
        &["-s", "-a", HOST, "-p", "7412", "-C", "3", "-v"],
        &format!("rping -c -a {HOST} -p 7412 -C 3 -v -V"),
    );
    let ts = rpings_ok_with_rxe(&s, ok_g, &out_g);
    check_pings(&ts, "server ping data: ");
    check_pings(&out_g, "ping data: ");
}

/// `rping -q` (each side's own QP, moved by itself) against rxe's: the
/// kernel's rdma_cm hands out the attributes on its side, ours on ours.
#[test]
fn rping_self_created_qp_against_rxe_both_roles() {
    let Some(g) = guest(&["rping"]) else { return };
    let (c, (ok_g, out_g)) = rxe_serves(
        &g,
        &format!("rping -s -q -a {GUEST} -p 7423 -C 3 -v"),
        7423,
        "rping",
        &["-c", "-q", "-a", GUEST, "-p", "7423", "-C", "3", "-v", "-V"],
    );
    let tc = rpings_ok_with_rxe(&c, ok_g, &out_g);
    check_pings(&tc, "ping data: ");
    check_pings(&out_g, "server ping data: ");
    let (s, (ok_g, out_g)) = we_serve(
        &g,
        "rping",
        &["-s", "-q", "-a", HOST, "-p", "7424", "-C", "3", "-v"],
        &format!("rping -c -q -a {HOST} -p 7424 -C 3 -v -V"),
    );
    let ts = rpings_ok_with_rxe(&s, ok_g, &out_g);
    check_pings(&ts, "server ping data: ");
    check_pings(&out_g, "ping data: ");
}

/// rping from us to rxe, captured by our library (`NDV_PCAP`) and by
/// tcpdump on the link: both hold the rdma_cm exchange (REQ, REP, RTU,
/// DREQ, and on the wire the DREP) and the SEND/READ/WRITE traffic with
/// every ICRC valid, and tshark dissects every frame of ours as RoCE with
/// `ndv decode`'s field values.
#[test]
fn rping_against_rxe_captured_and_decoded() {
    let Some(g) = guest(&["rping"]) else { return };
    let dir = std::env::temp_dir();
    let ours = dir.join(format!("ndv-rdmacm-rping-ours-{}.pcap", std::process::id()));
    let wire = dir.join(format!("ndv-rdmacm-rping-wire-{}.pcap", std::process::id()));
    let capture = g.capture(&wire, &["udp", "port", "4791"]);
    let job = g.spawn(&format!("timeout 90 rping -s -a {GUEST} -p 7413 -C 3 -v"));
    g.wait_listening(&job, Listen::RdmaCm(7413));
    let c = Running::spawn(
        ndv_run(
            g.netns(),
            "rping",
            &["-c", "-a", GUEST, "-p", "7413", "-C", "3", "-v", "-V"],
        )
        .env("NDV_PCAP", &ours),
    )
    .wait(LIMIT);
    let (ok_g, out_g) = g.wait(job);
    capture.stop();
    let tc = rpings_ok_with_rxe(&c, ok_g, &out_g);
    check_pings(&tc, "ping data: ");
    // Ours: ndv decode and tshark agree on every frame (pcapcheck).
    let s = pcapcheck::check(&ours);
    let cm_ours = s.cm.clone();
    let ops_ours = s.opcodes.clone();
    // The wire: tcpdump sees our packets before the UDP checksum is filled
    // in (offload), so only `ndv decode` reads it — every ICRC valid.
    let (cm_wire, ops_wire) = decode(&wire);
    // rping exits right after its DREQ: the DREP reaches the wire (and the
    // guest's kernel), not our capture.
    for (cm, drep, what) in [(&cm_ours, false, "ours"), (&cm_wire, true, "the wire")] {
        let mut want = vec![
            format!("{HOST}>REQ"),
            format!("{GUEST}>REP"),
            format!("{HOST}>RTU"),
            format!("{HOST}>DREQ"),
        ];
        if drep {
            want.push(format!("{GUEST}>DREP"));
        }
        for m in want {
            assert!(cm.contains(&m), "{m} missing from {cm:?} ({what})");
        }
    }
    // rping: SEND (4) both ways, RDMA READ requests (12) and WRITEs (10,
    // only, for short buffers) from the server.
    for (ops, what) in [(&ops_ours, "ours"), (&ops_wire, "the wire")] {
        for op in [4, 10, 12] {
            assert!(
                ops.get(&op).is_some_and(|n| *n > 0),
                "no opcode {op} in {what}: {ops:?}"
            );
        }
    }
    let _ = std::fs::remove_file(&ours);
    let _ = std::fs::remove_file(&wire);
}

/// `ndv decode --json` on `path`: every frame decodes with a valid ICRC;
/// (CM messages as `src>MSG`, frames per BTH opcode).
fn decode(path: &std::path::Path) -> (Vec<String>, std::collections::BTreeMap<u64, usize>) {
    let out = Command::new(NDV)
        .args(["decode", "--json"])
        .arg(path)
        .output()
        .expect("ndv decode");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut cm, mut ops) = (Vec::new(), std::collections::BTreeMap::new());
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
        assert_eq!(
            v["icrc_ok"],
            serde_json::Value::Bool(true),
            "bad ICRC: {line}"
        );
        if let Some(op) = v["bth"]["opcode"].as_u64() {
            *ops.entry(op).or_default() += 1;
        }
        if let Some(m) = v["cm"]["msg"].as_str() {
            cm.push(format!("{}>{m}", v["src"].as_str().unwrap_or("?")));
        }
    }
    (cm, ops)
}

#[test]
fn ucmatose_against_rxe_both_roles() {
    let Some(g) = guest(&["ucmatose"]) else {
        return;
    };
    let (c, (ok_g, out_g)) = rxe_serves(
        &g,
        "ucmatose -p 7414 -c 2",
        7414,
        "ucmatose",
        &["-s", GUEST, "-p", "7414", "-c", "2"],
    );
    assert!(c.ok && ok_g, "ours:\n{}\nrxe:\n{out_g}", c.text());
    check_ucmatose(&c.text(), &out_g);
    let (s, (ok_g, out_g)) = we_serve(
        &g,
        "ucmatose",
        &["-p", "7415", "-c", "2"],
        &format!("ucmatose -s {HOST} -p 7415 -c 2"),
    );
    assert!(s.ok && ok_g, "ours:\n{}\nrxe:\n{out_g}", s.text());
    check_ucmatose(&out_g, &s.text());
}

#[test]
fn rdma_server_and_rdma_client_against_rxe_both_roles() {
    let Some(g) = guest(&["rdma_server", "rdma_client"]) else {
        return;
    };
    let (c, (ok_g, out_g)) = rxe_serves(
        &g,
        "rdma_server -p 7416",
        7416,
        "rdma_client",
        &["-s", GUEST, "-p", "7416"],
    );
    assert!(c.ok && ok_g, "ours:\n{}\nrxe:\n{out_g}", c.text());
    assert!(c.text().contains("rdma_client: end 0"), "{}", c.text());
    assert!(out_g.contains("rdma_server: end 0"), "{out_g}");
    let (s, (ok_g, out_g)) = we_serve(
        &g,
        "rdma_server",
        &["-p", "7417"],
        &format!("rdma_client -s {HOST} -p 7417"),
    );
    assert!(s.ok && ok_g, "ours:\n{}\nrxe:\n{out_g}", s.text());
    assert!(s.text().contains("rdma_server: end 0"), "{}", s.text());
    assert!(out_g.contains("rdma_client: end 0"), "{out_g}");
}

#[test]
fn udaddy_against_rxe_both_roles_sidr_as_linux_writes_it() {
    let Some(g) = guest(&["udaddy"]) else { return };
    let wire = std::env::temp_dir().join(format!("ndv-rdmacm-udaddy-{}.pcap", std::process::id()));
    let capture = g.capture(&wire, &["udp", "port", "4791"]);
    // rxe serves: our SIDR_REQ, its SIDR_REP, then datagrams both ways
    // (its replies go to the address handle it builds from our GRH).
    let (c, (ok_g, out_g)) = rxe_serves(
        &g,
        &format!("udaddy -b {GUEST}"),
        7174,
        "udaddy",
        &["-s", GUEST, "-b", HOST],
    );
    assert!(c.ok && ok_g, "ours:\n{}\nrxe:\n{out_g}", c.text());
    check_udaddy(&c.text());
    check_udaddy(&out_g);
    // We serve: rxe's SIDR_REQ, our SIDR_REP.
    let (s, (ok_g, out_g)) = we_serve(
        &g,
        "udaddy",
        &["-b", HOST],
        &format!("udaddy -s {HOST} -b {GUEST}"),
    );
    capture.stop();
    assert!(s.ok && ok_g, "ours:\n{}\nrxe:\n{out_g}", s.text());
    check_udaddy(&s.text());
    check_udaddy(&out_g);
    // Each of our messages laid out as the kernel lays out its own.
    let m = sidr_mads(&wire);
    let _ = std::fs::remove_file(&wire);
    let (host, guest): (std::net::IpAddr, std::net::IpAddr) =
        (HOST.parse().unwrap(), GUEST.parse().unwrap());
    let find = |src, attr| {
        m.iter()
            .find(|(a, mad)| *a == src && mad[16..18] == u16::to_be_bytes(attr))
            .map(|(_, mad)| mad.as_slice())
            .unwrap_or_else(|| panic!("no {attr:#x} from {src} in {} SIDR MADs", m.len()))
    };
    use ndverbs_wire::cm::attr::{SIDR_REP, SIDR_REQ};
    let (req_ours, req_rxe) = (find(host, SIDR_REQ), find(guest, SIDR_REQ));
    let (rep_ours, rep_rxe) = (find(host, SIDR_REP), find(guest, SIDR_REP));
    for (ours, rxe) in [(req_ours, req_rxe), (rep_ours, rep_rxe)] {
        // MAD header: versions, class, method, status, attribute.
        assert_eq!(ours[..8], rxe[..8]);
        assert_eq!(ours[16..24], rxe[16..24]);
    }
    for req in [req_ours, req_rxe] {
        // The TID's low word is the request ID as a little-endian CPU
        // reads it (cm_form_tid); P_Key 0xFFFF; the rdma_cm header.
        assert_eq!(req[12..16], [req[27], req[26], req[25], req[24]]);
        assert_eq!(req[28..32], [0xff, 0xff, 0, 0]);
        assert_eq!(req[32..40], 0x0111_1c06u64.to_be_bytes());
        assert_eq!(req[40..42], [0, 0x40]);
        assert!(req[76..].iter().all(|&b| b == 0));
    }
    for (rep, req) in [(rep_ours, req_rxe), (rep_rxe, req_ours)] {
        // The TID and request ID echoed; status 0; service ID; Q_Key.
        assert_eq!(rep[8..16], req[8..16]);
        assert_eq!(rep[24..28], req[24..28]);
        assert_eq!(rep[28..32], [0; 4]);
        assert_eq!(rep[35], 0);
        assert_eq!(rep[36..44], req[32..40]);
        assert_eq!(rep[44..48], 0x0123_4567u32.to_be_bytes());
        assert!(rep[48..].iter().all(|&b| b == 0));
    }
}

/// The SIDR_REQs and SIDR_REPs of capture `path`: (source, MAD).
fn sidr_mads(path: &std::path::Path) -> Vec<(std::net::IpAddr, Vec<u8>)> {
    use ndverbs_wire::cm::attr::{SIDR_REP, SIDR_REQ};
    let file = std::fs::read(path).expect("the capture");
    let mut out = Vec::new();
    for f in ndverbs_wire::capture::read_frames(&file).expect("a capture file") {
        let Some((_, ip)) = ndverbs_wire::capture::ip_packet(f.link, f.data) else {
            continue;
        };
        let Ok(d) = ndverbs_wire::packet::Datagram::parse(ip) else {
            continue;
        };
        let mad = d.packet.payload;
        if mad.len() >= 256
            && [SIDR_REQ, SIDR_REP].contains(&u16::from_be_bytes([mad[16], mad[17]]))
        {
            out.push((d.envelope.ip.src(), mad[..256].to_vec()));
        }
    }
    out
}

#[test]
fn cmtime_against_rxe_both_roles() {
    let Some(g) = guest(&["cmtime"]) else { return };
    // rxe serves (until its timeout: cmtime's server never ends).
    let job = g.spawn("timeout 20 cmtime -p 7418");
    g.wait_listening(&job, Listen::RdmaCm(7418));
    let c = Running::spawn(&mut ndv_run(
        g.netns(),
        "cmtime",
        &["-s", GUEST, "-p", "7418", "-c", "20"],
    ))
    .wait(LIMIT);
    let _ = g.wait(job);
    assert!(c.ok, "ours:\n{}", c.text());
    check_cmtime(&c.text());
    // We serve.
    let s = Running::spawn(&mut ndv_run(g.netns(), "cmtime", &["-p", "7419"]));
    wait_rdma_listening(g.netns(), HOST, &s);
    let (ok_g, out_g) = g.run(&format!("timeout 60 cmtime -s {HOST} -p 7419 -c 20"));
    let s = s.kill();
    assert!(ok_g, "rxe:\n{out_g}\nours:\n{}", s.text());
    check_cmtime(&out_g);
}

/// `ib_<t> -R` between us and rxe in both roles.
fn perftest_rdma_cm_against_rxe(t: &str, port: u16) {
    let program = format!("ib_{t}");
    let Some(g) = guest(&[&program]) else { return };
    let ports = [port.to_string(), (port + 1).to_string()];
    let ours = |p: &str| ["-R", "-d", "ndv0", "-n", "200", "-p", p].map(String::from);
    let theirs = |p: &str| format!("timeout 90 {program} -R -d rxe0 -x 1 -n 200 -p {p}");
    // rxe serves.
    for attempt in 1..=3 {
        let job = g.spawn(&theirs(&ports[0]));
        g.wait_listening(&job, Listen::RdmaCm(port));
        let args = ours(&ports[0]);
        let args: Vec<&str> = args.iter().map(String::as_str).chain([GUEST]).collect();
        let c = Running::spawn(&mut ndv_run(g.netns(), &program, &args)).wait(LIMIT);
        let (ok_g, out_g) = g.wait(job);
        if !(c.ok && ok_g) && attempt < 3 && perftest_flaked(&(c.text() + &out_g)) {
            eprintln!("{program}: perftest's own failure; again");
            continue;
        }
        assert!(c.ok && ok_g, "ours:\n{}\nrxe:\n{out_g}", c.text());
        check_perftest(t, &c.text(), "client");
        check_perftest(t, &out_g, "server");
        break;
    }
    // We serve.
    for attempt in 1..=3 {
        let args = ours(&ports[1]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let s = Running::spawn(&mut ndv_run(g.netns(), &program, &args));
        wait_rdma_listening(g.netns(), HOST, &s);
        let (ok_g, out_g) = g.run(&format!("{} {HOST}", theirs(&ports[1])));
        let s = if ok_g { s.wait(LIMIT) } else { s.kill() };
        if !(s.ok && ok_g) && attempt < 3 && perftest_flaked(&(s.text() + &out_g)) {
            eprintln!("{program}: perftest's own failure; again");
            continue;
        }
        assert!(s.ok && ok_g, "ours:\n{}\nrxe:\n{out_g}", s.text());
        check_perftest(t, &out_g, "client");
        check_perftest(t, &s.text(), "server");
        break;
    }
}

#[test]
fn ib_send_bw_rdma_cm_against_rxe_both_roles() {
    perftest_rdma_cm_against_rxe("send_bw", 18731);
}

#[test]
fn ib_write_bw_rdma_cm_against_rxe_both_roles() {
    perftest_rdma_cm_against_rxe("write_bw", 18733);
}

#[test]
fn ib_read_bw_rdma_cm_against_rxe_both_roles() {
    perftest_rdma_cm_against_rxe("read_bw", 18735);
}

#[test]
fn ib_atomic_bw_rdma_cm_against_rxe_both_roles() {
    perftest_rdma_cm_against_rxe("atomic_bw", 18737);
}

#[test]
fn ib_send_lat_rdma_cm_against_rxe_both_roles() {
    perftest_rdma_cm_against_rxe("send_lat", 18739);
}

#[test]
fn ib_write_lat_rdma_cm_against_rxe_both_roles() {
    perftest_rdma_cm_against_rxe("write_lat", 18741);
}

#[test]
fn ib_read_lat_rdma_cm_against_rxe_both_roles() {
    perftest_rdma_cm_against_rxe("read_lat", 18743);
}

#[test]
fn ib_atomic_lat_rdma_cm_against_rxe_both_roles() {
    perftest_rdma_cm_against_rxe("atomic_lat", 18745);
}
