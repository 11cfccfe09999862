//! `struct rdma_cm_id`: creating, destroying and moving ids, options, and
//! how an id's events reach its channel.
//!
//! An id is a published object (`crate::ffi`) whose public struct the
//! application reads; what the library knows about it sits in a [`Shared`]
//! that the event thread (`watch`) also holds, so an ending request finds
//! its id — or finds it destroyed ([`State::alive`]) and does nothing. The
//! library writes the public struct only under the id's lock, and only
//! before the event that tells the application about the change.
//!
//! Synchronous ids (created without a channel, as `rdma_create_ep` does)
//! get a private channel, and each call that would produce an event waits
//! for it there ([`complete`]), as rdma-core's `ucma_complete`.

use super::abi::*;
use super::addr::{self, PortSpace};
use super::channel::{self, ChanInner, Channel, ConnData, Queued};
use super::devices::{self, CmDev};
use crate::abi::{ibv_qp, ibv_qp_init_attr};
use crate::ffi::{self, lookup, ret_minus1, Kind, Object};
use crate::nic::Nic;
use libc::{c_int, c_void};
use ndverbs_verbs::{Endpoint, QpId, QpSetup};
use std::cell::UnsafeCell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// Where an id is in its life, as far as the calls it accepts go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Idle,
    Bound,
    AddrResolved,
    RouteResolved,
    Listening,
    /// REQ sent, waiting for the REP.
    Connecting,
    /// The REP arrived for a connection whose QP the application moves
    /// itself (`CONNECT_RESPONSE` reported): `rdma_establish` comes next.
    ConnectResponse,
    /// A request handed to the application (passive side), not answered.
    Requested,
    /// REP sent, waiting for the RTU.
    Accepting,
    Connected,
    /// DREQ/DREP exchanged (or the connection failed after it was up).
    Disconnected,
    /// The connection attempt failed (rejected, unreachable).
    Failed,
}

/// What the library keeps about an id.
pub(crate) struct State {
    pub(crate) alive: bool,
    pub(crate) channel: Arc<ChanInner>,
    /// The channel is private: calls wait for their events.
    pub(crate) sync: bool,
    pub(crate) ps: PortSpace,
    pub(crate) phase: Phase,
    /// Events handed to the application, and acknowledged.
    reported: u64,
    completed: u64,
    /// Our address (port assigned once bound), and the peer's.
    pub(crate) src: Option<SocketAddr>,
    pub(crate) dst: Option<SocketAddr>,
    /// The port this id holds in the port table.
    pub(crate) port_held: Option<u16>,
    pub(crate) dev: Option<CmDev>,
    pub(crate) nic: Option<Arc<Nic>>,
    /// The connection's endpoint (active side from connect, passive side
    /// from the request).
    pub(crate) ep: Option<Endpoint>,
    /// Listening endpoints, one per device listened on.
    pub(crate) listeners: Vec<Endpoint>,
    /// The QP the connection runs on (the id's, or the application's).
    pub(crate) qp: Option<QpId>,
    /// The application's own QP (`conn_param->qp_num`), which it moves to
    /// RTR and RTS itself; NULL when the connection runs on the id's.
    pub(crate) app_qp: *mut ibv_qp,
    /// The QP attributes the connection implies, once a request or a REP
    /// told them (what `rdma_init_qp_attr` reports for RTR and RTS).
    pub(crate) setup: Option<QpSetup>,
    pub(crate) reuseaddr: bool,
    pub(crate) afonly: bool,
    pub(crate) tos: u8,
    /// Negotiation: what the request offered, then what we use.
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    /// DISCONNECTED was queued (it is reported once).
    pub(crate) disconnect_reported: bool,
    /// `rdma_create_ep` on a passive address: the QP attributes each
    /// request's id gets (`rdma_get_request`).
    pub(crate) qp_init_attr: Option<ibv_qp_init_attr>,
    pub(crate) path_rec: Box<ibv_sa_path_rec>,
}

/// An id's state and its public pointer, shared with the event thread.
pub(crate) struct Shared {
    serial: u64,
    public: AtomicUsize,
    st: Mutex<State>,
    acked: Condvar,
}

