//! The one place verbs calls the engine.
//!
//! Everything verbs needs of `ndverbs-engine` goes through the crate-private
//! handles here: [`Nic`] (one engine per device), [`CqRing`], [`RegionRef`],
//! [`QpRef`] and [`SrqRef`]. They speak verbs' own types — [`Error`] with a
//! kind and the call that failed, [`Pending`], [`Stats`], the endpoint
//! argument and info types — and translate to and from the engine's at this
//! boundary only, so the engine can change shape (its tables, its error
//! variants, its names) without a type of it leaking into the API. Every
//! engine error variant is matched exhaustively: a new one fails to compile
//! here until it is given a kind.

use crate::config::{DeviceConfig, FaultConfig, Progress};
use crate::ep::{AcceptArgs, ConnectArgs, ConnectInfo, EpInfo, RequestInfo};
use crate::error::{Error, ErrorKind, Result};
use crate::observe::Stats;
use crate::pending::{Pending, Source};
use crate::qp::QpId;
use ndverbs_engine::config::{NicConfig, Progress as EngineProgress};
use ndverbs_engine::cq::{CompletionQueue, NotifyError, NotifyOn, ResizeError};
use ndverbs_engine::ep::{EpError, QpIdent};
use ndverbs_engine::error::EngineError;
use ndverbs_engine::link::faults::FaultConfig as EngineFaults;
use ndverbs_engine::mr::{MemError, Region, RegionBuf};
pub(crate) use ndverbs_engine::nic::SpinReport;
use ndverbs_engine::nic::{Nic as EngineNic, QpInit, QpShared, SrqShared};
use ndverbs_proto::mem::{Access, AccessError, WindowBind};
use ndverbs_proto::rc::{
    AttrMask, Counters, PathMtu, QpAttr, QpCaps, QpState, RecvWr, SendWr, WorkCompletion,
};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// rxe's hardware counter names, in rxe's order.
pub(crate) const RXE_COUNTERS: [&str; 15] = ndverbs_engine::stats::RXE_COUNTERS;

/// The node GUID of the device of `addr`.
pub(crate) fn node_guid(addr: IpAddr) -> u64 {
    ndverbs_engine::nic::node_guid(addr)
}

/// The OpenMetrics text exposition of `series`.
pub(crate) fn openmetrics(series: &[crate::observe::MetricSeries]) -> String {
    let s: Vec<ndverbs_engine::metrics::Series> = series
        .iter()
        .map(|m| ndverbs_engine::metrics::Series {
            device: m.device.clone(),
            addr: m.addr,
            pid: m.pid,
            time_ms: m.time_ms,
            counters: m.counters.clone(),
        })
        .collect();
    ndverbs_engine::metrics::render(&s)
}

/// The OpenMetrics content type.
pub(crate) const OPENMETRICS_CONTENT_TYPE: &str = ndverbs_engine::metrics::CONTENT_TYPE;

/// Where published counter snapshots go.
pub(crate) fn stat_dir() -> PathBuf {
    ndverbs_engine::config::stat_dir()
}

/// Whether the owner of a published snapshot still runs.
pub(crate) fn process_exists(pid: u32) -> bool {
    ndverbs_engine::stats::process_exists(pid)
}

/// Parses the `NDV_FAULTS` syntax.
pub(crate) fn parse_faults(spec: &str) -> Result<FaultConfig> {
    let c = EngineFaults::parse(spec).map_err(|e| {
        Error::new(
            ErrorKind::InvalidArgument,
            "FaultConfig::parse",
            e.to_string(),
        )
    })?;
    Ok(FaultConfig(c))
}

/// An engine error as a verbs error of call `op`.
fn err(op: &'static str, e: EngineError) -> Error {
    match e {
        EngineError::Removed => Error::kind_only(ErrorKind::DeviceRemoved, op),
        EngineError::NotFound { what, id } => Error::new(
            ErrorKind::NotFound,
            op,
            format!("no {what} with id {id:#x}"),
        ),
        EngineError::NotConnected => Error::kind_only(ErrorKind::NotConnected, op),
        EngineError::Busy(s) => Error::new(ErrorKind::Busy, op, s),
        EngineError::InvalidArgument(s) => Error::new(ErrorKind::InvalidArgument, op, s),
        EngineError::Io(e) => Error::io(op, e),
        EngineError::Modify(e) => Error::modify(op, e),
        EngineError::Post(e) => Error::post(op, e),
        EngineError::Mem(e) => mem_err(op, e),
        other => Error::new(ErrorKind::Internal, op, other.to_string()),
    }
}

