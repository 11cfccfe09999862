//! Scatter/gather: message offsets to SGE pieces.
//!
//! A message of `n` bytes is laid over its SGE list in order: bytes
//! `0..sge[0].len` in the first element, the next `sge[1].len` in the second,
//! and so on. Packets carry at most one MTU each, so both helpers walk the
//! (short) list from the start and copy straight between the packet buffer and
//! the registered memory — no staging buffer, no allocation.

use super::{AccessError, Memory, Sge};
use smallvec::SmallVec;

/// Entries a [`SgList`] holds without allocating: one or two SGEs cover
/// almost every request (perftest and ND's ping-pongs post one).
pub const SGL_INLINE: usize = 2;

/// A work request's scatter/gather list. Up to [`SGL_INLINE`] elements live
/// inside the request itself, so posting one costs no allocation (a `Vec`
/// per post was a measurable part of a small message's latency); longer
/// lists spill to the heap. Reads as a slice of [`Sge`].
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{SgList, Sge};
/// let one: SgList = [Sge::new(0x1000, 8, 7)].into();
/// let two: SgList = vec![Sge::new(0x1000, 8, 7), Sge::new(0x2000, 4, 7)].into();
/// let many: SgList = (0..5).map(|i| Sge::new(0x1000 * i, 1, 7)).collect();
/// assert_eq!((one.len(), two.len(), many.len()), (1, 2, 5));
/// assert!(!one.spilled() && !two.spilled() && many.spilled());
/// assert_eq!(two[1].addr, 0x2000);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SgList(SmallVec<[Sge; SGL_INLINE]>);

impl SgList {
    /// An empty list.
    pub fn new() -> Self {
        SgList(SmallVec::new())
    }

    /// True when the list outgrew the request and lives on the heap.
    pub fn spilled(&self) -> bool {
        self.0.spilled()
    }

    /// Appends an element.
    pub fn push(&mut self, sge: Sge) {
        self.0.push(sge);
    }
}

impl std::ops::Deref for SgList {
    type Target = [Sge];
    fn deref(&self) -> &[Sge] {
        &self.0
    }
}

impl std::ops::DerefMut for SgList {
    fn deref_mut(&mut self) -> &mut [Sge] {
        &mut self.0
    }
}

impl From<Vec<Sge>> for SgList {
    fn from(v: Vec<Sge>) -> Self {
        SgList(SmallVec::from_vec(v))
    }
}

impl<const N: usize> From<[Sge; N]> for SgList {
    fn from(a: [Sge; N]) -> Self {
        a.into_iter().collect()
    }
}

impl From<&[Sge]> for SgList {
    fn from(s: &[Sge]) -> Self {
        SgList(SmallVec::from_slice(s))
    }
}

impl From<Sge> for SgList {
    fn from(s: Sge) -> Self {
        [s].into()
    }
}

