//! Connections: `rdma_listen`, `rdma_connect`, `rdma_accept`,
//! `rdma_reject`, `rdma_disconnect`, `rdma_establish`, `rdma_notify`, and
//! the events their endings become.
//!
//! Each call runs on a verbs [`Endpoint`] of the id's device, whose
//! requests make the QP moves rdma-core's `cma.c` makes: the active side's
//! QP goes to RTR and RTS when the REP arrives (before the RTU is sent),
//! the passive side's before the REP leaves (`rdma_accept` returns with the
//! QP in RTS), and `rdma_disconnect` moves the QP to ERR itself before the
//! DREQ (or the DREP, if the peer's DREQ came first). What the kernel would
//! report later comes from the requests' endings, on the event thread
//! (`watch`):
//!
//! | request ends | event |
//! |---|---|
//! | a listening endpoint's request | `CONNECT_REQUEST` on a new id (on the listener's channel), private data and the peer's read limits |
//! | connect: REP, QP in RTS, RTU sent | `ESTABLISHED` with the REP's private data |
//! | connect with the application's own QP: REP | `CONNECT_RESPONSE` with the REP's private data |
//! | connect: REJ | `REJECTED`, status = the REJ's reason, its private data; QP to ERR (nobody listening, reason 8: after 2 s of REQs, see [`NO_LISTENER_RETRY`]) |
//! | connect/accept: timeout | `UNREACHABLE`, status `-ETIMEDOUT` |
//! | accept: RTU | `ESTABLISHED` |
//! | the peer's DREQ, our DREQ's DREP (or its timeout) | `DISCONNECTED`, once per connection (after the peer's DREQ, once the program has polled what its CQs held then, at most 100 ms later: [`disconnected_after_polls`]); `TIMEWAIT_EXIT` a second later |
//! | the device went away | `DEVICE_REMOVAL` |
//!
//! A listener bound to a wildcard address listens on every device of its
//! family; each request's id gets the device it arrived on as `verbs`. One
//! bound to a loopback address (no device until then, `addr`) listens on
//! that address's device.
//!
//! ## The application's own QP
//!
//! Without a QP on the id, `rdma_connect` and `rdma_accept` take the QP
//! `conn_param->qp_num` names: an RC QP the application created on a
//! context of the id's device with this library's `ibv_create_qp` (any
//! other number is `EINVAL`; the kernel would not look). As with rdma-core
//! and the kernel, the application moves that QP itself, with the
//! attributes `rdma_init_qp_attr` hands out (`qp`):
//!
//! - active: `rdma_connect` wants the QP in INIT (the engine checks it
//!   before the REQ leaves, as for the id's); the REP is reported as
//!   `CONNECT_RESPONSE` instead of `ESTABLISHED`; the application moves
//!   the QP to RTR and RTS and calls `rdma_establish`, which sends the RTU
//!   and returns with the connection up (no event follows). `rdma_establish`
//!   is `EINVAL` on an id with a QP, before `CONNECT_RESPONSE` and after
//!   the RTU.
//! - passive: after `CONNECT_REQUEST` the application moves its QP to RTR
//!   and RTS (the request fixes our starting PSN) and calls `rdma_accept`,
//!   which leaves it there and sends the REP; `ESTABLISHED` comes with the
//!   RTU.
//!
//! The endpoint requests take a QP found in RTR or RTS as moved by the
//! application, if it was moved for this connection (its peer QPN and
//! PSNs), and fail otherwise before anything is sent (`rdma_establish`
//! returns `EINVAL`; an accept ends in `CONNECT_ERROR`).
//! Two differences from the kernel, which never touches such a QP: one
//! still in INIT at `rdma_accept` or `rdma_establish` is moved to RTS as
//! the id's would be, and `rdma_disconnect` moves it to ERR (rping `-q`
//! does so itself first).

use super::abi::*;
use super::addr;
use super::channel::{ConnData, Queued};
use super::devices;
use super::id::{self, deliver, Phase, Shared, State};
use super::watch;
use crate::abi::{ibv_qp, ibv_qp_attr, ibv_qp_init_attr, IBV_QP_STATE};
use crate::ffi::{lookup, ret_minus1};
use libc::{c_int, c_void};
use ndverbs_verbs::{AcceptArgs, ConnectArgs, Endpoint, Error, ErrorKind, QpId, LIMITS};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest private data: a REQ's after the rdma_cm header, a REP's, a REJ's.
const REQ_PRIVATE: usize = 56;
const REP_PRIVATE: usize = 196;
const REJ_PRIVATE: usize = 148;

