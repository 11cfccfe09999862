//! Completion queues and completion channels.
//!
//! **Polling** (`ibv_poll_cq`, an inline in the application that calls the
//! `poll_cq` op) takes completions from verbs' lock-free ring and writes
//! them as `struct ibv_wc`; in the default progress mode an empty ring
//! first runs the engine on the polling thread (see [`crate::nic`]) —
//! unless a poll took completions less than [`FRESH`] ago. Programs read a
//! CQ until it is empty: libfabric's verbs provider polls one completion at
//! a time until none is left, and its rxm layer then reads once more, so
//! each message received was followed by two engine steps that found
//! nothing on the socket (a `recvmsg` each, most of a step's cost) before
//! the program saw the message. A ring that a step filled a moment ago is
//! taken at its word; a packet that came in meanwhile waits for the next
//! poll, at most [`FRESH`] later.
//!
//! **Channels.** rdma-core's completion channel is a descriptor that
//! becomes readable when an armed CQ attached to it gets a completion;
//! `ibv_get_cq_event` reads one event from it and says which CQ it was. Each
//! verbs CQ signals its own eventfd when armed (`req_notify`) and a
//! matching completion arrives, so a channel here is an epoll descriptor
//! watching the eventfds of its CQs, each tagged with its CQ: poll, select
//! and epoll see it readable exactly when an event waits, `O_NONBLOCK` on it
//! makes `ibv_get_cq_event` fail with `EAGAIN`, one channel serves any
//! number of CQs, and the tag says which one fired. An eventfd counts: when
//! one CQ fired more than once before it was read, the extra events wait in
//! the channel (with a readiness eventfd of their own) and come out on the
//! next calls, one per call, as the kernel delivers them.
//!
//! `ibv_ack_cq_events` counts acknowledgements; `ibv_destroy_cq` waits
//! until every event delivered for the CQ is acknowledged, as rdma-core's
//! does, and refuses (`EBUSY`) while a QP or SRQ uses the CQ; a channel
//! with CQs attached cannot be destroyed (`EBUSY`).

use crate::abi::*;
use crate::device::Ctx;
use crate::ffi::{self, fast, lookup, ret_errno, ret_minus1, ret_ptr, Kind, Object};
use crate::nic::Nic;
use crate::pd::next_handle;
use crate::sys::{self, Fd};
use libc::{c_int, c_uint, c_void};
use ndverbs_verbs::{NotifyOn, WcOpcode, WcQueue, WcStatus, WorkCompletion, LIMITS};
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How long after a poll that took completions an empty ring is believed
/// without running the engine (see the module's documentation): shorter
/// than a one-way trip on any link, longer than what a program does
/// between reading a completion and reading the CQ again.
pub(crate) const FRESH: Duration = Duration::from_micros(2);

/// The epoll tag of a channel's own readiness eventfd (CQ tags are their
/// addresses, never 0).
const PENDING_TAG: u64 = 0;

/// A completion channel.
#[repr(C)]
pub(crate) struct Channel {
    pub_: UnsafeCell<ibv_comp_channel>,
    magic: u64,
    ctx: &'static Ctx,
    epoll: Fd,
    /// Readable while `pending` is not empty.
    ready: Fd,
    /// Events taken from a CQ's eventfd but not yet delivered.
    pending: Mutex<VecDeque<&'static Cq>>,
    cqs: AtomicU32,
}

// SAFETY: the public struct is the first field.
unsafe impl Object for Channel {
    const KIND: Kind = Kind::Channel;
    const MAGIC: u64 = 0x6e64_7663_6368_0005;
    type Public = ibv_comp_channel;
    fn magic(&self) -> u64 {
        self.magic
    }
}

// SAFETY: the public struct is written by us only for refcnt (below, with
// the count kept in an atomic); the rest is Sync.
unsafe impl Sync for Channel {}

impl Channel {
    fn set_refcnt(&self) {
        // SAFETY: our public struct; refcnt is informational for the
        // application, mirrored from the atomic count.
        unsafe { (*self.pub_.get()).refcnt = self.cqs.load(Ordering::Acquire) as c_int };
    }