fn mem_err(op: &'static str, e: MemError) -> Error {
    let text = e.to_string();
    match e {
        MemError::Empty | MemError::RemoteWriteNeedsLocalWrite => {
            Error::new(ErrorKind::InvalidArgument, op, text)
        }
        MemError::NoMemory(_) => Error::new(ErrorKind::NoMemory, op, text),
        MemError::UnknownKey(_) => Error::new(ErrorKind::NotFound, op, text),
        MemError::Busy(_) => Error::new(ErrorKind::Busy, op, text),
        MemError::BadBind(a) => Error::access(op, a),
        _ => Error::new(ErrorKind::Internal, op, text),
    }
}

fn ep_err(op: &'static str, e: EpError) -> Error {
    match e {
        EpError::DeviceRemoved => Error::kind_only(ErrorKind::DeviceRemoved, op),
        EpError::Canceled => Error::kind_only(ErrorKind::Canceled, op),
        EpError::Timeout => Error::new(ErrorKind::TimedOut, op, "the peer did not answer in time"),
        EpError::PortUnreachable => Error::new(
            ErrorKind::PortUnreachable,
            op,
            "the peer's host answered ICMP port unreachable: no RoCE endpoint there",
        ),
        EpError::Rejected {
            reason,
            private_data,
        } => Error::rejected(op, reason, private_data),
        EpError::Aborted => Error::new(
            ErrorKind::ConnectionAborted,
            op,
            "the connection went away before the request finished",
        ),
        EpError::InvalidState(s) => Error::new(ErrorKind::InvalidState, op, s),
        EpError::ConnectionActive => Error::new(ErrorKind::Busy, op, "connection already active"),
        EpError::NoQp(qpn) => Error::new(ErrorKind::NotFound, op, format!("no QP {qpn:#x}")),
        EpError::Modify(e) => Error::modify(op, e),
        EpError::Cm(e) => Error::cm(op, e),
        EpError::Lost => Error::new(
            ErrorKind::Internal,
            op,
            "the engine lost the request without an outcome",
        ),
        other => Error::new(ErrorKind::Internal, op, other.to_string()),
    }
}

/// The engine's name for the QP `qp` identifies.
fn ident(qp: QpId) -> QpIdent {
    QpIdent {
        qpn: qp.qpn,
        generation: qp.generation,
    }
}

fn notify_err(e: NotifyError) -> Error {
    const OP: &str = "Cq::notify";
    match e {
        NotifyError::Canceled => Error::kind_only(ErrorKind::Canceled, OP),
        NotifyError::Overflow => Error::new(ErrorKind::Overflow, OP, "completions were lost"),
        NotifyError::DeviceRemoved => Error::kind_only(ErrorKind::DeviceRemoved, OP),
        other => Error::new(ErrorKind::Internal, OP, other.to_string()),
    }
}

/// An engine request whose outcome is translated when it is taken.
struct Mapped<U, E, T> {
    p: ndverbs_engine::pending::Pending<std::result::Result<U, E>>,
    ok: fn(U) -> T,
    err: fn(&'static str, E) -> Error,
    op: &'static str,
}

impl<U, E, T> Mapped<U, E, T> {
    fn map(&self, r: std::result::Result<U, E>) -> Result<T> {
        r.map(self.ok).map_err(|e| (self.err)(self.op, e))
    }
}

impl<U: Send + 'static, E: Send + 'static, T: 'static> Source<T> for Mapped<U, E, T> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<T>> {
        match std::pin::Pin::new(&mut self.p).poll(cx) {
            Poll::Ready(r) => Poll::Ready(self.map(r)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn try_take(&self) -> Option<Result<T>> {
        self.p.try_take().map(|r| self.map(r))
    }

    fn wait_timeout(&self, timeout: Duration) -> Option<Result<T>> {
        self.p.wait_timeout(timeout).map(|r| self.map(r))
    }

    fn wait(self: Box<Self>) -> Result<T> {
        let (ok, err, op) = (self.ok, self.err, self.op);
        self.p.wait().map(ok).map_err(|e| err(op, e))
    }

    fn is_ready(&self) -> bool {
        self.p.is_done()
    }
}

/// `InvalidArgument` for a registration larger than every device allows.
fn check_mr_size(op: &'static str, len: usize) -> Result<()> {
    let max = ndverbs_proto::limits::LIMITS.max_mr_size;
    if len as u64 > max {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            op,
            format!("{len} bytes exceed the largest registration, {max}"),
        ));
    }
    Ok(())
}

