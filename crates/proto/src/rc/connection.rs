//! [`RcConnection`]: the RESET → INIT → RTR → RTS ladder of one side of an
//! RC connection, written once.
//!
//! Connecting an RC QP is three `modify` calls, each with its own required
//! attributes (see [`transition_rules`](super::transition_rules)): INIT names
//! the P_Key, port and the rights the peer gets; RTR names the peer (path,
//! QP number, the PSN it starts from, how many READ/atomics it may have
//! outstanding here); RTS names this side's first PSN and its retry rules.
//! An `RcConnection` holds those values and gives each step as the
//! `(QpAttr, AttrMask)` pair a `modify` takes, whether the values were
//! exchanged out of band (tests, perftest-style tools) or negotiated by the
//! CM ([`QpSetup`]).

use super::{transition_rules, AddressVector, AttrMask, PathMtu, QpAttr, QpState};
use crate::cm::QpSetup;
use crate::mem::Access;
use ndverbs_wire::cma::gid_of;
use std::net::IpAddr;

/// One side's view of an RC connection: everything the INIT, RTR and RTS
/// steps set. Fields are public; [`RcConnection::new`] fills in defaults
/// that work between any two RoCE devices.
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{QpCaps, QpState, RcConnection, RcQp};
/// // A's QP 0x11 talks to B's QP 0x22; each expects the PSN the other sends from.
/// let (mut a, mut b) = (RcQp::new(0x11, 1, QpCaps::default()), RcQp::new(0x22, 1, QpCaps::default()));
/// let to_b = RcConnection { rq_psn: 500, sq_psn: 100, ..RcConnection::new(0x22) };
/// let to_a = RcConnection { rq_psn: 100, sq_psn: 500, ..RcConnection::new(0x11) };
/// for (attr, mask) in to_b.steps() {
///     a.modify(&attr, mask)?;
/// }
/// for (attr, mask) in to_a.steps() {
///     b.modify(&attr, mask)?;
/// }
/// assert_eq!((a.state(), a.query().sq_psn, a.query().dest_qp_num), (QpState::Rts, 100, 0x22));
/// # Ok::<(), ndverbs_proto::rc::ModifyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RcConnection {
    /// The path to the peer: its GID, hop limit, traffic class, flow label.
    pub av: AddressVector,
    /// The peer's QP number.
    pub dest_qpn: u32,
    /// First PSN this QP expects: the peer's first send PSN.
    pub rq_psn: u32,
    /// First PSN this QP sends.
    pub sq_psn: u32,
    /// Path MTU.
    pub path_mtu: PathMtu,
    /// Remote operations the peer may run on this QP.
    pub access: Access,
    /// READ/atomics this QP may have outstanding as requester.
    pub max_rd_atomic: u8,
    /// READ/atomics the peer may have outstanding here.
    pub max_dest_rd_atomic: u8,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout.
    pub timeout: u8,
    /// Transport retries (7 = infinite).
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RNR timer code this QP's RNR NAKs carry.
    pub min_rnr_timer: u8,
}

impl RcConnection {
    /// A connection to QP `dest_qpn`, with PSN 0 both ways and a zero GID.
    /// The retry rules are perftest's and ibv_rc_pingpong's: ACK timeout 14
    /// (about 67 ms), 7 retries of each kind (7 = infinite), RNR timer 12
    /// (0.64 ms). The rest: 1024-byte MTU (every RoCE device has it), the
    /// peer may WRITE, READ and run atomics (memory regions still decide
    /// what it reaches), 16 READ/atomics outstanding each way (pipelined
    /// READs without exceeding what rxe offers), hop limit 64.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::rc::{AttrMask, PathMtu, RcConnection};
    /// let c = RcConnection::new(0x22);
    /// assert_eq!((c.path_mtu, c.max_rd_atomic, c.timeout, c.retry_cnt), (PathMtu::Mtu1024, 16, 14, 7));
    /// let (attr, mask) = c.rtr();
    /// assert_eq!(attr.dest_qp_num, 0x22);
    /// assert!(mask.contains(AttrMask::DEST_QPN | AttrMask::RQ_PSN));
    /// ```
    pub fn new(dest_qpn: u32) -> Self {
        RcConnection {
            av: AddressVector {
                hop_limit: 64,
                ..AddressVector::default()
            },
            dest_qpn,
            rq_psn: 0,
            sq_psn: 0,
            path_mtu: PathMtu::Mtu1024,
            access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
        }
    }

    /// The same connection towards the peer at `addr` (its RoCEv2 GID: the
    /// IPv4-mapped address for IPv4).
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::rc::RcConnection;
    /// let c = RcConnection::new(0x22).to_peer("192.0.2.7".parse().unwrap());
    /// assert_eq!(c.av.dgid[10..], [0xff, 0xff, 192, 0, 2, 7]);
    /// ```
    pub fn to_peer(mut self, addr: IpAddr) -> Self {
        self.av.dgid = gid_of(addr).octets();
        self
    }

    /// Every attribute the three steps set, with `qp_state` = `state`.
    fn attr(&self, state: QpState) -> QpAttr {
        QpAttr {
            qp_state: state,
            path_mtu: self.path_mtu,
            dest_qp_num: self.dest_qpn,
            rq_psn: self.rq_psn,
            sq_psn: self.sq_psn,
            qp_access_flags: self.access,
            pkey_index: 0,
            port_num: 1,
            av: self.av,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            min_rnr_timer: self.min_rnr_timer,
            max_rd_atomic: self.max_rd_atomic,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            ..QpAttr::default()
        }
    }

