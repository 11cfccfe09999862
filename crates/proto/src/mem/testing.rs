//! [`VecMemory`]: an in-memory [`Memory`] for tests and examples.
//!
//! Regions are `Vec<u8>`s registered at a chosen virtual address with a PD and
//! access rights. As in Linux rxe a region's L_Key and R_Key are the same
//! number: a 24-bit index and an 8-bit key byte. Every check a real MR table
//! makes is made here too, so tests exercise the protocol's error paths.

use super::{Access, AccessError, AtomicOp, Memory, Sge};

/// Keys and placement of a registered region.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{testing::VecMemory, Access, Sge};
/// let mut mem = VecMemory::new();
/// let keys = mem.register(1, 0x1000, 256, Access::LOCAL_WRITE);
/// assert_eq!((keys.addr, keys.len), (0x1000, 256));
/// assert_eq!(keys.lkey, keys.rkey); // as in rxe
/// assert_eq!(keys.sge(16, 32), Sge::new(0x1010, 32, keys.lkey));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrKeys {
    /// Local key.
    pub lkey: u32,
    /// Remote key (equal to `lkey`).
    pub rkey: u32,
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
}

impl MrKeys {
    /// An SGE covering `len` bytes at `offset` into the region.
    pub fn sge(&self, offset: u32, len: u32) -> Sge {
        Sge::new(self.addr + u64::from(offset), len, self.lkey)
    }
}

#[derive(Debug, Clone)]
struct Region {
    key: u32,
    pd: u32,
    va: u64,
    access: Access,
    data: Vec<u8>,
    valid: bool,
    remote_invalidate: bool,
}

impl Region {
    fn range(&self, key: u32, addr: u64, len: u64) -> Result<std::ops::Range<usize>, AccessError> {
        let oob = AccessError::OutOfBounds { key, addr, len };
        let start = addr.checked_sub(self.va).ok_or(oob)?;
        let end = start.checked_add(len).ok_or(oob)?;
        if end > self.data.len() as u64 {
            return Err(oob);
        }
        Ok(start as usize..end as usize)
    }
}

/// Registered regions in plain vectors. See the [module docs](self).
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{scatter, testing::VecMemory, Access, Memory};
/// let mut mem = VecMemory::new();
/// let mr = mem.register(1, 0x1000, 8, Access::LOCAL_WRITE | Access::REMOTE_READ);
/// scatter(&mut mem, 1, &[mr.sge(0, 8)], 2, b"hey")?;
/// assert_eq!(mem.bytes(mr.lkey), b"\0\0hey\0\0\0");
/// // Invalidate the key: remote reads through it now fail.
/// mem.set_valid(mr.rkey, false);
/// assert!(mem.read_remote(1, mr.rkey, 0x1000, &mut [0; 8]).is_err());
/// # Ok::<(), ndverbs_proto::mem::AccessError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct VecMemory {
    regions: Vec<Region>,
    next_key_byte: u8,
}

impl VecMemory {
    /// No regions.
    pub fn new() -> Self {
        VecMemory::default()
    }

    /// Registers `len` zero bytes at virtual address `va`.
    pub fn register(&mut self, pd: u32, va: u64, len: u32, access: Access) -> MrKeys {
        self.register_bytes(pd, va, vec![0; len as usize], access)
    }

    /// Registers `data` at virtual address `va`.
    pub fn register_bytes(&mut self, pd: u32, va: u64, data: Vec<u8>, access: Access) -> MrKeys {
        self.next_key_byte = self.next_key_byte.wrapping_add(0x35);
        let key = ((self.regions.len() as u32 + 1) << 8) | u32::from(self.next_key_byte);
        self.register_with_key(pd, va, data, access, key)
    }

    /// Registers `data` at `va` under a chosen key (for replaying captures).
    /// A region registered later wins when keys collide.
    pub fn register_with_key(
        &mut self,
        pd: u32,
        va: u64,
        data: Vec<u8>,
        access: Access,
        key: u32,
    ) -> MrKeys {
        let len = data.len() as u32;
        self.regions.push(Region {
            key,
            pd,
            va,
            access,
            data,
            valid: true,
            remote_invalidate: false,
        });
        MrKeys {
            lkey: key,
            rkey: key,
            addr: va,
            len,
        }
    }

    /// Lets the peer invalidate `key` with SEND_WITH_INVALIDATE (like a bound
    /// memory window or a fast-registered MR).
    pub fn allow_remote_invalidate(&mut self, key: u32) {
        if let Some(r) = self.find_mut(key) {
            r.remote_invalidate = true;
        }
    }

