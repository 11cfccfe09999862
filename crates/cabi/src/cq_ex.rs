//! Extended CQs: `ibv_create_cq_ex` and the `ibv_cq_ex` polling API.
//!
//! `ibv_create_cq_ex` is an inline of `verbs.h` that calls
//! `verbs_context.create_cq_ex` ([`create_cq_ex`]). The CQ it returns is an
//! ordinary CQ of this library (`cq::Cq`, whose public struct is always an
//! `ibv_cq_ex`) with the polling functions filled in, so `ibv_cq_ex_to_cq`
//! (a cast) gives a CQ that every other call accepts: QPs, channels,
//! `ibv_req_notify_cq`, even `ibv_poll_cq`, which takes from the same ring.
//!
//! **What is refused, as rxe refuses it.** Completion fields a software
//! device cannot fill honestly — timestamps (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`
//! and its wall-clock flavour: the engine does not stamp completions, and
//! the time of the poll is not the time of the completion), VLANs, flow
//! tags, tag matching — are `EOPNOTSUPP`; of the creation flags,
//! `IBV_CREATE_CQ_ATTR_SINGLE_THREADED` is a hint that changes nothing here
//! and is accepted, `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN` (which the rxe
//! kernel driver refuses) and any unknown flag are `EOPNOTSUPP`; a parent
//! domain (`IBV_CQ_INIT_ATTR_MASK_PD`) is `EOPNOTSUPP`, ndverbs having none;
//! unknown `comp_mask` bits are `EOPNOTSUPP` (rdma-core's rule). The size
//! and completion vector follow `ibv_create_cq`: `EINVAL`.
//!
//! **Polling.** `start_poll` takes the CQ for the caller (other pollers of
//! the extended API wait, as behind rxe's spin lock) and the first
//! completion, running the engine first when the ring is empty, as
//! `ibv_poll_cq` does; an empty CQ is `ENOENT` and releases the CQ at
//! once. `next_poll` moves to the next completion (`ENOENT` when there is
//! none, the CQ still taken); `end_poll` releases it. Each completion is
//! consumed when it is reached, so the ring never waits for `end_poll`.
//! The current completion's `status` and `wr_id` are written into the
//! public struct (applications read them as fields); the `read_*`
//! functions read the rest from atomics, so a program that calls them
//! outside a poll reads a stale completion, never torn memory. As in rxe,
//! a `read_*` slot is filled only when its `wc_flags` bit was asked for
//! (`read_opcode`, `read_vendor_err` and `read_wc_flags` always).

use crate::abi::*;
use crate::cq::{self, to_wc, Cq};
use crate::ffi::{self, fast, ret_ptr};
use libc::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

/// The `wc_flags` this library can honour: rxe's set, the standard ones.
const SUPPORTED_WC_FLAGS: u64 = IBV_WC_STANDARD_FLAGS;
/// The creation flags accepted: a hint.
const SUPPORTED_CQ_FLAGS: u32 = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;

/// The completion a poll reached.
#[derive(Debug, Default)]
struct Current {
    opcode: AtomicI32,
    byte_len: AtomicU32,
    imm_data: AtomicU32,
    qp_num: AtomicU32,
    src_qp: AtomicU32,
    wc_flags: AtomicU32,
}

/// The extended part of a CQ made by `ibv_create_cq_ex`.
#[derive(Debug)]
pub(crate) struct CqEx {
    wc_flags: u64,
    /// Held from a `start_poll` that found a completion until `end_poll`.
    polling: AtomicBool,
    cur: Current,
}

impl CqEx {
    fn new(wc_flags: u64) -> Self {
        CqEx {
            wc_flags,
            polling: AtomicBool::new(false),
            cur: Current::default(),
        }
    }

    /// Fills the polling functions of the public struct.
    pub(crate) fn fill(&self, p: &mut ibv_cq_ex) {
        let has = |f: u64| self.wc_flags & f != 0;
        p.start_poll = Some(start_poll);
        p.next_poll = Some(next_poll);
        p.end_poll = Some(end_poll);
        p.read_opcode = Some(read_opcode);
        p.read_vendor_err = Some(read_vendor_err);
        p.read_wc_flags = Some(read_wc_flags);
        p.read_byte_len = has(IBV_WC_EX_WITH_BYTE_LEN).then_some(read_byte_len as _);
        p.read_imm_data = has(IBV_WC_EX_WITH_IMM).then_some(read_imm_data as _);
        p.read_qp_num = has(IBV_WC_EX_WITH_QP_NUM).then_some(read_qp_num as _);
        p.read_src_qp = has(IBV_WC_EX_WITH_SRC_QP).then_some(read_src_qp as _);
        p.read_slid = has(IBV_WC_EX_WITH_SLID).then_some(read_slid as _);
        p.read_sl = has(IBV_WC_EX_WITH_SL).then_some(read_sl as _);
        p.read_dlid_path_bits =
            has(IBV_WC_EX_WITH_DLID_PATH_BITS).then_some(read_dlid_path_bits as _);
    }

    fn take(&self) {
        while self
            .polling
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
    }

    fn release(&self) {
        self.polling.store(false, Ordering::Release);
    }
}

