//! The access checks, once: every memory table (the engine's, the test
//! memory) looks a key up and hands what it found to these functions, so the
//! same bad request gets the same [`AccessError`] everywhere.
//!
//! The order is Linux rxe's (`lookup_mr`, then `mr_check_range`, then the
//! atomic's alignment): first the **key** (it must name a live region, or for
//! remote accesses a bound window), then the **PD**, then the **rights**,
//! then the **bounds** (the range lies inside what the key covers, without
//! overflowing the address space), and for atomics last the **alignment**.
//! The first check that fails names the error; later ones are not run.
//!
//! A zero-length access is checked like any other (the key must be good and
//! its address inside or at the end of the range). The protocol decides when
//! it does not ask at all: a zero-length READ or WRITE carries no usable key
//! (IBTA C9-88), and the responder skips the check.

use super::{Access, AccessError, Sge};

/// What one live key names, as a memory table describes it to the checks:
/// a registered region, or a memory window bound to part of one.
///
/// A table passes `None` for a key that names nothing usable: never issued,
/// deregistered, invalidated, or a window that is not bound.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{check_remote, Access, AccessError, Grant, GrantKind};
/// // 4 KiB at 0x10000 in PD 1, readable by the peer.
/// let mr = Grant { kind: GrantKind::Region { remote_invalidate: false }, pd: 1,
///     access: Access::LOCAL_WRITE | Access::REMOTE_READ, va: 0x10000, len: 4096 };
/// // The offset of the first byte inside the region when every check passes.
/// assert_eq!(check_remote(Some(&mr), 1, 0x99, 0x10010, 64, Access::REMOTE_READ), Ok(0x10));
/// // A key the table does not know.
/// assert_eq!(check_remote(None, 1, 0x99, 0x10010, 64, Access::REMOTE_READ),
///     Err(AccessError::InvalidRkey(0x99)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Grant {
    /// Region or window.
    pub kind: GrantKind,
    /// Protection domain of the region or window.
    pub pd: u32,
    /// Rights the key grants.
    pub access: Access,
    /// First byte the key covers.
    pub va: u64,
    /// Bytes it covers.
    pub len: u64,
}

/// What kind of object a key names.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{check_local, Access, AccessError, Grant, GrantKind, Sge};
/// // A window's key serves remote requests only: as an L_Key it names nothing.
/// let mw = Grant { kind: GrantKind::Window, pd: 1, access: Access::REMOTE_READ, va: 0x1000, len: 64 };
/// let sge = Sge::new(0x1000, 8, 0x77);
/// assert_eq!(check_local(Some(&mw), 1, &sge, 0, 8, false), Err(AccessError::InvalidLkey(0x77)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GrantKind {
    /// A registered memory region: its key serves local SGEs and remote
    /// requests. `remote_invalidate` lets the peer invalidate it with
    /// SEND_WITH_INVALIDATE (as a fast-registered region may be).
    Region {
        /// The peer may invalidate the key.
        remote_invalidate: bool,
    },
    /// A bound memory window (type 2): remote requests only, and the peer may
    /// invalidate it.
    Window,
}

/// The rights in `need` that `have` lacks.
fn missing(have: Access, need: Access) -> Access {
    Access::from_bits(need.bits() & !have.bits()).unwrap_or(need)
}

fn check_pd(key: u32, g: &Grant, pd: u32) -> Result<(), AccessError> {
    if g.pd == pd {
        Ok(())
    } else {
        Err(AccessError::PdMismatch {
            key,
            region_pd: g.pd,
            qp_pd: pd,
        })
    }
}

fn check_rights(key: u32, g: &Grant, need: Access) -> Result<(), AccessError> {
    if g.access.contains(need) {
        Ok(())
    } else {
        Err(AccessError::NoPermission {
            key,
            needed: missing(g.access, need),
        })
    }
}

