//! Devices, protection domains and completion queues.

use crate::memory::{Mr, Mw};
use crate::qp::{Qp, QpInitAttr, Srq};
use crate::{Result, VerbsError};
use ndverbs_engine::config::Progress;
use ndverbs_engine::cq::{CompletionQueue, NotifyOn, ResizeError};
use ndverbs_engine::limits::{Limits, LIMITS};
use ndverbs_engine::mr::RegionBuf;
use ndverbs_engine::nic::{node_guid, Nic};
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::WorkCompletion;
use ndverbs_wire::cma::gid_of;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A device: the RoCEv2 port of one local IP address. Cheap to clone.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// use std::net::IpAddr;
/// // One device per local address: its RoCEv2 port is UDP 4791 on that address.
/// let dev = Device::open("127.92.1.1".parse().unwrap())?;
/// assert_eq!(dev.query().addr, IpAddr::from([127, 92, 1, 1]));
/// assert_eq!(dev.gid(), "::ffff:127.92.1.1".parse::<std::net::Ipv6Addr>()?);
/// let pd = dev.alloc_pd()?;
/// let cq = dev.create_cq(64)?;
/// // Manual progress: no engine thread; polling a CQ (or `progress`) runs the engine.
/// let manual = Device::open_with("127.92.1.2".parse().unwrap(), Progress::Manual)?;
/// manual.progress();
/// // Counters by rxe's names.
/// assert_eq!(manual.stats().get("sent_pkts"), 0);
/// // Removal: outstanding work is flushed, later calls fail.
/// dev.remove();
/// assert!(dev.is_removed());
/// assert!(matches!(dev.alloc_pd(), Err(VerbsError::DeviceRemoved)));
/// # drop((pd, cq));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Device {
    pub(crate) adapter: Nic,
}

/// What a device reports about itself.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.2.1".parse().unwrap())?;
/// let attr: DeviceAttr = dev.query();
/// assert_eq!(attr.gid, dev.gid());
/// assert_eq!(attr.node_guid, node_guid(attr.addr));
/// assert_eq!(attr.limits, LIMITS);
/// // Size objects within the limits.
/// let cq = dev.create_cq(1 << 12.min(attr.limits.max_cqe))?;
/// assert!(cq.depth() <= attr.limits.max_cqe as usize);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAttr {
    /// The local address.
    pub addr: IpAddr,
    /// Its GID (IPv4-mapped for IPv4).
    pub gid: Ipv6Addr,
    /// Node GUID, derived from the address: the CA GUID the connection
    /// manager sends ([`ndverbs_engine::nic::node_guid`]).
    pub node_guid: u64,
    /// Enforced limits.
    pub limits: Limits,
}

impl Device {
    /// Opens the device for `addr` with an engine thread.
    pub fn open(addr: IpAddr) -> Result<Device> {
        Self::open_with(addr, Progress::Thread)
    }

    /// Opens the device for `addr` with the given progress model.
    pub fn open_with(addr: IpAddr, progress: Progress) -> Result<Device> {
        Ok(Device {
            adapter: Nic::open(addr, progress)?,
        })
    }

    /// Device attributes.
    pub fn query(&self) -> DeviceAttr {
        let addr = self.adapter.local();
        DeviceAttr {
            addr,
            gid: gid_of(addr),
            node_guid: node_guid(addr),
            limits: LIMITS,
        }
    }

    /// The GID of the port (index 0 of its GID table).
    pub fn gid(&self) -> Ipv6Addr {
        gid_of(self.adapter.local())
    }

    /// The engine behind the device (for layers that drive it directly).
    pub fn adapter(&self) -> &Nic {
        &self.adapter
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        let id = self.adapter.alloc_pd()?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                dev: self.clone(),
                id,
            }),
        })
    }

    /// Creates a completion queue of `depth` entries.
    pub fn create_cq(&self, depth: u32) -> Result<Cq> {
        let (id, cq) = self.adapter.create_cq(depth)?;
        Ok(Cq {
            inner: Arc::new(CqInner {
                dev: self.clone(),
                id,
                cq,
            }),
        })
    }

    /// Runs the engine once (manual progress; a no-op while the engine thread
    /// runs it).
    pub fn progress(&self) {
        self.adapter.progress();
    }

    /// Removes the device: outstanding work is flushed and later calls fail
    /// with [`VerbsError::DeviceRemoved`].
    pub fn remove(&self) {
        self.adapter.remove();
    }

    /// True once removed.
    pub fn is_removed(&self) -> bool {
        self.adapter.is_removed()
    }
}

#[derive(Debug)]
pub(crate) struct PdInner {
    pub(crate) dev: Device,
    pub(crate) id: u32,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // Everything that used the PD held a reference to it, so it is unused now.
        let _ = self.dev.adapter.dealloc_pd(self.id);
    }
}

