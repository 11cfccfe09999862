//! Provider and Adapter: finding local RDMA addresses and opening one.
//!
//! ndverbs has one adapter per local IP address: its GID is that address
//! (IPv4-mapped for IPv4) and it owns UDP port 4791 on it. An ND adapter is a
//! verbs device plus one protection domain, which every object created from it
//! shares. Connector and listener ports live in a port space of the adapter's
//! own (rdma_cm service IDs, not TCP ports), with ephemeral ports drawn from
//! 49152–65535.

use crate::connector::{Connector, Listener};
use crate::cq::{CompletionQueue, CqInner};
use crate::mr::{MemoryRegion, MemoryWindow, MrSlot};
use crate::qp::{QueuePair, QueuePairSizes, SharedReceiveQueue};
use crate::status::{NdError, NdResult, NdStatus};
use ndverbs_verbs::{Device, DeviceConfig, DeviceLimits, Error, ErrorKind, Pd, PostError};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// `ND_VERSION_1`: the `InfoVersion` the ND documents give for
/// [`Adapter::query`] (which takes it, as it takes [`ND_VERSION_2`]).
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// let adapter = Provider.open_adapter("127.91.3.2".parse().unwrap())?;
/// // The structure's version is 1 whichever version is asked for.
/// assert_eq!(adapter.query(ND_VERSION_1)?.info_version, 1);
/// assert_eq!(adapter.query(ND_VERSION_1)?, adapter.query(ND_VERSION_2)?);
/// # Ok::<(), NdError>(())
/// ```
pub const ND_VERSION_1: u32 = 0x1;
/// `ND_VERSION_2`.
pub const ND_VERSION_2: u32 = 0x20000;
/// Private data a Connect may carry: 92 bytes of REQ minus the 36-byte rdma_cm header.
pub const MAX_CALLER_DATA: usize = 56;
/// Private data an Accept or Reject may carry (REJ's 148 bytes, the smaller of REP and REJ).
pub const MAX_CALLEE_DATA: usize = 148;

bitflags::bitflags! {
    /// `ND2_ADAPTER_INFO.AdapterFlags`, with ND's values: what the adapter
    /// supports. An ndverbs adapter reports [`AdapterFlags::REPORTED`].
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// let adapter = Provider.open_adapter("127.91.3.3".parse().unwrap())?;
    /// let flags = adapter.query(ND_VERSION_2)?.adapter_flags;
    /// assert_eq!(flags, AdapterFlags::REPORTED);
    /// assert!(!flags.contains(AdapterFlags::MULTI_ENGINE_SUPPORTED));
    /// assert_eq!(AdapterFlags::CQ_INTERRUPT_MODERATION_SUPPORTED.bits(), 0x4);
    /// # Ok::<(), NdError>(())
    /// ```
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AdapterFlags: u32 {
        /// DMA completes in order.
        const IN_ORDER_DMA_SUPPORTED = 0x1;
        /// Completion queues support interrupt moderation (not reported:
        /// ndverbs has no interrupts to moderate).
        const CQ_INTERRUPT_MODERATION_SUPPORTED = 0x4;
        /// Completion queues progress in parallel (not reported: one
        /// engine per adapter runs them all).
        const MULTI_ENGINE_SUPPORTED = 0x8;
        /// CQs can be resized.
        const CQ_RESIZE_SUPPORTED = 0x100;
        /// Connections to the same adapter work.
        const LOOPBACK_CONNECTIONS_SUPPORTED = 0x10000;
    }
}

impl AdapterFlags {
    /// What an ndverbs adapter supports: in-order placement (a QP's data
    /// lands in PSN order), CQ resize and loopback connections.
    pub const REPORTED: AdapterFlags = AdapterFlags::IN_ORDER_DMA_SUPPORTED
        .union(AdapterFlags::CQ_RESIZE_SUPPORTED)
        .union(AdapterFlags::LOOPBACK_CONNECTIONS_SUPPORTED);
}

