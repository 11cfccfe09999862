//! Registered memory the application has since unmapped.
//!
//! A kernel provider pins the pages of a memory region, so after the
//! program unmaps them the region still has its pages and a peer's READ or
//! WRITE lands somewhere harmless. Here the engine runs in the program's
//! address space and touches the memory by address (copies, atomics, the
//! ICRC over a zero-copy payload), so the same access would be a SIGSEGV in
//! the middle of the engine: a crash of the program because of a peer.
//!
//! The library therefore keeps the address ranges of the regions it
//! registered in place and installs a `SIGSEGV`/`SIGBUS` handler (chained to
//! whatever handler was there) on the first registration. A fault whose
//! address is *unmapped* (`SEGV_MAPERR`; `BUS_ADRERR` for a file mapping
//! truncated under it) and inside such a region gets a private zero page
//! mapped at the faulting page, and the faulting instruction runs again and
//! succeeds: the access reads zeros or writes into a page nobody reads. The
//! handler then tells a helper thread which region it was, and the helper
//! revokes the region's keys, so from the next access on the peer's
//! requests fail their key check and it sees a remote access error, as
//! with memory whose registration is gone. Any other fault goes to the
//! previous handler (or the default action: the program dies as it would
//! have).
//!
//! The program's own access to such memory is repaired the same way (the
//! handler cannot tell the engine's accesses from the program's): it reads
//! zeros instead of dying, where with a kernel provider it would have died.
//!
//! What this cannot do: memory the program unmapped *and mapped again* at
//! the same address is reached like any mapped memory (a kernel's pinned
//! pages would have kept the old contents apart); a page made inaccessible
//! with `mprotect` is not unmapped, and faults as before; the zero pages
//! stay mapped for the life of the process (unmapping them later could
//! remove a mapping the program has made there since); and a program that
//! installs its own `SIGSEGV` handler after registering memory without
//! chaining to ours loses this protection.
//!
//! The handler is async-signal-safe: it reads an immutable snapshot of the
//! ranges (replaced, never changed, by registrations; a reader count keeps
//! a snapshot alive while a handler reads it), calls `mmap` and `write`,
//! and nothing else.

use crate::sys::{self, Fd};
use libc::{c_int, c_void, siginfo_t};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// A watched region: `[start, end)` and the id the helper revokes by.
#[derive(Debug, Clone, Copy)]
struct Range {
    start: usize,
    end: usize,
    id: u64,
}

/// Sorted by `start`; replaced whole on every change.
type Snapshot = Vec<Range>;

static SNAPSHOT: AtomicPtr<Snapshot> = AtomicPtr::new(std::ptr::null_mut());
/// Handlers reading a snapshot right now.
static READERS: AtomicUsize = AtomicUsize::new(0);
/// Serialises writers (registrations), never taken by the handler.
static WRITER: Mutex<()> = Mutex::new(());
/// Where the handler reports a faulted region's id (the helper reads).
static REPORT_FD: AtomicI32 = AtomicI32::new(-1);
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static INSTALL: Once = Once::new();

/// `si_code` of a SIGSEGV at an address with no mapping (`<asm/siginfo.h>`).
const SEGV_MAPERR: c_int = 1;
/// `si_code` of a SIGBUS at a non-existent physical address, such as a file
/// page past the end of a truncated file.
const BUS_ADRERR: c_int = 2;

/// The handlers found installed when ours went in (index 0 SIGSEGV, 1 SIGBUS).
struct Previous(std::cell::UnsafeCell<[libc::sigaction; 2]>);
// SAFETY: written once, inside INSTALL, before our handler is installed;
// read-only afterwards.
unsafe impl Sync for Previous {}
// SAFETY: sigaction is plain C data; all zeroes is SIG_DFL with no flags.
static PREVIOUS: Previous = Previous(std::cell::UnsafeCell::new(unsafe { std::mem::zeroed() }));

/// Starts watching `[start, start + len)` as region `id`; `revoke(id)` is
/// called (from the helper thread) after a fault in it was repaired.
pub(crate) fn watch(start: usize, len: usize, id: u64, revoke: fn(u64)) {
    install(revoke);
    replace(|s| {
        let end = start.saturating_add(len);
        let at = s.partition_point(|r| r.start < start);
        s.insert(at, Range { start, end, id });
    });
}

