//! Connection endpoints: the CM side of a connection, and the requests that
//! run on it phase by phase (WinVerbs' `wv_ep.c`).
//!
//! An endpoint is an id in the NIC's table. Connect, CompleteConnect,
//! Accept and Disconnect are *requests* that name the endpoint **and** the QP
//! (by [`QpIdent`]: number and creation generation) and run in phases on the
//! endpoint's serialised queue — only the head runs, the others wait their
//! turn:
//!
//! | Request | Phases |
//! |---|---|
//! | Connect | QP: is it in INIT? CM: send REQ, park until REP / REJ / timeout |
//! | CompleteConnect | QP: INIT → RTR → RTS from the REP; CM: send RTU |
//! | Accept | QP: is it in INIT (or moved on by the application)? INIT → RTR → RTS; CM: send REP, park until RTU / REJ / timeout |
//!
//! **A QP the application moves itself.** rdma_cm lets an application
//! bring its own QP and move it to RTR and RTS itself, with the attributes
//! the request ([`RequestInfo::qp`], our starting PSN chosen when the
//! request is handed over) or the REP ([`ConnectInfo::qp`]) imply, before
//! it accepts or completes the connection. CompleteConnect and Accept take
//! such a QP as it is: a QP found in RTR or RTS is not moved, provided it
//! was moved for this connection — its peer QPN and receive PSN (and, in
//! RTS, its send PSN) are the negotiated ones; the rest (MTU, read limits,
//! timeouts) is the application's choice, as under Linux, whose CM never
//! touches such a QP. One moved for another connection fails the request
//! ([`EpError::InvalidState`]) before the REP or the RTU goes out. A QP in
//! INIT is moved as always; Connect still wants INIT.
//! | Disconnect | CM: DREQ (park until DREP / DREQ timeout) or DREP (done at once), nothing after the peer's REJ; QP: → ERR, which flushes every outstanding work request; its QPN stays reserved through time-wait |
//!
//! NotifyDisconnect does not queue: it parks until a DREQ arrives (and never
//! touches the QP), and GetConnectionRequest parks on a listening endpoint
//! until a REQ arrives.
//!
//! **UD endpoints (SIDR).** rdma_cm's UDP port space has no connection: a
//! Resolve sends a SIDR_REQ for the service (`0x0111 << 16 | port`) and
//! parks until the SIDR_REP (whatever its status: the caller decides what a
//! refusal means), the last retransmission ([`EpError::Timeout`]) or ICMP
//! ([`EpError::PortUnreachable`]); a listener of the UDP space
//! ([`Endpoints::listen_ps`]) hands SIDR requests to GetConnectionRequest
//! like REQs, and `accept_ud` answers one with our UD QP's number and Q_Key
//! (Reject refuses it). Neither touches a QP: the application's UD QP is
//! ready on its own. The endpoint never holds a QP and the QP never holds
//! an endpoint: each QP phase names the QP by identity, and a QP that is
//! gone is a status ([`EpError::NoQp`]), not a crash — also when a newer QP
//! took its number, which no phase ever touches. Device removal completes
//! every parked request with [`EpError::DeviceRemoved`]; a request the
//! engine loses without an outcome reads [`EpError::Lost`].
//!
//! ## Disconnect and NotifyDisconnect
//!
//! | Call | Outcome |
//! |---|---|
//! | Disconnect, established | DREQ, or DREP if the peer's DREQ arrived; completes on DREP received or sent (`Ok`) or DREQ timeout ([`EpError::Timeout`]), only after its QP phase: the flush completions are on the CQ first, and while our DREQ is out the QP is untouched |
//! | Disconnect after the peer's REJ ended an established connection | nothing sent; the QP phase flushes; `Ok` |
//! | Disconnect with Connect pending, before CompleteConnect, or while Accept waits for the RTU | refused (`Refused::NotConnected`, ND: `ND_CONNECTION_INVALID`); nothing sent, QP untouched |
//! | Disconnect, never connected or already over | refused (`Refused::NotConnected`, ND: `ND_CONNECTION_INVALID`) |
//! | Disconnect whose QP was released | the CM phase runs; then [`EpError::NoQp`] |
//! | NotifyDisconnect | `Ok` on the peer's DREQ (at once if it arrived on this connection); refused where there is no connection or it ended without a DREQ; stays pending when our own Disconnect ends it ([`EpError::Canceled`] by cancel or destroy); [`EpError::Aborted`] when the connection fails without a DREQ |
//!
//! ## QP phases and threads
//!
//! A request whose endpoint queue is empty runs its phases on the caller's
//! thread, under the engine's lock, before the call returns; a queued one
//! runs on whichever thread steps the engine when what it waits for
//! arrives (the worker, or the caller of a progress call). Either way the
//! outcome is the same: the phases of an endpoint's requests are
//! serialised, a QP operation's result is fed back before anything else
//! runs, and each phase's effects (the QP's new state, its flush
//! completions, the MADs it sent) are in place before the request's
//! completion is delivered — at the end of the step, after its packets.
//!
//! ## The machine and the core
//!
//! The rules live in [`Endpoints`], the sans-IO request machine: a value
//! with no sockets, threads or clock (quinn-proto style). The application's
//! calls and the CM's events go in as method calls taking `now` and the
//! NIC's `CmAgent` (which the machine drives directly: it is sans-IO too),
//! and what the core must do comes out of [`Endpoints::poll_action`] as an
//! [`Action`], in order:
//!
//! | Action | The core |
//! |---|---|
//! | `Qp { request, qp, op, span }` | runs `op` (INIT check, to RTS, to ERR) on QP `qp` — the QP with that number *and* generation, else none — inside `span`, and feeds the result back with `handle_qp_result` before anything else; the request's endpoint waits for it |
//! | `Complete { request, outcome }` | delivers the outcome once the step's packets are out |
//! | `ReserveQpn(qpn)` / `ReleaseQpn(qpn)` | keeps the QPN from reuse through time-wait, and frees it |
//!
//! Requests are named by a [`RequestId`]; the completion handles the
//! application waits on ([`EpPending`]) stay with the core in a side table
//! keyed by it, so the machine's outcomes ([`Outcome`]) are plain values a
//! test can compare. The core's part is that table (`table.rs`) and, in
//! `crate::nic::endpoints`, the action pump and the QP operations. The unit
//! tests drive the machine against two `CmAgent`s wired in memory and a
//! table of fake QPs instead, and the whole-connection simulation
//! (`tests/sim_connection.rs`) against real RC QPs on a faulty virtual
//! network; both are cores of their own, which is why the machine is
//! public.
//!
//! ## Endpoint states
//!
//! | State | Reached by | Leaves on |
//! |---|---|---|
//! | Idle | creation; Cancel of a Connect/Accept | Listen, Connect's REQ, a handed-over request |
//! | Listening | Listen | (destroy) |
//! | Connecting | Connect's REQ | REP → RepReceived; REJ, timeout → Closed |
//! | Resolving | Resolve's SIDR_REQ | SIDR_REP, timeout, ICMP → Closed |
//! | RepReceived | the REP | CompleteConnect → Connected; Reject, REJ → Closed |
//! | RequestReceived | GetConnectionRequest | Accept's REP → Accepting; a SIDR request's SIDR_REP (`accept_ud`), Reject → Closed |
//! | Accepting | Accept's REP | RTU → Connected; DREQ → PeerDisconnected; REJ, timeout → Closed |
//! | Connected | RTU sent or received | DREQ → PeerDisconnected; our DREQ → Disconnecting; REJ → Broken |
//! | Broken | the peer's REJ on an established connection | Disconnect (flush only) → Closed |
//! | PeerDisconnected | the peer's DREQ (NotifyDisconnect completes) | Disconnect (DREP) → Closed |
//! | Disconnecting | our DREQ | DREP, DREQ timeout → Closed; crossing DREQ → PeerDisconnected |
//! | Closed | the end of any of the above | Connect again |
//!
//! **Tracing.** Each request is a `debug` span (`ep_connect`,
//! `ep_complete_connect`, `ep_accept`, `ep_disconnect`,
//! `ep_notify_disconnect`, `ep_get_request`, `ep_resolve`) with the endpoint id `ep` and,
//! for the four that name one, the QP number `qp`, open from the call until
//! the request completes (inside the NIC's `nic` span, field `local`);
//! its phases are child spans `cm_phase` and `qp_phase`, in the order they
//! run. CM events and CM state transitions (`from`, `to`) are `debug` events
//! with the `ep` field; CM timeouts are `warn`.

mod events;
mod machine;
mod request;
mod table;
mod types;
mod waiters;

#[cfg(test)]
mod tests;

pub use machine::{Action, Endpoints, Outcome, QpError, QpOp, Refused, RequestId};
pub(crate) use table::EpTable;
pub use types::{
    AcceptArgs, ConnectArgs, ConnectInfo, EpError, EpInfo, EpPending, QpIdent, RequestInfo,
    SidrArgs, SidrInfo,
};
pub(crate) use waiters::Later;
