//! The C structures and constants of rdma-core 44's `<infiniband/verbs.h>`
//! that cross the ABI, laid out as gcc lays them out on x86_64.
//!
//! Names are the C names, so a reader can hold this file against the header.
//! Only the fields this library reads or writes are named; the rest are
//! reserved bytes of the right size, so every struct has the C size and
//! every named field the C offset. The assertions at the end pin each size
//! and each offset that applications rely on to the values measured with
//! gcc against the Debian 12 headers (`reference/ibverbs-abi/
//! struct-layouts-x86_64.txt`): a layout mistake fails the build.
//!
//! Three facts shape everything else:
//!
//! * **The data path is inline in the application.** `ibv_post_send`,
//!   `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq` and
//!   `ibv_req_notify_cq` are `static inline` functions in `verbs.h` that load
//!   `obj->context->ops.<slot>` and call it. Every object therefore starts
//!   with its `context` pointer, and [`ibv_context_ops`] must hold our
//!   functions at the right offsets.
//! * **The extended context sits before the context.** `verbs_get_ctx()`
//!   steps back from the `struct ibv_context *` the application holds to a
//!   `struct verbs_context` that ends with it, provided `abi_compat` is
//!   `UINTPTR_MAX`; `sz` (just before the embedded context) says how many of
//!   its op slots, counted backwards from the end, exist.
//! * **Some values are in network byte order** (`__be64` GUIDs, `__be16`
//!   P_Keys, `__be32` immediate data): they are stored big-endian in memory.

#![allow(non_camel_case_types, missing_docs)]

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t};

/// `IBV_SYSFS_NAME_MAX`.
pub const NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const PATH_MAX: usize = 256;

// enum ibv_node_type / ibv_transport_type
pub const IBV_NODE_CA: c_int = 1;
pub const IBV_TRANSPORT_IB: c_int = 0;

// enum ibv_port_state, link layer, enum ibv_mtu
pub const IBV_PORT_DOWN: c_int = 1;
pub const IBV_PORT_ACTIVE: c_int = 4;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
pub const IBV_MTU_4096: c_int = 5;

// enum ibv_atomic_cap
pub const IBV_ATOMIC_HCA: c_int = 1;

// enum ibv_device_cap_flags
pub const IBV_DEVICE_SYS_IMAGE_GUID: c_uint = 1 << 11;
pub const IBV_DEVICE_RC_RNR_NAK_GEN: c_uint = 1 << 12;

// enum ibv_port_cap_flags
pub const IBV_PORT_CM_SUP: u32 = 1 << 16;

// enum ibv_gid_type (ibv_gid_entry) and the sysfs flavour ibv_query_gid_type uses
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: c_int = 1;

// enum ibv_access_flags
pub const IBV_ACCESS_LOCAL_WRITE: c_uint = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_uint = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: c_uint = 1 << 2;
pub const IBV_ACCESS_REMOTE_ATOMIC: c_uint = 1 << 3;
pub const IBV_ACCESS_MW_BIND: c_uint = 1 << 4;
pub const IBV_ACCESS_ZERO_BASED: c_uint = 1 << 5;
pub const IBV_ACCESS_ON_DEMAND: c_uint = 1 << 6;
pub const IBV_ACCESS_HUGETLB: c_uint = 1 << 7;
/// `IBV_ACCESS_OPTIONAL_RANGE`: hints a device may ignore (relaxed ordering is
/// the first).
pub const IBV_ACCESS_OPTIONAL_RANGE: c_uint = 0x3ff0_0000;

// enum ibv_qp_type
pub const IBV_QPT_RC: c_int = 2;
pub const IBV_QPT_UD: c_int = 4;

// enum ibv_qp_attr_mask (the bits verbs' AttrMask does not have)
pub const IBV_QP_STATE: c_int = 1;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_CUR_STATE: c_int = 1 << 1;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_QKEY: c_int = 1 << 6;
/// `IBV_QP_RATE_LIMIT`, the highest bit ibverbs defines.
pub const IBV_QP_RATE_LIMIT: c_int = 1 << 25;