/// How long after a connection ends `TIMEWAIT_EXIT` comes.
const TIMEWAIT: Duration = Duration::from_secs(1);

/// Longest a peer's DREQ waits for the program to poll what came before it
/// (see [`disconnected_after_polls`]).
const DRAIN_WAIT: Duration = Duration::from_millis(100);
/// How often it looks.
const POLL_CHECK: Duration = Duration::from_millis(1);

/// The REJ reason "invalid service ID": nothing listens on the port.
const REJ_INVALID_SERVICE_ID: u16 = 8;

/// How long a REQ that finds no listener is sent again before `REJECTED`
/// is reported. The kernel reports it at once; but servers commonly start
/// listening right after an out-of-band exchange with their client —
/// perftest `-R` connects its test QP the moment its exchange connection
/// has spoken, and perftest 4.5's own retry reuses the ids it has just
/// destroyed — so a slow server (rxe in an emulated guest) would lose
/// every race against this library's instant address and route
/// resolution. Within this window the client waits for the listener
/// instead.
pub(crate) const NO_LISTENER_RETRY: Duration = Duration::from_secs(2);

/// The pause between those REQs.
pub(crate) const RETRY_GAP: Duration = Duration::from_millis(20);

/// The QP of `qp` as verbs names it.
fn qp_id(qp: *mut ibv_qp) -> Result<QpId, c_int> {
    Ok(QpId::from(&lookup::<crate::qp::Qp>(qp)?.qp))
}

/// The application's QP numbered `qp_num` on device `d` (`conn_param->qp_num`
/// on an id without a QP): an RC QP this library created on a context of
/// that device, else `EINVAL`.
fn app_qp(d: &devices::CmDev, qp_num: u32) -> Result<(QpId, *mut ibv_qp), c_int> {
    for p in crate::ffi::all_of::<crate::qp::Qp>() {
        let Ok(q) = lookup::<crate::qp::Qp>(p) else {
            continue;
        };
        // SAFETY: a live QP of ours: its public struct is readable.
        let (num, ctx, ty) = unsafe { ((*p).qp_num, (*p).context, (*p).qp_type) };
        if num != qp_num || ty != crate::abi::IBV_QPT_RC {
            continue;
        }
        if lookup::<crate::device::Ctx>(ctx).is_ok_and(|c| std::ptr::eq(c.dev, d.dev)) {
            return Ok((QpId::from(&q.qp), p));
        }
    }
    Err(libc::EINVAL)
}

