//! Queue pairs: create, modify, query, destroy, and the post path.
//!
//! ndverbs has reliable connected QPs (`IBV_QPT_RC`) and unreliable
//! datagram QPs (`IBV_QPT_UD`, on an SRQ or not); other types are
//! `EOPNOTSUPP`. `ibv_modify_qp` hands the attributes to verbs, which runs
//! the IBTA transition table of the QP's type (required and optional
//! attributes per transition; UD's INIT takes `IBV_QP_QKEY`, its RTR
//! nothing, its RTS `IBV_QP_SQ_PSN`): a refused transition or attribute is
//! `EINVAL`, as from the kernel. RoCE needs a GRH, so an address vector without `is_global` is
//! `EINVAL`, as is a source GID index other than 0 (the GID table has one
//! entry), a port other than 1 and a P_Key index other than 0. The peer's
//! address comes from the destination GID.
//!
//! `ibv_post_send` and `ibv_post_recv` (inlines in the application that call
//! the `post_send`/`post_recv` ops) translate each work request of the
//! chain and post it; the first refused one is returned in `bad_wr` with
//! the errno as the return value (`EINVAL` for a bad request or a QP state
//! that refuses posts, `ENOMEM` for a full queue), and the ones before it
//! stay posted, as with every provider. Immediate data is `__be32` in the
//! request and travels as it is.
//!
//! On a UD QP a send is `IBV_WR_SEND` or `IBV_WR_SEND_WITH_IMM` (else
//! `EINVAL`) addressed by `wr.ud`: the address handle (`ibv_create_ah`, its
//! GID the destination), the remote QPN and Q_Key (top bit set: the QP's
//! own). A message longer than the path MTU is `EINVAL`: a datagram is one
//! packet. Each receive buffer starts with the 40 bytes of the GRH area.

use crate::abi::*;
use crate::ah::Ah;
use crate::cq::Cq;
use crate::ffi::{self, fast, lookup, ret_errno, ret_ptr, Kind, Object};
use crate::pd::{next_handle, Pd};
use crate::srq::Srq;
use libc::c_int;
use ndverbs_verbs::{
    Access, AddressVector, AttrMask, PathMtu, QpAttr, QpCaps, QpInitAttr, QpState, QpType, RecvWr,
    RemoteAddr, SendOp, SendWr, SgList, Sge, UdDest, UdSendWr,
};
use std::cell::UnsafeCell;
use std::sync::atomic::Ordering;

/// A queue pair.
#[repr(C)]
pub(crate) struct Qp {
    pub(crate) pub_: UnsafeCell<ibv_qp_ex>,
    magic: u64,
    pub(crate) qp: ndverbs_verbs::Qp,
    pub(crate) pd: &'static Pd,
    send_cq: &'static Cq,
    recv_cq: &'static Cq,
    srq: Option<&'static Srq>,
    /// As created (what `ibv_query_qp` reports).
    pub(crate) cap: ibv_qp_cap,
    /// `IBV_QPT_RC` or `IBV_QPT_UD`.
    pub(crate) qp_type: c_int,
    sq_sig_all: bool,
    /// The `ibv_wr_*` state of a QP made by `ibv_create_qp_ex`.
    pub(crate) ex: Option<crate::qp_ex::QpEx>,
}

// SAFETY: the public struct is the first field.
unsafe impl Object for Qp {
    const KIND: Kind = Kind::Qp;
    const MAGIC: u64 = 0x6e64_7671_7000_0007;
    type Public = ibv_qp;
    fn magic(&self) -> u64 {
        self.magic
    }
}

// SAFETY: as for Pd.
unsafe impl Sync for Qp {}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    ret_ptr(|| create(lookup::<Pd>(pd)?, init, None))
}