// enum ibv_wr_opcode
pub const IBV_WR_RDMA_WRITE: c_int = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_int = 1;
pub const IBV_WR_SEND: c_int = 2;
pub const IBV_WR_SEND_WITH_IMM: c_int = 3;
pub const IBV_WR_RDMA_READ: c_int = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: c_int = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: c_int = 6;
pub const IBV_WR_SEND_WITH_INV: c_int = 9;

// enum ibv_send_flags
pub const IBV_SEND_FENCE: c_uint = 1;
pub const IBV_SEND_SIGNALED: c_uint = 1 << 1;
pub const IBV_SEND_SOLICITED: c_uint = 1 << 2;
pub const IBV_SEND_INLINE: c_uint = 1 << 3;
pub const IBV_SEND_IP_CSUM: c_uint = 1 << 4;

// enum ibv_wc_opcode, enum ibv_wc_flags
pub const IBV_WC_SEND: c_int = 0;
pub const IBV_WC_RDMA_WRITE: c_int = 1;
pub const IBV_WC_RDMA_READ: c_int = 2;
pub const IBV_WC_COMP_SWAP: c_int = 3;
pub const IBV_WC_FETCH_ADD: c_int = 4;
pub const IBV_WC_RECV: c_int = 1 << 7;
pub const IBV_WC_RECV_RDMA_WITH_IMM: c_int = (1 << 7) + 1;
pub const IBV_WC_GRH: c_uint = 1;
pub const IBV_WC_WITH_IMM: c_uint = 1 << 1;
pub const IBV_WC_WITH_INV: c_uint = 1 << 3;

// enum ibv_srq_attr_mask
pub const IBV_SRQ_MAX_WR: c_int = 1;
pub const IBV_SRQ_LIMIT: c_int = 1 << 1;

