//! Memory regions and memory windows.
//!
//! `Register` gives memory a local token (for SGEs) and a remote token (for
//! the peer's READ/WRITE); flags follow ND: `ALLOW_REMOTE_WRITE` (0x5)
//! includes local write, `RDMA_READ_SINK` (0x8) is local write,
//! `DO_NOT_SECURE_VM` is accepted and ignored. Memory the region owns is
//! reached through copies. Application memory is registered in place either
//! safely, as an owned buffer the region keeps until it gives it back
//! ([`MemoryRegion::register_buffer`]), or through `unsafe`
//! ([`MemoryRegion::register_raw`]).

use crate::adapter::{nd_err, Adapter};
use crate::pending::NdPending;
use crate::qp::NdSge;
use crate::status::{NdError, NdResult, NdStatus};
use ndverbs_verbs::{Access, Mr, Mw, StableBuffer};
use std::any::Any;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// A region's registration, if it has one; the adapter finds it by local
/// token (inline requests copy from it).
pub(crate) type MrSlot = Mutex<Option<Registered>>;

/// A registration: the verbs region and, for
/// [`MemoryRegion::register_buffer`], the buffer it was made over. The
/// buffer lives in the slot with the region (the adapter may hold the slot
/// a moment longer than the `MemoryRegion`) and is dropped after it: fields
/// drop in order, so no key outlives the bytes it names.
pub(crate) struct Registered {
    mr: Mr,
    buffer: Option<Box<dyn Any + Send>>,
}

impl Deref for Registered {
    type Target = Mr;

    fn deref(&self) -> &Mr {
        &self.mr
    }
}

bitflags::bitflags! {
    /// `ND_MR_FLAG_*`, with ND's values: what a registration allows.
    /// Unknown bits fail `Register` with `ND_INVALID_PARAMETER_3`;
    /// [`MrFlags::from_bits_retain`] passes raw values through unchanged.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct MrFlags: u32 {
        /// Local write.
        const ALLOW_LOCAL_WRITE = 0x1;
        /// Remote read.
        const ALLOW_REMOTE_READ = 0x2;
        /// Remote write, which ND defines to include local write.
        const ALLOW_REMOTE_WRITE = REMOTE_WRITE_BIT | Self::ALLOW_LOCAL_WRITE.bits();
        /// Target of RDMA READs (local write).
        const RDMA_READ_SINK = 0x8;
        /// Ignored.
        const DO_NOT_SECURE_VM = 0x8000_0000;
    }
}

/// The bit of `ALLOW_REMOTE_WRITE` that is not local write: on its own it
/// grants remote write too.
const REMOTE_WRITE_BIT: u32 = 0x4;

impl MrFlags {
    /// The verbs rights of a registration with these flags.
    fn access(self) -> NdResult<Access> {
        if !MrFlags::all().contains(self) {
            return Err(NdError::new(
                NdStatus::INVALID_PARAMETER_3,
                format!("unknown MR flags {:#x}", self.bits()),
            ));
        }
        let mut a = Access::NONE;
        if self.intersects(MrFlags::ALLOW_LOCAL_WRITE | MrFlags::RDMA_READ_SINK) {
            a |= Access::LOCAL_WRITE;
        }
        if self.contains(MrFlags::ALLOW_REMOTE_READ) {
            a |= Access::REMOTE_READ;
        }
        if self.bits() & REMOTE_WRITE_BIT != 0 {
            a |= Access::REMOTE_WRITE | Access::LOCAL_WRITE | Access::REMOTE_ATOMIC;
        }
        Ok(a)
    }
}

