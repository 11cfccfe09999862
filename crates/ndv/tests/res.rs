//! `ndv res [qp|cq|mr|cm_id] [PID]`: the live objects of other running
//! processes. An `ndv ping` server and client (rdma_cm, then SEND/READ/WRITE
//! without end) run as processes of their own; `ndv res` finds their
//! connected QPs, CQs, MRs and endpoints, each side seen from the other's
//! point of view too, and forgets a process that is gone.

use ndverbs_testkit::{addr, process};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

const NDV: &str = env!("CARGO_BIN_EXE_ndv");
const PORT: &str = "7451";

fn ndv(dir: &std::path::Path) -> Command {
    let mut c = Command::new(NDV);
    c.env("NDV_STAT_DIR", dir).env_remove("NDV_STAT");
    c
}

/// `ndv res --json ARGS`: one object per device, or `None` on failure.
fn res_json(dir: &std::path::Path, args: &[&str]) -> Option<Vec<Value>> {
    let o = ndv(dir)
        .arg("res")
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    o.status.success().then(|| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    })
}

fn res_text(dir: &std::path::Path, args: &[&str]) -> (bool, String) {
    let o = ndv(dir).arg("res").args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    (o.status.success(), text)
}

/// The device of process `pid` in `all`.
fn of(all: &[Value], pid: u32) -> &Value {
    all.iter()
        .find(|v| v["pid"] == pid)
        .unwrap_or_else(|| panic!("no resources of {pid}: {all:?}"))
}

