//! [`GrantTable`]: a memory table reduced to what only it knows — what a key
//! names and where its bytes are. [`Memory`] follows from that for every
//! table: which check each operation runs, with which rights, and how the
//! bytes move, is written once here.

use super::{
    check_atomic, check_invalidate, check_local, check_remote, Access, AccessError, AtomicOp,
    Grant, Memory, Sge,
};

/// The bytes a key covers, addressed from the grant's first byte.
///
/// Offsets and lengths passed in are inside the grant: the checks ran
/// first.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{AtomicOp, GrantBytes};
/// // A plain byte slice is the simplest grant.
/// let mut buf = [0u8; 16];
/// let mut bytes: &mut [u8] = &mut buf;
/// bytes.write(8, &5u64.to_ne_bytes());
/// assert_eq!(bytes.atomic(8, AtomicOp::FetchAdd { add: 1 }), 5);
/// let mut out = [0; 8];
/// bytes.read(8, &mut out);
/// assert_eq!(u64::from_ne_bytes(out), 6);
/// assert_eq!(bytes.lend(0), None); // copies only
/// ```
pub trait GrantBytes {
    /// Copies `out.len()` bytes at offset `off` into `out`.
    fn read(&self, off: u64, out: &mut [u8]);

    /// Copies `data` to offset `off`.
    fn write(&mut self, off: u64, data: &[u8]);

    /// Runs `op` on the 8 bytes at offset `off` (8-byte aligned in the
    /// address space) and returns the value before it.
    fn atomic(&mut self, off: u64, op: AtomicOp) -> u64;

    /// The address of the byte at offset `off`, if these bytes may be lent
    /// to a zero-copy send (see [`Memory::lend_local`]); `None` (the
    /// default) makes the sender copy.
    fn lend(&self, _off: u64) -> Option<usize> {
        None
    }
}

impl GrantBytes for &mut [u8] {
    fn read(&self, off: u64, out: &mut [u8]) {
        let start = off as usize;
        out.copy_from_slice(&self[start..start + out.len()]);
    }

    fn write(&mut self, off: u64, data: &[u8]) {
        let start = off as usize;
        self[start..start + data.len()].copy_from_slice(data);
    }

    fn atomic(&mut self, off: u64, op: AtomicOp) -> u64 {
        let start = off as usize;
        let cell = &mut self[start..start + 8];
        let mut orig = [0; 8];
        orig.copy_from_slice(cell);
        let orig = u64::from_ne_bytes(orig);
        cell.copy_from_slice(&op.apply(orig).to_ne_bytes());
        orig
    }
}

/// A memory table: what each key names and where its bytes are. Every
/// `GrantTable` is a [`Memory`], whose methods look the key up here, run
/// the matching check ([`check_local`], [`check_remote`], [`check_atomic`],
/// [`check_invalidate`]) and only then move bytes.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{Access, AccessError, Grant, GrantKind, GrantTable, Memory};
/// /// One region of 16 bytes at 0x1000 under key 7, readable by the peer.
/// struct One([u8; 16]);
/// impl GrantTable for One {
///     type Bytes<'a> = &'a mut [u8];
///     fn grant(&mut self, key: u32) -> Option<(Grant, &mut [u8])> {
///         let g = Grant { kind: GrantKind::Region { remote_invalidate: false }, pd: 1,
///             access: Access::REMOTE_READ, va: 0x1000, len: 16 };
///         (key == 7).then_some((g, &mut self.0[..]))
///     }
///     fn invalidate(&mut self, _key: u32) {}
/// }
/// let mut mem = One(*b"0123456789abcdef");
/// let mut out = [0; 4];
/// mem.read_remote(1, 7, 0x100a, &mut out)?;
/// assert_eq!(&out, b"abcd");
/// assert!(matches!(mem.write_remote(1, 7, 0x1000, b"x"), Err(AccessError::NoPermission { .. })));
/// # Ok::<(), AccessError>(())
/// ```
pub trait GrantTable {
    /// The bytes behind a grant, borrowed from the table.
    type Bytes<'a>: GrantBytes
    where
        Self: 'a;