/// `ND2_ADAPTER_INFO`, field for field. Every limit is the device's own
/// ([`DeviceLimits`]) and is enforced: a queue, SGE count, inline size or
/// registration beyond it is refused.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// let adapter = Provider.open_adapter("127.91.3.1".parse().unwrap())?;
/// let info: AdapterInfo = adapter.query(ND_VERSION_2)?;
/// // Size queues and private data within the limits.
/// let depth = 256.min(info.max_completion_queue_depth);
/// let cq = adapter.create_completion_queue(depth)?;
/// assert_eq!(info.max_caller_data as usize, MAX_CALLER_DATA);
/// assert!(info.adapter_flags.contains(AdapterFlags::LOOPBACK_CONNECTIONS_SUPPORTED));
/// assert!(info.adapter_flags.contains(AdapterFlags::CQ_RESIZE_SUPPORTED));
/// cq.resize(depth / 2)?;
/// # Ok::<(), NdError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdapterInfo {
    /// Info version.
    pub info_version: u32,
    /// Vendor ID.
    pub vendor_id: u16,
    /// Device ID.
    pub device_id: u16,
    /// Adapter ID (what `resolve_address` returns).
    pub adapter_id: u64,
    /// Largest registration.
    pub max_registration_size: usize,
    /// Largest window.
    pub max_window_size: usize,
    /// SGEs per initiator request.
    pub max_initiator_sge: u32,
    /// SGEs per receive.
    pub max_receive_sge: u32,
    /// SGEs per RDMA READ.
    pub max_read_sge: u32,
    /// Largest transfer.
    pub max_transfer_length: u32,
    /// Largest inline send.
    pub max_inline_data_size: u32,
    /// Most inbound READ/atomics per QP.
    pub max_inbound_read_limit: u32,
    /// Most outbound READ/atomics per QP.
    pub max_outbound_read_limit: u32,
    /// Receive queue depth.
    pub max_receive_queue_depth: u32,
    /// Initiator queue depth.
    pub max_initiator_queue_depth: u32,
    /// SRQ depth.
    pub max_shared_receive_queue_depth: u32,
    /// CQ depth.
    pub max_completion_queue_depth: u32,
    /// Below this, sends go inline.
    pub inline_request_threshold: u32,
    /// Above this, zero-copy pays.
    pub large_request_threshold: u32,
    /// Connect private data limit.
    pub max_caller_data: u32,
    /// Accept/Reject private data limit.
    pub max_callee_data: u32,
    /// Adapter flags.
    pub adapter_flags: AdapterFlags,
}

/// The adapter ID for an address (stable, distinct per address).
pub fn adapter_id(addr: IpAddr) -> u64 {
    match addr {
        IpAddr::V4(a) => u64::from(u32::from(a)),
        IpAddr::V6(a) => {
            let o = a.octets();
            (1 << 63) | u64::from_be_bytes([0, o[9], o[10], o[11], o[12], o[13], o[14], o[15]])
        }
    }
}

/// The entry point: local addresses and adapters.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// use std::net::IpAddr;
/// // QueryAddressList: the local addresses, each of which can host an adapter.
/// let addresses = Provider.query_address_list()?;
/// assert!(addresses.contains(&IpAddr::from([127, 0, 0, 1])));
/// // ResolveAddress: which local address reaches a peer.
/// let local = Provider.resolve_address("127.91.1.2:4791".parse().unwrap())?;
/// assert!(local.is_loopback());
/// // OpenAdapter: the RoCEv2 port of one address (it binds UDP 4791 there;
/// // on Linux every 127.x.y.z is local, so tests use one address per adapter).
/// let adapter = Provider.open_adapter("127.91.1.1".parse().unwrap())?;
/// assert_eq!(adapter.address(), IpAddr::from([127, 91, 1, 1]));
/// // With a configuration: here manual progress (`DeviceConfig::from_env()`
/// // would add what the NDV_* variables ask for: the library never reads them).
/// let config = DeviceConfig { progress: Progress::Manual, ..DeviceConfig::default() };
/// let manual = Provider.open_adapter_with("127.91.1.3".parse().unwrap(), &config)?;
/// assert_eq!(manual.device().progress_mode(), Progress::Manual);
/// # Ok::<(), NdError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Provider;

impl Provider {
    /// Every local IP address that can host an adapter (`QueryAddressList`):
    /// the addresses of [`Device::list`], in order.
    pub fn query_address_list(&self) -> NdResult<Vec<IpAddr>> {
        let devices = Device::list().map_err(nd_err)?;
        Ok(devices.into_iter().map(|d| d.addr).collect())
    }

