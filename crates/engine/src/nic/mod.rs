//! The NIC: a software RoCE NIC for one local IP address — its link, its
//! object tables and the engine that drives every queue pair on it.
//!
//! ```text
//!  application threads                         engine (worker thread, or the
//!  ───────────────────                         caller of `progress` in manual mode)
//!  post_send ─► per-QP lock-free queue ─┐
//!  post_recv ─► per-QP lock-free queue ─┤      ┌──────────── Core (one Mutex) ────────────┐
//!                      doorbell (eventfd)├────► │ move posted WRs into the RcQp state      │
//!                                       │      │ link datagrams → ICRC → parse → RcQp     │
//!  poll CQ ◄── lock-free ring ◄─────────┼───── │ timers (deadline heap) → RcQp            │
//!  CQ eventfd ◄── armed notifications   │      │ RcQp → GSO runs → link; completions → CQ │
//!                                       │      └──────────────────────────────────────────┘
//!  create/modify/destroy ──────── lock Core (control path, rare)
//! ```
//!
//! The modules of this tree, in the order a newcomer might read them:
//!
//! | module | what it holds |
//! |---|---|
//! | this one | the [`Nic`] handle: open, getters, faults and capture, removal |
//! | `core` | the private state (`Core`, fields grouped by job) and what handles share with it |
//! | `tables` | object tables and entries ([`QpShared`], [`SrqShared`], [`QpInit`]) |
//! | `control` | create / modify / destroy |
//! | `post` | the post path: direct posts and post queues |
//! | `step` | the engine loop as a list of named stages |
//! | `receive`, `transmit`, `batch` | packets in; packets out in GSO runs, ACK postponement |
//! | `worker` | the worker thread, manual progress, the clock |
//! | `spin` | how long a waiter polls before it sleeps: an adaptive window with a back-off |
//! | `resources` | the live objects for `ndv res` (see [`crate::resources`]) |
//! | `counter_sum` | the QPs' counters summed for a snapshot, a chunk per hold of the lock; the last sum reused while none moved |
//! | `trace` | what is logged, cheaply |
//!
//! Objects live in tables keyed by ids (QPN for queue pairs, numbers for
//! PDs, CQs and SRQs, keys for memory), so a handle the application still
//! holds after destruction names nothing rather than freed state: a lookup
//! that fails is a typed error, never a crash.
//!
//! **Opening.** [`Nic::open`] binds `<ip>:4791` with the default settings
//! (no faults, no capture, nothing published); [`Nic::open_with`] takes a
//! [`NicConfig`]; [`Nic::open_on`] runs on a link of the caller's (another
//! port, or an in-memory [`MemoryLink`](crate::link::memory::MemoryLink)).
//! Every NIC's link is wrapped in the fault and capture layers of
//! [`crate::link`], switched on and off at run time. With
//! [`NicConfig::share_port`] (or [`Nic::open_shared`]) the NIC is one of
//! several processes' NICs on the address ([`crate::share`]): its QPNs
//! and CM communication IDs carry its slot, its listeners are registered
//! host-wide, and its receive stage answers probes and drops what belongs
//! to another member.
//!
//! **Removal.** [`Nic::remove`] flushes every queue pair (every outstanding
//! work request completes, with a flush status) and stops the worker; every
//! later call returns [`EngineError::Removed`].
//!
//! **Tracing.** The engine never prints; it reports through `tracing`:
//! `debug` spans `nic_open` (field `local`), `modify_qp` and `destroy_qp`
//! (field `qp`) and an `info` span `remove_device`; `debug` events for QP
//! state changes (`qp`, `from`, `to`), flushes, error completions,
//! retransmissions, RNR and sequence NAKs and MADs sent and received; `warn`
//! for exhausted retries, a full CQ and a full socket buffer (once);
//! `trace` for each dropped packet with its cause. Every step and control
//! call runs in a `nic` span (field `local`). Connection endpoints add
//! their request spans (see [`crate::ep`]). Per-packet paths only test
//! whether a level is on.

