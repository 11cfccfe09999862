//! Extended QPs: `ibv_create_qp_ex` and the `ibv_wr_*` post API.
//!
//! `ibv_create_qp_ex` is an inline of `verbs.h`: with `comp_mask ==
//! IBV_QP_INIT_ATTR_PD` it calls `ibv_create_qp`, otherwise
//! `verbs_context.create_qp_ex` ([`create_qp_ex`]). The QP is an ordinary
//! QP of this library (`qp::Qp`, whose public struct is always an
//! `ibv_qp_ex`) with the `wr_*` slots filled, and `ibv_qp_to_qp_ex`
//! returns it for such a QP only (NULL otherwise, as rdma-core for a QP its
//! provider did not create extended).
//!
//! **What is accepted.** RC and UD QPs (other types are `EOPNOTSUPP`, as
//! from `ibv_create_qp`); on UD QPs only SEND and SEND with immediate, each
//! addressed by `ibv_wr_set_ud_addr` (a UD request without one fails
//! `ibv_wr_complete` with `EINVAL`); `comp_mask` bits `PD`, `CREATE_FLAGS` (with no flag
//! set: rxe supports none) and `SEND_OPS_FLAGS`, anything else
//! `EOPNOTSUPP` as rxe's `check_qp_init_attr`; of the send operations
//! rxe offers on RC, those ndverbs' engine has — SEND, SEND with immediate,
//! SEND with invalidate, RDMA WRITE (with immediate), RDMA READ, compare
//! and swap, fetch and add. LOCAL_INV, BIND_MW, ATOMIC_WRITE and TSO are
//! `EOPNOTSUPP` at creation: the engine has no memory-window binding or
//! local invalidation on the send queue and no atomic write.
//!
//! **Posting.** `ibv_wr_start` opens a batch (another thread's batch on the
//! same QP waits, as behind rxe's send-queue lock); each builder
//! (`ibv_wr_send`, `ibv_wr_rdma_write`, …) adds a work request with the
//! `wr_id` and `wr_flags` the application set in the struct, and the
//! setters (`ibv_wr_set_sge`, `_sge_list`, `_inline_data`, `_list`) give
//! the last one its data; inline data is copied when it is set.
//! `ibv_wr_complete` posts the batch in order and returns 0 or the first
//! error; `ibv_wr_abort` drops it. A builder or setter cannot return an
//! error, so, as in rxe, a mistake is remembered and `ibv_wr_complete`
//! returns it and posts nothing: an operation the QP was not created for
//! (`EOPNOTSUPP` — its slot is filled, so calling it never jumps to NULL),
//! a setter with no request before it or a NULL list (`EINVAL`), more SGEs
//! or inline bytes than the QP's capabilities, or more requests than its
//! send queue (`ENOSPC`, rxe's code), unknown `wr_flags` (`EINVAL`). The
//! engine's own checks (QP state, lengths, atomic alignment) run when
//! `ibv_wr_complete` posts, as for `ibv_post_send`: a refused request is
//! its return value and the requests before it of the same batch stay
//! posted (the engine has no way to post several at once).

