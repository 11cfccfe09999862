//! Registering your own buffer without `unsafe`.
//!
//! [`Pd::reg_mr`](crate::Pd::reg_mr) registers memory the region allocates;
//! [`Pd::reg_mr_raw`](crate::Pd::reg_mr_raw) registers any memory in place,
//! but the caller must promise (`unsafe`) to keep it alive and untouched.
//! [`Pd::reg_buf`](crate::Pd::reg_buf) is the safe middle: it takes an
//! owned buffer whose bytes never move ([`StableBuffer`]: `Vec<u8>`,
//! `Box<[u8]>`, [`AlignedBuf`]) and the [`OwnedMr`] it returns owns it.
//!
//! Why this is sound:
//! - **No free, no move while registered.** The buffer moved into the
//!   region, so the program has no name left for it: dropping or moving it
//!   does not compile. Moving the `OwnedMr` moves the `Vec`'s header, not
//!   its heap bytes, which stay where the keys point.
//! - **No reference while peers may write.** The region gives out no `&[u8]`
//!   or `&mut [u8]` to the bytes, only copies in and out
//!   ([`Mr::read`](crate::Mr::read), [`Mr::write`](crate::Mr::write)): a
//!   peer's RDMA WRITE can land at any moment.
//! - **Keys die before the bytes.** Dropping the region deregisters it
//!   before the buffer is freed, and [`OwnedMr::into_inner`] hands the
//!   buffer back only after a successful deregistration. A work request or
//!   R_Key still naming the region afterwards meets an unknown key (a
//!   protection error), never freed memory. `mem::forget` of the region
//!   leaks the buffer with it, which is safe.
//!
//! ```
//! use ndverbs_verbs::*;
//! let dev = Device::open("127.92.6.1".parse().unwrap())?;
//! let pd = dev.alloc_pd()?;
//! let mut buf = vec![0u8; 8192];
//! buf[..5].copy_from_slice(b"hello");
//! let mr = pd.reg_buf(buf, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! // The region is the buffer, in place.
//! assert_eq!((mr.len(), mr.to_vec(0, 5)?), (8192, b"hello".to_vec()));
//! mr.write(5, b" world")?;
//! let back: Vec<u8> = mr.into_inner().map_err(|(_, e)| e)?;
//! assert_eq!(&back[..11], b"hello world");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Freeing the buffer while it is registered does not compile:
//!
//! ```compile_fail,E0382
//! use ndverbs_verbs::*;
//! let dev = Device::open("127.92.6.2".parse().unwrap())?;
//! let pd = dev.alloc_pd()?;
//! let buf = vec![0u8; 4096];
//! let mr = pd.reg_buf(buf, Access::LOCAL_WRITE)?;
//! drop(buf); // moved into the region
//! # drop(mr);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Nor does touching it through a reference:
//!
//! ```compile_fail,E0382
//! use ndverbs_verbs::*;
//! let dev = Device::open("127.92.6.3".parse().unwrap())?;
//! let pd = dev.alloc_pd()?;
//! let mut buf = vec![0u8; 4096];
//! let mr = pd.reg_buf(buf, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! buf[0] = 1; // a peer may be writing these bytes
//! # drop(mr);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Nor does keeping a borrow of it across the registration:
//!
//! ```compile_fail,E0505
//! use ndverbs_verbs::*;
//! let dev = Device::open("127.92.6.4".parse().unwrap())?;
//! let pd = dev.alloc_pd()?;
//! let buf = vec![0u8; 4096];
//! let view: &[u8] = &buf;
//! let mr = pd.reg_buf(buf, Access::LOCAL_WRITE)?;
//! println!("{}", view[0]); // the borrow outlives the move
//! # drop(mr);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::error::Result;
use crate::memory::Mr;
use crate::Error;
use std::alloc::Layout;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::ptr::NonNull;

/// An owned buffer whose bytes stay at one address for as long as it lives,
/// however its owner is moved, and that nothing else can reach while it is
/// owned elsewhere.
///
/// # Safety
/// [`StableBuffer::stable_bytes`] must return the same pointer and length
/// every time while `self` is not mutated through other means, the bytes
/// must be valid for reads and writes, and moving `self` must not move them
/// (heap memory owned uniquely by `self`).
pub unsafe trait StableBuffer: Send + 'static {
    /// The first byte and the length.
    fn stable_bytes(&mut self) -> (NonNull<u8>, usize);
}

// SAFETY: a Vec's bytes are a heap allocation it owns uniquely; moving the
// Vec moves only its (pointer, capacity, length) header.
unsafe impl StableBuffer for Vec<u8> {
    fn stable_bytes(&mut self) -> (NonNull<u8>, usize) {
        let p = NonNull::new(self.as_mut_ptr()).unwrap_or(NonNull::dangling());
        (p, self.len())
    }
}

