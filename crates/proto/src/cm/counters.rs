//! Counters of what the agent received, dropped and sent. Every MAD that is
//! not acted upon lands in exactly one drop counter — no input panics or
//! disappears silently.

/// CM counters (cumulative).
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
/// let (mut a, _b) = agents();
/// // A MAD that does not parse is counted and otherwise ignored.
/// a.handle_mad(Instant::ZERO, "10.0.0.2".parse().unwrap(), &[0; 10]);
/// let c = a.counters();
/// assert_eq!((c.rx_mads, c.rx_malformed, c.tx_mads), (1, 1, 0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmCounters {
    /// MADs handed to `handle_mad`.
    pub rx_mads: u64,
    /// Dropped: not a 256-byte CM MAD with base version 1, class version 2,
    /// method Send, or an unknown attribute.
    pub rx_malformed: u64,
    /// Dropped: SIDR, LAP, APR (not used on RoCE by rdma_cm).
    pub rx_unsupported: u64,
    /// Dropped: names no endpoint we know (DREQs are answered instead).
    pub rx_unmatched: u64,
    /// Retransmissions of a message we already acted on (answered if the
    /// protocol says so).
    pub rx_duplicates: u64,
    /// Dropped: valid, but not expected in the endpoint's state.
    pub rx_wrong_state: u64,
    /// Dropped: a DREQ whose remote QPN is not our QPN.
    pub rx_dreq_bad_qpn: u64,
    /// Dropped: names an endpoint but comes from another address than its
    /// peer's (a forgery, or a peer that changed address).
    pub rx_wrong_source: u64,
    /// Dropped: after `remove_device`.
    pub rx_after_removal: u64,
    /// REQs refused by the passive rdma_cm checks (REJ sent).
    pub rx_req_invalid: u64,
    /// MADs queued for sending, retransmissions included.
    pub tx_mads: u64,
    /// Retransmissions (REQ, REP, DREQ).
    pub tx_retries: u64,
    /// REJs sent.
    pub tx_rej: u64,
    /// MRAs sent.
    pub tx_mra: u64,
    /// DREPs sent for DREQs naming no connection.
    pub tx_drep_unknown: u64,
    /// Connects ended early because the peer's host answered ICMP port
    /// unreachable ([`CmAgent::handle_unreachable`](super::CmAgent::handle_unreachable)).
    pub unreachable: u64,
}
