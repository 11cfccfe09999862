//! # ndverbs-engine: the provider's worker
//!
//! What a kernel driver is for WinVerbs, this crate is for ndverbs: it owns the
//! UDP socket of each adapter, the timers and the object tables, and drives the
//! sans-IO state machines of `ndverbs-proto` with packets and time.
//!
//! * [`udp`] — RoCEv2 datagrams over a plain UDP socket bound to `<ip>:4791`,
//!   with the ICRC computed for the IP ID the kernel will write and verified on
//!   receive by solving for the ID the socket hides.

pub mod adapter;
pub mod capture;
pub mod cq;
pub mod ep;
pub mod event;
pub mod faults;
pub mod gsi;
pub mod keys;
pub mod mr;
pub mod pending;
pub mod stats;
pub mod udp;