/// An endpoint request of `nic` as a verbs [`Pending`].
fn pending<U: Send + 'static, T: 'static>(
    nic: &Nic,
    op: &'static str,
    p: ndverbs_engine::ep::EpPending<U>,
    ok: fn(U) -> T,
) -> Pending<T> {
    Pending::new(Box::new(Mapped {
        p,
        ok,
        err: ep_err,
        op,
    }))
    .driven_by(nic)
}

fn notify_on(on: crate::NotifyOn) -> NotifyOn {
    match on {
        crate::NotifyOn::Any => NotifyOn::Any,
        crate::NotifyOn::Solicited => NotifyOn::Solicited,
        crate::NotifyOn::Errors => NotifyOn::Errors,
    }
}

/// The engine of one device.
#[derive(Debug, Clone)]
pub(crate) struct Nic(EngineNic);

impl Nic {
    /// Opens the engine for `addr` and applies `cfg` (no environment is read:
    /// see [`DeviceConfig::from_env`] for that).
    pub(crate) fn open(addr: IpAddr, cfg: &DeviceConfig) -> Result<Nic> {
        const OP: &str = "Device::open";
        let progress = match cfg.progress {
            Progress::Thread => EngineProgress::Thread,
            Progress::Manual => EngineProgress::Manual,
        };
        // Built field by field, never from the engine's environment reader.
        let engine_cfg = NicConfig {
            progress,
            faults: cfg.faults.map(|f| f.0),
            capture: None,
            publish_stats: cfg.publish_stats,
            active_mtu: crate::netif::active_mtu_of(addr),
            congestion: cfg
                .congestion_control
                .then(ndverbs_proto::cc::CcConfig::default),
            share_port: cfg.share_port,
            spin_before_sleep: !cfg.sleep_at_once,
            ..NicConfig::default()
        };
        let nic = Nic(EngineNic::open_with(addr, engine_cfg).map_err(|e| err(OP, e))?);
        // Capture is switched on here rather than by the engine's open, so a
        // file that cannot be written is told apart from the address (both
        // are I/O errors) and named.
        if let Some(path) = &cfg.capture {
            nic.capture_to(OP, Some(path))?;
        }
        if let Some(at) = cfg.metrics {
            nic.serve_metrics(OP, at)?;
        }
        Ok(nic)
    }

    pub(crate) fn local(&self) -> IpAddr {
        self.0.local()
    }

    pub(crate) fn active_mtu(&self) -> PathMtu {
        self.0.active_mtu()
    }

    pub(crate) fn progress_mode(&self) -> Progress {
        match self.0.mode() {
            EngineProgress::Thread => Progress::Thread,
            EngineProgress::Manual => Progress::Manual,
            _ => Progress::Thread,
        }
    }

    pub(crate) fn same_as(&self, other: &Nic) -> bool {
        self.0.same_as(&other.0)
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.0.is_removed()
    }

    pub(crate) fn remove(&self) {
        self.0.remove();
    }

    pub(crate) fn progress(&self) -> bool {
        self.0.progress()
    }

    pub(crate) fn has_queued_work(&self) -> bool {
        self.0.has_queued_work()
    }

    pub(crate) fn poll_step(&self) -> bool {
        self.0.poll_step()
    }

    pub(crate) fn end_busy_poll(&self) {
        self.0.end_busy_poll();
    }

