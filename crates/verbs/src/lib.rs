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
//! | [`Qp`] | [`Pd::create_qp`] | reliable connected queue pair |
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
//! and [`Sge`] in [`Mr`]'s; [`NotifyOn`] and [`Pending`] in [`Cq`]'s;
//! [`ConnectArgs`], [`AcceptArgs`], [`RequestInfo`], [`ConnectInfo`],
//! [`EpInfo`] and [`EpError`] in [`Endpoint`]'s; [`Progress`], [`Stats`],
//! [`Limits`] in [`Device`]'s and [`DeviceAttr`]'s.
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
//! let init = QpAttr { qp_state: QpState::Init, qp_access_flags: Access::ALL, ..QpAttr::default() };
//! qp.modify(&init, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS)?;
//! qp.post_recv(RecvWr::new(1, vec![mr.sge(0, 4096)]))?;
//! // Not connected yet: moving to ERR flushes the receive.
//! qp.to_error()?;
//! let wc = cq.wait_one(std::time::Duration::from_secs(10))?.expect("flushed receive");
//! assert_eq!((wc.wr_id, wc.status), (1, WcStatus::WrFlushErr));
//! # Ok::<(), VerbsError>(())
//! ```

#![warn(missing_docs)]

mod device;
mod ep;
mod memory;
mod observe;
mod qp;

pub use device::{Cq, Device, DeviceAttr, Pd};
pub use ep::{
    AcceptArgs, ConnectArgs, ConnectInfo, Endpoint, EpError, EpInfo, EpPending, RequestInfo,
};
pub use memory::{Mr, Mw};
pub use ndverbs_engine::config::Progress;
pub use ndverbs_engine::config::PCAP_ENV;
pub use ndverbs_engine::config::{stat_dir, STAT_ENV};
pub use ndverbs_engine::cq::{NotifyError, NotifyOn};
pub use ndverbs_engine::limits::{Limits, LIMITS};
pub use ndverbs_engine::nic::node_guid;
pub use ndverbs_engine::pending::Pending;
pub use ndverbs_engine::stats::{Stats, RXE_COUNTERS};
pub use ndverbs_proto::mem::{Access, SgList, Sge};
pub use ndverbs_proto::rc::{
    AddressVector, AttrMask, Counters as QpCounters, PathMtu, QpAttr, QpCaps, QpState, RecvWr,
    RemoteAddr, SendOp, SendWr, WcOpcode, WcQueue, WcStatus, WorkCompletion,
};
pub use qp::{Qp, QpId, QpInitAttr, Srq};

pub use ndverbs_engine::cq::ResizeError;
pub use ndverbs_engine::error::EngineError;
pub use ndverbs_engine::mr::MemError;
pub use ndverbs_proto::mem::AccessError;
pub use ndverbs_proto::rc::{ModifyError, PostError};

/// Errors of verbs calls. Nothing was done when a call returns one.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::*;
/// let dev = Device::open("127.92.12.1".parse().unwrap())?;
/// let pd = dev.alloc_pd()?;
/// let mr = pd.reg_mr(16, Access::LOCAL_WRITE)?;
/// // Outside the region: an access error, nothing copied.
/// match mr.read(10, &mut [0; 10]) {
///     Err(VerbsError::Access(e)) => println!("{e}"),
///     other => panic!("{other:?}"),
/// }
/// // A send on a QP that was never connected: the engine refuses it.
/// let cq = dev.create_cq(4)?;
/// let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq))?;
/// let err = qp.post_send(SendWr::new(1, SendOp::Send, vec![])).unwrap_err();
/// assert!(matches!(err, VerbsError::Engine(_)), "{err}");
/// // After removal only cleanup works.
/// dev.remove();
/// assert!(matches!(dev.create_cq(4), Err(VerbsError::DeviceRemoved)));
/// # Ok::<(), VerbsError>(())
/// ```
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    /// The device was removed: only cleanup works.
    #[error("device removed")]
    DeviceRemoved,
    /// A memory access outside a region or without the right.
    #[error(transparent)]
    Access(#[from] ndverbs_proto::mem::AccessError),
    /// From the engine (invalid state, full queue, bad argument, I/O, …).
    #[error(transparent)]
    Engine(EngineError),
}

impl From<EngineError> for VerbsError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Removed => VerbsError::DeviceRemoved,
            e => VerbsError::Engine(e),
        }
    }
}

/// Result of verbs calls.
///
/// # Example
///
/// ```
/// use ndverbs_verbs::{Device, Result};
/// fn open_pd(addr: &str) -> Result<ndverbs_verbs::Pd> {
///     let dev = Device::open(addr.parse().unwrap())?;
///     dev.alloc_pd()
/// }
/// assert!(open_pd("127.93.30.1").is_ok());
/// ```
pub type Result<T> = std::result::Result<T, VerbsError>;
