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
