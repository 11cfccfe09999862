//! The controller's parameters, with the defaults of the design notes
//! (congestion.md §5.1) and where each number comes from.

use crate::time::Duration;

/// Parameters of a [`super::PathController`]. `CcConfig::default()` is the
/// design's proposal for 1–100 Gb/s paths with kernel UDP and engine threads.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CcConfig {
    /// Payload bytes of a full packet (the path MTU): the unit of additive
    /// increase and of the smallest window.
    pub mss: u32,
    /// Queueing delay aimed at, `q_t`: 250 µs. Swift aims at 25 µs with NIC
    /// timestamps, eRPC at 50 µs busy-polling; user-space samples carry
    /// engine wake-ups and postponed ACKs, so the target is larger.
    pub target_queue: Duration,
    /// Extra target for small windows (Swift's flow scaling, `fs_range`):
    /// up to 250 µs as the window falls from [`CcConfig::fs_max_pkts`] to
    /// [`CcConfig::fs_min_pkts`] packets, so many flows get more slack.
    pub fs_range: Duration,
    /// Window (packets) at and below which flow scaling is `fs_range`.
    pub fs_min_pkts: f64,
    /// Window (packets) at and above which flow scaling is zero.
    pub fs_max_pkts: f64,
    /// Additive increase in packets per round trip (Swift/Falcon `ai` 1.0).
    pub ai_pkts: f64,
    /// Multiplicative decrease gain on delay (Swift `β` 0.8).
    pub beta: f64,
    /// Largest decrease at once on delay (Swift `max_mdf` 0.5).
    pub max_mdf: f64,
    /// Decrease on loss outside competitive mode (×0.5, Swift's loss backstop).
    pub loss_factor: f64,
    /// Decrease on loss in competitive mode (×0.7, CUBIC's β).
    pub competitive_loss_factor: f64,
    /// Losses in a row without progress that send the window to its minimum
    /// (Swift/Falcon retransmit limit 3).
    pub losses_to_min: u32,
    /// Window before any signal: 64 KiB, one GSO quantum.
    pub initial_window: u64,
    /// Smallest window in bytes: one packet. (Swift and Falcon go down to
    /// 0.01 packet by pacing one packet per `srtt/cwnd`; not done yet.)
    pub min_window: u64,
    /// Largest window: 1 MiB per path.
    pub max_window: u64,
    /// How long the base RTT is remembered (BBR's `min_rtt` window, 10 s).
    pub base_rtt_window: Duration,
    /// Smallest queue target after shallow-buffer losses (the adaptive
    /// `q_t_eff` never falls below it).
    pub min_target_queue: Duration,
    /// Time for the adaptive target to relax back to `target_queue` (~10 s).
    pub target_relax: Duration,
    /// Round trips in a row whose queue never drained before competitive
    /// mode (Copa's "5 RTTs", made longer against misfires among
    /// delay-based flows).
    pub competitive_after: u32,
    /// Round trips at least in a mode before leaving it (hysteresis, 10).
    pub mode_hold_rtts: u32,
    /// How long after competitive mode ended the competitor is remembered
    /// (2 s): a CUBIC flow's queue drains for a moment after each of its
    /// losses, about once a second here, which ends competitive mode.
    pub competitor_memory: Duration,
    /// Undrained round trips in a row that bring back competitive mode
    /// while the competitor is remembered (2); the window then returns to
    /// what it was when competing ended, times `competitive_loss_factor`.
    pub competitive_return_after: u32,
    /// DCQCN's `g` (1/16, the HPCC ns-3 model's default).
    pub dcqcn_g: f64,
    /// Shortest time between two CNP cuts besides one srtt (50 µs, the
    /// paper's CNP interval — unverified, congestion.md §7).
    pub cnp_min_interval: Duration,
    /// DCQCN fast-recovery steps after a cut (F = 5).
    pub cnp_recovery_steps: u32,
    /// Pacing rate as a multiple of `cwnd/srtt` (Linux `tcp_pacing_ca_ratio`
    /// 120 %).
    pub pacing_gain: f64,
    /// The same in slow start (Linux `tcp_pacing_ss_ratio` 200 %).
    pub pacing_gain_slow_start: f64,
    /// How long after the last congestion signal pacing stays on; quieter
    /// than this the path is uncongested and sends unpaced (eRPC's bypass).
    pub quiet_period: Duration,
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            mss: 1024,
            target_queue: Duration::from_micros(250),
            fs_range: Duration::from_micros(250),
            fs_min_pkts: 1.0,
            fs_max_pkts: 64.0,
            ai_pkts: 1.0,
            beta: 0.8,
            max_mdf: 0.5,
            loss_factor: 0.5,
            competitive_loss_factor: 0.7,
            losses_to_min: 3,
            initial_window: 64 * 1024,
            min_window: 1024,
            max_window: 1024 * 1024,
            base_rtt_window: Duration::from_secs(10),
            min_target_queue: Duration::from_micros(25),
            target_relax: Duration::from_secs(10),
            competitive_after: 8,
            mode_hold_rtts: 10,
            competitor_memory: Duration::from_secs(2),
            competitive_return_after: 2,
            dcqcn_g: 1.0 / 16.0,
            cnp_min_interval: Duration::from_micros(50),
            cnp_recovery_steps: 5,
            pacing_gain: 1.2,
            pacing_gain_slow_start: 2.0,
            quiet_period: Duration::from_millis(100),
        }
    }
}

impl CcConfig {
    /// The defaults for a path MTU of `mss` payload bytes (one-packet
    /// minimum window).
    pub fn with_mss(mss: u32) -> Self {
        CcConfig {
            mss,
            min_window: u64::from(mss),
            ..CcConfig::default()
        }
    }
}
