//! `ndv bench` end to end, as a function, not a measurement: one short round
//! of every test with its baseline must print every row of the table with a
//! positive ratio. (The figures themselves are benchmarks: BENCHMARKS.md.)

use std::process::Command;

#[test]
fn every_row_of_the_table_comes_out() {
    if !ndverbs_testkit::skip::require_tools(&["iperf3"]) {
        return;
    }
    let (client, server) = ndverbs_testkit::addr::pair_v4();
    let out = Command::new(env!("CARGO_BIN_EXE_ndv"))
        .args([
            "bench",
            "-r",
            "1",
            "-D",
            "0.3",
            "-n",
            "300",
            "--qps",
            "20",
            "--client-ip",
            &client.to_string(),
            "--server-ip",
            &server.to_string(),
        ])
        .env_remove("NDV_SPIN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "ndv bench failed:\n{stdout}\n{stderr}"
    );
    // The header says how the sides wait (P3 depends on it several-fold).
    assert!(
        stdout.contains("\nwaits: spin before sleeping, adaptive"),
        "{stdout}"
    );
    let mut rows = vec![
        "| P1 ",
        "| P2 8 B",
        "| P2 the same",
        "| P3 connect",
        "| P3 the same",
    ];
    // The veth rows need root to create namespaces; without it the bench
    // says so and the skip rule applies.
    if stderr.contains("veth rows (R1, R2, R6) skipped") {
        ndverbs_testkit::skip::skip("the veth rows of ndv bench (root)");
    } else {
        rows.extend(["| R1 veth", "| R6 the same", "| R2 veth"]);
    }
    for row in rows {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no row {row:?} in:\n{stdout}"));
        // `| name | ndverbs | baseline | **ratio×** | lo–hi | goal |`
        let ratio: f64 = line
            .split("**")
            .nth(1)
            .and_then(|r| r.trim_end_matches('×').parse().ok())
            .unwrap_or_else(|| panic!("no ratio in {line:?}"));
        assert!(ratio > 0.0 && ratio.is_finite(), "{line}");
    }
    let p4 = stdout
        .lines()
        .find(|l| l.starts_with("| P4 20 connected QP pairs"))
        .unwrap_or_else(|| panic!("no P4 row in:\n{stdout}"));
    assert!(
        p4.contains("KiB RSS per QP") && p4.contains("idle CPU"),
        "{p4}"
    );
}
