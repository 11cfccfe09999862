//! Devices, protection domains and completion queues.

use crate::config::{DeviceConfig, Progress};
use crate::engine::{CqRing, Nic};
use crate::error::{Error, ErrorKind, Result};
use crate::memory::{Mr, Mw};
use crate::qp::{Qp, QpInitAttr, Srq};
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::{PathMtu, WorkCompletion};
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
/// let cfg = DeviceConfig { progress: Progress::Manual, ..DeviceConfig::default() };
/// let manual = Device::open_with("127.92.1.2".parse().unwrap(), &cfg)?;
/// manual.progress();
/// // Counters by rxe's names.
/// assert_eq!(manual.stats().get("sent_pkts"), 0);
/// // Removal: outstanding work is flushed, later calls fail.
/// dev.remove();
/// assert!(dev.is_removed());
/// assert_eq!(dev.alloc_pd().unwrap_err().kind(), ErrorKind::DeviceRemoved);
/// # drop((pd, cq));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Device {
    pub(crate) nic: Nic,
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
    /// manager sends ([`node_guid`]).
    pub node_guid: u64,
    /// Enforced limits.
    pub limits: DeviceLimits,
}

/// The limits of every ndverbs device (what [`Device::query`] reports).
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.31.9".parse().unwrap())?;
/// assert_eq!(dev.query().limits, LIMITS);
/// assert!(dev.create_cq(LIMITS.max_cqe + 1).is_err());
/// # Ok::<(), Error>(())
/// ```
pub use ndverbs_proto::limits::{DeviceLimits, LIMITS};

/// The node GUID of the device of `addr`: a fixed prefix and the low bits
/// of the address, stable across runs and distinct per address (librdmacm
/// keys devices by it; the CM's REQ carries it).
///
/// # Example
///
/// ```
/// use ndverbs_verbs::node_guid;
/// let a = node_guid("10.0.0.1".parse().unwrap());
/// assert_eq!(a, node_guid("10.0.0.1".parse().unwrap()));
/// assert_ne!(a, node_guid("10.0.0.2".parse().unwrap()));
/// ```
pub fn node_guid(addr: IpAddr) -> u64 {
    crate::engine::node_guid(addr)
}

impl Device {
    /// Opens the device for `addr` (it binds UDP port 4791 there) with the
    /// default configuration: an engine thread, no capture, no counters
    /// published, no faults.
    pub fn open(addr: IpAddr) -> Result<Device> {
        Self::open_with(addr, &DeviceConfig::default())
    }

    /// Opens the device for `addr` as `config` says. An address that is not
    /// on this host is [`ErrorKind::AddressNotAvailable`], one already open
    /// (by this process or another) [`ErrorKind::AddressInUse`].
    pub fn open_with(addr: IpAddr, config: &DeviceConfig) -> Result<Device> {
        Ok(Device {
            nic: Nic::open(addr, config)?,
        })
    }

    /// Device attributes.
    pub fn query(&self) -> DeviceAttr {
        let addr = self.nic.local();
        DeviceAttr {
            addr,
            gid: gid_of(addr),
            node_guid: node_guid(addr),
            limits: LIMITS,
        }
    }

    /// The port's active MTU: the largest path MTU its queue pairs may
    /// use, from the interface's MTU as rxe computes it
    /// ([`DeviceInfo::active_mtu`](crate::DeviceInfo::active_mtu)). A
    /// modification to a larger one is refused
    /// ([`ModifyError::PathMtuAboveActive`](crate::ModifyError)); one the
    /// connection manager negotiates is lowered to it.
    pub fn active_mtu(&self) -> PathMtu {
        self.nic.active_mtu()
    }