/// Moves the id's QP (if any) to `state`, through the library's own
/// `ibv_modify_qp` (which mirrors the state into `qp->state`).
fn modify_state(qp: *mut ibv_qp, state: c_int) -> Result<(), c_int> {
    if qp.is_null() {
        return Ok(());
    }
    // SAFETY: plain C data; all zeroes is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = state;
    // SAFETY: the id's QP (checked by ibv_modify_qp) and our attributes.
    match unsafe { crate::qp::ibv_modify_qp(qp, &mut a, IBV_QP_STATE) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// Refreshes `qp->state` after the engine moved the QP.
fn mirror_state(qp: *mut ibv_qp) {
    if qp.is_null() {
        return;
    }
    // SAFETY: plain C data; all zeroes is valid.
    let (mut a, mut i): (ibv_qp_attr, ibv_qp_init_attr) = unsafe { std::mem::zeroed() };
    // SAFETY: the id's QP and our structs; ibv_query_qp mirrors the state.
    unsafe { crate::qp::ibv_query_qp(qp, &mut a, IBV_QP_STATE, &mut i) };
}

/// The QP a connect (in `RouteResolved`) or an accept (in `Requested`)
/// moves: the id's own (`qp`, from `rdma_create_qp`) or, with none, the
/// application's QP `conn_param->qp_num` names (also returned as its
/// `ibv_qp`, else NULL). `conn_param` and the id's phase are checked first.
fn qp_to_move(
    qp: *mut ibv_qp,
    p: Option<&rdma_conn_param>,
    st: &State,
    phase: Phase,
) -> Result<(QpId, *mut ibv_qp), c_int> {
    valid_param(!qp.is_null(), p)?;
    if st.phase != phase {
        return Err(libc::EINVAL);
    }
    match (qp.is_null(), p, st.dev) {
        (false, _, _) => Ok((qp_id(qp)?, std::ptr::null_mut())),
        (true, Some(p), Some(d)) => app_qp(&d, p.qp_num),
        _ => Err(libc::EINVAL),
    }
}

/// `conn_param` checks rdma-core's `ucma_valid_param` makes.
fn valid_param(has_qp: bool, p: Option<&rdma_conn_param>) -> Result<(), c_int> {
    let max = LIMITS.max_qp_rd_atom;
    match p {
        None if !has_qp => Err(libc::EINVAL),
        None => Ok(()),
        Some(p) => {
            let bad = |v: u8, all: u8| v != all && v > max;
            if bad(p.responder_resources, RDMA_MAX_RESP_RES)
                || bad(p.initiator_depth, RDMA_MAX_INIT_DEPTH)
            {
                return Err(libc::EINVAL);
            }
            Ok(())
        }
    }
}

/// The private data of `p`, at most `max` bytes (`EINVAL` beyond).
///
/// # Safety
/// `p`'s private data pointer must hold its length in bytes.
pub(crate) unsafe fn private_data(
    p: Option<&rdma_conn_param>,
    max: usize,
) -> Result<Vec<u8>, c_int> {
    let Some(p) = p else { return Ok(Vec::new()) };
    let n = usize::from(p.private_data_len);
    if p.private_data.is_null() || n == 0 {
        return Ok(Vec::new());
    }
    if n > max {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's private data of `n` bytes.
    Ok(unsafe { std::slice::from_raw_parts(p.private_data as *const u8, n) }.to_vec())
}

/// What an ending request that failed means for the id: the event, or
/// nothing if the id's requests were cancelled (it is being destroyed).
pub(crate) fn failure_event(e: &Error) -> Option<(EventType, c_int, ConnData)> {
    Some(match e.kind() {
        ErrorKind::Canceled => return None,
        ErrorKind::Rejected => {
            let r = e.rejection();
            let conn = ConnData {
                private_data: r.map(|r| r.private_data.clone()).unwrap_or_default(),
                ..ConnData::default()
            };
            (
                EventType::Rejected,
                c_int::from(r.map_or(28, |r| r.reason)),
                conn,
            )
        }
        ErrorKind::TimedOut => (
            EventType::Unreachable,
            -libc::ETIMEDOUT,
            ConnData::default(),
        ),
        ErrorKind::DeviceRemoved => (EventType::DeviceRemoval, 0, ConnData::default()),
        _ => (EventType::ConnectError, -e.errno(), ConnData::default()),
    })
}

/// Delivers a failed attempt's event and ends the id's connection phase.
fn failed(id: &Arc<Shared>, st: &mut State, e: &Error) {
    let Some((ty, status, conn)) = failure_event(e) else {
        return;
    };
    st.phase = Phase::Failed;
    let qp = id.with_public(st, |p| p.qp);
    let _ = modify_state(qp, 6);
    deliver(id, st, ty, status, conn, None);
}

/// Watches an established connection for the peer's DREQ.
fn watch_disconnect(id: &Arc<Shared>, st: &State) {
    let Some(p) = st.ep.as_ref().and_then(|ep| ep.notify_disconnect().ok()) else {
        return;
    };
    let p = p.without_progress();
    let id = id.clone();
    watch::spawn(async move {
        let r = p.await;
        let mut st = id.lock();
        if !st.alive {
            return;
        }
        match r {
            Ok(()) => disconnected_after_polls(&id, &mut st),
            Err(e) if e.kind() == ErrorKind::ConnectionAborted => disconnected(&id, &mut st),
            Err(e) if e.kind() == ErrorKind::DeviceRemoved => {
                deliver(
                    &id,
                    &st,
                    EventType::DeviceRemoval,
                    0,
                    ConnData::default(),
                    None,
                );
            }
            Err(_) => {}
        }
    });
}

/// The peer's DREQ arrived: DISCONNECTED once the program has polled the
/// completions its QP's CQs held then (the peer's last messages, the ACKs
/// of our last sends), or after [`DRAIN_WAIT`].
///
/// The DREQ came after those on the wire, and with a NIC the program has
/// them long before the event reaches it (a busy-polling thread takes a
/// completion within microseconds; the event goes through the kernel's CM
/// and a channel). Here both reach the program at about the same time, and
/// a program busy elsewhere may see the event first: libfabric's rxm then
/// closes the connection from its CM thread, and polls the message that
/// was waiting afterwards, for an endpoint it has freed (or, if the
/// completions went with the QP, never gets its last message).
fn disconnected_after_polls(id: &Arc<Shared>, st: &mut State) {
    let qp = id.with_public(st, |p| p.qp);
    let marks = crate::qp::cq_marks(qp);
    if marks.iter().all(|m| m.polled()) {
        disconnected(id, st);
        return;
    }
    let deadline = Instant::now() + DRAIN_WAIT;
    let id = id.clone();
    watch::after(POLL_CHECK, move || check_polled(id, marks, deadline));
}

/// [`disconnected_after_polls`] on the event thread's timer: delivers, or
/// looks again after [`POLL_CHECK`].
fn check_polled(id: Arc<Shared>, marks: Vec<ndverbs_verbs::CqMark>, deadline: Instant) {
    let mut st = id.lock();
    if !st.alive || st.disconnect_reported {
        return;
    }
    if marks.iter().all(|m| m.polled()) || Instant::now() >= deadline {
        disconnected(&id, &mut st);
        return;
    }
    drop(st);
    watch::after(POLL_CHECK, move || check_polled(id, marks, deadline));
}

/// The connection ended: DISCONNECTED (once), TIMEWAIT_EXIT later.
fn disconnected(id: &Arc<Shared>, st: &mut State) {
    st.phase = Phase::Disconnected;
    if std::mem::replace(&mut st.disconnect_reported, true) {
        return;
    }
    deliver(
        id,
        st,
        EventType::Disconnected,
        0,
        ConnData::default(),
        None,
    );
    let id = id.clone();
    watch::after(TIMEWAIT, move || {
        let st = id.lock();
        deliver(
            &id,
            &st,
            EventType::TimewaitExit,
            0,
            ConnData::default(),
            None,
        );
    });
}

#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    ret_minus1(|| {
        let id = id::get(id)?;
        let mut st = id.lock();
        if st.phase == Phase::Idle {
            addr::bind(&id, &mut st, SocketAddr::from(([0u8; 4], 0)))?;
        }
        if st.phase != Phase::Bound {
            return Err(libc::EINVAL);
        }
        let src = st.src.ok_or(libc::EINVAL)?;
        let devs = match st.dev {
            Some(d) => vec![d],
            None if addr::is_loopback(src.ip()) => vec![devices::by_addr(src.ip())?],
            None => devices::all()?
                .into_iter()
                .filter(|d| match (src.ip(), d.addr()) {
                    (IpAddr::V4(_), a) => a.is_ipv4(),
                    (IpAddr::V6(_), a) => !st.afonly || a.is_ipv6(),
                })
                .collect(),
        };
        addr::listen_port(id.serial(), src.port())?;
        let backlog = if backlog <= 0 { 1024 } else { backlog as usize };
        let ps = st.ps;
        let mut listeners = Vec::new();
        let mut first_err = libc::ENODEV;
        for d in devs {
            let r = d.ctx.nic().and_then(|nic| {
                let ep = Endpoint::new(&nic.dev).map_err(|e| e.errno())?;
                match ps {
                    addr::PortSpace::Tcp => ep.listen(src.port(), backlog),
                    addr::PortSpace::Udp => ep.listen_ud(src.port(), backlog),
                }
                .map_err(|e| match e.kind() {
                    ErrorKind::Busy => libc::EADDRINUSE,
                    _ => e.errno(),
                })?;
                Ok(ep)
            });
            match r {
                Ok(ep) => listeners.push(ep),
                // A wildcard listener listens where it can.
                Err(e) if st.dev.is_none() => first_err = e,
                Err(e) => {
                    addr::unlisten_port(id.serial(), src.port());
                    return Err(e);
                }
            }
        }
        if listeners.is_empty() {
            addr::unlisten_port(id.serial(), src.port());
            return Err(first_err);
        }
        st.listeners = listeners;
        st.phase = Phase::Listening;
        for i in 0..st.listeners.len() {
            arm_listener(&id, &st, i);
        }
        Ok(())
    })
}