/// Creates a QP in `pd` (`ibv_create_qp`'s rules), writing what it got back
/// into `init.cap`; `ex` makes it extended, with its `ibv_wr_*` slots
/// filled (`ibv_create_qp_ex`).
pub(crate) fn create(
    pd: &'static Pd,
    init: *mut ibv_qp_init_attr,
    ex: Option<crate::qp_ex::QpEx>,
) -> Result<*mut ibv_qp, c_int> {
    {
        // SAFETY: the caller's init attributes (NULL is EINVAL).
        let a = unsafe { ffi::read_in(init as *const ibv_qp_init_attr) }?;
        let qp_type = match a.qp_type {
            IBV_QPT_RC => QpType::Rc,
            IBV_QPT_UD => QpType::Ud,
            _ => return Err(libc::EOPNOTSUPP),
        };
        let send_cq = lookup::<Cq>(a.send_cq)?;
        let recv_cq = lookup::<Cq>(a.recv_cq)?;
        let srq = if a.srq.is_null() {
            None
        } else {
            Some(lookup::<Srq>(a.srq)?)
        };
        // Objects of another context (another device) never meet.
        let same = |c: &Cq| std::ptr::eq(c.ctx, pd.ctx);
        if !same(send_cq) || !same(recv_cq) || srq.is_some_and(|s| !std::ptr::eq(s.pd, pd)) {
            return Err(libc::EINVAL);
        }
        let caps = QpCaps {
            max_send_wr: a.cap.max_send_wr.max(1),
            max_send_sge: a.cap.max_send_sge.max(1),
            max_inline_data: a.cap.max_inline_data,
            sq_sig_all: a.sq_sig_all != 0,
        };
        let mut vi = QpInitAttr::new(&send_cq.cq, &recv_cq.cq);
        vi.qp_type = qp_type;
        vi.caps = caps;
        vi.srq = srq.map(|s| &s.srq);
        vi.max_recv_wr = a.cap.max_recv_wr.max(1);
        vi.max_recv_sge = a.cap.max_recv_sge.max(1);
        let qp = pd.pd.create_qp(&vi).map_err(|e| e.errno())?;
        // What the QP got: with an SRQ it has no receive queue of its own.
        let cap = ibv_qp_cap {
            max_send_wr: caps.max_send_wr,
            max_recv_wr: if srq.is_some() { 0 } else { vi.max_recv_wr },
            max_send_sge: caps.max_send_sge,
            max_recv_sge: if srq.is_some() { 0 } else { vi.max_recv_sge },
            max_inline_data: caps.max_inline_data,
        };
        // SAFETY: the caller's init attributes, whose `cap` rdma-core
        // providers overwrite with what the QP got.
        unsafe { (*init).cap = cap };
        // SAFETY: plain C data (pointers, integers, pthread objects whose
        // static initialisers are zeroes in glibc).
        let mut public: ibv_qp_ex = unsafe { std::mem::zeroed() };
        let b = &mut public.qp_base;
        b.context = pd.ctx.public();
        b.qp_context = a.qp_context;
        b.pd = ffi::public(pd);
        b.send_cq = a.send_cq;
        b.recv_cq = a.recv_cq;
        b.srq = a.srq;
        b.handle = next_handle();
        b.qp_num = qp.qpn();
        b.state = QpState::Reset as c_int;
        b.qp_type = a.qp_type;
        if let Some(ex) = &ex {
            ex.fill(&mut public);
        }
        let (_, p) = ffi::publish(Qp {
            pub_: UnsafeCell::new(public),
            magic: Qp::MAGIC,
            qp,
            pd,
            send_cq,
            recv_cq,
            srq,
            cap,
            qp_type: a.qp_type,
            sq_sig_all: caps.sq_sig_all,
            ex,
        });
        pd.users.fetch_add(1, Ordering::AcqRel);
        send_cq.users.fetch_add(1, Ordering::AcqRel);
        recv_cq.users.fetch_add(1, Ordering::AcqRel);
        if let Some(s) = srq {
            s.users.fetch_add(1, Ordering::AcqRel);
        }
        Ok(p)
    }
}

