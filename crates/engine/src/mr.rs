//! Registered memory: regions (MR), windows (MW) and the checks on every access.
//!
//! A **region** is a byte range the application registered with access rights
//! in a protection domain (PD). Its *L_Key* names it in local SGEs, its *R_Key*
//! in remote requests; both equal one unpredictable 32-bit value
//! ([`crate::keys`]). Its address on the wire is its real virtual address, as
//! with Linux rxe, so tools that advertise buffer addresses (perftest, rping)
//! work unchanged.
//!
//! A **window** (type 2, bound by a work request) grants a peer a sub-range of a
//! region with fewer rights under an R_Key of its own; it is invalidated
//! locally or by the peer's SEND_WITH_INVALIDATE, after which its key is dead.
//! A region with bound windows cannot be deregistered.
//!
//! [`MemTable`] is a [`GrantTable`], and so an [`ndverbs_proto::mem::Memory`]:
//! it says what each key names and where the bytes are; proto looks the key
//! up and runs its checks (key, PD, rights, bounds) before a byte moves —
//! the same checks, in the same order, as the simulation's memory.
//!
//! # Lifetime and sharing
//!
//! Regions are reference counted: the table and the application's handle each
//! hold one, and the engine holds the table's while it copies, so memory is
//! never freed under an access. After deregistration the key is gone from the
//! table, so later work requests naming it fail their checks instead of touching
//! freed memory. Memory the engine allocated ([`RegionBuf::alloc`]) is freed with
//! the last reference; memory registered raw ([`RegionBuf::from_raw`], `unsafe`)
//! is the caller's to keep alive until deregistration.
//!
//! Remote writes land while the application may be reading the same bytes: that
//! is RDMA's contract. The application therefore reaches region memory through
//! copies ([`Region::read`], [`Region::write`]), never through a `&mut [u8]`.

use crate::keys::KeyGen;
use foldhash::HashMap;
use ndverbs_proto::mem::{
    check_bind, Access, AccessError, AtomicOp, Grant, GrantBytes, GrantKind, GrantTable, WindowBind,
};
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Alignment of memory the engine allocates for regions.
pub const REGION_ALIGN: usize = 4096;

/// Errors of registration calls (not of data accesses: those are [`AccessError`]).
///
/// # Example
///
/// ```
/// use ndverbs_engine::keys::KeyGen;
/// use ndverbs_engine::mr::{MemError, MemTable, RegionBuf};
/// use ndverbs_proto::mem::Access;
/// assert_eq!(RegionBuf::alloc(0).unwrap_err(), MemError::Empty);
/// let mut mem = MemTable::new(KeyGen::seeded(1));
/// // ibverbs' rule: granting remote writes requires local write access too.
/// let err = mem.register(1, RegionBuf::alloc(64)?, Access::REMOTE_WRITE).unwrap_err();
/// assert_eq!(err, MemError::RemoteWriteNeedsLocalWrite);
/// assert_eq!(mem.deregister(0x1234).unwrap_err(), MemError::UnknownKey(0x1234));
/// # Ok::<(), MemError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemError {
    /// A zero-length region.
    #[error("a memory region cannot be empty")]
    Empty,
    /// Remote write or atomic rights without local write (ibverbs forbids it).
    #[error("remote write/atomic access needs local write access too")]
    RemoteWriteNeedsLocalWrite,
    /// The allocation failed or the size overflows.
    #[error("cannot allocate {0} bytes")]
    NoMemory(usize),
    /// No region or window has this key.
    #[error("no memory region or window with key 0x{0:08x}")]
    UnknownKey(u32),
    /// Windows are still bound to the region.
    #[error("{0} memory windows are still bound to the region")]
    Busy(u32),
    /// A window bind outside its region, with rights the region lacks, or in another PD.
    #[error("window bind refused: {0}")]
    BadBind(AccessError),
}

/// The bytes behind a region.
///
/// # Example
///
/// ```
/// use ndverbs_engine::mr::{RegionBuf, REGION_ALIGN};
/// // Engine-allocated memory: zeroed, page aligned, freed with the last region handle.
/// let buf = RegionBuf::alloc(10_000)?;
/// assert_eq!(buf.len(), 10_000);
/// assert_eq!(buf.addr() % REGION_ALIGN as u64, 0);
/// # Ok::<(), ndverbs_engine::mr::MemError>(())
/// ```
#[derive(Debug)]
pub struct RegionBuf {
    ptr: NonNull<u8>,
    len: usize,
    owned: bool,
}

