//! The rest of libibverbs' exports: enum names, rate conversions, sysfs
//! helpers, fork support, and the calls that need kernel objects ndverbs
//! does not have (import/export of objects between processes, ECE), which
//! fail as rdma-core does without kernel support.
//!
//! The strings are rdma-core 44's, byte for byte (programs print them).

use crate::abi::*;
use crate::ffi::{self, cstr};
use libc::{c_char, c_int, c_void};
use std::ffi::CStr;

const WC_STATUS: [&CStr; 24] = [
    c"success",
    c"local length error",
    c"local QP operation error",
    c"local EE context operation error",
    c"local protection error",
    c"Work Request Flushed Error",
    c"memory management operation error",
    c"bad response error",
    c"local access error",
    c"remote invalid request error",
    c"remote access error",
    c"remote operation error",
    c"transport retry counter exceeded",
    c"RNR retry counter exceeded",
    c"local RDD violation error",
    c"remote invalid RD request",
    c"aborted error",
    c"invalid EE context number",
    c"invalid EE context state",
    c"fatal error",
    c"response timeout error",
    c"general error",
    c"TM error",
    c"TM software rendezvous",
];

const EVENT_TYPE: [&CStr; 20] = [
    c"CQ error",
    c"local work queue catastrophic error",
    c"invalid request local work queue error",
    c"local access violation work queue error",
    c"communication established",
    c"send queue drained",
    c"path migrated",
    c"path migration request error",
    c"local catastrophic error",
    c"port active",
    c"port error",
    c"LID change",
    c"P_Key change",
    c"SM change",
    c"SRQ catastrophic error",
    c"SRQ limit reached",
    c"last WQE reached",
    c"client reregistration",
    c"GID table change",
    c"WQ fatal",
];

const NODE_TYPE: [&CStr; 7] = [
    c"InfiniBand channel adapter",
    c"InfiniBand switch",
    c"InfiniBand router",
    c"iWARP NIC",
    c"usNIC",
    c"usNIC UDP",
    c"unspecified",
];

const PORT_STATE: [&CStr; 6] = [
    c"no state change (NOP)",
    c"down",
    c"init",
    c"armed",
    c"active",
    c"active defer",
];

fn name_of(table: &[&'static CStr], i: c_int, offset: c_int) -> *const c_char {
    usize::try_from(i - offset)
        .ok()
        .and_then(|i| table.get(i))
        .map_or(cstr(c"unknown"), |s| cstr(s))
}

#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    name_of(&WC_STATUS, status, 0)
}

#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    name_of(&EVENT_TYPE, event, 0)
}

#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    name_of(&NODE_TYPE, node_type, 1)
}

#[no_mangle]
pub extern "C" fn ibv_port_state_str(port_state: c_int) -> *const c_char {
    name_of(&PORT_STATE, port_state, 0)
}

/// `enum ibv_rate` → (multiple of 2.5 Gb/s or -1, Mb/s).
const RATES: [(c_int, c_int); 22] = [
    (-1, -1),
    (-1, -1),
    (1, 2500),
    (4, 10000),
    (12, 30000),
    (2, 5000),
    (8, 20000),
    (16, 40000),
    (24, 60000),
    (32, 80000),
    (48, 120000),
    (-1, 14062),
    (-1, 56250),
    (-1, 112500),
    (-1, 168750),
    (-1, 25781),
    (-1, 103125),
    (-1, 206250),
    (-1, 309375),
    (11, 28125),
    (20, 53125),
    (160, 425000),
];

fn rate(r: c_int) -> (c_int, c_int) {
    usize::try_from(r)
        .ok()
        .and_then(|i| RATES.get(i))
        .copied()
        .unwrap_or((-1, -1))
}

#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(r: c_int) -> c_int {
    rate(r).0
}

#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(r: c_int) -> c_int {
    rate(r).1
}

