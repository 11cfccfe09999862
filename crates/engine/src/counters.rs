//! NIC-wide packet counters (per-QP counters live in the QPs).
//!
//! Only the engine writes them, holding the core lock, so each update is a
//! plain load and store (`bump`) rather than a locked read-modify-write per
//! packet; anyone may read them at any time.
//!
//! Besides what arrived, left and was dropped, they say *how* packets left:
//! link calls, multi-packet GSO runs and payloads sent straight from
//! registered memory. Those are what the reliability tests check to prove
//! that traffic under injected faults still takes the production send path.

use std::sync::atomic::{AtomicU64, Ordering};

/// NIC-wide packet counters.
///
/// # Example
///
/// ```
/// use ndverbs_engine::config::Progress;
/// use ndverbs_engine::nic::Nic;
/// use std::sync::atomic::Ordering::Relaxed;
/// let a = Nic::open("127.93.5.1".parse().unwrap(), Progress::Manual)?;
/// // Eight bytes that are no RoCE packet, sent to port 4791: received, then dropped.
/// let junk = std::net::UdpSocket::bind("127.93.5.2:0")?;
/// junk.send_to(&[0; 8], "127.93.5.1:4791")?;
/// let c = a.counters();
/// let t0 = std::time::Instant::now();
/// while c.rcvd_datagrams.load(Relaxed) == 0 {
///     assert!(t0.elapsed().as_secs() < 10);
///     a.progress();
/// }
/// assert_eq!(c.drop_malformed.load(Relaxed) + c.drop_bad_icrc.load(Relaxed), 1);
/// assert_eq!(c.sent_datagrams.load(Relaxed), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct NicCounters {
    /// Datagrams received (all).
    pub rcvd_datagrams: AtomicU64,
    /// Datagrams sent.
    pub sent_datagrams: AtomicU64,
    /// Dropped: ICRC did not verify.
    pub drop_bad_icrc: AtomicU64,
    /// Dropped: too short or unparsable transport headers.
    pub drop_malformed: AtomicU64,
    /// Dropped: no QP with that number.
    pub drop_unknown_qp: AtomicU64,
    /// Dropped: source address is not the QP's peer.
    pub drop_wrong_source: AtomicU64,
    /// Dropped: QP1 (CM) packets with no management agent attached.
    pub drop_gsi: AtomicU64,
    /// Dropped: another process's packets, which reached this member of a
    /// shared port while the kernel's steering was stale ([`crate::share`]).
    pub drop_other_process: AtomicU64,
    /// Packets the socket refused to take (buffer full); recovered by retransmission.
    pub send_would_block: AtomicU64,
    /// Packets refused for their size (`EMSGSIZE`, also a GSO run whose
    /// segments the path cannot carry): the QP's path MTU is larger than
    /// the interface's. Dropped; the QP's retries run out unless the path
    /// grows.
    pub send_too_big: AtomicU64,
    /// Packets refused because the kernel or the device queue had no buffer
    /// (`ENOBUFS`); transient, recovered by retransmission.
    pub send_no_buffers: AtomicU64,
    /// Packets refused for any other reason (no route, …); dropped and left
    /// to retransmission.
    pub send_errors: AtomicU64,
    /// ICMP port unreachable answers: a host with no RoCE endpoint (nothing
    /// on UDP 4791) got a packet of ours. A connect waiting for its REP
    /// from there fails at once; RC traffic to it is only counted.
    pub peer_port_unreachable: AtomicU64,
    /// Other errors the network reported about packets sent (host or
    /// network unreachable, fragmentation needed …).
    pub peer_errors: AtomicU64,
    /// Calls that handed packets to the link (one system call each on a UDP
    /// socket: a `sendmmsg` of up to eight runs, or a `sendto`).
    pub send_calls: AtomicU64,
    /// Runs of several packets sent as one UDP GSO datagram.
    pub gso_runs: AtomicU64,
    /// Packets whose payload was sent straight from registered memory
    /// (zero-copy), not copied into the transmit buffer.
    pub zero_copy_packets: AtomicU64,
    /// Congestion control (when on): round-trip samples its controllers took.
    pub cc_rtt_samples: AtomicU64,
    /// Congestion control: go-back-N retries and probes reported to it.
    pub cc_losses: AtomicU64,
    /// Congestion control: window cuts for delay above the target.
    pub cc_delay_cuts: AtomicU64,
    /// Congestion control: window cuts for loss.
    pub cc_loss_cuts: AtomicU64,
    /// Congestion control: window cuts for CNPs.
    pub cc_cnp_cuts: AtomicU64,
    /// Congestion control: mode changes (slow start, delay, competitive).
    pub cc_mode_switches: AtomicU64,
    /// Congestion control: entries into competitive mode (a buffer-filling
    /// flow shares the bottleneck).
    pub cc_competitive_entries: AtomicU64,
    /// Congestion control: CNPs the peers sent for our QPs (a router marked
    /// their packets).
    pub cc_cnps_received: AtomicU64,
    /// Congestion control: CNPs sent, answering packets that arrived marked
    /// Congestion Experienced.
    pub cc_cnps_sent: AtomicU64,
}

/// Adds `n` to a counter only the engine (holding the core lock) writes: a
/// plain load and store, not a locked read-modify-write per packet.
#[inline]
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}
