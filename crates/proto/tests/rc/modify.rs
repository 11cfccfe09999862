//! QP state machine: legal and illegal `modify` calls, `query`, posting rules.

use crate::harness::*;
use ndverbs_proto::mem::Access;
use ndverbs_proto::rc::*;

fn attr(state: QpState) -> QpAttr {
    QpAttr {
        qp_state: state,
        ..QpAttr::default()
    }
}

/// The masks of the ladder's steps: RESET → INIT, INIT → RTR, RTR → RTS.
fn masks() -> [AttrMask; 3] {
    RcConnection::new(0).steps().map(|(_, mask)| mask)
}

#[test]
fn illegal_transitions_are_refused_and_change_nothing() {
    let mut qp = RcQp::new(5, 1, QpCaps::default());
    let [init_mask, rtr, rts] = masks();
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
    for to in [Rtr, Rts, Sqd, Sqe, QpState::Err] {
        assert_eq!(
            qp.modify(&attr(to), AttrMask::STATE),
            Err(ModifyError::IllegalTransition { from: Reset, to })
        );
        assert_eq!(qp.state(), Reset);
    }
    // RESET -> INIT needs pkey, port and access.
    assert_eq!(
        qp.modify(
            &attr(Init),
            AttrMask::STATE | AttrMask::PORT | AttrMask::ACCESS_FLAGS
        ),
        Err(ModifyError::MissingAttribute {
            from: Reset,
            to: Init,
            attr: AttrMask::PKEY_INDEX
        })
    );
    // SQ_PSN does not belong to RESET -> INIT.
    assert_eq!(
        qp.modify(&attr(Init), init_mask | AttrMask::SQ_PSN),
        Err(ModifyError::UnexpectedAttribute {
            from: Reset,
            to: Init,
            attr: AttrMask::SQ_PSN
        })
    );
    // Only port 1 exists.
    assert_eq!(
        qp.modify(
            &QpAttr {
                port_num: 2,
                ..attr(Init)
            },
            init_mask
        ),
        Err(ModifyError::InvalidValue {
            attr: AttrMask::PORT,
            value: 2
        })
    );
    qp.modify(&attr(Init), init_mask).unwrap();
    assert_eq!(qp.state(), Init);
    // INIT -> RTS skips RTR.
    assert!(matches!(
        qp.modify(&attr(Rts), AttrMask::STATE),
        Err(ModifyError::IllegalTransition { .. })
    ));
    // INIT -> RTR lists its first missing attribute.
    let e = qp.modify(
        &attr(Rtr),
        AttrMask::STATE | AttrMask::AV | AttrMask::PATH_MTU,
    );
    assert_eq!(
        e,
        Err(ModifyError::MissingAttribute {
            from: Init,
            to: Rtr,
            attr: AttrMask::RQ_PSN
        })
    );
    assert_eq!(
        e.unwrap_err().to_string(),
        "Init -> Rtr requires attribute rq_psn"
    );
    // Out-of-range values.
    assert_eq!(
        qp.modify(
            &QpAttr {
                rq_psn: 1 << 24,
                ..attr(Rtr)
            },
            rtr
        ),
        Err(ModifyError::InvalidValue {
            attr: AttrMask::RQ_PSN,
            value: 1 << 24
        })
    );
    // cur_qp_state is checked.
    assert_eq!(
        qp.modify(
            &QpAttr {
                cur_qp_state: Rts,
                ..attr(Rtr)
            },
            rtr | AttrMask::CUR_STATE
        ),
        Err(ModifyError::CurrentStateMismatch {
            claimed: Rts,
            actual: Init
        })
    );
    qp.modify(&attr(Rtr), rtr).unwrap();
    assert_eq!(
        qp.modify(
            &QpAttr {
                retry_cnt: 8,
                ..attr(Rts)
            },
            rts
        ),
        Err(ModifyError::InvalidValue {
            attr: AttrMask::RETRY_CNT,
            value: 8
        })
    );
    qp.modify(&attr(Rts), rts).unwrap();
    // RTS -> RTS may change access flags and min_rnr_timer, not the PSNs.
    qp.modify(
        &QpAttr {
            min_rnr_timer: 3,
            ..attr(Rts)
        },
        AttrMask::MIN_RNR_TIMER,
    )
    .unwrap();
    assert_eq!(qp.query().min_rnr_timer, 3);
    assert!(matches!(
        qp.modify(&attr(Rts), AttrMask::RQ_PSN),
        Err(ModifyError::UnexpectedAttribute { .. })
    ));
    // RTS -> SQD -> RTS, RTS -> ERR -> RESET -> INIT.
    qp.modify(&attr(Sqd), AttrMask::STATE).unwrap();
    qp.modify(&attr(Rts), AttrMask::STATE).unwrap();
    assert!(matches!(
        qp.modify(&attr(Init), AttrMask::STATE),
        Err(ModifyError::IllegalTransition { .. })
    ));
    qp.modify(&attr(QpState::Err), AttrMask::STATE).unwrap();
    assert!(matches!(
        qp.modify(&attr(Rts), AttrMask::STATE),
        Err(ModifyError::IllegalTransition { .. })
    ));
    qp.modify(&attr(Reset), AttrMask::STATE).unwrap();
    assert_eq!(qp.state(), Reset);
    assert_eq!(qp.error_cause(), None);
    qp.modify(&attr(Init), masks()[0]).unwrap();
}

