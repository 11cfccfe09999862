//! # ndverbs-proto: sans-IO RoCEv2 protocol state machines
//!
//! The layer between the wire formats (`ndverbs-wire`) and the engine that owns
//! sockets and clocks. Everything here is a deterministic state machine:
//!
//! * inputs are `handle_*` calls — a parsed packet, "the clock reached `now`",
//!   an application request;
//! * outputs are `poll_*` calls — the next packet to send, the next deadline,
//!   the next completion;
//! * time is a number passed in ([`time::Instant`]), memory is reached through a
//!   trait ([`mem::Memory`]).
//!
//! No sockets, no threads, no clock, no `unsafe`. The same code runs in the
//! engine, in tests on virtual time with simulated loss, and under fuzzers.
//!
//! | Module | Job |
//! |---|---|
//! | [`time`] | virtual time |
//! | [`limits`] | what every device enforces (queue depths, SGEs, message size) |
//! | [`mem`] | access rights, SGEs, the access checks, the `Memory` trait, scatter/gather, a test memory |
//! | [`rc`] | Reliable Connected QPs: requester, completer, responder; post checks, the connection ladder |
//! | [`ud`] | Unreliable Datagram QPs, e.g. QP1 for the CM's MADs |
//! | [`cm`] | the IB connection manager (REQ/REP/RTU, DREQ/DREP, rdma_cm compatible) |
//!
//! ## Two QPs back to back
//!
//! ```
//! use ndverbs_proto::mem::{testing::VecMemory, Access};
//! use ndverbs_proto::rc::*;
//! use ndverbs_proto::time::Instant;
//! use ndverbs_wire::packet::Packet;
//!
//! // RESET -> INIT -> RTR -> RTS, as ibv_modify_qp would: each expects the
//! // PSN the other sends from.
//! let (mut a, mut b) = (RcQp::new(0x11, 1, QpCaps::default()), RcQp::new(0x22, 1, QpCaps::default()));
//! let to_b = RcConnection { rq_psn: 500, sq_psn: 100, ..RcConnection::new(0x22) };
//! let to_a = RcConnection { rq_psn: 100, sq_psn: 500, ..RcConnection::new(0x11) };
//! for (attr, mask) in to_b.steps() {
//!     a.modify(&attr, mask).unwrap();
//! }
//! for (attr, mask) in to_a.steps() {
//!     b.modify(&attr, mask).unwrap();
//! }
//! let (mut mem_a, mut mem_b) = (VecMemory::new(), VecMemory::new());
//! let (mut rq_a, mut rq_b) = (RecvQueue::new(16, 1), RecvQueue::new(16, 1));
//! let src = mem_a.register_bytes(1, 0x1000, b"hello, rxe".to_vec(), Access::NONE);
//! let dst = mem_b.register(1, 0x2000, 64, Access::LOCAL_WRITE);
//!
//! b.post_recv(&mut rq_b, RecvWr::new(7, vec![dst.sge(0, 64)])).unwrap();
//! a.post_send(SendWr::new(1, SendOp::Send, vec![src.sge(0, 10)])).unwrap();
//!
//! // The engine's loop: drain poll_transmit, deliver, repeat.
//! let now = Instant::from_nanos(0);
//! let mut buf = vec![0u8; a.max_packet_len()];
//! for _ in 0..4 {
//!     while let Some(n) = a.poll_transmit(now, &mut mem_a, &mut buf) {
//!         b.handle_packet(now, &Packet::parse(&buf[..n]).unwrap(), &mut mem_b, &mut rq_b);
//!     }
//!     while let Some(n) = b.poll_transmit(now, &mut mem_b, &mut buf) {
//!         a.handle_packet(now, &Packet::parse(&buf[..n]).unwrap(), &mut mem_a, &mut rq_a);
//!     }
//! }
//! assert_eq!(a.poll_completion().unwrap().status, WcStatus::Success); // ACKed
//! let wc = b.poll_completion().unwrap();
//! assert_eq!((wc.wr_id, wc.byte_len), (7, 10));
//! assert_eq!(&mem_b.bytes(dst.lkey)[..10], b"hello, rxe");
//! assert_eq!(a.poll_timeout(), None); // nothing outstanding: no timer
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cc;
pub mod cm;
pub mod limits;
pub mod mem;
pub mod rc;
pub mod time;
pub mod ud;
