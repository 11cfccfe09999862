//! UD ids (`RDMA_PS_UDP`): service ID resolution (SIDR) instead of a
//! connection, as the kernel's rdma_cm does it for `udaddy` and other UD
//! rdma_cm programs.
//!
//! | call | what happens | event |
//! |---|---|---|
//! | `rdma_create_qp` | a UD QP, INIT (Q_Key `RDMA_UDP_QKEY`) → RTR → RTS at once (`qp`) | — |
//! | `rdma_listen` | the endpoint listens on service ID `0x0111 << 16 \| port` | — |
//! | a SIDR_REQ arrives | a new id | `CONNECT_REQUEST`, `param.ud`: the private data after the rdma_cm header (180 bytes); QPN, Q_Key and `ah_attr` zero, as the kernel's |
//! | `rdma_connect` | SIDR_REQ (retransmitted every 4 s, 15 times) | `ESTABLISHED`, `param.ud`: the peer's QPN and Q_Key, `ah_attr` with its GID (global, our GID 0, port 1) for `ibv_create_ah`, the SIDR_REP's 136 bytes of private data |
//! | SIDR_REP with a status other than 0 | — | `UNREACHABLE`, `status` = that status (1: nobody listens, 2: rejected) |
//! | no SIDR_REP | — | `UNREACHABLE`, `-ETIMEDOUT` |
//! | ICMP port unreachable (no RoCE endpoint at the address; the kernel never sees it) | — | `CONNECT_ERROR`, `-ECONNREFUSED`, as for a REQ |
//! | `rdma_accept` | SIDR_REP: status 0, the id's QP (or `conn_param->qp_num`), `RDMA_UDP_QKEY`, ≤ 136 bytes of private data; nothing follows | — |
//! | `rdma_reject` | SIDR_REP: status 2 (`IB_SIDR_REJECT`), ≤ 136 bytes | — |
//!
//! As for REQs (`conn`), a SIDR_REP saying nobody listens (status 1) is
//! answered with another SIDR_REQ for up to [`super::conn::NO_LISTENER_RETRY`]
//! before it is reported: a server that starts listening a moment late is
//! waited for instead of failing its client.

use super::abi::*;
use super::addr;
use super::channel::{ConnData, UdData};
use super::conn::{failure_event, param, NO_LISTENER_RETRY, RETRY_GAP};
use super::id::{deliver, Phase, Shared, State};
use super::watch;
use libc::c_int;
use ndverbs_verbs::{Endpoint, ErrorKind, SidrArgs};
use std::sync::Arc;
use std::time::Instant;

/// Private data a SIDR_REQ carries after the rdma_cm header, and a SIDR_REP.
const SIDR_REQ_PRIVATE: usize = 180;
const SIDR_REP_PRIVATE: usize = 136;

/// SIDR_REP status: nobody listens on the service ID.
const SIDR_UNSUPPORTED: u8 = 1;

/// The hop limit of the address handles we hand out (the route's on
/// Linux: 64 on a directly connected link).
const HOP_LIMIT: u8 = 64;

/// `conn_param`'s private data for a UD message of at most `max` bytes.
///
/// # Safety
/// As [`super::conn::private_data`].
unsafe fn data(p: Option<&rdma_conn_param>, max: usize) -> Result<Vec<u8>, c_int> {
    // SAFETY: forwarded.
    unsafe { super::conn::private_data(p, max) }
}