/// What the CQs of live QP `qp` hold now (see `rdmacm::conn`); none for
/// a QP that is not ours or is gone.
pub(crate) fn cq_marks(qp: *mut ibv_qp) -> Vec<ndverbs_verbs::CqMark> {
    match lookup::<Qp>(qp) {
        Ok(q) => vec![q.send_cq.cq.mark(), q.recv_cq.cq.mark()],
        Err(_) => Vec::new(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    ret_errno(|| {
        let qp = lookup::<Qp>(qp)?;
        let (pd, scq, rcq, srq) = (qp.pd, qp.send_cq, qp.recv_cq, qp.srq);
        ffi::release(qp, |_| {});
        pd.users.fetch_sub(1, Ordering::AcqRel);
        scq.users.fetch_sub(1, Ordering::AcqRel);
        rcq.users.fetch_sub(1, Ordering::AcqRel);
        if let Some(s) = srq {
            s.users.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(())
    })
}

fn qp_state(v: c_int) -> Result<QpState, c_int> {
    Ok(match v {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return Err(libc::EINVAL),
    })
}

/// The verbs attributes and mask of an `ibv_modify_qp` call.
fn to_attr(a: &ibv_qp_attr, mask: c_int) -> Result<(QpAttr, AttrMask), c_int> {
    if !(0..IBV_QP_RATE_LIMIT << 1).contains(&mask) {
        return Err(libc::EINVAL);
    }
    let has = |bit: c_int| mask & bit != 0;
    let mut q = QpAttr::default();
    if has(IBV_QP_STATE) {
        q.qp_state = qp_state(a.qp_state)?;
    }
    if has(IBV_QP_CUR_STATE) {
        q.cur_qp_state = qp_state(a.cur_qp_state)?;
    }
    if has(IBV_QP_PATH_MTU) {
        q.path_mtu = u8::try_from(a.path_mtu)
            .ok()
            .and_then(PathMtu::from_enum)
            .ok_or(libc::EINVAL)?;
    }
    if has(IBV_QP_ACCESS_FLAGS) {
        // MW_BIND is about windows, which this QP does not bind.
        let bits = a.qp_access_flags & !IBV_ACCESS_MW_BIND;
        q.qp_access_flags = Access::from_bits(bits).ok_or(libc::EINVAL)?;
    }
    if has(IBV_QP_PKEY_INDEX) && a.pkey_index != 0 {
        return Err(libc::EINVAL);
    }
    if has(IBV_QP_PORT) && a.port_num != 1 {
        return Err(libc::EINVAL);
    }
    if has(IBV_QP_AV) {
        let ah = &a.ah_attr;
        if ah.is_global == 0 || ah.grh.sgid_index != 0 || ah.port_num > 1 {
            return Err(libc::EINVAL);
        }
        q.av = AddressVector {
            dgid: ah.grh.dgid.raw,
            sgid_index: ah.grh.sgid_index,
            hop_limit: ah.grh.hop_limit,
            traffic_class: ah.grh.traffic_class,
            flow_label: flow_label(ah.grh.flow_label),
            sl: ah.sl,
        };
    }
    q.dest_qp_num = a.dest_qp_num;
    q.rq_psn = a.rq_psn;
    q.sq_psn = a.sq_psn;
    q.timeout = a.timeout;
    q.retry_cnt = a.retry_cnt;
    q.rnr_retry = a.rnr_retry;
    q.min_rnr_timer = a.min_rnr_timer;
    q.max_rd_atomic = a.max_rd_atomic;
    q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    q.pkey_index = a.pkey_index;
    q.port_num = a.port_num;
    if has(IBV_QP_QKEY) {
        q.qkey = a.qkey;
    }
    Ok((q, AttrMask::from_bits(mask as u32)))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    ret_errno(|| {
        let qp = lookup::<Qp>(qp)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attributes (checked non-NULL), read in place:
        // the struct has no padding that matters and is only read.
        let a = unsafe { &*attr };
        let (q, mask) = to_attr(a, attr_mask)?;
        qp.qp.modify(&q, mask).map_err(|e| e.errno())?;
        if mask.contains(AttrMask::STATE) {
            // SAFETY: our public struct; rdma-core mirrors the state here.
            unsafe { (*qp.pub_.get()).qp_base.state = a.qp_state };
        }
        Ok(())
    })
}

/// The 20 bits of a GRH flow label that the header carries. The kernel
/// keeps only these of `ibv_global_route.flow_label` and ignores the rest,
/// and UCX relies on it: its RoCE address vectors carry
/// `~(path_factor * path_index)`, all 32 bits set for path 0.
pub(crate) fn flow_label(v: u32) -> u32 {
    v & 0xf_ffff
}

pub(crate) fn ah_attr_of(av: &AddressVector) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: av.dgid },
            flow_label: av.flow_label,
            sgid_index: av.sgid_index,
            hop_limit: av.hop_limit,
            traffic_class: av.traffic_class,
        },
        dlid: 0,
        sl: av.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: 1,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ret_errno(|| {
        let qp = lookup::<Qp>(qp)?;
        if attr.is_null() || init_attr.is_null() {
            return Err(libc::EINVAL);
        }
        let q = qp.qp.query().map_err(|e| e.errno())?;
        // SAFETY: plain C data; all zeroes is valid.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = q.qp_state as c_int;
        a.cur_qp_state = q.qp_state as c_int;
        a.path_mtu = q.path_mtu as c_int;
        a.rq_psn = q.rq_psn;
        a.sq_psn = q.sq_psn;
        a.dest_qp_num = q.dest_qp_num;
        a.qp_access_flags = q.qp_access_flags.bits();
        a.cap = qp.cap;
        a.ah_attr = ah_attr_of(&q.av);
        a.pkey_index = q.pkey_index;
        a.max_rd_atomic = q.max_rd_atomic;
        a.max_dest_rd_atomic = q.max_dest_rd_atomic;
        a.min_rnr_timer = q.min_rnr_timer;
        a.port_num = q.port_num;
        a.timeout = q.timeout;
        a.retry_cnt = q.retry_cnt;
        a.rnr_retry = q.rnr_retry;
        a.qkey = q.qkey;
        // SAFETY: our public struct; rdma-core mirrors the state it
        // queried there (the QP may have gone to ERR on its own).
        let qp_context = unsafe {
            let b = &mut (*qp.pub_.get()).qp_base;
            b.state = a.qp_state;
            b.qp_context
        };
        let init = ibv_qp_init_attr {
            qp_context,
            send_cq: qp.send_cq.public(),
            recv_cq: qp.recv_cq.public(),
            srq: qp.srq.map_or(std::ptr::null_mut(), |s| s.public()),
            cap: qp.cap,
            qp_type: qp.qp_type,
            sq_sig_all: c_int::from(qp.sq_sig_all),
        };
        // SAFETY: the caller's two structs (checked non-NULL).
        unsafe {
            ffi::write_out(attr, a)?;
            ffi::write_out(init_attr, init)
        }
    })
}

