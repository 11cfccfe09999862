//! `ndv stat [PID]`: counters of running ndv processes, rxe's names in rxe's
//! order; snapshots disappear with their process.

use ndverbs_testkit::{addr, process};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

const NDV: &str = env!("CARGO_BIN_EXE_ndv");

fn ndv(dir: &std::path::Path) -> Command {
    let mut c = Command::new(NDV);
    c.env("NDV_STAT_DIR", dir).env_remove("NDV_STAT");
    c
}

fn stat_json(dir: &std::path::Path, pid: Option<u32>) -> Option<Vec<Value>> {
    let mut c = ndv(dir);
    c.args(["stat", "--json"]);
    if let Some(p) = pid {
        c.arg(p.to_string());
    }
    let o = c.output().unwrap();
    o.status.success().then(|| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    })
}

#[test]
fn running_ping_pair() {
    let dir = std::env::temp_dir().join(format!("ndv-stat-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (s_ip, c_ip) = addr::pair_v4();
    let (s_ip, c_ip) = (s_ip.to_string(), c_ip.to_string());
    let server =
        process::start_server(ndv(&dir).args(["ping", "-s", "-a", &s_ip, "-p", "7441", "-C", "0"]));
    let client = process::Running::spawn(ndv(&dir).args([
        "ping", "-c", "-a", &s_ip, "-I", &c_ip, "-p", "7441", "-C", "0",
    ]));
    let (sp, cp) = (server.id(), client.id());
    // Both publish within a second; the counters grow while they run.
    let t0 = Instant::now();
    let snaps = loop {
        let s = stat_json(&dir, None).unwrap_or_default();
        let busy = s.len() == 2
            && s.iter()
                .all(|v| v["counters"]["rdma_sends"].as_u64().unwrap_or(0) > 10);
        if busy {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no snapshots: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for v in &snaps {
        let names: Vec<&str> = v["counters"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(&names[..15], ndverbs_verbs::RXE_COUNTERS, "{v}");
        assert!(names.contains(&"drop_bad_icrc") && names.contains(&"qp_drop_bad_state"));
        let c = &v["counters"];
        assert!(c["sent_pkts"].as_u64().unwrap() > c["rdma_sends"].as_u64().unwrap());
        assert_eq!(c["link_downed"], 0);
        assert_eq!(c["drop_bad_icrc"], 0);
    }
    let addrs: Vec<(u64, &str)> = snaps
        .iter()
        .map(|v| (v["pid"].as_u64().unwrap(), v["addr"].as_str().unwrap()))
        .collect();
    assert!(addrs.contains(&(u64::from(sp), s_ip.as_str())), "{addrs:?}");
    assert!(addrs.contains(&(u64::from(cp), c_ip.as_str())), "{addrs:?}");
    // PID filter and the rdma-statistic-style text.
    assert_eq!(stat_json(&dir, Some(cp)).unwrap().len(), 1);
    let o = ndv(&dir).args(["stat", &sp.to_string()]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with(&format!("link {s_ip}/1 pid {sp} sent_pkts ")),
        "{text}"
    );
    // A process that is gone has no counters (its file is cleaned up).
    drop(client.kill());
    assert!(stat_json(&dir, Some(cp)).is_none());
    let o = ndv(&dir).args(["stat", &cp.to_string()]).output().unwrap();
    assert!(!o.status.success());
    drop(server.kill());
    let _ = std::fs::remove_dir_all(&dir);
}
