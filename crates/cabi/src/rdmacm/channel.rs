//! Event channels and events: `rdma_create_event_channel`,
//! `rdma_get_cm_event`, `rdma_ack_cm_event`.
//!
//! librdmacm reads events from `/dev/infiniband/rdma_cm` through the
//! channel's descriptor; here the descriptor is the read end of a pipe, and
//! each queued event writes one byte into it. So the descriptor blocks,
//! polls, goes non-blocking (`O_NONBLOCK` through `fcntl`: `EAGAIN`) and
//! wakes epoll exactly as the kernel's does, and `rdma_get_cm_event` reads
//! a byte and then takes the event at the head of the channel's queue. A
//! byte whose event went away (its id was destroyed or moved to another
//! channel) finds nothing and the read goes on, as the kernel drops the
//! events of a destroyed id.
//!
//! An event the application holds counts against its id until
//! `rdma_ack_cm_event`: `rdma_destroy_id` and `rdma_migrate_id` wait for
//! those acknowledgements, as in rdma-core.

use super::abi::*;
use super::id::Shared;
use crate::ffi::{self, lookup, ret_minus1, ret_ptr, Kind, Object};
use crate::sys::{self, Fd};
use libc::{c_int, c_void};
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// What a queued event carries besides its type.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnData {
    pub(crate) private_data: Vec<u8>,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    pub(crate) srq: u8,
    pub(crate) qp_num: u32,
    /// A UD id's event: `param.ud` instead of `param.conn`.
    pub(crate) ud: Option<UdData>,
}

/// What a UD id's event reports in `param.ud` besides its private data:
/// the peer's QP and Q_Key and the address handle attributes to reach it
/// (RoCE: global, the peer's GID, our GID 0, port 1), as the kernel's
/// `ib_init_ah_attr_from_path` fills them.
#[derive(Debug, Clone, Default)]
pub(crate) struct UdData {
    pub(crate) qp_num: u32,
    pub(crate) qkey: u32,
    /// The peer's GID; `None` leaves `ah_attr` zero (a connection
    /// request's, as the kernel's).
    pub(crate) dgid: Option<[u8; 16]>,
    pub(crate) flow_label: u32,
    pub(crate) hop_limit: u8,
    pub(crate) traffic_class: u8,
}

/// An event not yet taken by the application.
pub(crate) struct Queued {
    pub(crate) id: Arc<Shared>,
    pub(crate) listen_id: Option<Arc<Shared>>,
    pub(crate) ty: EventType,
    pub(crate) status: c_int,
    pub(crate) conn: ConnData,
}

/// A channel's state, shared with the ids on it.
pub(crate) struct ChanInner {
    read: Fd,
    write: Fd,
    queue: Mutex<VecDeque<Queued>>,
}

impl ChanInner {
    pub(crate) fn new() -> Result<Arc<ChanInner>, c_int> {
        let (read, write) = sys::pipe()?;
        sys::set_nonblocking(&write);
        Ok(Arc::new(ChanInner {
            read,
            write,
            queue: Mutex::new(VecDeque::new()),
        }))
    }

