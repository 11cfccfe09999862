//! `ndv res [qp|cq|mr|cm_id] [PID]`: the live objects of running ndverbs
//! processes, in the spirit of iproute2's `rdma resource show`.
//!
//! A process that publishes its counters for `ndv stat` (every `ndv`
//! command does, and applications with `DeviceConfig::publish_stats`) also
//! publishes, on demand, beside each device's counter file,
//! `<pid>-<addr>.res.json`: its queue pairs, completion queues, memory
//! regions and connection endpoints, copied under the engine's lock twice a
//! second while a reader asks (the format is in
//! `ndverbs_engine::resources`). This asks (it touches
//! `<pid>-<addr>.res.want`), waits for snapshots taken after the request,
//! and prints one line per object, as `rdma resource show` does:
//!
//! ```text
//! link 127.0.0.1/1 pid 4242 lqpn 1193046 rqpn 6636321 type RC state RTS peer 127.0.0.2 sq-psn 812 rq-psn 77 sq-wrs 1 rq-wrs 16 send-cq 1 recv-cq 1 pdn 1 retries 0 rnr-naks 0 seq-naks 0 dups 0 sent 1200 rcvd 1199
//! link 127.0.0.1/1 pid 4242 cqn 1 cqe 64 entries 0
//! link 127.0.0.1/1 pid 4242 lkey 0x5a3c19e2 rkey 0x5a3c19e2 mrlen 4096 pdn 1 access LOCAL_WRITE|REMOTE_READ
//! link 127.0.0.1/1 pid 4242 cm-idn 1 state listening cm-state LISTEN src-addr 127.0.0.1:7174
//! ```
//!
//! With an object (`qp`, `cq`, `mr`, `cm_id`; `cm-id` too) only those are
//! listed; with a PID only that process's. `--json` prints the published
//! objects (narrowed to the object asked for), one device per line.

use crate::stat::{link, nothing, published, RES_SUFFIX};
use anyhow::{bail, Result};
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// `ndv res` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `qp`, `cq`, `mr` or `cm_id` (all of them when left out), then a
    /// process id (all processes when left out).
    #[arg(value_name = "OBJECT|PID", num_args = 0..=2)]
    pub what: Vec<String>,
    /// The published objects as JSON (one device per line).
    #[arg(long)]
    pub json: bool,
}

/// The kinds of object, as `rdma resource show` names them.
const KINDS: [&str; 4] = ["qp", "cq", "mr", "cm_id"];

