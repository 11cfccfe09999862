//! # ndverbs-engine: the provider's worker
//!
//! What a kernel driver is for WinVerbs, this crate is for ndverbs: the only
//! crate with sockets, threads and the clock. It owns each NIC's link, the
//! timers and the object tables, and drives the sans-IO state machines of
//! `ndverbs-proto` with packets and time.
//!
//! * [`nic`] — a software RoCE NIC: one local IP address, its link, object
//!   tables and worker; the control and post paths and the engine loop.
//! * [`link`] — how packets reach the network: the [`Link`](link::Link)
//!   trait, a UDP socket on `<ip>:4791` with GSO/GRO, an in-memory pair for
//!   tests, and the fault-injecting and capturing wrappers.
//! * [`icrc`] — the ICRC, computed for the IP ID the kernel will write and
//!   verified on receive by solving for the ID the socket hides.
//! * [`ep`] — connection endpoints: CM requests run phase by phase.
//! * [`mr`], [`cq`], [`gsi`], [`keys`], [`pending`], [`event`] — memory
//!   regions, completion queues, QP1, unpredictable keys, pending results,
//!   eventfd doorbells.
//! * [`config`], [`counters`], [`stats`], [`resources`], [`metrics`],
//!   [`error`] — how a NIC is opened (and every environment variable the
//!   engine reads), its counters, its live objects and their publication
//!   (files for `ndv stat` and `ndv res`, an OpenMetrics endpoint), and the
//!   error of engine calls (the limits it enforces are
//!   `ndverbs_proto::limits`).

pub mod config;
pub mod counters;
pub mod cq;
pub mod ep;
pub mod error;
pub mod event;
pub mod gsi;
pub mod icrc;
pub mod keys;
pub mod link;
pub mod metrics;
pub mod mr;
pub mod nic;
pub mod pending;
pub mod resources;
pub mod share;
pub mod stats;
