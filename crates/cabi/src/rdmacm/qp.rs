//! QPs on ids: `rdma_create_qp(_ex)`, `rdma_destroy_qp`, `rdma_create_srq`,
//! `rdma_destroy_srq`, `rdma_init_qp_attr`.
//!
//! As rdma-core: a QP created on an id uses the id's device context, the
//! given PD or the device's default one (`cm_id->pd`), and CQs with their
//! own completion channels when the init attributes bring none
//! (`cm_id->send_cq`/`recv_cq` and their channels, which the `rdma_verbs.h`
//! inlines poll and wait on, and `rdma_destroy_qp` destroys). The QP is
//! created through this library's own `ibv_create_qp` — an ordinary QP of
//! the context — and moved to INIT, where a connection starts; its access
//! rights there are what the CM would give a connection (local write,
//! remote write, read and atomics), since the engine's connection steps
//! keep INIT's rights.
//!
//! `rdma_init_qp_attr` answers as the kernel's CM does, for the id's QP or
//! for an application's own (`conn`): INIT always, RTR and RTS once a
//! request or the REP has told what the connection implies.

use super::abi::*;
use super::id::{self, Phase};
use crate::abi::*;
use crate::cq::{ibv_create_cq, ibv_destroy_cq};
use crate::ffi::{lookup, ret_minus1};
use libc::{c_int, c_void};
use ndverbs_verbs::RcConnection;

const IBV_QP_RQ_PSN: c_int = 1 << 12;
const IBV_QP_SQ_PSN: c_int = 1 << 16;
const IBV_QP_TIMEOUT: c_int = 1 << 9;
const IBV_QP_RETRY_CNT: c_int = 1 << 10;
const IBV_QP_RNR_RETRY: c_int = 1 << 11;
const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
const IBV_QP_DEST_QPN: c_int = 1 << 20;

/// The access rights of an rdma_cm QP.
const CM_ACCESS: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

/// Destroys the CQs and channels `rdma_create_qp` made for `p`.
fn destroy_cqs(p: &mut rdma_cm_id) {
    // SAFETY: our own objects (created below), each destroyed once; a CQ
    // goes before its channel.
    unsafe {
        for (cq, ch) in [
            (&mut p.recv_cq, &mut p.recv_cq_channel),
            (&mut p.send_cq, &mut p.send_cq_channel),
        ] {
            if !cq.is_null() {
                ibv_destroy_cq(*cq);
                *cq = std::ptr::null_mut();
            }
            if !ch.is_null() {
                crate::cq::ibv_destroy_comp_channel(*ch);
                *ch = std::ptr::null_mut();
            }
        }
    }
}

/// A CQ of `n` entries with a channel of its own, for id `p`.
fn make_cq(
    p: &rdma_cm_id,
    id_ptr: *mut rdma_cm_id,
    n: u32,
) -> Result<(*mut ibv_cq, *mut ibv_comp_channel), c_int> {
    // SAFETY: the id's live context.
    let ch = unsafe { crate::cq::ibv_create_comp_channel(p.verbs) };
    if ch.is_null() {
        return Err(crate::ffi::errno());
    }
    // SAFETY: as above; the CQ's context is the id, as rdma-core's.
    let cq = unsafe { ibv_create_cq(p.verbs, n.max(1) as c_int, id_ptr as *mut c_void, ch, 0) };
    if cq.is_null() {
        let e = crate::ffi::errno();
        // SAFETY: the channel just made.
        unsafe { crate::cq::ibv_destroy_comp_channel(ch) };
        return Err(e);
    }
    Ok((cq, ch))
}

/// `rdma_create_qp_ex` on plain attributes.
fn create_qp(id_ptr: *mut rdma_cm_id, a: &mut ibv_qp_init_attr_ex) -> Result<(), c_int> {
    let id = id::get(id_ptr)?;
    let st = id.lock();
    id.with_public(&st, |p| {
        if !p.qp.is_null() || p.verbs.is_null() {
            return Err(libc::EINVAL);
        }
        if a.comp_mask & !IBV_QP_INIT_ATTR_PD != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
            a.comp_mask |= IBV_QP_INIT_ATTR_PD;
            a.pd = p.pd;
        } else if lookup::<crate::pd::Pd>(a.pd)?.ctx.public() != p.verbs {
            return Err(libc::EINVAL);
        }
        if (!p.recv_cq.is_null() && !a.recv_cq.is_null() && p.recv_cq != a.recv_cq)
            || (!p.send_cq.is_null() && !a.send_cq.is_null() && p.send_cq != a.send_cq)
        {
            return Err(libc::EINVAL);
        }
        if a.send_cq.is_null() && p.send_cq.is_null() {
            (p.send_cq, p.send_cq_channel) = make_cq(p, id_ptr, a.cap.max_send_wr)?;
        }
        if a.recv_cq.is_null() && p.recv_cq.is_null() {
            match make_cq(p, id_ptr, a.cap.max_recv_wr) {
                Ok(c) => (p.recv_cq, p.recv_cq_channel) = c,
                Err(e) => {
                    destroy_cqs(p);
                    return Err(e);
                }
            }
        }
        if a.send_cq.is_null() {
            a.send_cq = p.send_cq;
        }
        if a.recv_cq.is_null() {
            a.recv_cq = p.recv_cq;
        }
        if !p.srq.is_null() && a.srq.is_null() {
            a.srq = p.srq;
        }
        let mut init = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        // SAFETY: our own PD and attributes.
        let qp = unsafe { crate::qp::ibv_create_qp(a.pd, &mut init) };
        if qp.is_null() {
            let e = crate::ffi::errno();
            destroy_cqs(p);
            return Err(e);
        }
        a.cap = init.cap;
        let rc = if p.qp_type == IBV_QPT_UD {
            ud_to_rts(qp)
        } else {
            // SAFETY: plain C data; all zeroes is valid.
            let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
            attr.qp_state = 1;
            attr.port_num = 1;
            attr.pkey_index = 0;
            attr.qp_access_flags = CM_ACCESS;
            let mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
            // SAFETY: the QP just made and our attributes.
            unsafe { crate::qp::ibv_modify_qp(qp, &mut attr, mask) }
        };
        if rc != 0 {
            // SAFETY: the QP just made.
            unsafe { crate::qp::ibv_destroy_qp(qp) };
            destroy_cqs(p);
            return Err(rc);
        }
        p.pd = a.pd;
        p.qp = qp;
        Ok(())
    })
}

