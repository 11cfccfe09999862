//! Address handles: the address vector a UD send goes by.
//!
//! `ibv_create_ah` keeps the attributes (RoCE needs a GRH from the one GID
//! of port 1: `is_global`, source GID index 0, port 1, else `EINVAL`); an
//! `ibv_post_send` on a UD QP names the handle in `wr.ud.ah` and the datagram
//! goes to its destination GID (an IPv4-mapped GID is an IPv4 address).
//!
//! **Answering a datagram** (`ibv_init_ah_from_wc`, `ibv_create_ah_from_wc`):
//! the completion says there is a GRH (`IBV_WC_GRH`), and the first 40 bytes
//! of the receive buffer are the GRH area as rxe fills it. For RoCEv2 over
//! IPv6 that is the IPv6 header; over IPv4 it is 20 zero bytes and then the
//! IPv4 header. rdma-core tells them apart as this library does: a first
//! nibble other than 6 with version 4 at byte 20 is IPv4; a first nibble 6
//! is IPv6 unless bytes 20.. are a 20-byte IPv4 header with a correct
//! checksum (the first nibble of a zero area is 0, but an IPv6 header's
//! bytes 20.. are the source address and may look like anything). The
//! address vector goes back to the source: its GID is the source address
//! (IPv4-mapped for IPv4), the hop limit the TTL (IPv4) or 0xff (IPv6), the
//! traffic class the TOS or the IPv6 traffic class. The destination must be
//! our own GID (else `EINVAL`).

use crate::abi::*;
use crate::device::Ctx;
use crate::ffi::{self, lookup, ret_errno, ret_minus1, ret_ptr, Kind, Object};
use crate::pd::{next_handle, Pd};
use libc::c_int;
use ndverbs_wire::cma::{addr_of_gid, gid_of};
use ndverbs_wire::ip::{Ipv4Header, Ipv6Header};
use std::cell::UnsafeCell;
use std::net::IpAddr;
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

/// The GRH area of a RoCEv2 receive as its network header (see the module
/// docs for how the two layouts are told apart).
enum NetHeader {
    V4(Ipv4Header),
    V6(Ipv6Header),
}

fn net_header(g: &[u8; 40]) -> Option<NetHeader> {
    let v4 = Ipv4Header::parse(&g[20..]).ok();
    if g[0] >> 4 != 6 {
        return v4.map(NetHeader::V4);
    }
    match v4.filter(|h| h.checksum == h.compute_checksum()) {
        Some(h) => Some(NetHeader::V4(h)),
        None => Ipv6Header::parse(g).ok().map(NetHeader::V6),
    }
}

/// The address vector back to the sender of a receive with a GRH.
fn ah_from_wc(ctx: &Ctx, port: u8, wc: &ibv_wc, grh: &[u8; 40]) -> Result<ibv_ah_attr, c_int> {
    if port != 1 || wc.wc_flags & IBV_WC_GRH == 0 {
        return Err(libc::EINVAL);
    }
    let (src, dst, hop_limit, traffic_class, flow_label) = match net_header(grh) {
        Some(NetHeader::V4(h)) => (IpAddr::V4(h.src), IpAddr::V4(h.dst), h.ttl, h.tos, 0),
        Some(NetHeader::V6(h)) => (
            addr_of_gid(h.src),
            addr_of_gid(h.dst),
            0xff,
            h.traffic_class,
            h.flow_label,
        ),
        None => return Err(libc::EINVAL),
    };
    // The receive's destination must be our GID (index 0).
    if gid_of(dst) != gid_of(ctx.dev.addr) {
        return Err(libc::EINVAL);
    }
    Ok(ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid {
                raw: gid_of(src).octets(),
            },
            flow_label,
            sgid_index: 0,
            hop_limit,
            traffic_class,
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
        let a = unsafe { ah_from_wc(ctx, port_num, &*wc, &*(grh as *const [u8; 40])) }?;
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
        let mut a = unsafe { ah_from_wc(p.ctx, port_num, &*wc, &*(grh as *const [u8; 40])) }?;
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
