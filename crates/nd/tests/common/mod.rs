//! What the ND tests start from: one side of a connection, and connecting
//! two of them.

#![allow(dead_code)] // each test crate uses its own part

use ndverbs_nd::*;
use std::net::{IpAddr, SocketAddr};

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
    side_with(Provider.open_adapter(ip).unwrap())
}

/// The side on adapter `ad`.
pub fn side_with(ad: Adapter) -> Side {
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

/// A connection: the active and passive connectors and the listener.
pub struct Connection {
    pub active: Connector,
    pub passive: Connector,
    pub listener: Listener,
}

/// Connects `a`'s QP (active) to `b`'s (passive, listening on an ephemeral
/// port), waiting for every step.
pub fn connect(a: &Side, b: &Side) -> Connection {
    connect_qps((&a.ad, &a.qp), (&b.ad, &b.qp))
}

/// Connects QP `aqp` of adapter `a` (active) to `bqp` of `b` (passive).
pub fn connect_qps(
    (a, aqp): (&Adapter, &QueuePair),
    (b, bqp): (&Adapter, &QueuePair),
) -> Connection {
    let listener = b.create_listener().unwrap();
    listener.bind(SocketAddr::new(b.address(), 0)).unwrap();
    listener.listen(4).unwrap();
    let passive = b.create_connector().unwrap();
    let request = listener.get_connection_request(&passive).unwrap();
    let active = a.create_connector().unwrap();
    let rep = active
        .connect(aqp, listener.get_local_address().unwrap(), 1, 1, b"")
        .unwrap();
    request.wait().unwrap();
    let rtu = passive.accept(bqp, 1, 1, b"").unwrap();
    rep.wait().unwrap();
    active.complete_connect().unwrap().wait().unwrap();
    rtu.wait().unwrap();
    Connection {
        active,
        passive,
        listener,
    }
}

/// The status of a call: `ND_SUCCESS` or its error's.
pub fn status<T>(r: NdResult<T>) -> NdStatus {
    match r {
        Ok(_) => NdStatus::SUCCESS,
        Err(e) => e.status,
    }
}
