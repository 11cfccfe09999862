//! Asynchronous events: `context->async_fd` and `ibv_get_async_event`.
//!
//! rdma-core reads a 16-byte record from the context's async descriptor:
//! the element (a CQ, QP, SRQ or WQ pointer, or a port number) and the
//! event type. Here the descriptor is the read end of a pipe the library
//! writes those records into, so it blocks, polls, goes non-blocking
//! (`EAGAIN`) and wakes epoll exactly as the kernel's does; the application
//! may set `O_NONBLOCK` on it (UCX does).

use crate::abi::{ibv_async_event, ibv_context};
use crate::device::Ctx;
use crate::ffi::{self, lookup, ret_minus1};
use crate::sys::{self, Fd};
use libc::{c_int, c_void};

/// The record on the pipe: `{u64 element; u32 event_type; u32 reserved}`.
const RECORD: usize = 16;

/// A context's async event pipe.
#[derive(Debug)]
pub(crate) struct AsyncEvents {
    read: Fd,
    write: Fd,
}

impl AsyncEvents {
    pub(crate) fn new() -> Result<Self, c_int> {
        let (read, write) = sys::pipe()?;
        Ok(AsyncEvents { read, write })
    }

    /// The descriptor applications poll (`ibv_context.async_fd`).
    pub(crate) fn fd(&self) -> c_int {
        self.read.raw()
    }

    /// Queues an event about `element`.
    #[allow(
        dead_code,
        reason = "the engine reports no asynchronous events to the C library yet"
    )]
    pub(crate) fn post(&self, element: *mut c_void, event_type: c_int) {
        let mut rec = [0u8; RECORD];
        rec[..8].copy_from_slice(&(element as u64).to_ne_bytes());
        rec[8..12].copy_from_slice(&event_type.to_ne_bytes());
        let _ = sys::write_record(&self.write, &rec);
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    ret_minus1(|| {
        let ctx = lookup::<Ctx>(context)?;
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        let mut rec = [0u8; RECORD];
        sys::read_record(ctx.async_events.fd(), &mut rec)?;
        let element = u64::from_ne_bytes(rec[..8].try_into().expect("8 bytes")) as *mut c_void;
        let event_type = c_int::from_ne_bytes(rec[8..12].try_into().expect("4 bytes"));
        // SAFETY: the caller's struct to fill.
        unsafe {
            ffi::write_out(
                event,
                ibv_async_event {
                    element,
                    event_type,
                },
            )
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {
    // Nothing waits for async acknowledgements: no event is ever queued
    // for an object, so destroying one never has to wait for them.
}