/// A protection domain.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.3.1".parse().unwrap())?;
/// let pd = dev.alloc_pd()?;
/// let cq = dev.create_cq(16)?;
/// // Memory, windows, QPs and SRQs belong to a PD: only those of one PD meet.
/// let mr = pd.reg_mr(4096, Access::LOCAL_WRITE)?;
/// let mw = pd.alloc_mw()?;
/// let srq = pd.create_srq(16, 1)?;
/// let mut init = QpInitAttr::new(&cq, &cq);
/// init.srq = Some(&srq);
/// let qp = pd.create_qp(&init)?;
/// assert_eq!(qp.state(), QpState::Reset);
/// // Handles keep what they use alive: the PD lives on in its objects.
/// drop(pd);
/// srq.post_recv(RecvWr::new(1, vec![mr.sge(0, 4096)]))?;
/// # drop(mw);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Pd {
    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// Registers `len` bytes of zeroed memory the region owns.
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<Mr> {
        let buf = RegionBuf::alloc(len).map_err(|e| VerbsError::Engine(e.into()))?;
        let region = self.inner.dev.adapter.reg_mr(self.inner.id, buf, access)?;
        Ok(Mr::new(region, self.inner.clone()))
    }

    /// Registers application memory in place.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid for reads and writes, and must not be
    /// accessed through Rust references, until the returned [`Mr`] is dropped.
    pub unsafe fn reg_mr_raw(
        &self,
        ptr: std::ptr::NonNull<u8>,
        len: usize,
        access: Access,
    ) -> Result<Mr> {
        // SAFETY: forwarded to the caller.
        let buf =
            unsafe { RegionBuf::from_raw(ptr, len) }.map_err(|e| VerbsError::Engine(e.into()))?;
        let region = self.inner.dev.adapter.reg_mr(self.inner.id, buf, access)?;
        Ok(Mr::new(region, self.inner.clone()))
    }

    /// Allocates an (unbound) memory window.
    pub fn alloc_mw(&self) -> Result<Mw> {
        let key = self.inner.dev.adapter.alloc_mw(self.inner.id)?;
        Ok(Mw::new(key, self.inner.clone()))
    }

    /// Creates a queue pair.
    pub fn create_qp(&self, init: &QpInitAttr<'_>) -> Result<Qp> {
        Qp::create(self, init)
    }

    /// Creates a shared receive queue.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        Srq::create(self, max_wr, max_sge)
    }
}

#[derive(Debug)]
pub(crate) struct CqInner {
    pub(crate) dev: Device,
    pub(crate) id: u32,
    pub(crate) cq: Arc<CompletionQueue>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let _ = self.dev.adapter.destroy_cq(self.id);
    }
}

/// A completion queue.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// use std::time::Duration;
/// # fn connect(
/// #     (da, qa): (&Device, &Qp),
/// #     (db, qb): (&Device, &Qp),
/// # ) -> std::result::Result<(Endpoint, Endpoint), Box<dyn std::error::Error>> {
/// #     for qp in [qa, qb] {
/// #         let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
/// #         qp.modify(&init, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS)?;
/// #     }
/// #     let listener = Endpoint::new(db)?;
/// #     listener.listen(7000, 1)?;
/// #     let (ea, eb) = (Endpoint::new(da)?, Endpoint::new(db)?);
/// #     let request = listener.get_request(&eb)?;
/// #     let rep = ea.connect(qa, ConnectArgs {
/// #         remote: db.query().addr,
/// #         remote_port: 7000,
/// #         local_port: 40000,
/// #         responder_resources: 1,
/// #         initiator_depth: 1,
/// #         retry_count: 7,
/// #         rnr_retry_count: 7,
/// #         path_mtu: PathMtu::Mtu1024,
/// #         private_data: vec![],
/// #     })?;
/// #     request.wait()?;
/// #     let rtu = eb.accept(qb, AcceptArgs {
/// #         responder_resources: 1,
/// #         initiator_depth: 1,
/// #         rnr_retry_count: 7,
/// #         private_data: vec![],
/// #     })?;
/// #     rep.wait()?;
/// #     ea.complete_connect(qa)?.wait()?;
/// #     rtu.wait()?;
/// #     Ok((ea, eb))
/// # }
/// let da = Device::open("127.92.4.1".parse().unwrap())?;
/// let db = Device::open("127.92.4.2".parse().unwrap())?;
/// let (pa, pb) = (da.alloc_pd()?, db.alloc_pd()?);
/// let (ca, cb) = (da.create_cq(16)?, db.create_cq(16)?);
/// let (qa, qb) = (pa.create_qp(&QpInitAttr::new(&ca, &ca))?, pb.create_qp(&QpInitAttr::new(&cb, &cb))?);
/// # let _eps = connect((&da, &qa), (&db, &qb))?;
/// let mr = pb.reg_mr(64, Access::LOCAL_WRITE)?;
/// qb.post_recv(RecvWr::new(1, vec![mr.sge(0, 64)]))?;
/// // Ask to hear of the next completion: a Pending (blocking wait or future);
/// // `req_notify` + `fd` do the same for poll/epoll.
/// let next = cb.notify(NotifyOn::Any);
/// let mut wr = SendWr::new(2, SendOp::Send, vec![]);
/// wr.inline = Some(b"ping".to_vec());
/// qa.post_send(wr)?;
/// next.wait()?;
/// // Poll without blocking …
/// let wc = cb.poll_one().expect("a completion");
/// assert_eq!((wc.wr_id, wc.status, wc.opcode, wc.byte_len), (1, WcStatus::Success, WcOpcode::Recv, 4));
/// assert!(cb.is_empty());
/// // … or sleep up to a timeout.
/// let wc = ca.wait_one(Duration::from_secs(10))?.expect("send completion");
/// assert_eq!((wc.wr_id, wc.opcode), (2, WcOpcode::Send));
/// cb.resize(256)?;
/// assert!(cb.depth() >= 256);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

