//! Reliable Connected (RC) queue pairs.
//!
//! An RC QP is two independent one-way pipes sharing a QP number:
//!
//! ```text
//!          this QP                                        peer QP
//!  post_send ─► [send queue] ─► requester ── requests ──► responder ─► memory / receives
//!                    ▲                                        │
//!  poll_completion ◄─ completer ◄──── ACK / NAK / READ & atomic responses
//!
//!  memory / receives ◄─ responder ◄── requests ─────────── requester (peer)
//!                           └──── ACK / NAK / responses ──► completer (peer)
//! ```
//!
//! Every packet carries a 24-bit *PSN*. The requester numbers packets
//! consecutively; the responder executes them strictly in PSN order, exactly
//! once, and acknowledges; the completer matches acknowledgements to the send
//! queue, completes work requests in order and, when something was lost,
//! rewinds the requester to resend from the oldest unacknowledged PSN
//! (*go-back-N*). Each of the three is a state machine in its own file, as in
//! Linux rxe — `requester.rs`, `completer.rs` and `responder.rs`, each opening
//! with a description of its rules — and [`RcQp`] (`qp.rs`) owns them and is
//! the only public face. `send_queue.rs` holds the work queue elements the
//! requester and completer share, `attr.rs` the state/attribute rules,
//! `post.rs` the checks a work request passes when posted
//! ([`validate_send`], [`validate_recv`]) and `connection.rs` the
//! RESET → INIT → RTR → RTS ladder ([`RcConnection`]).
//!
//! ## Driving an `RcQp` (sans-IO)
//!
//! Inputs: [`RcQp::handle_packet`] (a parsed transport packet addressed to this
//! QP), [`RcQp::handle_timeout`] (the clock passed a deadline), posts and
//! `modify`. Outputs, to drain after every input: [`RcQp::poll_transmit`] until
//! `None` (each call writes one transport packet — BTH … payload, pad and a zero
//! ICRC — for the engine to wrap in IP/UDP and checksum), [`RcQp::poll_timeout`]
//! (when to call `handle_timeout` next) and [`RcQp::poll_completion`].
//!
//! The receive queue lives outside the QP ([`RecvQueue`]) so a shared receive
//! queue can be passed in its place.
//!
//! ## Error state
//!
//! A fatal error — a NAK from the peer, exhausted retries, a request the
//! responder must refuse, or `modify(ERR)` — moves the QP to ERR. Then every
//! send WR still queued completes once, in order, with `WrFlushErr` (the WR
//! that failed with its own status), [`RcQp::flush_recv`] does the same for a
//! receive queue, and nothing more is sent — except, when the responder caused
//! the error, the one NAK that tells the peer why.

mod attr;
mod cnp;
mod completer;
mod connection;
mod counters;
mod emit;
mod post;
mod qp;
mod recv_queue;
mod requester;
mod responder;
mod send_queue;
mod wr;

pub use attr::{
    check_modify, check_ud_modify, rxe_default_udp_sport, rxe_udp_sport, transition_rules,
    ud_transition_rules, AddressVector, AttrMask, ModifyError, PathMtu, QpAttr, QpCaps, QpState,
    MAX_RD_ATOMIC,
};
pub use cnp::{cnp_packet, CNP_INTERVAL};
pub use connection::RcConnection;
pub use counters::{Counters, Drops};
pub use post::{validate_recv, validate_send};
pub use qp::{RcQp, MAX_HEADER_LEN};
pub use recv_queue::RecvQueue;
pub use requester::{
    max_window, CcSignals, CC_MAX_UNACKED_PSNS, MAX_PKT_PER_ACK, MAX_UNACKED_BYTES,
    MAX_UNACKED_PSNS, RXE_MAX_PKT_PER_ACK,
};
pub use responder::reorder::{
    REORDER_MAX_BYTES, REORDER_MAX_PACKETS, REORDER_WAIT, REORDER_WAIT_MIN,
};
pub use responder::MAX_QUEUED_REPLIES;
pub use wr::{
    PostError, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcQueue, WcStatus, WorkCompletion,
};

pub(crate) use requester::Requester;

use crate::mem::Access;
use crate::time::Duration;
use ndverbs_wire::ext::{ack_timeout_nanos, NakCode};

/// Why a QP entered the error state.
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{AttrMask, QpAttr, QpCaps, QpErrorCause, QpState, RcConnection, RcQp};
/// let mut qp = RcQp::new(1, 0, QpCaps::default());
/// let (init, mask) = RcConnection::new(2).init();
/// qp.modify(&init, mask)?;
/// assert_eq!(qp.error_cause(), None);
/// qp.modify(&QpAttr { qp_state: QpState::Err, ..init }, AttrMask::STATE)?;
/// assert_eq!(qp.error_cause(), Some(QpErrorCause::Modify));
/// # Ok::<(), ndverbs_proto::rc::ModifyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpErrorCause {
    /// `modify` to ERR.
    Modify,
    /// A send request failed with this status (NAK from the peer, retries
    /// exhausted, bad response, local protection error).
    Requester(WcStatus),
    /// The responder refused a request and NAKed it with this code.
    Responder(NakCode),
}

/// "The QP must move to ERR" (the cause is recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fatal(pub QpErrorCause);

/// Attribute values in the form the state machines use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Params {
    pub qpn: u32,
    pub dest_qpn: u32,
    pub pd: u32,
    pub mtu: u32,
    pub access: Access,
    pub ack_timeout: Option<Duration>,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u32,
    pub max_dest_rd_atomic: u32,
    pub sq_sig_all: bool,
}

impl Params {
    fn new(qpn: u32, pd: u32, caps: &QpCaps, a: &QpAttr) -> Self {
        Params {
            qpn,
            dest_qpn: a.dest_qp_num,
            pd,
            mtu: a.path_mtu.bytes(),
            access: a.qp_access_flags,
            ack_timeout: ack_timeout_nanos(a.timeout).map(Duration::from_nanos),
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            min_rnr_timer: a.min_rnr_timer,
            max_rd_atomic: u32::from(a.max_rd_atomic),
            max_dest_rd_atomic: u32::from(a.max_dest_rd_atomic),
            sq_sig_all: caps.sq_sig_all,
        }
    }
}