// SAFETY: as for Vec: a uniquely owned heap allocation.
unsafe impl StableBuffer for Box<[u8]> {
    fn stable_bytes(&mut self) -> (NonNull<u8>, usize) {
        let p = NonNull::new(self.as_mut_ptr()).unwrap_or(NonNull::dangling());
        (p, self.len())
    }
}

// SAFETY: AlignedBuf owns its allocation uniquely and never reallocates.
unsafe impl StableBuffer for AlignedBuf {
    fn stable_bytes(&mut self) -> (NonNull<u8>, usize) {
        (self.ptr, self.layout.size())
    }
}

/// Zeroed bytes at an alignment of your choice (a page, a cache line), for
/// registration with [`Pd::reg_buf`](crate::Pd::reg_buf).
///
/// ```
/// use ndverbs_verbs::AlignedBuf;
/// let mut b = AlignedBuf::zeroed(4096, 4096).unwrap();
/// assert_eq!(b.as_slice().as_ptr() as usize % 4096, 0);
/// b.as_mut_slice()[0] = 7;
/// assert_eq!((b.len(), b.as_slice()[0]), (4096, 7));
/// assert!(AlignedBuf::zeroed(4096, 3).is_none()); // not a power of two
/// assert!(AlignedBuf::zeroed(0, 8).is_none());
/// ```
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: AlignedBuf is a uniquely owned byte buffer, like Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads through `as_slice`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` zeroed bytes aligned to `align` (a power of two); `None` for a
    /// zero length, a bad alignment or a failed allocation.
    pub fn zeroed(len: usize, align: usize) -> Option<AlignedBuf> {
        let layout = Layout::from_size_align(len, align).ok()?;
        if len == 0 {
            return None;
        }
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        Some(AlignedBuf { ptr, layout })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Never empty (a zero length is refused).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of `len` initialised bytes
        // owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len()) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len())
            .field("align", &self.layout.align())
            .finish()
    }
}

/// A memory region over a buffer it owns ([`Pd::reg_buf`](crate::Pd::reg_buf)).
/// It is an [`Mr`] (by `Deref`); dropping it deregisters, then frees the
/// buffer; [`OwnedMr::into_inner`] deregisters and gives the buffer back.
#[derive(Debug)]
pub struct OwnedMr<B: StableBuffer> {
    // Dropped first: the keys go before the bytes they name.
    mr: ManuallyDrop<Mr>,
    buf: ManuallyDrop<B>,
}

impl<B: StableBuffer> OwnedMr<B> {
    pub(crate) fn register(
        mut buf: B,
        reg: impl FnOnce(NonNull<u8>, usize) -> Result<Mr>,
    ) -> std::result::Result<OwnedMr<B>, (B, Error)> {
        let (ptr, len) = buf.stable_bytes();
        match reg(ptr, len) {
            Ok(mr) => Ok(OwnedMr {
                mr: ManuallyDrop::new(mr),
                buf: ManuallyDrop::new(buf),
            }),
            Err(e) => Err((buf, e)),
        }
    }

    /// Deregisters and gives the buffer back (with what peers wrote into
    /// it); on failure (a window still bound) the region is returned
    /// unchanged with the error.
    pub fn into_inner(self) -> std::result::Result<B, (OwnedMr<B>, Error)> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so each field is taken out once:
        // the Mr here, the buffer below or put back with it.
        let mr = unsafe { ManuallyDrop::take(&mut this.mr) };
        match mr.deregister() {
            // SAFETY: as above; the keys are gone, the bytes are the caller's.
            Ok(()) => Ok(unsafe { ManuallyDrop::take(&mut this.buf) }),
            Err((mr, e)) => Err((
                OwnedMr {
                    mr: ManuallyDrop::new(mr),
                    // SAFETY: as above: moved once, into the region again.
                    buf: ManuallyDrop::new(unsafe { ManuallyDrop::take(&mut this.buf) }),
                },
                e,
            )),
        }
    }
}

impl<B: StableBuffer> Deref for OwnedMr<B> {
    type Target = Mr;

    fn deref(&self) -> &Mr {
        &self.mr
    }
}

impl<B: StableBuffer> Drop for OwnedMr<B> {
    fn drop(&mut self) {
        // SAFETY: each field is dropped once, here, the region first (its
        // drop deregisters: no key names the bytes any more), then the
        // buffer.
        unsafe {
            ManuallyDrop::drop(&mut self.mr);
            ManuallyDrop::drop(&mut self.buf);
        }
    }
}