    /// Invalidates or revalidates a key locally.
    pub fn set_valid(&mut self, key: u32, valid: bool) {
        if let Some(r) = self.regions.iter_mut().rev().find(|r| r.key == key) {
            r.valid = valid;
        }
    }

    /// True if `key` names a valid region.
    pub fn is_valid(&self, key: u32) -> bool {
        self.regions.iter().rev().any(|r| r.key == key && r.valid)
    }

    /// The bytes of the region with `key` (valid or not). Panics on an unknown key.
    pub fn bytes(&self, key: u32) -> &[u8] {
        &self
            .regions
            .iter()
            .rev()
            .find(|r| r.key == key)
            .expect("unknown key")
            .data
    }

    /// Mutable bytes of the region with `key`. Panics on an unknown key.
    pub fn bytes_mut(&mut self, key: u32) -> &mut [u8] {
        &mut self
            .regions
            .iter_mut()
            .rev()
            .find(|r| r.key == key)
            .expect("unknown key")
            .data
    }

    fn find_mut(&mut self, key: u32) -> Option<&mut Region> {
        self.regions
            .iter_mut()
            .rev()
            .find(|r| r.key == key && r.valid)
    }

    fn local(
        &mut self,
        pd: u32,
        sge: &Sge,
        offset: u32,
        len: usize,
        write: bool,
    ) -> Result<(&mut Region, std::ops::Range<usize>), AccessError> {
        let key = sge.lkey;
        if u64::from(offset) + len as u64 > u64::from(sge.len) {
            return Err(AccessError::OutOfBounds {
                key,
                addr: sge.addr.wrapping_add(u64::from(offset)),
                len: len as u64,
            });
        }
        let r = self.find_mut(key).ok_or(AccessError::InvalidLkey(key))?;
        if r.pd != pd {
            return Err(AccessError::PdMismatch {
                key,
                region_pd: r.pd,
                qp_pd: pd,
            });
        }
        if write && !r.access.contains(Access::LOCAL_WRITE) {
            return Err(AccessError::NoPermission {
                key,
                needed: Access::LOCAL_WRITE,
            });
        }
        let addr = sge
            .addr
            .checked_add(u64::from(offset))
            .ok_or(AccessError::OutOfBounds {
                key,
                addr: sge.addr,
                len: len as u64,
            })?;
        let range = r.range(key, addr, len as u64)?;
        Ok((r, range))
    }

    fn remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<(&mut Region, std::ops::Range<usize>), AccessError> {
        let r = self.find_mut(rkey).ok_or(AccessError::InvalidRkey(rkey))?;
        if r.pd != pd {
            return Err(AccessError::PdMismatch {
                key: rkey,
                region_pd: r.pd,
                qp_pd: pd,
            });
        }
        if !r.access.contains(access) {
            return Err(AccessError::NoPermission {
                key: rkey,
                needed: access,
            });
        }
        let range = r.range(rkey, va, len)?;
        Ok((r, range))
    }
}

impl Memory for VecMemory {
    fn read_local(
        &mut self,
        pd: u32,
        sge: &Sge,
        offset: u32,
        out: &mut [u8],
    ) -> Result<(), AccessError> {
        let (r, range) = self.local(pd, sge, offset, out.len(), false)?;
        out.copy_from_slice(&r.data[range]);
        Ok(())
    }

    fn write_local(
        &mut self,
        pd: u32,
        sge: &Sge,
        offset: u32,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let (r, range) = self.local(pd, sge, offset, data.len(), true)?;
        r.data[range].copy_from_slice(data);
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
        self.remote(pd, rkey, va, len, access).map(|_| ())
    }