/// A memory region (unregistered until [`MemoryRegion::register`]).
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// let adapter = Provider.open_adapter("127.91.8.1".parse().unwrap())?;
/// let mr = adapter.create_memory_region()?;
/// assert!(mr.is_empty() && mr.local_token() == 0);
/// // Register zeroed memory the region owns; ALLOW_REMOTE_WRITE lets peers write it.
/// mr.register(4096, MrFlags::ALLOW_REMOTE_WRITE).wait()?;
/// assert_eq!(mr.len(), 4096);
/// // The bytes are reached by copy (peers may write them at any time).
/// mr.write(0, b"hello")?;
/// let mut buf = [0u8; 5];
/// mr.read(0, &mut buf)?;
/// assert_eq!(&buf, b"hello");
/// // Local requests name it by SGE; a peer gets its address and remote token.
/// let sge = NdSge::new(mr.address(), 5, mr.local_token());
/// assert_eq!((sge.len, sge.lkey), (5, mr.local_token()));
/// let (_address, _token) = (mr.address(), mr.remote_token());
/// mr.deregister().wait()?;
/// assert!(mr.is_empty());
/// assert_eq!(mr.register(0, MrFlags::empty()).wait().unwrap_err().status, NdStatus::INVALID_BUFFER_SIZE);
/// # Ok::<(), NdError>(())
/// ```
pub struct MemoryRegion {
    adapter: Adapter,
    mr: Arc<MrSlot>,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion").finish()
    }
}

impl MemoryRegion {
    pub(crate) fn create(adapter: &Adapter) -> NdResult<Self> {
        if adapter.is_removed() {
            return Err(NdError::new(NdStatus::DEVICE_REMOVED, "adapter removed"));
        }
        Ok(MemoryRegion {
            adapter: adapter.clone(),
            mr: Arc::default(),
        })
    }

    fn set(&self, r: Result<Mr, ndverbs_verbs::Error>) -> NdPending<()> {
        NdPending::ready(self.set_owning(r, None))
    }

    fn set_owning(
        &self,
        r: Result<Mr, ndverbs_verbs::Error>,
        buffer: Option<Box<dyn Any + Send>>,
    ) -> NdResult<()> {
        r.map_err(nd_err).and_then(|mr| {
            let mut slot = self.mr.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_some() {
                return Err(NdError::new(
                    NdStatus::INVALID_DEVICE_STATE,
                    "already registered",
                ));
            }
            self.adapter.track_region(mr.lkey(), &self.mr);
            *slot = Some(Registered { mr, buffer });
            Ok(())
        })
    }

    /// `ND_INVALID_BUFFER_SIZE` for a length of 0 or beyond the adapter's
    /// `MaxRegistrationSize`.
    fn check_len(&self, len: usize) -> NdResult<()> {
        let max = self.adapter.limits().max_mr_size;
        if len == 0 || len as u64 > max {
            return Err(NdError::new(
                NdStatus::INVALID_BUFFER_SIZE,
                format!("registration of {len} bytes: 1 to {max} allowed"),
            ));
        }
        Ok(())
    }

    /// `Register` of `len` zeroed bytes the region owns. `len` 0 or above
    /// `MaxRegistrationSize` → `ND_INVALID_BUFFER_SIZE` (checked before the
    /// flags: unknown flags → `ND_INVALID_PARAMETER_3`).
    pub fn register(&self, len: usize, flags: MrFlags) -> NdPending<()> {
        if let Err(e) = self.check_len(len) {
            return NdPending::ready(Err(e));
        }
        match flags.access() {
            Ok(a) => self.set(self.adapter.inner.pd.reg_mr(len, a)),
            Err(e) => NdPending::ready(Err(e)),
        }
    }

    /// `Register` of application memory in place. A null pointer →
    /// `ND_INVALID_PARAMETER`; length 0 or above `MaxRegistrationSize` →
    /// `ND_INVALID_BUFFER_SIZE`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid (and not be used through Rust references)
    /// until the region is deregistered and dropped.
    pub unsafe fn register_raw(&self, ptr: *mut u8, len: usize, flags: MrFlags) -> NdPending<()> {
        let Some(p) = NonNull::new(ptr) else {
            return NdPending::ready(Err(NdError::new(
                NdStatus::INVALID_PARAMETER,
                "null buffer",
            )));
        };
        if let Err(e) = self.check_len(len) {
            return NdPending::ready(Err(e));
        }
        match flags.access() {
            // SAFETY: forwarded to the caller.
            Ok(a) => self.set(unsafe { self.adapter.inner.pd.reg_mr_raw(p, len, a) }),
            Err(e) => NdPending::ready(Err(e)),
        }
    }

