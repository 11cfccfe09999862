//! Memory: what the protocol reads and writes, and who may touch it.
//!
//! RDMA moves bytes between *registered* memory on two hosts. The protocol core
//! never holds a pointer: it names memory the way the wire does and asks the
//! engine, through the [`Memory`] trait, to move bytes.
//!
//! * **Local** buffers are named by scatter/gather elements ([`Sge`]): a virtual
//!   address, a length and the *L_Key* of the memory region (MR) that covers
//!   them. A message is the concatenation of its SGEs; [`gather`] and
//!   [`scatter`] translate a byte offset in the message into SGE pieces.
//! * **Remote** accesses arrive from the peer with an *R_Key*, a virtual address
//!   and a length. Every one is checked — the key names a live region or
//!   window, which belongs to the QP's protection domain (PD), whose [`Access`]
//!   flags allow the operation, and the range lies inside it — before a single
//!   byte moves.
//!
//! The checks are written once, as pure functions over what a table found
//! under a key ([`Grant`]): [`check_local`], [`check_remote`],
//! [`check_atomic`], [`check_invalidate`] and [`check_bind`]. A memory table
//! says only what each key names and where its bytes are ([`GrantTable`]);
//! [`Memory`] follows from that for every table, so the engine's memory
//! table and the test memory give the same [`AccessError`] for the same
//! request, in Linux rxe's order: key, PD, rights, bounds (then an atomic's
//! alignment).
//!
//! The responder turns an error into a NAK (remote access error) and the
//! requester into a completion error (local protection error).
//! [`testing::VecMemory`] is a complete, simple implementation over `Vec<u8>`
//! regions for tests, examples, the simulation and the fuzzers.

mod check;
mod sg;
mod table;
pub mod testing;

pub use check::{
    check_atomic, check_bind, check_invalidate, check_local, check_remote, Grant, GrantKind,
    WindowBind,
};
pub use sg::{
    gather, lend, lend_remote, scatter, sgl_len, LentPayload, SgList, MAX_LENT_PIECES, SGL_INLINE,
};
pub use table::{GrantBytes, GrantTable};

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

/// Access rights of a memory region, memory window or QP (ibverbs values).
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::Access;
/// let rights = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
/// assert!(rights.contains(Access::REMOTE_WRITE) && !rights.contains(Access::REMOTE_READ));
/// assert_eq!(Access::from_bits(rights.bits()), Some(rights));
/// assert_eq!(Access::from_bits(0x100), None); // unknown bits are refused
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    /// No rights: local read only.
    pub const NONE: Access = Access(0);
    /// The local HCA may write (receives, READ responses, atomic results).
    pub const LOCAL_WRITE: Access = Access(1);
    /// The peer may RDMA WRITE.
    pub const REMOTE_WRITE: Access = Access(2);
    /// The peer may RDMA READ.
    pub const REMOTE_READ: Access = Access(4);
    /// The peer may run atomics.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// Every defined bit.
    pub const ALL: Access = Access(0xf);

    /// The raw bits (ibverbs `IBV_ACCESS_*`).
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Flags from raw bits, or `None` if an undefined bit is set.
    pub const fn from_bits(bits: u32) -> Option<Access> {
        if bits & !Self::ALL.0 == 0 {
            Some(Access(bits))
        } else {
            None
        }
    }

    /// True if every right in `other` is present.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of two sets.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        *self = self.union(rhs);
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Access::LOCAL_WRITE, "LOCAL_WRITE"),
            (Access::REMOTE_WRITE, "REMOTE_WRITE"),
            (Access::REMOTE_READ, "REMOTE_READ"),
            (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        ];
        let mut first = true;
        for (flag, name) in names {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("NONE")?;
        }
        Ok(())
    }
}

/// A scatter/gather element: `len` bytes at `addr` inside the region of `lkey`.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{gather, sgl_len, testing::VecMemory, Access, Sge};
/// let mut mem = VecMemory::new();
/// let mr = mem.register_bytes(1, 0x1000, b"hello, world".to_vec(), Access::NONE);
/// // A message made of two pieces of the same region: "hello" and "world".
/// let sgl = [Sge::new(0x1000, 5, mr.lkey), Sge::new(0x1007, 5, mr.lkey)];
/// assert_eq!(sgl_len(&sgl), 10);
/// let mut msg = [0; 10];
/// gather(&mut mem, 1, &sgl, 0, &mut msg)?;
/// assert_eq!(&msg, b"helloworld");
/// # Ok::<(), ndverbs_proto::mem::AccessError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the covering memory region.
    pub lkey: u32,
}

