//! QP states, attributes and the legal transitions between states.
//!
//! An RC QP is created in RESET and walked up by `modify` calls, each naming the
//! new state and the attributes it sets (an [`AttrMask`]), exactly as
//! `ibv_modify_qp` does:
//!
//! ```text
//!  RESET ──(pkey, port, access)──► INIT ──(av, mtu, dest qpn, rq psn,
//!                                          max_dest_rd_atomic, min_rnr_timer)──► RTR
//!  RTR ──(sq psn, timeout, retry_cnt, rnr_retry, max_rd_atomic)──► RTS ◄──► SQD
//!  any state ──► RESET, any state but RESET ──► ERR
//! ```
//!
//! Each transition has *required* attributes (all must be in the mask) and
//! *optional* ones (may be); anything else in the mask is refused. The table is
//! the IBTA's (spec vol. 1 §11.2.4.2, as coded in the kernel's
//! `ib_modify_qp_is_ok`) restricted to RC, plus ndverbs' one extension,
//! [`AttrMask::UDP_SPORT`]. Errors name the transition and the offending
//! attribute.

use crate::mem::Access;
use std::fmt;

/// QP states (IBTA).
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{AttrMask, QpAttr, QpCaps, QpState, RcConnection, RcQp};
/// let mut qp = RcQp::new(1, 0, QpCaps::default());
/// assert_eq!(qp.state(), QpState::Reset);
/// // Any state may go to ERR (except RESET) or back to RESET.
/// let to_err = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
/// assert!(qp.modify(&to_err, AttrMask::STATE).is_err()); // RESET -> ERR is illegal
/// let (init, mask) = RcConnection::new(2).init();
/// qp.modify(&init, mask)?;
/// qp.modify(&to_err, AttrMask::STATE)?;
/// assert_eq!(qp.state(), QpState::Err);
/// # Ok::<(), ndverbs_proto::rc::ModifyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum QpState {
    /// Just created or reset: nothing happens.
    #[default]
    Reset,
    /// Initialised: receives may be posted; no traffic.
    Init,
    /// Ready to receive: the responder works, the requester does not.
    Rtr,
    /// Ready to send: everything works.
    Rts,
    /// Send queue drain: started requests finish, new ones wait.
    Sqd,
    /// Send queue error (UC/UD only; not entered by RC).
    Sqe,
    /// Error: every request is flushed, nothing is sent.
    Err,
}

/// Path MTU (IBTA enum values 1..5).
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::PathMtu;
/// assert_eq!(PathMtu::Mtu1024.bytes(), 1024);
/// assert_eq!(PathMtu::from_enum(5), Some(PathMtu::Mtu4096)); // IBTA encoding 1..=5
/// assert_eq!(PathMtu::from_enum(6), None);
/// // rxe on a 1500-byte Ethernet link: netdev MTU minus 80 bytes of headers.
/// assert_eq!(PathMtu::at_most(1500 - 80), Some(PathMtu::Mtu1024));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum PathMtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes (rxe on a 1500-byte link).
    #[default]
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes (rxe on a 9000-byte link).
    Mtu4096 = 5,
}

impl PathMtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// From the IBTA enum value.
    pub fn from_enum(v: u8) -> Option<PathMtu> {
        Some(match v {
            1 => PathMtu::Mtu256,
            2 => PathMtu::Mtu512,
            3 => PathMtu::Mtu1024,
            4 => PathMtu::Mtu2048,
            5 => PathMtu::Mtu4096,
            _ => return None,
        })
    }

    /// The largest IB MTU not above `bytes` (rxe: netdev MTU − 80), if any.
    pub fn at_most(bytes: usize) -> Option<PathMtu> {
        [
            PathMtu::Mtu4096,
            PathMtu::Mtu2048,
            PathMtu::Mtu1024,
            PathMtu::Mtu512,
            PathMtu::Mtu256,
        ]
        .into_iter()
        .find(|m| m.bytes() as usize <= bytes)
    }
}