mod batch;
mod congestion;
mod control;
mod core;
mod counter_sum;
mod endpoints;
mod post;
mod receive;
mod resources;
mod rx_clock;
mod spin;
mod step;
mod tables;
mod trace;
mod transmit;
mod ud;
mod worker;

pub(crate) use self::core::{Core, Shared};
pub use tables::{QpInit, QpShared, SrqShared};
pub use worker::SpinReport;

use self::core::{Deliveries, Io, Timers};
use crate::config::{CmTimers, NicConfig, Progress};
use crate::counters::NicCounters;
use crate::ep::EpTable;
use crate::error::EngineError;
use crate::event::EventFd;
use crate::gsi::Gsi;
use crate::keys::KeyGen;
use crate::link::capture::{Capture, CaptureSlot};
use crate::link::faults::{FaultConfig, FaultCounters};
use crate::link::udp::RoceSocket;
use crate::link::{Link, NicLink};
use crate::mr::{MemTable, Region};
use crate::stats::Stats;
use crossbeam_queue::SegQueue;
use ndverbs_proto::cm::{CmAgent, CmConfig};
use ndverbs_proto::mem::Sge;
use ndverbs_proto::rc::PathMtu;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::JoinHandle;
use tables::Tables;

/// A software RoCE NIC: the engine for one local IP address (see the
/// module docs). Cheap to clone: clones are handles to the same NIC.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::error::EngineError;
/// use ndverbs_engine::nic::{Nic, QpInit, QpShared};
/// use ndverbs_engine::cq::CompletionQueue;
/// use ndverbs_engine::mr::{Region, RegionBuf};
/// use ndverbs_proto::mem::{Access, Sge};
/// use ndverbs_proto::rc::*;
/// use std::sync::Arc;
///
/// /// One side: a NIC driven by `progress` (no thread), PD, CQ, QP, 4 KiB region.
/// fn open(ip: &str) -> Result<(Nic, Arc<CompletionQueue>, Arc<QpShared>, Arc<Region>), EngineError> {
///     let nic = Nic::open(ip.parse().unwrap(), Progress::Manual)?;
///     let pd = nic.alloc_pd()?;
///     let (cq_id, cq) = nic.create_cq(16)?;
///     let qp = nic.create_qp(QpInit { pd, send_cq: cq_id, recv_cq: cq_id, srq: None,
///         caps: QpCaps::default(), max_recv_wr: 16, max_recv_sge: 1 })?;
///     let mr = nic.reg_mr(pd, RegionBuf::alloc(4096)?, Access::LOCAL_WRITE)?;
///     Ok((nic, cq, qp, mr))
/// }
/// let (a, cq_a, qp_a, mr_a) = open("127.93.1.1")?;
/// let (b, cq_b, qp_b, mr_b) = open("127.93.1.2")?;
/// // RESET -> INIT -> RTR -> RTS, each QP towards the other (PSN 0 both ways).
/// for (nic, qp, peer, peer_qpn) in [(&a, &qp_a, &b, qp_b.qpn()), (&b, &qp_b, &a, qp_a.qpn())] {
///     for (attr, mask) in RcConnection::new(peer_qpn).to_peer(peer.local()).steps() {
///         nic.modify_qp(qp.qpn(), &attr, mask)?;
///     }
/// }
/// b.post_recv(&qp_b, RecvWr::new(1, vec![Sge::new(mr_b.addr(), 4096, mr_b.lkey())]))?;
/// mr_a.write(0, b"over UDP").unwrap();
/// a.post_send(&qp_a, SendWr::new(2, SendOp::Send, vec![Sge::new(mr_a.addr(), 8, mr_a.lkey())]))?;
/// // Manual progress: run both engines until each side has its completion.
/// let (mut sent, mut recv) = (None, None);
/// let t0 = std::time::Instant::now();
/// while sent.is_none() || recv.is_none() {
///     assert!(t0.elapsed().as_secs() < 10, "no completions");
///     a.progress();
///     b.progress();
///     sent = sent.or_else(|| cq_a.poll_one());
///     recv = recv.or_else(|| cq_b.poll_one());
/// }
/// let recv = recv.unwrap();
/// assert_eq!((sent.unwrap().status, recv.status, recv.byte_len), (WcStatus::Success, WcStatus::Success, 8));
/// let mut got = [0; 8];
/// mr_b.read(0, &mut got).unwrap();
/// assert_eq!(&got, b"over UDP");
/// # Ok::<(), EngineError>(())
/// ```
#[derive(Clone)]
pub struct Nic {
    shared: Arc<Shared>,
    handles: Arc<AppHandles>,
}

