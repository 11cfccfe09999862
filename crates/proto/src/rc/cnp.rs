//! The congestion notification packet (CNP) of RoCEv2 (IBTA Annex A17.9.3):
//! what a receiver sends back when a packet of one of its QPs arrives with
//! Congestion Experienced (CE) in its IP ECN field — DCQCN's notification
//! point. The sending QP's path controller then cuts its window
//! ([`crate::cc::PathController::on_cnp`]).
//!
//! Layout (shared/docs/congestion.md §4): BTH with opcode 0x81, P_Key
//! 0xFFFF, BECN set, DestQP the QP that sent the marked packet, PSN 0; then
//! 16 reserved bytes and the ICRC. 32 bytes of UDP payload.

use crate::time::Duration;
use ndverbs_wire::bth::Bth;
use ndverbs_wire::opcode::Opcode;
use ndverbs_wire::packet::Packet;

/// At most one CNP per QP in this interval (DCQCN's 50 µs; NVIDIA NICs'
/// `min_time_between_cnps` defaults to 4 µs, the DCQCN paper's 50 µs).
pub const CNP_INTERVAL: Duration = Duration::from_micros(50);

/// Writes a CNP for the peer's QP `dest_qpn` into `buf`, ICRC zero (the
/// engine signs it like any packet); its length, or `None` if `buf` is
/// too small.
///
/// ```
/// use ndverbs_proto::rc::cnp_packet;
/// let mut buf = [0xaa; 64];
/// let n = cnp_packet(0xd2, &mut buf).unwrap();
/// // The capture in NVIDIA's "RoCEv2 CNP Packet Format Example", ICRC aside.
/// let want = [0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x00, 0xd2, 0, 0, 0, 0];
/// assert_eq!(&buf[..12], &want);
/// assert_eq!(n, 32);
/// assert!(buf[12..28].iter().all(|&b| b == 0));
/// ```
pub fn cnp_packet(dest_qpn: u32, buf: &mut [u8]) -> Option<usize> {
    let mut bth = Bth::new(Opcode::CNP, dest_qpn, 0);
    bth.becn = true;
    let mut p = Packet::new(bth);
    p.ext.cnp = Some([0; ndverbs_wire::ext::CNP_LEN]);
    p.write(buf).ok()
}
