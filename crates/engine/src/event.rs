//! Eventfd doorbells: how the engine and application threads wake each other.
//!
//! An eventfd is a kernel counter with a file descriptor: writing adds, reading
//! takes the count and resets it, and it polls readable while non-zero. The
//! engine sleeps in `poll` on its socket plus a doorbell eventfd; applications
//! wait on a completion queue's eventfd. Waking is only needed when the other
//! side sleeps, so writers check a "sleeping" flag first and the hot path makes
//! no system call at all.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A non-blocking eventfd.
///
/// # Example
///
/// ```
/// use ndverbs_engine::event::EventFd;
/// use std::time::Duration;
/// let ev = EventFd::new()?;
/// assert!(!ev.wait(Some(Duration::ZERO))?);
/// ev.signal();
/// ev.signal();
/// assert!(ev.wait(Some(Duration::from_secs(1)))?); // readable: poll/epoll on `ev.fd()` see it too
/// assert_eq!(ev.drain(), 2); // and reset
/// assert_eq!(ev.drain(), 0);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new eventfd with count 0.
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        Ok(EventFd {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Adds one to the counter (wakes pollers).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64. EAGAIN (counter saturated)
        // still leaves the fd readable, which is all a signal must do.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Takes the counter; returns how many signals were pending (0 if none).
    pub fn drain(&self) -> u64 {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            v
        } else {
            0
        }
    }

    /// Blocks until signalled or `timeout` passes (None: forever); returns true if signalled.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        Ok(wait_readable(&[self.fd()], timeout)?
            .first()
            .copied()
            .unwrap_or(false))
    }

    /// The descriptor, for the caller's own poll/epoll/async reactor.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Waits until one of `fds` is readable or `timeout` passes; returns which are.
pub fn wait_readable(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    Ok(wait_events(fds, timeout)?
        .into_iter()
        .map(|ev| ev & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0)
        .collect())
}

/// As [`wait_readable`], returning each descriptor's `poll` events
/// (`POLLIN`, `POLLERR`, …; 0 when interrupted).
pub(crate) fn wait_events(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Vec<i16>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // ppoll, not poll: protocol timers (the completer's probe) are shorter
    // than poll's millisecond resolution. Round up to whole microseconds.
    let ts = timeout.map(|d| {
        let us = d.as_nanos().div_ceil(1000);
        libc::timespec {
            tv_sec: (us / 1_000_000).min(i32::MAX as u128) as libc::time_t,
            tv_nsec: ((us % 1_000_000) * 1000) as libc::c_long,
        }
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `p` is a live array of `p.len()` pollfd structs; `ts_ptr` is
    // null or points to `ts`, alive for the call; no signal mask is passed.
    let n = unsafe {
        libc::ppoll(
            p.as_mut_ptr(),
            p.len() as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![0; fds.len()]);
        }
        return Err(e);
    }
    Ok(p.iter().map(|x| x.revents).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_wait_drain() {
        let e = EventFd::new().unwrap();
        assert!(!e.wait(Some(Duration::from_millis(1))).unwrap());
        e.signal();
        e.signal();
        assert!(e.wait(Some(Duration::from_secs(1))).unwrap());
        assert_eq!(e.drain(), 2);
        assert_eq!(e.drain(), 0);
    }
}