    /// The local address an adapter must have to reach `remote`
    /// (`ResolveAddress`; [`Device::route_to`]).
    pub fn resolve_address(&self, remote: SocketAddr) -> NdResult<IpAddr> {
        Device::route_to(remote.ip()).map_err(nd_err)
    }

    /// Opens the adapter of local address `addr` with the default
    /// configuration (an engine thread; no capture, counters or faults).
    pub fn open_adapter(&self, addr: IpAddr) -> NdResult<Adapter> {
        Adapter::open(addr, &DeviceConfig::default())
    }

    /// Opens the adapter of local address `addr` as `config` says.
    pub fn open_adapter_with(&self, addr: IpAddr, config: &DeviceConfig) -> NdResult<Adapter> {
        Adapter::open(addr, config)
    }
}

pub(crate) struct AdapterInner {
    pub(crate) dev: Device,
    pub(crate) pd: Pd,
    pub(crate) addr: IpAddr,
    /// Ports bound by listeners and connectors.
    pub(crate) ports: Mutex<HashSet<u16>>,
    next_port: Mutex<u16>,
    /// The completion queues, told where the removal's flushes begin.
    cqs: Mutex<Vec<Weak<CqInner>>>,
    /// Registered regions by local token: what inline requests copy from.
    regions: Mutex<HashMap<u32, Weak<MrSlot>>>,
    /// Held while a queue pair is created or destroyed together with its
    /// entry in its CQs' books: a QPN reused at once by a new QP never
    /// takes the context of the QP it replaced.
    pub(crate) qp_lifecycle: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An ND adapter. Cheap to clone.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// let adapter = Provider.open_adapter("127.91.2.1".parse().unwrap())?;
/// assert_eq!(adapter.query(ND_VERSION_2)?.adapter_id, adapter_id(adapter.address()));
/// // Every other object is made by the adapter (and shares its protection domain).
/// let cq = adapter.create_completion_queue(16)?;
/// let qp = adapter.create_queue_pair(&cq, &cq, 0, QueuePairSizes::new(4, 1))?;
/// let mr = adapter.create_memory_region()?;
/// mr.register(4096, MrFlags::ALLOW_LOCAL_WRITE).wait()?;
/// qp.receive(1, &[NdSge::new(mr.address(), 4096, mr.local_token())])?;
/// // Removal: pending requests complete ND_DEVICE_REMOVED, later calls fail with it.
/// adapter.remove();
/// assert!(adapter.is_removed());
/// let err = adapter.create_completion_queue(16).unwrap_err();
/// assert_eq!(err.status, NdStatus::DEVICE_REMOVED);
/// # Ok::<(), NdError>(())
/// ```
#[derive(Clone)]
pub struct Adapter {
    pub(crate) inner: Arc<AdapterInner>,
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter")
            .field("addr", &self.inner.addr)
            .finish()
    }
}

/// The ND status of a verbs error kind.
pub(crate) fn nd_status(kind: ErrorKind) -> NdStatus {
    use ErrorKind as K;
    match kind {
        K::DeviceRemoved => NdStatus::DEVICE_REMOVED,
        K::Access => NdStatus::ACCESS_VIOLATION,
        K::NotFound => NdStatus::INVALID_HANDLE,
        K::Busy => NdStatus::DEVICE_BUSY,
        K::InvalidArgument => NdStatus::INVALID_PARAMETER,
        K::InvalidState => NdStatus::INVALID_DEVICE_STATE,
        K::NotConnected => NdStatus::CONNECTION_INVALID,
        K::QueueFull => NdStatus::NO_MORE_ENTRIES,
        K::NoMemory => NdStatus::NO_MEMORY,
        K::Overflow => NdStatus::BUFFER_OVERFLOW,
        // ND has no status for a failed system call; resources is the
        // nearest (a socket or descriptor could not be had).
        K::Io => NdStatus::INSUFFICIENT_RESOURCES,
        K::AddressInUse => NdStatus::ADDRESS_ALREADY_ASSOCIATED,
        K::AddressNotAvailable => NdStatus::INVALID_ADDRESS,
        K::Unreachable => NdStatus::NETWORK_UNREACHABLE,
        // No RoCE endpoint at the peer's host is refused as a missing
        // listener is (REJ 8): nothing there accepts connections.
        K::Rejected | K::PortUnreachable => NdStatus::CONNECTION_REFUSED,
        K::TimedOut => NdStatus::TIMEOUT,
        K::Canceled => NdStatus::CANCELED,
        K::ConnectionAborted => NdStatus::CONNECTION_ABORTED,
        // A request the engine lost: a bug of ours, never a device removal.
        K::Internal => NdStatus::INTERNAL_ERROR,
        _ => NdStatus::UNSUCCESSFUL,
    }
}