    /// The GID of the port (index 0 of its GID table).
    pub fn gid(&self) -> Ipv6Addr {
        gid_of(self.nic.local())
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        let id = self.nic.alloc_pd()?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                dev: self.clone(),
                id,
            }),
        })
    }

    /// Creates a completion queue of `depth` entries (1 to
    /// [`DeviceLimits::max_cqe`]).
    pub fn create_cq(&self, depth: u32) -> Result<Cq> {
        let (id, ring) = self.nic.create_cq(depth)?;
        Ok(Cq {
            inner: Arc::new(CqInner {
                dev: self.clone(),
                id,
                ring,
            }),
        })
    }

    /// Who runs the engine loop.
    pub fn progress_mode(&self) -> Progress {
        self.nic.progress_mode()
    }

    /// Runs the engine once (manual progress; a no-op while the engine thread
    /// runs it).
    pub fn progress(&self) {
        self.nic.progress();
    }

    /// What polling an empty completion queue does: one engine step if no
    /// other thread is running one (with an engine thread too: the polling
    /// thread takes its packets itself rather than wait for the sleeping
    /// thread's wake-up); whether it ran.
    pub(crate) fn poll_step(&self) -> bool {
        self.nic.poll_step()
    }

    /// The application is about to sleep until a CQ notifies it: the
    /// engine thread must watch the link again (it leaves it to a
    /// busy-polling application otherwise).
    pub(crate) fn end_busy_poll(&self) {
        self.nic.end_busy_poll();
    }

    /// What polling an empty CQ that waits for a notification does: one
    /// engine step that neither holds the link for the caller nor lets an
    /// ACK wait (the caller sleeps next).
    pub(crate) fn poll_step_before_sleep(&self) -> bool {
        self.nic.poll_step_before_sleep()
    }

    /// Runs the engine once if no other thread is running it right now;
    /// returns whether it ran. A post made while another thread runs a step
    /// waits for the next step; a caller that must not leave it waiting
    /// (its own thread will not poll soon) retries until this returns true.
    ///
    /// ```
    /// use ndverbs_verbs::*;
    /// let cfg = DeviceConfig { progress: Progress::Manual, ..DeviceConfig::default() };
    /// let dev = Device::open_with("127.92.32.1".parse().unwrap(), &cfg)?;
    /// assert!(dev.try_progress()); // nobody else runs it
    /// # Ok::<(), Error>(())
    /// ```
    pub fn try_progress(&self) -> bool {
        self.nic.progress()
    }

    /// Whether posts (or other requests) that found the engine busy wait
    /// for its next step: one made while another thread ran a step.
    pub fn has_queued_work(&self) -> bool {
        self.nic.has_queued_work()
    }

    /// Manual progress: sleeps until a packet or a post arrives, the next
    /// timer is due or `timeout` passes, then runs the engine once — what a
    /// thread dedicated to a manual-progress device loops on. It sleeps at
    /// once; a thread waiting for an answer of its own waits on that
    /// ([`Pending::wait_timeout`](crate::Pending::wait_timeout),
    /// [`Cq::wait_one`]), which polls the link for an adaptive window
    /// first ([`DeviceConfig::sleep_at_once`](crate::DeviceConfig::sleep_at_once)).
    pub fn progress_wait(&self, timeout: Duration) -> Result<()> {
        self.nic.progress_wait(timeout)
    }

    /// [`Device::progress_wait`] for a thread that runs the engine on the
    /// application's behalf: while nothing on the device can need the
    /// engine before a packet arrives (no queue pair, no endpoint, no
    /// timer), it sleeps up to `idle` instead, and a thread that creates
    /// a queue pair or an endpoint, or calls [`Device::wake`], ends that
    /// sleep. An opened but unused device then costs no periodic wake-ups.
    pub fn progress_wait_or_idle(&self, timeout: Duration, idle: Duration) -> Result<()> {
        self.nic.progress_wait_or_idle(timeout, idle)
    }

    /// Ends a [`Device::progress_wait`] or
    /// [`Device::progress_wait_or_idle`] asleep in another thread.
    pub fn wake(&self) {
        self.nic.wake()
    }

    /// Removes the device: outstanding work is flushed and later calls fail
    /// with [`ErrorKind::DeviceRemoved`].
    pub fn remove(&self) {
        self.nic.remove();
    }

    /// True once removed.
    pub fn is_removed(&self) -> bool {
        self.nic.is_removed()
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
        let _ = self.dev.nic.dealloc_pd(self.id);
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

    /// Registers `len` bytes of zeroed memory the region owns; more than
    /// [`DeviceLimits::max_mr_size`] is [`ErrorKind::InvalidArgument`].
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<Mr> {
        let region = self.inner.dev.nic.reg_mr(self.inner.id, len, access)?;
        Ok(Mr::new(region, self.inner.clone()))
    }

    /// Registers application memory in place (at most
    /// [`DeviceLimits::max_mr_size`] bytes, as [`Pd::reg_mr`]).
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
        let region = unsafe {
            self.inner
                .dev
                .nic
                .reg_mr_raw(self.inner.id, ptr, len, access)
        }?;
        Ok(Mr::new(region, self.inner.clone()))
    }

    /// Registers an owned buffer in place, without `unsafe`: the region
    /// owns it until [`OwnedMr::into_inner`](crate::OwnedMr::into_inner)
    /// gives it back (see [`owned`](crate::owned) for why this is sound).
    /// A zero or too large length is [`ErrorKind::InvalidArgument`] (the
    /// buffer is dropped with the error).
    pub fn reg_buf<B: crate::StableBuffer>(
        &self,
        buf: B,
        access: Access,
    ) -> Result<crate::OwnedMr<B>> {
        crate::OwnedMr::register(buf, |ptr, len| {
            // SAFETY: the bytes are the buffer's, which the OwnedMr keeps
            // alive and unreferenced until after this Mr is deregistered.
            unsafe { self.reg_mr_raw(ptr, len, access) }
        })
        .map_err(|(_, e)| e)
    }

    /// Allocates an (unbound) memory window.
    pub fn alloc_mw(&self) -> Result<Mw> {
        let key = self.inner.dev.nic.alloc_mw(self.inner.id)?;
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
    ring: CqRing,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let _ = self.dev.nic.destroy_cq(self.id);
    }
}

