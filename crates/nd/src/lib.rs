//! # ndverbs-nd: the NetworkDirect v2 surface
//!
//! Microsoft NetworkDirect's objects and status rules, in Rust, over the
//! ndverbs verbs layer (and nothing else):
//!
//! | ND interface | here |
//! |---|---|
//! | IND2Provider | [`Provider`]: address list, resolve, open |
//! | IND2Adapter | [`Adapter`]: query, create everything below |
//! | IND2CompletionQueue | [`CompletionQueue`]: get results, notify, resize |
//! | IND2MemoryRegion / IND2MemoryWindow | [`MemoryRegion`], [`MemoryWindow`] |
//! | IND2QueuePair / IND2SharedReceiveQueue | [`QueuePair`], [`SharedReceiveQueue`] |
//! | IND2Connector / IND2Listener | [`Connector`], [`Listener`] |
//!
//! **Overlapped requests.** A method that can pend returns [`NdPending`] — a
//! runtime-agnostic future with a blocking [`NdPending::wait`] — or an error
//! at once, meaning it was never queued. Every status other than
//! `ND_SUCCESS` is an [`NdError`] carrying the ND value ([`NdStatus`]);
//! `ND_TIMEOUT` is one of them even though ND counts it as success class.
//!
//! **The disconnect rules.** `Disconnect` sends DREQ, or DREP if the peer's DREQ
//! already arrived, completes when a DREP arrives, the DREQ times out
//! (`ND_TIMEOUT`) or the DREP is sent, and then the QP moves to error and
//! every outstanding request completes `ND_CANCELED`. `NotifyDisconnect`
//! completes when a DREQ arrives and flushes nothing. Connect, Accept,
//! CompleteConnect and Disconnect run on the engine's worker in phases (CM,
//! then QP — or the other way round), naming the QP by id only.
//!
//! **Removal.** [`Adapter::remove`] completes every pending request of every
//! object with `ND_DEVICE_REMOVED` (work requests too) and later calls fail
//! with it.
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
//! ```no_run
//! use ndverbs_nd::*;
//! let adapter = Provider.open_adapter("127.0.0.1".parse().unwrap())?;
//! let cq = adapter.create_completion_queue(64)?;
//! let qp = adapter.create_queue_pair(&cq, &cq, 1, 16, 16, 1, 1, 0)?;
//! let conn = adapter.create_connector()?;
//! conn.connect(&qp, "127.0.0.2:5000".parse().unwrap(), 1, 1, b"hello")?.wait()?;
//! conn.complete_connect()?.wait()?;
//! conn.disconnect()?.wait()?;
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
mod status;

pub use adapter::{
    adapter_flags, adapter_id, Adapter, AdapterInfo, Provider, MAX_CALLEE_DATA, MAX_CALLER_DATA,
    ND_VERSION_2,
};
pub use connector::{Connector, Listener, ND_RNR_RETRY};
pub use cq::{CompletionQueue, NdResultEntry, NotifyType, RequestType, MAX_CONTEXT};
pub use mr::{mr_flags, MemoryRegion, MemoryWindow};
pub use pending::NdPending;
pub use qp::{op_flags, NdSge, QueuePair, SharedReceiveQueue};
pub use status::{NdError, NdResult, NdStatus};