/// The rate whose value in `column` is `v`; `IBV_RATE_MAX` (0) if none.
fn rate_of(v: c_int, column: impl Fn((c_int, c_int)) -> c_int) -> c_int {
    if v <= 0 {
        return 0;
    }
    RATES
        .iter()
        .position(|r| column(*r) == v)
        .map_or(0, |i| i as c_int)
}

#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    rate_of(mult, |r| r.0)
}

#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    rate_of(mbps, |r| r.1)
}

/// `SYSFS_PATH` if set (as rdma-core honours it), else `/sys`.
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    static PATH: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let p = std::env::var("SYSFS_PATH").unwrap_or_else(|_| "/sys".into());
        let p = p.trim_end_matches('/');
        std::ffi::CString::new(if p.is_empty() { "/sys" } else { p }).unwrap_or_default()
    })
    .as_ptr()
}

/// Reads `dir/file` into `buf` as rdma-core does: a trailing newline is
/// dropped and the text NUL-terminated; the length, or -1. The devices'
/// sysfs paths do not exist, so for them this is -1 (`ibv_devinfo` then
/// prints no board id).
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    ffi::guarded(-1, || {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            ffi::set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: NUL-terminated strings by the caller's contract.
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let path = format!("{}/{}", d.to_string_lossy(), f.to_string_lossy());
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) => {
                ffi::set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                return -1;
            }
        };
        let mut n = data.len().min(size);
        if n == 0 {
            return 0;
        }
        if data[n - 1] == b'\n' {
            n -= 1;
        } else if n == size {
            // It would have to be truncated to be terminated.
            ffi::set_errno(libc::EOVERFLOW);
            return -1;
        }
        // SAFETY: `buf` has `size` bytes; n < size leaves room for the NUL.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
        n as c_int
    })
}

/// Memory registered here is never pinned, so a child of `fork` cannot
/// lose it: fork support is not needed.
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    IBV_FORK_UNNEEDED
}

#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// A call that needs kernel objects: NULL with `errno` `EOPNOTSUPP`.
fn no_kernel_object<T>() -> *mut T {
    ffi::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

#[no_mangle]
pub extern "C" fn ibv_import_device(_cmd_fd: c_int) -> *mut ibv_context {
    no_kernel_object()
}

#[no_mangle]
pub extern "C" fn ibv_import_pd(_context: *mut ibv_context, _handle: u32) -> *mut ibv_pd {
    no_kernel_object()
}

#[no_mangle]
pub extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _handle: u32) -> *mut ibv_mr {
    no_kernel_object()
}

#[no_mangle]
pub extern "C" fn ibv_import_dm(_context: *mut ibv_context, _handle: u32) -> *mut c_void {
    no_kernel_object()
}

#[no_mangle]
pub extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {}

#[no_mangle]
pub extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {}

#[no_mangle]
pub extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

/// Enhanced connection establishment: no options to offer (`EOPNOTSUPP`,
/// as a provider without ECE).
#[no_mangle]
pub extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    libc::EOPNOTSUPP
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p: *const c_char) -> String {
        // SAFETY: our static strings.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    #[test]
    fn names_as_rdma_core() {
        assert_eq!(s(ibv_wc_status_str(5)), "Work Request Flushed Error");
        assert_eq!(s(ibv_wc_status_str(24)), "unknown");
        assert_eq!(s(ibv_wc_status_str(-1)), "unknown");
        assert_eq!(s(ibv_event_type_str(4)), "communication established");
        assert_eq!(s(ibv_node_type_str(1)), "InfiniBand channel adapter");
        assert_eq!(s(ibv_node_type_str(0)), "unknown");
        assert_eq!(s(ibv_port_state_str(4)), "active");
        assert_eq!((ibv_rate_to_mult(3), ibv_rate_to_mbps(3)), (4, 10000));
        assert_eq!((mult_to_ibv_rate(4), mbps_to_ibv_rate(10000)), (3, 3));
        assert_eq!((ibv_rate_to_mult(0), mult_to_ibv_rate(5)), (-1, 0));
    }
}
