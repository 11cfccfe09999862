//! The devices librdmacm works with: one context and one default PD per
//! device, `rdma_get_devices`/`rdma_free_devices`.
//!
//! As rdma-core's librdmacm, the library opens each device once for itself
//! (with this library's own `ibv_open_device`, so the context is an
//! ordinary libibverbs context) and every id bound to that device shares
//! it as `cm_id->verbs`, with the device's default PD as `cm_id->pd` until
//! a QP brings another. They stay open for the life of the process. A
//! program may open the same device again with `ibv_open_device` (perftest
//! `-R` does and then uses `cm_id->verbs`): contexts are separate objects
//! over the same engine (`crate::nic`).

use crate::abi::{ibv_context, ibv_pd};
use crate::device::{self, Ctx, Dev};
use crate::ffi::{self, lookup};
use crate::pd::ibv_alloc_pd;
use libc::{c_int, c_void};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};

/// A device as librdmacm holds it.
#[derive(Clone, Copy)]
pub(crate) struct CmDev {
    pub(crate) dev: &'static Dev,
    pub(crate) ctx: &'static Ctx,
}

impl CmDev {
    pub(crate) fn addr(&self) -> IpAddr {
        self.dev.addr
    }

    /// The `ibv_context *` ids on this device carry.
    pub(crate) fn verbs(&self) -> *mut ibv_context {
        self.ctx.public()
    }

    /// The device's default PD, allocated on first use.
    pub(crate) fn pd(&self) -> Result<*mut ibv_pd, c_int> {
        let mut m = pds().lock().unwrap_or_else(|e| e.into_inner());
        let key = self.ctx as *const Ctx as usize;
        if let Some(p) = m.get(&key) {
            return Ok(*p as *mut ibv_pd);
        }
        // SAFETY: a live context of ours.
        let pd = unsafe { ibv_alloc_pd(self.verbs()) };
        if pd.is_null() {
            return Err(ffi::errno());
        }
        m.insert(key, pd as usize);
        Ok(pd)
    }
}

fn contexts() -> &'static Mutex<HashMap<usize, usize>> {
    static C: OnceLock<Mutex<HashMap<usize, usize>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

fn pds() -> &'static Mutex<HashMap<usize, usize>> {
    static P: OnceLock<Mutex<HashMap<usize, usize>>> = OnceLock::new();
    P.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `dev` with librdmacm's context, opened on first use.
fn cm_dev(dev: &'static Dev) -> Result<CmDev, c_int> {
    let mut m = contexts().lock().unwrap_or_else(|e| e.into_inner());
    let key = dev as *const Dev as usize;
    let ctx = match m.get(&key) {
        Some(c) => *c as *mut ibv_context,
        None => {
            // SAFETY: a live device of ours.
            let c = unsafe { device::ibv_open_device(ffi::public(dev)) };
            if c.is_null() {
                return Err(ffi::errno());
            }
            m.insert(key, c as usize);
            c
        }
    };
    Ok(CmDev {
        dev,
        ctx: lookup::<Ctx>(ctx)?,
    })
}

/// Every device now, with its context.
pub(crate) fn all() -> Result<Vec<CmDev>, c_int> {
    device::devices()?.into_iter().map(cm_dev).collect()
}

/// The device whose address is `addr`: `ENODEV` if none (an address of
/// this host on no device, as the kernel says for an interface without
/// RDMA), `EADDRNOTAVAIL` if `addr` is not this host's.
pub(crate) fn by_addr(addr: IpAddr) -> Result<CmDev, c_int> {
    let addr = match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        a => a,
    };
    match device::devices()?.into_iter().find(|d| d.addr == addr) {
        Some(d) => cm_dev(d),
        None if is_local(addr) => Err(libc::ENODEV),
        None => Err(libc::EADDRNOTAVAIL),
    }
}

/// Whether `addr` is an address of this host (a socket binds to it).
fn is_local(addr: IpAddr) -> bool {
    std::net::UdpSocket::bind((addr, 0)).is_ok()
}

/// What rdma-core's `ucma_init` checks: there is a device (`ENODEV`).
pub(crate) fn init() -> Result<(), c_int> {
    if device::devices()?.is_empty() {
        return Err(libc::ENODEV);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    // malloc'd: rdma_free_devices frees what C allocated.
    ffi::c_list(num_devices, || {
        Ok(all()?.iter().map(|d| d.verbs()).collect())
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: the list came from rdma_get_devices (calloc) or is NULL;
    // the contexts stay open, as rdma-core's do.
    unsafe { libc::free(list as *mut c_void) };
}