    pub(crate) fn spin_before_sleep(&self, ready: impl FnMut() -> bool) -> SpinReport {
        self.0.spin_before_sleep(ready)
    }

    pub(crate) fn slept(&self, spin: SpinReport, woken: bool) {
        spin.slept(&self.0, woken);
    }

    pub(crate) fn poll_step_before_sleep(&self) -> bool {
        self.0.poll_step_before_sleep()
    }

    pub(crate) fn progress_wait(&self, timeout: Duration) -> Result<()> {
        self.0
            .progress_wait(timeout)
            .map_err(|e| err("Device::progress_wait", e))
    }

    pub(crate) fn progress_wait_spinning(&self, timeout: Duration, op: &'static str) -> Result<()> {
        self.0
            .progress_wait_spinning(timeout)
            .map_err(|e| err(op, e))
    }

    pub(crate) fn progress_wait_or_idle(&self, timeout: Duration, idle: Duration) -> Result<()> {
        self.0
            .progress_wait_or_idle(timeout, idle)
            .map_err(|e| err("Device::progress_wait_or_idle", e))
    }

    pub(crate) fn wake(&self) {
        self.0.wake()
    }

    // Observing.

    pub(crate) fn stats(&self) -> Stats {
        Stats(self.0.stats())
    }

    pub(crate) fn publish_stats(&self) {
        self.0.publish_stats();
    }

    /// Serves the counters at `at` under the device's name (`ndvN`, empty
    /// when the address is none of the host's).
    pub(crate) fn serve_metrics(&self, op: &'static str, at: SocketAddr) -> Result<SocketAddr> {
        let local = self.local();
        let name = crate::Device::list()
            .ok()
            .and_then(|l| l.into_iter().find(|d| d.addr == local))
            .map_or(String::new(), |d| d.name);
        self.0.serve_metrics(at, &name).map_err(|e| match e {
            EngineError::Io(io) => Error::io_about(op, Some(format!("metrics endpoint {at}")), io),
            e => err(op, e),
        })
    }

    pub(crate) fn set_capture(&self, path: Option<&Path>) -> Result<()> {
        self.capture_to("Device::set_capture", path)
    }

    /// Starts or stops capture; a file that cannot be written is an error
    /// naming it (the system's message does not).
    fn capture_to(&self, op: &'static str, path: Option<&Path>) -> Result<()> {
        self.0.set_capture(path).map_err(|e| match e {
            EngineError::Io(io) => Error::io_about(
                op,
                path.map(|p| format!("capture file {}", p.display())),
                io,
            ),
            e => err(op, e),
        })
    }

    pub(crate) fn capture_path(&self) -> Option<PathBuf> {
        self.0.capture().map(|c| c.path().to_path_buf())
    }

    pub(crate) fn set_faults(&self, cfg: Option<&FaultConfig>) -> Result<()> {
        self.0
            .set_faults(cfg.map(|f| f.0))
            .map_err(|e| err("Device::set_faults", e))
    }

    // Protection domains and memory.

    pub(crate) fn alloc_pd(&self) -> Result<u32> {
        self.0.alloc_pd().map_err(|e| err("Device::alloc_pd", e))
    }

    pub(crate) fn dealloc_pd(&self, pd: u32) -> Result<()> {
        self.0.dealloc_pd(pd).map_err(|e| err("Pd::drop", e))
    }

    pub(crate) fn reg_mr(&self, pd: u32, len: usize, access: Access) -> Result<RegionRef> {
        const OP: &str = "Pd::reg_mr";
        check_mr_size(OP, len)?;
        let buf = RegionBuf::alloc(len).map_err(|e| mem_err(OP, e))?;
        let r = self.0.reg_mr(pd, buf, access).map_err(|e| err(OP, e))?;
        Ok(RegionRef(r))
    }

    /// # Safety
    /// `ptr..ptr+len` must stay valid for reads and writes, and must not be
    /// accessed through Rust references, until the region is dropped.
    pub(crate) unsafe fn reg_mr_raw(
        &self,
        pd: u32,
        ptr: NonNull<u8>,
        len: usize,
        access: Access,
    ) -> Result<RegionRef> {
        const OP: &str = "Pd::reg_mr_raw";
        check_mr_size(OP, len)?;
        // SAFETY: forwarded to the caller.
        let buf = unsafe { RegionBuf::from_raw(ptr, len) }.map_err(|e| mem_err(OP, e))?;
        let r = self.0.reg_mr(pd, buf, access).map_err(|e| err(OP, e))?;
        Ok(RegionRef(r))
    }