/// Where the peer is (the primary path). The protocol core does not use it;
/// the engine does, to address packets.
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{AddressVector, QpAttr};
/// use std::net::Ipv4Addr;
/// // RoCEv2 over IPv4: the destination GID is the IPv4-mapped IPv6 address.
/// let peer = Ipv4Addr::new(192, 0, 2, 7);
/// let av = AddressVector { dgid: peer.to_ipv6_mapped().octets(), hop_limit: 64, ..AddressVector::default() };
/// let attr = QpAttr { av, ..QpAttr::default() };
/// assert_eq!(attr.av.dgid[10..], [0xff, 0xff, 192, 0, 2, 7]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AddressVector {
    /// Destination GID (IPv4-mapped `::ffff:a.b.c.d` or an IPv6 address).
    pub dgid: [u8; 16],
    /// Index of the local GID to send from.
    pub sgid_index: u8,
    /// IP hop limit / TTL.
    pub hop_limit: u8,
    /// IP traffic class / TOS.
    pub traffic_class: u8,
    /// Flow label (20 bits); also seeds the UDP source port.
    pub flow_label: u32,
    /// Service level.
    pub sl: u8,
}

/// Which attributes a `modify` sets (ibverbs `IBV_QP_*` bit values).
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{transition_rules, AttrMask, QpState};
/// let mask = AttrMask::STATE | AttrMask::PATH_MTU;
/// assert!(mask.contains(AttrMask::PATH_MTU) && !mask.contains(AttrMask::AV));
/// assert_eq!(mask.minus(AttrMask::STATE), AttrMask::PATH_MTU);
/// assert_eq!(AttrMask::DEST_QPN.name(), "dest_qp_num");
/// // What INIT -> RTR needs, as ibverbs names it.
/// let (required, _optional) = transition_rules(QpState::Init, QpState::Rtr).unwrap();
/// assert!(required.contains(AttrMask::DEST_QPN | AttrMask::RQ_PSN));
/// assert_eq!(required.to_string(), "av|path_mtu|rq_psn|min_rnr_timer|max_dest_rd_atomic|dest_qp_num");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AttrMask(u32);

/// Defines each attribute once: its `IBV_QP_*` bit and the name ibverbs
/// gives it (for [`AttrMask::name`] and the `Display` of a mask).
macro_rules! attributes {
    ($($(#[$doc:meta])* $konst:ident = $bit:literal, $name:literal;)*) => {
        impl AttrMask {
            $($(#[$doc])* pub const $konst: AttrMask = AttrMask(1 << $bit);)*

            const NAMED: &'static [(AttrMask, &'static str)] = &[$((AttrMask::$konst, $name)),*];
        }
    };
}

attributes! {
    /// `qp_state`: the target state.
    STATE = 0, "qp_state";
    /// `cur_qp_state`: the caller's idea of the current state (checked).
    CUR_STATE = 1, "cur_qp_state";
    /// `qp_access_flags`.
    ACCESS_FLAGS = 3, "qp_access_flags";
    /// `pkey_index`.
    PKEY_INDEX = 4, "pkey_index";
    /// `port_num`.
    PORT = 5, "port_num";
    /// `qkey`: the Q_Key of a UD QP (what it accepts, and what it sends
    /// when a work request's Q_Key has its top bit set).
    QKEY = 6, "qkey";
    /// `av`: the primary path.
    AV = 7, "av";
    /// `path_mtu`.
    PATH_MTU = 8, "path_mtu";
    /// `timeout`: local ACK timeout exponent.
    TIMEOUT = 9, "timeout";
    /// `retry_cnt`.
    RETRY_CNT = 10, "retry_cnt";
    /// `rnr_retry`.
    RNR_RETRY = 11, "rnr_retry";
    /// `rq_psn`: first PSN the responder expects.
    RQ_PSN = 12, "rq_psn";
    /// `max_rd_atomic`: outstanding READ/atomics as requester.
    MAX_QP_RD_ATOMIC = 13, "max_rd_atomic";
    /// `min_rnr_timer`: the timer code this QP's RNR NAKs carry.
    MIN_RNR_TIMER = 15, "min_rnr_timer";
    /// `sq_psn`: first PSN the requester sends.
    SQ_PSN = 16, "sq_psn";
    /// `max_dest_rd_atomic`: READ/atomics kept as responder resources.
    MAX_DEST_RD_ATOMIC = 17, "max_dest_rd_atomic";
    /// `dest_qp_num`.
    DEST_QPN = 20, "dest_qp_num";
    /// ndverbs extension: `udp_sport` (otherwise derived as rxe does).
    UDP_SPORT = 31, "udp_sport";
}

impl AttrMask {
    /// No attributes.
    pub const NONE: AttrMask = AttrMask(0);

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// A mask from raw bits (unknown bits are kept and refused by `modify`).
    pub const fn from_bits(bits: u32) -> AttrMask {
        AttrMask(bits)
    }

    /// True if every attribute of `other` is in `self`.
    pub const fn contains(self, other: AttrMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// Union.
    pub const fn union(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 | other.0)
    }

    /// Attributes in `self` but not in `other`.
    pub const fn minus(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 & !other.0)
    }

    /// True if empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The lowest attribute in the mask.
    pub fn first(self) -> Option<AttrMask> {
        (self.0 != 0).then(|| AttrMask(self.0 & self.0.wrapping_neg()))
    }

    /// The name of a single attribute (`"unknown"` for undefined bits).
    pub fn name(self) -> &'static str {
        Self::NAMED
            .iter()
            .find(|(m, _)| *m == self)
            .map_or("unknown", |(_, n)| n)
    }
}