    /// `Register` of an owned buffer in place, without `unsafe` (see
    /// [`ndverbs_verbs::owned`] for why this is sound): the region keeps
    /// the buffer until [`MemoryRegion::deregister_buffer`] gives it back,
    /// or frees it after deregistering when dropped. Lengths and flags are
    /// checked as by [`MemoryRegion::register`] (the buffer is dropped with
    /// the error).
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// let adapter = Provider.open_adapter("127.91.8.3".parse().unwrap())?;
    /// let mr = adapter.create_memory_region()?;
    /// mr.register_buffer(b"hello".to_vec(), MrFlags::ALLOW_REMOTE_WRITE).wait()?;
    /// mr.write(0, b"J")?;
    /// let back: Vec<u8> = mr.deregister_buffer()?;
    /// assert_eq!(back, b"Jello");
    /// # Ok::<(), NdError>(())
    /// ```
    ///
    /// Freeing the buffer while it is registered does not compile:
    ///
    /// ```compile_fail,E0382
    /// use ndverbs_nd::*;
    /// let adapter = Provider.open_adapter("127.91.8.4".parse().unwrap())?;
    /// let mr = adapter.create_memory_region()?;
    /// let buf = vec![0u8; 4096];
    /// mr.register_buffer(buf, MrFlags::ALLOW_REMOTE_WRITE).wait()?;
    /// drop(buf);
    /// # Ok::<(), NdError>(())
    /// ```
    pub fn register_buffer<B: StableBuffer>(&self, mut buf: B, flags: MrFlags) -> NdPending<()> {
        let (ptr, len) = buf.stable_bytes();
        if let Err(e) = self.check_len(len) {
            return NdPending::ready(Err(e));
        }
        let a = match flags.access() {
            Ok(a) => a,
            Err(e) => return NdPending::ready(Err(e)),
        };
        // SAFETY: the bytes are the buffer's; the slot keeps the buffer,
        // unreferenced, until after the region is deregistered.
        let r = unsafe { self.adapter.inner.pd.reg_mr_raw(ptr, len, a) };
        NdPending::ready(self.set_owning(r, Some(Box::new(buf))))
    }

    /// `Deregister`; `ND_DEVICE_BUSY` while a window is bound to the region.
    pub fn deregister(&self) -> NdPending<()> {
        NdPending::ready(self.deregister_taking(|_| true).map(|_| ()))
    }

    /// `Deregister` of a region made by [`MemoryRegion::register_buffer`],
    /// giving the buffer back. A region registered otherwise, or over
    /// another type of buffer, is `ND_INVALID_PARAMETER` and stays
    /// registered.
    pub fn deregister_buffer<B: StableBuffer>(&self) -> NdResult<B> {
        let owner = self.deregister_taking(|b| b.is_some_and(|b| b.is::<B>()))?;
        match owner.map(|b| b.downcast::<B>()) {
            Some(Ok(b)) => Ok(*b),
            // Checked before deregistering.
            _ => Err(NdError::new(
                NdStatus::INTERNAL_ERROR,
                "buffer type changed",
            )),
        }
    }

    /// Deregisters if `wanted` accepts the registration's buffer; returns it.
    fn deregister_taking(
        &self,
        wanted: impl FnOnce(Option<&(dyn Any + Send)>) -> bool,
    ) -> NdResult<Option<Box<dyn Any + Send>>> {
        let mut slot = self.mr.lock().unwrap_or_else(|e| e.into_inner());
        let Some(reg) = slot.take() else {
            return Err(NdError::new(
                NdStatus::INVALID_DEVICE_STATE,
                "not registered",
            ));
        };
        if !wanted(reg.buffer.as_deref()) {
            *slot = Some(reg);
            return Err(NdError::new(
                NdStatus::INVALID_PARAMETER,
                "the region was not registered over a buffer of this type",
            ));
        }
        let Registered { mr, buffer } = reg;
        let lkey = mr.lkey();
        match mr.deregister() {
            Ok(()) => {
                self.adapter.forget_region(lkey);
                Ok(buffer)
            }
            Err((mr, e)) => {
                *slot = Some(Registered { mr, buffer });
                Err(nd_err(e))
            }
        }
    }