    /// # Safety
    /// As for [`Nic::reg_mr_raw`].
    pub(crate) unsafe fn rereg_mr_raw(
        &self,
        lkey: u32,
        pd: u32,
        ptr: NonNull<u8>,
        len: usize,
        access: Access,
    ) -> Result<RegionRef> {
        const OP: &str = "Mr::rereg_raw";
        check_mr_size(OP, len)?;
        // SAFETY: forwarded to the caller.
        let buf = unsafe { RegionBuf::from_raw(ptr, len) }.map_err(|e| mem_err(OP, e))?;
        let r = self
            .0
            .rereg_mr(lkey, pd, buf, access)
            .map_err(|e| err(OP, e))?;
        Ok(RegionRef(r))
    }

    pub(crate) fn dereg_mr(&self, lkey: u32) -> Result<()> {
        self.0.dereg_mr(lkey).map_err(|e| err("Mr::deregister", e))
    }

    pub(crate) fn revoke_mr(&self, lkey: u32) -> Result<()> {
        self.0.revoke_mr(lkey).map_err(|e| err("Mr::drop", e))
    }

    pub(crate) fn alloc_mw(&self, pd: u32) -> Result<u32> {
        self.0.alloc_mw(pd).map_err(|e| err("Pd::alloc_mw", e))
    }

    pub(crate) fn bind_mw(&self, rkey: u32, bind: WindowBind) -> Result<u32> {
        self.0.bind_mw(rkey, bind).map_err(|e| err("Mw::bind", e))
    }

    pub(crate) fn invalidate_mw(&self, rkey: u32) -> Result<()> {
        self.0
            .invalidate_mw(rkey)
            .map_err(|e| err("Mw::invalidate", e))
    }

    pub(crate) fn dealloc_mw(&self, rkey: u32) -> Result<()> {
        self.0.dealloc_mw(rkey).map_err(|e| err("Mw::drop", e))
    }

    // Queues.

    pub(crate) fn create_cq(&self, depth: u32) -> Result<(u32, CqRing)> {
        let (id, cq) = self
            .0
            .create_cq(depth)
            .map_err(|e| err("Device::create_cq", e))?;
        Ok((id, CqRing(cq)))
    }

    pub(crate) fn destroy_cq(&self, id: u32) -> Result<()> {
        self.0.destroy_cq(id).map_err(|e| err("Cq::drop", e))
    }

    pub(crate) fn create_srq(&self, pd: u32, max_wr: u32, max_sge: u32) -> Result<SrqRef> {
        let s = self
            .0
            .create_srq(pd, max_wr, max_sge)
            .map_err(|e| err("Pd::create_srq", e))?;
        Ok(SrqRef(s))
    }

    pub(crate) fn resize_srq(&self, srq: &SrqRef, max_wr: u32) -> Result<()> {
        const OP: &str = "Srq::resize";
        self.0.resize_srq(srq.id(), max_wr).map_err(|e| match e {
            EngineError::Busy(s) => Error::new(ErrorKind::Overflow, OP, s),
            e => err(OP, e),
        })
    }

