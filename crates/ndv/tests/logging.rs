//! `ndv` shows the libraries' tracing output on stderr, filtered by
//! `RUST_LOG`; the report on stdout is unchanged, and without `RUST_LOG`
//! only warnings would appear.

use std::process::{Command, Output};

fn demo(server: &str, client: &str, rust_log: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ndv"));
    c.args([
        "demo", "--bytes", "65536", "--server", server, "--client", client,
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
    out
}

#[test]
fn rust_log_debug_shows_connection_phases_on_stderr() {
    let out = demo("127.77.91.1", "127.77.91.2", Some("ndverbs_engine=debug"));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "adapter{local=127.77.91.2}:ep_connect{ep=",
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
    let out = demo("127.77.92.1", "127.77.92.2", None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains(" DEBUG ") && !err.contains(" INFO ") && !err.contains("ep_connect"),
        "{err}"
    );
    let out = demo("127.77.93.1", "127.77.93.2", Some("off"));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