/// A UD id's QP goes all the way to RTS at once, as librdmacm's
/// `ucma_init_ud_qp` takes it: INIT with P_Key index 0, port 1 and the
/// rdma_cm Q_Key ([`RDMA_UDP_QKEY`], what the kernel's `rdma_init_qp_attr`
/// gives a `RDMA_PS_UDP` id), RTR, then RTS with send PSN 0. A UD QP needs
/// no peer: each send names its own address handle.
fn ud_to_rts(qp: *mut ibv_qp) -> c_int {
    let steps = [
        (
            1,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
        ),
        (2, IBV_QP_STATE),
        (3, IBV_QP_STATE | IBV_QP_SQ_PSN),
    ];
    for (state, mask) in steps {
        // SAFETY: plain C data; all zeroes is valid.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = state;
        attr.port_num = 1;
        attr.pkey_index = 0;
        attr.qkey = RDMA_UDP_QKEY;
        attr.sq_psn = 0;
        // SAFETY: the caller's new QP and our attributes.
        let rc = unsafe { crate::qp::ibv_modify_qp(qp, &mut attr, mask) };
        if rc != 0 {
            return rc;
        }
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    ret_minus1(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attributes (checked non-NULL), updated in
        // place as rdma-core does.
        create_qp(id, unsafe { &mut *attr })
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ret_minus1(|| {
        let idp = id;
        let id = id::get(idp)?;
        // SAFETY: the caller's attributes (NULL is EINVAL).
        let i = unsafe { crate::ffi::read_in(qp_init_attr as *const ibv_qp_init_attr) }?;
        let id_pd = id.with_public(&id.lock(), |p| p.pd);
        // SAFETY: plain C data; all zeroes is valid.
        let mut a: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        a.qp_context = i.qp_context;
        a.send_cq = i.send_cq;
        a.recv_cq = i.recv_cq;
        a.srq = i.srq;
        a.cap = i.cap;
        a.qp_type = i.qp_type;
        a.sq_sig_all = i.sq_sig_all;
        a.comp_mask = IBV_QP_INIT_ATTR_PD;
        a.pd = if pd.is_null() { id_pd } else { pd };
        let r = create_qp(idp, &mut a);
        // SAFETY: the caller's attributes: the CQs and caps the QP got.
        unsafe {
            (*qp_init_attr).send_cq = a.send_cq;
            (*qp_init_attr).recv_cq = a.recv_cq;
            (*qp_init_attr).srq = a.srq;
            (*qp_init_attr).cap = a.cap;
        }
        r
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    crate::ffi::guarded((), || {
        let Ok(id) = id::get(id) else { return };
        let st = id.lock();
        id.with_public(&st, |p| {
            if !p.qp.is_null() {
                // SAFETY: the id's QP.
                unsafe { crate::qp::ibv_destroy_qp(p.qp) };
                p.qp = std::ptr::null_mut();
            }
            destroy_cqs(p);
        });
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    ret_minus1(|| {
        let id = id::get(id)?;
        let st = id.lock();
        id.with_public(&st, |p| {
            if !p.srq.is_null() || p.verbs.is_null() {
                return Err(libc::EINVAL);
            }
            let pd = if pd.is_null() { p.pd } else { pd };
            // SAFETY: forwarded to our own ibv_create_srq, which checks them.
            let srq = unsafe { crate::srq::ibv_create_srq(pd, attr) };
            if srq.is_null() {
                return Err(crate::ffi::errno());
            }
            p.srq = srq;
            Ok(())
        })
    })
}

/// Extended SRQs (XRC) are not offered.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(id: *mut rdma_cm_id, _attr: *mut c_void) -> c_int {
    ret_minus1(|| {
        id::get(id)?;
        Err(libc::EOPNOTSUPP)
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    crate::ffi::guarded((), || {
        let Ok(id) = id::get(id) else { return };
        let st = id.lock();
        id.with_public(&st, |p| {
            if !p.srq.is_null() {
                // SAFETY: the id's SRQ.
                unsafe { crate::srq::ibv_destroy_srq(p.srq) };
                p.srq = std::ptr::null_mut();
            }
        });
    })
}

/// What a QP needs for `attr->qp_state`, as the kernel's rdma_cm answers
/// (`cma.c`'s `rdma_init_qp_attr` over `cm.c`'s `ib_cm_init_qp_attr`):
///
/// | state | attributes (mask) | when |
/// |---|---|---|
/// | INIT | `qp_access_flags`, `pkey_index` 0, `port_num` 1 (+ STATE, ACCESS_FLAGS, PKEY_INDEX, PORT) | always; the rights are none before a connection exists, then remote write, plus remote read and atomics if the connection's responder resources are not 0 |
/// | RTR | `path_mtu`, `dest_qp_num`, `rq_psn` (our starting PSN), `max_dest_rd_atomic`, `min_rnr_timer` 0, `ah_attr` (the peer's GID, hop limit, traffic class, flow label) (+ STATE, AV, PATH_MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER) | once a request (passive) or the REP (active) told them, until the connection ends |
/// | RTS | `sq_psn` (the peer's starting PSN), `timeout`, `retry_cnt`, `rnr_retry`, `max_rd_atomic` (+ STATE, SQ_PSN, TIMEOUT, RETRY_CNT, RNR_RETRY, MAX_QP_RD_ATOMIC) | as RTR |
///
/// A UD id (`RDMA_PS_UDP`) gets INIT's `pkey_index`, `port_num` and the
/// rdma_cm Q_Key (+ STATE, PKEY_INDEX, PORT, QKEY) whatever state is asked.
///
/// Before the request is accepted, the read limits are the peer's offer;
/// after, what the REP said. Anything else is `EINVAL` (the kernel answers
/// RTR and RTS before a connection with INIT's attributes, which no move
/// to RTR takes).
#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    ret_minus1(|| {
        let id = id::get(id)?;
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return Err(libc::EINVAL);
        }
        let st = id.lock();
        let verbs = id.with_public(&st, |p| p.verbs);
        if verbs.is_null() {
            return Err(libc::EINVAL);
        }
        if st.ps == super::addr::PortSpace::Udp {
            // A UD id: the kernel's cma_ib_init_qp_attr answers INIT's
            // attributes (with the rdma_cm Q_Key) whatever state is asked.
            // SAFETY: the caller's attributes (checked non-NULL).
            let a = unsafe { &mut *qp_attr };
            a.pkey_index = 0;
            a.port_num = 1;
            a.qkey = RDMA_UDP_QKEY;
            // SAFETY: the caller's int (checked non-NULL).
            unsafe { *qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY };
            return Ok(());
        }
        let (connected, setup) = match st.phase {
            Phase::Connecting => (true, None),
            Phase::Requested | Phase::Accepting | Phase::ConnectResponse | Phase::Connected => {
                (true, st.setup)
            }
            Phase::Disconnected | Phase::Failed => return Err(libc::EINVAL),
            _ => (false, None),
        };
        // SAFETY: the caller's attributes (checked non-NULL).
        let a = unsafe { &mut *qp_attr };
        let mask = match (a.qp_state, setup) {
            (1, _) => {
                a.pkey_index = 0;
                a.port_num = 1;
                let responder = setup.map_or(st.responder_resources, |s| s.max_dest_rd_atomic);
                a.qp_access_flags = match (connected, responder) {
                    (false, _) => 0,
                    (true, 0) => IBV_ACCESS_REMOTE_WRITE,
                    (true, _) => {
                        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
                    }
                };
                IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT
            }
            (2, Some(s)) => {
                a.path_mtu = c_int::from(s.path_mtu);
                a.dest_qp_num = s.dest_qpn;
                a.rq_psn = s.rq_psn;
                a.max_dest_rd_atomic = s.max_dest_rd_atomic;
                a.min_rnr_timer = s.min_rnr_timer;
                a.ah_attr = crate::qp::ah_attr_of(&RcConnection::from(&s).av);
                IBV_QP_STATE
                    | IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER
            }
            (3, Some(s)) => {
                a.sq_psn = s.sq_psn;
                a.timeout = s.timeout;
                a.retry_cnt = s.retry_cnt;
                a.rnr_retry = s.rnr_retry;
                a.max_rd_atomic = s.max_rd_atomic;
                IBV_QP_STATE
                    | IBV_QP_SQ_PSN
                    | IBV_QP_TIMEOUT
                    | IBV_QP_RETRY_CNT
                    | IBV_QP_RNR_RETRY
                    | IBV_QP_MAX_QP_RD_ATOMIC
            }
            _ => return Err(libc::EINVAL),
        };
        // SAFETY: the caller's int (checked non-NULL).
        unsafe { *qp_attr_mask = mask };
        Ok(())
    })
}
