//! Stand-ins for the vendor libraries `libmlx5.so.1` and `libefa.so.1`.
//!
//! perftest, libfabric and UCX link these directly, and everything Debian
//! builds is bound at load time (`BIND_NOW`), so every symbol they import
//! must exist with its version even though no ndverbs device is an mlx5 or
//! EFA device and the calls are never made on their paths. (The real
//! libraries cannot be used: they need libibverbs' private provider ABI.)
//! Each call says "not supported": objects come back NULL with `errno`
//! `EOPNOTSUPP`, status calls return `EOPNOTSUPP`, `mlx5dv_is_supported`
//! returns false. Arguments are not looked at, so they are not declared
//! (the C calling convention lets a function ignore its arguments).

use libc::{c_int, c_void};

/// Defines exported functions that fail with NULL and `errno = EOPNOTSUPP`.
macro_rules! null_with_eopnotsupp {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> *mut c_void {
            crate::ffi::set_errno(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    )*};
}

/// Defines exported functions that return `EOPNOTSUPP`.
macro_rules! eopnotsupp {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            crate::ffi::set_errno(libc::EOPNOTSUPP);
            libc::EOPNOTSUPP
        }
    )*};
}

null_with_eopnotsupp!(
    mlx5dv_open_device,
    mlx5dv_create_cq,
    mlx5dv_create_qp,
    mlx5dv_devx_obj_create,
    mlx5dv_devx_alloc_uar,
    mlx5dv_devx_umem_reg,
    mlx5dv_create_mkey,
    mlx5dv_qp_ex_from_ibv_qp_ex,
    mlx5dv_devx_create_event_channel,
    mlx5dv_dek_create,
    efadv_create_qp_ex,
    efadv_create_cq,
    efadv_cq_from_ibv_cq_ex,
);

eopnotsupp!(
    mlx5dv_init_obj,
    mlx5dv_devx_general_cmd,
    mlx5dv_devx_obj_destroy,
    mlx5dv_devx_obj_modify,
    mlx5dv_devx_obj_query,
    mlx5dv_devx_umem_dereg,
    mlx5dv_devx_qp_modify,
    mlx5dv_devx_qp_query,
    mlx5dv_destroy_mkey,
    mlx5dv_devx_subscribe_devx_event,
    mlx5dv_crypto_login,
    mlx5dv_dek_destroy,
    efadv_query_device,
    efadv_query_ah,
);

/// No device here is an mlx5 device.
#[no_mangle]
pub extern "C" fn mlx5dv_is_supported() -> bool {
    false
}

#[no_mangle]
pub extern "C" fn mlx5dv_devx_get_event() -> isize {
    crate::ffi::set_errno(libc::EOPNOTSUPP);
    -1
}

#[no_mangle]
pub extern "C" fn mlx5dv_devx_free_uar() {}

#[no_mangle]
pub extern "C" fn mlx5dv_devx_destroy_event_channel() {}