#[test]
fn objects_of_a_running_ping_pair() {
    let dir = std::env::temp_dir().join(format!("ndv-res-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Nothing published yet: an error naming the directory.
    let (ok, text) = res_text(&dir, &[]);
    assert!(
        !ok && text.contains("no ndverbs process publishes resources"),
        "{text}"
    );

    let (s_ip, c_ip) = addr::pair_v4();
    let (s, c) = (s_ip.to_string(), c_ip.to_string());
    let server =
        process::start_server(ndv(&dir).args(["ping", "-s", "-a", &s, "-p", PORT, "-C", "0"]));
    let client = process::Running::spawn(
        ndv(&dir).args(["ping", "-c", "-a", &s, "-I", &c, "-p", PORT, "-C", "0"]),
    );
    let (sp, cp) = (server.id(), client.id());
    // Wait until both sides publish a connected QP that has carried traffic.
    let t0 = Instant::now();
    let all = loop {
        let all = res_json(&dir, &[]).unwrap_or_default();
        let busy = |pid| {
            all.iter().any(|v| {
                v["pid"] == pid
                    && v["qp"].as_array().is_some_and(|q| {
                        q.iter()
                            .any(|q| q["state"] == "RTS" && q["sent_pkts"].as_u64() > Some(10))
                    })
            })
        };
        if busy(sp) && busy(cp) {
            break all;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "not seen: {all:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let (srv, cli) = (of(&all, sp), of(&all, cp));
    assert_eq!(
        (srv["addr"].as_str(), cli["addr"].as_str()),
        (Some(&*s), Some(&*c))
    );
    // QPs: each the other's peer, PSNs matching across: what one sends next
    // and what the other expects next differ by what happened between the
    // two snapshots (each side starts at a random PSN).
    let (qs, qc) = (&srv["qp"][0], &cli["qp"][0]);
    assert_eq!(srv["qp"].as_array().unwrap().len(), 1, "{srv}");
    assert_eq!(
        (qs["peer"].as_str(), qc["peer"].as_str()),
        (Some(&*c), Some(&*s))
    );
    assert_eq!(
        (qs["dest_qpn"].clone(), qc["dest_qpn"].clone()),
        (qc["qpn"].clone(), qs["qpn"].clone())
    );
    let apart = |a: &Value, b: &Value| {
        let d = b.as_u64().unwrap().wrapping_sub(a.as_u64().unwrap()) & 0xff_ffff;
        d.min((1 << 24) - d)
    };
    assert!(apart(&qs["rq_psn"], &qc["sq_psn"]) < 1 << 16, "{qs} {qc}");
    assert!(apart(&qc["rq_psn"], &qs["sq_psn"]) < 1 << 16, "{qs} {qc}");
    // rping keeps at most a couple of requests posted on each queue.
    for k in ["sq_outstanding", "rq_outstanding"] {
        assert!(
            qs[k].as_u64().unwrap() <= 4 && qc[k].as_u64().unwrap() <= 4,
            "{k}: {qs} {qc}"
        );
    }
    assert_eq!(qs["retry_exceeded"], 0);
    // CQs: the QP's, with their depth.
    let cq_ids: Vec<&Value> = srv["cq"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["id"])
        .collect();
    assert!(
        cq_ids.contains(&&qs["send_cq"]) && cq_ids.contains(&&qs["recv_cq"]),
        "{srv}"
    );
    assert!(srv["cq"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["depth"].as_u64() > Some(0)));
    // MRs: rping's buffers, one readable and writable by the peer.
    let mrs = srv["mr"].as_array().unwrap();
    assert!(mrs.len() >= 2, "{srv}");
    assert!(mrs
        .iter()
        .all(|m| m["pd"] == qs["pd"] && m["length"].as_u64() > Some(0)));
    assert!(
        mrs.iter()
            .any(|m| m["access"] == "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ"),
        "{srv}"
    );
    // Endpoints: the server listens on the port and has the connection;
    // the client's connection is the same one, seen from the other end.
    let eps = srv["cm_id"].as_array().unwrap();
    let listening = eps
        .iter()
        .find(|e| e["state"] == "listening")
        .expect("listener");
    assert_eq!(
        (
            listening["cm_state"].as_str(),
            listening["local_port"].as_u64()
        ),
        (Some("LISTEN"), Some(7451))
    );
    let conn = eps
        .iter()
        .find(|e| e["state"] == "connected")
        .expect("connection");
    let ce = &cli["cm_id"][0];
    assert_eq!(
        (conn["cm_state"].as_str(), ce["cm_state"].as_str()),
        (Some("ESTABLISHED"), Some("ESTABLISHED"))
    );
    assert_eq!(
        (conn["peer"].as_str(), conn["local_port"].as_u64()),
        (Some(&*c), Some(7451))
    );
    assert_eq!(
        (ce["peer"].as_str(), ce["peer_port"].as_u64()),
        (Some(&*s), Some(7451))
    );
    assert_eq!(conn["peer_port"], ce["local_port"]);
    assert_eq!(
        (conn["qpn"].clone(), ce["qpn"].clone()),
        (qs["qpn"].clone(), qc["qpn"].clone())
    );

    // Text, in rdma's style; filters by object and process.
    let (ok, text) = res_text(&dir, &["qp", &sp.to_string()]);
    assert!(ok, "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let head = format!(
        "link {s}/1 pid {sp} lqpn {} rqpn {} type RC state RTS peer {c} ",
        qs["qpn"], qs["dest_qpn"]
    );
    assert!(lines[0].starts_with(&head), "{text}");
    let (_, text) = res_text(&dir, &["cm-id"]);
    assert!(
        text.contains(&format!("link {s}/1 pid {sp} cm-idn ")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            " state listening cm-state LISTEN src-addr {s}:7451"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            " state connected cm-state ESTABLISHED src-addr {c}:"
        )),
        "{text}"
    );
    assert!(
        text.lines().all(|l| l.contains(" cm-idn ")),
        "only endpoints: {text}"
    );
    let (_, text) = res_text(&dir, &[&cp.to_string(), "mr"]);
    assert!(
        !text.is_empty()
            && text
                .lines()
                .all(|l| l.starts_with(&format!("link {c}/1 pid {cp} lkey 0x"))),
        "{text}"
    );
    let only_cq = res_json(&dir, &["cq", &cp.to_string()]).unwrap();
    assert_eq!(only_cq.len(), 1);
    assert!(
        only_cq[0].get("cq").is_some() && only_cq[0].get("qp").is_none(),
        "{only_cq:?}"
    );
    let (ok, text) = res_text(&dir, &["qps"]);
    assert!(!ok && text.contains("unknown object"), "{text}");
    // `ndv stat` does not mistake the resource files for counters.
    let o = ndv(&dir).args(["stat", "--json"]).output().unwrap();
    let stat = String::from_utf8_lossy(&o.stdout);
    assert_eq!(stat.lines().count(), 2, "{stat}");
    assert!(stat.lines().all(|l| l.contains("\"counters\"")), "{stat}");

    // A process that is gone has no objects (its file is removed).
    drop(client.kill());
    assert!(res_json(&dir, &[&cp.to_string()]).is_none());
    let left = res_json(&dir, &[]).unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    drop(server.kill());
    let _ = std::fs::remove_dir_all(&dir);
}
