//! librdmacm's structures, laid out as gcc lays out rdma-core 44's
//! `rdma_cma.h` on x86_64 (`struct-layouts-x86_64.txt`): applications
//! read `rdma_cm_id` and `rdma_cm_event` fields directly, and
//! `rdma_get_local_addr`/`rdma_get_peer_addr` and all of `rdma_verbs.h`
//! are inlines over them. The assertions at the end fail the build on a
//! mistake.

#![allow(non_camel_case_types, missing_docs)]

use crate::abi::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_srq,
};
use libc::{c_char, c_int, c_void, sockaddr, sockaddr_storage, socklen_t};

pub const RDMA_PS_IPOIB: c_int = 0x0002;
pub const RDMA_PS_TCP: c_int = 0x0106;
pub const RDMA_PS_UDP: c_int = 0x0111;
pub const RDMA_PS_IB: c_int = 0x013F;
/// The Q_Key of every UD QP on a `RDMA_PS_UDP` id (`rdma_cma.h`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

pub const RDMA_MAX_RESP_RES: u8 = 0xff;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xff;

pub const RAI_PASSIVE: c_int = 1;
pub const RAI_NUMERICHOST: c_int = 2;

pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
pub const RDMA_OPTION_IB_PATH: c_int = 1;

/// `enum rdma_cm_event_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum EventType {
    AddrResolved = 0,
    AddrError = 1,
    RouteResolved = 2,
    ConnectRequest = 4,
    ConnectResponse = 5,
    ConnectError = 6,
    Unreachable = 7,
    Rejected = 8,
    Established = 9,
    Disconnected = 10,
    DeviceRemoval = 11,
    TimewaitExit = 15,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    pub pkey: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src: sockaddr_storage,
    pub dst: sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: c_int,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: c_int,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: socklen_t,
    pub ai_dst_len: socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// `struct ibv_qp_init_attr_ex` (its first fields are `ibv_qp_init_attr`'s,
/// with `comp_mask` in what is padding there).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: crate::abi::ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: [u64; 3],
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}
pub const IBV_QP_INIT_ATTR_PD: u32 = 1;

/// The layout facts applications rely on (`struct-layouts-x86_64.txt`).
mod layout {
    use super::*;
    use std::mem::{offset_of, size_of};

    macro_rules! check {
        ($t:ty, $size:expr $(, $field:ident @ $off:expr)*) => {
            const _: () = assert!(size_of::<$t>() == $size);
            $(const _: () = assert!(offset_of!($t, $field) == $off);)*
        };
    }

    check!(rdma_cm_id, 416, verbs @ 0, channel @ 8, context @ 16, qp @ 24, route @ 32,
        ps @ 344, port_num @ 348, event @ 352, send_cq_channel @ 360, send_cq @ 368,
        recv_cq_channel @ 376, recv_cq @ 384, srq @ 392, pd @ 400, qp_type @ 408);
    check!(rdma_route, 312, addr @ 0, path_rec @ 296, num_paths @ 304);
    check!(rdma_addr, 296, src @ 0, dst @ 128, ibaddr @ 256);
    check!(rdma_ib_addr, 40, sgid @ 0, dgid @ 16, pkey @ 32);
    check!(ibv_sa_path_rec, 64, dgid @ 0, sgid @ 16, dlid @ 32, raw_traffic @ 36,
        flow_label @ 40, hop_limit @ 44, reversible @ 48, numb_path @ 52, pkey @ 54, sl @ 56,
        mtu @ 58, rate @ 60, packet_life_time @ 62, preference @ 63);
    check!(rdma_cm_event, 80, id @ 0, listen_id @ 8, event @ 16, status @ 20, param @ 24);
    check!(rdma_conn_param, 24, private_data @ 0, private_data_len @ 8,
        responder_resources @ 9, initiator_depth @ 10, flow_control @ 11, retry_count @ 12,
        rnr_retry_count @ 13, srq @ 14, qp_num @ 16);
    check!(rdma_ud_param, 56, private_data_len @ 8, ah_attr @ 16, qp_num @ 48, qkey @ 52);
    check!(rdma_cm_event_param, 56);
    check!(rdma_event_channel, 4, fd @ 0);
    check!(rdma_addrinfo, 96, ai_flags @ 0, ai_family @ 4, ai_qp_type @ 8,
        ai_port_space @ 12, ai_src_len @ 16, ai_dst_len @ 20, ai_src_addr @ 24,
        ai_dst_addr @ 32, ai_src_canonname @ 40, ai_dst_canonname @ 48, ai_route_len @ 56,
        ai_route @ 64, ai_connect_len @ 72, ai_connect @ 80, ai_next @ 88);
    check!(ibv_qp_init_attr_ex, 136, cap @ 32, qp_type @ 52, comp_mask @ 60, pd @ 64, create_flags @ 80, source_qpn @ 120,
        send_ops_flags @ 128);
}
