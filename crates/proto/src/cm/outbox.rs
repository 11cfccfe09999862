//! The agent's outputs waiting to be polled: MADs to send, events, counters.
//! Kept apart from the endpoint table so a handler can hold an endpoint and
//! queue output at the same time.

use super::counters::CmCounters;
use super::event::CmEvent;
use ndverbs_wire::cm::CmMessage;
use ndverbs_wire::mad::MAD_LEN;
use std::collections::VecDeque;
use std::net::IpAddr;

/// One MAD to send: the engine wraps it in a UD SEND_ONLY from QP1 to QP1
/// (Q_Key 0x80010000, P_Key 0xFFFF) addressed to `dst` — the GSI path of
/// [`UdQp::gsi`](crate::ud::UdQp::gsi).
///
/// # Example
///
/// ```
/// # use ndverbs_proto::cm::*;
/// # use ndverbs_proto::time::Instant;
/// # fn pump(now: Instant, x: &mut CmAgent, y: &mut CmAgent) {
/// #     loop {
/// #         let (xa, ya) = (x.config().local_addr, y.config().local_addr);
/// #         let mut quiet = true;
/// #         while let Some(t) = x.poll_transmit() { y.handle_mad(now, xa, &t.mad); quiet = false; }
/// #         while let Some(t) = y.poll_transmit() { x.handle_mad(now, ya, &t.mad); quiet = false; }
/// #         if quiet { break }
/// #     }
/// # }
/// # fn agents() -> (CmAgent, CmAgent) {
/// #     (CmAgent::new(CmConfig::new("10.0.0.1".parse().unwrap(), 0xa, 1)),
/// #      CmAgent::new(CmConfig::new("10.0.0.2".parse().unwrap(), 0xb, 2)))
/// # }
/// use ndverbs_wire::mad::Mad;
/// let (mut a, b) = agents();
/// a.connect(Instant::ZERO, ConnectParams::new(0x1234, b.config().local_addr, 0x11, 1))?;
/// // One 256-byte MAD for the peer's QP1 (Q_Key 0x80010000).
/// let t = a.poll_transmit().unwrap();
/// assert_eq!(t.dst, b.config().local_addr);
/// let mad = Mad::parse(&t.mad).unwrap();
/// assert_eq!(mad.header.mgmt_class, 0x07); // the CM class
/// assert!(a.poll_transmit().is_none());
/// # Ok::<(), CmError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Destination IP address.
    pub dst: IpAddr,
    /// The whole 256-byte MAD.
    pub mad: [u8; MAD_LEN],
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Outbox {
    pub tx: VecDeque<Transmit>,
    pub events: VecDeque<CmEvent>,
    pub counters: CmCounters,
}

impl Outbox {
    /// Queues `msg` with `tid` for `dst`; returns the MAD bytes.
    pub(crate) fn send(&mut self, dst: IpAddr, msg: &CmMessage, tid: u64) -> [u8; MAD_LEN] {
        let mad = msg.to_mad(tid);
        match msg {
            CmMessage::Rej(_) => self.counters.tx_rej += 1,
            CmMessage::Mra(_) => self.counters.tx_mra += 1,
            _ => {}
        }
        self.push(dst, mad);
        mad
    }

    /// Queues ready MAD bytes (a retransmission).
    pub(crate) fn push(&mut self, dst: IpAddr, mad: [u8; MAD_LEN]) {
        self.counters.tx_mads += 1;
        self.tx.push_back(Transmit { dst, mad });
    }

    pub(crate) fn event(&mut self, e: CmEvent) {
        self.events.push_back(e);
    }
}
