//! The InfiniBand connection manager (CM), sans-IO, speaking what Linux's
//! `ib_cm` and rdma_cm speak, so that rping, perftest `-R` and any rdma_cm
//! application on Soft-RoCE is a peer.
//!
//! ## What the CM does
//!
//! Two RC queue pairs can only talk once each knows the other's QP number,
//! first PSN, path MTU and read limits. The CM exchanges them in
//! *management datagrams* (MADs, 256 bytes, class 0x07) between the two
//! adapters' QP1 — on RoCEv2 a UD SEND_ONLY to QP 1 with Q_Key 0x80010000.
//! MADs are unreliable, so every request is retransmitted until answered.
//!
//! ```text
//!  active (client)                                       passive (server)
//!  connect ── REQ  (service ID, QPN, PSN, limits, data) ──►  listener: ConnectRequest
//!                                                             accept (QP → RTR/RTS first)
//!  RepReceived ◄── REP (QPN, PSN, limits, data) ───────────
//!  QP → RTR/RTS, complete_connect ── RTU ─────────────────►  Established
//!                     … RDMA traffic …
//!  disconnect ── DREQ (names the peer's QPN) ─────────────►  DreqReceived
//!                                                             disconnect
//!  DisconnectDone ◄── DREP ────────────────────────────────  DisconnectDone
//!  (both sides then wait out time-wait before reusing the QPN)
//! ```
//!
//! REJ refuses a REQ or REP (no listener: reason 8, the application said
//! no: 28, stale QP: 10, the active side gave up: 4); MRA ("message
//! received, answer will take a while") makes the peer wait longer instead
//! of retransmitting and eventually giving up. Each message names both ends
//! by *communication ID* (a random 32-bit number per connection and side);
//! the DREQ also names the receiver's QPN and is dropped if it does not
//! match.
//!
//! ## The pieces
//!
//! | file | job |
//! |---|---|
//! | `agent.rs` | [`CmAgent`]: endpoint table, application calls, timers, outputs |
//! | `recv.rs` | received MADs: matching, duplicates, stale connections, DREQ/DREP rules |
//! | `format.rs` | each message built field by field as Linux does |
//! | `state.rs` | [`CmState`], Linux's `ib_cm_state` |
//! | `config.rs` | [`CmConfig`], `cm_convert_to_ms`, `cm_ack_timeout`, the timer table |
//! | `ids.rs` | [`EndpointId`], unpredictable comm IDs, Linux's TID layout |
//! | `params.rs` | connect/accept parameters, the peer's, the QP attributes they imply |
//! | `event.rs` | [`CmEvent`] (and which are terminal), [`CmError`] |
//! | `sidr.rs` | service ID resolution for UD (SIDR_REQ/SIDR_REP): rdma_cm's `RDMA_PS_UDP` |
//! | `rdma_cm.rs` | service IDs, the 36-byte rdma_cm header, the flow label |
//! | `timers.rs`, `outbox.rs`, `endpoint.rs`, `counters.rs` | bookkeeping |
//!
//! ## Driving a `CmAgent`
//!
//! One agent per adapter (GID). As everywhere in this crate: inputs are
//! [`CmAgent::handle_mad`] (a MAD received on QP1 and its source address)
//! and [`CmAgent::handle_timeout`], plus the application calls (`listen`,
//! `connect`, `accept`, `complete_connect`, `reject`, `disconnect`,
//! `destroy`, `remove_device`). After any input drain
//! [`poll_transmit`](CmAgent::poll_transmit) (send each MAD to its address
//! from QP1), [`poll_event`](CmAgent::poll_event) and
//! [`poll_timeout`](CmAgent::poll_timeout).
//!
//! The CM never touches a QP: it knows the local QPN and PSN only as numbers
//! handed to it, and hands back [`QpSetup`] for the engine to apply. The
//! engine runs ND's phases around it: Accept = QP to RTR/RTS with
//! [`CmAgent::accept_qp_setup`], then [`CmAgent::accept`]; CompleteConnect =
//! QP to RTR/RTS from [`CmEvent::RepReceived`], then
//! [`CmAgent::complete_connect`]; Disconnect = [`CmAgent::disconnect`], wait
//! for [`CmEvent::DisconnectDone`], then QP to ERR.
//!
//! ## Disconnect (ND rules)
//!
//! `disconnect` sends a DREQ, or the DREP if the peer's DREQ already arrived;
//! it completes when a DREP arrives, the DREQ times out, or the DREP is sent.
//! A DREQ that arrives is only reported ([`CmEvent::DreqReceived`], ND's
//! NotifyDisconnect) — nothing is flushed and no DREP is sent until the
//! application disconnects. Crossing DREQs (both sides disconnect at once,
//! as ndconn and MS-MPI do on every connection) are normal: a DREQ that
//! arrives while ours is outstanding cancels our retransmission, and our
//! pending disconnect answers it with the DREP and completes.
//!
//! ## Compared with Linux
//!
//! Kept as Linux 6.1 does it (and checked against its captures byte for
//! byte): every REQ/REP/RTU/DREQ/DREP field, the TID layout (REQ and DREQ
//! form `hi_tid << 32 | comm ID as seen by a little-endian CPU`, the others
//! echo), the timers and retry counts of [`config`](CmConfig), MRA with
//! service timeout 24 on duplicates while the application thinks (rdma_cm's
//! delayed MRA), the REJ comm-ID rules, REJ(timeout, ARI = GUID) when an
//! endpoint in REQ_SENT is destroyed, **no REJ when REQ retries run out**
//! (`IB_CM_REQ_ERROR` just returns to IDLE; the passive side's REQ_RCVD
//! endpoint is left to its application), DREP for DREQs naming no
//! connection, the stale-connection rule, `cm_destroy_id`'s table.
//!
//! Different, on purpose:
//!
//! * a duplicate REQ after our REP gets the REP again at once (Linux waits
//!   for its REP timer);
//! * a stale REP fails our connect at once (Linux lets the REQ time out);
//! * a DREP in DREQ_RCVD is ignored, so that the application's disconnect
//!   still sends the DREP the peer waits for (ND rule D6);
//! * a DREQ for a connection back in IDLE, and one in time-wait, is answered
//!   with a DREP echoing that DREQ's TID;
//! * passive checks: REJ 12 if the REQ's remote GID is not ours, REJ 9 for a
//!   transport other than RC, REJ 26 for an invalid MTU; the rdma_cm header
//!   checks accept loopback sources (ndverbs' own tests use 127.0.0.x);
//! * not implemented: LAP/APR (Linux refuses them on RoCE too),
//!   alternate paths, the late-2024 MAD layer's exponential backoff.
//!
//! ## Example: two agents back to back
//!
//! ```
//! use ndverbs_proto::cm::*;
//! use ndverbs_proto::time::Instant;
//! use ndverbs_wire::cma;
//!
//! let (a_ip, b_ip) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
//! let mut a = CmAgent::new(CmConfig::new(a_ip, 0xa, 1));
//! let mut b = CmAgent::new(CmConfig::new(b_ip, 0xb, 2));
//! let now = Instant::ZERO;
//! // Deliver everything queued, both ways, until quiet.
//! fn pump(now: Instant, x: &mut CmAgent, y: &mut CmAgent) {
//!     loop {
//!         let (xa, ya) = (x.config().local_addr, y.config().local_addr);
//!         let mut quiet = true;
//!         while let Some(t) = x.poll_transmit() { y.handle_mad(now, xa, &t.mad); quiet = false; }
//!         while let Some(t) = y.poll_transmit() { x.handle_mad(now, ya, &t.mad); quiet = false; }
//!         if quiet { break }
//!     }
//! }
//!
//! let sid = cma::service_id(cma::RDMA_PS_TCP, 7174);
//! b.listen(sid).unwrap();
//! let mut p = ConnectParams::new(sid, b_ip, 0x11, 0x464b);
//! p.private_data = b"hello".to_vec();
//! let ea = a.connect(now, p).unwrap();
//! pump(now, &mut a, &mut b);
//!
//! let Some(CmEvent::ConnectRequest(req)) = b.poll_event() else { panic!() };
//! assert_eq!(&req.peer.private_data[..5], b"hello");
//! let eb = req.endpoint;
//! let qp_b = b.accept(now, eb, AcceptParams::new(0x22, 0x7d7d7f)).unwrap();
//! assert_eq!((qp_b.dest_qpn, qp_b.sq_psn, qp_b.rq_psn), (0x11, 0x464b, 0x7d7d7f));
//! pump(now, &mut a, &mut b);
//!
//! let Some(CmEvent::RepReceived { qp, .. }) = a.poll_event() else { panic!() };
//! assert_eq!((qp.dest_qpn, qp.sq_psn, qp.rq_psn), (0x22, 0x7d7d7f, 0x464b));
//! a.complete_connect(now, ea, &[]).unwrap();
//! pump(now, &mut a, &mut b);
//! assert_eq!(b.poll_event(), Some(CmEvent::Established { endpoint: eb }));
//!
//! // Both disconnect at the same instant: crossing DREQs.
//! assert_eq!(a.disconnect(now, ea).unwrap(), DisconnectStarted::DreqSent);
//! assert_eq!(b.disconnect(now, eb).unwrap(), DisconnectStarted::DreqSent);
//! pump(now, &mut a, &mut b);
//! assert_eq!(a.poll_event(), Some(CmEvent::DreqReceived { endpoint: ea }));
//! assert_eq!(a.poll_event(),
//!     Some(CmEvent::DisconnectDone { endpoint: ea, how: DisconnectHow::DrepSent }));
//! assert_eq!(a.state(ea), Some(CmState::Timewait));
//! ```

mod agent;
mod config;
mod counters;
mod endpoint;
mod event;
mod format;
mod ids;
mod outbox;
mod params;
mod rdma_cm;
mod recv;
mod requests;
mod sidr;
mod state;
mod timers;

pub use agent::CmAgent;
pub use config::{cm_ack_timeout, cm_convert_to_ms, CmConfig};
pub use counters::CmCounters;
pub use event::{CmError, CmEvent, ConnectRequest, DisconnectHow, DisconnectStarted};
pub use ids::{form_tid, EndpointId};
pub use outbox::Transmit;
pub use params::{AcceptParams, ConnectParams, PeerParams, QpSetup};
pub use rdma_cm::{flow_label, max_req_private_data, uses_cma_header};
pub use requests::{AcceptArgs, ConnectArgs, ConnectInfo, EpInfo, RequestInfo};
pub use sidr::{max_sidr_private_data, sidr_status, SidrAnswer, SidrArgs, SidrInfo, SidrParams};
pub use state::CmState;