impl std::ops::BitOr for AttrMask {
    type Output = AttrMask;
    fn bitor(self, rhs: AttrMask) -> AttrMask {
        self.union(rhs)
    }
}

impl fmt::Debug for AttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = *self;
        let mut first = true;
        while let Some(bit) = rest.first() {
            if !first {
                f.write_str("|")?;
            }
            first = false;
            match bit.name() {
                "unknown" => write!(f, "0x{:x}", bit.0)?,
                n => f.write_str(n)?,
            }
            rest = rest.minus(bit);
        }
        if first {
            f.write_str("NONE")?;
        }
        Ok(())
    }
}

impl fmt::Display for AttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// QP attributes (the fields of `ibv_qp_attr` an RC QP uses).
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{AttrMask, ModifyError, PathMtu, QpAttr, QpCaps, QpState, RcQp};
/// let mut qp = RcQp::new(5, 0, QpCaps::default());
/// let mut attr = QpAttr { qp_state: QpState::Init, ..QpAttr::default() };
/// qp.modify(&attr, AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS)?;
/// // INIT -> RTR by hand (RcConnection writes the whole ladder): the
/// // peer's QP number and first PSN, the path and its MTU.
/// attr.qp_state = QpState::Rtr;
/// attr.dest_qp_num = 9;
/// attr.rq_psn = 0x1234;
/// attr.path_mtu = PathMtu::Mtu4096;
/// let rtr = AttrMask::STATE | AttrMask::AV | AttrMask::PATH_MTU | AttrMask::DEST_QPN
///     | AttrMask::RQ_PSN | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER;
/// // Only the fields named in the mask are used; leaving one out is refused.
/// assert!(matches!(qp.modify(&attr, rtr.minus(AttrMask::RQ_PSN)),
///     Err(ModifyError::MissingAttribute { attr: AttrMask::RQ_PSN, .. })));
/// qp.modify(&attr, rtr)?;
/// let now = qp.query();
/// assert_eq!((now.qp_state, now.dest_qp_num, now.rq_psn), (QpState::Rtr, 9, 0x1234));
/// # Ok::<(), ModifyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpAttr {
    /// Target state of a `modify`; the current state from `query`.
    pub qp_state: QpState,
    /// Checked against the real current state when in the mask.
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: PathMtu,
    /// The peer's QP number (24 bits).
    pub dest_qp_num: u32,
    /// Responder: next expected PSN (24 bits).
    pub rq_psn: u32,
    /// Requester: next PSN to send (24 bits).
    pub sq_psn: u32,
    /// Remote operations the peer may run on this QP (REMOTE_* flags).
    pub qp_access_flags: Access,
    /// P_Key table index (only index 0, P_Key 0xFFFF, exists).
    pub pkey_index: u16,
    /// Port (only port 1 exists).
    pub port_num: u8,
    /// Primary path.
    pub av: AddressVector,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout; 0 = wait forever.
    pub timeout: u8,
    /// Transport retries after a timeout or sequence NAK, 0..=7 (7 = infinite,
    /// as in Linux rxe).
    pub retry_cnt: u8,
    /// Retries after RNR NAKs, 0..=7 (7 = infinite).
    pub rnr_retry: u8,
    /// RNR timer code (0..=31) this QP's RNR NAKs ask the peer to wait.
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomics this QP may have as requester.
    pub max_rd_atomic: u8,
    /// READ/atomic responder resources this QP keeps for the peer.
    pub max_dest_rd_atomic: u8,
    /// UDP source port of every packet this QP sends.
    pub udp_sport: u16,
    /// Q_Key (UD QPs only).
    pub qkey: u32,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: PathMtu::Mtu1024,
            dest_qp_num: 0,
            rq_psn: 0,
            sq_psn: 0,
            qp_access_flags: Access::NONE,
            pkey_index: 0,
            port_num: 1,
            av: AddressVector::default(),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            udp_sport: 0xc000,
            qkey: 0,
        }
    }
}