/// Offset of `[addr, addr + len)` inside the grant, if it lies inside.
fn check_bounds(key: u32, g: &Grant, addr: u64, len: u64) -> Result<u64, AccessError> {
    let oob = AccessError::OutOfBounds { key, addr, len };
    let off = addr.checked_sub(g.va).ok_or(oob)?;
    match off.checked_add(len) {
        Some(end) if end <= g.len => Ok(off),
        _ => Err(oob),
    }
}

/// What every check runs once the key named `g`: the PD, the rights `need`,
/// then the bounds of `len` bytes at `addr`. Returns their offset in `g`.
fn check_grant(
    key: u32,
    g: &Grant,
    pd: u32,
    need: Access,
    addr: u64,
    len: u64,
) -> Result<u64, AccessError> {
    check_pd(key, g, pd)?;
    check_rights(key, g, need)?;
    check_bounds(key, g, addr, len)
}

/// Checks `len` bytes at byte `offset` of a local SGE, found under `sge.lkey`,
/// for a QP in protection domain `pd`; `write` asks for
/// [`Access::LOCAL_WRITE`] (reading needs no right). Returns the offset of
/// the first byte inside the region.
///
/// The piece must lie inside the SGE and the SGE's bytes inside the region.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{check_local, Access, AccessError, Grant, GrantKind, Sge};
/// let mr = Grant { kind: GrantKind::Region { remote_invalidate: false }, pd: 1,
///     access: Access::NONE, va: 0x1000, len: 256 };
/// let sge = Sge::new(0x1080, 64, 0x42);
/// assert_eq!(check_local(Some(&mr), 1, &sge, 16, 8, false), Ok(0x90));
/// // Writing needs LOCAL_WRITE, and rights are checked before bounds.
/// assert_eq!(check_local(Some(&mr), 1, &sge, 60, 8, true),
///     Err(AccessError::NoPermission { key: 0x42, needed: Access::LOCAL_WRITE }));
/// // 8 bytes at offset 60 run past the SGE's 64.
/// assert_eq!(check_local(Some(&mr), 1, &sge, 60, 8, false),
///     Err(AccessError::OutOfBounds { key: 0x42, addr: 0x10bc, len: 8 }));
/// ```
#[inline]
pub fn check_local(
    found: Option<&Grant>,
    pd: u32,
    sge: &Sge,
    offset: u32,
    len: u64,
    write: bool,
) -> Result<u64, AccessError> {
    let key = sge.lkey;
    let g = match found {
        Some(
            g @ Grant {
                kind: GrantKind::Region { .. },
                ..
            },
        ) => g,
        _ => return Err(AccessError::InvalidLkey(key)),
    };
    let need = if write {
        Access::LOCAL_WRITE
    } else {
        Access::NONE
    };
    let addr = sge.addr.wrapping_add(u64::from(offset));
    let off = check_grant(key, g, pd, need, addr, len)?;
    // Outside the SGE is out of bounds too: the same error, so it does not
    // matter which bound is checked first.
    let inside_sge = u64::from(offset)
        .checked_add(len)
        .is_some_and(|end| end <= u64::from(sge.len));
    if !inside_sge || sge.addr.checked_add(u64::from(offset)).is_none() {
        return Err(AccessError::OutOfBounds { key, addr, len });
    }
    Ok(off)
}

