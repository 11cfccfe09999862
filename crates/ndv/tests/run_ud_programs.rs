//! Debian 12's programs on unreliable datagram QPs, unmodified, over
//! ndverbs through `ndv run`: `ibv_ud_pingpong` (address handles from the
//! peer's GID, answers by QPN and Q_Key) and perftest's `ib_send_lat -c UD`
//! and `ib_send_bw -c UD` with the TCP exchange — each against itself
//! between two network namespaces joined by a veth pair, and against Linux
//! rxe in the interop guest, in both roles. Exit statuses and result lines are checked.
//!
//! The veth's MTU is 1500, so the port's active MTU is 1024: a datagram is at most
//! 1024 bytes, and `ibv_ud_pingpong` (2048 bytes by default) is given
//! `-s 1024`.

mod programs;

use ndverbs_testkit::guest::{Guest, Listen, GUEST, HOST};
use ndverbs_testkit::process::{Running, LIMIT};
use programs::{
    both_ok, installed, ndv_run, perftest_clock_failed, perftest_with_rxe, rows,
    server_then_client, veth, wait_tcp_listening, A, B,
};

/// `ibv_ud_pingpong` against itself between the namespaces, with `extra`
/// options on both sides.
fn ud_pingpong_itself(extra: &[&str], port: u16) {
    let Some((a, b)) = veth(&["ibv_ud_pingpong"]) else {
        return;
    };
    let port_s = port.to_string();
    let mut args = vec!["-g", "0", "-n", "200", "-p", &port_s];
    args.extend_from_slice(extra);
    let client_args: Vec<&str> = args.iter().copied().chain([A]).collect();
    let (c, s) = server_then_client(
        &a,
        port,
        &mut ndv_run(&a, "ibv_ud_pingpong", &args),
        &mut ndv_run(&b, "ibv_ud_pingpong", &client_args),
    );
    let (tc, ts) = both_ok(&c, &s);
    for (out, local, remote) in [(&tc, B, A), (&ts, A, B)] {
        assert!(out.contains(&format!("GID ::ffff:{local}")), "{out}");
        assert!(out.contains(&format!("GID ::ffff:{remote}")), "{out}");
        assert!(out.contains("200 iters in "), "{out}");
    }
}

#[test]
fn ibv_ud_pingpong_against_itself() {
    ud_pingpong_itself(&["-s", "1024"], 18961);
}

#[test]
fn ibv_ud_pingpong_against_itself_on_completion_events() {
    ud_pingpong_itself(&["-s", "100", "-e"], 18962);
}

/// What a run of `ib_send_lat -c UD` (`lat`) or `ib_send_bw -c UD` printed:
/// one result row for `size`-byte messages and `iters` iterations.
fn check_ud_perftest(lat: bool, out: &str, size: f64, iters: f64) {
    let r = rows(out);
    assert_eq!(r.len(), 1, "{out}");
    assert_eq!(&r[0][..2], &[size, iters], "{out}");
    assert!(out.contains("Connection type : UD"), "{out}");
    if lat {
        // t_min <= t_typical <= t_max.
        assert!(
            r[0][2] > 0.0 && r[0][2] <= r[0][4] && r[0][4] <= r[0][3],
            "{out}"
        );
    } else {
        // The message rate (the receiver has no peak bandwidth).
        assert!(r[0][4] > 0.0, "{out}");
    }
}

/// `ib_send_<lat|bw> -c UD` against itself between the namespaces.
fn ud_perftest_itself(t: &str, port: u16) {
    let program = format!("ib_{t}");
    let Some((a, b)) = veth(&[&program]) else {
        return;
    };
    let port_s = port.to_string();
    let args = [
        "-c", "UD", "-d", "ndv0", "-x", "0", "-n", "200", "-p", &port_s,
    ];
    let client_args = [&args[..], &[A]].concat();
    let lat = t.ends_with("lat");
    // The latency test sends 2 bytes; the bandwidth test one MTU.
    let size = if lat { 2.0 } else { 1024.0 };
    for attempt in 1..=3 {
        let (c, s) = server_then_client(
            &a,
            port,
            &mut ndv_run(&a, &program, &args),
            &mut ndv_run(&b, &program, &client_args),
        );
        if !(c.ok && s.ok) && attempt < 3 && perftest_clock_failed(&(c.text() + &s.text())) {
            continue;
        }
        let (tc, ts) = both_ok(&c, &s);
        check_ud_perftest(lat, &tc, size, 200.0);
        check_ud_perftest(lat, &ts, size, 200.0);
        return;
    }
}

