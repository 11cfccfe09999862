//! Shared receive queues.
//!
//! `ibv_post_srq_recv` is an inline that calls the `post_srq_recv` op. The
//! SRQ limit (`IBV_SRQ_LIMIT`) is stored and reported by `ibv_query_srq`,
//! but the engine does not watch it, so `IBV_EVENT_SRQ_LIMIT_REACHED` never
//! comes; resizing (`IBV_SRQ_MAX_WR`) is `EOPNOTSUPP`, as from providers
//! that do not advertise `IBV_DEVICE_SRQ_RESIZE`.

use crate::abi::*;
use crate::ffi::{self, fast, lookup, ret_errno, ret_ptr, Kind, Object};
use crate::pd::{next_handle, Pd};
use crate::qp::post_recvs;
use libc::c_int;
use ndverbs_verbs::LIMITS;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};

/// A shared receive queue.
#[repr(C)]
pub(crate) struct Srq {
    pub_: UnsafeCell<ibv_srq>,
    magic: u64,
    pub(crate) srq: ndverbs_verbs::Srq,
    pub(crate) pd: &'static Pd,
    attr: ibv_srq_attr,
    limit: AtomicU32,
    /// QPs using it.
    pub(crate) users: AtomicU32,
}

// SAFETY: the public struct is the first field.
unsafe impl Object for Srq {
    const KIND: Kind = Kind::Srq;
    const MAGIC: u64 = 0x6e64_7673_7271_0008;
    type Public = ibv_srq;
    fn magic(&self) -> u64 {
        self.magic
    }
}

// SAFETY: as for Pd.
unsafe impl Sync for Srq {}

impl Srq {
    pub(crate) fn public(&self) -> *mut ibv_srq {
        ffi::public(self)
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    ret_ptr(|| {
        let pd = lookup::<Pd>(pd)?;
        // SAFETY: the caller's init attributes (NULL is EINVAL).
        let a = unsafe { ffi::read_in(init as *const ibv_srq_init_attr) }?;
        let (max_wr, max_sge) = (a.attr.max_wr.max(1), a.attr.max_sge.max(1));
        if max_wr > LIMITS.max_qp_wr || max_sge > LIMITS.max_sge || a.attr.srq_limit > max_wr {
            return Err(libc::EINVAL);
        }
        let srq = pd.pd.create_srq(max_wr, max_sge).map_err(|e| e.errno())?;
        let attr = ibv_srq_attr {
            max_wr,
            max_sge,
            srq_limit: a.attr.srq_limit,
        };
        // SAFETY: the caller's struct, whose attr providers overwrite with
        // what the SRQ got.
        unsafe { (*init).attr = attr };
        // SAFETY: plain C data with glibc's zero initialisers.
        let mut public: ibv_srq = unsafe { std::mem::zeroed() };
        public.context = pd.ctx.public();
        public.srq_context = a.srq_context;
        public.pd = ffi::public(pd);
        public.handle = next_handle();
        let (_, p) = ffi::publish(Srq {
            pub_: UnsafeCell::new(public),
            magic: Srq::MAGIC,
            srq,
            pd,
            attr,
            limit: AtomicU32::new(a.attr.srq_limit),
            users: AtomicU32::new(0),
        });
        pd.users.fetch_add(1, Ordering::AcqRel);
        Ok(p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    attr_mask: c_int,
) -> c_int {
    ret_errno(|| {
        let srq = lookup::<Srq>(srq)?;
        // SAFETY: the caller's attributes (NULL is EINVAL).
        let a = unsafe { ffi::read_in(attr as *const ibv_srq_attr) }?;
        if attr_mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
            return Err(libc::EINVAL);
        }
        if attr_mask & IBV_SRQ_MAX_WR != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if attr_mask & IBV_SRQ_LIMIT != 0 {
            if a.srq_limit > srq.attr.max_wr {
                return Err(libc::EINVAL);
            }
            srq.limit.store(a.srq_limit, Ordering::Release);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    ret_errno(|| {
        let srq = lookup::<Srq>(srq)?;
        let a = ibv_srq_attr {
            srq_limit: srq.limit.load(Ordering::Acquire),
            ..srq.attr
        };
        // SAFETY: the caller's struct to fill.
        unsafe { ffi::write_out(attr, a) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    ret_errno(|| {
        let srq = lookup::<Srq>(srq)?;
        if srq.users.load(Ordering::Acquire) != 0 {
            return Err(libc::EBUSY);
        }
        let pd = srq.pd;
        ffi::release(srq, |_| {});
        pd.users.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    })
}

/// `ibv_post_srq_recv` (the `post_srq_recv` op).
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let Some(srq) = fast::<Srq>(srq) else {
        return libc::EINVAL;
    };
    let _returned = srq.pd.nic.activity.entering();
    let rc = ffi::guarded(libc::EIO, || {
        // SAFETY: forwarded from the caller.
        unsafe { post_recvs(wr, bad_wr, |r| srq.srq.post_recv(r).map_err(|e| e.errno())) }
    });
    srq.pd.nic.posted();
    rc
}