/// What only the application's [`Nic`] clones hold (the worker and the
/// stats publisher reach the NIC through the shared state or weakly): the
/// worker's join handle, and the counter file published for `ndv stat`.
/// As the last clone goes, nothing can use the NIC any more: the worker is
/// told to end now (it may be asleep for a second, `worker.rs`), which
/// frees the shared state and releases the UDP port, and the counter file
/// is removed (the publisher would take it only at its next tick, which a
/// process that exits right after never reaches).
struct AppHandles {
    worker: Mutex<Option<JoinHandle<()>>>,
    stat_file: OnceLock<PathBuf>,
    shared: Weak<Shared>,
}

impl Drop for AppHandles {
    fn drop(&mut self) {
        if let Some(s) = self.shared.upgrade() {
            s.stop.store(true, Ordering::Release);
            s.doorbell.signal();
        }
        if let Some(path) = self.stat_file.get() {
            crate::stats::unpublish(path);
        }
    }
}

impl std::fmt::Debug for Nic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nic")
            .field("local", &self.shared.local)
            .field("mode", &self.shared.mode)
            .field("removed", &self.shared.removed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Nic {
    /// Opens the NIC for `local` (binds `local:4791`) with `progress` and
    /// the other settings' defaults ([`NicConfig::default`]).
    pub fn open(local: IpAddr, progress: Progress) -> Result<Nic, EngineError> {
        Self::open_with(
            local,
            NicConfig {
                progress,
                ..NicConfig::default()
            },
        )
    }

    /// Opens the NIC for `local` (binds `local:4791`) with `config`.
    /// With [`NicConfig::share_port`] it joins the shared port of `local`
    /// in the user's directory ([`crate::share`]).
    pub fn open_with(local: IpAddr, config: NicConfig) -> Result<Nic, EngineError> {
        if config.share_port {
            let dir = crate::share::table::ShareDir::for_user()?;
            return Self::open_shared(dir, local, ndverbs_wire::ip::ROCEV2_PORT, config);
        }
        Self::open_on(RoceSocket::bind(local)?, config)
    }

    /// Opens a NIC as a member of the shared port `<local>:<port>` whose
    /// files are in `dir` ([`crate::share`]; `share_port` in `config` is
    /// implied).
    pub fn open_shared(
        dir: crate::share::table::ShareDir,
        local: IpAddr,
        port: u16,
        config: NicConfig,
    ) -> Result<Nic, EngineError> {
        let (sock, share) = crate::share::SharedPort::join(dir, local, port)?;
        let nic = Self::open_inner(NicLink::Udp(sock), config, Some(share.clone()))?;
        // A reconcile run by this process waits for its own probe, which
        // only its engine reads: a worker thread does; in manual progress
        // the reconciling thread runs a step itself. Either way a NIC that
        // is gone ends the wait.
        let weak = Arc::downgrade(&nic.shared);
        let manual = nic.mode() == Progress::Manual;
        share.set_pump(Box::new(move || match weak.upgrade() {
            Some(s) if !s.removed.load(Ordering::Acquire) => {
                if manual {
                    worker::progress_shared(&s);
                }
                true
            }
            _ => false,
        }));
        Ok(nic)
    }

    /// The shared port this NIC is a member of (`None`: it owns its port).
    pub fn shared_port(&self) -> Option<Arc<crate::share::SharedPort>> {
        self.core_lock().share.as_ref().map(|s| s.port.clone())
    }

    /// Opens a NIC on `link`: a socket bound elsewhere than port 4791, or
    /// one end of an in-memory pair.
    pub fn open_on(link: impl Into<NicLink>, config: NicConfig) -> Result<Nic, EngineError> {
        Self::open_inner(link.into(), config, None)
    }

    fn open_inner(
        mut link: NicLink,
        config: NicConfig,
        share: Option<Arc<crate::share::SharedPort>>,
    ) -> Result<Nic, EngineError> {
        let addr = link.local_addr();
        let local = addr.ip();
        let mode = config.progress;
        let _span = tracing::debug_span!("nic_open", %local, port = addr.port(), ?mode).entered();
        // Coalesced receives (split again by the receive stage); fine if refused.
        // Not on a shared port: the kernel steers a GRO-coalesced datagram
        // by its first packet alone, and packets of one peer for different
        // members' QPs are one flow (both ends on port 4791), which GRO may
        // coalesce.
        let gro = match &mut link {
            NicLink::Udp(_) if share.is_some() => false,
            NicLink::Udp(s) => s.enable_gro(),
            NicLink::Memory(_) => true,
        };
        // A socket bound to a loopback address reaches only loopback peers,
        // which bypass the controller (`congestion.rs`): neither ECN nor
        // time stamps would be read, so the socket is not asked for their
        // control messages.
        let cc = config
            .congestion
            .as_ref()
            .filter(|_| !congestion::bypassed(local));
        // With congestion control our packets say so (ECT), and marks on
        // what arrives are read (CNPs, `congestion.rs`); fine if refused.
        if let (NicLink::Udp(s), Some(_)) = (&mut link, cc) {
            if !s.enable_ecn() {
                tracing::debug!("ECN refused by the socket: no ECT, no CNPs");
            }
        }
        // With congestion control, round trips end at the kernel's receive
        // time stamps (`rx_clock.rs`); without, nothing reads them and the
        // socket is not asked (a control message less per receive).
        let epoch_ns = worker::monotonic_ns();
        let rx_clock = match (&link, cc) {
            (NicLink::Udp(s), Some(_)) if s.enable_rx_timestamps() => {
                Some(rx_clock::RxClock::new(epoch_ns))
            }
            (NicLink::Udp(_), Some(_)) => {
                tracing::debug!("receive time stamps refused by the socket");
                None
            }
            _ => None,
        };
        let capture = Arc::new(CaptureSlot::default());
        let stack = build_stack(link, config.faults, &capture)?;
        let link_fd = stack.fd();
        let gso = stack.gso();
        let mut keys = KeyGen::new();
        let mut mem = MemTable::new(KeyGen::new());
        let gsi = Gsi::new(&mut mem);
        let mut cm_cfg = cm_config(local, keys.next_u64(), config.cm_timers);
        cm_cfg.comm_id_slot = share.as_ref().map(|s| s.slot());
        let cm = CmAgent::new(cm_cfg);
        let core = Core {
            tables: Tables::new(mem, keys),
            cm,
            gsi,
            eps: EpTable::default(),
            io: Io {
                rx_clock,
                ..Io::new(stack)
            },
            timers: Timers::default(),
            acks: Default::default(),
            deliveries: Deliveries::default(),
            touched: Vec::new(),
            completion_ready: false,
            empty_poll: false,
            idle_input: false,
            active_mtu: config.active_mtu,
            paths: congestion::Paths::new(config.congestion.clone()),
            share: share.map(|port| self::core::ShareState {
                port,
                listeners: Default::default(),
            }),
            qp_changes: 0,
            last_sum: None,
        };
        let shared = Arc::new(Shared {
            local,
            mode,
            core: Mutex::new(core),
            work: SegQueue::new(),
            doorbell: EventFd::new()?,
            sleeping: AtomicBool::new(false),
            idle_sleep: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            epoch_ns,
            counters: NicCounters::default(),
            link_fd,
            link_error: AtomicBool::new(false),
            capture,
            worker_wake_ns: AtomicU64::new(u64::MAX),
            busy_poll_ns: AtomicU64::new(0),
            spin: spin::SpinWindow::new(config.spin_before_sleep),
            span: tracing::debug_span!(parent: None, "nic", %local),
        });
        if let Some(path) = &config.capture {
            start_capture(&shared, path, local)?;
        }
        let thread = if mode == Progress::Thread {
            let s = Arc::downgrade(&shared);
            Some(
                std::thread::Builder::new()
                    .name(format!("ndv-engine-{local}"))
                    .spawn(move || worker::worker(s))?,
            )
        } else {
            None
        };
        let handles = Arc::new(AppHandles {
            worker: Mutex::new(thread),
            stat_file: OnceLock::new(),
            shared: Arc::downgrade(&shared),
        });
        let nic = Nic { shared, handles };
        if config.publish_stats {
            nic.publish_stats();
        }
        tracing::debug!(gro, gso, "NIC open");
        Ok(nic)
    }

    /// The local address.
    pub fn local(&self) -> IpAddr {
        self.shared.local
    }

    /// The port's active MTU: the largest path MTU its queue pairs may use.
    pub fn active_mtu(&self) -> PathMtu {
        self.core_lock().active_mtu
    }

    /// The progress model.
    pub fn mode(&self) -> Progress {
        self.shared.mode
    }

    /// NIC-wide counters.
    pub fn counters(&self) -> &NicCounters {
        &self.shared.counters
    }

    /// Whether the link sends several packets per GSO run (UDP GSO works).
    pub fn gso(&self) -> bool {
        self.core_lock().io.link.gso()
    }

    /// True if `other` is a handle to this same NIC.
    pub fn same_as(&self, other: &Nic) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// True once [`Nic::remove`] ran.
    pub fn is_removed(&self) -> bool {
        self.shared.removed.load(Ordering::Acquire)
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The core, locked, unless the NIC was removed.
    pub(crate) fn core_guard(&self) -> Result<MutexGuard<'_, Core>, EngineError> {
        self.core()
    }

    /// The core, locked, even after removal (cleanup calls).
    pub(crate) fn core_lock(&self) -> MutexGuard<'_, Core> {
        let mut c = self.lock_for_step();
        // A control call may change any QP's counters.
        c.qp_changes += 1;
        c
    }

    /// The core lock for a thread that runs a step in it (the step counts
    /// its own changes, `Core::qp_changes`); wakes an idle waiter as
    /// [`Nic::core_lock`] does.
    pub(crate) fn lock_for_step(&self) -> MutexGuard<'_, Core> {
        let c = self.shared.core.lock().unwrap_or_else(|e| e.into_inner());
        // Whatever this thread does under the lock (a new QP, endpoint or
        // timer) may need the engine: a waiter asleep because nothing did
        // looks again.
        if self.shared.idle_sleep.load(Ordering::Relaxed) {
            self.shared.doorbell.signal();
        }
        c
    }

    fn core(&self) -> Result<MutexGuard<'_, Core>, EngineError> {
        self.check()?;
        Ok(self.core_lock())
    }

    fn check(&self) -> Result<(), EngineError> {
        if self.is_removed() {
            Err(EngineError::Removed)
        } else {
            Ok(())
        }
    }

    /// Turns fault injection on (with `cfg`) or off (`None`) for the packets
    /// this NIC receives (see [`crate::link::faults`]); packets it holds
    /// back still arrive after it is turned off.
    /// Without the `faults` feature, turning it on is
    /// [`EngineError::InvalidArgument`].
    pub fn set_faults(&self, cfg: Option<FaultConfig>) -> Result<(), EngineError> {
        let mut c = self.core()?;
        #[cfg(feature = "faults")]
        fault_layer(&mut c.io.link).set_config(cfg);
        #[cfg(not(feature = "faults"))]
        if cfg.is_some_and(|f| !f.is_off()) {
            return Err(NO_FAULTS);
        }
        let _ = &mut c;
        Ok(())
    }

    /// What fault injection did so far (`None` when it is off).
    pub fn fault_counters(&self) -> Option<FaultCounters> {
        #[cfg(feature = "faults")]
        return fault_layer(&mut self.core_lock().io.link).counters();
        #[cfg(not(feature = "faults"))]
        None
    }

    /// Starts writing every packet this NIC sends and receives to the pcap
    /// file `path` (see [`crate::link::capture`]), or stops with `None`.
    /// Replaces a capture already on (including one from `NDV_PCAP`).
    ///
    /// ```no_run
    /// # use ndverbs_engine::config::Progress;
    /// # use ndverbs_engine::nic::Nic;
    /// let a = Nic::open("127.0.0.1".parse().unwrap(), Progress::Thread)?;
    /// a.set_capture(Some(std::path::Path::new("/tmp/roce.pcap")))?;
    /// // … traffic …
    /// a.set_capture(None)?;
    /// # Ok::<(), ndverbs_engine::error::EngineError>(())
    /// ```
    pub fn set_capture(&self, path: Option<&Path>) -> Result<(), EngineError> {
        #[cfg(not(feature = "capture"))]
        if path.is_some() {
            return Err(NO_CAPTURE);
        }
        let local = self.local();
        let c = path.map(|p| Capture::open(p, local)).transpose()?;
        self.shared.capture.set(c, local);
        Ok(())
    }

    /// The capture this NIC writes to, if any.
    pub fn capture(&self) -> Option<Arc<Capture>> {
        self.shared.capture.get()
    }

    /// A snapshot of the NIC's counters (see [`crate::stats`]).
    ///
    /// ```no_run
    /// # use ndverbs_engine::config::Progress;
    /// # use ndverbs_engine::nic::Nic;
    /// let a = Nic::open("127.0.0.1".parse().unwrap(), Progress::Thread)?;
    /// let s = a.stats();
    /// println!("sent {} received {}", s.get("sent_pkts"), s.get("rcvd_pkts"));
    /// # Ok::<(), ndverbs_engine::error::EngineError>(())
    /// ```
    ///
    /// The QPs' counters are summed a few hundred at a time, the engine let
    /// go in between (`counter_sum.rs`).
    ///
    /// While no QP's counters moved since the last snapshot, its sum is
    /// reused: an idle NIC with thousands of QPs costs next to nothing to
    /// watch.
    pub fn stats(&self) -> Stats {
        self.stats_in_chunks(counter_sum::CHUNK, true, &mut || {})
    }

    /// [`Nic::stats`] summing `chunk` QPs per hold of the engine's lock
    /// (afresh unless `reuse`) and calling `between` each time it is let
    /// go: for tests that change the QPs in the middle of a snapshot.
    #[doc(hidden)]
    pub fn stats_in_chunks(&self, chunk: usize, reuse: bool, between: &mut dyn FnMut()) -> Stats {
        let (qp, cm) = self.counter_sum(chunk, reuse, between);
        Stats::collect(self.counters(), &qp, &cm, self.is_removed())
    }

    /// Runs `f` while this thread holds the engine: every post `f` makes
    /// finds the engine busy and goes through the QP's post queues, as when
    /// another thread runs a step. For tests of that path.
    #[doc(hidden)]
    pub fn with_engine_held<R>(&self, f: impl FnOnce() -> R) -> R {
        let _core = self.core_lock();
        f()
    }

    /// Publishes this NIC's counters for `ndv stat` until the NIC is dropped
    /// (see [`crate::stats`]).
    pub fn publish_stats(&self) {
        if let Some(path) = crate::stats::publish(Box::new(self.downgrade())) {
            let _ = self.handles.stat_file.set(path);
        }
    }

    /// Serves this NIC's counters, labelled `device`, at
    /// `http://<at>/metrics` in the OpenMetrics text format until the NIC
    /// is dropped (see [`crate::metrics`]). One endpoint per process: the
    /// first call binds `at`, later calls (other NICs) must name the same
    /// address. Returns the bound address (the port chosen when `at`'s is 0).
    ///
    /// ```
    /// # use ndverbs_engine::config::Progress;
    /// # use ndverbs_engine::nic::Nic;
    /// use std::io::{Read, Write};
    /// let a = Nic::open("127.93.20.1".parse().unwrap(), Progress::Thread)?;
    /// let at = a.serve_metrics("127.93.20.1:0".parse().unwrap(), "ndv9")?;
    /// let mut c = std::net::TcpStream::connect(at)?;
    /// c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n")?;
    /// let mut text = String::new();
    /// c.read_to_string(&mut text)?;
    /// assert!(text.contains("ndverbs_sent_pkts_total{device=\"ndv9\",addr=\"127.93.20.1\""));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn serve_metrics(&self, at: SocketAddr, device: &str) -> Result<SocketAddr, EngineError> {
        crate::metrics::serve(at, Box::new(self.downgrade()), device.to_string())
    }

    /// Removes the NIC: every queue pair goes to ERR (every outstanding
    /// request completes with a flush status), the worker stops, and every
    /// later call fails with [`EngineError::Removed`].
    pub fn remove(&self) {
        if self.shared.removed.swap(true, Ordering::AcqRel) {
            return;
        }
        let _nic = self.shared.span.enter();
        let _span = tracing::info_span!("remove_device", local = %self.shared.local).entered();
        tracing::info!("device removed: flushing every queue pair, failing every request");
        self.shared.stop.store(true, Ordering::Release);
        self.shared.doorbell.signal();
        if let Some(t) = self
            .handles
            .worker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = t.join();
        }
        let now = self.now();
        let mut c = self.core_lock();
        let qpns: Vec<u32> = c.tables.qps.keys().copied().collect();
        for qpn in qpns {
            c.tables.qps.get_mut(&qpn).expect("listed").flush_to_error();
            c.touched.push(qpn);
        }
        c.flush_ud();
        c.remove_eps(now);
        for cq in c.tables.cqs.values() {
            cq.end_waiters(Err(crate::cq::NotifyError::DeviceRemoved));
        }
        for s in c.tables.srqs.values() {
            s.shared
                .end_limit_waiters(Err(crate::cq::NotifyError::DeviceRemoved));
        }
        c.finish_step(&self.shared, now);
        // A removed member answers no probe: it leaves its shared port now
        // (after the CM's last DREQs and REJs went out), not when its last
        // handle is dropped.
        if let Some(s) = c.share.take() {
            drop(c);
            if let Err(e) = s.port.leave(self.shared.link_fd) {
                tracing::warn!(error = %e, "cannot leave the shared port");
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _span = tracing::debug_span!("nic_close", local = %self.local).entered();
        tracing::debug!(
            sent = self.counters.sent_datagrams.load(Ordering::Relaxed),
            received = self.counters.rcvd_datagrams.load(Ordering::Relaxed),
            "NIC closed"
        );
    }
}