    fn with<T>(&self, f: impl FnOnce(&Mr) -> T) -> NdResult<T> {
        let slot = self.mr.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_deref()
            .map(f)
            .ok_or_else(|| NdError::new(NdStatus::INVALID_DEVICE_STATE, "not registered"))
    }

    /// The local token (0 when unregistered).
    pub fn local_token(&self) -> u32 {
        self.with(Mr::lkey).unwrap_or(0)
    }

    /// The remote token (0 when unregistered).
    pub fn remote_token(&self) -> u32 {
        self.with(Mr::rkey).unwrap_or(0)
    }

    /// The address of the first byte (what SGEs and peers use).
    pub fn address(&self) -> u64 {
        self.with(Mr::addr).unwrap_or(0)
    }

    /// Length.
    pub fn len(&self) -> usize {
        self.with(Mr::len).unwrap_or(0)
    }

    /// True when not registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies bytes out.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> NdResult<()> {
        self.with(|m| m.read(offset, out))?.map_err(nd_err)
    }

    /// Copies bytes in.
    pub fn write(&self, offset: usize, data: &[u8]) -> NdResult<()> {
        self.with(|m| m.write(offset, data))?.map_err(nd_err)
    }

    pub(crate) fn with_mr<T>(&self, f: impl FnOnce(&Mr) -> T) -> NdResult<T> {
        self.with(f)
    }

    /// `CancelOverlappedRequests`: `Register` and `Deregister` complete
    /// before they return here, so nothing is ever pending to cancel; it
    /// succeeds, also after removal (it is cleanup).
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_nd::*;
    /// let adapter = Provider.open_adapter("127.91.8.2".parse().unwrap())?;
    /// let mr = adapter.create_memory_region()?;
    /// let registering = mr.register(4096, MrFlags::ALLOW_LOCAL_WRITE);
    /// mr.cancel_overlapped_requests()?;
    /// registering.wait()?; // it had completed already
    /// adapter.remove();
    /// mr.cancel_overlapped_requests()?;
    /// # Ok::<(), NdError>(())
    /// ```
    pub fn cancel_overlapped_requests(&self) -> NdResult<()> {
        Ok(())
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        let slot = self.mr.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mr) = &*slot {
            self.adapter.forget_region(mr.lkey());
        }
    }
}

/// The bytes `sges` name, copied out of the adapter's registered regions
/// (what an inline request sends). Each SGE must lie within one region —
/// the one of its token, or any other: ND lets an inline SGE's token be
/// invalid — or the request is `ND_ACCESS_VIOLATION`.
pub(crate) fn gather(adapter: &Adapter, sges: &[NdSge]) -> NdResult<Vec<u8>> {
    let total: usize = sges.iter().map(|s| s.len as usize).sum();
    let mut data = vec![0; total];
    let mut at = 0;
    for sge in sges.iter().filter(|s| s.len > 0) {
        let out = &mut data[at..at + sge.len as usize];
        let copied = adapter.regions(sge.lkey).iter().any(|slot| {
            let slot = slot.lock().unwrap_or_else(|e| e.into_inner());
            let Some(mr) = slot.as_ref() else {
                return false;
            };
            let Some(offset) = sge.addr.checked_sub(mr.addr()) else {
                return false;
            };
            offset + u64::from(sge.len) <= mr.len() as u64 && mr.read(offset as usize, out).is_ok()
        });
        if !copied {
            return Err(NdError::new(
                NdStatus::ACCESS_VIOLATION,
                format!(
                    "inline SGE {:#x}+{} is in no registered region of the adapter",
                    sge.addr, sge.len
                ),
            ));
        }
        at += sge.len as usize;
    }
    Ok(data)
}