    pub(crate) fn destroy_srq(&self, srq: &SrqRef) -> Result<()> {
        self.0
            .destroy_srq(srq.id())
            .map_err(|e| err("Srq::drop", e))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_qp(
        &self,
        qp_type: crate::qp::QpType,
        pd: u32,
        send_cq: u32,
        recv_cq: u32,
        srq: Option<&SrqRef>,
        caps: QpCaps,
        max_recv_wr: u32,
        max_recv_sge: u32,
    ) -> Result<QpRef> {
        let init = QpInit {
            pd,
            send_cq,
            recv_cq,
            srq: srq.map(SrqRef::id),
            caps,
            max_recv_wr,
            max_recv_sge,
        };
        let q = match qp_type {
            crate::qp::QpType::Rc => self.0.create_qp(init),
            crate::qp::QpType::Ud => self.0.create_ud_qp(init),
        }
        .map_err(|e| err("Pd::create_qp", e))?;
        Ok(QpRef(q))
    }

    pub(crate) fn modify_qp(&self, qpn: u32, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        self.0
            .modify_qp(qpn, attr, mask)
            .map_err(|e| err("Qp::modify", e))
    }

    pub(crate) fn query_qp(&self, qpn: u32) -> Result<QpAttr> {
        self.0.query_qp(qpn).map_err(|e| err("Qp::query", e))
    }

    pub(crate) fn destroy_qp(&self, qpn: u32) -> Result<()> {
        self.0.destroy_qp(qpn).map_err(|e| err("Qp::drop", e))
    }

    pub(crate) fn qp_counters(&self, qpn: u32) -> Result<Counters> {
        self.0.qp_counters(qpn).map_err(|e| err("Qp::counters", e))
    }

    pub(crate) fn post_send(&self, qp: &QpRef, wr: SendWr) -> Result<()> {
        self.0
            .post_send(&qp.0, wr)
            .map_err(|e| err("Qp::post_send", e))
    }

    pub(crate) fn post_send_ud(&self, qp: &QpRef, wr: ndverbs_proto::ud::UdSendWr) -> Result<()> {
        self.0
            .post_ud_send(&qp.0, wr)
            .map_err(|e| err("Qp::post_send_ud", e))
    }

    pub(crate) fn post_recv(&self, qp: &QpRef, wr: RecvWr) -> Result<()> {
        self.0
            .post_recv(&qp.0, wr)
            .map_err(|e| err("Qp::post_recv", e))
    }

    pub(crate) fn post_srq_recv(&self, srq: &SrqRef, wr: RecvWr) -> Result<()> {
        self.0
            .post_srq_recv(&srq.0, wr)
            .map_err(|e| err("Srq::post_recv", e))
    }

    // Connection endpoints.

    pub(crate) fn create_ep(&self) -> Result<u32> {
        self.0.create_ep().map_err(|e| err("Endpoint::new", e))
    }

    pub(crate) fn destroy_ep(&self, ep: u32) -> Result<()> {
        self.0.destroy_ep(ep).map_err(|e| err("Endpoint::drop", e))
    }

    pub(crate) fn ep_info(&self, ep: u32) -> Result<EpInfo> {
        self.0.ep_info(ep).map_err(|e| err("Endpoint::info", e))
    }

    pub(crate) fn ep_listen(&self, ep: u32, port: u16, backlog: usize) -> Result<()> {
        self.0
            .ep_listen(ep, port, backlog)
            .map_err(|e| err("Endpoint::listen", e))
    }

    pub(crate) fn ep_listen_ud(&self, ep: u32, port: u16, backlog: usize) -> Result<()> {
        self.0
            .ep_listen_ps(ep, ndverbs_wire::cma::RDMA_PS_UDP, port, backlog)
            .map_err(|e| err("Endpoint::listen_ud", e))
    }

    pub(crate) fn ep_resolve(
        &self,
        ep: u32,
        a: ndverbs_proto::cm::SidrArgs,
    ) -> Result<Pending<ndverbs_proto::cm::SidrInfo>> {
        const OP: &str = "Endpoint::resolve";
        let p = self.0.ep_resolve(ep, a).map_err(|e| err(OP, e))?;
        Ok(pending(self, OP, p, |i| i))
    }

    pub(crate) fn ep_accept_ud(
        &self,
        ep: u32,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<()> {
        self.0
            .ep_accept_ud(ep, qpn, qkey, private_data)
            .map_err(|e| err("Endpoint::accept_ud", e))
    }

    pub(crate) fn ep_get_request(&self, listener: u32, into: u32) -> Result<Pending<RequestInfo>> {
        const OP: &str = "Endpoint::get_request";
        let p = self
            .0
            .ep_get_request(listener, into)
            .map_err(|e| err(OP, e))?;
        Ok(pending(self, OP, p, |r| r))
    }

    pub(crate) fn ep_connect(
        &self,
        ep: u32,
        qp: QpId,
        a: ConnectArgs,
    ) -> Result<Pending<ConnectInfo>> {
        const OP: &str = "Endpoint::connect";
        let p = self
            .0
            .ep_connect(ep, ident(qp), a)
            .map_err(|e| err(OP, e))?;
        Ok(pending(self, OP, p, |c| c))
    }

    pub(crate) fn ep_complete_connect(&self, ep: u32, qp: QpId) -> Result<Pending<()>> {
        const OP: &str = "Endpoint::complete_connect";
        let p = self
            .0
            .ep_complete_connect(ep, ident(qp))
            .map_err(|e| err(OP, e))?;
        Ok(pending(self, OP, p, |()| ()))
    }

    pub(crate) fn ep_accept(&self, ep: u32, qp: QpId, a: AcceptArgs) -> Result<Pending<()>> {
        const OP: &str = "Endpoint::accept";
        let p = self.0.ep_accept(ep, ident(qp), a).map_err(|e| err(OP, e))?;
        Ok(pending(self, OP, p, |()| ()))
    }

    pub(crate) fn ep_reject(&self, ep: u32, private_data: &[u8]) -> Result<()> {
        self.0
            .ep_reject(ep, private_data)
            .map_err(|e| err("Endpoint::reject", e))
    }

    pub(crate) fn ep_disconnect(&self, ep: u32, qp: QpId) -> Result<Pending<()>> {
        const OP: &str = "Endpoint::disconnect";
        let p = self
            .0
            .ep_disconnect(ep, ident(qp))
            .map_err(|e| err(OP, e))?;
        Ok(pending(self, OP, p, |()| ()))
    }

    pub(crate) fn ep_notify_disconnect(&self, ep: u32) -> Result<Pending<()>> {
        const OP: &str = "Endpoint::notify_disconnect";
        let p = self.0.ep_notify_disconnect(ep).map_err(|e| err(OP, e))?;
        Ok(pending(self, OP, p, |()| ()))
    }

    pub(crate) fn ep_cancel(&self, ep: u32) -> Result<()> {
        match self.0.ep_cancel(ep) {
            // Cancelling is cleanup, which works after removal; the removal
            // already ended every request, so there is nothing left to do.
            Err(EngineError::Removed) => Ok(()),
            r => r.map_err(|e| err("Endpoint::cancel", e)),
        }
    }
}

/// A completion queue's ring and notification state.
#[derive(Debug)]
pub(crate) struct CqRing(Arc<CompletionQueue>);

impl CqRing {
    pub(crate) fn mark(&self) -> crate::CqMark {
        crate::CqMark {
            ring: self.0.clone(),
            at: self.0.mark(),
        }
    }

    pub(crate) fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        self.0.poll(out)
    }

    pub(crate) fn poll_one(&self) -> Option<WorkCompletion> {
        self.0.poll_one()
    }

    pub(crate) fn arm(&self, on: crate::NotifyOn) {
        self.0.arm(notify_on(on));
    }

    pub(crate) fn disarm(&self) {
        self.0.disarm();
    }

    pub(crate) fn is_armed(&self) -> bool {
        self.0.is_armed()
    }

    pub(crate) fn take_events(&self) -> u64 {
        self.0.take_events()
    }

    /// Sleeps on the notification descriptor up to `timeout`; true if a
    /// notification woke it.
    pub(crate) fn wait(&self, timeout: Duration) -> Result<bool> {
        self.0
            .wait(Some(timeout))
            .map_err(|e| Error::io("Cq::wait_one", e))
    }

    pub(crate) fn notify(&self, on: crate::NotifyOn) -> Pending<()> {
        Pending::new(Box::new(Mapped {
            p: self.0.notify(notify_on(on)),
            ok: |()| (),
            err: |_, e| notify_err(e),
            op: "Cq::notify",
        }))
    }

    /// Ends every pending notification with `kind` (`Canceled` or
    /// `DeviceRemoved`).
    pub(crate) fn end_waiters(&self, kind: ErrorKind) {
        let e = match kind {
            ErrorKind::DeviceRemoved => NotifyError::DeviceRemoved,
            _ => NotifyError::Canceled,
        };
        self.0.end_waiters(Err(e));
    }

    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        self.0.fd()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn depth(&self) -> usize {
        self.0.depth()
    }

    pub(crate) fn overflowed(&self) -> bool {
        self.0.overflowed()
    }

    pub(crate) fn resize(&self, depth: u32) -> Result<()> {
        const OP: &str = "Cq::resize";
        self.0
            .resize(
                depth as usize,
                ndverbs_proto::limits::LIMITS.max_cqe as usize,
            )
            .map_err(|e| match e {
                ResizeError::TooSmall { .. } => Error::new(ErrorKind::Overflow, OP, e.to_string()),
                ResizeError::OutOfRange(_) => {
                    Error::new(ErrorKind::InvalidArgument, OP, e.to_string())
                }
                _ => Error::new(ErrorKind::Internal, OP, e.to_string()),
            })
    }
}

/// A registered region's keys and bytes.
#[derive(Debug)]
pub(crate) struct RegionRef(Arc<Region>);

impl RegionRef {
    pub(crate) fn lkey(&self) -> u32 {
        self.0.lkey()
    }