#[test]
fn ib_send_lat_ud_against_itself() {
    ud_perftest_itself("send_lat", 18963);
}

#[test]
fn ib_send_bw_ud_against_itself() {
    ud_perftest_itself("send_bw", 18964);
}

/// The interop guest, when it runs and the programs are installed.
fn guest_ready(programs: &[&str]) -> Option<Guest> {
    if !installed(programs) {
        return None;
    }
    Guest::get()
}

#[test]
fn ibv_ud_pingpong_against_rxe_both_roles() {
    let Some(g) = guest_ready(&["ibv_ud_pingpong"]) else {
        return;
    };
    let (p1, p2) = (18971u16, 18972u16);
    let ours = |p: u16| {
        ["-g", "0", "-s", "1024", "-n", "200", "-p"]
            .map(String::from)
            .into_iter()
            .chain([p.to_string()])
            .collect::<Vec<_>>()
    };
    // rxe serves (its IPv4 GID is index 1).
    let job = g.spawn(&format!(
        "timeout 60 ibv_ud_pingpong -g 1 -s 1024 -n 200 -p {p1}"
    ));
    g.wait_listening(&job, Listen::Tcp(p1));
    let args = ours(p1);
    let args: Vec<&str> = args.iter().map(String::as_str).chain([GUEST]).collect();
    let c = Running::spawn(&mut ndv_run(g.netns(), "ibv_ud_pingpong", &args)).wait(LIMIT);
    let (ok_g, out_g) = g.wait(job);
    assert!(c.ok && ok_g, "ours:\n{}\nrxe:\n{out_g}", c.text());
    for out in [&out_g, &c.text()] {
        assert!(out.contains("200 iters in "), "{out}");
        assert!(out.contains(&format!("GID ::ffff:{HOST}")), "{out}");
    }
    // We serve.
    let args = ours(p2);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Running::spawn(&mut ndv_run(g.netns(), "ibv_ud_pingpong", &args));
    wait_tcp_listening(g.netns(), p2, &server);
    let (ok_g, out_g) = g.run(&format!(
        "timeout 60 ibv_ud_pingpong -g 1 -s 1024 -n 200 -p {p2} {HOST}"
    ));
    let s = server.wait(LIMIT);
    assert!(s.ok && ok_g, "ours:\n{}\nrxe:\n{out_g}", s.text());
    for out in [&out_g, &s.text()] {
        assert!(out.contains("200 iters in "), "{out}");
        assert!(out.contains(&format!("GID ::ffff:{GUEST}")), "{out}");
    }
}

/// `ib_send_<lat|bw> -c UD` between us and rxe in both roles.
fn ud_perftest_against_rxe(t: &str, port: u16) {
    let program = format!("ib_{t}");
    let Some(g) = guest_ready(&[&program]) else {
        return;
    };
    let lat = t.ends_with("lat");
    let size = if lat { 2.0 } else { 1024.0 };
    let port_s = port.to_string();
    let ours = [
        "-c", "UD", "-d", "ndv0", "-x", "0", "-n", "200", "-p", &port_s,
    ];
    let theirs = format!("timeout 90 {program} -c UD -d rxe0 -x 1 -n 200 -p {port}");
    perftest_with_rxe(&g, &program, port, &ours, &theirs, |out, _| {
        check_ud_perftest(lat, out, size, 200.0)
    });
}

#[test]
fn ib_send_lat_ud_against_rxe_both_roles() {
    ud_perftest_against_rxe("send_lat", 18973);
}

#[test]
fn ib_send_bw_ud_against_rxe_both_roles() {
    ud_perftest_against_rxe("send_bw", 18974);
}
