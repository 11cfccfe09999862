//! Devices and contexts: `ibv_get_device_list` … `ibv_close_device`, and
//! the queries.
//!
//! The device list is verbs' [`Device::list`]: one device per local address,
//! `ndv0`, `ndv1`, … in address order, exactly what `ndv devinfo` prints.
//! Each device has one port (1), ACTIVE while its interface is running,
//! link layer Ethernet, active MTU from the interface MTU, a GID table of
//! one entry (the address, IPv4-mapped for IPv4, RoCE v2) and one P_Key
//! (0xffff). Vendor 0xffffff and part 0 are what rxe reports and what no
//! vendor-specific code path (perftest, libfabric, UCX) recognises.
//!
//! `struct ibv_device`s live as long as the process: a list may be freed
//! while a device from it is open, and a device is the same pointer in
//! every list while its name and address stay. A context is an extended
//! one (`struct verbs_context` with `abi_compat = UINTPTR_MAX`, `sz` 648)
//! with `query_port`, `query_device_ex`, `create_cq_ex` and `create_qp_ex`
//! filled, so the `verbs.h` macros and inlines take the current paths
//! (`cq_ex`, `qp_ex`); its `async_fd` is a pipe that
//! `ibv_get_async_event` reads.

use crate::abi::*;
use crate::events::AsyncEvents;
use crate::ffi::{self, lookup, put_cstr, ret_errno, ret_minus1, ret_ptr, Kind, Object};
use crate::nic::Nic;
use crate::{cq, qp, srq};
use libc::{c_char, c_int, c_void};
use ndverbs_verbs::{Device, DeviceInfo, LIMITS};
use std::cell::UnsafeCell;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};

/// A device: leaked on first sight, found again by name and address.
#[repr(C)]
pub(crate) struct Dev {
    pub_: UnsafeCell<ibv_device>,
    magic: u64,
    /// The device's `N` in `ndvN`.
    index: usize,
    pub(crate) addr: IpAddr,
    /// As of the last listing or query.
    info: Mutex<DeviceInfo>,
}

// SAFETY: the public struct is written only before the device is published;
// after that it is read-only, and `info` is behind a mutex.
unsafe impl Sync for Dev {}

// SAFETY: the public struct is the first field.
unsafe impl Object for Dev {
    const KIND: Kind = Kind::Device;
    const MAGIC: u64 = 0x6e64_7664_6576_0001;
    type Public = ibv_device;
    fn magic(&self) -> u64 {
        self.magic
    }
}

impl Dev {
    /// The interface's current state, refreshed from the host (the last
    /// one known if the address has gone: then the port reads DOWN).
    pub(crate) fn info(&self) -> DeviceInfo {
        let mut info = self.info.lock().unwrap_or_else(|e| e.into_inner());
        match Device::list() {
            Ok(list) => match list.into_iter().find(|d| d.addr == self.addr) {
                Some(now) => *info = now,
                None => info.link_up = false,
            },
            Err(_) => info.link_up = false,
        }
        info.clone()
    }
}

fn known_devices() -> &'static Mutex<Vec<&'static Dev>> {
    static D: OnceLock<Mutex<Vec<&'static Dev>>> = OnceLock::new();
    D.get_or_init(|| Mutex::new(Vec::new()))
}

/// The devices now, as `ibv_device` pointers (stable across calls).
fn current_devices() -> Result<Vec<*mut ibv_device>, c_int> {
    let list = Device::list().map_err(|e| e.errno())?;
    let mut known = known_devices().lock().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::with_capacity(list.len());
    for (index, info) in list.into_iter().enumerate() {
        let found = known
            .iter()
            .find(|d| d.index == index && d.addr == info.addr)
            .copied();
        let dev = match found {
            Some(d) => {
                *d.info.lock().unwrap_or_else(|e| e.into_inner()) = info;
                d
            }
            None => {
                let d = new_dev(index, info);
                known.push(d);
                d
            }
        };
        out.push(ffi::public(dev));
    }
    Ok(out)
}