/// Waits for the next request on listener `i` of `id`.
fn arm_listener(id: &Arc<Shared>, st: &State, i: usize) {
    let Some(l) = st.listeners.get(i) else { return };
    let Ok(child) = Endpoint::new(l.device()) else {
        return;
    };
    let Ok(p) = l.get_request(&child) else { return };
    let p = p.without_progress();
    let id = id.clone();
    watch::spawn(async move {
        let r = p.await;
        let mut st = id.lock();
        if !st.alive {
            return;
        }
        match r {
            Ok(req) => {
                // A request that cannot become an id is turned down: its
                // endpoint, dropped, rejects it.
                let _ = new_request(&id, &mut st, child, &req);
                arm_listener(&id, &st, i);
            }
            Err(e) if e.kind() == ErrorKind::DeviceRemoved => {
                deliver(
                    &id,
                    &st,
                    EventType::DeviceRemoval,
                    0,
                    ConnData::default(),
                    None,
                );
            }
            Err(e) if e.kind() == ErrorKind::Canceled => {}
            Err(_) => arm_listener(&id, &st, i),
        }
    });
}

/// A request arrived on `listen`: a new id for it, and CONNECT_REQUEST on
/// the listener's channel.
fn new_request(
    listen: &Arc<Shared>,
    lst: &mut State,
    ep: Endpoint,
    req: &ndverbs_verbs::RequestInfo,
) -> Result<(), c_int> {
    let d = devices::by_addr(req.local).inspect_err(|_| {
        let _ = ep.reject(&[]);
    })?;
    let (chan_ptr, context) = listen.with_public(lst, |p| (p.channel, p.context));
    let chan = if lst.sync {
        None
    } else {
        Some((lst.channel.clone(), chan_ptr))
    };
    let child = id::create(chan, context, lst.ps)?;
    let port = lst.src.map_or(0, |s| s.port());
    {
        let mut st = child.lock();
        id::attach_device(&child, &mut st, d)?;
        st.src = Some(SocketAddr::new(req.local, port));
        st.dst = Some(SocketAddr::new(req.peer, req.peer_port));
        st.responder_resources = req.peer_read_limits.1;
        st.initiator_depth = req.peer_read_limits.0;
        st.ep = Some(ep);
        st.phase = Phase::Requested;
        st.qp_init_attr = lst.qp_init_attr;
        // A SIDR request implies no QP attributes.
        st.setup = (lst.ps == addr::PortSpace::Tcp).then_some(req.qp);
        let (src, dst) = (st.src, st.dst);
        let rec: *mut ibv_sa_path_rec = &mut *st.path_rec;
        child.with_public(&st, |p| {
            if let (Some(s), Some(d)) = (src, dst) {
                p.route.addr.src = addr::to_storage(s).0;
                p.route.addr.dst = addr::to_storage(d).0;
                p.route.addr.ibaddr.sgid = addr::gid(s.ip());
                p.route.addr.ibaddr.dgid = addr::gid(d.ip());
            }
            p.route.addr.ibaddr.pkey = 0xffffu16.to_be();
            p.route.path_rec = rec;
            p.route.num_paths = 1;
        });
    }
    let conn = if lst.ps == addr::PortSpace::Udp {
        ConnData {
            private_data: req.private_data.clone(),
            ..super::ud::ud_data(None)
        }
    } else {
        ConnData {
            private_data: req.private_data.clone(),
            responder_resources: req.peer_read_limits.1,
            initiator_depth: req.peer_read_limits.0,
            retry_count: req.qp.retry_cnt,
            rnr_retry_count: req.qp.rnr_retry,
            qp_num: req.qp.dest_qpn,
            ..ConnData::default()
        }
    };
    lst.channel.push(Queued {
        id: child,
        listen_id: Some(listen.clone()),
        ty: EventType::ConnectRequest,
        status: 0,
        conn,
    });
    Ok(())
}

