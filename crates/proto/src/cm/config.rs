//! Configuration of a [`CmAgent`](super::CmAgent) and the CM's time arithmetic.
//!
//! ## Timeouts are exponents
//!
//! Every CM timeout on the wire is a 5-bit exponent `t` meaning
//! 4.096 µs × 2^t. Linux turns one into milliseconds with
//! `cm_convert_to_ms(t) = 1 << max(t − 8, 0)` (a power of two, rounded down
//! from the exact value): 16 → 256 ms, 18 → 1024 ms, 19 → 2048 ms,
//! 20 → 4096 ms, 24 → 65 536 ms. [`cm_convert_to_ms`] is that function; every
//! timer of this module goes through it so that our retries line up with a
//! Linux peer's.
//!
//! ## The defaults are Linux 6.1 on rxe
//!
//! The reference captures (`testdata/captures/*.pcap`, Linux 6.1 rxe) show
//! what rdma_cm puts in a REQ: both CM response timeouts 20, MaxCMRetries 15,
//! LocalAckTimeout 19. LocalAckTimeout is `cm_ack_timeout(ca_ack_delay,
//! packet_life_time)` with rxe's ack delay 15 and RoCE's packet life time 18
//! (newer kernels use 16 and send 17). From these follow every timer:
//!
//! | timer | formula (Linux `cm.c`) | default |
//! |---|---|---|
//! | REQ retransmission | 2·conv(packet_life_time) + conv(remote CM response timeout) | 2·1024 + 4096 = 6144 ms (the unanswered-REQ capture shows 6.19 s) |
//! | REP retransmission | conv(REQ.LocalCMResponseTimeout) | 4096 ms |
//! | DREQ retransmission | the connection's own interval (active: the REQ's, passive: the REP's) | 6144 / 4096 ms |
//! | retries | MaxCMRetries (REQ's for the passive side) | 15 ⇒ 16 sends |
//! | after an MRA | conv(ServiceTimeout) + conv(av timeout), for every later retry | 65 536 + 2048 ms |
//! | time-wait | conv(av timeout), av timeout = packet_life_time + 1 (active: `cm_ack_timeout(target_ack_delay, plt)`) | 2048 ms |

use std::net::IpAddr;

/// `cm_convert_to_ms`: a CM timeout exponent in milliseconds, as Linux
/// computes it (`1 << max(t − 8, 0)`).
pub fn cm_convert_to_ms(t: u8) -> u64 {
    ndverbs_wire::cm::cm_timeout_ms(t)
}

/// Linux `cm_ack_timeout`: the QP's local ACK timeout exponent for a path
/// with `packet_life_time` to a CA with `ca_ack_delay`
/// (4.096·2^ack = 4.096·2^delay + 2·4.096·2^plt, rounded the way Linux does).
pub fn cm_ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let mut ack = i32::from(packet_life_time) + 1;
    let delay = i32::from(ca_ack_delay);
    if ack >= delay {
        ack += i32::from(delay >= ack - 1);
    } else {
        ack = delay + i32::from(ack >= delay - 1);
    }
    ack.min(31) as u8
}

