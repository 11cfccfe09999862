//! Memory regions and memory windows.

use crate::device::PdInner;
use crate::{Result, VerbsError};
use ndverbs_engine::adapter::EngineError;
use ndverbs_engine::mr::Region;
use ndverbs_proto::mem::{Access, AccessError, Sge};
use std::sync::Arc;

/// A registered memory region. Dropping it deregisters it.
#[derive(Debug)]
pub struct Mr {
    region: Arc<Region>,
    pd: Arc<PdInner>,
    /// False once [`Mr::deregister`] succeeded: drop must not deregister the
    /// key again (it may belong to a newer region by then).
    registered: bool,
}

impl Mr {
    pub(crate) fn new(region: Arc<Region>, pd: Arc<PdInner>) -> Self {
        Mr {
            region,
            pd,
            registered: true,
        }
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.region.lkey()
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.region.rkey()
    }

    /// Address of the first byte (what peers use in RDMA requests).
    pub fn addr(&self) -> u64 {
        self.region.addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Rights granted.
    pub fn access(&self) -> Access {
        self.region.access()
    }

    /// An SGE for `len` bytes at byte `offset` of the region.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge::new(self.addr() + offset as u64, len, self.lkey())
    }

    /// Copies bytes out (bounds-checked). Peers may be writing concurrently:
    /// this is a copy, not a borrow.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        Ok(self.region.read(offset, out)?)
    }

    /// Copies bytes in (bounds-checked).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        Ok(self.region.write(offset, data)?)
    }

    /// `len` bytes at `offset` as a vector.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        // Bounds first: `len` must not decide an allocation (a huge one panics).
        if offset.checked_add(len).is_none_or(|end| end > self.len()) {
            return Err(VerbsError::Access(AccessError::OutOfBounds {
                key: self.lkey(),
                addr: self.addr().wrapping_add(offset as u64),
                len: len as u64,
            }));
        }
        let mut v = vec![0u8; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }

    /// A raw pointer to the region's first byte.
    ///
    /// # Safety
    /// The engine and the peer may write the region at any time; do not make
    /// references from this pointer that assume otherwise.
    pub unsafe fn as_ptr(&self) -> *mut u8 {
        // SAFETY: forwarded to the caller.
        unsafe { self.region.as_ptr() }
    }

    /// The engine region (for layers that need it).
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Deregisters explicitly, reporting failure (windows still bound) instead
    /// of leaving the region registered on drop.
    pub fn deregister(self) -> std::result::Result<(), (Mr, VerbsError)> {
        match self.pd.dev.adapter().dereg_mr(self.region.lkey()) {
            Ok(()) => {
                // Dropped here: the region's memory and the PD reference are
                // released (`mem::forget` used to leak both).
                let mut this = self;
                this.registered = false;
                Ok(())
            }
            Err(e) => Err((self, e.into())),
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // The region's keys die with the handle, even with windows bound
        // (nobody could deregister it later: its R_Key would stay a live
        // grant). Bound windows keep their grant, and the memory, until they
        // are invalidated or freed.
        if self.registered {
            let _ = self.pd.dev.adapter().revoke_mr(self.region.lkey());
        }
    }
}

/// A memory window (type 2). Bind it with [`Mw::bind`]; the R_Key changes at
/// every bind.
#[derive(Debug)]
pub struct Mw {
    key: std::sync::atomic::AtomicU32,
    pd: Arc<PdInner>,
}

impl Mw {
    pub(crate) fn new(key: u32, pd: Arc<PdInner>) -> Self {
        Mw {
            key: key.into(),
            pd,
        }
    }

    /// The current R_Key.
    pub fn rkey(&self) -> u32 {
        self.key.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Grants `len` bytes at `addr` of `mr` with `access` (remote rights);
    /// returns the new R_Key.
    pub fn bind(&self, mr: &Mr, addr: u64, len: u64, access: Access) -> Result<u32> {
        let dev = self.pd.dev.adapter();
        if !dev.same_as(mr.pd.dev.adapter()) && !dev.is_removed() {
            return Err(VerbsError::Engine(EngineError::InvalidArgument(
                "the region belongs to another device",
            )));
        }
        let k = self
            .pd
            .dev
            .adapter()
            .bind_mw(self.rkey(), mr.lkey(), addr, len, access)?;
        self.key.store(k, std::sync::atomic::Ordering::Release);
        Ok(k)
    }

    /// Revokes the grant.
    pub fn invalidate(&self) -> Result<()> {
        Ok(self.pd.dev.adapter().invalidate_mw(self.rkey())?)
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        let _ = self.pd.dev.adapter().dealloc_mw(self.rkey());
    }
}
