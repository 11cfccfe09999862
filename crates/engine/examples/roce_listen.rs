//! Listens on `<ip>:4791` and prints every RoCEv2 datagram with its ICRC verdict
//! and the IPv4 ID recovered from the ICRC. A quick way to see what a peer sends.
//!
//! usage: cargo run -p ndverbs-engine --example roce_listen -- 10.77.0.1 [count]

use ndverbs_engine::icrc::IcrcCache;
use ndverbs_engine::link::udp::RoceSocket;
use ndverbs_engine::link::MAX_DATAGRAM;
use ndverbs_wire::packet::Packet;
use std::time::Duration;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let ip = args
        .next()
        .unwrap_or_else(|| "127.0.0.1".into())
        .parse()
        .expect("IP address");
    let count: usize = args.next().map_or(1, |c| c.parse().expect("count"));
    let sock = RoceSocket::bind(ip)?;
    let mut icrc = IcrcCache::new(sock.addr());
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut seen = 0;
    while seen < count {
        let Some(d) = sock.recv_datagram(&mut buf)? else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        seen += 1;
        match icrc.verify(&buf[..d.len], d.src, d.dst) {
            Err(e) => println!("dropped: {e:?}"),
            Ok(r) => {
                let what = match Packet::parse(&buf[..r.len]) {
                    Ok(p) => p.bth.opcode.to_string(),
                    Err(e) => e.to_string(),
                };
                println!(
                    "{} -> {}: {} bytes, {what}, icrc ok, ip id {:?}",
                    r.src, r.dst, r.len, r.ipv4_id
                );
            }
        }
    }
    Ok(())
}
