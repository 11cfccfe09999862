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

/// Every example, with the arguments it runs with here (after the two
/// addresses).
const EXAMPLES: [(&str, &[&str]); 5] = [
    ("send_receive", &[]),
    ("rdma_write_read", &[]),
    ("many_connections", &["16"]),
    ("async_futures", &[]),
    ("tokio_echo", &["8"]),
];

#[test]
fn every_example_runs_and_prints_nothing_unasked() {
    // Each in a thread of its own, as separate tests would run.
    std::thread::scope(|s| {
        for (name, extra) in EXAMPLES {
            s.spawn(move || run(name, extra));
        }
    });
}

#[test]
fn every_example_is_in_the_list() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    found.sort();
    let mut listed: Vec<&str> = EXAMPLES.iter().map(|(name, _)| *name).collect();
    listed.sort();
    assert_eq!(found, listed);
}