impl Sge {
    /// An SGE.
    pub const fn new(addr: u64, len: u32, lkey: u32) -> Self {
        Sge { addr, len, lkey }
    }
}

/// A remote atomic operation on 8 bytes (values in host byte order in memory).
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{testing::VecMemory, Access, AtomicOp, Memory};
/// let mut mem = VecMemory::new();
/// let mr = mem.register(1, 0x1000, 8, Access::REMOTE_ATOMIC);
/// // Each returns the value before the operation.
/// assert_eq!(mem.atomic_remote(1, mr.rkey, 0x1000, AtomicOp::FetchAdd { add: 5 })?, 0);
/// let cas = AtomicOp::CompareSwap { compare: 5, swap: 100 };
/// assert_eq!(mem.atomic_remote(1, mr.rkey, 0x1000, cas)?, 5);
/// assert_eq!(mem.bytes(mr.lkey), 100u64.to_ne_bytes());
/// # Ok::<(), ndverbs_proto::mem::AccessError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// If the value equals `compare`, replace it with `swap`.
    CompareSwap {
        /// Expected value.
        compare: u64,
        /// Replacement.
        swap: u64,
    },
    /// Add `add` (wrapping).
    FetchAdd {
        /// Addend.
        add: u64,
    },
}

impl AtomicOp {
    /// The value the 8 bytes hold after the operation, given the value
    /// `orig` they held before.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::mem::AtomicOp;
    /// assert_eq!(AtomicOp::FetchAdd { add: 2 }.apply(u64::MAX), 1); // wraps
    /// assert_eq!(AtomicOp::CompareSwap { compare: 1, swap: 9 }.apply(1), 9);
    /// assert_eq!(AtomicOp::CompareSwap { compare: 1, swap: 9 }.apply(2), 2);
    /// ```
    pub fn apply(self, orig: u64) -> u64 {
        match self {
            AtomicOp::CompareSwap { compare, swap } if orig == compare => swap,
            AtomicOp::CompareSwap { .. } => orig,
            AtomicOp::FetchAdd { add } => orig.wrapping_add(add),
        }
    }
}

/// Why a memory access was refused.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{testing::VecMemory, Access, AccessError, Memory};
/// let mut mem = VecMemory::new();
/// let mr = mem.register(1, 0x1000, 16, Access::REMOTE_READ);
/// // An RDMA WRITE into a read-only region: refused before a byte moves.
/// let err = mem.write_remote(1, mr.rkey, 0x1000, b"x").unwrap_err();
/// assert!(matches!(err, AccessError::NoPermission { needed: Access::REMOTE_WRITE, .. }), "{err}");
/// // Past the end of the region.
/// let err = mem.read_remote(1, mr.rkey, 0x1008, &mut [0; 16]).unwrap_err();
/// assert!(matches!(err, AccessError::OutOfBounds { .. }), "{err}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum AccessError {
    /// No valid region has this L_Key.
    #[error("L_Key 0x{0:08x} is not valid")]
    InvalidLkey(u32),
    /// No valid region or window has this R_Key (or it was invalidated).
    #[error("R_Key 0x{0:08x} is not valid")]
    InvalidRkey(u32),
    /// The region belongs to another protection domain.
    #[error("key 0x{key:08x} belongs to PD {region_pd}, the QP is in PD {qp_pd}")]
    PdMismatch {
        /// The key used.
        key: u32,
        /// The region's PD.
        region_pd: u32,
        /// The accessing QP's PD.
        qp_pd: u32,
    },
    /// The range is not inside the region (or overflows the address space).
    #[error("key 0x{key:08x}: {len} bytes at 0x{addr:x} are outside the region")]
    OutOfBounds {
        /// The key used.
        key: u32,
        /// First address.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// The region or window does not grant a right the operation needs.
    #[error("key 0x{key:08x}: region lacks {needed:?}")]
    NoPermission {
        /// The key used.
        key: u32,
        /// The rights that are missing.
        needed: Access,
    },
    /// An atomic on an address that is not 8-byte aligned.
    #[error("atomic at 0x{0:x} is not 8-byte aligned")]
    Misaligned(u64),
    /// The key names something that cannot be invalidated remotely.
    #[error("R_Key 0x{0:08x} cannot be invalidated remotely")]
    NotInvalidatable(u32),
    /// A message offset beyond the end of a scatter/gather list.
    #[error("{len} bytes at message offset {offset} overrun a {total}-byte scatter/gather list")]
    SglOverrun {
        /// Offset in the message.
        offset: u64,
        /// Bytes requested.
        len: u64,
        /// Total bytes of the list.
        total: u64,
    },
}