// SAFETY: the buffer is plain bytes; all access goes through raw copies or
// atomics whose bounds are checked (see the module docs on sharing).
unsafe impl Send for RegionBuf {}
// SAFETY: as above.
unsafe impl Sync for RegionBuf {}

impl RegionBuf {
    /// `len` zeroed bytes, page aligned, owned by the region.
    pub fn alloc(len: usize) -> Result<Self, MemError> {
        if len == 0 {
            return Err(MemError::Empty);
        }
        let layout =
            Layout::from_size_align(len, REGION_ALIGN).map_err(|_| MemError::NoMemory(len))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or(MemError::NoMemory(len))?;
        Ok(RegionBuf {
            ptr,
            len,
            owned: true,
        })
    }

    /// Application memory registered in place.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes, and stay valid and
    /// unused as a Rust `&`/`&mut` reference, until the region is deregistered
    /// and every handle to it dropped.
    pub unsafe fn from_raw(ptr: NonNull<u8>, len: usize) -> Result<Self, MemError> {
        if len == 0 {
            return Err(MemError::Empty);
        }
        Ok(RegionBuf {
            ptr,
            len,
            owned: false,
        })
    }

    /// First address.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn copy_in(&self, off: usize, data: &[u8]) {
        assert!(off.checked_add(data.len()).is_some_and(|e| e <= self.len));
        // SAFETY: bounds checked above; the buffer is live while `self` is.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len())
        }
    }

    fn copy_out(&self, off: usize, out: &mut [u8]) {
        assert!(off.checked_add(out.len()).is_some_and(|e| e <= self.len));
        // SAFETY: bounds checked above; the buffer is live while `self` is.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), out.as_mut_ptr(), out.len())
        }
    }

    fn atomic(&self, off: usize, op: AtomicOp) -> u64 {
        assert!(off.checked_add(8).is_some_and(|e| e <= self.len));
        let p = self.ptr.as_ptr().wrapping_add(off);
        assert_eq!(p as usize % 8, 0);
        // SAFETY: in bounds, 8-byte aligned, live while `self` is; atomics make
        // concurrent RDMA atomics on one address well defined.
        let a = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
        match op {
            AtomicOp::FetchAdd { add } => a.fetch_add(add, Ordering::SeqCst),
            AtomicOp::CompareSwap { compare, swap } => {
                match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            }
        }
    }
}

impl Drop for RegionBuf {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: allocated in `alloc` with exactly this layout.
            unsafe {
                std::alloc::dealloc(
                    self.ptr.as_ptr(),
                    Layout::from_size_align_unchecked(self.len, REGION_ALIGN),
                )
            }
        }
    }
}

/// A registered memory region.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::nic::Nic;
/// use ndverbs_engine::mr::RegionBuf;
/// use ndverbs_proto::mem::{Access, Sge};
/// let a = Nic::open("127.93.19.1".parse().unwrap(), Progress::Thread)?;
/// let pd = a.alloc_pd()?;
/// let mr = a.reg_mr(pd, RegionBuf::alloc(4096)?, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
/// // The peer needs (addr, rkey); local SGEs name (addr, lkey).
/// let sge = Sge::new(mr.addr() + 16, 5, mr.lkey());
/// assert_eq!((mr.len(), mr.pd(), mr.lkey()), (4096, pd, mr.rkey()));
/// // The application reaches the bytes only by copying (a peer may write them any time).
/// mr.write(16, b"hello").unwrap();
/// let mut out = [0; 5];
/// mr.read(16, &mut out).unwrap();
/// assert_eq!(&out, b"hello");
/// assert!(mr.write(4094, b"overflow").is_err());
/// a.dereg_mr(mr.lkey())?; // the key stops working; `mr` keeps the memory alive
/// # let _ = sge;
/// # Ok::<(), ndverbs_engine::error::EngineError>(())
/// ```
#[derive(Debug)]
pub struct Region {
    key: u32,
    pd: u32,
    access: Access,
    buf: RegionBuf,
    windows: AtomicU32,
}

