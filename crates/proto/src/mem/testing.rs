//! [`VecMemory`]: an in-memory [`Memory`](super::Memory) for tests, examples, the
//! simulation and the fuzzers.
//!
//! Regions are `Vec<u8>`s registered at a chosen virtual address with a PD and
//! access rights; memory windows grant a peer part of a region under keys of
//! their own. As in Linux rxe a region's L_Key and R_Key are the same number:
//! a 24-bit index and an 8-bit key byte. It is a [`GrantTable`], as the
//! engine's memory table is, so every access runs the same checks in the
//! same order and tests exercise the protocol's error paths with the errors
//! production gives.

use super::{check_bind, Access, AccessError, Grant, GrantKind, GrantTable, Sge, WindowBind};

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

#[derive(Debug, Clone)]
struct Window {
    key: u32,
    pd: u32,
    binding: Option<Binding>,
}

/// A bound window: what `bind` asked for, in region `region` (an index).
#[derive(Debug, Clone, Copy)]
struct Binding {
    region: usize,
    bind: WindowBind,
}

/// Where a key's bytes are: a region (by index) and the grant's first byte
/// as an offset inside it.
#[derive(Debug, Clone, Copy)]
struct Place {
    region: usize,
    base: u64,
}

/// Registered regions and windows in plain vectors. See the [module docs](self).
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{scatter, testing::VecMemory, Access, Memory, WindowBind};
/// let mut mem = VecMemory::new();
/// let mr = mem.register(1, 0x1000, 8, Access::LOCAL_WRITE | Access::REMOTE_READ);
/// scatter(&mut mem, 1, &[mr.sge(0, 8)], 2, b"hey")?;
/// assert_eq!(mem.bytes(mr.lkey), b"\0\0hey\0\0\0");
/// // Grant the peer 4 bytes of it through a window, then take them back.
/// let mw = mem.alloc_window(1);
/// let bind = WindowBind { lkey: mr.lkey, va: 0x1002, len: 4, access: Access::REMOTE_READ };
/// let rkey = mem.bind_window(mw, bind)?;
/// let mut out = [0; 3];
/// mem.read_remote(1, rkey, 0x1002, &mut out)?;
/// assert_eq!(&out, b"hey");
/// assert!(mem.read_remote(1, rkey, 0x1000, &mut out).is_err()); // outside the window
/// mem.invalidate_window(rkey)?;
/// assert!(mem.read_remote(1, rkey, 0x1002, &mut out).is_err());
/// // Invalidate the region's own key: remote reads through it now fail.
/// mem.set_valid(mr.rkey, false);
/// assert!(mem.read_remote(1, mr.rkey, 0x1000, &mut [0; 8]).is_err());
/// # Ok::<(), ndverbs_proto::mem::AccessError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct VecMemory {
    regions: Vec<Region>,
    windows: Vec<Window>,
    issued: u32,
    next_key_byte: u8,
}

impl VecMemory {
    /// No regions.
    pub fn new() -> Self {
        VecMemory::default()
    }

    /// A key no earlier call returned: an index and a key byte, as rxe's.
    fn fresh_key(&mut self) -> u32 {
        self.next_key_byte = self.next_key_byte.wrapping_add(0x35);
        self.issued += 1;
        (self.issued << 8) | u32::from(self.next_key_byte)
    }

    /// Registers `len` zero bytes at virtual address `va`.
    pub fn register(&mut self, pd: u32, va: u64, len: u32, access: Access) -> MrKeys {
        self.register_bytes(pd, va, vec![0; len as usize], access)
    }

