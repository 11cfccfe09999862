//! `--pcap FILE`: every packet sent and received, as on the wire, in a file
//! tshark and `ndv decode` read as RoCE. Loopback `ndv ping` and `ndv
//! pingpong` captured on both sides; against Linux rxe in the guest, the
//! `--pcap` capture is compared with tcpdump's of the same exchange.

mod pcapcheck;

use ndverbs_testkit::addr;
use ndverbs_testkit::guest::{Guest, Listen, GUEST};
use ndverbs_testkit::process::{self, Running, LIMIT};
use std::path::PathBuf;
use std::process::Command;

const NDV: &str = env!("CARGO_BIN_EXE_ndv");

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ndv-cap-{name}-{}.pcap", std::process::id()))
}

/// rdma_cm connection, SEND/READ/WRITE, DREQ/DREP: both sides' captures hold
/// the whole exchange, every ICRC valid, identical packets in both files.
#[test]
fn ping_captured_on_both_sides() {
    let (ps, pc) = (tmp("ping-s"), tmp("ping-c"));
    let (ps_s, pc_s) = (ps.to_string_lossy(), pc.to_string_lossy());
    let (s_ip, c_ip) = addr::pair_v4();
    let (s_ip, c_ip) = (s_ip.to_string(), c_ip.to_string());
    // `--pcap` before and after the subcommand (a global option).
    process::server_then_client(
        Command::new(NDV).args([
            "--pcap", &ps_s, "ping", "-s", "-a", &s_ip, "-p", "7411", "-C", "3",
        ]),
        Command::new(NDV).args([
            "ping", "-c", "-a", &s_ip, "-I", &c_ip, "-p", "7411", "-V", "-C", "3", "--pcap", &pc_s,
        ]),
        LIMIT,
    );
    let (s, c) = (pcapcheck::check(&ps), pcapcheck::check(&pc));
    let want = ["REQ", "REP", "RTU", "DREQ", "DREP"];
    for sum in [&s, &c] {
        let names = sum.cm_names();
        for m in want {
            assert!(names.contains(&m), "no {m} in {:?}", sum.cm);
        }
        // rping: SEND ONLY, READ REQUEST/RESPONSE, WRITE ONLY, ACKs.
        for op in [0x04, 0x0c, 0x10, 0x0a, 0x11] {
            assert!(sum.count(op) > 0, "no opcode {op:#x} in {:?}", sum.opcodes);
        }
    }
    assert_eq!(s.cm[0], format!("{c_ip}>REQ"));
    // What one side sent is what the other received: the same transport
    // bytes in both files (ordering may differ between directions).
    let key = |v: &serde_json::Value| {
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove("frame");
        v.to_string()
    };
    let mut a: Vec<_> = s.json.iter().map(key).collect();
    let mut b: Vec<_> = c.json.iter().map(key).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b, "the two sides' captures differ");
    let _ = std::fs::remove_file(&ps);
    let _ = std::fs::remove_file(&pc);
}

/// `NDV_PCAP` does what `--pcap` does; multi-packet messages (4 KiB at MTU
/// 1024) are captured segment by segment.
#[test]
fn pingpong_capture_via_the_environment() {
    let p = tmp("pingpong");
    let (s_ip, c_ip) = addr::pair_v4();
    let (s_ip, c_ip) = (s_ip.to_string(), c_ip.to_string());
    let common = [
        "pingpong", "-p", "18611", "-n", "20", "-s", "4096", "-m", "1024",
    ];
    process::server_then_client(
        Command::new(NDV)
            .args(common)
            .args(["--ip", &s_ip])
            .env("NDV_PCAP", &p),
        Command::new(NDV).args(common).args(["--ip", &c_ip, &s_ip]),
        LIMIT,
    );
    let sum = pcapcheck::check(&p);
    assert!(sum.cm.is_empty(), "pingpong uses no CM");
    // 20 exchanges each way of 4 packets (FIRST, 2×MIDDLE, LAST), plus ACKs;
    // a busy machine may add retransmissions of the same packets.
    assert_eq!(sum.distinct(0x00), 40, "{:?}", sum.opcodes);
    assert_eq!(sum.distinct(0x01), 80, "{:?}", sum.opcodes);
    assert_eq!(sum.distinct(0x02), 40, "{:?}", sum.opcodes);
    let _ = std::fs::remove_file(&p);
}