/// Stops watching region `id`.
pub(crate) fn unwatch(id: u64) {
    replace(|s| s.retain(|r| r.id != id));
}

/// Publishes a changed copy of the snapshot and frees the old one once no
/// handler reads it.
fn replace(change: impl FnOnce(&mut Snapshot)) {
    let _w = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    let old = SNAPSHOT.load(Ordering::SeqCst);
    // SAFETY: snapshots are only freed below, under WRITER, which we hold.
    let mut next: Snapshot = if old.is_null() {
        Vec::new()
    } else {
        unsafe { (*old).clone() }
    };
    change(&mut next);
    SNAPSHOT.store(Box::into_raw(Box::new(next)), Ordering::SeqCst);
    // A handler that counted itself in before the store may still read
    // `old`; one that counts itself in after it reads the new snapshot.
    while READERS.load(Ordering::SeqCst) != 0 {
        std::hint::spin_loop();
    }
    if !old.is_null() {
        // SAFETY: `old` came from Box::into_raw above (an earlier call), is
        // no longer published, and no handler reads it.
        drop(unsafe { Box::from_raw(old) });
    }
}

/// Calls `f` with the id of each watched region holding `addr` (memory may
/// be registered more than once); true if there was one.
fn regions_at(addr: usize, mut f: impl FnMut(u64)) -> bool {
    READERS.fetch_add(1, Ordering::SeqCst);
    let snap = SNAPSHOT.load(Ordering::SeqCst);
    let mut hit = false;
    if !snap.is_null() {
        // SAFETY: a published snapshot is not freed while READERS > 0.
        let s = unsafe { &*snap };
        let i = s.partition_point(|r| r.start <= addr);
        for r in s[..i].iter().filter(|r| addr < r.end) {
            hit = true;
            f(r.id);
        }
    }
    READERS.fetch_sub(1, Ordering::SeqCst);
    hit
}

fn install(revoke: fn(u64)) {
    INSTALL.call_once(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE.store(page as usize, Ordering::Relaxed);
        }
        let Ok((read, write)) = sys::pipe() else {
            return;
        };
        // The handler must never block (the engine may hold its lock while
        // it faults, and the helper needs that lock): with the pipe full,
        // the report is dropped — the region's earlier reports still wait.
        sys::set_nonblocking(&write);
        REPORT_FD.store(write.raw(), Ordering::Release);
        // The write end lives as long as the process (the handler may run
        // at any time).
        std::mem::forget(write);
        let spawned = std::thread::Builder::new()
            .name("ndv-unmapped".into())
            .spawn(move || revoker(read, revoke));
        if spawned.is_err() {
            return;
        }
        // SAFETY: PREVIOUS is written only here, once, before the handler
        // that reads it is installed; the sigaction structs are valid.
        unsafe {
            let prev = &mut *PREVIOUS.0.get();
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fault as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGSEGV, &sa, &mut prev[0]);
            libc::sigaction(libc::SIGBUS, &sa, &mut prev[1]);
        }
    });
}

/// The helper: revokes each region the handler reports.
fn revoker(read: Fd, revoke: fn(u64)) {
    let mut rec = [0u8; 8];
    while sys::read_record(read.raw(), &mut rec).is_ok() {
        revoke(u64::from_ne_bytes(rec));
    }
}