use crate::abi::*;
use crate::device::Ctx;
use crate::ffi::{self, fast, lookup, ret_ptr};
use crate::pd::Pd;
use crate::qp::{self, Qp};
use crate::rdmacm::abi::{ibv_qp_init_attr_ex, IBV_QP_INIT_ATTR_PD};
use libc::{c_int, c_void};
use ndverbs_verbs::{RemoteAddr, SendOp, SendWr, SgList, Sge, UdDest};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The `comp_mask` bits `ibv_create_qp_ex` accepts (rxe's).
const SUPPORTED_COMP_MASK: u32 =
    IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

/// The send operations of RC QPs.
const SUPPORTED_SEND_OPS: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_SEND_WITH_INV;

/// The send operations of UD QPs (rxe's).
const UD_SEND_OPS: u64 = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

/// The `ibv_send_flags` a work request may carry.
const KNOWN_SEND_FLAGS: u32 =
    IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE | IBV_SEND_IP_CSUM;

/// The requests of an open batch and the first mistake made building it.
#[derive(Debug, Default)]
struct Batch {
    wrs: Vec<SendWr>,
    /// The destination of each request (UD QPs: `ibv_wr_set_ud_addr`).
    dests: Vec<Option<UdDest>>,
    /// The `wr_flags` of each request (its inline flag matters to setters).
    flags: Vec<u32>,
    err: c_int,
}

/// The extended part of a QP made by `ibv_create_qp_ex`.
#[derive(Debug)]
pub(crate) struct QpEx {
    send_ops: u64,
    /// Held from `ibv_wr_start` to `ibv_wr_complete`/`ibv_wr_abort`.
    open: AtomicBool,
    batch: Mutex<Batch>,
}

impl QpEx {
    fn new(send_ops: u64) -> Self {
        QpEx {
            send_ops,
            open: AtomicBool::new(false),
            batch: Mutex::new(Batch::default()),
        }
    }

    /// Fills the `wr_*` slots of the public struct. Every slot is filled,
    /// those of operations the QP was not created for with builders that
    /// make `ibv_wr_complete` fail with `EOPNOTSUPP`, so a call through
    /// any of them is defined.
    pub(crate) fn fill(&self, p: &mut ibv_qp_ex) {
        p.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
        p.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
        p.wr_bind_mw = Some(wr_bind_mw);
        p.wr_local_inv = Some(wr_local_inv);
        p.wr_rdma_read = Some(wr_rdma_read);
        p.wr_rdma_write = Some(wr_rdma_write);
        p.wr_rdma_write_imm = Some(wr_rdma_write_imm);
        p.wr_send = Some(wr_send);
        p.wr_send_imm = Some(wr_send_imm);
        p.wr_send_inv = Some(wr_send_inv);
        p.wr_send_tso = Some(wr_send_tso);
        p.wr_set_ud_addr = Some(wr_set_ud_addr);
        p.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
        p.wr_set_inline_data = Some(wr_set_inline_data);
        p.wr_set_inline_data_list = Some(wr_set_inline_data_list);
        p.wr_set_sge = Some(wr_set_sge);
        p.wr_set_sge_list = Some(wr_set_sge_list);
        p.wr_start = Some(wr_start);
        p.wr_complete = Some(wr_complete);
        p.wr_abort = Some(wr_abort);
        p.wr_atomic_write = Some(wr_atomic_write);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `verbs_context.create_qp_ex`, what the `ibv_create_qp_ex` inline calls
/// for anything but a plain `comp_mask` of `IBV_QP_INIT_ATTR_PD`.
pub(crate) unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    ret_ptr(|| {
        let ctx = lookup::<Ctx>(context)?;
        // SAFETY: the caller's attributes (NULL is EINVAL).
        let a = unsafe { ffi::read_in(attr as *const ibv_qp_init_attr_ex) }?;
        if a.comp_mask & !SUPPORTED_COMP_MASK != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let supported = match a.qp_type {
            IBV_QPT_RC => SUPPORTED_SEND_OPS,
            IBV_QPT_UD => UD_SEND_OPS,
            _ => return Err(libc::EOPNOTSUPP),
        };
        let send_ops = if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
            a.send_ops_flags
        } else {
            0
        };
        if send_ops & !supported != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        // Every QP but an XRC target needs a PD (rdma-core's rule).
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            return Err(libc::EINVAL);
        }
        let pd = lookup::<Pd>(a.pd)?;
        if !std::ptr::eq(pd.ctx, ctx) {
            return Err(libc::EINVAL);
        }
        // `struct ibv_qp_init_attr_ex` begins with `struct ibv_qp_init_attr`
        // (rdma-core casts the same way); `create` writes `cap` back there.
        qp::create(pd, attr as *mut ibv_qp_init_attr, Some(QpEx::new(send_ops)))
    })
}

/// The extended view of a QP created with `ibv_create_qp_ex`, or NULL.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    ffi::guarded(std::ptr::null_mut(), || match lookup::<Qp>(qp) {
        Ok(q) if q.ex.is_some() => qp as *mut ibv_qp_ex,
        _ => std::ptr::null_mut(),
    })
}

/// The QP and its extended part behind `qp`, if it is one of ours.
fn ex_of(qp: *mut ibv_qp_ex) -> Option<(&'static Qp, &'static QpEx)> {
    let q = fast::<Qp>(qp as *const ibv_qp)?;
    Some((q, q.ex.as_ref()?))
}

/// Runs `f` on the open batch of `qp` (nothing when `qp` is not an
/// extended QP of ours or no batch is open: there is nowhere to record it).
fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &QpEx, &mut Batch)) {
    ffi::guarded((), || {
        let Some((q, ex)) = ex_of(qp) else { return };
        if !ex.open.load(Ordering::Acquire) {
            return;
        }
        let mut b = ex.lock();
        if b.err == 0 {
            f(q, ex, &mut b);
        }
    })
}