    /// RESET → INIT: P_Key index 0, port 1, the peer's rights.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::rc::{QpCaps, QpState, RcConnection, RcQp};
    /// let mut qp = RcQp::new(1, 0, QpCaps::default());
    /// let (attr, mask) = RcConnection::new(2).init();
    /// qp.modify(&attr, mask)?;
    /// assert_eq!(qp.state(), QpState::Init);
    /// # Ok::<(), ndverbs_proto::rc::ModifyError>(())
    /// ```
    pub fn init(&self) -> (QpAttr, AttrMask) {
        self.step(QpState::Reset, QpState::Init)
    }

    /// INIT → RTR: the path, MTU, peer QP, first expected PSN, READ/atomic
    /// resources for the peer and the RNR timer.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::rc::{QpCaps, QpState, RcConnection, RcQp};
    /// let mut qp = RcQp::new(1, 0, QpCaps::default());
    /// let c = RcConnection { rq_psn: 0x1234, ..RcConnection::new(2) };
    /// for (attr, mask) in [c.init(), c.rtr()] {
    ///     qp.modify(&attr, mask)?;
    /// }
    /// assert_eq!((qp.state(), qp.query().rq_psn), (QpState::Rtr, 0x1234));
    /// # Ok::<(), ndverbs_proto::rc::ModifyError>(())
    /// ```
    pub fn rtr(&self) -> (QpAttr, AttrMask) {
        self.step(QpState::Init, QpState::Rtr)
    }

    /// RTR → RTS: the first PSN to send, the ACK timeout, both retry counts
    /// and the READ/atomic limit as requester.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::rc::{AttrMask, RcConnection};
    /// let (attr, mask) = RcConnection { sq_psn: 77, ..RcConnection::new(2) }.rts();
    /// assert_eq!(attr.sq_psn, 77);
    /// assert!(mask.contains(AttrMask::SQ_PSN | AttrMask::TIMEOUT | AttrMask::MAX_QP_RD_ATOMIC));
    /// ```
    pub fn rts(&self) -> (QpAttr, AttrMask) {
        self.step(QpState::Rtr, QpState::Rts)
    }

    /// One step of the ladder: the attributes for `to`, and a mask of
    /// exactly what the transition table requires for `from` → `to`.
    fn step(&self, from: QpState, to: QpState) -> (QpAttr, AttrMask) {
        let (required, _) = transition_rules(from, to).expect("the ladder's steps are legal");
        (self.attr(to), AttrMask::STATE | required)
    }

    /// The three steps, RESET → INIT → RTR → RTS, in order.
    ///
    /// # Example
    ///
    /// ```
    /// use ndverbs_proto::rc::{QpState, RcConnection};
    /// let states = RcConnection::new(2).steps().map(|(attr, _)| attr.qp_state);
    /// assert_eq!(states, [QpState::Init, QpState::Rtr, QpState::Rts]);
    /// ```
    pub fn steps(&self) -> [(QpAttr, AttrMask); 3] {
        [self.init(), self.rtr(), self.rts()]
    }
}

/// What the CM negotiated: the peer and its path, the PSNs, MTU,
/// READ/atomic depths and retry rules. The rights stay at
/// [`RcConnection::new`]'s: under the CM the application moved the QP to
/// INIT itself, and only `rtr()` and `rts()` apply. An unknown MTU code
/// falls back to 1024 bytes, which every RoCE device supports.
///
/// # Example
///
/// ```
/// use ndverbs_proto::cm::*;
/// use ndverbs_proto::rc::{PathMtu, RcConnection};
/// use ndverbs_proto::time::Instant;
/// let (mut a, mut b) = (CmAgent::new(CmConfig::new("10.0.0.1".parse().unwrap(), 0xa, 1)),
///                       CmAgent::new(CmConfig::new("10.0.0.2".parse().unwrap(), 0xb, 2)));
/// b.listen(0x1234)?;
/// a.connect(Instant::ZERO, ConnectParams::new(0x1234, b.config().local_addr, 0x11, 0x100))?;
/// while let Some(t) = a.poll_transmit() {
///     b.handle_mad(Instant::ZERO, a.config().local_addr, &t.mad);
/// }
/// let Some(CmEvent::ConnectRequest(req)) = b.poll_event() else { panic!() };
/// // What B's QP moves to RTR and RTS with before its REP goes out.
/// let setup = b.accept_qp_setup(req.endpoint, &AcceptParams::new(0x22, 0x200))?;
/// let c = RcConnection::from(&setup);
/// assert_eq!((c.dest_qpn, c.rq_psn, c.sq_psn, c.path_mtu), (0x11, 0x200, 0x100, PathMtu::Mtu1024));
/// assert_eq!(c.av, RcConnection::new(0).to_peer(a.config().local_addr).av);
/// # Ok::<(), CmError>(())
/// ```
impl From<&QpSetup> for RcConnection {
    fn from(s: &QpSetup) -> Self {
        let mut c = RcConnection {
            rq_psn: s.rq_psn,
            sq_psn: s.sq_psn,
            path_mtu: PathMtu::from_enum(s.path_mtu).unwrap_or(PathMtu::Mtu1024),
            max_rd_atomic: s.max_rd_atomic,
            max_dest_rd_atomic: s.max_dest_rd_atomic,
            timeout: s.timeout,
            retry_cnt: s.retry_cnt,
            rnr_retry: s.rnr_retry,
            min_rnr_timer: s.min_rnr_timer,
            ..RcConnection::new(s.dest_qpn).to_peer(s.remote_addr)
        };
        c.av.hop_limit = s.hop_limit;
        c.av.flow_label = s.flow_label;
        c.av.traffic_class = s.traffic_class;
        c
    }
}
