//! # ndverbs-wire: RoCEv2 on the wire
//!
//! The bottom layer of ndverbs. It knows the exact bytes Linux Soft-RoCE (rxe)
//! sends and accepts, and nothing else: no sockets, no clocks, no state.
//!
//! ```text
//! IPv4/IPv6 | UDP → 4791 | BTH | ext headers | payload | pad | ICRC
//!   ip.rs      ip.rs     bth.rs   ext.rs               packet.rs  icrc.rs
//!                                 opcode.rs says which headers an opcode has
//! UD SEND to QP1 → payload is a 256-byte MAD (mad.rs) → CM message (cm.rs)
//!                                                    → rdma_cm header (cma.rs)
//! ```
//!
//! Every parser is zero-copy and total: any byte string gives either a value or
//! a [`WireError`] naming the problem — never a panic. Parsed headers keep
//! every bit, reserved ones included, so parse → write reproduces the input
//! exactly (the tests check this on every frame of real captures of Linux rxe).
//! Two things are not kept, because senders must zero them and receivers ignore
//! them: the contents of pad bytes, and the reserved bits inside CM messages.
//!
//! [`capture`] reads and writes pcap/pcapng files for `ndv decode` and packet
//! capture.
//!
//! ```
//! use ndverbs_wire::{bth::Bth, icrc, ip::Envelope, opcode::Opcode, packet::{write_datagram, Datagram, Packet}};
//! let mut bth = Bth::new(Opcode::RC_SEND_ONLY, 0x12, 0x123456);
//! bth.ack_req = true;
//! let mut pkt = Packet::new(bth);
//! pkt.payload = b"0123456789abcdef";
//! let env = Envelope::new_rocev2("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(),
//!                                0xc132, pkt.encoded_len().unwrap());
//! let mut buf = [0u8; 128];
//! let n = write_datagram(&env, &pkt, &mut buf).unwrap();
//! assert!(icrc::verify(&buf[..n]).unwrap());
//! let back = Datagram::parse(&buf[..n]).unwrap();
//! assert_eq!(back.packet.payload, b"0123456789abcdef");
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod be;
pub mod bth;
pub mod capture;
pub mod cm;
pub mod cma;
pub mod error;
pub mod ext;
pub mod icrc;
pub mod ip;
pub mod mad;
pub mod opcode;
pub mod packet;

pub use error::WireError;
