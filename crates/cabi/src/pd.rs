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
    pd: &'static Pd,
    id: u64,
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
        pd,
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
        mr.pd.users.fetch_sub(1, Ordering::AcqRel);
        ffi::release(mr, |_| {});
        Ok(())
    })
}

/// `ibv_rereg_mr`: `IBV_REREG_MR_ERR_INPUT` (-1), the region unchanged;
/// re-registration is not implemented.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    _flags: c_int,
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _length: usize,
    _access: c_int,
) -> c_int {
    ffi::set_errno(if lookup::<Mr>(mr).is_ok() {
        libc::EOPNOTSUPP
    } else {
        libc::EINVAL
    });
    -1
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