extern "C" fn on_fault(sig: c_int, info: *mut siginfo_t, uctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    let unmapped = (sig == libc::SIGSEGV && code == SEGV_MAPERR)
        || (sig == libc::SIGBUS && code == BUS_ADRERR);
    if unmapped && regions_at(addr, |_| {}) {
        let page = PAGE.load(Ordering::Relaxed);
        let at = addr & !(page - 1);
        // An unmapped page: claim exactly it (NOREPLACE cannot take
        // anything the program has there). A truncated file page is
        // mapped, so it is replaced.
        let fixed = if sig == libc::SIGSEGV {
            libc::MAP_FIXED_NOREPLACE
        } else {
            libc::MAP_FIXED
        };
        // SAFETY: maps one anonymous page at `at`, where the faulting
        // access (inside a region the application registered) expects
        // memory; nothing of the program is there (SIGSEGV) or what is
        // there is a file page past its end (SIGBUS).
        let p = unsafe {
            libc::mmap(
                at as *mut c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | fixed,
                -1,
                0,
            )
        };
        if p as usize == at {
            let fd = REPORT_FD.load(Ordering::Acquire);
            regions_at(addr, |id| {
                // SAFETY: write(2) of 8 bytes is async-signal-safe.
                unsafe { libc::write(fd, &id as *const u64 as *const c_void, 8) };
            });
            return;
        }
        if p != libc::MAP_FAILED {
            // A kernel without MAP_FIXED_NOREPLACE put it elsewhere.
            // SAFETY: the page just mapped, which nobody uses.
            unsafe { libc::munmap(p, page) };
        }
    }
    // SAFETY: forwarded from the kernel's arguments.
    unsafe { chain(sig, info, uctx) };
}

/// Hands a fault that is not ours to the handler installed before ours, or
/// to the default action.
unsafe fn chain(sig: c_int, info: *mut siginfo_t, uctx: *mut c_void) {
    // SAFETY: PREVIOUS is read-only once our handler is installed.
    let prev = unsafe { &(*PREVIOUS.0.get())[usize::from(sig == libc::SIGBUS)] };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // The kernel would not ignore a fault: restore the default action;
        // returning re-runs the faulting instruction, which then ends the
        // process as it would have without us. A signal someone sent
        // (si_code ≤ 0) does not come back by itself: raise it again.
        // SAFETY: a zeroed sigaction is SIG_DFL; `info` is the kernel's.
        unsafe {
            let dfl: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
            if (*info).si_code <= 0 {
                libc::raise(sig);
            }
        }
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: an SA_SIGINFO handler has this signature.
        let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, uctx);
    } else {
        // SAFETY: a plain handler has this signature.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// Whether `[addr, addr + len)` is mapped, readable and (if `write`)
/// writable now, per `/proc/self/maps`: what pinning the pages would
/// establish (`EFAULT` otherwise).
pub(crate) fn check_mapped(addr: usize, len: usize, write: bool) -> Result<(), c_int> {
    let end = addr.checked_add(len).ok_or(libc::EFAULT)?;
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|_| libc::EFAULT)?;
    let mut at = addr;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((s, e)) = range.split_once('-') else {
            continue;
        };
        let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)) else {
            continue;
        };
        if e <= at {
            continue;
        }
        if s > at {
            break;
        }
        let p = perms.as_bytes();
        if p.first() != Some(&b'r') || (write && p.get(1) != Some(&b'w')) {
            return Err(libc::EFAULT);
        }
        at = e;
        if at >= end {
            return Ok(());
        }
    }
    Err(libc::EFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_checks_follow_the_maps() {
        let v = vec![0u8; 10_000];
        assert_eq!(check_mapped(v.as_ptr() as usize, v.len(), true), Ok(()));
        assert_eq!(check_mapped(8, 16, false), Err(libc::EFAULT));
        static RO: [u8; 4] = [1, 2, 3, 4];
        assert_eq!(check_mapped(RO.as_ptr() as usize, 4, false), Ok(()));
        assert_eq!(
            check_mapped(RO.as_ptr() as usize, 4, true),
            Err(libc::EFAULT)
        );
        assert_eq!(check_mapped(usize::MAX - 2, 8, false), Err(libc::EFAULT));
    }

    #[test]
    fn snapshots_find_the_region_of_an_address() {
        watch(0x1000, 0x100, 7, |_| {});
        watch(0x3000, 0x1000, 8, |_| {});
        let ids = |addr| {
            let mut v = Vec::new();
            regions_at(addr, |id| v.push(id));
            v
        };
        watch(0x3800, 0x10, 9, |_| {});
        assert_eq!(ids(0x10ff), [7]);
        assert_eq!(ids(0x1100), []);
        assert_eq!(ids(0x3fff), [8]);
        assert_eq!(ids(0x3808), [8, 9]);
        unwatch(7);
        assert_eq!(ids(0x1000), []);
        unwatch(8);
        unwatch(9);
    }
}