impl Region {
    /// Local key (also the remote key).
    pub fn lkey(&self) -> u32 {
        self.key
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// Protection domain.
    pub fn pd(&self) -> u32 {
        self.pd
    }

    /// Rights granted.
    pub fn access(&self) -> Access {
        self.access
    }

    /// Address of the first byte, as used in SGEs and by peers.
    pub fn addr(&self) -> u64 {
        self.buf.addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Memory windows bound to it now.
    pub fn windows_bound(&self) -> u32 {
        self.windows.load(Ordering::Relaxed)
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Copies bytes out of the region at byte `offset` (bounds-checked).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), AccessError> {
        self.range(offset as u64, out.len() as u64)?;
        self.buf.copy_out(offset, out);
        Ok(())
    }

    /// Copies bytes into the region at byte `offset` (bounds-checked).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), AccessError> {
        self.range(offset as u64, data.len() as u64)?;
        self.buf.copy_in(offset, data);
        Ok(())
    }

    /// A raw view of the whole region.
    ///
    /// # Safety
    /// The peer and the engine may write these bytes at any time; the caller
    /// must not create a reference that assumes they do not change.
    pub unsafe fn as_ptr(&self) -> *mut u8 {
        self.buf.ptr.as_ptr()
    }

    fn range(&self, offset: u64, len: u64) -> Result<usize, AccessError> {
        match offset.checked_add(len) {
            Some(e) if e <= self.len() as u64 => Ok(offset as usize),
            _ => Err(AccessError::OutOfBounds {
                key: self.key,
                addr: self.addr().wrapping_add(offset),
                len,
            }),
        }
    }

    /// What the region's key grants, for proto's checks.
    fn grant(&self) -> Grant {
        Grant {
            kind: GrantKind::Region {
                remote_invalidate: false,
            },
            pd: self.pd,
            access: self.access,
            va: self.addr(),
            len: self.len() as u64,
        }
    }
}

/// A memory window (type 2).
#[derive(Debug, Clone)]
struct Window {
    pd: u32,
    /// The region it is bound to, if bound.
    binding: Option<Binding>,
}

#[derive(Debug, Clone)]
struct Binding {
    region: Arc<Region>,
    bind: WindowBind,
}

/// Every region and window of an adapter, by key.
///
/// # Example
///
/// ```
/// use ndverbs_engine::keys::KeyGen;
/// use ndverbs_engine::mr::{MemTable, RegionBuf};
/// use ndverbs_proto::mem::{Access, Memory, WindowBind};
/// let mut mem = MemTable::new(KeyGen::seeded(7));
/// let r = mem.register(1, RegionBuf::alloc(4096)?, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
/// // Grant a peer 64 bytes of it, write-only, under a window's own key.
/// let mw = mem.alloc_window(1);
/// let bind = WindowBind { lkey: r.lkey(), va: r.addr() + 128, len: 64, access: Access::REMOTE_WRITE };
/// let rkey = mem.bind_window(mw, bind)?;
/// // The protocol core's view (`Memory`): every access is checked.
/// mem.write_remote(1, rkey, r.addr() + 128, b"via window").unwrap();
/// assert!(mem.write_remote(1, rkey, r.addr(), b"outside").is_err());
/// assert!(mem.read_remote(1, rkey, r.addr() + 128, &mut [0; 4]).is_err()); // no read right
/// assert!(mem.deregister(r.lkey()).is_err()); // a window is still bound
/// # Ok::<(), ndverbs_engine::mr::MemError>(())
/// ```
#[derive(Debug)]
pub struct MemTable {
    keys: KeyGen,
    regions: HashMap<u32, Arc<Region>>,
    /// Windows by their current R_Key.
    windows: HashMap<u32, Window>,
}

impl MemTable {
    /// An empty table drawing keys from `keys`.
    pub fn new(keys: KeyGen) -> Self {
        MemTable {
            keys,
            regions: HashMap::default(),
            windows: HashMap::default(),
        }
    }

    fn fresh_key(&mut self) -> u32 {
        loop {
            let k = self.keys.key();
            if !self.regions.contains_key(&k) && !self.windows.contains_key(&k) {
                return k;
            }
        }
    }

    /// Registers `buf` in `pd` with `access`.
    pub fn register(
        &mut self,
        pd: u32,
        buf: RegionBuf,
        access: Access,
    ) -> Result<Arc<Region>, MemError> {
        check_rights(access)?;
        let key = self.fresh_key();
        let r = Arc::new(Region {
            key,
            pd,
            access,
            buf,
            windows: AtomicU32::new(0),
        });
        self.regions.insert(key, r.clone());
        Ok(r)
    }