// SAFETY: the raw pointers in the state (the QP attributes' CQs, the path
// record) are addresses of C objects, used only through the library's own
// calls, which check them; everything else is behind the mutex.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    /// The `struct rdma_cm_id *` the application holds.
    pub(crate) fn public(&self) -> *mut rdma_cm_id {
        self.public.load(Ordering::Acquire) as *mut rdma_cm_id
    }

    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An event of this id is being handed out: its public pointer, or
    /// `None` if the id is gone.
    pub(crate) fn report(&self) -> Option<*mut rdma_cm_id> {
        let mut st = self.lock();
        if !st.alive {
            return None;
        }
        st.reported += 1;
        Some(self.public())
    }

    pub(crate) fn acked(&self) {
        self.lock().completed += 1;
        self.acked.notify_all();
    }

    /// Waits until every event handed out for this id is acknowledged.
    fn wait_acked<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        while st.completed < st.reported {
            st = self.acked.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st
    }

    /// Writes the public struct with `f` (under the id's lock, held by the
    /// caller as `_st`).
    pub(crate) fn with_public<T>(&self, _st: &State, f: impl FnOnce(&mut rdma_cm_id) -> T) -> T {
        // SAFETY: the id is alive (the caller holds its lock and checked
        // `alive`, or is the application's call on a live id), so the
        // public struct is ours to write; the application reads it only
        // after the event or the call that tells it of the change.
        f(unsafe { &mut *self.public() })
    }
}

/// Queues an event for `id` on its channel (nothing if it is gone).
pub(crate) fn deliver(
    id: &Arc<Shared>,
    st: &State,
    ty: EventType,
    status: c_int,
    conn: ConnData,
    listen_id: Option<Arc<Shared>>,
) {
    if !st.alive {
        return;
    }
    st.channel.push(Queued {
        id: id.clone(),
        listen_id,
        ty,
        status,
        conn,
    });
}

/// `struct rdma_cm_id` and our state.
#[repr(C)]
pub(crate) struct Id {
    pub_: UnsafeCell<rdma_cm_id>,
    magic: u64,
    pub(crate) shared: Arc<Shared>,
}

// SAFETY: the public struct is the first field.
unsafe impl Object for Id {
    const KIND: Kind = Kind::CmId;
    const MAGIC: u64 = 0x6e64_7663_6d69_0012;
    type Public = rdma_cm_id;
    fn magic(&self) -> u64 {
        self.magic
    }
}

// SAFETY: the public struct is written only under the shared lock.
unsafe impl Sync for Id {}

/// The live id behind `p`, or `EINVAL`.
pub(crate) fn get(p: *mut rdma_cm_id) -> Result<Arc<Shared>, c_int> {
    Ok(lookup::<Id>(p)?.shared.clone())
}

/// Every id created, for [`at_exit`].
fn live() -> &'static Mutex<Vec<std::sync::Weak<Shared>>> {
    static L: OnceLock<Mutex<Vec<std::sync::Weak<Shared>>>> = OnceLock::new();
    L.get_or_init(|| {
        OWNER.store(std::process::id(), Ordering::Relaxed);
        // SAFETY: registers a function with no preconditions, once.
        unsafe { libc::atexit(at_exit) };
        Mutex::new(Vec::new())
    })
}

/// The process whose ids [`live`] lists (a forked child inherits the list,
/// not the engines' threads).
static OWNER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// At process exit, ends every connection still open the way closing the
/// kernel's rdma_cm descriptor does: each endpoint sends its DREQ (or REJ,
/// or DREP) now, so the peer hears of it instead of timing out.
extern "C" fn at_exit() {
    if OWNER.load(Ordering::Relaxed) != std::process::id() {
        return;
    }
    ffi::guarded((), || {
        let ids: Vec<Arc<Shared>> = live()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        for id in ids {
            let (ep, listeners) = {
                let mut st = id.lock();
                (st.ep.take(), std::mem::take(&mut st.listeners))
            };
            drop(ep);
            drop(listeners);
        }
    })
}

