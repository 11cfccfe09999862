//! The reference captures in `testdata/captures/`, read as RoCEv2 packets.

#![allow(dead_code)]

use ndverbs_wire::capture;
use ndverbs_wire::ip::Envelope;
use ndverbs_wire::packet::Packet;
use std::net::IpAddr;

/// One frame of a capture whose transport part parses as a packet.
pub struct Captured {
    /// Frame number in the file (1-based, as Wireshark shows it).
    pub number: usize,
    /// Capture time.
    pub ts_nanos: u64,
    /// Sender's address.
    pub src: IpAddr,
    /// UDP source port.
    pub sport: u16,
    /// Sent to the RoCEv2 port.
    pub rocev2: bool,
    /// Transport bytes: BTH to ICRC.
    pub bytes: Vec<u8>,
}

impl Captured {
    /// The packet (it parsed when read).
    pub fn packet(&self) -> Packet<'_> {
        Packet::parse(&self.bytes).expect("parsed when read")
    }
}

/// Every packet of capture `name`.
pub fn packets(name: &str) -> Vec<Captured> {
    let path = format!(
        "{}/../../testdata/captures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let file = std::fs::read(path).expect("capture");
    capture::read_frames(&file)
        .unwrap()
        .iter()
        .filter_map(|f| {
            let (_, ip) = capture::ip_packet(f.link, f.data)?;
            let (env, rest) = Envelope::parse(ip).ok()?;
            Packet::parse(rest).ok()?;
            Some(Captured {
                number: f.number,
                ts_nanos: f.ts_nanos,
                src: env.ip.src(),
                sport: env.udp.src_port,
                rocev2: env.is_rocev2(),
                bytes: rest.to_vec(),
            })
        })
        .collect()
}