/// A capture path that cannot be created is an error, not silence.
#[test]
fn unwritable_capture_path_fails_the_command() {
    let out = Command::new(NDV)
        .args([
            "--pcap",
            "/nonexistent-dir/x.pcap",
            "ping",
            "-s",
            "-a",
            &addr::v4().to_string(),
            "-p",
            "7412",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent-dir/x.pcap"), "{err}");
}

/// Against Linux rxe: the `--pcap` capture of `ndv ping` holds the same
/// packets as tcpdump's capture on the interface — same addresses, ports,
/// IPv4 IDs (rxe's random IDs recovered from the ICRC) and transport bytes.
#[test]
fn matches_tcpdump_against_rxe() {
    let Some(g) = Guest::get() else { return };
    let ours = tmp("rxe-ours");
    let theirs =
        std::env::temp_dir().join(format!("ndv-cap-rxe-tcpdump-{}.pcap", std::process::id()));
    let capture = g.capture(&theirs, &["udp", "port", "4791"]);
    let job = g.spawn(&format!("timeout 60 rping -s -a {GUEST} -p 7413 -V -C 3"));
    g.wait_listening(&job, Listen::RdmaCm(7413));
    let ours_s = ours.to_string_lossy().into_owned();
    let c = Running::spawn(g.netns().command(NDV).args([
        "--pcap", &ours_s, "ping", "-c", "-a", GUEST, "-p", "7413", "-V", "-C", "3",
    ]))
    .wait(LIMIT);
    let (_, guest_out) = g.wait(job);
    capture.stop();
    assert!(
        c.ok,
        "ndv ping against rping failed:\n{}\nguest:\n{guest_out}",
        c.text()
    );
    let frames = |p: &PathBuf| -> Vec<Vec<u8>> {
        let bytes = std::fs::read(p).unwrap();
        ndverbs_wire::capture::read_frames(&bytes)
            .unwrap()
            .into_iter()
            .filter_map(|f| {
                let (_, ip) = ndverbs_wire::capture::ip_packet(f.link, f.data)?;
                let (env, t) = ndverbs_wire::ip::Envelope::parse(ip).ok()?;
                env.is_rocev2().then(|| ip[..env.len() + t.len()].to_vec())
            })
            .collect()
    };
    let a = frames(&ours);
    let b = frames(&theirs);
    assert!(!a.is_empty());
    // Compare what the ICRC covers plus the addresses, ports and IPv4 ID:
    // TTL, TOS and checksums of rxe's packets are not known to the socket.
    let norm = |p: &Vec<u8>| {
        let (env, t) = ndverbs_wire::ip::Envelope::parse(p).unwrap();
        let id = match env.ip {
            ndverbs_wire::ip::IpHeader::V4(h) => h.id,
            ndverbs_wire::ip::IpHeader::V6(_) => 0,
        };
        (
            env.ip.src(),
            env.ip.dst(),
            env.udp.src_port,
            env.udp.dst_port,
            id,
            t.to_vec(),
        )
    };
    // Every packet of ours is in tcpdump's capture, byte for byte (tcpdump
    // may also have whatever else used the interop network meanwhile).
    let mut nb: Vec<_> = b.iter().map(norm).collect();
    assert!(nb.len() >= a.len());
    for f in a.iter().map(norm) {
        let i = nb.iter().position(|g| *g == f).unwrap_or_else(|| {
            panic!("not in tcpdump's capture: {:?}", &f);
        });
        nb.swap_remove(i);
    }
    pcapcheck::check(&ours);
    let _ = std::fs::remove_file(&ours);
    let _ = std::fs::remove_file(&theirs);
}
