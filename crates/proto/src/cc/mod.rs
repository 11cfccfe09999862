//! Congestion control: one sans-IO controller per path.
//!
//! Without it a QP has a fixed window in flight (512 KiB of packets, at least
//! rxe's 128 PSNs: [`crate::rc::max_window`]) and nothing reacts
//! to delay, paces or coordinates the QPs sharing a bottleneck
//! (`shared/docs/congestion.md`). A [`PathController`] is the missing piece: one
//! per destination peer (an adapter owns one local address, so that is the
//! path), shared by every QP to it, fed with time and events, answering with
//! a window in bytes and a pacing rate. Like the rest of proto it reads no
//! clock: `now` is passed in, so it runs the same on virtual time.
//!
//! ## Inputs and outputs
//!
//! * `on_send(now, bytes)` — bytes put on the wire (re-sends too);
//! * `on_ack(now, bytes, rtt)` — bytes acknowledged, with a round-trip
//!   sample when the acknowledgement covers a timed packet. The QP measures
//!   it from the packet's build to the ACK's *arrival*, which the caller
//!   passes in ([`crate::rc::RcQp::handle_packet_at`]: the engine gives the
//!   kernel's receive time stamp), so the time the ACK then waits for the
//!   caller's thread is not taken for queueing;
//! * `on_loss(now, abandoned)` — a go-back-N retry or probe: the bytes in
//!   flight behind the loss will be sent again;
//! * `on_cnp(now)` — a congestion notification packet for a QP on the path;
//! * `window()`, `available()` (window minus bytes in flight) and
//!   `pacing_rate()` (`None` while uncongested), plus [`CcCounters`].
//!
//! ## The rules
//!
//! **Delay first (Swift, SIGCOMM 2020).** Delay is the only signal before
//! loss on our paths, and go-back-N makes loss expensive. The controller keeps
//! the round trip near a *target* `T = base_rtt + q_t + fs(cwnd)`: `base_rtt`
//! is a 10-s windowed minimum ([`filter`]), `q_t` = 250 µs of queueing (Swift's
//! 25 µs assumes NIC timestamps; user-space samples need more), and flow
//! scaling adds up to 250 µs for small windows ([`target`]). Below `T` the
//! window grows by one packet per round trip (Swift `ai` 1.0); above it, at
//! most once per smoothed RTT, it shrinks by `max(1 − 0.8·(d − T)/d, 0.5)`
//! (β 0.8, max_mdf 0.5).
//!
//! **Slow start.** From a 64 KiB window (one GSO quantum) the window grows by
//! what is acknowledged — doubling per round trip — until the delay reaches
//! `T`, a loss or a CNP.
//!
//! **Loss as a backstop.** A go-back-N retry or probe halves the window, at
//! most once per srtt; three in a row without progress set it to the minimum
//! (Swift's and Falcon's retransmit limit 3). A loss while the delay was
//! below `T` means the buffer is shallower than the target: the queue target
//! drops to half the queueing delay seen at the loss (≥ 25 µs) and relaxes
//! back over 10 s — else a 32 KB (256 µs) buffer would turn the controller
//! into loss-driven AIMD.
//!
//! **Competitive mode (Copa, NSDI 2018).** A CUBIC flow fills the buffer and
//! would starve a delay-based one. When the queue has not drained for 8
//! round trips in a row, the controller stops reacting to delay and behaves
//! like Reno: +1 packet per RTT, ×0.7 on loss (CUBIC's β); the base-RTT
//! filter holds still meanwhile. A round trip in which the queue drained to
//! `base + q_t/2` returns it to delay mode. Both switches need 10 round trips
//! in the current mode ([`competitive`]). A CUBIC flow's queue also drains
//! for a moment after each of its losses, so the competitor is remembered
//! for 2 s after competitive mode ends: two undrained round trips then bring
//! it back, at 0.7 of the window it had (a full hold of delay cuts would
//! have taken the window to one packet).
//!
//! **CNPs (DCQCN, SIGCOMM 2015).** `α ← (1 − g)α + g` per CNP (g = 1/16); a
//! cut `cwnd ×= 1 − α/2` at most once per `max(srtt, 50 µs)`; per quiet
//! interval α decays and five fast-recovery steps bring the window halfway
//! back to where it was each ([`dcqcn`]).
//!
//! **Pacing.** `1.2·cwnd/srtt` (2.0 in slow start: Linux's
//! `tcp_pacing_ca_ratio` and `ss_ratio`), but only while congested — a loss,
//! CNP or delay cut within the last 100 ms, or competing. An uncongested path
//! sends as if no controller were there (eRPC's bypass).
//!
//! All the numbers are fields of [`CcConfig`] with these defaults.
//!
//! ## Using it with a QP
//!
//! A QP with a send budget ([`crate::rc::RcQp::set_send_budget`]) sends only
//! the SEND/WRITE payload bytes the caller allows, and READ requests for no
//! more response bytes than it allows; without one it keeps
//! the fixed byte window (the default, until the engine's wiring is measured).
//! [`crate::rc::RcQp::take_cc_signals`] returns what the QP sent, what was
//! acknowledged, its smallest round-trip sample, its go-back-N retries and
//! the CNPs it received since the last call, which [`feed`] hands to the path's controller. The
//! engine's part: one controller per destination peer, shared by the QPs to
//! it; before draining a QP, budget = its share of `available()`; after
//! handling packets, feed; pace with `pacing_rate()` through a [`Pacer`]
//! (bursts of at most two 100-µs quanta, so GSO runs stay, shorter). The
//! engine also hands each packet's kernel arrival time to
//! [`crate::rc::RcQp::handle_packet_at`], raises the QPs' loss-probe floor
//! above its host's scheduling delays ([`crate::rc::RcQp::set_probe_floor`])
//! and gives loopback peers no controller at all (nothing to congest; their
//! round trips time only the peer process's scheduling).

pub mod competitive;
mod config;
mod controller;
pub mod dcqcn;
pub mod filter;
pub mod pacer;
pub mod target;

pub use config::CcConfig;
pub use controller::{CcCounters, Mode, PathController};
pub use pacer::Pacer;

use crate::rc::CcSignals;
use crate::time::Instant;

/// Hands a QP's signals ([`crate::rc::RcQp::take_cc_signals`]) to its
/// path's controller: the bytes sent, then the acknowledgement (with the
/// smallest round-trip sample), then each loss (the first one carrying the
/// abandoned bytes; without a loss they are only released), then each CNP.
pub fn feed(cc: &mut PathController, now: Instant, s: CcSignals) {
    if s.sent > 0 {
        cc.on_send(now, s.sent);
    }
    if s.acked > 0 || s.rtt.is_some() {
        cc.on_ack(now, s.acked, s.rtt);
    }
    for i in 0..s.losses {
        cc.on_loss(now, if i == 0 { s.abandoned } else { 0 });
    }
    if s.losses == 0 && s.abandoned > 0 {
        cc.on_release(s.abandoned);
    }
    for _ in 0..s.cnps {
        cc.on_cnp(now);
    }
}