/// A new id on `channel` (a private one if `None`).
pub(crate) fn create(
    channel: Option<(Arc<ChanInner>, *mut rdma_event_channel)>,
    context: *mut c_void,
    ps: PortSpace,
) -> Result<Arc<Shared>, c_int> {
    static SERIAL: AtomicU64 = AtomicU64::new(1);
    let (chan, chan_ptr, sync) = match channel {
        Some((c, p)) => (c, p, false),
        None => {
            let c = ChanInner::new()?;
            let p = channel::publish(c.clone());
            (c, p, true)
        }
    };
    // SAFETY: plain C data; all zeroes is valid.
    let mut public: rdma_cm_id = unsafe { std::mem::zeroed() };
    public.channel = chan_ptr;
    public.context = context;
    public.ps = ps as c_int;
    // As librdmacm: the UDP port space means UD QPs.
    public.qp_type = match ps {
        PortSpace::Tcp => crate::abi::IBV_QPT_RC,
        PortSpace::Udp => crate::abi::IBV_QPT_UD,
    };
    // SAFETY: plain C data.
    let path_rec = Box::new(unsafe { std::mem::zeroed::<ibv_sa_path_rec>() });
    let state = State {
        alive: true,
        channel: chan,
        sync,
        ps,
        phase: Phase::Idle,
        reported: 0,
        completed: 0,
        src: None,
        dst: None,
        port_held: None,
        dev: None,
        nic: None,
        ep: None,
        listeners: Vec::new(),
        qp: None,
        app_qp: std::ptr::null_mut(),
        setup: None,
        reuseaddr: false,
        afonly: false,
        tos: 0,
        responder_resources: 0,
        initiator_depth: 0,
        disconnect_reported: false,
        qp_init_attr: None,
        path_rec,
    };
    // The public pointer is known only once the object is on the heap:
    // publish with a placeholder, then fill it in before anyone sees it.
    let shared = Arc::new(Shared {
        serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        public: AtomicUsize::new(0),
        st: Mutex::new(state),
        acked: Condvar::new(),
    });
    let (obj, p) = ffi::publish(Id {
        pub_: UnsafeCell::new(public),
        magic: Id::MAGIC,
        shared,
    });
    obj.shared.public.store(p as usize, Ordering::Release);
    let mut l = live().lock().unwrap_or_else(|e| e.into_inner());
    l.retain(|w| w.strong_count() > 0);
    l.push(Arc::downgrade(&obj.shared));
    Ok(obj.shared.clone())
}

/// Binds `id` to device `d`: `verbs`, `port_num` and the default PD.
pub(crate) fn attach_device(id: &Shared, st: &mut State, d: CmDev) -> Result<(), c_int> {
    let nic = d.ctx.nic()?;
    let pd = d.pd()?;
    st.dev = Some(d);
    st.nic = Some(nic);
    id.with_public(st, |p| {
        p.verbs = d.verbs();
        p.port_num = 1;
        if p.pd.is_null() {
            p.pd = pd;
        }
    });
    Ok(())
}