/// The devices now: the objects `ibv_get_device_list` lists.
pub(crate) fn devices() -> Result<Vec<&'static Dev>, c_int> {
    current_devices()?
        .into_iter()
        .map(|p| lookup::<Dev>(p))
        .collect()
}

fn new_dev(index: usize, info: DeviceInfo) -> &'static Dev {
    // SAFETY: ibv_device is plain C data (integers, arrays, pointers), for
    // which all zeroes is a valid value.
    let mut d: ibv_device = unsafe { std::mem::zeroed() };
    d.node_type = IBV_NODE_CA;
    d.transport_type = IBV_TRANSPORT_IB;
    put_cstr(&mut d.name, &info.name);
    put_cstr(&mut d.dev_name, &format!("uverbs{index}"));
    put_cstr(
        &mut d.dev_path,
        &format!("/sys/class/infiniband_verbs/uverbs{index}"),
    );
    put_cstr(
        &mut d.ibdev_path,
        &format!("/sys/class/infiniband/{}", info.name),
    );
    let (dev, _) = ffi::publish(Dev {
        pub_: UnsafeCell::new(d),
        magic: Dev::MAGIC,
        index,
        addr: info.addr,
        info: Mutex::new(info),
    });
    dev
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    // malloc'd, so ibv_free_device_list frees what C allocated.
    ffi::c_list(num_devices, current_devices)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: the list came from ibv_get_device_list (calloc) or is NULL.
    unsafe { libc::free(list as *mut c_void) };
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    match lookup::<Dev>(device) {
        // SAFETY: a live device's public struct; `name` never changes.
        Ok(d) => unsafe { (*d.pub_.get()).name.as_ptr() },
        Err(e) => {
            ffi::set_errno(e);
            std::ptr::null()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    match lookup::<Dev>(device) {
        Ok(d) => ndverbs_verbs::node_guid(d.addr).to_be(),
        Err(e) => {
            ffi::set_errno(e);
            0
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    lookup::<Dev>(device).map_or(-1, |d| d.index as c_int)
}

/// A context: the extended context the application holds the inner
/// `ibv_context` of, then our state.
#[repr(C)]
pub(crate) struct Ctx {
    pub_: UnsafeCell<verbs_context>,
    magic: u64,
    pub(crate) dev: &'static Dev,
    nic: Mutex<Option<Arc<Nic>>>,
    pub(crate) async_events: AsyncEvents,
    cmd_fd: c_int,
}

// SAFETY: the public struct is written by us only before publication (the
// application may write it, as C allows, through its own pointer); the rest
// is Sync.
unsafe impl Sync for Ctx {}

// SAFETY: the application holds `&pub_.context`, at offset 320 of `Ctx`
// (pub_ is the first field and `context` is at 320 of verbs_context).
unsafe impl Object for Ctx {
    const KIND: Kind = Kind::Context;
    const PUBLIC_OFFSET: usize = std::mem::offset_of!(verbs_context, context);
    const MAGIC: u64 = 0x6e64_7663_7478_0002;
    type Public = ibv_context;
    fn magic(&self) -> u64 {
        self.magic
    }
}

impl Ctx {
    /// The engine of the context's device, opened on first need.
    pub(crate) fn nic(&self) -> Result<Arc<Nic>, c_int> {
        let mut n = self.nic.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = &*n {
            return Ok(n.clone());
        }
        let nic = Nic::get(self.dev.addr)?;
        *n = Some(nic.clone());
        Ok(nic)
    }

    /// The engine if it is open (nothing to run otherwise).
    pub(crate) fn nic_if_open(&self) -> Option<Arc<Nic>> {
        self.nic.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The `struct ibv_context *` the application holds.
    pub(crate) fn public(&self) -> *mut ibv_context {
        ffi::public(self)
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.cmd_fd) };
    }
}

fn ops() -> ibv_context_ops {
    ibv_context_ops {
        _compat_query_device: Some(ibv_query_device),
        _compat_query_port: Some(compat_query_port),
        _compat_alloc_pd: Some(not_supported),
        _compat_dealloc_pd: Some(not_supported),
        _compat_reg_mr: Some(not_supported),
        _compat_rereg_mr: Some(not_supported),
        _compat_dereg_mr: Some(not_supported),
        alloc_mw: None,
        bind_mw: None,
        dealloc_mw: None,
        _compat_create_cq: Some(not_supported),
        poll_cq: Some(cq::poll_cq),
        req_notify_cq: Some(cq::req_notify_cq),
        _compat_cq_event: Some(not_supported),
        _compat_resize_cq: Some(not_supported),
        _compat_destroy_cq: Some(not_supported),
        _compat_create_srq: Some(not_supported),
        _compat_modify_srq: Some(not_supported),
        _compat_query_srq: Some(not_supported),
        _compat_destroy_srq: Some(not_supported),
        post_srq_recv: Some(srq::post_srq_recv),
        _compat_create_qp: Some(not_supported),
        _compat_query_qp: Some(not_supported),
        _compat_modify_qp: Some(not_supported),
        _compat_destroy_qp: Some(not_supported),
        post_send: Some(qp::post_send),
        post_recv: Some(qp::post_recv),
        _compat_create_ah: Some(not_supported),
        _compat_destroy_ah: Some(not_supported),
        _compat_attach_mcast: Some(not_supported),
        _compat_detach_mcast: Some(not_supported),
        _compat_async_event: Some(not_supported),
    }
}

/// What the `_compat_*` op slots hold: only binaries built against
/// libibverbs ≤ 1.1.8 call them.
unsafe extern "C" fn not_supported() -> *mut c_void {
    ffi::set_errno(libc::ENOSYS);
    std::ptr::null_mut()
}

unsafe extern "C" fn compat_query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut c_void,
) -> c_int {
    // SAFETY: forwarded with the caller's pointers.
    unsafe { ibv_query_port(ctx, port, attr as *mut ibv_port_attr) }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    ret_ptr(|| {
        let dev = lookup::<Dev>(device)?;
        let async_events = AsyncEvents::new()?;
        // cmd_fd is the uverbs device for rdma-core; an open descriptor
        // keeps programs that fstat or fcntl it working.
        // SAFETY: a NUL-terminated path; the descriptor is owned by the Ctx.
        let cmd_fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if cmd_fd < 0 {
            return Err(ffi::errno());
        }
        let context = ibv_context {
            device,
            ops: ops(),
            cmd_fd,
            async_fd: async_events.fd(),
            num_comp_vectors: 1,
            // SAFETY: all zeroes is PTHREAD_MUTEX_INITIALIZER in glibc.
            mutex: unsafe { std::mem::zeroed() },
            abi_compat: VERBS_ABI_IS_EXTENDED,
        };
        let vctx = verbs_context {
            query_port: Some(query_port_ex),
            _ops_before_cq_ex: [0; 24],
            create_cq_ex: Some(crate::cq_ex::create_cq_ex),
            priv_: std::ptr::null_mut(),
            query_device_ex: Some(query_device_ex),
            _ops_before_qp_ex: [0; 5],
            create_qp_ex: Some(crate::qp_ex::create_qp_ex),
            _ops_after: [0; 5],
            sz: std::mem::size_of::<verbs_context>(),
            context,
        };
        let (_, p) = ffi::publish(Ctx {
            pub_: UnsafeCell::new(vctx),
            magic: Ctx::MAGIC,
            dev,
            nic: Mutex::new(None),
            async_events,
            cmd_fd,
        });
        Ok(p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    ret_errno(|| {
        let ctx = lookup::<Ctx>(context)?;
        ffi::release(ctx, |_| {});
        Ok(())
    })
}

/// `ibv_query_device`'s answer for `info`: the limits verbs enforces, with
/// `ndv devinfo`'s values.
pub(crate) fn device_attr(info: &DeviceInfo) -> ibv_device_attr {
    let l = LIMITS;
    let guid = info.node_guid().to_be();
    // SAFETY: plain C data; all zeroes is valid.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    put_cstr(&mut a.fw_ver, env!("CARGO_PKG_VERSION"));
    a.node_guid = guid;
    a.sys_image_guid = guid;
    a.max_mr_size = 1 << 40;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = 0xff_ffff;
    a.vendor_part_id = 0;
    a.hw_ver = 0;
    a.max_qp = l.max_qp as c_int;
    a.max_qp_wr = l.max_qp_wr as c_int;
    a.device_cap_flags = IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN;
    a.max_sge = l.max_sge as c_int;
    a.max_sge_rd = l.max_sge as c_int;
    a.max_cq = 1 << 20;
    a.max_cqe = l.max_cqe as c_int;
    a.max_mr = 1 << 20;
    a.max_pd = 1 << 20;
    a.max_qp_rd_atom = c_int::from(l.max_qp_rd_atom);
    a.max_res_rd_atom =
        (u64::from(l.max_qp_rd_atom) * u64::from(l.max_qp)).min(i32::MAX as u64) as c_int;
    a.max_qp_init_rd_atom = c_int::from(l.max_qp_rd_atom);
    a.atomic_cap = IBV_ATOMIC_HCA;
    a.max_srq = 1 << 20;
    a.max_srq_wr = l.max_qp_wr as c_int;
    a.max_srq_sge = l.max_sge as c_int;
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    a
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    out: *mut ibv_device_attr,
) -> c_int {
    ret_errno(|| {
        let ctx = lookup::<Ctx>(context)?;
        let attr = device_attr(&ctx.dev.info());
        // SAFETY: the caller's ibv_device_attr to fill.
        unsafe { ffi::write_out(out, attr) }
    })
}

/// `verbs_context.query_device_ex`: the classic attributes; every extended
/// capability (ODP, timestamps, TSO, RSS, tag matching) absent.
unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    input: *const c_void,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    ret_errno(|| {
        let ctx = lookup::<Ctx>(context)?;
        if !input.is_null() {
            // struct ibv_query_device_ex_input { uint32_t comp_mask; }
            // SAFETY: a non-NULL input is the caller's struct.
            if unsafe { *(input as *const u32) } != 0 {
                return Err(libc::EINVAL);
            }
        }
        if attr.is_null() || attr_size < std::mem::size_of::<ibv_device_attr>() {
            return Err(libc::EINVAL);
        }
        let orig_attr = device_attr(&ctx.dev.info());
        let ex = ibv_device_attr_ex {
            device_cap_flags_ex: u64::from(orig_attr.device_cap_flags),
            phys_port_cnt_ex: u32::from(orig_attr.phys_port_cnt),
            orig_attr,
            comp_mask: 0,
            _odp_and_clock: [0; 11],
            _caps: [0; 108],
        };
        let n = attr_size.min(std::mem::size_of::<ibv_device_attr_ex>());
        // SAFETY: the caller's struct of attr_size bytes; `n` is no more
        // than either side, and fields past our struct are cleared.
        unsafe {
            std::ptr::write_bytes(attr as *mut u8, 0, attr_size);
            std::ptr::copy_nonoverlapping(&ex as *const _ as *const u8, attr as *mut u8, n);
        }
        Ok(())
    })
}

/// The port's attributes now.
fn port_attr(info: &DeviceInfo) -> ibv_port_attr {
    // SAFETY: plain C data; all zeroes is valid.
    let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
    a.state = if info.link_up {
        IBV_PORT_ACTIVE
    } else {
        IBV_PORT_DOWN
    };
    a.max_mtu = IBV_MTU_4096;
    a.active_mtu = info.active_mtu() as c_int;
    a.gid_tbl_len = 1;
    a.port_cap_flags = IBV_PORT_CM_SUP;
    a.max_msg_sz = LIMITS.max_msg_size.min(u64::from(u32::MAX)) as u32;
    a.pkey_tbl_len = 1;
    a.max_vl_num = 1;
    a.active_width = 1;
    a.active_speed = 8;
    a.phys_state = if info.link_up { 5 } else { 3 };
    a.link_layer = IBV_LINK_LAYER_ETHERNET;
    a
}

fn query_port_into(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    ret_errno(|| {
        let ctx = lookup::<Ctx>(context)?;
        if port != 1 || attr.is_null() {
            return Err(libc::EINVAL);
        }
        let a = port_attr(&ctx.dev.info());
        let n = len.min(std::mem::size_of::<ibv_port_attr>());
        // SAFETY: the caller's struct of at least `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(&a as *const _ as *const u8, attr as *mut u8, n) };
        Ok(())
    })
}

/// The exported `ibv_query_port@IBVERBS_1.1`: the ≤ 1.1 port attributes,
/// 48 bytes (see [`COMPAT_PORT_ATTR_LEN`]).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
) -> c_int {
    query_port_into(context, port_num, port_attr, COMPAT_PORT_ATTR_LEN)
}

/// `verbs_context.query_port`: what the `ibv_query_port` macro calls.
unsafe extern "C" fn query_port_ex(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    query_port_into(context, port_num, port_attr, len)
}

/// The GID at `index` of port `port` of `ctx`'s device.
fn gid(ctx: &Ctx, port: u32, index: u32) -> Result<ibv_gid, c_int> {
    if port != 1 || index != 0 {
        return Err(libc::EINVAL);
    }
    Ok(ibv_gid {
        raw: ndverbs_wire::cma::gid_of(ctx.dev.addr).octets(),
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    out: *mut ibv_gid,
) -> c_int {
    ret_minus1(|| {
        let ctx = lookup::<Ctx>(context)?;
        let index = u32::try_from(index).map_err(|_| libc::EINVAL)?;
        let g = gid(ctx, u32::from(port_num), index)?;
        // SAFETY: the caller's union ibv_gid to fill.
        unsafe { ffi::write_out(out, g) }
    })
}

fn gid_entry(ctx: &Ctx, port: u32, index: u32) -> Result<ibv_gid_entry, c_int> {
    Ok(ibv_gid_entry {
        gid: gid(ctx, port, index)?,
        gid_index: index,
        port_num: port,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: ctx.dev.info().ifindex,
    })
}

#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    ret_errno(|| {
        let ctx = lookup::<Ctx>(context)?;
        if flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return Err(libc::EINVAL);
        }
        let e = gid_entry(ctx, port_num, gid_index)?;
        // SAFETY: the caller's entry of at least our size.
        unsafe { ffi::write_out(entry, e) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let r = ffi::guarded(Err(libc::EIO), || {
        let ctx = lookup::<Ctx>(context)?;
        if flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
            return Err(libc::EINVAL);
        }
        if max_entries < 1 {
            return Err(libc::EINVAL);
        }
        let e = gid_entry(ctx, 1, 0)?;
        // SAFETY: the caller's array of max_entries ≥ 1 entries.
        unsafe { ffi::write_out(entries, e) }?;
        Ok(1)
    });
    r.unwrap_or_else(|e| -(e as isize))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: u32,
    gid_type: *mut c_int,
) -> c_int {
    ret_minus1(|| {
        let ctx = lookup::<Ctx>(context)?;
        gid(ctx, u32::from(port_num), index)?;
        // SAFETY: the caller's int to fill.
        unsafe { ffi::write_out(gid_type, IBV_GID_TYPE_SYSFS_ROCE_V2) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    ret_minus1(|| {
        lookup::<Ctx>(context)?;
        if port_num != 1 || index != 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's __be16 to fill.
        unsafe { ffi::write_out(pkey, 0xffffu16.to_be()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port_num: u8,
    pkey: u16,
) -> c_int {
    match lookup::<Ctx>(context) {
        Ok(_) if port_num == 1 && u16::from_be(pkey) & 0x7fff == 0x7fff => 0,
        Ok(_) => -1,
        Err(e) => {
            ffi::set_errno(e);
            -1
        }
    }
}
