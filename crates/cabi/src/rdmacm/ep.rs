//! The synchronous endpoint calls: `rdma_create_ep`, `rdma_destroy_ep`,
//! `rdma_get_request` (rdma_server/rdma_client's API).
//!
//! An id made by `rdma_create_ep` has no channel of the application's: it
//! gets a private one, and each call waits there for its own event
//! (`id::complete`). A passive endpoint keeps the QP attributes it was
//! given; `rdma_get_request` creates each request's QP with them on the
//! listener's PD.

use super::abi::*;
use super::addr::{self, PortSpace};
use super::channel;
use super::id;
use crate::abi::{ibv_pd, ibv_qp_init_attr};
use crate::ffi::{self, ret_minus1};
use libc::c_int;

#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ret_minus1(|| {
        if id.is_null() || res.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's address info (checked non-NULL).
        let r = unsafe { &*res };
        super::devices::init()?;
        let ps = PortSpace::from_c(r.ai_port_space)?;
        let s = id::create(None, std::ptr::null_mut(), ps)?;
        let p = s.public();
        let run = || -> Result<(), c_int> {
            if r.ai_flags & RAI_PASSIVE != 0 {
                // SAFETY: the caller's source address.
                let sa = unsafe { addr::read_sockaddr(r.ai_src_addr) }?;
                let mut st = s.lock();
                addr::bind(&s, &mut st, sa)?;
                if !qp_init_attr.is_null() {
                    // SAFETY: the caller's attributes (non-NULL).
                    let mut a = unsafe { *qp_init_attr };
                    a.qp_type = r.ai_qp_type;
                    st.qp_init_attr = Some(a);
                }
                if !pd.is_null() {
                    s.with_public(&st, |p| p.pd = pd);
                }
                return Ok(());
            }
            // SAFETY: forwarded; the addresses are the caller's.
            if unsafe { addr::rdma_resolve_addr(p, r.ai_src_addr, r.ai_dst_addr, 2000) } != 0 {
                return Err(ffi::errno());
            }
            // SAFETY: as above.
            if unsafe { addr::rdma_resolve_route(p, 2000) } != 0 {
                return Err(ffi::errno());
            }
            if !qp_init_attr.is_null() {
                // SAFETY: the caller's attributes (non-NULL).
                unsafe { (*qp_init_attr).qp_type = r.ai_qp_type };
                // SAFETY: forwarded.
                if unsafe { super::qp::rdma_create_qp(p, pd, qp_init_attr) } != 0 {
                    return Err(ffi::errno());
                }
            }
            Ok(())
        };
        match run() {
            Ok(()) => {
                // SAFETY: the caller's out-pointer (checked non-NULL).
                unsafe { *id = p };
                Ok(())
            }
            Err(e) => {
                // SAFETY: the id just made.
                unsafe { rdma_destroy_ep(p) };
                Err(e)
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    ffi::guarded((), || {
        let Ok(s) = id::get(id) else { return };
        let (qp, srq) = s.with_public(&s.lock(), |p| (p.qp, p.srq));
        // SAFETY: the id is live; each call checks what it is given.
        unsafe {
            if !qp.is_null() {
                super::qp::rdma_destroy_qp(id);
            }
            if !srq.is_null() {
                super::qp::rdma_destroy_srq(id);
            }
        }
        let _ = id::destroy(id);
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    ret_minus1(|| {
        let l = id::get(listen)?;
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let (sync, chan, attr) = {
            let st = l.lock();
            (st.sync, st.channel.clone(), st.qp_init_attr)
        };
        if !sync {
            return Err(libc::EINVAL);
        }
        let kept = l.with_public(&l.lock(), |p| {
            std::mem::replace(&mut p.event, std::ptr::null_mut())
        });
        if !kept.is_null() {
            let _ = channel::ack(kept);
        }
        let ev = channel::get_event(&chan)?;
        // SAFETY: the event just published.
        let (ty, status, new) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
        let fail = |e: c_int| {
            l.with_public(&l.lock(), |p| p.event = ev);
            Err(e)
        };
        if ty == EventType::Rejected as c_int {
            return fail(libc::ECONNREFUSED);
        }
        if status != 0 {
            return fail(status.abs());
        }
        if ty != EventType::ConnectRequest as c_int {
            return fail(libc::EINVAL);
        }
        if let Some(mut a) = attr {
            let pd = l.with_public(&l.lock(), |p| p.pd);
            // SAFETY: the new id and our copy of the attributes.
            if unsafe { super::qp::rdma_create_qp(new, pd, &mut a) } != 0 {
                return fail(ffi::errno());
            }
        }
        let n = id::get(new)?;
        n.with_public(&n.lock(), |p| p.event = ev);
        // SAFETY: the caller's out-pointer (checked non-NULL).
        unsafe { *id = new };
        Ok(())
    })
}