/// `verbs_context.create_cq_ex`, what the `ibv_create_cq_ex` inline calls.
pub(crate) unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    ret_ptr(|| {
        // SAFETY: the caller's attributes (NULL is EINVAL).
        let a = unsafe { ffi::read_in(attr as *const ibv_cq_init_attr_ex) }?;
        if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0
            || a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0
        {
            return Err(libc::EOPNOTSUPP);
        }
        if a.wc_flags & !SUPPORTED_WC_FLAGS != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 && a.flags & !SUPPORTED_CQ_FLAGS != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let cqe = c_int::try_from(a.cqe).map_err(|_| libc::EINVAL)?;
        let comp_vector = c_int::try_from(a.comp_vector).map_err(|_| libc::EINVAL)?;
        let p = cq::create(
            context,
            cqe,
            a.cq_context,
            a.channel,
            comp_vector,
            Some(CqEx::new(a.wc_flags)),
        )?;
        Ok(p as *mut ibv_cq_ex)
    })
}

/// The CQ and its extended part behind `cq`, if it is one of ours.
fn ex_of(cq: *mut ibv_cq_ex) -> Option<(&'static Cq, &'static CqEx)> {
    let cq = fast::<Cq>(cq as *const ibv_cq)?;
    Some((cq, cq.ex.as_ref()?))
}

/// Takes the next completion into `cur` and the public struct; false when
/// the CQ is empty (after running the engine once unless the ring is fresh,
/// as `ibv_poll_cq`).
fn advance(cq: &Cq, ex: &CqEx) -> bool {
    let _returned = cq.nic.activity.entering();
    let Some(w) = cq.poll_one() else {
        return false;
    };
    let wc = to_wc(&w, cq.ctx.dev.addr.is_ipv4());
    let c = &ex.cur;
    c.opcode.store(wc.opcode, Ordering::Relaxed);
    c.byte_len.store(wc.byte_len, Ordering::Relaxed);
    c.imm_data.store(wc.imm_data, Ordering::Relaxed);
    c.qp_num.store(wc.qp_num, Ordering::Relaxed);
    c.src_qp.store(wc.src_qp, Ordering::Relaxed);
    c.wc_flags.store(wc.wc_flags, Ordering::Relaxed);
    // SAFETY: our public struct; only the poller holding the CQ writes
    // these two fields, which the application reads after this returns.
    unsafe {
        let p = cq.pub_.get();
        (*p).status = wc.status;
        (*p).wr_id = wc.wr_id;
    }
    true
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut c_void) -> c_int {
    ffi::guarded(libc::EIO, || {
        let Some((cq, ex)) = ex_of(cq) else {
            return libc::EINVAL;
        };
        // struct ibv_poll_cq_attr { uint32_t comp_mask; }: no bits defined.
        // SAFETY: a non-NULL attr is the caller's struct.
        if !attr.is_null() && unsafe { *(attr as *const u32) } != 0 {
            return libc::EINVAL;
        }
        ex.take();
        if advance(cq, ex) {
            0
        } else {
            ex.release();
            ffi::set_errno(libc::ENOENT);
            libc::ENOENT
        }
    })
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    ffi::guarded(libc::EIO, || {
        let Some((cq, ex)) = ex_of(cq) else {
            return libc::EINVAL;
        };
        if !ex.polling.load(Ordering::Acquire) {
            // No start_poll before: nothing to move on from.
            return libc::EINVAL;
        }
        if advance(cq, ex) {
            0
        } else {
            ffi::set_errno(libc::ENOENT);
            libc::ENOENT
        }
    })
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    if let Some((_, ex)) = ex_of(cq) {
        ex.release();
    }
}

/// Reads one field of the current completion (0 for a pointer that is not
/// an extended CQ of ours).
fn read<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&Current) -> T) -> T {
    ex_of(cq).map_or_else(T::default, |(_, ex)| f(&ex.cur))
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> c_int {
    read(cq, |c| c.opcode.load(Ordering::Relaxed))
}

/// No vendor error codes: rxe reports 0 too.
unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |_| 0)
}

unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |c| c.byte_len.load(Ordering::Relaxed))
}

/// `__be32` immediate data, or the invalidated R_Key (`IBV_WC_WITH_INV`).
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |c| c.imm_data.load(Ordering::Relaxed))
}

unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |c| c.qp_num.load(Ordering::Relaxed))
}

unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |c| c.src_qp.load(Ordering::Relaxed))
}

unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> c_uint {
    read(cq, |c| c.wc_flags.load(Ordering::Relaxed))
}

/// RoCE has no LIDs: 0, as `ibv_poll_cq` reports.
unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |_| 0)
}

/// What `ibv_poll_cq` reports in `sl`: the RoCE packet type of a UD
/// receive ([`crate::cq::roce_packet_type`]), 0 otherwise.
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    ex_of(cq).map_or(0, |(cq, ex)| {
        let grh = ex.cur.wc_flags.load(Ordering::Relaxed) & IBV_WC_GRH != 0;
        crate::cq::roce_packet_type(grh, cq.ctx.dev.addr.is_ipv4())
    })
}

/// No LIDs, no path bits.
unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    read(cq, |_| 0)
}