impl FromIterator<Sge> for SgList {
    fn from_iter<I: IntoIterator<Item = Sge>>(iter: I) -> Self {
        SgList(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a SgList {
    type Item = &'a Sge;
    type IntoIter = std::slice::Iter<'a, Sge>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Total bytes described by a scatter/gather list.
pub fn sgl_len(sgl: &[Sge]) -> u64 {
    sgl.iter().map(|s| u64::from(s.len)).sum()
}

/// Visits the pieces of `sgl` covering message bytes `offset .. offset + len`
/// as `(sge, offset inside the sge, range inside the caller's buffer)`.
fn for_each_piece(
    sgl: &[Sge],
    offset: u64,
    len: usize,
    mut f: impl FnMut(&Sge, u32, std::ops::Range<usize>) -> Result<(), AccessError>,
) -> Result<(), AccessError> {
    let total = sgl_len(sgl);
    let end = offset.checked_add(len as u64);
    if end.is_none_or(|e| e > total) {
        return Err(AccessError::SglOverrun {
            offset,
            len: len as u64,
            total,
        });
    }
    let mut skip = offset;
    let mut done = 0usize;
    for sge in sgl {
        if done == len {
            break;
        }
        let l = u64::from(sge.len);
        if skip >= l {
            skip -= l;
            continue;
        }
        // `skip < l <= u32::MAX`, so the casts are lossless.
        let avail = (l - skip) as usize;
        let n = avail.min(len - done);
        f(sge, skip as u32, done..done + n)?;
        done += n;
        skip = 0;
    }
    Ok(())
}

/// Copies message bytes `offset .. offset + out.len()` of `sgl` into `out`.
pub fn gather(
    mem: &mut dyn Memory,
    pd: u32,
    sgl: &[Sge],
    offset: u64,
    out: &mut [u8],
) -> Result<(), AccessError> {
    for_each_piece(sgl, offset, out.len(), |sge, off, r| {
        mem.read_local(pd, sge, off, &mut out[r])
    })
}

/// Most pieces a lent payload has (a packet's payload spread over more SGEs
/// is copied).
pub const MAX_LENT_PIECES: usize = 8;

/// A packet payload left in registered memory for a zero-copy send: the
/// `(address, length)` pieces that follow the packet's headers on the wire.
///
/// It also remembers the last SGE, and the last READ's bytes, that the
/// memory checked and lent whole ([`lend`], [`lend_remote`]): later packets
/// of the same message lend from there without asking the memory again
/// (a key lookup and its checks per packet). So one `LentPayload` may serve
/// only while the memory's keys stay as they are — no registration change,
/// bind or invalidation in between —, as for one batch of sends: the
/// engine makes one per drain of a queue pair, under its lock.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{lend, testing::VecMemory, Access, LentPayload};
/// let mut mem = VecMemory::new();
/// let mr = mem.register(1, 0x1000, 4096, Access::NONE);
/// let mut lent = LentPayload::default();
/// // VecMemory does not lend (`Memory::lend_local`'s default), so the sender copies
/// // instead; the engine's memory table lends and the payload goes out zero-copy.
/// assert!(!lend(&mut mem, 1, &[mr.sge(0, 4096)], 0, 1024, &mut lent)?);
/// assert!(lent.is_empty() && lent.pieces().is_empty() && lent.len() == 0);
/// # Ok::<(), ndverbs_proto::mem::AccessError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LentPayload {
    pieces: [(usize, usize); MAX_LENT_PIECES],
    n: usize,
    /// Bytes of headers at the start of the packet buffer; the pad and the
    /// ICRC placeholder follow them there, the payload goes in between.
    pub hdr_len: usize,
    /// The last SGE checked and lent whole.
    local: Option<Checked>,
    /// The last READ's bytes checked and lent whole.
    remote: Option<Checked>,
}

/// Bytes the memory checked and lent as a whole: `len` bytes from virtual
/// address `va` under `key` in PD `pd`, the first of them at `addr`. Any
/// part of them passes the same checks (key, PD, rights, bounds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Checked {
    pd: u32,
    key: u32,
    va: u64,
    len: u64,
    addr: usize,
}

impl Checked {
    /// Where `len` bytes at `va` under `key` in `pd` are, if inside.
    fn find(&self, pd: u32, key: u32, va: u64, len: usize) -> Option<usize> {
        let off = va.checked_sub(self.va)?;
        let inside = self.pd == pd
            && self.key == key
            && off
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.len);
        // `off < self.len`, and the memory lent all of them at `addr`.
        inside.then(|| self.addr + off as usize)
    }
}

impl LentPayload {
    /// The pieces, in order.
    pub fn pieces(&self) -> &[(usize, usize)] {
        &self.pieces[..self.n]
    }

    /// Payload bytes.
    pub fn len(&self) -> usize {
        self.pieces().iter().map(|p| p.1).sum()
    }