/// Most READ/atomics outstanding in either direction (rxe's `max_qp_rd_atom`).
pub const MAX_RD_ATOMIC: u8 = 128;

/// Queue sizes and flags fixed when a QP is created.
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{QpCaps, RcQp};
/// // A deep send queue, SGE lists of 2, no inline data; completions only when asked.
/// let caps = QpCaps { max_send_wr: 1024, max_send_sge: 2, max_inline_data: 0, sq_sig_all: false };
/// let qp = RcQp::new(1, 0, caps);
/// assert_eq!(qp.caps().max_send_wr, 1024);
/// assert_eq!(QpCaps::default().max_inline_data, 256);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpCaps {
    /// Most send requests outstanding (posted, not yet completed).
    pub max_send_wr: u32,
    /// Most SGEs per send request.
    pub max_send_sge: u32,
    /// Most inline bytes per send request.
    pub max_inline_data: u32,
    /// Every send request completes, signaled or not.
    pub sq_sig_all: bool,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 128,
            max_send_sge: 8,
            max_inline_data: 256,
            sq_sig_all: false,
        }
    }
}

/// Why a `modify` was refused. The QP is unchanged.
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{AttrMask, ModifyError, QpAttr, QpCaps, QpState, RcQp};
/// let mut qp = RcQp::new(1, 0, QpCaps::default());
/// // RESET -> RTS skips INIT and RTR: refused, the QP stays in RESET.
/// let rts = QpAttr { qp_state: QpState::Rts, ..QpAttr::default() };
/// let err = qp.modify(&rts, AttrMask::STATE).unwrap_err();
/// assert_eq!(err, ModifyError::IllegalTransition { from: QpState::Reset, to: QpState::Rts });
/// assert_eq!(err.to_string(), "transition Reset -> Rts is not allowed");
/// assert_eq!(qp.state(), QpState::Reset);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum ModifyError {
    /// The IBTA does not allow this transition.
    #[error("transition {from:?} -> {to:?} is not allowed")]
    IllegalTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// A required attribute is not in the mask.
    #[error("{from:?} -> {to:?} requires attribute {attr}")]
    MissingAttribute {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// The first missing attribute.
        attr: AttrMask,
    },
    /// An attribute in the mask that this transition does not accept.
    #[error("{from:?} -> {to:?} does not accept attribute {attr}")]
    UnexpectedAttribute {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// The first unexpected attribute.
        attr: AttrMask,
    },
    /// An attribute value out of range.
    #[error("attribute {attr}: value {value} is out of range")]
    InvalidValue {
        /// The attribute.
        attr: AttrMask,
        /// Its value.
        value: u64,
    },
    /// The path MTU is larger than the port's active MTU (what the link
    /// can carry).
    #[error(
        "path MTU {} is above the port's active MTU {} (the interface's MTU cannot carry it)",
        requested.bytes(),
        active.bytes()
    )]
    PathMtuAboveActive {
        /// The path MTU asked for.
        requested: PathMtu,
        /// The port's active MTU.
        active: PathMtu,
    },
    /// `cur_qp_state` was given and is not the current state.
    #[error("cur_qp_state {claimed:?} but the QP is in {actual:?}")]
    CurrentStateMismatch {
        /// What the caller said.
        claimed: QpState,
        /// The real state.
        actual: QpState,
    },
}