    /// Re-registers region `key`: from now on the key names `buf` in `pd`
    /// with `access` (ibverbs' `ibv_rereg_mr`, which keeps the keys a peer
    /// already holds). Requests checked from now on see the new region;
    /// the old one lives on only while something in flight holds it.
    /// Refused, the region unchanged, while windows are bound to it (their
    /// grants name the old memory) or when the rights are refused.
    ///
    /// ```
    /// use ndverbs_engine::keys::KeyGen;
    /// use ndverbs_engine::mr::{MemError, MemTable, RegionBuf};
    /// use ndverbs_proto::mem::{Access, Memory};
    /// let mut mem = MemTable::new(KeyGen::seeded(3));
    /// let r = mem.register(1, RegionBuf::alloc(64)?, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    /// mem.write_remote(1, r.rkey(), r.addr(), b"ok").unwrap();
    /// // Same key, no remote write any more, another PD.
    /// let n = mem.reregister(r.lkey(), 2, RegionBuf::alloc(64)?, Access::LOCAL_WRITE)?;
    /// assert_eq!((n.lkey(), n.pd()), (r.lkey(), 2));
    /// assert!(mem.write_remote(2, n.rkey(), n.addr(), b"no").is_err());
    /// let e = mem.reregister(0x77, 1, RegionBuf::alloc(8)?, Access::NONE).unwrap_err();
    /// assert_eq!(e, MemError::UnknownKey(0x77));
    /// # Ok::<(), MemError>(())
    /// ```
    pub fn reregister(
        &mut self,
        key: u32,
        pd: u32,
        buf: RegionBuf,
        access: Access,
    ) -> Result<Arc<Region>, MemError> {
        check_rights(access)?;
        let old = self.regions.get(&key).ok_or(MemError::UnknownKey(key))?;
        let bound = old.windows.load(Ordering::Relaxed);
        if bound != 0 {
            return Err(MemError::Busy(bound));
        }
        let r = Arc::new(Region {
            key,
            pd,
            access,
            buf,
            windows: AtomicU32::new(0),
        });
        self.regions.insert(key, r.clone());
        Ok(r)
    }

    /// Removes a region; its key stops working at once.
    pub fn deregister(&mut self, lkey: u32) -> Result<Arc<Region>, MemError> {
        let r = self.regions.get(&lkey).ok_or(MemError::UnknownKey(lkey))?;
        let bound = r.windows.load(Ordering::Relaxed);
        if bound != 0 {
            return Err(MemError::Busy(bound));
        }
        Ok(self.regions.remove(&lkey).expect("present"))
    }

    /// Removes a region even while windows are bound to it: its own keys
    /// stop working at once; bound windows keep their binding (and the
    /// memory alive) until they are invalidated, rebound or freed. For a
    /// region whose owner is gone and cannot retry a refused
    /// [`MemTable::deregister`].
    pub fn revoke(&mut self, lkey: u32) -> Result<Arc<Region>, MemError> {
        self.regions.remove(&lkey).ok_or(MemError::UnknownKey(lkey))
    }

    /// Number of live regions.
    pub fn regions(&self) -> usize {
        self.regions.len()
    }

    /// Every live region, in no particular order.
    pub fn each_region(&self) -> impl Iterator<Item = &Arc<Region>> {
        self.regions.values()
    }

    /// Allocates an unbound window in `pd`; returns its key.
    pub fn alloc_window(&mut self, pd: u32) -> u32 {
        let k = self.fresh_key();
        self.windows.insert(k, Window { pd, binding: None });
        k
    }

    /// Binds window `mw` as `bind` asks (remote rights only). Returns the
    /// window's new R_Key: a type-2 window gets a fresh key at every bind, so
    /// old grants die.
    pub fn bind_window(&mut self, mw: u32, bind: WindowBind) -> Result<u32, MemError> {
        let w = self.windows.get(&mw).ok_or(MemError::UnknownKey(mw))?;
        let region = self
            .regions
            .get(&bind.lkey)
            .ok_or(MemError::UnknownKey(bind.lkey))?
            .clone();
        check_bind(&region.grant(), w.pd, bind).map_err(MemError::BadBind)?;
        let mut w = self.windows.remove(&mw).expect("present");
        if let Some(old) = w.binding.take() {
            old.region.windows.fetch_sub(1, Ordering::Relaxed);
        }
        region.windows.fetch_add(1, Ordering::Relaxed);
        w.binding = Some(Binding { region, bind });
        let k = self.fresh_key();
        self.windows.insert(k, w);
        Ok(k)
    }