/// The CM agent's configuration for a NIC at `local`.
fn cm_config(local: IpAddr, seed: u64, t: CmTimers) -> CmConfig {
    let mut c = CmConfig::new(local, node_guid(local), seed);
    c.packet_life_time = t.packet_life_time;
    c.cm_response_timeout = t.cm_response_timeout;
    c.max_cm_retries = t.max_cm_retries;
    c
}

/// A scatter/gather element over a region (helper for callers).
pub fn sge(region: &Region, offset: usize, len: u32) -> Sge {
    Sge::new(region.addr() + offset as u64, len, region.lkey())
}

/// The node GUID of a NIC: a fixed prefix and the low bits of its address
/// (stable across runs, distinct per address).
pub fn node_guid(addr: IpAddr) -> u64 {
    let o = ndverbs_wire::cma::gid_of(addr).octets();
    u64::from_be_bytes([0x02, 0x00, 0x6e, 0x64, o[12], o[13], o[14], o[15]])
}

/// A weak NIC handle (the stats publisher's): alive while the application
/// holds any [`Nic`] clone (the worker's own reference to the shared state
/// does not count).
#[derive(Clone)]
pub(crate) struct WeakNic {
    local: IpAddr,
    shared: Weak<Shared>,
    handles: Weak<AppHandles>,
}