    pub(crate) fn rkey(&self) -> u32 {
        self.0.rkey()
    }

    pub(crate) fn addr(&self) -> u64 {
        self.0.addr()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn access(&self) -> Access {
        self.0.access()
    }

    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.0
            .read(offset, out)
            .map_err(|e: AccessError| Error::access("Mr::read", e))
    }

    pub(crate) fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.0
            .write(offset, data)
            .map_err(|e| Error::access("Mr::write", e))
    }

    /// # Safety
    /// As [`crate::Mr::as_ptr`].
    pub(crate) unsafe fn as_ptr(&self) -> *mut u8 {
        // SAFETY: forwarded to the caller.
        unsafe { self.0.as_ptr() }
    }
}

/// What the application side of a queue pair shares with the engine.
#[derive(Debug)]
pub(crate) struct QpRef(Arc<QpShared>);

impl QpRef {
    pub(crate) fn qpn(&self) -> u32 {
        self.0.qpn()
    }

    /// The QP's number and generation (its identity for endpoint requests).
    pub(crate) fn ident(&self) -> (u32, u64) {
        let id = self.0.ident();
        (id.qpn, id.generation)
    }

    pub(crate) fn state(&self) -> QpState {
        self.0.state()
    }

    pub(crate) fn is_ud(&self) -> bool {
        self.0.is_ud()
    }
}