/// The object kinds and process asked for.
fn parse(what: &[String]) -> Result<(Vec<&'static str>, Option<u32>)> {
    let mut kinds = Vec::new();
    let mut pid = None;
    for w in what {
        if let Ok(p) = w.parse::<u32>() {
            if pid.replace(p).is_some() {
                bail!("one process id at most");
            }
            continue;
        }
        let w = w.replace('-', "_");
        match KINDS.iter().find(|k| **k == w) {
            Some(k) if kinds.is_empty() => kinds.push(*k),
            Some(_) => bail!("one object at most (qp, cq, mr or cm_id)"),
            None => bail!("unknown object {w:?}: qp, cq, mr, cm_id or a process id"),
        }
    }
    if kinds.is_empty() {
        kinds = KINDS.to_vec();
    }
    Ok((kinds, pid))
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// `ADDR:PORT` (`[ADDR]:PORT` for IPv6), or `-` when the address is unknown.
fn sockaddr(v: &Value, addr: &str, port: &str) -> String {
    v[addr]
        .as_str()
        .and_then(|a| a.parse::<IpAddr>().ok())
        .map_or("-".into(), |ip| {
            SocketAddr::new(ip, u(v, port) as u16).to_string()
        })
}

/// One line for object `o` of kind `kind` (a device's `head`).
fn line(head: &str, kind: &str, o: &Value) -> String {
    let s = |k: &str| o[k].as_str().unwrap_or("-").to_owned();
    match kind {
        "qp" => format!(
            "{head} lqpn {} rqpn {} type {} state {} peer {} sq-psn {} rq-psn {} sq-wrs {} rq-wrs {} \
             send-cq {} recv-cq {}{} pdn {} retries {} rnr-naks {} seq-naks {} dups {} sent {} rcvd {}",
            u(o, "qpn"),
            u(o, "dest_qpn"),
            // Files of older versions have no type: their QPs are RC.
            o["type"].as_str().unwrap_or("RC"),
            s("state"),
            s("peer"),
            u(o, "sq_psn"),
            u(o, "rq_psn"),
            u(o, "sq_outstanding"),
            u(o, "rq_outstanding"),
            u(o, "send_cq"),
            u(o, "recv_cq"),
            o["srq"]
                .as_u64()
                .map_or(String::new(), |n| format!(" srqn {n}")),
            u(o, "pd"),
            u(o, "retries"),
            u(o, "rnr_naks"),
            u(o, "seq_naks"),
            u(o, "duplicates"),
            u(o, "sent_pkts"),
            u(o, "rcvd_pkts"),
        ),
        "cq" => format!(
            "{head} cqn {} cqe {} entries {}{}",
            u(o, "id"),
            u(o, "depth"),
            u(o, "entries"),
            if o["overflowed"].as_bool() == Some(true) {
                " overflowed"
            } else {
                ""
            }
        ),
        "mr" => format!(
            "{head} lkey {:#x} rkey {:#x} mrlen {} pdn {} access {}{}",
            u(o, "lkey"),
            u(o, "rkey"),
            u(o, "length"),
            u(o, "pd"),
            s("access"),
            match u(o, "windows") {
                0 => String::new(),
                n => format!(" windows {n}"),
            }
        ),
        _ => {
            let mut l = format!(
                "{head} cm-idn {} state {} cm-state {} src-addr {}",
                u(o, "id"),
                s("state"),
                s("cm_state"),
                sockaddr(o, "local", "local_port"),
            );
            if o["peer"].is_string() {
                l.push_str(&format!(" dst-addr {}", sockaddr(o, "peer", "peer_port")));
            }
            if let Some(q) = o["qpn"].as_u64() {
                l.push_str(&format!(" lqpn {q}"));
            }
            if let Some(q) = o["dest_qpn"].as_u64() {
                l.push_str(&format!(" rqpn {q}"));
            }
            l
        }
    }
}

/// Asks every publishing process (or `pid`) for its objects and waits,
/// at most [`ASK_LIMIT`], until each has written a snapshot newer than the
/// request (a process that does not answer is left out).
fn ask_and_wait(pid: Option<u32>) {
    let stats = crate::stat::snapshots(pid);
    let asked = SystemTime::now();
    for (p, _) in &stats {
        let _ = std::fs::write(p.with_extension("res.want"), b"");
    }
    let fresh = |p: &Path| {
        std::fs::metadata(p.with_extension("res.json"))
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= asked)
    };
    let t0 = Instant::now();
    while !stats.iter().all(|(p, _)| fresh(p)) && t0.elapsed() < ASK_LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long `ndv res` waits for the processes' snapshots (they are written
/// twice a second).
const ASK_LIMIT: Duration = Duration::from_secs(3);

/// Runs `ndv res`.
pub fn run(a: &Args) -> Result<()> {
    let (kinds, pid) = parse(&a.what)?;
    ask_and_wait(pid);
    let files = published(pid, RES_SUFFIX);
    if files.is_empty() {
        return Err(nothing(pid, "resources"));
    }
    for (_, v) in &files {
        if a.json {
            let mut o = v.clone();
            if let Some(m) = o.as_object_mut() {
                m.retain(|k, _| !KINDS.contains(&k.as_str()) || kinds.contains(&k.as_str()));
            }
            println!("{o}");
            continue;
        }
        let head = link(v);
        for kind in &kinds {
            for o in v[*kind].as_array().into_iter().flatten() {
                println!("{}", line(&head, kind, o));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn objects_and_pid_in_any_order() {
        assert_eq!(parse(&[]).unwrap(), (KINDS.to_vec(), None));
        assert_eq!(parse(&words(&["qp"])).unwrap(), (vec!["qp"], None));
        assert_eq!(parse(&words(&["42"])).unwrap(), (KINDS.to_vec(), Some(42)));
        assert_eq!(
            parse(&words(&["cm-id", "7"])).unwrap(),
            (vec!["cm_id"], Some(7))
        );
        assert_eq!(parse(&words(&["7", "mr"])).unwrap(), (vec!["mr"], Some(7)));
        assert!(parse(&words(&["qps"])).is_err());
        assert!(parse(&words(&["qp", "cq"])).is_err());
        assert!(parse(&words(&["1", "2"])).is_err());
    }

    #[test]
    fn lines_in_rdma_style() {
        let h = "link 10.0.0.1/1 pid 9";
        let ep = json!({"id":2,"state":"connected","cm_state":"ESTABLISHED","local":"fd00::1",
            "local_port":7174,"peer":"fd00::2","peer_port":40000,"qpn":17,"dest_qpn":18});
        assert_eq!(
            line(h, "cm_id", &ep),
            "link 10.0.0.1/1 pid 9 cm-idn 2 state connected cm-state ESTABLISHED \
             src-addr [fd00::1]:7174 dst-addr [fd00::2]:40000 lqpn 17 rqpn 18"
        );
        let mr = json!({"lkey":255,"rkey":255,"pd":1,"addr":0,"length":4096,"access":"NONE","windows":0});
        assert_eq!(
            line(h, "mr", &mr),
            "link 10.0.0.1/1 pid 9 lkey 0xff rkey 0xff mrlen 4096 pdn 1 access NONE"
        );
        let cq = json!({"id":3,"depth":64,"entries":2,"overflowed":true});
        assert_eq!(
            line(h, "cq", &cq),
            "link 10.0.0.1/1 pid 9 cqn 3 cqe 64 entries 2 overflowed"
        );
    }
}