    fn write_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let (r, range) = self.remote(pd, rkey, va, data.len() as u64, Access::REMOTE_WRITE)?;
        r.data[range].copy_from_slice(data);
        Ok(())
    }

    fn read_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        out: &mut [u8],
    ) -> Result<(), AccessError> {
        let (r, range) = self.remote(pd, rkey, va, out.len() as u64, Access::REMOTE_READ)?;
        out.copy_from_slice(&r.data[range]);
        Ok(())
    }

    fn atomic_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        op: AtomicOp,
    ) -> Result<u64, AccessError> {
        if va % 8 != 0 {
            return Err(AccessError::Misaligned(va));
        }
        let (r, range) = self.remote(pd, rkey, va, 8, Access::REMOTE_ATOMIC)?;
        let cell = &mut r.data[range];
        let mut b = [0u8; 8];
        b.copy_from_slice(cell);
        let orig = u64::from_ne_bytes(b);
        let new = match op {
            AtomicOp::CompareSwap { compare, swap } => {
                if orig == compare {
                    swap
                } else {
                    orig
                }
            }
            AtomicOp::FetchAdd { add } => orig.wrapping_add(add),
        };
        cell.copy_from_slice(&new.to_ne_bytes());
        Ok(orig)
    }

    fn invalidate_remote(&mut self, pd: u32, rkey: u32) -> Result<(), AccessError> {
        let r = self.find_mut(rkey).ok_or(AccessError::InvalidRkey(rkey))?;
        if r.pd != pd {
            return Err(AccessError::PdMismatch {
                key: rkey,
                region_pd: r.pd,
                qp_pd: pd,
            });
        }
        if !r.remote_invalidate {
            return Err(AccessError::NotInvalidatable(rkey));
        }
        r.valid = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_checks() {
        let mut m = VecMemory::new();
        let k = m.register(7, 0x10_000, 64, Access::REMOTE_READ | Access::REMOTE_ATOMIC);
        let mut out = [0u8; 8];
        assert!(m.read_remote(7, k.rkey, 0x10_000 + 56, &mut out).is_ok());
        assert!(matches!(
            m.read_remote(7, k.rkey, 0x10_000 + 57, &mut out),
            Err(AccessError::OutOfBounds { .. })
        ));
        assert!(matches!(
            m.read_remote(7, k.rkey, 0xffff, &mut out),
            Err(AccessError::OutOfBounds { .. })
        ));
        assert!(matches!(
            m.read_remote(7, k.rkey, u64::MAX - 2, &mut out),
            Err(AccessError::OutOfBounds { .. })
        ));
        assert!(matches!(
            m.write_remote(7, k.rkey, 0x10_000, b"x"),
            Err(AccessError::NoPermission { .. })
        ));
        assert!(matches!(
            m.read_remote(8, k.rkey, 0x10_000, &mut out),
            Err(AccessError::PdMismatch { .. })
        ));
        assert!(matches!(
            m.read_remote(7, k.rkey ^ 1, 0x10_000, &mut out),
            Err(AccessError::InvalidRkey(_))
        ));
        assert_eq!(
            m.atomic_remote(7, k.rkey, 0x10_008, AtomicOp::FetchAdd { add: 5 }),
            Ok(0)
        );
        assert_eq!(
            m.atomic_remote(
                7,
                k.rkey,
                0x10_008,
                AtomicOp::CompareSwap {
                    compare: 5,
                    swap: 9
                }
            ),
            Ok(5)
        );
        assert_eq!(
            m.atomic_remote(
                7,
                k.rkey,
                0x10_008,
                AtomicOp::CompareSwap {
                    compare: 5,
                    swap: 1
                }
            ),
            Ok(9)
        );
        assert_eq!(
            m.atomic_remote(7, k.rkey, 0x10_004, AtomicOp::FetchAdd { add: 1 }),
            Err(AccessError::Misaligned(0x10_004))
        );
        assert_eq!(
            m.invalidate_remote(7, k.rkey),
            Err(AccessError::NotInvalidatable(k.rkey))
        );
        m.allow_remote_invalidate(k.rkey);
        assert_eq!(m.invalidate_remote(7, k.rkey), Ok(()));
        assert!(!m.is_valid(k.rkey));
        assert_eq!(
            m.read_remote(7, k.rkey, 0x10_000, &mut out),
            Err(AccessError::InvalidRkey(k.rkey))
        );
    }

    #[test]
    fn local_write_needs_permission() {
        let mut m = VecMemory::new();
        let ro = m.register(1, 0x100, 16, Access::NONE);
        let rw = m.register(1, 0x200, 16, Access::LOCAL_WRITE);
        assert!(matches!(
            m.write_local(1, &ro.sge(0, 16), 0, b"a"),
            Err(AccessError::NoPermission { .. })
        ));
        assert!(m.write_local(1, &rw.sge(4, 4), 3, b"a").is_ok());
        assert!(m.write_local(1, &rw.sge(4, 4), 4, b"a").is_err());
        assert_eq!(m.bytes(rw.lkey)[7], b'a');
    }
}