    /// Invalidates window `rkey` (local invalidate, or the peer's
    /// SEND_WITH_INVALIDATE); the window stays allocated, unbound.
    pub fn invalidate_window(&mut self, rkey: u32) -> Result<(), MemError> {
        let w = self
            .windows
            .get_mut(&rkey)
            .ok_or(MemError::UnknownKey(rkey))?;
        if let Some(b) = w.binding.take() {
            b.region.windows.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Frees window `rkey`.
    pub fn dealloc_window(&mut self, rkey: u32) -> Result<(), MemError> {
        self.invalidate_window(rkey)?;
        self.windows.remove(&rkey);
        Ok(())
    }
}

/// ibverbs' rule: granting remote writes requires local write access too.
fn check_rights(access: Access) -> Result<(), MemError> {
    if (access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC))
        && !access.contains(Access::LOCAL_WRITE)
    {
        return Err(MemError::RemoteWriteNeedsLocalWrite);
    }
    Ok(())
}

/// A grant's bytes in the engine: the region that holds them and the
/// grant's first byte as an offset in it.
#[derive(Debug, Clone, Copy)]
pub struct RegionBytes<'a> {
    region: &'a Region,
    base: usize,
}

impl GrantBytes for RegionBytes<'_> {
    fn read(&self, off: u64, out: &mut [u8]) {
        self.region.buf.copy_out(self.base + off as usize, out);
    }

    fn write(&mut self, off: u64, data: &[u8]) {
        self.region.buf.copy_in(self.base + off as usize, data);
    }

    fn atomic(&mut self, off: u64, op: AtomicOp) -> u64 {
        self.region.buf.atomic(self.base + off as usize, op)
    }

    /// The region stays in the table (so its bytes stay mapped) until the
    /// table is next changed, which takes the engine's lock the send runs
    /// under.
    fn lend(&self, off: u64) -> Option<usize> {
        Some(self.region.buf.addr() as usize + self.base + off as usize)
    }
}

impl GrantTable for MemTable {
    type Bytes<'a> = RegionBytes<'a>;

    fn grant(&mut self, key: u32) -> Option<(Grant, RegionBytes<'_>)> {
        if let Some(r) = self.regions.get(&key) {
            let bytes = RegionBytes { region: r, base: 0 };
            return Some((r.grant(), bytes));
        }
        let w = self.windows.get(&key)?;
        let b = w.binding.as_ref()?;
        // The bind checked that the window lies inside the region.
        let base = (b.bind.va - b.region.addr()) as usize;
        Some((
            b.bind.grant(w.pd),
            RegionBytes {
                region: &b.region,
                base,
            },
        ))
    }

