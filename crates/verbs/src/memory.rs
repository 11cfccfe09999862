//! Memory regions and memory windows.

use crate::device::PdInner;
use crate::engine::RegionRef;
use crate::error::{Error, ErrorKind, Result};
use ndverbs_proto::mem::{Access, AccessError, Sge, WindowBind};
use std::sync::Arc;

/// A registered memory region. Dropping it deregisters it.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.5.1".parse().unwrap())?;
/// let pd = dev.alloc_pd()?;
/// // Zeroed memory the region owns, with the rights peers get.
/// let mr = pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
/// assert_eq!((mr.len(), mr.access()), (4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE));
/// // Bytes go in and out by copy, bounds-checked.
/// mr.write(100, b"hello")?;
/// assert_eq!(mr.to_vec(100, 5)?, b"hello");
/// assert_eq!(mr.read(4090, &mut [0; 10]).unwrap_err().kind(), ErrorKind::Access);
/// // Work requests name it by SGE (L_Key); peers by address and R_Key.
/// let sge: Sge = mr.sge(100, 5);
/// assert_eq!((sge.addr, sge.lkey), (mr.addr() + 100, mr.lkey()));
/// let _for_the_peer = RemoteAddr { va: mr.addr(), rkey: mr.rkey() };
/// // Dropping deregisters; `deregister` reports a failure instead.
/// mr.deregister().map_err(|(_, e)| e)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Mr {
    region: RegionRef,
    pd: Arc<PdInner>,
    /// False once [`Mr::deregister`] succeeded: drop must not deregister the
    /// key again (it may belong to a newer region by then).
    registered: bool,
}

impl Mr {
    pub(crate) fn new(region: RegionRef, pd: Arc<PdInner>) -> Self {
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
        self.region.read(offset, out)
    }

    /// Copies bytes in (bounds-checked).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.region.write(offset, data)
    }

    /// `len` bytes at `offset` as a vector.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        // Bounds first: `len` must not decide an allocation (a huge one panics).
        if offset.checked_add(len).is_none_or(|end| end > self.len()) {
            let e = AccessError::OutOfBounds {
                key: self.lkey(),
                addr: self.addr().wrapping_add(offset as u64),
                len: len as u64,
            };
            return Err(Error::access("Mr::to_vec", e));
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

    /// Re-registers the region under the same keys (ibverbs'
    /// `ibv_rereg_mr`): from now on its keys name `len` bytes at `ptr` in
    /// `pd` (a PD of the same device) with `access`, and the old memory is
    /// released. Peers keep using the R_Key they have; requests checked
    /// from now on see the new memory, PD and rights. On error (another
    /// device's PD, windows bound, rights or a length refused) the region is
    /// given back unchanged.
    ///
    /// # Safety
    /// As for [`Pd::reg_mr_raw`](crate::Pd::reg_mr_raw): `ptr..ptr+len`
    /// must stay valid for reads and writes, and must not be accessed
    /// through Rust references, until the region is dropped.
    pub unsafe fn rereg_raw(
        self,
        pd: &crate::Pd,
        ptr: std::ptr::NonNull<u8>,
        len: usize,
        access: Access,
    ) -> std::result::Result<Mr, (Mr, Error)> {
        let nic = &self.pd.dev.nic;
        if !nic.same_as(&pd.inner.dev.nic) {
            let e = Error::new(
                ErrorKind::InvalidArgument,
                "Mr::rereg_raw",
                "the protection domain belongs to another device",
            );
            return Err((self, e));
        }
        // SAFETY: forwarded to the caller.
        let r = unsafe { nic.rereg_mr_raw(self.lkey(), pd.inner.id, ptr, len, access) };
        match r {
            Ok(region) => {
                // The keys name the new region now: the old handle must not
                // revoke them when it drops (its memory and PD go with it).
                let mut old = self;
                old.registered = false;
                Ok(Mr::new(region, pd.inner.clone()))
            }
            Err(e) => Err((self, e)),
        }
    }

    /// Deregisters explicitly, reporting failure (windows still bound) instead
    /// of leaving the region registered on drop.
    pub fn deregister(self) -> std::result::Result<(), (Mr, Error)> {
        match self.pd.dev.nic.dereg_mr(self.region.lkey()) {
            Ok(()) => {
                // Dropped here: the region's memory and the PD reference are
                // released (`mem::forget` used to leak both).
                let mut this = self;
                this.registered = false;
                Ok(())
            }
            Err(e) => Err((self, e)),
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
            let _ = self.pd.dev.nic.revoke_mr(self.region.lkey());
        }
    }
}