#[test]
fn query_and_udp_sport() {
    let cfg = Config::default();
    let mut qp = RcQp::new(0x11, 1, QpCaps::default());
    assert_eq!(qp.query().udp_sport, rxe_default_udp_sport(0x11));
    connect(&mut qp, 0x22, 0x1234, 0x5678, &cfg);
    let q = qp.query();
    assert_eq!(q.qp_state, QpState::Rts);
    assert_eq!((q.rq_psn, q.sq_psn), (0x1234, 0x5678));
    assert_eq!(q.dest_qp_num, 0x22);
    assert_eq!(q.path_mtu, cfg.mtu);
    // No flow label: hash of both QPNs, as rxe.
    assert_eq!(q.udp_sport, rxe_udp_sport(0, 0x11, 0x22));
    assert!(q.udp_sport >= 0xc000);
}

#[test]
fn posting_rules() {
    let mut qp = RcQp::new(
        3,
        1,
        QpCaps {
            max_send_wr: 2,
            max_send_sge: 1,
            max_inline_data: 16,
            sq_sig_all: false,
        },
    );
    let mut rq = RecvQueue::new(1, 1);
    assert_eq!(
        qp.post_send(SendWr::new(1, SendOp::Send, vec![])),
        Err(PostError::InvalidState(QpState::Reset))
    );
    assert_eq!(
        qp.post_recv(&mut rq, RecvWr::new(1, vec![])),
        Err(PostError::InvalidState(QpState::Reset))
    );
    let cfg = Config {
        max_rd_atomic: 0,
        ..Config::default()
    };
    connect(&mut qp, 4, 0, 0, &cfg);
    let sge = ndverbs_proto::mem::Sge::new(0, 8, 1);
    assert_eq!(
        qp.post_send(SendWr::new(1, SendOp::Send, vec![sge, sge])),
        Err(PostError::TooManySges { given: 2, max: 1 })
    );
    assert_eq!(
        qp.post_send(SendWr::new_inline(1, SendOp::Send, vec![0; 17])),
        Err(PostError::InlineTooLarge { len: 17, max: 16 })
    );
    let remote = RemoteAddr::default();
    assert_eq!(
        qp.post_send(SendWr::new_inline(1, SendOp::Read(remote), vec![0; 8])),
        Err(PostError::InlineNotAllowed)
    );
    assert_eq!(
        qp.post_send(SendWr::new(
            1,
            SendOp::FetchAdd { remote, add: 1 },
            vec![ndverbs_proto::mem::Sge::new(0, 4, 1)]
        )),
        Err(PostError::AtomicLength(4))
    );
    assert_eq!(
        qp.post_send(SendWr::new(1, SendOp::Read(remote), vec![])),
        Err(PostError::NoRdAtomicCredits)
    );
    qp.post_send(SendWr::new(1, SendOp::Send, vec![])).unwrap();
    qp.post_send(SendWr::new(2, SendOp::Send, vec![])).unwrap();
    assert_eq!(
        qp.post_send(SendWr::new(3, SendOp::Send, vec![])),
        Err(PostError::QueueFull(2))
    );
    qp.post_recv(&mut rq, RecvWr::new(1, vec![])).unwrap();
    assert_eq!(
        qp.post_recv(&mut rq, RecvWr::new(2, vec![])),
        Err(PostError::QueueFull(1))
    );
    let _ = Access::NONE;
}

#[test]
fn reset_discards_and_reconnects() {
    let mut p = Pair::new(Config::default());
    let src = p.region(Side::A, 0x1000, pattern(1, 64), Access::NONE);
    p.a.qp
        .post_send(SendWr::new(1, SendOp::Send, vec![src.sge(0, 64)]))
        .unwrap();
    p.a.qp
        .modify(&attr(QpState::Reset), AttrMask::STATE)
        .unwrap();
    assert_eq!(p.a.qp.send_queue_len(), 0);
    assert_eq!(
        p.a.qp.poll_completion(),
        None,
        "RESET discards without completions"
    );
    let cfg = p.cfg;
    connect(&mut p.a.qp, QPN_B, cfg.psn_b, cfg.psn_a, &cfg);
    let dst = p.region(Side::B, 0x8000, vec![0; 64], Access::NONE);
    p.b.post_recv(RecvWr::new(1, vec![dst.sge(0, 64)]));
    p.a.post_send(SendWr::new(2, SendOp::Send, vec![src.sge(0, 64)]));
    p.run_idle(ndverbs_proto::time::Duration::from_secs(1));
    assert_eq!(p.a.send_wcs()[0].status, WcStatus::Success);
    assert_eq!(p.b.mem.bytes(dst.lkey), &pattern(1, 64)[..]);
}