/// Everything a [`CmAgent`](super::CmAgent) needs to know about its adapter
/// and the timers it should run. [`CmConfig::new`] fills in the Linux 6.1
/// values.
///
/// # Example
///
/// ```
/// use ndverbs_proto::cm::{cm_convert_to_ms, CmAgent, CmConfig};
/// let mut cfg = CmConfig::new("10.0.0.1".parse().unwrap(), 0x0002_c9ff_fe00_0001, 42);
/// // Linux 6.1 on RoCE: packet life time 18, response timeout 20, 15 retries.
/// assert_eq!((cfg.packet_life_time, cfg.cm_response_timeout, cfg.max_cm_retries), (18, 20, 15));
/// assert_eq!(cfg.req_interval_ms(), 2 * cm_convert_to_ms(18) + cm_convert_to_ms(20));
/// cfg.max_cm_retries = 3; // give up sooner
/// let agent = CmAgent::new(cfg);
/// assert_eq!(agent.config().max_cm_retries, 3);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmConfig {
    /// This adapter's IP address; its GID is the IPv4-mapped form for IPv4.
    pub local_addr: IpAddr,
    /// The CA (node) GUID sent in REQ/REP and used as ARI of REJ(timeout).
    pub ca_guid: u64,
    /// High 32 bits of every transaction ID this agent originates (Linux:
    /// the MAD agent's `hi_tid`, 2 in the captures).
    pub hi_tid: u32,
    /// Secret that makes local communication IDs unpredictable (take it
    /// from the OS random source; tests pass a constant).
    pub seed: u64,
    /// Packet life time exponent of every path (RoCE: 18 in Linux 6.1).
    pub packet_life_time: u8,
    /// Our CM response timeout exponent, sent as both REQ response timeouts.
    pub cm_response_timeout: u8,
    /// Retries after the first send of a REQ (and of the DREQ of an active
    /// connection); 4 bits on the wire.
    pub max_cm_retries: u8,
    /// This CA's ACK delay exponent (rxe: 15); REP's TargetAckDelay.
    pub ca_ack_delay: u8,
    /// Hop limit of the path; > 1 means "routed": permissive LIDs,
    /// SubnetLocal 0.
    pub hop_limit: u8,
    /// Service timeout of the MRA sent when a duplicate REQ/REP arrives while
    /// the application has not answered yet (rdma_cm: 24 ≈ 67 s). `None`
    /// drops such duplicates silently (plain ib_cm) and lets the peer time
    /// out a slow application.
    pub mra_service_timeout: Option<u8>,
    /// The high byte of every local communication ID, when this agent is
    /// one of several processes behind one address (the engine's shared
    /// ports): a peer echoes the ID in every reply, and the host steers the
    /// reply by that byte. `None`: all 32 bits are random.
    pub comm_id_slot: Option<u8>,
}

impl CmConfig {
    /// Linux 6.1 rxe defaults for an adapter at `local_addr`.
    pub fn new(local_addr: IpAddr, ca_guid: u64, seed: u64) -> Self {
        CmConfig {
            local_addr,
            ca_guid,
            hi_tid: 1,
            seed,
            packet_life_time: 18,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            ca_ack_delay: 15,
            hop_limit: 64,
            mra_service_timeout: Some(24),
            comm_id_slot: None,
        }
    }

    /// The REQ retransmission interval in ms:
    /// 2·conv(packet_life_time) + conv(cm_response_timeout).
    pub fn req_interval_ms(&self) -> u64 {
        2 * cm_convert_to_ms(self.packet_life_time) + cm_convert_to_ms(self.cm_response_timeout)
    }

    /// LocalAckTimeout we put in a REQ: `cm_ack_timeout(ca_ack_delay, plt)`.
    pub fn local_ack_timeout(&self) -> u8 {
        cm_ack_timeout(self.ca_ack_delay, self.packet_life_time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_arithmetic() {
        assert_eq!(cm_convert_to_ms(20), 4096);
        assert_eq!(cm_convert_to_ms(18), 1024);
        assert_eq!(cm_convert_to_ms(3), 1);
        // rxe ack delay 15: plt 18 (6.1) → 19 as in the captures, plt 16 → 17.
        assert_eq!(cm_ack_timeout(15, 18), 19);
        assert_eq!(cm_ack_timeout(15, 16), 17);
        assert_eq!(cm_ack_timeout(15, 0), 15);
        assert_eq!(cm_ack_timeout(15, 13), 16);
        assert_eq!(cm_ack_timeout(31, 31), 31);
        let c = CmConfig::new("10.0.0.1".parse().unwrap(), 1, 2);
        assert_eq!(c.req_interval_ms(), 6144);
        assert_eq!(c.local_ack_timeout(), 19);
    }
}