// enum ibv_fork_status
pub const IBV_FORK_UNNEEDED: c_int = 2;

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` value that makes
/// `verbs_get_ctx()` find the extended context.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// `union ibv_gid`: 16 raw bytes, 8-byte aligned (its other member is two
/// `__be64`), which places every struct that embeds one.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

#[repr(C)]
pub struct ibv_device {
    pub _ops: [*mut c_void; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; NAME_MAX],
    pub dev_name: [c_char; NAME_MAX],
    pub dev_path: [c_char; PATH_MAX],
    pub ibdev_path: [c_char; PATH_MAX],
}

/// A provider op slot whose type only binaries built against libibverbs ≤ 1.1.8
/// knew; Debian 12 programs never call these.
pub type CompatFn = Option<unsafe extern "C" fn() -> *mut c_void>;

pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
pub type CompatQueryDeviceFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
pub type CompatQueryPortFn = unsafe extern "C" fn(*mut ibv_context, u8, *mut c_void) -> c_int;
pub type QueryPortExFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
pub type QueryDeviceExFn =
    unsafe extern "C" fn(*mut ibv_context, *const c_void, *mut ibv_device_attr_ex, usize) -> c_int;

/// `struct ibv_context_ops`: 32 slots. The named ones are what the inline
/// functions of `verbs.h` call; `alloc_mw` NULL makes `ibv_alloc_mw` fail
/// with `EOPNOTSUPP` (the inline checks it), `bind_mw`/`dealloc_mw` are
/// reachable only through a window.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: Option<CompatQueryDeviceFn>,
    pub _compat_query_port: Option<CompatQueryPortFn>,
    pub _compat_alloc_pd: CompatFn,
    pub _compat_dealloc_pd: CompatFn,
    pub _compat_reg_mr: CompatFn,
    pub _compat_rereg_mr: CompatFn,
    pub _compat_dereg_mr: CompatFn,
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, c_int) -> *mut c_void>,
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut c_void, *mut c_void) -> c_int>,
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    pub _compat_create_cq: CompatFn,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    pub _compat_cq_event: CompatFn,
    pub _compat_resize_cq: CompatFn,
    pub _compat_destroy_cq: CompatFn,
    pub _compat_create_srq: CompatFn,
    pub _compat_modify_srq: CompatFn,
    pub _compat_query_srq: CompatFn,
    pub _compat_destroy_srq: CompatFn,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_create_qp: CompatFn,
    pub _compat_query_qp: CompatFn,
    pub _compat_modify_qp: CompatFn,
    pub _compat_destroy_qp: CompatFn,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: CompatFn,
    pub _compat_destroy_ah: CompatFn,
    pub _compat_attach_mcast: CompatFn,
    pub _compat_detach_mcast: CompatFn,
    pub _compat_async_event: CompatFn,
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

pub type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
pub type CreateQpExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *mut crate::rdmacm::abi::ibv_qp_init_attr_ex,
) -> *mut ibv_qp;

/// `struct verbs_context`: op slots that grow towards lower addresses, then
/// `sz` and the `ibv_context` applications hold. `query_port`,
/// `create_cq_ex`, `query_device_ex` and `create_qp_ex` are filled; every
/// other slot stays NULL, which the inlines of `verbs.h` turn into
/// `EOPNOTSUPP` or a fallback.
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<QueryPortExFn>,
    /// `advise_mr` … `query_rt_values`.
    pub _ops_before_cq_ex: [usize; 24],
    pub create_cq_ex: Option<CreateCqExFn>,
    pub priv_: *mut c_void,
    pub query_device_ex: Option<QueryDeviceExFn>,
    /// `ibv_destroy_flow` … `open_qp`.
    pub _ops_before_qp_ex: [usize; 5],
    pub create_qp_ex: Option<CreateQpExFn>,
    /// `get_srq_num` … `_ABI_placeholder3`.
    pub _ops_after: [usize; 5],
    pub sz: usize,
    pub context: ibv_context,
}

#[repr(C)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    /// `__be64`.
    pub node_guid: u64,
    /// `__be64`.
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_device_attr_ex`: the classic attributes, then capabilities
/// (ODP, timestamps, TSO, RSS, …) that ndverbs reports as absent (zero).
#[repr(C)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    /// `odp_caps`, `completion_timestamp_mask`, `hca_core_clock`.
    pub _odp_and_clock: [u32; 11],
    pub device_cap_flags_ex: u64,
    /// `tso_caps` … `xrc_odp_caps`.
    pub _caps: [u8; 108],
    /// The port count when it exceeds `orig_attr.phys_port_cnt`'s byte;
    /// equal to it otherwise.
    pub phys_port_cnt_ex: u32,
}

#[repr(C)]
pub struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// The port attributes as libibverbs ≤ 1.1 knew them: `struct ibv_port_attr`
/// without `port_cap_flags2`, which is what the exported `ibv_query_port`
/// may write (the `verbs.h` macro passes it a current struct, cleared).
pub const COMPAT_PORT_ATTR_LEN: usize = 48;

#[repr(C)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// `struct ibv_grh`: the 40 bytes a UD receive finds before its data.
#[repr(C)]
pub struct ibv_grh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

#[repr(C)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

pub type QpExFn = unsafe extern "C" fn(*mut ibv_qp_ex);

/// `struct ibv_qp_ex`: a QP with the `ibv_wr_*` post API. Every QP is
/// allocated this large; `ibv_qp_to_qp_ex` returns it only for a QP created
/// with `ibv_create_qp_ex` (`qp_ex`), as rdma-core does for a QP its
/// provider did not create extended. The `wr_*` slots are called by
/// `verbs.h` inlines without a NULL check.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    pub wr_bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u32, *const c_void)>,
    pub wr_local_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_send: Option<QpExFn>,
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_tso: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u16, u16)>,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize)>,
    pub wr_set_inline_data_list:
        Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge)>,
    pub wr_start: Option<QpExFn>,
    pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
    pub wr_abort: Option<QpExFn>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void)>,
}