/// For a synchronous id: waits for the event the call just caused, keeps
/// it in `id->event` (acknowledging the previous one) and turns a failure
/// status into the call's errno, as rdma-core's `ucma_complete`.
pub(crate) fn complete(id: &Arc<Shared>) -> Result<(), c_int> {
    let (sync, chan) = {
        let st = id.lock();
        (st.sync, st.channel.clone())
    };
    if !sync {
        return Ok(());
    }
    let prev = id.with_public(&id.lock(), |p| {
        std::mem::replace(&mut p.event, std::ptr::null_mut())
    });
    if !prev.is_null() {
        let _ = channel::ack(prev);
    }
    let ev = channel::get_event(&chan)?;
    id.with_public(&id.lock(), |p| p.event = ev);
    // SAFETY: the event just published.
    let (ty, status) = unsafe { ((*ev).event, (*ev).status) };
    if status != 0 {
        return Err(if ty == EventType::Rejected as c_int {
            libc::ECONNREFUSED
        } else {
            status.abs()
        });
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    ret_minus1(|| {
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let ps = PortSpace::from_c(ps)?;
        devices::init()?;
        let chan = if channel.is_null() {
            None
        } else {
            Some((lookup::<Channel>(channel)?.inner.clone(), channel))
        };
        let s = create(chan, context, ps)?;
        // SAFETY: the caller's out-pointer (checked non-NULL).
        unsafe { *id = s.public() };
        Ok(())
    })
}

/// Ends everything `id` has going and forgets it (after the application
/// acknowledged what it was handed).
pub(crate) fn destroy(p: *mut rdma_cm_id) -> Result<(), c_int> {
    let obj = lookup::<Id>(p)?;
    let id = obj.shared.clone();
    // The event a synchronous call kept.
    let kept = id.with_public(&id.lock(), |p| {
        std::mem::replace(&mut p.event, std::ptr::null_mut())
    });
    if !kept.is_null() {
        let _ = channel::ack(kept);
    }
    let (ep, listeners, chan, sync, port) = {
        let mut st = id.lock();
        st.alive = false;
        (
            st.ep.take(),
            std::mem::take(&mut st.listeners),
            st.channel.clone(),
            st.sync,
            st.port_held.take(),
        )
    };
    // Dropping the endpoints ends them as Linux does (REJ, DREQ or DREP)
    // and cancels their requests, whose tasks then find the id gone.
    drop(ep);
    drop(listeners);
    if let Some(port) = port {
        addr::release_port(id.serial(), port);
    }
    chan.take_of(&id);
    drop(id.wait_acked(id.lock()));
    let chan_ptr = id.with_public(&id.lock(), |p| p.channel);
    ffi::release(obj, |_| {});
    if sync {
        if let Ok(c) = lookup::<Channel>(chan_ptr) {
            ffi::release(c, |_| {});
        }
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    ret_minus1(|| destroy(id))
}

#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    ret_minus1(|| {
        let id = get(id)?;
        let (new, new_ptr, sync) = if channel.is_null() {
            let c = ChanInner::new()?;
            let p = channel::publish(c.clone());
            (c, p, true)
        } else {
            (lookup::<Channel>(channel)?.inner.clone(), channel, false)
        };
        let kept = id.with_public(&id.lock(), |p| {
            std::mem::replace(&mut p.event, std::ptr::null_mut())
        });
        if !kept.is_null() {
            let _ = channel::ack(kept);
        }
        let mut st = id.lock();
        let old = std::mem::replace(&mut st.channel, new.clone());
        let old_ptr = id.with_public(&st, |p| std::mem::replace(&mut p.channel, new_ptr));
        let was_sync = std::mem::replace(&mut st.sync, sync);
        for e in old.take_of(&id) {
            new.push(e);
        }
        drop(id.wait_acked(st));
        if was_sync {
            if let Ok(c) = lookup::<Channel>(old_ptr) {
                ffi::release(c, |_| {});
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    ret_minus1(|| {
        let id = get(id)?;
        if optval.is_null() {
            return Err(libc::EINVAL);
        }
        let mut st = id.lock();
        let int = |len: usize| -> Result<c_int, c_int> {
            if len != std::mem::size_of::<c_int>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: the caller's int (length checked).
            Ok(unsafe { *(optval as *const c_int) })
        };
        let byte = |len: usize| -> Result<u8, c_int> {
            if len != 1 {
                return Err(libc::EINVAL);
            }
            // SAFETY: the caller's byte (length checked).
            Ok(unsafe { *(optval as *const u8) })
        };
        match (level, optname) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => st.tos = byte(optlen)?,
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => {
                let v = int(optlen)? != 0;
                // The kernel's rule: before binding, or clearing it on a
                // listener.
                if !(st.phase == Phase::Idle || (!v && st.phase == Phase::Listening)) {
                    return Err(libc::EINVAL);
                }
                st.reuseaddr = v;
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => {
                let v = int(optlen)? != 0;
                if st.phase != Phase::Idle {
                    return Err(libc::EINVAL);
                }
                st.afonly = v;
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
                byte(optlen)?;
            }
            // Path records are InfiniBand's: a RoCE id has its route.
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => return Err(libc::EINVAL),
            _ => return Err(libc::ENOSYS),
        }
        Ok(())
    })
}

/// The port of the id's address `which` (network order), 0 if none.
fn port_of(id: *mut rdma_cm_id, src: bool) -> u16 {
    ffi::guarded(0, || match get(id) {
        Ok(id) => {
            let st = id.lock();
            let a = if src { st.src } else { st.dst };
            a.map_or(0, |a| a.port().to_be())
        }
        Err(_) => 0,
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    port_of(id, true)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    port_of(id, false)
}