impl Cq {
    /// Takes up to `out.len()` completions; in manual progress mode this first
    /// runs the engine.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let n = self.inner.cq.poll(out);
        if n > 0 || self.inner.dev.adapter.mode() == Progress::Thread {
            return n;
        }
        self.inner.dev.adapter.progress();
        self.inner.cq.poll(out)
    }

    /// Takes one completion (see [`Cq::poll`]).
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        if let Some(w) = self.inner.cq.poll_one() {
            return Some(w);
        }
        if self.inner.dev.adapter.mode() == Progress::Manual {
            self.inner.dev.adapter.progress();
            return self.inner.cq.poll_one();
        }
        None
    }

    /// Waits up to `timeout` for one completion, sleeping on the queue's
    /// notification (or, in manual mode, on the engine's socket).
    pub fn wait_one(&self, timeout: Duration) -> Result<Option<WorkCompletion>> {
        let t0 = Instant::now();
        loop {
            if let Some(w) = self.poll_one() {
                return Ok(Some(w));
            }
            let left = timeout.saturating_sub(t0.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            if self.inner.dev.adapter.mode() == Progress::Manual {
                self.inner
                    .dev
                    .adapter
                    .progress_wait(left.min(Duration::from_millis(10)))?;
            } else {
                self.inner.cq.arm(NotifyOn::Any);
                // Close the race with a completion that arrived before arming.
                if let Some(w) = self.inner.cq.poll_one() {
                    self.inner.cq.disarm();
                    return Ok(Some(w));
                }
                self.inner
                    .cq
                    .wait(Some(left))
                    .map_err(|e| VerbsError::Engine(e.into()))?;
                self.inner.cq.take_events();
            }
            if self.inner.dev.is_removed() && self.inner.cq.is_empty() {
                return Err(VerbsError::DeviceRemoved);
            }
        }
    }

    /// A notification request (ND style): completes on the next matching
    /// completion, at once if completions are already waiting; all requests
    /// pending at that moment complete together.
    pub fn notify(
        &self,
        on: NotifyOn,
    ) -> crate::Pending<std::result::Result<(), ndverbs_engine::cq::NotifyError>> {
        let p = self.inner.cq.notify(on);
        // Removal ends the waiters it finds; one registered after that would
        // wait forever. (Removal sets the flag before ending waiters.)
        if self.inner.dev.is_removed() {
            self.inner
                .cq
                .end_waiters(Err(ndverbs_engine::cq::NotifyError::DeviceRemoved));
        }
        p
    }

    /// Completes every pending notification request with `Canceled`, in order.
    pub fn cancel_notifies(&self) {
        self.inner
            .cq
            .end_waiters(Err(ndverbs_engine::cq::NotifyError::Canceled));
    }

    /// Arms the notification: the next matching completion makes [`Cq::fd`]
    /// readable (once per arm).
    pub fn req_notify(&self, on: NotifyOn) {
        self.inner.cq.arm(on);
    }

    /// Consumes fired notifications; returns how many.
    pub fn ack_events(&self) -> u64 {
        self.inner.cq.take_events()
    }

    /// The notification file descriptor, for poll/epoll/async reactors.
    pub fn fd(&self) -> RawFd {
        self.inner.cq.fd()
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.inner.cq.len()
    }

    /// True if no completion is waiting.
    pub fn is_empty(&self) -> bool {
        self.inner.cq.is_empty()
    }

    /// Capacity.
    pub fn depth(&self) -> usize {
        self.inner.cq.depth()
    }

    /// True once a completion was lost to overflow.
    pub fn overflowed(&self) -> bool {
        self.inner.cq.overflowed()
    }

    /// Changes the capacity without losing completions.
    pub fn resize(&self, depth: u32) -> std::result::Result<(), ResizeError> {
        self.inner
            .cq
            .resize(depth as usize, LIMITS.max_cqe as usize)
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }
}
