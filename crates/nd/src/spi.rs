//! The ND v2 SPI, method by method and status by status.
//!
//! Every `IND2*` method of `ndspi.h` and where it is here, then every
//! `ND_*` status and what produces it. Where Rust's idiom differs from the
//! C interface the idiom wins, and the rows below say how the two map:
//!
//! - **Objects** are handles: `IUnknown::AddRef` is [`Clone`] (on the
//!   handles that are cheap to share: [`Adapter`], [`CompletionQueue`]) and
//!   `Release` is [`Drop`]. `QueryInterface` and the `iid` argument of every
//!   `Create*` have no counterpart: each call returns its one type.
//! - **Overlapped requests** return [`NdPending`]: `ND_PENDING` is a
//!   request still pending, the OVERLAPPED's final status is the pending's
//!   result, `GetOverlappedResult(wait)` is [`NdPending::wait`] (or
//!   `.await`), without wait [`NdPending::try_take`]. No
//!   `CreateOverlappedFile`: nothing needs a file handle (a CQ's
//!   notifications are also a descriptor, see [`CompletionQueue::arm`]).
//! - **Statuses**: `Ok` is `ND_SUCCESS`; every other status, success class
//!   (`ND_TIMEOUT`) included, is an [`NdError`] carrying it.
//! - **Buffers the caller sizes** return owned values ([`Vec`],
//!   [`SocketAddr`](std::net::SocketAddr), [`AdapterInfo`]): the
//!   `ND_BUFFER_OVERFLOW` size protocol has no case there. Where a
//!   caller-supplied buffer is the idiom (`GetPrivateData` into a slice) it
//!   is kept, with the size in [`NdError::required_size`].
//! - **Addresses** are [`SocketAddr`](std::net::SocketAddr)s, adapters are
//!   named by local address (`AdapterId` is [`adapter_id`] of it), and
//!   contexts are `u64` (request contexts fit in 61 bits,
//!   [`MAX_CONTEXT`]).
//! - **Work requests** refused at post time return the status at once; the
//!   others end as an [`NdResultEntry`] on the queue pair's CQ.
//!
//! # Methods
//!
//! | interface | method | here | notes |
//! |---|---|---|---|
//! | IND2Provider | QueryAddressList | [`Provider::query_address_list`] | a `Vec` |
//! | | ResolveAddress | [`Provider::resolve_address`] | the local address (whose [`adapter_id`] is the AdapterId) |
//! | | OpenAdapter | [`Provider::open_adapter`], [`Provider::open_adapter_with`] | by local address; `_with` adds a [`DeviceConfig`] (manual progress, capture, faults) |
//! | IND2Adapter | CreateOverlappedFile | — | not needed: requests are [`NdPending`]s |
//! | | Query | [`Adapter::query`] | [`ND_VERSION_1`] or [`ND_VERSION_2`]; limits are the device's own, enforced |
//! | | QueryAddressList | [`Adapter::query_address_list`] | its one address |
//! | | CreateCompletionQueue | [`Adapter::create_completion_queue`] | no group/affinity request: see GetNotifyAffinity |
//! | | CreateMemoryRegion | [`Adapter::create_memory_region`] | |
//! | | CreateMemoryWindow | [`Adapter::create_memory_window`] | |
//! | | CreateSharedReceiveQueue | [`Adapter::create_shared_receive_queue`] | depth, SGEs, notify threshold |
//! | | CreateQueuePair | [`Adapter::create_queue_pair`] | sizes as [`QueuePairSizes`]; the QP starts in INIT |
//! | | CreateQueuePairWithSrq | [`Adapter::create_queue_pair_with_srq`] | |
//! | | CreateConnector | [`Adapter::create_connector`] | |
//! | | CreateListener | [`Adapter::create_listener`] | |
//! | IND2Overlapped | CancelOverlappedRequests | `cancel_overlapped_requests` of [`CompletionQueue`](CompletionQueue::cancel_overlapped_requests), [`SharedReceiveQueue`](SharedReceiveQueue::cancel_overlapped_requests), [`MemoryRegion`](MemoryRegion::cancel_overlapped_requests), [`Connector`](Connector::cancel_overlapped_requests), [`Listener`](Listener::cancel_overlapped_requests) | cleanup: succeeds after removal too |
//! | | GetOverlappedResult | [`NdPending::wait`], [`NdPending::wait_timeout`], [`NdPending::try_take`], `.await` | in manual progress waiting runs the engine |
//! | IND2CompletionQueue | GetNotifyAffinity | [`CompletionQueue::get_notify_affinity`] | group 0, the processors of the calling thread |
//! | | Resize | [`CompletionQueue::resize`] | |
//! | | Notify | [`CompletionQueue::notify`] ([`NotifyType`]) | also [`CompletionQueue::wait_result`], and [`CompletionQueue::arm`] for event loops |
//! | | GetResults | [`CompletionQueue::get_results`], [`CompletionQueue::get_result`] | |
//! | IND2SharedReceiveQueue | GetNotifyAffinity | [`SharedReceiveQueue::get_notify_affinity`] | as the CQ's |
//! | | Modify | [`SharedReceiveQueue::modify`] | |
//! | | Notify | [`SharedReceiveQueue::notify`] | |
//! | | Receive | [`SharedReceiveQueue::receive`] | |
//! | IND2MemoryRegion | Register | [`MemoryRegion::register`] (memory it owns), [`MemoryRegion::register_buffer`] (the caller's owned buffer, safe), [`MemoryRegion::register_raw`] (`unsafe`: the caller's memory) | completes before it returns |
//! | | Deregister | [`MemoryRegion::deregister`], [`MemoryRegion::deregister_buffer`] (gives the owned buffer back) | |
//! | | GetLocalToken / GetRemoteToken | [`MemoryRegion::local_token`] / [`MemoryRegion::remote_token`] | also [`MemoryRegion::address`], and [`MemoryRegion::read`]/[`write`](MemoryRegion::write) for owned memory |
//! | IND2MemoryWindow | GetRemoteToken | [`MemoryWindow::remote_token`] | |
//! | IND2QueuePair | Flush | [`QueuePair::flush`] | |
//! | | Send | [`QueuePair::send`]; [`QueuePair::send_inline`] for bytes from anywhere | `ND_OP_FLAG_INLINE` copies at post time from registered memory (safe Rust reads only what it can name) |
//! | | Receive | [`QueuePair::receive`] | |
//! | | Bind | [`QueuePair::bind`] | completes in order through a zero-length Write |
//! | | Invalidate | [`QueuePair::invalidate`] | as Bind |
//! | | Read | [`QueuePair::read`] | |
//! | | Write | [`QueuePair::write`]; [`QueuePair::write_inline`] for bytes from anywhere | as Send |
//! | | (none) | [`QueuePair::fetch_add`], [`QueuePair::compare_swap`] | ndverbs' atomics; complete as Read |
//! | | (none) | [`QueuePair::set_retry_count`] | the transport retries ([`ND_RETRY_COUNT`]; 7: infinite, for rxe-style peers) |
//! | IND2Connector | Bind | [`Connector::bind`] | |
//! | | Connect | [`Connector::connect`] | the QP's retry count travels in the REQ |
//! | | CompleteConnect | [`Connector::complete_connect`] | |
//! | | Accept | [`Connector::accept`] | |
//! | | Reject | [`Connector::reject`] | |
//! | | GetReadLimits | [`Connector::get_read_limits`] | (inbound, outbound) |
//! | | GetPrivateData | [`Connector::get_private_data`] (a `Vec`); into a caller's slice with the size protocol | |
//! | | GetLocalAddress / GetPeerAddress | [`Connector::get_local_address`] / [`Connector::get_peer_address`] | |
//! | | NotifyDisconnect | [`Connector::notify_disconnect`] | |
//! | | Disconnect | [`Connector::disconnect`] | |
//! | IND2Listener | Bind | [`Listener::bind`] | |
//! | | Listen | [`Listener::listen`] | |
//! | | GetLocalAddress | [`Listener::get_local_address`] | |
//! | | GetConnectionRequest | [`Listener::get_connection_request`] | several may be outstanding |
//!
//! # Statuses
//!
//! Each `ND_*` status ([`NdStatus`]) and the cases that produce it. "At
//! once": the call fails and nothing was queued; "completes": a pending
//! request ends with it; "result": an [`NdResultEntry`]'s status.
//!
//! | status | produced by |
//! |---|---|
//! | `ND_SUCCESS` | every call and request that did what it was asked |
//! | `ND_TIMEOUT` (success class) | Connect completes: REQ retries spent (retry it on the same connector and QP); Disconnect completes: our DREQ was never answered (the QP is flushed all the same) |
//! | `ND_PENDING` | never returned: a pending request is an [`NdPending`] |
//! | `ND_BUFFER_OVERFLOW` | at once: CQ Resize below its fill; SRQ Modify below the receives outstanding; a post with more inline bytes than the QP's inline size, or a message beyond `MaxTransferLength`; a caller's buffer too small (with [`NdError::required_size`]) · completes: a CQ Notify after completions were lost to overflow |
//! | `ND_DEVICE_BUSY` | at once: Deregister while a window is bound to the region |
//! | `ND_NO_MORE_ENTRIES` | at once: a post to a full queue (QP or SRQ) |
//! | `ND_UNSUCCESSFUL` | a verbs failure with no ND counterpart (none is known to reach here) |
//! | `ND_ACCESS_VIOLATION` | at once: an inline SGE in no registered region; Bind beyond its region or with rights the region lacks · result: bad local memory (key, bounds, rights), a remote access the peer refused (the initiator of a bad Read or Write) |
//! | `ND_INVALID_HANDLE` | at once: an object id or key the device does not know (released, or another adapter's) |
//! | `ND_INVALID_PARAMETER` | at once: a depth or SGE count beyond the adapter's limits, CQ depth 0, Resize out of range, a Query version other than 1 or `ND_VERSION_2`, `register_raw` of a null pointer, a retry count above 7; GetConnectionRequest on a listener that does not listen |
//! | `ND_INVALID_DEVICE_REQUEST` | at once: Invalidate of a window that is not bound; taking a pending's result twice |
//! | `ND_NO_MEMORY` | at once: Register could not allocate the region |
//! | `ND_INVALID_PARAMETER_MIX` | not produced |
//! | `ND_DATA_OVERRUN` | at once: more SGEs than the queue takes · result: a receive too small for the incoming Send (the receiver's side; ndmval's expectation) |
//! | `STATUS_DATA_ERROR` (0xC000003E) | result: the sender's side of a Send larger than the peer's receive |
//! | `ND_SHARING_VIOLATION` | not produced (a busy address is `ND_ADDRESS_ALREADY_ASSOCIATED`, as Microsoft's tests expect) |
//! | `ND_INSUFFICIENT_RESOURCES` | at once: a CQ deeper than `MaxCompletionQueueDepth`; GetNotifyAffinity when the system will not say |
//! | `ND_DEVICE_NOT_READY` | not produced |
//! | `ND_IO_TIMEOUT` | result: the transport retries ([`QueuePair::retry_count`]) or RNR retries ([`ND_RNR_RETRY`]) ran out — a dead peer, a Send with no receive · completes: Accept whose RTU never came |
//! | `ND_NOT_SUPPORTED` | not produced |
//! | `STATUS_BAD_NETWORK_NAME` | not produced (an address nobody owns times out: `ND_TIMEOUT`) |
//! | `ND_INTERNAL_ERROR` | result: a work completion status with no closer ND status |
//! | `ND_INVALID_PARAMETER_1` | at once: a request context beyond 61 bits |
//! | `ND_INVALID_PARAMETER_3` | at once: unknown Register flags; Invalidate flags it does not take |
//! | `ND_INVALID_PARAMETER_4` | at once: Send flags it does not take |
//! | `ND_INVALID_PARAMETER_6` | at once: Read, Write or Bind flags they do not take (`INLINE` on Read included) |
//! | `ND_INVALID_PARAMETER_7` | at once: [`QueuePair::compare_swap`] flags it does not take |
//! | `ND_INVALID_PARAMETER_2`, `_5`, `_8` … `_10` | not produced |
//! | `ND_CANCELED` | completes: any request after `CancelOverlappedRequests` or the release of its object (Connect, Accept, NotifyDisconnect, GetConnectionRequest, CQ and SRQ Notify), a Disconnect whose QP was released before its QP phase · result: a request flushed by Flush, Disconnect, an earlier error, or the release of its QP (with its QP's context) — also when polled after removal |
//! | `ND_REMOTE_ERROR` | result: the peer failed the operation (remote operation error, bad response) |
//! | `ND_INVALID_ADDRESS` | at once: Bind to an address that is not the adapter's; opening an adapter on an address that is not local or cannot be had |
//! | `ND_INVALID_DEVICE_STATE` | at once: Register of a registered region, Deregister of an unregistered one; Listen or a listener's GetLocalAddress before Bind · completes: CompleteConnect or Accept with no REP or request to act on |
//! | `ND_INVALID_BUFFER_SIZE` | at once: private data beyond `MaxCallerData` (Connect) or `MaxCalleeData` (Accept, Reject); Register of 0 bytes or beyond `MaxRegistrationSize` |
//! | `ND_TOO_MANY_ADDRESSES` | at once: no ephemeral port left (49152–65535) |
//! | `ND_ADDRESS_ALREADY_EXISTS` | not produced |
//! | `STATUS_CONNECTION_DISCONNECTED` | not produced: a NotifyDisconnect pending when our own Disconnect finishes stays pending (cancel it: `ND_CANCELED`) |
//! | `ND_CONNECTION_REFUSED` | completes: Connect answered by a REJ (no listener, backlog full, the peer's Reject), or by ICMP port unreachable from the peer's host (no RoCE endpoint there: nothing to listen at all); Accept answered by a REJ |
//! | `STATUS_ADDRESS_ALREADY_ASSOCIATED` | at once: a second Bind of a connector or listener, a port already bound, Listen on a port already listened on |
//! | `ND_CONNECTION_INVALID` | at once: a Send, Read, Write or Bind on a QP that is not connected; CompleteConnect before Connect; Reject with nothing to reject; GetPeerAddress with no peer, a connector's GetLocalAddress before Bind or Connect; Disconnect never connected, already disconnected, or while Connect is pending, before CompleteConnect, or while Accept waits for its RTU (nothing is sent, the QP is untouched); NotifyDisconnect on a connector that never connected, whose Connect or Accept failed, or whose connection ended without a DREQ |
//! | `ND_CONNECTION_ACTIVE` | at once: a second Connect or Accept on a connector with one under way or done |
//! | `ND_NETWORK_UNREACHABLE` | at once or completes: no route to the peer |
//! | `ND_HOST_UNREACHABLE` | not produced |
//! | `ND_CONNECTION_ABORTED` | completes: Accept whose peer went away; a NotifyDisconnect pending when the connection fails without a DREQ (a REJ on an established connection, a CM timeout) |
//! | `ND_DEVICE_REMOVED` | at once: every call after [`Adapter::remove`] but cleanup (release, `CancelOverlappedRequests`, Deregister, GetResults) · completes: every request pending at removal · result: every request the removal flushed (ones flushed before it stay `ND_CANCELED`) |
//!
//! # The connection rules
//!
//! `Disconnect` sends a DREQ, or a DREP when the peer's DREQ came first, and
//! completes on the DREP (`ND_SUCCESS`), on sending the DREP
//! (`ND_SUCCESS`) or when the DREQ times out (`ND_TIMEOUT`); only then does
//! the QP move to error and every outstanding request flush (`ND_CANCELED`),
//! and those flushes are on the CQ before the Disconnect completes. While
//! our DREQ is outstanding the QP stays in RTS and nothing is flushed. After
//! the peer ended an established connection with a REJ, `Disconnect`
//! completes `ND_SUCCESS` and flushes (nothing to send).
//!
//! `NotifyDisconnect` completes `ND_SUCCESS` only because of a DREQ: when
//! the peer's DREQ arrives, or at once if one already did. An incoming DREQ
//! flushes nothing: the QP keeps its requests until this side's Disconnect.
//!
//! Connect, CompleteConnect, Accept and Disconnect run in phases (CM, then
//! QP, or the other way round) that name the QP by id only; a phase never
//! acts on a QP other than the one its request named. A request whose
//! endpoint has nothing queued runs its phases on the caller's thread; a
//! queued one runs on whichever thread runs the engine next (its thread,
//! or in manual progress a caller that waits or polls). The outcome is the
//! same either way: phases are serialised per endpoint, and a phase's
//! effects are visible before its request completes.

#[allow(unused_imports)] // the links above
use crate::*;
