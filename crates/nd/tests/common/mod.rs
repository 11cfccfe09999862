//! What the ND tests start from: one side of a connection.

use ndverbs_nd::*;
use std::net::IpAddr;

/// An adapter with a completion queue, a queue pair completing on it
/// (context 7; 16 requests of 2 SGEs each way, 64 bytes inline) and a
/// 64 KiB region peers may read and write.
pub struct Side {
    pub ad: Adapter,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
    pub mr: MemoryRegion,
}

/// The side on local address `ip`.
pub fn side(ip: IpAddr) -> Side {
    let ad = Provider.open_adapter(ip).unwrap();
    let cq = ad.create_completion_queue(64).unwrap();
    let qp = ad
        .create_queue_pair(&cq, &cq, 7, QueuePairSizes::new(16, 2).with_inline(64))
        .unwrap();
    let mr = ad.create_memory_region().unwrap();
    mr.register(
        1 << 16,
        MrFlags::ALLOW_REMOTE_READ | MrFlags::ALLOW_REMOTE_WRITE,
    )
    .wait()
    .unwrap();
    Side { ad, cq, qp, mr }
}