impl WeakNic {
    pub(crate) fn upgrade(&self) -> Option<Nic> {
        Some(Nic {
            shared: self.shared.upgrade()?,
            handles: self.handles.upgrade()?,
        })
    }
}

impl crate::stats::Source for WeakNic {
    fn local(&self) -> IpAddr {
        self.local
    }

    fn snapshot(&self) -> Option<Stats> {
        self.upgrade().map(|n| n.stats())
    }

    fn publish_to(&self, path: &Path) -> bool {
        // Held through both writes: a last application handle that goes
        // meanwhile removes the files after them, as the publisher's own
        // clone goes.
        let Some(nic) = self.upgrade() else {
            return false;
        };
        crate::stats::write_snapshot(self.local, &nic.stats(), path);
        crate::resources::publish_if_wanted(self, path);
        true
    }

    fn resources(&self) -> Option<crate::resources::Resources> {
        self.upgrade().map(|n| n.resources())
    }
}

impl Nic {
    pub(crate) fn downgrade(&self) -> WeakNic {
        WeakNic {
            local: self.local(),
            shared: Arc::downgrade(&self.shared),
            handles: Arc::downgrade(&self.handles),
        }
    }
}

#[cfg(not(feature = "faults"))]
const NO_FAULTS: EngineError =
    EngineError::InvalidArgument("fault injection is not built in (feature `faults`)");