/// Maps a verbs error to an ND error, by kind.
pub(crate) fn nd_err(e: Error) -> NdError {
    NdError::new(nd_status(e.kind()), e.to_string())
}

/// Maps a refused post to ND's post statuses (§4 of the ND rules): a QP
/// that is not connected is `ND_CONNECTION_INVALID`, too many SGEs
/// `ND_DATA_OVERRUN`, too much inline data or a message beyond
/// `MaxTransferLength` `ND_BUFFER_OVERFLOW` ("more data than the hardware
/// supports").
pub(crate) fn post_err(e: Error) -> NdError {
    let status = match (e.kind(), e.post_error()) {
        (ErrorKind::InvalidState, _) => NdStatus::CONNECTION_INVALID,
        (_, Some(PostError::TooManySges { .. })) => NdStatus::DATA_OVERRUN,
        (_, Some(PostError::InlineTooLarge { .. } | PostError::MessageTooLong(_))) => {
            NdStatus::BUFFER_OVERFLOW
        }
        (kind, _) => nd_status(kind),
    };
    NdError::new(status, e.to_string())
}

impl Adapter {
    /// Opens the adapter of `addr` as `config` says (what
    /// [`Provider::open_adapter_with`] does). An address that is not local
    /// or cannot be opened is `ND_INVALID_ADDRESS`.
    pub fn open(addr: IpAddr, config: &DeviceConfig) -> NdResult<Adapter> {
        let dev = Device::open_with(addr, config).map_err(|e| {
            let mut err = nd_err(e);
            if !err.status.is_error()
                || matches!(
                    err.status,
                    NdStatus::INSUFFICIENT_RESOURCES | NdStatus::ADDRESS_ALREADY_ASSOCIATED
                )
            {
                err.status = NdStatus::INVALID_ADDRESS;
            }
            err
        })?;
        let pd = dev.alloc_pd().map_err(nd_err)?;
        Ok(Adapter {
            inner: Arc::new(AdapterInner {
                dev,
                pd,
                addr,
                ports: Mutex::new(HashSet::new()),
                next_port: Mutex::new(49152),
                cqs: Mutex::default(),
                regions: Mutex::default(),
                qp_lifecycle: Mutex::default(),
            }),
        })
    }

    /// The local address.
    pub fn address(&self) -> IpAddr {
        self.inner.addr
    }

    /// The verbs device underneath.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// `Query`: the adapter's limits (`info_version` [`ND_VERSION_1`] or
    /// [`ND_VERSION_2`] accepted). The structure is returned whole, so
    /// ND's `ND_BUFFER_OVERFLOW` size protocol has no case here.
    pub fn query(&self, info_version: u32) -> NdResult<AdapterInfo> {
        if info_version != ND_VERSION_1 && info_version != ND_VERSION_2 {
            return Err(NdError::new(
                NdStatus::INVALID_PARAMETER,
                "InfoVersion must be ND_VERSION_1 or ND_VERSION_2",
            ));
        }
        if self.inner.dev.is_removed() {
            return Err(NdError::new(NdStatus::DEVICE_REMOVED, "adapter removed"));
        }
        let l = self.limits();
        let max_mr = usize::try_from(l.max_mr_size).unwrap_or(usize::MAX);
        Ok(AdapterInfo {
            info_version: 1,
            vendor_id: 0x4e44,
            device_id: 2,
            adapter_id: adapter_id(self.inner.addr),
            max_registration_size: max_mr,
            max_window_size: max_mr,
            max_initiator_sge: l.max_sge,
            max_receive_sge: l.max_sge,
            max_read_sge: l.max_sge,
            max_transfer_length: u32::try_from(l.max_msg_size).unwrap_or(u32::MAX),
            max_inline_data_size: l.max_inline_data,
            max_inbound_read_limit: u32::from(l.max_qp_rd_atom),
            max_outbound_read_limit: u32::from(l.max_qp_rd_atom),
            max_receive_queue_depth: l.max_qp_wr,
            max_initiator_queue_depth: l.max_qp_wr,
            max_shared_receive_queue_depth: l.max_qp_wr,
            max_completion_queue_depth: l.max_cqe,
            inline_request_threshold: 160,
            large_request_threshold: 64 * 1024,
            max_caller_data: MAX_CALLER_DATA as u32,
            max_callee_data: MAX_CALLEE_DATA as u32,
            adapter_flags: AdapterFlags::REPORTED,
        })
    }