/// The completions a [`Cq`] held at one moment ([`Cq::mark`]). It keeps
/// only the queue's ring alive, not the queue.
#[derive(Debug, Clone)]
pub struct CqMark {
    pub(crate) ring: std::sync::Arc<ndverbs_engine::cq::CompletionQueue>,
    pub(crate) at: u64,
}

impl CqMark {
    /// True once the program has taken every one of those completions.
    pub fn polled(&self) -> bool {
        self.ring.polled_past(self.at)
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
/// #         qp.to_init(Access::ALL)?;
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
    fn manual(&self) -> bool {
        self.inner.dev.progress_mode() == Progress::Manual
    }

    /// Takes up to `out.len()` completions. When the queue is empty it runs
    /// the engine once and looks again: in manual progress mode that is
    /// the application's progress; with an engine thread it runs only if
    /// that thread is not running a step, so a busy-polling application
    /// takes its packets itself instead of waiting for the sleeping
    /// thread's wake-up (the latency of `ndv bench` P2t: 7.2–7.6× a UDP
    /// ping-pong without it, 4.2–4.3× with it, on a quiet machine).
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let ring = &self.inner.ring;
        let n = ring.poll(out);
        if n > 0 || !self.step_when_empty() {
            return n;
        }
        ring.poll(out)
    }

    /// Takes completions already queued, without running the engine (see
    /// [`Cq::poll`]).
    pub fn poll_queued(&self, out: &mut [WorkCompletion]) -> usize {
        self.inner.ring.poll(out)
    }

    /// The engine step of a poll that found the queue empty: a spinning
    /// poller's, or (the queue armed) that of a thread about to sleep.
    fn step_when_empty(&self) -> bool {
        if self.inner.ring.is_armed() {
            self.inner.dev.poll_step_before_sleep()
        } else {
            self.inner.dev.poll_step()
        }
    }

    /// What the queue holds now, to learn when the program has taken it
    /// all ([`CqMark::polled`]).
    pub fn mark(&self) -> CqMark {
        self.inner.ring.mark()
    }