#[cfg(not(feature = "capture"))]
const NO_CAPTURE: EngineError =
    EngineError::InvalidArgument("packet capture is not built in (feature `capture`)");

/// The link stack over `link`: the fault layer (configured by `faults`)
/// and the capture layer (writing to `capture`'s file when one is set), each
/// when built in.
fn build_stack(
    link: NicLink,
    faults: Option<FaultConfig>,
    capture: &Arc<CaptureSlot>,
) -> Result<self::core::Stack, EngineError> {
    #[cfg(feature = "faults")]
    let link = {
        let mut layer = crate::link::faults::FaultLayer::default();
        layer.set_config(faults);
        crate::link::faults::FaultLink::new(link, layer)
    };
    #[cfg(not(feature = "faults"))]
    if faults.is_some_and(|f| !f.is_off()) {
        return Err(NO_FAULTS);
    }
    #[cfg(feature = "capture")]
    let link = {
        let at = link.local_addr();
        crate::link::capture::CaptureLink::new(
            link,
            crate::link::capture::CaptureLayer::new(capture.clone(), at),
        )
    };
    #[cfg(not(feature = "capture"))]
    let _ = capture;
    Ok(link)
}

/// Starts the capture `NicConfig::capture` asks for.
#[cfg(feature = "capture")]
fn start_capture(shared: &Shared, path: &Path, local: IpAddr) -> Result<(), EngineError> {
    let c = Capture::open(path, local).map_err(|e| {
        let what = format!("capture file {}", path.display());
        EngineError::Io(std::io::Error::new(e.kind(), format!("{what}: {e}")))
    })?;
    shared.capture.set(Some(c), local);
    Ok(())
}

#[cfg(not(feature = "capture"))]
fn start_capture(_: &Shared, _: &Path, _: IpAddr) -> Result<(), EngineError> {
    Err(NO_CAPTURE)
}

/// The fault layer of the stack.
#[cfg(feature = "faults")]
fn fault_layer(stack: &mut self::core::Stack) -> &mut crate::link::faults::FaultLayer {
    #[cfg(feature = "capture")]
    let stack = stack.inner_mut();
    stack.layer_mut()
}