/// Required and optional attributes of a transition, or `None` if illegal.
pub fn transition_rules(from: QpState, to: QpState) -> Option<(AttrMask, AttrMask)> {
    use QpState::*;
    const A: AttrMask = AttrMask::NONE;
    let m = |bits: &[AttrMask]| bits.iter().fold(A, |acc, b| acc | *b);
    Some(match (from, to) {
        (_, Reset) => (A, A),
        (Reset, Err) => return None,
        (_, Err) => (A, A),
        (Reset, Init) => (
            m(&[AttrMask::PKEY_INDEX, AttrMask::PORT, AttrMask::ACCESS_FLAGS]),
            A,
        ),
        (Init, Init) => (
            A,
            m(&[AttrMask::PKEY_INDEX, AttrMask::PORT, AttrMask::ACCESS_FLAGS]),
        ),
        (Init, Rtr) => (
            m(&[
                AttrMask::AV,
                AttrMask::PATH_MTU,
                AttrMask::DEST_QPN,
                AttrMask::RQ_PSN,
                AttrMask::MAX_DEST_RD_ATOMIC,
                AttrMask::MIN_RNR_TIMER,
            ]),
            m(&[
                AttrMask::ACCESS_FLAGS,
                AttrMask::PKEY_INDEX,
                AttrMask::UDP_SPORT,
            ]),
        ),
        (Rtr, Rts) => (
            m(&[
                AttrMask::SQ_PSN,
                AttrMask::TIMEOUT,
                AttrMask::RETRY_CNT,
                AttrMask::RNR_RETRY,
                AttrMask::MAX_QP_RD_ATOMIC,
            ]),
            m(&[
                AttrMask::CUR_STATE,
                AttrMask::ACCESS_FLAGS,
                AttrMask::MIN_RNR_TIMER,
            ]),
        ),
        (Rts, Rts) | (Sqd, Rts) => (
            A,
            m(&[
                AttrMask::CUR_STATE,
                AttrMask::ACCESS_FLAGS,
                AttrMask::MIN_RNR_TIMER,
            ]),
        ),
        (Sqe, Rts) => (A, m(&[AttrMask::CUR_STATE, AttrMask::ACCESS_FLAGS])),
        (Rts, Sqd) => (A, A),
        (Sqd, Sqd) => (
            A,
            m(&[
                AttrMask::AV,
                AttrMask::ACCESS_FLAGS,
                AttrMask::PKEY_INDEX,
                AttrMask::MIN_RNR_TIMER,
                AttrMask::TIMEOUT,
                AttrMask::RETRY_CNT,
                AttrMask::RNR_RETRY,
                AttrMask::MAX_QP_RD_ATOMIC,
                AttrMask::MAX_DEST_RD_ATOMIC,
                AttrMask::UDP_SPORT,
            ]),
        ),
        _ => return None,
    })
}

/// Checks a `modify` against the transition table and value ranges.
pub fn check_modify(
    current: QpState,
    attr: &QpAttr,
    mask: AttrMask,
) -> Result<QpState, ModifyError> {
    check_against(transition_rules, current, attr, mask)
}

/// Required and optional attributes of a UD QP's transition, or `None` if
/// illegal. UD has no peer: INIT takes the Q_Key (with the P_Key index and
/// port), RTR nothing, RTS the first PSN; the Q_Key may change on the way.
///
/// # Example
///
/// ```
/// use ndverbs_proto::rc::{ud_transition_rules, AttrMask, QpState};
/// let (required, _) = ud_transition_rules(QpState::Reset, QpState::Init).unwrap();
/// assert_eq!(required, AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY);
/// let (required, optional) = ud_transition_rules(QpState::Init, QpState::Rtr).unwrap();
/// assert!(required.is_empty() && !optional.contains(AttrMask::AV));
/// ```
pub fn ud_transition_rules(from: QpState, to: QpState) -> Option<(AttrMask, AttrMask)> {
    use QpState::*;
    const A: AttrMask = AttrMask::NONE;
    let init = AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY;
    Some(match (from, to) {
        (_, Reset) => (A, A),
        (Reset, Err) => return None,
        (_, Err) => (A, A),
        (Reset, Init) => (init, A),
        (Init, Init) => (A, init),
        (Init, Rtr) => (A, AttrMask::PKEY_INDEX | AttrMask::QKEY),
        (Rtr, Rts) => (AttrMask::SQ_PSN, AttrMask::CUR_STATE | AttrMask::QKEY),
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) => (A, AttrMask::CUR_STATE | AttrMask::QKEY),
        (Rts, Sqd) => (A, A),
        (Sqd, Sqd) => (A, AttrMask::PKEY_INDEX | AttrMask::QKEY),
        _ => return None,
    })
}