/// `rdma_connect` on a UD id (in `RouteResolved`): sends the SIDR_REQ.
///
/// # Safety
/// `p` must be NULL or point to a readable `rdma_conn_param` whose private
/// data holds its length.
pub(crate) unsafe fn connect(
    id: &Arc<Shared>,
    st: &mut State,
    p: *const rdma_conn_param,
) -> Result<(), c_int> {
    if st.phase != Phase::RouteResolved {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's conn_param or NULL.
    let p = unsafe { param(p) };
    let (src, dst) = match (st.src, st.dst) {
        (Some(s), Some(d)) => (s, d),
        _ => return Err(libc::EINVAL),
    };
    let args = SidrArgs {
        remote: dst.ip(),
        remote_port: dst.port(),
        local_port: src.port(),
        // SAFETY: the caller's private data.
        private_data: unsafe { data(p, SIDR_REQ_PRIVATE) }?,
    };
    resolve(id, st, args, Instant::now() + NO_LISTENER_RETRY)
}

/// Sends a SIDR_REQ on a fresh endpoint and reports its outcome from the
/// event thread.
fn resolve(id: &Arc<Shared>, st: &mut State, args: SidrArgs, until: Instant) -> Result<(), c_int> {
    let nic = st.nic.clone().ok_or(libc::ENODEV)?;
    let ep = Endpoint::new(&nic.dev).map_err(|e| e.errno())?;
    let pending = ep
        .resolve(args.clone())
        .map_err(|e| e.errno())?
        .without_progress();
    st.ep = Some(ep);
    st.phase = Phase::Connecting;
    let id2 = id.clone();
    watch::spawn(async move {
        let r = pending.await;
        let mut st = id2.lock();
        if !st.alive || st.phase != Phase::Connecting {
            return;
        }
        match r {
            Ok(info) if info.status == SIDR_UNSUPPORTED && Instant::now() + RETRY_GAP < until => {
                let id3 = id2.clone();
                watch::after(RETRY_GAP, move || {
                    let mut st = id3.lock();
                    if !st.alive || st.phase != Phase::Connecting {
                        return;
                    }
                    if let Err(e) = resolve(&id3, &mut st, args, until) {
                        st.phase = Phase::Failed;
                        deliver(&id3, &st, EventType::ConnectError, -e, ud_data(None), None);
                    }
                });
            }
            Ok(info) => {
                let mut conn = ud_data(None);
                conn.private_data = info.private_data;
                if info.status != 0 {
                    // cma_sidr_rep_handler: a refusal is UNREACHABLE with
                    // the SIDR status.
                    st.phase = Phase::Failed;
                    deliver(
                        &id2,
                        &st,
                        EventType::Unreachable,
                        c_int::from(info.status),
                        conn,
                        None,
                    );
                    return;
                }
                let has_qp = !id2.with_public(&st, |p| p.qp).is_null();
                if has_qp && info.qkey != RDMA_UDP_QKEY {
                    // cma_set_qkey: our QP's Q_Key is not the peer's.
                    st.phase = Phase::Failed;
                    deliver(&id2, &st, EventType::AddrError, -libc::EINVAL, conn, None);
                    return;
                }
                let (src, dst) = (st.src, st.dst);
                conn.ud = Some(UdData {
                    qp_num: info.qpn,
                    qkey: info.qkey,
                    dgid: dst.map(|d| addr::gid(d.ip()).raw),
                    // rdma_cm's RoCE flow label from the two ports.
                    flow_label: match (src, dst) {
                        (Some(s), Some(d)) => {
                            (u32::from(s.port()) * 31 + u32::from(d.port())) & 0xf_ffff
                        }
                        _ => 0,
                    },
                    hop_limit: HOP_LIMIT,
                    traffic_class: st.tos,
                });
                st.phase = Phase::Connected;
                deliver(&id2, &st, EventType::Established, 0, conn, None);
            }
            Err(e) => {
                let Some((ty, status, _)) = failure_event(&e) else {
                    return;
                };
                // The UD QP stays as it is: it serves any peer.
                st.phase = Phase::Failed;
                deliver(&id2, &st, ty, status, ud_data(None), None);
            }
        }
    });
    Ok(())
}

/// `ConnData` of a UD id's event: `param.ud`, with `ah` the address
/// handle attributes (none: zero).
pub(crate) fn ud_data(ah: Option<UdData>) -> ConnData {
    ConnData {
        ud: Some(ah.unwrap_or_default()),
        ..ConnData::default()
    }
}

/// `rdma_accept` on a UD id (in `Requested`): the SIDR_REP naming the id's
/// QP (or `conn_param->qp_num` on an id without one).
///
/// # Safety
/// As [`connect`].
pub(crate) unsafe fn accept(
    id: &Arc<Shared>,
    st: &mut State,
    p: *const rdma_conn_param,
) -> Result<(), c_int> {
    // SAFETY: the caller's conn_param or NULL.
    let p = unsafe { param(p) };
    if st.phase != Phase::Requested {
        return Err(libc::EINVAL);
    }
    let qp = id.with_public(st, |p| p.qp);
    let qpn = if qp.is_null() {
        p.map(|p| p.qp_num).ok_or(libc::EINVAL)?
    } else {
        // SAFETY: the id's QP, a live object of ours.
        unsafe { (*qp).qp_num }
    };
    // SAFETY: the caller's private data.
    let pd = unsafe { data(p, SIDR_REP_PRIVATE) }?;
    let ep = st.ep.as_ref().ok_or(libc::EINVAL)?;
    ep.accept_ud(qpn, RDMA_UDP_QKEY, &pd)
        .map_err(|e| match e.kind() {
            ErrorKind::InvalidState => libc::EINVAL,
            _ => e.errno(),
        })?;
    st.phase = Phase::Connected;
    Ok(())
}

/// The longest private data `rdma_reject` takes on a UD id.
pub(crate) const REJECT_PRIVATE: usize = SIDR_REP_PRIVATE;