    fn fd(&self) -> c_int {
        self.epoll.raw()
    }

    /// Takes one pending event.
    fn take_pending(&self) -> Option<&'static Cq> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let cq = p.pop_front();
        if p.is_empty() {
            sys::eventfd_clear(&self.ready);
        }
        cq
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    ret_ptr(|| {
        let ctx = lookup::<Ctx>(context)?;
        let epoll = sys::epoll()?;
        let ready = sys::eventfd()?;
        sys::epoll_add(&epoll, ready.raw(), PENDING_TAG)?;
        let fd = epoll.raw();
        let (_, p) = ffi::publish(Channel {
            pub_: UnsafeCell::new(ibv_comp_channel {
                context,
                fd,
                refcnt: 0,
            }),
            magic: Channel::MAGIC,
            ctx,
            epoll,
            ready,
            pending: Mutex::new(VecDeque::new()),
            cqs: AtomicU32::new(0),
        });
        Ok(p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    ret_errno(|| {
        let ch = lookup::<Channel>(channel)?;
        if ch.cqs.load(Ordering::Acquire) != 0 {
            return Err(libc::EBUSY);
        }
        ffi::release(ch, |_| {});
        Ok(())
    })
}

/// Events delivered and acknowledged for one CQ.
#[derive(Debug, Default)]
struct EventCount {
    delivered: u64,
    acked: u64,
}

/// A completion queue. Its public struct is always an `ibv_cq_ex`, whose
/// `ibv_cq` prefix is what plain CQs show; `ex` is set for CQs made by
/// `ibv_create_cq_ex`.
#[repr(C)]
pub(crate) struct Cq {
    pub(crate) pub_: UnsafeCell<ibv_cq_ex>,
    magic: u64,
    pub(crate) cq: ndverbs_verbs::Cq,
    pub(crate) nic: Arc<Nic>,
    pub(crate) ctx: &'static Ctx,
    channel: Option<&'static Channel>,
    events: Mutex<EventCount>,
    acked: Condvar,
    /// QPs and SRQs using it.
    pub(crate) users: AtomicU32,
    /// When a poll last took completions ([`crate::nic::ticks`]).
    took_at: AtomicU64,
    /// The polling state of an extended CQ.
    pub(crate) ex: Option<crate::cq_ex::CqEx>,
}

// SAFETY: the public struct is the first field.
unsafe impl Object for Cq {
    const KIND: Kind = Kind::Cq;
    const MAGIC: u64 = 0x6e64_7663_7100_0006;
    type Public = ibv_cq;
    fn magic(&self) -> u64 {
        self.magic
    }
}

// SAFETY: as for Pd.
unsafe impl Sync for Cq {}

impl Cq {
    pub(crate) fn public(&self) -> *mut ibv_cq {
        ffi::public(self)
    }

    /// Whether a poll took completions less than [`FRESH`] ago: an empty
    /// ring is then believed without an engine step.
    #[inline]
    pub(crate) fn fresh(&self) -> bool {
        fresh_at(
            self.took_at.load(Ordering::Relaxed),
            crate::nic::ticks(),
            crate::nic::clock().fresh,
        )
    }

    /// A poll took completions.
    #[inline]
    fn took(&self) {
        self.took_at.store(crate::nic::ticks(), Ordering::Relaxed);
    }

    /// Takes completions into `out`: only those queued when `fresh`, else
    /// after an engine step if none are; notes when it took some.
    fn take(&self, out: &mut [WorkCompletion], fresh: bool) -> usize {
        let n = if fresh {
            self.cq.poll_queued(out)
        } else {
            self.cq.poll(out)
        };
        if n > 0 {
            self.took();
        }
        n
    }

    /// One completion: queued, or after an engine step unless the ring is
    /// [fresh](Cq::fresh).
    pub(crate) fn poll_one(&self) -> Option<WorkCompletion> {
        let mut one = [NO_COMPLETION];
        (self.take(&mut one, self.fresh()) == 1).then_some(one[0])
    }
}

/// Whether a ring whose last poll took completions at tick `took_at` is
/// still fresh at tick `now`, for a window of `window` ticks. A later
/// `took_at` than `now` (another thread's poll, or another core's counter)
/// is fresh; nothing taken yet (`took_at` 0) is not, the counter having
/// run for longer than any window since the machine started.
#[inline]
fn fresh_at(took_at: u64, now: u64, window: u64) -> bool {
    took_at != 0 && now.saturating_sub(took_at) < window
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    ret_ptr(|| create(context, cqe, cq_context, channel, comp_vector, None))
}

/// Creates a CQ (`ibv_create_cq`'s rules); `ex` makes it extended, with
/// its public tail filled (`ibv_create_cq_ex`).
pub(crate) fn create(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
    ex: Option<crate::cq_ex::CqEx>,
) -> Result<*mut ibv_cq, c_int> {
    {
        let ctx = lookup::<Ctx>(context)?;
        let channel = if channel.is_null() {
            None
        } else {
            Some(lookup::<Channel>(channel)?)
        };
        if channel.is_some_and(|c| !std::ptr::eq(c.ctx, ctx)) {
            return Err(libc::EINVAL);
        }
        if cqe < 1 || cqe as u32 > LIMITS.max_cqe || comp_vector != 0 {
            return Err(libc::EINVAL);
        }
        let nic = ctx.nic()?;
        let cq = nic.dev.create_cq(cqe as u32).map_err(|e| e.errno())?;
        let public = ibv_cq {
            context,
            channel: channel.map_or(std::ptr::null_mut(), ffi::public),
            cq_context,
            handle: next_handle(),
            cqe: cq.depth() as c_int,
            // SAFETY: zeroes are glibc's static initialisers of both.
            mutex: unsafe { std::mem::zeroed() },
            // SAFETY: as above.
            cond: unsafe { std::mem::zeroed() },
            comp_events_completed: 0,
            async_events_completed: 0,
        };
        // SAFETY: plain C data (integers, NULL function pointers).
        let mut public_ex: ibv_cq_ex = unsafe { std::mem::zeroed() };
        public_ex.cq = public;
        if let Some(ex) = &ex {
            ex.fill(&mut public_ex);
        }
        let event_fd = cq.fd();
        let (obj, p) = ffi::publish(Cq {
            pub_: UnsafeCell::new(public_ex),
            magic: Cq::MAGIC,
            cq,
            nic,
            ctx,
            channel,
            events: Mutex::new(EventCount::default()),
            acked: Condvar::new(),
            users: AtomicU32::new(0),
            took_at: AtomicU64::new(0),
            ex,
        });
        if let Some(ch) = channel {
            if let Err(e) = sys::epoll_add(&ch.epoll, event_fd, p as u64) {
                ffi::release(obj, |_| {});
                return Err(e);
            }
            ch.cqs.fetch_add(1, Ordering::AcqRel);
            ch.set_refcnt();
        }
        Ok(p)
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    ret_errno(|| {
        let cq = lookup::<Cq>(cq)?;
        if cq.users.load(Ordering::Acquire) != 0 {
            return Err(libc::EBUSY);
        }
        if let Some(ch) = cq.channel {
            sys::epoll_del(&ch.epoll, cq.cq.fd());
            ch.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|c| !std::ptr::eq(*c, cq));
        }
        // rdma-core waits for the application to acknowledge every event
        // it was given for this CQ.
        {
            let mut ev = cq.events.lock().unwrap_or_else(|e| e.into_inner());
            while ev.acked < ev.delivered {
                ev = cq.acked.wait(ev).unwrap_or_else(|e| e.into_inner());
            }
        }
        if let Some(ch) = cq.channel {
            ch.cqs.fetch_sub(1, Ordering::AcqRel);
            ch.set_refcnt();
        }
        ffi::release(cq, |_| {});
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    ret_errno(|| {
        let cq = lookup::<Cq>(cq)?;
        if cqe < 1 {
            return Err(libc::EINVAL);
        }
        // Fewer entries than completions waiting is EINVAL in rxe
        // (`rxe_cq_chk_attr`), not verbs' EOVERFLOW.
        cq.cq.resize(cqe as u32).map_err(|e| match e.kind() {
            ndverbs_verbs::ErrorKind::Overflow => libc::EINVAL,
            _ => e.errno(),
        })?;
        // SAFETY: our public struct; `cqe` reports the new capacity.
        unsafe { (*cq.pub_.get()).cq.cqe = cq.cq.depth() as c_int };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    ret_minus1(|| {
        let ch = lookup::<Channel>(channel)?;
        if cq_out.is_null() || cq_context.is_null() {
            return Err(libc::EINVAL);
        }
        let cq = next_event(ch)?;
        cq.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .delivered += 1;
        // SAFETY: the caller's two out-pointers (checked non-NULL); our
        // public struct's cq_context, which the application may have set.
        unsafe {
            *cq_out = cq.public();
            *cq_context = (*cq.pub_.get()).cq.cq_context;
        }
        Ok(())
    })
}

/// Waits for the channel's next event (or fails with `EAGAIN` at once when
/// the application made the descriptor non-blocking).
fn next_event(ch: &Channel) -> Result<&'static Cq, c_int> {
    let nonblocking = sys::is_nonblocking(ch.fd());
    // While this thread sleeps, someone else must run the engine.
    let nic = ch.ctx.nic_if_open();
    let _blocked = match (&nic, nonblocking) {
        (Some(n), false) => Some(n.activity.blocking()),
        _ => None,
    };
    loop {
        if let Some(cq) = ch.take_pending() {
            return Ok(cq);
        }
        let tag = match sys::epoll_wait_one(ch.fd(), if nonblocking { 0 } else { -1 }) {
            Ok(Some(tag)) => tag,
            Ok(None) => return Err(libc::EAGAIN),
            Err(libc::EINTR) => continue,
            Err(e) => return Err(e),
        };
        if tag == PENDING_TAG {
            continue;
        }
        // The tag is the address of a CQ attached to this channel; a CQ is
        // detached before it is destroyed.
        let Ok(cq) = lookup::<Cq>(tag as *const ibv_cq) else {
            continue;
        };
        let fired = cq.cq.ack_events();
        if fired == 0 {
            // Another thread took it.
            continue;
        }
        if fired > 1 {
            let mut p = ch.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.extend(std::iter::repeat_n(cq, (fired - 1) as usize));
            sys::eventfd_signal(&ch.ready);
        }
        return Ok(cq);
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    ffi::guarded((), || {
        let Ok(cq) = lookup::<Cq>(cq) else { return };
        let mut ev = cq.events.lock().unwrap_or_else(|e| e.into_inner());
        ev.acked += u64::from(nevents);
        // SAFETY: our public struct; the count applications may read.
        unsafe { (*cq.pub_.get()).cq.comp_events_completed = ev.acked as u32 };
        cq.acked.notify_all();
    });
}

/// `ibv_req_notify_cq` (the `req_notify_cq` op).
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    let Some(cq) = fast::<Cq>(cq) else {
        return libc::EINVAL;
    };
    cq.cq.req_notify(if solicited_only != 0 {
        NotifyOn::Solicited
    } else {
        NotifyOn::Any
    });
    cq.nic.activity.armed();
    0
}

/// How many completions one poll of the ring takes at a time.
const BATCH: usize = 16;

const NO_COMPLETION: WorkCompletion = WorkCompletion {
    wr_id: 0,
    status: WcStatus::Success,
    opcode: WcOpcode::Send,
    queue: WcQueue::Send,
    byte_len: 0,
    imm: None,
    invalidated_rkey: None,
    qpn: 0,
    src_qp: 0,
    solicited: false,
    grh: false,
};

/// `ibv_poll_cq` (the `poll_cq` op): up to `num_entries` completions, the
/// number taken, or a negative value for a bad argument.
pub(crate) unsafe extern "C" fn poll_cq(
    cq: *mut ibv_cq,
    num_entries: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    let Some(cq) = fast::<Cq>(cq) else {
        return -libc::EINVAL;
    };
    if num_entries <= 0 {
        return 0;
    }
    if wc.is_null() {
        return -libc::EINVAL;
    }
    let _returned = cq.nic.activity.entering();
    let want = num_entries as usize;
    let mut buf = [NO_COMPLETION; BATCH];
    let mut done = 0;
    let mut fresh = cq.fresh();
    while done < want {
        // Runs the engine first when the ring is empty (manual progress)
        // and not fresh.
        let n = cq.take(&mut buf[..(want - done).min(BATCH)], fresh);
        fresh = false;
        for (i, w) in buf[..n].iter().enumerate() {
            // SAFETY: the caller's array has num_entries slots; done + i <
            // num_entries.
            unsafe { wc.add(done + i).write(to_wc(w, cq.ctx.dev.addr.is_ipv4())) };
        }
        done += n;
        // Nothing, even after running the engine: done. A caller asking for
        // one completion (a latency loop) has it. A caller asking for many
        // (a throughput loop) that drained the ring gets one more turn of
        // the engine first, which takes the ACKs waiting on the socket and
        // keeps its send queue moving, as `ndv perf`'s loop does.
        if n == 0 || want == 1 {
            break;
        }
    }
    done as c_int
}

/// What a UD receive's `sl` says on RoCE, as libmlx5 reports it from the
/// CQE: the packet's network header, 2 for IPv4 and 1 for IPv6 (RoCE has no
/// service level on the wire). UCX's `ud_verbs` reads it to know where the
/// destination address sits in the GRH area (the IPv4 header fills its last
/// 20 bytes) and drops every datagram whose address is not its own, so with
/// 0 there it dropped all IPv4 ones. A device's datagrams are all of its
/// address's family. Other completions: 0.
pub(crate) fn roce_packet_type(grh: bool, ipv4: bool) -> u8 {
    match (grh, ipv4) {
        (false, _) => 0,
        (true, true) => 2,
        (true, false) => 1,
    }
}

/// A completion as `struct ibv_wc`, of a CQ whose device's address is
/// IPv4 (`ipv4`) or IPv6.
pub(crate) fn to_wc(w: &WorkCompletion, ipv4: bool) -> ibv_wc {
    let opcode = match w.opcode {
        WcOpcode::Send => IBV_WC_SEND,
        WcOpcode::RdmaWrite => IBV_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => IBV_WC_RDMA_READ,
        WcOpcode::CompSwap => IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
        WcOpcode::Recv => IBV_WC_RECV,
        WcOpcode::RecvRdmaWithImm => IBV_WC_RECV_RDMA_WITH_IMM,
    };
    let (imm_data, flags) = match (w.imm, w.invalidated_rkey) {
        // Immediate data is __be32: as it was on the wire.
        (Some(imm), _) => (imm.to_be(), IBV_WC_WITH_IMM),
        (None, Some(rkey)) => (rkey, IBV_WC_WITH_INV),
        (None, None) => (0, 0),
    };
    // A UD receive: the buffer starts with the GRH area.
    let flags = if w.grh { flags | IBV_WC_GRH } else { flags };
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as c_int,
        opcode,
        vendor_err: 0,
        byte_len: w.byte_len,
        imm_data,
        qp_num: w.qpn,
        src_qp: w.src_qp,
        wc_flags: flags,
        pkey_index: 0,
        slid: 0,
        sl: roce_packet_type(w.grh, ipv4),
        dlid_path_bits: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::fresh_at;

    #[test]
    fn a_ring_is_fresh_only_within_the_window_after_a_poll_took_from_it() {
        let window = 5_000;
        // Never taken from: not fresh, whatever the time.
        assert!(!fresh_at(0, 1, window));
        assert!(!fresh_at(0, u64::MAX, window));
        assert!(fresh_at(1_000_000, 1_000_000, window));
        assert!(fresh_at(1_000_000, 1_004_999, window));
        assert!(!fresh_at(1_000_000, 1_005_000, window));
        // Another thread's poll stamped a later tick than this one read.
        assert!(fresh_at(1_000_100, 1_000_000, window));
        // A window of 0 turns the rule off.
        assert!(!fresh_at(1_000_000, 1_000_000, 0));
    }
}