/// [`check_modify`] for a UD QP ([`ud_transition_rules`]).
pub fn check_ud_modify(
    current: QpState,
    attr: &QpAttr,
    mask: AttrMask,
) -> Result<QpState, ModifyError> {
    check_against(ud_transition_rules, current, attr, mask)
}

fn check_against(
    rules: fn(QpState, QpState) -> Option<(AttrMask, AttrMask)>,
    current: QpState,
    attr: &QpAttr,
    mask: AttrMask,
) -> Result<QpState, ModifyError> {
    let to = if mask.contains(AttrMask::STATE) {
        attr.qp_state
    } else {
        current
    };
    if mask.contains(AttrMask::CUR_STATE) && attr.cur_qp_state != current {
        return Err(ModifyError::CurrentStateMismatch {
            claimed: attr.cur_qp_state,
            actual: current,
        });
    }
    let (required, optional) =
        rules(current, to).ok_or(ModifyError::IllegalTransition { from: current, to })?;
    if let Some(attr) = required.minus(mask).first() {
        return Err(ModifyError::MissingAttribute {
            from: current,
            to,
            attr,
        });
    }
    let allowed = required
        .union(optional)
        .union(AttrMask::STATE)
        .union(AttrMask::CUR_STATE);
    if let Some(attr) = mask.minus(allowed).first() {
        return Err(ModifyError::UnexpectedAttribute {
            from: current,
            to,
            attr,
        });
    }
    check_values(attr, mask)?;
    Ok(to)
}

fn check_values(a: &QpAttr, mask: AttrMask) -> Result<(), ModifyError> {
    let checks: [(AttrMask, u64, u64); 12] = [
        (AttrMask::DEST_QPN, u64::from(a.dest_qp_num), 0xff_ffff),
        (AttrMask::RQ_PSN, u64::from(a.rq_psn), 0xff_ffff),
        (AttrMask::SQ_PSN, u64::from(a.sq_psn), 0xff_ffff),
        (AttrMask::TIMEOUT, u64::from(a.timeout), 31),
        (AttrMask::RETRY_CNT, u64::from(a.retry_cnt), 7),
        (AttrMask::RNR_RETRY, u64::from(a.rnr_retry), 7),
        (AttrMask::MIN_RNR_TIMER, u64::from(a.min_rnr_timer), 31),
        (
            AttrMask::MAX_QP_RD_ATOMIC,
            u64::from(a.max_rd_atomic),
            u64::from(MAX_RD_ATOMIC),
        ),
        (
            AttrMask::MAX_DEST_RD_ATOMIC,
            u64::from(a.max_dest_rd_atomic),
            u64::from(MAX_RD_ATOMIC),
        ),
        (AttrMask::PKEY_INDEX, u64::from(a.pkey_index), 0),
        (AttrMask::AV, u64::from(a.av.flow_label), 0xf_ffff),
        (
            AttrMask::ACCESS_FLAGS,
            u64::from(a.qp_access_flags.bits()),
            u64::from(Access::ALL.bits()),
        ),
    ];
    for (attr, value, max) in checks {
        if mask.contains(attr) && value > max {
            return Err(ModifyError::InvalidValue { attr, value });
        }
    }
    if mask.contains(AttrMask::PORT) && a.port_num != 1 {
        return Err(ModifyError::InvalidValue {
            attr: AttrMask::PORT,
            value: u64::from(a.port_num),
        });
    }
    Ok(())
}

/// The UDP source port Linux rxe uses for an RC QP with a GRH
/// (`rdma_get_udp_sport`): a hash of the flow label, or of both QP numbers
/// when the flow label is 0, folded into 0xC000..=0xFFFF.
pub fn rxe_udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let mut fl = flow_label & 0xf_ffff;
    if fl == 0 {
        let mut v = u64::from(lqpn) * u64::from(rqpn);
        v ^= v >> 20;
        v ^= v >> 40;
        fl = (v & 0xf_ffff) as u32;
    }
    (((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) | 0xc000) as u16
}

