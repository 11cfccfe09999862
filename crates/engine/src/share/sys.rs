//! The system calls of a shared port: attaching the steering program to
//! the reuseport group, and `flock(2)`. All of the module's `unsafe` is here.

use super::cbpf::Insn;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// `SO_ATTACH_REUSEPORT_CBPF` (asm-generic/socket.h).
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Attaches `prog` to the reuseport group of the socket `fd` (it replaces
/// the group's program, whichever member attached it).
pub(super) fn attach_reuseport_cbpf(fd: RawFd, prog: &[Insn]) -> io::Result<()> {
    let len = u16::try_from(prog.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "program too long"))?;
    let fprog = libc::sock_fprog {
        len,
        // The kernel only reads the program; `Insn` is `struct sock_filter`.
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    const _: () = assert!(std::mem::size_of::<Insn>() == std::mem::size_of::<libc::sock_filter>());
    // SAFETY: `fprog` and the instructions it points to outlive the call,
    // and its size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes descriptor `fd` (a member socket the link owns) refer to a new,
/// unbound UDP socket instead: the member socket loses this descriptor (it
/// leaves the group when its last one closes), and the link keeps a valid
/// descriptor that receives nothing.
pub(super) fn detach(fd: RawFd, v6: bool) -> io::Result<()> {
    let domain = if v6 {
        socket2::Domain::IPV6
    } else {
        socket2::Domain::IPV4
    };
    let fresh = socket2::Socket::new(domain, socket2::Type::DGRAM, None)?;
    fresh.set_nonblocking(true)?;
    // SAFETY: both descriptors are open; dup2 replaces `fd` atomically, so
    // no other thread can see it closed or reused meanwhile.
    let rc = unsafe { libc::dup2(fresh.as_raw_fd(), fd) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes an exclusive `flock` on `f` without waiting: false if another
/// open file holds one (in this process or any other).
pub(super) fn try_lock(f: &File) -> io::Result<bool> {
    loop {
        // SAFETY: flock on a descriptor the File owns.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// The effective user ID: the kernel lets only sockets of one effective user share a port, so the files are per effective user.
pub(super) fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
