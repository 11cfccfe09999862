//! Protection domains and memory regions.
//!
//! `ibv_reg_mr` registers the application's memory in place (heap, stack,
//! `mmap`, SysV shared memory alike): the region's address on the wire is
//! its virtual address, as with rxe, so programs that advertise buffer
//! addresses (perftest, rping) work unchanged. As with pinning, the range
//! must be mapped (and writable when any write right is asked) at
//! registration, else `EFAULT`; what happens when the application unmaps it
//! later is [`crate::guard`]'s business. The kernel's other rules apply:
//! zero length is `EINVAL`, remote write or atomic rights without local
//! write `EINVAL`, on-demand paging `EOPNOTSUPP` (not advertised either, so
//! UCX does not switch to whole-address-space regions); relaxed ordering and
//! the other optional hints are accepted and ignored. An I/O virtual
//! address other than the buffer's own (`ibv_reg_mr_iova*`) is `EOPNOTSUPP`:
//! the engine names memory by its address.

use crate::abi::*;
use crate::device::Ctx;
use crate::ffi::{self, lookup, ret_errno, ret_ptr, Kind, Object};
use crate::guard;
use crate::nic::Nic;
use libc::{c_int, c_uint, c_void};
use ndverbs_verbs::Access;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The next `handle` of any object (kernel object handles, here only a
/// distinct number).
pub(crate) fn next_handle() -> u32 {
    static H: AtomicU32 = AtomicU32::new(1);
    H.fetch_add(1, Ordering::Relaxed)
}

/// A protection domain.
#[repr(C)]
pub(crate) struct Pd {
    pub_: UnsafeCell<ibv_pd>,
    magic: u64,
    pub(crate) pd: ndverbs_verbs::Pd,
    pub(crate) ctx: &'static Ctx,
    pub(crate) nic: Arc<Nic>,
    /// Regions, QPs, SRQs and AHs in it: a PD in use cannot go.
    pub(crate) users: AtomicU32,
}

// SAFETY: the public struct is the first field.
unsafe impl Object for Pd {
    const KIND: Kind = Kind::Pd;
    const MAGIC: u64 = 0x6e64_7670_6400_0003;
    type Public = ibv_pd;
    fn magic(&self) -> u64 {
        self.magic
    }
}

// SAFETY: the public struct is only read by us after publication; the rest is Sync.
unsafe impl Sync for Pd {}

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    ret_ptr(|| {
        let ctx = lookup::<Ctx>(context)?;
        let nic = ctx.nic()?;
        let pd = nic.dev.alloc_pd().map_err(|e| e.errno())?;
        let (_, p) = ffi::publish(Pd {
            pub_: UnsafeCell::new(ibv_pd {
                context: ctx.public(),
                handle: next_handle(),
            }),
            magic: Pd::MAGIC,
            pd,
            ctx,
            nic,
            users: AtomicU32::new(0),
        });
        Ok(p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    ret_errno(|| {
        let pd = lookup::<Pd>(pd)?;
        if pd.users.load(Ordering::Acquire) != 0 {
            return Err(libc::EBUSY);
        }
        ffi::release(pd, |_| {});
        Ok(())
    })
}

/// A memory region.
#[repr(C)]
pub(crate) struct Mr {
    pub_: UnsafeCell<ibv_mr>,
    magic: u64,
    /// `None` once revoked because the memory went away (see [`crate::guard`]).
    mr: Mutex<Option<ndverbs_verbs::Mr>>,
    /// What it is registered with now (`ibv_rereg_mr` changes it).
    reg: Mutex<MrReg>,
    id: u64,
}

/// The PD and access flags of a region's current registration.
struct MrReg {
    pd: &'static Pd,
    access: c_uint,
}

// SAFETY: the public struct is the first field.
unsafe impl Object for Mr {
    const KIND: Kind = Kind::Mr;
    const MAGIC: u64 = 0x6e64_766d_7200_0004;
    type Public = ibv_mr;
    fn magic(&self) -> u64 {
        self.magic
    }
}

// SAFETY: as for Pd.
unsafe impl Sync for Mr {}

/// Live regions by id, for the revoking helper of [`crate::guard`].
fn regions() -> &'static Mutex<HashMap<u64, &'static Mr>> {
    static R: OnceLock<Mutex<HashMap<u64, &'static Mr>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Revokes region `id`'s keys: its memory was unmapped under it.
fn revoke(id: u64) {
    let map = regions().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(mr) = map.get(&id) {
        let gone = mr.mr.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(gone);
    }
}

/// Every write right, as the kernel counts them for pinning writable pages.
const WRITE_RIGHTS: c_uint = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND;

/// The rights of `access`, as the kernel checks them.
fn rights(access: c_uint) -> Result<Access, c_int> {
    let known = IBV_ACCESS_LOCAL_WRITE
        | IBV_ACCESS_REMOTE_WRITE
        | IBV_ACCESS_REMOTE_READ
        | IBV_ACCESS_REMOTE_ATOMIC
        | IBV_ACCESS_MW_BIND
        | IBV_ACCESS_ZERO_BASED
        | IBV_ACCESS_ON_DEMAND
        | IBV_ACCESS_HUGETLB
        | IBV_ACCESS_OPTIONAL_RANGE;
    if access & !known != 0 {
        return Err(libc::EINVAL);
    }
    if access & IBV_ACCESS_ON_DEMAND != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if access & IBV_ACCESS_ZERO_BASED != 0 {
        return Err(libc::EINVAL);
    }
    let remote_writes = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    if access & remote_writes != 0 && access & IBV_ACCESS_LOCAL_WRITE == 0 {
        return Err(libc::EINVAL);
    }
    Access::from_bits(access & Access::ALL.bits()).ok_or(libc::EINVAL)
}

fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> Result<*mut ibv_mr, c_int> {
    let pd = lookup::<Pd>(pd)?;
    if length == 0 {
        return Err(libc::EINVAL);
    }
    let rights = rights(access)?;
    if iova != addr as u64 {
        return Err(libc::EOPNOTSUPP);
    }
    guard::check_mapped(addr as usize, length, access & WRITE_RIGHTS != 0)?;
    let ptr = NonNull::new(addr as *mut u8).ok_or(libc::EFAULT)?;
    // SAFETY: the range is mapped (and writable if a write right was asked,
    // which is the only way the engine writes it) right now. The C API
    // leaves it to the application to keep it so until ibv_dereg_mr; when it
    // does not, guard turns the engine's faults on it into harmless accesses
    // and revokes the region. The engine reaches these bytes only by raw
    // copies and atomics, never through Rust references.
    let mr = unsafe { pd.pd.reg_mr_raw(ptr, length, rights) }.map_err(|e| e.errno())?;
    static IDS: AtomicU64 = AtomicU64::new(1);
    let id = IDS.fetch_add(1, Ordering::Relaxed);
    let public = ibv_mr {
        context: pd.ctx.public(),
        pd: ffi::public(pd),
        addr,
        length,
        handle: next_handle(),
        lkey: mr.lkey(),
        rkey: mr.rkey(),
    };
    let (obj, p) = ffi::publish(Mr {
        pub_: UnsafeCell::new(public),
        magic: Mr::MAGIC,
        mr: Mutex::new(Some(mr)),
        reg: Mutex::new(MrReg { pd, access }),
        id,
    });
    pd.users.fetch_add(1, Ordering::AcqRel);
    regions()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, obj);
    guard::watch(addr as usize, length, id, revoke);
    Ok(p)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    ret_ptr(|| reg(pd, addr, length, addr as u64, access as c_uint))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    ret_ptr(|| reg(pd, addr, length, iova, access as c_uint))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    ret_ptr(|| reg(pd, addr, length, iova, access))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    ffi::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    ret_errno(|| {
        let mr = lookup::<Mr>(mr)?;
        {
            let mut slot = mr.mr.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(m) = slot.take() {
                if let Err((m, e)) = m.deregister() {
                    *slot = Some(m);
                    return Err(e.errno());
                }
            }
        }
        guard::unwatch(mr.id);
        regions()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&mr.id);
        let pd = mr.reg.lock().unwrap_or_else(|e| e.into_inner()).pd;
        pd.users.fetch_sub(1, Ordering::AcqRel);
        ffi::release(mr, |_| {});
        Ok(())
    })
}

// enum ibv_rereg_mr_flags and enum ibv_rereg_mr_err_code
const IBV_REREG_MR_CHANGE_TRANSLATION: c_int = 1;
const IBV_REREG_MR_CHANGE_PD: c_int = 1 << 1;
const IBV_REREG_MR_CHANGE_ACCESS: c_int = 1 << 2;
const IBV_REREG_MR_FLAGS_SUPPORTED: c_int = (IBV_REREG_MR_CHANGE_ACCESS << 1) - 1;
const IBV_REREG_MR_ERR_INPUT: c_int = -1;
const IBV_REREG_MR_ERR_CMD: c_int = -4;

/// `ibv_rereg_mr`: moves a region to another PD, gives it other access
/// flags, or points it at other memory, as flags say.
///
/// rdma-core's own checks come first and fail with
/// `IBV_REREG_MR_ERR_INPUT` (-1, `EINVAL`), the region unchanged: an
/// unknown flag, a new translation without an address or length, access
/// flags without `IBV_REREG_MR_CHANGE_ACCESS`. Then what the kernel does
/// (`IBV_REREG_MR_ERR_CMD`, -4, with its errno): no flag at all, a PD of
/// another context or not a PD, access flags or memory `ibv_reg_mr` would
/// refuse, a region whose memory went away (`EFAULT`, see [`crate::guard`]).
/// A refusal leaves the region as it was (rdma-core says it "shouldn't be
/// used"; here it still works). On success the keys stay what they were,
/// as with rxe, so a peer keeps the R_Key it has, and the struct's `pd`,
/// `addr` and `length` say what the region is now; requests checked from
/// then on see the new memory, PD and rights (a receive posted with the
/// old address now falls outside the region).
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    ffi::guarded(IBV_REREG_MR_ERR_CMD, || {
        let Ok(m) = lookup::<Mr>(mr) else {
            ffi::set_errno(libc::EINVAL);
            return IBV_REREG_MR_ERR_INPUT;
        };
        let translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
        if flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0
            || (translation && (length == 0 || addr.is_null()))
            || (access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0)
        {
            ffi::set_errno(libc::EINVAL);
            return IBV_REREG_MR_ERR_INPUT;
        }
        match rereg(m, flags, pd, addr, length, access as c_uint) {
            Ok(()) => 0,
            Err(e) => {
                ffi::set_errno(e);
                IBV_REREG_MR_ERR_CMD
            }
        }
    })
}

/// The re-registration itself (the kernel's part of `ibv_rereg_mr`).
fn rereg(
    m: &'static Mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_uint,
) -> Result<(), c_int> {
    if flags == 0 {
        // Nothing to change: the kernel's EINVAL.
        return Err(libc::EINVAL);
    }
    let mut reg = m.reg.lock().unwrap_or_else(|e| e.into_inner());
    let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
        let p = lookup::<Pd>(pd)?;
        if !std::ptr::eq(p.ctx, reg.pd.ctx) {
            return Err(libc::EINVAL);
        }
        p
    } else {
        reg.pd
    };
    let new_access = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
        access
    } else {
        reg.access
    };
    // SAFETY: our public struct; only this call (under `reg`) changes
    // these fields after creation.
    let (old_addr, old_len) = unsafe {
        let p = m.pub_.get();
        ((*p).addr, (*p).length)
    };
    let translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
    let (new_addr, new_len) = if translation {
        (addr, length)
    } else {
        (old_addr, old_len)
    };
    let rights = rights(new_access)?;
    guard::check_mapped(new_addr as usize, new_len, new_access & WRITE_RIGHTS != 0)?;
    let ptr = NonNull::new(new_addr as *mut u8).ok_or(libc::EFAULT)?;
    {
        let mut slot = m.mr.lock().unwrap_or_else(|e| e.into_inner());
        // A region revoked because its memory went away has no keys left
        // to keep.
        let old = slot.take().ok_or(libc::EFAULT)?;
        // SAFETY: as in `reg`: the range is mapped (writable when a write
        // right is asked) now, and guard watches it from here on.
        match unsafe { old.rereg_raw(&new_pd.pd, ptr, new_len, rights) } {
            Ok(fresh) => *slot = Some(fresh),
            Err((old, e)) => {
                *slot = Some(old);
                return Err(e.errno());
            }
        }
        // SAFETY: our public struct, whose description the application
        // reads after this returns (the keys stay what they were).
        unsafe {
            let p = m.pub_.get();
            (*p).pd = ffi::public(new_pd);
            (*p).addr = new_addr;
            (*p).length = new_len;
        }
    }
    if translation {
        guard::unwatch(m.id);
        guard::watch(new_addr as usize, new_len, m.id, revoke);
    }
    if !std::ptr::eq(new_pd, reg.pd) {
        new_pd.users.fetch_add(1, Ordering::AcqRel);
        reg.pd.users.fetch_sub(1, Ordering::AcqRel);
    }
    reg.pd = new_pd;
    reg.access = new_access;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_follow_the_kernel() {
        let lw = IBV_ACCESS_LOCAL_WRITE;
        assert_eq!(rights(0), Ok(Access::NONE));
        assert_eq!(rights(IBV_ACCESS_REMOTE_WRITE), Err(libc::EINVAL));
        assert_eq!(rights(IBV_ACCESS_REMOTE_ATOMIC), Err(libc::EINVAL));
        assert_eq!(
            rights(lw | IBV_ACCESS_REMOTE_ATOMIC),
            Ok(Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)
        );
        assert_eq!(rights(lw | IBV_ACCESS_ON_DEMAND), Err(libc::EOPNOTSUPP));
        assert_eq!(rights(lw | 1 << 20), Ok(Access::LOCAL_WRITE)); // relaxed ordering
        assert_eq!(
            rights(lw | IBV_ACCESS_MW_BIND | IBV_ACCESS_HUGETLB),
            Ok(Access::LOCAL_WRITE)
        );
        assert_eq!(rights(1 << 8), Err(libc::EINVAL));
    }
}
