//! The edge every exported function crosses: errno, panics, and turning the
//! pointers applications pass back into our objects.
//!
//! **Return conventions** (rdma-core's, per call): calls that create an
//! object return it or NULL with `errno` set ([`ret_ptr`]); most other verbs
//! return 0 or the errno value itself ([`ret_errno`]); a few return 0 or -1
//! with `errno` set ([`ret_minus1`]); `ibv_poll_cq` returns a negative value
//! on error. A panic never unwinds into C: it becomes `EIO` (or the call's
//! failure value) with the object untouched as far as the panic allows.
//!
//! **Pointers.** Every object this library hands out is a `Box` of a
//! `#[repr(C)]` struct whose first field (at [`Object::PUBLIC_OFFSET`] for
//! the context) is the public C struct, followed by private fields. On the
//! control path a pointer is accepted only if it is in the live-object
//! registry under the right kind ([`lookup`]), so NULL, a freed object or
//! another library's object is `EINVAL`, never a dereference. The data path
//! (reached through `ibv_context.ops`, so the application already
//! dereferenced the object to find our function) checks a per-kind magic
//! number instead ([`fast`]), which costs one load.
//!
//! The public struct sits in an `UnsafeCell`: applications write some of
//! its fields (`cq_context`, `qp_context`, …) while we hold references to
//! the object, so we only ever touch it through raw pointers.

use libc::c_int;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, OnceLock};

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // valid for the thread's lifetime.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's `errno`.
pub(crate) fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Runs `f`; a panic becomes `on_panic` (and `errno = EIO`).
pub(crate) fn guarded<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// For calls returning an object: the pointer, or NULL with `errno` set.
pub(crate) fn ret_ptr<T>(f: impl FnOnce() -> Result<*mut T, c_int>) -> *mut T {
    guarded(Err(libc::EIO), f).unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// For calls returning 0 or an errno value (which is also left in `errno`,
/// as several providers do).
pub(crate) fn ret_errno(f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    match guarded(Err(libc::EIO), f) {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    }
}

/// For calls returning 0 or -1 with `errno` set.
pub(crate) fn ret_minus1(f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    match guarded(Err(libc::EIO), f) {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// The kinds of object handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Device,
    Context,
    Pd,
    Mr,
    Channel,
    Cq,
    Qp,
    Srq,
    Ah,
    CmChannel,
    CmEvent,
    CmId,
}

/// One of our objects: a `#[repr(C)]` struct holding a public C struct.
///
/// # Safety
/// `PUBLIC_OFFSET` must be the byte offset of the public struct inside
/// `Self`, and `MAGIC` must sit in a field [`Object::magic`] reads.
pub(crate) unsafe trait Object: Sized + 'static {
    const KIND: Kind;
    const PUBLIC_OFFSET: usize = 0;
    /// A value no other kind uses, stored in every live object of this kind.
    const MAGIC: u64;
    /// The public C struct.
    type Public;
    fn magic(&self) -> u64;
}

fn registry() -> &'static Mutex<HashMap<usize, Kind>> {
    static R: OnceLock<Mutex<HashMap<usize, Kind>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The public pointer of `obj`.
pub(crate) fn public<T: Object>(obj: &T) -> *mut T::Public {
    (obj as *const T as *mut u8).wrapping_add(T::PUBLIC_OFFSET) as *mut T::Public
}

/// Moves `obj` to the heap, records it as live, and returns it with its
/// public pointer. It lives until [`release`].
pub(crate) fn publish<T: Object>(obj: T) -> (&'static T, *mut T::Public) {
    let obj: &'static T = Box::leak(Box::new(obj));
    let p = public(obj);
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(p as usize, T::KIND);
    (obj, p)
}

/// The public pointers of every live object of kind `T`.
pub(crate) fn all_of<T: Object>() -> Vec<*mut T::Public> {
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(_, k)| **k == T::KIND)
        .map(|(p, _)| *p as *mut T::Public)
        .collect()
}