    /// The device's limits: what `Query` reports and every call enforces.
    pub(crate) fn limits(&self) -> DeviceLimits {
        self.inner.dev.query().limits
    }

    /// Local addresses (`QueryAddressList` on the adapter: its own).
    pub fn query_address_list(&self) -> Vec<IpAddr> {
        vec![self.inner.addr]
    }

    /// A completion queue of `depth` entries.
    pub fn create_completion_queue(&self, depth: u32) -> NdResult<CompletionQueue> {
        CompletionQueue::create(self, depth)
    }

    /// An unregistered memory region.
    pub fn create_memory_region(&self) -> NdResult<MemoryRegion> {
        MemoryRegion::create(self)
    }

    /// A memory window.
    pub fn create_memory_window(&self) -> NdResult<MemoryWindow> {
        MemoryWindow::create(self)
    }

    /// A queue pair in INIT (receives may be posted before it connects),
    /// completing receives on `receive_cq` and everything else on
    /// `initiator_cq`; `context` comes with each of its completions.
    pub fn create_queue_pair(
        &self,
        receive_cq: &CompletionQueue,
        initiator_cq: &CompletionQueue,
        context: u64,
        sizes: QueuePairSizes,
    ) -> NdResult<QueuePair> {
        QueuePair::create(self, (receive_cq, initiator_cq), None, context, sizes)
    }

    /// A queue pair that receives through `srq` (the receive sizes of
    /// `sizes` are the SRQ's, and not used).
    pub fn create_queue_pair_with_srq(
        &self,
        receive_cq: &CompletionQueue,
        initiator_cq: &CompletionQueue,
        srq: &SharedReceiveQueue,
        context: u64,
        sizes: QueuePairSizes,
    ) -> NdResult<QueuePair> {
        let sizes = QueuePairSizes {
            receive_queue_depth: 0,
            max_receive_sge: 0,
            ..sizes
        };
        QueuePair::create(self, (receive_cq, initiator_cq), Some(srq), context, sizes)
    }

    /// A shared receive queue of `depth` receives of up to `max_sge` SGEs
    /// each, whose `Notify` completes when fewer than `notify_threshold`
    /// receives are outstanding (0: no threshold until
    /// [`SharedReceiveQueue::modify`] sets one).
    pub fn create_shared_receive_queue(
        &self,
        depth: u32,
        max_sge: u32,
        notify_threshold: u32,
    ) -> NdResult<SharedReceiveQueue> {
        SharedReceiveQueue::create(self, depth, max_sge, notify_threshold)
    }

    /// A connector.
    pub fn create_connector(&self) -> NdResult<Connector> {
        Connector::create(self)
    }

    /// A listener.
    pub fn create_listener(&self) -> NdResult<Listener> {
        Listener::create(self)
    }

    /// Removes the adapter (as if the device went away): every pending request
    /// of every object completes with `ND_DEVICE_REMOVED`, every outstanding work
    /// request too, and later calls fail with it.
    pub fn remove(&self) {
        // What is queued now was flushed (or completed) before the removal:
        // it keeps its status.
        for cq in self.live_cqs() {
            cq.mark_removal();
        }
        self.inner.dev.remove();
    }