// enum ibv_qp_init_attr_mask (`IBV_QP_INIT_ATTR_PD` and
// `struct ibv_qp_init_attr_ex` are librdmacm's too: `rdmacm::abi`)
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

// enum ibv_qp_create_send_ops_flags
pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1;
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
pub const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
pub const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
pub const IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;

/// `struct ibv_data_buf`: one buffer of `ibv_wr_set_inline_data_list`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

// enum ibv_create_cq_wc_flags
pub const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1;
pub const IBV_WC_EX_WITH_IMM: u64 = 1 << 1;
pub const IBV_WC_EX_WITH_QP_NUM: u64 = 1 << 2;
pub const IBV_WC_EX_WITH_SRC_QP: u64 = 1 << 3;
pub const IBV_WC_EX_WITH_SLID: u64 = 1 << 4;
pub const IBV_WC_EX_WITH_SL: u64 = 1 << 5;
pub const IBV_WC_EX_WITH_DLID_PATH_BITS: u64 = 1 << 6;
/// `IBV_WC_STANDARD_FLAGS`: the seven above.
pub const IBV_WC_STANDARD_FLAGS: u64 = (1 << 7) - 1;

// enum ibv_cq_init_attr_mask, enum ibv_create_cq_attr_flags
pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1;
pub const IBV_CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_cq_ex`: an `ibv_cq`, then the current completion's status
/// and `wr_id` (read by applications as fields) and the polling functions
/// (called by `verbs.h` inlines without a NULL check). Every CQ is
/// allocated this large; the tail is filled for CQs made by
/// `ibv_create_cq_ex` (`cq_ex`).
#[repr(C)]
pub struct ibv_cq_ex {
    pub cq: ibv_cq,
    pub comp_mask: u32,
    pub status: c_int,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut c_void) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex)>,
    pub read_opcode: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
    pub read_vendor_err: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_imm_data: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_qp_num: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_uint>,
    pub read_slid: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u8>,
    /// `read_completion_ts` … `read_completion_wallclock_ns`: capabilities
    /// ndverbs refuses at creation (timestamps, VLANs, flow tags, tag
    /// matching), so NULL as in rxe.
    pub _read_unsupported: [usize; 5],
}

#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// The `wr.ud` member of `struct ibv_send_wr`: where a UD send goes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: wr_rdma,
    pub atomic: wr_atomic,
    pub ud: wr_ud,
}

#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    /// `imm_data` (`__be32`) or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    pub qp_type: u32,
    /// `bind_mw` / `tso`.
    pub _tail: [u64; 6],
}

#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` (`__be32`) or `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
pub struct ibv_async_event {
    /// A `struct ibv_cq/qp/srq/wq *` or a port number, by event type.
    pub element: *mut c_void,
    pub event_type: c_int,
}

#[repr(C)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// The layout facts applications rely on, as gcc computes them for rdma-core
/// 44's headers on x86_64 (`struct-layouts-x86_64.txt`).
mod layout {
    use super::*;
    use std::mem::{offset_of, size_of};

    macro_rules! check {
        ($t:ty, $size:expr $(, $field:ident @ $off:expr)*) => {
            const _: () = assert!(size_of::<$t>() == $size);
            $(const _: () = assert!(offset_of!($t, $field) == $off);)*
        };
    }

    check!(ibv_device, 664, node_type @ 16, transport_type @ 20, name @ 24, dev_name @ 88,
        dev_path @ 152, ibdev_path @ 408);
    check!(ibv_context_ops, 256, alloc_mw @ 56, bind_mw @ 64, dealloc_mw @ 72, poll_cq @ 88,
        req_notify_cq @ 96, post_srq_recv @ 160, post_send @ 200, post_recv @ 208);
    check!(ibv_context, 328, device @ 0, ops @ 8, cmd_fd @ 264, async_fd @ 268,
        num_comp_vectors @ 272, mutex @ 280, abi_compat @ 320);
    check!(verbs_context, 648, query_port @ 0, create_cq_ex @ 200, priv_ @ 208,
        query_device_ex @ 216, create_qp_ex @ 264, sz @ 312, context @ 320);
    check!(ibv_pd, 16);
    check!(ibv_mr, 48, lkey @ 36, rkey @ 40);
    check!(ibv_ah, 24);
    check!(ibv_comp_channel, 16, fd @ 8, refcnt @ 12);
    check!(ibv_cq, 128, context @ 0, channel @ 8, cq_context @ 16, handle @ 24, cqe @ 28,
        mutex @ 32, cond @ 72, comp_events_completed @ 120, async_events_completed @ 124);
    check!(ibv_qp, 160, handle @ 48, qp_num @ 52, state @ 56, qp_type @ 60, mutex @ 64,
        events_completed @ 152);
    check!(ibv_qp_ex, 352, comp_mask @ 160, wr_id @ 168, wr_flags @ 176,
        wr_atomic_cmp_swp @ 184, wr_send @ 240, wr_set_inline_data @ 288, wr_set_sge @ 304,
        wr_start @ 320, wr_complete @ 328, wr_abort @ 336, wr_atomic_write @ 344);
    check!(ibv_cq_init_attr_ex, 56, cq_context @ 8, channel @ 16, comp_vector @ 24,
        wc_flags @ 32, comp_mask @ 40, flags @ 44, parent_domain @ 48);
    check!(ibv_cq_ex, 288, comp_mask @ 128, status @ 132, wr_id @ 136, start_poll @ 144,
        read_dlid_path_bits @ 240, _read_unsupported @ 248);
    check!(ibv_data_buf, 16);
    check!(ibv_srq, 128);
    check!(ibv_wc, 48, wr_id @ 0, status @ 8, opcode @ 12, vendor_err @ 16, byte_len @ 20,
        imm_data @ 24, qp_num @ 28, src_qp @ 32, wc_flags @ 36, pkey_index @ 40, slid @ 42,
        sl @ 44, dlid_path_bits @ 45);
    check!(ibv_sge, 16);
    check!(ibv_send_wr, 128, wr_id @ 0, next @ 8, sg_list @ 16, num_sge @ 24, opcode @ 28,
        send_flags @ 32, imm_data @ 36, wr @ 40, qp_type @ 72, _tail @ 80);
    check!(wr_ud, 16, ah @ 0, remote_qpn @ 8, remote_qkey @ 12);
    check!(ibv_recv_wr, 32);
    check!(ibv_qp_attr, 144, ah_attr @ 56, pkey_index @ 120, max_rd_atomic @ 126,
        port_num @ 129, timeout @ 130, rate_limit @ 136);
    check!(ibv_qp_init_attr, 64, cap @ 32, qp_type @ 52, sq_sig_all @ 56);
    check!(ibv_ah_attr, 32, dlid @ 24, is_global @ 29, port_num @ 30);
    check!(ibv_global_route, 24);
    check!(ibv_port_attr, 52, port_cap_flags2 @ 48);
    check!(ibv_device_attr, 232, node_guid @ 64, max_pkeys @ 224, phys_port_cnt @ 227);
    check!(ibv_device_attr_ex, 400, comp_mask @ 232, device_cap_flags_ex @ 280, phys_port_cnt_ex @ 396);
    check!(ibv_async_event, 16);
    check!(ibv_gid_entry, 32);
    check!(ibv_gid, 16);
    check!(ibv_srq_init_attr, 24);
    check!(ibv_grh, 40);
}
