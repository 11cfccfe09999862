//! `ndv` shows the libraries' tracing output on stderr, filtered by
//! `RUST_LOG`; the report on stdout is unchanged, and without `RUST_LOG`
//! only warnings would appear.

use std::process::{Command, Output};

/// `ndv demo` between two fresh addresses; returns them with the output.
fn demo(rust_log: Option<&str>) -> (String, Output) {
    let (server, client) = ndverbs_testkit::addr::pair_v4();
    let (server, client) = (server.to_string(), client.to_string());
    let mut c = Command::new(env!("CARGO_BIN_EXE_ndv"));
    c.args([
        "demo", "--bytes", "65536", "--server", &server, "--client", &client,
    ]);
    match rust_log {
        Some(v) => c.env("RUST_LOG", v),
        None => c.env_remove("RUST_LOG"),
    };
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("total:"));
    (client, out)
}

#[test]
fn rust_log_debug_shows_connection_phases_on_stderr() {
    let (client, out) = demo(Some("ndverbs_engine=debug"));
    let err = String::from_utf8_lossy(&out.stderr);
    let connect_span = format!("nic{{local={client}}}:ep_connect{{ep=");
    for needle in [
        connect_span.as_str(),
        ":cm_phase: ",
        "ep_accept{ep=",
        ":qp_phase:modify_qp{",
        "QP state",
        "from=Rtr to=Rts",
        "CM state",
        "to=Established",
        "MAD sent",
        "mad=\"DREQ\"",
        "ep_disconnect{ep=",
        " DEBUG ",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
    assert!(!String::from_utf8_lossy(&out.stdout).contains(" DEBUG "));
}

#[test]
fn without_rust_log_no_debug_output() {
    let (_, out) = demo(None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains(" DEBUG ") && !err.contains(" INFO ") && !err.contains("ep_connect"),
        "{err}"
    );
    let (_, out) = demo(Some("off"));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
