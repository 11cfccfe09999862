//! Address handles: an address vector kept for UD sends and the connection
//! manager. ndverbs has no UD QPs yet, so nothing sends with one, but
//! creating and destroying them works, and so does deriving one from a
//! completion's GRH (`ibv_init_ah_from_wc`).

use crate::abi::*;
use crate::device::Ctx;
use crate::ffi::{self, lookup, ret_errno, ret_minus1, ret_ptr, Kind, Object};
use crate::pd::{next_handle, Pd};
use libc::c_int;
use std::cell::UnsafeCell;
use std::sync::atomic::Ordering;

/// An address handle.
#[repr(C)]
pub(crate) struct Ah {
    pub_: UnsafeCell<ibv_ah>,
    magic: u64,
    pd: &'static Pd,
    attr: ibv_ah_attr,
}

// SAFETY: the public struct is the first field.
unsafe impl Object for Ah {
    const KIND: Kind = Kind::Ah;
    const MAGIC: u64 = 0x6e64_7661_6800_0009;
    type Public = ibv_ah;
    fn magic(&self) -> u64 {
        self.magic
    }
}

// SAFETY: as for Pd.
unsafe impl Sync for Ah {}

impl Ah {
    /// The address vector it was made with.
    #[allow(
        dead_code,
        reason = "read by the connection manager and UD sends, not there yet"
    )]
    pub(crate) fn attr(&self) -> ibv_ah_attr {
        self.attr
    }
}

/// RoCE address vectors need a GRH from the one GID of port 1.
fn check_ah(a: &ibv_ah_attr) -> Result<(), c_int> {
    if a.is_global == 0 || a.grh.sgid_index != 0 || a.port_num != 1 {
        return Err(libc::EINVAL);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    ret_ptr(|| {
        let pd = lookup::<Pd>(pd)?;
        // SAFETY: the caller's attributes (NULL is EINVAL).
        let a = unsafe { ffi::read_in(attr as *const ibv_ah_attr) }?;
        check_ah(&a)?;
        let (_, p) = ffi::publish(Ah {
            pub_: UnsafeCell::new(ibv_ah {
                context: pd.ctx.public(),
                pd: ffi::public(pd),
                handle: next_handle(),
            }),
            magic: Ah::MAGIC,
            pd,
            attr: a,
        });
        pd.users.fetch_add(1, Ordering::AcqRel);
        Ok(p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    ret_errno(|| {
        let ah = lookup::<Ah>(ah)?;
        let pd = ah.pd;
        ffi::release(ah, |_| {});
        pd.users.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    })
}

/// The address vector back to the sender of a receive with a GRH.
fn ah_from_wc(ctx: &Ctx, port: u8, wc: &ibv_wc, grh: &ibv_grh) -> Result<ibv_ah_attr, c_int> {
    if port != 1 || wc.wc_flags & IBV_WC_GRH == 0 {
        return Err(libc::EINVAL);
    }
    // The receive's destination must be our GID (index 0).
    let ours = ndverbs_wire::cma::gid_of(ctx.dev.addr).octets();
    if grh.dgid.raw != ours {
        return Err(libc::EINVAL);
    }
    let flow = u32::from_be(grh.version_tclass_flow);
    Ok(ibv_ah_attr {
        grh: ibv_global_route {
            dgid: grh.sgid,
            flow_label: flow & 0xfffff,
            sgid_index: 0,
            hop_limit: 0xff,
            traffic_class: ((flow >> 20) & 0xff) as u8,
        },
        dlid: wc.slid,
        sl: wc.sl,
        src_path_bits: wc.dlid_path_bits,
        static_rate: 0,
        is_global: 1,
        port_num: port,
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    ret_minus1(|| {
        let ctx = lookup::<Ctx>(context)?;
        if wc.is_null() || grh.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's completion and the 40-byte GRH it received.
        let a = unsafe { ah_from_wc(ctx, port_num, &*wc, &*grh) }?;
        // SAFETY: the caller's struct to fill.
        unsafe { ffi::write_out(ah_attr, a) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    ret_ptr(|| {
        let p = lookup::<Pd>(pd)?;
        if wc.is_null() || grh.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: as in ibv_init_ah_from_wc.
        let mut a = unsafe { ah_from_wc(p.ctx, port_num, &*wc, &*grh) }?;
        // SAFETY: forwarded; `a` is ours.
        let ah = unsafe { ibv_create_ah(pd, &mut a) };
        if ah.is_null() {
            Err(ffi::errno())
        } else {
            Ok(ah)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    _context: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    // Ethernet addresses are the kernel's business under UDP; nothing here
    // needs them.
    ffi::set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}