/// The UDP source port Linux rxe gives a QP before it has a path
/// (`0xC000 + hash_32(qpn, 14)`); QP1 gets 0xD872.
pub fn rxe_default_udp_sport(qpn: u32) -> u16 {
    let h = qpn.wrapping_mul(0x61c8_8647) >> 18;
    (0xc000 + (h & 0x3fff)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_sport_matches_rxe() {
        // rping capture: flow label 0x7e349 from the CM REQ, RC packets from port 58198.
        assert_eq!(rxe_udp_sport(0x7e349, 0x11, 0x11), 58198);
        assert_eq!(rxe_default_udp_sport(1), 0xd872);
    }

    #[test]
    fn mtu() {
        assert_eq!(PathMtu::Mtu256.bytes(), 256);
        assert_eq!(PathMtu::Mtu4096.bytes(), 4096);
        assert_eq!(PathMtu::at_most(1500 - 80), Some(PathMtu::Mtu1024));
        assert_eq!(PathMtu::at_most(100), None);
        assert_eq!(PathMtu::from_enum(3), Some(PathMtu::Mtu1024));
        assert_eq!(PathMtu::from_enum(6), None);
    }

    #[test]
    fn table() {
        let a = QpAttr::default();
        use QpState::{Reset, Rtr, Rts};
        assert_eq!(
            check_modify(Reset, &QpAttr { qp_state: Rtr, ..a }, AttrMask::STATE),
            Err(ModifyError::IllegalTransition {
                from: Reset,
                to: Rtr
            })
        );
        assert_eq!(
            check_modify(Rts, &a, AttrMask::SQ_PSN),
            Err(ModifyError::UnexpectedAttribute {
                from: Rts,
                to: Rts,
                attr: AttrMask::SQ_PSN
            })
        );
        assert_eq!(
            check_modify(
                Rts,
                &QpAttr {
                    min_rnr_timer: 32,
                    ..a
                },
                AttrMask::MIN_RNR_TIMER
            ),
            Err(ModifyError::InvalidValue {
                attr: AttrMask::MIN_RNR_TIMER,
                value: 32
            })
        );
        assert_eq!(
            format!("{:?}", AttrMask::AV | AttrMask::SQ_PSN),
            "av|sq_psn"
        );
    }

    #[test]
    fn the_ud_ladder_is_its_own_and_the_rc_one_takes_no_qkey() {
        use QpState::{Init, Reset, Rtr, Rts};
        let a = QpAttr::default();
        let init = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY;
        assert_eq!(
            check_ud_modify(
                Reset,
                &QpAttr {
                    qp_state: Init,
                    ..a
                },
                init
            ),
            Ok(Init)
        );
        // RC's INIT needs access flags and takes no Q_Key.
        assert_eq!(
            check_modify(
                Reset,
                &QpAttr {
                    qp_state: Init,
                    ..a
                },
                init
            ),
            Err(ModifyError::MissingAttribute {
                from: Reset,
                to: Init,
                attr: AttrMask::ACCESS_FLAGS
            })
        );
        // UD's RTR has no path, no destination, no PSN; its RTS needs the PSN.
        for attr in [
            AttrMask::AV,
            AttrMask::PATH_MTU,
            AttrMask::DEST_QPN,
            AttrMask::RQ_PSN,
        ] {
            assert_eq!(
                check_ud_modify(Init, &QpAttr { qp_state: Rtr, ..a }, AttrMask::STATE | attr),
                Err(ModifyError::UnexpectedAttribute {
                    from: Init,
                    to: Rtr,
                    attr
                })
            );
        }
        assert_eq!(
            check_ud_modify(Rtr, &QpAttr { qp_state: Rts, ..a }, AttrMask::STATE),
            Err(ModifyError::MissingAttribute {
                from: Rtr,
                to: Rts,
                attr: AttrMask::SQ_PSN
            })
        );
        // The ladder is not skipped, and the Q_Key may change in RTS.
        assert_eq!(ud_transition_rules(Reset, Rts), None);
        let q = AttrMask::QKEY;
        assert_eq!(check_ud_modify(Rts, &a, q), Ok(Rts));
        assert_eq!(AttrMask::QKEY.bits(), 1 << 6, "IBV_QP_QKEY");
    }
}