/// Sends the REQ for `id` (on a fresh endpoint) and waits for its outcome
/// on the event thread: ESTABLISHED once the REP came, the QP is in RTS and
/// the RTU is sent. A REJ saying nothing listens on the port (reason 8) is
/// answered with another REQ, every [`RETRY_GAP`], until `until`; then it
/// is reported (see [`NO_LISTENER_RETRY`]).
fn start_connect(
    id: &Arc<Shared>,
    st: &mut State,
    qpid: QpId,
    args: ConnectArgs,
    until: Instant,
) -> Result<(), c_int> {
    let nic = st.nic.clone().ok_or(libc::ENODEV)?;
    let ep = Endpoint::new(&nic.dev).map_err(|e| e.errno())?;
    let pending = ep
        .connect(qpid, args.clone())
        .map_err(|e| e.errno())?
        .without_progress();
    st.ep = Some(ep);
    st.phase = Phase::Connecting;
    let id2 = id.clone();
    watch::spawn(async move {
        let r = pending.await;
        let done = {
            let mut st = id2.lock();
            if !st.alive {
                return;
            }
            match r {
                Ok(info) if !st.app_qp.is_null() => {
                    // The application moves its QP and calls
                    // rdma_establish (which sends the RTU).
                    st.setup = Some(info.qp);
                    st.phase = Phase::ConnectResponse;
                    let conn = ConnData {
                        private_data: info.private_data,
                        responder_resources: info.read_limits.0,
                        initiator_depth: info.read_limits.1,
                        rnr_retry_count: info.qp.rnr_retry,
                        qp_num: info.qp.dest_qpn,
                        ..ConnData::default()
                    };
                    deliver(&id2, &st, EventType::ConnectResponse, 0, conn, None);
                    None
                }
                Ok(info) => {
                    st.setup = Some(info.qp);
                    let next = st
                        .ep
                        .as_ref()
                        .ok_or(libc::EINVAL)
                        .and_then(|ep| ep.complete_connect(qpid).map_err(|e| e.errno()));
                    match next {
                        Ok(p) => Some((p.without_progress(), info)),
                        Err(e) => {
                            if let Some(ep) = st.ep.as_ref() {
                                let _ = ep.reject(&[]);
                            }
                            st.phase = Phase::Failed;
                            deliver(
                                &id2,
                                &st,
                                EventType::ConnectError,
                                -e,
                                ConnData::default(),
                                None,
                            );
                            None
                        }
                    }
                }
                Err(e)
                    if e.rejection()
                        .is_some_and(|r| r.reason == REJ_INVALID_SERVICE_ID)
                        && Instant::now() + RETRY_GAP < until =>
                {
                    let id3 = id2.clone();
                    watch::after(RETRY_GAP, move || {
                        let mut st = id3.lock();
                        if !st.alive || st.phase != Phase::Connecting {
                            return;
                        }
                        if let Err(e) = start_connect(&id3, &mut st, qpid, args, until) {
                            st.phase = Phase::Failed;
                            deliver(
                                &id3,
                                &st,
                                EventType::ConnectError,
                                -e,
                                ConnData::default(),
                                None,
                            );
                        }
                    });
                    None
                }
                Err(e) => {
                    failed(&id2, &mut st, &e);
                    None
                }
            }
        };
        let Some((rtu, info)) = done else { return };
        let r = rtu.await;
        let mut st = id2.lock();
        if !st.alive {
            return;
        }
        match r {
            Ok(()) => {
                mirror_state(id2.with_public(&st, |p| p.qp));
                st.phase = Phase::Connected;
                let conn = ConnData {
                    private_data: info.private_data,
                    responder_resources: info.read_limits.0,
                    initiator_depth: info.read_limits.1,
                    rnr_retry_count: info.qp.rnr_retry,
                    qp_num: info.qp.dest_qpn,
                    ..ConnData::default()
                };
                deliver(&id2, &st, EventType::Established, 0, conn, None);
                watch_disconnect(&id2, &st);
            }
            Err(e) => failed(&id2, &mut st, &e),
        }
    });
    Ok(())
}