/// A builder: adds a request for `op` (an operation of `needs`) with the
/// `wr_id` and `wr_flags` the application set.
fn build(qp: *mut ibv_qp_ex, needs: u64, op: SendOp) {
    with_batch(qp, |q, ex, b| {
        if ex.send_ops & needs == 0 {
            b.err = libc::EOPNOTSUPP;
            return;
        }
        if b.wrs.len() >= q.cap.max_send_wr as usize {
            b.err = libc::ENOSPC;
            return;
        }
        // SAFETY: our public struct; the application wrote these two
        // fields before calling the builder, on this thread.
        let (wr_id, flags) = unsafe {
            let p = q.pub_.get();
            ((*p).wr_id, (*p).wr_flags)
        };
        if flags & !KNOWN_SEND_FLAGS != 0 {
            b.err = libc::EINVAL;
            return;
        }
        let mut w = SendWr::new(wr_id, op, SgList::new());
        w.signaled = flags & IBV_SEND_SIGNALED != 0;
        w.fence = flags & IBV_SEND_FENCE != 0;
        w.solicited = flags & IBV_SEND_SOLICITED != 0;
        b.wrs.push(w);
        b.flags.push(flags);
        b.dests.push(None);
    });
}

/// A setter: gives the last request of the batch its data.
fn set(qp: *mut ibv_qp_ex, f: impl FnOnce(&Qp, &mut SendWr, u32) -> Result<(), c_int>) {
    with_batch(qp, |q, _, b| {
        let flags = b.flags.last().copied().unwrap_or(0);
        let r = match b.wrs.last_mut() {
            Some(w) => f(q, w, flags),
            None => Err(libc::EINVAL),
        };
        if let Err(e) = r {
            b.err = e;
        }
    });
}

fn remote(rkey: u32, va: u64) -> RemoteAddr {
    RemoteAddr { va, rkey }
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    let op = SendOp::CompareSwap {
        remote: remote(rkey, remote_addr),
        compare,
        swap,
    };
    build(qp, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, op);
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    let op = SendOp::FetchAdd {
        remote: remote(rkey, remote_addr),
        add,
    };
    build(qp, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, op);
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    build(
        qp,
        IBV_QP_EX_WITH_RDMA_READ,
        SendOp::Read(remote(rkey, remote_addr)),
    );
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    build(
        qp,
        IBV_QP_EX_WITH_RDMA_WRITE,
        SendOp::Write(remote(rkey, remote_addr)),
    );
}

/// Immediate data is `__be32` from the application and travels as it is.
unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    let op = SendOp::WriteImm(remote(rkey, remote_addr), u32::from_be(imm));
    build(qp, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, op);
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    build(qp, IBV_QP_EX_WITH_SEND, SendOp::Send);
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
    build(
        qp,
        IBV_QP_EX_WITH_SEND_WITH_IMM,
        SendOp::SendImm(u32::from_be(imm)),
    );
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    build(
        qp,
        IBV_QP_EX_WITH_SEND_WITH_INV,
        SendOp::SendInv(invalidate_rkey),
    );
}

/// Refuses an operation no ndverbs QP can be created for: the batch fails
/// with `EOPNOTSUPP`.
fn unsupported(qp: *mut ibv_qp_ex) {
    with_batch(qp, |_, _, b| b.err = libc::EOPNOTSUPP);
}

unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    _mw: *mut c_void,
    _rkey: u32,
    _i: *const c_void,
) {
    unsupported(qp);
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, _rkey: u32) {
    unsupported(qp);
}

unsafe extern "C" fn wr_send_tso(qp: *mut ibv_qp_ex, _hdr: *mut c_void, _sz: u16, _mss: u16) {
    unsupported(qp);
}

unsafe extern "C" fn wr_atomic_write(qp: *mut ibv_qp_ex, _rkey: u32, _va: u64, _wr: *const c_void) {
    unsupported(qp);
}

/// UD addresses are for UD QPs, which ndverbs does not create.
unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    with_batch(qp, |q, _, b| {
        let r = match b.dests.last_mut() {
            _ if q.qp_type != IBV_QPT_UD => Err(libc::EOPNOTSUPP),
            Some(d) => qp::ud_dest(ah, qpn, qkey).map(|dest| *d = Some(dest)),
            None => Err(libc::EINVAL),
        };
        if let Err(e) = r {
            b.err = e;
        }
    });
}

/// XRC SRQ numbers are for XRC QPs, which ndverbs does not create.
unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, _srqn: u32) {
    set(qp, |_, _, _| Err(libc::EINVAL));
}