    /// Serialises QP creation and destruction with their CQ bookkeeping.
    pub(crate) fn lock_qp_lifecycle(&self) -> MutexGuard<'_, ()> {
        lock(&self.inner.qp_lifecycle)
    }

    /// `GetNotifyAffinity` of the adapter's CQs and SRQs: processor group 0
    /// and the processors the calling thread may run on (the engine thread
    /// that completes notifications, or the caller itself in manual
    /// progress, runs there; ndverbs sets no affinity of its own).
    pub(crate) fn notify_affinity(&self) -> NdResult<(u16, u64)> {
        if self.is_removed() {
            return Err(NdError::new(NdStatus::DEVICE_REMOVED, "adapter removed"));
        }
        // SAFETY: `set` is a plain bitmask the call fills; its size is passed.
        let set = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
                return Err(NdError::new(
                    NdStatus::INSUFFICIENT_RESOURCES,
                    std::io::Error::last_os_error().to_string(),
                ));
            }
            set
        };
        // Group 0 is processors 0 to 63 (a KAFFINITY's bits).
        let mask = (0..64).fold(0u64, |m, cpu| {
            // SAFETY: `cpu` is within the set.
            m | (u64::from(unsafe { libc::CPU_ISSET(cpu, &set) }) << cpu)
        });
        Ok((0, mask))
    }

    /// Registers `cq` with the adapter (see [`Adapter::remove`]).
    pub(crate) fn track_cq(&self, cq: &Arc<CqInner>) {
        let mut cqs = lock(&self.inner.cqs);
        cqs.retain(|w| w.strong_count() > 0);
        cqs.push(Arc::downgrade(cq));
    }

    fn live_cqs(&self) -> Vec<Arc<CqInner>> {
        lock(&self.inner.cqs)
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Region `slot` is registered under local token `lkey`.
    pub(crate) fn track_region(&self, lkey: u32, slot: &Arc<MrSlot>) {
        let mut regions = lock(&self.inner.regions);
        regions.retain(|_, w| w.strong_count() > 0);
        regions.insert(lkey, Arc::downgrade(slot));
    }

    /// The region of local token `lkey` is gone.
    pub(crate) fn forget_region(&self, lkey: u32) {
        lock(&self.inner.regions).remove(&lkey);
    }

    /// The registered regions: the one of local token `lkey` first (if
    /// any), then every other.
    pub(crate) fn regions(&self, lkey: u32) -> Vec<Arc<MrSlot>> {
        let regions = lock(&self.inner.regions);
        let first = regions.get(&lkey).and_then(Weak::upgrade);
        let rest = regions
            .iter()
            .filter(|&(&k, _)| k != lkey)
            .filter_map(|(_, w)| w.upgrade());
        first.into_iter().chain(rest).collect()
    }

    /// True once removed.
    pub fn is_removed(&self) -> bool {
        self.inner.dev.is_removed()
    }

    /// Reserves `port` (or an ephemeral one for 0) in the adapter's port space.
    pub(crate) fn reserve_port(&self, port: u16) -> NdResult<u16> {
        let mut ports = self.inner.ports.lock().unwrap_or_else(|e| e.into_inner());
        if port != 0 {
            if !ports.insert(port) {
                return Err(NdError::new(
                    NdStatus::ADDRESS_ALREADY_ASSOCIATED,
                    format!("port {port} is in use"),
                ));
            }
            return Ok(port);
        }
        let mut next = self
            .inner
            .next_port
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for _ in 0..(65536 - 49152) {
            let p = *next;
            *next = if p == 65535 { 49152 } else { p + 1 };
            if ports.insert(p) {
                return Ok(p);
            }
        }
        Err(NdError::new(
            NdStatus::TOO_MANY_ADDRESSES,
            "no ephemeral port left",
        ))
    }

    pub(crate) fn release_port(&self, port: u16) {
        self.inner
            .ports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&port);
    }

    /// Checks that `addr` is this adapter's (or unspecified).
    pub(crate) fn check_local(&self, addr: IpAddr) -> NdResult<()> {
        if addr.is_unspecified() || addr == self.inner.addr {
            Ok(())
        } else {
            Err(NdError::new(
                NdStatus::INVALID_ADDRESS,
                format!("{addr} is not this adapter's address"),
            ))
        }
    }
}