    /// True when nothing is lent (the packet is whole in its buffer).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Forgets the pieces.
    pub fn clear(&mut self) {
        self.n = 0;
        self.hdr_len = 0;
    }
}

/// Borrows message bytes `offset .. offset + len` of `sgl` from `mem` into
/// `out` instead of copying them; `Ok(false)` (with `out` cleared) when the
/// memory does not lend or the bytes span more than [`MAX_LENT_PIECES`] SGEs.
pub fn lend(
    mem: &mut dyn Memory,
    pd: u32,
    sgl: &[Sge],
    offset: u64,
    len: usize,
    out: &mut LentPayload,
) -> Result<bool, AccessError> {
    out.clear();
    let mut lent = true;
    for_each_piece(sgl, offset, len, |sge, off, r| {
        if !lent {
            return Ok(());
        }
        // (An address past the top of the address space is the memory's to
        // refuse: never found in what it lent.)
        let va = sge.addr.checked_add(u64::from(off));
        let whole = (sge.addr, u64::from(sge.len));
        let found = lend_remembered(&mut out.local, pd, sge.lkey, va, r.len(), whole, |all| {
            if all {
                mem.lend_local(pd, sge, 0, sge.len as usize)
            } else {
                mem.lend_local(pd, sge, off, r.len())
            }
        })?;
        match found {
            Some(addr) if out.n < MAX_LENT_PIECES => {
                out.pieces[out.n] = (addr, r.len());
                out.n += 1;
            }
            _ => lent = false,
        }
        Ok(())
    })?;
    if !lent {
        out.clear();
    }
    Ok(lent)
}

/// Where the `len` bytes at `va` under `key` in PD `pd` are lent: from
/// `memo` if it holds them; else `lend(true)` has the memory check and lend
/// the `whole` range (`(va, len)`) that holds them and later packets, which
/// `memo` then remembers; if that range does not pass as a whole,
/// `lend(false)` has it check and lend only the bytes asked for (their own
/// error, if any). `va` is `None` past the top of the address space.
fn lend_remembered(
    memo: &mut Option<Checked>,
    pd: u32,
    key: u32,
    va: Option<u64>,
    len: usize,
    whole: (u64, u64),
    mut lend: impl FnMut(bool) -> Result<Option<usize>, AccessError>,
) -> Result<Option<usize>, AccessError> {
    let find = |c: Checked| va.and_then(|va| c.find(pd, key, va, len));
    if let Some(addr) = memo.and_then(find) {
        return Ok(Some(addr));
    }
    match lend(true) {
        Ok(Some(addr)) => {
            let c = Checked {
                pd,
                key,
                va: whole.0,
                len: whole.1,
                addr,
            };
            *memo = Some(c);
            Ok(find(c))
        }
        Ok(None) => Ok(None),
        Err(_) => lend(false),
    }
}

/// Borrows `len` bytes at `va` under `rkey` (a READ response's payload)
/// from `mem` into `out` instead of copying them, after the checks of
/// [`Memory::read_remote`]; `Ok(false)` (with `out` cleared) when the memory
/// does not lend. `within` bytes from `va` (at least `len`: the READ's
/// bytes not yet sent) are checked and lent as a whole the first time, and
/// later calls for any part of them lend from `out` without asking `mem`
/// (see [`LentPayload`]).
pub fn lend_remote(
    mem: &mut dyn Memory,
    pd: u32,
    rkey: u32,
    va: u64,
    len: usize,
    within: usize,
    out: &mut LentPayload,
) -> Result<bool, AccessError> {
    out.clear();
    let whole = within.max(len);
    let found = lend_remembered(
        &mut out.remote,
        pd,
        rkey,
        Some(va),
        len,
        (va, whole as u64),
        |all| mem.lend_remote(pd, rkey, va, if all { whole } else { len }),
    )?;
    match found {
        Some(addr) => {
            out.pieces[0] = (addr, len);
            out.n = 1;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Copies `data` into message bytes `offset .. offset + data.len()` of `sgl`
/// (the regions need local write access).
pub fn scatter(
    mem: &mut dyn Memory,
    pd: u32,
    sgl: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), AccessError> {
    for_each_piece(sgl, offset, data.len(), |sge, off, r| {
        mem.write_local(pd, sge, off, &data[r])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::testing::VecMemory;
    use crate::mem::Access;

    #[test]
    fn pieces_cross_sge_boundaries() {
        let mut m = VecMemory::new();
        let a = m.register(1, 0x1000, 8, Access::LOCAL_WRITE);
        let b = m.register(1, 0x9000, 8, Access::LOCAL_WRITE);
        let sgl = [
            Sge::new(0x1002, 4, a.lkey),
            Sge::new(0x9000, 0, b.lkey),
            Sge::new(0x9004, 4, b.lkey),
        ];
        assert_eq!(sgl_len(&sgl), 8);
        scatter(&mut m, 1, &sgl, 2, b"wxyz").unwrap();
        assert_eq!(m.bytes(a.lkey), &[0, 0, 0, 0, b'w', b'x', 0, 0]);
        assert_eq!(m.bytes(b.lkey), &[0, 0, 0, 0, b'y', b'z', 0, 0]);
        let mut out = [0u8; 3];
        gather(&mut m, 1, &sgl, 3, &mut out).unwrap();
        assert_eq!(&out, b"xyz");
        assert!(matches!(
            gather(&mut m, 1, &sgl, 6, &mut out),
            Err(AccessError::SglOverrun { .. })
        ));
        assert!(gather(&mut m, 1, &sgl, u64::MAX, &mut out).is_err());
        // Wrong PD.
        assert!(matches!(
            gather(&mut m, 2, &sgl, 0, &mut out),
            Err(AccessError::PdMismatch { .. })
        ));
    }

    /// One region (key 7, PD 1, 4 KiB at 0x1000, local and remote reads)
    /// that lends its bytes at a made-up address, counting its lookups.
    struct Lending {
        bytes: Vec<u8>,
        lookups: usize,
    }

    const KEY: u32 = 7;
    const VA: u64 = 0x1000;
    const AT: usize = 0x7f00_0000;

    struct LentBytes<'a>(&'a mut [u8]);

    impl crate::mem::GrantBytes for LentBytes<'_> {
        fn read(&self, off: u64, out: &mut [u8]) {
            self.0.read(off, out)
        }
        fn write(&mut self, off: u64, data: &[u8]) {
            self.0.write(off, data)
        }
        fn atomic(&mut self, off: u64, op: crate::mem::AtomicOp) -> u64 {
            self.0.atomic(off, op)
        }
        fn lend(&self, off: u64) -> Option<usize> {
            Some(AT + off as usize)
        }
    }

    impl crate::mem::GrantTable for Lending {
        type Bytes<'a> = LentBytes<'a>;
        fn grant(&mut self, key: u32) -> Option<(crate::mem::Grant, LentBytes<'_>)> {
            self.lookups += 1;
            let g = crate::mem::Grant {
                kind: crate::mem::GrantKind::Region {
                    remote_invalidate: false,
                },
                pd: 1,
                access: Access::REMOTE_READ,
                va: VA,
                len: self.bytes.len() as u64,
            };
            (key == KEY).then_some((g, LentBytes(&mut self.bytes[..])))
        }
        fn invalidate(&mut self, _key: u32) {}
    }

    fn lending() -> Lending {
        Lending {
            bytes: vec![0; 4096],
            lookups: 0,
        }
    }

    #[test]
    fn later_packets_of_an_sge_lend_without_a_lookup() {
        let mut m = lending();
        let sgl = [Sge::new(VA + 1024, 3072, KEY)];
        let mut lent = LentPayload::default();
        for (i, off) in [0u64, 1024, 2048].into_iter().enumerate() {
            assert!(lend(&mut m, 1, &sgl, off, 1024, &mut lent).unwrap());
            assert_eq!(
                lent.pieces(),
                &[(AT + 1024 + off as usize, 1024)],
                "packet {i}"
            );
        }
        // The first packet checked the SGE whole; the others reused it.
        assert_eq!(m.lookups, 1);
        // Another PD is refused, as the memory would (and asked again).
        assert!(matches!(
            lend(&mut m, 2, &sgl, 0, 1024, &mut lent),
            Err(AccessError::PdMismatch { .. })
        ));
        // A fresh payload (a new batch) asks the memory again.
        let mut fresh = LentPayload::default();
        assert!(lend(&mut m, 1, &sgl, 0, 8, &mut fresh).unwrap());
        assert_eq!(fresh.pieces(), &[(AT + 1024, 8)]);
    }

    #[test]
    fn an_sge_past_its_region_lends_its_good_bytes_and_fails_the_rest() {
        let mut m = lending();
        // 1 KiB inside the 4-KiB region, 1 KiB past its end.
        let sgl = [Sge::new(VA + 3072, 2048, KEY)];
        let mut lent = LentPayload::default();
        assert!(lend(&mut m, 1, &sgl, 0, 1024, &mut lent).unwrap());
        assert_eq!(lent.pieces(), &[(AT + 3072, 1024)]);
        assert!(matches!(
            lend(&mut m, 1, &sgl, 1024, 1024, &mut lent),
            Err(AccessError::OutOfBounds { .. })
        ));
        // Nothing was remembered for it: each packet was checked on its own
        // (after the failed check of the whole SGE).
        assert_eq!(m.lookups, 4);
        // An SGE whose bytes wrap past the top of the address space onto
        // what was lent before is refused as the memory refuses it.
        let good = [Sge::new(VA, 4096, KEY)];
        assert!(lend(&mut m, 1, &good, 0, 1024, &mut lent).unwrap());
        let wraps = [Sge::new(u64::MAX - 1023, 8192, KEY)];
        assert!(matches!(
            lend(&mut m, 1, &wraps, 1024 + VA, 1024, &mut lent),
            Err(AccessError::OutOfBounds { .. })
        ));
    }

    #[test]
    fn a_read_checked_whole_lends_its_later_packets_without_a_lookup() {
        let mut m = lending();
        let mut lent = LentPayload::default();
        // A 3-KiB READ from 0x1400, answered 1 KiB at a time.
        for (i, off) in [0u64, 1024, 2048].into_iter().enumerate() {
            let left = 3072 - off as usize;
            assert!(lend_remote(&mut m, 1, KEY, VA + 1024 + off, 1024, left, &mut lent).unwrap());
            assert_eq!(
                lent.pieces(),
                &[(AT + 1024 + off as usize, 1024)],
                "packet {i}"
            );
        }
        assert_eq!(m.lookups, 1);
        // Outside what was checked, or another key: asked again.
        assert!(lend_remote(&mut m, 1, KEY, VA, 1024, 1024, &mut lent).unwrap());
        assert!(matches!(
            lend_remote(&mut m, 1, KEY + 1, VA + 1024, 1024, 1024, &mut lent),
            Err(AccessError::InvalidRkey(_))
        ));
        assert_eq!(m.lookups, 4);
        // A READ reaching past the region: its good bytes lend, the rest
        // fails as before.
        let mut fresh = LentPayload::default();
        assert!(lend_remote(&mut m, 1, KEY, VA + 3072, 1024, 2048, &mut fresh).unwrap());
        assert!(matches!(
            lend_remote(&mut m, 1, KEY, VA + 4096, 1024, 1024, &mut fresh),
            Err(AccessError::OutOfBounds { .. })
        ));
    }
}