/// A memory window (type 2). Bind it with [`Mw::bind`]; the R_Key changes at
/// every bind.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// use std::time::Duration;
/// # fn connect(
/// #     (da, qa): (&Device, &Qp),
/// #     (db, qb): (&Device, &Qp),
/// # ) -> std::result::Result<(Endpoint, Endpoint), Box<dyn std::error::Error>> {
/// #     for qp in [qa, qb] {
/// #         qp.to_init(Access::ALL)?;
/// #     }
/// #     let listener = Endpoint::new(db)?;
/// #     listener.listen(7000, 1)?;
/// #     let (ea, eb) = (Endpoint::new(da)?, Endpoint::new(db)?);
/// #     let request = listener.get_request(&eb)?;
/// #     let rep = ea.connect(qa, ConnectArgs {
/// #         remote: db.query().addr,
/// #         remote_port: 7000,
/// #         local_port: 40000,
/// #         responder_resources: 1,
/// #         initiator_depth: 1,
/// #         retry_count: 7,
/// #         rnr_retry_count: 7,
/// #         path_mtu: PathMtu::Mtu1024,
/// #         private_data: vec![],
/// #     })?;
/// #     request.wait()?;
/// #     let rtu = eb.accept(qb, AcceptArgs {
/// #         responder_resources: 1,
/// #         initiator_depth: 1,
/// #         rnr_retry_count: 7,
/// #         private_data: vec![],
/// #     })?;
/// #     rep.wait()?;
/// #     ea.complete_connect(qa)?.wait()?;
/// #     rtu.wait()?;
/// #     Ok((ea, eb))
/// # }
/// let da = Device::open("127.92.6.1".parse().unwrap())?;
/// let db = Device::open("127.92.6.2".parse().unwrap())?;
/// let (pa, pb) = (da.alloc_pd()?, db.alloc_pd()?);
/// let (ca, cb) = (da.create_cq(16)?, db.create_cq(16)?);
/// let (qa, qb) = (pa.create_qp(&QpInitAttr::new(&ca, &ca))?, pb.create_qp(&QpInitAttr::new(&cb, &cb))?);
/// # let _eps = connect((&da, &qa), (&db, &qb))?;
/// // B grants A 16 writable bytes of a region through a window (the region
/// // must allow what a window on it may grant).
/// let mr = pb.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
/// let mw = pb.alloc_mw()?;
/// let rkey = mw.bind(&mr, mr.addr() + 256, 16, Access::REMOTE_WRITE)?;
/// assert_eq!(rkey, mw.rkey()); // a new R_Key at every bind
/// let window = RemoteAddr { va: mr.addr() + 256, rkey };
/// let mut wr = SendWr::new(1, SendOp::Write(window), vec![]);
/// wr.inline = Some(b"through a window".to_vec());
/// qa.post_send(wr.clone())?;
/// let t = Duration::from_secs(10);
/// assert_eq!(ca.wait_one(t)?.expect("completion").status, WcStatus::Success);
/// assert_eq!(mr.to_vec(256, 16)?, b"through a window");
/// // Invalidate revokes the grant: the same WRITE now fails at B.
/// mw.invalidate()?;
/// qa.post_send(wr)?;
/// assert_eq!(ca.wait_one(t)?.expect("completion").status, WcStatus::RemAccessErr);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
        let nic = &self.pd.dev.nic;
        // Keys are per device: another device's region would name one of ours.
        if !nic.same_as(&mr.pd.dev.nic) && !nic.is_removed() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "Mw::bind",
                "the region belongs to another device",
            ));
        }
        let bind = WindowBind {
            lkey: mr.lkey(),
            va: addr,
            len,
            access,
        };
        let k = nic.bind_mw(self.rkey(), bind)?;
        self.key.store(k, std::sync::atomic::Ordering::Release);
        Ok(k)
    }

    /// Revokes the grant.
    pub fn invalidate(&self) -> Result<()> {
        self.pd.dev.nic.invalidate_mw(self.rkey())
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        let _ = self.pd.dev.nic.dealloc_mw(self.rkey());
    }
}