    /// The descriptor applications read and poll.
    pub(crate) fn fd(&self) -> c_int {
        self.read.raw()
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Queued>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `ev` and makes the descriptor readable.
    pub(crate) fn push(&self, ev: Queued) {
        self.queue().push_back(ev);
        // A full pipe (64 Ki events unread) still has readable bytes: the
        // reader loops until the queue is empty.
        let _ = sys::write_record(&self.write, &[1]);
    }

    /// Takes the queued events of `id` out (destroyed or moving).
    pub(crate) fn take_of(&self, id: &Arc<Shared>) -> Vec<Queued> {
        let mut q = self.queue();
        let (mine, rest): (Vec<Queued>, Vec<Queued>) =
            q.drain(..).partition(|e| Arc::ptr_eq(&e.id, id));
        q.extend(rest);
        mine
    }

    /// The next event: a byte from the pipe (blocking as the descriptor
    /// says), then the head of the queue.
    pub(crate) fn next(&self) -> Result<Queued, c_int> {
        loop {
            let mut b = [0u8; 1];
            sys::read_record(self.fd(), &mut b)?;
            if let Some(e) = self.queue().pop_front() {
                return Ok(e);
            }
        }
    }
}

/// `struct rdma_event_channel` and our state.
#[repr(C)]
pub(crate) struct Channel {
    pub_: UnsafeCell<rdma_event_channel>,
    magic: u64,
    pub(crate) inner: Arc<ChanInner>,
}

// SAFETY: the public struct is the first field.
unsafe impl Object for Channel {
    const KIND: Kind = Kind::CmChannel;
    const MAGIC: u64 = 0x6e64_7663_6d63_0010;
    type Public = rdma_event_channel;
    fn magic(&self) -> u64 {
        self.magic
    }
}

// SAFETY: the public struct is written only before publication.
unsafe impl Sync for Channel {}

/// A new channel object for `inner`.
pub(crate) fn publish(inner: Arc<ChanInner>) -> *mut rdma_event_channel {
    let fd = inner.fd();
    let (_, p) = ffi::publish(Channel {
        pub_: UnsafeCell::new(rdma_event_channel { fd }),
        magic: Channel::MAGIC,
        inner,
    });
    p
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    ret_ptr(|| {
        super::devices::init()?;
        Ok(publish(ChanInner::new()?))
    })
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    ffi::guarded((), || {
        if let Ok(c) = lookup::<Channel>(channel) {
            ffi::release(c, |_| {});
        }
    })
}

/// An event handed to the application, until acknowledged.
#[repr(C)]
pub(crate) struct Event {
    pub_: UnsafeCell<rdma_cm_event>,
    magic: u64,
    /// What `param.conn.private_data` points to.
    data: Vec<u8>,
    pub(crate) id: Arc<Shared>,
}

// SAFETY: the public struct is the first field.
unsafe impl Object for Event {
    const KIND: Kind = Kind::CmEvent;
    const MAGIC: u64 = 0x6e64_7663_6d65_0011;
    type Public = rdma_cm_event;
    fn magic(&self) -> u64 {
        self.magic
    }
}

// SAFETY: the public struct is written only before publication.
unsafe impl Sync for Event {}

/// The next event of `ch` for the application (counted against its id),
/// or the read's errno.
pub(crate) fn get_event(ch: &ChanInner) -> Result<*mut rdma_cm_event, c_int> {
    loop {
        let q = ch.next()?;
        let Some(id_ptr) = q.id.report() else {
            // Its id was destroyed after it was queued.
            continue;
        };
        let listen_ptr = q
            .listen_id
            .as_ref()
            .map_or(std::ptr::null_mut(), |l| l.public());
        let data = q.conn.private_data;
        let conn = rdma_conn_param {
            private_data: if data.is_empty() {
                std::ptr::null()
            } else {
                data.as_ptr() as *const c_void
            },
            private_data_len: data.len().min(255) as u8,
            responder_resources: q.conn.responder_resources,
            initiator_depth: q.conn.initiator_depth,
            flow_control: 0,
            retry_count: q.conn.retry_count,
            rnr_retry_count: q.conn.rnr_retry_count,
            srq: q.conn.srq,
            qp_num: q.conn.qp_num,
        };
        // SAFETY: plain C data; all zeroes is valid for the union.
        let mut param: rdma_cm_event_param = unsafe { std::mem::zeroed() };
        match &q.conn.ud {
            None => param.conn = conn,
            Some(u) => {
                // SAFETY: plain C data; all zeroes is valid.
                let mut ah: crate::abi::ibv_ah_attr = unsafe { std::mem::zeroed() };
                if let Some(dgid) = u.dgid {
                    ah.is_global = 1;
                    ah.port_num = 1;
                    ah.grh.dgid = crate::abi::ibv_gid { raw: dgid };
                    ah.grh.sgid_index = 0;
                    ah.grh.flow_label = u.flow_label;
                    ah.grh.hop_limit = u.hop_limit;
                    ah.grh.traffic_class = u.traffic_class;
                }
                param.ud = rdma_ud_param {
                    private_data: conn.private_data,
                    private_data_len: conn.private_data_len,
                    ah_attr: ah,
                    qp_num: u.qp_num,
                    qkey: u.qkey,
                };
            }
        }
        let (_, p) = ffi::publish(Event {
            pub_: UnsafeCell::new(rdma_cm_event {
                id: id_ptr,
                listen_id: listen_ptr,
                event: q.ty as c_int,
                status: q.status,
                param,
            }),
            magic: Event::MAGIC,
            // The Vec's buffer does not move with the Vec.
            data,
            id: q.id,
        });
        return Ok(p);
    }
}

#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    ret_minus1(|| {
        let ch = lookup::<Channel>(channel)?.inner.clone();
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        let e = get_event(&ch)?;
        // SAFETY: the caller's out-pointer (checked non-NULL).
        unsafe { *event = e };
        Ok(())
    })
}

/// Acknowledges `event` (also the library's own, for synchronous ids).
pub(crate) fn ack(event: *mut rdma_cm_event) -> Result<(), c_int> {
    let e = lookup::<Event>(event)?;
    let id = e.id.clone();
    ffi::release(e, |_| {});
    id.acked();
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    ret_minus1(|| ack(event))
}
