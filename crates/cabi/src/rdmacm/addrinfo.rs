//! `rdma_getaddrinfo` and `rdma_freeaddrinfo`.
//!
//! As rdma-core's `addrinfo.c` for IP addresses: the C library's
//! `getaddrinfo` resolves the name and service (`RAI_PASSIVE` →
//! `AI_PASSIVE`, `RAI_NUMERICHOST` → `AI_NUMERICHOST`, the hints' family;
//! stream sockets for RC, TCP for the TCP port space), and its first answer
//! becomes the source address (passive) or the destination (active), with
//! the hints' source address added when the answer has none. A failure is
//! `getaddrinfo`'s own code (`EAI_*`), returned as it is. No route or
//! connect data is attached (those are InfiniBand ACM's).

use super::abi::*;
use crate::ffi::{self, set_errno};
use libc::{addrinfo, c_char, c_int, c_void, sockaddr, socklen_t};

/// A malloc'd copy of `len` bytes at `src`.
///
/// # Safety
/// `src` must hold `len` readable bytes.
unsafe fn copy_addr(src: *const sockaddr, len: socklen_t) -> Result<*mut sockaddr, c_int> {
    // SAFETY: malloc; checked for NULL.
    let p = unsafe { libc::malloc(len as usize) } as *mut sockaddr;
    if p.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: `len` bytes each side.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, p as *mut u8, len as usize) };
    Ok(p)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    ffi::guarded(-1, || {
        if (node.is_null() && service.is_null() && hints.is_null()) || res.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        if let Err(e) = super::devices::init() {
            set_errno(e);
            return -1;
        }
        // SAFETY: plain C data; all zeroes is valid.
        let zero: rdma_addrinfo = unsafe { std::mem::zeroed() };
        // SAFETY: the caller's hints, or our zeroes.
        let h = unsafe { hints.as_ref() }.unwrap_or(&zero);
        // SAFETY: calloc; checked below.
        let rai =
            unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) } as *mut rdma_addrinfo;
        if rai.is_null() {
            set_errno(libc::ENOMEM);
            return -1;
        }
        // SAFETY: just allocated and zeroed.
        let r = unsafe { &mut *rai };
        let rc = (|| -> Result<(), c_int> {
            if !node.is_null() || !service.is_null() {
                // SAFETY: plain C data.
                let mut ai: addrinfo = unsafe { std::mem::zeroed() };
                if h.ai_flags & RAI_PASSIVE != 0 {
                    ai.ai_flags |= libc::AI_PASSIVE;
                }
                if h.ai_flags & RAI_NUMERICHOST != 0 {
                    ai.ai_flags |= libc::AI_NUMERICHOST;
                }
                ai.ai_family = h.ai_family;
                match h.ai_qp_type {
                    2 | 3 => ai.ai_socktype = libc::SOCK_STREAM,
                    4 => ai.ai_socktype = libc::SOCK_DGRAM,
                    _ => {}
                }
                match h.ai_port_space {
                    RDMA_PS_TCP => ai.ai_protocol = libc::IPPROTO_TCP,
                    RDMA_PS_UDP | RDMA_PS_IPOIB => ai.ai_protocol = libc::IPPROTO_UDP,
                    _ => {}
                }
                let mut out: *mut addrinfo = std::ptr::null_mut();
                let hp = if hints.is_null() {
                    std::ptr::null()
                } else {
                    &ai as *const addrinfo
                };
                // SAFETY: the caller's strings (or NULL), our hints.
                let rc = unsafe { libc::getaddrinfo(node, service, hp, &mut out) };
                if rc != 0 {
                    return Err(rc);
                }
                // SAFETY: getaddrinfo succeeded: at least one answer.
                let a = unsafe { &*out };
                r.ai_qp_type = if h.ai_qp_type != 0 {
                    h.ai_qp_type
                } else if a.ai_socktype == libc::SOCK_DGRAM {
                    4
                } else {
                    IBV_QPT_RC_
                };
                r.ai_port_space = if h.ai_port_space != 0 {
                    h.ai_port_space
                } else if a.ai_protocol == libc::IPPROTO_UDP {
                    RDMA_PS_UDP
                } else {
                    RDMA_PS_TCP
                };
                r.ai_family = a.ai_family;
                // SAFETY: the answer's address of its length.
                let copy = unsafe { copy_addr(a.ai_addr, a.ai_addrlen) };
                let passive = ai.ai_flags & libc::AI_PASSIVE != 0 && !hints.is_null();
                let rc = copy.map(|p| {
                    if passive {
                        r.ai_flags = RAI_PASSIVE;
                        r.ai_src_addr = p;
                        r.ai_src_len = a.ai_addrlen;
                    } else {
                        r.ai_dst_addr = p;
                        r.ai_dst_len = a.ai_addrlen;
                    }
                });
                // SAFETY: the list getaddrinfo returned.
                unsafe { libc::freeaddrinfo(out) };
                rc?;
            } else {
                r.ai_flags = h.ai_flags;
                r.ai_family = h.ai_family;
                r.ai_qp_type = h.ai_qp_type;
                r.ai_port_space = h.ai_port_space;
                if h.ai_dst_len != 0 {
                    // SAFETY: the hints' destination of its length.
                    r.ai_dst_addr = unsafe { copy_addr(h.ai_dst_addr, h.ai_dst_len) }?;
                    r.ai_dst_len = h.ai_dst_len;
                }
            }
            if r.ai_src_len == 0 && h.ai_src_len != 0 {
                // SAFETY: the hints' source of its length.
                r.ai_src_addr = unsafe { copy_addr(h.ai_src_addr, h.ai_src_len) }?;
                r.ai_src_len = h.ai_src_len;
            }
            Ok(())
        })();
        match rc {
            Ok(()) => {
                // SAFETY: the caller's out-pointer (checked non-NULL).
                unsafe { *res = rai };
                0
            }
            Err(e) => {
                // SAFETY: ours, allocated above.
                unsafe { rdma_freeaddrinfo(rai) };
                if e == libc::ENOMEM {
                    set_errno(e);
                    -1
                } else {
                    e
                }
            }
        }
    })
}

const IBV_QPT_RC_: c_int = crate::abi::IBV_QPT_RC;

#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut cur = res;
    while !cur.is_null() {
        // SAFETY: a list from rdma_getaddrinfo: every pointer in it malloc'd
        // (or NULL).
        unsafe {
            let r = &*cur;
            let next = r.ai_next;
            for p in [
                r.ai_connect,
                r.ai_route,
                r.ai_src_canonname as *mut c_void,
                r.ai_dst_canonname as *mut c_void,
                r.ai_src_addr as *mut c_void,
                r.ai_dst_addr as *mut c_void,
            ] {
                libc::free(p);
            }
            libc::free(cur as *mut c_void);
            cur = next;
        }
    }
}