/// Checks a remote access — `len` bytes at `va` under `rkey`, needing the
/// rights `need` — by a QP in protection domain `pd`. Returns the offset of
/// the first byte inside the grant.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{check_remote, Access, AccessError, Grant, GrantKind};
/// let mr = Grant { kind: GrantKind::Region { remote_invalidate: false }, pd: 1,
///     access: Access::LOCAL_WRITE | Access::REMOTE_READ, va: 0x1000, len: 256 };
/// // Another PD is refused before the missing WRITE right and the bad range.
/// assert!(matches!(check_remote(Some(&mr), 2, 7, 0xfff0, 64, Access::REMOTE_WRITE),
///     Err(AccessError::PdMismatch { region_pd: 1, qp_pd: 2, .. })));
/// assert_eq!(check_remote(Some(&mr), 1, 7, 0xfff0, 64, Access::REMOTE_WRITE),
///     Err(AccessError::NoPermission { key: 7, needed: Access::REMOTE_WRITE }));
/// // va + len overflowing the address space is out of bounds.
/// assert_eq!(check_remote(Some(&mr), 1, 7, u64::MAX, 2, Access::REMOTE_READ),
///     Err(AccessError::OutOfBounds { key: 7, addr: u64::MAX, len: 2 }));
/// ```
#[inline]
pub fn check_remote(
    found: Option<&Grant>,
    pd: u32,
    rkey: u32,
    va: u64,
    len: u64,
    need: Access,
) -> Result<u64, AccessError> {
    let g = found.ok_or(AccessError::InvalidRkey(rkey))?;
    check_grant(rkey, g, pd, need, va, len)
}

/// Checks a remote atomic on the 8 bytes at `va`: [`check_remote`] with
/// [`Access::REMOTE_ATOMIC`], then the 8-byte alignment.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{check_atomic, Access, AccessError, Grant, GrantKind};
/// let mr = Grant { kind: GrantKind::Region { remote_invalidate: false }, pd: 1,
///     access: Access::LOCAL_WRITE | Access::REMOTE_ATOMIC, va: 0x1000, len: 64 };
/// assert_eq!(check_atomic(Some(&mr), 1, 7, 0x1008), Ok(8));
/// assert_eq!(check_atomic(Some(&mr), 1, 7, 0x1004), Err(AccessError::Misaligned(0x1004)));
/// // Out of bounds wins over misaligned: alignment is the last check.
/// assert!(matches!(check_atomic(Some(&mr), 1, 7, 0x103c), Err(AccessError::OutOfBounds { .. })));
/// ```
#[inline]
pub fn check_atomic(
    found: Option<&Grant>,
    pd: u32,
    rkey: u32,
    va: u64,
) -> Result<u64, AccessError> {
    let off = check_remote(found, pd, rkey, va, 8, Access::REMOTE_ATOMIC)?;
    if va % 8 != 0 {
        return Err(AccessError::Misaligned(va));
    }
    Ok(off)
}

/// Checks that the peer may invalidate `rkey` (SEND_WITH_INVALIDATE) for a QP
/// in protection domain `pd`: the key, the PD, then that it names a bound
/// window or a region that allows it.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{check_invalidate, Access, AccessError, Grant, GrantKind};
/// let mut g = Grant { kind: GrantKind::Region { remote_invalidate: false }, pd: 1,
///     access: Access::REMOTE_READ, va: 0x1000, len: 64 };
/// assert_eq!(check_invalidate(Some(&g), 1, 7), Err(AccessError::NotInvalidatable(7)));
/// g.kind = GrantKind::Window;
/// assert_eq!(check_invalidate(Some(&g), 1, 7), Ok(()));
/// assert_eq!(check_invalidate(None, 1, 7), Err(AccessError::InvalidRkey(7)));
/// ```
pub fn check_invalidate(found: Option<&Grant>, pd: u32, rkey: u32) -> Result<(), AccessError> {
    let g = found.ok_or(AccessError::InvalidRkey(rkey))?;
    check_pd(rkey, g, pd)?;
    match g.kind {
        GrantKind::Window
        | GrantKind::Region {
            remote_invalidate: true,
        } => Ok(()),
        GrantKind::Region {
            remote_invalidate: false,
        } => Err(AccessError::NotInvalidatable(rkey)),
    }
}

/// A request to bind a memory window: grant the peer `len` bytes at `va` of
/// the region under `lkey`, with the remote rights `access` — what
/// `ibv_bind_mw`'s `bind_info` carries. Every memory table takes the request
/// whole and [`check_bind`] checks it, so the four values travel together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowBind {
    /// L_Key of the region the window exposes part of.
    pub lkey: u32,
    /// First byte the window covers.
    pub va: u64,
    /// Bytes it covers.
    pub len: u64,
    /// Rights it grants (remote rights only; others are ignored).
    pub access: Access,
}