/// What the application side of a shared receive queue shares with the engine.
#[derive(Debug)]
pub(crate) struct SrqRef(Arc<SrqShared>);

impl SrqRef {
    pub(crate) fn id(&self) -> u32 {
        self.0.id()
    }

    pub(crate) fn outstanding(&self) -> u32 {
        self.0.outstanding()
    }

    pub(crate) fn capacity(&self) -> u32 {
        self.0.capacity()
    }

    pub(crate) fn limit(&self) -> u32 {
        self.0.limit()
    }

    pub(crate) fn set_limit(&self, limit: u32) {
        self.0.set_limit(limit);
    }

    pub(crate) fn notify_limit(&self) -> Pending<()> {
        Pending::new(Box::new(Mapped {
            p: self.0.notify_limit(),
            ok: |()| (),
            err: |op, e| match e {
                NotifyError::DeviceRemoved => Error::kind_only(ErrorKind::DeviceRemoved, op),
                // An SRQ has no overflow: only cancellation is left.
                NotifyError::Canceled | NotifyError::Overflow => {
                    Error::kind_only(ErrorKind::Canceled, op)
                }
                other => Error::new(ErrorKind::Internal, op, other.to_string()),
            },
            op: "Srq::notify_limit",
        }))
    }

    /// Ends every pending limit request with `kind` (`Canceled` or
    /// `DeviceRemoved`).
    pub(crate) fn end_limit_waiters(&self, kind: ErrorKind) {
        self.0.end_limit_waiters(Err(match kind {
            ErrorKind::DeviceRemoved => NotifyError::DeviceRemoved,
            _ => NotifyError::Canceled,
        }));
    }
}
