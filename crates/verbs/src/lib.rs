//! # ndverbs-verbs: the verbs surface
//!
//! Objects an RDMA programmer knows from ibverbs and WinVerbs, as owned Rust
//! handles over the ndverbs engine:
//!
//! | Object | Made by | What it is |
//! |---|---|---|
//! | [`Device`] | [`Device::open`] | one local IP address: a RoCEv2 port on UDP 4791 |
//! | [`Pd`] | [`Device::alloc_pd`] | protection domain: memory and QPs that may meet |
//! | [`Mr`] | [`Pd::reg_mr`] | registered memory with an L_Key/R_Key |
//! | [`Mw`] | [`Pd::alloc_mw`] | memory window: a narrower grant over an MR |
//! | [`Cq`] | [`Device::create_cq`] | completion queue, pollable and waitable (fd) |
//! | [`Srq`] | [`Pd::create_srq`] | shared receive queue |
//! | [`Qp`] | [`Pd::create_qp`] | queue pair: reliable connected, or unreliable datagram ([`QpType::Ud`]) |
//! | [`Endpoint`] | [`Endpoint::new`] | connection endpoint: the IB CM side of a connection |
//!
//! **Layers.** This crate is the verbs layer of ndverbs: below it the engine
//! (`ndverbs-engine`: one UDP socket on port 4791 per local address, timers,
//! object tables), the sans-IO protocol state machines (`ndverbs-proto`: RC
//! requester/responder, the connection manager) and the bytes
//! (`ndverbs-wire`); above it the NetworkDirect surface (`ndverbs-nd`). A
//! device is a local IP address; what it speaks is RoCEv2, so its peer can be
//! Linux Soft-RoCE (rxe) as well as another ndverbs.
//!
//! **Objects.** Handles keep what they depend on alive (a QP holds its PD and
//! CQs), and dropping a handle destroys the object — a QP's outstanding
//! requests are flushed to its CQs first, so every request completes exactly
//! once. Each type's documentation has an example that runs on loopback.
//! Work requests and completions are the protocol core's types, re-exported
//! here and shown at work in these examples: [`SendWr`], [`SendOp`],
//! [`RemoteAddr`], [`RecvWr`], [`WorkCompletion`], [`WcStatus`] and
//! [`WcOpcode`] in [`Qp`]'s and [`Cq`]'s; [`QpAttr`], [`AttrMask`],
//! [`QpState`] in [`Qp`]'s (RESET → INIT → RTR → RTS by hand); [`Access`]
//! and [`Sge`] in [`Mr`]'s; [`UdDest`], [`UdSendWr`] and [`GRH_LEN`] in
//! [`QpType::Ud`]'s (a datagram each way); [`NotifyOn`] and [`Pending`] in [`Cq`]'s;
//! [`ConnectArgs`], [`AcceptArgs`], [`RequestInfo`], [`ConnectInfo`] and
//! [`EpInfo`] in [`Endpoint`]'s; [`DeviceConfig`], [`Progress`], [`Stats`]
//! and [`DeviceLimits`] in [`Device`]'s and [`DeviceAttr`]'s.
//!
//! **The boundary.** This crate is the API; the engine underneath is not
//! part of it. No engine type appears in a signature here, and nothing
//! above (the ND surface, the tools) names one: what they need of the
//! engine is a method of [`Device`]. Configuration is an argument
//! ([`DeviceConfig`]); the library reads no environment variable unless the
//! caller asks ([`DeviceConfig::from_env`]).
//!
//! **Errors.** Every call and request fails with one type, [`Error`]: an
//! [`ErrorKind`] to branch on (with the errno ibverbs would give,
//! [`Error::errno`]), the call that failed in its message, and the detail
//! where a caller can use it (the refused post or QP transition, the
//! memory access, the peer's rejection, the system error).
//!
//! **Connections.** A QP is connected either by hand with [`Qp::modify`]
//! (what perftest does after exchanging QPNs, PSNs and GIDs over TCP) or by
//! an [`Endpoint`], which speaks the IB CM (rdma_cm compatible) and moves a
//! QP given in INIT through RTR and RTS. Disconnecting follows ND's rules:
//! [`Endpoint::disconnect`] sends a DREQ — or the DREP when the peer's DREQ
//! already arrived — completes when the DREP arrives, the DREQ times out or
//! the DREP is sent, and moves the QP to ERR, which flushes every
//! outstanding request. [`Endpoint::notify_disconnect`] is optional: it
//! completes when the peer's DREQ arrives and flushes nothing (an incoming
//! DREQ never flushes); both sides call `disconnect`.
//!
//! ```
//! use ndverbs_verbs::*;
//! let dev = Device::open("127.92.0.1".parse().unwrap())?;
//! let pd = dev.alloc_pd()?;
//! let cq = dev.create_cq(256)?;
//! let mr = pd.reg_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq))?;
//! qp.to_init(Access::ALL)?;
//! qp.post_recv(RecvWr::new(1, vec![mr.sge(0, 4096)]))?;
//! // Not connected yet: moving to ERR flushes the receive.
//! qp.to_error()?;
//! let wc = cq.wait_one(std::time::Duration::from_secs(10))?.expect("flushed receive");
//! assert_eq!((wc.wr_id, wc.status), (1, WcStatus::WrFlushErr));
//! # Ok::<(), Error>(())
//! ```

#![warn(missing_docs)]

mod config;
mod device;
mod engine;
mod ep;
mod error;
mod memory;
mod netif;
mod observe;
pub mod owned;
mod pending;
mod qp;

pub use config::{
    DeviceConfig, FaultConfig, Progress, CC_ENV, FAULTS_ENV, METRICS_ENV, PCAP_ENV, SHARE_ENV,
    SPIN_ENV, STAT_ENV,
};
pub use device::{node_guid, Cq, CqMark, Device, DeviceAttr, DeviceLimits, NotifyOn, Pd, LIMITS};
pub use ep::{
    AcceptArgs, ConnectArgs, ConnectInfo, Endpoint, EpInfo, QpSetup, RequestInfo, SidrArgs,
    SidrInfo,
};
pub use error::{Error, ErrorKind, Rejection, Result};
pub use memory::{Mr, Mw};
pub use netif::DeviceInfo;
pub use observe::{
    openmetrics, process_exists, stat_dir, MetricSeries, Stats, OPENMETRICS_CONTENT_TYPE,
    RXE_COUNTERS,
};
pub use owned::{AlignedBuf, OwnedMr, StableBuffer};
pub use pending::Pending;
pub use qp::{Qp, QpId, QpInitAttr, QpType, Srq};

pub use ndverbs_proto::cm::{CmError, CmState};
pub use ndverbs_proto::mem::{Access, AccessError, SgList, Sge};
pub use ndverbs_proto::rc::{
    AddressVector, AttrMask, Counters as QpCounters, ModifyError, PathMtu, PostError, QpAttr,
    QpCaps, QpState, RcConnection, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcQueue, WcStatus,
    WorkCompletion,
};
pub use ndverbs_proto::ud::{UdDest, UdSendWr, GRH_LEN};