impl WindowBind {
    /// What a window of protection domain `window_pd` grants once bound as
    /// this request asks: the lookup result a table hands the checks.
    pub fn grant(&self, window_pd: u32) -> Grant {
        Grant {
            kind: GrantKind::Window,
            pd: window_pd,
            access: self.access,
            va: self.va,
            len: self.len,
        }
    }
}

/// Checks binding a window of protection domain `window_pd` as `bind` asks,
/// to the region found under `bind.lkey`: the PD, then that the region has
/// every remote right the window grants, then the bounds. Returns the
/// window's offset inside the region.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{check_bind, Access, AccessError, Grant, GrantKind, WindowBind};
/// let mr = Grant { kind: GrantKind::Region { remote_invalidate: false }, pd: 1,
///     access: Access::LOCAL_WRITE | Access::REMOTE_READ, va: 0x1000, len: 4096 };
/// let mut bind = WindowBind { lkey: 5, va: 0x1100, len: 64, access: Access::REMOTE_READ };
/// assert_eq!(check_bind(&mr, 1, bind), Ok(0x100));
/// // A window cannot grant more than its region.
/// bind.access = Access::REMOTE_WRITE;
/// assert_eq!(check_bind(&mr, 1, bind),
///     Err(AccessError::NoPermission { key: 5, needed: Access::REMOTE_WRITE }));
/// ```
pub fn check_bind(region: &Grant, window_pd: u32, bind: WindowBind) -> Result<u64, AccessError> {
    let WindowBind {
        lkey,
        va,
        len,
        access,
    } = bind;
    if region.kind == GrantKind::Window {
        return Err(AccessError::InvalidLkey(lkey));
    }
    let remote = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
    let granted = Access::from_bits(access.bits() & remote.bits()).unwrap_or(remote);
    check_grant(lkey, region, window_pd, granted, va, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MR: Grant = Grant {
        kind: GrantKind::Region {
            remote_invalidate: false,
        },
        pd: 1,
        access: Access::REMOTE_READ,
        va: 0x1000,
        len: 16,
    };

    #[test]
    fn one_error_per_failure_in_rxe_order() {
        let need = Access::REMOTE_WRITE;
        // Everything wrong at once: the key wins, then PD, rights, bounds.
        assert_eq!(
            check_remote(None, 2, 9, 0, 99, need),
            Err(AccessError::InvalidRkey(9))
        );
        assert!(matches!(
            check_remote(Some(&MR), 2, 9, 0, 99, need),
            Err(AccessError::PdMismatch { .. })
        ));
        assert!(matches!(
            check_remote(Some(&MR), 1, 9, 0, 99, need),
            Err(AccessError::NoPermission { .. })
        ));
        assert!(matches!(
            check_remote(Some(&MR), 1, 9, 0, 99, Access::REMOTE_READ),
            Err(AccessError::OutOfBounds { .. })
        ));
        // The end of the range is inside for a zero-length access, past it is not.
        assert_eq!(
            check_remote(Some(&MR), 1, 9, 0x1010, 0, Access::REMOTE_READ),
            Ok(16)
        );
        assert!(check_remote(Some(&MR), 1, 9, 0x1011, 0, Access::REMOTE_READ).is_err());
    }

    #[test]
    fn local_piece_stays_inside_its_sge() {
        let sge = Sge::new(0x1000, 8, 3);
        assert_eq!(check_local(Some(&MR), 1, &sge, 4, 4, false), Ok(4));
        assert!(check_local(Some(&MR), 1, &sge, 4, 5, false).is_err());
        let wrap = Sge::new(u64::MAX, 8, 3);
        assert_eq!(
            check_local(Some(&MR), 1, &wrap, 2, 1, false),
            Err(AccessError::OutOfBounds {
                key: 3,
                addr: 1,
                len: 1
            })
        );
    }
}