/// A memory window.
///
/// # Example
///
/// ```
/// use ndverbs_nd::*;
/// # fn connect(
/// #     (server, sqp): (&Adapter, &QueuePair),
/// #     (client, cqp): (&Adapter, &QueuePair),
/// # ) -> NdResult<(Connector, Connector)> {
/// #     let listener = server.create_listener()?;
/// #     listener.bind(std::net::SocketAddr::new(server.address(), 0))?;
/// #     listener.listen(1)?;
/// #     let (sc, cc) = (server.create_connector()?, client.create_connector()?);
/// #     let request = listener.get_connection_request(&sc)?;
/// #     let rep = cc.connect(cqp, listener.get_local_address()?, 1, 1, b"")?;
/// #     request.wait()?;
/// #     let rtu = sc.accept(sqp, 1, 1, b"")?;
/// #     rep.wait()?;
/// #     cc.complete_connect()?.wait()?;
/// #     rtu.wait()?;
/// #     Ok((sc, cc))
/// # }
/// let server = Provider.open_adapter("127.91.9.1".parse().unwrap())?;
/// let client = Provider.open_adapter("127.91.9.2".parse().unwrap())?;
/// let (scq, ccq) = (server.create_completion_queue(8)?, client.create_completion_queue(8)?);
/// let sqp = server.create_queue_pair(&scq, &scq, 0, QueuePairSizes::new(4, 1))?;
/// let cqp = client.create_queue_pair(&ccq, &ccq, 0, QueuePairSizes::new(4, 1))?;
/// // The region must allow what a window on it may grant.
/// let mr = server.create_memory_region()?;
/// mr.register(4096, MrFlags::ALLOW_REMOTE_WRITE).wait()?;
/// let mw = server.create_memory_window()?;
/// let src = client.create_memory_region()?;
/// src.register(64, MrFlags::ALLOW_LOCAL_WRITE).wait()?;
/// src.write(0, b"through a window")?;
/// let data = [NdSge::new(src.address(), 16, src.local_token())];
/// # let _connectors = connect((&server, &sqp), (&client, &cqp))?;
/// // Bind (on a connected QP): grant 16 bytes at offset 256, writable. The
/// // window's token changes; the server would send it and the address to the peer.
/// let window = mr.address() + 256;
/// sqp.bind(1, &mr, &mw, window, 16, OpFlags::ALLOW_WRITE)?;
/// assert_eq!(scq.wait_result()?.request_type, RequestType::Bind);
/// cqp.write(2, &data, window, mw.remote_token(), OpFlags::empty())?;
/// assert_eq!(ccq.wait_result()?.status, NdStatus::SUCCESS);
/// let mut got = [0u8; 16];
/// mr.read(256, &mut got)?;
/// assert_eq!(&got, b"through a window");
/// // Invalidate revokes the grant: the same WRITE now fails at the peer.
/// sqp.invalidate(3, &mw, OpFlags::empty())?;
/// assert_eq!(scq.wait_result()?.request_type, RequestType::Invalidate);
/// cqp.write(4, &data, window, mw.remote_token(), OpFlags::empty())?;
/// assert_eq!(ccq.wait_result()?.status, NdStatus::ACCESS_VIOLATION);
/// # Ok::<(), NdError>(())
/// ```
pub struct MemoryWindow {
    pub(crate) mw: Mw,
}

impl std::fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("token", &self.mw.rkey())
            .finish()
    }
}

impl MemoryWindow {
    pub(crate) fn create(adapter: &Adapter) -> NdResult<Self> {
        Ok(MemoryWindow {
            mw: adapter.inner.pd.alloc_mw().map_err(nd_err)?,
        })
    }

    /// The remote token (changes at every bind).
    pub fn remote_token(&self) -> u32 {
        self.mw.rkey()
    }
}
