//! What every ndverbs device enforces: queue depths, SGEs, inline bytes,
//! message size and READ/atomic depth. The engine refuses what exceeds them;
//! device queries report them (`ibv_query_device`'s attributes).

/// Limits a device enforces (the same for every device).
///
/// # Example
///
/// ```
/// use ndverbs_proto::limits::{DeviceLimits, LIMITS};
/// fn fits(l: &DeviceLimits, wr: u32, sge: u32) -> bool {
///     wr <= l.max_qp_wr && sge <= l.max_sge
/// }
/// assert!(fits(&LIMITS, 1024, 4));
/// assert!(!fits(&LIMITS, LIMITS.max_qp_wr + 1, 1));
/// assert_eq!(LIMITS.max_msg_size, 1 << 31);
/// assert!(LIMITS.max_mr_size >= LIMITS.max_msg_size);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Most work requests per send or receive queue.
    pub max_qp_wr: u32,
    /// Most SGEs per work request.
    pub max_sge: u32,
    /// Most inline bytes per send.
    pub max_inline_data: u32,
    /// Most completions per CQ.
    pub max_cqe: u32,
    /// Most queue pairs.
    pub max_qp: u32,
    /// Largest message: the IBTA's 2^31 bytes.
    pub max_msg_size: u64,
    /// Largest memory registration, in bytes (`ibv_device_attr.max_mr_size`).
    pub max_mr_size: u64,
    /// Outstanding RDMA READs and atomics per QP, either direction.
    pub max_qp_rd_atom: u8,
}

/// The limits of every ndverbs device.
pub const LIMITS: DeviceLimits = DeviceLimits {
    max_qp_wr: 16_384,
    max_sge: 32,
    max_inline_data: 4096,
    max_cqe: 1 << 20,
    max_qp: 1 << 17,
    max_msg_size: 1 << 31,
    max_mr_size: 1 << 40,
    max_qp_rd_atom: crate::rc::MAX_RD_ATOMIC,
};
