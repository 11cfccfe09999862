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
//! | [`mem`] | access rights, SGEs, the `Memory` trait, scatter/gather, a test memory |
//! | [`rc`] | Reliable Connected QPs: requester, completer, responder |

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod mem;
pub mod rc;
pub mod time;