/// Data lands in order within a message (RC over a single path): rdma-core
/// returns 0 when the provider cannot tell.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(
    _qp: *mut ibv_qp,
    _op: c_int,
    _flags: u32,
) -> c_int {
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_attach_mcast(
    qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    ret_errno(|| {
        lookup::<Qp>(qp)?;
        Err(libc::EOPNOTSUPP)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_detach_mcast(
    qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    ret_errno(|| {
        lookup::<Qp>(qp)?;
        Err(libc::EOPNOTSUPP)
    })
}

/// The SGE list of a work request.
///
/// # Safety
/// `sg_list` must point to `num_sge` readable SGEs when `num_sge > 0`.
pub(crate) unsafe fn sges(sg_list: *const ibv_sge, num_sge: c_int) -> Result<SgList, c_int> {
    if num_sge < 0 || (num_sge > 0 && sg_list.is_null()) {
        return Err(libc::EINVAL);
    }
    let mut l = SgList::new();
    for i in 0..num_sge as usize {
        // SAFETY: within the caller's num_sge entries.
        let s = unsafe { *sg_list.add(i) };
        l.push(Sge::new(s.addr, s.length, s.lkey));
    }
    Ok(l)
}

/// A send work request as verbs' [`SendWr`].
///
/// # Safety
/// As for `ibv_post_send`: the SGE list, and with `IBV_SEND_INLINE` the
/// bytes it points to, must be readable.
unsafe fn send_wr(wr: &ibv_send_wr) -> Result<SendWr, c_int> {
    // SAFETY: the union member the opcode names is the one the caller set;
    // both are plain integers, so reading either is defined.
    let (rdma, atomic) = unsafe { (wr.wr.rdma, wr.wr.atomic) };
    let remote = RemoteAddr {
        va: rdma.remote_addr,
        rkey: rdma.rkey,
    };
    let op = match wr.opcode {
        IBV_WR_RDMA_WRITE => SendOp::Write(remote),
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::WriteImm(remote, u32::from_be(wr.imm_data)),
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendImm(u32::from_be(wr.imm_data)),
        IBV_WR_SEND_WITH_INV => SendOp::SendInv(wr.imm_data),
        IBV_WR_RDMA_READ => SendOp::Read(remote),
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
            remote: RemoteAddr {
                va: atomic.remote_addr,
                rkey: atomic.rkey,
            },
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            remote: RemoteAddr {
                va: atomic.remote_addr,
                rkey: atomic.rkey,
            },
            add: atomic.compare_add,
        },
        _ => return Err(libc::EINVAL),
    };
    let flags = wr.send_flags;
    let known = IBV_SEND_FENCE
        | IBV_SEND_SIGNALED
        | IBV_SEND_SOLICITED
        | IBV_SEND_INLINE
        | IBV_SEND_IP_CSUM;
    if flags & !known != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: forwarded from the caller.
    let sgl = unsafe { sges(wr.sg_list, wr.num_sge) }?;
    let mut w = SendWr::new(wr.wr_id, op, SgList::new());
    if flags & IBV_SEND_INLINE != 0 && !op.is_read_or_atomic() {
        // Inline data is copied now: the buffers are free when the post
        // returns, and their lkeys are not looked at.
        let total: u64 = sgl.iter().map(|s| u64::from(s.len)).sum();
        let mut data = Vec::with_capacity(total as usize);
        for s in sgl.iter() {
            if s.len == 0 {
                continue;
            }
            // SAFETY: an inline SGE names bytes the application can read,
            // by ibv_post_send's contract.
            data.extend_from_slice(unsafe {
                std::slice::from_raw_parts(s.addr as usize as *const u8, s.len as usize)
            });
        }
        w.inline = Some(data);
    } else {
        w.sgl = sgl;
    }
    w.signaled = flags & IBV_SEND_SIGNALED != 0;
    w.fence = flags & IBV_SEND_FENCE != 0;
    w.solicited = flags & IBV_SEND_SOLICITED != 0;
    Ok(w)
}

/// Where a UD send goes: the address handle's destination GID and path,
/// QP `remote_qpn`, Q_Key `remote_qkey`. An address handle that is not one
/// of ours is `EINVAL`.
pub(crate) fn ud_dest(ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) -> Result<UdDest, c_int> {
    let a = crate::ffi::lookup::<Ah>(ah)?.attr();
    Ok(UdDest {
        av: AddressVector {
            dgid: a.grh.dgid.raw,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
            flow_label: flow_label(a.grh.flow_label),
            sl: a.sl,
        },
        remote_qpn: remote_qpn & 0xff_ffff,
        remote_qkey,
    })
}

/// A send request of a UD QP: SEND or SEND with immediate only (rxe's
/// rule), to `dest`.
pub(crate) fn ud_send_wr(w: SendWr, dest: UdDest) -> Result<UdSendWr, c_int> {
    let imm = match w.op {
        SendOp::Send => None,
        SendOp::SendImm(imm) => Some(imm),
        _ => return Err(libc::EINVAL),
    };
    Ok(UdSendWr {
        wr_id: w.wr_id,
        dest,
        sgl: w.sgl.iter().copied().collect(),
        inline: w.inline,
        imm,
        signaled: w.signaled,
        solicited: w.solicited,
    })
}

/// `ibv_post_send` (the `post_send` op).
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    let Some(qp) = fast::<Qp>(qp) else {
        return libc::EINVAL;
    };
    let _returned = qp.pd.nic.activity.entering();
    let rc = ffi::guarded(libc::EIO, || {
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: each request of the chain the caller passed.
            let w = unsafe { &*cur };
            // SAFETY: forwarded from the caller.
            let r = unsafe { send_wr(w) }.and_then(|sw| {
                if qp.qp_type == IBV_QPT_UD {
                    // SAFETY: on a UD QP the caller set the `ud` member.
                    let ud = unsafe { w.wr.ud };
                    let dest = ud_dest(ud.ah, ud.remote_qpn, ud.remote_qkey)?;
                    let uw = ud_send_wr(sw, dest)?;
                    qp.qp.post_send_ud(uw).map_err(|e| e.errno())
                } else {
                    qp.qp.post_send(sw).map_err(|e| e.errno())
                }
            });
            if let Err(e) = r {
                if !bad_wr.is_null() {
                    // SAFETY: the caller's out-pointer.
                    unsafe { *bad_wr = cur };
                }
                return e;
            }
            cur = w.next;
        }
        0
    });
    qp.pd.nic.posted();
    rc
}

/// `ibv_post_recv` (the `post_recv` op).
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let Some(qp) = fast::<Qp>(qp) else {
        return libc::EINVAL;
    };
    let _returned = qp.pd.nic.activity.entering();
    let rc = ffi::guarded(libc::EIO, || {
        // SAFETY: forwarded from the caller.
        unsafe { post_recvs(wr, bad_wr, |r| qp.qp.post_recv(r).map_err(|e| e.errno())) }
    });
    qp.pd.nic.posted();
    rc
}

/// Posts a chain of receives with `post`.
///
/// # Safety
/// As for `ibv_post_recv`.
pub(crate) unsafe fn post_recvs(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    post: impl Fn(RecvWr) -> Result<(), c_int>,
) -> c_int {
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: each request of the chain the caller passed.
        let w = unsafe { &*cur };
        // SAFETY: forwarded from the caller.
        let r =
            unsafe { sges(w.sg_list, w.num_sge) }.and_then(|sgl| post(RecvWr::new(w.wr_id, sgl)));
        if let Err(e) = r {
            if !bad_wr.is_null() {
                // SAFETY: the caller's out-pointer.
                unsafe { *bad_wr = cur };
            }
            return e;
        }
        cur = w.next;
    }
    0
}
