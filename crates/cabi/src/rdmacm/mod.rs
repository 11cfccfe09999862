//! librdmacm over verbs' endpoints: the `rdma_*` calls of rdma-core 44's
//! `librdmacm.so.1`, in this same object (`librdmacm.so.1` is a link to
//! `libibverbs.so.1`), using its contexts, PDs, CQs and QPs directly.
//!
//! The kernel's rdma_cm is replaced by verbs' [`Endpoint`]s, which speak
//! the IB CM on QP1 with rdma_cm's service IDs and private-data header, so
//! the peer may be another program over this library, ndv's tools or Linux
//! (rxe and its rdma_cm). What the kernel would report through
//! `/dev/infiniband/rdma_cm` comes from the endpoint requests' endings.
//!
//! | area | module |
//! |---|---|
//! | the structures, laid out to the byte | `abi` |
//! | event channels, events, acknowledgements | `channel` |
//! | ids: create, destroy, migrate, options, synchronous ids | `id` |
//! | devices, their contexts and default PDs | `devices` |
//! | binding, address and route resolution, ports | `addr` |
//! | listen, connect, accept, reject, disconnect and their events | `conn` |
//! | QPs and SRQs on ids, `rdma_init_qp_attr` | `qp` |
//! | `rdma_create_ep`, `rdma_get_request` | `ep` |
//! | `rdma_getaddrinfo` | `addrinfo` |
//! | UD ids (`RDMA_PS_UDP`): SIDR instead of a connection | `ud` |
//! | the thread that turns ending requests into events | `watch` |
//! | rsockets, multicast and ECE (not offered) | `rsocket` |
//!
//! Ids use the TCP port space and RC QPs, or the UDP port space and UD QPs
//! (`ud`); `RDMA_PS_IPOIB`, multicast, ECE and rsockets are not offered. Every call checks its id,
//! channel or event against the live objects (`EINVAL` otherwise) and fails
//! with rdma-core's errno (`-1` and `errno`), never by crashing.
//!
//! [`Endpoint`]: ndverbs_verbs::Endpoint

pub(crate) mod abi;
mod addr;
mod addrinfo;
mod channel;
mod conn;
mod devices;
mod ep;
mod id;
mod qp;
mod rsocket;
mod ud;
mod watch;

use crate::ffi::cstr;
use libc::{c_char, c_int};
use std::ffi::CStr;

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