/// Copies `bufs` as the request's inline data, refusing more than the QP's
/// `max_inline_data` (`ENOSPC`, as rxe).
///
/// # Safety
/// Each buffer must be readable for its length.
unsafe fn set_inline(q: &Qp, w: &mut SendWr, bufs: &[(*const u8, usize)]) -> Result<(), c_int> {
    let total = bufs
        .iter()
        .try_fold(0usize, |t, (_, l)| t.checked_add(*l))
        .ok_or(libc::ENOSPC)?;
    if total > q.cap.max_inline_data as usize {
        return Err(libc::ENOSPC);
    }
    let mut data = Vec::with_capacity(total);
    for &(p, l) in bufs {
        if l == 0 {
            continue;
        }
        if p.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's buffer of `l` bytes (checked non-NULL).
        data.extend_from_slice(unsafe { std::slice::from_raw_parts(p, l) });
    }
    w.sgl = SgList::new();
    w.inline = Some(data);
    Ok(())
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    // SAFETY: the application's buffer, by ibv_wr_set_inline_data's contract.
    set(qp, |q, w, _| unsafe {
        set_inline(q, w, &[(addr as *const u8, length)])
    });
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    set(qp, |q, w, _| {
        if num_buf > 0 && buf_list.is_null() {
            return Err(libc::EINVAL);
        }
        let bufs: Vec<(*const u8, usize)> = (0..num_buf)
            // SAFETY: the caller's list of num_buf entries (non-NULL).
            .map(|i| unsafe { *buf_list.add(i) })
            .map(|b| (b.addr as *const u8, b.length))
            .collect();
        // SAFETY: the application's buffers, by the call's contract.
        unsafe { set_inline(q, w, &bufs) }
    });
}

/// Gives the request its SGEs; with `IBV_SEND_INLINE` on a request that
/// carries data, their bytes are copied as inline data, as `ibv_post_send`
/// does.
fn set_sges(q: &Qp, w: &mut SendWr, flags: u32, sgl: SgList) -> Result<(), c_int> {
    if sgl.len() > q.cap.max_send_sge as usize {
        return Err(libc::ENOSPC);
    }
    if flags & IBV_SEND_INLINE != 0 && !w.op.is_read_or_atomic() {
        let bufs: Vec<(*const u8, usize)> = sgl
            .iter()
            .map(|s| (s.addr as usize as *const u8, s.len as usize))
            .collect();
        // SAFETY: an inline SGE names bytes the application can read, by
        // the contract of the post API.
        return unsafe { set_inline(q, w, &bufs) };
    }
    w.inline = None;
    w.sgl = sgl;
    Ok(())
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    set(qp, |q, w, flags| {
        let mut l = SgList::new();
        // A zero length means no data, as in rxe.
        if length != 0 {
            l.push(Sge::new(addr, length, lkey));
        }
        set_sges(q, w, flags, l)
    });
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    set(qp, |q, w, flags| {
        if num_sge > q.cap.max_send_sge as usize {
            return Err(libc::ENOSPC);
        }
        let n = c_int::try_from(num_sge).map_err(|_| libc::ENOSPC)?;
        // SAFETY: the caller's list of num_sge entries (NULL with entries
        // is EINVAL in `sges`).
        let l = unsafe { qp::sges(sg_list, n) }?;
        set_sges(q, w, flags, l)
    });
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    ffi::guarded((), || {
        let Some((_, ex)) = ex_of(qp) else { return };
        // One batch per QP at a time: another thread's waits.
        while ex
            .open
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        let mut b = ex.lock();
        b.wrs.clear();
        b.flags.clear();
        b.dests.clear();
        b.err = 0;
    });
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    let Some((q, ex)) = ex_of(qp) else {
        return libc::EINVAL;
    };
    if !ex.open.load(Ordering::Acquire) {
        // No ibv_wr_start: nothing to post.
        return libc::EINVAL;
    }
    let _returned = q.pd.nic.activity.entering();
    let rc = ffi::guarded(libc::EIO, || {
        let (wrs, dests, err) = {
            let mut b = ex.lock();
            b.flags.clear();
            (
                std::mem::take(&mut b.wrs),
                std::mem::take(&mut b.dests),
                std::mem::replace(&mut b.err, 0),
            )
        };
        if err != 0 {
            return err;
        }
        for (w, dest) in wrs.into_iter().zip(dests) {
            let r = if q.qp_type == IBV_QPT_UD {
                dest.ok_or(libc::EINVAL)
                    .and_then(|d| qp::ud_send_wr(w, d))
                    .and_then(|u| q.qp.post_send_ud(u).map_err(|e| e.errno()))
            } else {
                q.qp.post_send(w).map_err(|e| e.errno())
            };
            if let Err(e) = r {
                return e;
            }
        }
        0
    });
    ex.open.store(false, Ordering::Release);
    q.pd.nic.posted();
    if rc != 0 {
        ffi::set_errno(rc);
    }
    rc
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    ffi::guarded((), || {
        let Some((_, ex)) = ex_of(qp) else { return };
        {
            let mut b = ex.lock();
            b.wrs.clear();
            b.flags.clear();
            b.dests.clear();
            b.err = 0;
        }
        ex.open.store(false, Ordering::Release);
    });
}
