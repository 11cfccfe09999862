//! # ndverbs-nd: the NetworkDirect v2 surface
//!
//! Microsoft NetworkDirect's objects and status rules, in Rust, over the
//! ndverbs verbs layer (and nothing else).
//!
//! **Layers.** An application of this crate talks RoCEv2 to Linux Soft-RoCE
//! (or to another ndverbs) through, from the top:
//!
//! | crate | job |
//! |---|---|
//! | `ndverbs-nd` (this) | ND v2 objects, overlapped requests, ND statuses |
//! | `ndverbs-verbs` | verbs handles: device, PD, MR/MW, CQ, QP, SRQ, CM endpoint |
//! | `ndverbs-engine` | the worker: one UDP socket on port 4791 per local address, timers, object tables |
//! | `ndverbs-proto` | sans-IO state machines: RC requester/responder, connection manager |
//! | `ndverbs-wire` | the bytes: BTH and extension headers, ICRC, MADs, CM messages |
//!
//! **Objects.** Everything starts at the [`Provider`]: one [`Adapter`] per
//! local IP address, which makes all the rest. Objects are cheap handles
//! that keep what they use alive, and each is shown at work in its own
//! example:
//!
//! | ND interface | here |
//! |---|---|
//! | IND2Provider | [`Provider`]: address list, resolve, open |
//! | IND2Adapter | [`Adapter`]: query ([`AdapterInfo`]), create everything below |
//! | IND2CompletionQueue | [`CompletionQueue`]: get results ([`NdResultEntry`]), notify ([`NotifyType`]), resize |
//! | IND2MemoryRegion / IND2MemoryWindow | [`MemoryRegion`], [`MemoryWindow`] |
//! | IND2QueuePair / IND2SharedReceiveQueue | [`QueuePair`], [`SharedReceiveQueue`] |
//! | IND2Connector / IND2Listener | [`Connector`], [`Listener`] |
//!
//! [`spi`] maps every `IND2*` method to its Rust counterpart and every
//! `ND_*` status to the cases that produce it.
//!
//! **Overlapped requests.** A method that can pend returns [`NdPending`] — a
//! runtime-agnostic future with a blocking [`NdPending::wait`] — or an error
//! at once, meaning it was never queued. Every status other than
//! `ND_SUCCESS` is an [`NdError`] carrying the ND value ([`NdStatus`]);
//! `ND_TIMEOUT` is one of them even though ND counts it as success class.
//! Work requests (Send, Receive, Read, Write, Bind, Invalidate) return at once
//! and end as a completion on the queue pair's CQ.
//!
//! **Flags and sizes.** ND's flag words are typed sets that keep ND's
//! values ([`OpFlags`], [`MrFlags`], [`AdapterFlags`]), so a memory flag
//! cannot reach a work request; `CreateQueuePair`'s depths, SGE counts and
//! inline size travel together as one [`QueuePairSizes`].
//!
//! **The disconnect rules.** `Disconnect` sends DREQ, or DREP if the peer's DREQ
//! already arrived, completes when a DREP arrives, the DREQ times out
//! (`ND_TIMEOUT`) or the DREP is sent, and then the QP moves to error and
//! every outstanding request completes `ND_CANCELED`. `NotifyDisconnect` is
//! optional: it completes when a DREQ arrives and flushes nothing — an
//! incoming DREQ never flushes, so requests stay posted until this side's
//! own Disconnect (or Flush). Both sides call Disconnect; the side that heard
//! the DREQ answers with the DREP. Connect, Accept, CompleteConnect and
//! Disconnect run in phases (CM, then QP — or the other way round), naming
//! the QP by id only, on the caller's thread or the engine's with the same
//! outcome ([`spi`] has the rules and every status case by case).
//!
//! **Removal.** [`Adapter::remove`] completes every pending request of every
//! object with `ND_DEVICE_REMOVED` (work requests too: those it flushes;
//! ones flushed before keep `ND_CANCELED`) and later calls fail with it;
//! cleanup — releasing objects, `CancelOverlappedRequests`, `Deregister`,
//! `GetResults` — still works.
//!
//! **Manual progress.** An adapter opened with [`Progress::Manual`] has no
//! engine thread: waiting on a request ([`NdPending::wait`], `.await`) or
//! polling a CQ runs the engine, so one thread can run a whole connection.
//!
//! **Async and event loops.** Pending requests are plain futures: any
//! executor runs them, or none ([`NdPending::wait`]). A
//! [`CompletionQueue`] is also a file descriptor ([`std::os::fd::AsRawFd`],
//! [`std::os::fd::AsFd`]) that [`CompletionQueue::arm`] makes fire on the
//! next completion, so epoll, mio or tokio's `AsyncFd` can wait on it.
//!
//! **Examples** (in `examples/`, run by the tests): `send_receive` (threads,
//! graceful disconnect), `rdma_write_read`, `many_connections` (one server
//! thread, many clients), `async_futures` (the futures under a dependency-free
//! `block_on`), `tokio_echo` (an echo server and clients as tokio tasks,
//! completions awaited through `AsyncFd` on the CQ's descriptor).
//!
//! **Logging.** The library never prints: it reports through `tracing`
//! (spans per connection request and phase with endpoint and QP ids, QP and
//! CM state changes, MADs, retries, flushes, drops); install a subscriber,
//! such as `tracing-subscriber`'s `EnvFilter` reading `RUST_LOG`, to see it.
//!
//! A whole connection on loopback — server on a thread, client on this one:
//!
//! ```
//! use ndverbs_nd::*;
//! use std::net::SocketAddr;
//!
//! /// Waits for one completion (sleeping on the CQ's Notify) and checks it.
//! fn one(cq: &CompletionQueue) -> NdResult<NdResultEntry> {
//!     let r = cq.wait_result()?;
//!     match r.status {
//!         NdStatus::SUCCESS => Ok(r),
//!         s => Err(NdError::new(s, format!("{r:?}"))),
//!     }
//! }
//!
//! let server = Provider.open_adapter("127.91.0.1".parse().unwrap())?;
//! let listener = server.create_listener()?;
//! listener.bind(SocketAddr::new(server.address(), 0))?;
//! listener.listen(4)?;
//! let at = listener.get_local_address()?;
//!
//! let srv = std::thread::spawn(move || -> NdResult<Vec<u8>> {
//!     let cq = server.create_completion_queue(16)?;
//!     let qp = server.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(4, 1))?;
//!     let mr = server.create_memory_region()?;
//!     mr.register(4096, MrFlags::ALLOW_LOCAL_WRITE).wait()?;
//!     qp.receive(1, &[NdSge::new(mr.address(), 4096, mr.local_token())])?;
//!     let conn = server.create_connector()?;
//!     listener.get_connection_request(&conn)?.wait()?;
//!     conn.accept(&qp, 0, 0, b"")?.wait()?;
//!     let dreq = conn.notify_disconnect()?;
//!     let r = one(&cq)?;
//!     let mut text = vec![0; r.bytes_transferred as usize];
//!     mr.read(0, &mut text)?;
//!     dreq.wait()?; // the client is done …
//!     conn.disconnect()?.wait()?; // … and our Disconnect sends the DREP.
//!     Ok(text)
//! });
//!
//! let client = Provider.open_adapter("127.91.0.2".parse().unwrap())?;
//! let cq = client.create_completion_queue(16)?;
//! let qp = client.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(4, 1).with_inline(64))?;
//! let conn = client.create_connector()?;
//! conn.connect(&qp, at, 0, 0, b"")?.wait()?;
//! conn.complete_connect()?.wait()?;
//! qp.send_inline(1, b"hello, server", OpFlags::empty())?;
//! one(&cq)?;
//! conn.disconnect()?.wait()?; // DREQ … DREP
//! assert_eq!(srv.join().unwrap()?, b"hello, server");
//! # Ok::<(), NdError>(())
//! ```

#![warn(missing_docs)]

mod adapter;
mod connector;
mod cq;
mod cq_fd;
mod mr;
mod observe;
mod pending;
mod qp;
pub mod spi;
mod status;

pub use adapter::{
    adapter_id, Adapter, AdapterFlags, AdapterInfo, Provider, MAX_CALLEE_DATA, MAX_CALLER_DATA,
    ND_VERSION_1, ND_VERSION_2,
};
pub use connector::{Connector, Listener, ND_RNR_RETRY};
pub use cq::{CompletionQueue, NdResultEntry, NotifyType, RequestType, MAX_CONTEXT};
pub use mr::{MemoryRegion, MemoryWindow, MrFlags};
pub use pending::NdPending;
pub use qp::{NdSge, OpFlags, QueuePair, QueuePairSizes, SharedReceiveQueue, ND_RETRY_COUNT};
pub use status::{NdError, NdResult, NdStatus};

/// How an adapter is opened ([`Provider::open_adapter_with`]) and what it
/// reports ([`Adapter::stats`]): verbs' types, re-exported so that an ND
/// program needs no second import.
pub use ndverbs_verbs::{AlignedBuf, DeviceConfig, FaultConfig, Progress, StableBuffer, Stats};
