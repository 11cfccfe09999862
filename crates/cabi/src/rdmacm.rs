//! librdmacm's exports, ahead of librdmacm itself.
//!
//! Programs that use libibverbs alone still load `librdmacm.so.1` when they
//! link it (perftest does, for `-R`), and load-time binding needs every
//! symbol they import. Until the connection manager is implemented over
//! verbs' endpoints, every `rdma_*` call fails as librdmacm does without a
//! kernel (`-1`, or NULL, with `errno` `ENOSYS`), `rdma_event_str` names
//! events, and the rsocket calls fail with `ENOSYS` except `rpoll` and
//! `rselect`, which are `poll` and `select` (the rdma_cm examples import
//! them through shared code and use them on ordinary descriptors).

use crate::ffi::{cstr, set_errno};
use libc::{c_char, c_int, c_void};
use std::ffi::CStr;

/// Defines exported functions that fail with -1 (also right for callers
/// that expect `ssize_t` or `off_t`: the whole register is -1) and
/// `errno = ENOSYS`; `void` callers ignore the value.
macro_rules! minus1_enosys {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> isize {
            set_errno(libc::ENOSYS);
            -1
        }
    )*};
}

/// Defines exported functions that fail with NULL and `errno = ENOSYS`.
macro_rules! null_enosys {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> *mut c_void {
            set_errno(libc::ENOSYS);
            std::ptr::null_mut()
        }
    )*};
}

minus1_enosys!(
    rdma_accept,
    rdma_ack_cm_event,
    rdma_bind_addr,
    rdma_connect,
    rdma_create_ep,
    rdma_create_id,
    rdma_create_qp,
    rdma_create_qp_ex,
    rdma_create_srq,
    rdma_create_srq_ex,
    rdma_destroy_id,
    rdma_disconnect,
    rdma_establish,
    rdma_get_cm_event,
    rdma_get_remote_ece,
    rdma_get_request,
    rdma_getaddrinfo,
    rdma_init_qp_attr,
    rdma_join_multicast,
    rdma_join_multicast_ex,
    rdma_leave_multicast,
    rdma_listen,
    rdma_migrate_id,
    rdma_notify,
    rdma_reject,
    rdma_reject_ece,
    rdma_resolve_addr,
    rdma_resolve_route,
    rdma_set_local_ece,
    rdma_set_option,
    raccept,
    rbind,
    rclose,
    rconnect,
    rfcntl,
    rgetpeername,
    rgetsockname,
    rgetsockopt,
    riomap,
    riounmap,
    riowrite,
    rlisten,
    rread,
    rreadv,
    rrecv,
    rrecvfrom,
    rrecvmsg,
    rsend,
    rsendmsg,
    rsendto,
    rsetsockopt,
    rshutdown,
    rsocket,
    rwrite,
    rwritev,
);

null_enosys!(rdma_create_event_channel, rdma_get_devices);

#[no_mangle]
pub extern "C" fn rdma_destroy_event_channel(_channel: *mut c_void) {}

#[no_mangle]
pub extern "C" fn rdma_destroy_qp(_id: *mut c_void) {}

#[no_mangle]
pub extern "C" fn rdma_destroy_srq(_id: *mut c_void) {}

#[no_mangle]
pub extern "C" fn rdma_destroy_ep(_id: *mut c_void) {}

#[no_mangle]
pub extern "C" fn rdma_free_devices(_list: *mut *mut c_void) {}

#[no_mangle]
pub extern "C" fn rdma_freeaddrinfo(_res: *mut c_void) {}

#[no_mangle]
pub extern "C" fn rdma_get_src_port(_id: *mut c_void) -> u16 {
    0
}

#[no_mangle]
pub extern "C" fn rdma_get_dst_port(_id: *mut c_void) -> u16 {
    0
}

const EVENTS: [&CStr; 16] = [
    c"RDMA_CM_EVENT_ADDR_RESOLVED",
    c"RDMA_CM_EVENT_ADDR_ERROR",
    c"RDMA_CM_EVENT_ROUTE_RESOLVED",
    c"RDMA_CM_EVENT_ROUTE_ERROR",
    c"RDMA_CM_EVENT_CONNECT_REQUEST",
    c"RDMA_CM_EVENT_CONNECT_RESPONSE",
    c"RDMA_CM_EVENT_CONNECT_ERROR",
    c"RDMA_CM_EVENT_UNREACHABLE",
    c"RDMA_CM_EVENT_REJECTED",
    c"RDMA_CM_EVENT_ESTABLISHED",
    c"RDMA_CM_EVENT_DISCONNECTED",
    c"RDMA_CM_EVENT_DEVICE_REMOVAL",
    c"RDMA_CM_EVENT_MULTICAST_JOIN",
    c"RDMA_CM_EVENT_MULTICAST_ERROR",
    c"RDMA_CM_EVENT_ADDR_CHANGE",
    c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
];

#[no_mangle]
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    usize::try_from(event)
        .ok()
        .and_then(|i| EVENTS.get(i))
        .map_or(cstr(c"UNKNOWN EVENT"), |s| cstr(s))
}

#[no_mangle]
pub unsafe extern "C" fn rpoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    // SAFETY: forwarded unchanged; the caller's contract is poll(2)'s.
    unsafe { libc::poll(fds, nfds, timeout) }
}

#[no_mangle]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    // SAFETY: forwarded unchanged; the caller's contract is select(2)'s.
    unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) }
}