    /// What `key` names and its bytes; `None` if it names nothing usable
    /// (never issued, deregistered, invalidated, an unbound window).
    fn grant(&mut self, key: u32) -> Option<(Grant, Self::Bytes<'_>)>;

    /// Ends `key` after the peer's SEND_WITH_INVALIDATE passed
    /// [`check_invalidate`]: a window is unbound, a region invalidated.
    fn invalidate(&mut self, key: u32);
}

/// Looks `key` up in `t`, runs `check` on what was found and returns the
/// offset it gives with the bytes.
fn checked<T: GrantTable + ?Sized>(
    t: &mut T,
    key: u32,
    unknown: AccessError,
    check: impl FnOnce(Option<&Grant>) -> Result<u64, AccessError>,
) -> Result<(u64, T::Bytes<'_>), AccessError> {
    let found = t.grant(key);
    let off = check(found.as_ref().map(|(g, _)| g))?;
    match found {
        Some((_, bytes)) => Ok((off, bytes)),
        None => Err(unknown),
    }
}

fn local<'t, T: GrantTable + ?Sized>(
    t: &'t mut T,
    pd: u32,
    sge: &Sge,
    offset: u32,
    len: usize,
    write: bool,
) -> Result<(u64, T::Bytes<'t>), AccessError> {
    let unknown = AccessError::InvalidLkey(sge.lkey);
    checked(t, sge.lkey, unknown, |g| {
        check_local(g, pd, sge, offset, len as u64, write)
    })
}

fn remote<'t, T: GrantTable + ?Sized>(
    t: &'t mut T,
    pd: u32,
    rkey: u32,
    va: u64,
    len: usize,
    need: Access,
) -> Result<(u64, T::Bytes<'t>), AccessError> {
    let unknown = AccessError::InvalidRkey(rkey);
    checked(t, rkey, unknown, |g| {
        check_remote(g, pd, rkey, va, len as u64, need)
    })
}

impl<T: GrantTable + ?Sized> Memory for T {
    fn read_local(
        &mut self,
        pd: u32,
        sge: &Sge,
        offset: u32,
        out: &mut [u8],
    ) -> Result<(), AccessError> {
        let (off, bytes) = local(self, pd, sge, offset, out.len(), false)?;
        bytes.read(off, out);
        Ok(())
    }

    fn write_local(
        &mut self,
        pd: u32,
        sge: &Sge,
        offset: u32,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let (off, mut bytes) = local(self, pd, sge, offset, data.len(), true)?;
        bytes.write(off, data);
        Ok(())
    }

    fn check_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<(), AccessError> {
        let found = self.grant(rkey).map(|(g, _)| g);
        check_remote(found.as_ref(), pd, rkey, va, len, access).map(|_| ())
    }

    fn write_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let (off, mut bytes) = remote(self, pd, rkey, va, data.len(), Access::REMOTE_WRITE)?;
        bytes.write(off, data);
        Ok(())
    }

    fn read_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        out: &mut [u8],
    ) -> Result<(), AccessError> {
        let (off, bytes) = remote(self, pd, rkey, va, out.len(), Access::REMOTE_READ)?;
        bytes.read(off, out);
        Ok(())
    }

    fn atomic_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        op: AtomicOp,
    ) -> Result<u64, AccessError> {
        let unknown = AccessError::InvalidRkey(rkey);
        let (off, mut bytes) = checked(self, rkey, unknown, |g| check_atomic(g, pd, rkey, va))?;
        Ok(bytes.atomic(off, op))
    }

    fn invalidate_remote(&mut self, pd: u32, rkey: u32) -> Result<(), AccessError> {
        let found = self.grant(rkey).map(|(g, _)| g);
        check_invalidate(found.as_ref(), pd, rkey)?;
        self.invalidate(rkey);
        Ok(())
    }

    fn lend_local(
        &mut self,
        pd: u32,
        sge: &Sge,
        offset: u32,
        len: usize,
    ) -> Result<Option<usize>, AccessError> {
        let (off, bytes) = local(self, pd, sge, offset, len, false)?;
        Ok(bytes.lend(off))
    }

    fn lend_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        len: usize,
    ) -> Result<Option<usize>, AccessError> {
        let (off, bytes) = remote(self, pd, rkey, va, len, Access::REMOTE_READ)?;
        Ok(bytes.lend(off))
    }
}