    /// Registers `data` at virtual address `va`.
    pub fn register_bytes(&mut self, pd: u32, va: u64, data: Vec<u8>, access: Access) -> MrKeys {
        let key = self.fresh_key();
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

    /// Lets the peer invalidate region `key` with SEND_WITH_INVALIDATE (as a
    /// fast-registered MR may be).
    pub fn allow_remote_invalidate(&mut self, key: u32) {
        if let Some(i) = self.region_index(key) {
            self.regions[i].remote_invalidate = true;
        }
    }

    /// Invalidates or revalidates a region's key locally. Windows bound to
    /// the region keep working, as after the engine revokes a region.
    pub fn set_valid(&mut self, key: u32, valid: bool) {
        if let Some(r) = self.regions.iter_mut().rev().find(|r| r.key == key) {
            r.valid = valid;
        }
    }

    /// True if `key` names a valid region or a bound window.
    pub fn is_valid(&self, key: u32) -> bool {
        self.lookup(key).is_some()
    }

    /// Allocates an unbound memory window in `pd`; returns its key.
    pub fn alloc_window(&mut self, pd: u32) -> u32 {
        let key = self.fresh_key();
        self.windows.push(Window {
            key,
            pd,
            binding: None,
        });
        key
    }

    /// Binds window `mw` as `bind` asks (checked by [`check_bind`]); returns
    /// the window's new key, as each bind of a type-2 window gives one so old
    /// grants die. An unknown window is [`AccessError::InvalidRkey`], an
    /// unknown region [`AccessError::InvalidLkey`].
    pub fn bind_window(&mut self, mw: u32, bind: WindowBind) -> Result<u32, AccessError> {
        let w = self
            .windows
            .iter()
            .position(|w| w.key == mw)
            .ok_or(AccessError::InvalidRkey(mw))?;
        let (grant, place) = self
            .lookup(bind.lkey)
            .ok_or(AccessError::InvalidLkey(bind.lkey))?;
        check_bind(&grant, self.windows[w].pd, bind)?;
        let key = self.fresh_key();
        let w = &mut self.windows[w];
        w.key = key;
        w.binding = Some(Binding {
            region: place.region,
            bind,
        });
        Ok(key)
    }

    /// Unbinds window `rkey` (a local invalidate); the window stays
    /// allocated under that key.
    pub fn invalidate_window(&mut self, rkey: u32) -> Result<(), AccessError> {
        let w = self
            .windows
            .iter_mut()
            .find(|w| w.key == rkey)
            .ok_or(AccessError::InvalidRkey(rkey))?;
        w.binding = None;
        Ok(())
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

    /// The newest valid region registered under `key`.
    fn region_index(&self, key: u32) -> Option<usize> {
        self.regions.iter().rposition(|r| r.key == key && r.valid)
    }

    /// What `key` names, for the checks, and where its bytes are.
    fn lookup(&self, key: u32) -> Option<(Grant, Place)> {
        if let Some(i) = self.region_index(key) {
            let r = &self.regions[i];
            let grant = Grant {
                kind: GrantKind::Region {
                    remote_invalidate: r.remote_invalidate,
                },
                pd: r.pd,
                access: r.access,
                va: r.va,
                len: r.data.len() as u64,
            };
            return Some((grant, Place { region: i, base: 0 }));
        }
        let w = self.windows.iter().find(|w| w.key == key)?;
        let b = w.binding?;
        let base = b.bind.va - self.regions[b.region].va;
        Some((
            b.bind.grant(w.pd),
            Place {
                region: b.region,
                base,
            },
        ))
    }
}

impl GrantTable for VecMemory {
    type Bytes<'a> = &'a mut [u8];

    fn grant(&mut self, key: u32) -> Option<(Grant, &mut [u8])> {
        let (grant, place) = self.lookup(key)?;
        let start = place.base as usize;
        let bytes = &mut self.regions[place.region].data[start..start + grant.len as usize];
        Some((grant, bytes))
    }

    fn invalidate(&mut self, key: u32) {
        match self.region_index(key) {
            Some(i) => self.regions[i].valid = false,
            None => {
                let _ = self.invalidate_window(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::{AtomicOp, Memory};

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
        let cas = |compare, swap| AtomicOp::CompareSwap { compare, swap };
        for (op, before) in [
            (AtomicOp::FetchAdd { add: 5 }, 0),
            (cas(5, 9), 5),
            (cas(5, 1), 9),
        ] {
            assert_eq!(m.atomic_remote(7, k.rkey, 0x10_008, op), Ok(before));
        }
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