    /// Takes one completion (see [`Cq::poll`]).
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        let ring = &self.inner.ring;
        if let Some(w) = ring.poll_one() {
            return Some(w);
        }
        if self.step_when_empty() {
            return ring.poll_one();
        }
        None
    }

    /// Waits up to `timeout` for one completion, sleeping on the queue's
    /// notification (or, in manual mode, on the engine's socket).
    pub fn wait_one(&self, timeout: Duration) -> Result<Option<WorkCompletion>> {
        let ring = &self.inner.ring;
        let t0 = Instant::now();
        loop {
            if let Some(w) = self.poll_one() {
                return Ok(Some(w));
            }
            let left = timeout.saturating_sub(t0.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            if self.manual() {
                self.inner
                    .dev
                    .nic
                    .progress_wait_spinning(left.min(Duration::from_millis(10)), "Cq::wait_one")?;
            } else {
                // Poll a little longer before sleeping, if that has been
                // paying (`Nic::spin_before_sleep`).
                let spin = self.inner.dev.nic.spin_before_sleep(|| !ring.is_empty());
                if spin.caught() {
                    continue;
                }
                self.inner.dev.end_busy_poll();
                ring.arm(NotifyOn::Any);
                // Close the race with a completion that arrived before arming.
                if let Some(w) = ring.poll_one() {
                    ring.disarm();
                    self.inner.dev.nic.slept(spin, true);
                    return Ok(Some(w));
                }
                let woken = ring.wait(left)?;
                self.inner.dev.nic.slept(spin, woken);
                ring.take_events();
            }
            if self.inner.dev.is_removed() && ring.is_empty() {
                return Err(Error::kind_only(ErrorKind::DeviceRemoved, "Cq::wait_one"));
            }
        }
    }

    /// A notification request (ND style): completes on the next matching
    /// completion, at once if completions are already waiting; all requests
    /// pending at that moment complete together. It ends with
    /// [`ErrorKind::Canceled`] ([`Cq::cancel_notifies`]),
    /// [`ErrorKind::Overflow`] (completions were lost) or
    /// [`ErrorKind::DeviceRemoved`].
    pub fn notify(&self, on: NotifyOn) -> crate::Pending<()> {
        self.inner.dev.end_busy_poll();
        let p = self.inner.ring.notify(on).driven_by(&self.inner.dev.nic);
        // Removal ends the waiters it finds; one registered after that would
        // wait forever. (Removal sets the flag before ending waiters.)
        if self.inner.dev.is_removed() {
            self.inner.ring.end_waiters(ErrorKind::DeviceRemoved);
        }
        p
    }

    /// Completes every pending notification request with
    /// [`ErrorKind::Canceled`], in order.
    pub fn cancel_notifies(&self) {
        self.inner.ring.end_waiters(ErrorKind::Canceled);
    }

    /// Arms the notification: the next matching completion makes [`Cq::fd`]
    /// readable (once per arm).
    pub fn req_notify(&self, on: NotifyOn) {
        self.inner.dev.end_busy_poll();
        self.inner.ring.arm(on);
    }

    /// Consumes fired notifications; returns how many.
    pub fn ack_events(&self) -> u64 {
        self.inner.ring.take_events()
    }

    /// The notification file descriptor, for poll/epoll/async reactors.
    pub fn fd(&self) -> RawFd {
        self.inner.ring.fd()
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.inner.ring.len()
    }

    /// True if no completion is waiting.
    pub fn is_empty(&self) -> bool {
        self.inner.ring.is_empty()
    }

    /// Capacity.
    pub fn depth(&self) -> usize {
        self.inner.ring.depth()
    }

    /// True once a completion was lost to overflow.
    pub fn overflowed(&self) -> bool {
        self.inner.ring.overflowed()
    }

    /// Changes the capacity without losing completions: below the
    /// completions waiting it is [`ErrorKind::Overflow`] (nothing changes),
    /// 0 or above [`DeviceLimits::max_cqe`] [`ErrorKind::InvalidArgument`].
    pub fn resize(&self, depth: u32) -> Result<()> {
        self.inner.ring.resize(depth)
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }
}

/// What wakes an armed completion queue ([`Cq::req_notify`], [`Cq::notify`]).
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.25.1".parse().unwrap())?;
/// let cq = dev.create_cq(4)?;
/// // Wake for errors only: a flushed receive is one.
/// let errors = cq.notify(NotifyOn::Errors);
/// let pd = dev.alloc_pd()?;
/// let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq))?;
/// qp.to_init(Access::NONE)?;
/// qp.post_recv(RecvWr::new(1, vec![]))?;
/// qp.to_error()?;
/// errors.wait()?;
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotifyOn {
    /// Any completion.
    Any,
    /// A solicited receive, or any error completion (ibverbs' solicited_only).
    Solicited,
    /// Error completions only (ND's `ND_CQ_NOTIFY_ERRORS`).
    Errors,
}