    /// Only windows get here: the engine's regions are never remotely
    /// invalidatable.
    fn invalidate(&mut self, key: u32) {
        let _ = self.invalidate_window(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndverbs_proto::mem::{Memory, Sge};

    fn table() -> MemTable {
        MemTable::new(KeyGen::seeded(7))
    }

    #[test]
    fn local_and_remote_checks() {
        let mut t = table();
        let r = t
            .register(
                1,
                RegionBuf::alloc(4096).unwrap(),
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
            .unwrap();
        let sge = Sge::new(r.addr() + 100, 50, r.lkey());
        t.write_local(1, &sge, 0, b"hello").unwrap();
        let mut out = [0u8; 5];
        r.read(100, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        assert!(matches!(
            t.write_local(2, &sge, 0, b"x"),
            Err(AccessError::PdMismatch { .. })
        ));
        assert!(matches!(
            t.write_local(1, &sge, 48, b"xyz"),
            Err(AccessError::OutOfBounds { .. })
        ));
        t.write_remote(1, r.rkey(), r.addr() + 4090, b"abcdef")
            .unwrap();
        assert!(matches!(
            t.write_remote(1, r.rkey(), r.addr() + 4091, b"abcdef"),
            Err(AccessError::OutOfBounds { .. })
        ));
        assert!(matches!(
            t.write_remote(1, r.rkey(), r.addr() - 1, b"a"),
            Err(AccessError::OutOfBounds { .. })
        ));
        assert!(matches!(
            t.read_remote(1, r.rkey(), r.addr(), &mut out),
            Err(AccessError::NoPermission { .. })
        ));
        assert!(matches!(
            t.write_remote(1, r.rkey() ^ 1, r.addr(), b"a"),
            Err(AccessError::InvalidRkey(_))
        ));
        assert!(matches!(
            t.write_remote(1, r.rkey(), u64::MAX - 2, b"abcdef"),
            Err(AccessError::OutOfBounds { .. })
        ));
        assert_eq!(
            t.register(1, RegionBuf::alloc(8).unwrap(), Access::REMOTE_WRITE)
                .unwrap_err(),
            MemError::RemoteWriteNeedsLocalWrite
        );
        // Deregistered keys fail instead of touching memory.
        let key = r.lkey();
        t.deregister(key).unwrap();
        assert!(matches!(
            t.write_remote(1, key, r.addr(), b"a"),
            Err(AccessError::InvalidRkey(_))
        ));
        assert!(matches!(
            t.read_local(1, &sge, 0, &mut out),
            Err(AccessError::InvalidLkey(_))
        ));
    }

    #[test]
    fn atomics() {
        let mut t = table();
        let all = Access::LOCAL_WRITE | Access::REMOTE_ATOMIC;
        let r = t.register(1, RegionBuf::alloc(64).unwrap(), all).unwrap();
        let a = r.addr() + 8;
        // The engine's atomics are the hardware's, on the region's bytes.
        let cas = |compare, swap| AtomicOp::CompareSwap { compare, swap };
        for (op, before) in [
            (AtomicOp::FetchAdd { add: 5 }, 0),
            (cas(5, 9), 5),
            (cas(5, 1), 9),
        ] {
            assert_eq!(t.atomic_remote(1, r.rkey(), a, op), Ok(before));
        }
        assert_eq!(
            t.atomic_remote(1, r.rkey(), a + 1, AtomicOp::FetchAdd { add: 1 }),
            Err(AccessError::Misaligned(a + 1))
        );
        assert!(t
            .atomic_remote(1, r.rkey(), r.addr() + 64, AtomicOp::FetchAdd { add: 1 })
            .is_err());
    }

    #[test]
    fn windows_narrow_rights_and_die_on_invalidate() {
        let mut t = table();
        let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let r = t.register(1, RegionBuf::alloc(8192).unwrap(), all).unwrap();
        let mw = t.alloc_window(1);
        assert!(matches!(
            t.write_remote(1, mw, r.addr(), b"a"),
            Err(AccessError::InvalidRkey(_))
        ));
        let read = WindowBind {
            lkey: r.lkey(),
            va: r.addr() + 4096,
            len: 100,
            access: Access::REMOTE_READ,
        };
        let k = t.bind_window(mw, read).unwrap();
        let mut out = [0u8; 10];
        t.read_remote(1, k, r.addr() + 4096, &mut out).unwrap();
        assert!(matches!(
            t.write_remote(1, k, r.addr() + 4096, b"a"),
            Err(AccessError::NoPermission { .. })
        ));
        assert!(matches!(
            t.read_remote(1, k, r.addr() + 4190, &mut out),
            Err(AccessError::OutOfBounds { .. })
        ));
        assert_eq!(t.deregister(r.lkey()).unwrap_err(), MemError::Busy(1));
        // Rebinding gives a new key; the old one dies.
        let rebind = WindowBind {
            va: r.addr(),
            len: 10,
            ..read
        };
        let k2 = t.bind_window(k, rebind).unwrap();
        assert_ne!(k, k2);
        assert!(t.read_remote(1, k, r.addr(), &mut out).is_err());
        assert_eq!(
            t.invalidate_remote(1, r.rkey()),
            Err(AccessError::NotInvalidatable(r.rkey()))
        );
        t.invalidate_remote(1, k2).unwrap();
        assert!(matches!(
            t.read_remote(1, k2, r.addr(), &mut out),
            Err(AccessError::InvalidRkey(_))
        ));
        t.deregister(r.lkey()).unwrap();
        // A window cannot grant rights its region lacks, or outlive its bounds.
        let ro = t
            .register(1, RegionBuf::alloc(64).unwrap(), Access::REMOTE_READ)
            .unwrap();
        let mw2 = t.alloc_window(1);
        let write = WindowBind {
            lkey: ro.lkey(),
            va: ro.addr(),
            len: 8,
            access: Access::REMOTE_WRITE,
        };
        assert!(t.bind_window(mw2, write).is_err());
        let past_end = WindowBind {
            va: ro.addr() + 60,
            access: Access::REMOTE_READ,
            ..write
        };
        assert!(t.bind_window(mw2, past_end).is_err());
    }
}
