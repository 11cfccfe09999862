//! `Device::set_capture`: two devices of one process writing one pcap file.
//! Every packet appears once (recorded by its sender), with its IP and UDP
//! headers rebuilt so that the ICRC verifies; switching capture off stops
//! recording; switching it on again in the same process appends.

use ndverbs_testkit::verbs::Pair;
use ndverbs_wire::capture::{ip_packet, read_frames};
use ndverbs_wire::ip::Envelope;
use ndverbs_wire::packet::Packet;
use std::net::IpAddr;
use std::time::Duration;

/// (src, opcode, psn, ICRC ok) of every frame.
fn frames(path: &std::path::Path) -> Vec<(IpAddr, u8, u32, bool)> {
    let bytes = std::fs::read(path).unwrap();
    read_frames(&bytes)
        .unwrap()
        .into_iter()
        .map(|f| {
            let (_, ip) = ip_packet(f.link, f.data).expect("an IP packet");
            let (env, t) = Envelope::parse(ip).unwrap();
            assert!(env.is_rocev2());
            let p = Packet::parse(t).unwrap();
            let ok = ndverbs_wire::icrc::verify(ip).unwrap();
            (env.ip.src(), p.bth.opcode.0, p.bth.psn, ok)
        })
        .collect()
}

/// (opcode, psn) of the frames `from` sent.
fn sent_by(frames: &[(IpAddr, u8, u32, bool)], from: IpAddr) -> Vec<(u8, u32)> {
    frames
        .iter()
        .filter(|x| x.0 == from)
        .map(|x| (x.1, x.2))
        .collect()
}

/// `sent`, each (opcode, psn) once: on a loaded machine the ACK may come
/// after the retransmission timer and the packets go twice (each recorded).
fn distinct(mut sent: Vec<(u8, u32)>) -> Vec<(u8, u32)> {
    sent.sort_by_key(|x| x.1);
    sent.dedup();
    sent
}

/// Datagrams `dev` has sent so far.
fn sent_pkts(dev: &ndverbs_verbs::Device) -> usize {
    dev.stats().get("sent_pkts") as usize
}

#[test]
fn two_devices_one_file_each_packet_once() {
    let pair = Pair::new();
    let (da, db) = (&pair.a.dev, &pair.b.dev);
    let (a_ip, b_ip) = (pair.a.addr(), pair.b.addr());
    let path = std::env::temp_dir().join(format!("ndv-verbs-cap-{}.pcap", std::process::id()));
    da.set_capture(Some(&path)).unwrap();
    db.set_capture(Some(&path)).unwrap();
    assert_eq!(da.capture_path(), db.capture_path());
    // One SEND of 3000 bytes at MTU 1024 (three packets), both completions
    // (a's means every packet of a was ACKed: a sends nothing after it).
    let send = || pair.send(1, 3000, 1);
    let a0 = sent_pkts(da);
    send();
    std::thread::sleep(Duration::from_millis(50));
    da.set_capture(None).unwrap();
    db.set_capture(None).unwrap();
    assert!(da.capture_path().is_none());
    let f = frames(&path);
    // 3000 bytes at MTU 1024: FIRST, MIDDLE, LAST from a; then b's ACK(s).
    // Once each: b does not record again what a recorded (a send that a
    // retransmitted is two sends, counted and recorded twice).
    let data = sent_by(&f, a_ip);
    assert_eq!(data.len(), sent_pkts(da) - a0, "{f:?}");
    assert_eq!(distinct(data), [(0x00, 0), (0x01, 1), (0x02, 2)], "{f:?}");
    assert!(
        f.iter().any(|x| x.0 == b_ip && x.1 == 0x11),
        "no ACK: {f:?}"
    );
    assert!(f.iter().all(|x| x.3), "bad ICRC: {f:?}");
    // Off: nothing more is written.
    send();
    assert_eq!(frames(&path).len(), f.len());
    // On again in the same process: appended after what is there.
    da.set_capture(Some(&path)).unwrap();
    let a0 = sent_pkts(da);
    send();
    std::thread::sleep(Duration::from_millis(50));
    da.set_capture(None).unwrap();
    let g = frames(&path);
    assert_eq!(&g[..f.len()], &f[..]);
    let more = sent_by(&g[f.len()..], a_ip);
    assert_eq!(more.len(), sent_pkts(da) - a0, "{g:?}");
    assert_eq!(distinct(more), [(0x00, 6), (0x01, 7), (0x02, 8)], "{g:?}");
    // b is not capturing now: its ACKs arrive at a and are recorded as received.
    assert!(
        g[f.len()..].iter().any(|x| x.0 == b_ip && x.1 == 0x11),
        "{g:?}"
    );
    let _ = std::fs::remove_file(&path);
}
