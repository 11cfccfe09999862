//! The states of a CM endpoint, named as Linux `ib_cm.h` names them.
//!
//! ```text
//!  active side                               passive side
//!  IDLE ──connect──► REQ_SENT ──REQ──────────► (listener) ──► REQ_RCVD
//!                     │  ▲ MRA(REQ)                 dup REQ ⇒ MRA │
//!                     ▼  │                                        ▼
//!               MRA_REQ_RCVD                               MRA_REQ_SENT
//!                     │            ◄──────REP─────── accept ──┘
//!                     ▼                                       REP_SENT ⇄ MRA_REP_RCVD
//!                  REP_RCVD ⇄ MRA_REP_SENT (dup REP ⇒ MRA)        │
//!                     │ complete_connect ──RTU──────────────────► │
//!                     ▼                                           ▼
//!                ESTABLISHED ◄──────────────────────────────► ESTABLISHED
//!       disconnect ⇒ DREQ_SENT ──DREQ──► DREQ_RCVD (app told; waits for its disconnect)
//!                     │ ◄────────DREP──── disconnect ⇒ TIMEWAIT
//!                     ▼
//!                  TIMEWAIT ──conv(av timeout)──► IDLE (QPN and comm ID reusable)
//! ```
//!
//! REJ may end any state before ESTABLISHED; retries running out ends
//! REQ_SENT / REP_SENT (back to IDLE) and DREQ_SENT (to TIMEWAIT).

use std::fmt;

/// A CM endpoint's state (Linux `enum ib_cm_state`, without SIDR).
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
/// let (mut a, b) = agents();
/// let ep = a.connect(Instant::ZERO, ConnectParams::new(0x1234, b.config().local_addr, 0x11, 1))?;
/// let state = a.state(ep).unwrap();
/// assert_eq!(state, CmState::ReqSent);
/// assert_eq!(state.to_string(), "REQ_SENT"); // Linux's IB_CM_REQ_SENT
/// # Ok::<(), CmError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    /// No connection: new, rejected, timed out, or past time-wait.
    Idle,
    /// A listener bound to a service ID.
    Listen,
    /// Active: REQ sent (retransmitted until REP, REJ or timeout).
    ReqSent,
    /// Passive: REQ received, the application has not answered yet.
    ReqRcvd,
    /// Passive: as `ReqRcvd`, and an MRA asked the peer to wait.
    MraReqSent,
    /// Active: the peer's MRA extended our REQ timeout.
    MraReqRcvd,
    /// Passive: REP sent (retransmitted until RTU, REJ or timeout).
    RepSent,
    /// Active: REP received; the application readies its QP, then RTU.
    RepRcvd,
    /// Active: as `RepRcvd`, and an MRA asked the peer to wait.
    MraRepSent,
    /// Passive: the peer's MRA extended our REP timeout.
    MraRepRcvd,
    /// Connected.
    Established,
    /// DREQ sent (retransmitted until DREP, crossing DREQ or timeout).
    DreqSent,
    /// The peer's DREQ arrived; the DREP waits for our disconnect.
    DreqRcvd,
    /// Disconnected; the QPN and comm ID are not reused until it ends.
    Timewait,
    /// SIDR: our SIDR_REQ is out, waiting for the SIDR_REP.
    SidrReqSent,
    /// SIDR: a SIDR_REQ arrived; the application answers it.
    SidrReqRcvd,
}

impl CmState {
    /// Linux's name (`IB_CM_…` without the prefix).
    pub fn name(self) -> &'static str {
        match self {
            CmState::Idle => "IDLE",
            CmState::Listen => "LISTEN",
            CmState::ReqSent => "REQ_SENT",
            CmState::ReqRcvd => "REQ_RCVD",
            CmState::MraReqSent => "MRA_REQ_SENT",
            CmState::MraReqRcvd => "MRA_REQ_RCVD",
            CmState::RepSent => "REP_SENT",
            CmState::RepRcvd => "REP_RCVD",
            CmState::MraRepSent => "MRA_REP_SENT",
            CmState::MraRepRcvd => "MRA_REP_RCVD",
            CmState::Established => "ESTABLISHED",
            CmState::DreqSent => "DREQ_SENT",
            CmState::DreqRcvd => "DREQ_RCVD",
            CmState::Timewait => "TIMEWAIT",
            CmState::SidrReqSent => "SIDR_REQ_SENT",
            CmState::SidrReqRcvd => "SIDR_REQ_RCVD",
        }
    }
}

impl fmt::Display for CmState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