/// The live object of kind `T` behind the public pointer `p`, or `EINVAL`
/// (NULL, never handed out, already destroyed, another kind).
pub(crate) fn lookup<T: Object>(p: *const T::Public) -> Result<&'static T, c_int> {
    let known = !p.is_null()
        && registry()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(p as usize))
            == Some(&T::KIND);
    if !known {
        return Err(libc::EINVAL);
    }
    // SAFETY: the registry holds exactly the public pointers of objects
    // leaked by `publish` and not yet released, each of kind T, and
    // PUBLIC_OFFSET is where the public struct sits inside T. Objects are
    // freed only by `release`, which a well-behaved application calls after
    // its last use (as with rdma-core, destroying an object another thread
    // still uses is the application's error).
    Ok(unsafe { &*((p as *const u8).wrapping_sub(T::PUBLIC_OFFSET) as *const T) })
}

/// Like [`lookup`], for the data path: NULL or a wrong magic number is
/// `None`.
#[inline]
pub(crate) fn fast<T: Object>(p: *const T::Public) -> Option<&'static T> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the pointer came to one of our op slots through
    // `p->context->ops`, so the application already read `p` as an object
    // whose context is ours; our objects are at least as large as their
    // public struct plus the magic field read here. A stale pointer to a
    // destroyed object fails the magic check (`release` clears it) while
    // its memory is not reused; beyond that it is the application's error,
    // as with any provider.
    let obj = unsafe { &*((p as *const u8).wrapping_sub(T::PUBLIC_OFFSET) as *const T) };
    (obj.magic() == T::MAGIC).then_some(obj)
}

/// Forgets `obj` and frees it. The caller has checked that it may go.
pub(crate) fn release<T: Object>(obj: &'static T, clear_magic: impl FnOnce(&T)) {
    let p = public(obj);
    registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(p as usize));
    clear_magic(obj);
    // SAFETY: `obj` came from Box::leak in `publish` and is no longer in
    // the registry, so no later lookup can return it; this is its only free.
    drop(unsafe { Box::from_raw(obj as *const T as *mut T) });
}

/// Reads a C struct the application passed in.
///
/// # Safety
/// `p` must be NULL or point to a readable `T`.
pub(crate) unsafe fn read_in<T: Copy>(p: *const T) -> Result<T, c_int> {
    if p.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: non-null and readable by the caller's contract.
    Ok(unsafe { std::ptr::read_unaligned(p) })
}

/// Writes a C struct to where the application asked.
///
/// # Safety
/// `p` must be NULL or point to a writable `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, v: T) -> Result<(), c_int> {
    if p.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { std::ptr::write_unaligned(p, v) };
    Ok(())
}

/// Copies `s` into a fixed C char array, NUL-terminated, truncated to fit.
pub(crate) fn put_cstr(dst: &mut [libc::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as libc::c_char;
    }
    for d in dst.iter_mut().skip(n) {
        *d = 0;
    }
}

/// A static NUL-terminated string for C.
pub(crate) fn cstr(s: &'static std::ffi::CStr) -> *const libc::c_char {
    s.as_ptr()
}

/// A NULL-terminated array of `items` in `malloc`'d memory (so the C
/// caller's `free` releases it), with its length written to `num` when
/// non-NULL; on failure `num` is 0 and the result NULL with `errno` set —
/// what `ibv_get_device_list` and `rdma_get_devices` return.
pub(crate) fn c_list<T>(
    num: *mut c_int,
    items: impl FnOnce() -> Result<Vec<*mut T>, c_int>,
) -> *mut *mut T {
    let r = ret_ptr(|| {
        let items = items()?;
        // SAFETY: calloc of (n + 1) pointers, checked for NULL.
        let arr =
            unsafe { libc::calloc(items.len() + 1, std::mem::size_of::<*mut T>()) } as *mut *mut T;
        if arr.is_null() {
            return Err(libc::ENOMEM);
        }
        for (i, p) in items.iter().enumerate() {
            // SAFETY: within the n + 1 slots; the last stays NULL.
            unsafe { *arr.add(i) = *p };
        }
        if !num.is_null() {
            // SAFETY: a non-NULL `num` is the caller's int to write.
            unsafe { *num = items.len() as c_int };
        }
        Ok(arr)
    });
    if r.is_null() && !num.is_null() {
        // SAFETY: as above.
        unsafe { *num = 0 };
    }
    r
}