/// `conn_param` or NULL.
///
/// # Safety
/// `p` must be NULL or point to a readable `rdma_conn_param`.
pub(crate) unsafe fn param<'a>(p: *const rdma_conn_param) -> Option<&'a rdma_conn_param> {
    // SAFETY: by the caller's contract.
    unsafe { p.as_ref() }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    ret_minus1(|| {
        let id = id::get(id)?;
        // SAFETY: the caller's conn_param or NULL.
        let p = unsafe { param(conn_param) };
        {
            let mut st = id.lock();
            if st.ps == addr::PortSpace::Udp {
                // SAFETY: the caller's conn_param or NULL.
                unsafe { super::ud::connect(&id, &mut st, conn_param) }?;
                drop(st);
                return id::complete(&id);
            }
            let qp = id.with_public(&st, |p| p.qp);
            let (qpid, own) = qp_to_move(qp, p, &st, Phase::RouteResolved)?;
            st.app_qp = own;
            let max = LIMITS.max_qp_rd_atom;
            let pick = |v: Option<u8>, all: u8| match v {
                Some(v) if v != all => v,
                _ => max,
            };
            st.initiator_depth = pick(p.map(|p| p.initiator_depth), RDMA_MAX_INIT_DEPTH);
            st.responder_resources = pick(p.map(|p| p.responder_resources), RDMA_MAX_RESP_RES);
            let (src, dst, d) = match (st.src, st.dst, st.dev) {
                (Some(s), Some(d), Some(dev)) => (s, d, dev),
                _ => return Err(libc::EINVAL),
            };
            let args = ConnectArgs {
                remote: dst.ip(),
                remote_port: dst.port(),
                local_port: src.port(),
                responder_resources: st.responder_resources,
                initiator_depth: st.initiator_depth,
                retry_count: p.map_or(7, |p| p.retry_count.min(7)),
                rnr_retry_count: p.map_or(7, |p| p.rnr_retry_count.min(7)),
                path_mtu: d.dev.info().active_mtu(),
                // SAFETY: the caller's private data.
                private_data: unsafe { private_data(p, REQ_PRIVATE) }?,
            };
            st.qp = Some(qpid);
            start_connect(&id, &mut st, qpid, args, Instant::now() + NO_LISTENER_RETRY)?;
        }
        id::complete(&id)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    ret_minus1(|| {
        let id = id::get(id)?;
        // SAFETY: the caller's conn_param or NULL.
        let p = unsafe { param(conn_param) };
        {
            let mut st = id.lock();
            if st.ps == addr::PortSpace::Udp {
                // SAFETY: the caller's conn_param or NULL.
                return unsafe { super::ud::accept(&id, &mut st, conn_param) };
            }
            let qp = id.with_public(&st, |p| p.qp);
            let (qpid, own) = qp_to_move(qp, p, &st, Phase::Requested)?;
            let max = LIMITS.max_qp_rd_atom;
            st.initiator_depth = match p.map(|p| p.initiator_depth) {
                Some(v) if v != RDMA_MAX_INIT_DEPTH => v,
                _ => st.initiator_depth.min(max),
            };
            st.responder_resources = match p.map(|p| p.responder_resources) {
                Some(v) if v != RDMA_MAX_RESP_RES => v,
                _ => st.responder_resources.min(max),
            };
            let args = AcceptArgs {
                responder_resources: st.responder_resources,
                initiator_depth: st.initiator_depth,
                rnr_retry_count: p.map_or(7, |p| p.rnr_retry_count.min(7)),
                // SAFETY: the caller's private data.
                private_data: unsafe { private_data(p, REP_PRIVATE) }?,
            };
            let (rr, depth) = (args.responder_resources, args.initiator_depth);
            let ep = st.ep.as_ref().ok_or(libc::EINVAL)?;
            let pending = ep
                .accept(qpid, args)
                .map_err(|e| match e.kind() {
                    ErrorKind::InvalidState => libc::EINVAL,
                    _ => e.errno(),
                })?
                .without_progress();
            // The engine moved a QP it found in INIT (ours or the
            // application's): `qp->state` says so.
            mirror_state(qp);
            mirror_state(own);
            st.qp = Some(qpid);
            st.app_qp = own;
            // What the REP said: the read limits clamped to the offer.
            if let Some(s) = st.setup.as_mut() {
                s.max_dest_rd_atomic = s.max_dest_rd_atomic.min(rr);
                s.max_rd_atomic = s.max_rd_atomic.min(depth);
            }
            st.phase = Phase::Accepting;
            let id2 = id.clone();
            watch::spawn(async move {
                let r = pending.await;
                let mut st = id2.lock();
                if !st.alive {
                    return;
                }
                match r {
                    Ok(()) => {
                        st.phase = Phase::Connected;
                        deliver(
                            &id2,
                            &st,
                            EventType::Established,
                            0,
                            ConnData::default(),
                            None,
                        );
                        watch_disconnect(&id2, &st);
                    }
                    Err(e) => failed(&id2, &mut st, &e),
                }
            });
        }
        id::complete(&id)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    ret_minus1(|| {
        let id = id::get(id)?;
        let mut st = id.lock();
        if st.phase != Phase::Requested {
            return Err(libc::EINVAL);
        }
        let n = usize::from(private_data_len);
        let max = match st.ps {
            addr::PortSpace::Tcp => REJ_PRIVATE,
            addr::PortSpace::Udp => super::ud::REJECT_PRIVATE,
        };
        if n > max {
            return Err(libc::EINVAL);
        }
        let data = if private_data.is_null() || n == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller's `n` bytes.
            unsafe { std::slice::from_raw_parts(private_data as *const u8, n) }.to_vec()
        };
        let ep = st.ep.as_ref().ok_or(libc::EINVAL)?;
        ep.reject(&data).map_err(|e| e.errno())?;
        st.phase = Phase::Failed;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_reject_ece(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { rdma_reject(id, private_data, private_data_len) }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    ret_minus1(|| {
        let id = id::get(id)?;
        {
            let mut st = id.lock();
            match st.phase {
                Phase::Idle
                | Phase::Bound
                | Phase::AddrResolved
                | Phase::RouteResolved
                | Phase::Listening => return Err(libc::EINVAL),
                _ => {}
            }
            // As cma.c: the QP to ERR first (it flushes), then the DREQ.
            let qp = id.with_public(&st, |p| p.qp);
            modify_state(qp, 6)?;
            let sent = match (st.ep.as_ref(), st.qp) {
                (Some(ep), Some(qp)) => ep.disconnect(qp).ok(),
                _ => None,
            };
            // Nothing to send (never connected, already over): 0, as the
            // kernel returns when neither a DREQ nor a DREP goes out.
            let Some(p) = sent else { return Ok(()) };
            if matches!(st.phase, Phase::Connected | Phase::Accepting) {
                st.phase = Phase::Disconnected;
            }
            let p = p.without_progress();
            let id2 = id.clone();
            watch::spawn(async move {
                let r = p.await;
                let mut st = id2.lock();
                if !st.alive {
                    return;
                }
                match r {
                    Err(e) if e.kind() == ErrorKind::Canceled => {}
                    Err(e) if e.kind() == ErrorKind::DeviceRemoved => {
                        deliver(
                            &id2,
                            &st,
                            EventType::DeviceRemoval,
                            0,
                            ConnData::default(),
                            None,
                        );
                    }
                    _ => disconnected(&id2, &mut st),
                }
            });
        }
        id::complete(&id)
    })
}

/// The active side's last step when the application moves its own QP:
/// after `CONNECT_RESPONSE` (and the application's moves to RTR and RTS),
/// sends the RTU. As rdma-core's: `EINVAL` on an id with a QP of its own,
/// and (the kernel's) before `CONNECT_RESPONSE` or after the RTU. No event
/// follows; the connection is up when it returns.
#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    ret_minus1(|| {
        let id = id::get(id)?;
        let pending = {
            let st = id.lock();
            if !id.with_public(&st, |p| p.qp).is_null() || st.phase != Phase::ConnectResponse {
                return Err(libc::EINVAL);
            }
            let (Some(ep), Some(qp)) = (st.ep.as_ref(), st.qp) else {
                return Err(libc::EINVAL);
            };
            ep.complete_connect(qp)
                .map_err(|e| e.errno())?
                .without_progress()
        };
        // The QP phase and the RTU run within the call (the endpoint has
        // nothing else queued); the wait only collects the outcome.
        let r = pending.wait_timeout(Duration::from_secs(10));
        let mut st = id.lock();
        match r {
            Some(Ok(())) => {
                mirror_state(st.app_qp);
                st.phase = Phase::Connected;
                watch_disconnect(&id, &st);
                Ok(())
            }
            Some(Err(e)) => Err(e.errno()),
            None => Err(libc::ETIMEDOUT),
        }
    })
}

/// The engine marks a connection established on the first packet itself.
#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, _event: c_int) -> c_int {
    ret_minus1(|| {
        let id = id::get(id)?;
        let st = id.lock();
        match st.phase {
            Phase::Accepting | Phase::Connected => Ok(()),
            _ => Err(libc::EINVAL),
        }
    })
}