/// The engine's memory: MR/MW tables and the bytes behind them.
///
/// Every method looks its key up, runs the matching check of this module
/// ([`check_local`], [`check_remote`], [`check_atomic`],
/// [`check_invalidate`]) and moves nothing if it fails. Memory tables do not
/// implement it themselves: they implement [`GrantTable`], and this follows. `offset` in the local
/// methods is a byte offset inside the SGE (`sge.addr + offset` is the first
/// byte touched); a piece outside the SGE is out of bounds.
///
/// # Example
///
/// ```
/// use ndverbs_proto::mem::{testing::VecMemory, Access, Memory, Sge};
/// // The protocol core only ever sees `&mut dyn Memory`.
/// fn land_write(mem: &mut dyn Memory, rkey: u32, va: u64, data: &[u8]) -> bool {
///     mem.write_remote(1, rkey, va, data).is_ok()
/// }
/// let mut mem = VecMemory::new();
/// let mr = mem.register(1, 0x4000, 8, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
/// assert!(land_write(&mut mem, mr.rkey, 0x4002, b"abc"));
/// let mut out = [0; 3];
/// mem.read_local(1, &Sge::new(0x4002, 3, mr.lkey), 0, &mut out)?;
/// assert_eq!(&out, b"abc");
/// assert!(!land_write(&mut mem, mr.rkey ^ 1, 0x4002, b"abc")); // wrong key
/// # Ok::<(), ndverbs_proto::mem::AccessError>(())
/// ```
pub trait Memory {
    /// Reads `out.len()` bytes of a local buffer (no right needed beyond a valid L_Key).
    fn read_local(
        &mut self,
        pd: u32,
        sge: &Sge,
        offset: u32,
        out: &mut [u8],
    ) -> Result<(), AccessError>;

    /// Writes `data` into a local buffer; the region needs [`Access::LOCAL_WRITE`].
    fn write_local(
        &mut self,
        pd: u32,
        sge: &Sge,
        offset: u32,
        data: &[u8],
    ) -> Result<(), AccessError>;

    /// Checks, without moving data, that `len` bytes at `va` under `rkey` allow `access`.
    fn check_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<(), AccessError>;

    /// An RDMA WRITE landing: needs [`Access::REMOTE_WRITE`].
    fn write_remote(&mut self, pd: u32, rkey: u32, va: u64, data: &[u8])
        -> Result<(), AccessError>;

    /// An RDMA READ source: needs [`Access::REMOTE_READ`].
    fn read_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        out: &mut [u8],
    ) -> Result<(), AccessError>;

    /// Runs an atomic on the 8 bytes at `va` (8-byte aligned, [`Access::REMOTE_ATOMIC`])
    /// and returns the original value.
    fn atomic_remote(
        &mut self,
        pd: u32,
        rkey: u32,
        va: u64,
        op: AtomicOp,
    ) -> Result<u64, AccessError>;

    /// Invalidates `rkey` (SEND_WITH_INVALIDATE): later accesses with it fail.
    fn invalidate_remote(&mut self, pd: u32, rkey: u32) -> Result<(), AccessError>;

    /// Lends `len` bytes of a local buffer to a zero-copy send: checks them
    /// as [`Memory::read_local`] does and returns the address of the first,
    /// or `None` when this memory does not lend (the caller copies instead,
    /// the default). The bytes must stay readable at that address while the
    /// memory's keys stay as they are (no registration change, bind or
    /// invalidation): the engine hands them to the kernel within one batch
    /// of sends under its lock, and a [`LentPayload`] lends later packets of
    /// the same bytes from that address without asking again.
    fn lend_local(
        &mut self,
        _pd: u32,
        _sge: &Sge,
        _offset: u32,
        _len: usize,
    ) -> Result<Option<usize>, AccessError> {
        Ok(None)
    }

    /// Lends `len` bytes at `va` under `rkey` to a zero-copy READ response:
    /// checks them as [`Memory::read_remote`] does (key, PD, bounds,
    /// [`Access::REMOTE_READ`]) and returns the address of the first, or
    /// `None` when this memory does not lend (the caller copies instead, the
    /// default). The same lifetime rule as [`Memory::lend_local`] holds.
    fn lend_remote(
        &mut self,
        _pd: u32,
        _rkey: u32,
        _va: u64,
        _len: usize,
    ) -> Result<Option<usize>, AccessError> {
        Ok(None)
    }
}
