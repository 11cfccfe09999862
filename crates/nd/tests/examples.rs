//! The examples in crates/nd/examples run and succeed (cargo builds them
//! before the tests; each gets addresses of its own), and the libraries
//! print nothing on their own (no tracing subscriber is installed).

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/<this test> → target/<profile>/examples/<name>
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name)
}

fn run(name: &str, extra: &[&str]) {
    let path = example(name);
    if !path.exists() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "-p", "ndverbs-nd", "--example", name])
            .status()
            .unwrap();
        assert!(st.success(), "building example {name}");
    }
    let (s, c) = ndverbs_testkit::addr::pair_v4();
    let (s, c) = (s.to_string(), c.to_string());
    let out = Command::new(&path)
        .args([s.as_str(), c.as_str()])
        .args(extra)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "example {name} failed:\n{text}");
    // No subscriber is installed: the libraries must not print a thing.
    assert!(
        out.stderr.is_empty(),
        "example {name} wrote to stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn send_receive() {
    run("send_receive", &[]);
}

#[test]
fn rdma_write_read() {
    run("rdma_write_read", &[]);
}

#[test]
fn many_connections() {
    run("many_connections", &["16"]);
}

#[test]
fn async_futures() {
    run("async_futures", &[]);
}

#[test]
fn tokio_echo() {
    run("tokio_echo", &["8"]);
}
