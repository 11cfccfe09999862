//! rsockets, which are not offered: every call fails with `ENOSYS` except
//! `rpoll` and `rselect`, which are `poll` and `select` (the rdma_cm
//! examples import them through shared code and use them on ordinary
//! descriptors, rdma_cm event channels included). Also the rdma_cm calls
//! no target program needs (multicast, ECE): they fail as rdma-core's do
//! on a device without them.

use crate::ffi::set_errno;
use libc::c_int;

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

minus1_enosys!(
    rdma_get_remote_ece,
    rdma_join_multicast,
    rdma_join_multicast_ex,
    rdma_leave_multicast,
    rdma_set_local_ece,
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
