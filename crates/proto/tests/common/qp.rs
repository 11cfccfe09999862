//! Moving an RC QP to ERR as the engine does for the application or the
//! CM: the state change, then the receive queue flushed (the QP flushes its
//! own send queue). Shared by the RC tests and the connection simulation.

#![allow(dead_code)]

use ndverbs_proto::rc::{AttrMask, QpAttr, QpState, RcQp, RecvQueue};

/// Moves `qp` (in any state but RESET) to ERR and flushes `rq`; returns how
/// many receives were flushed.
#[track_caller]
pub fn move_to_error(qp: &mut RcQp, rq: &mut RecvQueue) -> usize {
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    qp.modify(&err, AttrMask::STATE).expect("QP to ERR");
    qp.flush_recv(rq)
}
