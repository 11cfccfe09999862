//! Publishing: a NIC's counters and live objects appear in the stat
//! directory while it is open, follow what it holds, and go with it. In its
//! own binary because it points `NDV_STAT_DIR` at a directory of its own.

use ndverbs_engine::config::{NicConfig, Progress};
use ndverbs_engine::mr::RegionBuf;
use ndverbs_engine::nic::{Nic, QpInit};
use ndverbs_engine::resources::{res_file, want_file};
use ndverbs_engine::stats::stat_file;
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::QpCaps;
use std::time::{Duration, Instant};

/// Waits (at most 10 s) until `f` holds.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read(p: &std::path::Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

#[test]
fn counters_and_objects_are_published_while_the_nic_lives() {
    let dir = std::env::temp_dir().join(format!("ndv-publish-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var("NDV_STAT_DIR", &dir);
    let (ip, other) = ndverbs_testkit::addr::pair_v4();
    let pid = std::process::id();
    // Not asked for: nothing is written.
    let quiet = Nic::open(other, Progress::Thread).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert!(!stat_file(pid, other).exists() && !res_file(pid, other).exists());

    let cfg = NicConfig {
        publish_stats: true,
        ..NicConfig::default()
    };
    let nic = Nic::open_with(ip, cfg).unwrap();
    let (stats, res) = (stat_file(pid, ip), res_file(pid, ip));
    assert_eq!(res.parent(), stats.parent());
    assert!(res.to_string_lossy().ends_with(".res.json"));
    // The counters are published at once; the objects only when a reader
    // asks for them (ndv res touches the request file).
    assert!(read(&stats).contains("\"counters\":{\"sent_pkts\":0,"));
    std::thread::sleep(Duration::from_millis(700));
    assert!(!res.exists(), "objects published unasked");
    std::fs::write(want_file(&stats), b"").unwrap();
    let empty = format!("\"addr\":\"{ip}\",");
    until("the empty object lists published", || {
        let r = read(&res);
        r.contains(&empty) && r.contains("\"qp\":[],\"cq\":[],\"mr\":[],\"cm_id\":[]")
    });
    // Objects show up at the next refresh.
    let pd = nic.alloc_pd().unwrap();
    let (cq, _) = nic.create_cq(8).unwrap();
    let init = QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        caps: QpCaps::default(),
        max_recv_wr: 4,
        max_recv_sge: 1,
    };
    let qp = nic.create_qp(init).unwrap();
    let mr = nic
        .reg_mr(pd, RegionBuf::alloc(4096).unwrap(), Access::LOCAL_WRITE)
        .unwrap();
    let qpn = format!("\"qpn\":{},\"state\":\"RESET\"", qp.qpn());
    let lkey = format!("\"lkey\":{},", mr.lkey());
    until("the QP and MR published", || {
        let r = read(&res);
        r.contains(&qpn) && r.contains(&lkey) && r.contains("\"depth\":8,")
    });
    assert!(read(&res).contains("\"type\":\"RC\"}"));
    // A UD QP is listed as one.
    let ud = nic.create_ud_qp(init).unwrap();
    let ud_qpn = format!("\"qpn\":{},\"state\":\"RESET\"", ud.qpn());
    until("the UD QP published", || {
        let r = read(&res);
        r.contains(&ud_qpn) && r.contains("\"type\":\"UD\"}")
    });
    nic.destroy_qp(ud.qpn()).unwrap();
    // And leave with the objects.
    nic.destroy_qp(qp.qpn()).unwrap();
    until("the QP gone from the file", || {
        let r = read(&res);
        r.contains("\"qp\":[]") && r.contains(&lkey)
    });
    // The files go with the NIC.
    drop(nic);
    until("the files removed", || {
        !stats.exists() && !res.exists() && !want_file(&stats).exists()
    });
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    drop(quiet);
    let _ = std::fs::remove_dir_all(&dir);
}
