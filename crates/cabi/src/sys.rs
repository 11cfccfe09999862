//! The system calls behind the library's file descriptors (pipes, epoll,
//! eventfds), each wrapped once with what it relies on. Every descriptor is
//! created close-on-exec, as rdma-core's are.

use libc::c_int;
use std::io;

/// An owned descriptor, closed on drop.
#[derive(Debug)]
pub(crate) struct Fd(c_int);

impl Fd {
    pub(crate) fn raw(&self) -> c_int {
        self.0
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: an open descriptor this value owns, closed once.
        unsafe { libc::close(self.0) };
    }
}

fn check(rc: c_int) -> Result<c_int, c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    } else {
        Ok(rc)
    }
}

/// A pipe: (read end, write end).
pub(crate) fn pipe() -> Result<(Fd, Fd), c_int> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    Ok((Fd(fds[0]), Fd(fds[1])))
}

/// An epoll instance.
pub(crate) fn epoll() -> Result<Fd, c_int> {
    // SAFETY: no pointers; returns a new descriptor or -1.
    check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }).map(Fd)
}

/// Watches `fd` for readability in `ep`, tagged with `data`.
pub(crate) fn epoll_add(ep: &Fd, fd: c_int, data: u64) -> Result<(), c_int> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: data,
    };
    // SAFETY: `ev` is a valid epoll_event for the duration of the call.
    check(unsafe { libc::epoll_ctl(ep.raw(), libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(drop)
}

/// Stops watching `fd`.
pub(crate) fn epoll_del(ep: &Fd, fd: c_int) {
    // EPOLL_CTL_DEL ignores the event, but kernels before 2.6.9 want one.
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: `ev` is a valid epoll_event for the duration of the call.
    unsafe { libc::epoll_ctl(ep.raw(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
}

/// Waits for one ready descriptor of `ep` (`timeout_ms` -1: no limit);
/// `Ok(None)` when the time passed, the tag otherwise.
pub(crate) fn epoll_wait_one(ep: c_int, timeout_ms: c_int) -> Result<Option<u64>, c_int> {
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: room for exactly one event, as maxevents says.
    let n = check(unsafe { libc::epoll_wait(ep, &mut ev, 1, timeout_ms) })?;
    Ok((n == 1).then_some(ev.u64))
}

/// Puts `fd` in non-blocking mode.
pub(crate) fn set_nonblocking(fd: &Fd) {
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(fd.raw(), libc::F_GETFL);
        libc::fcntl(fd.raw(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
}

/// True if `fd` is in non-blocking mode (the application may switch it).
pub(crate) fn is_nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL takes no argument.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// An eventfd (counter mode).
pub(crate) fn eventfd() -> Result<Fd, c_int> {
    // SAFETY: no pointers; returns a new descriptor or -1.
    check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) }).map(Fd)
}

/// Adds one to an eventfd's counter.
pub(crate) fn eventfd_signal(fd: &Fd) {
    let one = 1u64;
    // SAFETY: writes the 8 bytes of `one`.
    unsafe { libc::write(fd.raw(), &one as *const u64 as *const libc::c_void, 8) };
}

/// Clears a (non-blocking) eventfd's counter.
pub(crate) fn eventfd_clear(fd: &Fd) {
    let mut v = 0u64;
    // SAFETY: reads at most 8 bytes into `v`.
    unsafe { libc::read(fd.raw(), &mut v as *mut u64 as *mut libc::c_void, 8) };
}

/// Reads exactly `buf.len()` bytes as one record from a pipe (records are
/// written whole, at most PIPE_BUF long, so they arrive whole), retrying on
/// EINTR; the descriptor's own blocking mode applies (`EAGAIN` when
/// non-blocking and empty).
pub(crate) fn read_record(fd: c_int, buf: &mut [u8]) -> Result<(), c_int> {
    loop {
        // SAFETY: reads at most buf.len() bytes into `buf`.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        if n == buf.len() as isize {
            return Ok(());
        }
        if n < 0 {
            let e = io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        // A short or empty read: the writer end is gone.
        return Err(libc::EIO);
    }
}

/// Writes one record to a pipe.
pub(crate) fn write_record(fd: &Fd, buf: &[u8]) -> Result<(), c_int> {
    // SAFETY: writes buf.len() bytes from `buf`.
    let n = unsafe { libc::write(fd.raw(), buf.as_ptr() as *const libc::c_void, buf.len()) };
    if n == buf.len() as isize {
        Ok(())
    } else {
        Err(libc::EIO)
    }
}
